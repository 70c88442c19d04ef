"""The Python sessions in README.md, the manual pages under docs/manual/ that have one and
examples/tensor/README.md, run as doctests: each ```python block with `>>>` prompts must print
what the page shows (ELLIPSIS on, so a `...` stands for the rest of a long message). A page that
drifts from the code fails here. The registry pages' sessions (runtime/README.md) use modules
of examples/downstream, built against the packaged crates by scripts/downstream.sh: they run there
(examples/downstream/tests/test_crate_readmes.py, reading the READMEs packaged in the .crate
files); tests/python/test_crate_readmes.py checks that no other crate README has a session."""

import doctest
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MANUAL = ROOT / "docs" / "manual"
READMES = [
    ROOT / "README.md",
    MANUAL / "deriving.md",
    MANUAL / "importing.md",
    MANUAL / "guarantees.md",
    ROOT / "examples" / "tensor" / "README.md",
]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def sessions():
    for path in READMES:
        for i, block in enumerate(BLOCK.findall(path.read_text(encoding="utf-8"))):
            if ">>>" in block:
                yield pytest.param(path, block, id=f"{path.relative_to(ROOT)}#{i}")


@pytest.mark.parametrize(("path", "text"), list(sessions()))
def test_readme_session(path, text):
    test = doctest.DocTestParser().get_doctest(text, {}, str(path), str(path), 0)
    assert test.examples, "a session with no examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = []
    runner.run(test, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(out)


def test_every_listed_page_has_a_session():
    """A page listed above whose session was removed (or whose fence changed) would otherwise
    pass silently with nothing run."""
    assert {p for p, *_ in (s.values for s in sessions())} == set(READMES)

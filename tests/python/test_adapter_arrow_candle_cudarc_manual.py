"""The Python sessions of docs/manual/adapters-b.md (the arrow, candle and cudarc adapters) run as
doctests, as test_readme_sessions.py does for the other manual pages: each ```python block with
`>>>` prompts must print what the page shows (ELLIPSIS on)."""

import doctest
import re
from pathlib import Path

import pytest

import dlbind_demo as dd

PAGE = Path(__file__).resolve().parents[2] / "docs" / "manual" / "adapters-b.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
SESSIONS = [b for b in BLOCK.findall(PAGE.read_text(encoding="utf-8")) if ">>>" in b]


def test_the_page_has_sessions():
    assert len(SESSIONS) >= 2


@pytest.mark.parametrize("text", SESSIONS, ids=[f"adapters-b.md#{i}" for i in range(len(SESSIONS))])
def test_manual_session(text):
    needs = "arrow_from_pyarrow" if "arrow_" in text else "candle_arange"
    if not hasattr(dd.adapters, needs):
        pytest.skip(f"dlbind_demo built without the adapter this session uses ({needs})")
    test = doctest.DocTestParser().get_doctest(text, {}, str(PAGE), str(PAGE), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = []
    runner.run(test, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0, "".join(out)

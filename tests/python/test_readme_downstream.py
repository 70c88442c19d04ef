"""examples/downstream is exactly the README's code (issue 33): its `src/lib.rs` is the README's
`// src/lib.rs` block (`Samples`, the module `my_arrays`) and its `src/frame.rs` the README's
"Importing as your own type" block (`Frame`, the module `frames`), byte for byte, and its
Cargo.toml has the README's `[lib]` and `[dependencies]` lines. scripts/downstream.sh builds that
crate against the packaged crates and runs its tests, so the README's code is a crate that
compiles and works; this test fails when the README and the crate drift apart."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CRATE = ROOT / "examples" / "downstream"
README = (ROOT / "README.md").read_text(encoding="utf-8")


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def test_readme_rust_blocks_are_the_crate_source():
    rust = blocks("rust")
    assert len(rust) == 2, "the README shows two Rust blocks: a user's lib.rs and Frame"
    lib, frame = rust
    assert lib.startswith("// src/lib.rs\n")
    assert "struct Samples" in lib and "struct Frame" in frame
    for block, path in ((lib, "src/lib.rs"), (frame, "src/frame.rs")):
        source = (CRATE / path).read_text(encoding="utf-8")
        assert source == block, (
            f"examples/downstream/{path} differs from the README's block: the README shows "
            f"a user's code, and the downstream crate is that code, exactly (copy the block)"
        )


def test_the_crate_root_adds_only_modules_the_readme_does_not_show():
    root = (CRATE / "src" / "root.rs").read_text(encoding="utf-8")
    code = [ln for ln in root.splitlines() if ln.strip() and not ln.lstrip().startswith("//")]
    # image.rs and matrix.rs: the crate READMEs' blocks (tests/python/test_crate_readmes.py).
    assert code == ['include!("lib.rs");', "mod checks;", "mod frame;", "mod image;", "mod matrix;"]
    assert {p.name for p in (CRATE / "src").iterdir()} == {
        "root.rs", "lib.rs", "frame.rs", "checks.rs", "image.rs", "matrix.rs"
    }


def test_readme_cargo_lines_are_the_crates():
    (toml_block,) = [b for b in blocks("toml") if "[dependencies]" in b]
    readme = tomllib.loads(toml_block)
    cargo = tomllib.loads((CRATE / "Cargo.toml").read_text(encoding="utf-8"))
    assert readme["lib"]["crate-type"] == cargo["lib"]["crate-type"]
    assert readme["dependencies"] == cargo["dependencies"]
    # The lib's name is the README's `#[pymodule]` (`my_arrays`), as maturin requires.
    assert f"fn {cargo['lib']['name']}(" in blocks("rust")[0]

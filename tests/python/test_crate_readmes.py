"""The registry pages (issue 43): each published crate's README (the `readme` of its Cargo.toml,
packaged in its .crate and shown by crates.io) is current and tested.

- Their Rust blocks are files of examples/downstream, byte for byte (runtime/README.md's two,
  macros/README.md's one): scripts/downstream.sh builds that crate against the packaged crates
  and its tests (examples/downstream/tests/test_crate_readmes.py) run the packaged READMEs'
  Python sessions as doctests against those modules.
- runtime/README.md's feature table is runtime/Cargo.toml's `[features]`, less the internal ones
  named below with the reason.
- codegen/README.md's `dlbind` commands are the CLI's (scripts/downstream.sh runs them with the
  installed, packaged binary); its library sentence names `Builder` methods that exist.
- Links into the repository point at files that exist."""

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOWNSTREAM = ROOT / "examples" / "downstream"
CRATES = {"dlbind": ROOT / "runtime", "dlbind-macros": ROOT / "macros", "dlbind-codegen": ROOT / "codegen"}
# The downstream crate's file for each README's Rust blocks, in order.
RUST_BLOCKS = {
    "dlbind": ["src/image.rs", "src/matrix.rs"],
    "dlbind-macros": ["src/matrix.rs"],
    "dlbind-codegen": [],
}
# Features in runtime/Cargo.toml that the README does not offer, and why.
INTERNAL_FEATURES = {
    # The recording fake GPU runtime and the internal modules made public, for dlbind's own
    # integration tests (its dev-dependency turns it on); hidden from the docs, not covered by
    # semver: not for users.
    "test-util",
}


def readme(crate: str) -> str:
    return (CRATES[crate] / "README.md").read_text(encoding="utf-8")


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, re.S | re.M)


def cargo(crate: str) -> dict:
    return tomllib.loads((CRATES[crate] / "Cargo.toml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("crate", sorted(CRATES))
def test_the_readme_is_packaged(crate):
    package = cargo(crate)["package"]
    assert package["readme"] == "README.md"
    assert "README.md" in package["include"], "cargo package must ship the registry page"
    assert package["description"] and len(package["description"]) < 200


@pytest.mark.parametrize("crate", sorted(CRATES))
def test_rust_blocks_are_downstream_files(crate):
    rust = blocks(readme(crate), "rust")
    files = RUST_BLOCKS[crate]
    assert len(rust) == len(files), f"{crate}'s README has {len(rust)} Rust blocks, the test knows {files}"
    for block, path in zip(rust, files):
        source = (DOWNSTREAM / path).read_text(encoding="utf-8")
        assert source == block, (
            f"examples/downstream/{path} differs from {crate}'s README block: the crate is the "
            f"README's code, exactly (copy the block)"
        )


def test_downstream_root_compiles_every_readme_file():
    root = (DOWNSTREAM / "src" / "root.rs").read_text(encoding="utf-8")
    for path in {p for files in RUST_BLOCKS.values() for p in files}:
        assert f"mod {Path(path).stem};" in root
        # and its #[pymodule] is loaded by the downstream tests under its own name
        (module,) = re.findall(r"#\[pymodule[^\]]*\][^\n]*\n\s*fn (\w+)\(", (DOWNSTREAM / path).read_text())
        assert f'load("{module}")' in (DOWNSTREAM / "tests" / "conftest.py").read_text()


def test_macros_page_and_description_name_every_derive():
    derives = re.findall(r"#\[proc_macro_derive\((\w+)", (ROOT / "macros" / "src" / "lib.rs").read_text())
    assert derives
    description = cargo("dlbind-macros")["package"]["description"]
    for name in derives:
        assert f"#[derive({name})]" in description and f"#[derive({name})]" in readme("dlbind-macros")


def test_runtime_toml_block_is_the_downstream_crates():
    (block,) = blocks(readme("dlbind"), "toml")
    shown = tomllib.loads(block)
    crate = tomllib.loads((DOWNSTREAM / "Cargo.toml").read_text(encoding="utf-8"))
    assert shown["lib"]["crate-type"] == crate["lib"]["crate-type"]
    assert shown["dependencies"] == crate["dependencies"]


def test_sessions_only_where_the_downstream_tests_run_them():
    # examples/downstream/tests/test_crate_readmes.py runs the sessions of the READMEs packaged
    # with dlbind and dlbind-macros (the crates it unpacks); the runtime's shows both sections.
    assert len([b for b in blocks(readme("dlbind"), "python") if ">>>" in b]) == 2
    assert not [b for b in blocks(readme("dlbind-codegen"), "python") if ">>>" in b]
    for crate in CRATES:
        text = readme(crate)
        assert len(re.findall(r"^```python$", text, re.M)) == len(blocks(text, "python"))


def test_runtime_features_are_the_cargo_features():
    features = cargo("dlbind")["features"]
    default = set(features.pop("default"))
    assert INTERNAL_FEATURES <= set(features), f"stale INTERNAL_FEATURES: {INTERNAL_FEATURES - set(features)}"
    offered = set(features) - INTERNAL_FEATURES
    text = readme("dlbind")
    section = text.split("## Cargo features\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w-]+)`( \(default\))? \|", section, re.M)
    listed = {name for name, _ in rows}
    assert len(rows) == len(listed), "a feature listed twice"
    assert listed == offered, (
        f"runtime/README.md's features differ from runtime/Cargo.toml's: missing "
        f"{sorted(offered - listed)}, not offered {sorted(listed - offered)} (an internal feature "
        f"goes into INTERNAL_FEATURES with its reason)"
    )
    assert {name for name, d in rows if d} == default
    for name in INTERNAL_FEATURES:
        assert f"`{name}`" not in text, f"the registry page advertises the internal feature {name}"


def test_runtime_readme_names_the_dependencies_it_says():
    # Each adapter feature has its module under runtime/src/adapters; `cudarc` turns on `cuda`.
    features = cargo("dlbind")["features"]
    assert "cuda" in features["cudarc"]
    text = readme("dlbind")
    for name in ("ndarray", "image", "safetensors", "arrow", "candle", "cudarc"):
        assert f"`dlbind::adapters::{name}`" in text
        assert any((ROOT / "runtime" / "src" / "adapters").glob(f"{name}*")), name


def test_codegen_readme_commands_are_the_clis():
    main = (CRATES["dlbind-codegen"] / "src" / "main.rs").read_text(encoding="utf-8")
    usage = main.split('const USAGE: &str = "', 1)[1].split('";', 1)[0]
    commands = set(re.findall(r"^  dlbind (\w+)", usage, re.M))
    flags = set(re.findall(r"--[a-z]+", usage))
    (sh,) = blocks(readme("dlbind-codegen"), "sh")
    lines = [ln.split("#", 1)[0].split() for ln in sh.splitlines() if ln.startswith("dlbind ")]
    assert len(lines) >= 3
    assert {words[1] for words in lines} <= commands
    assert {w for words in lines for w in words if w.startswith("--")} <= flags
    assert "--project" in flags and "`--project FILE`" in readme("dlbind-codegen")
    builder = (CRATES["dlbind-codegen"] / "src" / "builder.rs").read_text(encoding="utf-8")
    for method in re.findall(r"`\.(\w+)\(", readme("dlbind-codegen")):
        assert f"pub fn {method}(" in builder, f"Builder::{method}"


@pytest.mark.parametrize("crate", sorted(CRATES))
def test_repository_links_exist(crate):
    repo = tomllib.loads((ROOT / "Cargo.toml").read_text(encoding="utf-8"))["workspace"]["package"]["repository"]
    links = re.findall(r"\]\((https?://[^)]+)\)", readme(crate))
    assert links
    for link in links:
        if link.startswith(repo):
            path = re.fullmatch(re.escape(repo) + r"/(?:blob|tree)/main/(.+)", link)
            assert path, link
            assert (ROOT / path[1]).exists(), link
        else:
            assert link.startswith(("https://docs.rs/", "https://dmlc.github.io/")), link

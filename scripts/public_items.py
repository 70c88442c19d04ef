#!/usr/bin/env python3
"""Counts the public items of the `dlbind` crate (issue 33's measure of its public surface).

    scripts/public_items.py            # builds rustdoc's JSON (RUSTC_BOOTSTRAP=1), then counts
    scripts/public_items.py FILE.json  # counts an existing dlbind.json
    scripts/public_items.py --list     # ... and lists every counted path

What is counted: every item reachable from the crate root through public paths (re-exports
followed), doc-hidden items excluded (rustdoc leaves them out): modules, structs, enums, unions,
traits, functions, type aliases, constants, statics, macros; each enum's variants; the items of
each inherent impl (methods, associated constants and types) and each public trait's own items.
Not counted: fields, and the items of trait impls (`impl Clone for X`), which add no name a user
must learn. The total, the count outside the generated `spec` module and the count in `tuning`
are printed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build() -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    subprocess.run(
        ["cargo", "rustdoc", "-q", "-p", "dlbind", "--lib", "--",
         "-Z", "unstable-options", "--output-format", "json"],
        cwd=ROOT, env=env, check=True,
    )
    return target / "doc" / "dlbind.json"


def kind_of(item: dict) -> str:
    inner = item["inner"]
    return next(iter(inner)) if isinstance(inner, dict) else inner


def count(doc: dict) -> list[tuple[str, str]]:
    index = doc["index"]
    seen: set[str] = set()
    out: list[tuple[str, str]] = []

    def visit(item_id, path: str) -> None:
        key = str(item_id)
        item = index.get(key)
        if item is None or item["crate_id"] != 0 or key in seen:
            return
        seen.add(key)
        kind = kind_of(item)
        inner = item["inner"][kind] if isinstance(item["inner"], dict) else None
        if kind == "use":
            target = inner.get("id")
            if target is not None:
                name = inner["name"] if not inner.get("is_glob") else None
                tgt = index.get(str(target))
                if tgt is not None and kind_of(tgt) == "module" and inner.get("is_glob"):
                    for child in tgt["inner"]["module"]["items"]:
                        visit(child, path)
                else:
                    visit(target, path)
            return
        name = item.get("name") or ""
        here = f"{path}::{name}" if path else name
        out.append((kind, here))
        if kind == "module":
            # Definitions before re-exports, the prelude last: each item is listed under its
            # own module's path.
            def order(child):
                c = index.get(str(child))
                if c is None:
                    return 2
                return 2 if c.get("name") == "prelude" else (1 if kind_of(c) == "use" else 0)
            for child in sorted(inner["items"], key=order):
                visit(child, here)
        elif kind in ("struct", "enum", "union"):
            for v in inner.get("variants", []):
                visit(v, here)
            for impl_id in inner.get("impls", []):
                impl = index.get(str(impl_id))
                if impl is None:
                    continue
                im = impl["inner"]["impl"]
                if im.get("trait") is None and not im.get("is_synthetic"):
                    for child in im["items"]:
                        visit(child, here)
        elif kind == "trait":
            for child in inner["items"]:
                visit(child, here)

    visit(doc["root"], "")
    return out


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    path = Path(args[0]) if args else build()
    items = count(json.loads(path.read_text()))
    items = [(k, p) for k, p in items if p != "dlbind"]  # the crate root itself
    if "--list" in sys.argv:
        for k, p in sorted(items, key=lambda x: x[1]):
            print(f"{k:12} {p}")
    total = len(items)
    outside_spec = sum(1 for _, p in items if not p.startswith("dlbind::spec"))
    tuning = sum(1 for _, p in items if p.startswith("dlbind::tuning::"))
    print(f"public items: {total} ({outside_spec} outside `spec`, {tuning} in `tuning`)")
    print("by kind:", dict(Counter(k for k, _ in items).most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

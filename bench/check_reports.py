#!/usr/bin/env python3
"""Benchmark reports hold no absolute paths of the machine that wrote them (issue 52, item 5).

    python3 bench/check_reports.py            # scans bench/results*.md; exit 1 naming each hit
    python3 bench/check_reports.py FILE ...   # scans these files instead

A report names a module or a command's path relative to the repository root (`.venv/lib/...`,
`bench/...`) or through a variable (`$TMPDIR/...`, `$VIRTUAL_ENV/...`, `$PREFIX/...`), so anyone
can re-run what it shows. Flagged: any absolute path under /work/, /home/, /root/, /tmp/,
/var/tmp/, /usr/, /opt/, /mnt/, /srv/, /private/ or /Users/ that is not right after a variable
(`${TMPDIR:-/var/tmp}` is fine: the default of a variable). Needs only the standard library.

`portable(path)` is what the report writers (bench_instructions.py, bench_dlpack.py) print for a
path: relative to the repository when under it, else `$VIRTUAL_ENV/...` (the running venv),
`$TMPDIR/...` (TMPDIR, or /var/tmp and /tmp when it is unset), `$PREFIX/...` (sys.base_prefix),
else the file name alone.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_PREFIXES = ("work", "home", "root", "tmp", "var/tmp", "usr", "opt", "mnt", "srv", "private", "Users")
# An absolute path: a prefix at a word boundary that is not part of a relative path, a URL or a
# variable's default (`${X:-/var/tmp}`).
_ABS = re.compile(r"(?<![\w.$:/~-])/(?:%s)/[^\s`'\")|,;]*" % "|".join(re.escape(p) for p in _PREFIXES))
_DEFAULT = re.compile(r"\$\{\w+:-$")


def scan_text(text: str):
    """[(line number, path)] of every absolute machine path in text."""
    hits = []
    for i, line in enumerate(text.splitlines(), 1):
        for m in _ABS.finditer(line):
            if _DEFAULT.search(line[:m.start()]):
                continue
            hits.append((i, m.group(0)))
    return hits


def _under(path: Path, base) -> str | None:
    if not base:
        return None
    try:
        return path.relative_to(Path(base).resolve()).as_posix()
    except (ValueError, OSError):
        return None


def portable(path) -> str:
    """`path` as a report may print it (see the module docstring)."""
    if path is None:
        return ""
    p = Path(path)
    try:
        p = p.resolve()
    except OSError:
        pass
    rel = _under(p, ROOT)
    if rel is not None:
        return rel
    for var, base in (("VIRTUAL_ENV", os.environ.get("VIRTUAL_ENV") or (sys.prefix if sys.prefix != sys.base_prefix else None)),
                      ("TMPDIR", os.environ.get("TMPDIR")), ("TMPDIR", "/var/tmp"), ("TMPDIR", "/tmp"),
                      ("TMPDIR", tempfile.gettempdir()), ("PREFIX", sys.base_prefix)):
        rel = _under(p, base)
        if rel is not None:
            return f"${var}/{rel}"
    return p.name


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    files = [Path(a) for a in argv] or sorted(ROOT.glob("bench/results*.md"))
    bad = 0
    for f in files:
        for line, path in scan_text(f.read_text(encoding="utf-8", errors="replace")):
            name = portable(f) if f.is_absolute() else f.as_posix()
            print(f"{name}:{line}: absolute machine path {path}")
            bad += 1
    if bad:
        print(f"check_reports: {bad} absolute path(s) in {len(files)} report(s); print them relative to the "
              "repository or through $TMPDIR/$VIRTUAL_ENV (bench/check_reports.py's portable())")
        return 1
    print(f"check_reports: {len(files)} report(s), no absolute machine paths")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Keeps docs/status.md's "missing" rows honest.

Every table row of status.md whose last cell starts with "missing" must name at least one symbol
as `xj::NAME`; each NAME must be absent from the public headers (no whole-word occurrence in
include/). When a feature lands, this test fails until its row is updated.

usage: check_status_missing.py STATUS.md INCLUDE_DIR
"""
import pathlib
import re
import sys


def main() -> int:
    status, include = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    headers = {p: p.read_text(encoding="utf-8") for p in include.rglob("*.hpp")}
    failures = 0
    rows = 0
    for line in status.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2 or not cells[-1].startswith("missing"):
            continue
        rows += 1
        names = re.findall(r"`xj::([A-Za-z_][A-Za-z0-9_]*)`", line)
        if not names:
            print(f"status.md: a 'missing' row names no `xj::SYMBOL`: {line}")
            failures += 1
        for name in names:
            found = [str(p) for p, text in headers.items() if re.search(rf"\b{re.escape(name)}\b", text)]
            if found:
                print(f"status.md says xj::{name} is missing, but it appears in {', '.join(found)}: {line}")
                failures += 1
    print(f"{rows} 'missing' rows checked, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

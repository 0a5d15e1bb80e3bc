#!/usr/bin/env python3
"""Every source path a contributor doc names in backticks exists, so the docs cannot point at a
file that moved. A path is a backticked word ending in .cpp, .hpp, .py or .md that contains a
slash (`transforms/scan.cpp`, `src/loops/loops.hpp`); it is looked up relative to the project
root, then under src/ and transforms/ (the docs also write `loops/scan.cpp` for
src/loops/scan.cpp). Usage: check_doc_paths.py ROOT DOC..."""
import os
import re
import sys


def main():
    root, docs = sys.argv[1], sys.argv[2:]
    missing, checked = [], 0
    for doc in docs:
        text = open(doc, encoding="utf-8").read()
        for path in sorted(set(re.findall(r"`([\w./-]+/[\w.-]+\.(?:cpp|hpp|py|md))`", text))):
            if re.search(r"\bfoo\b", path):  # the docs' placeholder for the new thing
                continue
            checked += 1
            if not any(os.path.exists(os.path.join(root, base, path)) for base in ("", "src", "transforms", "include")):
                missing.append(f"{doc}: `{path}` does not exist")
    for m in missing:
        print(m)
    print(f"{checked} paths checked, {len(missing)} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())

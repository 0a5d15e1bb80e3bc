#!/usr/bin/env python3
"""Every primitive of XJAX_PRIMITIVE_TABLE (include/xjax/primitives.hpp) has its line in
docs/jaxpr.md (a table row naming `name` or `name[...]`) and in docs/primitives.md (a table row
whose first cell names it). Usage: check_primitive_docs.py PRIMITIVES_HPP JAXPR_MD PRIMITIVES_MD"""
import re
import sys


def primitives(header):
    text = open(header, encoding="utf-8").read()
    table = text[text.index("#define XJAX_PRIMITIVE_TABLE"):]
    table = table[:table.index("\n\n")]
    names = re.findall(r"X\((\w+), \w+, \w+, \w+, \w+, Y\)", table)
    # jaxprs print `while_` as `while`.
    return [n[:-1] if n.endswith("_") else n for n in names]


def table_rows(path):
    return [line for line in open(path, encoding="utf-8") if line.startswith("|")]


def main():
    header, jaxpr_md, primitives_md = sys.argv[1:4]
    names = primitives(header)
    if len(names) < 10:
        print(f"found only {len(names)} primitives in {header}: the table's format changed?")
        return 1
    jaxpr_rows = table_rows(jaxpr_md)
    first_cells = [row.split("|")[1] for row in table_rows(primitives_md)]
    missing = []
    for n in names:
        if not any(re.search(r"`" + re.escape(n) + r"(`|\[)", row) for row in jaxpr_rows):
            missing.append(f"{jaxpr_md}: no row for `{n}`")
        if not any(re.search(r"(^|[\s`])" + re.escape(n) + r"($|[\s`])", cell) for cell in first_cells):
            missing.append(f"{primitives_md}: no row whose first cell names {n}")
    for m in missing:
        print(m)
    print(f"{len(names)} primitives, {len(missing)} missing lines")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())

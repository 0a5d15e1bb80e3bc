#!/usr/bin/env python3
"""Compiles the C++ code blocks of a Markdown file, so the documentation never rots.

The ```c++ blocks of one file, in order, form one translation unit (the docs are written that
way: later blocks use what earlier ones define). A block that defines main() is kept as is;
otherwise the file given with --main is appended (a main that runs the doc's functions and
checks the results the doc states), or else an empty main. The program is compiled, linked
against libxjax and run.

usage: check_code_blocks.py DOC.md OUTDIR [--main FILE] -- COMPILER... -- ARGS...
(COMPILER may be several words, e.g. `ccache c++`.)
"""
import pathlib
import re
import subprocess
import sys


USAGE = "usage: check_code_blocks.py DOC.md OUTDIR [--main FILE] -- COMPILER... -- ARGS..."


def main() -> int:
    if "--" not in sys.argv or sys.argv.index("--") < 3:
        print(USAGE)
        return 2
    sep = sys.argv.index("--")
    doc, outdir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    options = sys.argv[3:sep]
    checks = pathlib.Path(options[1]) if options[:1] == ["--main"] and len(options) == 2 else None
    rest = sys.argv[sep + 1:]
    if (options and checks is None) or "--" not in rest or rest.index("--") == 0:
        print(USAGE)
        return 2
    compiler, args = rest[:rest.index("--")], rest[rest.index("--") + 1:]
    text = doc.read_text(encoding="utf-8")
    blocks = re.findall(r"^```c\+\+\n(.*?)^```", text, flags=re.S | re.M)
    if not blocks:
        print(f"{doc}: no c++ blocks")
        return 1
    source = "\n".join(blocks)
    if not re.search(r"\bint\s+main\s*\(", source):
        source += "\n" + (checks.read_text(encoding="utf-8") if checks else "int main() {}") + "\n"
    elif checks:
        print(f"{doc}: a code block defines main(), so the checks of {checks} would not run")
        return 1
    outdir.mkdir(parents=True, exist_ok=True)
    cpp = outdir / (doc.stem + "_blocks.cpp")
    exe = outdir / (doc.stem + "_blocks")
    cpp.write_text(source, encoding="utf-8")
    cmd = compiler + [str(cpp), "-o", str(exe)] + args
    print(" ".join(cmd))
    if subprocess.call(cmd) != 0:
        print(f"{doc}: the code blocks ({len(blocks)}) do not compile; see {cpp}")
        return 1
    if subprocess.call([str(exe)], cwd=outdir) != 0:
        print(f"{doc}: the program made of its code blocks failed")
        return 1
    print(f"{doc}: {len(blocks)} code blocks compiled and ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())

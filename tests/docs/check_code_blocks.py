#!/usr/bin/env python3
"""Compiles the C++ code blocks of a Markdown file, so the documentation never rots.

The ```c++ blocks of one file, in order, form one translation unit (the docs are written that
way: later blocks use what earlier ones define). A block that defines main() is kept as is;
otherwise an empty main is appended. The program is compiled, linked against libxjax and run.

usage: check_code_blocks.py DOC.md OUTDIR -- COMPILER ARGS...
"""
import pathlib
import re
import subprocess
import sys


def main() -> int:
    sep = sys.argv.index("--")
    doc, outdir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    compiler = sys.argv[sep + 1:]
    text = doc.read_text(encoding="utf-8")
    blocks = re.findall(r"^```c\+\+\n(.*?)^```", text, flags=re.S | re.M)
    if not blocks:
        print(f"{doc}: no c++ blocks")
        return 1
    source = "\n".join(blocks)
    if not re.search(r"\bint\s+main\s*\(", source):
        source += "\nint main() {}\n"
    outdir.mkdir(parents=True, exist_ok=True)
    cpp = outdir / (doc.stem + "_blocks.cpp")
    exe = outdir / (doc.stem + "_blocks")
    cpp.write_text(source, encoding="utf-8")
    # The compiler may be several words (meson gives "ccache c++"): the source goes after them,
    # before the flags, so that the libraries after it are linked.
    words = next((i for i, a in enumerate(compiler) if a.startswith("-")), len(compiler))
    cmd = compiler[:words] + [str(cpp), "-o", str(exe)] + compiler[words:]
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

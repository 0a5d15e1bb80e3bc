#!/usr/bin/env python3
"""Checks what libxjax.so exports (src/libxjax.map): every exported symbol is xjax's own (no
standard-library or nlohmann::json copy another library could bind to), and the vtable and
typeinfo of a class whose key function is in the library are among them (user code that derives
from or constructs such a class, as every transform call does with detail::FlatFn's body, links
against them), and so is the guard of every exported static variable. A regression test: the
map's quoted patterns once matched literally and exported no vtable, typeinfo or guard at all.

Usage: check_exports.py LIBXJAX. Skips (exit 77) for a static library."""
import re
import subprocess
import sys

OURS = re.compile(r"^(xjax::|(vtable|typeinfo|typeinfo name|guard variable|VTT) for xjax::"
                  r"|TLS (init|wrapper) function for xjax::)")
REQUIRED = ["vtable for xjax::detail::FlatFn::Body", "typeinfo for xjax::detail::FlatFn::Body"]


def main():
    lib = sys.argv[1]
    if not lib.endswith(".so") and ".so." not in lib:
        print("not a shared library: skipped")
        return 77
    out = subprocess.run(["nm", "-D", "--defined-only", "-C", lib], capture_output=True, text=True,
                         check=True).stdout
    names = [line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2]
    foreign = [n for n in names if not OURS.match(n)]
    missing = [n for n in REQUIRED if n not in names]
    # An exported static variable whose guard stays local: the program and the library would
    # each keep a guard, and could each construct the one variable.
    every = subprocess.run(["nm", "--defined-only", "-C", lib], capture_output=True, text=True, check=True).stdout
    exported = set(names)
    guarded = {line.split(" ", 2)[2][len("guard variable for "):] for line in every.splitlines()
               if line.count(" ") >= 2 and line.split(" ", 2)[2].startswith("guard variable for ")}
    missing += ["guard variable for " + v for v in sorted(guarded & exported)
                if "guard variable for " + v not in exported]
    for n in foreign[:20]:
        print("exported, not xjax's:", n)
    for n in missing:
        print("not exported:", n)
    print(f"{len(names)} exported symbols, {len(foreign)} not xjax's, {len(missing)} required missing")
    return 1 if foreign or missing else 0


if __name__ == "__main__":
    sys.exit(main())

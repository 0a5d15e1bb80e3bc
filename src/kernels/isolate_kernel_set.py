#!/usr/bin/env python3
"""Gives one kernel set its own copy of every inline function it emits (src/kernels/kernel_sets.hpp).

Each kernel set's files are compiled with that set's -march flags. An inline function or template
instantiation that a file emits out of line (std::vector's constructor, an xjax header's inline
helper, an xsimd routine) is a weak symbol: the linker keeps one copy of each name for the whole
library, and code built for the baseline ISA may then call a copy built with AVX-512. That happened
twice (a std::vector constructor emitted only by the AVX2 set at -O1, an inline index-table
routine): linking the baseline set first does not help when the baseline set inlines what a wider
set emits.

This links the set's archive into one object (`ld -r`) and renames, in that object only, every weak
function it defines and every vtable (`_ZN...` -> `_ZN....xjax_set_<name>`, which c++filt shows as
`[clone .xjax_set_<name>]`): definitions and references together, so the set's code calls its own
copies and no other object can bind to them. Weak *objects* (an inline function's static local,
typeinfo, guard variables) keep their names: there must be one of each in the program, and they
hold no code.

The result is an archive holding that one object (meson links it whole into libxjax).

Usage: isolate_kernel_set.py SET_NAME ARCHIVE OUTPUT_ARCHIVE [LD NM OBJCOPY AR]"""
import os
import subprocess
import sys


def defined_symbols(nm, obj):
    """(name, nm type) of each symbol `obj` defines."""
    listing = subprocess.run([nm, "-P", "--defined-only", obj], capture_output=True, text=True, check=True).stdout
    return [tuple(line.split()[:2]) for line in listing.splitlines() if len(line.split()) >= 2]


def renamed(symbol, kind):
    """A weak function (W) or a vtable (V, _ZTV...): the set gets its own copy."""
    return kind == "W" or (kind == "V" and symbol.startswith("_ZTV"))


def main():
    if len(sys.argv) not in (4, 8):
        print(__doc__)
        return 2
    name, archive, output = sys.argv[1:4]
    ld, nm, objcopy, ar = sys.argv[4:8] if len(sys.argv) == 8 else ("ld", "nm", "objcopy", "ar")
    merged = output + ".merged.o"
    isolated = output + ".o"
    mapping = output + ".renames"
    # --force-group-allocation: no COMDAT groups in the result. A group keeps its original
    # signature (`_ZN4xjax5ErrorD5Ev`) after its symbols are renamed, and the final link would drop
    # this set's group in favour of another object's, taking the renamed copies with it.
    subprocess.run([ld, "-r", "--force-group-allocation", "-o", merged, "--whole-archive", archive], check=True)
    symbols = defined_symbols(nm, merged)
    names = sorted({symbol for symbol, kind in symbols if renamed(symbol, kind)})
    if not names:
        print(f"{archive}: no weak function to rename (not a kernel set's archive?)", file=sys.stderr)
        return 1
    with open(mapping, "w") as f:
        for symbol in names:
            f.write(f"{symbol} {symbol}.xjax_set_{name}\n")
    # Unique objects (nm's `u`: an inline function's static local, an inline variable) were kept
    # once by their COMDAT groups; without the groups they become weak, so the linker still keeps
    # one of each.
    unique = sorted({symbol for symbol, kind in symbols if kind == "u"})
    subprocess.run([objcopy, f"--redefine-syms={mapping}"] + [f"--weaken-symbol={u}" for u in unique]
                   + [merged, isolated], check=True)
    if os.path.exists(output):
        os.remove(output)
    subprocess.run([ar, "rcs", output, isolated], check=True)
    os.remove(merged)
    return 0


if __name__ == "__main__":
    sys.exit(main())

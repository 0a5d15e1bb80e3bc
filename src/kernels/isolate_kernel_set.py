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
copies and no other object can bind to them. So does a shared data object holding a pointer to
one of those copies (a table of code pointers), and whatever points at it in turn. Other weak
*objects* (an inline function's static local, typeinfo, guard variables) keep their names: there
must be one of each in the program.

The result is an archive holding that one object (meson links it whole into libxjax).

Usage: isolate_kernel_set.py SET_NAME ARCHIVE OUTPUT_ARCHIVE [LD NM OBJCOPY AR READELF]
(GNU binutils: objcopy cannot rename symbols in LTO objects, so the sets are built without LTO.)"""
import os
import re
import subprocess
import sys


def defined_symbols(nm, obj):
    """(name, nm type) of each symbol `obj` defines."""
    listing = subprocess.run([nm, "-P", "--defined-only", obj], capture_output=True, text=True, check=True).stdout
    return [tuple(line.split()[:2]) for line in listing.splitlines() if len(line.split()) >= 2]


def renamed(symbol, kind):
    """A weak function (W) or a vtable (V, _ZTV...): the set gets its own copy."""
    return kind == "W" or (kind == "V" and symbol.startswith("_ZTV"))


def data_pointing_at(readelf, obj, targets):
    """The global / weak / unique data objects of `obj` holding a relocation against a symbol in
    `targets` (a table of code pointers: std::visit's jump table, a construction vtable...)."""
    sections = {}  # relocation section name -> index of the section it applies to
    for line in subprocess.run([readelf, "-SW", obj], capture_output=True, text=True, check=True).stdout.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+RELA?\s+\S+\s+\S+\s+\S+\s+\S+\s+\S*\s+\d+\s+(\d+)\s+\d+", line)
        if m:
            sections[m.group(1)] = int(m.group(2))
    objects = {}  # section index -> [(start, end, name)]
    for line in subprocess.run([readelf, "-sW", obj], capture_output=True, text=True, check=True).stdout.splitlines():
        f = line.split()
        if len(f) >= 8 and f[3] == "OBJECT" and f[4] in ("GLOBAL", "WEAK", "UNIQUE") and f[6].isdigit():
            start = int(f[1], 16)
            objects.setdefault(int(f[6]), []).append((start, start + int(f[2]), f[7]))
    found, section = set(), None
    for line in subprocess.run([readelf, "-rW", obj], capture_output=True, text=True, check=True).stdout.splitlines():
        m = re.match(r"Relocation section '(\S+)'", line)
        if m:
            section = sections.get(m.group(1))
            continue
        f = line.split()
        if section is None or len(f) < 5 or not re.fullmatch(r"[0-9a-f]+", f[0]) or f[4] not in targets:
            continue
        offset = int(f[0], 16)
        found.update(name for start, end, name in objects.get(section, []) if start <= offset < end)
    return found


def main():
    if len(sys.argv) not in (4, 9):
        print(__doc__)
        return 2
    name, archive, output = sys.argv[1:4]
    ld, nm, objcopy, ar, readelf = sys.argv[4:9] if len(sys.argv) == 9 else ("ld", "nm", "objcopy", "ar", "readelf")
    merged = output + ".merged.o"
    isolated = output + ".o"
    mapping = output + ".renames"
    # --force-group-allocation: no COMDAT groups in the result. A group keeps its original
    # signature (`_ZN4xjax5ErrorD5Ev`) after its symbols are renamed, and the final link would drop
    # this set's group in favour of another object's, taking the renamed copies with it.
    subprocess.run([ld, "-r", "--force-group-allocation", "-o", merged, "--whole-archive", archive], check=True)
    symbols = defined_symbols(nm, merged)
    names = {symbol for symbol, kind in symbols if renamed(symbol, kind)}
    # A shared data object pointing at the set's copies would hand them to whichever object the
    # linker keeps it from: it becomes the set's own too (and so, in turn, whatever points at it).
    while True:
        more = data_pointing_at(readelf, merged, names) - names
        if not more:
            break
        names |= more
    names = sorted(names)
    if not names:
        print(f"{archive}: no weak function to rename (not a kernel set's archive?)", file=sys.stderr)
        return 1
    with open(mapping, "w") as f:
        for symbol in names:
            f.write(f"{symbol} {symbol}.xjax_set_{name}\n")
    # Unique objects (nm's `u`: an inline function's static local, an inline variable) were kept
    # once by their COMDAT groups; without the groups they become weak, so the linker still keeps
    # one of each.
    unique = sorted({symbol for symbol, kind in symbols if kind == "u"} - set(names))
    subprocess.run([objcopy, f"--redefine-syms={mapping}"] + [f"--weaken-symbol={u}" for u in unique]
                   + [merged, isolated], check=True)
    if os.path.exists(output):
        os.remove(output)
    subprocess.run([ar, "rcs", output, isolated], check=True)
    for scratch in (merged, isolated, mapping):
        os.remove(scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())

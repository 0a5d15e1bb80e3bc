#!/usr/bin/env python3
"""Checks that libxjax's code outside the AVX2 / AVX-512 kernel sets uses no instruction the
baseline x86-64 lacks (src/kernels/kernel_sets.hpp).

The vectorized kernel files are compiled once per kernel set; each set's copy of an inline function
it emits is renamed `<name> [clone .xjax_set_<set>]` at build time (src/kernels/isolate_kernel_set.py),
so no other code can bind to it. This disassembles the library and fails for every function that is
not a set's own code (its name does not mention the set) and still contains AVX (VEX/EVEX-encoded,
mnemonics starting with `v`) or BMI / LZCNT / MOVBE instructions; in the AVX2 set's own code it fails
on AVX-512 registers. A set's renamed copies count as that set's code; the baseline set's must be
baseline code, and any inline function that is *not* renamed (one the linker shares) must too.

Usage: check_kernel_isa.py LIBXJAX [OBJDUMP]. Skips (exit 77) unless the library was built with
the x86-64 kernel sets (-Dsimd=dispatch on x86-64)."""
import re
import subprocess
import sys

BEYOND_BASELINE = re.compile(
    r"^(v\w+|andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|lzcnt|tzcnt|movbe|popcnt|crc32"
    r"|cmpxchg16b)\b")
AVX512_REGISTER = re.compile(r"%zmm|%k[0-7]\b|\{%k|%[xy]mm(1[6-9]|2[0-9]|3[01])\b")


def main():
    lib = sys.argv[1]
    objdump = sys.argv[2] if len(sys.argv) > 2 else "objdump"
    symbols = subprocess.run(["nm", "-C", lib], capture_output=True, text=True, check=True).stdout
    if "set_avx2::" not in symbols:
        print("no avx2 kernel set in this build (not -Dsimd=dispatch on x86-64): skipped")
        return 77
    out = subprocess.Popen([objdump, "-d", "-C", "--no-show-raw-insn", lib], stdout=subprocess.PIPE, text=True)
    header = re.compile(r"^[0-9a-f]+ <(.*)>:$")
    function, kind, bad = None, None, {}
    functions = 0
    wide = {"avx2": 0, "avx512": 0}  # instructions on ymm / zmm registers in each set's own code
    for line in out.stdout:
        m = header.match(line)
        if m:
            function = m.group(1)
            functions += 1
            if re.search(r"set_\w+::kernel_set\(\)", function) or "[clone .xjax_set_baseline]" in function:
                kind = "baseline"  # each set's table: dispatch.cpp calls every set's, on any CPU
            elif "set_avx512" in function or "avx512" in function:
                kind = "avx512"
            elif "set_avx2" in function or "xsimd::avx2" in function or "xsimd::fma3<xsimd::avx2>" in function:
                kind = "avx2"
            elif "[clone ." in function:
                # A compiler-made clone (.constprop, .isra, .part, .cold) of a function that names no
                # set is local to the object it was made in and called only from there, never
                # merged with another set's copy: nothing outside that set's code can reach it.
                kind = "clone"
            else:
                kind = "baseline"
            continue
        parts = line.split("\t")
        if function is None or len(parts) < 2:
            continue
        instruction = parts[-1].strip()
        if kind == "avx2" and "%ymm" in instruction:
            wide["avx2"] += 1
        if kind == "avx512" and "%zmm" in instruction:
            wide["avx512"] += 1
            continue
        if kind == "baseline" and BEYOND_BASELINE.match(instruction):
            bad.setdefault(function, instruction)
        elif kind == "avx2" and AVX512_REGISTER.search(instruction):
            bad.setdefault(function, instruction)
    if out.wait() != 0:
        print("objdump failed")
        return 1
    for function, instruction in sorted(bad.items()):
        print(f"{function}: {instruction}")
    print(f"{functions} functions disassembled, {len(bad)} with instructions beyond their kernel set; "
          f"{wide['avx2']} ymm instructions in the avx2 set, {wide['avx512']} zmm in the avx512 set")
    missing = [s for s in ("avx2", "avx512", "baseline") if f"[clone .xjax_set_{s}]" not in symbols]
    if missing:
        print(f"no renamed inline-function copies of the set(s) {missing}: "
              "src/kernels/isolate_kernel_set.py did not run on them")
        return 1
    if not wide["avx2"] or not wide["avx512"]:
        print("the sets' own code was not recognized (no ymm / zmm instructions in it): the check is blind")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks that no two files compiled into one unity source define the same file-scope name.

xjax-tests is a unity build (tests/meson.build: consecutive groups of `unity_size` files of
test_src, each group one translation unit), and so are the library's core and transformations
(meson.build: `library_unity`, groups of core_src and of transforms_src) and its kernel sets
(`kernel_set_unity`, groups of kernel_set_src), and the fuzzer (tests/fuzz/meson.build). Two files of a group that define the same helper with
different parameters compile, and a call in the later file can silently bind to the earlier file's
overload; this fails instead, naming both files. The same for a file's helper named as one of
test_util.hpp's: every file sees test_util.hpp (the precompiled header), and a file's `using
namespace test_util` stays in force for the later files of its group. A name is what a line at
column 0 defines: a function, a struct or class, an enum, a `using` alias (an alias written
identically in both files is allowed: it names the same type) or a macro (`#define`: a later
file's redefinition is an error only when it differs, and otherwise silently keeps the earlier
file's meaning). A guard, not a proof: an indented
definition, or one whose name starts a line after its return type, is not seen. Rename one of
the two helpers, or share it through a header (test_util.hpp for the tests; src/file_io.hpp's
file_error and transforms/higher_order.hpp's share are the library's examples).

Usage: unity_names.py TESTS_DIR (the project's meson.build is read from TESTS_DIR/..)"""
import collections
import re
import sys
from pathlib import Path

MACRO = re.compile(r"^#\s*define (\w+)")
TYPE = re.compile(r"^(?:(?:struct|class|enum class|enum) (\w+)|using (\w+) =)")
FUNCTION = re.compile(r"^(?:inline |static |constexpr |template <.*> )*[\w:<>,*&\[\]() ]+?[\s*&](\w+)\(")
SKIP = ("TEST_CASE", "SUBCASE", "TEST_SUITE", "namespace", "return", "#", "//", "}")


def defined_names(path):
    names = {}
    for line in path.read_text().splitlines():
        macro = MACRO.match(line)
        if macro:
            names.setdefault(macro.group(1), line.strip())
            continue
        if not line or line[0].isspace() or line.startswith(SKIP):
            continue
        m = TYPE.match(line) or FUNCTION.match(line)
        if m:
            names.setdefault(m.group(1) or m.group(2), line.strip())
    return names


def group_clashes(root, sources, size):
    """The names defined twice in one group of `size` consecutive files of `sources`; prints each."""
    clashes = 0
    for start in range(0, len(sources), size):
        group = sources[start:start + size]
        where = collections.defaultdict(list)
        for f in group:
            for name, line in defined_names(root / f).items():
                where[name].append((f, line))
        for name, defs in sorted(where.items()):
            lines = {line for _, line in defs}
            if len(defs) > 1 and not (len(lines) == 1 and lines.pop().startswith("using ")):
                clashes += 1
                print(f"{name} is defined in {', '.join(f for f, _ in defs)} (one unity source): rename one")
    return clashes


def library_clashes(root):
    """The library's groups: core_src, transforms_src and kernel_set_src of the project's meson.build."""
    build = (root / "meson.build").read_text()
    clashes = 0
    for var, unity in (("core_src", "library_unity"), ("transforms_src", "library_unity"),
                       ("kernel_set_src", "kernel_set_unity")):
        size = int(re.search(rf"^{unity} = .*unity_size=(\d+)", build, re.M).group(1))
        sources = re.findall(r"'([\w/]+\.cpp)'", build.split(var + " = files(", 1)[1].split(")", 1)[0])
        clashes += group_clashes(root, sources, size)
        print(f"{var}: {len(sources)} files in groups of {size}")
    return clashes


def main():
    tests = Path(sys.argv[1])
    build = (tests / "meson.build").read_text()
    sources = re.findall(r"'(test_\w+\.cpp)'", build.split("test_src = [", 1)[1].split("]", 1)[0])
    size = int(re.search(r"unity_size=(\d+)", build).group(1))
    clashes = library_clashes(tests.parent)
    # test_util.hpp is in every file (the precompiled header) and many say `using namespace
    # test_util`, which stays in force for the files after them in their group.
    shared = defined_names(tests / "test_util.hpp")
    for f in sources:
        for name in sorted(set(defined_names(tests / f)) & set(shared)):
            clashes += 1
            print(f"{name} is defined in {f} and in test_util.hpp: rename the file's own")
    clashes += group_clashes(tests, sources, size)
    print(f"test_src: {len(sources)} files in groups of {size}")
    # The fuzzer: its executable's sources, one group of `unity_size`.
    fuzz = (tests / "fuzz" / "meson.build").read_text()
    fuzz_sources = re.findall(r"'(\w+\.cpp)'", fuzz.split("executable('xjax-fuzz',", 1)[1].split("dependencies", 1)[0])
    fuzz_size = int(re.search(r"unity_size=(\d+)", fuzz).group(1))
    clashes += group_clashes(tests / "fuzz", fuzz_sources, fuzz_size)
    print(f"fuzz: {len(fuzz_sources)} files in groups of {fuzz_size}")
    print(f"{clashes} names defined twice in a group (library and tests)")
    return 1 if clashes else 0


if __name__ == "__main__":
    sys.exit(main())

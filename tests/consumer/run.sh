#!/usr/bin/env bash
# Consumer test (registered in tests/consumer/meson.build): install the build into a staging
# directory with `meson install --destdir`, then build tests/consumer/app.cpp against the staged
# tree twice and run it:
#   1. g++ -std=c++20 app.cpp $(pkg-config --cflags --libs xjax)
#   2. CMake: find_package(xjax) + target_link_libraries(app xjax::xjax)
# Passes only if both build and run.
# Usage: run.sh BUILD_DIR SOURCE_DIR PREFIX LIBDIR INCLUDEDIR [SANITIZE]
# SANITIZE is meson's b_sanitize value; when it is not "none" the consumer is compiled with the
# same -fsanitize flags, since a sanitized libxjax needs the sanitizer runtimes.
set -euo pipefail

build=$1 src=$2 prefix=$3 libdir=$4 includedir=$5 sanitize=${6:-none}
cxx=${CXX_FOR_CONSUMER:-g++}

for tool in meson pkg-config cmake "$cxx"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "consumer: $tool not found; skipping" >&2
    exit 77
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/xjax-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage="$work/stage"

step() { echo "==> $*"; }

step "meson install -C $build --destdir $stage"
meson install -C "$build" --destdir "$stage" --no-rebuild --quiet

# Paths as they are in the staging directory.
sprefix="$stage$prefix"
abs() { case "$1" in /*) echo "$stage$1" ;; *) echo "$sprefix/$1" ;; esac; }
slibdir=$(abs "$libdir")
sincludedir=$(abs "$includedir")

for f in "$sincludedir/xjax/xjax.hpp" "$slibdir/pkgconfig/xjax.pc" \
         "$slibdir/cmake/xjax/xjaxConfig.cmake" "$slibdir/cmake/xjax/xjaxConfigVersion.cmake"; do
  [[ -f "$f" ]] || { echo "consumer: not installed: ${f#"$stage"}" >&2; exit 1; }
done
ls "$slibdir"/libxjax.* >/dev/null 2>&1 || { echo "consumer: libxjax not installed in $libdir" >&2; exit 1; }

extra=()
if [[ "$sanitize" != "none" && -n "$sanitize" ]]; then
  extra=("-fsanitize=$sanitize")
fi

# --- 1. pkg-config --------------------------------------------------------------------------
# The installed xjax.pc names the configured prefix; --define-variable points it at the staging
# directory without editing the file.
export PKG_CONFIG_PATH="$slibdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pcflags=$(pkg-config --define-variable=prefix="$sprefix" --cflags --libs xjax)
step "pkg-config --cflags --libs xjax: $pcflags"
for want in -std=c++20 -DXTENSOR_USE_XSIMD -lxjax -lopenblas; do
  [[ " $pcflags " == *" $want "* ]] || { echo "consumer: xjax.pc lacks $want" >&2; exit 1; }
done
step "$cxx -std=c++20 app.cpp \$(pkg-config --cflags --libs xjax)"
# shellcheck disable=SC2086  # the flags are meant to be split
"$cxx" -std=c++20 "$src/app.cpp" -o "$work/app_pkgconfig" $pcflags "${extra[@]}"
step "run app_pkgconfig"
LD_LIBRARY_PATH="$slibdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/app_pkgconfig"

# --- 2. CMake find_package(xjax) -------------------------------------------------------------
step "cmake find_package(xjax) with CMAKE_PREFIX_PATH=$sprefix"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S "$src" -B "$work/cmake-build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$sprefix" \
  -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$(command -v "$cxx")" \
  -DCMAKE_CXX_FLAGS="${extra[*]}" \
  -DCMAKE_EXE_LINKER_FLAGS="${extra[*]}"
found=$(sed -n 's/^xjax_DIR:PATH=//p' "$work/cmake-build/CMakeCache.txt")
if [[ "$found" != "$slibdir/cmake/xjax" ]]; then
  echo "consumer: CMake found xjax in '$found', not in the staged tree" >&2
  exit 1
fi
cmake --build "$work/cmake-build"
step "run app (CMake)"
LD_LIBRARY_PATH="$slibdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/cmake-build/app"

echo "consumer: pkg-config and CMake consumers both built and ran"

#!/usr/bin/env bash
# One entry point for the README's quick start:
#   ./xjax.sh example [ARGS...]   set up (bootstrap), build and run the main example
#                                 (examples/deep_stack_scan; examples/quickstart until it exists)
#   ./xjax.sh test [ARGS...]      set up, build everything and run the whole test suite
#                                 (ARGS go to `meson test`, e.g. --suite examples)
#   ./xjax.sh build               set up and build everything
#   ./xjax.sh cross-test aarch64  cross-compile for aarch64 (build-aarch64/) and run a subset of
#                                 the tests under qemu-user: the kernel-level doctest files, the
#                                 gradient checks and a fuzz slice (installs what it needs)
# The build directory is ./build (override with XJAX_BUILD_DIR). It is configured only when it
# is not configured yet; later runs reuse it (meson regenerates by itself when meson.build changes).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$root"
build="${XJAX_BUILD_DIR:-build}"

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }

setup() {
  ./bootstrap.sh
  if [[ -f "$build/meson-private/coredata.dat" && -f "$build/build.ninja" ]]; then
    return
  elif [[ -f "$build/meson-private/coredata.dat" ]]; then
    # An earlier configure failed half-way: configure again with the options it recorded.
    meson setup --reconfigure "$build" || meson setup --wipe "$build"
  else
    meson setup "$build"
  fi
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
  example)
    setup
    name=quickstart
    [[ -f examples/deep_stack_scan.cpp ]] && name=deep_stack_scan
    meson compile -C "$build" "examples/$name:executable"
    echo "==> $build/examples/$name $*"
    exec "$build/examples/$name" "$@"
    ;;
  test)
    setup
    meson compile -C "$build"
    exec meson test -C "$build" --print-errorlogs "$@"
    ;;
  build)
    setup
    meson compile -C "$build" "$@"
    ;;
  cross-test)
    arch="${1:-aarch64}"
    if [[ "$arch" != aarch64 ]]; then
      echo "cross-test: only aarch64 is set up (cross/aarch64-linux-gnu.ini)" >&2
      exit 2
    fi
    ./bootstrap.sh --with-cross-aarch64
    dir="${XJAX_CROSS_BUILD_DIR:-build-aarch64}"
    if [[ ! -f "$dir/build.ninja" ]]; then
      meson setup "$dir" --cross-file cross/aarch64-linux-gnu.ini -Dmpi=disabled -Dexamples=false \
        -Dbenchmarks=false -Dtorch=disabled
    fi
    meson compile -C "$dir" tests/xjax-tests tests/gradcheck/xjax-gradcheck tests/fuzz/xjax-fuzz
    qemu=(qemu-aarch64 -L /usr/aarch64-linux-gnu)
    export OPENBLAS_NUM_THREADS=1
    start=$(date +%s)
    echo "==> doctest subset (kernels, kernel sets, plans, convolutions, autodiff, scan)"
    # The tests that run several threads at once are left out: under Debian 12's qemu-user (7.2)
    # even a program that only starts four std::threads hangs (docs/status.md, known gaps).
    "${qemu[@]}" "$dir/tests/xjax-tests" --test-case-exclude='*thread*'
    echo "==> gradient checks"
    "${qemu[@]}" "$dir/tests/gradcheck/xjax-gradcheck"
    echo "==> fuzz slice"
    "${qemu[@]}" "$dir/tests/fuzz/xjax-fuzz" --seed-start 1 --seeds 100
    echo "cross-test aarch64: passed under qemu in $(( $(date +%s) - start )) s"
    ;;
  -h|--help|help)
    usage
    ;;
  *)
    usage >&2
    exit 2
    ;;
esac

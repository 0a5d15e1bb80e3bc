#!/usr/bin/env bash
# One entry point for the README's quick start:
#   ./xjax.sh example [ARGS...]   set up (bootstrap), build and run the main example
#                                 (examples/deep_stack_scan; examples/quickstart until it exists)
#   ./xjax.sh test [ARGS...]      set up, build everything and run the whole test suite
#                                 (ARGS go to `meson test`, e.g. --suite examples)
#   ./xjax.sh build               set up and build everything
# The build directory is ./build (override with XJAX_BUILD_DIR). It is configured only when it
# is not configured yet; later runs reuse it (meson regenerates by itself when meson.build changes).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$root"
build="${XJAX_BUILD_DIR:-build}"

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }

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
  -h|--help|help)
    usage
    ;;
  *)
    usage >&2
    exit 2
    ;;
esac

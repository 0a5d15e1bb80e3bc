#!/usr/bin/env bash
# Issue 26's compile-time benchmark: compiles each .cpp here (-std=c++20 -O2, object only) against
# this checkout's headers and against the headers of an older commit, interleaved, and prints the
# median user CPU seconds of each and their ratio. Compiling is noisy on a shared VM: the runs
# alternate so that both sides see the same load; read the medians, not one run.
#   tests/bench/compile_time/run.sh [BASE_COMMIT] [RUNS]
# BASE_COMMIT defaults to bf16293, the last commit before issue 26's work (docs/status.md).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
base=${1:-bf16293}
runs=${2:-7}
cxx=${CXX:-g++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" archive "$base" include | tar -x -C "$tmp"
echo "compile time, $cxx -std=c++20 -O2 -c, $runs interleaved runs, median user seconds"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
printf '%-18s %10s %10s %8s\n' file "$base" HEAD ratio
for src in "$here"/*.cpp; do
  old=() new=()
  for ((r = 0; r < runs; ++r)); do
    for side in old new; do
      inc=$root/include
      [[ $side == old ]] && inc=$tmp/include
      t=$( { /usr/bin/time -f '%U' "$cxx" -std=c++20 -O2 -I"$inc" -c "$src" -o "$tmp/out.o"; } 2>&1 | tail -1)
      if [[ $side == old ]]; then old+=("$t"); else new+=("$t"); fi
    done
  done
  python3 - "$(basename "$src")" "${old[*]}" "${new[*]}" <<'PY'
import statistics, sys
name, old, new = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
mo, mn = statistics.median(old), statistics.median(new)
print(f"{name:<18} {mo:10.2f} {mn:10.2f} {mo / mn:7.2f}x")
PY
done

#!/usr/bin/env bash
# Installs the Debian packages xjax needs to build, test, benchmark and document itself.
# Idempotent: when every package is already installed it does nothing (no apt-get update).
# Runs as root (or through sudo) without questions: DEBIAN_FRONTEND=noninteractive.
#   ./bootstrap.sh --with-torch   (or XJAX_WITH_TORCH=1) also installs libtorch-dev, for the
#                                 libtorch rows of xjax-bench (about 510 MB; CI uses it)
#   ./bootstrap.sh --with-cross-aarch64   also the aarch64 cross compiler, qemu-user and the arm64
#                                 OpenBLAS / LAPACKE (multiarch), for ./xjax.sh cross-test aarch64
set -euo pipefail

with_torch="${XJAX_WITH_TORCH:-0}"
with_cross=0
for arg in "$@"; do
  case "$arg" in
    --with-torch) with_torch=1 ;;
    --with-cross-aarch64) with_cross=1 ;;
    *) echo "usage: ./bootstrap.sh [--with-torch] [--with-cross-aarch64]" >&2; exit 2 ;;
  esac
done

packages=(
  meson ninja-build g++ cmake pkg-config python3
  xtensor-dev libxsimd-dev libxtensor-blas-dev libopenblas-dev libboost-dev doctest-dev
  libbenchmark-dev doxygen libopenmpi-dev openmpi-bin nlohmann-json3-dev python3-numpy
  liblapacke-dev
)
if [[ "$with_torch" == 1 ]]; then
  packages+=(libtorch-dev)
fi
if [[ "$with_cross" == 1 ]]; then
  packages+=(g++-aarch64-linux-gnu qemu-user libopenblas-dev:arm64 liblapacke-dev:arm64 libboost-dev:arm64)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "bootstrap: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "bootstrap: installing ${missing[*]}"
sudo=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "bootstrap: not root and no sudo; install these packages: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if [[ "$with_cross" == 1 ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "bootstrap: adding the arm64 architecture (multiarch)"
  "${sudo[@]}" dpkg --add-architecture arm64
fi
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"

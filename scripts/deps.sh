#!/bin/sh
# Installs what nabla needs to build and test on Debian 12, only what is missing.
# Non-interactive and idempotent: when everything is present it prints nothing and
# does not call apt-get.
set -eu
# clang (with libomp-dev, and libclang-rt-dev for the sanitizer and libFuzzer runtimes) is
# the compiler of the sanitizer build (make asan) and the fuzzer (make fuzz).
# dataset-fashion-mnist: the real data tests/test_idx.c loads.
# libprotobuf-c-dev and protobuf-c-compiler (protoc-c): the protobuf messages of checkpoints.
# clang-format and clang-tidy: make format and make lint.
# libdnnl-dev (oneDNN): float32 GEMM and convolutions, dispatched at run time to the best
# ISA the CPU has.
# libopenmpi-dev and openmpi-bin (mpirun): the collectives across processes and machines
# (src/dist) and the MPI tests.
PKGS="build-essential cmake pkg-config libopenblas-openmp-dev libcmocka-dev clang libomp-dev libclang-rt-dev zlib1g-dev dataset-fashion-mnist libprotobuf-c-dev protobuf-c-compiler libdnnl-dev clang-format clang-tidy libopenmpi-dev openmpi-bin"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "deps.sh: missing packages:$missing" >&2
    echo "deps.sh: not root and sudo is not available; install them as root:" >&2
    echo "    apt-get install$missing" >&2
    exit 1
  fi
fi
echo "deps.sh: installing$missing" >&2
# sudo's env_reset drops exported variables, so pass DEBIAN_FRONTEND through env.
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null

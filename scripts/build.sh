#!/usr/bin/env bash
# build.sh: configures and builds ljperf (Release).
#   scripts/build.sh            the host's build in build/ (amd64 or aarch64; the CUDA backend
#                               when nvcc exists)
#   scripts/build.sh aarch64    on an amd64 host: the aarch64 cross build in build-aarch64/
#                               (cmake/aarch64-linux-gnu.cmake, CPU only; its tests run under
#                               qemu-user and compare against build/ljperf, so build that first),
#                               and the MPI backend compiled for aarch64 against the arm64
#                               Open MPI headers that scripts/setup.sh unpacks into the cache.
# The log is build.log (build-aarch64/build.log for the cross build).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
target=${1:-host}
jobs=$(nproc)

if [ "$target" = host ]; then
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >build.log 2>&1 || { cat build.log; exit 1; }
  grep -E '^-- ljperf:' build.log || true
  cmake --build build -j"$jobs" >>build.log 2>&1 || { grep -E 'error|Error' -A3 build.log | head -60; exit 1; }
  echo "build: ok (build/ljperf, $(uname -m))"
  exit 0
fi

[ "$target" = aarch64 ] || { echo "build.sh: unknown target '$target' (host or aarch64)" >&2; exit 2; }
[ "$(uname -m)" = x86_64 ] || { echo "build.sh: the aarch64 cross build runs on an amd64 host" >&2; exit 2; }
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || { echo "build.sh: aarch64-linux-gnu-gcc is missing: run scripts/setup.sh" >&2; exit 1; }
mkdir -p build-aarch64
log=build-aarch64/build.log
cmake -S . -B build-aarch64 -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DLJ_CUDA=OFF -DLJ_NATIVE_LJPERF="$repo/build/ljperf" >$log 2>&1 || { cat $log; exit 1; }
grep -E '^-- ljperf:' $log || true
cmake --build build-aarch64 -j"$jobs" >>$log 2>&1 || { grep -E 'error|Error' -A3 $log | head -60; exit 1; }

# The MPI backend, compiled (not linked: Debian 12 has no co-installable arm64 libmpi) with the
# arm64 headers and the library's warning flags, when the cross build went without MPI.
mpi_inc=${LJPERF_CACHE:-$repo/.cache}/arm64/root/usr/lib/aarch64-linux-gnu/openmpi/include
if ! grep -q '^-- ljperf: .*MPI ON' $log; then
  [ -f "$mpi_inc/mpi.h" ] || { echo "build.sh: $mpi_inc/mpi.h is missing: run scripts/setup.sh" >&2; exit 1; }
  aarch64-linux-gnu-gcc -std=gnu11 -O3 -Wall -Wextra -Wno-unused-parameter -Wno-format-truncation -Werror \
    -DLJ_HAVE_MPI=1 -I. -I"$mpi_inc" -c parallel/dist_mpi.c -o build-aarch64/dist_mpi_check.o >>$log 2>&1 ||
    { grep -E 'error|warning' -A3 $log | head -30; exit 1; }
  echo "build: parallel/dist_mpi.c compiles for aarch64 against the arm64 Open MPI headers"
fi
echo "build: ok (build-aarch64/ljperf, aarch64)"

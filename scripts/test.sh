#!/usr/bin/env bash
# test.sh: the README's test command: set up, build, and run every test (CTest), on the host and,
# on an amd64 host, for aarch64 too: the cross build (scripts/build.sh aarch64) runs its tests
# under qemu-user (the set that tests/CMakeLists.txt chooses for emulation, with its training
# losses compared against the amd64 build's). Prints each architecture's pass count; fails if
# either set fails. Arguments go to both ctest runs (e.g. -R tokenizer).
# LJPERF_TEST_CROSS=0 skips the aarch64 part.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
bash scripts/setup.sh
bash scripts/build.sh
cross=0
if [ "$(uname -m)" = x86_64 ] && [ "${LJPERF_TEST_CROSS:-1}" != 0 ]; then
  cross=1
  bash scripts/build.sh aarch64
fi

# run_ctest ARCH DIR ARGS...: runs the suite in DIR; keeps its summary line and its seconds.
declare -A summary seconds
status=0
run_ctest() {
  local arch=$1 dir=$2; shift 2
  local t0=$SECONDS rc=0
  echo "==== $arch tests ($dir)"
  (cd "$dir" && ctest --output-on-failure -j2 "$@") 2>&1 | tee "$dir/ctest.log" || rc=$?
  seconds[$arch]=$((SECONDS - t0))
  summary[$arch]=$(grep -E 'tests passed, [0-9]+ tests? failed out of' "$dir/ctest.log" | tail -1)
  [ -n "${summary[$arch]}" ] || summary[$arch]="no summary (ctest exited with status $rc)"
  [ "$rc" = 0 ] || status=1
}

archs=("$(dpkg --print-architecture 2>/dev/null || uname -m)")
run_ctest "${archs[0]}" build "$@"
if [ "$cross" = 1 ]; then
  archs+=("arm64 (qemu-user)")
  run_ctest "${archs[1]}" build-aarch64 "$@"
fi

echo "==== summary"
for arch in "${archs[@]}"; do
  printf '%s: %s (%d s)\n' "$arch" "${summary[$arch]}" "${seconds[$arch]}"
done
exit $status

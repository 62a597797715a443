#!/usr/bin/env bash
# test.sh: the README's test command: set up (scripts/setup.sh --tests), build, and run every test
# (CTest) on the host.
#   scripts/test.sh --all   on an amd64 host, aarch64 too (what .ci/run runs): the cross build
#                           (scripts/build.sh aarch64) runs under qemu-user the tests that
#                           tests/CMakeLists.txt names as depending on the architecture (the
#                           numerics, the file formats, the hashes and the tokenizer, and the
#                           training losses compared against the amd64 build's).
# Prints each architecture's pass count; fails if either set fails. Other arguments go to both
# ctest runs (e.g. -R tokenizer).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
all=0
args=()
for a in "$@"; do
  if [ "$a" = --all ]; then all=1; else args+=("$a"); fi
done
cross=0
[ "$all" = 1 ] && [ "$(uname -m)" = x86_64 ] && cross=1
if [ "$cross" = 1 ]; then bash scripts/setup.sh --tests --cross; else bash scripts/setup.sh --tests; fi
bash scripts/build.sh
if [ "$cross" = 1 ]; then bash scripts/build.sh aarch64; fi

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
run_ctest "${archs[0]}" build ${args[@]+"${args[@]}"}
if [ "$cross" = 1 ]; then
  archs+=("arm64 (qemu-user)")
  run_ctest "${archs[1]}" build-aarch64 ${args[@]+"${args[@]}"}
fi

echo "==== summary"
for arch in "${archs[@]}"; do
  printf '%s: %s (%d s)\n' "$arch" "${summary[$arch]}" "${seconds[$arch]}"
done
exit $status

#!/usr/bin/env bash
# stress-check.sh: shows that the native test suite does not depend on the machine's load: runs
# it twice (ctest in the build directory, default build/) while stress-ng keeps every core busy
# with CPU, memory and I/O work, and fails if either run fails. Not part of the default CI run
# (it takes twice the suite's time and more). Installs stress-ng through scripts/setup.sh
# (LJPERF_SETUP_STRESS=1) when missing.
#   scripts/stress-check.sh [BUILD_DIR] [CTEST ARGS...]     e.g. scripts/stress-check.sh build -R report
# STRESS_WORKERS (default: the number of cores) sets the CPU workers.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build}
[ $# -gt 0 ] && shift
[ -f "$build/CTestTestfile.cmake" ] || { echo "stress-check: $build is not a build directory: run scripts/build.sh" >&2; exit 1; }
command -v stress-ng >/dev/null 2>&1 || LJPERF_SETUP_STRESS=1 bash "$repo/scripts/setup.sh"
workers=${STRESS_WORKERS:-$(nproc)}
stress-ng --cpu "$workers" --vm 1 --vm-bytes 256M --io 1 --timeout 4h --quiet &
stress=$!
trap 'kill "$stress" 2>/dev/null || true; wait "$stress" 2>/dev/null || true' EXIT
status=0
for round in 1 2; do
  echo "==== stress-check: round $round under stress-ng ($workers CPU workers, a memory and an I/O worker)"
  (cd "$build" && ctest --output-on-failure "$@") 2>&1 | tee "$build/stress-check-$round.log" || status=1
done
echo "==== stress-check summary"
for round in 1 2; do
  printf 'round %d: %s\n' "$round" "$(grep -E 'tests passed, [0-9]+ tests? failed out of' "$build/stress-check-$round.log" | tail -1)"
done
exit $status

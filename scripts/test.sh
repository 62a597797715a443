#!/usr/bin/env bash
# test.sh: the README's test command: set up, build, and run every test (CTest).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
bash scripts/setup.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j2 "$@"

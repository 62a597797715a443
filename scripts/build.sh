#!/usr/bin/env bash
# build.sh: configures and builds ljperf into build/ (Release; the CUDA backend when nvcc exists).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >build.log 2>&1 || { cat build.log; exit 1; }
grep -E '^-- ljperf:' build.log || true
cmake --build build -j"$(nproc)" >>build.log 2>&1 || { grep -E 'error|Error' -A3 build.log | head -60; exit 1; }
echo "build: ok (build/ljperf)"

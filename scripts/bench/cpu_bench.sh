#!/usr/bin/env bash
# cpu_bench.sh: CPU training throughput of the small presets: tokens/s and achieved GFLOP/s
# against the OpenBLAS sgemm rate measured in the same run. Prints a table.
# Usage: scripts/bench/cpu_bench.sh [SEQ] [MICRO_BATCH]   (default 256, 4)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ljperf=${LJPERF:-$repo/build/ljperf}
seq=${1:-256}
mb=${2:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-12s %6s %4s %10s %10s %12s %8s\n' model seq mb tokens/s GFLOP/s "sgemm GFLOP/s" "of sgemm"
for model in llama3-nano llama3-tiny; do
  "$ljperf" benchmark --model "$model" --device cpu --seq-length "$seq" --micro-batch-size "$mb" \
    --train-iters 5 --warmup-iters 1 --no-progress --json "$tmp/$model.json" >/dev/null
  python3 - "$tmp/$model.json" "$model" "$seq" "$mb" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("%-12s %6s %4s %10.0f %10.1f %12.1f %7.1f%%" % (sys.argv[2], sys.argv[3], sys.argv[4], r["tokens_per_s"],
      r["tflops"] * 1e3, r["peak_tflops"] * 1e3, 100 * r["mfu"]))
PY
done
echo "threads: ${OMP_NUM_THREADS:-$(nproc)}; FLOPs/token = 6N + 12*L*d*s (docs/reference.md)"

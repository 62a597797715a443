#!/usr/bin/env bash
# plan_accuracy.sh: the memory planner's predicted peak against the measured one,
# for a list of configurations: for each, `ljperf plan --json` (prediction: plan + cuBLASLt +
# CUDA context) and `ljperf benchmark --json` (measured: whole device, total - free, at the
# high-water mark), then a table with the error per row. On the GPU machine after
# `source scripts/gpu/gpu-env.sh`; with --device cpu it runs here too (memory measured as peak RSS,
# so the error column means little there).
# Usage: scripts/gpu/plan_accuracy.sh [--device cpu|cuda] [CONFIG...]   CONFIG = model:seq:micro_batch:recompute
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
lj=${LJPERF:-build-gpu/dev/ljperf}
[ -x "$lj" ] || lj=build/ljperf
device=cuda
if [ "${1:-}" = "--device" ]; then device=$2; shift 2; fi
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(
  llama3.2-1b:2048:8:none llama3.2-1b:4096:4:none llama3.2-1b:4096:4:full llama3.2-1b:8192:2:selective
  llama3.2-3b:2048:4:none llama3.2-3b:4096:2:selective llama3.2-3b:4096:2:full llama3.2-3b:8192:1:none
  llama3-8b:2048:1:full llama3-8b:4096:1:selective llama3-8b:4096:2:full llama3-8b:8192:1:full)
OUT=${OUT:-out/plan-accuracy}
mkdir -p "$OUT"
printf '%-13s %5s %3s %-10s %14s %14s %8s %10s\n' model seq mb recompute "predicted GiB" "measured GiB" error tokens/s
for c in "${configs[@]}"; do
  IFS=: read -r model seq mb rc <<<"$c"
  tag="$model-$seq-$mb-$rc"
  "$lj" plan --model "$model" --device "$device" --seq-length "$seq" --micro-batch-size "$mb" --recompute "$rc" \
    --json "$OUT/$tag.plan.json" >"$OUT/$tag.plan.log" 2>&1
  "$lj" benchmark --model "$model" --device "$device" --seq-length "$seq" --micro-batch-size "$mb" --recompute "$rc" \
    --train-iters 2 --warmup-iters 1 --no-progress --json "$OUT/$tag.bench.json" >"$OUT/$tag.bench.log" 2>&1
  python3 - "$OUT/$tag.plan.json" "$OUT/$tag.bench.json" "$model" "$seq" "$mb" "$rc" <<'PY'
import json, sys
try:
    p = json.load(open(sys.argv[1]))["chosen"]["peak_bytes"] / 2**30
except Exception:
    p = float("nan")
try:
    b = json.load(open(sys.argv[2]))
    m, tps = b["peak_mem_gib"], b["tokens_per_s"]
except Exception:
    m, tps = float("nan"), float("nan")
err = 100 * (p - m) / m if m == m and m > 0 else float("nan")
print("%-13s %5s %3s %-10s %14.2f %14.2f %+7.2f%% %10.0f" % (sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], p, m, err, tps))
PY
done

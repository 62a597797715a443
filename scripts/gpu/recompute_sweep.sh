#!/usr/bin/env bash
# recompute_sweep.sh: the recompute planner's choice against an exhaustive sweep:
# runs `ljperf benchmark` for every uniform policy (none, selective, full), every block split
# (the first k layers full, k in STEPS; the first k layers selective, k in SEL_STEPS) and the
# planner's own choice (--recompute auto), prints
# tokens/s and peak memory for each, and the planner's ratio to the best policy that ran.
# Usage: scripts/gpu/recompute_sweep.sh MODEL SEQ MICRO_BATCH [--device cpu|cuda]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
lj=${LJPERF:-build-gpu/dev/ljperf}
[ -x "$lj" ] || lj=build/ljperf
model=$1 seq=$2 mb=$3
device=${5:-cuda}
[ "${4:-}" = "--device" ] || device=cuda
OUT=${OUT:-out/recompute-sweep}
mkdir -p "$OUT"
iters=${ITERS:-4}
run() { # name flags...
  local name=$1; shift
  "$lj" benchmark --model "$model" --device "$device" --seq-length "$seq" --micro-batch-size "$mb" \
    --train-iters "$iters" --warmup-iters 1 --no-progress --json "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1
  python3 -c 'import json,sys
try:
    r = json.load(open(sys.argv[1])); print("%-22s %10.0f %10.2f" % (sys.argv[2], r["tokens_per_s"], r["peak_mem_gib"]))
except Exception:
    print("%-22s %10s %10s" % (sys.argv[2], "OOM/fail", "-"))' "$OUT/$name.json" "$name"
}
printf '%-22s %10s %10s\n' policy tokens/s "peak GiB"
{
  run none --recompute none
  run selective --recompute selective
  run full --recompute full
  for k in ${STEPS-4 8 16 24}; do
    run "block-$k-full" --recompute-granularity full --recompute-method block --recompute-num-layers "$k"
  done
  for k in ${SEL_STEPS-}; do
    run "block-$k-selective" --recompute-granularity selective --recompute-method block --recompute-num-layers "$k"
  done
  run planner --recompute auto
} | tee "$OUT/sweep.txt"
python3 - "$OUT/sweep.txt" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
ok = {r[0]: float(r[1]) for r in rows if len(r) >= 3 and r[1] != "OOM/fail"}
import os
log = sys.argv[1].replace("sweep.txt", "planner.log")
chosen = [l for l in open(log) if "Chose" in l] if os.path.exists(log) else []
if chosen:
    print("planner:", chosen[0].split("Chose", 1)[1].split(":")[0].strip())
if "planner" in ok and ok:
    best = max(v for k, v in ok.items() if k != "planner")
    print("planner / best swept policy: %.3f (goal >= 0.97)" % (ok["planner"] / best))
PY

#!/usr/bin/env bash
# gpu-dist.sh: data parallelism on a machine with 2 GPUs (repo root, $OUT set; carry .deb,
# build-gpu/dev, .gpudata): NCCL collectives (test_dist --nccl 2), and llama3-tiny trained on
# the KJV Bible on 1 GPU and on 2 GPUs with ZeRO stages 0, 1 and 2 (--nproc-per-node 2), the loss
# curves compared. .gpudata/kjv is `ljperf prepare --input kjv.txt --split-on blank-line`.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-out/gpu-dist}
mkdir -p "$OUT"
source bench/gpu-env.sh
dev=build-gpu/dev
nvidia-smi -L
timeout 100 "$dev/test_dist" --nccl 2 >"$OUT/test_dist_nccl.log" 2>&1
echo "test_dist --nccl 2: rc=$? $(tail -1 "$OUT/test_dist_nccl.log")"
common=(--model llama3-tiny --data-path .gpudata/kjv --seq-length 256 --micro-batch-size 4 --global-batch-size 16
        --train-iters 20 --lr 3e-3 --lr-warmup-iters 5 --seed 5 --log-interval 10 --eval-iters 2 --device cuda)
timeout 60 "$dev/ljperf" train "${common[@]}" --log-json "$OUT/g1.jsonl" >"$OUT/g1.log" 2>&1
echo "1 GPU: rc=$?"
for st in 0 1 2; do
  timeout 90 "$dev/ljperf" train "${common[@]}" --nproc-per-node 2 --zero-stage $st --log-json "$OUT/g2_$st.jsonl" \
    >"$OUT/g2_$st.log" 2>&1
  echo "2 GPUs, ZeRO stage $st: rc=$? $(grep -m1 'data parallel' "$OUT/g2_$st.log")"
done
python3 - "$OUT" <<'PY'
import json, sys, os
d = sys.argv[1]
def load(p):
    return {r["iteration"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r} if os.path.exists(p) else {}
one = load(d + "/g1.jsonl")
for st in (0, 1, 2):
    two = load(d + "/g2_%d.jsonl" % st)
    common = sorted(set(one) & set(two))
    if not common:
        print("stage %d: no common iterations" % st); continue
    worst = max(abs(one[i] - two[i]) / one[i] for i in common)
    print("stage %d: %d iterations, worst relative loss difference vs 1 GPU %.2e; last loss %.4f vs %.4f"
          % (st, len(common), worst, one[common[-1]], two[common[-1]]))
PY

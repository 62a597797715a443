#!/usr/bin/env bash
# gpu-dist.sh: data parallelism on a machine with 2 GPUs (repo root, $OUT set; carry .deb,
# build-gpu/dev, .cache/tokenizer, .cache/data/kjv.txt). Steps (default: all, in this order):
#   nccl   the NCCL collectives (test_dist --nccl 2);
#   equiv  llama3-tiny trained on the KJV Bible on 1 GPU and on 2 GPUs with ZeRO stages 0-3
#          (--nproc-per-node 2), the loss curves compared;
#   8b     `ljperf benchmark --model deepspeed/llama3-8b --nproc-per-node 2` (ZeRO-3, micro-batch
#          2, seq 4096) and PyTorch FSDP2 + torch.compile on the same settings (same job);
#   1b     the same for llama3.2-1b, micro-batch 4 (ljperf: ZeRO stage 1);
#   overlap  deepspeed/llama3-8b (ZeRO-3, micro-batch 2) with --no-overlap-comm and with overlap:
#          what the overlap of communication with compute earns (the +CommOpt row's question);
#   resume the equiv run (2 GPUs, ZeRO-3) saved after iteration 10 with per-rank shard files and
#          resumed from them, and the same run with --offload-optimizer cpu: losses against the
#          uninterrupted run (run equiv with stage 3 first);
#   goals  the goals table, ljperf only: deepspeed/llama3-8b at micro-batch 2 (PyTorch's setting)
#          and with the planner choosing micro-batch and recompute within PyTorch's memory
#          (--micro-batch-size auto --recompute auto --device-memory 106.5GiB), llama3.2-1b ZeRO-1 on
#          2 GPUs and on 1 (scaling from 1 to 2 GPUs).
# STAGES (default "0 1 2 3") picks the ZeRO stages of the equiv step.
# Usage: bash scripts/gpu/gpu-dist.sh [step...]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-out/gpu-dist}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
dev=build-gpu/dev
lj=$dev/ljperf
steps=${*:-nccl equiv 8b 1b}
common=(--model llama3-tiny --data-path /tmp/kjv --seq-length 256 --micro-batch-size 4 --global-batch-size 16
        --train-iters 20 --lr 3e-3 --lr-warmup-iters 5 --seed 5 --log-interval 1 --eval-iters 2 --device cuda)
nvidia-smi -L
torch_line() { python3 -c "import json,sys;r=json.load(open(sys.argv[1]));print('%.0f tokens/s per GPU, MFU %.1f%%, %.1f GiB allocated, %.1f GiB device' % (r['tokens_per_s_per_gpu'] if 'tokens_per_s_per_gpu' in r else r['tokens_per_s'], 100*r['mfu'], r['peak_mem_gib'], r['device_mem_used_gib']))" "$1" 2>/dev/null; }
for s in $steps; do
  case $s in
  nccl)
    timeout 100 "$dev/test_dist" --nccl 2 >"$OUT/test_dist_nccl.log" 2>&1
    echo "test_dist --nccl 2: rc=$? $(tail -1 "$OUT/test_dist_nccl.log")"
    ;;
  equiv)
    [ -f /tmp/kjv.idx ] || "$lj" prepare --input .cache/data/kjv.txt --split-on blank-line --output-prefix /tmp/kjv \
      --tokenizer .cache/tokenizer/llama3/tokenizer.json >"$OUT/prepare.log" 2>&1
    timeout 60 "$lj" train "${common[@]}" --log-json "$OUT/g1.jsonl" >"$OUT/g1.log" 2>&1
    echo "1 GPU: rc=$?"
    for st in ${STAGES:-0 1 2 3}; do
      timeout 90 "$lj" train "${common[@]}" --nproc-per-node 2 --zero-stage $st --log-json "$OUT/g2_$st.jsonl" \
        >"$OUT/g2_$st.log" 2>&1
      echo "2 GPUs, ZeRO stage $st: rc=$? $(grep -m1 'data parallel' "$OUT/g2_$st.log")"
    done
    python3 - "$OUT" <<'PY'
import json, sys, os
d = sys.argv[1]
def load(p):
    return {r["iteration"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r} if os.path.exists(p) else {}
one = load(d + "/g1.jsonl")
for st in sorted(int(p[3:-6]) for p in os.listdir(d) if p.startswith("g2_") and p.endswith(".jsonl")):
    two = load(d + "/g2_%d.jsonl" % st)
    common = sorted(set(one) & set(two))
    if not common:
        print("stage %d: no common iterations" % st); continue
    worst = max(abs(one[i] - two[i]) / one[i] for i in common)
    print("stage %d: %d iterations, worst relative loss difference vs 1 GPU %.2e; last loss %.4f vs %.4f"
          % (st, len(common), worst, one[common[-1]], two[common[-1]]))
PY
    ;;
  resume)
    d=$OUT/resume; rm -rf "$d"; mkdir -p "$d"
    timeout 90 "$lj" train "${common[@]}" --nproc-per-node 2 --zero-stage 3 --save "$d/ck" --exit-interval 10 \
      --log-json "$d/r.jsonl" >"$d/first.log" 2>&1
    echo "resume, first half (ZeRO-3, 2 GPUs, saved at 10): rc=$? shards: $(ls "$d"/ck/iter_0000010 2>/dev/null | grep -c "^shard_.*\.bin$")"
    timeout 90 "$lj" train "${common[@]}" --nproc-per-node 2 --zero-stage 3 --save "$d/ck" --load "$d/ck" \
      --log-json "$d/r.jsonl" >"$d/second.log" 2>&1
    echo "resume, second half: rc=$? $(grep -m1 'resumed from' "$d/second.log")"
    timeout 120 "$lj" train "${common[@]}" --nproc-per-node 2 --zero-stage 3 --offload-optimizer cpu \
      --log-json "$d/off.jsonl" >"$d/off.log" 2>&1
    echo "offload (ZeRO-3, 2 GPUs): rc=$? $(grep -m1 'host memory' "$d/off.log")"
    python3 - "$OUT/g2_3.jsonl" "$d/r.jsonl" "$d/off.jsonl" <<'PY'
import json, sys
def load(p):
    out = {}
    for r in map(json.loads, open(p)):
        if "loss" in r and "iteration" in r:
            out[r["iteration"]] = r["loss"]
    return out
ref = load(sys.argv[1])
for name, p in (("resumed from shards", sys.argv[2]), ("optimizer offload", sys.argv[3])):
    try:
        run = load(p)
    except OSError as e:
        print("%s: no log (%s)" % (name, e)); continue
    common = sorted(set(ref) & set(run))
    if not common:
        print("%s: no common iterations" % name); continue
    diff = max(abs(ref[i] - run[i]) / ref[i] for i in common)
    same = sum(ref[i] == run[i] for i in common)
    print("%s: iterations %d-%d, %d of %d bit-identical, worst relative difference %.2e"
          % (name, common[0], common[-1], same, len(common), diff))
PY
    ;;
  goals)
    b8=(--model deepspeed/llama3-8b --device cuda --nproc-per-node 2 --seq-length 4096 --train-iters 8 --warmup-iters 2
        --no-progress)
    timeout 240 "$lj" benchmark "${b8[@]}" --micro-batch-size 2 --json "$OUT/goal_8b_mb2.json" >"$OUT/goal_8b_mb2.log" 2>&1
    echo "8b ZeRO-3 mb 2: rc=$?"; grep -E 'tokens/s per|MFU  |memory|met' "$OUT/goal_8b_mb2.log"
    timeout 300 "$lj" benchmark "${b8[@]}" --micro-batch-size auto --recompute auto --device-memory 106.5GiB \
      --json "$OUT/goal_8b_auto.json" >"$OUT/goal_8b_auto.log" 2>&1
    echo "8b ZeRO-3 planner within 106.5 GiB: rc=$?"; grep -E 'recompute planner|micro-batch [0-9]|tokens/s per|MFU  |memory|met' "$OUT/goal_8b_auto.log" | cut -c1-240
    b1=(--model llama3.2-1b --device cuda --seq-length 4096 --micro-batch-size 4 --train-iters 10 --warmup-iters 3 --no-progress)
    timeout 200 "$lj" benchmark "${b1[@]}" --nproc-per-node 2 --zero-stage 1 --json "$OUT/goal_1b_2.json" >"$OUT/goal_1b_2.log" 2>&1
    echo "1b ZeRO-1 2 GPUs: rc=$?"; grep -E 'tokens/s per|MFU  |memory|met' "$OUT/goal_1b_2.log"
    timeout 200 "$lj" benchmark "${b1[@]}" --json "$OUT/goal_1b_1.json" >"$OUT/goal_1b_1.log" 2>&1
    echo "1b 1 GPU: rc=$? $(grep -E '^tokens/s per' "$OUT/goal_1b_1.log")"
    python3 -c "import json,sys;a=json.load(open(sys.argv[1]))['tokens_per_s_per_gpu'];b=json.load(open(sys.argv[2]))['tokens_per_s_per_gpu'];print('scaling 1 -> 2 GPUs: %.0f / %.0f = %.1f%%' % (a, b, 100*a/b))" \
      "$OUT/goal_1b_2.json" "$OUT/goal_1b_1.json" 2>/dev/null
    ;;
  overlap)
    for ov in --no-overlap-comm --overlap-comm; do
      timeout 200 "$lj" benchmark --model deepspeed/llama3-8b --device cuda --nproc-per-node 2 --seq-length 4096 \
        --micro-batch-size 2 --train-iters 6 --warmup-iters 2 --no-progress $ov --json "$OUT/bench_8b$ov.json" \
        >"$OUT/bench_8b$ov.log" 2>&1
      echo "8b ZeRO-3 $ov: rc=$? $(grep -E '^tokens/s per device|^peak memory measured' "$OUT/bench_8b$ov.log" | tr -s ' ' | tr '\n' ' ')"
    done
    ;;
  8b|1b)
    if [ "$s" = 8b ]; then model=deepspeed/llama3-8b tmodel=llama3-8b mb=2 extra=(); else
      model=llama3.2-1b tmodel=llama3.2-1b mb=4 extra=(--zero-stage 1); fi
    timeout 240 "$lj" benchmark --model "$model" --device cuda --nproc-per-node 2 --seq-length 4096 \
      --micro-batch-size $mb --train-iters 6 --warmup-iters 2 --no-progress "${extra[@]}" \
      --json "$OUT/bench_$s.json" >"$OUT/bench_$s.log" 2>&1
    echo "$s ljperf 2 GPUs: rc=$?"; grep -E 'ZeRO|planner|tokens/s|MFU  |memory' "$OUT/bench_$s.log" | cut -c1-300
    timeout 300 torchrun --nproc-per-node 2 scripts/gpu/pytorch_ref.py --model "$tmodel" --seq-length 4096 \
      --micro-batch-size $mb --train-iters 6 --warmup-iters 2 --mode fsdp2 --json "$OUT/bench_${s}_fsdp2.json" \
      >"$OUT/torch_${s}_fsdp2.log" 2>&1
    echo "$s PyTorch FSDP2 + torch.compile 2 GPUs: rc=$? $(torch_line "$OUT/bench_${s}_fsdp2.json")"
    ;;
  esac
done

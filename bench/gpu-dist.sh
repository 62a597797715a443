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
#          what the overlap of communication with compute earns (the +CommOpt row's question).
# STAGES (default "0 1 2 3") picks the ZeRO stages of the equiv step.
# Usage: bash bench/gpu-dist.sh [step...]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-out/gpu-dist}
mkdir -p "$OUT"
source bench/gpu-env.sh
dev=build-gpu/dev
lj=$dev/ljperf
steps=${*:-nccl equiv 8b 1b}
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
    common=(--model llama3-tiny --data-path /tmp/kjv --seq-length 256 --micro-batch-size 4 --global-batch-size 16
            --train-iters 20 --lr 3e-3 --lr-warmup-iters 5 --seed 5 --log-interval 10 --eval-iters 2 --device cuda)
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
    timeout 300 torchrun --nproc-per-node 2 bench/pytorch_ref.py --model "$tmodel" --seq-length 4096 \
      --micro-batch-size $mb --train-iters 6 --warmup-iters 2 --mode fsdp2 --json "$OUT/bench_${s}_fsdp2.json" \
      >"$OUT/torch_${s}_fsdp2.log" 2>&1
    echo "$s PyTorch FSDP2 + torch.compile 2 GPUs: rc=$? $(torch_line "$OUT/bench_${s}_fsdp2.json")"
    ;;
  esac
done

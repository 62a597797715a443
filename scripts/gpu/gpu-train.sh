#!/usr/bin/env bash
# gpu-train.sh: the engine end to end on a GPU machine (repo root, $OUT set; carry .deb,
# build-gpu/dev, .cache/tokenizer, .cache/data/kjv.txt and .hfcheck). Steps, each with its
# own time limit, full logs in $OUT, a short summary last:
#   1. the whole model against the HF fixtures on the CUDA backend (gpu_hf_fixtures);
#   2. checkpoints exported by ljperf load in transformers with the same logits (.hfcheck/);
#   3. llama3-tiny trained on the KJV Bible for $STEPS steps on the GPU, its loss curve compared
#      at every logged step with the committed CPU curve of the same command ($CPU_REF);
#   4. `ljperf benchmark` (+ --ablation) and the PyTorch side-by-side for $BENCH_MODEL;
#   5. compute-sanitizer memcheck on a short training run;
#   6. CHECKPOINT_OPTIMIZATION=true ljperf benchmark --model deepspeed/llama3-8b (planned vs measured);
#   7. llama3.2-3b (micro-batch 2): ljperf and PyTorch torch.compile;
#   8. --decoupled-lr in the captured step (equal to --lr: the plain losses bit for bit) and
#      --rampup-batch-size on the GPU.
# Steps are skipped once $BUDGET seconds (default 330) have passed.
# Usage: bash scripts/gpu/gpu-train.sh [steps...]   (default: all)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/out/gpu-train}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
dev=build-gpu/dev
lj=$dev/ljperf
steps=${*:-1 2 3 4 5}
STEPS=${STEPS:-300}
BENCH_MODEL=${BENCH_MODEL:-llama3.2-1b}
BENCH_MB=${BENCH_MB:-4}
CPU_REF=${CPU_REF:-bench/results/2026-11-29-cpu-kjv-llama3-tiny-300.jsonl}
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
say "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

BUDGET=${BUDGET:-330}
for s in $steps; do
  if [ "$SECONDS" -gt "$BUDGET" ]; then say "step $s skipped (budget of $BUDGET s spent)"; continue; fi
  case $s in
  1)
    LJ_VERBOSE=1 timeout 120 "$dev/gpu_hf_fixtures" tests/fixtures/hf >"$OUT/hf_fixtures.log" 2>&1
    say "1. gpu_hf_fixtures rc=$? $(grep -c '\[ ok \]' "$OUT/hf_fixtures.log") ok, $(grep -c '\[FAIL\]' "$OUT/hf_fixtures.log") failed"
    LJ_CUDA_DEBUG=1 LJ_VERBOSE=1 timeout 120 "$dev/gpu_hf_fixtures" tests/fixtures/hf >"$OUT/hf_fixtures_sync.log" 2>&1
    say "1b. gpu_hf_fixtures with LJ_CUDA_DEBUG=1 (sync after each kernel) rc=$? $(grep -c '\[FAIL\]' "$OUT/hf_fixtures_sync.log") failed"
    ;;
  2)
    for d in .hfcheck/*/; do
      tol=1e-4
      case $d in *bf16*) tol=2e-2 ;; esac
      timeout 120 python3 scripts/gpu/hf_logits_check.py "$d" tests/fixtures/hf/untied/inputs.safetensors --tol $tol \
        >"$OUT/hfcheck_$(basename "$d").log" 2>&1
      say "2. transformers loads $(basename "$d"): rc=$? $(grep -E 'PASS|FAIL' "$OUT/hfcheck_$(basename "$d").log" | head -2 | tr '\n' ' ')"
    done
    ;;
  3)
    "$lj" prepare --input .cache/data/kjv.txt --split-on blank-line --output-prefix /tmp/kjv \
      --tokenizer .cache/tokenizer/llama3/tokenizer.json >"$OUT/prepare.log" 2>&1
    common=(--model llama3-tiny --data-path /tmp/kjv --seq-length 128 --micro-batch-size 8 --train-iters "$STEPS"
            --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 10 --log-interval 10 --eval-iters 8 --seed 1234)
    # the CPU curve of the same command is a committed reference (the CPU engine is deterministic
    # up to the thread count; 300 iterations take 5-8 minutes on a CPU); both gradient dtypes
    for gd in ${GRAD_DTYPES:-bf16 fp32}; do
      timeout 200 "$lj" train "${common[@]}" --device cuda --grad-dtype "$gd" --log-json "$OUT/kjv_cuda_$gd.jsonl" \
        >"$OUT/kjv_cuda_$gd.log" 2>&1
      say "3a. train llama3-tiny on cuda, $gd gradients: rc=$? $(tail -1 "$OUT/kjv_cuda_$gd.log")"
      python3 scripts/gpu/compare_curves.py "$OUT/kjv_cuda_$gd.jsonl" "$CPU_REF" --log-interval 10 \
        >"$OUT/kjv_compare_$gd.txt" 2>&1
      say "3b. GPU ($gd gradients) against the CPU reference $CPU_REF: rc=$?"
      tail -2 "$OUT/kjv_compare_$gd.txt" | tee -a "$summary"
    done
    ;;
  4)
    timeout 240 "$lj" benchmark --model "$BENCH_MODEL" --device cuda --seq-length 4096 --micro-batch-size "$BENCH_MB" \
      --train-iters 10 --warmup-iters 3 --no-progress --json "$OUT/bench_ljperf.json" >"$OUT/bench.log" 2>&1
    say "4a. ljperf benchmark rc=$?"; grep -E 'tokens/s|MFU|step time|memory' "$OUT/bench.log" | tee -a "$summary"
    timeout 200 "$lj" benchmark --model "$BENCH_MODEL" --device cuda --seq-length 4096 --micro-batch-size "$BENCH_MB" \
      --train-iters 5 --warmup-iters 2 --no-progress --ablation >"$OUT/ablation.log" 2>&1
    say "4b. ablation rc=$?"; tail -3 "$OUT/ablation.log" | tee -a "$summary"
    for mode in eager compile; do
      timeout 300 python3 scripts/gpu/pytorch_ref.py --model "$BENCH_MODEL" --seq-length 4096 --micro-batch-size "$BENCH_MB" \
        --train-iters 10 --warmup-iters 3 --mode $mode --json "$OUT/bench_torch_$mode.json" >"$OUT/torch_$mode.log" 2>&1
      say "4c. pytorch $mode rc=$? $(python3 -c "import json;r=json.load(open('$OUT/bench_torch_$mode.json'));print('%.0f tokens/s, MFU %.1f%%, %.1f GiB allocated, %.1f GiB device' % (r['tokens_per_s'], 100*r['mfu'], r['peak_mem_gib'], r['device_mem_used_gib']))" 2>/dev/null)"
    done
    ;;
  6)
    CHECKPOINT_OPTIMIZATION=true timeout 200 "$lj" benchmark --model deepspeed/llama3-8b --device cuda --seq-length 4096 \
      --train-iters 5 --warmup-iters 2 --no-progress --json "$OUT/bench_8b.json" >"$OUT/bench_8b.log" 2>&1
    say "6. deepspeed/llama3-8b with CHECKPOINT_OPTIMIZATION=true rc=$?"
    grep -E 'planner|tokens/s  |MFU  |memory' "$OUT/bench_8b.log" | cut -c1-400 | tee -a "$summary"
    ;;
  7)
    timeout 150 "$lj" benchmark --model llama3.2-3b --device cuda --seq-length 4096 --micro-batch-size 2 \
      --train-iters 8 --warmup-iters 3 --no-progress --json "$OUT/bench_3b.json" >"$OUT/bench_3b.log" 2>&1
    say "7a. ljperf llama3.2-3b rc=$?"; grep -E 'tokens/s  |MFU  |memory' "$OUT/bench_3b.log" | tee -a "$summary"
    for mode in eager compile; do
      timeout 200 python3 scripts/gpu/pytorch_ref.py --model llama3.2-3b --seq-length 4096 --micro-batch-size 2 \
        --train-iters 8 --warmup-iters 3 --mode $mode --json "$OUT/bench_3b_torch_$mode.json" >"$OUT/torch_3b_$mode.log" 2>&1
      say "7b. pytorch $mode llama3.2-3b rc=$? $(python3 -c "import json;r=json.load(open('$OUT/bench_3b_torch_$mode.json'));print('%.0f tokens/s, MFU %.1f%%, %.1f GiB allocated, %.1f GiB device' % (r['tokens_per_s'], 100*r['mfu'], r['peak_mem_gib'], r['device_mem_used_gib']))" 2>/dev/null)"
    done
    ;;
  5)
    timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$lj" train --model llama3-nano --device cuda \
      --data-path /tmp/kjv --seq-length 64 --micro-batch-size 2 --train-iters 2 --eval-iters 1 >"$OUT/memcheck.log" 2>&1
    say "5. memcheck on llama3-nano training: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | head -1)"
    ;;
  8)
    # the AdamW lr groups in the captured step (one micro-batch: the whole step is one CUDA graph):
    # --decoupled-lr equal to --lr gives the plain run's losses bit for bit; another one trains; the
    # batch ramp-up (2, 4, 6, 8 micro-batches of 2) runs to the end
    lr8=(--model llama3-tiny --device cuda --mock-data --seq-length 128 --micro-batch-size 8 --train-iters 12
         --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 2 --eval-iters 0 --quiet --seed 5)
    timeout 60 "$lj" train "${lr8[@]}" --log-json "$OUT/dec_plain.jsonl" >"$OUT/dec_plain.log" 2>&1
    timeout 60 "$lj" train "${lr8[@]}" --decoupled-lr 3e-3 --log-json "$OUT/dec_same.jsonl" >"$OUT/dec_same.log" 2>&1
    timeout 60 "$lj" train "${lr8[@]}" --decoupled-lr 1e-2 --decoupled-min-lr 1e-3 \
      --log-json "$OUT/dec_other.jsonl" >"$OUT/dec_other.log" 2>&1
    same=$(cmp -s <(grep -o '"loss": [^,]*' "$OUT/dec_plain.jsonl") <(grep -o '"loss": [^,]*' "$OUT/dec_same.jsonl") \
           && [ -s "$OUT/dec_plain.jsonl" ] && echo "equal" || echo "DIFFERENT")
    other=$(cmp -s <(grep -o '"loss": [^,]*' "$OUT/dec_plain.jsonl") <(grep -o '"loss": [^,]*' "$OUT/dec_other.jsonl") \
            && echo "SAME (the decoupled lr did nothing)" || echo "differ")
    say "8a. --decoupled-lr = --lr: losses $same to the plain run's; --decoupled-lr 1e-2: $other ($(grep -c '"loss"' "$OUT/dec_other.jsonl" 2>/dev/null) iterations)"
    timeout 120 "$lj" train --model llama3-tiny --device cuda --mock-data --seq-length 128 --micro-batch-size 2 \
      --global-batch-size 16 --rampup-batch-size 4 4 48 --train-samples 160 --lr 3e-3 --lr-warmup-samples 16 \
      --decoupled-lr 1e-2 --eval-iters 0 --quiet --log-json "$OUT/ramp.jsonl" >"$OUT/ramp.log" 2>&1
    say "8b. --rampup-batch-size 4 4 48 on the GPU: rc=$? batches $(grep -o '"global_batch_size": [0-9]*' "$OUT/ramp.jsonl" | cut -d' ' -f2 | tr '\n' ' ')"
    ;;
  esac
done
echo "== summary"
cat "$summary"

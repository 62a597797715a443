#!/usr/bin/env bash
# gpu-fp8-param.sh: --fp8-param-gather (kept FP8 weights, docs/megatron.md "FP8 parameters") on a
# GPU machine (repo root, $OUT set; carry .deb and build-gpu/dev, from `bash
# scripts/gpu/gpu-check.sh --prepare`; synthetic data only). Steps, logs in $OUT, a summary last:
#   1. the transpose of FP8 codes, the cast of f32 master weights via bf16 (the one-rank form: the
#      codes in the bf16 weights' places) and AdamW's master_only segments against the CPU
#      (test_ops_cuda check --op fp8_transpose, fp8_quantize_f32, adamw), also under
#      compute-sanitizer memcheck;
#   2. `ljperf benchmark --model $MODEL --micro-batch-size $MB --zero-stage 1` (one micro-batch per
#      step: the whole step as one CUDA graph, the cast in its optimizer tail), delayed (Megatron's
#      Llama 3 history 1024, max) and tensorwise, without and with the flag: tokens/s and the
#      measured peak memory, in the same job; the flag's measured peak against the run without it
#      (one rank keeps no bf16 copy of the FP8 linears' weights: not above it, where it was 2 bytes
#      per parameter of those linears above before);
#   3. `ljperf train --model $MODEL --mock-data --micro-batch-size $MB --global-batch-size 4 x $MB`
#      (gradient accumulation over 4 micro-batches: the weights cast once per step instead of 4
#      times), both recipes, without and with the flag: the mean tokens/s of iterations 6 to
#      $ITERS and the largest relative loss difference;
#   4. exact, llama3-tiny with --deterministic-mode: tensorwise with 4 micro-batches per step and
#      delayed with one, with the flag, equal bit for bit to the run without it, losses and final
#      state (master weights, AdamW moments: tests/ckpt_state.py same), and the flag's HF export
#      the master's (ckpt_state.py hf); a resume with the flag (10 + 10 iterations) equal to 20 at
#      once; and a run with the flag resumed from a checkpoint saved without it (the load writes
#      the master, the cast follows) equal to 20 at once without it;
#   5. on a machine with 2 GPUs or more: step 3 over 2 ranks with --zero-stage 3 (the layers'
#      all-gathers move the FP8 weights as bytes), delayed.
# Usage: bash scripts/gpu/gpu-fp8-param.sh [steps...]   (default: 1-5)
#   MODEL (llama3.2-1b), MB (4), ITERS (30).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/out/gpu-fp8-param}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
dev=build-gpu/dev
lj=$dev/ljperf
steps=${*:-1 2 3 4 5}
MODEL=${MODEL:-llama3.2-1b}
MB=${MB:-4}
ITERS=${ITERS:-30}
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
say "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
delayed=(--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max)
tensorwise=(--fp8-format hybrid --fp8-recipe tensorwise)
losses() { grep '"loss": ' "$1" | sed -E 's/.*"iteration": ([0-9]+), "loss": ([^,]+),.*/\1 \2/'; }
# the mean tokens/s of the training lines after the 5th, and the largest relative loss difference
mean_tps() { grep '"tokens_per_s": ' "$1" | sed -E 's/.*"iteration": ([0-9]+),.*"tokens_per_s": ([^,]+),.*/\1 \2/' |
  awk '$1 > 5 {s += $2; n++} END {printf "%.0f", n ? s / n : 0}'; }
worst() { paste <(losses "$1") <(losses "$2") | awk '{d = ($2 - $4) / $2; if (d < 0) d = -d; if (d > w) w = d}
  END {printf "%.2e", w}'; }
for s in $steps; do
  case $s in
  1)
    lj_check_ops 1 fp8_transpose fp8_quantize_f32 adamw
    ;;
  2)
    bench=(benchmark --model "$MODEL" --micro-batch-size "$MB" --zero-stage 1 --device cuda --no-progress)
    for r in delayed tensorwise; do
      declare -n flags=$r
      for p in "" --fp8-param-gather; do
        tag=$r${p:+-param}
        timeout 600 "$lj" "${bench[@]}" "${flags[@]}" $p --json "$OUT/bench_$tag.json" >"$OUT/bench_$tag.log" 2>&1
        say "2. $tag rc=$? $(grep -E '^tokens/s |peak memory measured' "$OUT/bench_$tag.log" | tr -s ' ' | tr '\n' ' ')"
      done
      say "2. $r: $(python3 - "$OUT/bench_$r.json" "$OUT/bench_$r-param.json" <<'PY'
import json, sys
try:
    (a, b) = (json.load(open(p)) for p in sys.argv[1:3])
    a, b = (x[0] if isinstance(x, list) else x for x in (a, b))
    d = b["peak_mem_gib"] - a["peak_mem_gib"]
    print("measured peak with the flag %.2f GiB, without %.2f (%+.2f GiB: %s); planned %.2f and %.2f"
          % (b["peak_mem_gib"], a["peak_mem_gib"], d, "not above" if d <= 0.02 else "ABOVE",
             b["planned_mem_gib"], a["planned_mem_gib"]))
except Exception as e:
    print("peaks not compared (%s)" % e)
PY
)"
    done
    ;;
  3|5)
    np=1
    [ "$s" = 5 ] && np=$(nvidia-smi -L | wc -l)
    if [ "$s" = 5 ] && [ "$np" -lt 2 ]; then say "5. left out: one GPU"; continue; fi
    [ "$s" = 5 ] && np=2
    zero=(--use-distributed-optimizer)
    [ "$s" = 5 ] && zero=(--zero-stage 3 --nproc-per-node 2)
    common=(--model "$MODEL" --mock-data --seq-length 4096 --micro-batch-size "$MB" --global-batch-size $((4 * MB * np))
            --train-iters "$ITERS" --lr 3e-4 --lr-warmup-iters 5 --log-interval 1 --eval-iters 0 --seed 1234
            --device cuda "${zero[@]}")
    recipes=(delayed tensorwise)
    [ "$s" = 5 ] && recipes=(delayed)
    for r in "${recipes[@]}"; do
      declare -n flags=$r
      for p in "" --fp8-param-gather; do
        tag=train$s-$r${p:+-param}
        timeout 900 "$lj" train "${common[@]}" "${flags[@]}" $p --log-json "$OUT/$tag.jsonl" >"$OUT/$tag.log" 2>&1
        say "$s. $tag rc=$? tokens/s $(mean_tps "$OUT/$tag.jsonl") $(grep -m1 -- '--fp8-param-gather:' "$OUT/$tag.log" | cut -c1-60)"
      done
      say "$s. $r: largest relative loss difference with the flag $(worst "$OUT/train$s-$r.jsonl" "$OUT/train$s-$r-param.jsonl")"
    done
    ;;
  4)
    common=(--model llama3-tiny --mock-data --seq-length 256 --micro-batch-size 4 --train-iters 20 --lr 3e-3
            --lr-warmup-iters 5 --log-interval 1 --eval-iters 0 --seed 1234 --device cuda --deterministic-mode
            --use-distributed-optimizer)
    for c in "tensorwise 16" "delayed 4"; do
      set -- $c
      declare -n flags=$1
      for p in "" --fp8-param-gather; do
        rm -rf "/tmp/ljfp8exact-$1${p:+-param}"
        timeout 600 "$lj" train "${common[@]}" "${flags[@]}" --global-batch-size "$2" $p \
          --save "/tmp/ljfp8exact-$1${p:+-param}" \
          --log-json "$OUT/exact-$1${p:+-param}.jsonl" >"$OUT/exact-$1${p:+-param}.log" 2>&1
      done
      if cmp -s <(losses "$OUT/exact-$1.jsonl") <(losses "$OUT/exact-$1-param.jsonl") &&
         [ "$(losses "$OUT/exact-$1.jsonl" | wc -l)" = 20 ]; then
        say "4. $1, global batch $2: with the flag bit for bit the run without it"
      else
        say "4. $1, global batch $2: DIFFERENT (largest relative $(worst "$OUT/exact-$1.jsonl" "$OUT/exact-$1-param.jsonl"))"
      fi
      if python3 tests/ckpt_state.py same "/tmp/ljfp8exact-$1" "/tmp/ljfp8exact-$1-param" >"$OUT/exact-$1-state.log" 2>&1
      then say "4. $1: final state (master, AdamW moments) with the flag bit for bit the run without it"
      else say "4. $1: final state DIFFERENT ($(tail -1 "$OUT/exact-$1-state.log"))"; fi
      python3 tests/ckpt_state.py hf "/tmp/ljfp8exact-$1-param" >"$OUT/exact-$1-hf.log" 2>&1
      say "4. $1: the flag's HF export is the master's: rc=$? $(tail -1 "$OUT/exact-$1-hf.log")"
    done
    rm -rf /tmp/ljfp8param
    timeout 600 "$lj" train "${common[@]}" "${delayed[@]}" --global-batch-size 16 --fp8-param-gather \
      --log-json "$OUT/resume-all.jsonl" >"$OUT/resume-all.log" 2>&1
    timeout 600 "$lj" train "${common[@]}" "${delayed[@]}" --global-batch-size 16 --fp8-param-gather \
      --save /tmp/ljfp8param --exit-interval 10 --log-json "$OUT/resume-part.jsonl" >"$OUT/resume-a.log" 2>&1
    timeout 600 "$lj" train "${common[@]}" "${delayed[@]}" --global-batch-size 16 --fp8-param-gather \
      --load /tmp/ljfp8param --log-json "$OUT/resume-part.jsonl" >"$OUT/resume-b.log" 2>&1
    if cmp -s <(losses "$OUT/resume-all.jsonl") <(losses "$OUT/resume-part.jsonl"); then
      say "4. resume with the flag (delayed, 10 + 10): bit for bit"
    else
      say "4. resume with the flag: DIFFERENT"
    fi
    # a checkpoint saved without the flag, resumed with it: tensorwise, 4 micro-batches per step
    rm -rf /tmp/ljfp8cross
    timeout 600 "$lj" train "${common[@]}" "${tensorwise[@]}" --global-batch-size 16 \
      --save /tmp/ljfp8cross --exit-interval 10 --log-json "$OUT/cross-part.jsonl" >"$OUT/cross-a.log" 2>&1
    timeout 600 "$lj" train "${common[@]}" "${tensorwise[@]}" --global-batch-size 16 --fp8-param-gather \
      --load /tmp/ljfp8cross --log-json "$OUT/cross-part.jsonl" >"$OUT/cross-b.log" 2>&1
    if cmp -s <(losses "$OUT/exact-tensorwise.jsonl") <(losses "$OUT/cross-part.jsonl"); then
      say "4. saved without the flag, resumed with it (tensorwise, 10 + 10): bit for bit 20 without it"
    else
      say "4. saved without the flag, resumed with it: DIFFERENT"
    fi
    ;;
  esac
done
echo "--- summary ($OUT/summary.txt)"
cat "$summary"

#!/usr/bin/env bash
# gpu-fp8.sh: the FP8 recipe on a GPU machine (repo root, $OUT set; carry .deb, build-gpu/dev,
# .cache/tokenizer and .cache/data/kjv.txt, as for bench/gpu-train.sh). Steps, logs in $OUT,
# a summary last:
#   1. the FP8 ops against the CPU emulation (test_ops_cuda check --op fp8_*), also under
#      compute-sanitizer memcheck (--quick);
#   2. FP8 GEMMs and casts timed against bf16 at the Llama shapes (test_ops_cuda perf);
#   3. llama3-tiny on the KJV Bible for $STEPS steps in bf16 and with each recipe (hybrid:
#      delayed with Megatron's Llama 3 history 1024/max, and tensorwise): the mean loss of the
#      last 100 iterations of each against bf16's (--log-json files in $OUT);
#   4. `ljperf benchmark --model $BENCH_MODEL --micro-batch-size $BENCH_MB` in bf16 and with
#      each recipe, in the same job (A/B on one machine).
# Usage: bash bench/gpu-fp8.sh [steps...]   (default: all)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/out/gpu-fp8}
mkdir -p "$OUT"
source bench/gpu-env.sh
dev=build-gpu/dev
lj=$dev/ljperf
steps=${*:-1 2 3 4}
STEPS=${STEPS:-2000}
BENCH_MODEL=${BENCH_MODEL:-llama3.2-1b}
BENCH_MB=${BENCH_MB:-4}
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
recipes=("--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
         "--fp8-format hybrid --fp8-recipe tensorwise")
names=(delayed tensorwise)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
say "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
for s in $steps; do
  case $s in
  1)
    for op in fp8_cast fp8_scale_update fp8_matmul; do
      timeout 300 "$dev/test_ops_cuda" check --op $op >"$OUT/check_$op.log" 2>&1
      say "1. test_ops_cuda check --op $op rc=$? $(tail -1 "$OUT/check_$op.log")"
      timeout 300 compute-sanitizer --tool memcheck "$dev/test_ops_cuda" check --quick --op $op \
        >"$OUT/memcheck_$op.log" 2>&1
      say "1b. memcheck --op $op rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_$op.log" | tail -1)"
    done
    ;;
  2)
    timeout 300 "$dev/test_ops_cuda" perf --op fp8_matmul >"$OUT/perf_fp8.log" 2>&1
    say "2. test_ops_cuda perf --op fp8_matmul rc=$?"
    grep RESULT "$OUT/perf_fp8.log" | tee -a "$summary"
    ;;
  3)
    "$lj" prepare --input .cache/data/kjv.txt --split-on blank-line --output-prefix /tmp/kjv \
      --tokenizer .cache/tokenizer/llama3/tokenizer.json >"$OUT/prepare.log" 2>&1
    common=(--model llama3-tiny --data-path /tmp/kjv --seq-length 128 --micro-batch-size 8 --train-iters "$STEPS"
            --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 10 --log-interval 100 --eval-iters 8 --seed 1234 --device cuda)
    timeout 1200 "$lj" train "${common[@]}" --log-json "$OUT/train_bf16.jsonl" >"$OUT/train_bf16.log" 2>&1
    say "3. bf16 rc=$?"
    mean100() { tail -100 "$1" | sed -E 's/.*"loss": ([^,]+),.*/\1/' | awk '{s += $1} END {printf "%.6f", s / NR}'; }
    ref=$(mean100 "$OUT/train_bf16.jsonl")
    for i in 0 1; do
      read -r -a flags <<< "${recipes[$i]}"
      timeout 1200 "$lj" train "${common[@]}" "${flags[@]}" --log-json "$OUT/train_${names[$i]}.jsonl" \
        >"$OUT/train_${names[$i]}.log" 2>&1
      rc=$?
      m=$(mean100 "$OUT/train_${names[$i]}.jsonl")
      say "3. ${names[$i]} rc=$rc: mean loss of the last 100 iterations $m vs bf16 $ref ($(awk -v a="$m" -v b="$ref" \
        'BEGIN {printf "%+.3f%%", 100 * (a - b) / b}'))"
    done
    ;;
  4)
    bench=(benchmark --model "$BENCH_MODEL" --micro-batch-size "$BENCH_MB" --device cuda --no-progress)
    timeout 600 "$lj" "${bench[@]}" --json "$OUT/bench_bf16.json" >"$OUT/bench_bf16.log" 2>&1
    say "4. bf16 rc=$? $(grep -E '^tokens/s |peak memory measured' "$OUT/bench_bf16.log" | tr -s ' ' | tr '\n' ' ')"
    for i in 0 1; do
      read -r -a flags <<< "${recipes[$i]}"
      timeout 600 "$lj" "${bench[@]}" "${flags[@]}" --json "$OUT/bench_${names[$i]}.json" >"$OUT/bench_${names[$i]}.log" 2>&1
      say "4. ${names[$i]} rc=$? $(grep -E '^tokens/s |peak memory measured' "$OUT/bench_${names[$i]}.log" | tr -s ' ' | tr '\n' ' ')"
    done
    ;;
  esac
done

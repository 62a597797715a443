#!/usr/bin/env bash
# gpu-fp8.sh: the FP8 recipe on a GPU machine (repo root, $OUT set; carry .deb, build-gpu/dev,
# .cache/tokenizer and .cache/data/kjv.txt, as for scripts/gpu/gpu-train.sh). Steps, logs in $OUT,
# a summary last:
#   1. the FP8 ops against the CPU emulation (test_ops_cuda check --op fp8_*: the casts fused
#      into the SwiGLU and the RMSNorm, the blockwise recipe's casts and GEMM included), also
#      under compute-sanitizer memcheck (--quick);
#   2. FP8 GEMMs and casts timed against bf16 at the Llama shapes (test_ops_cuda perf), the
#      blockwise recipe's too;
#   3. llama3-tiny on the KJV Bible for $STEPS steps in bf16 and with each recipe (hybrid:
#      delayed with Megatron's Llama 3 history 1024/max, tensorwise, and blockwise): the mean loss of the
#      last 100 iterations of each against bf16's (--log-json files in $OUT);
#   4. `ljperf benchmark --model $BENCH_MODEL --micro-batch-size $BENCH_MB` in bf16 and with
#      each recipe, in the same job (A/B on one machine);
#   5. the per-kernel breakdown of one step under Nsight Compute: llama3.2-1b's shapes with 2
#      layers, in bf16 and with each recipe (ncu_<recipe>.txt; scripts/gpu/ncu_summary.py);
#   6. `CHECKPOINT_OPTIMIZATION=true ljperf benchmark --model $PLAN_MODEL --seq-length $PLAN_SEQ`
#      (deepspeed/llama3-8b, 4096) in bf16 and with each recipe;
#   7. convergence: llama3.2-1b trained on real text ($CONV_DATA, default .gpudata/gcide.txt.gz:
#      carry it) for $CONV_STEPS (2000) steps of 4 x 512 tokens in bf16 and with each recipe, side
#      by side; the mean loss of each 100 iterations, and of the last 100 against bf16's;
#   8. exact resume: llama3-tiny with each recipe, 20 iterations at once and 10 + 10 through a
#      checkpoint, the last 10 losses equal bit for bit.
# Usage: bash scripts/gpu/gpu-fp8.sh [steps...]   (default: 1-6)
#   RECIPES (default "delayed tensorwise blockwise"): the recipes steps 3-8 run, beside bf16;
#   CHECK_OPS: the ops step 1 checks (default every FP8 op).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/out/gpu-fp8}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
dev=build-gpu/dev
lj=$dev/ljperf
steps=${*:-1 2 3 4 5 6}
STEPS=${STEPS:-2000}
BENCH_MODEL=${BENCH_MODEL:-llama3.2-1b}
BENCH_MB=${BENCH_MB:-4}
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
recipes=("--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
         "--fp8-format hybrid --fp8-recipe tensorwise"
         "--fp8-format hybrid --fp8-recipe blockwise")
names=(delayed tensorwise blockwise)
# the indexes into recipes/names of the recipes asked for
sel=()
for r in ${RECIPES:-delayed tensorwise blockwise}; do
  for i in 0 1 2; do [ "${names[$i]}" = "$r" ] && sel+=("$i"); done
done
[ ${#sel[@]} -gt 0 ] || { echo "gpu-fp8.sh: RECIPES names none of: ${names[*]}" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
say "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
# the mean loss of the last 100 training lines of a --log-json file
mean100() { grep '"loss": ' "$1" | tail -100 | sed -E 's/.*"loss": ([^,]+),.*/\1/' | awk '{s += $1} END {printf "%.6f", s / NR}'; }
# pick I: name and flags of run I: -1 bf16, else recipes[I]
pick() {
  name=bf16 flags=()
  [ "$1" -ge 0 ] && { name=${names[$1]}; read -r -a flags <<< "${recipes[$1]}"; }
  return 0
}
for s in $steps; do
  case $s in
  1)
    lj_check_ops 1 ${CHECK_OPS:-fp8_quantize fp8_swiglu fp8_rmsnorm fp8_scale_update fp8_matmul fp8_blockwise_cast fp8_blockwise_matmul}
    ;;
  2)
    timeout 300 "$dev/test_ops_cuda" perf --op fp8_matmul >"$OUT/perf_fp8.log" 2>&1
    say "2. test_ops_cuda perf --op fp8_matmul rc=$?"
    grep RESULT "$OUT/perf_fp8.log" | tee -a "$summary"
    timeout 300 "$dev/test_ops_cuda" perf --op fp8_blockwise_matmul >"$OUT/perf_fp8_blockwise.log" 2>&1
    say "2. test_ops_cuda perf --op fp8_blockwise_matmul rc=$?"
    grep RESULT "$OUT/perf_fp8_blockwise.log" | tee -a "$summary"
    ;;
  3)
    "$lj" prepare --input .cache/data/kjv.txt --split-on blank-line --output-prefix /tmp/kjv \
      --tokenizer .cache/tokenizer/llama3/tokenizer.json >"$OUT/prepare.log" 2>&1
    common=(--model llama3-tiny --data-path /tmp/kjv --seq-length 128 --micro-batch-size 8 --train-iters "$STEPS"
            --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 10 --log-interval 100 --eval-iters 8 --seed 1234 --device cuda)
    timeout 1200 "$lj" train "${common[@]}" --log-json "$OUT/train_bf16.jsonl" >"$OUT/train_bf16.log" 2>&1
    say "3. bf16 rc=$?"
    ref=$(mean100 "$OUT/train_bf16.jsonl")
    for i in "${sel[@]}"; do
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
    for i in "${sel[@]}"; do
      read -r -a flags <<< "${recipes[$i]}"
      timeout 600 "$lj" "${bench[@]}" "${flags[@]}" --json "$OUT/bench_${names[$i]}.json" >"$OUT/bench_${names[$i]}.log" 2>&1
      say "4. ${names[$i]} rc=$? $(grep -E '^tokens/s |peak memory measured' "$OUT/bench_${names[$i]}.log" | tr -s ' ' | tr '\n' ' ')"
    done
    ;;
  5)
    # llama3.2-1b's shapes with 2 layers (scripts/gpu/profile-8b.sh does the same for llama3-8b)
    cat >"$OUT/model-L2.json" <<EOF
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
 "intermediate_size": 8192, "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 8,
 "head_dim": 64, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
 "tie_word_embeddings": true, "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"}
EOF
    for i in -1 "${sel[@]}"; do
      pick "$i"
      timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
        "$lj" benchmark --model "$OUT/model-L2.json" --micro-batch-size "$BENCH_MB" --device cuda --no-progress \
        --train-iters 1 --warmup-iters 1 "${flags[@]}" >"$OUT/ncu_$name.csv" 2>"$OUT/ncu_$name.err"
      say "5. ncu $name rc=$?"
      python3 scripts/gpu/ncu_summary.py "$OUT/ncu_$name.csv" 2 >"$OUT/ncu_$name.txt"
      head -30 "$OUT/ncu_$name.txt" | tee -a "$summary"
    done
    ;;
  6)
    bench=(benchmark --model "${PLAN_MODEL:-deepspeed/llama3-8b}" --seq-length "${PLAN_SEQ:-4096}" --device cuda
           --no-progress --train-iters 8 --warmup-iters 3)
    for i in -1 "${sel[@]}"; do
      pick "$i"
      CHECKPOINT_OPTIMIZATION=true timeout 600 "$lj" "${bench[@]}" "${flags[@]}" --json "$OUT/bench8b_$name.json" \
        >"$OUT/bench8b_$name.log" 2>&1
      say "6. 8b planner $name rc=$? $(grep -E '^tokens/s |peak memory measured|^recompute' "$OUT/bench8b_$name.log" | tr -s ' ' | tr '\n' ' ')"
    done
    ;;
  7)
    # convergence: llama3.2-1b on real text (GCIDE by default), $CONV_STEPS steps in bf16 and with
    # each recipe, the three runs side by side on the one GPU (about 20 GiB each)
    CONV_STEPS=${CONV_STEPS:-2000}
    "$lj" prepare --input "${CONV_DATA:-.gpudata/gcide.txt.gz}" --split-on blank-line --utf8-errors replace --output-prefix /tmp/conv \
      --tokenizer .cache/tokenizer/llama3/tokenizer.json --quiet >"$OUT/conv_prepare.log" 2>&1 ||
      { say "7. prepare failed: $(tail -2 "$OUT/conv_prepare.log")"; continue; }
    conv=(--model llama3.2-1b --data-path /tmp/conv --seq-length 512 --micro-batch-size 4 --train-iters "$CONV_STEPS"
          --lr 3e-4 --min-lr 3e-5 --lr-warmup-iters 100 --log-interval 100 --eval-iters 8 --seed 1234 --device cuda)
    pids=()
    for i in -1 "${sel[@]}"; do
      pick "$i"
      timeout 1500 "$lj" train "${conv[@]}" "${flags[@]}" --log-json "$OUT/conv_$name.jsonl" >"$OUT/conv_$name.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    ref=$(mean100 "$OUT/conv_bf16.jsonl")
    say "7. bf16: $(grep -c "\"loss\": " "$OUT/conv_bf16.jsonl") iterations, mean loss of the last 100 $ref"
    for i in "${sel[@]}"; do
      n=${names[$i]} m=$(mean100 "$OUT/conv_$n.jsonl")
      say "7. $n: $(grep -c "\"loss\": " "$OUT/conv_$n.jsonl") iterations, mean loss of the last 100 $m ($(awk -v a="$m" -v b="$ref" \
        'BEGIN {printf "%+.3f%%", 100 * (a - b) / b}') against bf16)"
    done
    python3 - "$OUT" $(for i in "${sel[@]}"; do echo "${names[$i]}"; done) <<'PY' | tee -a "$summary"
import json, sys
out, names = sys.argv[1], ["bf16"] + sys.argv[2:]
runs = {}
for n in names:
    runs[n] = [r for r in (json.loads(l) for l in open("%s/conv_%s.jsonl" % (out, n)) if l.strip()) if "loss" in r]
steps = min(len(r) for r in runs.values())
print("iteration | " + " | ".join("%s loss (mean of 100)" % n for n in names))
for end in range(100, steps + 1, 100):
    cells = []
    for n in names:
        w = [r["loss"] for r in runs[n][end - 100:end]]
        cells.append("%.4f" % (sum(w) / len(w)))
    print("%d | %s" % (end, " | ".join(cells)))
PY
    ;;
  8)
    # exact resume: llama3-tiny on the KJV Bible, 20 iterations at once, and 10 + 10 through a
    # checkpoint, with each recipe: the last 10 losses must be equal bit for bit
    [ -f /tmp/kjv.idx ] || "$lj" prepare --input .cache/data/kjv.txt --split-on blank-line --output-prefix /tmp/kjv \
      --tokenizer .cache/tokenizer/llama3/tokenizer.json --quiet >"$OUT/prepare.log" 2>&1
    rs=(--model llama3-tiny --data-path /tmp/kjv --seq-length 128 --micro-batch-size 8 --lr 3e-3 --lr-warmup-iters 2
        --log-interval 1 --eval-iters 0 --seed 7 --device cuda --deterministic-mode)
    losses() { sed -E 's/.*"iteration": ([0-9]+),.*"loss": ([^,]+),.*/\1 \2/' "$1" | awk '$1 > 10'; }
    for i in "${sel[@]}"; do
      read -r -a flags <<< "${recipes[$i]}"
      n=${names[$i]} ck=/tmp/ck-$n
      rm -rf "$ck"
      "$lj" train "${rs[@]}" "${flags[@]}" --train-iters 20 --log-json "$OUT/resume_${n}_full.jsonl" >"$OUT/resume_$n.log" 2>&1
      "$lj" train "${rs[@]}" "${flags[@]}" --train-iters 20 --exit-interval 10 --save "$ck" --save-interval 10 \
        --log-json "$OUT/resume_${n}_a.jsonl" >>"$OUT/resume_$n.log" 2>&1
      "$lj" train "${rs[@]}" "${flags[@]}" --train-iters 20 --load "$ck" --save "$ck" \
        --log-json "$OUT/resume_${n}_b.jsonl" >>"$OUT/resume_$n.log" 2>&1
      if diff <(losses "$OUT/resume_${n}_full.jsonl") <(losses "$OUT/resume_${n}_b.jsonl") >/dev/null &&
         [ "$(losses "$OUT/resume_${n}_b.jsonl" | wc -l)" = 10 ]; then
        say "8. $n: resumed iterations 11-20 equal the uninterrupted run bit for bit"
      else
        say "8. $n: resume FAILED (see resume_$n.log)"
      fi
    done
    ;;
  esac
done

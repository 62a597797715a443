#!/usr/bin/env bash
# gpu-docmask.sh: the cost of document masking (--reset-position-ids, --reset-attention-mask,
# --eod-mask-loss) on a GPU machine (repo root, $OUT set; carry .deb, build-gpu/dev,
# .cache/tokenizer/llama3, .cache/data/kjv.txt and $GCIDE, default .gpudata/gcide.txt.gz, made by
# `gzip -c .cache/data/gcide.txt > .gpudata/gcide.txt.gz`: 13 MB, the plain file is 40 MB; all of
# it about 45 MB). Steps, logs in $OUT, a summary last:
#   1. the masked ops against the CPU backend (test_ops_cuda check --op attention_docs, --op
#      rope_pos), also under compute-sanitizer memcheck (--quick);
#   2. the attention op alone at seq 8192 (test_ops_cuda perf --op attention_docs): plain causal
#      (cuDNN, the default; the own flash kernels) against attention within documents (the own
#      flash kernels), with EODs about every 512 and 2048 tokens;
#   3. the whole training step at seq 8192 on real documents: `ljperf benchmark --model
#      $BENCH_MODEL --seq-length 8192 --micro-batch-size 1` on the KJV Bible (one chapter a
#      document: 1189 documents, mean 839 Llama 3 tokens, median 786, p90 1402) and on GCIDE (one
#      dictionary entry a document: mean 48 tokens), without the flags and with all three, in the
#      same job (A/B on one machine); the summary has tokens/s, the documents per sequence and the
#      attention work left (sum l(l+1)/2 over T(T+1)/2);
#   4. GPU against CPU training with the three flags: llama3-nano on KJV, 20 iterations of 2 x 256
#      tokens on each device; the losses side by side (bf16 against fp32).
# Usage: bash scripts/gpu/gpu-docmask.sh [steps...]   (default: all)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/out/gpu-docmask}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
dev=build-gpu/dev
lj=$dev/ljperf
steps=${*:-1 2 3 4}
BENCH_MODEL=${BENCH_MODEL:-llama3.2-1b}
tok=.cache/tokenizer/llama3/tokenizer.json
dm=(--reset-position-ids --reset-attention-mask --eod-mask-loss)
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
say "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
prepare() { # name, input, extra flags
  [ -s "/tmp/$1.idx" ] && return 0
  "$lj" prepare --input "$2" --split-on blank-line --output-prefix "/tmp/$1" --tokenizer "$tok" --quiet "${@:3}" \
    >"$OUT/prepare_$1.log" 2>&1 || { say "prepare $1 failed: $(tail -2 "$OUT/prepare_$1.log")"; return 1; }
}
for s in $steps; do
  case $s in
  1)
    lj_check_ops 1 attention_docs rope_pos
    ;;
  2)
    timeout 300 "$dev/test_ops_cuda" perf --op attention_docs >"$OUT/perf_attention_docs.log" 2>&1
    say "2. test_ops_cuda perf --op attention_docs rc=$?"
    grep -E "^attention_docs|RESULT" "$OUT/perf_attention_docs.log" | tee -a "$summary"
    ;;
  3)
    prepare kjv .cache/data/kjv.txt || continue
    prepare gcide "${GCIDE:-.gpudata/gcide.txt.gz}" --utf8-errors replace || continue
    for data in kjv gcide; do
      for mode in plain masked; do
        flags=(); [ $mode = masked ] && flags=("${dm[@]}")
        timeout 600 "$lj" benchmark --model "$BENCH_MODEL" --seq-length 8192 --micro-batch-size 1 --device cuda \
          --no-progress --data "/tmp/$data" "${flags[@]}" --json "$OUT/bench_${data}_$mode.json" \
          >"$OUT/bench_${data}_$mode.log" 2>&1
        say "3. $BENCH_MODEL seq 8192 $data $mode rc=$? $(grep -E '^tokens/s per device' "$OUT/bench_${data}_$mode.log" \
          | tr -s ' ') | $(grep -E '^step time median' "$OUT/bench_${data}_$mode.log" | tr -s ' ') \
          $(grep -E '^documents per sequence|^attention work' "$OUT/bench_${data}_$mode.log" | tr -s ' ' | tr '\n' ' ')"
      done
    done
    ;;
  4)
    prepare kjv .cache/data/kjv.txt || continue
    for d in cuda cpu; do
      timeout 600 "$lj" train --model llama3-nano --device $d --data-path /tmp/kjv --seq-length 256 \
        --micro-batch-size 2 --train-iters 20 --lr 3e-3 --eval-iters 0 --quiet "${dm[@]}" \
        --log-json "$OUT/train_$d.jsonl" >"$OUT/train_$d.log" 2>&1
      say "4. train $d rc=$?"
    done
    paste <(grep -o '"loss": [^,]*' "$OUT/train_cuda.jsonl") <(grep -o '"loss": [^,]*' "$OUT/train_cpu.jsonl") \
      | tee -a "$summary"
    ;;
  esac
done

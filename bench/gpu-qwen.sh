#!/usr/bin/env bash
# gpu-qwen.sh: the Qwen families on a GPU machine (repo root, $OUT set; carry .deb, build-gpu/dev,
# .cache/tokenizer and .cache/data/kjv.txt). Steps, logs in $OUT, a summary last:
#   ops       test_ops_cuda check of the Qwen ops (QK-norm with and without RoPE, the q/k/v bias)
#             and of AdamW, against the CPU backend;
#   fixtures  tests/fixtures/make_fixtures_qwen.py with the machine's transformers (the tiny
#             Qwen3 and Qwen2.5 references, $OUT/hf-qwen.tar), and the Llama fixtures on CUDA;
#   train     qwen3-0.6b on the KJV Bible prepared with the Qwen3 tokenizer, $QWEN_STEPS steps.
# Usage: bash bench/gpu-qwen.sh [step...]   (default: all)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-out/gpu-qwen}
mkdir -p "$OUT"
source bench/gpu-env.sh
dev=build-gpu/dev
lj=$dev/ljperf
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
for s in ${*:-ops fixtures train}; do
  case $s in
  ops)
    for op in qk_norm bias adamw; do
      timeout 300 "$dev/test_ops_cuda" check --op $op >"$OUT/check_$op.log" 2>&1
      say "ops: test_ops_cuda check --op $op rc=$? $(tail -1 "$OUT/check_$op.log")"
    done
    ;;
  fixtures)
    timeout 300 python3 tests/fixtures/make_fixtures_qwen.py /tmp/hf-qwen --tar "$OUT/hf-qwen.tar" \
      >"$OUT/fixtures_qwen.log" 2>&1
    say "fixtures: make_fixtures_qwen.py rc=$? $(tail -1 "$OUT/fixtures_qwen.log")"
    timeout 300 "$dev/gpu_hf_fixtures" >"$OUT/gpu_hf_fixtures.log" 2>&1
    say "fixtures: gpu_hf_fixtures rc=$? $(tail -1 "$OUT/gpu_hf_fixtures.log")"
    ;;
  train)
    "$lj" prepare --input .cache/data/kjv.txt --split-on blank-line --output-prefix /tmp/kjv-qwen3 \
      --tokenizer qwen3 --quiet >"$OUT/prepare_qwen3.log" 2>&1
    say "train: prepare --tokenizer qwen3 rc=$? $(grep -E 'wrote' "$OUT/prepare_qwen3.log")"
    timeout 300 "$lj" train --model qwen3-0.6b --tokenizer qwen3 --data-path /tmp/kjv-qwen3 --seq-length 1024 \
      --micro-batch-size 8 --train-iters "${QWEN_STEPS:-100}" --lr 3e-4 --lr-warmup-iters 10 --log-interval 10 \
      --eval-iters 4 --seed 1234 --device cuda --log-json "$OUT/train_qwen3.jsonl" >"$OUT/train_qwen3.log" 2>&1
    say "train: qwen3-0.6b rc=$? $(grep -E '^iteration' "$OUT/train_qwen3.log" | sed -n '1p;$p' | cut -c1-200 | tr '\n' ' ')"
    say "train: $(grep -E 'validation loss' "$OUT/train_qwen3.log" | tail -1)"
    ;;
  esac
done

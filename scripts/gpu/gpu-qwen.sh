#!/usr/bin/env bash
# gpu-qwen.sh: the Qwen families on a GPU machine (repo root, $OUT set; carry .deb, build-gpu/dev,
# .cache/tokenizer and .cache/data/kjv.txt). Steps, logs in $OUT, a summary last:
#   ops       test_ops_cuda check of the Qwen ops (QK-norm with and without RoPE, the q/k/v bias)
#             and of AdamW, against the CPU backend;
#   fixtures  tests/fixtures/make_fixtures_qwen.py with the machine's transformers (the tiny
#             Qwen3 and Qwen2.5 references, $OUT/hf-qwen.tar), and the whole model on CUDA against
#             the committed Llama and Qwen fixtures (gpu_hf_fixtures);
#   train     qwen3-0.6b on the KJV Bible prepared with the Qwen3 tokenizer, $QWEN_STEPS steps;
#   greedy    scripts/gpu/hf_greedy_check.py: a transformers-made Qwen3 and Qwen2 checkpoint, and the
#             export of the train step, continued greedily by ljperf and by transformers (fp32);
#   side      ljperf against PyTorch + transformers' Qwen3ForCausalLM in the same job, seq 4096
#             (scripts/gpu/side_by_side.sh): qwen3-1.7b mb 4 and qwen3-4b mb 2 against eager and
#             torch.compile, qwen3-8b with the planner against PyTorch with full checkpointing.
# Usage: bash scripts/gpu/gpu-qwen.sh [step...]   (default: ops fixtures train greedy)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-out/gpu-qwen}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
dev=build-gpu/dev
lj=$dev/ljperf
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
for s in ${*:-ops fixtures train greedy}; do
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
    say "fixtures: gpu_hf_fixtures (Llama) rc=$? $(tail -1 "$OUT/gpu_hf_fixtures.log")"
    timeout 300 "$dev/gpu_hf_fixtures" tests/fixtures/hf-qwen qwen3 qwen2 >"$OUT/gpu_hf_fixtures_qwen.log" 2>&1
    say "fixtures: gpu_hf_fixtures tests/fixtures/hf-qwen qwen3 qwen2 rc=$? $(tail -1 "$OUT/gpu_hf_fixtures_qwen.log")"
    ;;
  train)
    "$lj" prepare --input .cache/data/kjv.txt --split-on blank-line --output-prefix /tmp/kjv-qwen3 \
      --tokenizer qwen3 --quiet >"$OUT/prepare_qwen3.log" 2>&1
    say "train: prepare --tokenizer qwen3 rc=$? $(grep -E 'wrote' "$OUT/prepare_qwen3.log")"
    timeout 300 "$lj" train --model qwen3-0.6b --tokenizer qwen3 --data-path /tmp/kjv-qwen3 --seq-length 1024 \
      --micro-batch-size 8 --train-iters "${QWEN_STEPS:-100}" --lr 3e-4 --lr-warmup-iters 10 --log-interval 10 \
      --eval-iters 4 --seed 1234 --device cuda --log-json "$OUT/train_qwen3.jsonl" --save /tmp/qwen3-ckpt \
      >"$OUT/train_qwen3.log" 2>&1
    say "train: qwen3-0.6b rc=$? $(grep -E '^iteration' "$OUT/train_qwen3.log" | sed -n '1p;$p' | cut -c1-200 | tr '\n' ' ')"
    say "train: $(grep -E 'validation loss' "$OUT/train_qwen3.log" | tail -1)"
    ;;
  greedy)
    for fam in qwen3 qwen2; do
      timeout 300 python3 scripts/gpu/hf_greedy_check.py "/tmp/hf-$fam-random" --make $fam --ljperf "$lj" \
        --tokenizer .cache/tokenizer/qwen3/tokenizer.json >"$OUT/greedy_$fam.log" 2>&1
      say "greedy: transformers-made $fam rc=$? $(tail -1 "$OUT/greedy_$fam.log")"
    done
    last=$(cat /tmp/qwen3-ckpt/latest_checkpointed_iteration.txt 2>/dev/null)
    if [ -n "$last" ]; then
      timeout 300 python3 scripts/gpu/hf_greedy_check.py "/tmp/qwen3-ckpt/iter_$(printf %07d "$last")/hf" --ljperf "$lj" \
        >"$OUT/greedy_export.log" 2>&1
      say "greedy: ljperf's qwen3-0.6b export rc=$? $(tail -1 "$OUT/greedy_export.log")"
    fi
    ;;
  side)
    for run in "qwen3-1.7b 4" "qwen3-4b 2"; do
      read -r m mb <<<"$run"
      OUT=$OUT/side-$m LJPERF=$lj LJPERF_ARGS="--device cuda --no-progress" timeout 900 \
        bash scripts/gpu/side_by_side.sh "$m" 4096 "$mb" >"$OUT/side-$m.log" 2>&1
      say "side: $m mb $mb rc=$?"; tail -6 "$OUT/side-$m.log" | tee -a "$summary"
    done
    CHECKPOINT_OPTIMIZATION=true OUT=$OUT/side-qwen3-8b LJPERF=$lj LJPERF_ARGS="--device cuda --no-progress" \
      MODES=eager PYTORCH_ARGS="--checkpointing full" timeout 900 bash scripts/gpu/side_by_side.sh qwen3-8b 4096 1 \
      >"$OUT/side-qwen3-8b.log" 2>&1
    say "side: qwen3-8b planner against PyTorch with full checkpointing rc=$?"; tail -6 "$OUT/side-qwen3-8b.log" | tee -a "$summary"
    ;;
  esac
done

#!/usr/bin/env bash
# quickstart.sh: the README's main job. Sets up, builds, tokenizes the King James Bible with the
# Llama 3 tokenizer, trains the llama3-tiny preset on it (the GPU if there is one, else the
# CPU) with TensorBoard event files, saves a checkpoint (training state + a complete Hugging Face
# export), prints a sample, measures the same shape (benchmark and ablation) and draws it all
# with `ljperf report` (out/quickstart/report.html).
# Output goes to $LJ_QUICKSTART_DIR (default out/quickstart).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
bash scripts/setup.sh
bash scripts/build.sh
out=${LJ_QUICKSTART_DIR:-out/quickstart} # relative to the repository (the commands run there)
mkdir -p "$out"
cache=${LJPERF_CACHE:-$repo/.cache}

echo "== prepare: the King James Bible -> Megatron indexed dataset"
./build/ljperf prepare --input "$cache/data/kjv.txt" --split-on blank-line --output-prefix "$out/kjv"

echo "== train: llama3-tiny on the KJV Bible"
rm -rf "$out/ckpt"
./build/ljperf train --model llama3-tiny --device auto --data-path "$out/kjv" \
  --seq-length 128 --micro-batch-size 8 --train-iters 100 \
  --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 10 --lr-decay-style cosine \
  --log-interval 5 --eval-interval 25 --eval-iters 8 --save "$out/ckpt" --log-json "$out/train.jsonl" \
  --tensorboard-dir "$out/tb"

echo "== generate: a sample from the checkpoint"
./build/ljperf generate --load "$out/ckpt" --prompt "And God said" --max-new-tokens 48 --temperature 0.7 --top-k 40

echo "== plan, benchmark and ablation of the same shape"
shape=(--model llama3-tiny --device auto --seq-length 128 --micro-batch-size 8)
./build/ljperf plan "${shape[@]}" --json "$out/plan.json" >/dev/null
./build/ljperf benchmark "${shape[@]}" --train-iters 4 --warmup-iters 1 --no-progress --json "$out/benchmark.json"
./build/ljperf benchmark "${shape[@]}" --train-iters 3 --warmup-iters 1 --no-progress --ablation --json "$out/ablation.json"

echo "== report: open $out/report.html in a browser (tensorboard --logdir $out/tb shows the same run live)"
./build/ljperf report "$out" --title "ljperf quick start: llama3-tiny on the King James Bible"

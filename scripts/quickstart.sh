#!/usr/bin/env bash
# quickstart.sh: the README's main job. Sets up, builds, tokenizes the King James Bible with the
# Llama 3 tokenizer, trains the llama3-tiny preset on it (the GPU if there is one, else the
# CPU), saves a checkpoint (training state + Hugging Face export) and prints a sample.
# Output goes to $LJ_QUICKSTART_DIR (default out/quickstart).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
bash scripts/setup.sh
bash scripts/build.sh
out=${LJ_QUICKSTART_DIR:-$repo/out/quickstart}
mkdir -p "$out"
cache=${LJPERF_CACHE:-$repo/.cache}

echo "== prepare: the King James Bible -> Megatron indexed dataset"
./build/ljperf prepare --input "$cache/data/kjv.txt" --split-on blank-line --output-prefix "$out/kjv"

echo "== train: llama3-tiny on the KJV Bible"
rm -rf "$out/ckpt"
./build/ljperf train --model llama3-tiny --device auto --data-path "$out/kjv" \
  --seq-length 128 --micro-batch-size 8 --train-iters 100 \
  --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 10 --lr-decay-style cosine \
  --log-interval 5 --eval-iters 8 --save "$out/ckpt" --log-json "$out/train.jsonl"

echo "== generate: a sample from the checkpoint"
./build/ljperf generate --load "$out/ckpt" --prompt "And God said" --max-new-tokens 48 --temperature 0.7 --top-k 40

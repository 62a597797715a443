#!/usr/bin/env bash
# hf-tokenizer.sh: transformers' AutoTokenizer on ljperf's Hugging Face exports (the class it
# picks, its warnings, the ids) against the original tokenizer files, for Llama 3 and Qwen3, with
# the tokenizer_config.json beside the tokenizer (copied) and without it (derived).
#   bash scripts/gpu/hf-tokenizer.sh --prepare   (here, with the CPU build in build/ or $LJPERF and
#       the set-up script's .cache): trains four 1-step tiny models on the CPU with --save and packs
#       their exports without the weights, with the original files, into
#       build-gpu/dev/hf-tokenizer.tar.xz;
#   bash scripts/gpu/hf-tokenizer.sh             (on the GPU machine, repo root, $OUT set; carry
#       build-gpu/dev): unpacks it and runs scripts/gpu/hf_tokenizer_check.py, log in $OUT.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
pack=build-gpu/dev/hf-tokenizer.tar.xz

if [ "${1:-}" = "--prepare" ]; then
  set -e
  lj=${LJPERF:-$repo/build/ljperf}
  cache=${LJPERF_CACHE:-$repo/.cache}
  [ -x "$lj" ] || { echo "no ljperf at $lj: build it (cmake -S . -B build -DLJ_CUDA=OFF) or set LJPERF"; exit 1; }
  w=$(mktemp -d)
  trap 'rm -rf "$w"' EXIT
  head -c 100000 "$cache/data/kjv.txt" >"$w/kjv.txt"
  cat >"$w/qwen3.json" <<'JSON'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 64,
 "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 16, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
 "tie_word_embeddings": true, "bos_token_id": 151643, "eos_token_id": 151645}
JSON
  mkdir -p "$w/pack"
  for t in llama3 qwen3; do
    mkdir -p "$w/pack/$t/orig" "$w/alone-$t"
    cp "$cache/tokenizer/$t/tokenizer.json" "$cache/tokenizer/$t/tokenizer_config.json" "$w/pack/$t/orig/"
    cp "$cache/tokenizer/$t/tokenizer.json" "$w/alone-$t/"
    "$lj" prepare --input "$w/kjv.txt" --split-on blank-line --output-prefix "$w/kjv-$t" --tokenizer "$cache/tokenizer/$t" --quiet >/dev/null
    model=llama3-nano
    [ "$t" = qwen3 ] && model=$w/qwen3.json
    for kind in copied derived; do
      tokdir=$cache/tokenizer/$t
      [ "$kind" = derived ] && tokdir=$w/alone-$t
      "$lj" train --model "$model" --device cpu --data-path "$w/kjv-$t" --seq-length 32 --micro-batch-size 2 \
        --train-iters 1 --quiet --save "$w/ckpt-$t-$kind" --tokenizer "$tokdir" >/dev/null 2>"$w/train.err" ||
        { cat "$w/train.err"; exit 1; }
      mkdir -p "$w/pack/$t/$kind"
      (cd "$w/ckpt-$t-$kind/iter_0000001/hf" && cp config.json generation_config.json special_tokens_map.json \
        tokenizer.json tokenizer_config.json "$w/pack/$t/$kind/")
    done
  done
  mkdir -p build-gpu/dev
  tar -C "$w/pack" -cJf "$pack" .
  echo "prepared: $pack ($(du -h "$pack" | cut -f1)); on the GPU machine: bash scripts/gpu/hf-tokenizer.sh (carry build-gpu/dev)"
  exit 0
fi

OUT=${OUT:-$repo/out/hf-tokenizer}
mkdir -p "$OUT"
[ -s "$pack" ] || { echo "no $pack: run bash scripts/gpu/hf-tokenizer.sh --prepare on the build machine"; exit 1; }
d=/tmp/hf-tokenizer
rm -rf "$d" && mkdir -p "$d" && tar -C "$d" -xJf "$pack"
python3 scripts/gpu/hf_tokenizer_check.py \
  "llama3=$d/llama3/orig:$d/llama3/copied" "llama3-derived=$d/llama3/orig:$d/llama3/derived" \
  "qwen3=$d/qwen3/orig:$d/qwen3/copied" "qwen3-derived=$d/qwen3/orig:$d/qwen3/derived" >"$OUT/hf_tokenizer.log" 2>&1
rc=$?
grep -E '^(transformers|llama3|qwen3)|^  .*warns|FAIL' "$OUT/hf_tokenizer.log"
echo "hf_tokenizer_check.py rc=$rc: $(grep -c '^PASS' "$OUT/hf_tokenizer.log") PASS, $(grep -c '^FAIL' "$OUT/hf_tokenizer.log") FAIL (log: $OUT/hf_tokenizer.log)"
exit $rc

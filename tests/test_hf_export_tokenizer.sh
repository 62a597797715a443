#!/usr/bin/env bash
# test_hf_export_tokenizer.sh: the Hugging Face export in each checkpoint is complete: besides
# config.json and the weights it holds tokenizer.json (the run's tokenizer, BOS prepended for
# Llama 3, unchanged for Qwen3, which adds none), tokenizer_config.json (the one beside it,
# copied, or one derived from the tokenizer), special_tokens_map.json and generation_config.json
# (BOS/EOS); `generate` reads the tokenizer beside the model (with no other tokenizer to be
# found), and bad --tokenizer-model / --tokenizer-type values are named.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/hf_export_tokenizer"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
tok="$LJ_CACHE/tokenizer/llama3/tokenizer.json"
[ -s "$tok" ] || fail "$tok is missing: run scripts/setup.sh"
head -c 100000 "$LJ_CACHE/data/kjv.txt" > "$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" --tokenizer "$tok" >/dev/null 2>&1 || fail "prepare"
common=(--model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2 --train-iters 1 --quiet)

# 1. the default tokenizer (the set-up script's Llama 3, with its tokenizer_config.json)
LJPERF_CACHE="$LJ_CACHE" "$LJPERF" train "${common[@]}" --save "$tmp/ckpt" 2>"$tmp/train.err" || { cat "$tmp/train.err"; fail "train"; }
hf="$tmp/ckpt/iter_0000001/hf"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json special_tokens_map.json generation_config.json; do
  [ -s "$hf/$f" ] || fail "$hf/$f is missing"
done
python3 - "$tok" "$hf/tokenizer.json" <<'PY' || fail "tokenizer.json is not the run's tokenizer with BOS prepended by its post-processor"
import json, sys
src, out = (json.load(open(p)) for p in sys.argv[1:])
pp_src, pp_out = src.pop("post_processor", None), out.pop("post_processor")
assert src == out, "fields other than post_processor differ"
assert pp_out["type"] == "Sequence" and pp_out["processors"][0] == pp_src, pp_out
tp = pp_out["processors"][1]
assert tp["type"] == "TemplateProcessing", tp
assert tp["single"][0] == {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, tp["single"]
assert tp["special_tokens"]["<|begin_of_text|>"]["ids"] == [128000], tp["special_tokens"]
PY
cmp -s "$(dirname "$tok")/tokenizer_config.json" "$hf/tokenizer_config.json" || fail "tokenizer_config.json is not the one beside the tokenizer"
python3 - "$hf" <<'PY' || fail "special tokens / generation config"
import json, sys
d = sys.argv[1]
st = json.load(open(f"{d}/special_tokens_map.json"))
gc = json.load(open(f"{d}/generation_config.json"))
cfg = json.load(open(f"{d}/config.json"))
assert st == {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, st
assert gc == {"bos_token_id": 128000, "eos_token_id": 128001}, gc
assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (128000, 128001), cfg
PY
echo "export: six files, the tokenizer copied, BOS/EOS 128000/128001"

# 2. generate finds the tokenizer beside the model (no cache to fall back to)
LJPERF_CACHE="$tmp/no-cache" "$LJPERF" generate --load "$tmp/ckpt" --prompt "And God said" --max-new-tokens 4 \
  --device cpu >"$tmp/gen.out" 2>"$tmp/gen.err" || { cat "$tmp/gen.err"; fail "generate without a default tokenizer"; }
grep -q "^And God said" "$tmp/gen.out" || fail "generate output"
echo "generate: the tokenizer beside the model"

# 3. a tokenizer.json alone (a directory given): tokenizer_config.json is derived
mkdir -p "$tmp/tok_alone" && cp "$tok" "$tmp/tok_alone/"
LJPERF_CACHE="$tmp/no-cache" "$LJPERF" train "${common[@]}" --save "$tmp/ckpt2" --tokenizer-model "$tmp/tok_alone" \
  --tokenizer-type HuggingFaceTokenizer 2>"$tmp/train2.err" || { cat "$tmp/train2.err"; fail "train --tokenizer-model DIR"; }
python3 - "$tmp/ckpt2/iter_0000001/hf/tokenizer_config.json" <<'PY' || fail "derived tokenizer_config.json"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["tokenizer_class"] == "PreTrainedTokenizerFast", c
assert (c["bos_token"], c["eos_token"]) == ("<|begin_of_text|>", "<|end_of_text|>"), c
assert c["model_max_length"] == 131072 or c["model_max_length"] > 0, c
PY
echo "derived tokenizer_config.json: PreTrainedTokenizerFast with BOS/EOS"

# 4. the Qwen3 tokenizer by name (a model of Megatron's shape flags, sized by its vocabulary): the
#    export keeps its post-processor (Qwen adds no BOS), special_tokens_map.json agrees with the
#    copied tokenizer_config.json, and EOS is <|endoftext|>
qtok="$LJ_CACHE/tokenizer/qwen3/tokenizer.json"
[ -s "$qtok" ] || fail "$qtok is missing: run scripts/setup.sh"
LJPERF_CACHE="$LJ_CACHE" "$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjvq" \
  --tokenizer qwen3 >/dev/null 2>&1 || fail "prepare --tokenizer qwen3"
LJPERF_CACHE="$LJ_CACHE" "$LJPERF" train --device cpu --data-path "$tmp/kjvq" --num-layers 1 --hidden-size 64 \
  --num-attention-heads 4 --swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear \
  --attention-dropout 0 --hidden-dropout 0 --tokenizer-type HuggingFaceTokenizer --tokenizer-model qwen3 \
  --seq-length 32 --micro-batch-size 2 --train-iters 1 --quiet --save "$tmp/ckptq" 2>"$tmp/trainq.err" ||
  { cat "$tmp/trainq.err"; fail "train --tokenizer-model qwen3"; }
python3 - "$qtok" "$tmp/ckptq/iter_0000001/hf" <<'PY' || fail "the Qwen3 export"
import json, sys
src, d = json.load(open(sys.argv[1])), sys.argv[2]
out = json.load(open(f"{d}/tokenizer.json"))
assert out == src, "the exported tokenizer.json differs from Qwen3's (a BOS added?)"
st = json.load(open(f"{d}/special_tokens_map.json"))
assert st == {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, st
gc = json.load(open(f"{d}/generation_config.json"))
cfg = json.load(open(f"{d}/config.json"))
assert gc == {"bos_token_id": 151643, "eos_token_id": 151643}, gc
assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (151643, 151643) and cfg["vocab_size"] >= 151669, cfg
PY
LJPERF_CACHE="$tmp/no-cache" "$LJPERF" generate --load "$tmp/ckptq" --prompt "And God said" --max-new-tokens 2 \
  --device cpu >"$tmp/genq.out" 2>"$tmp/genq.err" || { cat "$tmp/genq.err"; fail "generate with the Qwen3 tokenizer"; }
grep -q "^And God said" "$tmp/genq.out" || fail "generate output (Qwen3)"
echo "export: the Qwen3 tokenizer unchanged (no BOS), its special tokens, EOS 151643"

# 5. no tokenizer that fits: the export goes without, with a note; bad flags are named
LJPERF_CACHE="$tmp/no-cache" "$LJPERF" train "${common[@]}" --save "$tmp/ckpt3" 2>"$tmp/train3.err" || { cat "$tmp/train3.err"; fail "train without a tokenizer"; }
grep -q "no tokenizer in the Hugging Face exports" "$tmp/train3.err" || fail "no note about the missing tokenizer"
[ ! -e "$tmp/ckpt3/iter_0000001/hf/tokenizer.json" ] || fail "a tokenizer appeared from nowhere"
bad() { local want=$1; shift
  if "$LJPERF" train "$@" >/dev/null 2>"$tmp/bad.err"; then fail "accepted: $*"; fi
  grep -q -- "$want" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "message lacks '$want'"; }
}
bad "--tokenizer-model: $tmp/kjv.txt: not valid JSON" "${common[@]}" --save "$tmp/bad1" --tokenizer-model "$tmp/kjv.txt"
bad "--tokenizer-model: $tmp/none.json: cannot open" "${common[@]}" --save "$tmp/bad1" --tokenizer-model "$tmp/none.json"
bad "--tokenizer-type: 'SentencePieceTokenizer' is not one of HuggingFaceTokenizer, NullTokenizer" "${common[@]}" --tokenizer-type SentencePieceTokenizer
bad "--tokenizer-model gpt5: no such file or directory, and not a tokenizer name (llama3, qwen3" "${common[@]}" --save "$tmp/bad1" --tokenizer-model gpt5
[ ! -e "$tmp/bad1/iter_0000001" ] || fail "a refused run saved a checkpoint"
echo "bad input: named"
echo "test_hf_export_tokenizer: passed"

#!/usr/bin/env bash
# test_hf_export_tokenizer.sh: the Hugging Face export in each checkpoint is complete: besides
# config.json and the weights it holds tokenizer.json (the run's tokenizer: for Llama 3 with BOS
# prepended by its post-processor, every other field as it was and in its order; for Qwen3, which
# adds none, the original file byte for byte), tokenizer_config.json (the one beside it, copied,
# or one derived from the tokenizer that names the class the published files name:
# PreTrainedTokenizerFast for Llama 3, Qwen2Tokenizer for Qwen3), special_tokens_map.json and
# generation_config.json (BOS/EOS); config.json carries what transformers' save_pretrained writes
# (architectures, model_type, dtype and torch_dtype, transformers_version: one that transformers'
# check for Mistral's old tokenizer regex lets pass, so AutoTokenizer warns of no "incorrect
# regex pattern"); `generate` reads the tokenizer beside the model (with no other tokenizer to be
# found), and bad --tokenizer-model / --tokenizer-type values are named. AutoTokenizer itself runs
# on the GPU machine: scripts/gpu/hf-tokenizer.sh.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/hf_export_tokenizer"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
tok="$LJ_CACHE/tokenizer/llama3/tokenizer.json"
[ -s "$tok" ] || fail "$tok is missing: run scripts/setup.sh"
head -c 100000 "$LJ_CACHE/data/kjv.txt" > "$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" --tokenizer "$tok" >/dev/null 2>&1 || fail "prepare"
# config.json as transformers' save_pretrained writes it, and the decision of transformers'
# _patch_mistral_regex (tokenization_utils_fast.py) for a local directory: it warns of an
# "incorrect regex pattern" unless transformers_version is at most 4.57.2 with a model_type other
# than Mistral's, or above 4.57.3
cat > "$tmp/hfcheck.py" <<'PY'
import json
def version(v):
    return tuple(int(x) for x in v.split(".")[:3])
def regex_warning(cfg):
    v, mt = cfg.get("transformers_version"), cfg.get("model_type")
    if v and version(v) <= (4, 57, 2):
        return mt is None or mt in ("mistral", "mistral3", "voxtral", "ministral", "pixtral")
    return not (v and version(v) > (4, 57, 3))
def check_config(d, arch, model_type):
    cfg = json.load(open(f"{d}/config.json"))
    assert cfg["architectures"] == [arch] and cfg["model_type"] == model_type, cfg
    assert cfg["dtype"] == cfg["torch_dtype"] and cfg["dtype"] in ("float32", "bfloat16"), cfg
    assert not regex_warning(cfg), f"transformers would warn of an incorrect regex pattern: {cfg.get('transformers_version')}"
    gc = json.load(open(f"{d}/generation_config.json"))
    assert gc["transformers_version"] == cfg["transformers_version"], gc
    return cfg
PY
export PYTHONPATH="$tmp"
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
assert list(json.load(open(sys.argv[1]))) == list(json.load(open(sys.argv[2]))), "the fields' order changed"
assert src == out, "fields other than post_processor differ"
assert pp_out["type"] == "Sequence" and pp_out["processors"][0] == pp_src, pp_out
tp = pp_out["processors"][1]
assert tp["type"] == "TemplateProcessing", tp
assert tp["single"][0] == {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, tp["single"]
assert tp["special_tokens"]["<|begin_of_text|>"]["ids"] == [128000], tp["special_tokens"]
PY
cmp -s "$(dirname "$tok")/tokenizer_config.json" "$hf/tokenizer_config.json" || fail "tokenizer_config.json is not the one beside the tokenizer"
python3 - "$hf" <<'PY' || fail "special tokens / generation config / config.json"
import json, sys
from hfcheck import check_config
d = sys.argv[1]
st = json.load(open(f"{d}/special_tokens_map.json"))
gc = json.load(open(f"{d}/generation_config.json"))
cfg = check_config(d, "LlamaForCausalLM", "llama")
assert st == {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, st
assert (gc["bos_token_id"], gc["eos_token_id"]) == (128000, 128001), gc
assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (128000, 128001), cfg
assert cfg["pretraining_tp"] == 1, cfg
tc = json.load(open(f"{d}/tokenizer_config.json"))
assert tc["tokenizer_class"] == "PreTrainedTokenizerFast", tc["tokenizer_class"]
PY
echo "export: six files, the tokenizer copied, BOS/EOS 128000/128001, config.json as transformers writes it"

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
cmp -s "$qtok" "$tmp/ckptq/iter_0000001/hf/tokenizer.json" || fail "the Qwen3 export's tokenizer.json is not Qwen3's, byte for byte"
cmp -s "$(dirname "$qtok")/tokenizer_config.json" "$tmp/ckptq/iter_0000001/hf/tokenizer_config.json" ||
  fail "the Qwen3 export's tokenizer_config.json is not the one beside the tokenizer"
python3 - "$qtok" "$tmp/ckptq/iter_0000001/hf" <<'PY' || fail "the Qwen3 export"
import json, sys
from hfcheck import check_config
src, d = json.load(open(sys.argv[1])), sys.argv[2]
st = json.load(open(f"{d}/special_tokens_map.json"))
assert st == {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, st
gc = json.load(open(f"{d}/generation_config.json"))
cfg = check_config(d, "LlamaForCausalLM", "llama")  # Megatron's shape flags build a Llama
assert (gc["bos_token_id"], gc["eos_token_id"]) == (151643, 151643), gc
assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (151643, 151643) and cfg["vocab_size"] >= 151669, cfg
tc = json.load(open(f"{d}/tokenizer_config.json"))
assert tc["tokenizer_class"] == "Qwen2Tokenizer", tc["tokenizer_class"]
PY
LJPERF_CACHE="$tmp/no-cache" "$LJPERF" generate --load "$tmp/ckptq" --prompt "And God said" --max-new-tokens 2 \
  --device cpu >"$tmp/genq.out" 2>"$tmp/genq.err" || { cat "$tmp/genq.err"; fail "generate with the Qwen3 tokenizer"; }
grep -q "^And God said" "$tmp/genq.out" || fail "generate output (Qwen3)"
echo "export: the Qwen3 tokenizer unchanged (no BOS), its special tokens, EOS 151643"

# 4b. the Qwen3 tokenizer.json alone, a Qwen3 model: the derived tokenizer_config.json names
#     Qwen2Tokenizer, as Qwen3's published one does
mkdir -p "$tmp/qtok_alone" && cp "$qtok" "$tmp/qtok_alone/"
python3 - "$tmp/qwen3.json" <<'PY'
import json, sys
json.dump({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 64,
           "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
           "tie_word_embeddings": True, "bos_token_id": 151643, "eos_token_id": 151645}, open(sys.argv[1], "w"))
PY
LJPERF_CACHE="$tmp/no-cache" "$LJPERF" train --model "$tmp/qwen3.json" --device cpu --data-path "$tmp/kjvq" --seq-length 32 \
  --micro-batch-size 2 --train-iters 1 --quiet --save "$tmp/ckptq2" --tokenizer "$tmp/qtok_alone" 2>"$tmp/trainq2.err" ||
  { cat "$tmp/trainq2.err"; fail "train a Qwen3 model with a lone Qwen3 tokenizer.json"; }
python3 - "$tmp/ckptq2/iter_0000001/hf" <<'PY' || fail "the derived Qwen3 tokenizer_config.json"
import json, sys
from hfcheck import check_config
d = sys.argv[1]
check_config(d, "Qwen3ForCausalLM", "qwen3")
tc = json.load(open(f"{d}/tokenizer_config.json"))
assert tc["tokenizer_class"] == "Qwen2Tokenizer", tc
assert tc["bos_token"] is None and tc["eos_token"] == "<|endoftext|>" and tc["pad_token"] == "<|endoftext|>", tc
assert tc["add_prefix_space"] is False and tc["errors"] == "replace", tc
PY
cmp -s "$qtok" "$tmp/ckptq2/iter_0000001/hf/tokenizer.json" || fail "the lone Qwen3 tokenizer.json is not copied byte for byte"
echo "derived tokenizer_config.json: Qwen2Tokenizer for the Qwen3 tokenizer"

# 5. data that records no tokenizer (Megatron's: no sidecar) and no default: the export goes
#    without, with a note; bad flags are named
cp -L "$tmp/kjv.bin" "$tmp/megatron.bin" && cp -L "$tmp/kjv.idx" "$tmp/megatron.idx"
LJPERF_CACHE="$tmp/no-cache" "$LJPERF" train "${common[@]}" --data-path "$tmp/megatron" --save "$tmp/ckpt3" 2>"$tmp/train3.err" ||
  { cat "$tmp/train3.err"; fail "train without a tokenizer"; }
grep -q "no tokenizer in the Hugging Face exports" "$tmp/train3.err" || fail "no note about the missing tokenizer"
[ ! -e "$tmp/ckpt3/iter_0000001/hf/tokenizer.json" ] || fail "a tokenizer appeared from nowhere"
bad() { local want=$1; shift
  if "$LJPERF" train "$@" >/dev/null 2>"$tmp/bad.err"; then fail "accepted: $*"; fi
  grep -q -- "$want" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "message lacks '$want'"; }
}
bad "--tokenizer-model: $tmp/kjv.txt: not valid JSON" "${common[@]}" --save "$tmp/bad1" --tokenizer-model "$tmp/kjv.txt"
bad "--tokenizer-model: $tmp/none.json: cannot open" "${common[@]}" --save "$tmp/bad1" --tokenizer-model "$tmp/none.json"
bad "--tokenizer-type: 'SentencePieceTokenizer' is not one of HuggingFaceTokenizer, Llama3Tokenizer, NullTokenizer" "${common[@]}" --tokenizer-type SentencePieceTokenizer
bad "--tokenizer-model gpt5: no such file or directory, and not a tokenizer name (llama3, qwen3" "${common[@]}" --save "$tmp/bad1" --tokenizer-model gpt5
[ ! -e "$tmp/bad1/iter_0000001" ] || fail "a refused run saved a checkpoint"
echo "bad input: named"
echo "test_hf_export_tokenizer: passed"

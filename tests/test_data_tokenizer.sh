#!/usr/bin/env bash
# test_data_tokenizer.sh: the tokenizer a dataset was prepared with (its .fingerprint.json's
# record) goes where the data goes without being told: `train --save` puts it in the Hugging
# Face exports (with the tokenizer_config.json beside it), found at its recorded path or, moved,
# by its recorded name (llama3, ORG/NAME of the Hugging Face cache); Megatron's model shape flags
# take its vocabulary. A tokenizer that is gone is said, and the export then carries none (not the
# set-up script's default). `train --tokenizer-model X` on data of another tokenizer, and a blend
# of two datasets of different tokenizers, are refused naming both (--override-tokenizer: a
# warning); the same tokenizer in another file (ljperf's own export of it) is accepted.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/data_tokenizer"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
tok="$LJ_CACHE/tokenizer/llama3/tokenizer.json"
mini="$LJ_SOURCE_DIR/tests/data/gpt2_mini/tokenizer.json"
[ -s "$tok" ] || fail "$tok is missing: run scripts/setup.sh"
head -c 20000 "$LJ_CACHE/data/kjv.txt" > "$tmp/kjv.txt"
prep() { "$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --quiet "$@" >/dev/null; }
train=(--model llama3-nano --device cpu --seq-length 32 --micro-batch-size 2 --train-iters 1 --eval-iters 0 --quiet)
run() { local name=$1; shift; "$LJPERF" train "${train[@]}" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
  { cat "$tmp/$name.err"; fail "train: $name"; }; }

# 1. prepared with llama3 (by name): the export carries it, with its tokenizer_config.json, although
#    the cache of the set-up script is not to be found
LJPERF_CACHE="$LJ_CACHE" prep --output-prefix "$tmp/l3" --tokenizer llama3
LJPERF_CACHE="$tmp/no-cache" run l3 --data-path "$tmp/l3" --save "$tmp/ck1"
cmp -s "$(dirname "$tok")/tokenizer_config.json" "$tmp/ck1/iter_0000001/hf/tokenizer_config.json" ||
  { cat "$tmp/l3.err"; fail "the export does not carry the data's tokenizer_config.json"; }
grep -q "the one $tmp/l3 was prepared with (llama3)" "$tmp/l3.err" || { cat "$tmp/l3.err"; fail "no note of the data's tokenizer"; }
echo "ok: the data's tokenizer in the export, untold"

# 2. moved: found again by its recorded name (ORG/NAME in the Hugging Face cache)
hub="$tmp/hf/hub/models--tok-org--mini"
rev=0123456789abcdef0123456789abcdef01234567
mkdir -p "$hub/snapshots/$rev" "$hub/refs" "$hub/blobs"
cp "$mini" "$hub/blobs/b1" && ln -s ../../blobs/b1 "$hub/snapshots/$rev/tokenizer.json" && printf '%s' "$rev" > "$hub/refs/main"
export HF_HOME="$tmp/hf"
prep --output-prefix "$tmp/mini" --tokenizer tok-org/mini
grep -q "\"path\":\"$hub/snapshots/$rev/tokenizer.json\"" "$tmp/mini.fingerprint.json" || fail "the record's path is not the snapshot's"
mkdir -p "$tmp/hf2/hub" && mv "$hub" "$tmp/hf2/hub/"
HF_HOME="$tmp/hf2" run moved --data-path "$tmp/mini" --save "$tmp/ck2"
cmp -s "$mini" "$tmp/ck2/iter_0000001/hf/tokenizer.json" || { cat "$tmp/moved.err"; fail "the moved tokenizer is not found by its name"; }
echo "ok: moved, found by its recorded name"

# 3. gone: said, and the export carries no tokenizer (not the set-up script's Llama 3)
HF_HOME="$tmp/nowhere" LJPERF_CACHE="$LJ_CACHE" run gone --data-path "$tmp/mini" --save "$tmp/ck3"
grep -q "no tokenizer in the Hugging Face exports: $tmp/mini was prepared with tok-org/mini, which is not at" "$tmp/gone.err" ||
  { cat "$tmp/gone.err"; fail "no note of the missing tokenizer"; }
[ ! -e "$tmp/ck3/iter_0000001/hf/tokenizer.json" ] || fail "a tokenizer appeared from nowhere"
echo "ok: gone: said, none exported"

# 4. --tokenizer-model of another tokenizer: refused naming both; --override-tokenizer: a warning
bad() { local want=$1; shift
  if "$LJPERF" train "${train[@]}" "$@" >/dev/null 2>"$tmp/bad.err"; then fail "accepted: $*"; fi
  grep -qF -- "$want" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "message lacks '$want'"; }
}
bad "--tokenizer-model $mini is not the tokenizer $tmp/l3 was prepared with (llama3, vocabulary 128256" \
  --data-path "$tmp/l3" --tokenizer-model "$mini"
LJPERF_CACHE="$LJ_CACHE" run override --data-path "$tmp/l3" --tokenizer-model "$mini" --override-tokenizer
grep -q "warning: --override-tokenizer: --tokenizer-model $mini is not the tokenizer $tmp/l3 was prepared with" "$tmp/override.err" ||
  { cat "$tmp/override.err"; fail "no warning with --override-tokenizer"; }
echo "ok: another tokenizer: refused, or a warning with --override-tokenizer"

# 5. the same tokenizer in another file: the export's tokenizer.json (its post_processor rewritten)
LJPERF_CACHE="$LJ_CACHE" run same --data-path "$tmp/l3" --tokenizer-model "$tmp/ck1/iter_0000001/hf"
echo "ok: the export's copy of the data's tokenizer is the same tokenizer"

# 6. a blend of two tokenizers: refused naming both datasets
bad "--data-path: $tmp/l3 was prepared with the tokenizer llama3 (vocabulary 128256), $tmp/mini with tok-org/mini (vocabulary 264)" \
  --data-path 0.5 "$tmp/l3" 0.5 "$tmp/mini"
echo "ok: a blend of two tokenizers: refused"

# 7. Megatron's model shape flags take the data's vocabulary
HF_HOME="$tmp/hf2" LJPERF_CACHE="$tmp/no-cache" "$LJPERF" train --device cpu --data-path "$tmp/mini" --num-layers 1 --hidden-size 32 \
  --num-attention-heads 2 --swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear \
  --attention-dropout 0 --hidden-dropout 0 --seq-length 32 --micro-batch-size 2 --train-iters 1 --quiet --save "$tmp/ck7" \
  >"$tmp/shape.out" 2>"$tmp/shape.err" || { cat "$tmp/shape.err"; fail "shape flags on data that records its tokenizer"; }
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); assert c["vocab_size"] >= 264 and c["eos_token_id"] == 263, c' \
  "$tmp/ck7/iter_0000001/hf/config.json" || fail "the shape flags' vocabulary is not the data's tokenizer's"
echo "ok: the model shape flags take the data's tokenizer"
echo "test_data_tokenizer: passed"

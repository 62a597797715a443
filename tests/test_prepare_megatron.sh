#!/usr/bin/env bash
# test_prepare_megatron.sh: `ljperf prepare` with Megatron-LM's tools/preprocess_data.py command
# line: --input, --output-prefix, --tokenizer-type HuggingFaceTokenizer / Llama3Tokenizer with
# --tokenizer-model, --json-keys with several keys (one dataset per key, named
# PREFIX_KEY_document.bin/.idx as preprocess_data.py names them, each byte for byte the dataset of
# that key alone; a JSON line's documents stay together across the pipeline's rounds), --append-eod,
# --workers, --partitions (accepted, the input order kept). The sidecar records the tokenizer
# (name, path, hashes, vocabulary, BOS/EOS). Refused by name: --split-sentences, other tokenizer
# types, HuggingFaceTokenizer without a model, a tiktoken file, a key given twice, several keys
# over text, --json-key with --json-keys, --partitions 0, a line without one of the keys.
set -euo pipefail
: "${LJPERF:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/prepare_megatron"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
mini="$LJ_SOURCE_DIR/tests/data/gpt2_mini/tokenizer.json"
same() { cmp -s "$1.bin" "$2.bin" && cmp -s "$1.idx" "$2.idx" || fail "$3: $1 differs from $2"; }

# 80,000 lines of two keys: more documents than one round of the pipeline holds (65,536)
python3 - "$tmp/docs.jsonl" <<'PY'
import json, random, sys
random.seed(1)
words = ["the", "hello", "there", "world", "tell", "hell", "oh", "!", "t", "he"]
with open(sys.argv[1], "w") as f:
    for i in range(80000):
        text = " ".join(random.choice(words) for _ in range(random.randint(1, 12)))
        title = "" if i % 7 == 0 else " ".join(random.choice(words) for _ in range(random.randint(1, 3)))
        f.write(json.dumps({"title": title, "id": i, "text": text}) + "\n")
PY

# 1. Megatron's command line: two keys, two datasets named as preprocess_data.py names them
"$LJPERF" prepare --input "$tmp/docs.jsonl" --output-prefix "$tmp/mg" --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model "$mini" --json-keys text title --append-eod --workers 2 --partitions 2 > "$tmp/mg.out" 2>"$tmp/mg.err" ||
  { cat "$tmp/mg.err"; fail "prepare with Megatron's flags"; }
for k in text title; do
  [ -s "$tmp/mg_${k}_document.bin" ] && [ -s "$tmp/mg_${k}_document.idx" ] || fail "no mg_${k}_document.bin/.idx"
done
[ ! -e "$tmp/mg.bin" ] || fail "mg.bin written beside the per-key datasets"
grep -q -- "--data-path $tmp/mg_text_document" "$tmp/mg.out" || { cat "$tmp/mg.out"; fail "the summary does not name --data-path"; }
grep -q -- "--partitions 2: ljperf tokenizes in one pass" "$tmp/mg.err" || { cat "$tmp/mg.err"; fail "no note on --partitions"; }
# each equal to the key prepared alone (ljperf's names), on one worker
"$LJPERF" prepare --input "$tmp/docs.jsonl" --output-prefix "$tmp/one_text" --tokenizer "$mini" --json-key text --workers 1 --quiet >/dev/null
"$LJPERF" prepare --input "$tmp/docs.jsonl" --output-prefix "$tmp/one_title" --tokenizer "$mini" --json-key title --workers 1 --quiet >/dev/null
same "$tmp/mg_text_document" "$tmp/one_text" "key text"
same "$tmp/mg_title_document" "$tmp/one_title" "key title"
grep -q 'key "title": 68571 documents' "$tmp/mg.out" || { cat "$tmp/mg.out"; fail "per-key counts (empty titles skipped)"; }
echo "ok: --json-keys text title: two datasets PREFIX_KEY_document, each the key's alone"

# 2. one key through --json-keys: Megatron's name too; --tokenizer-type alone gives it as well
"$LJPERF" prepare --input "$tmp/docs.jsonl" --output-prefix "$tmp/k1" --tokenizer "$mini" --json-keys text --quiet >/dev/null
same "$tmp/k1_text_document" "$tmp/one_text" "--json-keys text"
"$LJPERF" prepare --input "$tmp/docs.jsonl" --output-prefix "$tmp/k2" --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model "$(dirname "$mini")" --quiet >/dev/null
same "$tmp/k2_text_document" "$tmp/one_text" "--tokenizer-type, the default key"
echo "ok: one key: PREFIX_text_document"

# 3. the sidecar records the tokenizer
python3 - "$tmp/mg_title_document.fingerprint.json" "$mini" <<'PY' || fail "the sidecar's tokenizer record"
import json, sys
t = json.load(open(sys.argv[1]))["tokenizer"]
assert t["path"] == sys.argv[2] and t["name"] == sys.argv[2], t
assert t["vocab_size"] == 264 and t["eos_token_id"] == 263, t
assert len(t["file_xxh3_64"]) == 16 and len(t["ids_xxh3_64"]) == 16, t
PY
echo "ok: the sidecar records the tokenizer"

# 4. Llama3Tokenizer: the set-up script's Llama 3 tokenizer.json (when there is a cache)
if [ -n "${LJ_CACHE:-}" ] && [ -s "$LJ_CACHE/tokenizer/llama3/tokenizer.json" ]; then
  head -200 "$tmp/docs.jsonl" > "$tmp/small.jsonl"
  LJPERF_CACHE="$LJ_CACHE" "$LJPERF" prepare --input "$tmp/small.jsonl" --output-prefix "$tmp/l3" --tokenizer-type Llama3Tokenizer \
    --quiet >/dev/null || fail "--tokenizer-type Llama3Tokenizer"
  LJPERF_CACHE="$LJ_CACHE" "$LJPERF" prepare --input "$tmp/small.jsonl" --output-prefix "$tmp/l3b" --tokenizer llama3 --quiet >/dev/null
  same "$tmp/l3_text_document" "$tmp/l3b" "Llama3Tokenizer"
  python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["tokenizer"]; assert t["name"]=="llama3" and t["vocab_size"]==128256, t' \
    "$tmp/l3_text_document.fingerprint.json" || fail "the record names llama3"
  echo "ok: --tokenizer-type Llama3Tokenizer"
fi

# 5. refused by name, nothing written
bad() { local want=$1; shift
  rm -rf "$tmp/bad"
  if "$LJPERF" prepare --quiet "$@" --output-prefix "$tmp/bad/out" >/dev/null 2>"$tmp/bad.err"; then fail "accepted: $*"; fi
  grep -qF -- "$want" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "message lacks '$want': $*"; }
  [ -z "$(ls "$tmp/bad" 2>/dev/null)" ] || fail "left files behind: $*"
}
printf 'the hello\n' > "$tmp/plain.txt"
printf '{"text": "the"}\n{"text": "hello"}\n' > "$tmp/notitle.jsonl"
bad "--split-sentences: Megatron-LM splits documents into sentences with NLTK" --input "$tmp/docs.jsonl" --tokenizer "$mini" --split-sentences
bad "--tokenizer-type: 'SentencePieceTokenizer' is not one of HuggingFaceTokenizer, Llama3Tokenizer" --input "$tmp/docs.jsonl" \
  --tokenizer-type SentencePieceTokenizer --tokenizer-model "$mini"
bad "--tokenizer-type: 'GPT2BPETokenizer' is not one of" --input "$tmp/docs.jsonl" --tokenizer-type GPT2BPETokenizer
bad "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model" --input "$tmp/docs.jsonl" --tokenizer-type HuggingFaceTokenizer
touch "$tmp/tokenizer.model"
bad "--tokenizer-model $tmp/tokenizer.model: a tiktoken model file" --input "$tmp/docs.jsonl" --tokenizer-type Llama3Tokenizer \
  --tokenizer-model "$tmp/tokenizer.model"
bad "--tokenizer-model $mini and --tokenizer $tmp/x.json: two tokenizers" --input "$tmp/docs.jsonl" --tokenizer-model "$mini" --tokenizer "$tmp/x.json"
bad "--json-keys: 'text' is given twice" --input "$tmp/docs.jsonl" --tokenizer "$mini" --json-keys text title text
bad "$tmp/plain.txt is not JSON lines; a document of text has no keys" --input "$tmp/plain.txt" --tokenizer "$mini" --json-keys text title
bad "--json-key text and --json-keys title: give one" --input "$tmp/docs.jsonl" --tokenizer "$mini" --json-key text --json-keys title
bad "--partitions 0: expected 1 to 1024" --input "$tmp/docs.jsonl" --tokenizer "$mini" --partitions 0
bad "notitle.jsonl:1: no key \"title\"" --input "$tmp/notitle.jsonl" --tokenizer "$mini" --json-keys text title
printf '{"text": "the", "title": ""}\n' > "$tmp/emptytitle.jsonl"
bad "--json-keys: no documents for key \"title\"" --input "$tmp/emptytitle.jsonl" --tokenizer "$mini" --json-keys text title
echo "ok: refused by name, nothing written"
echo "test_prepare_megatron: passed"

#!/usr/bin/env bash
# test_tokenizer_oracle.sh: `ljperf prepare` against independent JavaScript tokenizers under
# Node.js (tests/oracle_encode.js), token for token: the Llama 3 tokenizer against
# llama3-tokenizer-js, and the Qwen3 tokenizer (`--tokenizer qwen3`: NFC normalizer, single
# digits, its own special tokens) against Tokenizers.js (@huggingface/tokenizers). Both on real
# text from three corpora (the whole KJV Bible, 4.1 MB, one document cut into pieces for the
# workers; 600 KB of the Jargon File; 300 KB of GCIDE), on tests/data/tricky.txt (digits,
# punctuation runs, CRLF, tabs, emoji, CJK, Arabic, Devanagari, combining marks, odd spaces), and
# on ill-formed UTF-8 with --utf8-errors replace (Node replaces ill-formed bytes the same way when
# it reads a file); Qwen3 also on tests/data/qwen3_tricky.txt (decomposed text that NFC composes,
# reordered marks, singletons, composition exclusions, Hangul jamo, digits of many scripts, CJK,
# chat markup with <|im_start|>, <|im_end|>, <|endoftext|>, <think>, <tool_call>), with
# --allow-special-tokens since the oracles always turn special-token text into ids.
# No BOS/EOS on either side (--no-append-eos; the oracles are called without special tokens).
# Missing Node.js or a package is a failure, not a skip: run scripts/setup.sh.
#
# Known differences of llama3-tokenizer-js from Hugging Face tokenizers, kept out of these
# inputs: its JavaScript \s does not match U+0085 and does match U+FEFF, and it always turns
# special-token text into ids (ljperf prepare does only with --allow-special-tokens).
set -euo pipefail

: "${LJPERF:?set LJPERF to the ljperf binary}"
src=${LJ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
cache=${LJ_CACHE:-$src/.cache}
tmp=${LJ_TEST_TMP:-/tmp/ljperf-test}/oracle
rm -rf "$tmp" && mkdir -p "$tmp"

fail() { echo "FAIL: $*" >&2; exit 1; }
command -v node >/dev/null 2>&1 || fail "node (Node.js) is not installed; run scripts/setup.sh"
for p in llama3-tokenizer-js @huggingface/tokenizers; do
  [ -f "$cache/oracle/node_modules/$p/package.json" ] || fail "$p is missing under $cache/oracle; run scripts/setup.sh"
done
tok="$cache/tokenizer/llama3/tokenizer.json"
qwen="$cache/tokenizer/qwen3/tokenizer.json"
for t in "$tok" "$qwen"; do [ -s "$t" ] || fail "$t is missing; run scripts/setup.sh"; done
export LJPERF_CACHE="$cache" # --tokenizer qwen3 names the cache's
for c in kjv jargon gcide; do
  [ -s "$cache/data/$c.txt" ] || fail "$cache/data/$c.txt is missing; run scripts/setup.sh"
done

# Inputs, cut at line ends so that no UTF-8 sequence is split.
cp "$cache/data/kjv.txt" "$tmp/kjv.txt"
head -c 614400 "$cache/data/jargon.txt" | sed '$d' > "$tmp/jargon.txt"
head -c 307200 "$cache/data/gcide.txt" | sed '$d' > "$tmp/gcide.txt"
cp "$src/tests/data/tricky.txt" "$tmp/tricky.txt"
cp "$src/tests/data/qwen3_tricky.txt" "$tmp/qwen3_tricky.txt"
{ printf 'ill-formed: \xff\xfe end\n'; printf 'truncated \xe2\x82 euro, \xf0\x9f\x98 smile\n';
  printf 'surrogate \xed\xa0\x80, overlong \xc0\xaf and \xf0\x80\x80\x80, too big \xf4\x90\x80\x80\n';
  printf 'lone continuation \x80\xbf in text \xe2\x82\xac fine\n'; head -c 2000 "$src/tests/data/tricky.txt"; } > "$tmp/bad_utf8.txt"

total=0
qwen_total=0
compare() { # llama3|qwen3 NAME [extra prepare flags]
  local which=$1 name=$2; shift 2
  local f="$tmp/$name.txt" out="$tmp/$which.$name" tokarg oracle oracle_name
  if [ "$which" = llama3 ]; then
    tokarg=$tok oracle=(--package "$cache/oracle/node_modules/llama3-tokenizer-js") oracle_name=llama3-tokenizer-js
  else
    tokarg=qwen3 oracle=(--package "$cache/oracle/node_modules/@huggingface/tokenizers" --tokenizer "$qwen")
    oracle_name="Tokenizers.js"
  fi
  "$LJPERF" prepare --tokenizer "$tokarg" --input "$f" --output-prefix "$out" --no-append-eos --quiet "$@" \
    > "$out.log" 2>&1 || { cat "$out.log" >&2; fail "ljperf prepare ($which) failed on $name"; }
  od -An -v -td4 -w4 "$out.bin" | tr -d ' ' > "$out.ours"
  node "$src/tests/oracle_encode.js" "${oracle[@]}" "$f" > "$out.oracle" || fail "the oracle failed on $name"
  local n
  n=$(wc -l < "$out.oracle")
  [ "$n" -gt 0 ] || fail "the oracle gave no tokens for $name"
  if ! cmp -s "$out.ours" "$out.oracle"; then
    local line
    line=$( (diff "$out.ours" "$out.oracle" || true) | head -1 | sed 's/[^0-9].*//')
    local lo=$(( line > 8 ? line - 8 : 1 ))
    echo "$which $name: first mismatch at token $((line - 1)) (0-based); ours $(wc -l < "$out.ours") tokens, oracle $n" >&2
    echo "  ours:   $(sed -n "${lo},$((line + 8))p" "$out.ours" | tr '\n' ' ')" >&2
    echo "  oracle: $(sed -n "${lo},$((line + 8))p" "$out.oracle" | tr '\n' ' ')" >&2
    echo "  ours decode:   $(node "$src/tests/oracle_encode.js" "${oracle[@]}" --decode $(sed -n "${lo},$((line + 8))p" "$out.ours"))" >&2
    echo "  oracle decode: $(node "$src/tests/oracle_encode.js" "${oracle[@]}" --decode $(sed -n "${lo},$((line + 8))p" "$out.oracle"))" >&2
    fail "$which $name differs from $oracle_name"
  fi
  echo "ok: $which $name: $(wc -c < "$f") bytes, $n tokens identical to $oracle_name"
  if [ "$which" = llama3 ]; then total=$((total + $(wc -c < "$f"))); else qwen_total=$((qwen_total + $(wc -c < "$f"))); fi
}

for which in llama3 qwen3; do
  compare $which kjv
  compare $which jargon
  compare $which gcide --split-on file
  compare $which tricky
  compare $which bad_utf8 --utf8-errors replace
  grep -q "UTF-8 repaired" "$tmp/$which.bad_utf8.log" || fail "$which bad_utf8: the summary does not report the repairs"
done
compare qwen3 qwen3_tricky --allow-special-tokens
[ "$total" -ge 1000000 ] || fail "only $total bytes compared for Llama 3 (want at least 1 MB)"
[ "$qwen_total" -ge 1000000 ] || fail "only $qwen_total bytes compared for Qwen3 (want at least 1 MB)"
echo "1 passed, 0 failed: $total bytes tokenized identically to llama3-tokenizer-js (Llama 3)," \
     "$qwen_total to Tokenizers.js (Qwen3)"

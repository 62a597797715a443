#!/usr/bin/env bash
# test_tokenizer_oracle.sh: `ljperf prepare` against the independent JavaScript tokenizer
# llama3-tokenizer-js (tests/oracle_encode.js under Node.js), token for token, on real text from
# three corpora (the whole KJV Bible, 4.1 MB, one document cut into pieces for the workers; 600 KB
# of the Jargon File; 300 KB of GCIDE), on tests/data/tricky.txt (digits, punctuation runs, CRLF,
# tabs, emoji, CJK, Arabic, Devanagari, combining marks, odd spaces), and on ill-formed UTF-8
# with --utf8-errors replace (Node replaces ill-formed bytes the same way when it reads a file).
# No BOS/EOS on either side (--no-append-eos; the oracle is called with {bos: false, eos: false}).
# Missing Node.js or the package is a failure, not a skip: run scripts/setup.sh.
#
# Known differences of the oracle from Hugging Face tokenizers, kept out of these inputs: its
# JavaScript \s does not match U+0085 and does match U+FEFF, and it always turns special-token
# text into ids (ljperf prepare does only with --allow-special-tokens).
set -euo pipefail

: "${LJPERF:?set LJPERF to the ljperf binary}"
src=${LJ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
cache=${LJ_CACHE:-$src/.cache}
tmp=${LJ_TEST_TMP:-/tmp/ljperf-test}/oracle
rm -rf "$tmp" && mkdir -p "$tmp"

fail() { echo "FAIL: $*" >&2; exit 1; }
command -v node >/dev/null 2>&1 || fail "node (Node.js) is not installed; run scripts/setup.sh"
[ -f "$cache/oracle/node_modules/llama3-tokenizer-js/package.json" ] ||
  fail "llama3-tokenizer-js is missing under $cache/oracle; run scripts/setup.sh"
tok="$cache/tokenizer/llama3/tokenizer.json"
[ -s "$tok" ] || fail "$tok is missing; run scripts/setup.sh"
for c in kjv jargon gcide; do
  [ -s "$cache/data/$c.txt" ] || fail "$cache/data/$c.txt is missing; run scripts/setup.sh"
done

# Inputs, cut at line ends so that no UTF-8 sequence is split.
cp "$cache/data/kjv.txt" "$tmp/kjv.txt"
head -c 614400 "$cache/data/jargon.txt" | sed '$d' > "$tmp/jargon.txt"
head -c 307200 "$cache/data/gcide.txt" | sed '$d' > "$tmp/gcide.txt"
cp "$src/tests/data/tricky.txt" "$tmp/tricky.txt"
{ printf 'ill-formed: \xff\xfe end\n'; printf 'truncated \xe2\x82 euro, \xf0\x9f\x98 smile\n';
  printf 'surrogate \xed\xa0\x80, overlong \xc0\xaf and \xf0\x80\x80\x80, too big \xf4\x90\x80\x80\n';
  printf 'lone continuation \x80\xbf in text \xe2\x82\xac fine\n'; head -c 2000 "$src/tests/data/tricky.txt"; } > "$tmp/bad_utf8.txt"

total=0
compare() { # name [extra prepare flags]
  local name=$1; shift
  local f="$tmp/$name.txt"
  "$LJPERF" prepare --tokenizer "$tok" --input "$f" --output-prefix "$tmp/$name" --no-append-eos --quiet "$@" \
    > "$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log" >&2; fail "ljperf prepare failed on $name"; }
  od -An -v -td4 -w4 "$tmp/$name.bin" | tr -d ' ' > "$tmp/$name.ours"
  node "$src/tests/oracle_encode.js" --package "$cache/oracle/node_modules/llama3-tokenizer-js" "$f" > "$tmp/$name.oracle" ||
    fail "the oracle failed on $name"
  local n
  n=$(wc -l < "$tmp/$name.oracle")
  [ "$n" -gt 0 ] || fail "the oracle gave no tokens for $name"
  if ! cmp -s "$tmp/$name.ours" "$tmp/$name.oracle"; then
    local line
    line=$( (diff "$tmp/$name.ours" "$tmp/$name.oracle" || true) | head -1 | sed 's/[^0-9].*//')
    local lo=$(( line > 8 ? line - 8 : 1 ))
    echo "$name: first mismatch at token $((line - 1)) (0-based); ours $(wc -l < "$tmp/$name.ours") tokens, oracle $n" >&2
    echo "  ours:   $(sed -n "${lo},$((line + 8))p" "$tmp/$name.ours" | tr '\n' ' ')" >&2
    echo "  oracle: $(sed -n "${lo},$((line + 8))p" "$tmp/$name.oracle" | tr '\n' ' ')" >&2
    echo "  ours decode:   $(node "$src/tests/oracle_encode.js" --decode $(sed -n "${lo},$((line + 8))p" "$tmp/$name.ours"))" >&2
    echo "  oracle decode: $(node "$src/tests/oracle_encode.js" --decode $(sed -n "${lo},$((line + 8))p" "$tmp/$name.oracle"))" >&2
    fail "$name differs from llama3-tokenizer-js"
  fi
  echo "ok: $name: $(wc -c < "$f") bytes, $n tokens identical"
  total=$((total + $(wc -c < "$f")))
}

compare kjv
compare jargon
compare gcide --split-on file
compare tricky
compare bad_utf8 --utf8-errors replace
grep -q "UTF-8 repaired" "$tmp/bad_utf8.log" || fail "bad_utf8: the summary does not report the repairs"
[ "$total" -ge 1000000 ] || fail "only $total bytes compared (want at least 1 MB)"
echo "1 passed, 0 failed: $total bytes tokenized identically to llama3-tokenizer-js"

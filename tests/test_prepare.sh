#!/usr/bin/env bash
# test_prepare.sh: `ljperf prepare`: the .bin/.idx bytes of tiny cases checked byte by byte against
# the Megatron-LM layout in docs/reference.md (int32 with the Llama 3 tokenizer, uint16 with the small
# GPT-2 style tokenizer in tests/data/gpt2_mini); .jsonl with --json-key; stdin; blank-line
# splitting; the same output for any number of workers; and bad inputs (a line that is not JSON,
# a missing key, empty input, invalid UTF-8, a missing or garbled tokenizer, a missing input),
# each exiting non-zero with the file and line named and leaving no output or temporary file
# behind (and an older dataset untouched). The bad-input cases also run under valgrind.
set -euo pipefail

: "${LJPERF:?set LJPERF to the ljperf binary}"
src=${LJ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
cache=${LJ_CACHE:-$src/.cache}
tmp=${LJ_TEST_TMP:-/tmp/ljperf-test}/prepare
rm -rf "$tmp" && mkdir -p "$tmp"
tok="$cache/tokenizer/llama3/tokenizer.json"
mini="$src/tests/data/gpt2_mini/tokenizer.json"
passed=0

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; passed=$((passed + 1)); }
[ -s "$tok" ] || fail "$tok is missing; run scripts/setup.sh"

# Little-endian integers as raw bytes: le VALUE NBYTES
le() {
  local v=$1 n=$2 i out=""
  for ((i = 0; i < n; i++)); do out+=$(printf '\\x%02x' $(((v >> (8 * i)) & 255))); done
  printf "$out"
}
# The .idx of a dataset with one sequence per document: idx DTYPE_CODE ITEM_BYTES LENGTH...
idx() {
  local code=$1 item=$2; shift 2
  printf 'MMIDIDX\x00\x00'; le 1 8; le "$code" 1; le $# 8; le $(($# + 1)) 8
  local l off=0 d
  for l in "$@"; do le "$l" 4; done
  for l in "$@"; do le $off 8; off=$((off + l * item)); done
  for ((d = 0; d <= $#; d++)); do le $d 8; done
}
bin32() { local t; for t in "$@"; do le "$t" 4; done; }
bin16() { local t; for t in "$@"; do le "$t" 2; done; }
same() { # FILE EXPECTED-FILE WHAT
  cmp "$1" "$2" >/dev/null 2>&1 || { od -An -tx1 "$1" | head -5 >&2; echo "want:" >&2; od -An -tx1 "$2" | head -5 >&2; fail "$3"; }
}

# ---- 1. byte-by-byte layout: int32 (Llama 3), two documents, BOS and EOS ------------------
printf 'This is a test sentence.\n\nHello world\n' > "$tmp/two.txt"
"$LJPERF" prepare --tokenizer "$tok" --input "$tmp/two.txt" --split-on blank-line --prepend-bos \
  --output-prefix "$tmp/two" --quiet > "$tmp/two.log"
bin32 128000 2028 374 264 1296 11914 13 128001 128000 9906 1917 128001 > "$tmp/want.bin"
idx 4 4 8 4 > "$tmp/want.idx"
same "$tmp/two.bin" "$tmp/want.bin" "int32 .bin bytes"
same "$tmp/two.idx" "$tmp/want.idx" "int32 .idx bytes (magic, version, dtype 4, counts, lengths, offsets, doc indices)"
grep -q "documents *2" "$tmp/two.log" || fail "summary: $(cat "$tmp/two.log")"
grep -q "tokens per byte" "$tmp/two.log" || fail "summary lacks tokens per byte"
ok "int32 layout byte by byte"

# ---- 2. uint16 (GPT-2 style vocabulary of 264), EOS only ---------------------------------
printf 'the hello there!' > "$tmp/mini.txt"
"$LJPERF" prepare --tokenizer "$mini" --input "$tmp/mini.txt" --output-prefix "$tmp/mini" --quiet > /dev/null
bin16 116 257 32 261 258 114 101 33 263 > "$tmp/want16.bin"
idx 8 2 9 > "$tmp/want16.idx"
same "$tmp/mini.bin" "$tmp/want16.bin" "uint16 .bin bytes"
same "$tmp/mini.idx" "$tmp/want16.idx" "uint16 .idx bytes"
ok "uint16 layout byte by byte"

# ---- 3. .jsonl with --json-key, and stdin --------------------------------------------------
printf '{"id": 1, "body": "This is a test sentence."}\n\n{"body": "Hello world", "text": 5}\r\n{"body": ""}\n' > "$tmp/docs.jsonl"
"$LJPERF" prepare --tokenizer "$tok" --input "$tmp/docs.jsonl" --json-key body --output-prefix "$tmp/json" --quiet > "$tmp/json.log"
bin32 2028 374 264 1296 11914 13 128001 9906 1917 128001 > "$tmp/want.bin"
idx 4 4 7 3 > "$tmp/want.idx"
same "$tmp/json.bin" "$tmp/want.bin" "jsonl .bin"
same "$tmp/json.idx" "$tmp/want.idx" "jsonl .idx"
grep -q "1 empty skipped" "$tmp/json.log" || fail "jsonl: the empty document is not reported: $(cat "$tmp/json.log")"
printf 'This is a test sentence.' | "$LJPERF" prepare --tokenizer "$tok" --input - --output-prefix "$tmp/stdin" --quiet > /dev/null
bin32 2028 374 264 1296 11914 13 128001 > "$tmp/want.bin"
same "$tmp/stdin.bin" "$tmp/want.bin" "stdin .bin"
printf '{"text": "Hello world"}\n' | "$LJPERF" prepare --tokenizer "$tok" --input - --format jsonl --output-prefix "$tmp/stdinj" \
  --no-append-eos --quiet > /dev/null
bin32 9906 1917 > "$tmp/want.bin"
same "$tmp/stdinj.bin" "$tmp/want.bin" "stdin jsonl .bin"
ok "jsonl with --json-key, stdin as text and as jsonl"

# ---- 4. blank-line splitting = the same documents given as files --------------------------
printf '\n\npara one\nline two\n\n\n  \t\npara two\r\n\r\nthree\n' > "$tmp/blank.txt"
printf 'para one\nline two' > "$tmp/d1.txt"; printf 'para two' > "$tmp/d2.txt"; printf 'three' > "$tmp/d3.txt"
: > "$tmp/empty.txt"
"$LJPERF" prepare --tokenizer "$tok" --input "$tmp/blank.txt" --split-on blank-line --output-prefix "$tmp/blank" --quiet > /dev/null
"$LJPERF" prepare --tokenizer "$tok" --input "$tmp/d1.txt" --input "$tmp/empty.txt" --input "$tmp/d2.txt" --input "$tmp/d3.txt" \
  --output-prefix "$tmp/files" --quiet > "$tmp/files.log"
same "$tmp/blank.bin" "$tmp/files.bin" "blank-line split .bin"
same "$tmp/blank.idx" "$tmp/files.idx" "blank-line split .idx"
grep -q "documents *3 (1 empty skipped)" "$tmp/files.log" || fail "files: $(cat "$tmp/files.log")"
ok "blank-line splitting"

# ---- 5. the output does not depend on the number of workers --------------------------------
if [ -s "$cache/data/kjv.txt" ]; then
  for w in 1 3; do
    "$LJPERF" prepare --tokenizer "$tok" --input "$cache/data/kjv.txt" --workers $w --output-prefix "$tmp/kjv$w" --quiet > /dev/null
    "$LJPERF" prepare --tokenizer "$tok" --input "$cache/data/kjv.txt" --split-on blank-line --workers $w \
      --output-prefix "$tmp/kjvb$w" --quiet > /dev/null
  done
  same "$tmp/kjv1.bin" "$tmp/kjv3.bin" "KJV (one document) with 1 and 3 workers"
  same "$tmp/kjvb1.bin" "$tmp/kjvb3.bin" "KJV (chapters) with 1 and 3 workers"
  same "$tmp/kjvb1.idx" "$tmp/kjvb3.idx" "KJV (chapters) .idx with 1 and 3 workers"
  rm -rf "$tmp"/kjv* # the files and their version directories
  ok "same bytes with 1 and 3 workers"
else
  fail "$cache/data/kjv.txt is missing; run scripts/setup.sh"
fi

# ---- 6. bad inputs: non-zero exit, the file and line named, nothing left behind -------------
printf '{"text": "fine"}\n{"text": "broken"\n' > "$tmp/badjson.jsonl"
printf '{"text": "a"}\n\n{"body": "b"}\n' > "$tmp/nokey.jsonl"
printf '{"text": "a"}\n["text"]\n' > "$tmp/notobj.jsonl"
printf '{"image": "a.jpg", "conversations": [{"from": "human", "value": "<image>"}]}\n' > "$tmp/llava.jsonl"
printf 'ok line\nbad \xff byte\n' > "$tmp/badutf8.txt"
printf '{"model": {"vocab": ' > "$tmp/garbled.json"
mkdir -p "$tmp/out"
printf 'old dataset' > "$tmp/out/keep.bin"; printf 'old index' > "$tmp/out/keep.idx"

# expect_fail NAME PATTERN VALGRIND(0/1) -- ARGS...: the run fails, names PATTERN, leaves nothing.
# With VALGRIND=1 the same run is started again under valgrind in the background (valgrind needs
# some 10 s to start a CUDA build of ljperf, so these run side by side; checked by vg_check).
# Under an emulator (LJ_TEST_EMULATOR, a cross build's tests) valgrind is skipped: it would
# check the emulator, not ljperf.
vg_names=()
expect_fail() {
  local name=$1 pattern=$2 vg=$3; shift 4
  local rc=0
  "$LJPERF" prepare --quiet --output-prefix "$tmp/out/$name" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" < /dev/null || rc=$?
  [ "$rc" -eq 1 ] || fail "$name: exit status $rc, want 1"
  grep -qF -- "$pattern" "$tmp/$name.err" || fail "$name: the message lacks '$pattern': $(cat "$tmp/$name.err")"
  if ls "$tmp/out" | grep -q "^$name"; then fail "$name: left files behind: $(ls "$tmp/out")"; fi
  if [ "$vg" = 1 ] && [ -z "${LJ_TEST_EMULATOR:-}" ]; then
    mkdir -p "$tmp/vg/$name"
    ( rc=0
      valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        --suppressions="$src/tests/data/valgrind.supp" \
        "$LJPERF" prepare --quiet --output-prefix "$tmp/vg/$name/$name" "$@" > /dev/null 2> "$tmp/$name.vg" < /dev/null || rc=$?
      echo "$rc" > "$tmp/$name.vgrc" ) &
    vg_names+=("$name")
  fi
  echo "   $name: $(head -1 "$tmp/$name.err")"
}
vg_check() {
  wait
  if [ -n "${LJ_TEST_EMULATOR:-}" ]; then echo "   valgrind: skipped under $LJ_TEST_EMULATOR"; return; fi
  local name
  for name in "${vg_names[@]}"; do
    local rc
    rc=$(cat "$tmp/$name.vgrc")
    [ "$rc" -ne 99 ] || { cat "$tmp/$name.vg" >&2; fail "$name: valgrind found errors"; }
    [ "$rc" -eq 1 ] || fail "$name: exit status $rc under valgrind, want 1"
    [ -z "$(ls "$tmp/vg/$name")" ] || fail "$name: left files behind under valgrind: $(ls "$tmp/vg/$name")"
  done
  echo "   valgrind: no errors in ${vg_names[*]}"
}
[ -n "${LJ_TEST_EMULATOR:-}" ] || command -v valgrind >/dev/null 2>&1 || fail "valgrind is not installed; run scripts/setup.sh"
expect_fail badjson "badjson.jsonl:2: not valid JSON" 1 -- --tokenizer "$mini" --input "$tmp/badjson.jsonl"
expect_fail nokey "nokey.jsonl:3: no key \"text\"" 0 -- --tokenizer "$mini" --input "$tmp/nokey.jsonl"
expect_fail notobj "notobj.jsonl:2: not a JSON object" 0 -- --tokenizer "$mini" --input "$tmp/notobj.jsonl"
expect_fail llava "llava.jsonl:1: no key \"text\" (--json-keys picks the keys; a LLaVA conversation? give --image-root" 0 \
  -- --tokenizer "$mini" --input "$tmp/llava.jsonl"
expect_fail empty "no documents" 1 -- --tokenizer "$mini" --input "$tmp/empty.txt"
expect_fail badutf8 "badutf8.txt:2: invalid UTF-8 at byte offset 12" 1 -- --tokenizer "$mini" --input "$tmp/badutf8.txt"
expect_fail notok "$tmp/nope/tokenizer.json: cannot open" 0 -- --tokenizer "$tmp/nope/tokenizer.json" --input "$tmp/d1.txt"
expect_fail garbled "garbled.json: not valid JSON" 1 -- --tokenizer "$tmp/garbled.json" --input "$tmp/d1.txt"
expect_fail noinput "$tmp/missing.txt: cannot open" 0 -- --tokenizer "$mini" --input "$tmp/missing.txt"
LJPERF_CACHE="$tmp/no-cache" expect_fail nodefault "run scripts/setup.sh" 0 -- --input "$tmp/d1.txt"
# a failing run leaves an older dataset of the same name as it was
rc=0
"$LJPERF" prepare --quiet --tokenizer "$mini" --input "$tmp/badjson.jsonl" --output-prefix "$tmp/out/keep" 2>/dev/null || rc=$?
[ "$rc" -eq 1 ] || fail "keep: exit status $rc, want 1"
[ "$(cat "$tmp/out/keep.bin")" = "old dataset" ] && [ "$(cat "$tmp/out/keep.idx")" = "old index" ] || fail "keep: the old dataset changed"
[ "$(ls "$tmp/out")" = "$(printf 'keep.bin\nkeep.idx')" ] || fail "temporary files left: $(ls "$tmp/out")"
# a failing run removes the folders it created for its output (text and multimodal), never one
# that was there before
mkdir -p "$tmp/there"
for mm in "" "--image-root $tmp"; do
  for dir in "$tmp/new/deeper" "$tmp/there"; do
    rc=0
    # shellcheck disable=SC2086
    "$LJPERF" prepare --quiet --tokenizer "$mini" --input "$tmp/badjson.jsonl" --output-prefix "$dir/ds" $mm \
      2>/dev/null || rc=$?
    [ "$rc" -eq 1 ] || fail "new folders ($mm): exit status $rc, want 1"
  done
  [ ! -e "$tmp/new" ] || fail "a failed run ($mm) left the folders it created: $(find "$tmp/new")"
  [ -d "$tmp/there" ] && [ -z "$(ls "$tmp/there")" ] || fail "a failed run ($mm) removed or filled a folder that was there"
done
vg_check
ok "bad inputs"

# ---- 7. killed mid-run: nothing left behind (the files are unnamed until complete) ---------
mkdir -p "$tmp/kill" && mkfifo "$tmp/kill/in.fifo"
exec 3<> "$tmp/kill/in.fifo"
"$LJPERF" prepare --tokenizer "$mini" --input - --split-on blank-line --output-prefix "$tmp/kill/out/k" --quiet \
  < "$tmp/kill/in.fifo" > /dev/null 2>&1 &
pid=$!
printf 'the first document\n\n' >&3
unnamed=0
for ((i = 0; i < 200; i++)); do # until the dataset files are open (reading then waits on the fifo)
  if ls -l "/proc/$pid/fd" 2>/dev/null | grep -q "kill/out/.*(deleted)"; then unnamed=1; break; fi
  if ls "$tmp/kill/out" 2>/dev/null | grep -q tmp; then break; fi
  sleep 0.05
done
kill -TERM "$pid"
wait "$pid" 2>/dev/null || true
exec 3>&-
if [ "$unnamed" = 1 ]; then
  [ -z "$(ls "$tmp/kill/out")" ] || fail "killed run left files: $(ls "$tmp/kill/out")"
  ok "a killed run leaves nothing"
else
  echo "note: no O_TMPFILE here; a killed run leaves its named temporary files"
fi

# ---- 8. flags ---------------------------------------------------------------------------
"$LJPERF" prepare --help > "$tmp/help.txt" && grep -q -- "--output-prefix" "$tmp/help.txt" || fail "--help"
rc=0; "$LJPERF" prepare --bogus 2> /dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "an unknown flag exits $rc, want 2"
rc=0; "$LJPERF" prepare --input "$tmp/d1.txt" --output-prefix "$tmp/x" --workers 0 2> /dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "--workers 0 exits $rc, want 2"
ok "flags"

echo "$passed passed, 0 failed"

#!/usr/bin/env bash
# test_prepare_compressed.sh: `ljperf prepare` reads compressed and many inputs into the same
# tokens as the plain files: the quick start's corpus (the KJV Bible) as .txt.gz (zlib) and as
# .jsonl.zst (libzstd), byte for byte the .bin/.idx of the plain .txt / .jsonl; a directory and
# a glob of shards equal the shards listed one by one; `train` over 103 data paths. Bad input: a
# truncated .gz and .zst, a .gz that is not gzip, a glob matching nothing, a directory without
# inputs: one message naming the file, nothing written. Never read twice: a directory or glob
# holding part.jsonl and part.jsonl.zst, and one file given twice, are refused naming both (which
# copy is complete only the user knows); Parquet files are refused by name, not read as text.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/prepare_compressed"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
for t in gzip zstd; do command -v $t >/dev/null || fail "$t is missing: run scripts/setup.sh"; done
tok="$LJ_CACHE/tokenizer/llama3/tokenizer.json"
kjv="$LJ_CACHE/data/kjv.txt"
[ -s "$kjv" ] && [ -s "$tok" ] || fail "run scripts/setup.sh"
prep() { "$LJPERF" prepare --tokenizer "$tok" --quiet "$@" >/dev/null; }
same() { cmp -s "$1.bin" "$2.bin" && cmp -s "$1.idx" "$2.idx" || fail "$3: $1 differs from $2"; }

# the whole corpus, as the quick start prepares it
cp "$kjv" "$tmp/kjv.txt"
gzip -k -6 "$tmp/kjv.txt"
python3 - "$tmp/kjv.txt" "$tmp/kjv.jsonl" <<'PY'
import json, sys
docs = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps({"id": len(d), "body": d}) + "\n")
PY
zstd -q -3 "$tmp/kjv.jsonl" -o "$tmp/kjv.jsonl.zst"
prep --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/txt"
prep --input "$tmp/kjv.txt.gz" --split-on blank-line --output-prefix "$tmp/txtgz"
same "$tmp/txt" "$tmp/txtgz" ".txt.gz"
prep --input "$tmp/kjv.jsonl" --json-key body --output-prefix "$tmp/jsonl"
prep --input "$tmp/kjv.jsonl.zst" --json-key body --output-prefix "$tmp/jsonlzst"
same "$tmp/jsonl" "$tmp/jsonlzst" ".jsonl.zst"
echo "compressed: kjv.txt.gz and kjv.jsonl.zst give the plain files' tokens ($(wc -c < "$tmp/txt.bin") bytes)"

# shards: a directory and a glob equal the list
mkdir -p "$tmp/shards"
split -l 400 -d -a 3 --additional-suffix=.jsonl "$tmp/kjv.jsonl" "$tmp/shards/part_"
n=$(ls "$tmp/shards" | wc -l)
[ "$n" -ge 3 ] || fail "expected at least 3 shards"
for f in "$tmp"/shards/part_00[02].jsonl; do zstd -q --rm "$f"; done
gzip "$tmp/shards/part_001.jsonl"
echo "not an input" > "$tmp/shards/README"
list=()
for f in $(ls "$tmp"/shards/part_* | sort); do list+=(--input "$f"); done
prep "${list[@]}" --json-key body --output-prefix "$tmp/list"
prep --input "$tmp/shards" --json-key body --output-prefix "$tmp/dir"
same "$tmp/list" "$tmp/dir" "a directory"
prep --input "$tmp/shards/part_*" --json-key body --output-prefix "$tmp/glob"
same "$tmp/list" "$tmp/glob" "a glob"
same "$tmp/jsonl" "$tmp/list" "the shards together"
echo "many inputs: a directory and a glob of $n mixed shards equal the whole file"

# train takes as many --data-path prefixes as a corpus has shards (llm.c's FineWeb-10B: 103)
many=()
for i in $(seq -w 1 103); do
  ln -sf "$tmp/list.bin" "$tmp/shards/s$i.bin" && ln -sf "$tmp/list.idx" "$tmp/shards/s$i.idx"
  many+=("$tmp/shards/s$i")
done
"$LJPERF" train --model llama3-nano --device cpu --seq-length 32 --micro-batch-size 2 --train-iters 1 --eval-iters 0 \
  --quiet --data-path "${many[@]}" >/dev/null 2>"$tmp/many.err" || { cat "$tmp/many.err"; fail "train over 103 data paths"; }
echo "train: 103 --data-path prefixes"

# bad input
bad() { local want=$1; shift
  if "$LJPERF" prepare --tokenizer "$tok" --quiet "$@" --output-prefix "$tmp/bad/out" >/dev/null 2>"$tmp/bad.err"; then
    fail "accepted: $*"; fi
  grep -q -- "$want" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "message lacks '$want': $*"; }
  [ -z "$(ls "$tmp/bad" 2>/dev/null)" ] || fail "left files behind: $*"
}
head -c 100000 "$tmp/kjv.txt.gz" > "$tmp/cut.txt.gz"
head -c 100000 "$tmp/kjv.jsonl.zst" > "$tmp/cut.jsonl.zst"
cp "$tmp/kjv.txt" "$tmp/plain.txt.gz"
bad "cut.txt.gz: read error: gzip data" --input "$tmp/cut.txt.gz"
bad "cut.jsonl.zst: read error: zstd data: the file ends inside a frame" --input "$tmp/cut.jsonl.zst" --json-key body
bad "plain.txt.gz: read error: not gzip data" --input "$tmp/plain.txt.gz"
bad "no file matches" --input "$tmp/shards/nothing_*.jsonl"
mkdir -p "$tmp/no_inputs" && touch "$tmp/no_inputs/notes.md"
bad "holds no .txt, .jsonl" --input "$tmp/no_inputs"
echo "bad input: named"

# one name plain and compressed, or one file twice: refused (never read twice), naming both
mkdir -p "$tmp/dup"
head -5 "$tmp/kjv.jsonl" > "$tmp/dup/part.jsonl" && zstd -q -k "$tmp/dup/part.jsonl"
bad "part.jsonl and $tmp/dup/part.jsonl.zst are one name with and without compression" --input "$tmp/dup" --json-key body
bad "are one name with and without compression" --input "$tmp/dup/part*" --json-key body
bad "part.jsonl is given twice" --input "$tmp/dup/part.jsonl" --input "$tmp/dup/../dup/part.jsonl" --json-key body
rm "$tmp/dup/part.jsonl.zst"
bad "part.jsonl is given twice" --input "$tmp/dup" --input "$tmp/dup/part.jsonl" --json-key body
echo "duplicates: refused by name"

# Parquet: refused by name, not read as text (a file, a glob, a directory)
mkdir -p "$tmp/pq" && printf 'PAR1\0\0PAR1' > "$tmp/pq/train-00000.parquet" && cp "$tmp/dup/part.jsonl" "$tmp/pq/"
bad "train-00000.parquet is Parquet, which prepare does not read" --input "$tmp/pq/train-00000.parquet"
bad "is Parquet, which prepare does not read" --input "$tmp/pq/*.parquet"
bad "$tmp/pq/train-00000.parquet is Parquet" --input "$tmp/pq" --json-key body
echo "parquet: refused by name"
echo "test_prepare_compressed: passed"

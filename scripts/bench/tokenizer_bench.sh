#!/usr/bin/env bash
# tokenizer_bench.sh: tokenizer / `ljperf prepare` throughput in MB/s of text, on 1 worker and on
# all cores, for the KJV Bible (4.1 MB; as one document cut into pieces for the workers, and one
# document per chapter) and GCIDE (40 MB, --split-on blank-line, its 3 stray cp1252 bytes
# replaced), with the Llama 3 tokenizer, then with the Qwen3 tokenizer (NFC) when it is there. Then the JavaScript oracle llama3-tokenizer-js on the same files (one encode call per
# file), and, when LJ_BENCH_HF names a node_modules directory holding the npm package
# `tokenizers` (Hugging Face tokenizers, the Rust reference, through its Node.js binding), that too.
# Each figure is the best of REPEAT runs (default 3). Prints figures; asserts nothing.
#
#   bash scripts/bench/tokenizer_bench.sh [path/to/ljperf]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ljperf=${1:-$repo/build/ljperf}
cache=${LJPERF_CACHE:-$repo/.cache}
tok=$cache/tokenizer/llama3/tokenizer.json
repeat=${REPEAT:-3}
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$ljperf" ] || { echo "tokenizer_bench: $ljperf is not built (bash scripts/build.sh)" >&2; exit 1; }
for f in "$tok" "$cache/data/kjv.txt" "$cache/data/gcide.txt"; do
  [ -s "$f" ] || { echo "tokenizer_bench: $f is missing (bash scripts/setup.sh)" >&2; exit 1; }
done

best_prepare() { # TOKENIZER WORKERS ARGS... -> "MB/s tokens/s(M)"
  local t=$1 w=$2; shift 2
  local best=0 line mbs
  for ((i = 0; i < repeat; i++)); do
    line=$("$ljperf" prepare --tokenizer "$t" --quiet --workers "$w" --output-prefix "$tmp/out" "$@" | grep throughput)
    mbs=$(echo "$line" | awk '{print $2}')
    if awk -v a="$mbs" -v b="$best" 'BEGIN { exit !(a > b) }'; then best=$mbs; fi
  done
  echo "$best"
}

echo "tokenizer_bench: $(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $cores cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
qwen=$cache/tokenizer/qwen3/tokenizer.json
for t in "$tok" "$qwen"; do
  [ -s "$t" ] || { echo; echo "$t: not there (bash scripts/setup.sh)"; continue; }
  echo
  printf '%-34s %14s %14s\n' "ljperf prepare, $(basename "$(dirname "$t")") (MB/s)" "1 worker" "$cores workers"
  for spec in "KJV, one document|--input $cache/data/kjv.txt" \
              "KJV, one document per chapter|--input $cache/data/kjv.txt --split-on blank-line" \
              "GCIDE, blank-line documents|--input $cache/data/gcide.txt --split-on blank-line --utf8-errors replace"; do
    name=${spec%%|*}
    read -r -a args <<< "${spec#*|}"
    printf '%-34s %14s %14s\n' "$name" "$(best_prepare "$t" 1 "${args[@]}")" "$(best_prepare "$t" "$cores" "${args[@]}")"
  done
done

echo
oracle=$cache/oracle/node_modules/llama3-tokenizer-js
if command -v node >/dev/null 2>&1 && [ -d "$oracle" ]; then
  for f in kjv gcide; do
    node "$repo/tests/oracle_encode.js" --package "$oracle" --time "$cache/data/$f.txt" 2>&1 >/dev/null | sed 's/^oracle:/llama3-tokenizer-js (1 core):/'
  done
else
  echo "llama3-tokenizer-js: not installed (bash scripts/setup.sh)"
fi
if [ -n "${LJ_BENCH_HF:-}" ] && [ -d "$LJ_BENCH_HF/tokenizers" ]; then
  cat > "$tmp/hf.cjs" <<'EOF'
// Encodes a file with Hugging Face tokenizers (Node.js binding): one string, and one call per line batch.
const fs = require('fs');
const { Tokenizer } = require(process.argv[2] + '/tokenizers');
(async () => {
  const tok = Tokenizer.fromFile(process.argv[3]);
  const text = fs.readFileSync(process.argv[4], 'utf8');
  const bytes = Buffer.byteLength(text);
  let t0 = performance.now();
  await tok.encode(text, null, { addSpecialTokens: false });
  const one = (performance.now() - t0) / 1000;
  const docs = text.split(/\n\s*\n/);
  t0 = performance.now();
  for (let i = 0; i < docs.length; i += 1000) await tok.encodeBatch(docs.slice(i, i + 1000), { addSpecialTokens: false });
  const batch = (performance.now() - t0) / 1000;
  console.log(`HF tokenizers: ${process.argv[4].split('/').pop()}: one string ${(bytes / 1e6 / one).toFixed(2)} MB/s, ` +
              `blank-line documents in batches of 1000 ${(bytes / 1e6 / batch).toFixed(2)} MB/s (its own thread pool)`);
})();
EOF
  for f in kjv gcide; do node "$tmp/hf.cjs" "$LJ_BENCH_HF" "$tok" "$cache/data/$f.txt"; done
fi

#!/usr/bin/env bash
# test_hf_cache.sh: ORG/NAME finds a model in the Hugging Face cache, offline, as huggingface_hub
# lays it out (models--ORG--NAME/refs/main -> snapshots/REV/, files linked into blobs/): --load of
# generate and train, --model of train, --tokenizer of prepare and generate. The cache is
# $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
# ~/.cache/huggingface/hub; refs/main picks the revision (an older snapshot beside it is not
# read); a model that is not there, a refs/main naming a missing snapshot, and several snapshots
# without refs/main are refused by name. The layout is built here from the repo's fixtures.
set -euo pipefail
: "${LJPERF:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/hf_cache"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
src=$LJ_SOURCE_DIR
unset HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_HOME XDG_CACHE_HOME

# A tokenizer of 256 ids (GPT-2's byte alphabet, no merges) that fits the fixture model.
python3 - "$src/tests/data/gpt2_mini/tokenizer.json" "$tmp/tok256.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["model"]["vocab"] = {k: i for k, i in d["model"]["vocab"].items() if i < 256}
d["model"]["merges"], d["added_tokens"] = [], []
json.dump(d, open(sys.argv[2], "w"))
PY

# repo HUB ORG NAME REV FILE...: one snapshot of ORG/NAME, its files as links into blobs/
repo() {
  local hub=$1 id="models--$2--$3" rev=$4; shift 4
  mkdir -p "$hub/$id/blobs" "$hub/$id/snapshots/$rev" "$hub/$id/refs"
  local f b
  for f in "$@"; do
    b=$(sha256sum "$f" | cut -c1-64)
    cp "$f" "$hub/$id/blobs/$b"
    ln -sf "../../blobs/$b" "$hub/$id/snapshots/$rev/$(basename "$f")"
  done
}
rev1=0123456789abcdef0123456789abcdef01234567
rev0=89abcdef0123456789abcdef0123456789abcdef
hub="$tmp/home/hub"
cp "$tmp/tok256.json" "$tmp/tokenizer.json"
repo "$hub" tiny-org tiny-llama "$rev1" "$src/tests/fixtures/hf/tied/config.json" \
  "$src/tests/fixtures/hf/tied/model.safetensors" "$tmp/tokenizer.json"
printf '%s' "$rev1" > "$hub/models--tiny-org--tiny-llama/refs/main"
# an older revision beside it, broken: refs/main must not pick it
mkdir -p "$hub/models--tiny-org--tiny-llama/snapshots/$rev0"
echo '{not json' > "$hub/models--tiny-org--tiny-llama/snapshots/$rev0/config.json"
repo "$hub" tok-org gpt2-mini "$rev1" "$src/tests/data/gpt2_mini/tokenizer.json"
printf '%s\n' "$rev1" > "$hub/models--tok-org--gpt2-mini/refs/main"

# 1. HF_HOME: generate --load ORG/NAME (its tokenizer.json from the same snapshot), equal to the
#    fixture directory's output
gen=(--prompt "the" --max-new-tokens 3 --temperature 0 --device cpu)
"$LJPERF" generate --load "$src/tests/fixtures/hf/tied" --tokenizer "$tmp/tok256.json" "${gen[@]}" > "$tmp/want.out" 2>/dev/null
HF_HOME="$tmp/home" "$LJPERF" generate --load tiny-org/tiny-llama "${gen[@]}" > "$tmp/got.out" 2>"$tmp/gen.err" ||
  { cat "$tmp/gen.err"; fail "generate --load tiny-org/tiny-llama (HF_HOME)"; }
cmp -s "$tmp/want.out" "$tmp/got.out" || { diff "$tmp/want.out" "$tmp/got.out" >&2; fail "generate from the cache differs"; }
echo "ok: HF_HOME: generate --load ORG/NAME reads refs/main's snapshot"

# 2. HF_HUB_CACHE wins over HF_HOME; XDG_CACHE_HOME and HOME give the defaults
mkdir -p "$tmp/xdg/huggingface" "$tmp/user/.cache/huggingface"
ln -s "$hub" "$tmp/xdg/huggingface/hub"
ln -s "$hub" "$tmp/user/.cache/huggingface/hub"
HF_HUB_CACHE="$hub" HF_HOME="$tmp/nowhere" "$LJPERF" generate --load tiny-org/tiny-llama "${gen[@]}" > "$tmp/got2.out" 2>/dev/null ||
  fail "HF_HUB_CACHE is not read before HF_HOME"
XDG_CACHE_HOME="$tmp/xdg" HOME="$tmp/nowhere" "$LJPERF" generate --load tiny-org/tiny-llama "${gen[@]}" > "$tmp/got3.out" 2>/dev/null ||
  fail "XDG_CACHE_HOME/huggingface/hub is not the default"
HOME="$tmp/user" "$LJPERF" generate --load tiny-org/tiny-llama "${gen[@]}" > "$tmp/got4.out" 2>/dev/null ||
  fail "~/.cache/huggingface/hub is not the default"
for f in got2 got3 got4; do cmp -s "$tmp/want.out" "$tmp/$f.out" || fail "$f differs"; done
echo "ok: HF_HUB_CACHE, XDG_CACHE_HOME, HOME"

# 3. train --load ORG/NAME (the model from the snapshot's config.json) and --model ORG/NAME
export HF_HOME="$tmp/home"
train=(--device cpu --mock-data --seq-length 16 --micro-batch-size 1 --train-iters 1 --eval-iters 0)
"$LJPERF" train --load tiny-org/tiny-llama "${train[@]}" > "$tmp/train.out" 2>&1 || { cat "$tmp/train.out"; fail "train --load ORG/NAME"; }
grep -q "loaded Hugging Face weights from $hub/models--tiny-org--tiny-llama/snapshots/$rev1" "$tmp/train.out" ||
  { cat "$tmp/train.out"; fail "train did not load the snapshot's weights"; }
"$LJPERF" train --model tiny-org/tiny-llama "${train[@]}" > "$tmp/train2.out" 2>&1 || { cat "$tmp/train2.out"; fail "train --model ORG/NAME"; }
echo "ok: train --load / --model ORG/NAME"

# 4. prepare --tokenizer ORG/NAME: the same dataset as with the file
printf 'the hello there!' > "$tmp/mini.txt"
"$LJPERF" prepare --input "$tmp/mini.txt" --output-prefix "$tmp/a" --tokenizer "$src/tests/data/gpt2_mini/tokenizer.json" --quiet >/dev/null
"$LJPERF" prepare --input "$tmp/mini.txt" --output-prefix "$tmp/b" --tokenizer tok-org/gpt2-mini --quiet >/dev/null ||
  fail "prepare --tokenizer ORG/NAME"
cmp -s "$tmp/a.bin" "$tmp/b.bin" || fail "prepare --tokenizer ORG/NAME: other tokens"
echo "ok: prepare --tokenizer ORG/NAME"

# 5. refused by name
bad() { local want=$1; shift
  if "$@" >/dev/null 2>"$tmp/bad.err"; then fail "accepted: $*"; fi
  grep -qF -- "$want" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "message lacks '$want'"; }
}
bad "--load no-org/no-model: no such file or directory, and not in the Hugging Face cache (no $hub/models--no-org--no-model/snapshots" \
  "$LJPERF" generate --load no-org/no-model "${gen[@]}"
bad "--tokenizer no-org/no-tok: no such file or directory, and not in the Hugging Face cache" \
  "$LJPERF" prepare --input "$tmp/mini.txt" --output-prefix "$tmp/c" --tokenizer no-org/no-tok
bad "--model no-org/no-model: no such file or directory, and not in the Hugging Face cache" \
  "$LJPERF" train --model no-org/no-model "${train[@]}"
repo "$hub" bare-org config-only "$rev1" "$src/tests/fixtures/hf/tied/config.json"
bad "--tokenizer bare-org/config-only: the cached snapshot $hub/models--bare-org--config-only/snapshots/$rev1 has no tokenizer.json" \
  "$LJPERF" prepare --input "$tmp/mini.txt" --output-prefix "$tmp/c" --tokenizer bare-org/config-only
printf '%s' "ffffffffffffffffffffffffffffffffffffffff" > "$hub/models--tiny-org--tiny-llama/refs/main"
bad "names revision ffffffffffffffffffffffffffffffffffffffff, but" "$LJPERF" generate --load tiny-org/tiny-llama "${gen[@]}"
rm "$hub/models--tiny-org--tiny-llama/refs/main"
bad "holds 2 revisions" "$LJPERF" generate --load tiny-org/tiny-llama "${gen[@]}"
rm -r "$hub/models--tiny-org--tiny-llama/snapshots/$rev0"
"$LJPERF" generate --load tiny-org/tiny-llama "${gen[@]}" > "$tmp/got5.out" 2>/dev/null || fail "the only snapshot without refs/main"
cmp -s "$tmp/want.out" "$tmp/got5.out" || fail "the only snapshot: output differs"
echo "ok: refused by name; the only snapshot without refs/main"
# a local directory of that name wins over the cache
mkdir -p "$tmp/cwd/tok-org" && cp -r "$src/tests/fixtures/hf/tied" "$tmp/cwd/tok-org/gpt2-mini"
(cd "$tmp/cwd" && "$LJPERF" generate --load tok-org/gpt2-mini --tokenizer "$tmp/tok256.json" "${gen[@]}" > "$tmp/got6.out" 2>/dev/null) ||
  fail "a local directory ORG/NAME is not read first"
cmp -s "$tmp/want.out" "$tmp/got6.out" || fail "local directory: output differs"
echo "ok: a local path first"
echo "test_hf_cache: passed"

#!/usr/bin/env bash
# test_state_faults.sh: the training state and the datasets under faults and bad input, each case
# a clear message and a non-zero exit (or the documented recovery), never a crash:
#   - checkpoints: a flipped byte in a shard file or in state.safetensors is named (file, tensor and
#     parameter), and a missing or truncated shard file or a slice beyond it; a second run on
#     one --save is refused before it trains, and a killed one leaves no stuck lock; leftovers of a
#     killed save are removed; state.json's iteration and consumed samples are checked; a missing
#     metadata.json is named; --load D --save D after a kill in the first save starts fresh; a
#     damaged HF export is refused by generate and --load (its checksums sidecar);
#   - divergence: a non-finite step is never applied nor saved, --check-for-nan-in-loss-and-grad
#     stops the run, without it --max-consecutive-skipped-iterations does; the latest checkpoint
#     stays the good one;
#   - datasets: a .bin replaced beside its .idx or changed is refused naming the files; a failed
#     install deletes nothing; a prepare killed at any of its install steps (strace) leaves the old
#     dataset or the new one; a pair without a fingerprint (Megatron's) is checked by sizes;
#   - config and flags: sizes above their limits, negative token ids, hidden_size not divisible by
#     the heads, --global-batch-size 0, --output-prefix DIR/, an odd --data-path with weights, an
#     .idx that is a directory, a missing --model X.json, a duplicated .jsonl key, --train-iters 0.
# Every case runs (failures are counted), so one run lists all that fail.
set -uo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/state_faults"
rm -rf "$tmp" && mkdir -p "$tmp"
failed=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*" >&2; failed=$((failed + 1)); }
# expect_fail NAME PATTERN CMD...: CMD exits non-zero (not a signal) and stderr matches PATTERN
expect_fail() {
  local name=$1 pattern=$2; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then bad "$name: exit status $rc"; tail -3 "$tmp/err" >&2; return 1; fi
  if ! grep -qE -- "$pattern" "$tmp/err"; then bad "$name: message lacks /$pattern/"; tail -3 "$tmp/err" >&2; return 1; fi
  ok "$name"
}

kjv="$LJ_CACHE/data/kjv.txt"
[ -s "$kjv" ] || { echo "FAIL: $kjv is missing: run scripts/setup.sh" >&2; exit 1; }
head -c 60000 "$kjv" > "$tmp/a.txt"
tail -c 80000 "$kjv" > "$tmp/b.txt"
"$LJPERF" prepare --input "$tmp/a.txt" --split-on blank-line --output-prefix "$tmp/a" >/dev/null 2>&1 || bad "prepare a"
"$LJPERF" prepare --input "$tmp/b.txt" --split-on blank-line --output-prefix "$tmp/b" >/dev/null 2>&1 || bad "prepare b"
common=(--model llama3-nano --device cpu --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3
        --seed 7 --quiet --eval-iters 1)

# ---- checkpoints ----
ck="$tmp/ck"
"$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 3 --save "$ck" --save-interval 1 >/dev/null 2>&1 \
  || bad "a run that saves"
cp -r "$ck/iter_0000003" "$tmp/iter3.good"
python3 "$LJ_SOURCE_DIR/tests/ckpt_state.py" flip "$ck/iter_0000003" adam.v model.layers.1.mlp.up_proj.weight >/dev/null
expect_fail "a flipped byte in a shard file is named (file, tensor, parameter)" \
  "iter_0000003/shard_00000_of_00001.bin: tensor 'adam.v' slice \[[0-9]+, [0-9]+\) \(parameter model.layers.1.mlp.up_proj.weight\) fails its checksum" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 4 --load "$ck"
rm -rf "$ck/iter_0000003" && cp -r "$tmp/iter3.good" "$ck/iter_0000003"
rm "$ck/iter_0000003/shard_00000_of_00001.bin"
expect_fail "a missing shard file is named" "iter_0000003/shard_00000_of_00001.bin: cannot open" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 4 --load "$ck"
rm -rf "$ck/iter_0000003" && cp -r "$tmp/iter3.good" "$ck/iter_0000003"
head -c 100000 "$tmp/iter3.good/shard_00000_of_00001.bin" > "$ck/iter_0000003/shard_00000_of_00001.bin"
expect_fail "a truncated shard file is named" "shard_00000_of_00001.bin: 100000 bytes, metadata.json records [0-9]+ \(a truncated" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 4 --load "$ck"
rm -rf "$ck/iter_0000003" && cp -r "$tmp/iter3.good" "$ck/iter_0000003"
python3 -c 'import json, sys; p = sys.argv[1]; m = json.load(open(p)); m["tensors"]["adam.v"]["slices"][3]["byte_offset"] = 10**12; json.dump(m, open(p, "w"))' \
  "$ck/iter_0000003/metadata.json"
expect_fail "a slice beyond its shard file is refused" "metadata.json: tensor 'adam.v': slice \[[0-9]+, [0-9]+\) lies beyond" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 4 --load "$ck"
rm -rf "$ck/iter_0000003" && cp -r "$tmp/iter3.good" "$ck/iter_0000003"
mv "$ck/iter_0000003/metadata.json" "$tmp/metadata.aside"
expect_fail "a missing metadata.json is named" "iter_0000003/metadata.json is missing: the sharded checkpoint's shard files \(shard_00000_of_00001.bin" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 4 --load "$ck"
grep -q "state.safetensors" "$tmp/err" && bad "a missing metadata.json is reported as state.safetensors"
mv "$tmp/metadata.aside" "$ck/iter_0000003/metadata.json"
# a kill during the very first save leaves iter_NNNNNNN.tmp.PID alone: the unchanged command line
# (--load D --save D) starts fresh with one warning
mkdir -p "$tmp/first/iter_0000001.tmp.2147483646" && : > "$tmp/first/iter_0000001.tmp.2147483646/state.json"
"$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 1 --load "$tmp/first" --save "$tmp/first" \
  >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c "no complete checkpoint there yet; starting from scratch" "$tmp/err")" = 1 ] \
   && [ -d "$tmp/first/iter_0000001" ] && ! ls "$tmp/first" | grep -q '\.tmp\.'; then
  ok "--load D --save D after a killed first save starts fresh with one warning"
else bad "--load D --save D after a killed first save (status $rc): $(tail -2 "$tmp/err")"; fi
# a damaged HF export (one flipped byte) is refused by its checksums, naming the file and the tensor
"$LJPERF" generate --load "$ck/iter_0000003/hf" --prompt "In the" --max-new-tokens 2 --device cpu >/dev/null 2>&1 \
  || bad "generate on the intact export"
cp "$ck/iter_0000003/hf/model.safetensors" "$tmp/hf.good"
python3 - "$ck/iter_0000003/hf/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
b[8 + n + h['model.layers.0.mlp.down_proj.weight']['data_offsets'][0] + 6] ^= 0x04
open(p, 'wb').write(b)
PY
expect_fail "generate on a damaged HF export names the file and tensor" \
  "hf/model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight' fails its checksum .*model.safetensors.checksums.json" \
  "$LJPERF" generate --load "$ck/iter_0000003/hf" --prompt "In the" --max-new-tokens 2 --device cpu
expect_fail "--load of a damaged HF export names the file and tensor" \
  "hf/model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight' fails its checksum" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 1 --load "$ck/iter_0000003/hf"
cp "$tmp/hf.good" "$ck/iter_0000003/hf/model.safetensors"
# the single-file format (--ckpt-format torch)
"$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 1 --save "$tmp/ck1" --ckpt-format torch >/dev/null 2>&1 \
  || bad "a run that saves one state.safetensors"
python3 - "$tmp/ck1/iter_0000001/state.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
b[8 + n + h['adam.v']['data_offsets'][0] + 40] ^= 0x01
open(p, 'wb').write(b)
PY
expect_fail "a flipped byte in state.safetensors is named" "iter_0000001/state.safetensors: tensor 'adam.v' fails its checksum" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 2 --load "$tmp/ck1"
python3 - "$ck/iter_0000003/state.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s['consumed_samples'] += 4; json.dump(s, open(sys.argv[1], 'w'), indent=1)
PY
expect_fail "an edited state.json is refused" "iter_0000003/state.json: fails its checksum" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 4 --load "$ck"
rm -rf "$ck/iter_0000003" && cp -r "$tmp/iter3.good" "$ck/iter_0000003"
mv "$ck/iter_0000002" "$tmp/iter2.aside" && cp -r "$ck/iter_0000003" "$ck/iter_0000002"
expect_fail "state.json of another iteration is refused" "metadata 'iteration' is 3|'iteration' is 3, but the directory is iter_0000002" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 4 --load "$ck/iter_0000002"
rm -rf "$ck/iter_0000002" && mv "$tmp/iter2.aside" "$ck/iter_0000002"

# a second run on the same --save is refused before it trains; a killed holder leaves nothing stuck
"$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 100000 --save "$tmp/lk" --save-interval 100000 \
  --log-json "$tmp/lk.jsonl" >/dev/null 2>&1 &
holder=$!
for _ in $(seq 1 600); do [ -s "$tmp/lk.jsonl" ] && break; sleep 0.1; done
expect_fail "a second run on one --save is refused" "--save .*lk is in use by another run \(process $holder" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 1 --save "$tmp/lk"
grep -q '"iteration"' "$tmp/out" 2>/dev/null && bad "the refused run trained"
kill -KILL "$holder"; wait "$holder" 2>/dev/null
: > "$tmp/lk/latest_checkpointed_iteration.txt.tmp.2147483646"
mkdir -p "$tmp/lk/iter_0000009.tmp.2147483646"
if "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 1 --save "$tmp/lk" >/dev/null 2>"$tmp/err"; then
  ok "after a killed run, the --save is free"
else bad "the lock of a killed run is stuck: $(tail -1 "$tmp/err")"; fi
if ls -a "$tmp/lk" | grep -q '\.tmp\.'; then bad "leftovers of a killed save stay: $(ls -a "$tmp/lk" | tr '\n' ' ')"
else ok "leftovers of a killed save are removed"; fi

# ---- divergence ----
dv="$tmp/dv"
"$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 2 --save "$dv" --save-interval 1 >/dev/null 2>&1 || bad "dv start"
expect_fail "a non-finite step stops the run (--check-for-nan-in-loss-and-grad)" "iteration [0-9]+: the (loss|gradient norm) is .*nan.*update was skipped" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 6 --lr 1e30 --clip-grad 0 --load "$dv" --save "$dv" --save-interval 1
[ "$(cat "$dv/latest_checkpointed_iteration.txt")" -le 3 ] || bad "a diverged state became the latest checkpoint"
expect_fail "without the check, skipped steps stop the run at the limit" "3 iterations in a row .* were skipped .*--max-consecutive-skipped-iterations 3" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 20 --lr 1e30 --clip-grad 0 --load "$dv" --save "$dv" \
  --save-interval 1 --no-check-for-nan-in-loss-and-grad --max-consecutive-skipped-iterations 3 --log-json "$tmp/dv.jsonl"
grep -q '"skipped": true' "$tmp/dv.jsonl" || bad "skipped steps are not marked in --log-json"
python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$tmp/dv.jsonl" || bad "--log-json is not JSON after a NaN"
latest=$(cat "$dv/latest_checkpointed_iteration.txt")
"$LJPERF" train "${common[@]}" --eval-iters 0 --data-path "$tmp/a" --train-iters "$latest" --load "$dv" >/dev/null 2>"$tmp/err" \
  && ok "the latest checkpoint after divergence ($latest) loads" || bad "the latest checkpoint after divergence: $(tail -1 "$tmp/err")"
expect_fail "divergence on the last iteration exits non-zero" "the last [0-9]+ iteration\(s\), up to 4, were skipped" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/a" --train-iters 4 --lr 1e30 --clip-grad 0 --load "$dv/iter_0000002" \
  --save "$tmp/dv2" --no-check-for-nan-in-loss-and-grad
[ -e "$tmp/dv2/latest_checkpointed_iteration.txt" ] && bad "a diverged last iteration was saved"

# ---- datasets ----
cp "$tmp/a.idx" "$tmp/m.idx"; cp "$tmp/a.bin" "$tmp/m.bin"; cp "$tmp/a.fingerprint.json" "$tmp/m.fingerprint.json"
"$LJPERF" train "${common[@]}" --data-path "$tmp/m" --train-iters 1 >/dev/null 2>&1 && ok "a prepared pair trains" || bad "a prepared pair"
cp "$tmp/b.bin" "$tmp/m.bin" # a prepare killed between its renames: the new .bin beside the old .idx
expect_fail "a .bin replaced beside its .idx is refused" "m\.bin.*(m\.idx|fingerprint)" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/m" --train-iters 1
cp "$tmp/a.bin" "$tmp/m.bin"
printf '\x07' | dd of="$tmp/m.bin" bs=1 seek=10 conv=notrunc 2>/dev/null # same size, other content
expect_fail "a .bin of the same size but other content is refused" "m\.bin .*fingerprint" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/m" --train-iters 1
rm "$tmp/m.fingerprint.json"; cp "$tmp/a.bin" "$tmp/m.bin"
"$LJPERF" train "${common[@]}" --data-path "$tmp/m" --train-iters 1 >/dev/null 2>&1 \
  && ok "a pair without a fingerprint (Megatron's) trains" || bad "a pair without a fingerprint"
cp "$tmp/b.bin" "$tmp/m.bin"
expect_fail "without a fingerprint, a .bin longer than its .idx is refused" "m\.bin: [0-9]+ bytes, more than" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/m" --train-iters 1
# a failed install deletes nothing: the .idx name is taken by a directory
mkdir -p "$tmp/r.idx/keep"; cp "$tmp/a.bin" "$tmp/r.bin"
expect_fail "a failed install is reported" "r\.idx: not a regular file" \
  "$LJPERF" prepare --input "$tmp/b.txt" --split-on blank-line --output-prefix "$tmp/r"
[ -d "$tmp/r.idx/keep" ] && [ -f "$tmp/r.bin" ] && [ ! -L "$tmp/r.bin" ] && cmp -s "$tmp/a.bin" "$tmp/r.bin" \
  && ok "a failed install deleted nothing" || bad "a failed install changed files"

# the install of a dataset is atomic: prepare writes PREFIX.versions/K/ and switches the one link
# PREFIX.current (PREFIX.bin, .idx, .fingerprint.json are links through it), so a kill at any of
# its renames, links, unlinks and mkdirs leaves the old dataset or the new one, never a mixed pair;
# from a pair of regular files (Megatron's, an older prepare) and from an installed one
if [ -n "${LJ_TEST_EMULATOR:-}" ]; then
  echo "skip: the dataset install's kill points (an emulated run: strace would trace the emulator)"
elif ! strace -f -qq -o /dev/null true 2>/dev/null; then
  bad "strace cannot trace here (not installed, or ptrace is not permitted): run scripts/setup.sh"
else
  calls='/^(rename|link|symlink|unlink|mkdir|rmdir)'
  ks="$tmp/ks"
  for from in regular installed; do
    rm -rf "$ks.template" && mkdir -p "$ks.template"
    if [ $from = regular ]; then cp "$tmp/a.bin" "$tmp/a.idx" "$tmp/a.fingerprint.json" "$ks.template/"
    else "$LJPERF" prepare --input "$tmp/a.txt" --split-on blank-line --output-prefix "$ks.template/a" >/dev/null 2>&1; fi
    rm -rf "$ks" && cp -a "$ks.template" "$ks"
    (cd "$ks" && strace -f -qq -o "$tmp/install.strace" -e trace="$calls" "$LJPERF" prepare --input "$tmp/b.txt" \
      --split-on blank-line --output-prefix a >/dev/null 2>&1) || bad "prepare under strace ($from)"
    for k in .bin .idx .fingerprint.json; do cp "$ks/a$k" "$tmp/new$k"; done
    sed -E 's/^[0-9]+ +//; s/\(.*//' "$tmp/install.strace" > "$tmp/install.calls"
    n=$(wc -l < "$tmp/install.calls"); kills=0; mixed=0
    [ "$n" -ge 8 ] || bad "prepare ($from) made only $n install calls"
    for i in $(seq 1 "$n"); do
      name=$(sed -n "${i}p" "$tmp/install.calls")
      nth=$(head -n "$i" "$tmp/install.calls" | grep -cx "$name")
      rm -rf "$ks" && cp -a "$ks.template" "$ks"
      (cd "$ks" && exec strace -f -qq -o /dev/null -e trace="$name" -e inject="$name:signal=KILL:when=$nth" \
        "$LJPERF" prepare --input "$tmp/b.txt" --split-on blank-line --output-prefix a >/dev/null 2>&1) && continue
      kills=$((kills + 1))
      state=
      for set in old new; do
        same=1
        for k in .bin .idx .fingerprint.json; do
          want="$tmp/a$k"; [ $set = new ] && want="$tmp/new$k"
          cmp -s "$ks/a$k" "$want" || same=0
        done
        [ $same = 1 ] && state=$set
      done
      [ -n "$state" ] || { mixed=$((mixed + 1)); echo "  killed at call $i ($name #$nth): neither dataset: $(ls -la "$ks" | tr '\n' ' ')" >&2; }
    done
    [ $kills -ge 8 ] || bad "only $kills of $n kills took effect ($from)"
    [ $mixed = 0 ] && ok "a prepare killed at each of its $n install calls leaves the old or the new dataset ($from)" \
      || bad "$mixed of $kills killed prepares left neither dataset ($from)"
    "$LJPERF" prepare --input "$tmp/b.txt" --split-on blank-line --output-prefix "$ks/a" >/dev/null 2>&1 \
      && "$LJPERF" train "${common[@]}" --data-path "$ks/a" --train-iters 1 >/dev/null 2>&1 \
      && [ "$(ls "$ks/a.versions")" = "$(readlink "$ks/a.current" | sed 's|.*/||')" ] \
      && [ "$(ls "$ks" | tr '\n' ' ')" = "a.bin a.current a.fingerprint.json a.idx a.versions " ] \
      && ok "after the kills, prepare installs again, trains, and keeps one version, no leftovers ($from)" \
      || bad "after the kills ($from): $(ls "$ks" "$ks/a.versions" | tr '\n' ' ')"
  done
fi
expect_fail "an .idx that is a directory" "r\.idx: cannot open \(Is a directory\)" \
  "$LJPERF" train "${common[@]}" --data-path "$tmp/r" --train-iters 1

# ---- config values and flags ----
cfg() { python3 -c "
import json, sys
c = {'hidden_size': 64, 'intermediate_size': 128, 'num_hidden_layers': 2, 'num_attention_heads': 4,
     'num_key_value_heads': 2, 'vocab_size': 512, 'max_position_embeddings': 256, 'bos_token_id': 1, 'eos_token_id': 2}
c.update(json.loads(sys.argv[1])); json.dump(c, open(sys.argv[2], 'w'))" "$1" "$tmp/config.json"; }
mock=(--device cpu --mock-data --seq-length 16 --micro-batch-size 1 --train-iters 1 --quiet --eval-iters 0)
for t in 'num_hidden_layers 100000 above the 256' 'hidden_size 1073741824 above the 1048576' 'intermediate_size 2000000000 above the 4194304' \
         'head_dim 2147483646 above the 4096' 'vocab_size 1000000000000 beyond the integers' 'eos_token_id -1 must be >= 0'; do
  set -- $t; field=$1 value=$2; shift 2
  cfg "{\"$field\": $value}"
  expect_fail "config $field $value" "config.json: .*$field.*$*" "$LJPERF" train --model "$tmp/config.json" "${mock[@]}"
done
cfg '{"num_attention_heads": 4096, "num_key_value_heads": 1, "head_dim": 4096}'
expect_fail "config heads x head_dim" "num_attention_heads x head_dim is 16777216, above" "$LJPERF" train --model "$tmp/config.json" "${mock[@]}"
cfg '{"num_attention_heads": 4096, "num_key_value_heads": 1, "head_dim": 4096}'
expect_fail "plan: config heads x head_dim" "num_attention_heads x head_dim" "$LJPERF" plan --model "$tmp/config.json" --zero-stage 3 --seq-length 16
cfg '{"hidden_size": 66}'
expect_fail "hidden_size not divisible by the heads" "hidden_size \(66\) is not a multiple of num_attention_heads \(4\)" \
  "$LJPERF" train --model "$tmp/config.json" "${mock[@]}"
expect_fail "--model missing.json" "missing\.json: no such file" "$LJPERF" train --model "$tmp/missing.json" "${mock[@]}"
expect_fail "--global-batch-size 0" "--global-batch-size 0: expected >= 1" "$LJPERF" train --model llama3-nano "${mock[@]}" --global-batch-size 0
expect_fail "--data-path with an odd count" "--data-path: 3 items with weights" "$LJPERF" train "${common[@]}" --data-path 0.5 "$tmp/a" 0.5
expect_fail "--output-prefix DIR/" "names a directory" "$LJPERF" prepare --input "$tmp/a.txt" --output-prefix "$tmp/out/"
[ -e "$tmp/out/.bin" ] && bad "--output-prefix DIR/ wrote a hidden .bin"
printf '{"text": "first", "text": "the last value wins"}\n' > "$tmp/dup.jsonl"
printf '{"text": "the last value wins"}\n' > "$tmp/last.jsonl"
"$LJPERF" prepare --input "$tmp/dup.jsonl" --output-prefix "$tmp/dup" >/dev/null 2>&1
"$LJPERF" prepare --input "$tmp/last.jsonl" --output-prefix "$tmp/last" >/dev/null 2>&1
cmp -s "$tmp/dup.bin" "$tmp/last.bin" && ok "a duplicated .jsonl key takes the last value" || bad "a duplicated .jsonl key does not take the last value"
"$LJPERF" train --model llama3-nano --device cpu --mock-data --seq-length 16 --micro-batch-size 1 --eval-iters 0 --train-iters 0 >/dev/null 2>"$tmp/err"
grep -q "checkpoint" "$tmp/err" && bad "--train-iters 0 without --load speaks of a checkpoint" || ok "--train-iters 0 without --load"

# tokenizers: another family by its model type; a tokenizer_config.json whose eos_token is not a
# token, or not a string
mkdir -p "$tmp/tok-wp" "$tmp/tok-eos"
python3 - "$LJ_CACHE/tokenizer/llama3" "$tmp" <<'PY'
import json, sys
src, tmp = sys.argv[1], sys.argv[2]
t = json.load(open(src + "/tokenizer.json"))
c = json.load(open(src + "/tokenizer_config.json"))
wp = dict(t, model={"type": "WordPiece", "vocab": {"a": 0, "[UNK]": 1}, "unk_token": "[UNK]"})
json.dump(wp, open(tmp + "/tok-wp/tokenizer.json", "w"))
json.dump(t, open(tmp + "/tok-eos/tokenizer.json", "w"))
json.dump(dict(c, eos_token="<|no_such_token|>"), open(tmp + "/tok-eos/tokenizer_config.json", "w"))
PY
printf 'one document\n' > "$tmp/doc.txt"
expect_fail "a WordPiece tokenizer" 'model.type "WordPiece" is not supported \(only byte-level BPE tokenizers' \
  "$LJPERF" prepare --input "$tmp/doc.txt" --output-prefix "$tmp/tk" --tokenizer "$tmp/tok-wp/tokenizer.json"
expect_fail "an eos_token that is not a token" "tokenizer_config.json: field 'eos_token' is \"<\|no_such_token\|>\", which is not a token" \
  "$LJPERF" prepare --input "$tmp/doc.txt" --output-prefix "$tmp/tk" --tokenizer "$tmp/tok-eos/tokenizer.json"
python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['eos_token']=5; json.dump(c,open(p,'w'))" \
  "$tmp/tok-eos/tokenizer_config.json"
expect_fail "an eos_token that is not a string" "field 'eos_token' must be a string" \
  "$LJPERF" prepare --input "$tmp/doc.txt" --output-prefix "$tmp/tk" --tokenizer "$tmp/tok-eos/tokenizer.json"

[ "$failed" -eq 0 ] || { echo "FAIL: $failed case(s)" >&2; exit 1; }
echo "all cases passed"

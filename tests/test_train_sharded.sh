#!/usr/bin/env bash
# test_train_sharded.sh: the sharded checkpoint format (checkpoint/sharded.h) on CPU ranks (MPI):
#   - saved on 2 ranks under ZeRO-1 (one shard file per rank, metadata.json, no state.safetensors),
#     resumed on 2 ranks bit-identical to the uninterrupted 2-rank run, and on 1 rank (no ZeRO) and
#     3 ranks (ZeRO-3) with the losses of the uninterrupted run within fp32 tolerance;
#   - --async-save gives the same files and losses as synchronous saves; a background writer that
#     fails (a file-size limit) makes the run exit non-zero and leaves no iteration marked latest;
#   - the HF export written from the shard files holds the master weights (bf16);
#   - a flipped byte in a shard file is reported naming the file, the tensor and the parameter;
#   - the peak host memory of a save stays below its staging bound plus a margin (printed);
#   - --no-save-hf leaves the HF export out of intermediate saves (the last one has it), and such a
#     checkpoint resumes without --model (its config.json);
#   - a single-file checkpoint (--ckpt-format torch) still loads on another world size.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/train_sharded"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v mpirun >/dev/null 2>&1 || fail "mpirun is missing: run scripts/setup.sh (openmpi-bin)"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LJPERF_DIST_TIMEOUT=120
tool() { python3 "$LJ_SOURCE_DIR/tests/ckpt_state.py" "$@"; }
mpi() { local np=$1; shift; mpirun --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS "$@"; }

head -c 200000 "$LJ_CACHE/data/kjv.txt" > "$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" >/dev/null 2>&1 || fail "prepare"
common=(--model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2
        --global-batch-size 12 --train-iters 4 --lr 3e-3 --lr-warmup-iters 1 --seed 11 --quiet --eval-iters 1)
losses() { python3 -c 'import json,sys; print("\n".join("%d %r" % (r["iteration"], r["loss"]) for r in map(json.loads, open(sys.argv[1])) if "loss" in r))' "$1"; }
close() { # close A.jsonl B.jsonl: the same iterations, losses within fp32 tolerance
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = ({r["iteration"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r} for p in sys.argv[1:3])
assert sorted(a) == sorted(b) == [1, 2, 3, 4], (sorted(a), sorted(b))
worst = max(abs(a[i] - b[i]) / abs(a[i]) for i in a)
print("  4 losses, worst relative difference %.2e" % worst)
assert worst <= 1e-5, "losses differ"
PY
}

# uninterrupted: 1 rank, and 2 ranks under ZeRO-1
"$LJPERF" train "${common[@]}" --log-json "$tmp/w1.jsonl" 2>"$tmp/w1.err" || { cat "$tmp/w1.err"; fail "1 rank"; }
mpi 2 "$LJPERF" train "${common[@]}" --zero-stage 1 --log-json "$tmp/w2.jsonl" 2>"$tmp/w2.err" || { cat "$tmp/w2.err"; fail "2 ranks"; }

# saved on 2 ranks (ZeRO-1) after iteration 2
mpi 2 "$LJPERF" train "${common[@]}" --zero-stage 1 --save "$tmp/s" --exit-interval 2 --log-json "$tmp/s.jsonl" \
  2>"$tmp/s.err" || { cat "$tmp/s.err"; fail "first half on 2 ranks"; }
it="$tmp/s/iter_0000002"
for f in metadata.json state.json config.json shard_00000_of_00002.bin shard_00001_of_00002.bin hf/model.safetensors; do
  [ -f "$it/$f" ] || fail "no $f in $it: $(ls "$it")"
done
[ ! -e "$it/state.safetensors" ] || fail "a sharded save wrote state.safetensors"
ls "$it" | grep -q 'shard_.*\.json' && fail "the per-rank indexes were left beside metadata.json"
# the HF export, read from both shard files (a parameter split between them), is the master's bf16
n=$(tool hf "$it") || fail "the HF export of the 2-rank save is not its master weights"
echo "  HF export: $n tensors, each the master's slices in bf16"
grep -E -q "saved checkpoint at iteration 2 to .*: [0-9.]+ MiB in [0-9.]+ s \([0-9.]+ MiB/s\), 2 shard files, peak host memory of the save [0-9.]+ MiB" \
  "$tmp/s.err" || { cat "$tmp/s.err"; fail "the save's line (time, bytes, throughput, peak memory) is missing"; }
python3 - "$it/metadata.json" <<'PY' || fail "metadata.json does not describe 2 ranks' ZeRO-1 shards"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["world_size"] == 2 and m["zero_stage"] == 1 and m["partition"] == "flat", m
files = {s["file"] for s in m["tensors"]["adam.m"]["slices"]}
assert files == {0, 1}, files
P = m["tensors"]["master"]["shape"][0]
assert sum(s["numel"] for s in m["tensors"]["adam.v"]["slices"]) == P
PY
for n in 1 2 3; do cp -r "$tmp/s" "$tmp/s$n"; cp "$tmp/s.jsonl" "$tmp/s$n.jsonl"; done
cp -r "$tmp/s" "$tmp/s-flip"
# resumed on 2 ranks: bit for bit the uninterrupted 2-rank run
mpi 2 "$LJPERF" train "${common[@]}" --zero-stage 1 --save "$tmp/s2" --load "$tmp/s2" --log-json "$tmp/s2.jsonl" \
  2>"$tmp/s2.err" || { cat "$tmp/s2.err"; fail "resume on 2 ranks"; }
diff <(losses "$tmp/w2.jsonl") <(losses "$tmp/s2.jsonl") || fail "2-rank resume differs from the uninterrupted 2-rank run"
echo "saved on 2 ranks (ZeRO-1), resumed on 2: 4 losses equal bit for bit"
# on 1 rank (no ZeRO) and on 3 ranks (ZeRO-3)
"$LJPERF" train "${common[@]}" --save "$tmp/s1" --load "$tmp/s1" --log-json "$tmp/s1.jsonl" 2>"$tmp/s1.err" \
  || { cat "$tmp/s1.err"; fail "resume on 1 rank"; }
grep -q "saved on 2 ranks under ZeRO stage 1 (flat), resharded for 1 rank under stage 0" "$tmp/s1.err" \
  || { cat "$tmp/s1.err"; fail "the 1-rank resume did not say it resharded"; }
echo "saved on 2 ranks (ZeRO-1), resumed on 1:"; close "$tmp/w1.jsonl" "$tmp/s1.jsonl" || fail "1-rank resume"
mpi 3 "$LJPERF" train "${common[@]}" --zero-stage 3 --save "$tmp/s3" --load "$tmp/s3" --log-json "$tmp/s3.jsonl" \
  2>"$tmp/s3.err" || { cat "$tmp/s3.err"; fail "resume on 3 ranks, ZeRO-3"; }
echo "saved on 2 ranks (ZeRO-1), resumed on 3 (ZeRO-3):"; close "$tmp/w1.jsonl" "$tmp/s3.jsonl" || fail "3-rank resume"
python3 -c 'import json,sys; m = json.load(open(sys.argv[1])); assert m["partition"] == "zero3" and m["world_size"] == 3, m' \
  "$tmp/s3/iter_0000004/metadata.json" || fail "the 3-rank ZeRO-3 save's metadata"
# ... and that ZeRO-3 save resumes on 2 ranks under ZeRO-2
mpi 2 "$LJPERF" train "${common[@]}" --zero-stage 2 --train-iters 5 --load "$tmp/s3" --log-json "$tmp/s32.jsonl" \
  2>"$tmp/s32.err" || { cat "$tmp/s32.err"; fail "a ZeRO-3 save on 3 ranks resumed on 2 under ZeRO-2"; }

# a flipped byte: the resume names the file, the tensor and the parameter
f=$(tool flip "$tmp/s-flip/iter_0000002" adam.m model.layers.1.self_attn.o_proj.weight)
st=0; "$LJPERF" train "${common[@]}" --load "$tmp/s-flip" 2>"$tmp/flip.err" || st=$?
[ "$st" != 0 ] && grep -E -q "iter_0000002/$f: tensor 'adam.m' slice \[[0-9]+, [0-9]+\) \(parameter model.layers.1.self_attn.o_proj.weight\) fails its checksum" \
  "$tmp/flip.err" || { cat "$tmp/flip.err"; fail "a flipped byte in $f was not reported by name (status $st)"; }
f=$(tool flip "$tmp/s-flip/iter_0000002" master model.norm.weight)
st=0; mpi 2 "$LJPERF" train "${common[@]}" --zero-stage 1 --load "$tmp/s-flip" 2>"$tmp/flip.err" || st=$?
[ "$st" != 0 ] && grep -q "$f: tensor 'master' slice .* (parameter model.norm.weight) fails its checksum" "$tmp/flip.err" \
  || { cat "$tmp/flip.err"; fail "a flipped master byte was not reported on 2 ranks (status $st)"; }
echo "a flipped byte in a shard file: named (file, tensor, parameter)"

# --async-save: the same files and losses as synchronous saves (every iteration)
mpi 2 "$LJPERF" train "${common[@]}" --zero-stage 1 --save "$tmp/sy" --save-interval 1 --keep-last 0 \
  --log-json "$tmp/sy.jsonl" 2>"$tmp/sy.err" || { cat "$tmp/sy.err"; fail "synchronous saves"; }
mpi 2 "$LJPERF" train "${common[@]}" --zero-stage 1 --save "$tmp/as" --save-interval 1 --keep-last 0 --async-save \
  --log-json "$tmp/as.jsonl" 2>"$tmp/as.err" || { cat "$tmp/as.err"; fail "--async-save"; }
grep -q "async save of iteration 1 started: the step paused" "$tmp/as.err" || { cat "$tmp/as.err"; fail "no async save line"; }
diff <(losses "$tmp/sy.jsonl") <(losses "$tmp/as.jsonl") || fail "--async-save changed the losses"
for i in 1 2 3 4; do
  for f in metadata.json state.json shard_00000_of_00002.bin shard_00001_of_00002.bin hf/model.safetensors; do
    cmp -s "$tmp/sy/iter_000000$i/$f" "$tmp/as/iter_000000$i/$f" || fail "--async-save: iter_000000$i/$f differs"
  done
done
[ "$(cat "$tmp/as/latest_checkpointed_iteration.txt")" = 4 ] || fail "--async-save: the latest is not 4"
echo "--async-save: 4 iterations' files and losses identical to synchronous saves"
# a failing background writer (writes beyond a file-size limit fail): non-zero exit, nothing latest
st=0
(trap '' XFSZ; ulimit -f 40000; exec "$LJPERF" train "${common[@]}" --save "$tmp/af" --save-interval 2 --async-save \
  2>"$tmp/af.err") || st=$?
[ "$st" != 0 ] && [ "$st" -lt 128 ] && grep -q "shard_00000_of_00001.bin: write failed" "$tmp/af.err" \
  || { cat "$tmp/af.err"; fail "a failed background write: status $st, or no message"; }
[ ! -e "$tmp/af/latest_checkpointed_iteration.txt" ] && ! ls "$tmp/af" | grep -q '^iter_' \
  || fail "a failed background write left an iteration: $(ls "$tmp/af")"
echo "--async-save: a failed background write exits $st and leaves no iteration"

# the save's peak host memory (VmHWM above the RSS before it), for a state 20x the staging bound:
# below the bound plus a margin; the HF export adds one 4 MiB conversion chunk and the tokenizer
# files (Llama 3's tokenizer.json is read and parsed whole)
bound=$((1 << 20))
LJPERF_CKPT_STAGING_BYTES=$bound "$LJPERF" train "${common[@]}" --train-iters 2 --save "$tmp/rss" --save-interval 1 \
  --no-save-hf 2>"$tmp/rss.err" || { cat "$tmp/rss.err"; fail "the saves with a 1 MiB staging bound"; }
sed -nE 's/.*: ([0-9.]+) MiB in .*peak host memory of the save ([0-9.]+) MiB.*/\1 \2/p' "$tmp/rss.err" > "$tmp/rss.txt"
python3 - "$tmp/rss.txt" <<'PY' || { cat "$tmp/rss.err"; fail "a save's peak host memory is above its bound plus the margin"; }
import sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
assert len(rows) == 2, rows
for (state, peak), what, limit in zip(rows, ("without the HF export", "with the HF export"), (1 + 8, 1 + 4 + 40)):
    print("  save of %.1f MiB %s: peak host memory %.1f MiB (staging bound 1 MiB; limit %d MiB)" % (state, what, peak, limit))
    assert state > 20 and peak < limit
PY

# --no-save-hf: no HF export in the intermediate saves, one in the last; resumes without --model
"$LJPERF" train "${common[@]}" --save "$tmp/nh" --save-interval 1 --keep-last 0 --no-save-hf 2>"$tmp/nh.err" \
  || { cat "$tmp/nh.err"; fail "--no-save-hf"; }
[ ! -e "$tmp/nh/iter_0000002/hf" ] && [ -f "$tmp/nh/iter_0000004/hf/model.safetensors" ] \
  || fail "--no-save-hf: the HF exports are not where they should be"
grep -q "no Hugging Face export" "$tmp/nh.err" || fail "--no-save-hf: the save's line does not say so"
"$LJPERF" train --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2 --global-batch-size 12 \
  --train-iters 3 --seed 11 --quiet --eval-iters 1 --load "$tmp/nh/iter_0000002" 2>"$tmp/nh2.err" \
  || { cat "$tmp/nh2.err"; fail "a checkpoint without an HF export does not resume by itself"; }
echo "--no-save-hf: the last save has the HF export, an intermediate one resumes from its config.json"

# the single-file format still loads, on another world size
"$LJPERF" train "${common[@]}" --ckpt-format torch --save "$tmp/t" --exit-interval 2 --log-json "$tmp/t.jsonl" \
  2>"$tmp/t.err" || { cat "$tmp/t.err"; fail "--ckpt-format torch"; }
[ -f "$tmp/t/iter_0000002/state.safetensors" ] || fail "--ckpt-format torch wrote no state.safetensors"
mpi 2 "$LJPERF" train "${common[@]}" --zero-stage 1 --save "$tmp/t" --load "$tmp/t" --log-json "$tmp/t.jsonl" \
  2>"$tmp/t2.err" || { cat "$tmp/t2.err"; fail "a single-file checkpoint resumed on 2 ranks"; }
echo "single file saved on 1 rank, resumed on 2:"; close "$tmp/w1.jsonl" "$tmp/t.jsonl" || fail "single-file resume"
[ -f "$tmp/t/iter_0000004/metadata.json" ] || fail "the resumed run did not save in the sharded format"
rm -rf "$tmp"
echo "1 passed, 0 failed"

#!/usr/bin/env bash
# test_tensorboard_train.sh: `ljperf train --tensorboard-dir` read back by a reader ljperf did
# not write (tests/tb_events.py: Google's protobuf runtime on TensorBoard's Event and Summary
# field numbers compiled by protoc, every record's CRC32C checked by the crc32c package):
#   - every Megatron-LM tag at every step: lm loss, learning-rate, grad-norm, batch-size and
#     loss-scale at each iteration, each also "vs samples" (step = consumed samples), with the
#     values --log-json has (as 32-bit floats); iteration-time, throughput, tokens-per-sec and
#     memory at each log line; validation loss and ppl after each evaluation;
#   - a resumed run adds a second event file that continues the steps; with 2 ranks only rank 0
#     writes; with --decoupled-lr the decoupled-learning-rate tag, and under --rampup-batch-size
#     batch-size is each iteration's batch;
#   - the DeepSpeed config's tensorboard section (output_path/job_name), its wandb section and
#     --wandb-project print how W&B imports the files;
#   - bad input: a directory below a regular file, a bad DeepSpeed tensorboard section, a zero
#     --tensorboard-log-interval, an unknown --wandb- flag: one message naming the field.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/tensorboard_train"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3 # Debian's, with python3-protobuf and python3-crc32c
$py -c 'import google.protobuf, crc32c' 2>/dev/null || fail "python3-protobuf / python3-crc32c missing: run scripts/setup.sh"
command -v protoc >/dev/null || fail "protoc missing: run scripts/setup.sh"
protoc -I "$LJ_SOURCE_DIR/tests/tensorboard" --python_out="$tmp" \
  "$LJ_SOURCE_DIR/tests/tensorboard/event.proto" "$LJ_SOURCE_DIR/tests/tensorboard/summary.proto"
read_events() { $py "$LJ_SOURCE_DIR/tests/tb_events.py" "$tmp" "$@"; }

kjv="$LJ_CACHE/data/kjv.txt"
[ -s "$kjv" ] || fail "$kjv is missing: run scripts/setup.sh"
head -c 300000 "$kjv" > "$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" >/dev/null 2>&1 \
  || fail "prepare failed"
common=(--model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2
        --global-batch-size 4 --lr 3e-3 --lr-warmup-iters 2 --seed 7 --eval-iters 2)

# 1. a run of 7 iterations, log line every 3, evaluation every 4 (and at the end)
"$LJPERF" train "${common[@]}" --train-iters 7 --log-interval 3 --eval-interval 4 --tensorboard-dir "$tmp/tb" \
  --log-json "$tmp/run.jsonl" --save "$tmp/ckpt" --wandb-project demo >"$tmp/run.out" 2>"$tmp/run.err" \
  || { cat "$tmp/run.err"; fail "train --tensorboard-dir"; }
grep -q "wandb sync --sync-tensorboard --project demo $tmp/tb" "$tmp/run.err" || { cat "$tmp/run.err"; fail "--wandb-project: no W&B import line"; }
read_events "$tmp/tb" > "$tmp/events.json" || fail "the event file does not read back"
check_run() { # events.json log.jsonl first-iteration last-iteration log-interval eval-iterations
  $py - "$@" <<'EOF'
import json, struct, sys
ev, log, first, last, log_interval = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
evals = [int(x) for x in sys.argv[6].split(",")]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
rows = [json.loads(l) for l in open(log)]
steps = [r for r in rows if "loss" in r and first <= r["iteration"] <= last]
vals = [r for r in rows if "validation_loss" in r]
assert ev["file_version"] == "brain.Event:2", ev["file_version"]
sc = ev["scalars"]
def series(tag):
    assert tag in sc, f"tag '{tag}' missing (have: {sorted(sc)})"
    return [(s, v) for s, v, _ in sc[tag]]
its = list(range(first, last + 1))
for tag, key in [("lm loss", "loss"), ("learning-rate", "lr"), ("grad-norm", "grad_norm")]:
    got = series(tag)
    assert [s for s, _ in got] == its, f"{tag}: steps {[s for s, _ in got]}"
    for (s, v), r in zip(got, steps):
        # float32 in the event; a 9-digit decimal of the double in --log-json: within 1 ulp
        assert abs(v - f32(r[key])) <= 1.2e-7 * abs(v), f"{tag} at {s}: {v} != {r[key]}"
    vs = series(tag + " vs samples")
    assert [s for s, _ in vs] == [r["consumed_samples"] for r in steps], f"{tag} vs samples: steps {vs}"
    assert [v for _, v in vs] == [v for _, v in got]
for tag, want in [("batch-size", 4.0), ("loss-scale", 1.0)]:
    got = series(tag)
    assert [s for s, _ in got] == its and all(v == want for _, v in got), f"{tag}: {got}"
    assert len(series(tag + " vs samples")) == len(its)
lines = [i for i in its if i % log_interval == 0 or i == 1 or i == last]
for tag in ["iteration-time", "throughput", "tokens-per-sec", "mem-allocated-bytes", "mem-reserved-bytes"]:
    got = series(tag)
    assert [s for s, _ in got] == lines, f"{tag}: steps {[s for s, _ in got]}, want {lines}"
    assert all(v > 0 for _, v in got), f"{tag}: {got}"
val = series("lm loss validation")
assert [s for s, _ in val] == evals, f"validation steps {val}"
want = [f32(r["validation_loss"]) for r in vals if r["iteration"] in evals]
assert [v for _, v in val] == want, f"validation values {val} != {want}"
assert len(series("lm loss validation vs samples")) == len(evals)
assert len(series("lm loss validation ppl")) == len(evals)
print(f"tensorboard: {ev['records']} records in {ev['files']} file(s), {len(sc)} tags, iterations {first}-{last}: every tag and step present")
EOF
}
check_run "$tmp/events.json" "$tmp/run.jsonl" 1 7 3 4,7 || fail "event contents"

# 2. resume to 9 iterations: a second file continues the steps
"$LJPERF" train "${common[@]}" --train-iters 9 --log-interval 3 --load "$tmp/ckpt" --tensorboard-dir "$tmp/tb" \
  --log-json "$tmp/run.jsonl" >/dev/null 2>"$tmp/resume.err" || { cat "$tmp/resume.err"; fail "resume"; }
[ "$(ls "$tmp/tb" | grep -c '^events.out.tfevents')" = 2 ] || fail "the resume did not add a second event file"
read_events "$(ls -d "$tmp"/tb/events.out.tfevents.* | tail -1)" > "$tmp/events2.json" || fail "second file"
check_run "$tmp/events2.json" "$tmp/run.jsonl" 8 9 3 9 || fail "resumed event contents"

# 2b. two data-parallel ranks: rank 0 alone writes, one file
"$LJPERF" train "${common[@]}" --train-iters 3 --nproc-per-node 2 --quiet --tensorboard-dir "$tmp/tb2" \
  >/dev/null 2>"$tmp/dp.err" || { cat "$tmp/dp.err"; fail "2 ranks"; }
[ "$(ls "$tmp/tb2" | grep -c '^events.out.tfevents')" = 1 ] || fail "2 ranks wrote $(ls "$tmp/tb2" | wc -l) event files"
n=$(read_events "$tmp/tb2" | $py -c 'import json,sys; print([s for s, _, _ in json.load(sys.stdin)["scalars"]["lm loss"]])')
[ "$n" = "[1, 2, 3]" ] || fail "2 ranks: lm loss steps $n"
echo "2 ranks: one event file (rank 0), iterations 1-3"

# 2c. --decoupled-lr and --rampup-batch-size: the decoupled group's tag and each iteration's batch
"$LJPERF" train --model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2 \
  --global-batch-size 6 --rampup-batch-size 2 2 8 --train-samples 30 --lr 3e-3 --lr-warmup-samples 4 \
  --decoupled-lr 1e-2 --seed 7 --eval-iters 0 --quiet --tensorboard-dir "$tmp/tb3" --log-json "$tmp/dec.jsonl" \
  >/dev/null 2>"$tmp/dec.err" || { cat "$tmp/dec.err"; fail "--decoupled-lr --rampup-batch-size"; }
read_events "$tmp/tb3" > "$tmp/events3.json" || fail "the --decoupled-lr event file"
$py - "$tmp/events3.json" "$tmp/dec.jsonl" <<'PY' || fail "--decoupled-lr / --rampup-batch-size tags"
import json, struct, sys
sc = json.load(open(sys.argv[1]))["scalars"]
rows = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
dec = [(s, v) for s, v, _ in sc["decoupled-learning-rate"]]
assert dec == [(r["iteration"], f32(r["decoupled_lr"])) for r in rows], f"decoupled-learning-rate {dec}"
bs = [(s, v) for s, v, _ in sc["batch-size"]]
assert bs == [(r["iteration"], float(r["global_batch_size"])) for r in rows], f"batch-size {bs}"
assert len({v for _, v in bs}) > 1, f"the batch did not ramp up: {bs}"
print(f"decoupled-learning-rate at {len(dec)} iterations; batch-size follows the ramp-up: {[int(v) for _, v in bs]}")
PY

# 3. the DeepSpeed config's sections
cat > "$tmp/ds.json" <<EOF
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
 "tensorboard": {"enabled": true, "output_path": "$tmp/ds_tb", "job_name": "job1"},
 "wandb": {"enabled": true, "project": "dsproj", "team": "ml"},
 "csv_monitor": {"enabled": true, "output_path": "$tmp/csv"}}
EOF
"$LJPERF" train --model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --train-iters 2 \
  --deepspeed "$tmp/ds.json" --quiet >/dev/null 2>"$tmp/ds.err" || { cat "$tmp/ds.err"; fail "DeepSpeed tensorboard"; }
ls "$tmp/ds_tb/job1"/events.out.tfevents.* >/dev/null 2>&1 || fail "no event file in output_path/job_name"
grep -q "wandb sync --sync-tensorboard --project dsproj --entity ml $tmp/ds_tb/job1" "$tmp/ds.err" \
  || { cat "$tmp/ds.err"; fail "DeepSpeed wandb: no import line"; }
grep -q "csv_monitor is not written" "$tmp/ds.err" || fail "csv_monitor not mentioned"
if grep -q "ignoring key" "$tmp/ds.err"; then cat "$tmp/ds.err"; fail "a monitor section was called unknown"; fi
n=$(read_events "$tmp/ds_tb/job1" | $py -c 'import json,sys; print(len(json.load(sys.stdin)["scalars"]["lm loss"]))')
[ "$n" = 2 ] || fail "DeepSpeed run: $n lm loss values, want 2"
echo "deepspeed: tensorboard.output_path/job_name written, wandb and csv_monitor explained"

# 4. bad input
bad() { # expected-substring args...
  local want=$1; shift
  if "$LJPERF" train "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"; then fail "accepted: $*"; fi
  grep -q -- "$want" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "message lacks '$want': $*"; }
}
echo x > "$tmp/plain"
bad "--tensorboard-dir $tmp/plain/tb" "${common[@]}" --train-iters 1 --quiet --tensorboard-dir "$tmp/plain/tb"
bad "--tensorboard-log-interval 0: expected >= 1" "${common[@]}" --tensorboard-log-interval 0
bad "unknown flag '--wandb-projekt'" "${common[@]}" --wandb-projekt x
echo '{"train_micro_batch_size_per_gpu": 2, "tensorboard": {"enabled": "yes"}}' > "$tmp/ds_bad.json"
bad "ds_bad.json: tensorboard.enabled: expected true or false" "${common[@]}" --deepspeed "$tmp/ds_bad.json"
echo "bad input: named"
echo "test_tensorboard_train: passed"

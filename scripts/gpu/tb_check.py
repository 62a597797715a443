#!/usr/bin/env python3
"""tb_check.py: reads an `ljperf train --tensorboard-dir` directory with TensorBoard's own
reader (tensorboard.backend.event_processing.event_accumulator.EventAccumulator) and checks
that every tag ljperf writes (train/tensorboard.h) is there at every step, against the same
run's --log-json file.

    python3 scripts/gpu/tb_check.py TB_DIR RUN.jsonl --log-interval N

Exits 0 and prints "PASS ..." when every tag and step is present and lm loss, learning-rate
and grad-norm equal the JSON lines' values (as 32-bit floats); else prints FAIL lines."""
import argparse
import json
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ap = argparse.ArgumentParser()
ap.add_argument("tb_dir")
ap.add_argument("log_json")
ap.add_argument("--log-interval", type=int, required=True)
args = ap.parse_args()

ea = EventAccumulator(args.tb_dir, size_guidance={"scalars": 0})
ea.Reload()
tags = set(ea.Tags()["scalars"])
rows = [json.loads(line) for line in open(args.log_json)]
steps = [r for r in rows if "loss" in r]
evals = [r["iteration"] for r in rows if "validation_loss" in r]
its = [r["iteration"] for r in steps]
last = its[-1]
lines = [i for i in its if i % args.log_interval == 0 or i == 1 or i == last]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
fails = []


def check(tag, want_steps):
    if tag not in tags:
        fails.append(f"tag '{tag}' missing")
        return []
    got = ea.Scalars(tag)
    if [e.step for e in got] != want_steps:
        fails.append(f"'{tag}': steps {[e.step for e in got][:8]}... want {want_steps[:8]}... ({len(got)} vs {len(want_steps)})")
    return got


for tag, key in [("lm loss", "loss"), ("learning-rate", "lr"), ("grad-norm", "grad_norm"), ("batch-size", None), ("loss-scale", None)]:
    got = check(tag, its)
    check(tag + " vs samples", [r["consumed_samples"] for r in steps])
    if key:
        # the event holds the value as float32; --log-json prints some values (grad_norm) with 9
        # digits of the double, whose float32 can be the neighbour of the float32 of the double
        bad = [(e.step, e.value, r[key]) for e, r in zip(got, steps) if abs(e.value - f32(r[key])) > 1.2e-7 * abs(e.value)]
        if bad:
            fails.append(f"'{tag}': {len(bad)} values differ from --log-json, first {bad[0]}")
for tag in ["iteration-time", "throughput", "tokens-per-sec", "mem-allocated-bytes", "mem-reserved-bytes"]:
    check(tag, lines)
for tag in ["lm loss validation", "lm loss validation ppl"]:
    check(tag, evals)
    check(tag + " vs samples", [s["consumed_samples"] for s in steps if s["iteration"] in evals])

n_events = sum(len(ea.Scalars(t)) for t in tags)
if fails:
    for f in fails:
        print("FAIL", f)
    sys.exit(1)
print(f"PASS TensorBoard's EventAccumulator: {len(tags)} tags, {n_events} scalars, iterations 1-{last}, "
      f"{len(lines)} log lines, validation at {evals}: every tag and step present")

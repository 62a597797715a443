#!/usr/bin/env bash
# test_bf16_moments.sh: AdamW's moments stored as bf16 (Megatron-LM's precision-aware optimizer:
# --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16), llama3-nano on
# KJV tokens on the CPU backend, 6 iterations of 4 sequences:
#   - the start-up line says so; the sharded checkpoint stores the moments as bf16 (metadata
#     "BF16", shard files of 8 bytes per parameter instead of 12), the single-file one as f32
#     values that bf16 holds exactly; the master weights are f32 values that bf16 does not hold;
#   - the losses stay within 1e-3 (relative) of the f32-moment run's and are not all the same;
#   - a run stopped at iteration 3 and resumed continues the uninterrupted one bit for bit (losses
#     and final master weights and moments), on one rank (the sharded format) and on 2 ranks under
#     mpirun (ZeRO-1, --ckpt-format single: the state gathered to rank 0, the bf16 shards widened);
#   - a checkpoint reads back under the other setting (bf16 moments widened, f32 ones rounded);
#   - the memory plan holds half the f32 moments' bytes; ZeRO-3 over 2 ranks and a DeepSpeed
#     config's optimizer offload are refused by name.
source "$(dirname "$0")/kjv_train_lib.sh" bf16_moments
common=(--model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2
        --global-batch-size 4 --train-iters 6 --lr 3e-3 --lr-warmup-iters 1 --seed 5 --quiet --eval-iters 1
        --use-distributed-optimizer)
bf16=(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)
same() { # same A B: the losses of A, then the resumed B's, equal the uninterrupted run's; the final state too
  diff <(losses "$tmp/$1.jsonl") <(cat "$tmp/$2-a.jsonl" "$tmp/$2-b.jsonl" | losses /dev/stdin) >/dev/null \
    || { paste <(losses "$tmp/$1.jsonl") <(cat "$tmp/$2-a.jsonl" "$tmp/$2-b.jsonl" | losses /dev/stdin); \
         fail "$2: the resumed losses differ from $1's"; }
  [ "$(losses "$tmp/$1.jsonl" | wc -l)" -ge 6 ] || fail "$1: fewer than 6 iterations"
  python3 "$LJ_SOURCE_DIR/tests/ckpt_state.py" same "$tmp/$1" "$tmp/$2" || fail "$1 and $2: the final state differs"
}
bf16_exact() { # bf16_exact DIR: adam.m and adam.v bf16 values (low 16 bits zero), the master not
  python3 - "$tmp/$1" <<'PY' || fail "$1: the saved moments are not bf16 values"
import glob, json, os, struct, sys
sys.path.insert(0, os.environ["LJ_SOURCE_DIR"] + "/tests")
import ckpt_state
d = ckpt_state.iter_dir(sys.argv[1])
if os.path.exists(os.path.join(d, "metadata.json")):  # sharded: stored as bf16
    dt = [ckpt_state.dtype(d, name) for name in ("master", "adam.m", "adam.v")]
    assert dt == ["F32", "BF16", "BF16"], "dtypes %s" % dt
    p = json.load(open(os.path.join(d, "metadata.json")))["tensors"]["master"]["shape"][0]
    size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(d, "shard_*.bin")))
    assert size == 8 * p, "shard files of %d bytes for %d parameters, not 8 each" % (size, p)
    print("  %s: moments stored as BF16, %d bytes for %d parameters" % (os.path.basename(sys.argv[1]), size, p))
def low(name):
    t = ckpt_state.tensor(sys.argv[1], name)
    words = struct.unpack("%dI" % len(t), struct.pack("%df" % len(t), *t))
    return sum(1 for w in words if w & 0xFFFF), len(words)
for name in ("adam.m", "adam.v"):
    off, n = low(name)
    assert n > 0 and off == 0, "%s: %d of %d not bf16" % (name, off, n)
off, n = low("master")
assert off > n // 2, "master: only %d of %d have low bits" % (off, n)
print("  %s: adam.m and adam.v bf16 values, %d of %d master weights are not" % (os.path.basename(sys.argv[1]), off, n))
PY
}

# one rank: f32 moments, bf16 moments, and bf16 stopped at 3 and resumed
run f32 1 --save "$tmp/f32"
run bf 1 "${bf16[@]}" --save "$tmp/bf"
grep -q -- "--use-precision-aware-optimizer: AdamW's moments are stored as m bf16, v bf16 (4 bytes per parameter instead of 8)" \
  "$tmp/bf.err" || { cat "$tmp/bf.err"; fail "no start-up line about the bf16 moments"; }
bf16_exact bf
python3 - "$tmp/f32.jsonl" "$tmp/bf.jsonl" <<'PY' || fail "bf16 moments: the losses are not within 1e-3 of f32's"
import json, sys
a, b = ([r["loss"] for r in map(json.loads, open(p)) if "loss" in r] for p in sys.argv[1:])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("  bf16 vs f32 moments: losses within %.1e over %d iterations" % (worst, len(a)))
assert len(a) == len(b) >= 6 and worst <= 1e-3 and a != b
PY
run bf-r-a 1 "${bf16[@]}" --save "$tmp/bf-r" --exit-interval 3
run bf-r-b 1 "${bf16[@]}" --save "$tmp/bf-r" --load "$tmp/bf-r"
same bf bf-r
# a checkpoint read under the other setting: the bf16 moments of bf-r's iteration 3 widened into
# an f32-moment run (which then continues as the bf16 run's first 3 iterations and f32 after),
# and f32's iteration-6 moments rounded into a bf16-moment run
mkdir -p "$tmp/x" && cp -r "$tmp/bf-r/iter_0000003" "$tmp/x/" && echo 3 >"$tmp/x/latest_checkpointed_iteration.txt"
run x-f32 1 --load "$tmp/x"
run x-bf 1 "${bf16[@]}" --load "$tmp/f32" --train-iters 8
python3 - "$tmp/x-f32.jsonl" "$tmp/bf-r-b.jsonl" "$tmp/x-bf.jsonl" <<'PY' || fail "a checkpoint read under the other moment dtype"
import json, sys
a, b, c = ([(r["iteration"], r["loss"]) for r in map(json.loads, open(p)) if "loss" in r] for p in sys.argv[1:])
assert [i for i, _ in a] == [4, 5, 6] and [i for i, _ in c] == [7, 8], (a, c)
worst = max(abs(x[1] - y[1]) / abs(y[1]) for x, y in zip(a, b))
assert worst <= 1e-3, worst
print("  bf16 checkpoint resumed with f32 moments: within %.1e of the bf16 resume; f32 checkpoint resumed "
      "with bf16 moments: iterations 7-8" % worst)
PY

# 2 ranks, ZeRO-1: each rank's slices of the sharded format (the one-rank resume above reads
# them the same way), then the resume through --ckpt-format single
run bf2 2 "${bf16[@]}" --save "$tmp/bf2"
bf16_exact bf2
ls "$tmp"/bf2/iter_*/shard_00001_of_00002.bin >/dev/null 2>&1 || fail "bf2: no shard of rank 1"
# --ckpt-format single: rank 0 writes the state the ranks gather (their bf16 shards widened)
run bf2-s-a 2 "${bf16[@]}" --save "$tmp/bf2-s" --exit-interval 3 --ckpt-format single
ls "$tmp"/bf2-s/iter_0000003/state.safetensors >/dev/null 2>&1 || fail "bf2-s: no single-file state"
bf16_exact bf2-s
run bf2-s-b 2 "${bf16[@]}" --save "$tmp/bf2-s" --load "$tmp/bf2-s" --ckpt-format single
same bf2 bf2-s

# ZeRO-3 over 2 ranks: refused before anything runs
st=0
mpirun --oversubscribe --bind-to none -np 2 "$LJPERF" train "${common[@]}" --zero-stage 3 "${bf16[@]}" \
  >/dev/null 2>"$tmp/z3.err" || st=$?
[ "$st" != 0 ] && grep -q -- "--exp-avg-dtype bf16 under ZeRO-3 over 2 ranks" "$tmp/z3.err" \
  || { cat "$tmp/z3.err"; fail "ZeRO-3 over 2 ranks with bf16 moments was not refused by name"; }
# offload asked for by a DeepSpeed config: the message names its key
printf '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}\n' \
  >"$tmp/ds_off.json"
st=0
"$LJPERF" train "${common[@]}" --deepspeed "$tmp/ds_off.json" "${bf16[@]}" >/dev/null 2>"$tmp/off.err" || st=$?
[ "$st" != 0 ] && grep -q -- "--exp-avg-dtype bf16 with zero_optimization.offload_optimizer.device" "$tmp/off.err" \
  || { cat "$tmp/off.err"; fail "bf16 moments with the config's offload were not refused naming its key"; }

# the plan: the moments take half the bytes
moments() { "$LJPERF" plan --model llama3-nano --device cpu --seq-length 32 --zero-stage 1 "$@" --json - 2>/dev/null |
  python3 -c 'import json,sys; print([c["bytes"] for c in json.load(sys.stdin)["breakdown"] if c["category"] == "optimizer moments"][0])'; }
a=$(moments) b=$(moments "${bf16[@]}")
python3 - "$a" "$b" <<'PY' || fail "plan: bf16 moments $b bytes against f32's $a: not half (within the 4-byte norm and step scalars)"
import sys
a, b = map(int, sys.argv[1:])
extra = 1024  # the grad-norm accumulator and the step scalars, the same in both
print("  plan: optimizer moments %d bytes with f32, %d with bf16" % (a, b))
assert abs((a - extra) / 2 - (b - extra)) <= extra and b < a * 0.55
PY
echo "test_bf16_moments: PASS"

#!/usr/bin/env bash
# test_fp8_param.sh: --fp8-param-gather (Megatron-LM's FP8 parameters; model/linear.h) on the CPU
# backend's exact FP8 emulation, llama3-nano on KJV tokens, 3 iterations of 12 sequences:
#   - one rank (--use-distributed-optimizer), gradient accumulation over 6 micro-batches:
#     tensorwise scaling gives the same losses and final state (master weights, AdamW moments) bit
#     for bit with the flag as without (each cast takes W's own amax: the codes cast once per step
#     are those each micro-batch cast before); delayed scaling's losses stay within 2e-4 of the run
#     without it and its final weights within 3e-2 (the micro-batches after the first now read the
#     codes cast at the step's start with the scale of the previous step's amax, where they cast
#     with the one the first micro-batch recorded of this step's weights; docs/megatron.md, "FP8
#     parameters"; measured 2.7e-5 and 7.5e-3: AdamW's normalised step moves an element whose
#     gradient is near zero by up to the learning rate, and switching the run to tensorwise moves
#     the losses by 1e-4 and the weights by 5e-3), and with one micro-batch per step (an amax
#     history of 4, max) it is bit for bit the run without it;
#   - 2 and 3 ranks under mpirun with --zero-stage 3 (each rank casts its shard, the layers gather
#     FP8 codes): with the flag equal to the same run without it within 1e-6 (the partition is cut
#     at the weights: with 2 ranks and one micro-batch each the layers compute the same values, but
#     the global gradient norm sums over other shard boundaries, which can move its last bit and
#     the clipping factor's on some CPUs; with 3 ranks and 2 micro-batches each some elements move
#     to another owner, whose accumulated gradient is added first), and within 1e-3 of one rank
#     with the flag (as any FP8 run over ranks: the sums' order moves codes);
#   - resuming with the flag continues the uninterrupted run bit for bit (one rank, delayed, 6
#     micro-batches; 3 ranks, ZeRO-3, tensorwise, 2 micro-batches each: losses and final state);
#   - the memory plan: one rank keeps each FP8 linear's codes and transpose (fp8.layers.L.K.w, .w_t,
#     out x ld(in) and in x ld(out) bytes) and no weight scratch, its FP8 bytes growing by exactly
#     that; under ZeRO-3 over 2 ranks a layer's gather slot holds its FP8 weights as bytes (49 KiB
#     instead of 192.5 KiB of f32), beside this rank's FP8 shard (zero3.fp8_shard);
#   - the start-up line says what is kept and gathered.
source "$(dirname "$0")/kjv_train_lib.sh" fp8_param
common=(--model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2
        --global-batch-size 12 --train-iters 3 --lr 3e-3 --lr-warmup-iters 1 --seed 11 --quiet --eval-iters 1
        --fp8-format hybrid)
same() { # same A B: the losses and (when both saved) the final state bit for bit
  diff <(losses "$tmp/$1.jsonl") <(losses "$tmp/$2.jsonl") >/dev/null || { paste <(losses "$tmp/$1.jsonl") \
    <(losses "$tmp/$2.jsonl"); fail "$1 and $2: the losses differ"; }
  [ "$(losses "$tmp/$1.jsonl" | wc -l)" -ge 2 ] || fail "$1: fewer than 2 iterations"
  if [ -d "$tmp/$1" ] && [ -d "$tmp/$2" ]; then
    python3 "$LJ_SOURCE_DIR/tests/ckpt_state.py" same "$tmp/$1" "$tmp/$2" || fail "$1 and $2: the final state differs"
  fi
}
near() { # near A B LOSS_TOL WEIGHT_TOL: losses and final master weights within them (relative)
  python3 - "$tmp/$1" "$tmp/$2" "$3" "$4" <<'PY' || fail "$1 and $2: not within $3 (losses), $4 (weights)"
import json, math, os, sys
sys.path.insert(0, os.environ["LJ_SOURCE_DIR"] + "/tests")
import ckpt_state
a, b, tol, wtol = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
la, lb = ({r["iteration"]: r["loss"] for r in map(json.loads, open(p + ".jsonl")) if "loss" in r} for p in (a, b))
assert sorted(la) == sorted(lb) and len(la) >= 2, "not the same iterations"
worst = max(abs(la[i] - lb[i]) / abs(la[i]) for i in la)
x, y = ckpt_state.tensor(a, "master"), ckpt_state.tensor(b, "master")
rel = math.sqrt(sum((p - q) ** 2 for p, q in zip(x, y)) / sum(p * p for p in x))
print("  %s vs %s: losses within %.1e, final weights within %.1e (relative)"
      % (os.path.basename(a), os.path.basename(b), worst, rel))
assert worst <= tol and rel <= wtol
PY
}

# one rank, 6 micro-batches per step
for recipe in tensorwise delayed; do
  run "r1-$recipe" 1 --use-distributed-optimizer --fp8-recipe $recipe --save "$tmp/r1-$recipe"
  run "r1-$recipe-p" 1 --use-distributed-optimizer --fp8-recipe $recipe --fp8-param-gather --save "$tmp/r1-$recipe-p"
done
grep -q -- "--fp8-param-gather: the FP8 linears keep their weights as FP8 (E4M3, delayed scaling), cast once per optimizer step" \
  "$tmp/r1-delayed-p.err" || { cat "$tmp/r1-delayed-p.err"; fail "the start-up line"; }
grep -q "one rank: their FP8 copy and its transpose beside the f32 weights" "$tmp/r1-delayed-p.err" \
  || fail "the start-up line does not say what one rank keeps"
same r1-tensorwise r1-tensorwise-p
echo "ok: one rank, tensorwise, 6 micro-batches: with the flag bit for bit the run without it"
near r1-delayed r1-delayed-p 2e-4 3e-2
echo "ok: one rank, delayed, 6 micro-batches: losses within 2e-4 of the run without the flag, weights 3e-2"
one_mb=(--global-batch-size 2 --use-distributed-optimizer --fp8-recipe delayed --fp8-amax-history-len 4
        --fp8-amax-compute-algo max)
run r1-mb1 1 "${one_mb[@]}" --save "$tmp/r1-mb1"
run r1-mb1-p 1 "${one_mb[@]}" --fp8-param-gather --save "$tmp/r1-mb1-p"
same r1-mb1 r1-mb1-p
echo "ok: one rank, delayed (history 4, max), one micro-batch per step: bit for bit the run without the flag"

# ZeRO-3 over 2 and 3 ranks
one_per_rank=(--zero-stage 3 --global-batch-size 4)
for recipe in tensorwise delayed; do
  run "z2-$recipe" 2 "${one_per_rank[@]}" --fp8-recipe $recipe --save "$tmp/z2-$recipe"
  run "z2-$recipe-p" 2 "${one_per_rank[@]}" --fp8-recipe $recipe --fp8-param-gather --save "$tmp/z2-$recipe-p"
  near "z2-$recipe" "z2-$recipe-p" 1e-6 1e-6
done
grep -q "ZeRO-3: each rank casts its shard of them and every layer's all-gather moves them as FP8 codes (1 byte per element instead of 4)" \
  "$tmp/z2-delayed-p.err" || { cat "$tmp/z2-delayed-p.err"; fail "ZeRO-3: the start-up line"; }
echo "ok: ZeRO-3 on 2 ranks, one micro-batch per rank, tensorwise and delayed: FP8 gathers within 1e-6 of the f32 ones"
run z3 3 --zero-stage 3 --fp8-recipe tensorwise --save "$tmp/z3"
run z3-p 3 --zero-stage 3 --fp8-recipe tensorwise --fp8-param-gather --save "$tmp/z3-p"
near z3 z3-p 1e-6 1e-6
near r1-tensorwise-p z3-p 1e-3 1
echo "ok: ZeRO-3 on 3 ranks, 2 micro-batches each, tensorwise: within 1e-6 of the f32 gathers, 1e-3 of one rank"

# resume with the flag
run r1-part 1 --use-distributed-optimizer --fp8-recipe delayed --fp8-param-gather --save "$tmp/ck1" --exit-interval 2
run r1-rest 1 --use-distributed-optimizer --fp8-recipe delayed --fp8-param-gather --load "$tmp/ck1"
grep -q "resumed from" "$tmp/r1-rest.err" || { cat "$tmp/r1-rest.err"; fail "one rank: not resumed"; }
diff <(losses "$tmp/r1-delayed-p.jsonl" | awk '$1 > 2') <(losses "$tmp/r1-rest.jsonl") || fail "one rank: the resume differs"
run z3-part 3 --zero-stage 3 --fp8-recipe tensorwise --fp8-param-gather --save "$tmp/ck3" --exit-interval 2
run z3-rest 3 --zero-stage 3 --fp8-recipe tensorwise --fp8-param-gather --load "$tmp/ck3" --save "$tmp/ck3"
diff <(losses "$tmp/z3-p.jsonl" | awk '$1 > 2') <(losses "$tmp/z3-rest.jsonl") || fail "ZeRO-3: the resume differs"
[ "$(losses "$tmp/z3-rest.jsonl" | wc -l)" = 1 ] || fail "ZeRO-3: the resume did not run iteration 3"
python3 "$LJ_SOURCE_DIR/tests/ckpt_state.py" same "$tmp/z3-p" "$tmp/ck3" || fail "ZeRO-3: the resumed final state differs"
echo "ok: resumed with the flag (one rank delayed, 3 ranks ZeRO-3 tensorwise): bit for bit"

# the memory plan
plan() { # plan NAME FLAGS...: --buffers into NAME.txt, --json into NAME.json
  local name=$1; shift
  "$LJPERF" plan --model llama3-nano --device cpu --seq-length 32 --recompute none --fp8-format hybrid "$@" --buffers \
    --json "$tmp/$name.json" >"$tmp/$name.txt" 2>&1 || { cat "$tmp/$name.txt"; fail "plan $name"; }
}
plan p1 --zero-stage 1
plan p1-p --zero-stage 1 --fp8-param-gather
plan p3 --zero-stage 3 --world-size 2
plan p3-p --zero-stage 3 --world-size 2 --fp8-param-gather
python3 - "$tmp" <<'PY' || fail "the memory plan"
import json, sys
tmp = sys.argv[1]
def buffers(name):
    out = {}
    for line in open(f"{tmp}/{name}.txt"):
        f = line.split()
        if len(f) == 4 and f[3] in ("B", "KiB", "MiB"):
            out[f[0]] = round(float(f[2]) * {"B": 1, "KiB": 1024, "MiB": 1 << 20}[f[3]])
    assert out, f"{name}: no buffers listed"
    return out
def fp8_bytes(name):
    return next(r["bytes"] for r in json.load(open(f"{tmp}/{name}.json"))["breakdown"] if r["category"] == "FP8 casts and scales")
ld = lambda n: (n + 15) // 16 * 16
pad = lambda n: (n + 255) // 256 * 256
C, I, Q, QKV, L = 64, 192, 64, 128, 2  # llama3-nano
shapes = {"qkv": (QKV, C), "o": (C, Q), "gate_up": (2 * I, C), "down": (C, I)}
a, b = buffers("p1"), buffers("p1-p")
kept = 0
for l in range(L):
    for k, (out, inp) in shapes.items():
        assert b[f"fp8.layers.{l}.{k}.w"] == out * ld(inp) and b[f"fp8.layers.{l}.{k}.w_t"] == inp * ld(out), (l, k)
        kept += out * ld(inp) + inp * ld(out)
assert "fp8.w" in a and "fp8.w" not in b and "fp8.w_t" not in b, "the weight scratch is still planned"
F = 4 * L
want = kept + pad(3 * F * 16) + pad(4 * F) - pad(a["fp8.w"]) - pad(a["fp8.w_t"])
got = fp8_bytes("p1-p") - fp8_bytes("p1")
assert got == want, f"one rank: FP8 bytes grew by {got}, expected {want}"
print(f"  one rank: +{got} bytes of FP8 weights and transposes (fp8.w and fp8.w_t scratch dropped)")
a, b = buffers("p3"), buffers("p3-p")
layer = 2 * C + sum(o * i for o, i in shapes.values())
assert a["zero3.gather.1"] == layer * 4, a["zero3.gather.1"]
# 2 ranks, 64-element alignment: the norms' units padded to 128 elements (f32), the weights' bytes
assert b["zero3.gather.1"] == 2 * 128 * 4 + sum(o * i for o, i in shapes.values()), b["zero3.gather.1"]
assert b["zero3.fp8_shard"] == L * sum(o * i for o, i in shapes.values()) // 2, b["zero3.fp8_shard"]
assert not any(n.startswith("fp8.layers.") for n in b) and "fp8.w" not in b and "fp8.w_t" in b
print(f"  ZeRO-3, 2 ranks: a layer's gather slot {a['zero3.gather.1']} -> {b['zero3.gather.1']} bytes, "
      f"FP8 shard {b['zero3.fp8_shard']} bytes")
PY
echo "ok: the memory plan keeps the FP8 weights (one rank) and gathers FP8 bytes (ZeRO-3)"

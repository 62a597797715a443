#!/usr/bin/env bash
# test_megatron_parity.sh: Megatron-LM's flags mean in ljperf what they mean in Megatron-LM, checked
# against Megatron's own formulas (written out below from megatron/core: the initializers of
# transformer_config.py, the parameter groups of optimizer/__init__.py, get_lr of
# optimizer_param_scheduler.py) on a 4-layer Llama trained on the CPU in fp32:
#   1. the LR schedule (--lr-warmup-init, --lr-warmup-iters, --lr-decay-iters, cosine, --min-lr):
#      the logged learning rate of iteration k is Megatron's get_lr after k scheduler steps, for
#      k = 1..20 (past the decay into the --min-lr tail), to fp32 precision;
#   2. update k runs at get_lr after k - 1 steps: with --lr-warmup-init 0 the first update moves
#      nothing, so one iteration on two different datasets leaves the same weights, bit for bit;
#   3. --init-method-std: every matrix and embedding ~ N(0, std), the layers' o_proj and down_proj
#      ~ N(0, std / sqrt(2 L)) (scaled_init_method_normal), norms 1: each tensor's sample standard
#      deviation within 6% of its formula (about 6 standard errors at the smallest tensor);
#   4. --weight-decay groups: every parameter but biases and 1-D ones (the norms) is decayed, the
#      embedding and lm_head included: the second update with --weight-decay 0.1 and 0 differs by
#      exactly -lr * wd * w on the decayed tensors (within 1%) and by nothing on the others;
#   5. --ckpt-format torch_dist says that the checkpoint is ljperf's own format.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp="$LJ_TEST_TMP/megatron_parity"
rm -rf "$tmp" && mkdir -p "$tmp"
mini="$LJ_SOURCE_DIR/tests/data/gpt2_mini/tokenizer.json"
kjv="$LJ_CACHE/data/kjv.txt"
[ -s "$kjv" ] || fail "$kjv is missing: run scripts/setup.sh"
head -c 200000 "$kjv" > "$tmp/a.txt"
tail -c 200000 "$kjv" > "$tmp/b.txt"
for d in a b; do
  "$LJPERF" prepare --tokenizer "$mini" --input "$tmp/$d.txt" --split-on blank-line --output-prefix "$tmp/$d" \
    --quiet >/dev/null 2>"$tmp/prepare-$d.err" || { cat "$tmp/prepare-$d.err"; fail "prepare $d"; }
done
cat > "$tmp/model.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
 "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 264,
 "max_position_embeddings": 256, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}
EOF
# Megatron-LM's flags for the schedule, the optimizer and the init
mg=(--model "$tmp/model.json" --seq-length 64 --micro-batch-size 4 --global-batch-size 4
    --lr 3e-3 --min-lr 3e-4 --lr-warmup-init 0 --lr-warmup-iters 5 --lr-decay-iters 16 --lr-decay-style cosine
    --init-method-std 0.02 --clip-grad 1.0 --adam-beta1 0.9 --adam-beta2 0.95 --eval-iters 0 --hf-dtype fp32)
train() { # NAME FLAGS...
  local name=$1; shift
  "$LJPERF" train --device cpu --seed 11 --quiet "${mg[@]}" "$@" --log-json "$tmp/$name.jsonl" >/dev/null \
    2>"$tmp/$name.err" || { cat "$tmp/$name.err"; fail "train $name"; }
}
train sched --data-path "$tmp/a" --train-iters 20 --weight-decay 0.1
train one-a --data-path "$tmp/a" --train-iters 1 --weight-decay 0.1 --save "$tmp/one-a"
train one-b --data-path "$tmp/b" --train-iters 1 --weight-decay 0.1 --save "$tmp/one-b"
train two-wd --data-path "$tmp/a" --train-iters 2 --weight-decay 0.1 --save "$tmp/two-wd"
train two-nowd --data-path "$tmp/a" --train-iters 2 --weight-decay 0 --save "$tmp/two-nowd"
# 5. --ckpt-format torch_dist is not taken to mean Megatron's format: the run says what it writes
"$LJPERF" train --device cpu --seed 11 "${mg[@]}" --data-path "$tmp/a" --train-iters 1 --ckpt-format torch_dist \
  --save "$tmp/dist" >"$tmp/dist.out" 2>&1 || { cat "$tmp/dist.out"; fail "train --ckpt-format torch_dist"; }
grep -q "ljperf writes its own sharded format, which Megatron-LM cannot load" "$tmp/dist.out" ||
  fail "--ckpt-format torch_dist: no word that the checkpoint is ljperf's format ($(head -c 300 "$tmp/dist.out"))"
echo "ok: --ckpt-format torch_dist says that ljperf writes its own format"

python3 - "$tmp" <<'EOF'
import json, math, struct, sys
tmp = sys.argv[1]
L, STD, WD = 4, 0.02, 0.1

# Megatron's OptimizerParamScheduler.get_lr (iteration-based: one scheduler step per iteration)
def get_lr(n, max_lr=3e-3, min_lr=3e-4, init_lr=0.0, warmup=5, decay=16):
    if warmup > 0 and n <= warmup:
        return init_lr + (max_lr - init_lr) * n / warmup
    if n > decay:
        return min_lr
    ratio = (n - warmup) / (decay - warmup)
    return min_lr + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (max_lr - min_lr)

# 1. the logged learning rate
rows = [json.loads(l) for l in open(f"{tmp}/sched.jsonl") if '"iteration"' in l and '"lr"' in l]
if [r["iteration"] for r in rows] != list(range(1, 21)):
    sys.exit(f"sched.jsonl: iterations {[r['iteration'] for r in rows]}, expected 1..20")
for r in rows:
    want = get_lr(r["iteration"])
    if abs(r["lr"] - want) > 1e-7 * max(want, 1e-30) + 1e-12:
        sys.exit(f"iteration {r['iteration']}: logged lr {r['lr']!r}, Megatron's get_lr({r['iteration']}) = {want!r}")
print("ok: the logged lr of iterations 1..20 is Megatron's get_lr after k scheduler steps")

def tensors(run):
    path = f"{tmp}/{run}/iter_{'0000001' if run.startswith('one') else '0000002'}/hf/model.safetensors"
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {t['dtype']}, expected F32 (--hf-dtype fp32)")
        b, e = t["data_offsets"]
        out[name] = (t["shape"], struct.unpack(f"<{(e - b) // 4}f", raw[8 + n + b:8 + n + e]))
    return out

# 2. the first update runs at get_lr(0) = --lr-warmup-init = 0: the data does not matter
a, b = tensors("one-a"), tensors("one-b")
if a.keys() != b.keys() or any(a[k][1] != b[k][1] for k in a):
    diff = [k for k in a if a[k][1] != b.get(k, (None, None))[1]]
    sys.exit(f"after one iteration on two datasets the weights differ ({diff[:3]}...): the first update did not "
             "run at --lr-warmup-init 0 (Megatron steps its scheduler after the update)")
print(f"ok: the first update runs at --lr-warmup-init (0): {len(a)} tensors equal after one iteration on two datasets")

# 3. the init, on those untouched weights
def sd(v):
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / len(v))
checked = 0
for name, (shape, v) in a.items():
    if len(shape) == 1:
        if any(x != 1.0 for x in v):
            sys.exit(f"{name}: a norm weight is not 1 at init")
        continue
    want = STD / math.sqrt(2 * L) if name.endswith(("o_proj.weight", "down_proj.weight")) else STD
    got = sd(v)
    if abs(got - want) > 0.06 * want:
        sys.exit(f"{name}: init std {got:.5f}, Megatron's {want:.5f} "
                 f"({'scaled_init_method_normal' if want < STD else 'init_method_normal'})")
    checked += 1
print(f"ok: the init of {checked} matrices: o_proj/down_proj at std/sqrt(2L) = {STD / math.sqrt(2 * L):.5f}, "
      f"the rest at {STD}")

# 4. the decay groups: update 2 runs at lr = get_lr(1); decoupled decay multiplies w by 1 - lr * wd
lr2 = get_lr(1)
wd, nowd = tensors("two-wd"), tensors("two-nowd")
decayed = []
for name, (shape, w1) in a.items():
    d = [x - y for x, y in zip(wd[name][1], nowd[name][1])]
    megatron_decays = not name.endswith(".bias") and len(shape) != 1
    if megatron_decays:
        num = sum(x * y for x, y in zip(d, w1))
        den = sum(y * y for y in w1)
        ratio = num / den
        if abs(ratio - (-lr2 * WD)) > 0.01 * lr2 * WD:
            sys.exit(f"{name}: the decay moved it by {ratio:.4g} x w, Megatron's -lr*wd = {-lr2 * WD:.4g}")
        decayed.append(name)
    elif any(x != 0.0 for x in d):
        sys.exit(f"{name}: --weight-decay changed it, but Megatron does not decay biases and 1-D parameters")
need = {"model.embed_tokens.weight", "lm_head.weight"}
if not need <= set(decayed):
    sys.exit(f"the embedding and lm_head must be decayed (Megatron's groups): decayed {sorted(decayed)[:4]}...")
print(f"ok: --weight-decay on {len(decayed)} tensors (embedding and lm_head included), none on norms")
EOF
echo "PASS"

#!/usr/bin/env bash
# cross_train_losses.sh: a cross build's ljperf (LJPERF, run under the emulator) against the
# native build's (LJPERF_NATIVE) on the same input, registered only in cross builds:
#   - `ljperf prepare` writes the same .bin/.idx bytes (Llama 3 tokenizer: int32 tokens; the
#     small GPT-2 style tokenizer in tests/data/gpt2_mini: uint16 tokens);
#   - a short CPU training run (fp32) logs the same losses, gradient norms and validation
#     losses to the fp32 tolerance below: a 2-layer model with the 264-token vocabulary for 30
#     AdamW steps of 2 accumulated micro-batches, and llama3-nano (the 128256-token Llama 3
#     vocabulary) for 3 steps.
# Tolerance: |cross - native| <= 1e-5 * max(1, |native|) for every value, the HF fixtures'
# fp32 tolerance. The two builds round differently only where their BLAS kernels and FMA
# contraction sum in another order (measured: about 1e-7 relative); one wrong token in a
# batch, or a wrong weight, moves a loss by far more. A negative control checks that the
# comparison rejects a loss off by 1e-4 relative.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -n "${LJPERF_NATIVE:-}" ] && [ -x "$LJPERF_NATIVE" ] ||
  fail "LJPERF_NATIVE ('${LJPERF_NATIVE:-}') is not the native ljperf: configure the cross build with -DLJ_NATIVE_LJPERF=PATH (scripts/build.sh does)"
command -v python3 >/dev/null 2>&1 || fail "python3 is missing: run scripts/setup.sh"
tmp="$LJ_TEST_TMP/cross_train_losses"
rm -rf "$tmp" && mkdir -p "$tmp"
tok="$LJ_CACHE/tokenizer/llama3/tokenizer.json"
mini="$LJ_SOURCE_DIR/tests/data/gpt2_mini/tokenizer.json"
kjv="$LJ_CACHE/data/kjv.txt"
[ -s "$tok" ] && [ -s "$kjv" ] || fail "$tok or $kjv is missing: run scripts/setup.sh"
head -c 300000 "$kjv" > "$tmp/kjv.txt"

# 1. the datasets, byte for byte
for t in llama3 mini; do
  tf=$tok; [ $t = mini ] && tf=$mini
  for side in native cross; do
    bin=$LJPERF; [ $side = native ] && bin=$LJPERF_NATIVE
    "$bin" prepare --tokenizer "$tf" --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/$t-$side" \
      --quiet >/dev/null 2>"$tmp/$t-$side.err" || { cat "$tmp/$t-$side.err"; fail "prepare ($t, $side)"; }
  done
  cmp "$tmp/$t-native.bin" "$tmp/$t-cross.bin" || fail "$t: the .bin files differ"
  cmp "$tmp/$t-native.idx" "$tmp/$t-cross.idx" || fail "$t: the .idx files differ"
  echo "ok: prepare ($t tokenizer): .bin ($(wc -c < "$tmp/$t-native.bin") bytes) and .idx identical"
done

# 2. the training runs
cat > "$tmp/small.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 160,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 264,
 "max_position_embeddings": 256, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": true,
 "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}
EOF
small=(--model "$tmp/small.json" --data-path "$tmp/mini-native" --seq-length 64 --micro-batch-size 4
       --global-batch-size 8 --train-iters 30 --lr 3e-3 --lr-warmup-iters 3 --eval-interval 15 --eval-iters 2)
nano=(--model llama3-nano --data-path "$tmp/llama3-native" --seq-length 32 --micro-batch-size 2
      --global-batch-size 2 --train-iters 3 --lr 3e-3 --lr-warmup-iters 1 --eval-interval 3 --eval-iters 1)
train() { # train NAME SIDE FLAGS...
  local name=$1 side=$2; shift 2
  local bin=$LJPERF; [ "$side" = native ] && bin=$LJPERF_NATIVE
  "$bin" train --device cpu --seed 7 --quiet "$@" --log-json "$tmp/$name-$side.jsonl" >/dev/null \
    2>"$tmp/$name-$side.err" || { cat "$tmp/$name-$side.err"; fail "train ($name, $side)"; }
}

# compare NATIVE.jsonl CROSS.jsonl: every loss, grad_norm and validation_loss within the tolerance
compare() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
TOL = 1e-5
def values(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        for key in ("loss", "grad_norm", "validation_loss"):
            if key in r:
                out[(r["iteration"], key)] = r[key]
    return out
native, cross = values(sys.argv[1]), values(sys.argv[2])
if not native or sorted(native) != sorted(cross):
    sys.exit(f"the logs differ in what they hold: {len(native)} values native, {len(cross)} cross")
for k in sorted(native):
    diff = abs(cross[k] - native[k])
    if not diff <= TOL * max(1.0, abs(native[k])):
        sys.exit(f"iteration {k[0]} {k[1]}: native {native[k]!r}, cross {cross[k]!r}: "
                 f"|difference| {diff:.3g} is above {TOL:g} x max(1, |native|)")
largest = {}
for (it, key), v in native.items():
    largest[key] = max(largest.get(key, 0.0), abs(cross[(it, key)] - v))
print(f"{len(native)} values within {TOL:g} x max(1, |native|); largest |difference|: " +
      ", ".join(f"{key} {d:.3g}" for key, d in sorted(largest.items())))
EOF
}

for name in small nano; do
  if [ $name = small ]; then flags=("${small[@]}"); else flags=("${nano[@]}"); fi
  train "$name" native "${flags[@]}"
  train "$name" cross "${flags[@]}"
  out=$(compare "$tmp/$name-native.jsonl" "$tmp/$name-cross.jsonl" 2>&1) ||
    fail "train ($name): the cross build's log differs from the native build's: $out"
  echo "ok: train ($name): $out"
done

# 3. negative control: one loss 1e-4 off (relative) must fail the comparison
python3 - "$tmp/small-native.jsonl" "$tmp/small-off.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
next(r for r in rows if r.get("iteration") == 20 and "loss" in r)["loss"] *= 1 + 1e-4
open(sys.argv[2], "w").write("".join(json.dumps(r) + "\n" for r in rows))
EOF
if compare "$tmp/small-native.jsonl" "$tmp/small-off.jsonl" >/dev/null 2>&1; then
  fail "the comparison accepted a loss off by 1e-4"
fi
echo "ok: the comparison rejects a loss off by 1e-4 (relative)"
echo "1 passed, 0 failed"

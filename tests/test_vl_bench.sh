#!/usr/bin/env bash
# test_vl_bench.sh: the Qwen3-VL forms of `ljperf plan` and `ljperf benchmark` on the CPU:
#   - plan of qwen3-vl-2b at 448x448 + 512 text tokens: the sample's shape (784 patches, 196 image
#     tokens, 710 tokens a row), the tower's 407 M parameters at 16 bytes each, and its share in
#     every category; at 1024x1024 the tower's activations grow with the patches;
#   - plan --seq-length T is the plan `ljperf train` allocates (the same bytes and buffers as the
#     train start-up's "memory plan" line);
#   - benchmark of qwen3-vl-tiny: one step, its table (tokens/s, samples/s, MFU with the ViT's
#     FLOPs) and JSON (the shape from --img-h/--img-w through smart_resize, the FLOP terms);
#   - the sample flags: --image-size sets both sides; with --img-h it is refused;
#   - --recompute full and selective of the decoder train as without it (the same losses, bit for
#     bit on the CPU), auto reports the planner's choice, and an unknown policy is refused;
#   - --recompute-vision full (the tower's blocks) trains as without it too, is named in the table
#     and the JSON, and shrinks the plan by all but one block's tensors; a bad value is refused;
#   - --global-batch-size accumulates: micro-batch 1 x 2 steps = micro-batch 2 (the same losses).
set -euo pipefail
: "${LJPERF:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/vl_bench"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'j': j}))" "$@"; }

# 1. the plan of qwen3-vl-2b at 448x448 and 1024x1024
"$LJPERF" plan --model qwen3-vl-2b --device cpu --image-size 448 --json "$tmp/p448.json" >"$tmp/p448.txt" 2>&1 || true
[ -s "$tmp/p448.json" ] || { cat "$tmp/p448.txt"; fail "plan --model qwen3-vl-2b wrote no JSON"; }
[ "$(field "$tmp/p448.json" "j['max_patches'], j['seq_length'], j['vision_parameters'], j['vision_bytes_per_parameter']")" \
  = "(784, 710, 406957056, 16)" ] || { cat "$tmp/p448.json"; fail "the 2b plan's shape or the tower's parameters"; }
grep -q "784 patches, 196 tokens; + 512 text tokens) = 710 tokens" "$tmp/p448.txt" \
  || { cat "$tmp/p448.txt"; fail "the plan does not state the sample"; }
grep -q "of it the tower" "$tmp/p448.txt" || fail "the plan has no column of the tower's share"
# the tower's model states are its parameters x 16 bytes
[ "$(field "$tmp/p448.json" "sum(r['vision_bytes'] for r in j['breakdown'] if r['category'] in ('parameters', 'master weights', 'gradients', 'optimizer moments'))")" \
  = "$((406957056 * 16))" ] || fail "the tower's parameters, gradients and moments are not 16 bytes a parameter"
"$LJPERF" plan --model qwen3-vl-2b --device cpu --img-h 1024 --img-w 1024 --json "$tmp/p1024.json" >/dev/null 2>&1 || true
act() { field "$1" "[r['vision_bytes'] for r in j['breakdown'] if r['category'] == 'saved activations'][0]"; }
a448=$(act "$tmp/p448.json") a1024=$(act "$tmp/p1024.json")
python3 -c "import sys; r = $a1024 / $a448; sys.exit(0 if 5.0 < r < 5.5 else 1)" \
  || fail "the tower's activations at 1024x1024 ($a1024) are not about 4096/784 times those at 448x448 ($a448)"
echo "plan qwen3-vl-2b: tower activations $((a448 >> 20)) MiB at 448x448, $((a1024 >> 20)) MiB at 1024x1024 (f32)"

# 2. plan --seq-length T = what train allocates
"$LJPERF" plan --model qwen3-vl-tiny --device cpu --seq-length 48 --micro-batch-size 2 --json "$tmp/ptrain.json" \
  >/dev/null 2>&1 || fail "plan --seq-length"
python3 - "$tmp" <<'EOF' || fail "could not write the one-sample dataset"
import json, os, struct, sys, zlib
tmp = sys.argv[1]
def png(path, w, h):  # a plain RGB PNG
    raw = b"".join(b"\0" + bytes((x * 7 + y * 3) % 256 for x in range(w) for _ in range(3)) for y in range(h))
    def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
png(os.path.join(tmp, "a.png"), 64, 64)
with open(os.path.join(tmp, "one.jsonl"), "w") as f:
    f.write(json.dumps({"image": "a.png", "conversations": [{"from": "human", "value": "<image>\nWhat is it?"},
                                                          {"from": "gpt", "value": "A gradient."}]}) + "\n")
EOF
tok="${LJ_CACHE:-}/tokenizer/qwen3/tokenizer.json"
if [ -s "$tok" ]; then
  "$LJPERF" prepare --input "$tmp/one.jsonl" --image-root "$tmp" --output-prefix "$tmp/one" --tokenizer qwen3 \
    --min-pixels 4096 --max-pixels 16384 --quiet >/dev/null 2>"$tmp/prep.err" || { cat "$tmp/prep.err"; fail "prepare"; }
  "$LJPERF" train --model qwen3-vl-tiny --device cpu --seq-length 48 --micro-batch-size 2 --train-iters 1 \
    --num-workers 1 --data-path "$tmp/one" >/dev/null 2>"$tmp/train.err" || { cat "$tmp/train.err"; fail "train"; }
  line=$(grep -o 'memory plan: .* buffers' "$tmp/train.err")
  want="($(field "$tmp/ptrain.json" "j['plan_bytes']" | sed 's/\.0$//') bytes) in $(field "$tmp/ptrain.json" "j['buffers']") buffers"
  [[ "$line" == *"$want" ]] || fail "train's plan ($line) is not plan --seq-length 48's ($want)"
  echo "plan --seq-length 48 = train's: $line"
else
  echo "skipped the train comparison: no Qwen3 tokenizer at $tok (scripts/setup.sh)"
fi

# 3. the benchmark: one step of qwen3-vl-tiny
"$LJPERF" benchmark --model qwen3-vl-tiny --device cpu --img-h 300 --img-w 500 --text-tokens 16 --train-iters 1 \
  --warmup-iters 0 --no-progress --json "$tmp/b.json" >"$tmp/b.txt" 2>&1 || { cat "$tmp/b.txt"; fail "benchmark"; }
for k in "tokens/s" "samples/s" "MFU" "FLOPs/sample = ViT"; do grep -q "$k" "$tmp/b.txt" || fail "the table has no $k"; done
# 300x500 -> 288x512: 18x32 patches, 144 tokens; 144 + 2 + 16 = 162 tokens a row
[ "$(field "$tmp/b.json" "j['image_grid_thw'], j['image_tokens'], j['seq_length']")" = "([1, 18, 32], 144, 162)" ] \
  || { cat "$tmp/b.json"; fail "the benchmark's sample shape"; }
field "$tmp/b.json" "j['samples_per_s'] > 0 and j['vit_flops_per_sample'] > 0 and j['llm_flops_per_sample'] > 0 and abs(j['tokens_per_s'] - 162 * j['samples_per_s']) < 1e-6 * j['tokens_per_s']" \
  | grep -q True || { cat "$tmp/b.json"; fail "the benchmark's rates"; }
echo "benchmark qwen3-vl-tiny: $(grep -E '^samples/s' "$tmp/b.txt")"

# 4. the sample flags
"$LJPERF" plan --model qwen3-vl-tiny --device cpu --image-size 512 --json - 2>/dev/null | grep -q '"max_patches":[[:space:]]*1024' \
  || fail "--image-size 512 did not give 32x32 patches"
if "$LJPERF" plan --model qwen3-vl-tiny --device cpu --img-h 300 --image-size 512 >/dev/null 2>"$tmp/both.err"; then
  fail "--image-size with --img-h was accepted"
fi
grep -q "give --image-size S or --img-h H --img-w W" "$tmp/both.err" || { cat "$tmp/both.err"; fail "the refusal"; }
# 5. the decoder's recompute: the same numbers, the policy in the JSON
for r in none full selective auto; do # (auto's JSON through --json -: standard output holds it alone)
  out=(--json "$tmp/r_$r.json"); [ "$r" = auto ] && out=(--json -)
  "$LJPERF" benchmark --model qwen3-vl-tiny --device cpu --image-size 64 --text-tokens 32 --train-iters 2 --warmup-iters 0 \
    --no-progress --recompute "$r" "${out[@]}" >"$tmp/r_$r.out" 2>"$tmp/r_$r.txt" || { cat "$tmp/r_$r.txt"; fail "--recompute $r"; }
done
mv "$tmp/r_auto.out" "$tmp/r_auto.json" && [ ! -e ./- ] || fail "--json - wrote a file named -"
grep -q "samples/s" "$tmp/r_auto.txt" || fail "--json -: the table is not on stderr"
base=$(field "$tmp/r_none.json" "repr((j['loss_first'], j['loss_last']))")
for r in full selective auto; do
  [ "$(field "$tmp/r_$r.json" "repr((j['loss_first'], j['loss_last']))")" = "$base" ] \
    || fail "--recompute $r changed the losses: $(field "$tmp/r_$r.json" "repr((j['loss_first'], j['loss_last']))") against $base"
done
[ "$(field "$tmp/r_full.json" "j['recompute']")" = "4 full + 0 selective + 0 none" ] || fail "--recompute full: the JSON's policy"
grep -q "recompute planner: no recompute" "$tmp/r_auto.txt" || { cat "$tmp/r_auto.txt"; fail "--recompute auto: no planner line"; }
if "$LJPERF" benchmark --model qwen3-vl-tiny --device cpu --recompute most >/dev/null 2>"$tmp/rbad.err"; then
  fail "--recompute most was accepted"
fi
grep -q "\-\-recompute: 'most' is not one of auto, none, selective, full" "$tmp/rbad.err" || { cat "$tmp/rbad.err"; fail "the refusal"; }
# 5a. the tower's recompute: the same losses bit for bit, named in the table and the JSON; the plan's
# tower keeps one shared set of block tensors (qwen3-vl-2b at 1024²: 23 blocks' fewer); a bad value
# is refused by name, and under --recompute auto the tower recomputes only when nothing fits without it
"$LJPERF" benchmark --model qwen3-vl-tiny --device cpu --image-size 64 --text-tokens 32 --train-iters 2 --warmup-iters 0 \
  --no-progress --recompute-vision full --json "$tmp/v_full.json" >"$tmp/v_full.txt" 2>&1 \
  || { cat "$tmp/v_full.txt"; fail "--recompute-vision full"; }
[ "$(field "$tmp/v_full.json" "repr((j['loss_first'], j['loss_last']))")" = "$base" ] \
  || fail "--recompute-vision full changed the losses: $(field "$tmp/v_full.json" "repr((j['loss_first'], j['loss_last']))") against $base"
[ "$(field "$tmp/v_full.json" "j['vision_recompute']") $(field "$tmp/r_none.json" "j['vision_recompute']")" = "full none" ] \
  || fail "the JSON's vision_recompute"
grep -Eq "^vision recompute +full \(4 blocks\)" "$tmp/v_full.txt" || { cat "$tmp/v_full.txt"; fail "the table's vision recompute"; }
grep -Eq "^vision recompute +none \(4 blocks\)" "$tmp/r_auto.txt" || { cat "$tmp/r_auto.txt"; fail "auto turned the tower's recompute on"; }
for v in none full; do
  "$LJPERF" plan --model qwen3-vl-2b --device cpu --image-size 1024 --recompute none --recompute-vision "$v" \
    --json "$tmp/pv_$v.json" >"$tmp/pv_$v.txt" 2>&1 || true
  [ -s "$tmp/pv_$v.json" ] || { cat "$tmp/pv_$v.txt"; fail "plan --recompute-vision $v wrote no JSON"; }
done
python3 - "$tmp/pv_none.json" "$tmp/pv_full.json" <<'PY' || fail "the tower's recompute does not shrink the plan by 23 blocks' tensors"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
cat = lambda j, c: [r['vision_bytes'] for r in j['breakdown'] if r['category'] == c][0]
al = lambda n: (n + 255) // 256 * 256
Np, V, I, H = 4096, 1024, 4096, 16  # qwen3-vl-2b's tower at 1024x1024, f32
block = 4 * al(Np * V * 4) + al(Np * 3 * V * 4) + 2 * al(Np * I * 4) + 4 * al(Np * 4) + al(H * Np * 4)
ok = (a['vision_recompute'], b['vision_recompute']) == ('none', 'full') and cat(a, 'recompute buffers') == 0 \
    and cat(b, 'recompute buffers') == block and cat(a, 'saved activations') - cat(b, 'saved activations') == 24 * block \
    and a['plan_bytes'] - b['plan_bytes'] == 23 * block
print("plan qwen3-vl-2b 1024x1024 (f32): tower %.2f GiB without its recompute, %.2f GiB with it" % (a['vision_bytes'] / 2**30, b['vision_bytes'] / 2**30))
sys.exit(0 if ok else 1)
PY
grep -q "^vision recompute: full (24 blocks: each keeps only its input" "$tmp/pv_full.txt" || { cat "$tmp/pv_full.txt"; fail "the plan's vision recompute line"; }
for cmd in benchmark plan; do
  if "$LJPERF" "$cmd" --model qwen3-vl-tiny --device cpu --recompute-vision selective >/dev/null 2>"$tmp/vbad.err"; then
    fail "$cmd --recompute-vision selective was accepted"
  fi
  grep -q "\-\-recompute-vision: 'selective' is not one of none, full" "$tmp/vbad.err" || { cat "$tmp/vbad.err"; fail "the refusal"; }
done
# 5b. --global-batch-size: micro-batch 1 x 2 accumulation steps takes the samples of one micro-batch 2,
# and its summed gradients make the same step (the losses to rounding)
for mb in 1 2; do
  "$LJPERF" benchmark --model qwen3-vl-tiny --device cpu --image-size 64 --text-tokens 32 --train-iters 2 --warmup-iters 0 \
    --no-progress --micro-batch-size "$mb" --global-batch-size 2 --json "$tmp/g$mb.json" >"$tmp/g$mb.txt" 2>&1 \
    || { cat "$tmp/g$mb.txt"; fail "--micro-batch-size $mb --global-batch-size 2"; }
done
grep -q "micro-batch 1, global batch 2 (2 accumulation steps)" "$tmp/g1.txt" || { cat "$tmp/g1.txt"; fail "the accumulation line"; }
[ "$(field "$tmp/g1.json" "(j['global_batch_size'], j['accumulation_steps'])")" = "(2, 2)" ] || fail "the JSON's global batch"
python3 - "$tmp/g1.json" "$tmp/g2.json" <<'PY' || fail "accumulated gradients are not those of one micro-batch 2"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for k in ("loss_first", "loss_last"):
    if abs(a[k] - b[k]) > 1e-5 * abs(b[k]): print(k, a[k], b[k]); sys.exit(1)
sys.exit(0 if a["loss_last"] != a["loss_first"] else 1)
PY
if "$LJPERF" benchmark --model qwen3-vl-tiny --device cpu --micro-batch-size 2 --global-batch-size 3 >/dev/null 2>"$tmp/gbad.err"; then
  fail "--global-batch-size 3 with --micro-batch-size 2 was accepted"
fi
grep -q "\-\-global-batch-size 3 is not a multiple of --micro-batch-size 2" "$tmp/gbad.err" || { cat "$tmp/gbad.err"; fail "the refusal"; }
# 6. the planner for another card's memory: qwen3-vl-2b at 1024² needs 39.13 GiB without recompute;
# within 38 GiB the decoder recomputes and the joint plan fits; within 36 GiB, below its full
# recompute's peak, the tower recomputes too (and says so), unless --recompute-vision none forbids it
"$LJPERF" plan --model qwen3-vl-2b --device cuda --image-size 1024 --device-memory 38GiB --json "$tmp/p38.json" \
  >"$tmp/p38.txt" 2>&1 || { grep -q "built without CUDA" "$tmp/p38.txt" && echo "test_vl_bench: passed (no CUDA description: step 6 skipped)" && exit 0
                            cat "$tmp/p38.txt"; fail "plan --device-memory 38GiB did not fit"; }
[ "$(field "$tmp/p38.json" "j['fits'] and j['peak_bytes'] <= j['usable_bytes'] and j['recompute'] != 'none (28 layers)'")" = True ] \
  || { cat "$tmp/p38.txt"; fail "--device-memory 38GiB: no recompute chosen, or the plan does not fit"; }
grep -q "device memory 38.00 GiB (--device-memory)" "$tmp/p38.txt" || fail "the budget line does not name --device-memory"
[ "$(field "$tmp/p38.json" "j['vision_recompute']")" = none ] || fail "--device-memory 38GiB: the tower recomputes"
"$LJPERF" plan --model qwen3-vl-2b --device cuda --image-size 1024 --device-memory 36GiB --json "$tmp/p36.json" \
  >"$tmp/p36.txt" 2>&1 || { cat "$tmp/p36.txt"; fail "plan --device-memory 36GiB did not fit"; }
[ "$(field "$tmp/p36.json" "j['fits'] and j['vision_recompute'] == 'full'")" = True ] \
  || { cat "$tmp/p36.txt"; fail "--device-memory 36GiB: the tower's recompute was not turned on"; }
grep -q "the vision tower recomputes its blocks (full): with every decoder layer fully recomputed" "$tmp/p36.txt" \
  || { cat "$tmp/p36.txt"; fail "the planner does not say why the tower recomputes"; }
if "$LJPERF" plan --model qwen3-vl-2b --device cuda --image-size 1024 --device-memory 36GiB --recompute-vision none \
  >"$tmp/p36n.txt" 2>&1; then fail "--recompute-vision none in 36 GiB fitted"; fi
grep -q "try --recompute-vision full" "$tmp/p36n.txt" || { cat "$tmp/p36n.txt"; fail "the refusal does not name --recompute-vision"; }
echo "test_vl_bench: passed"

#!/usr/bin/env bash
# test_vl_fp8.sh: Qwen3-VL FP8 training on the CPU backend (its exact emulation of the recipes),
# with real photographs (tests/data/vl_example.jsonl over scikit-image's pictures, as
# test_vl_train.sh prepares them):
#   - train qwen3-vl-tiny with --fp8-format hybrid (delayed, the default; tensorwise; blockwise) on
#     one repeated sample: finite losses that go down, each within 1% of the fp32 run's (measured:
#     at most 2.2e-3 relative over the 4 steps, all three recipes); the start-up line says what
#     runs in FP8 in each tower;
#   - exact resume under delayed scaling with an amax history of 4 (max): a run stopped at
#     iteration 2 and resumed gives the uninterrupted run's losses bit for bit; the checkpoint
#     holds both towers' recipe states (text.fp8.state, vision.fp8.state: the tower's amaxes
#     recorded) and state.json says their shapes; a bf16 checkpoint resumed with FP8 starts the
#     recipes fresh, saying so, and an FP8 one resumed without FP8 says its state is not used;
#   - benchmark --fp8-format hybrid: the precision and the FP8 buffers (the tower's share);
#   - plan --fp8-format hybrid: the FP8 row with the tower's share, the vision.fp8.* buffers,
#     and plan --seq-length T equal to what train allocates with FP8;
#   - bad combinations: one message each naming the flag, exit status 1; an overflow (inf weights)
#     stops the run naming the first non-finite tensor of each tower.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/vl_fp8"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'j': j}))" "$@"; }

source "$(dirname "$0")/vl_data_lib.sh"
vl_prepare_datasets "$tmp" # $tmp/four and $tmp/one

base=(--model qwen3-vl-tiny --device cpu --seq-length 48 --micro-batch-size 1 --lr 1e-3 --seed 5 --num-workers 1)
common=("${base[@]}" --quiet)
losses() { grep '"loss"' "$1" | sed -E 's/.*"iteration": ([0-9]+), "loss": ([^,]+),.*/\1 \2/'; }

# 1. FP8 against fp32 on a repeated batch
"$LJPERF" train "${common[@]}" --data-path "$tmp/one" --train-iters 4 --log-json "$tmp/fp32.log" \
  >/dev/null 2>"$tmp/fp32.err" || { cat "$tmp/fp32.err"; fail "fp32 run"; }
for recipe in delayed tensorwise blockwise; do
  flags=(--fp8-format hybrid)
  [ "$recipe" = delayed ] || flags+=(--fp8-recipe "$recipe") # delayed: the default
  "$LJPERF" train "${base[@]}" "${flags[@]}" --data-path "$tmp/one" --train-iters 4 --log-json "$tmp/$recipe.log" \
    >/dev/null 2>"$tmp/$recipe.err" || { cat "$tmp/$recipe.err"; fail "$recipe: FP8 run"; }
  grep -q "emulation" "$tmp/$recipe.err" || fail "$recipe: the CPU emulation is not announced"
  grep -q "precision: fp8 hybrid .*$recipe scaling.*16 FP8 linears in the decoder's blocks and 16 in the vision tower's" \
    "$tmp/$recipe.err" || { cat "$tmp/$recipe.err"; fail "$recipe: the start-up line does not say what runs in FP8"; }
  grep -q "\"precision\":\"fp8 hybrid $recipe\"" "$tmp/$recipe.log" || fail "$recipe: the start record's precision"
  paste <(losses "$tmp/fp32.log") <(losses "$tmp/$recipe.log") | awk -v tag="$recipe" '
    { if ($4 != $4 + 0 || $4 == "nan" || $4 == "inf") bad = 1
      d = ($2 - $4) / $2; if (d < 0) d = -d; if (d > w) w = d
      if (d > 0.01) { print tag ": iteration " $1 " fp32 " $2 " fp8 " $4; bad = 1 }
      if (NR > 1 && $4 >= prev) { print tag ": the loss went up at iteration " $1; bad = 1 }; prev = $4; n++ }
    END { if (n != 4) bad = 1; printf "%s: 4 losses within %.2e of fp32\n", tag, w; exit bad }' \
    || fail "$recipe: FP8 losses not finite, not decreasing or more than 1% from fp32"
done

# 2. exact resume (delayed scaling with a history: the state carries over)
f8=(--fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max)
"$LJPERF" train "${common[@]}" "${f8[@]}" --data-path "$tmp/four" --train-iters 4 --log-json "$tmp/full.log" \
  >/dev/null 2>"$tmp/full.err" || { cat "$tmp/full.err"; fail "uninterrupted FP8 run"; }
"$LJPERF" train "${common[@]}" "${f8[@]}" --data-path "$tmp/four" --train-iters 2 --save "$tmp/ckpt" \
  --log-json "$tmp/part.log" >/dev/null 2>"$tmp/part.err" || { cat "$tmp/part.err"; fail "first half"; }
"$LJPERF" train --device cpu --seq-length 48 --lr 1e-3 --seed 5 --num-workers 1 "${f8[@]}" --data-path "$tmp/four" \
  --train-iters 4 --load "$tmp/ckpt" --save "$tmp/ckpt" --log-json "$tmp/part.log" >/dev/null 2>"$tmp/resume.err" \
  || { cat "$tmp/resume.err"; fail "resume"; }
if grep -q "start fresh" "$tmp/resume.err"; then cat "$tmp/resume.err"; fail "the FP8 state was not restored"; fi
diff <(losses "$tmp/full.log") <(losses "$tmp/part.log") || fail "resumed FP8 losses differ from the uninterrupted run"
python3 - "$tmp/ckpt/iter_0000002" <<'EOF' || fail "the checkpoint's FP8 state"
import json, struct, sys
d = sys.argv[1]
state = json.load(open(d + "/state.json"))["fp8"]
assert "amax history 4, max" in state["recipe"], state
with open(d + "/state.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
    data = f.read()
for tower, name in (("text", "text.fp8.state"), ("vision", "vision.fp8.state")):
    s = state[tower]
    assert s["num_linears"] == 16 and s["history_len"] == 4, s
    assert head[name]["shape"] == [s["state_numel"]] == [4 * 3 * 16 + 3 * 16], (name, head[name])
    a, b = head[name]["data_offsets"]
    v = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    amax = v[:3 * 16]  # the newest row of the history: every x, W and dy recorded
    assert all(x > 0 for x in amax), (name, amax)
EOF
echo "resume: 4 FP8 losses equal bit for bit; both towers' recipe states in the checkpoint"
# a bf16 checkpoint resumed with FP8, and an FP8 one without
"$LJPERF" train "${common[@]}" --data-path "$tmp/four" --train-iters 1 --save "$tmp/bf16" >/dev/null 2>&1 \
  || fail "bf16 run to resume"
"$LJPERF" train --device cpu --seq-length 48 --seed 5 --num-workers 1 --fp8-format hybrid --data-path "$tmp/four" \
  --train-iters 2 --load "$tmp/bf16" >/dev/null 2>"$tmp/fresh.err" || { cat "$tmp/fresh.err"; fail "FP8 from bf16"; }
[ "$(grep -c "no FP8 recipe state in it .* start fresh" "$tmp/fresh.err")" = 2 ] \
  || { cat "$tmp/fresh.err"; fail "FP8 resumed from bf16 does not say both recipes start fresh"; }
"$LJPERF" train --device cpu --seq-length 48 --seed 5 --num-workers 1 --data-path "$tmp/four" --train-iters 5 \
  --load "$tmp/ckpt" >/dev/null 2>"$tmp/unused.err" || { cat "$tmp/unused.err"; fail "bf16 from FP8"; }
grep -q "FP8 recipe state of the vision tower is not used" "$tmp/unused.err" \
  || { cat "$tmp/unused.err"; fail "bf16 resumed from FP8 does not say the state is not used"; }

# 3. the benchmark
"$LJPERF" benchmark --model qwen3-vl-tiny --device cpu --img-h 64 --img-w 64 --text-tokens 16 --train-iters 1 \
  --warmup-iters 0 --no-progress --fp8-format hybrid --json "$tmp/b.json" >"$tmp/b.txt" 2>&1 \
  || { cat "$tmp/b.txt"; fail "benchmark --fp8-format hybrid"; }
grep -q "^precision .*fp8 hybrid.*16 FP8 linears in the decoder's blocks, 16 in the vision tower's" "$tmp/b.txt" \
  || { cat "$tmp/b.txt"; fail "benchmark: no precision line"; }
grep -q "^FP8 casts and scales .*(vision tower " "$tmp/b.txt" || { cat "$tmp/b.txt"; fail "benchmark: no FP8 buffers"; }
field "$tmp/b.json" "j['fp8_linears'] == 16 and j['vision_fp8_linears'] == 16 and 0 < j['vision_fp8_planned_bytes'] < j['fp8_planned_bytes'] and j['loss_first'] == j['loss_first'] and j['precision'].startswith('fp8 hybrid')" \
  | grep -q True || { cat "$tmp/b.json"; fail "benchmark JSON: the FP8 fields"; }
"$LJPERF" benchmark --model qwen3-vl-tiny --device cpu --img-h 64 --img-w 64 --text-tokens 16 --train-iters 1 \
  --warmup-iters 0 --no-progress --json "$tmp/b16.json" >"$tmp/b16.txt" 2>&1 || fail "benchmark without FP8"
if grep -q "FP8" "$tmp/b16.txt"; then fail "benchmark without --fp8-format shows FP8"; fi
echo "benchmark: $(grep '^FP8 casts and scales' "$tmp/b.txt")"

# 4. the plan: the FP8 row with the tower's share, its buffers, and train's plan
"$LJPERF" plan --model qwen3-vl-tiny --device cpu --seq-length 48 --fp8-format hybrid --buffers --json "$tmp/p.json" \
  >"$tmp/p.txt" 2>&1 || { cat "$tmp/p.txt"; fail "plan --fp8-format hybrid"; }
grep -q "FP8 casts and scales" "$tmp/p.txt" || { cat "$tmp/p.txt"; fail "plan: no FP8 row"; }
for b in fp8.amax_history vision.fp8.amax_history vision.fp8.scale_inv vision.fp8.w_t vision.fp8.x_t vision.fp8.dy_t \
         vision.fp8.matmul; do
  grep -q "^  $b " "$tmp/p.txt" || { cat "$tmp/p.txt"; fail "plan: no buffer $b"; }
done
field "$tmp/p.json" "[(r['bytes'] > r['vision_bytes'] > 0) for r in j['breakdown'] if r['category'] == 'FP8 casts and scales'] == [True] and j['vision_fp8_linears'] == 16" \
  | grep -q True || { cat "$tmp/p.json"; fail "plan JSON: the FP8 row's tower share"; }
"$LJPERF" train --model qwen3-vl-tiny --device cpu --seq-length 48 --num-workers 1 --fp8-format hybrid \
  --data-path "$tmp/one" --train-iters 1 >/dev/null 2>"$tmp/t.err" || { cat "$tmp/t.err"; fail "train for the plan"; }
line=$(grep -o 'memory plan: .* buffers' "$tmp/t.err")
want="($(field "$tmp/p.json" "j['plan_bytes']" | sed 's/\.0$//') bytes) in $(field "$tmp/p.json" "j['buffers']") buffers"
[[ "$line" == *"$want" ]] || fail "train's FP8 plan ($line) is not plan --seq-length 48 --fp8-format hybrid's ($want)"
"$LJPERF" plan --model qwen3-vl-tiny --device cpu --seq-length 48 --buffers >"$tmp/p16.txt" 2>&1 || fail "plan"
if grep -q "fp8" "$tmp/p16.txt"; then fail "plan without --fp8-format has FP8 buffers"; fi
echo "plan: $(grep 'FP8 casts and scales' "$tmp/p.txt" | tr -s ' ')"

# 5. bad combinations: one message each, exit status 1
refuse() { # refuse FRAGMENT COMMAND ARGS...: exit status 1, one line on stderr holding FRAGMENT
  local frag=$1 st=0
  shift
  "$LJPERF" "$@" >/dev/null 2>"$tmp/bad.err" || st=$?
  [ "$st" = 1 ] || { cat "$tmp/bad.err"; fail "ljperf $*: exit status $st, expected 1"; }
  [ "$(wc -l < "$tmp/bad.err")" = 1 ] && grep -qF -- "$frag" "$tmp/bad.err" \
    || { cat "$tmp/bad.err"; fail "ljperf $*: expected one message with '$frag'"; }
}
vt=(train "${common[@]}" --data-path "$tmp/one" --train-iters 1)
refuse "--fp8-param-gather: not for Qwen3-VL" "${vt[@]}" --fp8-format hybrid --fp8-param-gather
refuse "need --fp8-format hybrid|e4m3" "${vt[@]}" --fp8-recipe tensorwise
refuse "--fp8-format: 'fp16' is not one of hybrid, e4m3" "${vt[@]}" --fp8-format fp16
refuse "--fp8-margin belong to --fp8-recipe delayed" "${vt[@]}" --fp8-format hybrid --fp8-recipe tensorwise --fp8-margin 1
refuse "--first-last-layers-bf16: 2 + 2 bf16 layers leave none of the 4 layers in FP8" "${vt[@]}" --fp8-format hybrid \
  --first-last-layers-bf16 --num-layers-at-start-in-bf16 2 --num-layers-at-end-in-bf16 2
refuse "--fp8-param-gather: not for Qwen3-VL" benchmark --model qwen3-vl-tiny --device cpu --fp8-format e4m3 \
  --fp8-param-gather
refuse "--fp8-recipe: 'mxfp8' is not one of" plan --model qwen3-vl-tiny --device cpu --fp8-format hybrid \
  --fp8-recipe mxfp8
# 6. an overflow (weights driven to inf by --lr 1e30): the run stops naming the tensors of both towers
st=0
"$LJPERF" "${vt[@]}" --train-iters 3 --lr 1e30 --fp8-format hybrid >/dev/null 2>"$tmp/overflow.err" || st=$?
[ "$st" = 1 ] && grep -q "FP8 scales overflow at iteration 2: the amax of the decoder's layers\..* and of the vision tower's visual\.blocks\..* are not finite" "$tmp/overflow.err" \
  || { cat "$tmp/overflow.err"; fail "an FP8 overflow was not reported by tensor (exit status $st)"; }
echo "overflow: $(tail -1 "$tmp/overflow.err")"
echo "test_vl_fp8: passed"

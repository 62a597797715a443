#!/usr/bin/env bash
# test_fp8_train.sh: the FP8 recipe end to end on the CPU backend (its exact emulation) with real
# KJV tokens:
#   - `ljperf train --fp8-format hybrid` (delayed scaling with an amax history of 4, max,
#     tensorwise, and blockwise: 1x128 / 128x128 tiles, partial here, the hidden size being 64) trains, its losses stay within 2% of the fp32 run's, and a resumed run's losses
#     equal the uninterrupted run's bit for bit (the amax histories and scales are in the
#     checkpoint; blockwise has no state that carries over; the checkpointed halves spell the
#     flags --flag=value);
#   - `ljperf plan --fp8-format hybrid` shows the FP8 buffers, with the tile scales under blockwise;
#   - the flags are rows of the flag table of train, benchmark and plan (train -h lists them as
#     taken, not ignored); another command refuses them as unknown;
#   - bad input: a history length with blockwise, --fp8-* without --fp8-format, a bad format, bf16
#     layers that leave nothing in FP8, a negative history length, margin or bf16 layer count
#     (refused, not replaced by the default): one message each, exit status 1.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}"
tmp="$LJ_TEST_TMP/fp8_train"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }

kjv="$LJ_CACHE/data/kjv.txt"
[ -s "$kjv" ] || fail "$kjv is missing: run scripts/setup.sh"
head -c 200000 "$kjv" > "$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" >/dev/null 2>&1 \
  || fail "prepare failed"
common=(--model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2
        --global-batch-size 2 --train-iters 6 --lr 3e-3 --lr-warmup-iters 2 --seed 7 --quiet --eval-iters 1)
losses() { grep '"loss"' "$1" | sed -E 's/.*"iteration": ([0-9]+), "loss": ([^,]+),.*/\1 \2/'; }

"$LJPERF" train "${common[@]}" --log-json "$tmp/fp32.jsonl" >/dev/null 2>"$tmp/fp32.err" \
  || { cat "$tmp/fp32.err"; fail "fp32 run"; }
for recipe in "delayed --fp8-amax-history-len 4 --fp8-amax-compute-algo max" "tensorwise" "blockwise"; do
  tag=${recipe%% *}
  read -r -a flags <<< "--fp8-format hybrid --fp8-recipe $recipe"
  eq=()
  for ((k = 0; k < ${#flags[@]}; k += 2)); do eq+=("${flags[k]}=${flags[k + 1]}"); done
  "$LJPERF" train "${common[@]}" "${flags[@]}" --log-json "$tmp/$tag.jsonl" >/dev/null 2>"$tmp/$tag.err" \
    || { cat "$tmp/$tag.err"; fail "$tag: FP8 run"; }
  grep -q "emulation" "$tmp/$tag.err" || fail "$tag: the CPU emulation is not announced"
  grep -q "precision: fp8 hybrid" "$tmp/$tag.err" || fail "$tag: the recipe is not printed"
  paste <(losses "$tmp/fp32.jsonl") <(losses "$tmp/$tag.jsonl") | awk -v tag="$tag" '
    { d = ($2 - $4) / $2; if (d < 0) d = -d; if (d > 0.02) { print tag ": iteration " $1 " fp32 " $2 " fp8 " $4; bad = 1 } }
    END { exit bad }' || fail "$tag: FP8 losses more than 2% from fp32"
  "$LJPERF" train "${common[@]}" "${eq[@]}" --save "$tmp/ck-$tag" --exit-interval 3 \
    --log-json "$tmp/$tag-part.jsonl" >/dev/null 2>"$tmp/$tag-part.err" || { cat "$tmp/$tag-part.err"; fail "$tag: first half"; }
  "$LJPERF" train "${common[@]}" "${eq[@]}" --load "$tmp/ck-$tag" --log-json "$tmp/$tag-part.jsonl" \
    >/dev/null 2>"$tmp/$tag-resume.err" || { cat "$tmp/$tag-resume.err"; fail "$tag: resume"; }
  grep -q '"fp8"' "$tmp/ck-$tag/iter_0000003/state.json" || fail "$tag: no FP8 state in state.json"
  if grep -q "start fresh" "$tmp/$tag-resume.err"; then cat "$tmp/$tag-resume.err"; fail "$tag: FP8 state not restored"; fi
  diff <(losses "$tmp/$tag.jsonl") <(losses "$tmp/$tag-part.jsonl") || fail "$tag: resumed losses differ"
  echo "$tag: FP8 within 2% of fp32, resume equal bit for bit"
done

"$LJPERF" plan --model llama3-nano --device cpu --seq-length 64 --recompute none --fp8-format hybrid --buffers \
  >"$tmp/plan.out" 2>&1 || { cat "$tmp/plan.out"; fail "plan --fp8-format"; }
grep -q "FP8 casts and scales" "$tmp/plan.out" || fail "plan: no FP8 row"
grep -q "fp8.w_t" "$tmp/plan.out" || fail "plan: no FP8 weight transpose buffer"
if grep -q "_scale" "$tmp/plan.out"; then fail "plan: tile scales without blockwise"; fi
"$LJPERF" plan --model llama3-nano --device cpu --seq-length 64 --recompute none --fp8-format hybrid \
  --fp8-recipe blockwise --buffers >"$tmp/plan_bw.out" 2>&1 || { cat "$tmp/plan_bw.out"; fail "plan blockwise"; }
for b in fp8.w_scale fp8.w_t_scale fp8.x_scale fp8.x_t_scale fp8.dy_scale fp8.dy_t_scale layers.0.fp8.ln1_t_scale \
         layers.0.fp8.mlp_act_t_scale; do
  grep -q "$b" "$tmp/plan_bw.out" || { cat "$tmp/plan_bw.out"; fail "plan blockwise: no $b"; }
done
# the ablation takes the FP8 flags for its +FP8 row; on the CPU the row is left out, with the reason
"$LJPERF" benchmark --model llama3-nano --device cpu --seq-length 64 --train-iters 1 --warmup-iters 0 --no-progress \
  --ablation --fp8-format hybrid --fp8-recipe tensorwise --json "$tmp/ab.json" >"$tmp/ab.out" 2>&1 ||
  { cat "$tmp/ab.out"; fail "benchmark --ablation --fp8-format"; }
grep -q "+FP8 left out: the CPU backend emulates FP8" "$tmp/ab.out" || { cat "$tmp/ab.out"; fail "ablation: no +FP8 line"; }
grep -q '"tflops"' "$tmp/ab.json" || fail "ablation JSON: no tflops"
"$LJPERF" plan --model llama3-nano --device cpu --seq-length 64 --recompute none >"$tmp/plan_bf16.out" 2>&1
if grep -q "FP8" "$tmp/plan_bf16.out"; then fail "plan without --fp8-format shows FP8"; fi

"$LJPERF" train -h >"$tmp/help.txt" || fail "train -h"
for f in --fp8-format --fp8-recipe --fp8-amax-history-len --fp8-amax-compute-algo --fp8-margin \
         --first-last-layers-bf16 --num-layers-at-start-in-bf16 --num-layers-at-end-in-bf16 --fp8-param-gather; do
  grep -q -- "^  $f  " "$tmp/help.txt" || fail "train -h does not list $f"
  if grep -q -- "^  $f  *\(ignored\|refused\): " "$tmp/help.txt"; then fail "train -h lists $f as not taken"; fi
  grep -A12 "Taken natively" "$tmp/help.txt" | grep -q -- "$f[,;]" || fail "$f is not in the Megatron compatibility table"
done
status=0
"$LJPERF" generate --fp8-format=hybrid >/dev/null 2>"$tmp/gen.err" || status=$?
[ "$status" = 1 ] && grep -q "unknown flag '--fp8-format'" "$tmp/gen.err" \
  || { cat "$tmp/gen.err"; fail "generate --fp8-format: not an unknown flag"; }
echo "flags: rows of train, benchmark and plan; unknown to generate"

bad() { # expected message, then the flags
  local want=$1; shift
  local status=0
  "$LJPERF" train "${common[@]}" "$@" >/dev/null 2>"$tmp/bad.err" || status=$?
  [ "$status" = 1 ] || { cat "$tmp/bad.err"; fail "'$*': exit status $status, expected 1"; }
  grep -q -- "$want" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "'$*': expected '$want'"; }
}
bad "belong to --fp8-recipe delayed" --fp8-format hybrid --fp8-recipe blockwise --fp8-amax-history-len 4
bad "'rowwise' is not one of delayed, tensorwise, blockwise" --fp8-format hybrid --fp8-recipe rowwise
bad "need --fp8-format" --fp8-margin 1
bad "'e5m2' is not one of hybrid, e4m3" --fp8-format e5m2
bad "belong to --fp8-recipe delayed" --fp8-format e4m3 --fp8-recipe tensorwise --fp8-amax-history-len 8
bad "leave none of the" --fp8-format hybrid --first-last-layers-bf16 --num-layers-at-start-in-bf16 8
bad "--fp8-amax-history-len -1: expected >= 1" --fp8-format hybrid --fp8-amax-history-len -1
bad "--fp8-margin -1: expected >= 0" --fp8-format hybrid --fp8-margin -1
bad "--num-layers-at-start-in-bf16 -1: expected >= 0" --fp8-format hybrid --first-last-layers-bf16 \
  --num-layers-at-start-in-bf16 -1
bad "--num-layers-at-end-in-bf16 -2: expected >= 0" --fp8-format hybrid --first-last-layers-bf16 \
  --num-layers-at-end-in-bf16=-2
echo "bad input: one message each"

#!/usr/bin/env bash
# same-losses.sh: two ljperf binaries on the same CPU training runs; every logged loss, gradient
# norm and validation loss must be equal bit for bit (the check for a change that must not move
# any number: a refactor). Runs, each a few iterations of a tiny model on the KJV Bible:
#   bf16-recipe (fp32 on the CPU), the FP8 recipes (delayed, tensorwise, blockwise emulated),
#   document masking, gradient accumulation, recompute full and selective, ZeRO stages 1-3 on two
#   CPU ranks (--nproc-per-node 2), optimizer offload, a save; and `ljperf plan` of several shapes
#   (the printed buffers must be the same text).
#   bash scripts/bench/same-losses.sh OLD_LJPERF NEW_LJPERF [WORKDIR]
# Needs the set-up script's cache ($LJPERF_CACHE or .cache) and Open MPI (the CPU ranks).
set -uo pipefail
A=${1:?usage: same-losses.sh OLD_LJPERF NEW_LJPERF [WORKDIR]}
B=${2:?usage: same-losses.sh OLD_LJPERF NEW_LJPERF [WORKDIR]}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${LJPERF_CACHE:-$repo/.cache}
w=${3:-$(mktemp -d)}
mkdir -p "$w"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
head -c 300000 "$cache/data/kjv.txt" > "$w/kjv.txt"
"$A" prepare --input "$w/kjv.txt" --split-on blank-line --output-prefix "$w/kjv" --quiet >/dev/null 2>&1 ||
  { echo "prepare failed"; exit 1; }
base=(--model llama3-nano --device cpu --data-path "$w/kjv" --seq-length 64 --micro-batch-size 2 --train-iters 4
      --lr 3e-3 --lr-warmup-iters 1 --eval-interval 2 --eval-iters 1 --seed 5 --quiet)
fails=0
run() { # NAME [LAUNCH...] -- FLAGS...
  local name=$1; shift
  local launch=()
  while [ "$1" != -- ]; do launch+=("$1"); shift; done
  shift
  for who in A B; do
    local bin=$A; [ $who = B ] && bin=$B
    rm -rf "$w/$name-$who.ckpt"
    "${launch[@]}" "$bin" train "${base[@]}" "$@" --log-json "$w/$name-$who.jsonl" >"$w/$name-$who.log" 2>&1 ||
      echo "  ($name $who exited $?)" >>"$w/$name-$who.log"
  done
  if cmp -s <(grep -o '"\(loss\|grad_norm\|validation_loss\)": [^,}]*' "$w/$name-A.jsonl" 2>/dev/null) \
            <(grep -o '"\(loss\|grad_norm\|validation_loss\)": [^,}]*' "$w/$name-B.jsonl" 2>/dev/null) &&
     [ -s "$w/$name-A.jsonl" ]; then
    echo "same: $name ($(grep -c '"loss"' "$w/$name-A.jsonl") lines)"
  else
    echo "DIFFERENT: $name (logs in $w/$name-[AB].*)"
    fails=$((fails + 1))
  fi
}
run plain --
run accumulate -- --global-batch-size 6
run recompute-full -- --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
run recompute-selective -- --recompute-granularity selective
for r in delayed tensorwise blockwise; do run fp8-$r -- --fp8-format hybrid --fp8-recipe $r; done
run docmask -- --reset-position-ids --reset-attention-mask --eod-mask-loss
run save -- --save "$w/save-ckpt" --save-interval 2
for z in 1 2 3; do run zero$z -- --nproc-per-node 2 --zero-stage $z --global-batch-size 4; done
run offload -- --nproc-per-node 2 --zero-stage 1 --global-batch-size 4 --offload-optimizer cpu
for shape in "--model llama3-8b --seq-length 4096 --micro-batch-size 1" \
             "--model qwen3-8b --seq-length 8192 --micro-batch-size 2 --recompute full" \
             "--model llama3.2-1b --seq-length 4096 --micro-batch-size 4 --fp8-format hybrid"; do
  # shellcheck disable=SC2086
  "$A" plan $shape --device cpu --buffers >"$w/plan-A.txt" 2>&1
  # shellcheck disable=SC2086
  "$B" plan $shape --device cpu --buffers >"$w/plan-B.txt" 2>&1
  if cmp -s "$w/plan-A.txt" "$w/plan-B.txt"; then echo "same: plan $shape"; else
    echo "DIFFERENT: plan $shape"; diff "$w/plan-A.txt" "$w/plan-B.txt" | head -5; fails=$((fails + 1)); fi
done
echo "same-losses: $fails different"
[ "$fails" = 0 ]

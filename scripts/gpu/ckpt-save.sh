#!/usr/bin/env bash
# ckpt-save.sh: checkpoint save time, bytes, throughput and peak host memory for one model, the
# pause --async-save leaves in the step, and an exact resume. Runs `ljperf train` on synthetic
# data (--mock-data) for ITERS iterations (default 3) with a save after each:
#   1. synchronous saves (all but the last without the HF export, --no-save-hf; the last with
#      it, as the run's last save);
#   2. the same with --async-save (the step pauses for the copy to pinned host memory only);
#   3. (ITERS >= 2) a run saved at iteration ITERS-1 and resumed, whose last loss must equal
#      run 1's bit for bit (all three with --deterministic-mode: without it cuDNN's attention
#      backward sums dQ in an order that varies from run to run, and at seq 4096 two runs of the
#      same step differ in the last bits).
# Each save prints "saved checkpoint at iteration N ...: X MiB in T s (R MiB/s), ..., peak host
# memory of the save M MiB on rank 0"; the summary collects those lines and the async pauses.
#
# Usage: bash scripts/gpu/ckpt-save.sh MODEL [ljperf train flags...]
#   DEVICE (default cuda), DIR (the --save root; default $TMPDIR/ljperf-ckpt-bench),
#   LJ (the binary; default build-gpu/dev/ljperf, else build/ljperf), MB (micro-batch, default 1),
#   SEQ (default 4096), NPROC (--nproc-per-node, default 1), ITERS (default 3), MODES (which of
#   "sync async resume" to run, default all), SAVE_INTERVAL
#   (the sync and async runs' --save-interval, default 1; ITERS keeps the last save in any case).
#   The resume compares with a run without saves (one state on disk at a time: the llama3-8b
#   resume fits a 128 GiB tmpfs).
# The state is 12 bytes per parameter (f32 master weights and two AdamW moments) plus the HF
# export (2 bytes per parameter in bf16): llama3.2-1b about 15 GB + 2.5 GB, llama3-8b about
# 96 GB + 16 GB per iteration. A run keeps one iteration (--keep-last 1), but a save is complete
# before the previous one is pruned, and each run's directory is removed before the next starts:
# DIR needs room for two states (ITERS >= 2) or one state and its export (ITERS=1; the 8b:
# 112 GB, more than the single-GPU machine's disk).
# On a GPU machine: source scripts/gpu/gpu-env.sh first (or let this script do it when it finds it).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
model=${1:?usage: scripts/gpu/ckpt-save.sh MODEL [ljperf train flags...]}
shift
OUT=${OUT:-$repo/out/ckpt-save}
mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cuda ] && [ -f scripts/gpu/gpu-env.sh ] && [ -z "${LJ_CUDNN_LIBRARY:-}" ]; then source scripts/gpu/gpu-env.sh; fi
LJ=${LJ:-$([ -x build-gpu/dev/ljperf ] && echo build-gpu/dev/ljperf || echo build/ljperf)}
DIR=${DIR:-${TMPDIR:-/tmp}/ljperf-ckpt-bench} # not under $OUT: its files would travel back
MODES=${MODES:-sync async resume}
want() { case " $MODES " in *" $1 "*) return 0 ;; esac; return 1; }
MB=${MB:-1} SEQ=${SEQ:-4096} NPROC=${NPROC:-1} ITERS=${ITERS:-3}
summary=$OUT/summary.txt
: >"$summary"
rm -f "$OUT"/*.jsonl # --log-json appends
say() { echo "$*" | tee -a "$summary"; }
say "ckpt-save: $model on $DEVICE x $NPROC, micro-batch $MB, seq $SEQ; commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee -a "$summary"
say "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) memory; --save on $(df -h "$(dirname "$DIR")" | awk 'NR == 2 {print $1 ", " $4 " free"}')"

timev=$([ -x /usr/bin/time ] && echo "/usr/bin/time -v")
run() { # run NAME [flags...]: ITERS iterations, a save after each
  local name=$1; shift
  $timev "$LJ" train --model "$model" --device "$DEVICE" --mock-data --seq-length "$SEQ" --micro-batch-size "$MB" \
    --global-batch-size $((MB * NPROC)) --nproc-per-node "$NPROC" --train-iters "$ITERS" --lr 1e-4 --seed 5 \
    --save-interval "${SAVE_INTERVAL:-1}" --keep-last 1 --no-save-hf --log-json "$OUT/$name.jsonl" --log-interval 1 "$@" \
    >"$OUT/$name.out" 2>"$OUT/$name.err"
  local rc=$?
  say "$name: exit $rc${timev:+, $(grep -m1 'Maximum resident set size' "$OUT/$name.err" | sed 's/^[[:space:]]*//') (the whole process)}"
  grep -E "saved checkpoint|async save of" "$OUT/$name.err" | sed 's/^/  /' | tee -a "$summary"
  return $rc
}
rm -rf "$DIR" "$DIR-async"
last=""
if want sync; then
run sync --save "$DIR" "$@" || { say "sync run failed: tail of $OUT/sync.err"; tail -5 "$OUT/sync.err" | tee -a "$summary"; exit 1; }
du -sh "$DIR"/iter_* 2>/dev/null | sed 's/^/  on disk: /' | tee -a "$summary"
last=$(python3 -c 'import json,sys; print([r["loss"] for r in map(json.loads, open(sys.argv[1])) if r.get("iteration") == int(sys.argv[2]) and "loss" in r][0])' "$OUT/sync.jsonl" "$ITERS")
rm -rf "$DIR"
fi
if want async; then
run async --save "$DIR-async" --async-save "$@" || say "async run failed: tail of $OUT/async.err"
rm -rf "$DIR-async"
fi
if [ "$ITERS" -ge 2 ] && want resume; then
  # the uninterrupted loss from a run that saves nothing, in deterministic mode as the resume
  "$LJ" train --model "$model" --device "$DEVICE" --mock-data --seq-length "$SEQ" --micro-batch-size "$MB" \
    --global-batch-size $((MB * NPROC)) --nproc-per-node "$NPROC" --train-iters "$ITERS" --lr 1e-4 --seed 5 \
    --log-json "$OUT/ref.jsonl" --log-interval 1 --deterministic-mode "$@" >"$OUT/ref.out" 2>"$OUT/ref.err" || say "reference run failed"
  last=$(python3 -c 'import json,sys; print([r["loss"] for r in map(json.loads, open(sys.argv[1])) if r.get("iteration") == int(sys.argv[2]) and "loss" in r][0])' "$OUT/ref.jsonl" "$ITERS" 2>/dev/null)
fi
if [ "$ITERS" -lt 2 ] || [ -z "$last" ] || ! want resume; then echo "logs in $OUT"; exit 0; fi
# the resume: saved at iteration ITERS-1 (without the HF export), then the last iteration from there
half=$((ITERS - 1))
"$LJ" train --model "$model" --device "$DEVICE" --mock-data --seq-length "$SEQ" --micro-batch-size "$MB" \
  --global-batch-size $((MB * NPROC)) --nproc-per-node "$NPROC" --train-iters "$ITERS" --exit-interval "$half" --lr 1e-4 \
  --seed 5 --save-interval "$half" --no-save-hf --save "$DIR" --deterministic-mode "$@" >"$OUT/half.out" 2>"$OUT/half.err" || say "first half failed"
"$LJ" train --model "$model" --device "$DEVICE" --mock-data --seq-length "$SEQ" --micro-batch-size "$MB" \
  --global-batch-size $((MB * NPROC)) --nproc-per-node "$NPROC" --train-iters "$ITERS" --lr 1e-4 --seed 5 --load "$DIR" \
  --log-json "$OUT/resume.jsonl" --deterministic-mode "$@" >"$OUT/resume.out" 2>"$OUT/resume.err" || say "resume failed"
grep -E "saved checkpoint" "$OUT/half.err" | sed 's/^/  first half: /' | tee -a "$summary"
resumed=$(python3 -c 'import json,sys; print([r["loss"] for r in map(json.loads, open(sys.argv[1])) if r.get("iteration") == int(sys.argv[2]) and "loss" in r][0])' "$OUT/resume.jsonl" "$ITERS" 2>/dev/null)
if [ -n "$resumed" ] && [ "$resumed" = "$last" ]; then say "resume from iteration $half: iteration $ITERS loss $resumed, bit-identical"
else say "resume from iteration $half: iteration $ITERS loss '${resumed:-none}' vs uninterrupted $last: DIFFERENT"; fi
rm -rf "$DIR"
echo "logs in $OUT"

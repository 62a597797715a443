#!/usr/bin/env bash
# test_progress_train.sh: `train` shows the progress of its long writes and reads on stderr (the
# memory plan's allocation, the weights' initialisation, the checkpoint's shard file written and
# read back, the Hugging Face export) and nowhere else: not in --log-json. Shown here at once with
# LJPERF_PROGRESS=always (base/progress.h; otherwise only past a first second, so no verdict here
# depends on how fast the machine is); LJPERF_PROGRESS=never shows none.
set -euo pipefail
: "${LJPERF:?}" "${LJ_TEST_TMP:?}"
tmp="$LJ_TEST_TMP/progress_train"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
train=(--model llama3-nano --device cpu --mock-data --seq-length 16 --micro-batch-size 1 --eval-iters 0 --quiet)

LJPERF_PROGRESS=always CI=true "$LJPERF" train "${train[@]}" --train-iters 1 --save "$tmp/ck" --log-json "$tmp/log.json" \
  >"$tmp/save.out" 2>"$tmp/save.err" || { cat "$tmp/save.err"; fail "train --save"; }
want() { # FILE PATTERN WHAT: a progress line and its closing line ("... in N s (M MB/s)")
  grep -qE -- "^$2: [0-9]+% \(" "$1" || { cat "$1"; fail "no progress line of $3"; }
  grep -qE -- "^$2: [0-9.]+ [KMG]?i?B in [0-9.]+ s \(" "$1" || { cat "$1"; fail "no closing line of $3"; }
}
want "$tmp/save.err" "allocating the memory plan \([0-9.]+ MiB\)" "the plan's allocation"
want "$tmp/save.err" "initialising 8M parameters" "the initialisation"
want "$tmp/save.err" "writing $tmp/ck/iter_0000001\.tmp\.[0-9]+/shard_00000_of_00001\.bin" "the shard file"
want "$tmp/save.err" "writing $tmp/ck/iter_0000001\.tmp\.[0-9]+/hf/model\.safetensors" "the HF export"
! grep -qE "allocating|initialising|writing|MB/s" "$tmp/log.json" "$tmp/save.out" || fail "progress outside stderr"
echo "ok: save: allocation, initialisation, shard file and export shown on stderr only"

LJPERF_PROGRESS=always CI=true "$LJPERF" train "${train[@]}" --train-iters 2 --load "$tmp/ck" >/dev/null 2>"$tmp/load.err" ||
  { cat "$tmp/load.err"; fail "train --load"; }
want "$tmp/load.err" "reading $tmp/ck/iter_0000001" "the checkpoint's read"
echo "ok: load: the shard files' read shown"

LJPERF_PROGRESS=never "$LJPERF" train "${train[@]}" --train-iters 2 --load "$tmp/ck" --save "$tmp/ck2" >/dev/null 2>"$tmp/never.err" ||
  { cat "$tmp/never.err"; fail "train with LJPERF_PROGRESS=never"; }
! grep -qE "MB/s\)|% \(" "$tmp/never.err" || { cat "$tmp/never.err"; fail "progress with LJPERF_PROGRESS=never"; }
echo "ok: LJPERF_PROGRESS=never: none"
echo "test_progress_train: passed"

#!/usr/bin/env bash
# test_train_resume.sh: `ljperf train` end to end on the CPU with real KJV tokens:
#   - a resumed run's losses equal the uninterrupted run's bit for bit (--exit-interval, --load);
#   - a resume onto another dataset is refused unless --override-data;
#   - --no-load-optim: the weights and the position, a fresh optimizer and LR schedule;
#   - SIGTERM mid-run saves a loadable checkpoint and exits 0;
#   - the HF export in each checkpoint loads back (ljperf generate: seeded sampling is
#     reproducible, top-k 1 and a tiny top-p equal greedy) and continued training from an HF
#     directory works;
#   - bad input (seq length above max_position_embeddings, a checkpoint of another shape, a
#     config without hidden_size) fails with the field named, also under valgrind.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/train_resume"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }

kjv="$LJ_CACHE/data/kjv.txt"
[ -s "$kjv" ] || fail "$kjv is missing: run scripts/setup.sh"
head -c 300000 "$kjv" > "$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" >/dev/null 2>&1 \
  || fail "prepare failed"

common=(--model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2
        --global-batch-size 4 --train-iters 6 --lr 3e-3 --lr-warmup-iters 2 --seed 7 --quiet --eval-iters 2)

# 1. uninterrupted run
"$LJPERF" train "${common[@]}" --log-json "$tmp/full.jsonl" >/dev/null 2>"$tmp/full.err" \
  || { cat "$tmp/full.err"; fail "uninterrupted run"; }
# 2. the same run stopped after iteration 3, then resumed
"$LJPERF" train "${common[@]}" --save "$tmp/ckpt" --exit-interval 3 --log-json "$tmp/part.jsonl" >/dev/null 2>"$tmp/part.err" \
  || { cat "$tmp/part.err"; fail "first half"; }
[ "$(cat "$tmp/ckpt/latest_checkpointed_iteration.txt")" = 3 ] || fail "latest_checkpointed_iteration.txt is not 3"
"$LJPERF" train "${common[@]}" --save "$tmp/ckpt" --load "$tmp/ckpt" --log-json "$tmp/part.jsonl" >/dev/null 2>"$tmp/resume.err" \
  || { cat "$tmp/resume.err"; fail "resume"; }
grep -q "resumed from .*iter_0000003 at iteration 3" "$tmp/resume.err" || fail "resume did not say where it resumed"
losses() { grep '"loss"' "$1" | sed -E 's/.*"iteration": ([0-9]+), "loss": ([^,]+),.*/\1 \2/'; }
diff <(losses "$tmp/full.jsonl") <(losses "$tmp/part.jsonl") || fail "resumed losses differ from the uninterrupted run"
[ "$(losses "$tmp/full.jsonl" | wc -l)" = 6 ] || fail "expected 6 logged iterations"
echo "resume: 6 losses equal bit for bit"

# 1b. a resume onto another dataset is refused (the checkpoint records each dataset's fingerprint)
# unless --override-data; the same data under another path is the same data
head -c 200000 "$kjv" | tail -c 100000 > "$tmp/other.txt"
"$LJPERF" prepare --input "$tmp/other.txt" --split-on blank-line --output-prefix "$tmp/other" >/dev/null 2>&1 \
  || fail "prepare other"
other=("${common[@]/$tmp\/kjv/$tmp/other}")
if "$LJPERF" train "${other[@]}" --load "$tmp/ckpt/iter_0000003" >/dev/null 2>"$tmp/other.err"; then
  fail "a resume onto another dataset was accepted"
fi
grep -q "iter_0000003/state.json: the run resumes on other data: dataset 0 was .*kjv (.*), --data-path gives .*other" \
  "$tmp/other.err" || { cat "$tmp/other.err"; fail "the other dataset is not named"; }
"$LJPERF" train "${other[@]}" --load "$tmp/ckpt/iter_0000003" --override-data >/dev/null 2>"$tmp/other.err" \
  || { cat "$tmp/other.err"; fail "--override-data"; }
grep -q "warning: --override-data: .*the run resumes on other data" "$tmp/other.err" || fail "--override-data said nothing"
mkdir -p "$tmp/moved" && cp "$tmp/kjv.bin" "$tmp/kjv.idx" "$tmp/moved/"
moved=("${common[@]/$tmp\/kjv/$tmp/moved/kjv}")
"$LJPERF" train "${moved[@]}" --load "$tmp/ckpt/iter_0000003" >/dev/null 2>"$tmp/moved.err" \
  || { cat "$tmp/moved.err"; fail "the same data under another path (without its sidecar) was refused"; }
echo "another dataset: refused unless --override-data"

# 2b. --no-load-optim (Megatron-LM's): from the iteration-3 checkpoint, the weights and the position,
# not the moments; the optimizer and the LR schedule start again. Iteration 4 then has the
# uninterrupted run's weights and data, so the same gradient norm, at the learning rate of
# iteration 1 (warm-up again); iteration 5's loss differs. A save in that run keeps the restart
# ("optimizer_start_iteration"), so resuming it is exact again.
rm -rf "$tmp/ckpt_nlo"
"$LJPERF" train "${common[@]}" --load "$tmp/ckpt/iter_0000003" --no-load-optim --save "$tmp/ckpt_nlo" --save-interval 4 \
  --log-json "$tmp/nlo.jsonl" >/dev/null 2>"$tmp/nlo.err" || { cat "$tmp/nlo.err"; fail "--no-load-optim run"; }
grep -q -- "--no-load-optim: the weights and the position (iteration 3)" "$tmp/nlo.err" || fail "--no-load-optim did not say what it loaded"
field() { grep "\"iteration\": $2," "$1" | grep '"loss"' | sed -E "s/.*\"$3\": ([^,}]+).*/\1/"; }
[ "$(grep '"loss"' "$tmp/nlo.jsonl" | head -1 | sed -E 's/.*"iteration": ([0-9]+),.*/\1/')" = 4 ] || fail "--no-load-optim: the first iteration is not 4"
[ "$(field "$tmp/nlo.jsonl" 4 grad_norm)" = "$(field "$tmp/full.jsonl" 4 grad_norm)" ] || fail "--no-load-optim: iteration 4's gradient norm differs from the uninterrupted run's (other weights or data?)"
[ "$(field "$tmp/nlo.jsonl" 4 lr)" = "$(field "$tmp/full.jsonl" 1 lr)" ] || fail "--no-load-optim: iteration 4's lr is not the schedule's first"
[ "$(field "$tmp/nlo.jsonl" 4 consumed_samples)" = 16 ] || fail "--no-load-optim: consumed samples do not continue"
[ "$(field "$tmp/nlo.jsonl" 5 loss)" != "$(field "$tmp/full.jsonl" 5 loss)" ] || fail "--no-load-optim: iteration 5 equals the exact resume (moments loaded?)"
"$LJPERF" train "${common[@]}" --load "$tmp/ckpt_nlo/iter_0000004" --log-json "$tmp/nlo2.jsonl" >/dev/null 2>"$tmp/nlo2.err" \
  || { cat "$tmp/nlo2.err"; fail "resume of the --no-load-optim run"; }
[ "$(field "$tmp/nlo2.jsonl" 5 loss)" = "$(field "$tmp/nlo.jsonl" 5 loss)" ] && [ "$(field "$tmp/nlo2.jsonl" 6 lr)" = "$(field "$tmp/nlo.jsonl" 6 lr)" ] \
  || fail "resuming the --no-load-optim run is not exact (the restart was not saved)"
echo "--no-load-optim: position kept, moments and schedule restarted, and saved"

# 3. SIGTERM mid-run: a loadable checkpoint, exit status 0
"$LJPERF" train "${common[@]}" --train-iters 100000 --save "$tmp/sig" --log-json "$tmp/sig.jsonl" >/dev/null 2>"$tmp/sig.err" &
pid=$!
for _ in $(seq 1 600); do
  [ -s "$tmp/sig.jsonl" ] && break
  sleep 0.1
done
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
[ "$status" = 0 ] || { cat "$tmp/sig.err"; fail "SIGTERM: exit status $status"; }
grep -q "received SIGTERM" "$tmp/sig.err" || fail "SIGTERM not reported"
it=$(cat "$tmp/sig/latest_checkpointed_iteration.txt")
[ "$it" -ge 1 ] || fail "no checkpoint after SIGTERM"
"$LJPERF" train "${common[@]}" --train-iters $((it + 1)) --load "$tmp/sig" >/dev/null 2>"$tmp/sig2.err" \
  || { cat "$tmp/sig2.err"; fail "the SIGTERM checkpoint does not load"; }
echo "SIGTERM: checkpoint at iteration $it loads"

# 4. the HF export: generate from it, and continue training from an HF directory
hf="$tmp/ckpt/iter_0000006/hf"
[ -f "$hf/config.json" ] && [ -f "$hf/model.safetensors" ] || fail "no HF export in $hf"
"$LJPERF" generate --load "$tmp/ckpt" --prompt "And God said" --max-new-tokens 8 --device cpu >"$tmp/gen.out" 2>"$tmp/gen.err" \
  || { cat "$tmp/gen.err"; fail "generate"; }
grep -q "^And God said" "$tmp/gen.out" || fail "generate did not echo the prompt"
gen() { "$LJPERF" generate --load "$tmp/ckpt" --prompt "And God said" --max-new-tokens 12 --device cpu "$@" 2>/dev/null; }
[ "$(gen --seed 3)" = "$(gen --seed 3)" ] || fail "generate is not deterministic for a seed"
[ "$(gen --temperature 0)" = "$(gen --top-k 1 --seed 9)" ] || fail "top-k 1 differs from greedy"
[ "$(gen --temperature 0)" = "$(gen --top-p 0.000001 --seed 5)" ] || fail "a tiny top-p differs from greedy"
"$LJPERF" train "${common[@]}" --model "$hf" --load "$hf" --train-iters 1 >/dev/null 2>"$tmp/hf.err" \
  || { cat "$tmp/hf.err"; fail "training from an HF directory"; }
grep -q "loaded Hugging Face weights" "$tmp/hf.err" || fail "HF load not reported"
echo "HF export: generate and continued training work"

# 5. bad input, under valgrind when it is there (not under an emulator: valgrind would check
# the emulator, not ljperf)
vg=()
[ -z "${LJ_TEST_EMULATOR:-}" ] && command -v valgrind >/dev/null 2>&1 && vg=(valgrind -q --error-exitcode=99 --leak-check=no --suppressions="$LJ_SOURCE_DIR/tests/data/valgrind.supp")
expect_error() { # expect_error PATTERN CMD...: a non-zero exit (not valgrind's 99) and PATTERN in stderr
  local pattern=$1; shift
  local st=0
  "$@" >/dev/null 2>"$tmp/bad.err" || st=$?
  [ "$st" != 0 ] && [ "$st" != 99 ] || { cat "$tmp/bad.err"; fail "expected an error for: $*"; }
  grep -q -- "$pattern" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "message lacks '$pattern'"; }
}
expect_error "max_position_embeddings" "${vg[@]}" "$LJPERF" train "${common[@]}" --seq-length 9000
expect_error "model.hidden_size" "${vg[@]}" "$LJPERF" train "${common[@]}" --model llama3-tiny --load "$tmp/ckpt"
printf '{"vocab_size": 128256, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}\n' > "$tmp/bad_config.json"
expect_error "hidden_size" "${vg[@]}" "$LJPERF" train "${common[@]}" --model "$tmp/bad_config.json"
expect_error "recompute-granularity" "$LJPERF" train "${common[@]}" --recompute-granularity sometimes
echo "bad input: clear errors"
echo "1 passed, 0 failed"

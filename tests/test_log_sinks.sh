#!/usr/bin/env bash
# test_log_sinks.sh: a training run whose log cannot be written (a full disk, a file-size limit)
# warns once per sink (the --log-json lines, the TensorBoard event file, the console), trains on
# to the end, keeps only complete JSON lines, and exits with status 1 naming every failed sink:
# the log is incomplete. The full disk is /dev/full, a file-size limit (ulimit -f, with SIGXFSZ
# ignored: the write fails with EFBIG) and, where this user may mount one, a 64 KiB tmpfs.
set -euo pipefail
: "${LJPERF:?}" "${LJ_TEST_TMP:?}"
tmp="$LJ_TEST_TMP/log_sinks"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
run=(--model llama3-nano --device cpu --mock-data --seq-length 16 --micro-batch-size 1 --eval-iters 0
     --log-interval 1)

# expect_incomplete NAME WARNING: the last run exited 1, warned once with WARNING, finished training
expect_incomplete() {
  [ "$st" = 1 ] || { cat "$tmp/err"; fail "$1: exit status $st, not 1"; }
  [ "$(grep -c -- "^warning: .*$2" "$tmp/err")" = 1 ] || { cat "$tmp/err"; fail "$1: not one warning '$2'"; }
  grep -q "the run finished, but its log is incomplete: .*$2" "$tmp/err" || { cat "$tmp/err"; fail "$1: no final message"; }
}
json_complete() { # every line of $1 is a whole JSON object
  python3 -c 'import json, sys
data = open(sys.argv[1]).read()
assert data == "" or data.endswith("\n"), "a cut line at the end"
for line in data.splitlines(): json.loads(line)' "$1" || fail "$1: not whole JSON lines"
}

# a run that writes everything: status 0, no warning
st=0; "$LJPERF" train "${run[@]}" --train-iters 3 --log-json "$tmp/ok.jsonl" --tensorboard-dir "$tmp/tb-ok" \
  >"$tmp/out" 2>"$tmp/err" || st=$?
[ "$st" = 0 ] && ! grep -q warning "$tmp/err" || { cat "$tmp/err"; fail "a healthy run: status $st"; }
[ "$(wc -l < "$tmp/ok.jsonl")" = 4 ] || fail "a healthy run: not 4 JSON lines (the start record and 3 iterations)"

# --log-json on a full disk: its first line, the start record, fails before iteration 1
st=0; "$LJPERF" train "${run[@]}" --train-iters 4 --log-json /dev/full >"$tmp/out" 2>"$tmp/err" || st=$?
expect_incomplete "--log-json /dev/full" "--log-json /dev/full: write failed at iteration 0 (No space left on device)"
grep -q "^iteration      4/     4" "$tmp/out" || fail "--log-json /dev/full: training did not go on to the end"

# the console on a full disk
st=0; "$LJPERF" train "${run[@]}" --train-iters 4 --log-json "$tmp/c.jsonl" >/dev/full 2>"$tmp/err" || st=$?
expect_incomplete "stdout on /dev/full" "standard output: write failed at iteration 1 (No space left on device)"
[ "$(wc -l < "$tmp/c.jsonl")" = 5 ] || fail "stdout on /dev/full: the JSON lines stopped too"

# a 1 KiB file-size limit: the JSON lines and the event file fill it mid-record
rm -rf "$tmp/tb"
# (the messages go through a pipe: a file of them would be under the limit too)
set +e
(trap '' XFSZ; ulimit -f 1; exec "$LJPERF" train "${run[@]}" --train-iters 12 --quiet --log-json "$tmp/f.jsonl" \
  --tensorboard-dir "$tmp/tb") 2>&1 >/dev/null | cat >"$tmp/err"
st=${PIPESTATUS[0]}
set -e
expect_incomplete "ulimit -f, --log-json" "--log-json $tmp/f.jsonl: write failed at iteration [0-9]* (File too large)"
[ "$(grep -c "^warning: .*TensorBoard event file .*: File too large; no more TensorBoard events" "$tmp/err")" = 1 ] \
  || { cat "$tmp/err"; fail "ulimit -f: not one TensorBoard warning"; }
grep -q "incomplete: .*TensorBoard event file" "$tmp/err" || { cat "$tmp/err"; fail "ulimit -f: the final message lacks the event file"; }
json_complete "$tmp/f.jsonl"
[ "$(wc -l < "$tmp/f.jsonl")" -ge 1 ] || fail "ulimit -f: no JSON line kept"
echo "log sinks: /dev/full (JSON, console) and a file-size limit (JSON, TensorBoard): one warning each, exit 1"

# a full tmpfs, where this user may mount one (root outside a restricted sandbox)
mnt="$tmp/mnt"
mkdir -p "$mnt"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=64k tmpfs "$mnt" 2>/dev/null; then
  trap 'umount "$mnt" 2>/dev/null || true' EXIT
  head -c 60000 /dev/zero > "$mnt/filler" 2>/dev/null || true
  st=0; "$LJPERF" train "${run[@]}" --train-iters 24 --quiet --log-json "$mnt/t.jsonl" --tensorboard-dir "$mnt/tb" \
    >"$tmp/out" 2>"$tmp/err" || st=$?
  expect_incomplete "tmpfs" "--log-json $mnt/t.jsonl: write failed at iteration [0-9]* (No space left on device)"
  json_complete "$mnt/t.jsonl"
  umount "$mnt"
  trap - EXIT
  echo "log sinks: a full 64 KiB tmpfs: one warning each, exit 1, whole JSON lines"
else
  echo "log sinks: no tmpfs mount here (not root, or not allowed): /dev/full and the file-size limit only"
fi
echo "test_log_sinks: passed"

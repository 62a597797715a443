#!/usr/bin/env bash
# test_report.sh: `ljperf report`. (1) A real (small) run directory: a training log with its start
# record and validation, TensorBoard events, `plan --json`, `benchmark --json` and `benchmark
# --ablation --json`: the report recognises each, draws five charts and the run's identity (model,
# device, commit, command); the run's own event file read as a second run draws the same losses.
# A cut event file draws what it holds with a warning. (2) The committed run of
# tests/data/report/run (fixed numbers, the log from before the start record: nothing below
# depends on the machine's speed or load): the page is self-contained (no http(s) reference, no
# external file), holds the five charts, and renders in headless Chromium: its own check finds
# every chart drawn and no script error, the console has no error, and the screenshot has coloured
# pixels inside each chart (counted by tests/png_colors.py). (3) The odd inputs of
# tests/data/report/edge (no tokens/s, negative iterations, one point, a constant, infinite and
# huge values) each give a page within seconds and bounded memory, with finite coordinates. (4)
# Runs side by side (tests/data/report/compare: bf16 and a resumed FP8 run of ljperf, a
# Megatron-LM log excerpt in training_log's format; tests/data/report/tb: an event file ljperf
# wrote; a Megatron log of the older form and ljperf's console written here): one line per run in
# each chart with the points each log holds (counted as path vertices), the legend and the runs'
# identities. (5) Bad input (a missing directory, nothing to draw, a bad log line, a file of the
# wrong kind, an unwritable --output, an empty log, a garbage file, a cut or corrupt event file,
# too many labels or runs) gets one message naming the file or flag.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/report"
rm -rf "$tmp" && mkdir -p "$tmp/live" "$tmp/run"
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3
charts=(loss speed lr memory ablation)

# vertices HTML RUN SERIES: the points drawn of one series (its <path>'s M and L commands), 0 if none
vertices() {
  local d
  d=$(grep -o "<path class=\"series\" data-run=\"$2\" data-series=\"$3\"[^>]*" "$1" | sed -E 's/.* d="([^"]*)".*/\1/' | head -1)
  if [ -n "$d" ]; then grep -o '[ML]' <<<"$d" | wc -l; else echo 0; fi
}
# expect HTML RUN:SERIES:N ...: each series has N vertices
expect() {
  local html=$1; shift
  for spec in "$@"; do
    IFS=: read -r r s n <<<"$spec"
    got=$(vertices "$html" "$r" "$s")
    [ "$got" = "$n" ] || fail "$(basename "$html"): run $r's $s has $got points, expected $n"
  done
}
legend_has() { grep -qF "class=\"legend\">$2</text>" "$1" || fail "$(basename "$1"): no legend entry '$2'"; }

# (1) a real run: the writers' JSON is what the reader recognises
live="$tmp/live"
head -c 200000 "$LJ_CACHE/data/kjv.txt" > "$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" \
  --tokenizer "$LJ_CACHE/tokenizer/llama3/tokenizer.json" >/dev/null 2>&1 || fail "prepare"
shape=(--model llama3-nano --device cpu --seq-length 32 --micro-batch-size 2)
"$LJPERF" train "${shape[@]}" --data-path "$tmp/kjv" --train-iters 12 --eval-interval 4 --eval-iters 2 --lr 3e-3 \
  --log-interval 4 --quiet --log-json "$live/train.jsonl" --tensorboard-dir "$live/tb" 2>"$tmp/train.err" \
  || { cat "$tmp/train.err"; fail "train"; }
"$LJPERF" plan "${shape[@]}" --json "$live/plan.json" >/dev/null 2>&1 || fail "plan"
"$LJPERF" benchmark "${shape[@]}" --train-iters 3 --warmup-iters 1 --no-progress --json "$live/benchmark.json" \
  >/dev/null 2>"$tmp/bench.err" || { cat "$tmp/bench.err"; fail "benchmark"; }
"$LJPERF" benchmark "${shape[@]}" --train-iters 2 --warmup-iters 1 --no-progress --ablation --json - \
  >"$live/ablation.json" 2>"$tmp/abl.err" || { cat "$tmp/abl.err"; fail "ablation"; } # standard output: the JSON alone
grep -q "^row " "$tmp/abl.err" || fail "ablation --json -: the table is not on stderr"
[ ! -e ./- ] || fail "ablation --json - wrote a file named -"
"$LJPERF" report "$live" >"$tmp/live.out" 2>"$tmp/live.err" || { cat "$tmp/live.err"; fail "report of the real run"; }
grep -q "5 of 5 charts" "$tmp/live.out" || fail "the real run: not 5 charts: $(cat "$tmp/live.out")"
for kind in "training log" plan benchmark ablation; do
  grep -q ": $kind\$" "$tmp/live.err" || fail "the real run's $kind was not recognised: $(cat "$tmp/live.err")"
done
[ "$(grep -c '"validation_loss"' "$live/train.jsonl")" -gt 0 ] || fail "the real run's log has no validation loss"
# the start record, and the identity the page shows
start=$(head -1 "$live/train.jsonl")
commit=$("$LJPERF" --version | sed -E 's/.*commit ([^)]*)\).*/\1/')
for want in '"start":{"program":"ljperf"' '"model":"llama3-nano"' '"devices":1' "\"commit\":\"$commit\"" \
            '"command":"ljperf train --model llama3-nano --device cpu --seq-length 32'; do
  grep -qF -- "$want" <<<"$start" || fail "the start record lacks $want: $start"
done
html="$live/report.html"
for want in '<td>llama3-nano</td>' "<code>$commit</code>" '1 &times; ' '<code>ljperf train --model llama3-nano'; do
  grep -qF -- "$want" "$html" || fail "the page lacks the run's identity: $want"
done
expect "$html" 0:loss:12 0:validation:3 0:lr:12 0:tokens_per_s:12
echo "report: the real run's four outputs recognised, its start record drawn (commit $commit)"

# the run's TensorBoard events (ljperf's writer) beside its JSON log: the same losses
"$LJPERF" report "$live/tb" "$live/train.jsonl" --output "$tmp/tb.html" >"$tmp/tb.out" 2>"$tmp/tb.err" \
  || { cat "$tmp/tb.err"; fail "report of the event files"; }
grep -q "(2 runs, " "$tmp/tb.out" || fail "events and log: not 2 runs: $(cat "$tmp/tb.out")"
grep -q "tb: TensorBoard events (1 file)" "$tmp/tb.err" || fail "the event directory was not read: $(cat "$tmp/tb.err")"
# TensorBoard holds tokens-per-sec at the log lines only: iterations 1, 4, 8, 12
expect "$tmp/tb.html" 0:loss:12 0:validation:3 0:lr:12 0:tokens_per_s:4 1:loss:12 1:validation:3 1:lr:12
$py - "$tmp/tb.html" <<'EOF' || fail "the event file's losses are not the log's"
import re, sys
html = open(sys.argv[1]).read()
def pts(run, name):
    d = re.search(r'data-run="%d" data-series="%s"[^>]* d="([^"]*)"' % (run, name), html).group(1)
    return [tuple(map(float, p.split())) for p in re.split(r"[ML]", d) if p.strip()]
for name in ("loss", "validation", "lr"):
    a, b = pts(0, name), pts(1, name)  # float32 in the events, the double in --log-json
    assert len(a) == len(b) and all(abs(x - u) <= 0.2 and abs(y - v) <= 0.2 for (x, y), (u, v) in zip(a, b)), (name, a, b)
EOF
# an event file cut inside its last record: a warning, and what it holds
ev=$(ls "$live"/tb/events.out.tfevents.*)
mkdir -p "$tmp/cut" && head -c $(( $(wc -c < "$ev") - 7 )) "$ev" > "$tmp/cut/events.out.tfevents.1.cut.1.0"
"$LJPERF" report "$tmp/cut" --output "$tmp/cut.html" >/dev/null 2>"$tmp/cut.err" || { cat "$tmp/cut.err"; fail "a cut event file"; }
grep -q "events.out.tfevents.1.cut.1.0: the last record (at byte [0-9]*) is cut short; drawing the [0-9]* whole records" \
  "$tmp/cut.err" || { cat "$tmp/cut.err"; fail "a cut event file: no warning naming it"; }
expect "$tmp/cut.html" 0:loss:12
echo "report: ljperf's own event file drawn as a run, the same losses as its log; a cut one drawn with a warning"

# (2) the committed run
run="$tmp/run"
cp "$LJ_SOURCE_DIR"/tests/data/report/run/* "$run/"
"$LJPERF" report "$run" >"$tmp/report.out" 2>"$tmp/report.err" || { cat "$tmp/report.err"; fail "report"; }
html="$run/report.html"
grep -q "5 of 5 charts" "$tmp/report.out" || fail "not 5 charts: $(cat "$tmp/report.out")"
for kind in "training log" plan benchmark ablation; do
  grep -q ": $kind\$" "$tmp/report.err" || fail "the $kind was not recognised: $(cat "$tmp/report.err")"
done
[ "$(grep -o '<svg class="chart"' "$html" | wc -l)" = 5 ] || fail "expected 5 chart SVGs"
for id in "${charts[@]}"; do grep -q "id=\"$id\"" "$html" || fail "no $id chart"; done
expect "$html" 0:loss:12 0:validation:3 0:lr:12 0:tokens_per_s:12 0:mfu:12 # a log from before the start record
grep -q "measured peak" "$html" || fail "the memory chart lacks the measured peak"
grep -q "predicted peak" "$html" || fail "the memory chart lacks the predicted peak"
grep -qE '(\+|-)[0-9.]+%\)</text>' "$html" || fail "the ablation bars lack their gains"
if grep -qiE '(src|href)="(https?:)?//' "$html"; then fail "the page references the network"; fi
if grep -qiE '<(link|img|iframe)|src="' "$html"; then fail "the page loads another file"; fi
echo "report: 5 charts, self-contained ($(wc -c < "$html") bytes)"

# headless Chromium: the page's own check, the console, a screenshot
chrome=$(command -v chromium || command -v chromium-browser || true)
[ -n "$chrome" ] || fail "chromium is not installed: run scripts/setup.sh"
browse() { # extra flags...
  local ud; ud=$(mktemp -d "$tmp/chrome.XXXXXX")
  timeout 90 "$chrome" --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
    --disable-sync --no-first-run --user-data-dir="$ud" --window-size=1240,1800 --hide-scrollbars "$@" "file://$html"
}
browse --dump-dom --enable-logging=stderr --v=0 >"$tmp/dom.html" 2>"$tmp/chrome.err" || { tail "$tmp/chrome.err"; fail "chromium --dump-dom"; }
body=$(grep -o '<body[^>]*>' "$tmp/dom.html")
echo "$body" | grep -q 'data-charts-drawn="5/5"' || fail "not every chart drew in Chromium: $body"
echo "$body" | grep -q 'data-errors="0"' || fail "script errors in Chromium: $body"
if grep -E 'CONSOLE' "$tmp/chrome.err" | grep -qiE 'error|uncaught'; then grep CONSOLE "$tmp/chrome.err"; fail "console errors"; fi
rects=$(echo "$body" | sed -E 's/.*data-chart-rects="([^"]*)".*/\1/')
browse --screenshot="$tmp/report.png" >/dev/null 2>&1 || fail "chromium --screenshot"
[ -s "$tmp/report.png" ] || fail "no screenshot"
counts=$($py "$LJ_SOURCE_DIR/tests/png_colors.py" "$tmp/report.png" "$rects") || fail "png_colors"
for c in $counts; do [ "$c" -gt 300 ] || fail "a chart has only $c coloured pixels in the screenshot (all: $counts)"; done
echo "chromium: 5/5 charts drawn, no errors; coloured pixels per chart: $counts"

# (3) odd inputs: a page within seconds and 2 GiB, five charts, finite coordinates
edge="$LJ_SOURCE_DIR/tests/data/report/edge"
for f in "$edge"/*.jsonl "$edge"/plan_odd.json "$edge"/ablation_odd.json; do
  name=$(basename "$f")
  args=(--log-json "$f")
  case $name in
    plan_odd.json) args=(--plan "$f" --benchmark "$edge/benchmark_odd.json") ;;
    ablation_odd.json) args=(--ablation "$f") ;;
  esac
  st=0
  (ulimit -v 2097152; exec timeout 20 "$LJPERF" report "${args[@]}" --output "$tmp/edge.html") >/dev/null 2>"$tmp/edge.err" || st=$?
  [ "$st" = 0 ] || { cat "$tmp/edge.err"; fail "$name: report exited with $st (124: it hung)"; }
  [ "$(grep -o '<svg class="chart"' "$tmp/edge.html" | wc -l)" = 5 ] || fail "$name: expected 5 chart SVGs"
  if grep -qiE '(x|y|x1|x2|y1|y2|cx|cy|width|height)="[^"]*(nan|inf)|d="[^"]*(nan|inf)' "$tmp/edge.html"; then
    grep -oiE '[a-z0-9]+="[^"]*(nan|inf)[^"]*"' "$tmp/edge.html" | head -3
    fail "$name: a coordinate is not finite"
  fi
  [ "$(wc -c < "$tmp/edge.html")" -lt 200000 ] || fail "$name: a page of $(wc -c < "$tmp/edge.html") bytes"
done
grep -q "no finite value of tokens/s" <("$LJPERF" report --log-json "$edge/no_speed.jsonl" --output "$tmp/edge.html" \
  >/dev/null 2>&1 && cat "$tmp/edge.html") || fail "no_speed.jsonl: the throughput chart does not say why it is empty"
echo "odd inputs: $(ls "$edge" | wc -l) files, each a page of finite charts"

# (4) runs side by side: ljperf bf16, ljperf FP8 (resumed at 10: its iterations 11 and 12 logged twice), Megatron-LM
cmp="$LJ_SOURCE_DIR/tests/data/report/compare"
"$LJPERF" report "$cmp/bf16.jsonl" "$cmp/fp8.jsonl" "$cmp/megatron.log" --output "$tmp/compare.html" \
  >"$tmp/compare.out" 2>"$tmp/compare.err" || { cat "$tmp/compare.err"; fail "report of three runs"; }
grep -q "(3 runs, 3 of 5 charts" "$tmp/compare.out" || fail "three runs: $(cat "$tmp/compare.out")"
grep -q "megatron.log: Megatron-LM log" "$tmp/compare.err" || fail "the Megatron-LM log was not recognised"
html="$tmp/compare.html"
# Megatron's log: every 2nd iteration of 20, validation at 10 and 20 (not the test set's), tokens/s from the arguments
expect "$html" 0:loss:20 0:validation:2 0:lr:20 0:tokens_per_s:20 1:loss:20 1:validation:2 1:lr:20 1:tokens_per_s:20 \
  2:loss:10 2:validation:2 2:lr:10 2:tokens_per_s:10
[ "$(vertices "$html" 0 mfu)" = 0 ] || fail "several runs: an MFU line was drawn"
for label in "ljperf llama3.2-1b bf16" "ljperf llama3.2-1b fp8 hybrid delayed" "Megatron-LM 16 layers, hidden 2048 bf16 8 devices"; do
  legend_has "$html" "$label"
  [ "$(grep -cF "class=\"legend\">$label</text>" "$html")" = 3 ] || fail "'$label' is not in the legend of all 3 charts"
  grep -qF "<b class=\"run-label\">$label</b>" "$html" || fail "the runs table lacks '$label'"
done
for want in '1 &times; NVIDIA H200' '8 devices' '2026-12-01 08:02:00.002000' '<code>6e785f0ba488</code>' \
            '(2 starts: resumed)' '<td>fp8 hybrid delayed</td>' '--fp8-format hybrid --fp8-recipe delayed --log-json fp8.jsonl'; do
  grep -qF -- "$want" "$html" || fail "the runs table lacks '$want'"
done
grep -q "<title>ljperf runs: ljperf llama3.2-1b bf16 vs ljperf llama3.2-1b fp8 hybrid delayed vs Megatron-LM" "$html" \
  || fail "the title does not name the runs"

# ljperf's event file beside Megatron's log, named by --label; an older Megatron log (no time, no arguments)
cat > "$tmp/old-megatron.log" <<'EOF'
> building GPT model ...
 iteration        1/       3 | consumed samples:          128 | elapsed time per iteration (ms): 1234.5 | learning rate: 3.0E-04 | global batch size:   128 | lm loss: 1.052E+01 | loss scale: 1.0 | grad norm: 5.123 | number of skipped iterations:   0 | number of nan iterations:   0 |
 iteration        2/       3 | consumed samples:          256 | elapsed time per iteration (ms): 1200.1 | learning rate: 2.0E-04 | global batch size:   128 | lm loss: 1.011E+01 | loss scale: 1.0 | grad norm: 4.871 | number of skipped iterations:   0 | number of nan iterations:   0 |
------------------------------------------------------------------------------------------
 validation loss at iteration 2 | lm loss value: 1.002E+01 | lm loss PPL: 2.245E+04 |
------------------------------------------------------------------------------------------
 iteration        3/       3 | consumed samples:          384 | elapsed time per iteration (ms): 1199.0 | learning rate: 1.0E-04 | global batch size:   128 | lm loss: 9.870E+00 | loss scale: 1.0 | grad norm: 4.002 | number of skipped iterations:   0 | number of nan iterations:   0 |
EOF
"$LJPERF" report "$LJ_SOURCE_DIR/tests/data/report/tb" "$tmp/old-megatron.log" --label "ljperf (TensorBoard)" \
  --label "Megatron-LM (old log)" --output "$tmp/labels.html" >/dev/null 2>"$tmp/labels.err" \
  || { cat "$tmp/labels.err"; fail "report with --label"; }
expect "$tmp/labels.html" 0:loss:3 0:validation:1 0:lr:3 0:tokens_per_s:3 1:loss:3 1:validation:1 1:lr:3 1:tokens_per_s:0
legend_has "$tmp/labels.html" "ljperf (TensorBoard)"
legend_has "$tmp/labels.html" "Megatron-LM (old log)"
grep -qF "no tokens/s in: Megatron-LM (old log)" "$tmp/labels.html" || fail "the throughput chart does not name the run without tokens/s"
# ljperf's own console lines are of Megatron's form
"$LJPERF" train --model llama3-nano --device cpu --mock-data --seq-length 16 --micro-batch-size 1 --train-iters 3 \
  --log-interval 1 --eval-iters 0 > "$tmp/console.log" 2>/dev/null || fail "train for a console log"
"$LJPERF" report "$tmp/console.log" --output "$tmp/console.html" >/dev/null 2>&1 || fail "report of ljperf's console log"
expect "$tmp/console.html" 0:loss:3 0:lr:3 0:tokens_per_s:3
grep -qF "<td>ljperf (console log)</td>" "$tmp/console.html" || fail "ljperf's console log is not named as such"
echo "runs side by side: bf16, FP8 (resumed) and Megatron-LM; ljperf's events, an older Megatron log and ljperf's console"

# (5) bad input
bad() { local want=$1; shift
  if "$LJPERF" report "$@" >/dev/null 2>"$tmp/bad.err"; then fail "accepted: $*"; fi
  grep -q -- "$want" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "message lacks '$want': $*"; }
}
bad "$tmp/none: no such run directory or training log" "$tmp/none"
mkdir -p "$tmp/empty" && echo '{"something": 1}' > "$tmp/empty/other.json"
bad "nothing to draw" "$tmp/empty"
mkdir -p "$tmp/broken" && { head -3 "$run/train.jsonl"; echo '{"iteration": 4, "loss": '; } > "$tmp/broken/train.jsonl"
bad "broken/train.jsonl:4: not a JSON object" "$tmp/broken"
bad "--plan $run/train.jsonl: not a plan (training log)" --plan "$run/train.jsonl"
bad "--output: $tmp/none/x.html: cannot create it" "$run" --output "$tmp/none/x.html"
bad "unknown flag '--colour'" "$run" --colour
: > "$tmp/empty.jsonl"
bad "$tmp/empty.jsonl: the file is empty: expected a training log" "$tmp/empty.jsonl"
printf '\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR garbage' > "$tmp/garbage.bin"
bad "$tmp/garbage.bin: not a file ljperf report reads: expected a training log" "$tmp/garbage.bin"
printf 'some notes\nno iteration lines here\n' > "$tmp/notes.txt"
bad "$tmp/notes.txt: not a file ljperf report reads" "$tmp/notes.txt"
head -c 10 "$ev" > "$tmp/events.out.tfevents.short"
bad "events.out.tfevents.short: not a TensorBoard event file, or one cut short before its first record (10 bytes" \
  "$tmp/events.out.tfevents.short"
$py -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[len(b) // 2] ^= 0xff; open(sys.argv[2], "wb").write(b)' \
  "$ev" "$tmp/corrupt.tfevents"
bad "corrupt.tfevents: byte [0-9]*: the record's \(data\|length\) CRC does not match" "$tmp/corrupt.tfevents"
bad "plan.json: a plan, not a training log: give it with --plan" "$live/plan.json"
bad "\-\-label 'b': 2 labels for 1 run" "$run" --label a --label b
bad "9 runs given" "$run" "$run" "$run" "$run" "$run" "$run" "$run" "$run" "$run"
echo "bad input: named"
echo "test_report: passed"

#!/usr/bin/env bash
# test_report.sh: `ljperf report`. (1) A real (small) run directory: a training log with
# validation, `plan --json`, `benchmark --json` and `benchmark --ablation --json`: the report
# recognises each and draws four charts (what the writers write, the reader reads). (2) The
# committed run of tests/data/report/run (fixed numbers, so that nothing below depends on the
# machine's speed or load): the page is self-contained (no http(s) reference, no external file),
# holds the four charts, and renders in headless Chromium: its own check finds every chart drawn
# and no script error, the console has no error, and the screenshot has coloured pixels inside
# each chart (counted by tests/png_colors.py). (3) The odd inputs of tests/data/report/edge (no
# tokens/s, negative iterations, one point, a constant, infinite and huge values) each give a page
# within seconds and bounded memory, with finite coordinates. (4) Bad input (a missing directory,
# nothing to draw, a bad log line, a file of the wrong kind, an unwritable --output) gets one
# message naming the file.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/report"
rm -rf "$tmp" && mkdir -p "$tmp/live" "$tmp/run"
fail() { echo "FAIL: $*" >&2; exit 1; }

# (1) a real run: the writers' JSON is what the reader recognises
live="$tmp/live"
head -c 200000 "$LJ_CACHE/data/kjv.txt" > "$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" \
  --tokenizer "$LJ_CACHE/tokenizer/llama3/tokenizer.json" >/dev/null 2>&1 || fail "prepare"
shape=(--model llama3-nano --device cpu --seq-length 32 --micro-batch-size 2)
"$LJPERF" train "${shape[@]}" --data-path "$tmp/kjv" --train-iters 12 --eval-interval 4 --eval-iters 2 --lr 3e-3 \
  --quiet --log-json "$live/train.jsonl" 2>"$tmp/train.err" || { cat "$tmp/train.err"; fail "train"; }
"$LJPERF" plan "${shape[@]}" --json "$live/plan.json" >/dev/null 2>&1 || fail "plan"
"$LJPERF" benchmark "${shape[@]}" --train-iters 3 --warmup-iters 1 --no-progress --json "$live/benchmark.json" \
  >/dev/null 2>"$tmp/bench.err" || { cat "$tmp/bench.err"; fail "benchmark"; }
"$LJPERF" benchmark "${shape[@]}" --train-iters 2 --warmup-iters 1 --no-progress --ablation --json "$live/ablation.json" \
  >/dev/null 2>"$tmp/abl.err" || { cat "$tmp/abl.err"; fail "ablation"; }
"$LJPERF" report "$live" >"$tmp/live.out" 2>"$tmp/live.err" || { cat "$tmp/live.err"; fail "report of the real run"; }
grep -q "4 of 4 charts" "$tmp/live.out" || fail "the real run: not 4 charts: $(cat "$tmp/live.out")"
for kind in "training log" plan benchmark ablation; do
  grep -q ": $kind\$" "$tmp/live.err" || fail "the real run's $kind was not recognised: $(cat "$tmp/live.err")"
done
[ "$(grep -c '"validation_loss"' "$live/train.jsonl")" -gt 0 ] || fail "the real run's log has no validation loss"
echo "report: the real run's four outputs recognised"

# (2) the committed run
run="$tmp/run"
cp "$LJ_SOURCE_DIR"/tests/data/report/run/* "$run/"
"$LJPERF" report "$run" >"$tmp/report.out" 2>"$tmp/report.err" || { cat "$tmp/report.err"; fail "report"; }
html="$run/report.html"
grep -q "4 of 4 charts" "$tmp/report.out" || fail "not 4 charts: $(cat "$tmp/report.out")"
for kind in "training log" plan benchmark ablation; do
  grep -q ": $kind\$" "$tmp/report.err" || fail "the $kind was not recognised: $(cat "$tmp/report.err")"
done
[ "$(grep -o '<svg class="chart"' "$html" | wc -l)" = 4 ] || fail "expected 4 chart SVGs"
for id in loss speed memory ablation; do grep -q "id=\"$id\"" "$html" || fail "no $id chart"; done
grep -q "measured peak" "$html" || fail "the memory chart lacks the measured peak"
grep -q "predicted peak" "$html" || fail "the memory chart lacks the predicted peak"
grep -qE '(\+|-)[0-9.]+%\)</text>' "$html" || fail "the ablation bars lack their gains"
if grep -qiE '(src|href)="(https?:)?//' "$html"; then fail "the page references the network"; fi
if grep -qiE '<(link|img|iframe)|src="' "$html"; then fail "the page loads another file"; fi
echo "report: 4 charts, self-contained ($(wc -c < "$html") bytes)"

# headless Chromium: the page's own check, the console, a screenshot
chrome=$(command -v chromium || command -v chromium-browser || true)
[ -n "$chrome" ] || fail "chromium is not installed: run scripts/setup.sh"
browse() { # extra flags...
  local ud; ud=$(mktemp -d "$tmp/chrome.XXXXXX")
  timeout 90 "$chrome" --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
    --disable-sync --no-first-run --user-data-dir="$ud" --window-size=1240,1100 --hide-scrollbars "$@" "file://$html"
}
browse --dump-dom --enable-logging=stderr --v=0 >"$tmp/dom.html" 2>"$tmp/chrome.err" || { tail "$tmp/chrome.err"; fail "chromium --dump-dom"; }
body=$(grep -o '<body[^>]*>' "$tmp/dom.html")
echo "$body" | grep -q 'data-charts-drawn="4/4"' || fail "not every chart drew in Chromium: $body"
echo "$body" | grep -q 'data-errors="0"' || fail "script errors in Chromium: $body"
if grep -E 'CONSOLE' "$tmp/chrome.err" | grep -qiE 'error|uncaught'; then grep CONSOLE "$tmp/chrome.err"; fail "console errors"; fi
rects=$(echo "$body" | sed -E 's/.*data-chart-rects="([^"]*)".*/\1/')
browse --screenshot="$tmp/report.png" >/dev/null 2>&1 || fail "chromium --screenshot"
[ -s "$tmp/report.png" ] || fail "no screenshot"
counts=$(/usr/bin/python3 "$LJ_SOURCE_DIR/tests/png_colors.py" "$tmp/report.png" "$rects") || fail "png_colors"
for c in $counts; do [ "$c" -gt 300 ] || fail "a chart has only $c coloured pixels in the screenshot (all: $counts)"; done
echo "chromium: 4/4 charts drawn, no errors; coloured pixels per chart: $counts"

# (3) odd inputs: a page within seconds and 2 GiB, four charts, finite coordinates
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
  [ "$(grep -o '<svg class="chart"' "$tmp/edge.html" | wc -l)" = 4 ] || fail "$name: expected 4 chart SVGs"
  if grep -qiE '(x|y|x1|x2|y1|y2|cx|cy|width|height)="[^"]*(nan|inf)|d="[^"]*(nan|inf)' "$tmp/edge.html"; then
    grep -oiE '[a-z0-9]+="[^"]*(nan|inf)[^"]*"' "$tmp/edge.html" | head -3
    fail "$name: a coordinate is not finite"
  fi
  [ "$(wc -c < "$tmp/edge.html")" -lt 200000 ] || fail "$name: a page of $(wc -c < "$tmp/edge.html") bytes"
done
grep -q "no finite value of tokens/s" <("$LJPERF" report --log-json "$edge/no_speed.jsonl" --output "$tmp/edge.html" \
  >/dev/null 2>&1 && cat "$tmp/edge.html") || fail "no_speed.jsonl: the throughput chart does not say why it is empty"
echo "odd inputs: $(ls "$edge" | wc -l) files, each a page of finite charts"

# bad input
bad() { local want=$1; shift
  if "$LJPERF" report "$@" >/dev/null 2>"$tmp/bad.err"; then fail "accepted: $*"; fi
  grep -q -- "$want" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "message lacks '$want': $*"; }
}
bad "$tmp/none: not a readable directory" "$tmp/none"
mkdir -p "$tmp/empty" && echo '{"something": 1}' > "$tmp/empty/other.json"
bad "nothing to draw" "$tmp/empty"
mkdir -p "$tmp/broken" && { head -3 "$run/train.jsonl"; echo '{"iteration": 4, "loss": '; } > "$tmp/broken/train.jsonl"
bad "broken/train.jsonl:4: not a JSON object" "$tmp/broken"
bad "--plan $run/train.jsonl: not a plan (training log)" --plan "$run/train.jsonl"
bad "--output: $tmp/none/x.html: cannot create it" "$run" --output "$tmp/none/x.html"
bad "unknown flag '--colour'" "$run" --colour
echo "bad input: named"
echo "test_report: passed"

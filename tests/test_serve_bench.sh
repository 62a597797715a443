#!/usr/bin/env bash
# test_serve_bench.sh: `ljperf bench serve` against `ljperf serve` on the loopback (a llama3-nano
# checkpoint trained for one step): 50 random prompts of random lengths under --max-concurrency
# (sent at once, --request-rate inf), then passages of the KJV text at Poisson arrivals; the
# result JSON has every metric of vLLM's bench serve, the counts add up (completed = num-prompts,
# total output tokens = the sum of the output lengths = the sum of the requests' max_tokens, under
# --ignore-eos), and --offline (the engine in-process, no HTTP) reports the same token counts for
# the same prompts, also with an FP8 cache and FP8 weights (--kv-cache-dtype fp8 --quantization
# fp8). Then the weight reload: POST /update_weights_from_disk with another checkpoint makes the
# greedy answer that checkpoint's (as `ljperf generate` gives it), a bad path answers 400 and keeps
# the weights.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}"
tmp="$LJ_TEST_TMP/serve_bench"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/serve.err" ] && tail -20 "$tmp/serve.err" >&2; exit 1; }
export OMP_NUM_THREADS=1 LJPERF_CACHE="$LJ_CACHE"

head -c 60000 "$LJ_CACHE/data/kjv.txt" > "$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" --tokenizer llama3 >/dev/null 2>&1 ||
  fail "prepare"
for run in "1 1e-4 1" "4 1e-2 2"; do # a second checkpoint that answers otherwise: more steps at a larger lr
  set -- $run
  "$LJPERF" train --model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2 \
    --train-iters "$1" --lr "$2" --quiet --save "$tmp/ckpt$3" 2>"$tmp/train.err" || { cat "$tmp/train.err"; fail "train"; }
done

server_pid=
cleanup() { [ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null || true; }
trap cleanup EXIT
engine=(--max-model-len 256 --max-num-seqs 16 --max-num-batched-tokens 128 --kv-cache-tokens 4096)
"$LJPERF" serve --load "$tmp/ckpt1" --device cpu --host 127.0.0.1 --port 0 "${engine[@]}" 2>"$tmp/serve.err" &
server_pid=$!
for _ in $(seq 1200); do # at most two minutes to load
  grep -q "serve: ready" "$tmp/serve.err" && break
  kill -0 "$server_pid" 2>/dev/null || fail "the server exited while loading"
  sleep 0.1
done
grep -q "serve: ready" "$tmp/serve.err" || fail "the server did not get ready"
port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/serve.err")
base="http://127.0.0.1:$port"

bench=(--num-prompts 50 --random-input-len 24 --random-output-len 8 --random-range-ratio 0.5 --ignore-eos --seed 7)
timeout 120 "$LJPERF" bench serve --base-url "$base" "${bench[@]}" --max-concurrency 8 --request-rate inf \
  --result-json "$tmp/http.json" \
  >"$tmp/http.out" 2>&1 || { cat "$tmp/http.out"; fail "bench serve"; }
grep -q "Serving Benchmark Result" "$tmp/http.out" || fail "no result table"
grep -q "P99 ITL (ms):" "$tmp/http.out" || fail "no ITL rows in the table"
timeout 120 "$LJPERF" bench serve --base-url "$base" --dataset-name kjv --dataset-path "$tmp/kjv.txt" --num-prompts 12 \
  --random-input-len 40 --random-output-len 4 --ignore-eos --request-rate 40 --result-json "$tmp/kjv.json" \
  >"$tmp/kjv.out" 2>&1 || { cat "$tmp/kjv.out"; fail "bench serve --dataset-name kjv"; }
timeout 120 "$LJPERF" bench serve --offline --load "$tmp/ckpt1" --device cpu "${engine[@]}" "${bench[@]}" \
  --result-json "$tmp/offline.json" >"$tmp/offline.out" 2>&1 || { cat "$tmp/offline.out"; fail "bench serve --offline"; }
timeout 120 "$LJPERF" bench serve --offline --load "$tmp/ckpt1" --device cpu "${engine[@]}" "${bench[@]}" \
  --kv-cache-dtype fp8 --quantization fp8 --result-json "$tmp/offline_fp8.json" >"$tmp/offline_fp8.out" 2>&1 ||
  { cat "$tmp/offline_fp8.out"; fail "bench serve --offline --kv-cache-dtype fp8 --quantization fp8"; }
grep -q "KV cache 256 blocks of 16 tokens (.* MiB, fp8_e4m3), weights fp8" "$tmp/offline_fp8.out" ||
  fail "the FP8 engine's start-up line: $(grep 'serve: ready' "$tmp/offline_fp8.out")"
# --load-format dummy: a preset's shapes with random weights, every request to its length
timeout 120 "$LJPERF" bench serve --offline --load llama3-nano --load-format dummy --device cpu "${engine[@]}" \
  --num-prompts 4 --random-input-len 16 --random-output-len 4 --ignore-eos --result-json "$tmp/offline_dummy.json" \
  >"$tmp/offline_dummy.out" 2>&1 || { cat "$tmp/offline_dummy.out"; fail "bench serve --offline --load-format dummy"; }
grep -q "random weights (uniform, the init's variance, seed 1234)" "$tmp/offline_dummy.out" ||
  { cat "$tmp/offline_dummy.out"; fail "--load-format dummy: the start-up line"; }
# every step counted before its tokens reach the benchmark: 4 tokens each need a prompt step and
# 3 more at least (the engine may take the prompts in one step or several)
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["completed"] == 4 and d["total_output_tokens"] == 16, d
p, k = d["steps_prompt"], d["steps_decode"]
assert 1 <= p <= 4 and 4 <= p + k <= 7, d' "$tmp/offline_dummy.json" || fail "--load-format dummy: the tokens or the step counts"
node -e '
const fs = require("fs");
const [h, k, o, o8] = process.argv.slice(1).map((f) => JSON.parse(fs.readFileSync(f, "utf8")));
const bad = (m) => { console.error(m); process.exit(1); };
const keys = ["duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput",
  "output_throughput", "total_token_throughput", "input_lens", "output_lens"];
for (const s of ["ttft", "tpot", "itl", "e2el"]) for (const m of ["mean", "median", "std", "p99"]) keys.push(`${m}_${s}_ms`);
for (const r of [h, k]) for (const key of keys) if (!(key in r)) bad(`no ${key} in the result`);
const sum = (a) => a.reduce((x, y) => x + y, 0);
if (h.completed !== 50 || h.failed !== 0) bad(`completed ${h.completed}, failed ${h.failed}`);
if (h.request_rate !== "inf") bad(`--request-rate inf: request_rate ${h.request_rate}`);
if (k.completed !== 12) bad(`kjv: completed ${k.completed}`);
if (h.total_output_tokens !== sum(h.output_lens) || h.total_input_tokens !== sum(h.input_lens)) bad("the totals are not the sums");
if (h.output_lens.some((n) => n < 4 || n > 12) || h.input_lens.some((n) => n < 12 || n > 36)) bad("a length outside the range");
if (new Set(h.output_lens).size < 3) bad("the output lengths are not random");
if (!(h.mean_ttft_ms > 0 && h.p99_ttft_ms >= h.median_ttft_ms && h.mean_tpot_ms > 0 && h.mean_itl_ms > 0)) bad("latencies");
if (Math.abs(h.output_throughput * h.duration - h.total_output_tokens) > 1e-6 * h.total_output_tokens) bad("throughput");
if (o.completed !== 50 || o.total_input_tokens !== h.total_input_tokens || o.total_output_tokens !== h.total_output_tokens)
  bad(`offline: ${o.completed} requests, ${o.total_input_tokens} in, ${o.total_output_tokens} out; http: ${h.total_input_tokens}, ${h.total_output_tokens}`);
if (k.total_output_tokens !== 48) bad(`kjv: ${k.total_output_tokens} output tokens`);
if (o8.completed !== 50 || o8.total_input_tokens !== o.total_input_tokens || o8.total_output_tokens !== o.total_output_tokens)
  bad(`offline FP8: ${o8.completed} requests, ${o8.total_input_tokens} in, ${o8.total_output_tokens} out`);
' "$tmp/http.json" "$tmp/kjv.json" "$tmp/offline.json" "$tmp/offline_fp8.json" || fail "the bench results"

# a shared prefix (--random-prefix-len: 2 full blocks before every prompt) is served from the
# prefix cache after the first request; --api-key reaches a server that asks for one (below)
hits() { curl -s "$base/metrics" | sed -n 's/^vllm:prefix_cache_hits_total[^ ]* //p' | head -1; }
h0=$(hits)
timeout 120 "$LJPERF" bench serve --base-url "$base" --num-prompts 6 --random-input-len 8 --random-prefix-len 32 \
  --random-output-len 2 --ignore-eos --max-concurrency 1 --seed 3 --result-json "$tmp/prefix.json" \
  >"$tmp/prefix.out" 2>&1 || { cat "$tmp/prefix.out"; fail "bench serve --random-prefix-len"; }
h1=$(hits)
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
if (r.completed !== 6 || r.total_input_tokens !== 6 * 40 || r.input_lens.some((n) => n !== 40))
  { console.error(`prefix: ${r.completed} requests, input lengths ${r.input_lens}`); process.exit(1); }
' "$tmp/prefix.json" || fail "the --random-prefix-len lengths"
[ -n "$h0" ] && [ -n "$h1" ] || fail "no vllm:prefix_cache_hits_total in /metrics"
awk -v a="$h0" -v b="$h1" 'BEGIN { exit !(b - a >= 5 * 32) }' ||
  fail "the shared prefix was not served from the cache: hits $h0 -> $h1 (want >= 160 more)"

# the weight reload
prompt="In the beginning God"
"$LJPERF" generate --load "$tmp/ckpt2" --device cpu --prompt "$prompt" --max-new-tokens 12 --temperature 0 \
  >"$tmp/gen2.out" 2>/dev/null || fail "generate"
"$LJPERF" generate --load "$tmp/ckpt1" --device cpu --prompt "$prompt" --max-new-tokens 12 --temperature 0 \
  >"$tmp/gen1.out" 2>/dev/null || fail "generate"
cmp -s "$tmp/gen1.out" "$tmp/gen2.out" && fail "the two checkpoints answer alike: the reload test could not fail"
node -e '
const fs = require("fs"); const [base, p, g1, g2, ck2] = process.argv.slice(1);
const want = (f) => fs.readFileSync(f, "utf8").slice(p.length, -1);
const bad = (m) => { console.error(m); process.exit(1); };
const greedy = async () => (await (await fetch(base + "/v1/completions", {method: "POST",
  body: JSON.stringify({prompt: p, max_tokens: 12, temperature: 0})})).json()).choices[0].text;
const load = async (body) => { const r = await fetch(base + "/update_weights_from_disk", {method: "POST", body: JSON.stringify(body)});
  return [r.status, await r.json()]; };
(async () => {
  if (await greedy() !== want(g1)) bad("before the reload: not the first checkpoint");
  let [st, j] = await load({model_path: ck2});
  if (st !== 200 || j.success !== true) bad(`reload: ${st} ${JSON.stringify(j)}`);
  if (await greedy() !== want(g2)) bad("after the reload: not the second checkpoint");
  [st, j] = await load({model_path: ck2 + "/no-such"});
  if (st !== 400 || j.success !== false || !j.message) bad(`a bad path: ${st} ${JSON.stringify(j)}`);
  if (await greedy() !== want(g2)) bad("a failed reload changed the weights");
  [st, j] = await load({});
  if (st !== 200 || await greedy() !== want(g1)) bad("{} does not reload --load");
  [st, j] = await load({model_path: 3});
  if (st !== 400) bad("model_path 3 accepted");
})().catch((e) => bad(String(e)));
' "$base" "$prompt" "$tmp/gen1.out" "$tmp/gen2.out" "$tmp/ckpt2" || fail "the weight reload"
kill -TERM "$server_pid"
wait "$server_pid" || fail "the server did not exit 0"
server_pid=

# --api-key: refused without it, naming the status; measured with it
"$LJPERF" serve --load "$tmp/ckpt1" --device cpu --host 127.0.0.1 --port 0 --api-key s3cret "${engine[@]}" \
  2>"$tmp/serve.err" &
server_pid=$!
for _ in $(seq 1200); do
  grep -q "serve: ready" "$tmp/serve.err" && break
  kill -0 "$server_pid" 2>/dev/null || fail "the server with --api-key exited while loading"
  sleep 0.1
done
port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/serve.err")
small=(--base-url "http://127.0.0.1:$port" --num-prompts 3 --random-input-len 8 --random-output-len 2 --ignore-eos)
if timeout 60 "$LJPERF" bench serve "${small[@]}" >"$tmp/nokey.out" 2>&1; then
  fail "bench serve without --api-key passed against a server that asks for one"
fi
timeout 60 "$LJPERF" bench serve "${small[@]}" --api-key s3cret --result-json "$tmp/key.json" >"$tmp/key.out" 2>&1 ||
  { cat "$tmp/key.out"; fail "bench serve --api-key"; }
node -e 'if (JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).completed !== 3) process.exit(1)' \
  "$tmp/key.json" || fail "bench serve --api-key: not 3 requests completed"
grep -q '401' "$tmp/nokey.out" || fail "bench serve without the key does not name the 401: $(tail -2 "$tmp/nokey.out")"
kill -TERM "$server_pid"
wait "$server_pid" || fail "the server did not exit 0"
server_pid=
echo "PASS"

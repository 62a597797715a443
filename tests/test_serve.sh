#!/usr/bin/env bash
# test_serve.sh: `ljperf serve` end to end on the loopback, driven by the official OpenAI Node.js
# client (tests/serve_client.js): a checkpoint trained for one step, greedy answers equal to
# `ljperf generate`'s, completions and chat (blocking and streamed, usage last, [DONE]), n, seed,
# stop strings, logprobs, tokenize, OpenAI-style 400/401/404 errors, fuzzed bodies, a client that
# disconnects, 2,000 requests of random lengths, 24 at a time, about a fifth cancelled midway (each
# answer equal to its lone run, the KV cache empty afterwards; LJ_SERVE_LOAD_REQUESTS sets the
# count), and SIGTERM draining a stream in flight.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/serve"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/serve.err" ] && tail -20 "$tmp/serve.err" >&2; exit 1; }
client="$LJ_CACHE/openai-client/node_modules/openai"
[ -f "$client/package.json" ] || fail "$client is missing: run scripts/setup.sh"
export OMP_NUM_THREADS=1 LJPERF_CACHE="$LJ_CACHE"

head -c 60000 "$LJ_CACHE/data/kjv.txt" > "$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" --tokenizer llama3 >/dev/null 2>&1 ||
  fail "prepare"
"$LJPERF" train --model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2 --train-iters 1 \
  --quiet --save "$tmp/ckpt" 2>"$tmp/train.err" || { cat "$tmp/train.err"; fail "train"; }
prompt="In the beginning God"
"$LJPERF" generate --load "$tmp/ckpt" --device cpu --prompt "$prompt" --max-new-tokens 16 --temperature 0 \
  >"$tmp/generate.out" 2>"$tmp/generate.err" || { cat "$tmp/generate.err"; fail "generate"; }
node -e '
const fs = require("fs"); const [p, out, file] = process.argv.slice(1);
const text = fs.readFileSync(file, "utf8");
if (!text.startsWith(p) || !text.endsWith("\n")) { console.error("generate printed", JSON.stringify(text)); process.exit(1); }
fs.writeFileSync(out, JSON.stringify({prompt: p, tokens: 16, greedy: text.slice(p.length, -1)}));
' "$prompt" "$tmp/expected.json" "$tmp/generate.out" || fail "the output of generate"

server_pid=
cleanup() { [ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null || true; }
trap cleanup EXIT
key="test-key-$$"
"$LJPERF" serve --load "$tmp/ckpt" --device cpu --host 127.0.0.1 --port 0 --api-key "$key" --served-model-name tiny \
  --max-model-len 256 --max-num-seqs 16 --max-num-batched-tokens 128 --kv-cache-tokens 2048 2>"$tmp/serve.err" &
server_pid=$!
for _ in $(seq 1200); do # at most two minutes to load
  grep -q "serve: ready" "$tmp/serve.err" && break
  kill -0 "$server_pid" 2>/dev/null || fail "the server exited while loading"
  sleep 0.1
done
grep -q "serve: ready" "$tmp/serve.err" || fail "the server did not get ready"
port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/serve.err")
[ -n "$port" ] || fail "no port in the log"
base="http://127.0.0.1:$port"
node -e 'fetch(process.argv[1] + "/health").then((r) => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))' \
  "$base" || fail "/health is not 200"

node "$LJ_SOURCE_DIR/tests/serve_client.js" "$client" "$base" "$key" tiny "$tmp/expected.json" || fail "the OpenAI client checks"

# SIGTERM: the stream in flight finishes, new requests are refused, the server exits 0
node -e '
const fs = require("fs"); const [base, key, out] = process.argv.slice(1);
(async () => {
  const r = await fetch(base + "/v1/completions", {method: "POST", headers: {Authorization: "Bearer " + key},
    body: JSON.stringify({prompt: "And", max_tokens: 48, temperature: 0, ignore_eos: true, stream: true})});
  const fd = fs.openSync(out, "w");
  for await (const chunk of r.body) fs.writeSync(fd, chunk);
  fs.closeSync(fd);
})().catch((e) => { console.error(e); process.exit(1); });
' "$base" "$key" "$tmp/drain.out" &
stream_pid=$!
for _ in $(seq 600); do grep -q '"text"' "$tmp/drain.out" 2>/dev/null && break; sleep 0.05; done
grep -q '"text"' "$tmp/drain.out" || fail "the stream did not start"
kill -TERM "$server_pid"
wait "$stream_pid" || fail "the stream broke at SIGTERM"
status=0
wait "$server_pid" || status=$?
server_pid=
[ "$status" = 0 ] || fail "the server exited with $status after SIGTERM"
grep -q '"finish_reason":"length"' "$tmp/drain.out" || fail "the drained stream did not finish: $(tail -c 300 "$tmp/drain.out")"
tail -c 20 "$tmp/drain.out" | grep -q '\[DONE\]' || fail "no [DONE] at the end of the drained stream"
grep -q "draining the requests in flight" "$tmp/serve.err" || fail "no drain message"
echo "serve: SIGTERM drained the stream in flight"

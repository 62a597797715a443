#!/usr/bin/env bash
# gpu-serve.sh: `ljperf serve` on one GPU, measured with `ljperf bench serve` (repo root, $OUT
# set; carry .deb, build-gpu/dev from `bash scripts/gpu/gpu-check.sh --prepare`, and
# .cache/tokenizer/llama3). A Llama 3.1 8B-shaped model with random weights (--load-format dummy:
# nothing to download), bf16. Steps, logs in $OUT, a table last; the whole run stays under 9
# minutes (each step has its own timeout):
#   1. the paged ops and the greedy argmax against the CPU backend (test_ops_cuda check), and
#      under compute-sanitizer memcheck (--quick);
#   2. the server (decode steps replayed as CUDA graphs), then bench serve: one request at a time
#      (TPOT at concurrency 1, 1000 in / 256 out), and Poisson arrivals at 4 req/s (160 prompts,
#      1000 in / 128 out, range ratio 0.5); four greedy completions saved for step 4;
#   3. offline (the engine in-process, no HTTP): 200 prompts of 1000 in / 1000 out, all at once;
#   4. the server with --enforce-eager (every step op by op): the same four greedy completions,
#      which must equal step 2's word for word, and concurrency 1 again (the graphs' gain);
#   5. offline again without the prefix cache (its cost at a 0% hit rate), and 64 x 128/256, the
#      shape of scripts/gpu/hf_generate_bench.py (transformers' generate).
# Step 2 also measures TTFT behind a shared 2,000-token prefix against 2,100 tokens unshared.
# Usage: bash scripts/gpu/gpu-serve.sh [steps...]   (default: 1 2 3 5 4)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/out/gpu-serve}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
export LJPERF_CACHE=$repo/.cache
dev=build-gpu/dev
lj=$dev/ljperf
steps=${*:-1 2 3 5 4}
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
say "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
model=(--load llama3.1-8b --load-format dummy --device cuda --max-model-len 4096 --max-num-seqs 256
       --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9)
table=$OUT/table.txt
printf '%-34s %10s %10s %10s %10s %10s %10s\n' run req/s out_tok/s tot_tok/s ttft_p50 tpot_p50 itl_p99 >"$table"
row() { # name, result json
  python3 - "$1" "$2" >>"$table" <<'PY' 2>/dev/null || echo "$1: no result" >>"$table"
import json, sys
r = json.load(open(sys.argv[2]))
g = lambda k: r.get(k, float("nan"))
print("%-34s %10.2f %10.1f %10.1f %10.2f %10.2f %10.2f" % (sys.argv[1], g("request_throughput"), g("output_throughput"),
      g("total_token_throughput"), g("median_ttft_ms"), g("median_tpot_ms"), g("p99_itl_ms")))
PY
}

if [[ " $steps " == *" 1 "* ]]; then
  lj_check_ops 1 paged_attention argmax_rows
fi

# serve_start LOG FLAGS...: starts the server in the background (pid in $pid, base URL in $base);
# returns 1 when it did not get ready within 3 minutes.
serve_start() {
  local log=$1
  shift
  "$lj" serve "${model[@]}" "$@" --host 127.0.0.1 --port 0 >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1800); do
    grep -q "serve: ready" "$log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  local port
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log")
  base=http://127.0.0.1:$port
  grep -q "serve: ready" "$log"
}
serve_stop() {
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
}
# greedy FILE: four greedy completions of 48 tokens, one at a time, their texts into FILE (Python's
# urllib: the carried libcurl does not suit the machine's curl program).
greedy() {
  python3 - "$base" >"$1" 2>&1 <<'PY'
import json, sys, urllib.request
for p in ["The capital of France is", "def fibonacci(n):", "Once upon a time", "1, 2, 3, 4,"]:
    body = json.dumps({"model": "m", "prompt": p, "max_tokens": 48, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(sys.argv[1] + "/v1/completions", body, {"Content-Type": "application/json"})
    print(json.dumps(json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["text"]))
PY
}

if [[ " $steps " == *" 2 "* ]]; then
  if serve_start "$OUT/serve.log"; then
    say "2. $(grep -E 'gpu-memory-utilization|CUDA graphs|serve: ready' "$OUT/serve.log" | tr '\n' ' ' | cut -c1-500)"
    greedy "$OUT/greedy_graphs.txt"
    timeout 60 "$lj" bench serve --base-url "$base" --num-prompts 4 --max-concurrency 1 --random-input-len 1000 \
      --random-output-len 256 --ignore-eos --result-json "$OUT/c1.json" >"$OUT/bench_c1.log" 2>&1
    say "2a. concurrency 1 rc=$? $(grep -E 'Median TPOT' "$OUT/bench_c1.log")"
    row "c=1, 1000/256" "$OUT/c1.json"
    timeout 120 "$lj" bench serve --base-url "$base" --num-prompts 160 --request-rate 4 --random-input-len 1000 \
      --random-output-len 128 --random-range-ratio 0.5 --ignore-eos --result-json "$OUT/qps4.json" \
      >"$OUT/bench_qps4.log" 2>&1
    say "2b. Poisson 4 req/s rc=$? $(grep -E 'P99 TPOT' "$OUT/bench_qps4.log")"
    row "Poisson 4 req/s, 1000/128" "$OUT/qps4.json"
    # the prefix cache: TTFT of prompts behind one shared 2,000-token prefix against prompts of
    # the same length with nothing shared (8 each, one at a time)
    timeout 90 "$lj" bench serve --base-url "$base" --num-prompts 8 --max-concurrency 1 --random-input-len 2100 \
      --random-output-len 16 --ignore-eos --seed 11 --result-json "$OUT/nocache.json" >"$OUT/bench_nocache.log" 2>&1
    row "c=1, 2100/16 nothing shared" "$OUT/nocache.json"
    timeout 90 "$lj" bench serve --base-url "$base" --num-prompts 8 --max-concurrency 1 --random-input-len 100 \
      --random-prefix-len 2000 --random-output-len 16 --ignore-eos --seed 12 --result-json "$OUT/prefix.json" \
      >"$OUT/bench_prefix.log" 2>&1
    row "c=1, 2000 shared + 100 / 16" "$OUT/prefix.json"
    python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1] + "/metrics").read().decode())' \
      "$base" >"$OUT/metrics.txt" 2>&1 || true
  else
    say "2. the server did not get ready: $(tail -3 "$OUT/serve.log")"
  fi
  serve_stop
fi

if [[ " $steps " == *" 3 "* ]]; then
  timeout 240 "$lj" bench serve --offline "${model[@]}" --num-prompts 200 --random-input-len 1000 \
    --random-output-len 1000 --ignore-eos --result-json "$OUT/offline.json" >"$OUT/bench_offline.log" 2>&1
  say "3. offline 200 x 1000/1000 rc=$? $(grep -E 'Output token throughput' "$OUT/bench_offline.log")"
  row "offline 200 x 1000/1000" "$OUT/offline.json"
fi

if [[ " $steps " == *" 5 "* ]]; then
  # the prefix cache's cost at a 0% hit rate (random prompts share nothing): step 3 without it;
  # and the batch-64 shape of transformers' generate (scripts/gpu/hf_generate_bench.py)
  timeout 240 "$lj" bench serve --offline "${model[@]}" --no-enable-prefix-caching --num-prompts 200 \
    --random-input-len 1000 --random-output-len 1000 --ignore-eos --result-json "$OUT/offline_nocache.json" \
    >"$OUT/bench_offline_nocache.log" 2>&1
  row "offline 200 x 1000/1000, no prefix cache" "$OUT/offline_nocache.json"
  timeout 120 "$lj" bench serve --offline "${model[@]}" --num-prompts 64 --random-input-len 128 \
    --random-output-len 256 --ignore-eos --result-json "$OUT/offline64.json" >"$OUT/bench_offline64.log" 2>&1
  row "offline 64 x 128/256" "$OUT/offline64.json"
fi

if [[ " $steps " == *" 4 "* ]]; then
  if serve_start "$OUT/serve_eager.log" --enforce-eager; then
    greedy "$OUT/greedy_eager.txt"
    if [ "$(grep -c '^"' "$OUT/greedy_graphs.txt")" = 4 ] && cmp -s "$OUT/greedy_graphs.txt" "$OUT/greedy_eager.txt"; then
      say "4. greedy completions: graphs = eager ($(wc -l <"$OUT/greedy_eager.txt") texts)"
    else
      say "4. FAIL: greedy completions differ between graphs and eager (greedy_*.txt)"
    fi
    timeout 60 "$lj" bench serve --base-url "$base" --num-prompts 4 --max-concurrency 1 --random-input-len 1000 \
      --random-output-len 256 --ignore-eos --result-json "$OUT/c1_eager.json" >"$OUT/bench_c1_eager.log" 2>&1
    say "4a. eager, concurrency 1 rc=$? $(grep -E 'Median TPOT' "$OUT/bench_c1_eager.log")"
    row "eager: c=1, 1000/256" "$OUT/c1_eager.json"
  else
    say "4. the eager server did not get ready: $(tail -3 "$OUT/serve_eager.log")"
  fi
  serve_stop
fi
cat "$table" | tee -a "$summary"

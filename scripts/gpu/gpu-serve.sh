#!/usr/bin/env bash
# gpu-serve.sh: `ljperf serve` on one GPU, measured with `ljperf bench serve` (repo root, $OUT
# set; carry .deb, build-gpu/dev from `bash scripts/gpu/gpu-check.sh --prepare`, and
# .cache/tokenizer/llama3). A Llama 3.1 8B-shaped model with random weights (--load-format dummy:
# nothing to download). Steps, logs in $OUT, a table last; the whole run stays under 9 minutes:
# every step's timeout is cut to what is left of 520 s, and a step that would get less than half
# a minute is skipped (said in the summary):
#   1. the paged ops (bf16 and the FP8 cache), the greedy argmax and the FP8 GEMM against the CPU
#      backend (test_ops_cuda check), and under compute-sanitizer memcheck (--quick);
#   2. bf16 (decode steps replayed as CUDA graphs): four greedy completions saved for step 5; one
#      request at a time (TPOT, 1000 in / 256 out); Poisson arrivals at 4 req/s (160 prompts, 1000
#      in / 128 out, range ratio 0.5); TTFT of 8 prompts behind one shared 2,000-token prefix
#      against 8 of 2,100 tokens sharing nothing;
#   3. bf16 offline (the engine in-process, no HTTP): 200 prompts of 1000 in / 1000 out at once;
#   4. FP8 (--kv-cache-dtype fp8 --quantization fp8): one request at a time, then offline as 3;
#   5. --enforce-eager (every step op by op): the four greedy completions, which must equal step
#      2's, and one request at a time again (the graphs' gain);
#   6. offline without the prefix cache (its cost at a 0% hit rate), and 64 x 128/256, the shape of
#      scripts/gpu/hf_generate_bench.py (transformers' generate).
# Usage: bash scripts/gpu/gpu-serve.sh [steps...]   (default: 1 2 3 4 5 6)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/out/gpu-serve}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
export LJPERF_CACHE=$repo/.cache
dev=build-gpu/dev
lj=$dev/ljperf
steps=${*:-1 2 3 4 5 6}
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

# budget N: the timeout for a step that wants N seconds, cut to what is left of the run's 520 s
# (less 10 s for what follows); nothing and status 1 when under 30 s are left for it.
t0=$SECONDS
budget() {
  local left=$((520 - (SECONDS - t0) - 10))
  [ "$left" -ge 30 ] || return 1
  echo $(($1 < left ? $1 : left))
}
# start_server LOG ARGS...: the server in the background ($pid), ready or not ($base set when ready)
start_server() {
  local log=$1 t
  shift
  base=
  pid=
  t=$(budget 180) || { echo "skipped: the run's time budget is spent" >"$log"; return; }
  "$lj" serve "${model[@]}" "$@" --host 127.0.0.1 --port 0 >"$log" 2>&1 &
  pid=$!
  for _ in $(seq $((t * 10))); do # the load
    grep -q "serve: ready" "$log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "serve: ready" "$log" && base=http://127.0.0.1:$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log")
}
stop_server() {
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
}
# c1 NAME: one request at a time, 1000 in / 256 out, against $base
c1() {
  local t
  t=$(budget 60) || { echo "skipped: the run's time budget is spent" >"$OUT/bench_c1_$1.log"; return 1; }
  timeout "$t" "$lj" bench serve --base-url "$base" --num-prompts 4 --max-concurrency 1 --random-input-len 1000 \
    --random-output-len 256 --ignore-eos --result-json "$OUT/c1_$1.json" >"$OUT/bench_c1_$1.log" 2>&1
}
# offline NAME ARGS...: 200 prompts of 1000 in / 1000 out, all at once (ARGS may change them)
offline() {
  local name=$1 t
  shift
  t=$(budget 240) || { echo "skipped: the run's time budget is spent" >"$OUT/bench_offline_$name.log"; return 1; }
  timeout "$t" "$lj" bench serve --offline "${model[@]}" --num-prompts 200 --random-input-len 1000 \
    --random-output-len 1000 --ignore-eos "$@" --result-json "$OUT/offline_$name.json" >"$OUT/bench_offline_$name.log" 2>&1
}
# bench NAME ARGS...: bench serve against $base, 90 s at most
bench() {
  local name=$1 t
  shift
  t=$(budget 90) || { echo "skipped: the run's time budget is spent" >"$OUT/bench_$name.log"; return 1; }
  timeout "$t" "$lj" bench serve --base-url "$base" "$@" --result-json "$OUT/$name.json" >"$OUT/bench_$name.log" 2>&1
}
# greedy FILE: four greedy completions of 48 tokens, one at a time, their texts into FILE (Python's
# urllib: the carried libcurl does not suit the machine's curl program).
greedy() {
  python3 - "$base" >"$1" 2>&1 <<'PY'
import json, sys, urllib.request
for p in ["The capital of France is", "def fibonacci(n):", "Once upon a time", "1, 2, 3, 4,"]:
    body = json.dumps({"prompt": p, "max_tokens": 48, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(sys.argv[1] + "/v1/completions", body, {"Content-Type": "application/json"})
    print(json.dumps(json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["text"]))
PY
}


if [[ " $steps " == *" 1 "* ]]; then
  lj_check_ops 1 paged_attention argmax_rows paged_attention_fp8 fp8_matmul
fi

if [[ " $steps " == *" 2 "* ]]; then
  start_server "$OUT/serve.log"
  say "2. $(grep -E 'serve: weights|gpu-memory-utilization|CUDA graphs|serve: ready' "$OUT/serve.log" | tr '\n' ' ' | cut -c1-600)"
  if [ -n "$base" ]; then
    greedy "$OUT/greedy_graphs.txt"
    c1 bf16
    say "2a. concurrency 1 rc=$? $(grep -E 'Median TPOT' "$OUT/bench_c1_bf16.log")"
    row "c=1, 1000/256" "$OUT/c1_bf16.json"
    bench qps4 --num-prompts 160 --request-rate 4 --random-input-len 1000 --random-output-len 128 \
      --random-range-ratio 0.5 --ignore-eos
    say "2b. Poisson 4 req/s rc=$? $(grep -E 'P99 TPOT' "$OUT/bench_qps4.log")"
    row "Poisson 4 req/s, 1000/128" "$OUT/qps4.json"
    bench unshared --num-prompts 8 --max-concurrency 1 --random-input-len 2100 --random-output-len 16 --ignore-eos --seed 11
    row "c=1, 2100/16 nothing shared" "$OUT/unshared.json"
    bench prefix --num-prompts 8 --max-concurrency 1 --random-input-len 100 --random-prefix-len 2000 \
      --random-output-len 16 --ignore-eos --seed 12
    row "c=1, 2000 shared + 100 / 16" "$OUT/prefix.json"
    python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1] + "/metrics").read().decode())' \
      "$base" >"$OUT/metrics.txt" 2>&1 || true
  else
    say "2. no server: $(tail -3 "$OUT/serve.log")"
  fi
  stop_server
fi

if [[ " $steps " == *" 3 "* ]]; then
  offline bf16
  say "3. offline 200 x 1000/1000 rc=$? $(grep -E 'skipped|Output token throughput' "$OUT/bench_offline_bf16.log")"
  row "offline 200 x 1000/1000" "$OUT/offline_bf16.json"
fi

if [[ " $steps " == *" 4 "* ]]; then
  fp8=(--kv-cache-dtype fp8 --quantization fp8)
  start_server "$OUT/serve_fp8.log" "${fp8[@]}"
  say "4. fp8: $(grep -E 'skipped|serve: weights|serve: --quantization fp8:|gpu-memory-utilization|CUDA graphs|serve: ready' \
    "$OUT/serve_fp8.log" | tr '\n' ' ' | cut -c1-600)"
  if [ -n "$base" ]; then
    c1 fp8
    say "4a. fp8 concurrency 1 rc=$? $(grep -E 'skipped|Median TPOT' "$OUT/bench_c1_fp8.log")"
    row "c=1, 1000/256, fp8" "$OUT/c1_fp8.json"
  fi
  stop_server
  offline fp8 "${fp8[@]}"
  say "4b. fp8 offline 200 x 1000/1000 rc=$? $(grep -E 'skipped|Output token throughput' "$OUT/bench_offline_fp8.log")"
  row "offline 200 x 1000/1000, fp8" "$OUT/offline_fp8.json"
fi

if [[ " $steps " == *" 5 "* ]]; then
  start_server "$OUT/serve_eager.log" --enforce-eager
  if [ -n "$base" ]; then
    greedy "$OUT/greedy_eager.txt"
    if [ "$(grep -c '^"' "$OUT/greedy_graphs.txt" 2>/dev/null)" = 4 ] && cmp -s "$OUT/greedy_graphs.txt" "$OUT/greedy_eager.txt"; then
      say "5. greedy completions: graphs = eager (4 texts of 48 tokens)"
    else
      say "5. FAIL: greedy completions differ between graphs and eager, or are missing (greedy_*.txt)"
    fi
    c1 eager
    say "5a. eager, concurrency 1 rc=$? $(grep -E 'skipped|Median TPOT' "$OUT/bench_c1_eager.log")"
    row "eager: c=1, 1000/256" "$OUT/c1_eager.json"
  else
    say "5. no eager server: $(tail -3 "$OUT/serve_eager.log")"
  fi
  stop_server
fi

if [[ " $steps " == *" 6 "* ]]; then
  offline nocache --no-enable-prefix-caching
  row "offline 200 x 1000/1000, no prefix cache" "$OUT/offline_nocache.json"
  offline b64 --num-prompts 64 --random-input-len 128 --random-output-len 256
  row "offline 64 x 128/256" "$OUT/offline_b64.json"
fi
cat "$table" | tee -a "$summary"
say "total: $((SECONDS - t0)) s"

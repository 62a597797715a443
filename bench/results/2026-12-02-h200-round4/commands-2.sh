#!/bin/bash
# .dev/ holds what the build machine packed for the call: bin.tar.xz (stripped binaries from
# scripts/gpu/gpu-check.sh --prepare), tok.tar.xz (the set-up script's tokenizers), kjv.txt.xz
# device call 2: serve's table: c=1 bf16, Poisson 1/4/8/16 on real prompts, FP8 offline shapes
set -u
O=/tmp/o; mkdir -p $O
fin() { cp /tmp/o/*.txt $OUT/ 2>/dev/null; tar czf $OUT/all.tgz -C /tmp/o . ; }
trap fin EXIT
mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev
rm -rf .cache && tar xJf .dev/tok.tar.xz && mv cache .cache
mkdir -p .cache/data && xz -dc .dev/kjv.txt.xz > .cache/data/kjv.txt
source scripts/gpu/gpu-env.sh
export LJPERF_CACHE=$PWD/.cache
d=build-gpu/dev
T0=$SECONDS; END=545
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" | tee -a $O/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a $O/summary.txt
model=(--load llama3.1-8b --load-format dummy --device cuda --max-model-len 4096 --max-num-seqs 256
       --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9)
fp8=(--kv-cache-dtype fp8 --quantization fp8)
$d/ljperf serve "${model[@]}" --host 127.0.0.1 --port 0 > $O/serve_bf16.log 2>&1 & pid=$!
for _ in $(seq 900); do grep -q "serve: ready" $O/serve_bf16.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' $O/serve_bf16.log)
say "server up at $((SECONDS-T0)) s port $port"
b() { local n=$1 t=$2; shift 2
  timeout $(left $t) $d/ljperf bench serve --base-url http://127.0.0.1:$port "$@" --result-json $O/$n.json > $O/$n.log 2>&1
  say "$n rc=$? ($((SECONDS-T0)) s): $(grep -E 'Output token throughput|Median TTFT|P99 TTFT|Median TPOT|P99 TPOT' $O/$n.log | tr -s ' ' | tr '\n' ';')"
}
if [ -n "$port" ]; then
  b c1_bf16 40 --num-prompts 4 --max-concurrency 1 --random-input-len 1000 --random-output-len 256 --ignore-eos
  b qps1 75 --dataset-name kjv --num-prompts 60 --request-rate 1 --random-input-len 1000 --random-output-len 128 --ignore-eos --seed 1
  b qps8 50 --dataset-name kjv --num-prompts 240 --request-rate 8 --random-input-len 1000 --random-output-len 128 --ignore-eos --seed 2
  b qps16 50 --dataset-name kjv --num-prompts 320 --request-rate 16 --random-input-len 1000 --random-output-len 128 --ignore-eos --seed 3
  b qps4 50 --dataset-name kjv --num-prompts 160 --request-rate 4 --random-input-len 1000 --random-output-len 128 --ignore-eos --seed 4
fi
kill -TERM $pid; sleep 3; kill -KILL $pid 2>/dev/null
off() { local n=$1 t=$2; shift 2
  [ $(left $t) -ge 60 ] || { say "offline $n skipped (time)"; return; }
  timeout $(left $t) $d/ljperf bench serve --offline "${model[@]}" --ignore-eos "$@" --result-json $O/off_$n.json > $O/off_$n.log 2>&1
  say "offline $n rc=$? ($((SECONDS-T0)) s): $(grep -E 'Output token throughput|Benchmark duration|Steps with|Decode-only|their forward|mean decode step|Scheduling|Preemptions' $O/off_$n.log | tr -s ' ' | tr '\n' ';')"
}
off k_fp8 130 --num-prompts 1000 --random-input-len 1000 --random-output-len 1000 "${fp8[@]}"
off long_in_fp8 100 --num-prompts 1000 --random-input-len 2048 --random-output-len 128 "${fp8[@]}"
off long_out_fp8 110 --num-prompts 500 --random-input-len 128 --random-output-len 2048 "${fp8[@]}"
say "total $((SECONDS-T0)) s"

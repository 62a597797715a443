#!/bin/bash
# .dev/ holds what the build machine packed for the call: bin.tar.xz (stripped binaries from
# scripts/gpu/gpu-check.sh --prepare), tok.tar.xz (the set-up script's tokenizers), kjv.txt.xz
# device call 1: paged checks, serve offline A/B (old vs new), the offline shapes, bf16 c=1
set -u
O=$OUT
mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev
rm -rf .cache && tar xJf .dev/tok.tar.xz && mv cache .cache
source scripts/gpu/gpu-env.sh
export LJPERF_CACHE=$PWD/.cache
d=build-gpu/dev
T0=$SECONDS; END=570
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
echo "== ops checks"
for op in paged_attention paged_attention_fp8; do
  timeout $(left 60) $d/test_ops_cuda check --op $op > $O/check_$op.log 2>&1; echo "check $op rc=$? $(tail -1 $O/check_$op.log)"
  timeout $(left 60) compute-sanitizer --tool memcheck $d/test_ops_cuda check --quick --op $op > $O/mc_$op.log 2>&1; echo "memcheck $op rc=$? $(grep 'ERROR SUMMARY' $O/mc_$op.log | tail -1)"
done
model=(--load llama3.1-8b --load-format dummy --device cuda --max-model-len 4096 --max-num-seqs 256
       --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9)
fp8=(--kv-cache-dtype fp8 --quantization fp8)
off() { # name binary timeout args...
  local n=$1 b=$2 t=$3; shift 3
  timeout $(left $t) $b bench serve --offline "${model[@]}" --ignore-eos "$@" --result-json $O/off_$n.json > $O/off_$n.log 2>&1
  echo "offline $n rc=$? ($((SECONDS-T0)) s): $(grep -E 'Output token throughput|Benchmark duration|mean decode step|their forward|Scheduling' $O/off_$n.log | tr -s ' ' | tr '\n' ';')"
}
echo "== A/B 200 x 1000/1000"
off old_bf16 $d/ljperf_old 70 --num-prompts 200 --random-input-len 1000 --random-output-len 1000
off new_bf16 $d/ljperf 70 --num-prompts 200 --random-input-len 1000 --random-output-len 1000
off old_fp8 $d/ljperf_old 60 --num-prompts 200 --random-input-len 1000 --random-output-len 1000 "${fp8[@]}"
off new_fp8 $d/ljperf 60 --num-prompts 200 --random-input-len 1000 --random-output-len 1000 "${fp8[@]}"
echo "== the issue's shapes"
off k_bf16 $d/ljperf 150 --num-prompts 1000 --random-input-len 1000 --random-output-len 1000
off k_fp8 $d/ljperf 110 --num-prompts 1000 --random-input-len 1000 --random-output-len 1000 "${fp8[@]}"
off long_out_fp8 $d/ljperf 80 --num-prompts 500 --random-input-len 128 --random-output-len 2048 "${fp8[@]}"
off long_in_fp8 $d/ljperf 60 --num-prompts 1000 --random-input-len 2048 --random-output-len 128 "${fp8[@]}"
echo "== c=1 bf16 ($((SECONDS-T0)) s)"
if [ $(left 60) -ge 50 ]; then
  $d/ljperf serve "${model[@]}" --host 127.0.0.1 --port 0 > $O/serve_bf16.log 2>&1 & pid=$!
  for _ in $(seq 600); do grep -q "serve: ready" $O/serve_bf16.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' $O/serve_bf16.log)
  if [ -n "$port" ]; then
    timeout $(left 40) $d/ljperf bench serve --base-url http://127.0.0.1:$port --num-prompts 4 --max-concurrency 1 --random-input-len 1000 \
      --random-output-len 256 --ignore-eos --result-json $O/c1_bf16.json > $O/c1_bf16.log 2>&1
    echo "c1 bf16 rc=$?: $(grep -E 'Median TPOT|Median TTFT' $O/c1_bf16.log | tr -s ' ' | tr '\n' ';')"
  fi
  kill -TERM $pid; sleep 2; kill -KILL $pid 2>/dev/null
fi
echo "total $((SECONDS-T0)) s"
tar czf /tmp/all.tgz -C $O . && mv /tmp/all.tgz $O/all.tgz

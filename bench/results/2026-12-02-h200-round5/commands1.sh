#!/bin/bash
# device call 1: f51e645 (A) against 699fe03 (B), one run each per row, order alternating
set -u
O=$OUT; T0=$SECONDS; END=555
trap 'tar czf /tmp/all.tgz -C $O . && mv /tmp/all.tgz $O/all.tgz' EXIT
mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader
F8="--fp8-format hybrid"
cases="1b_bf16||--model llama3.2-1b --micro-batch-size 4
1b_fp8||--model llama3.2-1b --micro-batch-size 4 $F8
3b_bf16||--model llama3.2-3b --micro-batch-size 2
3b_fp8||--model llama3.2-3b --micro-batch-size 2 $F8
q17_bf16||--model qwen3-1.7b --micro-batch-size 4
q4_bf16||--model qwen3-4b --micro-batch-size 2
ds8_bf16|CHECKPOINT_OPTIMIZATION=true|--model deepspeed/llama3-8b
ds8_fp8|CHECKPOINT_OPTIMIZATION=true|--model deepspeed/llama3-8b $F8
q8_bf16||--model qwen3-8b --recompute auto
q8_fp8||--model qwen3-8b --recompute auto $F8"
i=0
while IFS='|' read -r name envs flags; do
  order="A B"; [ $((i % 2)) = 1 ] && order="B A"; i=$((i+1))
  for who in $order; do
    bin=$d/ljperf_f51; [ $who = B ] && bin=$d/ljperf
    t=$(left 90); [ "$t" -lt 20 ] && { echo "$name $who skipped"; continue; }
    env $envs timeout $t $bin benchmark $flags --device cuda --train-iters 12 --warmup-iters 3 --no-progress \
      --json $O/$name-$who.json > $O/$name-$who.log 2>&1
    echo "$name $who rc=$? $((SECONDS-T0))s: $(python3 -c "
import json,sys
r=json.load(open('$O/$name-$who.json')); r=r[-1] if isinstance(r,list) else r
print('%.0f tok/s mfu %.3f step %.1f ms peak %.3f planned %.3f mb %s' % (r['tokens_per_s'], r['mfu'], r['step_ms_median'], r['peak_mem_gib'], r['planned_mem_gib'], r['micro_batch_size']))" 2>/dev/null || tail -2 $O/$name-$who.log)"
  done
done <<<"$cases"
echo "total $((SECONDS-T0)) s"

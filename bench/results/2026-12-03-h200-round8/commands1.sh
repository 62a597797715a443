#!/bin/bash
# device call 1 (9dbf85b): --fp8-param-gather on the 8b FP8 rows (weights cast once per optimizer
# step: the 16 micro-batches of a global batch of 16 read the kept FP8 weights), and qwen3-4b
# against llama3.2-3b in bf16 after the QK-norm weight-gradient change (MFU within 2 points?)
set -u
R=$OUT; O=/tmp/o1; mkdir -p $O; T0=$SECONDS; END=${END:-560}
trap 'cp $O/summary.txt $R/ 2>/dev/null; tar czf $R/all.tgz -C $O .' EXIT
[ -x build-gpu/dev/ljperf ] || { mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev; }
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" | tee -a $O/summary.txt; }
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
b() { # name timeout flags...
  local n=$1 t=$(left $2); shift 2
  [ "$t" -lt 20 ] && { say "$n skipped"; return; }
  timeout $t $d/ljperf benchmark "$@" --device cuda --no-progress --json $O/$n.json > $O/$n.log 2>&1
  say "$n rc=$? $((SECONDS-T0))s: $(python3 -c "
import json
r=json.load(open('$O/$n.json')); r=r[-1] if isinstance(r,list) else r
print('%.0f tok/s mfu %.3f step %.1f ms peak %.3f planned %.3f' % (r['tokens_per_s'], r['mfu'], r['step_ms_median'], r['peak_mem_gib'], r['planned_mem_gib']))" 2>/dev/null || tail -1 $O/$n.log)"
  grep -iE "recompute|param-gather" $O/$n.log | grep -v "^initialising" | cut -c1-240 | head -3 | tee -a $O/summary.txt
}
G="--model llama3.1-8b --seq-length 8192 --micro-batch-size 1 --global-batch-size 16 --recompute auto --fp8-format hybrid --train-iters 2 --warmup-iters 1"
b gbs16_fp8 110 $G
b gbs16_fp8_pg 110 $G --use-distributed-optimizer --fp8-param-gather
b q3b_bf16 60 --model llama3.2-3b --micro-batch-size 2 --train-iters 20
b q4b_bf16 60 --model qwen3-4b --micro-batch-size 2 --train-iters 20
b q8_fp8_pg 90 --model qwen3-8b --recompute auto --fp8-format hybrid --use-distributed-optimizer --fp8-param-gather --train-iters 8 --warmup-iters 2
say "total $((SECONDS-T0)) s"

#!/bin/bash
# device call 4 (e2a8f9b): the 1b and 3b rows A/B in one job, as before (f32 moments, the micro-batch
# of the goal table) and with bf16 moments and the planner's micro-batch (the optimizer step moves
# 8 bytes less per parameter; the memory freed may take a larger micro-batch)
set -u
R=$OUT; O=/tmp/o4; mkdir -p $O; T0=$SECONDS; END=${END:-560}
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
M="--use-distributed-optimizer --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
for p in "" "--fp8-format hybrid"; do
  t=${p:+fp8}; t=${t:-bf16}; pg=${p:+--fp8-param-gather}
  b 1b_${t} 60 --model llama3.2-1b --micro-batch-size 4 --train-iters 20 $p
  b 1b_${t}_m 70 --model llama3.2-1b --micro-batch-size auto --recompute auto --train-iters 20 $p $pg $M
  b 3b_${t} 60 --model llama3.2-3b --micro-batch-size 2 --train-iters 20 $p
  b 3b_${t}_m 70 --model llama3.2-3b --micro-batch-size auto --recompute auto --train-iters 20 $p $pg $M
done
say "total $((SECONDS-T0)) s"

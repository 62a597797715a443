#!/bin/bash
# device call 5 (0e53022): the ablation of the 8b row at seq 8192, global batch 16, with its new
# +BF16Moments row (FP8 with --fp8-param-gather; each row one warm-up and one timed step)
set -u
R=$OUT; O=/tmp/o5; mkdir -p $O; T0=$SECONDS; END=${END:-560}
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
timeout $(left 540) $d/ljperf benchmark --model llama3.1-8b --device cuda --seq-length 8192 --micro-batch-size 1 \
  --global-batch-size 16 --ablation --fp8-format hybrid --fp8-param-gather --use-distributed-optimizer \
  --train-iters 1 --warmup-iters 1 --no-progress --json $O/ablation.json > $O/ablation.log 2>&1
say "ablation rc=$? $((SECONDS-T0)) s"
grep -v "^initialising" $O/ablation.log | tail -14 | tee -a $O/summary.txt

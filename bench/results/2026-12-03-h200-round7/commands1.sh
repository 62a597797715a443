#!/bin/bash
# device call 1: --async-save during training after the host copy moved before the first step
# (llama3.2-1b and llama3.2-3b: each with and without saves, the same steps in one job)
set -u
R=$OUT; O=/tmp/o1; mkdir -p $O; T0=$SECONDS; END=${END:-560}
trap 'cp $O/summary.txt $R/ 2>/dev/null; tar czf $R/all.tgz -C $O .' EXIT
[ -x build-gpu/dev/ljperf ] || { mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev; }
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" | tee -a $O/summary.txt; }
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); host $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB; /dev/shm $(df -h /dev/shm | awk 'NR==2{print $2}')"
b() { # name timeout flags...
  local n=$1 t=$(left $2); shift 2
  [ "$t" -lt 20 ] && { say "$n skipped"; return; }
  timeout $t $d/ljperf benchmark "$@" --device cuda --no-progress --json $O/$n.json > $O/$n.log 2>&1
  say "$n rc=$? $((SECONDS-T0))s: $(python3 -c "
import json
r=json.load(open('$O/$n.json')); r=r[-1] if isinstance(r,list) else r
print('%.0f tok/s step median %.1f ms peak %.3f planned %.3f' % (r['tokens_per_s'], r['step_ms_median'], r['peak_mem_gib'], r['planned_mem_gib']))" 2>/dev/null || tail -1 $O/$n.log)"
  grep -iE "async-save|checkpoints \(|saved|iteration .* in " $O/$n.log | cut -c1-300 | head -8 | tee -a $O/summary.txt
}
b save_none_1b 80 --model llama3.2-1b --micro-batch-size 4 --train-iters 200 --warmup-iters 3
b save_async_1b 120 --model llama3.2-1b --micro-batch-size 4 --train-iters 200 --warmup-iters 3 --save /dev/shm/ck --save-interval 60 --async-save
du -sh /dev/shm/ck 2>/dev/null | tee -a $O/summary.txt; rm -rf /dev/shm/ck
b save_none_3b 110 --model llama3.2-3b --micro-batch-size 2 --train-iters 220 --warmup-iters 3
b save_async_3b 170 --model llama3.2-3b --micro-batch-size 2 --train-iters 220 --warmup-iters 3 --save /dev/shm/ck --save-interval 100 --async-save
du -sh /dev/shm/ck 2>/dev/null | tee -a $O/summary.txt; rm -rf /dev/shm/ck
say "total $((SECONDS-T0)) s"

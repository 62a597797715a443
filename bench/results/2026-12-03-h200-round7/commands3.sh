#!/bin/bash
# device call 3: A = c68f213 (build-gpu/dev), B = the QK-norm weight gradient over row parts x head
# groups and the --async-save copy without its host-side scan (build-gpu/devB): the qk_norm op
# checks on CUDA, then A and B in one job on the rows the change touches
set -u
R=$OUT; O=/tmp/o3; mkdir -p $O; T0=$SECONDS; END=${END:-560}
trap 'cp $O/summary.txt $R/ 2>/dev/null; tar czf $R/all.tgz -C $O .' EXIT
[ -x build-gpu/dev/ljperf ] || { mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev; }
[ -x build-gpu/devB/ljperf ] || { tar xJf .dev/binB.tar.xz -C build-gpu && rm -rf build-gpu/devB && mv build-gpu/binB build-gpu/devB; }
source scripts/gpu/gpu-env.sh
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" | tee -a $O/summary.txt; }
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
timeout 120 build-gpu/devB/test_ops_cuda check --op qk_norm > $O/ops_qknorm.log 2>&1
say "B test_ops_cuda check --op qk_norm rc=$? $(tail -2 $O/ops_qknorm.log | tr '\n' ' ')"
b() { # bin name timeout flags...
  local d=build-gpu/$1 n=$2 t=$(left $3); shift 3
  [ "$t" -lt 20 ] && { say "$n skipped"; return; }
  timeout $t $d/ljperf benchmark "$@" --device cuda --no-progress --json $O/$n.json > $O/$n.log 2>&1
  say "$n rc=$? $((SECONDS-T0))s: $(python3 -c "
import json
r=json.load(open('$O/$n.json')); r=r[-1] if isinstance(r,list) else r
s=r.get('samples_per_s')
print('%.0f tok/s%s mfu %.3f step median %.1f ms peak %.3f planned %.3f' % (r['tokens_per_s'], (' %.3f samples/s' % s) if s else '', r['mfu'], r['step_ms_median'], r['peak_mem_gib'], r['planned_mem_gib']))" 2>/dev/null || tail -1 $O/$n.log)"
}
b devB save_none_B 60 --model llama3.2-1b --micro-batch-size 4 --train-iters 130 --warmup-iters 3
b devB save_async_B 90 --model llama3.2-1b --micro-batch-size 4 --train-iters 130 --warmup-iters 3 --save /dev/shm/ck --save-interval 40 --async-save
grep -E "async-save|paused|checkpoints \(" $O/save_async_B.log | cut -c1-330 | tee -a $O/summary.txt
rm -rf /dev/shm/ck
b dev  q17_A 45 --model qwen3-1.7b --micro-batch-size 4 --train-iters 10 --warmup-iters 3
b devB q17_B 45 --model qwen3-1.7b --micro-batch-size 4 --train-iters 10 --warmup-iters 3
b devB vl8_B 80 --model qwen3-vl-8b --image-size 448 --text-tokens 512 --micro-batch-size 1 --global-batch-size 8 --train-iters 4 --warmup-iters 2
b dev  vl8_A 80 --model qwen3-vl-8b --image-size 448 --text-tokens 512 --micro-batch-size 1 --global-batch-size 8 --train-iters 4 --warmup-iters 2
b dev  q8_A 75 --model qwen3-8b --recompute auto --train-iters 6 --warmup-iters 2
b devB q8_B 75 --model qwen3-8b --recompute auto --train-iters 6 --warmup-iters 2
say "total $((SECONDS-T0)) s"

#!/bin/bash
# device call 1: the performance rows without a figure (optimizer offload at seq 32768 against the
# same run without it, --async-save during training) and where the headline FP8 row's time goes
# (Nsight Systems' kernel summary of llama3.1-8b seq 8192, global batch 16, FP8)
set -u
R=$OUT; O=/tmp/o1; mkdir -p $O; T0=$SECONDS; END=${END:-540}
trap 'cp $O/summary.txt $R/ 2>/dev/null; tar czf $R/all.tgz -C $O .' EXIT
[ -x build-gpu/dev/ljperf ] || { mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev; }
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" | tee -a $O/summary.txt; }
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) commit $(git rev-parse --short HEAD 2>/dev/null)"
say "host: $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB; /dev/shm $(df -h /dev/shm | awk 'NR==2{print $2}')"
b() { # name timeout flags...
  local n=$1 t=$(left $2); shift 2
  [ "$t" -lt 20 ] && { say "$n skipped"; return; }
  timeout $t $d/ljperf benchmark "$@" --device cuda --no-progress --json $O/$n.json > $O/$n.log 2>&1
  say "$n rc=$? $((SECONDS-T0))s: $(python3 -c "
import json
r=json.load(open('$O/$n.json')); r=r[-1] if isinstance(r,list) else r
print('%.0f tok/s mfu %.3f step %.1f ms peak %.3f planned %.3f' % (r['tokens_per_s'], r['mfu'], r['step_ms_median'], r['peak_mem_gib'], r['planned_mem_gib']))" 2>/dev/null || tail -1 $O/$n.log)"
  grep -iE "recompute planner|offload|checkpoints|initialis" $O/$n.log | cut -c1-400 | head -5 | tee -a $O/summary.txt
}
b noff32k 70 --model llama3.1-8b --seq-length 32768 --recompute auto --train-iters 2 --warmup-iters 1
b off32k 170 --model llama3.1-8b --seq-length 32768 --zero-stage 1 --offload-optimizer cpu --recompute auto --train-iters 2 --warmup-iters 1
b save_none 35 --model llama3.2-1b --micro-batch-size 4 --train-iters 60 --warmup-iters 3
b save_async 120 --model llama3.2-1b --micro-batch-size 4 --train-iters 60 --warmup-iters 3 --save /dev/shm/ck --save-interval 20 --async-save
du -sh /dev/shm/ck 2>/dev/null | tee -a $O/summary.txt; rm -rf /dev/shm/ck
if ! command -v nsys >/dev/null 2>&1; then
  for x in /usr/local/cuda/bin /opt/nvidia/nsight-systems/*/bin /usr/local/cuda/nsight-systems*/bin; do [ -x "$x/nsys" ] && { export PATH="$x:$PATH"; break; }; done
fi
if command -v nsys >/dev/null && [ $(left 170) -ge 120 ]; then
  timeout $(left 170) nsys profile -o $O/p8b --force-overwrite true -t cuda,nvtx --sample=none --cpuctxsw=none $d/ljperf benchmark --model llama3.1-8b --seq-length 8192 --micro-batch-size 1 --global-batch-size 16 --recompute auto --fp8-format hybrid --device cuda --train-iters 1 --warmup-iters 1 --no-progress --json $O/p8b.json > $O/nsys8b.log 2>&1
  say "nsys 8b gbs16 fp8 rc=$? $((SECONDS-T0))s $(grep -E '^tokens/s|^step time median' $O/nsys8b.log | tr -s ' ' | tr '\n' ' ')"
  timeout $(left 60) nsys stats --report cuda_gpu_kern_sum --format csv -o $O/k8b $O/p8b.nsys-rep > $O/nsys8b_stats.log 2>&1
  timeout $(left 30) nsys stats --report nvtx_sum --format csv -o $O/n8b $O/p8b.nsys-rep >> $O/nsys8b_stats.log 2>&1
  rm -f $O/p8b.nsys-rep $O/p8b.sqlite
  f=$(ls $O/k8b*.csv 2>/dev/null | head -1)
  [ -n "$f" ] && python3 scripts/gpu/ncu_summary.py $f 2 --groups | tee -a $O/summary.txt && python3 scripts/gpu/ncu_summary.py $f 2 | head -30 > $O/k8b_top.txt
fi
say "total $((SECONDS-T0)) s"

#!/bin/bash
# device call 2 (699fe03): accumulation rows, offload, async save, nsys kernel summary
set -u
O=/tmp/o; mkdir -p $O; T0=$SECONDS; END=470
trap 'tar czf $OUT/all.tgz -C $O .' EXIT
mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
b() { # name timeout flags...
  local n=$1 t=$(left $2); shift 2
  [ "$t" -lt 20 ] && { echo "$n skipped"; return; }
  timeout $t $d/ljperf benchmark "$@" --device cuda --no-progress --json $O/$n.json > $O/$n.log 2>&1
  echo "$n rc=$? $((SECONDS-T0))s: $(python3 -c "
import json
r=json.load(open('$O/$n.json')); r=r[-1] if isinstance(r,list) else r
print('%.0f tok/s mfu %.3f step %.1f ms peak %.3f planned %.3f mb %s gbs %s' % (r['tokens_per_s'], r['mfu'], r['step_ms_median'], r['peak_mem_gib'], r['planned_mem_gib'], r['micro_batch_size'], r.get('global_batch_size')))" 2>/dev/null || tail -1 $O/$n.log)"
  grep -iE "recompute|offload, ms|save|held" $O/$n.log | grep -v "^initialising" | head -4
}
b gbs16_fp8 100 --model llama3.1-8b --seq-length 8192 --micro-batch-size 1 --global-batch-size 16 --recompute auto --fp8-format hybrid --train-iters 2 --warmup-iters 1
b gbs16_bf16 110 --model llama3.1-8b --seq-length 8192 --micro-batch-size 1 --global-batch-size 16 --recompute auto --train-iters 2 --warmup-iters 1
b save_none 40 --model llama3.2-1b --micro-batch-size 4 --train-iters 60 --warmup-iters 3
b save_async 60 --model llama3.2-1b --micro-batch-size 4 --train-iters 60 --warmup-iters 3 --save /dev/shm/ck --save-interval 21 --async-save
rm -rf /dev/shm/ck
b off32k 80 --model llama3.1-8b --seq-length 32768 --zero-stage 1 --offload-optimizer cpu --recompute auto --train-iters 1 --warmup-iters 1
b noff32k 70 --model llama3.1-8b --seq-length 32768 --recompute auto --train-iters 2 --warmup-iters 1
if command -v nsys >/dev/null && [ $(left 60) -ge 50 ]; then
  timeout $(left 60) nsys profile -o $O/p1b --force-overwrite true -t cuda,nvtx $d/ljperf benchmark --model llama3.2-1b --micro-batch-size 4 --fp8-format hybrid --device cuda --train-iters 4 --warmup-iters 2 --no-progress > $O/nsys1b.log 2>&1
  nsys stats --report cuda_gpu_kern_sum --format csv -o $O/k1b $O/p1b.nsys-rep > /dev/null 2>&1; rm -f $O/p1b.nsys-rep $O/p1b.sqlite
  head -25 $O/k1b*.csv | cut -c1-200
fi
b q8_fp8 80 --model qwen3-8b --recompute auto --fp8-format hybrid --train-iters 8 --warmup-iters 2
echo "total $((SECONDS-T0)) s"

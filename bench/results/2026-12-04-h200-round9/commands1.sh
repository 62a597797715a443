set -u
mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv; df -B1G . /dev/shm; free -g; nproc; } > $OUT/machine.txt 2>&1; cat $OUT/machine.txt
# 1. the copy beside the next step: a save of iteration 2 written while step 3 runs equals the synchronous one, byte for byte
#    (graph path: one CUDA graph per step; accumulation path: the eager optimizer step)
c="$d/ljperf benchmark --model llama3.2-1b --device cuda --micro-batch-size 1 --seq-length 512 --deterministic-mode --warmup-iters 0 --train-iters 3 --save-interval 2 --no-progress"
for path in graph accum; do
  extra=""; [ $path = accum ] && extra="--global-batch-size 2"
  timeout 120 $c $extra --save /dev/shm/s_$path > $OUT/c_${path}_sync.log 2>&1; echo "$path sync rc=$?"
  timeout 120 $c $extra --save /dev/shm/a_$path --async-save > $OUT/c_${path}_async.log 2>&1; echo "$path async rc=$?"
  grep -h -E "async save|saved checkpoint|graph" $OUT/c_${path}_async.log | cut -c1-400
  if cmp /dev/shm/s_$path/iter_0000002/shard_00000_of_00001.bin /dev/shm/a_$path/iter_0000002/shard_00000_of_00001.bin; then
    echo "$path: iteration 2 shard files identical ($(stat -c %s /dev/shm/a_$path/iter_0000002/shard_00000_of_00001.bin) bytes)"
  else echo "$path: iteration 2 shard files DIFFER"; fi
  grep -h "step time\|tokens/s  " $OUT/c_${path}_async.log $OUT/c_${path}_sync.log
  rm -rf /dev/shm/s_$path /dev/shm/a_$path
done
# 2. llama3.2-1b mb 4 (the README's row): no saves, then --async-save every 100 steps; the same with bf16 moments
b="$d/ljperf benchmark --model llama3.2-1b --device cuda --micro-batch-size 4 --train-iters 220 --no-progress"
timeout 100 $b --json $OUT/1b_nosave.json > $OUT/1b_nosave.log 2>&1; echo "1b nosave rc=$?"
timeout 120 $b --save /dev/shm/ck --save-interval 100 --async-save --json $OUT/1b_async.json > $OUT/1b_async.log 2>&1; echo "1b async rc=$?"
rm -rf /dev/shm/ck
for f in 1b_nosave 1b_async; do echo "== $f"; grep -E "tokens/s  |step time|checkpoints|async save|saved checkpoint|graph" $OUT/$f.log | cut -c1-400; done

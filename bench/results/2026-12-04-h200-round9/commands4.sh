set -u
mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
# small downloads now written by a kernel into mapped pinned memory: the op checks read every result through them
for op in adamw cross_entropy global_norm; do
  timeout 100 $d/test_ops_cuda check --op $op > $OUT/check_$op.log 2>&1; echo "check $op rc=$? $(tail -1 $OUT/check_$op.log)"
done
# the FP8 state read before the copies; llama3.1-8b seq 8192 global batch 16 FP8 + --fp8-param-gather + bf16 moments:
# no saves, then one --async-save of the whole state at step 5 written beside steps 6-9
e="$d/ljperf benchmark --model llama3.1-8b --device cuda --seq-length 8192 --micro-batch-size 1 --global-batch-size 16 --recompute auto --fp8-format hybrid --fp8-param-gather --use-distributed-optimizer --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --warmup-iters 2 --train-iters 7 --no-progress"
timeout 200 $e --json $OUT/8b_nosave.json > $OUT/8b_nosave.log 2>&1; echo "8b nosave rc=$?"
timeout 330 $e --save ck8 --save-interval 5 --async-save --json $OUT/8b_async.json > $OUT/8b_async.log 2>&1; echo "8b async rc=$?"
du -sh ck8; rm -rf ck8
for f in 8b_nosave 8b_async; do echo "== $f"; grep -E "tokens/s  |step time|checkpoints|async save|saved checkpoint|peak memory" $OUT/$f.log | cut -c1-400; done
# where qwen3-4b's MFU goes against llama3.2-3b's (bf16, micro-batch 2): the kernels of 4 timed steps each
if command -v nsys >/dev/null 2>&1; then
  for m in llama3.2-3b qwen3-4b; do
    timeout 100 nsys profile -o $OUT/p_$m --force-overwrite true -t cuda,nvtx $d/ljperf benchmark --model $m --micro-batch-size 2 --device cuda --train-iters 4 --warmup-iters 2 --no-progress > $OUT/nsys_$m.log 2>&1
    nsys stats --report cuda_gpu_kern_sum --format csv -o $OUT/k_$m $OUT/p_$m.nsys-rep > /dev/null 2>&1; rm -f $OUT/p_$m.nsys-rep $OUT/p_$m.sqlite
    echo "$m: $(grep -E 'tokens/s  |MFU' $OUT/nsys_$m.log | tr -s ' ' | tr '\n' ' ')"
  done
else echo "no nsys"; fi

set -u
mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
timeout 120 $d/test_ops_cuda check --op adamw --verbose > $OUT/adamw_check.log 2>&1; echo "adamw rc=$? $(tail -1 $OUT/adamw_check.log)"
timeout 150 $d/ljperf benchmark --model llama3.2-1b --device cuda --micro-batch-size 4 --train-iters 10 --use-distributed-optimizer --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --no-progress --json $OUT/1b_m.json > $OUT/1b_m.log 2>&1; echo "1b rc=$?"; grep -E "tokens/s  |loss|peak" $OUT/1b_m.log

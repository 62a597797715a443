#!/bin/bash
# one device call: the new kernels' checks, serve offline bf16/FP8, Qwen3-VL on the GPU
set -u
O=$OUT
mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev
rm -rf .cache && tar xJf .dev/tok.tar.xz && mv cache .cache
source scripts/gpu/gpu-env.sh
export LJPERF_CACHE=$PWD/.cache
d=build-gpu/dev
T0=$SECONDS; END=565
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
echo "== ops checks"
for op in paged_attention paged_attention_fp8 fp8_rmsnorm rmsnorm residual_rmsnorm fp8_quantize fp8_swiglu fp8_matmul argmax_rows; do
  timeout $(left 60) $d/test_ops_cuda check --op $op > $O/check_$op.log 2>&1; echo "check $op rc=$? $(tail -1 $O/check_$op.log)"
done
for op in paged_attention fp8_rmsnorm; do
  timeout $(left 60) compute-sanitizer --tool memcheck $d/test_ops_cuda check --quick --op $op > $O/mc_$op.log 2>&1; echo "memcheck $op rc=$? $(grep 'ERROR SUMMARY' $O/mc_$op.log | tail -1)"
done
timeout $(left 40) $d/test_ops_cuda perf --op paged_attention > $O/perf_paged.log 2>&1; echo "perf paged rc=$?"; tail -12 $O/perf_paged.log
timeout $(left 40) $d/test_ops_cuda perf --op rmsnorm > $O/perf_rmsnorm.log 2>&1; echo "perf rmsnorm rc=$?"; tail -12 $O/perf_rmsnorm.log
echo "== serve 3 4 ($((SECONDS-T0)) s)"
mkdir -p $O/serve; OUT=$O/serve timeout $(left 230) bash scripts/gpu/gpu-serve.sh 3 4 > $O/serve.out 2>&1; echo "rc=$?"; cat $O/serve/table.txt; grep -iE "skipped|fail" $O/serve/summary.txt | head
echo "== vl 1 ($((SECONDS-T0)) s)"
mkdir -p $O/vl1; OUT=$O/vl1 STEPS=6 BUDGET=$(left 150) timeout $(left 160) bash scripts/gpu/gpu-vl.sh 1 > $O/vl1.out 2>&1; echo "rc=$?"; tail -25 $O/vl1/summary.txt
echo "== vl 3 ($((SECONDS-T0)) s)"
mkdir -p $O/vl3; OUT=$O/vl3 BENCH_MODELS=qwen3-vl-2b BENCH_SIZES=448 BUDGET=$(left 90) timeout $(left 100) bash scripts/gpu/gpu-vl.sh 3 > $O/vl3.out 2>&1; echo "rc=$?"; tail -12 $O/vl3/summary.txt
echo "total $((SECONDS-T0)) s"
tar czf /tmp/all.tgz -C $O . && mv /tmp/all.tgz $O/all.tgz

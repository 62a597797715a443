#!/bin/bash
# device call 3: the flash kernels' bidirectional segments, --fp8-param-gather's one-rank form,
# Qwen3-VL rows (new kernels, FP8, 8b), PyTorch 4b
set -u
R=$OUT; O=/tmp/o; mkdir -p $O; T0=$SECONDS; END=${END:-560}
trap 'cp $O/summary.txt $R/ 2>/dev/null; tar czf $R/all.tgz -C $O .' EXIT
mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev
rm -rf .cache && tar xJf .dev/tok.tar.xz && mv cache .cache; export LJPERF_CACHE=$PWD/.cache
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" | tee -a $O/summary.txt; }
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
timeout $(left 90) $d/test_ops_cuda check --op attention_varlen > $O/check_varlen.log 2>&1; say "check attention_varlen rc=$? ($((SECONDS-T0)) s) $(tail -1 $O/check_varlen.log)"
grep -E "FAIL" $O/check_varlen.log | head -5 | tee -a $O/summary.txt
timeout $(left 60) compute-sanitizer --tool memcheck $d/test_ops_cuda check --quick --op attention_varlen > $O/mc_varlen.log 2>&1; say "memcheck varlen rc=$? $(grep 'ERROR SUMMARY' $O/mc_varlen.log | tail -1)"
timeout $(left 40) $d/test_ops_cuda check --op attention_docs > $O/check_docs.log 2>&1; say "check attention_docs rc=$? $(tail -1 $O/check_docs.log)"
timeout $(left 40) $d/test_ops_cuda perf --op attention_varlen > $O/perf_varlen.log 2>&1; say "perf varlen rc=$?"; grep -iE "ms|speed" $O/perf_varlen.log | head -14 | tee -a $O/summary.txt
vl() { local n=$1 t=$2; shift 2; [ $(left $t) -ge 30 ] || { say "skip $n"; return; }
  timeout $(left $t) $d/ljperf benchmark "$@" --device cuda --text-tokens 512 --train-iters 8 --warmup-iters 3 --no-progress --json $O/$n.json > $O/$n.log 2>&1
  say "$n rc=$? ($((SECONDS-T0)) s) $(python3 -c "import json;r=json.load(open('$O/$n.json'));print('%.3f samples/s MFU %.1f%% %.1f GiB (planned %.1f) %s' % (r['samples_per_s'],100*r['mfu'],r['peak_mem_gib'],r['planned_mem_gib'],r.get('recompute')))" 2>/dev/null || tail -1 $O/$n.log)"; }
vl vl2b_448 50 --model qwen3-vl-2b --image-size 448
vl vl4b_448 60 --model qwen3-vl-4b --image-size 448
export OUT=$O/fp8p; mkdir -p $OUT
if [ $(left 170) -ge 150 ]; then timeout $(left 170) bash scripts/gpu/gpu-fp8-param.sh 1 2 4 > $O/fp8p.log 2>&1; say "gpu-fp8-param 1 2 4 rc=$? ($((SECONDS-T0)) s)"; tail -14 $O/fp8p/summary.txt 2>/dev/null | tee -a $O/summary.txt; fi
export OUT=$O
vl vl8b_448 75 --model qwen3-vl-8b --image-size 448
vl vl8b_448_fp8 75 --model qwen3-vl-8b --image-size 448 --fp8-format hybrid
if [ $(left 80) -ge 60 ]; then OUT=$O/vl5 timeout $(left 80) bash scripts/gpu/gpu-vl.sh 5 > $O/vl5.log 2>&1; say "gpu-vl 5 rc=$?"; tail -6 $O/vl5/summary.txt 2>/dev/null | tee -a $O/summary.txt; fi
if [ $(left 120) -ge 100 ]; then
  timeout $(left 120) python3 scripts/gpu/vl_pytorch_ref.py --model qwen3-vl-4b --image-size 448 --text-tokens 512 --train-iters 8 --warmup-iters 3 --mode compile --json $O/pt4b.json > $O/pt4b.log 2>&1
  say "torch compile 4b 448 rc=$? $(python3 -c "import json;r=json.load(open('$O/pt4b.json'));print('%.3f samples/s %.1f GiB' % (r['samples_per_s'],r['peak_mem_gib']))" 2>/dev/null || tail -1 $O/pt4b.log)"
fi
say "total $((SECONDS-T0)) s"

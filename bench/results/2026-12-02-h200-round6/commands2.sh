#!/bin/bash
# device call 2: qwen3-vl-4b at 1024x1024 against torch.compile (same job), and qwen3-vl-8b FP8
# against its bf16 under gradient accumulation (global batch 8, micro-batch 1)
set -u
R=$OUT; O=/tmp/o2; mkdir -p $O; T0=$SECONDS; END=${END:-560}
trap 'cp $O/summary.txt $R/ 2>/dev/null; tar czf $R/all.tgz -C $O .' EXIT
[ -x build-gpu/dev/ljperf ] || { mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev; }
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" | tee -a $O/summary.txt; }
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) commit $(git rev-parse --short HEAD 2>/dev/null)"
res() { python3 -c "import json;r=json.load(open('$1'));print('%.3f samples/s MFU %.1f%% step %.1f ms %.1f GiB' % (r['samples_per_s'],100*r['mfu'],r.get('step_ms_median',0),r['peak_mem_gib']) + (' (planned %.1f) %s' % (r['planned_mem_gib'], r.get('recompute')) if 'planned_mem_gib' in r else ''))" 2>/dev/null || tail -1 ${1%.json}.log; }
vl() { local n=$1 t=$2; shift 2; [ $(left $t) -ge 30 ] || { say "skip $n"; return; }
  timeout $(left $t) $d/ljperf benchmark "$@" --device cuda --text-tokens 512 --no-progress --json $O/$n.json > $O/$n.log 2>&1
  say "$n rc=$? ($((SECONDS-T0)) s) $(res $O/$n.json)"; }
pt() { local n=$1 t=$2; shift 2; [ $(left $t) -ge 60 ] || { say "skip $n"; return 1; }
  timeout $(left $t) python3 scripts/gpu/vl_pytorch_ref.py "$@" --text-tokens 512 --json $O/$n.json > $O/$n.log 2>&1
  local rc=$?; say "$n rc=$rc ($((SECONDS-T0)) s) $(res $O/$n.json)"; [ -s $O/$n.json ]; }
vl vl4b_1024 70 --model qwen3-vl-4b --image-size 1024 --recompute auto --train-iters 8 --warmup-iters 3
pt pt4b_1024_compile 220 --model qwen3-vl-4b --image-size 1024 --train-iters 8 --warmup-iters 3 --mode compile ||
  { grep -iE "out of memory|error" $O/pt4b_1024_compile.log | tail -2 | cut -c1-300 | tee -a $O/summary.txt
    pt pt4b_1024_compile_gc 200 --model qwen3-vl-4b --image-size 1024 --train-iters 8 --warmup-iters 3 --mode compile --gradient-checkpointing; }
vl vl8b_gbs8_bf16 75 --model qwen3-vl-8b --image-size 448 --micro-batch-size 1 --global-batch-size 8 --train-iters 4 --warmup-iters 2
vl vl8b_gbs8_fp8 75 --model qwen3-vl-8b --image-size 448 --micro-batch-size 1 --global-batch-size 8 --train-iters 4 --warmup-iters 2 --fp8-format hybrid
vl vl8b_mb1_bf16 50 --model qwen3-vl-8b --image-size 448 --train-iters 8 --warmup-iters 3
vl vl8b_mb1_fp8 50 --model qwen3-vl-8b --image-size 448 --train-iters 8 --warmup-iters 3 --fp8-format hybrid
say "total $((SECONDS-T0)) s"

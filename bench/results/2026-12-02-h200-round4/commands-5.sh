#!/bin/bash
# .dev/ holds what the build machine packed for the call: bin.tar.xz (stripped binaries from
# scripts/gpu/gpu-check.sh --prepare), tok.tar.xz (the set-up script's tokenizers), kjv.txt.xz
# device call 5: the ViT attention on cuDNN (gpu_vision_ops), Qwen3-VL rows old vs new binary, PyTorch
set -u
mkdir -p /tmp/o5
fin() { cp /tmp/o5/summary.txt $OUT/ 2>/dev/null; tar czf $OUT/all.tgz -C /tmp/o5 . ; }
trap fin EXIT
mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev
source scripts/gpu/gpu-env.sh
O=/tmp/o5; d=build-gpu/dev
T0=$SECONDS; END=${END:-290}
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" | tee -a $O/summary.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $O/summary.txt
timeout 60 $d/gpu_vision_ops > $O/gpu_vision_ops.log 2>&1; say "gpu_vision_ops rc=$? ($((SECONDS-T0)) s) $(grep -iE 'pass|fail|cudnn|ms' $O/gpu_vision_ops.log | tail -12 | tr '\n' ';')"
lj() { local b=$1 m=$2 px=$3; [ $(left 50) -ge 35 ] || { say "skip $b $m $px"; return; }
  timeout $(left 60) $d/$b benchmark --model $m --device cuda --image-size $px --text-tokens 512 --micro-batch-size 1 \
    --train-iters 10 --warmup-iters 3 --no-progress --json $O/${b}_${m}_$px.json > $O/${b}_${m}_$px.log 2>&1
  say "$b $m $px rc=$? ($((SECONDS-T0)) s) $(python3 -c "import json;r=json.load(open('$O/${b}_${m}_$px.json'));print('%.3f samples/s MFU %.1f%% %.1f GiB (planned %.1f)' % (r['samples_per_s'],100*r['mfu'],r['peak_mem_gib'],r['planned_mem_gib']))" 2>/dev/null)"
}
lj ljperf qwen3-vl-2b 1024
lj ljperf_old qwen3-vl-2b 1024
pt() { local m=$1 px=$2 mode=$3; [ $(left 110) -ge 80 ] || { say "skip torch $m $px $mode"; return; }
  timeout $(left 120) python3 scripts/gpu/vl_pytorch_ref.py --model $m --image-size $px --text-tokens 512 --micro-batch-size 1 \
    --train-iters 8 --warmup-iters 3 --mode $mode --json $O/pt_${m}_${px}_$mode.json > $O/pt_${m}_${px}_$mode.log 2>&1
  say "torch $mode $m $px rc=$? ($((SECONDS-T0)) s) $(python3 -c "import json;r=json.load(open('$O/pt_${m}_${px}_$mode.json'));print('%.3f samples/s MFU %.1f%% %.1f GiB alloc %.1f GiB device' % (r['samples_per_s'],100*r['mfu'],r['peak_mem_gib'],r['device_mem_used_gib']))" 2>/dev/null)"
}
pt qwen3-vl-2b 1024 compile
lj ljperf qwen3-vl-4b 448
lj ljperf qwen3-vl-2b 448
say "total $((SECONDS-T0)) s"

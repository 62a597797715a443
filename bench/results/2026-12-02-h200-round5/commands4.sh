#!/bin/bash
# device call 4: PyTorch qwen3-vl-8b with gradient checkpointing (bf16 parameters), ljperf 8b at 1024 with the planner
set -u
R=$OUT; O=/tmp/o4; mkdir -p $O; T0=$SECONDS; END=225
trap 'cp $O/summary.txt $R/ 2>/dev/null; tar czf $R/all.tgz -C $O .' EXIT
[ -x build-gpu/dev/ljperf ] || { mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev; }
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" | tee -a $O/summary.txt; }
timeout $(left 150) python3 scripts/gpu/vl_pytorch_ref.py --model qwen3-vl-8b --image-size 448 --text-tokens 512 --train-iters 5 --warmup-iters 2 --mode eager --dtype bf16 --gradient-checkpointing --json $O/pt8b.json > $O/pt8b.log 2>&1
say "torch eager bf16 GC 8b 448 rc=$? ($((SECONDS-T0)) s) $(python3 -c "import json;r=json.load(open('$O/pt8b.json'));print('%.3f samples/s %.1f GiB' % (r['samples_per_s'],r['peak_mem_gib']))" 2>/dev/null || tail -2 $O/pt8b.log)"
if [ $(left 70) -ge 55 ]; then
timeout $(left 70) $d/ljperf benchmark --model qwen3-vl-8b --image-size 1024 --text-tokens 512 --recompute auto --device cuda --train-iters 5 --warmup-iters 2 --no-progress --json $O/vl8b_1024.json > $O/vl8b_1024.log 2>&1
say "ljperf 8b 1024 auto rc=$? ($((SECONDS-T0)) s) $(python3 -c "import json;r=json.load(open('$O/vl8b_1024.json'));print('%.3f samples/s MFU %.1f%% %.1f GiB (planned %.1f) %s' % (r['samples_per_s'],100*r['mfu'],r['peak_mem_gib'],r['planned_mem_gib'],r.get('recompute')))" 2>/dev/null || tail -1 $O/vl8b_1024.log)"
fi
say "total $((SECONDS-T0)) s"

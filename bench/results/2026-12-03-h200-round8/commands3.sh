#!/bin/bash
# device call 3 (e2a8f9b): bf16 AdamW moments' convergence: llama3.2-1b on the first 16 MB of GCIDE
# (`head -c 16000000 .cache/data/gcide.txt | xz -9 > .gpudata/gcide16m.txt.xz`, about 4M tokens; the
# Llama 3 tokenizer.json carried as .gpudata/llama3-tokenizer.json.xz), seq 512, micro-batch 4, 2,000 steps, lr 3e-4 cosine to 3e-5 after
# 100 warm-up steps (the FP8 gate's set-up), four runs side by side on the one GPU: bf16 with f32
# moments (the reference), bf16 with bf16 moments, FP8 delayed with f32 moments, FP8 delayed with
# --fp8-param-gather and bf16 moments (the 8b rows' set-up). All with --use-distributed-optimizer.
set -u
R=$OUT; O=/tmp/o3; mkdir -p $O; T0=$SECONDS; END=${END:-560}
trap 'cp $O/summary.txt $R/ 2>/dev/null; tar czf $R/all.tgz -C $O .' EXIT
[ -x build-gpu/dev/ljperf ] || { mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev; }
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
say() { echo "$*" | tee -a $O/summary.txt; }
xz -dc .gpudata/gcide16m.txt.xz > /tmp/gcide.txt; xz -dc .gpudata/llama3-tokenizer.json.xz > /tmp/tokenizer.json
$d/ljperf prepare --input /tmp/gcide.txt --split-on blank-line --utf8-errors replace --output-prefix /tmp/conv \
  --tokenizer /tmp/tokenizer.json --quiet > $O/prepare.log 2>&1 || { say "prepare failed: $(tail -2 $O/prepare.log)"; exit 1; }
say "prepared in $((SECONDS-T0)) s"
conv=(--model llama3.2-1b --data-path /tmp/conv --seq-length 512 --micro-batch-size 4 --train-iters ${STEPS:-2000}
      --lr 3e-4 --min-lr 3e-5 --lr-warmup-iters 100 --log-interval 100 --eval-iters 8 --seed 1234 --device cuda
      --use-distributed-optimizer)
M="--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
declare -A F=([bf16]="" [bf16_m]="$M" [fp8]="--fp8-format hybrid" [fp8_pg_m]="--fp8-format hybrid --fp8-param-gather $M")
pids=()
for n in bf16 bf16_m fp8 fp8_pg_m; do
  timeout $((END - 30 - (SECONDS - T0))) $d/ljperf train "${conv[@]}" ${F[$n]} --log-json $O/conv_$n.jsonl > $O/conv_$n.log 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait $p; say "run $p rc=$? at $((SECONDS-T0)) s"; done
python3 - $O <<'PY' | tee -a $O/summary.txt
import json, sys
out = sys.argv[1]
names = ["bf16", "bf16_m", "fp8", "fp8_pg_m"]
runs = {n: [r for r in map(json.loads, filter(str.strip, open("%s/conv_%s.jsonl" % (out, n)))) if "loss" in r] for n in names}
val = {n: [r for r in map(json.loads, filter(str.strip, open("%s/conv_%s.jsonl" % (out, n)))) if "validation_loss" in r] for n in names}
steps = min(len(r) for r in runs.values())
print("iterations each: " + ", ".join("%s %d" % (n, len(runs[n])) for n in names))
print("window | " + " | ".join(names))
for a in range(0, steps, max(100, steps // 5 // 100 * 100)):
    b = min(a + 100, steps)
    ms = [sum(r["loss"] for r in runs[n][a:b]) / (b - a) for n in names]
    print("%d-%d | " % (a + 1, b) + " | ".join("%.4f (%+.2f%%)" % (m, 100 * (m - ms[0]) / ms[0]) for m in ms))
a = steps - 100
ms = [sum(r["loss"] for r in runs[n][a:steps]) / 100 for n in names]
print("last 100 (%d-%d) | " % (a + 1, steps) + " | ".join("%.4f (%+.2f%%)" % (m, 100 * (m - ms[0]) / ms[0]) for m in ms))
print("validation | " + " | ".join("%s" % (val[n][-1]["validation_loss"] if val[n] else "-") for n in names))
PY
say "total $((SECONDS-T0)) s"

set -u
mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
# after the pieces are coalesced into one copy per tensor: llama3.1-8b seq 8192, global batch 16, FP8 + --fp8-param-gather + bf16 moments (the README's row): no saves, then one
# --async-save of the whole state (64 GB: master f32, moments bf16) at step 5, written beside steps 6-9
avail=$(df -B1G --output=avail . | tail -1 | tr -d ' '); echo "disk: $avail GiB available"
e="$d/ljperf benchmark --model llama3.1-8b --device cuda --seq-length 8192 --micro-batch-size 1 --global-batch-size 16 --recompute auto --fp8-format hybrid --fp8-param-gather --use-distributed-optimizer --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --warmup-iters 2 --train-iters 7 --no-progress"
timeout 200 $e --json $OUT/8b_nosave.json > $OUT/8b_nosave.log 2>&1; echo "8b nosave rc=$?"
if [ "$avail" -ge 62 ]; then
  timeout 330 $e --save ck8 --save-interval 5 --async-save --json $OUT/8b_async.json > $OUT/8b_async.log 2>&1; echo "8b async rc=$?"
  ls -la ck8/iter_0000005 2>&1 | head; du -sh ck8; rm -rf ck8
else echo "8b async: skipped, the disk holds $avail GiB"; fi
for f in 8b_nosave 8b_async; do echo "== $f"; grep -E "tokens/s  |step time|checkpoints|async save|saved checkpoint|peak memory|graph" $OUT/$f.log | cut -c1-400; done
python3 - $OUT <<'PY'
import json, sys, os
def walk(o, pre=""):
    if isinstance(o, dict):
        for k, v in o.items(): walk(v, pre + k + ".")
    elif any(w in pre for w in ("tokens_per_s", "step_ms", "save", "peak")):
        print("  ", pre[:-1], o)
for f in ("8b_nosave", "8b_async"):
    p = os.path.join(sys.argv[1], f + ".json")
    if os.path.exists(p): print(f); walk(json.load(open(p)))
PY

#!/bin/bash
# device call 3: Qwen3-VL's FP8 numerics gate (qwen3-vl-8b, 1,000 steps on real photographs and real
# text, FP8 delayed against bf16 from the same seed and data) and the loader's wait with one worker
set -u
R=$OUT; O=/tmp/o3; mkdir -p $O; T0=$SECONDS; END=${END:-570}
trap 'cp $O/summary.txt $R/ 2>/dev/null; tar czf $R/all.tgz -C $O .' EXIT
[ -x build-gpu/dev/ljperf ] || { mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev; }
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" | tee -a $O/summary.txt; }
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) commit $(git rev-parse --short HEAD 2>/dev/null); host $(nproc) cores, $(lscpu | grep 'Model name' | cut -c22-)"
G=/tmp/gate; mkdir -p $G; tar xJf .dev/gate.tar.xz -C $G
python3 scripts/gpu/vl_gate_data.py $G/images $G/kjv.txt 1200 $G/gate.jsonl | tee -a $O/summary.txt
OMP_NUM_THREADS=1 $d/ljperf prepare --input $G/gate.jsonl --image-root $G/images --tokenizer $G/tokenizer.json \
  --max-pixels 200704 --output-prefix $G/gate > $O/prepare.log 2>&1; say "prepare (one thread) rc=$?: $(grep -E 'samples|images|tokens|seconds' $O/prepare.log | tr -s ' ' | tr '\n' ';')"
gate() { # name timeout model iters workers flags...
  local n=$1 t=$2 m=$3 it=$4 w=$5; shift 5
  [ $(left $t) -ge 60 ] || { say "skip $n"; return; }
  timeout $(left $t) $d/ljperf train --model $m --data-path $G/gate --seq-length 640 --micro-batch-size 1 --train-iters $it \
    --lr 1e-4 --min-lr 1e-5 --lr-warmup-iters 50 --lr-decay-style cosine --lr-decay-iters $it --seed 7 --num-workers $w \
    --device cuda --log-interval 1 --log-json $O/$n.jsonl "$@" > $O/$n.log 2>&1
  say "$n rc=$? ($((SECONDS-T0)) s): $(grep -c '"loss"' $O/$n.jsonl 2>/dev/null) iterations; $(grep -E '^loader:' $O/$n.log)"
  grep -iE "error|memory plan \(" $O/$n.log | tail -2 | cut -c1-300 | tee -a $O/summary.txt
}
gate loader2b 60 qwen3-vl-2b 300 1
gate gate8b_bf16 245 qwen3-vl-8b 1000 1
gate gate8b_fp8 245 qwen3-vl-8b 1000 1 --fp8-format hybrid
python3 - $O <<'PY' | tee -a $O/summary.txt
import json, sys
o = sys.argv[1]
def read(n):
    try: return [j for j in map(json.loads, open("%s/%s.jsonl" % (o, n))) if "loss" in j and "iteration" in j]
    except OSError: return []
b, f = read("gate8b_bf16"), read("gate8b_fp8")
for name, r in (("bf16", b), ("fp8", f), ("2b loader", read("loader2b"))):
    if r:
        w = [j.get("loader_wait_ms", 0) for j in r[1:]]
        print("%s: %d iterations, step median %.1f ms, loader wait after the first: mean %.3f ms, max %.3f ms" % (name, len(r), sorted(j["iteration_ms"] for j in r)[len(r)//2], sum(w)/max(len(w),1), max(w or [0])))
if len(b) == len(f) == 1000:
    for lo, hi in ((1, 100), (401, 500), (901, 1000)):
        mb = sum(j["loss"] for j in b[lo-1:hi]) / (hi - lo + 1); mf = sum(j["loss"] for j in f[lo-1:hi]) / (hi - lo + 1)
        print("iterations %d-%d mean loss: bf16 %.4f FP8 %.4f (%+.2f%%)" % (lo, hi, mb, mf, 100 * (mf - mb) / mb))
    print("every loss finite: %s" % all(abs(j["loss"]) < 1e9 for j in b + f))
PY
say "total $((SECONDS-T0)) s"

#!/usr/bin/env bash
# gpu-observe.sh: what a person watching a run sees, checked on a GPU machine whose Python has
# `tensorboard`, `transformers` and `torch` (repo root, $OUT set; carry .deb, build-gpu/dev,
# .cache/tokenizer and .cache/data/kjv.txt; build here first with `bash scripts/gpu/gpu-check.sh
# --prepare`). Steps, full logs in $OUT, a short summary last:
#   1. llama3-tiny trained on the KJV Bible on the GPU with --tensorboard-dir, read back with
#      TensorBoard's EventAccumulator: every tag at every step (scripts/gpu/tb_check.py); the
#      start record of --log-json names the GPU, and `ljperf report` draws the log and the event
#      files side by side ($OUT/report.html);
#   2. what the event-file writer costs: the same run at --log-interval 1 with and without
#      --tensorboard-dir, twice each, alternating; median ms per iteration from --log-json;
#   3. the checkpoint's Hugging Face export in transformers: AutoTokenizer, GenerationConfig
#      and pipeline("text-generation") (scripts/gpu/hf_pipeline_check.py), against ljperf's own
#      tokenizer ids and greedy continuation;
#   4. progress of a long checkpoint save and load: llama3.2-1b's state (about 15 GB on rank 0)
#      written and read back, stderr to a file (plain progress lines with MB/s and time left).
# Usage: bash scripts/gpu/gpu-observe.sh [steps...]   (default: 1 2 3 4)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/out/gpu-observe}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
lj=build-gpu/dev/ljperf
steps=${*:-1 2 3 4}
ITERS=${ITERS:-200}
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
say "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ -x "$lj" ] || { say "no $lj: run bash scripts/gpu/gpu-check.sh --prepare on the build machine"; exit 1; }
python3 -c 'import tensorboard, transformers; print("tensorboard", tensorboard.__version__, "transformers", transformers.__version__)' \
  2>&1 | tee -a "$summary"

"$lj" prepare --input .cache/data/kjv.txt --split-on blank-line --output-prefix /tmp/kjv \
  --tokenizer .cache/tokenizer/llama3/tokenizer.json >"$OUT/prepare.log" 2>&1 || { say "prepare failed"; exit 1; }
common=(--model llama3-tiny --device cuda --data-path /tmp/kjv --seq-length 128 --micro-batch-size 8
        --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 10 --eval-iters 8 --seed 1234
        --tokenizer-model .cache/tokenizer/llama3/tokenizer.json)

for s in $steps; do
  case $s in
  1)
    rm -rf "$OUT/tb" "$OUT/ckpt"
    timeout 200 "$lj" train "${common[@]}" --train-iters "$ITERS" --log-interval 10 --eval-interval 50 \
      --tensorboard-dir "$OUT/tb" --log-json "$OUT/train.jsonl" --save "$OUT/ckpt" >"$OUT/train.log" 2>&1
    say "1a. train --tensorboard-dir rc=$? $(ls "$OUT/tb" | head -1) ($(du -b "$OUT"/tb/* | cut -f1 | head -1) bytes)"
    timeout 120 python3 scripts/gpu/tb_check.py "$OUT/tb" "$OUT/train.jsonl" --log-interval 10 >"$OUT/tb_check.log" 2>&1
    say "1b. TensorBoard reads it: rc=$? $(grep -E 'PASS|FAIL' "$OUT/tb_check.log" | head -5 | tr '\n' ' ')"
    say "1c. start record: $(head -1 "$OUT/train.jsonl" | grep -oE '"(backend|device|devices|precision)":[^,]*' | tr '\n' ' ')"
    "$lj" report "$OUT/train.jsonl" "$OUT/tb" --output "$OUT/report.html" >"$OUT/report.log" 2>&1
    say "1d. report of the log and its event files: rc=$? $(grep -o '([0-9]* runs, [0-9] of 5 charts with data)' "$OUT/report.log")"
    ;;
  2)
    for k in 1 2; do
      for mode in off on; do
        extra=()
        [ "$mode" = on ] && extra=(--tensorboard-dir "$OUT/tb_cost_$k")
        timeout 120 "$lj" train "${common[@]}" --train-iters 500 --log-interval 1 --eval-iters 0 "${extra[@]}" \
          --log-json "$OUT/cost_${mode}_$k.jsonl" --quiet >"$OUT/cost_${mode}_$k.log" 2>&1
      done
    done
    python3 - "$OUT" >"$OUT/cost.txt" 2>&1 <<'PY'
import json, statistics, sys
out = sys.argv[1]
def med(mode):
    v = []
    for k in (1, 2):
        v += [json.loads(l)["step_ms"] for l in open(f"{out}/cost_{mode}_{k}.jsonl") if '"loss"' in l][20:]
    return statistics.median(v), len(v)
(off, n), (on, _) = med("off"), med("on")
print(f"median ms per iteration over {n} iterations: without event files {off:.4f}, with {on:.4f} "
      f"({(on - off) * 1e3:+.1f} us, {(on / off - 1) * 100:+.2f}%)")
PY
    say "2. writer cost at --log-interval 1: $(cat "$OUT/cost.txt")"
    ;;
  3)
    hf=$(ls -d "$OUT"/ckpt/iter_*/hf 2>/dev/null | tail -1)
    [ -n "$hf" ] || { say "3. no checkpoint (step 1 first)"; continue; }
    say "3a. export files: $(ls "$hf" | tr '\n' ' ')"
    prompt="In the beginning God created"
    "$lj" generate --load "$OUT/ckpt" --prompt "$prompt" --temperature 0 --max-new-tokens 24 --device cuda \
      >"$OUT/generate.txt" 2>"$OUT/generate.log"
    say "3b. ljperf generate rc=$?: $(head -c 300 "$OUT/generate.txt")"
    # ljperf's own token ids of the prompt: prepare writes them (EOS appended) as int32
    printf '%s' "$prompt" >/tmp/prompt.txt
    "$lj" prepare --input /tmp/prompt.txt --output-prefix /tmp/prompt --tokenizer "$hf/tokenizer.json" >/dev/null 2>&1
    ids=$(python3 -c 'import struct,sys; b=open("/tmp/prompt.bin","rb").read(); t=struct.unpack("<%di"%(len(b)//4),b)[:-1]; print(",".join(map(str,(128000,)+t)))' 2>/dev/null)
    timeout 300 python3 scripts/gpu/hf_pipeline_check.py "$hf" --prompt "$prompt" --max-new-tokens 24 \
      ${ids:+--expect-ids "$ids"} --expect-text "$(cat "$OUT/generate.txt")" >"$OUT/hf_pipeline.log" 2>&1
    say "3c. transformers on the export: rc=$? $(grep -E 'PASS|FAIL|same|differs' "$OUT/hf_pipeline.log" | tr '\n' ' ')"
    ;;
  4)
    rm -rf /tmp/ckpt1b
    one=(--model llama3.2-1b --device cuda --data-path /tmp/kjv --seq-length 1024 --micro-batch-size 1 --eval-iters 0
         --tokenizer-model .cache/tokenizer/llama3/tokenizer.json)
    timeout 400 "$lj" train "${one[@]}" --train-iters 1 --save /tmp/ckpt1b >"$OUT/save1b.out" 2>"$OUT/save1b.log"
    say "4a. llama3.2-1b save rc=$?: $(grep -E 'writing .*: [0-9]+%|writing .* in |saved checkpoint' "$OUT/save1b.log" | tail -4 | tr '\n' ' ')"
    timeout 400 "$lj" train "${one[@]}" --train-iters 2 --load /tmp/ckpt1b >"$OUT/load1b.out" 2>"$OUT/load1b.log"
    say "4b. llama3.2-1b load rc=$?: $(grep -E 'reading .*: [0-9]+%|reading .* in |resumed from' "$OUT/load1b.log" | tail -4 | tr '\n' ' ')"
    rm -rf /tmp/ckpt1b
    ;;
  esac
done
say "done in $SECONDS s"

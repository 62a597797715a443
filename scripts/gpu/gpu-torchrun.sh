#!/usr/bin/env bash
# gpu-torchrun.sh: `ljperf train` started by PyTorch's own torchrun on a GPU machine (repo root,
# $OUT set; carry .deb, build-gpu/dev, .cache/tokenizer, .cache/data/kjv.txt; PyTorch installed
# there). torchrun's agent store listens on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), so
# this checks that the ranks bootstrap on the next port and train. Steps (default: all):
#   one    torchrun --nproc-per-node 1 --no-python ljperf train ...: the run ends, and its losses
#          equal the same run started without a launcher;
#   many   torchrun --nproc-per-node N (N = the GPUs, at least 2): the losses equal the same run
#          started by ljperf's own launcher (--nproc-per-node N);
#   local  torchrun --nproc-per-node N with --local_rank=0 on every rank, as the DeepSpeed launcher
#          passes it: refused, naming the disagreement with LOCAL_RANK (N >= 2).
# Usage: bash scripts/gpu/gpu-torchrun.sh [step...]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-out/gpu-torchrun}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
lj=$PWD/build-gpu/dev/ljperf
steps=${*:-one many local}
gpus=$(nvidia-smi -L | wc -l)
python3 -c "import torch; print('torch', torch.__version__)"
[ -f /tmp/kjv.idx ] || "$lj" prepare --input .cache/data/kjv.txt --split-on blank-line --output-prefix /tmp/kjv \
  >/dev/null || { echo "prepare failed"; exit 1; }
common=(--model llama3-tiny --device cuda --data-path /tmp/kjv --seq-length 256 --micro-batch-size 4
        --global-batch-size 16 --train-iters 20 --lr 3e-3 --lr-warmup-iters 5 --seed 5 --log-interval 5
        --eval-iters 2 --grad-dtype fp32)
torchrun() { python3 -m torch.distributed.run --master-port 29511 "$@"; }
# iteration and loss of each training line (validation lines have no 'loss'); fails on no lines
losses() { python3 -c "import json,sys;r=[json.loads(l) for l in open(sys.argv[1])];r=[x for x in r if 'loss' in x];assert r;[print(x['iteration'],x['loss']) for x in r]" "$1"; }
same() { if a=$(losses "$1") && b=$(losses "$2") && [ "$a" = "$b" ]; then echo "$3: losses equal"; else echo "$3: LOSSES DIFFER"; paste <(losses "$1") <(losses "$2") | head -20; fi; }
for s in $steps; do
  case $s in
  one)
    "$lj" train "${common[@]}" --log-json "$OUT/plain.jsonl" >"$OUT/plain.log" 2>&1; echo "plain: rc=$?"
    torchrun --nproc-per-node 1 --no-python "$lj" train "${common[@]}" --log-json "$OUT/torchrun1.jsonl" \
      >"$OUT/torchrun1.log" 2>&1
    echo "torchrun --nproc-per-node 1: rc=$? $(grep -c '^iteration' "$OUT/torchrun1.log") log lines"
    same "$OUT/plain.jsonl" "$OUT/torchrun1.jsonl" "torchrun 1 rank vs no launcher"
    ;;
  many)
    [ "$gpus" -ge 2 ] || { echo "many: one GPU here, skipped"; continue; }
    "$lj" train "${common[@]}" --nproc-per-node "$gpus" --log-json "$OUT/own$gpus.jsonl" >"$OUT/own$gpus.log" 2>&1
    echo "ljperf --nproc-per-node $gpus: rc=$?"
    torchrun --nproc-per-node "$gpus" --no-python "$lj" train "${common[@]}" --log-json "$OUT/torchrun$gpus.jsonl" \
      >"$OUT/torchrun$gpus.log" 2>&1
    echo "torchrun --nproc-per-node $gpus: rc=$?"
    same "$OUT/own$gpus.jsonl" "$OUT/torchrun$gpus.jsonl" "torchrun $gpus ranks vs ljperf's launcher"
    ;;
  local)
    [ "$gpus" -ge 2 ] || { echo "local: one GPU here, skipped"; continue; }
    torchrun --nproc-per-node 2 --no-python "$lj" train "${common[@]}" --local_rank=0 >"$OUT/local.log" 2>&1
    echo "torchrun with a wrong --local_rank: rc=$? (want non-zero): $(grep -m1 'local_rank' "$OUT/local.log")"
    ;;
  esac
done

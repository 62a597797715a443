#!/usr/bin/env bash
# profile-8b.sh: where the time of a llama3-8b step goes (repo root, $OUT set; carry .deb and
# build-gpu/dev). Steps (default: all, in this order):
#   layers  1 GPU: llama3-8b-shaped models (config.json with 2, 4 and 8 layers), seq 4096,
#           micro-batch 2 (the 2-GPU ZeRO-3 benchmark's per-rank work), one-graph step; the
#           difference between the 8- and 4-layer step times is the time of 4 layers, so
#           per-layer time and per-layer MFU (the compute ceiling of a 32-layer step);
#   ncu     the same with 2 layers under Nsight Compute (gpu__time_duration per kernel, clocks
#           left alone), summed by kernel name over the timed step: the per-kernel breakdown;
#   nccl    `deepspeed/llama3-8b --nproc-per-node 2` (ZeRO-3, mb 2) once per NCCL setting in
#           NCCL_VARIANTS (';'-separated lists of VAR=value, "-" for NCCL's defaults), with the
#           SM clock and power sampled by nvidia-smi: what the communication kernels cost
#           the GEMMs they overlap with.
# Usage: bash scripts/gpu/profile-8b.sh [step...]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-out/profile-8b}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
dev=build-gpu/dev
lj=$dev/ljperf
steps=${*:-layers ncu nccl}
cfg() { # cfg L: a llama3-8b config.json with L layers
  local f=$OUT/llama3-8b-L$1.json
  cat >"$f" <<EOF
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
 "intermediate_size": 14336, "num_hidden_layers": $1, "num_attention_heads": 32, "num_key_value_heads": 8,
 "head_dim": 128, "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
 "tie_word_embeddings": false, "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"}
EOF
  echo "$f"
}
for s in $steps; do
  case $s in
  layers)
    for L in 2 4 8; do
      timeout 120 "$lj" benchmark --model "$(cfg $L)" --device cuda --seq-length 4096 --micro-batch-size 2 \
        --train-iters 10 --warmup-iters 3 --no-progress --json "$OUT/layers_$L.json" >"$OUT/layers_$L.log" 2>&1
      echo "L=$L: rc=$? $(grep -E '^step time median|^tokens/s  ' "$OUT/layers_$L.log" | tr -s ' ' | tr '\n' ' ')"
    done
    python3 - "$OUT" <<'PY'
import json, sys
d = sys.argv[1]
t = {}
for L in (2, 4, 8):
    try:
        r = json.load(open("%s/layers_%d.json" % (d, L)))
        t[L] = r["step_ms_median"]
    except Exception as e:
        print("L=%d: no result (%s)" % (L, e))
if 4 in t and 8 in t:
    per = (t[8] - t[4]) / 4
    # FLOPs of one layer per step (the benchmark's convention: 6 x matmul params + 12 d s per token)
    N, d, s = 218103808, 4096, 4096
    fl = (6 * N + 12 * d * s) * 2 * 4096
    print("per layer %.2f ms (%.0f TFLOP/s, %.1f%% of 989); 32 layers %.0f ms; rest of the 8-layer step %.1f ms"
          % (per, fl / per / 1e9, fl / per / 1e9 / 9.89, 32 * per, t[8] - 8 * per))
PY
    ;;
  ncu)
    ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
      "$lj" benchmark --model "$(cfg 2)" --device cuda --seq-length 4096 --micro-batch-size 2 --train-iters 1 \
      --warmup-iters 1 --no-progress >"$OUT/ncu_L2.csv" 2>"$OUT/ncu_L2.err"
    echo "ncu: rc=$?"
    python3 scripts/gpu/ncu_summary.py "$OUT/ncu_L2.csv" 2
    ;;
  nccl)
    IFS=';' read -ra variants <<<"${NCCL_VARIANTS:--;NCCL_MAX_CTAS=8;NCCL_CTA_POLICY=1}"
    i=0
    for v in "${variants[@]}"; do
      i=$((i + 1))
      envs=(); [ "$v" != "-" ] && read -ra envs <<<"$v"
      nvidia-smi --query-gpu=index,clocks.sm,power.draw --format=csv,noheader -lms 1000 >"$OUT/smi_$i.csv" 2>/dev/null &
      smi=$!
      env "${envs[@]}" timeout 240 "$lj" benchmark --model deepspeed/llama3-8b --device cuda --nproc-per-node 2 \
        --seq-length 4096 --micro-batch-size 2 --train-iters 6 --warmup-iters 2 --no-progress \
        --json "$OUT/nccl_$i.json" >"$OUT/nccl_$i.log" 2>&1
      rc=$?
      kill $smi 2>/dev/null
      clk=$(awk -F', ' '$1==0 {gsub(/ MHz/,"",$2); gsub(/ W/,"",$3); if ($2+0 > 0) {n++; c+=$2; p+=$3}} END {if (n) printf "SM %.0f MHz, %.0f W (mean of %d s)", c/n, p/n, n}' "$OUT/smi_$i.csv")
      echo "8b ZeRO-3 [$v]: rc=$rc $(grep -E '^tokens/s per device|^step time median' "$OUT/nccl_$i.log" | tr -s ' ' | tr '\n' ' ') $clk"
    done
    ;;
  esac
done

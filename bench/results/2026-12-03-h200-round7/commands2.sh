#!/bin/bash
# device call 2: where the time goes, per kernel (Nsight Compute, gpu__time_duration, clocks left
# alone), for the rows whose goal is not met: llama3.1-8b-shaped (2 layers) at seq 8192, micro-batch 1,
# bf16 and FP8 delayed; qwen3-vl-8b at 448x448 + 512 text tokens, micro-batch 1, bf16 and FP8
set -u
R=$OUT; O=/tmp/o2; mkdir -p $O; T0=$SECONDS; END=${END:-560}
trap 'cp $O/summary.txt $R/ 2>/dev/null; tar czf $R/all.tgz -C $O .' EXIT
[ -x build-gpu/dev/ljperf ] || { mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev; }
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" | tee -a $O/summary.txt; }
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); ncu $(ncu --version | tail -1)"
cat > $O/llama8b-L2.json <<J
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
 "intermediate_size": 14336, "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 8,
 "head_dim": 128, "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
 "tie_word_embeddings": false, "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"}
J
p() { # name timeout flags...: ncu over warm-up 1 + 1 timed step
  local n=$1 t=$(left $2); shift 2
  [ "$t" -lt 30 ] && { say "$n skipped"; return; }
  timeout $t ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    $d/ljperf benchmark "$@" --device cuda --train-iters 1 --warmup-iters 1 --no-progress > $O/$n.csv 2> $O/$n.err
  say "== $n rc=$? $((SECONDS-T0))s"
  python3 scripts/gpu/ncu_summary.py $O/$n.csv 2 --groups | tee -a $O/summary.txt
  python3 scripts/gpu/ncu_summary.py $O/$n.csv 2 | head -25 > $O/${n}_top.txt
  xz -T2 $O/$n.csv
}
p l8b_bf16 90 --model $O/llama8b-L2.json --seq-length 8192 --micro-batch-size 1
p l8b_fp8 90 --model $O/llama8b-L2.json --seq-length 8192 --micro-batch-size 1 --fp8-format hybrid
p vl8b_bf16 170 --model qwen3-vl-8b --image-size 448 --text-tokens 512 --micro-batch-size 1
p vl8b_fp8 170 --model qwen3-vl-8b --image-size 448 --text-tokens 512 --micro-batch-size 1 --fp8-format hybrid
say "total $((SECONDS-T0)) s"

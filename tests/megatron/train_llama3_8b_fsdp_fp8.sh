#!/bin/bash
# Megatron-LM's Llama 3 8B FP8 pre-training under Megatron-FSDP
# (examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh: parameters, gradients and optimizer
# state sharded over the 8 GPUs of one node, FP8, and with NSYS_PROFILE=1 an Nsight Systems
# capture of a profile window with the memory history), rewritten for ljperf: every argument of
# the original is passed as it is, and its launch
#     $VENV_PREFIX "${PROFILE_CMD[@]}" python -m torch.distributed.run ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ...
# is
#     "${PROFILE_CMD[@]}" ljperf train ${DISTRIBUTED_ARGS[@]} ...
# (ljperf train takes torchrun's flags itself; there is no Python environment to enter).
#
# Arguments: CHECKPOINT_PATH DATA TOKENIZER NSYS_PROFILE_PATH TENSORBOARD_LOGS_PATH (DATA or
# TOKENIZER "MOCK", or an empty TOKENIZER: synthetic documents). LJPERF names the binary
# (default: ljperf on PATH). The shape and the run's lengths may come from the environment (the
# test suite shrinks them); the defaults are the original's. EXTRA_ARGS is appended.

CHECKPOINT_PATH=${1:-"checkpoints/llama3_8b_fsdp_fp8"}
DATA_ARG=${2:-"MOCK"}
TOKENIZER_ARG=${3:-"MOCK"}
NSYS_PROFILE_PATH=${4:-"nsys_profiles/llama3_8b_fsdp_fp8"}
TENSORBOARD_LOGS_PATH=${5:-"tensorboard_logs/llama3_8b_fsdp_fp8"}
LJPERF=${LJPERF:-ljperf}

mkdir -p "$(dirname "$CHECKPOINT_PATH")" "$(dirname "$NSYS_PROFILE_PATH")" "$(dirname "$TENSORBOARD_LOGS_PATH")"

# one node of GPUS_PER_NODE ranks
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
NUM_NODES=1
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=${MASTER_PORT:-29500}
NODE_RANK=${NODE_RANK:-0}

NSYS_PROFILE=${NSYS_PROFILE:-0}   # 1: run under nsys, with the profile window and the memory history

USE_MEGATRON_FSDP=${USE_MEGATRON_FSDP:-1}
SHARDING_STRATEGY=${SHARDING_STRATEGY:-"optim_grads_params"}
TP_SIZE=1
CP_SIZE=1
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}
GLOBAL_BATCH_SIZE=${GLOBAL_BATCH_SIZE:-128}
NUM_LAYERS=${NUM_LAYERS:-32}
SEQ_LENGTH=${SEQ_LENGTH:-8192}
MAX_POSITION_EMBEDDINGS=${MAX_POSITION_EMBEDDINGS:-8192}
DTYPE=${DTYPE:-fp8}

# the original keeps Megatron's dataset index cache here; ljperf builds its sample order in memory
DATA_CACHE_PATH="${PWD}/benchmark_cache_llama3_8b_fsdp_fp8"
mkdir -p "$DATA_CACHE_PATH"

DISTRIBUTED_ARGS=(
    --nproc_per_node "$GPUS_PER_NODE"
    --nnodes "$NUM_NODES"
    --node_rank "$NODE_RANK"
    --master_addr "$MASTER_ADDR"
    --master_port "$MASTER_PORT"
)

MODEL_ARGS=(
    --use-mcore-models
    --num-layers "$NUM_LAYERS"
    --hidden-size "${HIDDEN_SIZE:-4096}"
    --ffn-hidden-size "${FFN_HIDDEN_SIZE:-14336}"
    --num-attention-heads "${NUM_HEADS:-32}"
    --group-query-attention
    --num-query-groups "${NUM_QUERY_GROUPS:-8}"
    --kv-channels "${KV_CHANNELS:-128}"
    --seq-length "$SEQ_LENGTH"
    --max-position-embeddings "$MAX_POSITION_EMBEDDINGS"
    --position-embedding-type rope
    --rotary-base 1000000
    --rotary-percent 1.0
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --swiglu
    --normalization RMSNorm
    --init-method-std 0.0134
    --attention-backend fused
    --apply-layernorm-1p
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)

TRAINING_ARGS=(
    --micro-batch-size "$MICRO_BATCH_SIZE"
    --global-batch-size "$GLOBAL_BATCH_SIZE"
    --train-samples "${TRAIN_SAMPLES:-1953125000}"
    --lr-decay-samples "${LR_DECAY_SAMPLES:-1949218748}"
    --lr-warmup-samples "${LR_WARMUP_SAMPLES:-3906252}"
    --lr 0.00015
    --min-lr 0.00001
    --decoupled-lr 5.0e-4
    --decoupled-min-lr 4.5e-5
    --lr-decay-style cosine
    --clip-grad 1.0
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --bf16
    --cross-entropy-loss-fusion
    --no-check-for-nan-in-loss-and-grad
    --manual-gc
    --empty-unused-memory-level 1
    --exit-duration-in-mins 235
)

# Megatron-FSDP: the sharding strategy (ljperf: the ZeRO stage it names) and its buffer options
if [ "$USE_MEGATRON_FSDP" = 1 ]; then
    unset CUDA_DEVICE_MAX_CONNECTIONS
    TRAINING_ARGS+=(
        --use-megatron-fsdp
        --data-parallel-sharding-strategy "$SHARDING_STRATEGY"
        --no-gradient-accumulation-fusion
        --calculate-per-token-loss
        --init-model-with-meta-device
        --ckpt-format fsdp_dtensor
        --use-nccl-ub
        --fsdp-double-buffer
        --fsdp-manual-registration
    )
fi

# FP8: one string per flag and value, word-split at the launch as in the original
DTYPE_ARGS=()
if [[ "$DTYPE" == "fp8" ]]; then
    DTYPE_ARGS+=(
        "--fp8-format hybrid"
        "--fp8-amax-history-len 1024"
        "--fp8-amax-compute-algo max"
        "--fp8-param-gather"
    )
fi

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size "$TP_SIZE"
    --context-parallel-size "$CP_SIZE"
    --sequence-parallel
)

DDP_ARGS=(
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAINING_ARGS+=("${DDP_ARGS[@]}")

# The data, as in the original (the split's quotes stay inside the value)
if [[ "$TOKENIZER_ARG" == "MOCK" || "$DATA_ARG" == "MOCK" || -z "$TOKENIZER_ARG" ]]; then
    DATA_ARGS_LIST=(
        "--mock-data"
        "--tokenizer-type NullTokenizer"
        "--vocab-size ${VOCAB_SIZE:-128256}"
        "--data-cache-path ${DATA_CACHE_PATH}"
        "--tiktoken-pattern v2"
        "--split '99,1,0'"
        "--no-create-attention-mask-in-dataloader"
        "--no-mmap-bin-files"
        "--num-workers 1"
    )
else
    DATA_ARGS_LIST=(
        "--data-path $DATA_ARG"
        "--tokenizer-type HuggingFaceTokenizer"
        "--tokenizer-model $TOKENIZER_ARG"
        "--data-cache-path ${DATA_CACHE_PATH}"
        "--split '99,1,0'"
        "--no-create-attention-mask-in-dataloader"
        "--no-mmap-bin-files"
        "--num-workers 1"
        "--vocab-size ${VOCAB_SIZE:-128256}"
    )
fi

EVAL_AND_LOGGING_ARGS=(
    --log-interval 1
    --eval-iters "${EVAL_ITERS:-32}"
    --eval-interval "${EVAL_INTERVAL:-100}"
    --save-interval "${SAVE_INTERVAL:-1000}"
    --log-throughput
    --logging-level 20
    --distributed-timeout-minutes 60
    --save "$CHECKPOINT_PATH"
    --load "$CHECKPOINT_PATH"
    --tensorboard-dir "$TENSORBOARD_LOGS_PATH"
)

# Nsight Systems: the capture starts and stops with the profile window (cudaProfilerApi)
if [ "$NSYS_PROFILE" = 1 ]; then
    TRAINING_ARGS+=(
        --profile
        --profile-step-start "${PROFILE_STEP_START:-8}"
        --profile-step-end "${PROFILE_STEP_END:-12}"
        --profile-ranks 0
        --record-memory-history
    )
    PROFILE_CMD=(
        nsys profile
        --sample=none --cpuctxsw=none
        --trace=cuda,nvtx,cublas,cudnn
        --capture-range=cudaProfilerApi --capture-range-end=stop
        --cuda-graph-trace=node --cuda-memory-usage=true
        -f true -x true -o "$NSYS_PROFILE_PATH"
    )
else
    PROFILE_CMD=()
fi

if ! command -v "$LJPERF" >/dev/null 2>&1; then
    echo "error: $LJPERF not found: put ljperf on PATH or set LJPERF to the binary" >&2
    exit 1
fi

# shellcheck disable=SC2068 # the arrays are word-split on purpose, as in the original
"${PROFILE_CMD[@]}" "$LJPERF" train ${DISTRIBUTED_ARGS[@]} \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS_LIST[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]} \
    ${EXTRA_ARGS:-}

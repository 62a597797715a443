#!/bin/bash
# Megatron-LM's Llama 3 8B FP8 pre-training launch (examples/llama/train_llama3_8b_h100_fp8.sh:
# 8 GPUs of one node, FP8 hybrid with delayed scaling, the distributed optimizer, a profile
# window), rewritten for ljperf: every argument of the original is passed as it is, and the launch
#     torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ...
# is
#     ljperf train ${DISTRIBUTED_ARGS[@]} ...
# (ljperf train takes torchrun's flags itself: --nproc_per_node N starts the N ranks.)
#
# Arguments: CHECKPOINT_PATH TENSORBOARD_LOGS_PATH TOKENIZER DATA (TOKENIZER or DATA "MOCK", or an
# empty TOKENIZER: synthetic documents). LJPERF names the binary (default: ljperf on PATH).
# The shape and the run's lengths may come from the environment (the test suite shrinks them);
# the defaults are the original's. EXTRA_ARGS is appended to the arguments.

export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}

CHECKPOINT_PATH=${1:-"checkpoints/llama3_8b_fp8"}
TENSORBOARD_LOGS_PATH=${2:-"tensorboard_logs/llama3_8b_fp8"}
TOKENIZER_ARG=${3:-"MOCK"}
DATA_ARG=${4:-"MOCK"}
LJPERF=${LJPERF:-ljperf}

mkdir -p "$(dirname "$CHECKPOINT_PATH")" "$(dirname "$TENSORBOARD_LOGS_PATH")"

# one node of GPUS_PER_NODE ranks
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
NUM_NODES=1
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=${MASTER_PORT:-29500}
NODE_RANK=${NODE_RANK:-0}

TP_SIZE=1
CP_SIZE=1
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}
GLOBAL_BATCH_SIZE=${GLOBAL_BATCH_SIZE:-128}
NUM_LAYERS=${NUM_LAYERS:-32}
SEQ_LENGTH=${SEQ_LENGTH:-8192}
MAX_POSITION_EMBEDDINGS=${MAX_POSITION_EMBEDDINGS:-8192}
DTYPE=${DTYPE:-fp8}

# the original keeps Megatron's dataset index cache here; ljperf builds its sample order in memory
DATA_CACHE_PATH="${PWD}/benchmark_cache_llama3_8b_fp8"
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
    --grad-reduce-in-bf16
    --cross-entropy-loss-fusion
    --calculate-per-token-loss
    --manual-gc
    --empty-unused-memory-level 1
    --exit-duration-in-mins 235
)

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

# The data: synthetic documents, or a Megatron indexed dataset with its Hugging Face tokenizer.
# The split is written with its quotes inside the string, as in the original: they reach the
# program as part of the value.
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
    --profile
    --profile-step-start "${PROFILE_STEP_START:-4}"
    --profile-step-end "${PROFILE_STEP_END:-6}"
    --ckpt-format torch_dist
    --distributed-timeout-minutes 60
    --save "$CHECKPOINT_PATH"
    --load "$CHECKPOINT_PATH"
    --tensorboard-dir "$TENSORBOARD_LOGS_PATH"
)

if ! command -v "$LJPERF" >/dev/null 2>&1; then
    echo "error: $LJPERF not found: put ljperf on PATH or set LJPERF to the binary" >&2
    exit 1
fi

# shellcheck disable=SC2068 # the arrays are word-split on purpose, as in the original
"$LJPERF" train ${DISTRIBUTED_ARGS[@]} \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS_LIST[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]} \
    ${EXTRA_ARGS:-}

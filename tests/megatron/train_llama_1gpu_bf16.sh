#!/bin/bash
# A Megatron-LM launch script for a small Llama-3-style model, laid out as Megatron-LM's own
# examples/llama scripts are (argument groups in arrays, one launch line at the end), whose
# launch line
#     python -m torch.distributed.run ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
# became
#     ljperf train \
# Arguments: CHECKPOINT_PATH TENSORBOARD_LOGS_PATH TOKENIZER_MODEL DATA_PATH (DATA_PATH "MOCK":
# synthetic documents); LJPERF names the binary (default: ljperf on PATH). The sizes may come
# from the environment so that the test suite can shrink them; EXTRA_ARGS appends arguments.

CHECKPOINT_PATH=${1:-checkpoints/llama_small}
TENSORBOARD_LOGS_PATH=${2:-tensorboard_logs/llama_small}
TOKENIZER_MODEL=${3:-tokenizer}
DATA_PATH=${4:-MOCK}
LJPERF=${LJPERF:-ljperf}

GPUS_PER_NODE=1
MASTER_ADDR=localhost
MASTER_PORT=6000
NUM_NODES=1

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)

LLAMA_MODEL_ARGS=(
    --use-mcore-models
    --num-layers ${NUM_LAYERS:-12}
    --hidden-size ${HIDDEN_SIZE:-2048}
    --ffn-hidden-size ${FFN_HIDDEN_SIZE:-5504}
    --num-attention-heads ${NUM_HEADS:-16}
    --group-query-attention
    --num-query-groups ${NUM_QUERY_GROUPS:-4}
    --kv-channels ${KV_CHANNELS:-128}
    --seq-length ${SEQ_LENGTH:-2048}
    --max-position-embeddings ${MAX_POSITION_EMBEDDINGS:-8192}
    --position-embedding-type rope
    --rotary-base 500000
    --rotary-percent 1.0
    --use-rope-scaling
    --rope-scaling-factor ${ROPE_SCALING_FACTOR:-32}
    --normalization RMSNorm
    --norm-epsilon 1e-5
    --swiglu
    --disable-bias-linear
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --attention-backend auto
    --transformer-impl transformer_engine
    --no-masked-softmax-fusion
    --attention-softmax-in-fp32
)

TRAINING_ARGS=(
    --micro-batch-size ${MICRO_BATCH_SIZE:-16}
    --global-batch-size ${GLOBAL_BATCH_SIZE:-64}
    --train-samples ${TRAIN_SAMPLES:-32000000}
    --lr-warmup-samples ${WARMUP_SAMPLES:-32000}
    --lr-decay-samples ${DECAY_SAMPLES:-32000000}
    --lr 3.0e-3
    --min-lr 3.0e-4
    --lr-decay-style cosine
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --init-method-std 0.02
    --clip-grad 1.0
    --bf16
    --grad-reduce-in-bf16
    --cross-entropy-loss-fusion
    --calculate-per-token-loss
    --manual-gc
    --empty-unused-memory-level 1
    --exit-duration-in-mins 230
    --seed ${SEED:-1234}
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 1
    --context-parallel-size 1
    --sequence-parallel
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)

if [[ "$DATA_PATH" == "MOCK" ]]; then
    DATA_ARGS=(
        --mock-data
        --tokenizer-type NullTokenizer
        --vocab-size 128256
        --split 99,1,0
        --no-create-attention-mask-in-dataloader
        --num-workers 1
    )
else
    DATA_ARGS=(
        --data-path $DATA_PATH
        --tokenizer-type HuggingFaceTokenizer
        --tokenizer-model $TOKENIZER_MODEL
        --split 949,50,1
        --no-mmap-bin-files
        --num-workers 1
    )
fi

EVAL_AND_LOGGING_ARGS=(
    --log-interval 1
    --log-throughput
    --eval-interval ${EVAL_INTERVAL:-1000}
    --eval-iters ${EVAL_ITERS:-10}
    --save-interval ${SAVE_INTERVAL:-10000}
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --tensorboard-dir $TENSORBOARD_LOGS_PATH
    --log-timers-to-tensorboard
    --distributed-timeout-minutes 60
    ${EXTRA_ARGS:-}
)

"$LJPERF" train \
    ${LLAMA_MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]}

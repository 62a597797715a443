/* megatron.c: Megatron-LM's pretrain_gpt.py arguments for `ljperf train` (megatron.h). */
#include "cli/megatron.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "data/mmidx.h"
#include "data/tokenizer.h"

/* Arguments that tune PyTorch, Transformer Engine or Megatron internals: accepted, and listed at
 * start-up with the reason they change nothing in ljperf. ival: the values each takes. */
static const lj_flag k_ignored[] = {
    {.kind = LJ_FLAG_SECTION, .help = "accepted and ignored (each is listed at start-up with its reason):"},
    {.name = "--use-mcore-models", .kind = LJ_FLAG_IGNORED, .help = "ljperf has one model implementation (Megatron-Core and legacy are PyTorch code paths)"},
    {.name = "--use-legacy-models", .kind = LJ_FLAG_IGNORED, .help = "ljperf has one model implementation (Megatron-Core and legacy are PyTorch code paths)"},
    {.name = "--transformer-impl", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "ljperf runs its own kernels, not Transformer Engine's or PyTorch's"},
    {.name = "--attention-backend", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "attention is always fused flash attention (cuDNN's or ljperf's kernel on GPUs)"},
    {.name = "--use-flash-attn", .kind = LJ_FLAG_IGNORED, .help = "attention is always fused flash attention"},
    {.name = "--attention-softmax-in-fp32", .kind = LJ_FLAG_IGNORED, .help = "the attention softmax is always computed in fp32"},
    {.name = "--cross-entropy-loss-fusion", .kind = LJ_FLAG_IGNORED, .help = "lm_head and cross-entropy are always fused (--no-fusion turns every fusion off)"},
    {.name = "--cross-entropy-fusion-impl", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "lm_head and cross-entropy are always fused by ljperf's own kernel"},
    {.name = "--no-masked-softmax-fusion", .kind = LJ_FLAG_IGNORED, .help = "a PyTorch fusion switch; ljperf's fusions are all on (--no-fusion turns them off)"},
    {.name = "--no-bias-gelu-fusion", .kind = LJ_FLAG_IGNORED, .help = "there are no biases and no GeLU in ljperf's Llama"},
    {.name = "--no-bias-swiglu-fusion", .kind = LJ_FLAG_IGNORED, .help = "a PyTorch fusion switch; ljperf's SwiGLU is always fused (--no-fusion turns it off)"},
    {.name = "--no-bias-dropout-fusion", .kind = LJ_FLAG_IGNORED, .help = "there are no biases and no dropout in ljperf's Llama"},
    {.name = "--no-rope-fusion", .kind = LJ_FLAG_IGNORED, .help = "a PyTorch fusion switch; ljperf applies RoPE in its own kernel"},
    {.name = "--no-gradient-accumulation-fusion", .kind = LJ_FLAG_IGNORED, .help = "weight gradients always accumulate in the GEMM (cuBLASLt beta = 1)"},
    {.name = "--no-persist-layer-norm", .kind = LJ_FLAG_IGNORED, .help = "an Apex kernel choice; ljperf has its own RMSNorm kernels"},
    {.name = "--no-async-tensor-model-parallel-allreduce", .kind = LJ_FLAG_IGNORED, .help = "there is no tensor parallelism to overlap"},
    {.name = "--tp-comm-overlap", .kind = LJ_FLAG_IGNORED, .help = "there is no tensor parallelism to overlap"},
    {.name = "--manual-gc", .kind = LJ_FLAG_IGNORED, .help = "Python's garbage collector; ljperf allocates nothing in the training loop"},
    {.name = "--manual-gc-interval", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "Python's garbage collector; ljperf allocates nothing in the training loop"},
    {.name = "--empty-unused-memory-level", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "PyTorch's caching allocator; ljperf's memory is one static plan, allocated once"},
    {.name = "--distributed-backend", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "ljperf talks NCCL between GPUs and MPI between CPU ranks"},
    {.name = "--overlap-grad-reduce", .kind = LJ_FLAG_IGNORED, .help = "ZeRO stages 0 and 1 all-reduce the gradients after the backward; stages 2 and 3 (--zero-stage) reduce them during it, overlapped by default"},
    {.name = "--overlap-param-gather", .kind = LJ_FLAG_IGNORED, .help = "ZeRO-1 all-gathers the parameters after the step; ZeRO-3 (--zero-stage 3) prefetches them during the forward"},
    {.name = "--sequence-parallel", .kind = LJ_FLAG_IGNORED, .help = "it splits activations over tensor-parallel ranks; at tensor parallel size 1 (the only one ljperf runs) Megatron-LM turns it off too"},
    {.name = "--num-workers", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "the loader reads memory-mapped datasets in the training process: no worker processes"},
    {.name = "--data-cache-path", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "ljperf builds its sample order in memory at start-up: nothing is cached"},
    {.name = "--no-mmap-bin-files", .kind = LJ_FLAG_IGNORED, .help = "datasets are always memory-mapped"},
    {.name = "--mmap-bin-files", .kind = LJ_FLAG_IGNORED, .help = "datasets are always memory-mapped"},
    {.name = "--no-create-attention-mask-in-dataloader", .kind = LJ_FLAG_IGNORED, .help = "ljperf builds no mask tensor: the causal mask is implicit"},
    {.name = "--dataloader-type", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "the loader always cycles through epochs, reshuffled per epoch from --seed"},
    {.name = "--tiktoken-pattern", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "only TikTokenizer reads it"},
    {.name = "--log-throughput", .kind = LJ_FLAG_IGNORED, .help = "every log line has tokens/s and TFLOP/s per GPU"},
    {.name = "--log-params-norm", .kind = LJ_FLAG_IGNORED, .help = "the parameter norm is not computed (the gradient norm is logged)"},
    {.name = "--log-num-zeros-in-grad", .kind = LJ_FLAG_IGNORED, .help = "not computed"},
    {.name = "--log-world-size-to-tensorboard", .kind = LJ_FLAG_IGNORED, .help = "not written (the world size is in the start-up lines)"},
    {.name = "--log-loss-scale-to-tensorboard", .kind = LJ_FLAG_IGNORED, .help = "loss-scale is always written (1: bf16 needs no loss scaling)"},
    {.name = "--timing-log-level", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "Megatron's timers; iteration-time is always logged"},
    {.name = "--timing-log-option", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "Megatron's timers; iteration-time is always logged"},
    {.name = "--use-pytorch-profiler", .kind = LJ_FLAG_IGNORED, .help = "ljperf has no PyTorch profiler (no TensorBoard trace is written): --profile brackets its window with cudaProfilerStart/Stop and NVTX ranges, for nsys"},
    {.name = "--use-nccl-ub", .kind = LJ_FLAG_IGNORED, .help = "NCCL user-buffer registration: ljperf's collectives run on the memory plan's device buffers, unregistered"},
    {.name = "--fsdp-manual-registration", .kind = LJ_FLAG_IGNORED, .help = "NCCL user-buffer registration of Megatron-FSDP's buffers: ljperf registers none"},
    {.name = "--fsdp-double-buffer", .kind = LJ_FLAG_IGNORED, .help = "Megatron-FSDP's persistent double buffers: ZeRO-3's gather and gradient buffers are fixed slots of the memory plan, allocated once"},
    {.name = "--calculate-per-token-loss", .kind = LJ_FLAG_IGNORED, .help = "the loss is always the mean over every token of the global batch"},
    {.name = "--rerun-mode", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "Megatron's re-run state machine; the same step always gives the same result here"},
    {.name = "--exit-signal-handler", .kind = LJ_FLAG_IGNORED, .help = "always on: SIGTERM or SIGINT saves a checkpoint (with --save) and exits"},
    {.name = "--no-save-optim", .kind = LJ_FLAG_IGNORED, .help = "checkpoints always keep the optimizer state for an exact resume (each one's hf/ export holds the weights alone)"},
    {.name = "--no-save-rng", .kind = LJ_FLAG_IGNORED, .help = "ljperf's random state is the seed and the data position: nothing more is saved"},
    {.name = "--no-load-rng", .kind = LJ_FLAG_IGNORED, .help = "ljperf's random state is the seed and the data position: nothing more is loaded"},
    {.name = "--use-checkpoint-args", .kind = LJ_FLAG_IGNORED, .help = "a resume checks the model against the checkpoint's config.json (without shape flags the model is the checkpoint's)"},
    {.name = "--init-model-with-meta-device", .kind = LJ_FLAG_IGNORED, .help = "ljperf never materialises a model twice: the memory plan allocates it once, where it runs"},
    {.name = "--use-dist-ckpt", .kind = LJ_FLAG_IGNORED, .help = "the sharded format is the default (--ckpt-format torch_dist)"},
    {.name = "--auto-detect-ckpt-format", .kind = LJ_FLAG_IGNORED, .help = "ljperf reads its own format and Hugging Face directories"},
    {.name = "--ckpt-fully-parallel-save", .kind = LJ_FLAG_IGNORED, .help = "always: every rank writes its own shard file at the same time"},
    {.name = "--ckpt-fully-parallel-load", .kind = LJ_FLAG_IGNORED, .help = "always: every rank reads the byte ranges it needs"},
    {.name = "--ckpt-assume-constant-structure", .kind = LJ_FLAG_IGNORED, .help = "a torch_dist option; ljperf writes its own format"},
    {.name = "--dist-ckpt-strictness", .kind = LJ_FLAG_IGNORED, .ival = 1, .help = "a torch_dist option; ljperf reads its own format"},
    {.kind = LJ_FLAG_SECTION, .help = "refused (the run stops and says why):"},
    {.name = "--fp16", .kind = LJ_FLAG_REFUSED, .help = "ljperf trains in bf16 on GPUs (fp32 on the CPU) and has no fp16 loss scaling: use --bf16"},
    {.name = "--fp16-lm-cross-entropy", .kind = LJ_FLAG_REFUSED, .help = "ljperf has no fp16 recipe: use --bf16"},
    {.name = "--loss-scale", .kind = LJ_FLAG_REFUSED, .ival = 1, .help = "loss scaling is for fp16, which ljperf does not train in: use --bf16"},
    {.name = "--initial-loss-scale", .kind = LJ_FLAG_REFUSED, .ival = 1, .help = "loss scaling is for fp16, which ljperf does not train in: use --bf16"},
    {.name = "--num-layers-per-virtual-pipeline-stage", .kind = LJ_FLAG_REFUSED, .ival = 1, .help = "ljperf has no pipeline parallelism (data parallelism with ZeRO stages 0-3 only)"},
    {.name = "--use-torch-fsdp2", .kind = LJ_FLAG_REFUSED, .help = "use --zero-stage 3: ZeRO-3 shards parameters, gradients and optimizer state as FSDP does"},
    {.name = "--num-experts", .kind = LJ_FLAG_REFUSED, .ival = 1, .help = "ljperf trains dense models only (no mixture of experts)"},
    {.name = "--vocab-extra-ids", .kind = LJ_FLAG_REFUSED, .ival = 1, .help = "extra sentinel ids are for T5-style models"},
};

void lj_cli_megatron_init(lj_cli_megatron *m) {
    memset(m, 0, sizeof *m);
    m->num_layers = m->hidden_size = m->ffn_hidden_size = m->num_attention_heads = -1;
    m->num_query_groups = m->kv_channels = m->max_position_embeddings = m->vocab_size = -1;
    m->make_vocab_size_divisible_by = 128;
    m->logging_level = -1;
    m->rotary_base = m->rotary_percent = m->rope_scaling_factor = m->norm_epsilon = NAN;
    m->init_method_std = m->attention_dropout = m->hidden_dropout = NAN;
    m->train_samples = m->lr_decay_samples = m->lr_warmup_samples = m->lr_wsd_decay_samples = -1;
    m->lr_wsd_decay_iters = -1;
    m->lr_warmup_fraction = m->lr_warmup_init = m->exit_duration_in_mins = NAN;
    m->decoupled_lr = m->decoupled_min_lr = NAN;
    m->tensor_parallel = m->pipeline_parallel = m->context_parallel = m->expert_parallel = 1;
    m->distributed_timeout_minutes = -1;
    m->local_rank = -1;
    m->profile_step_start = 10; /* Megatron-LM's defaults */
    m->profile_step_end = 12;
}

int lj_cli_megatron_rows(lj_cli_megatron *m, lj_flag *rows, int max) {
    const lj_flag own[] = {
        {.kind = LJ_FLAG_SECTION, .help = "model shape (instead of --model; Megatron's defaults apply):"},
        {.name = "--num-layers", .kind = LJ_FLAG_INT, .dest = &m->num_layers, .help = "N  num_hidden_layers", .min = 1},
        {.name = "--hidden-size", .kind = LJ_FLAG_INT, .dest = &m->hidden_size, .help = "H  hidden_size", .min = 1},
        {.name = "--ffn-hidden-size", .kind = LJ_FLAG_INT, .dest = &m->ffn_hidden_size, .help = "F  intermediate_size (default with --swiglu: int(4H*2/3/64)*64)", .min = 1},
        {.name = "--num-attention-heads", .kind = LJ_FLAG_INT, .dest = &m->num_attention_heads, .help = "A  num_attention_heads", .min = 1},
        {.name = "--group-query-attention", .kind = LJ_FLAG_SWITCH, .dest = &m->group_query_attention, .ival = 1, .help = "use --num-query-groups (else one KV head per head)"},
        {.name = "--num-query-groups", .kind = LJ_FLAG_INT, .dest = &m->num_query_groups, .help = "G  num_key_value_heads with --group-query-attention", .min = 1},
        {.name = "--kv-channels", .kind = LJ_FLAG_INT, .dest = &m->kv_channels, .help = "D  head_dim (default H/A)", .min = 1},
        {.name = "--max-position-embeddings", .kind = LJ_FLAG_INT, .dest = &m->max_position_embeddings, .help = "P  (default --seq-length)", .min = 1},
        {.name = "--position-embedding-type", .kind = LJ_FLAG_STR, .dest = &m->position_embedding_type, .help = "rope  (the only type; Megatron's default learned_absolute is refused)"},
        {.name = "--use-rotary-position-embeddings", .kind = LJ_FLAG_SWITCH, .dest = &m->use_rotary_position_embeddings, .ival = 1, .help = "older spelling of --position-embedding-type rope"},
        {.name = "--no-position-embedding", .kind = LJ_FLAG_SWITCH, .dest = &m->no_position_embedding, .ival = 1, .help = "no learned absolute positions (always so)"},
        {.name = "--rotary-base", .kind = LJ_FLAG_DOUBLE, .dest = &m->rotary_base, .help = "THETA  rope_theta (default 10000)"},
        {.name = "--rotary-percent", .kind = LJ_FLAG_DOUBLE, .dest = &m->rotary_percent, .help = "1.0  (the only value: RoPE on the whole head)"},
        {.name = "--use-rope-scaling", .kind = LJ_FLAG_SWITCH, .dest = &m->use_rope_scaling, .ival = 1, .help = "Llama 3.1 RoPE scaling (low/high frequency factors 1 and 4, original 8192 positions)"},
        {.name = "--rope-scaling-factor", .kind = LJ_FLAG_DOUBLE, .dest = &m->rope_scaling_factor, .help = "X  its factor (default 8)"},
        {.name = "--normalization", .kind = LJ_FLAG_STR, .dest = &m->normalization, .help = "RMSNorm  (the only one; Megatron's default LayerNorm is refused)"},
        {.name = "--norm-epsilon", .kind = LJ_FLAG_DOUBLE, .dest = &m->norm_epsilon, .help = "EPS  rms_norm_eps (default 1e-5)"},
        {.name = "--apply-layernorm-1p", .kind = LJ_FLAG_SWITCH, .dest = &m->apply_layernorm_1p, .ival = 1, .help = "norm weights stored as 1 + g: trains as the plain weight initialised to 1 while norms get no weight decay"},
        {.name = "--swiglu", .kind = LJ_FLAG_SWITCH, .dest = &m->swiglu, .ival = 1, .help = "SwiGLU MLP (required: Megatron's default GeLU MLP is refused)"},
        {.name = "--qk-layernorm", .kind = LJ_FLAG_SWITCH, .dest = &m->qk_layernorm, .ival = 1, .help = "an RMSNorm over head_dim on q and k before RoPE, one weight shared by the heads (Qwen3's QK-norm: the model is a Qwen3ForCausalLM)"},
        {.name = "--untie-embeddings-and-output-weights", .kind = LJ_FLAG_SWITCH, .dest = &m->untie, .ival = 1, .help = "a separate lm_head (default: tied)"},
        {.name = "--disable-bias-linear", .kind = LJ_FLAG_SWITCH, .dest = &m->disable_bias_linear, .ival = 1, .help = "no biases (required: ljperf's Llama has none)"},
        {.name = "--vocab-size", .kind = LJ_FLAG_INT, .dest = &m->vocab_size, .help = "V  NullTokenizer's vocabulary (it adds its end-of-document id V)", .min = 1},
        {.name = "--make-vocab-size-divisible-by", .kind = LJ_FLAG_INT, .dest = &m->make_vocab_size_divisible_by, .help = "M  pad the vocabulary to a multiple of M (default 128)", .min = 1},
        {.name = "--init-method-std", .kind = LJ_FLAG_DOUBLE, .dest = &m->init_method_std, .help = "S  initializer_range (default 0.02)"},
        {.name = "--attention-dropout", .kind = LJ_FLAG_DOUBLE, .dest = &m->attention_dropout, .help = "0  (the only value: ljperf has no dropout)"},
        {.name = "--hidden-dropout", .kind = LJ_FLAG_DOUBLE, .dest = &m->hidden_dropout, .help = "0  (the only value)"},
        {.kind = LJ_FLAG_SECTION, .help = "schedule:"},
        {.name = "--train-samples", .kind = LJ_FLAG_I64, .dest = &m->train_samples, .help = "N  train N / global batch iterations; LR lengths then count samples"},
        {.name = "--lr-decay-samples", .kind = LJ_FLAG_I64, .dest = &m->lr_decay_samples, .help = "N  (default --train-samples)"},
        {.name = "--lr-warmup-samples", .kind = LJ_FLAG_I64, .dest = &m->lr_warmup_samples, .help = "N"},
        {.name = "--lr-warmup-fraction", .kind = LJ_FLAG_DOUBLE, .dest = &m->lr_warmup_fraction, .help = "F  warm-up as a fraction of the decay length"},
        {.name = "--lr-warmup-init", .kind = LJ_FLAG_DOUBLE, .dest = &m->lr_warmup_init, .help = "LR  where the warm-up starts (default 0)"},
        {.name = "--decoupled-lr", .kind = LJ_FLAG_DOUBLE, .dest = &m->decoupled_lr, .help = "LR  the embedding and output layer's peak learning rate (the tied weight's when tied), on --lr's schedule"},
        {.name = "--decoupled-min-lr", .kind = LJ_FLAG_DOUBLE, .dest = &m->decoupled_min_lr, .help = "LR  their floor (default --min-lr; needs --decoupled-lr)"},
        {.name = "--rampup-batch-size", .kind = LJ_FLAG_LIST, .dest = &m->rampup_batch_size, .help = "START INCR SAMPLES  the global batch grows from START by INCR over SAMPLES samples to --global-batch-size (needs --train-samples)"},
        {.name = "--lr-wsd-decay-style", .kind = LJ_FLAG_STR, .dest = &m->lr_wsd_decay_style, .help = "linear|cosine|exponential|minus_sqrt  WSD's anneal (default exponential)"},
        {.name = "--lr-wsd-decay-iters", .kind = LJ_FLAG_INT, .dest = &m->lr_wsd_decay_iters, .help = "N  WSD's anneal length"},
        {.name = "--lr-wsd-decay-samples", .kind = LJ_FLAG_I64, .dest = &m->lr_wsd_decay_samples, .help = "N  WSD's anneal length in samples"},
        {.name = "--exit-duration-in-mins", .kind = LJ_FLAG_DOUBLE, .dest = &m->exit_duration_in_mins, .help = "M  save (with --save) and exit after M minutes of training"},
        {.name = "--optimizer", .kind = LJ_FLAG_STR, .dest = &m->optimizer, .help = "adam  (AdamW, Megatron's adam; the only one)"},
        {.kind = LJ_FLAG_SECTION, .help = "precision:"},
        {.name = "--bf16", .kind = LJ_FLAG_SWITCH, .dest = &m->bf16, .ival = 1, .help = "the GPU recipe (bf16 weights and activations, fp32 master weights); the CPU computes in fp32"},
        {.name = "--grad-reduce-in-bf16", .kind = LJ_FLAG_SWITCH, .dest = &m->grad_reduce_in_bf16, .ival = 1, .help = "bf16 gradients (the CUDA default, --grad-dtype bf16)"},
        {.name = "--accumulate-allreduce-grads-in-fp32", .kind = LJ_FLAG_SWITCH, .dest = &m->accumulate_allreduce_grads_in_fp32, .ival = 1, .help = "fp32 gradients (--grad-dtype fp32)"},
        {.kind = LJ_FLAG_SECTION, .help = "parallelism and launch:"},
        {.name = "--tensor-model-parallel-size", .kind = LJ_FLAG_INT, .dest = &m->tensor_parallel, .help = "1  (more is refused: ljperf has data parallelism with ZeRO)", .min = 1},
        {.name = "--pipeline-model-parallel-size", .kind = LJ_FLAG_INT, .dest = &m->pipeline_parallel, .help = "1", .min = 1},
        {.name = "--context-parallel-size", .kind = LJ_FLAG_INT, .dest = &m->context_parallel, .help = "1", .min = 1},
        {.name = "--expert-model-parallel-size", .kind = LJ_FLAG_INT, .dest = &m->expert_parallel, .help = "1", .min = 1},
        {.name = "--use-distributed-optimizer", .kind = LJ_FLAG_SWITCH, .dest = &m->distributed_optimizer, .ival = 1, .help = "shard the optimizer state over the data-parallel ranks: ZeRO-1 (--zero-stage 1)"},
        {.name = "--use-megatron-fsdp", .kind = LJ_FLAG_SWITCH, .dest = &m->use_megatron_fsdp, .ival = 1, .help = "Megatron-FSDP: ljperf's ZeRO stage of --data-parallel-sharding-strategy (printed at start-up)"},
        {.name = "--data-parallel-sharding-strategy", .kind = LJ_FLAG_STR, .dest = &m->dp_sharding_strategy, .help = "no_shard|optim|optim_grads|optim_grads_params  ZeRO stage 0|1|2|3 (default no_shard, as Megatron-LM's)"},
        {.name = "--logging-level", .kind = LJ_FLAG_INT, .dest = &m->logging_level, .help = "N  Python's logging levels: 30 (warning) or above silences the info lines (warnings, errors and the iteration lines stay, as in Megatron-LM)"},
        {.name = "--distributed-timeout-minutes", .kind = LJ_FLAG_INT, .dest = &m->distributed_timeout_minutes, .help = "M  bootstrap, liveness and collective timeout (LJPERF_DIST_TIMEOUT in seconds wins)", .min = 1},
        {.name = "--local_rank", .kind = LJ_FLAG_INT, .dest = &m->local_rank, .help = "N  the DeepSpeed launcher's argument; must agree with LOCAL_RANK"},
        {.name = "--local-rank", .kind = LJ_FLAG_INT, .dest = &m->local_rank, .help = "N  torch.distributed.launch's spelling of it"},
        {.kind = LJ_FLAG_SECTION, .help = "data:"},
        {.name = "--mock-data", .kind = LJ_FLAG_SWITCH, .dest = &m->mock_data, .ival = 1, .help = "synthetic documents of consecutive ids instead of --data-path"},
        {.name = "--train-data-path", .kind = LJ_FLAG_LIST, .dest = &m->train_data, .help = "[W] P ...  training datasets, used whole"},
        {.name = "--valid-data-path", .kind = LJ_FLAG_LIST, .dest = &m->valid_data, .help = "[W] P ...  validation datasets, used whole"},
        {.name = "--test-data-path", .kind = LJ_FLAG_LIST, .dest = &m->test_data, .help = "[W] P ...  accepted; ljperf runs no test pass"},
        {.name = "--reset-position-ids", .kind = LJ_FLAG_SWITCH, .dest = &m->reset_position_ids, .ival = 1, .help = "RoPE positions restart at 0 after each end-of-document token in a sequence"},
        {.name = "--reset-attention-mask", .kind = LJ_FLAG_SWITCH, .dest = &m->reset_attention_mask, .ival = 1, .help = "attention does not cross an end-of-document token (causal within each document)"},
        {.name = "--eod-mask-loss", .kind = LJ_FLAG_SWITCH, .dest = &m->eod_mask_loss, .ival = 1, .help = "no loss where the input is the end-of-document token (the next document's first token as target)"},
        {.name = "--vocab-file", .kind = LJ_FLAG_STR, .dest = &m->vocab_file, .help = "vocab.json  GPT2BPETokenizer's vocabulary (its size sets the model's)"},
        {.name = "--merge-file", .kind = LJ_FLAG_STR, .dest = &m->merge_file, .help = "merges.txt  GPT2BPETokenizer's merges"},
        {.kind = LJ_FLAG_SECTION, .help = "checkpoints:"},
        {.name = "--finetune", .kind = LJ_FLAG_SWITCH, .dest = &m->finetune, .ival = 1, .help = "start from the --load checkpoint's weights at iteration 0 (new optimizer and data order)"},
        {.name = "--no-load-optim", .kind = LJ_FLAG_SWITCH, .dest = &m->no_load_optim, .ival = 1, .help = "--load takes the weights and the position in the run, not the AdamW moments: the optimizer and the LR schedule start again"},
        {.name = "--exit-on-missing-checkpoint", .kind = LJ_FLAG_SWITCH, .dest = &m->exit_on_missing_checkpoint, .ival = 1, .help = "a --load without a checkpoint is an error (without it, --load = --save starts from scratch)"},
        {.name = "--ckpt-format", .kind = LJ_FLAG_STR, .dest = &m->ckpt_format, .help = "sharded|single  ljperf's per-rank shard files + metadata.json (default), or rank 0's single state.safetensors; torch_dist and fsdp_dtensor mean sharded, torch single (not Megatron's formats)"},
        {.name = "--async-save", .kind = LJ_FLAG_SWITCH, .dest = &m->async_save, .ival = 1, .help = "copy the state to host memory and write it in the background while training goes on"},
        {.kind = LJ_FLAG_SECTION, .help = "profiling (for nsys; docs/megatron.md):"},
        {.name = "--profile", .kind = LJ_FLAG_SWITCH, .dest = &m->profile, .ival = 1, .help = "cudaProfilerStart before iteration S+1, cudaProfilerStop after iteration E, NVTX ranges between (nsys profile --capture-range=cudaProfilerApi)"},
        {.name = "--profile-step-start", .kind = LJ_FLAG_INT, .dest = &m->profile_step_start, .given = &m->profile_step_start_given, .help = "S  iterations completed when the window opens (default 10)"},
        {.name = "--profile-step-end", .kind = LJ_FLAG_INT, .dest = &m->profile_step_end, .given = &m->profile_step_end_given, .help = "E  the last iteration in the window (default 12)"},
        {.name = "--profile-ranks", .kind = LJ_FLAG_LIST, .dest = &m->profile_ranks, .help = "R ...  the ranks that profile and record memory (default: every rank)"},
        {.name = "--record-memory-history", .kind = LJ_FLAG_SWITCH, .dest = &m->record_memory_history, .ival = 1, .help = "write each profiled rank's memory snapshot (JSON: the plan's buffers, the allocator's events, bytes per iteration) after set-up and every logged iteration"},
        {.name = "--memory-snapshot-path", .kind = LJ_FLAG_STR, .dest = &m->memory_snapshot_path, .help = "FILE  where (rank r: FILE with _r before its extension; default snapshot.json)"},
    };
    const int n_own = (int)(sizeof own / sizeof own[0]), n_ign = (int)(sizeof k_ignored / sizeof k_ignored[0]);
    LJ_ASSERT(n_own + n_ign <= max, "%d rows for %d places", n_own + n_ign, max);
    memcpy(rows, own, sizeof own);
    memcpy(rows + n_own, k_ignored, sizeof k_ignored);
    return n_own + n_ign;
}

int lj_cli_megatron_has_shape(const lj_cli_megatron *m) {
    return m->num_layers >= 0 || m->hidden_size >= 0 || m->num_attention_heads >= 0 || m->ffn_hidden_size >= 0 ||
           m->kv_channels >= 0 || m->num_query_groups >= 0 || m->group_query_attention || m->swiglu ||
           m->normalization || m->position_embedding_type || m->disable_bias_linear || m->untie || m->qk_layernorm;
}

/* The entries of a GPT-2 vocab.json. */
static lj_status count_vocab_file(const char *path, int *count) {
    char *text = NULL;
    size_t size = 0;
    LJ_TRY(lj_file_read_all(path, &text, &size));
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lj_fail(LJ_ERR_FORMAT, "--vocab-file %s: not a JSON object of token ids (GPT-2's vocab.json)", path);
    }
    *count = cJSON_GetArraySize(root);
    cJSON_Delete(root);
    return LJ_OK;
}

/* The tokenizer's vocabulary before padding, and its bos / eos ids (unchanged when it has none;
 * without a BOS, bos_token_id is the EOS id, as in Qwen's config.json). */
static lj_status tokenizer_vocab(const lj_cli_megatron *m, const char *type, const char *model, int *vocab,
                                 lj_model_config *cfg) {
    if (!type) {
        if (m->vocab_size > 0) {
            *vocab = m->vocab_size;
            return LJ_OK;
        }
        return lj_fail(LJ_ERR_ARG, "the model shape flags need the vocabulary: --tokenizer-type HuggingFaceTokenizer "
                                   "--tokenizer-model PATH, or --tokenizer-type NullTokenizer --vocab-size V");
    }
    if (!strcmp(type, "HuggingFaceTokenizer")) {
        if (!model) return lj_fail(LJ_ERR_ARG, "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model PATH");
        char path[LJ_PATH_MAX];
        LJ_TRY(lj_tokenizer_resolve(model, "--tokenizer-model", path, sizeof path));
        lj_tokenizer *tok = NULL;
        if (lj_tokenizer_load(path, &tok) != LJ_OK) {
            lj_error_prefix("--tokenizer-model");
            return LJ_ERR_ARG;
        }
        *vocab = lj_tokenizer_vocab_size(tok);
        if (lj_tokenizer_eos_id(tok) >= 0) cfg->eos_token_id = lj_tokenizer_eos_id(tok);
        /* a tokenizer without BOS (Qwen): its end-of-text id, as Qwen's config.json says */
        if (lj_tokenizer_bos_id(tok) >= 0) cfg->bos_token_id = lj_tokenizer_bos_id(tok);
        else if (lj_tokenizer_eos_id(tok) >= 0) cfg->bos_token_id = lj_tokenizer_eos_id(tok);
        lj_tokenizer_free(tok);
        return LJ_OK;
    }
    if (!strcmp(type, "NullTokenizer")) {
        if (m->vocab_size <= 0) return lj_fail(LJ_ERR_ARG, "--tokenizer-type NullTokenizer needs --vocab-size V");
        *vocab = m->vocab_size + 1; /* its end-of-document id is V */
        cfg->bos_token_id = cfg->eos_token_id = m->vocab_size;
        return LJ_OK;
    }
    if (!strcmp(type, "GPT2BPETokenizer")) {
        if (!m->vocab_file || !m->merge_file)
            return lj_fail(LJ_ERR_ARG, "--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file");
        LJ_TRY(count_vocab_file(m->vocab_file, vocab));
        cfg->bos_token_id = cfg->eos_token_id = *vocab - 1; /* <|endoftext|> */
        return LJ_OK;
    }
    return lj_fail(LJ_ERR_ARG, "--tokenizer-type: '%s' is not one of HuggingFaceTokenizer, Llama3Tokenizer, "
                               "NullTokenizer, GPT2BPETokenizer", type);
}

lj_status lj_cli_megatron_doc_mask(const lj_cli_megatron *m, const lj_model_config *cfg, int mock_data,
                                   lj_doc_mask *dm, int rank0) {
    memset(dm, 0, sizeof *dm);
    dm->reset_position_ids = m->reset_position_ids;
    dm->reset_attention_mask = m->reset_attention_mask;
    dm->eod_mask_loss = m->eod_mask_loss;
    dm->eod_token = mock_data ? lj_token_dataset_mock_eod(cfg->vocab_size) : cfg->eos_token_id;
    if (!lj_doc_mask_any(dm)) return LJ_OK;
    const char *flag = m->reset_attention_mask ? "--reset-attention-mask"
                       : m->reset_position_ids ? "--reset-position-ids"
                                               : "--eod-mask-loss";
    if (dm->eod_token < 0 || dm->eod_token >= cfg->vocab_size)
        return lj_fail(LJ_ERR_ARG, "%s needs the end-of-document id: the model's eos_token_id (%d) is not in its "
                                   "vocabulary of %d (set eos_token_id in its config.json, or give "
                                   "--tokenizer-model)", flag, dm->eod_token, cfg->vocab_size);
    if (rank0)
        lj_log_info("document masking at end-of-document id %d (%s):%s%s%s", dm->eod_token,
                    mock_data ? "the mock documents'" : "the model's eos_token_id, unless the dataset records its own",
                    m->reset_position_ids ? " --reset-position-ids" : "",
                    m->reset_attention_mask ? " --reset-attention-mask" : "",
                    m->eod_mask_loss ? " --eod-mask-loss" : "");
    return LJ_OK;
}

lj_status lj_cli_megatron_model(const lj_cli_megatron *m, const char *tokenizer_type, const char *tokenizer_model,
                                int seq_length, int print, lj_model_config *cfg) {
    const char *missing = m->num_layers < 0           ? "--num-layers"
                          : m->hidden_size < 0         ? "--hidden-size"
                          : m->num_attention_heads < 0 ? "--num-attention-heads"
                                                       : NULL;
    if (missing)
        return lj_fail(LJ_ERR_ARG, "the model shape flags need %s (or give the model by --model instead)", missing);
    const char *pos = m->position_embedding_type ? m->position_embedding_type
                      : m->use_rotary_position_embeddings ? "rope"
                                                          : "learned_absolute";
    if (strcmp(pos, "rope") != 0)
        return lj_fail(LJ_ERR_ARG, "--position-embedding-type %s%s: ljperf's Llama uses rotary embeddings "
                                   "(--position-embedding-type rope)",
                       pos, m->position_embedding_type ? "" : " (Megatron's default)");
    const char *norm = m->normalization ? m->normalization : "LayerNorm";
    if (strcmp(norm, "RMSNorm") != 0)
        return lj_fail(LJ_ERR_ARG, "--normalization %s%s: ljperf's Llama uses RMSNorm (--normalization RMSNorm)", norm,
                       m->normalization ? "" : " (Megatron's default)");
    if (!m->swiglu)
        return lj_fail(LJ_ERR_ARG, "--swiglu is missing: Megatron's default MLP is GeLU, ljperf's Llama has a SwiGLU "
                                   "MLP (add --swiglu)");
    if (!m->disable_bias_linear)
        return lj_fail(LJ_ERR_ARG, "--disable-bias-linear is missing: Megatron's linear layers have biases by default, "
                                   "ljperf's Llama has none (add --disable-bias-linear)");
    if (!isnan(m->rotary_percent) && m->rotary_percent != 1.0)
        return lj_fail(LJ_ERR_ARG, "--rotary-percent %g: ljperf applies RoPE to the whole head (1.0)", m->rotary_percent);
    const struct { const char *flag; double v; } drop[] = {{"--attention-dropout", m->attention_dropout},
                                                           {"--hidden-dropout", m->hidden_dropout}};
    for (int k = 0; k < 2; k++)
        if (!isnan(drop[k].v) && drop[k].v != 0.0)
            return lj_fail(LJ_ERR_ARG, "%s %g: ljperf trains without dropout (0 only)", drop[k].flag, drop[k].v);
    if (print && (isnan(m->attention_dropout) || isnan(m->hidden_dropout)))
        lj_log_info("Megatron's default dropout 0.1 is not applied: ljperf trains without dropout (say "
                    "--attention-dropout 0 --hidden-dropout 0)");
    if (m->make_vocab_size_divisible_by <= 0)
        return lj_fail(LJ_ERR_ARG, "--make-vocab-size-divisible-by must be positive");
    lj_config_defaults(cfg);
    int vocab = 0;
    LJ_TRY(tokenizer_vocab(m, tokenizer_type, tokenizer_model, &vocab, cfg));
    if (print && m->vocab_size > 0 && tokenizer_type && strcmp(tokenizer_type, "NullTokenizer") != 0 &&
        m->vocab_size != vocab)
        lj_log_info("--vocab-size %d: not used with --tokenizer-type %s (the vocabulary is the tokenizer's %d ids), as "
                    "in Megatron-LM",
                    m->vocab_size, tokenizer_type, vocab);
    const int mult = m->make_vocab_size_divisible_by;
    const int heads = m->num_attention_heads;
    if (heads <= 0 || m->hidden_size <= 0 || m->num_layers <= 0)
        return lj_fail(LJ_ERR_ARG, "--num-layers, --hidden-size and --num-attention-heads must be positive");
    if (m->kv_channels < 0 && m->hidden_size % heads != 0)
        return lj_fail(LJ_ERR_ARG, "--hidden-size %d is not a multiple of --num-attention-heads %d (or give --kv-channels)",
                       m->hidden_size, heads);
    snprintf(cfg->name, sizeof cfg->name, "megatron-L%d-H%d-A%d", m->num_layers, m->hidden_size, heads);
    cfg->vocab_size = (vocab + mult - 1) / mult * mult;
    cfg->hidden_size = m->hidden_size;
    cfg->num_hidden_layers = m->num_layers;
    cfg->num_attention_heads = heads;
    cfg->intermediate_size = m->ffn_hidden_size > 0 ? m->ffn_hidden_size : (int)((4.0 * m->hidden_size * 2 / 3) / 64) * 64;
    if (m->group_query_attention) {
        if (m->num_query_groups <= 0)
            return lj_fail(LJ_ERR_ARG, "--group-query-attention needs --num-query-groups G (Megatron's default 1 is "
                                       "multi-query attention: say --num-query-groups 1 for it)");
        cfg->num_key_value_heads = m->num_query_groups;
    } else {
        cfg->num_key_value_heads = heads;
    }
    cfg->head_dim = m->kv_channels > 0 ? m->kv_channels : m->hidden_size / heads;
    cfg->max_position_embeddings = m->max_position_embeddings > 0 ? m->max_position_embeddings : seq_length;
    cfg->rope_theta = isnan(m->rotary_base) ? 10000.0 : m->rotary_base;
    cfg->rms_norm_eps = isnan(m->norm_epsilon) ? 1e-5 : m->norm_epsilon;
    cfg->initializer_range = isnan(m->init_method_std) ? 0.02 : m->init_method_std;
    cfg->tie_word_embeddings = !m->untie;
    if (m->qk_layernorm) { /* Megatron-LM's qk_layernorm: q_layernorm / k_layernorm over kv_channels */
        cfg->family = LJ_FAMILY_QWEN3;
        cfg->qk_norm = 1;
    }
    if (m->use_rope_scaling) {
        cfg->rope_scaling_llama3 = 1;
        cfg->rope_factor = isnan(m->rope_scaling_factor) ? 8.0 : m->rope_scaling_factor;
    } else if (print && !isnan(m->rope_scaling_factor)) {
        lj_log_info("--rope-scaling-factor %g: no effect without --use-rope-scaling (as in Megatron-LM)",
                    m->rope_scaling_factor);
    }
    return lj_config_validate(cfg, "the Megatron model shape flags");
}

/* --rampup-batch-size START INCR SAMPLES: three integers (Megatron-LM's int() of each). */
static lj_status parse_rampup(const lj_flag_list *l, int gbs, lj_batch_rampup *r) {
    memset(r, 0, sizeof *r);
    if (l->count == 0) return LJ_OK;
    if (l->count != 3) {
        char given[160] = "";
        for (int k = 0; k < l->count; k++)
            snprintf(given + strlen(given), sizeof given - strlen(given), " %s", l->values[k]);
        return lj_fail(LJ_ERR_ARG, "--rampup-batch-size%s: expected 3 values, START INCR SAMPLES (the start batch, its "
                                   "increment, the ramp-up samples), e.g. --rampup-batch-size 16 8 300000",
                       given);
    }
    int64_t v[3];
    for (int k = 0; k < 3; k++) {
        char *end;
        errno = 0;
        const long long x = strtoll(l->values[k], &end, 10);
        if (!l->values[k][0] || *end || errno)
            return lj_fail(LJ_ERR_ARG, "--rampup-batch-size: '%s' is not an integer: expected START INCR SAMPLES, e.g. "
                                       "--rampup-batch-size 16 8 300000", l->values[k]);
        v[k] = x;
    }
    *r = (lj_batch_rampup){.start = v[0], .increment = v[1], .samples = v[2], .global_batch_size = gbs};
    return LJ_OK;
}

lj_status lj_cli_megatron_schedule(const lj_cli_megatron *m, int gbs, int warmup_iters, int decay_iters, int print,
                                   int *train_iters, lj_lr_schedule *s, lj_adamw_config *adamw,
                                   lj_batch_rampup *rampup) {
    LJ_TRY(parse_rampup(&m->rampup_batch_size, gbs, rampup));
    if (m->rampup_batch_size.count > 0 && m->train_samples < 0)
        return lj_fail(LJ_ERR_ARG, "--rampup-batch-size %lld %lld %lld needs sample-based training: give --train-samples N "
                                   "instead of --train-iters (Megatron-LM's rule: no batch-size ramp-up for "
                                   "iteration-based training)",
                       (long long)rampup->start, (long long)rampup->increment, (long long)rampup->samples);
    if (m->rampup_batch_size.count > 0) LJ_TRY(lj_rampup_check(rampup));
    adamw->decoupled_lr = !isnan(m->decoupled_lr);
    s->decoupled_lr = adamw->decoupled_lr ? m->decoupled_lr : s->lr;
    s->decoupled_min_lr = !isnan(m->decoupled_min_lr) && adamw->decoupled_lr ? m->decoupled_min_lr : s->min_lr;
    if (adamw->decoupled_lr && !(m->decoupled_lr >= 0))
        return lj_fail(LJ_ERR_ARG, "--decoupled-lr %g: must be >= 0", m->decoupled_lr);
    if (adamw->decoupled_lr && !(s->decoupled_min_lr >= 0 && s->decoupled_min_lr <= s->decoupled_lr))
        return lj_fail(LJ_ERR_ARG, "--decoupled-min-lr %g: must be in [0, --decoupled-lr %g]%s", s->decoupled_min_lr,
                       s->decoupled_lr, isnan(m->decoupled_min_lr) ? " (its default is --min-lr: give --decoupled-min-lr)" : "");
    if (!adamw->decoupled_lr && !isnan(m->decoupled_min_lr) && print)
        lj_log_info("--decoupled-min-lr %g: no effect without --decoupled-lr (as in Megatron-LM)", m->decoupled_min_lr);
    const int samples = m->train_samples >= 0;
    if (samples && *train_iters >= 0)
        return lj_fail(LJ_ERR_ARG, "--train-iters %d and --train-samples %lld exclude each other: give one", *train_iters,
                       (long long)m->train_samples);
    const struct { int bad; const char *what; } rules[] = {
        {samples && (warmup_iters >= 0 || decay_iters >= 0 || m->lr_wsd_decay_iters >= 0),
         "--train-samples counts the LR schedule in samples: use --lr-warmup-samples, --lr-decay-samples and "
         "--lr-wsd-decay-samples instead of the -iters forms"},
        {!samples && (m->lr_warmup_samples >= 0 || m->lr_decay_samples >= 0 || m->lr_wsd_decay_samples >= 0),
         "--lr-warmup-samples, --lr-decay-samples and --lr-wsd-decay-samples need --train-samples (or use the -iters "
         "forms)"},
        {!isnan(m->lr_warmup_fraction) && (warmup_iters >= 0 || m->lr_warmup_samples >= 0),
         "--lr-warmup-fraction and --lr-warmup-iters/--lr-warmup-samples exclude each other: give one"},
    };
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++)
        if (rules[k].bad) return lj_fail(LJ_ERR_ARG, "%s", rules[k].what);
    if (!isnan(m->lr_warmup_fraction) && !(m->lr_warmup_fraction >= 0 && m->lr_warmup_fraction <= 1))
        return lj_fail(LJ_ERR_ARG, "--lr-warmup-fraction %g: expected a fraction of the decay in [0, 1]",
                       m->lr_warmup_fraction);
    int64_t total, warmup, decay, wsd;
    if (samples) {
        if (gbs <= 0) return lj_fail(LJ_ERR_ARG, "--train-samples needs a global batch size");
        const int64_t iters = rampup->start > 0 ? lj_rampup_train_iters(rampup, m->train_samples) : m->train_samples / gbs;
        if (iters > INT32_MAX)
            return lj_fail(LJ_ERR_ARG, "--train-samples %lld: %lld iterations, more than ljperf counts (%d): use fewer "
                                       "samples or a larger global batch", (long long)m->train_samples, (long long)iters,
                           INT32_MAX);
        *train_iters = (int)iters;
        s->step_size = gbs;
        total = m->train_samples;
        warmup = m->lr_warmup_samples;
        decay = m->lr_decay_samples;
        wsd = m->lr_wsd_decay_samples;
    } else {
        if (*train_iters < 0) *train_iters = 100;
        s->step_size = 1;
        total = *train_iters;
        warmup = warmup_iters;
        decay = decay_iters;
        wsd = m->lr_wsd_decay_iters;
    }
    s->decay_steps = decay >= 0 ? decay : total;
    s->warmup_steps = !isnan(m->lr_warmup_fraction) ? (int64_t)(m->lr_warmup_fraction * (double)s->decay_steps)
                      : warmup >= 0                 ? warmup
                                                    : 0;
    s->init_lr = isnan(m->lr_warmup_init) ? 0.0 : m->lr_warmup_init;
    s->wsd_style = LJ_LR_WSD_EXPONENTIAL;
    if (m->lr_wsd_decay_style) LJ_TRY(lj_lr_parse_wsd_style(m->lr_wsd_decay_style, &s->wsd_style));
    s->wsd_decay_steps = wsd;
    if (s->style == LJ_LR_WSD && wsd < 0)
        return lj_fail(LJ_ERR_ARG, "--lr-decay-style WSD needs the anneal length: --lr-wsd-decay-%s N",
                       samples ? "samples" : "iters");
    if (s->style == LJ_LR_WSD && wsd > s->decay_steps)
        return lj_fail(LJ_ERR_ARG, "--lr-wsd-decay-%s %lld is longer than the decay: expected at most %lld",
                       samples ? "samples" : "iters", (long long)wsd, (long long)s->decay_steps);
    if (!(s->init_lr >= 0 && s->init_lr <= s->lr))
        return lj_fail(LJ_ERR_ARG, "--lr-warmup-init %g: expected a learning rate in [0, --lr %g]", s->init_lr, s->lr);
    return LJ_OK;
}

lj_status lj_cli_megatron_check(const lj_cli_megatron *m, const char *backend, int zero_given, int *zero_stage,
                                const char **grad_dtype, int print) {
    const struct { const char *flag; int size; const char *instead; } par[] = {
        {"--tensor-model-parallel-size", m->tensor_parallel,
         "ljperf has data parallelism only: shard the memory with --use-distributed-optimizer or --zero-stage 2/3 and "
         "let the planner recompute (--recompute auto)"},
        {"--pipeline-model-parallel-size", m->pipeline_parallel,
         "ljperf has data parallelism only: --zero-stage 3 shards the layers' parameters over the ranks instead"},
        {"--context-parallel-size", m->context_parallel,
         "ljperf has data parallelism only: long sequences fit with --recompute auto (per-layer recompute)"},
        {"--expert-model-parallel-size", m->expert_parallel, "ljperf trains dense models only"},
    };
    for (int k = 0; k < 4; k++) {
        if (par[k].size == 1) continue;
        if (par[k].size < 1) return lj_fail(LJ_ERR_ARG, "%s %d: must be at least 1", par[k].flag, par[k].size);
        return lj_fail(LJ_ERR_ARG, "%s %d: %s", par[k].flag, par[k].size, par[k].instead);
    }
    if (m->optimizer && strcmp(m->optimizer, "adam") != 0)
        return lj_fail(LJ_ERR_ARG, "--optimizer %s: ljperf's optimizer is AdamW (--optimizer adam)", m->optimizer);
    const char *fmt = m->ckpt_format;
    const int single = fmt && (!strcmp(fmt, "single") || !strcmp(fmt, "torch"));
    const int dtensor = fmt && !strcmp(fmt, "fsdp_dtensor");
    if (fmt && !single && !dtensor && strcmp(fmt, "sharded") != 0 && strcmp(fmt, "torch_dist") != 0)
        return lj_fail(LJ_ERR_ARG, "--ckpt-format %s: ljperf writes its own formats, sharded (per-rank shard files and "
                                   "metadata.json, the default; torch_dist and fsdp_dtensor mean it) or single (one "
                                   "state.safetensors gathered on rank 0; torch means it); both load on any world size",
                       fmt);
    if (print && fmt && (!strcmp(fmt, "torch_dist") || !strcmp(fmt, "torch") || dtensor))
        lj_log_info("--ckpt-format %s: ljperf writes its own %s format, which Megatron-LM cannot load (it is not "
                    "%s); each checkpoint's hf/ directory is the way to Megatron-Bridge and transformers "
                    "(docs/megatron.md)",
                    fmt, single ? "single" : "sharded",
                    single ? "PyTorch's torch.save" : dtensor ? "Megatron-FSDP's DTensor checkpoint" : "PyTorch's Distributed Checkpoint");
    if (m->async_save && single)
        return lj_fail(LJ_ERR_ARG, "--async-save needs the sharded checkpoint format, not --ckpt-format %s "
                                   "(Megatron-LM's rule as well)",
                       fmt);
    if (m->dp_sharding_strategy && !m->use_megatron_fsdp)
        return lj_fail(LJ_ERR_ARG, "--data-parallel-sharding-strategy %s needs --use-megatron-fsdp (as in Megatron-LM)",
                       m->dp_sharding_strategy);
    if (m->use_megatron_fsdp) {
        static const char *const names[] = {"no_shard", "optim", "optim_grads", "optim_grads_params"};
        static const char *const what[] = {"nothing sharded (DDP)", "the optimizer state sharded",
                                           "the optimizer state and gradients sharded",
                                           "parameters, gradients and optimizer state sharded"};
        const char *strategy = m->dp_sharding_strategy ? m->dp_sharding_strategy : "no_shard";
        int stage = -1;
        for (int k = 0; k < 4; k++)
            if (!strcmp(strategy, names[k])) stage = k;
        if (stage < 0)
            return lj_fail(LJ_ERR_ARG, "--data-parallel-sharding-strategy %s: not one of no_shard, optim, optim_grads, "
                                       "optim_grads_params",
                           strategy);
        if (zero_given && *zero_stage != stage)
            return lj_fail(LJ_ERR_ARG, "--use-megatron-fsdp with --data-parallel-sharding-strategy %s is ZeRO stage %d, "
                                       "but --zero-stage (or the DeepSpeed JSON) says %d: drop one of them",
                           strategy, stage, *zero_stage);
        if (m->distributed_optimizer && stage == 0)
            return lj_fail(LJ_ERR_ARG, "--use-distributed-optimizer with --use-megatron-fsdp needs a sharding strategy "
                                       "(--data-parallel-sharding-strategy optim or more), not no_shard");
        *zero_stage = stage;
        zero_given = 1;
        if (print)
            lj_log_info("--use-megatron-fsdp --data-parallel-sharding-strategy %s: ZeRO stage %d (%s)", strategy, stage,
                        what[stage]);
    }
    if (m->distributed_optimizer) {
        if (zero_given && *zero_stage == 0)
            return lj_fail(LJ_ERR_ARG,
                           "--use-distributed-optimizer (ZeRO-1) and --zero-stage 0 contradict each other: remove one");
        if (!zero_given) *zero_stage = 1;
    }
    const int cuda = !strcmp(backend, "cuda");
    if (m->accumulate_allreduce_grads_in_fp32 && m->grad_reduce_in_bf16)
        return lj_fail(LJ_ERR_ARG,
                       "--accumulate-allreduce-grads-in-fp32 and --grad-reduce-in-bf16 contradict each other: give one");
    const char *want = m->accumulate_allreduce_grads_in_fp32 ? "fp32" : (m->grad_reduce_in_bf16 && cuda) ? "bf16" : NULL;
    if (want) {
        if (*grad_dtype && strcmp(*grad_dtype, want) != 0)
            return lj_fail(LJ_ERR_ARG, "--grad-dtype %s contradicts %s: remove one, or make them agree", *grad_dtype,
                           m->accumulate_allreduce_grads_in_fp32 ? "--accumulate-allreduce-grads-in-fp32"
                                                                 : "--grad-reduce-in-bf16");
        *grad_dtype = want;
    }
    if (print && !cuda && m->bf16) lj_log_info("--bf16: the %s backend computes in fp32 (its whole recipe)", backend);
    if (print && !cuda && m->grad_reduce_in_bf16)
        lj_log_info("--grad-reduce-in-bf16: the %s backend keeps fp32 gradients", backend);
    if (m->local_rank >= 0) {
        const char *env = getenv("LOCAL_RANK");
        int local = -1;
        if (env && *env && (lj_flags_parse_int("LOCAL_RANK", env, &local) != LJ_OK || local != m->local_rank))
            return lj_fail(LJ_ERR_ARG, "--local_rank=%d but the environment says LOCAL_RANK=%s: the launcher and the "
                                       "arguments disagree",
                           m->local_rank, env);
    }
    if (m->distributed_timeout_minutes > 0 && !getenv("LJPERF_DIST_TIMEOUT")) {
        char v[32];
        snprintf(v, sizeof v, "%d", m->distributed_timeout_minutes * 60);
        setenv("LJPERF_DIST_TIMEOUT", v, 1);
    }
    return LJ_OK;
}

lj_status lj_cli_megatron_profile(const lj_cli_megatron *m, int print, lj_train_config *c) {
    const struct { const char *flag; int v; } steps[] = {{"--profile-step-start", m->profile_step_start},
                                                          {"--profile-step-end", m->profile_step_end}};
    for (int k = 0; k < 2 && m->profile; k++)
        if (steps[k].v < 0)
            return lj_fail(LJ_ERR_ARG, "%s %d: must be >= 0 (an iteration count)", steps[k].flag, steps[k].v);
    if (m->profile && m->profile_step_start >= m->profile_step_end)
        return lj_fail(LJ_ERR_ARG, "--profile-step-start %d must be below --profile-step-end %d (the window holds "
                                   "iterations start + 1 to end)",
                       m->profile_step_start, m->profile_step_end);
    if (m->profile_ranks.count > LJ_TRAIN_MAX_PROFILE_RANKS)
        return lj_fail(LJ_ERR_ARG, "--profile-ranks: %d ranks given, at most %d are taken (leave it out for every rank)",
                       m->profile_ranks.count, LJ_TRAIN_MAX_PROFILE_RANKS);
    c->num_profile_ranks = m->profile_ranks.count;
    for (int i = 0; i < m->profile_ranks.count; i++) {
        LJ_TRY(lj_flags_parse_int("--profile-ranks", m->profile_ranks.values[i], &c->profile_ranks[i]));
        if (c->profile_ranks[i] < 0)
            return lj_fail(LJ_ERR_ARG, "--profile-ranks %d: must be >= 0 (a global rank)", c->profile_ranks[i]);
    }
    c->profile = m->profile;
    c->profile_step_start = m->profile_step_start;
    c->profile_step_end = m->profile_step_end;
    c->record_memory_history = m->record_memory_history;
    if (m->memory_snapshot_path) {
        const char *p = m->memory_snapshot_path, *slash = strrchr(p, '/');
        if (!*p || (slash && !slash[1]))
            return lj_fail(LJ_ERR_ARG, "--memory-snapshot-path '%s': expected a file name (e.g. mem/snapshot.json)", p);
        char dir[LJ_PATH_MAX];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash == p ? 1 : slash - p) : 1, slash ? p : ".");
        struct stat st;
        if (m->record_memory_history && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
            return lj_fail(LJ_ERR_ARG, "--memory-snapshot-path %s: the directory %s does not exist: create it, or give a path in "
                                       "an existing one",
                           p, dir);
        c->memory_snapshot_path = p;
        const size_t n = strlen(p);
        if (print && m->record_memory_history && n > 7 && !strcmp(p + n - 7, ".pickle"))
            lj_log_info("--memory-snapshot-path %s: the snapshot is JSON (ljperf's format, docs/reference.md), not "
                        "torch's pickle", p);
    }
    if (print && m->memory_snapshot_path && !m->record_memory_history)
        lj_log_info("--memory-snapshot-path: no effect without --record-memory-history (as in Megatron-LM)");
    if (print && !m->profile && !m->record_memory_history &&
        (m->profile_step_start_given || m->profile_step_end_given || m->profile_ranks.count))
        lj_log_info("--profile-step-start, --profile-step-end, --profile-ranks: no effect without --profile or "
                    "--record-memory-history (as in Megatron-LM)");
    return LJ_OK;
}

lj_status lj_cli_megatron_fp8_param_gather(int param_gather, const lj_linear_fp8_options *fp8,
                                           const lj_model_config *cfg, int zero_stage, int world, int offload,
                                           const char *backend, int print) {
    if (!param_gather) return LJ_OK;
    /* megatron/core/transformer/transformer_config.py and megatron/training/arguments.py */
    if (!fp8)
        return lj_fail(LJ_ERR_ARG, "--fp8-param-gather needs FP8 training: add --fp8-format hybrid|e4m3 "
                                   "(Megatron-LM: fp8_param must be used together with fp8 mode)");
    if (zero_stage < 1)
        return lj_fail(LJ_ERR_ARG, "--fp8-param-gather needs a sharded optimizer: add --use-distributed-optimizer, "
                                   "--use-megatron-fsdp with --data-parallel-sharding-strategy optim|optim_grads|"
                                   "optim_grads_params, or --zero-stage 1|2|3 (Megatron-LM: only supported with "
                                   "distributed optimizer, torch fsdp2, megatron fsdp, or inference mode)");
    if (fp8->recipe == LJ_FP8_RECIPE_BLOCKWISE)
        return lj_fail(LJ_ERR_ARG, "--fp8-param-gather with --fp8-recipe blockwise: ljperf keeps FP8 weights for the "
                                   "per-tensor recipes only (a weight's 128x128 blocks would have to fall whole into "
                                   "each rank's shard); use --fp8-recipe delayed or tensorwise, or leave the flag out");
    const int sharded = zero_stage == 3 && world > 1;
    const int Q = cfg->num_attention_heads * cfg->head_dim;
    if (sharded && (cfg->hidden_size % 16 || Q % 16 || cfg->intermediate_size % 16))
        return lj_fail(LJ_ERR_ARG, "--fp8-param-gather under ZeRO-3: the model's hidden size %d, attention width "
                                   "%d (heads x head_dim) and intermediate size %d must be multiples of 16 (the "
                                   "gathered FP8 weights are the FP8 GEMM's rows as they are); use --zero-stage 1 "
                                   "or 2, or leave the flag out",
                       cfg->hidden_size, Q, cfg->intermediate_size);
    if (!print) return LJ_OK;
    const int cuda = !strcmp(backend, "cuda");
    const char *dtype = cuda ? "bf16" : "f32";
    char how[320];
    if (sharded)
        snprintf(how, sizeof how, "ZeRO-3: each rank casts its shard of them and every layer's all-gather moves them "
                                  "as FP8 codes (1 byte per element instead of %d); the backward transposes the "
                                  "gathered codes", cuda ? 2 : 4);
    else if (world > 1)
        snprintf(how, sizeof how, "ZeRO stage %d: the updated %s parameters are all-gathered as before, then every "
                                  "rank casts them (their FP8 copy and its transpose beside the %s weights)",
                 zero_stage, dtype, dtype);
    else if (cuda && !offload)
        snprintf(how, sizeof how, "one rank: their FP8 copy and its transpose in the place of their bf16 weights "
                                  "(no bf16 copy kept: AdamW updates their f32 master, which the cast reads)");
    else
        snprintf(how, sizeof how, "one rank: their FP8 copy and its transpose beside the %s weights, which the "
                                  "cast reads%s", dtype, cuda ? " (optimizer offload pushes the bf16 weights)" : "");
    lj_log_info("--fp8-param-gather: the FP8 linears keep their weights as FP8 (E4M3, %s scaling), cast once per "
                "optimizer step right after AdamW and read by every micro-batch's forward and backward; the master "
                "weights stay f32%s; %s",
                lj_fp8_recipe_name(fp8->recipe), cuda ? "" : " (the parameters themselves on this backend)", how);
    return LJ_OK;
}

void lj_cli_megatron_usage(FILE *f) {
    lj_cli_megatron m;
    lj_cli_megatron_init(&m);
    lj_flag rows[256];
    const int n = lj_cli_megatron_rows(&m, rows, 256);
    fprintf(f, "\nMegatron-LM compatibility (pretrain_gpt.py's arguments by their own names; replace\n"
               "`torchrun ... pretrain_gpt.py` by `ljperf train` in a launch script). Taken natively:\n"
               "--micro-batch-size, --global-batch-size, --seq-length, --train-iters, --lr, --min-lr,\n"
               "--lr-warmup-iters, --lr-decay-iters, --lr-decay-style (constant, linear, cosine,\n"
               "inverse-square-root, WSD), --decoupled-lr, --decoupled-min-lr, --rampup-batch-size,\n"
               "--weight-decay, --adam-beta1/2, --adam-eps, --clip-grad, --seed,\n"
               "--data-path, --split, --tokenizer-type, --tokenizer-model, --recompute-*, --save, --load,\n"
               "--save-interval, --exit-interval, --log-interval, --eval-interval, --eval-iters,\n"
               "--tensorboard-*, --wandb-*, --fp8-format, --fp8-recipe, --fp8-amax-history-len,\n"
               "--fp8-amax-compute-algo, --fp8-margin, --first-last-layers-bf16,\n"
               "--num-layers-at-start-in-bf16, --num-layers-at-end-in-bf16, --fp8-param-gather,\n"
               "--use-precision-aware-optimizer, --exp-avg-dtype, --exp-avg-sq-dtype; --arg=value\n"
               "works as with argparse, prefixes do not.\n");
    lj_flags_print_help(f, rows, n);
}

/* megatron.h: Megatron-LM's pretrain_gpt.py arguments that `ljperf train` reads by their own
 * names and meanings (megatron/training/arguments.py), so that a launch script written for
 * Megatron-LM runs with `ljperf train` in place of `torchrun ... pretrain_gpt.py`:
 *   - the model shape (--num-layers, --hidden-size, ...) builds the model config as --model does,
 *     with Megatron's defaults where a flag is left out; shapes ljperf cannot build (GeLU MLPs,
 *     LayerNorm, biases, learned position embeddings) are refused by name;
 *   - the schedule in samples (--train-samples, --lr-*-samples), the warm-up fraction, WSD, the
 *     embedding and output layer's own learning rate (--decoupled-lr, --decoupled-min-lr), the
 *     batch-size ramp-up (--rampup-batch-size);
 *   - precision (--bf16; --fp16 refused), parallelism sizes (1 runs; more is refused with what
 *     ljperf offers), --use-distributed-optimizer (ZeRO-1);
 *   - data (--mock-data, --train/valid/test-data-path, the tokenizer types), checkpoint flags;
 *   - flags that only tune PyTorch or Megatron internals, accepted and listed at start-up with
 *     the reason they change nothing here.
 * Every flag is one row of the tables in megatron.c (cli/flags.h): a new flag is a new row. */
#ifndef LJ_CLI_MEGATRON_H
#define LJ_CLI_MEGATRON_H

#include "cli/flags.h"
#include "config/config.h"
#include "data/docmask.h"
#include "optim/optim.h"
#include "train/train.h"

/* The values as given; -1 (integers) or NAN (reals) or NULL when a flag is absent. */
typedef struct {
    /* model shape */
    int num_layers, hidden_size, ffn_hidden_size, num_attention_heads, num_query_groups, kv_channels;
    int max_position_embeddings, vocab_size, make_vocab_size_divisible_by;
    int group_query_attention, swiglu, untie, disable_bias_linear, use_rope_scaling, apply_layernorm_1p;
    int qk_layernorm;
    int use_rotary_position_embeddings, no_position_embedding;
    const char *position_embedding_type, *normalization;
    double rotary_base, rotary_percent, rope_scaling_factor, norm_epsilon, init_method_std;
    double attention_dropout, hidden_dropout;
    /* schedule */
    int64_t train_samples, lr_decay_samples, lr_warmup_samples, lr_wsd_decay_samples;
    int lr_wsd_decay_iters;
    double lr_warmup_fraction, lr_warmup_init, exit_duration_in_mins;
    const char *lr_wsd_decay_style;
    double decoupled_lr, decoupled_min_lr; /* --decoupled-lr, --decoupled-min-lr */
    lj_flag_list rampup_batch_size;        /* --rampup-batch-size START INCR SAMPLES */
    /* precision */
    int bf16, grad_reduce_in_bf16, accumulate_allreduce_grads_in_fp32;
    /* parallelism and launch */
    int tensor_parallel, pipeline_parallel, context_parallel, expert_parallel, distributed_optimizer;
    int distributed_timeout_minutes;
    int use_megatron_fsdp;               /* --use-megatron-fsdp */
    const char *dp_sharding_strategy;    /* --data-parallel-sharding-strategy: no_shard|optim|optim_grads|optim_grads_params */
    int logging_level;                   /* --logging-level: Python's levels (10 debug, 20 info, 30 warning, ...) */
    int local_rank;                      /* the DeepSpeed launcher's --local_rank */
    /* data */
    int mock_data;
    int reset_position_ids, reset_attention_mask, eod_mask_loss; /* document masking (data/docmask.h) */
    lj_flag_list train_data, valid_data, test_data;
    const char *vocab_file, *merge_file, *optimizer;
    /* checkpoints */
    int finetune, exit_on_missing_checkpoint, async_save, no_load_optim;
    const char *ckpt_format;
    /* profiling (Megatron's defaults: steps 10 to 12, every rank, snapshot path snapshot.json here) */
    int profile, record_memory_history;
    int profile_step_start, profile_step_end, profile_step_start_given, profile_step_end_given;
    lj_flag_list profile_ranks;
    const char *memory_snapshot_path;
} lj_cli_megatron;

/* Every value absent. */
void lj_cli_megatron_init(lj_cli_megatron *m);

/* Writes the rows of these flags (pointing into `m`, followed by the accepted-and-ignored and
 * the refused ones) to rows[0..max) and returns how many. */
int lj_cli_megatron_rows(lj_cli_megatron *m, lj_flag *rows, int max);

/* 1 when any model-shape flag is given (the model then comes from them, not --model). */
int lj_cli_megatron_has_shape(const lj_cli_megatron *m);

/* The model config from the shape flags, as Megatron-LM builds it: ffn_hidden_size defaults to
 * int(4 h * 2/3 / 64) * 64 with --swiglu, kv_channels to h / heads, the query groups to the heads
 * without --group-query-attention, max_position_embeddings to `seq_length`, --rotary-base to
 * 10000, --norm-epsilon to 1e-5, --init-method-std to 0.02; the vocabulary is the tokenizer's
 * (HuggingFaceTokenizer: `tokenizer_model`'s ids; NullTokenizer: --vocab-size + 1, the last id
 * being its end-of-document token; GPT2BPETokenizer: the entries of --vocab-file) padded up to a
 * multiple of --make-vocab-size-divisible-by (128). `print` logs what Megatron would do that
 * ljperf does not (its default dropout 0.1). Errors: LJ_ERR_ARG naming the flag (a missing
 * --num-layers / --hidden-size / --num-attention-heads, a shape ljperf cannot build, a tokenizer
 * that does not load). */
lj_status lj_cli_megatron_model(const lj_cli_megatron *m, const char *tokenizer_type, const char *tokenizer_model,
                                int seq_length, int print, lj_model_config *cfg);

/* The schedule in samples or iterations (Megatron's rules: --train-iters and --train-samples
 * exclude each other, as do the -iters and -samples forms of each length; the warm-up fraction
 * counts in the decay length; WSD needs --lr-wsd-decay-iters or -samples), the decoupled learning
 * rate and the batch-size ramp-up. In: *train_iters (-1 when --train-iters is absent), the
 * --lr-warmup-iters / --lr-decay-iters values (-1: absent), --lr, --min-lr and the decay style in
 * s. Out: *train_iters, every length of s, s->decoupled_lr and s->decoupled_min_lr (default
 * --min-lr, as Megatron-LM's) with adamw->decoupled_lr set when --decoupled-lr is given (a
 * --decoupled-min-lr without it changes nothing, as in Megatron-LM, and `print` says so), and
 * *rampup (start 0 without --rampup-batch-size; it needs --train-samples, and then the iterations
 * are Megatron's update_train_iters of the ramp-up). Errors: LJ_ERR_ARG naming the flags. */
lj_status lj_cli_megatron_schedule(const lj_cli_megatron *m, int global_batch_size, int warmup_iters,
                                   int decay_iters, int print, int *train_iters, lj_lr_schedule *s,
                                   lj_adamw_config *adamw, lj_batch_rampup *rampup);

/* The parallelism and precision flags against what this run can do: tensor, pipeline, context
 * and expert parallel sizes above 1 are refused with what ljperf offers instead;
 * --use-distributed-optimizer sets *zero_stage to 1 unless --zero-stage was given
 * (`zero_given`); --accumulate-allreduce-grads-in-fp32 sets *grad_dtype to "fp32" and
 * --grad-reduce-in-bf16 to "bf16" on CUDA (`backend` is the op table's name); --local_rank must
 * agree with LOCAL_RANK when both are set. `print` logs what is a no-op on this backend (--bf16 on
 * the CPU). Errors: LJ_ERR_ARG naming the flag. */
lj_status lj_cli_megatron_check(const lj_cli_megatron *m, const char *backend, int zero_given, int *zero_stage,
                                const char **grad_dtype, int print);

/* The profiling flags (docs/megatron.md "Profiling"; train/profile.h) checked and copied into c:
 * --profile, --profile-step-start S and --profile-step-end E (with --profile: 0 <= S < E), --profile-ranks R ...
 * (each >= 0; at most LJ_TRAIN_MAX_PROFILE_RANKS; checked against the world size when the run
 * starts), --record-memory-history and --memory-snapshot-path (its directory must exist). `print`
 * says what has no effect (a snapshot path without --record-memory-history). Errors: LJ_ERR_ARG
 * naming the flag and the value. */
lj_status lj_cli_megatron_profile(const lj_cli_megatron *m, int print, lj_train_config *c);

/* --fp8-param-gather (`param_gather`, a row of cli/fp8.c's, shared by train, benchmark and plan)
 * against the run: Megatron-LM's rules (it needs FP8, `fp8` the resolved options or NULL without
 * --fp8-format, and a sharded optimizer: ZeRO stage >= 1, `zero_stage`; megatron/training/
 * arguments.py), and ljperf's: a per-tensor recipe (delayed or tensorwise; blockwise is refused),
 * and under ZeRO-3 over `world` > 1 ranks the linears' input widths of `cfg` multiples of 16 (the
 * gathered codes are the FP8 GEMM's rows). With `print`, says what the run keeps and gathers
 * (model/linear.h, parallel/zero3.h; `offload`: --offload-optimizer cpu on this backend). Errors:
 * LJ_ERR_ARG naming the flag. */
lj_status lj_cli_megatron_fp8_param_gather(int param_gather, const lj_linear_fp8_options *fp8,
                                           const lj_model_config *cfg, int zero_stage, int world, int offload,
                                           const char *backend, int print);

/* The compatibility table of `ljperf train --help`. */
/* Document masking of a run of model `cfg` (--reset-position-ids, --reset-attention-mask,
 * --eod-mask-loss; Megatron-LM's meanings, data/docmask.h) into *dm, with the end-of-document id
 * of the data: the model's eos_token_id (the id ljperf's `prepare` appends; the tokenizer's eod
 * in Megatron-LM), or with `mock_data` the synthetic documents' (lj_token_dataset_mock_eod).
 * Says on rank 0 what is on. Errors: LJ_ERR_ARG naming the flag when the id is not in the
 * vocabulary. */
lj_status lj_cli_megatron_doc_mask(const lj_cli_megatron *m, const lj_model_config *cfg, int mock_data,
                                   lj_doc_mask *dm, int rank0);

void lj_cli_megatron_usage(FILE *f);

#endif

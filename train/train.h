/* train.h: the training loop: data, micro-batch accumulation up to the global batch, AdamW
 * with clipping and the LR schedule, logging (a Megatron-style line and JSON lines), eval on
 * the held-out split, checkpoints (training state + HF export), exact resume, and SIGINT /
 * SIGTERM handling.
 *
 * Divergence (Megatron-LM's rules, with the state kept good): a step whose global gradient norm is
 * inf or NaN applies no update (the AdamW op skips it, ops.h) and is counted as skipped. With
 * --check-for-nan-in-loss-and-grad (the default) a non-finite loss or gradient norm then stops the
 * run with an error; without it the run goes on and stops after --max-consecutive-skipped-iterations
 * skipped steps in a row. A skipped step, a non-finite validation loss or a state with non-finite
 * weights is never saved (the latest checkpoint stays the last good one), and a run whose last
 * iteration was skipped ends with an error. */
#ifndef LJ_TRAIN_H
#define LJ_TRAIN_H

#include "model/model.h"
#include "optim/optim.h"
#include "parallel/deepspeed.h"
#include "parallel/parallel.h"

#define LJ_TRAIN_MAX_PROFILE_RANKS 64

typedef struct {
    lj_model_config model;
    const lj_ops *ops;

    int micro_batch_size;      /* --micro-batch-size */
    int seq_length;            /* --seq-length */
    int global_batch_size;     /* --global-batch-size (micro-batch x accumulation x data-parallel size) */
    int train_iters;           /* --train-iters */
    int log_interval;          /* --log-interval */
    int eval_interval;         /* --eval-interval (0: only at the end) */
    int eval_iters;            /* --eval-iters: micro-batches per eval pass */
    uint64_t seed;             /* --seed */
    int fused;                 /* --no-fusion clears it */
    lj_linear_recipe_kind linear_recipe;  /* --fp8-format: LJ_LINEAR_RECIPE_FP8 (model/linear.h) */
    lj_linear_fp8_options fp8;       /* its settings (--fp8-recipe, ...) */
    uint8_t recompute[LJ_MAX_LAYERS];
    size_t planned_plan_bytes; /* the plan total the recompute planner built for this policy (0: none) */
    lj_doc_mask doc_mask;      /* --reset-position-ids, --reset-attention-mask, --eod-mask-loss (data/docmask.h) */

    lj_lr_schedule lr;
    lj_adamw_config adamw;     /* adamw.decoupled_lr: lr.decoupled_lr and lr.decoupled_min_lr give the
                                  embedding and output layer their own lr (--decoupled-lr) */
    lj_batch_rampup rampup;    /* --rampup-batch-size (start 0: none): the global batch of each iteration
                                  grows from rampup.start to global_batch_size; the LR schedule then
                                  counts samples (--train-samples) */

    /* data: Megatron-style --data-path list ("A" or "0.7 A 0.3 B") and --split "969,30,1" */
    int num_data_args;
    char **data_args;
    const char *split;
    int mock_data;             /* --mock-data: one synthetic dataset over the model's vocabulary
                                  (lj_token_dataset_mock) instead of data_args */
    int num_valid_data_args;   /* --valid-data-path: validation reads the whole of these datasets */
    char **valid_data_args;    /* instead of the valid split of data_args */
    double exit_duration_min;  /* --exit-duration-in-mins: save and exit after an iteration that ends
                                  later than this many minutes after the start (0: no limit) */

    const char *save;          /* --save DIR */
    const char *load;          /* --load DIR (training state, or an HF checkpoint directory) */
    int save_interval;         /* --save-interval (0: only at the end) */
    int exit_interval;         /* --exit-interval: save and exit after an iteration divisible by it */
    int keep_last;             /* --keep-last K checkpoints (0: all) */
    lj_dtype hf_dtype;         /* dtype of the HF export in each checkpoint */
    int no_save_hf;            /* --no-save-hf: the HF export in the run's last save only */
    int override_data;         /* --override-data: resume onto data other than the checkpoint's (checkpoint/state.h) */
    int no_load_optim;         /* --no-load-optim (Megatron-LM's): --load takes the weights, the FP8
                                  recipe state and the position in the run (iteration, consumed
                                  samples, data order), not the AdamW moments; the optimizer and
                                  the LR schedule start again at the loaded iteration */
    int async_save;            /* --async-save: saves written by a background thread (checkpoint/state.h) */
    int ckpt_format;           /* --ckpt-format: lj_ckpt_format (0: torch_dist, the sharded format) */
    const char *tokenizer;     /* --tokenizer-model: tokenizer.json copied into each HF export with the
                                  other tokenizer files (data/tokenizer_export.h); NULL: none */
    const char *log_json;      /* --log-json FILE */
    const char *command_line;  /* the command as typed ("ljperf train --model ..."), for the start record of
                                  --log-json; NULL: none recorded */
    const char *tensorboard_dir;      /* --tensorboard-dir DIR (or the DeepSpeed "tensorboard" section): event
                                         files on rank 0 (train/tensorboard.h); NULL: none */
    const char *tensorboard_source;   /* where tensorboard_dir came from, for messages */
    int tensorboard_log_interval;     /* --tensorboard-log-interval (default 1) */
    int tensorboard_queue_size;       /* --tensorboard-queue-size (default 1000) */
    lj_zero_options zero;      /* ZeRO: stage (--zero-stage / zero_optimization.stage; 0: replicated),
                                  overlap_comm (--overlap-comm / --no-overlap-comm / zero_optimization.overlap_comm,
                                  whose DeepSpeed default is stage == 3; else 1), the buckets
                                  (--reduce-bucket-size / zero_optimization's; 0: auto); the rank and world size
                                  are the launcher's, set at start-up */
    int offload_optimizer;     /* 1: --offload-optimizer cpu / zero_optimization.offload_optimizer.device "cpu"
                                  (needs ZeRO stage >= 1); 0: none (the default) */
    const char *offload_source; /* the flag or key that asked for offload, for messages */
    lj_dtype exp_avg_dtype;    /* AdamW's moments as stored: LJ_DTYPE_F32 (the default) or LJ_DTYPE_BF16 */
    lj_dtype exp_avg_sq_dtype; /* (--use-precision-aware-optimizer --exp-avg-dtype / --exp-avg-sq-dtype) */
    int has_deepspeed;         /* --deepspeed given: */
    lj_deepspeed_config deepspeed; /* the resolved config, applied by lj_train_apply_deepspeed (its scheduler
                                      is in lr.deepspeed) */
    int check_nan;             /* --check-for-nan-in-loss-and-grad (Megatron's default, 1): a non-finite loss
                                  or gradient norm stops the run; 0 (--no-check-...): the step is skipped */
    int max_skipped;           /* --max-consecutive-skipped-iterations: skipped steps in a row that stop
                                  the run (0: no limit) */
    int quiet;                 /* no per-step lines (tests) */

    /* profiling: Megatron-LM's flags (train/profile.h; docs/megatron.md "Profiling") */
    int profile;               /* --profile: the CUDA profiler's capture range and NVTX ranges over
                                  iterations profile_step_start + 1 .. profile_step_end */
    int profile_step_start;    /* --profile-step-start (default 10, Megatron's) */
    int profile_step_end;      /* --profile-step-end (default 12) */
    int num_profile_ranks;     /* --profile-ranks R ...: the ranks that profile; 0: every rank */
    int profile_ranks[LJ_TRAIN_MAX_PROFILE_RANKS];
    int record_memory_history; /* --record-memory-history: memory snapshots of the profiled ranks */
    const char *memory_snapshot_path; /* --memory-snapshot-path (default snapshot.json); rank r writes
                                         it with "_r" before the extension (Megatron-LM's naming) */
} lj_train_config;

/* Fills the defaults (Megatron-LM's where they exist). */
void lj_train_config_defaults(lj_train_config *cfg);

/* What a run records about itself when it starts: the start record, the first line a run
 * appends to --log-json (docs/report.md, "The training log"):
 *   {"iteration": I, "start": {"program": "ljperf", "version": "0.1.0", "commit": "<12 hex>",
 *    "date": "2026-12-02T10:11:12Z", "model": M, "parameters": N, "precision": "bf16",
 *    "backend": "cuda", "device": "NVIDIA H200", "devices": D, "micro_batch_size": m,
 *    "global_batch_size": g, "seq_length": s, "train_iters": t, "command": "ljperf train ..."}}
 * I is the iteration the run starts from (0, or the resumed checkpoint's); "iteration" keeps
 * the line what every --log-json line is (an object with "iteration"), so that readers of the
 * per-step lines pass over it. date: the UTC time of the call; device: ops->device_name;
 * devices: the data-parallel ranks, one device each; precision: "fp8 <recipe>" ("fp8 hybrid
 * <recipe>" for --fp8-format hybrid) when FP8 linears train, else the activations' dtype
 * ("bf16", "fp32"). */
typedef struct {
    int iteration;
    const char *model;
    int64_t parameters;
    const char *precision;
    const lj_ops *ops;
    int devices;
    int micro_batch_size, global_batch_size, seq_length, train_iters;
    const char *command;       /* NULL: left out */
} lj_train_start;

/* The start record of `s` as one JSON line with its newline (malloc'd; free it). */
char *lj_train_start_record(const lj_train_start *s);

/* The precision a run trains in, as the start record names it, into buf (see lj_train_start). */
const char *lj_train_precision(const lj_ops *ops, int fp8_active, const lj_linear_fp8_options *fp8, char *buf,
                               size_t len);

/* Which of the settings a DeepSpeed config also holds the command line gave (1), against which
 * the file's values are checked. */
typedef struct {
    int lr, clip_grad, weight_decay, adam_beta1, adam_beta2, adam_eps; /* --lr, --clip-grad, ... */
    int zero_stage, overlap_comm, reduce_bucket_size, offload_optimizer;
    int lr_warmup_iters;               /* the value of --lr-warmup-iters; -1 when not given */
} lj_train_given;

/* Applies DeepSpeed config `ds` (parsed by lj_deepspeed_load; resolved here with DeepSpeed's
 * rules) to c, in one step: batch sizes (*global_batch_size and *micro_batch_size: the command
 * line's, 0 when not given; out: the resolved ones), clipping, the AdamW parameters, the LR
 * scheduler (c->lr.deepspeed), the ZeRO stage and knobs (c->zero) and optimizer offload. `given`
 * says which settings the command line gave; `world_size` is the launcher's (>= 1). A value given
 * both ways must agree; "auto" or absence in the file takes the command line's.
 * Errors (LJ_ERR_ARG): a flag and a key that disagree, naming both with their values; DeepSpeed's
 * batch rule; a batch size above INT_MAX (naming the key). */
lj_status lj_train_apply_deepspeed(lj_train_config *c, const lj_train_given *given, const lj_deepspeed_config *ds,
                                   int world_size, int *global_batch_size, int *micro_batch_size);

/* Runs training, data-parallel over the ranks the launcher started (mpirun, srun,
 * torchrun-style variables or --nproc-per-node; a world of one otherwise): each rank takes its
 * share of every global batch, gradients are summed across ranks before the optimizer step
 * (ZeRO stage 0, replicated), rank 0 logs, evaluates and saves. Returns LJ_OK, LJ_ERR_INTERRUPTED after a clean stop on SIGINT/SIGTERM (the
 * checkpoint is saved when --save is set), or an error with its message. */
lj_status lj_train_run(const lj_train_config *cfg);

#endif

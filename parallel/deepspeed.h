/* deepspeed.h: DeepSpeed's JSON configuration (`--deepspeed ds_config.json`) read into a
 * struct with DeepSpeed's defaults and rules: the batch-size relation, the optimizer, the
 * WarmupLR / WarmupDecayLR / WarmupCosineLR schedules (computed by optim/optim.h), and
 * zero_optimization, plus the default
 * configuration of the `deepspeed/<preset>` model names.
 *
 * "auto" (the Hugging Face integration's placeholder) is accepted wherever the integration
 * accepts it: integer fields then hold LJ_DS_AUTO until lj_deepspeed_resolve fills them from
 * the command line (batch sizes, total_num_steps, warmup_num_steps) or the model (bucket
 * sizes); floating-point fields hold NAN for "absent or auto", meaning "use the command line
 * value or its default". Keys ljperf does not know are reported with a warning naming their
 * dotted path ("zero_optimization.stage3_prefetch_bucket_sise"); keys that only change
 * DeepSpeed's logging are accepted quietly. Source of the keys and defaults: DeepSpeed
 * deepspeed/runtime/config.py, zero/config.py, lr_schedules.py.
 */
#ifndef LJ_DEEPSPEED_H
#define LJ_DEEPSPEED_H

#include "base/base.h"
#include "optim/optim.h"

#define LJ_DS_UNSET (-1) /* integer field absent from the file */
#define LJ_DS_AUTO (-2)  /* integer field given as "auto" */

typedef enum { LJ_DS_OPTIMIZER_NONE = 0, LJ_DS_OPTIMIZER_ADAMW, LJ_DS_OPTIMIZER_ADAM } lj_ds_optimizer;
/* The schedulers (lj_ds_scheduler, lj_lr_deepspeed) and their formulas are optim/optim.h's. */

typedef struct {
    char source[256];                       /* the file, for messages */

    int64_t train_batch_size;               /* LJ_DS_UNSET, LJ_DS_AUTO or >= 1 */
    int64_t train_micro_batch_size_per_gpu; /* idem */
    int64_t gradient_accumulation_steps;    /* idem */
    double gradient_clipping;               /* max global grad norm; 0 off; NAN absent/auto */
    int bf16_enabled;                       /* 0, 1, LJ_DS_UNSET or LJ_DS_AUTO */

    struct {
        lj_ds_optimizer type;               /* NONE when the file has no "optimizer" */
        double lr, beta1, beta2, eps, weight_decay; /* NAN: absent or auto */
    } optimizer;                            /* Adam in DeepSpeed is AdamW unless adam_w_mode: false */

    lj_lr_deepspeed scheduler;              /* the LR scheduler (optim/optim.h lj_lr_deepspeed_at) */

    struct {
        int stage;                          /* 0..3, default 0 */
        int overlap_comm;                   /* 0/1; LJ_DS_UNSET: DeepSpeed's default, stage == 3 */
        int contiguous_gradients;           /* default 1 */
        int64_t reduce_bucket_size;         /* elements, default 5e8; auto = hidden^2 */
        int64_t allgather_bucket_size;      /* elements, default 5e8 */
        int64_t stage3_prefetch_bucket_size;        /* elements, default 5e7; auto = 0.9 hidden^2 */
        int64_t stage3_param_persistence_threshold; /* elements, default 1e5; auto = 10 hidden */
        int64_t stage3_max_live_parameters;         /* elements, default 1e9 */
        int offload_optimizer_cpu;          /* offload_optimizer.device "cpu": moments and the AdamW
                                               step on the host */
    } zero;

    /* 1 where the file gives the value itself (not absent, not "auto"), for the fields whose default
     * hides that: the command line's values must then agree with it */
    struct {
        int zero_stage;                     /* zero_optimization.stage (or the deprecated true/false) */
        int reduce_bucket_size;             /* zero_optimization.reduce_bucket_size, a number */
        int offload_optimizer;              /* zero_optimization.offload_optimizer.device "none" or "cpu" */
        int warmup_num_steps;               /* scheduler.params.warmup_num_steps, a number */
    } given;

    char grad_accum_dtype[8];               /* data_types.grad_accum_dtype: "fp32", "bf16" or "" (absent) */
    int num_unknown;                        /* keys warned about */
    char unknown[512];                      /* their dotted paths, comma-separated (may be cut short) */
} lj_deepspeed_config;

/* DeepSpeed's defaults, as for a file holding "{}" (source "<defaults>"). */
void lj_deepspeed_init(lj_deepspeed_config *cfg);

/* Parses DeepSpeed JSON `text`; `source` names it in messages. Warnings (unknown keys) go to
 * the log and to cfg->unknown. Errors: LJ_ERR_FORMAT ("<source>: not valid JSON (line 3)",
 * "<source>: zero_optimization.stage: expected 0, 1, 2 or 3, got 4"), LJ_ERR_UNSUPPORTED for
 * valid DeepSpeed settings ljperf does not implement (fp16, parameter offload, NVMe, other
 * optimizers and schedulers), always naming the source and the key. */
lj_status lj_deepspeed_parse(lj_deepspeed_config *cfg, const char *text, const char *source);

/* Reads and parses a file. Errors: LJ_ERR_IO naming the path, then as lj_deepspeed_parse. */
lj_status lj_deepspeed_load(lj_deepspeed_config *cfg, const char *path);

/* The configuration behind the `deepspeed/<preset>` model names: ZeRO stage 3 with
 * overlap_comm and contiguous_gradients, bf16, AdamW (hyper-parameters from the command
 * line), and the "auto" bucket sizes for `hidden_size` (reduce hidden^2, prefetch
 * 0.9 hidden^2, persistence 10 hidden). Batch sizes stay unset (command line). */
void lj_deepspeed_default(lj_deepspeed_config *cfg, int hidden_size);

/* What the command line and the model say, for "auto" and absent values. */
typedef struct {
    int world_size;             /* data-parallel ranks */
    int hidden_size;            /* for the "auto" bucket sizes */
    int64_t micro_batch_size;   /* --micro-batch-size, 0 if not given */
    int64_t global_batch_size;  /* --global-batch-size, 0 if not given */
    int64_t train_iters;        /* --train-iters, 0 if not given (total_num_steps "auto") */
    int64_t warmup_iters;       /* --lr-warmup-iters, -1 if not given (warmup_num_steps "auto") */
} lj_deepspeed_hints;

/* Resolves the batch sizes with DeepSpeed's rules (_set_batch_related_parameters): absent or
 * "auto" values come from the hints, the missing ones are derived, and then
 *   train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size
 * must hold, or LJ_ERR_ARG names the file and DeepSpeed's rule with the numbers. A value both
 * in the file and on the command line must agree. Also fills the "auto" bucket sizes, the
 * overlap_comm default, and the schedule's "auto" step counts.
 * Errors: LJ_ERR_ARG naming the source and the key. */
lj_status lj_deepspeed_resolve(lj_deepspeed_config *cfg, const lj_deepspeed_hints *hints);

#endif

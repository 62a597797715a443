/* optim.h: AdamW with fp32 master weights and global-norm clipping over the op table, and
 * the learning-rate schedules: Megatron-LM's (--lr-decay-style constant|linear|cosine|
 * inverse-square-root|WSD with linear warm-up and a minimum LR) and DeepSpeed's schedulers
 * (WarmupLR, WarmupDecayLR, WarmupCosineLR of a DeepSpeed config's "scheduler"). */
#ifndef LJ_OPTIM_H
#define LJ_OPTIM_H

#include "config/config.h"
#include "ops/ops.h"

typedef enum { LJ_LR_CONSTANT = 0, LJ_LR_LINEAR, LJ_LR_COSINE, LJ_LR_INVERSE_SQRT, LJ_LR_WSD } lj_lr_decay_style;

/* The shape of WSD's final anneal (Megatron-LM's --lr-wsd-decay-style). */
typedef enum { LJ_LR_WSD_LINEAR = 0, LJ_LR_WSD_COSINE, LJ_LR_WSD_EXPONENTIAL, LJ_LR_WSD_MINUS_SQRT } lj_lr_wsd_style;

/* DeepSpeed's schedulers (the "scheduler" block of a DeepSpeed config, parallel/deepspeed.h). */
typedef enum {
    LJ_DS_SCHEDULER_NONE = 0,
    LJ_DS_SCHEDULER_WARMUP_LR,
    LJ_DS_SCHEDULER_WARMUP_DECAY_LR,
    LJ_DS_SCHEDULER_WARMUP_COSINE_LR,
} lj_ds_scheduler;
typedef enum { LJ_DS_WARMUP_LOG = 0, LJ_DS_WARMUP_LINEAR } lj_ds_warmup_type;

typedef struct {
    lj_ds_scheduler type;               /* NONE: no DeepSpeed scheduler (Megatron's schedule applies) */
    double warmup_min_lr;               /* default 0 */
    double warmup_max_lr;               /* NAN: the optimizer's lr */
    int64_t warmup_num_steps;           /* default 1000 (LJ_DS_AUTO before lj_deepspeed_resolve) */
    lj_ds_warmup_type warmup_type;      /* default log */
    int64_t total_num_steps;            /* WarmupDecayLR, WarmupCosineLR (unset / auto before resolve) */
    double warmup_min_ratio;            /* WarmupCosineLR, default 0 */
    double cos_min_ratio;               /* WarmupCosineLR, default 0.0001 */
} lj_lr_deepspeed;

/* The scheduler's learning rate for optimizer step `step` (1-based), `lr` being the
 * optimizer's (resolved) learning rate; `lr` itself when there is no scheduler. DeepSpeed
 * steps its scheduler after each optimizer step, starting from last_batch_iteration = -1, so
 * step s runs with last_batch_iteration = s - 2 (steps 1 and 2 both at the warm-up start).
 * Formulas: DeepSpeed deepspeed/runtime/lr_schedules.py (WarmupLR, WarmupDecayLR,
 * WarmupCosineLR), with warmup_num_steps raised to at least 2 as there. */
double lj_lr_deepspeed_at(const lj_lr_deepspeed *s, double lr, int64_t step);

/* Lengths are in steps: iterations (step_size 1: --lr-warmup-iters, --lr-decay-iters) or samples
 * (step_size = the global batch: --lr-warmup-samples, --lr-decay-samples, --train-samples), as
 * Megatron-LM counts them. */
typedef struct {
    double lr;              /* peak LR (--lr) */
    double min_lr;          /* floor after decay (--min-lr) */
    int64_t warmup_steps;   /* linear warm-up length (--lr-warmup-iters / -samples / -fraction) */
    int64_t decay_steps;    /* decay length (--lr-decay-iters / -samples; default: the whole run) */
    lj_lr_decay_style style;
    double init_lr;         /* where the warm-up starts (--lr-warmup-init, default 0) */
    int64_t wsd_decay_steps;/* WSD: length of the final anneal (--lr-wsd-decay-iters / -samples) */
    lj_lr_wsd_style wsd_style;
    int64_t step_size;      /* steps one iteration counts (<= 0: 1) */
    double decoupled_lr;    /* lr group 1's peak (--decoupled-lr; used only when lj_adamw_config.decoupled_lr) */
    double decoupled_min_lr;/* its floor (--decoupled-min-lr; default --min-lr) */
    lj_lr_deepspeed deepspeed; /* a DeepSpeed config's scheduler; when its type is not NONE it gives the LR
                                  (from lr) instead of the fields above */
} lj_lr_schedule;

/* LR for iteration `it` (1-based, the step about to be taken), with n = it * step_size steps,
 * w = warmup_steps, D = decay_steps:
 *   w > 0 and n <= w:   init_lr + (lr - init_lr) * n / w
 *   constant:           lr
 *   n > D:              min_lr
 *   inverse-square-root: max(min_lr, lr * sqrt(max(w, 1)) / sqrt(max(n, 1)))
 *   otherwise           min_lr + (lr - min_lr) * f(r),  r = (n - w) / (D - w),
 *                       f = 1 - r (linear), (1 + cos(pi r)) / 2 (cosine); WSD: 1 until
 *                       D - wsd_decay_steps, then with q = (n - (D - wsd)) / wsd: 1 - q (linear),
 *                       (1 + cos(pi q)) / 2 (cosine), 2 * 0.5^q - 1 (exponential), 1 - sqrt(q)
 *                       (minus_sqrt).
 * Source: Megatron-LM megatron/core/optimizer_param_scheduler.py, get_lr (warm-up counted from 1
 * here: the first iteration takes n = step_size). With a DeepSpeed scheduler (s->deepspeed.type not
 * NONE): lj_lr_deepspeed_at(&s->deepspeed, lr, it), `it` being the optimizer step. */
double lj_lr_at(const lj_lr_schedule *s, int it);

/* The LR of lr group `group` after n schedule steps (Megatron's num_steps: iterations, or
 * samples under --train-samples), by the formulas of lj_lr_at with the group's peak and floor:
 * group 0 lr and min_lr, group 1 decoupled_lr and decoupled_min_lr (Megatron's param groups
 * with max_lr / min_lr overrides; warm-up start, lengths and decay style are shared, as there).
 * No DeepSpeed scheduler. lj_lr_at(s, it) without one is lj_lr_group_at(s, 0, it * step_size). */
double lj_lr_group_at(const lj_lr_schedule *s, int group, double n);

/* Megatron-LM's batch-size ramp-up (--rampup-batch-size START INCR SAMPLES with
 * --global-batch-size G; RampupBatchsizeNumMicroBatchesCalculator,
 * megatron/core/num_microbatches_calculator.py): the global batch starts at START and grows by
 * INCR, (G - START) / INCR times, one increment per SAMPLES / ((G - START) / INCR) consumed samples,
 * up to G once more than SAMPLES samples are consumed. The micro-batch size stays fixed: the
 * number of micro-batches per iteration grows. */
typedef struct {
    int64_t start;             /* START (0: no ramp-up, the batch is G throughout) */
    int64_t increment;         /* INCR */
    int64_t samples;           /* SAMPLES */
    int64_t global_batch_size; /* G */
} lj_batch_rampup;

/* The ramp-up's rules (Megatron's asserts, where Megatron would fail later or divide by zero):
 * START, INCR and SAMPLES positive, START below G, G - START a multiple of INCR. Errors: LJ_ERR_ARG
 * naming --rampup-batch-size and the values. */
lj_status lj_rampup_check(const lj_batch_rampup *r);

/* The global batch of the iteration that starts after `consumed` samples (Megatron's
 * update_num_microbatches(consumed) then get_current_global_batch_size()): G when consumed >
 * SAMPLES, else START + INCR * int(consumed / (SAMPLES / n)) with n = (G - START) / INCR, the
 * divisions in double as Python computes them. Without a ramp-up (start 0): G. */
int64_t lj_rampup_batch(const lj_batch_rampup *r, int64_t consumed);

/* The samples consumed by the first `iterations` iterations (the sum of their batches). */
int64_t lj_rampup_consumed(const lj_batch_rampup *r, int64_t iterations);

/* The iterations of a run of `train_samples` samples (Megatron's update_train_iters): the ramp's
 * iterations while the consumed samples are at most SAMPLES and at most train_samples (the last
 * one may pass train_samples), then (train_samples - consumed) / G full batches. */
int64_t lj_rampup_train_iters(const lj_batch_rampup *r, int64_t train_samples);

/* Parses "constant", "linear", "cosine", "inverse-square-root", "WSD". Errors: LJ_ERR_ARG
 * naming --lr-decay-style. */
lj_status lj_lr_parse_style(const char *text, lj_lr_decay_style *style);

/* Parses "linear", "cosine", "exponential", "minus_sqrt". Errors: LJ_ERR_ARG naming
 * --lr-wsd-decay-style. */
lj_status lj_lr_parse_wsd_style(const char *text, lj_lr_wsd_style *style);

/* Which parameters --weight-decay applies to. */
typedef enum {
    LJ_WD_MEGATRON = 0, /* Megatron-LM's groups (megatron/core/optimizer/__init__.py,
                           get_standard_config_overrides): every parameter but the biases and the
                           1-D ones (the norms, QK-norm's too); embeddings and lm_head decayed */
    LJ_WD_ALL,          /* every parameter (--weight-decay-all) */
    LJ_WD_MATRICES,     /* the layers' projection matrices only (no norms, biases, embeddings or
                           lm_head: the HF fixtures' optimizer groups) */
} lj_wd_rule;

typedef struct {
    float beta1, beta2, eps;
    float weight_decay;        /* decoupled (AdamW), on the parameters wd_rule names */
    float max_grad_norm;       /* --clip-grad; <= 0: off */
    lj_wd_rule wd_rule;
    int wd_qk_norm;            /* LJ_WD_MEGATRON: decay QK-norm's weights too
                                  (--apply-wd-to-qk-layernorm, the Qwen3-Next recipe) */
    int decoupled_lr;          /* 1: the embedding and the output layer are lr group 1 (--decoupled-lr) */
} lj_adamw_config;

/* The weight decay of parameter p under cfg: cfg->weight_decay or 0. */
float lj_adamw_param_decay(const lj_param_info *p, const lj_adamw_config *cfg);

/* The lr group of parameter p under cfg (ops.h LJ_ADAMW_LR_GROUPS): 1 for the input embedding
 * (model.embed_tokens.weight, which is also the output layer when tied) and the output layer
 * (lm_head.weight) when cfg->decoupled_lr, else 0. Megatron-LM: the parameters marked
 * is_embedding_or_output_parameter (language_module.py: word_embeddings.weight and
 * output_layer.weight) take --decoupled-lr (get_standard_config_overrides,
 * megatron/core/optimizer/__init__.py). */
int lj_adamw_param_group(const lj_param_info *p, const lj_adamw_config *cfg);

/* The learning rates of one step, one per lr group (ops.h LJ_ADAMW_LR_GROUPS); with one group
 * in use, [1] is not read. */
typedef struct {
    float lr[LJ_ADAMW_LR_GROUPS];
} lj_adamw_lr;

/* Every group at `lr` (a run with one lr group, tests). */
static inline lj_adamw_lr lj_adamw_lr_of(float lr) {
    lj_adamw_lr r;
    for (int g = 0; g < LJ_ADAMW_LR_GROUPS; g++) r.lr[g] = lr;
    return r;
}

/* The lr groups a config's segments use: 2 with decoupled_lr, else 1. */
int lj_adamw_lr_groups(const lj_adamw_config *cfg);

/* The AdamW segments of a parameter layout: one per run of adjacent parameters with the same
 * weight decay (lj_adamw_param_decay) and lr group (lj_adamw_param_group). Returns the count;
 * *segments is heap-allocated. */
int lj_adamw_segments(const lj_param_layout *layout, const lj_adamw_config *cfg, lj_adamw_segment **segments);

/* The segments restricted to the slice [begin, begin + count) of the flat buffers, with offsets
 * relative to `begin` (a ZeRO shard). Returns the count; *out is heap-allocated. */
int lj_adamw_segments_slice(const lj_adamw_segment *segments, int num_segments, int64_t begin, int64_t count,
                            lj_adamw_segment **out);

/* The segments split at the ranges [offset[r], offset[r] + count[r]) (r < num_ranges, sorted and
 * disjoint, in the segments' coordinates), the parts inside a range marked master_only (AdamW then
 * writes no param copy there: --fp8-param-gather's codes in the parameter buffer, model/linear.h);
 * adjacent parts alike in weight decay, lr group and master_only are merged again. Returns the
 * count; *out is heap-allocated. */
int lj_adamw_segments_master_only(const lj_adamw_segment *segments, int num_segments, const int64_t *offset,
                                  const int64_t *count, int num_ranges, lj_adamw_segment **out);

#endif

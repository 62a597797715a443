/* optim.h: AdamW with fp32 master weights and global-norm clipping over the op table, and
 * the learning-rate schedules (Megatron-LM's --lr-decay-style constant|linear|cosine with
 * linear warm-up and a minimum LR). */
#ifndef LJ_OPTIM_H
#define LJ_OPTIM_H

#include "config/config.h"
#include "ops/ops.h"

typedef enum { LJ_LR_CONSTANT = 0, LJ_LR_LINEAR, LJ_LR_COSINE } lj_lr_decay_style;

typedef struct {
    double lr;            /* peak LR (--lr) */
    double min_lr;        /* floor after decay (--min-lr) */
    int warmup_iters;     /* --lr-warmup-iters */
    int decay_iters;      /* --lr-decay-iters (default: --train-iters) */
    lj_lr_decay_style style;
} lj_lr_schedule;

/* LR for iteration `it` (1-based, the step about to be taken):
 *   it <= warmup:           lr * it / warmup
 *   warmup < it <= decay:   min_lr + (lr - min_lr) * f(r),  r = (it - warmup) / (decay - warmup),
 *                           f = 1 (constant), 1 - r (linear), (1 + cos(pi r)) / 2 (cosine)
 *   it > decay:             min_lr (constant: lr)
 * Source: Megatron-LM OptimizerParamScheduler.get_lr (warm-up counted from 1 here). */
double lj_lr_at(const lj_lr_schedule *s, int it);

/* Parses "constant", "linear", "cosine". Errors: LJ_ERR_ARG. */
lj_status lj_lr_parse_style(const char *text, lj_lr_decay_style *style);

typedef struct {
    float beta1, beta2, eps;
    float weight_decay;        /* decoupled, on projection matrices */
    float max_grad_norm;       /* --clip-grad; <= 0: off */
    int decay_norms_and_embeddings; /* 1: weight decay on every parameter */
} lj_adamw_config;

/* The AdamW segments of a parameter layout: one per run of adjacent parameters with the same
 * weight decay (matrices get cfg->weight_decay; norms and embeddings 0 unless
 * decay_norms_and_embeddings). Returns the count; *segments is heap-allocated. */
int lj_adamw_segments(const lj_param_layout *layout, const lj_adamw_config *cfg, lj_adamw_segment **segments);

/* The segments restricted to the slice [begin, begin + count) of the flat buffers, with offsets
 * relative to `begin` (a ZeRO shard). Returns the count; *out is heap-allocated. */
int lj_adamw_segments_slice(const lj_adamw_segment *segments, int num_segments, int64_t begin, int64_t count,
                            lj_adamw_segment **out);

#endif

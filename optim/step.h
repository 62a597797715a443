/* step.h: the optimizer step over one rank's shard of a model, on the op table: the step's AdamW
 * scalars, the shard's squared gradient norm, the AdamW update with clipping, and the whole
 * single-rank step as a capturable tail of lj_model_train_step. What happens between these
 * (gradient reductions, the norm's all-reduce, the parameter all-gather under ZeRO) is the data
 * parallel step's (parallel/dp.h). Shards: m->shard_begin, m->shard_numel (model/model.h). */
#ifndef LJ_STEP_H
#define LJ_STEP_H

#include "model/model.h"
#include "optim/optim.h"

/* The optimizer's plan entry (model/buffers.h): the f32 master weights of this rank's shard (on an
 * f32 backend the params at the shard, no buffer), the gradient buffer it steps from
 * (m->grad_numel elements of the grad dtype), the AdamW moments, and the scalars of the step
 * (the squared norm, lj_adamw_hparams' per-step scalars of each lr group, the values summed across
 * ranks); under
 * optimizer offload the master weights and moments are its host memory (lj_offload_plan).
 * Training only; an inference model keeps none of them. */
void lj_optim_plan(lj_model *m, lj_buffer_walker *w);

/* The fixed AdamW hyper-parameters of a config (ops.h lj_adamw_hparams). */
lj_adamw_hparams lj_adamw_hparams_of(const lj_adamw_config *cfg);

/* Uploads the AdamW scalars of step `step` (lj_adamw_step_scalars) at lr.lr[g] for each lr group g
 * of the model (lj_model_lr_groups) to m->adamw_scalars, in stream order before the update (or
 * the captured step) that reads them. */
void lj_optim_upload_scalars(lj_model *m, const lj_adamw_hparams *hp, lj_adamw_lr lr, int step);

/* m->grad_norm_sq (device f32) = the sum of squares of grad_shard[n] (grad dtype). */
void lj_optim_norm_sq(lj_model *m, const void *grad_shard, int64_t n);

/* AdamW over this rank's shard: master, adam_m, adam_v (f32) and the param-dtype copy at
 * `params_shard`, from grad_shard, with the scalars in m->adamw_scalars and clipping by
 * m->grad_norm_sq. `segments` are relative to the shard. Capturable. Under --fp8-param-gather's
 * one-rank form the FP8 codes sit in their weights' places of the params: the segments must be
 * lj_dp_segments' (parallel/dp.h), which mark those ranges master_only, or the param copy would be
 * written over the codes. */
void lj_optim_update(lj_model *m, void *params_shard, const void *grad_shard, const lj_adamw_segment *segments,
                     int num_segments, const lj_adamw_hparams *hp);

/* The global gradient norm, sqrt(m->grad_norm_sq) (host sync). */
double lj_optim_read_norm(lj_model *m);

/* The optimizer of one rank without collectives, as a tail of lj_model_train_step (ctx: an
 * lj_optim_local): the norm of the shard's gradients, then AdamW over it. Ops only: capturable. */
typedef struct {
    const lj_adamw_segment *segments;
    int num_segments;
    lj_adamw_hparams hp;
} lj_optim_local;

void lj_optim_local_step(lj_model *m, void *ctx);

/* What a captured step bakes into its launches besides pointers (the fixed hyper-parameters,
 * clipping on or off, the segments): a changed value means a recapture. Hashed field by field. */
uint64_t lj_optim_local_key(const lj_optim_local *u);

#endif

/* step.c: the optimizer step over one rank's shard (step.h). */
#include "optim/step.h"

#include "optim/offload.h"

#include <math.h>

void lj_optim_plan(lj_model *m, lj_buffer_walker *w) {
    const lj_ops *ops = m->ops;
    const int training = m->opt.training && m->opt.kv_cache_tokens == 0;
    const size_t shard = (size_t)m->shard_numel;
    const int offload = lj_offload_of(m) != NULL;
    LJ_ASSERT(!offload || (m->opt.exp_avg_dtype == LJ_DTYPE_F32 && m->opt.exp_avg_sq_dtype == LJ_DTYPE_F32),
              "optimizer offload keeps f32 moments (the flags refuse bf16 ones)");
    if (offload) lj_offload_plan(m, w); /* master, adam_m, adam_v: host memory */
    else if (ops->param_dtype == LJ_DTYPE_F32) m->master = w->bind ? (float *)m->params + m->shard_begin : NULL;
    else m->master = training ? lj_buffer_take(w, LJ_ARENA_MASTER, "master", shard * 4) : NULL; /* inference: bf16 only */
    m->grads = training ? lj_buffer_take(w, LJ_ARENA_GRADS, "grads", (size_t)m->grad_numel * lj_dtype_size(ops->grad_dtype))
                        : NULL;
    if (!offload) {
        /* f32 or bf16 (opt.exp_avg_dtype, opt.exp_avg_sq_dtype) */
        const size_t bm = lj_dtype_size(m->opt.exp_avg_dtype), bv = lj_dtype_size(m->opt.exp_avg_sq_dtype);
        m->adam_m = training ? lj_buffer_take(w, LJ_ARENA_OPTIMIZER, "adam_m", shard * bm) : NULL;
        m->adam_v = training ? lj_buffer_take(w, LJ_ARENA_OPTIMIZER, "adam_v", shard * bv) : NULL;
    }
    m->grad_norm_sq = training ? lj_buffer_take(w, LJ_ARENA_OPTIMIZER, "grad_norm_sq", 4) : NULL;
    const size_t scalars = (size_t)lj_model_lr_groups(m) * LJ_ADAMW_NUM_SCALARS * 4; /* a set per lr group */
    m->adamw_scalars = training ? lj_buffer_take(w, LJ_ARENA_OPTIMIZER, "adamw_scalars", scalars) : NULL;
    m->dist_scalars = training ? lj_buffer_take(w, LJ_ARENA_OPTIMIZER, "dist_scalars", 12) : NULL;
}

lj_adamw_hparams lj_adamw_hparams_of(const lj_adamw_config *cfg) {
    const lj_adamw_hparams hp = {cfg->beta1, cfg->beta2, cfg->eps, cfg->max_grad_norm, LJ_DTYPE_F32, LJ_DTYPE_F32};
    return hp;
}

void lj_optim_upload_scalars(lj_model *m, const lj_adamw_hparams *hp, lj_adamw_lr lr, int step) {
    float scalars[LJ_ADAMW_LR_GROUPS * LJ_ADAMW_NUM_SCALARS];
    const int groups = lj_model_lr_groups(m);
    for (int g = 0; g < groups; g++) lj_adamw_step_scalars(scalars + g * LJ_ADAMW_NUM_SCALARS, hp, lr.lr[g], step);
    m->ops->upload(m->adamw_scalars, scalars, (size_t)groups * LJ_ADAMW_NUM_SCALARS * sizeof(float));
}

void lj_optim_norm_sq(lj_model *m, const void *grad_shard, int64_t n) {
    m->ops->global_norm_sq(m->grad_norm_sq, grad_shard, n, m->ws_norm);
}

void lj_optim_update(lj_model *m, void *params_shard, const void *grad_shard, const lj_adamw_segment *segments,
                     int num_segments, const lj_adamw_hparams *hp) {
    lj_adamw_hparams h = *hp;
    h.exp_avg_dtype = m->opt.exp_avg_dtype; /* the moments as this model stores them */
    h.exp_avg_sq_dtype = m->opt.exp_avg_sq_dtype;
    lj_model_state_fence(m); /* after an --async-save's copy of the state it overwrites */
    m->ops->adamw_update(params_shard, m->master, grad_shard, m->adam_m, m->adam_v, segments, num_segments, &h,
                         m->adamw_scalars, m->grad_norm_sq);
}

double lj_optim_read_norm(lj_model *m) {
    float norm_sq = 0.0f;
    m->ops->download(&norm_sq, m->grad_norm_sq, sizeof(float));
    return sqrt((double)norm_sq);
}

void lj_optim_local_step(lj_model *m, void *ctx) {
    const lj_optim_local *u = ctx;
    const size_t sg = lj_dtype_size(m->ops->grad_dtype), sp = lj_dtype_size(m->ops->param_dtype);
    const char *grad_shard = (const char *)m->grads + (size_t)m->shard_begin * sg;
    /* the shard's real elements (the padding after P carries nothing) */
    const int64_t P = m->layout.total;
    const int64_t n = m->shard_begin + m->shard_numel <= P ? m->shard_numel : P - m->shard_begin;
    lj_model_range_push(m, "optimizer.step");
    lj_optim_norm_sq(m, grad_shard, n > 0 ? n : 0);
    lj_optim_update(m, (char *)m->params + (size_t)m->shard_begin * sp, grad_shard, u->segments, u->num_segments, &u->hp);
    lj_linear_cast_weights(&m->linear); /* --fp8-param-gather: the kept FP8 weights, once per step */
    lj_model_range_pop(m);
}

uint64_t lj_optim_local_key(const lj_optim_local *u) {
    uint64_t key = LJ_HASH_INIT;
    const float fixed[4] = {u->hp.beta1, u->hp.beta2, u->hp.eps, u->hp.max_grad_norm};
    key = lj_hash(key, fixed, sizeof fixed);
    key = lj_hash(key, &u->num_segments, sizeof u->num_segments);
    for (int i = 0; i < u->num_segments; i++) {
        key = lj_hash(key, &u->segments[i].offset, sizeof u->segments[i].offset);
        key = lj_hash(key, &u->segments[i].count, sizeof u->segments[i].count);
        key = lj_hash(key, &u->segments[i].weight_decay, sizeof u->segments[i].weight_decay);
        key = lj_hash(key, &u->segments[i].lr_group, sizeof u->segments[i].lr_group);
        key = lj_hash(key, &u->segments[i].master_only, sizeof u->segments[i].master_only);
    }
    return key;
}

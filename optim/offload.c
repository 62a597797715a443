/* offload.c: optimizer offload (offload.h). */
#include "optim/offload.h"

#include <string.h>

enum { OFFLOAD_ALIGN = 64 };

static size_t offload_round(size_t bytes) { return (bytes + OFFLOAD_ALIGN - 1) / OFFLOAD_ALIGN * OFFLOAD_ALIGN; }

void lj_offload_bytes(const lj_model *m, size_t *state, size_t *staging) {
    *state = *staging = 0;
    if (!m->opt.offload_optimizer || !m->opt.training || m->opt.kv_cache_tokens > 0) return;
    const size_t S = (size_t)m->shard_numel;
    *state = 3 * offload_round(S * sizeof(float));
    *staging = offload_round(S * sizeof(float)) + offload_round(S * sizeof(uint16_t)) +
               offload_round(lj_ops_cpu()->global_norm_workspace_bytes(m->shard_numel));
}

lj_status lj_offload_alloc(lj_model *m) {
    size_t state, staging;
    lj_offload_bytes(m, &state, &staging);
    if (state == 0 || m->offload_host) return LJ_OK;
    char *p = aligned_alloc(OFFLOAD_ALIGN, state + staging);
    if (!p) {
        char b[32];
        return lj_fail(LJ_ERR_OOM, "optimizer offload: cannot allocate %s of host memory for the AdamW state",
                       lj_format_bytes(state + staging, b, sizeof b));
    }
    memset(p, 0, state + staging);
    const size_t S = (size_t)m->shard_numel, f = offload_round(S * sizeof(float));
    m->offload_host = p;
    m->master = (float *)p;
    m->adam_m = (float *)(p + f);
    m->adam_v = (float *)(p + 2 * f);
    m->offload_grad = (float *)(p + 3 * f);
    m->offload_stage = p + 4 * f;
    m->offload_ws = p + 4 * f + offload_round(S * sizeof(uint16_t));
    return LJ_OK;
}

float lj_offload_grad_norm_sq(lj_model *m, const void *grad_shard, int64_t n_grad) {
    const lj_ops *ops = m->ops;
    LJ_ASSERT(m->offload_host, "optimizer offload: no host state (lj_plan_allocate binds it)");
    LJ_ASSERT(n_grad >= 0 && n_grad <= m->shard_numel, "offload: %lld gradients in a shard of %lld",
              (long long)n_grad, (long long)m->shard_numel);
    float *g = m->offload_grad; /* elements past n_grad stay zero (allocation) */
    if (ops->grad_dtype == LJ_DTYPE_F32) {
        ops->download(g, grad_shard, (size_t)n_grad * sizeof(float));
        ops->synchronize();
    } else {
        LJ_ASSERT(ops->grad_dtype == LJ_DTYPE_BF16, "offload: grad dtype %s", lj_dtype_name(ops->grad_dtype));
        uint16_t *stage = m->offload_stage;
        ops->download(stage, grad_shard, (size_t)n_grad * sizeof(uint16_t));
        ops->synchronize(); /* the copy has landed before the host reads it */
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n_grad; i++) g[i] = lj_bf16_to_f32(stage[i]);
    }
    float norm_sq = 0.0f;
    lj_ops_cpu()->global_norm_sq(&norm_sq, g, n_grad, m->offload_ws);
    return norm_sq;
}

void lj_offload_update(lj_model *m, const lj_adamw_segment *segments, int num_segments, const lj_adamw_hparams *hp,
                       float lr, int step, float norm_sq) {
    float scalars[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(scalars, hp, lr, step);
    /* params == master: the CPU backend's update writes the f32 master only */
    lj_ops_cpu()->adamw_update(m->master, m->master, m->offload_grad, m->adam_m, m->adam_v, segments, num_segments, hp,
                               scalars, &norm_sq);
    lj_model_offload_push_params(m);
}

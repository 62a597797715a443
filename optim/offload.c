/* offload.c: optimizer offload (offload.h). */
#include "optim/offload.h"

#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cpu.h"

enum { OFFLOAD_ALIGN = 64 };

static size_t offload_round(size_t bytes) { return (bytes + OFFLOAD_ALIGN - 1) / OFFLOAD_ALIGN * OFFLOAD_ALIGN; }

/* Elements of the f32 gradient buffer: the shard under fp32 gradients; none under bf16 (the host
 * AdamW reads them from the 2-byte staging). */
static size_t grad_elems(const lj_model *m) {
    return m->ops->grad_dtype == LJ_DTYPE_F32 ? (size_t)m->shard_numel : 0;
}

void lj_offload_bytes(const lj_model *m, size_t *state, size_t *staging) {
    *state = *staging = 0;
    if (!m->opt.offload_optimizer || !m->opt.training || m->opt.kv_cache_tokens > 0) return;
    const size_t S = (size_t)m->shard_numel;
    *state = 3 * offload_round(S * sizeof(float));
    *staging = offload_round(grad_elems(m) * sizeof(float)) + offload_round(S * sizeof(uint16_t)) +
               offload_round(lj_ops_cpu()->global_norm_workspace_bytes(m->shard_numel));
}

lj_status lj_offload_alloc(lj_model *m) {
    size_t state, staging;
    lj_offload_bytes(m, &state, &staging);
    if (state == 0 || m->offload_host) return LJ_OK;
    const size_t S = (size_t)m->shard_numel, f = offload_round(S * sizeof(float));
    const size_t g = offload_round(grad_elems(m) * sizeof(float)), st = offload_round(S * sizeof(uint16_t));
    /* the buffers the device copies go through (gradients down, parameters up), pinned where the
     * backend has pinned memory: a copy from pageable memory goes through the driver's small
     * bounce buffers (measured on an H200 host: 16 GB of bf16 gradients down in about 6 s,
     * parameters up in 2 s). The rest is plain memory: the host AdamW reads it, no copy does. */
    void *pinned = NULL;
    if (m->ops->host_alloc && m->ops->host_alloc(&pinned, g + st) != LJ_OK) {
        lj_log_warn("optimizer offload: the %zu MiB of gradient and parameter staging could not be pinned (%s): the "
                    "copies to and from the device will be slow", (g + st) >> 20, lj_error_message());
        pinned = NULL;
    }
    const size_t plain = pinned ? state + staging - g - st : state + staging;
    char *p = aligned_alloc(OFFLOAD_ALIGN, plain);
    if (!p) {
        if (pinned) m->ops->host_free(pinned);
        char b[32];
        return lj_fail(LJ_ERR_OOM, "optimizer offload: cannot allocate %s of host memory for the AdamW state",
                       lj_format_bytes(plain, b, sizeof b));
    }
    memset(p, 0, plain);
    m->offload_host = p;
    m->master = (float *)p;
    m->adam_m = (float *)(p + f);
    m->adam_v = (float *)(p + 2 * f);
    char *copied = pinned ? (char *)pinned : p + 3 * f; /* offload_grad, then offload_stage */
    if (pinned) memset(pinned, 0, g + st);
    m->offload_pinned = pinned;
    m->offload_grad = g ? (float *)copied : NULL;
    m->offload_stage = copied + g;
    m->offload_ws = pinned ? p + 3 * f : p + 3 * f + g + st;
    return LJ_OK;
}

float lj_offload_grad_norm_sq(lj_model *m, const void *grad_shard, int64_t n_grad) {
    const lj_ops *ops = m->ops;
    LJ_ASSERT(m->offload_host, "optimizer offload: no host state (lj_plan_allocate binds it)");
    LJ_ASSERT(n_grad >= 0 && n_grad <= m->shard_numel, "offload: %lld gradients in a shard of %lld",
              (long long)n_grad, (long long)m->shard_numel);
    m->offload_n_grad = n_grad;
    const double t0 = lj_time_sec();
    float norm_sq = 0.0f;
    if (ops->grad_dtype == LJ_DTYPE_F32) {
        float *g = m->offload_grad; /* elements past n_grad stay zero (allocation) */
        ops->download(g, grad_shard, (size_t)n_grad * sizeof(float));
        ops->synchronize();
        lj_ops_cpu()->global_norm_sq(&norm_sq, g, n_grad, m->offload_ws);
        m->offload_sec[0] += lj_time_sec() - t0;
        return norm_sq;
    }
    LJ_ASSERT(ops->grad_dtype == LJ_DTYPE_BF16, "offload: grad dtype %s", lj_dtype_name(ops->grad_dtype));
    const uint16_t *stage = m->offload_stage;
    ops->download(m->offload_stage, grad_shard, (size_t)n_grad * sizeof(uint16_t));
    ops->synchronize(); /* the copy has landed before the host reads it */
    /* the CPU backend's global_norm_sq over the gradients as f32 (exact from bf16): the same
     * per-LJ_CPU_NORM_CHUNK double partials summed in the same order, so the same float */
    double *part = m->offload_ws;
    const int64_t chunks = (n_grad + LJ_CPU_NORM_CHUNK - 1) / LJ_CPU_NORM_CHUNK;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t i0 = c * LJ_CPU_NORM_CHUNK, i1 = i0 + LJ_CPU_NORM_CHUNK < n_grad ? i0 + LJ_CPU_NORM_CHUNK : n_grad;
        double s = 0.0;
        for (int64_t i = i0; i < i1; i++) {
            const double g = (double)lj_bf16_to_f32(stage[i]);
            s += g * g;
        }
        part[c] = s;
    }
    double total = 0.0;
    for (int64_t c = 0; c < chunks; c++) total += part[c];
    norm_sq = (float)total;
    m->offload_sec[0] += lj_time_sec() - t0;
    return norm_sq;
}

/* bf16 gradients: one pass over each segment reads the gradient from the 2-byte staging (zero
 * past the n_grad downloaded), steps the master and moments as the CPU backend's AdamW does
 * (lj_cpu_adamw_element: the same floats), and with bf16 params writes the rounded parameter
 * back into the staging in its place, ready to upload; elements outside every segment get their
 * rounded master there too. One read of 14 bytes and one write of 14 per element, instead of a
 * conversion pass, the update and a second pass for the parameters. */
static void host_adamw_bf16(lj_model *m, const lj_adamw_segment *segments, int num_segments, const lj_adamw_hparams *hp,
                            const float *scalars, const float *norm_sq) {
    const int64_t S = m->shard_numel, n_grad = m->offload_n_grad;
    uint16_t *stage = m->offload_stage;
    const int write_params = m->ops->param_dtype == LJ_DTYPE_BF16;
    const float clip = lj_cpu_adamw_clip(hp, norm_sq);
    const float b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps, lr = scalars[LJ_ADAMW_LR];
    const float step_size = scalars[LJ_ADAMW_STEP_SIZE], bc2_sqrt = scalars[LJ_ADAMW_BC2_SQRT];
    int64_t covered = 0; /* segments are in shard order and disjoint: [covered, offset) is a gap */
    for (int s = 0; s <= num_segments; s++) {
        const int64_t begin = s < num_segments ? segments[s].offset : S;
        LJ_ASSERT(begin >= covered && begin <= S, "offload: segment %d at %lld out of order", s, (long long)begin);
        if (write_params) {
#pragma omp parallel for schedule(static)
            for (int64_t i = covered; i < begin; i++) stage[i] = lj_f32_to_bf16(m->master[i]);
        }
        if (s == num_segments) break;
        const lj_adamw_segment *seg = &segments[s];
        const float decay = (float)(1.0 - (double)lr * (double)seg->weight_decay);
        float *p = m->master, *ms = m->adam_m, *vs = m->adam_v;
#pragma omp parallel for schedule(static)
        for (int64_t i = begin; i < begin + seg->count; i++) {
            const float g = i < n_grad ? lj_bf16_to_f32(stage[i]) : 0.0f;
            const float pi = lj_cpu_adamw_element(&p[i], &ms[i], &vs[i], g * clip, b1, b2, eps, decay, step_size, bc2_sqrt);
            if (write_params) stage[i] = lj_f32_to_bf16(pi);
        }
        covered = begin + seg->count;
    }
}

void lj_offload_update(lj_model *m, const lj_adamw_segment *segments, int num_segments, const lj_adamw_hparams *hp,
                       float lr, int step, float norm_sq) {
    float scalars[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(scalars, hp, lr, step);
    const lj_ops *cpu = lj_ops_cpu();
    const double t0 = lj_time_sec();
    if (m->ops->grad_dtype == LJ_DTYPE_F32) {
        /* params == master: the CPU backend's update writes the f32 master only */
        cpu->adamw_update(m->master, m->master, m->offload_grad, m->adam_m, m->adam_v, segments, num_segments, hp,
                          scalars, &norm_sq);
    } else {
        host_adamw_bf16(m, segments, num_segments, hp, scalars, &norm_sq);
    }
    const double t1 = lj_time_sec();
    if (m->ops->param_dtype == LJ_DTYPE_BF16 && m->ops->grad_dtype == LJ_DTYPE_BF16)
        lj_model_offload_push_staged(m); /* the pass above wrote the bf16 shard */
    else
        lj_model_offload_push_params(m); /* returns once the copy has landed */
    m->offload_sec[1] += t1 - t0;
    m->offload_sec[2] += lj_time_sec() - t1;
}

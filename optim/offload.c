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

/* ---- the hooks on the model (model.h lj_model_offload) ---------------------------- */

/* When the host already wrote the bf16 shard into the staging (the host AdamW does, in the same
 * pass as the update): uploads the staging into the params at the shard and returns once the
 * copy has landed. bf16 params only. */
static void push_staged(lj_model *m) {
    const lj_ops *ops = m->ops;
    LJ_ASSERT(ops->param_dtype == LJ_DTYPE_BF16, "offload: staged push of %s params", lj_dtype_name(ops->param_dtype));
    char *dst = (char *)m->params + (size_t)m->shard_begin * sizeof(uint16_t);
    ops->upload(dst, lj_offload_of(m)->stage, (size_t)m->shard_numel * sizeof(uint16_t));
    /* the staging is reused by the next step's download: the upload has read it */
    ops->synchronize();
}

/* Rounds this rank's host master shard to the param dtype on the host (lj_f32_to_bf16, the device
 * cast's round-to-nearest-even) and uploads it into the params at the shard (params +
 * shard_begin); returns once the copy has landed. */
static void push_params(lj_model *m) {
    const lj_ops *ops = m->ops;
    const int64_t S = m->shard_numel;
    char *dst = (char *)m->params + (size_t)m->shard_begin * lj_dtype_size(ops->param_dtype);
    if (ops->param_dtype == LJ_DTYPE_F32) {
        ops->upload(dst, m->master, (size_t)S * sizeof(float));
    } else {
        LJ_ASSERT(ops->param_dtype == LJ_DTYPE_BF16, "offload: param dtype %s", lj_dtype_name(ops->param_dtype));
        uint16_t *stage = lj_offload_of(m)->stage;
        const float *master = m->master;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < S; i++) stage[i] = lj_f32_to_bf16(master[i]);
        push_staged(m);
        return;
    }
    ops->synchronize();
}

static void destroy(lj_model *m) {
    lj_offload *o = lj_offload_of(m);
    free(o->host);
    if (o->pinned) m->ops->host_free(o->pinned);
    free(o);
    m->offload = NULL;
    m->offload_state = NULL;
}

static const lj_model_offload g_offload = {.push_params = push_params, .destroy = destroy};

void lj_offload_attach(lj_model *m, const lj_offload_options *o) {
    LJ_ASSERT(!m->offload, "lj_offload_attach: called twice");
    if (!o || !o->enabled || !m->opt.training || m->opt.kv_cache_tokens > 0) return;
    m->offload_state = lj_calloc(1, sizeof(lj_offload));
    m->offload = &g_offload;
}

lj_offload *lj_offload_of(const lj_model *m) { return m->offload == &g_offload ? m->offload_state : NULL; }

void lj_offload_plan(lj_model *m, lj_buffer_walker *w) {
    const lj_offload *o = lj_offload_of(m);
    if (!w->bind || !o) return;
    const size_t f = offload_round((size_t)m->shard_numel * sizeof(float));
    char *p = o->host;
    m->master = (float *)p;
    m->adam_m = (float *)(p + f);
    m->adam_v = (float *)(p + 2 * f);
}

/* ---- host memory ------------------------------------------------------------------ */

void lj_offload_bytes(const lj_model *m, size_t *state, size_t *staging) {
    *state = *staging = 0;
    if (!lj_offload_of(m)) return;
    const size_t S = (size_t)m->shard_numel;
    *state = 3 * offload_round(S * sizeof(float));
    *staging = offload_round(grad_elems(m) * sizeof(float)) + offload_round(S * sizeof(uint16_t)) +
               offload_round(lj_ops_cpu()->global_norm_workspace_bytes(m->shard_numel));
}

lj_status lj_offload_alloc(lj_model *m) {
    size_t state, staging;
    lj_offload_bytes(m, &state, &staging);
    lj_offload *o = lj_offload_of(m);
    if (state == 0 || o->host) return LJ_OK;
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
    o->host = p; /* master, adam_m, adam_v: bound by lj_offload_plan */
    char *copied = pinned ? (char *)pinned : p + 3 * f; /* grad, then stage */
    if (pinned) memset(pinned, 0, g + st);
    o->pinned = pinned;
    o->grad = g ? (float *)copied : NULL;
    o->stage = copied + g;
    o->ws = pinned ? p + 3 * f : p + 3 * f + g + st;
    return LJ_OK;
}

float lj_offload_grad_norm_sq(lj_model *m, const void *grad_shard, int64_t n_grad) {
    lj_offload *o = lj_offload_of(m);
    const lj_ops *ops = m->ops;
    LJ_ASSERT(o && o->host, "optimizer offload: no host state (lj_plan_allocate binds it)");
    LJ_ASSERT(n_grad >= 0 && n_grad <= m->shard_numel, "offload: %lld gradients in a shard of %lld",
              (long long)n_grad, (long long)m->shard_numel);
    o->n_grad = n_grad;
    const double t0 = lj_time_sec();
    float norm_sq = 0.0f;
    if (ops->grad_dtype == LJ_DTYPE_F32) {
        float *g = o->grad; /* elements past n_grad stay zero (allocation) */
        ops->download(g, grad_shard, (size_t)n_grad * sizeof(float));
        ops->synchronize();
        lj_ops_cpu()->global_norm_sq(&norm_sq, g, n_grad, o->ws);
        o->sec[0] += lj_time_sec() - t0;
        return norm_sq;
    }
    LJ_ASSERT(ops->grad_dtype == LJ_DTYPE_BF16, "offload: grad dtype %s", lj_dtype_name(ops->grad_dtype));
    const uint16_t *stage = o->stage;
    ops->download(o->stage, grad_shard, (size_t)n_grad * sizeof(uint16_t));
    ops->synchronize(); /* the copy has landed before the host reads it */
    /* the CPU backend's global_norm_sq over the gradients as f32 (exact from bf16): the same
     * per-LJ_CPU_NORM_CHUNK double partials summed in the same order, so the same float */
    double *part = o->ws;
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
    o->sec[0] += lj_time_sec() - t0;
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
    const lj_offload *o = lj_offload_of(m);
    const int64_t S = m->shard_numel, n_grad = o->n_grad;
    uint16_t *stage = o->stage;
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
    lj_offload *o = lj_offload_of(m);
    float scalars[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(scalars, hp, lr, step);
    const lj_ops *cpu = lj_ops_cpu();
    const double t0 = lj_time_sec();
    if (m->ops->grad_dtype == LJ_DTYPE_F32) {
        /* params == master: the CPU backend's update writes the f32 master only */
        cpu->adamw_update(m->master, m->master, o->grad, m->adam_m, m->adam_v, segments, num_segments, hp,
                          scalars, &norm_sq);
    } else {
        host_adamw_bf16(m, segments, num_segments, hp, scalars, &norm_sq);
    }
    const double t1 = lj_time_sec();
    if (m->ops->param_dtype == LJ_DTYPE_BF16 && m->ops->grad_dtype == LJ_DTYPE_BF16)
        push_staged(m); /* the pass above wrote the bf16 shard */
    else
        push_params(m); /* returns once the copy has landed */
    o->sec[1] += t1 - t0;
    o->sec[2] += lj_time_sec() - t1;
}

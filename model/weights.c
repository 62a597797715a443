/* weights.c: a model's weights between the host and its buffers: random init, upload of host
 * f32 values (rounded to the param dtype, the master shard kept in f32), download; under
 * optimizer offload the master shard is host memory and the params follow it through the
 * offload's push_params hook (optim/offload.h). Where this rank's part of the state
 * lives is the residency's (model/residency.h) and the shard bounds of lj_model. */
#include "model/model.h"

#include "base/progress.h"

#include <math.h>
#include <string.h>


/* Host f32 src[n] into the param-dtype device buffer `dst`: rounded on the host in chunks. */
void lj_model_upload_as_param(const lj_model *m, void *dst, const float *src, int64_t n) {
    const lj_ops *ops = m->ops;
    if (ops->param_dtype == LJ_DTYPE_F32) {
        ops->upload(dst, src, (size_t)n * sizeof(float));
        return;
    }
    LJ_ASSERT(ops->param_dtype == LJ_DTYPE_BF16, "upload: param dtype %s", lj_dtype_name(ops->param_dtype));
    enum { CHUNK = 1 << 22 };
    uint16_t *stage = lj_malloc((size_t)(n < CHUNK ? n : CHUNK) * sizeof(uint16_t));
    for (int64_t base = 0; base < n; base += CHUNK) {
        const int64_t k = n - base < CHUNK ? n - base : CHUNK;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < k; i++) stage[i] = lj_f32_to_bf16(src[base + i]);
        ops->upload((uint16_t *)dst + base, stage, (size_t)k * sizeof(uint16_t));
    }
    free(stage);
}

/* The param copy of host f32 values [offset, offset + n) of the flat layout (replicated params),
 * but for the ranges that hold --fp8-param-gather's codes instead (lj_linear_codes_in_params):
 * those are written by the cast from the master, before the next forward (the caller marks them
 * stale), and an upload there would leave codes that are not the weights'. */
static void upload_param_copy(lj_model *m, const float *src, int64_t offset, int64_t n) {
    const size_t sp = lj_dtype_size(m->ops->param_dtype);
    int64_t co[LJ_LINEAR_FP8_MAX], cn[LJ_LINEAR_FP8_MAX];
    const int nc = lj_linear_codes_in_params(&m->linear, &m->layout, co, cn);
    int64_t at = offset;
    const int64_t end = offset + n;
    for (int i = 0; i <= nc && at < end; i++) {
        const int64_t hole = i < nc ? co[i] : end, after = i < nc ? co[i] + cn[i] : end;
        const int64_t stop = hole < end ? hole : end;
        if (stop > at) lj_model_upload_as_param(m, (char *)m->params + (size_t)at * sp, src + (at - offset), stop - at);
        if (after > at) at = after;
    }
}

/* Uploads host f32 values [offset, offset + n) of the flat parameter buffer: into the params
 * directly on an f32 backend; else rounded to the param dtype on the host (round-to-nearest-even,
 * the device cast's rule) into the params, and the part inside this rank's shard, unrounded, into
 * the master weights. Sharded parameters go through the residency. */
static void upload_range(lj_model *m, const float *src, int64_t offset, int64_t n) {
    const lj_ops *ops = m->ops;
    const int offload = m->offload != NULL;
    lj_linear_weights_changed(&m->linear); /* kept FP8 weights are cast again before the next forward */
    if (lj_model_shards_params(m)) {
        if (offload) {
            /* the host master shard only; the params follow from it (the offload's push_params) */
            m->residency->upload_shard(m, m->master, src, offset, n, NULL, 1);
            return;
        }
        /* this rank's shard: the f32 values into the master shard (on an f32 backend that is the
         * params), then the param-dtype copy cast from it on the device */
        if (ops->param_dtype == LJ_DTYPE_F32 || m->master) {
            float *master = ops->param_dtype == LJ_DTYPE_F32 ? (float *)m->params : m->master;
            m->residency->upload_shard(m, master, src, offset, n, ops->param_dtype == LJ_DTYPE_F32 ? NULL : m->params, 0);
        } else { /* an inference model keeps no master weights: the params alone */
            m->residency->upload_shard(m, NULL, src, offset, n, m->params, 0);
        }
        return;
    }
    upload_param_copy(m, src, offset, n);
    if (ops->param_dtype == LJ_DTYPE_F32 && !offload) return; /* the master is the params */
    const int64_t lo = offset > m->shard_begin ? offset : m->shard_begin;
    const int64_t hi = offset + n < m->shard_begin + m->shard_numel ? offset + n : m->shard_begin + m->shard_numel;
    if (!m->master || hi <= lo) return;
    const size_t bytes = (size_t)(hi - lo) * sizeof(float);
    if (offload) memcpy(m->master + (lo - m->shard_begin), src + (lo - offset), bytes);
    else ops->upload(m->master + (lo - m->shard_begin), src + (lo - offset), bytes);
}

/* The normal init's standard deviation of parameter p: --init-method-std (initializer_range), and
 * for the layers' output projections (o_proj, down_proj) std / sqrt(2 L), Megatron-LM's
 * scaled_init_method_normal (megatron/core/utils.py; GPT-2's residual scaling). */
static double init_std(const lj_model *m, int p) {
    const lj_param_info *info = &m->layout.params[p];
    const double std = m->cfg.initializer_range;
    if (info->layer < 0) return std;
    if (p == lj_param_index(&m->layout, info->layer, LJ_P_O) || p == lj_param_index(&m->layout, info->layer, LJ_P_DOWN))
        return std / sqrt(2.0 * m->cfg.num_hidden_layers);
    return std;
}

/* The init of lj_model_init_weights (normal) or lj_model_init_weights_dummy (uniform). */
static void init_weights(lj_model *m, uint64_t seed, int uniform) {
    enum { CHUNK = 1 << 20, STAGE = 1 << 24 };
    float *stage = lj_malloc((size_t)STAGE * sizeof(float));
    lj_progress pg; /* a large model takes a while on the CPU (354M parameters: about 45 s) */
    char what[96];
    snprintf(what, sizeof what, "initialising %.0fM parameters", (double)m->layout.total / 1e6);
    lj_progress_begin(&pg, what, (uint64_t)m->layout.total * sizeof(float));
    uint64_t done = 0;
    for (int p = 0; p < m->layout.count; p++) {
        const lj_param_info *info = &m->layout.params[p];
        const double std = init_std(m, p);
        for (int64_t base = 0; base < info->numel; base += STAGE) {
            const int64_t n = info->numel - base < STAGE ? info->numel - base : STAGE;
            if (info->kind == LJ_PARAM_NORM || info->kind == LJ_PARAM_BIAS) {
                const float v = info->kind == LJ_PARAM_NORM ? 1.0f : 0.0f; /* HF: nn.Linear biases start at 0 */
                for (int64_t i = 0; i < n; i++) stage[i] = v;
            } else {
                /* One RNG stream per chunk of CHUNK elements: the values do not depend on the
                 * thread count. */
                const int64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
                for (int64_t c = 0; c < chunks; c++) {
                    lj_rng rng;
                    lj_rng_seed(&rng, seed ^ ((uint64_t)(p + 1) << 40) ^ (uint64_t)((base / CHUNK) + c));
                    const int64_t end = (c + 1) * CHUNK < n ? (c + 1) * CHUNK : n;
                    if (uniform) { /* U(-a, a) with a = std sqrt(3): the same variance */
                        const float a = (float)(std * sqrt(3.0)), unit = 0x1p-22f; /* [0, 2^23) x 2^-22 - 1: [-1, 1) */
                        for (int64_t i = c * CHUNK; i < end; i++)
                            stage[i] = a * ((float)(lj_rng_u64(&rng) >> 41) * unit - 1.0f);
                    } else {
                        for (int64_t i = c * CHUNK; i < end; i++) stage[i] = (float)(std * lj_rng_normal(&rng));
                    }
                }
            }
            upload_range(m, stage, info->offset + base, n);
            done += (uint64_t)n * sizeof(float);
            lj_progress_update(&pg, done);
        }
    }
    lj_progress_end(&pg);
    free(stage);
    lj_model_moments_zero(m);
    if (m->grads) lj_model_zero_grads(m);
    if (m->offload && lj_model_shards_params(m)) m->offload->push_params(m);
}

void lj_model_init_weights(lj_model *m, uint64_t seed) { init_weights(m, seed, 0); }

void lj_model_init_weights_dummy(lj_model *m, uint64_t seed) { init_weights(m, seed, 1); }

void lj_model_set_weights(lj_model *m, const float *params) {
    upload_range(m, params, 0, m->layout.total);
    if (m->offload && lj_model_shards_params(m)) m->offload->push_params(m);
}

void lj_model_set_weights_range(lj_model *m, const float *src, int64_t offset, int64_t n) {
    LJ_ASSERT(offset >= 0 && n >= 0 && offset + n <= m->layout.total);
    upload_range(m, src, offset, n);
}

void lj_model_set_weights_done(lj_model *m) {
    if (m->offload && lj_model_shards_params(m)) m->offload->push_params(m);
}

void lj_model_get_weights(lj_model *m, float *params) {
    const int f32 = m->ops->param_dtype == LJ_DTYPE_F32;
    LJ_ASSERT(!lj_model_shards_params(m), "sharded parameters (ZeRO-3): gather them first (lj_dp_gather_state)");
    LJ_ASSERT(f32 || m->shard_numel == m->layout.total, "sharded master weights: gather them first");
    LJ_ASSERT(f32 || m->master, "an inference model keeps no f32 master weights");
    if (!f32 && m->offload) memcpy(params, m->master, (size_t)m->layout.total * sizeof(float));
    else m->ops->download(params, f32 ? m->params : (void *)m->master, (size_t)m->layout.total * sizeof(float));
}

/* The elements of the flat layout this rank's shard holds (the last shard's padding clipped). */
static int64_t shard_count(const lj_model *m) {
    const int64_t P = m->layout.total;
    return m->shard_begin + m->shard_numel <= P ? m->shard_numel : P - m->shard_begin;
}

/* The f32 state buffers (master, f32 moments) live in device memory, or host memory under
 * optimizer offload: a copy of n floats either way. */
static void state_copy_in(const lj_model *m, void *dst, const float *src, int64_t n) {
    if (m->offload) memcpy(dst, src, (size_t)n * sizeof(float));
    else m->ops->upload(dst, src, (size_t)n * sizeof(float));
}

void lj_model_upload_shard(lj_model *m, float *dst, const float *full) {
    lj_model_state_fence(m);
    if (lj_model_shards_params(m)) {
        m->residency->upload_shard(m, dst, full, 0, m->layout.total, NULL, m->offload != NULL);
        return;
    }
    const int64_t n = shard_count(m);
    if (n > 0) state_copy_in(m, dst, full + m->shard_begin, n);
}

lj_dtype lj_model_state_dtype(const lj_model *m, int t) {
    return t == LJ_STATE_EXP_AVG ? m->opt.exp_avg_dtype : t == LJ_STATE_EXP_AVG_SQ ? m->opt.exp_avg_sq_dtype : LJ_DTYPE_F32;
}

static char *state_at(const lj_model *m, int t, int64_t at) {
    char *base = t == LJ_STATE_MASTER ? (char *)m->master : t == LJ_STATE_EXP_AVG ? (char *)m->adam_m : (char *)m->adam_v;
    return base + (size_t)at * lj_dtype_size(lj_model_state_dtype(m, t));
}

void lj_model_state_copy_out(const lj_model *m, int t, void *dst, int64_t at, int64_t n, int async) {
    LJ_ASSERT(at >= 0 && n >= 0 && at + n <= m->shard_numel, "state range [%lld, +%lld) of %lld", (long long)at,
              (long long)n, (long long)m->shard_numel);
    const size_t bytes = (size_t)n * lj_dtype_size(lj_model_state_dtype(m, t));
    if (bytes == 0) return;
    const char *src = state_at(m, t, at);
    if (m->offload) memcpy(dst, src, bytes);
    else if (async && m->ops->download_async) m->ops->download_async(dst, src, bytes);
    else m->ops->download(dst, src, bytes);
}

void lj_model_state_download(const lj_model *m, int t, float *dst, int64_t at, int64_t n) {
    lj_model_state_copy_out(m, t, dst, at, n, 0);
    if (lj_model_state_dtype(m, t) == LJ_DTYPE_F32) return;
    /* bf16 in the first half of dst, widened in place from the last element down (element i's
     * f32 covers bf16 elements 2i and 2i+1, read before for every i > 0, and i itself for i = 0) */
    const uint16_t *h = (const uint16_t *)dst;
    for (int64_t i = n - 1; i >= 0; i--) dst[i] = lj_bf16_to_f32(h[i]);
}

void lj_model_state_copy_wait(const lj_model *m) {
    if (!m->offload && m->ops->download_async_wait) m->ops->download_async_wait();
}

void lj_model_state_fence(const lj_model *m) {
    if (!m->offload && m->ops->download_async_fence) m->ops->download_async_fence();
}

void lj_model_state_upload(const lj_model *m, int t, const float *src, int64_t at, int64_t n) {
    LJ_ASSERT(at >= 0 && n >= 0 && at + n <= m->shard_numel, "state range [%lld, +%lld) of %lld", (long long)at,
              (long long)n, (long long)m->shard_numel);
    if (n == 0) return;
    lj_model_state_fence(m);
    char *dst = state_at(m, t, at);
    if (lj_model_state_dtype(m, t) == LJ_DTYPE_F32) {
        state_copy_in(m, dst, src, n);
        return;
    }
    uint16_t *h = lj_malloc((size_t)n * sizeof(uint16_t));
    for (int64_t i = 0; i < n; i++) h[i] = lj_f32_to_bf16(src[i]);
    m->ops->upload(dst, h, (size_t)n * sizeof(uint16_t));
    m->ops->synchronize(); /* an upload may still read h (pinned staging runs asynchronously) */
    free(h);
}

void lj_model_moments_zero(const lj_model *m) {
    lj_model_state_fence(m);
    for (int t = LJ_STATE_EXP_AVG; t <= LJ_STATE_EXP_AVG_SQ; t++) {
        void *p = t == LJ_STATE_EXP_AVG ? m->adam_m : m->adam_v;
        if (!p || m->shard_numel <= 0) continue;
        const size_t bytes = (size_t)m->shard_numel * lj_dtype_size(lj_model_state_dtype(m, t));
        if (m->offload) memset(p, 0, bytes);
        else m->ops->memset_zero(p, bytes);
    }
}

void lj_model_upload_state_shard(lj_model *m, int t, const float *full) {
    if (lj_model_shards_params(m)) {
        LJ_ASSERT(lj_model_state_dtype(m, t) == LJ_DTYPE_F32, "bf16 moments under ZeRO-3 over several ranks");
        lj_model_upload_shard(m, (float *)state_at(m, t, 0), full);
        return;
    }
    const int64_t n = shard_count(m);
    if (n > 0) lj_model_state_upload(m, t, full + m->shard_begin, 0, n);
}

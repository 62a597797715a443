/* model.c: Llama 3 forward, backward (with per-layer recompute) and KV-cache generation,
 * written once over the op table. Equations: HF transformers LlamaForCausalLM
 * (modeling_llama.py): pre-norm decoder layers x + attn(rmsnorm(x)), then + mlp(rmsnorm(.)). */
#include "model/model.h"

#include "parallel/zero3.h"

#include <math.h>
#include <string.h>

const char *lj_recompute_name(lj_recompute r) {
    switch (r) {
    case LJ_RECOMPUTE_NONE: return "none";
    case LJ_RECOMPUTE_SELECTIVE: return "selective";
    case LJ_RECOMPUTE_FULL: return "full";
    }
    return "?";
}

void lj_model_init(lj_model *m, const lj_ops *ops, const lj_model_config *cfg, const lj_model_options *opt) {
    memset(m, 0, sizeof *m);
    LJ_ASSERT(cfg->num_hidden_layers <= LJ_MAX_LAYERS, "at most %d layers", LJ_MAX_LAYERS);
    m->ops = ops;
    m->cfg = *cfg;
    m->opt = *opt;
    lj_param_layout_init(&m->layout, cfg);
    m->residual = lj_calloc((size_t)cfg->num_hidden_layers + 1, sizeof(void *));
    m->layers = lj_calloc((size_t)cfg->num_hidden_layers, sizeof(lj_layer_acts));
    const size_t N = (size_t)(opt->kv_cache_tokens > 0 ? 1 : opt->micro_batch_size) * opt->seq_length;
    m->host_ids = lj_malloc(2 * N * sizeof(int32_t));
    m->host_losses = lj_malloc(N * sizeof(float));
    /* ZeRO shards: equal slices of the flat buffers padded to a multiple of W * 64 elements */
    const int64_t P = m->layout.total;
    const int W = opt->zero_stage > 0 && opt->dp_world_size > 1 ? opt->dp_world_size : 1;
    m->zero3 = lj_zero3_create(m);
    if (m->zero3 && !m->zero3->shard_params) {
        /* ZeRO-2: flat shards as under stage 1, but only this rank's shard of the gradients. The
         * gradient slots are reduced from the host as the layers' backward ends (as under stage
         * 3), so forward + backward is not captured as a CUDA graph either. */
        m->opt.graphs = 0;
        m->shard_numel = m->zero3->flat.shard_numel;
        m->padded_numel = m->shard_numel * W;
        m->shard_begin = m->shard_numel * opt->dp_rank;
        m->grad_numel = m->shard_numel;
    } else if (m->zero3) {
        /* ZeRO-3: every buffer is this rank's shard of the layer partition. The collectives of
         * a layer's gather and reduce-scatter are queued from the host as the layers run, with
         * slot bookkeeping on the host, so forward + backward is not captured as a CUDA graph. */
        m->opt.graphs = 0;
        m->shard_numel = m->padded_numel = m->zero3->part.shard_numel;
        m->shard_begin = 0;
        m->grad_numel = m->shard_numel;
    } else if (W > 1) {
        m->shard_numel = ((P + W - 1) / W + 63) / 64 * 64;
        m->padded_numel = m->shard_numel * W;
        m->shard_begin = m->shard_numel * opt->dp_rank;
        m->grad_numel = m->padded_numel;
    } else {
        m->shard_numel = m->padded_numel = m->grad_numel = P;
        m->shard_begin = 0;
    }
}

void lj_model_free(lj_model *m) {
    if (m->fwd_bwd_graph.exec) m->ops->graph_destroy(m->fwd_bwd_graph.exec);
    if (m->step_graph.exec) m->ops->graph_destroy(m->step_graph.exec);
    lj_zero3_destroy(m->zero3);
    lj_param_layout_free(&m->layout);
    free(m->residual);
    free(m->layers);
    free(m->host_ids);
    free(m->host_losses);
    free(m->offload_host);
    memset(m, 0, sizeof *m);
}

/* ---- RoPE tables ---------------------------------------------------------------- */

void lj_rope_tables(const lj_model_config *c, int rows, float *cos_out, float *sin_out) {
    const int half = c->head_dim / 2;
    float *inv_freq = lj_malloc((size_t)half * sizeof(float));
    for (int i = 0; i < half; i++) {
        /* fp32 as in transformers: 1 / theta^(2i/hd) */
        inv_freq[i] = (float)(1.0 / pow(c->rope_theta, (double)(2 * i) / (double)c->head_dim));
        if (c->rope_scaling_llama3) {
            const double old_ctx = c->rope_original_max_position_embeddings;
            const double low_wavelen = old_ctx / c->rope_low_freq_factor;
            const double high_wavelen = old_ctx / c->rope_high_freq_factor;
            const double wavelen = 2.0 * M_PI / (double)inv_freq[i];
            double f = inv_freq[i];
            if (wavelen > low_wavelen) f = f / c->rope_factor;
            else if (wavelen >= high_wavelen) {
                const double smooth =
                    (old_ctx / wavelen - c->rope_low_freq_factor) / (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1.0 - smooth) * f / c->rope_factor + smooth * f;
            }
            inv_freq[i] = (float)f;
        }
    }
    for (int t = 0; t < rows; t++) {
        for (int i = 0; i < half; i++) {
            const float angle = (float)t * inv_freq[i]; /* fp32 product, as in transformers */
            cos_out[(size_t)t * half + i] = (float)cos((double)angle);
            sin_out[(size_t)t * half + i] = (float)sin((double)angle);
        }
    }
    free(inv_freq);
}

void lj_model_upload_rope(lj_model *m) {
    const int rows = m->opt.kv_cache_tokens > 0 ? m->opt.kv_cache_tokens : m->opt.seq_length;
    const size_t n = (size_t)rows * (m->cfg.head_dim / 2);
    float *c = lj_malloc(n * sizeof(float)), *s = lj_malloc(n * sizeof(float));
    lj_rope_tables(&m->cfg, rows, c, s);
    m->ops->upload(m->rope_cos, c, n * sizeof(float));
    m->ops->upload(m->rope_sin, s, n * sizeof(float));
    free(c);
    free(s);
}

/* ---- weights -------------------------------------------------------------------- */

/* Uploads host f32 values [offset, offset + n) of the flat parameter buffer: into the params
 * directly on an f32 backend; else rounded to the param dtype on the host (round-to-nearest-even,
 * the device cast's rule) into the params, and the part inside this rank's shard, unrounded, into
 * the master weights. */
static int shards_params(const lj_model *m) { return m->zero3 && m->zero3->shard_params; }

/* Host f32 src[n] into the param-dtype device buffer `dst`: rounded on the host in chunks. */
static void upload_as_param(const lj_model *m, void *dst, const float *src, int64_t n) {
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

static void upload_range(lj_model *m, const float *src, int64_t offset, int64_t n) {
    const lj_ops *ops = m->ops;
    const int offload = m->offload_host != NULL;
    if (shards_params(m)) {
        if (offload) {
            /* the host master shard only; the params follow from it (lj_model_offload_push_params) */
            lj_zero3_upload_f32(m, m->master, src, offset, n, NULL, 1);
            return;
        }
        /* this rank's shard: the f32 values into the master shard (on an f32 backend that is the
         * params), then the param-dtype copy cast from it on the device */
        if (ops->param_dtype == LJ_DTYPE_F32 || m->master) {
            float *master = ops->param_dtype == LJ_DTYPE_F32 ? (float *)m->params : m->master;
            lj_zero3_upload_f32(m, master, src, offset, n, ops->param_dtype == LJ_DTYPE_F32 ? NULL : m->params, 0);
        }
        return;
    }
    upload_as_param(m, (char *)m->params + (size_t)offset * lj_dtype_size(ops->param_dtype), src, n);
    if (ops->param_dtype == LJ_DTYPE_F32 && !offload) return; /* the master is the params */
    const int64_t lo = offset > m->shard_begin ? offset : m->shard_begin;
    const int64_t hi = offset + n < m->shard_begin + m->shard_numel ? offset + n : m->shard_begin + m->shard_numel;
    if (!m->master || hi <= lo) return;
    const size_t bytes = (size_t)(hi - lo) * sizeof(float);
    if (offload) memcpy(m->master + (lo - m->shard_begin), src + (lo - offset), bytes);
    else ops->upload(m->master + (lo - m->shard_begin), src + (lo - offset), bytes);
}

void lj_model_init_weights(lj_model *m, uint64_t seed) {
    enum { CHUNK = 1 << 20, STAGE = 1 << 24 };
    const double std = m->cfg.initializer_range;
    float *stage = lj_malloc((size_t)STAGE * sizeof(float));
    for (int p = 0; p < m->layout.count; p++) {
        const lj_param_info *info = &m->layout.params[p];
        for (int64_t base = 0; base < info->numel; base += STAGE) {
            const int64_t n = info->numel - base < STAGE ? info->numel - base : STAGE;
            if (info->kind == LJ_PARAM_NORM) {
                for (int64_t i = 0; i < n; i++) stage[i] = 1.0f;
            } else {
                /* One RNG stream per chunk of CHUNK elements: the values do not depend on the
                 * thread count. */
                const int64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
                for (int64_t c = 0; c < chunks; c++) {
                    lj_rng rng;
                    lj_rng_seed(&rng, seed ^ ((uint64_t)(p + 1) << 40) ^ (uint64_t)((base / CHUNK) + c));
                    const int64_t end = (c + 1) * CHUNK < n ? (c + 1) * CHUNK : n;
                    for (int64_t i = c * CHUNK; i < end; i++) stage[i] = (float)(std * lj_rng_normal(&rng));
                }
            }
            upload_range(m, stage, info->offset + base, n);
        }
    }
    free(stage);
    if (m->adam_m && m->offload_host) {
        memset(m->adam_m, 0, (size_t)m->shard_numel * sizeof(float));
        memset(m->adam_v, 0, (size_t)m->shard_numel * sizeof(float));
    } else if (m->adam_m) {
        m->ops->memset_zero(m->adam_m, (size_t)m->shard_numel * sizeof(float));
        m->ops->memset_zero(m->adam_v, (size_t)m->shard_numel * sizeof(float));
    }
    if (m->grads) lj_model_zero_grads(m);
    if (m->offload_host && shards_params(m)) lj_model_offload_push_params(m);
}

void lj_model_set_weights(lj_model *m, const float *params) {
    upload_range(m, params, 0, m->layout.total);
    if (m->offload_host && shards_params(m)) lj_model_offload_push_params(m);
}

void lj_model_get_weights(lj_model *m, float *params) {
    const int f32 = m->ops->param_dtype == LJ_DTYPE_F32;
    LJ_ASSERT(!shards_params(m), "ZeRO-3 sharded parameters: gather them first (lj_dp_gather_state)");
    LJ_ASSERT(f32 || m->shard_numel == m->layout.total, "sharded master weights: gather them first");
    LJ_ASSERT(f32 || m->master, "an inference model keeps no f32 master weights");
    if (!f32 && m->offload_host) memcpy(params, m->master, (size_t)m->layout.total * sizeof(float));
    else m->ops->download(params, f32 ? m->params : (void *)m->master, (size_t)m->layout.total * sizeof(float));
}

void lj_model_upload_shard(lj_model *m, float *dst, const float *full) {
    const int64_t P = m->layout.total;
    if (shards_params(m)) {
        lj_zero3_upload_f32(m, dst, full, 0, P, NULL, m->offload_host != NULL);
        return;
    }
    const int64_t n = m->shard_begin + m->shard_numel <= P ? m->shard_numel : P - m->shard_begin;
    if (n <= 0) return;
    if (m->offload_host) memcpy(dst, full + m->shard_begin, (size_t)n * sizeof(float));
    else m->ops->upload(dst, full + m->shard_begin, (size_t)n * sizeof(float));
}

/* ---- optimizer offload ------------------------------------------------------------ */

enum { OFFLOAD_ALIGN = 64 };

static size_t offload_round(size_t bytes) { return (bytes + OFFLOAD_ALIGN - 1) / OFFLOAD_ALIGN * OFFLOAD_ALIGN; }

void lj_model_offload_bytes(const lj_model *m, size_t *state, size_t *staging) {
    *state = *staging = 0;
    if (!m->opt.offload_optimizer || !m->opt.training || m->opt.kv_cache_tokens > 0) return;
    const size_t S = (size_t)m->shard_numel;
    *state = 3 * offload_round(S * sizeof(float));
    *staging = offload_round(S * sizeof(float)) + offload_round(S * sizeof(uint16_t)) +
               offload_round(lj_ops_cpu()->global_norm_workspace_bytes(m->shard_numel));
}

lj_status lj_model_offload_alloc(lj_model *m) {
    size_t state, staging;
    lj_model_offload_bytes(m, &state, &staging);
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

void lj_model_offload_push_params(lj_model *m) {
    const lj_ops *ops = m->ops;
    const int64_t S = m->shard_numel;
    char *dst = (char *)m->params + (size_t)m->shard_begin * lj_dtype_size(ops->param_dtype);
    if (ops->param_dtype == LJ_DTYPE_F32) {
        ops->upload(dst, m->master, (size_t)S * sizeof(float));
    } else {
        LJ_ASSERT(ops->param_dtype == LJ_DTYPE_BF16, "offload: param dtype %s", lj_dtype_name(ops->param_dtype));
        uint16_t *stage = m->offload_stage;
        const float *master = m->master;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < S; i++) stage[i] = lj_f32_to_bf16(master[i]);
        ops->upload(dst, stage, (size_t)S * sizeof(uint16_t));
    }
    /* the staging is reused by the next step's download: the upload has read it */
    ops->synchronize();
}

/* ---- helpers -------------------------------------------------------------------- */

/* Parameter `index` and its gradient: in the flat buffers, or under ZeRO-3 in its group's gather
 * slot and gradient slot (the group must be fetched, and hold a gradient slot); under ZeRO-2 the
 * parameter is in the flat buffer and its gradient in the group's gradient slot. */
static inline void *param(const lj_model *m, int index) {
    if (shards_params(m)) return lj_zero3_param(m, index);
    return (char *)m->params + (size_t)m->layout.params[index].offset * lj_dtype_size(m->ops->param_dtype);
}
static inline void *grad(const lj_model *m, int index) {
    if (m->zero3) return lj_zero3_grad(m, index);
    return (char *)m->grads + (size_t)m->layout.params[index].offset * lj_dtype_size(m->ops->grad_dtype);
}

/* ZeRO-2/3 hooks (no-ops without it; fetch and release are no-ops under ZeRO-2): group of layer l (-1: embedding, L: final norm, L + 1:
 * lm_head, the embedding when tied). */
static int z3_group(const lj_model *m, int l) {
    const lj_zero3 *z = m->zero3;
    if (l < 0) return z->embed_group;
    if (l == m->cfg.num_hidden_layers) return z->norm_group;
    if (l > m->cfg.num_hidden_layers) return z->head_group;
    return lj_zero_group_of_layer(&z->part, l);
}
static void z3_fetch(lj_model *m, int l, int direction) {
    if (m->zero3) lj_zero3_fetch(m, z3_group(m, l), direction);
}
static void z3_release(lj_model *m, int l) {
    if (m->zero3) lj_zero3_release(m, z3_group(m, l));
}
/* Returns 1 when the group's backward must run in the weight-gradient overwrite mode (its
 * slot was not zeroed; lj_zero3_grad_begin), and turns that mode on. */
static int z3_grad_begin(lj_model *m, int l) {
    const int overwrite = m->zero3 && lj_zero3_grad_begin(m, z3_group(m, l));
    if (overwrite) m->ops->set_weight_grad_overwrite(1);
    return overwrite;
}
static void overwrite_end(lj_model *m, int overwrite) {
    if (overwrite) m->ops->set_weight_grad_overwrite(0);
}
static void z3_grad_end(lj_model *m, int l) {
    if (m->zero3) lj_zero3_grad_end(m, z3_group(m, l));
}

typedef struct {
    int B, T, N, C, I, V, Q, KV, QKV, nh, nkv, hd, L;
    float eps;
} dims;

static dims model_dims(const lj_model *m, int B, int T) {
    const lj_model_config *c = &m->cfg;
    dims d;
    d.B = B;
    d.T = T;
    d.N = B * T;
    d.C = c->hidden_size;
    d.I = c->intermediate_size;
    d.V = c->vocab_size;
    d.nh = c->num_attention_heads;
    d.nkv = c->num_key_value_heads;
    d.hd = c->head_dim;
    d.Q = d.nh * d.hd;
    d.KV = d.nkv * d.hd;
    d.QKV = d.Q + 2 * d.KV;
    d.L = c->num_hidden_layers;
    d.eps = (float)c->rms_norm_eps;
    return d;
}

/* res_out = res_in + y; out = rmsnorm(res_out): the fused op or its unfused twin. */
static void residual_norm(const lj_model *m, void *res_out, void *out, float *rstd, const void *res_in, const void *y,
                          const void *w, int N, int C, float eps) {
    if (m->opt.fused) {
        m->ops->residual_rmsnorm_forward(res_out, out, rstd, res_in, y, w, N, C, eps);
    } else {
        m->ops->add(res_out, res_in, y, (int64_t)N * C);
        m->ops->rmsnorm_forward(out, rstd, res_out, w, N, C, eps);
    }
}

static void swiglu(const lj_model *m, void *out, const void *gate_up, int N, int I) {
    if (m->opt.fused) m->ops->swiglu_forward(out, gate_up, N, I);
    else m->ops->swiglu_forward_unfused(out, m->swiglu_tmp, gate_up, N, I);
}

/* The attention half of layer l from its input norm a->ln1 to a->res_mid and a->ln2. */
static void attention_block_forward(lj_model *m, const dims *d, int l, const void *res_in) {
    const lj_ops *ops = m->ops;
    lj_layer_acts *a = &m->layers[l];
    ops->matmul_forward(a->qkv, a->ln1, param(m, lj_param_index(l, LJ_P_Q)), d->N, d->C, d->QKV);
    ops->rope_forward(a->qkv, m->rope_cos, m->rope_sin, d->B, d->T, d->nh, d->nkv, d->hd);
    ops->attention_forward(a->attn, a->lse, a->qkv, d->B, d->T, d->nh, d->nkv, d->hd, m->ws_attention);
    ops->matmul_forward(m->proj, a->attn, param(m, lj_param_index(l, LJ_P_O)), d->N, d->Q, d->C);
    residual_norm(m, a->res_mid, a->ln2, a->ln2_rstd, res_in, m->proj, param(m, lj_param_index(l, LJ_P_LN2)), d->N,
                  d->C, d->eps);
}

/* The MLP half of layer l up to m->proj = down_proj output. */
static void mlp_block_forward(lj_model *m, const dims *d, int l) {
    const lj_ops *ops = m->ops;
    lj_layer_acts *a = &m->layers[l];
    ops->matmul_forward(a->gate_up, a->ln2, param(m, lj_param_index(l, LJ_P_GATE)), d->N, d->C, 2 * d->I);
    swiglu(m, a->mlp_act, a->gate_up, d->N, d->I);
    ops->matmul_forward(m->proj, a->mlp_act, param(m, lj_param_index(l, LJ_P_DOWN)), d->N, d->I, d->C);
}

/* ---- forward / backward --------------------------------------------------------- */

void lj_model_set_batch(lj_model *m, const int32_t *tokens) {
    const int B = m->opt.micro_batch_size, T = m->opt.seq_length;
    const size_t N = (size_t)B * T;
    int32_t *in = m->host_ids, *tg = m->host_ids + N;
    for (int b = 0; b < B; b++) {
        memcpy(in + (size_t)b * T, tokens + (size_t)b * (T + 1), (size_t)T * sizeof(int32_t));
        memcpy(tg + (size_t)b * T, tokens + (size_t)b * (T + 1) + 1, (size_t)T * sizeof(int32_t));
    }
    m->num_targets = 0;
    for (size_t i = 0; i < N; i++) m->num_targets += tg[i] >= 0;
    m->ops->upload(m->inputs, in, N * sizeof(int32_t));
    m->ops->upload(m->targets, tg, N * sizeof(int32_t));
}

void lj_model_forward(lj_model *m, int backward, float dloss) {
    const lj_ops *ops = m->ops;
    const dims d = model_dims(m, m->opt.micro_batch_size, m->opt.seq_length);
    LJ_ASSERT(!backward || m->opt.training, "backward needs a training plan");
    /* ZeRO-3: a layer's group is fetched before it computes and released after; the end of a
     * layer also reads the next group's input norm (fetched then) */
    z3_fetch(m, -1, +1);
    ops->embedding_forward(m->residual[0], m->inputs, param(m, m->layout.embed), d.N, d.C);
    z3_fetch(m, 0, +1);
    z3_release(m, -1);
    ops->rmsnorm_forward(m->layers[0].ln1, m->layers[0].ln1_rstd, m->residual[0], param(m, lj_param_index(0, LJ_P_LN1)),
                         d.N, d.C, d.eps);
    for (int l = 0; l < d.L; l++) {
        z3_fetch(m, l, +1);
        attention_block_forward(m, &d, l, m->residual[l]);
        mlp_block_forward(m, &d, l);
        const int last = l == d.L - 1;
        void *next_ln = last ? m->final_ln : m->layers[l + 1].ln1;
        float *next_rstd = last ? m->final_rstd : m->layers[l + 1].ln1_rstd;
        z3_fetch(m, l + 1, +1);
        const void *next_w = param(m, last ? m->layout.final_norm : lj_param_index(l + 1, LJ_P_LN1));
        residual_norm(m, m->residual[l + 1], next_ln, next_rstd, m->layers[l].res_mid, m->proj, next_w, d.N, d.C, d.eps);
        z3_release(m, l);
    }
    z3_release(m, d.L);
    z3_fetch(m, d.L + 1, +1);
    /* lm_head's gradient; tied, it is the embedding's, which collects until the embedding backward */
    if (backward) z3_grad_begin(m, d.L + 1);
    const void *w_out = param(m, m->layout.lm_head);
    if (m->opt.fused) {
        ops->cross_entropy_fused(m->losses, backward ? m->d_ln : NULL, backward ? grad(m, m->layout.lm_head) : NULL,
                                 m->final_ln, w_out, m->targets, d.N, d.C, d.V, dloss, m->ws_cross_entropy);
    } else {
        ops->matmul_forward(m->logits, m->final_ln, w_out, d.N, d.C, d.V);
        ops->cross_entropy_forward_backward(m->losses, backward ? m->logits : NULL, m->logits, m->targets, d.N, d.V,
                                            dloss);
        if (backward)
            ops->matmul_backward(m->d_ln, grad(m, m->layout.lm_head), m->logits, m->final_ln, w_out, d.N, d.C, d.V, 0);
    }
    if (m->zero3) {
        if (backward && !m->zero3->tied) z3_grad_end(m, d.L + 1);
        lj_zero3_release_all(m);
    }
}

/* Recomputes what layer l's policy did not keep, from its input (and kept tensors). */
static void recompute_layer(lj_model *m, const dims *d, int l) {
    const int policy = m->opt.recompute[l];
    if (policy == LJ_RECOMPUTE_NONE) return;
    lj_layer_acts *a = &m->layers[l];
    m->ops->rmsnorm_forward(a->ln1, a->ln1_rstd, m->residual[l], param(m, lj_param_index(l, LJ_P_LN1)), d->N, d->C,
                            d->eps);
    if (policy == LJ_RECOMPUTE_FULL) {
        attention_block_forward(m, d, l, m->residual[l]);
        m->ops->matmul_forward(a->gate_up, a->ln2, param(m, lj_param_index(l, LJ_P_GATE)), d->N, d->C, 2 * d->I);
    } else {
        m->ops->rmsnorm_forward(a->ln2, a->ln2_rstd, a->res_mid, param(m, lj_param_index(l, LJ_P_LN2)), d->N, d->C,
                                d->eps);
    }
    swiglu(m, a->mlp_act, a->gate_up, d->N, d->I);
}

void lj_model_backward(lj_model *m, float dloss) {
    (void)dloss; /* already applied by the loss gradient in lj_model_forward */
    const lj_ops *ops = m->ops;
    const dims d = model_dims(m, m->opt.micro_batch_size, m->opt.seq_length);
    const size_t sa = lj_dtype_size(ops->act_dtype);
    ops->memset_zero(m->d_res, (size_t)d.N * d.C * sa);
    /* ZeRO-3: each group is fetched (prefetching the next ones down), gets a gradient slot, and
     * is reduce-scattered into the gradient shard right after its backward */
    z3_fetch(m, d.L, -1);
    int overwrite = z3_grad_begin(m, d.L);
    ops->rmsnorm_backward(m->d_res, grad(m, m->layout.final_norm), m->d_ln, m->residual[d.L],
                          param(m, m->layout.final_norm), m->final_rstd, d.N, d.C, m->ws_rmsnorm);
    overwrite_end(m, overwrite);
    z3_grad_end(m, d.L);
    z3_release(m, d.L);
    for (int l = d.L - 1; l >= 0; l--) {
        z3_fetch(m, l, -1);
        overwrite = z3_grad_begin(m, l);
        recompute_layer(m, &d, l);
        lj_layer_acts *a = &m->layers[l];
        /* MLP: residual[l+1] = res_mid + down(swiglu(gate_up(ln2))) */
        ops->matmul_backward(m->d_mlp, grad(m, lj_param_index(l, LJ_P_DOWN)), m->d_res, a->mlp_act,
                             param(m, lj_param_index(l, LJ_P_DOWN)), d.N, d.I, d.C, 0);
        if (m->opt.fused) ops->swiglu_backward(m->d_gate_up, m->d_mlp, a->gate_up, d.N, d.I);
        else ops->swiglu_backward_unfused(m->d_gate_up, m->swiglu_tmp, m->d_mlp, a->gate_up, d.N, d.I);
        ops->matmul_backward(m->d_ln, grad(m, lj_param_index(l, LJ_P_GATE)), m->d_gate_up, a->ln2,
                             param(m, lj_param_index(l, LJ_P_GATE)), d.N, d.C, 2 * d.I, 0);
        ops->rmsnorm_backward(m->d_res, grad(m, lj_param_index(l, LJ_P_LN2)), m->d_ln, a->res_mid,
                              param(m, lj_param_index(l, LJ_P_LN2)), a->ln2_rstd, d.N, d.C, m->ws_rmsnorm);
        /* attention: res_mid = residual[l] + o_proj(attention(rope(qkv(ln1)))) */
        ops->matmul_backward(m->d_attn, grad(m, lj_param_index(l, LJ_P_O)), m->d_res, a->attn,
                             param(m, lj_param_index(l, LJ_P_O)), d.N, d.Q, d.C, 0);
        ops->attention_backward(m->d_qkv, m->d_attn, a->qkv, a->attn, a->lse, d.B, d.T, d.nh, d.nkv, d.hd,
                                m->ws_attention);
        ops->rope_backward(m->d_qkv, m->rope_cos, m->rope_sin, d.B, d.T, d.nh, d.nkv, d.hd);
        ops->matmul_backward(m->d_ln, grad(m, lj_param_index(l, LJ_P_Q)), m->d_qkv, a->ln1,
                             param(m, lj_param_index(l, LJ_P_Q)), d.N, d.C, d.QKV, 0);
        ops->rmsnorm_backward(m->d_res, grad(m, lj_param_index(l, LJ_P_LN1)), m->d_ln, m->residual[l],
                              param(m, lj_param_index(l, LJ_P_LN1)), a->ln1_rstd, d.N, d.C, m->ws_rmsnorm);
        overwrite_end(m, overwrite);
        z3_grad_end(m, l);
        z3_release(m, l);
    }
    z3_grad_begin(m, -1); /* tied: held since the loss */
    ops->embedding_backward(grad(m, m->layout.embed), m->d_res, m->inputs, d.N, d.C, m->ws_embedding);
    z3_grad_end(m, -1);
    if (m->zero3) lj_zero3_release_all(m);
}

void lj_model_zero_grads(lj_model *m) {
    /* ZeRO-2/3: the first reduction of each group overwrites its part of the shard */
    if (m->zero3) lj_zero3_grads_zeroed(m);
    else m->ops->memset_zero(m->grads, (size_t)m->grad_numel * lj_dtype_size(m->ops->grad_dtype));
}

/* What one captured graph runs: forward + backward, or the whole step with its tail. */
typedef struct {
    lj_model_step_tail tail; /* NULL: forward + backward only */
    void *ctx;
} graph_body;

static void run_body(lj_model *m, float dloss, const graph_body *b) {
    if (b->tail) lj_model_zero_grads(m);
    lj_model_forward(m, 1, dloss);
    lj_model_backward(m, dloss);
    if (b->tail) b->tail(m, b->ctx);
}

/* Runs `b` through graph `g`: eagerly without graphs; else captured once (again when dloss or
 * key changed) and replayed. A failed capture turns graphs off for this model and runs eagerly. */
static void run_graphed(lj_model *m, lj_model_graph *g, float dloss, uint64_t key, const graph_body *b) {
    const lj_ops *ops = m->ops;
    if (!m->opt.graphs || !ops->graph_capture_begin) {
        run_body(m, dloss, b);
        return;
    }
    if (g->exec && (g->dloss != dloss || g->key != key)) {
        ops->graph_destroy(g->exec);
        g->exec = NULL;
    }
    if (!g->exec) {
        lj_status s = ops->graph_capture_begin();
        if (s == LJ_OK) {
            run_body(m, dloss, b);
            s = ops->graph_capture_end(&g->exec);
        }
        if (s != LJ_OK) {
            lj_log_warn("graph capture of the %s failed, running without graphs: %s",
                        b->tail ? "training step" : "forward and backward", lj_error_message());
            m->opt.graphs = 0;
            g->exec = NULL;
            run_body(m, dloss, b);
            return;
        }
        g->dloss = dloss;
        g->key = key;
    }
    ops->graph_launch(g->exec);
}

void lj_model_forward_backward(lj_model *m, float dloss) {
    const graph_body b = {NULL, NULL};
    run_graphed(m, &m->fwd_bwd_graph, dloss, 0, &b);
}

void lj_model_train_step(lj_model *m, float dloss, uint64_t key, lj_model_step_tail tail, void *ctx) {
    LJ_ASSERT(m->opt.training && !m->zero3, "lj_model_train_step needs a training plan without ZeRO-3 sharding");
    const graph_body b = {tail, ctx};
    run_graphed(m, &m->step_graph, dloss, key, &b);
}

static void download_f32(const lj_model *m, float *dst, const void *src, int64_t n) {
    const lj_ops *ops = m->ops;
    if (ops->act_dtype == LJ_DTYPE_F32) {
        ops->download(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *tmp = lj_malloc((size_t)n * sizeof(uint16_t));
    ops->download(tmp, src, (size_t)n * sizeof(uint16_t));
    for (int64_t i = 0; i < n; i++) dst[i] = lj_bf16_to_f32(tmp[i]);
    free(tmp);
}

void lj_model_logits(lj_model *m, float *out) {
    LJ_ASSERT(m->logits && m->opt.kv_cache_tokens == 0, "lj_model_logits needs an unfused (full-logits) plan");
    lj_model_forward(m, 0, 0.0f);
    download_f32(m, out, m->logits, (int64_t)m->opt.micro_batch_size * m->opt.seq_length * m->cfg.vocab_size);
}

double lj_model_mean_loss(lj_model *m) {
    const int N = m->opt.micro_batch_size * m->opt.seq_length;
    m->ops->download(m->host_losses, m->losses, (size_t)N * sizeof(float));
    double sum = 0.0; /* ignored targets have loss 0 */
    for (int i = 0; i < N; i++) sum += m->host_losses[i];
    return m->num_targets ? sum / m->num_targets : 0.0;
}

/* ---- generation ----------------------------------------------------------------- */

void lj_model_decode(lj_model *m, const int32_t *ids, int n, int p0, float *logits) {
    const lj_ops *ops = m->ops;
    LJ_ASSERT(m->opt.kv_cache_tokens > 0 && n >= 1 && n <= m->opt.seq_length && p0 + n <= m->opt.kv_cache_tokens);
    const dims d = model_dims(m, 1, n);
    const size_t sa = lj_dtype_size(ops->act_dtype);
    const int half = d.hd / 2;
    void *x = m->residual[0];
    ops->upload(m->inputs, ids, (size_t)n * sizeof(int32_t));
    ops->embedding_forward(x, m->inputs, param(m, m->layout.embed), n, d.C);
    for (int l = 0; l < d.L; l++) {
        lj_layer_acts *a = &m->layers[l];
        ops->rmsnorm_forward(a->ln1, a->ln1_rstd, x, param(m, lj_param_index(l, LJ_P_LN1)), n, d.C, d.eps);
        ops->matmul_forward(a->qkv, a->ln1, param(m, lj_param_index(l, LJ_P_Q)), n, d.C, d.QKV);
        ops->rope_forward(a->qkv, m->rope_cos + (size_t)p0 * half, m->rope_sin + (size_t)p0 * half, 1, n, d.nh, d.nkv,
                          d.hd);
        ops->attention_decode(a->attn, a->kv_cache, a->qkv, p0, n, d.nh, d.nkv, d.hd);
        ops->matmul_forward(m->proj, a->attn, param(m, lj_param_index(l, LJ_P_O)), n, d.Q, d.C);
        residual_norm(m, a->res_mid, a->ln2, a->ln2_rstd, x, m->proj, param(m, lj_param_index(l, LJ_P_LN2)), n, d.C,
                      d.eps);
        ops->matmul_forward(a->gate_up, a->ln2, param(m, lj_param_index(l, LJ_P_GATE)), n, d.C, 2 * d.I);
        swiglu(m, a->mlp_act, a->gate_up, n, d.I);
        ops->matmul_forward(m->proj, a->mlp_act, param(m, lj_param_index(l, LJ_P_DOWN)), n, d.I, d.C);
        ops->add(x, a->res_mid, m->proj, (int64_t)n * d.C);
    }
    ops->rmsnorm_forward(m->final_ln, m->final_rstd, (char *)x + (size_t)(n - 1) * d.C * sa,
                         param(m, m->layout.final_norm), 1, d.C, d.eps);
    ops->matmul_forward(m->logits, m->final_ln, param(m, m->layout.lm_head), 1, d.C, d.V);
    download_f32(m, logits, m->logits, d.V);
}

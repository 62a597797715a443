/* model.c: the decoder's forward, backward (with per-layer recompute) and KV-cache generation,
 * written once over the op table. Equations: HF transformers LlamaForCausalLM
 * (modeling_llama.py): pre-norm decoder layers x + attn(rmsnorm(x)), then + mlp(rmsnorm(.));
 * Qwen3ForCausalLM (modeling_qwen3.py) adds q_norm/k_norm on each head before RoPE,
 * Qwen2ForCausalLM (modeling_qwen2.py) biases on q_proj, k_proj and v_proj.
 * Where the weights and gradients are is the residency's business (model/residency.h), how a
 * linear layer computes the linear module's (model/linear.h). */
#include "model/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *lj_recompute_name(lj_recompute r) {
    switch (r) {
    case LJ_RECOMPUTE_NONE: return "none";
    case LJ_RECOMPUTE_SELECTIVE: return "selective";
    case LJ_RECOMPUTE_FULL: return "full";
    }
    return "?";
}

lj_layer_spec lj_layer_spec_of(const lj_model_config *c) {
    lj_layer_spec s;
    memset(&s, 0, sizeof s);
    s.C = c->hidden_size;
    s.I = c->intermediate_size;
    s.V = c->vocab_size;
    s.nh = c->num_attention_heads;
    s.nkv = c->num_key_value_heads;
    s.hd = c->head_dim;
    s.Q = s.nh * s.hd;
    s.KV = s.nkv * s.hd;
    s.QKV = s.Q + 2 * s.KV;
    s.L = c->num_hidden_layers;
    s.eps = (float)c->rms_norm_eps;
    s.tied = c->tie_word_embeddings;
    s.qk_norm = c->qk_norm;
    s.qkv_bias = c->qkv_bias;
    return s;
}

void lj_model_init(lj_model *m, const lj_ops *ops, const lj_model_config *cfg, const lj_model_options *opt) {
    memset(m, 0, sizeof *m);
    LJ_ASSERT(cfg->num_hidden_layers <= LJ_MAX_LAYERS, "at most %d layers", LJ_MAX_LAYERS);
    m->ops = ops;
    m->cfg = *cfg;
    m->opt = *opt;
    m->spec = lj_layer_spec_of(cfg);
    lj_param_layout_init(&m->layout, cfg);
    m->residual = lj_calloc((size_t)cfg->num_hidden_layers + 1, sizeof(void *));
    m->layers = lj_calloc((size_t)cfg->num_hidden_layers, sizeof(lj_layer_acts));
    const size_t N = (size_t)(opt->kv_cache_tokens > 0 ? 1 : opt->micro_batch_size) * opt->seq_length;
    LJ_ASSERT(!lj_doc_mask_any(&opt->doc_mask) || opt->kv_cache_tokens == 0,
              "document masking is for training, not generation");
    m->host_ids = lj_malloc((lj_doc_mask_any(&opt->doc_mask) ? 4 : 2) * N * sizeof(int32_t));
    m->host_losses = lj_malloc(N * sizeof(float));
    /* replicated: this rank's shard is everything (lj_parallelize may shard it) */
    m->shard_numel = m->padded_numel = m->grad_numel = m->layout.total;
    m->shard_begin = 0;
    lj_linear_init(&m->linear, ops, cfg, opt->linear_recipe, &opt->fp8, opt->training && opt->kv_cache_tokens == 0,
                   opt->fused);
}

void lj_model_free(lj_model *m) {
    if (m->fwd_bwd_graph.exec) m->ops->graph_destroy(m->fwd_bwd_graph.exec);
    if (m->step_graph.exec) m->ops->graph_destroy(m->step_graph.exec);
    if (m->residency) m->residency->destroy(m);
    lj_param_layout_free(&m->layout);
    free(m->residual);
    free(m->layers);
    free(m->host_ids);
    free(m->host_losses);
    if (m->offload) m->offload->destroy(m);
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

/* ---- parameters and the residency's fixed points ---------------------------------- */

void *lj_model_param(const lj_model *m, int index) {
    if (m->residency) return m->residency->param(m, index);
    return (char *)m->params + (size_t)m->layout.params[index].offset * lj_dtype_size(m->ops->param_dtype);
}

void *lj_model_grad(const lj_model *m, int index) {
    if (m->residency) return m->residency->grad(m, index);
    return (char *)m->grads + (size_t)m->layout.params[index].offset * lj_dtype_size(m->ops->grad_dtype);
}

/* Replicated (no residency): every hook is a no-op and weight gradients accumulate. */
static void fetch(lj_model *m, int unit, int direction) {
    if (m->residency) m->residency->fetch(m, unit, direction);
}
static void release(lj_model *m, int unit) {
    if (m->residency) m->residency->release(m, unit);
}
static lj_grad_mode grad_begin(lj_model *m, int unit) {
    return m->residency ? m->residency->grad_begin(m, unit) : LJ_GRAD_ACCUMULATE;
}
static void grad_end(lj_model *m, int unit) {
    if (m->residency) m->residency->grad_end(m, unit);
}
static void pass_end(lj_model *m) {
    if (m->residency) m->residency->pass_end(m);
}

static void *param(const lj_model *m, int index) { return lj_model_param(m, index); }
static void *grad(const lj_model *m, int index) { return lj_model_grad(m, index); }

/* Linear k of layer `layer` with its weight where the residency has it, and its gradient for a
 * backward (the linear module runs it by the model's recipe). */
static lj_linear linear(const lj_model *m, lj_linear_kind k, int layer, int backward) {
    const int p = lj_linear_param(&m->layout, k, layer);
    return lj_linear_of(&m->linear, k, layer, param(m, p), backward ? grad(m, p) : NULL);
}
/* `cast`: the norm that produced x cast it already (norm() returned 1). */
static void linear_forward(lj_model *m, lj_linear_kind k, int layer, void *out, const void *x, int N, int cast) {
    lj_linear l = linear(m, k, layer, 0);
    l.input_cast = cast;
    lj_linear_forward(&m->linear, &l, out, x, N);
}
static void linear_backward(lj_model *m, lj_linear_kind k, int layer, void *dx, const void *dout, const void *x, int N,
                            lj_grad_mode dw_mode) {
    const lj_linear l = linear(m, k, layer, 1);
    lj_linear_backward(&m->linear, &l, dx, dout, x, N, dw_mode);
}

/* out = rmsnorm(x) with the norm weight w: x = res_in, or with y the residual form res_out = res_in
 * + y, x = res_out (the fused op or its unfused twin), by the linears' recipe, which may cast out
 * into the FP8 input of the linear that reads it, kind k of layer `layer` (QKV or gate/up;
 * LJ_LINEAR_KINDS: no block linear reads it): returns 1 then, the `cast` of that linear's
 * forward (linear.h norm_forward). */
static int norm(lj_model *m, lj_linear_kind k, int layer, void *res_out, void *out, float *rstd, const void *res_in,
                const void *y, const void *w, int N) {
    if (k == LJ_LINEAR_KINDS)
        return lj_linear_norm_forward(&m->linear, NULL, res_out, out, rstd, res_in, y, w, N, m->spec.eps);
    const lj_linear next = linear(m, k, layer, 0);
    return lj_linear_norm_forward(&m->linear, &next, res_out, out, rstd, res_in, y, w, N, m->spec.eps);
}

/* Layer l's first norm, of x (QKV reads it), and its second, of res_out = res_in + y (gate/up). */
static int norm1(lj_model *m, int l, const void *x, int N) {
    lj_layer_acts *a = &m->layers[l];
    const void *w = param(m, lj_param_index(&m->layout, l, LJ_P_LN1));
    return norm(m, LJ_LINEAR_QKV, l, NULL, a->ln1, a->ln1_rstd, x, NULL, w, N);
}
static int norm2(lj_model *m, int l, const void *res_in, const void *y, int N) {
    lj_layer_acts *a = &m->layers[l];
    return norm(m, LJ_LINEAR_GATE_UP, l, a->res_mid, a->ln2, a->ln2_rstd, res_in, y,
                param(m, lj_param_index(&m->layout, l, LJ_P_LN2)), N);
}

static void swiglu(const lj_model *m, void *out, const void *gate_up, int N) {
    if (m->opt.fused) m->ops->swiglu_forward(out, gate_up, N, m->spec.I);
    else m->ops->swiglu_forward_unfused(out, m->swiglu_tmp, gate_up, N, m->spec.I);
}

/* RoPE on qkv in place (backward: its transpose): by position t of each sequence, or by the
 * batch's per-token positions (m->position_ids, --reset-position-ids). */
static void rope(const lj_model *m, void *qkv, const float *cos, const float *sin, int B, int T, int backward) {
    const lj_layer_spec *s = &m->spec;
    if (m->position_ids && backward)
        m->ops->rope_backward_pos(qkv, cos, sin, m->position_ids, B, T, s->nh, s->nkv, s->hd);
    else if (m->position_ids)
        m->ops->rope_forward_pos(qkv, cos, sin, m->position_ids, B, T, s->nh, s->nkv, s->hd);
    else if (backward)
        m->ops->rope_backward(qkv, cos, sin, B, T, s->nh, s->nkv, s->hd);
    else
        m->ops->rope_forward(qkv, cos, sin, B, T, s->nh, s->nkv, s->hd);
}

/* Qwen3's QK-norm and RoPE: a->qkv = rope(qk_norm(a->qkv_pre)), fused or as its unfused twin
 * (always the twin with per-token positions: the fused op reads position t); cos, sin start at
 * the rows' first position. */
static void qk_norm_rope(lj_model *m, int l, int B, int T, const float *cos, const float *sin) {
    const lj_layer_spec *s = &m->spec;
    lj_layer_acts *a = &m->layers[l];
    const void *w = param(m, lj_param_index(&m->layout, l, LJ_P_Q_NORM));
    if (m->opt.fused && !m->position_ids) {
        m->ops->qk_norm_rope_forward(a->qkv, a->qk_rstd, a->qkv_pre, w, cos, sin, B, T, s->nh, s->nkv, s->hd, s->eps);
    } else {
        m->ops->qk_norm_forward(a->qkv, a->qk_rstd, a->qkv_pre, w, B * T, s->nh, s->nkv, s->hd, s->eps);
        rope(m, a->qkv, cos, sin, B, T, 0);
    }
}

/* q, k, v of layer l: a->qkv = rope(qk_norm(ln1 W_qkv^T + b)), the bias and the norm where the
 * spec has them (the linear writes a->qkv_pre when QK-norm follows, else a->qkv); `cast`: ln1's
 * norm cast it (norm1). */
static void qkv_forward(lj_model *m, int l, int B, int T, const float *cos, const float *sin, int cast) {
    const lj_layer_spec *s = &m->spec;
    lj_layer_acts *a = &m->layers[l];
    const int N = B * T;
    void *y = s->qk_norm ? a->qkv_pre : a->qkv;
    linear_forward(m, LJ_LINEAR_QKV, l, y, a->ln1, N, cast);
    if (s->qkv_bias) m->ops->bias_add(y, param(m, lj_param_index(&m->layout, l, LJ_P_Q_BIAS)), N, s->QKV);
    if (s->qk_norm) qk_norm_rope(m, l, B, T, cos, sin);
    else rope(m, a->qkv, cos, sin, B, T, 0);
}

/* The attention half of layer l, from its input norm a->ln1 (`cast` as qkv_forward) to the residual
 * a->res_mid and the MLP's input norm a->ln2 (returns norm2's cast). B sequences of T positions. */
static int attention_block_forward(lj_model *m, int l, const void *res_in, int B, int T, int cast) {
    const lj_layer_spec *s = &m->spec;
    lj_layer_acts *a = &m->layers[l];
    const int N = B * T;
    qkv_forward(m, l, B, T, m->rope_cos, m->rope_sin, cast);
    if (m->doc_start)
        m->ops->attention_forward_docs(a->attn, a->lse, a->qkv, m->doc_start, B, T, s->nh, s->nkv, s->hd,
                                       m->ws_attention);
    else
        m->ops->attention_forward(a->attn, a->lse, a->qkv, B, T, s->nh, s->nkv, s->hd, m->ws_attention);
    linear_forward(m, LJ_LINEAR_O, l, m->proj, a->attn, N, 0);
    return norm2(m, l, res_in, m->proj, N);
}

/* The MLP half of layer l, up to m->proj = down_proj(swiglu(gate_up(ln2))); `cast`: ln2's norm
 * cast it (norm2). */
static void mlp_block_forward(lj_model *m, int l, int N, int cast) {
    lj_layer_acts *a = &m->layers[l];
    linear_forward(m, LJ_LINEAR_GATE_UP, l, a->gate_up, a->ln2, N, cast);
    const lj_linear down = linear(m, LJ_LINEAR_DOWN, l, 0);
    lj_linear_forward_swiglu(&m->linear, &down, m->proj, a->mlp_act, a->gate_up, m->swiglu_tmp, N);
}

/* The backward of layer l (its recomputed or kept activations in place): m->d_res holds the
 * gradient of the layer's output and receives the gradient of its input. */
static void layer_backward(lj_model *m, int l, int B, int T, lj_grad_mode dw_mode) {
    const lj_ops *ops = m->ops;
    const lj_layer_spec *s = &m->spec;
    lj_layer_acts *a = &m->layers[l];
    const int N = B * T;
    /* MLP: residual[l+1] = res_mid + down(swiglu(gate_up(ln2))) */
    linear_backward(m, LJ_LINEAR_DOWN, l, m->d_mlp, m->d_res, a->mlp_act, N, dw_mode);
    if (m->opt.fused) ops->swiglu_backward(m->d_gate_up, m->d_mlp, a->gate_up, N, s->I);
    else ops->swiglu_backward_unfused(m->d_gate_up, m->swiglu_tmp, m->d_mlp, a->gate_up, N, s->I);
    linear_backward(m, LJ_LINEAR_GATE_UP, l, m->d_ln, m->d_gate_up, a->ln2, N, dw_mode);
    const int ln2 = lj_param_index(&m->layout, l, LJ_P_LN2), ln1 = lj_param_index(&m->layout, l, LJ_P_LN1);
    ops->rmsnorm_backward(m->d_res, grad(m, ln2), m->d_ln, a->res_mid, param(m, ln2), a->ln2_rstd, N, s->C, dw_mode,
                          m->ws_rmsnorm);
    /* attention: res_mid = residual[l] + o_proj(attention(rope(qkv(ln1)))) */
    linear_backward(m, LJ_LINEAR_O, l, m->d_attn, m->d_res, a->attn, N, dw_mode);
    if (m->doc_start)
        ops->attention_backward_docs(m->d_qkv, m->d_attn, a->qkv, a->attn, a->lse, m->doc_start, B, T, s->nh, s->nkv,
                                     s->hd, m->ws_attention);
    else
        ops->attention_backward(m->d_qkv, m->d_attn, a->qkv, a->attn, a->lse, B, T, s->nh, s->nkv, s->hd,
                                m->ws_attention);
    if (s->qk_norm) { /* in place on d_qkv: the gradient of the QKV linear's output (+ bias) */
        const int wi = lj_param_index(&m->layout, l, LJ_P_Q_NORM);
        if (m->opt.fused && !m->position_ids)
            ops->qk_norm_rope_backward(m->d_qkv, grad(m, wi), m->d_qkv, a->qkv_pre, param(m, wi), a->qk_rstd, m->rope_cos,
                                       m->rope_sin, B, T, s->nh, s->nkv, s->hd, dw_mode, m->ws_qk_norm);
        else {
            rope(m, m->d_qkv, m->rope_cos, m->rope_sin, B, T, 1);
            ops->qk_norm_backward(m->d_qkv, grad(m, wi), m->d_qkv, a->qkv_pre, param(m, wi), a->qk_rstd, N, s->nh,
                                  s->nkv, s->hd, dw_mode, m->ws_qk_norm);
        }
    } else {
        rope(m, m->d_qkv, m->rope_cos, m->rope_sin, B, T, 1);
    }
    if (s->qkv_bias)
        ops->bias_backward(grad(m, lj_param_index(&m->layout, l, LJ_P_Q_BIAS)), m->d_qkv, N, s->QKV, dw_mode, m->ws_bias);
    linear_backward(m, LJ_LINEAR_QKV, l, m->d_ln, m->d_qkv, a->ln1, N, dw_mode);
    ops->rmsnorm_backward(m->d_res, grad(m, ln1), m->d_ln, m->residual[l], param(m, ln1), a->ln1_rstd, N, s->C, dw_mode,
                          m->ws_rmsnorm);
}

/* ---- profiling ranges (model.h) ---------------------------------------------------- */

void lj_model_range_push(const lj_model *m, const char *fmt, ...) {
    if (!m->ranges || !m->ops->range_push) return;
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    m->ops->range_push(name);
}

void lj_model_range_pop(const lj_model *m) {
    if (m->ranges && m->ops->range_pop) m->ops->range_pop();
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
    if (lj_doc_mask_any(&m->opt.doc_mask)) {
        int32_t *pos = tg + N, *ds = pos + N;
        for (int b = 0; b < B; b++) {
            const size_t o = (size_t)b * T;
            lj_doc_mask_sequence(&m->opt.doc_mask, in + o, T, pos + o, ds + o, tg + o);
        }
        if (m->position_ids) m->ops->upload(m->position_ids, pos, N * sizeof(int32_t));
        if (m->doc_start) m->ops->upload(m->doc_start, ds, N * sizeof(int32_t));
    }
    m->num_targets = 0;
    for (size_t i = 0; i < N; i++) m->num_targets += tg[i] >= 0;
    m->ops->upload(m->inputs, in, N * sizeof(int32_t));
    m->ops->upload(m->targets, tg, N * sizeof(int32_t));
}

void lj_model_forward(lj_model *m, int backward, float dloss) {
    const lj_ops *ops = m->ops;
    const lj_layer_spec *s = &m->spec;
    const int B = m->opt.micro_batch_size, T = m->opt.seq_length, N = B * T, L = s->L;
    LJ_ASSERT(!backward || m->opt.training, "backward needs a training plan");
    lj_linear_sync_weights(&m->linear); /* kept FP8 weights after a load (model/linear.h) */
    lj_model_range_push(m, "forward");
    lj_linear_pass_begin(&m->linear, backward);
    lj_model_range_push(m, "embedding");
    fetch(m, LJ_UNIT_EMBED, +1);
    ops->embedding_forward(m->residual[0], m->inputs, param(m, m->layout.embed), N, s->C);
    if (m->hooks) m->hooks->embed_forward(m, m->hooks->ctx, m->residual[0]);
    fetch(m, 0, +1);
    release(m, LJ_UNIT_EMBED);
    int cast = norm1(m, 0, m->residual[0], N); /* the next QKV's input, cast by its norm */
    lj_model_range_pop(m);
    for (int l = 0; l < L; l++) {
        lj_model_range_push(m, "decoder.layers.%d.forward", l);
        fetch(m, l, +1);
        lj_model_range_push(m, "decoder.layers.%d.self_attention", l);
        const int cast2 = attention_block_forward(m, l, m->residual[l], B, T, cast);
        lj_model_range_pop(m);
        lj_model_range_push(m, "decoder.layers.%d.mlp", l);
        mlp_block_forward(m, l, N, cast2);
        lj_model_range_pop(m);
        /* the layer's output residual, and the next layer's input norm (the final norm after the last) */
        const int last = l == L - 1;
        fetch(m, l + 1, +1);
        const lj_linear_kind next = last ? LJ_LINEAR_KINDS : LJ_LINEAR_QKV;
        void *ln = last ? m->final_ln : m->layers[l + 1].ln1;
        float *rstd = last ? m->final_rstd : m->layers[l + 1].ln1_rstd;
        const void *w = param(m, last ? m->layout.final_norm : lj_param_index(&m->layout, l + 1, LJ_P_LN1));
        cast = norm(m, next, l + 1, m->residual[l + 1], ln, rstd, m->layers[l].res_mid, m->proj, w, N);
        if (m->hooks && m->hooks->layer_forward(m, m->hooks->ctx, l, m->residual[l + 1]))
            cast = norm(m, next, l + 1, NULL, ln, rstd, m->residual[l + 1], NULL, w, N);
        release(m, l);
        lj_model_range_pop(m);
    }
    release(m, L);
    lj_model_range_push(m, "output_layer");
    fetch(m, L + 1, +1);
    /* lm_head's gradient; tied, it is the embedding's, which collects until the embedding backward */
    if (backward) (void)grad_begin(m, L + 1); /* the loss accumulates into it whatever the mode */
    const void *w_out = param(m, m->layout.lm_head);
    if (m->opt.fused) {
        ops->cross_entropy_fused(m->losses, backward ? m->d_ln : NULL, backward ? grad(m, m->layout.lm_head) : NULL,
                                 m->final_ln, w_out, m->targets, N, s->C, s->V, dloss, m->ws_cross_entropy);
    } else {
        linear_forward(m, LJ_LINEAR_LM_HEAD, 0, m->logits, m->final_ln, N, 0);
        ops->cross_entropy_forward_backward(m->losses, backward ? m->logits : NULL, m->logits, m->targets, N, s->V,
                                            dloss);
        if (backward) linear_backward(m, LJ_LINEAR_LM_HEAD, 0, m->d_ln, m->logits, m->final_ln, N, LJ_GRAD_ACCUMULATE);
    }
    if (backward && !s->tied) grad_end(m, L + 1);
    lj_model_range_pop(m);
    pass_end(m);
    lj_model_range_pop(m);
}

/* Recomputes what layer l's policy did not keep, from its input (and kept tensors). */
static void recompute_layer(lj_model *m, int l, int B, int T) {
    const int policy = m->opt.recompute[l];
    if (policy == LJ_RECOMPUTE_NONE) return;
    lj_layer_acts *a = &m->layers[l];
    const int N = B * T;
    if (policy == LJ_RECOMPUTE_FULL) { /* the norms' FP8 casts feed the linears recomputed here */
        const int cast = norm1(m, l, m->residual[l], N);
        const int cast2 = attention_block_forward(m, l, m->residual[l], B, T, cast);
        linear_forward(m, LJ_LINEAR_GATE_UP, l, a->gate_up, a->ln2, N, cast2);
    } else {
        const int C = m->spec.C;
        const float eps = m->spec.eps;
        m->ops->rmsnorm_forward(a->ln1, a->ln1_rstd, m->residual[l], param(m, lj_param_index(&m->layout, l, LJ_P_LN1)),
                                N, C, eps);
        if (m->spec.qk_norm) qk_norm_rope(m, l, B, T, m->rope_cos, m->rope_sin); /* from the kept qkv_pre */
        m->ops->rmsnorm_forward(a->ln2, a->ln2_rstd, a->res_mid, param(m, lj_param_index(&m->layout, l, LJ_P_LN2)), N,
                                C, eps);
    }
    swiglu(m, a->mlp_act, a->gate_up, N);
}

void lj_model_backward(lj_model *m) {
    const lj_ops *ops = m->ops;
    const lj_layer_spec *s = &m->spec;
    const int B = m->opt.micro_batch_size, T = m->opt.seq_length, N = B * T, L = s->L;
    lj_model_range_push(m, "backward");
    ops->memset_zero(m->d_res, (size_t)N * s->C * lj_dtype_size(ops->act_dtype));
    /* the final norm (its input gradient m->d_ln came from the loss in lj_model_forward) */
    lj_model_range_push(m, "decoder.final_layernorm.backward");
    fetch(m, L, -1);
    const lj_grad_mode norm_mode = grad_begin(m, L);
    ops->rmsnorm_backward(m->d_res, grad(m, m->layout.final_norm), m->d_ln, m->residual[L],
                          param(m, m->layout.final_norm), m->final_rstd, N, s->C, norm_mode, m->ws_rmsnorm);
    grad_end(m, L);
    release(m, L);
    lj_model_range_pop(m);
    for (int l = L - 1; l >= 0; l--) {
        lj_model_range_push(m, "decoder.layers.%d.backward", l);
        fetch(m, l, -1);
        const lj_grad_mode mode = grad_begin(m, l);
        if (m->hooks) m->hooks->layer_backward(m, m->hooks->ctx, l, m->d_res);
        if (m->opt.recompute[l] != LJ_RECOMPUTE_NONE) {
            lj_model_range_push(m, "decoder.layers.%d.recompute", l);
            recompute_layer(m, l, B, T);
            lj_model_range_pop(m);
        }
        layer_backward(m, l, B, T, mode);
        grad_end(m, l);
        release(m, l);
        lj_model_range_pop(m);
    }
    lj_model_range_push(m, "embedding.backward");
    (void)grad_begin(m, LJ_UNIT_EMBED); /* tied: held since the loss; the scatter-add always accumulates */
    if (m->hooks) m->hooks->embed_backward(m, m->hooks->ctx, m->d_res);
    ops->embedding_backward(grad(m, m->layout.embed), m->d_res, m->inputs, N, s->C, m->ws_embedding);
    grad_end(m, LJ_UNIT_EMBED);
    lj_model_range_pop(m);
    lj_linear_pass_end(&m->linear);
    pass_end(m);
    lj_model_range_pop(m);
}

void lj_model_zero_grads(lj_model *m) {
    if (m->residency) m->residency->grads_zeroed(m);
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
    lj_model_backward(m);
    if (b->tail) b->tail(m, b->ctx);
}

/* Runs `b` through graph `g`: eagerly without graphs; else captured once (again when dloss or
 * key changed) and replayed. A failed capture turns graphs off for this model and runs eagerly. */
static void run_graphed(lj_model *m, lj_model_graph *g, float dloss, uint64_t key, const graph_body *b) {
    const lj_ops *ops = m->ops;
    lj_linear_sync_weights(&m->linear); /* before any capture: a load's cast is not the step's */
    if (!m->opt.graphs || !ops->graph_capture_begin || m->ranges) { /* ranges: eagerly, so that they are seen */
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
    LJ_ASSERT(m->opt.training && !m->residency, "lj_model_train_step needs a replicated training model (no ZeRO-2/3)");
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
    const lj_layer_spec *s = &m->spec;
    LJ_ASSERT(m->opt.kv_cache_tokens > 0 && n >= 1 && n <= m->opt.seq_length && p0 + n <= m->opt.kv_cache_tokens);
    const size_t sa = lj_dtype_size(ops->act_dtype);
    const int half = s->hd / 2;
    void *x = m->residual[0];
    ops->upload(m->inputs, ids, (size_t)n * sizeof(int32_t));
    ops->embedding_forward(x, m->inputs, param(m, m->layout.embed), n, s->C);
    for (int l = 0; l < s->L; l++) {
        lj_layer_acts *a = &m->layers[l];
        const int cast = norm1(m, l, x, n);
        qkv_forward(m, l, 1, n, m->rope_cos + (size_t)p0 * half, m->rope_sin + (size_t)p0 * half, cast);
        ops->attention_decode(a->attn, a->kv_cache, a->qkv, p0, n, s->nh, s->nkv, s->hd);
        linear_forward(m, LJ_LINEAR_O, l, m->proj, a->attn, n, 0);
        mlp_block_forward(m, l, n, norm2(m, l, x, m->proj, n));
        ops->add(x, a->res_mid, m->proj, (int64_t)n * s->C);
    }
    ops->rmsnorm_forward(m->final_ln, m->final_rstd, (char *)x + (size_t)(n - 1) * s->C * sa,
                         param(m, m->layout.final_norm), 1, s->C, s->eps);
    linear_forward(m, LJ_LINEAR_LM_HEAD, 0, m->logits, m->final_ln, 1, 0);
    download_f32(m, logits, m->logits, s->V);
}

/* linear.c: the transformer's linear layers (linear.h) over the op table's matmuls, and the FP8
 * recipe over its FP8 ops (ops.h "FP8"). */
#include "model/linear.h"

#include "model/model.h"

#include <string.h>

const char *lj_linear_recipe_name(lj_linear_recipe r) {
    switch (r) {
    case LJ_LINEAR_RECIPE_DEFAULT: return "default";
    case LJ_LINEAR_RECIPE_FP8: return "fp8";
    }
    return "?";
}

const char *lj_fp8_recipe_name(lj_fp8_recipe r) {
    switch (r) {
    case LJ_FP8_RECIPE_DELAYED: return "delayed";
    case LJ_FP8_RECIPE_TENSORWISE: return "tensorwise";
    case LJ_FP8_RECIPE_BLOCKWISE: return "blockwise";
    }
    return "?";
}

lj_linear_fp8_options lj_linear_fp8_defaults(void) {
    lj_linear_fp8_options o;
    memset(&o, 0, sizeof o);
    o.hybrid = 1;
    o.recipe = LJ_FP8_RECIPE_DELAYED;
    o.amax_history_len = 1;
    o.amax_compute_max = 0;
    return o;
}

void lj_linear_fp8_describe(const lj_linear_fp8_options *o, char *buf, size_t len) {
    int n = snprintf(buf, len, "fp8 %s (%s forward, %s gradients), %s scaling", o->hybrid ? "hybrid" : "e4m3",
                     "e4m3", o->hybrid ? "e5m2" : "e4m3", lj_fp8_recipe_name(o->recipe));
    if (o->recipe == LJ_FP8_RECIPE_DELAYED && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " (amax history %d, %s, margin %d)", o->amax_history_len,
                      o->amax_compute_max ? "max" : "most_recent", o->margin);
    if (o->recipe == LJ_FP8_RECIPE_BLOCKWISE && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " (1x128 tiles of inputs and gradients, 128x128 blocks of weights)");
    if ((o->bf16_layers_start || o->bf16_layers_end) && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "; first %d and last %d layers in bf16", o->bf16_layers_start,
                 o->bf16_layers_end);
}

lj_fp8_format lj_linear_fp8_fwd_format(const lj_linear_fp8_options *o) {
    (void)o;
    return LJ_FP8_E4M3;
}

lj_fp8_format lj_linear_fp8_bwd_format(const lj_linear_fp8_options *o) { return o->hybrid ? LJ_FP8_E5M2 : LJ_FP8_E4M3; }

int lj_linear_param(const lj_model *m, lj_linear_kind k, int layer, int *in_features, int *out_features) {
    const lj_layer_spec *s = &m->spec;
    switch (k) {
    case LJ_LINEAR_QKV: *in_features = s->C, *out_features = s->QKV; return lj_param_index(&m->layout, layer, LJ_P_Q);
    case LJ_LINEAR_O: *in_features = s->Q, *out_features = s->C; return lj_param_index(&m->layout, layer, LJ_P_O);
    case LJ_LINEAR_GATE_UP: *in_features = s->C, *out_features = 2 * s->I; return lj_param_index(&m->layout, layer, LJ_P_GATE);
    case LJ_LINEAR_DOWN: *in_features = s->I, *out_features = s->C; return lj_param_index(&m->layout, layer, LJ_P_DOWN);
    case LJ_LINEAR_LM_HEAD: *in_features = s->C, *out_features = s->V; return m->layout.lm_head;
    }
    LJ_ASSERT(0, "linear kind %d", (int)k);
    return -1;
}

/* ---- the FP8 recipe's state ------------------------------------------------------ */

void lj_linear_init(lj_model *m) {
    lj_linear_fp8_state *f = &m->linear_fp8;
    memset(f, 0, sizeof *f);
    memset(f->slot, 0xff, sizeof f->slot); /* -1: not FP8 */
    const lj_model_options *o = &m->opt;
    if (o->linear_recipe != LJ_LINEAR_RECIPE_FP8 || !o->training || o->kv_cache_tokens > 0) return;
    const int L = m->spec.L;
    for (int l = o->fp8.bf16_layers_start; l < L - o->fp8.bf16_layers_end; l++) {
        for (int k = 0; k < 4; k++) {
            int in, out;
            (void)lj_linear_param(m, (lj_linear_kind)k, l, &in, &out);
            f->slot[l][k] = (int16_t)f->num_linears++;
            if (in > f->max_in) f->max_in = in;
            if (out > f->max_out) f->max_out = out;
            const int64_t wn = (int64_t)out * lj_fp8_ld(in), wtn = (int64_t)in * lj_fp8_ld(out);
            if (wn > f->max_w) f->max_w = wn;
            if (wtn > f->max_w) f->max_w = wtn;
            const int64_t g = lj_fp8_block_scales_numel(out, in), gt = lj_fp8_block_scales_numel(in, out);
            if (g > f->max_wscale) f->max_wscale = g;
            if (gt > f->max_wscale) f->max_wscale = gt;
        }
    }
    f->active = f->num_linears > 0;
    f->history_len = o->fp8.recipe == LJ_FP8_RECIPE_DELAYED && o->fp8.amax_history_len > 1 ? o->fp8.amax_history_len : 1;
}

void lj_linear_reset(lj_model *m) {
    lj_linear_fp8_state *f = &m->linear_fp8;
    if (!f->active) return;
    int64_t nh, ns;
    (void)lj_linear_fp8_state_numel(f, &nh, &ns);
    const int64_t ni = ns * LJ_FP8_SCALE_INV_STRIDE;
    float *ones = lj_malloc((size_t)ni * sizeof(float));
    for (int64_t i = 0; i < ni; i++) ones[i] = 1.0f;
    m->ops->memset_zero(f->amax_history, (size_t)nh * sizeof(float));
    m->ops->upload(f->scale, ones, (size_t)ns * sizeof(float));
    m->ops->upload(f->scale_inv, ones, (size_t)ni * sizeof(float));
    free(ones);
}

void lj_linear_pass_end(lj_model *m) {
    lj_linear_fp8_state *f = &m->linear_fp8;
    if (!f->active || !f->recording || !m->fp8_amax_reduce || m->opt.fp8.recipe != LJ_FP8_RECIPE_DELAYED) return;
    m->fp8_amax_reduce(m, f->amax_history, 3 * f->num_linears); /* row 0: this pass's amaxes */
}

void lj_linear_pass_begin(lj_model *m, int training) {
    lj_linear_fp8_state *f = &m->linear_fp8;
    if (!f->active) return;
    f->recording = training;
    if (!training) return;
    const lj_linear_fp8_options *o = &m->opt.fp8;
    if (o->recipe != LJ_FP8_RECIPE_DELAYED) return;
    const float margin = ldexpf(1.0f, -o->margin);
    const int F = f->num_linears;
    m->ops->fp8_scale_update(f->amax_history, f->scale, f->scale_inv, 3 * F, f->history_len, 2 * F,
                             lj_fp8_max(lj_linear_fp8_fwd_format(o)) * margin,
                             lj_fp8_max(lj_linear_fp8_bwd_format(o)) * margin, o->amax_compute_max);
}

void lj_linear_fp8_state_get(lj_model *m, float *dst) {
    const lj_linear_fp8_state *f = &m->linear_fp8;
    int64_t nh, ns;
    (void)lj_linear_fp8_state_numel(f, &nh, &ns);
    m->ops->download(dst, f->amax_history, (size_t)nh * sizeof(float));
    m->ops->download(dst + nh, f->scale, (size_t)ns * sizeof(float));
}

void lj_linear_fp8_state_set(lj_model *m, const float *src) {
    const lj_linear_fp8_state *f = &m->linear_fp8;
    int64_t nh, ns;
    (void)lj_linear_fp8_state_numel(f, &nh, &ns);
    m->ops->upload(f->amax_history, src, (size_t)nh * sizeof(float));
    m->ops->upload(f->scale, src + nh, (size_t)ns * sizeof(float));
    const int64_t ni = ns * LJ_FP8_SCALE_INV_STRIDE;
    float *inv = lj_calloc((size_t)ni, sizeof(float));
    for (int64_t t = 0; t < ns; t++) inv[LJ_FP8_SCALE_INV_STRIDE * t] = 1.0f / src[nh + t];
    m->ops->upload(f->scale_inv, inv, (size_t)ni * sizeof(float));
    free(inv);
}

int lj_linear_fp8_overflow(lj_model *m, char *what, size_t len) {
    const lj_linear_fp8_state *f = &m->linear_fp8;
    if (!f->active) return 0;
    const int F = f->num_linears;
    float *amax = lj_malloc((size_t)3 * F * sizeof(float));
    m->ops->download(amax, f->amax_history, (size_t)3 * F * sizeof(float));
    static const char *kinds[4] = {"qkv", "o", "gate_up", "down"};
    int bad = 0;
    for (int l = 0; l < m->spec.L && !bad; l++) {
        for (int k = 0; k < 4 && !bad; k++) {
            const int s = f->slot[l][k];
            if (s < 0) continue;
            const int t[3] = {2 * s, 2 * s + 1, 2 * F + s};
            static const char *roles[3] = {"input x", "weight", "gradient dy"};
            for (int r = 0; r < 3 && !bad; r++) {
                if (isfinite(amax[t[r]])) continue;
                snprintf(what, len, "layers.%d.%s %s (amax %g)", l, kinds[k], roles[r], (double)amax[t[r]]);
                bad = 1;
            }
        }
    }
    free(amax);
    return bad;
}

/* ---- the FP8 linear ---------------------------------------------------------------- */

/* Tensor t's dequantization factor (16-byte aligned for cuBLASLt). */
static float *scale_inv_of(const lj_linear_fp8_state *f, int t) { return f->scale_inv + LJ_FP8_SCALE_INV_STRIDE * t; }

/* Where a cast of tensor t finds its scale. `fresh`: this cast defines the tensor's amax this
 * pass (current scaling computes it first, into the history's slot: no state carries over;
 * delayed scaling records it into the history's newest row, in a training pass only); else the
 * scale is only read (the backward's second cast of x). */
static lj_fp8_scaling scaling_of(const lj_model *m, int t, int fresh) {
    const lj_linear_fp8_state *f = &m->linear_fp8;
    const int current = fresh && m->opt.fp8.recipe == LJ_FP8_RECIPE_TENSORWISE;
    const lj_fp8_scaling sc = {f->scale + t, scale_inv_of(f, t),
                               current || (fresh && f->recording) ? f->amax_history + t : NULL, current};
    return sc;
}

/* Casts x[rows, cols] as tensor t of the scale state into q and/or q_t (scaling_of). */
static void quantize(lj_model *m, int t, void *q, void *q_t, const void *x, int rows, int cols, lj_fp8_format fmt,
                     int fresh) {
    const lj_fp8_scaling sc = scaling_of(m, t, fresh);
    if (sc.current) m->ops->fp8_amax(sc.amax, x, (int64_t)rows * cols);
    m->ops->fp8_quantize(q, q_t, x, rows, cols, fmt, &sc);
}

/* The forward's cast of the input of FP8 linear s into xq and its kept transpose: from x, or,
 * with gate_up, fused into the SwiGLU that produces x = h (ops fp8_swiglu_quantize under delayed
 * scaling, writing h only where the backward reads it; fp8_swiglu_amax then the cast under
 * current scaling). The same bits either way. */
static void cast_input(lj_model *m, int s, void *x, const void *gate_up, int N, int in, lj_fp8_format fmt) {
    lj_linear_fp8_state *f = &m->linear_fp8;
    if (!gate_up) {
        quantize(m, 2 * s, f->xq, f->saved_t[s], x, N, in, fmt, 1);
        return;
    }
    const lj_fp8_scaling sc = scaling_of(m, 2 * s, 1);
    if (sc.current) {
        m->ops->fp8_swiglu_amax(sc.amax, x, gate_up, N, in);
        m->ops->fp8_quantize(f->xq, f->saved_t[s], x, N, in, fmt, &sc);
    } else {
        m->ops->fp8_swiglu_quantize(x, f->saved_t[s] == NULL, f->xq, f->saved_t[s], gate_up, N, in, fmt, &sc);
    }
}

/* The blockwise recipe (linear.h): every cast computes its tiles' scales itself; a tensor's
 * first cast of the pass also writes its amax into the history's row 0 (tensor t's entry), which
 * only the overflow report reads. */

static void blockwise_forward(lj_model *m, int s, const void *w, void *out, const void *x, int N, int in, int outf) {
    lj_linear_fp8_state *f = &m->linear_fp8;
    const lj_ops *ops = m->ops;
    const lj_fp8_format fwd = lj_linear_fp8_fwd_format(&m->opt.fp8);
    ops->fp8_quantize_blocks(f->wq, f->wq_sinv, NULL, NULL, w, outf, in, fwd, f->amax_history + 2 * s + 1);
    ops->fp8_quantize_tiles(f->xq, f->xq_sinv, f->saved_t[s], f->saved_t_sinv[s], x, N, in, fwd,
                            f->amax_history + 2 * s);
    ops->fp8_matmul_blockwise(out, ops->act_dtype, f->xq, fwd, f->xq_sinv, 0, f->wq, fwd, f->wq_sinv, 1, N, outf, in,
                              LJ_GRAD_OVERWRITE, f->workspace);
}

static void blockwise_backward(lj_model *m, int s, const void *w, void *dx, void *dw, const void *dout, const void *x,
                               int N, int in, int outf, lj_grad_mode dw_mode) {
    lj_linear_fp8_state *f = &m->linear_fp8;
    const lj_ops *ops = m->ops;
    const lj_fp8_format fwd = lj_linear_fp8_fwd_format(&m->opt.fp8), bwd = lj_linear_fp8_bwd_format(&m->opt.fp8);
    const int F = f->num_linears;
    ops->fp8_quantize_tiles(dx ? f->dyq : NULL, f->dyq_sinv, f->dyq_t, f->dyq_t_sinv, dout, N, outf, bwd,
                            f->amax_history + 2 * F + s);
    if (dx) {
        ops->fp8_quantize_blocks(NULL, NULL, f->wq_t, f->wq_t_sinv, w, outf, in, fwd, NULL);
        ops->fp8_matmul_blockwise(dx, ops->act_dtype, f->dyq, bwd, f->dyq_sinv, 0, f->wq_t, fwd, f->wq_t_sinv, 1, N,
                                  in, outf, LJ_GRAD_OVERWRITE, f->workspace);
    }
    const void *xq_t = f->saved_t[s];
    const float *xq_t_sinv = f->saved_t_sinv[s];
    if (!xq_t) {
        ops->fp8_quantize_tiles(NULL, NULL, f->xq_t, f->xq_t_sinv, x, N, in, fwd, NULL);
        xq_t = f->xq_t;
        xq_t_sinv = f->xq_t_sinv;
    }
    ops->fp8_matmul_blockwise(dw, ops->grad_dtype, f->dyq_t, bwd, f->dyq_t_sinv, 0, xq_t, fwd, xq_t_sinv, 0, outf, in,
                              N, dw_mode, f->workspace);
}

/* With gate_up, x is the SwiGLU's output h, written here with its cast (cast_input; not blockwise);
 * otherwise x is only read. */
static void fp8_forward(lj_model *m, int s, const void *w, void *out, void *x, const void *gate_up, int N, int in,
                        int outf) {
    lj_linear_fp8_state *f = &m->linear_fp8;
    if (m->opt.fp8.recipe == LJ_FP8_RECIPE_BLOCKWISE) {
        blockwise_forward(m, s, w, out, x, N, in, outf);
        return;
    }
    const lj_fp8_format fwd = lj_linear_fp8_fwd_format(&m->opt.fp8);
    quantize(m, 2 * s + 1, f->wq, NULL, w, outf, in, fwd, 1);
    cast_input(m, s, x, gate_up, N, in, fwd);
    m->ops->fp8_matmul(out, m->ops->act_dtype, f->xq, fwd, scale_inv_of(f, 2 * s), f->wq, fwd,
                       scale_inv_of(f, 2 * s + 1), N, outf, in, LJ_GRAD_OVERWRITE, f->workspace);
}

static void fp8_backward(lj_model *m, int s, const void *w, void *dx, void *dw, const void *dout, const void *x,
                         int N, int in, int outf, lj_grad_mode dw_mode) {
    if (m->opt.fp8.recipe == LJ_FP8_RECIPE_BLOCKWISE) {
        blockwise_backward(m, s, w, dx, dw, dout, x, N, in, outf, dw_mode);
        return;
    }
    lj_linear_fp8_state *f = &m->linear_fp8;
    const lj_ops *ops = m->ops;
    const lj_fp8_format fwd = lj_linear_fp8_fwd_format(&m->opt.fp8), bwd = lj_linear_fp8_bwd_format(&m->opt.fp8);
    const int F = f->num_linears, tdy = 2 * F + s;
    quantize(m, tdy, dx ? f->dyq : NULL, f->dyq_t, dout, N, outf, bwd, 1);
    if (dx) {
        quantize(m, 2 * s + 1, NULL, f->wq_t, w, outf, in, fwd, 0);
        ops->fp8_matmul(dx, ops->act_dtype, f->dyq, bwd, scale_inv_of(f, tdy), f->wq_t, fwd,
                        scale_inv_of(f, 2 * s + 1), N, in, outf, LJ_GRAD_OVERWRITE, f->workspace);
    }
    const void *xq_t = f->saved_t[s];
    if (!xq_t) {
        quantize(m, 2 * s, NULL, f->xq_t, x, N, in, fwd, 0);
        xq_t = f->xq_t;
    }
    ops->fp8_matmul(dw, ops->grad_dtype, f->dyq_t, bwd, scale_inv_of(f, tdy), xq_t, fwd, scale_inv_of(f, 2 * s), outf, in,
                    N, dw_mode, f->workspace);
}

/* The FP8 index of linear k of layer `layer`, or -1 when it runs in the default recipe (no FP8
 * recipe, a bf16 layer, or lm_head): linear_fp8.active is set only for the FP8 recipe. */
static int fp8_slot(const lj_model *m, lj_linear_kind k, int layer) {
    if (!m->linear_fp8.active || k == LJ_LINEAR_LM_HEAD) return -1;
    return m->linear_fp8.slot[layer][k];
}

int lj_linear_forward_swiglu(lj_model *m, int layer, void *out, void *h, const void *gate_up, int N) {
    const int s = fp8_slot(m, LJ_LINEAR_DOWN, layer);
    const lj_fp8_recipe recipe = m->opt.fp8.recipe;
    if (s < 0 || !m->opt.fused || (recipe != LJ_FP8_RECIPE_DELAYED && recipe != LJ_FP8_RECIPE_TENSORWISE)) return 0;
    int in, outf;
    const int p = lj_linear_param(m, LJ_LINEAR_DOWN, layer, &in, &outf);
    fp8_forward(m, s, lj_model_param(m, p), out, h, gate_up, N, in, outf);
    return 1;
}

void lj_linear_forward(lj_model *m, lj_linear_kind k, int layer, void *out, const void *x, int N) {
    int in, outf;
    const int p = lj_linear_param(m, k, layer, &in, &outf);
    const int s = fp8_slot(m, k, layer);
    if (s >= 0) fp8_forward(m, s, lj_model_param(m, p), out, (void *)x, NULL, N, in, outf);
    else m->ops->matmul_forward(out, x, lj_model_param(m, p), N, in, outf);
}

void lj_linear_backward(lj_model *m, lj_linear_kind k, int layer, void *dx, const void *dout, const void *x, int N,
                        lj_grad_mode dw_mode) {
    int in, outf;
    const int p = lj_linear_param(m, k, layer, &in, &outf);
    const int s = fp8_slot(m, k, layer);
    if (s >= 0)
        fp8_backward(m, s, lj_model_param(m, p), dx, lj_model_grad(m, p), dout, x, N, in, outf, dw_mode);
    else
        m->ops->matmul_backward(dx, lj_model_grad(m, p), dout, x, lj_model_param(m, p), N, in, outf, LJ_GRAD_OVERWRITE,
                                dw_mode);
}

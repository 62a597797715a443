/* linear.c: the transformer's linear layers (linear.h): the precision recipes as static const
 * tables over the op table, "bf16" over its matmuls and the FP8 recipes (delayed, tensorwise,
 * blockwise; serving's fp8-w8a8) over its FP8 ops (ops.h "FP8"). */
#include "model/linear.h"

#include <math.h>
#include <string.h>

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

int lj_linear_param(const lj_param_layout *layout, lj_linear_kind k, int layer) {
    switch (k) {
    case LJ_LINEAR_QKV: return lj_param_index(layout, layer, LJ_P_Q);
    case LJ_LINEAR_O: return lj_param_index(layout, layer, LJ_P_O);
    case LJ_LINEAR_GATE_UP: return lj_param_index(layout, layer, LJ_P_GATE);
    case LJ_LINEAR_DOWN: return lj_param_index(layout, layer, LJ_P_DOWN);
    case LJ_LINEAR_LM_HEAD: return layout->lm_head;
    case LJ_LINEAR_KINDS: break;
    }
    LJ_ASSERT(0, "linear kind %d", (int)k);
    return -1;
}

lj_linear lj_linear_of(const lj_linear_recipe_ctx *c, lj_linear_kind k, int layer, const void *w, void *dw) {
    LJ_ASSERT((unsigned)k < LJ_LINEAR_KINDS, "linear kind %d", (int)k);
    const int slot = c->fp8.active && k != LJ_LINEAR_LM_HEAD ? c->fp8.slot[layer][k] : -1;
    const lj_linear l = {k, layer, c->in_features[k], c->out_features[k], w, dw, slot, 0};
    return l;
}

/* ---- "bf16": the op table's matmuls in the act dtype ------------------------------------ */

static void bf16_fp8_layers(const lj_linear_fp8_options *o, int L, int *first, int *end) {
    (void)o;
    *first = L;
    *end = 0;
}
static void bf16_plan(lj_linear_recipe_ctx *c, int N, lj_buffer_walker *w) { (void)c, (void)N, (void)w; }
static int bf16_keeps_inputs(const lj_linear_recipe_ctx *c, int layer) { return (void)c, (void)layer, 0; }
static int bf16_plan_layer(lj_linear_recipe_ctx *c, int layer, int keep, int N, lj_buffer_walker *w) {
    return (void)c, (void)layer, (void)keep, (void)N, (void)w, 0;
}
static void bf16_reset(const lj_linear_recipe_ctx *c) { (void)c; }
static void bf16_pass_begin(lj_linear_recipe_ctx *c, int training) { (void)c, (void)training; }
static void bf16_pass_end(const lj_linear_recipe_ctx *c) { (void)c; }
static void bf16_state_get(const lj_linear_recipe_ctx *c, float *dst) { (void)c, (void)dst; }
static void bf16_state_set(const lj_linear_recipe_ctx *c, const float *src) { (void)c, (void)src; }

static void bf16_forward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *out, const void *x, int N) {
    c->ops->matmul_forward(out, x, l->w, N, l->in_features, l->out_features);
}

static void bf16_backward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *dx, const void *dout,
                          const void *x, int N, lj_grad_mode dw_mode) {
    c->ops->matmul_backward(dx, l->dw, dout, x, l->w, N, l->in_features, l->out_features, LJ_GRAD_OVERWRITE, dw_mode);
}

/* The SwiGLU into h (fused, or the unfused twin through tmp), then the recipe's own forward of
 * the down projection. */
static void swiglu_then_forward(const lj_linear_recipe_ctx *c, const lj_linear *down, void *out, void *h,
                                const void *gate_up, void *tmp, int N) {
    if (c->fused) c->ops->swiglu_forward(h, gate_up, N, down->in_features);
    else c->ops->swiglu_forward_unfused(h, tmp, gate_up, N, down->in_features);
    c->recipe->forward(c, down, out, h, N);
}

/* The norm alone (linear.h norm_forward): fused with the residual add, or its unfused twin; nothing
 * cast. */
static int norm_only(const lj_linear_recipe_ctx *c, const lj_linear *next, void *res_out, void *out, float *rstd,
                     const void *res_in, const void *y, const void *w, int N, float eps) {
    (void)next;
    const lj_ops *ops = c->ops;
    const int C = c->in_features[LJ_LINEAR_QKV];
    if (!y) {
        ops->rmsnorm_forward(out, rstd, res_in, w, N, C, eps);
    } else if (c->fused) {
        ops->residual_rmsnorm_forward(res_out, out, rstd, res_in, y, w, N, C, eps);
    } else {
        ops->add(res_out, res_in, y, (int64_t)N * C);
        ops->rmsnorm_forward(out, rstd, res_out, w, N, C, eps);
    }
    return 0;
}

static const lj_linear_recipe recipe_bf16 = {
    .name = "bf16",
    .fp8_layers = bf16_fp8_layers,
    .extra_cast_pass = 0,
    .plan = bf16_plan,
    .keeps_inputs = bf16_keeps_inputs,
    .plan_layer = bf16_plan_layer,
    .reset = bf16_reset,
    .pass_begin = bf16_pass_begin,
    .pass_end = bf16_pass_end,
    .forward = bf16_forward,
    .forward_swiglu = swiglu_then_forward,
    .norm_forward = norm_only,
    .backward = bf16_backward,
    .state_get = bf16_state_get,
    .state_set = bf16_state_set,
};

/* ---- the FP8 recipes' state and plan (shared by the three) ----------------------------- */

static void fp8_layers(const lj_linear_fp8_options *o, int L, int *first, int *end) {
    *first = o->bf16_layers_start;
    *end = L - o->bf16_layers_end;
}

/* The most bytes of fp8_matmul's workspace over the three GEMMs of every FP8 linear. */
static size_t fp8_workspace_bytes(const lj_linear_recipe_ctx *c, int N) {
    const lj_linear_fp8_state *f = &c->fp8;
    size_t ws = 0;
    for (int l = 0; l < c->num_layers; l++) {
        for (int k = 0; k < 4; k++) {
            if (f->slot[l][k] < 0) continue;
            const int in = c->in_features[k], out = c->out_features[k];
            const size_t g[3] = {c->ops->fp8_matmul_workspace_bytes(N, out, in),
                                 c->ops->fp8_matmul_workspace_bytes(N, in, out),
                                 c->ops->fp8_matmul_workspace_bytes(out, in, N)};
            for (int i = 0; i < 3; i++) ws = g[i] > ws ? g[i] : ws;
        }
    }
    return ws;
}

static const char *const kind_names[4] = {"qkv", "o", "gate_up", "down"};

/* --fp8-param-gather (linear.h): the dequantization factors and amaxes of the kept weights, and
 * replicated their codes and transposes, one pair per FP8 linear, unless they lie in the weight's
 * place of the parameter buffer (in_params: bound by lj_linear_bind_weight). */
static void plan_kept_weights(lj_linear_recipe_ctx *c, lj_buffer_walker *w) {
    lj_linear_fp8_state *f = &c->fp8;
    int64_t nh, ns;
    (void)lj_linear_fp8_state_numel(f, &nh, &ns);
    f->wkept_sinv = w->take(w, LJ_ARENA_PARAMS, "fp8.w_sinv", (size_t)ns * LJ_FP8_SCALE_INV_STRIDE * 4);
    f->wamax = w->take(w, LJ_ARENA_PARAMS, "fp8.w_amax", (size_t)f->num_linears * 4);
    char name[48];
    for (int l = 0; l < c->num_layers; l++) {
        for (int k = 0; k < 4; k++) {
            const int s = f->slot[l][k];
            if (s < 0) continue;
            const int in = c->in_features[k], out = c->out_features[k];
            f->wkept[s] = f->wkept_t[s] = NULL;
            if (f->sharded || f->in_params[s]) continue;
            snprintf(name, sizeof name, "fp8.layers.%d.%s.w", l, kind_names[k]);
            f->wkept[s] = w->take(w, LJ_ARENA_PARAMS, name, (size_t)out * lj_fp8_ld(in));
            snprintf(name, sizeof name, "fp8.layers.%d.%s.w_t", l, kind_names[k]);
            f->wkept_t[s] = w->take(w, LJ_ARENA_PARAMS, name, (size_t)in * lj_fp8_ld(out));
        }
    }
}

/* The recipe state, the casts' scratch (shared by every linear, the weight's too, unless kept) and
 * the FP8 GEMM's workspace; `blockwise`: the scale tensors beside the codes (base/fp8.h layouts). */
static void fp8_plan_buffers(lj_linear_recipe_ctx *c, int N, lj_buffer_walker *w, int blockwise) {
    lj_linear_fp8_state *f = &c->fp8;
    const size_t ws = fp8_workspace_bytes(c, N);
    int64_t nh, ns;
    (void)lj_linear_fp8_state_numel(f, &nh, &ns);
    f->amax_history = w->take(w, LJ_ARENA_PARAMS, "fp8.amax_history", (size_t)nh * 4);
    f->scale = w->take(w, LJ_ARENA_PARAMS, "fp8.scale", (size_t)ns * 4);
    f->scale_inv = w->take(w, LJ_ARENA_PARAMS, "fp8.scale_inv", (size_t)ns * LJ_FP8_SCALE_INV_STRIDE * 4);
    if (f->kept) plan_kept_weights(c, w);
    /* the weight's casts: none when its codes are kept; the transpose of gathered codes (sharded) */
    f->wq = f->kept ? NULL : w->take(w, LJ_ARENA_SCRATCH, "fp8.w", (size_t)f->max_w);
    f->wq_t = f->kept && !f->sharded ? NULL : w->take(w, LJ_ARENA_SCRATCH, "fp8.w_t", (size_t)f->max_w);
    f->xq = w->take(w, LJ_ARENA_SCRATCH, "fp8.x", (size_t)N * lj_fp8_ld(f->max_in));
    f->xq_t = w->take(w, LJ_ARENA_SCRATCH, "fp8.x_t", (size_t)f->max_in * lj_fp8_ld(N));
    f->dyq = w->take(w, LJ_ARENA_SCRATCH, "fp8.dy", (size_t)N * lj_fp8_ld(f->max_out));
    f->dyq_t = w->take(w, LJ_ARENA_SCRATCH, "fp8.dy_t", (size_t)f->max_out * lj_fp8_ld(N));
    if (blockwise) {
        const int mi = f->max_in, mo = f->max_out;
        f->wq_sinv = w->take(w, LJ_ARENA_SCRATCH, "fp8.w_scale", (size_t)f->max_wscale * 4);
        f->wq_t_sinv = w->take(w, LJ_ARENA_SCRATCH, "fp8.w_t_scale", (size_t)f->max_wscale * 4);
        f->xq_sinv = w->take(w, LJ_ARENA_SCRATCH, "fp8.x_scale", (size_t)lj_fp8_tile_scales_numel(N, mi) * 4);
        f->xq_t_sinv = w->take(w, LJ_ARENA_SCRATCH, "fp8.x_t_scale", (size_t)lj_fp8_tile_scales_numel(mi, N) * 4);
        f->dyq_sinv = w->take(w, LJ_ARENA_SCRATCH, "fp8.dy_scale", (size_t)lj_fp8_tile_scales_numel(N, mo) * 4);
        f->dyq_t_sinv = w->take(w, LJ_ARENA_SCRATCH, "fp8.dy_t_scale", (size_t)lj_fp8_tile_scales_numel(mo, N) * 4);
    } else {
        f->wq_sinv = f->wq_t_sinv = f->xq_sinv = f->xq_t_sinv = f->dyq_sinv = f->dyq_t_sinv = NULL;
    }
    f->workspace = w->take(w, LJ_ARENA_WORKSPACE, "fp8.matmul", ws);
}

static void tensor_plan(lj_linear_recipe_ctx *c, int N, lj_buffer_walker *w) { fp8_plan_buffers(c, N, w, 0); }
static void blockwise_plan(lj_linear_recipe_ctx *c, int N, lj_buffer_walker *w) { fp8_plan_buffers(c, N, w, 1); }

/* An FP8 layer keeps the inputs of its QKV, gate/up and down linears as the FP8 transposes their
 * weight gradients read (the four block linears of a layer are FP8 together). */
static int fp8_keeps_inputs(const lj_linear_recipe_ctx *c, int layer) { return c->fp8.slot[layer][LJ_LINEAR_QKV] >= 0; }

static int fp8_plan_inputs(lj_linear_recipe_ctx *c, int layer, int keep, int N, lj_buffer_walker *w, int blockwise) {
    lj_linear_fp8_state *f = &c->fp8;
    static const struct { lj_linear_kind k; const char *what; } in[3] = {
        {LJ_LINEAR_QKV, "fp8.ln1_t"}, {LJ_LINEAR_GATE_UP, "fp8.ln2_t"}, {LJ_LINEAR_DOWN, "fp8.mlp_act_t"}};
    if (!fp8_keeps_inputs(c, layer)) return 0;
    char name[48];
    for (int i = 0; i < 3; i++) {
        const int s = f->slot[layer][in[i].k];
        f->saved_t[s] = NULL;
        f->saved_t_sinv[s] = NULL;
        if (!keep) continue;
        snprintf(name, sizeof name, "layers.%d.%s", layer, in[i].what);
        f->saved_t[s] = w->take(w, LJ_ARENA_ACTIVATIONS, name, (size_t)c->in_features[in[i].k] * lj_fp8_ld(N));
        if (blockwise) { /* its 1x128 tiles' factors */
            snprintf(name, sizeof name, "layers.%d.%s_scale", layer, in[i].what);
            f->saved_t_sinv[s] = w->take(w, LJ_ARENA_ACTIVATIONS, name,
                                         (size_t)lj_fp8_tile_scales_numel(c->in_features[in[i].k], N) * 4);
        }
    }
    return keep;
}

static int tensor_plan_layer(lj_linear_recipe_ctx *c, int layer, int keep, int N, lj_buffer_walker *w) {
    return fp8_plan_inputs(c, layer, keep, N, w, 0);
}
static int blockwise_plan_layer(lj_linear_recipe_ctx *c, int layer, int keep, int N, lj_buffer_walker *w) {
    return fp8_plan_inputs(c, layer, keep, N, w, 1);
}

static void fp8_reset(const lj_linear_recipe_ctx *c) {
    const lj_linear_fp8_state *f = &c->fp8;
    int64_t nh, ns;
    (void)lj_linear_fp8_state_numel(f, &nh, &ns);
    const int64_t ni = ns * LJ_FP8_SCALE_INV_STRIDE;
    float *ones = lj_malloc((size_t)ni * sizeof(float));
    for (int64_t i = 0; i < ni; i++) ones[i] = 1.0f;
    c->ops->memset_zero(f->amax_history, (size_t)nh * sizeof(float));
    c->ops->upload(f->scale, ones, (size_t)ns * sizeof(float));
    c->ops->upload(f->scale_inv, ones, (size_t)ni * sizeof(float));
    free(ones);
}

/* Current scaling and the blockwise recipe: a training pass records its amaxes, nothing else
 * carries over. */
static void fp8_pass_begin(lj_linear_recipe_ctx *c, int training) { c->fp8.recording = training; }
static void fp8_pass_end(const lj_linear_recipe_ctx *c) { (void)c; }

/* Delayed scaling: the scales of this pass from the amax history (on the device), and the
 * amaxes this pass recorded reduced over the ranks at its end (TransformerEngine's amax
 * reduction), so that every rank derives the same scales and a checkpoint's state is every
 * rank's. */
static void delayed_pass_begin(lj_linear_recipe_ctx *c, int training) {
    lj_linear_fp8_state *f = &c->fp8;
    f->recording = training;
    if (!training) return;
    const lj_linear_fp8_options *o = &c->fp8_opt;
    const float margin = ldexpf(1.0f, -o->margin);
    const int F = f->num_linears;
    c->ops->fp8_scale_update(f->amax_history, f->scale, f->scale_inv, 3 * F, f->history_len, 2 * F,
                             lj_fp8_max(lj_linear_fp8_fwd_format(o)) * margin,
                             lj_fp8_max(lj_linear_fp8_bwd_format(o)) * margin, o->amax_compute_max);
}

static void delayed_pass_end(const lj_linear_recipe_ctx *c) {
    const lj_linear_fp8_state *f = &c->fp8;
    if (!f->recording || !c->amax_reduce) return;
    c->amax_reduce(c, f->amax_history, 3 * f->num_linears); /* row 0: this pass's amaxes */
}

static void fp8_state_get(const lj_linear_recipe_ctx *c, float *dst) {
    const lj_linear_fp8_state *f = &c->fp8;
    int64_t nh, ns;
    (void)lj_linear_fp8_state_numel(f, &nh, &ns);
    c->ops->download(dst, f->amax_history, (size_t)nh * sizeof(float));
    c->ops->download(dst + nh, f->scale, (size_t)ns * sizeof(float));
}

static void fp8_state_set(const lj_linear_recipe_ctx *c, const float *src) {
    const lj_linear_fp8_state *f = &c->fp8;
    int64_t nh, ns;
    (void)lj_linear_fp8_state_numel(f, &nh, &ns);
    c->ops->upload(f->amax_history, src, (size_t)nh * sizeof(float));
    c->ops->upload(f->scale, src + nh, (size_t)ns * sizeof(float));
    const int64_t ni = ns * LJ_FP8_SCALE_INV_STRIDE;
    float *inv = lj_calloc((size_t)ni, sizeof(float));
    for (int64_t t = 0; t < ns; t++) inv[LJ_FP8_SCALE_INV_STRIDE * t] = 1.0f / src[nh + t];
    c->ops->upload(f->scale_inv, inv, (size_t)ni * sizeof(float));
    free(inv);
}

int lj_linear_fp8_overflow(const lj_linear_recipe_ctx *c, char *what, size_t len) {
    const lj_linear_fp8_state *f = &c->fp8;
    if (!f->active) return 0;
    const int F = f->num_linears;
    float *amax = lj_malloc((size_t)3 * F * sizeof(float));
    c->ops->download(amax, f->amax_history, (size_t)3 * F * sizeof(float));
    if (f->kept) { /* the weights' amaxes of their last cast */
        float *wa = lj_malloc((size_t)F * sizeof(float));
        c->ops->download(wa, f->wamax, (size_t)F * sizeof(float));
        for (int s = 0; s < F; s++) amax[2 * s + 1] = wa[s];
        free(wa);
    }
    static const char *const decoder_kinds[4] = {"qkv", "o", "gate_up", "down"};
    const char *const *kinds = c->kind_names ? c->kind_names : decoder_kinds;
    const char *unit = c->unit_name ? c->unit_name : "layers";
    int bad = 0;
    for (int l = 0; l < c->num_layers && !bad; l++) {
        for (int k = 0; k < 4 && !bad; k++) {
            const int s = f->slot[l][k];
            if (s < 0) continue;
            const int t[3] = {2 * s, 2 * s + 1, 2 * F + s};
            static const char *roles[3] = {"input x", "weight", "gradient dy"};
            for (int r = 0; r < 3 && !bad; r++) {
                if (isfinite(amax[t[r]])) continue;
                snprintf(what, len, "%s.%d.%s %s (amax %g)", unit, l, kinds[k], roles[r], (double)amax[t[r]]);
                bad = 1;
            }
        }
    }
    free(amax);
    return bad;
}

/* ---- per-tensor scaling: delayed and tensorwise ------------------------------------------- */

/* Tensor t's dequantization factor (16-byte aligned for cuBLASLt). */
static float *scale_inv_of(const lj_linear_fp8_state *f, int t) { return f->scale_inv + LJ_FP8_SCALE_INV_STRIDE * t; }

/* Where a cast of tensor t finds its scale. `fresh`: this cast defines the tensor's amax this
 * pass (current scaling, `current`, computes it first, into the history's slot: no state carries
 * over; delayed scaling records it into the history's newest row, in a training pass only); else
 * the scale is only read (the backward's second cast of x). */
static lj_fp8_scaling scaling_of(const lj_linear_fp8_state *f, int t, int fresh, int current) {
    const int cur = fresh && current;
    const lj_fp8_scaling sc = {f->scale + t, scale_inv_of(f, t),
                               cur || (fresh && f->recording) ? f->amax_history + t : NULL, cur};
    return sc;
}

/* Casts x[rows, cols] as tensor t of the scale state into q and/or q_t (scaling_of). */
static void quantize(const lj_linear_recipe_ctx *c, int t, void *q, void *q_t, const void *x, int rows, int cols,
                     lj_fp8_format fmt, int fresh, int current) {
    const lj_fp8_scaling sc = scaling_of(&c->fp8, t, fresh, current);
    if (sc.current) c->ops->fp8_amax(sc.amax, x, (int64_t)rows * cols);
    c->ops->fp8_quantize(q, q_t, x, rows, cols, fmt, &sc);
}

/* The forward's cast of the input of FP8 linear s into xq and its kept transpose: from x, or,
 * with gate_up, fused into the SwiGLU that produces x = h (ops fp8_swiglu_quantize under delayed
 * scaling, writing h only where the backward reads it; fp8_swiglu_amax then the cast under
 * current scaling). The same bits either way. */
static void cast_input(const lj_linear_recipe_ctx *c, int s, void *x, const void *gate_up, int N, int in,
                       lj_fp8_format fmt, int current) {
    const lj_linear_fp8_state *f = &c->fp8;
    if (!gate_up) {
        quantize(c, 2 * s, f->xq, f->saved_t[s], x, N, in, fmt, 1, current);
        return;
    }
    const lj_fp8_scaling sc = scaling_of(f, 2 * s, 1, current);
    if (sc.current) {
        c->ops->fp8_swiglu_amax(sc.amax, x, gate_up, N, in);
        c->ops->fp8_quantize(f->xq, f->saved_t[s], x, N, in, fmt, &sc);
    } else {
        c->ops->fp8_swiglu_quantize(x, f->saved_t[s] == NULL, f->xq, f->saved_t[s], gate_up, N, in, fmt, &sc);
    }
}

/* The weight's side of the forward GEMM of FP8 linear l: its codes [out, ld(in)] and their
 * dequantization factor (*sinv): cast now into the scratch wq (recording W's amax), or under
 * --fp8-param-gather the kept codes (replicated) or those the residency gathered (l->w). */
static const void *forward_weight(const lj_linear_recipe_ctx *c, const lj_linear *l, lj_fp8_format fmt, int current,
                                  const float **sinv) {
    const lj_linear_fp8_state *f = &c->fp8;
    const int s = l->slot;
    if (!f->kept) {
        quantize(c, 2 * s + 1, f->wq, NULL, l->w, l->out_features, l->in_features, fmt, 1, current);
        *sinv = scale_inv_of(f, 2 * s + 1);
        return f->wq;
    }
    *sinv = f->wkept_sinv + LJ_FP8_SCALE_INV_STRIDE * (2 * s + 1);
    return f->sharded ? l->w : f->wkept[s];
}

/* The weight's side of the data gradient's GEMM: the transpose [in, ld(out)] with the forward's
 * scale: cast again into wq_t, or kept, or the gathered codes transposed into wq_t. */
static const void *backward_weight(const lj_linear_recipe_ctx *c, const lj_linear *l, lj_fp8_format fmt, int current,
                                   const float **sinv) {
    const lj_linear_fp8_state *f = &c->fp8;
    const int s = l->slot;
    if (!f->kept) {
        quantize(c, 2 * s + 1, NULL, f->wq_t, l->w, l->out_features, l->in_features, fmt, 0, current);
        *sinv = scale_inv_of(f, 2 * s + 1);
        return f->wq_t;
    }
    *sinv = f->wkept_sinv + LJ_FP8_SCALE_INV_STRIDE * (2 * s + 1);
    if (!f->sharded) return f->wkept_t[s];
    c->ops->fp8_transpose(f->wq_t, l->w, l->out_features, l->in_features);
    return f->wq_t;
}

/* With gate_up, x is the SwiGLU's output h, written here with its cast (cast_input); otherwise x
 * is only read, or with l->input_cast not even that (its norm cast it, tensor_norm_forward). */
static void tensor_forward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *out, void *x, const void *gate_up,
                           int N, int current) {
    const lj_linear_fp8_state *f = &c->fp8;
    const int s = l->slot, in = l->in_features, outf = l->out_features;
    const lj_fp8_format fwd = lj_linear_fp8_fwd_format(&c->fp8_opt);
    const float *w_sinv;
    const void *wq = forward_weight(c, l, fwd, current, &w_sinv);
    if (!l->input_cast) cast_input(c, s, x, gate_up, N, in, fwd, current);
    c->ops->fp8_matmul(out, c->ops->act_dtype, f->xq, fwd, scale_inv_of(f, 2 * s), wq, fwd, w_sinv, N, outf, in,
                       LJ_GRAD_OVERWRITE, f->workspace);
}

static void tensor_backward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *dx, const void *dout,
                            const void *x, int N, lj_grad_mode dw_mode, int current) {
    const lj_linear_fp8_state *f = &c->fp8;
    const lj_ops *ops = c->ops;
    const int s = l->slot, in = l->in_features, outf = l->out_features;
    const lj_fp8_format fwd = lj_linear_fp8_fwd_format(&c->fp8_opt), bwd = lj_linear_fp8_bwd_format(&c->fp8_opt);
    const int F = f->num_linears, tdy = 2 * F + s;
    quantize(c, tdy, dx ? f->dyq : NULL, f->dyq_t, dout, N, outf, bwd, 1, current);
    if (dx) {
        const float *w_sinv;
        const void *wq_t = backward_weight(c, l, fwd, current, &w_sinv);
        ops->fp8_matmul(dx, ops->act_dtype, f->dyq, bwd, scale_inv_of(f, tdy), wq_t, fwd, w_sinv, N, in, outf,
                        LJ_GRAD_OVERWRITE, f->workspace);
    }
    const void *xq_t = f->saved_t[s];
    if (!xq_t) {
        quantize(c, 2 * s, NULL, f->xq_t, x, N, in, fwd, 0, current);
        xq_t = f->xq_t;
    }
    ops->fp8_matmul(l->dw, ops->grad_dtype, f->dyq_t, bwd, scale_inv_of(f, tdy), xq_t, fwd, scale_inv_of(f, 2 * s),
                    outf, in, N, dw_mode, f->workspace);
}

/* The FP8 recipes run lm_head and the linears of bf16 layers (slot -1) as "bf16" does. */
static void delayed_forward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *out, const void *x, int N) {
    if (l->slot < 0) bf16_forward(c, l, out, x, N);
    else tensor_forward(c, l, out, (void *)x, NULL, N, 0);
}
static void tensorwise_forward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *out, const void *x, int N) {
    if (l->slot < 0) bf16_forward(c, l, out, x, N);
    else tensor_forward(c, l, out, (void *)x, NULL, N, 1);
}

/* The SwiGLU producing the down projection's FP8 input directly (cast_input), with the fused
 * kernels on; else the SwiGLU and then the forward. */
static void tensor_forward_swiglu(const lj_linear_recipe_ctx *c, const lj_linear *down, void *out, void *h,
                                  const void *gate_up, void *tmp, int N, int current) {
    if (down->slot < 0 || !c->fused) swiglu_then_forward(c, down, out, h, gate_up, tmp, N);
    else tensor_forward(c, down, out, h, gate_up, N, current);
}
static void delayed_forward_swiglu(const lj_linear_recipe_ctx *c, const lj_linear *down, void *out, void *h,
                                   const void *gate_up, void *tmp, int N) {
    tensor_forward_swiglu(c, down, out, h, gate_up, tmp, N, 0);
}
static void tensorwise_forward_swiglu(const lj_linear_recipe_ctx *c, const lj_linear *down, void *out, void *h,
                                      const void *gate_up, void *tmp, int N) {
    tensor_forward_swiglu(c, down, out, h, gate_up, tmp, N, 1);
}

/* The norm before an FP8 linear with its input's cast fused, with the fused kernels on (ops
 * fp8_rmsnorm_quantize): xq and the kept transpose as cast_input writes them, the act-dtype output
 * only where the backward reads it (a layer that keeps no transpose casts it again); under
 * current scaling the op computes the amax first. */
static int tensor_norm_forward(const lj_linear_recipe_ctx *c, const lj_linear *next, void *res_out, void *out,
                               float *rstd, const void *res_in, const void *y, const void *w, int N, float eps,
                               int current) {
    if (!next || next->slot < 0 || !c->fused || !c->fuse_norm_cast) return norm_only(c, next, res_out, out, rstd, res_in, y, w, N, eps);
    const lj_linear_fp8_state *f = &c->fp8;
    const int s = next->slot;
    const lj_fp8_scaling sc = scaling_of(f, 2 * s, 1, current);
    c->ops->fp8_rmsnorm_quantize(res_out, out, f->saved_t[s] == NULL, rstd, f->xq, f->saved_t[s], res_in, y, w, N,
                                 next->in_features, eps, lj_linear_fp8_fwd_format(&c->fp8_opt), &sc);
    return 1;
}
static int delayed_norm_forward(const lj_linear_recipe_ctx *c, const lj_linear *next, void *res_out, void *out,
                                float *rstd, const void *res_in, const void *y, const void *w, int N, float eps) {
    return tensor_norm_forward(c, next, res_out, out, rstd, res_in, y, w, N, eps, 0);
}
static int tensorwise_norm_forward(const lj_linear_recipe_ctx *c, const lj_linear *next, void *res_out, void *out,
                                   float *rstd, const void *res_in, const void *y, const void *w, int N, float eps) {
    return tensor_norm_forward(c, next, res_out, out, rstd, res_in, y, w, N, eps, 1);
}

static void delayed_backward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *dx, const void *dout,
                             const void *x, int N, lj_grad_mode dw_mode) {
    if (l->slot < 0) bf16_backward(c, l, dx, dout, x, N, dw_mode);
    else tensor_backward(c, l, dx, dout, x, N, dw_mode, 0);
}
static void tensorwise_backward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *dx, const void *dout,
                                const void *x, int N, lj_grad_mode dw_mode) {
    if (l->slot < 0) bf16_backward(c, l, dx, dout, x, N, dw_mode);
    else tensor_backward(c, l, dx, dout, x, N, dw_mode, 1);
}

static const lj_linear_recipe recipe_delayed = {
    .name = "delayed",
    .fp8_layers = fp8_layers,
    .extra_cast_pass = 0,
    .plan = tensor_plan,
    .keeps_inputs = fp8_keeps_inputs,
    .plan_layer = tensor_plan_layer,
    .reset = fp8_reset,
    .pass_begin = delayed_pass_begin,
    .pass_end = delayed_pass_end,
    .forward = delayed_forward,
    .forward_swiglu = delayed_forward_swiglu,
    .norm_forward = delayed_norm_forward,
    .backward = delayed_backward,
    .state_get = fp8_state_get,
    .state_set = fp8_state_set,
};

static const lj_linear_recipe recipe_tensorwise = {
    .name = "tensorwise",
    .fp8_layers = fp8_layers,
    .extra_cast_pass = 1,
    .plan = tensor_plan,
    .keeps_inputs = fp8_keeps_inputs,
    .plan_layer = tensor_plan_layer,
    .reset = fp8_reset,
    .pass_begin = fp8_pass_begin,
    .pass_end = fp8_pass_end,
    .forward = tensorwise_forward,
    .forward_swiglu = tensorwise_forward_swiglu,
    .norm_forward = tensorwise_norm_forward,
    .backward = tensorwise_backward,
    .state_get = fp8_state_get,
    .state_set = fp8_state_set,
};

/* ---- blockwise (linear.h): every cast computes its tiles' scales itself; a tensor's first cast
 * of the pass also writes its amax into the history's row 0 (tensor t's entry), which only the
 * overflow report reads. ---------------------------------------------------------------------- */

static void blockwise_forward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *out, const void *x, int N) {
    if (l->slot < 0) {
        bf16_forward(c, l, out, x, N);
        return;
    }
    const lj_linear_fp8_state *f = &c->fp8;
    const lj_ops *ops = c->ops;
    const int s = l->slot, in = l->in_features, outf = l->out_features;
    const lj_fp8_format fwd = lj_linear_fp8_fwd_format(&c->fp8_opt);
    ops->fp8_quantize_blocks(f->wq, f->wq_sinv, NULL, NULL, l->w, outf, in, fwd, f->amax_history + 2 * s + 1);
    ops->fp8_quantize_tiles(f->xq, f->xq_sinv, f->saved_t[s], f->saved_t_sinv[s], x, N, in, fwd,
                            f->amax_history + 2 * s);
    ops->fp8_matmul_blockwise(out, ops->act_dtype, f->xq, fwd, f->xq_sinv, 0, f->wq, fwd, f->wq_sinv, 1, N, outf, in,
                              LJ_GRAD_OVERWRITE, f->workspace);
}

static void blockwise_backward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *dx, const void *dout,
                               const void *x, int N, lj_grad_mode dw_mode) {
    if (l->slot < 0) {
        bf16_backward(c, l, dx, dout, x, N, dw_mode);
        return;
    }
    const lj_linear_fp8_state *f = &c->fp8;
    const lj_ops *ops = c->ops;
    const int s = l->slot, in = l->in_features, outf = l->out_features;
    const lj_fp8_format fwd = lj_linear_fp8_fwd_format(&c->fp8_opt), bwd = lj_linear_fp8_bwd_format(&c->fp8_opt);
    const int F = f->num_linears;
    ops->fp8_quantize_tiles(dx ? f->dyq : NULL, f->dyq_sinv, f->dyq_t, f->dyq_t_sinv, dout, N, outf, bwd,
                            f->amax_history + 2 * F + s);
    if (dx) {
        ops->fp8_quantize_blocks(NULL, NULL, f->wq_t, f->wq_t_sinv, l->w, outf, in, fwd, NULL);
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
    ops->fp8_matmul_blockwise(l->dw, ops->grad_dtype, f->dyq_t, bwd, f->dyq_t_sinv, 0, xq_t, fwd, xq_t_sinv, 0, outf,
                              in, N, dw_mode, f->workspace);
}

static const lj_linear_recipe recipe_blockwise = {
    .name = "blockwise",
    .fp8_layers = fp8_layers,
    .extra_cast_pass = 1,
    .plan = blockwise_plan,
    .keeps_inputs = fp8_keeps_inputs,
    .plan_layer = blockwise_plan_layer,
    .reset = fp8_reset,
    .pass_begin = fp8_pass_begin,
    .pass_end = fp8_pass_end,
    .forward = blockwise_forward,
    .forward_swiglu = swiglu_then_forward, /* no SwiGLU-fused tile cast */
    .norm_forward = norm_only,             /* nor a norm-fused one */
    .backward = blockwise_backward,
    .state_get = fp8_state_get,
    .state_set = fp8_state_set,
};

/* ---- "fp8-w8a8" (linear.h): weights cast once and kept, inputs cast with current scaling -- */

static void w8a8_fp8_layers(const lj_linear_fp8_options *o, int L, int *first, int *end) {
    (void)o;
    *first = 0;
    *end = L;
}

/* The scale state (tensors 2s, x, and 2s+1, W, of the layout above; the gradients' stay unused)
 * and the kept codes. The forward's scratch is the caller's (lj_linear_bind_scratch). */
static void w8a8_plan(lj_linear_recipe_ctx *c, int N, lj_buffer_walker *w) {
    (void)N;
    lj_linear_fp8_state *f = &c->fp8;
    int64_t nh, ns;
    (void)lj_linear_fp8_state_numel(f, &nh, &ns);
    f->amax_history = w->take(w, LJ_ARENA_PARAMS, "fp8.amax_history", (size_t)nh * 4);
    f->scale = w->take(w, LJ_ARENA_PARAMS, "fp8.scale", (size_t)ns * 4);
    f->scale_inv = w->take(w, LJ_ARENA_PARAMS, "fp8.scale_inv", (size_t)ns * LJ_FP8_SCALE_INV_STRIDE * 4);
    static const char *kinds[4] = {"qkv", "o", "gate_up", "down"};
    char name[48];
    for (int l = 0; l < c->num_layers; l++) {
        for (int k = 0; k < 4; k++) {
            const int s = f->slot[l][k];
            if (s < 0) continue;
            snprintf(name, sizeof name, "layers.%d.%s.fp8", l, kinds[k]);
            f->wkept[s] = w->take(w, LJ_ARENA_PARAMS, name,
                                  (size_t)c->out_features[k] * lj_fp8_ld(c->in_features[k]));
        }
    }
}

/* Casts x (or, with gate_up, the SwiGLU that produces it, fp8_swiglu_amax) with its own amax, unless
 * its norm did (l->input_cast, w8a8_norm_forward), and multiplies by the kept codes. */
static void w8a8_forward_from(const lj_linear_recipe_ctx *c, const lj_linear *l, void *out, void *x,
                              const void *gate_up, int N) {
    const lj_linear_fp8_state *f = &c->fp8;
    const int s = l->slot, in = l->in_features, outf = l->out_features;
    LJ_ASSERT(N <= f->scratch_rows, "fp8-w8a8: %d rows, scratch for %d (lj_linear_bind_scratch)", N, f->scratch_rows);
    if (!l->input_cast) cast_input(c, s, x, gate_up, N, in, LJ_FP8_E4M3, 1);
    c->ops->fp8_matmul(out, c->ops->act_dtype, f->xq, LJ_FP8_E4M3, scale_inv_of(f, 2 * s), f->wkept[s], LJ_FP8_E4M3,
                       scale_inv_of(f, 2 * s + 1), N, outf, in, LJ_GRAD_OVERWRITE, f->workspace);
}

static void w8a8_forward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *out, const void *x, int N) {
    if (l->slot < 0) bf16_forward(c, l, out, x, N);
    else w8a8_forward_from(c, l, out, (void *)x, NULL, N);
}

static void w8a8_forward_swiglu(const lj_linear_recipe_ctx *c, const lj_linear *down, void *out, void *h,
                                const void *gate_up, void *tmp, int N) {
    if (down->slot < 0 || !c->fused) swiglu_then_forward(c, down, out, h, gate_up, tmp, N);
    else w8a8_forward_from(c, down, out, h, gate_up, N);
}

/* The norm with next's input cast fused (current scaling; the fused kernels on): xq only, and no
 * act-dtype output (nothing reads it: there is no backward). For a few rows (a decode batch) one
 * kernel does the norm, the amax, the scale and the cast. */
static int w8a8_norm_forward(const lj_linear_recipe_ctx *c, const lj_linear *next, void *res_out, void *out,
                             float *rstd, const void *res_in, const void *y, const void *w, int N, float eps) {
    if (!next || next->slot < 0 || !c->fused || !c->fuse_norm_cast) return norm_only(c, next, res_out, out, rstd, res_in, y, w, N, eps);
    const lj_linear_fp8_state *f = &c->fp8;
    const int s = next->slot;
    LJ_ASSERT(N <= f->scratch_rows, "fp8-w8a8: %d rows, scratch for %d (lj_linear_bind_scratch)", N, f->scratch_rows);
    const lj_fp8_scaling sc = scaling_of(f, 2 * s, 1, 1);
    c->ops->fp8_rmsnorm_quantize(res_out, out, 0, rstd, f->xq, NULL, res_in, y, w, N, next->in_features, eps,
                                 LJ_FP8_E4M3, &sc);
    return 1;
}

static void w8a8_backward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *dx, const void *dout,
                          const void *x, int N, lj_grad_mode dw_mode) {
    (void)c, (void)l, (void)dx, (void)dout, (void)x, (void)N, (void)dw_mode;
    LJ_ASSERT(0, "fp8-w8a8 is a forward-only recipe (serving): no backward");
}

static const lj_linear_recipe recipe_w8a8 = {
    .name = "fp8-w8a8",
    .fp8_layers = w8a8_fp8_layers,
    .extra_cast_pass = 1,
    .plan = w8a8_plan,
    .keeps_inputs = bf16_keeps_inputs,
    .plan_layer = bf16_plan_layer,
    .reset = fp8_reset,
    .pass_begin = fp8_pass_begin,
    .pass_end = fp8_pass_end,
    .forward = w8a8_forward,
    .forward_swiglu = w8a8_forward_swiglu,
    .norm_forward = w8a8_norm_forward,
    .backward = w8a8_backward,
    .state_get = bf16_state_get, /* nothing a checkpoint keeps: the scales follow from the weights */
    .state_set = bf16_state_set,
};

/* The scratch of the input's cast and of the GEMM for N rows: [N, ld(max_in)] codes, then the
 * workspace (256-byte aligned). */
static size_t w8a8_codes_bytes(const lj_linear_recipe_ctx *c, int N) {
    return ((size_t)N * lj_fp8_ld(c->fp8.max_in) + 255) / 256 * 256;
}

size_t lj_linear_scratch_bytes(const lj_linear_recipe_ctx *c, int N) {
    if (c->recipe != &recipe_w8a8) return 0;
    size_t ws = 0; /* the forward GEMMs' only */
    for (int k = 0; k < 4; k++) {
        const size_t b = c->ops->fp8_matmul_workspace_bytes(N, c->out_features[k], c->in_features[k]);
        ws = b > ws ? b : ws;
    }
    return w8a8_codes_bytes(c, N) + ws;
}

void lj_linear_bind_scratch(lj_linear_recipe_ctx *c, int N, void *buf) {
    if (c->recipe != &recipe_w8a8) return;
    lj_linear_fp8_state *f = &c->fp8;
    f->xq = buf;
    f->workspace = (char *)buf + w8a8_codes_bytes(c, N);
    f->scratch_rows = N;
}

void lj_linear_keep_weight(const lj_linear_recipe_ctx *c, lj_linear_kind k, int layer, const void *w) {
    LJ_ASSERT(c->recipe == &recipe_w8a8 && (unsigned)k < 4, "lj_linear_keep_weight: recipe %s, kind %d",
              c->recipe->name, (int)k);
    const int s = c->fp8.slot[layer][k];
    quantize(c, 2 * s + 1, c->fp8.wkept[s], NULL, w, c->out_features[k], c->in_features[k], LJ_FP8_E4M3, 1, 1);
}

void *lj_linear_kept_weight(const lj_linear_recipe_ctx *c, lj_linear_kind k, int layer) {
    if (c->recipe != &recipe_w8a8 || (unsigned)k >= 4) return NULL;
    const int s = c->fp8.slot[layer][k];
    return s < 0 ? NULL : c->fp8.wkept[s];
}

int64_t lj_linear_kept_bytes(const lj_linear_recipe_ctx *c) {
    if (c->recipe != &recipe_w8a8) return 0;
    int64_t b = 0;
    for (int l = 0; l < c->num_layers; l++)
        for (int k = 0; k < 4; k++)
            if (c->fp8.slot[l][k] >= 0) b += (int64_t)c->out_features[k] * lj_fp8_ld(c->in_features[k]);
    return b;
}

/* ---- --fp8-param-gather: the kept FP8 weights (linear.h) ---------------------------------- */

void lj_linear_shard_weights(lj_linear_recipe_ctx *c) {
    LJ_ASSERT(c->fp8.kept, "lj_linear_shard_weights: no kept FP8 weights (--fp8-param-gather)");
    c->fp8.sharded = 1;
    memset(c->fp8.in_params, 0, sizeof c->fp8.in_params); /* the residency holds the codes */
}

/* The bytes of FP8 linear kind k's codes and their transpose. */
static int64_t kept_pair_bytes(const lj_linear_recipe_ctx *c, lj_linear_kind k) {
    const int in = c->in_features[k], out = c->out_features[k];
    return (int64_t)out * lj_fp8_ld(in) + (int64_t)in * lj_fp8_ld(out);
}

int lj_linear_place_weight(lj_linear_recipe_ctx *c, lj_linear_kind k, int layer, int in_params) {
    lj_linear_fp8_state *f = &c->fp8;
    LJ_ASSERT(f->kept && !f->sharded && (unsigned)k < 4 && f->slot[layer][k] >= 0,
              "lj_linear_place_weight: layer %d kind %d", layer, (int)k);
    const int64_t place = (int64_t)c->out_features[k] * c->in_features[k] * (int64_t)lj_dtype_size(c->ops->param_dtype);
    const int s = f->slot[layer][k];
    f->in_params[s] = in_params && kept_pair_bytes(c, k) <= place;
    return f->in_params[s];
}

void lj_linear_bind_weight(lj_linear_recipe_ctx *c, lj_linear_kind k, int layer, const void *src, int64_t n, void *dst) {
    lj_linear_fp8_state *f = &c->fp8;
    LJ_ASSERT(f->kept && (unsigned)k < 4 && f->slot[layer][k] >= 0, "lj_linear_bind_weight: layer %d kind %d", layer,
              (int)k);
    const int s = f->slot[layer][k];
    const int64_t numel = (int64_t)c->out_features[k] * c->in_features[k];
    const int in_params = !f->sharded && f->in_params[s];
    LJ_ASSERT(f->sharded ? dst && n % 64 == 0 : n == numel && (dst != NULL) == in_params,
              "lj_linear_bind_weight: %lld elements for layers.%d.%s", (long long)n, layer, kind_names[k]);
    f->wsrc[s] = src;
    f->wsrc_numel[s] = n;
    f->wdst[s] = f->sharded ? dst : NULL;
    if (in_params) { /* the codes, then the transpose, in W's place (16-byte aligned rows: ld) */
        LJ_ASSERT(((uintptr_t)dst & 15) == 0, "lj_linear_bind_weight: layers.%d.%s's place is not 16-byte aligned",
                  layer, kind_names[k]);
        f->wkept[s] = dst;
        f->wkept_t[s] = (uint8_t *)dst + (int64_t)c->out_features[k] * lj_fp8_ld(c->in_features[k]);
    }
}

int lj_linear_codes_in_params(const lj_linear_recipe_ctx *c, const lj_param_layout *layout, int64_t *offset,
                              int64_t *count) {
    const lj_linear_fp8_state *f = &c->fp8;
    int n = 0;
    for (int l = 0; f->kept && !f->sharded && l < c->num_layers; l++) {
        for (int k = 0; k < 4; k++) { /* the layout's order within a layer: q|k|v, o, gate|up, down */
            const int s = f->slot[l][k];
            if (s < 0 || !f->in_params[s]) continue;
            offset[n] = layout->params[lj_linear_param(layout, (lj_linear_kind)k, l)].offset;
            count[n] = (int64_t)c->out_features[k] * c->in_features[k];
            LJ_ASSERT(n == 0 || offset[n] >= offset[n - 1] + count[n - 1], "lj_linear_codes_in_params: out of order");
            n++;
        }
    }
    return n;
}

void lj_linear_cast_weights(lj_linear_recipe_ctx *c) {
    lj_linear_fp8_state *f = &c->fp8;
    if (!f->kept) return;
    const lj_ops *ops = c->ops;
    const int F = f->num_linears, current = c->recipe == &recipe_tensorwise;
    const lj_fp8_format fmt = lj_linear_fp8_fwd_format(&c->fp8_opt);
    /* W's amax over the whole tensor: every rank's slice when sharded, so that each rank casts
     * with the same scale (tensorwise) and the overflow report sees the whole weight */
    for (int s = 0; s < F; s++) {
        if (f->in_params[s] && !f->sharded) /* the f32 master as the param copy would round it */
            ops->fp8_amax_f32(f->wamax + s, f->wsrc[s], f->wsrc_numel[s], ops->param_dtype);
        else
            ops->fp8_amax(f->wamax + s, f->wsrc[s], f->wsrc_numel[s]);
    }
    if (f->sharded && c->amax_reduce) c->amax_reduce(c, f->wamax, F);
    for (int l = 0; l < c->num_layers; l++) {
        for (int k = 0; k < 4; k++) {
            const int s = f->slot[l][k];
            if (s < 0) continue;
            /* tensorwise: the scale from wamax (written with scale_inv by the cast); delayed: the
             * scale as it is, W's amax raised into the history's newest row */
            const lj_fp8_scaling sc = {f->scale + 2 * s + 1, scale_inv_of(f, 2 * s + 1),
                                       current ? f->wamax + s : f->amax_history + 2 * s + 1, current};
            if (f->sharded) /* the slice as rows of 64, its codes dense as the gather lays them, in
                               chunks of at most 2^20 rows (a CUDA grid's rows of tiles) */
                for (int64_t r = 0, rows = f->wsrc_numel[s] / 64; r < rows; r += 1 << 20)
                    ops->fp8_quantize((uint8_t *)f->wdst[s] + 64 * r, NULL,
                                      (const char *)f->wsrc[s] + 64 * r * (int64_t)lj_dtype_size(ops->param_dtype),
                                      (int)(rows - r < (1 << 20) ? rows - r : 1 << 20), 64, fmt, &sc);
            else if (f->in_params[s])
                ops->fp8_quantize_f32(f->wkept[s], f->wkept_t[s], f->wsrc[s], c->out_features[k], c->in_features[k],
                                      ops->param_dtype, fmt, &sc);
            else
                ops->fp8_quantize(f->wkept[s], f->wkept_t[s], f->wsrc[s], c->out_features[k], c->in_features[k], fmt,
                                  &sc);
        }
    }
    /* delayed, sharded: each rank raised the newest row by its slices' amaxes; their max is the
     * weights' (the row's other entries are already every rank's, reduced at the last pass end) */
    if (!current && f->sharded && c->amax_reduce) c->amax_reduce(c, f->amax_history, 3 * F);
    int64_t nh, ns;
    (void)lj_linear_fp8_state_numel(f, &nh, &ns);
    ops->copy(f->wkept_sinv, f->scale_inv, (size_t)ns * LJ_FP8_SCALE_INV_STRIDE * sizeof(float));
    f->stale = 0;
}

/* ---- choosing a recipe ----------------------------------------------------------------- */

/* By name; the FP8 recipes in lj_fp8_recipe order, then serving's. */
static const lj_linear_recipe *const recipes[] = {&recipe_bf16, &recipe_delayed, &recipe_tensorwise,
                                                  &recipe_blockwise, &recipe_w8a8};

const lj_linear_recipe *lj_linear_recipe_find(const char *name) {
    for (size_t i = 0; i < sizeof recipes / sizeof recipes[0]; i++)
        if (!strcmp(recipes[i]->name, name)) return recipes[i];
    return NULL;
}

const lj_linear_recipe *lj_linear_recipe_of(lj_linear_recipe_kind kind, lj_fp8_recipe fp8, int training) {
    if (kind == LJ_LINEAR_RECIPE_FP8_W8A8) {
        LJ_ASSERT(!training, "fp8-w8a8 is a forward-only recipe (serving), not for a training plan");
        return &recipe_w8a8;
    }
    if (kind != LJ_LINEAR_RECIPE_FP8 || !training) return &recipe_bf16;
    const lj_linear_recipe *r = lj_linear_recipe_find(lj_fp8_recipe_name(fp8));
    LJ_ASSERT(r, "FP8 recipe %d", (int)fp8);
    return r;
}

void lj_linear_init_features(lj_linear_recipe_ctx *c, const lj_ops *ops, int num_layers, const int *in,
                             const int *out, lj_linear_recipe_kind kind, const lj_linear_fp8_options *fp8,
                             int training, int fused) {
    LJ_ASSERT(num_layers >= 0 && num_layers <= LJ_MAX_LAYERS, "%d layers of linears, at most %d", num_layers,
              LJ_MAX_LAYERS);
    memset(c, 0, sizeof *c);
    c->ops = ops;
    c->fused = fused;
    c->num_layers = num_layers;
    c->fp8_opt = *fp8;
    memcpy(c->in_features, in, sizeof c->in_features);
    memcpy(c->out_features, out, sizeof c->out_features);
    lj_linear_fp8_state *f = &c->fp8;
    memset(f->slot, 0xff, sizeof f->slot); /* -1: not FP8 */
    c->recipe = lj_linear_recipe_of(kind, fp8->recipe, training);
    int first, end;
    c->recipe->fp8_layers(fp8, c->num_layers, &first, &end);
    for (int l = first; l < end; l++) {
        for (int k = 0; k < 4; k++) {
            f->slot[l][k] = (int16_t)f->num_linears++;
            if (in[k] > f->max_in) f->max_in = in[k];
            if (out[k] > f->max_out) f->max_out = out[k];
            const int64_t wn = (int64_t)out[k] * lj_fp8_ld(in[k]), wtn = (int64_t)in[k] * lj_fp8_ld(out[k]);
            if (wn > f->max_w) f->max_w = wn;
            if (wtn > f->max_w) f->max_w = wtn;
            const int64_t g = lj_fp8_block_scales_numel(out[k], in[k]), gt = lj_fp8_block_scales_numel(in[k], out[k]);
            if (g > f->max_wscale) f->max_wscale = g;
            if (gt > f->max_wscale) f->max_wscale = gt;
        }
    }
    if (c->recipe == &recipe_bf16) return;
    f->active = f->num_linears > 0;
    f->history_len = c->recipe == &recipe_delayed && fp8->amax_history_len > 1 ? fp8->amax_history_len : 1;
    if (!f->active) c->recipe = &recipe_bf16; /* every layer kept in bf16 */
    /* --fp8-param-gather: the per-tensor training recipes keep their weights (blockwise is refused
     * by the command line, cli/megatron.c) */
    f->kept = f->active && fp8->param_gather && (c->recipe == &recipe_delayed || c->recipe == &recipe_tensorwise);
    f->stale = f->kept;
}

void lj_linear_init(lj_linear_recipe_ctx *c, const lj_ops *ops, const lj_model_config *cfg, lj_linear_recipe_kind kind,
                    const lj_linear_fp8_options *fp8, int training, int fused) {
    const int C = cfg->hidden_size, I = cfg->intermediate_size, Q = cfg->num_attention_heads * cfg->head_dim;
    const int QKV = Q + 2 * cfg->num_key_value_heads * cfg->head_dim;
    const int in[LJ_LINEAR_KINDS] = {C, Q, C, I, C}, out[LJ_LINEAR_KINDS] = {QKV, C, 2 * I, C, cfg->vocab_size};
    lj_linear_init_features(c, ops, cfg->num_hidden_layers, in, out, kind, fp8, training, fused);
}

/* cases_qwen_cuda.c: the CUDA backend's Qwen ops (ops/cuda/qknorm.cu) against the CPU
 * backend on the same bf16-representable inputs: QK-norm plain and fused with RoPE (forward,
 * rstd, backward in place as the model runs it, the weight gradient accumulated and overwritten;
 * the projection bias is written once for every backend: cases_bias.c). GPU outputs are poisoned (0xff bytes: NaN)
 * first, so an element left unwritten fails. Tolerances as in cases_cuda.c: the row's `tol` for
 * bf16 outputs, `tol_grad` for weight gradients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/cuda_common.h"
#include "tests/ops/op_cases.h"

typedef struct {
    lj_harness *h;
    const lj_op_case *c;
    const lj_ops *G, *H;
    int bf16_grads;
} qctx;

static qctx begin(lj_harness *h, const lj_op_case *c) {
    qctx q = {h, c, NULL, lj_ops_cpu(), c->dtype == LJ_DTYPE_BF16};
    lj_ops_config cfg = LJ_OPS_CONFIG_DEFAULT;
    cfg.grad_dtype = c->dtype;
    q.G = lj_ops_cuda_open(&cfg);
    LJ_ASSERT(q.G && q.G->grad_dtype == c->dtype, "CUDA case %s: no table of gradient dtype %s", c->op,
              lj_dtype_name(c->dtype));
    return q;
}

static void check(const qctx *q, const char *op, const char *shape, const float *got, const float *ref, int64_t n,
                  lj_harness_tol tol) {
    lj_harness_check_f(q->h, op, shape, got, ref, n, lj_harness_tol_gpu(tol.rel_l2, tol.max_rel));
}

/* The harness's buffers (harness.h), bf16 on the device where `bf16` says so, else 4-byte words. */
static float *hrand(const qctx *q, int64_t n, float scale, float offset) {
    return lj_harness_randf_bf16_around(q->h, n, offset, scale);
}
static void *galloc(const qctx *q, size_t bytes) { return lj_harness_dalloc(q->G, bytes); }
static void gpoison(const qctx *q, void *d, size_t bytes) { lj_harness_dpoison(q->G, d, bytes); }
static void *gup(const qctx *q, const float *x, int64_t n, int bf16) {
    return lj_harness_upload(q->G, x, n, bf16 ? LJ_DTYPE_BF16 : LJ_DTYPE_F32);
}
static float *gdown(const qctx *q, const void *d, int64_t n, int bf16) {
    return lj_harness_download_f32(q->G, d, n, bf16 ? LJ_DTYPE_BF16 : LJ_DTYPE_F32);
}

/* d = {B, T, nh, nkv, hd}: both the plain and the fused op */
void lj_case_cuda_qk_norm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const qctx q = begin(h, c);
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], N = B * T, heads = nh + nkv;
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d T=%d nh=%d nkv=%d hd=%d %s grads", B, T, nh, nkv, hd,
             q.bf16_grads ? "bf16" : "f32");
    const int64_t n = (int64_t)N * (nh + 2 * nkv) * hd, nr = (int64_t)N * heads;
    const float eps = 1e-6f;
    float *cos_t = lj_malloc((size_t)T * hd / 2 * sizeof(float)), *sin_t = lj_malloc((size_t)T * hd / 2 * sizeof(float));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd / 2; i++) {
            const double a = t / pow(1000000.0, 2.0 * i / hd);
            cos_t[t * hd / 2 + i] = (float)cos(a), sin_t[t * hd / 2 + i] = (float)sin(a);
        }
    float *x = hrand(&q, n, 2.0f, 0.0f), *w = hrand(&q, 2 * hd, 0.3f, 1.0f), *dout = hrand(&q, n, 1.0f, 0.0f);
    float *dw0 = hrand(&q, 2 * hd, 0.5f, 0.0f);
    void *gx = gup(&q, x, n, 1), *gw = gup(&q, w, 2 * hd, 1), *gcos = gup(&q, cos_t, (int64_t)T * hd / 2, 0);
    void *gsin = gup(&q, sin_t, (int64_t)T * hd / 2, 0);
    void *gout = galloc(&q, (size_t)n * 2), *grstd = galloc(&q, (size_t)nr * 4), *gd = galloc(&q, (size_t)n * 2);
    void *gws = galloc(&q, q.G->qk_norm_backward_workspace_bytes(N, nh, nkv, hd));
    for (int fused = 0; fused <= 1; fused++) {
        const char *fw = fused ? "qk_norm_rope_forward" : "qk_norm_forward";
        const char *bw = fused ? "qk_norm_rope_backward" : "qk_norm_backward";
        char what[96];
        /* CPU */
        float *out = lj_calloc((size_t)n, sizeof(float)), *rstd = lj_calloc((size_t)nr, sizeof(float));
        float *dx = lj_malloc((size_t)n * sizeof(float)), *dw = lj_malloc((size_t)2 * hd * sizeof(float));
        float *dw_ow = lj_malloc((size_t)2 * hd * sizeof(float));
        memcpy(dx, dout, (size_t)n * sizeof(float));
        memcpy(dw, dw0, (size_t)2 * hd * sizeof(float));
        if (fused) {
            q.H->qk_norm_rope_forward(out, rstd, x, w, cos_t, sin_t, B, T, nh, nkv, hd, eps);
            q.H->qk_norm_rope_backward(dx, dw, dx, x, w, rstd, cos_t, sin_t, B, T, nh, nkv, hd, LJ_GRAD_ACCUMULATE, NULL);
            q.H->qk_norm_rope_backward(NULL, dw_ow, dout, x, w, rstd, cos_t, sin_t, B, T, nh, nkv, hd,
                                       LJ_GRAD_OVERWRITE, NULL);
        } else {
            q.H->qk_norm_forward(out, rstd, x, w, N, nh, nkv, hd, eps);
            q.H->qk_norm_backward(dx, dw, dx, x, w, rstd, N, nh, nkv, hd, LJ_GRAD_ACCUMULATE, NULL);
            q.H->qk_norm_backward(NULL, dw_ow, dout, x, w, rstd, N, nh, nkv, hd, LJ_GRAD_OVERWRITE, NULL);
        }
        /* GPU: forward into a poisoned buffer; backward in place on dout, as the model runs it */
        gpoison(&q, gout, (size_t)n * 2), gpoison(&q, grstd, (size_t)nr * 4);
        void *gdw = gup(&q, dw0, 2 * hd, q.bf16_grads), *gdout = gup(&q, dout, n, 1);
        if (fused) {
            q.G->qk_norm_rope_forward(gout, grstd, gx, gw, gcos, gsin, B, T, nh, nkv, hd, eps);
            q.G->qk_norm_rope_backward(gdout, gdw, gdout, gx, gw, grstd, gcos, gsin, B, T, nh, nkv, hd,
                                       LJ_GRAD_ACCUMULATE, gws);
        } else {
            q.G->qk_norm_forward(gout, grstd, gx, gw, N, nh, nkv, hd, eps);
            q.G->qk_norm_backward(gdout, gdw, gdout, gx, gw, grstd, N, nh, nkv, hd, LJ_GRAD_ACCUMULATE, gws);
        }
        float *o = gdown(&q, gout, n, 1), *r = gdown(&q, grstd, nr, 0), *ddx = gdown(&q, gdout, n, 1);
        float *ddw = gdown(&q, gdw, 2 * hd, q.bf16_grads);
        snprintf(what, sizeof what, "%s out", fw), check(&q, what, shape, o, out, n, c->tol);
        snprintf(what, sizeof what, "%s rstd", fw), check(&q, what, shape, r, rstd, nr, (lj_harness_tol){1e-5, 1e-5, 0});
        snprintf(what, sizeof what, "%s dx (in place)", bw), check(&q, what, shape, ddx, dx, n, c->tol);
        snprintf(what, sizeof what, "%s dw (+=)", bw), check(&q, what, shape, ddw, dw, 2 * hd, c->tol_grad);
        /* overwrite mode, dx not asked for, out of place (the v copy into a separate dx is checked by
         * the forward: out's v heads) */
        gpoison(&q, gdw, (size_t)2 * hd * (q.bf16_grads ? 2 : 4));
        void *gdout2 = gup(&q, dout, n, 1);
        gpoison(&q, gd, (size_t)n * 2);
        if (fused)
            q.G->qk_norm_rope_backward(gd, gdw, gdout2, gx, gw, grstd, gcos, gsin, B, T, nh, nkv, hd, LJ_GRAD_OVERWRITE,
                                       gws);
        else
            q.G->qk_norm_backward(gd, gdw, gdout2, gx, gw, grstd, N, nh, nkv, hd, LJ_GRAD_OVERWRITE, gws);
        float *ow = gdown(&q, gdw, 2 * hd, q.bf16_grads), *od = gdown(&q, gd, n, 1);
        snprintf(what, sizeof what, "%s dw (overwrite mode)", bw), check(&q, what, shape, ow, dw_ow, 2 * hd, c->tol_grad);
        snprintf(what, sizeof what, "%s dx (out of place)", bw), check(&q, what, shape, od, dx, n, c->tol);
        q.G->free(gdw), q.G->free(gdout), q.G->free(gdout2);
        free(out), free(rstd), free(dx), free(dw), free(dw_ow), free(o), free(r), free(ddx), free(ddw), free(ow), free(od);
    }
    q.G->free(gx), q.G->free(gw), q.G->free(gcos), q.G->free(gsin), q.G->free(gout), q.G->free(grstd), q.G->free(gd);
    q.G->free(gws);
    free(cos_t), free(sin_t), free(x), free(w), free(dout), free(dw0);
}

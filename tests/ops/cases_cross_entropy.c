/* cases_cross_entropy.c: the cross-entropy over full logits (cross_entropy_forward_backward) and
 * fused with the lm_head (cross_entropy_fused), written once for every backend (case.h): losses
 * against a double reference, dlogits, dx and dw against the reference's gradient (check) or
 * finite differences (grad) on the CPU, each against the CPU on CUDA; the fused op against its
 * unfused twin (matmul_forward, cross_entropy_forward_backward in place, matmul_backward), the
 * losses alone against the losses with gradients. Rows: "cross_entropy" and
 * "cross_entropy_fused" in op_cases.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/case.h"

typedef struct {
    int N, C, V;
    double *x, *w; /* x [N, C] and w [V, C]; w NULL: x holds the logits [N, V] */
    double dloss;
    const int32_t *targets;
} ce_ctx;

/* sum_n dloss * (logsumexp(l_n) - l_n[t_n]) over the rows with t_n >= 0, l = x w^T (x itself
 * when w is NULL); the per-row losses (without dloss) to `losses`, and dloss * (softmax(l_n) -
 * onehot(t_n)) to `dlogits` [N, V] (0 on an ignored row), when not NULL. */
static double ce_ref(const ce_ctx *c, double *losses, double *dlogits) {
    double *l = lj_malloc((size_t)c->V * sizeof(double)), total = 0;
    for (int n = 0; n < c->N; n++) {
        double loss = 0, m = -INFINITY, s = 0;
        for (int v = 0; v < c->V; v++) {
            if (c->w) {
                l[v] = 0;
                for (int i = 0; i < c->C; i++) l[v] += c->x[(int64_t)n * c->C + i] * c->w[(int64_t)v * c->C + i];
            } else {
                l[v] = c->x[(int64_t)n * c->V + v];
            }
            m = fmax(m, l[v]);
        }
        for (int v = 0; v < c->V; v++) s += exp(l[v] - m);
        const int t = c->targets[n];
        if (t >= 0) loss = m + log(s) - l[t];
        if (losses) losses[n] = loss;
        if (dlogits)
            for (int v = 0; v < c->V; v++)
                dlogits[(int64_t)n * c->V + v] = t >= 0 ? c->dloss * (exp(l[v] - m) / s - (v == t)) : 0.0;
        total += c->dloss * loss;
    }
    free(l);
    return total;
}

static double ce_loss(void *p) { return ce_ref(p, NULL, NULL); }

/* d = {N, V}: logits of scale 3, every 7th row (from row 3) ignored (target -1), dloss 1/N;
 * dlogits written in place over the logits, as the model does. */
static void cross_entropy_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int N = c->d[0], V = c->d[1];
    const int64_t n = (int64_t)N * V;
    const float dloss = 1.0f / N;
    lj_case_shape(x, "N=%d V=%d", N, V);
    float *logits = lj_case_rand(x, n, 3.0f);
    int32_t *t = (int32_t *)lj_case_zeros(x, N);
    for (int i = 0; i < N; i++) t[i] = i % 7 == 3 ? -1 : (int32_t)lj_rng_below(&x->h->rng, (uint64_t)V);
    void *dt = lj_case_upload(x, t, N, LJ_CASE_I32), *dl = lj_case_upload(x, logits, n, LJ_CASE_ACT);
    void *dl0 = lj_case_upload(x, logits, n, LJ_CASE_ACT);
    ce_ctx cc = {N, 0, V, lj_case_to_double(x, logits, n), NULL, dloss, t};

    /* the losses alone, then the losses and dlogits in place */
    void *losses = lj_case_alloc(x, N, LJ_CASE_F32), *losses0 = lj_case_alloc(x, N, LJ_CASE_F32);
    ops->cross_entropy_forward_backward(losses0, NULL, dl0, dt, N, V, dloss);
    ops->cross_entropy_forward_backward(losses, dl, dl, dt, N, V, dloss);
    double *want = NULL, *want_d = NULL;
    if (lj_case_reference(x) && x->mode == LJ_HARNESS_CHECK) {
        want = lj_case_dzeros(x, N), want_d = lj_case_dzeros(x, n);
        ce_ref(&cc, want, want_d);
    }
    double *fd = lj_case_reference(x) && x->mode == LJ_HARNESS_GRAD ? lj_harness_fd_grad(ce_loss, &cc, cc.x, n) : NULL;
    if (x->mode == LJ_HARNESS_CHECK)
        lj_case_output_at(x, "cross_entropy_fwd_bwd losses", losses, N, LJ_CASE_F32, want, c->tol,
                          lj_harness_tol_gpu(1e-4, 1e-3));
    lj_case_output(x, "cross_entropy_fwd_bwd dlogits", dl, n, LJ_CASE_ACT, fd ? fd : want_d,
                   x->mode == LJ_HARNESS_CHECK ? LJ_CASE_TOL_OUT : LJ_CASE_TOL_DGRAD);
    free(fd);
    if (x->mode == LJ_HARNESS_CHECK)
        lj_case_twin(x, "cross_entropy_fwd_bwd losses with vs without dlogits", losses, losses0, N, LJ_CASE_F32,
                     LJ_CASE_TOL_BITS);
}

void lj_case_cross_entropy(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, cross_entropy_body);
}

/* d = {N, C, V, targets}: targets 0, the fixed ones of N = 6 rows (one ignored, dloss the mean
 * over the 5 counted); 1, random ones with every 17th row (from row 5) ignored (-100), dloss 1/N.
 * dw accumulates onto random values. */
static void cross_entropy_fused_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int N = c->d[0], C = c->d[1], V = c->d[2], fixed = c->d[3] == 0;
    const int64_t nx = (int64_t)N * C, nw = (int64_t)V * C;
    const int check = x->mode == LJ_HARNESS_CHECK;
    lj_case_shape(x, "N=%d C=%d V=%d", N, C, V);
    int32_t *t = (int32_t *)lj_case_zeros(x, N);
    float dloss;
    if (fixed) {
        LJ_ASSERT(N == 6 && V > 22, "cross-entropy case: the fixed targets are written for N = 6, V > 22");
        const int32_t tf[6] = {3, -1, 22, 0, 7, 7};
        memcpy(t, tf, sizeof tf);
        dloss = 1.0f / 5;
    } else {
        for (int i = 0; i < N; i++) t[i] = i % 17 == 5 ? -100 : (int32_t)lj_rng_below(&x->h->rng, (uint64_t)V);
        dloss = 1.0f / N;
    }
    float *hx = lj_case_rand(x, nx, 1.0f), *hw = lj_case_rand(x, nw, fixed ? 1.0f : 0.2f);
    float *dw0 = lj_case_rand(x, nw, fixed ? 1.0f : 0.01f);
    void *dx_in = lj_case_upload(x, hx, nx, LJ_CASE_ACT), *dw_in = lj_case_upload(x, hw, nw, LJ_CASE_PARAM);
    void *dt = lj_case_upload(x, t, N, LJ_CASE_I32);
    ce_ctx cc = {N, C, V, lj_case_to_double(x, hx, nx), lj_case_to_double(x, hw, nw), dloss, t};

    void *losses = lj_case_alloc(x, N, LJ_CASE_F32), *dx = lj_case_alloc(x, nx, LJ_CASE_ACT);
    void *dw = lj_case_upload(x, dw0, nw, LJ_CASE_GRAD);
    void *ws = lj_case_scratch(x, ops->cross_entropy_fused_workspace_bytes(N, C, V));
    ops->cross_entropy_fused(losses, dx, dw, dx_in, dw_in, dt, N, C, V, dloss, ws);
    double *want = NULL, *gx = NULL, *gw = NULL;
    if (lj_case_reference(x) && check) {
        want = lj_case_dzeros(x, N);
        ce_ref(&cc, want, NULL);
    }
    if (lj_case_reference(x) && !check) {
        gx = lj_harness_fd_grad(ce_loss, &cc, cc.x, nx), gw = lj_harness_fd_grad(ce_loss, &cc, cc.w, nw);
        for (int64_t i = 0; i < nw; i++) gw[i] += dw0[i];
    }
    if (check)
        lj_case_output_at(x, "cross_entropy_fused losses", losses, N, LJ_CASE_F32, want, c->tol,
                          lj_harness_tol_gpu(2e-3, 1e-2));
    if (check && fixed)
        lj_case_true(x, "cross_entropy_fused losses", lj_case_download(x, losses, N, LJ_CASE_F32)[1] == 0.0f,
                     "an ignored row's loss is 0");
    lj_case_output(x, "cross_entropy_fused dx", dx, nx, LJ_CASE_ACT, gx, LJ_CASE_TOL_DGRAD);
    lj_case_output(x, "cross_entropy_fused dw (+=)", dw, nw, LJ_CASE_GRAD, gw, LJ_CASE_TOL_WGRAD);
    free(gx), free(gw);
    if (!check) {
        if (fixed) {
            const float *hdx = lj_case_download(x, dx, nx, LJ_CASE_ACT);
            int zero = 1;
            for (int i = 0; i < C; i++) zero &= hdx[1 * C + i] == 0.0f;
            lj_case_true(x, "cross_entropy_fused dx", zero, "an ignored row's dx is 0");
        }
        return;
    }

    /* the unfused twin: the logits, the in-place cross-entropy, the matmul's backward (dw from
     * the same start); the chunk's GEMM may pick another algorithm than the full one on CUDA, so
     * its logits can differ by a bf16 rounding step: bf16 tolerances there */
    if (lj_case_checks(x)) {
        void *logits = lj_case_alloc(x, (int64_t)N * V, LJ_CASE_ACT), *l2 = lj_case_alloc(x, N, LJ_CASE_F32);
        void *dx2 = lj_case_alloc(x, nx, LJ_CASE_ACT), *dw2 = lj_case_upload(x, dw0, nw, LJ_CASE_GRAD);
        ops->matmul_forward(logits, dx_in, dw_in, N, C, V);
        ops->cross_entropy_forward_backward(l2, logits, logits, dt, N, V, dloss);
        ops->matmul_backward(dx2, dw2, logits, dx_in, dw_in, N, C, V, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
        if (lj_case_reference(x)) {
            const float *a = lj_case_download(x, losses, N, LJ_CASE_F32), *b = lj_case_download(x, l2, N, LJ_CASE_F32);
            int close = 1;
            for (int i = 0; i < N; i++) close &= fabsf(a[i] - b[i]) <= 1e-6f * (1 + fabsf(b[i]));
            lj_case_true(x, "cross_entropy fused vs unfused losses", close,
                         "|fused - unfused| <= 1e-6 (1 + |unfused|) per row");
        } else {
            lj_case_twin_at(x, "cross_entropy fused vs unfused losses", losses, l2, N, LJ_CASE_F32, c->tol,
                            lj_harness_tol_gpu(1e-3, 1e-2));
        }
        const lj_harness_tol cpu = lj_harness_tol_l2(1e-6);
        lj_case_twin_at(x, "cross_entropy fused vs unfused dx", dx, dx2, nx, LJ_CASE_ACT, cpu, c->tol);
        lj_case_twin_at(x, "cross_entropy fused vs unfused dw", dw, dw2, nw, LJ_CASE_GRAD, cpu, c->tol);
    }

    /* the losses alone: both gradients NULL */
    void *l3 = lj_case_alloc(x, N, LJ_CASE_F32);
    ops->cross_entropy_fused(l3, NULL, NULL, dx_in, dw_in, dt, N, C, V, dloss, ws);
    lj_case_output_at(x, "cross_entropy_fused losses (no grad)", l3, N, LJ_CASE_F32, want, c->tol,
                      lj_harness_tol_gpu(2e-3, 1e-2));
    if (lj_case_reference(x))
        lj_case_twin(x, "cross_entropy_fused losses (no grad) == with grads", l3, losses, N, LJ_CASE_F32,
                     LJ_CASE_TOL_BITS);
}

void lj_case_cross_entropy_fused(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, cross_entropy_fused_body);
}

/* cases_qknorm.c: Qwen3's QK-norm (ops/cpu/qknorm.c, ops/cuda/qknorm.cu), plain and fused with
 * RoPE, written once for every backend (case.h): the forwards against a double reference (rstd
 * per head, v heads copied), the backwards in place as the model runs them and out of place in
 * both gradient modes against finite differences on the CPU and against the CPU on CUDA; the
 * fused ops against qk_norm then rope (bit for bit on the CPU), the forward in place, and the
 * CPU's weight gradient without dx. Rows: "qk_norm" in op_cases.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/case.h"

typedef struct {
    int B, T, nh, nkv, hd, rope;
    double eps, *x, *w;
    const float *cos, *sin, *R;
} qk_ctx;

/* out = [rope](qk_norm(x)) in double: q heads use w[0:hd], k heads w[hd:2hd], v copied; the
 * per-head rstd to `rstd` when not NULL. */
static void ref_qk_norm(const qk_ctx *c, double *out, double *rstd) {
    const int N = c->B * c->T, heads = c->nh + c->nkv, hd = c->hd, h2 = hd / 2;
    const int64_t row = (int64_t)(c->nh + 2 * c->nkv) * hd;
    for (int n = 0; n < N; n++) {
        const int t = n % c->T;
        for (int64_t j = 0; j < row; j++) out[n * row + j] = c->x[n * row + j];
        for (int hh = 0; hh < heads; hh++) {
            const double *x = c->x + n * row + (int64_t)hh * hd, *w = c->w + (hh < c->nh ? 0 : hd);
            double *o = out + n * row + (int64_t)hh * hd, ss = 0;
            for (int i = 0; i < hd; i++) ss += x[i] * x[i];
            const double r = 1 / sqrt(ss / hd + c->eps);
            if (rstd) rstd[(int64_t)n * heads + hh] = r;
            for (int i = 0; i < hd; i++) o[i] = w[i] * x[i] * r;
            if (!c->rope) continue;
            for (int i = 0; i < h2; i++) {
                const double cv = c->cos[t * h2 + i], sv = c->sin[t * h2 + i], x1 = o[i], x2 = o[i + h2];
                o[i] = x1 * cv - x2 * sv;
                o[i + h2] = x2 * cv + x1 * sv;
            }
        }
    }
}

/* L = sum([rope](qk_norm(x)) * R). */
static double qk_loss(void *p) {
    const qk_ctx *c = p;
    const int64_t n = (int64_t)c->B * c->T * (c->nh + 2 * c->nkv) * c->hd;
    double *o = lj_malloc((size_t)n * sizeof(double)), l = 0;
    ref_qk_norm(c, o, NULL);
    for (int64_t i = 0; i < n; i++) l += o[i] * c->R[i];
    free(o);
    return l;
}

/* d = {B, T, nh, nkv, hd}; param = eps (0: 1e-6); RoPE at Qwen3's theta 1e6. */
static void qk_norm_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], N = B * T, heads = nh + nkv;
    const int h2 = hd / 2, row = (nh + 2 * nkv) * hd;
    const float eps = c->param > 0 ? (float)c->param : 1e-6f;
    const int64_t n = (int64_t)N * row, nr = (int64_t)N * heads, nt = (int64_t)T * h2;
    const int check = x->mode == LJ_HARNESS_CHECK, ref = lj_case_reference(x) && check;
    const int fd = lj_case_reference(x) && !check;
    lj_case_shape(x, "B=%d T=%d nh=%d nkv=%d hd=%d", B, T, nh, nkv, hd);
    float *cos_t = lj_case_zeros(x, nt), *sin_t = lj_case_zeros(x, nt);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < h2; i++) {
            const double a = t / pow(1000000.0, 2.0 * i / hd);
            cos_t[t * h2 + i] = (float)cos(a), sin_t[t * h2 + i] = (float)sin(a);
        }
    float *hx = lj_case_rand(x, n, 2.0f), *hw = lj_case_rand_around(x, 2 * hd, 1.0f, 0.3f);
    float *R = lj_case_rand(x, n, 1.0f), *dw0 = lj_case_rand(x, 2 * hd, 0.5f);
    void *dx_in = lj_case_upload(x, hx, n, LJ_CASE_ACT), *dw_in = lj_case_upload(x, hw, 2 * hd, LJ_CASE_PARAM);
    float *dcos = lj_case_upload(x, cos_t, nt, LJ_CASE_F32), *dsin = lj_case_upload(x, sin_t, nt, LJ_CASE_F32);
    void *dR = lj_case_upload(x, R, n, LJ_CASE_ACT);
    void *ws = lj_case_scratch(x, ops->qk_norm_backward_workspace_bytes(N, nh, nkv, hd));
    qk_ctx qc = {B, T, nh, nkv, hd, 0, eps, lj_case_to_double(x, hx, n), lj_case_to_double(x, hw, 2 * hd), cos_t,
                 sin_t, R};
    void *outs[2], *rstds[2];
    char what[96];
    for (int fused = 0; fused <= 1; fused++) {
        const char *fw = fused ? "qk_norm_rope_forward" : "qk_norm_forward";
        const char *bw = fused ? "qk_norm_rope_backward" : "qk_norm_backward";
        qc.rope = fused;
        void *out = outs[fused] = lj_case_alloc(x, n, LJ_CASE_ACT);
        void *rstd = rstds[fused] = lj_case_alloc(x, nr, LJ_CASE_F32);
        if (fused) ops->qk_norm_rope_forward(out, rstd, dx_in, dw_in, dcos, dsin, B, T, nh, nkv, hd, eps);
        else ops->qk_norm_forward(out, rstd, dx_in, dw_in, N, nh, nkv, hd, eps);
        double *want = ref ? lj_case_dzeros(x, n) : NULL, *want_r = lj_case_dzeros(x, nr);
        ref_qk_norm(&qc, want ? want : lj_case_dzeros(x, n), want_r);
        snprintf(what, sizeof what, "%s out", fw);
        lj_case_output(x, what, out, n, LJ_CASE_ACT, want, LJ_CASE_TOL_OUT);
        snprintf(what, sizeof what, "%s rstd", fw);
        lj_case_output(x, what, rstd, nr, LJ_CASE_F32, NULL, LJ_CASE_TOL_F32);
        if (ref) {
            const float *r = lj_case_download(x, rstd, nr, LJ_CASE_F32);
            int rows_ok = 1;
            for (int64_t i = 0; i < nr; i++) rows_ok &= fabs(r[i] - want_r[i]) <= 1e-6 * want_r[i];
            lj_case_true(x, what, rows_ok, "rstd[n, head] == 1/sqrt(mean(x^2)+eps) on every head");
        }
        const float *ho = lj_case_download(x, out, n, LJ_CASE_ACT);
        int v_same = 1;
        for (int64_t i = 0; i < n; i++)
            if (i % row >= (int64_t)heads * hd) v_same &= ho[i] == hx[i];
        lj_case_true(x, fw, v_same, "v heads copied");

        /* the wanted gradients (grad mode on the CPU) */
        double *gx = NULL, *gw = NULL, *gw_acc = NULL;
        if (fd) {
            gx = lj_harness_fd_grad(qk_loss, &qc, qc.x, n), gw = lj_harness_fd_grad(qk_loss, &qc, qc.w, 2 * hd);
            gw_acc = lj_case_dzeros(x, 2 * hd);
            for (int i = 0; i < 2 * hd; i++) gw_acc[i] = gw[i] + dw0[i];
        }
        /* in place on dout, as the model runs it; dw accumulates */
        void *d = lj_case_upload(x, R, n, LJ_CASE_ACT), *dw = lj_case_upload(x, dw0, 2 * hd, LJ_CASE_GRAD);
        if (fused)
            ops->qk_norm_rope_backward(d, dw, d, dx_in, dw_in, rstd, dcos, dsin, B, T, nh, nkv, hd,
                                       LJ_GRAD_ACCUMULATE, ws);
        else ops->qk_norm_backward(d, dw, d, dx_in, dw_in, rstd, N, nh, nkv, hd, LJ_GRAD_ACCUMULATE, ws);
        snprintf(what, sizeof what, "%s dx (in place)", bw);
        lj_case_output(x, what, d, n, LJ_CASE_ACT, gx, LJ_CASE_TOL_DGRAD);
        snprintf(what, sizeof what, "%s dw (+=)", bw);
        lj_case_output(x, what, dw, 2 * hd, LJ_CASE_GRAD, gw_acc, LJ_CASE_TOL_WGRAD);
        /* out of place into a poisoned dx; dw overwritten over NaN bytes */
        void *dd = lj_case_alloc(x, n, LJ_CASE_ACT);
        lj_case_poison(x, dw, 2 * hd, LJ_CASE_GRAD);
        if (fused)
            ops->qk_norm_rope_backward(dd, dw, dR, dx_in, dw_in, rstd, dcos, dsin, B, T, nh, nkv, hd,
                                       LJ_GRAD_OVERWRITE, ws);
        else ops->qk_norm_backward(dd, dw, dR, dx_in, dw_in, rstd, N, nh, nkv, hd, LJ_GRAD_OVERWRITE, ws);
        snprintf(what, sizeof what, "%s dw (overwrite mode)", bw);
        lj_case_output(x, what, dw, 2 * hd, LJ_CASE_GRAD, gw, LJ_CASE_TOL_WGRAD);
        snprintf(what, sizeof what, "%s dx (out of place)", bw);
        lj_case_output(x, what, dd, n, LJ_CASE_ACT, gx, LJ_CASE_TOL_DGRAD);
        free(gx), free(gw);
    }
    if (!check) return;

    /* in place (out == x) gives the same bits */
    void *xi = lj_case_upload(x, hx, n, LJ_CASE_ACT), *ri = lj_case_alloc(x, nr, LJ_CASE_F32);
    ops->qk_norm_forward(xi, ri, xi, dw_in, N, nh, nkv, hd, eps);
    lj_case_twin(x, "qk_norm_forward in place", xi, outs[0], n, LJ_CASE_ACT, LJ_CASE_TOL_EXACT);
    /* fused with RoPE == qk_norm_forward then rope_forward (bit for bit on the CPU) */
    ops->rope_forward(outs[0], dcos, dsin, B, T, nh, nkv, hd);
    lj_case_twin(x, "qk_norm_rope_forward vs qk_norm+rope", outs[1], outs[0], n, LJ_CASE_ACT, LJ_CASE_TOL_OUT);
    lj_case_twin(x, "qk_norm_rope_forward rstd", rstds[1], rstds[0], nr, LJ_CASE_F32, LJ_CASE_TOL_EXACT);
    /* the fused backward == rope_backward then qk_norm_backward, in place */
    void *d1 = lj_case_upload(x, R, n, LJ_CASE_ACT), *d2 = lj_case_upload(x, R, n, LJ_CASE_ACT);
    void *dw1 = lj_case_upload(x, dw0, 2 * hd, LJ_CASE_GRAD), *dw2 = lj_case_upload(x, dw0, 2 * hd, LJ_CASE_GRAD);
    ops->rope_backward(d1, dcos, dsin, B, T, nh, nkv, hd);
    ops->qk_norm_backward(d1, dw1, d1, dx_in, dw_in, rstds[0], N, nh, nkv, hd, LJ_GRAD_ACCUMULATE, ws);
    ops->qk_norm_rope_backward(d2, dw2, d2, dx_in, dw_in, rstds[0], dcos, dsin, B, T, nh, nkv, hd, LJ_GRAD_ACCUMULATE,
                               ws);
    lj_case_twin(x, "qk_norm_rope_backward vs rope+qk_norm dx", d2, d1, n, LJ_CASE_ACT, LJ_CASE_TOL_OUT);
    lj_case_twin(x, "qk_norm_rope_backward vs rope+qk_norm dw", dw2, dw1, 2 * hd, LJ_CASE_GRAD, LJ_CASE_TOL_OUT);
    if (lj_case_reference(x)) {
        /* the CPU's weight gradient alone (dx NULL), out of place: dout is left as it was */
        void *d3 = lj_case_upload(x, R, n, LJ_CASE_ACT), *d4 = lj_case_upload(x, R, n, LJ_CASE_ACT);
        void *dw3 = lj_case_alloc(x, 2 * hd, LJ_CASE_GRAD), *dw4 = lj_case_alloc(x, 2 * hd, LJ_CASE_GRAD);
        ops->qk_norm_rope_backward(NULL, dw3, d3, dx_in, dw_in, rstds[0], dcos, dsin, B, T, nh, nkv, hd,
                                   LJ_GRAD_OVERWRITE, ws);
        ops->qk_norm_rope_backward(d4, dw4, d4, dx_in, dw_in, rstds[0], dcos, dsin, B, T, nh, nkv, hd,
                                   LJ_GRAD_OVERWRITE, ws);
        lj_case_twin(x, "qk_norm_rope_backward without dx: dw", dw3, dw4, 2 * hd, LJ_CASE_GRAD, LJ_CASE_TOL_BITS);
        lj_case_twin(x, "qk_norm_rope_backward without dx: dout untouched", d3, dR, n, LJ_CASE_ACT, LJ_CASE_TOL_BITS);
    }
}

void lj_case_qk_norm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, qk_norm_body);
}

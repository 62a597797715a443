/* cases_rmsnorm.c: RMSNorm, its fused residual form and the residual add, written once for every
 * backend (case.h): the forward against a double reference, the backward (accumulate and
 * overwrite modes) against finite differences on the CPU and against the CPU on CUDA, the fused
 * op against add then rmsnorm_forward. Rows: "rmsnorm" and "residual_rmsnorm" in op_cases.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/case.h"

typedef struct {
    int N, C;
    double eps, *x, *w;
    const float *R;
} norm_ctx;

/* HF LlamaRMSNorm in double: out = w * x / sqrt(mean(x^2) + eps); rstd[N] when not NULL. */
static void ref_rmsnorm(double *out, double *rstd, const double *x, const double *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < C; i++) ss += x[(int64_t)n * C + i] * x[(int64_t)n * C + i];
        const double r = 1 / sqrt(ss / C + eps);
        if (rstd) rstd[n] = r;
        for (int i = 0; i < C; i++) out[(int64_t)n * C + i] = w[i] * x[(int64_t)n * C + i] * r;
    }
}

/* L = sum(rmsnorm(x, w) * R), the loss whose finite differences the grad mode takes. */
static double norm_loss(void *p) {
    const norm_ctx *c = p;
    const int64_t NC = (int64_t)c->N * c->C;
    double *o = lj_malloc((size_t)NC * sizeof(double)), l = 0;
    ref_rmsnorm(o, NULL, c->x, c->w, c->N, c->C, c->eps);
    for (int64_t i = 0; i < NC; i++) l += o[i] * c->R[i];
    free(o);
    return l;
}

/* n values k/16, |k| <= 127, whose pairwise sums are exact in bf16 (8 significant bits), so that
 * the residual every backend stores is the same number. */
static float *rand_sixteenths(lj_case_ctx *x, int64_t n) {
    float *v = lj_case_rand(x, n, 2.0f);
    for (int64_t i = 0; i < n; i++) v[i] = fmaxf(-127.0f, fminf(127.0f, roundf(v[i] * 16.0f))) / 16.0f;
    return v;
}

/* d = {N, C}; param = eps (0: 1e-5). */
static void rmsnorm_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int N = c->d[0], C = c->d[1];
    const float eps = c->param > 0 ? (float)c->param : 1e-5f;
    const int64_t NC = (int64_t)N * C;
    const int ref = lj_case_reference(x) && x->mode == LJ_HARNESS_CHECK;
    const int fd = lj_case_reference(x) && x->mode == LJ_HARNESS_GRAD;
    lj_case_shape(x, "N=%d C=%d", N, C);
    float *hx = lj_case_rand(x, NC, 1.0f), *hw = lj_case_rand_around(x, C, 1.0f, 1.0f), *R = lj_case_rand(x, NC, 1.0f);
    float *dx0 = lj_case_rand(x, NC, 0.5f), *dw0 = lj_case_rand(x, C, 0.5f);
    void *dxin = lj_case_upload(x, hx, NC, LJ_CASE_ACT), *dw = lj_case_upload(x, hw, C, LJ_CASE_PARAM);
    void *dR = lj_case_upload(x, R, NC, LJ_CASE_ACT);
    norm_ctx nc = {N, C, eps, lj_case_to_double(x, hx, NC), lj_case_to_double(x, hw, C), R};

    /* forward */
    void *out = lj_case_alloc(x, NC, LJ_CASE_ACT), *rstd = lj_case_alloc(x, N, LJ_CASE_F32);
    ops->rmsnorm_forward(out, rstd, dxin, dw, N, C, eps);
    double *want = ref ? lj_case_dzeros(x, NC) : NULL, *want_r = lj_case_dzeros(x, N);
    ref_rmsnorm(want ? want : lj_case_dzeros(x, NC), want_r, nc.x, nc.w, N, C, eps);
    lj_case_output(x, "rmsnorm_forward out", out, NC, LJ_CASE_ACT, want, LJ_CASE_TOL_OUT);
    lj_case_output(x, "rmsnorm_forward rstd", rstd, N, LJ_CASE_F32, NULL, LJ_CASE_TOL_F32);
    if (ref) {
        const float *r = lj_case_download(x, rstd, N, LJ_CASE_F32);
        int rows_ok = 1;
        for (int n = 0; n < N; n++) rows_ok &= fabs(r[n] - want_r[n]) <= 1e-6 * r[n];
        lj_case_true(x, "rmsnorm_forward rstd", rows_ok, "|rstd - 1/sqrt(mean(x^2)+eps)| <= 1e-6 rstd on every row");
    }

    /* backward: accumulates into dx and dw, which start from random values */
    void *gdx = lj_case_upload(x, dx0, NC, LJ_CASE_ACT), *gdw = lj_case_upload(x, dw0, C, LJ_CASE_GRAD);
    void *ws = lj_case_scratch(x, ops->rmsnorm_backward_workspace_bytes(N, C));
    ops->rmsnorm_backward(gdx, gdw, dR, dxin, dw, rstd, N, C, LJ_GRAD_ACCUMULATE, ws);
    double *gx = NULL, *gw = NULL;
    if (fd) {
        gx = lj_harness_fd_grad(norm_loss, &nc, nc.x, NC), gw = lj_harness_fd_grad(norm_loss, &nc, nc.w, C);
        for (int64_t i = 0; i < NC; i++) gx[i] += dx0[i];
        for (int i = 0; i < C; i++) gw[i] += dw0[i];
    }
    lj_case_output(x, "rmsnorm_backward dx (+=)", gdx, NC, LJ_CASE_ACT, gx, LJ_CASE_TOL_DGRAD);
    lj_case_output(x, "rmsnorm_backward dw (+=)", gdw, C, LJ_CASE_GRAD, gw, LJ_CASE_TOL_WGRAD);
    /* overwrite mode: dw is written, whatever it held (NaN bytes here) */
    if (gw)
        for (int i = 0; i < C; i++) gw[i] -= dw0[i];
    void *gdx2 = lj_case_upload(x, dx0, NC, LJ_CASE_ACT);
    lj_case_poison(x, gdw, C, LJ_CASE_GRAD);
    ops->rmsnorm_backward(gdx2, gdw, dR, dxin, dw, rstd, N, C, LJ_GRAD_OVERWRITE, ws);
    lj_case_output(x, "rmsnorm_backward dw (overwrite mode)", gdw, C, LJ_CASE_GRAD, gw, LJ_CASE_TOL_WGRAD);
    free(gx), free(gw);
    if (x->mode != LJ_HARNESS_CHECK) return;

    /* the fused residual add + RMSNorm against add then rmsnorm_forward, on a residual every
     * backend holds exactly */
    float *ha = rand_sixteenths(x, NC), *hy = rand_sixteenths(x, NC);
    void *da = lj_case_upload(x, ha, NC, LJ_CASE_ACT), *dy = lj_case_upload(x, hy, NC, LJ_CASE_ACT);
    void *sum = lj_case_alloc(x, NC, LJ_CASE_ACT), *out1 = lj_case_alloc(x, NC, LJ_CASE_ACT);
    void *rstd1 = lj_case_alloc(x, N, LJ_CASE_F32);
    ops->add(sum, da, dy, NC);
    ops->rmsnorm_forward(out1, rstd1, sum, dw, N, C, eps);
    void *res = lj_case_alloc(x, NC, LJ_CASE_ACT), *out2 = lj_case_alloc(x, NC, LJ_CASE_ACT);
    void *rstd2 = lj_case_alloc(x, N, LJ_CASE_F32);
    ops->residual_rmsnorm_forward(res, out2, rstd2, da, dy, dw, N, C, eps);
    double *want_sum = NULL, *want_out = NULL;
    if (ref) {
        want_sum = lj_case_dzeros(x, NC), want_out = lj_case_dzeros(x, NC);
        for (int64_t i = 0; i < NC; i++) want_sum[i] = (double)ha[i] + hy[i];
        ref_rmsnorm(want_out, NULL, want_sum, nc.w, N, C, eps);
    }
    lj_case_output(x, "add", sum, NC, LJ_CASE_ACT, want_sum, LJ_CASE_TOL_EXACT);
    lj_case_output(x, "residual_rmsnorm res_out", res, NC, LJ_CASE_ACT, want_sum, LJ_CASE_TOL_EXACT);
    lj_case_output(x, "residual_rmsnorm out", out2, NC, LJ_CASE_ACT, want_out, LJ_CASE_TOL_OUT);
    lj_case_output(x, "residual_rmsnorm rstd", rstd2, N, LJ_CASE_F32, NULL, LJ_CASE_TOL_F32);
    lj_case_twin(x, "residual_rmsnorm vs add+rmsnorm res_out", res, sum, NC, LJ_CASE_ACT, LJ_CASE_TOL_EXACT);
    lj_case_twin(x, "residual_rmsnorm vs add+rmsnorm out", out2, out1, NC, LJ_CASE_ACT, LJ_CASE_TOL_EXACT);
    lj_case_twin(x, "residual_rmsnorm vs add+rmsnorm rstd", rstd2, rstd1, N, LJ_CASE_F32, LJ_CASE_TOL_EXACT);
    if (lj_case_reference(x)) {
        /* the CPU's fused op in place on the residual stream (res_out == res_in) */
        void *inplace = lj_case_upload(x, ha, NC, LJ_CASE_ACT), *out3 = lj_case_alloc(x, NC, LJ_CASE_ACT);
        void *rstd3 = lj_case_alloc(x, N, LJ_CASE_F32);
        ops->residual_rmsnorm_forward(inplace, out3, rstd3, inplace, dy, dw, N, C, eps);
        lj_case_twin(x, "residual_rmsnorm in place res_out", inplace, sum, NC, LJ_CASE_ACT, LJ_CASE_TOL_EXACT);
        lj_case_twin(x, "residual_rmsnorm in place out", out3, out1, NC, LJ_CASE_ACT, LJ_CASE_TOL_EXACT);
        lj_case_twin(x, "residual_rmsnorm in place rstd", rstd3, rstd1, N, LJ_CASE_F32, LJ_CASE_TOL_EXACT);
    }
}

void lj_case_rmsnorm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, rmsnorm_body);
}

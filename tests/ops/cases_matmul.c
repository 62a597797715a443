/* cases_matmul.c: the bf16/fp32 matmul and its backward, written once for every backend
 * (case.h): the forward against a double reference, the backward in every mode (dx overwritten
 * or accumulated, dw accumulated or overwritten, a NULL dx or dw skipped) against finite
 * differences on the CPU and against the CPU on CUDA. Rows: "matmul" in op_cases.c. */
#include <stdlib.h>

#include "tests/ops/case.h"

typedef struct {
    int N, IC, OC;
    double *x, *w;
    const float *R;
} mm_ctx;

/* out[N, OC] = x[N, IC] w[OC, IC]^T in double. */
static void ref_matmul(double *out, const double *x, const double *w, int N, int IC, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int i = 0; i < IC; i++) s += x[(int64_t)n * IC + i] * w[(int64_t)o * IC + i];
            out[(int64_t)n * OC + o] = s;
        }
}

/* L = sum(matmul(x, w) * R). */
static double mm_loss(void *p) {
    const mm_ctx *c = p;
    const int64_t n = (int64_t)c->N * c->OC;
    double *o = lj_malloc((size_t)n * sizeof(double)), l = 0;
    ref_matmul(o, c->x, c->w, c->N, c->IC, c->OC);
    for (int64_t i = 0; i < n; i++) l += o[i] * c->R[i];
    free(o);
    return l;
}

/* d = {N, IC, OC}. */
static void matmul_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int N = c->d[0], IC = c->d[1], OC = c->d[2];
    const int64_t nx = (int64_t)N * IC, nw = (int64_t)OC * IC, no = (int64_t)N * OC;
    lj_case_shape(x, "N=%d IC=%d OC=%d", N, IC, OC);
    float *hx = lj_case_rand(x, nx, 1.0f), *hw = lj_case_rand(x, nw, 0.1f), *R = lj_case_rand(x, no, 1.0f);
    float *dx0 = lj_case_rand(x, nx, 1.0f), *dw0 = lj_case_rand(x, nw, 1.0f);
    void *dxin = lj_case_upload(x, hx, nx, LJ_CASE_ACT), *dwin = lj_case_upload(x, hw, nw, LJ_CASE_PARAM);
    void *dR = lj_case_upload(x, R, no, LJ_CASE_ACT);
    mm_ctx mc = {N, IC, OC, lj_case_to_double(x, hx, nx), lj_case_to_double(x, hw, nw), R};

    void *out = lj_case_alloc(x, no, LJ_CASE_ACT);
    ops->matmul_forward(out, dxin, dwin, N, IC, OC);
    double *want = NULL;
    if (lj_case_reference(x) && x->mode == LJ_HARNESS_CHECK) {
        want = lj_case_dzeros(x, no);
        ref_matmul(want, mc.x, mc.w, N, IC, OC);
    }
    lj_case_output(x, "matmul_forward", out, no, LJ_CASE_ACT, want, LJ_CASE_TOL_OUT);

    /* the wanted gradients: finite differences (grad mode on the CPU), plus each buffer's start */
    double *gx = NULL, *gw = NULL, *dx_acc = NULL, *dw_acc = NULL, *dw_acc2 = NULL;
    if (lj_case_reference(x) && x->mode == LJ_HARNESS_GRAD) {
        gx = lj_harness_fd_grad(mm_loss, &mc, mc.x, nx), gw = lj_harness_fd_grad(mm_loss, &mc, mc.w, nw);
        dx_acc = lj_case_dzeros(x, nx), dw_acc = lj_case_dzeros(x, nw), dw_acc2 = lj_case_dzeros(x, nw);
        for (int64_t i = 0; i < nx; i++) dx_acc[i] = gx[i] + dx0[i];
        for (int64_t i = 0; i < nw; i++) dw_acc[i] = gw[i] + dw0[i], dw_acc2[i] = 2 * gw[i] + dw0[i];
    }
    /* overwrite dx, accumulate dw */
    void *dx = lj_case_alloc(x, nx, LJ_CASE_ACT), *dw = lj_case_upload(x, dw0, nw, LJ_CASE_GRAD);
    ops->matmul_backward(dx, dw, dR, dxin, dwin, N, IC, OC, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
    lj_case_output(x, "matmul_backward dx", dx, nx, LJ_CASE_ACT, gx, LJ_CASE_TOL_DGRAD);
    lj_case_output(x, "matmul_backward dw (+=)", dw, nw, LJ_CASE_GRAD, dw_acc, LJ_CASE_TOL_WGRAD);
    /* dx_mode ACCUMULATE adds onto dx; a NULL dw is skipped */
    void *dxa = lj_case_upload(x, dx0, nx, LJ_CASE_ACT);
    ops->matmul_backward(dxa, NULL, dR, dxin, dwin, N, IC, OC, LJ_GRAD_ACCUMULATE, LJ_GRAD_ACCUMULATE);
    lj_case_output(x, "matmul_backward dx (+=)", dxa, nx, LJ_CASE_ACT, dx_acc, LJ_CASE_TOL_DGRAD);
    /* a NULL dx is skipped */
    ops->matmul_backward(NULL, dw, dR, dxin, dwin, N, IC, OC, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
    lj_case_output(x, "matmul_backward dw (+= twice)", dw, nw, LJ_CASE_GRAD, dw_acc2, LJ_CASE_TOL_WGRAD);
    /* overwrite mode: dw is written, whatever it held (NaN bytes here) */
    lj_case_poison(x, dw, nw, LJ_CASE_GRAD);
    ops->matmul_backward(NULL, dw, dR, dxin, dwin, N, IC, OC, LJ_GRAD_OVERWRITE, LJ_GRAD_OVERWRITE);
    lj_case_output(x, "matmul_backward dw (overwrite mode)", dw, nw, LJ_CASE_GRAD, gw, LJ_CASE_TOL_WGRAD);
    free(gx), free(gw);
}

void lj_case_matmul(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, matmul_body);
}

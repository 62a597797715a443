/* cases_bias.c: the projection bias (Qwen2's q/k/v biases: bias_add and its column-sum
 * gradient, ops/cpu/qknorm.c and ops/cuda/qknorm.cu), written once for every backend (case.h):
 * the add exact on the CPU, the gradient in both modes against the column sums, on CUDA each
 * against the CPU. Rows: "bias" in op_cases.c. */
#include <math.h>
#include <stdlib.h>

#include "tests/ops/case.h"

/* d = {N, C}. */
static void bias_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int N = c->d[0], C = c->d[1];
    const int64_t NC = (int64_t)N * C;
    lj_case_shape(x, "N=%d C=%d", N, C);
    float *hx = lj_case_rand(x, NC, 1.0f), *hb = lj_case_rand(x, C, 1.0f), *dout = lj_case_rand(x, NC, 1.0f);
    float *db0 = lj_case_rand(x, C, 0.5f);
    void *y = lj_case_upload(x, hx, NC, LJ_CASE_ACT), *b = lj_case_upload(x, hb, C, LJ_CASE_PARAM);
    ops->bias_add(y, b, N, C);
    lj_case_output(x, "bias_add", y, NC, LJ_CASE_ACT, NULL, LJ_CASE_TOL_OUT);
    if (lj_case_reference(x)) {
        const float *hy = lj_case_download(x, y, NC, LJ_CASE_ACT);
        int exact = 1;
        for (int64_t i = 0; i < NC; i++) exact &= hy[i] == hx[i] + hb[i % C];
        lj_case_true(x, "bias_add", exact, "x[n, c] + b[c] exactly");
    }
    /* the column sums of dout, added to db0 (accumulate) or alone (overwrite) */
    double *sums = lj_case_dzeros(x, C), *acc = lj_case_dzeros(x, C);
    for (int64_t i = 0; i < NC; i++) sums[i % C] += dout[i];
    for (int i = 0; i < C; i++) acc[i] = sums[i] + db0[i];
    void *gd = lj_case_upload(x, dout, NC, LJ_CASE_ACT), *db = lj_case_upload(x, db0, C, LJ_CASE_GRAD);
    void *ws = lj_case_scratch(x, ops->bias_backward_workspace_bytes(N, C));
    ops->bias_backward(db, gd, N, C, LJ_GRAD_ACCUMULATE, ws);
    lj_case_output(x, "bias_backward db (+=)", db, C, LJ_CASE_GRAD, acc, LJ_CASE_TOL_WGRAD);
    lj_case_poison(x, db, C, LJ_CASE_GRAD);
    ops->bias_backward(db, gd, N, C, LJ_GRAD_OVERWRITE, ws);
    lj_case_output(x, "bias_backward db (overwrite mode)", db, C, LJ_CASE_GRAD, sums, LJ_CASE_TOL_WGRAD);
}

void lj_case_bias(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) { lj_case_each(h, c, mode, bias_body); }

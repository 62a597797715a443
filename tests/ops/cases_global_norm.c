/* cases_global_norm.c: the squared global gradient norm (ops/cpu/adamw.c, ops/cuda/adamw.cu),
 * written once for every backend (case.h): within 1e-6 of the double sum of squares on each
 * backend, a repeat giving the same bits; on CUDA against the CPU too. Rows: "global_norm" in
 * op_cases.c. */
#include <math.h>

#include "tests/ops/case.h"

/* d = {n}. */
static void global_norm_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int64_t n = x->c->d[0];
    lj_case_shape(x, "n=%lld", (long long)n);
    float *g = lj_case_rand(x, n, 0.01f);
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += (double)g[i] * g[i];
    void *dg = lj_case_upload(x, g, n, LJ_CASE_GRAD), *ws = lj_case_scratch(x, ops->global_norm_workspace_bytes(n));
    void *out = lj_case_alloc(x, 1, LJ_CASE_F32), *out2 = lj_case_alloc(x, 1, LJ_CASE_F32);
    ops->global_norm_sq(out, dg, n, ws);
    ops->global_norm_sq(out2, dg, n, ws);
    const float got = lj_case_download(x, out, 1, LJ_CASE_F32)[0];
    lj_case_true(x, "global_norm_sq", fabs(got - want) <= 1e-6 * want, "%.9g vs double %.9g (1e-6 relative)", got,
                 want);
    lj_case_output(x, "global_norm_sq", out, 1, LJ_CASE_F32, NULL, LJ_CASE_TOL_F32);
    lj_case_twin(x, "global_norm_sq repeat", out, out2, 1, LJ_CASE_F32, LJ_CASE_TOL_BITS);
}

void lj_case_global_norm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, global_norm_body);
}

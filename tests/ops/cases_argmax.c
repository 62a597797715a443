/* cases_argmax.c: the greedy token of each row of logits (argmax_rows: ops/cpu/paged.c,
 * ops/cuda/paged.cu), written once for every backend (case.h): against the sequential scan's
 * index (the first of equal maxima; NaNs never taken, a NaN at index 0 kept) on every row. The
 * values are quarters in [-2, 2] so that maxima tie often, and the first rows are the corner
 * cases: a NaN at index 0, every value -inf, NaNs among the maxima, the maximum last. Rows:
 * "argmax_rows" in op_cases.c. */
#include <math.h>
#include <string.h>

#include "tests/ops/case.h"

/* d = {M, V}. */
static void argmax_body(lj_case_ctx *x) {
    const int M = (int)x->c->d[0], V = (int)x->c->d[1];
    lj_case_shape(x, "M=%d V=%d", M, V);
    float *v = lj_case_rand(x, (int64_t)M * V, 1.0f);
    for (int64_t i = 0; i < (int64_t)M * V; i++) v[i] = fminf(fmaxf(roundf(v[i] * 4.0f) / 4.0f, -2.0f), 2.0f);
    if (M > 0) v[0] = NAN, v[V / 2] = 3.0f;                              /* NaN at 0: index 0 */
    if (M > 1)
        for (int i = 0; i < V; i++) v[V + i] = -INFINITY;                /* all -inf: index 0 */
    if (M > 2) v[2 * V + V / 3] = 2.5f, v[2 * V + V / 2] = NAN, v[2 * V + V - 1] = 2.5f; /* the first 2.5 */
    if (M > 3) v[3 * V + V - 1] = 4.0f;                                  /* the last element */
    double *want = lj_case_dzeros(x, M);
    for (int m = 0; m < M; m++) {
        const float *r = v + (int64_t)m * V;
        int best = 0;
        for (int i = 1; i < V; i++)
            if (r[i] > r[best]) best = i;
        want[m] = best;
    }
    void *dv = lj_case_upload(x, v, (int64_t)M * V, LJ_CASE_ACT), *out = lj_case_alloc(x, M, LJ_CASE_I32);
    x->ops->argmax_rows(out, dv, M, V);
    /* i32 words: compared as the float values of the indices */
    const float *words = lj_case_download(x, out, M, LJ_CASE_I32);
    float *ids = lj_case_zeros(x, M);
    int same = 1;
    for (int m = 0; m < M; m++) {
        int32_t id;
        memcpy(&id, &words[m], sizeof id);
        ids[m] = (float)id;
        same &= id == (int32_t)want[m];
    }
    lj_case_output(x, "argmax_rows", lj_case_upload(x, ids, M, LJ_CASE_F32), M, LJ_CASE_F32,
                   lj_case_reference(x) ? want : NULL, LJ_CASE_TOL_EXACT);
    lj_case_true(x, "argmax_rows: the sequential scan's index", same, "M=%d V=%d", M, V);
}

void lj_case_argmax_rows(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, argmax_body);
}

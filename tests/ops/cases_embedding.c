/* cases_embedding.c: the embedding lookup and its backward, written once for every backend
 * (case.h): the rows copied exactly, the gradient accumulated into the rows of repeated ids
 * against double sums, a second backward giving the same bytes; on CUDA each against the CPU.
 * Rows: "embedding" in op_cases.c. */
#include <stdlib.h>
#include <string.h>

#include "tests/ops/case.h"

/* d = {N, C, V}: N ids below V (or V/4 when V >= 8, so that they repeat). */
static void embedding_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int N = c->d[0], C = c->d[1], V = c->d[2];
    const int64_t nw = (int64_t)V * C, no = (int64_t)N * C;
    lj_case_shape(x, "N=%d C=%d V=%d", N, C, V);
    float *wte = lj_case_rand(x, nw, 1.0f), *dout = lj_case_rand(x, no, 1.0f), *dw0 = lj_case_rand(x, nw, 0.1f);
    int32_t *ids = (int32_t *)lj_case_zeros(x, N);
    for (int n = 0; n < N; n++) ids[n] = (int32_t)lj_rng_below(&x->h->rng, (uint64_t)(V < 8 ? V : V / 4));
    void *dids = lj_case_upload(x, ids, N, LJ_CASE_I32), *dwte = lj_case_upload(x, wte, nw, LJ_CASE_PARAM);

    void *out = lj_case_alloc(x, no, LJ_CASE_ACT);
    ops->embedding_forward(out, dids, dwte, N, C);
    double *want = NULL;
    if (lj_case_reference(x)) {
        want = lj_case_dzeros(x, no);
        for (int n = 0; n < N; n++)
            for (int i = 0; i < C; i++) want[(int64_t)n * C + i] = wte[(int64_t)ids[n] * C + i];
    }
    lj_case_output(x, "embedding_forward", out, no, LJ_CASE_ACT, want, LJ_CASE_TOL_EXACT);
    const float *ho = lj_case_download(x, out, no, LJ_CASE_ACT);
    int rows_equal = 1;
    for (int n = 0; n < N; n++) rows_equal &= memcmp(ho + (int64_t)n * C, wte + (int64_t)ids[n] * C, C * sizeof(float)) == 0;
    lj_case_true(x, "embedding_forward", rows_equal, "out[n] == wte[ids[n]] bit for bit");

    double *want_dw = NULL;
    if (lj_case_reference(x)) {
        want_dw = lj_case_to_double(x, dw0, nw);
        for (int n = 0; n < N; n++)
            for (int i = 0; i < C; i++) want_dw[(int64_t)ids[n] * C + i] += dout[(int64_t)n * C + i];
    }
    void *dd = lj_case_upload(x, dout, no, LJ_CASE_ACT), *dw = lj_case_upload(x, dw0, nw, LJ_CASE_GRAD);
    void *ws = lj_case_scratch(x, ops->embedding_backward_workspace_bytes(N));
    ops->embedding_backward(dw, dd, dids, N, C, ws);
    lj_case_output(x, "embedding_backward dwte (+=)", dw, nw, LJ_CASE_GRAD, want_dw, LJ_CASE_TOL_WGRAD);
    /* deterministic: a second call from the same start gives the same bytes */
    void *dw2 = lj_case_upload(x, dw0, nw, LJ_CASE_GRAD);
    ops->embedding_backward(dw2, dd, dids, N, C, ws);
    lj_case_twin(x, "embedding_backward repeat", dw2, dw, nw, LJ_CASE_GRAD, LJ_CASE_TOL_BITS);
}

void lj_case_embedding(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, embedding_body);
}

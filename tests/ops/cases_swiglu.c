/* cases_swiglu.c: SwiGLU, fused and unfused, written once for every backend (case.h): the
 * forward against a double reference, the backward against finite differences on the CPU, both
 * against the CPU on CUDA, and the unfused twins against the fused ops. Rows: "swiglu" in
 * op_cases.c. */
#include <math.h>
#include <stdlib.h>

#include "tests/ops/case.h"

typedef struct {
    int N, I;
    double *gu;
    const float *R;
} swiglu_ctx;

/* out[N, I] = silu(gate) * up of gate_up[N, 2I] = [gate | up] (Shazeer 2020), in double. */
static void ref_swiglu(double *out, const double *gu, int N, int I) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            const double g = gu[(int64_t)n * 2 * I + i], u = gu[(int64_t)n * 2 * I + I + i];
            out[(int64_t)n * I + i] = g / (1 + exp(-g)) * u;
        }
}

/* L = sum(swiglu(gate_up) * R). */
static double swiglu_loss(void *p) {
    const swiglu_ctx *c = p;
    const int64_t NI = (int64_t)c->N * c->I;
    double *o = lj_malloc((size_t)NI * sizeof(double)), l = 0;
    ref_swiglu(o, c->gu, c->N, c->I);
    for (int64_t i = 0; i < NI; i++) l += o[i] * c->R[i];
    free(o);
    return l;
}

/* d = {N, I}. */
static void swiglu_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int N = c->d[0], I = c->d[1];
    const int64_t NI = (int64_t)N * I;
    lj_case_shape(x, "N=%d I=%d", N, I);
    float *gu = lj_case_rand(x, 2 * NI, 2.0f), *R = lj_case_rand(x, NI, 1.0f);
    void *g = lj_case_upload(x, gu, 2 * NI, LJ_CASE_ACT), *dR = lj_case_upload(x, R, NI, LJ_CASE_ACT);
    swiglu_ctx sc = {N, I, lj_case_to_double(x, gu, 2 * NI), R};

    void *out = lj_case_alloc(x, NI, LJ_CASE_ACT), *out2 = lj_case_alloc(x, NI, LJ_CASE_ACT);
    void *tmp = lj_case_alloc(x, NI, LJ_CASE_ACT);
    ops->swiglu_forward(out, g, N, I);
    ops->swiglu_forward_unfused(out2, tmp, g, N, I);
    double *want = NULL;
    if (lj_case_reference(x) && x->mode == LJ_HARNESS_CHECK) {
        want = lj_case_dzeros(x, NI);
        ref_swiglu(want, sc.gu, N, I);
    }
    lj_case_output(x, "swiglu_forward", out, NI, LJ_CASE_ACT, want, LJ_CASE_TOL_OUT);
    lj_case_output(x, "swiglu_forward_unfused", out2, NI, LJ_CASE_ACT, want, LJ_CASE_TOL_OUT);
    lj_case_twin(x, "swiglu fused vs unfused fwd", out, out2, NI, LJ_CASE_ACT, LJ_CASE_TOL_OUT);

    void *d1 = lj_case_alloc(x, 2 * NI, LJ_CASE_ACT), *d2 = lj_case_alloc(x, 2 * NI, LJ_CASE_ACT);
    ops->swiglu_backward(d1, dR, g, N, I);
    ops->swiglu_backward_unfused(d2, tmp, dR, g, N, I);
    double *fd = lj_case_reference(x) && x->mode == LJ_HARNESS_GRAD ? lj_harness_fd_grad(swiglu_loss, &sc, sc.gu, 2 * NI)
                                                                     : NULL;
    lj_case_output(x, "swiglu_backward dgate_up", d1, 2 * NI, LJ_CASE_ACT, fd, LJ_CASE_TOL_DGRAD);
    lj_case_output(x, "swiglu_backward_unfused dgate_up", d2, 2 * NI, LJ_CASE_ACT, fd, LJ_CASE_TOL_DGRAD);
    lj_case_twin(x, "swiglu fused vs unfused bwd", d1, d2, 2 * NI, LJ_CASE_ACT, LJ_CASE_TOL_OUT);
    free(fd);
    if (lj_case_reference(x) && x->mode == LJ_HARNESS_CHECK) {
        /* the CPU's backwards in place: dgate_up may alias gate_up */
        void *ip = lj_case_upload(x, gu, 2 * NI, LJ_CASE_ACT);
        ops->swiglu_backward(ip, dR, ip, N, I);
        lj_case_twin(x, "swiglu_backward in place", ip, d1, 2 * NI, LJ_CASE_ACT, LJ_CASE_TOL_EXACT);
        void *ip2 = lj_case_upload(x, gu, 2 * NI, LJ_CASE_ACT);
        ops->swiglu_backward_unfused(ip2, tmp, dR, ip2, N, I);
        lj_case_twin(x, "swiglu_backward_unfused in place", ip2, d1, 2 * NI, LJ_CASE_ACT, LJ_CASE_TOL_EXACT);
    }
}

void lj_case_swiglu(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, swiglu_body);
}

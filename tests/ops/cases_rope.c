/* cases_rope.c: RoPE in the QKV layout, written once for every backend (case.h): the forward,
 * started at a position p0 as generation does, against a double reference, the v heads left
 * alone, the backward as the forward's transpose and inverse; by per-token positions
 * (--reset-position-ids) likewise, and equal to the plain op bit for bit at positions t; on
 * CUDA each against the CPU. Rows: "rope" and "rope_pos" in op_cases.c. */
#include <math.h>
#include <stdlib.h>

#include "tests/ops/case.h"

/* cos/sin [T, hd/2] of HF's rotary embedding: angle t * theta^(-2i/hd). */
static void rope_tables(float *cos_t, float *sin_t, int T, int hd, double theta) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd / 2; i++) {
            const double a = t * pow(theta, -2.0 * i / hd);
            cos_t[t * (hd / 2) + i] = (float)cos(a);
            sin_t[t * (hd / 2) + i] = (float)sin(a);
        }
}

/* d = {B, T, nh, nkv, hd, p0}; param = theta. */
static void rope_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], P0 = c->d[5];
    const int row = (nh + 2 * nkv) * hd, h2 = hd / 2;
    const int64_t n = (int64_t)B * T * row, nt = (int64_t)(T + P0) * h2;
    lj_case_shape(x, "B=%d T=%d nh=%d nkv=%d hd=%d p0=%d", B, T, nh, nkv, hd, P0);
    float *cos_t = lj_case_zeros(x, nt), *sin_t = lj_case_zeros(x, nt);
    rope_tables(cos_t, sin_t, T + P0, hd, c->param);
    float *hx = lj_case_rand(x, n, 1.0f), *R = lj_case_rand(x, n, 1.0f);
    float *dcos = lj_case_upload(x, cos_t, nt, LJ_CASE_F32), *dsin = lj_case_upload(x, sin_t, nt, LJ_CASE_F32);
    const float *cp = dcos + (int64_t)P0 * h2, *sp = dsin + (int64_t)P0 * h2; /* start at position p0 */

    void *y = lj_case_upload(x, hx, n, LJ_CASE_ACT);
    ops->rope_forward(y, cp, sp, B, T, nh, nkv, hd);
    double *want = NULL;
    if (lj_case_reference(x)) {
        want = lj_case_to_double(x, hx, n);
        for (int64_t r = 0; r < (int64_t)B * T; r++)
            for (int hh = 0; hh < nh + nkv; hh++) /* q and k heads rotate; v heads stay */
                for (int i = 0; i < h2; i++) {
                    const int64_t o = r * row + (int64_t)hh * hd, t = r % T + P0;
                    const double cv = cos_t[t * h2 + i], sv = sin_t[t * h2 + i], x1 = hx[o + i], x2 = hx[o + i + h2];
                    want[o + i] = x1 * cv - x2 * sv;
                    want[o + i + h2] = x2 * cv + x1 * sv;
                }
    }
    lj_case_output(x, "rope_forward", y, n, LJ_CASE_ACT, want, LJ_CASE_TOL_OUT);
    const float *hy = lj_case_download(x, y, n, LJ_CASE_ACT);
    int v_same = 1;
    for (int64_t i = 0; i < n; i++)
        if ((i % row) >= (int64_t)(nh + nkv) * hd) v_same &= hy[i] == hx[i];
    lj_case_true(x, "rope_forward", v_same, "v heads unchanged");

    /* the backward is the transpose: <R, rope(x)> == <rope_backward(R), x> (the CPU's fp32
     * values; on CUDA the backward against the CPU's) */
    void *rb = lj_case_upload(x, R, n, LJ_CASE_ACT);
    ops->rope_backward(rb, cp, sp, B, T, nh, nkv, hd);
    lj_case_output(x, "rope_backward", rb, n, LJ_CASE_ACT, NULL, LJ_CASE_TOL_OUT);
    if (lj_case_reference(x)) {
        const float *hrb = lj_case_download(x, rb, n, LJ_CASE_ACT);
        double lhs = 0, rhs = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) {
            lhs += (double)R[i] * hy[i];
            rhs += (double)hrb[i] * hx[i];
            mag += fabs((double)R[i] * hy[i]);
        }
        lj_case_true(x, "rope_backward", fabs(lhs - rhs) <= 1e-6 * mag,
                     "<R, rope(x)> == <rope_backward(R), x>: %.9g vs %.9g", lhs, rhs);
    }
    /* and forward then backward gives x back */
    ops->rope_backward(y, cp, sp, B, T, nh, nkv, hd);
    lj_case_output(x, "rope_backward(rope_forward(x))", y, n, LJ_CASE_ACT,
                   lj_case_reference(x) ? lj_case_to_double(x, hx, n) : NULL, LJ_CASE_TOL_OUT);
}

void lj_case_rope(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) { lj_case_each(h, c, mode, rope_body); }

/* d = {B, T, nh, nkv, hd, mean document length}; param = theta: positions restart after each
 * EOD (data/docmask.h's rule). */
static void rope_pos_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], mean = c->d[5], h2 = hd / 2;
    const int row = (nh + 2 * nkv) * hd;
    const int64_t N = (int64_t)B * T, n = N * row, nt = (int64_t)T * h2;
    lj_case_shape(x, "B=%d T=%d nh=%d nkv=%d hd=%d doc~%d", B, T, nh, nkv, hd, mean);
    float *cos_t = lj_case_zeros(x, nt), *sin_t = lj_case_zeros(x, nt);
    rope_tables(cos_t, sin_t, T, hd, c->param);
    int32_t *tokens = (int32_t *)lj_case_zeros(x, N), *pos = (int32_t *)lj_case_zeros(x, N);
    int32_t *pos_t = (int32_t *)lj_case_zeros(x, N);
    lj_case_docmask_tokens(&x->h->rng, B, T, mean, tokens);
    lj_case_docmask_build(B, T, tokens, pos, NULL);
    for (int64_t r = 0; r < N; r++) pos_t[r] = (int32_t)(r % T);
    float *hx = lj_case_rand(x, n, 1.0f);
    void *dc = lj_case_upload(x, cos_t, nt, LJ_CASE_F32), *ds = lj_case_upload(x, sin_t, nt, LJ_CASE_F32);
    void *dp = lj_case_upload(x, pos, N, LJ_CASE_I32), *dpt = lj_case_upload(x, pos_t, N, LJ_CASE_I32);

    void *y = lj_case_upload(x, hx, n, LJ_CASE_ACT);
    ops->rope_forward_pos(y, dc, ds, dp, B, T, nh, nkv, hd);
    double *want = NULL;
    if (lj_case_reference(x)) { /* each row rotated by its own position; v heads unchanged */
        want = lj_case_to_double(x, hx, n);
        for (int64_t r = 0; r < N; r++)
            for (int hh = 0; hh < nh + nkv; hh++)
                for (int i = 0; i < h2; i++) {
                    const int64_t o = r * row + (int64_t)hh * hd;
                    const double cv = cos_t[pos[r] * h2 + i], sv = sin_t[pos[r] * h2 + i];
                    const double x1 = hx[o + i], x2 = hx[o + i + h2];
                    want[o + i] = x1 * cv - x2 * sv;
                    want[o + i + h2] = x2 * cv + x1 * sv;
                }
    }
    lj_case_output(x, "rope_forward_pos", y, n, LJ_CASE_ACT, want, LJ_CASE_TOL_OUT);
    void *bk = lj_case_upload(x, hx, n, LJ_CASE_ACT);
    ops->rope_backward_pos(bk, dc, ds, dp, B, T, nh, nkv, hd);
    lj_case_output(x, "rope_backward_pos", bk, n, LJ_CASE_ACT, NULL, LJ_CASE_TOL_OUT);
    ops->rope_backward_pos(y, dc, ds, dp, B, T, nh, nkv, hd);
    lj_case_output(x, "rope_backward_pos(rope_forward_pos(x))", y, n, LJ_CASE_ACT,
                   lj_case_reference(x) ? lj_case_to_double(x, hx, n) : NULL, LJ_CASE_TOL_OUT);
    /* positions 0..T-1 in every sequence: rope_forward / rope_backward, bit for bit (ops.h) */
    void *y2 = lj_case_upload(x, hx, n, LJ_CASE_ACT), *w2 = lj_case_upload(x, hx, n, LJ_CASE_ACT);
    ops->rope_forward_pos(y2, dc, ds, dpt, B, T, nh, nkv, hd);
    ops->rope_forward(w2, dc, ds, B, T, nh, nkv, hd);
    lj_case_twin(x, "rope_forward_pos at positions t == rope_forward", y2, w2, n, LJ_CASE_ACT, LJ_CASE_TOL_BITS);
    ops->rope_backward_pos(y2, dc, ds, dpt, B, T, nh, nkv, hd);
    ops->rope_backward(w2, dc, ds, B, T, nh, nkv, hd);
    lj_case_twin(x, "rope_backward_pos at positions t == rope_backward", y2, w2, n, LJ_CASE_ACT, LJ_CASE_TOL_BITS);
}

void lj_case_rope_pos(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, rope_pos_body);
}

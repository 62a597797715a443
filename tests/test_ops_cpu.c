/* test_ops_cpu.c: the CPU op table against double-precision references: memory entries,
 * embedding, RMSNorm (plain and fused with the residual add), matmul, RoPE, SwiGLU (fused and
 * unfused), cross-entropy (fused and unfused), the global norm and AdamW. Each backward is
 * checked against central finite differences of L = sum(out * R) (R random) taken on a
 * double-precision reference forward written here. Attention lives in test_ops_cpu_attention.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "ops/cpu/cpu.h"
#include "tests/test_util.h"

/* Forward values of an fp32 op against the double reference (relative L2 error). */
#define TOL_FWD 1e-5
/* Analytic fp32 gradients against finite differences of the double reference. */
#define TOL_GRAD 1e-4
#define FD_H 1e-5

static lj_rng g_rng;

static float *randf(int64_t n, float scale) { return lj_test_randf(&g_rng, n, scale); }

static double *to_double(const float *x, int64_t n) {
    double *d = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* ||a - b|| / ||b||, with a in float and b in double (b == 0 everywhere: ||a||). */
static double rel_err(const float *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double dot_fd(const double *a, const float *r, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * r[i];
    return s;
}

/* Central differences of loss(ctx) with respect to every element of p[n]. */
typedef double (*loss_fn)(void *ctx);
static double *fd_grad(loss_fn loss, void *ctx, double *p, int64_t n) {
    double *g = lj_malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        double keep = p[i];
        p[i] = keep + FD_H;
        double lp = loss(ctx);
        p[i] = keep - FD_H;
        double lm = loss(ctx);
        p[i] = keep;
        g[i] = (lp - lm) / (2 * FD_H);
    }
    return g;
}

static void check_rel(const char *what, const float *a, const double *b, int64_t n, double tol) {
    double e = rel_err(a, b, n);
    if (!(e <= tol)) fail_msg("%s: relative error %.3g above %.1g", what, e, tol);
}

/* ---- memory ------------------------------------------------------------------------- */

static void test_memory(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    assert_non_null(ops);
    assert_string_equal(ops->name, "cpu");
    assert_int_equal(ops->act_dtype, LJ_DTYPE_F32);
    size_t before = lj_ops_allocated_bytes();
    void *a, *b;
    assert_int_equal(ops->alloc(&a, 1000), LJ_OK);
    assert_int_equal(ops->alloc(&b, 13), LJ_OK);
    assert_true(((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0);
    assert_true(lj_ops_allocated_bytes() == before + 1013);
    float src[4] = {1, 2, 3, 4}, dst[4] = {0};
    ops->upload(a, src, sizeof src);
    ops->copy((char *)a + 16, a, 16);
    ops->download(dst, (char *)a + 16, 16);
    assert_true(memcmp(dst, src, 16) == 0);
    ops->memset_zero(a, 16);
    ops->download(dst, a, 16);
    assert_true(dst[0] == 0 && dst[3] == 0);
    uint16_t bf[3] = {lj_f32_to_bf16(1.5f), lj_f32_to_bf16(-2.0f), lj_f32_to_bf16(0.25f)};
    float back[3];
    ops->cast_to_f32(back, bf, LJ_DTYPE_BF16, 3);
    assert_true(back[0] == 1.5f && back[1] == -2.0f && back[2] == 0.25f);
    ops->cast_f32_to_param(dst, src, 4);
    assert_true(memcmp(dst, src, 16) == 0);
    ops->free(a);
    assert_true(lj_ops_allocated_bytes() == before + 13);
    ops->free(b);
    assert_true(lj_ops_allocated_bytes() == before);
    size_t free_b = 0, total_b = 0;
    assert_int_equal(ops->memory_info(&free_b, &total_b), LJ_OK);
    assert_true(total_b > 0 && free_b <= total_b);
}

/* ---- embedding ---------------------------------------------------------------------- */

static void test_embedding(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    const int N = 9, C = 70, V = 6; /* C spans two column blocks; ids repeat */
    int32_t ids[9] = {3, 0, 5, 3, 3, 1, 0, 5, 2};
    float *wte = randf((int64_t)V * C, 1), *out = randf((int64_t)N * C, 1);
    ops->embedding_forward(out, ids, wte, N, C);
    for (int n = 0; n < N; n++) assert_true(memcmp(out + n * C, wte + ids[n] * C, C * sizeof(float)) == 0);
    float *dout = randf((int64_t)N * C, 1), *dw = randf((int64_t)V * C, 1);
    double *want = to_double(dw, (int64_t)V * C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) want[ids[n] * C + c] += dout[n * C + c];
    ops->embedding_backward(dw, dout, ids, N, C, NULL);
    check_rel("embedding dwte", dw, want, (int64_t)V * C, 1e-6);
    free(wte), free(out), free(dout), free(dw), free(want);
}

/* ---- RMSNorm ------------------------------------------------------------------------ */

typedef struct {
    int N, C;
    double eps, *x, *w;
    const float *R;
} norm_ctx;

static void ref_rmsnorm(double *out, const double *x, const double *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < C; i++) ss += x[n * C + i] * x[n * C + i];
        double r = 1 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++) out[n * C + i] = w[i] * x[n * C + i] * r;
    }
}

static double norm_loss(void *p) {
    norm_ctx *c = p;
    double *o = lj_malloc((size_t)c->N * c->C * sizeof(double));
    ref_rmsnorm(o, c->x, c->w, c->N, c->C, c->eps);
    double l = dot_fd(o, c->R, (int64_t)c->N * c->C);
    free(o);
    return l;
}

static void check_rmsnorm(int N, int C) {
    const lj_ops *ops = lj_ops_cpu();
    const float eps = 1e-5f;
    int64_t NC = (int64_t)N * C;
    float *x = randf(NC, 1), *w = randf(C, 1), *out = randf(NC, 1), *rstd = randf(N, 1);
    for (int i = 0; i < C; i++) w[i] += 1.0f;
    ops->rmsnorm_forward(out, rstd, x, w, N, C, eps);
    norm_ctx c = {N, C, eps, to_double(x, NC), to_double(w, C), randf(NC, 1)};
    double *ref = lj_malloc(NC * sizeof(double));
    ref_rmsnorm(ref, c.x, c.w, N, C, eps);
    check_rel("rmsnorm forward", out, ref, NC, TOL_FWD);
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < C; i++) ss += c.x[n * C + i] * c.x[n * C + i];
        assert_true(fabs(rstd[n] - 1 / sqrt(ss / C + eps)) <= 1e-6 * rstd[n]);
    }
    /* backward accumulates into dx and dw: start from random values and subtract them */
    float *dx = randf(NC, 1), *dw = randf(C, 1);
    double *dx0 = to_double(dx, NC), *dw0 = to_double(dw, C);
    size_t wsb = ops->rmsnorm_backward_workspace_bytes(N, C);
    void *ws = lj_malloc(wsb ? wsb : 1);
    ops->rmsnorm_backward(dx, dw, c.R, x, w, rstd, N, C, LJ_GRAD_ACCUMULATE, ws);
    double *gx = fd_grad(norm_loss, &c, c.x, NC), *gw = fd_grad(norm_loss, &c, c.w, C);
    for (int64_t i = 0; i < NC; i++) gx[i] += dx0[i];
    for (int i = 0; i < C; i++) gw[i] += dw0[i];
    check_rel("rmsnorm dx", dx, gx, NC, TOL_GRAD);
    check_rel("rmsnorm dw", dw, gw, C, TOL_GRAD);
    /* overwrite mode: dw is written, whatever it held (NaN here); dx still accumulates */
    for (int i = 0; i < C; i++) dw[i] = NAN, gw[i] -= dw0[i];
    ops->rmsnorm_backward(dx, dw, c.R, x, w, rstd, N, C, LJ_GRAD_OVERWRITE, ws);
    check_rel("rmsnorm dw (overwrite mode)", dw, gw, C, TOL_GRAD);
    free(x), free(w), free(out), free(rstd), free(c.x), free(c.w), free((void *)c.R), free(ref);
    free(dx), free(dw), free(dx0), free(dw0), free(ws), free(gx), free(gw);
}

static void test_rmsnorm(void **state) {
    (void)state;
    check_rmsnorm(5, 16);
    check_rmsnorm(3, 77); /* two column blocks, an odd tail */
}

static void test_residual_rmsnorm_bit_exact(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    const int N = 13, C = 96;
    int64_t NC = (int64_t)N * C;
    float *a = randf(NC, 1), *y = randf(NC, 1), *w = randf(C, 1);
    float *res1 = randf(NC, 1), *out1 = randf(NC, 1), *rstd1 = randf(N, 1);
    float *res2 = randf(NC, 1), *out2 = randf(NC, 1), *rstd2 = randf(N, 1);
    ops->add(res1, a, y, NC);
    ops->rmsnorm_forward(out1, rstd1, res1, w, N, C, 1e-5f);
    /* fused, in place on the residual stream (res_out == res_in) */
    memcpy(res2, a, NC * sizeof(float));
    ops->residual_rmsnorm_forward(res2, out2, rstd2, res2, y, w, N, C, 1e-5f);
    assert_true(memcmp(res1, res2, NC * sizeof(float)) == 0);
    assert_true(memcmp(out1, out2, NC * sizeof(float)) == 0);
    assert_true(memcmp(rstd1, rstd2, N * sizeof(float)) == 0);
    for (int64_t i = 0; i < NC; i++) assert_true(res1[i] == a[i] + y[i]);
    free(a), free(y), free(w), free(res1), free(out1), free(rstd1), free(res2), free(out2), free(rstd2);
}

/* ---- matmul ------------------------------------------------------------------------- */

typedef struct {
    int N, IC, OC;
    double *x, *w;
    const float *R;
} mm_ctx;

static void ref_matmul(double *out, const double *x, const double *w, int N, int IC, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int i = 0; i < IC; i++) s += x[n * IC + i] * w[o * IC + i];
            out[n * OC + o] = s;
        }
}

static double mm_loss(void *p) {
    mm_ctx *c = p;
    double *o = lj_malloc((size_t)c->N * c->OC * sizeof(double));
    ref_matmul(o, c->x, c->w, c->N, c->IC, c->OC);
    double l = dot_fd(o, c->R, (int64_t)c->N * c->OC);
    free(o);
    return l;
}

static void test_matmul(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    const int N = 7, IC = 12, OC = 9;
    float *x = randf(N * IC, 1), *w = randf(OC * IC, 1), *out = randf(N * OC, 1);
    mm_ctx c = {N, IC, OC, to_double(x, N * IC), to_double(w, OC * IC), randf(N * OC, 1)};
    ops->matmul_forward(out, x, w, N, IC, OC);
    double *ref = lj_malloc(N * OC * sizeof(double));
    ref_matmul(ref, c.x, c.w, N, IC, OC);
    check_rel("matmul forward", out, ref, N * OC, TOL_FWD);
    double *gx = fd_grad(mm_loss, &c, c.x, N * IC), *gw = fd_grad(mm_loss, &c, c.w, OC * IC);
    /* overwrite dx, accumulate dw */
    float *dx = randf(N * IC, 1), *dw = randf(OC * IC, 1);
    double *dw_want = to_double(dw, OC * IC);
    for (int i = 0; i < OC * IC; i++) dw_want[i] += gw[i];
    ops->matmul_backward(dx, dw, c.R, x, w, N, IC, OC, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
    check_rel("matmul dx", dx, gx, N * IC, TOL_GRAD);
    check_rel("matmul dw (accumulated)", dw, dw_want, OC * IC, TOL_GRAD);
    /* accumulate_dx adds onto dx; a NULL dw is skipped */
    double *dx_want = to_double(dx, N * IC);
    for (int i = 0; i < N * IC; i++) dx_want[i] += gx[i];
    ops->matmul_backward(dx, NULL, c.R, x, w, N, IC, OC, LJ_GRAD_ACCUMULATE, LJ_GRAD_ACCUMULATE);
    check_rel("matmul dx (accumulated)", dx, dx_want, N * IC, TOL_GRAD);
    /* a NULL dx is skipped */
    for (int i = 0; i < OC * IC; i++) dw_want[i] += gw[i];
    ops->matmul_backward(NULL, dw, c.R, x, w, N, IC, OC, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
    check_rel("matmul dw (twice)", dw, dw_want, OC * IC, TOL_GRAD);
    /* overwrite mode: dw is written, whatever it held (NaN here) */
    for (int i = 0; i < OC * IC; i++) dw[i] = NAN;
    ops->matmul_backward(NULL, dw, c.R, x, w, N, IC, OC, LJ_GRAD_OVERWRITE, LJ_GRAD_OVERWRITE);
    check_rel("matmul dw (overwrite mode)", dw, gw, OC * IC, TOL_GRAD);
    free(x), free(w), free(out), free(c.x), free(c.w), free((void *)c.R), free(ref), free(gx), free(gw);
    free(dx), free(dw), free(dw_want), free(dx_want);
}

/* ---- RoPE --------------------------------------------------------------------------- */

static void rope_tables(float *cos_t, float *sin_t, int T, int hd, double theta) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd / 2; i++) {
            double inv_freq = 1.0 / pow(theta, 2.0 * i / hd), a = t * inv_freq;
            cos_t[t * hd / 2 + i] = (float)cos(a);
            sin_t[t * hd / 2 + i] = (float)sin(a);
        }
}

static void test_rope(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    const int B = 2, T = 11, nh = 4, nkv = 2, hd = 16, P0 = 3;
    const int row = (nh + 2 * nkv) * hd;
    int64_t n = (int64_t)B * T * row;
    float *cos_t = lj_malloc((T + P0) * hd / 2 * sizeof(float)), *sin_t = lj_malloc((T + P0) * hd / 2 * sizeof(float));
    rope_tables(cos_t, sin_t, T + P0, hd, 10000.0);
    float *x = randf(n, 1), *y = lj_malloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    /* start at position P0, as generation does */
    ops->rope_forward(y, cos_t + P0 * hd / 2, sin_t + P0 * hd / 2, B, T, nh, nkv, hd);
    double *want = to_double(x, n);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh + nkv; h++) /* q and k heads rotate; v heads stay */
                for (int i = 0; i < hd / 2; i++) {
                    int64_t o = ((int64_t)b * T + t) * row + h * hd;
                    double c = cos_t[(t + P0) * hd / 2 + i], s = sin_t[(t + P0) * hd / 2 + i];
                    double x1 = x[o + i], x2 = x[o + i + hd / 2];
                    want[o + i] = x1 * c - x2 * s;
                    want[o + i + hd / 2] = x2 * c + x1 * s;
                }
    check_rel("rope forward", y, want, n, 1e-6);
    for (int64_t i = 0; i < n; i++)
        if ((i % row) >= (nh + nkv) * hd) assert_true(y[i] == x[i]);
    /* the backward is the transpose: <R, rope(x)> == <rope_backward(R), x> */
    float *R = randf(n, 1), *Rb = lj_malloc(n * sizeof(float));
    memcpy(Rb, R, n * sizeof(float));
    ops->rope_backward(Rb, cos_t + P0 * hd / 2, sin_t + P0 * hd / 2, B, T, nh, nkv, hd);
    double lhs = 0, rhs = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        lhs += (double)R[i] * y[i];
        rhs += (double)Rb[i] * x[i];
        mag += fabs((double)R[i] * y[i]);
    }
    assert_true(fabs(lhs - rhs) <= 1e-6 * mag);
    /* and forward then backward gives x back */
    ops->rope_backward(y, cos_t + P0 * hd / 2, sin_t + P0 * hd / 2, B, T, nh, nkv, hd);
    double *xd = to_double(x, n);
    check_rel("rope backward(forward(x))", y, xd, n, 1e-6);
    free(cos_t), free(sin_t), free(x), free(y), free(want), free(R), free(Rb), free(xd);
}

/* ---- SwiGLU ------------------------------------------------------------------------- */

typedef struct {
    int N, I;
    double *gu;
    const float *R;
} swiglu_ctx;

static void ref_swiglu(double *out, const double *gu, int N, int I) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            double g = gu[(int64_t)n * 2 * I + i], u = gu[(int64_t)n * 2 * I + I + i];
            out[(int64_t)n * I + i] = g / (1 + exp(-g)) * u;
        }
}

static double swiglu_loss(void *p) {
    swiglu_ctx *c = p;
    double *o = lj_malloc((size_t)c->N * c->I * sizeof(double));
    ref_swiglu(o, c->gu, c->N, c->I);
    double l = dot_fd(o, c->R, (int64_t)c->N * c->I);
    free(o);
    return l;
}

static void test_swiglu(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    const int N = 6, I = 19;
    const int64_t NI = N * I;
    float *gu = randf(2 * NI, 2), *out = randf(NI, 1), *out2 = randf(NI, 1), *tmp = randf(NI, 1);
    swiglu_ctx c = {N, I, to_double(gu, 2 * NI), randf(NI, 1)};
    ops->swiglu_forward(out, gu, N, I);
    ops->swiglu_forward_unfused(out2, tmp, gu, N, I);
    assert_true(memcmp(out, out2, NI * sizeof(float)) == 0);
    double *ref = lj_malloc(NI * sizeof(double));
    ref_swiglu(ref, c.gu, N, I);
    check_rel("swiglu forward", out, ref, NI, TOL_FWD);
    float *d1 = randf(2 * NI, 1), *d2 = randf(2 * NI, 1);
    ops->swiglu_backward(d1, c.R, gu, N, I);
    ops->swiglu_backward_unfused(d2, tmp, c.R, gu, N, I);
    assert_true(memcmp(d1, d2, 2 * NI * sizeof(float)) == 0);
    double *g = fd_grad(swiglu_loss, &c, c.gu, 2 * NI);
    check_rel("swiglu dgate_up", d1, g, 2 * NI, TOL_GRAD);
    /* in place: dgate_up may alias gate_up */
    float *inplace = lj_malloc(2 * NI * sizeof(float));
    memcpy(inplace, gu, 2 * NI * sizeof(float));
    ops->swiglu_backward(inplace, c.R, inplace, N, I);
    assert_true(memcmp(inplace, d1, 2 * NI * sizeof(float)) == 0);
    memcpy(inplace, gu, 2 * NI * sizeof(float));
    ops->swiglu_backward_unfused(inplace, tmp, c.R, inplace, N, I);
    assert_true(memcmp(inplace, d1, 2 * NI * sizeof(float)) == 0);
    free(gu), free(out), free(out2), free(tmp), free(c.gu), free((void *)c.R), free(ref), free(d1), free(d2);
    free(g), free(inplace);
}

/* ---- cross-entropy ------------------------------------------------------------------ */

typedef struct {
    int N, C, V;
    double *x, *w, dloss;
    const int32_t *targets;
} ce_ctx;

/* sum_n dloss * (logsumexp(x_n w^T) - (x_n w^T)[t_n]) over rows with t_n >= 0; per-row
 * losses to `losses` when not NULL. */
static double ce_ref(ce_ctx *c, double *losses) {
    double *l = lj_malloc((size_t)c->V * sizeof(double)), total = 0;
    for (int n = 0; n < c->N; n++) {
        double loss = 0;
        if (c->targets[n] >= 0) {
            double m = -INFINITY, s = 0;
            for (int v = 0; v < c->V; v++) {
                l[v] = 0;
                for (int i = 0; i < c->C; i++) l[v] += c->x[(int64_t)n * c->C + i] * c->w[(int64_t)v * c->C + i];
                m = fmax(m, l[v]);
            }
            for (int v = 0; v < c->V; v++) s += exp(l[v] - m);
            loss = m + log(s) - l[c->targets[n]];
        }
        if (losses) losses[n] = loss;
        total += c->dloss * loss;
    }
    free(l);
    return total;
}

static double ce_loss(void *p) { return ce_ref(p, NULL); }

/* Fused against the unfused twin (matmul_forward, cross_entropy_forward_backward,
 * matmul_backward); returns the fused outputs through the pointers. */
static void check_ce_twins(const float *x, const float *w, const int32_t *targets, int N, int C, int V, float dloss,
                           float *losses, float *dx, float *dw) {
    const lj_ops *ops = lj_ops_cpu();
    void *ws = lj_malloc(ops->cross_entropy_fused_workspace_bytes(N, C, V));
    double *ref_dw = to_double(dw, (int64_t)V * C);
    ops->cross_entropy_fused(losses, dx, dw, x, w, targets, N, C, V, dloss, ws);
    float *logits = lj_malloc((size_t)N * V * sizeof(float)), *l2 = lj_malloc(N * sizeof(float));
    float *dx2 = lj_malloc((size_t)N * C * sizeof(float)), *dw2 = lj_calloc((size_t)V * C, sizeof(float));
    float *l3 = lj_malloc(N * sizeof(float));
    ops->matmul_forward(logits, x, w, N, C, V);
    ops->cross_entropy_forward_backward(l3, NULL, logits, targets, N, V, dloss); /* loss only */
    ops->cross_entropy_forward_backward(l2, logits, logits, targets, N, V, dloss); /* dlogits aliases logits */
    assert_true(memcmp(l2, l3, N * sizeof(float)) == 0);
    ops->matmul_backward(dx2, dw2, logits, x, w, N, C, V, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
    for (int n = 0; n < N; n++) assert_true(fabsf(losses[n] - l2[n]) <= 1e-6f * (1 + fabsf(l2[n])));
    double *ref_dx = to_double(dx2, (int64_t)N * C);
    check_rel("fused vs unfused dx", dx, ref_dx, (int64_t)N * C, 1e-6);
    for (int64_t i = 0; i < (int64_t)V * C; i++) ref_dw[i] += dw2[i];
    check_rel("fused vs unfused dw", dw, ref_dw, (int64_t)V * C, 1e-6);
    /* loss only: both gradients NULL, same losses */
    float *l4 = lj_malloc(N * sizeof(float));
    ops->cross_entropy_fused(l4, NULL, NULL, x, w, targets, N, C, V, dloss, ws);
    assert_true(memcmp(l4, losses, N * sizeof(float)) == 0);
    free(ws), free(logits), free(l2), free(dx2), free(dw2), free(l3), free(ref_dx), free(ref_dw), free(l4);
}

static void test_cross_entropy_fd(void **state) {
    (void)state;
    const int N = 6, C = 8, V = 23;
    const float dloss = 1.0f / 5; /* mean over the 5 counted rows */
    int32_t targets[6] = {3, -1, 22, 0, 7, 7};
    float *x = randf(N * C, 1), *w = randf(V * C, 1), *losses = randf(N, 1), *dx = randf(N * C, 1);
    float *dw = randf(V * C, 1);
    double *dw0 = to_double(dw, V * C);
    check_ce_twins(x, w, targets, N, C, V, dloss, losses, dx, dw);
    ce_ctx c = {N, C, V, to_double(x, N * C), to_double(w, V * C), dloss, targets};
    double ref_losses[6];
    ce_ref(&c, ref_losses);
    check_rel("cross-entropy losses", losses, ref_losses, N, TOL_FWD);
    assert_true(losses[1] == 0.0f);
    double *gx = fd_grad(ce_loss, &c, c.x, N * C), *gw = fd_grad(ce_loss, &c, c.w, V * C);
    for (int i = 0; i < V * C; i++) gw[i] += dw0[i];
    check_rel("cross-entropy dx", dx, gx, N * C, TOL_GRAD);
    check_rel("cross-entropy dw (accumulated)", dw, gw, V * C, TOL_GRAD);
    /* an ignored row gets a zero gradient */
    for (int i = 0; i < C; i++) assert_true(dx[1 * C + i] == 0.0f);
    free(x), free(w), free(losses), free(dx), free(dw), free(dw0), free(c.x), free(c.w), free(gx), free(gw);
}

static void test_cross_entropy_chunks(void **state) {
    (void)state;
    /* more rows than one chunk, so the fused op runs several chunks */
    const int N = LJ_CPU_CE_CHUNK_ROWS + 45, C = 16, V = 300;
    int32_t *targets = lj_malloc(N * sizeof(int32_t));
    for (int n = 0; n < N; n++) targets[n] = n % 17 == 5 ? -100 : (int32_t)lj_rng_below(&g_rng, V);
    float *x = randf((int64_t)N * C, 1), *w = randf((int64_t)V * C, 0.5f), *losses = lj_malloc(N * sizeof(float));
    float *dx = lj_malloc((size_t)N * C * sizeof(float)), *dw = lj_calloc((size_t)V * C, sizeof(float));
    check_ce_twins(x, w, targets, N, C, V, 1.0f / N, losses, dx, dw);
    ce_ctx c = {N, C, V, to_double(x, (int64_t)N * C), to_double(w, (int64_t)V * C), 1.0, targets};
    double *ref_losses = lj_malloc(N * sizeof(double));
    ce_ref(&c, ref_losses);
    check_rel("cross-entropy losses (chunks)", losses, ref_losses, N, TOL_FWD);
    free(targets), free(x), free(w), free(losses), free(dx), free(dw), free(c.x), free(c.w), free(ref_losses);
}

/* ---- optimizer ---------------------------------------------------------------------- */

static void test_global_norm(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    const int64_t n = 3 * LJ_CPU_NORM_CHUNK + 17;
    float *g = randf(n, 0.01f), out = 0, out2 = 0;
    void *ws = lj_malloc(ops->global_norm_workspace_bytes(n));
    ops->global_norm_sq(&out, g, n, ws);
    ops->global_norm_sq(&out2, g, n, ws);
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += (double)g[i] * g[i];
    assert_true(fabs(out - want) <= 1e-6 * want);
    assert_true(out == out2);
    free(g), free(ws);
}

/* A scalar double AdamW step (ops.h formula) over one element. */
static void adamw_ref(double *p, double *m, double *v, double g, double lr, double b1, double b2, double eps,
                      double wd, int t) {
    *m = b1 * *m + (1 - b1) * g;
    *v = b2 * *v + (1 - b2) * g * g;
    double mh = *m / (1 - pow(b1, t)), vh = *v / (1 - pow(b2, t));
    *p -= lr * (wd * *p + mh / (sqrt(vh) + eps));
}

static void check_adamw(float max_grad_norm, int separate_params, int expect_clipped) {
    const lj_ops *ops = lj_ops_cpu();
    const int64_t n = 1000;
    lj_adamw_segment seg[3] = {{0, 300, 0.1f}, {300, 200, 0.0f}, {500, 500, 0.01f}};
    float *master = randf(n, 1), *m = lj_calloc(n, sizeof(float)), *v = lj_calloc(n, sizeof(float));
    float *params = separate_params ? lj_calloc(n, sizeof(float)) : master;
    double *pr = to_double(master, n), *mr = lj_calloc(n, sizeof(double)), *vr = lj_calloc(n, sizeof(double));
    void *ws = lj_malloc(ops->global_norm_workspace_bytes(n));
    int clipped = 0;
    for (int t = 1; t <= 3; t++) {
        float *g = randf(n, 0.05f), norm_sq;
        ops->global_norm_sq(&norm_sq, g, n, ws);
        const float lr = 1e-2f;
        lj_adamw_hparams hp = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .max_grad_norm = max_grad_norm};
        float scalars[LJ_ADAMW_NUM_SCALARS]; /* the CPU backend's memory is host memory */
        lj_adamw_step_scalars(scalars, &hp, lr, t);
        ops->adamw_update(params, master, g, m, v, seg, 3, &hp, scalars, &norm_sq);
        double norm = 0;
        for (int64_t i = 0; i < n; i++) norm += (double)g[i] * g[i];
        norm = sqrt(norm);
        double clip = max_grad_norm > 0 ? fmin(1.0, max_grad_norm / (norm + 1e-6)) : 1.0;
        clipped |= clip < 1.0;
        for (int s = 0; s < 3; s++)
            for (int64_t i = seg[s].offset; i < seg[s].offset + seg[s].count; i++)
                adamw_ref(&pr[i], &mr[i], &vr[i], g[i] * clip, lr, hp.beta1, hp.beta2, hp.eps,
                          seg[s].weight_decay, t);
        free(g);
    }
    assert_int_equal(clipped, expect_clipped);
    check_rel("adamw params", master, pr, n, 1e-6);
    check_rel("adamw m", m, mr, n, 1e-6);
    check_rel("adamw v", v, vr, n, 1e-5);
    if (separate_params) assert_true(memcmp(params, master, n * sizeof(float)) == 0);
    free(master), free(m), free(v), free(pr), free(mr), free(vr), free(ws);
    if (separate_params) free(params);
}

static void test_adamw(void **state) {
    (void)state;
    check_adamw(0.0f, 0, 0);   /* no clipping */
    check_adamw(100.0f, 0, 0); /* clipping on but inactive (norm ~1.6) */
    check_adamw(0.5f, 1, 1);   /* clipping active; params != master receive a copy */
}

static void test_adamw_clip_inactive_equals_off(void **state) {
    (void)state;
    /* the inactive clip (scale 1) must give the same bits as no clipping */
    const lj_ops *ops = lj_ops_cpu();
    const int64_t n = 257;
    lj_adamw_segment seg = {0, n, 0.1f};
    float *p1 = randf(n, 1), *p2 = lj_malloc(n * sizeof(float)), *g = randf(n, 0.1f);
    memcpy(p2, p1, n * sizeof(float));
    float *m1 = lj_calloc(n, 4), *v1 = lj_calloc(n, 4), *m2 = lj_calloc(n, 4), *v2 = lj_calloc(n, 4), ns;
    void *ws = lj_malloc(ops->global_norm_workspace_bytes(n));
    ops->global_norm_sq(&ns, g, n, ws);
    lj_adamw_hparams hp = {0.9f, 0.999f, 1e-8f, 0.0f};
    float scalars[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(scalars, &hp, 1e-3f, 1);
    ops->adamw_update(p1, p1, g, m1, v1, &seg, 1, &hp, scalars, &ns);
    hp.max_grad_norm = 1e3f;
    ops->adamw_update(p2, p2, g, m2, v2, &seg, 1, &hp, scalars, &ns);
    assert_true(memcmp(p1, p2, n * sizeof(float)) == 0);
    free(p1), free(p2), free(g), free(m1), free(v1), free(m2), free(v2), free(ws);
}

int main(void) {
    lj_rng_seed(&g_rng, 20240801);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_residual_rmsnorm_bit_exact),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_cross_entropy_fd),
        cmocka_unit_test(test_cross_entropy_chunks),
        cmocka_unit_test(test_global_norm),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_adamw_clip_inactive_equals_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

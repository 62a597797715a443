/* cases_qwen_cpu.c: the CPU backend's Qwen ops (ops/cpu/qknorm.c): QK-norm, plain and fused
 * with RoPE, against a double-precision reference (check) and central finite differences of
 * L = sum(out * R) on that reference (grad); the fused twins bit for bit against the unfused
 * ops, in-place aliasing, the weight gradient's accumulate and overwrite modes (the projection
 * bias is written once for every backend: cases_bias.c). The comment above each function says
 * what its d[] entries are. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cpu.h"
#include "tests/ops/op_cases.h"

#define SHAPE(...) char shape[96]; snprintf(shape, sizeof shape, __VA_ARGS__)
#define CHECK_D(op, got, ref, n, tol) lj_harness_check_d(h, (op), shape, (got), (ref), (n), (tol))
#define CHECK_BITS(op, a, b, bytes) lj_harness_check_bits(h, (op), shape, (a), (b), (bytes))
#define CHECK_TRUE(op, cond, ...) lj_harness_check_true(h, (op), shape, (cond), __VA_ARGS__)

static float *randf(lj_harness *h, int64_t n, float scale) { return lj_harness_randf(h, n, scale); }

static float *copyf(const float *x, int64_t n) {
    float *y = lj_malloc((size_t)n * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* The fp32 RoPE tables of HF's default rope at base theta: [T, hd/2]. */
static void rope_tables(float *cos_t, float *sin_t, int T, int hd, double theta) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd / 2; i++) {
            double a = t * (1.0 / pow(theta, 2.0 * i / hd));
            cos_t[t * hd / 2 + i] = (float)cos(a);
            sin_t[t * hd / 2 + i] = (float)sin(a);
        }
}

typedef struct {
    int B, T, nh, nkv, hd, rope;
    double eps, *x, *w;
    const float *cos, *sin, *R;
} qk_ctx;

/* out = [rope](qk_norm(x)) in double: q heads use w[0:hd], k heads w[hd:2hd], v copied. */
static void ref_qk_norm(const qk_ctx *c, double *out) {
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

static double qk_loss(void *p) {
    qk_ctx *c = p;
    const int64_t n = (int64_t)c->B * c->T * (c->nh + 2 * c->nkv) * c->hd;
    double *o = lj_malloc((size_t)n * sizeof(double)), l = 0;
    ref_qk_norm(c, o);
    for (int64_t i = 0; i < n; i++) l += o[i] * c->R[i];
    free(o);
    return l;
}

/* ---- QK-norm, plain and fused with RoPE: d = {B, T, nh, nkv, hd}; param = eps ------------- */

void lj_case_cpu_qk_norm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    const lj_ops *ops = lj_ops_cpu();
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], N = B * T, heads = nh + nkv;
    const float eps = (float)c->param;
    SHAPE("B=%d T=%d nh=%d nkv=%d hd=%d", B, T, nh, nkv, hd);
    const int64_t n = (int64_t)N * (nh + 2 * nkv) * hd;
    float *cos_t = lj_malloc((size_t)T * hd / 2 * sizeof(float)), *sin_t = lj_malloc((size_t)T * hd / 2 * sizeof(float));
    rope_tables(cos_t, sin_t, T, hd, 10000.0);
    float *x = randf(h, n, 2), *w = randf(h, 2 * hd, 0.3f), *out = randf(h, n, 1), *rstd = randf(h, (int64_t)N * heads, 1);
    for (int i = 0; i < 2 * hd; i++) w[i] += 1.0f;
    qk_ctx qc = {B, T, nh, nkv, hd, 0, eps, lj_harness_to_double(x, n), lj_harness_to_double(w, 2 * hd), cos_t, sin_t,
                 randf(h, n, 1)};
    double *ref = lj_malloc((size_t)n * sizeof(double));
    if (mode == LJ_HARNESS_CHECK) {
        ops->qk_norm_forward(out, rstd, x, w, N, nh, nkv, hd, eps);
        ref_qk_norm(&qc, ref);
        CHECK_D("qk_norm_forward out", out, ref, n, c->tol);
        int rows_ok = 1;
        for (int r = 0; r < N; r++)
            for (int hh = 0; hh < heads; hh++) {
                double ss = 0;
                for (int i = 0; i < hd; i++) ss += qc.x[(int64_t)r * (nh + 2 * nkv) * hd + hh * hd + i] * qc.x[(int64_t)r * (nh + 2 * nkv) * hd + hh * hd + i];
                const double want = 1 / sqrt(ss / hd + eps);
                rows_ok &= fabs(rstd[(int64_t)r * heads + hh] - want) <= 1e-6 * want;
            }
        CHECK_TRUE("qk_norm_forward rstd", rows_ok, "rstd[n, head] == 1/sqrt(mean(x^2)+eps) on every head");
        int v_same = 1;
        for (int64_t i = 0; i < n; i++)
            if (i % ((int64_t)(nh + 2 * nkv) * hd) >= (int64_t)heads * hd) v_same &= out[i] == x[i];
        CHECK_TRUE("qk_norm_forward", v_same, "v heads copied");
        /* in place (out == x) gives the same bits */
        float *xi = copyf(x, n), *ri = randf(h, (int64_t)N * heads, 1);
        ops->qk_norm_forward(xi, ri, xi, w, N, nh, nkv, hd, eps);
        CHECK_BITS("qk_norm_forward in place", xi, out, (size_t)n * sizeof(float));
        /* fused with RoPE == qk_norm_forward then rope_forward, bit for bit */
        float *fused = randf(h, n, 1), *rf = randf(h, (int64_t)N * heads, 1);
        ops->rope_forward(out, cos_t, sin_t, B, T, nh, nkv, hd);
        ops->qk_norm_rope_forward(fused, rf, x, w, cos_t, sin_t, B, T, nh, nkv, hd, eps);
        CHECK_BITS("qk_norm_rope_forward vs qk_norm+rope", fused, out, (size_t)n * sizeof(float));
        CHECK_BITS("qk_norm_rope_forward rstd", rf, rstd, (size_t)N * heads * sizeof(float));
        qc.rope = 1;
        ref_qk_norm(&qc, ref);
        CHECK_D("qk_norm_rope_forward out", fused, ref, n, c->tol);
        /* the fused backward == rope_backward then qk_norm_backward (in place, as the model runs it) */
        float *d1 = randf(h, n, 1), *d2 = copyf(d1, n), *dw1 = randf(h, 2 * hd, 1), *dw2 = copyf(dw1, 2 * hd);
        ops->rope_backward(d1, cos_t, sin_t, B, T, nh, nkv, hd);
        ops->qk_norm_backward(d1, dw1, d1, x, w, rstd, N, nh, nkv, hd, LJ_GRAD_ACCUMULATE, NULL);
        ops->qk_norm_rope_backward(d2, dw2, d2, x, w, rstd, cos_t, sin_t, B, T, nh, nkv, hd, LJ_GRAD_ACCUMULATE, NULL);
        CHECK_BITS("qk_norm_rope_backward vs rope+qk_norm dx", d2, d1, (size_t)n * sizeof(float));
        CHECK_BITS("qk_norm_rope_backward vs rope+qk_norm dw", dw2, dw1, (size_t)2 * hd * sizeof(float));
        /* the weight gradient alone (dx NULL), out of place: dout is left as it was */
        float *d3 = copyf(d1, n), *d3c = copyf(d1, n), *dw3 = randf(h, 2 * hd, 1), *dw4 = copyf(dw3, 2 * hd);
        float *d4 = copyf(d1, n);
        ops->qk_norm_rope_backward(NULL, dw3, d3, x, w, rstd, cos_t, sin_t, B, T, nh, nkv, hd, LJ_GRAD_OVERWRITE, NULL);
        ops->qk_norm_rope_backward(d4, dw4, d4, x, w, rstd, cos_t, sin_t, B, T, nh, nkv, hd, LJ_GRAD_OVERWRITE, NULL);
        CHECK_BITS("qk_norm_rope_backward without dx: dw", dw3, dw4, (size_t)2 * hd * sizeof(float));
        CHECK_BITS("qk_norm_rope_backward without dx: dout untouched", d3, d3c, (size_t)n * sizeof(float));
        free(d3), free(d3c), free(dw3), free(dw4), free(d4);
        free(xi), free(ri), free(fused), free(rf), free(d1), free(d2), free(dw1), free(dw2);
    } else {
        ops->qk_norm_forward(out, rstd, x, w, N, nh, nkv, hd, eps);
        size_t wsb = ops->qk_norm_backward_workspace_bytes(N, nh, nkv, hd);
        void *ws = lj_malloc(wsb ? wsb : 1);
        for (int fused = 0; fused <= 1; fused++) {
            qc.rope = fused;
            /* dx overwrites (NaN before); dw accumulates onto random values, then overwrites NaN */
            float *dx = lj_malloc((size_t)n * sizeof(float)), *dw = randf(h, 2 * hd, 1);
            for (int64_t i = 0; i < n; i++) dx[i] = NAN;
            double *dw0 = lj_harness_to_double(dw, 2 * hd);
            if (fused)
                ops->qk_norm_rope_backward(dx, dw, qc.R, x, w, rstd, cos_t, sin_t, B, T, nh, nkv, hd, LJ_GRAD_ACCUMULATE,
                                           ws);
            else
                ops->qk_norm_backward(dx, dw, qc.R, x, w, rstd, N, nh, nkv, hd, LJ_GRAD_ACCUMULATE, ws);
            double *gx = lj_harness_fd_grad(qk_loss, &qc, qc.x, n), *gw = lj_harness_fd_grad(qk_loss, &qc, qc.w, 2 * hd);
            for (int i = 0; i < 2 * hd; i++) gw[i] += dw0[i];
            CHECK_D(fused ? "qk_norm_rope_backward dx" : "qk_norm_backward dx", dx, gx, n, c->tol_grad);
            CHECK_D(fused ? "qk_norm_rope_backward dw (+=)" : "qk_norm_backward dw (+=)", dw, gw, 2 * hd, c->tol_grad);
            for (int i = 0; i < 2 * hd; i++) dw[i] = NAN, gw[i] -= dw0[i];
            if (fused)
                ops->qk_norm_rope_backward(dx, dw, qc.R, x, w, rstd, cos_t, sin_t, B, T, nh, nkv, hd, LJ_GRAD_OVERWRITE,
                                           ws);
            else
                ops->qk_norm_backward(dx, dw, qc.R, x, w, rstd, N, nh, nkv, hd, LJ_GRAD_OVERWRITE, ws);
            CHECK_D(fused ? "qk_norm_rope_backward dw (overwrite mode)" : "qk_norm_backward dw (overwrite mode)", dw, gw,
                    2 * hd, c->tol_grad);
            free(dx), free(dw), free(dw0), free(gx), free(gw);
        }
        free(ws);
    }
    free(cos_t), free(sin_t), free(x), free(w), free(out), free(rstd), free(qc.x), free(qc.w), free((void *)qc.R);
    free(ref);
}

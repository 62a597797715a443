/* cases_cpu.c: the cases of the CPU only: what has no op to run on another backend (the FP8
 * codec of base/fp8.h, which the CPU's emulation is built on, against a nearest-value search; the
 * backend's building blocks of ops/cpu/cpu.h: the split sgemm, the vectorizable exp, the
 * fixed-lane reductions, the sgemm rate probe, thread-count independence) and the AdamW case, not
 * yet written once for every backend as cases_<op>.c are (against a double-precision reference
 * written here). The shapes come from the case table (op_cases.c); the comment above each
 * function says what its d[] entries are. */
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

/* ---- AdamW: d = {separate_params, expect_clipped}; param = max_grad_norm; three steps over
 * three segments of 1000 elements ------------------------------------------------------- */

/* A scalar double AdamW step (ops.h formula) over one element. */
/* ---- the FP8 codec (base/fp8.h), the base of the CPU's emulation ----------------------- */

/* The code nearest to x among the finite codes of `fmt`, ties to the code with an even mantissa
 * LSB; beyond the largest finite magnitude, +-max (satfinite); NaN -> 0x7F. */
static uint8_t nearest_code(float x, lj_fp8_format fmt) {
    if (isnan(x)) return 0x7F;
    if (fabsf(x) >= lj_fp8_max(fmt)) /* (also where a double distance could no longer tell codes apart) */
        return (uint8_t)((signbit(x) ? 0x80 : 0) | (fmt == LJ_FP8_E4M3 ? 0x7E : 0x7B));
    int best = -1;
    double bd = INFINITY;
    for (int c = 0; c < 256; c++) {
        const float v = lj_fp8_to_f32((uint8_t)c, fmt);
        if (!isfinite(v) || (signbit(v) != signbit(x))) continue;
        const double d = fabs((double)v - (double)x);
        if (d < bd || (d == bd && (c & 1) == 0)) bd = d, best = c;
    }
    return (uint8_t)best;
}

/* d = {random values}; param unused. Every code round-trips; every bf16 value and random fp32
 * values (normal, subnormal range, beyond max, exact ties) cast to the nearest code. */
void lj_case_cpu_fp8_format(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    SHAPE("n=%d", c->d[0]);
    static const char *ops_name[2] = {"fp8 e4m3", "fp8 e5m2"};
    for (int f = 0; f < 2; f++) {
        const lj_fp8_format fmt = (lj_fp8_format)f;
        const char *op = ops_name[f];
        CHECK_TRUE(op, lj_fp8_to_f32(fmt == LJ_FP8_E4M3 ? 0x7E : 0x7B, fmt) == lj_fp8_max(fmt), "largest code is %g",
                   (double)lj_fp8_max(fmt));
        CHECK_TRUE(op, lj_fp8_to_f32(1, fmt) == ldexpf(1.0f, fmt == LJ_FP8_E4M3 ? -9 : -16), "smallest subnormal");
        int roundtrip = 1;
        for (int code = 0; code < 256; code++) {
            const float v = lj_fp8_to_f32((uint8_t)code, fmt);
            if (isnan(v)) continue;
            const uint8_t back = lj_fp8_from_f32(v, fmt);
            const int inf = isinf(v); /* E5M2's infinities saturate */
            roundtrip &= inf ? back == (uint8_t)((code & 0x80) | (fmt == LJ_FP8_E4M3 ? 0x7E : 0x7B)) : back == code;
        }
        CHECK_TRUE(op, roundtrip, "every finite code round-trips, infinities saturate");
        CHECK_TRUE(op, lj_fp8_from_f32(NAN, fmt) == 0x7F, "NaN -> 0x7F");
        CHECK_TRUE(op, lj_fp8_from_f32(1e30f, fmt) == (fmt == LJ_FP8_E4M3 ? 0x7E : 0x7B), "1e30 saturates to max");
        CHECK_TRUE(op, lj_fp8_from_f32(-INFINITY, fmt) == (fmt == LJ_FP8_E4M3 ? 0xFE : 0xFB), "-inf saturates to -max");
        CHECK_TRUE(op, lj_fp8_from_f32(-0.0f, fmt) == 0x80, "-0 keeps its sign");
        /* ties: 1 + half a step rounds to 1 (even), 1 + 3 half steps to 1 + 2 steps */
        const float step = fmt == LJ_FP8_E4M3 ? 0.125f : 0.25f;
        CHECK_TRUE(op, lj_fp8_to_f32(lj_fp8_from_f32(1.0f + step / 2, fmt), fmt) == 1.0f, "tie to even (down)");
        CHECK_TRUE(op, lj_fp8_to_f32(lj_fp8_from_f32(1.0f + 1.5f * step, fmt), fmt) == 1.0f + 2 * step,
                   "tie to even (up)");
        int bad = 0, first_bad = -1;
        for (int b = 0; b < 65536; b++) { /* every bf16 value */
            const float x = lj_bf16_to_f32((uint16_t)b);
            if (lj_fp8_from_f32(x, fmt) != nearest_code(x, fmt)) {
                if (first_bad < 0) first_bad = b;
                bad++;
            }
        }
        CHECK_TRUE(op, bad == 0, "every bf16 value casts to the nearest code (%d differ, first bf16 0x%04x)", bad,
                   first_bad);
        bad = 0;
        for (int i = 0; i < c->d[0]; i++) {
            const float x = ldexpf((float)lj_rng_normal(&h->rng), (int)lj_rng_below(&h->rng, 44) - 24);
            bad += lj_fp8_from_f32(x, fmt) != nearest_code(x, fmt);
        }
        CHECK_TRUE(op, bad == 0, "random fp32 values cast to the nearest code (%d differ)", bad);
    }
}

/* ---- building blocks (ops/cpu/cpu.h) ------------------------------------------------- */

/* Sets OMP_NUM_THREADS to `threads` (lj_num_threads reads it on every call) until
 * threads_pop restores the previous value. */
static char g_saved_threads[32];
static void threads_push(int threads) {
    const char *old = getenv("OMP_NUM_THREADS");
    snprintf(g_saved_threads, sizeof g_saved_threads, "%s", old ? old : "");
    char buf[16];
    snprintf(buf, sizeof buf, "%d", threads);
    setenv("OMP_NUM_THREADS", buf, 1);
}
static void threads_pop(void) {
    if (g_saved_threads[0])
        setenv("OMP_NUM_THREADS", g_saved_threads, 1);
    else
        unsetenv("OMP_NUM_THREADS");
}

/* C[M,N] = alpha op(A) op(B) + beta C in double, row-major. */
static void ref_gemm(int ta, int tb, int M, int N, int K, double alpha, const float *A, int lda, const float *B,
                     int ldb, double beta, const float *C0, double *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(int64_t)k * lda + i] : A[(int64_t)i * lda + k];
                double b = tb ? B[(int64_t)j * ldb + k] : B[(int64_t)k * ldb + j];
                s += a * b;
            }
            C[(int64_t)i * ldc + j] = alpha * s + beta * C0[(int64_t)i * ldc + j];
        }
}

/* lj_cpu_sgemm (alpha 0.5) in every transpose combination on 1, 2 and 3 threads:
 * d = {M, N, K}; param = beta. fp32 accumulation over K terms: the error grows like sqrt(K)
 * ulp, so the tolerance is 2e-7 sqrt(K). */
void lj_case_cpu_sgemm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const int M = c->d[0], N = c->d[1], K = c->d[2];
    const float beta = (float)c->param;
    const int threads[3] = {1, 2, 3};
    for (int th = 0; th < 3; th++) {
        threads_push(threads[th]);
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                SHAPE("ta=%d tb=%d %dx%dx%d beta=%g threads=%d", ta, tb, M, N, K, beta, threads[th]);
                int lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
                float *A = randf(h, (int64_t)(ta ? K : M) * lda, 1), *B = randf(h, (int64_t)(tb ? N : K) * ldb, 1);
                float *C = randf(h, (int64_t)M * ldc, 1), *C0 = lj_malloc((size_t)M * ldc * sizeof(float));
                memcpy(C0, C, (size_t)M * ldc * sizeof(float));
                double *want = lj_malloc((size_t)M * ldc * sizeof(double));
                ref_gemm(ta, tb, M, N, K, 0.5, A, lda, B, ldb, beta, C0, want, ldc);
                lj_cpu_sgemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, beta, C, ldc);
                CHECK_D("lj_cpu_sgemm", C, want, (int64_t)M * ldc, lj_harness_tol_l2(c->tol.rel_l2 * sqrt((double)K)));
                free(A), free(B), free(C), free(C0), free(want);
            }
        threads_pop();
    }
}

/* lj_cpu_expf against libm over [-87, 88] (no shape). */
void lj_case_cpu_expf(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)c, (void)mode;
    SHAPE("x in [-87, 88] step 0.00173");
    double worst = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.00173f) {
        double want = exp((double)x), rel = fabs(lj_cpu_expf(x) - want) / want;
        worst = rel > worst ? rel : worst;
    }
    CHECK_TRUE("lj_cpu_expf", worst <= 2.4e-7, "worst relative error %.3g <= 2.4e-7 (2 ulp)", worst);
    CHECK_TRUE("lj_cpu_expf", lj_cpu_expf(0.0f) == 1.0f, "expf(0) == 1");
    CHECK_TRUE("lj_cpu_expf", lj_cpu_expf(-87.5f) == 0.0f, "expf(-87.5) == 0");
    CHECK_TRUE("lj_cpu_expf", lj_cpu_expf(-INFINITY) == 0.0f, "expf(-inf) == 0");
    CHECK_TRUE("lj_cpu_expf", isnan(lj_cpu_expf(NAN)), "expf(NaN) is NaN");
}

/* lj_cpu_max, lj_cpu_sum_f64 and lj_cpu_dot_f64 against plain loops: d = {n}. */
void lj_case_cpu_lane_reductions(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const int n = c->d[0];
    SHAPE("n=%d", n);
    float *x = randf(h, n, 1), *y = randf(h, n, 1);
    double s = 0, d = 0;
    float m = x[0];
    for (int i = 0; i < n; i++) {
        s += x[i];
        d += (double)x[i] * y[i];
        m = x[i] > m ? x[i] : m;
    }
    CHECK_TRUE("lj_cpu_max", lj_cpu_max(x, n) == m, "max over %d", n);
    CHECK_TRUE("lj_cpu_sum_f64", fabs(lj_cpu_sum_f64(x, n) - s) <= 1e-12 * n, "sum within 1e-12 n");
    CHECK_TRUE("lj_cpu_dot_f64", fabs(lj_cpu_dot_f64(x, y, n) - d) <= 1e-12 * n, "dot within 1e-12 n");
    CHECK_TRUE("lj_cpu_max", lj_cpu_max(x + 3, 5) == fmaxf(fmaxf(fmaxf(x[3], x[4]), fmaxf(x[5], x[6])), x[7]),
               "max over 5 (below one lane group)");
    free(x), free(y);
}

/* lj_cpu_sgemm_gflops: d = {n}; a positive rate for n, 0 for n = 0. */
void lj_case_cpu_sgemm_probe(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    SHAPE("n=%d", c->d[0]);
    double r = lj_cpu_sgemm_gflops(c->d[0]);
    CHECK_TRUE("lj_cpu_sgemm_gflops", r > 0.0, "%.1f GFLOP/s > 0", r);
    CHECK_TRUE("lj_cpu_sgemm_gflops", lj_cpu_sgemm_gflops(0) == 0.0, "0 for n = 0");
}

/* Attention, RMSNorm, SwiGLU and the cross-entropy rows partition work by rows or heads, never
 * a reduction: the bits do not depend on the thread count (1, 2, 3).
 * d = {B, T, nh, nkv, hd}; C = 48, I = 40, V = 97. */
void lj_case_cpu_thread_count(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = lj_ops_cpu();
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], C = 48, I = 40, V = 97;
    SHAPE("B=%d T=%d nh=%d nkv=%d hd=%d", B, T, nh, nkv, hd);
    const int N = B * T, QKV = (nh + 2 * nkv) * hd, Q = nh * hd;
    float *qkv = randf(h, (int64_t)N * QKV, 1), *x = randf(h, (int64_t)N * C, 1), *w = randf(h, C, 1);
    float *gu = randf(h, (int64_t)N * 2 * I, 1), *logits = randf(h, (int64_t)N * V, 3);
    int32_t *targets = lj_malloc(N * sizeof(int32_t));
    for (int n = 0; n < N; n++) targets[n] = n % 5 == 0 ? -1 : (int32_t)lj_rng_below(&h->rng, V);
    size_t out_floats = (size_t)N * Q + (size_t)B * nh * T + (size_t)N * QKV + (size_t)N * C + N + (size_t)N * C +
                        (size_t)N * I + (size_t)N * 2 * I + N + (size_t)N * V;
    float *res[3];
    for (int t = 0; t < 3; t++) {
        threads_push(t + 1);
        float *o = res[t] = lj_calloc(out_floats, sizeof(float));
        void *ws = lj_malloc(ops->attention_workspace_bytes(B, T, nh, nkv, hd));
        float *att = o, *lse = att + (size_t)N * Q, *dqkv = lse + (size_t)B * nh * T, *ln = dqkv + (size_t)N * QKV;
        float *rstd = ln + (size_t)N * C, *dx = rstd + N, *act = dx + (size_t)N * C, *dgu = act + (size_t)N * I;
        float *losses = dgu + (size_t)N * 2 * I, *dl = losses + N;
        ops->attention_forward(att, lse, qkv, B, T, nh, nkv, hd, ws);
        ops->attention_backward(dqkv, att, qkv, att, lse, B, T, nh, nkv, hd, ws);
        ops->rmsnorm_forward(ln, rstd, x, w, N, C, 1e-5f);
        ops->rmsnorm_backward(dx, NULL, ln, x, w, rstd, N, C, LJ_GRAD_ACCUMULATE, NULL);
        ops->swiglu_forward(act, gu, N, I);
        ops->swiglu_backward(dgu, act, gu, N, I);
        ops->cross_entropy_forward_backward(losses, dl, logits, targets, N, V, 0.01f);
        free(ws);
        threads_pop();
    }
    CHECK_BITS("thread count: 1 vs 2 threads", res[0], res[1], out_floats * sizeof(float));
    CHECK_BITS("thread count: 1 vs 3 threads", res[0], res[2], out_floats * sizeof(float));
    free(qkv), free(x), free(w), free(gu), free(logits), free(targets), free(res[0]), free(res[1]), free(res[2]);
}

/* test_ops_cpu_kernels.c: the CPU backend's building blocks (ops/cpu/cpu.h): the split
 * sgemm in every transpose combination and split direction against a double reference, the
 * vectorizable exp against libm, the fixed-lane reductions, the sgemm rate probe, and that
 * the row-parallel ops give the same bits for 1, 2 and 3 threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "ops/cpu/cpu.h"
#include "tests/test_util.h"

static lj_rng g_rng;

static float *randf(int64_t n, float scale) { return lj_test_randf(&g_rng, n, scale); }

/* Runs the calling test's body with OMP_NUM_THREADS set to `threads` (lj_num_threads reads
 * it on every call), restoring the previous value afterwards. */
static char g_saved_threads[32];
static void threads_push(int threads) {
    const char *old = getenv("OMP_NUM_THREADS");
    snprintf(g_saved_threads, sizeof g_saved_threads, "%s", old ? old : "");
    char buf[16];
    snprintf(buf, sizeof buf, "%d", threads);
    setenv("OMP_NUM_THREADS", buf, 1);
}
static void threads_pop(void) {
    if (g_saved_threads[0]) setenv("OMP_NUM_THREADS", g_saved_threads, 1);
    else unsetenv("OMP_NUM_THREADS");
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

static void check_gemm(int ta, int tb, int M, int N, int K, float beta) {
    int lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
    float *A = randf((int64_t)(ta ? K : M) * lda, 1), *B = randf((int64_t)(tb ? N : K) * ldb, 1);
    float *C = randf((int64_t)M * ldc, 1), *C0 = lj_malloc((size_t)M * ldc * sizeof(float));
    memcpy(C0, C, (size_t)M * ldc * sizeof(float));
    double *want = lj_malloc((size_t)M * ldc * sizeof(double));
    ref_gemm(ta, tb, M, N, K, 0.5, A, lda, B, ldb, beta, C0, want, ldc);
    lj_cpu_sgemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, beta, C, ldc);
    double num = 0, den = 0;
    for (int64_t i = 0; i < (int64_t)M * ldc; i++) {
        num += (C[i] - want[i]) * (C[i] - want[i]);
        den += want[i] * want[i];
    }
    /* fp32 accumulation over K terms: error grows like sqrt(K) ulp */
    if (!(sqrt(num / den) <= 2e-7 * sqrt((double)K)))
        fail_msg("sgemm ta=%d tb=%d %dx%dx%d beta=%g: relative error %.3g", ta, tb, M, N, K, beta, sqrt(num / den));
    free(A), free(B), free(C), free(C0), free(want);
}

static void test_sgemm_split(void **state) {
    (void)state;
    const int threads[3] = {1, 2, 3};
    for (int t = 0; t < 3; t++) {
        threads_push(threads[t]);
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                check_gemm(ta, tb, 203, 37, 61, 0.0f);  /* split by rows */
                check_gemm(ta, tb, 19, 333, 50, 1.0f);  /* split by 16-column blocks, odd tail */
                check_gemm(ta, tb, 5, 7, 3, 1.0f);      /* below the split threshold */
                check_gemm(ta, tb, 2, 40, 4000, 0.0f);  /* long K, only 3 column blocks */
            }
        threads_pop();
    }
}

static void test_expf(void **state) {
    (void)state;
    double worst = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.00173f) {
        double want = exp((double)x), rel = fabs(lj_cpu_expf(x) - want) / want;
        worst = rel > worst ? rel : worst;
    }
    if (!(worst <= 2.4e-7)) fail_msg("lj_cpu_expf: worst relative error %.3g above 2 ulp", worst);
    assert_true(lj_cpu_expf(0.0f) == 1.0f);
    assert_true(lj_cpu_expf(-87.5f) == 0.0f);
    assert_true(lj_cpu_expf(-INFINITY) == 0.0f);
    assert_true(isnan(lj_cpu_expf(NAN)));
}

static void test_lane_reductions(void **state) {
    (void)state;
    const int n = 1000 + 7;
    float *x = randf(n, 1), *y = randf(n, 1);
    double s = 0, d = 0;
    float m = x[0];
    for (int i = 0; i < n; i++) {
        s += x[i];
        d += (double)x[i] * y[i];
        m = x[i] > m ? x[i] : m;
    }
    assert_true(lj_cpu_max(x, n) == m);
    assert_true(fabs(lj_cpu_sum_f64(x, n) - s) <= 1e-12 * n);
    assert_true(fabs(lj_cpu_dot_f64(x, y, n) - d) <= 1e-12 * n);
    assert_true(lj_cpu_max(x + 3, 5) == fmaxf(fmaxf(fmaxf(x[3], x[4]), fmaxf(x[5], x[6])), x[7]));
    free(x), free(y);
}

static void test_sgemm_probe(void **state) {
    (void)state;
    assert_true(lj_cpu_sgemm_gflops(128) > 0.0);
    assert_true(lj_cpu_sgemm_gflops(0) == 0.0);
}

/* Attention, RMSNorm, SwiGLU and the cross-entropy rows partition work by rows or heads, never
 * a reduction: the bits do not depend on the thread count. */
static void test_thread_count_independence(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    const int B = 2, T = 19, nh = 4, nkv = 2, hd = 16, C = 48, I = 40, V = 97;
    const int N = B * T, QKV = (nh + 2 * nkv) * hd, Q = nh * hd;
    float *qkv = randf((int64_t)N * QKV, 1), *x = randf((int64_t)N * C, 1), *w = randf(C, 1);
    float *gu = randf((int64_t)N * 2 * I, 1), *logits = randf((int64_t)N * V, 3);
    int32_t *targets = lj_malloc(N * sizeof(int32_t));
    for (int n = 0; n < N; n++) targets[n] = n % 5 == 0 ? -1 : (int32_t)lj_rng_below(&g_rng, V);
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
    assert_true(memcmp(res[0], res[1], out_floats * sizeof(float)) == 0);
    assert_true(memcmp(res[0], res[2], out_floats * sizeof(float)) == 0);
    free(qkv), free(x), free(w), free(gu), free(logits), free(targets), free(res[0]), free(res[1]), free(res[2]);
}

int main(void) {
    lj_rng_seed(&g_rng, 99);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgemm_split),
        cmocka_unit_test(test_expf),
        cmocka_unit_test(test_lane_reductions),
        cmocka_unit_test(test_sgemm_probe),
        cmocka_unit_test(test_thread_count_independence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* matmul.c: the CPU backend's GEMM (OpenBLAS sgemm, split over the OpenMP threads), the
 * linear layer (out = x W^T and its backward) built on it, and the sgemm rate probe used by
 * the CPU benchmark. */
#include "ops/cpu/cpu.h"

#include <math.h>

#include <cblas.h>
#include <omp.h>

/* Why split the GEMM ourselves: with OpenBLAS's own thread pool next to OpenMP's, the
 * OpenBLAS workers keep spinning after each call and steal cores from the OpenMP region
 * that follows (a 0.3 ms RMSNorm took 8-12 ms after a GEMM on a 2-core machine). One pool
 * serves both: OpenBLAS runs single-threaded and each OpenMP thread multiplies one block. */
void lj_cpu_blas_init(void) { openblas_set_num_threads(1); }

/* Below this many multiply-adds a GEMM runs on the calling thread. */
#define LJ_CPU_GEMM_SPLIT_MIN (1 << 18)
/* At most this many concurrent sgemm calls: a pthread OpenBLAS build keeps a fixed pool of
 * per-call buffers (2 x its compile-time thread limit) and aborts when it runs out. */
#define LJ_CPU_GEMM_MAX_SPLIT 32

void lj_cpu_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc) {
    const enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    int nt = lj_cpu_num_threads();
    if (M <= 0 || N <= 0) return;
    if (nt <= 1 || (int64_t)M * N * K < LJ_CPU_GEMM_SPLIT_MIN) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* split the larger of M (rows of C) and N (columns, in multiples of 16 = 64 bytes) */
    int by_rows = M >= N, unit = by_rows ? 1 : 16, units = by_rows ? M : (N + 15) / 16;
    if (nt > units) nt = units;
    if (nt > LJ_CPU_GEMM_MAX_SPLIT) nt = LJ_CPU_GEMM_MAX_SPLIT;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), parts = omp_get_num_threads();
        int u0 = (int)((int64_t)units * t / parts), u1 = (int)((int64_t)units * (t + 1) / parts);
        int i0 = u0 * unit, i1 = u1 * unit;
        if (by_rows) {
            const float *a = A + (trans_a ? (int64_t)i0 : (int64_t)i0 * lda);
            if (i1 > i0)
                cblas_sgemm(CblasRowMajor, ta, tb, i1 - i0, N, K, alpha, a, lda, B, ldb, beta, C + (int64_t)i0 * ldc,
                            ldc);
        } else {
            if (i1 > N) i1 = N;
            if (i1 > i0)
                cblas_sgemm(CblasRowMajor, ta, tb, M, i1 - i0, K, alpha, A, lda,
                            B + (trans_b ? (int64_t)i0 * ldb : (int64_t)i0), ldb, beta, C + i0, ldc);
        }
    }
}

/* out[N,OC] = x[N,IC] w[OC,IC]^T. */
void lj_cpu_matmul_forward(void *out, const void *x, const void *w, int N, int IC, int OC) {
    lj_cpu_sgemm(0, 1, N, OC, IC, 1.0f, x, IC, w, IC, 0.0f, out, OC);
}

/* dx[N,IC] (= or +=, dx_mode) dout[N,OC] w[OC,IC]; dw[OC,IC] (+= or =, dw_mode) dout^T x. */
void lj_cpu_matmul_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, int N, int IC, int OC,
                            lj_grad_mode dx_mode, lj_grad_mode dw_mode) {
    if (dx) lj_cpu_sgemm(0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, dx_mode == LJ_GRAD_ACCUMULATE ? 1.0f : 0.0f, dx, IC);
    if (dw) lj_cpu_sgemm(1, 0, OC, IC, N, 1.0f, dout, OC, x, IC, dw_mode == LJ_GRAD_ACCUMULATE ? 1.0f : 0.0f, dw, IC);
}

double lj_cpu_sgemm_gflops(int n) {
    if (n <= 0) return 0.0;
    size_t count = (size_t)n * (size_t)n;
    float *a = malloc(count * sizeof(float)), *b = malloc(count * sizeof(float)), *c = malloc(count * sizeof(float));
    double gflops = 0.0;
    lj_cpu_blas_init();
    if (a && b && c) {
        lj_rng rng;
        lj_rng_seed(&rng, 1);
        for (size_t i = 0; i < count; i++) {
            a[i] = lj_rng_uniform(&rng) - 0.5f;
            b[i] = lj_rng_uniform(&rng) - 0.5f;
        }
        lj_cpu_matmul_forward(c, a, b, n, n, n); /* warm-up: thread pool start, page faults */
        /* the fastest call over 0.3 s: the machine's rate when nothing else runs (an average
         * would fall, and MFU rise above 100%, when other work shares the cores) */
        double t0 = lj_time_sec(), best = INFINITY;
        do {
            const double c0 = lj_time_sec();
            lj_cpu_matmul_forward(c, a, b, n, n, n);
            const double dt = lj_time_sec() - c0;
            if (dt < best) best = dt;
        } while (lj_time_sec() - t0 < 0.3);
        gflops = 2.0 * (double)n * n * n / best / 1e9;
    }
    free(a);
    free(b);
    free(c);
    return gflops;
}

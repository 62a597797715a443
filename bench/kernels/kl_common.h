/* kl_common.h: shared helpers of the kernel lab (bench/kernels/kl_*.cu): device buffers
 * filled with pseudo-random values, event timing (median of repeated runs after warm-up),
 * relative-error checks, and the card's ceilings the figures are compared with.
 *
 * Ceilings (../shared/REFERENCE.md and /work/.library/device/KINDS.md, one H200): bf16 GEMM
 * 650-790 TFLOP/s through cuBLAS; HBM copy about 4.3 TB/s counting bytes read plus written;
 * causal attention forward+backward counted as 3.5 * 2*B*H*S^2*D: cuDNN SDPA 385 TFLOP/s at
 * head_dim 64 and 450-460 at head_dim 128. */
#ifndef LJ_KL_COMMON_H
#define LJ_KL_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/cuda_common.h"

#define KL_GEMM_CEILING_TFLOPS 790.0
#define KL_HBM_CEILING_GBS 4300.0
#define KL_ATTN_CUDNN_TFLOPS_HD64 385.0
#define KL_ATTN_CUDNN_TFLOPS_HD128 455.0

static int kl_failures;

/* x[i] = scale * u, u uniform in [-1, 1) from a hash of (seed, i): reproducible, nonzero. */
__global__ void kl_fill_kernel(lj_bf16 *x, int64_t n, uint32_t seed, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 40503u ^ seed * 2246822519u;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        h *= 3266489917u;
        h ^= h >> 16;
        x[i] = __float2bfloat16_rn(scale * ((float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f));
    }
}

__global__ void kl_fill_f32_kernel(float *x, int64_t n, uint32_t seed, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed * 2246822519u;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = scale * ((float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f);
    }
}

static inline void *kl_alloc(const lj_ops *ops, size_t bytes) {
    void *p = NULL;
    if (ops->alloc(&p, bytes) != LJ_OK) {
        fprintf(stderr, "kernel lab: %s\n", lj_error_message());
        exit(2);
    }
    return p;
}

static inline void *kl_rand_bf16(const lj_ops *ops, int64_t n, uint32_t seed, float scale) {
    void *p = kl_alloc(ops, (size_t)n * 2);
    kl_fill_kernel<<<1024, 256, 0, lj_cuda_stream()>>>((lj_bf16 *)p, n, seed, scale);
    LJ_CUDA_LAUNCHED("kl_fill_kernel");
    return p;
}

static inline float *kl_rand_f32(const lj_ops *ops, int64_t n, uint32_t seed, float scale) {
    float *p = (float *)kl_alloc(ops, (size_t)n * 4);
    kl_fill_f32_kernel<<<1024, 256, 0, lj_cuda_stream()>>>(p, n, seed, scale);
    LJ_CUDA_LAUNCHED("kl_fill_f32_kernel");
    return p;
}

static inline int kl_cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of `iters` runs of fn(ctx) on the backend's stream, after `warmup`. */
static inline float kl_time_ms(void (*fn)(void *), void *ctx, int warmup, int iters) {
    cudaStream_t s = lj_cuda_stream();
    cudaEvent_t e0, e1;
    LJ_CUDA_CHECK(cudaEventCreate(&e0), "cudaEventCreate");
    LJ_CUDA_CHECK(cudaEventCreate(&e1), "cudaEventCreate");
    for (int i = 0; i < warmup; i++) fn(ctx);
    float *t = (float *)malloc(sizeof(float) * (size_t)iters);
    for (int i = 0; i < iters; i++) {
        LJ_CUDA_CHECK(cudaEventRecord(e0, s), "cudaEventRecord");
        fn(ctx);
        LJ_CUDA_CHECK(cudaEventRecord(e1, s), "cudaEventRecord");
        LJ_CUDA_CHECK(cudaEventSynchronize(e1), "cudaEventSynchronize");
        LJ_CUDA_CHECK(cudaEventElapsedTime(&t[i], e0, e1), "cudaEventElapsedTime");
    }
    qsort(t, (size_t)iters, sizeof(float), kl_cmp_float);
    float med = t[iters / 2];
    free(t);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return med;
}

/* Relative L2 error of two device tensors of `dtype` (bf16 or f32, n elements); records a
 * failure above tol (or on a non-finite value). */
static inline double kl_check(const lj_ops *ops, const char *what, const void *got, const void *ref, int64_t n,
                              lj_dtype dtype, double tol) {
    const size_t es = lj_dtype_size(dtype);
    char *a = (char *)malloc((size_t)n * es), *b = (char *)malloc((size_t)n * es);
    ops->download(a, got, (size_t)n * es);
    ops->download(b, ref, (size_t)n * es);
    double num = 0, den = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = dtype == LJ_DTYPE_F32 ? ((const float *)a)[i] : lj_bf16_to_f32(((const uint16_t *)a)[i]);
        const double y = dtype == LJ_DTYPE_F32 ? ((const float *)b)[i] : lj_bf16_to_f32(((const uint16_t *)b)[i]);
        if (!isfinite(x) || !isfinite(y)) bad = 1;
        num += (x - y) * (x - y);
        den += y * y;
    }
    free(a);
    free(b);
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    int fail = bad || !(rel <= tol);
    kl_failures += fail;
    printf("  check %-40s rel_l2 %.3e (tol %.0e) %s\n", what, rel, tol, fail ? "FAIL" : "ok");
    return rel;
}

static inline double kl_check_bf16(const lj_ops *ops, const char *what, const void *got, const void *ref, int64_t n,
                                   double tol) {
    return kl_check(ops, what, got, ref, n, LJ_DTYPE_BF16, tol);
}

static inline double kl_check_f32(const lj_ops *ops, const char *what, const float *got, const float *ref, int64_t n,
                                  double tol) {
    return kl_check(ops, what, got, ref, n, LJ_DTYPE_F32, tol);
}

static inline const lj_ops *kl_start(const char *name) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const lj_ops *ops = lj_ops_cuda();
    if (!ops) {
        fprintf(stderr, "%s: %s\n", name, lj_error_message());
        exit(2);
    }
    struct cudaDeviceProp prop;
    int dev = 0;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&prop, dev);
    printf("%s on %s (%d SMs)\n", name, prop.name, prop.multiProcessorCount);
    return ops;
}

static inline int kl_finish(const char *name) {
    printf("%s: %s\n", name, kl_failures ? "FAIL" : "PASS");
    return kl_failures ? 1 : 0;
}

#endif

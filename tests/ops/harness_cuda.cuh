/* harness_cuda.cuh: device-side pieces of the op harness for .cu files (the perf cases and the
 * kernel lab, bench/kernels/): device buffers filled with reproducible pseudo-random values,
 * device tensors downloaded as fp32 and compared with the harness's check helpers, and the
 * start-up line naming the card. */
#ifndef LJ_TESTS_OPS_HARNESS_CUDA_CUH
#define LJ_TESTS_OPS_HARNESS_CUDA_CUH

#include <stdlib.h>

#include "ops/cuda/cuda_common.h"
#include "tests/ops/harness.h"

/* x[i] = scale * u, u uniform in [-1, 1) from a hash of (seed, i): reproducible, no host copy. */
static __global__ void lj_harness_fill_bf16_kernel(lj_bf16 *x, int64_t n, uint32_t seed, float scale) {
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

static __global__ void lj_harness_fill_f32_kernel(float *x, int64_t n, uint32_t seed, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 40503u ^ seed * 2246822519u;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        h *= 3266489917u;
        h ^= h >> 16;
        x[i] = scale * ((float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f);
    }
}

/* `bytes` of device memory from the backend's tracked alloc; exits (status 2) when it fails. */
static inline void *lj_harness_dalloc(const lj_ops *ops, size_t bytes) {
    void *p = NULL;
    if (ops->alloc(&p, bytes ? bytes : 1) != LJ_OK) {
        fprintf(stderr, "op harness: %s\n", lj_error_message());
        exit(2);
    }
    return p;
}

/* n device bf16 (or f32) values, scale * uniform[-1, 1), from `seed`. */
static inline void *lj_harness_drand_bf16(const lj_ops *ops, int64_t n, uint32_t seed, float scale) {
    void *p = lj_harness_dalloc(ops, (size_t)n * 2);
    lj_harness_fill_bf16_kernel<<<1024, 256, 0, lj_cuda_stream()>>>((lj_bf16 *)p, n, seed, scale);
    LJ_CUDA_LAUNCHED("lj_harness_fill_bf16_kernel");
    return p;
}
static inline float *lj_harness_drand_f32(const lj_ops *ops, int64_t n, uint32_t seed, float scale) {
    float *p = (float *)lj_harness_dalloc(ops, (size_t)n * 4);
    lj_harness_fill_f32_kernel<<<1024, 256, 0, lj_cuda_stream()>>>(p, n, seed, scale);
    LJ_CUDA_LAUNCHED("lj_harness_fill_f32_kernel");
    return p;
}

/* n device values of `dtype` (bf16 or f32) as a host fp32 array (free() it). */
static inline float *lj_harness_download_f32(const lj_ops *ops, const void *d, int64_t n, lj_dtype dtype) {
    float *h = (float *)lj_malloc((size_t)(n > 0 ? n : 1) * 4);
    if (dtype == LJ_DTYPE_BF16) {
        uint16_t *b = (uint16_t *)lj_malloc((size_t)(n > 0 ? n : 1) * 2);
        ops->download(b, d, (size_t)n * 2);
        for (int64_t i = 0; i < n; i++) h[i] = lj_bf16_to_f32(b[i]);
        free(b);
    } else {
        ops->download(h, d, (size_t)n * 4);
    }
    return h;
}

/* Two device tensors of `dtype` compared with lj_harness_check_f (ref is the reference). */
static inline int lj_harness_check_device(lj_harness *h, const lj_ops *ops, const char *op, const char *shape,
                                          const void *got, const void *ref, int64_t n, lj_dtype dtype,
                                          lj_harness_tol tol) {
    float *a = lj_harness_download_f32(ops, got, n, dtype), *b = lj_harness_download_f32(ops, ref, n, dtype);
    int pass = lj_harness_check_f(h, op, shape, a, b, n, tol);
    free(a);
    free(b);
    return pass;
}

/* Prints "<program> on <card> (<SMs> SMs)". */
static inline void lj_harness_print_device(const char *program) {
    struct cudaDeviceProp prop;
    int dev = 0;
    LJ_CUDA_CHECK(cudaGetDevice(&dev), "cudaGetDevice");
    LJ_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    printf("%s on %s (%d SMs)\n", program, prop.name, prop.multiProcessorCount);
}

#endif

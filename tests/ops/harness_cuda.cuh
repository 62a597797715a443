/* harness_cuda.cuh: device-side pieces of the op harness for .cu files (the perf cases and the
 * kernel lab, bench/kernels/): device buffers filled with reproducible pseudo-random values,
 * device tensors compared with the harness's check helpers (allocation and downloads are
 * harness.h's lj_harness_dalloc / lj_harness_download_f32), and the
 * start-up line naming the card. */
#ifndef LJ_TESTS_OPS_HARNESS_CUDA_CUH
#define LJ_TESTS_OPS_HARNESS_CUDA_CUH

#include <stdlib.h>

#include "ops/cuda/cuda_common.h"
#include "tests/ops/harness.h"

/* u uniform in [-1, 1) from a hash of (seed, i): reproducible, no host copy. */
static __device__ __forceinline__ float lj_harness_unit(int64_t i, uint32_t seed) {
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 40503u ^ seed * 2246822519u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    h *= 3266489917u;
    h ^= h >> 16;
    return (float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

/* x[i] = scale * lj_harness_unit(i, seed). */
static __global__ void lj_harness_fill_bf16_kernel(lj_bf16 *x, int64_t n, uint32_t seed, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16_rn(scale * lj_harness_unit(i, seed));
}

static __global__ void lj_harness_fill_f32_kernel(float *x, int64_t n, uint32_t seed, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = scale * lj_harness_unit(i, seed);
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

/* Attention buffers of one shape (qkv and dout random, the rest allocated) and its forward and
 * backward through the op table, as lj_harness_time_ms callbacks: for the perf cases and the
 * attention lab. */
typedef struct {
    const lj_ops *ops;
    int B, T, nh, nkv, hd;
    void *qkv, *out, *dout, *dqkv, *ws;
    float *lse;
} lj_att_bench;

static inline void lj_att_bench_fwd(void *p) {
    lj_att_bench *c = (lj_att_bench *)p;
    c->ops->attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->nh, c->nkv, c->hd, c->ws);
}
static inline void lj_att_bench_bwd(void *p) {
    lj_att_bench *c = (lj_att_bench *)p;
    c->ops->attention_backward(c->dqkv, c->dout, c->qkv, c->out, c->lse, c->B, c->T, c->nh, c->nkv, c->hd, c->ws);
}

static inline lj_att_bench lj_att_bench_make(const lj_ops *ops, int B, int T, int nh, int nkv, int hd) {
    lj_att_bench c = {ops, B, T, nh, nkv, hd, NULL, NULL, NULL, NULL, NULL, NULL};
    int64_t rows = (int64_t)B * T, row = (int64_t)(nh + 2 * nkv) * hd;
    c.qkv = lj_harness_drand_bf16(ops, rows * row, 11, 2.0f);
    c.dout = lj_harness_drand_bf16(ops, rows * nh * hd, 12, 1.0f);
    c.out = lj_harness_dalloc(ops, (size_t)rows * nh * hd * 2);
    c.dqkv = lj_harness_dalloc(ops, (size_t)rows * row * 2);
    c.lse = (float *)lj_harness_dalloc(ops, (size_t)B * nh * T * 4);
    c.ws = lj_harness_dalloc(ops, ops->attention_workspace_bytes(B, T, nh, nkv, hd));
    return c;
}

static inline void lj_att_bench_free(lj_att_bench *c) {
    c->ops->free(c->qkv), c->ops->free(c->dout), c->ops->free(c->out), c->ops->free(c->dqkv);
    c->ops->free(c->lse), c->ops->free(c->ws);
}

#endif

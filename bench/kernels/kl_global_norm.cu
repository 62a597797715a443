/* kl_global_norm.cu: kernel lab for the squared global gradient norm (ops/cuda/adamw.cu,
 * norm_sq_partial_kernel) over bf16 gradients: a deterministic two-pass reduction (fp64 partial
 * sums per block in a fixed order, then one block sums the partials). Checked against a double
 * sum on the host (at an odd length, and from a pointer that is not 16-byte aligned), then timed
 * over llama3.2-1b's 1,235,814,400 gradients: GB/s of the 2 bytes each must be read.
 *
 *   kl_global_norm [--version N]
 */
#include <math.h>

#include "bench/kernels/lab.h"

#define NORM_THREADS 256
#define NORM_MAX_BLOCKS 1024

static __device__ double block_sum_double(double v) {
    __shared__ double red[NORM_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    double s = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < NORM_THREADS / 32; w++) s += red[w];
    return s;
}

/* Version 1 (2cefea8): one 2-byte element per thread and turn. Measured (kernel lab, bf16
 * gradients, bench/results/2026-11-29-h200-planner-zero3.md): 1.846 ms, 1339 GB/s; Nsight Compute at
 * 37dc8e8 saw 1.35 TB/s inside a llama3-8b step (2026-11-30-h200x2-8b-time.md). */
__global__ void __launch_bounds__(NORM_THREADS) norm_v1(double *partial, const lj_bf16 *g, int64_t n) {
    double acc = 0.0;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        double x = lj_ld(g + i);
        acc += x * x;
    }
    double s = block_sum_double(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* Pass 2 (every version): out[0] = the sum of the partials in a fixed order. */
__global__ void __launch_bounds__(NORM_THREADS) norm_final(float *out, const double *partial, int parts) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < parts; i += blockDim.x) acc += partial[i];
    double s = block_sum_double(acc);
    if (threadIdx.x == 0) out[0] = (float)s;
}

typedef void (*norm_kernel_fn)(double *, const lj_bf16 *, int64_t);
/* Version 2 (44438ac): 16-byte vectors (8 bf16 per thread and turn) when g is 16-byte aligned,
 * the tail one at a time; the order is still fixed by the grid. It is the backend's kernel
 * today, so the lab runs it through the op table (global_norm_sq, ops/cuda/adamw.cu)
 * rather than keep a copy that could drift from it. Predicted 1.35 -> ~3 TB/s; measured at the
 * time only inside the 8b ZeRO-3 step (with AdamW's vectors: 10,667-10,839 -> 10,941 tokens/s
 * per GPU, bench/results/README.md). */

static const norm_kernel_fn versions[] = {norm_v1, NULL}; /* NULL: the backend's op */
#define NUM_VERSIONS 2

static int norm_blocks(int64_t n) {
    int64_t b = (n + 4095) / 4096;
    if (b > NORM_MAX_BLOCKS) b = NORM_MAX_BLOCKS;
    return b < 1 ? 1 : (int)b;
}

typedef struct {
    const lj_ops *ops;
    norm_kernel_fn kernel;
    const lj_bf16 *g;
    int64_t n;
    double *partial;
    float *out;
} norm_ctx;

static void run(void *p) {
    norm_ctx *c = (norm_ctx *)p;
    if (!c->kernel) {
        c->ops->global_norm_sq(c->out, c->g, c->n, c->partial);
        return;
    }
    int blocks = norm_blocks(c->n);
    c->kernel<<<(unsigned)blocks, NORM_THREADS, 0, lj_cuda_stream()>>>(c->partial, c->g, c->n);
    LJ_CUDA_LAUNCHED("global norm version kernel");
    norm_final<<<1, NORM_THREADS, 0, lj_cuda_stream()>>>(c->out, c->partial, blocks);
    LJ_CUDA_LAUNCHED("norm_final");
}

int main(int argc, char **argv) {
    lj_harness h;
    const lj_ops *ops;
    int only = lj_lab_start(&h, "kl_global_norm", NUM_VERSIONS, argc, argv, &ops);
    norm_ctx c;
    c.ops = ops;
    /* the lab's grid and the backend's workspace, whichever is larger, for the partial sums */
    const size_t partial_bytes = NORM_MAX_BLOCKS * sizeof(double) > ops->global_norm_workspace_bytes(1235814400)
                                     ? NORM_MAX_BLOCKS * sizeof(double)
                                     : ops->global_norm_workspace_bytes(1235814400);
    c.partial = (double *)lj_harness_dalloc(ops, partial_bytes);
    c.out = (float *)lj_harness_dalloc(ops, 4);
    /* check: n = 12345677 from an aligned and from a 2-byte-offset pointer */
    const int64_t nc = 12345677;
    lj_bf16 *gc = (lj_bf16 *)lj_harness_drand_bf16(ops, nc + 1, 51, 0.01f);
    float *hg = lj_harness_download_f32(ops, gc, nc + 1, LJ_DTYPE_BF16);
    for (int off = 0; off <= 1; off++) {
        double want = 0;
        for (int64_t i = off; i < nc + off; i++) want += (double)hg[i] * hg[i];
        float ref = (float)want;
        for (int ver = 1; ver <= NUM_VERSIONS; ver++) {
            if (only && ver != only) continue;
            c.kernel = versions[ver - 1], c.g = gc + off, c.n = nc;
            run(&c);
            float got;
            ops->download(&got, c.out, 4);
            char op[32], shape[48];
            snprintf(op, sizeof op, "global_norm v%d", ver);
            snprintf(shape, sizeof shape, "n=%lld offset %d B", (long long)nc, 2 * off);
            lj_harness_check_f(&h, op, shape, &got, &ref, 1, lj_harness_tol_gpu(1e-6, 1e-6));
        }
    }
    free(hg);
    ops->free(gc);
    const int64_t P = 1235814400;
    lj_bf16 *g = (lj_bf16 *)lj_harness_drand_bf16(ops, P, 47, 1e-3f);
    printf("global_norm_sq over %lld bf16 gradients\n", (long long)P);
    for (int ver = 1; ver <= NUM_VERSIONS; ver++) {
        if (only && ver != only) continue;
        c.kernel = versions[ver - 1], c.g = g, c.n = P;
        char what[32];
        snprintf(what, sizeof what, "version %d", ver);
        double ms = lj_harness_time_ms(ops, run, &c, 3, 20);
        lj_harness_report("global_norm_sq", what, ms, 2.0 * P / (ms * 1e-3) / 1e9, "GB/s", LJ_HARNESS_HBM_CEILING_GBS);
    }
    ops->free((void *)g), ops->free(c.partial), ops->free(c.out);
    return lj_harness_summary(&h);
}

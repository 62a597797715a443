/* kl_matmul.cu: kernel lab for the linear layers (cuBLASLt through the op table): the
 * forward, dx and dw GEMMs of every linear layer of llama3.2-1b (micro-batch 4) and
 * llama3.2-3b (micro-batch 2) at sequence length 4096, each checked on sampled outputs
 * against an fp32 dot product, timed (median of 10 after 3 warm-ups) and reported in
 * TFLOP/s (2*M*N*K per GEMM) against the cuBLAS ceiling. */
#include "bench/kernels/kl_common.h"

/* ref[s] = sum_k A[a0 + k*as] * B[b0 + k*bs] for sample s (row r, column c of the product),
 * with a0 = r*ar, b0 = c*bc. */
__global__ void kl_sample_dot_kernel(float *ref, const lj_bf16 *A, int64_t ar, int64_t as, const lj_bf16 *B,
                                     int64_t bc, int64_t bs, int K, const int *rows, const int *cols, int samples) {
    int s = blockIdx.x;
    if (s >= samples) return;
    float acc = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        acc += __bfloat162float(A[rows[s] * ar + k * as]) * __bfloat162float(B[cols[s] * bc + k * bs]);
    acc = lj_warp_sum(acc);
    __shared__ float red[8];
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < 8; w++) t += red[w];
        ref[s] = t;
    }
}

#define KL_SAMPLES 512

typedef struct {
    const lj_ops *ops;
    int N, IC, OC;
    void *x, *w, *out, *dout, *dx;
    void *dw; /* grad dtype */
} mm_ctx;

static void run_fwd(void *p) {
    mm_ctx *c = (mm_ctx *)p;
    c->ops->matmul_forward(c->out, c->x, c->w, c->N, c->IC, c->OC);
}
static void run_dx(void *p) {
    mm_ctx *c = (mm_ctx *)p;
    c->ops->matmul_backward(c->dx, NULL, c->dout, c->x, c->w, c->N, c->IC, c->OC, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
}
static void run_dw(void *p) {
    mm_ctx *c = (mm_ctx *)p;
    c->ops->matmul_backward(NULL, c->dw, c->dout, c->x, c->w, c->N, c->IC, c->OC, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
}

/* Compares `samples` entries (rows[s], cols[s]) of got (row-major, ld columns; bf16 or f32)
 * with the fp32 dot products. */
static void check_samples(const lj_ops *ops, const char *what, const void *got, int f32, int64_t ld, const lj_bf16 *A,
                          int64_t ar, int64_t as, const lj_bf16 *B, int64_t bc, int64_t bs, int K, int R, int Cc) {
    int hr[KL_SAMPLES], hc[KL_SAMPLES];
    uint32_t h = 12345;
    for (int s = 0; s < KL_SAMPLES; s++) {
        h = h * 1664525u + 1013904223u;
        hr[s] = (int)(h % (uint32_t)R);
        h = h * 1664525u + 1013904223u;
        hc[s] = (int)(h % (uint32_t)Cc);
    }
    int *drows = (int *)kl_alloc(ops, sizeof hr), *dcols = (int *)kl_alloc(ops, sizeof hc);
    float *dref = (float *)kl_alloc(ops, KL_SAMPLES * 4);
    ops->upload(drows, hr, sizeof hr);
    ops->upload(dcols, hc, sizeof hc);
    kl_sample_dot_kernel<<<KL_SAMPLES, 256, 0, lj_cuda_stream()>>>(dref, A, ar, as, B, bc, bs, K, drows, dcols,
                                                                   KL_SAMPLES);
    LJ_CUDA_LAUNCHED("kl_sample_dot_kernel");
    float ref[KL_SAMPLES];
    ops->download(ref, dref, sizeof ref);
    double num = 0, den = 0;
    for (int s = 0; s < KL_SAMPLES; s++) {
        int64_t off = (int64_t)hr[s] * ld + hc[s];
        float g;
        if (f32) {
            ops->download(&g, (const float *)got + off, 4);
        } else {
            uint16_t b;
            ops->download(&b, (const uint16_t *)got + off, 2);
            g = lj_bf16_to_f32(b);
        }
        num += ((double)g - ref[s]) * ((double)g - ref[s]);
        den += (double)ref[s] * ref[s];
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    int fail = !(rel <= 1e-2);
    kl_failures += fail;
    printf("  check %-40s rel_l2 %.3e on %d samples (tol 1e-02) %s\n", what, rel, KL_SAMPLES, fail ? "FAIL" : "ok");
    ops->free(drows);
    ops->free(dcols);
    ops->free(dref);
}

static void bench_linear(const lj_ops *ops, const char *name, int N, int IC, int OC) {
    mm_ctx c = {ops, N, IC, OC, NULL, NULL, NULL, NULL, NULL, NULL};
    c.x = kl_rand_bf16(ops, (int64_t)N * IC, 1, 1.0f);
    c.w = kl_rand_bf16(ops, (int64_t)OC * IC, 2, 0.05f);
    c.dout = kl_rand_bf16(ops, (int64_t)N * OC, 3, 1.0f);
    c.out = kl_alloc(ops, (size_t)N * OC * 2);
    c.dx = kl_alloc(ops, (size_t)N * IC * 2);
    const size_t gs = lj_dtype_size(ops->grad_dtype);
    c.dw = kl_alloc(ops, (size_t)OC * IC * gs);
    printf("%s: N=%d IC=%d OC=%d\n", name, N, IC, OC);
    run_fwd(&c);
    run_dx(&c);
    ops->memset_zero(c.dw, (size_t)OC * IC * gs);
    run_dw(&c);
    check_samples(ops, "forward out = x w^T", c.out, 0, OC, (const lj_bf16 *)c.x, IC, 1, (const lj_bf16 *)c.w, IC, 1,
                  IC, N, OC);
    check_samples(ops, "backward dx = dout w", c.dx, 0, IC, (const lj_bf16 *)c.dout, OC, 1, (const lj_bf16 *)c.w, 1,
                  IC, OC, N, IC);
    check_samples(ops, "backward dw = dout^T x", c.dw, gs == 4, IC, (const lj_bf16 *)c.dout, 1, OC, (const lj_bf16 *)c.x,
                  1, IC, N, OC, IC);
    double flop = 2.0 * N * IC * OC;
    const char *names[3] = {"forward", "backward dx", "backward dw"};
    void (*fns[3])(void *) = {run_fwd, run_dx, run_dw};
    for (int i = 0; i < 3; i++) {
        float ms = kl_time_ms(fns[i], &c, 3, 10);
        double tf = flop / (ms * 1e-3) / 1e12;
        printf("  %-12s %8.3f ms %7.1f TFLOP/s  (%.0f%% of %.0f)\n", names[i], ms, tf, 100.0 * tf / KL_GEMM_CEILING_TFLOPS,
               KL_GEMM_CEILING_TFLOPS);
        printf("RESULT matmul %s %s %.1f TFLOP/s %.3f ms\n", name, names[i], tf, ms);
    }
    ops->free(c.x), ops->free(c.w), ops->free(c.dout), ops->free(c.out), ops->free(c.dx), ops->free(c.dw);
}

int main(void) {
    const lj_ops *ops = kl_start("kl_matmul");
    int N1 = 4 * 4096, N3 = 2 * 4096;
    bench_linear(ops, "1b qkv", N1, 2048, 3072);
    bench_linear(ops, "1b o_proj", N1, 2048, 2048);
    bench_linear(ops, "1b gate_up", N1, 2048, 16384);
    bench_linear(ops, "1b down", N1, 8192, 2048);
    bench_linear(ops, "1b lm_head", N1, 2048, 128256);
    bench_linear(ops, "3b qkv", N3, 3072, 5120);
    bench_linear(ops, "3b o_proj", N3, 3072, 3072);
    bench_linear(ops, "3b gate_up", N3, 3072, 16384);
    bench_linear(ops, "3b down", N3, 8192, 3072);
    bench_linear(ops, "8k square", 8192, 8192, 8192);
    return kl_finish("kl_matmul");
}

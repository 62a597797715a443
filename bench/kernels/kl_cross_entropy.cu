/* kl_cross_entropy.cu: kernel lab for the fused lm_head + cross-entropy
 * (ops/cuda/cross_entropy.cu, cross_entropy_fused): per chunk of rows, logits = x w^T (bf16, in the
 * workspace), the row kernel (log-sum-exp, loss, dlogits in place), dx = dlogits w and
 * dw += dlogits^T x, so that no [N, V] logits tensor exists. The versions differ in the chunk
 * size; the row pass is the backend's (cross_entropy_forward_backward, in place on the chunk's
 * logits) and the GEMMs its cuBLASLt calls (lj_cuda_gemm), the same in every version.
 * Checked against the CPU backend's fused op at N=4500 C=32 V=128256 (several chunks in every
 * version), then timed at llama3.2-1b's shape (N = 4 x 4096, C = 2048, V = 128256): TFLOP/s of
 * the three GEMMs (6*N*V*C) against the cuBLAS ceiling.
 *
 *   kl_cross_entropy [--version N]
 */
#include <math.h>

#include "bench/kernels/lab.h"

/* Version 1 (2cefea8, first run): chunks of 256 MiB of bf16 logits (1024 rows at V = 128256).
 * Each chunk re-reads and re-writes dw [V, C]: 16 passes over it at llama3.2-1b. Measured
 * (bench/results/2026-11-29-h200-ops.md, fp32 dw then): 44.1 ms, 585 TFLOP/s, 7% slower than unfused.
 * Version 2 (2cefea8, second run; the backend's size today, LJ_CE_CHUNK_BYTES): 1 GiB chunks
 * (4096 rows), 4 passes over dw. Predicted about -5 ms; measured 40.7 ms, 634 TFLOP/s, level
 * with the unfused op at a quarter of its logits memory. */
static const size_t chunk_bytes[] = {(size_t)256 << 20, (size_t)1 << 30};
#define NUM_VERSIONS 2

static int chunk_rows(int ver, int N, int V) {
    int64_t rows = (int64_t)(chunk_bytes[ver - 1] / ((size_t)V * 2));
    if (rows >= 128) rows -= rows % 128;
    if (rows < 1) rows = 1;
    return (int)(rows > N ? N : rows);
}

typedef struct {
    const lj_ops *ops;
    int ver, N, C, V;
    const lj_bf16 *x, *w;
    lj_bf16 *dx, *ws;
    void *dw; /* bf16 */
    float *losses;
    const int32_t *targets;
} ce_ctx;

static void run(void *p) {
    ce_ctx *c = (ce_ctx *)p;
    const int R = chunk_rows(c->ver, c->N, c->V);
    for (int r0 = 0; r0 < c->N; r0 += R) {
        const int rows = c->N - r0 < R ? c->N - r0 : R;
        lj_cuda_gemm("kl_cross_entropy logits", 1, 0, c->V, rows, c->C, c->w, c->C, c->x + (int64_t)r0 * c->C, c->C,
                     c->ws, CUDA_R_16BF, c->V, 1.0f, 0.0f);
        c->ops->cross_entropy_forward_backward(c->losses + r0, c->ws, c->ws, c->targets + r0, rows, c->V, 1.0f / c->N);
        lj_cuda_gemm("kl_cross_entropy dx", 0, 0, c->C, rows, c->V, c->w, c->C, c->ws, c->V,
                     c->dx + (int64_t)r0 * c->C, CUDA_R_16BF, c->C, 1.0f, 0.0f);
        lj_cuda_gemm("kl_cross_entropy dw", 0, 1, c->C, c->V, rows, c->x + (int64_t)r0 * c->C, c->C, c->ws, c->V,
                     c->dw, CUDA_R_16BF, c->C, 1.0f, 1.0f);
    }
}

static void make(const lj_ops *ops, ce_ctx *c, int N, int C, int V, float wscale) {
    memset(c, 0, sizeof *c);
    c->ops = ops;
    c->N = N, c->C = C, c->V = V;
    c->x = (const lj_bf16 *)lj_harness_drand_bf16(ops, (int64_t)N * C, 31, 2.0f);
    c->w = (const lj_bf16 *)lj_harness_drand_bf16(ops, (int64_t)V * C, 32, wscale);
    c->dx = (lj_bf16 *)lj_harness_dalloc(ops, (size_t)N * C * 2);
    c->dw = lj_harness_dalloc(ops, (size_t)V * C * 2);
    ops->memset_zero(c->dw, (size_t)V * C * 2);
    c->losses = (float *)lj_harness_dalloc(ops, (size_t)N * 4);
    c->ws = (lj_bf16 *)lj_harness_dalloc(ops, (size_t)chunk_rows(NUM_VERSIONS, N, V) * V * 2);
    int32_t *t = (int32_t *)lj_malloc((size_t)N * 4);
    for (int n = 0; n < N; n++) t[n] = n % 97 == 5 ? -1 : (int32_t)(((uint32_t)n * 2654435761u) % (uint32_t)V);
    int32_t *dt = (int32_t *)lj_harness_dalloc(ops, (size_t)N * 4);
    ops->upload(dt, t, (size_t)N * 4);
    c->targets = dt;
    free(t);
}

static void release(const lj_ops *ops, ce_ctx *c) {
    ops->free((void *)c->x), ops->free((void *)c->w), ops->free(c->dx), ops->free(c->dw), ops->free(c->losses);
    ops->free(c->ws), ops->free((void *)c->targets);
}

int main(int argc, char **argv) {
    lj_harness h;
    const lj_ops *ops;
    int only = lj_lab_start(&h, "kl_cross_entropy", NUM_VERSIONS, argc, argv, &ops);
    const lj_ops *cpu = lj_ops_cpu();
    {
        ce_ctx c;
        make(ops, &c, 4500, 32, 128256, 0.2f);
        const int N = c.N, C = c.C, V = c.V;
        const char *shape = "N=4500 C=32 V=128256";
        float *hx = lj_harness_download_f32(ops, c.x, (int64_t)N * C, LJ_DTYPE_BF16);
        float *hw = lj_harness_download_f32(ops, c.w, (int64_t)V * C, LJ_DTYPE_BF16);
        int32_t *ht = (int32_t *)lj_malloc((size_t)N * 4);
        ops->download(ht, c.targets, (size_t)N * 4);
        float *hl = (float *)lj_malloc((size_t)N * 4), *hdx = (float *)lj_malloc((size_t)N * C * 4);
        float *hdw = (float *)lj_calloc((size_t)V * C, 4);
        void *hws = lj_malloc(cpu->cross_entropy_fused_workspace_bytes(N, C, V) + 1);
        cpu->cross_entropy_fused(hl, hdx, hdw, hx, hw, ht, N, C, V, 1.0f / N, hws);
        for (int ver = 1; ver <= NUM_VERSIONS; ver++) {
            if (only && ver != only) continue;
            c.ver = ver;
            ops->memset_zero(c.dw, (size_t)V * C * 2);
            run(&c);
            float *gl = lj_harness_download_f32(ops, c.losses, N, LJ_DTYPE_F32);
            float *gdx = lj_harness_download_f32(ops, c.dx, (int64_t)N * C, LJ_DTYPE_BF16);
            float *gdw = lj_harness_download_f32(ops, c.dw, (int64_t)V * C, LJ_DTYPE_BF16);
            char op[48];
            snprintf(op, sizeof op, "cross_entropy_fused v%d losses", ver);
            lj_harness_check_f(&h, op, shape, gl, hl, N, lj_harness_tol_gpu(2e-3, 1e-2));
            snprintf(op, sizeof op, "cross_entropy_fused v%d dx", ver);
            lj_harness_check_f(&h, op, shape, gdx, hdx, (int64_t)N * C, lj_harness_tol_gpu(1e-2, 2e-2));
            snprintf(op, sizeof op, "cross_entropy_fused v%d dw (+=)", ver);
            lj_harness_check_f(&h, op, shape, gdw, hdw, (int64_t)V * C, lj_harness_tol_gpu(1e-2, 2e-2));
            free(gl), free(gdx), free(gdw);
        }
        free(hx), free(hw), free(ht), free(hl), free(hdx), free(hdw), free(hws);
        release(ops, &c);
    }
    ce_ctx c;
    make(ops, &c, 16384, 2048, 128256, 0.05f);
    const double flop = 6.0 * c.N * (double)c.V * c.C;
    for (int ver = 1; ver <= NUM_VERSIONS; ver++) {
        if (only && ver != only) continue;
        c.ver = ver;
        char what[64];
        snprintf(what, sizeof what, "version %d (%d-row chunks)", ver, chunk_rows(ver, c.N, c.V));
        double ms = lj_harness_time_ms(ops, run, &c, 2, 10);
        lj_harness_report("cross_entropy_fused N=16384 C=2048 V=128256", what, ms, flop / (ms * 1e-3) / 1e12, "TFLOP/s",
                          LJ_HARNESS_GEMM_CEILING_TFLOPS);
    }
    release(ops, &c);
    return lj_harness_summary(&h);
}

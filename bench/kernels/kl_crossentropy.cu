/* kl_crossentropy.cu: kernel lab for lm_head + cross-entropy (cuda_loss.cu): the fused op
 * (chunks of rows, no [N, V] logits) against its unfused twin (matmul_forward into full
 * logits, cross_entropy_forward_backward in place, matmul_backward), checked against each
 * other and timed at llama3.2-1b's shape (N = 4 x 4096, C = 2048, V = 128256). Reported as
 * TFLOP/s of the three GEMMs (6*N*V*C) against the cuBLAS ceiling, with each one's device
 * memory for logits. */
#include "bench/kernels/kl_common.h"

typedef struct {
    const lj_ops *ops;
    int N, C, V;
    void *x, *w, *dx, *logits, *ws;
    float *losses;
    void *dw; /* grad dtype */
    int32_t *targets;
} ce_ctx;

static void run_fused(void *p) {
    ce_ctx *c = (ce_ctx *)p;
    c->ops->cross_entropy_fused(c->losses, c->dx, c->dw, c->x, c->w, c->targets, c->N, c->C, c->V, 1.0f / c->N, c->ws);
}

static void run_unfused(void *p) {
    ce_ctx *c = (ce_ctx *)p;
    c->ops->matmul_forward(c->logits, c->x, c->w, c->N, c->C, c->V);
    c->ops->cross_entropy_forward_backward(c->losses, c->logits, c->logits, c->targets, c->N, c->V, 1.0f / c->N);
    c->ops->matmul_backward(c->dx, c->dw, c->logits, c->x, c->w, c->N, c->C, c->V, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
}

int main(void) {
    const lj_ops *ops = kl_start("kl_crossentropy");
    ce_ctx c;
    memset(&c, 0, sizeof c);
    c.ops = ops;
    c.N = 4 * 4096;
    c.C = 2048;
    c.V = 128256;
    int64_t nx = (int64_t)c.N * c.C, nw = (int64_t)c.V * c.C;
    c.x = kl_rand_bf16(ops, nx, 31, 2.0f);
    c.w = kl_rand_bf16(ops, nw, 32, 0.05f);
    c.dx = kl_alloc(ops, (size_t)nx * 2);
    const size_t gs = lj_dtype_size(ops->grad_dtype);
    c.dw = kl_alloc(ops, (size_t)nw * gs);
    c.losses = (float *)kl_alloc(ops, (size_t)c.N * 4);
    c.logits = kl_alloc(ops, (size_t)c.N * c.V * 2);
    size_t ws = ops->cross_entropy_fused_workspace_bytes(c.N, c.C, c.V);
    c.ws = kl_alloc(ops, ws);
    int32_t *t = (int32_t *)malloc((size_t)c.N * 4);
    for (int n = 0; n < c.N; n++) t[n] = n % 97 == 5 ? -1 : (int32_t)(((uint32_t)n * 2654435761u) % (uint32_t)c.V);
    c.targets = (int32_t *)kl_alloc(ops, (size_t)c.N * 4);
    ops->upload(c.targets, t, (size_t)c.N * 4);
    free(t);
    printf("lm_head + cross-entropy N=%d C=%d V=%d (fused workspace %.0f MiB, unfused logits %.0f MiB)\n", c.N, c.C,
           c.V, ws / 1048576.0, (double)c.N * c.V * 2 / 1048576.0);

    /* check: fused against unfused */
    float *l1 = (float *)kl_alloc(ops, (size_t)c.N * 4);
    void *dw1 = kl_alloc(ops, (size_t)nw * gs);
    void *dx1 = kl_alloc(ops, (size_t)nx * 2);
    ops->memset_zero(c.dw, (size_t)nw * gs);
    run_fused(&c);
    ops->copy(l1, c.losses, (size_t)c.N * 4);
    ops->copy(dx1, c.dx, (size_t)nx * 2);
    ops->copy(dw1, c.dw, (size_t)nw * gs);
    ops->memset_zero(c.dw, (size_t)nw * gs);
    run_unfused(&c);
    kl_check_f32(ops, "losses fused vs unfused", l1, c.losses, c.N, 1e-5);
    kl_check_bf16(ops, "dx fused vs unfused", dx1, c.dx, nx, 1e-2);
    kl_check(ops, "dw fused vs unfused", dw1, c.dw, nw, ops->grad_dtype, gs == 4 ? 1e-3 : 1e-2);
    float hl[4];
    ops->download(hl, l1, sizeof hl);
    printf("  losses[0..3] %.4f %.4f %.4f %.4f (ln V = %.4f)\n", hl[0], hl[1], hl[2], hl[3], log((double)c.V));
    ops->free(l1), ops->free(dw1), ops->free(dx1);

    double flop = 6.0 * c.N * (double)c.V * c.C;
    float fused = kl_time_ms(run_fused, &c, 2, 10), unfused = kl_time_ms(run_unfused, &c, 2, 10);
    printf("  fused    %8.3f ms %7.1f TFLOP/s\n", fused, flop / (fused * 1e-3) / 1e12);
    printf("  unfused  %8.3f ms %7.1f TFLOP/s\n", unfused, flop / (unfused * 1e-3) / 1e12);
    printf("RESULT crossentropy fused %.1f TFLOP/s %.3f ms unfused %.1f TFLOP/s %.3f ms (ceiling %.0f)\n",
           flop / (fused * 1e-3) / 1e12, fused, flop / (unfused * 1e-3) / 1e12, unfused, KL_GEMM_CEILING_TFLOPS);
    ops->free(c.x), ops->free(c.w), ops->free(c.dx), ops->free(c.dw), ops->free(c.losses), ops->free(c.logits);
    ops->free(c.ws), ops->free(c.targets);
    return kl_finish("kl_crossentropy");
}

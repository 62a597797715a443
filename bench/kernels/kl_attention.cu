/* kl_attention.cu: kernel lab for causal GQA attention: the own flash kernels
 * (cuda_attention.cu) and cuDNN's fused SDPA (cuda_attention_cudnn.cu), each checked against
 * the simple fp32 kernels at a shorter sequence, then timed at the benchmark shapes (llama3.2-1b: B=4 nh=32 nkv=8 hd=64; llama3.2-3b: B=2 nh=24 nkv=8 hd=128; T=4096).
 * FLOPs as FlashAttention counts them for causal attention: forward 2*B*H*S^2*D (4 B H S^2 D
 * halved by the mask), backward 2.5x that, forward+backward 3.5 * 2*B*H*S^2*D; compared with
 * cuDNN SDPA through PyTorch on the same card (REFERENCE.md). */
#include "bench/kernels/kl_common.h"


typedef struct {
    const lj_ops *ops;
    int B, T, nh, nkv, hd;
    void *qkv, *out, *dout, *dqkv, *ws;
    float *lse;
} att_ctx;

static void run_fwd(void *p) {
    att_ctx *c = (att_ctx *)p;
    c->ops->attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->nh, c->nkv, c->hd, c->ws);
}
static void run_bwd(void *p) {
    att_ctx *c = (att_ctx *)p;
    c->ops->attention_backward(c->dqkv, c->dout, c->qkv, c->out, c->lse, c->B, c->T, c->nh, c->nkv, c->hd, c->ws);
}

static att_ctx make(const lj_ops *ops, int B, int T, int nh, int nkv, int hd) {
    att_ctx c = {ops, B, T, nh, nkv, hd, NULL, NULL, NULL, NULL, NULL, NULL};
    int64_t rows = (int64_t)B * T, row = (int64_t)(nh + 2 * nkv) * hd;
    c.qkv = kl_rand_bf16(ops, rows * row, 11, 2.0f);
    c.dout = kl_rand_bf16(ops, rows * nh * hd, 12, 1.0f);
    c.out = kl_alloc(ops, (size_t)rows * nh * hd * 2);
    c.dqkv = kl_alloc(ops, (size_t)rows * row * 2);
    c.lse = (float *)kl_alloc(ops, (size_t)B * nh * T * 4);
    c.ws = kl_alloc(ops, ops->attention_workspace_bytes(B, T, nh, nkv, hd));
    return c;
}

static void release(att_ctx *c) {
    c->ops->free(c->qkv), c->ops->free(c->dout), c->ops->free(c->out), c->ops->free(c->dqkv);
    c->ops->free(c->lse), c->ops->free(c->ws);
}

/* Flash (cudnn 0) or cuDNN (cudnn 1) against simple on the same inputs. */
static void check_shape(const lj_ops *ops, int B, int T, int nh, int nkv, int hd, int cudnn) {
    lj_cuda_set_cudnn_attention(cudnn);
    const char *what = !cudnn ? "flash" : lj_cuda_cudnn_attention_active(B, T, nh, nkv, hd) ? "cudnn" : "cudnn-fallback";
    printf("check B=%d T=%d nh=%d nkv=%d hd=%d: %s vs simple\n", B, T, nh, nkv, hd, what);
    att_ctx f = make(ops, B, T, nh, nkv, hd);
    att_ctx s = f;
    int64_t rows = (int64_t)B * T, row = (int64_t)(nh + 2 * nkv) * hd;
    s.out = kl_alloc(ops, (size_t)rows * nh * hd * 2);
    s.dqkv = kl_alloc(ops, (size_t)rows * row * 2);
    s.lse = (float *)kl_alloc(ops, (size_t)B * nh * T * 4);
    run_fwd(&f);
    run_bwd(&f);
    lj_cuda_set_simple_attention(1);
    run_fwd(&s);
    run_bwd(&s);
    lj_cuda_set_simple_attention(0);
    kl_check_bf16(ops, "out", f.out, s.out, rows * nh * hd, 1e-2);
    kl_check_f32(ops, "lse", f.lse, s.lse, (int64_t)B * nh * T, 1e-3);
    kl_check_bf16(ops, "dqkv", f.dqkv, s.dqkv, rows * row, 2e-2);
    ops->free(s.out), ops->free(s.dqkv), ops->free(s.lse);
    release(&f);
    lj_cuda_set_cudnn_attention(1);
}

static void bench_shape(const lj_ops *ops, const char *name, int B, int T, int nh, int nkv, int hd, double cudnn,
                        int use_cudnn) {
    lj_cuda_set_cudnn_attention(use_cudnn);
    if (use_cudnn && !lj_cuda_cudnn_attention_active(B, T, nh, nkv, hd)) printf("%s: cuDNN not active (own kernels)\n", name);
    att_ctx c = make(ops, B, T, nh, nkv, hd);
    double f = 2.0 * B * nh * (double)T * T * hd;
    float fwd = kl_time_ms(run_fwd, &c, 3, 10);
    float bwd = kl_time_ms(run_bwd, &c, 3, 10);
    double tf_f = f / (fwd * 1e-3) / 1e12, tf_b = 2.5 * f / (bwd * 1e-3) / 1e12;
    double tf_fb = 3.5 * f / ((fwd + bwd) * 1e-3) / 1e12;
    printf("%s: B=%d T=%d nh=%d nkv=%d hd=%d\n", name, B, T, nh, nkv, hd);
    printf("  forward  %8.3f ms %7.1f TFLOP/s\n", fwd, tf_f);
    printf("  backward %8.3f ms %7.1f TFLOP/s\n", bwd, tf_b);
    printf("  fwd+bwd  %8.3f ms %7.1f TFLOP/s  (%.2fx cuDNN SDPA's %.0f)\n", fwd + bwd, tf_fb, tf_fb / cudnn, cudnn);
    printf("RESULT attention %s fwd %.1f bwd %.1f fwd+bwd %.1f TFLOP/s (%.2fx cuDNN)\n", name, tf_f, tf_b, tf_fb,
           tf_fb / cudnn);
    release(&c);
    lj_cuda_set_cudnn_attention(1);
}

int main(void) {
    const lj_ops *ops = kl_start("kl_attention");
    /* head_dim 64: both forward tilings (1 or 2 m-tiles of 16 queries per warp) */
    for (int mt = 1; mt <= 2; mt++) {
        lj_cuda_set_flash_forward_mtiles(mt);
        printf("[head_dim 64 forward: %d m-tile(s) per warp]\n", mt);
        check_shape(ops, 1, 1000, 32, 8, 64, 0);
        check_shape(ops, 2, 333, 4, 2, 64, 0);
    }
    check_shape(ops, 1, 1000, 24, 8, 128, 0);
    printf("[cuDNN SDPA]\n");
    check_shape(ops, 1, 1000, 32, 8, 64, 1);
    check_shape(ops, 2, 333, 4, 2, 64, 1);
    check_shape(ops, 1, 1024, 32, 8, 64, 1);
    check_shape(ops, 1, 1000, 24, 8, 128, 1);
    check_shape(ops, 1, 1024, 24, 8, 128, 1);
    for (int mt = 1; mt <= 2; mt++) {
        lj_cuda_set_flash_forward_mtiles(mt);
        char name[64];
        snprintf(name, sizeof name, "llama3.2-1b (fwd m-tiles %d)", mt);
        bench_shape(ops, name, 4, 4096, 32, 8, 64, KL_ATTN_CUDNN_TFLOPS_HD64, 0);
    }
    lj_cuda_set_flash_forward_mtiles(2);
    bench_shape(ops, "llama3.2-3b", 2, 4096, 24, 8, 128, KL_ATTN_CUDNN_TFLOPS_HD128, 0);
    bench_shape(ops, "llama3.2-1b cudnn", 4, 4096, 32, 8, 64, KL_ATTN_CUDNN_TFLOPS_HD64, 1);
    bench_shape(ops, "llama3.2-3b cudnn", 2, 4096, 24, 8, 128, KL_ATTN_CUDNN_TFLOPS_HD128, 1);
    printf("%s\n", lj_cuda_cudnn_attention_describe());
    return kl_finish("kl_attention");
}

/* kl_rope.cu: kernel lab for RoPE in the QKV layout (ops/cuda/rope.cu, rope_kernel), the
 * forward rotation in place over bf16 qkv rows (q and k heads rotate, v heads stay; HF
 * half-split pairs (i, i + hd/2)). Checked against the CPU backend's rope_forward on the same
 * bf16 values, then timed at llama3.2-1b's shape (B=4 T=4096 nh=32 nkv=8 hd=64): GB/s of the
 * 4 bytes each rotated element moves (read and written; cos/sin are [T, hd/2] and stay in L2).
 *
 *   kl_rope [--version N]
 */
#include <math.h>

#include "bench/kernels/lab.h"

/* Version 1 (2cefea8): one thread per rotated pair, 2-byte loads and stores, two 4-byte reads of
 * cos/sin. Measured (kernel lab, bench/results/2026-11-29-h200-ops.md): 0.115 ms, 1456 GB/s (34% of the
 * 4.3 TB/s copy rate); 0.12 ms per pass inside a llama3-8b step (2026-11-30-h200x2-8b-time.md). */
__global__ void rope_v1(lj_bf16 *qkv, const float *cosv, const float *sinv, int B, int T, int nh, int nkv, int hd) {
    int half = hd / 2, heads = nh + nkv;
    int64_t row_len = (int64_t)(nh + 2 * nkv) * hd;
    int64_t total = (int64_t)B * T * heads * half;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int i = (int)(idx % half);
        int64_t rest = idx / half;
        int head = (int)(rest % heads);
        int64_t row = rest / heads;
        int t = (int)(row % T);
        lj_bf16 *p = qkv + row * row_len + (int64_t)head * hd + i;
        float c = cosv[(int64_t)t * half + i], s = sinv[(int64_t)t * half + i];
        float x1 = lj_ld(p), x2 = lj_ld(p + half);
        lj_st(p, x1 * c - x2 * s);
        lj_st(p + half, x2 * c + x1 * s);
    }
}

/* Version 2 (c1cef00): one thread per 8 consecutive pairs, the bf16 halves read and written as
 * 16-byte vectors and cos/sin as two float4 each (hd/2 a multiple of 8, 16-byte aligned
 * buffers). It is the backend's kernel today, so the lab runs it through the op table
 * (rope_forward, ops/cuda/rope.cu) rather than keep a copy that could drift from it.
 * Predicted: about 5 ms of RoPE per llama3-8b ZeRO-3 step saved with the overwrite-mode change
 * (1.3% together); measured at the time only end to end, 10,941 -> 11,020 tokens/s per GPU on
 * different machines (bench/results/README.md). */

typedef void (*rope_kernel_fn)(lj_bf16 *, const float *, const float *, int, int, int, int, int);
static const rope_kernel_fn versions[] = {rope_v1, NULL}; /* NULL: the backend's op */
static const int pairs_per_thread[] = {1, 8};
#define NUM_VERSIONS 2

typedef struct {
    int ver, B, T, nh, nkv, hd;
    lj_bf16 *qkv;
    float *cosv, *sinv;
    const lj_ops *ops;
} rope_ctx;

static void run(void *p) {
    rope_ctx *c = (rope_ctx *)p;
    if (!versions[c->ver - 1]) {
        c->ops->rope_forward(c->qkv, c->cosv, c->sinv, c->B, c->T, c->nh, c->nkv, c->hd);
        return;
    }
    int64_t total = (int64_t)c->B * c->T * (c->nh + c->nkv) * (c->hd / 2 / pairs_per_thread[c->ver - 1]);
    versions[c->ver - 1]<<<lj_cuda_blocks(total, 256), 256, 0, lj_cuda_stream()>>>(c->qkv, c->cosv, c->sinv, c->B,
                                                                                    c->T, c->nh, c->nkv, c->hd);
    LJ_CUDA_LAUNCHED("rope version kernel");
}

/* HF tables for positions 0..T-1 (theta 500000), uploaded. */
static void tables(const lj_ops *ops, rope_ctx *c, float **hcos, float **hsin) {
    const int64_t n = (int64_t)c->T * c->hd / 2;
    float *cs = (float *)lj_malloc((size_t)n * 4), *sn = (float *)lj_malloc((size_t)n * 4);
    for (int t = 0; t < c->T; t++)
        for (int i = 0; i < c->hd / 2; i++) {
            double a = t * pow(500000.0, -2.0 * i / c->hd);
            cs[t * (c->hd / 2) + i] = (float)cos(a);
            sn[t * (c->hd / 2) + i] = (float)sin(a);
        }
    c->cosv = (float *)lj_harness_dalloc(ops, (size_t)n * 4), c->sinv = (float *)lj_harness_dalloc(ops, (size_t)n * 4);
    ops->upload(c->cosv, cs, (size_t)n * 4);
    ops->upload(c->sinv, sn, (size_t)n * 4);
    *hcos = cs, *hsin = sn;
}

int main(int argc, char **argv) {
    lj_harness h;
    const lj_ops *ops;
    int only = lj_lab_start(&h, "kl_rope", NUM_VERSIONS, argc, argv, &ops);
    const lj_ops *cpu = lj_ops_cpu();
    for (int ver = 1; ver <= NUM_VERSIONS; ver++) {
        if (only && ver != only) continue;
        rope_ctx c = {ver, 2, 37, 4, 2, 64, NULL, NULL, NULL, ops};
        const int64_t n = (int64_t)c.B * c.T * (c.nh + 2 * c.nkv) * c.hd;
        float *hcos, *hsin;
        tables(ops, &c, &hcos, &hsin);
        c.qkv = (lj_bf16 *)lj_harness_drand_bf16(ops, n, 43, 1.0f);
        float *ref = lj_harness_download_f32(ops, c.qkv, n, LJ_DTYPE_BF16);
        cpu->rope_forward(ref, hcos, hsin, c.B, c.T, c.nh, c.nkv, c.hd);
        run(&c);
        float *got = lj_harness_download_f32(ops, c.qkv, n, LJ_DTYPE_BF16);
        char op[32];
        snprintf(op, sizeof op, "rope_forward v%d", ver);
        lj_harness_check_f(&h, op, "B=2 T=37 nh=4 nkv=2 hd=64", got, ref, n, lj_harness_tol_gpu(1e-2, 2e-2));
        free(ref), free(got), free(hcos), free(hsin);
        ops->free(c.qkv), ops->free(c.cosv), ops->free(c.sinv);
    }
    rope_ctx c = {0, 4, 4096, 32, 8, 64, NULL, NULL, NULL, ops};
    float *hcos, *hsin;
    tables(ops, &c, &hcos, &hsin);
    c.qkv = (lj_bf16 *)lj_harness_drand_bf16(ops, (int64_t)c.B * c.T * (c.nh + 2 * c.nkv) * c.hd, 43, 1.0f);
    printf("rope_forward B=%d T=%d nh=%d nkv=%d hd=%d\n", c.B, c.T, c.nh, c.nkv, c.hd);
    for (int ver = 1; ver <= NUM_VERSIONS; ver++) {
        if (only && ver != only) continue;
        c.ver = ver;
        char what[32];
        snprintf(what, sizeof what, "version %d", ver);
        double ms = lj_harness_time_ms(ops, run, &c, 3, 20);
        double bytes = 4.0 * c.B * c.T * (c.nh + c.nkv) * c.hd;
        lj_harness_report("rope_forward", what, ms, bytes / (ms * 1e-3) / 1e9, "GB/s", LJ_HARNESS_HBM_CEILING_GBS);
    }
    free(hcos), free(hsin);
    ops->free(c.qkv), ops->free(c.cosv), ops->free(c.sinv);
    return lj_harness_summary(&h);
}

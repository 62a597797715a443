/* kl_attention.cu: kernel lab for causal GQA attention forward + backward. Unlike the other lab
 * programs, the versions here are not copies: each is a kernel family the backend still carries
 * and a table's configuration selects (lj_ops_config's attention and flash_forward_mtiles), so
 * the lab opens each version's table and runs them through it. Versions 2-4 are
 * checked against version 1 at T = 1000 (no tile divides it), version 1 against the CPU backend
 * at T = 77; all are timed at llama3.2-1b's shape (B=4 T=4096 nh=32 nkv=8 hd=64) and
 * llama3.2-3b's (B=2 T=4096 nh=24 nkv=8 hd=128), in TFLOP/s as FlashAttention counts causal
 * attention (forward 2*B*H*S^2*D, backward 2.5x, forward+backward 3.5x).
 *
 *   kl_attention [--version N]
 *
 * Version 1 (2cefea8, attention_simple.cu): the simple fp32 kernels, every head_dim, slow;
 * the reference of the others.
 * Version 2 (2cefea8, first run): FlashAttention-2-shaped tensor-core kernels (mma.sync,
 * ldmatrix), one 16-query m-tile per warp in the head_dim 64 forward. Measured
 * (bench/results/2026-11-29-h200-ops.md): llama3.2-1b forward 192.9, fwd+bwd 142.9 TFLOP/s (0.37x cuDNN).
 * Version 3 (2cefea8, second run): two m-tiles per warp (128-query blocks), so each K/V
 * fragment from shared memory feeds two mma. Predicted up to 1.3x on the forward; measured
 * forward 192.9 -> 222.9 TFLOP/s (+16%), fwd+bwd 147.6; llama3.2-3b fwd+bwd 143.2.
 * Version 4 (7dd2a7e, the default where cuDNN supports the shape): cuDNN's fused SDPA through
 * the backend graph API. Predicted ~385 / ~455 TFLOP/s (the engines PyTorch uses); measured
 * (bench/results/2026-11-29-h200-attention-cudnn.md) fwd+bwd 382.0 (hd 64) and 478.4 (hd 128), the
 * llama3.2-1b step 51,223 -> 62,496 tokens/s. */
#include "bench/kernels/lab.h"

#define NUM_VERSIONS 4

/* Points c at the table of version v's kernels (the buffers, sized by the default table, fit
 * every version's workspace). */
static void select_version(lj_att_bench *c, int v) {
    lj_ops_config cfg = LJ_OPS_CONFIG_DEFAULT;
    cfg.attention = v == 1 ? LJ_ATTENTION_SIMPLE : v == 4 ? LJ_ATTENTION_AUTO : LJ_ATTENTION_FLASH;
    cfg.flash_forward_mtiles = v == 2 ? 1 : 2;
    c->ops = lj_ops_cuda_open(&cfg);
    LJ_ASSERT(c->ops, "kl_attention: no table for version %d: %s", v, lj_error_message());
}


/* Forward and backward of version v, downloaded as fp32: out, lse, dqkv. */
static void outputs(lj_att_bench *c, int v, float **out, float **lse, float **dqkv) {
    select_version(c, v);
    lj_att_bench_fwd(c);
    lj_att_bench_bwd(c);
    const int64_t rows = (int64_t)c->B * c->T, row = (int64_t)(c->nh + 2 * c->nkv) * c->hd;
    *out = lj_harness_download_f32(c->ops, c->out, rows * c->nh * c->hd, LJ_DTYPE_BF16);
    *lse = lj_harness_download_f32(c->ops, c->lse, (int64_t)c->B * c->nh * c->T, LJ_DTYPE_F32);
    *dqkv = lj_harness_download_f32(c->ops, c->dqkv, rows * row, LJ_DTYPE_BF16);
}

static void compare(lj_harness *h, int v, const char *against, const lj_att_bench *c, const float *o, const float *l,
                    const float *d, const float *ro, const float *rl, const float *rd) {
    char op[64], shape[64];
    snprintf(shape, sizeof shape, "B=%d T=%d nh=%d nkv=%d hd=%d", c->B, c->T, c->nh, c->nkv, c->hd);
    const int64_t rows = (int64_t)c->B * c->T, row = (int64_t)(c->nh + 2 * c->nkv) * c->hd;
    snprintf(op, sizeof op, "attention v%d out vs %s", v, against);
    lj_harness_check_f(h, op, shape, o, ro, rows * c->nh * c->hd, lj_harness_tol_gpu(1e-2, 2e-2));
    snprintf(op, sizeof op, "attention v%d lse vs %s", v, against);
    lj_harness_check_f(h, op, shape, l, rl, (int64_t)c->B * c->nh * c->T, lj_harness_tol_gpu(1e-3, 1e-2));
    snprintf(op, sizeof op, "attention v%d dqkv vs %s", v, against);
    lj_harness_check_f(h, op, shape, d, rd, rows * row, lj_harness_tol_gpu(2e-2, 5e-2));
}

int main(int argc, char **argv) {
    lj_harness h;
    const lj_ops *ops;
    int only = lj_lab_start(&h, "kl_attention", NUM_VERSIONS, argc, argv, &ops);
    const lj_ops *cpu = lj_ops_cpu();
    /* version 1 against the CPU backend */
    if (!only || only == 1) {
        lj_att_bench c = lj_att_bench_make(ops, 1, 77, 4, 2, 64);
        float *o, *l, *d;
        outputs(&c, 1, &o, &l, &d);
        const int64_t row = (int64_t)(c.nh + 2 * c.nkv) * c.hd, no = (int64_t)c.T * c.nh * c.hd;
        float *hq = lj_harness_download_f32(ops, c.qkv, c.T * row, LJ_DTYPE_BF16);
        float *hd = lj_harness_download_f32(ops, c.dout, no, LJ_DTYPE_BF16);
        float *ro = (float *)lj_malloc((size_t)no * 4), *rl = (float *)lj_malloc((size_t)c.nh * c.T * 4);
        float *rd = (float *)lj_malloc((size_t)c.T * row * 4);
        void *hws = lj_malloc(cpu->attention_workspace_bytes(1, c.T, c.nh, c.nkv, c.hd) + 1);
        cpu->attention_forward(ro, rl, hq, 1, c.T, c.nh, c.nkv, c.hd, hws);
        cpu->attention_backward(rd, hd, hq, ro, rl, 1, c.T, c.nh, c.nkv, c.hd, hws);
        compare(&h, 1, "cpu", &c, o, l, d, ro, rl, rd);
        free(o), free(l), free(d), free(hq), free(hd), free(ro), free(rl), free(rd), free(hws);
        lj_att_bench_free(&c);
    }
    /* versions 2-4 against version 1 */
    const int shapes[2][5] = {{1, 1000, 32, 8, 64}, {1, 1000, 24, 8, 128}};
    for (int s = 0; s < 2; s++) {
        lj_att_bench c = lj_att_bench_make(ops, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4]);
        float *ro, *rl, *rd;
        outputs(&c, 1, &ro, &rl, &rd);
        for (int v = 2; v <= NUM_VERSIONS; v++) {
            if (only && v != only) continue;
            if (v == 2 && c.hd != 64) continue; /* one m-tile is a head_dim 64 variant */
            float *o, *l, *d;
            outputs(&c, v, &o, &l, &d);
            compare(&h, v, v == 4 && !lj_cuda_cudnn_attention_active(c.B, c.T, c.nh, c.nkv, c.hd, 0) ? "v1 (cuDNN fell back)"
                                                                                             : "v1",
                    &c, o, l, d, ro, rl, rd);
            free(o), free(l), free(d);
        }
        free(ro), free(rl), free(rd);
        lj_att_bench_free(&c);
    }
    /* timings */
    const int bench[2][5] = {{4, 4096, 32, 8, 64}, {2, 4096, 24, 8, 128}};
    for (int s = 0; s < 2; s++) {
        lj_att_bench c = lj_att_bench_make(ops, bench[s][0], bench[s][1], bench[s][2], bench[s][3], bench[s][4]);
        const double f = 2.0 * c.B * c.nh * (double)c.T * c.T * c.hd;
        const double ceiling = c.hd == 128 ? LJ_HARNESS_ATTN_HD128_CEILING_TFLOPS : LJ_HARNESS_ATTN_HD64_CEILING_TFLOPS;
        char group[160];
        snprintf(group, sizeof group, "attention B=%d T=%d nh=%d nkv=%d hd=%d", c.B, c.T, c.nh, c.nkv, c.hd);
        printf("%s\n", group);
        for (int v = 1; v <= NUM_VERSIONS; v++) {
            if ((only && v != only) || (v == 2 && c.hd != 64)) continue;
            select_version(&c, v);
            const int iters = v == 1 ? 3 : 10;
            double tf = lj_harness_time_ms(ops, lj_att_bench_fwd, &c, 1, iters),
                   tb = lj_harness_time_ms(ops, lj_att_bench_bwd, &c, 1, iters);
            char what[48];
            snprintf(what, sizeof what, "version %d forward", v);
            lj_harness_report(group, what, tf, f / (tf * 1e-3) / 1e12, "TFLOP/s", ceiling);
            snprintf(what, sizeof what, "version %d backward", v);
            lj_harness_report(group, what, tb, 2.5 * f / (tb * 1e-3) / 1e12, "TFLOP/s", ceiling);
            snprintf(what, sizeof what, "version %d fwd+bwd", v);
            lj_harness_report(group, what, tf + tb, 3.5 * f / ((tf + tb) * 1e-3) / 1e12, "TFLOP/s", ceiling);
        }
        lj_att_bench_free(&c);
    }
    printf("%s\n", lj_cuda_cudnn_attention_describe());
    return lj_harness_summary(&h);
}

/* cases_docmask_cuda.c: the CUDA backend's document-masking ops (attention_forward_docs,
 * attention_backward_docs: the own flash kernels and the simple ones; RoPE by positions is in
 * cases_rope.c) against the CPU backend on the same bf16-representable inputs and the same
 * document starts (from tokens with EOD ids, data/docmask.h). GPU outputs are poisoned (0xff
 * bytes: NaN) first, so an element left unwritten fails. Tolerances as in cases_cuda.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/cuda_common.h"
#include "tests/ops/case.h"

typedef struct {
    lj_harness *h;
    const lj_ops *G, *H;
} dctx;

static dctx begin(lj_harness *h, const lj_op_case *c) {
    dctx q = {h, NULL, lj_ops_cpu()};
    lj_ops_config cfg = LJ_OPS_CONFIG_DEFAULT;
    cfg.grad_dtype = c->dtype;
    q.G = lj_ops_cuda_open(&cfg);
    LJ_ASSERT(q.G, "CUDA case %s: no CUDA backend", c->op);
    return q;
}

/* The harness's buffers (harness.h), bf16 on the device where `bf16` says so, else 4-byte words
 * (f32 or i32). */
static float *hrand(const dctx *q, int64_t n, float scale) { return lj_harness_randf_bf16(q->h, n, scale); }
static void *galloc(const dctx *q, size_t bytes) { return lj_harness_dalloc(q->G, bytes); }
static void gpoison(const dctx *q, void *d, size_t bytes) { lj_harness_dpoison(q->G, d, bytes); }
static void *gup(const dctx *q, const void *x, int64_t n, int bf16) {
    return lj_harness_upload(q->G, x, n, bf16 ? LJ_DTYPE_BF16 : LJ_DTYPE_F32);
}
static float *gdown(const dctx *q, const void *d, int64_t n, int bf16) {
    return lj_harness_download_f32(q->G, d, n, bf16 ? LJ_DTYPE_BF16 : LJ_DTYPE_F32);
}

/* Columns [c0, c0 + w) of rows x[rows, ld] into a packed [rows, w]. */
static float *cols(const float *x, int64_t rows, int ld, int c0, int w) {
    float *y = lj_malloc((size_t)(rows * w > 0 ? rows * w : 1) * sizeof(float));
    for (int64_t r = 0; r < rows; r++) memcpy(y + r * w, x + r * ld + c0, (size_t)w * sizeof(float));
    return y;
}

static void check(const dctx *q, const char *op, const char *shape, const float *got, const float *ref, int64_t n,
                  double rel_l2, double max_rel) {
    lj_harness_check_f(q->h, op, shape, got, ref, n, lj_harness_tol_gpu(rel_l2, max_rel));
}

/* d = {B, T, nh, nkv, hd, mean document length}; param, the kernels: 0 the own flash kernels
 * (head_dim 64 and 128; others fall to the simple ones), 1 the simple fp32 kernels, 2 flash with
 * one m-tile per warp in the head_dim 64 forward. */
void lj_case_cuda_attention_docs(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    dctx q = begin(h, c);
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], mean = c->d[5], kind = (int)c->param;
    const char *kn = kind == 1 ? "simple" : kind == 2 ? "flash-mt1" : "flash";
    char shape[96], op[64];
    snprintf(shape, sizeof shape, "B=%d T=%d nh=%d nkv=%d hd=%d doc~%d", B, T, nh, nkv, hd, mean);
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV;
    const int64_t n = (int64_t)B * T * row, no = (int64_t)B * T * Q, nl = (int64_t)B * nh * T, N = (int64_t)B * T;
    int32_t *tokens = lj_malloc((size_t)N * 4), *ds = lj_malloc((size_t)N * 4);
    lj_case_docmask_tokens(&h->rng, B, T, mean, tokens);
    lj_case_docmask_build(B, T, tokens, NULL, ds);
    float *qkv = hrand(&q, n, 1.0f), *dout = hrand(&q, no, 1.0f);
    float *out = lj_calloc((size_t)no, 4), *lse = lj_calloc((size_t)nl, 4), *dqkv = lj_calloc((size_t)n, 4);
    void *hws = lj_malloc(q.H->attention_workspace_bytes(B, T, nh, nkv, hd) + 1);
    q.H->attention_forward_docs(out, lse, qkv, ds, B, T, nh, nkv, hd, hws);
    q.H->attention_backward_docs(dqkv, dout, qkv, out, lse, ds, B, T, nh, nkv, hd, hws);
    /* the table of the kind: the case's configuration with its attention kernels */
    lj_ops_config cfg = q.G->config;
    cfg.attention = kind == 1 ? LJ_ATTENTION_SIMPLE : LJ_ATTENTION_AUTO;
    cfg.flash_forward_mtiles = kind == 2 ? 1 : 2;
    q.G = lj_ops_cuda_open(&cfg);
    LJ_ASSERT(q.G, "attention_docs kind %d: %s", kind, lj_error_message());
    void *gq = gup(&q, qkv, n, 1), *gd = gup(&q, dout, no, 1), *gds = gup(&q, ds, N, 0);
    void *go = galloc(&q, (size_t)no * 2), *gl = galloc(&q, (size_t)nl * 4), *gdq = galloc(&q, (size_t)n * 2);
    void *gws = galloc(&q, q.G->attention_workspace_bytes(B, T, nh, nkv, hd));
    gpoison(&q, go, (size_t)no * 2), gpoison(&q, gl, (size_t)nl * 4), gpoison(&q, gdq, (size_t)n * 2);
    q.G->attention_forward_docs(go, gl, gq, gds, B, T, nh, nkv, hd, gws);
    q.G->attention_backward_docs(gdq, gd, gq, go, gl, gds, B, T, nh, nkv, hd, gws); /* the GPU's own out, lse */
    float *o = gdown(&q, go, no, 1), *l = gdown(&q, gl, nl, 0), *d = gdown(&q, gdq, n, 1);
    snprintf(op, sizeof op, "attention_forward_docs out (%s)", kn);
    check(&q, op, shape, o, out, no, c->tol.rel_l2, c->tol.max_rel);
    snprintf(op, sizeof op, "attention_forward_docs lse (%s)", kn);
    check(&q, op, shape, l, lse, nl, 1e-3, 1e-2);
    const char *part[3] = {"dq", "dk", "dv"};
    const int c0[3] = {0, Q, Q + KV}, w[3] = {Q, KV, KV};
    for (int k = 0; k < 3; k++) {
        float *a = cols(d, N, row, c0[k], w[k]), *b = cols(dqkv, N, row, c0[k], w[k]);
        snprintf(op, sizeof op, "attention_backward_docs %s (%s)", part[k], kn);
        check(&q, op, shape, a, b, N * w[k], 2e-2, 5e-2);
        free(a), free(b);
    }
    q.G->free(gq), q.G->free(gd), q.G->free(gds), q.G->free(go), q.G->free(gl), q.G->free(gdq), q.G->free(gws);
    free(tokens), free(ds), free(qkv), free(dout), free(out), free(lse), free(dqkv), free(hws);
    free(o), free(l), free(d);
}

/* ---- perf: the cost of attention within documents ------------------------------------ */

typedef struct {
    const lj_ops *G;
    int B, T, nh, nkv, hd;
    const int32_t *ds; /* NULL: plain causal */
    void *qkv, *dout, *out, *dqkv, *ws;
    float *lse;
} perf_ctx;

static void perf_fwd(void *p) {
    perf_ctx *c = p;
    if (c->ds) c->G->attention_forward_docs(c->out, c->lse, c->qkv, c->ds, c->B, c->T, c->nh, c->nkv, c->hd, c->ws);
    else c->G->attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->nh, c->nkv, c->hd, c->ws);
}

static void perf_bwd(void *p) {
    perf_ctx *c = p;
    if (c->ds)
        c->G->attention_backward_docs(c->dqkv, c->dout, c->qkv, c->out, c->lse, c->ds, c->B, c->T, c->nh, c->nkv, c->hd,
                                      c->ws);
    else c->G->attention_backward(c->dqkv, c->dout, c->qkv, c->out, c->lse, c->B, c->T, c->nh, c->nkv, c->hd, c->ws);
}

/* d = {B, T, nh, nkv, hd, mean document length}: forward and backward times of plain causal
 * attention (cuDNN, the default path; then the own flash kernels) and of attention within
 * documents (the own flash kernels), on EODs about every d[5] tokens. TFLOP/s count the work
 * each one does: 2*B*nh*T^2*hd for causal attention (docs/reference.md's convention, no causal
 * discount) times the work within documents, sum l(l+1)/2 / (T(T+1)/2), for the masked one. */
void lj_case_cuda_perf_attention_docs(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const dctx q = begin(h, c);
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], mean = c->d[5];
    const int64_t N = (int64_t)B * T, row = (int64_t)(nh + 2 * nkv) * hd;
    int32_t *tokens = lj_malloc((size_t)N * 4), *ds = lj_malloc((size_t)N * 4);
    lj_case_docmask_tokens(&h->rng, B, T, mean, tokens);
    lj_case_docmask_build(B, T, tokens, NULL, ds);
    double work = 0;
    int docs = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T;) {
            int e = t;
            while (e < T && ds[(int64_t)b * T + e] == t) e++;
            work += 0.5 * (double)(e - t) * (e - t + 1), docs++;
            t = e;
        }
    const double frac = work / (B * 0.5 * (double)T * (T + 1));
    float *x = hrand(&q, N * row, 1.0f), *g = hrand(&q, N * nh * hd, 1.0f);
    perf_ctx pc = {q.G, B, T, nh, nkv, hd, NULL, gup(&q, x, N * row, 1), gup(&q, g, N * nh * hd, 1),
                   galloc(&q, (size_t)N * nh * hd * 2), galloc(&q, (size_t)N * row * 2),
                   galloc(&q, q.G->attention_workspace_bytes(B, T, nh, nkv, hd)), galloc(&q, (size_t)B * nh * T * 4)};
    void *gds = gup(&q, ds, N, 0);
    const double f = 2.0 * B * nh * (double)T * T * hd;
    const double ceiling = hd == 128 ? LJ_HARNESS_ATTN_HD128_CEILING_TFLOPS : LJ_HARNESS_ATTN_HD64_CEILING_TFLOPS;
    printf("attention_docs B=%d T=%d nh=%d nkv=%d hd=%d: %.2f documents per sequence, work within them %.4f of "
           "causal\n", B, T, nh, nkv, hd, (double)docs / B, frac);
    const char *names[3] = {"causal cudnn", "causal flash", "documents flash"};
    lj_ops_config cfg = q.G->config;
    for (int k = 0; k < 3; k++) {
        cfg.attention = k == 0 ? LJ_ATTENTION_AUTO : LJ_ATTENTION_FLASH;
        pc.G = lj_ops_cuda_open(&cfg);
        pc.ds = k == 2 ? gds : NULL;
        const double w = k == 2 ? frac : 1.0;
        const double fwd = lj_harness_time_ms(q.G, perf_fwd, &pc, 3, 10);
        const double bwd = lj_harness_time_ms(q.G, perf_bwd, &pc, 3, 10);
        char group[160];
        snprintf(group, sizeof group, "attention B=%d T=%d nh=%d nkv=%d hd=%d doc~%d %s", B, T, nh, nkv, hd, mean,
                 names[k]);
        lj_harness_report(group, "forward", fwd, w * f / (fwd * 1e-3) / 1e12, "TFLOP/s", ceiling);
        lj_harness_report(group, "backward", bwd, w * 2.5 * f / (bwd * 1e-3) / 1e12, "TFLOP/s", ceiling);
        lj_harness_report(group, "fwd+bwd", fwd + bwd, w * 3.5 * f / ((fwd + bwd) * 1e-3) / 1e12, "TFLOP/s", ceiling);
    }
    q.G->free(pc.qkv), q.G->free(pc.dout), q.G->free(pc.out), q.G->free(pc.dqkv), q.G->free(pc.ws), q.G->free(pc.lse);
    q.G->free(gds);
    free(tokens), free(ds), free(x), free(g);
}

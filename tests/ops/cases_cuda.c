/* cases_cuda.c: the CUDA backend's cases: every op of lj_ops_cuda_open() against the CPU backend
 * (lj_ops_cpu) on the same random inputs (bf16-representable values, given to the CPU as fp32),
 * at shapes that include ones that are not multiples of the kernels' tiles; fused ops against
 * their unfused twins too. GPU outputs are poisoned (0xff bytes: NaN in bf16 and fp32) before
 * each op, so an element left unwritten fails. The graph case captures a chain of ops shaped
 * like one layer's step into a CUDA graph and replays it against the eager results.
 *
 * Tolerances: a case's `tol` applies to its bf16 outputs (rel_l2 <= 1e-2 and max_rel <= 2e-2 in
 * the table: bf16 carries up to 2^-9 relative rounding per element) and `tol_grad` to weight
 * gradients (bf16 rounding when the gradient dtype is bf16, the op's fp32 figure otherwise);
 * fp32 and exact outputs keep their own figures below. Attention's backward, which rounds P
 * and dS to bf16 for the tensor cores, allows 2e-2 / 5e-2.
 *
 * The case being run is held in file-scope pointers (set by begin() at the start of each case):
 * G the CUDA table of the case's gradient dtype, H the CPU table, g_h the harness. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/cuda_common.h"
#include "tests/ops/op_cases.h"

static const lj_ops *G, *H;
static lj_harness *g_h;
static const lj_op_case *g_case;
static int g_bf16_grads; /* the case's gradient dtype is bf16 */

/* Opens the CUDA table of the case's gradient dtype (one constant table per configuration). */
static void begin(lj_harness *h, const lj_op_case *c) {
    g_h = h;
    g_case = c;
    LJ_ASSERT(c->dtype == LJ_DTYPE_BF16 || c->dtype == LJ_DTYPE_F32, "CUDA case %s: gradient dtype %d", c->op,
              (int)c->dtype);
    lj_ops_config cfg = LJ_OPS_CONFIG_DEFAULT;
    cfg.grad_dtype = c->dtype;
    G = lj_ops_cuda_open(&cfg);
    LJ_ASSERT(G && G->grad_dtype == c->dtype, "CUDA case %s: no table of gradient dtype %s", c->op,
              lj_dtype_name(c->dtype));
    H = lj_ops_cpu();
    g_bf16_grads = c->dtype == LJ_DTYPE_BF16;
}

#define TOL g_case->tol.rel_l2, g_case->tol.max_rel
#define TOL_WGRAD g_case->tol_grad.rel_l2, g_case->tol_grad.max_rel
#define TOL_EXACT 1e-6, 1e-6

static void check(const char *op, const char *shape, const float *got, const float *ref, int64_t n, double tol_l2,
                  double tol_max) {
    lj_harness_check_f(g_h, op, shape, got, ref, n, lj_harness_tol_gpu(tol_l2, tol_max));
}

/* n values of a strided view (element k at (k / width) * stride + k % width) of both sides. */
static void check_strided(const char *op, const char *shape, const float *got, const float *ref, int64_t n,
                          int64_t stride, int64_t width, double tol_l2, double tol_max) {
    float *a = lj_harness_gather(got, n, stride, width), *b = lj_harness_gather(ref, n, stride, width);
    check(op, shape, a, b, n, tol_l2, tol_max);
    free(a), free(b);
}

/* ---- buffers ---------------------------------------------------------------------- */

static float *hrand(int64_t n, float scale) { return lj_harness_randf_bf16(g_h, n, scale); }

static float *hzeros(int64_t n) { return lj_calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

static float *hcopy(const float *x, int64_t n) {
    float *y = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* The harness's device buffers (harness.h) on the backend G. */
static void *galloc(size_t bytes) { return lj_harness_dalloc(G, bytes); }
static void gpoison(void *d, size_t bytes) { lj_harness_dpoison(G, d, bytes); }
static void *gbf16(const float *x, int64_t n) { return lj_harness_upload(G, x, n, LJ_DTYPE_BF16); }
static void *gf32(const float *x, int64_t n) { return lj_harness_upload(G, x, n, LJ_DTYPE_F32); }
static void *gi32(const int32_t *x, int64_t n) { return lj_harness_upload(G, x, n, LJ_DTYPE_F32); }
static float *dl_bf16(const void *d, int64_t n) { return lj_harness_download_f32(G, d, n, LJ_DTYPE_BF16); }
static float *dl_f32(const void *d, int64_t n) { return lj_harness_download_f32(G, d, n, LJ_DTYPE_F32); }

/* Weight gradients in the backend's grad dtype: upload (host values must be bf16-exact when it
 * is bf16) and download as f32. */
static void *ggrad(const float *x, int64_t n) { return g_bf16_grads ? gbf16(x, n) : gf32(x, n); }
static float *dl_grad(const void *d, int64_t n) { return g_bf16_grads ? dl_bf16(d, n) : dl_f32(d, n); }
static size_t grad_size(void) { return g_bf16_grads ? 2 : 4; }

/* ---- ops -------------------------------------------------------------------------- */

static void test_cast(int64_t n) {
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld", (long long)n);
    float *x = lj_malloc((size_t)n * 4), *ref = lj_malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)lj_rng_normal(&g_h->rng) * 3.0f;
        ref[i] = lj_bf16_to_f32(lj_f32_to_bf16(x[i]));
    }
    void *dx = gf32(x, n), *db = galloc((size_t)n * 2), *dy = galloc((size_t)n * 4);
    gpoison(db, (size_t)n * 2);
    gpoison(dy, (size_t)n * 4);
    G->cast_f32_to_param(db, dx, n);
    G->cast_to_f32(dy, db, LJ_DTYPE_BF16, n);
    float *y = dl_f32(dy, n);
    check("cast_f32_to_param+cast_to_f32", shape, y, ref, n, TOL_EXACT);
    G->free(dx), G->free(db), G->free(dy);
    free(x), free(ref), free(y);
}

/* HF rope tables for positions 0..T-1: cos/sin[t, i] of angle t * theta^(-2i/hd). */
static void rope_tables(float *cosv, float *sinv, int T, int hd) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd / 2; i++) {
            double a = t * pow(500000.0, -2.0 * i / hd);
            cosv[t * (hd / 2) + i] = (float)cos(a);
            sinv[t * (hd / 2) + i] = (float)sin(a);
        }
}

/* kind 0: the own kernels (flash for head_dim 64/128); 1: the simple fp32 kernels; 2: flash
 * with one m-tile per warp in the head_dim 64 forward; 3: cuDNN's fused SDPA (the default
 * where it supports the shape; "cudnn-fallback" when it does not, so the own kernels ran);
 * 5: cuDNN in deterministic mode, whose second backward must give the same bytes. */
static void test_attention(int B, int T, int nh, int nkv, int hd, int kind_id) {
    char shape[80], op[80];
    snprintf(shape, sizeof shape, "B=%d T=%d nh=%d nkv=%d hd=%d", B, T, nh, nkv, hd);
    /* the table of the kind: G's configuration with its attention kernels */
    lj_ops_config cfg = G->config;
    cfg.attention = kind_id == 1 ? LJ_ATTENTION_SIMPLE : kind_id >= 3 ? LJ_ATTENTION_AUTO : LJ_ATTENTION_FLASH;
    cfg.flash_forward_mtiles = kind_id == 2 ? 1 : 2;
    cfg.deterministic = kind_id == 5;
    const lj_ops *A = lj_ops_cuda_open(&cfg);
    LJ_ASSERT(A, "attention kind %d: %s", kind_id, lj_error_message());
    const char *kind = kind_id == 1   ? "simple"
                       : kind_id == 2 ? "flash-mt1"
                       : kind_id == 0 ? "flash"
                       : kind_id == 5 ? "cudnn-deterministic"
                                      : "cudnn";
    if (kind_id >= 3 && !lj_cuda_cudnn_attention_active(B, T, nh, nkv, hd, cfg.deterministic))
        kind = kind_id == 5 ? "cudnn-deterministic-fallback" : "cudnn-fallback";
    int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV;
    int64_t n = (int64_t)B * T * row, no = (int64_t)B * T * Q, nl = (int64_t)B * nh * T;
    float *qkv = hrand(n, 1.0f), *dout = hrand(no, 1.0f);
    float *out = hzeros(no), *lse = hzeros(nl), *dqkv = hzeros(n);
    void *hws = lj_malloc(H->attention_workspace_bytes(B, T, nh, nkv, hd) + 1);
    H->attention_forward(out, lse, qkv, B, T, nh, nkv, hd, hws);
    H->attention_backward(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, hws);
    void *gq = gbf16(qkv, n), *gd = gbf16(dout, no), *go = galloc((size_t)no * 2), *gl = galloc((size_t)nl * 4);
    void *gdq = galloc((size_t)n * 2), *gws = galloc(A->attention_workspace_bytes(B, T, nh, nkv, hd));
    gpoison(go, (size_t)no * 2), gpoison(gl, (size_t)nl * 4), gpoison(gdq, (size_t)n * 2);
    A->attention_forward(go, gl, gq, B, T, nh, nkv, hd, gws);
    /* the backward uses the GPU's own forward output and lse, as in training */
    A->attention_backward(gdq, gd, gq, go, gl, B, T, nh, nkv, hd, gws);
    float *d_again = NULL;
    if (kind_id == 5 && lj_cuda_cudnn_attention_active(B, T, nh, nkv, hd, 1)) {
        /* deterministic mode: a second backward gives the same bytes */
        void *gdq2 = galloc((size_t)n * 2);
        gpoison(gdq2, (size_t)n * 2);
        A->attention_backward(gdq2, gd, gq, go, gl, B, T, nh, nkv, hd, gws);
        d_again = dl_bf16(gdq2, n);
        G->free(gdq2);
    }
    float *o = dl_bf16(go, no), *l = dl_f32(gl, nl), *d = dl_bf16(gdq, n);
    snprintf(op, sizeof op, "attention_forward out (%s)", kind);
    check(op, shape, o, out, no, TOL);
    snprintf(op, sizeof op, "attention_forward lse (%s)", kind);
    check(op, shape, l, lse, nl, 1e-3, 1e-2);
    snprintf(op, sizeof op, "attention_backward dq (%s)", kind);
    check_strided(op, shape, d, dqkv, (int64_t)B * T * Q, row, Q, 2e-2, 5e-2);
    snprintf(op, sizeof op, "attention_backward dk (%s)", kind);
    check_strided(op, shape, d + Q, dqkv + Q, (int64_t)B * T * KV, row, KV, 2e-2, 5e-2);
    snprintf(op, sizeof op, "attention_backward dv (%s)", kind);
    check_strided(op, shape, d + Q + KV, dqkv + Q + KV, (int64_t)B * T * KV, row, KV, 2e-2, 5e-2);
    if (d_again) {
        snprintf(op, sizeof op, "attention_backward repeat (%s)", kind);
        check(op, shape, d_again, d, n, 0.0, 0.0);
        free(d_again);
    }
    G->free(gq), G->free(gd), G->free(go), G->free(gl), G->free(gdq), G->free(gws);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(hws), free(o), free(l), free(d);
}

/* The model captures its very first step: cuDNN's plans are built when the workspace is sized
 * (before capture), and their first execution happens inside the capture. Checks that the
 * captured forward+backward of a fresh shape replays to the CPU backend's results. */
static void test_attention_first_run_captured(void) {
    const int B = 1, T = 256, nh = 4, nkv = 2, hd = 128;
    const int Q = nh * hd, row = Q + 2 * nkv * hd;
    const int64_t n = (int64_t)B * T * row, no = (int64_t)B * T * Q, nl = (int64_t)B * nh * T;
    char shape[80];
    snprintf(shape, sizeof shape, "B=%d T=%d nh=%d nkv=%d hd=%d", B, T, nh, nkv, hd);
    float *qkv = hrand(n, 1.0f), *dout = hrand(no, 1.0f), *out = hzeros(no), *lse = hzeros(nl), *dqkv = hzeros(n);
    void *hws = lj_malloc(H->attention_workspace_bytes(B, T, nh, nkv, hd) + 1);
    H->attention_forward(out, lse, qkv, B, T, nh, nkv, hd, hws);
    H->attention_backward(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, hws);
    void *gq = gbf16(qkv, n), *gd = gbf16(dout, no), *go = galloc((size_t)no * 2), *gl = galloc((size_t)nl * 4);
    void *gdq = galloc((size_t)n * 2), *gws = galloc(G->attention_workspace_bytes(B, T, nh, nkv, hd));
    const char *kind = lj_cuda_cudnn_attention_active(B, T, nh, nkv, hd, G->config.deterministic) ? "cudnn"
                                                                                                : "cudnn-fallback";
    gpoison(go, (size_t)no * 2), gpoison(gl, (size_t)nl * 4), gpoison(gdq, (size_t)n * 2);
    cudaStream_t s = lj_cuda_stream();
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    if (e == cudaSuccess) {
        G->attention_forward(go, gl, gq, B, T, nh, nkv, hd, gws);
        G->attention_backward(gdq, gd, gq, go, gl, B, T, nh, nkv, hd, gws);
        e = cudaStreamEndCapture(s, &graph);
    }
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (e == cudaSuccess) e = cudaGraphLaunch(exec, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    char op[48];
    snprintf(op, sizeof op, "attention first run captured (%s)", kind);
    if (e != cudaSuccess) {
        lj_harness_check_true(g_h, op, shape, 0, "capture and replay: %s", cudaGetErrorString(e));
    } else {
        float *o = dl_bf16(go, no), *d = dl_bf16(gdq, n);
        check(op, shape, o, out, no, TOL);
        check_strided(op, shape, d, dqkv, (int64_t)B * T * row, row, row, 2e-2, 5e-2);
        free(o), free(d);
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    G->free(gq), G->free(gd), G->free(go), G->free(gl), G->free(gdq), G->free(gws);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(hws);
}

static void test_decode(int p0, int Tq, int Tmax, int nh, int nkv, int hd) {
    char shape[80];
    snprintf(shape, sizeof shape, "p0=%d Tq=%d nh=%d nkv=%d hd=%d", p0, Tq, nh, nkv, hd);
    int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV;
    float *qkv = hrand((int64_t)Tq * row, 1.0f), *cache0 = hrand((int64_t)Tmax * 2 * KV, 1.0f);
    float *out = hzeros((int64_t)Tq * Q), *cache = hcopy(cache0, (int64_t)Tmax * 2 * KV);
    H->attention_decode(out, cache, qkv, p0, Tq, nh, nkv, hd);
    void *gq = gbf16(qkv, (int64_t)Tq * row), *gc = gbf16(cache0, (int64_t)Tmax * 2 * KV);
    void *go = galloc((size_t)Tq * Q * 2);
    gpoison(go, (size_t)Tq * Q * 2);
    G->attention_decode(go, gc, gq, p0, Tq, nh, nkv, hd);
    float *o = dl_bf16(go, (int64_t)Tq * Q), *c = dl_bf16(gc, (int64_t)Tmax * 2 * KV);
    check("attention_decode out", shape, o, out, (int64_t)Tq * Q, TOL);
    check("attention_decode kv_cache", shape, c, cache, (int64_t)Tmax * 2 * KV, TOL_EXACT);
    G->free(gq), G->free(gc), G->free(go);
    free(qkv), free(cache0), free(out), free(cache), free(o), free(c);
}

static int32_t *targets_with_ignored(int N, int V) {
    int32_t *t = lj_malloc((size_t)N * 4);
    for (int n = 0; n < N; n++) t[n] = n % 7 == 3 ? -1 : (int32_t)lj_rng_below(&g_h->rng, (uint64_t)V);
    return t;
}

static void test_cross_entropy(int N, int V) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d V=%d", N, V);
    int64_t n = (int64_t)N * V;
    float dloss = 1.0f / N;
    float *logits = hrand(n, 3.0f), *losses = hzeros(N), *dl = hcopy(logits, n);
    int32_t *t = targets_with_ignored(N, V);
    H->cross_entropy_forward_backward(losses, dl, dl, t, N, V, dloss);
    void *gl = gbf16(logits, n), *gt = gi32(t, N), *gloss = galloc((size_t)N * 4);
    gpoison(gloss, (size_t)N * 4);
    G->cross_entropy_forward_backward(gloss, gl, gl, gt, N, V, dloss); /* in place */
    float *ol = dl_f32(gloss, N), *od = dl_bf16(gl, n);
    check("cross_entropy_fwd_bwd losses", shape, ol, losses, N, 1e-4, 1e-3);
    check("cross_entropy_fwd_bwd dlogits", shape, od, dl, n, TOL);
    G->free(gl), G->free(gt), G->free(gloss);
    free(logits), free(losses), free(dl), free(t), free(ol), free(od);
}

/* Fused lm_head + CE against the CPU's fused op, and against the GPU's unfused path
 * (matmul_forward, cross_entropy_forward_backward, matmul_backward). */
static void test_cross_entropy_fused(int N, int C, int V) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d V=%d", N, C, V);
    float dloss = 1.0f / N;
    float *x = hrand((int64_t)N * C, 1.0f), *w = hrand((int64_t)V * C, 0.2f), *dw0 = hrand((int64_t)V * C, 0.01f);
    int32_t *t = targets_with_ignored(N, V);
    float *losses = hzeros(N), *dx = hzeros((int64_t)N * C), *dw = hcopy(dw0, (int64_t)V * C);
    void *hws = lj_malloc(H->cross_entropy_fused_workspace_bytes(N, C, V) + 1);
    H->cross_entropy_fused(losses, dx, dw, x, w, t, N, C, V, dloss, hws);
    void *gx = gbf16(x, (int64_t)N * C), *gw = gbf16(w, (int64_t)V * C), *gt = gi32(t, N);
    void *gloss = galloc((size_t)N * 4), *gdx = galloc((size_t)N * C * 2), *gdw = ggrad(dw0, (int64_t)V * C);
    void *gws = galloc(G->cross_entropy_fused_workspace_bytes(N, C, V));
    gpoison(gloss, (size_t)N * 4), gpoison(gdx, (size_t)N * C * 2);
    G->cross_entropy_fused(gloss, gdx, gdw, gx, gw, gt, N, C, V, dloss, gws);
    float *ol = dl_f32(gloss, N), *odx = dl_bf16(gdx, (int64_t)N * C), *odw = dl_grad(gdw, (int64_t)V * C);
    check("cross_entropy_fused losses", shape, ol, losses, N, 2e-3, 1e-2);
    check("cross_entropy_fused dx", shape, odx, dx, (int64_t)N * C, TOL);
    check("cross_entropy_fused dw (+=)", shape, odw, dw, (int64_t)V * C, TOL);
    /* the unfused twin on the GPU */
    void *glog = galloc((size_t)N * V * 2), *gloss2 = galloc((size_t)N * 4), *gdx2 = galloc((size_t)N * C * 2);
    void *gdw2 = ggrad(dw0, (int64_t)V * C);
    G->matmul_forward(glog, gx, gw, N, C, V);
    G->cross_entropy_forward_backward(gloss2, glog, glog, gt, N, V, dloss);
    G->matmul_backward(gdx2, gdw2, glog, gx, gw, N, C, V, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
    float *ul = dl_f32(gloss2, N), *udx = dl_bf16(gdx2, (int64_t)N * C), *udw = dl_grad(gdw2, (int64_t)V * C);
    /* the chunk's GEMM may pick another algorithm than the full one: logits can differ by a
     * bf16 rounding step, hence bf16 tolerances */
    check("cross_entropy fused vs unfused losses", shape, ol, ul, N, 1e-3, 1e-2);
    check("cross_entropy fused vs unfused dx", shape, odx, udx, (int64_t)N * C, TOL);
    check("cross_entropy fused vs unfused dw", shape, odw, udw, (int64_t)V * C, TOL);
    /* forward only (dx NULL): losses alone */
    gpoison(gloss, (size_t)N * 4);
    G->cross_entropy_fused(gloss, NULL, NULL, gx, gw, gt, N, C, V, dloss, gws);
    float *fl = dl_f32(gloss, N);
    check("cross_entropy_fused losses (no grad)", shape, fl, losses, N, 2e-3, 1e-2);
    G->free(gx), G->free(gw), G->free(gt), G->free(gloss), G->free(gdx), G->free(gdw), G->free(gws);
    G->free(glog), G->free(gloss2), G->free(gdx2), G->free(gdw2);
    free(x), free(w), free(dw0), free(t), free(losses), free(dx), free(dw), free(hws), free(ol), free(odx);
    free(odw), free(ul), free(udx), free(udw), free(fl);
}

static void test_adamw(int64_t total, float max_grad_norm) {
    char shape[80];
    snprintf(shape, sizeof shape, "n=%lld clip=%g", (long long)total, max_grad_norm);
    /* three segments with a gap, different weight decay; plus many small ones to pass one
     * launch's segment table */
    lj_adamw_segment seg[120];
    int ns = 0;
    int64_t off = 0;
    seg[ns++] = (lj_adamw_segment){off, total / 2, 0.1f, 0};
    off += total / 2 + 3;
    seg[ns++] = (lj_adamw_segment){off, total / 4, 0.0f, 1}; /* lr group 1 (--decoupled-lr's) */
    off += total / 4;
    while (ns < 110 && off + 17 < total) {
        seg[ns++] = (lj_adamw_segment){off, 17, ns % 2 ? 0.01f : 0.0f, ns % 3 == 0};
        off += 17;
    }
    if (off < total) seg[ns++] = (lj_adamw_segment){off, total - off, 0.05f, 0};
    lj_adamw_hparams hp = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .max_grad_norm = max_grad_norm};
    float sc[LJ_ADAMW_NUM_SCALARS]; /* lr 1e-3 (group 1: 4e-4) at step 3: host memory for H, device memory for G */
    lj_adamw_step_scalars2(sc, &hp, 1e-3f, 4e-4f, 3);
    float *p = hrand(total, 1.0f), *g = hrand(total, 1.0f), *m = hrand(total, 0.1f), *v = hzeros(total);
    for (int64_t i = 0; i < total; i++) v[i] = fabsf((float)lj_rng_normal(&g_h->rng)) * 0.01f;
    double s = 0;
    for (int64_t i = 0; i < total; i++) s += (double)g[i] * g[i];
    float gn = (float)s;
    float *hp_master = hcopy(p, total), *hm = hcopy(m, total), *hv = hcopy(v, total), *hparams = hcopy(p, total);
    H->adamw_update(hparams, hp_master, g, hm, hv, seg, ns, &hp, sc, &gn);
    void *gp = galloc((size_t)total * 2), *gmaster = gf32(p, total), *gg = ggrad(g, total), *gm = gf32(m, total);
    void *gv = gf32(v, total), *ggn = gf32(&gn, 1), *gsc = gf32(sc, LJ_ADAMW_NUM_SCALARS);
    gpoison(gp, (size_t)total * 2);
    G->adamw_update(gp, gmaster, gg, gm, gv, seg, ns, &hp, gsc, ggn);
    float *op = dl_bf16(gp, total), *om = dl_f32(gmaster, total), *omm = dl_f32(gm, total), *ov = dl_f32(gv, total);
    /* params outside every segment stay poisoned on the GPU: compare the segments only */
    float *ref_bf = hzeros(total), *op_seg = hzeros(total);
    for (int i = 0; i < ns; i++)
        for (int64_t k = 0; k < seg[i].count; k++) {
            int64_t e = seg[i].offset + k;
            ref_bf[e] = lj_bf16_to_f32(lj_f32_to_bf16(hp_master[e]));
            op_seg[e] = op[e];
        }
    check("adamw_update master", shape, om, hp_master, total, 1e-6, 1e-5);
    check("adamw_update m", shape, omm, hm, total, 1e-6, 1e-5);
    check("adamw_update v", shape, ov, hv, total, 1e-6, 1e-5);
    check("adamw_update params (bf16)", shape, op_seg, ref_bf, total, 1e-2, 1e-2);
    G->free(gp), G->free(gmaster), G->free(gg), G->free(gm), G->free(gv), G->free(ggn), G->free(gsc);
    free(p), free(g), free(m), free(v), free(hp_master), free(hm), free(hv), free(hparams), free(op), free(om);
    free(omm), free(ov), free(ref_bf), free(op_seg);
}

/* ---- CUDA graph capture ------------------------------------------------------------- */

/* A chain of ops shaped like one layer's step, on device buffers; every output is a separate
 * buffer and every accumulated gradient is zeroed inside the chain, so the chain is
 * idempotent (the optimizer state is restored from copies first) except for AdamW's step
 * scalars (lr, bias corrections), which it reads from device memory (`scalars`): a replay
 * takes the values uploaded before its launch, as the training step's graph does. */
typedef struct {
    int B, T, C, nh, nkv, hd, I, V, N, QKV;
    int64_t P; /* flat parameter count: w_qkv, w_up, norm */
    int32_t *ids, *targets;
    void *wte, *x, *w_norm, *xn, *w_qkv, *qkv, *att, *lse, *att_ws, *dqkv, *datt, *gu, *w_up, *h, *dh, *dgu, *dxn;
    void *dx_norm, *losses, *dx_ce, *dwte, *norm_ws, *ce_ws, *emb_ws, *rstd, *cosv, *sinv, *grads, *gnorm, *gn_ws;
    void *master, *master0, *m, *m0, *v, *v0, *params, *w_lm, *dw_lm, *scalars;
} graph_bufs;

static const lj_adamw_hparams g_graph_hp = {0.9f, 0.95f, 1e-8f, 1.0f};

/* Uploads the AdamW step scalars of (lr, step) into g->scalars (stream order, outside capture). */
static void graph_set_step(const graph_bufs *g, float lr, int step) {
    float sc[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(sc, &g_graph_hp, lr, step);
    G->upload(g->scalars, sc, sizeof sc);
}

static void graph_chain(const graph_bufs *g) {
    const lj_ops *o = G;
    const size_t gs = grad_size();
    char *grads = g->grads;
    char *dw_qkv = grads, *dw_up = grads + (size_t)g->QKV * g->C * gs, *dw_norm = dw_up + (size_t)2 * g->I * g->C * gs;
    o->memset_zero(g->grads, (size_t)g->P * gs);
    o->memset_zero(g->dwte, (size_t)g->V * g->C * gs);
    o->memset_zero(g->dx_norm, (size_t)g->N * g->C * 2);
    o->embedding_forward(g->x, g->ids, g->wte, g->N, g->C);
    o->rmsnorm_forward(g->xn, g->rstd, g->x, g->w_norm, g->N, g->C, 1e-5f);
    o->matmul_forward(g->qkv, g->xn, g->w_qkv, g->N, g->C, g->QKV);
    o->rope_forward(g->qkv, g->cosv, g->sinv, g->B, g->T, g->nh, g->nkv, g->hd);
    o->attention_forward(g->att, g->lse, g->qkv, g->B, g->T, g->nh, g->nkv, g->hd, g->att_ws);
    o->matmul_forward(g->gu, g->att, g->w_up, g->N, g->C, 2 * g->I);
    o->swiglu_forward(g->h, g->gu, g->N, g->I);
    o->memset_zero(g->dw_lm, (size_t)g->V * g->I * gs);
    o->cross_entropy_fused(g->losses, g->dh, g->dw_lm, g->h, g->w_lm, g->targets, g->N, g->I, g->V, 1.0f / g->N,
                           g->ce_ws);
    o->swiglu_backward(g->dgu, g->dh, g->gu, g->N, g->I);
    o->matmul_backward(g->datt, dw_up, g->dgu, g->att, g->w_up, g->N, g->C, 2 * g->I, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
    o->attention_backward(g->dqkv, g->datt, g->qkv, g->att, g->lse, g->B, g->T, g->nh, g->nkv, g->hd, g->att_ws);
    o->rope_backward(g->dqkv, g->cosv, g->sinv, g->B, g->T, g->nh, g->nkv, g->hd);
    o->matmul_backward(g->dxn, dw_qkv, g->dqkv, g->xn, g->w_qkv, g->N, g->C, g->QKV, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
    o->rmsnorm_backward(g->dx_norm, dw_norm, g->dxn, g->x, g->w_norm, g->rstd, g->N, g->C, LJ_GRAD_ACCUMULATE, g->norm_ws);
    o->embedding_backward(g->dwte, g->dx_norm, g->ids, g->N, g->C, g->emb_ws);
    o->global_norm_sq(g->gnorm, g->grads, g->P, g->gn_ws);
    o->copy(g->master, g->master0, (size_t)g->P * 4);
    o->copy(g->m, g->m0, (size_t)g->P * 4);
    o->copy(g->v, g->v0, (size_t)g->P * 4);
    lj_adamw_segment seg[2] = {{0, g->P / 2, 0.1f, 0}, {g->P / 2, g->P - g->P / 2, 0.0f, 0}};
    o->adamw_update(g->params, g->master, g->grads, g->m, g->v, seg, 2, &g_graph_hp, g->scalars, g->gnorm);
}

static void test_graph(void) {
    graph_bufs g;
    memset(&g, 0, sizeof g);
    g.B = 2, g.T = 100, g.nh = 4, g.nkv = 2, g.hd = 64, g.C = g.nh * g.hd, g.I = 160, g.V = 1000;
    g.N = g.B * g.T, g.QKV = (g.nh + 2 * g.nkv) * g.hd;
    g.P = (int64_t)g.QKV * g.C + (int64_t)2 * g.I * g.C + g.C;
    int32_t *ids = lj_malloc((size_t)g.N * 4), *tg = lj_malloc((size_t)g.N * 4);
    for (int n = 0; n < g.N; n++) {
        ids[n] = (int32_t)lj_rng_below(&g_h->rng, (uint64_t)g.V);
        tg[n] = (int32_t)lj_rng_below(&g_h->rng, (uint64_t)g.V);
    }
    g.ids = gi32(ids, g.N), g.targets = gi32(tg, g.N);
    float *t;
#define RAND_BF16(field, count, scale) (t = hrand((count), (scale)), g.field = gbf16(t, (count)), free(t))
#define RAND_F32(field, count, scale) (t = hrand((count), (scale)), g.field = gf32(t, (count)), free(t))
    RAND_BF16(wte, (int64_t)g.V * g.C, 1.0f);
    RAND_BF16(w_lm, (int64_t)g.V * g.I, 0.1f);
    RAND_BF16(w_norm, g.C, 1.0f);
    RAND_BF16(w_qkv, (int64_t)g.QKV * g.C, 0.1f);
    RAND_BF16(w_up, (int64_t)2 * g.I * g.C, 0.1f);
    RAND_F32(master0, g.P, 0.1f);
    RAND_F32(m0, g.P, 0.01f);
    t = hzeros(g.P);
    g.v0 = gf32(t, g.P);
    free(t);
    float *cs = hzeros((int64_t)g.T * g.hd / 2), *sn = hzeros((int64_t)g.T * g.hd / 2);
    rope_tables(cs, sn, g.T, g.hd);
    g.cosv = gf32(cs, (int64_t)g.T * g.hd / 2), g.sinv = gf32(sn, (int64_t)g.T * g.hd / 2);
    free(cs), free(sn);
    size_t nc = (size_t)g.N * g.C;
    g.x = galloc(nc * 2), g.xn = galloc(nc * 2), g.qkv = galloc((size_t)g.N * g.QKV * 2);
    g.att = galloc(nc * 2), g.lse = galloc((size_t)g.B * g.nh * g.T * 4);
    g.att_ws = galloc(G->attention_workspace_bytes(g.B, g.T, g.nh, g.nkv, g.hd));
    g.dqkv = galloc((size_t)g.N * g.QKV * 2), g.datt = galloc(nc * 2), g.gu = galloc((size_t)g.N * 2 * g.I * 2);
    g.h = galloc((size_t)g.N * g.I * 2), g.dh = galloc((size_t)g.N * g.I * 2), g.dgu = galloc((size_t)g.N * 2 * g.I * 2);
    g.dxn = galloc(nc * 2), g.dx_norm = galloc(nc * 2), g.losses = galloc((size_t)g.N * 4);
    g.dwte = galloc((size_t)g.V * g.C * grad_size()), g.rstd = galloc((size_t)g.N * 4);
    g.norm_ws = galloc(G->rmsnorm_backward_workspace_bytes(g.N, g.C));
    g.ce_ws = galloc(G->cross_entropy_fused_workspace_bytes(g.N, g.I, g.V));
    g.emb_ws = galloc(G->embedding_backward_workspace_bytes(g.N));
    g.grads = galloc((size_t)g.P * grad_size()), g.gnorm = galloc(4), g.gn_ws = galloc(G->global_norm_workspace_bytes(g.P));
    g.master = galloc((size_t)g.P * 4), g.m = galloc((size_t)g.P * 4), g.v = galloc((size_t)g.P * 4);
    g.params = galloc((size_t)g.P * 2), g.dw_lm = galloc((size_t)g.V * g.I * grad_size());
    g.scalars = galloc(LJ_ADAMW_NUM_SCALARS * sizeof(float));

    /* what is compared: name, buffer, elements, bf16?, exact? (atomics make some inexact) */
    struct {
        const char *name;
        void *buf;
        int64_t n;
        int bf16, exact;
    } outs[] = {{"losses", g.losses, g.N, 0, 1},          {"attention out", g.att, (int64_t)nc, 1, 1},
                {"dqkv", g.dqkv, (int64_t)g.N * g.QKV, 1, 0}, {"dx (rmsnorm)", g.dx_norm, (int64_t)nc, 1, 0},
                {"dwte", g.dwte, (int64_t)g.V * g.C, g_bf16_grads, 1},
                {"grads", g.grads, g.P, g_bf16_grads, 0},
                {"master", g.master, g.P, 0, 0},
                {"params", g.params, g.P, 1, 0},
                {"dw lm_head", g.dw_lm, (int64_t)g.V * g.I, g_bf16_grads, 1}};
    int nouts = (int)(sizeof outs / sizeof outs[0]);
    /* two optimizer steps with different lr and step t: eager first */
    const struct {
        float lr;
        int step;
    } steps[2] = {{1e-3f, 1}, {2.5e-4f, 7}};
    float *eager[2][16];
    int i_master = 0;
    for (int i = 0; i < nouts; i++)
        if (!strcmp(outs[i].name, "master")) i_master = i;
    for (int k = 0; k < 2; k++) {
        graph_set_step(&g, steps[k].lr, steps[k].step);
        graph_chain(&g);
        for (int i = 0; i < nouts; i++)
            eager[k][i] = outs[i].bf16 ? dl_bf16(outs[i].buf, outs[i].n) : dl_f32(outs[i].buf, outs[i].n);
    }
    /* the steps must update the weights differently, or a replay that kept the captured
     * step's scalars would go unseen */
    {
        int64_t differ = 0;
        for (int64_t k = 0; k < g.P; k++) differ += eager[0][i_master][k] != eager[1][i_master][k];
        lj_harness_check_true(g_h, "cuda_graph AdamW steps differ", "chain", differ != 0,
                              "lr %g t %d vs lr %g t %d: %lld of %lld master weights differ", steps[0].lr,
                              steps[0].step, steps[1].lr, steps[1].step, (long long)differ, (long long)g.P);
    }

    /* capture once (the scalars of neither step baked in), then replay each step after
     * uploading its scalars; step 0 is replayed twice */
    cudaStream_t s = lj_cuda_stream();
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    for (int i = 0; i < nouts; i++) gpoison(outs[i].buf, (size_t)outs[i].n * (outs[i].bf16 ? 2 : 4));
    gpoison(g.scalars, LJ_ADAMW_NUM_SCALARS * sizeof(float));
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    if (e == cudaSuccess) {
        graph_chain(&g);
        e = cudaStreamEndCapture(s, &graph);
    }
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    for (int k = 0; k < 2 && e == cudaSuccess; k++) {
        for (int i = 0; i < nouts; i++) gpoison(outs[i].buf, (size_t)outs[i].n * (outs[i].bf16 ? 2 : 4));
        graph_set_step(&g, steps[k].lr, steps[k].step); /* in stream order before the launch */
        for (int r = 0; r < (k == 0 ? 2 : 1) && e == cudaSuccess; r++) e = cudaGraphLaunch(exec, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        if (e != cudaSuccess) break;
        if (k == 0) {
            size_t nodes = 0;
            cudaGraphGetNodes(graph, NULL, &nodes);
            lj_harness_check_true(g_h, "cuda_graph capture+replay", "chain", 1,
                                  "%zu nodes, step 1 replayed twice, then step 2", nodes);
        }
        char shape[64];
        snprintf(shape, sizeof shape, "chain, lr %g step %d", steps[k].lr, steps[k].step);
        for (int i = 0; i < nouts; i++) {
            float *got = outs[i].bf16 ? dl_bf16(outs[i].buf, outs[i].n) : dl_f32(outs[i].buf, outs[i].n);
            char op[64];
            snprintf(op, sizeof op, "cuda_graph replay vs eager %s", outs[i].name);
            if (outs[i].exact)
                check(op, shape, got, eager[k][i], outs[i].n, TOL_EXACT);
            else
                check(op, shape, got, eager[k][i], outs[i].n, 1e-3, 1e-2);
            free(got);
        }
    }
    if (e != cudaSuccess) {
        lj_harness_check_true(g_h, "cuda_graph capture+replay", "chain", 0, "%s", cudaGetErrorString(e));
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < nouts; i++) free(eager[k][i]);
    void *bufs[] = {g.ids, g.targets, g.wte, g.x, g.w_norm, g.xn, g.w_qkv, g.qkv, g.att, g.lse, g.att_ws, g.dqkv,
                    g.datt, g.gu, g.w_up, g.h, g.dh, g.dgu, g.dxn, g.dx_norm, g.losses, g.dwte, g.norm_ws, g.ce_ws,
                    g.emb_ws, g.rstd, g.cosv, g.sinv, g.grads, g.gnorm, g.gn_ws, g.master, g.master0, g.m, g.m0, g.v, g.v0,
                    g.params, g.w_lm, g.dw_lm, g.scalars};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) G->free(bufs[i]);
    free(ids), free(tg);
#undef RAND_BF16
#undef RAND_F32
}


/* ---- the table's entry points ---------------------------------------------------------- */

/* d = {n} */
void lj_case_cuda_cast(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(h, c);
    test_cast(c->d[0]);
}
/* d = {B, T, nh, nkv, hd, kind}: kind -1 runs every kernel family the shape has (flash,
 * simple, flash with 1 m-tile at head_dim 64, cuDNN at head_dim 64 and 128); 3 cuDNN only. */
void lj_case_cuda_attention(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(h, c);
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], kind = c->d[5];
    if (kind >= 0) {
        test_attention(B, T, nh, nkv, hd, kind);
        return;
    }
    test_attention(B, T, nh, nkv, hd, 0);
    test_attention(B, T, nh, nkv, hd, 1);
    if (hd == 64) test_attention(B, T, nh, nkv, hd, 2);
    if (hd == 64 || hd == 128) test_attention(B, T, nh, nkv, hd, 3);
    if (hd == 64 || hd == 128) test_attention(B, T, nh, nkv, hd, 5);
}
/* no shape (B=1 T=256 nh=4 nkv=2 hd=128, fixed) */
void lj_case_cuda_attention_captured(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(h, c);
    test_attention_first_run_captured();
}
/* d = {p0, Tq, Tmax, nh, nkv, hd} */
void lj_case_cuda_attention_decode(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(h, c);
    test_decode(c->d[0], c->d[1], c->d[2], c->d[3], c->d[4], c->d[5]);
}
/* d = {N, V} */
void lj_case_cuda_cross_entropy(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(h, c);
    test_cross_entropy(c->d[0], c->d[1]);
}
/* d = {N, C, V} */
void lj_case_cuda_cross_entropy_fused(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(h, c);
    test_cross_entropy_fused(c->d[0], c->d[1], c->d[2]);
}
/* d = {n}; param = max_grad_norm */
void lj_case_cuda_adamw(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(h, c);
    test_adamw(c->d[0], (float)c->param);
}
/* no shape (the chain's sizes are fixed in test_graph) */
void lj_case_cuda_graph(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(h, c);
    test_graph();
}

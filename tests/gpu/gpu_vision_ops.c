/* gpu_vision_ops.c: the CUDA backend's vision-tower ops (ops.h: layernorm, gelu, embedding_bag,
 * attention_varlen, rows_gather / rows_scatter) against the CPU backend's on random inputs: the
 * same bf16-rounded values go to both, and every output and gradient of the CUDA op (bf16
 * activations; bf16 and fp32 gradient tables) is compared with the CPU's fp32 result by
 *   err = max_i |gpu_i - cpu_i| / (|cpu_i| + rms(cpu)),
 * within 2e-2 (a few bf16 roundings of 2^-8). Shapes: odd sizes off the vector paths, the
 * Qwen3-VL widths (V = 1024 and 1152, 4V, the tiny fixture's 32), attention with several
 * segments of odd lengths (one of a single row, one longer than a tile, images of several sizes
 * packed), head_dim 16 (tiny), 64 (2B, 4B), 72 (8B), 32 and 128, bidirectional and causal, GQA;
 * uniform segments (images of one resolution), which the AUTO table runs as one dense attention
 * on cuDNN where it can (its lse then [nseg, nh, T], checked in that layout). Each attention line
 * names the kernels that ran (cudnn, flash: the tensor-core kernels at head_dim 64, 72 and 128,
 * cuda-core). Then the tower's recompute (model/vision.h): a tower with recompute full against
 * the same tower without it, bit for bit (merger and DeepStack outputs, every gradient, the FP8
 * recipe state; bf16 and each FP8 recipe the GPU runs), on attention kernels without atomics.
 * Prints one line per check and a final count; exits 1 on any failure. Last, for
 * information only (no check depends on it), the time of the attention on the CUDA-core kernels,
 * the flash kernels and the AUTO table, and of the embedding-bag backward, at the towers' shapes.
 * Usage: gpu_vision_ops (needs a GPU; built with CUDA, never run by CTest). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/vl.h"
#include "ops/ops.h"
#include "parallel/parallel.h"
#include "plan/plan.h"
#include "train/ops_config.h"
#include "tests/test_util.h"

#ifdef LJ_HAVE_CUDA
#include "ops/cuda/cuda_common.h" /* lj_cuda_cudnn_attention_describe */
#include "ops/cuda/vision.h"      /* lj_cuda_attention_varlen_kernels */
#endif

#define TOL 2e-2

static int g_checks, g_failures;
static lj_rng g_rng;

/* ---- helpers ---- */

static float *randv(int64_t n, float scale, float offset) {
    float *x = lj_test_randf(&g_rng, n, scale);
    for (int64_t i = 0; i < n; i++) x[i] = lj_bf16_to_f32(lj_f32_to_bf16(x[i] + offset)); /* what both see */
    return x;
}

/* A device copy of host floats in `dtype` (bf16 or f32). */
static void *dev_put(const lj_ops *g, const float *h, int64_t n, lj_dtype dtype) {
    void *d = NULL;
    const size_t es = lj_dtype_size(dtype);
    if (g->alloc(&d, (size_t)(n > 0 ? n : 1) * es) != LJ_OK) {
        fprintf(stderr, "gpu_vision_ops: %s\n", lj_error_message());
        exit(1);
    }
    if (n <= 0) return d;
    if (dtype == LJ_DTYPE_F32) {
        g->upload(d, h, (size_t)n * 4);
    } else {
        uint16_t *b = lj_malloc((size_t)n * 2);
        for (int64_t i = 0; i < n; i++) b[i] = lj_f32_to_bf16(h[i]);
        g->upload(d, b, (size_t)n * 2);
        g->synchronize();
        free(b);
    }
    return d;
}

static void *dev_raw(const lj_ops *g, const void *h, size_t bytes) {
    void *d = NULL;
    if (g->alloc(&d, bytes ? bytes : 1) != LJ_OK) {
        fprintf(stderr, "gpu_vision_ops: %s\n", lj_error_message());
        exit(1);
    }
    if (bytes) g->upload(d, h, bytes);
    return d;
}

static float *dev_get(const lj_ops *g, const void *d, int64_t n, lj_dtype dtype) {
    float *h = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    g->synchronize();
    if (dtype == LJ_DTYPE_F32) {
        g->download(h, d, (size_t)n * 4);
    } else {
        uint16_t *b = lj_malloc((size_t)(n > 0 ? n : 1) * 2);
        g->download(b, d, (size_t)n * 2);
        for (int64_t i = 0; i < n; i++) h[i] = lj_bf16_to_f32(b[i]);
        free(b);
    }
    return h;
}

static void compare(const char *what, const float *gpu, const float *cpu, int64_t n) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)cpu[i] * cpu[i];
    const double rms = sqrt(ss / (double)(n > 0 ? n : 1)) + 1e-20;
    double err = 0.0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = isfinite(gpu[i]) ? fabs((double)gpu[i] - cpu[i]) / (fabs(cpu[i]) + rms) : INFINITY;
        if (!(e <= err)) err = e, at = i;
    }
    const int ok = err <= TOL;
    g_checks++;
    g_failures += !ok;
    printf("  [%s] %-72s %.2e (limit %.0e)", ok ? " ok " : "FAIL", what, err, TOL);
    if (!ok) printf("  at %lld: gpu %.6g cpu %.6g", (long long)at, gpu[at], cpu[at]);
    printf("\n");
}

static const char *gname(const lj_ops *g) { return g->grad_dtype == LJ_DTYPE_F32 ? "f32 grads" : "bf16 grads"; }

/* ---- LayerNorm ---- */

static void check_layernorm(const lj_ops *g, const lj_ops *c, int N, int C) {
    char what[160];
    const int64_t n = (int64_t)N * C;
    float *x = randv(n, 1.0f, 0.3f), *w = randv(C, 0.5f, 1.0f), *b = randv(C, 0.5f, 0.0f), *dout = randv(n, 1.0f, 0.0f);
    float *dx0 = randv(n, 1.0f, 0.0f), *dw0 = randv(C, 1.0f, 0.0f), *db0 = randv(C, 1.0f, 0.0f);
    /* CPU */
    float *out = lj_malloc(n * 4), *mean = lj_malloc(N * 4), *rstd = lj_malloc(N * 4);
    c->layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-6f);
    float *dx = lj_malloc(n * 4), *dw = lj_malloc(C * 4), *db = lj_malloc(C * 4);
    memcpy(dx, dx0, n * 4), memcpy(dw, dw0, C * 4), memcpy(db, db0, C * 4);
    c->layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, LJ_GRAD_ACCUMULATE, LJ_GRAD_ACCUMULATE, NULL);
    float *dxo = lj_malloc(n * 4), *dwo = lj_malloc(C * 4), *dbo = lj_malloc(C * 4);
    c->layernorm_backward(dxo, dwo, dbo, dout, x, w, mean, rstd, N, C, LJ_GRAD_OVERWRITE, LJ_GRAD_OVERWRITE, NULL);
    /* GPU */
    const lj_dtype A = g->act_dtype, G = g->grad_dtype;
    void *gx = dev_put(g, x, n, A), *gw = dev_put(g, w, C, A), *gb = dev_put(g, b, C, A), *gd = dev_put(g, dout, n, A);
    void *gout = dev_put(g, out, n, A) /* overwritten */, *gmean = NULL, *grstd = NULL, *gws = NULL;
    g->alloc(&gmean, (size_t)N * 4), g->alloc(&grstd, (size_t)N * 4);
    g->alloc(&gws, g->layernorm_backward_workspace_bytes(N, C) + 1);
    g->layernorm_forward(gout, gmean, grstd, gx, gw, gb, N, C, 1e-6f);
    float *hout = dev_get(g, gout, n, A), *hmean = dev_get(g, gmean, N, LJ_DTYPE_F32),
          *hrstd = dev_get(g, grstd, N, LJ_DTYPE_F32);
    snprintf(what, sizeof what, "layernorm_forward N=%d C=%d out", N, C);
    compare(what, hout, out, n);
    snprintf(what, sizeof what, "layernorm_forward N=%d C=%d mean", N, C);
    compare(what, hmean, mean, N);
    snprintf(what, sizeof what, "layernorm_forward N=%d C=%d rstd", N, C);
    compare(what, hrstd, rstd, N);
    for (int mode = 0; mode < 2; mode++) {
        const lj_grad_mode m = mode ? LJ_GRAD_ACCUMULATE : LJ_GRAD_OVERWRITE;
        void *gdx = dev_put(g, dx0, n, A), *gdw = dev_put(g, dw0, C, G), *gdb = dev_put(g, db0, C, G);
        g->layernorm_backward(gdx, gdw, gdb, gd, gx, gw, gmean, grstd, N, C, m, m, gws);
        float *hdx = dev_get(g, gdx, n, A), *hdw = dev_get(g, gdw, C, G), *hdb = dev_get(g, gdb, C, G);
        const char *mn = mode ? "+=" : "=";
        snprintf(what, sizeof what, "layernorm_backward N=%d C=%d dx %s (%s)", N, C, mn, gname(g));
        compare(what, hdx, mode ? dx : dxo, n);
        snprintf(what, sizeof what, "layernorm_backward N=%d C=%d dw %s (%s)", N, C, mn, gname(g));
        compare(what, hdw, mode ? dw : dwo, C);
        snprintf(what, sizeof what, "layernorm_backward N=%d C=%d db %s (%s)", N, C, mn, gname(g));
        compare(what, hdb, mode ? db : dbo, C);
        free(hdx), free(hdw), free(hdb);
        g->free(gdx), g->free(gdw), g->free(gdb);
    }
    free(hout), free(hmean), free(hrstd);
    g->free(gx), g->free(gw), g->free(gb), g->free(gd), g->free(gout), g->free(gmean), g->free(grstd), g->free(gws);
    free(x), free(w), free(b), free(dout), free(dx0), free(dw0), free(db0), free(out), free(mean), free(rstd);
    free(dx), free(dw), free(db), free(dxo), free(dwo), free(dbo);
}

/* ---- GELU ---- */

static void check_gelu(const lj_ops *g, const lj_ops *c, int64_t n, int form) {
    char what[160];
    const lj_dtype A = g->act_dtype;
    float *x = randv(n, 2.0f, 0.0f), *d = randv(n, 1.0f, 0.0f);
    float *out = lj_malloc(n * 4), *dx = lj_malloc(n * 4);
    c->gelu_forward(out, x, n, form);
    c->gelu_backward(dx, d, x, n, form);
    void *gx = dev_put(g, x, n, A), *gd = dev_put(g, d, n, A), *go = dev_put(g, x, n, A);
    g->gelu_forward(go, gx, n, form);
    float *h = dev_get(g, go, n, A);
    snprintf(what, sizeof what, "gelu_forward n=%lld %s", (long long)n, form ? "tanh" : "erf");
    compare(what, h, out, n);
    free(h);
    g->gelu_backward(gd, gd, gx, n, form); /* in place, as the tower calls it */
    h = dev_get(g, gd, n, A);
    snprintf(what, sizeof what, "gelu_backward n=%lld %s (in place)", (long long)n, form ? "tanh" : "erf");
    compare(what, h, dx, n);
    free(h);
    g->free(gx), g->free(gd), g->free(go);
    free(x), free(d), free(out), free(dx);
}

/* ---- embedding bag ---- */

static void check_embedding_bag(const lj_ops *g, const lj_ops *c, int R, int N, int K, int C) {
    char what[160];
    const lj_dtype A = g->act_dtype, G = g->grad_dtype;
    float *table = randv((int64_t)R * C, 1.0f, 0.0f), *dout = randv((int64_t)N * C, 1.0f, 0.0f);
    float *dt0 = randv((int64_t)R * C, 1.0f, 0.0f);
    float *w = lj_malloc((size_t)N * K * 4);
    int32_t *idx = lj_malloc((size_t)N * K * 4);
    for (int i = 0; i < N * K; i++) {
        w[i] = lj_rng_uniform(&g_rng);
        idx[i] = (int32_t)lj_rng_below(&g_rng, (uint64_t)(R - 1)); /* repeats; the last row never named */
    }
    float *out = lj_malloc((size_t)N * C * 4), *dt = lj_malloc((size_t)R * C * 4);
    c->embedding_bag_forward(out, table, idx, w, N, K, C);
    memcpy(dt, dt0, (size_t)R * C * 4);
    c->embedding_bag_backward(dt, dout, idx, w, N, K, C);
    void *gt = dev_put(g, table, (int64_t)R * C, A), *gdo = dev_put(g, dout, (int64_t)N * C, A);
    void *gout = dev_put(g, out, (int64_t)N * C, A), *gdt = dev_put(g, dt0, (int64_t)R * C, G);
    void *gidx = dev_raw(g, idx, (size_t)N * K * 4), *gw = dev_raw(g, w, (size_t)N * K * 4);
    g->embedding_bag_forward(gout, gt, gidx, gw, N, K, C);
    g->embedding_bag_backward(gdt, gdo, gidx, gw, N, K, C);
    float *ho = dev_get(g, gout, (int64_t)N * C, A), *hdt = dev_get(g, gdt, (int64_t)R * C, G);
    snprintf(what, sizeof what, "embedding_bag_forward R=%d N=%d K=%d C=%d", R, N, K, C);
    compare(what, ho, out, (int64_t)N * C);
    snprintf(what, sizeof what, "embedding_bag_backward R=%d N=%d K=%d C=%d dtable += (%s)", R, N, K, C, gname(g));
    compare(what, hdt, dt, (int64_t)R * C);
    free(ho), free(hdt);
    g->free(gt), g->free(gdo), g->free(gout), g->free(gdt), g->free(gidx), g->free(gw);
    free(table), free(dout), free(dt0), free(w), free(idx), free(out), free(dt);
}

/* ---- attention over segments ---- */

static void check_attention(const lj_ops *g, const lj_ops *c, const int32_t *cu, int nseg, int nh, int nkv, int hd,
                            int causal) {
    char what[200], segs[64];
    const lj_dtype A = g->act_dtype;
    const int N = cu[nseg], row = (nh + 2 * nkv) * hd, Q = nh * hd;
    int mx = 0;
    for (int s = 0; s < nseg; s++) mx = cu[s + 1] - cu[s] > mx ? cu[s + 1] - cu[s] : mx;
    snprintf(segs, sizeof segs, "N=%d nseg=%d max=%d", N, nseg, mx);
    float *qkv = randv((int64_t)N * row, 1.0f, 0.0f), *dout = randv((int64_t)N * Q, 1.0f, 0.0f);
    float *out = lj_malloc((size_t)N * Q * 4), *lse = lj_malloc((size_t)nh * N * 4), *dqkv = lj_malloc((size_t)N * row * 4);
    void *ws = lj_malloc(c->attention_varlen_workspace_bytes(N, nh, nkv, hd) + 1);
    c->attention_varlen_forward(out, lse, qkv, cu, nseg, mx, N, nh, nkv, hd, causal, ws);
    c->attention_varlen_backward(dqkv, dout, qkv, out, lse, cu, nseg, mx, N, nh, nkv, hd, causal, ws);
    void *gq = dev_put(g, qkv, (int64_t)N * row, A), *gdo = dev_put(g, dout, (int64_t)N * Q, A);
    void *go = dev_put(g, out, (int64_t)N * Q, A), *gl = NULL, *gdq = NULL, *gws = NULL;
    void *gcu = dev_raw(g, cu, (size_t)(nseg + 1) * 4);
    g->alloc(&gl, (size_t)nh * N * 4);
    g->alloc(&gdq, (size_t)N * row * 2);
    g->memset_zero(gdq, (size_t)N * row * 2);
    g->alloc(&gws, g->attention_varlen_workspace_bytes(N, nh, nkv, hd) + 1);
    /* a poisoned gradient: every element must be overwritten */
    uint16_t *poison = lj_malloc((size_t)N * row * 2);
    for (int64_t i = 0; i < (int64_t)N * row; i++) poison[i] = 0x7fc0; /* NaN */
    g->upload(gdq, poison, (size_t)N * row * 2);
    g->attention_varlen_forward(go, gl, gq, gcu, nseg, mx, N, nh, nkv, hd, causal, gws);
    g->attention_varlen_backward(gdq, gdo, gq, go, gl, gcu, nseg, mx, N, nh, nkv, hd, causal, gws);
    float *ho = dev_get(g, go, (int64_t)N * Q, A), *hl = dev_get(g, gl, (int64_t)nh * N, LJ_DTYPE_F32);
    float *hd_ = dev_get(g, gdq, (int64_t)N * row, A);
    char kind[64];
    snprintf(kind, sizeof kind, "%s", causal ? "causal" : "bidirectional");
#ifdef LJ_HAVE_CUDA
    /* the kernels that ran: cudnn, flash or cuda-core (forward/backward where they differ) */
    const char *kf = lj_cuda_attention_varlen_kernels(&g->config, nseg, mx, N, nh, nkv, hd, causal, 0);
    const char *kb = lj_cuda_attention_varlen_kernels(&g->config, nseg, mx, N, nh, nkv, hd, causal, 1);
    if (strcmp(kf, kb) == 0) snprintf(kind, sizeof kind, "%s %s", causal ? "causal" : "bidirectional", kf);
    else snprintf(kind, sizeof kind, "%s %s/%s", causal ? "causal" : "bidirectional", kf, kb);
#endif
    snprintf(what, sizeof what, "attention_varlen %s %s nh=%d nkv=%d hd=%d out", kind, segs, nh, nkv, hd);
    compare(what, ho, out, (int64_t)N * Q);
    /* uniform segments may have run as one dense attention (cuDNN): lse [nseg, nh, T] then; the
       layout the GPU's values match names the path (random inputs: the two differ) */
    const char *path = "";
    float *lse_ref = lse, *lse_dense = NULL;
    if (nseg > 1 && nseg * mx == N) {
        lse_dense = lj_malloc((size_t)nh * N * 4);
        for (int s = 0; s < nseg; s++)
            for (int h = 0; h < nh; h++)
                for (int t = 0; t < mx; t++)
                    lse_dense[((size_t)s * nh + h) * mx + t] = lse[(size_t)h * N + (size_t)s * mx + t];
        double e_own = 0.0, e_dense = 0.0;
        for (int64_t i = 0; i < (int64_t)nh * N; i++) {
            e_own = fmax(e_own, fabs((double)hl[i] - lse[i]));
            e_dense = fmax(e_dense, fabs((double)hl[i] - lse_dense[i]));
        }
        if (e_dense < e_own) lse_ref = lse_dense, path = " (dense)";
        else path = " (varlen)";
    }
    snprintf(what, sizeof what, "attention_varlen %s %s nh=%d nkv=%d hd=%d lse%s", kind, segs, nh, nkv, hd, path);
    compare(what, hl, lse_ref, (int64_t)nh * N);
    free(lse_dense);
    /* the three parts of dqkv on their own (each has its own scale) */
    const char *part[3] = {"dq", "dk", "dv"};
    const int off[3] = {0, Q, Q + nkv * hd}, width[3] = {Q, nkv * hd, nkv * hd};
    for (int p = 0; p < 3; p++) {
        float *a = lj_malloc((size_t)N * width[p] * 4), *b = lj_malloc((size_t)N * width[p] * 4);
        for (int i = 0; i < N; i++) {
            memcpy(a + (size_t)i * width[p], hd_ + (size_t)i * row + off[p], (size_t)width[p] * 4);
            memcpy(b + (size_t)i * width[p], dqkv + (size_t)i * row + off[p], (size_t)width[p] * 4);
        }
        snprintf(what, sizeof what, "attention_varlen %s %s nh=%d nkv=%d hd=%d %s", kind, segs, nh, nkv, hd, part[p]);
        compare(what, a, b, (int64_t)N * width[p]);
        free(a), free(b);
    }
    free(ho), free(hl), free(hd_), free(poison);
    g->free(gq), g->free(gdo), g->free(go), g->free(gl), g->free(gdq), g->free(gws), g->free(gcu);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(ws);
}

/* ---- rows ---- */

static void check_rows(const lj_ops *g, const lj_ops *c, int R, int M, int C) {
    char what[160];
    const lj_dtype A = g->act_dtype;
    float *x = randv((int64_t)R * C, 1.0f, 0.0f), *src = randv((int64_t)M * C, 1.0f, 0.0f);
    int32_t *idx = lj_malloc((size_t)M * 4);
    for (int i = 0; i < M; i++) idx[i] = (int32_t)((i * 7 + 3) % R); /* distinct for R prime to 7 */
    float *gath = lj_malloc((size_t)M * C * 4), *xs = lj_malloc((size_t)R * C * 4);
    void *gx = dev_put(g, x, (int64_t)R * C, A), *gs = dev_put(g, src, (int64_t)M * C, A);
    void *gg = dev_put(g, src, (int64_t)M * C, A), *gidx = dev_raw(g, idx, (size_t)M * 4);
    c->rows_gather(gath, x, idx, M, C);
    g->rows_gather(gg, gx, gidx, M, C);
    float *h = dev_get(g, gg, (int64_t)M * C, A);
    snprintf(what, sizeof what, "rows_gather R=%d M=%d C=%d", R, M, C);
    compare(what, h, gath, (int64_t)M * C);
    free(h);
    const lj_grad_mode modes[3] = {LJ_GRAD_ACCUMULATE, LJ_GRAD_OVERWRITE, LJ_GRAD_OVERWRITE};
    const char *names[3] = {"+= src", "= src", "= 0 (no src)"};
    memcpy(xs, x, (size_t)R * C * 4);
    for (int k = 0; k < 3; k++) {
        c->rows_scatter(xs, k == 2 ? NULL : src, idx, M, C, modes[k]);
        g->rows_scatter(gx, k == 2 ? NULL : gs, gidx, M, C, modes[k]);
        h = dev_get(g, gx, (int64_t)R * C, A);
        snprintf(what, sizeof what, "rows_scatter R=%d M=%d C=%d %s", R, M, C, names[k]);
        compare(what, h, xs, (int64_t)R * C);
        free(h);
    }
    g->free(gx), g->free(gs), g->free(gg), g->free(gidx);
    free(x), free(src), free(idx), free(gath), free(xs);
}

/* ---- timing (information only) ---- */

/* ---- the tower's recompute (model/vision.h): bit for bit the tower without it ---- */

/* A training tower of cfg->vision for np patches and nimg images beside a decoder of cfg->text
 * (micro-batch 1, 16 tokens; only its plan hosts the tower's buffers) on `g`, its blocks'
 * recompute `vision`, the FP8 recipe `fp8` (NULL: bf16); planned, allocated, weights from seed 7. */
typedef struct {
    lj_model m;
    lj_plan plan;
    lj_vl vl;
} tower_run;

static void tower_build(tower_run *r, const lj_ops *g, const lj_vl_config *cfg, int np, int nimg, int vision,
                        const lj_linear_fp8_options *fp8) {
    lj_model_options o;
    memset(&o, 0, sizeof o);
    o.micro_batch_size = 1;
    o.seq_length = 16;
    o.training = 1;
    o.fused = 1;
    o.vision_recompute = vision;
    o.linear_recipe = fp8 ? LJ_LINEAR_RECIPE_FP8 : LJ_LINEAR_RECIPE_DEFAULT;
    o.fp8 = fp8 ? *fp8 : lj_linear_fp8_defaults();
    lj_model_init(&r->m, g, &cfg->text, &o);
    lj_parallelize(&r->m, NULL, NULL);
    if (lj_vl_init(&r->vl, &r->m, cfg, np, nimg) != LJ_OK) {
        fprintf(stderr, "gpu_vision_ops: %s\n", lj_error_message());
        exit(1);
    }
    lj_plan_build(&r->plan, &r->m);
    if (lj_plan_allocate(&r->plan, &r->m) != LJ_OK) {
        fprintf(stderr, "gpu_vision_ops: %s\n", lj_error_message());
        exit(1);
    }
    lj_vision_init_weights(&r->vl.vis, 7);
}

static void tower_free(tower_run *r, const lj_ops *g) {
    lj_vl_free(&r->vl);
    lj_plan_release(&r->plan, g);
    lj_plan_free(&r->plan);
    lj_model_free(&r->m);
}

/* The elements (n of `es` bytes each) in which a and b differ: a line and a check, which fails
 * for any. */
static void compare_bits(const char *what, const void *a, const void *b, int64_t n, size_t es) {
    int64_t diff = 0;
    for (int64_t i = 0; i < n; i++) diff += memcmp((const char *)a + i * es, (const char *)b + i * es, es) != 0;
    const int ok = diff == 0;
    printf("  [%s] %-64s %lld of %lld elements differ\n", ok ? " ok " : "FAIL", what, (long long)diff, (long long)n);
    g_checks++;
    g_failures += !ok;
}

/* n elements of `es` bytes of backend memory, as host bytes. */
static void *dev_bytes(const lj_ops *g, const void *d, int64_t n, size_t es) {
    void *h = lj_malloc((size_t)(n > 0 ? n : 1) * es);
    g->synchronize();
    g->download(h, d, (size_t)n * es);
    return h;
}

/* The tower of `cfg` on `g` with recompute 0 and 1 (FP8 recipe `fp8`, NULL: bf16) on the images
 * grid[nimg, 3]: the same random patches and merger gradients, two training passes of the tower
 * alone (lj_vision_forward, lj_vision_backward, each from zeroed gradients); after each, the final
 * and DeepStack merger outputs, every gradient and the FP8 recipe state must be the same bits. */
static void check_tower_recompute(const lj_ops *g, const char *label, const lj_vl_config *cfg, const int32_t *grid,
                                  int nimg, const lj_linear_fp8_options *fp8) {
    int np = 0;
    for (int i = 0; i < nimg; i++) np += grid[i * 3] * grid[i * 3 + 1] * grid[i * 3 + 2];
    const int P = lj_vision_patch_dim(&cfg->vision), m = cfg->vision.spatial_merge_size, m2 = m * m;
    const int Nt = np / m2, O = cfg->vision.out_hidden_size, D = cfg->vision.num_deepstack;
    float *pixels = randv((int64_t)np * P, 1.0f, 0.0f);
    float *dout[1 + LJ_VISION_MAX_DEEPSTACK];
    for (int j = 0; j <= D; j++) dout[j] = randv((int64_t)Nt * O, 0.01f, 0.0f);
    tower_run r[2];
    for (int k = 0; k < 2; k++) {
        tower_build(&r[k], g, cfg, np, nimg, k, fp8);
        lj_vision *vm = &r[k].vl.vis;
        if (lj_vision_set_images(vm, pixels, grid, nimg) != LJ_OK) {
            fprintf(stderr, "gpu_vision_ops: %s\n", lj_error_message());
            exit(1);
        }
        /* the merger gradients in the joint's buffers: d_embed, then DeepStack j's */
        void *dst[1 + LJ_VISION_MAX_DEEPSTACK] = {r[k].vl.d_embed};
        for (int j = 0; j < D; j++) dst[1 + j] = r[k].vl.d_deepstack[j];
        for (int j = 0; j <= D; j++) {
            void *d = dev_put(g, dout[j], (int64_t)Nt * O, g->act_dtype);
            g->copy(dst[j], d, (size_t)Nt * O * lj_dtype_size(g->act_dtype));
            g->synchronize();
            g->free(d);
        }
    }
    const lj_vision *a = &r[0].vl.vis, *b = &r[1].vl.vis;
    const int64_t nv = a->layout.total;
    const size_t ea = lj_dtype_size(g->act_dtype), eg = lj_dtype_size(g->grad_dtype);
    printf("  tower %s, %s (%d patches, %d blocks, head_dim %d): recompute full against none, plan %.1f MiB "
           "smaller\n", label, fp8 ? lj_fp8_recipe_name(fp8->recipe) : "bf16", np, cfg->vision.depth,
           a->spec.hd, (double)(r[0].plan.total_bytes - r[1].plan.total_bytes) / (1 << 20));
    for (int pass = 1; pass <= 2; pass++) {
        for (int k = 0; k < 2; k++) {
            lj_vision *vm = &r[k].vl.vis;
            lj_vision_zero_grads(vm);
            lj_vision_forward(vm, 1);
            lj_vision_backward(vm, r[k].vl.d_embed, (const void *const *)r[k].vl.d_deepstack);
        }
        char what[160];
        for (int j = 0; j <= D; j++) {
            void *x = dev_bytes(g, a->mergers[j].out, (int64_t)Nt * O, ea);
            void *y = dev_bytes(g, b->mergers[j].out, (int64_t)Nt * O, ea);
            snprintf(what, sizeof what, "pass %d: %s output", pass, j ? "DeepStack merger" : "merger");
            if (j) snprintf(what + strlen(what), sizeof what - strlen(what), " %d", j - 1);
            compare_bits(what, x, y, (int64_t)Nt * O, ea);
            free(x), free(y);
        }
        void *x = dev_bytes(g, a->grads, nv, eg), *y = dev_bytes(g, b->grads, nv, eg);
        snprintf(what, sizeof what, "pass %d: every tower gradient (%s)", pass, gname(g));
        compare_bits(what, x, y, nv, eg);
        free(x), free(y);
        if (a->linear.fp8.active) {
            int64_t nh, ns;
            const int64_t n = lj_linear_fp8_state_numel(&a->linear.fp8, &nh, &ns);
            float *sa = lj_malloc((size_t)n * sizeof(float)), *sb = lj_malloc((size_t)n * sizeof(float));
            lj_linear_state_get(&a->linear, sa);
            lj_linear_state_get(&b->linear, sb);
            snprintf(what, sizeof what, "pass %d: FP8 amax history and scales", pass);
            compare_bits(what, sa, sb, n, sizeof(float));
            free(sa), free(sb);
        }
    }
    for (int k = 0; k < 2; k++) tower_free(&r[k], g);
    for (int j = 0; j <= D; j++) free(dout[j]);
    free(pixels);
}

/* The towers the recompute check runs: the fixture's (V 32, head_dim 16) on the AUTO table, and
 * one of qwen3-vl-8b's width (V 1152, head_dim 72, I 4304; 3 blocks, DeepStack after 0 and 2) on
 * the CUDA-core attention (no atomics: the same bits on every run), in bf16 and in each FP8 recipe
 * the GPU runs. */
static void check_recompute(const lj_ops *auto_table, const lj_ops *core) {
    lj_vl_config fx, big;
    if (lj_vl_config_preset("qwen3-vl-fixture", &fx) != LJ_OK || lj_vl_config_preset("qwen3-vl-8b", &big) != LJ_OK) {
        fprintf(stderr, "gpu_vision_ops: %s\n", lj_error_message());
        exit(1);
    }
    const int32_t g_fx[] = {1, 4, 6, 1, 16, 16, 1, 6, 10}; /* segments of 24, 256 and 60 patches */
    check_tower_recompute(auto_table, "qwen3-vl-fixture", &fx, g_fx, 3, NULL);
    lj_vision_config v = big.vision;
    v.depth = 3;
    v.num_deepstack = 2;
    v.deepstack_visual_indexes[0] = 0;
    v.deepstack_visual_indexes[1] = 2;
    v.out_hidden_size = fx.text.hidden_size;
    big = fx;
    big.vision = v;
    const int32_t g_big[] = {1, 28, 28, 1, 12, 20}; /* a 448x448 image and a smaller one */
    check_tower_recompute(core, "8b width", &big, g_big, 2, NULL);
    if (lj_ops_cuda_fp8_check() != LJ_OK) {
        printf("  [info] no FP8 recompute check: %s\n", lj_error_message());
        return;
    }
    lj_linear_fp8_options o = lj_linear_fp8_defaults();
    o.amax_history_len = 4; /* the second pass's scales from the first's amaxes */
    o.amax_compute_max = 1;
    check_tower_recompute(core, "8b width", &big, g_big, 2, &o);
    o = lj_linear_fp8_defaults();
    o.recipe = LJ_FP8_RECIPE_TENSORWISE;
    check_tower_recompute(core, "8b width", &big, g_big, 2, &o);
    if (lj_ops_cuda_fp8_blockwise_check() != LJ_OK) {
        printf("  [info] no blockwise FP8 recompute check: %s\n", lj_error_message());
        return;
    }
    o.recipe = LJ_FP8_RECIPE_BLOCKWISE;
    check_tower_recompute(core, "8b width", &big, g_big, 2, &o);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Milliseconds per call of attention_varlen forward and backward over nseg segments of L rows
 * each (a 1024x1024 image is L = 4096 patches) on table g (`label` names it), and the FLOP rate
 * (4 L^2 hd nh per segment forward, 2.5x that backward, Megatron's convention). The workspace is
 * the table's, so uniform segments take the cuDNN path where the table runs it. */
static void time_attention(const lj_ops *g, const char *label, int nseg, int L, int nh, int hd) {
    const int N = nseg * L, row = 3 * nh * hd, Q = nh * hd, iters = 3;
    int32_t *cu = lj_malloc(((size_t)nseg + 1) * 4);
    for (int s = 0; s <= nseg; s++) cu[s] = s * L;
    float *h = randv((int64_t)N * row, 1.0f, 0.0f);
    void *qkv = dev_put(g, h, (int64_t)N * row, g->act_dtype), *out = dev_put(g, h, (int64_t)N * Q, g->act_dtype);
    void *dq = dev_put(g, h, (int64_t)N * row, g->act_dtype), *gcu = dev_raw(g, cu, ((size_t)nseg + 1) * 4);
    void *lse = NULL, *ws = NULL;
    g->alloc(&lse, (size_t)nh * N * 4);
    g->alloc(&ws, g->attention_varlen_workspace_bytes(N, nh, nh, hd) + 1);
    g->attention_varlen_forward(out, lse, qkv, gcu, nseg, L, N, nh, nh, hd, 0, ws);
    g->attention_varlen_backward(dq, out, qkv, out, lse, gcu, nseg, L, N, nh, nh, hd, 0, ws);
    g->synchronize();
    double t0 = now_s();
    for (int i = 0; i < iters; i++) g->attention_varlen_forward(out, lse, qkv, gcu, nseg, L, N, nh, nh, hd, 0, ws);
    g->synchronize();
    const double tf = (now_s() - t0) / iters;
    t0 = now_s();
    for (int i = 0; i < iters; i++)
        g->attention_varlen_backward(dq, out, qkv, out, lse, gcu, nseg, L, N, nh, nh, hd, 0, ws);
    g->synchronize();
    const double tb = (now_s() - t0) / iters, flop = 4.0 * nseg * L * (double)L * hd * nh;
    printf("  [info] attention_varlen %s %dx%d nh=%d hd=%d: forward %.3f ms (%.1f TFLOP/s), backward %.3f ms "
           "(%.1f TFLOP/s)\n",
           label, nseg, L, nh, hd, 1e3 * tf, flop / tf * 1e-12, 1e3 * tb, 2.5 * flop / tb * 1e-12);
    g->free(qkv), g->free(out), g->free(dq), g->free(gcu), g->free(lse), g->free(ws);
    free(h), free(cu);
}

static void time_embedding_bag(const lj_ops *g, int R, int N, int C) {
    float *h = randv((int64_t)N * C, 1.0f, 0.0f), *w = lj_malloc((size_t)N * 4 * 4);
    int32_t *idx = lj_malloc((size_t)N * 4 * 4);
    for (int i = 0; i < 4 * N; i++) idx[i] = (int32_t)lj_rng_below(&g_rng, (uint64_t)R), w[i] = 0.25f;
    void *dout = dev_put(g, h, (int64_t)N * C, g->act_dtype), *dt = NULL;
    void *gi = dev_raw(g, idx, (size_t)N * 16), *gw = dev_raw(g, w, (size_t)N * 16);
    g->alloc(&dt, (size_t)R * C * lj_dtype_size(g->grad_dtype));
    g->embedding_bag_backward(dt, dout, gi, gw, N, 4, C);
    g->synchronize();
    const double t0 = now_s();
    g->embedding_bag_backward(dt, dout, gi, gw, N, 4, C);
    g->synchronize();
    printf("  [info] embedding_bag_backward R=%d N=%d K=4 C=%d: %.3f ms\n", R, N, C, 1e3 * (now_s() - t0));
    g->free(dout), g->free(dt), g->free(gi), g->free(gw);
    free(h), free(w), free(idx);
}

int main(void) {
    lj_rng_seed(&g_rng, 2024);
    const lj_ops *cpu = lj_ops_cpu();
    lj_ops_config cfg;
    lj_ops_config_from_env(0, &cfg); /* the device, cuDNN's library: as the CLI opens it */
    cfg.grad_dtype = LJ_DTYPE_BF16;
    const lj_ops *bf = lj_ops_cuda_open(&cfg);
    if (!bf) {
        fprintf(stderr, "gpu_vision_ops: no CUDA backend: %s\n", lj_error_message());
        return 1;
    }
    if (!bf->layernorm_forward || !bf->attention_varlen_forward) {
        fprintf(stderr, "gpu_vision_ops: the CUDA backend has no vision ops\n");
        return 1;
    }
    cfg.grad_dtype = LJ_DTYPE_F32;
    const lj_ops *f32 = lj_ops_cuda_open(&cfg);
    const lj_ops *tables[2] = {bf, f32};
    lj_ops_config own_cfg = cfg;
    own_cfg.grad_dtype = LJ_DTYPE_BF16;
    own_cfg.attention = LJ_ATTENTION_FLASH; /* never cuDNN: the flash kernels, for the timing */
    const lj_ops *own = lj_ops_cuda_open(&own_cfg);
    own_cfg.attention = LJ_ATTENTION_SIMPLE; /* the CUDA-core varlen kernels */
    const lj_ops *core = own ? lj_ops_cuda_open(&own_cfg) : NULL;
    if (!own || !core) {
        fprintf(stderr, "gpu_vision_ops: no CUDA backend with the own attention kernels: %s\n", lj_error_message());
        return 1;
    }

    printf("layernorm\n");
    const int ln[][2] = {{7, 24}, {5, 13}, {33, 32}, {37, 1024}, {19, 1152}, {9, 4096}, {6, 4608}, {300, 128}};
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < sizeof ln / sizeof ln[0]; i++) check_layernorm(tables[t], cpu, ln[i][0], ln[i][1]);

    printf("gelu\n");
    const int64_t gn[] = {1, 1001, 4096 * 3, 64 * 4304 + 3};
    for (size_t i = 0; i < sizeof gn / sizeof gn[0]; i++)
        for (int form = 0; form < 2; form++) check_gelu(bf, cpu, gn[i], form);

    printf("embedding_bag\n");
    for (int t = 0; t < 2; t++) {
        check_embedding_bag(tables[t], cpu, 6, 9, 4, 20);
        check_embedding_bag(tables[t], cpu, 64, 37, 4, 32);      /* the tiny fixture's 8x8 grid */
        check_embedding_bag(tables[t], cpu, 2304, 300, 4, 1152); /* the 48x48 grid, 8B width */
        check_embedding_bag(tables[t], cpu, 100, 70, 3, 1100);   /* more columns than a block's tile */
    }

    printf("attention_varlen\n");
    const int32_t cu1[] = {0, 5, 6, 70, 203}; /* odd lengths, one row, past one and two tiles */
    const int32_t cu2[] = {0, 64, 128};       /* tile-aligned */
    const int32_t cu3[] = {0, 1};             /* one row */
    const int32_t cu4[] = {0, 150, 151, 152, 300};
    const int hds[] = {16, 32, 64, 72, 128};
    for (size_t i = 0; i < sizeof hds / sizeof hds[0]; i++) {
        check_attention(bf, cpu, cu1, 4, 2, 2, hds[i], 0);
        check_attention(bf, cpu, cu1, 4, 4, 2, hds[i], 1);
    }
    check_attention(bf, cpu, cu2, 2, 16, 16, 64, 0);
    check_attention(bf, cpu, cu4, 4, 16, 16, 72, 0);
    check_attention(bf, cpu, cu3, 1, 2, 2, 16, 0);
    check_attention(bf, cpu, cu4, 4, 8, 2, 64, 1);
    /* images of several sizes packed (the flash kernels on tensor cores), and the same on the
       CUDA-core kernels */
    const int32_t cu8[] = {0, 784, 984, 985, 2008}; /* 448x448, smaller, one row, just under 1024 */
    check_attention(bf, cpu, cu8, 4, 16, 16, 64, 0);
    check_attention(bf, cpu, cu8, 4, 16, 16, 72, 0);
    check_attention(bf, cpu, cu8, 4, 8, 2, 128, 0);
    check_attention(core, cpu, cu8, 4, 16, 16, 72, 0);
    /* uniform segments: one dense attention (cuDNN on the AUTO table where it runs them) */
    int32_t cu5[5], cu6[3], cu7[4];
    for (int s = 0; s <= 4; s++) cu5[s] = 196 * s;  /* four 224x224 images (14x14 patches of 16) */
    for (int s = 0; s <= 2; s++) cu6[s] = 1024 * s; /* two 512x512 images */
    for (int s = 0; s <= 3; s++) cu7[s] = 256 * s;
    check_attention(bf, cpu, cu5, 4, 16, 16, 64, 0);
    check_attention(bf, cpu, cu6, 2, 16, 16, 64, 0);
    check_attention(bf, cpu, cu7, 3, 8, 8, 128, 0);
    check_attention(bf, cpu, cu7, 3, 4, 2, 64, 0);  /* GQA */
    check_attention(bf, cpu, cu7, 3, 4, 4, 72, 0);  /* a head_dim cuDNN's path does not take */
    check_attention(bf, cpu, cu6, 2, 16, 16, 64, 1); /* causal: never the dense path */
#ifdef LJ_HAVE_CUDA
    printf("  [info] %s\n", lj_cuda_cudnn_attention_describe());
#endif

    printf("rows\n");
    check_rows(bf, cpu, 11, 5, 24);
    check_rows(bf, cpu, 13, 6, 13);
    check_rows(bf, cpu, 50, 20, 1152);

    printf("tower recompute\n");
    check_recompute(bf, core);

    printf("timing (information only)\n");
    /* the CUDA-core kernels, the flash kernels and the AUTO table (cuDNN for uniform segments
       where it runs them, else flash) */
    time_attention(core, "cuda-core", 1, 4096, 16, 64); /* 2B/4B tower, a 1024x1024 image */
    time_attention(own, "flash    ", 1, 4096, 16, 64);
    time_attention(bf, "auto     ", 1, 4096, 16, 64);
    time_attention(core, "cuda-core", 4, 1024, 16, 64); /* four 512x512 images */
    time_attention(own, "flash    ", 4, 1024, 16, 64);
    time_attention(bf, "auto     ", 4, 1024, 16, 64);
    time_attention(core, "cuda-core", 4, 784, 16, 64); /* four 448x448 images: no cuDNN before 9.16 */
    time_attention(bf, "auto     ", 4, 784, 16, 64);
    time_attention(core, "cuda-core", 4, 784, 16, 72); /* 8B tower */
    time_attention(bf, "auto     ", 4, 784, 16, 72);
    time_attention(bf, "auto     ", 1, 4096, 16, 72);
#ifdef LJ_HAVE_CUDA
    printf("  [info] %s\n", lj_cuda_cudnn_attention_describe());
#endif
    time_embedding_bag(bf, 2304, 16384, 1152);

    printf("gpu_vision_ops: %d checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}

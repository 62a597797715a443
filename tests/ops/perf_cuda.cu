/* perf_cuda.cu: the perf cases: each hot op of the CUDA backend at the benchmark shapes
 * (llama3.2-1b at micro-batch 4 and llama3.2-3b at micro-batch 2, sequence 4096), checked first
 * (sampled fp32 dot products for the GEMMs, the simple fp32 kernels for attention, the CPU
 * backend or the unfused twin elsewhere), then timed (median of repeated runs after warm-up,
 * CUDA events on the backend's stream) and reported against the card's ceilings (harness.h):
 * TFLOP/s of 2*M*N*K per GEMM; attention as FlashAttention counts causal attention (forward
 * 2*B*H*S^2*D, backward 2.5x that, forward+backward 3.5x); memory-bound ops in GB/s of the
 * fewest bytes each must move (every input read once, every output written once). */
#include <math.h>
#include <string.h>

#include "tests/ops/harness_cuda.cuh"
#include "tests/ops/case.h"
#include "ops/cuda/vision.h"

#define SHAPE(...) char shape[96]; snprintf(shape, sizeof shape, __VA_ARGS__)

/* The CUDA table of the case's gradient dtype, in the default configuration but for `att`,
 * `mtiles` and `det` (the attention cases' paths). */
static const lj_ops *perf_table(const lj_op_case *c, lj_attention_kernels att, int mtiles, int det) {
    lj_ops_config cfg = LJ_OPS_CONFIG_DEFAULT;
    cfg.grad_dtype = c->dtype;
    cfg.attention = att;
    cfg.flash_forward_mtiles = mtiles;
    cfg.deterministic = det;
    const lj_ops *ops = lj_ops_cuda_open(&cfg);
    LJ_ASSERT(ops && ops->grad_dtype == c->dtype, "perf case %s: no CUDA table of gradient dtype %s", c->op,
              lj_dtype_name(c->dtype));
    return ops;
}

static const lj_ops *perf_begin(const lj_op_case *c) { return perf_table(c, LJ_ATTENTION_AUTO, 2, 0); }

static void report_gbs(const char *group, const char *what, const lj_ops *ops, void (*fn)(void *), void *ctx,
                       double bytes) {
    double ms = lj_harness_time_ms(ops, fn, ctx, 3, 20);
    lj_harness_report(group, what, ms, bytes / (ms * 1e-3) / 1e9, "GB/s", LJ_HARNESS_HBM_CEILING_GBS);
}

/* ---- matmul: d = {N, IC, OC} ------------------------------------------------------------ */

/* ref[s] = sum_k A[rows[s]*ar + k*as] * B[cols[s]*bc + k*bs] (fp32), one block per sample. */
static __global__ void sample_dot_kernel(float *ref, const lj_bf16 *A, int64_t ar, int64_t as, const lj_bf16 *B,
                                         int64_t bc, int64_t bs, int K, const int *rows, const int *cols) {
    int s = blockIdx.x;
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

#define PERF_SAMPLES 512

/* Compares PERF_SAMPLES entries (row, col) of got (row-major, ld columns, `dtype`) with fp32
 * dot products of A's and B's vectors. */
static void check_samples(lj_harness *h, const lj_ops *ops, const char *what, const char *shape, const void *got,
                          lj_dtype dtype, int64_t ld, const void *A, int64_t ar, int64_t as, const void *B, int64_t bc,
                          int64_t bs, int K, int R, int Cc) {
    int hr[PERF_SAMPLES], hc[PERF_SAMPLES];
    uint32_t x = 12345;
    for (int s = 0; s < PERF_SAMPLES; s++) {
        x = x * 1664525u + 1013904223u;
        hr[s] = (int)(x % (uint32_t)R);
        x = x * 1664525u + 1013904223u;
        hc[s] = (int)(x % (uint32_t)Cc);
    }
    int *drows = (int *)lj_harness_dalloc(ops, sizeof hr), *dcols = (int *)lj_harness_dalloc(ops, sizeof hc);
    float *dref = (float *)lj_harness_dalloc(ops, PERF_SAMPLES * 4);
    ops->upload(drows, hr, sizeof hr);
    ops->upload(dcols, hc, sizeof hc);
    sample_dot_kernel<<<PERF_SAMPLES, 256, 0, lj_cuda_stream()>>>(dref, (const lj_bf16 *)A, ar, as, (const lj_bf16 *)B,
                                                                  bc, bs, K, drows, dcols);
    LJ_CUDA_LAUNCHED("sample_dot_kernel");
    float ref[PERF_SAMPLES], g[PERF_SAMPLES];
    ops->download(ref, dref, sizeof ref);
    for (int s = 0; s < PERF_SAMPLES; s++) {
        float *v = lj_harness_download_f32(ops, (const char *)got + ((int64_t)hr[s] * ld + hc[s]) * lj_dtype_size(dtype),
                                           1, dtype);
        g[s] = v[0];
        free(v);
    }
    lj_harness_check_f(h, what, shape, g, ref, PERF_SAMPLES, lj_harness_tol_l2(1e-2));
    ops->free(drows), ops->free(dcols), ops->free(dref);
}

typedef struct {
    const lj_ops *ops;
    int N, IC, OC;
    void *x, *w, *out, *dout, *dx, *dw;
} mm_ctx;

static void mm_fwd(void *p) {
    mm_ctx *c = (mm_ctx *)p;
    c->ops->matmul_forward(c->out, c->x, c->w, c->N, c->IC, c->OC);
}
static void mm_dx(void *p) {
    mm_ctx *c = (mm_ctx *)p;
    c->ops->matmul_backward(c->dx, NULL, c->dout, c->x, c->w, c->N, c->IC, c->OC, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
}
static void mm_dw(void *p) {
    mm_ctx *c = (mm_ctx *)p;
    c->ops->matmul_backward(NULL, c->dw, c->dout, c->x, c->w, c->N, c->IC, c->OC, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
}

void lj_case_cuda_perf_matmul(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = perf_begin(cs);
    const int N = cs->d[0], IC = cs->d[1], OC = cs->d[2];
    SHAPE("N=%d IC=%d OC=%d", N, IC, OC);
    printf("matmul %s\n", shape);
    mm_ctx c = {ops, N, IC, OC, NULL, NULL, NULL, NULL, NULL, NULL};
    c.x = lj_harness_drand_bf16(ops, (int64_t)N * IC, 1, 1.0f);
    c.w = lj_harness_drand_bf16(ops, (int64_t)OC * IC, 2, 0.05f);
    c.dout = lj_harness_drand_bf16(ops, (int64_t)N * OC, 3, 1.0f);
    c.out = lj_harness_dalloc(ops, (size_t)N * OC * 2);
    c.dx = lj_harness_dalloc(ops, (size_t)N * IC * 2);
    const size_t gs = lj_dtype_size(ops->grad_dtype);
    c.dw = lj_harness_dalloc(ops, (size_t)OC * IC * gs);
    mm_fwd(&c);
    mm_dx(&c);
    ops->memset_zero(c.dw, (size_t)OC * IC * gs);
    mm_dw(&c);
    check_samples(h, ops, "perf matmul forward out = x w^T", shape, c.out, LJ_DTYPE_BF16, OC, c.x, IC, 1, c.w, IC, 1,
                  IC, N, OC);
    check_samples(h, ops, "perf matmul backward dx = dout w", shape, c.dx, LJ_DTYPE_BF16, IC, c.dout, OC, 1, c.w, 1,
                  IC, OC, N, IC);
    check_samples(h, ops, "perf matmul backward dw = dout^T x", shape, c.dw, ops->grad_dtype, IC, c.dout, 1, OC, c.x, 1,
                  IC, N, OC, IC);
    const double flop = 2.0 * N * IC * OC;
    const char *names[3] = {"forward", "backward dx", "backward dw"};
    void (*fns[3])(void *) = {mm_fwd, mm_dx, mm_dw};
    char group[160];
    snprintf(group, sizeof group, "matmul %s", shape);
    for (int i = 0; i < 3; i++) {
        double ms = lj_harness_time_ms(ops, fns[i], &c, 3, 10);
        lj_harness_report(group, names[i], ms, flop / (ms * 1e-3) / 1e12, "TFLOP/s", LJ_HARNESS_GEMM_CEILING_TFLOPS);
    }
    ops->free(c.x), ops->free(c.w), ops->free(c.dout), ops->free(c.out), ops->free(c.dx), ops->free(c.dw);
}

/* ---- attention: d = {B, T, nh, nkv, hd, path}; path 1: own flash kernels with one 16-query
 * m-tile per warp in the head_dim 64 forward, 2: two m-tiles (the default), 3: cuDNN SDPA in
 * deterministic mode, 4: cuDNN SDPA with deterministic mode off (dQ accumulated; the default) ---- */


void lj_case_cuda_perf_attention(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)mode;
    const int B = cs->d[0], T = cs->d[1], nh = cs->d[2], nkv = cs->d[3], hd = cs->d[4], path = cs->d[5];
    const lj_ops *ops = perf_table(cs, path >= 3 ? LJ_ATTENTION_AUTO : LJ_ATTENTION_FLASH, path == 1 ? 1 : 2,
                                   path == 3);
    const lj_ops *simple = perf_table(cs, LJ_ATTENTION_SIMPLE, 2, 0);
    const char *pname = path == 4 ? "cudnn-accumulating" : path == 3 ? "cudnn" : path == 1 ? "flash-mt1" : "flash";
    if (path >= 3 && !lj_cuda_cudnn_attention_active(B, T, nh, nkv, hd, path == 3)) pname = "cudnn-fallback";
    /* check against the simple fp32 kernels at T = 1000 (not a multiple of any tile) */
    {
        const int Tc = 1000;
        SHAPE("B=1 T=%d nh=%d nkv=%d hd=%d", Tc, nh, nkv, hd);
        lj_att_bench f = lj_att_bench_make(ops, 1, Tc, nh, nkv, hd), s = f;
        int64_t row = (int64_t)(nh + 2 * nkv) * hd;
        s.out = lj_harness_dalloc(ops, (size_t)Tc * nh * hd * 2);
        s.dqkv = lj_harness_dalloc(ops, (size_t)Tc * row * 2);
        s.lse = (float *)lj_harness_dalloc(ops, (size_t)nh * Tc * 4);
        lj_att_bench_fwd(&f);
        lj_att_bench_bwd(&f);
        s.ops = simple;
        lj_att_bench_fwd(&s);
        lj_att_bench_bwd(&s);
        char op[64];
        snprintf(op, sizeof op, "perf attention out (%s vs simple)", pname);
        lj_harness_check_device(h, ops, op, shape, f.out, s.out, (int64_t)Tc * nh * hd, LJ_DTYPE_BF16,
                                lj_harness_tol_l2(1e-2));
        snprintf(op, sizeof op, "perf attention lse (%s vs simple)", pname);
        lj_harness_check_device(h, ops, op, shape, f.lse, s.lse, (int64_t)nh * Tc, LJ_DTYPE_F32, lj_harness_tol_l2(1e-3));
        snprintf(op, sizeof op, "perf attention dqkv (%s vs simple)", pname);
        lj_harness_check_device(h, ops, op, shape, f.dqkv, s.dqkv, (int64_t)Tc * row, LJ_DTYPE_BF16,
                                lj_harness_tol_l2(2e-2));
        ops->free(s.out), ops->free(s.dqkv), ops->free(s.lse);
        lj_att_bench_free(&f);
    }
    SHAPE("B=%d T=%d nh=%d nkv=%d hd=%d", B, T, nh, nkv, hd);
    printf("attention %s (%s)\n", shape, pname);
    lj_att_bench c = lj_att_bench_make(ops, B, T, nh, nkv, hd);
    const double f = 2.0 * B * nh * (double)T * T * hd;
    const double ceiling = hd == 128 ? LJ_HARNESS_ATTN_HD128_CEILING_TFLOPS : LJ_HARNESS_ATTN_HD64_CEILING_TFLOPS;
    double fwd = lj_harness_time_ms(ops, lj_att_bench_fwd, &c, 3, 10),
           bwd = lj_harness_time_ms(ops, lj_att_bench_bwd, &c, 3, 10);
    char group[160];
    snprintf(group, sizeof group, "attention %s %s", shape, pname);
    lj_harness_report(group, "forward", fwd, f / (fwd * 1e-3) / 1e12, "TFLOP/s", ceiling);
    lj_harness_report(group, "backward", bwd, 2.5 * f / (bwd * 1e-3) / 1e12, "TFLOP/s", ceiling);
    lj_harness_report(group, "fwd+bwd", fwd + bwd, 3.5 * f / ((fwd + bwd) * 1e-3) / 1e12, "TFLOP/s", ceiling);
    lj_att_bench_free(&c);
}

/* ---- attention within documents: d = {B, T, nh, nkv, hd, mean document length} ------------ */

typedef struct {
    const lj_ops *G;
    int B, T, nh, nkv, hd;
    const int32_t *ds; /* NULL: plain causal */
    void *qkv, *dout, *out, *dqkv, *ws;
    float *lse;
} docs_ctx;

static void docs_fwd(void *p) {
    docs_ctx *c = (docs_ctx *)p;
    if (c->ds) c->G->attention_forward_docs(c->out, c->lse, c->qkv, c->ds, c->B, c->T, c->nh, c->nkv, c->hd, c->ws);
    else c->G->attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->nh, c->nkv, c->hd, c->ws);
}

static void docs_bwd(void *p) {
    docs_ctx *c = (docs_ctx *)p;
    if (c->ds)
        c->G->attention_backward_docs(c->dqkv, c->dout, c->qkv, c->out, c->lse, c->ds, c->B, c->T, c->nh, c->nkv, c->hd,
                                      c->ws);
    else c->G->attention_backward(c->dqkv, c->dout, c->qkv, c->out, c->lse, c->B, c->T, c->nh, c->nkv, c->hd, c->ws);
}

/* Forward and backward times of plain causal attention (cuDNN, the default path; then the own
 * flash kernels) and of attention within documents (the own flash kernels), on EODs about every
 * d[5] tokens. TFLOP/s count the work each one does: 2*B*nh*T^2*hd for causal attention
 * (docs/reference.md's convention, no causal discount) times the work within documents,
 * sum l(l+1)/2 / (T(T+1)/2), for the masked one. */
void lj_case_cuda_perf_attention_docs(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *G = perf_begin(cs);
    const int B = cs->d[0], T = cs->d[1], nh = cs->d[2], nkv = cs->d[3], hd = cs->d[4], mean = cs->d[5];
    const int64_t N = (int64_t)B * T, row = (int64_t)(nh + 2 * nkv) * hd;
    int32_t *tokens = (int32_t *)lj_malloc((size_t)N * 4), *ds = (int32_t *)lj_malloc((size_t)N * 4);
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
    float *x = lj_harness_randf_bf16(h, N * row, 1.0f), *g = lj_harness_randf_bf16(h, N * nh * hd, 1.0f);
    docs_ctx pc = {G, B, T, nh, nkv, hd, NULL, lj_harness_upload(G, x, N * row, LJ_DTYPE_BF16),
                   lj_harness_upload(G, g, N * nh * hd, LJ_DTYPE_BF16), lj_harness_dalloc(G, (size_t)N * nh * hd * 2),
                   lj_harness_dalloc(G, (size_t)N * row * 2),
                   lj_harness_dalloc(G, G->attention_workspace_bytes(B, T, nh, nkv, hd)),
                   (float *)lj_harness_dalloc(G, (size_t)B * nh * T * 4)};
    const int32_t *gds = (const int32_t *)lj_harness_upload(G, ds, N, LJ_DTYPE_F32);
    const double f = 2.0 * B * nh * (double)T * T * hd;
    const double ceiling = hd == 128 ? LJ_HARNESS_ATTN_HD128_CEILING_TFLOPS : LJ_HARNESS_ATTN_HD64_CEILING_TFLOPS;
    printf("attention_docs B=%d T=%d nh=%d nkv=%d hd=%d: %.2f documents per sequence, work within them %.4f of "
           "causal\n", B, T, nh, nkv, hd, (double)docs / B, frac);
    const char *names[3] = {"causal cudnn", "causal flash", "documents flash"};
    for (int k = 0; k < 3; k++) {
        pc.G = perf_table(cs, k == 0 ? LJ_ATTENTION_AUTO : LJ_ATTENTION_FLASH, 2, 0);
        pc.ds = k == 2 ? gds : NULL;
        const double w = k == 2 ? frac : 1.0;
        const double fwd = lj_harness_time_ms(G, docs_fwd, &pc, 3, 10);
        const double bwd = lj_harness_time_ms(G, docs_bwd, &pc, 3, 10);
        char group[160];
        snprintf(group, sizeof group, "attention B=%d T=%d nh=%d nkv=%d hd=%d doc~%d %s", B, T, nh, nkv, hd, mean,
                 names[k]);
        lj_harness_report(group, "forward", fwd, w * f / (fwd * 1e-3) / 1e12, "TFLOP/s", ceiling);
        lj_harness_report(group, "backward", bwd, w * 2.5 * f / (bwd * 1e-3) / 1e12, "TFLOP/s", ceiling);
        lj_harness_report(group, "fwd+bwd", fwd + bwd, w * 3.5 * f / ((fwd + bwd) * 1e-3) / 1e12, "TFLOP/s", ceiling);
    }
    G->free(pc.qkv), G->free(pc.dout), G->free(pc.out), G->free(pc.dqkv), G->free(pc.ws), G->free(pc.lse);
    G->free((void *)gds);
    free(tokens), free(ds), free(x), free(g);
}

/* ---- attention over packed segments: d = {nseg, L, nh, nkv, hd} ---------------------------- */

typedef struct {
    const lj_ops *G;
    int nseg, L, N, nh, nkv, hd;
    const int32_t *cu;
    void *qkv, *dout, *out, *dqkv, *ws;
    float *lse;
} varlen_ctx;

static void varlen_fwd(void *p) {
    varlen_ctx *c = (varlen_ctx *)p;
    c->G->attention_varlen_forward(c->out, c->lse, c->qkv, c->cu, c->nseg, c->L, c->N, c->nh, c->nkv, c->hd, 0, c->ws);
}

static void varlen_bwd(void *p) {
    varlen_ctx *c = (varlen_ctx *)p;
    c->G->attention_varlen_backward(c->dqkv, c->dout, c->qkv, c->out, c->lse, c->cu, c->nseg, c->L, c->N, c->nh,
                                    c->nkv, c->hd, 0, c->ws);
}

/* Bidirectional attention over nseg segments of L rows (the vision tower's images: 448x448 is
 * L = 784 patches, 1024x1024 is 4096) on the CUDA-core kernels (a SIMPLE table), the flash
 * kernels (FLASH; with one m-tile in the head_dim 64 forward: flash-mt1) and the default path
 * (AUTO: cuDNN's dense attention where it runs the shape, else flash). The flash and AUTO results are checked against the CUDA-core kernels' first (out,
 * dqkv; lse where both are [nh, N]), then each is timed. TFLOP/s count the work within the
 * segments: forward 4*nseg*L^2*hd*nh (two GEMMs of L x L x hd per head), backward 2.5x that. */
void lj_case_cuda_perf_attention_varlen(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)mode;
    const int nseg = cs->d[0], L = cs->d[1], nh = cs->d[2], nkv = cs->d[3], hd = cs->d[4], N = nseg * L;
    const int64_t row = (int64_t)(nh + 2 * nkv) * hd, Q = (int64_t)nh * hd;
    enum { NT = 4 };
    const lj_ops *tables[NT] = {perf_table(cs, LJ_ATTENTION_SIMPLE, 2, 0), perf_table(cs, LJ_ATTENTION_FLASH, 2, 0),
                                perf_table(cs, LJ_ATTENTION_FLASH, 1, 0), perf_table(cs, LJ_ATTENTION_AUTO, 2, 0)};
    const char *names[NT] = {"cuda-core", "flash", "flash-mt1", "auto"};
    const lj_ops *G = tables[0];
    int32_t *cu = (int32_t *)lj_malloc((size_t)(nseg + 1) * 4);
    for (int s = 0; s <= nseg; s++) cu[s] = s * L;
    SHAPE("%dx%d nh=%d nkv=%d hd=%d", nseg, L, nh, nkv, hd);
    const int32_t *gcu = (const int32_t *)lj_harness_upload(G, cu, nseg + 1, LJ_DTYPE_F32);
    void *qkv = lj_harness_drand_bf16(G, N * row, 11, 2.0f), *dout = lj_harness_drand_bf16(G, N * Q, 12, 1.0f);
    varlen_ctx c[NT];
    for (int k = 0; k < NT; k++) {
        const lj_ops *T = tables[k];
        c[k] = varlen_ctx{T, nseg, L, N, nh, nkv, hd, gcu, qkv, dout, lj_harness_dalloc(T, (size_t)N * Q * 2),
                lj_harness_dalloc(T, (size_t)N * row * 2),
                lj_harness_dalloc(T, T->attention_varlen_workspace_bytes(N, nh, nkv, hd)),
                (float *)lj_harness_dalloc(T, (size_t)nh * N * 4)};
        varlen_fwd(&c[k]);
        varlen_bwd(&c[k]);
    }
    const char *ran[NT];
    for (int k = 0; k < NT; k++) {
        char op[96];
        const char *f = lj_cuda_attention_varlen_kernels(&tables[k]->config, nseg, L, N, nh, nkv, hd, 0, 0);
        const char *b = lj_cuda_attention_varlen_kernels(&tables[k]->config, nseg, L, N, nh, nkv, hd, 0, 1);
        ran[k] = f;
        printf("attention_varlen %s %s: forward on %s, backward on %s\n", shape, names[k], f, b);
        if (k == 0) continue;
        snprintf(op, sizeof op, "perf attention_varlen out (%s vs cuda-core)", names[k]);
        lj_harness_check_device(h, G, op, shape, c[k].out, c[0].out, N * Q, LJ_DTYPE_BF16, lj_harness_tol_l2(1e-2));
        if (strcmp(f, "cudnn") != 0) { /* cuDNN's lse is [nseg, nh, L] */
            snprintf(op, sizeof op, "perf attention_varlen lse (%s vs cuda-core)", names[k]);
            lj_harness_check_device(h, G, op, shape, c[k].lse, c[0].lse, (int64_t)nh * N, LJ_DTYPE_F32,
                                    lj_harness_tol_l2(1e-3));
        }
        snprintf(op, sizeof op, "perf attention_varlen dqkv (%s vs cuda-core)", names[k]);
        lj_harness_check_device(h, G, op, shape, c[k].dqkv, c[0].dqkv, N * row, LJ_DTYPE_BF16, lj_harness_tol_l2(2e-2));
    }
    const double f = 4.0 * nseg * (double)L * L * hd * nh;
    const double ceiling = hd == 128 ? LJ_HARNESS_ATTN_HD128_CEILING_TFLOPS : LJ_HARNESS_ATTN_HD64_CEILING_TFLOPS;
    double fwd[NT], bwd[NT];
    for (int k = 0; k < NT; k++) {
        fwd[k] = lj_harness_time_ms(tables[k], varlen_fwd, &c[k], 3, 10);
        bwd[k] = lj_harness_time_ms(tables[k], varlen_bwd, &c[k], 3, 10);
        char group[160];
        snprintf(group, sizeof group, "attention_varlen %s %s (%s)", shape, names[k], ran[k]);
        lj_harness_report(group, "forward", fwd[k], f / (fwd[k] * 1e-3) / 1e12, "TFLOP/s", ceiling);
        lj_harness_report(group, "backward", bwd[k], 2.5 * f / (bwd[k] * 1e-3) / 1e12, "TFLOP/s", ceiling);
        lj_harness_report(group, "fwd+bwd", fwd[k] + bwd[k], 3.5 * f / ((fwd[k] + bwd[k]) * 1e-3) / 1e12, "TFLOP/s",
                          ceiling);
    }
    printf("attention_varlen %s: flash against cuda-core: forward %.1fx, backward %.1fx faster\n", shape,
           fwd[0] / fwd[1], bwd[0] / bwd[1]);
    for (int k = 0; k < NT; k++) G->free(c[k].out), G->free(c[k].dqkv), G->free(c[k].ws), G->free(c[k].lse);
    G->free(qkv), G->free(dout), G->free((void *)gcu);
    free(cu);
}

/* ---- FP8 GEMMs: d = {N tokens, in, out} ------------------------------------------------- */

static const lj_ops *G8; /* the table of the FP8 perf case running */

/* bytes of device memory, with h[bytes] copied in unless h is NULL */
static void *fp8_up(const void *h, size_t bytes) {
    void *d = lj_harness_dalloc(G8, bytes);
    if (h) G8->upload(d, h, bytes);
    return d;
}

typedef struct {
    void *out, *x, *w, *qx, *qw, *qdy_t, *qx_t, *dw;
    float *st;
    int N, in, outf;
} fp8_perf_ctx;

static void perf_fwd(void *p) {
    fp8_perf_ctx *c = (fp8_perf_ctx *)p;
    G8->fp8_matmul(c->out, LJ_DTYPE_BF16, c->qx, LJ_FP8_E4M3, c->st + 4, c->qw, LJ_FP8_E4M3, c->st + 8, c->N, c->outf,
                  c->in, LJ_GRAD_OVERWRITE, NULL);
}
static void perf_wgrad(void *p) {
    fp8_perf_ctx *c = (fp8_perf_ctx *)p;
    G8->fp8_matmul(c->dw, G8->grad_dtype, c->qdy_t, LJ_FP8_E5M2, c->st + 4, c->qx_t, LJ_FP8_E4M3, c->st + 8, c->outf, c->in,
                  c->N, LJ_GRAD_ACCUMULATE, NULL);
}
static void perf_bf16(void *p) {
    fp8_perf_ctx *c = (fp8_perf_ctx *)p;
    G8->matmul_forward(c->out, c->x, c->w, c->N, c->in, c->outf);
}
static void perf_cast(void *p) {
    fp8_perf_ctx *c = (fp8_perf_ctx *)p;
    lj_fp8_scaling sc = {c->st, c->st + 4, c->st + 2, 1};
    G8->fp8_amax(c->st + 2, c->x, (int64_t)c->N * c->in);
    G8->fp8_quantize(c->qx, c->qx_t, c->x, c->N, c->in, LJ_FP8_E4M3, &sc);
}

void lj_case_cuda_perf_fp8_matmul(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)mode, (void)h;
    G8 = perf_begin(cs);
    fp8_perf_ctx c;
    memset(&c, 0, sizeof c);
    c.N = cs->d[0], c.in = cs->d[1], c.outf = cs->d[2];
    SHAPE("N=%d IC=%d OC=%d", c.N, c.in, c.outf);
    printf("fp8 matmul %s\n", shape);
    float one[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}; /* scale_inv of x and w at [4] and [8]: 16-byte aligned */
    c.st = (float *)fp8_up(one, sizeof one);
    const size_t nx = (size_t)c.N * c.in, nw = (size_t)c.outf * c.in;
    c.x = fp8_up(NULL, nx * 2), c.w = fp8_up(NULL, nw * 2), c.out = fp8_up(NULL, (size_t)c.N * c.outf * 2);
    c.qx = fp8_up(NULL, (size_t)c.N * lj_fp8_ld(c.in)), c.qw = fp8_up(NULL, (size_t)c.outf * lj_fp8_ld(c.in));
    c.qx_t = fp8_up(NULL, (size_t)c.in * lj_fp8_ld(c.N)), c.qdy_t = fp8_up(NULL, (size_t)c.outf * lj_fp8_ld(c.N));
    c.dw = fp8_up(NULL, nw * lj_dtype_size(G8->grad_dtype));
    G8->memset_zero(c.x, nx * 2), G8->memset_zero(c.w, nw * 2);
    G8->memset_zero(c.qx, (size_t)c.N * lj_fp8_ld(c.in)), G8->memset_zero(c.qw, (size_t)c.outf * lj_fp8_ld(c.in));
    G8->memset_zero(c.qx_t, (size_t)c.in * lj_fp8_ld(c.N)), G8->memset_zero(c.qdy_t, (size_t)c.outf * lj_fp8_ld(c.N));
    const double flop = 2.0 * c.N * c.in * c.outf;
    char group[160];
    snprintf(group, sizeof group, "fp8 matmul %s", shape);
    double ms = lj_harness_time_ms(G8, perf_bf16, &c, 3, 10);
    lj_harness_report(group, "bf16 forward (reference)", ms, flop / ms / 1e9, "TFLOP/s", LJ_HARNESS_GEMM_CEILING_TFLOPS);
    ms = lj_harness_time_ms(G8, perf_fwd, &c, 3, 10);
    lj_harness_report(group, "fp8 forward e4m3 x e4m3", ms, flop / ms / 1e9, "TFLOP/s", LJ_HARNESS_FP8_GEMM_CEILING_TFLOPS);
    ms = lj_harness_time_ms(G8, perf_wgrad, &c, 3, 10);
    lj_harness_report(group, "fp8 wgrad e5m2 x e4m3 (+=)", ms, flop / ms / 1e9, "TFLOP/s",
                      LJ_HARNESS_FP8_GEMM_CEILING_TFLOPS);
    ms = lj_harness_time_ms(G8, perf_cast, &c, 3, 10);
    const double bytes = (double)nx * 2 * 2 + (double)nx * 2; /* x read twice, q and q_t written */
    lj_harness_report(group, "amax + cast with transpose of x (unfused)", ms, bytes / ms / 1e6, "GB/s",
                      LJ_HARNESS_HBM_CEILING_GBS);
    G8->free(c.st), G8->free(c.x), G8->free(c.w), G8->free(c.out), G8->free(c.qx), G8->free(c.qw), G8->free(c.qx_t);
    G8->free(c.qdy_t), G8->free(c.dw);
}

/* ---- perf of the blockwise recipe: d = {N tokens, in, out} ---------------------------- */

typedef struct {
    void *x, *w, *out, *dw, *qx, *qx_t, *qw, *qdy_t;
    float *sx, *sx_t, *sw, *sdy_t, *amax;
    int N, in, outf;
} bw_perf_ctx;

static void bw_perf_fwd(void *p) {
    bw_perf_ctx *c = (bw_perf_ctx *)p;
    G8->fp8_matmul_blockwise(c->out, LJ_DTYPE_BF16, c->qx, LJ_FP8_E4M3, c->sx, 0, c->qw, LJ_FP8_E4M3, c->sw, 1, c->N,
                            c->outf, c->in, LJ_GRAD_OVERWRITE, NULL);
}
static void bw_perf_wgrad(void *p) {
    bw_perf_ctx *c = (bw_perf_ctx *)p;
    G8->fp8_matmul_blockwise(c->dw, G8->grad_dtype, c->qdy_t, LJ_FP8_E5M2, c->sdy_t, 0, c->qx_t, LJ_FP8_E4M3, c->sx_t, 0,
                            c->outf, c->in, c->N, LJ_GRAD_ACCUMULATE, NULL);
}
static void bw_perf_cast(void *p) {
    bw_perf_ctx *c = (bw_perf_ctx *)p;
    G8->fp8_quantize_tiles(c->qx, c->sx, c->qx_t, c->sx_t, c->x, c->N, c->in, LJ_FP8_E4M3, c->amax);
}
static void bw_perf_cast_w(void *p) {
    bw_perf_ctx *c = (bw_perf_ctx *)p;
    G8->fp8_quantize_blocks(c->qw, c->sw, NULL, NULL, c->w, c->outf, c->in, LJ_FP8_E4M3, c->amax);
}

/* The blockwise GEMMs (1x128 x 128x128 forward, 1x128 x 1x128 weight gradient) and its casts
 * (x rowwise and columnwise; W in blocks) at the Llama shapes, beside the per-tensor rows of
 * lj_case_cuda_perf_fp8_matmul. */
void lj_case_cuda_perf_fp8_blockwise(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)mode, (void)h;
    G8 = perf_begin(cs);
    bw_perf_ctx c;
    memset(&c, 0, sizeof c);
    c.N = cs->d[0], c.in = cs->d[1], c.outf = cs->d[2];
    SHAPE("N=%d IC=%d OC=%d", c.N, c.in, c.outf);
    printf("fp8 blockwise %s\n", shape);
    const size_t nx = (size_t)c.N * c.in, nw = (size_t)c.outf * c.in;
    c.x = fp8_up(NULL, nx * 2), c.w = fp8_up(NULL, nw * 2), c.out = fp8_up(NULL, (size_t)c.N * c.outf * 2);
    c.dw = fp8_up(NULL, nw * lj_dtype_size(G8->grad_dtype));
    c.qx = fp8_up(NULL, (size_t)c.N * lj_fp8_ld(c.in)), c.qw = fp8_up(NULL, (size_t)c.outf * lj_fp8_ld(c.in));
    c.qx_t = fp8_up(NULL, (size_t)c.in * lj_fp8_ld(c.N)), c.qdy_t = fp8_up(NULL, (size_t)c.outf * lj_fp8_ld(c.N));
    c.sx = (float *)fp8_up(NULL, (size_t)lj_fp8_tile_scales_numel(c.N, c.in) * 4);
    c.sx_t = (float *)fp8_up(NULL, (size_t)lj_fp8_tile_scales_numel(c.in, c.N) * 4);
    c.sdy_t = (float *)fp8_up(NULL, (size_t)lj_fp8_tile_scales_numel(c.outf, c.N) * 4);
    c.sw = (float *)fp8_up(NULL, (size_t)lj_fp8_block_scales_numel(c.outf, c.in) * 4);
    c.amax = (float *)fp8_up(NULL, 16);
    G8->memset_zero(c.x, nx * 2), G8->memset_zero(c.w, nw * 2);
    /* zero data: every factor 1, every code 0 (the timings do not depend on the values) */
    bw_perf_cast(&c);
    bw_perf_cast_w(&c);
    G8->memset_zero(c.out, (size_t)c.N * c.outf * 2); /* as dy [N, out] */
    G8->fp8_quantize_tiles(NULL, NULL, c.qdy_t, c.sdy_t, c.out, c.N, c.outf, LJ_FP8_E5M2, NULL);
    const double flop = 2.0 * c.N * c.in * c.outf;
    char group[160];
    snprintf(group, sizeof group, "fp8 blockwise %s", shape);
    double ms = lj_harness_time_ms(G8, bw_perf_fwd, &c, 3, 10);
    lj_harness_report(group, "forward e4m3 1x128 x 128x128", ms, flop / ms / 1e9, "TFLOP/s",
                      LJ_HARNESS_FP8_GEMM_CEILING_TFLOPS);
    ms = lj_harness_time_ms(G8, bw_perf_wgrad, &c, 3, 10);
    lj_harness_report(group, "wgrad e5m2 x e4m3 1x128 x 1x128 (+=)", ms, flop / ms / 1e9, "TFLOP/s",
                      LJ_HARNESS_FP8_GEMM_CEILING_TFLOPS);
    ms = lj_harness_time_ms(G8, bw_perf_cast, &c, 3, 10);
    double bytes = (double)nx * 2 * 2 + (double)nx * 2; /* x read twice, q and q_t written */
    lj_harness_report(group, "x: 1x128 tiles rowwise and columnwise", ms, bytes / ms / 1e6, "GB/s",
                      LJ_HARNESS_HBM_CEILING_GBS);
    ms = lj_harness_time_ms(G8, bw_perf_cast_w, &c, 3, 10);
    bytes = (double)nw * 2 * 2 + (double)nw; /* W read twice (amax, cast), q written */
    lj_harness_report(group, "W: 128x128 blocks", ms, bytes / ms / 1e6, "GB/s", LJ_HARNESS_HBM_CEILING_GBS);
    G8->free(c.x), G8->free(c.w), G8->free(c.out), G8->free(c.dw), G8->free(c.qx), G8->free(c.qw), G8->free(c.qx_t);
    G8->free(c.qdy_t), G8->free(c.sx), G8->free(c.sx_t), G8->free(c.sdy_t), G8->free(c.sw), G8->free(c.amax);
}

/* ---- RMSNorm: d = {N, C} ----------------------------------------------------------------- */

typedef struct {
    const lj_ops *ops;
    int N, C;
    void *x, *y, *w, *out, *res, *sum, *dout, *dx, *ws, *dw;
    float *rstd;
    void *q, *q_t; /* the FP8 input of the linear after the norm and its transpose */
    float *st;     /* scale, scale_inv, amax */
    int current;
} rn_ctx;

static void rn_fwd(void *p) {
    rn_ctx *c = (rn_ctx *)p;
    c->ops->rmsnorm_forward(c->out, c->rstd, c->x, c->w, c->N, c->C, 1e-5f);
}
static void rn_fused(void *p) {
    rn_ctx *c = (rn_ctx *)p;
    c->ops->residual_rmsnorm_forward(c->res, c->out, c->rstd, c->x, c->y, c->w, c->N, c->C, 1e-5f);
}
static void rn_unfused(void *p) {
    rn_ctx *c = (rn_ctx *)p;
    c->ops->add(c->sum, c->x, c->y, (int64_t)c->N * c->C);
    c->ops->rmsnorm_forward(c->out, c->rstd, c->sum, c->w, c->N, c->C, 1e-5f);
}
/* The residual norm with the cast of its output fused (no act-dtype output kept, as an FP8 layer
 * without recompute runs it), against the residual norm then (the amax and) the cast. */
static void rn_fp8_fused(void *p) {
    rn_ctx *c = (rn_ctx *)p;
    const lj_fp8_scaling sc = {c->st, c->st + 1, c->st + 2, c->current};
    c->ops->fp8_rmsnorm_quantize(c->res, c->out, 0, c->rstd, c->q, c->q_t, c->x, c->y, c->w, c->N, c->C, 1e-5f,
                                 LJ_FP8_E4M3, &sc);
}
static void rn_fp8_unfused(void *p) {
    rn_ctx *c = (rn_ctx *)p;
    const lj_fp8_scaling sc = {c->st, c->st + 1, c->st + 2, c->current};
    rn_fused(p);
    if (c->current) c->ops->fp8_amax(c->st + 2, c->out, (int64_t)c->N * c->C);
    c->ops->fp8_quantize(c->q, c->q_t, c->out, c->N, c->C, LJ_FP8_E4M3, &sc);
}
static void rn_bwd(void *p) {
    rn_ctx *c = (rn_ctx *)p;
    c->ops->rmsnorm_backward(c->dx, c->dw, c->dout, c->x, c->w, c->rstd, c->N, c->C, LJ_GRAD_ACCUMULATE, c->ws);
}

void lj_case_cuda_perf_rmsnorm(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = perf_begin(cs), *cpu = lj_ops_cpu();
    const int N = cs->d[0], C = cs->d[1];
    SHAPE("N=%d C=%d", N, C);
    printf("rmsnorm %s\n", shape);
    const int64_t n = (int64_t)N * C;
    const size_t gs = lj_dtype_size(ops->grad_dtype);
    rn_ctx c;
    memset(&c, 0, sizeof c);
    c.ops = ops, c.N = N, c.C = C;
    c.x = lj_harness_drand_bf16(ops, n, 21, 2.0f);
    c.y = lj_harness_drand_bf16(ops, n, 22, 1.0f);
    c.w = lj_harness_drand_bf16(ops, C, 23, 1.0f);
    c.dout = lj_harness_drand_bf16(ops, n, 24, 1.0f);
    c.out = lj_harness_dalloc(ops, (size_t)n * 2), c.res = lj_harness_dalloc(ops, (size_t)n * 2);
    c.sum = lj_harness_dalloc(ops, (size_t)n * 2), c.dx = lj_harness_dalloc(ops, (size_t)n * 2);
    c.rstd = (float *)lj_harness_dalloc(ops, (size_t)N * 4);
    c.dw = lj_harness_dalloc(ops, (size_t)C * gs);
    c.ws = lj_harness_dalloc(ops, ops->rmsnorm_backward_workspace_bytes(N, C));
    /* forward and backward against the CPU backend */
    ops->memset_zero(c.dx, (size_t)n * 2);
    ops->memset_zero(c.dw, (size_t)C * gs);
    rn_fwd(&c);
    rn_bwd(&c);
    float *hx = lj_harness_download_f32(ops, c.x, n, LJ_DTYPE_BF16), *hw = lj_harness_download_f32(ops, c.w, C, LJ_DTYPE_BF16);
    float *hd = lj_harness_download_f32(ops, c.dout, n, LJ_DTYPE_BF16);
    float *ho = (float *)lj_calloc((size_t)n, 4), *hr = (float *)lj_calloc((size_t)N, 4);
    float *hdx = (float *)lj_calloc((size_t)n, 4), *hdw = (float *)lj_calloc((size_t)C, 4);
    void *hws = lj_malloc(cpu->rmsnorm_backward_workspace_bytes(N, C) + 1);
    cpu->rmsnorm_forward(ho, hr, hx, hw, N, C, 1e-5f);
    cpu->rmsnorm_backward(hdx, hdw, hd, hx, hw, hr, N, C, LJ_GRAD_ACCUMULATE, hws);
    float *go = lj_harness_download_f32(ops, c.out, n, LJ_DTYPE_BF16), *gdx = lj_harness_download_f32(ops, c.dx, n, LJ_DTYPE_BF16);
    float *gdw = lj_harness_download_f32(ops, c.dw, C, ops->grad_dtype);
    lj_harness_check_f(h, "perf rmsnorm_forward out", shape, go, ho, n, lj_harness_tol_l2(1e-2));
    lj_harness_check_f(h, "perf rmsnorm_backward dx", shape, gdx, hdx, n, lj_harness_tol_l2(1e-2));
    lj_harness_check_f(h, "perf rmsnorm_backward dw", shape, gdw, hdw, C, lj_harness_tol_l2(1e-2));
    free(hx), free(hw), free(hd), free(ho), free(hr), free(hdx), free(hdw), free(hws), free(go), free(gdx), free(gdw);
    /* the fused residual add + norm against add then norm */
    rn_fused(&c);
    void *fused_out = lj_harness_dalloc(ops, (size_t)n * 2);
    ops->copy(fused_out, c.out, (size_t)n * 2);
    rn_unfused(&c);
    lj_harness_check_device(h, ops, "perf residual_rmsnorm vs add+rmsnorm out", shape, fused_out, c.out, n,
                            LJ_DTYPE_BF16, lj_harness_tol_l2(1e-6));
    lj_harness_check_device(h, ops, "perf residual_rmsnorm vs add res_out", shape, c.res, c.sum, n, LJ_DTYPE_BF16,
                            lj_harness_tol_l2(1e-6));
    ops->free(fused_out);
    char group[160];
    snprintf(group, sizeof group, "rmsnorm %s", shape);
    report_gbs(group, "forward", ops, rn_fwd, &c, 4.0 * n);
    report_gbs(group, "residual+norm fused", ops, rn_fused, &c, 8.0 * n);
    report_gbs(group, "add + norm unfused", ops, rn_unfused, &c, 10.0 * n);
    report_gbs(group, "backward", ops, rn_bwd, &c, 8.0 * n);
    /* the FP8 cast fused into the residual norm (q and q_t written, the norm's output not), delayed
     * and current scaling, against the norm followed by the cast; the same codes either way */
    const size_t nq = (size_t)N * lj_fp8_ld(C), nqt = (size_t)C * lj_fp8_ld(N);
    c.q = lj_harness_dalloc(ops, nq), c.q_t = lj_harness_dalloc(ops, nqt);
    c.st = (float *)lj_harness_dalloc(ops, 16);
    void *ref_q = lj_harness_dalloc(ops, nq), *ref_qt = lj_harness_dalloc(ops, nqt);
    uint8_t *gq = (uint8_t *)lj_malloc(nq), *rq = (uint8_t *)lj_malloc(nq);
    uint8_t *gqt = (uint8_t *)lj_malloc(nqt), *rqt = (uint8_t *)lj_malloc(nqt);
    for (int cur = 0; cur < 2; cur++) {
        const float st0[3] = {64.0f, 1.0f / 64.0f, 0.0f};
        c.current = cur;
        ops->upload(c.st, st0, sizeof st0);
        rn_fp8_unfused(&c);
        ops->copy(ref_q, c.q, nq), ops->copy(ref_qt, c.q_t, nqt);
        ops->upload(c.st, st0, sizeof st0);
        rn_fp8_fused(&c);
        ops->download(gq, c.q, nq), ops->download(rq, ref_q, nq);
        ops->download(gqt, c.q_t, nqt), ops->download(rqt, ref_qt, nqt);
        ops->synchronize();
        const char *what = cur ? "perf fp8_rmsnorm_quantize current" : "perf fp8_rmsnorm_quantize delayed";
        lj_harness_check_bits(h, what, shape, gq, rq, nq);
        lj_harness_check_bits(h, what, shape, gqt, rqt, nqt);
        /* fused: x and y read, res_out, q and q_t written; unfused: the norm's 8 bytes, the
         * amax's 2 (current), the cast's 4 */
        report_gbs(group, cur ? "fp8 cast fused, current" : "fp8 cast fused, delayed", ops, rn_fp8_fused, &c,
                   (cur ? 10.0 : 8.0) * n);
        report_gbs(group, cur ? "norm then fp8 cast, current" : "norm then fp8 cast, delayed", ops, rn_fp8_unfused,
                   &c, (cur ? 14.0 : 12.0) * n);
    }
    free(gq), free(rq), free(gqt), free(rqt);
    ops->free(c.q), ops->free(c.q_t), ops->free(c.st), ops->free(ref_q), ops->free(ref_qt);
    ops->free(c.x), ops->free(c.y), ops->free(c.w), ops->free(c.dout), ops->free(c.out), ops->free(c.res);
    ops->free(c.sum), ops->free(c.dx), ops->free(c.rstd), ops->free(c.dw), ops->free(c.ws);
}

/* ---- lm_head + cross-entropy: d = {N, C, V}; fused against unfused -------------------------- */

typedef struct {
    const lj_ops *ops;
    int N, C, V;
    void *x, *w, *dx, *logits, *ws, *dw;
    float *losses;
    int32_t *targets;
} ce_ctx;

static void ce_fused(void *p) {
    ce_ctx *c = (ce_ctx *)p;
    c->ops->cross_entropy_fused(c->losses, c->dx, c->dw, c->x, c->w, c->targets, c->N, c->C, c->V, 1.0f / c->N, c->ws);
}
static void ce_unfused(void *p) {
    ce_ctx *c = (ce_ctx *)p;
    c->ops->matmul_forward(c->logits, c->x, c->w, c->N, c->C, c->V);
    c->ops->cross_entropy_forward_backward(c->losses, c->logits, c->logits, c->targets, c->N, c->V, 1.0f / c->N);
    c->ops->matmul_backward(c->dx, c->dw, c->logits, c->x, c->w, c->N, c->C, c->V, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
}

void lj_case_cuda_perf_cross_entropy(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = perf_begin(cs);
    ce_ctx c;
    memset(&c, 0, sizeof c);
    c.ops = ops, c.N = cs->d[0], c.C = cs->d[1], c.V = cs->d[2];
    SHAPE("N=%d C=%d V=%d", c.N, c.C, c.V);
    const int64_t nx = (int64_t)c.N * c.C, nw = (int64_t)c.V * c.C;
    const size_t gs = lj_dtype_size(ops->grad_dtype);
    c.x = lj_harness_drand_bf16(ops, nx, 31, 2.0f);
    c.w = lj_harness_drand_bf16(ops, nw, 32, 0.05f);
    c.dx = lj_harness_dalloc(ops, (size_t)nx * 2);
    c.dw = lj_harness_dalloc(ops, (size_t)nw * gs);
    c.losses = (float *)lj_harness_dalloc(ops, (size_t)c.N * 4);
    c.logits = lj_harness_dalloc(ops, (size_t)c.N * c.V * 2);
    const size_t wsb = ops->cross_entropy_fused_workspace_bytes(c.N, c.C, c.V);
    c.ws = lj_harness_dalloc(ops, wsb);
    int32_t *t = (int32_t *)lj_malloc((size_t)c.N * 4);
    for (int n = 0; n < c.N; n++) t[n] = n % 97 == 5 ? -1 : (int32_t)(((uint32_t)n * 2654435761u) % (uint32_t)c.V);
    c.targets = (int32_t *)lj_harness_dalloc(ops, (size_t)c.N * 4);
    ops->upload(c.targets, t, (size_t)c.N * 4);
    free(t);
    printf("lm_head + cross-entropy %s (fused workspace %.0f MiB, unfused logits %.0f MiB)\n", shape, wsb / 1048576.0,
           (double)c.N * c.V * 2 / 1048576.0);
    float *l1 = (float *)lj_harness_dalloc(ops, (size_t)c.N * 4);
    void *dw1 = lj_harness_dalloc(ops, (size_t)nw * gs), *dx1 = lj_harness_dalloc(ops, (size_t)nx * 2);
    ops->memset_zero(c.dw, (size_t)nw * gs);
    ce_fused(&c);
    ops->copy(l1, c.losses, (size_t)c.N * 4);
    ops->copy(dx1, c.dx, (size_t)nx * 2);
    ops->copy(dw1, c.dw, (size_t)nw * gs);
    ops->memset_zero(c.dw, (size_t)nw * gs);
    ce_unfused(&c);
    lj_harness_check_device(h, ops, "perf cross_entropy fused vs unfused losses", shape, l1, c.losses, c.N,
                            LJ_DTYPE_F32, lj_harness_tol_l2(1e-5));
    lj_harness_check_device(h, ops, "perf cross_entropy fused vs unfused dx", shape, dx1, c.dx, nx, LJ_DTYPE_BF16,
                            lj_harness_tol_l2(1e-2));
    lj_harness_check_device(h, ops, "perf cross_entropy fused vs unfused dw", shape, dw1, c.dw, nw, ops->grad_dtype,
                            lj_harness_tol_l2(gs == 4 ? 1e-3 : 1e-2));
    ops->free(l1), ops->free(dw1), ops->free(dx1);
    const double flop = 6.0 * c.N * (double)c.V * c.C;
    char group[160];
    snprintf(group, sizeof group, "cross_entropy %s", shape);
    double fused = lj_harness_time_ms(ops, ce_fused, &c, 2, 10), unfused = lj_harness_time_ms(ops, ce_unfused, &c, 2, 10);
    lj_harness_report(group, "fused", fused, flop / (fused * 1e-3) / 1e12, "TFLOP/s", LJ_HARNESS_GEMM_CEILING_TFLOPS);
    lj_harness_report(group, "unfused", unfused, flop / (unfused * 1e-3) / 1e12, "TFLOP/s",
                      LJ_HARNESS_GEMM_CEILING_TFLOPS);
    ops->free(c.x), ops->free(c.w), ops->free(c.dx), ops->free(c.dw), ops->free(c.losses), ops->free(c.logits);
    ops->free(c.ws), ops->free(c.targets);
}

/* ---- memory-bound ops ----------------------------------------------------------------------- */

typedef struct {
    const lj_ops *ops;
    int N, I, C, V, B, T, nh, nkv, hd;
    int64_t P;
    void *gate_up, *out, *tmp, *dout, *dgu, *qkv, *emb_out, *wte, *params, *dwte, *grad, *emb_ws;
    float *cosv, *sinv, *master, *m, *v, *gn, *ws, *scalars;
    int32_t *ids;
    lj_adamw_segment seg[2];
} ew_ctx;

static void sw_f(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->swiglu_forward(c->out, c->gate_up, c->N, c->I);
}
static void sw_fu(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->swiglu_forward_unfused(c->out, c->tmp, c->gate_up, c->N, c->I);
}
static void sw_b(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->swiglu_backward(c->dgu, c->dout, c->gate_up, c->N, c->I);
}
static void sw_bu(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->swiglu_backward_unfused(c->dgu, c->tmp, c->dout, c->gate_up, c->N, c->I);
}

/* d = {N, I} */
void lj_case_cuda_perf_swiglu(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = perf_begin(cs);
    ew_ctx c;
    memset(&c, 0, sizeof c);
    c.ops = ops, c.N = cs->d[0], c.I = cs->d[1];
    SHAPE("N=%d I=%d", c.N, c.I);
    printf("swiglu %s\n", shape);
    const int64_t nI = (int64_t)c.N * c.I;
    c.gate_up = lj_harness_drand_bf16(ops, 2 * nI, 41, 3.0f);
    c.dout = lj_harness_drand_bf16(ops, nI, 42, 1.0f);
    c.out = lj_harness_dalloc(ops, (size_t)nI * 2), c.tmp = lj_harness_dalloc(ops, (size_t)nI * 2);
    c.dgu = lj_harness_dalloc(ops, (size_t)nI * 4);
    void *o1 = lj_harness_dalloc(ops, (size_t)nI * 2), *d1 = lj_harness_dalloc(ops, (size_t)nI * 4);
    sw_f(&c);
    sw_b(&c);
    ops->copy(o1, c.out, (size_t)nI * 2);
    ops->copy(d1, c.dgu, (size_t)nI * 4);
    sw_fu(&c);
    sw_bu(&c);
    lj_harness_check_device(h, ops, "perf swiglu fused vs unfused forward", shape, o1, c.out, nI, LJ_DTYPE_BF16,
                            lj_harness_tol_l2(1e-2));
    lj_harness_check_device(h, ops, "perf swiglu fused vs unfused backward", shape, d1, c.dgu, 2 * nI, LJ_DTYPE_BF16,
                            lj_harness_tol_l2(1e-2));
    ops->free(o1), ops->free(d1);
    char group[160];
    snprintf(group, sizeof group, "swiglu %s", shape);
    report_gbs(group, "forward fused", ops, sw_f, &c, 6.0 * nI);
    report_gbs(group, "forward unfused", ops, sw_fu, &c, 6.0 * nI);
    report_gbs(group, "backward fused", ops, sw_b, &c, 10.0 * nI);
    report_gbs(group, "backward unfused", ops, sw_bu, &c, 10.0 * nI);
    ops->free(c.gate_up), ops->free(c.dout), ops->free(c.out), ops->free(c.tmp), ops->free(c.dgu);
}

static void rope_f(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->rope_forward(c->qkv, c->cosv, c->sinv, c->B, c->T, c->nh, c->nkv, c->hd);
}

/* d = {B, T, nh, nkv, hd} (timing only: check mode compares RoPE with the CPU backend) */
void lj_case_cuda_perf_rope(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)h, (void)mode;
    const lj_ops *ops = perf_begin(cs);
    ew_ctx c;
    memset(&c, 0, sizeof c);
    c.ops = ops, c.B = cs->d[0], c.T = cs->d[1], c.nh = cs->d[2], c.nkv = cs->d[3], c.hd = cs->d[4];
    SHAPE("B=%d T=%d nh=%d nkv=%d hd=%d", c.B, c.T, c.nh, c.nkv, c.hd);
    printf("rope %s\n", shape);
    const int64_t N = (int64_t)c.B * c.T, row = (int64_t)(c.nh + 2 * c.nkv) * c.hd;
    c.qkv = lj_harness_drand_bf16(ops, N * row, 43, 1.0f);
    c.cosv = lj_harness_drand_f32(ops, (int64_t)c.T * c.hd / 2, 44, 1.0f);
    c.sinv = lj_harness_drand_f32(ops, (int64_t)c.T * c.hd / 2, 45, 1.0f);
    char group[160];
    snprintf(group, sizeof group, "rope %s", shape);
    report_gbs(group, "forward", ops, rope_f, &c, 4.0 * N * (c.nh + c.nkv) * c.hd);
    ops->free(c.qkv), ops->free(c.cosv), ops->free(c.sinv);
}

static void emb_f(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->embedding_forward(c->emb_out, c->ids, c->wte, c->N, c->C);
}
static void emb_b(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->embedding_backward(c->dwte, c->emb_out, c->ids, c->N, c->C, c->emb_ws);
}

/* d = {N, C, V} (timing only) */
void lj_case_cuda_perf_embedding(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)h, (void)mode;
    const lj_ops *ops = perf_begin(cs);
    ew_ctx c;
    memset(&c, 0, sizeof c);
    c.ops = ops, c.N = cs->d[0], c.C = cs->d[1], c.V = cs->d[2];
    SHAPE("N=%d C=%d V=%d", c.N, c.C, c.V);
    printf("embedding %s\n", shape);
    const size_t gs = lj_dtype_size(ops->grad_dtype);
    c.wte = lj_harness_drand_bf16(ops, (int64_t)c.V * c.C, 46, 1.0f);
    c.emb_out = lj_harness_dalloc(ops, (size_t)c.N * c.C * 2);
    c.dwte = lj_harness_dalloc(ops, (size_t)c.V * c.C * gs);
    ops->memset_zero(c.dwte, (size_t)c.V * c.C * gs);
    c.emb_ws = lj_harness_dalloc(ops, ops->embedding_backward_workspace_bytes(c.N));
    int32_t *ids = (int32_t *)lj_malloc((size_t)c.N * 4);
    for (int n = 0; n < c.N; n++) ids[n] = (int32_t)(((uint32_t)n * 2654435761u) % (uint32_t)c.V);
    c.ids = (int32_t *)lj_harness_dalloc(ops, (size_t)c.N * 4);
    ops->upload(c.ids, ids, (size_t)c.N * 4);
    free(ids);
    char group[160];
    snprintf(group, sizeof group, "embedding %s", shape);
    report_gbs(group, "forward", ops, emb_f, &c, 4.0 * c.N * c.C);
    report_gbs(group, "backward", ops, emb_b, &c, 2.0 * c.N * c.C + 2.0 * gs * c.N * c.C);
    ops->free(c.wte), ops->free(c.emb_out), ops->free(c.dwte), ops->free(c.ids), ops->free(c.emb_ws);
}

static void opt_norm(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->global_norm_sq(c->gn, c->grad, c->P, c->ws);
}
static void opt_adamw(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    lj_adamw_hparams hp = {0.9f, 0.95f, 1e-8f, 1.0f};
    c->ops->adamw_update(c->params, c->master, c->grad, c->m, c->v, c->seg, 2, &hp, c->scalars, c->gn);
}

/* d = {P}: the global norm and multi-tensor AdamW over P parameters (P = d[0] * 100, to fit
 * an int) in two segments (timing only) */
void lj_case_cuda_perf_optimizer(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)h, (void)mode;
    const lj_ops *ops = perf_begin(cs);
    ew_ctx c;
    memset(&c, 0, sizeof c);
    c.ops = ops, c.P = (int64_t)cs->d[0] * 100;
    SHAPE("P=%lld", (long long)c.P);
    const size_t gs = lj_dtype_size(ops->grad_dtype);
    printf("optimizer %s, %s gradients\n", shape, lj_dtype_name(ops->grad_dtype));
    c.grad = gs == 2 ? lj_harness_drand_bf16(ops, c.P, 47, 1e-3f) : (void *)lj_harness_drand_f32(ops, c.P, 47, 1e-3f);
    c.master = lj_harness_drand_f32(ops, c.P, 48, 0.02f);
    c.m = lj_harness_drand_f32(ops, c.P, 49, 1e-4f);
    c.v = (float *)lj_harness_dalloc(ops, (size_t)c.P * 4);
    ops->memset_zero(c.v, (size_t)c.P * 4);
    c.params = lj_harness_dalloc(ops, (size_t)c.P * 2);
    c.gn = (float *)lj_harness_dalloc(ops, 4);
    c.ws = (float *)lj_harness_dalloc(ops, ops->global_norm_workspace_bytes(c.P));
    c.scalars = (float *)lj_harness_dalloc(ops, LJ_ADAMW_NUM_SCALARS * sizeof(float));
    const lj_adamw_hparams hp = {0.9f, 0.95f, 1e-8f, 1.0f};
    float s[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(s, &hp, 3e-4f, 10); /* lr 3e-4 at step 10 */
    ops->upload(c.scalars, s, sizeof s);
    c.seg[0] = (lj_adamw_segment){0, c.P / 2, 0.1f, 0, 0};
    c.seg[1] = (lj_adamw_segment){c.P / 2, c.P - c.P / 2, 0.0f, 0, 0};
    char group[160];
    snprintf(group, sizeof group, "optimizer %s grad %s", shape, lj_dtype_name(ops->grad_dtype));
    report_gbs(group, "global_norm_sq", ops, opt_norm, &c, (double)gs * c.P);
    report_gbs(group, "adamw_update", ops, opt_adamw, &c, (26.0 + gs) * c.P);
    ops->free(c.grad), ops->free(c.master), ops->free(c.m), ops->free(c.v), ops->free(c.params), ops->free(c.gn);
    ops->free(c.ws), ops->free(c.scalars);
}

/* ---- serving's paged attention: d = {S, L, nh, nkv, hd, fp8} ---------------------------------
 * A decode batch: S sequences, one query row each, of about L positions (L/2 .. 3L/2, spread over
 * the batch; L for one sequence), blocks of 16 handed out in a scrambled order, the cache bf16 (fp8 = 0) or E4M3 codes
 * (fp8 = 1, k_scale 0.5, v_scale 0.25). Checked first on two rows against a double reference over
 * the downloaded cache, then timed: GB/s of the cache bytes the rows read (every key and value of
 * positions 0..pos once) plus the queries and outputs. */
typedef struct {
    const lj_ops *ops;
    void *out, *qkv, *cache;
    int32_t *tables, *seq, *pos;
    float *ks, *vs;
    int S, MB, nh, nkv, hd, fp8;
} pa_perf_ctx;

static void pa_perf_run(void *p) {
    pa_perf_ctx *c = (pa_perf_ctx *)p;
    if (c->fp8)
        c->ops->paged_attention_fp8(c->out, c->qkv, c->cache, c->tables, c->seq, c->pos, c->S, c->MB, 16, c->nh,
                                    c->nkv, c->hd, c->ks, c->vs);
    else
        c->ops->paged_attention(c->out, c->qkv, c->cache, c->tables, c->seq, c->pos, c->S, c->MB, 16, c->nh, c->nkv,
                                c->hd);
}

void lj_case_cuda_perf_paged_attention(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = perf_begin(cs);
    pa_perf_ctx c;
    memset(&c, 0, sizeof c);
    c.ops = ops, c.S = cs->d[0], c.nh = cs->d[2], c.nkv = cs->d[3], c.hd = cs->d[4], c.fp8 = cs->d[5];
    const int S = c.S, L = cs->d[1], hd = c.hd, Q = c.nh * hd, KV = c.nkv * hd, row = Q + 2 * KV, rep = c.nh / c.nkv;
    const int es = c.fp8 ? 1 : 2;
    SHAPE("S=%d L=%d nh=%d nkv=%d hd=%d %s", S, L, c.nh, c.nkv, hd, c.fp8 ? "fp8" : "bf16");
    printf("paged_attention %s\n", shape);
    int32_t *len = (int32_t *)lj_malloc((size_t)S * 4), *pos = (int32_t *)lj_malloc((size_t)S * 4);
    int nblocks = 0;
    double kv_bytes = 0;
    for (int s = 0; s < S; s++) {
        len[s] = S > 1 ? L / 2 + (int)((int64_t)L * s / (S - 1)) : L;
        len[s] = len[s] < 1 ? 1 : len[s];
        pos[s] = len[s] - 1;
        c.MB = (len[s] + 15) / 16 > c.MB ? (len[s] + 15) / 16 : c.MB;
        nblocks += (len[s] + 15) / 16;
        kv_bytes += (double)len[s] * 2 * KV * es;
    }
    int32_t *tables = (int32_t *)lj_malloc((size_t)S * c.MB * 4), *perm = (int32_t *)lj_malloc((size_t)nblocks * 4),
            *seq = (int32_t *)lj_malloc((size_t)S * 4);
    for (int i = 0; i < nblocks; i++) perm[i] = i;
    uint32_t x = 12345u;
    for (int i = nblocks - 1; i > 0; i--) { /* a scrambled block order (xorshift) */
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        const int j = (int)(x % (uint32_t)(i + 1)), tmp = perm[i];
        perm[i] = perm[j], perm[j] = tmp;
    }
    for (int s = 0, b = 0; s < S; s++) {
        seq[s] = s;
        for (int k = 0; k < c.MB; k++) tables[s * c.MB + k] = k < (len[s] + 15) / 16 ? perm[b++] : 0;
    }
    c.tables = (int32_t *)lj_harness_upload(ops, tables, (int64_t)S * c.MB, LJ_DTYPE_F32);
    c.seq = (int32_t *)lj_harness_upload(ops, seq, S, LJ_DTYPE_F32);
    c.pos = (int32_t *)lj_harness_upload(ops, pos, S, LJ_DTYPE_F32);
    const int64_t slots = (int64_t)nblocks * 16;
    c.qkv = lj_harness_drand_bf16(ops, (int64_t)S * row, 71, 1.0f);
    c.out = lj_harness_dalloc(ops, (size_t)S * Q * 2);
    const float scales[2] = {0.5f, 0.25f};
    c.ks = (float *)lj_harness_upload(ops, scales, 1, LJ_DTYPE_F32);
    c.vs = (float *)lj_harness_upload(ops, scales + 1, 1, LJ_DTYPE_F32);
    if (c.fp8) { /* the codes written by paged_kv_write_fp8 from random rows, 4096 slots at a time */
        c.cache = lj_harness_dalloc(ops, (size_t)slots * 2 * KV);
        const int R = 4096;
        void *src = lj_harness_drand_bf16(ops, (int64_t)R * row, 72, 1.0f);
        int32_t *sl = (int32_t *)lj_malloc((size_t)R * 4);
        void *dsl = lj_harness_dalloc(ops, (size_t)R * 4);
        for (int64_t s0 = 0; s0 < slots; s0 += R) {
            const int r = slots - s0 < R ? (int)(slots - s0) : R;
            for (int i = 0; i < r; i++) sl[i] = (int32_t)(s0 + i);
            ops->upload(dsl, sl, (size_t)r * 4);
            ops->paged_kv_write_fp8(c.cache, src, (const int32_t *)dsl, r, c.nh, c.nkv, hd, c.ks, c.vs);
        }
        ops->synchronize();
        ops->free(src), ops->free(dsl), free(sl);
    } else {
        c.cache = lj_harness_drand_bf16(ops, slots * 2 * KV, 73, 1.0f);
    }
    /* the check: rows 0 and S - 1 against a double reference over their downloaded blocks */
    pa_perf_run(&c);
    float *got = lj_harness_download_f32(ops, c.out, (int64_t)S * Q, LJ_DTYPE_BF16);
    float *qf = lj_harness_download_f32(ops, c.qkv, (int64_t)S * row, LJ_DTYPE_BF16);
    const int checks[2] = {0, S - 1};
    for (int ci = 0; ci < (S > 1 ? 2 : 1); ci++) {
        const int s = checks[ci], nb = (len[s] + 15) / 16;
        float *kv = (float *)lj_malloc((size_t)nb * 16 * 2 * KV * sizeof(float));
        uint8_t *codes = (uint8_t *)lj_malloc((size_t)16 * 2 * KV);
        for (int b = 0; b < nb; b++) {
            const size_t off = (size_t)tables[s * c.MB + b] * 16 * 2 * KV;
            float *dst = kv + (size_t)b * 16 * 2 * KV;
            if (c.fp8) {
                ops->download(codes, (const uint8_t *)c.cache + off, (size_t)16 * 2 * KV);
                for (int i = 0; i < 16 * 2 * KV; i++)
                    dst[i] = lj_fp8_to_f32(codes[i], LJ_FP8_E4M3) * scales[i % (2 * KV) < KV ? 0 : 1];
            } else {
                float *f = lj_harness_download_f32(ops, (const uint16_t *)c.cache + off, (int64_t)16 * 2 * KV,
                                                   LJ_DTYPE_BF16);
                memcpy(dst, f, (size_t)16 * 2 * KV * sizeof(float));
                free(f);
            }
        }
        double *ref = (double *)lj_malloc((size_t)Q * sizeof(double)), *w = (double *)lj_malloc((size_t)len[s] * 8);
        for (int hh = 0; hh < c.nh; hh++) {
            const float *q = qf + (int64_t)s * row + hh * hd;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < len[s]; j++) {
                const float *k = kv + (int64_t)j * 2 * KV + (hh / rep) * hd;
                double d = 0;
                for (int e = 0; e < hd; e++) d += (double)q[e] * k[e];
                w[j] = d / sqrt((double)hd);
                mx = w[j] > mx ? w[j] : mx;
            }
            for (int j = 0; j < len[s]; j++) sum += (w[j] = exp(w[j] - mx));
            for (int e = 0; e < hd; e++) {
                double o = 0;
                for (int j = 0; j < len[s]; j++) o += w[j] * kv[(int64_t)j * 2 * KV + KV + (hh / rep) * hd + e];
                ref[hh * hd + e] = o / sum;
            }
        }
        char what[96];
        snprintf(what, sizeof what, "perf paged_attention row %d (len %d)", s, len[s]);
        lj_harness_check_d(h, what, shape, got + (int64_t)s * Q, ref, Q, lj_harness_tol_l2(1e-2));
        free(kv), free(codes), free(ref), free(w);
    }
    free(got), free(qf);
    char group[160];
    snprintf(group, sizeof group, "paged_attention %s", shape);
    report_gbs(group, "decode", ops, pa_perf_run, &c, kv_bytes + 4.0 * S * Q);
    ops->free(c.out), ops->free(c.qkv), ops->free(c.cache), ops->free(c.tables), ops->free(c.seq), ops->free(c.pos);
    ops->free(c.ks), ops->free(c.vs);
    free(len), free(pos), free(tables), free(perm), free(seq);
}

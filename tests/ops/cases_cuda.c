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

/* HF rope tables for positions 0..T-1: cos/sin[t, i] of angle t * theta^(-2i/hd). */
static void rope_tables(float *cosv, float *sinv, int T, int hd) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd / 2; i++) {
            double a = t * pow(500000.0, -2.0 * i / hd);
            cosv[t * (hd / 2) + i] = (float)cos(a);
            sinv[t * (hd / 2) + i] = (float)sin(a);
        }
}

static void test_adamw(int64_t total, float max_grad_norm) {
    char shape[80];
    snprintf(shape, sizeof shape, "n=%lld clip=%g", (long long)total, max_grad_norm);
    /* three segments with a gap, different weight decay; plus many small ones to pass one
     * launch's segment table */
    lj_adamw_segment seg[120];
    int ns = 0;
    int64_t off = 0;
    seg[ns++] = (lj_adamw_segment){off, total / 2, 0.1f};
    off += total / 2 + 3;
    seg[ns++] = (lj_adamw_segment){off, total / 4, 0.0f};
    off += total / 4;
    while (ns < 110 && off + 17 < total) {
        seg[ns++] = (lj_adamw_segment){off, 17, ns % 2 ? 0.01f : 0.0f};
        off += 17;
    }
    if (off < total) seg[ns++] = (lj_adamw_segment){off, total - off, 0.05f};
    lj_adamw_hparams hp = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .max_grad_norm = max_grad_norm};
    float sc[LJ_ADAMW_NUM_SCALARS]; /* lr 1e-3 at step 3: host memory for H, device memory for G */
    lj_adamw_step_scalars(sc, &hp, 1e-3f, 3);
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
    lj_adamw_segment seg[2] = {{0, g->P / 2, 0.1f}, {g->P / 2, g->P - g->P / 2, 0.0f}};
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

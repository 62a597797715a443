/* cases_graph.c: a captured graph of a chain of ops shaped like one layer's training step (ops.h
 * "graphs"), written once for every backend (case.h): the chain run eagerly for two optimizer
 * steps of different lr and step t (whose master weights must differ), then captured once (the
 * step scalars of neither baked in) and replayed for each step after uploading its scalars, the
 * first twice, each output against the eager one: within 1e-6 where the ops are deterministic,
 * 1e-3 / 1e-2 where atomics sum in another order. On a backend without graphs (the CPU) the
 * "replay" runs the chain again, which checks the premise: the chain is idempotent but for the
 * step scalars. Rows: "cuda_graph" in op_cases.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/case.h"

/* The chain's device buffers. Every output is a separate buffer and every accumulated gradient
 * is zeroed inside the chain, so the chain is idempotent (the optimizer state is restored from
 * copies first) except for AdamW's step scalars (lr, bias corrections), which it reads from
 * memory (`scalars`): a replay takes the values uploaded before its launch, as the training
 * step's graph does. */
typedef struct {
    int B, T, C, nh, nkv, hd, I, V, N, QKV;
    int64_t P; /* flat parameter count: w_qkv, w_up, norm */
    int32_t *ids, *targets;
    void *wte, *x, *w_norm, *xn, *w_qkv, *qkv, *att, *lse, *att_ws, *dqkv, *datt, *gu, *w_up, *h, *dh, *dgu, *dxn;
    void *dx_norm, *losses, *dwte, *norm_ws, *ce_ws, *emb_ws, *rstd, *cosv, *sinv, *grads, *gnorm, *gn_ws;
    void *master, *master0, *m, *m0, *v, *v0, *params, *w_lm, *dw_lm, *scalars;
} graph_bufs;

static const lj_adamw_hparams graph_hp = {0.9f, 0.95f, 1e-8f, 1.0f, LJ_DTYPE_F32, LJ_DTYPE_F32};

/* Uploads the AdamW step scalars of (lr, step) into g->scalars (stream order, outside capture). */
static void graph_set_step(const lj_ops *o, const graph_bufs *g, float lr, int step) {
    float sc[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(sc, &graph_hp, lr, step);
    o->upload(g->scalars, sc, sizeof sc);
}

static void graph_chain(const lj_ops *o, const graph_bufs *g) {
    const size_t gs = lj_dtype_size(o->grad_dtype), as = lj_dtype_size(o->act_dtype);
    char *grads = g->grads;
    char *dw_qkv = grads, *dw_up = grads + (size_t)g->QKV * g->C * gs, *dw_norm = dw_up + (size_t)2 * g->I * g->C * gs;
    o->memset_zero(g->grads, (size_t)g->P * gs);
    o->memset_zero(g->dwte, (size_t)g->V * g->C * gs);
    o->memset_zero(g->dx_norm, (size_t)g->N * g->C * as);
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
    o->matmul_backward(g->datt, dw_up, g->dgu, g->att, g->w_up, g->N, g->C, 2 * g->I, LJ_GRAD_OVERWRITE,
                       LJ_GRAD_ACCUMULATE);
    o->attention_backward(g->dqkv, g->datt, g->qkv, g->att, g->lse, g->B, g->T, g->nh, g->nkv, g->hd, g->att_ws);
    o->rope_backward(g->dqkv, g->cosv, g->sinv, g->B, g->T, g->nh, g->nkv, g->hd);
    o->matmul_backward(g->dxn, dw_qkv, g->dqkv, g->xn, g->w_qkv, g->N, g->C, g->QKV, LJ_GRAD_OVERWRITE,
                       LJ_GRAD_ACCUMULATE);
    o->rmsnorm_backward(g->dx_norm, dw_norm, g->dxn, g->x, g->w_norm, g->rstd, g->N, g->C, LJ_GRAD_ACCUMULATE,
                        g->norm_ws);
    o->embedding_backward(g->dwte, g->dx_norm, g->ids, g->N, g->C, g->emb_ws);
    o->global_norm_sq(g->gnorm, g->grads, g->P, g->gn_ws);
    o->copy(g->master, g->master0, (size_t)g->P * 4);
    o->copy(g->m, g->m0, (size_t)g->P * 4);
    o->copy(g->v, g->v0, (size_t)g->P * 4);
    lj_adamw_segment seg[2] = {{0, g->P / 2, 0.1f, 0, 0}, {g->P / 2, g->P - g->P / 2, 0.0f, 0, 0}};
    o->adamw_update(g->params, g->master, g->grads, g->m, g->v, seg, 2, &graph_hp, g->scalars, g->gnorm);
}

/* no shape: B=2 T=100 nh=4 nkv=2 hd=64 (C=256) I=160 V=1000 */
static void graph_body(lj_case_ctx *x) {
    const lj_ops *o = x->ops;
    if (!lj_case_checks(x)) return; /* twins and assertions only */
    graph_bufs g;
    memset(&g, 0, sizeof g);
    g.B = 2, g.T = 100, g.nh = 4, g.nkv = 2, g.hd = 64, g.C = g.nh * g.hd, g.I = 160, g.V = 1000;
    g.N = g.B * g.T, g.QKV = (g.nh + 2 * g.nkv) * g.hd;
    g.P = (int64_t)g.QKV * g.C + (int64_t)2 * g.I * g.C + g.C;
    const int64_t nc = (int64_t)g.N * g.C, h2 = g.hd / 2;
    lj_case_shape(x, "chain");
    int32_t *ids = (int32_t *)lj_case_zeros(x, g.N), *tg = (int32_t *)lj_case_zeros(x, g.N);
    for (int n = 0; n < g.N; n++) {
        ids[n] = (int32_t)lj_rng_below(&x->h->rng, (uint64_t)g.V);
        tg[n] = (int32_t)lj_rng_below(&x->h->rng, (uint64_t)g.V);
    }
    g.ids = lj_case_upload(x, ids, g.N, LJ_CASE_I32), g.targets = lj_case_upload(x, tg, g.N, LJ_CASE_I32);
    g.wte = lj_case_upload(x, lj_case_rand(x, (int64_t)g.V * g.C, 1.0f), (int64_t)g.V * g.C, LJ_CASE_PARAM);
    g.w_lm = lj_case_upload(x, lj_case_rand(x, (int64_t)g.V * g.I, 0.1f), (int64_t)g.V * g.I, LJ_CASE_PARAM);
    g.w_norm = lj_case_upload(x, lj_case_rand(x, g.C, 1.0f), g.C, LJ_CASE_PARAM);
    g.w_qkv = lj_case_upload(x, lj_case_rand(x, (int64_t)g.QKV * g.C, 0.1f), (int64_t)g.QKV * g.C, LJ_CASE_PARAM);
    g.w_up = lj_case_upload(x, lj_case_rand(x, (int64_t)2 * g.I * g.C, 0.1f), (int64_t)2 * g.I * g.C, LJ_CASE_PARAM);
    g.master0 = lj_case_upload(x, lj_case_rand(x, g.P, 0.1f), g.P, LJ_CASE_F32);
    g.m0 = lj_case_upload(x, lj_case_rand(x, g.P, 0.01f), g.P, LJ_CASE_F32);
    g.v0 = lj_case_upload(x, lj_case_zeros(x, g.P), g.P, LJ_CASE_F32);
    float *cs = lj_case_zeros(x, g.T * h2), *sn = lj_case_zeros(x, g.T * h2);
    for (int t = 0; t < g.T; t++)
        for (int i = 0; i < h2; i++) {
            const double a = t * pow(500000.0, -2.0 * i / g.hd);
            cs[t * h2 + i] = (float)cos(a), sn[t * h2 + i] = (float)sin(a);
        }
    g.cosv = lj_case_upload(x, cs, g.T * h2, LJ_CASE_F32), g.sinv = lj_case_upload(x, sn, g.T * h2, LJ_CASE_F32);
    g.x = lj_case_alloc(x, nc, LJ_CASE_ACT), g.xn = lj_case_alloc(x, nc, LJ_CASE_ACT);
    g.qkv = lj_case_alloc(x, (int64_t)g.N * g.QKV, LJ_CASE_ACT), g.att = lj_case_alloc(x, nc, LJ_CASE_ACT);
    g.lse = lj_case_alloc(x, (int64_t)g.B * g.nh * g.T, LJ_CASE_F32);
    g.att_ws = lj_case_scratch(x, o->attention_workspace_bytes(g.B, g.T, g.nh, g.nkv, g.hd));
    g.dqkv = lj_case_alloc(x, (int64_t)g.N * g.QKV, LJ_CASE_ACT), g.datt = lj_case_alloc(x, nc, LJ_CASE_ACT);
    const int64_t ngu = (int64_t)g.N * 2 * g.I, nh = (int64_t)g.N * g.I;
    g.gu = lj_case_alloc(x, ngu, LJ_CASE_ACT), g.dgu = lj_case_alloc(x, ngu, LJ_CASE_ACT);
    g.h = lj_case_alloc(x, nh, LJ_CASE_ACT), g.dh = lj_case_alloc(x, nh, LJ_CASE_ACT);
    g.dxn = lj_case_alloc(x, nc, LJ_CASE_ACT), g.dx_norm = lj_case_alloc(x, nc, LJ_CASE_ACT);
    g.losses = lj_case_alloc(x, g.N, LJ_CASE_F32), g.dwte = lj_case_alloc(x, (int64_t)g.V * g.C, LJ_CASE_GRAD);
    g.rstd = lj_case_alloc(x, g.N, LJ_CASE_F32);
    g.norm_ws = lj_case_scratch(x, o->rmsnorm_backward_workspace_bytes(g.N, g.C));
    g.ce_ws = lj_case_scratch(x, o->cross_entropy_fused_workspace_bytes(g.N, g.I, g.V));
    g.emb_ws = lj_case_scratch(x, o->embedding_backward_workspace_bytes(g.N));
    g.grads = lj_case_alloc(x, g.P, LJ_CASE_GRAD), g.gnorm = lj_case_alloc(x, 1, LJ_CASE_F32);
    g.gn_ws = lj_case_scratch(x, o->global_norm_workspace_bytes(g.P));
    g.master = lj_case_alloc(x, g.P, LJ_CASE_F32), g.m = lj_case_alloc(x, g.P, LJ_CASE_F32);
    g.v = lj_case_alloc(x, g.P, LJ_CASE_F32), g.params = lj_case_alloc(x, g.P, LJ_CASE_PARAM);
    g.dw_lm = lj_case_alloc(x, (int64_t)g.V * g.I, LJ_CASE_GRAD);
    g.scalars = lj_case_alloc(x, LJ_ADAMW_NUM_SCALARS, LJ_CASE_F32);

    /* what is compared: name, buffer, elements, kind, exact (atomics make some inexact) */
    struct {
        const char *name;
        void *buf;
        int64_t n;
        lj_case_kind kind;
        int exact;
    } outs[] = {{"losses", g.losses, g.N, LJ_CASE_F32, 1},
                {"attention out", g.att, nc, LJ_CASE_ACT, 1},
                {"dqkv", g.dqkv, (int64_t)g.N * g.QKV, LJ_CASE_ACT, 0},
                {"dx (rmsnorm)", g.dx_norm, nc, LJ_CASE_ACT, 0},
                {"dwte", g.dwte, (int64_t)g.V * g.C, LJ_CASE_GRAD, 1},
                {"grads", g.grads, g.P, LJ_CASE_GRAD, 0},
                {"master", g.master, g.P, LJ_CASE_F32, 0},
                {"params", g.params, g.P, LJ_CASE_PARAM, 0},
                {"dw lm_head", g.dw_lm, (int64_t)g.V * g.I, LJ_CASE_GRAD, 1}};
    enum { NOUTS = sizeof outs / sizeof outs[0], MASTER = 6 };
    /* two optimizer steps with different lr and step t: eager first, each output kept */
    const struct {
        float lr;
        int step;
    } steps[2] = {{1e-3f, 1}, {2.5e-4f, 7}};
    void *eager[2][NOUTS];
    for (int k = 0; k < 2; k++) {
        graph_set_step(o, &g, steps[k].lr, steps[k].step);
        graph_chain(o, &g);
        for (int i = 0; i < NOUTS; i++) {
            eager[k][i] = lj_case_alloc(x, outs[i].n, outs[i].kind);
            o->copy(eager[k][i], outs[i].buf, lj_case_bytes(x, outs[i].n, outs[i].kind));
        }
    }
    /* the steps must update the weights differently, or a replay that kept the captured step's
     * scalars would go unseen */
    {
        const float *m0 = lj_case_download(x, eager[0][MASTER], g.P, LJ_CASE_F32);
        const float *m1 = lj_case_download(x, eager[1][MASTER], g.P, LJ_CASE_F32);
        int64_t differ = 0;
        for (int64_t k = 0; k < g.P; k++) differ += m0[k] != m1[k];
        lj_case_true(x, "cuda_graph AdamW steps differ", differ != 0,
                     "lr %g t %d vs lr %g t %d: %lld of %lld master weights differ", steps[0].lr, steps[0].step,
                     steps[1].lr, steps[1].step, (long long)differ, (long long)g.P);
    }

    /* capture once (the scalars of neither step baked in), then replay each step after uploading
     * its scalars; step 1 is replayed twice */
    void *graph = NULL;
    lj_status st = LJ_OK;
    for (int i = 0; i < NOUTS; i++) lj_case_poison(x, outs[i].buf, outs[i].n, outs[i].kind);
    lj_case_poison(x, g.scalars, LJ_ADAMW_NUM_SCALARS, LJ_CASE_F32);
    if (o->graph_capture_begin) {
        st = o->graph_capture_begin();
        if (st == LJ_OK) {
            graph_chain(o, &g);
            st = o->graph_capture_end(&graph);
        }
    }
    for (int k = 0; k < 2 && st == LJ_OK; k++) {
        for (int i = 0; i < NOUTS; i++) lj_case_poison(x, outs[i].buf, outs[i].n, outs[i].kind);
        graph_set_step(o, &g, steps[k].lr, steps[k].step); /* in stream order before the launch */
        for (int r = 0; r < (k == 0 ? 2 : 1); r++) {
            if (graph) o->graph_launch(graph);
            else graph_chain(o, &g); /* no graphs: the chain again */
        }
        o->synchronize();
        if (k == 0)
            lj_case_true(x, "cuda_graph capture+replay", 1, "%s, step 1 replayed twice, then step 2",
                         graph ? "captured" : "no graphs on this backend: the chain run again");
        lj_case_shape(x, "chain, lr %g step %d", steps[k].lr, steps[k].step);
        for (int i = 0; i < NOUTS; i++) {
            char name[64];
            snprintf(name, sizeof name, "cuda_graph replay vs eager %s", outs[i].name);
            const lj_harness_tol exact = {1e-6, 1e-6, 1e-5}, inexact = {1e-3, 1e-2, 1e-5}, same = {0, -1, 0};
            lj_case_twin_at(x, name, outs[i].buf, eager[k][i], outs[i].n, outs[i].kind, same,
                            outs[i].exact ? exact : inexact);
        }
    }
    if (st != LJ_OK) lj_case_true(x, "cuda_graph capture+replay", 0, "%s", lj_error_message());
    if (graph) o->graph_destroy(graph);
}

void lj_case_graph(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, graph_body);
}

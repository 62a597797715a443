/* cases_docmask_cpu.c: the CPU backend's document-masking ops (ops.h attention_forward_docs,
 * attention_backward_docs; RoPE by positions is written once for every backend in cases_rope.c,
 * which uses the token helpers here) against double-precision
 * references (check) and central finite differences (grad); with the masks of no document
 * boundary they equal the plain ops bit for bit, and a packed sequence equals each of its
 * documents run alone, bit for bit. The documents come from tokens with EOD ids through
 * data/docmask.h, Megatron's rule. The comment above each function says what its d[] entries are. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/docmask.h"
#include "tests/ops/case.h"

#define SHAPE(...) char shape[96]; snprintf(shape, sizeof shape, __VA_ARGS__)
#define CHECK_D(op, got, ref, n, tol) lj_harness_check_d(h, (op), shape, (got), (ref), (n), (tol))
#define CHECK_BITS(op, a, b, bytes) lj_harness_check_bits(h, (op), shape, (a), (b), (bytes))
#define CHECK_TRUE(op, cond, ...) lj_harness_check_true(h, (op), shape, (cond), __VA_ARGS__)

enum { EOD = 0 };

static float *randf(lj_harness *h, int64_t n, float scale) { return lj_harness_randf(h, n, scale); }

/* ---- attention within documents: d = {B, T, nh, nkv, hd, mean document length} ---------- */

/* Runs document [s, e) of sequence b alone (B = 1, T = e - s) through the plain ops and compares
 * its rows with the packed results bit for bit. */
static int docs_alone_equal(const lj_ops *ops, const float *qkv, const float *dout, const float *out,
                            const float *lse, const float *dqkv, int b, int s, int e, int T, int nh, int nkv,
                            int hd) {
    const int Q = nh * hd, row = Q + 2 * nkv * hd, n = e - s;
    float *x = lj_malloc((size_t)n * row * 4), *go = lj_malloc((size_t)n * Q * 4);
    float *o = lj_malloc((size_t)n * Q * 4), *l = lj_malloc((size_t)nh * n * 4), *dx = lj_malloc((size_t)n * row * 4);
    memcpy(x, qkv + ((int64_t)b * T + s) * row, (size_t)n * row * 4);
    memcpy(go, dout + ((int64_t)b * T + s) * Q, (size_t)n * Q * 4);
    void *ws = lj_malloc(ops->attention_workspace_bytes(1, n, nh, nkv, hd));
    ops->attention_forward(o, l, x, 1, n, nh, nkv, hd, ws);
    ops->attention_backward(dx, go, x, o, l, 1, n, nh, nkv, hd, ws);
    int same = memcmp(o, out + ((int64_t)b * T + s) * Q, (size_t)n * Q * 4) == 0 &&
               memcmp(dx, dqkv + ((int64_t)b * T + s) * row, (size_t)n * row * 4) == 0;
    for (int hh = 0; hh < nh; hh++)
        same &= memcmp(l + (int64_t)hh * n, lse + ((int64_t)b * nh + hh) * T + s, (size_t)n * 4) == 0;
    free(x), free(go), free(o), free(l), free(dx), free(ws);
    return same;
}

void lj_case_cpu_attention_docs(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    const lj_ops *ops = lj_ops_cpu();
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], mean = c->d[5];
    SHAPE("B=%d T=%d nh=%d nkv=%d hd=%d doc~%d", B, T, nh, nkv, hd, mean);
    const int Q = nh * hd, row = Q + 2 * nkv * hd;
    const int64_t nqkv = (int64_t)B * T * row, nout = (int64_t)B * T * Q, nlse = (int64_t)B * nh * T;
    int32_t *tokens = lj_malloc((size_t)B * T * 4), *ds = lj_malloc((size_t)B * T * 4);
    lj_case_docmask_tokens(&h->rng, B, T, mean, tokens);
    lj_case_docmask_build(B, T, tokens, NULL, ds);
    float *qkv = randf(h, nqkv, 1), *out = randf(h, nout, 1), *lse = randf(h, nlse, 1);
    void *ws = lj_malloc(ops->attention_workspace_bytes(B, T, nh, nkv, hd));
    ops->attention_forward_docs(out, lse, qkv, ds, B, T, nh, nkv, hd, ws);
    lj_case_attn ac = {B, T, nh, nkv, hd, lj_harness_to_double(qkv, nqkv), ds, randf(h, nout, 1)};
    float *dqkv = randf(h, nqkv, 100); /* overwritten: start from garbage */
    ops->attention_backward_docs(dqkv, ac.R, qkv, out, lse, ds, B, T, nh, nkv, hd, ws);
    if (mode == LJ_HARNESS_CHECK) {
        double *ref = lj_malloc(nout * sizeof(double)), *ref_lse = lj_malloc(nlse * sizeof(double));
        lj_case_ref_attention(&ac, ref, ref_lse);
        CHECK_D("attention_forward_docs out", out, ref, nout, c->tol);
        CHECK_D("attention_forward_docs lse", lse, ref_lse, nlse, c->tol);
        /* every document alone through the plain ops: the same bits */
        int alone = 1, docs = 0;
        for (int b = 0; b < B; b++)
            for (int s = 0; s < T;) {
                int e = s;
                while (e < T && ds[(int64_t)b * T + e] == s) e++;
                alone &= docs_alone_equal(ops, qkv, ac.R, out, lse, dqkv, b, s, e, T, nh, nkv, hd);
                docs++;
                s = e;
            }
        CHECK_TRUE("attention_docs == each document alone", alone, "%d documents: out, lse, dqkv bit for bit", docs);
        /* no boundary (doc_start all 0): the plain causal ops, bit for bit */
        int32_t *zero = lj_calloc((size_t)B * T, 4);
        float *o1 = lj_malloc(nout * 4), *l1 = lj_malloc(nlse * 4), *d1 = lj_malloc(nqkv * 4);
        float *o2 = lj_malloc(nout * 4), *l2 = lj_malloc(nlse * 4), *d2 = lj_malloc(nqkv * 4);
        ops->attention_forward_docs(o1, l1, qkv, zero, B, T, nh, nkv, hd, ws);
        ops->attention_backward_docs(d1, ac.R, qkv, o1, l1, zero, B, T, nh, nkv, hd, ws);
        ops->attention_forward(o2, l2, qkv, B, T, nh, nkv, hd, ws);
        ops->attention_backward(d2, ac.R, qkv, o2, l2, B, T, nh, nkv, hd, ws);
        CHECK_BITS("attention_forward_docs without boundaries == attention_forward", o1, o2, nout * 4);
        CHECK_BITS("attention_forward_docs lse without boundaries", l1, l2, nlse * 4);
        CHECK_BITS("attention_backward_docs without boundaries == attention_backward", d1, d2, nqkv * 4);
        free(ref), free(ref_lse), free(zero), free(o1), free(l1), free(d1), free(o2), free(l2), free(d2);
    } else {
        double *g = lj_harness_fd_grad(lj_case_attn_loss, &ac, ac.qkv, nqkv);
        CHECK_D("attention_backward_docs dqkv", dqkv, g, nqkv, c->tol_grad);
        free(g);
    }
    free(tokens), free(ds), free(qkv), free(out), free(lse), free(ws), free(ac.qkv), free((void *)ac.R), free(dqkv);
}

/* cases_attention.c: causal GQA attention, plain and within documents (attention_forward,
 * attention_backward, their _docs forms), and bidirectional attention over packed segments
 * (attention_varlen_*, the vision tower: its own section at the end), written once for every
 * backend (case.h): out and lse against a double reference and dqkv against finite differences on
 * the CPU, with the CPU's exact properties (a repeat gives the same bits; within documents: each
 * document alone and a mask without boundaries give the plain results bit for bit; over segments:
 * each segment alone); on CUDA each against the CPU, once per kernel family the case opens a table
 * for (lj_case_table: the own flash kernels, the simple ones, flash with one m-tile, cuDNN's SDPA,
 * cuDNN in deterministic mode, whose repeated backward gives the same bits), and the first run of
 * a shape inside a captured graph. The backward takes each backend's own forward out and lse, as
 * training does. Attention's CUDA backward rounds P and dS to bf16 for the tensor cores: 2e-2 /
 * 5e-2 there, lse 1e-3 / 1e-2. Rows: "attention", "attention_docs" and "attention_varlen" in
 * op_cases.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/case.h"

#ifdef LJ_HAVE_CUDA
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/vision.h"
#endif

/* The double-precision reference: qkv [B*T, Q+2KV] in the QKV layout, ds the first key of each
 * query's document ([B*T] i32, NULL: plain causal), R the weights of the scalar loss sum(out * R)
 * whose finite differences the grad mode takes. */
typedef struct {
    int B, T, nh, nkv, hd;
    double *qkv;
    const int32_t *ds;
    const float *R;
} attn_ref;

/* out[B*T, Q], lse[B, nh, T] (lse may be NULL): softmax((q k^T) / sqrt(hd)) v over the keys
 * j0 <= j <= t, j0 = c->ds[b*T + t] within documents (0 without them, plain causal), query head h
 * reading kv head h / (nh/nkv). */
static void ref_attention(const attn_ref *c, double *out, double *lse) {
    const int Q = c->nh * c->hd, KV = c->nkv * c->hd, row = Q + 2 * KV, T = c->T, hd = c->hd;
    double *s = lj_malloc((size_t)T * sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int hh = 0; hh < c->nh; hh++) {
            int g = hh / (c->nh / c->nkv);
            for (int t = 0; t < T; t++) {
                const int j0 = c->ds ? c->ds[(int64_t)b * T + t] : 0;
                const double *q = c->qkv + ((int64_t)b * T + t) * row + hh * hd;
                double m = -INFINITY, sum = 0;
                for (int j = j0; j <= t; j++) {
                    const double *k = c->qkv + ((int64_t)b * T + j) * row + Q + g * hd;
                    s[j] = 0;
                    for (int d = 0; d < hd; d++) s[j] += q[d] * k[d];
                    s[j] /= sqrt((double)hd);
                    m = fmax(m, s[j]);
                }
                for (int j = j0; j <= t; j++) sum += exp(s[j] - m);
                if (lse) lse[((int64_t)b * c->nh + hh) * T + t] = m + log(sum);
                double *o = out + ((int64_t)b * T + t) * Q + hh * hd;
                for (int d = 0; d < hd; d++) o[d] = 0;
                for (int j = j0; j <= t; j++) {
                    const double *v = c->qkv + ((int64_t)b * T + j) * row + Q + KV + g * hd;
                    double p = exp(s[j] - m) / sum;
                    for (int d = 0; d < hd; d++) o[d] += p * v[d];
                }
            }
        }
    free(s);
}

static double attn_loss(void *p) {
    const attn_ref *c = p;
    int64_t n = (int64_t)c->B * c->T * c->nh * c->hd;
    double *o = lj_malloc((size_t)n * sizeof(double)), l = 0;
    ref_attention(c, o, NULL);
    for (int64_t i = 0; i < n; i++) l += o[i] * c->R[i];
    free(o);
    return l;
}

/* The kernel families of a CUDA table, by the case table's numbers: 0 the own flash kernels
 * (head_dim 64 and 128; others fall to the simple ones), 1 the simple fp32 kernels, 2 flash with
 * one m-tile per warp in the head_dim 64 forward, 3 cuDNN's fused SDPA (AUTO: where it serves the
 * shape, else the own kernels), 5 cuDNN in deterministic mode. `docs`: the masked ops, which
 * AUTO serves with the own flash kernels. The CPU has one attention, whatever is asked. */
static lj_ops_config family_config(const lj_ops *ops, int kind, int docs) {
    lj_ops_config cfg = ops->config;
    if (docs) {
        cfg.attention = kind == 1 ? LJ_ATTENTION_SIMPLE : LJ_ATTENTION_AUTO;
    } else {
        cfg.attention = kind == 1 ? LJ_ATTENTION_SIMPLE : kind >= 3 ? LJ_ATTENTION_AUTO : LJ_ATTENTION_FLASH;
        cfg.deterministic = kind == 5;
    }
    cfg.flash_forward_mtiles = kind == 2 ? 1 : 2;
    return cfg;
}

/* Whether cuDNN runs the causal attention of this shape in mode det (0 off the CUDA pass). */
static int cudnn_active(const lj_case_ctx *x, int B, int T, int nh, int nkv, int hd, int det) {
#ifdef LJ_HAVE_CUDA
    if (x->pass == LJ_CASE_COMPARE) return lj_cuda_cudnn_attention_active(B, T, nh, nkv, hd, det);
#endif
    (void)x, (void)B, (void)T, (void)nh, (void)nkv, (void)hd, (void)det;
    return 0;
}

/* " (family)" in the names of the CUDA pass's checks ("" on the CPU; "-fallback" where cuDNN
 * does not serve the shape, so the own kernels ran). */
static void family_label(const lj_case_ctx *x, int kind, int docs, int B, int T, int nh, int nkv, int hd,
                         char *label, size_t size) {
    const char *k = kind == 1 ? "simple" : kind == 2 ? "flash-mt1" : kind == 5 ? "cudnn-deterministic"
                    : kind == 3 && !docs ? "cudnn" : "flash";
    const int fallback = !docs && kind >= 3 && !cudnn_active(x, B, T, nh, nkv, hd, kind == 5);
    if (lj_case_reference(x)) snprintf(label, size, "%s", "");
    else snprintf(label, size, " (%s%s)", k, fallback ? "-fallback" : "");
}

/* dqkv's q, k and v columns on the CUDA pass (against the CPU's; the CPU's dqkv is checked whole,
 * against finite differences, in grad mode). */
static void check_dqkv_parts(lj_case_ctx *x, const char *op, const char *label, const void *dqkv, int64_t rows,
                             int Q, int KV) {
    const int row = Q + 2 * KV;
    const float *d = lj_case_download(x, dqkv, rows * row, LJ_CASE_ACT);
    const char *part[3] = {"dq", "dk", "dv"};
    const int c0[3] = {0, Q, Q + KV}, w[3] = {Q, KV, KV};
    for (int k = 0; k < 3; k++) {
        char name[96];
        snprintf(name, sizeof name, "%s %s%s", op, part[k], label);
        float *v = lj_harness_gather(d + c0[k], rows * w[k], row, w[k]);
        lj_case_values_at(x, name, v, rows * w[k], LJ_CASE_ACT, NULL, x->c->tol_grad, lj_harness_tol_gpu(2e-2, 5e-2));
        free(v);
    }
}

/* One table's forward and backward of the case's inputs, out and lse against the reference
 * (check), dqkv against finite differences (grad; on CUDA its parts); ds: the document starts
 * (NULL: plain causal). The buffers are returned for the case's properties. */
typedef struct {
    void *out, *lse, *dqkv, *ws;
} attn_run;

static attn_run run_attention(lj_case_ctx *x, const lj_ops *A, const char *label, attn_ref *ref, void *qkv, void *dR,
                              void *ds) {
    const int B = ref->B, T = ref->T, nh = ref->nh, nkv = ref->nkv, hd = ref->hd;
    const int Q = nh * hd, KV = nkv * hd;
    const int64_t nqkv = (int64_t)B * T * (Q + 2 * KV), nout = (int64_t)B * T * Q, nlse = (int64_t)B * nh * T;
    const int check = x->mode == LJ_HARNESS_CHECK;
    const char *f = ds ? "attention_forward_docs" : "attention_forward";
    const char *b = ds ? "attention_backward_docs" : "attention_backward";
    attn_run r = {lj_case_alloc(x, nout, LJ_CASE_ACT), lj_case_alloc(x, nlse, LJ_CASE_F32),
                  lj_case_alloc(x, nqkv, LJ_CASE_ACT),
                  lj_case_scratch(x, A->attention_workspace_bytes(B, T, nh, nkv, hd))};
    if (ds) {
        A->attention_forward_docs(r.out, r.lse, qkv, ds, B, T, nh, nkv, hd, r.ws);
        A->attention_backward_docs(r.dqkv, dR, qkv, r.out, r.lse, ds, B, T, nh, nkv, hd, r.ws);
    } else {
        A->attention_forward(r.out, r.lse, qkv, B, T, nh, nkv, hd, r.ws);
        A->attention_backward(r.dqkv, dR, qkv, r.out, r.lse, B, T, nh, nkv, hd, r.ws);
    }
    char name[96];
    if (check) {
        double *want = NULL, *want_lse = NULL;
        if (lj_case_reference(x)) {
            want = lj_case_dzeros(x, nout), want_lse = lj_case_dzeros(x, nlse);
            ref_attention(ref, want, want_lse);
        }
        snprintf(name, sizeof name, "%s out%s", f, label);
        lj_case_output(x, name, r.out, nout, LJ_CASE_ACT, want, LJ_CASE_TOL_OUT);
        snprintf(name, sizeof name, "%s lse%s", f, label);
        lj_case_output_at(x, name, r.lse, nlse, LJ_CASE_F32, want_lse, x->c->tol, lj_harness_tol_gpu(1e-3, 1e-2));
    }
    if (!lj_case_reference(x)) {
        check_dqkv_parts(x, b, label, r.dqkv, (int64_t)B * T, Q, KV);
    } else if (!check) {
        double *g = lj_harness_fd_grad(attn_loss, ref, ref->qkv, nqkv);
        snprintf(name, sizeof name, "%s dqkv", b);
        lj_case_output(x, name, r.dqkv, nqkv, LJ_CASE_ACT, g, LJ_CASE_TOL_DGRAD);
        free(g);
    }
    return r;
}

/* d = {B, T, nh, nkv, hd, kind}: kind, the family (family_config; the CPU rows 0); -1 every
 * family the shape has: flash, simple, flash-mt1 at head_dim 64, cuDNN and cuDNN deterministic
 * at head_dim 64 and 128. */
/* The kernel families a case runs (family_config's kinds): `kind` alone when >= 0, else 0 and 1,
 * 2 at hd 64, and 3 and 5 where `auto_kinds` (the head dims those tables serve); returns the
 * count written to kinds[5]. */
static int kernel_families(int kind, int hd, int auto_kinds, int kinds[5]) {
    int nk = 0;
    if (kind >= 0) {
        kinds[nk++] = kind;
        return nk;
    }
    kinds[nk++] = 0, kinds[nk++] = 1;
    if (hd == 64) kinds[nk++] = 2;
    if (auto_kinds) kinds[nk++] = 3, kinds[nk++] = 5;
    return nk;
}

static void attention_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], kind = c->d[5];
    const int Q = nh * hd, row = Q + 2 * nkv * hd;
    const int64_t nqkv = (int64_t)B * T * row, nout = (int64_t)B * T * Q, nlse = (int64_t)B * nh * T;
    lj_case_shape(x, "B=%d T=%d nh=%d nkv=%d hd=%d", B, T, nh, nkv, hd);
    float *hqkv = lj_case_rand(x, nqkv, 1.0f), *R = lj_case_rand(x, nout, 1.0f);
    void *qkv = lj_case_upload(x, hqkv, nqkv, LJ_CASE_ACT), *dR = lj_case_upload(x, R, nout, LJ_CASE_ACT);
    attn_ref ref = {B, T, nh, nkv, hd, lj_case_to_double(x, hqkv, nqkv), NULL, R};
    int kinds[5];
    const int nk = kernel_families(kind, hd, hd == 64 || hd == 128, kinds);
    for (int k = 0; k < nk; k++) {
        const lj_ops_config cfg = family_config(x->ops, kinds[k], 0);
        const lj_ops *A = lj_case_table(x, &cfg);
        char label[48], name[96];
        family_label(x, kinds[k], 0, B, T, nh, nkv, hd, label, sizeof label);
        attn_run r = run_attention(x, A, label, &ref, qkv, dR, NULL);
        if (x->mode != LJ_HARNESS_CHECK) continue;
        /* the same inputs give the same bits: always on the CPU; on CUDA the backward of cuDNN's
         * deterministic mode */
        const int det = kinds[k] == 5 && cudnn_active(x, B, T, nh, nkv, hd, 1);
        if (lj_case_reference(x)) {
            void *out2 = lj_case_alloc(x, nout, LJ_CASE_ACT), *lse2 = lj_case_alloc(x, nlse, LJ_CASE_F32);
            A->attention_forward(out2, lse2, qkv, B, T, nh, nkv, hd, r.ws);
            lj_case_twin(x, "attention_forward out repeat", r.out, out2, nout, LJ_CASE_ACT, LJ_CASE_TOL_BITS);
            lj_case_twin(x, "attention_forward lse repeat", r.lse, lse2, nlse, LJ_CASE_F32, LJ_CASE_TOL_BITS);
        }
        if (lj_case_reference(x) || det) {
            void *dqkv2 = lj_case_alloc(x, nqkv, LJ_CASE_ACT);
            A->attention_backward(dqkv2, dR, qkv, r.out, r.lse, B, T, nh, nkv, hd, r.ws);
            snprintf(name, sizeof name, "attention_backward dqkv repeat%s", label);
            if (lj_case_reference(x))
                lj_case_twin(x, name, r.dqkv, dqkv2, nqkv, LJ_CASE_ACT, LJ_CASE_TOL_BITS);
            else
                lj_case_twin_at(x, name, dqkv2, r.dqkv, nqkv, LJ_CASE_ACT, x->c->tol, lj_harness_tol_gpu(0, 0));
        }
    }
}

void lj_case_attention(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, attention_body);
}

/* d = {B, T, nh, nkv, hd}: the model captures its very first step: cuDNN's plans are built when
 * the workspace is sized (before the capture) and first run inside it. The forward and backward
 * of a shape no other case has, captured and replayed (the table's graph entries; a backend
 * without them, the CPU, runs them eagerly), against the reference and the CPU. */
static void attention_captured_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4];
    const int Q = nh * hd, row = Q + 2 * nkv * hd;
    const int64_t nqkv = (int64_t)B * T * row, nout = (int64_t)B * T * Q, nlse = (int64_t)B * nh * T;
    lj_case_shape(x, "B=%d T=%d nh=%d nkv=%d hd=%d%s", B, T, nh, nkv, hd, ops->graph_capture_begin ? "" : " eager");
    float *hqkv = lj_case_rand(x, nqkv, 1.0f), *R = lj_case_rand(x, nout, 1.0f);
    void *qkv = lj_case_upload(x, hqkv, nqkv, LJ_CASE_ACT), *dR = lj_case_upload(x, R, nout, LJ_CASE_ACT);
    attn_ref ref = {B, T, nh, nkv, hd, lj_case_to_double(x, hqkv, nqkv), NULL, R};
    void *out = lj_case_alloc(x, nout, LJ_CASE_ACT), *lse = lj_case_alloc(x, nlse, LJ_CASE_F32);
    void *dqkv = lj_case_alloc(x, nqkv, LJ_CASE_ACT);
    void *ws = lj_case_scratch(x, ops->attention_workspace_bytes(B, T, nh, nkv, hd));
    char name[80];
    snprintf(name, sizeof name, "attention first run captured%s",
             lj_case_reference(x) ? ""
             : cudnn_active(x, B, T, nh, nkv, hd, ops->config.deterministic) ? " (cudnn)"
                                                                             : " (cudnn-fallback)");
    if (ops->graph_capture_begin) {
        void *graph = NULL;
        lj_status st = ops->graph_capture_begin();
        if (st == LJ_OK) {
            ops->attention_forward(out, lse, qkv, B, T, nh, nkv, hd, ws);
            ops->attention_backward(dqkv, dR, qkv, out, lse, B, T, nh, nkv, hd, ws);
            st = ops->graph_capture_end(&graph);
        }
        if (st == LJ_OK) {
            ops->graph_launch(graph);
            ops->synchronize();
            ops->graph_destroy(graph);
        } else {
            lj_case_true(x, name, 0, "capture and replay: %s", lj_error_message());
        }
    } else {
        ops->attention_forward(out, lse, qkv, B, T, nh, nkv, hd, ws);
        ops->attention_backward(dqkv, dR, qkv, out, lse, B, T, nh, nkv, hd, ws);
    }
    double *want = NULL, *fd = NULL;
    if (lj_case_reference(x) && x->mode == LJ_HARNESS_CHECK) {
        want = lj_case_dzeros(x, nout);
        ref_attention(&ref, want, NULL);
    }
    if (lj_case_reference(x) && x->mode == LJ_HARNESS_GRAD) fd = lj_harness_fd_grad(attn_loss, &ref, ref.qkv, nqkv);
    if (x->mode == LJ_HARNESS_CHECK) lj_case_output(x, name, out, nout, LJ_CASE_ACT, want, LJ_CASE_TOL_OUT);
    if (!lj_case_reference(x) || fd)
        lj_case_output_at(x, name, dqkv, nqkv, LJ_CASE_ACT, fd, c->tol_grad, lj_harness_tol_gpu(2e-2, 5e-2));
    free(fd);
}

void lj_case_attention_captured(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, attention_captured_body);
}

/* ---- within documents ----------------------------------------------------------------- */

/* Runs document [s, e) of sequence b alone (B = 1, T = e - s) through the CPU's plain ops and
 * compares its rows with the packed results bit for bit (host arrays). */
static int docs_alone_equal(const lj_ops *ops, const float *qkv, const float *dout, const float *out,
                            const float *lse, const float *dqkv, int b, int s, int e, int T, int nh, int nkv,
                            int hd) {
    const int Q = nh * hd, row = Q + 2 * nkv * hd, n = e - s;
    float *x = lj_malloc((size_t)n * row * 4), *go = lj_malloc((size_t)n * Q * 4);
    float *o = lj_malloc((size_t)n * Q * 4), *l = lj_malloc((size_t)nh * n * 4), *dx = lj_malloc((size_t)n * row * 4);
    memcpy(x, qkv + ((int64_t)b * T + s) * row, (size_t)n * row * 4);
    memcpy(go, dout + ((int64_t)b * T + s) * Q, (size_t)n * Q * 4);
    void *ws = lj_malloc(ops->attention_workspace_bytes(1, n, nh, nkv, hd) + 1);
    ops->attention_forward(o, l, x, 1, n, nh, nkv, hd, ws);
    ops->attention_backward(dx, go, x, o, l, 1, n, nh, nkv, hd, ws);
    int same = memcmp(o, out + ((int64_t)b * T + s) * Q, (size_t)n * Q * 4) == 0 &&
               memcmp(dx, dqkv + ((int64_t)b * T + s) * row, (size_t)n * row * 4) == 0;
    for (int hh = 0; hh < nh; hh++)
        same &= memcmp(l + (int64_t)hh * n, lse + ((int64_t)b * nh + hh) * T + s, (size_t)n * 4) == 0;
    free(x), free(go), free(o), free(l), free(dx), free(ws);
    return same;
}

/* d = {B, T, nh, nkv, hd, mean document length}: EODs about every d[5] tokens (and a two-token
 * document, an EOD as a last input); param, the family (family_config): 0 the own flash kernels,
 * 1 the simple ones, 2 flash-mt1. */
static void attention_docs_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], mean = c->d[5];
    const int kind = (int)c->param, Q = nh * hd, row = Q + 2 * nkv * hd;
    const int64_t N = (int64_t)B * T, nqkv = N * row, nout = N * Q, nlse = (int64_t)B * nh * T;
    lj_case_shape(x, "B=%d T=%d nh=%d nkv=%d hd=%d doc~%d", B, T, nh, nkv, hd, mean);
    int32_t *tokens = (int32_t *)lj_case_zeros(x, N), *ds = (int32_t *)lj_case_zeros(x, N);
    lj_case_docmask_tokens(&x->h->rng, B, T, mean, tokens);
    lj_case_docmask_build(B, T, tokens, NULL, ds);
    float *hqkv = lj_case_rand(x, nqkv, 1.0f), *R = lj_case_rand(x, nout, 1.0f);
    void *qkv = lj_case_upload(x, hqkv, nqkv, LJ_CASE_ACT), *dR = lj_case_upload(x, R, nout, LJ_CASE_ACT);
    void *dds = lj_case_upload(x, ds, N, LJ_CASE_I32);
    attn_ref ref = {B, T, nh, nkv, hd, lj_case_to_double(x, hqkv, nqkv), ds, R};
    const lj_ops_config cfg = family_config(x->ops, kind, 1);
    const lj_ops *A = lj_case_table(x, &cfg);
    char label[48];
    family_label(x, kind, 1, B, T, nh, nkv, hd, label, sizeof label);
    attn_run r = run_attention(x, A, label, &ref, qkv, dR, dds);
    if (!lj_case_reference(x) || x->mode != LJ_HARNESS_CHECK) return;

    /* the CPU's exact properties: every document alone through the plain ops gives the same bits */
    const float *out = lj_case_download(x, r.out, nout, LJ_CASE_ACT);
    const float *lse = lj_case_download(x, r.lse, nlse, LJ_CASE_F32);
    const float *dqkv = lj_case_download(x, r.dqkv, nqkv, LJ_CASE_ACT);
    int alone = 1, docs = 0;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < T;) {
            int e = s;
            while (e < T && ds[(int64_t)b * T + e] == s) e++;
            alone &= docs_alone_equal(A, hqkv, R, out, lse, dqkv, b, s, e, T, nh, nkv, hd);
            docs++;
            s = e;
        }
    lj_case_true(x, "attention_docs == each document alone", alone, "%d documents: out, lse, dqkv bit for bit", docs);
    /* no boundary (doc_start all 0): the plain causal ops, bit for bit */
    void *zero = lj_case_upload(x, lj_case_zeros(x, N), N, LJ_CASE_I32);
    void *o1 = lj_case_alloc(x, nout, LJ_CASE_ACT), *l1 = lj_case_alloc(x, nlse, LJ_CASE_F32);
    void *d1 = lj_case_alloc(x, nqkv, LJ_CASE_ACT), *o2 = lj_case_alloc(x, nout, LJ_CASE_ACT);
    void *l2 = lj_case_alloc(x, nlse, LJ_CASE_F32), *d2 = lj_case_alloc(x, nqkv, LJ_CASE_ACT);
    A->attention_forward_docs(o1, l1, qkv, zero, B, T, nh, nkv, hd, r.ws);
    A->attention_backward_docs(d1, dR, qkv, o1, l1, zero, B, T, nh, nkv, hd, r.ws);
    A->attention_forward(o2, l2, qkv, B, T, nh, nkv, hd, r.ws);
    A->attention_backward(d2, dR, qkv, o2, l2, B, T, nh, nkv, hd, r.ws);
    lj_case_twin(x, "attention_forward_docs without boundaries == attention_forward", o1, o2, nout, LJ_CASE_ACT,
                 LJ_CASE_TOL_BITS);
    lj_case_twin(x, "attention_forward_docs lse without boundaries", l1, l2, nlse, LJ_CASE_F32, LJ_CASE_TOL_BITS);
    lj_case_twin(x, "attention_backward_docs without boundaries == attention_backward", d1, d2, nqkv, LJ_CASE_ACT,
                 LJ_CASE_TOL_BITS);
}

void lj_case_attention_docs(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, attention_docs_body);
}

/* ---- generation with a KV cache --------------------------------------------------------- */

/* d = {p0, Tq, Tmax, nh, nkv, hd}: Tq rows at positions p0.. over a cache of Tmax random rows
 * (attention_decode writes rows p0..p0+Tq-1), out and the cache against a double reference; on
 * the CPU also a prefill of p0 tokens, then Tq single-token steps, over a zeroed cache, against
 * the full forward of the p0 + Tq tokens. */
static void attention_decode_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int p0 = c->d[0], Tq = c->d[1], Tmax = c->d[2], nh = c->d[3], nkv = c->d[4], hd = c->d[5];
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV, rep = nh / nkv;
    const int64_t nc = (int64_t)Tmax * 2 * KV, no = (int64_t)Tq * Q;
    LJ_ASSERT(p0 + Tq <= Tmax, "attention_decode case: p0 + Tq = %d rows beyond the cache's %d", p0 + Tq, Tmax);
    lj_case_shape(x, "p0=%d Tq=%d Tmax=%d nh=%d nkv=%d hd=%d", p0, Tq, Tmax, nh, nkv, hd);
    float *hqkv = lj_case_rand(x, (int64_t)Tq * row, 1.0f), *cache0 = lj_case_rand(x, nc, 1.0f);
    void *qkv = lj_case_upload(x, hqkv, (int64_t)Tq * row, LJ_CASE_ACT);
    void *cache = lj_case_upload(x, cache0, nc, LJ_CASE_ACT);
    void *out = lj_case_alloc(x, no, LJ_CASE_ACT);
    ops->attention_decode(out, cache, qkv, p0, Tq, nh, nkv, hd);
    double *want = NULL, *want_c = NULL;
    if (lj_case_reference(x)) {
        want = lj_case_dzeros(x, no), want_c = lj_case_to_double(x, cache0, nc);
        for (int i = 0; i < Tq; i++)
            for (int k = 0; k < 2 * KV; k++) want_c[(int64_t)(p0 + i) * 2 * KV + k] = hqkv[(int64_t)i * row + Q + k];
        double *s = lj_case_dzeros(x, p0 + Tq);
        for (int i = 0; i < Tq; i++)
            for (int hh = 0; hh < nh; hh++) {
                const float *q = hqkv + (int64_t)i * row + hh * hd;
                double m = -INFINITY, sum = 0, *o = want + (int64_t)i * Q + hh * hd;
                for (int j = 0; j <= p0 + i; j++) {
                    const double *k = want_c + (int64_t)j * 2 * KV + (hh / rep) * hd;
                    s[j] = 0;
                    for (int d = 0; d < hd; d++) s[j] += q[d] * k[d];
                    s[j] /= sqrt((double)hd);
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j <= p0 + i; j++) sum += exp(s[j] - m);
                for (int j = 0; j <= p0 + i; j++) {
                    const double *v = want_c + (int64_t)j * 2 * KV + KV + (hh / rep) * hd, p = exp(s[j] - m) / sum;
                    for (int d = 0; d < hd; d++) o[d] += p * v[d];
                }
            }
    }
    lj_case_output(x, "attention_decode out", out, no, LJ_CASE_ACT, want, LJ_CASE_TOL_OUT);
    lj_case_output(x, "attention_decode kv_cache", cache, nc, LJ_CASE_ACT, want_c, LJ_CASE_TOL_EXACT);
    if (!lj_case_reference(x)) return;

    /* the CPU (host buffers): a prefill, then single-token steps, against the full forward */
    const int T = p0 + Tq;
    float *q2 = lj_case_rand(x, (int64_t)T * row, 1.0f), *full = lj_case_zeros(x, (int64_t)T * Q);
    float *lse = lj_case_zeros(x, (int64_t)nh * T), *zc = lj_case_zeros(x, nc), *dec = lj_case_zeros(x, (int64_t)T * Q);
    void *ws = lj_case_scratch(x, ops->attention_workspace_bytes(1, T, nh, nkv, hd));
    ops->attention_forward(full, lse, q2, 1, T, nh, nkv, hd, ws);
    ops->attention_decode(dec, zc, q2, 0, p0, nh, nkv, hd);
    for (int p = p0; p < T; p++)
        ops->attention_decode(dec + (int64_t)p * Q, zc, q2 + (int64_t)p * row, p, 1, nh, nkv, hd);
    int cache_ok = 1, bad_t = -1, bad_i = -1;
    for (int t = 0; t < T; t++) {
        cache_ok &= memcmp(zc + (int64_t)t * 2 * KV, q2 + (int64_t)t * row + Q, 2 * KV * sizeof(float)) == 0;
        for (int i = 0; i < Q; i++) {
            float a = dec[t * Q + i], b = full[t * Q + i];
            if (!(fabsf(a - b) <= 1e-5f * (1 + fabsf(b))) && bad_t < 0) bad_t = t, bad_i = i;
        }
    }
    lj_case_true(x, "attention_decode kv_cache", cache_ok, "cache rows 0..T-1 hold the k and v parts of qkv");
    lj_case_true(x, "attention_decode out", bad_t < 0, "decode == full forward within 1e-5 (1 + |full|)%s",
                 bad_t < 0 ? "" : " (first mismatch below)");
    if (bad_t >= 0)
        printf("     decode row %d col %d: %g vs %g\n", bad_t, bad_i, dec[bad_t * Q + bad_i], full[bad_t * Q + bad_i]);
    int rest_zero = 1;
    for (int t = T; t < Tmax; t++)
        for (int i = 0; i < 2 * KV; i++) rest_zero &= zc[t * 2 * KV + i] == 0.0f;
    lj_case_true(x, "attention_decode kv_cache", rest_zero, "cache rows T..Tmax-1 untouched");
}

void lj_case_attention_decode(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, attention_decode_body);
}

/* ---- over packed segments (attention_varlen, bidirectional: the vision tower) ------------ */

/* The segment lengths of the rows (d[0] picks one). */
typedef struct {
    int n;
    int len[6];
} varlen_segments;

static const varlen_segments varlen_patterns[] = {
    {3, {4, 1, 6}},              /* 0: tiny (finite differences) */
    {4, {7, 2, 9, 1}},           /* 1: tiny, a last segment of one row */
    {4, {5, 1, 70, 13}},         /* 2: one segment past a 64-row tile */
    {4, {784, 200, 1, 1023}},    /* 3: a 448x448 image, a smaller one, one row, one just under 1024 */
    {4, {784, 784, 784, 784}},   /* 4: four 448x448 images: uniform, not a multiple of 128 */
    {3, {64, 64, 128}},          /* 5: tile-aligned */
    {1, {1}},                    /* 6: one row */
    {3, {256, 256, 256}},        /* 7: uniform, a multiple of 128 (cuDNN's dense path on AUTO) */
    {5, {130, 0, 1, 1, 250}},    /* 8: an empty segment, two one-row segments inside a tile */
    {2, {3000, 97}},             /* 9: a long segment (a 47-tile key loop), a short one */
};

/* The double-precision reference over packed segments: qkv [N, Q+2KV], cu [nseg + 1]. */
typedef struct {
    int N, nseg, nh, nkv, hd;
    const int32_t *cu;
    double *qkv;
    const float *R;
} varlen_ref;

/* out[N, Q], lse[nh, N] (lse may be NULL): query i of segment s, head h, attends to every key of
 * s, softmax((q k^T) / sqrt(hd)) v with kv head h / (nh/nkv). */
static void ref_varlen(const varlen_ref *c, double *out, double *lse) {
    const int Q = c->nh * c->hd, KV = c->nkv * c->hd, row = Q + 2 * KV, hd = c->hd;
    double *sc = lj_malloc((size_t)(c->N > 0 ? c->N : 1) * sizeof(double));
    for (int s = 0; s < c->nseg; s++)
        for (int hh = 0; hh < c->nh; hh++) {
            const int g = hh / (c->nh / c->nkv), a = c->cu[s], b = c->cu[s + 1];
            for (int i = a; i < b; i++) {
                const double *q = c->qkv + (int64_t)i * row + hh * hd;
                double m = -INFINITY, sum = 0;
                for (int j = a; j < b; j++) {
                    const double *k = c->qkv + (int64_t)j * row + Q + g * hd;
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += q[e] * k[e];
                    sc[j] = d / sqrt((double)hd);
                    m = fmax(m, sc[j]);
                }
                for (int j = a; j < b; j++) sum += exp(sc[j] - m);
                if (lse) lse[(int64_t)hh * c->N + i] = m + log(sum);
                double *o = out + (int64_t)i * Q + hh * hd;
                for (int e = 0; e < hd; e++) o[e] = 0;
                for (int j = a; j < b; j++) {
                    const double *v = c->qkv + (int64_t)j * row + Q + KV + g * hd, p = exp(sc[j] - m) / sum;
                    for (int e = 0; e < hd; e++) o[e] += p * v[e];
                }
            }
        }
    free(sc);
}

static double varlen_loss(void *p) {
    const varlen_ref *c = p;
    const int64_t n = (int64_t)c->N * c->nh * c->hd;
    double *o = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(double)), l = 0;
    ref_varlen(c, o, NULL);
    for (int64_t i = 0; i < n; i++) l += o[i] * c->R[i];
    free(o);
    return l;
}

#ifdef LJ_HAVE_CUDA
/* The varlen families, by the case table's numbers (family_config): 0 the flash kernels where
 * they serve the head_dim (else the CUDA-core ones), 1 the CUDA-core kernels (SIMPLE), 2 flash
 * with one m-tile, 3 AUTO (cuDNN's dense attention for uniform segments where it runs them, else
 * flash), 5 AUTO in deterministic mode (the flash forward, the CUDA-core backward). */
static const char *varlen_family(int kind) {
    return kind == 1 ? "simple" : kind == 2 ? "flash-mt1" : kind == 3 ? "auto" : kind == 5 ? "auto-deterministic"
                                                                                             : "flash";
}
#endif

/* " (family: forward kernels[/backward kernels])" on the CUDA pass, after the shape's first
 * forward ran (cuDNN's plans are built then); "" on the CPU. */
static void varlen_label(const lj_case_ctx *x, const lj_ops *A, int kind, int nseg, int mx, int N, int nh, int nkv,
                         int hd, char *label, size_t size, int *dense) {
    *dense = 0;
    snprintf(label, size, "%s", "");
#ifdef LJ_HAVE_CUDA
    if (x->pass == LJ_CASE_COMPARE) {
        const char *f = lj_cuda_attention_varlen_kernels(&A->config, nseg, mx, N, nh, nkv, hd, 0, 0);
        const char *b = lj_cuda_attention_varlen_kernels(&A->config, nseg, mx, N, nh, nkv, hd, 0, 1);
        *dense = strcmp(f, "cudnn") == 0;
        if (strcmp(f, b) == 0) snprintf(label, size, " (%s: %s)", varlen_family(kind), f);
        else snprintf(label, size, " (%s: %s/%s)", varlen_family(kind), f, b);
    }
#endif
    (void)x, (void)A, (void)kind, (void)nseg, (void)mx, (void)N, (void)nh, (void)nkv, (void)hd;
}

/* Runs segment s of the packed rows alone (nseg = 1) through the CPU's varlen ops and compares
 * its rows with the packed results bit for bit (host arrays). */
static int varlen_alone_equal(const lj_ops *ops, const float *qkv, const float *dout, const float *out,
                              const float *lse, const float *dqkv, int a, int b, int N, int nh, int nkv, int hd) {
    const int Q = nh * hd, row = Q + 2 * nkv * hd, n = b - a;
    const int32_t cu1[2] = {0, n};
    float *x = lj_malloc((size_t)n * row * 4), *go = lj_malloc((size_t)n * Q * 4);
    float *o = lj_malloc((size_t)n * Q * 4), *l = lj_malloc((size_t)nh * n * 4), *dx = lj_malloc((size_t)n * row * 4);
    memcpy(x, qkv + (int64_t)a * row, (size_t)n * row * 4);
    memcpy(go, dout + (int64_t)a * Q, (size_t)n * Q * 4);
    void *ws = lj_malloc(ops->attention_varlen_workspace_bytes(n, nh, nkv, hd) + 1);
    ops->attention_varlen_forward(o, l, x, cu1, 1, n, n, nh, nkv, hd, 0, ws);
    ops->attention_varlen_backward(dx, go, x, o, l, cu1, 1, n, n, nh, nkv, hd, 0, ws);
    int same = memcmp(o, out + (int64_t)a * Q, (size_t)n * Q * 4) == 0 &&
               memcmp(dx, dqkv + (int64_t)a * row, (size_t)n * row * 4) == 0;
    for (int hh = 0; hh < nh; hh++) same &= memcmp(l + (int64_t)hh * n, lse + (int64_t)hh * N + a, (size_t)n * 4) == 0;
    free(x), free(go), free(o), free(l), free(dx), free(ws);
    return same;
}

/* d = {segments (varlen_patterns), nh, nkv, hd, kind}: kind, the family (varlen_family; the CPU
 * rows 0); -1 every family the shape has: flash, simple, flash-mt1 at head_dim 64, auto, auto in
 * deterministic mode. out and lse against the double reference and dqkv against finite
 * differences on the CPU, with the CPU's exact properties (a repeat gives the same bits; each
 * segment alone gives the packed rows' bits); on CUDA each against the CPU (lse in [nh, N]: cuDNN's
 * [nseg, nh, T] rearranged where it ran), dqkv overwritten (poisoned first), and in deterministic
 * mode a repeat with the same bits. The backward takes each backend's own forward out and lse. */
static void attention_varlen_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const varlen_segments *sg = &varlen_patterns[c->d[0]];
    const int nh = c->d[1], nkv = c->d[2], hd = c->d[3], kind = c->d[4], nseg = sg->n;
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV;
    int32_t cu[8];
    int mx = 0;
    char lens[48] = "";
    cu[0] = 0;
    for (int s = 0; s < nseg; s++) {
        cu[s + 1] = cu[s] + sg->len[s];
        mx = sg->len[s] > mx ? sg->len[s] : mx;
        const size_t at = strlen(lens);
        snprintf(lens + at, sizeof lens - at, "%s%d", s ? "," : "", sg->len[s]);
    }
    const int N = cu[nseg];
    const int64_t nqkv = (int64_t)N * row, nout = (int64_t)N * Q, nlse = (int64_t)nh * N;
    const int check = x->mode == LJ_HARNESS_CHECK;
    lj_case_shape(x, "segs=%s nh=%d nkv=%d hd=%d", lens, nh, nkv, hd);
    float *hqkv = lj_case_rand(x, nqkv, 1.0f), *R = lj_case_rand(x, nout, 1.0f);
    void *qkv = lj_case_upload(x, hqkv, nqkv, LJ_CASE_ACT), *dR = lj_case_upload(x, R, nout, LJ_CASE_ACT);
    void *dcu = lj_case_upload(x, cu, nseg + 1, LJ_CASE_I32);
    varlen_ref ref = {N, nseg, nh, nkv, hd, cu, lj_case_to_double(x, hqkv, nqkv), R};
    double *want = NULL, *want_lse = NULL;
    if (lj_case_reference(x) && check) {
        want = lj_case_dzeros(x, nout), want_lse = lj_case_dzeros(x, nlse);
        ref_varlen(&ref, want, want_lse);
    }
    int kinds[5];
    const int nk = kernel_families(kind, hd, 1, kinds);
    for (int k = 0; k < nk; k++) {
        const lj_ops_config cfg = family_config(x->ops, kinds[k], 0);
        const lj_ops *A = lj_case_table(x, &cfg);
        void *out = lj_case_alloc(x, nout, LJ_CASE_ACT), *lse = lj_case_alloc(x, nlse, LJ_CASE_F32);
        void *dqkv = lj_case_alloc(x, nqkv, LJ_CASE_ACT);
        void *ws = lj_case_scratch(x, A->attention_varlen_workspace_bytes(N, nh, nkv, hd));
        A->attention_varlen_forward(out, lse, qkv, dcu, nseg, mx, N, nh, nkv, hd, 0, ws);
        A->attention_varlen_backward(dqkv, dR, qkv, out, lse, dcu, nseg, mx, N, nh, nkv, hd, 0, ws);
        char label[64], name[128];
        int dense = 0;
        varlen_label(x, A, kinds[k], nseg, mx, N, nh, nkv, hd, label, sizeof label, &dense);
        if (check) {
            snprintf(name, sizeof name, "attention_varlen_forward out%s", label);
            lj_case_output(x, name, out, nout, LJ_CASE_ACT, want, LJ_CASE_TOL_OUT);
            float *l = lj_case_download(x, lse, nlse, LJ_CASE_F32);
            if (dense) { /* cuDNN's [nseg, nh, mx] as [nh, N] */
                float *t = lj_case_zeros(x, nlse);
                for (int s = 0; s < nseg; s++)
                    for (int hh = 0; hh < nh; hh++)
                        for (int i = 0; i < mx; i++)
                            t[(int64_t)hh * N + (int64_t)s * mx + i] = l[((int64_t)s * nh + hh) * mx + i];
                l = t;
            }
            snprintf(name, sizeof name, "attention_varlen_forward lse%s", label);
            lj_case_values_at(x, name, l, nlse, LJ_CASE_F32, want_lse, c->tol, lj_harness_tol_gpu(1e-3, 1e-2));
        }
        if (!lj_case_reference(x)) {
            check_dqkv_parts(x, "attention_varlen_backward", label, dqkv, N, Q, KV);
        } else if (!check) {
            double *gfd = lj_harness_fd_grad(varlen_loss, &ref, ref.qkv, nqkv);
            lj_case_output(x, "attention_varlen_backward dqkv", dqkv, nqkv, LJ_CASE_ACT, gfd, LJ_CASE_TOL_DGRAD);
            free(gfd);
        }
        if (!check) continue;
        /* the same inputs give the same bits: always on the CPU; on CUDA in deterministic mode */
        if (lj_case_reference(x) || (x->pass == LJ_CASE_COMPARE && kinds[k] == 5)) {
            void *out2 = lj_case_alloc(x, nout, LJ_CASE_ACT), *lse2 = lj_case_alloc(x, nlse, LJ_CASE_F32);
            void *dqkv2 = lj_case_alloc(x, nqkv, LJ_CASE_ACT);
            A->attention_varlen_forward(out2, lse2, qkv, dcu, nseg, mx, N, nh, nkv, hd, 0, ws);
            A->attention_varlen_backward(dqkv2, dR, qkv, out2, lse2, dcu, nseg, mx, N, nh, nkv, hd, 0, ws);
            snprintf(name, sizeof name, "attention_varlen_forward out repeat%s", label);
            lj_case_twin(x, name, out, out2, nout, LJ_CASE_ACT, LJ_CASE_TOL_BITS);
            snprintf(name, sizeof name, "attention_varlen_forward lse repeat%s", label);
            lj_case_twin(x, name, lse, lse2, nlse, LJ_CASE_F32, LJ_CASE_TOL_BITS);
            snprintf(name, sizeof name, "attention_varlen_backward dqkv repeat%s", label);
            lj_case_twin(x, name, dqkv, dqkv2, nqkv, LJ_CASE_ACT, LJ_CASE_TOL_BITS);
        }
        if (!lj_case_reference(x)) continue;
        /* the CPU's exact property: every segment alone gives the packed rows' bits */
        const float *ho = lj_case_download(x, out, nout, LJ_CASE_ACT);
        const float *hl = lj_case_download(x, lse, nlse, LJ_CASE_F32);
        const float *hd_ = lj_case_download(x, dqkv, nqkv, LJ_CASE_ACT);
        int alone = 1, segs = 0;
        for (int s = 0; s < nseg; s++) {
            if (cu[s + 1] == cu[s]) continue;
            alone &= varlen_alone_equal(A, hqkv, R, ho, hl, hd_, cu[s], cu[s + 1], N, nh, nkv, hd);
            segs++;
        }
        lj_case_true(x, "attention_varlen == each segment alone", alone, "%d segments: out, lse, dqkv bit for bit",
                     segs);
    }
}

void lj_case_attention_varlen(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, attention_varlen_body);
}

/* cases_cpu.c: the CPU backend's cases (those not yet written once for every backend, as
 * cases_<op>.c are): ops of lj_ops_cpu() against a double-precision
 * reference written here (check), every backward against central finite differences of
 * L = sum(out * R), R random, on that reference forward (grad), and the backend's building
 * blocks of ops/cpu/cpu.h (the split sgemm, the vectorizable exp, the fixed-lane reductions,
 * the sgemm rate probe, thread-count independence). The shapes come from the case table
 * (op_cases.c); the comment above each function says what its d[] entries are. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cpu.h"
#include "tests/ops/op_cases.h"

#define SHAPE(...) char shape[96]; snprintf(shape, sizeof shape, __VA_ARGS__)
#define CHECK_D(op, got, ref, n, tol) lj_harness_check_d(h, (op), shape, (got), (ref), (n), (tol))
#define CHECK_BITS(op, a, b, bytes) lj_harness_check_bits(h, (op), shape, (a), (b), (bytes))
#define CHECK_TRUE(op, cond, ...) lj_harness_check_true(h, (op), shape, (cond), __VA_ARGS__)

static float *randf(lj_harness *h, int64_t n, float scale) { return lj_harness_randf(h, n, scale); }

/* ---- memory (no shape) -------------------------------------------------------------- */

void lj_case_cpu_memory(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)c, (void)mode;
    SHAPE("-");
    const lj_ops *ops = lj_ops_cpu();
    const char *op = "memory";
    if (!CHECK_TRUE(op, ops != NULL, "lj_ops_cpu() is not NULL")) return;
    CHECK_TRUE(op, strcmp(ops->name, "cpu") == 0, "name \"%s\" == \"cpu\"", ops->name);
    CHECK_TRUE(op, ops->act_dtype == LJ_DTYPE_F32, "act_dtype %d == F32", (int)ops->act_dtype);
    size_t before = lj_ops_allocated_bytes();
    void *a = NULL, *b = NULL;
    CHECK_TRUE(op, ops->alloc(&a, 1000) == LJ_OK, "alloc 1000 bytes");
    CHECK_TRUE(op, ops->alloc(&b, 13) == LJ_OK, "alloc 13 bytes");
    CHECK_TRUE(op, ((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0, "allocations 64-byte aligned");
    CHECK_TRUE(op, lj_ops_allocated_bytes() == before + 1013, "allocated bytes +1013");
    float src[4] = {1, 2, 3, 4}, dst[4] = {0};
    ops->upload(a, src, sizeof src);
    ops->copy((char *)a + 16, a, 16);
    ops->download(dst, (char *)a + 16, 16);
    CHECK_BITS("memory upload+copy+download", dst, src, 16);
    ops->memset_zero(a, 16);
    ops->download(dst, a, 16);
    CHECK_TRUE(op, dst[0] == 0 && dst[3] == 0, "memset_zero");
    uint16_t bf[3] = {lj_f32_to_bf16(1.5f), lj_f32_to_bf16(-2.0f), lj_f32_to_bf16(0.25f)};
    float back[3];
    ops->cast_to_f32(back, bf, LJ_DTYPE_BF16, 3);
    CHECK_TRUE(op, back[0] == 1.5f && back[1] == -2.0f && back[2] == 0.25f, "cast_to_f32 from bf16");
    ops->cast_f32_to_param(dst, src, 4);
    CHECK_BITS("memory cast_f32_to_param", dst, src, 16);
    ops->free(a);
    CHECK_TRUE(op, lj_ops_allocated_bytes() == before + 13, "free gives back 1000 bytes");
    ops->free(b);
    CHECK_TRUE(op, lj_ops_allocated_bytes() == before, "free gives back 13 bytes");
    size_t free_b = 0, total_b = 0;
    CHECK_TRUE(op, ops->memory_info(&free_b, &total_b) == LJ_OK, "memory_info");
    CHECK_TRUE(op, total_b > 0 && free_b <= total_b, "memory_info: free %zu <= total %zu", free_b, total_b);
}

/* ---- cross-entropy: d = {N, C, V, ignore}; ignore 0: the fixed targets of N = 6 rows
 * (one ignored, mean over the 5 counted); ignore 1: random targets, every 17th row
 * ignored (-100), dloss 1/N ------------------------------------------------------------- */

typedef struct {
    int N, C, V;
    double *x, *w, dloss;
    const int32_t *targets;
} ce_ctx;

/* sum_n dloss * (logsumexp(x_n w^T) - (x_n w^T)[t_n]) over rows with t_n >= 0; per-row losses to
 * `losses` when not NULL. */
static double ce_ref(ce_ctx *c, double *losses) {
    double *l = lj_malloc((size_t)c->V * sizeof(double)), total = 0;
    for (int n = 0; n < c->N; n++) {
        double loss = 0;
        if (c->targets[n] >= 0) {
            double m = -INFINITY, s = 0;
            for (int v = 0; v < c->V; v++) {
                l[v] = 0;
                for (int i = 0; i < c->C; i++) l[v] += c->x[(int64_t)n * c->C + i] * c->w[(int64_t)v * c->C + i];
                m = fmax(m, l[v]);
            }
            for (int v = 0; v < c->V; v++) s += exp(l[v] - m);
            loss = m + log(s) - l[c->targets[n]];
        }
        if (losses) losses[n] = loss;
        total += c->dloss * loss;
    }
    free(l);
    return total;
}

static double ce_loss(void *p) { return ce_ref(p, NULL); }

/* Fused against the unfused twin (matmul_forward, cross_entropy_forward_backward,
 * matmul_backward); returns the fused outputs through the pointers. */
static void check_ce_twins(lj_harness *h, const char *shape, const float *x, const float *w, const int32_t *targets,
                           int N, int C, int V, float dloss, float *losses, float *dx, float *dw) {
    const lj_ops *ops = lj_ops_cpu();
    void *ws = lj_malloc(ops->cross_entropy_fused_workspace_bytes(N, C, V));
    double *ref_dw = lj_harness_to_double(dw, (int64_t)V * C);
    ops->cross_entropy_fused(losses, dx, dw, x, w, targets, N, C, V, dloss, ws);
    float *logits = lj_malloc((size_t)N * V * sizeof(float)), *l2 = lj_malloc(N * sizeof(float));
    float *dx2 = lj_malloc((size_t)N * C * sizeof(float)), *dw2 = lj_calloc((size_t)V * C, sizeof(float));
    float *l3 = lj_malloc(N * sizeof(float));
    ops->matmul_forward(logits, x, w, N, C, V);
    ops->cross_entropy_forward_backward(l3, NULL, logits, targets, N, V, dloss); /* loss only */
    ops->cross_entropy_forward_backward(l2, logits, logits, targets, N, V, dloss); /* dlogits aliases logits */
    CHECK_BITS("cross_entropy_fwd_bwd losses with vs without dlogits", l2, l3, N * sizeof(float));
    ops->matmul_backward(dx2, dw2, logits, x, w, N, C, V, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
    int close = 1;
    for (int n = 0; n < N; n++) close &= fabsf(losses[n] - l2[n]) <= 1e-6f * (1 + fabsf(l2[n]));
    CHECK_TRUE("cross_entropy fused vs unfused losses", close, "|fused - unfused| <= 1e-6 (1 + |unfused|) per row");
    double *ref_dx = lj_harness_to_double(dx2, (int64_t)N * C);
    CHECK_D("cross_entropy fused vs unfused dx", dx, ref_dx, (int64_t)N * C, lj_harness_tol_l2(1e-6));
    for (int64_t i = 0; i < (int64_t)V * C; i++) ref_dw[i] += dw2[i];
    CHECK_D("cross_entropy fused vs unfused dw", dw, ref_dw, (int64_t)V * C, lj_harness_tol_l2(1e-6));
    /* loss only: both gradients NULL, same losses */
    float *l4 = lj_malloc(N * sizeof(float));
    ops->cross_entropy_fused(l4, NULL, NULL, x, w, targets, N, C, V, dloss, ws);
    CHECK_BITS("cross_entropy_fused losses (no grad)", l4, losses, N * sizeof(float));
    free(ws), free(logits), free(l2), free(dx2), free(dw2), free(l3), free(ref_dx), free(ref_dw), free(l4);
}

void lj_case_cpu_cross_entropy(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    const int N = c->d[0], C = c->d[1], V = c->d[2], chunks = c->d[3];
    SHAPE("N=%d C=%d V=%d", N, C, V);
    int32_t *targets = lj_malloc((size_t)N * sizeof(int32_t));
    float dloss;
    float *x, *w, *losses, *dx, *dw;
    if (!chunks) {
        LJ_ASSERT(N == 6 && V > 22, "cross-entropy case: the fixed targets are written for N = 6, V > 22");
        const int32_t fixed[6] = {3, -1, 22, 0, 7, 7};
        memcpy(targets, fixed, sizeof fixed);
        dloss = 1.0f / 5; /* mean over the 5 counted rows */
        x = randf(h, N * C, 1), w = randf(h, V * C, 1), losses = randf(h, N, 1), dx = randf(h, N * C, 1);
        dw = randf(h, V * C, 1);
    } else {
        for (int n = 0; n < N; n++) targets[n] = n % 17 == 5 ? -100 : (int32_t)lj_rng_below(&h->rng, V);
        dloss = 1.0f / N;
        x = randf(h, (int64_t)N * C, 1), w = randf(h, (int64_t)V * C, 0.5f), losses = lj_malloc(N * sizeof(float));
        dx = lj_malloc((size_t)N * C * sizeof(float)), dw = lj_calloc((size_t)V * C, sizeof(float));
    }
    double *dw0 = lj_harness_to_double(dw, (int64_t)V * C);
    if (mode == LJ_HARNESS_CHECK) {
        check_ce_twins(h, shape, x, w, targets, N, C, V, dloss, losses, dx, dw);
    } else {
        void *ws = lj_malloc(lj_ops_cpu()->cross_entropy_fused_workspace_bytes(N, C, V));
        lj_ops_cpu()->cross_entropy_fused(losses, dx, dw, x, w, targets, N, C, V, dloss, ws);
        free(ws);
    }
    ce_ctx cc = {N, C, V, lj_harness_to_double(x, (int64_t)N * C), lj_harness_to_double(w, (int64_t)V * C),
                 chunks ? 1.0 : dloss, targets};
    if (mode == LJ_HARNESS_CHECK) {
        double *ref_losses = lj_malloc(N * sizeof(double));
        ce_ref(&cc, ref_losses);
        CHECK_D("cross_entropy_fused losses", losses, ref_losses, N, c->tol);
        if (!chunks) CHECK_TRUE("cross_entropy_fused losses", losses[1] == 0.0f, "an ignored row's loss is 0");
        free(ref_losses);
    } else {
        double *gx = lj_harness_fd_grad(ce_loss, &cc, cc.x, (int64_t)N * C);
        double *gw = lj_harness_fd_grad(ce_loss, &cc, cc.w, (int64_t)V * C);
        for (int64_t i = 0; i < (int64_t)V * C; i++) gw[i] += dw0[i];
        CHECK_D("cross_entropy_fused dx", dx, gx, (int64_t)N * C, c->tol_grad);
        CHECK_D("cross_entropy_fused dw (+=)", dw, gw, (int64_t)V * C, c->tol_grad);
        /* an ignored row gets a zero gradient */
        int zero = 1;
        for (int i = 0; i < C; i++) zero &= dx[1 * C + i] == 0.0f;
        CHECK_TRUE("cross_entropy_fused dx", zero, "an ignored row's dx is 0");
        free(gx), free(gw);
    }
    free(targets), free(x), free(w), free(losses), free(dx), free(dw), free(dw0), free(cc.x), free(cc.w);
}

/* ---- AdamW: d = {separate_params, expect_clipped}; param = max_grad_norm; three steps over
 * three segments of 1000 elements ------------------------------------------------------- */

/* A scalar double AdamW step (ops.h formula) over one element. */
static void adamw_ref(double *p, double *m, double *v, double g, double lr, double b1, double b2, double eps,
                      double wd, int t) {
    *m = b1 * *m + (1 - b1) * g;
    *v = b2 * *v + (1 - b2) * g * g;
    double mh = *m / (1 - pow(b1, t)), vh = *v / (1 - pow(b2, t));
    *p -= lr * (wd * *p + mh / (sqrt(vh) + eps));
}

void lj_case_cpu_adamw(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = lj_ops_cpu();
    const float max_grad_norm = (float)c->param;
    const int separate_params = c->d[0], expect_clipped = c->d[1];
    SHAPE("n=1000 clip=%g%s", max_grad_norm, separate_params ? " params!=master" : "");
    const int64_t n = 1000;
    /* the middle segment in lr group 1 (--decoupled-lr's): its own learning rate */
    lj_adamw_segment seg[3] = {{0, 300, 0.1f, 0}, {300, 200, 0.0f, 1}, {500, 500, 0.01f, 0}};
    float *master = randf(h, n, 1), *m = lj_calloc(n, sizeof(float)), *v = lj_calloc(n, sizeof(float));
    float *params = separate_params ? lj_calloc(n, sizeof(float)) : master;
    double *pr = lj_harness_to_double(master, n), *mr = lj_calloc(n, sizeof(double)), *vr = lj_calloc(n, sizeof(double));
    void *ws = lj_malloc(ops->global_norm_workspace_bytes(n));
    int clipped = 0;
    for (int t = 1; t <= 3; t++) {
        float *g = randf(h, n, 0.05f), norm_sq;
        ops->global_norm_sq(&norm_sq, g, n, ws);
        const float lr = 1e-2f, lr1 = 3e-3f;
        lj_adamw_hparams hp = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .max_grad_norm = max_grad_norm};
        float scalars[LJ_ADAMW_NUM_SCALARS]; /* the CPU backend's memory is host memory */
        lj_adamw_step_scalars2(scalars, &hp, lr, lr1, t);
        ops->adamw_update(params, master, g, m, v, seg, 3, &hp, scalars, &norm_sq);
        double norm = 0;
        for (int64_t i = 0; i < n; i++) norm += (double)g[i] * g[i];
        norm = sqrt(norm);
        double clip = max_grad_norm > 0 ? fmin(1.0, max_grad_norm / (norm + 1e-6)) : 1.0;
        clipped |= clip < 1.0;
        for (int s = 0; s < 3; s++)
            for (int64_t i = seg[s].offset; i < seg[s].offset + seg[s].count; i++)
                adamw_ref(&pr[i], &mr[i], &vr[i], g[i] * clip, seg[s].lr_group ? lr1 : lr, hp.beta1, hp.beta2, hp.eps,
                          seg[s].weight_decay, t);
        free(g);
    }
    CHECK_TRUE("adamw_update clipping", clipped == expect_clipped, "clipping active %d, expected %d", clipped,
               expect_clipped);
    CHECK_D("adamw_update master", master, pr, n, c->tol);
    CHECK_D("adamw_update m", m, mr, n, c->tol);
    CHECK_D("adamw_update v", v, vr, n, c->tol_grad); /* v's tolerance: 1e-5 */
    if (separate_params) CHECK_BITS("adamw_update params == master", params, master, n * sizeof(float));
    free(master), free(m), free(v), free(pr), free(mr), free(vr), free(ws);
    if (separate_params) free(params);
}

/* The inactive clip (scale 1) must give the same bits as no clipping: d = {n}. */
void lj_case_cpu_adamw_clip_inactive(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = lj_ops_cpu();
    const int64_t n = c->d[0];
    SHAPE("n=%lld", (long long)n);
    lj_adamw_segment seg = {0, n, 0.1f, 0};
    float *p1 = randf(h, n, 1), *p2 = lj_malloc(n * sizeof(float)), *g = randf(h, n, 0.1f);
    memcpy(p2, p1, n * sizeof(float));
    float *m1 = lj_calloc(n, 4), *v1 = lj_calloc(n, 4), *m2 = lj_calloc(n, 4), *v2 = lj_calloc(n, 4), ns;
    void *ws = lj_malloc(ops->global_norm_workspace_bytes(n));
    ops->global_norm_sq(&ns, g, n, ws);
    lj_adamw_hparams hp = {0.9f, 0.999f, 1e-8f, 0.0f};
    float scalars[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(scalars, &hp, 1e-3f, 1);
    ops->adamw_update(p1, p1, g, m1, v1, &seg, 1, &hp, scalars, &ns);
    hp.max_grad_norm = 1e3f;
    ops->adamw_update(p2, p2, g, m2, v2, &seg, 1, &hp, scalars, &ns);
    CHECK_BITS("adamw_update inactive clip == no clip", p1, p2, n * sizeof(float));
    free(p1), free(p2), free(g), free(m1), free(v1), free(m2), free(v2), free(ws);
}

/* ---- attention: d = {B, T, nh, nkv, hd} ------------------------------------------------ */

/* out[B*T, Q], lse[B, nh, T] (lse may be NULL): softmax((q k^T) / sqrt(hd)) v over the keys
 * j0 <= j <= t, j0 = c->ds[b*T + t] within documents (0 without them, plain causal), query head h
 * reading kv head h / (nh/nkv). */
void lj_case_ref_attention(const lj_case_attn *c, double *out, double *lse) {
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

double lj_case_attn_loss(void *p) {
    const lj_case_attn *c = p;
    int64_t n = (int64_t)c->B * c->T * c->nh * c->hd;
    double *o = lj_malloc((size_t)n * sizeof(double)), l = 0;
    lj_case_ref_attention(c, o, NULL);
    for (int64_t i = 0; i < n; i++) l += o[i] * c->R[i];
    free(o);
    return l;
}

void lj_case_cpu_attention(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    const lj_ops *ops = lj_ops_cpu();
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4];
    SHAPE("B=%d T=%d nh=%d nkv=%d hd=%d", B, T, nh, nkv, hd);
    const int Q = nh * hd, row = Q + 2 * nkv * hd;
    const int64_t nqkv = (int64_t)B * T * row, nout = (int64_t)B * T * Q, nlse = (int64_t)B * nh * T;
    float *qkv = randf(h, nqkv, 1), *out = randf(h, nout, 1), *lse = randf(h, nlse, 1);
    void *ws = lj_malloc(ops->attention_workspace_bytes(B, T, nh, nkv, hd));
    ops->attention_forward(out, lse, qkv, B, T, nh, nkv, hd, ws);
    lj_case_attn ac = {B, T, nh, nkv, hd, lj_harness_to_double(qkv, nqkv), NULL, randf(h, nout, 1)};
    /* dqkv is overwritten: start from garbage */
    float *dqkv = randf(h, nqkv, 100);
    ops->attention_backward(dqkv, ac.R, qkv, out, lse, B, T, nh, nkv, hd, ws);
    if (mode == LJ_HARNESS_CHECK) {
        double *ref = lj_malloc(nout * sizeof(double)), *ref_lse = lj_malloc(nlse * sizeof(double));
        lj_case_ref_attention(&ac, ref, ref_lse);
        CHECK_D("attention_forward out", out, ref, nout, c->tol);
        CHECK_D("attention_forward lse", lse, ref_lse, nlse, c->tol);
        /* the same inputs give the same bits */
        float *out2 = lj_malloc(nout * sizeof(float)), *lse2 = lj_malloc(nlse * sizeof(float));
        float *dqkv2 = randf(h, nqkv, 1);
        ops->attention_forward(out2, lse2, qkv, B, T, nh, nkv, hd, ws);
        ops->attention_backward(dqkv2, ac.R, qkv, out, lse, B, T, nh, nkv, hd, ws);
        CHECK_BITS("attention_forward out repeat", out, out2, nout * sizeof(float));
        CHECK_BITS("attention_forward lse repeat", lse, lse2, nlse * sizeof(float));
        CHECK_BITS("attention_backward dqkv repeat", dqkv, dqkv2, nqkv * sizeof(float));
        free(ref), free(ref_lse), free(out2), free(lse2), free(dqkv2);
    } else {
        double *g = lj_harness_fd_grad(lj_case_attn_loss, &ac, ac.qkv, nqkv);
        CHECK_D("attention_backward dqkv", dqkv, g, nqkv, c->tol_grad);
        free(g);
    }
    free(qkv), free(out), free(lse), free(ws), free(ac.qkv), free((void *)ac.R), free(dqkv);
}

/* KV-cache decoding against the full forward on the same sequence: a prefill, then single-token
 * steps. d = {T, nh, nkv, hd, Tmax, prefill}. */
void lj_case_cpu_attention_decode(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = lj_ops_cpu();
    const int T = c->d[0], nh = c->d[1], nkv = c->d[2], hd = c->d[3], Tmax = c->d[4], prefill = c->d[5];
    SHAPE("T=%d nh=%d nkv=%d hd=%d Tmax=%d prefill=%d", T, nh, nkv, hd, Tmax, prefill);
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV;
    float *qkv = randf(h, (int64_t)T * row, 1), *full = lj_malloc((size_t)T * Q * sizeof(float));
    float *lse = lj_malloc((size_t)nh * T * sizeof(float));
    void *ws = lj_malloc(ops->attention_workspace_bytes(1, T, nh, nkv, hd));
    ops->attention_forward(full, lse, qkv, 1, T, nh, nkv, hd, ws);
    float *cache = lj_calloc((size_t)Tmax * 2 * KV, sizeof(float));
    float *dec = lj_malloc((size_t)T * Q * sizeof(float));
    ops->attention_decode(dec, cache, qkv, 0, prefill, nh, nkv, hd);
    for (int p = prefill; p < T; p++)
        ops->attention_decode(dec + (int64_t)p * Q, cache, qkv + (int64_t)p * row, p, 1, nh, nkv, hd);
    int cache_ok = 1, bad_t = -1, bad_i = -1;
    for (int t = 0; t < T; t++) {
        cache_ok &= memcmp(cache + (int64_t)t * 2 * KV, qkv + (int64_t)t * row + Q, 2 * KV * sizeof(float)) == 0;
        for (int i = 0; i < Q; i++) {
            float a = dec[t * Q + i], b = full[t * Q + i];
            if (!(fabsf(a - b) <= 1e-5f * (1 + fabsf(b))) && bad_t < 0) bad_t = t, bad_i = i;
        }
    }
    CHECK_TRUE("attention_decode kv_cache", cache_ok, "cache rows 0..T-1 hold the k and v parts of qkv");
    CHECK_TRUE("attention_decode out", bad_t < 0, "decode == full forward within 1e-5 (1 + |full|)%s",
               bad_t < 0 ? "" : " (first mismatch below)");
    if (bad_t >= 0)
        printf("     decode row %d col %d: %g vs %g\n", bad_t, bad_i, dec[bad_t * Q + bad_i], full[bad_t * Q + bad_i]);
    int rest_zero = 1;
    for (int t = T; t < Tmax; t++)
        for (int i = 0; i < 2 * KV; i++) rest_zero &= cache[t * 2 * KV + i] == 0.0f;
    CHECK_TRUE("attention_decode kv_cache", rest_zero, "cache rows T..Tmax-1 untouched");
    free(qkv), free(full), free(lse), free(ws), free(cache), free(dec);
}

/* The paged KV cache of serving: S sequences of lengths T, 2T+1, ..., their blocks handed out
 * in a scrambled order; paged_kv_write puts each row's k and v in its slot (bit for bit, other
 * slots untouched), paged_attention over the block tables equals a double-precision causal
 * attention per sequence and attention_decode's bits, gather_rows copies rows. d = {S, T, nh,
 * nkv, hd, block_size}. */
void lj_case_cpu_paged_attention(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = lj_ops_cpu();
    const int S = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], bs = c->d[5];
    SHAPE("S=%d T=%d nh=%d nkv=%d hd=%d block_size=%d", S, T, nh, nkv, hd, bs);
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV, rep = nh / nkv;
    int N = 0, MB = 0;
    for (int s = 0; s < S; s++) {
        N += (s + 1) * T + s;
        MB = ((s + 1) * T + s + bs - 1) / bs > MB ? ((s + 1) * T + s + bs - 1) / bs : MB;
    }
    const int nblocks = S * MB + 3;
    int32_t *tables = lj_malloc((size_t)S * MB * sizeof(int32_t)), *seq = lj_malloc((size_t)N * sizeof(int32_t));
    int32_t *pos = lj_malloc((size_t)N * sizeof(int32_t)), *slots = lj_malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < S * MB; i++) tables[i] = (int32_t)((i * 7 + 3) % nblocks); /* distinct: 7 and nblocks coprime */
    for (int i = 0; i < S * MB; i++)
        for (int j = 0; j < i; j++)
            if (tables[i] == tables[j]) tables[i] = (tables[i] + 1) % nblocks, j = -1;
    int n = 0;
    for (int s = 0; s < S; s++)
        for (int p = 0; p < (s + 1) * T + s; p++, n++) {
            seq[n] = s, pos[n] = p;
            slots[n] = tables[s * MB + p / bs] * bs + p % bs;
        }
    float *qkv = randf(h, (int64_t)N * row, 1);
    const size_t cache_floats = (size_t)nblocks * bs * 2 * KV;
    float *cache = lj_malloc(cache_floats * sizeof(float)), *out = lj_malloc((size_t)N * Q * sizeof(float));
    for (size_t i = 0; i < cache_floats; i++) cache[i] = 7.0f;
    ops->paged_kv_write(cache, qkv, slots, N, nh, nkv, hd);
    int write_ok = 1;
    for (int i = 0; i < N; i++)
        write_ok &= memcmp(cache + (int64_t)slots[i] * 2 * KV, qkv + (int64_t)i * row + Q, 2 * KV * sizeof(float)) == 0;
    CHECK_TRUE("paged_kv_write", write_ok, "every row's k and v in its slot, bit for bit");
    size_t untouched = 0;
    for (size_t i = 0; i < cache_floats; i++) untouched += cache[i] == 7.0f;
    CHECK_TRUE("paged_kv_write", untouched == cache_floats - (size_t)N * 2 * KV, "the other slots untouched");
    ops->paged_attention(out, qkv, cache, tables, seq, pos, N, MB, bs, nh, nkv, hd);
    double *ref = lj_malloc((size_t)N * Q * sizeof(double));
    const double scale = 1.0 / sqrt((double)hd);
    int off = 0;
    for (int s = 0; s < S; s++) {
        const int L = (s + 1) * T + s;
        for (int t = 0; t < L; t++)
            for (int hh = 0; hh < nh; hh++) {
                const float *q = qkv + (int64_t)(off + t) * row + hh * hd;
                double mx = -INFINITY, sum = 0, *o = ref + (int64_t)(off + t) * Q + hh * hd;
                double *w = lj_malloc((size_t)(t + 1) * sizeof(double));
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + (int64_t)(off + j) * row + Q + (hh / rep) * hd;
                    double d = 0;
                    for (int x = 0; x < hd; x++) d += (double)q[x] * k[x];
                    w[j] = d * scale;
                    mx = w[j] > mx ? w[j] : mx;
                }
                for (int j = 0; j <= t; j++) sum += (w[j] = exp(w[j] - mx));
                for (int x = 0; x < hd; x++) o[x] = 0;
                for (int j = 0; j <= t; j++) {
                    const float *v = qkv + (int64_t)(off + j) * row + Q + KV + (hh / rep) * hd;
                    for (int x = 0; x < hd; x++) o[x] += w[j] / sum * v[x];
                }
                free(w);
            }
        /* attention_decode over a contiguous cache gives the same bits */
        float *dc = lj_calloc((size_t)L * 2 * KV, sizeof(float)), *dec = lj_malloc((size_t)L * Q * sizeof(float));
        ops->attention_decode(dec, dc, qkv + (int64_t)off * row, 0, L, nh, nkv, hd);
        CHECK_BITS("paged_attention vs attention_decode", out + (int64_t)off * Q, dec, (size_t)L * Q * sizeof(float));
        free(dc), free(dec);
        off += L;
    }
    CHECK_D("paged_attention out", out, ref, (int64_t)N * Q, c->tol);
    int32_t rows[3] = {N - 1, 0, N / 2};
    float *g = lj_malloc((size_t)3 * Q * sizeof(float));
    ops->gather_rows(g, out, rows, 3, Q);
    int gather_ok = 1;
    for (int i = 0; i < 3; i++) gather_ok &= memcmp(g + (int64_t)i * Q, out + (int64_t)rows[i] * Q, Q * sizeof(float)) == 0;
    CHECK_TRUE("gather_rows", gather_ok, "out[m] = x[rows[m]] bit for bit");
    free(tables), free(seq), free(pos), free(slots), free(qkv), free(cache), free(out), free(ref), free(g);
}

/* ---- building blocks (ops/cpu/cpu.h) ------------------------------------------------- */

/* Sets OMP_NUM_THREADS to `threads` (lj_num_threads reads it on every call) until
 * threads_pop restores the previous value. */
static char g_saved_threads[32];
static void threads_push(int threads) {
    const char *old = getenv("OMP_NUM_THREADS");
    snprintf(g_saved_threads, sizeof g_saved_threads, "%s", old ? old : "");
    char buf[16];
    snprintf(buf, sizeof buf, "%d", threads);
    setenv("OMP_NUM_THREADS", buf, 1);
}
static void threads_pop(void) {
    if (g_saved_threads[0])
        setenv("OMP_NUM_THREADS", g_saved_threads, 1);
    else
        unsetenv("OMP_NUM_THREADS");
}

/* C[M,N] = alpha op(A) op(B) + beta C in double, row-major. */
static void ref_gemm(int ta, int tb, int M, int N, int K, double alpha, const float *A, int lda, const float *B,
                     int ldb, double beta, const float *C0, double *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(int64_t)k * lda + i] : A[(int64_t)i * lda + k];
                double b = tb ? B[(int64_t)j * ldb + k] : B[(int64_t)k * ldb + j];
                s += a * b;
            }
            C[(int64_t)i * ldc + j] = alpha * s + beta * C0[(int64_t)i * ldc + j];
        }
}

/* lj_cpu_sgemm (alpha 0.5) in every transpose combination on 1, 2 and 3 threads:
 * d = {M, N, K}; param = beta. fp32 accumulation over K terms: the error grows like sqrt(K)
 * ulp, so the tolerance is 2e-7 sqrt(K). */
void lj_case_cpu_sgemm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const int M = c->d[0], N = c->d[1], K = c->d[2];
    const float beta = (float)c->param;
    const int threads[3] = {1, 2, 3};
    for (int th = 0; th < 3; th++) {
        threads_push(threads[th]);
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                SHAPE("ta=%d tb=%d %dx%dx%d beta=%g threads=%d", ta, tb, M, N, K, beta, threads[th]);
                int lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
                float *A = randf(h, (int64_t)(ta ? K : M) * lda, 1), *B = randf(h, (int64_t)(tb ? N : K) * ldb, 1);
                float *C = randf(h, (int64_t)M * ldc, 1), *C0 = lj_malloc((size_t)M * ldc * sizeof(float));
                memcpy(C0, C, (size_t)M * ldc * sizeof(float));
                double *want = lj_malloc((size_t)M * ldc * sizeof(double));
                ref_gemm(ta, tb, M, N, K, 0.5, A, lda, B, ldb, beta, C0, want, ldc);
                lj_cpu_sgemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, beta, C, ldc);
                CHECK_D("lj_cpu_sgemm", C, want, (int64_t)M * ldc, lj_harness_tol_l2(c->tol.rel_l2 * sqrt((double)K)));
                free(A), free(B), free(C), free(C0), free(want);
            }
        threads_pop();
    }
}

/* lj_cpu_expf against libm over [-87, 88] (no shape). */
void lj_case_cpu_expf(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)c, (void)mode;
    SHAPE("x in [-87, 88] step 0.00173");
    double worst = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.00173f) {
        double want = exp((double)x), rel = fabs(lj_cpu_expf(x) - want) / want;
        worst = rel > worst ? rel : worst;
    }
    CHECK_TRUE("lj_cpu_expf", worst <= 2.4e-7, "worst relative error %.3g <= 2.4e-7 (2 ulp)", worst);
    CHECK_TRUE("lj_cpu_expf", lj_cpu_expf(0.0f) == 1.0f, "expf(0) == 1");
    CHECK_TRUE("lj_cpu_expf", lj_cpu_expf(-87.5f) == 0.0f, "expf(-87.5) == 0");
    CHECK_TRUE("lj_cpu_expf", lj_cpu_expf(-INFINITY) == 0.0f, "expf(-inf) == 0");
    CHECK_TRUE("lj_cpu_expf", isnan(lj_cpu_expf(NAN)), "expf(NaN) is NaN");
}

/* lj_cpu_max, lj_cpu_sum_f64 and lj_cpu_dot_f64 against plain loops: d = {n}. */
void lj_case_cpu_lane_reductions(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const int n = c->d[0];
    SHAPE("n=%d", n);
    float *x = randf(h, n, 1), *y = randf(h, n, 1);
    double s = 0, d = 0;
    float m = x[0];
    for (int i = 0; i < n; i++) {
        s += x[i];
        d += (double)x[i] * y[i];
        m = x[i] > m ? x[i] : m;
    }
    CHECK_TRUE("lj_cpu_max", lj_cpu_max(x, n) == m, "max over %d", n);
    CHECK_TRUE("lj_cpu_sum_f64", fabs(lj_cpu_sum_f64(x, n) - s) <= 1e-12 * n, "sum within 1e-12 n");
    CHECK_TRUE("lj_cpu_dot_f64", fabs(lj_cpu_dot_f64(x, y, n) - d) <= 1e-12 * n, "dot within 1e-12 n");
    CHECK_TRUE("lj_cpu_max", lj_cpu_max(x + 3, 5) == fmaxf(fmaxf(fmaxf(x[3], x[4]), fmaxf(x[5], x[6])), x[7]),
               "max over 5 (below one lane group)");
    free(x), free(y);
}

/* lj_cpu_sgemm_gflops: d = {n}; a positive rate for n, 0 for n = 0. */
void lj_case_cpu_sgemm_probe(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    SHAPE("n=%d", c->d[0]);
    double r = lj_cpu_sgemm_gflops(c->d[0]);
    CHECK_TRUE("lj_cpu_sgemm_gflops", r > 0.0, "%.1f GFLOP/s > 0", r);
    CHECK_TRUE("lj_cpu_sgemm_gflops", lj_cpu_sgemm_gflops(0) == 0.0, "0 for n = 0");
}

/* Attention, RMSNorm, SwiGLU and the cross-entropy rows partition work by rows or heads, never
 * a reduction: the bits do not depend on the thread count (1, 2, 3).
 * d = {B, T, nh, nkv, hd}; C = 48, I = 40, V = 97. */
void lj_case_cpu_thread_count(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = lj_ops_cpu();
    const int B = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], C = 48, I = 40, V = 97;
    SHAPE("B=%d T=%d nh=%d nkv=%d hd=%d", B, T, nh, nkv, hd);
    const int N = B * T, QKV = (nh + 2 * nkv) * hd, Q = nh * hd;
    float *qkv = randf(h, (int64_t)N * QKV, 1), *x = randf(h, (int64_t)N * C, 1), *w = randf(h, C, 1);
    float *gu = randf(h, (int64_t)N * 2 * I, 1), *logits = randf(h, (int64_t)N * V, 3);
    int32_t *targets = lj_malloc(N * sizeof(int32_t));
    for (int n = 0; n < N; n++) targets[n] = n % 5 == 0 ? -1 : (int32_t)lj_rng_below(&h->rng, V);
    size_t out_floats = (size_t)N * Q + (size_t)B * nh * T + (size_t)N * QKV + (size_t)N * C + N + (size_t)N * C +
                        (size_t)N * I + (size_t)N * 2 * I + N + (size_t)N * V;
    float *res[3];
    for (int t = 0; t < 3; t++) {
        threads_push(t + 1);
        float *o = res[t] = lj_calloc(out_floats, sizeof(float));
        void *ws = lj_malloc(ops->attention_workspace_bytes(B, T, nh, nkv, hd));
        float *att = o, *lse = att + (size_t)N * Q, *dqkv = lse + (size_t)B * nh * T, *ln = dqkv + (size_t)N * QKV;
        float *rstd = ln + (size_t)N * C, *dx = rstd + N, *act = dx + (size_t)N * C, *dgu = act + (size_t)N * I;
        float *losses = dgu + (size_t)N * 2 * I, *dl = losses + N;
        ops->attention_forward(att, lse, qkv, B, T, nh, nkv, hd, ws);
        ops->attention_backward(dqkv, att, qkv, att, lse, B, T, nh, nkv, hd, ws);
        ops->rmsnorm_forward(ln, rstd, x, w, N, C, 1e-5f);
        ops->rmsnorm_backward(dx, NULL, ln, x, w, rstd, N, C, LJ_GRAD_ACCUMULATE, NULL);
        ops->swiglu_forward(act, gu, N, I);
        ops->swiglu_backward(dgu, act, gu, N, I);
        ops->cross_entropy_forward_backward(losses, dl, logits, targets, N, V, 0.01f);
        free(ws);
        threads_pop();
    }
    CHECK_BITS("thread count: 1 vs 2 threads", res[0], res[1], out_floats * sizeof(float));
    CHECK_BITS("thread count: 1 vs 3 threads", res[0], res[2], out_floats * sizeof(float));
    free(qkv), free(x), free(w), free(gu), free(logits), free(targets), free(res[0]), free(res[1]), free(res[2]);
}

/* test_ops_cpu_attention.c: the CPU causal GQA attention against a naive double-precision
 * softmax reference: forward values and log-sum-exp, the backward against central finite
 * differences of L = sum(out * R), determinism, and KV-cache decoding against the full
 * forward on the same sequence. Shapes include odd T, nh == nkv, nh/nkv = 2 and 4. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "ops/cpu/cpu.h"
#include "tests/test_util.h"

#define TOL_FWD 1e-5
#define TOL_GRAD 1e-4
#define FD_H 1e-5

static lj_rng g_rng;

static float *randf(int64_t n, float scale) { return lj_test_randf(&g_rng, n, scale); }

static double rel_err(const float *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void check_rel(const char *what, const float *a, const double *b, int64_t n, double tol) {
    double e = rel_err(a, b, n);
    if (!(e <= tol)) fail_msg("%s: relative error %.3g above %.1g", what, e, tol);
}

typedef struct {
    int B, T, nh, nkv, hd;
    double *qkv;
    const float *R;
} attn_ctx;

/* out[B*T, Q], lse[B, nh, T] (lse may be NULL): softmax((q k^T) / sqrt(hd)) v over keys
 * j <= t, query head h reading kv head h / (nh/nkv). */
static void ref_attention(const attn_ctx *c, double *out, double *lse) {
    const int Q = c->nh * c->hd, KV = c->nkv * c->hd, row = Q + 2 * KV, T = c->T, hd = c->hd;
    double *s = lj_malloc((size_t)T * sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->nh; h++) {
            int g = h / (c->nh / c->nkv);
            for (int t = 0; t < T; t++) {
                const double *q = c->qkv + ((int64_t)b * T + t) * row + h * hd;
                double m = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = c->qkv + ((int64_t)b * T + j) * row + Q + g * hd;
                    s[j] = 0;
                    for (int d = 0; d < hd; d++) s[j] += q[d] * k[d];
                    s[j] /= sqrt((double)hd);
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - m);
                if (lse) lse[((int64_t)b * c->nh + h) * T + t] = m + log(sum);
                double *o = out + ((int64_t)b * T + t) * Q + h * hd;
                for (int d = 0; d < hd; d++) o[d] = 0;
                for (int j = 0; j <= t; j++) {
                    const double *v = c->qkv + ((int64_t)b * T + j) * row + Q + KV + g * hd;
                    double p = exp(s[j] - m) / sum;
                    for (int d = 0; d < hd; d++) o[d] += p * v[d];
                }
            }
        }
    free(s);
}

static double attn_loss(void *p) {
    attn_ctx *c = p;
    int64_t n = (int64_t)c->B * c->T * c->nh * c->hd;
    double *o = lj_malloc((size_t)n * sizeof(double)), l = 0;
    ref_attention(c, o, NULL);
    for (int64_t i = 0; i < n; i++) l += o[i] * c->R[i];
    free(o);
    return l;
}

static void check_attention(int B, int T, int nh, int nkv, int hd) {
    const lj_ops *ops = lj_ops_cpu();
    const int Q = nh * hd, row = Q + 2 * nkv * hd;
    const int64_t nqkv = (int64_t)B * T * row, nout = (int64_t)B * T * Q, nlse = (int64_t)B * nh * T;
    float *qkv = randf(nqkv, 1), *out = randf(nout, 1), *lse = randf(nlse, 1);
    void *ws = lj_malloc(ops->attention_workspace_bytes(B, T, nh, nkv, hd));
    ops->attention_forward(out, lse, qkv, B, T, nh, nkv, hd, ws);

    attn_ctx c = {B, T, nh, nkv, hd, lj_malloc(nqkv * sizeof(double)), randf(nout, 1)};
    for (int64_t i = 0; i < nqkv; i++) c.qkv[i] = qkv[i];
    double *ref = lj_malloc(nout * sizeof(double)), *ref_lse = lj_malloc(nlse * sizeof(double));
    ref_attention(&c, ref, ref_lse);
    check_rel("attention forward", out, ref, nout, TOL_FWD);
    check_rel("attention lse", lse, ref_lse, nlse, TOL_FWD);

    /* dqkv is overwritten: start from garbage */
    float *dqkv = randf(nqkv, 100);
    ops->attention_backward(dqkv, c.R, qkv, out, lse, B, T, nh, nkv, hd, ws);
    double *g = lj_malloc(nqkv * sizeof(double));
    for (int64_t i = 0; i < nqkv; i++) {
        double keep = c.qkv[i];
        c.qkv[i] = keep + FD_H;
        double lp = attn_loss(&c);
        c.qkv[i] = keep - FD_H;
        double lm = attn_loss(&c);
        c.qkv[i] = keep;
        g[i] = (lp - lm) / (2 * FD_H);
    }
    check_rel("attention dqkv", dqkv, g, nqkv, TOL_GRAD);

    /* the same inputs give the same bits */
    float *out2 = lj_malloc(nout * sizeof(float)), *lse2 = lj_malloc(nlse * sizeof(float));
    float *dqkv2 = randf(nqkv, 1);
    ops->attention_forward(out2, lse2, qkv, B, T, nh, nkv, hd, ws);
    ops->attention_backward(dqkv2, c.R, qkv, out, lse, B, T, nh, nkv, hd, ws);
    assert_true(memcmp(out, out2, nout * sizeof(float)) == 0);
    assert_true(memcmp(lse, lse2, nlse * sizeof(float)) == 0);
    assert_true(memcmp(dqkv, dqkv2, nqkv * sizeof(float)) == 0);
    free(qkv), free(out), free(lse), free(ws), free(c.qkv), free((void *)c.R), free(ref), free(ref_lse);
    free(dqkv), free(g), free(out2), free(lse2), free(dqkv2);
}

static void test_attention_gqa(void **state) {
    (void)state;
    check_attention(2, 7, 4, 2, 8); /* GQA, 2 query heads per kv head, odd T */
    check_attention(2, 5, 4, 1, 8); /* MQA-like: 4 query heads per kv head */
}

static void test_attention_mha(void **state) {
    (void)state;
    check_attention(1, 13, 2, 2, 16); /* nh == nkv */
    check_attention(3, 1, 2, 1, 8);   /* T = 1 */
}

/* Prefill of 5 tokens, then 4 single-token steps, against the full forward. */
static void test_attention_decode(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    const int T = 9, nh = 4, nkv = 2, hd = 16, Tmax = 12, prefill = 5;
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV;
    float *qkv = randf((int64_t)T * row, 1), *full = lj_malloc((size_t)T * Q * sizeof(float));
    float *lse = lj_malloc((size_t)nh * T * sizeof(float));
    void *ws = lj_malloc(ops->attention_workspace_bytes(1, T, nh, nkv, hd));
    ops->attention_forward(full, lse, qkv, 1, T, nh, nkv, hd, ws);

    float *cache = lj_calloc((size_t)Tmax * 2 * KV, sizeof(float));
    float *dec = lj_malloc((size_t)T * Q * sizeof(float));
    ops->attention_decode(dec, cache, qkv, 0, prefill, nh, nkv, hd);
    for (int p = prefill; p < T; p++)
        ops->attention_decode(dec + (int64_t)p * Q, cache, qkv + (int64_t)p * row, p, 1, nh, nkv, hd);
    for (int t = 0; t < T; t++) {
        assert_true(memcmp(cache + (int64_t)t * 2 * KV, qkv + (int64_t)t * row + Q, 2 * KV * sizeof(float)) == 0);
        for (int i = 0; i < Q; i++) {
            float a = dec[t * Q + i], b = full[t * Q + i];
            if (!(fabsf(a - b) <= 1e-5f * (1 + fabsf(b)))) fail_msg("decode row %d col %d: %g vs %g", t, i, a, b);
        }
    }
    for (int t = T; t < Tmax; t++)
        for (int i = 0; i < 2 * KV; i++) assert_true(cache[t * 2 * KV + i] == 0.0f);
    free(qkv), free(full), free(lse), free(ws), free(cache), free(dec);
}

int main(void) {
    lj_rng_seed(&g_rng, 1234567);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_gqa),
        cmocka_unit_test(test_attention_mha),
        cmocka_unit_test(test_attention_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

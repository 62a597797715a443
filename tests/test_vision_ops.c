/* test_vision_ops.c: the CPU backend's vision-tower ops (ops/ops.h: layernorm, gelu,
 * embedding_bag, attention_varlen, rows_gather / rows_scatter) against their definitions: each
 * forward against a direct evaluation in double, each backward against central finite
 * differences of loss = sum(out * R) for random R. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "ops/ops.h"
#include "tests/test_util.h"

typedef double (*loss_fn)(void *ctx);

static double dot_d(const float *a, const float *b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* d loss / d x[i] by central differences at `samples` spread indices against g[i]. */
static void check_fd(const char *what, float *x, int64_t n, const float *g, loss_fn f, void *ctx, int samples) {
    const float eps = 1e-2f;
    double worst = 0.0;
    for (int k = 0; k < samples; k++) {
        const int64_t i = (int64_t)((double)k * (double)n / samples);
        const float x0 = x[i];
        x[i] = x0 + eps;
        const double lp = f(ctx);
        x[i] = x0 - eps;
        const double lm = f(ctx);
        x[i] = x0;
        const double fd = (lp - lm) / (2.0 * eps), err = fabs(fd - g[i]) / (1.0 + fabs(fd));
        if (err > worst) worst = err;
        if (err > 1e-2) fail_msg("%s: d/dx[%lld] analytic %.6f, finite differences %.6f", what, (long long)i, g[i], fd);
    }
    print_message("%s: worst finite-difference error %.2e over %d samples\n", what, worst, samples);
}

/* ---- LayerNorm ---- */
typedef struct {
    const lj_ops *ops;
    int N, C;
    float *x, *w, *b, *out, *mean, *rstd, *R;
} ln_case;

static double ln_loss(void *p) {
    ln_case *c = p;
    c->ops->layernorm_forward(c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C, 1e-6f);
    return dot_d(c->out, c->R, (int64_t)c->N * c->C);
}

static void test_layernorm(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    lj_rng rng;
    lj_rng_seed(&rng, 11);
    ln_case c = {ops, 7, 24, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    const int64_t n = (int64_t)c.N * c.C;
    c.x = lj_test_randf(&rng, n, 1.0f);
    c.w = lj_test_randf(&rng, c.C, 0.5f);
    c.b = lj_test_randf(&rng, c.C, 0.5f);
    c.R = lj_test_randf(&rng, n, 1.0f);
    c.out = lj_malloc(n * sizeof(float));
    c.mean = lj_malloc(c.N * sizeof(float));
    c.rstd = lj_malloc(c.N * sizeof(float));
    ln_loss(&c);
    for (int r = 0; r < c.N; r++) { /* forward against double */
        double mu = 0.0, var = 0.0;
        for (int i = 0; i < c.C; i++) mu += c.x[r * c.C + i];
        mu /= c.C;
        for (int i = 0; i < c.C; i++) var += (c.x[r * c.C + i] - mu) * (c.x[r * c.C + i] - mu);
        var /= c.C;
        for (int i = 0; i < c.C; i++) {
            const double want = (c.x[r * c.C + i] - mu) / sqrt(var + 1e-6) * c.w[i] + c.b[i];
            assert_true(fabs(c.out[r * c.C + i] - want) < 1e-5);
        }
    }
    float *dx = lj_malloc(n * sizeof(float)), *dw = lj_malloc(c.C * sizeof(float)), *db = lj_malloc(c.C * sizeof(float));
    for (int64_t i = 0; i < n; i++) dx[i] = 1.0f; /* accumulate onto ones */
    for (int i = 0; i < c.C; i++) dw[i] = db[i] = 0.5f;
    ops->layernorm_backward(dx, dw, db, c.R, c.x, c.w, c.mean, c.rstd, c.N, c.C, LJ_GRAD_ACCUMULATE,
                            LJ_GRAD_ACCUMULATE, NULL);
    for (int64_t i = 0; i < n; i++) dx[i] -= 1.0f;
    for (int i = 0; i < c.C; i++) dw[i] -= 0.5f, db[i] -= 0.5f;
    check_fd("layernorm dx", c.x, n, dx, ln_loss, &c, 40);
    check_fd("layernorm dw", c.w, c.C, dw, ln_loss, &c, c.C);
    check_fd("layernorm db", c.b, c.C, db, ln_loss, &c, c.C);
    /* OVERWRITE writes the same values */
    float *dx2 = lj_malloc(n * sizeof(float)), *dw2 = lj_malloc(c.C * sizeof(float)), *db2 = lj_malloc(c.C * sizeof(float));
    memset(dx2, 0x7f, n * sizeof(float));
    ops->layernorm_backward(dx2, dw2, db2, c.R, c.x, c.w, c.mean, c.rstd, c.N, c.C, LJ_GRAD_OVERWRITE, LJ_GRAD_OVERWRITE,
                            NULL);
    for (int64_t i = 0; i < n; i++) assert_true(fabsf(dx2[i] - dx[i]) < 1e-5f);
    for (int i = 0; i < c.C; i++) assert_true(fabsf(dw2[i] - dw[i]) < 1e-5f && fabsf(db2[i] - db[i]) < 1e-5f);
    free(dx2), free(dw2), free(db2), free(dx), free(dw), free(db);
    free(c.x), free(c.w), free(c.b), free(c.R), free(c.out), free(c.mean), free(c.rstd);
}

/* ---- GELU ---- */
typedef struct {
    const lj_ops *ops;
    int64_t n;
    int tanh_form;
    float *x, *out, *R;
} gelu_case;

static double gelu_loss(void *p) {
    gelu_case *c = p;
    c->ops->gelu_forward(c->out, c->x, c->n, c->tanh_form);
    return dot_d(c->out, c->R, c->n);
}

static void test_gelu(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    lj_rng rng;
    lj_rng_seed(&rng, 12);
    for (int form = 0; form < 2; form++) {
        gelu_case c = {ops, 64, form, lj_test_randf(&rng, 64, 2.0f), lj_malloc(64 * sizeof(float)),
                       lj_test_randf(&rng, 64, 1.0f)};
        gelu_loss(&c);
        for (int i = 0; i < 64; i++) {
            const double x = c.x[i];
            const double want = form ? 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
                                     : 0.5 * x * (1 + erf(x / sqrt(2.0)));
            assert_true(fabs(c.out[i] - want) < 1e-6 * (1 + fabs(want)));
        }
        float *dx = lj_malloc(64 * sizeof(float));
        ops->gelu_backward(dx, c.R, c.x, 64, form);
        check_fd(form ? "gelu tanh" : "gelu erf", c.x, 64, dx, gelu_loss, &c, 64);
        free(dx), free(c.x), free(c.out), free(c.R);
    }
    float x[1] = {1.0f}, a[1], b[1];
    ops->gelu_forward(a, x, 1, 0);
    ops->gelu_forward(b, x, 1, 1);
    assert_true(fabsf(a[0] - b[0]) > 1e-5f); /* the form is not ignored: 0.841345 vs 0.841192 */
}

/* ---- embedding bag ---- */
typedef struct {
    const lj_ops *ops;
    int N, K, C, R;
    float *table, *w, *out, *Rr;
    int32_t *idx;
} bag_case;

static double bag_loss(void *p) {
    bag_case *c = p;
    c->ops->embedding_bag_forward(c->out, c->table, c->idx, c->w, c->N, c->K, c->C);
    return dot_d(c->out, c->Rr, (int64_t)c->N * c->C);
}

static void test_embedding_bag(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    lj_rng rng;
    lj_rng_seed(&rng, 13);
    bag_case c = {ops, 9, 4, 20, 6, NULL, NULL, NULL, NULL, NULL};
    c.table = lj_test_randf(&rng, (int64_t)c.R * c.C, 1.0f);
    c.w = lj_malloc((size_t)c.N * c.K * sizeof(float));
    c.idx = lj_malloc((size_t)c.N * c.K * sizeof(int32_t));
    for (int i = 0; i < c.N * c.K; i++) {
        c.w[i] = lj_rng_uniform(&rng);
        c.idx[i] = (int32_t)lj_rng_below(&rng, (uint64_t)c.R); /* repeats: the scatter-add must sum them */
    }
    c.out = lj_malloc((size_t)c.N * c.C * sizeof(float));
    c.Rr = lj_test_randf(&rng, (int64_t)c.N * c.C, 1.0f);
    bag_loss(&c);
    for (int n = 0; n < c.N; n++)
        for (int j = 0; j < c.C; j++) {
            double want = 0.0;
            for (int k = 0; k < c.K; k++) want += (double)c.w[n * c.K + k] * c.table[c.idx[n * c.K + k] * c.C + j];
            assert_true(fabs(c.out[n * c.C + j] - want) < 1e-5);
        }
    float *dt = calloc((size_t)c.R * c.C, sizeof(float));
    ops->embedding_bag_backward(dt, c.Rr, c.idx, c.w, c.N, c.K, c.C);
    check_fd("embedding_bag dtable", c.table, (int64_t)c.R * c.C, dt, bag_loss, &c, 60);
    free(dt), free(c.table), free(c.w), free(c.idx), free(c.out), free(c.Rr);
}

/* ---- attention over segments ---- */
typedef struct {
    const lj_ops *ops;
    int N, nh, nkv, hd, nseg, causal;
    int32_t cu[4];
    float *qkv, *out, *lse, *R;
    void *ws;
} att_case;

static double att_loss(void *p) {
    att_case *c = p;
    c->ops->attention_varlen_forward(c->out, c->lse, c->qkv, c->cu, c->nseg, 6, c->N, c->nh, c->nkv, c->hd,
                                     c->causal, c->ws);
    return dot_d(c->out, c->R, (int64_t)c->N * c->nh * c->hd);
}

static void test_attention_varlen(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    lj_rng rng;
    lj_rng_seed(&rng, 14);
    for (int causal = 0; causal < 2; causal++) {
        att_case c = {ops, 11, 4, 2, 8, 3, causal, {0, 4, 5, 11}, NULL, NULL, NULL, NULL, NULL};
        const int row = (c.nh + 2 * c.nkv) * c.hd, Q = c.nh * c.hd;
        c.qkv = lj_test_randf(&rng, (int64_t)c.N * row, 1.0f);
        c.out = lj_malloc((size_t)c.N * Q * sizeof(float));
        c.lse = lj_malloc((size_t)c.nh * c.N * sizeof(float));
        c.R = lj_test_randf(&rng, (int64_t)c.N * Q, 1.0f);
        c.ws = lj_malloc(ops->attention_varlen_workspace_bytes(6, c.nh, c.nkv, c.hd));
        att_loss(&c);
        /* forward against softmax in double, segment by segment */
        for (int s = 0; s < c.nseg; s++)
            for (int i = c.cu[s]; i < c.cu[s + 1]; i++)
                for (int h = 0; h < c.nh; h++) {
                    const int g = h / (c.nh / c.nkv), k1 = causal ? i + 1 : c.cu[s + 1];
                    double sc[16], mx = -1e300, l = 0.0;
                    for (int j = c.cu[s]; j < k1; j++) {
                        double d = 0.0;
                        for (int e = 0; e < c.hd; e++)
                            d += (double)c.qkv[i * row + h * c.hd + e] * c.qkv[j * row + Q + g * c.hd + e];
                        sc[j - c.cu[s]] = d / sqrt((double)c.hd);
                        if (sc[j - c.cu[s]] > mx) mx = sc[j - c.cu[s]];
                    }
                    for (int j = c.cu[s]; j < k1; j++) l += exp(sc[j - c.cu[s]] - mx);
                    for (int e = 0; e < c.hd; e++) {
                        double o = 0.0;
                        for (int j = c.cu[s]; j < k1; j++)
                            o += exp(sc[j - c.cu[s]] - mx) / l * c.qkv[j * row + Q + c.nkv * c.hd + g * c.hd + e];
                        assert_true(fabs(c.out[i * Q + h * c.hd + e] - o) < 1e-5);
                    }
                    assert_true(fabs(c.lse[h * c.N + i] - (mx + log(l))) < 1e-5);
                }
        float *d = lj_malloc((size_t)c.N * row * sizeof(float));
        memset(d, 0x7f, (size_t)c.N * row * sizeof(float)); /* overwritten */
        ops->attention_varlen_backward(d, c.R, c.qkv, c.out, c.lse, c.cu, c.nseg, 6, c.N, c.nh, c.nkv, c.hd, causal,
                                       c.ws);
        check_fd(causal ? "attention_varlen causal dqkv" : "attention_varlen bidirectional dqkv", c.qkv,
                 (int64_t)c.N * row, d, att_loss, &c, 120);
        free(d), free(c.qkv), free(c.out), free(c.lse), free(c.R), free(c.ws);
    }
}

static void test_rows(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    float x[5 * 3], src[2 * 3] = {1, 2, 3, 4, 5, 6}, g[2 * 3];
    for (int i = 0; i < 15; i++) x[i] = (float)i;
    const int32_t idx[2] = {3, 1};
    ops->rows_gather(g, x, idx, 2, 3);
    assert_true(g[0] == 9 && g[2] == 11 && g[3] == 3 && g[5] == 5);
    ops->rows_scatter(x, src, idx, 2, 3, LJ_GRAD_ACCUMULATE);
    assert_true(x[9] == 10 && x[11] == 14 && x[3] == 7 && x[0] == 0);
    ops->rows_scatter(x, src, idx, 2, 3, LJ_GRAD_OVERWRITE);
    assert_true(x[9] == 1 && x[3] == 4 && x[6] == 6);
    ops->rows_scatter(x, NULL, idx, 2, 3, LJ_GRAD_OVERWRITE);
    assert_true(x[9] == 0 && x[10] == 0 && x[4] == 0 && x[6] == 6 && x[12] == 12);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm),  cmocka_unit_test(test_gelu),      cmocka_unit_test(test_embedding_bag),
        cmocka_unit_test(test_attention_varlen), cmocka_unit_test(test_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

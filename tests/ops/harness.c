/* harness.c: the op harness's check helpers, tallies, timing and host buffers (harness.h). */
#include "tests/ops/harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#ifdef LJ_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "ops/cuda/cuda_common.h"
#endif

void lj_harness_init(lj_harness *h, const char *program) {
    memset(h, 0, sizeof *h);
    h->program = program;
    lj_rng_seed(&h->rng, 1);
    setvbuf(stdout, NULL, _IOLBF, 0);
}

/* ---- measures ---------------------------------------------------------------------- */

static double ref_at(const float *ref_f, const double *ref_d, int64_t i) { return ref_f ? ref_f[i] : ref_d[i]; }

double lj_harness_max_abs(const float *got, const float *ref_f, const double *ref_d, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(got[i] - ref_at(ref_f, ref_d, i));
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    return m;
}

double lj_harness_rel_l2(const float *got, const float *ref_f, const double *ref_d, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = ref_at(ref_f, ref_d, i), d = got[i] - r;
        num += d * d;
        den += r * r;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---- tallies ------------------------------------------------------------------------ */

static lj_harness_op *op_entry(lj_harness *h, const char *op) {
    char name[sizeof h->ops[0].name];
    snprintf(name, sizeof name, "%s%s", op, h->tag);
    for (int i = 0; i < h->nops; i++)
        if (strcmp(h->ops[i].name, name) == 0) return &h->ops[i];
    LJ_ASSERT(h->nops < LJ_HARNESS_MAX_OPS, "op harness: more than %d op names", LJ_HARNESS_MAX_OPS);
    lj_harness_op *e = &h->ops[h->nops++];
    memcpy(e->name, name, sizeof name);
    return e;
}

static int record(lj_harness *h, const char *op, int pass, double worst) {
    lj_harness_op *e = op_entry(h, op);
    e->checks++;
    h->checks++;
    if (!pass) e->fails++, h->fails++;
    if (!(worst <= e->worst)) e->worst = isnan(worst) ? INFINITY : worst;
    return pass;
}

/* ---- checks ------------------------------------------------------------------------- */

static int check_any(lj_harness *h, const char *op, const char *shape, const float *got, const float *ref_f,
                     const double *ref_d, int64_t n, lj_harness_tol tol) {
    double num = 0, den = 0, max_abs = 0, max_ref = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], r = ref_at(ref_f, ref_d, i);
        if (!isfinite(g) || !isfinite(r)) {
            bad = 1;
            continue;
        }
        double d = fabs(g - r);
        num += d * d;
        den += r * r;
        if (d > max_abs) max_abs = d;
        if (fabs(r) > max_ref) max_ref = fabs(r);
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    double mrel = max_ref > 0 ? max_abs / max_ref : max_abs;
    int pass;
    if (bad)
        pass = 0;
    else if (tol.zero > 0 && max_ref < tol.zero)
        pass = max_abs <= tol.zero;
    else
        pass = rel <= tol.rel_l2 && (tol.max_rel < 0 || mrel <= tol.max_rel);
    record(h, op, pass, bad ? INFINITY : rel);
    if (!pass || h->verbose) {
        char tl[48];
        if (tol.max_rel >= 0)
            snprintf(tl, sizeof tl, "tol %.0e/%.0e", tol.rel_l2, tol.max_rel);
        else
            snprintf(tl, sizeof tl, "tol %.1g", tol.rel_l2);
        printf("%s %-40s %-30s max_abs %.3e rel_l2 %.3e max_rel %.3e (%s)%s\n", pass ? "PASS" : "FAIL",
               op_entry(h, op)->name, shape, max_abs, rel, mrel, tl, bad ? " NON-FINITE" : "");
    }
    return pass;
}

int lj_harness_check_d(lj_harness *h, const char *op, const char *shape, const float *got, const double *ref,
                       int64_t n, lj_harness_tol tol) {
    return check_any(h, op, shape, got, NULL, ref, n, tol);
}

int lj_harness_check_f(lj_harness *h, const char *op, const char *shape, const float *got, const float *ref,
                       int64_t n, lj_harness_tol tol) {
    return check_any(h, op, shape, got, ref, NULL, n, tol);
}

int lj_harness_check_bits(lj_harness *h, const char *op, const char *shape, const void *got, const void *ref,
                          size_t bytes) {
    const unsigned char *a = got, *b = ref;
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < bytes; i++)
        if (a[i] != b[i] && differ++ == 0) first = i;
    int pass = differ == 0;
    record(h, op, pass, pass ? 0.0 : INFINITY);
    if (!pass || h->verbose) {
        if (pass)
            printf("PASS %-40s %-30s bit-identical (%zu bytes)\n", op_entry(h, op)->name, shape, bytes);
        else
            printf("FAIL %-40s %-30s %zu of %zu bytes differ, first at byte %zu\n", op_entry(h, op)->name, shape,
                   differ, bytes, first);
    }
    return pass;
}

int lj_harness_check_true(lj_harness *h, const char *op, const char *shape, int cond, const char *fmt, ...) {
    int pass = cond != 0;
    record(h, op, pass, pass ? 0.0 : INFINITY);
    if (!pass || h->verbose) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        printf("%s %-40s %-30s %s\n", pass ? "PASS" : "FAIL", op_entry(h, op)->name, shape, msg);
    }
    return pass;
}

int lj_harness_summary(lj_harness *h) {
    if (h->nops) {
        printf("\n%-56s %6s %6s %12s %s\n", "op", "checks", "fails", "worst_rel_l2", "result");
        for (int i = 0; i < h->nops; i++)
            printf("%-56s %6d %6d %12.3e %s\n", h->ops[i].name, h->ops[i].checks, h->ops[i].fails, h->ops[i].worst,
                   h->ops[i].fails ? "FAIL" : "PASS");
    }
    printf("%s: %s (%d checks, %d failing)\n", h->program, h->fails ? "FAIL" : "PASS", h->checks, h->fails);
    return h->fails ? 1 : 0;
}

/* ---- perf --------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double lj_harness_time_ms(const lj_ops *ops, void (*fn)(void *), void *ctx, int warmup, int iters) {
    LJ_ASSERT(iters > 0, "lj_harness_time_ms: iters %d", iters);
    for (int i = 0; i < warmup; i++) fn(ctx);
    double *t = lj_malloc((size_t)iters * sizeof(double));
#ifdef LJ_HAVE_CUDA
    if (strcmp(ops->name, "cuda") == 0) {
        cudaStream_t s = lj_cuda_stream();
        cudaEvent_t e0, e1;
        LJ_CUDA_CHECK(cudaEventCreate(&e0), "cudaEventCreate in lj_harness_time_ms");
        LJ_CUDA_CHECK(cudaEventCreate(&e1), "cudaEventCreate in lj_harness_time_ms");
        for (int i = 0; i < iters; i++) {
            float ms = 0;
            LJ_CUDA_CHECK(cudaEventRecord(e0, s), "cudaEventRecord in lj_harness_time_ms");
            fn(ctx);
            LJ_CUDA_CHECK(cudaEventRecord(e1, s), "cudaEventRecord in lj_harness_time_ms");
            LJ_CUDA_CHECK(cudaEventSynchronize(e1), "cudaEventSynchronize in lj_harness_time_ms");
            LJ_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime in lj_harness_time_ms");
            t[i] = ms;
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    } else
#endif
    {
        ops->synchronize();
        for (int i = 0; i < iters; i++) {
            double t0 = lj_time_sec();
            fn(ctx);
            ops->synchronize();
            t[i] = (lj_time_sec() - t0) * 1e3;
        }
    }
    qsort(t, (size_t)iters, sizeof(double), cmp_double);
    double med = t[iters / 2];
    free(t);
    return med;
}

void lj_harness_report(const char *group, const char *what, double ms, double rate, const char *unit,
                       double ceiling) {
    printf("  %-32s %9.3f ms %8.1f %-7s (%3.0f%% of %.0f)\n", what, ms, rate, unit, 100.0 * rate / ceiling, ceiling);
    printf("RESULT %s %s %.1f %s %.3f ms\n", group, what, rate, unit, ms);
}

/* ---- host buffers ------------------------------------------------------------------- */

float *lj_harness_randf(lj_harness *h, int64_t n, float scale) {
    float *x = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lj_rng_normal(&h->rng) * scale);
    return x;
}

float *lj_harness_randf_bf16(lj_harness *h, int64_t n, float scale) {
    float *x = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = lj_bf16_to_f32(lj_f32_to_bf16((float)lj_rng_normal(&h->rng) * scale));
    return x;
}

float *lj_harness_randf_bf16_around(lj_harness *h, int64_t n, float offset, float scale) {
    float *x = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = lj_bf16_to_f32(lj_f32_to_bf16(offset + (float)lj_rng_normal(&h->rng) * scale));
    return x;
}

void *lj_harness_dalloc(const lj_ops *ops, size_t bytes) {
    void *p = NULL;
    if (ops->alloc(&p, bytes ? bytes : 1) != LJ_OK) {
        fprintf(stderr, "op harness: %s\n", lj_error_message());
        exit(2);
    }
    return p;
}

void lj_harness_dpoison(const lj_ops *ops, void *d, size_t bytes) {
    unsigned char *b = lj_malloc(bytes ? bytes : 1);
    memset(b, 0xff, bytes);
    ops->upload(d, b, bytes);
    ops->synchronize();
    free(b);
}

void *lj_harness_upload(const lj_ops *ops, const void *x, int64_t n, lj_dtype dtype) {
    const size_t es = dtype == LJ_DTYPE_BF16 ? 2 : 4;
    void *d = lj_harness_dalloc(ops, (size_t)n * es);
    if (dtype == LJ_DTYPE_BF16) {
        uint16_t *b = lj_malloc((size_t)(n > 0 ? n : 1) * 2);
        for (int64_t i = 0; i < n; i++) b[i] = lj_f32_to_bf16(((const float *)x)[i]);
        ops->upload(d, b, (size_t)n * 2);
        ops->synchronize();
        free(b);
    } else {
        ops->upload(d, x, (size_t)n * 4);
        ops->synchronize();
    }
    return d;
}

float *lj_harness_download_f32(const lj_ops *ops, const void *d, int64_t n, lj_dtype dtype) {
    float *x = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (dtype == LJ_DTYPE_BF16) {
        uint16_t *b = lj_malloc((size_t)(n > 0 ? n : 1) * 2);
        ops->download(b, d, (size_t)n * 2);
        for (int64_t i = 0; i < n; i++) x[i] = lj_bf16_to_f32(b[i]);
        free(b);
    } else {
        ops->download(x, d, (size_t)n * 4);
    }
    return x;
}

double *lj_harness_to_double(const float *x, int64_t n) {
    double *d = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

float *lj_harness_gather(const float *src, int64_t n, int64_t stride, int64_t width) {
    float *d = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t k = 0; k < n; k++) d[k] = src[(k / width) * stride + k % width];
    return d;
}

double *lj_harness_fd_grad(lj_harness_loss_fn loss, void *ctx, double *p, int64_t n) {
    const double step = 1e-5;
    double *g = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        double keep = p[i];
        p[i] = keep + step;
        double lp = loss(ctx);
        p[i] = keep - step;
        double lm = loss(ctx);
        p[i] = keep;
        g[i] = (lp - lm) / (2 * step);
    }
    return g;
}

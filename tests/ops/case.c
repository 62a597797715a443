/* case.c: the runner of the cases written once (case.h): the passes over the backends, the
 * buffers of a pass, and the comparison of each output with the case's reference or with the
 * CPU's recorded output. */
#include "tests/ops/case.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static lj_dtype dtype_of(const lj_ops *ops, lj_case_kind kind) {
    switch (kind) {
    case LJ_CASE_ACT: return ops->act_dtype;
    case LJ_CASE_PARAM: return ops->param_dtype;
    case LJ_CASE_GRAD: return ops->grad_dtype;
    default: return LJ_DTYPE_F32; /* f32, and i32 words */
    }
}

static size_t bytes_of(const lj_ops *ops, int64_t n, lj_case_kind kind) {
    return (size_t)(n > 0 ? n : 1) * lj_dtype_size(dtype_of(ops, kind));
}

static void *keep_host(lj_case_ctx *x, void *p) {
    LJ_ASSERT(x->nhost < LJ_CASE_MAX_BUFFERS, "case %s: more than %d host buffers", x->c->op, LJ_CASE_MAX_BUFFERS);
    x->host[x->nhost++] = p;
    return p;
}

static void *keep_dev(lj_case_ctx *x, void *p) {
    LJ_ASSERT(x->ndev < LJ_CASE_MAX_BUFFERS, "case %s: more than %d device buffers", x->c->op, LJ_CASE_MAX_BUFFERS);
    x->dev[x->ndev++] = p;
    return p;
}

void lj_case_shape(lj_case_ctx *x, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->shape, sizeof x->shape, fmt, ap);
    va_end(ap);
}

float *lj_case_rand(lj_case_ctx *x, int64_t n, float scale) {
    return keep_host(x, lj_harness_randf_bf16(x->h, n, scale));
}

float *lj_case_rand_around(lj_case_ctx *x, int64_t n, float offset, float scale) {
    return keep_host(x, lj_harness_randf_bf16_around(x->h, n, offset, scale));
}

float *lj_case_zeros(lj_case_ctx *x, int64_t n) {
    return keep_host(x, lj_calloc((size_t)(n > 0 ? n : 1), sizeof(float)));
}

double *lj_case_dzeros(lj_case_ctx *x, int64_t n) {
    return keep_host(x, lj_calloc((size_t)(n > 0 ? n : 1), sizeof(double)));
}

double *lj_case_to_double(lj_case_ctx *x, const float *v, int64_t n) {
    return keep_host(x, lj_harness_to_double(v, n));
}

void *lj_case_upload(lj_case_ctx *x, const void *host, int64_t n, lj_case_kind kind) {
    return keep_dev(x, lj_harness_upload(x->ops, host, n, dtype_of(x->ops, kind)));
}

void *lj_case_alloc(lj_case_ctx *x, int64_t n, lj_case_kind kind) {
    const size_t bytes = bytes_of(x->ops, n, kind);
    void *d = keep_dev(x, lj_harness_dalloc(x->ops, bytes));
    lj_harness_dpoison(x->ops, d, bytes);
    return d;
}

void *lj_case_scratch(lj_case_ctx *x, size_t bytes) { return keep_dev(x, lj_harness_dalloc(x->ops, bytes ? bytes : 1)); }

void lj_case_poison(lj_case_ctx *x, void *dev, int64_t n, lj_case_kind kind) {
    lj_harness_dpoison(x->ops, dev, bytes_of(x->ops, n, kind));
}

float *lj_case_download(lj_case_ctx *x, const void *dev, int64_t n, lj_case_kind kind) {
    return keep_host(x, lj_harness_download_f32(x->ops, dev, n, dtype_of(x->ops, kind)));
}

/* The tolerance of `which` on this pass. */
static lj_harness_tol tol_of(const lj_case_ctx *x, lj_case_tol which) {
    const lj_op_case *c = x->c;
    const lj_harness_tol exact_cpu = {0, -1, 0}, exact_gpu = {1e-6, 1e-6, 1e-5}, f32_gpu = {1e-5, 1e-5, 1e-5};
    const int cpu = x->pass == LJ_CASE_REFERENCE;
    switch (which) {
    case LJ_CASE_TOL_OUT: return c->tol;
    case LJ_CASE_TOL_DGRAD: return cpu ? c->tol_grad : c->tol;
    case LJ_CASE_TOL_WGRAD: return c->tol_grad;
    case LJ_CASE_TOL_F32: return cpu ? c->tol : f32_gpu;
    default: return cpu ? exact_cpu : exact_gpu;
    }
}

int lj_case_output(lj_case_ctx *x, const char *name, const void *dev, int64_t n, lj_case_kind kind,
                   const double *ref, lj_case_tol which) {
    float *got = lj_case_download(x, dev, n, kind);
    if (x->pass == LJ_CASE_REFERENCE)
        return ref ? lj_harness_check_d(x->h, name, x->shape, got, ref, n, tol_of(x, which)) : 1;
    if (x->pass == LJ_CASE_RECORD) {
        LJ_ASSERT(x->nrec < LJ_CASE_MAX_OUTPUTS, "case %s: more than %d outputs", x->c->op, LJ_CASE_MAX_OUTPUTS);
        x->rec[x->nrec] = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        memcpy(x->rec[x->nrec], got, (size_t)n * sizeof(float));
        x->rec_n[x->nrec++] = n;
        return 1;
    }
    LJ_ASSERT(x->cursor < x->nrec && x->rec_n[x->cursor] == n,
              "case %s: output %s is not the one the CPU pass recorded in its place", x->c->op, name);
    float *want = x->rec[x->cursor++];
    if (dtype_of(x->ops, kind) == LJ_DTYPE_BF16) /* what the GPU can hold of the CPU's value */
        for (int64_t i = 0; i < n; i++) want[i] = lj_bf16_to_f32(lj_f32_to_bf16(want[i]));
    return lj_harness_check_f(x->h, name, x->shape, got, want, n, tol_of(x, which));
}

int lj_case_twin(lj_case_ctx *x, const char *name, const void *a, const void *b, int64_t n, lj_case_kind kind,
                 lj_case_tol gpu) {
    if (x->pass == LJ_CASE_RECORD) return 1;
    float *ha = lj_case_download(x, a, n, kind), *hb = lj_case_download(x, b, n, kind);
    if (x->pass == LJ_CASE_REFERENCE || gpu == LJ_CASE_TOL_BITS)
        return lj_harness_check_bits(x->h, name, x->shape, ha, hb, (size_t)n * 4);
    return lj_harness_check_f(x->h, name, x->shape, ha, hb, n, tol_of(x, gpu));
}

int lj_case_true(lj_case_ctx *x, const char *name, int cond, const char *fmt, ...) {
    if (x->pass == LJ_CASE_RECORD) return 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lj_harness_check_true(x->h, name, x->shape, cond, "%s", msg);
}

/* One pass of the body on `ops`; the recorded outputs stay in *x. */
static void run_pass(lj_case_ctx *x, lj_case_body body, const lj_ops *ops, lj_case_pass pass) {
    x->ops = ops;
    x->pass = pass;
    x->ndev = x->nhost = 0;
    x->cursor = 0;
    snprintf(x->shape, sizeof x->shape, "-");
    body(x);
    ops->synchronize();
    for (int i = 0; i < x->ndev; i++) ops->free(x->dev[i]);
    for (int i = 0; i < x->nhost; i++) free(x->host[i]);
}

void lj_case_each(lj_harness *h, const lj_op_case *c, lj_harness_mode mode, lj_case_body body) {
    lj_case_ctx *x = lj_calloc(1, sizeof *x);
    x->h = h, x->c = c, x->mode = mode;
    if (strcmp(c->backend, "cpu") == 0) {
        run_pass(x, body, lj_ops_cpu(), LJ_CASE_REFERENCE);
    } else {
        lj_ops_config cfg = LJ_OPS_CONFIG_DEFAULT;
        cfg.grad_dtype = c->dtype;
        const lj_ops *gpu = lj_ops_cuda_open(&cfg);
        LJ_ASSERT(gpu && gpu->grad_dtype == c->dtype, "case %s: no CUDA table of gradient dtype %s", c->op,
                  lj_dtype_name(c->dtype));
        const lj_rng seed = h->rng; /* both passes draw the same inputs */
        run_pass(x, body, lj_ops_cpu(), LJ_CASE_RECORD);
        h->rng = seed;
        run_pass(x, body, gpu, LJ_CASE_COMPARE);
        LJ_ASSERT(x->cursor == x->nrec, "case %s: the CUDA pass compared %d of the %d outputs the CPU recorded",
                  c->op, x->cursor, x->nrec);
    }
    for (int i = 0; i < x->nrec; i++) free(x->rec[i]);
    free(x);
}

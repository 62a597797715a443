/* case.c: the runner of the cases written once (case.h): the passes over the backends, the
 * buffers of a pass, and the comparison of each output with the case's reference or with the
 * CPU's recorded output. */
#include "tests/ops/case.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "data/docmask.h"

static lj_dtype dtype_of(const lj_ops *ops, lj_case_kind kind) {
    switch (kind) {
    case LJ_CASE_ACT: return ops->act_dtype;
    case LJ_CASE_PARAM: return ops->param_dtype;
    case LJ_CASE_GRAD: return ops->grad_dtype;
    default: return LJ_DTYPE_F32; /* f32, and i32 words */
    }
}

static size_t bytes_of(const lj_ops *ops, int64_t n, lj_case_kind kind) {
    return (size_t)(n > 0 ? n : 1) * (kind == LJ_CASE_U8 ? 1 : lj_dtype_size(dtype_of(ops, kind)));
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
    if (kind != LJ_CASE_U8) return keep_dev(x, lj_harness_upload(x->ops, host, n, dtype_of(x->ops, kind)));
    void *d = keep_dev(x, lj_harness_dalloc(x->ops, bytes_of(x->ops, n, kind)));
    x->ops->upload(d, host, (size_t)n);
    x->ops->synchronize();
    return d;
}

void *lj_case_alloc(lj_case_ctx *x, int64_t n, lj_case_kind kind) {
    const size_t bytes = bytes_of(x->ops, n, kind);
    void *d = keep_dev(x, lj_harness_dalloc(x->ops, bytes));
    lj_harness_dpoison(x->ops, d, bytes);
    return d;
}

void *lj_case_scratch(lj_case_ctx *x, size_t bytes) { return keep_dev(x, lj_harness_dalloc(x->ops, bytes ? bytes : 1)); }

size_t lj_case_bytes(const lj_case_ctx *x, int64_t n, lj_case_kind kind) {
    return n > 0 ? bytes_of(x->ops, n, kind) : 0;
}

void lj_case_poison(lj_case_ctx *x, void *dev, int64_t n, lj_case_kind kind) {
    lj_harness_dpoison(x->ops, dev, bytes_of(x->ops, n, kind));
}

float *lj_case_download(lj_case_ctx *x, const void *dev, int64_t n, lj_case_kind kind) {
    if (kind != LJ_CASE_U8) return keep_host(x, lj_harness_download_f32(x->ops, dev, n, dtype_of(x->ops, kind)));
    uint8_t *b = lj_malloc((size_t)(n > 0 ? n : 1));
    float *f = keep_host(x, lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(float)));
    x->ops->download(b, dev, (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = b[i];
    free(b);
    return f;
}

const lj_ops *lj_case_table(lj_case_ctx *x, const lj_ops_config *cfg) {
    lj_ops_config k = *cfg;
    k.grad_dtype = x->c->dtype;
    const lj_ops *t = x->pass == LJ_CASE_COMPARE ? lj_ops_cuda_open(&k) : lj_ops_cpu_open(&k);
    LJ_ASSERT(t, "case %s: no table of this configuration: %s", x->c->op, lj_error_message());
    return t;
}

/* The tolerance of `which` against the reference (cpu) or against the CPU's values. */
static lj_harness_tol tol_for(const lj_op_case *c, lj_case_tol which, int cpu) {
    const lj_harness_tol exact_cpu = {0, -1, 0}, exact_gpu = {1e-6, 1e-6, 1e-5}, f32_gpu = {1e-5, 1e-5, 1e-5};
    switch (which) {
    case LJ_CASE_TOL_OUT: return c->tol;
    case LJ_CASE_TOL_DGRAD: return cpu ? c->tol_grad : c->tol;
    case LJ_CASE_TOL_WGRAD: return c->tol_grad;
    case LJ_CASE_TOL_F32: return cpu ? c->tol : f32_gpu;
    default: return cpu ? exact_cpu : exact_gpu;
    }
}

/* got[n] (host) on this pass: against ref (REFERENCE, within cpu), recorded (RECORD), against the
 * recorded CPU values rounded to kind's dtype (COMPARE, within gpu; bit for bit when bits). */
static int values(lj_case_ctx *x, const char *name, const float *got, int64_t n, lj_case_kind kind, const double *ref,
                  lj_harness_tol cpu, lj_harness_tol gpu, int bits) {
    if (x->pass == LJ_CASE_REFERENCE) return ref ? lj_harness_check_d(x->h, name, x->shape, got, ref, n, cpu) : 1;
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
    if (dtype_of(x->ops, kind) == LJ_DTYPE_BF16 && kind != LJ_CASE_U8) /* what the GPU can hold of the CPU's value */
        for (int64_t i = 0; i < n; i++) want[i] = lj_bf16_to_f32(lj_f32_to_bf16(want[i]));
    if (bits) return lj_harness_check_bits(x->h, name, x->shape, got, want, (size_t)n * sizeof(float));
    return lj_harness_check_f(x->h, name, x->shape, got, want, n, gpu);
}

int lj_case_values(lj_case_ctx *x, const char *name, const float *got, int64_t n, lj_case_kind kind, const double *ref,
                   lj_case_tol which) {
    return values(x, name, got, n, kind, ref, tol_for(x->c, which, 1), tol_for(x->c, which, 0),
                  which == LJ_CASE_TOL_BITS);
}

int lj_case_values_at(lj_case_ctx *x, const char *name, const float *got, int64_t n, lj_case_kind kind,
                      const double *ref, lj_harness_tol cpu, lj_harness_tol gpu) {
    return values(x, name, got, n, kind, ref, cpu, gpu, 0);
}

int lj_case_output(lj_case_ctx *x, const char *name, const void *dev, int64_t n, lj_case_kind kind,
                   const double *ref, lj_case_tol which) {
    return lj_case_values(x, name, lj_case_download(x, dev, n, kind), n, kind, ref, which);
}

int lj_case_output_at(lj_case_ctx *x, const char *name, const void *dev, int64_t n, lj_case_kind kind,
                      const double *ref, lj_harness_tol cpu, lj_harness_tol gpu) {
    return values(x, name, lj_case_download(x, dev, n, kind), n, kind, ref, cpu, gpu, 0);
}

int lj_case_twin(lj_case_ctx *x, const char *name, const void *a, const void *b, int64_t n, lj_case_kind kind,
                 lj_case_tol gpu) {
    if (x->pass == LJ_CASE_RECORD) return 1;
    float *ha = lj_case_download(x, a, n, kind), *hb = lj_case_download(x, b, n, kind);
    if (x->pass == LJ_CASE_REFERENCE || gpu == LJ_CASE_TOL_BITS)
        return lj_harness_check_bits(x->h, name, x->shape, ha, hb, (size_t)n * 4);
    return lj_harness_check_f(x->h, name, x->shape, ha, hb, n, tol_for(x->c, gpu, 0));
}

int lj_case_twin_at(lj_case_ctx *x, const char *name, const void *a, const void *b, int64_t n, lj_case_kind kind,
                    lj_harness_tol cpu, lj_harness_tol gpu) {
    if (x->pass == LJ_CASE_RECORD) return 1;
    float *ha = lj_case_download(x, a, n, kind), *hb = lj_case_download(x, b, n, kind);
    return lj_harness_check_f(x->h, name, x->shape, ha, hb, n, x->pass == LJ_CASE_REFERENCE ? cpu : gpu);
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

void lj_case_docmask_tokens(lj_rng *rng, int B, int T, int mean_len, int32_t *tokens) {
    for (int i = 0; i < B * T; i++) tokens[i] = 1 + (int32_t)lj_rng_below(rng, 50);
    for (int i = 0; i < B * T; i++)
        if (lj_rng_below(rng, (uint64_t)mean_len) == 0) tokens[i] = 0; /* EOD */
    if (T > 2) tokens[1] = 0;         /* a document of two tokens at the start of sequence 0 */
    if (B > 1) tokens[2 * T - 1] = 0; /* an EOD as the last input of sequence 1 */
}

void lj_case_docmask_build(int B, int T, const int32_t *tokens, int32_t *pos, int32_t *doc_start) {
    const lj_doc_mask dm = {1, 1, 1, 0};
    for (int b = 0; b < B; b++)
        lj_doc_mask_sequence(&dm, tokens + (size_t)b * T, T, pos ? pos + (size_t)b * T : NULL,
                             doc_start ? doc_start + (size_t)b * T : NULL, NULL);
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

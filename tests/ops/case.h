/* case.h: an op case written once and run on every backend (the model: ggml's
 * tests/test-backend-ops.cpp, where a test_case builds its graph once and
 * ggml_backend_compare_graph_backend runs it on two backends). A case gives its inputs, its
 * double-precision reference and its calls through a `const lj_ops *`; the harness runs it
 *
 *   on the CPU (rows of backend "cpu"): the outputs against the case's reference (check) or
 *     against central finite differences of the reference (grad), the exact properties
 *     (twins, modes, aliasing) bit for bit;
 *   on CUDA (rows of backend "cuda"): twice from the same seed, first on the CPU backend,
 *     recording every output, then on the CUDA table of the row's gradient dtype, each output
 *     against the CPU's (rounded to the output's dtype on the GPU), the properties within the
 *     case's figure (the GPU's twins may sum in another order).
 *
 * A case body calls, in order: lj_case_rand* for its host inputs (bf16-representable, so that
 * both backends hold them exactly), lj_case_upload / lj_case_alloc for the backend's buffers,
 * the ops through x->ops, then lj_case_output for each output it compares (the same outputs in
 * the same order on every pass) and lj_case_twin / lj_case_true for its properties. The
 * reference is needed only where lj_case_reference(x) says so. Buffers and downloads are freed
 * by the harness after the case. */
#ifndef LJ_TESTS_OPS_CASE_H
#define LJ_TESTS_OPS_CASE_H

#include "tests/ops/op_cases.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LJ_CASE_REFERENCE, /* the CPU against the case's reference */
    LJ_CASE_RECORD,    /* the CPU, recording the outputs the CUDA pass is compared with */
    LJ_CASE_COMPARE,   /* CUDA against the recorded CPU outputs */
} lj_case_pass;

/* A tensor's role, which gives its dtype on a backend (ops.h conventions); U8: bytes (FP8 codes,
 * uploaded from uint8_t host values and downloaded as the floats 0..255). */
typedef enum { LJ_CASE_ACT, LJ_CASE_PARAM, LJ_CASE_GRAD, LJ_CASE_F32, LJ_CASE_I32, LJ_CASE_U8 } lj_case_kind;

/* Which of the row's tolerances an output is held to: OUT the row's tol; DGRAD an activation
 * gradient (tol_grad on the CPU, against finite differences; tol on CUDA); WGRAD a weight
 * gradient (tol_grad on both); F32 an fp32 statistic (tol on the CPU; 1e-5 relative on CUDA);
 * EXACT equal values (on CUDA: within 1e-6 of the CPU's, rounded to the GPU's dtype); BITS the
 * same bytes (an output: equal to the reference on the CPU, the same bits as the CPU's, rounded to
 * the GPU's dtype, on CUDA; a twin: the same bytes on every backend). A check whose figure is
 * its own is given as two lj_harness_tol (the _at functions below). */
typedef enum {
    LJ_CASE_TOL_OUT,
    LJ_CASE_TOL_DGRAD,
    LJ_CASE_TOL_WGRAD,
    LJ_CASE_TOL_F32,
    LJ_CASE_TOL_EXACT,
    LJ_CASE_TOL_BITS,
} lj_case_tol;

#define LJ_CASE_MAX_BUFFERS 256
#define LJ_CASE_MAX_OUTPUTS 128

typedef struct lj_case_ctx lj_case_ctx;
struct lj_case_ctx {
    lj_harness *h;
    const lj_op_case *c;
    lj_harness_mode mode;
    lj_case_pass pass;
    const lj_ops *ops; /* the backend of this pass */
    char shape[96];    /* set by lj_case_shape */
    /* the harness's bookkeeping */
    void *dev[LJ_CASE_MAX_BUFFERS];
    void *host[LJ_CASE_MAX_BUFFERS];
    int ndev, nhost;
    float *rec[LJ_CASE_MAX_OUTPUTS];
    int64_t rec_n[LJ_CASE_MAX_OUTPUTS];
    int nrec, cursor;
};

/* A case body. */
typedef void (*lj_case_body)(lj_case_ctx *x);

/* Runs `body` for row c on the row's backend as above: a case's lj_op_case_fn (the one its rows
 * name, whatever their backend) is this call. */
void lj_case_each(lj_harness *h, const lj_op_case *c, lj_harness_mode mode, lj_case_body body);

/* The printed shape of the case (printf format). */
void lj_case_shape(lj_case_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether this pass checks against the case's reference (compute it only then). */
static inline int lj_case_reference(const lj_case_ctx *x) { return x->pass == LJ_CASE_REFERENCE; }
/* Whether this pass checks twins and assertions (all but the CPU's recording pass of a CUDA row):
 * work whose results go only to lj_case_twin / lj_case_true may be skipped where it is 0. */
static inline int lj_case_checks(const lj_case_ctx *x) { return x->pass != LJ_CASE_RECORD; }
/* The table of this pass's backend opened with `cfg` (the attention kernels, deterministic
 * mode; the gradient dtype is the row's): a case that compares kernel families picks them so.
 * Buffers of x->ops serve it (the same backend). The CPU has one attention (ops.h). */
const lj_ops *lj_case_table(lj_case_ctx *x, const lj_ops_config *cfg);

/* ---- host values (freed after the case) ---- */
/* n normal values of standard deviation `scale`, rounded to bf16; offset added before the
 * rounding (norm weights around 1). */
float *lj_case_rand(lj_case_ctx *x, int64_t n, float scale);
float *lj_case_rand_around(lj_case_ctx *x, int64_t n, float offset, float scale);
/* A host buffer of n floats (zeroed), a double one, and a double copy of x[n]. */
float *lj_case_zeros(lj_case_ctx *x, int64_t n);
double *lj_case_dzeros(lj_case_ctx *x, int64_t n);
double *lj_case_to_double(lj_case_ctx *x, const float *v, int64_t n);

/* ---- the backend's buffers (freed after the case) ---- */
/* host[n] (f32 values; i32 words for LJ_CASE_I32) into a new buffer of kind's dtype on x->ops. */
void *lj_case_upload(lj_case_ctx *x, const void *host, int64_t n, lj_case_kind kind);
/* A new buffer of n elements of kind's dtype, filled with 0xff bytes (NaN in bf16 and f32), so
 * that an element an op leaves unwritten fails. */
void *lj_case_alloc(lj_case_ctx *x, int64_t n, lj_case_kind kind);
/* `bytes` of scratch (a workspace; at least 1 byte). */
void *lj_case_scratch(lj_case_ctx *x, size_t bytes);
/* The bytes of n elements of kind on this pass's backend (a copy's size). */
size_t lj_case_bytes(const lj_case_ctx *x, int64_t n, lj_case_kind kind);
/* Refills a buffer with NaN bytes (before an op that must overwrite it). */
void lj_case_poison(lj_case_ctx *x, void *dev, int64_t n, lj_case_kind kind);
/* The n values of dev as host f32. */
float *lj_case_download(lj_case_ctx *x, const void *dev, int64_t n, lj_case_kind kind);

/* ---- checks ---- */
/* Output `name` (dev[n] of kind): REFERENCE: against ref[n] (NULL: not checked on this pass,
 * e.g. a backward in check mode, which grad mode checks); RECORD: recorded; COMPARE: against the
 * recorded CPU values. Returns 1 when it passed (or was not checked). */
int lj_case_output(lj_case_ctx *x, const char *name, const void *dev, int64_t n, lj_case_kind kind,
                   const double *ref, lj_case_tol tol);
/* As lj_case_output, on host values got[n] the case downloaded (and rearranged: a strided view,
 * the codes of some elements); `kind` is the tensor they were held in (on CUDA the CPU's values
 * are rounded to its dtype). */
int lj_case_values(lj_case_ctx *x, const char *name, const float *got, int64_t n, lj_case_kind kind, const double *ref,
                   lj_case_tol tol);
/* lj_case_output and lj_case_values with a figure of their own: `cpu` against the reference,
 * `gpu` against the CPU's values (lj_harness_tol_gpu(rel_l2, max_rel) in the cases). */
int lj_case_output_at(lj_case_ctx *x, const char *name, const void *dev, int64_t n, lj_case_kind kind,
                      const double *ref, lj_harness_tol cpu, lj_harness_tol gpu);
int lj_case_values_at(lj_case_ctx *x, const char *name, const float *got, int64_t n, lj_case_kind kind,
                      const double *ref, lj_harness_tol cpu, lj_harness_tol gpu);
/* Two results of the same backend that must agree (a fused op and its unfused twin, an op in
 * place and not, a repeat): bit for bit on the CPU; on CUDA within `gpu` (LJ_CASE_TOL_BITS: bit
 * for bit; LJ_CASE_TOL_EXACT: 1e-6; the row's tol where the GPU's twins round differently). Not
 * checked on the RECORD pass. */
int lj_case_twin(lj_case_ctx *x, const char *name, const void *a, const void *b, int64_t n, lj_case_kind kind,
                 lj_case_tol gpu);
/* A twin within `cpu` on the CPU and `gpu` on CUDA (twins that sum in another order on both). */
int lj_case_twin_at(lj_case_ctx *x, const char *name, const void *a, const void *b, int64_t n, lj_case_kind kind,
                    lj_harness_tol cpu, lj_harness_tol gpu);
/* An assertion (not on the RECORD pass). */
int lj_case_true(lj_case_ctx *x, const char *name, int cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- inputs shared by several cases ---- */
/* tokens [B, T] with EOD id 0 about every mean_len tokens (and at fixed places: a two-token
 * document, an EOD as a last input), from rng. */
void lj_case_docmask_tokens(lj_rng *rng, int B, int T, int mean_len, int32_t *tokens);
/* Their positions and document starts by Megatron's rule (data/docmask.h, all flags on; either
 * output may be NULL). */
void lj_case_docmask_build(int B, int T, const int32_t *tokens, int32_t *pos, int32_t *doc_start);

#ifdef __cplusplus
}
#endif

#endif

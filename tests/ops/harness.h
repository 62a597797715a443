/* harness.h: the op harness: one table of op cases (op_cases.c) run in three modes over the
 * op table of a backend (ops/ops.h), and the one set of check helpers every op check and the
 * kernel lab (bench/kernels/) use: max_abs, rel_l2, the tolerance rule, timing, printing.
 *
 * Modes:
 *   check  the CPU backend's op against a double-precision reference written in the case;
 *          the CUDA backend's op against the CPU backend's op on the same inputs.
 *   grad   (CPU) every backward against central finite differences of L = sum(out * R),
 *          R random, taken on the case's double-precision forward.
 *   perf   (CUDA) the op at the benchmark shapes: median time, TFLOP/s or GB/s against the
 *          card's measured ceilings (LJ_HARNESS_*_CEILING below).
 *
 * Arrays are host fp32 unless said otherwise; n counts elements. A "shape" is the printed
 * description of a case's dimensions ("N=37 C=200").
 */
#ifndef LJ_TESTS_OPS_HARNESS_H
#define LJ_TESTS_OPS_HARNESS_H

#include <stdint.h>
#include <stdio.h>

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Ceilings of one NVIDIA H200 (SXM, 700 W), measured on the card (bench/results/2026-11-29-h200-ops.md,
 * 2026-11-29-h200-attention-cudnn.md): bf16 GEMM through cuBLAS 650-790 TFLOP/s; causal attention
 * forward+backward counted as 3.5 * 2*B*H*S^2*D, cuDNN SDPA 385 TFLOP/s at head_dim 64 and
 * 450-460 at 128; HBM3e 4.8 TB/s peak (a device-to-device copy reaches about 4.3). */
#define LJ_HARNESS_GEMM_CEILING_TFLOPS 790.0
/* FP8 GEMM (per-tensor scaled, bf16 output) at Llama-3-8B shapes: 1,198-1,401 TFLOP/s measured
 * with torch._scaled_mm (docs/reference.md, "Ceilings of one H200"). */
#define LJ_HARNESS_FP8_GEMM_CEILING_TFLOPS 1401.0
#define LJ_HARNESS_ATTN_HD64_CEILING_TFLOPS 385.0
#define LJ_HARNESS_ATTN_HD128_CEILING_TFLOPS 455.0
#define LJ_HARNESS_HBM_CEILING_GBS 4800.0

typedef enum {
    LJ_HARNESS_CHECK = 1,
    LJ_HARNESS_GRAD = 2,
    LJ_HARNESS_PERF = 4,
} lj_harness_mode;

/* The tolerance rule. A check passes when every value of both sides is finite and
 *   - if zero > 0 and max|ref| < zero (a reference that is zero up to rounding has no
 *     relative scale): max|got - ref| <= zero;
 *   - else rel_l2 = ||got - ref|| / ||ref|| <= rel_l2 (||got - ref|| when ref is all zero) and,
 *     when max_rel >= 0, max_rel = max|got - ref| / max|ref| <= max_rel.
 * rel_l2 = max_rel = 0 asks for equal values. */
typedef struct {
    double rel_l2;
    double max_rel; /* < 0: not checked */
    double zero;    /* <= 0: no zero-reference rule */
} lj_harness_tol;

/* Relative L2 error only (the CPU checks against double references). */
static inline lj_harness_tol lj_harness_tol_l2(double rel_l2) {
    lj_harness_tol t = {rel_l2, -1.0, 0.0};
    return t;
}
/* Relative L2 and max relative error, with the zero-reference rule at 1e-5 (the GPU checks
 * against the CPU backend). */
static inline lj_harness_tol lj_harness_tol_gpu(double rel_l2, double max_rel) {
    lj_harness_tol t = {rel_l2, max_rel, 1e-5};
    return t;
}

/* Per-op tallies for the summary. */
typedef struct {
    char name[72];
    int checks, fails;
    double worst; /* largest rel_l2 seen (INFINITY after a non-finite value or a failed assertion) */
} lj_harness_op;

#define LJ_HARNESS_MAX_OPS 512

/* One run of the harness (or of a kernel-lab program). */
typedef struct {
    const char *program;
    char tag[24];   /* appended to every recorded op name (" [grad bf16]"), "" by default */
    lj_rng rng;     /* the case's random inputs; reseeded before each case */
    int quick;      /* small shapes only (compute-sanitizer runs) */
    int verbose;    /* print PASS lines too (FAIL lines are always printed) */
    int checks, fails;
    int nops;
    lj_harness_op ops[LJ_HARNESS_MAX_OPS];
} lj_harness;

void lj_harness_init(lj_harness *h, const char *program);

/* ---- measures ---- */

/* max_i |got[i] - ref[i]|. Exactly one of ref_f (fp32) and ref_d (double) is non-NULL. */
double lj_harness_max_abs(const float *got, const float *ref_f, const double *ref_d, int64_t n);
/* ||got - ref|| / ||ref|| (||got - ref|| when ref is all zero); one of ref_f, ref_d as above. */
double lj_harness_rel_l2(const float *got, const float *ref_f, const double *ref_d, int64_t n);

/* ---- checks: each records one check under `op`, prints its line, returns 1 if it passed ---- */

/* got[n] against a double reference ref[n] under the tolerance rule. */
int lj_harness_check_d(lj_harness *h, const char *op, const char *shape, const float *got, const double *ref,
                       int64_t n, lj_harness_tol tol);
/* got[n] against an fp32 reference ref[n] under the tolerance rule. */
int lj_harness_check_f(lj_harness *h, const char *op, const char *shape, const float *got, const float *ref,
                       int64_t n, lj_harness_tol tol);
/* The same bytes (a bit-exact twin, a repeat giving the same bits). */
int lj_harness_check_bits(lj_harness *h, const char *op, const char *shape, const void *got, const void *ref,
                          size_t bytes);
/* A plain assertion: passes when cond is nonzero; the printf-style message says what was
 * asserted (and, on failure, the values). */
int lj_harness_check_true(lj_harness *h, const char *op, const char *shape, int cond, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Prints the per-op table and the verdict line "<program>: PASS|FAIL (n failing checks)".
 * Returns 0 when every check passed, 1 otherwise (the exit status). */
int lj_harness_summary(lj_harness *h);

/* ---- perf ---- */

/* Median milliseconds of `iters` runs of fn(ctx) after `warmup` runs, on `ops`: CUDA events
 * on the backend's stream for the CUDA backend, the wall clock otherwise. */
double lj_harness_time_ms(const lj_ops *ops, void (*fn)(void *), void *ctx, int warmup, int iters);
/* Prints "  <what> <ms> ms <rate> <unit> (<pct>% of <ceiling>)" and a greppable
 * "RESULT <group> <what> <rate> <unit> <ms> ms" line. unit: "TFLOP/s" or "GB/s". */
void lj_harness_report(const char *group, const char *what, double ms, double rate, const char *unit,
                       double ceiling);

/* ---- host buffers ---- */

/* n normal values of standard deviation `scale` (free() them). */
float *lj_harness_randf(lj_harness *h, int64_t n, float scale);
/* The same, rounded to bf16 (values both backends hold exactly). */
float *lj_harness_randf_bf16(lj_harness *h, int64_t n, float scale);
/* offset + N(0, scale^2), rounded to bf16 after the offset (norm weights around 1). */
float *lj_harness_randf_bf16_around(lj_harness *h, int64_t n, float offset, float scale);
/* A double copy of x[n]. */
double *lj_harness_to_double(const float *x, int64_t n);
/* dst[k] = src[(k / width) * stride + k % width] for k < n: a strided view made contiguous. */
float *lj_harness_gather(const float *src, int64_t n, int64_t stride, int64_t width);

/* ---- device buffers (any backend's table; the CUDA cases' uploads and downloads) ---- */

/* `bytes` from the backend's tracked alloc; exits (status 2) when it fails. */
void *lj_harness_dalloc(const lj_ops *ops, size_t bytes);
/* Fills d[bytes] with 0xff bytes (NaN in bf16 and f32): an element a kernel leaves unwritten fails. */
void lj_harness_dpoison(const lj_ops *ops, void *d, size_t bytes);
/* x[n] into new device memory as `dtype`: BF16 rounds host f32 values, F32 (or 4-byte integers
 * given as F32) copies the words; waits for the copy. */
void *lj_harness_upload(const lj_ops *ops, const void *x, int64_t n, lj_dtype dtype);
/* n device values of `dtype` (bf16 or f32) as a host fp32 array (free() it). */
float *lj_harness_download_f32(const lj_ops *ops, const void *d, int64_t n, lj_dtype dtype);

/* Central differences of loss(ctx) with respect to every element of p[n], step 1e-5. */
typedef double (*lj_harness_loss_fn)(void *ctx);
double *lj_harness_fd_grad(lj_harness_loss_fn loss, void *ctx, double *p, int64_t n);

#ifdef __cplusplus
}
#endif

#endif

/* cases_fp8.c: the FP8 ops (ops.h "FP8"; the CPU's emulation in ops/cpu/fp8.c, the CUDA kernels
 * and cuBLASLt in ops/cuda/fp8.cu, matmul.cu), written once for every backend (case.h). On the
 * CPU: the casts against their definition (lj_fp8_from_f32 of x * scale, base/fp8.h: scale,
 * saturation, transpose, zero padding; the blockwise recipe's 1x128 tiles and 128x128 blocks with
 * their factors), delayed scaling's history update against a step-by-step reference, the GEMMs
 * against a double product of the decoded codes and, within the formats' rounding, the
 * unquantized product. On CUDA the same assertions, and each code, factor and history entry
 * against the CPU's bit for bit (the hardware's cvt.rn.satfinite against the emulation: every
 * bf16 bit pattern at several scales), the GEMMs against the CPU's over the same codes (bf16
 * output rounding) and against the bf16 GEMM. The cast fused into the SwiGLU equals the SwiGLU
 * followed by the cast on each backend, bit for bit, and so does the cast fused into the RMSNorm
 * (plain and residual). The transpose of codes moves them as they are. The casts of f32 values
 * via bf16 (fp8_quantize_f32: --fp8-param-gather's cast of the master) equal the casts of the
 * bf16-rounded values bit for bit. Rows: "fp8_quantize", "fp8_quantize_f32", "fp8_transpose",
 * "fp8_scale_update", "fp8_swiglu", "fp8_rmsnorm", "fp8_matmul", "fp8_blockwise_cast",
 * "fp8_blockwise_matmul" in op_cases.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/case.h"

/* ---- the per-tensor casts --------------------------------------------------------------- */

/* Every bf16 bit pattern as a [256, 256] tensor, cast with delayed scaling at four scales in both
 * formats: the codes of the non-NaN inputs, of the NaN inputs (the canonical NaN code) and the
 * transpose against the definition (CPU) and the CPU's codes (CUDA); a NaN input makes the
 * recorded amax NaN. */
static void quantize_all_bf16(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int R = 256, C = 256, ld = lj_fp8_ld(C), ldt = lj_fp8_ld(R);
    LJ_ASSERT(x->c->d[0] == R && x->c->d[1] == C, "fp8_quantize case: the bf16 patterns are a [256, 256] tensor");
    lj_case_shape(x, "all bf16 [256, 256]");
    float *hx = lj_case_zeros(x, (int64_t)R * C);
    int n_nan = 0;
    for (int i = 0; i < R * C; i++) n_nan += isnan(hx[i] = lj_bf16_to_f32((uint16_t)i));
    const int n_val = R * C - n_nan;
    void *dx = lj_case_upload(x, hx, (int64_t)R * C, LJ_CASE_ACT);
    const float scales[4] = {1.0f, 3.0f, 1.0f / 7.0f, 1024.0f};
    float *a = lj_case_zeros(x, n_val), *b = lj_case_zeros(x, n_nan), *t = lj_case_zeros(x, n_val);
    double *ra = lj_case_dzeros(x, n_val), *rb = lj_case_dzeros(x, n_nan), *rt = lj_case_dzeros(x, n_val);
    for (int f = 0; f < 2; f++) {
        const lj_fp8_format fmt = (lj_fp8_format)f;
        char name[48];
        snprintf(name, sizeof name, "fp8_quantize %s", lj_fp8_format_name(fmt));
        for (int k = 0; k < 4; k++) {
            const float st0[3] = {scales[k], 1.0f / scales[k], 0.0f};
            float *st = lj_case_upload(x, st0, 3, LJ_CASE_F32);
            void *q = lj_case_alloc(x, (int64_t)R * ld, LJ_CASE_U8);
            void *qt = lj_case_alloc(x, (int64_t)C * ldt, LJ_CASE_U8);
            const lj_fp8_scaling sc = {st, st + 1, st + 2, 0};
            ops->fp8_quantize(q, qt, dx, R, C, fmt, &sc);
            const float *hq = lj_case_download(x, q, (int64_t)R * ld, LJ_CASE_U8);
            const float *hqt = lj_case_download(x, qt, (int64_t)C * ldt, LJ_CASE_U8);
            int ia = 0, ib = 0, it = 0;
            for (int i = 0; i < R * C; i++) {
                const int r = i / C, col = i % C;
                const double want = lj_fp8_from_f32(hx[i] * scales[k], fmt);
                if (isnan(hx[i])) {
                    rb[ib] = want, b[ib++] = hq[(size_t)r * ld + col];
                } else {
                    ra[ia] = want, a[ia++] = hq[(size_t)r * ld + col];
                }
            }
            for (int col = 0; col < C; col++)
                for (int r = 0; r < R; r++)
                    if (!isnan(hx[(size_t)r * C + col]))
                        rt[it] = lj_fp8_from_f32(hx[(size_t)r * C + col] * scales[k], fmt),
                        t[it++] = hqt[(size_t)col * ldt + r];
            const int ref = lj_case_reference(x);
            lj_case_values(x, name, a, n_val, LJ_CASE_U8, ref ? ra : NULL, LJ_CASE_TOL_BITS);
            lj_case_values(x, name, b, n_nan, LJ_CASE_U8, ref ? rb : NULL, LJ_CASE_TOL_BITS);
            lj_case_values(x, name, t, n_val, LJ_CASE_U8, ref ? rt : NULL, LJ_CASE_TOL_BITS);
            const float amax = lj_case_download(x, st + 2, 1, LJ_CASE_F32)[0];
            lj_case_true(x, name, isnan(amax), "scale %g, delayed: the recorded amax is NaN (the tensor holds NaN)",
                         (double)scales[k]);
        }
    }
}

/* d = {rows, cols, all bf16}: all bf16 1, quantize_all_bf16; 0, a random tensor with its amax
 * -40 at element 7: current scaling in both formats (amax, scale and scale_inv, codes,
 * transpose, zero padding), a delayed scale 16x too large saturating, a NaN making the amax NaN. */
static void fp8_quantize_body(lj_case_ctx *x) {
    if (x->c->d[2]) {
        quantize_all_bf16(x);
        return;
    }
    const lj_ops *ops = x->ops;
    const int R = x->c->d[0], C = x->c->d[1], ld = lj_fp8_ld(C), ldt = lj_fp8_ld(R);
    const int64_t n = (int64_t)R * C;
    lj_case_shape(x, "rows=%d cols=%d", R, C);
    const char *op = "fp8_quantize";
    float *hx = lj_case_rand(x, n, 3.0f);
    hx[7 % n] = -40.0f; /* the amax */
    void *dx = lj_case_upload(x, hx, n, LJ_CASE_ACT);
    for (int f = 0; f < 2; f++) {
        const lj_fp8_format fmt = (lj_fp8_format)f;
        float *st = lj_case_upload(x, lj_case_zeros(x, 3), 3, LJ_CASE_F32); /* scale, scale_inv, amax */
        void *q = lj_case_alloc(x, (int64_t)R * ld, LJ_CASE_U8), *qt = lj_case_alloc(x, (int64_t)C * ldt, LJ_CASE_U8);
        ops->fp8_amax(st + 2, dx, n);
        const lj_fp8_scaling sc = {st, st + 1, st + 2, 1};
        ops->fp8_quantize(q, qt, dx, R, C, fmt, &sc);
        char name[48];
        snprintf(name, sizeof name, "fp8_amax+current %s", lj_fp8_format_name(fmt));
        lj_case_output(x, name, st, 3, LJ_CASE_F32, NULL, LJ_CASE_TOL_BITS);
        lj_case_output(x, name, q, (int64_t)R * ld, LJ_CASE_U8, NULL, LJ_CASE_TOL_BITS);
        lj_case_output(x, name, qt, (int64_t)C * ldt, LJ_CASE_U8, NULL, LJ_CASE_TOL_BITS);
        if (fmt != LJ_FP8_E4M3) continue;
        const float *s = lj_case_download(x, st, 3, LJ_CASE_F32);
        const float *hq = lj_case_download(x, q, (int64_t)R * ld, LJ_CASE_U8);
        const float *hqt = lj_case_download(x, qt, (int64_t)C * ldt, LJ_CASE_U8);
        lj_case_true(x, op, s[2] == 40.0f, "fp8_amax = max|x| = 40 (got %g)", (double)s[2]);
        lj_case_true(x, op, s[0] == 448.0f / 40.0f && s[1] == 1.0f / s[0], "current scale = 448/amax (got %g)",
                     (double)s[0]);
        int codes = 1, trans = 1, pad = 1;
        for (int r = 0; r < R; r++)
            for (int k = 0; k < ld; k++) {
                if (k < C) codes &= hq[(size_t)r * ld + k] == lj_fp8_from_f32(hx[(size_t)r * C + k] * s[0], fmt);
                else pad &= hq[(size_t)r * ld + k] == 0;
            }
        for (int k = 0; k < C; k++)
            for (int r = 0; r < ldt; r++) {
                if (r < R) trans &= hqt[(size_t)k * ldt + r] == hq[(size_t)r * ld + k];
                else pad &= hqt[(size_t)k * ldt + r] == 0;
            }
        lj_case_true(x, op, codes, "q = fp8(x * scale)");
        lj_case_true(x, op, trans, "q_t = q transposed");
        lj_case_true(x, op, pad, "the padding of q and q_t is zero");
        lj_case_true(x, op, hq[7 % n / C * ld + 7 % n % C] == 0xFE, "the amax element casts to -448");
    }
    /* delayed: a scale 16x too large saturates; the recorded amax rises to max|x| only */
    const float s2 = 16.0f * 448.0f / 40.0f, st2[3] = {s2, 1.0f / s2, 10.0f};
    float *dst2 = lj_case_upload(x, st2, 3, LJ_CASE_F32);
    void *q2 = lj_case_alloc(x, (int64_t)R * ld, LJ_CASE_U8);
    const lj_fp8_scaling dl = {dst2, dst2 + 1, dst2 + 2, 0};
    ops->fp8_quantize(q2, NULL, dx, R, C, LJ_FP8_E4M3, &dl);
    lj_case_output(x, "fp8_quantize delayed e4m3", q2, (int64_t)R * ld, LJ_CASE_U8, NULL, LJ_CASE_TOL_BITS);
    const float *hq2 = lj_case_download(x, q2, (int64_t)R * ld, LJ_CASE_U8);
    const float *h2 = lj_case_download(x, dst2, 3, LJ_CASE_F32);
    int sat = 0, want_sat = 0;
    for (int64_t i = 0; i < n; i++) {
        const int beyond = fabsf(hx[i] * s2) > 448.0f + 16.0f; /* beyond max's rounding interval */
        want_sat += beyond;
        sat += beyond && ((uint8_t)hq2[(size_t)(i / C) * ld + i % C] & 0x7F) == 0x7E;
    }
    lj_case_true(x, op, sat == want_sat && want_sat > 0, "delayed, scale x16: %d values saturate to +-448 (want %d)",
                 sat, want_sat);
    lj_case_true(x, op, h2[2] == 40.0f && h2[0] == s2, "delayed: amax raised to 40 (%g), scale unchanged",
                 (double)h2[2]);
    float *hn = lj_case_zeros(x, n);
    memcpy(hn, hx, (size_t)n * sizeof(float));
    hn[3 % n] = NAN;
    float *amax = lj_case_alloc(x, 1, LJ_CASE_F32);
    ops->fp8_amax(amax, lj_case_upload(x, hn, n, LJ_CASE_ACT), n);
    lj_case_true(x, op, isnan(lj_case_download(x, amax, 1, LJ_CASE_F32)[0]), "a NaN makes the amax NaN");
}

void lj_case_fp8_quantize(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, fp8_quantize_body);
}

/* ---- the casts of f32 values as bf16 holds them (fp8_amax_f32, fp8_quantize_f32) ---------- */

/* d = {rows, cols}: f32 values most of which bf16 does not hold (a bf16 value moved by up to 3/8
 * of its last place either way, some exactly half-way between two bf16 values, the amax -40.3):
 * via bf16, the amax, codes, transpose, padding and scales (current scaling in both formats,
 * delayed with the recorded amax) equal fp8_amax and fp8_quantize of the bf16-rounded values held
 * in the act dtype, bit for bit (on CUDA: and the CPU's); via f32, the values as they are
 * (against lj_fp8_from_f32 of x * scale on the CPU, the CPU's bits on CUDA). */
static void fp8_quantize_f32_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int R = x->c->d[0], C = x->c->d[1], ld = lj_fp8_ld(C), ldt = lj_fp8_ld(R);
    const int64_t n = (int64_t)R * C;
    lj_case_shape(x, "rows=%d cols=%d", R, C);
    const char *op = "fp8_quantize_f32";
    float *hx = lj_case_rand(x, n, 3.0f), *hr = lj_case_zeros(x, n);
    int moved = 0;
    for (int64_t i = 0; i < n; i++) {
        /* the bf16 value's last place is 2^-7 of its binade: move it by k/16 of that, k in -6..6 (k
         * = +-8 would be half-way; i % 29 == 0 is: ties round to even) */
        const int k = (int)(i % 13) - 6;
        const float ulp = hx[i] == 0.0f ? 0.0f : ldexpf(1.0f, ilogbf(hx[i]) - 7);
        hx[i] += i % 29 == 0 ? 0.5f * ulp : (float)k / 16.0f * ulp;
    }
    hx[7 % n] = -40.3f; /* the amax (bf16: -40.25) */
    for (int64_t i = 0; i < n; i++) {
        hr[i] = lj_bf16_to_f32(lj_f32_to_bf16(hx[i]));
        moved += hr[i] != hx[i];
    }
    lj_case_true(x, op, moved > n / 2, "%d of %lld inputs are not bf16 values", moved, (long long)n);
    void *dm = lj_case_upload(x, hx, n, LJ_CASE_F32); /* the master */
    void *dr = lj_case_upload(x, hr, n, LJ_CASE_ACT); /* its bf16 copy, exact in the act dtype */
    for (int f = 0; f < 2; f++) {
        const lj_fp8_format fmt = (lj_fp8_format)f;
        char name[64];
        /* current scaling: the amax, then the cast with its scale */
        float *sa = lj_case_upload(x, lj_case_zeros(x, 3), 3, LJ_CASE_F32);
        float *sb = lj_case_upload(x, lj_case_zeros(x, 3), 3, LJ_CASE_F32);
        void *qa = lj_case_alloc(x, (int64_t)R * ld, LJ_CASE_U8), *qta = lj_case_alloc(x, (int64_t)C * ldt, LJ_CASE_U8);
        void *qb = lj_case_alloc(x, (int64_t)R * ld, LJ_CASE_U8), *qtb = lj_case_alloc(x, (int64_t)C * ldt, LJ_CASE_U8);
        ops->fp8_amax_f32(sa + 2, dm, n, LJ_DTYPE_BF16);
        const lj_fp8_scaling ca = {sa, sa + 1, sa + 2, 1}, cb = {sb, sb + 1, sb + 2, 1};
        ops->fp8_quantize_f32(qa, qta, dm, R, C, LJ_DTYPE_BF16, fmt, &ca);
        ops->fp8_amax(sb + 2, dr, n);
        ops->fp8_quantize(qb, qtb, dr, R, C, fmt, &cb);
        snprintf(name, sizeof name, "fp8_quantize_f32 via bf16 current %s", lj_fp8_format_name(fmt));
        lj_case_output(x, name, sa, 3, LJ_CASE_F32, NULL, LJ_CASE_TOL_BITS);
        lj_case_output(x, name, qa, (int64_t)R * ld, LJ_CASE_U8, NULL, LJ_CASE_TOL_BITS);
        lj_case_output(x, name, qta, (int64_t)C * ldt, LJ_CASE_U8, NULL, LJ_CASE_TOL_BITS);
        lj_case_twin(x, name, sa, sb, 3, LJ_CASE_F32, LJ_CASE_TOL_BITS);
        lj_case_twin(x, name, qa, qb, (int64_t)R * ld, LJ_CASE_U8, LJ_CASE_TOL_BITS);
        lj_case_twin(x, name, qta, qtb, (int64_t)C * ldt, LJ_CASE_U8, LJ_CASE_TOL_BITS);
        if (fmt == LJ_FP8_E4M3) {
            const float *h = lj_case_download(x, sa, 3, LJ_CASE_F32);
            lj_case_true(x, op, h[2] == 40.25f, "amax via bf16 = 40.25 (got %g)", (double)h[2]);
        }
        /* delayed: the scale as it is, the recorded amax raised from 10 */
        const float s = 448.0f / 64.0f, st[3] = {s, 1.0f / s, 10.0f};
        float *da = lj_case_upload(x, st, 3, LJ_CASE_F32), *db = lj_case_upload(x, st, 3, LJ_CASE_F32);
        const lj_fp8_scaling la = {da, da + 1, da + 2, 0}, lb = {db, db + 1, db + 2, 0};
        ops->fp8_quantize_f32(qa, qta, dm, R, C, LJ_DTYPE_BF16, fmt, &la);
        ops->fp8_quantize(qb, qtb, dr, R, C, fmt, &lb);
        snprintf(name, sizeof name, "fp8_quantize_f32 via bf16 delayed %s", lj_fp8_format_name(fmt));
        lj_case_output(x, name, qa, (int64_t)R * ld, LJ_CASE_U8, NULL, LJ_CASE_TOL_BITS);
        lj_case_twin(x, name, qa, qb, (int64_t)R * ld, LJ_CASE_U8, LJ_CASE_TOL_BITS);
        lj_case_twin(x, name, qta, qtb, (int64_t)C * ldt, LJ_CASE_U8, LJ_CASE_TOL_BITS);
        lj_case_twin(x, name, da, db, 3, LJ_CASE_F32, LJ_CASE_TOL_BITS);
    }
    /* via f32: the values as they are (current scaling, E4M3; q only) */
    float *sf = lj_case_upload(x, lj_case_zeros(x, 3), 3, LJ_CASE_F32);
    void *qf = lj_case_alloc(x, (int64_t)R * ld, LJ_CASE_U8);
    ops->fp8_amax_f32(sf + 2, dm, n, LJ_DTYPE_F32);
    const lj_fp8_scaling cf = {sf, sf + 1, sf + 2, 1};
    ops->fp8_quantize_f32(qf, NULL, dm, R, C, LJ_DTYPE_F32, LJ_FP8_E4M3, &cf);
    double *ref = NULL, *sref = NULL;
    if (lj_case_reference(x)) {
        const float scale = lj_fp8_current_scale(40.3f, 448.0f);
        sref = lj_case_dzeros(x, 3);
        sref[0] = scale, sref[1] = 1.0f / scale, sref[2] = 40.3f;
        ref = lj_case_dzeros(x, (int64_t)R * ld);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++)
                ref[(size_t)r * ld + c] = lj_fp8_from_f32(hx[(size_t)r * C + c] * scale, LJ_FP8_E4M3);
    }
    lj_case_output(x, "fp8_quantize_f32 via f32", sf, 3, LJ_CASE_F32, sref, LJ_CASE_TOL_BITS);
    lj_case_output(x, "fp8_quantize_f32 via f32", qf, (int64_t)R * ld, LJ_CASE_U8, ref, LJ_CASE_TOL_BITS);
}

void lj_case_fp8_quantize_f32(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, fp8_quantize_f32_body);
}

/* d = {rows, cols}: codes q[rows, ld(cols)] with junk in its padding columns, transposed: q_t
 * holds the codes as they are, its padding columns zero (on CUDA: the CPU's bytes). */
static void fp8_transpose_body(lj_case_ctx *x) {
    const int R = x->c->d[0], C = x->c->d[1], ld = lj_fp8_ld(C), ldt = lj_fp8_ld(R);
    lj_case_shape(x, "rows=%d cols=%d", R, C);
    uint8_t *hq = lj_malloc((size_t)R * ld);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < ld; c++) hq[(size_t)r * ld + c] = c < C ? (uint8_t)(r * 131 + c * 7 + 3) : 0xAB;
    void *q = lj_case_upload(x, hq, (int64_t)R * ld, LJ_CASE_U8);
    void *qt = lj_case_alloc(x, (int64_t)C * ldt, LJ_CASE_U8);
    x->ops->fp8_transpose(qt, q, R, C);
    double *ref = lj_case_dzeros(x, (int64_t)C * ldt);
    for (int c = 0; c < C; c++)
        for (int r = 0; r < R; r++) ref[(size_t)c * ldt + r] = hq[(size_t)r * ld + c];
    free(hq);
    lj_case_output(x, "fp8_transpose", qt, (int64_t)C * ldt, LJ_CASE_U8, lj_case_reference(x) ? ref : NULL,
                   LJ_CASE_TOL_BITS);
}

void lj_case_fp8_transpose(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, fp8_transpose_body);
}

/* ---- delayed scaling's history update ---------------------------------------------------- */

/* The history [H, S], scale [S] and scale_inv [S * LJ_FP8_SCALE_INV_STRIDE] after the update, to
 * the checks (on CUDA against the CPU's, bit for bit). */
static void scale_update_outputs(lj_case_ctx *x, void *hist, void *scale, void *sinv, int S, int H) {
    lj_case_output(x, "fp8_scale_update history", hist, (int64_t)S * H, LJ_CASE_F32, NULL, LJ_CASE_TOL_BITS);
    lj_case_output(x, "fp8_scale_update scale", scale, S, LJ_CASE_F32, NULL, LJ_CASE_TOL_BITS);
    lj_case_output(x, "fp8_scale_update scale_inv", sinv, (int64_t)S * LJ_FP8_SCALE_INV_STRIDE, LJ_CASE_F32, NULL,
                   LJ_CASE_TOL_BITS);
}

/* d = {tensors S, history H, margin}: for both amax choices (most recent, max), a history with
 * an all-zero tensor (its scale kept), an inf newest (most recent keeps the scale) and a tiny amax
 * (FLT_MAX) against a step-by-step reference; then a random history with a zero, an inf and a
 * NaN; the first half (third) of the tensors E4M3, the rest E5M2. */
static void fp8_scale_update_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int S = x->c->d[0], H = x->c->d[1], margin = x->c->d[2];
    lj_case_shape(x, "tensors=%d history=%d margin=%d", S, H, margin);
    const char *op = "fp8_scale_update";
    const float smax_a = 448.0f / ldexpf(1.0f, margin), smax_b = 57344.0f / ldexpf(1.0f, margin);
    const int64_t ni = (int64_t)S * LJ_FP8_SCALE_INV_STRIDE;
    for (int algo = 0; algo < 2; algo++) {
        float *hist = lj_case_zeros(x, (int64_t)S * H), *scale = lj_case_zeros(x, S);
        for (int i = 0; i < S * H; i++) hist[i] = (float)fabs(lj_rng_normal(&x->h->rng)) * 10.0f;
        for (int t = 0; t < S; t++) scale[t] = 2.0f;
        hist[0] = 0.0f; /* tensor 0: all zero: keeps its scale */
        for (int i = 1; i < H; i++) hist[(size_t)i * S] = 0.0f;
        hist[1] = INFINITY; /* tensor 1: inf newest: most_recent keeps the scale */
        hist[2] = 1e-38f;   /* tensor 2: tiny: FLT_MAX */
        for (int i = 1; i < H; i++) hist[(size_t)i * S + 2] = 0.0f;
        void *dh = lj_case_upload(x, hist, (int64_t)S * H, LJ_CASE_F32), *ds = lj_case_upload(x, scale, S, LJ_CASE_F32);
        void *di = lj_case_upload(x, lj_case_zeros(x, ni), ni, LJ_CASE_F32);
        const int first = S / 2;
        ops->fp8_scale_update(dh, ds, di, S, H, first, smax_a, smax_b, algo);
        const float *gh = lj_case_download(x, dh, (int64_t)S * H, LJ_CASE_F32);
        const float *gs = lj_case_download(x, ds, S, LJ_CASE_F32);
        const float *gi = lj_case_download(x, di, ni, LJ_CASE_F32);
        int ok_hist = 1, ok_scale = 1;
        for (int t = 0; t < S; t++) {
            float m = 0;
            for (int i = 0; i < H; i++) m = fmaxf(m, hist[(size_t)i * S + t]);
            const float amax = algo ? m : hist[t];
            const float smax = t < first ? smax_a : smax_b;
            float want = (isfinite(amax) && amax > 0) ? smax / amax : 2.0f;
            if (isinf(want)) want = FLT_MAX;
            ok_scale &= gs[t] == want && gi[LJ_FP8_SCALE_INV_STRIDE * t] == 1.0f / want;
            ok_hist &= gh[t] == 0.0f;
            for (int i = 1; i < H; i++) ok_hist &= gh[(size_t)i * S + t] == hist[(size_t)((i + 1) % H) * S + t];
        }
        lj_case_true(x, op, ok_hist, "%s: history rolled by one row, newest row zero", algo ? "max" : "most_recent");
        lj_case_true(x, op, ok_scale,
                     "%s: scale = (fp8_max / 2^margin) / amax, kept for amax 0 or inf, FLT_MAX on overflow",
                     algo ? "max" : "most_recent");
        lj_case_true(x, op, gs[0] == 2.0f && gs[2] == FLT_MAX, "zero amax keeps 2, tiny amax gives FLT_MAX");
        scale_update_outputs(x, dh, ds, di, S, H);

        /* a random history with a zero, an inf and a NaN, random scales */
        float *h2 = lj_case_rand(x, (int64_t)S * H, 100.0f), *s2 = lj_case_rand(x, S, 1.0f);
        for (int64_t i = 0; i < (int64_t)S * H; i++) h2[i] = fabsf(h2[i]);
        h2[0] = 0.0f, h2[1 % S] = INFINITY, h2[2 % S] = NAN;
        void *dh2 = lj_case_upload(x, h2, (int64_t)S * H, LJ_CASE_F32), *ds2 = lj_case_upload(x, s2, S, LJ_CASE_F32);
        void *di2 = lj_case_upload(x, lj_case_zeros(x, ni), ni, LJ_CASE_F32);
        ops->fp8_scale_update(dh2, ds2, di2, S, H, S / 3, smax_a, smax_b, algo);
        scale_update_outputs(x, dh2, ds2, di2, S, H);
    }
}

void lj_case_fp8_scale_update(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, fp8_scale_update_body);
}

/* ---- the cast fused into the SwiGLU ------------------------------------------------------- */

/* d = {N, I}: fp8_swiglu_quantize against swiglu_forward then fp8_quantize on the same backend,
 * bit for bit: q, q_t (padding included), the scale untouched and the recorded amax, h, in both
 * formats; without write_h the same codes, with h written (the CPU; CUDA's unfused fallback, I not
 * a multiple of 8) or left alone (CUDA's fused kernel); and current scaling's form
 * (fp8_swiglu_amax) against swiglu_forward then fp8_amax. */
static void fp8_swiglu_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int N = x->c->d[0], I = x->c->d[1], ld = lj_fp8_ld(I), ldt = lj_fp8_ld(N);
    const int64_t nh = (int64_t)N * I, nq = (int64_t)N * ld, nqt = (int64_t)I * ldt;
    const int skips_h = strcmp(ops->name, "cuda") == 0 && I % 8 == 0;
    if (!lj_case_checks(x)) return; /* twins only */
    lj_case_shape(x, "N=%d I=%d", N, I);
    float *gu = lj_case_rand(x, 2 * nh, 3.0f);
    void *dgu = lj_case_upload(x, gu, 2 * nh, LJ_CASE_ACT);
    void *untouched = lj_case_alloc(x, nh, LJ_CASE_ACT); /* the poison an unwritten h keeps */
    const float st0[3] = {3.0f, 1.0f / 3.0f, 0.0f};
    for (int f = 0; f < 2; f++) {
        const lj_fp8_format fmt = (lj_fp8_format)f;
        for (int write_h = 1; write_h >= 0; write_h--) {
            float *rs = lj_case_upload(x, st0, 3, LJ_CASE_F32), *fs = lj_case_upload(x, st0, 3, LJ_CASE_F32);
            void *h_ref = lj_case_alloc(x, nh, LJ_CASE_ACT), *q_ref = lj_case_alloc(x, nq, LJ_CASE_U8);
            void *qt_ref = lj_case_alloc(x, nqt, LJ_CASE_U8);
            void *h = lj_case_alloc(x, nh, LJ_CASE_ACT), *q = lj_case_alloc(x, nq, LJ_CASE_U8);
            void *qt = lj_case_alloc(x, nqt, LJ_CASE_U8);
            const lj_fp8_scaling rsc = {rs, rs + 1, rs + 2, 0}, fsc = {fs, fs + 1, fs + 2, 0};
            ops->swiglu_forward(h_ref, dgu, N, I);
            ops->fp8_quantize(q_ref, qt_ref, h_ref, N, I, fmt, &rsc);
            ops->fp8_swiglu_quantize(h, write_h, q, qt, dgu, N, I, fmt, &fsc);
            char name[64];
            snprintf(name, sizeof name, "fp8_swiglu_quantize %s%s", lj_fp8_format_name(fmt), write_h ? "" : " no h");
            lj_case_twin(x, name, q, q_ref, nq, LJ_CASE_U8, LJ_CASE_TOL_BITS);
            lj_case_twin(x, name, qt, qt_ref, nqt, LJ_CASE_U8, LJ_CASE_TOL_BITS);
            lj_case_twin(x, name, fs, rs, 3, LJ_CASE_F32, LJ_CASE_TOL_BITS); /* scale untouched, amax equal */
            lj_case_twin(x, name, h, write_h || !skips_h ? h_ref : untouched, nh, LJ_CASE_ACT, LJ_CASE_TOL_BITS);
        }
    }
    /* current scaling's form: h and its amax against swiglu_forward then fp8_amax */
    void *h_ref = lj_case_alloc(x, nh, LJ_CASE_ACT), *h = lj_case_alloc(x, nh, LJ_CASE_ACT);
    float *a_ref = lj_case_alloc(x, 1, LJ_CASE_F32), *a = lj_case_alloc(x, 1, LJ_CASE_F32);
    ops->swiglu_forward(h_ref, dgu, N, I);
    ops->fp8_amax(a_ref, h_ref, nh);
    ops->fp8_swiglu_amax(a, h, dgu, N, I);
    lj_case_twin(x, "fp8_swiglu_amax", a, a_ref, 1, LJ_CASE_F32, LJ_CASE_TOL_BITS);
    lj_case_twin(x, "fp8_swiglu_amax", h, h_ref, nh, LJ_CASE_ACT, LJ_CASE_TOL_BITS);
}

void lj_case_fp8_swiglu(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, fp8_swiglu_body);
}

/* ---- the cast fused into the RMSNorm ------------------------------------------------------ */

/* d = {N, C}: fp8_rmsnorm_quantize against the norm (rmsnorm_forward, or residual_rmsnorm_forward
 * with y) followed by (fp8_amax and) fp8_quantize of its output on the same backend, bit for bit:
 * res_out, out, rstd, q, q_t (padding included) and the scale state (delayed: the scale untouched,
 * the amax raised from 0.5; current: amax, scale and scale_inv written), in E4M3 plain and
 * residual, delayed and current, with and without q_t (CUDA: current scaling over a few rows
 * without q_t in one block, else in two passes; the unfused fallback for C not a multiple of 8 or
 * wider than the codes tile), with write_out 1 and 0 (out written: the CPU and CUDA's fallback;
 * left alone: CUDA's fused kernels), in E5M2 the residual form with q_t; then the residual form in
 * place (res_out = res_in). A scale
 * of 64 saturates some E4M3 codes. */
static void fp8_rmsnorm_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int N = x->c->d[0], C = x->c->d[1], ld = lj_fp8_ld(C), ldt = lj_fp8_ld(N);
    const int64_t n = (int64_t)N * C, nq = (int64_t)N * ld, nqt = (int64_t)C * ldt;
    const float eps = 1e-5f, st0[3] = {64.0f, 1.0f / 64.0f, 0.5f};
    const int skips_out = strcmp(ops->name, "cuda") == 0 && C % 8 == 0 && C <= 7168;
    if (!lj_case_checks(x)) return; /* twins only */
    lj_case_shape(x, "N=%d C=%d", N, C);
    float *hx = lj_case_rand(x, n, 1.0f);
    void *dx = lj_case_upload(x, hx, n, LJ_CASE_ACT), *dy = lj_case_upload(x, lj_case_rand(x, n, 1.0f), n, LJ_CASE_ACT);
    void *dw = lj_case_upload(x, lj_case_rand_around(x, C, 1.0f, 0.5f), C, LJ_CASE_PARAM);
    void *untouched = lj_case_alloc(x, n, LJ_CASE_ACT); /* the poison an unwritten out keeps */
    /* the unfused path's buffers [0] and the fused op's [1] */
    void *res[2], *out[2], *q[2], *qt[2];
    float *rstd[2], *st[2];
    for (int i = 0; i < 2; i++) {
        res[i] = lj_case_alloc(x, n, LJ_CASE_ACT), out[i] = lj_case_alloc(x, n, LJ_CASE_ACT);
        q[i] = lj_case_alloc(x, nq, LJ_CASE_U8), qt[i] = lj_case_alloc(x, nqt, LJ_CASE_U8);
        rstd[i] = lj_case_alloc(x, N, LJ_CASE_F32), st[i] = lj_case_alloc(x, 3, LJ_CASE_F32);
    }
    for (int k = 0; k < 18; k++) { /* every form in E4M3, then the residual form with q_t in E5M2 */
        const lj_fp8_format fmt = k < 16 ? LJ_FP8_E4M3 : LJ_FP8_E5M2;
        const int residual = k >= 16 || (k & 1), current = k >= 16 ? k & 1 : (k >> 1) & 1;
        const int with_qt = k >= 16 || !((k >> 2) & 1), write_out = k >= 16 || !((k >> 3) & 1);
        for (int i = 0; i < 2; i++) {
            lj_case_poison(x, res[i], n, LJ_CASE_ACT), lj_case_poison(x, out[i], n, LJ_CASE_ACT);
            lj_case_poison(x, q[i], nq, LJ_CASE_U8), lj_case_poison(x, qt[i], nqt, LJ_CASE_U8);
            lj_case_poison(x, rstd[i], N, LJ_CASE_F32);
            ops->upload(st[i], st0, sizeof st0);
        }
        const lj_fp8_scaling rsc = {st[0], st[0] + 1, st[0] + 2, current}, fsc = {st[1], st[1] + 1, st[1] + 2, current};
        if (residual) ops->residual_rmsnorm_forward(res[0], out[0], rstd[0], dx, dy, dw, N, C, eps);
        else ops->rmsnorm_forward(out[0], rstd[0], dx, dw, N, C, eps);
        if (current) ops->fp8_amax(st[0] + 2, out[0], n);
        ops->fp8_quantize(q[0], with_qt ? qt[0] : NULL, out[0], N, C, fmt, &rsc);
        ops->fp8_rmsnorm_quantize(res[1], out[1], write_out, rstd[1], q[1], with_qt ? qt[1] : NULL, dx,
                                  residual ? dy : NULL, dw, N, C, eps, fmt, &fsc);
        char name[96];
        snprintf(name, sizeof name, "fp8_rmsnorm_quantize %s%s %s%s%s", lj_fp8_format_name(fmt),
                 residual ? " residual" : "", current ? "current" : "delayed", with_qt ? " q_t" : "",
                 write_out ? "" : " no out");
        lj_case_twin(x, name, q[1], q[0], nq, LJ_CASE_U8, LJ_CASE_TOL_BITS);
        if (with_qt) lj_case_twin(x, name, qt[1], qt[0], nqt, LJ_CASE_U8, LJ_CASE_TOL_BITS);
        lj_case_twin(x, name, st[1], st[0], 3, LJ_CASE_F32, LJ_CASE_TOL_BITS); /* scale, scale_inv, amax */
        lj_case_twin(x, name, rstd[1], rstd[0], N, LJ_CASE_F32, LJ_CASE_TOL_BITS);
        lj_case_twin(x, name, out[1], write_out || !skips_out ? out[0] : untouched, n, LJ_CASE_ACT,
                     LJ_CASE_TOL_BITS);
        if (residual) lj_case_twin(x, name, res[1], res[0], n, LJ_CASE_ACT, LJ_CASE_TOL_BITS);
    }
    /* in place on the residual stream (res_out = res_in), delayed and current, against the unfused
     * path recomputed */
    for (int current = 0; current < 2; current++) {
        void *inplace = lj_case_upload(x, hx, n, LJ_CASE_ACT);
        const lj_fp8_scaling rsc = {st[0], st[0] + 1, st[0] + 2, current}, fsc = {st[1], st[1] + 1, st[1] + 2, current};
        ops->upload(st[0], st0, sizeof st0), ops->upload(st[1], st0, sizeof st0);
        ops->residual_rmsnorm_forward(res[0], out[0], rstd[0], dx, dy, dw, N, C, eps);
        if (current) ops->fp8_amax(st[0] + 2, out[0], n);
        ops->fp8_quantize(q[0], qt[0], out[0], N, C, LJ_FP8_E4M3, &rsc);
        ops->fp8_rmsnorm_quantize(inplace, out[1], 1, rstd[1], q[1], qt[1], inplace, dy, dw, N, C, eps, LJ_FP8_E4M3,
                                  &fsc);
        const char *name = current ? "fp8_rmsnorm_quantize in place current" : "fp8_rmsnorm_quantize in place delayed";
        lj_case_twin(x, name, inplace, res[0], n, LJ_CASE_ACT, LJ_CASE_TOL_BITS);
        lj_case_twin(x, name, out[1], out[0], n, LJ_CASE_ACT, LJ_CASE_TOL_BITS);
        lj_case_twin(x, name, q[1], q[0], nq, LJ_CASE_U8, LJ_CASE_TOL_BITS);
        lj_case_twin(x, name, qt[1], qt[0], nqt, LJ_CASE_U8, LJ_CASE_TOL_BITS);
        lj_case_twin(x, name, st[1], st[0], 3, LJ_CASE_F32, LJ_CASE_TOL_BITS);
    }
}

void lj_case_fp8_rmsnorm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, fp8_rmsnorm_body);
}

/* ---- the GEMMs -------------------------------------------------------------------------- */

/* One case's FP8 GEMM from its codes and factors into `out` (dtype, mode). */
typedef struct {
    const void *qa, *qb;
    const float *sa, *sb;
    lj_fp8_format fa;
    int blockwise, b_blocks, M, N, K;
    void *ws;
} fp8_gemm;

static void run_gemm(const lj_ops *ops, const fp8_gemm *g, void *out, lj_dtype dtype, lj_grad_mode mode) {
    if (g->blockwise)
        ops->fp8_matmul_blockwise(out, dtype, g->qa, g->fa, g->sa, 0, g->qb, LJ_FP8_E4M3, g->sb, g->b_blocks, g->M,
                                  g->N, g->K, mode, g->ws);
    else
        ops->fp8_matmul(out, dtype, g->qa, g->fa, g->sa, g->qb, LJ_FP8_E4M3, g->sb, g->M, g->N, g->K, mode, g->ws);
}

/* The three forms every FP8 GEMM case checks, from the unquantized inputs a [M, K], b [N, K] (host
 * and device) and, on the CPU, `decoded` [M, N], the double product of the decoded, scaled codes:
 * into the act dtype (tol: against `decoded`, the CPU's values on CUDA); within the formats'
 * rounding of the unquantized product (tol_grad: the double product on the CPU, the bf16 GEMM of
 * a and b on CUDA); += onto random values in the grad dtype (tol). */
static void check_gemm_forms(lj_case_ctx *x, const char *op, const fp8_gemm *g, const float *a, const float *b,
                             void *da, void *db, const double *decoded) {
    const lj_ops *ops = x->ops;
    const int M = g->M, N = g->N, K = g->K;
    const int64_t no = (int64_t)M * N;
    char name[96];
    void *out = lj_case_alloc(x, no, LJ_CASE_ACT);
    run_gemm(ops, g, out, ops->act_dtype, LJ_GRAD_OVERWRITE);
    snprintf(name, sizeof name, "%s (decoded)", op);
    lj_case_output(x, name, out, no, LJ_CASE_ACT, decoded, LJ_CASE_TOL_OUT);
    if (lj_case_reference(x)) {
        double *exact = lj_case_dzeros(x, no);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double e = 0;
                for (int k = 0; k < K; k++) e += (double)a[(size_t)i * K + k] * b[(size_t)j * K + k];
                exact[(size_t)i * N + j] = e;
            }
        snprintf(name, sizeof name, "%s against the unquantized product", op);
        lj_case_output_at(x, name, out, no, LJ_CASE_ACT, exact, x->c->tol_grad, x->c->tol_grad);
    } else { /* the x w^T form: a as x, b as w */
        void *mm = lj_case_alloc(x, no, LJ_CASE_ACT);
        ops->matmul_forward(mm, da, db, M, K, N);
        snprintf(name, sizeof name, "%s vs the bf16 GEMM", op);
        lj_case_twin_at(x, name, out, mm, no, LJ_CASE_ACT, x->c->tol_grad, x->c->tol_grad);
    }
    /* the weight-gradient form: the grad dtype, accumulated onto random values */
    float *init = lj_case_rand(x, no, 1.0f);
    void *acc = lj_case_upload(x, init, no, LJ_CASE_GRAD);
    run_gemm(ops, g, acc, ops->grad_dtype, LJ_GRAD_ACCUMULATE);
    double *want = NULL;
    if (decoded) {
        want = lj_case_to_double(x, init, no);
        for (int64_t i = 0; i < no; i++) want[i] += decoded[i];
    }
    snprintf(name, sizeof name, "%s (+=)", op);
    lj_case_output(x, name, acc, no, LJ_CASE_GRAD, want, LJ_CASE_TOL_OUT);
}

/* d = {M, N, K, a in E5M2}: per-tensor current scaling of a (E4M3 or E5M2) and b (E4M3); N a
 * multiple of 8 (16-byte output rows on CUDA). */
static void fp8_matmul_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int M = x->c->d[0], N = x->c->d[1], K = x->c->d[2], ld = lj_fp8_ld(K);
    const lj_fp8_format fa = x->c->d[3] ? LJ_FP8_E5M2 : LJ_FP8_E4M3;
    lj_case_shape(x, "M=%d N=%d K=%d %s x e4m3", M, N, K, lj_fp8_format_name(fa));
    float *a = lj_case_rand(x, (int64_t)M * K, 0.02f), *b = lj_case_rand(x, (int64_t)N * K, 3.0f);
    void *da = lj_case_upload(x, a, (int64_t)M * K, LJ_CASE_ACT);
    void *db = lj_case_upload(x, b, (int64_t)N * K, LJ_CASE_ACT);
    /* scale and amax of a and b at [0..3]; their scale_inv at [4] and [8] (16-byte aligned) */
    float *st = lj_case_upload(x, lj_case_zeros(x, 12), 12, LJ_CASE_F32);
    void *qa = lj_case_alloc(x, (int64_t)M * ld, LJ_CASE_U8), *qb = lj_case_alloc(x, (int64_t)N * ld, LJ_CASE_U8);
    ops->fp8_amax(st + 1, da, (int64_t)M * K);
    ops->fp8_amax(st + 3, db, (int64_t)N * K);
    const lj_fp8_scaling A = {st, st + 4, st + 1, 1}, B = {st + 2, st + 8, st + 3, 1};
    ops->fp8_quantize(qa, NULL, da, M, K, fa, &A);
    ops->fp8_quantize(qb, NULL, db, N, K, LJ_FP8_E4M3, &B);
    const fp8_gemm g = {qa, qb, st + 4, st + 8, fa, 0, 0, M, N, K,
                        lj_case_scratch(x, ops->fp8_matmul_workspace_bytes(M, N, K))};
    double *decoded = NULL;
    if (lj_case_reference(x)) {
        const float *ha = lj_case_download(x, qa, (int64_t)M * ld, LJ_CASE_U8);
        const float *hb = lj_case_download(x, qb, (int64_t)N * ld, LJ_CASE_U8);
        const float *s = lj_case_download(x, st, 12, LJ_CASE_F32);
        decoded = lj_case_dzeros(x, (int64_t)M * N);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double v = 0;
                for (int k = 0; k < K; k++)
                    v += (double)lj_fp8_to_f32((uint8_t)ha[(size_t)i * ld + k], fa) *
                         lj_fp8_to_f32((uint8_t)hb[(size_t)j * ld + k], LJ_FP8_E4M3);
                decoded[(size_t)i * N + j] = v * s[4] * s[8];
            }
    }
    check_gemm_forms(x, "fp8_matmul", &g, a, b, da, db, decoded);
}

void lj_case_fp8_matmul(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, fp8_matmul_body);
}

/* ---- the blockwise recipe --------------------------------------------------------------- */

/* d = {rows, cols} (not multiples of 128: partial tiles): random values with an outlier at (0, 0)
 * and the last row's first tile zero. In both formats, the 1x128 tiles rowwise and columnwise in
 * one call, the columnwise pair alone (the backward's second cast of x) and the 128x128 blocks
 * with the transpose: codes with their zero padding and every factor with the layouts' padding of
 * 1s (unwritten bytes show: the buffers start as NaN bytes), and the amax; on the CPU against
 * their definition (E4M3's tiles: each factor amax/448, 1 for the zero tile and the padding; the
 * columnwise cast the rowwise cast of x^T; E5M2's blocks: the transpose, its grid, block (0, 0)'s
 * factor amax/57344), on CUDA those and the CPU's bytes. */
static void fp8_blockwise_cast_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int R = x->c->d[0], C = x->c->d[1], ld = lj_fp8_ld(C), ldt = lj_fp8_ld(R);
    const int64_t n = (int64_t)R * C, nq = (int64_t)R * ld, nqt = (int64_t)C * ldt;
    const int64_t ns = lj_fp8_tile_scales_numel(R, C), nst = lj_fp8_tile_scales_numel(C, R);
    const int64_t ng = lj_fp8_block_scales_numel(R, C), ngt = lj_fp8_block_scales_numel(C, R);
    lj_case_shape(x, "rows=%d cols=%d", R, C);
    const char *op = "fp8_blockwise";
    float *hx = lj_case_rand(x, n, 2.0f), *xt = lj_case_zeros(x, n);
    hx[0] = 100.0f;                                              /* an outlier in tile (0, 0) */
    for (int k = 0; k < C && k < 128; k++) hx[(size_t)(R - 1) * C + k] = 0.0f; /* a zero tile */
    float amax_x = 0, amax_00 = 0;
    for (int r = 0; r < R; r++)
        for (int k = 0; k < C; k++) {
            xt[(size_t)k * R + r] = hx[(size_t)r * C + k];
            amax_x = fmaxf(amax_x, fabsf(hx[(size_t)r * C + k]));
            if (r < 128 && k < 128) amax_00 = fmaxf(amax_00, fabsf(hx[(size_t)r * C + k]));
        }
    void *dx = lj_case_upload(x, hx, n, LJ_CASE_ACT);
    for (int f = 0; f < 2; f++) {
        const lj_fp8_format fmt = (lj_fp8_format)f;
        char name[64];
        /* 1x128 tiles, rowwise and columnwise in one call */
        void *q = lj_case_alloc(x, nq, LJ_CASE_U8), *qt = lj_case_alloc(x, nqt, LJ_CASE_U8);
        float *s = lj_case_alloc(x, ns, LJ_CASE_F32), *st = lj_case_alloc(x, nst, LJ_CASE_F32);
        float *amax = lj_case_alloc(x, 1, LJ_CASE_F32);
        ops->fp8_quantize_tiles(q, s, qt, st, dx, R, C, fmt, amax);
        snprintf(name, sizeof name, "fp8_quantize_tiles %s", lj_fp8_format_name(fmt));
        lj_case_output(x, name, q, nq, LJ_CASE_U8, NULL, LJ_CASE_TOL_BITS);
        lj_case_output(x, name, s, ns, LJ_CASE_F32, NULL, LJ_CASE_TOL_BITS);
        lj_case_output(x, name, qt, nqt, LJ_CASE_U8, NULL, LJ_CASE_TOL_BITS);
        lj_case_output(x, name, st, nst, LJ_CASE_F32, NULL, LJ_CASE_TOL_BITS);
        const float ga = lj_case_download(x, amax, 1, LJ_CASE_F32)[0];
        lj_case_true(x, name, ga == amax_x, "amax %g = max|x| %g", (double)ga, (double)amax_x);
        if (fmt == LJ_FP8_E4M3) {
            const float *hq = lj_case_download(x, q, nq, LJ_CASE_U8), *hs = lj_case_download(x, s, ns, LJ_CASE_F32);
            const float *hqt = lj_case_download(x, qt, nqt, LJ_CASE_U8);
            const float *hst = lj_case_download(x, st, nst, LJ_CASE_F32);
            int scales = 1, codes = 1, pad = 1;
            for (int r = 0; r < lj_fp8_round4(R); r++) {
                for (int bl = 0; bl < lj_fp8_nblocks(C); bl++) {
                    float am = 0;
                    for (int k = bl * 128; k < C && k < bl * 128 + 128 && r < R; k++)
                        am = fmaxf(am, fabsf(hx[(size_t)r * C + k]));
                    const float sc = am > 0 ? 448.0f / am : 1.0f;
                    scales &= hs[(size_t)bl * lj_fp8_round4(R) + r] == 1.0f / sc;
                    for (int k = bl * 128; k < C && k < bl * 128 + 128 && r < R; k++)
                        codes &= hq[(size_t)r * ld + k] == lj_fp8_from_f32(hx[(size_t)r * C + k] * sc, LJ_FP8_E4M3);
                }
                for (int k = C; k < ld && r < R; k++) pad &= hq[(size_t)r * ld + k] == 0;
            }
            lj_case_true(x, op, scales, "each 1x128 tile's factor is amax/448 (1 for a zero tile and the padding)");
            lj_case_true(x, op, codes, "q = fp8(x * the tile's scale)");
            lj_case_true(x, op, pad, "the padding columns of q are zero");
            lj_case_true(x, op, hs[R - 1] == 1.0f, "the all-zero tile's factor is 1");
            void *qr = lj_case_alloc(x, nqt, LJ_CASE_U8);
            float *sr = lj_case_alloc(x, nst, LJ_CASE_F32);
            ops->fp8_quantize_tiles(qr, sr, NULL, NULL, lj_case_upload(x, xt, n, LJ_CASE_ACT), C, R, LJ_FP8_E4M3, NULL);
            const float *hqr = lj_case_download(x, qr, nqt, LJ_CASE_U8);
            const float *hsr = lj_case_download(x, sr, nst, LJ_CASE_F32);
            lj_case_true(x, op, !memcmp(hqr, hqt, (size_t)nqt * 4) && !memcmp(hsr, hst, (size_t)nst * 4),
                         "the columnwise cast equals the rowwise cast of x^T (codes, factors)");
        }
        /* the columnwise pair alone */
        void *qt2 = lj_case_alloc(x, nqt, LJ_CASE_U8);
        float *st2 = lj_case_alloc(x, nst, LJ_CASE_F32);
        ops->fp8_quantize_tiles(NULL, NULL, qt2, st2, dx, R, C, fmt, NULL);
        lj_case_output(x, name, qt2, nqt, LJ_CASE_U8, NULL, LJ_CASE_TOL_BITS);
        lj_case_output(x, name, st2, nst, LJ_CASE_F32, NULL, LJ_CASE_TOL_BITS);
        /* 128x128 blocks with the transpose */
        void *bq = lj_case_alloc(x, nq, LJ_CASE_U8), *bqt = lj_case_alloc(x, nqt, LJ_CASE_U8);
        float *g = lj_case_alloc(x, ng, LJ_CASE_F32), *gt = lj_case_alloc(x, ngt, LJ_CASE_F32);
        float *bamax = lj_case_alloc(x, 1, LJ_CASE_F32);
        ops->fp8_quantize_blocks(bq, g, bqt, gt, dx, R, C, fmt, bamax);
        snprintf(name, sizeof name, "fp8_quantize_blocks %s", lj_fp8_format_name(fmt));
        lj_case_output(x, name, bq, nq, LJ_CASE_U8, NULL, LJ_CASE_TOL_BITS);
        lj_case_output(x, name, g, ng, LJ_CASE_F32, NULL, LJ_CASE_TOL_BITS);
        lj_case_output(x, name, bqt, nqt, LJ_CASE_U8, NULL, LJ_CASE_TOL_BITS);
        lj_case_output(x, name, gt, ngt, LJ_CASE_F32, NULL, LJ_CASE_TOL_BITS);
        const float gb = lj_case_download(x, bamax, 1, LJ_CASE_F32)[0];
        lj_case_true(x, name, gb == amax_x, "amax %g = max|x| %g", (double)gb, (double)amax_x);
        if (fmt == LJ_FP8_E5M2) {
            const float *hq = lj_case_download(x, bq, nq, LJ_CASE_U8), *hqt = lj_case_download(x, bqt, nqt, LJ_CASE_U8);
            const float *hg = lj_case_download(x, g, ng, LJ_CASE_F32), *hgt = lj_case_download(x, gt, ngt, LJ_CASE_F32);
            int trans = 1, grid = 1;
            for (int r = 0; r < R; r++)
                for (int k = 0; k < C; k++) trans &= hqt[(size_t)k * ldt + r] == hq[(size_t)r * ld + k];
            for (int br = 0; br < lj_fp8_nblocks(R); br++)
                for (int bc = 0; bc < lj_fp8_nblocks(C); bc++)
                    grid &= hg[lj_fp8_block_scale_index(C, br * 128, bc * 128)] ==
                            hgt[lj_fp8_block_scale_index(R, bc * 128, br * 128)];
            lj_case_true(x, op, trans, "128x128 blocks: q_t = q transposed");
            lj_case_true(x, op, grid, "128x128 blocks: the transpose's grid is the grid transposed");
            lj_case_true(x, op, hg[0] == amax_00 / 57344.0f, "block (0, 0)'s factor is amax/57344 (E5M2; got %g)",
                         (double)hg[0]);
        }
    }
}

void lj_case_fp8_blockwise_cast(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, fp8_blockwise_cast_body);
}

/* d = {M, N, K, a in E5M2, b in 128x128 blocks}: a cast in 1x128 tiles, b in 1x128 tiles (the
 * weight-gradient form) or 128x128 blocks (forward and data gradient), an outlier in one of a's
 * tiles; M and N multiples of 4 (cuBLASLt's factor layouts), N of 8. The forms of
 * check_gemm_forms. */
static void fp8_blockwise_matmul_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int M = x->c->d[0], N = x->c->d[1], K = x->c->d[2], ld = lj_fp8_ld(K), blocks = x->c->d[4];
    const lj_fp8_format fa = x->c->d[3] ? LJ_FP8_E5M2 : LJ_FP8_E4M3;
    lj_case_shape(x, "M=%d N=%d K=%d %s 1x128 x e4m3 %s", M, N, K, lj_fp8_format_name(fa),
                  blocks ? "128x128" : "1x128");
    float *a = lj_case_rand(x, (int64_t)M * K, 0.02f), *b = lj_case_rand(x, (int64_t)N * K, 3.0f);
    a[(M / 3) * K + K / 2] = 5.0f; /* an outlier: its tile only */
    void *da = lj_case_upload(x, a, (int64_t)M * K, LJ_CASE_ACT);
    void *db = lj_case_upload(x, b, (int64_t)N * K, LJ_CASE_ACT);
    const int64_t nsa = lj_fp8_tile_scales_numel(M, K);
    const int64_t nsb = blocks ? lj_fp8_block_scales_numel(N, K) : lj_fp8_tile_scales_numel(N, K);
    void *qa = lj_case_alloc(x, (int64_t)M * ld, LJ_CASE_U8), *qb = lj_case_alloc(x, (int64_t)N * ld, LJ_CASE_U8);
    float *sa = lj_case_alloc(x, nsa, LJ_CASE_F32), *sb = lj_case_alloc(x, nsb, LJ_CASE_F32);
    ops->fp8_quantize_tiles(qa, sa, NULL, NULL, da, M, K, fa, NULL);
    if (blocks) ops->fp8_quantize_blocks(qb, sb, NULL, NULL, db, N, K, LJ_FP8_E4M3, NULL);
    else ops->fp8_quantize_tiles(qb, sb, NULL, NULL, db, N, K, LJ_FP8_E4M3, NULL);
    const fp8_gemm g = {qa, qb, sa, sb, fa, 1, blocks, M, N, K,
                        lj_case_scratch(x, ops->fp8_matmul_workspace_bytes(M, N, K))};
    double *decoded = NULL;
    if (lj_case_reference(x)) {
        const float *ha = lj_case_download(x, qa, (int64_t)M * ld, LJ_CASE_U8);
        const float *hsa = lj_case_download(x, sa, nsa, LJ_CASE_F32);
        const float *hb = lj_case_download(x, qb, (int64_t)N * ld, LJ_CASE_U8);
        const float *hsb = lj_case_download(x, sb, nsb, LJ_CASE_F32);
        decoded = lj_case_dzeros(x, (int64_t)M * N);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double v = 0;
                for (int k = 0; k < K; k++) {
                    const double fa_k = hsa[lj_fp8_tile_scale_index(M, i, k)];
                    const double fb_k =
                        blocks ? hsb[lj_fp8_block_scale_index(K, j, k)] : hsb[lj_fp8_tile_scale_index(N, j, k)];
                    v += lj_fp8_to_f32((uint8_t)ha[(size_t)i * ld + k], fa) * fa_k *
                         lj_fp8_to_f32((uint8_t)hb[(size_t)j * ld + k], LJ_FP8_E4M3) * fb_k;
                }
                decoded[(size_t)i * N + j] = v;
            }
    }
    check_gemm_forms(x, "fp8_matmul_blockwise", &g, a, b, da, db, decoded);
}

void lj_case_fp8_blockwise_matmul(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, fp8_blockwise_matmul_body);
}

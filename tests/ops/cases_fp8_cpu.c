/* cases_fp8_cpu.c: the CPU backend's FP8 emulation (ops.h "FP8", base/fp8.h) against independent
 * references: the formats against a nearest-value search over all 256 codes (ties to the even
 * code), the cast's scale, saturation, transpose and padding, delayed scaling's history update
 * against a step-by-step reference, and the FP8 GEMM against a double product of the decoded
 * values and against the unquantized fp32 product within the formats' rounding; the blockwise
 * recipe's casts against their tile-by-tile definition. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cpu.h"
#include "tests/ops/op_cases.h"

#define SHAPE(...) char shape[96]; snprintf(shape, sizeof shape, __VA_ARGS__)
#define CHECK_D(op, got, ref, n, tol) lj_harness_check_d(h, (op), shape, (got), (ref), (n), (tol))
#define CHECK_TRUE(op, cond, ...) lj_harness_check_true(h, (op), shape, (cond), __VA_ARGS__)

/* The code nearest to x among the finite codes of `fmt`, ties to the code with an even mantissa
 * LSB; beyond the largest finite magnitude, +-max (satfinite); NaN -> 0x7F. */
static uint8_t nearest_code(float x, lj_fp8_format fmt) {
    if (isnan(x)) return 0x7F;
    if (fabsf(x) >= lj_fp8_max(fmt)) /* (also where a double distance could no longer tell codes apart) */
        return (uint8_t)((signbit(x) ? 0x80 : 0) | (fmt == LJ_FP8_E4M3 ? 0x7E : 0x7B));
    int best = -1;
    double bd = INFINITY;
    for (int c = 0; c < 256; c++) {
        const float v = lj_fp8_to_f32((uint8_t)c, fmt);
        if (!isfinite(v) || (signbit(v) != signbit(x))) continue;
        const double d = fabs((double)v - (double)x);
        if (d < bd || (d == bd && (c & 1) == 0)) bd = d, best = c;
    }
    return (uint8_t)best;
}

/* d = {random values}; param unused. Every code round-trips; every bf16 value and random fp32
 * values (normal, subnormal range, beyond max, exact ties) cast to the nearest code. */
void lj_case_cpu_fp8_format(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    SHAPE("n=%d", c->d[0]);
    static const char *ops_name[2] = {"fp8 e4m3", "fp8 e5m2"};
    for (int f = 0; f < 2; f++) {
        const lj_fp8_format fmt = (lj_fp8_format)f;
        const char *op = ops_name[f];
        CHECK_TRUE(op, lj_fp8_to_f32(fmt == LJ_FP8_E4M3 ? 0x7E : 0x7B, fmt) == lj_fp8_max(fmt), "largest code is %g",
                   (double)lj_fp8_max(fmt));
        CHECK_TRUE(op, lj_fp8_to_f32(1, fmt) == ldexpf(1.0f, fmt == LJ_FP8_E4M3 ? -9 : -16), "smallest subnormal");
        int roundtrip = 1;
        for (int code = 0; code < 256; code++) {
            const float v = lj_fp8_to_f32((uint8_t)code, fmt);
            if (isnan(v)) continue;
            const uint8_t back = lj_fp8_from_f32(v, fmt);
            const int inf = isinf(v); /* E5M2's infinities saturate */
            roundtrip &= inf ? back == (uint8_t)((code & 0x80) | (fmt == LJ_FP8_E4M3 ? 0x7E : 0x7B)) : back == code;
        }
        CHECK_TRUE(op, roundtrip, "every finite code round-trips, infinities saturate");
        CHECK_TRUE(op, lj_fp8_from_f32(NAN, fmt) == 0x7F, "NaN -> 0x7F");
        CHECK_TRUE(op, lj_fp8_from_f32(1e30f, fmt) == (fmt == LJ_FP8_E4M3 ? 0x7E : 0x7B), "1e30 saturates to max");
        CHECK_TRUE(op, lj_fp8_from_f32(-INFINITY, fmt) == (fmt == LJ_FP8_E4M3 ? 0xFE : 0xFB), "-inf saturates to -max");
        CHECK_TRUE(op, lj_fp8_from_f32(-0.0f, fmt) == 0x80, "-0 keeps its sign");
        /* ties: 1 + half a step rounds to 1 (even), 1 + 3 half steps to 1 + 2 steps */
        const float step = fmt == LJ_FP8_E4M3 ? 0.125f : 0.25f;
        CHECK_TRUE(op, lj_fp8_to_f32(lj_fp8_from_f32(1.0f + step / 2, fmt), fmt) == 1.0f, "tie to even (down)");
        CHECK_TRUE(op, lj_fp8_to_f32(lj_fp8_from_f32(1.0f + 1.5f * step, fmt), fmt) == 1.0f + 2 * step,
                   "tie to even (up)");
        int bad = 0, first_bad = -1;
        for (int b = 0; b < 65536; b++) { /* every bf16 value */
            const float x = lj_bf16_to_f32((uint16_t)b);
            if (lj_fp8_from_f32(x, fmt) != nearest_code(x, fmt)) {
                if (first_bad < 0) first_bad = b;
                bad++;
            }
        }
        CHECK_TRUE(op, bad == 0, "every bf16 value casts to the nearest code (%d differ, first bf16 0x%04x)", bad,
                   first_bad);
        bad = 0;
        for (int i = 0; i < c->d[0]; i++) {
            const float x = ldexpf((float)lj_rng_normal(&h->rng), (int)lj_rng_below(&h->rng, 44) - 24);
            bad += lj_fp8_from_f32(x, fmt) != nearest_code(x, fmt);
        }
        CHECK_TRUE(op, bad == 0, "random fp32 values cast to the nearest code (%d differ)", bad);
    }
}

/* d = {rows, cols}. Current and delayed casts: amax, scale, codes, transpose, zero padding,
 * saturation under a too-large delayed scale. */
void lj_case_cpu_fp8_quantize(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = lj_ops_cpu();
    const int R = c->d[0], C = c->d[1], ld = lj_fp8_ld(C), ldt = lj_fp8_ld(R);
    SHAPE("rows=%d cols=%d", R, C);
    const char *op = "fp8_quantize";
    float *x = lj_harness_randf(h, (int64_t)R * C, 3.0f);
    x[7 % (R * C)] = -40.0f; /* the amax */
    uint8_t *q = lj_malloc((size_t)R * ld), *qt = lj_malloc((size_t)C * ldt);
    memset(q, 0xAA, (size_t)R * ld), memset(qt, 0xAA, (size_t)C * ldt);
    float amax = -1, scale = 0, scale_inv = 0;
    ops->fp8_amax(&amax, x, (int64_t)R * C);
    CHECK_TRUE(op, amax == 40.0f, "fp8_amax = max|x| = 40 (got %g)", (double)amax);
    lj_fp8_scaling sc = {&scale, &scale_inv, &amax, 1};
    ops->fp8_quantize(q, qt, x, R, C, LJ_FP8_E4M3, &sc);
    CHECK_TRUE(op, scale == 448.0f / 40.0f && scale_inv == 1.0f / scale, "current scale = 448/amax (got %g)",
               (double)scale);
    int codes = 1, trans = 1, pad = 1;
    for (int r = 0; r < R; r++)
        for (int k = 0; k < ld; k++) {
            const uint8_t want = k < C ? lj_fp8_from_f32(x[(size_t)r * C + k] * scale, LJ_FP8_E4M3) : 0;
            if (k < C) codes &= q[(size_t)r * ld + k] == want;
            else pad &= q[(size_t)r * ld + k] == 0;
        }
    for (int k = 0; k < C; k++)
        for (int r = 0; r < ldt; r++) {
            if (r < R) trans &= qt[(size_t)k * ldt + r] == q[(size_t)r * ld + k];
            else pad &= qt[(size_t)k * ldt + r] == 0;
        }
    CHECK_TRUE(op, codes, "q = fp8(x * scale)");
    CHECK_TRUE(op, trans, "q_t = q transposed");
    CHECK_TRUE(op, pad, "the padding of q and q_t is zero");
    CHECK_TRUE(op, q[7 % (R * C) / C * ld + 7 % (R * C) % C] == 0xFE, "the amax element casts to -448");
    /* delayed: a scale 16x too large saturates; the recorded amax rises to max|x| only */
    float hist = 10.0f, s2 = 16.0f * 448.0f / 40.0f, s2i = 1.0f / s2;
    lj_fp8_scaling dl = {&s2, &s2i, &hist, 0};
    ops->fp8_quantize(q, NULL, x, R, C, LJ_FP8_E4M3, &dl);
    int sat = 0, want_sat = 0;
    for (int i = 0; i < R * C; i++) {
        want_sat += fabsf(x[i] * s2) > 448.0f + 16.0f; /* beyond max's rounding interval */
        sat += (q[(size_t)(i / C) * ld + i % C] & 0x7F) == 0x7E && fabsf(x[i] * s2) > 448.0f + 16.0f;
    }
    CHECK_TRUE(op, sat == want_sat && want_sat > 0, "delayed, scale x16: %d values saturate to +-448 (want %d)", sat,
               want_sat);
    CHECK_TRUE(op, hist == 40.0f && s2 == 16.0f * 448.0f / 40.0f, "delayed: amax raised to 40 (%g), scale unchanged",
               (double)hist);
    x[3 % (R * C)] = NAN;
    ops->fp8_amax(&amax, x, (int64_t)R * C);
    CHECK_TRUE(op, isnan(amax), "a NaN makes the amax NaN");
    free(x), free(q), free(qt);
}

/* d = {tensors, history}; param: margin. Delayed scaling's update against a reference. */
void lj_case_cpu_fp8_scale_update(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = lj_ops_cpu();
    const int S = c->d[0], H = c->d[1];
    SHAPE("tensors=%d history=%d margin=%g", S, H, c->param);
    const char *op = "fp8_scale_update";
    for (int algo = 0; algo < 2; algo++) {
        float *hist = lj_malloc((size_t)S * H * sizeof(float)), *ref = lj_malloc((size_t)S * H * sizeof(float));
        float *scale = lj_malloc((size_t)S * sizeof(float));
        float *sinv = lj_calloc((size_t)S * LJ_FP8_SCALE_INV_STRIDE, sizeof(float));
        for (int i = 0; i < S * H; i++) hist[i] = (float)fabs(lj_rng_normal(&h->rng)) * 10.0f;
        for (int t = 0; t < S; t++) scale[t] = 2.0f;
        hist[0] = 0.0f;           /* tensor 0: all zero: keeps its scale */
        for (int i = 1; i < H; i++) hist[(size_t)i * S] = 0.0f;
        hist[1] = INFINITY;       /* tensor 1: inf newest: most_recent keeps the scale */
        hist[2] = 1e-38f;         /* tensor 2: tiny: FLT_MAX */
        for (int i = 1; i < H; i++) hist[(size_t)i * S + 2] = 0.0f;
        memcpy(ref, hist, (size_t)S * H * sizeof(float));
        const float smax_a = 448.0f / ldexpf(1.0f, (int)c->param), smax_b = 57344.0f / ldexpf(1.0f, (int)c->param);
        const int first = S / 2;
        ops->fp8_scale_update(hist, scale, sinv, S, H, first, smax_a, smax_b, algo);
        int ok_hist = 1, ok_scale = 1;
        for (int t = 0; t < S; t++) {
            float m = 0;
            for (int i = 0; i < H; i++) m = fmaxf(m, ref[(size_t)i * S + t]);
            const float amax = algo ? m : ref[t];
            const float smax = t < first ? smax_a : smax_b;
            float want = (isfinite(amax) && amax > 0) ? smax / amax : 2.0f;
            if (isinf(want)) want = FLT_MAX;
            ok_scale &= scale[t] == want && sinv[LJ_FP8_SCALE_INV_STRIDE * t] == 1.0f / want;
            ok_hist &= hist[t] == 0.0f;
            for (int i = 1; i < H; i++) ok_hist &= hist[(size_t)i * S + t] == ref[(size_t)((i + 1) % H) * S + t];
            if (H == 1) ok_hist &= hist[t] == 0.0f;
        }
        CHECK_TRUE(op, ok_hist, "%s: history rolled by one row, newest row zero", algo ? "max" : "most_recent");
        CHECK_TRUE(op, ok_scale, "%s: scale = (fp8_max / 2^margin) / amax, kept for amax 0 or inf, FLT_MAX on overflow",
                   algo ? "max" : "most_recent");
        CHECK_TRUE(op, scale[0] == 2.0f && scale[2] == FLT_MAX, "zero amax keeps 2, tiny amax gives FLT_MAX");
        free(hist), free(ref), free(scale), free(sinv);
    }
}

/* d = {M, N, K, format of a (0 e4m3, 1 e5m2)}. The GEMM against a double product of the
 * decoded codes (tol), and against the unquantized product within the formats' rounding
 * (tol_grad: the stated bound), with accumulate mode. */
void lj_case_cpu_fp8_matmul(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = lj_ops_cpu();
    const int M = c->d[0], N = c->d[1], K = c->d[2], ld = lj_fp8_ld(K);
    const lj_fp8_format fa = c->d[3] ? LJ_FP8_E5M2 : LJ_FP8_E4M3;
    SHAPE("M=%d N=%d K=%d %s x e4m3", M, N, K, lj_fp8_format_name(fa));
    float *a = lj_harness_randf(h, (int64_t)M * K, 0.01f), *b = lj_harness_randf(h, (int64_t)N * K, 5.0f);
    uint8_t *qa = lj_malloc((size_t)M * ld), *qb = lj_malloc((size_t)N * ld);
    float am, bm, sa, sai, sb, sbi;
    ops->fp8_amax(&am, a, (int64_t)M * K);
    ops->fp8_amax(&bm, b, (int64_t)N * K);
    lj_fp8_scaling A = {&sa, &sai, &am, 1}, Bs = {&sb, &sbi, &bm, 1};
    ops->fp8_quantize(qa, NULL, a, M, K, fa, &A);
    ops->fp8_quantize(qb, NULL, b, N, K, LJ_FP8_E4M3, &Bs);
    void *ws = lj_malloc(ops->fp8_matmul_workspace_bytes(M, N, K));
    float *out = lj_harness_randf(h, (int64_t)M * N, 1.0f), *acc = lj_harness_randf(h, (int64_t)M * N, 1.0f);
    double *ref_acc = lj_harness_to_double(acc, (int64_t)M * N);
    ops->fp8_matmul(out, LJ_DTYPE_F32, qa, fa, &sai, qb, LJ_FP8_E4M3, &sbi, M, N, K, LJ_GRAD_OVERWRITE, ws);
    ops->fp8_matmul(acc, LJ_DTYPE_F32, qa, fa, &sai, qb, LJ_FP8_E4M3, &sbi, M, N, K, LJ_GRAD_ACCUMULATE, ws);
    double *ref = lj_malloc((size_t)M * N * sizeof(double)), *exact = lj_malloc((size_t)M * N * sizeof(double));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, e = 0;
            for (int k = 0; k < K; k++) {
                s += (double)lj_fp8_to_f32(qa[(size_t)i * ld + k], fa) * lj_fp8_to_f32(qb[(size_t)j * ld + k], LJ_FP8_E4M3);
                e += (double)a[(size_t)i * K + k] * b[(size_t)j * K + k];
            }
            ref[(size_t)i * N + j] = s * sai * sbi;
            exact[(size_t)i * N + j] = e;
            ref_acc[(size_t)i * N + j] += s * sai * sbi;
        }
    CHECK_D("fp8_matmul (decoded)", out, ref, (int64_t)M * N, c->tol);
    CHECK_D("fp8_matmul (+=)", acc, ref_acc, (int64_t)M * N, c->tol);
    CHECK_D("fp8_matmul against the unquantized product", out, exact, (int64_t)M * N, c->tol_grad);
    free(a), free(b), free(qa), free(qb), free(ws), free(out), free(acc), free(ref), free(exact), free(ref_acc);
}

/* d = {rows, cols}: the blockwise recipe's casts against their definition (base/fp8.h layouts):
 * every 1x128 tile's factor is 1/(448 / its amax) (1 for an all-zero tile and in the padding), the
 * codes lj_fp8_from_f32(x * scale), the columnwise cast the rowwise cast of x^T, the 128x128
 * blocks' transpose the same codes with the transposed grid; buffers start as 0xAA bytes. */
void lj_case_cpu_fp8_blockwise(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    const lj_ops *ops = lj_ops_cpu();
    const int R = c->d[0], C = c->d[1], ld = lj_fp8_ld(C), ldt = lj_fp8_ld(R);
    SHAPE("rows=%d cols=%d", R, C);
    const char *op = "fp8_blockwise";
    float *x = lj_harness_randf(h, (int64_t)R * C, 3.0f), *xt = lj_malloc((size_t)R * C * 4);
    x[0] = 100.0f;                                         /* an outlier in tile (0, 0) */
    for (int k = 0; k < C && k < 128; k++) x[(size_t)(R - 1) * C + k] = 0.0f; /* a zero tile */
    for (int r = 0; r < R; r++)
        for (int k = 0; k < C; k++) xt[(size_t)k * R + r] = x[(size_t)r * C + k];
    const int64_t ns = lj_fp8_tile_scales_numel(R, C), nst = lj_fp8_tile_scales_numel(C, R);
    uint8_t *q = lj_malloc((size_t)R * ld), *qt = lj_malloc((size_t)C * ldt), *qr = lj_malloc((size_t)C * ldt);
    float *s = lj_malloc((size_t)ns * 4), *st = lj_malloc((size_t)nst * 4), *sr = lj_malloc((size_t)nst * 4);
    memset(q, 0xAA, (size_t)R * ld), memset(qt, 0xAA, (size_t)C * ldt), memset(s, 0xAA, (size_t)ns * 4);
    memset(st, 0xAA, (size_t)nst * 4);
    float amax = -1;
    ops->fp8_quantize_tiles(q, s, qt, st, x, R, C, LJ_FP8_E4M3, &amax);
    CHECK_TRUE(op, amax == 100.0f, "amax = max|x| = 100 (got %g)", (double)amax);
    int scales = 1, codes = 1, pad = 1;
    for (int r = 0; r < lj_fp8_round4(R); r++) {
        for (int b = 0; b < lj_fp8_nblocks(C); b++) {
            float a = 0;
            for (int k = b * 128; k < C && k < b * 128 + 128 && r < R; k++) a = fmaxf(a, fabsf(x[(size_t)r * C + k]));
            const float sc = a > 0 ? 448.0f / a : 1.0f;
            scales &= s[(size_t)b * lj_fp8_round4(R) + r] == 1.0f / sc;
            for (int k = b * 128; k < C && k < b * 128 + 128 && r < R; k++)
                codes &= q[(size_t)r * ld + k] == lj_fp8_from_f32(x[(size_t)r * C + k] * sc, LJ_FP8_E4M3);
        }
        for (int k = C; k < ld && r < R; k++) pad &= q[(size_t)r * ld + k] == 0;
    }
    CHECK_TRUE(op, scales, "each 1x128 tile's factor is amax/448 (1 for a zero tile and the padding)");
    CHECK_TRUE(op, codes, "q = fp8(x * the tile's scale)");
    CHECK_TRUE(op, pad, "the padding columns of q are zero");
    CHECK_TRUE(op, s[R - 1] == 1.0f, "the all-zero tile's factor is 1");
    ops->fp8_quantize_tiles(qr, sr, NULL, NULL, xt, C, R, LJ_FP8_E4M3, NULL);
    CHECK_TRUE(op, !memcmp(qr, qt, (size_t)C * ldt) && !memcmp(sr, st, (size_t)nst * 4),
               "the columnwise cast equals the rowwise cast of x^T (codes, factors)");
    const int64_t ng = lj_fp8_block_scales_numel(R, C), ngt = lj_fp8_block_scales_numel(C, R);
    float *g = lj_malloc((size_t)ng * 4), *gt = lj_malloc((size_t)ngt * 4);
    ops->fp8_quantize_blocks(q, g, qt, gt, x, R, C, LJ_FP8_E5M2, NULL);
    int trans = 1, grid = 1;
    for (int r = 0; r < R; r++)
        for (int k = 0; k < C; k++) trans &= qt[(size_t)k * ldt + r] == q[(size_t)r * ld + k];
    for (int br = 0; br < lj_fp8_nblocks(R); br++)
        for (int bc = 0; bc < lj_fp8_nblocks(C); bc++)
            grid &= g[lj_fp8_block_scale_index(C, br * 128, bc * 128)] == gt[lj_fp8_block_scale_index(R, bc * 128, br * 128)];
    CHECK_TRUE(op, trans, "128x128 blocks: q_t = q transposed");
    CHECK_TRUE(op, grid, "128x128 blocks: the transpose's grid is the grid transposed");
    CHECK_TRUE(op, g[0] == 100.0f / 57344.0f, "block (0, 0)'s factor is amax/57344 (E5M2; got %g)", (double)g[0]);
    free(x), free(xt), free(q), free(qt), free(qr), free(s), free(st), free(sr), free(g), free(gt);
}

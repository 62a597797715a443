/* fp8.c: the CPU backend's FP8 emulation (ops.h "FP8"): amax, the saturating
 * round-to-nearest-even cast with its transpose (lj_fp8_from_f32, base/fp8.h; also of f32 values
 * rounded to bf16 first, the *_f32 forms), delayed
 * scaling's history update, and the FP8 GEMM as exact decoding to fp32 followed by one sgemm.
 * Codes, amaxes and scales equal the CUDA backend's bit for bit on the same inputs; a GEMM
 * differs from cuBLASLt's only in the order of its fp32 sums (and the GPU's bf16 output).
 * The blockwise recipe's casts (1x128 tiles, 128x128 blocks, base/fp8.h layouts) and its GEMM
 * (each code decoded times its tile's factor, then one sgemm) are at the end. */
#include "ops/cpu/cpu.h"

#include <string.h>

/* The value a cast reads of x[i] (f32): as it is, or rounded to bf16 first (fp8_quantize_f32's
 * `via`, the param copy's rounding, lj_f32_to_bf16). */
static inline float cast_value(float x, int round_bf16) { return round_bf16 ? lj_bf16_to_f32(lj_f32_to_bf16(x)) : x; }

static void amax_of(float *amax, const float *v, int64_t n, int round_bf16) {
    uint32_t m = 0;
#pragma omp parallel for reduction(max : m) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const uint32_t b = lj_fp8_abs_bits(cast_value(v[i], round_bf16));
        if (b > m) m = b;
    }
    union { uint32_t u; float f; } r = {m};
    amax[0] = r.f;
}

void lj_cpu_fp8_amax(float *amax, const void *x, int64_t n) { amax_of(amax, x, n, 0); }

void lj_cpu_fp8_amax_f32(float *amax, const float *x, int64_t n, lj_dtype via) {
    LJ_ASSERT(via == LJ_DTYPE_BF16 || via == LJ_DTYPE_F32, "fp8_amax_f32: via %s", lj_dtype_name(via));
    amax_of(amax, x, n, via == LJ_DTYPE_BF16);
}

static void quantize_of(void *q, void *q_t, const float *v, int rows, int cols, int round_bf16, lj_fp8_format fmt,
                        const lj_fp8_scaling *sc) {
    uint8_t *out = q, *out_t = q_t;
    const int ld = lj_fp8_ld(cols), ld_t = lj_fp8_ld(rows);
    float s;
    if (sc->current) {
        s = lj_fp8_current_scale(sc->amax[0], lj_fp8_max(fmt));
        sc->scale[0] = s;
        sc->scale_inv[0] = 1.0f / s;
    } else {
        s = sc->scale[0];
    }
    uint32_t m = 0;
#pragma omp parallel for reduction(max : m) schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *xr = v + (size_t)r * cols;
        for (int c = 0; c < cols; c++) {
            const float x = cast_value(xr[c], round_bf16);
            const uint32_t b = lj_fp8_abs_bits(x);
            if (b > m) m = b;
            const uint8_t code = lj_fp8_from_f32(x * s, fmt);
            if (out) out[(size_t)r * ld + c] = code;
            if (out_t) out_t[(size_t)c * ld_t + r] = code;
        }
        if (out) memset(out + (size_t)r * ld + cols, 0, (size_t)(ld - cols));
    }
    if (out_t)
        for (int c = 0; c < cols; c++) memset(out_t + (size_t)c * ld_t + rows, 0, (size_t)(ld_t - rows));
    if (!sc->current && sc->amax) {
        union { uint32_t u; float f; } r = {m};
        if (lj_fp8_abs_bits(sc->amax[0]) < m) sc->amax[0] = r.f;
    }
}

void lj_cpu_fp8_quantize(void *q, void *q_t, const void *x, int rows, int cols, lj_fp8_format fmt,
                         const lj_fp8_scaling *sc) {
    quantize_of(q, q_t, x, rows, cols, 0, fmt, sc);
}

void lj_cpu_fp8_quantize_f32(void *q, void *q_t, const float *x, int rows, int cols, lj_dtype via, lj_fp8_format fmt,
                             const lj_fp8_scaling *sc) {
    LJ_ASSERT(via == LJ_DTYPE_BF16 || via == LJ_DTYPE_F32, "fp8_quantize_f32: via %s", lj_dtype_name(via));
    quantize_of(q, q_t, x, rows, cols, via == LJ_DTYPE_BF16, fmt, sc);
}

void lj_cpu_fp8_transpose(void *q_t, const void *q, int rows, int cols) {
    const uint8_t *in = q;
    uint8_t *out = q_t;
    const int ld = lj_fp8_ld(cols), ld_t = lj_fp8_ld(rows);
#pragma omp parallel for schedule(static)
    for (int c = 0; c < cols; c++) {
        uint8_t *o = out + (size_t)c * ld_t;
        for (int r = 0; r < rows; r++) o[r] = in[(size_t)r * ld + c];
        memset(o + rows, 0, (size_t)(ld_t - rows));
    }
}

/* The SwiGLU into h (always: on the CPU h is the cast's input), then the cast of h. */
void lj_cpu_fp8_swiglu_quantize(void *h, int write_h, void *q, void *q_t, const void *gate_up, int N, int I,
                                lj_fp8_format fmt, const lj_fp8_scaling *sc) {
    (void)write_h;
    lj_cpu_swiglu_forward(h, gate_up, N, I);
    lj_cpu_fp8_quantize(q, q_t, h, N, I, fmt, sc);
}

void lj_cpu_fp8_swiglu_amax(float *amax, void *h, const void *gate_up, int N, int I) {
    lj_cpu_swiglu_forward(h, gate_up, N, I);
    lj_cpu_fp8_amax(amax, h, (int64_t)N * I);
}

/* The norm into out (always: on the CPU out is the cast's input), then (its amax and) the cast. */
void lj_cpu_fp8_rmsnorm_quantize(void *res_out, void *out, int write_out, float *rstd, void *q, void *q_t,
                                 const void *res_in, const void *y, const void *w, int N, int C, float eps,
                                 lj_fp8_format fmt, const lj_fp8_scaling *sc) {
    (void)write_out;
    if (y) lj_cpu_residual_rmsnorm_forward(res_out, out, rstd, res_in, y, w, N, C, eps);
    else lj_cpu_rmsnorm_forward(out, rstd, res_in, w, N, C, eps);
    if (sc->current) lj_cpu_fp8_amax(sc->amax, out, (int64_t)N * C);
    lj_cpu_fp8_quantize(q, q_t, out, N, C, fmt, sc);
}

void lj_cpu_fp8_scale_update(float *h, float *scale, float *scale_inv, int num, int H, int num_first,
                             float scaled_max_first, float scaled_max_rest, int algo_max) {
    for (int t = 0; t < num; t++) {
        const float amax = lj_fp8_roll_history(h, num, H, t, algo_max);
        const float s = lj_fp8_delayed_scale(amax, t < num_first ? scaled_max_first : scaled_max_rest, scale[t]);
        scale[t] = s;
        scale_inv[LJ_FP8_SCALE_INV_STRIDE * t] = 1.0f / s;
    }
}

size_t lj_cpu_fp8_matmul_workspace_bytes(int M, int N, int K) { return ((size_t)M + N) * lj_fp8_ld(K) * sizeof(float); }

/* dst[n] = the fp32 values of the codes src[n]. */
static void decode(float *dst, const uint8_t *src, size_t n, lj_fp8_format fmt) {
    float lut[256];
    for (int i = 0; i < 256; i++) lut[i] = lj_fp8_to_f32((uint8_t)i, fmt);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = lut[src[i]];
}

void lj_cpu_fp8_matmul(void *out, lj_dtype out_dtype, const void *a, lj_fp8_format fa, const float *a_scale_inv,
                       const void *b, lj_fp8_format fb, const float *b_scale_inv, int M, int N, int K,
                       lj_grad_mode mode, void *workspace) {
    LJ_ASSERT(out_dtype == LJ_DTYPE_F32, "cpu fp8_matmul: the output is f32 on the CPU, not %s",
              lj_dtype_name(out_dtype));
    LJ_ASSERT(fa == LJ_FP8_E4M3 || fb == LJ_FP8_E4M3, "fp8_matmul: E5M2 x E5M2 has no kernel");
    const int ld = lj_fp8_ld(K);
    float *A = workspace, *B = A + (size_t)M * ld;
    decode(A, a, (size_t)M * ld, fa);
    decode(B, b, (size_t)N * ld, fb);
    lj_cpu_sgemm(0, 1, M, N, ld, a_scale_inv[0] * b_scale_inv[0], A, ld, B, ld,
                 mode == LJ_GRAD_ACCUMULATE ? 1.0f : 0.0f, out, N);
}

/* ---- the blockwise recipe (ops.h fp8_quantize_tiles, fp8_quantize_blocks, fp8_matmul_blockwise) ---- */

static void set_ones(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = 1.0f;
}

static void write_amax(float *amax, const float *v, int64_t n) {
    if (amax) lj_cpu_fp8_amax(amax, v, n);
}

/* The scale of a run of values (a 1x128 tile or a 128x128 block) from their amax bits. */
static float tile_scale(uint32_t amax_bits, lj_fp8_format fmt) {
    union { uint32_t u; float f; } a = {amax_bits};
    return lj_fp8_current_scale(a.f, lj_fp8_max(fmt));
}

void lj_cpu_fp8_quantize_tiles(void *q, float *q_sinv, void *q_t, float *q_t_sinv, const void *x, int rows, int cols,
                               lj_fp8_format fmt, float *amax) {
    const float *v = x;
    const int nb = lj_fp8_nblocks(cols), nbt = lj_fp8_nblocks(rows);
    if (q) { /* rowwise: tiles of 128 along each row */
        uint8_t *out = q;
        const int ld = lj_fp8_ld(cols);
        set_ones(q_sinv, lj_fp8_tile_scales_numel(rows, cols));
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++) {
            const float *xr = v + (size_t)r * cols;
            for (int b = 0; b < nb; b++) {
                const int c0 = b * LJ_FP8_BLOCK, c1 = c0 + LJ_FP8_BLOCK < cols ? c0 + LJ_FP8_BLOCK : cols;
                uint32_t m = 0;
                for (int c = c0; c < c1; c++) {
                    const uint32_t bits = lj_fp8_abs_bits(xr[c]);
                    if (bits > m) m = bits;
                }
                const float s = tile_scale(m, fmt);
                q_sinv[lj_fp8_tile_scale_index(rows, r, c0)] = 1.0f / s;
                for (int c = c0; c < c1; c++) out[(size_t)r * ld + c] = lj_fp8_from_f32(xr[c] * s, fmt);
            }
            memset(out + (size_t)r * ld + cols, 0, (size_t)(ld - cols));
        }
    }
    if (q_t) { /* columnwise: x^T [cols, rows], tiles of 128 along its rows (x's columns) */
        uint8_t *out = q_t;
        const int ld_t = lj_fp8_ld(rows);
        set_ones(q_t_sinv, lj_fp8_tile_scales_numel(cols, rows));
#pragma omp parallel for schedule(static)
        for (int c = 0; c < cols; c++) {
            for (int b = 0; b < nbt; b++) {
                const int r0 = b * LJ_FP8_BLOCK, r1 = r0 + LJ_FP8_BLOCK < rows ? r0 + LJ_FP8_BLOCK : rows;
                uint32_t m = 0;
                for (int r = r0; r < r1; r++) {
                    const uint32_t bits = lj_fp8_abs_bits(v[(size_t)r * cols + c]);
                    if (bits > m) m = bits;
                }
                const float s = tile_scale(m, fmt);
                q_t_sinv[lj_fp8_tile_scale_index(cols, c, r0)] = 1.0f / s;
                for (int r = r0; r < r1; r++)
                    out[(size_t)c * ld_t + r] = lj_fp8_from_f32(v[(size_t)r * cols + c] * s, fmt);
            }
            memset(out + (size_t)c * ld_t + rows, 0, (size_t)(ld_t - rows));
        }
    }
    write_amax(amax, v, (int64_t)rows * cols);
}

void lj_cpu_fp8_quantize_blocks(void *q, float *sinv, void *q_t, float *sinv_t, const void *x, int rows, int cols,
                                lj_fp8_format fmt, float *amax) {
    const float *v = x;
    const int nbr = lj_fp8_nblocks(rows), nbc = lj_fp8_nblocks(cols);
    const int ld = lj_fp8_ld(cols), ld_t = lj_fp8_ld(rows);
    uint8_t *out = q, *out_t = q_t;
    if (q) set_ones(sinv, lj_fp8_block_scales_numel(rows, cols));
    if (q_t) set_ones(sinv_t, lj_fp8_block_scales_numel(cols, rows));
#pragma omp parallel for collapse(2) schedule(static)
    for (int br = 0; br < nbr; br++) {
        for (int bc = 0; bc < nbc; bc++) {
            const int r0 = br * LJ_FP8_BLOCK, r1 = r0 + LJ_FP8_BLOCK < rows ? r0 + LJ_FP8_BLOCK : rows;
            const int c0 = bc * LJ_FP8_BLOCK, c1 = c0 + LJ_FP8_BLOCK < cols ? c0 + LJ_FP8_BLOCK : cols;
            uint32_t m = 0;
            for (int r = r0; r < r1; r++)
                for (int c = c0; c < c1; c++) {
                    const uint32_t bits = lj_fp8_abs_bits(v[(size_t)r * cols + c]);
                    if (bits > m) m = bits;
                }
            const float s = tile_scale(m, fmt);
            if (q) sinv[lj_fp8_block_scale_index(cols, r0, c0)] = 1.0f / s;
            if (q_t) sinv_t[lj_fp8_block_scale_index(rows, c0, r0)] = 1.0f / s;
            for (int r = r0; r < r1; r++)
                for (int c = c0; c < c1; c++) {
                    const uint8_t code = lj_fp8_from_f32(v[(size_t)r * cols + c] * s, fmt);
                    if (out) out[(size_t)r * ld + c] = code;
                    if (out_t) out_t[(size_t)c * ld_t + r] = code;
                }
        }
    }
    if (out)
        for (int r = 0; r < rows; r++) memset(out + (size_t)r * ld + cols, 0, (size_t)(ld - cols));
    if (out_t)
        for (int c = 0; c < cols; c++) memset(out_t + (size_t)c * ld_t + rows, 0, (size_t)(ld_t - rows));
    write_amax(amax, v, (int64_t)rows * cols);
}

/* dst[rows, ld] = the fp32 values of the codes src[rows, ld] times their tile's (blocks = 0) or
 * block's (blocks = 1) dequantization factor; the padding columns stay 0. */
static void decode_scaled(float *dst, const uint8_t *src, int rows, int K, lj_fp8_format fmt, const float *sinv,
                          int blocks) {
    float lut[256];
    for (int i = 0; i < 256; i++) lut[i] = lj_fp8_to_f32((uint8_t)i, fmt);
    const int ld = lj_fp8_ld(K);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < ld; c++) {
            const int cc = c < K ? c : K - 1; /* the padding (zero codes) shares the last tile */
            const float f =
                blocks ? sinv[lj_fp8_block_scale_index(K, r, cc)] : sinv[lj_fp8_tile_scale_index(rows, r, cc)];
            dst[(size_t)r * ld + c] = lut[src[(size_t)r * ld + c]] * f;
        }
    }
}

void lj_cpu_fp8_matmul_blockwise(void *out, lj_dtype out_dtype, const void *a, lj_fp8_format fa, const float *a_sinv,
                                 int a_blocks, const void *b, lj_fp8_format fb, const float *b_sinv, int b_blocks,
                                 int M, int N, int K, lj_grad_mode mode, void *workspace) {
    LJ_ASSERT(out_dtype == LJ_DTYPE_F32, "cpu fp8_matmul_blockwise: the output is f32 on the CPU, not %s",
              lj_dtype_name(out_dtype));
    LJ_ASSERT(fa == LJ_FP8_E4M3 || fb == LJ_FP8_E4M3, "fp8_matmul_blockwise: E5M2 x E5M2 has no kernel");
    LJ_ASSERT(!(a_blocks && b_blocks), "fp8_matmul_blockwise: 128x128 x 128x128 has no kernel");
    if (M <= 0 || N <= 0) return;
    const int ld = lj_fp8_ld(K);
    float *A = workspace, *B = A + (size_t)M * ld;
    if (K <= 0) {
        if (mode != LJ_GRAD_ACCUMULATE) memset(out, 0, (size_t)M * N * sizeof(float));
        return;
    }
    decode_scaled(A, a, M, K, fa, a_sinv, a_blocks);
    decode_scaled(B, b, N, K, fb, b_sinv, b_blocks);
    lj_cpu_sgemm(0, 1, M, N, ld, 1.0f, A, ld, B, ld, mode == LJ_GRAD_ACCUMULATE ? 1.0f : 0.0f, out, N);
}

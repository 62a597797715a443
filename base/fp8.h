/* fp8.h: the two 8-bit floating-point formats of Hopper's tensor cores (the OCP "OFP8"
 * formats; NVIDIA's __nv_fp8_e4m3 and __nv_fp8_e5m2), their conversion from and to fp32, and
 * the per-tensor scale formulas of TransformerEngine's FP8 recipes. Written once for the host
 * and, through LJ_FP8_HD, for CUDA device code, so that both backends compute bit-identical
 * scales; the CPU backend also quantizes with lj_fp8_from_f32 (the emulation), the CUDA backend
 * with the hardware's cvt instruction, and the op harness checks the two against each other.
 *
 *   E4M3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; NaN = S.1111.111;
 *         largest finite 448 (0x7E), smallest subnormal 2^-9.
 *   E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits; infinities S.11111.00, NaN
 *         S.11111.{01,10,11}; largest finite 57344 (0x7B), smallest subnormal 2^-16.
 *
 * Conversion from fp32 rounds to nearest, ties to even, and saturates: a value whose rounded
 * magnitude exceeds the largest finite one (infinities included) becomes +-max; NaN becomes the
 * canonical NaN 0x7F (cvt.rn.satfinite.{e4m3,e5m2}x2.f32, PTX ISA "cvt"; cuda_fp8.h
 * __nv_cvt_float_to_fp8 with __NV_SATFINITE). Zero keeps its sign. docs/reference.md, section
 * "FP8 recipes", has the recipes; the scale formulas are cited beside each function.
 */
#ifndef LJ_FP8_H
#define LJ_FP8_H

#include <math.h>
#include <stdint.h>
#include <float.h>

#ifdef __CUDACC__
#define LJ_FP8_HD __host__ __device__ static inline
#else
#define LJ_FP8_HD static inline
#endif

typedef enum {
    LJ_FP8_E4M3 = 0,
    LJ_FP8_E5M2 = 1,
} lj_fp8_format;

/* "e4m3" or "e5m2". */
const char *lj_fp8_format_name(lj_fp8_format f);

/* Dequantization factors (scale_inv) are kept one per 16 bytes: tensor t's at
 * scale_inv[LJ_FP8_SCALE_INV_STRIDE * t]. cuBLASLt reads them through its A/B scale pointers,
 * which must be 16-byte aligned (cuBLASLt 13.1 on an H200 answers NOT_SUPPORTED otherwise;
 * bench/results/2026-12-01-h200-fp8.md). */
#define LJ_FP8_SCALE_INV_STRIDE 4

/* The largest finite value: 448 (E4M3) or 57344 (E5M2). */
LJ_FP8_HD float lj_fp8_max(lj_fp8_format f) { return f == LJ_FP8_E4M3 ? 448.0f : 57344.0f; }

/* Row stride, in elements (= bytes), of an FP8 matrix with `cols` columns: cols rounded up to
 * 16, the alignment cuBLASLt's FP8 GEMM requires of the leading dimension. The padding
 * columns hold zeros, so a GEMM may run over the padded K. */
LJ_FP8_HD int lj_fp8_ld(int cols) { return (cols + 15) / 16 * 16; }

/* The blockwise recipe's tiles (DeepSeek-V3, section 3.3.1; TransformerEngine's Float8BlockScaling):
 * LJ_FP8_BLOCK consecutive elements along a GEMM's reduction dimension K share one fp32 scale
 * (a "1x128 tile", activations and gradients), and a weight's LJ_FP8_BLOCK x LJ_FP8_BLOCK
 * blocks one each. The last tile of a row (the last block of a row or column of blocks) is
 * partial when the dimension is not a multiple of 128: it covers the elements that exist.
 *
 * Scale layouts (the dequantization factors scale_inv = 1/scale, f32, cuBLASLt's
 * CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F and _BLK128x128_32F, TransformerEngine's
 * Float8BlockQuantizer.get_scale_shape), for an FP8 matrix q[rows, ld(cols)] quantized along
 * its columns (cols = that GEMM's K):
 *   tiles   [ceil(cols/128), lj_fp8_round4(rows)]: tile (r, c/128) at (c/128) * round4(rows) + r,
 *           the rows contiguous, padded to a multiple of 4 (16 bytes) with 1s;
 *   blocks  [ceil(rows/128), lj_fp8_round4(ceil(cols/128))]: block (r/128, c/128) at
 *           (r/128) * round4(ceil(cols/128)) + c/128, padded likewise.
 * The transpose of a block-scaled matrix is block-scaled with the same codes and the transposed
 * grid (its own padding). */
#define LJ_FP8_BLOCK 128

/* ceil(n / 128): tiles along a dimension of n elements. */
LJ_FP8_HD int lj_fp8_nblocks(int n) { return (n + LJ_FP8_BLOCK - 1) / LJ_FP8_BLOCK; }

/* n rounded up to a multiple of 4 (the scale tensors' contiguous dimension). */
LJ_FP8_HD int lj_fp8_round4(int n) { return (n + 3) / 4 * 4; }

/* f32 values of the tile scales of q[rows, ld(cols)] (1x128 along cols) and of its block scales. */
LJ_FP8_HD int64_t lj_fp8_tile_scales_numel(int rows, int cols) {
    return (int64_t)lj_fp8_nblocks(cols) * lj_fp8_round4(rows);
}
LJ_FP8_HD int64_t lj_fp8_block_scales_numel(int rows, int cols) {
    return (int64_t)lj_fp8_nblocks(rows) * lj_fp8_round4(lj_fp8_nblocks(cols));
}

/* The index of element (r, c)'s scale in those layouts. */
LJ_FP8_HD int64_t lj_fp8_tile_scale_index(int rows, int r, int c) {
    return (int64_t)(c / LJ_FP8_BLOCK) * lj_fp8_round4(rows) + r;
}
LJ_FP8_HD int64_t lj_fp8_block_scale_index(int cols, int r, int c) {
    return (int64_t)(r / LJ_FP8_BLOCK) * lj_fp8_round4(lj_fp8_nblocks(cols)) + c / LJ_FP8_BLOCK;
}

/* fp32 -> FP8 code, round to nearest even with saturation (see the top of the file). */
LJ_FP8_HD uint8_t lj_fp8_from_f32(float f, lj_fp8_format fmt) {
    const int mbits = fmt == LJ_FP8_E4M3 ? 3 : 2, bias = fmt == LJ_FP8_E4M3 ? 7 : 15;
    const int maxcode = fmt == LJ_FP8_E4M3 ? 0x7E : 0x7B;
    if (isnan(f)) return 0x7F;
    const uint8_t sign = signbit(f) ? 0x80 : 0;
    const float a = fabsf(f);
    if (isinf(a)) return sign | (uint8_t)maxcode;
    int e;
    (void)frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1): the unbiased exponent is e - 1 */
    e -= 1;
    const int emin = 1 - bias; /* the smallest normal exponent */
    int code;
    if (a == 0.0f) {
        code = 0;
    } else if (e < emin) {
        /* subnormal: multiples of 2^(emin - mbits); the integer is the code itself (it may round
         * up to 2^mbits, which is the smallest normal's code) */
        code = (int)rintf(ldexpf(a, mbits - emin));
    } else {
        int n = (int)rintf(ldexpf(a, mbits - e)); /* in [2^mbits, 2^(mbits+1)] */
        if (n == (2 << mbits)) {
            n = 1 << mbits;
            e += 1;
        }
        const int ef = e + bias;
        code = ef > 31 ? maxcode + 1 : (ef << mbits) | (n - (1 << mbits));
    }
    if (code > maxcode) code = maxcode;
    return sign | (uint8_t)code;
}

/* FP8 code -> fp32 (exact: every FP8 value is an fp32 value). */
LJ_FP8_HD float lj_fp8_to_f32(uint8_t v, lj_fp8_format fmt) {
    const int mbits = fmt == LJ_FP8_E4M3 ? 3 : 2, bias = fmt == LJ_FP8_E4M3 ? 7 : 15;
    const int ebits = 7 - mbits;
    const float sign = (v & 0x80) ? -1.0f : 1.0f;
    const int ef = (v >> mbits) & ((1 << ebits) - 1), mant = v & ((1 << mbits) - 1);
    if (fmt == LJ_FP8_E4M3 && (v & 0x7F) == 0x7F) return NAN;
    if (fmt == LJ_FP8_E5M2 && ef == 31) return mant ? NAN : sign * INFINITY;
    if (ef == 0) return sign * ldexpf((float)mant, 1 - bias - mbits);
    return sign * ldexpf((float)((1 << mbits) + mant), ef - bias - mbits);
}

/* Current (tensorwise) scaling: the scale q = fp8(x * scale) uses, from this tensor's amax
 * (the blockwise recipe applies it to each tile's or block's own amax).
 * scale = fp8_max / amax; 1 when amax is 0, infinite or NaN (nothing to scale by); FLT_MAX
 * when the quotient overflows. Source: TransformerEngine, Float8CurrentScaling
 * (transformer_engine/common/recipe/current_scaling.cu, compute_scale_from_amax, with
 * amax_epsilon 0 and no power-of-2 rounding). */
LJ_FP8_HD float lj_fp8_current_scale(float amax, float fp8_max) {
    if (!(amax > 0.0f) || isinf(amax)) return 1.0f;
    float s = fp8_max / amax;
    if (isinf(s)) s = FLT_MAX;
    return s;
}

/* Delayed scaling: the next scale from the amax chosen from the history (its max, or the most
 * recent entry), scaled_max = fp8_max / 2^margin: scaled_max / amax when amax is finite and
 * positive, else the previous scale; FLT_MAX when the quotient overflows. Source:
 * TransformerEngine, DelayedScaling (transformer_engine/common/recipe/delayed_scaling.cu,
 * kernel amax_and_scale_update). */
LJ_FP8_HD float lj_fp8_delayed_scale(float amax, float scaled_max, float previous) {
    float s = (isfinite(amax) && amax > 0.0f) ? scaled_max / amax : previous;
    if (isinf(s)) s = FLT_MAX;
    return s;
}

/* Delayed scaling's update of tensor t's column of an amax history h [H, num] (row 0 the newest;
 * TransformerEngine's amax_and_scale_update): rolls it by one row (row i takes row i+1, the last
 * row the old row 0, row 0 becomes 0, ready to record) and returns the amax the next scale uses:
 * the old history's max (fmaxf, which passes over NaN) when algo_max, else its row 0. */
LJ_FP8_HD float lj_fp8_roll_history(float *h, int num, int H, int t, int algo_max) {
    const float last = h[t];
    float amax = 0.0f;
    for (int i = 0; i < H; i++) {
        const float a = i < H - 1 ? h[(int64_t)(i + 1) * num + t] : last;
        amax = fmaxf(amax, a);
        h[(int64_t)i * num + t] = i > 0 ? a : 0.0f;
    }
    return algo_max ? amax : last;
}

/* |x| as the bits of a non-negative fp32, whose unsigned order is the order of the values with
 * NaN above +inf: the amax reductions of both backends take the maximum of these, so that a NaN
 * anywhere in a tensor makes its amax NaN (the overflow the run reports). */
LJ_FP8_HD uint32_t lj_fp8_abs_bits(float x) {
    union {
        float f;
        uint32_t u;
    } v;
    v.f = x;
    return v.u & 0x7FFFFFFFu;
}

#endif

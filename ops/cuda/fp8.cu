/* fp8.cu: the CUDA backend's FP8 casts (ops.h "FP8"): amax, the scaled saturating cast with
 * its transpose (of bf16, or of f32 rounded to bf16 first: the *_f32 forms), and delayed scaling's
 * history update. The cast is the hardware's
 * cvt.rn.satfinite (cuda_fp8.h __nv_cvt_float_to_fp8 with __NV_SATFINITE); the scale formulas
 * are base/fp8.h's, shared with the CPU emulation, so codes, amaxes and scales equal the CPU
 * backend's bit for bit; the blockwise recipe's tile and block casts likewise (at the end). The
 * FP8 GEMM is matmul.cu's (cuBLASLt). Every kernel is
 * capturable: the scales live in device memory and nothing synchronises with the host. */
#include "ops/cuda/cuda_common.h"

#include <cuda_fp8.h>

/* The cast of one fp32 to an FP8 code. */
static __device__ __forceinline__ uint8_t to_fp8(float v, lj_fp8_format fmt) {
    return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, fmt == LJ_FP8_E4M3 ? __NV_E4M3 : __NV_E5M2);
}

/* The largest lj_fp8_abs_bits over the block (every thread passes its own). Result in thread 0. */
static __device__ __forceinline__ uint32_t block_max_bits(uint32_t v) {
    __shared__ uint32_t warp_max[32];
    for (int o = 16; o > 0; o >>= 1) {
        const uint32_t w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    const int tid = threadIdx.x + threadIdx.y * blockDim.x, lane = tid & 31, warp = tid >> 5;
    const int warps = (blockDim.x * blockDim.y + 31) >> 5;
    if (lane == 0) warp_max[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? warp_max[lane] : 0u;
        for (int o = 16; o > 0; o >>= 1) {
            const uint32_t w = __shfl_xor_sync(0xffffffffu, v, o);
            v = w > v ? w : v;
        }
    }
    return v;
}

/* The value a cast reads of its input x[i]: a bf16 as it is; an f32 as it is, or rounded to bf16
 * first when round_bf16 (ops.h fp8_quantize_f32's `via`: the values the param copy would hold). */
static __device__ __forceinline__ float cast_value(lj_bf16 x, bool) { return __bfloat162float(x); }
static __device__ __forceinline__ float cast_value(float x, bool round_bf16) {
    return round_bf16 ? __bfloat162float(__float2bfloat16_rn(x)) : x;
}

/* 8 consecutive values as cast_value reads them (one 16-byte load of bf16, two of f32; p 16-byte
 * aligned). */
static __device__ __forceinline__ void cast_values8(float *v, const lj_bf16 *p, bool) { lj_load8(v, p); }
static __device__ __forceinline__ void cast_values8(float *v, const float *p, bool round_bf16) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    for (int j = 0; j < 8; j++) v[j] = cast_value(v[j], round_bf16);
}

template <typename X>
__global__ void fp8_amax_kernel(uint32_t *amax_bits, const X *x, int64_t n, bool round_bf16) {
    uint32_t m = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const uint32_t b = lj_fp8_abs_bits(cast_value(x[i], round_bf16));
        m = b > m ? b : m;
    }
    m = block_max_bits(m);
    if (threadIdx.x == 0 && m) atomicMax(amax_bits, m);
}

/* The same over n8 groups of 8 (16-byte loads; x 16-byte aligned). */
template <typename X>
__global__ void fp8_amax8_kernel(uint32_t *amax_bits, const X *x, int64_t n8, bool round_bf16) {
    uint32_t m = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
        float v[8];
        cast_values8(v, x + 8 * i, round_bf16);
        for (int j = 0; j < 8; j++) {
            const uint32_t b = lj_fp8_abs_bits(v[j]);
            m = b > m ? b : m;
        }
    }
    m = block_max_bits(m);
    if (threadIdx.x == 0 && m) atomicMax(amax_bits, m);
}

template <typename X>
static void launch_amax(float *amax, const X *x, int64_t n, bool round_bf16) {
    LJ_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), lj_cuda_stream()), "cudaMemsetAsync in fp8_amax");
    if (n <= 0) return;
    if (n % 8 == 0 && lj_cuda_aligned16(x, x, x)) {
        fp8_amax8_kernel<X><<<lj_cuda_blocks(n / 8, 256), 256, 0, lj_cuda_stream()>>>((uint32_t *)amax, x, n / 8,
                                                                                      round_bf16);
        LJ_CUDA_LAUNCHED("fp8_amax8_kernel");
        return;
    }
    fp8_amax_kernel<X><<<lj_cuda_blocks(n, 256), 256, 0, lj_cuda_stream()>>>((uint32_t *)amax, x, n, round_bf16);
    LJ_CUDA_LAUNCHED("fp8_amax_kernel");
}

extern "C" void lj_cuda_fp8_amax(float *amax, const void *x, int64_t n) {
    launch_amax(amax, (const lj_bf16 *)x, n, false);
}

extern "C" void lj_cuda_fp8_amax_f32(float *amax, const float *x, int64_t n, lj_dtype via) {
    LJ_ASSERT(via == LJ_DTYPE_BF16 || via == LJ_DTYPE_F32, "fp8_amax_f32: via %s", lj_dtype_name(via));
    launch_amax(amax, x, n, via == LJ_DTYPE_BF16);
}

/* One block per 32 x 32 tile of the padded matrix [ld(rows), ld(cols)] (threads 32 x 8, 4 rows
 * each): reads x (zero outside [rows, cols]; cast_value), writes q's rows < rows (padding columns
 * zero) and q_t's rows < cols (padding columns zero), and under delayed scaling the tile's amax. */
#define FP8_TILE 32
template <typename X>
__global__ void fp8_quantize_kernel(uint8_t *q, uint8_t *q_t, const X *x, int rows, int cols, bool round_bf16,
                                    lj_fp8_format fmt, float *scale, float *scale_inv, float *amax, int current) {
    __shared__ uint8_t tile[FP8_TILE][FP8_TILE + 4];
    const float fmax = lj_fp8_max(fmt);
    const float s = current ? lj_fp8_current_scale(*amax, fmax) : *scale;
    if (current && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
        *scale = s;
        *scale_inv = 1.0f / s;
    }
    const int ld = lj_fp8_ld(cols), ld_t = lj_fp8_ld(rows);
    const int c0 = blockIdx.x * FP8_TILE, r0 = blockIdx.y * FP8_TILE;
    uint32_t m = 0;
    for (int k = threadIdx.y; k < FP8_TILE; k += blockDim.y) {
        const int r = r0 + k, c = c0 + threadIdx.x;
        float v = 0.0f;
        if (r < rows && c < cols) v = cast_value(x[(int64_t)r * cols + c], round_bf16);
        const uint32_t b = lj_fp8_abs_bits(v);
        m = b > m ? b : m;
        const uint8_t code = to_fp8(__fmul_rn(v, s), fmt);
        tile[k][threadIdx.x] = code;
        if (q && r < rows && c < ld) q[(int64_t)r * ld + c] = code;
    }
    if (q_t) {
        __syncthreads();
        for (int k = threadIdx.y; k < FP8_TILE; k += blockDim.y) {
            const int c = c0 + k, r = r0 + threadIdx.x; /* q_t[c, r] = tile[r - r0][c - c0] */
            if (c < cols && r < ld_t) q_t[(int64_t)c * ld_t + r] = tile[threadIdx.x][k];
        }
    }
    if (!current && amax) {
        m = block_max_bits(m);
        if (threadIdx.x == 0 && threadIdx.y == 0 && m) atomicMax((uint32_t *)amax, m);
    }
}

/* The 8 values of row r at column c the vector cast reads: x [rows, cols] (cast_values8), or
 * SWIGLU: bf16(lj_swiglu_value(gate, up)) of gate_up [rows, 2 cols] (gate at column c, up at cols
 * + c), the value swiglu_forward stores, written to h when h is not NULL (bf16 only). */
template <bool SWIGLU>
static __device__ __forceinline__ void cast_input8(float *v, const lj_bf16 *x, lj_bf16 *h, int r, int c, int cols,
                                                   bool round_bf16) {
    if (SWIGLU) {
        float g[8], u[8];
        const lj_bf16 *row = x + (int64_t)r * 2 * cols;
        lj_load8(g, row + c);
        lj_load8(u, row + cols + c);
        for (int j = 0; j < 8; j++) v[j] = __bfloat162float(__float2bfloat16_rn(lj_swiglu_value(g[j], u[j])));
        if (h) lj_store8(h + (int64_t)r * cols + c, v); /* exact: v is bf16 already */
    } else {
        cast_values8(v, x + (int64_t)r * cols + c, round_bf16);
    }
}
template <bool SWIGLU>
static __device__ __forceinline__ void cast_input8(float *v, const float *x, lj_bf16 *h, int r, int c, int cols,
                                                   bool round_bf16) {
    (void)h; /* no SwiGLU over f32 (fp8_quantize_f32 only) */
    cast_values8(v, x + (int64_t)r * cols + c, round_bf16);
}

/* The vector form, for cols a multiple of 8 and x 16-byte aligned: one block of 256 threads per
 * 64 x 64 tile of the padded matrix; each thread reads 8 values (16 bytes of bf16, 32 of f32) of a
 * row and writes 8 codes (8 bytes) of q, then 8 consecutive codes of a q_t row from the tile in
 * shared memory. Same codes, padding and amax as fp8_quantize_kernel.
 * SWIGLU (X bf16): the cast fused into its producer, x being gate_up and the values cast_input8's.
 * Delayed scaling only (current 0). */
#define FP8_VTILE 64
template <bool SWIGLU, typename X>
__global__ void __launch_bounds__(256) fp8_quantize8_kernel(uint8_t *q, uint8_t *q_t, const X *x, lj_bf16 *h,
                                                            int rows, int cols, bool round_bf16, lj_fp8_format fmt,
                                                            float *scale, float *scale_inv, float *amax, int current) {
    __shared__ uint32_t tile[FP8_VTILE][FP8_VTILE / 4 + 1]; /* codes [r][c], 4 per word; +1: fewer conflicts */
    const float fmax = lj_fp8_max(fmt);
    const float s = current ? lj_fp8_current_scale(*amax, fmax) : *scale;
    if (current && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
        *scale = s;
        *scale_inv = 1.0f / s;
    }
    const int ld = lj_fp8_ld(cols), ld_t = lj_fp8_ld(rows);
    const int c0 = blockIdx.x * FP8_VTILE, r0 = blockIdx.y * FP8_VTILE;
    const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3; /* 8 groups of 8 columns, 32 rows */
    uint32_t m = 0;
    for (int k = ty; k < FP8_VTILE; k += 32) {
        const int r = r0 + k, c = c0 + 8 * tx;
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (r < rows && c < cols) cast_input8<SWIGLU>(v, x, h, r, c, cols, round_bf16);
        uint32_t w[2] = {0, 0};
        for (int j = 0; j < 8; j++) {
            const uint32_t b = lj_fp8_abs_bits(v[j]);
            m = b > m ? b : m;
            w[j >> 2] |= (uint32_t)to_fp8(__fmul_rn(v[j], s), fmt) << (8 * (j & 3));
        }
        tile[k][2 * tx] = w[0];
        tile[k][2 * tx + 1] = w[1];
        if (q && r < rows && c < ld) *(uint2 *)(q + (int64_t)r * ld + c) = make_uint2(w[0], w[1]);
    }
    if (q_t) {
        __syncthreads();
        const uint8_t *t8 = (const uint8_t *)tile;
        const int row_bytes = (FP8_VTILE / 4 + 1) * 4;
        for (int k = ty; k < FP8_VTILE; k += 32) { /* k: the tile's column, q_t's row c0 + k */
            const int c = c0 + k, r = r0 + 8 * tx;
            if (c >= cols || r >= ld_t) continue;
            uint32_t w[2] = {0, 0};
            for (int j = 0; j < 8; j++) w[j >> 2] |= (uint32_t)t8[(8 * tx + j) * row_bytes + k] << (8 * (j & 3));
            *(uint2 *)(q_t + (int64_t)c * ld_t + r) = make_uint2(w[0], w[1]);
        }
    }
    if (!current && amax) {
        m = block_max_bits(m);
        if (threadIdx.x == 0 && m) atomicMax((uint32_t *)amax, m);
    }
}

template <typename X>
static void launch_quantize(void *q, void *q_t, const X *x, int rows, int cols, bool round_bf16, lj_fp8_format fmt,
                            const lj_fp8_scaling *sc) {
    if (rows <= 0 || cols <= 0) return;
    if (cols % 8 == 0 && lj_cuda_aligned16(x, q, q_t)) {
        const dim3 grid((unsigned)((lj_fp8_ld(cols) + FP8_VTILE - 1) / FP8_VTILE),
                        (unsigned)((lj_fp8_ld(rows) + FP8_VTILE - 1) / FP8_VTILE));
        fp8_quantize8_kernel<false, X><<<grid, 256, 0, lj_cuda_stream()>>>((uint8_t *)q, (uint8_t *)q_t, x, NULL, rows,
                                                                           cols, round_bf16, fmt, sc->scale,
                                                                           sc->scale_inv, sc->amax, sc->current);
        LJ_CUDA_LAUNCHED("fp8_quantize8_kernel");
        return;
    }
    const dim3 block(FP8_TILE, 8);
    const dim3 grid((unsigned)((lj_fp8_ld(cols) + FP8_TILE - 1) / FP8_TILE),
                    (unsigned)((lj_fp8_ld(rows) + FP8_TILE - 1) / FP8_TILE));
    fp8_quantize_kernel<X><<<grid, block, 0, lj_cuda_stream()>>>((uint8_t *)q, (uint8_t *)q_t, x, rows, cols,
                                                                 round_bf16, fmt, sc->scale, sc->scale_inv, sc->amax,
                                                                 sc->current);
    LJ_CUDA_LAUNCHED("fp8_quantize_kernel");
}

extern "C" void lj_cuda_fp8_quantize(void *q, void *q_t, const void *x, int rows, int cols, lj_fp8_format fmt,
                                     const lj_fp8_scaling *sc) {
    launch_quantize(q, q_t, (const lj_bf16 *)x, rows, cols, false, fmt, sc);
}

extern "C" void lj_cuda_fp8_quantize_f32(void *q, void *q_t, const float *x, int rows, int cols, lj_dtype via,
                                         lj_fp8_format fmt, const lj_fp8_scaling *sc) {
    LJ_ASSERT(via == LJ_DTYPE_BF16 || via == LJ_DTYPE_F32, "fp8_quantize_f32: via %s", lj_dtype_name(via));
    launch_quantize(q, q_t, x, rows, cols, via == LJ_DTYPE_BF16, fmt, sc);
}

/* One block of 256 threads per 64 x 64 tile of q_t's padded [cols, ld(rows)]: each thread reads 4
 * codes (a word) of q's rows, and writes 4 consecutive codes of a q_t row from the tile in shared
 * memory; rows of q beyond `rows` and its columns beyond `cols` read as zero (q_t's padding). */
#define FP8_TTILE 64
__global__ void __launch_bounds__(256) fp8_transpose_kernel(uint8_t *q_t, const uint8_t *q, int rows, int cols) {
    __shared__ uint8_t tile[FP8_TTILE][FP8_TTILE + 4];
    const int ld = lj_fp8_ld(cols), ld_t = lj_fp8_ld(rows);
    const int c0 = blockIdx.x * FP8_TTILE, r0 = blockIdx.y * FP8_TTILE;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4; /* 16 words of a row, 16 rows */
    for (int k = ty; k < FP8_TTILE; k += 16) {
        const int r = r0 + k, c = c0 + 4 * tx;
        const uint32_t w = r < rows && c < ld ? *(const uint32_t *)(q + (int64_t)r * ld + c) : 0u;
        for (int j = 0; j < 4; j++) tile[k][4 * tx + j] = c + j < cols ? (uint8_t)(w >> (8 * j)) : 0;
    }
    __syncthreads();
    for (int k = ty; k < FP8_TTILE; k += 16) { /* k: the tile's column, q_t's row c0 + k */
        const int c = c0 + k, r = r0 + 4 * tx;
        if (c >= cols || r >= ld_t) continue;
        uint32_t w = 0;
        for (int j = 0; j < 4; j++) w |= (uint32_t)tile[4 * tx + j][k] << (8 * j);
        *(uint32_t *)(q_t + (int64_t)c * ld_t + r) = w;
    }
}

extern "C" void lj_cuda_fp8_transpose(void *q_t, const void *q, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    LJ_ASSERT((((uintptr_t)q | (uintptr_t)q_t) & 3) == 0, "fp8_transpose: q and q_t must be 4-byte aligned");
    const dim3 grid((unsigned)((cols + FP8_TTILE - 1) / FP8_TTILE),
                    (unsigned)((lj_fp8_ld(rows) + FP8_TTILE - 1) / FP8_TTILE));
    fp8_transpose_kernel<<<grid, 256, 0, lj_cuda_stream()>>>((uint8_t *)q_t, (const uint8_t *)q, rows, cols);
    LJ_CUDA_LAUNCHED("fp8_transpose_kernel");
}

extern "C" void lj_cuda_fp8_swiglu_quantize(void *h, int write_h, void *q, void *q_t, const void *gate_up, int N,
                                            int I, lj_fp8_format fmt, const lj_fp8_scaling *sc) {
    LJ_ASSERT(!sc->current, "fp8_swiglu_quantize: delayed scaling only (current scaling needs the amax first)");
    if (N <= 0 || I <= 0) return;
    if (I % 8 != 0 || !lj_cuda_aligned16(h, gate_up, NULL) || !lj_cuda_aligned16(q, q_t, NULL)) {
        lj_cuda_swiglu_forward(h, gate_up, N, I);
        lj_cuda_fp8_quantize(q, q_t, h, N, I, fmt, sc);
        return;
    }
    const dim3 grid((unsigned)((lj_fp8_ld(I) + FP8_VTILE - 1) / FP8_VTILE),
                    (unsigned)((lj_fp8_ld(N) + FP8_VTILE - 1) / FP8_VTILE));
    fp8_quantize8_kernel<true, lj_bf16><<<grid, 256, 0, lj_cuda_stream()>>>((uint8_t *)q, (uint8_t *)q_t,
                                                                                (const lj_bf16 *)gate_up,
                                                                                write_h ? (lj_bf16 *)h : NULL, N, I,
                                                                                false, fmt, sc->scale, sc->scale_inv,
                                                                                sc->amax, 0);
    LJ_CUDA_LAUNCHED("fp8_quantize8_kernel<swiglu>");
}

/* h = the SwiGLU of gate_up (swiglu_forward's values) and the amax of h, over groups of 8 (I a
 * multiple of 8, gate_up and h 16-byte aligned). */
__global__ void fp8_swiglu_amax8_kernel(uint32_t *amax_bits, lj_bf16 *h, const lj_bf16 *gate_up, int N, int I) {
    const int64_t per_row = I / 8, n8 = (int64_t)N * per_row;
    uint32_t m = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / per_row, c = (i % per_row) * 8;
        float g[8], u[8], v[8];
        lj_load8(g, gate_up + r * 2 * I + c);
        lj_load8(u, gate_up + r * 2 * I + I + c);
        for (int j = 0; j < 8; j++) {
            v[j] = __bfloat162float(__float2bfloat16_rn(lj_swiglu_value(g[j], u[j])));
            const uint32_t b = lj_fp8_abs_bits(v[j]);
            m = b > m ? b : m;
        }
        lj_store8(h + r * I + c, v);
    }
    m = block_max_bits(m);
    if (threadIdx.x == 0 && m) atomicMax(amax_bits, m);
}

extern "C" void lj_cuda_fp8_swiglu_amax(float *amax, void *h, const void *gate_up, int N, int I) {
    if (N <= 0 || I <= 0 || I % 8 != 0 || !lj_cuda_aligned16(h, gate_up, NULL)) {
        lj_cuda_swiglu_forward(h, gate_up, N, I);
        lj_cuda_fp8_amax(amax, h, (int64_t)N * I);
        return;
    }
    LJ_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), lj_cuda_stream()), "cudaMemsetAsync in fp8_swiglu_amax");
    fp8_swiglu_amax8_kernel<<<lj_cuda_blocks((int64_t)N * I / 8, 256), 256, 0, lj_cuda_stream()>>>(
        (uint32_t *)amax, (lj_bf16 *)h, (const lj_bf16 *)gate_up, N, I);
    LJ_CUDA_LAUNCHED("fp8_swiglu_amax8_kernel");
}

/* ---- the cast fused into the RMSNorm (ops.h fp8_rmsnorm_quantize) --------------------------
 * Every kernel takes rows of C = 8k elements at 16-byte aligned addresses, one warp per row with
 * the row arithmetic of rmsnorm.cu's vector kernels (cuda_common.h lj_rmsnorm_*), so that rstd,
 * res_out and out are rmsnorm_forward's (residual_rmsnorm_forward's) bits and the codes
 * fp8_quantize's of out. x is re-read for the values after its sum of squares, as rmsnorm.cu
 * does (the warp's own row, from L1 or L2): one pass over x in HBM. */

#define NORM_ROWS 32                /* rows per block of the cast: q_t gets 32-byte runs (a sector) */
#define NORM_THREADS 1024           /* a warp per row */
#define NORM_MAX_C 7168             /* the widest row whose codes tile fits in shared memory */
#define NORM_TILE_LD(C) ((C) + 8)   /* the tile's row stride: 8-byte rows, no bank conflicts */
#define NORM_SMALL_ELEMS 65536      /* current scaling in one block up to this many elements... */
#define NORM_SMALL_ROWS 64          /* ... and rows (serving's decode batches) */

/* The row's values out = bf16(x r w) at columns 8 lane + 256 i, each cast with s: written to out
 * (if not NULL), as codes to qrow (if not NULL) and to trow (the codes tile's row, if not NULL);
 * the largest lj_fp8_abs_bits of the values raises m. CAST 0: the values' amax only. */
template <bool CAST>
static __device__ __forceinline__ void norm_row_values(uint8_t *qrow, uint8_t *trow, lj_bf16 *out, const lj_bf16 *x,
                                                       const lj_bf16 *w, float r, int C, int lane, float s,
                                                       lj_fp8_format fmt, uint32_t &m) {
    for (int c = lane * 8; c < C; c += 256) {
        float v[8];
        lj_rmsnorm_scale8(v, x + c, w + c, r);
        if (out) lj_store8(out + c, v);
        uint32_t wd[2] = {0, 0};
        for (int j = 0; j < 8; j++) {
            v[j] = __bfloat162float(__float2bfloat16_rn(v[j])); /* the value the act dtype stores */
            const uint32_t b = lj_fp8_abs_bits(v[j]);
            m = b > m ? b : m;
            if (CAST) wd[j >> 2] |= (uint32_t)to_fp8(__fmul_rn(v[j], s), fmt) << (8 * (j & 3));
        }
        if (!CAST) continue;
        if (qrow) *(uint2 *)(qrow + c) = make_uint2(wd[0], wd[1]);
        if (trow) *(uint2 *)(trow + c) = make_uint2(wd[0], wd[1]);
    }
    if (CAST && qrow && lane == 0 && lj_fp8_ld(C) > C) *(uint2 *)(qrow + C) = make_uint2(0, 0); /* q's padding */
}

/* rstd of row `row` (RESIDUAL: after writing res_out = bf16(res_in + y); x is then res_out). */
template <bool RESIDUAL>
static __device__ __forceinline__ float norm_row_rstd(lj_bf16 *res_out, const lj_bf16 *res_in, const lj_bf16 *y,
                                                      int64_t off, int C, float eps, int lane) {
    const float ss = RESIDUAL ? lj_rmsnorm_residual_sumsq8(res_out + off, res_in + off, y + off, C, lane)
                              : lj_rmsnorm_sumsq8(res_in + off, C, lane);
    return lj_rmsnorm_rstd(ss, C, eps);
}

/* The norm and its cast: one block of NORM_THREADS per NORM_ROWS rows. With q_t the codes also go
 * to a tile in dynamic shared memory [NORM_ROWS][NORM_TILE_LD(C)] (zero for rows >= N), from
 * which the block writes q_t's columns [r0, r0 + NORM_ROWS) of every row c < C (up to ld(N)) in
 * 16-byte runs, each thread 4 rows of q_t at a time from 32-bit words of the tile (no bank
 * conflicts: consecutive threads read consecutive words).
 * Delayed scaling (current 0) reads *scale and raises *amax (when not NULL); current scaling (the
 * second pass, RESIDUAL false) takes the scale from the amax the first pass wrote. */
template <bool RESIDUAL>
__global__ void __launch_bounds__(NORM_THREADS)
    fp8_rmsnorm_kernel(uint8_t *q, uint8_t *q_t, lj_bf16 *out, float *rstd, lj_bf16 *res_out, const lj_bf16 *res_in,
                       const lj_bf16 *y, const lj_bf16 *w, int N, int C, float eps, lj_fp8_format fmt, float *scale,
                       float *scale_inv, float *amax, int current) {
    extern __shared__ uint8_t norm_tile[];
    const float s = current ? lj_fp8_current_scale(*amax, lj_fp8_max(fmt)) : *scale;
    if (current && blockIdx.x == 0 && threadIdx.x == 0) {
        *scale = s;
        *scale_inv = 1.0f / s;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tld = NORM_TILE_LD(C), ld = lj_fp8_ld(C);
    const int r0 = blockIdx.x * NORM_ROWS;
    uint32_t m = 0;
    for (int k = warp; k < NORM_ROWS; k += NORM_THREADS / 32) {
        const int row = r0 + k;
        uint8_t *trow = q_t ? norm_tile + (size_t)k * tld : NULL;
        if (row >= N) {
            if (trow)
                for (int c = lane * 8; c < C; c += 256) *(uint2 *)(trow + c) = make_uint2(0, 0);
            continue;
        }
        const int64_t off = (int64_t)row * C;
        const float r = norm_row_rstd<RESIDUAL>(res_out, res_in, y, off, C, eps, lane);
        if (lane == 0 && rstd) rstd[row] = r;
        norm_row_values<true>(q ? q + (int64_t)row * ld : NULL, trow, out ? out + off : NULL,
                              (RESIDUAL ? res_out : res_in) + off, w, r, C, lane, s, fmt, m);
    }
    if (q_t) { /* each thread: 4 columns, one word of the tile per row, transposed 4x4 bytes at a time */
        __syncthreads();
        const int ld_t = lj_fp8_ld(N), runs = ld_t - r0 >= NORM_ROWS ? 2 : 1; /* 16-byte runs of the 32 rows */
        for (int c = 4 * threadIdx.x; c < C; c += 4 * NORM_THREADS) {
            for (int h = 0; h < runs; h++) {
                uint32_t col[4][4]; /* [column][word]: rows 16 h + 4 i + (0..3) of column c + j */
                for (int i = 0; i < 4; i++) {
                    const uint8_t *t = norm_tile + (size_t)(16 * h + 4 * i) * tld + c;
                    const uint32_t w0 = *(const uint32_t *)t, w1 = *(const uint32_t *)(t + tld);
                    const uint32_t w2 = *(const uint32_t *)(t + 2 * tld), w3 = *(const uint32_t *)(t + 3 * tld);
                    /* lo0 = (w0.0, w1.0, w0.1, w1.1), lo1 the same of w2, w3; hi: bytes 2 and 3 */
                    const uint32_t lo0 = __byte_perm(w0, w1, 0x5140), lo1 = __byte_perm(w2, w3, 0x5140);
                    const uint32_t hi0 = __byte_perm(w0, w1, 0x7362), hi1 = __byte_perm(w2, w3, 0x7362);
                    col[0][i] = __byte_perm(lo0, lo1, 0x5410), col[1][i] = __byte_perm(lo0, lo1, 0x7632);
                    col[2][i] = __byte_perm(hi0, hi1, 0x5410), col[3][i] = __byte_perm(hi0, hi1, 0x7632);
                }
                for (int j = 0; j < 4; j++)
                    *(uint4 *)(q_t + (int64_t)(c + j) * ld_t + r0 + 16 * h) =
                        make_uint4(col[j][0], col[j][1], col[j][2], col[j][3]);
            }
        }
    }
    if (!current && amax) {
        m = block_max_bits(m);
        if (threadIdx.x == 0 && m) atomicMax((uint32_t *)amax, m);
    }
}

/* Current scaling's first pass: res_out, rstd and the amax of out (into amax_bits, zeroed
 * before), a warp per row, 8 rows per block. */
template <bool RESIDUAL>
__global__ void __launch_bounds__(256) fp8_rmsnorm_amax_kernel(uint32_t *amax_bits, float *rstd, lj_bf16 *res_out,
                                                               const lj_bf16 *res_in, const lj_bf16 *y,
                                                               const lj_bf16 *w, int N, int C, float eps) {
    const int lane = threadIdx.x & 31, row = blockIdx.x * 8 + (threadIdx.x >> 5);
    uint32_t m = 0;
    if (row < N) {
        const int64_t off = (int64_t)row * C;
        const float r = norm_row_rstd<RESIDUAL>(res_out, res_in, y, off, C, eps, lane);
        if (lane == 0) rstd[row] = r;
        norm_row_values<false>(NULL, NULL, NULL, (RESIDUAL ? res_out : res_in) + off, w, r, C, lane, 1.0f,
                               LJ_FP8_E4M3, m);
    }
    m = block_max_bits(m);
    if (threadIdx.x == 0 && m) atomicMax(amax_bits, m);
}

/* Current scaling over a few rows (N <= NORM_SMALL_ROWS, N C <= NORM_SMALL_ELEMS; q only) in one
 * block: the rows' norms and amax, then amax, scale and scale_inv, then the rows again (from L1)
 * cast. One kernel where the two passes take three (the amax's zeroing between them). */
template <bool RESIDUAL>
__global__ void __launch_bounds__(NORM_THREADS)
    fp8_rmsnorm_small_kernel(uint8_t *q, lj_bf16 *out, float *rstd, lj_bf16 *res_out, const lj_bf16 *res_in,
                             const lj_bf16 *y, const lj_bf16 *w, int N, int C, float eps, lj_fp8_format fmt,
                             float *scale, float *scale_inv, float *amax) {
    __shared__ float rows_r[NORM_SMALL_ROWS];
    __shared__ float block_s;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, ld = lj_fp8_ld(C);
    uint32_t m = 0;
    for (int row = warp; row < N; row += NORM_THREADS / 32) {
        const int64_t off = (int64_t)row * C;
        const float r = norm_row_rstd<RESIDUAL>(res_out, res_in, y, off, C, eps, lane);
        if (lane == 0) rstd[row] = rows_r[row] = r;
        norm_row_values<false>(NULL, NULL, NULL, (RESIDUAL ? res_out : res_in) + off, w, r, C, lane, 1.0f, fmt, m);
    }
    m = block_max_bits(m);
    if (threadIdx.x == 0) {
        const float a = __uint_as_float(m), s = lj_fp8_current_scale(a, lj_fp8_max(fmt));
        *amax = a;
        *scale = s;
        *scale_inv = 1.0f / s;
        block_s = s;
    }
    __syncthreads();
    const float s = block_s;
    for (int row = warp; row < N; row += NORM_THREADS / 32) {
        const int64_t off = (int64_t)row * C;
        norm_row_values<true>(q ? q + (int64_t)row * ld : NULL, NULL, out ? out + off : NULL,
                              (RESIDUAL ? res_out : res_in) + off, w, rows_r[row], C, lane, s, fmt, m);
    }
}

void lj_cuda_fp8_init(void) {
    LJ_CUDA_CHECK(cudaFuncSetAttribute(fp8_rmsnorm_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       NORM_ROWS * NORM_TILE_LD(NORM_MAX_C)),
                  "cudaFuncSetAttribute(fp8_rmsnorm_kernel)");
    LJ_CUDA_CHECK(cudaFuncSetAttribute(fp8_rmsnorm_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       NORM_ROWS * NORM_TILE_LD(NORM_MAX_C)),
                  "cudaFuncSetAttribute(fp8_rmsnorm_kernel<residual>)");
}

/* The cast kernel over all rows (x = res_in, or with y the residual form). */
static void launch_norm_cast(void *res_out, void *out, float *rstd, void *q, void *q_t, const void *res_in,
                             const void *y, const void *w, int N, int C, float eps, lj_fp8_format fmt,
                             const lj_fp8_scaling *sc, int current) {
    const unsigned blocks = (unsigned)((N + NORM_ROWS - 1) / NORM_ROWS);
    const size_t smem = q_t ? (size_t)NORM_ROWS * NORM_TILE_LD(C) : 0;
    if (y)
        fp8_rmsnorm_kernel<true><<<blocks, NORM_THREADS, smem, lj_cuda_stream()>>>(
            (uint8_t *)q, (uint8_t *)q_t, (lj_bf16 *)out, rstd, (lj_bf16 *)res_out, (const lj_bf16 *)res_in,
            (const lj_bf16 *)y, (const lj_bf16 *)w, N, C, eps, fmt, sc->scale, sc->scale_inv, sc->amax, current);
    else
        fp8_rmsnorm_kernel<false><<<blocks, NORM_THREADS, smem, lj_cuda_stream()>>>(
            (uint8_t *)q, (uint8_t *)q_t, (lj_bf16 *)out, rstd, NULL, (const lj_bf16 *)res_in, NULL,
            (const lj_bf16 *)w, N, C, eps, fmt, sc->scale, sc->scale_inv, sc->amax, current);
    LJ_CUDA_LAUNCHED("fp8_rmsnorm_kernel");
}

extern "C" void lj_cuda_fp8_rmsnorm_quantize(void *res_out, void *out, int write_out, float *rstd, void *q, void *q_t,
                                             const void *res_in, const void *y, const void *w, int N, int C,
                                             float eps, lj_fp8_format fmt, const lj_fp8_scaling *sc) {
    if (N <= 0 || C <= 0) return;
    const int vec = C % 8 == 0 && C <= NORM_MAX_C && lj_cuda_aligned16(out, res_in, w) &&
                    lj_cuda_aligned16(q, q_t, y) && lj_cuda_aligned16(res_out, NULL, NULL);
    if (!vec) { /* the norm, then the cast of its output */
        if (y) lj_cuda_residual_rmsnorm_forward(res_out, out, rstd, res_in, y, w, N, C, eps);
        else lj_cuda_rmsnorm_forward(out, rstd, res_in, w, N, C, eps);
        if (sc->current) lj_cuda_fp8_amax(sc->amax, out, (int64_t)N * C);
        lj_cuda_fp8_quantize(q, q_t, out, N, C, fmt, sc);
        return;
    }
    void *o = write_out ? out : NULL;
    if (!sc->current) {
        launch_norm_cast(res_out, o, rstd, q, q_t, res_in, y, w, N, C, eps, fmt, sc, 0);
        return;
    }
    if (!q_t && N <= NORM_SMALL_ROWS && (int64_t)N * C <= NORM_SMALL_ELEMS) {
        if (y)
            fp8_rmsnorm_small_kernel<true><<<1, NORM_THREADS, 0, lj_cuda_stream()>>>(
                (uint8_t *)q, (lj_bf16 *)o, rstd, (lj_bf16 *)res_out, (const lj_bf16 *)res_in, (const lj_bf16 *)y,
                (const lj_bf16 *)w, N, C, eps, fmt, sc->scale, sc->scale_inv, sc->amax);
        else
            fp8_rmsnorm_small_kernel<false><<<1, NORM_THREADS, 0, lj_cuda_stream()>>>(
                (uint8_t *)q, (lj_bf16 *)o, rstd, NULL, (const lj_bf16 *)res_in, NULL, (const lj_bf16 *)w, N, C, eps,
                fmt, sc->scale, sc->scale_inv, sc->amax);
        LJ_CUDA_LAUNCHED("fp8_rmsnorm_small_kernel");
        return;
    }
    /* two passes: res_out, rstd and the amax; then the cast from x (= res_out in the residual form) */
    LJ_CUDA_CHECK(cudaMemsetAsync(sc->amax, 0, sizeof(float), lj_cuda_stream()), "cudaMemsetAsync in fp8_rmsnorm");
    const unsigned blocks = (unsigned)((N + 7) / 8);
    if (y)
        fp8_rmsnorm_amax_kernel<true><<<blocks, 256, 0, lj_cuda_stream()>>>(
            (uint32_t *)sc->amax, rstd, (lj_bf16 *)res_out, (const lj_bf16 *)res_in, (const lj_bf16 *)y,
            (const lj_bf16 *)w, N, C, eps);
    else
        fp8_rmsnorm_amax_kernel<false><<<blocks, 256, 0, lj_cuda_stream()>>>(
            (uint32_t *)sc->amax, rstd, NULL, (const lj_bf16 *)res_in, NULL, (const lj_bf16 *)w, N, C, eps);
    LJ_CUDA_LAUNCHED("fp8_rmsnorm_amax_kernel");
    launch_norm_cast(NULL, o, rstd, q, q_t, y ? res_out : res_in, NULL, w, N, C, eps, fmt, sc, 1);
}

/* One thread per tensor; row i of the history is contiguous over the tensors (coalesced). */
__global__ void fp8_scale_update_kernel(float *h, float *scale, float *scale_inv, int num, int H, int num_first,
                                        float smax_first, float smax_rest, int algo_max) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= num) return;
    const float amax = lj_fp8_roll_history(h, num, H, t, algo_max);
    const float s = lj_fp8_delayed_scale(amax, t < num_first ? smax_first : smax_rest, scale[t]);
    scale[t] = s;
    scale_inv[LJ_FP8_SCALE_INV_STRIDE * t] = 1.0f / s;
}

extern "C" void lj_cuda_fp8_scale_update(float *amax_history, float *scale, float *scale_inv, int num,
                                         int history_len, int num_first, float scaled_max_first,
                                         float scaled_max_rest, int algo_max) {
    if (num <= 0) return;
    fp8_scale_update_kernel<<<(num + 127) / 128, 128, 0, lj_cuda_stream()>>>(
        amax_history, scale, scale_inv, num, history_len, num_first, scaled_max_first, scaled_max_rest, algo_max);
    LJ_CUDA_LAUNCHED("fp8_scale_update_kernel");
}

/* ---- the blockwise recipe: 1x128 tiles and 128x128 blocks (base/fp8.h layouts) --------------
 * Each tile's scale is lj_fp8_current_scale(its amax, fp8_max), as on the CPU; the codes are
 * cvt.rn.satfinite of x * s, so codes and factors equal the CPU emulation's bit for bit. */

/* The block's max of lj_fp8_abs_bits, in every thread. */
static __device__ __forceinline__ uint32_t block_max_bits_all(uint32_t v) {
    __shared__ uint32_t all;
    v = block_max_bits(v);
    if (threadIdx.x == 0 && threadIdx.y == 0) all = v;
    __syncthreads();
    v = all;
    __syncthreads();
    return v;
}

static __device__ __forceinline__ float bits_scale(uint32_t bits, lj_fp8_format fmt) {
    return lj_fp8_current_scale(__uint_as_float(bits), lj_fp8_max(fmt));
}

/* Rowwise 1x128 tiles: one block of 128 threads per (row r, tile b); grid (round4(rows), tiles).
 * Rows >= rows only write their factors' padding (1). */
__global__ void __launch_bounds__(128) fp8_tiles_row_kernel(uint8_t *q, float *sinv, const lj_bf16 *x, int rows,
                                                            int cols, lj_fp8_format fmt, float *amax) {
    const int r = blockIdx.x, b = blockIdx.y, c = b * LJ_FP8_BLOCK + threadIdx.x;
    const float v = r < rows && c < cols ? __bfloat162float(x[(int64_t)r * cols + c]) : 0.0f;
    const uint32_t m = block_max_bits_all(lj_fp8_abs_bits(v));
    const float s = bits_scale(m, fmt);
    const int ld = lj_fp8_ld(cols);
    if (r < rows && c < ld) q[(int64_t)r * ld + c] = to_fp8(__fmul_rn(v, s), fmt);
    if (threadIdx.x == 0) {
        sinv[(int64_t)b * lj_fp8_round4(rows) + r] = 1.0f / s;
        if (amax && m) atomicMax((uint32_t *)amax, m);
    }
}

/* Columnwise 1x128 tiles (q_t = x^T [cols, ld(rows)], tiles along rows): one block of 32 x 8
 * threads per 32 columns x 128 rows of x; each thread reads 16 values of its column (coalesced
 * over the columns), the column's tile amax is reduced in shared memory, and the codes go out
 * through a shared tile as runs of q_t's rows. Columns >= cols (up to round4(cols)) write their
 * factors' padding (1). */
__global__ void __launch_bounds__(256) fp8_tiles_col_kernel(uint8_t *q_t, float *sinv_t, const lj_bf16 *x, int rows,
                                                            int cols, lj_fp8_format fmt, float *amax) {
    __shared__ uint32_t red[8][32];
    __shared__ uint8_t tile[32][LJ_FP8_BLOCK + 4];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * LJ_FP8_BLOCK, c = c0 + tx;
    float v[16];
    uint32_t m = 0;
    for (int k = 0; k < 16; k++) {
        const int r = r0 + ty + 8 * k;
        v[k] = r < rows && c < cols ? __bfloat162float(x[(int64_t)r * cols + c]) : 0.0f;
        const uint32_t bits = lj_fp8_abs_bits(v[k]);
        m = bits > m ? bits : m;
    }
    red[ty][tx] = m;
    __syncthreads();
    uint32_t cm = 0;
    for (int i = 0; i < 8; i++) cm = red[i][tx] > cm ? red[i][tx] : cm;
    const float s = bits_scale(cm, fmt);
    for (int k = 0; k < 16; k++) tile[tx][ty + 8 * k] = to_fp8(__fmul_rn(v[k], s), fmt);
    if (ty == 0 && c < lj_fp8_round4(cols)) sinv_t[(int64_t)blockIdx.y * lj_fp8_round4(cols) + c] = 1.0f / s;
    if (amax && ty == 0 && cm) atomicMax((uint32_t *)amax, cm);
    __syncthreads();
    const int ld_t = lj_fp8_ld(rows), tid = ty * 32 + tx;
    for (int i = tid; i < 32 * LJ_FP8_BLOCK; i += 256) {
        const int cl = i / LJ_FP8_BLOCK, rl = i % LJ_FP8_BLOCK, cc = c0 + cl, r = r0 + rl;
        if (cc < cols && r < ld_t) q_t[(int64_t)cc * ld_t + r] = tile[cl][rl];
    }
}

extern "C" void lj_cuda_fp8_quantize_tiles(void *q, float *q_sinv, void *q_t, float *q_t_sinv, const void *x, int rows,
                                           int cols, lj_fp8_format fmt, float *amax) {
    if (amax) LJ_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), lj_cuda_stream()), "cudaMemsetAsync in fp8 tiles");
    if (rows <= 0 || cols <= 0) return;
    if (q) {
        const dim3 grid((unsigned)lj_fp8_round4(rows), (unsigned)lj_fp8_nblocks(cols));
        fp8_tiles_row_kernel<<<grid, 128, 0, lj_cuda_stream()>>>((uint8_t *)q, q_sinv, (const lj_bf16 *)x, rows, cols,
                                                                fmt, amax);
        LJ_CUDA_LAUNCHED("fp8_tiles_row_kernel");
        amax = NULL; /* recorded once */
    }
    if (q_t) {
        const dim3 grid((unsigned)((cols + 31) / 32), (unsigned)lj_fp8_nblocks(rows));
        fp8_tiles_col_kernel<<<grid, dim3(32, 8), 0, lj_cuda_stream()>>>((uint8_t *)q_t, q_t_sinv, (const lj_bf16 *)x,
                                                                        rows, cols, fmt, amax);
        LJ_CUDA_LAUNCHED("fp8_tiles_col_kernel");
    }
}

/* 128x128 blocks: one block of 32 x 8 threads per block (bc, br) of the grid (round4(nbc),
 * round4(nbr)): the block's amax in a first pass over x, then the codes (q's rows directly,
 * q_t's through a shared tile). Blocks outside the matrix write their factors' padding (1). */
__global__ void __launch_bounds__(256) fp8_blocks_kernel(uint8_t *q, float *sinv, uint8_t *q_t, float *sinv_t,
                                                         const lj_bf16 *x, int rows, int cols, lj_fp8_format fmt,
                                                         float *amax) {
    __shared__ uint8_t tile[LJ_FP8_BLOCK][LJ_FP8_BLOCK + 4];
    const int bc = blockIdx.x, br = blockIdx.y, nbr = lj_fp8_nblocks(rows), nbc = lj_fp8_nblocks(cols);
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = br * LJ_FP8_BLOCK, c0 = bc * LJ_FP8_BLOCK;
    uint32_t m = 0;
    for (int rl = ty; rl < LJ_FP8_BLOCK; rl += 8) {
        for (int cl = tx; cl < LJ_FP8_BLOCK; cl += 32) {
            const int r = r0 + rl, c = c0 + cl;
            if (r < rows && c < cols) {
                const uint32_t bits = lj_fp8_abs_bits(__bfloat162float(x[(int64_t)r * cols + c]));
                m = bits > m ? bits : m;
            }
        }
    }
    m = block_max_bits_all(m);
    const float s = bits_scale(m, fmt);
    if (tx == 0 && ty == 0) {
        if (sinv && br < nbr) sinv[(int64_t)br * lj_fp8_round4(nbc) + bc] = 1.0f / s;
        if (sinv_t && bc < nbc) sinv_t[(int64_t)bc * lj_fp8_round4(nbr) + br] = 1.0f / s;
        if (amax && m) atomicMax((uint32_t *)amax, m);
    }
    if (br >= nbr || bc >= nbc) return;
    const int ld = lj_fp8_ld(cols), ld_t = lj_fp8_ld(rows);
    for (int rl = ty; rl < LJ_FP8_BLOCK; rl += 8) {
        for (int cl = tx; cl < LJ_FP8_BLOCK; cl += 32) {
            const int r = r0 + rl, c = c0 + cl;
            const float v = r < rows && c < cols ? __bfloat162float(x[(int64_t)r * cols + c]) : 0.0f;
            const uint8_t code = to_fp8(__fmul_rn(v, s), fmt);
            if (q && r < rows && c < ld) q[(int64_t)r * ld + c] = code;
            tile[rl][cl] = code;
        }
    }
    if (!q_t) return;
    __syncthreads();
    for (int cl = ty; cl < LJ_FP8_BLOCK; cl += 8) { /* q_t's row c0 + cl, its columns r0.. */
        for (int rl = tx; rl < LJ_FP8_BLOCK; rl += 32) {
            const int c = c0 + cl, r = r0 + rl;
            if (c < cols && r < ld_t) q_t[(int64_t)c * ld_t + r] = tile[rl][cl];
        }
    }
}

extern "C" void lj_cuda_fp8_quantize_blocks(void *q, float *sinv, void *q_t, float *sinv_t, const void *x, int rows,
                                            int cols, lj_fp8_format fmt, float *amax) {
    if (amax) LJ_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), lj_cuda_stream()), "cudaMemsetAsync in fp8 blocks");
    if (rows <= 0 || cols <= 0 || (!q && !q_t)) return;
    const dim3 grid((unsigned)lj_fp8_round4(lj_fp8_nblocks(cols)), (unsigned)lj_fp8_round4(lj_fp8_nblocks(rows)));
    fp8_blocks_kernel<<<grid, dim3(32, 8), 0, lj_cuda_stream()>>>((uint8_t *)q, q ? sinv : NULL, (uint8_t *)q_t,
                                                                 q_t ? sinv_t : NULL, (const lj_bf16 *)x, rows, cols,
                                                                 fmt, amax);
    LJ_CUDA_LAUNCHED("fp8_blocks_kernel");
}

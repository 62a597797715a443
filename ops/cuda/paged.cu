/* paged.cu: the CUDA backend's ops over serving's paged KV cache (vLLM's PagedAttention,
 * Kwon et al. 2023): the write of a step's keys and values into their slots, attention of a
 * batch of query rows over their sequences' block tables, and the row gather before the lm_head.
 * Contracts in ops/ops.h; bf16 activations, a bf16 or E4M3 cache, fp32 accumulation.
 *
 * paged_attention: one thread block per (query row, KV head), so the rep = nh / nkv query heads
 * of a GQA group read each key and value once (no repeated K/V), each row attending to its keys
 * 0..pos through its block table with an online softmax (Milakov & Gimelshein 2018: running max
 * m, sum l, and the weighted sum of values) per query head; the block's warps take the keys
 * round-robin and their partial results are merged at the end (FlashDecoding's reduction,
 * o = sum_w e^(m_w - M) acc_w / sum_w e^(m_w - M) l_w). Decode rows (one query per sequence) and
 * chunked-prefill rows (several queries of a sequence, each at its own position: causal within the
 * chunk) are the same case. A batch of few rows also splits each row's keys into runs over
 * several thread blocks (split-K, FlashDecoding), merged by paged_combine_kernel. Two kernels:
 *   - head dims 64 and 128 (Llama 3, Qwen): paged_attention_mma_kernel, on tensor cores, 16 keys
 *     (one cache block) per warp and step, its operands loaded straight into registers (below);
 *   - any other head dim (up to LJ_PA_MAX_HD): paged_attention_kernel on CUDA cores, a key row
 *     across a warp's 32 lanes (lane l: elements l, l + 32, ...), the rep dot products by warp
 *     reductions, LJ_PA_WARPS warps each loading U keys before it uses them.
 *
 * The FP8 cache (paged_kv_write_fp8, paged_attention_fp8): E4M3 codes with per-tensor scales.
 * The write is the hardware's cvt.rn.satfinite of x * (1 / scale) (the CPU emulation's codes bit
 * for bit, as fp8.cu's casts); the attention is the same kernels reading codes (FP8 = true):
 * k_scale is folded into the scores and v_scale into the output, so a key costs one byte an
 * element and no extra multiply. */
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/paged.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#define LJ_PA_WARPS 8
#define LJ_PA_MAX_REP 8
#define LJ_PA_MAX_HD 256
#define LJ_PA_MAX_SPLITS 64

static __global__ void paged_kv_write_kernel(lj_bf16 *cache, const lj_bf16 *qkv, const int32_t *slots, int N,
                                             int Q, int KV) {
    /* a grid-stride loop: lj_cuda_blocks caps the grid at 32 blocks per multiprocessor */
    const int64_t w = 2 * (int64_t)KV, total = (int64_t)N * w, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t n = i / w, c = i % w;
        const int32_t slot = slots[n];
        if (slot >= 0) cache[(int64_t)slot * w + c] = qkv[n * (Q + w) + Q + c];
    }
}

void lj_cuda_paged_kv_write(void *kv_cache, const void *qkv, const int32_t *slots, int N, int nh, int nkv, int hd) {
    if (N <= 0) return;
    const int64_t units = (int64_t)N * 2 * nkv * hd;
    paged_kv_write_kernel<<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
        (lj_bf16 *)kv_cache, (const lj_bf16 *)qkv, slots, N, nh * hd, nkv * hd);
    LJ_CUDA_LAUNCHED("paged_kv_write_kernel");
}

/* The FP8 write: element c of a slot's row is a key (c < KV, k_scale) or a value (v_scale). */
static __global__ void paged_kv_write_fp8_kernel(uint8_t *cache, const lj_bf16 *qkv, const int32_t *slots, int N,
                                                 int Q, int KV, const float *k_scale, const float *v_scale) {
    const float inv_k = 1.0f / *k_scale, inv_v = 1.0f / *v_scale; /* IEEE division, as the CPU's */
    const int64_t w = 2 * (int64_t)KV, total = (int64_t)N * w, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t n = i / w, c = i % w;
        const int32_t slot = slots[n];
        if (slot < 0) continue;
        const float x = __bfloat162float(qkv[n * (Q + w) + Q + c]) * (c < KV ? inv_k : inv_v);
        cache[(int64_t)slot * w + c] = (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    }
}

void lj_cuda_paged_kv_write_fp8(void *kv_cache, const void *qkv, const int32_t *slots, int N, int nh, int nkv, int hd,
                                const float *k_scale, const float *v_scale) {
    if (N <= 0) return;
    const int64_t units = (int64_t)N * 2 * nkv * hd;
    paged_kv_write_fp8_kernel<<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
        (uint8_t *)kv_cache, (const lj_bf16 *)qkv, slots, N, nh * hd, nkv * hd, k_scale, v_scale);
    LJ_CUDA_LAUNCHED("paged_kv_write_fp8_kernel");
}

/* qkv's k and v elements through the FP8 cache's rounding, in place (ops.h paged_kv_round_fp8). */
static __global__ void paged_kv_round_fp8_kernel(lj_bf16 *qkv, int N, int Q, int KV, const float *k_scale,
                                                 const float *v_scale) {
    const float ks = *k_scale, vs = *v_scale, inv_k = 1.0f / ks, inv_v = 1.0f / vs;
    const int64_t w = 2 * (int64_t)KV, total = (int64_t)N * w, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t n = i / w, c = i % w;
        lj_bf16 *p = qkv + n * (Q + w) + Q + c;
        __nv_fp8_e4m3 code;
        code.__x = __nv_cvt_float_to_fp8(__bfloat162float(*p) * (c < KV ? inv_k : inv_v), __NV_SATFINITE, __NV_E4M3);
        *p = __float2bfloat16_rn((float)code * (c < KV ? ks : vs));
    }
}

void lj_cuda_paged_kv_round_fp8(void *qkv, int N, int nh, int nkv, int hd, const float *k_scale, const float *v_scale) {
    if (N <= 0) return;
    const int64_t units = (int64_t)N * 2 * nkv * hd;
    paged_kv_round_fp8_kernel<<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
        (lj_bf16 *)qkv, N, nh * hd, nkv * hd, k_scale, v_scale);
    LJ_CUDA_LAUNCHED("paged_kv_round_fp8_kernel");
}

/* One cached element as fp32: a bf16 value, or an E4M3 code (its scale applied by the caller). */
template <bool FP8>
static __device__ __forceinline__ float kv_load(const void *cache, int64_t i) {
    if (FP8) {
        __nv_fp8_e4m3 c;
        c.__x = ((const __nv_fp8_storage_t *)cache)[i];
        return (float)c;
    }
    return __bfloat162float(((const lj_bf16 *)cache)[i]);
}

/* HPL: head elements per lane, ceil(hd / 32); RM: the GQA group size rounded up to a power of two
 * (the registers held per query head); U: keys a warp loads before it uses them (the
 * loads of U keys are in flight together: a decode step is bound by their latency); FP8: the
 * cache holds E4M3 codes, k_scale and v_scale their factors (NULL otherwise). Dynamic shared
 * memory: the rep scaled queries [rep, hd] f32, then per warp its m and l [LJ_PA_WARPS, rep] and
 * its sums [LJ_PA_WARPS, rep, hd]. */
template <int HPL, int U, int RM, bool FP8>
static __global__ void __launch_bounds__(LJ_PA_WARPS * 32)
    paged_attention_kernel(lj_bf16 *out, float *part, const lj_bf16 *qkv, const void *cache, const int32_t *tables,
                           const int32_t *seq, const int32_t *pos, int max_blocks, int block_size, int nh, int nkv,
                           int hd, float scale, const float *k_scale, const float *v_scale, int splits) {
    extern __shared__ float sh[];
    const int n = blockIdx.x, g = blockIdx.y, rep = nh / nkv, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (seq[n] < 0) return; /* a row the caller computed (ops.h) */
    const int Q = nh * hd, KV = nkv * hd;
    float *q_s = sh, *m_s = q_s + rep * hd, *l_s = m_s + LJ_PA_WARPS * rep, *acc_s = l_s + LJ_PA_WARPS * rep;
    const lj_bf16 *qrow = qkv + (int64_t)n * (Q + 2 * KV) + (int64_t)g * rep * hd;
    const float qs = FP8 ? scale * *k_scale : scale; /* s = (q k_scale) . code / sqrt(hd) */
    for (int i = threadIdx.x; i < rep * hd; i += blockDim.x) q_s[i] = __bfloat162float(qrow[i]) * qs;
    __syncthreads();
    float q[RM][HPL], acc[RM][HPL], m[RM], l[RM];
#pragma unroll
    for (int r = 0; r < RM; r++) {
        m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < HPL; e++) {
            const int d = lane + 32 * e;
            q[r][e] = r < rep && d < hd ? q_s[r * hd + d] : 0.0f;
            acc[r][e] = 0.0f;
        }
    }
    const int32_t *table = tables + (int64_t)seq[n] * max_blocks;
    /* this block's keys: split blockIdx.z of `splits` equal runs of 0..pos[n] */
    const int len = pos[n] + 1, chunk = (len + splits - 1) / splits;
    const int j_begin = (int)blockIdx.z * chunk, j_end = min(len, j_begin + chunk);
    for (int j0 = j_begin + warp * U; j0 < j_end; j0 += LJ_PA_WARPS * U) {
        float kf[U][HPL], vf[U][HPL];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int j = j0 + u < j_end ? j0 + u : j_end - 1; /* past the end: a valid key, not used */
            const int64_t slot = (int64_t)table[j / block_size] * block_size + j % block_size;
            const int64_t k = slot * 2 * KV + (int64_t)g * hd, v = k + KV;
#pragma unroll
            for (int e = 0; e < HPL; e++) {
                const int d = lane + 32 * e;
                kf[u][e] = d < hd ? kv_load<FP8>(cache, k + d) : 0.0f;
                vf[u][e] = d < hd ? kv_load<FP8>(cache, v + d) : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (j0 + u >= j_end) break;
#pragma unroll
            for (int r = 0; r < RM; r++) {
                if (r >= rep) break;
                float s = 0.0f;
#pragma unroll
                for (int e = 0; e < HPL; e++) s += q[r][e] * kf[u][e];
                s = lj_warp_sum(s);
                const float mn = fmaxf(m[r], s), c = __expf(m[r] - mn), p = __expf(s - mn);
                l[r] = l[r] * c + p;
#pragma unroll
                for (int e = 0; e < HPL; e++) acc[r][e] = acc[r][e] * c + p * vf[u][e];
                m[r] = mn;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < RM; r++) {
        if (r >= rep) break;
        if (lane == 0) m_s[warp * rep + r] = m[r], l_s[warp * rep + r] = l[r];
#pragma unroll
        for (int e = 0; e < HPL; e++) {
            const int d = lane + 32 * e;
            if (d < hd) acc_s[((int64_t)warp * rep + r) * hd + d] = acc[r][e];
        }
    }
    __syncthreads();
    const float vs = FP8 ? *v_scale : 1.0f;
    for (int i = threadIdx.x; i < rep * hd; i += blockDim.x) {
        const int r = i / hd, d = i % hd;
        float M = -INFINITY;
        for (int w = 0; w < LJ_PA_WARPS; w++) M = fmaxf(M, m_s[w * rep + r]);
        float L = 0.0f, o = 0.0f;
        for (int w = 0; w < LJ_PA_WARPS; w++) {
            const float mw = m_s[w * rep + r];
            const float c = mw == -INFINITY ? 0.0f : __expf(mw - M); /* a warp that saw no key */
            L += c * l_s[w * rep + r];
            o += c * acc_s[((int64_t)w * rep + r) * hd + d];
        }
        const int64_t h = (int64_t)n * nh + g * rep + r; /* the query head's row */
        if (splits == 1) {
            out[h * hd + d] = __float2bfloat16_rn(o / L * vs);
        } else { /* this split's m, l and unnormalised sum (times v_scale), merged by paged_combine_kernel */
            float *pp = part + (h * splits + blockIdx.z) * (hd + 2);
            pp[2 + d] = o * vs;
            if (d == 0) pp[0] = M, pp[1] = L;
        }
    }
}
/* ---- head dims 64 and 128: tensor cores -------------------------------------------------------
 * paged_attention_mma_kernel: one thread block per (query row, KV head, split) as above, its
 * LJ_PA_MMA_WARPS warps taking the keys in tiles of 16 (a block of the cache), round-robin. A warp
 * forms a tile's scores for all rep query heads of the group with mma.sync m16n8k16 (bf16, fp32
 * accumulators) as S^T = K Q^T: M = the 16 keys, N = 8 query heads (rep <= 8; heads past rep get a
 * zero query), K = the head dim. The probabilities, rounded to the operand dtype, are transposed in
 * registers (movmatrix) into the B operand of O^T += V^T P^T (M = 16 head elements per m-tile, K =
 * the tile's keys). Both operands come straight from global memory in 16-byte loads, with no
 * shared memory and no staging: a dot product does not depend on the order of its terms, so
 * lane 4g + t takes, of key rows g and g + 8, the elements at pk(t, q) below (and of the query
 * the same ones), which makes its mma fragments whole 16-byte runs of a row, and of the value
 * rows 2t, 2t+1, 2t+8, 2t+9 the elements at pv(g, q), paired across rows by byte permutes (the
 * output rows of its m-tiles, put back in place at the end). The softmax is online per query
 * head (the 8 lanes that share a head: 3 shuffles per tile for the maximum), and the sum l adds
 * the rounded probabilities, so the weights sum to 1 exactly. The FP8 cache: keys decoded to
 * bf16 (exact: E4M3 has 3 mantissa bits), values to fp16 (exact) with fp16 probabilities (finer
 * than bf16 on [0, 1]); k_scale folded into the scores, v_scale into the output. Per tile and
 * lane at head dim 128: 16 loads of 16 bytes, 16 mma, 32 byte permutes, 3 + 3 shuffles; the cache
 * is read once, coalesced (64 or 128 contiguous bytes per row and load instruction). Tensor cores
 * rather than CUDA-core dot products: at GQA 4 a key costs 2 x 4 x 128 fp32 FMAs on CUDA cores
 * (half the step's time at HBM speed on an H200, before conversions and reductions), against
 * 1/16 of 16 mma here, so the kernel runs at the memory's speed. */
#define LJ_PA_MMA_WARPS 4
#define LJ_PA_LOG2E 1.4426950408889634f

/* c[16x8] += a[16x16] b[16x8], fp32 accumulators; the operands bf16, or fp16 when f16. */
static __device__ __forceinline__ void pa_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, bool f16) {
    if (f16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The transpose of the 8 x 8 matrix of 16-bit elements whose row lane / 4, columns 2 (lane % 4)
 * and + 1 this lane holds, in the same layout. */
static __device__ __forceinline__ uint32_t pa_transpose(uint32_t x) {
    uint32_t y;
    asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

/* Two E4M3 codes (bits 0-15; the first in the low byte) as fp16 and as bf16 pairs (exact). */
static __device__ __forceinline__ uint32_t pa_e4m3x2_f16x2(uint32_t x) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(x & 0xffffu), __NV_E4M3);
    return (uint32_t)h.x | (uint32_t)h.y << 16;
}
static __device__ __forceinline__ uint32_t pa_e4m3x2_bf16x2(uint32_t x) {
    const __half2 h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(x & 0xffffu), __NV_E4M3);
    const float2 f = __half22float2(h);
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
    return *(const uint32_t *)&b;
}

/* A probability pair (first in the low half) in the PV operand dtype, and back as floats. */
template <bool FP8>
static __device__ __forceinline__ uint32_t pa_pack(float lo, float hi, float *rlo, float *rhi) {
    if (FP8) {
        const __half2 h = __floats2half2_rn(lo, hi);
        *rlo = __low2float(h), *rhi = __high2float(h);
        return *(const uint32_t *)&h;
    }
    const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
    *rlo = __low2float(b), *rhi = __high2float(b);
    return *(const uint32_t *)&b;
}

/* The geometry of one instance: HD head elements, a bf16 (2-byte) or E4M3 (1-byte) cache.
 *   keys: lane (g, t) holds HD / 4 elements of key rows g and g + 8, q = 0..HD/4-1 at
 *     pk(t, q) = 4 EK (q / EK) + EK t + q % EK, loaded EK at a time (16 bytes); word w (bf16
 *     pair) = elements 2w, 2w+1; k-step s takes words 2s and 2s+1;
 *   values: lane (g, t) holds HD / 8 elements of value rows 2t, 2t+1, 2t+8, 2t+9, q = 0..HD/8-1
 *     at pv(g, q) = 8 EV (q / EV) + EV g + q % EV, loaded EV at a time (16 or 8 bytes); output
 *     m-tile j has rows pv(g, 2j) and pv(g, 2j + 1). */
template <int HD, bool FP8>
struct pa_geom {
    static constexpr int ES = FP8 ? 1 : 2;                    /* bytes per element */
    static constexpr int KS = HD / 16;                        /* k-steps of the scores = m-tiles of the output */
    static constexpr int EK = 16 / ES;                        /* key elements per load */
    static constexpr int NK = HD / (4 * EK);                  /* loads per key row */
    static constexpr int EV = HD / 8 < 16 / ES ? HD / 8 : 16 / ES; /* value elements per load */
    static constexpr int NV = HD / 8 / EV;                    /* loads per value row */
    static constexpr int VW = HD / 8 * ES / 4;                /* 32-bit words per value row */
    static __device__ __forceinline__ int pk(int t, int q) { return 4 * EK * (q / EK) + EK * t + q % EK; }
    static __device__ __forceinline__ int pv(int g, int q) { return 8 * EV * (q / EV) + EV * g + q % EV; }
};

/* One tile's raw cache words of this lane: k[0] key row g, k[1] key row g + 8, v[r] value rows
 * 2t, 2t+1, 2t+8, 2t+9 (rows past the sequence's last key j_end - 1 read that key instead). */
template <int HD, bool FP8>
struct pa_tile {
    uint32_t k[2][pa_geom<HD, FP8>::NK * 4];
    uint32_t v[4][pa_geom<HD, FP8>::VW];
};

template <int HD, bool FP8>
static __device__ __forceinline__ void pa_load(pa_tile<HD, FP8> &tl, const uint8_t *cache, const int32_t *table,
                                               int block_size, int j0, int j_end, int64_t row_bytes, int64_t koff,
                                               int64_t voff, int g, int t) {
    typedef pa_geom<HD, FP8> G;
    const int rows[6] = {g, g + 8, 2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9}, last = j_end - 1 - j0;
    int64_t slot[6];
    if (block_size % 16 == 0) { /* the tile lies in one block (j0 is a multiple of 16) */
        const int64_t base = (int64_t)table[j0 / block_size] * block_size + j0 % block_size;
#pragma unroll
        for (int i = 0; i < 6; i++) slot[i] = base + min(rows[i], last);
    } else {
#pragma unroll
        for (int i = 0; i < 6; i++) {
            const int j = j0 + min(rows[i], last);
            slot[i] = (int64_t)table[j / block_size] * block_size + j % block_size;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const uint8_t *p = cache + slot[r] * row_bytes + koff;
#pragma unroll
        for (int i = 0; i < G::NK; i++) {
            const uint4 x = *(const uint4 *)(p + G::pk(t, G::EK * i) * G::ES);
            tl.k[r][4 * i] = x.x, tl.k[r][4 * i + 1] = x.y, tl.k[r][4 * i + 2] = x.z, tl.k[r][4 * i + 3] = x.w;
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const uint8_t *p = cache + slot[2 + r] * row_bytes + voff;
#pragma unroll
        for (int c = 0; c < G::NV; c++) {
            if (G::EV * G::ES == 16) {
                const uint4 x = *(const uint4 *)(p + G::pv(g, G::EV * c) * G::ES);
                tl.v[r][4 * c] = x.x, tl.v[r][4 * c + 1] = x.y, tl.v[r][4 * c + 2] = x.z, tl.v[r][4 * c + 3] = x.w;
            } else { /* 8 bytes */
                const uint2 x = *(const uint2 *)(p + G::pv(g, G::EV * c) * G::ES);
                tl.v[r][2 * c] = x.x, tl.v[r][2 * c + 1] = x.y;
            }
        }
    }
}

/* One tile of keys j0..j0+15 (those from j_end on masked) into this lane's online softmax: the
 * running maxima m0, m1 and sums l0, l1 of query heads 2t and 2t + 1 (log2 units), and its
 * accumulator tiles acc[j] of O^T. */
template <int HD, bool FP8>
static __device__ __forceinline__ void pa_attend(const pa_tile<HD, FP8> &tl, const uint32_t *qw, int j0, int j_end,
                                                 float sl2, int g, float &m0, float &m1, float &l0, float &l1,
                                                 float (*acc)[4]) {
    constexpr int KS = pa_geom<HD, FP8>::KS;
    /* S^T = K Q^T: s[0], s[1] key j0 + g (heads 2t, 2t+1), s[2], s[3] key j0 + g + 8 */
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < KS; k++) {
        uint32_t a[4];
        if (FP8) { /* words 2k, 2k+1 are the halves of raw word k */
            a[0] = pa_e4m3x2_bf16x2(tl.k[0][k]), a[1] = pa_e4m3x2_bf16x2(tl.k[1][k]);
            a[2] = pa_e4m3x2_bf16x2(tl.k[0][k] >> 16), a[3] = pa_e4m3x2_bf16x2(tl.k[1][k] >> 16);
        } else {
            a[0] = tl.k[0][2 * k], a[1] = tl.k[1][2 * k], a[2] = tl.k[0][2 * k + 1], a[3] = tl.k[1][2 * k + 1];
        }
        pa_mma(s, a, qw[2 * k], qw[2 * k + 1], false);
    }
    const bool va = j0 + g < j_end, vb = j0 + g + 8 < j_end;
    s[0] = va ? s[0] * sl2 : -INFINITY, s[1] = va ? s[1] * sl2 : -INFINITY;
    s[2] = vb ? s[2] * sl2 : -INFINITY, s[3] = vb ? s[3] * sl2 : -INFINITY;
    /* the tile's maximum per head over the 8 lanes of the quad column (key j0 is valid: finite) */
    float x0 = fmaxf(s[0], s[2]), x1 = fmaxf(s[1], s[3]);
#pragma unroll
    for (int o = 4; o < 32; o *= 2) {
        x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, o));
        x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, o));
    }
    x0 = fmaxf(m0, x0), x1 = fmaxf(m1, x1);
    const float c0 = exp2f(m0 - x0), c1 = exp2f(m1 - x1); /* 0 on the first tile */
    m0 = x0, m1 = x1;
    float r[4];
    const uint32_t p01 = pa_pack<FP8>(exp2f(s[0] - x0), exp2f(s[1] - x1), &r[0], &r[1]);
    const uint32_t p23 = pa_pack<FP8>(exp2f(s[2] - x0), exp2f(s[3] - x1), &r[2], &r[3]);
    l0 = l0 * c0 + (r[0] + r[2]), l1 = l1 * c1 + (r[1] + r[3]);
    /* P^T as the B operand: b0 keys 2t, 2t+1 of head g, b1 keys 2t+8, 2t+9 */
    const uint32_t b0 = pa_transpose(p01), b1 = pa_transpose(p23);
#pragma unroll
    for (int j = 0; j < KS; j++) {
        acc[j][0] *= c0, acc[j][1] *= c1, acc[j][2] *= c0, acc[j][3] *= c1;
        uint32_t a[4]; /* V^T rows pv(g, 2j), pv(g, 2j+1); keys 2t, 2t+1 (a[0], a[1]), 2t+8, 2t+9 */
        if (FP8) {
            const uint32_t sel = j % 2 ? 0x7362u : 0x5140u, x = __byte_perm(tl.v[0][j / 2], tl.v[1][j / 2], sel),
                           y = __byte_perm(tl.v[2][j / 2], tl.v[3][j / 2], sel);
            a[0] = pa_e4m3x2_f16x2(x), a[1] = pa_e4m3x2_f16x2(x >> 16);
            a[2] = pa_e4m3x2_f16x2(y), a[3] = pa_e4m3x2_f16x2(y >> 16);
        } else {
            a[0] = __byte_perm(tl.v[0][j], tl.v[1][j], 0x5410u), a[1] = __byte_perm(tl.v[0][j], tl.v[1][j], 0x7632u);
            a[2] = __byte_perm(tl.v[2][j], tl.v[3][j], 0x5410u), a[3] = __byte_perm(tl.v[2][j], tl.v[3][j], 0x7632u);
        }
        pa_mma(acc[j], a, b0, b1, FP8);
    }
}

/* Dynamic shared memory: none. Static: per warp its m and l [8] and its sums [8, HD] (fp32). */
template <int HD, bool FP8>
static __global__ void __launch_bounds__(LJ_PA_MMA_WARPS * 32)
    paged_attention_mma_kernel(lj_bf16 *out, float *part, const lj_bf16 *qkv, const void *cache,
                               const int32_t *tables, const int32_t *seq, const int32_t *pos, int max_blocks,
                               int block_size, int nh, int nkv, float scale, const float *k_scale,
                               const float *v_scale, int splits) {
    typedef pa_geom<HD, FP8> G;
    constexpr int KS = G::KS;
    __shared__ float m_s[LJ_PA_MMA_WARPS][8], l_s[LJ_PA_MMA_WARPS][8], o_s[LJ_PA_MMA_WARPS][8][HD];
    const int n = blockIdx.x, kvh = blockIdx.y, rep = nh / nkv;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    if (seq[n] < 0) return; /* a row the caller computed (ops.h) */
    const int Q = nh * HD, KV = nkv * HD;

    /* the query of head g of the group as the B operand words: elements pk(t, q), q = 0..HD/4-1 */
    uint32_t qw[HD / 8];
    {
        const lj_bf16 *q = qkv + (int64_t)n * (Q + 2 * KV) + (int64_t)(kvh * rep + g) * HD;
#pragma unroll
        for (int i = 0; i < G::NK; i++)
#pragma unroll
            for (int c = 0; c < G::EK / 8; c++) { /* 8 bf16 per load */
                const uint4 x = g < rep ? *(const uint4 *)(q + G::pk(t, G::EK * i + 8 * c)) : make_uint4(0, 0, 0, 0);
                uint32_t *w = qw + G::EK / 2 * i + 4 * c;
                w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
            }
    }
    const float sl2 = scale * LJ_PA_LOG2E * (FP8 ? *k_scale : 1.0f); /* scores in log2 units */
    const int32_t *table = tables + (int64_t)seq[n] * max_blocks;
    const int ES = G::ES;
    const int64_t row_bytes = 2 * (int64_t)KV * ES, koff = (int64_t)kvh * HD * ES, voff = koff + (int64_t)KV * ES;
    const uint8_t *cbytes = (const uint8_t *)cache;
    /* this block's keys: split blockIdx.z of runs of 0..pos[n], each a multiple of 16 keys long and
     * at least a tile per warp (the splits past the keys have none) */
    const int len = pos[n] + 1, chunk = max(((len + splits - 1) / splits + 15) / 16 * 16, 16 * LJ_PA_MMA_WARPS);
    const int j_begin = (int)blockIdx.z * chunk, j_end = min(len, j_begin + chunk);

    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* query heads 2t and 2t + 1 */
    float acc[KS][4];
#pragma unroll
    for (int j = 0; j < KS; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    /* FP8: the next tile's loads issued before this tile's arithmetic (at the last tile, this tile's
     * again: cached), so that a warp keeps two tiles in flight; an FP8 tile is half the bytes and
     * twice the decoding of a bf16 one (on an H200 at 200 rows of about 1,500 keys: 0.19 ms
     * against 0.22 without; bf16 gains nothing, 0.315 against 0.316 ms) */
    const int step = 16 * LJ_PA_MMA_WARPS;
    int j0 = j_begin + 16 * warp;
    if (FP8) {
        pa_tile<HD, FP8> cur;
        if (j0 < j_end) pa_load<HD, FP8>(cur, cbytes, table, block_size, j0, j_end, row_bytes, koff, voff, g, t);
        for (; j0 < j_end; j0 += step) {
            pa_tile<HD, FP8> nxt;
            pa_load<HD, FP8>(nxt, cbytes, table, block_size, j0 + step < j_end ? j0 + step : j0, j_end, row_bytes,
                             koff, voff, g, t);
            pa_attend<HD, FP8>(cur, qw, j0, j_end, sl2, g, m0, m1, l0, l1, acc);
            cur = nxt;
        }
    } else {
        for (; j0 < j_end; j0 += step) {
            pa_tile<HD, FP8> tl;
            pa_load<HD, FP8>(tl, cbytes, table, block_size, j0, j_end, row_bytes, koff, voff, g, t);
            pa_attend<HD, FP8>(tl, qw, j0, j_end, sl2, g, m0, m1, l0, l1, acc);
        }
    }
    /* the warps' partial results merged, as paged_attention_kernel's */
#pragma unroll
    for (int o = 4; o < 32; o *= 2) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, o);
        l1 += __shfl_xor_sync(0xffffffffu, l1, o);
    }
    if (g == 0) m_s[warp][2 * t] = m0, m_s[warp][2 * t + 1] = m1, l_s[warp][2 * t] = l0, l_s[warp][2 * t + 1] = l1;
#pragma unroll
    for (int j = 0; j < KS; j++) {
        const int d0 = G::pv(g, 2 * j), d1 = G::pv(g, 2 * j + 1);
        o_s[warp][2 * t][d0] = acc[j][0], o_s[warp][2 * t + 1][d0] = acc[j][1];
        o_s[warp][2 * t][d1] = acc[j][2], o_s[warp][2 * t + 1][d1] = acc[j][3];
    }
    __syncthreads();
    const float vs = FP8 ? *v_scale : 1.0f;
    for (int i = threadIdx.x; i < rep * HD; i += blockDim.x) {
        const int r = i / HD, d = i % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < LJ_PA_MMA_WARPS; w++) M = fmaxf(M, m_s[w][r]);
        float L = 0.0f, o = 0.0f;
#pragma unroll
        for (int w = 0; w < LJ_PA_MMA_WARPS; w++) {
            const float c = m_s[w][r] == -INFINITY ? 0.0f : exp2f(m_s[w][r] - M); /* a warp that saw no key */
            L += c * l_s[w][r];
            o += c * o_s[w][r][d];
        }
        const int64_t h = (int64_t)n * nh + kvh * rep + r;
        if (splits == 1) {
            out[h * HD + d] = __float2bfloat16_rn(o / L * vs);
        } else { /* m in natural-log units for paged_combine_kernel (the two kernels share it) */
            float *pp = part + (h * splits + blockIdx.z) * (HD + 2);
            pp[2 + d] = o * vs;
            if (d == 0) pp[0] = M == -INFINITY ? M : M * (1.0f / LJ_PA_LOG2E), pp[1] = L;
        }
    }
}

/* The splits of one query head merged (FlashDecoding): o = sum_s e^(m_s - M) acc_s / sum_s
 * e^(m_s - M) l_s, M = max_s m_s; a split that held no key has m_s = -inf (weight 0; they follow
 * the splits with keys). One block of 4 warps per query head row (n, head): the first warp forms
 * the weights and the denominator, then warp w sums splits w, w + 4, ... of every element, and
 * the four sums are added. */
#define LJ_PA_COMBINE_WARPS 4
static __global__ void __launch_bounds__(LJ_PA_COMBINE_WARPS * 32)
    paged_combine_kernel(lj_bf16 *out, const float *part, const int32_t *seq, int nh, int splits, int hd) {
    __shared__ float w_s[LJ_PA_MAX_SPLITS], o_s[LJ_PA_COMBINE_WARPS][LJ_PA_MAX_HD], L_s;
    __shared__ int used_s;
    const int64_t h = blockIdx.x;
    if (seq[h / nh] < 0) return; /* a row the caller computed */
    const float *pp = part + h * splits * (hd + 2);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (warp == 0) {
        float M = -INFINITY, L = 0.0f;
        int used = 0; /* 1 + the last split with a key */
        for (int s = lane; s < splits; s += 32) M = fmaxf(M, pp[s * (hd + 2)]);
        M = lj_warp_max(M);
        for (int s = lane; s < splits; s += 32) {
            const float ms = pp[s * (hd + 2)], c = ms == -INFINITY ? 0.0f : __expf(ms - M);
            w_s[s] = c;
            L += c * pp[s * (hd + 2) + 1];
            used = ms == -INFINITY ? used : s + 1;
        }
        L = lj_warp_sum(L);
        for (int o = 16; o > 0; o /= 2) used = max(used, __shfl_xor_sync(0xffffffffu, used, o));
        if (lane == 0) L_s = L, used_s = used;
    }
    __syncthreads();
    const int used = used_s;
    for (int d = lane; d < hd; d += 32) {
        float o = 0.0f;
#pragma unroll 4
        for (int s = warp; s < used; s += LJ_PA_COMBINE_WARPS) o += w_s[s] * pp[s * (hd + 2) + 2 + d];
        o_s[warp][d] = o;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < LJ_PA_COMBINE_WARPS; w++) o += o_s[w][d];
        out[h * hd + d] = __float2bfloat16_rn(o / L_s);
    }
}

/* Splits per (row, KV head) for a kernel that keeps per_sm blocks resident on each multiprocessor
 * (at most LJ_PA_SPLIT_CTAS_MAX): when the batch alone fills less than half of one such wave of
 * the GPU (a decode batch of a few sequences), as many as fit in one wave, at most
 * LJ_PA_MAX_SPLITS; from N alone, so that a captured graph keeps its grid. The partial results
 * need N nh splits (hd + 2) floats, at most LJ_PA_SPLIT_CTAS_MAX SMs LJ_PA_MAX_REP (LJ_PA_MAX_HD
 * + 2) since N nkv splits <= per_sm SMs: a buffer of that size, allocated on the first call (never
 * during a graph capture: serving runs each batch size eagerly before capturing it) and kept. */
#define LJ_PA_SPLIT_CTAS_MAX 8
static int paged_splits(int N, int nkv, int per_sm) {
    per_sm = per_sm < 1 ? 1 : per_sm > LJ_PA_SPLIT_CTAS_MAX ? LJ_PA_SPLIT_CTAS_MAX : per_sm;
    const int capacity = per_sm * lj_cuda_num_sms(), ctas = N * nkv;
    if (2 * ctas > capacity) return 1;
    const int s = capacity / ctas;
    return s < LJ_PA_MAX_SPLITS ? s : LJ_PA_MAX_SPLITS;
}
static float *g_paged_part;

/* Blocks of paged_attention_mma_kernel<HD, FP8> resident per multiprocessor (the CUDA
 * occupancy calculator, asked once per instance). */
template <int HD, bool FP8>
static int paged_mma_resident(void) {
    static int nb;
    if (!nb)
        LJ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, paged_attention_mma_kernel<HD, FP8>,
                                                                    LJ_PA_MMA_WARPS * 32, 0),
                      "cudaOccupancyMaxActiveBlocksPerMultiprocessor(paged_attention_mma_kernel)");
    return nb;
}

/* The launch for the shape: paged_attention_mma_kernel for head dims 64 and 128 (16-byte aligned
 * tensors), paged_attention_kernel<..., FP8> for the others (the instance by head elements per
 * lane and GQA group size). */
template <bool FP8>
static void paged_attention_launch(void *out, const void *qkv, const void *kv_cache, const int32_t *block_tables,
                                   const int32_t *seq, const int32_t *pos, int N, int max_blocks, int block_size,
                                   int nh, int nkv, int hd, const float *k_scale, const float *v_scale) {
    LJ_ASSERT(hd >= 1 && hd <= LJ_PA_MAX_HD && nkv > 0 && nh % nkv == 0 && nh / nkv <= LJ_PA_MAX_REP,
              "paged_attention: hd %d (<= %d), nh %d, nkv %d (nh / nkv <= %d)", hd, LJ_PA_MAX_HD, nh, nkv,
              LJ_PA_MAX_REP);
    if (N <= 0) return;
    const int rep = nh / nkv;
    const int aligned = (((uintptr_t)qkv | (uintptr_t)kv_cache) & 15) == 0, mma = aligned && (hd == 64 || hd == 128);
    const int splits = paged_splits(N, nkv,
                                    !mma ? 2
                                    : hd == 64 ? paged_mma_resident<64, FP8>()
                                               : paged_mma_resident<128, FP8>());
    if (splits > 1 && !g_paged_part) {
        const size_t bytes =
            (size_t)LJ_PA_SPLIT_CTAS_MAX * lj_cuda_num_sms() * LJ_PA_MAX_REP * (LJ_PA_MAX_HD + 2) * sizeof(float);
        if (lj_cuda_alloc((void **)&g_paged_part, bytes) != LJ_OK)
            LJ_ASSERT(0, "paged_attention: %s", lj_error_message());
    }
    const dim3 grid((unsigned)N, (unsigned)nkv, (unsigned)splits);
    const float scale = 1.0f / sqrtf((float)hd);
    if (mma) {
#define LJ_PA_MMA(HD)                                                                                              \
    paged_attention_mma_kernel<HD, FP8><<<grid, LJ_PA_MMA_WARPS * 32, 0, lj_cuda_stream()>>>(                      \
        (lj_bf16 *)out, g_paged_part, (const lj_bf16 *)qkv, kv_cache, block_tables, seq, pos, max_blocks,          \
        block_size, nh, nkv, scale, k_scale, v_scale, splits)
        if (hd == 64) LJ_PA_MMA(64);
        else LJ_PA_MMA(128);
#undef LJ_PA_MMA
        LJ_CUDA_LAUNCHED("paged_attention_mma_kernel");
    } else {
        const size_t shmem = (size_t)(rep * hd + 2 * LJ_PA_WARPS * rep + LJ_PA_WARPS * rep * hd) * sizeof(float);
#define LJ_PA_LAUNCH_RM(HPL, U, RM)                                                                                \
    do {                                                                                                           \
        if (shmem > 48 * 1024)                                                                                     \
            LJ_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel<HPL, U, RM, FP8>,                            \
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem),          \
                          "cudaFuncSetAttribute(paged_attention_kernel)");                                        \
        paged_attention_kernel<HPL, U, RM, FP8><<<grid, LJ_PA_WARPS * 32, shmem, lj_cuda_stream()>>>(              \
            (lj_bf16 *)out, g_paged_part, (const lj_bf16 *)qkv, kv_cache, block_tables, seq, pos, max_blocks,      \
            block_size, nh, nkv, hd, scale, k_scale, v_scale, splits);                                             \
    } while (0)
#define LJ_PA_LAUNCH(HPL, U)                                                                                       \
    do {                                                                                                           \
        if (rep <= 1) LJ_PA_LAUNCH_RM(HPL, U, 1);                                                                  \
        else if (rep <= 2) LJ_PA_LAUNCH_RM(HPL, U, 2);                                                             \
        else if (rep <= 4) LJ_PA_LAUNCH_RM(HPL, U, 4);                                                             \
        else LJ_PA_LAUNCH_RM(HPL, U, 8);                                                                           \
    } while (0)
        const int hpl = (hd + 31) / 32;
        if (hpl <= 1) LJ_PA_LAUNCH(1, 4);
        else if (hpl <= 2) LJ_PA_LAUNCH(2, 4);
        else if (hpl <= 4) LJ_PA_LAUNCH(4, 4);
        else LJ_PA_LAUNCH(8, 2);
#undef LJ_PA_LAUNCH
#undef LJ_PA_LAUNCH_RM
        LJ_CUDA_LAUNCHED("paged_attention_kernel");
    }
    if (splits > 1) {
        paged_combine_kernel<<<N * nh, LJ_PA_COMBINE_WARPS * 32, 0, lj_cuda_stream()>>>((lj_bf16 *)out, g_paged_part,
                                                                                      seq, nh, splits, hd);
        LJ_CUDA_LAUNCHED("paged_combine_kernel");
    }
}

void lj_cuda_paged_attention(void *out, const void *qkv, const void *kv_cache, const int32_t *block_tables,
                             const int32_t *seq, const int32_t *pos, int N, int max_blocks, int block_size, int nh,
                             int nkv, int hd) {
    paged_attention_launch<false>(out, qkv, kv_cache, block_tables, seq, pos, N, max_blocks, block_size, nh, nkv, hd,
                                  NULL, NULL);
}

void lj_cuda_paged_attention_fp8(void *out, const void *qkv, const void *kv_cache, const int32_t *block_tables,
                                 const int32_t *seq, const int32_t *pos, int N, int max_blocks, int block_size,
                                 int nh, int nkv, int hd, const float *k_scale, const float *v_scale) {
    paged_attention_launch<true>(out, qkv, kv_cache, block_tables, seq, pos, N, max_blocks, block_size, nh, nkv, hd,
                                 k_scale, v_scale);
}

static __global__ void gather_rows_kernel(lj_bf16 *out, const lj_bf16 *x, const int32_t *rows, int M, int C) {
    const int64_t total = (int64_t)M * C, stride = (int64_t)gridDim.x * blockDim.x; /* grid-stride, as above */
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        out[i] = x[(int64_t)rows[i / C] * C + i % C];
}

void lj_cuda_gather_rows(void *out, const void *x, const int32_t *rows, int M, int C) {
    if (M <= 0) return;
    gather_rows_kernel<<<lj_cuda_blocks((int64_t)M * C, 256), 256, 0, lj_cuda_stream()>>>(
        (lj_bf16 *)out, (const lj_bf16 *)x, rows, M, C);
    LJ_CUDA_LAUNCHED("gather_rows_kernel");
}

/* One thread block per row. A thread scans its strided elements as the sequential scan does
 * (strictly greater replaces); the block keeps the larger value and, between equal values, the
 * lower index, which is the sequential scan's first maximum. NaNs are skipped; a row whose
 * element 0 is NaN gives 0, as the scan from index 0 does (nothing compares greater than it). */
#define LJ_ARGMAX_THREADS 1024
static __global__ void __launch_bounds__(LJ_ARGMAX_THREADS)
    argmax_rows_kernel(int32_t *out, const lj_bf16 *x, int V) {
    __shared__ float sv[LJ_ARGMAX_THREADS / 32];
    __shared__ int si[LJ_ARGMAX_THREADS / 32];
    const lj_bf16 *r = x + (int64_t)blockIdx.x * V;
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        const float v = __bfloat162float(r[i]);
        if (v > bv || (v == bv && bi == INT_MAX)) bv = v, bi = i; /* -inf is taken once: a row of -inf gives 0 */
    }
    for (int o = 16; o > 0; o /= 2) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (warp == 0) {
        bv = lane < (int)(blockDim.x / 32) ? sv[lane] : -INFINITY;
        bi = lane < (int)(blockDim.x / 32) ? si[lane] : INT_MAX;
        for (int o = 16; o > 0; o /= 2) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
        }
        if (lane == 0) out[blockIdx.x] = isnan(__bfloat162float(r[0])) || bi == INT_MAX ? 0 : bi;
    }
}

void lj_cuda_argmax_rows(int32_t *out, const void *x, int M, int V) {
    if (M <= 0) return;
    argmax_rows_kernel<<<M, LJ_ARGMAX_THREADS, 0, lj_cuda_stream()>>>(out, (const lj_bf16 *)x, V);
    LJ_CUDA_LAUNCHED("argmax_rows_kernel");
}

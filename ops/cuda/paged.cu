/* paged.cu: the CUDA backend's ops over serving's paged KV cache (vLLM's PagedAttention,
 * Kwon et al. 2023): the write of a step's keys and values into their slots, attention of a
 * batch of query rows over their sequences' block tables, and the row gather before the lm_head.
 * Contracts in ops/ops.h; bf16 activations, a bf16 or E4M3 cache, fp32 accumulation.
 *
 * paged_attention: one thread block per (query row, KV head), so the rep = nh / nkv query heads
 * of a GQA group read each key and value once (no repeated K/V). Its LJ_PA_WARPS warps take the
 * keys 0..pos in runs of U, round-robin (a warp loads its U keys before it uses them); a warp holds a key row across its 32 lanes (lane l: elements l,
 * l + 32, ...), forms the rep dot products with warp reductions and keeps, per query head, an
 * online softmax (Milakov & Gimelshein 2018): running max m, sum l, and the weighted sum of values.
 * The warps' partial results are merged at the end (FlashDecoding's reduction,
 * o = sum_w e^(m_w - M) acc_w / sum_w e^(m_w - M) l_w). Decode rows (one query per sequence) and
 * chunked-prefill rows (several queries of a sequence, each at its own position: causal within the
 * chunk) are the same case. A batch of few rows also splits each row's keys into equal runs over
 * several thread blocks (split-K, FlashDecoding), merged by paged_combine_kernel.
 *
 * The FP8 cache (paged_kv_write_fp8, paged_attention_fp8): E4M3 codes with per-tensor scales.
 * The write is the hardware's cvt.rn.satfinite of x * (1 / scale) (the CPU emulation's codes bit
 * for bit, as fp8.cu's casts); the attention is the same kernel reading codes (FP8 = true): k_scale
 * is folded into the query once and v_scale into the output, so a key costs one byte an
 * element and no extra multiply. */
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/paged.h"

#include <cuda_fp8.h>
#include <limits.h>
#include <math.h>

#define LJ_PA_WARPS 8
#define LJ_PA_MAX_REP 8
#define LJ_PA_MAX_HD 256

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
/* The splits of one query head merged (FlashDecoding): o = sum_s e^(m_s - M) acc_s / sum_s
 * e^(m_s - M) l_s, M = max_s m_s; a split that held no key has m_s = -inf. One block per query
 * head row (n, head), hd threads. */
static __global__ void paged_combine_kernel(lj_bf16 *out, const float *part, int splits, int hd) {
    const int64_t h = blockIdx.x;
    const float *pp = part + h * splits * (hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < splits; s++) M = fmaxf(M, pp[s * (hd + 2)]);
    float L = 0.0f, o = 0.0f;
    for (int s = 0; s < splits; s++) {
        const float ms = pp[s * (hd + 2)];
        const float c = ms == -INFINITY ? 0.0f : __expf(ms - M);
        L += c * pp[s * (hd + 2) + 1];
        o += c * pp[s * (hd + 2) + 2 + threadIdx.x];
    }
    out[h * hd + threadIdx.x] = __float2bfloat16_rn(o / L);
}

/* Splits per (row, KV head): enough thread blocks to fill the GPU twice over when the batch alone
 * does not (a decode batch of a few sequences), from N alone, so that a captured graph keeps its
 * grid; at most LJ_PA_MAX_SPLITS. The partial results need N nh splits (hd + 2) floats, fewer than
 * 4 SMs LJ_PA_MAX_REP (LJ_PA_MAX_HD + 2) since N nkv splits < 4 SMs: a buffer of that size,
 * allocated on the first call (never during a graph capture: serving runs each batch size eagerly
 * before capturing it) and kept. */
#define LJ_PA_MAX_SPLITS 64
static int paged_splits(int N, int nkv) {
    const int target = 2 * lj_cuda_num_sms(), ctas = N * nkv;
    if (ctas >= target) return 1;
    const int s = (target + ctas - 1) / ctas;
    return s < LJ_PA_MAX_SPLITS ? s : LJ_PA_MAX_SPLITS;
}
static float *g_paged_part;

/* The launch of paged_attention_kernel<..., FP8> for the shape (the template instance by head
 * elements per lane and GQA group size). */
template <bool FP8>
static void paged_attention_launch(void *out, const void *qkv, const void *kv_cache, const int32_t *block_tables,
                                   const int32_t *seq, const int32_t *pos, int N, int max_blocks, int block_size,
                                   int nh, int nkv, int hd, const float *k_scale, const float *v_scale) {
    LJ_ASSERT(hd >= 1 && hd <= LJ_PA_MAX_HD && nkv > 0 && nh % nkv == 0 && nh / nkv <= LJ_PA_MAX_REP,
              "paged_attention: hd %d (<= %d), nh %d, nkv %d (nh / nkv <= %d)", hd, LJ_PA_MAX_HD, nh, nkv,
              LJ_PA_MAX_REP);
    if (N <= 0) return;
    const int rep = nh / nkv;
    const size_t shmem = (size_t)(rep * hd + 2 * LJ_PA_WARPS * rep + LJ_PA_WARPS * rep * hd) * sizeof(float);
    const int splits = paged_splits(N, nkv);
    if (splits > 1 && !g_paged_part) {
        const size_t bytes = (size_t)4 * lj_cuda_num_sms() * LJ_PA_MAX_REP * (LJ_PA_MAX_HD + 2) * sizeof(float);
        if (lj_cuda_alloc((void **)&g_paged_part, bytes) != LJ_OK)
            LJ_ASSERT(0, "paged_attention: %s", lj_error_message());
    }
    const dim3 grid((unsigned)N, (unsigned)nkv, (unsigned)splits);
    const float scale = 1.0f / sqrtf((float)hd);
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
    if (splits > 1) {
        paged_combine_kernel<<<N * nh, hd, 0, lj_cuda_stream()>>>((lj_bf16 *)out, g_paged_part, splits, hd);
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

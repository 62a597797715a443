/* vision_attention.cu: attention over packed variable-length segments on CUDA (ops.h
 * attention_varlen_*; FlashAttention's varlen interface): bidirectional (the vision tower) or
 * causal within each segment of cu_seqlens, GQA, scale 1/sqrt(hd), every head_dim up to 128 (the
 * Qwen3-VL towers: 64 for 2B/4B, 72 for 8B, 16 for the tiny fixture).
 *
 * Flash-style on CUDA cores in fp32 (Dao et al. 2022, FlashAttention-2's split of the backward):
 *   forward   block = 64 query rows (one thread each) of one head; K and V pass through shared
 *             memory in tiles of 64 keys; each thread keeps its output row in registers with the
 *             online softmax (running max and sum, rescaled every 16 keys); lse = m + log(l).
 *   backward  two kernels, no atomics (deterministic): dQ with a block per 64 query rows of one
 *             head (P recomputed from the saved lse, D_i = dout_i . out_i per thread), and dK, dV
 *             with a block per 64 key rows of one kv head looping over the query tiles of every
 *             head of its group.
 * A block covers 64 consecutive global rows; where they span several segments it takes each
 * segment in turn (the threads of the other segments idle), so no segment table is needed on
 * the host and nothing is read back (capturable). Rows of a thread's own operand (its q, or its
 * k and v) sit in shared memory with a stride of D + 1 floats (no bank conflicts); the rows every
 * thread reads at once are broadcast. head_dim is rounded up to a compiled width D (16, 32, 64,
 * 72, 96, 128) with zero padding. These kernels need no workspace.
 *
 * Which kernels run (the same tests in the forward and the backward;
 * lj_cuda_attention_varlen_kernels says which ran):
 *   1. cuDNN's fused SDPA (attention_cudnn.cu's full graphs) for uniform segments (nseg *
 *      max_seqlen == N: the images of a batch at one resolution) as one dense bidirectional
 *      attention of nseg sequences of max_seqlen rows: bidirectional, head_dim 64 or 128, a table
 *      whose attention is LJ_ATTENTION_AUTO and not deterministic, cuDNN's plans built and
 *      fitting (cuDNN 9.14 takes only lengths that are multiples of 128). The lse layout then is
 *      cuDNN's [nseg, nh, max_seqlen] instead of [nh, N]; the backward takes this path exactly
 *      when its forward did.
 *   2. The tensor-core flash kernels (attention.cu, mask FA_SEGS) for any other bidirectional
 *      segments at head_dim 64, 72 or 128 with 16-byte aligned tensors, on a table whose attention
 *      is not LJ_ATTENTION_SIMPLE; the backward only outside deterministic mode (it adds dQ with
 *      atomics) and with the workspace (dQ in fp32 and D = rowsum(dO * O)).
 *   3. These CUDA-core kernels otherwise (causal segments, other head dims, SIMPLE tables, the
 *      deterministic backward).
 * 2 and 3 write the same lse, [nh, N], so a backward on 3 accepts a forward on 2 (deterministic
 * mode, a misaligned dqkv). */
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/vision.h"

#define VA_BQ 64    /* query rows per block (forward, dQ) and per shared tile (dK, dV) */
#define VA_BK 64    /* key rows per shared tile (forward, dQ) and per block (dK, dV) */
#define VA_CHUNK 16 /* keys per online-softmax rescale */

/* rows [r0, r0 + rows) of one head (column col of qkv-like rows of `stride` elements) into
 * dst[rows][ld] as fp32, zero beyond hd and beyond `rows` up to `cap` rows. */
template <int D>
static __device__ void va_load(float *dst, int ld, const lj_bf16 *src, int64_t stride, int col, int r0, int rows,
                               int cap, int hd) {
    for (int e = threadIdx.x; e < cap * D; e += blockDim.x) {
        const int i = e / D, d = e % D;
        dst[i * ld + d] = i < rows && d < hd ? lj_ld(src + (int64_t)(r0 + i) * stride + col + d) : 0.0f;
    }
}

/* K and V rows [kt, kt + nk) of one kv head into sK, sV [nk][D], between two barriers of the block
 * (the previous tile's readers are done before, every row is there after). */
template <int D>
static __device__ void va_load_kv(float *sK, float *sV, const lj_bf16 *qkv, int64_t row, int kcol, int vcol, int kt,
                                  int nk, int hd) {
    __syncthreads();
    va_load<D>(sK, D, qkv, row, kcol, kt, nk, nk, hd);
    va_load<D>(sV, D, qkv, row, vcol, kt, nk, nk, hd);
    __syncthreads();
}

template <int D>
__global__ void __launch_bounds__(VA_BQ)
    varlen_forward_kernel(lj_bf16 *out, float *lse, const lj_bf16 *qkv, const int32_t *cu, int nseg, int N, int nh,
                          int nkv, int hd, int causal, float scale) {
    extern __shared__ float va_smem[];
    float *sQ = va_smem, *sK = sQ + VA_BQ * (D + 1), *sV = sK + VA_BK * D;
    const int tid = threadIdx.x, h = blockIdx.y, g = h / (nh / nkv);
    const int64_t row = (int64_t)(nh + 2 * nkv) * hd;
    const int Q = nh * hd, kcol = Q + g * hd, vcol = Q + nkv * hd + g * hd;
    const int r0 = blockIdx.x * VA_BQ, r1 = min(N, r0 + VA_BQ), i = r0 + tid;
    va_load<D>(sQ, D + 1, qkv, row, h * hd, r0, r1 - r0, VA_BQ, hd);
    const float *q = sQ + tid * (D + 1);
    for (int s = lj_segment_of(cu, nseg, r0); s < nseg && cu[s] < r1; s++) {
        const int a = cu[s], b = cu[s + 1];
        if (b <= a) continue;
        const bool active = i < r1 && i >= a && i < b;
        const int kend = causal ? min(b, r1) : b;
        float m = -INFINITY, l = 0.0f, acc[D];
#pragma unroll
        for (int d = 0; d < D; d++) acc[d] = 0.0f;
        for (int kt = a; kt < kend; kt += VA_BK) {
            const int nk = min(VA_BK, kend - kt);
            va_load_kv<D>(sK, sV, qkv, row, kcol, vcol, kt, nk, hd);
            if (!active) continue;
            const int lim = causal ? min(nk, i - kt + 1) : nk;
            for (int c0 = 0; c0 < lim; c0 += VA_CHUNK) {
                float sc[VA_CHUNK], cm = -INFINITY;
#pragma unroll
                for (int j = 0; j < VA_CHUNK; j++) {
                    float v = -INFINITY;
                    if (c0 + j < lim) {
                        const float *k = sK + (c0 + j) * D;
                        float dot = 0.0f;
#pragma unroll
                        for (int d = 0; d < D; d++) dot += q[d] * k[d];
                        v = dot * scale;
                    }
                    sc[j] = v;
                    cm = fmaxf(cm, v);
                }
                const float mn = fmaxf(m, cm), alpha = expf(m - mn);
                l *= alpha;
#pragma unroll
                for (int d = 0; d < D; d++) acc[d] *= alpha;
#pragma unroll
                for (int j = 0; j < VA_CHUNK; j++) {
                    if (c0 + j >= lim) break;
                    const float p = expf(sc[j] - mn);
                    l += p;
                    const float *v = sV + (c0 + j) * D;
#pragma unroll
                    for (int d = 0; d < D; d++) acc[d] += p * v[d];
                }
                m = mn;
            }
        }
        if (active) {
            const float inv = 1.0f / l;
            lj_bf16 *o = out + (int64_t)i * Q + h * hd;
#pragma unroll
            for (int d = 0; d < D; d++)
                if (d < hd) lj_st(o + d, acc[d] * inv);
            lse[(int64_t)h * N + i] = m + logf(l);
        }
    }
}

/* dq_i = scale * sum_j p_ij (dp_ij - D_i) k_j, p_ij = exp(scale q_i.k_j - lse_i), dp_ij = do_i.v_j. */
template <int D>
__global__ void __launch_bounds__(VA_BQ)
    varlen_backward_dq_kernel(lj_bf16 *dqkv, const lj_bf16 *dout, const lj_bf16 *qkv, const lj_bf16 *out,
                              const float *lse, const int32_t *cu, int nseg, int N, int nh, int nkv, int hd, int causal,
                              float scale) {
    extern __shared__ float va_smem[];
    float *sQ = va_smem, *sDO = sQ + VA_BQ * (D + 1), *sK = sDO + VA_BQ * (D + 1), *sV = sK + VA_BK * D;
    const int tid = threadIdx.x, h = blockIdx.y, g = h / (nh / nkv);
    const int64_t row = (int64_t)(nh + 2 * nkv) * hd;
    const int Q = nh * hd, kcol = Q + g * hd, vcol = Q + nkv * hd + g * hd;
    const int r0 = blockIdx.x * VA_BQ, r1 = min(N, r0 + VA_BQ), i = r0 + tid;
    va_load<D>(sQ, D + 1, qkv, row, h * hd, r0, r1 - r0, VA_BQ, hd);
    va_load<D>(sDO, D + 1, dout, Q, h * hd, r0, r1 - r0, VA_BQ, hd);
    __syncthreads();
    const float *q = sQ + tid * (D + 1), *dor = sDO + tid * (D + 1);
    float Di = 0.0f, L = 0.0f;
    if (i < r1) {
        const lj_bf16 *o = out + (int64_t)i * Q + h * hd;
        for (int d = 0; d < hd; d++) Di += dor[d] * lj_ld(o + d);
        L = lse[(int64_t)h * N + i];
    }
    for (int s = lj_segment_of(cu, nseg, r0); s < nseg && cu[s] < r1; s++) {
        const int a = cu[s], b = cu[s + 1];
        if (b <= a) continue;
        const bool active = i < r1 && i >= a && i < b;
        const int kend = causal ? min(b, r1) : b;
        float dq[D];
#pragma unroll
        for (int d = 0; d < D; d++) dq[d] = 0.0f;
        for (int kt = a; kt < kend; kt += VA_BK) {
            const int nk = min(VA_BK, kend - kt);
            va_load_kv<D>(sK, sV, qkv, row, kcol, vcol, kt, nk, hd);
            if (!active) continue;
            const int lim = causal ? min(nk, i - kt + 1) : nk;
            for (int j = 0; j < lim; j++) {
                const float *k = sK + j * D, *v = sV + j * D;
                float qk = 0.0f, dp = 0.0f;
#pragma unroll
                for (int d = 0; d < D; d++) {
                    qk += q[d] * k[d];
                    dp += dor[d] * v[d];
                }
                const float p = expf(qk * scale - L), ds = p * (dp - Di) * scale;
#pragma unroll
                for (int d = 0; d < D; d++) dq[d] += ds * k[d];
            }
        }
        if (active) {
            lj_bf16 *o = dqkv + (int64_t)i * row + h * hd;
#pragma unroll
            for (int d = 0; d < D; d++)
                if (d < hd) lj_st(o + d, dq[d]);
        }
    }
}

/* dk_j = scale * sum_{h in group, i} p_ij (dp_ij - D_i) q_i, dv_j = sum p_ij do_i. */
template <int D>
__global__ void __launch_bounds__(VA_BK)
    varlen_backward_dkv_kernel(lj_bf16 *dqkv, const lj_bf16 *dout, const lj_bf16 *qkv, const lj_bf16 *out,
                               const float *lse, const int32_t *cu, int nseg, int N, int nh, int nkv, int hd,
                               int causal, float scale) {
    extern __shared__ float va_smem[];
    float *sK = va_smem, *sV = sK + VA_BK * (D + 1), *sQ = sV + VA_BK * (D + 1), *sDO = sQ + VA_BQ * D;
    float *sL = sDO + VA_BQ * D, *sD = sL + VA_BQ;
    const int tid = threadIdx.x, g = blockIdx.y, group = nh / nkv;
    const int64_t row = (int64_t)(nh + 2 * nkv) * hd;
    const int Q = nh * hd, kcol = Q + g * hd, vcol = Q + nkv * hd + g * hd;
    const int c0 = blockIdx.x * VA_BK, c1 = min(N, c0 + VA_BK), j = c0 + tid;
    va_load<D>(sK, D + 1, qkv, row, kcol, c0, c1 - c0, VA_BK, hd);
    va_load<D>(sV, D + 1, qkv, row, vcol, c0, c1 - c0, VA_BK, hd);
    const float *k = sK + tid * (D + 1), *v = sV + tid * (D + 1);
    float dk[D], dv[D];
#pragma unroll
    for (int d = 0; d < D; d++) dk[d] = dv[d] = 0.0f;
    for (int s = lj_segment_of(cu, nseg, c0); s < nseg && cu[s] < c1; s++) {
        const int a = cu[s], b = cu[s + 1];
        if (b <= a) continue;
        const bool active = j < c1 && j >= a && j < b;
        const int qbeg = causal ? max(a, c0) : a;
        for (int h = g * group; h < (g + 1) * group; h++)
            for (int qt = qbeg; qt < b; qt += VA_BQ) {
                const int nq = min(VA_BQ, b - qt);
                __syncthreads();
                va_load<D>(sQ, D, qkv, row, h * hd, qt, nq, nq, hd);
                va_load<D>(sDO, D, dout, Q, h * hd, qt, nq, nq, hd);
                __syncthreads();
                if (tid < nq) { /* D_i of the tile's rows */
                    const lj_bf16 *o = out + (int64_t)(qt + tid) * Q + h * hd;
                    float di = 0.0f;
                    for (int d = 0; d < hd; d++) di += sDO[tid * D + d] * lj_ld(o + d);
                    sD[tid] = di;
                    sL[tid] = lse[(int64_t)h * N + qt + tid];
                }
                __syncthreads();
                if (!active) continue;
                const int first = causal ? max(0, j - qt) : 0;
                for (int ii = first; ii < nq; ii++) {
                    const float *q = sQ + ii * D, *dor = sDO + ii * D;
                    float qk = 0.0f, dp = 0.0f;
#pragma unroll
                    for (int d = 0; d < D; d++) {
                        qk += q[d] * k[d];
                        dp += dor[d] * v[d];
                    }
                    const float p = expf(qk * scale - sL[ii]), ds = p * (dp - sD[ii]) * scale;
#pragma unroll
                    for (int d = 0; d < D; d++) {
                        dv[d] += p * dor[d];
                        dk[d] += ds * q[d];
                    }
                }
            }
    }
    if (j < c1) {
        lj_bf16 *ok = dqkv + (int64_t)j * row + kcol, *ov = dqkv + (int64_t)j * row + vcol;
#pragma unroll
        for (int d = 0; d < D; d++)
            if (d < hd) {
                lj_st(ok + d, dk[d]);
                lj_st(ov + d, dv[d]);
            }
    }
}

/* ---- launch --------------------------------------------------------------------------- */

/* Workspace for up to N rows, two regions shared by cuDNN's path and the flash kernels, then
 * cuDNN's plans:
 *   dQ accumulator  [N, nh*hd] f32   (cuDNN's backward and the flash backward sum dQ in fp32 there)
 *   softmax_sum     [nh, N] f32      (D = rowsum(dO * O); [nseg, nh, T] as cuDNN writes it)
 *   plan workspace  VA_CUDNN_PLAN_WS bytes for cuDNN's plans (only where cuDNN may run)
 * each region 256-byte aligned. The plans' size depends on the segment split, unknown when the
 * workspace is sized (planning time), so a fixed allowance is taken and cuDNN runs only for
 * plans that fit in it. The CUDA-core kernels and the flash forward need none. */
#define VA_CUDNN_PLAN_WS ((size_t)64 << 20) /* 64 MiB: cuDNN's SDPA plans at the towers' shapes ask far less */

static size_t va_align(size_t b) { return (b + 255) / 256 * 256; }
static size_t va_dq_bytes(int N, int nh, int hd) { return va_align((size_t)N * nh * hd * sizeof(float)); }
static size_t va_sum_bytes(int N, int nh) { return va_align((size_t)nh * N * sizeof(float)); }

/* Whether the configuration may take the cuDNN path at all (head_dim 64 or 128). */
static int va_cudnn_config(const lj_ops_config *cfg, int hd) {
    return cfg && cfg->attention == LJ_ATTENTION_AUTO && !cfg->deterministic && (hd == 64 || hd == 128);
}

/* Whether the configuration runs the flash forward (backward 0) or backward (1) at this head_dim
 * for bidirectional segments (alignment apart). */
static int va_flash_config(const lj_ops_config *cfg, int hd, int causal, int backward) {
    return cfg && cfg->attention != LJ_ATTENTION_SIMPLE && !causal && (hd == 64 || hd == 72 || hd == 128) &&
           !(backward && cfg->deterministic);
}

size_t lj_cuda_attention_varlen_workspace_bytes(int max_seqlen, int nh, int nkv, int hd, const lj_ops_config *cfg) {
    (void)nkv;
    const int dnn = va_cudnn_config(cfg, hd), flash = va_flash_config(cfg, hd, 0, 1);
    if (max_seqlen <= 0 || (!dnn && !flash)) return 0;
    return va_dq_bytes(max_seqlen, nh, hd) + va_sum_bytes(max_seqlen, nh) + (dnn ? VA_CUDNN_PLAN_WS : 0);
}

/* Bidirectional segments of one length: one dense attention of nseg x max_seqlen. */
static int va_uniform(int nseg, int max_seqlen, int N, int causal) {
    return !causal && nseg > 0 && max_seqlen > 0 && (int64_t)nseg * max_seqlen == N;
}

/* Whether the op may run as one dense bidirectional attention on cuDNN: its workspace given,
 * uniform segments, a head_dim cuDNN's path covers (the entry points decide the rest). */
static int va_cudnn_shape(const lj_ops_config *cfg, const void *workspace, int nseg, int max_seqlen, int N, int hd,
                          int causal) {
    return va_cudnn_config(cfg, hd) && workspace && va_uniform(nseg, max_seqlen, N, causal);
}

static void va_check(int N, int nh, int nkv, int hd, const char *what) {
    LJ_ASSERT(hd >= 1 && hd <= 128, "%s: head_dim %d is not supported (1..128)", what, hd);
    LJ_ASSERT(nkv >= 1 && nh % nkv == 0 && N >= 0, "%s: %d heads over %d kv heads", what, nh, nkv);
}

const char *lj_cuda_attention_varlen_kernels(const lj_ops_config *cfg, int nseg, int max_seqlen, int N, int nh,
                                             int nkv, int hd, int causal, int backward) {
    if (va_cudnn_config(cfg, hd) && va_uniform(nseg, max_seqlen, N, causal) &&
        lj_cuda_cudnn_attention_full_active(nseg, max_seqlen, nh, nkv, hd, VA_CUDNN_PLAN_WS))
        return "cudnn";
    return va_flash_config(cfg, hd, causal, backward) ? "flash" : "cuda-core";
}

/* Shared bytes of the three kernels at width D. */
static size_t va_fwd_smem(int D) { return sizeof(float) * ((size_t)VA_BQ * (D + 1) + 2 * (size_t)VA_BK * D); }
static size_t va_dq_smem(int D) { return sizeof(float) * (2 * (size_t)VA_BQ * (D + 1) + 2 * (size_t)VA_BK * D); }
static size_t va_dkv_smem(int D) {
    return sizeof(float) * (2 * (size_t)VA_BK * (D + 1) + 2 * (size_t)VA_BQ * D + 2 * (size_t)VA_BQ);
}

template <int D>
static void va_forward(void *out, float *lse, const void *qkv, const int32_t *cu, int nseg, int N, int nh, int nkv,
                       int hd, int causal) {
    const size_t smem = va_fwd_smem(D);
    LJ_CUDA_CHECK(cudaFuncSetAttribute(varlen_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                  "cudaFuncSetAttribute in attention_varlen_forward");
    dim3 grid((unsigned)((N + VA_BQ - 1) / VA_BQ), (unsigned)nh);
    varlen_forward_kernel<D><<<grid, VA_BQ, smem, lj_cuda_stream()>>>((lj_bf16 *)out, lse, (const lj_bf16 *)qkv, cu,
                                                                     nseg, N, nh, nkv, hd, causal,
                                                                     1.0f / sqrtf((float)hd));
    LJ_CUDA_LAUNCHED("varlen_forward_kernel");
}

template <int D>
static void va_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                        const int32_t *cu, int nseg, int N, int nh, int nkv, int hd, int causal) {
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t s1 = va_dq_smem(D), s2 = va_dkv_smem(D);
    LJ_CUDA_CHECK(cudaFuncSetAttribute(varlen_backward_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)s1),
                  "cudaFuncSetAttribute in attention_varlen_backward");
    LJ_CUDA_CHECK(cudaFuncSetAttribute(varlen_backward_dkv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)s2),
                  "cudaFuncSetAttribute in attention_varlen_backward");
    dim3 g1((unsigned)((N + VA_BQ - 1) / VA_BQ), (unsigned)nh), g2((unsigned)((N + VA_BK - 1) / VA_BK), (unsigned)nkv);
    varlen_backward_dq_kernel<D><<<g1, VA_BQ, s1, lj_cuda_stream()>>>(
        (lj_bf16 *)dqkv, (const lj_bf16 *)dout, (const lj_bf16 *)qkv, (const lj_bf16 *)out, lse, cu, nseg, N, nh, nkv,
        hd, causal, scale);
    LJ_CUDA_LAUNCHED("varlen_backward_dq_kernel");
    varlen_backward_dkv_kernel<D><<<g2, VA_BK, s2, lj_cuda_stream()>>>(
        (lj_bf16 *)dqkv, (const lj_bf16 *)dout, (const lj_bf16 *)qkv, (const lj_bf16 *)out, lse, cu, nseg, N, nh, nkv,
        hd, causal, scale);
    LJ_CUDA_LAUNCHED("varlen_backward_dkv_kernel");
}

/* Calls F<D>(args) for the narrowest compiled width D >= hd. */
#define VA_DISPATCH(F, hd, ...)              \
    do {                                     \
        if ((hd) <= 16) F<16>(__VA_ARGS__);  \
        else if ((hd) <= 32) F<32>(__VA_ARGS__); \
        else if ((hd) <= 64) F<64>(__VA_ARGS__); \
        else if ((hd) <= 72) F<72>(__VA_ARGS__); \
        else if ((hd) <= 96) F<96>(__VA_ARGS__); \
        else F<128>(__VA_ARGS__);            \
    } while (0)

void lj_cuda_attention_varlen_forward(void *out, float *lse, const void *qkv, const int32_t *cu_seqlens, int nseg,
                                      int max_seqlen, int N, int nh, int nkv, int hd, int causal, void *workspace,
                                      const lj_ops_config *cfg) {
    va_check(N, nh, nkv, hd, "attention_varlen_forward");
    if (N == 0 || nseg <= 0) return;
    if (va_cudnn_shape(cfg, workspace, nseg, max_seqlen, N, hd, causal) &&
        lj_cuda_cudnn_attention_full_forward(out, lse, qkv, nseg, max_seqlen, nh, nkv, hd,
                                             (char *)workspace + va_dq_bytes(N, nh, hd) + va_sum_bytes(N, nh),
                                             VA_CUDNN_PLAN_WS))
        return;
    if (va_flash_config(cfg, hd, causal, 0) && lj_cuda_flash_segments_supported(hd, out, qkv, NULL, NULL)) {
        lj_cuda_flash_segments_forward(out, lse, qkv, cu_seqlens, nseg, N, nh, nkv, hd,
                                       cfg->flash_forward_mtiles == 1 ? 1 : 2);
        return;
    }
    VA_DISPATCH(va_forward, hd, out, lse, qkv, cu_seqlens, nseg, N, nh, nkv, hd, causal);
}

void lj_cuda_attention_varlen_backward(void *dqkv, const void *dout, const void *qkv, const void *out,
                                       const float *lse, const int32_t *cu_seqlens, int nseg, int max_seqlen, int N,
                                       int nh, int nkv, int hd, int causal, void *workspace,
                                       const lj_ops_config *cfg) {
    va_check(N, nh, nkv, hd, "attention_varlen_backward");
    if (N == 0 || nseg <= 0) return;
    float *dq_accum = (float *)workspace;
    float *softmax_sum = workspace ? (float *)((char *)workspace + va_dq_bytes(N, nh, hd)) : NULL;
    if (va_cudnn_shape(cfg, workspace, nseg, max_seqlen, N, hd, causal) &&
        lj_cuda_cudnn_attention_full_backward(dqkv, dout, qkv, out, lse, nseg, max_seqlen, nh, nkv, hd, softmax_sum,
                                              dq_accum,
                                              (char *)workspace + va_dq_bytes(N, nh, hd) + va_sum_bytes(N, nh),
                                              VA_CUDNN_PLAN_WS))
        return;
    if (va_flash_config(cfg, hd, causal, 1) && workspace &&
        lj_cuda_flash_segments_supported(hd, dqkv, dout, qkv, out)) {
        lj_cuda_flash_segments_backward(dqkv, dout, qkv, out, lse, cu_seqlens, nseg, N, nh, nkv, hd, softmax_sum,
                                        dq_accum);
        return;
    }
    VA_DISPATCH(va_backward, hd, dqkv, dout, qkv, out, lse, cu_seqlens, nseg, N, nh, nkv, hd, causal);
}

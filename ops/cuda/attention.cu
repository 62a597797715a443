/* attention.cu: causal GQA flash attention on tensor cores (mma.sync m16n8k16, bf16 in,
 * fp32 accumulate) for head_dim 64 and 128, in the FlashAttention-2 scheme (Dao 2023,
 * "FlashAttention-2", Algorithms 1 and 2): tiles of 64 queries x 64 keys, online softmax with
 * the log-sum-exp saved per row, and a backward that recomputes P from it. Other head dims,
 * unaligned tensors and a table whose attention kernels are LJ_ATTENTION_SIMPLE go to
 * attention_simple.cu. The same kernels run attention_varlen's bidirectional segments
 * (vision_attention.cu dispatches) for head_dim 64, 72 and 128.
 *
 * Dispatch: cuDNN's fused SDPA (attention_cudnn.cu) runs first where it supports the
 * shape (head_dim 64/128, cuDNN 9 found at run time, plans built outside graph capture);
 * a table opened with attention LJ_ATTENTION_FLASH (or SIMPLE) runs these kernels instead.
 * Attention within documents (--reset-attention-mask: attention_forward_docs) always runs these
 * kernels, instances of mask FA_DOCS: each query's first key is its document's start.
 * Both write the same lse (natural-log log-sum-exp of the scaled scores), so either backward
 * accepts either forward's lse.
 *
 * Segments (mask FA_SEGS; attention_varlen with causal = 0, the vision tower): B = 1, T = N rows
 * packed from the segments of cu_seqlens, and query r sees the keys [cu[s], cu[s+1]) of its
 * segment s, all of them (no causal cut). Tiles stay 64-row aligned in the packed rows: a block
 * takes the key tiles (forward) or query tiles (backward) of the union of its rows' segments and
 * masks each score by its own row's range, so a block whose rows span two long segments does the
 * work of both (at 4 x 784 rows, 3 blocks of 25 per head in the forward). Each row finds its
 * segment by a binary search of cu_seqlens (read on the device: nothing is read back, so the op
 * stays capturable). lse is [nh, N], the layout of the CUDA-core varlen kernels, so either
 * backward accepts either forward's lse.
 *
 * Head dims that are not a multiple of 16 (72: Qwen3-VL 8B's tower) are padded inside the kernel
 * to HP = the next multiple of 16: the shared tiles hold HP columns, the columns past HD are
 * zero-filled when loaded (so Q K^T, P V, dS K and dS^T Q see zeros there), and no column past HD
 * is stored. HD must be a multiple of 8 (16-byte rows for cp.async).
 *
 * Forward: block (query tile, head, batch), 4 warps x 16 query rows; K/V tiles double-buffered
 * through cp.async. Backward: block (key tile, kv head, batch), 4 warps x 16 keys; it loops over
 * the group's query heads and the query tiles at or after the key tile, keeps dK and dV in
 * registers (so GQA sums over the group without atomics), and adds dQ into an fp32 workspace
 * with atomics; a last pass scales and rounds dQ into dqkv.
 *
 * Register fragments follow the PTX ISA's layouts for mma.m16n8k16 and ldmatrix: lane = 4g + t;
 * an accumulator tile holds rows g and g+8, columns 2t and 2t+1. */
#include "ops/cuda/cuda_common.h"

#include <math.h>

/* attention_cudnn.cu (declared here until cuda_common.h carries them). The workspace
 * of the cuDNN backward is this file's: softmax_sum = the D region, dQ accumulator = the dQ
 * region, then the plan's own workspace after both. Each returns 1 when cuDNN ran the op. */

#define FA_THREADS 128
#define FA_BC 64 /* keys per tile (both kernels), queries per forward tile */
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

/* ---- PTX wrappers ---------------------------------------------------------------- */

static __device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

static __device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* c[16x8] += a[16x16] b[16x8] (bf16 operands, fp32 accumulators). */
static __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 16 bytes global -> shared, asynchronously; src_bytes 0 writes zeros. */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(__cvta_generic_to_global(src)), "r"(src_bytes));
}
static __device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
static __device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&h;
}

/* ---- fragment loaders (stride in elements) ------------------------------------------ */

/* A operand (16 x 16 at rows m0, cols k0) of a row-major [m][k] tile. */
static __device__ __forceinline__ void frag_a(uint32_t a[4], const lj_bf16 *s, int stride, int m0, int k0, int lane) {
    int r = m0 + (lane & 7) + ((lane >> 3) & 1) * 8;
    int c = k0 + (lane >> 4) * 8;
    ldsm_x4(a, s + r * stride + c);
}

/* A operand (16 x 16 at m0, k0) of a tile stored transposed, [k][m]. */
static __device__ __forceinline__ void frag_a_t(uint32_t a[4], const lj_bf16 *s, int stride, int m0, int k0,
                                                int lane) {
    int mi = lane >> 3;
    int r = k0 + (lane & 7) + (mi >> 1) * 8;
    int c = m0 + (mi & 1) * 8;
    ldsm_x4_t(a, s + r * stride + c);
}

/* B operands of n-tiles n0 and n0 + 8 (k16 at k0) of a tile stored [n][k]:
 * b[0], b[1] for n0; b[2], b[3] for n0 + 8. */
static __device__ __forceinline__ void frag_b(uint32_t b[4], const lj_bf16 *s, int stride, int n0, int k0, int lane) {
    int r = n0 + (lane & 7) + (lane >> 4) * 8;
    int c = k0 + ((lane >> 3) & 1) * 8;
    ldsm_x4(b, s + r * stride + c);
}

/* The same from a tile stored [k][n]. */
static __device__ __forceinline__ void frag_b_t(uint32_t b[4], const lj_bf16 *s, int stride, int n0, int k0,
                                                int lane) {
    int r = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
    int c = n0 + (lane >> 4) * 8;
    ldsm_x4_t(b, s + r * stride + c);
}

/* Accumulator tiles 2kk and 2kk+1 (16 rows x 16 columns) as an A operand. */
static __device__ __forceinline__ void acc_to_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = pack_bf16(c0[0], c0[1]);
    a[1] = pack_bf16(c0[2], c0[3]);
    a[2] = pack_bf16(c1[0], c1[1]);
    a[3] = pack_bf16(c1[2], c1[3]);
}

/* The masks of the kernels: plain causal, causal within documents (doc_start), bidirectional
 * within segments (cu_seqlens). */
enum { FA_CAUSAL = 0, FA_DOCS = 1, FA_SEGS = 2 };

/* The head dim as the kernels' tiles hold it: HD rounded up to a multiple of 16 (zero columns). */
static constexpr __host__ __device__ int fa_hp(int hd) { return (hd + 15) / 16 * 16; }

/* ROWS x HD tile of rows row0.. of a global matrix (row stride `gstride` elements, g at
 * row 0) into shared memory (row stride HP + 8, HP = fa_hp(HD)); rows at or past T and the
 * columns HD..HP-1 are zero-filled. */
template <int HD, int ROWS>
static __device__ __forceinline__ void load_tile(lj_bf16 *s, const lj_bf16 *g, int64_t gstride, int row0, int T,
                                                 int tid) {
    constexpr int HP = fa_hp(HD), CPR = HP / 8;
    static_assert(HD % 8 == 0, "head_dim must be a multiple of 8");
#pragma unroll
    for (int c = tid; c < ROWS * CPR; c += FA_THREADS) {
        int r = c / CPR, col = (c % CPR) * 8;
        int gr = row0 + r;
        bool ok = gr < T && (HP == HD || col < HD);
        const int gc = HP == HD || ok ? col : 0; /* a padding column reads nothing: point at a real one */
        cp_async16(s + r * (HP + 8) + col, g + (int64_t)(ok ? gr : 0) * gstride + gc, ok ? 16 : 0);
    }
}

/* Forward: MT m-tiles of 16 query rows per warp, so a block covers 64*MT queries and each K/V
 * fragment loaded from shared memory feeds MT mma instructions. */
template <int HD, int MT>
static constexpr int fwd_smem_bytes() { return (64 * MT + 4 * FA_BC) * (fa_hp(HD) + 8) * 2; }

/* Backward: K, V, Q, dO, dS^T tiles, then per query lse and D (and its first key, FA_DOCS; its
 * key range, FA_SEGS). */
template <int HD, int BR, int MASK = FA_CAUSAL>
static constexpr int bwd_smem_bytes() {
    return (2 * FA_BC * (fa_hp(HD) + 8) + 2 * BR * (fa_hp(HD) + 8) + FA_BC * (BR + 8)) * 2 +
           (MASK == FA_SEGS ? 4 : MASK == FA_DOCS ? 3 : 2) * BR * 4;
}

/* ---- forward ----------------------------------------------------------------------- */

/* MASK FA_CAUSAL: query r sees keys 0..r. FA_DOCS: attention within documents (ops.h
 * attention_forward_docs): query r sees keys doc_start[b*T + r] .. r; the key tiles start at the
 * block's first query's document (doc_start never decreases). FA_SEGS (B = 1): query r of segment
 * s sees keys cu[s] .. cu[s+1]-1; the key tiles run from the first query's segment start to the
 * last query's segment end. cu and nseg are read in FA_SEGS only, doc_start in FA_DOCS only. */
template <int HD, int MT, int MASK>
__global__ void __launch_bounds__(FA_THREADS) flash_forward_kernel(lj_bf16 *out, float *lse, const lj_bf16 *qkv,
                                                                   const int32_t *doc_start, int T, int nh, int nkv,
                                                                   float scale_log2, const int32_t *cu, int nseg) {
    extern __shared__ __align__(16) unsigned char fa_smem[];
    constexpr int HP = fa_hp(HD), S = HP + 8, BR = 64 * MT;
    constexpr bool DOCS = MASK == FA_DOCS, SEGS = MASK == FA_SEGS;
    lj_bf16 *sQ = (lj_bf16 *)fa_smem;
    lj_bf16 *sK = sQ + BR * S; /* two buffers */
    lj_bf16 *sV = sK + 2 * FA_BC * S;
    const int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const int kvh = h / (nh / nkv);
    const int64_t row = (int64_t)(nh + 2 * nkv) * HD;
    const lj_bf16 *base = qkv + (int64_t)b * T * row;
    const lj_bf16 *gq = base + (int64_t)h * HD, *gk = base + (int64_t)(nh + kvh) * HD,
                  *gv = base + (int64_t)(nh + nkv + kvh) * HD;
    const int q0 = qb * BR;
    /* key tiles up to the block's last query row (and the sequence's end) */
    const int last = min(q0 + BR, T) - 1;
    const int32_t *ds = DOCS ? doc_start + (int64_t)b * T : NULL;
    /* the keys any query of the block sees: [klo, khi) (causal: up to `last`) */
    int klo = 0, khi = last + 1;
    bool one_seg = false; /* FA_SEGS: every row of the block in one segment (then klo, khi are its range) */
    if (DOCS) klo = ds[q0];
    if (SEGS) {
        const int sa = lj_segment_of(cu, nseg, q0), sb = lj_segment_of(cu, nseg, last);
        klo = cu[sa], khi = cu[sb + 1], one_seg = sa == sb;
    }
    const int jb = klo / FA_BC;            /* the first key tile any query of the block sees */
    const int nkb = (khi - 1) / FA_BC + 1; /* and the end of the last */

    load_tile<HD, BR>(sQ, gq, row, q0, T, tid);
    cp_async_commit();
    load_tile<HD, FA_BC>(sK + (jb & 1) * FA_BC * S, gk, row, jb * FA_BC, T, tid);
    load_tile<HD, FA_BC>(sV + (jb & 1) * FA_BC * S, gv, row, jb * FA_BC, T, tid);
    cp_async_commit();

    uint32_t qf[MT][HP / 16][4];
    cp_async_wait<1>();
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kk = 0; kk < HP / 16; kk++) frag_a(qf[mt][kk], sQ, S, (warp * MT + mt) * 16, kk * 16, lane);
    float o[MT][HP / 8][4];
    float m0[MT], m1[MT], l0[MT], l1[MT];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int i = 0; i < HP / 8; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
        m0[mt] = m1[mt] = -INFINITY;
        l0[mt] = l1[mt] = 0.0f;
    }

    /* each row's first key (FA_DOCS: its document start; FA_SEGS: its segment start) and, FA_SEGS,
     * the end of its keys; a row at or past T sees none */
    int dr0[MT], dr1[MT], de0[MT], de1[MT];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int r0 = q0 + (warp * MT + mt) * 16 + g, r1 = r0 + 8;
        dr0[mt] = DOCS && r0 < T ? ds[r0] : 0;
        dr1[mt] = DOCS && r1 < T ? ds[r1] : 0;
        de0[mt] = de1[mt] = 0;
        if (SEGS && r0 < T) {
            const int s0 = one_seg ? -1 : lj_segment_of(cu, nseg, r0);
            dr0[mt] = one_seg ? klo : cu[s0], de0[mt] = one_seg ? khi : cu[s0 + 1];
        }
        if (SEGS && r1 < T) {
            const int s1 = one_seg ? -1 : lj_segment_of(cu, nseg, r1);
            dr1[mt] = one_seg ? klo : cu[s1], de1[mt] = one_seg ? khi : cu[s1 + 1];
        }
    }

    for (int j = jb; j < nkb; j++) {
        if (j + 1 < nkb) {
            int nb = (j + 1) & 1;
            load_tile<HD, FA_BC>(sK + nb * FA_BC * S, gk, row, (j + 1) * FA_BC, T, tid);
            load_tile<HD, FA_BC>(sV + nb * FA_BC * S, gv, row, (j + 1) * FA_BC, T, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const lj_bf16 *k = sK + (j & 1) * FA_BC * S, *v = sV + (j & 1) * FA_BC * S;

        float s[MT][FA_BC / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < FA_BC / 8; i++) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HP / 16; kk++) {
#pragma unroll
            for (int np = 0; np < FA_BC / 16; np++) {
                uint32_t bk[4];
                frag_b(bk, k, S, np * 16, kk * 16, lane);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816(s[mt][2 * np], qf[mt][kk], bk[0], bk[1]);
                    mma16816(s[mt][2 * np + 1], qf[mt][kk], bk[2], bk[3]);
                }
            }
        }
        /* the tile needs masking when it reaches past the block's first query or past T (FA_DOCS:
         * always, it may start before a row's document; FA_SEGS: when the block's rows span
         * segments, or the tile reaches outside the one segment's keys) */
        const bool mask = SEGS   ? !one_seg || j * FA_BC < klo || (j + 1) * FA_BC > khi
                          : DOCS ? true
                                 : (j + 1) * FA_BC - 1 > q0 || (j + 1) * FA_BC > T;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int r0 = q0 + (warp * MT + mt) * 16 + g, r1 = r0 + 8;
            float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < FA_BC / 8; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int col = j * FA_BC + nt * 8 + 2 * t4 + (e & 1);
                    int r = e < 2 ? r0 : r1;
                    float x = s[mt][nt][e] * scale_log2;
                    const int first = e < 2 ? dr0[mt] : dr1[mt];
                    const bool out_of_range = SEGS ? col < first || col >= (e < 2 ? de0[mt] : de1[mt])
                                                   : col > r || col >= T || (DOCS && col < first);
                    if (mask && out_of_range) x = -INFINITY;
                    s[mt][nt][e] = x;
                }
                mx0 = fmaxf(mx0, fmaxf(s[mt][nt][0], s[mt][nt][1]));
                mx1 = fmaxf(mx1, fmaxf(s[mt][nt][2], s[mt][nt][3]));
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            float mn0 = fmaxf(m0[mt], mx0), mn1 = fmaxf(m1[mt], mx1);
            float mu0 = mn0 == -INFINITY ? 0.0f : mn0, mu1 = mn1 == -INFINITY ? 0.0f : mn1;
            float a0 = exp2f(m0[mt] - mu0), a1 = exp2f(m1[mt] - mu1);
            float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
            for (int nt = 0; nt < FA_BC / 8; nt++) {
                s[mt][nt][0] = exp2f(s[mt][nt][0] - mu0);
                s[mt][nt][1] = exp2f(s[mt][nt][1] - mu0);
                s[mt][nt][2] = exp2f(s[mt][nt][2] - mu1);
                s[mt][nt][3] = exp2f(s[mt][nt][3] - mu1);
                rs0 += s[mt][nt][0] + s[mt][nt][1];
                rs1 += s[mt][nt][2] + s[mt][nt][3];
            }
            l0[mt] = l0[mt] * a0 + rs0;
            l1[mt] = l1[mt] * a1 + rs1;
            m0[mt] = mn0;
            m1[mt] = mn1;
#pragma unroll
            for (int dt = 0; dt < HP / 8; dt++) {
                o[mt][dt][0] *= a0;
                o[mt][dt][1] *= a0;
                o[mt][dt][2] *= a1;
                o[mt][dt][3] *= a1;
            }
        }
#pragma unroll
        for (int kk = 0; kk < FA_BC / 16; kk++) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) acc_to_a(pa[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
            for (int dp = 0; dp < HP / 16; dp++) {
                uint32_t bv[4];
                frag_b_t(bv, v, S, dp * 16, kk * 16, lane);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816(o[mt][2 * dp], pa[mt], bv[0], bv[1]);
                    mma16816(o[mt][2 * dp + 1], pa[mt], bv[2], bv[3]);
                }
            }
        }
        __syncthreads();
    }

    const int64_t orow = (int64_t)nh * HD;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int r0 = q0 + (warp * MT + mt) * 16 + g, r1 = r0 + 8;
        float L0 = l0[mt], L1 = l1[mt];
        L0 += __shfl_xor_sync(0xffffffffu, L0, 1);
        L0 += __shfl_xor_sync(0xffffffffu, L0, 2);
        L1 += __shfl_xor_sync(0xffffffffu, L1, 1);
        L1 += __shfl_xor_sync(0xffffffffu, L1, 2);
        float i0 = 1.0f / L0, i1 = 1.0f / L1;
#pragma unroll
        for (int dt = 0; dt < HP / 8; dt++) {
            if (dt * 8 >= HD) continue; /* a padding column */
            int col = h * HD + dt * 8 + 2 * t4;
            if (r0 < T)
                *(uint32_t *)(out + ((int64_t)b * T + r0) * orow + col) = pack_bf16(o[mt][dt][0] * i0, o[mt][dt][1] * i0);
            if (r1 < T)
                *(uint32_t *)(out + ((int64_t)b * T + r1) * orow + col) = pack_bf16(o[mt][dt][2] * i1, o[mt][dt][3] * i1);
        }
        if (t4 == 0) {
            float *Lp = lse + ((int64_t)b * nh + h) * T;
            if (r0 < T) Lp[r0] = (m0[mt] + log2f(L0)) * FA_LN2;
            if (r1 < T) Lp[r1] = (m1[mt] + log2f(L1)) * FA_LN2;
        }
    }
}

/* ---- backward ---------------------------------------------------------------------- */

/* The masks as the forward's. FA_DOCS: key k gets gradient from the queries q >= k with
 * doc_start[b*T + q] <= k; the query tiles stop at the first whose first query's document starts
 * after the key tile's last key. FA_SEGS (B = 1): key k of segment s gets gradient from every
 * query of s; the query tiles run from the first key's segment start to the last key's segment
 * end. cu and nseg are read in FA_SEGS only, doc_start in FA_DOCS only. */
template <int HD, int BR, int MASK>
__global__ void __launch_bounds__(FA_THREADS) flash_backward_kernel(lj_bf16 *dqkv, float *dq_acc, const lj_bf16 *dout,
                                                                    const lj_bf16 *qkv, const float *lse,
                                                                    const float *dsum, const int32_t *doc_start, int T,
                                                                    int nh, int nkv, float scale, float scale_log2,
                                                                    const int32_t *cu, int nseg) {
    extern __shared__ __align__(16) unsigned char fa_smem[];
    constexpr int HP = fa_hp(HD), S = HP + 8, SD = BR + 8;
    constexpr bool DOCS = MASK == FA_DOCS, SEGS = MASK == FA_SEGS;
    constexpr int MT = BR / 16;          /* query m-tiles of the dQ product */
    constexpr int NSPLIT = 4 / MT;       /* warps sharing one m-tile, each a slice of HP */
    constexpr int DW = HP / NSPLIT;      /* that slice's width */
    static_assert(DW % 16 == 0, "the dQ slices must be whole k16 tiles");
    lj_bf16 *sK = (lj_bf16 *)fa_smem;
    lj_bf16 *sV = sK + FA_BC * S;
    lj_bf16 *sQ = sV + FA_BC * S;
    lj_bf16 *sdO = sQ + BR * S;
    lj_bf16 *sdS = sdO + BR * S; /* dS^T: [key][query] */
    float *sL = (float *)(sdS + FA_BC * SD);
    float *sD = sL + BR;
    int *sS = (int *)(sD + BR); /* FA_DOCS: the queries' document starts; FA_SEGS: their segment starts */
    int *sE = sS + BR;          /* FA_SEGS: the ends of the queries' segments */
    const int kb = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const int group = nh / nkv;
    const int64_t row = (int64_t)(nh + 2 * nkv) * HD, Qw = (int64_t)nh * HD, KVw = (int64_t)nkv * HD;
    const lj_bf16 *base = qkv + (int64_t)b * T * row;
    const int k0 = kb * FA_BC;

    load_tile<HD, FA_BC>(sK, base + Qw + (int64_t)kvh * HD, row, k0, T, tid);
    load_tile<HD, FA_BC>(sV, base + Qw + KVw + (int64_t)kvh * HD, row, k0, T, tid);
    cp_async_commit();

    float dk[HP / 8][4], dv[HP / 8][4];
#pragma unroll
    for (int i = 0; i < HP / 8; i++) {
        dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.0f;
        dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
    }
    const int kr0 = k0 + warp * 16 + g, kr1 = kr0 + 8;
    const int32_t *ds = DOCS ? doc_start + (int64_t)b * T : NULL;
    const int k_last = min(k0 + FA_BC, T) - 1;
    /* the queries that see any key of the tile: [qlo, qhi) (causal: from k0 to T) */
    int qlo = k0, qhi = T;
    if (SEGS) {
        const int sa = lj_segment_of(cu, nseg, k0), sb = lj_segment_of(cu, nseg, k_last);
        qlo = cu[sa], qhi = cu[sb + 1];
    }
    const int qb_first = qlo / BR, nqb = (qhi + BR - 1) / BR;
    const int mt = warp % MT, dsplit = warp / MT;

    for (int hq = 0; hq < group; hq++) {
        const int h = kvh * group + hq;
        const lj_bf16 *gq = base + (int64_t)h * HD;
        const lj_bf16 *gdo = dout + (int64_t)b * T * Qw + (int64_t)h * HD;
        const float *Lh = lse + ((int64_t)b * nh + h) * T, *Dh = dsum + ((int64_t)b * nh + h) * T;
        for (int qb = qb_first; qb < nqb; qb++) {
            const int i0 = qb * BR;
            if (DOCS && ds[i0] > k_last) break; /* this tile's queries and all later ones are in later documents */
            load_tile<HD, BR>(sQ, gq, row, i0, T, tid);
            load_tile<HD, BR>(sdO, gdo, Qw, i0, T, tid);
            cp_async_commit();
            for (int i = tid; i < BR; i += FA_THREADS) {
                bool ok = i0 + i < T;
                sL[i] = ok ? Lh[i0 + i] * FA_LOG2E : INFINITY;
                sD[i] = ok ? Dh[i0 + i] : 0.0f;
                if (DOCS) sS[i] = ok ? ds[i0 + i] : 0;
                if (SEGS) {
                    const int sg = ok ? lj_segment_of(cu, nseg, i0 + i) : 0;
                    sS[i] = ok ? cu[sg] : 0; /* a query at or past T sees no key */
                    sE[i] = ok ? cu[sg + 1] : 0;
                }
            }
            cp_async_wait<0>();
            __syncthreads();

            /* S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys. */
            float st[BR / 8][4], dpt[BR / 8][4];
#pragma unroll
            for (int i = 0; i < BR / 8; i++) {
                st[i][0] = st[i][1] = st[i][2] = st[i][3] = 0.0f;
                dpt[i][0] = dpt[i][1] = dpt[i][2] = dpt[i][3] = 0.0f;
            }
#pragma unroll
            for (int kk = 0; kk < HP / 16; kk++) {
                uint32_t ak[4], av[4];
                frag_a(ak, sK, S, warp * 16, kk * 16, lane);
                frag_a(av, sV, S, warp * 16, kk * 16, lane);
#pragma unroll
                for (int np = 0; np < BR / 16; np++) {
                    uint32_t bq[4], bo[4];
                    frag_b(bq, sQ, S, np * 16, kk * 16, lane);
                    frag_b(bo, sdO, S, np * 16, kk * 16, lane);
                    mma16816(st[2 * np], ak, bq[0], bq[1]);
                    mma16816(st[2 * np + 1], ak, bq[2], bq[3]);
                    mma16816(dpt[2 * np], av, bo[0], bo[1]);
                    mma16816(dpt[2 * np + 1], av, bo[2], bo[3]);
                }
            }
            /* P^T = exp(S^T scale - lse) (0 where masked); dS^T = P^T (dP^T - D). */
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int qi = nt * 8 + 2 * t4 + (e & 1);
                    int key = e < 2 ? kr0 : kr1;
                    float p = exp2f(st[nt][e] * scale_log2 - sL[qi]);
                    const bool out_of_range = SEGS ? key < sS[qi] || key >= sE[qi]
                                                   : key > i0 + qi || key >= T || (DOCS && key < sS[qi]);
                    if (out_of_range) p = 0.0f;
                    st[nt][e] = p;
                    dpt[nt][e] = p * (dpt[nt][e] - sD[qi]);
                }
            }
            /* dV += P^T dO; dK += dS^T Q. */
#pragma unroll
            for (int kk = 0; kk < BR / 16; kk++) {
                uint32_t pa[4], da[4];
                acc_to_a(pa, st[2 * kk], st[2 * kk + 1]);
                acc_to_a(da, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
                for (int dp = 0; dp < HP / 16; dp++) {
                    uint32_t bo[4], bq[4];
                    frag_b_t(bo, sdO, S, dp * 16, kk * 16, lane);
                    frag_b_t(bq, sQ, S, dp * 16, kk * 16, lane);
                    mma16816(dv[2 * dp], pa, bo[0], bo[1]);
                    mma16816(dv[2 * dp + 1], pa, bo[2], bo[3]);
                    mma16816(dk[2 * dp], da, bq[0], bq[1]);
                    mma16816(dk[2 * dp + 1], da, bq[2], bq[3]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++) {
                int c = nt * 8 + 2 * t4;
                *(uint32_t *)(sdS + (warp * 16 + g) * SD + c) = pack_bf16(dpt[nt][0], dpt[nt][1]);
                *(uint32_t *)(sdS + (warp * 16 + g + 8) * SD + c) = pack_bf16(dpt[nt][2], dpt[nt][3]);
            }
            __syncthreads();

            /* dQ[BR, HP] += dS K over the tile's 64 keys: this warp's 16 queries x DW columns (those
             * below HD are kept). */
            float dq[DW / 8][4];
#pragma unroll
            for (int i = 0; i < DW / 8; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < FA_BC / 16; kk++) {
                uint32_t a[4];
                frag_a_t(a, sdS, SD, mt * 16, kk * 16, lane);
#pragma unroll
                for (int dp = 0; dp < DW / 16; dp++) {
                    uint32_t bk[4];
                    frag_b_t(bk, sK, S, dsplit * DW + dp * 16, kk * 16, lane);
                    mma16816(dq[2 * dp], a, bk[0], bk[1]);
                    mma16816(dq[2 * dp + 1], a, bk[2], bk[3]);
                }
            }
            const int qr0 = i0 + mt * 16 + g, qr1 = qr0 + 8;
            float *acc0 = dq_acc + ((int64_t)b * T + qr0) * Qw + (int64_t)h * HD + dsplit * DW + 2 * t4;
            float *acc1 = acc0 + 8 * Qw;
#pragma unroll
            for (int dt = 0; dt < DW / 8; dt++) {
                if (HP != HD && dsplit * DW + dt * 8 >= HD) continue; /* a padding column */
                if (qr0 < T) {
                    atomicAdd(acc0 + dt * 8, dq[dt][0]);
                    atomicAdd(acc0 + dt * 8 + 1, dq[dt][1]);
                }
                if (qr1 < T) {
                    atomicAdd(acc1 + dt * 8, dq[dt][2]);
                    atomicAdd(acc1 + dt * 8 + 1, dq[dt][3]);
                }
            }
            __syncthreads();
        }
    }

    lj_bf16 *dst = dqkv + (int64_t)b * T * row + Qw + (int64_t)kvh * HD + 2 * t4;
#pragma unroll
    for (int dt = 0; dt < HP / 8; dt++) {
        if (dt * 8 >= HD) continue; /* a padding column */
        if (kr0 < T) {
            *(uint32_t *)(dst + (int64_t)kr0 * row + dt * 8) = pack_bf16(dk[dt][0] * scale, dk[dt][1] * scale);
            *(uint32_t *)(dst + (int64_t)kr0 * row + KVw + dt * 8) = pack_bf16(dv[dt][0], dv[dt][1]);
        }
        if (kr1 < T) {
            *(uint32_t *)(dst + (int64_t)kr1 * row + dt * 8) = pack_bf16(dk[dt][2] * scale, dk[dt][3] * scale);
            *(uint32_t *)(dst + (int64_t)kr1 * row + KVw + dt * 8) = pack_bf16(dv[dt][2], dv[dt][3]);
        }
    }
}

/* dqkv's q part = bf16(scale * dq_acc). */
__global__ void dq_convert_kernel(lj_bf16 *dqkv, const float *dq_acc, int64_t rows, int64_t Qw, int64_t row,
                                  float scale) {
    int64_t total = rows * Qw;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        dqkv[(i / Qw) * row + i % Qw] = __float2bfloat16_rn(dq_acc[i] * scale);
}

/* ---- host side ----------------------------------------------------------------------- */

#define FA_MT128 1 /* query m-tiles per warp of the head_dim 128 forward (64-query blocks: registers) */
#define FA_MT72 1  /* ... and of the head_dim 72 (segments) forward */
#define FA_BR64 64  /* query tile of the head_dim 64 backward */
#define FA_BR72 64  /* ... of head_dim 72 (padded to 80: one warp per dQ m-tile, 80 = 5 k16 tiles) */
#define FA_BR128 32 /* ... and of head_dim 128 (fewer registers) */

/* The dynamic shared memory of each flash kernel instance. */
template <int HD, int MT, int MASK>
static void fwd_init(const char *name) {
    LJ_CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<HD, MT, MASK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       fwd_smem_bytes<HD, MT>()),
                  name);
}
template <int HD, int BR, int MASK>
static void bwd_init(const char *name) {
    LJ_CUDA_CHECK(cudaFuncSetAttribute(flash_backward_kernel<HD, BR, MASK>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, bwd_smem_bytes<HD, BR, MASK>()),
                  name);
}

void lj_cuda_attention_init(const char *cudnn_library) {
    lj_cuda_cudnn_attention_init(cudnn_library);
    fwd_init<64, 1, FA_CAUSAL>("cudaFuncSetAttribute(flash_forward_kernel<64, 1>)");
    fwd_init<64, 2, FA_CAUSAL>("cudaFuncSetAttribute(flash_forward_kernel<64, 2>)");
    fwd_init<128, FA_MT128, FA_CAUSAL>("cudaFuncSetAttribute(flash_forward_kernel<128>)");
    bwd_init<64, FA_BR64, FA_CAUSAL>("cudaFuncSetAttribute(flash_backward_kernel<64>)");
    bwd_init<128, FA_BR128, FA_CAUSAL>("cudaFuncSetAttribute(flash_backward_kernel<128>)");
    fwd_init<64, 1, FA_DOCS>("cudaFuncSetAttribute(flash_forward_kernel<64, 1, docs>)");
    fwd_init<64, 2, FA_DOCS>("cudaFuncSetAttribute(flash_forward_kernel<64, 2, docs>)");
    fwd_init<128, FA_MT128, FA_DOCS>("cudaFuncSetAttribute(flash_forward_kernel<128, docs>)");
    bwd_init<64, FA_BR64, FA_DOCS>("cudaFuncSetAttribute(flash_backward_kernel<64, docs>)");
    bwd_init<128, FA_BR128, FA_DOCS>("cudaFuncSetAttribute(flash_backward_kernel<128, docs>)");
    fwd_init<64, 1, FA_SEGS>("cudaFuncSetAttribute(flash_forward_kernel<64, 1, segments>)");
    fwd_init<64, 2, FA_SEGS>("cudaFuncSetAttribute(flash_forward_kernel<64, 2, segments>)");
    fwd_init<72, FA_MT72, FA_SEGS>("cudaFuncSetAttribute(flash_forward_kernel<72, segments>)");
    fwd_init<128, FA_MT128, FA_SEGS>("cudaFuncSetAttribute(flash_forward_kernel<128, segments>)");
    bwd_init<64, FA_BR64, FA_SEGS>("cudaFuncSetAttribute(flash_backward_kernel<64, segments>)");
    bwd_init<72, FA_BR72, FA_SEGS>("cudaFuncSetAttribute(flash_backward_kernel<72, segments>)");
    bwd_init<128, FA_BR128, FA_SEGS>("cudaFuncSetAttribute(flash_backward_kernel<128, segments>)");
}

static int use_flash(const lj_ops_config *cfg, int hd, const void *a, const void *b, const void *c, const void *d) {
    return cfg->attention != LJ_ATTENTION_SIMPLE && (hd == 64 || hd == 128) && lj_cuda_aligned16(a, b, c) &&
           lj_cuda_aligned16(d, NULL, NULL);
}

/* Workspace: D = rowsum(dO * O) [B, nh, T] f32, then (flash path) dQ in fp32 [B*T, nh*hd],
 * each region 256-byte aligned, then (cuDNN path) the cuDNN plans' workspace. The own forward
 * needs none. */
static size_t dsum_bytes(int B, int T, int nh) { return ((size_t)B * nh * T * 4 + 255) / 256 * 256; }
static size_t own_bytes(int B, int T, int nh, int hd) {
    return dsum_bytes(B, T, nh) + ((size_t)B * T * nh * hd * 4 + 255) / 256 * 256;
}

size_t lj_cuda_attention_workspace_bytes(int B, int T, int nh, int nkv, int hd, const lj_ops_config *cfg) {
    /* builds the cuDNN plans of this shape (planning time: before any graph capture) */
    size_t dnn = cfg->attention == LJ_ATTENTION_AUTO
                     ? lj_cuda_cudnn_attention_workspace_bytes(B, T, nh, nkv, hd, cfg->deterministic)
                     : 0;
    return own_bytes(B, T, nh, hd) + (dnn + 255) / 256 * 256;
}

size_t lj_cuda_attention_workspace_bytes_described(int B, int T, int nh, int nkv, int hd, const lj_ops_config *cfg) {
    (void)nkv;
    const size_t dnn = (size_t)B * T * nh * hd * 4; /* cuDNN SDPA backward's fp32 dQ accumulator */
    /* deterministic mode: cuDNN's backward keeps dP, [B, nh, T, T] bf16 with T rounded up to 64
     * (measured on an H200: the 1b at micro-batch 4, seq 4096, peaks 4.00 GiB higher) */
    const int dnn_shape = hd == 64 || hd == 128; /* the head dims cuDNN's path takes */
    const size_t t64 = ((size_t)T + 63) / 64 * 64;
    const size_t dp = dnn_shape && cfg->deterministic ? (size_t)B * nh * t64 * t64 * 2 : 0;
    return own_bytes(B, T, nh, hd) + (dnn + 255) / 256 * 256 + (dp + 255) / 256 * 256;
}

/* One flash forward over `grid`: plain causal (doc_start NULL) or within documents. */
template <int HD, int MT>
static void fwd_launch(dim3 grid, lj_bf16 *o, float *lse, const lj_bf16 *x, const int32_t *doc_start, int T, int nh,
                       int nkv, float scale_log2) {
    cudaStream_t st = lj_cuda_stream();
    if (doc_start)
        flash_forward_kernel<HD, MT, FA_DOCS><<<grid, FA_THREADS, fwd_smem_bytes<HD, MT>(), st>>>(
            o, lse, x, doc_start, T, nh, nkv, scale_log2, NULL, 0);
    else
        flash_forward_kernel<HD, MT, FA_CAUSAL><<<grid, FA_THREADS, fwd_smem_bytes<HD, MT>(), st>>>(
            o, lse, x, NULL, T, nh, nkv, scale_log2, NULL, 0);
}

/* The own kernels, forward: plain causal (doc_start NULL) or within documents. */
static void own_forward(void *out, float *lse, const void *qkv, const int32_t *doc_start, int B, int T, int nh, int nkv,
                        int hd, const lj_ops_config *cfg) {
    if (!use_flash(cfg, hd, out, qkv, NULL, NULL)) {
        lj_cuda_attention_forward_simple(out, lse, qkv, doc_start, B, T, nh, nkv, hd);
        return;
    }
    float scale_log2 = FA_LOG2E / sqrtf((float)hd);
    const lj_bf16 *x = (const lj_bf16 *)qkv;
    lj_bf16 *o = (lj_bf16 *)out;
    const unsigned H = (unsigned)nh, Bn = (unsigned)B;
    if (hd == 64 && cfg->flash_forward_mtiles == 1)
        fwd_launch<64, 1>(dim3((unsigned)((T + 63) / 64), H, Bn), o, lse, x, doc_start, T, nh, nkv, scale_log2);
    else if (hd == 64)
        fwd_launch<64, 2>(dim3((unsigned)((T + 127) / 128), H, Bn), o, lse, x, doc_start, T, nh, nkv, scale_log2);
    else
        fwd_launch<128, FA_MT128>(dim3((unsigned)((T + 64 * FA_MT128 - 1) / (64 * FA_MT128)), H, Bn), o, lse, x,
                                  doc_start, T, nh, nkv, scale_log2);
    LJ_CUDA_LAUNCHED(doc_start ? "flash_forward_kernel (documents)" : "flash_forward_kernel");
}

void lj_cuda_attention_forward(void *out, float *lse, const void *qkv, int B, int T, int nh, int nkv, int hd,
                               void *workspace, const lj_ops_config *cfg) {
    LJ_ASSERT(nkv > 0 && nh % nkv == 0, "attention: nh %d is not a multiple of nkv %d", nh, nkv);
    if (B <= 0 || T <= 0) return;
    if (cfg->attention == LJ_ATTENTION_AUTO &&
        lj_cuda_cudnn_attention_forward(out, lse, qkv, B, T, nh, nkv, hd,
                                        workspace ? (char *)workspace + own_bytes(B, T, nh, hd) : NULL,
                                        cfg->deterministic))
        return;
    own_forward(out, lse, qkv, NULL, B, T, nh, nkv, hd, cfg);
}

void lj_cuda_attention_forward_docs(void *out, float *lse, const void *qkv, const int32_t *doc_start, int B, int T,
                                    int nh, int nkv, int hd, void *workspace, const lj_ops_config *cfg) {
    (void)workspace; /* the own forward needs none */
    LJ_ASSERT(nkv > 0 && nh % nkv == 0, "attention: nh %d is not a multiple of nkv %d", nh, nkv);
    LJ_ASSERT(doc_start, "attention_forward_docs needs the document starts");
    if (B <= 0 || T <= 0) return;
    own_forward(out, lse, qkv, doc_start, B, T, nh, nkv, hd, cfg);
}

/* The own kernels, backward: plain causal (doc_start NULL) or within documents. */
static void own_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                         const int32_t *doc_start, int B, int T, int nh, int nkv, int hd, void *workspace,
                         const lj_ops_config *cfg) {
    float *dsum = (float *)workspace;
    float *dq_acc = (float *)((char *)workspace + dsum_bytes(B, T, nh));
    if (!use_flash(cfg, hd, dqkv, dout, qkv, out)) {
        lj_cuda_attention_backward_simple(dqkv, dout, qkv, out, lse, doc_start, B, T, nh, nkv, hd, dsum);
        return;
    }
    int64_t Qw = (int64_t)nh * hd, row = (int64_t)(nh + 2 * nkv) * hd;
    lj_cuda_attention_rowdot(dsum, dout, out, B, T, nh, hd);
    LJ_CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, (size_t)B * T * Qw * 4, lj_cuda_stream()),
                  "cudaMemsetAsync in attention_backward");
    dim3 grid((unsigned)((T + FA_BC - 1) / FA_BC), (unsigned)nkv, (unsigned)B);
    float scale = 1.0f / sqrtf((float)hd);
    lj_bf16 *d = (lj_bf16 *)dqkv;
    const lj_bf16 *go = (const lj_bf16 *)dout, *x = (const lj_bf16 *)qkv;
    cudaStream_t st = lj_cuda_stream();
    if (hd == 64 && doc_start)
        flash_backward_kernel<64, FA_BR64, FA_DOCS><<<grid, FA_THREADS, bwd_smem_bytes<64, FA_BR64, FA_DOCS>(), st>>>(
            d, dq_acc, go, x, lse, dsum, doc_start, T, nh, nkv, scale, scale * FA_LOG2E, NULL, 0);
    else if (hd == 64)
        flash_backward_kernel<64, FA_BR64, FA_CAUSAL><<<grid, FA_THREADS, bwd_smem_bytes<64, FA_BR64>(), st>>>(
            d, dq_acc, go, x, lse, dsum, NULL, T, nh, nkv, scale, scale * FA_LOG2E, NULL, 0);
    else if (doc_start)
        flash_backward_kernel<128, FA_BR128, FA_DOCS>
            <<<grid, FA_THREADS, bwd_smem_bytes<128, FA_BR128, FA_DOCS>(), st>>>(
                d, dq_acc, go, x, lse, dsum, doc_start, T, nh, nkv, scale, scale * FA_LOG2E, NULL, 0);
    else
        flash_backward_kernel<128, FA_BR128, FA_CAUSAL><<<grid, FA_THREADS, bwd_smem_bytes<128, FA_BR128>(), st>>>(
            d, dq_acc, go, x, lse, dsum, NULL, T, nh, nkv, scale, scale * FA_LOG2E, NULL, 0);
    LJ_CUDA_LAUNCHED(doc_start ? "flash_backward_kernel (documents)" : "flash_backward_kernel");
    int64_t rows = (int64_t)B * T;
    dq_convert_kernel<<<lj_cuda_blocks(rows * Qw, 256), 256, 0, st>>>(d, dq_acc, rows, Qw, row, scale);
    LJ_CUDA_LAUNCHED("dq_convert_kernel");
}

void lj_cuda_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                int B, int T, int nh, int nkv, int hd, void *workspace, const lj_ops_config *cfg) {
    LJ_ASSERT(nkv > 0 && nh % nkv == 0, "attention: nh %d is not a multiple of nkv %d", nh, nkv);
    if (B <= 0 || T <= 0) return;
    float *dsum = (float *)workspace;
    float *dq_acc = (float *)((char *)workspace + dsum_bytes(B, T, nh));
    if (cfg->attention == LJ_ATTENTION_AUTO &&
        lj_cuda_cudnn_attention_backward(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, dsum, dq_acc,
                                         (char *)workspace + own_bytes(B, T, nh, hd), cfg->deterministic))
        return;
    own_backward(dqkv, dout, qkv, out, lse, NULL, B, T, nh, nkv, hd, workspace, cfg);
}

void lj_cuda_attention_backward_docs(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                     const int32_t *doc_start, int B, int T, int nh, int nkv, int hd, void *workspace,
                                     const lj_ops_config *cfg) {
    LJ_ASSERT(nkv > 0 && nh % nkv == 0, "attention: nh %d is not a multiple of nkv %d", nh, nkv);
    LJ_ASSERT(doc_start, "attention_backward_docs needs the document starts");
    if (B <= 0 || T <= 0) return;
    own_backward(dqkv, dout, qkv, out, lse, doc_start, B, T, nh, nkv, hd, workspace, cfg);
}

/* ---- attention_varlen's bidirectional segments (vision_attention.cu dispatches) ------------ */

int lj_cuda_flash_segments_supported(int hd, const void *a, const void *b, const void *c, const void *d) {
    return (hd == 64 || hd == 72 || hd == 128) && lj_cuda_aligned16(a, b, c) && lj_cuda_aligned16(d, NULL, NULL);
}

void lj_cuda_flash_segments_forward(void *out, float *lse, const void *qkv, const int32_t *cu_seqlens, int nseg,
                                    int N, int nh, int nkv, int hd, int mtiles) {
    LJ_ASSERT(lj_cuda_flash_segments_supported(hd, out, qkv, NULL, NULL),
              "flash segments forward: head_dim %d or the tensors' alignment not supported", hd);
    if (N <= 0 || nseg <= 0) return;
    const float scale_log2 = FA_LOG2E / sqrtf((float)hd);
    const lj_bf16 *x = (const lj_bf16 *)qkv;
    lj_bf16 *o = (lj_bf16 *)out;
    const unsigned H = (unsigned)nh;
    cudaStream_t st = lj_cuda_stream();
    if (hd == 64 && mtiles == 1)
        flash_forward_kernel<64, 1, FA_SEGS><<<dim3((unsigned)((N + 63) / 64), H, 1), FA_THREADS,
                                               fwd_smem_bytes<64, 1>(), st>>>(o, lse, x, NULL, N, nh, nkv, scale_log2,
                                                                              cu_seqlens, nseg);
    else if (hd == 64)
        flash_forward_kernel<64, 2, FA_SEGS><<<dim3((unsigned)((N + 127) / 128), H, 1), FA_THREADS,
                                               fwd_smem_bytes<64, 2>(), st>>>(o, lse, x, NULL, N, nh, nkv, scale_log2,
                                                                              cu_seqlens, nseg);
    else if (hd == 72)
        flash_forward_kernel<72, FA_MT72, FA_SEGS><<<dim3((unsigned)((N + 64 * FA_MT72 - 1) / (64 * FA_MT72)), H, 1),
                                                     FA_THREADS, fwd_smem_bytes<72, FA_MT72>(), st>>>(
            o, lse, x, NULL, N, nh, nkv, scale_log2, cu_seqlens, nseg);
    else
        flash_forward_kernel<128, FA_MT128, FA_SEGS>
            <<<dim3((unsigned)((N + 64 * FA_MT128 - 1) / (64 * FA_MT128)), H, 1), FA_THREADS,
               fwd_smem_bytes<128, FA_MT128>(), st>>>(o, lse, x, NULL, N, nh, nkv, scale_log2, cu_seqlens, nseg);
    LJ_CUDA_LAUNCHED("flash_forward_kernel (segments)");
}

void lj_cuda_flash_segments_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                     const int32_t *cu_seqlens, int nseg, int N, int nh, int nkv, int hd, float *dsum,
                                     float *dq_acc) {
    LJ_ASSERT(lj_cuda_flash_segments_supported(hd, dqkv, dout, qkv, out) && dsum && dq_acc,
              "flash segments backward: head_dim %d, the tensors' alignment or the workspace not supported", hd);
    if (N <= 0 || nseg <= 0) return;
    const int64_t Qw = (int64_t)nh * hd, row = (int64_t)(nh + 2 * nkv) * hd;
    cudaStream_t st = lj_cuda_stream();
    lj_cuda_attention_rowdot(dsum, dout, out, 1, N, nh, hd); /* D [nh, N] */
    LJ_CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, (size_t)N * Qw * 4, st), "cudaMemsetAsync in attention_varlen_backward");
    const dim3 grid((unsigned)((N + FA_BC - 1) / FA_BC), (unsigned)nkv, 1);
    const float scale = 1.0f / sqrtf((float)hd);
    lj_bf16 *d = (lj_bf16 *)dqkv;
    const lj_bf16 *go = (const lj_bf16 *)dout, *x = (const lj_bf16 *)qkv;
    if (hd == 64)
        flash_backward_kernel<64, FA_BR64, FA_SEGS><<<grid, FA_THREADS, bwd_smem_bytes<64, FA_BR64, FA_SEGS>(), st>>>(
            d, dq_acc, go, x, lse, dsum, NULL, N, nh, nkv, scale, scale * FA_LOG2E, cu_seqlens, nseg);
    else if (hd == 72)
        flash_backward_kernel<72, FA_BR72, FA_SEGS><<<grid, FA_THREADS, bwd_smem_bytes<72, FA_BR72, FA_SEGS>(), st>>>(
            d, dq_acc, go, x, lse, dsum, NULL, N, nh, nkv, scale, scale * FA_LOG2E, cu_seqlens, nseg);
    else
        flash_backward_kernel<128, FA_BR128, FA_SEGS>
            <<<grid, FA_THREADS, bwd_smem_bytes<128, FA_BR128, FA_SEGS>(), st>>>(
                d, dq_acc, go, x, lse, dsum, NULL, N, nh, nkv, scale, scale * FA_LOG2E, cu_seqlens, nseg);
    LJ_CUDA_LAUNCHED("flash_backward_kernel (segments)");
    dq_convert_kernel<<<lj_cuda_blocks((int64_t)N * Qw, 256), 256, 0, st>>>(d, dq_acc, N, Qw, row, scale);
    LJ_CUDA_LAUNCHED("dq_convert_kernel");
}

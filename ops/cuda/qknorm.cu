/* qknorm.cu: the CUDA backend's Qwen ops: QK-norm (Qwen3's RMSNorm over head_dim on the q
 * and k heads of the QKV rows), plain and fused with RoPE in the QKV layout, forward and
 * backward; and the projection bias (Qwen2's q/k/v biases): the add and the column-sum
 * gradient. bf16 tensors, fp32 arithmetic; contracts in ops/ops.h.
 *
 * QK-norm: one warp per (row, head); each lane owns the RoPE pairs (i, i + hd/2) for i = lane,
 * lane + 32, ..., so the fused kernel normalizes and rotates a pair in registers and writes it
 * once (the fused op reads and writes the q and k heads once, where the unfused pair of ops does
 * it twice). A lane writes only the elements it read, so out may alias x (dx may alias dout).
 * The weight gradient sums over rows and heads in two passes (per-part partial sums, then
 * their fixed-order sum: deterministic, no atomics), run before dx since dx may overwrite dout.
 * The v heads are copied with one strided cudaMemcpy2DAsync when out != x. Scalar bf16 loads:
 * the kernels are memory-bound at about 2 bytes per element each way; a 16-byte vector path
 * (as rope_kernel has) is the next step if the profile asks for it. */
#include "ops/cuda/cuda_common.h"

#define LJ_QKN_THREADS 256 /* 8 warps: 8 (row, head) items per block */

/* out = [rope](w * x * rstd) for the q and k heads; rstd[row, head]. T: positions per sequence
 * (row % T is the position), cos/sin [T, hd/2] (unused without ROPE). */
template <bool ROPE>
__global__ void qk_norm_forward_kernel(lj_bf16 *out, float *rstd, const lj_bf16 *x, const lj_bf16 *w,
                                       const float *cosv, const float *sinv, int N, int T, int nh, int nkv, int hd,
                                       float eps) {
    const int heads = nh + nkv, h2 = hd / 2, lane = threadIdx.x % 32;
    const int64_t item = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (item >= (int64_t)N * heads) return;
    const int64_t row = item / heads;
    const int head = (int)(item % heads);
    const int64_t off = row * (int64_t)(nh + 2 * nkv) * hd + (int64_t)head * hd;
    const lj_bf16 *wr = w + (head < nh ? 0 : hd);
    float ss = 0.0f;
    for (int i = lane; i < h2; i += 32) {
        const float x1 = lj_ld(x + off + i), x2 = lj_ld(x + off + i + h2);
        ss += x1 * x1 + x2 * x2;
    }
    ss = lj_warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)hd + eps);
    if (lane == 0) rstd[item] = r;
    const int t = (int)(row % T);
    for (int i = lane; i < h2; i += 32) {
        float y1 = lj_ld(wr + i) * (lj_ld(x + off + i) * r), y2 = lj_ld(wr + i + h2) * (lj_ld(x + off + i + h2) * r);
        if (ROPE) lj_rope_pair<false>(y1, y2, cosv[(int64_t)t * h2 + i], sinv[(int64_t)t * h2 + i]);
        lj_st(out + off + i, y1);
        lj_st(out + off + i + h2, y2);
    }
}

/* The gradient g with respect to the normalized value at element i of a head (the RoPE
 * transpose applied first under ROPE): i < hd/2 pairs with i + hd/2, i >= hd/2 with i - hd/2. */
template <bool ROPE>
static __device__ __forceinline__ float qkn_grad_at(const lj_bf16 *d, int i, int h2, const float *cosv,
                                                    const float *sinv, int t) {
    const float di = lj_ld(d + i);
    if (!ROPE) return di;
    const int j = i < h2 ? i : i - h2;
    const float c = cosv[(int64_t)t * h2 + j], s = sinv[(int64_t)t * h2 + j];
    return i < h2 ? di * c + lj_ld(d + i + h2) * s : di * c - lj_ld(d + i - h2) * s;
}

/* partial[p * G + g, j] for j < 2*hd (G = gridDim.y head groups): the sum over the rows of part p
 * and group g's share of the q heads (j < hd) or of the k heads (j >= hd) of g * x * rstd at
 * element j % hd. One thread per j; the groups split the heads so that short inputs (a few hundred
 * rows) still fill the GPU. */
template <bool ROPE>
__global__ void qk_norm_dw_partial_kernel(float *partial, const lj_bf16 *dout, const lj_bf16 *x, const float *rstd,
                                          const float *cosv, const float *sinv, int N, int T, int nh, int nkv, int hd,
                                          int rows_per_part) {
    const int j = threadIdx.x, p = blockIdx.x, g = blockIdx.y, G = gridDim.y;
    if (j >= 2 * hd) return;
    const int i = j % hd, base = j < hd ? 0 : nh, count = j < hd ? nh : nkv, h2 = hd / 2, heads = nh + nkv;
    const int h0 = base + g * count / G, h1 = base + (g + 1) * count / G;
    const int64_t row_len = (int64_t)(nh + 2 * nkv) * hd;
    const int n_begin = p * rows_per_part, n_end = min(N, n_begin + rows_per_part);
    float acc = 0.0f;
    for (int n = n_begin; n < n_end; n++) {
        const int t = n % T;
        for (int h = h0; h < h1; h++) {
            const int64_t off = (int64_t)n * row_len + (int64_t)h * hd;
            acc += qkn_grad_at<ROPE>(dout + off, i, h2, cosv, sinv, t) * lj_ld(x + off + i) *
                   rstd[(int64_t)n * heads + h];
        }
    }
    partial[((int64_t)p * G + g) * 2 * hd + j] = acc;
}

template <typename G>
__global__ void qk_norm_dw_final_kernel(G *dw, const float *partial, int parts, int cols, int overwrite) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (int p = 0; p < parts; p++) s += partial[(int64_t)p * cols + c];
    lj_st(dw + c, (overwrite ? 0.0f : lj_ld(dw + c)) + s);
}

/* dx = r * (w*g - x * r^2 * sum(w*g*x) / hd) for the q and k heads, one warp per (row, head). */
template <bool ROPE>
__global__ void qk_norm_dx_kernel(lj_bf16 *dx, const lj_bf16 *dout, const lj_bf16 *x, const lj_bf16 *w,
                                  const float *rstd, const float *cosv, const float *sinv, int N, int T, int nh,
                                  int nkv, int hd) {
    const int heads = nh + nkv, h2 = hd / 2, lane = threadIdx.x % 32;
    const int64_t item = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (item >= (int64_t)N * heads) return;
    const int64_t row = item / heads;
    const int head = (int)(item % heads), t = (int)(row % T);
    const int64_t off = row * (int64_t)(nh + 2 * nkv) * hd + (int64_t)head * hd;
    const lj_bf16 *wr = w + (head < nh ? 0 : hd);
    float dot = 0.0f;
    for (int i = lane; i < h2; i += 32) {
        float d1 = lj_ld(dout + off + i), d2 = lj_ld(dout + off + i + h2);
        if (ROPE) lj_rope_pair<true>(d1, d2, cosv[(int64_t)t * h2 + i], sinv[(int64_t)t * h2 + i]);
        dot += lj_ld(wr + i) * d1 * lj_ld(x + off + i) + lj_ld(wr + i + h2) * d2 * lj_ld(x + off + i + h2);
    }
    dot = lj_warp_sum(dot);
    const float r = rstd[item], k = r * r * dot / (float)hd;
    for (int i = lane; i < h2; i += 32) {
        float d1 = lj_ld(dout + off + i), d2 = lj_ld(dout + off + i + h2);
        if (ROPE) lj_rope_pair<true>(d1, d2, cosv[(int64_t)t * h2 + i], sinv[(int64_t)t * h2 + i]);
        const float x1 = lj_ld(x + off + i), x2 = lj_ld(x + off + i + h2);
        lj_st(dx + off + i, r * (lj_ld(wr + i) * d1 - x1 * k));
        lj_st(dx + off + i + h2, r * (lj_ld(wr + i + h2) * d2 - x2 * k));
    }
}

static int qkn_parts(int N) {
    int parts = (N + 63) / 64;
    if (parts > 256) parts = 256;
    return parts < 1 ? 1 : parts;
}

/* QK-norm's weight gradient: row parts x head groups (LJ_QKN_GROUPS) blocks; parts of 16 rows
 * at most 64 of them, so 45 x 8 blocks at 710 rows and 64 x 8 from 1,024 rows on (one part per
 * 64 rows and one group gave 12 blocks at 710 rows, 0.21 ms per call on an H200). */
#define LJ_QKN_GROUPS 8
static int qkn_dw_parts(int N) {
    int parts = (N + 15) / 16;
    if (parts > 64) parts = 64;
    return parts < 1 ? 1 : parts;
}

static unsigned qkn_blocks(int N, int heads) {
    const int64_t items = (int64_t)N * heads, per = LJ_QKN_THREADS / 32;
    return (unsigned)((items + per - 1) / per);
}

/* The v heads of N rows from src to dst (no-op in place): one strided copy. */
static void copy_v(void *dst, const void *src, int N, int nh, int nkv, int hd) {
    if (dst == src || N <= 0) return;
    const size_t pitch = (size_t)(nh + 2 * nkv) * hd * sizeof(lj_bf16), v0 = (size_t)(nh + nkv) * hd * sizeof(lj_bf16);
    LJ_CUDA_CHECK(cudaMemcpy2DAsync((char *)dst + v0, pitch, (const char *)src + v0, pitch,
                                    (size_t)nkv * hd * sizeof(lj_bf16), (size_t)N, cudaMemcpyDeviceToDevice,
                                    lj_cuda_stream()),
                  "cudaMemcpy2DAsync of the v heads in qk_norm");
}

static void qk_norm_forward(void *out, float *rstd, const void *x, const void *w, const float *cos, const float *sin,
                            int B, int T, int nh, int nkv, int hd, float eps) {
    const int N = B * T;
    if (N <= 0) return;
    LJ_ASSERT(hd % 2 == 0 && hd <= 512, "qk_norm: head_dim %d must be even and at most 512", hd);
    if (cos)
        qk_norm_forward_kernel<true><<<qkn_blocks(N, nh + nkv), LJ_QKN_THREADS, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)out, rstd, (const lj_bf16 *)x, (const lj_bf16 *)w, cos, sin, N, T, nh, nkv, hd, eps);
    else
        qk_norm_forward_kernel<false><<<qkn_blocks(N, nh + nkv), LJ_QKN_THREADS, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)out, rstd, (const lj_bf16 *)x, (const lj_bf16 *)w, NULL, NULL, N, T, nh, nkv, hd, eps);
    LJ_CUDA_LAUNCHED(cos ? "qk_norm_rope_forward_kernel" : "qk_norm_forward_kernel");
    copy_v(out, x, N, nh, nkv, hd);
}

static void qk_norm_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd,
                             const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd,
                             lj_grad_mode dw_mode, void *workspace, lj_dtype grad_dtype) {
    const int N = B * T;
    if (N <= 0) return;
    LJ_ASSERT(hd % 2 == 0 && hd <= 512, "qk_norm: head_dim %d must be even and at most 512", hd);
    if (dw) { /* first: dx may overwrite dout */
        const int parts = qkn_dw_parts(N), rows_per_part = (N + parts - 1) / parts;
        const dim3 grid((unsigned)parts, LJ_QKN_GROUPS);
        if (cos)
            qk_norm_dw_partial_kernel<true><<<grid, 2 * hd, 0, lj_cuda_stream()>>>(
                (float *)workspace, (const lj_bf16 *)dout, (const lj_bf16 *)x, rstd, cos, sin, N, T, nh, nkv, hd,
                rows_per_part);
        else
            qk_norm_dw_partial_kernel<false><<<grid, 2 * hd, 0, lj_cuda_stream()>>>(
                (float *)workspace, (const lj_bf16 *)dout, (const lj_bf16 *)x, rstd, NULL, NULL, N, T, nh, nkv, hd,
                rows_per_part);
        LJ_CUDA_LAUNCHED("qk_norm_dw_partial_kernel");
        const unsigned blocks = (unsigned)((2 * hd + 255) / 256);
        const int overwrite = dw_mode == LJ_GRAD_OVERWRITE;
        if (grad_dtype == LJ_DTYPE_F32)
            qk_norm_dw_final_kernel<float><<<blocks, 256, 0, lj_cuda_stream()>>>((float *)dw, (const float *)workspace,
                                                                                  parts * LJ_QKN_GROUPS, 2 * hd,
                                                                                  overwrite);
        else
            qk_norm_dw_final_kernel<lj_bf16><<<blocks, 256, 0, lj_cuda_stream()>>>(
                (lj_bf16 *)dw, (const float *)workspace, parts * LJ_QKN_GROUPS, 2 * hd, overwrite);
        LJ_CUDA_LAUNCHED("qk_norm_dw_final_kernel");
    }
    if (!dx) return;
    if (cos)
        qk_norm_dx_kernel<true><<<qkn_blocks(N, nh + nkv), LJ_QKN_THREADS, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)dx, (const lj_bf16 *)dout, (const lj_bf16 *)x, (const lj_bf16 *)w, rstd, cos, sin, N, T, nh, nkv,
            hd);
    else
        qk_norm_dx_kernel<false><<<qkn_blocks(N, nh + nkv), LJ_QKN_THREADS, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)dx, (const lj_bf16 *)dout, (const lj_bf16 *)x, (const lj_bf16 *)w, rstd, NULL, NULL, N, T, nh,
            nkv, hd);
    LJ_CUDA_LAUNCHED(cos ? "qk_norm_rope_dx_kernel" : "qk_norm_dx_kernel");
    copy_v(dx, dout, N, nh, nkv, hd);
}

void lj_cuda_qk_norm_forward(void *out, float *rstd, const void *x, const void *w, int N, int nh, int nkv, int hd,
                             float eps) {
    qk_norm_forward(out, rstd, x, w, NULL, NULL, 1, N, nh, nkv, hd, eps);
}

void lj_cuda_qk_norm_rope_forward(void *out, float *rstd, const void *x, const void *w, const float *cos,
                                  const float *sin, int B, int T, int nh, int nkv, int hd, float eps) {
    LJ_ASSERT(cos && sin, "qk_norm_rope_forward needs the RoPE tables");
    qk_norm_forward(out, rstd, x, w, cos, sin, B, T, nh, nkv, hd, eps);
}

void lj_cuda_qk_norm_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd,
                              int N, int nh, int nkv, int hd, lj_grad_mode dw_mode, void *workspace,
                              lj_dtype grad_dtype) {
    qk_norm_backward(dx, dw, dout, x, w, rstd, NULL, NULL, 1, N, nh, nkv, hd, dw_mode, workspace, grad_dtype);
}

void lj_cuda_qk_norm_rope_backward(void *dx, void *dw, const void *dout, const void *x, const void *w,
                                   const float *rstd, const float *cos, const float *sin, int B, int T, int nh,
                                   int nkv, int hd, lj_grad_mode dw_mode, void *workspace, lj_dtype grad_dtype) {
    LJ_ASSERT(cos && sin, "qk_norm_rope_backward needs the RoPE tables");
    qk_norm_backward(dx, dw, dout, x, w, rstd, cos, sin, B, T, nh, nkv, hd, dw_mode, workspace, grad_dtype);
}

size_t lj_cuda_qk_norm_backward_workspace_bytes(int N, int nh, int nkv, int hd) {
    (void)nh, (void)nkv;
    return (size_t)qkn_dw_parts(N) * LJ_QKN_GROUPS * 2 * (size_t)hd * sizeof(float);
}

/* ---- projection bias -------------------------------------------------------------- */

__global__ void bias_add_kernel(lj_bf16 *x, const lj_bf16 *b, int64_t n, int C) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        lj_st(x + i, lj_ld(x + i) + lj_ld(b + i % C));
}

void lj_cuda_bias_add(void *x, const void *b, int N, int C) {
    const int64_t n = (int64_t)N * C;
    if (n <= 0) return;
    bias_add_kernel<<<lj_cuda_blocks(n, 256), 256, 0, lj_cuda_stream()>>>((lj_bf16 *)x, (const lj_bf16 *)b, n, C);
    LJ_CUDA_LAUNCHED("bias_add_kernel");
}

/* partial[p, c] = sum of dout[n, c] over the rows of part p, in order; one thread per column. */
__global__ void bias_backward_partial_kernel(float *partial, const lj_bf16 *dout, int N, int C, int rows_per_part) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, p = blockIdx.y;
    if (c >= C) return;
    const int n_begin = p * rows_per_part, n_end = min(N, n_begin + rows_per_part);
    float acc = 0.0f;
    for (int n = n_begin; n < n_end; n++) acc += lj_ld(dout + (int64_t)n * C + c);
    partial[(int64_t)p * C + c] = acc;
}

void lj_cuda_bias_backward(void *db, const void *dout, int N, int C, lj_grad_mode dw_mode, void *workspace,
                           lj_dtype grad_dtype) {
    if (N <= 0 || C <= 0) return;
    const int parts = qkn_parts(N), rows_per_part = (N + parts - 1) / parts;
    const dim3 grid((unsigned)((C + 255) / 256), (unsigned)parts);
    bias_backward_partial_kernel<<<grid, 256, 0, lj_cuda_stream()>>>((float *)workspace, (const lj_bf16 *)dout, N, C,
                                                                     rows_per_part);
    LJ_CUDA_LAUNCHED("bias_backward_partial_kernel");
    const unsigned blocks = (unsigned)((C + 255) / 256);
    const int overwrite = dw_mode == LJ_GRAD_OVERWRITE;
    if (grad_dtype == LJ_DTYPE_F32)
        qk_norm_dw_final_kernel<float><<<blocks, 256, 0, lj_cuda_stream()>>>((float *)db, (const float *)workspace,
                                                                              parts, C, overwrite);
    else
        qk_norm_dw_final_kernel<lj_bf16><<<blocks, 256, 0, lj_cuda_stream()>>>((lj_bf16 *)db, (const float *)workspace,
                                                                                parts, C, overwrite);
    LJ_CUDA_LAUNCHED("bias_backward_final_kernel");
}

size_t lj_cuda_bias_backward_workspace_bytes(int N, int C) { return (size_t)qkn_parts(N) * (size_t)C * sizeof(float); }

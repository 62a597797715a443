/* cuda_layers.cu: the element-wise and row-wise ops of the CUDA backend: casts, embedding,
 * RMSNorm (plain, fused with the residual add, and its backward), add, RoPE in the QKV
 * layout, and SwiGLU (fused and unfused). bf16 tensors, fp32 arithmetic; a 16-byte vector
 * path wherever rows are multiples of 8 elements and pointers are 16-byte aligned. */
#include "ops/cuda/cuda_common.h"

#include <cub/device/device_radix_sort.cuh>

#define LJ_ROW_THREADS 256 /* threads per block of the warp-per-row kernels (8 rows) */

/* ---- casts ------------------------------------------------------------------------ */

__global__ void cast_f32_to_bf16_kernel(lj_bf16 *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void cast_bf16_to_f32_kernel(float *dst, const lj_bf16 *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

void lj_cuda_cast_f32_to_param(void *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    cast_f32_to_bf16_kernel<<<lj_cuda_blocks(n, 256), 256, 0, lj_cuda_stream()>>>((lj_bf16 *)dst, src, n);
    LJ_CUDA_LAUNCHED("cast_f32_to_bf16_kernel");
}

void lj_cuda_cast_to_f32(float *dst, const void *src, lj_dtype dtype, int64_t n) {
    if (n <= 0) return;
    if (dtype == LJ_DTYPE_F32) {
        LJ_CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)n * 4, cudaMemcpyDeviceToDevice, lj_cuda_stream()),
                      "cudaMemcpyAsync in cast_to_f32");
        return;
    }
    LJ_ASSERT(dtype == LJ_DTYPE_BF16, "cuda cast_to_f32: dtype %s", lj_dtype_name(dtype));
    cast_bf16_to_f32_kernel<<<lj_cuda_blocks(n, 256), 256, 0, lj_cuda_stream()>>>(dst, (const lj_bf16 *)src, n);
    LJ_CUDA_LAUNCHED("cast_bf16_to_f32_kernel");
}

/* ---- embedding -------------------------------------------------------------------- */

/* One thread per 8 columns (VEC) or per column of one row. */
template <bool VEC>
__global__ void embedding_forward_kernel(lj_bf16 *out, const int32_t *ids, const lj_bf16 *wte, int N, int C) {
    const int per = VEC ? 8 : 1;
    int64_t cols = C / per;
    int64_t total = (int64_t)N * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / cols, c = (i % cols) * per;
        const lj_bf16 *src = wte + (int64_t)ids[n] * C + c;
        if (VEC)
            *(uint4 *)(out + n * C + c) = *(const uint4 *)src;
        else
            out[n * C + c] = *src;
    }
}

void lj_cuda_embedding_forward(void *out, const int32_t *ids, const void *wte, int N, int C) {
    if (N <= 0 || C <= 0) return;
    if (C % 8 == 0 && lj_cuda_aligned16(out, wte, NULL)) {
        embedding_forward_kernel<true><<<lj_cuda_blocks((int64_t)N * C / 8, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)out, ids, (const lj_bf16 *)wte, N, C);
    } else {
        embedding_forward_kernel<false><<<lj_cuda_blocks((int64_t)N * C, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)out, ids, (const lj_bf16 *)wte, N, C);
    }
    LJ_CUDA_LAUNCHED("embedding_forward_kernel");
}

/* Embedding backward without atomics: the ids are sorted with their positions (CUB radix
 * sort), then block (i, column tile) starts only where a run of equal ids begins, sums that
 * run's rows of dout in fp32 in sorted order, and adds the sum to the gradient row once. So
 * the result is deterministic, and a bf16 gradient is rounded once per call, however often a
 * token occurs. */
#define LJ_EMB_THREADS 128 /* 8 columns per thread: 1024 columns per block */

__global__ void iota_kernel(int32_t *out, int N) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) out[i] = i;
}

template <typename G, bool VEC>
__global__ void __launch_bounds__(LJ_EMB_THREADS)
    embedding_backward_sorted_kernel(G *dwte, const lj_bf16 *dout, const int32_t *sorted_ids, const int32_t *pos,
                                     int N, int C) {
    const int i = blockIdx.x;
    const int32_t id = sorted_ids[i];
    if (i > 0 && sorted_ids[i - 1] == id) return;
    const int per = VEC ? 8 : 1;
    const int c = (blockIdx.y * LJ_EMB_THREADS + threadIdx.x) * per;
    if (c >= C) return;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = i; j < N && sorted_ids[j] == id; j++) {
        const lj_bf16 *src = dout + (int64_t)pos[j] * C + c;
        if (VEC) {
            float g[8];
            lj_load8(g, src);
            for (int k = 0; k < 8; k++) acc[k] += g[k];
        } else {
            acc[0] += lj_ld(src);
        }
    }
    G *dst = dwte + (int64_t)id * C + c;
    for (int k = 0; k < per; k++) lj_st(dst + k, lj_ld(dst + k) + acc[k]);
}

/* Workspace: sorted ids [N], positions in [N] and out [N] (i32), then CUB's scratch. */
static size_t embedding_sort_bytes(int N) {
    size_t bytes = 0;
    cub::DeviceRadixSort::SortPairs(NULL, bytes, (const int32_t *)NULL, (int32_t *)NULL, (const int32_t *)NULL,
                                    (int32_t *)NULL, N);
    return bytes;
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

size_t lj_cuda_embedding_backward_workspace_bytes(int N) {
    if (N <= 0) return 0;
    return 3 * align256((size_t)N * sizeof(int32_t)) + align256(embedding_sort_bytes(N));
}

/* Launches embedding_backward_sorted_kernel for gradient dtype G, 8 columns per thread when the
 * rows allow 16-byte accesses. */
template <typename G>
static void embedding_backward_sorted(G *dwte, const lj_bf16 *dout, const int32_t *sorted_ids, const int32_t *pos, int N,
                                      int C) {
    const bool vec = C % 8 == 0 && lj_cuda_aligned16(dout, dwte, NULL);
    dim3 grid((unsigned)N, (unsigned)((C / (vec ? 8 : 1) + LJ_EMB_THREADS - 1) / LJ_EMB_THREADS));
    if (vec)
        embedding_backward_sorted_kernel<G, true><<<grid, LJ_EMB_THREADS, 0, lj_cuda_stream()>>>(dwte, dout, sorted_ids,
                                                                                               pos, N, C);
    else
        embedding_backward_sorted_kernel<G, false><<<grid, LJ_EMB_THREADS, 0, lj_cuda_stream()>>>(dwte, dout, sorted_ids,
                                                                                                pos, N, C);
    LJ_CUDA_LAUNCHED("embedding_backward_sorted_kernel");
}

void lj_cuda_embedding_backward(void *dwte, const void *dout, const int32_t *ids, int N, int C, void *workspace,
                                lj_dtype grad_dtype) {
    if (N <= 0 || C <= 0) return;
    char *ws = (char *)workspace;
    const size_t idx_bytes = align256((size_t)N * sizeof(int32_t));
    int32_t *sorted_ids = (int32_t *)ws, *pos_in = (int32_t *)(ws + idx_bytes), *pos = (int32_t *)(ws + 2 * idx_bytes);
    void *scratch = ws + 3 * idx_bytes;
    size_t scratch_bytes = embedding_sort_bytes(N);
    iota_kernel<<<lj_cuda_blocks(N, 256), 256, 0, lj_cuda_stream()>>>(pos_in, N);
    LJ_CUDA_LAUNCHED("iota_kernel");
    LJ_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch, scratch_bytes, ids, sorted_ids, pos_in, pos, N, 0, 32,
                                                  lj_cuda_stream()),
                  "cub::DeviceRadixSort::SortPairs in embedding_backward");
    if (grad_dtype == LJ_DTYPE_F32)
        embedding_backward_sorted<float>((float *)dwte, (const lj_bf16 *)dout, sorted_ids, pos, N, C);
    else
        embedding_backward_sorted<lj_bf16>((lj_bf16 *)dwte, (const lj_bf16 *)dout, sorted_ids, pos, N, C);
}

/* ---- RMSNorm ---------------------------------------------------------------------- */

/* Sum of squares of one row by one warp. */
template <bool VEC>
static __device__ float row_sumsq(const lj_bf16 *x, int C, int lane) {
    float ss = 0.0f;
    if (VEC) {
        for (int c = lane * 8; c < C; c += 256) {
            float v[8];
            lj_load8(v, x + c);
            for (int j = 0; j < 8; j++) ss += v[j] * v[j];
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            float v = lj_ld(x + c);
            ss += v * v;
        }
    }
    return lj_warp_sum(ss);
}

/* out = x * r * w for one row by one warp. */
template <bool VEC>
static __device__ void row_scale(lj_bf16 *out, const lj_bf16 *x, const lj_bf16 *w, float r, int C, int lane) {
    if (VEC) {
        for (int c = lane * 8; c < C; c += 256) {
            float v[8], g[8];
            lj_load8(v, x + c);
            lj_load8(g, w + c);
            for (int j = 0; j < 8; j++) v[j] = v[j] * r * g[j];
            lj_store8(out + c, v);
        }
    } else {
        for (int c = lane; c < C; c += 32) lj_st(out + c, lj_ld(x + c) * r * lj_ld(w + c));
    }
}

/* One warp per row. rstd = 1/sqrt(mean(x^2) + eps) (HF LlamaRMSNorm, fp32). */
template <bool VEC>
__global__ void rmsnorm_forward_kernel(lj_bf16 *out, float *rstd, const lj_bf16 *x, const lj_bf16 *w, int N, int C,
                                       float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const lj_bf16 *xr = x + (int64_t)row * C;
    float r = 1.0f / sqrtf(row_sumsq<VEC>(xr, C, lane) / (float)C + eps);
    if (lane == 0 && rstd) rstd[row] = r;
    row_scale<VEC>(out + (int64_t)row * C, xr, w, r, C, lane);
}

/* res_out = bf16(res_in + y); out = rmsnorm(res_out) from the rounded residual (so it equals
 * add + rmsnorm_forward). res_out may alias res_in or y: each element is read before the same
 * thread writes it. */
template <bool VEC>
__global__ void residual_rmsnorm_forward_kernel(lj_bf16 *res_out, lj_bf16 *out, float *rstd, const lj_bf16 *res_in,
                                                const lj_bf16 *y, const lj_bf16 *w, int N, int C, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    int64_t off = (int64_t)row * C;
    float ss = 0.0f;
    if (VEC) {
        for (int c = lane * 8; c < C; c += 256) {
            float a[8], b[8];
            lj_load8(a, res_in + off + c);
            lj_load8(b, y + off + c);
            for (int j = 0; j < 8; j++) a[j] = __bfloat162float(__float2bfloat16_rn(a[j] + b[j]));
            lj_store8(res_out + off + c, a);
            for (int j = 0; j < 8; j++) ss += a[j] * a[j];
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            float a = __bfloat162float(__float2bfloat16_rn(lj_ld(res_in + off + c) + lj_ld(y + off + c)));
            lj_st(res_out + off + c, a);
            ss += a * a;
        }
    }
    ss = lj_warp_sum(ss);
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    if (lane == 0 && rstd) rstd[row] = r;
    row_scale<VEC>(out + off, res_out + off, w, r, C, lane);
}

/* dx += r * (dout*w - x * r^2 * dot / C), dot = sum(dout*w*x): the row part of the RMSNorm
 * backward, one warp per row. */
template <bool VEC>
__global__ void rmsnorm_backward_dx_kernel(lj_bf16 *dx, const lj_bf16 *dout, const lj_bf16 *x, const lj_bf16 *w,
                                           const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    int64_t off = (int64_t)row * C;
    float dot = 0.0f;
    if (VEC) {
        for (int c = lane * 8; c < C; c += 256) {
            float d[8], v[8], g[8];
            lj_load8(d, dout + off + c);
            lj_load8(v, x + off + c);
            lj_load8(g, w + c);
            for (int j = 0; j < 8; j++) dot += d[j] * g[j] * v[j];
        }
    } else {
        for (int c = lane; c < C; c += 32) dot += lj_ld(dout + off + c) * lj_ld(w + c) * lj_ld(x + off + c);
    }
    dot = lj_warp_sum(dot);
    float r = rstd[row];
    float k = r * r * dot / (float)C;
    if (VEC) {
        for (int c = lane * 8; c < C; c += 256) {
            float d[8], v[8], g[8], o[8];
            lj_load8(d, dout + off + c);
            lj_load8(v, x + off + c);
            lj_load8(g, w + c);
            lj_load8(o, dx + off + c);
            for (int j = 0; j < 8; j++) o[j] += r * (d[j] * g[j] - v[j] * k);
            lj_store8(dx + off + c, o);
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            float v = lj_ld(dx + off + c) + r * (lj_ld(dout + off + c) * lj_ld(w + c) - lj_ld(x + off + c) * k);
            lj_st(dx + off + c, v);
        }
    }
}

/* dw partial sums: block (column tile of 64, row part p) writes
 * partial[p, c] = sum over its rows of dout[n,c] * x[n,c] * rstd[n], in a fixed order. */
#define LJ_DW_COLS 64
__global__ void rmsnorm_backward_dw_partial_kernel(float *partial, const lj_bf16 *dout, const lj_bf16 *x,
                                                   const float *rstd, int N, int C, int rows_per_part) {
    __shared__ float red[8][LJ_DW_COLS];
    int tx = threadIdx.x % 32, ty = threadIdx.x / 32; /* 32 x 8 threads */
    int c0 = blockIdx.x * LJ_DW_COLS + 2 * tx;
    int p = blockIdx.y;
    int n_begin = p * rows_per_part, n_end = min(N, n_begin + rows_per_part);
    float a0 = 0.0f, a1 = 0.0f;
    for (int n = n_begin + ty; n < n_end; n += 8) {
        int64_t off = (int64_t)n * C;
        float r = rstd[n];
        if (c0 < C) a0 += lj_ld(dout + off + c0) * lj_ld(x + off + c0) * r;
        if (c0 + 1 < C) a1 += lj_ld(dout + off + c0 + 1) * lj_ld(x + off + c0 + 1) * r;
    }
    red[ty][2 * tx] = a0;
    red[ty][2 * tx + 1] = a1;
    __syncthreads();
    if (ty == 0) {
        for (int j = 0; j < 2; j++) {
            float s = 0.0f;
            for (int i = 0; i < 8; i++) s += red[i][2 * tx + j];
            int c = c0 + j;
            if (c < C) partial[(int64_t)p * C + c] = s;
        }
    }
}

template <typename G>
__global__ void rmsnorm_backward_dw_final_kernel(G *dw, const float *partial, int parts, int C, int overwrite) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int p = 0; p < parts; p++) s += partial[(int64_t)p * C + c];
    lj_st(dw + c, (overwrite ? 0.0f : lj_ld(dw + c)) + s);
}

static int rmsnorm_parts(int N) {
    int parts = (N + 63) / 64;
    if (parts > 256) parts = 256;
    return parts < 1 ? 1 : parts;
}

size_t lj_cuda_rmsnorm_backward_workspace_bytes(int N, int C) { return (size_t)rmsnorm_parts(N) * (size_t)C * 4; }

static unsigned row_blocks(int N) { return (unsigned)((N + LJ_ROW_THREADS / 32 - 1) / (LJ_ROW_THREADS / 32)); }

void lj_cuda_rmsnorm_forward(void *out, float *rstd, const void *x, const void *w, int N, int C, float eps) {
    if (N <= 0 || C <= 0) return;
    if (C % 8 == 0 && lj_cuda_aligned16(out, x, w))
        rmsnorm_forward_kernel<true><<<row_blocks(N), LJ_ROW_THREADS, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)out, rstd, (const lj_bf16 *)x, (const lj_bf16 *)w, N, C, eps);
    else
        rmsnorm_forward_kernel<false><<<row_blocks(N), LJ_ROW_THREADS, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)out, rstd, (const lj_bf16 *)x, (const lj_bf16 *)w, N, C, eps);
    LJ_CUDA_LAUNCHED("rmsnorm_forward_kernel");
}

void lj_cuda_residual_rmsnorm_forward(void *res_out, void *out, float *rstd, const void *res_in, const void *y,
                                      const void *w, int N, int C, float eps) {
    if (N <= 0 || C <= 0) return;
    if (C % 8 == 0 && lj_cuda_aligned16(res_out, out, res_in) && lj_cuda_aligned16(y, w, NULL))
        residual_rmsnorm_forward_kernel<true><<<row_blocks(N), LJ_ROW_THREADS, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)res_out, (lj_bf16 *)out, rstd, (const lj_bf16 *)res_in, (const lj_bf16 *)y,
            (const lj_bf16 *)w, N, C, eps);
    else
        residual_rmsnorm_forward_kernel<false><<<row_blocks(N), LJ_ROW_THREADS, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)res_out, (lj_bf16 *)out, rstd, (const lj_bf16 *)res_in, (const lj_bf16 *)y,
            (const lj_bf16 *)w, N, C, eps);
    LJ_CUDA_LAUNCHED("residual_rmsnorm_forward_kernel");
}

/* Three passes: dx (row-wise), dw partial sums per block of rows, then their fixed-order sum
 * (deterministic: no atomics). workspace: [parts, C] f32. */
void lj_cuda_rmsnorm_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd,
                              int N, int C, lj_grad_mode dw_mode, void *workspace, lj_dtype grad_dtype) {
    if (N <= 0 || C <= 0) return;
    if (dx) {
        if (C % 8 == 0 && lj_cuda_aligned16(dx, dout, x) && lj_cuda_aligned16(w, NULL, NULL))
            rmsnorm_backward_dx_kernel<true><<<row_blocks(N), LJ_ROW_THREADS, 0, lj_cuda_stream()>>>(
                (lj_bf16 *)dx, (const lj_bf16 *)dout, (const lj_bf16 *)x, (const lj_bf16 *)w, rstd, N, C);
        else
            rmsnorm_backward_dx_kernel<false><<<row_blocks(N), LJ_ROW_THREADS, 0, lj_cuda_stream()>>>(
                (lj_bf16 *)dx, (const lj_bf16 *)dout, (const lj_bf16 *)x, (const lj_bf16 *)w, rstd, N, C);
        LJ_CUDA_LAUNCHED("rmsnorm_backward_dx_kernel");
    }
    if (dw) {
        int parts = rmsnorm_parts(N);
        int rows_per_part = (N + parts - 1) / parts;
        dim3 grid((unsigned)((C + LJ_DW_COLS - 1) / LJ_DW_COLS), (unsigned)parts);
        rmsnorm_backward_dw_partial_kernel<<<grid, 256, 0, lj_cuda_stream()>>>(
            (float *)workspace, (const lj_bf16 *)dout, (const lj_bf16 *)x, rstd, N, C, rows_per_part);
        LJ_CUDA_LAUNCHED("rmsnorm_backward_dw_partial_kernel");
        const unsigned blocks = (unsigned)((C + 255) / 256);
        const int overwrite = dw_mode == LJ_GRAD_OVERWRITE;
        if (grad_dtype == LJ_DTYPE_F32)
            rmsnorm_backward_dw_final_kernel<float><<<blocks, 256, 0, lj_cuda_stream()>>>(
                (float *)dw, (const float *)workspace, parts, C, overwrite);
        else
            rmsnorm_backward_dw_final_kernel<lj_bf16><<<blocks, 256, 0, lj_cuda_stream()>>>(
                (lj_bf16 *)dw, (const float *)workspace, parts, C, overwrite);
        LJ_CUDA_LAUNCHED("rmsnorm_backward_dw_final_kernel");
    }
}

/* ---- add -------------------------------------------------------------------------- */

template <bool VEC>
__global__ void add_kernel(lj_bf16 *out, const lj_bf16 *a, const lj_bf16 *b, int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (VEC) {
        for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * 8; i < n; i += stride * 8) {
            float x[8], y[8];
            lj_load8(x, a + i);
            lj_load8(y, b + i);
            for (int j = 0; j < 8; j++) x[j] += y[j];
            lj_store8(out + i, x);
        }
    } else {
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
            lj_st(out + i, lj_ld(a + i) + lj_ld(b + i));
    }
}

void lj_cuda_add(void *out, const void *a, const void *b, int64_t n) {
    if (n <= 0) return;
    if (n % 8 == 0 && lj_cuda_aligned16(out, a, b))
        add_kernel<true><<<lj_cuda_blocks(n / 8, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)out, (const lj_bf16 *)a, (const lj_bf16 *)b, n);
    else
        add_kernel<false><<<lj_cuda_blocks(n, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)out, (const lj_bf16 *)a, (const lj_bf16 *)b, n);
    LJ_CUDA_LAUNCHED("add_kernel");
}

/* ---- RoPE ------------------------------------------------------------------------- */

/* One thread per PER consecutive pairs (i .. i + PER - 1 with their partners at + hd/2) of one
 * q or k head of one row, in place. PER = 8 reads and writes 16-byte vectors (hd/2 a multiple
 * of 8 and qkv 16-byte aligned); PER = 1 is the general case. POS: the row's position is pos[row]
 * (--reset-position-ids) instead of t; the kernel without it is unchanged. */
template <bool BACKWARD, int PER, bool POS>
__global__ void rope_kernel(lj_bf16 *qkv, const float *cosv, const float *sinv, const int32_t *pos, int B, int T,
                            int nh, int nkv, int hd) {
    const int half = hd / 2, heads = nh + nkv, groups = half / PER;
    const int64_t row_len = (int64_t)(nh + 2 * nkv) * hd;
    const int64_t total = (int64_t)B * T * heads * groups;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % groups) * PER;
        const int64_t rest = idx / groups;
        const int head = (int)(rest % heads);
        const int64_t row = rest / heads;
        const int t = POS ? pos[row] : (int)(row % T);
        lj_bf16 *p = qkv + row * row_len + (int64_t)head * hd + i;
        const float *cp = cosv + (int64_t)t * half + i, *sp = sinv + (int64_t)t * half + i;
        if (PER == 8) {
            float x1[8], x2[8];
            lj_load8(x1, p);
            lj_load8(x2, p + half);
            const float4 c0 = *(const float4 *)cp, c1 = *(const float4 *)(cp + 4);
            const float4 s0 = *(const float4 *)sp, s1 = *(const float4 *)(sp + 4);
            const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
            const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
            for (int q = 0; q < 8; q++) lj_rope_pair<BACKWARD>(x1[q], x2[q], c[q], s[q]);
            lj_store8(p, x1);
            lj_store8(p + half, x2);
        } else {
            float x1 = lj_ld(p), x2 = lj_ld(p + half);
            lj_rope_pair<BACKWARD>(x1, x2, cp[0], sp[0]);
            lj_st(p, x1);
            lj_st(p + half, x2);
        }
    }
}

template <bool BACKWARD, bool POS>
static void rope_launch(void *qkv, const float *cos, const float *sin, const int32_t *pos, int B, int T, int nh,
                        int nkv, int hd, const char *name) {
    const int half = hd / 2;
    const bool vec = half % 8 == 0 && ((uintptr_t)qkv & 15) == 0 && ((uintptr_t)cos & 15) == 0 &&
                     ((uintptr_t)sin & 15) == 0;
    const int64_t total = (int64_t)B * T * (nh + nkv) * (half / (vec ? 8 : 1));
    if (total <= 0) return;
    if (vec)
        rope_kernel<BACKWARD, 8, POS><<<lj_cuda_blocks(total, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)qkv, cos, sin, pos, B, T, nh, nkv, hd);
    else
        rope_kernel<BACKWARD, 1, POS><<<lj_cuda_blocks(total, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)qkv, cos, sin, pos, B, T, nh, nkv, hd);
    LJ_CUDA_LAUNCHED(name);
}

void lj_cuda_rope_forward(void *qkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd) {
    rope_launch<false, false>(qkv, cos, sin, NULL, B, T, nh, nkv, hd, "rope_forward_kernel");
}

void lj_cuda_rope_backward(void *dqkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd) {
    rope_launch<true, false>(dqkv, cos, sin, NULL, B, T, nh, nkv, hd, "rope_backward_kernel");
}

void lj_cuda_rope_forward_pos(void *qkv, const float *cos, const float *sin, const int32_t *pos, int B, int T, int nh,
                              int nkv, int hd) {
    rope_launch<false, true>(qkv, cos, sin, pos, B, T, nh, nkv, hd, "rope_forward_kernel (positions)");
}

void lj_cuda_rope_backward_pos(void *dqkv, const float *cos, const float *sin, const int32_t *pos, int B, int T,
                               int nh, int nkv, int hd) {
    rope_launch<true, true>(dqkv, cos, sin, pos, B, T, nh, nkv, hd, "rope_backward_kernel (positions)");
}

/* ---- SwiGLU ----------------------------------------------------------------------- */

/* The element functions of SwiGLU and of its unfused passes. silu(g) = g * sigmoid(g),
 * silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g). Inputs a, b, c; outputs y0, y1. */
enum { SWIGLU_FWD, SWIGLU_BWD, SWIGLU_SILU, SWIGLU_MUL, SWIGLU_DGATE };

template <int OP>
static __device__ __forceinline__ void swiglu_op(float a, float b, float c, float *y0, float *y1) {
    float s = 1.0f / (1.0f + expf(-a));
    if (OP == SWIGLU_FWD) { /* a = gate, b = up */
        *y0 = lj_swiglu_value(a, b);
    } else if (OP == SWIGLU_BWD) { /* a = gate, b = up, c = dout; y0 = dgate, y1 = dup */
        *y0 = c * b * s * (1.0f + a * (1.0f - s));
        *y1 = c * a * s;
    } else if (OP == SWIGLU_SILU) {
        *y0 = a * s;
    } else if (OP == SWIGLU_MUL) { /* y0 = b * c (a unused) */
        *y0 = b * c;
    } else { /* SWIGLU_DGATE: a = gate, b = up, c = dout */
        *y0 = c * b * s * (1.0f + a * (1.0f - s));
    }
}

/* Element (n, j < I) of rows with strides (in elements): y0, y1 outputs (y1 may be NULL),
 * a, b, c inputs (unused ones may be NULL). */
template <int OP, bool VEC>
__global__ void swiglu_kernel(lj_bf16 *y0, int64_t sy0, lj_bf16 *y1, int64_t sy1, const lj_bf16 *a, int64_t sa,
                              const lj_bf16 *b, int64_t sb, const lj_bf16 *c, int64_t sc, int N, int I) {
    const int per = VEC ? 8 : 1;
    int64_t cols = I / per, total = (int64_t)N * cols;
    const bool use_a = OP != SWIGLU_MUL, use_b = OP != SWIGLU_SILU, use_c = OP == SWIGLU_BWD || OP == SWIGLU_MUL ||
                                                                            OP == SWIGLU_DGATE;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = idx / cols, j = (idx % cols) * per;
        float va[8] = {0}, vb[8] = {0}, vc[8] = {0}, o0[8], o1[8];
        if (VEC) {
            if (use_a) lj_load8(va, a + n * sa + j);
            if (use_b) lj_load8(vb, b + n * sb + j);
            if (use_c) lj_load8(vc, c + n * sc + j);
        } else {
            if (use_a) va[0] = lj_ld(a + n * sa + j);
            if (use_b) vb[0] = lj_ld(b + n * sb + j);
            if (use_c) vc[0] = lj_ld(c + n * sc + j);
        }
        for (int k = 0; k < per; k++) swiglu_op<OP>(va[k], vb[k], vc[k], &o0[k], &o1[k]);
        if (VEC) {
            lj_store8(y0 + n * sy0 + j, o0);
            if (OP == SWIGLU_BWD) lj_store8(y1 + n * sy1 + j, o1);
        } else {
            lj_st(y0 + n * sy0 + j, o0[0]);
            if (OP == SWIGLU_BWD) lj_st(y1 + n * sy1 + j, o1[0]);
        }
    }
}

template <int OP>
static void swiglu_launch(const char *name, void *y0, int64_t sy0, void *y1, int64_t sy1, const void *a, int64_t sa,
                          const void *b, int64_t sb, const void *c, int64_t sc, int N, int I) {
    if (N <= 0 || I <= 0) return;
    int vec = I % 8 == 0 && lj_cuda_aligned16(y0, y1, a) && lj_cuda_aligned16(b, c, NULL);
    int64_t units = (int64_t)N * (vec ? I / 8 : I);
    if (vec)
        swiglu_kernel<OP, true><<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)y0, sy0, (lj_bf16 *)y1, sy1, (const lj_bf16 *)a, sa, (const lj_bf16 *)b, sb,
            (const lj_bf16 *)c, sc, N, I);
    else
        swiglu_kernel<OP, false><<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)y0, sy0, (lj_bf16 *)y1, sy1, (const lj_bf16 *)a, sa, (const lj_bf16 *)b, sb,
            (const lj_bf16 *)c, sc, N, I);
    LJ_CUDA_LAUNCHED(name);
}

void lj_cuda_swiglu_forward(void *out, const void *gate_up, int N, int I) {
    const lj_bf16 *g = (const lj_bf16 *)gate_up;
    swiglu_launch<SWIGLU_FWD>("swiglu_forward_kernel", out, I, NULL, 0, g, 2 * (int64_t)I, g + I, 2 * (int64_t)I,
                              NULL, 0, N, I);
}

void lj_cuda_swiglu_backward(void *dgate_up, const void *dout, const void *gate_up, int N, int I) {
    const lj_bf16 *g = (const lj_bf16 *)gate_up;
    lj_bf16 *dg = (lj_bf16 *)dgate_up;
    swiglu_launch<SWIGLU_BWD>("swiglu_backward_kernel", dg, 2 * (int64_t)I, dg + I, 2 * (int64_t)I, g,
                              2 * (int64_t)I, g + I, 2 * (int64_t)I, dout, I, N, I);
}

/* tmp = silu(gate); out = tmp * up (two passes). */
void lj_cuda_swiglu_forward_unfused(void *out, void *tmp, const void *gate_up, int N, int I) {
    const lj_bf16 *g = (const lj_bf16 *)gate_up;
    swiglu_launch<SWIGLU_SILU>("swiglu_silu_kernel", tmp, I, NULL, 0, g, 2 * (int64_t)I, NULL, 0, NULL, 0, N, I);
    swiglu_launch<SWIGLU_MUL>("swiglu_mul_kernel", out, I, NULL, 0, NULL, 0, tmp, I, g + I, 2 * (int64_t)I, N, I);
}

/* tmp = silu(gate); dup = dout * tmp; dgate = dout * up * silu'(gate) (three passes). */
void lj_cuda_swiglu_backward_unfused(void *dgate_up, void *tmp, const void *dout, const void *gate_up, int N, int I) {
    const lj_bf16 *g = (const lj_bf16 *)gate_up;
    lj_bf16 *dg = (lj_bf16 *)dgate_up;
    swiglu_launch<SWIGLU_SILU>("swiglu_silu_kernel", tmp, I, NULL, 0, g, 2 * (int64_t)I, NULL, 0, NULL, 0, N, I);
    swiglu_launch<SWIGLU_MUL>("swiglu_mul_kernel", dg + I, 2 * (int64_t)I, NULL, 0, NULL, 0, tmp, I, dout, I, N, I);
    swiglu_launch<SWIGLU_DGATE>("swiglu_dgate_kernel", dg, 2 * (int64_t)I, NULL, 0, g, 2 * (int64_t)I, g + I,
                                2 * (int64_t)I, dout, I, N, I);
}

/* rmsnorm.cu: the CUDA backend's RMSNorm: plain, fused with the residual add, and its backward
 * (dx row-wise; dw in fixed-order partial sums, no atomics). bf16 tensors, fp32 arithmetic; a 16-byte vector path wherever rows are multiples of 8
 * elements and pointers are 16-byte aligned, whose row arithmetic (cuda_common.h lj_rmsnorm_*)
 * the FP8 cast fused into the norm shares (fp8.cu). Contracts in ops/ops.h. */
#include "ops/cuda/cuda_common.h"

#define LJ_ROW_THREADS 256 /* threads per block of the warp-per-row kernels (8 rows) */

/* Sum of squares of one row by one warp. */
template <bool VEC>
static __device__ float row_sumsq(const lj_bf16 *x, int C, int lane) {
    if (VEC) return lj_rmsnorm_sumsq8(x, C, lane);
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float v = lj_ld(x + c);
        ss += v * v;
    }
    return lj_warp_sum(ss);
}

/* out = x * r * w for one row by one warp. */
template <bool VEC>
static __device__ void row_scale(lj_bf16 *out, const lj_bf16 *x, const lj_bf16 *w, float r, int C, int lane) {
    if (VEC) {
        for (int c = lane * 8; c < C; c += 256) {
            float v[8];
            lj_rmsnorm_scale8(v, x + c, w + c, r);
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
    float r = lj_rmsnorm_rstd(row_sumsq<VEC>(xr, C, lane), C, eps);
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
        ss = lj_rmsnorm_residual_sumsq8(res_out + off, res_in + off, y + off, C, lane);
    } else {
        for (int c = lane; c < C; c += 32) {
            float a = __bfloat162float(__float2bfloat16_rn(lj_ld(res_in + off + c) + lj_ld(y + off + c)));
            lj_st(res_out + off + c, a);
            ss += a * a;
        }
        ss = lj_warp_sum(ss);
    }
    float r = lj_rmsnorm_rstd(ss, C, eps);
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

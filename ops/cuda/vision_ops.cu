/* vision_ops.cu: the row-wise and element-wise ops of the vision tower on CUDA: LayerNorm with
 * bias (forward; backward with deterministic dgamma/dbeta column sums), the exact and tanh GELU,
 * the weighted embedding bag (the position grid's bilinear interpolation) and its scatter-add
 * backward without atomics, row gather and scatter. bf16 tensors, fp32 arithmetic; 16-byte
 * vector paths where rows are multiples of 8 elements and pointers 16-byte aligned. */
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/vision.h"

#define LJ_VROW_THREADS 256 /* warp-per-row kernels: 8 rows per block */

static unsigned vrow_blocks(int N) { return (unsigned)((N + LJ_VROW_THREADS / 32 - 1) / (LJ_VROW_THREADS / 32)); }

/* ---- LayerNorm ---------------------------------------------------------------------- */

/* Sum over one row by one warp of f(x[c]) (f: identity or (x - mu)^2). */
template <bool VEC, bool CENTERED>
static __device__ float vrow_sum(const lj_bf16 *x, int C, int lane, float mu) {
    float s = 0.0f;
    if (VEC) {
        for (int c = lane * 8; c < C; c += 256) {
            float v[8];
            lj_load8(v, x + c);
            for (int j = 0; j < 8; j++) s += CENTERED ? (v[j] - mu) * (v[j] - mu) : v[j];
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            const float v = lj_ld(x + c);
            s += CENTERED ? (v - mu) * (v - mu) : v;
        }
    }
    return lj_warp_sum(s);
}

/* One warp per row: mean, biased variance (two passes over the row), out = (x - mean) * rstd * w + b. */
template <bool VEC>
__global__ void layernorm_forward_kernel(lj_bf16 *out, float *mean, float *rstd, const lj_bf16 *x, const lj_bf16 *w,
                                         const lj_bf16 *b, int N, int C, float eps) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const int64_t off = (int64_t)row * C;
    const float mu = vrow_sum<VEC, false>(x + off, C, lane, 0.0f) / (float)C;
    const float var = vrow_sum<VEC, true>(x + off, C, lane, mu) / (float)C;
    const float r = rsqrtf(var + eps);
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = r;
    }
    if (VEC) {
        for (int c = lane * 8; c < C; c += 256) {
            float v[8], g[8], bb[8];
            lj_load8(v, x + off + c);
            lj_load8(g, w + c);
            lj_load8(bb, b + c);
            for (int j = 0; j < 8; j++) v[j] = (v[j] - mu) * r * g[j] + bb[j];
            lj_store8(out + off + c, v);
        }
    } else {
        for (int c = lane; c < C; c += 32) lj_st(out + off + c, (lj_ld(x + off + c) - mu) * r * lj_ld(w + c) + lj_ld(b + c));
    }
}

/* dx = r * (g - mean(g) - xhat * mean(g * xhat)), g = w * dout: one warp per row. */
template <bool VEC>
__global__ void layernorm_backward_dx_kernel(lj_bf16 *dx, const lj_bf16 *dout, const lj_bf16 *x, const lj_bf16 *w,
                                             const float *mean, const float *rstd, int N, int C, int accumulate) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const int64_t off = (int64_t)row * C;
    const float mu = mean[row], r = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    if (VEC) {
        for (int c = lane * 8; c < C; c += 256) {
            float d[8], v[8], g[8];
            lj_load8(d, dout + off + c);
            lj_load8(v, x + off + c);
            lj_load8(g, w + c);
            for (int j = 0; j < 8; j++) {
                const float gd = g[j] * d[j];
                sg += gd;
                sgx += gd * (v[j] - mu) * r;
            }
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            const float gd = lj_ld(w + c) * lj_ld(dout + off + c);
            sg += gd;
            sgx += gd * (lj_ld(x + off + c) - mu) * r;
        }
    }
    const float mg = lj_warp_sum(sg) / (float)C, mgx = lj_warp_sum(sgx) / (float)C;
    if (VEC) {
        for (int c = lane * 8; c < C; c += 256) {
            float d[8], v[8], g[8], o[8];
            lj_load8(d, dout + off + c);
            lj_load8(v, x + off + c);
            lj_load8(g, w + c);
            if (accumulate) lj_load8(o, dx + off + c);
            for (int j = 0; j < 8; j++) {
                const float val = r * (g[j] * d[j] - mg - (v[j] - mu) * r * mgx);
                o[j] = accumulate ? o[j] + val : val;
            }
            lj_store8(dx + off + c, o);
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            const float val = r * (lj_ld(w + c) * lj_ld(dout + off + c) - mg - (lj_ld(x + off + c) - mu) * r * mgx);
            lj_st(dx + off + c, accumulate ? lj_ld(dx + off + c) + val : val);
        }
    }
}

/* dgamma / dbeta partial sums: block (column tile of 64, row part p) writes
 * partial[p, c] = sum over its rows of dout * xhat and partial[parts + p, c] = sum of dout, in a
 * fixed order; the final kernel adds the parts in order (deterministic, no atomics). */
#define LJ_LN_COLS 64
__global__ void layernorm_backward_dwdb_partial_kernel(float *partial, const lj_bf16 *dout, const lj_bf16 *x,
                                                       const float *mean, const float *rstd, int N, int C, int parts,
                                                       int rows_per_part) {
    __shared__ float red_w[8][LJ_LN_COLS], red_b[8][LJ_LN_COLS];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32; /* 32 x 8 threads */
    const int c0 = blockIdx.x * LJ_LN_COLS + 2 * tx;
    const int p = blockIdx.y;
    const int n_begin = p * rows_per_part, n_end = min(N, n_begin + rows_per_part);
    float aw[2] = {0.0f, 0.0f}, ab[2] = {0.0f, 0.0f};
    for (int n = n_begin + ty; n < n_end; n += 8) {
        const int64_t off = (int64_t)n * C;
        const float mu = mean[n], r = rstd[n];
        for (int j = 0; j < 2; j++)
            if (c0 + j < C) {
                const float d = lj_ld(dout + off + c0 + j);
                aw[j] += d * (lj_ld(x + off + c0 + j) - mu) * r;
                ab[j] += d;
            }
    }
    for (int j = 0; j < 2; j++) {
        red_w[ty][2 * tx + j] = aw[j];
        red_b[ty][2 * tx + j] = ab[j];
    }
    __syncthreads();
    if (ty == 0) {
        for (int j = 0; j < 2; j++) {
            float sw = 0.0f, sb = 0.0f;
            for (int i = 0; i < 8; i++) {
                sw += red_w[i][2 * tx + j];
                sb += red_b[i][2 * tx + j];
            }
            const int c = c0 + j;
            if (c < C) {
                partial[(int64_t)p * C + c] = sw;
                partial[(int64_t)(parts + p) * C + c] = sb;
            }
        }
    }
}

template <typename G>
__global__ void layernorm_backward_dwdb_final_kernel(G *dw, G *db, const float *partial, int parts, int C,
                                                     int overwrite) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int p = 0; p < parts; p++) {
        sw += partial[(int64_t)p * C + c];
        sb += partial[(int64_t)(parts + p) * C + c];
    }
    if (dw) lj_st(dw + c, (overwrite ? 0.0f : lj_ld(dw + c)) + sw);
    if (db) lj_st(db + c, (overwrite ? 0.0f : lj_ld(db + c)) + sb);
}

static int layernorm_parts(int N) {
    int parts = (N + 63) / 64;
    if (parts > 256) parts = 256;
    return parts < 1 ? 1 : parts;
}

size_t lj_cuda_layernorm_backward_workspace_bytes(int N, int C) {
    return 2 * (size_t)layernorm_parts(N) * (size_t)(C > 0 ? C : 0) * sizeof(float);
}

void lj_cuda_layernorm_forward(void *out, float *mean, float *rstd, const void *x, const void *w, const void *b, int N,
                               int C, float eps) {
    if (N <= 0 || C <= 0) return;
    if (C % 8 == 0 && lj_cuda_aligned16(out, x, w) && lj_cuda_aligned16(b, NULL, NULL))
        layernorm_forward_kernel<true><<<vrow_blocks(N), LJ_VROW_THREADS, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)out, mean, rstd, (const lj_bf16 *)x, (const lj_bf16 *)w, (const lj_bf16 *)b, N, C, eps);
    else
        layernorm_forward_kernel<false><<<vrow_blocks(N), LJ_VROW_THREADS, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)out, mean, rstd, (const lj_bf16 *)x, (const lj_bf16 *)w, (const lj_bf16 *)b, N, C, eps);
    LJ_CUDA_LAUNCHED("layernorm_forward_kernel");
}

void lj_cuda_layernorm_backward(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w,
                                const float *mean, const float *rstd, int N, int C, lj_grad_mode dx_mode,
                                lj_grad_mode dw_mode, void *workspace, lj_dtype grad_dtype) {
    if (N <= 0 || C <= 0) return;
    if (dx) {
        const int acc = dx_mode == LJ_GRAD_ACCUMULATE;
        if (C % 8 == 0 && lj_cuda_aligned16(dx, dout, x) && lj_cuda_aligned16(w, NULL, NULL))
            layernorm_backward_dx_kernel<true><<<vrow_blocks(N), LJ_VROW_THREADS, 0, lj_cuda_stream()>>>(
                (lj_bf16 *)dx, (const lj_bf16 *)dout, (const lj_bf16 *)x, (const lj_bf16 *)w, mean, rstd, N, C, acc);
        else
            layernorm_backward_dx_kernel<false><<<vrow_blocks(N), LJ_VROW_THREADS, 0, lj_cuda_stream()>>>(
                (lj_bf16 *)dx, (const lj_bf16 *)dout, (const lj_bf16 *)x, (const lj_bf16 *)w, mean, rstd, N, C, acc);
        LJ_CUDA_LAUNCHED("layernorm_backward_dx_kernel");
    }
    if (dw || db) {
        const int parts = layernorm_parts(N), rows_per_part = (N + parts - 1) / parts;
        dim3 grid((unsigned)((C + LJ_LN_COLS - 1) / LJ_LN_COLS), (unsigned)parts);
        layernorm_backward_dwdb_partial_kernel<<<grid, 256, 0, lj_cuda_stream()>>>(
            (float *)workspace, (const lj_bf16 *)dout, (const lj_bf16 *)x, mean, rstd, N, C, parts, rows_per_part);
        LJ_CUDA_LAUNCHED("layernorm_backward_dwdb_partial_kernel");
        const unsigned blocks = (unsigned)((C + 255) / 256);
        const int overwrite = dw_mode == LJ_GRAD_OVERWRITE;
        if (grad_dtype == LJ_DTYPE_F32)
            layernorm_backward_dwdb_final_kernel<float><<<blocks, 256, 0, lj_cuda_stream()>>>(
                (float *)dw, (float *)db, (const float *)workspace, parts, C, overwrite);
        else
            layernorm_backward_dwdb_final_kernel<lj_bf16><<<blocks, 256, 0, lj_cuda_stream()>>>(
                (lj_bf16 *)dw, (lj_bf16 *)db, (const float *)workspace, parts, C, overwrite);
        LJ_CUDA_LAUNCHED("layernorm_backward_dwdb_final_kernel");
    }
}

/* ---- GELU --------------------------------------------------------------------------- */

#define LJ_GELU_K0 0.7978845608028654f /* sqrt(2 / pi) */
#define LJ_GELU_K1 0.044715f

/* The forms of ops.h gelu_forward (the CPU's expressions, in fp32). */
template <bool TANH>
static __device__ __forceinline__ float gelu_value(float x) {
    if (TANH) return 0.5f * x * (1.0f + tanhf(LJ_GELU_K0 * (x + LJ_GELU_K1 * x * x * x)));
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

template <bool TANH>
static __device__ __forceinline__ float gelu_grad(float x) {
    if (TANH) {
        const float t = tanhf(LJ_GELU_K0 * (x + LJ_GELU_K1 * x * x * x));
        const float du = LJ_GELU_K0 * (1.0f + 3.0f * LJ_GELU_K1 * x * x);
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    }
    return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * expf(-0.5f * x * x) * 0.3989422804014327f;
}

/* BACKWARD: y = d * gelu'(x), else y = gelu(x). In place allowed (each element is read before the
 * same thread writes it). */
template <bool TANH, bool BACKWARD, bool VEC>
__global__ void gelu_kernel(lj_bf16 *y, const lj_bf16 *x, const lj_bf16 *d, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (VEC) {
        for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * 8; i < n; i += stride * 8) {
            float v[8], g[8];
            lj_load8(v, x + i);
            if (BACKWARD) lj_load8(g, d + i);
            for (int j = 0; j < 8; j++) v[j] = BACKWARD ? g[j] * gelu_grad<TANH>(v[j]) : gelu_value<TANH>(v[j]);
            lj_store8(y + i, v);
        }
    } else {
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
            const float v = lj_ld(x + i);
            lj_st(y + i, BACKWARD ? lj_ld(d + i) * gelu_grad<TANH>(v) : gelu_value<TANH>(v));
        }
    }
}

template <bool TANH, bool BACKWARD>
static void gelu_launch(void *y, const void *x, const void *d, int64_t n) {
    const bool vec = n % 8 == 0 && lj_cuda_aligned16(y, x, d);
    const int64_t units = vec ? n / 8 : n;
    if (vec)
        gelu_kernel<TANH, BACKWARD, true><<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)y, (const lj_bf16 *)x, (const lj_bf16 *)d, n);
    else
        gelu_kernel<TANH, BACKWARD, false><<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)y, (const lj_bf16 *)x, (const lj_bf16 *)d, n);
    LJ_CUDA_LAUNCHED(BACKWARD ? "gelu_backward_kernel" : "gelu_forward_kernel");
}

void lj_cuda_gelu_forward(void *out, const void *x, int64_t n, int tanh_form) {
    if (n <= 0) return;
    if (tanh_form) gelu_launch<true, false>(out, x, NULL, n);
    else gelu_launch<false, false>(out, x, NULL, n);
}

void lj_cuda_gelu_backward(void *dx, const void *dout, const void *x, int64_t n, int tanh_form) {
    if (n <= 0) return;
    if (tanh_form) gelu_launch<true, true>(dx, x, dout, n);
    else gelu_launch<false, true>(dx, x, dout, n);
}

/* ---- weighted embedding bag --------------------------------------------------------- */

/* One thread per 8 columns (VEC) or one column of an output row: the K weighted rows summed in
 * order in fp32, rounded once. */
template <bool VEC>
__global__ void embedding_bag_forward_kernel(lj_bf16 *out, const lj_bf16 *table, const int32_t *idx, const float *w,
                                             int N, int K, int C) {
    const int per = VEC ? 8 : 1;
    const int64_t cols = C / per, total = (int64_t)N * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = i / cols, c = (i % cols) * per;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int k = 0; k < K; k++) {
            const lj_bf16 *row = table + (int64_t)idx[n * K + k] * C + c;
            const float wk = w[n * K + k];
            if (VEC) {
                float v[8];
                lj_load8(v, row);
                for (int j = 0; j < 8; j++) acc[j] += wk * v[j];
            } else {
                acc[0] += wk * lj_ld(row);
            }
        }
        if (VEC) lj_store8(out + n * C + c, acc);
        else lj_st(out + n * C + c, acc[0]);
    }
}

void lj_cuda_embedding_bag_forward(void *out, const void *table, const int32_t *idx, const float *w, int N, int K,
                                   int C) {
    if (N <= 0 || C <= 0) return;
    const bool vec = C % 8 == 0 && lj_cuda_aligned16(out, table, NULL);
    const int64_t units = (int64_t)N * (vec ? C / 8 : C);
    if (vec)
        embedding_bag_forward_kernel<true><<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)out, (const lj_bf16 *)table, idx, w, N, K, C);
    else
        embedding_bag_forward_kernel<false><<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)out, (const lj_bf16 *)table, idx, w, N, K, C);
    LJ_CUDA_LAUNCHED("embedding_bag_forward_kernel");
}

/* The backward as a gather, so that it needs neither atomics nor a workspace (the op has none):
 * a block first finds the largest index (the table's rows are not given), then takes the table
 * rows r = blockIdx.x, + gridDim.x, ... up to it; for each it scans idx[N*K] in chunks of
 * LJ_BAG_THREADS, compacts the entries equal to r in their order (warp ballots and a block
 * prefix), and each thread adds w * dout of those entries, in that order, to its columns in fp32,
 * then adds the sum to dtable once (rows no entry names are not touched). Deterministic; the
 * scans cost (max index + 1) * N * K index reads from L2 (the position grid: 2304 rows, 4 entries
 * per patch). */
#define LJ_BAG_THREADS 256
#define LJ_BAG_PER 4 /* columns per thread, strided by LJ_BAG_THREADS */
#define LJ_BAG_COLS (LJ_BAG_THREADS * LJ_BAG_PER)

template <typename G>
__global__ void __launch_bounds__(LJ_BAG_THREADS)
    embedding_bag_backward_kernel(G *dtable, const lj_bf16 *dout, const int32_t *idx, const float *w, int NK, int K,
                                  int C) {
    __shared__ int list[LJ_BAG_THREADS];
    __shared__ int warp_val[LJ_BAG_THREADS / 32];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int c0 = blockIdx.y * LJ_BAG_COLS + tid;
    int mx = -1;
    for (int e = tid; e < NK; e += LJ_BAG_THREADS) mx = max(mx, (int)idx[e]);
    for (int o = 16; o > 0; o >>= 1) mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) warp_val[warp] = mx;
    __syncthreads();
    for (int i = 0; i < LJ_BAG_THREADS / 32; i++) mx = max(mx, warp_val[i]);
    __syncthreads();
    for (int r = blockIdx.x; r <= mx; r += gridDim.x) {
        float acc[LJ_BAG_PER];
        for (int j = 0; j < LJ_BAG_PER; j++) acc[j] = 0.0f;
        int found = 0;
        for (int base = 0; base < NK; base += LJ_BAG_THREADS) {
            const int e = base + tid;
            const bool hit = e < NK && idx[e] == r;
            const unsigned mask = __ballot_sync(0xffffffffu, hit);
            if (lane == 0) warp_val[warp] = __popc(mask);
            __syncthreads();
            int before = 0, total = 0;
            for (int i = 0; i < LJ_BAG_THREADS / 32; i++) {
                before += i < warp ? warp_val[i] : 0;
                total += warp_val[i];
            }
            if (hit) list[before + __popc(mask & ((1u << lane) - 1u))] = e;
            __syncthreads();
            for (int t = 0; t < total; t++) {
                const int entry = list[t];
                const float wk = w[entry];
                const lj_bf16 *d = dout + (int64_t)(entry / K) * C;
                for (int j = 0; j < LJ_BAG_PER; j++) {
                    const int c = c0 + j * LJ_BAG_THREADS;
                    if (c < C) acc[j] += wk * lj_ld(d + c);
                }
            }
            found += total;
            __syncthreads(); /* list and warp_val are rewritten by the next chunk */
        }
        if (found == 0) continue;
        G *dst = dtable + (int64_t)r * C;
        for (int j = 0; j < LJ_BAG_PER; j++) {
            const int c = c0 + j * LJ_BAG_THREADS;
            if (c < C) lj_st(dst + c, lj_ld(dst + c) + acc[j]);
        }
    }
}

void lj_cuda_embedding_bag_backward(void *dtable, const void *dout, const int32_t *idx, const float *w, int N, int K,
                                    int C, lj_dtype grad_dtype) {
    if (N <= 0 || K <= 0 || C <= 0) return;
    dim3 grid((unsigned)lj_cuda_num_sms() * 4, (unsigned)((C + LJ_BAG_COLS - 1) / LJ_BAG_COLS));
    const int NK = N * K;
    if (grad_dtype == LJ_DTYPE_F32)
        embedding_bag_backward_kernel<float><<<grid, LJ_BAG_THREADS, 0, lj_cuda_stream()>>>(
            (float *)dtable, (const lj_bf16 *)dout, idx, w, NK, K, C);
    else
        embedding_bag_backward_kernel<lj_bf16><<<grid, LJ_BAG_THREADS, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)dtable, (const lj_bf16 *)dout, idx, w, NK, K, C);
    LJ_CUDA_LAUNCHED("embedding_bag_backward_kernel");
}

/* ---- rows --------------------------------------------------------------------------- */

/* One thread per 8 columns (VEC) or one column of row i < M. GATHER: out[i] = x[idx[i]];
 * otherwise x[idx[i]] = src[i] (or += with accumulate; zeros when src is NULL). */
template <bool GATHER, bool VEC>
__global__ void rows_kernel(lj_bf16 *dst, const lj_bf16 *src, const int32_t *idx, int M, int C, int accumulate) {
    const int per = VEC ? 8 : 1;
    const int64_t cols = C / per, total = (int64_t)M * cols;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / cols, c = (t % cols) * per;
        const int64_t r = idx[i];
        const int64_t di = (GATHER ? i : r) * C + c, si = (GATHER ? r : i) * C + c;
        if (VEC) {
            float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (src) lj_load8(v, src + si);
            if (accumulate) {
                float o[8];
                lj_load8(o, dst + di);
                for (int j = 0; j < 8; j++) v[j] += o[j];
            }
            if (src || accumulate) lj_store8(dst + di, v);
            else *(uint4 *)(dst + di) = make_uint4(0, 0, 0, 0);
        } else {
            const float v = src ? lj_ld(src + si) : 0.0f;
            lj_st(dst + di, accumulate ? lj_ld(dst + di) + v : v);
        }
    }
}

template <bool GATHER>
static void rows_launch(void *dst, const void *src, const int32_t *idx, int M, int C, int accumulate) {
    if (M <= 0 || C <= 0) return;
    const bool vec = C % 8 == 0 && lj_cuda_aligned16(dst, src, NULL);
    const int64_t units = (int64_t)M * (vec ? C / 8 : C);
    if (vec)
        rows_kernel<GATHER, true><<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)dst, (const lj_bf16 *)src, idx, M, C, accumulate);
    else
        rows_kernel<GATHER, false><<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)dst, (const lj_bf16 *)src, idx, M, C, accumulate);
    LJ_CUDA_LAUNCHED(GATHER ? "rows_gather_kernel" : "rows_scatter_kernel");
}

void lj_cuda_rows_gather(void *out, const void *x, const int32_t *idx, int M, int C) {
    rows_launch<true>(out, x, idx, M, C, 0);
}

void lj_cuda_rows_scatter(void *x, const void *src, const int32_t *idx, int M, int C, lj_grad_mode mode) {
    LJ_ASSERT(src || mode == LJ_GRAD_OVERWRITE, "rows_scatter: accumulate needs a source");
    rows_launch<false>(x, src, idx, M, C, mode == LJ_GRAD_ACCUMULATE);
}

/* embedding.cu: the CUDA backend's embedding lookup and its backward without atomics (the ids
 * sorted with CUB, each row of the gradient summed by one block in a fixed order). bf16 tensors, fp32 arithmetic; a 16-byte vector path wherever rows are multiples of 8
 * elements and pointers are 16-byte aligned. Contracts in ops/ops.h. */
#include "ops/cuda/cuda_common.h"

#include <cub/device/device_radix_sort.cuh>

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

/* add.cu: the CUDA backend's element-wise add (the unfused twin of the residual add). bf16 tensors, fp32 arithmetic; a 16-byte vector path wherever rows are multiples of 8
 * elements and pointers are 16-byte aligned. Contracts in ops/ops.h. */
#include "ops/cuda/cuda_common.h"

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

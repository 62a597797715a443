/* cast.cu: the CUDA backend's casts between fp32 and the act/param dtype (bf16), rounded to
 * nearest even. Contracts in ops/ops.h (cast_f32_to_param, cast_to_f32). */
#include "ops/cuda/cuda_common.h"

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

/* cuda_describe.cu: the CUDA backend's planning description: dtypes and workspace sizes,
 * usable without a GPU (ljperf plan on a machine with no device). */
#include "ops/cuda/cuda_common.h"

#include <string.h>

static lj_dtype g_grad_dtype = LJ_DTYPE_BF16;
static lj_ops g_describe;
static int g_describe_ready;

static int g_dw_overwrite;

extern "C" lj_dtype lj_cuda_grad_dtype(void) { return g_grad_dtype; }
extern "C" void lj_cuda_set_weight_grad_overwrite(int overwrite) { g_dw_overwrite = overwrite != 0; }
extern "C" int lj_cuda_weight_grad_overwrite(void) { return g_dw_overwrite; }
extern "C" cudaDataType_t lj_cuda_grad_ctype(void) { return g_grad_dtype == LJ_DTYPE_F32 ? CUDA_R_32F : CUDA_R_16BF; }

extern "C" lj_status lj_ops_cuda_set_grad_dtype(lj_dtype dtype) {
    if (dtype != LJ_DTYPE_BF16 && dtype != LJ_DTYPE_F32)
        return lj_fail(LJ_ERR_ARG, "the CUDA backend keeps gradients in bf16 or fp32, not %s", lj_dtype_name(dtype));
    g_grad_dtype = dtype;
    g_describe.grad_dtype = dtype;
    lj_cuda_table_set_grad_dtype(dtype);
    return LJ_OK;
}

extern "C" const lj_ops *lj_ops_cuda_describe(void) {
    lj_ops &t = g_describe;
    if (!g_describe_ready) {
        memset(&t, 0, sizeof t);
        t.name = "cuda";
        t.act_dtype = LJ_DTYPE_BF16;
        t.param_dtype = LJ_DTYPE_BF16;
        t.grad_dtype = g_grad_dtype;
        t.embedding_backward_workspace_bytes = lj_cuda_embedding_backward_workspace_bytes;
        t.rmsnorm_backward_workspace_bytes = lj_cuda_rmsnorm_backward_workspace_bytes;
        t.attention_workspace_bytes = lj_cuda_attention_workspace_bytes_described;
        t.cross_entropy_fused_workspace_bytes = lj_cuda_cross_entropy_fused_workspace_bytes;
        t.global_norm_workspace_bytes = lj_cuda_global_norm_workspace_bytes;
        g_describe_ready = 1;
    }
    return &t;
}

/* cuda_describe.cu: the CUDA backend's planning description: dtypes and workspace sizes,
 * usable without a GPU (ljperf plan on a machine with no device). */
#include "ops/cuda/cuda_common.h"

#include <string.h>

extern "C" const lj_ops *lj_ops_cuda_describe(void) {
    static lj_ops t;
    static int ready;
    if (!ready) {
        memset(&t, 0, sizeof t);
        t.name = "cuda";
        t.act_dtype = LJ_DTYPE_BF16;
        t.param_dtype = LJ_DTYPE_BF16;
        t.grad_dtype = LJ_DTYPE_F32;
        t.rmsnorm_backward_workspace_bytes = lj_cuda_rmsnorm_backward_workspace_bytes;
        t.attention_workspace_bytes = lj_cuda_attention_workspace_bytes;
        t.cross_entropy_fused_workspace_bytes = lj_cuda_cross_entropy_fused_workspace_bytes;
        t.global_norm_workspace_bytes = lj_cuda_global_norm_workspace_bytes;
        ready = 1;
    }
    return &t;
}

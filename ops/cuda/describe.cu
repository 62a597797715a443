/* describe.cu: the CUDA backend's planning description, derived from its tables: name,
 * dtypes and workspace sizes, usable without a GPU (ljperf plan on a machine with no device). */
#include "ops/cuda/cuda_common.h"

#include <string.h>

static lj_dtype g_grad_dtype = LJ_DTYPE_BF16;

extern "C" lj_dtype lj_cuda_selected_grad_dtype(void) { return g_grad_dtype; }

extern "C" lj_status lj_ops_cuda_set_grad_dtype(lj_dtype dtype) {
    if (dtype != LJ_DTYPE_BF16 && dtype != LJ_DTYPE_F32)
        return lj_fail(LJ_ERR_ARG, "the CUDA backend keeps gradients in bf16 or fp32, not %s", lj_dtype_name(dtype));
    g_grad_dtype = dtype;
    return LJ_OK;
}

extern "C" void lj_ops_set_deterministic(int on) { lj_cuda_set_deterministic(on); }
extern "C" int lj_ops_deterministic(void) { return lj_cuda_deterministic(); }
extern "C" int lj_ops_attention_deterministic(const lj_ops *ops, int B, int T, int nh, int nkv, int hd) {
    if (strcmp(ops->name, "cuda") != 0) return 1;
    return ops->alloc && lj_cuda_cudnn_attention_deterministic(B, T, nh, nkv, hd);
}

/* The description of `t`: what planning reads (name, dtypes, workspace sizes), nothing that
 * runs on a device. */
static lj_ops describe(const lj_ops *t) {
    lj_ops d;
    memset(&d, 0, sizeof d);
    d.name = t->name;
    d.act_dtype = t->act_dtype;
    d.param_dtype = t->param_dtype;
    d.grad_dtype = t->grad_dtype;
    d.embedding_backward_workspace_bytes = t->embedding_backward_workspace_bytes;
    d.rmsnorm_backward_workspace_bytes = t->rmsnorm_backward_workspace_bytes;
    d.cross_entropy_fused_workspace_bytes = t->cross_entropy_fused_workspace_bytes;
    d.global_norm_workspace_bytes = t->global_norm_workspace_bytes;
    d.fp8_matmul_workspace_bytes = t->fp8_matmul_workspace_bytes;
    d.qk_norm_backward_workspace_bytes = t->qk_norm_backward_workspace_bytes;
    d.bias_backward_workspace_bytes = t->bias_backward_workspace_bytes;
    /* cuDNN is asked for its workspace only with a device: its size on an H200 instead */
    d.attention_workspace_bytes = lj_cuda_attention_workspace_bytes_described;
    return d;
}

extern "C" const lj_ops *lj_ops_cuda_describe(void) {
    static lj_ops described[2];
    static int ready[2];
    const int i = g_grad_dtype == LJ_DTYPE_F32;
    if (!ready[i]) {
        described[i] = describe(lj_cuda_table(g_grad_dtype));
        ready[i] = 1;
    }
    return &described[i];
}

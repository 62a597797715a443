/* describe.cu: the CUDA backend's planning description, derived from its tables: name,
 * dtypes, configuration and workspace sizes, usable without a GPU (ljperf plan on a machine with
 * no device); and the attention determinism query. */
#include "ops/cuda/cuda_common.h"

#include <string.h>

extern "C" int lj_ops_attention_deterministic(const lj_ops *ops, int B, int T, int nh, int nkv, int hd) {
    if (strcmp(ops->name, "cuda") != 0) return 1;
    return ops->alloc && ops->config.deterministic && ops->config.attention == LJ_ATTENTION_AUTO &&
           lj_cuda_cudnn_attention_deterministic(B, T, nh, nkv, hd);
}

/* The description of table `index`: what planning reads (name, dtypes, configuration,
 * workspace sizes), nothing that runs on a device. */
static lj_ops describe(int index) {
    const lj_ops *t = lj_cuda_table(index);
    lj_ops d;
    memset(&d, 0, sizeof d);
    d.name = t->name;
    d.act_dtype = t->act_dtype;
    d.param_dtype = t->param_dtype;
    d.grad_dtype = t->grad_dtype;
    d.config = t->config;
    d.embedding_backward_workspace_bytes = t->embedding_backward_workspace_bytes;
    d.rmsnorm_backward_workspace_bytes = t->rmsnorm_backward_workspace_bytes;
    d.cross_entropy_fused_workspace_bytes = t->cross_entropy_fused_workspace_bytes;
    d.global_norm_workspace_bytes = t->global_norm_workspace_bytes;
    d.fp8_matmul_workspace_bytes = t->fp8_matmul_workspace_bytes;
    d.qk_norm_backward_workspace_bytes = t->qk_norm_backward_workspace_bytes;
    d.bias_backward_workspace_bytes = t->bias_backward_workspace_bytes;
    /* the vision tower's (Qwen3-VL, model/vision.c plans them) */
    d.layernorm_backward_workspace_bytes = t->layernorm_backward_workspace_bytes;
    d.attention_varlen_workspace_bytes = t->attention_varlen_workspace_bytes;
    /* cuDNN is asked for its workspace only with a device: its size on an H200 instead */
    d.attention_workspace_bytes = lj_cuda_attention_workspace_described(index);
    return d;
}

extern "C" const lj_ops *lj_ops_cuda_describe(const lj_ops_config *cfg) {
    enum { LJ_MAX_TABLES = 64 };
    static lj_ops described[LJ_MAX_TABLES];
    static int ready[LJ_MAX_TABLES];
    const lj_ops_config def = LJ_OPS_CONFIG_DEFAULT;
    const int i = lj_cuda_config_index(cfg ? cfg : &def);
    if (i < 0) return NULL;
    LJ_ASSERT(i < LJ_MAX_TABLES, "CUDA table %d: more tables than descriptions", i);
    if (!ready[i]) {
        described[i] = describe(i);
        ready[i] = 1;
    }
    return &described[i];
}

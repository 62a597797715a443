/* cuda_stub.c: lj_ops_cuda() for builds without nvcc: there is no CUDA backend. */
#include "ops/ops.h"

const lj_ops *lj_ops_cuda(void) {
    lj_fail(LJ_ERR_UNSUPPORTED, "this ljperf was built without CUDA (nvcc was not found at build time)");
    return NULL;
}

lj_status lj_ops_cuda_fp8_check(void) {
    return lj_fail(LJ_ERR_UNSUPPORTED, "FP8 needs the CUDA backend, and this ljperf was built without CUDA");
}

lj_status lj_ops_cuda_fp8_blockwise_check(void) {
    return lj_fail(LJ_ERR_UNSUPPORTED, "--fp8-recipe blockwise needs the CUDA backend, and this ljperf was built "
                                       "without CUDA");
}

const lj_ops *lj_ops_cuda_describe(void) { return NULL; }

static int g_deterministic;
void lj_ops_set_deterministic(int on) { g_deterministic = on != 0; }
int lj_ops_deterministic(void) { return g_deterministic; }
int lj_ops_attention_deterministic(const lj_ops *ops, int B, int T, int nh, int nkv, int hd) {
    (void)ops, (void)B, (void)T, (void)nh, (void)nkv, (void)hd;
    return 1; /* the CPU backend's attention is deterministic */
}

lj_status lj_ops_cuda_set_grad_dtype(lj_dtype dtype) {
    (void)dtype;
    return LJ_OK;
}

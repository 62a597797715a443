/* cuda_stub.c: the CUDA entry points of ops/ops.h for builds without nvcc: there is no CUDA
 * backend. */
#include "ops/ops.h"

const lj_ops *lj_ops_cuda_open(const lj_ops_config *cfg) {
    (void)cfg;
    lj_fail(LJ_ERR_UNSUPPORTED, "this ljperf was built without CUDA (nvcc was not found at build time)");
    return NULL;
}

int lj_ops_cuda_device_count(void) { return 0; }

lj_status lj_ops_cuda_fp8_check(void) {
    return lj_fail(LJ_ERR_UNSUPPORTED, "FP8 needs the CUDA backend, and this ljperf was built without CUDA");
}

lj_status lj_ops_cuda_fp8_blockwise_check(void) {
    return lj_fail(LJ_ERR_UNSUPPORTED, "--fp8-recipe blockwise needs the CUDA backend, and this ljperf was built "
                                       "without CUDA");
}

const lj_ops *lj_ops_cuda_describe(const lj_ops_config *cfg) {
    (void)cfg;
    return NULL;
}

int lj_ops_attention_deterministic(const lj_ops *ops, int B, int T, int nh, int nkv, int hd) {
    (void)ops, (void)B, (void)T, (void)nh, (void)nkv, (void)hd;
    return 1; /* the CPU backend's attention is deterministic */
}

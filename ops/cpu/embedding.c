/* embedding.c: the CPU backend's embedding lookup and its backward (column blocks, each
 * summed over the rows in order: the same for any thread count). fp32, parallel over rows with OpenMP; contracts in ops/ops.h. */
#include "ops/cpu/cpu.h"

#include <string.h>

void lj_cpu_embedding_forward(void *out, const int32_t *ids, const void *wte, int N, int C) {
    float *o = out;
    const float *w = wte;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(o + (int64_t)n * C, w + (int64_t)ids[n] * C, (size_t)C * sizeof(float));
}

void lj_cpu_embedding_backward(void *dwte, const void *dout, const int32_t *ids, int N, int C, void *workspace) {
    (void)workspace;
    float *dw = dwte;
    const float *d = dout;
    int blocks = (C + LJ_CPU_COL_BLOCK - 1) / LJ_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        int c0 = blk * LJ_CPU_COL_BLOCK, c1 = c0 + LJ_CPU_COL_BLOCK < C ? c0 + LJ_CPU_COL_BLOCK : C;
        for (int n = 0; n < N; n++) {
            float *dst = dw + (int64_t)ids[n] * C;
            const float *src = d + (int64_t)n * C;
            for (int c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}

size_t lj_cpu_embedding_backward_workspace_bytes(int N) {
    (void)N;
    return 0;
}

/* cross_entropy.c: the CPU backend's lm_head + cross-entropy: fused over chunks of rows
 * (no [N, V] logits tensor) and the unfused twin over full logits. Both share the per-row
 * softmax code, so they give the same losses and logit gradients. Contracts in ops/ops.h. */
#include "ops/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* sum_j exp(l[j] - m) in double over the lanes of lj_cpu_sum_f64, without storing the
 * exponentials: the same bits as lj_cpu_sum_f64 over the stored values. */
static double exp_sum(const float *l, int V, float m) {
    double lane[LJ_CPU_LANES] = {0};
    int j = 0;
    for (; j + LJ_CPU_LANES <= V; j += LJ_CPU_LANES)
        for (int k = 0; k < LJ_CPU_LANES; k++) lane[k] += (double)lj_cpu_expf(l[j + k] - m);
    double s = 0.0;
    for (int k = 0; k < LJ_CPU_LANES; k++) s += lane[k];
    for (; j < V; j++) s += (double)lj_cpu_expf(l[j] - m);
    return s;
}

/* One row: loss = logsumexp(l) - l[target] (0 when target < 0). If dl is not NULL it receives
 * (softmax(l) - onehot(target)) * dloss, or zeros for an ignored row; dl may alias l. The
 * sum of exponentials is taken in double over fixed lanes, the same with and without dl. */
static float ce_row(float *dl, const float *l, int V, int target, float dloss) {
    LJ_ASSERT(target < V, "cross-entropy: target %d outside the vocabulary of %d", target, V);
    if (target < 0) {
        if (dl) memset(dl, 0, (size_t)V * sizeof(float));
        return 0.0f;
    }
    float lt = l[target];
    float m = lj_cpu_max(l, V);
    double sum;
    if (dl) {
        if (dl != l) memcpy(dl, l, (size_t)V * sizeof(float));
        for (int j = 0; j < V; j++) dl[j] = lj_cpu_expf(dl[j] - m); /* in place: vectorizes */
        sum = lj_cpu_sum_f64(dl, V);
        float k = (float)(1.0 / sum) * dloss;
        for (int j = 0; j < V; j++) dl[j] *= k;
        dl[target] -= dloss;
    } else {
        sum = exp_sum(l, V, m);
    }
    return (float)((double)m + log(sum) - (double)lt);
}

size_t lj_cpu_cross_entropy_fused_workspace_bytes(int N, int C, int V) {
    int rows = N < LJ_CPU_CE_CHUNK_ROWS ? N : LJ_CPU_CE_CHUNK_ROWS;
    return (size_t)rows * (size_t)V * sizeof(float);
}

void lj_cpu_cross_entropy_fused(float *losses, void *dx, void *dw, const void *x, const void *w,
                                const int32_t *targets, int N, int C, int V, float dloss, void *workspace) {
    const float *xf = x;
    float *logits = workspace, *dxf = dx;
    int grad = dx != NULL || dw != NULL;
    for (int r0 = 0; r0 < N; r0 += LJ_CPU_CE_CHUNK_ROWS) {
        int R = N - r0 < LJ_CPU_CE_CHUNK_ROWS ? N - r0 : LJ_CPU_CE_CHUNK_ROWS;
        const float *xc = xf + (int64_t)r0 * C;
        lj_cpu_sgemm(0, 1, R, V, C, 1.0f, xc, C, w, C, 0.0f, logits, V);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < R; r++) {
            float *lr = logits + (int64_t)r * V;
            losses[r0 + r] = ce_row(grad ? lr : NULL, lr, V, targets[r0 + r], dloss);
        }
        if (dx)
            lj_cpu_sgemm(0, 0, R, C, V, 1.0f, logits, V, w, C, 0.0f, dxf + (int64_t)r0 * C, C);
        if (dw) lj_cpu_sgemm(1, 0, V, C, R, 1.0f, logits, V, xc, C, 1.0f, dw, C);
    }
}

void lj_cpu_cross_entropy_forward_backward(float *losses, void *dlogits, const void *logits, const int32_t *targets,
                                           int N, int V, float dloss) {
    const float *l = logits;
    float *dl = dlogits;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        losses[n] = ce_row(dl ? dl + (int64_t)n * V : NULL, l + (int64_t)n * V, V, targets[n], dloss);
}

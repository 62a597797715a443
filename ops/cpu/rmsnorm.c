/* rmsnorm.c: the CPU backend's RMSNorm, plain and fused with the residual add, and its
 * backward. fp32, parallel over rows with OpenMP; contracts in ops/ops.h. */
#include "ops/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* One row: out = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps). The sum of squares is taken
 * in double (lj_cpu_dot_f64), and rstd rounded once to float (HF LlamaRMSNorm computes in fp32;
 * the double sum is the closer value). Shared by rmsnorm_forward and the fused residual op so
 * that both give the same bits. */
static inline float rmsnorm_row(float *out, const float *x, const float *w, int C, float eps) {
    double ss = lj_cpu_dot_f64(x, x, C);
    float rstd = (float)(1.0 / sqrt(ss / C + (double)eps));
    for (int i = 0; i < C; i++) out[i] = w[i] * (x[i] * rstd);
    return rstd;
}

void lj_cpu_rmsnorm_forward(void *out, float *rstd, const void *x, const void *w, int N, int C, float eps) {
    float *o = out;
    const float *xf = x;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) rstd[n] = rmsnorm_row(o + (int64_t)n * C, xf + (int64_t)n * C, w, C, eps);
}

/* dx_j += r*g_j - (r^3/C) * x_j * sum_i g_i x_i with g = w * dout (the derivative of
 * y = w * x * r, r = (mean(x^2) + eps)^(-1/2)); dw_i += sum_n dout_ni * x_ni * r_n. */
void lj_cpu_rmsnorm_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd,
                             int N, int C, lj_grad_mode dw_mode, void *workspace) {
    float *dxf = dx, *dwf = dw;
    const float *d = dout, *xf = x, *wf = w;
    if (dxf) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *dr = d + (int64_t)n * C, *xr = xf + (int64_t)n * C;
            float *o = dxf + (int64_t)n * C;
            double lane[LJ_CPU_LANES] = {0}, dot = 0.0;
            int i = 0;
            for (; i + LJ_CPU_LANES <= C; i += LJ_CPU_LANES)
                for (int k = 0; k < LJ_CPU_LANES; k++) lane[k] += (double)(wf[i + k] * dr[i + k]) * (double)xr[i + k];
            for (int k = 0; k < LJ_CPU_LANES; k++) dot += lane[k];
            for (; i < C; i++) dot += (double)(wf[i] * dr[i]) * (double)xr[i];
            float r = rstd[n];
            float k = (float)((double)r * r * r * dot / C);
            for (i = 0; i < C; i++) o[i] += r * (wf[i] * dr[i]) - k * xr[i];
        }
    }
    if (dwf) {
        const int overwrite = dw_mode == LJ_GRAD_OVERWRITE;
        int blocks = (C + LJ_CPU_COL_BLOCK - 1) / LJ_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static)
        for (int blk = 0; blk < blocks; blk++) {
            int c0 = blk * LJ_CPU_COL_BLOCK, c1 = c0 + LJ_CPU_COL_BLOCK < C ? c0 + LJ_CPU_COL_BLOCK : C;
            double acc[LJ_CPU_COL_BLOCK] = {0};
            for (int n = 0; n < N; n++) {
                const float *dr = d + (int64_t)n * C, *xr = xf + (int64_t)n * C;
                float r = rstd[n];
                for (int c = c0; c < c1; c++) acc[c - c0] += (double)(dr[c] * (xr[c] * r));
            }
            for (int c = c0; c < c1; c++) dwf[c] = (overwrite ? 0.0f : dwf[c]) + (float)acc[c - c0];
        }
    }
}

size_t lj_cpu_rmsnorm_backward_workspace_bytes(int N, int C) { return 0; }

void lj_cpu_residual_rmsnorm_forward(void *res_out, void *out, float *rstd, const void *res_in, const void *y,
                                     const void *w, int N, int C, float eps) {
    float *r = res_out, *o = out;
    const float *a = res_in, *b = y;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        int64_t off = (int64_t)n * C;
        for (int i = 0; i < C; i++) r[off + i] = a[off + i] + b[off + i];
        rstd[n] = rmsnorm_row(o + off, r + off, w, C, eps);
    }
}

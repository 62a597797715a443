/* qknorm.c: the CPU backend's Qwen ops: QK-norm (Qwen3's RMSNorm over head_dim on the q and
 * k heads of the QKV rows; plain and fused with RoPE, forward and backward) and the projection
 * bias (Qwen2's q/k/v biases: the add and the column-sum gradient). fp32, parallel over rows
 * (forward, dx) or over columns (weight and bias gradients, each column summed over the rows
 * in order), so the results do not depend on the thread count. Contracts in ops/ops.h. */
#include "ops/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* The v heads of every row, copied from src to dst ([N, QKV] rows; no-op in place). */
static void copy_v(float *dst, const float *src, int N, int nh, int nkv, int hd) {
    if (dst == src) return;
    const int64_t row = (int64_t)(nh + 2 * nkv) * hd, v0 = (int64_t)(nh + nkv) * hd;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(dst + n * row + v0, src + n * row + v0, (size_t)nkv * hd * sizeof(float));
}

void lj_cpu_qk_norm_forward(void *out, float *rstd, const void *x, const void *w, int N, int nh, int nkv, int hd,
                            float eps) {
    float *o = out;
    const float *xf = x, *wf = w;
    const int heads = nh + nkv;
    const int64_t row = (int64_t)(nh + 2 * nkv) * hd;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < heads; h++) {
            const float *xr = xf + n * row + (int64_t)h * hd, *wr = wf + (h < nh ? 0 : hd);
            float *orow = o + n * row + (int64_t)h * hd;
            /* as the model's RMSNorm (rmsnorm.c): the sum of squares in double, rstd
             * rounded once to float */
            const float r = (float)(1.0 / sqrt(lj_cpu_dot_f64(xr, xr, hd) / hd + (double)eps));
            for (int i = 0; i < hd; i++) orow[i] = wr[i] * (xr[i] * r);
            rstd[(int64_t)n * heads + h] = r;
        }
    }
    copy_v(o, xf, N, nh, nkv, hd);
}

size_t lj_cpu_qk_norm_backward_workspace_bytes(int N, int nh, int nkv, int hd) {
    (void)N, (void)nh, (void)nkv, (void)hd;
    return 0;
}

void lj_cpu_qk_norm_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd,
                             int N, int nh, int nkv, int hd, lj_grad_mode dw_mode, void *workspace) {
    (void)workspace;
    float *dxf = dx, *dwf = dw;
    const float *d = dout, *xf = x, *wf = w;
    const int heads = nh + nkv;
    const int64_t row = (int64_t)(nh + 2 * nkv) * hd;
    /* dw first: dx may overwrite dout. Column j < hd collects the q heads, j >= hd the k heads. */
    if (dwf) {
        const int overwrite = dw_mode == LJ_GRAD_OVERWRITE;
#pragma omp parallel for schedule(static)
        for (int j = 0; j < 2 * hd; j++) {
            const int i = j % hd, h0 = j < hd ? 0 : nh, h1 = j < hd ? nh : heads;
            double acc = 0.0;
            for (int n = 0; n < N; n++)
                for (int h = h0; h < h1; h++) {
                    const int64_t o = n * row + (int64_t)h * hd + i;
                    acc += (double)(d[o] * (xf[o] * rstd[(int64_t)n * heads + h]));
                }
            dwf[j] = (overwrite ? 0.0f : dwf[j]) + (float)acc;
        }
    }
    if (!dxf) return;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < heads; h++) {
            const int64_t o = n * row + (int64_t)h * hd;
            const float *dr = d + o, *xr = xf + o, *wr = wf + (h < nh ? 0 : hd);
            double dot = 0.0;
            for (int i = 0; i < hd; i++) dot += (double)(wr[i] * dr[i]) * (double)xr[i];
            const float r = rstd[(int64_t)n * heads + h];
            const float k = (float)((double)r * r * r * dot / hd);
            for (int i = 0; i < hd; i++) dxf[o + i] = r * (wr[i] * dr[i]) - k * xr[i]; /* reads dr[i] first */
        }
    }
    copy_v(dxf, d, N, nh, nkv, hd);
}

void lj_cpu_qk_norm_rope_forward(void *out, float *rstd, const void *x, const void *w, const float *cos,
                                 const float *sin, int B, int T, int nh, int nkv, int hd, float eps) {
    lj_cpu_qk_norm_forward(out, rstd, x, w, B * T, nh, nkv, hd, eps);
    lj_cpu_rope_forward(out, cos, sin, B, T, nh, nkv, hd);
}

void lj_cpu_qk_norm_rope_backward(void *dx, void *dw, const void *dout, const void *x, const void *w,
                                  const float *rstd, const float *cos, const float *sin, int B, int T, int nh, int nkv,
                                  int hd, lj_grad_mode dw_mode, void *workspace) {
    /* the RoPE backward runs in place, so without dx (weight gradient only) on a copy of dout */
    const size_t bytes = (size_t)B * T * (nh + 2 * nkv) * hd * sizeof(float);
    void *d = dx ? dx : lj_malloc(bytes);
    if (d != dout) memcpy(d, dout, bytes);
    lj_cpu_rope_backward(d, cos, sin, B, T, nh, nkv, hd);
    lj_cpu_qk_norm_backward(dx, dw, d, x, w, rstd, B * T, nh, nkv, hd, dw_mode, workspace);
    if (!dx) free(d);
}

void lj_cpu_bias_add(void *x, const void *b, int N, int C) {
    float *xf = x;
    const float *bf = b;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *r = xf + (int64_t)n * C;
        for (int c = 0; c < C; c++) r[c] += bf[c];
    }
}

/* Columns per task: each task sums its columns over all rows in order (double accumulators). */
#define LJ_CPU_BIAS_COLS 64

void lj_cpu_bias_backward(void *db, const void *dout, int N, int C, lj_grad_mode dw_mode, void *workspace) {
    (void)workspace;
    float *dbf = db;
    const float *d = dout;
    const int overwrite = dw_mode == LJ_GRAD_OVERWRITE;
    const int blocks = (C + LJ_CPU_BIAS_COLS - 1) / LJ_CPU_BIAS_COLS;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        const int c0 = blk * LJ_CPU_BIAS_COLS, c1 = c0 + LJ_CPU_BIAS_COLS < C ? c0 + LJ_CPU_BIAS_COLS : C;
        double acc[LJ_CPU_BIAS_COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float *r = d + (int64_t)n * C;
            for (int c = c0; c < c1; c++) acc[c - c0] += (double)r[c];
        }
        for (int c = c0; c < c1; c++) dbf[c] = (overwrite ? 0.0f : dbf[c]) + (float)acc[c - c0];
    }
}

size_t lj_cpu_bias_backward_workspace_bytes(int N, int C) {
    (void)N, (void)C;
    return 0;
}

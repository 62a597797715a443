/* cpu_elementwise.c: the CPU backend's row-wise ops: embedding lookup, RMSNorm (plain and
 * fused with the residual add), the residual add, RoPE in the QKV layout, and SwiGLU (fused
 * and unfused). All fp32, parallel over rows with OpenMP; contracts in ops/ops.h. */
#include "ops/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* Columns per task in the column-parallel reductions (embedding and RMSNorm weight
 * gradients): each task owns a column range and sums the rows in order, so the result is the
 * same for any thread count and needs no atomics. */
#define LJ_CPU_COL_BLOCK 64

/* ---- embedding ----------------------------------------------------------------------- */

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

/* ---- RMSNorm ------------------------------------------------------------------------- */

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

void lj_cpu_add(void *out, const void *a, const void *b, int64_t n) {
    float *o = out;
    const float *x = a, *y = b;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) o[i] = x[i] + y[i];
}

/* ---- RoPE ---------------------------------------------------------------------------- */

/* Rotates the q and k heads of every row: pairs (i, i + hd/2) by the angle of the row's
 * position (t, or pos[r] when pos is not NULL), x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin
 * (HF rotate_half). dir = -1 rotates by the negative angle, which is the transpose used by the
 * backward. */
static void rope_apply(float *qkv, const float *cos, const float *sin, const int32_t *pos, int B, int T, int nh,
                       int nkv, int hd, float dir) {
    int h2 = hd / 2, heads = nh + nkv, row = (nh + 2 * nkv) * hd;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < (int64_t)B * T; r++) {
        int t = pos ? pos[r] : (int)(r % T);
        const float *c = cos + (int64_t)t * h2, *s = sin + (int64_t)t * h2;
        for (int h = 0; h < heads; h++) {
            float *x = qkv + r * row + (int64_t)h * hd;
            for (int i = 0; i < h2; i++) {
                float x1 = x[i], x2 = x[i + h2], si = dir * s[i];
                x[i] = x1 * c[i] - x2 * si;
                x[i + h2] = x2 * c[i] + x1 * si;
            }
        }
    }
}

void lj_cpu_rope_forward(void *qkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd) {
    rope_apply(qkv, cos, sin, NULL, B, T, nh, nkv, hd, 1.0f);
}

void lj_cpu_rope_backward(void *dqkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd) {
    rope_apply(dqkv, cos, sin, NULL, B, T, nh, nkv, hd, -1.0f);
}

void lj_cpu_rope_forward_pos(void *qkv, const float *cos, const float *sin, const int32_t *pos, int B, int T, int nh,
                             int nkv, int hd) {
    rope_apply(qkv, cos, sin, pos, B, T, nh, nkv, hd, 1.0f);
}

void lj_cpu_rope_backward_pos(void *dqkv, const float *cos, const float *sin, const int32_t *pos, int B, int T,
                              int nh, int nkv, int hd) {
    rope_apply(dqkv, cos, sin, pos, B, T, nh, nkv, hd, -1.0f);
}

/* ---- SwiGLU -------------------------------------------------------------------------- */

/* silu(g) = g * sigmoid(g), written as g / (1 + exp(-g)) as PyTorch's CPU kernel does
 * (lj_cpu_expf, so that the loops vectorize). */
static inline float silu(float g) { return g / (1.0f + lj_cpu_expf(-g)); }

/* d silu / d g = s (1 + g (1 - s)), s = sigmoid(g). */
static inline float silu_grad(float g) {
    float s = 1.0f / (1.0f + lj_cpu_expf(-g));
    return s * (1.0f + g * (1.0f - s));
}

void lj_cpu_swiglu_forward(void *out, const void *gate_up, int N, int I) {
    float *o = out;
    const float *gu = gate_up;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (int64_t)n * 2 * I, *u = g + I;
        float *on = o + (int64_t)n * I;
        for (int i = 0; i < I; i++) on[i] = silu(g[i]) * u[i];
    }
}

void lj_cpu_swiglu_backward(void *dgate_up, const void *dout, const void *gate_up, int N, int I) {
    float *dgu = dgate_up;
    const float *gu = gate_up, *d = dout;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (int64_t)n * 2 * I, *u = g + I, *dn = d + (int64_t)n * I;
        float *dg = dgu + (int64_t)n * 2 * I, *du = dg + I;
        for (int i = 0; i < I; i++) {
            float gi = g[i], ui = u[i], di = dn[i]; /* read first: dgate_up may alias gate_up */
            float a = silu(gi), b = silu_grad(gi) * ui;
            du[i] = di * a;
            dg[i] = di * b;
        }
    }
}

void lj_cpu_swiglu_forward_unfused(void *out, void *tmp, const void *gate_up, int N, int I) {
    float *o = out, *tf = tmp;
    const float *gu = gate_up;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (int64_t)n * 2 * I;
        float *tn = tf + (int64_t)n * I;
        for (int i = 0; i < I; i++) tn[i] = silu(g[i]);
    }
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *u = gu + (int64_t)n * 2 * I + I, *tn = tf + (int64_t)n * I;
        float *on = o + (int64_t)n * I;
        for (int i = 0; i < I; i++) on[i] = tn[i] * u[i];
    }
}

void lj_cpu_swiglu_backward_unfused(void *dgate_up, void *tmp, const void *dout, const void *gate_up, int N, int I) {
    float *dgu = dgate_up, *tf = tmp;
    const float *gu = gate_up, *d = dout;
    /* pass 1: tmp = silu'(gate) * up */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (int64_t)n * 2 * I, *u = g + I;
        float *tn = tf + (int64_t)n * I;
        for (int i = 0; i < I; i++) tn[i] = silu_grad(g[i]) * u[i];
    }
    /* pass 2: dgate = dout * tmp, then tmp = silu(gate) (gate is read before dgate_up, which
     * may alias it, is written) */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (int64_t)n * 2 * I, *dn = d + (int64_t)n * I;
        float *tn = tf + (int64_t)n * I, *dg = dgu + (int64_t)n * 2 * I;
        for (int i = 0; i < I; i++) {
            float s = silu(g[i]);
            dg[i] = dn[i] * tn[i];
            tn[i] = s;
        }
    }
    /* pass 3: dup = dout * tmp */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *dn = d + (int64_t)n * I, *tn = tf + (int64_t)n * I;
        float *du = dgu + (int64_t)n * 2 * I + I;
        for (int i = 0; i < I; i++) du[i] = dn[i] * tn[i];
    }
}

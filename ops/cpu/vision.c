/* vision.c: the CPU backend's ops of the vision tower (Qwen3-VL): LayerNorm with bias, the
 * two GELU forms, the weighted embedding bag (the position grid's bilinear interpolation),
 * attention over variable-length segments (bidirectional or causal), row gather and scatter (the
 * image splice and DeepStack). fp32; contracts in ops/ops.h. */
#include "ops/cpu/vision.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "ops/cpu/cpu.h"

/* Columns per block of the column-sum loops (one block of double accumulators per thread). */
#define VISION_COL_BLOCK 64

/* ---- LayerNorm --------------------------------------------------------------------------- */

void lj_cpu_layernorm_forward(void *out, float *mean, float *rstd, const void *x, const void *w, const void *b, int N,
                              int C, float eps) {
    float *o = out;
    const float *xf = x, *wf = w, *bf = b;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *xr = xf + (int64_t)n * C;
        float *orow = o + (int64_t)n * C;
        double s = 0.0;
        for (int i = 0; i < C; i++) s += xr[i];
        const double mu = s / C;
        double v = 0.0;
        for (int i = 0; i < C; i++) v += ((double)xr[i] - mu) * ((double)xr[i] - mu);
        const float r = (float)(1.0 / sqrt(v / C + (double)eps)), m = (float)mu;
        mean[n] = m;
        rstd[n] = r;
        for (int i = 0; i < C; i++) orow[i] = (xr[i] - m) * r * wf[i] + bf[i];
    }
}

size_t lj_cpu_layernorm_backward_workspace_bytes(int N, int C) {
    (void)N;
    (void)C;
    return 0;
}

void lj_cpu_layernorm_backward(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w,
                               const float *mean, const float *rstd, int N, int C, lj_grad_mode dx_mode,
                               lj_grad_mode dw_mode, void *workspace) {
    (void)workspace;
    const float *d = dout, *xf = x, *wf = w;
    if (dx) {
        float *dxf = dx;
        const int acc = dx_mode == LJ_GRAD_ACCUMULATE;
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *dr = d + (int64_t)n * C, *xr = xf + (int64_t)n * C;
            float *o = dxf + (int64_t)n * C;
            const float m = mean[n], r = rstd[n];
            double sg = 0.0, sgx = 0.0;
            for (int i = 0; i < C; i++) {
                const double g = (double)wf[i] * dr[i];
                sg += g;
                sgx += g * (double)((xr[i] - m) * r);
            }
            const float mg = (float)(sg / C), mgx = (float)(sgx / C);
            for (int i = 0; i < C; i++) {
                const float v = r * (wf[i] * dr[i] - mg - (xr[i] - m) * r * mgx);
                o[i] = acc ? o[i] + v : v;
            }
        }
    }
    if (dw || db) {
        float *dwf = dw, *dbf = db;
        const int overwrite = dw_mode == LJ_GRAD_OVERWRITE;
        const int blocks = (C + VISION_COL_BLOCK - 1) / VISION_COL_BLOCK;
#pragma omp parallel for schedule(static)
        for (int blk = 0; blk < blocks; blk++) {
            const int c0 = blk * VISION_COL_BLOCK, c1 = c0 + VISION_COL_BLOCK < C ? c0 + VISION_COL_BLOCK : C;
            double aw[VISION_COL_BLOCK] = {0}, ab[VISION_COL_BLOCK] = {0};
            for (int n = 0; n < N; n++) {
                const float *dr = d + (int64_t)n * C, *xr = xf + (int64_t)n * C;
                const float m = mean[n], r = rstd[n];
                for (int c = c0; c < c1; c++) {
                    aw[c - c0] += (double)dr[c] * (double)((xr[c] - m) * r);
                    ab[c - c0] += dr[c];
                }
            }
            for (int c = c0; c < c1; c++) {
                if (dwf) dwf[c] = (overwrite ? 0.0f : dwf[c]) + (float)aw[c - c0];
                if (dbf) dbf[c] = (overwrite ? 0.0f : dbf[c]) + (float)ab[c - c0];
            }
        }
    }
}

/* ---- GELU --------------------------------------------------------------------------------- */

#define GELU_K0 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_K1 0.044715

static inline float gelu(float x, int tanh_form) {
    if (tanh_form) {
        const float u = (float)GELU_K0 * (x + (float)GELU_K1 * x * x * x);
        return 0.5f * x * (1.0f + tanhf(u));
    }
    return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2));
}

static inline float gelu_grad(float x, int tanh_form) {
    if (tanh_form) {
        const float u = (float)GELU_K0 * (x + (float)GELU_K1 * x * x * x);
        const float t = tanhf(u);
        const float du = (float)GELU_K0 * (1.0f + 3.0f * (float)GELU_K1 * x * x);
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    }
    /* Phi(x) + x phi(x) */
    return 0.5f * (1.0f + erff(x * (float)M_SQRT1_2)) + x * expf(-0.5f * x * x) * 0.3989422804014327f;
}

void lj_cpu_gelu_forward(void *out, const void *x, int64_t n, int tanh_form) {
    float *o = out;
    const float *xf = x;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) o[i] = gelu(xf[i], tanh_form);
}

void lj_cpu_gelu_backward(void *dx, const void *dout, const void *x, int64_t n, int tanh_form) {
    float *o = dx;
    const float *d = dout, *xf = x;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) o[i] = d[i] * gelu_grad(xf[i], tanh_form);
}

/* ---- weighted embedding bag --------------------------------------------------------------- */

void lj_cpu_embedding_bag_forward(void *out, const void *table, const int32_t *idx, const float *w, int N, int K,
                                  int C) {
    float *o = out;
    const float *t = table;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *orow = o + (int64_t)n * C;
        for (int k = 0; k < K; k++) {
            const float *row = t + (int64_t)idx[(int64_t)n * K + k] * C;
            const float wk = w[(int64_t)n * K + k];
            if (k == 0)
                for (int c = 0; c < C; c++) orow[c] = wk * row[c];
            else
                for (int c = 0; c < C; c++) orow[c] += wk * row[c];
        }
    }
}

void lj_cpu_embedding_bag_backward(void *dtable, const void *dout, const int32_t *idx, const float *w, int N, int K,
                                   int C) {
    float *dt = dtable;
    const float *d = dout;
    const int blocks = (C + VISION_COL_BLOCK - 1) / VISION_COL_BLOCK;
    /* each thread owns a block of columns and walks the rows in order: a fixed summation order */
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        const int c0 = blk * VISION_COL_BLOCK, c1 = c0 + VISION_COL_BLOCK < C ? c0 + VISION_COL_BLOCK : C;
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                float *row = dt + (int64_t)idx[(int64_t)n * K + k] * C;
                const float wk = w[(int64_t)n * K + k];
                for (int c = c0; c < c1; c++) row[c] += wk * d[(int64_t)n * C + c];
            }
    }
}

/* ---- attention over variable-length segments ------------------------------------------- */

/* Per thread: two rows of max_seqlen floats (probabilities, dP) and an [hd] double accumulator,
 * rounded up to 64 bytes. */
static size_t varlen_thread_bytes(int max_seqlen, int hd) {
    size_t b = 2 * (size_t)max_seqlen * sizeof(float) + (size_t)hd * sizeof(double);
    return (b + 63) / 64 * 64;
}

size_t lj_cpu_attention_varlen_workspace_bytes(int max_seqlen, int nh, int nkv, int hd) {
    (void)nh;
    (void)nkv;
    return (size_t)lj_cpu_num_threads() * varlen_thread_bytes(max_seqlen, hd);
}

static inline float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The longest segment, checking the cu_seqlens contract. */
static int varlen_max(const int32_t *cu, int nseg, int N) {
    LJ_ASSERT(cu[0] == 0 && cu[nseg] == N, "attention_varlen: cu_seqlens must run from 0 to N = %d", N);
    int mx = 0;
    for (int s = 0; s < nseg; s++) {
        LJ_ASSERT(cu[s + 1] >= cu[s], "attention_varlen: cu_seqlens must not decrease");
        if (cu[s + 1] - cu[s] > mx) mx = cu[s + 1] - cu[s];
    }
    return mx;
}

/* p[j - k0] = scale * q . k_j for the keys j of [k0, k1): the same scores in the forward and the
 * backward, which turns them into probabilities with the saved lse. */
static void scores(float *p, const float *q, const float *qkv, int row, int kcol, int k0, int k1, int hd,
                   float scale) {
    for (int j = k0; j < k1; j++) p[j - k0] = scale * dot(q, qkv + (int64_t)j * row + kcol, hd);
}

void lj_cpu_attention_varlen_forward(void *out, float *lse, const void *qkv_v, const int32_t *cu, int nseg,
                                     int max_seqlen, int N, int nh, int nkv, int hd, int causal, void *workspace) {
    (void)max_seqlen; /* the longest segment is taken from cu_seqlens (checking them) */
    const float *qkv = qkv_v;
    float *o = out;
    const int row = (nh + 2 * nkv) * hd, Q = nh * hd, group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    const int mx = varlen_max(cu, nseg, N);
    const int nt = lj_cpu_num_threads();
    const size_t per = varlen_thread_bytes(mx, hd);
#pragma omp parallel num_threads(nt)
    {
        unsigned char *ws = (unsigned char *)workspace + (size_t)omp_get_thread_num() * per;
        float *p = (float *)ws;
        double *acc = (double *)(ws + 2 * (size_t)mx * sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < nseg * nh; item++) {
            const int s = item / nh, h = item % nh;
            const int kcol = Q + (h / group) * hd, vcol = Q + nkv * hd + (h / group) * hd;
            for (int i = cu[s]; i < cu[s + 1]; i++) {
                const int k1 = causal ? i + 1 : cu[s + 1];
                const float *q = qkv + (int64_t)i * row + h * hd;
                scores(p, q, qkv, row, kcol, cu[s], k1, hd, scale);
                const int n = k1 - cu[s];
                float m = p[0];
                for (int j = 1; j < n; j++) m = p[j] > m ? p[j] : m;
                double l = 0.0;
                for (int d = 0; d < hd; d++) acc[d] = 0.0;
                for (int j = 0; j < n; j++) {
                    p[j] = expf(p[j] - m);
                    l += p[j];
                    const float *v = qkv + (int64_t)(cu[s] + j) * row + vcol;
                    for (int d = 0; d < hd; d++) acc[d] += (double)p[j] * v[d];
                }
                float *orow = o + (int64_t)i * Q + h * hd;
                for (int d = 0; d < hd; d++) orow[d] = (float)(acc[d] / l);
                lse[(int64_t)h * N + i] = m + (float)log(l);
            }
        }
    }
}

void lj_cpu_attention_varlen_backward(void *dqkv_v, const void *dout_v, const void *qkv_v, const void *out_v,
                                      const float *lse, const int32_t *cu, int nseg, int max_seqlen, int N, int nh,
                                      int nkv, int hd, int causal, void *workspace) {
    (void)max_seqlen; /* the longest segment is taken from cu_seqlens (checking them) */
    const float *qkv = qkv_v, *dout = dout_v, *out = out_v;
    float *dqkv = dqkv_v;
    const int row = (nh + 2 * nkv) * hd, Q = nh * hd, group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    const int mx = varlen_max(cu, nseg, N);
    const int nt = lj_cpu_num_threads();
    const size_t per = varlen_thread_bytes(mx, hd);
#pragma omp parallel num_threads(nt)
    {
        unsigned char *ws = (unsigned char *)workspace + (size_t)omp_get_thread_num() * per;
        float *p = (float *)ws, *dp = p + mx;
        double *acc = (double *)(ws + 2 * (size_t)mx * sizeof(float));
        /* one (segment, kv head) per item: its dk, dv rows belong to it alone */
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < nseg * nkv; item++) {
            const int s = item / nkv, g = item % nkv;
            const int kcol = Q + g * hd, vcol = Q + nkv * hd + g * hd;
            for (int j = cu[s]; j < cu[s + 1]; j++) {
                memset(dqkv + (int64_t)j * row + kcol, 0, (size_t)hd * sizeof(float));
                memset(dqkv + (int64_t)j * row + vcol, 0, (size_t)hd * sizeof(float));
            }
            for (int h = g * group; h < (g + 1) * group; h++)
                for (int i = cu[s]; i < cu[s + 1]; i++) {
                    const int k1 = causal ? i + 1 : cu[s + 1], n = k1 - cu[s];
                    const float *q = qkv + (int64_t)i * row + h * hd;
                    const float *dor = dout + (int64_t)i * Q + h * hd, *orow = out + (int64_t)i * Q + h * hd;
                    scores(p, q, qkv, row, kcol, cu[s], k1, hd, scale);
                    const float L = lse[(int64_t)h * N + i];
                    const float D = dot(dor, orow, hd);
                    for (int d = 0; d < hd; d++) acc[d] = 0.0;
                    for (int j = 0; j < n; j++) {
                        const int64_t kj = (int64_t)(cu[s] + j) * row;
                        p[j] = expf(p[j] - L);
                        dp[j] = dot(dor, qkv + kj + vcol, hd);
                        const float ds = p[j] * (dp[j] - D) * scale;
                        const float *k = qkv + kj + kcol;
                        float *dk = dqkv + kj + kcol, *dv = dqkv + kj + vcol;
                        for (int d = 0; d < hd; d++) {
                            acc[d] += (double)ds * k[d];
                            dk[d] += ds * q[d];
                            dv[d] += p[j] * dor[d];
                        }
                    }
                    float *dq = dqkv + (int64_t)i * row + h * hd;
                    for (int d = 0; d < hd; d++) dq[d] = (float)acc[d];
                }
        }
    }
}

/* ---- rows --------------------------------------------------------------------------------- */

void lj_cpu_rows_gather(void *out, const void *x, const int32_t *idx, int M, int C) {
    for (int i = 0; i < M; i++)
        memcpy((float *)out + (int64_t)i * C, (const float *)x + (int64_t)idx[i] * C, (size_t)C * sizeof(float));
}

void lj_cpu_rows_scatter(void *x, const void *src, const int32_t *idx, int M, int C, lj_grad_mode mode) {
    for (int i = 0; i < M; i++) {
        float *dst = (float *)x + (int64_t)idx[i] * C;
        const float *s = src ? (const float *)src + (int64_t)i * C : NULL;
        if (mode == LJ_GRAD_ACCUMULATE) {
            LJ_ASSERT(s, "rows_scatter: accumulate needs a source");
            for (int c = 0; c < C; c++) dst[c] += s[c];
        } else if (s) {
            memcpy(dst, s, (size_t)C * sizeof(float));
        } else {
            memset(dst, 0, (size_t)C * sizeof(float));
        }
    }
}

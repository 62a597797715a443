/* attention.c: the CPU backend's causal GQA attention (also within documents): forward (saving the log-sum-exp),
 * backward (recomputing the probabilities from it), the planned workspace, and decoding
 * against a KV cache. fp32, OpenMP over (batch, head). Contracts in ops/ops.h. */
#include "ops/cpu/cpu.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Per-thread workspace: K^T and V^T of one kv head ([hd, T] each, so the score loops run
 * over contiguous keys) and two rows of T floats (scores / probabilities, dP), rounded up to
 * 64 bytes so that threads never share a cache line. */
static size_t attention_thread_floats(int T, int hd) {
    size_t f = 2 * (size_t)hd * T + 2 * (size_t)T;
    return (f + 15) / 16 * 16;
}

size_t lj_cpu_attention_workspace_bytes(int B, int T, int nh, int nkv, int hd) {
    return (size_t)lj_cpu_num_threads() * attention_thread_floats(T, hd) * sizeof(float);
}

/* xt[d*T + j] = the [hd] slice at column `col` of row (b, j) of qkv, for j < T. */
static void gather_transposed(float *xt, const float *qkv, int b, int T, int row, int col, int hd) {
    for (int j = 0; j < T; j++) {
        const float *src = qkv + ((int64_t)b * T + j) * row + col;
        for (int d = 0; d < hd; d++) xt[(int64_t)d * T + j] = src[d];
    }
}

/* y[d] += a x[d] (y and x never overlap: distinct heads or rows). */
static inline void axpy(float *restrict y, float a, const float *restrict x, int n) {
    for (int d = 0; d < n; d++) y[d] += a * x[d];
}

/* s[j] = (q . k_j) * scale for j < n, with kt = K^T [hd, T]. Forward and backward share it so
 * that the backward recomputes the forward's scores bit for bit. */
static inline void scores_row(float *s, const float *q, const float *kt, int T, int n, int hd, float scale) {
    for (int j = 0; j < n; j++) s[j] = 0.0f;
    for (int d = 0; d < hd; d++) {
        float qd = q[d];
        const float *k = kt + (int64_t)d * T;
        for (int j = 0; j < n; j++) s[j] += qd * k[j];
    }
    for (int j = 0; j < n; j++) s[j] *= scale;
}

/* Query t of sequence b attends to keys j0..t, j0 = doc_start[b*T + t] (0 without doc_start). */
static void attention_forward(float *o, float *lse, const float *x, const int32_t *doc_start, int B, int T, int nh,
                              int nkv, int hd, float *ws) {
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV, rep = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t per_thread = attention_thread_floats(T, hd);
    const int nt = lj_cpu_num_threads();
#pragma omp parallel num_threads(nt)
    {
        float *kt = ws + (size_t)omp_get_thread_num() * per_thread;
        float *s = kt + 2 * (size_t)hd * T;
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * nh; bh++) {
            int b = bh / nh, h = bh % nh, g = h / rep;
            gather_transposed(kt, x, b, T, row, Q + g * hd, hd);
            for (int t = 0; t < T; t++) {
                const float *q = x + ((int64_t)b * T + t) * row + (int64_t)h * hd;
                const int j0 = doc_start ? doc_start[(int64_t)b * T + t] : 0, n = t + 1 - j0;
                scores_row(s, q, kt + j0, T, n, hd, scale);
                float m = lj_cpu_max(s, n);
                for (int j = 0; j < n; j++) s[j] = lj_cpu_expf(s[j] - m);
                double sum = lj_cpu_sum_f64(s, n);
                lse[((int64_t)b * nh + h) * T + t] = (float)(m + log(sum));
                float sumf = (float)sum;
                float *od = o + ((int64_t)b * T + t) * Q + (int64_t)h * hd;
                for (int d = 0; d < hd; d++) od[d] = 0.0f;
                for (int j = 0; j < n; j++)
                    axpy(od, s[j] / sumf, x + ((int64_t)b * T + j0 + j) * row + Q + KV + (int64_t)g * hd, hd);
            }
        }
    }
}

void lj_cpu_attention_forward(void *out, float *lse, const void *qkv, int B, int T, int nh, int nkv, int hd,
                              void *workspace) {
    attention_forward(out, lse, qkv, NULL, B, T, nh, nkv, hd, workspace);
}

void lj_cpu_attention_forward_docs(void *out, float *lse, const void *qkv, const int32_t *doc_start, int B, int T,
                                   int nh, int nkv, int hd, void *workspace) {
    attention_forward(out, lse, qkv, doc_start, B, T, nh, nkv, hd, workspace);
}

/* With P = exp(S - lse) recomputed, D_t = dO_t . O_t:
 *   dV_j += sum_t P_tj dO_t;  dP_tj = dO_t . V_j;  dS_tj = P_tj (dP_tj - D_t);
 *   dQ_t = scale sum_j dS_tj K_j;  dK_j += scale sum_t dS_tj Q_t.
 * (FlashAttention-2, Dao 2023, Algorithm 2, without the tiling.) One task per (batch, kv
 * head) owns the dK/dV rows of that head and the dQ rows of its query heads: no races. Keys
 * j0..t of query t, as in the forward. */
static void attention_backward(float *dx, const float *dO_all, const float *x, const float *O_all, const float *lse,
                               const int32_t *doc_start, int B, int T, int nh, int nkv, int hd, float *ws) {
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV, rep = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t per_thread = attention_thread_floats(T, hd);
    const int nt = lj_cpu_num_threads();
#pragma omp parallel num_threads(nt)
    {
        float *kt = ws + (size_t)omp_get_thread_num() * per_thread;
        float *vt = kt + (size_t)hd * T;
        float *p = vt + (size_t)hd * T, *dp = p + T;
#pragma omp for schedule(static)
        for (int bg = 0; bg < B * nkv; bg++) {
            int b = bg / nkv, g = bg % nkv;
            const int kcol = Q + g * hd, vcol = Q + KV + g * hd;
            gather_transposed(kt, x, b, T, row, kcol, hd);
            gather_transposed(vt, x, b, T, row, vcol, hd);
            for (int j = 0; j < T; j++) {
                float *r = dx + ((int64_t)b * T + j) * row;
                memset(r + kcol, 0, (size_t)hd * sizeof(float));
                memset(r + vcol, 0, (size_t)hd * sizeof(float));
            }
            for (int h = g * rep; h < (g + 1) * rep; h++) {
                for (int t = 0; t < T; t++) {
                    int64_t rt = (int64_t)b * T + t;
                    const float *q = x + rt * row + (int64_t)h * hd;
                    const float *dO = dO_all + rt * Q + (int64_t)h * hd, *O = O_all + rt * Q + (int64_t)h * hd;
                    float L = lse[((int64_t)b * nh + h) * T + t];
                    const int j0 = doc_start ? doc_start[rt] : 0, n = t + 1 - j0;
                    double Dd = 0.0;
                    for (int d = 0; d < hd; d++) Dd += (double)dO[d] * O[d];
                    float D = (float)Dd;
                    scores_row(p, q, kt + j0, T, n, hd, scale);
                    for (int j = 0; j < n; j++) p[j] = lj_cpu_expf(p[j] - L);
                    for (int j = 0; j < n; j++) dp[j] = 0.0f;
                    for (int d = 0; d < hd; d++) {
                        float od = dO[d];
                        const float *v = vt + (int64_t)d * T + j0;
                        for (int j = 0; j < n; j++) dp[j] += od * v[j];
                    }
                    /* dp becomes scale * dS */
                    for (int j = 0; j < n; j++) dp[j] = scale * (p[j] * (dp[j] - D));
                    float *dq = dx + rt * row + (int64_t)h * hd;
                    for (int d = 0; d < hd; d++) dq[d] = 0.0f;
                    for (int j = 0; j < n; j++) {
                        int64_t rj = (int64_t)b * T + j0 + j;
                        const float *k = x + rj * row + kcol;
                        float *dk = dx + rj * row + kcol, *dv = dx + rj * row + vcol;
                        axpy(dq, dp[j], k, hd);
                        axpy(dk, dp[j], q, hd);
                        axpy(dv, p[j], dO, hd);
                    }
                }
            }
        }
    }
}

void lj_cpu_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse, int B,
                               int T, int nh, int nkv, int hd, void *workspace) {
    attention_backward(dqkv, dout, qkv, out, lse, NULL, B, T, nh, nkv, hd, workspace);
}

void lj_cpu_attention_backward_docs(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                    const int32_t *doc_start, int B, int T, int nh, int nkv, int hd, void *workspace) {
    attention_backward(dqkv, dout, qkv, out, lse, doc_start, B, T, nh, nkv, hd, workspace);
}

/* Online softmax over the cache rows (lj_cpu_attend_row): no workspace needed. */
void lj_cpu_attention_decode(void *out, void *kv_cache, const void *qkv, int p0, int Tq, int nh, int nkv, int hd) {
    LJ_ASSERT(hd <= LJ_CPU_MAX_HEAD_DIM, "head_dim %d above the CPU limit %d", hd, LJ_CPU_MAX_HEAD_DIM);
    const float *x = qkv;
    float *o = out, *cache = kv_cache;
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV, rep = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int i = 0; i < Tq; i++)
        memcpy(cache + (int64_t)(p0 + i) * 2 * KV, x + (int64_t)i * row + Q, 2 * (size_t)KV * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int ih = 0; ih < Tq * nh; ih++) {
        const int i = ih / nh, h = ih % nh;
        lj_cpu_attend_row(o + (int64_t)i * Q + (int64_t)h * hd, x + (int64_t)i * row + (int64_t)h * hd, cache, NULL, 1,
                          p0 + i + 1, KV, h / rep, hd, scale);
    }
}

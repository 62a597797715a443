/* paged.c: the CPU backend's ops over the paged KV cache of serving: the write of a step's
 * keys and values into their slots, attention of a batch of sequences over their block
 * tables (an fp32 cache, or one of E4M3 codes with per-tensor scales: the FP8 emulation of
 * base/fp8.h), and the row gather before the lm_head. fp32, OpenMP over (row, head). Contracts
 * in ops/ops.h. */
#include "ops/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* One key of an online softmax (Milakov & Gimelshein 2018): rescales the running sum l and the
 * weighted values acc[hd] when score s is a new maximum m, and returns s's weight e^(s - m), added
 * to l; the caller adds e * v to acc. */
static inline float online_softmax_step(float s, float *m, float *l, float *acc, int hd) {
    if (s > *m) {
        const float c = expf(*m - s); /* 0 on the first key */
        *l *= c;
        for (int d = 0; d < hd; d++) acc[d] *= c;
        *m = s;
    }
    const float e = expf(s - *m);
    *l += e;
    return e;
}

void lj_cpu_paged_kv_write(void *kv_cache, const void *qkv, const int32_t *slots, int N, int nh, int nkv, int hd) {
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV;
    float *cache = kv_cache;
    const float *x = qkv;
    for (int n = 0; n < N; n++)
        if (slots[n] >= 0)
            memcpy(cache + (int64_t)slots[n] * 2 * KV, x + (int64_t)n * row + Q, 2 * (size_t)KV * sizeof(float));
}

void lj_cpu_attend_row(float *od, const float *q, const float *cache, const int32_t *table, int block_size, int n,
                       int KV, int g, int hd, float scale) {
    float acc[LJ_CPU_MAX_HEAD_DIM];
    for (int d = 0; d < hd; d++) acc[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j < n; j++) {
        const int64_t slot = table ? (int64_t)table[j / block_size] * block_size + j % block_size : j;
        const float *k = cache + slot * 2 * KV + (int64_t)g * hd, *v = k + KV;
        float s = 0.0f;
        for (int d = 0; d < hd; d++) s += q[d] * k[d];
        s *= scale;
        const float e = online_softmax_step(s, &m, &l, acc, hd);
        for (int d = 0; d < hd; d++) acc[d] += e * v[d];
    }
    for (int d = 0; d < hd; d++) od[d] = acc[d] / l;
}

void lj_cpu_paged_attention(void *out, const void *qkv, const void *kv_cache, const int32_t *block_tables,
                            const int32_t *seq, const int32_t *pos, int N, int max_blocks, int block_size, int nh,
                            int nkv, int hd) {
    LJ_ASSERT(hd <= LJ_CPU_MAX_HEAD_DIM, "head_dim %d above the CPU limit %d", hd, LJ_CPU_MAX_HEAD_DIM);
    const float *x = qkv;
    float *o = out;
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV, rep = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 4)
    for (int ih = 0; ih < N * nh; ih++) {
        const int i = ih / nh, h = ih % nh;
        if (seq[i] < 0) continue; /* computed by the caller (ops.h) */
        lj_cpu_attend_row(o + (int64_t)i * Q + (int64_t)h * hd, x + (int64_t)i * row + (int64_t)h * hd, kv_cache,
                          block_tables + (int64_t)seq[i] * max_blocks, block_size, pos[i] + 1, KV, h / rep, hd, scale);
    }
}

/* ---- the FP8 cache (ops.h paged_kv_write_fp8, paged_attention_fp8) ---- */

void lj_cpu_paged_kv_write_fp8(void *kv_cache, const void *qkv, const int32_t *slots, int N, int nh, int nkv, int hd,
                               const float *k_scale, const float *v_scale) {
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV;
    const float inv_k = 1.0f / k_scale[0], inv_v = 1.0f / v_scale[0];
    uint8_t *cache = kv_cache;
    const float *x = qkv;
#pragma omp parallel for schedule(static) if (N > 64)
    for (int n = 0; n < N; n++) {
        if (slots[n] < 0) continue;
        uint8_t *dst = cache + (int64_t)slots[n] * 2 * KV;
        const float *src = x + (int64_t)n * row + Q;
        for (int c = 0; c < 2 * KV; c++) dst[c] = lj_fp8_from_f32(src[c] * (c < KV ? inv_k : inv_v), LJ_FP8_E4M3);
    }
}

void lj_cpu_paged_kv_round_fp8(void *qkv, int N, int nh, int nkv, int hd, const float *k_scale, const float *v_scale) {
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV;
    const float inv_k = 1.0f / k_scale[0], inv_v = 1.0f / v_scale[0];
    float *x = qkv;
#pragma omp parallel for schedule(static) if (N > 64)
    for (int n = 0; n < N; n++) {
        float *kv = x + (int64_t)n * row + Q;
        for (int c = 0; c < 2 * KV; c++) {
            const uint8_t code = lj_fp8_from_f32(kv[c] * (c < KV ? inv_k : inv_v), LJ_FP8_E4M3);
            kv[c] = lj_fp8_to_f32(code, LJ_FP8_E4M3) * (c < KV ? k_scale[0] : v_scale[0]);
        }
    }
}

/* lj_cpu_attend_row over an FP8 cache: each key and value element decoded (lut: the 256 E4M3
 * values) and multiplied by its scale as it is read, then the same online softmax. */
static void attend_row_fp8(float *od, const float *q, const uint8_t *cache, const int32_t *table, int block_size,
                           int n, int KV, int g, int hd, float scale, const float *lut, float ks, float vs) {
    float acc[LJ_CPU_MAX_HEAD_DIM];
    for (int d = 0; d < hd; d++) acc[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j < n; j++) {
        const int64_t slot = (int64_t)table[j / block_size] * block_size + j % block_size;
        const uint8_t *k = cache + slot * 2 * KV + (int64_t)g * hd, *v = k + KV;
        float s = 0.0f;
        for (int d = 0; d < hd; d++) s += q[d] * (lut[k[d]] * ks);
        s *= scale;
        const float e = online_softmax_step(s, &m, &l, acc, hd);
        for (int d = 0; d < hd; d++) acc[d] += e * (lut[v[d]] * vs);
    }
    for (int d = 0; d < hd; d++) od[d] = acc[d] / l;
}

void lj_cpu_paged_attention_fp8(void *out, const void *qkv, const void *kv_cache, const int32_t *block_tables,
                                const int32_t *seq, const int32_t *pos, int N, int max_blocks, int block_size,
                                int nh, int nkv, int hd, const float *k_scale, const float *v_scale) {
    LJ_ASSERT(hd <= LJ_CPU_MAX_HEAD_DIM, "head_dim %d above the CPU limit %d", hd, LJ_CPU_MAX_HEAD_DIM);
    float lut[256];
    for (int i = 0; i < 256; i++) lut[i] = lj_fp8_to_f32((uint8_t)i, LJ_FP8_E4M3);
    const float *x = qkv;
    float *o = out;
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV, rep = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd), ks = k_scale[0], vs = v_scale[0];
#pragma omp parallel for schedule(dynamic, 4)
    for (int ih = 0; ih < N * nh; ih++) {
        const int i = ih / nh, h = ih % nh;
        if (seq[i] < 0) continue;
        attend_row_fp8(o + (int64_t)i * Q + (int64_t)h * hd, x + (int64_t)i * row + (int64_t)h * hd, kv_cache,
                       block_tables + (int64_t)seq[i] * max_blocks, block_size, pos[i] + 1, KV, h / rep, hd, scale,
                       lut, ks, vs);
    }
}

void lj_cpu_gather_rows(void *out, const void *x, const int32_t *rows, int M, int C) {
    for (int m = 0; m < M; m++)
        memcpy((float *)out + (int64_t)m * C, (const float *)x + (int64_t)rows[m] * C, (size_t)C * sizeof(float));
}

void lj_cpu_argmax_rows(int32_t *out, const void *x, int M, int V) {
    for (int m = 0; m < M; m++) {
        const float *r = (const float *)x + (int64_t)m * V;
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (r[i] > r[best]) best = i;
        out[m] = best;
    }
}

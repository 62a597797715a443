/* cases_paged_fp8.c: serving's FP8 KV cache (ops.h paged_kv_write_fp8 and paged_attention_fp8,
 * ops/cpu/paged.c and ops/cuda/paged.cu), written once for every backend (case.h). S sequences
 * whose blocks are handed out in a scrambled order write every position's keys and values
 * (sequence s has (s + 1) T + s of them) into a cache poisoned with NaN codes (0xff); then every
 * row attends (a chunked prefill) or only the last of each sequence (a decode batch).
 *   the codes: exactly lj_fp8_from_f32(x * (1 / scale)) in each slot, the rest untouched (on
 *     CUDA: the CPU's codes, bit for bit), one key element saturating at 448;
 *   the rounding: every decoded element that is neither saturated nor subnormal within 2^-4
 *     relative of its value; paged_kv_round_fp8 writes those decoded values into qkv, bit for bit;
 *   the attention: against a double reference over the decoded cache (code * scale), and
 *     within 0.1 rel L2 of the unquantized paged_attention over the same rows.
 * d = {S, T, nh, nkv, hd, decode}, param = k_scale (v_scale = k_scale / 2). Rows:
 * "paged_attention_fp8" in op_cases.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/case.h"

#define BS 16 /* serving's block size */

static void paged_fp8_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int S = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], decode = c->d[5];
    const float ks = (float)c->param, vs = ks * 0.5f;
    lj_case_shape(x, "S=%d T=%d nh=%d nkv=%d hd=%d %s k_scale %g", S, T, nh, nkv, hd, decode ? "decode" : "prefill",
                  (double)ks);
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV, rep = nh / nkv;
    int N = 0, MB = 0;
    for (int s = 0; s < S; s++) {
        const int L = (s + 1) * T + s;
        N += L;
        MB = (L + BS - 1) / BS > MB ? (L + BS - 1) / BS : MB;
    }
    const int nblocks = S * MB + 5;
    /* i32 arrays in float buffers of the harness (freed after the case) */
    int32_t *tables = (int32_t *)lj_case_zeros(x, (int64_t)S * MB), *seq = (int32_t *)lj_case_zeros(x, N);
    int32_t *pos = (int32_t *)lj_case_zeros(x, N), *slots = (int32_t *)lj_case_zeros(x, N);
    for (int i = 0; i < S * MB; i++) tables[i] = (int32_t)(nblocks - 1 - (i * 3) % nblocks);
    for (int i = 0; i < S * MB; i++)
        for (int j = 0; j < i; j++)
            if (tables[i] == tables[j]) tables[i] = (tables[i] + 1) % nblocks, j = -1;
    for (int s = 0, n = 0; s < S; s++)
        for (int p = 0; p < (s + 1) * T + s; p++, n++)
            seq[n] = s, pos[n] = p, slots[n] = tables[s * MB + p / BS] * BS + p % BS;
    float *qkv = lj_case_rand(x, (int64_t)N * row, 1.0f);
    qkv[Q] = 1000.0f * ks; /* beyond 448 k_scale: saturates */
    void *d_qkv = lj_case_upload(x, qkv, (int64_t)N * row, LJ_CASE_ACT);
    void *d_tables = lj_case_upload(x, tables, (int64_t)S * MB, LJ_CASE_I32);
    void *d_slots = lj_case_upload(x, slots, N, LJ_CASE_I32);
    void *d_ks = lj_case_upload(x, &ks, 1, LJ_CASE_F32), *d_vs = lj_case_upload(x, &vs, 1, LJ_CASE_F32);
    const int64_t cache_n = (int64_t)nblocks * BS * 2 * KV;
    void *d_cache = lj_case_scratch(x, (size_t)cache_n);
    lj_harness_dpoison(ops, d_cache, (size_t)cache_n);
    ops->paged_kv_write_fp8(d_cache, d_qkv, d_slots, N, nh, nkv, hd, d_ks, d_vs);

    /* the codes, as numbers 0..255 */
    uint8_t *codes = (uint8_t *)lj_case_zeros(x, cache_n / 4 + 1);
    ops->download(codes, d_cache, (size_t)cache_n);
    float *cf = lj_case_zeros(x, cache_n);
    for (int64_t i = 0; i < cache_n; i++) cf[i] = codes[i];
    double *want = NULL;
    if (lj_case_reference(x)) {
        want = lj_case_dzeros(x, cache_n);
        for (int64_t i = 0; i < cache_n; i++) want[i] = 0xff;
        const float inv_k = 1.0f / ks, inv_v = 1.0f / vs;
        for (int n = 0; n < N; n++)
            for (int e = 0; e < 2 * KV; e++)
                want[(int64_t)slots[n] * 2 * KV + e] =
                    lj_fp8_from_f32(qkv[(int64_t)n * row + Q + e] * (e < KV ? inv_k : inv_v), LJ_FP8_E4M3);
    }
    lj_case_output(x, "paged_kv_write_fp8 codes", lj_case_upload(x, cf, cache_n, LJ_CASE_F32), cache_n, LJ_CASE_F32,
                   want, LJ_CASE_TOL_EXACT);
    /* the decoded cache against the values; a double copy for the reference */
    double *kvd = lj_case_dzeros(x, cache_n);
    int rounding = 1, saturated = 0;
    for (int n = 0; n < N; n++) {
        for (int e = 0; e < 2 * KV; e++) {
            const int64_t at = (int64_t)slots[n] * 2 * KV + e;
            const double sc = e < KV ? ks : vs, v = qkv[(int64_t)n * row + Q + e];
            kvd[at] = (double)lj_fp8_to_f32(codes[at], LJ_FP8_E4M3) * sc;
            const double a = fabs(v / sc);
            if (a > 448) saturated += fabs(kvd[at]) == 448 * sc;
            else if (a >= 0x1p-6) rounding &= fabs(kvd[at] - v) <= 0x1p-4 * 1.0001 * fabs(v); /* + the f32 x / scale */
        }
    }
    lj_case_true(x, "paged_kv_write_fp8 rounding", rounding && saturated == 1,
                 "codes within 2^-4 relative of the values, the one value beyond 448 saturated");

    /* paged_kv_round_fp8: qkv's k and v parts become the cache's decoded values, q untouched */
    void *d_round = lj_case_upload(x, qkv, (int64_t)N * row, LJ_CASE_ACT);
    ops->paged_kv_round_fp8(d_round, N, nh, nkv, hd, d_ks, d_vs);
    double *want_round = NULL;
    if (lj_case_reference(x)) {
        want_round = lj_case_dzeros(x, (int64_t)N * row);
        for (int n = 0; n < N; n++)
            for (int e = 0; e < row; e++)
                want_round[(int64_t)n * row + e] =
                    e < Q ? qkv[(int64_t)n * row + e] : kvd[(int64_t)slots[n] * 2 * KV + e - Q];
    }
    lj_case_output(x, "paged_kv_round_fp8", d_round, (int64_t)N * row, LJ_CASE_ACT, want_round, LJ_CASE_TOL_BITS);

    /* the query rows: all of them, or the last of each sequence */
    int M = 0;
    int32_t *rows = (int32_t *)lj_case_zeros(x, N);
    for (int i = 0; i < N; i++)
        if (!decode || i == N - 1 || seq[i + 1] != seq[i]) rows[M++] = i;
    float *q_rows = lj_case_zeros(x, (int64_t)M * row);
    int32_t *seq_r = (int32_t *)lj_case_zeros(x, M), *pos_r = (int32_t *)lj_case_zeros(x, M);
    for (int i = 0; i < M; i++) {
        memcpy(q_rows + (int64_t)i * row, qkv + (int64_t)rows[i] * row, (size_t)row * sizeof(float));
        seq_r[i] = seq[rows[i]], pos_r[i] = pos[rows[i]];
    }
    void *d_q = lj_case_upload(x, q_rows, (int64_t)M * row, LJ_CASE_ACT);
    void *d_seq = lj_case_upload(x, seq_r, M, LJ_CASE_I32), *d_pos = lj_case_upload(x, pos_r, M, LJ_CASE_I32);
    void *d_out = lj_case_alloc(x, (int64_t)M * Q, LJ_CASE_ACT);
    ops->paged_attention_fp8(d_out, d_q, d_cache, d_tables, d_seq, d_pos, M, MB, BS, nh, nkv, hd, d_ks, d_vs);
    double *ref = NULL;
    if (lj_case_reference(x)) { /* softmax(q k^T / sqrt(hd)) v over the decoded keys and values, in double */
        ref = lj_case_dzeros(x, (int64_t)M * Q);
        double *p = lj_case_dzeros(x, (int64_t)MB * BS);
        for (int i = 0; i < M; i++) {
            const int32_t *tb = tables + (int64_t)seq_r[i] * MB;
            for (int h = 0; h < nh; h++) {
                const float *q = q_rows + (int64_t)i * row + (int64_t)h * hd;
                const int g = h / rep, n = pos_r[i] + 1;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) {
                    const double *k = kvd + ((int64_t)tb[j / BS] * BS + j % BS) * 2 * KV + (int64_t)g * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += q[d] * k[d];
                    p[j] = s / sqrt((double)hd);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j < n; j++) sum += p[j] = exp(p[j] - mx);
                double *o = ref + (int64_t)i * Q + (int64_t)h * hd;
                for (int j = 0; j < n; j++) {
                    const double *v = kvd + ((int64_t)tb[j / BS] * BS + j % BS) * 2 * KV + KV + (int64_t)g * hd;
                    for (int d = 0; d < hd; d++) o[d] += p[j] / sum * v[d];
                }
            }
        }
    }
    lj_case_output(x, "paged_attention_fp8", d_out, (int64_t)M * Q, LJ_CASE_ACT, ref, LJ_CASE_TOL_OUT);
    /* the unquantized cache and attention over the same rows: the FP8 error */
    const int64_t plain_n = (int64_t)nblocks * BS * 2 * KV;
    void *d_plain = lj_case_alloc(x, plain_n, LJ_CASE_ACT), *d_pout = lj_case_alloc(x, (int64_t)M * Q, LJ_CASE_ACT);
    ops->paged_kv_write(d_plain, d_qkv, d_slots, N, nh, nkv, hd);
    ops->paged_attention(d_pout, d_q, d_plain, d_tables, d_seq, d_pos, M, MB, BS, nh, nkv, hd);
    const float *got = lj_case_download(x, d_out, (int64_t)M * Q, LJ_CASE_ACT);
    const float *plain = lj_case_download(x, d_pout, (int64_t)M * Q, LJ_CASE_ACT);
    double num = 0, den = 0;
    for (int64_t i = 0; i < (int64_t)M * Q; i++)
        num += ((double)got[i] - plain[i]) * ((double)got[i] - plain[i]), den += (double)plain[i] * plain[i];
    lj_case_true(x, "paged_attention_fp8 vs unquantized", sqrt(num / den) <= 0.1,
                 "rel L2 %.4f of the unquantized attention (expected <= 0.1)", sqrt(num / den));
}

void lj_case_paged_attention_fp8(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, paged_fp8_body);
}

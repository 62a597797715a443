/* cases_paged.c: serving's paged KV cache (paged_kv_write, paged_attention, gather_rows), written
 * once for every backend (case.h): S sequences whose blocks are handed out in a scrambled order,
 * every row's k and v written to its slot (bit for bit, the other slots untouched), the query
 * rows of each sequence at positions 0..L-1 (a chunked prefill: causal within the sequence) or
 * only its last row (a decode batch: the earlier positions already in the cache) attending over
 * the block tables, against a double causal attention per sequence on the CPU (and
 * attention_decode's bits, which the CPU promises) and against the CPU on CUDA; gather_rows
 * copies rows bit for bit. Rows: "paged_attention" in op_cases.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/case.h"

/* d = {S, T, nh, nkv, hd, decode}: sequence s has (s + 1) * T + s positions; param, the block
 * size (0: serving's 16). */
static void paged_body(lj_case_ctx *x) {
    const lj_op_case *c = x->c;
    const lj_ops *ops = x->ops;
    const int S = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], decode = c->d[5];
    const int bs = c->param > 0 ? (int)c->param : 16;
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV, rep = nh / nkv;
    lj_case_shape(x, "S=%d T=%d nh=%d nkv=%d hd=%d bs=%d %s", S, T, nh, nkv, hd, bs, decode ? "decode" : "prefill");
    int N = 0, MB = 0;
    for (int s = 0; s < S; s++) {
        const int L = (s + 1) * T + s;
        N += L;
        MB = (L + bs - 1) / bs > MB ? (L + bs - 1) / bs : MB;
    }
    const int nblocks = S * MB + 3;
    int32_t *tables = (int32_t *)lj_case_zeros(x, (int64_t)S * MB), *seq = (int32_t *)lj_case_zeros(x, N);
    int32_t *pos = (int32_t *)lj_case_zeros(x, N), *slots = (int32_t *)lj_case_zeros(x, N);
    for (int i = 0; i < S * MB; i++) tables[i] = (int32_t)((i * 7 + 3) % nblocks);
    for (int i = 0; i < S * MB; i++) /* distinct */
        for (int j = 0; j < i; j++)
            if (tables[i] == tables[j]) tables[i] = (tables[i] + 1) % nblocks, j = -1;
    for (int s = 0, n = 0; s < S; s++)
        for (int p = 0; p < (s + 1) * T + s; p++, n++)
            seq[n] = s, pos[n] = p, slots[n] = tables[s * MB + p / bs] * bs + p % bs;
    float *hqkv = lj_case_rand(x, (int64_t)N * row, 1.0f);
    const int64_t nc = (int64_t)nblocks * bs * 2 * KV;
    float *c7 = lj_case_zeros(x, nc);
    for (int64_t i = 0; i < nc; i++) c7[i] = 7.0f;
    void *qkv = lj_case_upload(x, hqkv, (int64_t)N * row, LJ_CASE_ACT), *cache = lj_case_upload(x, c7, nc, LJ_CASE_ACT);
    void *dtables = lj_case_upload(x, tables, (int64_t)S * MB, LJ_CASE_I32);
    void *dslots = lj_case_upload(x, slots, N, LJ_CASE_I32);

    /* every row's keys and values into the cache (the prefill, or the steps before a decode) */
    ops->paged_kv_write(cache, qkv, dslots, N, nh, nkv, hd);
    const float *hc = lj_case_download(x, cache, nc, LJ_CASE_ACT);
    int write_ok = 1;
    int64_t untouched = 0;
    for (int i = 0; i < N; i++)
        write_ok &= memcmp(hc + (int64_t)slots[i] * 2 * KV, hqkv + (int64_t)i * row + Q, 2 * KV * sizeof(float)) == 0;
    for (int64_t i = 0; i < nc; i++) untouched += hc[i] == 7.0f;
    lj_case_true(x, "paged_kv_write", write_ok, "every row's k and v in its slot, bit for bit");
    lj_case_true(x, "paged_kv_write", untouched == nc - (int64_t)N * 2 * KV, "the other slots untouched");
    lj_case_values(x, "paged_kv_write", hc, nc, LJ_CASE_ACT, NULL, LJ_CASE_TOL_BITS);

    /* the query rows: all of them, or the last of each sequence */
    int M = 0;
    int32_t *rows = (int32_t *)lj_case_zeros(x, N);
    for (int i = 0; i < N; i++)
        if (!decode || i == N - 1 || seq[i + 1] != seq[i]) rows[M++] = i;
    float *q_rows = lj_case_zeros(x, (int64_t)M * row);
    int32_t *seq_r = (int32_t *)lj_case_zeros(x, M), *pos_r = (int32_t *)lj_case_zeros(x, M);
    for (int i = 0; i < M; i++) {
        memcpy(q_rows + (int64_t)i * row, hqkv + (int64_t)rows[i] * row, (size_t)row * sizeof(float));
        seq_r[i] = seq[rows[i]], pos_r[i] = pos[rows[i]];
    }
    void *dq = lj_case_upload(x, q_rows, (int64_t)M * row, LJ_CASE_ACT);
    void *dseq = lj_case_upload(x, seq_r, M, LJ_CASE_I32), *dpos = lj_case_upload(x, pos_r, M, LJ_CASE_I32);
    void *out = lj_case_alloc(x, (int64_t)M * Q, LJ_CASE_ACT);
    ops->paged_attention(out, dq, cache, dtables, dseq, dpos, M, MB, bs, nh, nkv, hd);
    double *want = NULL;
    if (lj_case_reference(x)) { /* causal attention over the sequence's rows 0..pos */
        want = lj_case_dzeros(x, (int64_t)M * Q);
        double *w = lj_case_dzeros(x, N);
        for (int m = 0; m < M; m++) {
            const int first = rows[m] - pos_r[m], t = pos_r[m];
            for (int hh = 0; hh < nh; hh++) {
                const float *q = q_rows + (int64_t)m * row + hh * hd;
                double mx = -INFINITY, sum = 0, *o = want + (int64_t)m * Q + hh * hd;
                for (int j = 0; j <= t; j++) {
                    const float *k = hqkv + (int64_t)(first + j) * row + Q + (hh / rep) * hd;
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += (double)q[e] * k[e];
                    w[j] = d / sqrt((double)hd);
                    mx = w[j] > mx ? w[j] : mx;
                }
                for (int j = 0; j <= t; j++) sum += (w[j] = exp(w[j] - mx));
                for (int j = 0; j <= t; j++) {
                    const float *v = hqkv + (int64_t)(first + j) * row + Q + KV + (hh / rep) * hd;
                    for (int e = 0; e < hd; e++) o[e] += w[j] / sum * v[e];
                }
            }
        }
    }
    lj_case_output(x, "paged_attention out", out, (int64_t)M * Q, LJ_CASE_ACT, want, LJ_CASE_TOL_OUT);
    if (lj_case_reference(x)) {
        /* the CPU: attention_decode over a contiguous cache of each sequence gives the same bits */
        const float *ho = lj_case_download(x, out, (int64_t)M * Q, LJ_CASE_ACT);
        for (int s = 0, off = 0; s < S; off += (s + 1) * T + s, s++) {
            const int L = (s + 1) * T + s;
            float *dc = lj_case_zeros(x, (int64_t)L * 2 * KV), *dec = lj_case_zeros(x, (int64_t)L * Q);
            float *a = lj_case_zeros(x, (int64_t)L * Q), *b = lj_case_zeros(x, (int64_t)L * Q);
            ops->attention_decode(dec, dc, hqkv + (int64_t)off * row, 0, L, nh, nkv, hd);
            int k = 0;
            for (int m = 0; m < M; m++)
                if (seq_r[m] == s) {
                    memcpy(a + (int64_t)k * Q, ho + (int64_t)m * Q, Q * sizeof(float));
                    memcpy(b + (int64_t)k * Q, dec + (int64_t)pos_r[m] * Q, Q * sizeof(float));
                    k++;
                }
            lj_case_twin(x, "paged_attention vs attention_decode", lj_case_upload(x, a, (int64_t)k * Q, LJ_CASE_ACT),
                         lj_case_upload(x, b, (int64_t)k * Q, LJ_CASE_ACT), (int64_t)k * Q, LJ_CASE_ACT,
                         LJ_CASE_TOL_BITS);
        }
    }

    /* rows with seq < 0 are skipped (their out untouched), the others get the same bits */
    {
        int32_t *seq_s = (int32_t *)lj_case_zeros(x, M);
        float *o7 = lj_case_zeros(x, (int64_t)M * Q);
        for (int m = 0; m < M; m++) seq_s[m] = m % 2 ? -1 : seq_r[m];
        for (int64_t i = 0; i < (int64_t)M * Q; i++) o7[i] = 7.0f;
        void *out_s = lj_case_upload(x, o7, (int64_t)M * Q, LJ_CASE_ACT);
        ops->paged_attention(out_s, dq, cache, dtables, lj_case_upload(x, seq_s, M, LJ_CASE_I32), dpos, M, MB, bs, nh,
                             nkv, hd);
        const float *hs = lj_case_download(x, out_s, (int64_t)M * Q, LJ_CASE_ACT);
        const float *ho = lj_case_download(x, out, (int64_t)M * Q, LJ_CASE_ACT);
        int skip_ok = 1;
        for (int m = 0; m < M; m++)
            skip_ok &= m % 2 ? memcmp(hs + (int64_t)m * Q, o7, (size_t)Q * sizeof(float)) == 0
                             : memcmp(hs + (int64_t)m * Q, ho + (int64_t)m * Q, (size_t)Q * sizeof(float)) == 0;
        lj_case_true(x, "paged_attention seq < 0", skip_ok, "skipped rows untouched, the others bit for bit");
    }

    /* gather_rows: rows of out, bit for bit */
    int32_t grows[3] = {M - 1, 0, M / 2};
    void *dg = lj_case_alloc(x, 3 * (int64_t)Q, LJ_CASE_ACT);
    ops->gather_rows(dg, out, lj_case_upload(x, grows, 3, LJ_CASE_I32), 3, Q);
    const float *g = lj_case_download(x, dg, 3 * (int64_t)Q, LJ_CASE_ACT);
    const float *o = lj_case_download(x, out, (int64_t)M * Q, LJ_CASE_ACT);
    int ok = 1;
    for (int i = 0; i < 3; i++)
        ok &= memcmp(g + (int64_t)i * Q, o + (int64_t)grows[i] * Q, (size_t)Q * sizeof(float)) == 0;
    lj_case_true(x, "gather_rows", ok, "out[m] = x[rows[m]] bit for bit");
}

void lj_case_paged_attention(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode, paged_body);
}

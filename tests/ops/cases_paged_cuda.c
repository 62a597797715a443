/* cases_paged_cuda.c: the CUDA backend's ops over serving's paged KV cache (paged_kv_write,
 * paged_attention, gather_rows) against the CPU backend on the same bf16-representable inputs:
 * S sequences whose blocks are handed out in a scrambled order, the rows of each at positions
 * 0..L-1 (a chunked prefill: several queries of a sequence, causal within it) or only its last
 * row (a decode batch: one query per sequence, the earlier positions already in the cache). GPU
 * outputs are poisoned (0xff bytes: NaN) first, so an element left unwritten fails. Tolerances
 * as in cases_cuda.c. d = {S, T, nh, nkv, hd, decode}: sequence s has (s + 1) * T + s positions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/op_cases.h"

#define BS 16 /* serving's block size */

void lj_case_cuda_paged_attention(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    lj_ops_config cfg = LJ_OPS_CONFIG_DEFAULT;
    cfg.grad_dtype = c->dtype;
    const lj_ops *G = lj_ops_cuda_open(&cfg), *H = lj_ops_cpu();
    LJ_ASSERT(G, "CUDA case %s: no CUDA backend", c->op);
    const int S = c->d[0], T = c->d[1], nh = c->d[2], nkv = c->d[3], hd = c->d[4], decode = c->d[5];
    char shape[128];
    snprintf(shape, sizeof shape, "S=%d T=%d nh=%d nkv=%d hd=%d %s", S, T, nh, nkv, hd, decode ? "decode" : "prefill");
    const int Q = nh * hd, KV = nkv * hd, row = Q + 2 * KV;
    int N = 0, MB = 0;
    for (int s = 0; s < S; s++) {
        const int L = (s + 1) * T + s;
        N += L;
        MB = (L + BS - 1) / BS > MB ? (L + BS - 1) / BS : MB;
    }
    const int nblocks = S * MB + 5;
    int32_t *tables = lj_malloc((size_t)S * MB * sizeof(int32_t)), *seq = lj_malloc((size_t)N * sizeof(int32_t));
    int32_t *pos = lj_malloc((size_t)N * sizeof(int32_t)), *slots = lj_malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < S * MB; i++) tables[i] = (int32_t)(nblocks - 1 - (i * 3) % nblocks);
    for (int i = 0; i < S * MB; i++)
        for (int j = 0; j < i; j++)
            if (tables[i] == tables[j]) tables[i] = (tables[i] + 1) % nblocks, j = -1;
    int n = 0;
    for (int s = 0; s < S; s++)
        for (int p = 0; p < (s + 1) * T + s; p++, n++) seq[n] = s, pos[n] = p, slots[n] = tables[s * MB + p / BS] * BS + p % BS;
    float *qkv = lj_harness_randf_bf16(h, (int64_t)N * row, 1.0f);
    const int64_t cache_n = (int64_t)nblocks * BS * 2 * KV;
    float *cache = lj_calloc((size_t)cache_n, sizeof(float));
    void *d_cache = lj_harness_upload(G, cache, cache_n, LJ_DTYPE_BF16);
    void *d_qkv = lj_harness_upload(G, qkv, (int64_t)N * row, LJ_DTYPE_BF16);
    void *d_tables = lj_harness_upload(G, tables, (int64_t)S * MB, LJ_DTYPE_F32);
    void *d_seq = lj_harness_upload(G, seq, N, LJ_DTYPE_F32), *d_pos = lj_harness_upload(G, pos, N, LJ_DTYPE_F32);
    void *d_slots = lj_harness_upload(G, slots, N, LJ_DTYPE_F32);
    /* every row's keys and values into the cache (the prefill, or the steps before a decode) */
    H->paged_kv_write(cache, qkv, slots, N, nh, nkv, hd);
    G->paged_kv_write(d_cache, d_qkv, d_slots, N, nh, nkv, hd);
    float *got_cache = lj_harness_download_f32(G, d_cache, cache_n, LJ_DTYPE_BF16);
    lj_harness_check_bits(h, "paged_kv_write", shape, got_cache, cache, (size_t)cache_n * sizeof(float));
    /* the query rows: all of them, or the last of each sequence */
    int M = 0;
    int32_t *rows = lj_malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++)
        if (!decode || i == N - 1 || seq[i + 1] != seq[i]) rows[M++] = i;
    float *q_rows = lj_malloc((size_t)M * row * sizeof(float));
    int32_t *seq_r = lj_malloc((size_t)M * sizeof(int32_t)), *pos_r = lj_malloc((size_t)M * sizeof(int32_t));
    for (int i = 0; i < M; i++) {
        memcpy(q_rows + (int64_t)i * row, qkv + (int64_t)rows[i] * row, (size_t)row * sizeof(float));
        seq_r[i] = seq[rows[i]], pos_r[i] = pos[rows[i]];
    }
    float *ref = lj_malloc((size_t)M * Q * sizeof(float));
    H->paged_attention(ref, q_rows, cache, tables, seq_r, pos_r, M, MB, BS, nh, nkv, hd);
    void *d_q = lj_harness_upload(G, q_rows, (int64_t)M * row, LJ_DTYPE_BF16);
    void *d_seq_r = lj_harness_upload(G, seq_r, M, LJ_DTYPE_F32), *d_pos_r = lj_harness_upload(G, pos_r, M, LJ_DTYPE_F32);
    void *d_out = lj_harness_dalloc(G, (size_t)M * Q * 2);
    lj_harness_dpoison(G, d_out, (size_t)M * Q * 2);
    G->paged_attention(d_out, d_q, d_cache, d_tables, d_seq_r, d_pos_r, M, MB, BS, nh, nkv, hd);
    float *got = lj_harness_download_f32(G, d_out, (int64_t)M * Q, LJ_DTYPE_BF16);
    lj_harness_check_f(h, "paged_attention", shape, got, ref, (int64_t)M * Q,
                       lj_harness_tol_gpu(c->tol.rel_l2, c->tol.max_rel));
    /* gather_rows: the last row of each sequence, bit for bit */
    int32_t grows[3] = {M - 1, 0, M / 2};
    void *d_grows = lj_harness_upload(G, grows, 3, LJ_DTYPE_F32), *d_g = lj_harness_dalloc(G, (size_t)3 * Q * 2);
    lj_harness_dpoison(G, d_g, (size_t)3 * Q * 2);
    G->gather_rows(d_g, d_out, d_grows, 3, Q);
    float *g = lj_harness_download_f32(G, d_g, 3 * (int64_t)Q, LJ_DTYPE_BF16);
    int ok = 1;
    for (int i = 0; i < 3; i++) ok &= memcmp(g + (int64_t)i * Q, got + (int64_t)grows[i] * Q, (size_t)Q * sizeof(float)) == 0;
    lj_harness_check_true(h, "gather_rows", shape, ok, "out[m] = x[rows[m]] bit for bit");
    void *dev[] = {d_cache, d_qkv, d_tables, d_seq, d_pos, d_slots, d_q, d_seq_r, d_pos_r, d_out, d_grows, d_g};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) G->free(dev[i]);
    free(tables), free(seq), free(pos), free(slots), free(qkv), free(cache), free(got_cache), free(rows);
    free(q_rows), free(seq_r), free(pos_r), free(ref), free(got), free(g);
}

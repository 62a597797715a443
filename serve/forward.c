/* forward.c: the serving forward over the paged KV cache: per layer the decode path of
 * model/model.c (RMSNorm, QKV (+ bias, QK-norm), RoPE at each row's own position, the write into
 * the cache, paged attention, o_proj, residual + RMSNorm, SwiGLU MLP, residual), then the final
 * norm and lm_head on the sampled rows only. Contracts in serve/forward.h. The FP8 forms are in
 * the ops (the cache's, chosen by kv_write and kv_attend) and in the linear module (the weights':
 * its fp8-w8a8 recipe). */
#include "serve/forward.h"

#include <string.h>

/* Bytes of one cached element. */
static size_t kv_elem_bytes(const lj_model *m, lj_serve_kv_dtype kv_dtype) {
    return kv_dtype == LJ_SERVE_KV_FP8_E4M3 ? 1 : lj_dtype_size(m->ops->act_dtype);
}

size_t lj_serve_kv_bytes_per_token(const lj_model *m, lj_serve_kv_dtype kv_dtype) {
    return (size_t)2 * m->spec.KV * m->spec.L * kv_elem_bytes(m, kv_dtype);
}

/* The FP8 cache's scales: [L] pairs, each scalar 16 bytes apart. */
static size_t kv_scale_bytes(const lj_model *m) {
    return (size_t)m->spec.L * 2 * LJ_FP8_SCALE_INV_STRIDE * sizeof(float);
}

size_t lj_serve_model_buffer_bytes(const lj_model *m, int max_tokens, int max_seqs, int max_model_len) {
    const lj_layer_spec *s = &m->spec;
    const size_t sa = lj_dtype_size(m->ops->act_dtype), N = (size_t)max_tokens, S = (size_t)max_seqs;
    const size_t max_blocks = ((size_t)max_model_len + LJ_KV_BLOCK_SIZE - 1) / LJ_KV_BLOCK_SIZE;
    size_t b = 2 * (size_t)max_model_len * (s->hd / 2) * sizeof(float);              /* RoPE tables */
    b += N * sa * (4 * (size_t)s->C + (s->qk_norm ? 2 : 1) * (size_t)s->QKV + s->Q + 3 * (size_t)s->I);
    b += N * sizeof(float) * (1 + (s->qk_norm ? (size_t)(s->nh + s->nkv) : 0));       /* rstd, qk_rstd */
    b += S * (2 * (size_t)s->C * sa + sizeof(float) + (size_t)s->V * sa);             /* rows, logits */
    b += (6 * N + S + S * max_blocks + S) * sizeof(int32_t);                          /* index arrays, argmax */
    b += N * s->nh * sizeof(float) /* the prompt attention's lse, and its workspace */
         + m->ops->attention_forward_docs_workspace_bytes(1, max_tokens, s->nh, s->nkv, s->hd);
    b += lj_linear_scratch_bytes(&m->linear, max_tokens) + kv_scale_bytes(m);        /* FP8 */
    return b;
}

/* Linear k of layer `layer` (its weight from the model's flat buffer; no gradient): the recipe of
 * the model runs it. */
static void linear(lj_model *m, lj_linear_kind k, int layer, void *out, const void *x, int N) {
    const lj_linear l = lj_linear_of(&m->linear, k, layer, lj_model_param(m, lj_linear_param(&m->layout, k, layer)), NULL);
    lj_linear_forward(&m->linear, &l, out, x, N);
}

static lj_status take(const lj_ops *ops, void **p, size_t bytes, const char *what) {
    if (ops->alloc(p, bytes < 64 ? 64 : bytes) != LJ_OK)
        return lj_fail(LJ_ERR_OOM, "serve: cannot allocate %s (%zu bytes) on %s", what, bytes, ops->name);
    return LJ_OK;
}

lj_status lj_serve_model_init(lj_serve_model *sm, lj_model *m, int num_blocks, int max_tokens, int max_seqs,
                              int max_model_len, lj_serve_kv_dtype kv_dtype) {
    memset(sm, 0, sizeof *sm);
    const lj_ops *ops = m->ops;
    if (!ops->paged_kv_write || !ops->paged_attention || !ops->gather_rows || !ops->attention_forward_docs ||
        !ops->attention_forward_docs_workspace_bytes)
        return lj_fail(LJ_ERR_UNSUPPORTED, "serve: the %s backend has no paged attention yet (use --device cpu)",
                       ops->name);
    if (kv_dtype == LJ_SERVE_KV_FP8_E4M3 &&
        (!ops->paged_kv_write_fp8 || !ops->paged_attention_fp8 || !ops->paged_kv_round_fp8))
        return lj_fail(LJ_ERR_UNSUPPORTED, "--kv-cache-dtype fp8: the %s backend has no FP8 paged attention; use "
                       "--kv-cache-dtype auto", ops->name);
    const lj_layer_spec *s = &m->spec;
    sm->m = m;
    sm->max_tokens = max_tokens;
    sm->max_seqs = max_seqs;
    sm->max_model_len = max_model_len;
    sm->max_blocks = (max_model_len + LJ_KV_BLOCK_SIZE - 1) / LJ_KV_BLOCK_SIZE;
    sm->num_blocks = num_blocks;
    const size_t sa = lj_dtype_size(ops->act_dtype), N = (size_t)max_tokens, S = (size_t)max_seqs;
    sm->kv_dtype = kv_dtype;
    sm->kv = lj_calloc((size_t)s->L, sizeof(void *));
    const size_t layer_bytes = (size_t)num_blocks * LJ_KV_BLOCK_SIZE * 2 * s->KV * kv_elem_bytes(m, kv_dtype);
    for (int l = 0; l < s->L; l++) LJ_TRY(take(ops, &sm->kv[l], layer_bytes, "the KV cache"));
    sm->kv_bytes = layer_bytes * s->L;
    if (kv_dtype == LJ_SERVE_KV_FP8_E4M3) { /* vLLM's scales without calibration: 1.0 (docs/serving.md) */
        const size_t n = kv_scale_bytes(m) / sizeof(float);
        LJ_TRY(take(ops, (void **)&sm->kv_scale, n * sizeof(float), "the KV cache's scales"));
        float *ones = lj_malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
        ops->upload(sm->kv_scale, ones, n * sizeof(float));
        free(ones);
    }
    const size_t scratch = lj_linear_scratch_bytes(&m->linear, max_tokens);
    if (scratch) {
        LJ_TRY(take(ops, &sm->linear_scratch, scratch, "the FP8 linears' scratch"));
        lj_linear_bind_scratch(&m->linear, max_tokens, sm->linear_scratch);
    }
    const size_t half = (size_t)s->hd / 2, rope = (size_t)max_model_len * half * sizeof(float);
    LJ_TRY(take(ops, (void **)&sm->rope_cos, rope, "the RoPE tables"));
    LJ_TRY(take(ops, (void **)&sm->rope_sin, rope, "the RoPE tables"));
    LJ_TRY(take(ops, &sm->x, N * s->C * sa, "activations"));
    LJ_TRY(take(ops, &sm->ln, N * s->C * sa, "activations"));
    LJ_TRY(take(ops, &sm->qkv, N * s->QKV * sa, "activations"));
    if (s->qk_norm) {
        LJ_TRY(take(ops, &sm->qkv_pre, N * s->QKV * sa, "activations"));
        LJ_TRY(take(ops, (void **)&sm->qk_rstd, N * (s->nh + s->nkv) * sizeof(float), "activations"));
    }
    LJ_TRY(take(ops, &sm->attn, N * s->Q * sa, "activations"));
    LJ_TRY(take(ops, &sm->res_mid, N * s->C * sa, "activations"));
    LJ_TRY(take(ops, &sm->proj, N * s->C * sa, "activations"));
    LJ_TRY(take(ops, &sm->gate_up, N * 2 * s->I * sa, "activations"));
    LJ_TRY(take(ops, &sm->mlp, N * s->I * sa, "activations"));
    LJ_TRY(take(ops, (void **)&sm->rstd, N * sizeof(float), "activations"));
    LJ_TRY(take(ops, &sm->rows_x, S * s->C * sa, "activations"));
    LJ_TRY(take(ops, &sm->rows_ln, S * s->C * sa, "activations"));
    LJ_TRY(take(ops, (void **)&sm->rows_rstd, S * sizeof(float), "activations"));
    LJ_TRY(take(ops, &sm->logits, S * s->V * sa, "the logits"));
    LJ_TRY(take(ops, (void **)&sm->d_argmax, S * sizeof(int32_t), "the greedy tokens"));
    sm->h_argmax = lj_malloc(S * sizeof(int32_t));
    LJ_TRY(take(ops, (void **)&sm->lse, N * s->nh * sizeof(float), "the prompt attention's log-sum-exp"));
    const size_t ws = ops->attention_forward_docs_workspace_bytes(1, max_tokens, s->nh, s->nkv, s->hd);
    if (ws) LJ_TRY(take(ops, &sm->ws_attention, ws, "the prompt attention's workspace"));
    const size_t index = (6 * N + S + S * sm->max_blocks) * sizeof(int32_t);
    LJ_TRY(take(ops, (void **)&sm->d_index, index, "the step's index arrays"));
    sm->h_index = lj_malloc(index);
    sm->h_logits = lj_malloc(S * s->V * sizeof(float));
    if (ops->act_dtype != LJ_DTYPE_F32) { /* a pinned copy downloads at the link's speed */
        const size_t bytes = S * s->V * sizeof(uint16_t);
        sm->h_logits_pinned = ops->host_alloc && ops->host_alloc((void **)&sm->h_logits_bf16, bytes) == LJ_OK;
        if (!sm->h_logits_pinned) sm->h_logits_bf16 = lj_malloc(bytes);
    }
    float *c = lj_malloc(rope), *sn = lj_malloc(rope);
    lj_rope_tables(&m->cfg, max_model_len, c, sn);
    ops->upload(sm->rope_cos, c, rope);
    ops->upload(sm->rope_sin, sn, rope);
    free(c);
    free(sn);
    return LJ_OK;
}

void lj_serve_model_free(lj_serve_model *sm) {
    if (!sm->m) return;
    const lj_ops *ops = sm->m->ops;
    void *bufs[] = {sm->rope_cos, sm->rope_sin, sm->x,       sm->ln,      sm->qkv,      sm->qkv_pre,
                    sm->qk_rstd,  sm->attn,     sm->res_mid, sm->proj,    sm->gate_up,  sm->mlp,
                    sm->rstd,     sm->rows_x,   sm->rows_ln, sm->rows_rstd, sm->logits, sm->d_index,
                    sm->d_argmax, sm->kv_scale, sm->linear_scratch, sm->lse, sm->ws_attention};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) ops->free(bufs[i]);
    if (sm->kv)
        for (int l = 0; l < sm->m->spec.L; l++)
            if (sm->kv[l]) ops->free(sm->kv[l]);
    free(sm->kv);
    for (int g = 0; g < sm->num_graphs; g++) ops->graph_destroy(sm->graphs[g]);
    free(sm->h_index);
    free(sm->h_argmax);
    free(sm->h_logits);
    if (sm->h_logits_pinned) ops->host_free(sm->h_logits_bf16);
    else free(sm->h_logits_bf16);
    memset(sm, 0, sizeof *sm);
}

/* The cache ops of layer l, in the cache's dtype. fresh: some rows will attend within their chunk
 * on qkv, whose keys and values an FP8 cache then rounds as it stores them (the same values as
 * the rows that read them from the cache later). */
static void kv_write(const lj_serve_model *sm, int l, const int32_t *slots, int N, int fresh) {
    const lj_layer_spec *s = &sm->m->spec;
    if (sm->kv_dtype == LJ_SERVE_KV_FP8_E4M3) {
        const float *ks = sm->kv_scale + 2 * LJ_FP8_SCALE_INV_STRIDE * l, *vs = ks + LJ_FP8_SCALE_INV_STRIDE;
        sm->m->ops->paged_kv_write_fp8(sm->kv[l], sm->qkv, slots, N, s->nh, s->nkv, s->hd, ks, vs);
        if (fresh) sm->m->ops->paged_kv_round_fp8(sm->qkv, N, s->nh, s->nkv, s->hd, ks, vs);
    } else {
        sm->m->ops->paged_kv_write(sm->kv[l], sm->qkv, slots, N, s->nh, s->nkv, s->hd);
    }
}

/* Attention of layer l: the rows of fresh chunks within their chunk (docs: doc_start per row, or
 * NULL when there are none), then every other row (attn_seq >= 0) over the pages. */
static void kv_attend(const lj_serve_model *sm, int l, const int32_t *tables, const int32_t *seq, const int32_t *pos,
                      const int32_t *docs, int N) {
    const lj_layer_spec *s = &sm->m->spec;
    if (docs)
        sm->m->ops->attention_forward_docs(sm->attn, sm->lse, sm->qkv, docs, 1, N, s->nh, s->nkv, s->hd,
                                           sm->ws_attention);
    if (sm->kv_dtype == LJ_SERVE_KV_FP8_E4M3) {
        const float *ks = sm->kv_scale + 2 * LJ_FP8_SCALE_INV_STRIDE * l, *vs = ks + LJ_FP8_SCALE_INV_STRIDE;
        sm->m->ops->paged_attention_fp8(sm->attn, sm->qkv, sm->kv[l], tables, seq, pos, N, sm->max_blocks,
                                        LJ_KV_BLOCK_SIZE, s->nh, s->nkv, s->hd, ks, vs);
    } else {
        sm->m->ops->paged_attention(sm->attn, sm->qkv, sm->kv[l], tables, seq, pos, N, sm->max_blocks,
                                    LJ_KV_BLOCK_SIZE, s->nh, s->nkv, s->hd);
    }
}

/* The step's ops over the index arrays at d (ids | pos | slots | seq | doc_start | attn_seq [N]
 * each, rows [M], tables): the layers on N rows, then the final norm, lm_head and argmax on the M
 * wanted rows; fresh: some rows attend within their chunk (attention_forward_docs over doc_start;
 * attn_seq is then -1 there). No host transfer: a CUDA graph captures this. */
static void issue(lj_serve_model *sm, const int32_t *d, int N, int M, int fresh) {
    lj_model *m = sm->m;
    const lj_ops *ops = m->ops;
    const lj_layer_spec *s = &m->spec;
    const int32_t *ids = d, *pos = d + N, *slots = d + 2 * N, *docs = fresh ? d + 4 * N : NULL, *aseq = d + 5 * N;
    const int32_t *rows = d + 6 * N, *tables = rows + M;
    ops->embedding_forward(sm->x, ids, lj_model_param(m, m->layout.embed), N, s->C);
    for (int l = 0; l < s->L; l++) {
        /* each norm runs through the recipe, which may cast its output into the next linear's FP8
         * input in the same pass (fp8-w8a8: one kernel instead of a norm, an amax and a cast) */
        lj_linear qkv = lj_linear_of(&m->linear, LJ_LINEAR_QKV, l,
                                     lj_model_param(m, lj_linear_param(&m->layout, LJ_LINEAR_QKV, l)), NULL);
        qkv.input_cast = lj_linear_norm_forward(&m->linear, &qkv, NULL, sm->ln, sm->rstd, sm->x, NULL,
                                                lj_model_param(m, lj_param_index(&m->layout, l, LJ_P_LN1)), N, s->eps);
        void *y = s->qk_norm ? sm->qkv_pre : sm->qkv;
        lj_linear_forward(&m->linear, &qkv, y, sm->ln, N);
        if (s->qkv_bias) ops->bias_add(y, lj_model_param(m, lj_param_index(&m->layout, l, LJ_P_Q_BIAS)), N, s->QKV);
        if (s->qk_norm)
            ops->qk_norm_forward(sm->qkv, sm->qk_rstd, sm->qkv_pre,
                                 lj_model_param(m, lj_param_index(&m->layout, l, LJ_P_Q_NORM)), N, s->nh, s->nkv, s->hd,
                                 s->eps);
        ops->rope_forward_pos(sm->qkv, sm->rope_cos, sm->rope_sin, pos, 1, N, s->nh, s->nkv, s->hd);
        kv_write(sm, l, slots, N, docs != NULL);
        kv_attend(sm, l, tables, aseq, pos, docs, N);
        linear(m, LJ_LINEAR_O, l, sm->proj, sm->attn, N);
        lj_linear gate_up = lj_linear_of(&m->linear, LJ_LINEAR_GATE_UP, l,
                                         lj_model_param(m, lj_linear_param(&m->layout, LJ_LINEAR_GATE_UP, l)), NULL);
        gate_up.input_cast = lj_linear_norm_forward(&m->linear, &gate_up, sm->res_mid, sm->ln, sm->rstd, sm->x, sm->proj,
                                                    lj_model_param(m, lj_param_index(&m->layout, l, LJ_P_LN2)), N, s->eps);
        lj_linear_forward(&m->linear, &gate_up, sm->gate_up, sm->ln, N);
        const lj_linear down = lj_linear_of(&m->linear, LJ_LINEAR_DOWN, l,
                                            lj_model_param(m, lj_linear_param(&m->layout, LJ_LINEAR_DOWN, l)), NULL);
        lj_linear_forward_swiglu(&m->linear, &down, sm->proj, sm->mlp, sm->gate_up, NULL, N); /* opt.fused: no tmp */
        ops->add(sm->x, sm->res_mid, sm->proj, (int64_t)N * s->C);
    }
    if (M == 0) return; /* prompt chunks only: nothing to sample */
    ops->gather_rows(sm->rows_x, sm->x, rows, M, s->C);
    ops->rmsnorm_forward(sm->rows_ln, sm->rows_rstd, sm->rows_x, lj_model_param(m, m->layout.final_norm), M, s->C,
                         s->eps);
    linear(m, LJ_LINEAR_LM_HEAD, 0, sm->logits, sm->rows_ln, M);
    ops->argmax_rows(sm->d_argmax, sm->logits, M, s->V);
}

/* Fills the host staging with the index arrays of a batch of N rows padded to P >= N (P > N only
 * for a decode graph: pad rows read token 0 at position 0 of sequence 0, write no slot and are
 * their own sampled row) and uploads them. Returns whether some row has a start (issue's fresh). */
static int upload_index(lj_serve_model *sm, const lj_serve_batch *b, int P, int M) {
    const int N = b->N, MB = sm->max_blocks;
    int32_t *h = sm->h_index, *docs = h + 4 * P, *aseq = h + 5 * P;
    memcpy(h, b->ids, (size_t)N * sizeof(int32_t));
    memcpy(h + P, b->pos, (size_t)N * sizeof(int32_t));
    memcpy(h + 2 * P, b->slots, (size_t)N * sizeof(int32_t));
    memcpy(h + 3 * P, b->seq, (size_t)N * sizeof(int32_t));
    int fresh = 0;
    for (int n = 0; n < N; n++) {
        const int st = b->start ? b->start[n] : -1;
        fresh |= st >= 0;
        docs[n] = st >= 0 ? st : n; /* a cached row's own result there is replaced by the pages' */
        aseq[n] = st >= 0 ? -1 : b->seq[n];
    }
    for (int n = N; n < P; n++)
        h[n] = 0, h[P + n] = 0, h[2 * P + n] = -1, h[3 * P + n] = 0, docs[n] = n, aseq[n] = 0, h[6 * P + n] = n;
    memcpy(h + 6 * P, b->rows, (size_t)b->M * sizeof(int32_t));
    memcpy(h + 6 * P + M, b->tables, (size_t)b->S * MB * sizeof(int32_t));
    sm->m->ops->upload(sm->d_index, h, (size_t)(6 * P + M + b->S * MB) * sizeof(int32_t));
    return fresh;
}

/* The graph for a decode batch of N rows: the smallest captured size >= N, or -1. A decode batch
 * is one row per sequence, each sampled: seq[n] = rows[n] = n. */
static int graph_for(const lj_serve_model *sm, const lj_serve_batch *b) {
    if (sm->num_graphs == 0 || b->N != b->S || b->M != b->N) return -1;
    for (int n = 0; n < b->N; n++)
        if (b->seq[n] != n || b->rows[n] != n) return -1;
    for (int g = 0; g < sm->num_graphs; g++)
        if (sm->graph_sizes[g] >= b->N) return g;
    return -1;
}

const int32_t *lj_serve_forward(lj_serve_model *sm, const lj_serve_batch *b, const float **logits) {
    lj_model *m = sm->m;
    const lj_ops *ops = m->ops;
    const lj_layer_spec *s = &m->spec;
    const int N = b->N, M = b->M;
    LJ_ASSERT(N >= 1 && N <= sm->max_tokens && b->S >= 1 && b->S <= sm->max_seqs && M >= 0 && M <= sm->max_seqs);
    const int g = graph_for(sm, b);
    if (g >= 0) { /* a decode batch: no row has a start */
        upload_index(sm, b, sm->graph_sizes[g], sm->graph_sizes[g]);
        ops->graph_launch(sm->graphs[g]);
        sm->graph_steps++;
    } else {
        const int fresh = upload_index(sm, b, N, M);
        issue(sm, sm->d_index, N, M, fresh);
    }
    if (logits) *logits = NULL;
    if (M == 0) return NULL;
    ops->download(sm->h_argmax, sm->d_argmax, (size_t)M * sizeof(int32_t));
    if (!logits) return sm->h_argmax;
    const size_t n = (size_t)M * s->V;
    if (ops->act_dtype == LJ_DTYPE_F32) {
        ops->download(sm->h_logits, sm->logits, n * sizeof(float));
    } else {
        /* bf16 logits: widened on the host */
        uint16_t *tmp = sm->h_logits_bf16;
        ops->download(tmp, sm->logits, n * sizeof(uint16_t));
#pragma omp parallel for schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) sm->h_logits[i] = lj_bf16_to_f32(tmp[i]);
    }
    *logits = sm->h_logits;
    return sm->h_argmax;
}

int lj_serve_graph_sizes(int max_seqs, int max_tokens, int *sizes) {
    const int cap = max_seqs < max_tokens ? max_seqs : max_tokens;
    int n = 0;
    for (int p = 1; p <= cap && n < LJ_SERVE_MAX_GRAPHS; p = p < 8 ? 2 * p : p + 8) sizes[n++] = p;
    if (n > 0 && sizes[n - 1] < cap && n < LJ_SERVE_MAX_GRAPHS) sizes[n++] = cap; /* the largest batch too */
    return n;
}

lj_status lj_serve_capture_graphs(lj_serve_model *sm) {
    const lj_ops *ops = sm->m->ops;
    if (!ops->graph_capture_begin)
        return lj_fail(LJ_ERR_UNSUPPORTED, "serve: the %s backend cannot capture graphs", ops->name);
    int sizes[LJ_SERVE_MAX_GRAPHS];
    const int n = lj_serve_graph_sizes(sm->max_seqs, sm->max_tokens, sizes);
    int32_t *zeros = lj_calloc((size_t)sizes[n - 1] * (7 + (size_t)sm->max_blocks), sizeof(int32_t));
    lj_status st = LJ_OK;
    for (int g = 0; g < n && st == LJ_OK; g++) {
        const int P = sizes[g];
        /* a batch of pad rows only: run once eagerly (the linear ops pick their algorithms), then
         * capture the same ops */
        const lj_serve_batch pad = {0, 1, 0, zeros, zeros, zeros, zeros, zeros, zeros, NULL};
        upload_index(sm, &pad, P, P);
        issue(sm, sm->d_index, P, P, 0);
        ops->synchronize();
        st = ops->graph_capture_begin();
        if (st != LJ_OK) break;
        issue(sm, sm->d_index, P, P, 0);
        st = ops->graph_capture_end(&sm->graphs[g]);
        if (st == LJ_OK) sm->graph_sizes[sm->num_graphs++] = P;
    }
    free(zeros);
    return st;
}

lj_status lj_serve_weights_init(lj_model *m, lj_plan *plan, const lj_ops *ops, const lj_model_config *cfg,
                                lj_serve_quantization quant) {
    lj_model_options opt;
    memset(&opt, 0, sizeof opt);
    opt.micro_batch_size = 1;
    opt.seq_length = 1;
    opt.fused = 1;
    opt.kv_cache_tokens = 1;
    opt.fp8 = lj_linear_fp8_defaults();
    if (quant == LJ_SERVE_QUANT_FP8) opt.linear_recipe = LJ_LINEAR_RECIPE_FP8_W8A8;
    lj_model_init(m, ops, cfg, &opt);
    if (quant == LJ_SERVE_QUANT_FP8) lj_serve_fp8_weights_attach(m);
    lj_plan_build(plan, m);
    return lj_plan_allocate(plan, m);
}

void lj_serve_weights_free(lj_model *m, lj_plan *plan) {
    lj_plan_release(plan, m->ops);
    lj_plan_free(plan);
    lj_model_free(m);
}

/* test_serve_engine.c: the serving engine on the CPU backend: the paged ops against the training
 * attention and the generation path's attention; the block pool (LRU eviction, the prefix
 * chain, the salt); the engine's greedy tokens against lj_model_decode (the path of `ljperf
 * generate`) and its logprobs against the training forward; many requests at once under a small
 * cache and token budget (chunked prefill, preemption) give each the tokens it gets alone; the
 * prefix cache hits on a repeated prompt; a seed reproduces a sampled answer; aborts free the
 * sequences; the waiting queue is bounded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "serve/engine.h"
#include "tests/test_util.h"

enum { V = 97 };

/* ---- the ops -------------------------------------------------------------------------- */

static void test_paged_attention_matches_training(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    const int nh = 4, nkv = 2, hd = 8, Q = nh * hd, KV = nkv * hd, QKV = Q + 2 * KV;
    const int lens[3] = {5, 17, 40}, S = 3, MB = 4, BS = LJ_KV_BLOCK_SIZE;
    int N = 0;
    for (int s = 0; s < S; s++) N += lens[s];
    lj_rng rng;
    lj_rng_seed(&rng, 3);
    float *qkv = lj_test_randf(&rng, (int64_t)N * QKV, 1.0f);
    /* blocks handed out in a scrambled order */
    int32_t tables[3 * 4], slots[62], seqv[62], pos[62];
    const int32_t perm[12] = {7, 2, 9, 0, 11, 4, 1, 8, 5, 10, 3, 6};
    for (int i = 0; i < S * MB; i++) tables[i] = perm[i];
    int n = 0;
    for (int s = 0; s < S; s++)
        for (int p = 0; p < lens[s]; p++, n++) {
            seqv[n] = s;
            pos[n] = p;
            slots[n] = tables[s * MB + p / BS] * BS + p % BS;
        }
    float *cache = lj_calloc((size_t)12 * BS * 2 * KV, sizeof(float));
    float *out = lj_malloc((size_t)N * Q * sizeof(float));
    ops->paged_kv_write(cache, qkv, slots, N, nh, nkv, hd);
    ops->paged_attention(out, qkv, cache, tables, seqv, pos, N, MB, BS, nh, nkv, hd);
    int off = 0;
    for (int s = 0; s < S; s++) {
        const int T = lens[s];
        float *ref = lj_malloc((size_t)T * Q * sizeof(float)), *lse = lj_malloc((size_t)nh * T * sizeof(float));
        void *ws = lj_malloc(ops->attention_workspace_bytes(1, T, nh, nkv, hd));
        ops->attention_forward(ref, lse, qkv + (size_t)off * QKV, 1, T, nh, nkv, hd, ws);
        double worst = 0;
        for (int i = 0; i < T * Q; i++) worst = fmax(worst, fabs(ref[i] - out[(size_t)off * Q + i]));
        if (worst > 1e-5) fail_msg("sequence %d: paged attention differs from attention_forward by %.3e", s, worst);
        /* the generation path's attention (a contiguous cache) gives the same bits */
        float *dcache = lj_malloc((size_t)T * 2 * KV * sizeof(float)), *dec = lj_malloc((size_t)T * Q * sizeof(float));
        ops->attention_decode(dec, dcache, qkv + (size_t)off * QKV, 0, T, nh, nkv, hd);
        assert_memory_equal(dec, out + (size_t)off * Q, (size_t)T * Q * sizeof(float));
        free(ref), free(lse), free(ws), free(dcache), free(dec);
        off += T;
    }
    /* gather_rows */
    int32_t rows[2] = {4, 21};
    float g[2 * 32];
    ops->gather_rows(g, out, rows, 2, Q);
    assert_memory_equal(g, out + 4 * Q, Q * sizeof(float));
    assert_memory_equal(g + Q, out + 21 * Q, Q * sizeof(float));
    free(qkv), free(cache), free(out);
}

/* ---- the block pool -------------------------------------------------------------------- */

static void test_kv_pool(void **state) {
    (void)state;
    lj_kv_pool p;
    lj_kv_pool_init(&p, 4, 1);
    int32_t ids[48];
    for (int i = 0; i < 48; i++) ids[i] = i * 3 + 1;
    /* a sequence of 3 full blocks, registered in chain order, then freed */
    int32_t t[3];
    uint64_t h[3];
    for (int b = 0; b < 3; b++) {
        t[b] = lj_kv_pool_alloc(&p);
        assert_true(t[b] >= 0);
        h[b] = lj_kv_pool_register(&p, t[b], b ? h[b - 1] : 0, ids + 16 * b, 0);
    }
    assert_int_equal(lj_kv_pool_used(&p), 3);
    lj_kv_pool_release_all(&p, t, 3);
    assert_int_equal(lj_kv_pool_used(&p), 0);
    /* the whole prefix is found again; a different salt or first block finds nothing */
    int32_t got[3];
    uint64_t gh[3];
    assert_int_equal(lj_kv_pool_lookup(&p, ids, 48, 0, 3, got, gh), 3);
    assert_memory_equal(got, t, sizeof t);
    lj_kv_pool_release_all(&p, got, 3);
    assert_int_equal(lj_kv_pool_lookup(&p, ids, 48, 99, 3, got, gh), 0);
    int32_t other[48];
    memcpy(other, ids, sizeof other);
    other[0] = 5;
    assert_int_equal(lj_kv_pool_lookup(&p, other, 48, 0, 3, got, gh), 0);
    /* the tail was freed first, so it is evicted first: allocate the never-used block, then the
     * third block of the chain goes; the first two stay cached */
    const int32_t a = lj_kv_pool_alloc(&p), b = lj_kv_pool_alloc(&p);
    assert_true(a != t[0] && a != t[1] && a != t[2]);
    assert_int_equal(b, t[2]);
    assert_int_equal(lj_kv_pool_lookup(&p, ids, 48, 0, 3, got, gh), 2);
    lj_kv_pool_release_all(&p, got, 2);
    lj_kv_pool_release(&p, a);
    lj_kv_pool_release(&p, b);
    assert_int_equal(lj_kv_pool_used(&p), 0);
    lj_kv_pool_free(&p);
}

/* ---- sampling ------------------------------------------------------------------------------ */

static int32_t draw(lj_sampler *sm, const float *logits, const lj_sampling_params *p, const int32_t *prompt, int np,
                    const int32_t *out, int no, lj_rng *rng, lj_sample_info *info) {
    const int32_t eos = 1;
    return lj_sample(sm, logits, p, prompt, np, out, no, &eos, 1, rng, info);
}

/* Each processor on logits whose answer is known: greedy, top-k, top-p, min-p, the three
 * penalties, min_tokens against EOS, raw logprobs untouched by temperature and penalties. */
static void test_sampling(void **state) {
    (void)state;
    const float logits[8] = {1, 5, 3, 0, -1, 2, 0.5f, -3};
    lj_sampler sm;
    lj_sampler_init(&sm, 8);
    lj_rng rng;
    lj_rng_seed(&rng, 9);
    lj_sampling_params p;
    lj_sampling_params_default(&p);
    p.temperature = 0;
    assert_int_equal(draw(&sm, logits, &p, NULL, 0, NULL, 0, &rng, NULL), 1);
    /* truncations that keep only the best token, at temperature 1 */
    for (int k = 0; k < 3; k++) {
        lj_sampling_params_default(&p);
        if (k == 0) p.top_k = 1;
        if (k == 1) p.top_p = 1e-6;
        if (k == 2) p.min_p = 0.99;
        for (int i = 0; i < 20; i++) assert_int_equal(draw(&sm, logits, &p, NULL, 0, NULL, 0, &rng, NULL), 1);
    }
    /* penalties move the argmax from token 1 (5) to token 2 (3) */
    const int32_t has1[3] = {1, 1, 1};
    lj_sampling_params_default(&p);
    p.temperature = 0;
    p.repetition_penalty = 2; /* 5 -> 2.5 (prompt) */
    assert_int_equal(draw(&sm, logits, &p, has1, 1, NULL, 0, &rng, NULL), 2);
    lj_sampling_params_default(&p);
    p.temperature = 0;
    p.presence_penalty = 2.5; /* 5 -> 2.5 (output) */
    assert_int_equal(draw(&sm, logits, &p, NULL, 0, has1, 1, &rng, NULL), 2);
    assert_int_equal(draw(&sm, logits, &p, has1, 1, NULL, 0, &rng, NULL), 1); /* the prompt does not count */
    lj_sampling_params_default(&p);
    p.temperature = 0;
    p.frequency_penalty = 1; /* 5 - 3 = 2 */
    assert_int_equal(draw(&sm, logits, &p, NULL, 0, has1, 3, &rng, NULL), 2);
    assert_int_equal(draw(&sm, logits, &p, NULL, 0, has1, 1, &rng, NULL), 1); /* 5 - 1 = 4 */
    /* min_tokens masks EOS (token 1 here) and the stop ids */
    lj_sampling_params_default(&p);
    p.temperature = 0;
    p.min_tokens = 2;
    p.num_stop_ids = 1;
    p.stop_ids[0] = 2;
    assert_int_equal(draw(&sm, logits, &p, NULL, 0, has1, 1, &rng, NULL), 5);
    assert_int_equal(draw(&sm, logits, &p, NULL, 0, has1, 2, &rng, NULL), 1);
    /* raw logprobs: the log-softmax of the logits as they came */
    lj_sampling_params_default(&p);
    p.temperature = 0.3;
    p.repetition_penalty = 1.7;
    p.logprobs = 3;
    lj_sample_info info;
    const int32_t t = draw(&sm, logits, &p, has1, 1, NULL, 0, &rng, &info);
    double lse = 0;
    for (int i = 0; i < 8; i++) lse += exp(logits[i]);
    lse = log(lse);
    assert_true(fabs(info.logprob - (logits[t] - lse)) < 1e-5);
    assert_int_equal(info.n_top, 3);
    const int32_t want_top[3] = {1, 2, 5};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(info.top_ids[i], want_top[i]);
        assert_true(fabs(info.top_logprobs[i] - (logits[want_top[i]] - lse)) < 1e-5);
    }
    /* a seed gives the same draws */
    lj_sampling_params_default(&p);
    int32_t a[16], b[16];
    lj_rng ra, rb;
    lj_rng_seed(&ra, 5);
    lj_rng_seed(&rb, 5);
    for (int i = 0; i < 16; i++) a[i] = draw(&sm, logits, &p, NULL, 0, NULL, 0, &ra, NULL);
    for (int i = 0; i < 16; i++) b[i] = draw(&sm, logits, &p, NULL, 0, NULL, 0, &rb, NULL);
    assert_memory_equal(a, b, sizeof a);
    lj_sampler_free(&sm);
}

/* ---- the engine -------------------------------------------------------------------------- */

typedef struct {
    lj_model_config cfg;
    lj_model m;
    lj_plan plan;
    lj_serve_model sm;
    lj_serve_engine *e;
    float *weights;
} server;

static lj_model_config family_config(int family) {
    lj_model_config c = lj_test_small_config(2, 0);
    c.initializer_range = 0.3;
    if (family == 1) {
        c.family = LJ_FAMILY_QWEN3;
        c.qk_norm = 1;
        c.rms_norm_eps = 1e-6;
    }
    if (family == 2) {
        c.family = LJ_FAMILY_QWEN2;
        c.qkv_bias = 1;
    }
    return c;
}

static int g_max_waiting = 100000;

static void server_start(server *s, int family, int num_blocks, int max_tokens, int max_seqs, int prefix) {
    memset(s, 0, sizeof *s);
    s->cfg = family_config(family);
    /* the weights of a random training model (biases and norms away from 0 and 1) */
    lj_test_model t;
    assert_int_equal(lj_test_model_create(&t, &s->cfg, 1, 8, 1, LJ_RECOMPUTE_NONE), LJ_OK);
    lj_model_init_weights(&t.m, 11);
    for (int l = 0; l < t.m.layout.count; l++) {
        const lj_param_info *pi = &t.m.layout.params[l];
        if (pi->kind != LJ_PARAM_NORM && pi->kind != LJ_PARAM_BIAS) continue;
        for (int64_t i = 0; i < pi->numel; i++) t.m.master[pi->offset + i] += 0.1f * (float)((i * 7 + l) % 5 - 2);
    }
    s->weights = lj_malloc((size_t)t.m.layout.total * sizeof(float));
    lj_model_get_weights(&t.m, s->weights);
    lj_test_model_destroy(&t);
    assert_int_equal(lj_serve_weights_init(&s->m, &s->plan, lj_ops_cpu(), &s->cfg, LJ_SERVE_QUANT_NONE), LJ_OK);
    lj_model_set_weights(&s->m, s->weights);
    assert_int_equal(lj_serve_model_init(&s->sm, &s->m, num_blocks, max_tokens, max_seqs, 128, LJ_SERVE_KV_AUTO),
                     LJ_OK);
    lj_serve_engine_options o = {.max_num_seqs = max_seqs, .max_num_batched_tokens = max_tokens, .max_model_len = 128,
                                 .num_blocks = num_blocks, .enable_prefix_caching = prefix,
                                 .max_waiting_requests = g_max_waiting, .num_eos = 0};
    assert_int_equal(lj_serve_engine_start(&s->e, &s->sm, &o), LJ_OK);
}

static void server_stop(server *s) {
    lj_serve_engine_stop(s->e, 1);
    lj_serve_model_free(&s->sm);
    lj_serve_weights_free(&s->m, &s->plan);
    free(s->weights);
}

static void make_prompt(int32_t *ids, int n, int salt) {
    for (int i = 0; i < n; i++) ids[i] = (i * 29 + salt * 13 + 5) % V;
}

/* Runs a request to its end; out[0..n) its tokens (choice 0), lp their logprobs. */
static int run_one(server *s, const int32_t *prompt, int np, const lj_sampling_params *p, int32_t *out, float *lp) {
    lj_serve_request *r = lj_serve_request_new(prompt, np, p, 1, 0);
    assert_int_equal(lj_serve_submit(s->e, r), LJ_SERVE_QUEUED);
    while (!lj_serve_request_wait(r, lj_serve_request_total_tokens(r), 1.0)) {
    }
    lj_serve_request_lock(r);
    const lj_serve_output *o = lj_serve_request_output(r, 0);
    const int n = o->n;
    for (int i = 0; i < n; i++) {
        out[i] = o->tokens[i].id;
        if (lp) lp[i] = o->tokens[i].info.logprob;
    }
    lj_serve_request_unlock(r);
    lj_serve_request_release(r);
    return n;
}

static void wait_blocks_free(server *s) {
    lj_serve_stats st;
    for (;;) { /* the engine publishes its counts after each step; the test's time limit bounds this */
        lj_serve_engine_stats(s->e, &st);
        if (st.blocks_used == 0 && st.running == 0) break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static void greedy(lj_sampling_params *p, int max_tokens) {
    lj_sampling_params_default(p);
    p->temperature = 0;
    p->max_tokens = max_tokens;
    p->logprobs = 2;
}

/* The engine's greedy answer is lj_model_decode's token for token, and each logprob is the
 * training forward's log-softmax at that position. */
static void test_engine_matches_generate_and_forward(void **state) {
    (void)state;
    for (int family = 0; family < 3; family++) {
        server s;
        server_start(&s, family, 64, 24, 4, 1);
        enum { NP = 21, NO = 12 };
        int32_t prompt[NP], got[NO];
        float lp[NO];
        make_prompt(prompt, NP, family);
        lj_sampling_params p;
        greedy(&p, NO);
        assert_int_equal(run_one(&s, prompt, NP, &p, got, lp), NO);
        /* the generation path */
        lj_model_options o;
        memset(&o, 0, sizeof o);
        o.micro_batch_size = 1;
        o.seq_length = NP;
        o.kv_cache_tokens = NP + NO;
        o.fused = 1;
        lj_test_model g;
        lj_model_init(&g.m, lj_ops_cpu(), &s.cfg, &o);
        lj_plan_build(&g.p, &g.m);
        assert_int_equal(lj_plan_allocate(&g.p, &g.m), LJ_OK);
        lj_model_upload_rope(&g.m);
        lj_model_set_weights(&g.m, s.weights);
        float logits[V];
        lj_model_decode(&g.m, prompt, NP, 0, logits);
        for (int i = 0; i < NO; i++) {
            int best = 0;
            for (int v = 1; v < V; v++)
                if (logits[v] > logits[best]) best = v;
            if (best != got[i]) fail_msg("family %d: token %d is %d, generate's is %d", family, i, got[i], best);
            lj_model_decode(&g.m, &got[i], 1, NP + i, logits);
        }
        lj_test_model_destroy(&g);
        /* the training forward over prompt + answer */
        const int T = NP + NO - 1;
        lj_test_model f;
        assert_int_equal(lj_test_model_create(&f, &s.cfg, 1, T, 0, LJ_RECOMPUTE_NONE), LJ_OK);
        lj_model_set_weights(&f.m, s.weights);
        int32_t seqv[NP + NO];
        memcpy(seqv, prompt, sizeof prompt);
        memcpy(seqv + NP, got, sizeof got);
        lj_model_set_batch(&f.m, seqv);
        float *full = lj_malloc((size_t)T * V * sizeof(float));
        lj_model_logits(&f.m, full);
        for (int i = 0; i < NO; i++) {
            const float *row = full + (size_t)(NP - 1 + i) * V;
            double mx = row[0], sum = 0;
            for (int v = 1; v < V; v++) mx = fmax(mx, row[v]);
            for (int v = 0; v < V; v++) sum += exp(row[v] - mx);
            const double want = row[got[i]] - mx - log(sum);
            if (fabs(want - lp[i]) > 1e-4)
                fail_msg("family %d: logprob of token %d is %.6f, the forward's %.6f", family, i, lp[i], want);
        }
        free(full);
        lj_test_model_destroy(&f);
        server_stop(&s);
    }
}

/* 40 requests at once of random lengths through a cache of 24 blocks, 32 tokens per step and 6
 * sequences: prompts are cut into chunks, sequences are preempted, and every answer equals the
 * one the request gets alone; the cache is empty afterwards. */
static void test_engine_batching_preemption(void **state) {
    (void)state;
    enum { R = 40, MAXO = 40 };
    server alone, busy;
    server_start(&alone, 0, 64, 64, 1, 0);
    server_start(&busy, 0, 24, 32, 6, 1);
    lj_rng rng;
    lj_rng_seed(&rng, 5);
    int32_t prompts[R][100], want[R][MAXO];
    int np[R], nwant[R];
    lj_serve_request *reqs[R];
    lj_sampling_params p[R];
    for (int i = 0; i < R; i++) {
        np[i] = 1 + (int)lj_rng_below(&rng, 80);
        make_prompt(prompts[i], np[i], i % 7); /* shared prefixes among some */
        prompts[i][np[i] - 1] = (int32_t)lj_rng_below(&rng, V);
        greedy(&p[i], 1 + (int)lj_rng_below(&rng, MAXO));
        nwant[i] = run_one(&alone, prompts[i], np[i], &p[i], want[i], NULL);
    }
    for (int i = 0; i < R; i++) {
        reqs[i] = lj_serve_request_new(prompts[i], np[i], &p[i], 1, 0);
        assert_int_equal(lj_serve_submit(busy.e, reqs[i]), LJ_SERVE_QUEUED);
    }
    for (int i = 0; i < R; i++) {
        while (!lj_serve_request_wait(reqs[i], lj_serve_request_total_tokens(reqs[i]), 1.0)) {
        }
        lj_serve_request_lock(reqs[i]);
        const lj_serve_output *o = lj_serve_request_output(reqs[i], 0);
        assert_int_equal(o->n, nwant[i]);
        for (int k = 0; k < o->n; k++)
            if (o->tokens[k].id != want[i][k]) fail_msg("request %d: token %d differs from the lone run's", i, k);
        lj_serve_request_unlock(reqs[i]);
        lj_serve_request_release(reqs[i]);
    }
    wait_blocks_free(&busy);
    lj_serve_stats st;
    lj_serve_engine_stats(busy.e, &st);
    assert_true(st.preemptions > 0);
    assert_true(st.prefix_hits > 0);
    assert_int_equal(st.blocks_used, 0);
    assert_int_equal(st.finished[LJ_FINISH_LENGTH], R);
    server_stop(&alone);
    server_stop(&busy);
}

/* A repeated prompt is found in the prefix cache (all but its last partial block) and answers the
 * same; a cache_salt keeps it apart. Seeded sampling repeats; two choices of one request differ. */
static void test_engine_prefix_cache_and_seed(void **state) {
    (void)state;
    server s;
    server_start(&s, 1, 64, 64, 4, 1);
    int32_t prompt[50], a[8], b[8];
    make_prompt(prompt, 50, 3);
    lj_sampling_params p;
    greedy(&p, 8);
    run_one(&s, prompt, 50, &p, a, NULL);
    lj_serve_request *r = lj_serve_request_new(prompt, 50, &p, 1, 0);
    assert_int_equal(lj_serve_submit(s.e, r), LJ_SERVE_QUEUED);
    while (!lj_serve_request_wait(r, lj_serve_request_total_tokens(r), 1.0)) {
    }
    assert_int_equal(lj_serve_request_cached_tokens(r), 48);
    lj_serve_request_lock(r);
    for (int i = 0; i < 8; i++) assert_int_equal(lj_serve_request_output(r, 0)->tokens[i].id, a[i]);
    lj_serve_request_unlock(r);
    lj_serve_request_release(r);
    r = lj_serve_request_new(prompt, 50, &p, 1, 77);
    assert_int_equal(lj_serve_submit(s.e, r), LJ_SERVE_QUEUED);
    while (!lj_serve_request_wait(r, lj_serve_request_total_tokens(r), 1.0)) {
    }
    assert_int_equal(lj_serve_request_cached_tokens(r), 0);
    lj_serve_request_release(r);
    /* seeds */
    lj_sampling_params q;
    lj_sampling_params_default(&q);
    q.max_tokens = 8;
    q.has_seed = 1;
    q.seed = 42;
    q.top_k = 20;
    q.top_p = 0.9;
    q.temperature = 1.5;
    run_one(&s, prompt, 10, &q, a, NULL);
    run_one(&s, prompt, 10, &q, b, NULL);
    assert_memory_equal(a, b, sizeof a);
    r = lj_serve_request_new(prompt, 10, &q, 2, 0);
    assert_int_equal(lj_serve_submit(s.e, r), LJ_SERVE_QUEUED);
    while (!lj_serve_request_wait(r, lj_serve_request_total_tokens(r), 1.0)) {
    }
    lj_serve_request_lock(r);
    int same = 1;
    for (int i = 0; i < 8; i++) {
        assert_int_equal(lj_serve_request_output(r, 0)->tokens[i].id, a[i]); /* choice 0 uses the seed itself */
        same &= lj_serve_request_output(r, 1)->tokens[i].id == a[i];
    }
    lj_serve_request_unlock(r);
    lj_serve_request_release(r);
    assert_false(same);
    server_stop(&s);
}

/* Aborting a request frees its sequences: queued ones before they run, and running ones mid-way
 * (the engine paused between the steps so that the order of events is fixed). */
static void test_engine_abort(void **state) {
    (void)state;
    server s;
    server_start(&s, 0, 64, 64, 4, 0);
    int32_t prompt[30];
    make_prompt(prompt, 30, 1);
    lj_sampling_params p;
    greedy(&p, 98);
    p.ignore_eos = 1;
    for (int midway = 0; midway < 2; midway++) {
        lj_serve_request *r = lj_serve_request_new(prompt, 30, &p, 3, 0);
        if (!midway) lj_serve_engine_pause(s.e, 1);
        assert_int_equal(lj_serve_submit(s.e, r), LJ_SERVE_QUEUED);
        if (midway) {
            lj_serve_request_wait(r, 0, 60.0); /* a first token */
            lj_serve_engine_pause(s.e, 1);
        }
        lj_serve_request_lock(r);
        const int64_t before = lj_serve_request_total_tokens(r);
        const int done = lj_serve_request_output(r, 0)->finish != LJ_FINISH_NONE;
        lj_serve_request_unlock(r);
        lj_serve_request_abort(s.e, r);
        lj_serve_engine_pause(s.e, 0);
        while (!lj_serve_request_wait(r, lj_serve_request_total_tokens(r), 1.0)) {
        }
        lj_serve_request_lock(r);
        if (!done) { /* (a request that ended before the pause has nothing to abort) */
            for (int i = 0; i < 3; i++) assert_int_equal(lj_serve_request_output(r, i)->finish, LJ_FINISH_ABORT);
            assert_int_equal(lj_serve_request_total_tokens(r), before);
        }
        if (!midway) assert_int_equal(before, 0);
        lj_serve_request_unlock(r);
        lj_serve_request_release(r);
        wait_blocks_free(&s);
    }
    server_stop(&s);
}

/* Beyond max_waiting_requests waiting requests, submissions are refused (HTTP 429), and
 * accepted again once the queue drains. */
static void test_engine_queue_bound(void **state) {
    (void)state;
    server s;
    g_max_waiting = 3;
    server_start(&s, 0, 64, 64, 4, 0);
    g_max_waiting = 100000;
    int32_t prompt[8];
    make_prompt(prompt, 8, 2);
    lj_sampling_params p;
    greedy(&p, 2);
    lj_serve_request *r[4];
    lj_serve_engine_pause(s.e, 1);
    for (int i = 0; i < 4; i++) {
        r[i] = lj_serve_request_new(prompt, 8, &p, 1, 0);
        assert_int_equal(lj_serve_submit(s.e, r[i]), i < 3 ? LJ_SERVE_QUEUED : LJ_SERVE_QUEUE_FULL);
    }
    lj_serve_engine_pause(s.e, 0);
    for (int i = 0; i < 3; i++)
        while (!lj_serve_request_wait(r[i], lj_serve_request_total_tokens(r[i]), 1.0)) {
        }
    wait_blocks_free(&s);
    assert_int_equal(lj_serve_submit(s.e, r[3]), LJ_SERVE_QUEUED);
    while (!lj_serve_request_wait(r[3], lj_serve_request_total_tokens(r[3]), 1.0)) {
    }
    for (int i = 0; i < 4; i++) lj_serve_request_release(r[i]);
    /* a prompt of max_model_len tokens (128 here) is refused, not queued: its block table would overflow */
    int32_t *longp = lj_malloc(128 * sizeof(int32_t));
    make_prompt(longp, 128, 3);
    lj_serve_request *lr = lj_serve_request_new(longp, 128, &p, 1, 0);
    assert_int_equal(lj_serve_submit(s.e, lr), LJ_SERVE_TOO_LONG);
    lj_serve_request_release(lr);
    lr = lj_serve_request_new(longp, 127, &p, 1, 0);
    assert_int_equal(lj_serve_submit(s.e, lr), LJ_SERVE_QUEUED);
    while (!lj_serve_request_wait(lr, lj_serve_request_total_tokens(lr), 1.0)) {
    }
    lj_serve_request_release(lr);
    free(longp);
    server_stop(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paged_attention_matches_training),
        cmocka_unit_test(test_kv_pool),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_engine_matches_generate_and_forward),
        cmocka_unit_test(test_engine_batching_preemption),
        cmocka_unit_test(test_engine_prefix_cache_and_seed),
        cmocka_unit_test(test_engine_abort),
        cmocka_unit_test(test_engine_queue_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* engine.c: the engine thread, the scheduler of one step, preemption, and the request
 * outputs. Contracts in serve/engine.h. */
#include "serve/engine.h"

#include <math.h>
#include <string.h>
#include <time.h>

const double lj_serve_hist_bounds[LJ_SERVE_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                            0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};

const char *lj_finish_reason_name(lj_finish_reason r) {
    switch (r) {
    case LJ_FINISH_STOP: return "stop";
    case LJ_FINISH_LENGTH: return "length";
    case LJ_FINISH_ABORT: return "abort";
    default: return "none";
    }
}

struct lj_serve_request {
    int32_t *prompt;
    int n_prompt, n_choices;
    lj_sampling_params params;
    uint64_t salt;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    lj_serve_output *out;
    int n_finished;
    int64_t total;            /* tokens over all choices */
    uint8_t *end_asked;       /* [n_choices] 0, or the lj_finish_reason the caller asked for */
    int cached;               /* prompt tokens found in the prefix cache (first choice) */
    double t_arrival, t_first;
};

typedef struct {
    lj_serve_request *req;
    int choice;
    int32_t *tokens;          /* prompt, then output */
    int n_tokens, cap, n_prompt;
    int n_computed;           /* positions whose keys and values are in the cache */
    int32_t *table;           /* [max_blocks] */
    uint64_t *hashes;         /* [max_blocks] chain hash of each registered full block */
    int n_blocks, n_hashed;
    lj_rng rng;
    double t_last;
} seq;

struct lj_serve_engine {
    lj_serve_model *sm;
    lj_serve_engine_options opt;
    lj_kv_pool pool;
    lj_sampler sampler;
    pthread_t thread;
    pthread_mutex_t mu;       /* inbox, flags, stats */
    pthread_cond_t cv;
    seq **inbox;
    int n_inbox, cap_inbox;
    int stopping, drain, abort_pending, paused, in_step;
    pthread_cond_t idle; /* signalled when a step or a weight update ends */
    lj_status (*load)(void *ctx); /* a weight update for the engine thread to run, when load_pending */
    void *load_ctx;
    int load_pending;
    lj_status load_status;
    int waiting_requests;     /* requests in the waiting queue (counted at each step) */
    int inbox_requests;       /* requests submitted since the engine thread last took the inbox */
    lj_serve_stats stats;
    /* the engine thread's own */
    seq **waiting, **running, **next_running; /* running: [max_num_seqs]; next_running: the step's new order */
    int n_waiting, cap_waiting, n_running;
    int32_t *b_ids, *b_pos, *b_slots, *b_seq, *b_tables, *b_rows, *b_start;
    seq **b_sched;
    int *b_take;
    uint64_t seed_counter;
};

/* ---- requests ---------------------------------------------------------------------- */

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

lj_serve_request *lj_serve_request_new(const int32_t *prompt, int n_prompt, const lj_sampling_params *p,
                                       int n_choices, uint64_t cache_salt) {
    LJ_ASSERT(n_prompt >= 1 && n_choices >= 1);
    lj_serve_request *r = lj_calloc(1, sizeof *r);
    r->prompt = lj_malloc((size_t)n_prompt * sizeof(int32_t));
    memcpy(r->prompt, prompt, (size_t)n_prompt * sizeof(int32_t));
    r->n_prompt = n_prompt;
    r->n_choices = n_choices;
    r->params = *p;
    r->salt = cache_salt;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 1;
    r->out = lj_calloc((size_t)n_choices, sizeof *r->out);
    for (int i = 0; i < n_choices; i++) r->out[i].stop_id = -1;
    r->end_asked = lj_calloc((size_t)n_choices, 1);
    r->t_arrival = now_sec();
    return r;
}

void lj_serve_request_release(lj_serve_request *r) {
    pthread_mutex_lock(&r->mu);
    const int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    for (int i = 0; i < r->n_choices; i++) free(r->out[i].tokens);
    free(r->out);
    free(r->end_asked);
    free(r->prompt);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void lj_serve_request_lock(lj_serve_request *r) { pthread_mutex_lock(&r->mu); }
void lj_serve_request_unlock(lj_serve_request *r) { pthread_mutex_unlock(&r->mu); }
const lj_serve_output *lj_serve_request_output(const lj_serve_request *r, int i) { return &r->out[i]; }
int lj_serve_request_choices(const lj_serve_request *r) { return r->n_choices; }
int64_t lj_serve_request_total_tokens(const lj_serve_request *r) { return r->total; }
int lj_serve_request_cached_tokens(const lj_serve_request *r) { return r->cached; }
int lj_serve_request_prompt_len(const lj_serve_request *r) { return r->n_prompt; }

int lj_serve_request_wait(lj_serve_request *r, int64_t seen, double timeout_sec) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const double t = (double)ts.tv_nsec * 1e-9 + timeout_sec;
    ts.tv_sec += (time_t)t;
    ts.tv_nsec = (long)((t - floor(t)) * 1e9);
    pthread_mutex_lock(&r->mu);
    while (r->total <= seen && r->n_finished < r->n_choices)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) != 0) break;
    const int done = r->n_finished == r->n_choices;
    pthread_mutex_unlock(&r->mu);
    return done;
}

static void ask_end(lj_serve_engine *e, lj_serve_request *r, int i, lj_finish_reason why) {
    int asked = 0;
    pthread_mutex_lock(&r->mu);
    for (int c = 0; c < r->n_choices; c++)
        if ((i < 0 || c == i) && !r->end_asked[c] && r->out[c].finish == LJ_FINISH_NONE) {
            r->end_asked[c] = (uint8_t)why;
            asked = 1;
        }
    pthread_mutex_unlock(&r->mu);
    if (!asked) return; /* nothing left to end: the engine is not touched (it may be gone) */
    pthread_mutex_lock(&e->mu);
    e->abort_pending = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void lj_serve_request_abort(lj_serve_engine *e, lj_serve_request *r) { ask_end(e, r, -1, LJ_FINISH_ABORT); }
void lj_serve_request_stop(lj_serve_engine *e, lj_serve_request *r, int i) { ask_end(e, r, i, LJ_FINISH_STOP); }

/* ---- statistics -------------------------------------------------------------------- */

static void hist_add(lj_serve_hist *h, double v) {
    int b = 0;
    while (b < LJ_SERVE_HIST_BUCKETS && v > lj_serve_hist_bounds[b]) b++;
    h->counts[b]++;
    h->sum += v;
    h->n++;
}

void lj_serve_engine_stats(lj_serve_engine *e, lj_serve_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    out->waiting = e->waiting_requests + e->inbox_requests;
    pthread_mutex_unlock(&e->mu);
}

/* ---- sequences ----------------------------------------------------------------------- */

static seq *seq_new(lj_serve_engine *e, lj_serve_request *r, int choice) {
    seq *s = lj_calloc(1, sizeof *s);
    s->req = r;
    s->choice = choice;
    s->cap = r->n_prompt + 16;
    s->tokens = lj_malloc((size_t)s->cap * sizeof(int32_t));
    memcpy(s->tokens, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
    s->n_tokens = s->n_prompt = r->n_prompt;
    s->table = lj_malloc((size_t)e->sm->max_blocks * sizeof(int32_t));
    s->hashes = lj_malloc((size_t)e->sm->max_blocks * sizeof(uint64_t));
    /* a seeded request draws the same tokens on every run; choice i of n from seed + i */
    lj_rng_seed(&s->rng, r->params.has_seed ? r->params.seed + (uint64_t)choice
                                            : 0x9E3779B97F4A7C15ull * (++e->seed_counter) ^ (uint64_t)(now_sec() * 1e9));
    return s;
}

static void seq_free_blocks(lj_serve_engine *e, seq *s) {
    lj_kv_pool_release_all(&e->pool, s->table, s->n_blocks);
    s->n_blocks = s->n_hashed = s->n_computed = 0;
}

static void seq_free(lj_serve_engine *e, seq *s) {
    seq_free_blocks(e, s);
    free(s->tokens);
    free(s->table);
    free(s->hashes);
    free(s);
}

/* Ends s with `why` (under no lock): publishes the reason, frees the blocks, drops the request
 * when it was its last choice. */
static void seq_finish(lj_serve_engine *e, seq *s, lj_finish_reason why, int32_t stop_id) {
    lj_serve_request *r = s->req;
    pthread_mutex_lock(&r->mu);
    lj_serve_output *o = &r->out[s->choice];
    if (o->finish == LJ_FINISH_NONE) {
        o->finish = why;
        o->stop_id = stop_id;
        r->n_finished++;
    }
    const int all = r->n_finished == r->n_choices;
    const lj_finish_reason first = r->out[0].finish;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (all) {
        pthread_mutex_lock(&e->mu);
        e->stats.finished[first]++;
        hist_add(&e->stats.e2e, now_sec() - r->t_arrival);
        pthread_mutex_unlock(&e->mu);
    }
    seq_free(e, s);
    lj_serve_request_release(r);
}

static void append_token(lj_serve_engine *e, seq *s, int32_t id, const lj_sample_info *info) {
    if (s->n_tokens == s->cap) {
        s->cap *= 2;
        s->tokens = lj_realloc(s->tokens, (size_t)s->cap * sizeof(int32_t));
    }
    s->tokens[s->n_tokens++] = id;
    lj_serve_request *r = s->req;
    const double t = now_sec();
    pthread_mutex_lock(&r->mu);
    lj_serve_output *o = &r->out[s->choice];
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 16;
        o->tokens = lj_realloc(o->tokens, (size_t)o->cap * sizeof *o->tokens);
    }
    lj_serve_token *tk = &o->tokens[o->n++];
    tk->id = id;
    if (info) tk->info = *info;
    else memset(&tk->info, 0, sizeof tk->info);
    r->total++;
    const int first = r->t_first == 0;
    if (first) r->t_first = t;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&e->mu);
    e->stats.generation_tokens++;
    if (first) hist_add(&e->stats.ttft, t - r->t_arrival);
    else if (s->t_last > 0) hist_add(&e->stats.tpot, t - s->t_last);
    pthread_mutex_unlock(&e->mu);
    s->t_last = t;
}

/* ---- scheduling ---------------------------------------------------------------------- */

static void push(seq ***arr, int *n, int *cap, seq *s, int front) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *arr = lj_realloc(*arr, (size_t)*cap * sizeof(seq *));
    }
    if (front) {
        memmove(*arr + 1, *arr, (size_t)*n * sizeof(seq *));
        (*arr)[0] = s;
    } else {
        (*arr)[*n] = s;
    }
    (*n)++;
}

/* Blocks so that positions [0, upto) have a slot; 0 when the pool ran out (none taken). */
static int grow_blocks(lj_serve_engine *e, seq *s, int upto) {
    const int need = (upto + LJ_KV_BLOCK_SIZE - 1) / LJ_KV_BLOCK_SIZE - s->n_blocks;
    if (need <= 0) return 1;
    if (need > e->pool.num_free) return 0;
    for (int i = 0; i < need; i++) s->table[s->n_blocks++] = lj_kv_pool_alloc(&e->pool);
    return 1;
}

static void preempt(lj_serve_engine *e, seq *s) {
    seq_free_blocks(e, s);
    push(&e->waiting, &e->n_waiting, &e->cap_waiting, s, 1);
    pthread_mutex_lock(&e->mu);
    e->stats.preemptions++;
    pthread_mutex_unlock(&e->mu);
}

/* Removes finished or aborted sequences the callers asked to end. */
static void apply_ends(lj_serve_engine *e, seq **arr, int *n) {
    int k = 0;
    for (int i = 0; i < *n; i++) {
        seq *s = arr[i];
        pthread_mutex_lock(&s->req->mu);
        const lj_finish_reason why = (lj_finish_reason)s->req->end_asked[s->choice];
        pthread_mutex_unlock(&s->req->mu);
        if (why) seq_finish(e, s, why, -1);
        else arr[k++] = s;
    }
    *n = k;
}

/* The end of s after its new token, if any. */
static lj_finish_reason check_end(const lj_serve_engine *e, const seq *s, int32_t *stop_id) {
    const lj_sampling_params *p = &s->req->params;
    const int32_t t = s->tokens[s->n_tokens - 1];
    const int no = s->n_tokens - s->n_prompt;
    *stop_id = -1;
    if (no >= p->min_tokens) {
        if (!p->ignore_eos)
            for (int i = 0; i < e->opt.num_eos; i++)
                if (t == e->opt.eos_ids[i]) return *stop_id = t, LJ_FINISH_STOP;
        for (int i = 0; i < p->num_stop_ids; i++)
            if (t == p->stop_ids[i]) return *stop_id = t, LJ_FINISH_STOP;
    }
    if (no >= p->max_tokens || s->n_tokens >= e->opt.max_model_len) return LJ_FINISH_LENGTH;
    return LJ_FINISH_NONE;
}

/* The pool's counts into the statistics, after a step (ran: one more step). */
static void publish(lj_serve_engine *e, int ran) {
    pthread_mutex_lock(&e->mu);
    e->stats.steps += ran;
    e->stats.blocks_used = lj_kv_pool_used(&e->pool);
    e->stats.prefix_queries = e->pool.queries;
    e->stats.prefix_hits = e->pool.hits;
    pthread_mutex_unlock(&e->mu);
}

/* Whether lj_sample would return the plain argmax of the logits for a sequence with `no` output
 * tokens so far: greedy, no logprobs, no penalty, no masked id (min_tokens reached). Such a row
 * takes the forward's greedy token and needs no logits on the host. */
static int greedy_only(const lj_sampling_params *p, int no) {
    return p->temperature <= 0.0 && p->logprobs < 0 && p->repetition_penalty == 1.0 && p->presence_penalty == 0.0 &&
           p->frequency_penalty == 0.0 && no >= p->min_tokens;
}

/* One step: schedule, forward, sample. Returns 0 when there was nothing to run. */
static int step(lj_serve_engine *e) {
    const double t_step = now_sec();
    apply_ends(e, e->running, &e->n_running);
    apply_ends(e, e->waiting, &e->n_waiting);
    int budget = e->opt.max_num_batched_tokens, S = 0, N = 0, preempted = 0, S_running;
    const int MB = e->sm->max_blocks;
    /* running sequences, in admission order; victims come from the end */
    for (int i = 0; i < e->n_running && budget > 0; i++) {
        seq *s = e->running[i];
        const int take = s->n_tokens - s->n_computed < budget ? s->n_tokens - s->n_computed : budget;
        while (!grow_blocks(e, s, s->n_computed + take)) {
            seq *victim = e->running[e->n_running - 1];
            e->n_running--;
            preempt(e, victim);
            preempted = 1;
            if (victim == s) break;
        }
        if (i >= e->n_running) break; /* s itself was preempted */
        e->b_sched[S] = s;
        e->b_take[S++] = take;
        budget -= take;
    }
    S_running = S;
    const int n_old = e->n_running; /* running[S_running, n_old): not scheduled this step */
    /* waiting sequences, in order, while the budgets last and nothing was preempted */
    while (!preempted && e->n_waiting > 0 && e->n_running < e->opt.max_num_seqs && budget > 0) {
        seq *s = e->waiting[0];
        if (s->n_blocks == 0) { /* the longest cached prefix, leaving at least one token to compute */
            const int hit = lj_kv_pool_lookup(&e->pool, s->tokens, s->n_tokens, s->req->salt,
                                              (s->n_tokens - 1) / LJ_KV_BLOCK_SIZE, s->table, s->hashes);
            s->n_blocks = s->n_hashed = hit;
            s->n_computed = hit * LJ_KV_BLOCK_SIZE;
            if (s->choice == 0 && s->n_tokens == s->n_prompt) s->req->cached = s->n_computed;
        }
        const int take = s->n_tokens - s->n_computed < budget ? s->n_tokens - s->n_computed : budget;
        if (!grow_blocks(e, s, s->n_computed + take)) {
            /* a waiting sequence holds no blocks: with nothing running, the head of the queue then
             * always fits (max_model_len <= the cache), so the engine cannot stall */
            seq_free_blocks(e, s);
            break;
        }
        memmove(e->waiting, e->waiting + 1, (size_t)(--e->n_waiting) * sizeof(seq *));
        e->running[e->n_running++] = s;
        e->b_sched[S] = s;
        e->b_take[S++] = take;
        budget -= take;
    }
    /* the requests still waiting: those with a choice in the queue */
    {
        int w = 0;
        for (int i = 0; i < e->n_waiting; i++)
            if (e->waiting[i]->choice == 0 && e->waiting[i]->n_tokens == e->waiting[i]->n_prompt) w++;
        int running = 0;
        for (int i = 0; i < e->n_running; i++) running += e->running[i]->choice == 0;
        pthread_mutex_lock(&e->mu);
        e->waiting_requests = w;
        e->stats.running = running;
        pthread_mutex_unlock(&e->mu);
    }
    if (S == 0) {
        publish(e, 0);
        return 0;
    }
    int M = 0, need_logits = 0, prompt_rows = 0;
    for (int k = 0; k < S; k++) {
        seq *s = e->b_sched[k];
        const int start = s->n_computed == 0 ? N : -1; /* a first chunk attends within itself */
        /* a decode row: the one new token after the prompt, its earlier positions cached */
        prompt_rows |= !(e->b_take[k] == 1 && s->n_computed == s->n_tokens - 1 && s->n_computed >= s->n_prompt);
        for (int t = 0; t < e->b_take[k]; t++) {
            const int p = s->n_computed + t;
            e->b_ids[N] = s->tokens[p];
            e->b_pos[N] = p;
            e->b_slots[N] = s->table[p / LJ_KV_BLOCK_SIZE] * LJ_KV_BLOCK_SIZE + p % LJ_KV_BLOCK_SIZE;
            e->b_seq[N] = k;
            e->b_start[N] = start;
            N++;
        }
        memcpy(e->b_tables + (size_t)k * MB, s->table, (size_t)s->n_blocks * sizeof(int32_t));
        if (s->n_computed + e->b_take[k] == s->n_tokens) {
            e->b_rows[M++] = N - 1;
            need_logits |= !greedy_only(&s->req->params, s->n_tokens - s->n_prompt);
        }
    }
    const lj_serve_batch batch = {N, S, M, e->b_ids, e->b_pos, e->b_slots, e->b_seq, e->b_tables, e->b_rows, e->b_start};
    const float *logits = NULL;
    const double t_fwd = now_sec();
    const int32_t *greedy = lj_serve_forward(e->sm, &batch, need_logits ? &logits : NULL);
    const double fwd = now_sec() - t_fwd;
    /* the step's account, before its tokens wake their callers (who may read the statistics) */
    pthread_mutex_lock(&e->mu);
    if (prompt_rows) e->stats.steps_prompt++, e->stats.forward_prompt_sec += fwd;
    else e->stats.steps_decode++, e->stats.forward_decode_sec += fwd;
    e->stats.host_sec += t_fwd - t_step;
    pthread_mutex_unlock(&e->mu);
    const double t_after = now_sec();
    int m = 0, n_next = 0;
    seq **next = e->next_running;
    for (int k = 0; k < S; k++) {
        if (k == S_running) /* the old running sequences not scheduled keep their place before the new ones */
            for (int i = S_running; i < n_old; i++) next[n_next++] = e->running[i];
        seq *s = e->b_sched[k];
        s->n_computed += e->b_take[k];
        while ((s->n_hashed + 1) * LJ_KV_BLOCK_SIZE <= s->n_computed) { /* full blocks into the prefix cache */
            const int b = s->n_hashed;
            s->hashes[b] = lj_kv_pool_register(&e->pool, s->table[b], b ? s->hashes[b - 1] : 0,
                                                s->tokens + (size_t)b * LJ_KV_BLOCK_SIZE, s->req->salt);
            s->n_hashed++;
        }
        if (s->n_computed < s->n_tokens) { /* a prompt chunk: nothing to sample yet */
            next[n_next++] = s;
            continue;
        }
        const lj_sampling_params *p = &s->req->params;
        lj_sample_info info;
        const int row = m++;
        const int32_t t = greedy_only(p, s->n_tokens - s->n_prompt)
                              ? greedy[row]
                              : lj_sample(&e->sampler, logits + (size_t)row * e->sm->m->spec.V, p, s->tokens,
                                          s->n_prompt, s->tokens + s->n_prompt, s->n_tokens - s->n_prompt,
                                          e->opt.eos_ids, e->opt.num_eos, &s->rng, p->logprobs >= 0 ? &info : NULL);
        append_token(e, s, t, p->logprobs >= 0 ? &info : NULL);
        int32_t stop_id;
        const lj_finish_reason why = check_end(e, s, &stop_id);
        if (why) seq_finish(e, s, why, stop_id);
        else next[n_next++] = s;
    }
    if (S_running == S)
        for (int i = S_running; i < n_old; i++) next[n_next++] = e->running[i];
    e->next_running = e->running;
    e->running = next;
    e->n_running = n_next;
    pthread_mutex_lock(&e->mu);
    e->stats.host_sec += now_sec() - t_after; /* sampling and bookkeeping */
    pthread_mutex_unlock(&e->mu);
    publish(e, 1);
    return 1;
}

static void *engine_main(void *arg) {
    lj_serve_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        for (int i = 0; i < e->n_inbox; i++) push(&e->waiting, &e->n_waiting, &e->cap_waiting, e->inbox[i], 0);
        e->waiting_requests += e->inbox_requests;
        e->n_inbox = e->inbox_requests = 0;
        e->abort_pending = 0;
        if (e->load_pending) { /* between two steps, on the thread (and device context) that runs them */
            pthread_mutex_unlock(&e->mu);
            const lj_status st = e->load(e->load_ctx);
            e->sm->m->ops->synchronize();
            lj_kv_pool_reset_prefix_cache(&e->pool);
            pthread_mutex_lock(&e->mu);
            e->load_status = st;
            e->load_pending = 0;
            pthread_cond_broadcast(&e->idle);
            continue;
        }
        if (e->stopping && (!e->drain || (e->n_waiting == 0 && e->n_running == 0))) break;
        if (e->paused && !e->stopping) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        if (e->n_waiting == 0 && e->n_running == 0) {
            e->stats.running = 0;
            e->stats.blocks_used = lj_kv_pool_used(&e->pool);
            e->waiting_requests = 0;
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        e->in_step = 1;
        pthread_mutex_unlock(&e->mu);
        const int ran = step(e);
        pthread_mutex_lock(&e->mu);
        e->in_step = 0;
        pthread_cond_broadcast(&e->idle);
        if (!ran && e->n_inbox == 0 && !e->abort_pending && !e->stopping && !e->load_pending) pthread_cond_wait(&e->cv, &e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    /* not draining: every sequence left is aborted */
    for (int i = 0; i < e->n_running; i++) seq_finish(e, e->running[i], LJ_FINISH_ABORT, -1);
    for (int i = 0; i < e->n_waiting; i++) seq_finish(e, e->waiting[i], LJ_FINISH_ABORT, -1);
    e->n_running = e->n_waiting = 0;
    return NULL;
}

lj_status lj_serve_engine_start(lj_serve_engine **out, lj_serve_model *sm, const lj_serve_engine_options *opt) {
    if (opt->max_num_seqs < 1 || opt->max_num_seqs > sm->max_seqs || opt->max_num_batched_tokens < 1 ||
        opt->max_num_batched_tokens > sm->max_tokens || opt->max_model_len > sm->max_model_len)
        return lj_fail(LJ_ERR_ARG, "serve: the engine's budgets exceed the buffers of the forward");
    if ((int64_t)opt->num_blocks * LJ_KV_BLOCK_SIZE < opt->max_model_len)
        return lj_fail(LJ_ERR_ARG,
                       "serve: the KV cache holds %lld tokens, fewer than --max-model-len %d: one sequence of the "
                       "longest length must fit (give --kv-cache-tokens >= %d, or a smaller --max-model-len)",
                       (long long)opt->num_blocks * LJ_KV_BLOCK_SIZE, opt->max_model_len, opt->max_model_len);
    lj_serve_engine *e = lj_calloc(1, sizeof *e);
    e->sm = sm;
    e->opt = *opt;
    lj_kv_pool_init(&e->pool, opt->num_blocks, opt->enable_prefix_caching);
    lj_sampler_init(&e->sampler, sm->m->spec.V);
    const size_t T = (size_t)opt->max_num_batched_tokens, S = (size_t)opt->max_num_seqs;
    e->b_ids = lj_malloc(T * sizeof(int32_t));
    e->b_pos = lj_malloc(T * sizeof(int32_t));
    e->b_slots = lj_malloc(T * sizeof(int32_t));
    e->b_seq = lj_malloc(T * sizeof(int32_t));
    e->b_start = lj_malloc(T * sizeof(int32_t));
    e->b_rows = lj_malloc(S * sizeof(int32_t));
    e->b_tables = lj_malloc(S * sm->max_blocks * sizeof(int32_t));
    e->b_sched = lj_malloc(S * sizeof(seq *));
    e->b_take = lj_malloc(S * sizeof(int));
    e->running = lj_malloc(S * sizeof(seq *));
    e->next_running = lj_malloc(S * sizeof(seq *));
    e->stats.blocks_total = opt->num_blocks;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->idle, NULL);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        lj_serve_engine_stop(e, 0);
        return lj_fail(LJ_ERR_OOM, "serve: cannot start the engine thread");
    }
    *out = e;
    return LJ_OK;
}

void lj_serve_engine_stop(lj_serve_engine *e, int drain) {
    if (e->thread) {
        pthread_mutex_lock(&e->mu);
        e->stopping = 1;
        e->drain = drain;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    for (int i = 0; i < e->n_inbox; i++) seq_finish(e, e->inbox[i], LJ_FINISH_ABORT, -1);
    lj_kv_pool_free(&e->pool);
    lj_sampler_free(&e->sampler);
    free(e->inbox), free(e->waiting), free(e->running), free(e->next_running);
    free(e->b_ids), free(e->b_pos), free(e->b_slots), free(e->b_seq), free(e->b_start), free(e->b_rows), free(e->b_tables);
    free(e->b_sched), free(e->b_take);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->idle);
    free(e);
}

void lj_serve_engine_pause(lj_serve_engine *e, int paused) {
    pthread_mutex_lock(&e->mu);
    e->paused = paused;
    pthread_cond_signal(&e->cv);
    while (paused && e->in_step) pthread_cond_wait(&e->idle, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

int lj_serve_submit(lj_serve_engine *e, lj_serve_request *r) {
    pthread_mutex_lock(&e->mu);
    int rc = LJ_SERVE_QUEUED;
    if (r->n_prompt >= e->opt.max_model_len) rc = LJ_SERVE_TOO_LONG; /* its block table would overflow */
    else if (e->stopping) rc = LJ_SERVE_STOPPING;
    else if (e->waiting_requests + e->inbox_requests >= e->opt.max_waiting_requests) rc = LJ_SERVE_QUEUE_FULL;
    if (rc == LJ_SERVE_QUEUED) {
        pthread_mutex_lock(&r->mu);
        r->refs += r->n_choices; /* one per sequence, dropped when it finishes */
        pthread_mutex_unlock(&r->mu);
        for (int i = 0; i < r->n_choices; i++) push(&e->inbox, &e->n_inbox, &e->cap_inbox, seq_new(e, r, i), 0);
        e->inbox_requests++;
        e->stats.prompt_tokens += r->n_prompt;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

lj_status lj_serve_engine_update_weights(lj_serve_engine *e, lj_status (*load)(void *ctx), void *ctx) {
    pthread_mutex_lock(&e->mu);
    if (e->stopping || e->load_pending) {
        pthread_mutex_unlock(&e->mu);
        return lj_fail(LJ_ERR_ARG, "serve: %s", e->stopping ? "the engine is stopping" : "a weight update is under way");
    }
    e->load = load;
    e->load_ctx = ctx;
    e->load_pending = 1;
    pthread_cond_signal(&e->cv);
    while (e->load_pending) pthread_cond_wait(&e->idle, &e->mu);
    const lj_status s = e->load_status;
    pthread_mutex_unlock(&e->mu);
    return s;
}

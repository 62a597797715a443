/* engine.h: the serving engine: requests in, tokens out, one engine thread that owns the
 * schedule, the KV cache's blocks and the forward (serve/forward.h). The design is vLLM V1's
 * EngineCore (docs/serving.md): each step is a set of (sequence, token count) pairs under a token
 * budget (max_num_batched_tokens) and a sequence budget (max_num_seqs): running sequences first
 * (one decode token each, or the next chunk of a prompt: chunked prefill), then waiting ones in
 * arrival order, each starting after its longest cached prefix (serve/kv_cache.h). When blocks
 * run out, the most recently admitted running sequence is preempted by recompute (its blocks
 * freed, it waits again at the head of the queue with its tokens so far). A request with n > 1
 * is n sequences. Stop strings are the caller's (they need text): it ends a sequence with
 * lj_serve_request_stop, as vLLM's output processor aborts in the engine.
 *
 * Threads: lj_serve_submit, lj_serve_request_* and lj_serve_engine_stats may be called from any
 * thread; a request's outputs are read under its lock (lj_serve_request_lock) or through
 * lj_serve_request_wait. */
#ifndef LJ_SERVE_ENGINE_H
#define LJ_SERVE_ENGINE_H

#include <pthread.h>

#include "serve/forward.h"
#include "serve/sampling.h"

typedef enum {
    LJ_FINISH_NONE = 0,
    LJ_FINISH_STOP,    /* EOS, a stop id, or (set by the caller) a stop string */
    LJ_FINISH_LENGTH,  /* max_tokens, or max_model_len */
    LJ_FINISH_ABORT,   /* cancelled (the client went away, or the server stops without draining) */
} lj_finish_reason;

const char *lj_finish_reason_name(lj_finish_reason r); /* "stop", "length", "abort" */

/* One generated token and, when asked, its raw logprobs. */
typedef struct {
    int32_t id;
    lj_sample_info info;
} lj_serve_token;

/* One choice's output so far. */
typedef struct {
    lj_serve_token *tokens;
    int n, cap;
    lj_finish_reason finish;
    int32_t stop_id;       /* the EOS or stop id that ended it, else -1 */
} lj_serve_output;

typedef struct lj_serve_request lj_serve_request;

typedef struct {
    int max_num_seqs;            /* sequences per step (vLLM --max-num-seqs) */
    int max_num_batched_tokens;  /* tokens per step (--max-num-batched-tokens) */
    int max_model_len;           /* positions per sequence (--max-model-len) */
    int num_blocks;              /* KV cache blocks of LJ_KV_BLOCK_SIZE positions */
    int enable_prefix_caching;
    int max_waiting_requests;    /* requests waiting beyond which lj_serve_submit refuses */
    int num_eos;
    int32_t eos_ids[4];          /* the model's end ids (EOS, the chat turn's end) */
} lj_serve_engine_options;

/* Histogram buckets of the latency metrics (seconds, Prometheus "le" bounds). */
#define LJ_SERVE_HIST_BUCKETS 14
extern const double lj_serve_hist_bounds[LJ_SERVE_HIST_BUCKETS];

typedef struct {
    uint64_t counts[LJ_SERVE_HIST_BUCKETS + 1]; /* the last: +Inf */
    double sum;
    uint64_t n;
} lj_serve_hist;

typedef struct {
    int running, waiting;          /* requests */
    int blocks_used, blocks_total;
    int64_t prefix_queries, prefix_hits;  /* tokens */
    int64_t prompt_tokens, generation_tokens, preemptions, steps;
    int64_t finished[4];           /* requests by lj_finish_reason of their first choice */
    /* where a step's time goes (seconds, the engine thread's monotonic clock): the forward (its
     * launch to the sampled tokens on the host) of steps with prompt rows (a prompt's tokens, or a
     * preempted sequence's recomputed ones) and of decode-only steps, and the rest of every step
     * (scheduling, sampling, bookkeeping); counted before the step's tokens reach their callers */
    int64_t steps_prompt, steps_decode;
    double forward_prompt_sec, forward_decode_sec, host_sec;
    lj_serve_hist ttft, tpot, e2e; /* time to first token, per output token after it, end to end */
} lj_serve_stats;

typedef struct lj_serve_engine lj_serve_engine;

/* Starts the engine thread over sm (its caches hold opt->num_blocks blocks). Errors: LJ_ERR_ARG
 * when max_model_len exceeds the cache, or a budget is < 1. */
lj_status lj_serve_engine_start(lj_serve_engine **e, lj_serve_model *sm, const lj_serve_engine_options *opt);

/* Stops the engine: no new submissions; drain = 1 finishes the requests in flight first, 0 aborts
 * them. Joins the thread and frees the engine (requests still referenced by callers stay valid). */
void lj_serve_engine_stop(lj_serve_engine *e, int drain);

/* paused = 1: waits for the step under way to end; then the engine thread runs no step until
 * called with 0;
 * submissions and aborts queue meanwhile. For tests that need a fixed order of events. */
void lj_serve_engine_pause(lj_serve_engine *e, int paused);

/* Swaps the weights between two steps (SGLang's update_weights_from_disk; the trainer-to-server
 * handoff): once the step under way has ended, the engine thread runs load(ctx) (which writes
 * the model's weights, on the thread and device context of the steps), drops the prefix cache
 * (its blocks were computed with the old weights) and steps on; the caller waits for that.
 * Requests in flight go on with the new weights over the KV cache they have. Returns load's
 * status; LJ_ERR_ARG when the engine is stopping or another update is under way. */
lj_status lj_serve_engine_update_weights(lj_serve_engine *e, lj_status (*load)(void *ctx), void *ctx);

void lj_serve_engine_stats(lj_serve_engine *e, lj_serve_stats *out);

/* A new request: prompt ids[0..n) (copied), parameters, n choices (>= 1), cache_salt (0: none).
 * The caller holds one reference. */
lj_serve_request *lj_serve_request_new(const int32_t *prompt, int n_prompt, const lj_sampling_params *p,
                                       int n_choices, uint64_t cache_salt);
void lj_serve_request_release(lj_serve_request *r);

/* Queues r (the engine takes its own reference). Returns LJ_SERVE_QUEUED, LJ_SERVE_QUEUE_FULL
 * (max_waiting_requests are waiting: the HTTP layer answers 429), LJ_SERVE_STOPPING (503) or
 * LJ_SERVE_TOO_LONG (a prompt of max_model_len tokens or more, which the API refuses before;
 * r is not queued). */
enum { LJ_SERVE_QUEUED = 0, LJ_SERVE_QUEUE_FULL, LJ_SERVE_STOPPING, LJ_SERVE_TOO_LONG };
int lj_serve_submit(lj_serve_engine *e, lj_serve_request *r);

/* Ends every choice (the client went away): their blocks are freed at the next step. A request
 * whose choices have all finished is left alone, without touching e. */
void lj_serve_request_abort(lj_serve_engine *e, lj_serve_request *r);
/* Ends choice i with LJ_FINISH_STOP (a stop string matched); tokens already appended stay. */
void lj_serve_request_stop(lj_serve_engine *e, lj_serve_request *r, int i);

/* Waits up to timeout_sec until choice outputs grow past `seen` tokens in total or all choices
 * finish; returns 1 when all have finished. */
int lj_serve_request_wait(lj_serve_request *r, int64_t seen, double timeout_sec);
void lj_serve_request_lock(lj_serve_request *r);
void lj_serve_request_unlock(lj_serve_request *r);
/* Under the lock: */
const lj_serve_output *lj_serve_request_output(const lj_serve_request *r, int i);
int lj_serve_request_choices(const lj_serve_request *r);
int64_t lj_serve_request_total_tokens(const lj_serve_request *r);
int lj_serve_request_cached_tokens(const lj_serve_request *r); /* prompt tokens found in the prefix cache */
int lj_serve_request_prompt_len(const lj_serve_request *r);

#endif

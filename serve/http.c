/* http.c: libmicrohttpd glue: routing, authentication, request bodies, blocking answers and
 * Server-Sent Events streams, client disconnects, metrics text. Contracts in serve/http.h. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "serve/http.h"

#include "base/fs.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct lj_http_server {
    struct MHD_Daemon *d;
    lj_http_options opt;
    pthread_mutex_t mu;
    lj_serve_engine *e;
    const lj_api_model *m;
    int ready, stopping;
    int in_flight;           /* generation requests not yet completed (their answer sent or cut) */
    pthread_cond_t idle;     /* signalled when in_flight drops */
    long started;
    lj_http_weights_loader load_weights;
    void *load_ctx;
    pthread_mutex_t load_mu; /* one weight update at a time */
};

typedef struct {
    char *body;
    size_t len, cap;
    int too_large;
    int counted; /* a generation request: in_flight until MHD says it completed */
} conn_ctx;

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type, char *body,
                             const char *request_id) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (request_id && request_id[0]) MHD_add_response_header(r, "X-Request-Id", request_id);
    const enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *param, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return reply(c, status, "application/json", lj_api_error_json((int)status, msg, param), NULL);
}

/* 1 when the client closed its side of the connection (or it broke). */
static int client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) < 0) return 0;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static int64_t tokens_now(lj_serve_request *r) {
    lj_serve_request_lock(r);
    const int64_t n = lj_serve_request_total_tokens(r);
    lj_serve_request_unlock(r);
    return n;
}

/* ---- streams ------------------------------------------------------------------------------- */

typedef struct {
    lj_api_request req;
    lj_api_stream st;
    lj_serve_request *r;
    lj_serve_engine *e;
    struct MHD_Connection *conn;
    char *pending;
    size_t len, cap, off;
    int ended;  /* [DONE] is in pending */
} sse;

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse *s = cls;
    while (s->off == s->len) {
        if (s->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        s->off = s->len = 0;
        const int64_t seen = tokens_now(s->r);
        const int all = lj_api_stream_update(&s->st);
        lj_api_stream_events(&s->st, &s->pending, &s->len, &s->cap, all);
        if (all) s->ended = 1;
        if (s->len) break;
        if (client_gone(s->conn)) {
            lj_serve_request_abort(s->e, s->r);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        lj_serve_request_wait(s->r, seen, 0.05);
    }
    const size_t n = s->len - s->off < max ? s->len - s->off : max;
    memcpy(buf, s->pending + s->off, n);
    s->off += n;
    return (ssize_t)n;
}

static void sse_free(void *cls) {
    sse *s = cls;
    lj_serve_request_abort(s->e, s->r); /* no-op for a finished request; frees the sequences of one cut short */
    lj_api_stream_free(&s->st);
    lj_serve_request_release(s->r);
    lj_api_request_free(&s->req);
    free(s->pending);
    free(s);
}

/* ---- generation routes ------------------------------------------------------------------- */

static enum MHD_Result generate(lj_http_server *h, struct MHD_Connection *c, lj_api_kind kind, conn_ctx *cc) {
    if (!cc->counted) { /* until `completed`: a drain waits for the answer to be sent whole */
        pthread_mutex_lock(&h->mu);
        h->in_flight++;
        pthread_mutex_unlock(&h->mu);
        cc->counted = 1;
    }
    lj_api_request req;
    lj_api_error err;
    if (lj_api_parse(h->m, kind, cc->body ? cc->body : "", cc->len, &req, &err))
        return reply_error(c, (unsigned)err.status, err.param, "%s", err.message);
    const char *hdr_id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
    if (hdr_id && !req.request_id[0] && strlen(hdr_id) < 80 && lj_utf8_check(hdr_id, strlen(hdr_id)) == strlen(hdr_id))
        snprintf(req.request_id, sizeof req.request_id, "%s", hdr_id);
    lj_serve_request *r = lj_serve_request_new(req.prompt, req.n_prompt, &req.params, req.n, req.cache_salt);
    const int q = lj_serve_submit(h->e, r);
    if (q != LJ_SERVE_QUEUED) {
        lj_serve_request_release(r);
        lj_api_request_free(&req);
        if (q == LJ_SERVE_QUEUE_FULL)
            return reply_error(c, 429, NULL, "too many requests are waiting (--max-waiting-requests): retry later");
        if (q == LJ_SERVE_TOO_LONG) /* lj_api_parse refuses these first */
            return reply_error(c, 400, "prompt", "the prompt has %d tokens, the model's maximum context length is %d",
                               req.n_prompt, h->m->max_model_len);
        return reply_error(c, 503, NULL, "the server is shutting down");
    }
    if (req.stream) {
        sse *s = lj_calloc(1, sizeof *s);
        s->req = req;
        s->r = r;
        s->e = h->e;
        s->conn = c;
        lj_api_stream_init(&s->st, &s->req, r, h->e, h->m);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, s, sse_free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Request-Id", s->st.id);
        const enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return ok;
    }
    lj_api_stream st;
    lj_api_stream_init(&st, &req, r, h->e, h->m);
    int gone = 0;
    for (;;) {
        const int64_t seen = tokens_now(r);
        if (lj_api_stream_update(&st)) break;
        if (client_gone(c)) {
            gone = 1;
            break;
        }
        lj_serve_request_wait(r, seen, 0.05);
    }
    enum MHD_Result ok = MHD_NO;
    if (gone) lj_serve_request_abort(h->e, r); /* the sequences are freed at the next step; no answer */
    else ok = reply(c, MHD_HTTP_OK, "application/json", lj_api_response_json(&st), st.id);
    lj_api_stream_free(&st);
    lj_serve_request_release(r);
    lj_api_request_free(&req);
    return ok;
}

/* ---- metrics --------------------------------------------------------------------------------- */

static void put(char **b, size_t *n, size_t *cap, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        const int k = vsnprintf(*b + *n, *cap - *n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < *cap - *n) {
            *n += (size_t)k;
            return;
        }
        *cap = *cap * 2 + (size_t)(k > 0 ? k : 0);
        *b = lj_realloc(*b, *cap);
    }
}

static void put_hist(char **b, size_t *n, size_t *cap, const char *name, const char *help, const lj_serve_hist *h,
                     const char *model) {
    put(b, n, cap, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t acc = 0;
    for (int i = 0; i < LJ_SERVE_HIST_BUCKETS; i++) {
        acc += h->counts[i];
        put(b, n, cap, "%s_bucket{model_name=\"%s\",le=\"%g\"} %llu\n", name, model, lj_serve_hist_bounds[i],
            (unsigned long long)acc);
    }
    acc += h->counts[LJ_SERVE_HIST_BUCKETS];
    put(b, n, cap, "%s_bucket{model_name=\"%s\",le=\"+Inf\"} %llu\n", name, model, (unsigned long long)acc);
    put(b, n, cap, "%s_sum{model_name=\"%s\"} %.9g\n%s_count{model_name=\"%s\"} %llu\n", name, model, h->sum, name,
        model, (unsigned long long)h->n);
}

char *lj_http_metrics_text(const lj_serve_stats *st, const char *model) {
    size_t n = 0, cap = 4096;
    char *b = lj_malloc(cap);
    b[0] = 0;
    struct { const char *name, *type, *help; double v; } rows[] = {
        {"vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", st->running},
        {"vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", st->waiting},
        {"vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
         st->blocks_total ? (double)st->blocks_used / st->blocks_total : 0},
        {"vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
         (double)st->prefix_queries},
        {"vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
         (double)st->prefix_hits},
        {"vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", (double)st->prompt_tokens},
        {"vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
         (double)st->generation_tokens},
        {"vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
         (double)st->preemptions},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        put(&b, &n, &cap, "# HELP %s %s\n# TYPE %s %s\n%s{model_name=\"%s\"} %.17g\n", rows[i].name, rows[i].help,
            rows[i].name, rows[i].type, rows[i].name, model, rows[i].v);
    put(&b, &n, &cap, "# HELP vllm:request_success_total Count of successfully processed requests.\n"
                      "# TYPE vllm:request_success_total counter\n");
    for (int r = LJ_FINISH_STOP; r <= LJ_FINISH_ABORT; r++)
        put(&b, &n, &cap, "vllm:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %lld\n",
            lj_finish_reason_name((lj_finish_reason)r), model, (long long)st->finished[r]);
    put_hist(&b, &n, &cap, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
             &st->ttft, model);
    put_hist(&b, &n, &cap, "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
             &st->tpot, model);
    put_hist(&b, &n, &cap, "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
             &st->e2e, model);
    return b;
}

/* ---- weight updates ------------------------------------------------------------------------ */

void lj_http_set_weights_loader(lj_http_server *h, lj_http_weights_loader load, void *ctx) {
    pthread_mutex_lock(&h->mu);
    h->load_weights = load;
    h->load_ctx = ctx;
    pthread_mutex_unlock(&h->mu);
}

/* {"model_path": DIR} or {} -> SGLang's {"success", "message"}; 400 for a body that is not that,
 * and for a checkpoint that cannot be loaded (the served weights stay). */
static enum MHD_Result update_weights(lj_http_server *h, struct MHD_Connection *c, conn_ctx *cc) {
    cJSON *j = cJSON_ParseWithLength(cc->body ? cc->body : "{}", cc->body ? cc->len : 2);
    const cJSON *mp = cJSON_GetObjectItemCaseSensitive(j, "model_path");
    if (!cJSON_IsObject(j) || (mp && !cJSON_IsString(mp) && !cJSON_IsNull(mp))) {
        cJSON_Delete(j);
        return reply_error(c, 400, "model_path", "the body must be a JSON object with an optional string model_path");
    }
    char dir[LJ_PATH_MAX] = "";
    pthread_mutex_lock(&h->load_mu);
    const double t0 = lj_time_sec();
    const lj_status s = h->load_weights(h->load_ctx, cJSON_IsString(mp) ? mp->valuestring : NULL, dir);
    const double dt = lj_time_sec() - t0;
    pthread_mutex_unlock(&h->load_mu);
    cJSON_Delete(j);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "success", s == LJ_OK);
    char msg[1024];
    if (s == LJ_OK) snprintf(msg, sizeof msg, "weights of %s loaded in %.3f s", dir, dt);
    else snprintf(msg, sizeof msg, "%s", lj_error_message());
    cJSON_AddStringToObject(o, "message", msg);
    if (s == LJ_OK) lj_log_info("serve: %s", msg);
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return reply(c, s == LJ_OK ? 200 : 400, "application/json", out, NULL);
}

/* ---- the handler ------------------------------------------------------------------------------ */

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    lj_http_server *h = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        cc = lj_calloc(1, sizeof *cc);
        *con_cls = cc;
        return MHD_YES;
    }
    if (*upload_size) { /* body bytes */
        if (cc->len + *upload_size > h->opt.max_body_bytes) cc->too_large = 1;
        if (!cc->too_large) {
            if (cc->len + *upload_size + 1 > cc->cap) {
                cc->cap = (cc->len + *upload_size + 1) * 2;
                cc->body = lj_realloc(cc->body, cc->cap);
            }
            memcpy(cc->body + cc->len, upload, *upload_size);
            cc->len += *upload_size;
            cc->body[cc->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    const int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    pthread_mutex_lock(&h->mu);
    const int ready = h->ready && !h->stopping;
    lj_serve_engine *e = h->e;
    pthread_mutex_unlock(&h->mu);
    if (strcmp(url, "/health") == 0) {
        if (!get) return reply_error(c, 405, NULL, "use GET for %s", url);
        return ready ? reply(c, 200, "application/json", strdup(""), NULL)
                     : reply_error(c, 503, NULL, h->stopping ? "the server is shutting down" : "the model is loading");
    }
    if (!ready) return reply_error(c, 503, NULL, h->stopping ? "the server is shutting down" : "the model is loading");
    if (h->opt.api_key && (strncmp(url, "/v1/", 4) == 0 || strcmp(url, "/update_weights_from_disk") == 0)) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (!auth || strncmp(auth, "Bearer ", 7) != 0 || strcmp(auth + 7, h->opt.api_key) != 0)
            return reply_error(c, 401, NULL, "Unauthorized: a valid API key (Authorization: Bearer ...) is required");
    }
    if (cc->too_large)
        return reply_error(c, 413, NULL, "the request body exceeds %zu bytes", h->opt.max_body_bytes);
    struct { const char *url; int post; } routes[] = {{"/v1/models", 0}, {"/metrics", 0}, {"/v1/completions", 1},
                                                      {"/v1/chat/completions", 1}, {"/tokenize", 1}, {"/detokenize", 1},
                                                      {"/update_weights_from_disk", 1}};
    size_t k = 0;
    while (k < sizeof routes / sizeof routes[0] && strcmp(url, routes[k].url) != 0) k++;
    if (k == 6 && !h->load_weights) k = sizeof routes / sizeof routes[0];
    if (k == sizeof routes / sizeof routes[0]) return reply_error(c, 404, NULL, "no route %s %s", method, url);
    if (routes[k].post ? !post : !get) return reply_error(c, 405, NULL, "use %s for %s", routes[k].post ? "POST" : "GET", url);
    lj_api_error err;
    char *out = NULL;
    switch (k) {
    case 0: return reply(c, 200, "application/json", lj_api_models_json(h->m, h->started), NULL);
    case 1: {
        lj_serve_stats st;
        lj_serve_engine_stats(e, &st);
        return reply(c, 200, "text/plain; version=0.0.4", lj_http_metrics_text(&st, h->m->model_name), NULL);
    }
    case 2: return generate(h, c, LJ_API_COMPLETION, cc);
    case 3: return generate(h, c, LJ_API_CHAT, cc);
    case 4:
        if (lj_api_tokenize(h->m, cc->body ? cc->body : "", cc->len, &out, &err))
            return reply_error(c, (unsigned)err.status, err.param, "%s", err.message);
        return reply(c, 200, "application/json", out, NULL);
    case 6: return update_weights(h, c, cc);
    default:
        if (lj_api_detokenize(h->m, cc->body ? cc->body : "", cc->len, &out, &err))
            return reply_error(c, (unsigned)err.status, err.param, "%s", err.message);
        return reply(c, 200, "application/json", out, NULL);
    }
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode code) {
    (void)c, (void)code;
    lj_http_server *h = cls;
    conn_ctx *cc = *con_cls;
    if (cc && cc->counted) {
        pthread_mutex_lock(&h->mu);
        h->in_flight--;
        pthread_cond_broadcast(&h->idle);
        pthread_mutex_unlock(&h->mu);
    }
    if (cc) {
        free(cc->body);
        free(cc);
        *con_cls = NULL;
    }
}

lj_status lj_http_start(lj_http_server **out, const lj_http_options *opt, int *port) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", opt->port);
    if (getaddrinfo(opt->host, ps, &hints, &ai) != 0 || !ai)
        return lj_fail(LJ_ERR_ARG, "--host %s: not an address this machine can bind", opt->host);
    lj_http_server *h = lj_calloc(1, sizeof *h);
    h->opt = *opt;
    h->started = (long)time(NULL);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->idle, NULL);
    pthread_mutex_init(&h->load_mu, NULL);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD; /* no MHD log: a client that goes away is normal */
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(flags, (uint16_t)opt->port, NULL, NULL, handler, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, h, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)opt->max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                            MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1 << 20), MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        pthread_mutex_destroy(&h->mu);
        free(h);
        return lj_fail(LJ_ERR_IO, "--host %s --port %d: cannot listen there (in use, or not allowed)", opt->host, opt->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? di->port : opt->port;
    *out = h;
    return LJ_OK;
}

void lj_http_set_ready(lj_http_server *h, lj_serve_engine *e, const lj_api_model *m) {
    pthread_mutex_lock(&h->mu);
    h->e = e;
    h->m = m;
    h->ready = 1;
    pthread_mutex_unlock(&h->mu);
}

void lj_http_begin_stop(lj_http_server *h) {
    pthread_mutex_lock(&h->mu);
    h->stopping = 1;
    pthread_mutex_unlock(&h->mu);
}

int lj_http_wait_idle(lj_http_server *h, double seconds) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)seconds;
    pthread_mutex_lock(&h->mu);
    int rc = 0;
    while (h->in_flight > 0 && rc == 0) rc = pthread_cond_timedwait(&h->idle, &h->mu, &until);
    const int left = h->in_flight;
    pthread_mutex_unlock(&h->mu);
    return left;
}

void lj_http_stop(lj_http_server *h) {
    MHD_stop_daemon(h->d);
    pthread_cond_destroy(&h->idle);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

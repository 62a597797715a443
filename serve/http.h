/* http.h: the HTTP side of `ljperf serve`: GNU libmicrohttpd with a thread per connection (so a
 * handler may wait for tokens; each connection's thread watches its socket and aborts the
 * request when the client goes away), the OpenAI routes of serve/api.h, /health, /metrics
 * (Prometheus text, vLLM's metric names), /tokenize, /detokenize, Bearer authentication of the
 * /v1 routes. The server starts before the model loads and answers 503 until
 * lj_http_set_ready, and again after lj_http_begin_stop. */
#ifndef LJ_SERVE_HTTP_H
#define LJ_SERVE_HTTP_H

#include "serve/api.h"

typedef struct {
    const char *host;          /* address to bind (vLLM's --host), e.g. 127.0.0.1 */
    int port;                  /* 0: any free port */
    const char *api_key;       /* NULL: no authentication */
    int max_connections;
    size_t max_body_bytes;     /* larger bodies get 413 */
} lj_http_options;

typedef struct lj_http_server lj_http_server;

/* Binds and starts serving (503 everywhere but /health's 503 until ready). *port receives the
 * bound port. Errors: LJ_ERR_ARG for a host that does not resolve, LJ_ERR_IO when the address
 * cannot be bound. */
lj_status lj_http_start(lj_http_server **s, const lj_http_options *opt, int *port);

/* From now on requests go to engine e about model m (both outlive the server). */
void lj_http_set_ready(lj_http_server *s, lj_serve_engine *e, const lj_api_model *m);

/* POST /update_weights_from_disk (SGLang's route): body {"model_path": DIR} or {} (the served
 * --load again, its latest iteration); load(ctx, path or NULL, dir_out) swaps the weights; the answer
 * is SGLang's {"success": bool, "message": text}. Without a loader the route answers 404. */
typedef lj_status (*lj_http_weights_loader)(void *ctx, const char *model_path, char *dir_out);
void lj_http_set_weights_loader(lj_http_server *s, lj_http_weights_loader load, void *ctx);

/* New requests get 503; those in flight go on. */
void lj_http_begin_stop(lj_http_server *s);

/* Closes the listening socket and the connections, joins their threads, frees s. */
/* Waits until every generation request taken before lj_http_begin_stop has completed (its
 * answer, streamed or not, sent whole or cut by its client), at most `seconds`. Returns how many
 * are still in flight (0: all done). Call after lj_http_begin_stop, before the engine stops: a
 * drain keeps the engine running until the last answer has left. */
int lj_http_wait_idle(lj_http_server *s, double seconds);
void lj_http_stop(lj_http_server *s);

/* The Prometheus text of the engine's statistics (free() it). */
char *lj_http_metrics_text(const lj_serve_stats *st, const char *model_name);

#endif

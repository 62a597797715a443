/* api.h: the OpenAI-compatible protocol of `ljperf serve` without the transport: parsing and
 * checking a /v1/completions or /v1/chat/completions body into engine parameters, turning a
 * request's tokens into text (incremental detokenization, stop strings, UTF-8 held back until
 * complete), and the JSON of answers, stream chunks and errors. Field names and defaults:
 * OpenAI's API reference and vLLM's protocol.py (vllm/entrypoints/openai/protocol.py) with vLLM's
 * sampling extras. Errors use OpenAI's body: {"error": {"message", "type", "param", "code"}}. */
#ifndef LJ_SERVE_API_H
#define LJ_SERVE_API_H

#include <cjson/cJSON.h>

#include "data/tokenizer.h"
#include "serve/engine.h"

#define LJ_API_MAX_STOP 8

/* What the API layer knows of the served model. */
typedef struct {
    const char *model_name;      /* --served-model-name */
    lj_tokenizer *tok;
    int max_model_len;
    const char *chat_template;   /* Jinja source, or NULL */
    const char *bos_token, *eos_token; /* their text, for the template ("" when none) */
} lj_api_model;

typedef enum { LJ_API_COMPLETION = 0, LJ_API_CHAT } lj_api_kind;

/* A parsed request. */
typedef struct {
    lj_api_kind kind;
    int32_t *prompt;
    int n_prompt;
    lj_sampling_params params;
    int n;
    int stream, include_usage;
    int logprobs;               /* completions: -1 or 0..5 top; chat: -1, or top_logprobs when logprobs true */
    int echo;
    int n_stop;
    char *stop[LJ_API_MAX_STOP];
    int include_stop_str_in_output, skip_special_tokens;
    uint64_t cache_salt;
    char request_id[96];
} lj_api_request;

/* An error for the client: HTTP status and the body's fields. */
typedef struct {
    int status;
    char message[512];
    char param[64];
} lj_api_error;

/* Parses body[0..len) of `kind`. Returns 0 and fills req, or the HTTP status (400, 404) and err.
 * The checks: JSON object, known fields of the right types and ranges, UTF-8 text, a prompt of
 * 1..max_model_len-1 tokens and prompt + max_tokens <= max_model_len (vLLM's message). A refused
 * request holds nothing (req zeroed); an accepted one is freed with lj_api_request_free. */
int lj_api_parse(const lj_api_model *mdl, lj_api_kind kind, const char *body, size_t len, lj_api_request *req,
                 lj_api_error *err);
void lj_api_request_free(lj_api_request *req);

/* The error body (free() it). */
char *lj_api_error_json(int status, const char *message, const char *param);

/* Per choice: the text so far and how much of it was handed out. */
typedef struct {
    char *text;       /* bytes of the output tokens (special tokens skipped when asked) */
    size_t len, cap;
    size_t emitted;   /* text[0..emitted) handed out */
    int tokens_seen;  /* output tokens consumed */
    int done;         /* finished, everything handed out */
    int stopped;      /* a stop string matched: text ends at it */
    const char *finish; /* "stop", "length", "abort" once done */
    int n_lp;         /* tokens whose logprobs were handed out */
} lj_api_choice;

typedef struct {
    lj_api_request *req;
    lj_serve_request *r;
    lj_serve_engine *e;
    const lj_api_model *mdl;
    lj_api_choice *ch;
    char id[128];
    long created;
    int role_sent;     /* chat streams: the first chunk with the role went out */
} lj_api_stream;

void lj_api_stream_init(lj_api_stream *s, lj_api_request *req, lj_serve_request *r, lj_serve_engine *e,
                        const lj_api_model *mdl);
void lj_api_stream_free(lj_api_stream *s);

/* Consumes the request's new tokens (under its lock): extends each choice's text, ends a choice at
 * a stop string (lj_serve_request_stop). Returns 1 when every choice is done. */
int lj_api_stream_update(lj_api_stream *s);

/* Stream: appends to *out (growable, *len, *cap) the SSE events of what is new since the last
 * call ("data: {chunk}\n\n"), and at the end the usage chunk (include_usage) and "data: [DONE]\n\n". */
void lj_api_stream_events(lj_api_stream *s, char **out, size_t *len, size_t *cap, int all_done);

/* The whole answer (free() it), after every choice is done. */
char *lj_api_response_json(lj_api_stream *s);

/* /tokenize and /detokenize bodies; 0 and *out (free() it), or the HTTP status and err. */
int lj_api_tokenize(const lj_api_model *mdl, const char *body, size_t len, char **out, lj_api_error *err);
int lj_api_detokenize(const lj_api_model *mdl, const char *body, size_t len, char **out, lj_api_error *err);

/* /v1/models. */
char *lj_api_models_json(const lj_api_model *mdl, long created);

#endif

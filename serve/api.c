/* api.c: OpenAI request parsing and checking, incremental detokenization with stop strings, and
 * the JSON of answers, stream chunks and errors. Contracts in serve/api.h. */
#include "serve/api.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "serve/chat_template.h"

/* ---- errors ---------------------------------------------------------------------------- */

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    case 500: return "internal_server_error";
    default: return "invalid_request_error";
    }
}

char *lj_api_error_json(int status, const char *message, const char *param) {
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", error_type(status));
    if (param && param[0]) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static int fail(lj_api_error *err, int status, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    err->status = status;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    return status;
}

/* ---- field readers ---------------------------------------------------------------------- */

static int is_int(const cJSON *v) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && floor(v->valuedouble) == v->valuedouble;
}

/* *out = integer field in [lo, hi]; an absent or null field leaves it. */
static int get_int(const cJSON *o, const char *name, long long lo, long long hi, long long *out, lj_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!is_int(v)) return fail(err, 400, name, "'%s' must be an integer", name);
    if (v->valuedouble < (double)lo || v->valuedouble > (double)hi)
        return fail(err, 400, name, "'%s' is %.17g; expected an integer in [%lld, %lld]", name, v->valuedouble, lo, hi);
    *out = (long long)v->valuedouble;
    return 0;
}

static int get_num(const cJSON *o, const char *name, double lo, double hi, double *out, lj_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return fail(err, 400, name, "'%s' must be a number", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return fail(err, 400, name, "'%s' is %g; expected a number in [%g, %g]", name, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *name, int *out, lj_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return fail(err, 400, name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int check_utf8(const char *s, const char *param, lj_api_error *err) {
    const size_t n = strlen(s), bad = lj_utf8_check(s, n);
    if (bad != n) return fail(err, 400, param, "'%s' is not valid UTF-8 (at byte %zu)", param, bad);
    return 0;
}

#define TRY(x)                 \
    do {                       \
        int rc_ = (x);         \
        if (rc_) return rc_;   \
    } while (0)

/* The fields each endpoint accepts; any other is an error (a misspelt field must not pass silently). */
static const char *const k_common[] = {"model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options",
                                       "stop", "presence_penalty", "frequency_penalty", "seed", "user", "top_k",
                                       "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids",
                                       "include_stop_str_in_output", "skip_special_tokens", "cache_salt",
                                       "request_id", "logprobs", "echo", "best_of", "logit_bias", NULL};
static const char *const k_completion[] = {"prompt", "suffix", NULL};
static const char *const k_chat[] = {"messages", "max_completion_tokens", "top_logprobs", "add_generation_prompt",
                                     "chat_template_kwargs", "tools", "tool_choice", "response_format",
                                     "parallel_tool_calls", "continue_final_message", NULL};

static int known(const char *name, const char *const *list) {
    for (; *list; list++)
        if (strcmp(name, *list) == 0) return 1;
    return 0;
}

/* The text of a chat message's content: a string, or the text parts of an array joined by "\n"
 * (vLLM's rule); NULL content (an assistant turn of tool calls) is "". */
static int message_text(const cJSON *content, int i, char **out, lj_api_error *err) {
    if (!content || cJSON_IsNull(content)) {
        *out = strdup("");
        return 0;
    }
    if (cJSON_IsString(content)) {
        *out = strdup(content->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(content)) return fail(err, 400, "messages", "messages[%d].content must be a string or an array of parts", i);
    size_t len = 0;
    char *s = lj_calloc(1, 1);
    const cJSON *part;
    int k = 0;
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type"),
                    *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 || !cJSON_IsString(text)) {
            free(s);
            return fail(err, 400, "messages",
                        "messages[%d].content[%d]: only parts of type \"text\" with a string \"text\" are supported", i, k);
        }
        const size_t n = strlen(text->valuestring);
        s = lj_realloc(s, len + n + 2);
        if (len) s[len++] = '\n';
        memcpy(s + len, text->valuestring, n + 1);
        len += n;
        k++;
    }
    *out = s;
    return 0;
}

/* vars.messages = the request's messages with string contents; checks roles and UTF-8. */
static int chat_messages(const cJSON *msgs, cJSON *vars, lj_api_error *err) {
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return fail(err, 400, "messages", "'messages' must be a non-empty array");
    cJSON *out = cJSON_AddArrayToObject(vars, "messages");
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, msgs) {
        if (!cJSON_IsObject(m)) return fail(err, 400, "messages", "messages[%d] must be an object", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        static const char *const roles[] = {"system", "user", "assistant", "tool", "developer", NULL};
        if (!cJSON_IsString(role) || !known(role->valuestring, roles))
            return fail(err, 400, "messages", "messages[%d].role must be one of system, user, assistant, tool, developer", i);
        char *text = NULL;
        TRY(message_text(cJSON_GetObjectItemCaseSensitive(m, "content"), i, &text, err));
        if (check_utf8(text, "messages", err)) {
            free(text);
            return 400;
        }
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "role", strcmp(role->valuestring, "developer") == 0 ? "system" : role->valuestring);
        cJSON_AddStringToObject(c, "content", text);
        free(text);
        const cJSON *extra;
        cJSON_ArrayForEach(extra, m) { /* reasoning_content, tool_calls, name, tool_call_id pass to the template */
            if (strcmp(extra->string, "role") && strcmp(extra->string, "content"))
                cJSON_AddItemToObject(c, extra->string, cJSON_Duplicate(extra, 1));
        }
        cJSON_AddItemToArray(out, c);
        i++;
    }
    return 0;
}

static int encode(const lj_api_model *mdl, const char *text, int add_bos, int32_t **ids, int *n, lj_api_error *err,
                  const char *param) {
    int32_t *v = NULL;
    int64_t len = 0, cap = 0;
    if (add_bos && lj_tokenizer_adds_bos(mdl->tok) && lj_tokenizer_bos_id(mdl->tok) >= 0) {
        v = lj_malloc(16 * sizeof(int32_t));
        cap = 16;
        v[len++] = lj_tokenizer_bos_id(mdl->tok);
    }
    if (lj_tokenizer_encode_append(mdl->tok, text, strlen(text), 1, &v, &len, &cap) != LJ_OK) {
        free(v);
        return fail(err, 400, param, "'%s' cannot be tokenized: %s", param, lj_error_message());
    }
    *ids = v;
    *n = (int)len;
    return 0;
}

static int parse_fields(const lj_api_model *mdl, lj_api_kind kind, const cJSON *root, lj_api_request *req,
                        lj_api_error *err) {
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        if (!known(f->string, k_common) && !known(f->string, kind == LJ_API_CHAT ? k_chat : k_completion))
            return fail(err, 400, f->string, "unknown field '%s'", f->string);
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) return fail(err, 400, "model", "'model' must be a string");
        if (strcmp(model->valuestring, mdl->model_name) != 0)
            return fail(err, 404, "model", "The model `%.200s` does not exist.", model->valuestring);
    }
    lj_sampling_params *p = &req->params;
    lj_sampling_params_default(p);
    long long v = 0;
    double d;
    d = p->temperature; TRY(get_num(root, "temperature", 0, 1e6, &d, err)); p->temperature = d;
    d = p->top_p; TRY(get_num(root, "top_p", 1e-9, 1, &d, err)); p->top_p = d;
    d = 0; TRY(get_num(root, "min_p", 0, 1, &d, err)); p->min_p = d;
    d = 0; TRY(get_num(root, "presence_penalty", -2, 2, &d, err)); p->presence_penalty = d;
    d = 0; TRY(get_num(root, "frequency_penalty", -2, 2, &d, err)); p->frequency_penalty = d;
    d = 1; TRY(get_num(root, "repetition_penalty", 1e-6, 1e6, &d, err)); p->repetition_penalty = d;
    v = 0; TRY(get_int(root, "top_k", -1, 1 << 30, &v, err)); p->top_k = v < 0 ? 0 : (int)v;
    v = 1; TRY(get_int(root, "n", 1, 128, &v, err)); req->n = (int)v;
    long long best_of = req->n;
    TRY(get_int(root, "best_of", 1, 128, &best_of, err));
    if (best_of != req->n) return fail(err, 400, "best_of", "'best_of' other than n is not supported");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(root, "seed");
    if (seed && !cJSON_IsNull(seed)) {
        if (!is_int(seed) || fabs(seed->valuedouble) > 9.2e18) return fail(err, 400, "seed", "'seed' must be an integer");
        p->has_seed = 1;
        p->seed = (uint64_t)(int64_t)seed->valuedouble;
    }
    TRY(get_bool(root, "stream", &req->stream, err));
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return fail(err, 400, "stream_options", "'stream_options' must be an object");
        const cJSON *x;
        cJSON_ArrayForEach(x, so) {
            if (strcmp(x->string, "include_usage") && strcmp(x->string, "continuous_usage_stats"))
                return fail(err, 400, "stream_options", "unknown field 'stream_options.%s'", x->string);
        }
        TRY(get_bool(so, "include_usage", &req->include_usage, err));
        if (!req->stream) return fail(err, 400, "stream_options", "'stream_options' needs 'stream': true");
    }
    TRY(get_bool(root, "ignore_eos", &p->ignore_eos, err));
    TRY(get_bool(root, "include_stop_str_in_output", &req->include_stop_str_in_output, err));
    req->skip_special_tokens = 1;
    TRY(get_bool(root, "skip_special_tokens", &req->skip_special_tokens, err));
    TRY(get_bool(root, "echo", &req->echo, err));
    if (req->echo) return fail(err, 400, "echo", "'echo' is not supported");
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (lb && !cJSON_IsNull(lb) && !(cJSON_IsObject(lb) && lb->child == NULL))
        return fail(err, 400, "logit_bias", "'logit_bias' is not supported");
    /* logprobs */
    req->logprobs = -1;
    if (kind == LJ_API_COMPLETION) {
        v = -1; TRY(get_int(root, "logprobs", 0, LJ_SAMPLING_MAX_LOGPROBS, &v, err)); req->logprobs = (int)v;
        const cJSON *sfx = cJSON_GetObjectItemCaseSensitive(root, "suffix");
        if (sfx && !cJSON_IsNull(sfx)) return fail(err, 400, "suffix", "'suffix' is not supported");
    } else {
        int lp = 0;
        TRY(get_bool(root, "logprobs", &lp, err));
        v = 0;
        TRY(get_int(root, "top_logprobs", 0, LJ_SAMPLING_MAX_LOGPROBS, &v, err));
        if (cJSON_GetObjectItemCaseSensitive(root, "top_logprobs") && !lp && v > 0)
            return fail(err, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        req->logprobs = lp ? (int)v : -1;
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
        if (tools && !cJSON_IsNull(tools) && !(cJSON_IsArray(tools) && cJSON_GetArraySize(tools) == 0))
            return fail(err, 400, "tools", "'tools' is not supported yet");
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
        if (tc && !cJSON_IsNull(tc) && !(cJSON_IsString(tc) && (strcmp(tc->valuestring, "none") == 0 || strcmp(tc->valuestring, "auto") == 0)))
            return fail(err, 400, "tool_choice", "'tool_choice' other than \"none\" or \"auto\" is not supported");
        const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
        if (rf && !cJSON_IsNull(rf)) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(rf, "type");
            if (!cJSON_IsObject(rf) || !cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0)
                return fail(err, 400, "response_format", "'response_format' other than {\"type\": \"text\"} is not supported");
        }
        int cont = 0;
        TRY(get_bool(root, "continue_final_message", &cont, err));
        if (cont) return fail(err, 400, "continue_final_message", "'continue_final_message' is not supported");
    }
    p->logprobs = req->logprobs;
    /* stop strings and ids */
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (stop && !cJSON_IsNull(stop)) {
        if (cJSON_IsString(stop)) {
            if (stop->valuestring[0]) req->stop[req->n_stop++] = strdup(stop->valuestring);
        } else if (cJSON_IsArray(stop)) {
            const cJSON *x;
            cJSON_ArrayForEach(x, stop) {
                if (!cJSON_IsString(x)) return fail(err, 400, "stop", "'stop' must be a string or an array of strings");
                if (req->n_stop == LJ_API_MAX_STOP) return fail(err, 400, "stop", "at most %d stop strings", LJ_API_MAX_STOP);
                if (x->valuestring[0]) req->stop[req->n_stop++] = strdup(x->valuestring);
            }
        } else {
            return fail(err, 400, "stop", "'stop' must be a string or an array of strings");
        }
        for (int i = 0; i < req->n_stop; i++) TRY(check_utf8(req->stop[i], "stop", err));
    }
    const cJSON *sti = cJSON_GetObjectItemCaseSensitive(root, "stop_token_ids");
    if (sti && !cJSON_IsNull(sti)) {
        if (!cJSON_IsArray(sti)) return fail(err, 400, "stop_token_ids", "'stop_token_ids' must be an array of token ids");
        const cJSON *x;
        cJSON_ArrayForEach(x, sti) {
            if (!is_int(x) || x->valuedouble < 0 || x->valuedouble >= lj_tokenizer_vocab_size(mdl->tok))
                return fail(err, 400, "stop_token_ids", "'stop_token_ids' must hold token ids in [0, %d)",
                            lj_tokenizer_vocab_size(mdl->tok));
            if (p->num_stop_ids == LJ_SAMPLING_MAX_STOP_IDS)
                return fail(err, 400, "stop_token_ids", "at most %d stop token ids", LJ_SAMPLING_MAX_STOP_IDS);
            p->stop_ids[p->num_stop_ids++] = (int32_t)x->valuedouble;
        }
    }
    const cJSON *salt = cJSON_GetObjectItemCaseSensitive(root, "cache_salt");
    if (salt && !cJSON_IsNull(salt)) {
        if (!cJSON_IsString(salt) || !salt->valuestring[0])
            return fail(err, 400, "cache_salt", "'cache_salt' must be a non-empty string");
        req->cache_salt = lj_hash(LJ_HASH_INIT, salt->valuestring, strlen(salt->valuestring)) | 1;
    }
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(root, "request_id");
    if (rid && !cJSON_IsNull(rid)) {
        if (!cJSON_IsString(rid) || strlen(rid->valuestring) >= sizeof req->request_id - 16)
            return fail(err, 400, "request_id", "'request_id' must be a string of fewer than 80 bytes");
        TRY(check_utf8(rid->valuestring, "request_id", err));
        snprintf(req->request_id, sizeof req->request_id, "%s", rid->valuestring);
    }
    const cJSON *user = cJSON_GetObjectItemCaseSensitive(root, "user");
    if (user && !cJSON_IsNull(user) && !cJSON_IsString(user)) return fail(err, 400, "user", "'user' must be a string");
    return 0;
}

/* The prompt ids: a string or an array of token ids (completions), or the rendered template. */
static int parse_prompt(const lj_api_model *mdl, lj_api_kind kind, const cJSON *root, lj_api_request *req,
                        lj_api_error *err) {
    if (kind == LJ_API_COMPLETION) {
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(root, "prompt");
        if (!pr || cJSON_IsNull(pr)) return fail(err, 400, "prompt", "'prompt' is required");
        if (cJSON_IsString(pr)) {
            TRY(check_utf8(pr->valuestring, "prompt", err));
            return encode(mdl, pr->valuestring, 1, &req->prompt, &req->n_prompt, err, "prompt");
        }
        if (cJSON_IsArray(pr) && cJSON_GetArraySize(pr) == 1 && cJSON_IsString(pr->child)) { /* ["text"] */
            TRY(check_utf8(pr->child->valuestring, "prompt", err));
            return encode(mdl, pr->child->valuestring, 1, &req->prompt, &req->n_prompt, err, "prompt");
        }
        if (!cJSON_IsArray(pr)) return fail(err, 400, "prompt", "'prompt' must be a string or an array of token ids");
        const int n = cJSON_GetArraySize(pr);
        req->prompt = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
        const cJSON *x;
        cJSON_ArrayForEach(x, pr) {
            if (!is_int(x) || x->valuedouble < 0 || x->valuedouble >= lj_tokenizer_vocab_size(mdl->tok))
                return fail(err, 400, "prompt",
                            "'prompt' must be a string or an array of token ids in [0, %d) (one prompt per request)",
                            lj_tokenizer_vocab_size(mdl->tok));
            req->prompt[req->n_prompt++] = (int32_t)x->valuedouble;
        }
        return 0;
    }
    if (!mdl->chat_template)
        return fail(err, 400, "messages",
                    "this model has no chat template (tokenizer_config.json has no chat_template): use /v1/completions");
    cJSON *vars = cJSON_CreateObject();
    int rc = chat_messages(cJSON_GetObjectItemCaseSensitive(root, "messages"), vars, err);
    int agp = 1;
    if (!rc) rc = get_bool(root, "add_generation_prompt", &agp, err);
    if (!rc) {
        cJSON_AddBoolToObject(vars, "add_generation_prompt", agp);
        cJSON_AddStringToObject(vars, "bos_token", mdl->bos_token);
        cJSON_AddStringToObject(vars, "eos_token", mdl->eos_token);
        const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs");
        if (kw && !cJSON_IsNull(kw)) {
            if (!cJSON_IsObject(kw)) rc = fail(err, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
            const cJSON *x;
            if (!rc)
                cJSON_ArrayForEach(x, kw) {
                    if (strcmp(x->string, "messages") == 0) continue;
                    cJSON_DeleteItemFromObjectCaseSensitive(vars, x->string);
                    cJSON_AddItemToObject(vars, x->string, cJSON_Duplicate(x, 1));
                }
        }
    }
    char *text = NULL;
    if (!rc && lj_chat_template_render(mdl->chat_template, vars, &text) != LJ_OK)
        rc = fail(err, 400, "messages", "the chat template failed: %s", lj_error_message());
    cJSON_Delete(vars);
    if (!rc) rc = encode(mdl, text, 0, &req->prompt, &req->n_prompt, err, "messages");
    free(text);
    return rc;
}

/* 1 when a JSON string of body[0..len) holds the escape \u0000: cJSON's strings end at a NUL,
 * so the text after it would be dropped without a word. */
static int has_nul_escape(const char *body, size_t len) {
    for (size_t i = 0; i + 1 < len; i++) {
        if (body[i] != '\\') continue;
        if (body[i + 1] == 'u' && i + 5 < len && body[i + 2] == '0' && body[i + 3] == '0' && body[i + 4] == '0' &&
            body[i + 5] == '0')
            return 1;
        i++; /* the escaped character (\\ included) */
    }
    return 0;
}

/* The checks of a body's bytes before it is parsed: UTF-8, no raw NUL byte (cJSON would end the
 * text there and read a shorter request), no \u0000 escape. 0 or the HTTP status. */
static int body_bytes(const char *body, size_t len, lj_api_error *err) {
    if (lj_utf8_check(body, len) != len) return fail(err, 400, NULL, "the request body is not valid UTF-8");
    if (memchr(body, 0, len))
        return fail(err, 400, NULL, "the request body holds a NUL byte, which JSON text cannot carry: remove it");
    if (has_nul_escape(body, len))
        return fail(err, 400, NULL, "a string of the request holds the NUL character (\\u0000), which the model's text "
                                    "cannot carry: remove it");
    return 0;
}

/* A field given twice (cJSON would take the first, Python's json the last): refused. No request
 * has more than LJ_API_MAX_FIELDS fields, which bounds the pairs compared. */
#define LJ_API_MAX_FIELDS 128
static int duplicate_fields(const cJSON *root, lj_api_error *err) {
    const int n = cJSON_GetArraySize(root);
    if (n > LJ_API_MAX_FIELDS)
        return fail(err, 400, NULL, "the request body has %d fields, more than the API has (%d): remove the others", n,
                    LJ_API_MAX_FIELDS);
    for (const cJSON *a = root->child; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (a->string && b->string && strcmp(a->string, b->string) == 0)
                return fail(err, 400, a->string, "the field '%s' is given twice: give it once", a->string);
    return 0;
}

static int parse_body(const lj_api_model *mdl, lj_api_kind kind, const char *body, size_t len, lj_api_request *req,
                      lj_api_error *err) {
    memset(req, 0, sizeof *req);
    req->kind = kind;
    const int bad = body_bytes(body, len, err);
    if (bad) return bad;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return fail(err, 400, NULL, "the request body is not valid JSON");
    int rc = cJSON_IsObject(root) ? 0 : fail(err, 400, NULL, "the request body must be a JSON object");
    if (!rc) rc = duplicate_fields(root, err);
    if (!rc) rc = parse_fields(mdl, kind, root, req, err);
    if (!rc) rc = parse_prompt(mdl, kind, root, req, err);
    long long max_tokens = LLONG_MIN; /* not given */
    if (!rc) rc = get_int(root, "max_tokens", -(1ll << 40), 1ll << 40, &max_tokens, err);
    if (!rc && kind == LJ_API_CHAT && max_tokens == LLONG_MIN)
        rc = get_int(root, "max_completion_tokens", -(1ll << 40), 1ll << 40, &max_tokens, err);
    long long min_tokens = 0;
    if (!rc) rc = get_int(root, "min_tokens", 0, 1ll << 30, &min_tokens, err);
    cJSON_Delete(root);
    if (rc) return rc;
    const int room = mdl->max_model_len - req->n_prompt;
    if (req->n_prompt == 0) return fail(err, 400, "prompt", "the prompt is empty");
    if (room < 1)
        return fail(err, 400, kind == LJ_API_CHAT ? "messages" : "prompt",
                    "This model's maximum context length is %d tokens. However, your request has %d input tokens. "
                    "Please reduce the length of the input.", mdl->max_model_len, req->n_prompt);
    if (max_tokens == LLONG_MIN) max_tokens = kind == LJ_API_CHAT ? room : 16;
    if (max_tokens < 1) return fail(err, 400, "max_tokens", "'max_tokens' must be at least 1, got %lld", max_tokens);
    if (max_tokens > room)
        return fail(err, 400, "max_tokens",
                    "This model's maximum context length is %d tokens. However, you requested %lld tokens (%d in the "
                    "input, %lld in the completion). Please reduce the length of the input or completion.",
                    mdl->max_model_len, req->n_prompt + max_tokens, req->n_prompt, max_tokens);
    if (min_tokens > max_tokens)
        return fail(err, 400, "min_tokens", "'min_tokens' (%lld) must not exceed 'max_tokens' (%lld)", min_tokens, max_tokens);
    req->params.max_tokens = (int)max_tokens;
    req->params.min_tokens = (int)min_tokens;
    return 0;
}

void lj_api_request_free(lj_api_request *req) {
    free(req->prompt);
    for (int i = 0; i < req->n_stop; i++) free(req->stop[i]);
    memset(req, 0, sizeof *req);
}

int lj_api_parse(const lj_api_model *mdl, lj_api_kind kind, const char *body, size_t len, lj_api_request *req,
                 lj_api_error *err) {
    const int rc = parse_body(mdl, kind, body, len, req, err);
    if (rc) lj_api_request_free(req); /* a refused request holds nothing */
    return rc;
}

/* ---- detokenization and stop strings ------------------------------------------------------ */

void lj_api_stream_init(lj_api_stream *s, lj_api_request *req, lj_serve_request *r, lj_serve_engine *e,
                        const lj_api_model *mdl) {
    memset(s, 0, sizeof *s);
    s->req = req;
    s->r = r;
    s->e = e;
    s->mdl = mdl;
    s->ch = lj_calloc((size_t)req->n, sizeof *s->ch);
    s->created = (long)time(NULL);
    static unsigned long long counter;
    const unsigned long long k = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    const char *prefix = req->kind == LJ_API_CHAT ? "chatcmpl-" : "cmpl-";
    if (req->request_id[0]) snprintf(s->id, sizeof s->id, "%s%s", prefix, req->request_id);
    else snprintf(s->id, sizeof s->id, "%s%016llx%08llx", prefix, (unsigned long long)lj_hash(LJ_HASH_INIT, &k, sizeof k) ^ (unsigned long long)s->created, k);
}

void lj_api_stream_free(lj_api_stream *s) {
    for (int i = 0; s->ch && i < s->req->n; i++) free(s->ch[i].text);
    free(s->ch);
    memset(s, 0, sizeof *s);
}

static void text_append(lj_api_choice *c, const char *b, size_t n) {
    if (c->len + n + 1 > c->cap) {
        c->cap = (c->len + n + 1) * 2;
        c->text = lj_realloc(c->text, c->cap);
    }
    memcpy(c->text + c->len, b, n);
    c->len += n;
    c->text[c->len] = 0;
}

int lj_api_stream_update(lj_api_stream *s) {
    const lj_api_request *q = s->req;
    size_t max_stop = 0;
    for (int i = 0; i < q->n_stop; i++) max_stop = strlen(q->stop[i]) > max_stop ? strlen(q->stop[i]) : max_stop;
    int all = 1;
    lj_serve_request_lock(s->r);
    for (int i = 0; i < q->n; i++) {
        lj_api_choice *c = &s->ch[i];
        const lj_serve_output *o = lj_serve_request_output(s->r, i);
        while (!c->stopped && c->tokens_seen < o->n) {
            const int32_t id = o->tokens[c->tokens_seen++].id;
            size_t n = 0;
            const char *b = lj_tokenizer_token(s->mdl->tok, id, &n);
            const int is_stop_id = o->finish == LJ_FINISH_STOP && c->tokens_seen == o->n && o->stop_id == id;
            if (!b || (q->skip_special_tokens && lj_tokenizer_is_special(s->mdl->tok, id)) || (is_stop_id && q->skip_special_tokens)) {
                if (!c->text) text_append(c, "", 0);
                continue;
            }
            const size_t from = c->len > max_stop ? c->len - max_stop + 1 : 0;
            text_append(c, b, n);
            for (int k = 0; k < q->n_stop; k++) { /* the earliest stop string in the new text */
                const char *hit = strstr(c->text + from, q->stop[k]);
                if (!hit) continue;
                size_t end = (size_t)(hit - c->text) + (q->include_stop_str_in_output ? strlen(q->stop[k]) : 0);
                if (!c->stopped || end < c->len) c->len = end;
                c->stopped = 1;
            }
            if (c->stopped) {
                c->text[c->len] = 0;
                c->finish = "stop";
            }
        }
        if (c->stopped && o->finish == LJ_FINISH_NONE) {
            lj_serve_request_unlock(s->r);
            lj_serve_request_stop(s->e, s->r, i);
            lj_serve_request_lock(s->r);
        }
        if (o->finish != LJ_FINISH_NONE && (c->stopped || c->tokens_seen == o->n)) {
            if (!c->finish) c->finish = lj_finish_reason_name(o->finish);
            c->done = 1;
        } else {
            all = 0;
        }
    }
    lj_serve_request_unlock(s->r);
    return all;
}

/* How much of c's text can go out now: all once done; else short of a possible stop string's
 * start and of an incomplete UTF-8 sequence at the end. */
static size_t ready_end(const lj_api_stream *s, const lj_api_choice *c) {
    if (c->done) return c->len;
    size_t max_stop = 0;
    for (int i = 0; i < s->req->n_stop; i++)
        max_stop = strlen(s->req->stop[i]) > max_stop ? strlen(s->req->stop[i]) : max_stop;
    size_t end = c->len > (max_stop ? max_stop - 1 : 0) ? c->len - (max_stop ? max_stop - 1 : 0) : 0;
    size_t i = end;
    int back = 0;
    while (i > 0 && back < 3 && ((unsigned char)c->text[i - 1] & 0xC0) == 0x80) i--, back++;
    if (i > 0) {
        const unsigned char lead = (unsigned char)c->text[i - 1];
        const int need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (need > back + 1) end = i - 1;
    }
    return end < c->emitted ? c->emitted : end;
}

/* A JSON string of bytes[0..n) with ill-formed UTF-8 replaced by U+FFFD. */
static cJSON *text_json(const char *b, size_t n) {
    char *fixed;
    size_t fl;
    lj_utf8_repair(b, n, &fixed, &fl);
    cJSON *v = cJSON_CreateString(fixed);
    free(fixed);
    return v;
}

static cJSON *token_text(const lj_api_model *mdl, int32_t id) {
    size_t n = 0;
    const char *b = lj_tokenizer_token(mdl->tok, id, &n);
    return text_json(b ? b : "", b ? n : 0);
}

static cJSON *token_bytes(const lj_api_model *mdl, int32_t id) {
    size_t n = 0;
    const char *b = lj_tokenizer_token(mdl->tok, id, &n);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; b && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)b[i]));
    return a;
}

/* The logprobs object of choice i's tokens [from, to). */
static cJSON *logprobs_json(const lj_api_stream *s, int i, int from, int to, size_t text_offset) {
    const lj_serve_output *o = lj_serve_request_output(s->r, i);
    if (s->req->kind == LJ_API_CHAT) {
        cJSON *root = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(root, "content");
        for (int t = from; t < to; t++) {
            const lj_serve_token *tk = &o->tokens[t];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddItemToObject(e, "token", token_text(s->mdl, tk->id));
            cJSON_AddNumberToObject(e, "logprob", tk->info.logprob);
            cJSON_AddItemToObject(e, "bytes", token_bytes(s->mdl, tk->id));
            cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int k = 0; k < tk->info.n_top; k++) {
                cJSON *x = cJSON_CreateObject();
                cJSON_AddItemToObject(x, "token", token_text(s->mdl, tk->info.top_ids[k]));
                cJSON_AddNumberToObject(x, "logprob", tk->info.top_logprobs[k]);
                cJSON_AddItemToObject(x, "bytes", token_bytes(s->mdl, tk->info.top_ids[k]));
                cJSON_AddItemToArray(top, x);
            }
            cJSON_AddItemToArray(content, e);
        }
        return root;
    }
    cJSON *root = cJSON_CreateObject(), *offs = cJSON_AddArrayToObject(root, "text_offset"),
          *lps = cJSON_AddArrayToObject(root, "token_logprobs"), *toks = cJSON_AddArrayToObject(root, "tokens"),
          *tops = cJSON_AddArrayToObject(root, "top_logprobs");
    for (int t = from; t < to; t++) {
        const lj_serve_token *tk = &o->tokens[t];
        size_t n = 0;
        lj_tokenizer_token(s->mdl->tok, tk->id, &n);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)text_offset));
        text_offset += n;
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(tk->info.logprob));
        cJSON_AddItemToArray(toks, token_text(s->mdl, tk->id));
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < tk->info.n_top; k++) {
            cJSON *name = token_text(s->mdl, tk->info.top_ids[k]);
            if (!cJSON_GetObjectItemCaseSensitive(top, name->valuestring))
                cJSON_AddNumberToObject(top, name->valuestring, tk->info.top_logprobs[k]);
            cJSON_Delete(name);
        }
        cJSON_AddItemToArray(tops, top);
    }
    return root;
}

/* Output tokens of choice i that count: up to the stop string's token when one matched. */
static int counted_tokens(const lj_api_stream *s, int i) {
    return s->ch[i].tokens_seen;
}

static cJSON *usage_json(const lj_api_stream *s) {
    cJSON *u = cJSON_CreateObject();
    int completion = 0;
    for (int i = 0; i < s->req->n; i++) completion += counted_tokens(s, i);
    const int prompt = s->req->n_prompt;
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(u, "total_tokens", prompt + completion);
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", lj_serve_request_cached_tokens(s->r));
    return u;
}

static cJSON *envelope(const lj_api_stream *s, const char *object) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", s->id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)s->created);
    cJSON_AddStringToObject(root, "model", s->mdl->model_name);
    return root;
}

static void put(char **out, size_t *len, size_t *cap, const char *a, size_t n) {
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *out = lj_realloc(*out, *cap);
    }
    memcpy(*out + *len, a, n);
    *len += n;
    (*out)[*len] = 0;
}

static void put_event(char **out, size_t *len, size_t *cap, cJSON *chunk) {
    char *j = cJSON_PrintUnformatted(chunk);
    cJSON_Delete(chunk);
    put(out, len, cap, "data: ", 6);
    put(out, len, cap, j, strlen(j));
    put(out, len, cap, "\n\n", 2);
    free(j);
}

void lj_api_stream_events(lj_api_stream *s, char **out, size_t *len, size_t *cap, int all_done) {
    const int chat = s->req->kind == LJ_API_CHAT;
    const char *object = chat ? "chat.completion.chunk" : "text_completion";
    lj_serve_request_lock(s->r);
    if (chat && !s->role_sent) { /* the first chunk of each choice names the role */
        for (int i = 0; i < s->req->n; i++) {
            cJSON *root = envelope(s, object), *choices = cJSON_AddArrayToObject(root, "choices"), *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "index", i);
            cJSON *delta = cJSON_AddObjectToObject(c, "delta");
            cJSON_AddStringToObject(delta, "role", "assistant");
            cJSON_AddStringToObject(delta, "content", "");
            cJSON_AddNullToObject(c, "logprobs");
            cJSON_AddNullToObject(c, "finish_reason");
            cJSON_AddItemToArray(choices, c);
            put_event(out, len, cap, root);
        }
        s->role_sent = 1;
    }
    for (int i = 0; i < s->req->n; i++) {
        lj_api_choice *c = &s->ch[i];
        if (c->finish && c->n_lp < 0) continue; /* its last chunk went out */
        const size_t end = ready_end(s, c);
        const int lp_to = c->tokens_seen;
        const int last = c->done;
        if (end == c->emitted && !last && !(s->req->logprobs >= 0 && lp_to > c->n_lp)) continue;
        cJSON *root = envelope(s, object), *choices = cJSON_AddArrayToObject(root, "choices"), *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", i);
        cJSON *text = text_json(c->text ? c->text + c->emitted : "", end - c->emitted);
        if (chat) {
            cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
            if (end > c->emitted || !last) cJSON_AddItemToObject(delta, "content", text);
            else cJSON_Delete(text);
        } else {
            cJSON_AddItemToObject(ch, "text", text);
        }
        if (s->req->logprobs >= 0 && lp_to > c->n_lp) cJSON_AddItemToObject(ch, "logprobs", logprobs_json(s, i, c->n_lp, lp_to, c->emitted));
        else cJSON_AddNullToObject(ch, "logprobs");
        if (last) cJSON_AddStringToObject(ch, "finish_reason", c->finish);
        else cJSON_AddNullToObject(ch, "finish_reason");
        cJSON_AddItemToArray(choices, ch);
        put_event(out, len, cap, root);
        c->emitted = end;
        c->n_lp = last ? -1 : lp_to;
    }
    if (all_done) {
        if (s->req->include_usage) {
            cJSON *root = envelope(s, object);
            cJSON_AddArrayToObject(root, "choices");
            cJSON_AddItemToObject(root, "usage", usage_json(s));
            put_event(out, len, cap, root);
        }
        put(out, len, cap, "data: [DONE]\n\n", 14);
    }
    lj_serve_request_unlock(s->r);
}

char *lj_api_response_json(lj_api_stream *s) {
    const int chat = s->req->kind == LJ_API_CHAT;
    lj_serve_request_lock(s->r);
    cJSON *root = envelope(s, chat ? "chat.completion" : "text_completion"), *choices = cJSON_AddArrayToObject(root, "choices");
    for (int i = 0; i < s->req->n; i++) {
        lj_api_choice *c = &s->ch[i];
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", i);
        cJSON *text = text_json(c->text ? c->text : "", c->len);
        if (chat) {
            cJSON *msg = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddItemToObject(msg, "content", text);
        } else {
            cJSON_AddItemToObject(ch, "text", text);
        }
        if (s->req->logprobs >= 0) cJSON_AddItemToObject(ch, "logprobs", logprobs_json(s, i, 0, c->tokens_seen, 0));
        else cJSON_AddNullToObject(ch, "logprobs");
        cJSON_AddStringToObject(ch, "finish_reason", c->finish ? c->finish : "abort");
        cJSON_AddItemToArray(choices, ch);
    }
    cJSON_AddItemToObject(root, "usage", usage_json(s));
    lj_serve_request_unlock(s->r);
    char *j = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return j;
}

/* ---- /tokenize, /detokenize, /v1/models ------------------------------------------------ */

int lj_api_tokenize(const lj_api_model *mdl, const char *body, size_t len, char **out, lj_api_error *err) {
    const int bad = body_bytes(body, len, err);
    if (bad) return bad;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return fail(err, 400, NULL, "the request body must be a JSON object");
    }
    if (duplicate_fields(root, err)) {
        cJSON_Delete(root);
        return err->status;
    }
    lj_api_request req;
    memset(&req, 0, sizeof req);
    int rc = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        static const char *const ok[] = {"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt",
                                         "chat_template_kwargs", NULL};
        if (!rc && !known(f->string, ok)) rc = fail(err, 400, f->string, "unknown field '%s'", f->string);
    }
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    int add_special = 1;
    if (!rc) rc = get_bool(root, "add_special_tokens", &add_special, err);
    if (!rc && cJSON_IsString(prompt)) {
        rc = encode(mdl, prompt->valuestring, add_special, &req.prompt, &req.n_prompt, err, "prompt");
    } else if (!rc && cJSON_GetObjectItemCaseSensitive(root, "messages")) {
        cJSON *only = cJSON_CreateObject();
        const char *keep[] = {"messages", "add_generation_prompt", "chat_template_kwargs"};
        for (int i = 0; i < 3; i++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, keep[i]);
            if (x) cJSON_AddItemToObject(only, keep[i], cJSON_Duplicate(x, 1));
        }
        rc = parse_prompt(mdl, LJ_API_CHAT, only, &req, err);
        cJSON_Delete(only);
    } else if (!rc) {
        rc = fail(err, 400, "prompt", "'prompt' (a string) or 'messages' is required");
    }
    cJSON_Delete(root);
    if (rc) {
        free(req.prompt);
        return rc;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", req.n_prompt);
    cJSON_AddNumberToObject(o, "max_model_len", mdl->max_model_len);
    cJSON *t = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < req.n_prompt; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(req.prompt[i]));
    free(req.prompt);
    *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return 0;
}

int lj_api_detokenize(const lj_api_model *mdl, const char *body, size_t len, char **out, lj_api_error *err) {
    const int bad = body_bytes(body, len, err);
    if (bad) return bad;
    cJSON *root = cJSON_ParseWithLength(body, len);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!root || !cJSON_IsObject(root) || !cJSON_IsArray(toks)) {
        cJSON_Delete(root);
        return fail(err, 400, "tokens", "the body must be a JSON object with 'tokens', an array of token ids");
    }
    const int n = cJSON_GetArraySize(toks);
    int32_t *ids = lj_malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    int k = 0, rc = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, toks) {
        if (!is_int(x) || x->valuedouble < 0 || x->valuedouble >= lj_tokenizer_vocab_size(mdl->tok)) {
            rc = fail(err, 400, "tokens", "'tokens' must hold token ids in [0, %d)", lj_tokenizer_vocab_size(mdl->tok));
            break;
        }
        ids[k++] = (int32_t)x->valuedouble;
    }
    cJSON_Delete(root);
    char *text = NULL;
    size_t tl = 0;
    if (!rc && lj_tokenizer_decode(mdl->tok, ids, k, &text, &tl) != LJ_OK)
        rc = fail(err, 400, "tokens", "%s", lj_error_message());
    free(ids);
    if (rc) return rc;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "prompt", text_json(text, tl));
    free(text);
    *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return 0;
}

char *lj_api_models_json(const lj_api_model *mdl, long created) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", mdl->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)created);
    cJSON_AddStringToObject(m, "owned_by", "ljperf");
    cJSON_AddNumberToObject(m, "max_model_len", mdl->max_model_len);
    cJSON_AddItemToArray(data, m);
    char *j = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return j;
}

/* bench_serve.c: `ljperf bench serve`, vLLM's `vllm bench serve`: a client that sends prompts
 * to an OpenAI-compatible server's /v1/completions (streamed) at Poisson arrivals
 * (--request-rate; inf: all at once) or under --max-concurrency, and reports vLLM's metrics by
 * vLLM's methods (vllm/benchmarks/serve.py): request, output and total token throughput over the
 * benchmark's duration; TTFT (time to the first streamed text), TPOT ((latency - TTFT) /
 * (output tokens - 1), requests of more than one output token), ITL (the gaps between streamed
 * chunks), each as mean, median and P99 (numpy's linear percentile) in ms. Token counts are the
 * server's usage (stream_options.include_usage). --offline drives the engine in-process, all
 * prompts at once, no HTTP (vLLM's `bench throughput`). HTTP: libcurl's multi interface, one
 * thread. */
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/serve_setup.h"

typedef struct {
    const char *base_url, *endpoint, *model, *dataset_name, *dataset_path, *result_json, *result_dir,
        *result_filename, *tokenizer, *api_key;
    int num_prompts, input_len, output_len, max_concurrency, ignore_eos, save_result, offline, seed, prefix_len;
    double range_ratio, request_rate;
} bench_args;

typedef struct {
    int32_t *ids;
    int n_in, n_out;           /* prompt tokens; max_tokens */
    /* results */
    double start, ttft, latency, last;
    double *itl;
    int n_itl, cap_itl, chunks;
    int prompt_tokens, completion_tokens, ok;
    char *buf;                 /* the SSE bytes not yet parsed */
    size_t len, cap;
    char *body;
    CURL *h;
    struct curl_slist *hdr;
} req;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* hdr plus "Authorization: Bearer KEY" when --api-key was given. */
static struct curl_slist *with_api_key(const bench_args *a, struct curl_slist *hdr) {
    if (!a->api_key) return hdr;
    char auth[1024];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", a->api_key);
    return curl_slist_append(hdr, auth);
}

/* One SSE event's JSON: a text chunk marks a token arrival; the usage chunk gives the counts. */
static void on_event(req *r, const char *json, double t) {
    cJSON *j = cJSON_Parse(json);
    if (!j) return;
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "choices"), *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    const cJSON *c0 = cJSON_GetArrayItem(ch, 0), *text = cJSON_GetObjectItemCaseSensitive(c0, "text");
    if (cJSON_IsString(text) && text->valuestring[0]) {
        if (r->chunks == 0) r->ttft = t - r->start;
        else {
            if (r->n_itl == r->cap_itl) r->itl = lj_realloc(r->itl, (size_t)(r->cap_itl = 2 * r->cap_itl + 16) * sizeof(double));
            r->itl[r->n_itl++] = t - r->last;
        }
        r->chunks++;
        r->last = t;
    }
    if (cJSON_IsObject(u)) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens"), *c = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
        if (cJSON_IsNumber(p)) r->prompt_tokens = p->valueint;
        if (cJSON_IsNumber(c)) r->completion_tokens = c->valueint;
    }
    cJSON_Delete(j);
}

static size_t on_data(char *p, size_t size, size_t n, void *ud) {
    req *r = ud;
    const double t = now();
    const size_t k = size * n;
    if (r->len + k + 1 > r->cap) r->buf = lj_realloc(r->buf, r->cap = 2 * (r->len + k + 1));
    memcpy(r->buf + r->len, p, k);
    r->len += k;
    r->buf[r->len] = 0;
    char *e;
    while ((e = strstr(r->buf, "\n\n"))) {
        *e = 0;
        if (strncmp(r->buf, "data: ", 6) == 0 && strcmp(r->buf + 6, "[DONE]") != 0) on_event(r, r->buf + 6, t);
        const size_t used = (size_t)(e + 2 - r->buf);
        memmove(r->buf, e + 2, r->len - used + 1);
        r->len -= used;
    }
    return k;
}

static void req_start(req *r, CURLM *multi, const bench_args *a, const char *model, const char *url) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", model);
    cJSON_AddItemToObject(b, "prompt", cJSON_CreateIntArray(r->ids, r->n_in));
    cJSON_AddNumberToObject(b, "max_tokens", r->n_out);
    cJSON_AddNumberToObject(b, "temperature", 0);
    cJSON_AddBoolToObject(b, "stream", 1);
    cJSON_AddBoolToObject(b, "ignore_eos", a->ignore_eos);
    cJSON *so = cJSON_AddObjectToObject(b, "stream_options");
    cJSON_AddBoolToObject(so, "include_usage", 1);
    r->body = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    r->h = curl_easy_init();
    r->hdr = with_api_key(a, curl_slist_append(NULL, "Content-Type: application/json"));
    curl_easy_setopt(r->h, CURLOPT_URL, url);
    curl_easy_setopt(r->h, CURLOPT_HTTPHEADER, r->hdr);
    curl_easy_setopt(r->h, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(r->h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(r->h, CURLOPT_PRIVATE, r);
    curl_easy_setopt(r->h, CURLOPT_NOSIGNAL, 1L);
    r->start = now();
    curl_multi_add_handle(multi, r->h);
}

/* ---- metrics -------------------------------------------------------------------------------- */

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* numpy.percentile(x, q) (linear interpolation) of a sorted x[n]; 0 when n = 0. */
static double pct(const double *x, int n, double q) {
    if (n == 0) return 0;
    const double k = (n - 1) * q / 100.0;
    const int f = (int)floor(k), c = f + 1 < n ? f + 1 : f;
    return x[f] + (x[c] - x[f]) * (k - f);
}

static void stat_put(cJSON *o, const char *name, double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_d);
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++) sum += x[i];
    const double mean = n ? sum / n : 0;
    for (int i = 0; i < n; i++) sq += (x[i] - mean) * (x[i] - mean);
    char k[64];
    snprintf(k, sizeof k, "mean_%s_ms", name), cJSON_AddNumberToObject(o, k, 1e3 * mean);
    snprintf(k, sizeof k, "median_%s_ms", name), cJSON_AddNumberToObject(o, k, 1e3 * pct(x, n, 50));
    snprintf(k, sizeof k, "std_%s_ms", name), cJSON_AddNumberToObject(o, k, 1e3 * (n ? sqrt(sq / n) : 0));
    snprintf(k, sizeof k, "p99_%s_ms", name), cJSON_AddNumberToObject(o, k, 1e3 * pct(x, n, 99));
}

static double num(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k)->valuedouble; }

static void print_table(const cJSON *o, int offline) {
    printf("============ %s Benchmark Result ============\n", offline ? "Offline" : "Serving");
    printf("%-40s %-10.0f\n", "Successful requests:", num(o, "completed"));
    printf("%-40s %-10.0f\n", "Failed requests:", num(o, "failed"));
    printf("%-40s %-10.2f\n", "Benchmark duration (s):", num(o, "duration"));
    printf("%-40s %-10.0f\n", "Total input tokens:", num(o, "total_input_tokens"));
    printf("%-40s %-10.0f\n", "Total generated tokens:", num(o, "total_output_tokens"));
    printf("%-40s %-10.2f\n", "Request throughput (req/s):", num(o, "request_throughput"));
    printf("%-40s %-10.2f\n", "Output token throughput (tok/s):", num(o, "output_throughput"));
    printf("%-40s %-10.2f\n", "Total Token throughput (tok/s):", num(o, "total_token_throughput"));
    if (offline) {
        const double np = num(o, "steps_prompt"), nd = num(o, "steps_decode");
        printf("%-40s %-10.0f\n", "Steps with prompt rows:", np);
        printf("%-40s %-10.2f\n", "  their forward (s):", num(o, "forward_prompt_s"));
        printf("%-40s %-10.0f\n", "Decode-only steps:", nd);
        printf("%-40s %-10.2f\n", "  their forward (s):", num(o, "forward_decode_s"));
        printf("%-40s %-10.3f\n", "  mean decode step (ms):", nd > 0 ? 1e3 * num(o, "forward_decode_s") / nd : 0.0);
        printf("%-40s %-10.2f\n", "Scheduling and sampling (s):", num(o, "host_s"));
        printf("%-40s %-10.0f\n", "Preemptions:", num(o, "preemptions"));
    }
    if (!offline) {
        const char *names[3] = {"ttft", "tpot", "itl"}, *heads[3] = {"Time to First Token",
            "Time per Output Token (excl. 1st token)", "Inter-token Latency"}, *up[3] = {"TTFT", "TPOT", "ITL"};
        for (int i = 0; i < 3; i++) {
            printf("%s\n", heads[i]);
            char k[64];
            const char *w[3] = {"mean", "median", "p99"}, *W[3] = {"Mean", "Median", "P99"};
            for (int m = 0; m < 3; m++) {
                char label[64];
                snprintf(k, sizeof k, "%s_%s_ms", w[m], names[i]);
                snprintf(label, sizeof label, "%s %s (ms):", W[m], up[i]);
                printf("%-40s %-10.2f\n", label, num(o, k));
            }
        }
    }
    printf("==================================================\n");
}

/* ---- prompts -------------------------------------------------------------------------------- */

/* vLLM's random dataset lengths: uniform integers in [len * (1 - r), len * (1 + r)], at least 1. */
static int draw_len(lj_rng *g, int len, double r) {
    const int lo = (int)fmax(1, floor(len * (1 - r))), hi = (int)fmax(lo, ceil(len * (1 + r)));
    return lo + (int)(lj_rng_below(g, (uint64_t)(hi - lo + 1)));
}

static lj_status make_prompts(const bench_args *a, lj_tokenizer *tok, req *rs) {
    lj_rng g;
    lj_rng_seed(&g, (uint64_t)a->seed);
    int32_t *corpus = NULL;
    int64_t n_corpus = 0;
    if (strcmp(a->dataset_name, "kjv") == 0) {
        char path[LJ_PATH_MAX];
        if (a->dataset_path) snprintf(path, sizeof path, "%s", a->dataset_path);
        else {
            char cache[LJ_PATH_MAX];
            snprintf(path, sizeof path, "%s/data/kjv.txt", lj_cache_dir(cache, sizeof cache));
        }
        char *text;
        size_t len;
        LJ_TRY(lj_file_read_all(path, &text, &len));
        if (len > (16u << 20)) len = 16u << 20;
        lj_status s = lj_tokenizer_encode(tok, text, len, 0, &corpus, &n_corpus);
        free(text);
        LJ_TRY(s);
        if (n_corpus < 2 * (int64_t)a->input_len)
            return lj_fail(LJ_ERR_ARG, "--dataset-path %s: %lld tokens, too few for --random-input-len %d", path,
                           (long long)n_corpus, a->input_len);
    } else if (strcmp(a->dataset_name, "random") != 0) {
        return lj_fail(LJ_ERR_ARG, "--dataset-name %s: expected random or kjv", a->dataset_name);
    }
    int32_t regular = lj_tokenizer_vocab_size(tok);
    while (regular > 1 && lj_tokenizer_is_special(tok, regular - 1)) regular--;
    /* vLLM's --random-prefix-len: the same random tokens before every prompt */
    const int np = a->prefix_len;
    int32_t *prefix = lj_malloc((size_t)(np > 0 ? np : 1) * sizeof(int32_t));
    for (int k = 0; k < np; k++) prefix[k] = (int32_t)(lj_rng_below(&g, (uint64_t)regular));
    for (int i = 0; i < a->num_prompts; i++) {
        req *r = &rs[i];
        const int n = draw_len(&g, a->input_len, a->range_ratio);
        r->n_in = np + n;
        r->n_out = draw_len(&g, a->output_len, a->range_ratio);
        r->ids = lj_malloc((size_t)r->n_in * sizeof(int32_t));
        memcpy(r->ids, prefix, (size_t)np * sizeof(int32_t));
        if (corpus) { /* a passage of the text at a random offset */
            const int64_t off = (int64_t)(lj_rng_below(&g, (uint64_t)(n_corpus - n)));
            memcpy(r->ids + np, corpus + off, (size_t)n * sizeof(int32_t));
        } else {
            for (int k = 0; k < n; k++) r->ids[np + k] = (int32_t)(lj_rng_below(&g, (uint64_t)regular));
        }
    }
    free(prefix);
    free(corpus);
    return LJ_OK;
}

/* ---- the runs ------------------------------------------------------------------------------- */

static lj_status run_http(const bench_args *a, req *rs, double *duration) {
    char url[1024], model[512];
    snprintf(url, sizeof url, "%s%s", a->base_url, a->endpoint);
    if (a->model) snprintf(model, sizeof model, "%s", a->model);
    else { /* the server's one model (GET /v1/models) */
        req m = {0};
        char murl[1024];
        snprintf(murl, sizeof murl, "%s/v1/models", a->base_url);
        CURL *h = curl_easy_init();
        curl_easy_setopt(h, CURLOPT_URL, murl);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &m);
        struct curl_slist *hdr = with_api_key(a, NULL);
        if (hdr) curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        const CURLcode rc = curl_easy_perform(h);
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(h);
        curl_slist_free_all(hdr);
        if (rc == CURLE_OK && status == 401) {
            free(m.buf);
            return lj_fail(LJ_ERR_ARG, "--base-url %s: GET /v1/models answered 401: the server asks for an API key: "
                                       "give its --api-key",
                           a->base_url);
        }
        cJSON *j = rc == CURLE_OK && m.buf ? cJSON_Parse(m.buf) : NULL;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0), "id");
        if (!cJSON_IsString(id)) {
            cJSON_Delete(j);
            free(m.buf);
            return lj_fail(LJ_ERR_IO, "--base-url %s: GET /v1/models gave no model (%s): start ljperf serve there "
                                          "or pass its --base-url",
                           a->base_url,
                           rc == CURLE_OK ? "no data[0].id" : curl_easy_strerror(rc));
        }
        snprintf(model, sizeof model, "%s", id->valuestring);
        cJSON_Delete(j);
        free(m.buf);
    }
    /* arrival times: Poisson (exponential gaps, vLLM's burstiness 1) or all at 0 */
    double *at = lj_calloc((size_t)a->num_prompts, sizeof(double));
    lj_rng g;
    lj_rng_seed(&g, (uint64_t)a->seed + 1);
    for (int i = 1; i < a->num_prompts; i++)
        at[i] = at[i - 1] + (isinf(a->request_rate) ? 0 : -log(1.0 - (double)lj_rng_uniform(&g)) / a->request_rate);
    CURLM *multi = curl_multi_init();
    const int maxc = a->max_concurrency > 0 ? a->max_concurrency : a->num_prompts;
    int next = 0, inflight = 0, done = 0;
    const double t0 = now();
    while (done < a->num_prompts) {
        while (next < a->num_prompts && inflight < maxc && now() - t0 >= at[next]) {
            req_start(&rs[next++], multi, a, model, url);
            inflight++;
        }
        int running;
        curl_multi_perform(multi, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            req *r;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            long code = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
            r->latency = now() - r->start;
            r->ok = msg->data.result == CURLE_OK && code == 200 && r->chunks > 0;
            if (!r->ok) fprintf(stderr, "ljperf bench serve: a request failed: %s, HTTP %ld\n", curl_easy_strerror(msg->data.result), code);
            curl_multi_remove_handle(multi, r->h);
            curl_easy_cleanup(r->h);
            curl_slist_free_all(r->hdr);
            r->h = NULL;
            inflight--, done++;
        }
        double wait = 0.05;
        if (next < a->num_prompts && inflight < maxc) wait = fmin(wait, fmax(0, at[next] - (now() - t0)));
        curl_multi_poll(multi, NULL, 0, (int)(wait * 1e3), NULL);
    }
    *duration = now() - t0;
    curl_multi_cleanup(multi);
    free(at);
    return LJ_OK;
}

/* In-process: every prompt submitted at once to an engine started from the serve flags. */
static lj_status run_offline(const bench_args *a, lj_cli_served *sv, req *rs, double *duration, lj_serve_stats *st) {
    lj_serve_request **q = lj_calloc((size_t)a->num_prompts, sizeof *q);
    const double t0 = now();
    for (int i = 0; i < a->num_prompts; i++) {
        lj_sampling_params p;
        lj_sampling_params_default(&p);
        p.temperature = 0;
        p.max_tokens = rs[i].n_out;
        p.ignore_eos = a->ignore_eos;
        q[i] = lj_serve_request_new(rs[i].ids, rs[i].n_in, &p, 1, 0);
        if (lj_serve_submit(sv->engine, q[i]) != LJ_SERVE_QUEUED) { /* max_waiting_requests >= num_prompts */
            lj_serve_request_release(q[i]);
            q[i] = NULL; /* a failed request */
        }
    }
    for (int i = 0; i < a->num_prompts; i++) {
        if (!q[i]) continue;
        while (!lj_serve_request_wait(q[i], 1 << 30, 1.0)) {}
        lj_serve_request_lock(q[i]);
        rs[i].prompt_tokens = rs[i].n_in;
        rs[i].completion_tokens = lj_serve_request_output(q[i], 0)->n;
        rs[i].ok = 1;
        lj_serve_request_unlock(q[i]);
        lj_serve_request_release(q[i]);
    }
    *duration = now() - t0;
    lj_serve_engine_stats(sv->engine, st);
    free(q);
    return LJ_OK;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: ljperf bench serve [flags]      (vLLM's `vllm bench serve`)\n"
            "  --base-url URL            the server (default http://127.0.0.1:8000)\n"
            "  --endpoint PATH           (default /v1/completions)\n"
            "  --model NAME              (default: the server's first in /v1/models)\n"
            "  --dataset-name random|kjv random token ids, or passages of --dataset-path's text\n"
            "  --dataset-path FILE       (kjv; default $LJPERF_CACHE/data/kjv.txt)\n"
            "  --tokenizer NAME|PATH     cuts the text into tokens; its vocabulary for random ids (default llama3)\n"
            "  --num-prompts N           (default 1000)\n"
            "  --random-input-len N      (default 1024)\n"
            "  --random-output-len N     max_tokens of each request (default 128)\n"
            "  --random-range-ratio R    lengths uniform in [len (1 - R), len (1 + R)] (default 0)\n"
            "  --random-prefix-len N     the same N random tokens before every prompt (default 0)\n"
            "  --api-key KEY             send 'Authorization: Bearer KEY' (the server's --api-key)\n"
            "  --request-rate R          Poisson arrivals per second; inf: all at once (default inf)\n"
            "  --max-concurrency N       requests in flight at most (default: no limit)\n"
            "  --ignore-eos              every request generates its max_tokens\n"
            "  --seed N                  (default 0)\n"
            "  --save-result             write the JSON to --result-dir/--result-filename\n"
            "  --result-dir DIR, --result-filename NAME, --result-json FILE\n"
            "  --offline                 no server: the engine in-process (the serve flags: --load, --device,\n"
            "                            --max-num-seqs, --max-num-batched-tokens, --kv-cache-tokens, ...)\n");
}

static lj_status bench_run(const bench_args *a, lj_cli_serve_args *ea, cJSON **out) {
    char tokpath[LJ_PATH_MAX];
    lj_cli_served sv;
    memset(&sv, 0, sizeof sv);
    lj_tokenizer *tok = NULL;
    if (a->offline) {
        LJ_TRY(lj_cli_serve_prepare(ea, &sv));
        tok = sv.tok;
    } else {
        LJ_TRY(lj_tokenizer_resolve(ea->tokenizer ? ea->tokenizer : "llama3", "--tokenizer", tokpath, sizeof tokpath));
        LJ_TRY(lj_tokenizer_load(tokpath, &tok));
    }
    req *rs = lj_calloc((size_t)a->num_prompts, sizeof *rs);
    lj_status s = make_prompts(a, tok, rs);
    if (s == LJ_OK && a->offline) { /* the server's rule (vLLM's), before the weights are loaded */
        const int max_len = ea->max_model_len > 0 ? ea->max_model_len : sv.cfg.max_position_embeddings;
        for (int i = 0; i < a->num_prompts && s == LJ_OK; i++)
            if (rs[i].n_in + rs[i].n_out > max_len)
                s = lj_fail(LJ_ERR_ARG,
                            "prompt %d: %d input + %d output tokens exceed --max-model-len %d: give a smaller "
                            "--random-input-len / --random-output-len (--random-range-ratio widens them) or a larger "
                            "--max-model-len", i, rs[i].n_in, rs[i].n_out, max_len);
    }
    double duration = 0;
    lj_serve_stats st;
    memset(&st, 0, sizeof st);
    if (s == LJ_OK && a->offline) {
        s = lj_cli_serve_open(ea, &sv);
        if (s == LJ_OK) s = run_offline(a, &sv, rs, &duration, &st);
    } else if (s == LJ_OK) {
        s = run_http(a, rs, &duration);
    }
    if (a->offline) lj_cli_serve_close(&sv, 0);
    else lj_tokenizer_free(tok);
    if (s == LJ_OK) {
        int completed = 0, n_tpot = 0, n_itl = 0;
        int64_t tin = 0, tout = 0;
        for (int i = 0; i < a->num_prompts; i++) n_itl += rs[i].n_itl;
        double *ttft = lj_calloc((size_t)a->num_prompts + 1, sizeof(double)), *tpot = lj_calloc((size_t)a->num_prompts + 1, sizeof(double));
        double *e2el = lj_calloc((size_t)a->num_prompts + 1, sizeof(double)), *itl = lj_calloc((size_t)n_itl + 1, sizeof(double));
        cJSON *o = cJSON_CreateObject(), *in_l = cJSON_CreateArray(), *out_l = cJSON_CreateArray();
        n_itl = 0;
        for (int i = 0; i < a->num_prompts; i++) {
            const req *r = &rs[i];
            if (!r->ok) continue;
            ttft[completed] = r->ttft, e2el[completed] = r->latency;
            completed++;
            tin += r->prompt_tokens, tout += r->completion_tokens;
            if (r->completion_tokens > 1) tpot[n_tpot++] = (r->latency - r->ttft) / (r->completion_tokens - 1);
            for (int k = 0; k < r->n_itl; k++) itl[n_itl++] = r->itl[k];
            cJSON_AddItemToArray(in_l, cJSON_CreateNumber(r->prompt_tokens));
            cJSON_AddItemToArray(out_l, cJSON_CreateNumber(r->completion_tokens));
        }
        cJSON_AddStringToObject(o, "backend", a->offline ? "ljperf-offline" : "openai");
        cJSON_AddStringToObject(o, "dataset_name", a->dataset_name);
        cJSON_AddNumberToObject(o, "num_prompts", a->num_prompts);
        if (isinf(a->request_rate)) cJSON_AddStringToObject(o, "request_rate", "inf");
        else cJSON_AddNumberToObject(o, "request_rate", a->request_rate);
        if (a->max_concurrency > 0) cJSON_AddNumberToObject(o, "max_concurrency", a->max_concurrency);
        else cJSON_AddNullToObject(o, "max_concurrency");
        cJSON_AddNumberToObject(o, "duration", duration);
        cJSON_AddNumberToObject(o, "completed", completed);
        cJSON_AddNumberToObject(o, "failed", a->num_prompts - completed);
        cJSON_AddNumberToObject(o, "total_input_tokens", (double)tin);
        cJSON_AddNumberToObject(o, "total_output_tokens", (double)tout);
        cJSON_AddNumberToObject(o, "request_throughput", completed / duration);
        cJSON_AddNumberToObject(o, "output_throughput", (double)tout / duration);
        cJSON_AddNumberToObject(o, "total_token_throughput", (double)(tin + tout) / duration);
        if (a->offline) { /* the engine's own account of the time (lj_serve_stats) */
            cJSON_AddNumberToObject(o, "steps_prompt", (double)st.steps_prompt);
            cJSON_AddNumberToObject(o, "steps_decode", (double)st.steps_decode);
            cJSON_AddNumberToObject(o, "forward_prompt_s", st.forward_prompt_sec);
            cJSON_AddNumberToObject(o, "forward_decode_s", st.forward_decode_sec);
            cJSON_AddNumberToObject(o, "host_s", st.host_sec);
            cJSON_AddNumberToObject(o, "preemptions", (double)st.preemptions);
        }
        if (!a->offline) {
            stat_put(o, "ttft", ttft, completed);
            stat_put(o, "tpot", tpot, n_tpot);
            stat_put(o, "itl", itl, n_itl);
            stat_put(o, "e2el", e2el, completed);
        }
        cJSON_AddItemToObject(o, "input_lens", in_l);
        cJSON_AddItemToObject(o, "output_lens", out_l);
        free(ttft), free(tpot), free(e2el), free(itl);
        *out = o;
    }
    for (int i = 0; i < a->num_prompts; i++) free(rs[i].ids), free(rs[i].itl), free(rs[i].buf), free(rs[i].body);
    free(rs);
    return s;
}

/* --request-rate: requests per second, a positive number, or inf (vLLM's default: all at once). */
static lj_status parse_request_rate(void *dest, const char *flag, const char *value) {
    char *end;
    errno = 0;
    const double r = strcmp(value, "inf") == 0 ? INFINITY : strtod(value, &end);
    if (!isinf(r) && (*value == '\0' || *end != '\0' || errno || !isfinite(r) || !(r > 0)))
        return lj_fail(LJ_ERR_ARG, "%s %s: expected > 0 requests per second, or inf (all at once)", flag, value);
    *(double *)dest = r;
    return LJ_OK;
}

static int bench_serve(int argc, char **argv) {
    bench_args a = {.base_url = "http://127.0.0.1:8000", .endpoint = "/v1/completions", .dataset_name = "random",
                    .num_prompts = 1000, .input_len = 1024, .output_len = 128, .request_rate = INFINITY,
                    .result_dir = "."};
    lj_cli_serve_args ea;
    lj_cli_serve_args_default(&ea);
    lj_flag rows[LJ_CLI_SERVE_FLAGS + 20] = {
        {.name = "--base-url", .kind = LJ_FLAG_STR, .dest = &a.base_url},
        {.name = "--endpoint", .kind = LJ_FLAG_STR, .dest = &a.endpoint},
        {.name = "--model", .kind = LJ_FLAG_STR, .dest = &a.model},
        {.name = "--dataset-name", .kind = LJ_FLAG_STR, .dest = &a.dataset_name},
        {.name = "--dataset-path", .kind = LJ_FLAG_STR, .dest = &a.dataset_path},
        {.name = "--num-prompts", .kind = LJ_FLAG_INT, .dest = &a.num_prompts, .min = 1},
        {.name = "--random-input-len", .kind = LJ_FLAG_INT, .dest = &a.input_len, .min = 1},
        {.name = "--random-output-len", .kind = LJ_FLAG_INT, .dest = &a.output_len, .min = 1},
        {.name = "--random-range-ratio", .kind = LJ_FLAG_DOUBLE, .dest = &a.range_ratio},
        {.name = "--request-rate", .kind = LJ_FLAG_FUNC, .dest = &a.request_rate, .fn = parse_request_rate},
        {.name = "--max-concurrency", .kind = LJ_FLAG_INT, .dest = &a.max_concurrency, .min = 1},
        {.name = "--ignore-eos", .kind = LJ_FLAG_SWITCH, .dest = &a.ignore_eos, .ival = 1},
        {.name = "--seed", .kind = LJ_FLAG_INT, .dest = &a.seed},
        {.name = "--save-result", .kind = LJ_FLAG_SWITCH, .dest = &a.save_result, .ival = 1},
        {.name = "--result-dir", .kind = LJ_FLAG_STR, .dest = &a.result_dir},
        {.name = "--result-filename", .kind = LJ_FLAG_STR, .dest = &a.result_filename},
        {.name = "--result-json", .kind = LJ_FLAG_STR, .dest = &a.result_json},
        {.name = "--offline", .kind = LJ_FLAG_SWITCH, .dest = &a.offline, .ival = 1},
        {.name = "--random-prefix-len", .kind = LJ_FLAG_INT, .dest = &a.prefix_len},
        {.name = "--api-key", .kind = LJ_FLAG_STR, .dest = &a.api_key},
    };
    const int nrows = 20 + lj_cli_serve_flag_rows(&ea, rows + 20);
    lj_flags_result res;
    if (lj_flags_parse("bench serve", rows, nrows, argc, argv, 0, &res) != LJ_OK) return lj_cli_error("bench serve");
    if (res.help) {
        usage(stdout);
        return 0;
    }
    lj_status bad = a.num_prompts < 1 ? lj_fail(LJ_ERR_ARG, "--num-prompts %d: expected >= 1", a.num_prompts)
                    : a.input_len < 1 ? lj_fail(LJ_ERR_ARG, "--random-input-len %d: expected >= 1", a.input_len)
                    : a.output_len < 1 ? lj_fail(LJ_ERR_ARG, "--random-output-len %d: expected >= 1", a.output_len)
                    : a.api_key && !a.api_key[0] ? lj_fail(LJ_ERR_ARG, "--api-key '': expected a non-empty key")
                    : a.prefix_len < 0 || a.prefix_len > (1 << 20)
                        ? lj_fail(LJ_ERR_ARG, "--random-prefix-len %d: expected 0 to 1048576", a.prefix_len)
                    : !(a.range_ratio >= 0 && a.range_ratio < 1)
                        ? lj_fail(LJ_ERR_ARG, "--random-range-ratio %g: expected 0 <= ratio < 1", a.range_ratio)
                    : a.max_concurrency < 0
                        ? lj_fail(LJ_ERR_ARG, "--max-concurrency %d: expected >= 1", a.max_concurrency)
                    : a.offline ? lj_cli_serve_args_check(&ea)
                                : LJ_OK;
    if (bad != LJ_OK) return lj_cli_error("bench serve");
    if (a.offline && !ea.max_waiting_requests) ea.max_waiting_requests = a.num_prompts;
    if (a.offline && ea.max_waiting_requests < a.num_prompts) ea.max_waiting_requests = a.num_prompts;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    cJSON *o = NULL;
    lj_status s = bench_run(&a, &ea, &o);
    curl_global_cleanup();
    if (s != LJ_OK) return lj_cli_error("bench serve");
    print_table(o, a.offline);
    char path[LJ_PATH_MAX] = "";
    if (a.result_json) snprintf(path, sizeof path, "%s", a.result_json);
    else if (a.save_result)
        snprintf(path, sizeof path, "%s/%s", a.result_dir, a.result_filename ? a.result_filename : "bench-serve.json");
    int rc = 0;
    if (num(o, "completed") < 1) {
        lj_fail(LJ_ERR_IO, "no request succeeded (--base-url %s)", a.base_url);
        rc = lj_cli_error("bench serve");
    }
    if (path[0]) {
        char *text = cJSON_Print(o);
        FILE *f = fopen(path, "w");
        if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
            lj_fail(LJ_ERR_IO, "--result-json %s: cannot write", path);
            rc = lj_cli_error("bench serve");
        }
        free(text);
    }
    cJSON_Delete(o);
    return rc;
}

int lj_cli_bench(int argc, char **argv) {
    if (argc >= 1 && strcmp(argv[0], "serve") == 0) return bench_serve(argc - 1, argv + 1);
    fprintf(stderr, "usage: ljperf bench serve [flags]   (`ljperf bench serve --help` lists them)\n");
    return 2;
}

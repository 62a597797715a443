/* serve.c: `ljperf serve`: load a checkpoint, start the engine (serve/engine.h) and the
 * OpenAI-compatible HTTP server (serve/http.h); SIGTERM or SIGINT drains the requests in flight
 * and exits. Flag names are vLLM's (`vllm serve`). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "data/tokenizer.h"
#include "io/hf.h"
#include "cli/serve_setup.h"

typedef struct {
    lj_cli_serve_args e;
    const char *host, *api_key;
    int port;
} serve_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: ljperf serve --load DIR [flags]\n"
            "  --load DIR                   a training checkpoint root (its latest iteration), one of its\n"
            "                               iter_NNNNNNN directories, or a Hugging Face model directory\n"
            "  --tokenizer NAME|PATH        llama3, qwen3, a tokenizer.json or a directory holding one (default:\n"
            "                               the one beside the model, else the set-up script's Llama 3)\n"
            "  --load-format auto|dummy     auto: the weights of --load; dummy: random weights (vLLM's name), with\n"
            "                               --load a directory holding config.json or a preset (llama3.1-8b, ...)\n"
            "  --device auto|cpu|cuda       (default auto: the GPU when there is one, else the CPU)\n"
            "  --host ADDR                  address to listen on (default 127.0.0.1)\n"
            "  --port N                     (default 8000; 0: a free port, printed at start-up)\n"
            "  --api-key KEY                require 'Authorization: Bearer KEY' on the /v1 routes\n"
            "  --served-model-name NAME     the model's name in the API (default: --load as given)\n"
            "  --max-model-len N            positions per sequence, prompt and output (default: the\n"
            "                               model's max_position_embeddings)\n"
            "  --max-num-seqs N             sequences per step (default 256)\n"
            "  --max-num-batched-tokens N   tokens per step (default 2048; long prompts are cut into chunks)\n"
            "  --kv-cache-tokens N          KV cache size in tokens (default: max-model-len x max-num-seqs,\n"
            "                               at most --gpu-memory-utilization of the free memory)\n"
            "  --gpu-memory-utilization F   without --kv-cache-tokens: the share of the device's memory this\n"
            "                               server may use, weights, activations and KV cache (default 0.9); on the\n"
            "                               CPU the share of the available memory the KV cache may take (0.25)\n"
            "  --kv-cache-dtype auto|fp8    auto: the cache in the activation dtype; fp8 (fp8_e4m3): E4M3 codes\n"
            "                               with a per-layer scale for keys and one for values (1.0), half the\n"
            "                               bytes per token\n"
            "  --quantization fp8           the linear layers' weights cast to E4M3 at load (one scale per\n"
            "                               tensor; lm_head stays bf16), activations cast per step: FP8 GEMMs\n"
            "  --enable-prefix-caching      reuse the KV blocks of shared prompt prefixes (default on)\n"
            "  --no-enable-prefix-caching\n"
            "  --max-waiting-requests N     requests that may wait; beyond, HTTP 429 (default 1024)\n"
            "  --enforce-eager              run every step op by op: no CUDA graphs for decode batches (by\n"
            "                               default a GPU captures one per batch size 1, 2, 4, 8, 16, 24, ...)\n");
}

/* The model's end ids: the tokenizer's EOS, config.json's, tokenizer_config.json's eos_token
 * (a chat model's end of turn) and generation_config.json's eos_token_id (one or a list). */
static int end_ids(const char *dir, const char *tokpath, lj_tokenizer *tok, const lj_model_config *cfg, int32_t *ids,
                   char *eos_text, size_t eos_len) {
    int n = 0;
    const int32_t cands[2] = {lj_tokenizer_eos_id(tok), cfg->eos_token_id};
    for (int i = 0; i < 2; i++)
        if (cands[i] >= 0 && (n == 0 || ids[0] != cands[i])) ids[n++] = cands[i];
    char path[LJ_PATH_MAX];
    const char *slash = strrchr(tokpath, '/');
    snprintf(path, sizeof path, "%.*s/tokenizer_config.json", slash ? (int)(slash - tokpath) : 1, slash ? tokpath : ".");
    char *text = NULL;
    size_t len;
    eos_text[0] = 0;
    if (lj_file_read_all(path, &text, &len) == LJ_OK) {
        cJSON *c = cJSON_Parse(text);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(c, "eos_token");
        if (cJSON_IsObject(e)) e = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (cJSON_IsString(e)) {
            snprintf(eos_text, eos_len, "%s", e->valuestring);
            const int32_t id = lj_tokenizer_token_id(tok, e->valuestring, strlen(e->valuestring));
            int dup = 0;
            for (int i = 0; i < n; i++) dup |= ids[i] == id;
            if (id >= 0 && !dup && n < 4) ids[n++] = id;
        }
        cJSON_Delete(c);
        free(text);
    }
    if (lj_path_join(path, dir, "generation_config.json") == LJ_OK && lj_file_read_all(path, &text, &len) == LJ_OK) {
        cJSON *c = cJSON_Parse(text);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(c, "eos_token_id"), *x;
        cJSON *one = cJSON_IsNumber(e) ? cJSON_CreateIntArray(&(int){e->valueint}, 1) : NULL;
        const cJSON *list = one ? one : e;
        cJSON_ArrayForEach(x, list) {
            int dup = 0;
            for (int i = 0; i < n; i++) dup |= ids[i] == x->valueint;
            if (cJSON_IsNumber(x) && !dup && n < 4) ids[n++] = x->valueint;
        }
        cJSON_Delete(one);
        cJSON_Delete(c);
        free(text);
    }
    return n;
}

/* The chat template and BOS text of the tokenizer's tokenizer_config.json (NULL: none). */
static char *chat_template(const char *tokpath, char *bos, size_t bos_len) {
    char path[LJ_PATH_MAX];
    const char *slash = strrchr(tokpath, '/');
    snprintf(path, sizeof path, "%.*s/tokenizer_config.json", slash ? (int)(slash - tokpath) : 1, slash ? tokpath : ".");
    char *text = NULL, *out = NULL;
    size_t len;
    bos[0] = 0;
    if (lj_file_read_all(path, &text, &len) != LJ_OK) return NULL;
    cJSON *c = cJSON_Parse(text);
    free(text);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "chat_template"), *b = cJSON_GetObjectItemCaseSensitive(c, "bos_token");
    if (cJSON_IsArray(t)) { /* [{"name": "default", "template": ...}, ...] */
        const cJSON *x;
        cJSON_ArrayForEach(x, t) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(x, "name");
            if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0) t = cJSON_GetObjectItemCaseSensitive(x, "template");
        }
    }
    if (cJSON_IsString(t)) out = strdup(t->valuestring);
    if (cJSON_IsObject(b)) b = cJSON_GetObjectItemCaseSensitive(b, "content");
    if (cJSON_IsString(b)) snprintf(bos, bos_len, "%s", b->valuestring);
    cJSON_Delete(c);
    return out;
}

/* Whether the backend runs the FP8 forms asked for: the paged ops' FP8 entries for an FP8 cache;
 * for FP8 weights the FP8 casts and GEMM, on CUDA a GPU and cuBLASLt with FP8 GEMMs
 * (lj_ops_cuda_fp8_check) and output widths that are multiples of 8 (cuBLASLt's 16-byte rows). */
static lj_status check_fp8(const lj_cli_serve_args *a, const lj_ops *ops, const lj_model_config *cfg) {
    if (lj_cli_serve_kv_dtype(a) == LJ_SERVE_KV_FP8_E4M3 && (!ops->paged_kv_write_fp8 || !ops->paged_attention_fp8))
        return lj_fail(LJ_ERR_UNSUPPORTED, "--kv-cache-dtype %s: the %s backend has no FP8 paged attention; use "
                       "--kv-cache-dtype auto", a->kv_cache_dtype, ops->name);
    if (lj_cli_serve_quantization(a) != LJ_SERVE_QUANT_FP8) return LJ_OK;
    if (!ops->fp8_amax || !ops->fp8_quantize || !ops->fp8_matmul || !ops->fp8_swiglu_amax)
        return lj_fail(LJ_ERR_UNSUPPORTED, "--quantization %s: the %s backend has no FP8 GEMM; leave --quantization "
                       "out", a->quantization, ops->name);
    if (strcmp(ops->name, "cuda") != 0) {
        lj_log_info("serve: --quantization %s on the %s backend: an exact emulation of the FP8 GEMMs (decoded to "
                    "fp32), for checking; it is not faster", a->quantization, ops->name);
        return LJ_OK;
    }
    if (lj_ops_cuda_fp8_check() != LJ_OK) { /* its message speaks of training's flag */
        char why[256];
        const char *m = lj_error_message();
        snprintf(why, sizeof why, "%s", strncmp(m, "--fp8-format: ", 14) ? m : m + 14);
        return lj_fail(LJ_ERR_UNSUPPORTED, "--quantization %s: %s; leave --quantization out", a->quantization, why);
    }
    const int qkv = (cfg->num_attention_heads + 2 * cfg->num_key_value_heads) * cfg->head_dim;
    if (qkv % 8 || cfg->hidden_size % 8 || cfg->intermediate_size % 4)
        return lj_fail(LJ_ERR_UNSUPPORTED, "--quantization %s on CUDA: the linears' output widths (qkv %d, hidden %d, "
                       "gate/up 2 x %d) must be multiples of 8 (cuBLASLt's FP8 GEMM); leave --quantization out",
                       a->quantization, qkv, cfg->hidden_size, cfg->intermediate_size);
    return LJ_OK;
}

lj_status lj_cli_serve_prepare(const lj_cli_serve_args *a, lj_cli_served *sv) {
    memset(sv, 0, sizeof *sv);
    char *dir = sv->dir, *tokpath = sv->tokpath;
    lj_model_config *cfgp = &sv->cfg;
    const int dummy = strcmp(a->load_format, "dummy") == 0;
    if (dummy && lj_config_preset(a->load, cfgp) == LJ_OK) {
        snprintf(dir, LJ_PATH_MAX, "%s", a->load);
    } else {
        LJ_TRY(lj_cli_model_dir(a->load, dir));
        LJ_TRY(lj_hf_load_config(dir, cfgp));
    }
    const lj_model_config cfg = *cfgp;
    LJ_TRY(lj_cli_device(a->device, 0, &sv->ops));
    if (!sv->ops->paged_attention)
        return lj_fail(LJ_ERR_UNSUPPORTED, "--device %s: the %s backend has no paged attention; use --device cpu",
                       a->device, sv->ops->name);
    LJ_TRY(check_fp8(a, sv->ops, &cfg));
    if (a->max_model_len > cfg.max_position_embeddings)
        return lj_fail(LJ_ERR_ARG, "--max-model-len %d is above the model's max_position_embeddings (%d)",
                       a->max_model_len, cfg.max_position_embeddings);
    if (a->tokenizer) LJ_TRY(lj_tokenizer_resolve(a->tokenizer, "--tokenizer", tokpath, LJ_PATH_MAX));
    else if (lj_path_join(tokpath, dir, "tokenizer.json") != LJ_OK || access(tokpath, R_OK) != 0) {
        lj_tokenizer_default_path(tokpath, LJ_PATH_MAX);
        if (access(tokpath, R_OK) != 0) /* neither the model's nor the set-up script's cache */
            return lj_fail(LJ_ERR_IO, "--load %s has no tokenizer.json and %s is missing: give --tokenizer FILE, "
                                      "or run scripts/setup.sh (LJPERF_CACHE names its cache)", a->load, tokpath);
    }
    LJ_TRY(lj_tokenizer_load(tokpath, &sv->tok));
    if (lj_tokenizer_vocab_size(sv->tok) > cfg.vocab_size)
        return lj_fail(LJ_ERR_FORMAT, "%s/config.json: vocab_size %d is smaller than the tokenizer's %d", dir,
                       cfg.vocab_size, lj_tokenizer_vocab_size(sv->tok));
    return LJ_OK;
}

lj_status lj_cli_serve_open(const lj_cli_serve_args *a, lj_cli_served *sv) {
    const lj_ops *ops = sv->ops;
    const lj_model_config cfg = sv->cfg;
    const char *dir = sv->dir, *tokpath = sv->tokpath;
    const int dummy = strcmp(a->load_format, "dummy") == 0;
    const int max_model_len = a->max_model_len > 0 ? a->max_model_len : cfg.max_position_embeddings;
    lj_model *mp = &sv->m;
    lj_serve_model *smp = &sv->sm;
    sv->tmpl = chat_template(tokpath, sv->bos, sizeof sv->bos);
    const lj_serve_kv_dtype kv_dtype = lj_cli_serve_kv_dtype(a);
    const lj_serve_quantization quant = lj_cli_serve_quantization(a);
    lj_status s = lj_serve_weights_init(mp, &sv->plan, ops, &cfg, quant);
    sv->have_model = 1;
    float *weights = NULL;
    if (s == LJ_OK && dummy) {
        lj_model_init_weights_dummy(mp, 1234);
        lj_log_info("serve: --load-format dummy: random weights (uniform, the init's variance, seed 1234)");
    } else if (s == LJ_OK) {
        weights = lj_malloc((size_t)mp->layout.total * sizeof(float));
        s = lj_hf_import(dir, &cfg, weights);
        if (s == LJ_OK) lj_model_set_weights(mp, weights);
        free(weights);
    }
    if (s == LJ_OK) {
        char b1[32], b2[32];
        const size_t bytes = lj_serve_weights_bytes(mp), bf16 = (size_t)mp->layout.total * lj_dtype_size(ops->param_dtype);
        if (quant == LJ_SERVE_QUANT_FP8)
            lj_log_info("serve: --quantization %s: the block linears cast to E4M3 at load (per-tensor scales), "
                        "lm_head, embedding and norms in %s: weights %s (%s unquantized)",
                        a->quantization, lj_dtype_name(ops->param_dtype), lj_format_bytes(bytes, b1, sizeof b1),
                        lj_format_bytes(bf16, b2, sizeof b2));
        else
            lj_log_info("serve: weights %s in %s", lj_format_bytes(bytes, b1, sizeof b1),
                        lj_dtype_name(ops->param_dtype));
    }
    int kv_tokens = a->kv_cache_tokens;
    const size_t per_token = lj_serve_kv_bytes_per_token(mp, kv_dtype);
    if (s == LJ_OK && kv_tokens <= 0) {
        size_t free_b = 0, total_b = 0;
        ops->memory_info(&free_b, &total_b);
        const int cpu = strcmp(ops->name, "cpu") == 0;
        const double util = a->gpu_memory_utilization > 0 ? a->gpu_memory_utilization : cpu ? 0.25 : 0.9;
        /* vLLM's rule on a GPU: the KV cache gets util x the device's memory less what is in use
         * (the weights, the backend's workspaces, other processes) and the step's activations */
        const double act = (double)lj_serve_model_buffer_bytes(mp, a->max_num_batched_tokens, a->max_num_seqs,
                                                               max_model_len);
        const double budget = cpu ? util * (double)free_b : util * (double)total_b - (double)(total_b - free_b) - act;
        const double fit = fmax(budget, 0) / (double)per_token;
        const double want = (double)max_model_len * a->max_num_seqs;
        kv_tokens = (int)fmin(fmin(want, fit), 1 << 30);
        if (!cpu) {
            char b1[32], b2[32], b3[32];
            lj_log_info("serve: --gpu-memory-utilization %.2f of %s: %s in use after the weights, %s of step "
                        "activations, %d KV tokens fit (%zu bytes per token, %s)",
                        util, lj_format_bytes(total_b, b1, sizeof b1), lj_format_bytes(total_b - free_b, b2, sizeof b2),
                        lj_format_bytes((size_t)act, b3, sizeof b3), (int)fmin(fit, 1 << 30), per_token,
                        kv_dtype == LJ_SERVE_KV_FP8_E4M3 ? "fp8_e4m3" : lj_dtype_name(ops->act_dtype));
        }
    }
    if (s == LJ_OK && kv_tokens < max_model_len)
        s = lj_fail(LJ_ERR_ARG,
                    "the KV cache would hold %d tokens, fewer than --max-model-len %d: give --kv-cache-tokens >= %d or "
                    "a smaller --max-model-len",
                    kv_tokens, max_model_len, max_model_len);
    const int num_blocks = (kv_tokens + LJ_KV_BLOCK_SIZE - 1) / LJ_KV_BLOCK_SIZE;
    if (s == LJ_OK)
        s = lj_serve_model_init(smp, mp, num_blocks, a->max_num_batched_tokens, a->max_num_seqs, max_model_len,
                                kv_dtype);
    sv->am = (lj_api_model){a->served_model_name ? a->served_model_name : a->load, sv->tok, max_model_len, sv->tmpl, sv->bos, sv->eos};
    sv->num_blocks = num_blocks;
    if (s == LJ_OK && !a->enforce_eager && ops->graph_capture_begin) {
        const double t0 = lj_time_sec();
        const lj_status g = lj_serve_capture_graphs(smp);
        if (g != LJ_OK) lj_log_warn("serve: %s; the steps the graphs miss run op by op", lj_error_message());
        if (smp->num_graphs > 0)
            lj_log_info("serve: captured %d CUDA graphs of decode batches (1 to %d sequences) in %.1f s",
                        smp->num_graphs, smp->graph_sizes[smp->num_graphs - 1], lj_time_sec() - t0);
    }
    if (s == LJ_OK) {
        lj_serve_engine_options eo = {.max_num_seqs = a->max_num_seqs,
                                      .max_num_batched_tokens = a->max_num_batched_tokens,
                                      .max_model_len = max_model_len,
                                      .num_blocks = num_blocks,
                                      .enable_prefix_caching = a->prefix_caching,
                                      .max_waiting_requests = a->max_waiting_requests};
        eo.num_eos = end_ids(dir, tokpath, sv->tok, &cfg, eo.eos_ids, sv->eos, sizeof sv->eos);
        s = lj_serve_engine_start(&sv->engine, smp, &eo);
    }
    if (s == LJ_OK)
        lj_log_info("serve: ready: %s on %s, max-model-len %d, KV cache %d blocks of %d tokens (%.1f MiB, %s), "
                    "weights %s, max-num-seqs %d, max-num-batched-tokens %d, prefix caching %s%s",
                    sv->am.model_name, ops->name, max_model_len, num_blocks, LJ_KV_BLOCK_SIZE,
                    (double)smp->kv_bytes / (1 << 20),
                    kv_dtype == LJ_SERVE_KV_FP8_E4M3 ? "fp8_e4m3" : lj_dtype_name(ops->act_dtype),
                    quant == LJ_SERVE_QUANT_FP8 ? "fp8" : lj_dtype_name(ops->param_dtype), a->max_num_seqs,
                    a->max_num_batched_tokens,
                    a->prefix_caching ? "on" : "off", sv->tmpl ? ", chat template" : ", no chat template");
    return s;
}

void lj_cli_serve_close(lj_cli_served *sv, int drain) {
    if (sv->engine) lj_serve_engine_stop(sv->engine, drain);
    sv->engine = NULL;
    lj_serve_model_free(&sv->sm);
    if (sv->have_model && sv->m.ops) lj_serve_weights_free(&sv->m, &sv->plan);
    sv->have_model = 0;
    free(sv->tmpl);
    sv->tmpl = NULL;
    if (sv->tok) lj_tokenizer_free(sv->tok);
    sv->tok = NULL;
}

typedef struct {
    lj_model *m;
    const float *weights;
} weights_swap;

static lj_status swap_weights(void *ctx) {
    weights_swap *w = ctx;
    lj_model_set_weights(w->m, w->weights);
    return LJ_OK;
}

lj_status lj_cli_serve_update_weights(lj_cli_served *sv, const char *load, char *dir_out) {
    char dir[LJ_PATH_MAX];
    LJ_TRY(lj_cli_model_dir(load, dir));
    snprintf(dir_out, LJ_PATH_MAX, "%s", dir);
    lj_model_config cfg;
    LJ_TRY(lj_hf_load_config(dir, &cfg));
    const lj_model_config *c = &sv->cfg;
    if (cfg.num_hidden_layers != c->num_hidden_layers || cfg.hidden_size != c->hidden_size ||
        cfg.intermediate_size != c->intermediate_size || cfg.num_attention_heads != c->num_attention_heads ||
        cfg.num_key_value_heads != c->num_key_value_heads || cfg.vocab_size != c->vocab_size ||
        cfg.tie_word_embeddings != c->tie_word_embeddings)
        return lj_fail(LJ_ERR_ARG,
                       "%s/config.json: another shape than the served model's (layers %d, hidden %d, heads %d/%d, "
                       "vocab %d; served: %d, %d, %d/%d, %d)",
                       dir, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                       cfg.vocab_size, c->num_hidden_layers, c->hidden_size, c->num_attention_heads,
                       c->num_key_value_heads, c->vocab_size);
    float *weights = lj_malloc((size_t)sv->m.layout.total * sizeof(float));
    lj_status s = lj_hf_import(dir, c, weights);
    weights_swap w = {&sv->m, weights};
    if (s == LJ_OK) s = lj_serve_engine_update_weights(sv->engine, swap_weights, &w);
    free(weights);
    return s;
}

/* POST /update_weights_from_disk: model_path NULL reloads --load (its latest iteration now). */
static const char *g_load; /* --load as given */
static lj_status reload(void *ctx, const char *model_path, char *dir_out) {
    return lj_cli_serve_update_weights(ctx, model_path ? model_path : g_load, dir_out);
}

static lj_status run_serve(const serve_args *sa, sigset_t *signals) {
    const lj_cli_serve_args *a = &sa->e;
    lj_cli_served sv;
    lj_status s = lj_cli_serve_prepare(a, &sv);
    if (s != LJ_OK) {
        lj_cli_serve_close(&sv, 0);
        return s;
    }
    /* listen first: /health answers 503 while the weights load */
    lj_http_options ho = {sa->host, sa->port, sa->api_key, 1024, 32u << 20};
    lj_http_server *http;
    int port;
    s = lj_http_start(&http, &ho, &port);
    if (s != LJ_OK) {
        lj_cli_serve_close(&sv, 0);
        return s;
    }
    lj_log_info("serve: listening on http://%s:%d (loading %s)", sa->host, port, sv.dir);
    s = lj_cli_serve_open(a, &sv);
    if (s == LJ_OK) {
        lj_http_set_ready(http, sv.engine, &sv.am);
        lj_http_set_weights_loader(http, reload, &sv);
        int sig = 0;
        sigwait(signals, &sig);
        lj_log_info("serve: %s: draining the requests in flight", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        lj_http_begin_stop(http);
        const int left = lj_http_wait_idle(http, 120.0); /* the answers in flight leave whole */
        if (left) lj_log_warn("serve: %d request(s) still in flight after 120 s: stopping them", left);
        lj_serve_engine_stop(sv.engine, 1);
        sv.engine = NULL;
        lj_log_info("serve: stopped");
    }
    lj_http_stop(http);
    lj_cli_serve_close(&sv, 0);
    return s;
}

void lj_cli_serve_args_default(lj_cli_serve_args *a) {
    *a = (lj_cli_serve_args){.device = "auto", .load_format = "auto", .kv_cache_dtype = "auto", .max_num_seqs = 256,
                             .max_num_batched_tokens = 2048, .prefix_caching = 1, .max_waiting_requests = 1024};
}

int lj_cli_serve_flag_rows(lj_cli_serve_args *a, lj_flag *rows) {
    const lj_flag r[] = {
        {.name = "--load", .kind = LJ_FLAG_STR, .dest = &a->load},
        {.name = "--tokenizer", .kind = LJ_FLAG_STR, .dest = &a->tokenizer},
        {.name = "--load-format", .kind = LJ_FLAG_STR, .dest = &a->load_format},
        {.name = "--device", .kind = LJ_FLAG_STR, .dest = &a->device},
        {.name = "--served-model-name", .kind = LJ_FLAG_STR, .dest = &a->served_model_name},
        {.name = "--max-model-len", .kind = LJ_FLAG_INT, .dest = &a->max_model_len, .given = &a->max_model_len_given, .min = 1},
        {.name = "--max-num-seqs", .kind = LJ_FLAG_INT, .dest = &a->max_num_seqs, .min = 1, .max = 65536},
        {.name = "--max-num-batched-tokens", .kind = LJ_FLAG_INT, .dest = &a->max_num_batched_tokens, .min = 1, .max = 1048576},
        {.name = "--kv-cache-tokens", .kind = LJ_FLAG_INT, .dest = &a->kv_cache_tokens, .given = &a->kv_cache_tokens_given, .min = 1},
        {.name = "--gpu-memory-utilization", .kind = LJ_FLAG_DOUBLE, .dest = &a->gpu_memory_utilization},
        {.name = "--kv-cache-dtype", .kind = LJ_FLAG_STR, .dest = &a->kv_cache_dtype},
        {.name = "--quantization", .kind = LJ_FLAG_STR, .dest = &a->quantization},
        {.name = "--enable-prefix-caching", .kind = LJ_FLAG_SWITCH, .dest = &a->prefix_caching, .ival = 1},
        {.name = "--no-enable-prefix-caching", .kind = LJ_FLAG_SWITCH, .dest = &a->prefix_caching, .ival = 0},
        {.name = "--max-waiting-requests", .kind = LJ_FLAG_INT, .dest = &a->max_waiting_requests},
        {.name = "--enforce-eager", .kind = LJ_FLAG_SWITCH, .dest = &a->enforce_eager, .ival = 1},
    };
    const int n = (int)(sizeof r / sizeof r[0]);
    LJ_ASSERT(n <= LJ_CLI_SERVE_FLAGS);
    memcpy(rows, r, sizeof r);
    return n;
}

lj_status lj_cli_serve_args_check(const lj_cli_serve_args *a) {
    if (!a->load) return lj_fail(LJ_ERR_ARG, "--load DIR is required (a Hugging Face model folder)");
    if (a->max_model_len < 0 || (a->max_model_len_given && a->max_model_len < 1))
        return lj_fail(LJ_ERR_ARG, "--max-model-len %d: expected >= 1", a->max_model_len);
    if (a->max_num_seqs < 1 || a->max_num_seqs > 65536)
        return lj_fail(LJ_ERR_ARG, "--max-num-seqs %d: expected 1 to 65536", a->max_num_seqs);
    if (a->max_num_batched_tokens < 1 || a->max_num_batched_tokens > (1 << 20))
        return lj_fail(LJ_ERR_ARG, "--max-num-batched-tokens %d: expected 1 to 1048576", a->max_num_batched_tokens);
    if (a->kv_cache_tokens < 0 || (a->kv_cache_tokens_given && a->kv_cache_tokens < 1))
        return lj_fail(LJ_ERR_ARG, "--kv-cache-tokens %d: expected >= 1", a->kv_cache_tokens);
    if (!(a->gpu_memory_utilization >= 0 && a->gpu_memory_utilization <= 1))
        return lj_fail(LJ_ERR_ARG, "--gpu-memory-utilization %g: expected a fraction in (0, 1]",
                       a->gpu_memory_utilization);
    if (a->max_waiting_requests < 0)
        return lj_fail(LJ_ERR_ARG, "--max-waiting-requests %d: expected >= 0", a->max_waiting_requests);
    if (!strcmp(a->kv_cache_dtype, "fp8_e5m2"))
        return lj_fail(LJ_ERR_ARG, "--kv-cache-dtype fp8_e5m2: only E4M3 caches are built; use fp8 (fp8_e4m3) or auto");
    if (strcmp(a->kv_cache_dtype, "auto") && strcmp(a->kv_cache_dtype, "fp8") && strcmp(a->kv_cache_dtype, "fp8_e4m3"))
        return lj_fail(LJ_ERR_ARG, "--kv-cache-dtype %s: expected auto, fp8 or fp8_e4m3", a->kv_cache_dtype);
    if (a->quantization && strcmp(a->quantization, "fp8") && strcmp(a->quantization, "fp8_per_tensor"))
        return lj_fail(LJ_ERR_ARG, "--quantization %s: only fp8 (FP8 weights cast at load, per-tensor scales; alias "
                       "fp8_per_tensor) is built; leave it out for unquantized weights", a->quantization);
    if (strcmp(a->load_format, "auto") != 0 && strcmp(a->load_format, "dummy") != 0)
        return lj_fail(LJ_ERR_ARG, "--load-format %s: expected auto or dummy", a->load_format);
    return LJ_OK;
}

lj_serve_kv_dtype lj_cli_serve_kv_dtype(const lj_cli_serve_args *a) {
    return strcmp(a->kv_cache_dtype, "auto") ? LJ_SERVE_KV_FP8_E4M3 : LJ_SERVE_KV_AUTO;
}

lj_serve_quantization lj_cli_serve_quantization(const lj_cli_serve_args *a) {
    return a->quantization ? LJ_SERVE_QUANT_FP8 : LJ_SERVE_QUANT_NONE;
}

int lj_cli_serve(int argc, char **argv) {
    serve_args a = {.host = "127.0.0.1", .port = 8000};
    lj_cli_serve_args_default(&a.e);
    lj_flag rows[LJ_CLI_SERVE_FLAGS + 3] = {
        {.name = "--host", .kind = LJ_FLAG_STR, .dest = &a.host},
        {.name = "--port", .kind = LJ_FLAG_INT, .dest = &a.port, .min = 0, .max = 65535},
        {.name = "--api-key", .kind = LJ_FLAG_STR, .dest = &a.api_key},
    };
    const int nrows = 3 + lj_cli_serve_flag_rows(&a.e, rows + 3);
    lj_flags_result res;
    if (lj_flags_parse("serve", rows, nrows, argc, argv, 0, &res) != LJ_OK) return lj_cli_error("serve");
    if (res.help) {
        usage(stdout);
        return 0;
    }
    if (lj_cli_serve_args_check(&a.e) != LJ_OK) return lj_cli_error("serve");
    if (a.port < 0 || a.port > 65535) {
        lj_fail(LJ_ERR_ARG, "--port %d: expected 0 to 65535", a.port);
        return lj_cli_error("serve");
    }
    if (a.api_key && !a.api_key[0]) {
        lj_fail(LJ_ERR_ARG, "--api-key '': expected a non-empty key (or no --api-key)");
        return lj_cli_error("serve");
    }
    g_load = a.e.load;
    /* every thread started from here on inherits the blocked signals; the main thread waits for them */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    return run_serve(&a, &signals) == LJ_OK ? 0 : lj_cli_error("serve");
}

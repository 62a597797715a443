/* fuzz_serve_api.c: libFuzzer target of the server's request handling without the transport
 * (serve/api.h; libmicrohttpd delivers the body): any bytes as the body of /v1/completions,
 * /v1/chat/completions (rendered through the Qwen3 or Llama 3 chat template when run.sh finds
 * one), /tokenize or /detokenize, chosen by the first byte. A body that parses is freed; one that
 * does not gets its error JSON. The tokenizer is the committed tests/data/gpt2_mini, or
 * $LJ_FUZZ_TOKENIZER. The engine is never reached on this path: its entry points here abort. */
#include "fuzz_common.h"
#include "serve/api.h"

/* api.c's stream functions call into the engine; parsing never does. */
void lj_serve_request_lock(lj_serve_request *r) { (void)r, abort(); }
void lj_serve_request_unlock(lj_serve_request *r) { (void)r, abort(); }
const lj_serve_output *lj_serve_request_output(const lj_serve_request *r, int i) { return (void)r, (void)i, abort(), NULL; }
int lj_serve_request_cached_tokens(const lj_serve_request *r) { return (void)r, abort(), 0; }
void lj_serve_request_stop(lj_serve_engine *e, lj_serve_request *r, int i) { (void)e, (void)r, (void)i, abort(); }
const char *lj_finish_reason_name(lj_finish_reason r) { return (void)r, abort(), ""; }

static lj_api_model g_model;

/* The chat template of tokenizer_config.json at path (NULL when unreadable). */
static char *read_template(const char *path) {
    if (!path || !*path) return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 20];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    char *s = cJSON_IsString(t) ? lj_strdup(t->valuestring) : NULL;
    cJSON_Delete(j);
    return s;
}

static void setup(void) {
    (void)lj_fuzz_path("x"); /* the quiet log */
    const char *tp = getenv("LJ_FUZZ_TOKENIZER");
    char path[1024];
    if (!tp || !*tp) {
        const char *src = getenv("LJ_SOURCE_DIR");
        snprintf(path, sizeof path, "%s/tests/data/gpt2_mini/tokenizer.json", src && *src ? src : ".");
        tp = path;
    }
    if (lj_tokenizer_load(tp, &g_model.tok) != LJ_OK) {
        fprintf(stderr, "fuzz_serve_api: cannot load the tokenizer %s\n", tp);
        abort();
    }
    g_model.model_name = "fuzz";
    g_model.max_model_len = 256;
    g_model.chat_template = read_template(getenv("LJ_FUZZ_CHAT_TEMPLATE"));
    g_model.bos_token = "<|begin_of_text|>";
    g_model.eos_token = "<|eot_id|>";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_model.tok) setup();
    if (size < 1) return 0;
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    lj_api_error err;
    memset(&err, 0, sizeof err);
    switch (data[0] % 4) {
    case 0:
    case 1: {
        lj_api_request req;
        memset(&req, 0, sizeof req);
        const int st = lj_api_parse(&g_model, data[0] % 4 ? LJ_API_CHAT : LJ_API_COMPLETION, body, len, &req, &err);
        if (st == 0) lj_api_request_free(&req);
        else free(lj_api_error_json(err.status, err.message, err.param));
        break;
    }
    default: {
        char *out = NULL;
        const int st = data[0] % 4 == 2 ? lj_api_tokenize(&g_model, body, len, &out, &err)
                                         : lj_api_detokenize(&g_model, body, len, &out, &err);
        free(out);
        (void)st;
        break;
    }
    }
    return 0;
}

/* test_serve_api.c: the OpenAI request parsing of serve/api.c with the set-up script's Llama 3
 * and Qwen3 tokenizers: defaults (max_tokens 16 in completions, the rest of the context in
 * chat), the vLLM extras, the chat template through chat_template_kwargs (Qwen3's
 * enable_thinking), and the 400/404 answers with the field named for every kind of bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"

typedef struct {
    lj_tokenizer *tok;
    char *tmpl;
    lj_api_model m;
} model;

static int load(model *md, const char *name, const char *bos, const char *eos) {
    const char *cache = getenv("LJ_CACHE");
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/%s/tokenizer.json", cache ? cache : ".cache", name);
    if (lj_tokenizer_load(path, &md->tok) != LJ_OK) return -1;
    snprintf(path, sizeof path, "%s/tokenizer/%s/tokenizer_config.json", cache ? cache : ".cache", name);
    char *text;
    size_t n;
    if (lj_file_read_all(path, &text, &n) != LJ_OK) return -1;
    cJSON *c = cJSON_Parse(text);
    free(text);
    md->tmpl = strdup(cJSON_GetObjectItemCaseSensitive(c, "chat_template")->valuestring);
    cJSON_Delete(c);
    md->m = (lj_api_model){"tiny", md->tok, 64, md->tmpl, bos, eos};
    return 0;
}

static void unload(model *md) {
    lj_tokenizer_free(md->tok);
    free(md->tmpl);
}

static int parse(const model *md, lj_api_kind kind, const char *body, lj_api_request *req, lj_api_error *err) {
    return lj_api_parse(&md->m, kind, body, strlen(body), req, err);
}

static void test_completion_fields(void **state) {
    (void)state;
    model md;
    if (load(&md, "llama3", "<|begin_of_text|>", "<|end_of_text|>")) fail_msg("the Llama 3 tokenizer is missing: run scripts/setup.sh");
    lj_api_request r;
    lj_api_error e;
    assert_int_equal(parse(&md, LJ_API_COMPLETION, "{\"prompt\": \"In the beginning\"}", &r, &e), 0);
    assert_int_equal(r.prompt[0], 128000); /* BOS */
    assert_int_equal(r.params.max_tokens, 16);
    assert_true(r.params.temperature == 1.0 && r.n == 1 && r.logprobs == -1 && !r.stream);
    lj_api_request_free(&r);
    assert_int_equal(parse(&md, LJ_API_COMPLETION,
                           "{\"model\": \"tiny\", \"prompt\": [5, 6, 7], \"max_tokens\": 10, \"temperature\": 0, "
                           "\"top_k\": 5, \"top_p\": 0.5, \"min_p\": 0.1, \"seed\": -3, \"n\": 2, \"logprobs\": 3, "
                           "\"stop\": [\"a\", \"bc\"], \"stop_token_ids\": [9], \"ignore_eos\": true, \"min_tokens\": 2, "
                           "\"repetition_penalty\": 1.1, \"presence_penalty\": 0.5, \"frequency_penalty\": -0.5, "
                           "\"stream\": true, \"stream_options\": {\"include_usage\": true}, \"cache_salt\": \"x\", "
                           "\"user\": \"u\", \"request_id\": \"abc\"}", &r, &e), 0);
    assert_int_equal(r.n_prompt, 3);
    assert_int_equal(r.params.max_tokens, 10);
    assert_int_equal(r.params.top_k, 5);
    assert_true(r.params.has_seed && r.params.seed == (uint64_t)(int64_t)-3);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.params.logprobs, 3);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[1], "bc");
    assert_int_equal(r.params.num_stop_ids, 1);
    assert_true(r.params.ignore_eos && r.params.min_tokens == 2 && r.stream && r.include_usage && r.cache_salt);
    assert_string_equal(r.request_id, "abc");
    lj_api_request_free(&r);
    /* every kind of bad input: the status and the field */
    static const struct { const char *body, *param; int status; } bad[] = {
        {"{\"prompt\": \"x\"", "", 400},
        {"\"x\"", "", 400},
        {"{\"prompt\": \"x\", \"max_tokens\": 0}", "max_tokens", 400},
        {"{\"prompt\": \"x\", \"max_tokens\": -1}", "max_tokens", 400}, /* -1 is no "not given" */
        {"{\"prompt\": \"a\\u0000bcdef\"}", "", 400},                 /* cJSON would cut it at the NUL */
        {"{\"prompt\": \"x\", \"max_tokens\": 64}", "max_tokens", 400}, /* 1 + 1 + 64 > 64 */
        {"{\"prompt\": \"x\", \"max_tokens\": 2.5}", "max_tokens", 400},
        {"{\"prompt\": \"x\", \"temperature\": \"hot\"}", "temperature", 400},
        {"{\"prompt\": \"x\", \"top_p\": 0}", "top_p", 400},
        {"{\"prompt\": \"x\", \"n\": 1000}", "n", 400},
        {"{\"prompt\": \"x\", \"logprobs\": 21}", "logprobs", 400},
        {"{\"prompt\": \"x\", \"stop\": 5}", "stop", 400},
        {"{\"prompt\": \"x\", \"stop_token_ids\": [999999]}", "stop_token_ids", 400},
        {"{\"prompt\": \"x\", \"min_tokens\": 20, \"max_tokens\": 10}", "min_tokens", 400},
        {"{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", "stream_options", 400},
        {"{\"prompt\": \"x\", \"best_of\": 3}", "best_of", 400},
        {"{\"prompt\": \"x\", \"echo\": true}", "echo", 400},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"5\": 1}}", "logit_bias", 400},
        {"{\"prompt\": \"x\", \"suffix\": \"y\"}", "suffix", 400},
        {"{\"prompt\": \"x\", \"seeds\": 1}", "seeds", 400},
        {"{\"prompt\": \"x\", \"model\": \"big\"}", "model", 404},
        {"{\"prompt\": [1, 2.5]}", "prompt", 400},
        {"{\"prompt\": []}", "prompt", 400},
        {"{\"prompt\": {}}", "prompt", 400},
        {"{\"max_tokens\": 3}", "prompt", 400},
        {"{\"prompt\": \"word word word word word word word word word word word word word word word word word word "
         "word word word word word word word word word word word word word word word word word word word word word "
         "word word word word word word word word word word word word word word word word word word word word word "
         "word word word word\"}", "prompt", 400},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        const int st = parse(&md, LJ_API_COMPLETION, bad[i].body, &r, &e);
        lj_api_request_free(&r);
        if (st != bad[i].status || strcmp(e.param, bad[i].param) != 0)
            fail_msg("%s: status %d param '%s' (%s); want %d '%s'", bad[i].body, st, e.param, e.message, bad[i].status,
                     bad[i].param);
    }
    /* invalid UTF-8 */
    const char body[] = "{\"prompt\": \"\xc3\x28\"}";
    assert_int_equal(lj_api_parse(&md.m, LJ_API_COMPLETION, body, sizeof body - 1, &r, &e), 400);
    lj_api_request_free(&r);
    /* a raw NUL byte (cJSON would stop there and read the prompt "a"), and a field given twice */
    const char nul[] = "{\"prompt\": \"a\0bbbb\", \"max_tokens\": 1}";
    assert_int_equal(lj_api_parse(&md.m, LJ_API_COMPLETION, nul, sizeof nul - 1, &r, &e), 400);
    assert_non_null(strstr(e.message, "NUL byte"));
    const char twice[] = "{\"prompt\": \"a\", \"max_tokens\": 2, \"max_tokens\": -5}";
    assert_int_equal(lj_api_parse(&md.m, LJ_API_COMPLETION, twice, sizeof twice - 1, &r, &e), 400);
    assert_string_equal(e.param, "max_tokens");
    /* the error body */
    char *j = lj_api_error_json(400, "bad \"thing\"", "max_tokens");
    cJSON *o = cJSON_Parse(j);
    const cJSON *er = cJSON_GetObjectItemCaseSensitive(o, "error");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(er, "message")->valuestring, "bad \"thing\"");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(er, "type")->valuestring, "invalid_request_error");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(er, "param")->valuestring, "max_tokens");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(er, "code")->valueint, 400);
    cJSON_Delete(o);
    free(j);
    unload(&md);
}

/* The chat template through the API: Qwen3's enable_thinking, add_generation_prompt, text parts;
 * max_tokens defaults to the rest of the context. */
static void test_chat(void **state) {
    (void)state;
    model md;
    if (load(&md, "qwen3", "", "<|im_end|>")) fail_msg("the Qwen3 tokenizer is missing: run scripts/setup.sh");
    md.m.max_model_len = 256;
    lj_api_request r;
    lj_api_error e;
    static const struct { const char *body, *want; } cases[] = {
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"chat_template_kwargs\": {\"enable_thinking\": false}}",
         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
        {"{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": [{\"type\": "
         "\"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}], \"add_generation_prompt\": false}",
         "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (parse(&md, LJ_API_CHAT, cases[i].body, &r, &e)) fail_msg("case %zu: %s", i, e.message);
        char *text;
        size_t n;
        assert_int_equal(lj_tokenizer_decode(md.tok, r.prompt, r.n_prompt, &text, &n), LJ_OK);
        if (strcmp(text, cases[i].want) != 0) fail_msg("case %zu: prompt \"%s\"", i, text);
        assert_int_equal(r.params.max_tokens, 256 - r.n_prompt);
        free(text);
        lj_api_request_free(&r);
    }
    static const struct { const char *body, *param; } bad[] = {
        {"{\"messages\": []}", "messages"},
        {"{\"messages\": \"hi\"}", "messages"},
        {"{\"messages\": [{\"role\": \"user\"}], \"top_logprobs\": 2}", "top_logprobs"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", "messages"},
        {"{\"messages\": [{\"content\": \"x\"}]}", "messages"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"json_object\"}}", "response_format"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": 3}", "chat_template_kwargs"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"prompt\": \"x\"}", "prompt"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        const int st = parse(&md, LJ_API_CHAT, bad[i].body, &r, &e);
        lj_api_request_free(&r);
        if (st != 400 || strcmp(e.param, bad[i].param) != 0)
            fail_msg("%s: status %d param '%s' (%s)", bad[i].body, st, e.param, e.message);
    }
    unload(&md);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_fields),
        cmocka_unit_test(test_chat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_chat_template.c: the Jinja subset of serve/chat_template.c: its constructs against
 * renderings made with jinja2 in transformers' environment (trim_blocks, lstrip_blocks), errors
 * for what it does not support, and, when tests/fixtures/chat_templates.json exists (made by
 * tests/fixtures/make_chat_fixtures.py with transformers' apply_chat_template), every rendering
 * of the Llama 3 and Qwen3 templates there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "serve/chat_template.h"

static char *render(const char *tmpl, const char *vars_json) {
    cJSON *vars = cJSON_Parse(vars_json);
    assert_non_null(vars);
    char *out = NULL;
    const lj_status s = lj_chat_template_render(tmpl, vars, &out);
    cJSON_Delete(vars);
    return s == LJ_OK ? out : NULL;
}

/* Expected strings: jinja2 3.1 with trim_blocks and lstrip_blocks. */
static void test_constructs(void **state) {
    (void)state;
    static const struct { const char *tmpl, *vars, *want; } cases[] = {
        {"{% for x in items %}{{ loop.index }}:{{ x }}{% if not loop.last %}, {% endif %}{% endfor %}",
         "{\"items\": [\"a\", \"b\", \"c\"]}", "1:a, 2:b, 3:c"},
        {"  {% if a %}\n    yes\n  {% else %}\n    no\n  {% endif %}\nend", "{\"a\": true}", "    yes\nend"},
        {"{%- set ns = namespace(n=0) %}{% for i in [1,2,3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}|"
         "{{ 'a b'.split(' ')[-1] }}|{{ [1,2,3][::-1] | tojson }}", "{}", "6|b|[3, 2, 1]"},
        {"{{ '  x  ' | trim }}{{- ' y ' -}} z {{ 'abc'[1:] ~ 7 // 2 }}{# comment #}{{ d.k if d.k is defined else 'none' }}",
         "{\"d\": {\"k\": \"v\"}}", "x y z bc3v"},
        {"{{ 'x' in 'xyz' and 'q' not in 'xyz' }} {{ none is none }} {{ (3 - 1) * 2 % 3 }} {{ {'a': [1, 'b']} | tojson }}",
         "{}", "True True 1 {\"a\": [1, \"b\"]}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = render(cases[i].tmpl, cases[i].vars);
        if (!got) fail_msg("case %zu: %s", i, lj_error_message());
        if (strcmp(got, cases[i].want) != 0) fail_msg("case %zu: got \"%s\", want \"%s\"", i, got, cases[i].want);
        free(got);
    }
}

static void test_errors(void **state) {
    (void)state;
    static const struct { const char *tmpl, *msg; } cases[] = {
        {"{% macro m() %}{% endmacro %}", "not supported"},
        {"{{ x | wordwrap }}", "the filter 'wordwrap' is not supported"},
        {"{{ raise_exception('no system role') }}", "the template raised: no system role"},
        {"{% if a %}", "missing {% endif %}"},
        {"{{ 'abc }}", "unterminated string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = render(cases[i].tmpl, "{\"a\": true}");
        assert_null(got);
        if (!strstr(lj_error_message(), cases[i].msg)) fail_msg("case %zu: message \"%s\"", i, lj_error_message());
    }
}

/* The template and special tokens of one of the set-up script's tokenizers. */
static cJSON *load_config(const char *name) {
    const char *cache = getenv("LJ_CACHE");
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/%s/tokenizer_config.json", cache ? cache : ".cache", name);
    char *text = NULL;
    size_t n;
    if (lj_file_read_all(path, &text, &n) != LJ_OK) return NULL;
    cJSON *c = cJSON_Parse(text);
    free(text);
    return c;
}

static const char *token_text(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(c) ? c->valuestring : "";
}

static void test_fixtures(void **state) {
    (void)state;
    const char *src = getenv("LJ_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/chat_templates.json", src ? src : ".");
    const char *override = getenv("LJ_CHAT_FIXTURES");
    char *text = NULL;
    size_t n;
    if (lj_file_read_all(override ? override : path, &text, &n) != LJ_OK) {
        printf("test_chat_template: SKIPPED the transformers fixtures: %s is missing (make it with "
               "tests/fixtures/make_chat_fixtures.py where transformers is installed)\n", override ? override : path);
        skip();
    }
    cJSON *fx = cJSON_Parse(text);
    free(text);
    assert_non_null(fx);
    cJSON *cfg[2] = {load_config("llama3"), load_config("qwen3")};
    if (!cfg[0] || !cfg[1]) fail_msg("the tokenizer_config.json files are missing: run scripts/setup.sh");
    int checked = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(fx, "cases")) {
        const char *tk = cJSON_GetObjectItemCaseSensitive(c, "tokenizer")->valuestring;
        const cJSON *conf = cfg[strcmp(tk, "qwen3") == 0];
        cJSON *vars = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(c, "chat_template_kwargs"), 1);
        cJSON_AddItemToObject(vars, "messages", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(c, "messages"), 1));
        cJSON_AddItemToObject(vars, "add_generation_prompt",
                              cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt"), 1));
        cJSON_AddStringToObject(vars, "bos_token", token_text(cJSON_GetObjectItemCaseSensitive(conf, "bos_token")));
        cJSON_AddStringToObject(vars, "eos_token", token_text(cJSON_GetObjectItemCaseSensitive(conf, "eos_token")));
        char *got = NULL;
        if (lj_chat_template_render(cJSON_GetObjectItemCaseSensitive(conf, "chat_template")->valuestring, vars, &got) != LJ_OK)
            fail_msg("case %d (%s): %s", checked, tk, lj_error_message());
        const char *want = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
        if (strcmp(got, want) != 0) fail_msg("case %d (%s): got\n%s\nwant\n%s", checked, tk, got, want);
        free(got);
        cJSON_Delete(vars);
        checked++;
    }
    printf("test_chat_template: %d renderings equal the fixtures' (%s)\n", checked,
           cJSON_GetObjectItemCaseSensitive(fx, "source")->valuestring);
    assert_true(checked > 0);
    cJSON_Delete(cfg[0]);
    cJSON_Delete(cfg[1]);
    cJSON_Delete(fx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constructs),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

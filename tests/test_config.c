/* test_config.c: config.json files a Llama decoder would read wrong are refused by name (another
 * model family, biases, a sliding window, too many layers), with one message naming the file
 * and the field, and a Llama config loads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/fs.h"
#include "config/config.h"
#include "tests/test_util.h"

static char g_dir[LJ_PATH_MAX];

static int setup(void **state) {
    (void)state;
    return lj_test_make_dir(g_dir, sizeof g_dir, "config");
}

static int teardown(void **state) {
    (void)state;
    return lj_dir_remove(g_dir) == LJ_OK ? 0 : -1;
}

#define LLAMA_FIELDS                                                                                          \
    "\"vocab_size\": 1024, \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "   \
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-5, \"rope_theta\": 500000, " \
    "\"bos_token_id\": 1, \"eos_token_id\": 2"

/* Writes {LLAMA_FIELDS + extra} to g_dir/name and loads it. */
static lj_status load(const char *name, const char *extra, lj_model_config *cfg, char *path) {
    assert_int_equal(lj_path_join(path, g_dir, name), LJ_OK);
    char text[2048];
    snprintf(text, sizeof text, "{" LLAMA_FIELDS "%s}", extra);
    assert_int_equal(lj_test_write_file(path, text, strlen(text)), 0);
    return lj_config_load(path, cfg);
}

static void expect_refused(const char *name, const char *extra, lj_status code, const char *field) {
    lj_model_config cfg;
    char path[LJ_PATH_MAX];
    assert_int_equal(load(name, extra, &cfg, path), code);
    const char *msg = lj_error_message();
    if (!strstr(msg, path) || !strstr(msg, field)) fail_msg("message for %s does not name the file and '%s': %s", name, field, msg);
}

static void test_llama_loads(void **state) {
    (void)state;
    lj_model_config cfg;
    char path[LJ_PATH_MAX];
    assert_int_equal(load("llama.json", ", \"model_type\": \"llama\"", &cfg, path), LJ_OK);
    assert_int_equal(cfg.num_hidden_layers, 2);
    assert_int_equal(cfg.head_dim, 16);
    assert_int_equal(load("untyped.json", "", &cfg, path), LJ_OK); /* no model_type: llama */
}

static void test_other_families_refused(void **state) {
    (void)state;
    expect_refused("qwen3.json", ", \"model_type\": \"qwen3\"", LJ_ERR_UNSUPPORTED, "model_type");
    expect_refused("qwen2.json", ", \"model_type\": \"qwen2\"", LJ_ERR_UNSUPPORTED, "model_type");
    expect_refused("mistral.json", ", \"model_type\": \"mistral\"", LJ_ERR_UNSUPPORTED, "model_type");
    expect_refused("typed.json", ", \"model_type\": 3", LJ_ERR_FORMAT, "model_type");
    expect_refused("bias.json", ", \"attention_bias\": true", LJ_ERR_UNSUPPORTED, "attention_bias");
    expect_refused("window.json", ", \"sliding_window\": 4096", LJ_ERR_UNSUPPORTED, "sliding_window");
    expect_refused("gelu.json", ", \"hidden_act\": \"gelu\"", LJ_ERR_UNSUPPORTED, "hidden_act");
}

static void test_too_many_layers_refused(void **state) {
    (void)state;
    lj_model_config cfg;
    char path[LJ_PATH_MAX];
    assert_int_equal(load("deep.json", "", &cfg, path), LJ_OK);
    cfg.num_hidden_layers = LJ_MAX_LAYERS + 1;
    assert_int_equal(lj_config_validate(&cfg, path), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "num_hidden_layers"));
    cfg.num_hidden_layers = LJ_MAX_LAYERS;
    assert_int_equal(lj_config_validate(&cfg, path), LJ_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_loads),
        cmocka_unit_test(test_other_families_refused),
        cmocka_unit_test(test_too_many_layers_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

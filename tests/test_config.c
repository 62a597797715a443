/* test_config.c: config.json files ljperf would read wrong are refused by name (another model
 * family, biases where unsupported, a sliding window some layer would use, MoE fields, partial
 * rotary, too many layers), with one message naming the file and the field; Llama, Qwen2 and
 * Qwen3 configs load (Qwen's inactive sliding_window accepted), with the Qwen3 presets' shapes,
 * and a saved config loads back as the same family; values transformers would read otherwise
 * (a non-finite number, an array for a scalar, a duplicate key, a rope_type that is not a
 * string) are refused by field name. */
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
    expect_refused("mistral.json", ", \"model_type\": \"mistral\", \"sliding_window\": 4096", LJ_ERR_UNSUPPORTED,
                   "model_type");
    expect_refused("qwen3moe.json", ", \"model_type\": \"qwen3_moe\"", LJ_ERR_UNSUPPORTED, "model_type");
    expect_refused("typed.json", ", \"model_type\": 3", LJ_ERR_FORMAT, "model_type");
    expect_refused("bias.json", ", \"attention_bias\": true", LJ_ERR_UNSUPPORTED, "attention_bias");
    expect_refused("qwen3bias.json", ", \"model_type\": \"qwen3\", \"attention_bias\": true", LJ_ERR_UNSUPPORTED,
                   "attention_bias");
    expect_refused("mlpbias.json", ", \"model_type\": \"qwen2\", \"mlp_bias\": true", LJ_ERR_UNSUPPORTED, "mlp_bias");
    expect_refused("window.json", ", \"sliding_window\": 4096", LJ_ERR_UNSUPPORTED, "sliding_window");
    expect_refused("gelu.json", ", \"hidden_act\": \"gelu\"", LJ_ERR_UNSUPPORTED, "hidden_act");
    /* Qwen's window is used by layers >= max_window_layers once use_sliding_window is true */
    expect_refused("qwen2window.json",
                   ", \"model_type\": \"qwen2\", \"use_sliding_window\": true, \"sliding_window\": 32, "
                   "\"max_window_layers\": 1",
                   LJ_ERR_UNSUPPORTED, "use_sliding_window");
    expect_refused("layertypes.json",
                   ", \"model_type\": \"qwen3\", \"layer_types\": [\"full_attention\", \"sliding_attention\"]",
                   LJ_ERR_UNSUPPORTED, "layer_types");
    expect_refused("moe.json", ", \"model_type\": \"qwen3\", \"num_experts\": 8", LJ_ERR_UNSUPPORTED, "num_experts");
    expect_refused("moe2.json", ", \"num_local_experts\": 8", LJ_ERR_UNSUPPORTED, "num_local_experts");
    expect_refused("partial.json", ", \"partial_rotary_factor\": 0.5", LJ_ERR_UNSUPPORTED, "partial_rotary_factor");
    expect_refused("partial2.json", ", \"rope_parameters\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 0.25}",
                   LJ_ERR_UNSUPPORTED, "partial_rotary_factor");
    expect_refused("yarn.json", ", \"model_type\": \"qwen3\", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}",
                   LJ_ERR_UNSUPPORTED, "rope_type");
    expect_refused("dropout.json", ", \"attention_dropout\": 0.1", LJ_ERR_UNSUPPORTED, "attention_dropout");
}

/* A Qwen3 config as Qwen/Qwen3-0.6B's config.json writes it, at test size: QK-norm, head_dim
 * 128 with q/o not square, the inactive sliding window accepted. */
#define QWEN3_FIELDS                                                                                                  \
    ", \"model_type\": \"qwen3\", \"architectures\": [\"Qwen3ForCausalLM\"], \"head_dim\": 32, "                 \
    "\"sliding_window\": null, \"use_sliding_window\": false, "     \
    "\"max_window_layers\": 28, \"attention_bias\": false, \"attention_dropout\": 0.0, \"tie_word_embeddings\": true, " \
    "\"torch_dtype\": \"bfloat16\", \"use_cache\": true, \"layer_types\": [\"full_attention\", \"full_attention\"]"

static void test_qwen_loads(void **state) {
    (void)state;
    lj_model_config cfg;
    char path[LJ_PATH_MAX];
    assert_int_equal(load("qwen3.json", QWEN3_FIELDS, &cfg, path), LJ_OK);
    assert_int_equal(cfg.family, LJ_FAMILY_QWEN3);
    assert_true(cfg.qk_norm && !cfg.qkv_bias && cfg.tie_word_embeddings);
    assert_int_equal(cfg.head_dim, 32); /* 4 heads x 32 = 128 != hidden 64 */
    /* without rms_norm_eps and rope_theta: Qwen3Config's defaults */
    char bare[LJ_PATH_MAX];
    assert_int_equal(lj_path_join(bare, g_dir, "qwen3_bare.json"), LJ_OK);
    const char *text0 = "{\"model_type\": \"qwen3\", \"vocab_size\": 1024, \"hidden_size\": 64, "
                        "\"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                        "\"bos_token_id\": 1, \"eos_token_id\": 2}";
    assert_int_equal(lj_test_write_file(bare, text0, strlen(text0)), 0);
    lj_model_config d0;
    assert_int_equal(lj_config_load(bare, &d0), LJ_OK);
    assert_true(d0.rms_norm_eps == 1e-6 && d0.rope_theta == 10000.0 && d0.head_dim == 128 && d0.num_key_value_heads == 4);
    lj_param_layout lo;
    lj_param_layout_init(&lo, &cfg);
    assert_int_equal(lo.per_layer, 11);
    const int qn = lj_param_find(&lo, "model.layers.1.self_attn.q_norm.weight");
    assert_int_equal(qn, lj_param_index(&lo, 1, LJ_P_Q_NORM));
    assert_int_equal(lo.params[qn].numel, 32);
    assert_int_equal(lo.params[qn + 1].offset, lo.params[qn].offset + 32); /* k_norm right after: w [2, hd] */
    assert_int_equal(lo.params[lj_param_index(&lo, 0, LJ_P_O)].shape[1], 128);
    lj_param_layout_free(&lo);
    /* saved and loaded back: the same family and shape */
    char saved[LJ_PATH_MAX];
    assert_int_equal(lj_path_join(saved, g_dir, "saved_qwen3.json"), LJ_OK);
    assert_int_equal(lj_config_save(&cfg, saved, "float32"), LJ_OK);
    lj_model_config back;
    assert_int_equal(lj_config_load(saved, &back), LJ_OK);
    assert_int_equal(back.family, LJ_FAMILY_QWEN3);
    assert_true(back.qk_norm && back.head_dim == 32 && back.rms_norm_eps == cfg.rms_norm_eps);
    char *text;
    assert_int_equal(lj_file_read_all(saved, &text, NULL), LJ_OK);
    assert_non_null(strstr(text, "Qwen3ForCausalLM"));
    free(text);

    /* Qwen2: q/k/v biases, its always-present inactive window accepted; without head_dim it is
     * hidden / heads */
    assert_int_equal(load("qwen2.json",
                          ", \"model_type\": \"qwen2\", \"sliding_window\": 32768, \"use_sliding_window\": false, "
                          "\"max_window_layers\": 21",
                          &cfg, path),
                     LJ_OK);
    assert_int_equal(cfg.family, LJ_FAMILY_QWEN2);
    assert_true(cfg.qkv_bias && !cfg.qk_norm && cfg.head_dim == 16);
    lj_param_layout_init(&lo, &cfg);
    assert_int_equal(lo.per_layer, 12);
    const int qb = lj_param_index(&lo, 0, LJ_P_Q_BIAS);
    assert_string_equal(lo.params[qb].name, "model.layers.0.self_attn.q_proj.bias");
    assert_string_equal(lo.params[qb + 2].name, "model.layers.0.self_attn.v_proj.bias");
    assert_int_equal(lo.params[qb].offset + 64 + 2 * 32, lo.params[lj_param_index(&lo, 0, LJ_P_O)].offset);
    lj_param_layout_free(&lo);
    /* a window the layers do not reach (max_window_layers = all layers) changes nothing */
    assert_int_equal(load("qwen2full.json",
                          ", \"model_type\": \"qwen2\", \"sliding_window\": 32, \"use_sliding_window\": true, "
                          "\"max_window_layers\": 2",
                          &cfg, path),
                     LJ_OK);
}

/* The presets have the shapes of the published config.json files (docs/reference.md). */
static void test_qwen_presets(void **state) {
    (void)state;
    static const struct {
        const char *name;
        int d, I, L, nh, nkv, hd, tie;
        int64_t params; /* 0: not checked */
    } want[] = {
        {"qwen3-0.6b", 1024, 3072, 28, 16, 8, 128, 1, 596049920},
        {"qwen3-1.7b", 2048, 6144, 28, 16, 8, 128, 1, 0},
        {"qwen3-4b", 2560, 9728, 36, 32, 8, 128, 1, 0},
        {"qwen3-8b", 4096, 12288, 36, 32, 8, 128, 0, 0},
        {"qwen3-14b", 5120, 17408, 40, 40, 8, 128, 0, 0},
        {"qwen3-32b", 5120, 25600, 64, 64, 8, 128, 0, 0},
        {"qwen2.5-0.5b", 896, 4864, 24, 14, 2, 64, 1, 494032768},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        lj_model_config c;
        assert_int_equal(lj_config_preset(want[i].name, &c), LJ_OK);
        assert_int_equal(lj_config_validate(&c, want[i].name), LJ_OK);
        assert_true(c.hidden_size == want[i].d && c.intermediate_size == want[i].I && c.num_hidden_layers == want[i].L);
        assert_true(c.num_attention_heads == want[i].nh && c.num_key_value_heads == want[i].nkv &&
                    c.head_dim == want[i].hd && c.tie_word_embeddings == want[i].tie);
        assert_true(c.vocab_size == 151936 && c.rope_theta == 1e6 && c.rms_norm_eps == 1e-6 && c.bos_token_id == 151643);
        if (want[i].params) assert_int_equal(lj_config_num_params(&c), want[i].params);
    }
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

/* Values transformers would read otherwise than ljperf: each refused, naming the field. */
static void test_ambiguous_values_refused(void **state) {
    (void)state;
    expect_refused("inf.json", ", \"head_dim\": 16, \"max_position_embeddings\": 1e999", LJ_ERR_FORMAT,
                   "'max_position_embeddings' is inf, not a finite number");
    expect_refused("infeps.json", ", \"initializer_range\": -1e999", LJ_ERR_FORMAT, "'initializer_range' is -inf");
    expect_refused("infrope.json", ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 1e999}",
                   LJ_ERR_FORMAT, "'factor' is inf");
    expect_refused("array.json", ", \"head_dim\": [16]", LJ_ERR_FORMAT, "'head_dim' is an array");
    expect_refused("arraymax.json", ", \"max_position_embeddings\": [2048, 4096]", LJ_ERR_FORMAT,
                   "'max_position_embeddings' is an array");
    expect_refused("dup.json", ", \"num_hidden_layers\": 3", LJ_ERR_FORMAT, "'num_hidden_layers' appears twice");
    expect_refused("dupnested.json", ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"factor\": 2}",
                   LJ_ERR_FORMAT, "'rope_scaling.factor' appears twice");
    expect_refused("ropetype.json", ", \"rope_scaling\": {\"rope_type\": 3, \"factor\": 8}", LJ_ERR_FORMAT,
                   "'rope_scaling.rope_type' must be a string");
    expect_refused("ropetype2.json", ", \"rope_parameters\": {\"type\": [\"llama3\"]}", LJ_ERR_FORMAT,
                   "'rope_parameters.type' must be a string");
    /* a list of end ids is transformers' own form of eos_token_id: the first is taken */
    lj_model_config cfg;
    char path[LJ_PATH_MAX], text[1024];
    assert_int_equal(lj_path_join(path, g_dir, "eoslist.json"), LJ_OK);
    snprintf(text, sizeof text,
             "{\"vocab_size\": 1024, \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
             "\"num_attention_heads\": 4, \"bos_token_id\": 1, \"eos_token_id\": [7, 8, 9]}");
    assert_int_equal(lj_test_write_file(path, text, strlen(text)), 0);
    assert_int_equal(lj_config_load(path, &cfg), LJ_OK);
    assert_int_equal(cfg.eos_token_id, 7);
    char *bad = strstr(text, "8, 9]");
    strcpy(bad, "8, \"x\"]}");
    assert_int_equal(lj_test_write_file(path, text, strlen(text)), 0);
    assert_int_equal(lj_config_load(path, &cfg), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "'eos_token_id' must list integers"));
}

/* hidden_size 66 over 4 heads: refused without head_dim (hidden_size // heads drops 2), taken with
 * an explicit head_dim. */
static void test_head_dim_explicit(void **state) {
    (void)state;
    lj_model_config cfg;
    char path[LJ_PATH_MAX], text[1024];
    const char *fmt = "{\"vocab_size\": 1024, \"hidden_size\": 66, \"intermediate_size\": 128, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                      "\"bos_token_id\": 1, \"eos_token_id\": 2%s}";
    assert_int_equal(lj_path_join(path, g_dir, "hd66.json"), LJ_OK);
    snprintf(text, sizeof text, fmt, "");
    assert_int_equal(lj_test_write_file(path, text, strlen(text)), 0);
    assert_int_equal(lj_config_load(path, &cfg), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "give head_dim explicitly"));
    snprintf(text, sizeof text, fmt, ", \"head_dim\": 16");
    assert_int_equal(lj_test_write_file(path, text, strlen(text)), 0);
    if (lj_config_load(path, &cfg) != LJ_OK) fail_msg("an explicit head_dim 16 is refused: %s", lj_error_message());
    assert_int_equal(cfg.head_dim, 16);
    assert_int_equal(cfg.hidden_size, 66);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_loads),
        cmocka_unit_test(test_other_families_refused),
        cmocka_unit_test(test_qwen_loads),
        cmocka_unit_test(test_qwen_presets),
        cmocka_unit_test(test_too_many_layers_refused),
        cmocka_unit_test(test_ambiguous_values_refused),
        cmocka_unit_test(test_head_dim_explicit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* test_hf_fixtures.c: the whole model on the CPU against Hugging Face transformers
 * (tests/fixtures/hf/, made by tests/fixtures/make_fixtures.py in fp64, LlamaForCausalLM; and
 * tests/fixtures/hf-qwen/, made by make_fixtures_qwen.py, Qwen3ForCausalLM and
 * Qwen2ForCausalLM): logits and loss (relative error <= 1e-5), every parameter gradient
 * (||g - ref|| / ||ref|| <= 1e-4), five AdamW steps (losses and final weights <= 1e-4), for tied
 * and untied embeddings, QK-norm and q/k/v biases, fused and unfused kernels, every recompute
 * policy; and the HF export -> import round trip is bit-exact. The Llama fixtures are committed
 * (missing: a failure); a Qwen case whose files are absent is skipped with the command that
 * makes them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "io/hf.h"
#include "io/safetensors.h"
#include "parallel/dp.h"
#include "plan/plan.h"
#include "tests/test_util.h"

enum { B = 2, T = 64 };

static char g_dir[1024];

static void case_dir(const char *name, char *buf, size_t len) {
    const char *src = getenv("LJ_SOURCE_DIR");
    snprintf(buf, len, "%s/tests/fixtures/%s", src ? src : ".", name);
}

static double rel_error(const float *x, const float *ref, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)x[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

typedef struct {
    lj_model_config cfg;
    float *weights;          /* [P] */
    int32_t tokens[B * (T + 1)];
    lj_safetensors ref;      /* reference.safetensors */
    lj_safetensors adam;     /* adamw.safetensors */
    cJSON *adam_json;
} fixture;

static void load_fixture(fixture *f, const char *name) {
    char dir[1024], path[1200];
    case_dir(name, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (access(path, R_OK) != 0) fail_msg("%s is missing: the fixtures are committed under tests/fixtures", path);
    assert_int_equal(lj_config_load(path, &f->cfg), LJ_OK);
    f->weights = lj_malloc((size_t)lj_config_num_params(&f->cfg) * sizeof(float));
    if (lj_hf_import(dir, &f->cfg, f->weights) != LJ_OK) fail_msg("%s", lj_error_message());
    lj_safetensors in;
    snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
    assert_int_equal(lj_safetensors_open(&in, path), LJ_OK);
    const lj_st_entry *ids = lj_safetensors_find(&in, "input_ids");
    assert_non_null(ids);
    assert_int_equal(ids->numel, B * (T + 1));
    memcpy(f->tokens, ids->data, sizeof f->tokens);
    lj_safetensors_close(&in);
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    assert_int_equal(lj_safetensors_open(&f->ref, path), LJ_OK);
    snprintf(path, sizeof path, "%s/adamw.safetensors", dir);
    assert_int_equal(lj_safetensors_open(&f->adam, path), LJ_OK);
    snprintf(path, sizeof path, "%s/adamw.json", dir);
    char *text;
    assert_int_equal(lj_file_read_all(path, &text, NULL), LJ_OK);
    f->adam_json = cJSON_Parse(text);
    free(text);
    assert_non_null(f->adam_json);
    snprintf(g_dir, sizeof g_dir, "%s", dir);
}

static void free_fixture(fixture *f) {
    free(f->weights);
    lj_safetensors_close(&f->ref);
    lj_safetensors_close(&f->adam);
    cJSON_Delete(f->adam_json);
}

static float *ref_tensor(const lj_safetensors *st, const char *name, int64_t numel) {
    const lj_st_entry *e = lj_safetensors_find(st, name);
    if (!e) fail_msg("%s: no tensor '%s'", st->path, name);
    assert_int_equal(e->numel, numel);
    float *x = lj_malloc((size_t)numel * sizeof(float));
    assert_int_equal(lj_safetensors_read_f32(st, e, x), LJ_OK);
    return x;
}

typedef lj_test_model engine;

static void engine_init(engine *e, const fixture *f, int fused, int policy) {
    assert_int_equal(lj_test_model_create(e, &f->cfg, B, T, fused, policy), LJ_OK);
    lj_model_set_weights(&e->m, f->weights);
    lj_model_set_batch(&e->m, f->tokens);
}

static void engine_free(engine *e) { lj_test_model_destroy(e); }

static double forward_backward(engine *e) {
    const float dloss = 1.0f / (B * T);
    e->m.ops->memset_zero(e->m.grads, (size_t)e->m.layout.total * sizeof(float));
    lj_model_forward(&e->m, 1, dloss);
    lj_model_backward(&e->m);
    return lj_model_mean_loss(&e->m);
}

static void check_case(const char *name) {
    fixture f;
    load_fixture(&f, name);
    const int64_t V = f.cfg.vocab_size;
    float *ref_loss = ref_tensor(&f.ref, "loss", 1);
    for (int variant = 0; variant < 4; variant++) {
        /* unfused, fused, fused + selective recompute, fused + full recompute */
        const int fused = variant > 0, policy = variant > 1 ? variant - 1 : LJ_RECOMPUTE_NONE;
        engine e;
        engine_init(&e, &f, fused, policy);
        if (!fused) { /* logits (the unfused plan keeps them) */
            float *logits = lj_malloc((size_t)B * T * V * sizeof(float));
            lj_model_logits(&e.m, logits);
            float *ref = ref_tensor(&f.ref, "logits", (int64_t)B * T * V);
            const double err = rel_error(logits, ref, (int64_t)B * T * V);
            print_message("%s: logits relative error %.3e\n", name, err);
            assert_true(err <= 1e-5);
            free(ref);
            free(logits);
        }
        const double loss = forward_backward(&e);
        const double loss_err = fabs(loss - ref_loss[0]) / fabs(ref_loss[0]);
        print_message("%s (%s, recompute %s): loss %.8f, reference %.8f, relative error %.3e\n", name,
                      fused ? "fused" : "unfused", lj_recompute_name((lj_recompute)policy), loss, ref_loss[0], loss_err);
        assert_true(loss_err <= 1e-5);
        double worst = 0.0;
        const char *worst_name = "";
        for (int i = 0; i < e.m.layout.count; i++) {
            const lj_param_info *pi = &e.m.layout.params[i];
            char gname[160];
            snprintf(gname, sizeof gname, "grad.%s", pi->name);
            float *ref = ref_tensor(&f.ref, gname, pi->numel);
            const double err = rel_error((const float *)e.m.grads + pi->offset, ref, pi->numel);
            if (err > worst) {
                worst = err;
                worst_name = pi->name;
            }
            if (err > 1e-4) fail_msg("%s: gradient of %s: relative error %.3e > 1e-4", name, pi->name, err);
            free(ref);
        }
        print_message("%s (%s, recompute %s): worst gradient relative error %.3e (%s)\n", name,
                      fused ? "fused" : "unfused", lj_recompute_name((lj_recompute)policy), worst, worst_name);
        engine_free(&e);
    }
    free(ref_loss);

    /* five AdamW steps with the fixture's hyper-parameters */
    const cJSON *losses = cJSON_GetObjectItemCaseSensitive(f.adam_json, "losses");
    assert_int_equal(cJSON_GetArraySize(losses), 5);
    engine e;
    engine_init(&e, &f, 1, LJ_RECOMPUTE_NONE);
    /* the fixtures' optimizer groups: decay on the layers' projection matrices only */
    const lj_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, LJ_WD_MATRICES, 0};
    lj_adamw_segment *seg;
    const int nseg = lj_adamw_segments(&e.m.layout, &ac, &seg);
    for (int step = 1; step <= 5; step++) {
        const double loss = forward_backward(&e);
        const double want = cJSON_GetArrayItem(losses, step - 1)->valuedouble;
        const double err = fabs(loss - want) / fabs(want);
        print_message("%s: AdamW step %d loss %.8f, reference %.8f, relative error %.3e\n", name, step, loss, want, err);
        assert_true(err <= 1e-4);
        lj_dp single = LJ_DP_SINGLE;
        lj_dp_optimizer_step(&single, &e.m, seg, nseg, &ac, 1e-3f, step);
    }
    double worst = 0.0;
    for (int i = 0; i < e.m.layout.count; i++) {
        const lj_param_info *pi = &e.m.layout.params[i];
        char fname[160];
        snprintf(fname, sizeof fname, "final.%s", pi->name);
        float *ref = ref_tensor(&f.adam, fname, pi->numel);
        const double err = rel_error(e.m.master + pi->offset, ref, pi->numel);
        if (err > worst) worst = err;
        if (err > 1e-4) fail_msg("%s: weights of %s after 5 AdamW steps: relative error %.3e > 1e-4", name, pi->name, err);
        free(ref);
    }
    print_message("%s: final weights worst relative error %.3e\n", name, worst);
    free(seg);
    engine_free(&e);
    free_fixture(&f);
}

static void test_untied(void **state) {
    (void)state;
    check_case("hf/untied");
}

static void test_tied(void **state) {
    (void)state;
    check_case("hf/tied");
}

/* A Qwen case, or a skip naming the command that makes its files (a GPU machine's PyTorch and
 * transformers; tests/fixtures/README.md). */
static void check_qwen_case(const char *name) {
    char dir[1024], path[1200];
    case_dir(name, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    if (access(path, R_OK) != 0) {
        print_message("skipped: %s is absent; make it with: python3 tests/fixtures/make_fixtures_qwen.py "
                      "tests/fixtures/hf-qwen (tests/fixtures/README.md)\n", path);
        skip();
    }
    check_case(name);
}

static void test_qwen3(void **state) {
    (void)state;
    check_qwen_case("hf-qwen/qwen3");
}

static void test_qwen2(void **state) {
    (void)state;
    check_qwen_case("hf-qwen/qwen2");
}

/* Export -> import of the fixture weights is bit-exact in fp32, and bf16 equals rounding. */
static void test_hf_round_trip(void **state) {
    (void)state;
    fixture f;
    load_fixture(&f, "hf/untied");
    const int64_t P = lj_config_num_params(&f.cfg);
    const char *tmp = getenv("LJ_TEST_TMP");
    char out[1024];
    lj_mkdir_p(tmp ? tmp : "/tmp");
    /* kept after the test: bench/results/hf-export-check.md loads it in transformers */
    snprintf(out, sizeof out, "%s/hf_export_untied_f32", tmp ? tmp : "/tmp");
    float *back = lj_malloc((size_t)P * sizeof(float));
    assert_int_equal(lj_hf_export(out, &f.cfg, f.weights, LJ_DTYPE_F32, 1ull << 40), LJ_OK);
    assert_int_equal(lj_hf_import(out, &f.cfg, back), LJ_OK);
    assert_memory_equal(back, f.weights, (size_t)P * sizeof(float));
    snprintf(out, sizeof out, "%s/hf_export_untied_bf16", tmp ? tmp : "/tmp");
    assert_int_equal(lj_hf_export(out, &f.cfg, f.weights, LJ_DTYPE_BF16, 200000), LJ_OK); /* sharded */
    assert_int_equal(lj_hf_import(out, &f.cfg, back), LJ_OK);
    for (int64_t i = 0; i < P; i++) assert_true(back[i] == lj_bf16_to_f32(lj_f32_to_bf16(f.weights[i])));
    free(back);
    free_fixture(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_untied),
        cmocka_unit_test(test_tied),
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_hf_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

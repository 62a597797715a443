/* test_qwen3vl.c: Qwen3-VL on the CPU backend: the presets and the qwen3_vl config.json load;
 * get_rope_index and the interleaved MRoPE axis rule on hand-worked cases; finite differences
 * through the vision tower and through the whole model (image splice, DeepStack, MRoPE); the
 * tower's blocks in FP8 beside the decoder's (its own recipe state, against the recipe's
 * arithmetic and fp32, amaxes recorded, overflow named); the tower's recompute, bit for bit the
 * tower without it (fp32 and each FP8 recipe); and,
 * when tests/fixtures/qwen3vl-tiny/ is present, the whole model against Hugging Face
 * transformers (made by tests/fixtures/make_qwen3vl_fixtures.py): ViT output, DeepStack features,
 * position ids, logits and loss (relative error <= 1e-5), every gradient (<= 1e-4). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "base/fp8.h"
#include "io/hf_vl.h"
#include "io/safetensors.h"
#include "model/vl.h"
#include "optim/optim.h"
#include "tests/test_util.h"

static double rel_error(const float *x, const float *ref, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)x[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---- config ------------------------------------------------------------------------ */

static void test_presets(void **state) {
    (void)state;
    const struct { const char *name; double total_b, vit_m; int tied, depth, V, O; } want[] = {
        {"qwen3-vl-2b", 2.128, 407, 1, 24, 1024, 2048},
        {"qwen3-vl-4b", 4.438, 415, 1, 24, 1024, 2560},
        {"qwen3-vl-8b", 8.767, 576, 0, 27, 1152, 4096},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        lj_vl_config c;
        assert_int_equal(lj_vl_config_preset(want[i].name, &c), LJ_OK);
        lj_vision_layout lo;
        lj_vision_layout_init(&lo, &c.vision);
        const double vit = (double)lo.total, total = vit + (double)lj_config_num_params(&c.text);
        print_message("%s: %.3f B parameters, ViT %.1f M\n", want[i].name, total / 1e9, vit / 1e6);
        assert_true(fabs(total / 1e9 - want[i].total_b) < 0.0005);
        assert_true(fabs(vit / 1e6 - want[i].vit_m) < 0.5);
        assert_int_equal(c.text.tie_word_embeddings, want[i].tied);
        assert_int_equal(c.vision.depth, want[i].depth);
        assert_int_equal(c.vision.out_hidden_size, want[i].O);
        assert_int_equal(c.text.family, LJ_FAMILY_QWEN3);
        assert_true(c.text.rope_theta == 5e6 && c.mrope_section[0] == 24 && c.mrope_section[1] == 20);
        assert_int_equal(c.image_token_id, 151655);
        lj_vision_layout_free(&lo);
    }
    lj_vl_config c;
    assert_int_equal(lj_vl_config_preset("qwen3-vl-huge", &c), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "qwen3-vl-2b"));
}

static const char *k_config_8b =
    "{\"architectures\": [\"Qwen3VLForConditionalGeneration\"], \"model_type\": \"qwen3_vl\",\n"
    " \"image_token_id\": 151655, \"video_token_id\": 151656, \"vision_start_token_id\": 151652,\n"
    " \"vision_end_token_id\": 151653, \"tie_word_embeddings\": false,\n"
    " \"text_config\": {\"model_type\": \"qwen3_vl_text\", \"attention_bias\": false, \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 12288,\n"
    "  \"max_position_embeddings\": 262144, \"num_attention_heads\": 32, \"num_hidden_layers\": 36,\n"
    "  \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_scaling\": {\"mrope_interleaved\": %s, \"mrope_section\": [24, 20, 20], \"rope_type\": \"default\"},\n"
    "  \"rope_theta\": 5000000, \"use_cache\": true, \"vocab_size\": 151936},\n"
    " \"vision_config\": {\"deepstack_visual_indexes\": [8, 16, 24], \"depth\": 27, \"hidden_act\": \"gelu_pytorch_tanh\",\n"
    "  \"hidden_size\": 1152, \"in_channels\": 3, \"initializer_range\": 0.02, \"intermediate_size\": 4304,\n"
    "  \"model_type\": \"qwen3_vl\", \"num_heads\": 16, \"num_position_embeddings\": 2304, \"out_hidden_size\": 4096,\n"
    "  \"patch_size\": 16, \"spatial_merge_size\": 2, \"temporal_patch_size\": 2}}\n";

static void write_config(const char *dir, const char *interleaved, char *path, size_t len) {
    char text[4096];
    snprintf(text, sizeof text, k_config_8b, interleaved);
    snprintf(path, len, "%s/config.json", dir);
    assert_int_equal(lj_test_write_file(path, text, strlen(text)), 0);
}

static void test_config_load(void **state) {
    (void)state;
    char dir[512], path[600];
    assert_int_equal(lj_test_make_dir(dir, sizeof dir, "qwen3vl"), 0);
    write_config(dir, "true", path, sizeof path);
    lj_vl_config c, p;
    if (lj_vl_config_load(path, &c) != LJ_OK) fail_msg("%s", lj_error_message());
    assert_int_equal(lj_vl_config_preset("qwen3-vl-8b", &p), LJ_OK);
    assert_int_equal(c.text.hidden_size, p.text.hidden_size);
    assert_int_equal(c.text.num_hidden_layers, 36);
    assert_int_equal(c.text.head_dim, 128);
    assert_true(c.text.qk_norm && c.text.rope_theta == 5e6);
    assert_int_equal(c.vision.depth, 27);
    assert_int_equal(c.vision.num_deepstack, 3);
    assert_int_equal(c.vision.deepstack_visual_indexes[2], 24);
    assert_int_equal(c.vision.gelu_tanh, 1);
    assert_int_equal(c.mrope_section[2], 20);
    assert_int_equal(lj_vl_config_resolve(dir, &c), LJ_OK);
    /* the chunked layout is refused by name */
    write_config(dir, "false", path, sizeof path);
    assert_int_equal(lj_vl_config_load(path, &c), LJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(lj_error_message(), "mrope_interleaved"));
    /* the text loader refuses a VLM config rather than loading its text part */
    lj_model_config t;
    assert_int_not_equal(lj_config_load(path, &t), LJ_OK);
}

/* ---- positions --------------------------------------------------------------------- */

static void test_rope_index(void **state) {
    (void)state;
    lj_vl_config c;
    assert_int_equal(lj_vl_config_preset("qwen3-vl-fixture", &c), LJ_OK);
    const int P = c.image_token_id, S = c.vision_start_token_id, E = c.vision_end_token_id;
    /* text (3), image of grid (1, 4, 6) = 2 x 3 tokens, vision_end, text, image (1, 8, 2) = 4 x 1 tokens, text */
    const int32_t ids[] = {5, 6, S, P, P, P, P, P, P, E, 7, S, P, P, P, P, E, 9};
    const int T = (int)(sizeof ids / sizeof ids[0]);
    const int32_t grid[] = {1, 4, 6, 1, 8, 2};
    int32_t pos[3 * 18];
    assert_int_equal(lj_vl_rope_index(&c, ids, T, grid, 2, pos), 2);
    /* text 0, 1, 2; image 1 at base 3: t 3, h 3 + r, w 3 + c; vision_end resumes at 3 + max(2, 3) = 6 */
    const int32_t want_t[] = {0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7, 8, 9, 9, 9, 9, 13, 14};
    const int32_t want_h[] = {0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    const int32_t want_w[] = {0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9, 13, 14};
    for (int i = 0; i < T; i++) {
        assert_int_equal(pos[i], want_t[i]);
        assert_int_equal(pos[T + i], want_h[i]);
        assert_int_equal(pos[2 * T + i], want_w[i]);
    }
    /* too few pads for the image */
    const int32_t bad[] = {5, S, P, P, E};
    assert_int_equal(lj_vl_rope_index(&c, bad, 5, grid, 1, pos), -1);
}

static void test_mrope_axes(void **state) {
    (void)state;
    lj_vl_config c;
    assert_int_equal(lj_vl_config_preset("qwen3-vl-fixture", &c), LJ_OK); /* head_dim 32, sections [6, 5, 5] */
    const int half = c.text.head_dim / 2;
    const int32_t pos3[3] = {7, 11, 13}; /* one token: T 7, H 11, W 13 */
    float co[16], si[16];
    lj_vl_mrope_rows(&c, pos3, 1, co, si);
    for (int j = 0; j < half; j++) {
        /* H: j = 1, 4, 7, 10, 13; W: j = 2, 5, 8, 11, 14; T: the rest (0, 3, ..., 12 and 15) */
        const int p = (j % 3 == 1 && j < 15) ? 11 : (j % 3 == 2 && j < 15) ? 13 : 7;
        const float f = 1.0f / powf(5e6f, (float)(2 * j) / 32.0f);
        assert_true(fabsf(co[j] - (float)cos((double)((float)p * f))) < 1e-7f);
        assert_true(fabsf(si[j] - (float)sin((double)((float)p * f))) < 1e-7f);
    }
    /* for the published sections, j = 60..63 follow T */
    assert_int_equal(lj_vl_config_preset("qwen3-vl-2b", &c), LJ_OK);
    float co2[64], si2[64];
    lj_vl_mrope_rows(&c, pos3, 1, co2, si2);
    const float f61 = 1.0f / powf(5e6f, 122.0f / 128.0f);
    assert_true(fabsf(co2[61] - (float)cos((double)(7.0f * f61))) < 1e-7f);
}

/* ---- random weights and finite differences ---------------------------------------- */

static void random_params(const lj_param_info *p, int count, float *dst, lj_rng *rng) {
    for (int i = 0; i < count; i++) {
        float *w = dst + p[i].offset;
        for (int64_t k = 0; k < p[i].numel; k++) {
            const double z = lj_rng_normal(rng);
            w[k] = (float)(p[i].kind == LJ_PARAM_NORM ? 1.0 + 0.1 * z
                           : p[i].kind == LJ_PARAM_BIAS ? 0.1 * z
                           : p[i].kind == LJ_PARAM_EMBEDDING ? 0.25 * z
                                                            : z / sqrt((double)p[i].shape[1]));
        }
    }
}

/* A training decoder of cfg->text on the CPU backend (as lj_test_model_create: micro-batch 1,
 * sequence T, fused or not, one recompute policy; the FP8 recipe of `fp8`, NULL: fp32) with the
 * vision tower attached before its plan (its blocks' recompute `vision`: 0 none, 1 full), so that
 * the plan holds both; allocated. */
static lj_status vl_model_create_fp8(lj_test_model *t, lj_vl *vl, const lj_vl_config *cfg, int T, int fused,
                                     int policy, int vision, int max_patches, int max_images,
                                     const lj_linear_fp8_options *fp8) {
    lj_model_options o = lj_test_train_options(1, T, fused);
    memset(o.recompute, policy, sizeof o.recompute);
    o.vision_recompute = vision;
    if (fp8) {
        o.linear_recipe = LJ_LINEAR_RECIPE_FP8;
        o.fp8 = *fp8;
    }
    lj_model_init(&t->m, lj_ops_cpu(), &cfg->text, &o);
    lj_parallelize(&t->m, NULL, NULL);
    LJ_TRY(lj_vl_init(vl, &t->m, cfg, max_patches, max_images));
    lj_plan_build(&t->p, &t->m);
    return lj_plan_allocate(&t->p, &t->m);
}

static lj_status vl_model_create(lj_test_model *t, lj_vl *vl, const lj_vl_config *cfg, int T, int fused, int policy,
                                 int max_patches, int max_images) {
    return vl_model_create_fp8(t, vl, cfg, T, fused, policy, 0, max_patches, max_images, NULL);
}

/* The tiny test model: grids (1, 4, 6) and (1, 2, 4) (6 + 2 tokens) in one sequence of T = 20. */
enum { FD_T = 20 };
static const int32_t k_grid[] = {1, 4, 6, 1, 2, 4};

typedef struct {
    lj_vl_config cfg;
    lj_test_model tm;
    lj_vl vl;
    float *text_w, *vis_w, *pixels;
    int32_t ids[FD_T], targets[FD_T];
    int np;
} vl_case;

/* The case with the decoder's recompute `policy`, the tower's `vision` and the FP8 recipe `fp8`. */
static void vl_case_init_all(vl_case *c, int policy, int vision, const lj_linear_fp8_options *fp8) {
    assert_int_equal(lj_vl_config_preset("qwen3-vl-fixture", &c->cfg), LJ_OK);
    c->np = 24 + 8;
    if (vl_model_create_fp8(&c->tm, &c->vl, &c->cfg, FD_T, 1, policy, vision, 64, 4, fp8) != LJ_OK)
        fail_msg("%s", lj_error_message());
    lj_rng rng;
    lj_rng_seed(&rng, 77);
    c->text_w = lj_malloc((size_t)c->tm.m.layout.total * sizeof(float));
    c->vis_w = lj_malloc((size_t)c->vl.vis.layout.total * sizeof(float));
    random_params(c->tm.m.layout.params, c->tm.m.layout.count, c->text_w, &rng);
    random_params(c->vl.vis.layout.params, c->vl.vis.layout.count, c->vis_w, &rng);
    const int P = lj_vision_patch_dim(&c->cfg.vision);
    c->pixels = lj_malloc((size_t)c->np * P * sizeof(float));
    for (int i = 0; i < c->np * P; i++) c->pixels[i] = 2.0f * lj_rng_uniform(&rng) - 1.0f;
    const int S = c->cfg.vision_start_token_id, E = c->cfg.vision_end_token_id, Pd = c->cfg.image_token_id;
    const int32_t ids[FD_T] = {1, 17, S, Pd, Pd, Pd, Pd, Pd, Pd, E, 40, 41, S, Pd, Pd, E, 90, 91, 92, 93};
    memcpy(c->ids, ids, sizeof ids);
    for (int t = 0; t < FD_T; t++) c->targets[t] = t + 1 < FD_T && ids[t + 1] != Pd ? ids[t + 1] : -1;
    lj_model_set_weights(&c->tm.m, c->text_w);
    lj_vision_set_weights(&c->vl.vis, c->vis_w);
    if (lj_vl_set_batch(&c->vl, c->ids, c->targets, c->pixels, k_grid, 2) != LJ_OK) fail_msg("%s", lj_error_message());
}

static void vl_case_init_fp8(vl_case *c, int policy, const lj_linear_fp8_options *fp8) {
    vl_case_init_all(c, policy, 0, fp8);
}
static void vl_case_init(vl_case *c, int policy) { vl_case_init_fp8(c, policy, NULL); }

static void vl_case_free(vl_case *c) {
    lj_vl_free(&c->vl);
    lj_test_model_destroy(&c->tm);
    free(c->text_w);
    free(c->vis_w);
    free(c->pixels);
}

static double vl_loss(vl_case *c) {
    lj_vl_forward_backward(&c->vl, 0, 0.0f);
    return lj_model_mean_loss(&c->tm.m);
}

/* Gradients of the mean loss, then a finite-difference check of parameter element k of each
 * of the tensors named. */
static void test_vl_finite_differences(void **state) {
    (void)state;
    vl_case c;
    vl_case_init(&c, LJ_RECOMPUTE_NONE);
    lj_vl_zero_grads(&c.vl);
    lj_vl_forward_backward(&c.vl, 1, 1.0f / (float)c.tm.m.num_targets);
    const float *tg = c.tm.m.grads, *vg = c.vl.vis.grads;
    const char *names[] = {"model.visual.patch_embed.proj.weight", "model.visual.pos_embed.weight",
                           "model.visual.blocks.0.attn.qkv.weight", "model.visual.blocks.1.norm2.bias",
                           "model.visual.blocks.3.mlp.linear_fc1.weight", "model.visual.merger.norm.weight",
                           "model.visual.merger.linear_fc2.weight", "model.visual.deepstack_merger_list.0.norm.weight",
                           "model.visual.deepstack_merger_list.1.linear_fc1.weight",
                           "model.visual.deepstack_merger_list.2.linear_fc2.bias", "model.layers.0.self_attn.q_proj.weight",
                           "model.layers.2.self_attn.k_norm.weight", "model.layers.3.mlp.down_proj.weight"};
    double worst = 0.0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const int vis = strncmp(names[i], "model.visual.", 13) == 0;
        int idx = -1;
        const lj_param_info *p = NULL;
        if (vis) {
            for (int k = 0; k < c.vl.vis.layout.count; k++)
                if (strcmp(c.vl.vis.layout.params[k].name, names[i]) == 0) idx = k;
            assert_true(idx >= 0);
            p = &c.vl.vis.layout.params[idx];
        } else {
            idx = lj_param_find(&c.tm.m.layout, names[i]);
            assert_true(idx >= 0);
            p = &c.tm.m.layout.params[idx];
        }
        for (int s = 0; s < 2; s++) {
            const int64_t e = p->offset + (int64_t)((s * 0.53 + 0.11) * (double)p->numel);
            float *w = vis ? c.vis_w : c.text_w;
            const float w0 = w[e], eps = 1e-2f;
            w[e] = w0 + eps;
            if (vis) lj_vision_set_weights(&c.vl.vis, w); else lj_model_set_weights(&c.tm.m, w);
            const double lp = vl_loss(&c);
            w[e] = w0 - eps;
            if (vis) lj_vision_set_weights(&c.vl.vis, w); else lj_model_set_weights(&c.tm.m, w);
            const double lm = vl_loss(&c);
            w[e] = w0;
            if (vis) lj_vision_set_weights(&c.vl.vis, w); else lj_model_set_weights(&c.tm.m, w);
            const double fd = (lp - lm) / (2.0 * eps), an = (vis ? vg : tg)[e];
            const double err = fabs(fd - an) / (1e-4 + fabs(fd));
            if (getenv("LJ_TEST_VERBOSE")) print_message("  %s[%lld]: analytic %.6e, fd %.6e\n", names[i], (long long)(e - p->offset), an, fd);
            if (err > worst) worst = err;
            if (err > 3e-2)
                fail_msg("%s[%lld]: analytic %.6e, finite differences %.6e", names[i], (long long)(e - p->offset), an, fd);
        }
    }
    print_message("whole model: worst finite-difference error %.2e\n", worst);
    /* the image-pad embedding row gets no gradient; a text token's row does */
    const int64_t D = c.cfg.text.hidden_size;
    double pad = 0.0, text = 0.0;
    for (int64_t k = 0; k < D; k++) {
        pad += fabs(tg[(int64_t)c.cfg.image_token_id * D + k]);
        text += fabs(tg[(int64_t)17 * D + k]);
    }
    assert_true(pad == 0.0 && text > 0.0);
    /* the same gradients with full recompute of every decoder layer */
    float *g0 = lj_malloc((size_t)c.tm.m.layout.total * sizeof(float));
    memcpy(g0, tg, (size_t)c.tm.m.layout.total * sizeof(float));
    vl_case r;
    vl_case_init(&r, LJ_RECOMPUTE_FULL);
    lj_vl_zero_grads(&r.vl);
    lj_vl_forward_backward(&r.vl, 1, 1.0f / (float)r.tm.m.num_targets);
    const double rerr = rel_error(r.tm.m.grads, g0, c.tm.m.layout.total);
    print_message("full recompute vs none: gradient relative error %.2e\n", rerr);
    assert_true(rerr < 1e-6);
    free(g0);
    vl_case_free(&r);
    vl_case_free(&c);
}

/* A batch whose image pads do not match its images is refused with a message, not run. */
static void test_bad_batch(void **state) {
    (void)state;
    vl_case c;
    vl_case_init(&c, LJ_RECOMPUTE_NONE);
    const int32_t grid3[] = {1, 4, 6, 1, 2, 4, 1, 2, 2};
    assert_int_equal(lj_vl_set_batch(&c.vl, c.ids, c.targets, c.pixels, grid3, 3), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "images"));
    const int32_t grid_big[] = {1, 6, 6, 1, 2, 4}; /* 9 tokens where the pads hold 6 */
    assert_int_equal(lj_vl_set_batch(&c.vl, c.ids, c.targets, c.pixels, grid_big, 2), LJ_ERR_ARG);
    const int32_t grid_odd[] = {1, 3, 8, 1, 2, 4}; /* h not a multiple of the merge size */
    assert_int_equal(lj_vl_set_batch(&c.vl, c.ids, c.targets, c.pixels, grid_odd, 2), LJ_ERR_ARG);
    vl_case_free(&c);
}

/* ---- FP8 --------------------------------------------------------------------------- */

/* The tower's recipe state as host f32 (lj_linear_state_get), malloc'd; *n its length. */
static float *tower_fp8_state(const lj_vl *vl, int64_t *n) {
    int64_t nh, ns;
    *n = lj_linear_fp8_state_numel(&vl->vis.linear.fp8, &nh, &ns);
    float *st = lj_malloc((size_t)*n * sizeof(float));
    lj_linear_state_get(&vl->vis.linear, st);
    return st;
}

/* Block 0's fc1 output as the tensorwise recipe defines it (model/linear.h), in double: x = its
 * input ln2 [Np, V] and W [I, V] each cast to E4M3 with its own amax (s = 448 / amax), y =
 * (1/s_x)(1/s_w) xq Wq^T + b. Returns the relative L2 error of the tower's a->h1 against it. */
static double fc1_against_recipe(const lj_vision *vm) {
    const int Np = vm->num_patches, V = vm->spec.V, I = vm->spec.I;
    const int wi = lj_vision_block_param(&vm->layout, 0, LJ_VP_FC1_W);
    const float *x = vm->blocks[0].ln2, *w = (const float *)vm->params + vm->layout.params[wi].offset;
    const float *b = (const float *)vm->params + vm->layout.params[wi + 1].offset;
    float ax = 0.0f, aw = 0.0f;
    for (int64_t i = 0; i < (int64_t)Np * V; i++) ax = fmaxf(ax, fabsf(x[i]));
    for (int64_t i = 0; i < (int64_t)I * V; i++) aw = fmaxf(aw, fabsf(w[i]));
    const float sx = lj_fp8_current_scale(ax, lj_fp8_max(LJ_FP8_E4M3)),
                sw = lj_fp8_current_scale(aw, lj_fp8_max(LJ_FP8_E4M3));
    double num = 0.0, den = 0.0;
    for (int n = 0; n < Np; n++)
        for (int o = 0; o < I; o++) {
            double acc = 0.0;
            for (int k = 0; k < V; k++)
                acc += (double)lj_fp8_to_f32(lj_fp8_from_f32(x[(size_t)n * V + k] * sx, LJ_FP8_E4M3), LJ_FP8_E4M3) *
                       (double)lj_fp8_to_f32(lj_fp8_from_f32(w[(size_t)o * V + k] * sw, LJ_FP8_E4M3), LJ_FP8_E4M3);
            const double want = acc / ((double)sx * sw) + b[o], got = ((const float *)vm->blocks[0].h1)[(size_t)n * I + o];
            num += (got - want) * (got - want);
            den += want * want;
        }
    return sqrt(num / den);
}

/* The vision tower's blocks in FP8 (model/vision.h) beside the decoder's, against the fp32 model
 * on the same weights and batch (CPU emulation):
 *   - the tower runs its own recipe: 16 FP8 linears (4 blocks x qkv, proj, fc1, fc2), its plan
 *     buffers named vision.fp8.*, the decoder's 16 beside it;
 *   - tensorwise: block 0's fc1 is the recipe's GEMM plus the bias (to fp32 rounding); a second
 *     pass without zeroing doubles the tower's gradients (to rounding: the weight gradients
 *     accumulate); the ViT output and both towers' gradients are within the tolerances (relative
 *     L2 against fp32 with this test's weights, 1/sqrt(fan_in), through 4 blocks and 4 layers:
 *     measured ViT output 6.4e-2, tower gradients 0.24, decoder gradients 0.23 under hybrid's
 *     E5M2 gradients; test_fp8's bound for one weight gradient is 0.20) and not fp32's;
 *   - delayed: a training pass records an amax for every tower tensor (x, W, dy of each linear),
 *     the next pass's scales follow from them; a forward-only pass changes no state;
 *   - a weight that holds inf is named by the overflow report with the tower's HF name. */
static void test_vl_fp8(void **state) {
    (void)state;
    vl_case ref;
    vl_case_init(&ref, LJ_RECOMPUTE_NONE);
    lj_vl_zero_grads(&ref.vl);
    lj_vl_forward_backward(&ref.vl, 1, 1.0f / (float)ref.tm.m.num_targets);
    assert_false(ref.vl.vis.linear.fp8.active);
    const int Nt = ref.vl.vis.num_tokens, O = ref.cfg.vision.out_hidden_size;
    const int64_t nv = ref.vl.vis.layout.total, nt = ref.tm.m.layout.total;

    lj_linear_fp8_options o = lj_linear_fp8_defaults();
    o.recipe = LJ_FP8_RECIPE_TENSORWISE;
    vl_case c;
    vl_case_init_fp8(&c, LJ_RECOMPUTE_NONE, &o);
    assert_true(c.vl.vis.linear.fp8.active && c.tm.m.linear.fp8.active);
    assert_int_equal(c.vl.vis.linear.fp8.num_linears, 4 * c.cfg.vision.depth);
    assert_int_equal(c.tm.m.linear.fp8.num_linears, 4 * c.cfg.text.num_hidden_layers);
    int vision_fp8 = 0;
    for (int i = 0; i < c.tm.p.count; i++) vision_fp8 += strncmp(c.tm.p.buffers[i].name, "vision.fp8.", 11) == 0;
    assert_true(vision_fp8 >= 8); /* state (3), the casts' scratch (6), the GEMM's workspace */
    lj_vl_zero_grads(&c.vl);
    lj_vl_forward_backward(&c.vl, 1, 1.0f / (float)c.tm.m.num_targets);
    const double e_out = rel_error(c.vl.vis.mergers[0].out, ref.vl.vis.mergers[0].out, (int64_t)Nt * O);
    const double e_vg = rel_error(c.vl.vis.grads, ref.vl.vis.grads, nv);
    const double e_tg = rel_error(c.tm.m.grads, ref.tm.m.grads, nt);
    print_message("tensorwise hybrid against fp32: ViT output %.2e, tower gradients %.2e, decoder gradients %.2e\n",
                  e_out, e_vg, e_tg);
    assert_true(e_out > 1e-3 && e_out < 0.1);
    assert_true(e_vg > 1e-3 && e_vg < 0.35);
    assert_true(e_tg > 1e-3 && e_tg < 0.35);
    const double e_fc1 = fc1_against_recipe(&c.vl.vis);
    print_message("block 0 fc1 against the recipe in double: %.2e\n", e_fc1);
    assert_true(e_fc1 < 1e-6);
    float *g2 = lj_malloc((size_t)nv * sizeof(float));
    for (int64_t i = 0; i < nv; i++) g2[i] = 2.0f * ((const float *)c.vl.vis.grads)[i];
    lj_vl_forward_backward(&c.vl, 1, 1.0f / (float)c.tm.m.num_targets);
    const double e_acc = rel_error(c.vl.vis.grads, g2, nv);
    print_message("two passes against twice one: tower gradients %.2e\n", e_acc);
    assert_true(e_acc < 1e-6); /* the same codes twice; only the accumulating GEMMs' rounding differs */
    free(g2);
    vl_case_free(&c);

    /* delayed: every tower tensor's amax recorded by a training pass, none by a forward-only one */
    o = lj_linear_fp8_defaults();
    vl_case_init_fp8(&c, LJ_RECOMPUTE_NONE, &o);
    lj_vl_zero_grads(&c.vl);
    lj_vl_forward_backward(&c.vl, 1, 1.0f / (float)c.tm.m.num_targets);
    int64_t n;
    float *st = tower_fp8_state(&c.vl, &n);
    const int F = c.vl.vis.linear.fp8.num_linears; /* history 1: [3F] amaxes, then [3F] scales */
    assert_int_equal(n, 6 * F);
    for (int t = 0; t < 3 * F; t++) {
        if (!(st[t] > 0.0f)) fail_msg("tower tensor %d: amax %g after a training pass", t, (double)st[t]);
        assert_true(st[3 * F + t] == 1.0f); /* the first pass ran with the initial scales */
    }
    lj_vl_forward_backward(&c.vl, 0, 0.0f);
    int64_t n2;
    float *st2 = tower_fp8_state(&c.vl, &n2);
    assert_memory_equal(st, st2, (size_t)n * sizeof(float));
    free(st2);
    lj_vl_zero_grads(&c.vl);
    lj_vl_forward_backward(&c.vl, 1, 1.0f / (float)c.tm.m.num_targets);
    st2 = tower_fp8_state(&c.vl, &n2);
    for (int t = 0; t < 3 * F; t++) /* the scales of the second pass: the format's max over the first's amax */
        assert_true(st2[3 * F + t] != 1.0f);
    free(st2);
    free(st);
    char what[160];
    assert_int_equal(lj_linear_fp8_overflow(&c.vl.vis.linear, what, sizeof what), 0);

    /* a tower weight that holds inf: named by its HF name */
    const int qkv = lj_vision_block_param(&c.vl.vis.layout, 1, LJ_VP_QKV_W);
    c.vis_w[c.vl.vis.layout.params[qkv].offset + 3] = INFINITY;
    lj_vision_set_weights(&c.vl.vis, c.vis_w);
    lj_vl_zero_grads(&c.vl);
    lj_vl_forward_backward(&c.vl, 1, 1.0f / (float)c.tm.m.num_targets);
    assert_int_equal(lj_linear_fp8_overflow(&c.vl.vis.linear, what, sizeof what), 1);
    print_message("overflow: %s\n", what);
    assert_non_null(strstr(what, "visual.blocks.1.attn.qkv weight"));
    vl_case_free(&c);
    vl_case_free(&ref);
}

/* ---- the tower's recompute ------------------------------------------------------------ */

/* The tower's recipe state as host f32, NULL without FP8; *n its length (0 then). */
static float *fp8_state_or_null(const lj_vl *vl, int64_t *n) {
    *n = 0;
    return vl->vis.linear.fp8.active ? tower_fp8_state(vl, n) : NULL;
}

/* The tower's recompute (model/vision.h): every block keeps only its input and replays its forward
 * right before its backward into one shared set of block tensors. On the CPU the loss, the ViT and
 * DeepStack outputs and every gradient of both towers equal those of the tower without it bit for
 * bit, after each of two training passes: in fp32, beside the decoder's full recompute, and in each
 * FP8 recipe (delayed with a history of 4 and the max algorithm, so that the second pass's scales
 * come from the first's amaxes; tensorwise; blockwise), whose tower state (amax histories and
 * scales) is the same too: the replay's casts record no amax of their own. */
static void test_vision_recompute(void **state) {
    (void)state;
    typedef struct {
        const char *name;
        int policy, fp8;
        lj_fp8_recipe recipe;
    } rc_case;
    const rc_case cases[] = {{"fp32", LJ_RECOMPUTE_NONE, 0, LJ_FP8_RECIPE_DELAYED},
                             {"fp32, decoder full", LJ_RECOMPUTE_FULL, 0, LJ_FP8_RECIPE_DELAYED},
                             {"fp8 delayed", LJ_RECOMPUTE_NONE, 1, LJ_FP8_RECIPE_DELAYED},
                             {"fp8 tensorwise", LJ_RECOMPUTE_NONE, 1, LJ_FP8_RECIPE_TENSORWISE},
                             {"fp8 blockwise", LJ_RECOMPUTE_FULL, 1, LJ_FP8_RECIPE_BLOCKWISE}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const rc_case *q = &cases[k];
        lj_linear_fp8_options o = lj_linear_fp8_defaults();
        o.recipe = q->recipe;
        if (q->recipe == LJ_FP8_RECIPE_DELAYED) {
            o.amax_history_len = 4;
            o.amax_compute_max = 1;
        }
        vl_case a, b;
        vl_case_init_all(&a, q->policy, 0, q->fp8 ? &o : NULL);
        vl_case_init_all(&b, q->policy, 1, q->fp8 ? &o : NULL);
        assert_int_equal(a.vl.vis.recompute, 0);
        assert_int_equal(b.vl.vis.recompute, 1);
        assert_true(b.vl.vis.blocks[0].qkv == b.vl.vis.blocks[3].qkv); /* one shared set */
        assert_true(a.vl.vis.blocks[0].qkv != a.vl.vis.blocks[3].qkv);
        assert_true(a.tm.p.total_bytes > b.tm.p.total_bytes);
        assert_int_equal(a.vl.vis.linear.fp8.active, q->fp8);
        const int Nt = a.vl.vis.num_tokens, O = a.cfg.vision.out_hidden_size;
        const int64_t nv = a.vl.vis.layout.total, nt = a.tm.m.layout.total;
        for (int pass = 0; pass < 2; pass++) {
            vl_case *both[2] = {&a, &b};
            for (int r = 0; r < 2; r++) {
                lj_vl_zero_grads(&both[r]->vl);
                lj_vl_forward_backward(&both[r]->vl, 1, 1.0f / (float)both[r]->tm.m.num_targets);
            }
            assert_true(lj_model_mean_loss(&a.tm.m) == lj_model_mean_loss(&b.tm.m));
            for (int j = 0; j <= a.cfg.vision.num_deepstack; j++)
                assert_memory_equal(a.vl.vis.mergers[j].out, b.vl.vis.mergers[j].out, (size_t)Nt * O * sizeof(float));
            assert_memory_equal(a.vl.vis.grads, b.vl.vis.grads, (size_t)nv * sizeof(float));
            assert_memory_equal(a.tm.m.grads, b.tm.m.grads, (size_t)nt * sizeof(float));
            int64_t na, nb;
            float *sa = fp8_state_or_null(&a.vl, &na), *sb = fp8_state_or_null(&b.vl, &nb);
            assert_int_equal(na, nb);
            if (na) assert_memory_equal(sa, sb, (size_t)na * sizeof(float));
            free(sa);
            free(sb);
        }
        double g = 0.0;
        for (int64_t i = 0; i < nv; i++) g += fabs(((const float *)b.vl.vis.grads)[i]);
        assert_true(g > 0.0);
        print_message("tower recompute, %s: loss %.6f and every gradient equal to the tower without it; plan %.1f KiB "
                      "smaller\n", q->name, lj_model_mean_loss(&b.tm.m),
                      (double)(a.tm.p.total_bytes - b.tm.p.total_bytes) / 1024.0);
        vl_case_free(&b);
        vl_case_free(&a);
    }
}

/* ---- the HF fixtures ---------------------------------------------------------------- */

static float *ref_tensor(const lj_safetensors *st, const char *name, int64_t numel) {
    const lj_st_entry *e = lj_safetensors_find(st, name);
    if (!e) fail_msg("%s: no tensor '%s'", st->path, name);
    if (e->numel != numel) fail_msg("%s: tensor '%s' has %lld values, expected %lld", st->path, name, (long long)e->numel,
                                    (long long)numel);
    float *x = lj_malloc((size_t)numel * sizeof(float));
    assert_int_equal(lj_safetensors_read_f32(st, e, x), LJ_OK);
    return x;
}

static int32_t *ref_ints(const lj_safetensors *st, const char *name, int64_t *numel) {
    const lj_st_entry *e = lj_safetensors_find(st, name);
    if (!e || e->dtype != LJ_ST_I32) fail_msg("%s: no I32 tensor '%s'", st->path, name);
    *numel = e->numel;
    int32_t *x = lj_malloc((size_t)e->numel * sizeof(int32_t));
    memcpy(x, e->data, (size_t)e->numel * sizeof(int32_t));
    return x;
}

static void check_rel(const char *what, const float *x, const float *ref, int64_t n, double tol) {
    const double err = rel_error(x, ref, n);
    print_message("qwen3vl-tiny: %-44s relative error %.3e\n", what, err);
    if (!(err <= tol)) fail_msg("qwen3vl-tiny: %s: relative error %.3e > %.0e", what, err, tol);
}

/* Five AdamW steps of both towers with one global-norm clip over all gradients, the fixture's
 * settings (adamw.json): losses before each step and the final weights against the reference. */
static void adamw_steps(const char *dir, lj_vl *vl, lj_model *m, const float *tw, const float *vw) {
    char path[1200];
    snprintf(path, sizeof path, "%s/adamw.json", dir);
    char *text;
    assert_int_equal(lj_file_read_all(path, &text, NULL), LJ_OK);
    cJSON *js = cJSON_Parse(text);
    free(text);
    assert_non_null(js);
    const cJSON *losses = cJSON_GetObjectItemCaseSensitive(js, "losses");
    const double lr = cJSON_GetObjectItemCaseSensitive(js, "lr")->valuedouble;
    const double wd = cJSON_GetObjectItemCaseSensitive(js, "weight_decay")->valuedouble;
    const double mgn = cJSON_GetObjectItemCaseSensitive(js, "max_grad_norm")->valuedouble;
    const cJSON *betas = cJSON_GetObjectItemCaseSensitive(js, "betas");
    const lj_adamw_hparams hp = {(float)cJSON_GetArrayItem(betas, 0)->valuedouble,
                                 (float)cJSON_GetArrayItem(betas, 1)->valuedouble,
                                 (float)cJSON_GetObjectItemCaseSensitive(js, "eps")->valuedouble, (float)mgn, LJ_DTYPE_F32, LJ_DTYPE_F32};
    const lj_adamw_config ac = {hp.beta1, hp.beta2, hp.eps, (float)wd, (float)mgn, LJ_WD_MATRICES, 0, 0}; /* the fixtures' groups */
    const lj_ops *ops = m->ops;
    lj_model_set_weights(m, tw);
    lj_vision_set_weights(&vl->vis, vw);
    const int64_t nt = m->layout.total, nv = vl->vis.layout.total;
    lj_adamw_segment *st, *sv;
    const int nst = lj_adamw_segments(&m->layout, &ac, &st);
    lj_param_layout vlo = {0};
    vlo.params = vl->vis.layout.params;
    vlo.count = vl->vis.layout.count;
    const int nsv = lj_adamw_segments(&vlo, &ac, &sv); /* matrices decay; norms, biases, pos_embed do not */
    float *vm_ = calloc((size_t)nv, sizeof(float)), *vv_ = calloc((size_t)nv, sizeof(float));
    ops->memset_zero(m->adam_m, (size_t)nt * sizeof(float));
    ops->memset_zero(m->adam_v, (size_t)nt * sizeof(float));
    const int64_t nmax = nt > nv ? nt : nv;
    void *ws = lj_malloc(ops->global_norm_workspace_bytes(nmax) + 64);
    for (int step = 1; step <= 5; step++) {
        lj_vl_zero_grads(vl);
        lj_vl_forward_backward(vl, 1, 1.0f / (float)m->num_targets);
        const double loss = lj_model_mean_loss(m), want = cJSON_GetArrayItem(losses, step - 1)->valuedouble;
        const double err = fabs(loss - want) / fabs(want);
        print_message("qwen3vl-tiny: AdamW step %d loss %.8f, HF %.8f, relative error %.3e\n", step, loss, want, err);
        assert_true(err <= 1e-4);
        float a, b, sc[LJ_ADAMW_NUM_SCALARS];
        ops->global_norm_sq(&a, m->grads, nt, ws);
        ops->global_norm_sq(&b, vl->vis.grads, nv, ws);
        float norm_sq = a + b;
        lj_adamw_step_scalars(sc, &hp, (float)lr, step);
        ops->adamw_update(m->params, m->master, m->grads, m->adam_m, m->adam_v, st, nst, &hp, sc, &norm_sq);
        ops->adamw_update(vl->vis.params, vl->vis.params, vl->vis.grads, vm_, vv_, sv, nsv, &hp, sc, &norm_sq);
    }
    lj_safetensors fin;
    snprintf(path, sizeof path, "%s/adamw.safetensors", dir);
    assert_int_equal(lj_safetensors_open(&fin, path), LJ_OK);
    double worst = 0.0;
    for (int side = 0; side < 2; side++) {
        const lj_param_info *ps = side ? vl->vis.layout.params : m->layout.params;
        const int count = side ? vl->vis.layout.count : m->layout.count;
        const float *w = side ? vl->vis.params : m->master;
        for (int i = 0; i < count; i++) {
            char hf[128], name[160];
            if (side) snprintf(hf, sizeof hf, "%s", ps[i].name);
            else lj_vl_text_hf_name(ps[i].name, hf, sizeof hf);
            snprintf(name, sizeof name, "final.%s", hf);
            float *r = ref_tensor(&fin, name, ps[i].numel);
            const double err = rel_error(w + ps[i].offset, r, ps[i].numel);
            if (err > worst) worst = err;
            if (!(err <= 1e-4)) fail_msg("qwen3vl-tiny: %s after 5 AdamW steps: relative error %.3e > 1e-4", hf, err);
            free(r);
        }
    }
    print_message("qwen3vl-tiny: final weights worst relative error %.3e\n", worst);
    lj_safetensors_close(&fin);
    free(ws), free(vm_), free(vv_), free(st), free(sv);
    cJSON_Delete(js);
}

/* The import's name rules on checkpoints made from the fixture's: a tied config accepts a missing
 * lm_head.weight (and ignores a present one); an untied one names it when missing; a tensor
 * that is not part of the model is named. */
static void test_hf_import_names(void **state) {
    (void)state;
    const char *src = getenv("LJ_SOURCE_DIR");
    char fx[1024], path[1200], dir[512];
    snprintf(fx, sizeof fx, "%s/tests/fixtures/qwen3vl-tiny", src ? src : ".");
    snprintf(path, sizeof path, "%s/model.safetensors", fx);
    if (access(path, R_OK) != 0) skip();
    lj_safetensors st;
    assert_int_equal(lj_safetensors_open(&st, path), LJ_OK);
    lj_st_tensor *t = lj_calloc((size_t)st.count + 1, sizeof *t);
    int n = 0;
    for (int i = 0; i < st.count; i++) {
        const lj_st_entry *e = &st.entries[i];
        if (strcmp(e->name, "lm_head.weight") == 0) continue;
        t[n] = (lj_st_tensor){.name = e->name, .dtype = e->dtype, .ndim = e->ndim, .data = e->data};
        memcpy(t[n].shape, e->shape, sizeof e->shape);
        n++;
    }
    assert_int_equal(lj_test_make_dir(dir, sizeof dir, "qwen3vl-import"), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(lj_safetensors_write(path, t, n, NULL, NULL, 0), LJ_OK);
    lj_vl_config cfg;
    assert_int_equal(lj_vl_config_preset("qwen3-vl-fixture", &cfg), LJ_OK);
    lj_vision_layout vl;
    lj_vision_layout_init(&vl, &cfg.vision);
    cfg.text.tie_word_embeddings = 1;
    float *tw = lj_malloc((size_t)lj_config_num_params(&cfg.text) * sizeof(float) + 4096 * sizeof(float));
    float *vw = lj_malloc((size_t)vl.total * sizeof(float));
    if (lj_hf_vl_import(dir, &cfg, tw, vw) != LJ_OK) fail_msg("tied, no lm_head: %s", lj_error_message());
    if (lj_hf_vl_import(fx, &cfg, tw, vw) != LJ_OK) fail_msg("tied, lm_head present: %s", lj_error_message());
    cfg.text.tie_word_embeddings = 0;
    assert_int_equal(lj_hf_vl_import(dir, &cfg, tw, vw), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "lm_head.weight"));
    /* an extra tensor */
    const float extra[2] = {1, 2};
    t[n] = (lj_st_tensor){.name = "model.visual.extra.weight", .dtype = LJ_ST_F32, .ndim = 1, .shape = {2},
                          .data = extra};
    assert_int_equal(lj_safetensors_write(path, t, n + 1, NULL, NULL, 0), LJ_OK);
    cfg.text.tie_word_embeddings = 1;
    assert_int_equal(lj_hf_vl_import(dir, &cfg, tw, vw), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "model.visual.extra.weight"));
    free(tw), free(vw), free(t);
    lj_vision_layout_free(&vl);
    lj_safetensors_close(&st);
}

static void test_hf_fixtures(void **state) {
    (void)state;
    const char *src = getenv("LJ_SOURCE_DIR");
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/qwen3vl-tiny", src ? src : ".");
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (access(path, R_OK) != 0) {
        print_message("SKIP: %s is missing; make it on a machine with PyTorch and transformers: "
                      "python3 tests/fixtures/make_qwen3vl_fixtures.py tests/fixtures/qwen3vl-tiny\n", path);
        skip();
    }
    lj_vl_config cfg, tiny;
    if (lj_vl_config_load(path, &cfg) != LJ_OK) fail_msg("%s", lj_error_message());
    assert_int_equal(lj_vl_config_preset("qwen3-vl-fixture", &tiny), LJ_OK);
    assert_int_equal(cfg.text.hidden_size, tiny.text.hidden_size);
    assert_int_equal(cfg.vision.depth, tiny.vision.depth);
    assert_int_equal(cfg.vision.num_position_embeddings, tiny.vision.num_position_embeddings);
    assert_int_equal(cfg.image_token_id, tiny.image_token_id);
    lj_safetensors in, ref;
    snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
    assert_int_equal(lj_safetensors_open(&in, path), LJ_OK);
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    assert_int_equal(lj_safetensors_open(&ref, path), LJ_OK);
    int64_t T, ng, np3, ntg;
    int32_t *ids = ref_ints(&in, "input_ids", &T), *grid = ref_ints(&in, "image_grid_thw", &ng);
    int32_t *pos3 = ref_ints(&in, "position_ids", &np3), *targets = ref_ints(&in, "targets", &ntg);
    assert_int_equal(np3, 3 * T);
    assert_int_equal(ntg, T);
    const int nimg = (int)(ng / 3), P = lj_vision_patch_dim(&cfg.vision);
    int np = 0;
    for (int i = 0; i < nimg; i++) np += grid[i * 3] * grid[i * 3 + 1] * grid[i * 3 + 2];
    float *pixels = ref_tensor(&in, "pixel_values", (int64_t)np * P);
    for (int i = 0; i < T; i++) targets[i] = targets[i] < 0 ? -1 : targets[i];

    for (int variant = 0; variant < 2; variant++) { /* unfused (logits kept), fused */
        lj_test_model tm;
        lj_vl vl;
        if (vl_model_create(&tm, &vl, &cfg, (int)T, variant, LJ_RECOMPUTE_NONE, np, nimg) != LJ_OK)
            fail_msg("%s", lj_error_message());
        float *tw = lj_malloc((size_t)tm.m.layout.total * sizeof(float));
        float *vw = lj_malloc((size_t)vl.vis.layout.total * sizeof(float));
        if (lj_hf_vl_import(dir, &cfg, tw, vw) != LJ_OK) fail_msg("%s", lj_error_message());
        lj_model_set_weights(&tm.m, tw);
        lj_vision_set_weights(&vl.vis, vw);
        if (lj_vl_set_batch(&vl, ids, targets, pixels, grid, nimg) != LJ_OK) fail_msg("%s", lj_error_message());
        for (int64_t i = 0; i < 3 * T; i++)
            if (vl.host_pos3[i] != pos3[i])
                fail_msg("position_ids[%lld][%lld]: %d, HF %d", (long long)(i / T), (long long)(i % T), vl.host_pos3[i],
                         pos3[i]);
        const int Nt = vl.vis.num_tokens, O = cfg.vision.out_hidden_size, V = cfg.vision.hidden_size;
        lj_vision_forward(&vl.vis, 0);
        if (variant == 0) {
            float *x = ref_tensor(&ref, "vit.embed", (int64_t)np * V);
            check_rel("ViT patch embed + position grid", vl.vis.residual[0], x, (int64_t)np * V, 1e-5);
            free(x);
            for (int i = 0; i < cfg.vision.depth; i++) {
                char name[64];
                snprintf(name, sizeof name, "vit.block.%d", i);
                x = ref_tensor(&ref, name, (int64_t)np * V);
                check_rel(name, vl.vis.residual[i + 1], x, (int64_t)np * V, 1e-5);
                free(x);
            }
            x = ref_tensor(&ref, "vit.merger", (int64_t)Nt * O);
            check_rel("ViT output (merger)", vl.vis.mergers[0].out, x, (int64_t)Nt * O, 1e-5);
            free(x);
            for (int j = 0; j < cfg.vision.num_deepstack; j++) {
                char name[64];
                snprintf(name, sizeof name, "vit.deepstack.%d", j);
                x = ref_tensor(&ref, name, (int64_t)Nt * O);
                check_rel(name, vl.vis.mergers[1 + j].out, x, (int64_t)Nt * O, 1e-5);
                free(x);
            }
            const int64_t nl = T * (int64_t)cfg.text.vocab_size;
            float *logits = lj_malloc((size_t)nl * sizeof(float));
            lj_model_logits(&tm.m, logits);
            x = ref_tensor(&ref, "logits", nl);
            check_rel("logits", logits, x, nl, 1e-5);
            free(x);
            free(logits);
        }
        lj_vl_zero_grads(&vl);
        lj_vl_forward_backward(&vl, 1, 1.0f / (float)tm.m.num_targets);
        float *ref_loss = ref_tensor(&ref, "loss", 1);
        const double loss = lj_model_mean_loss(&tm.m), lerr = fabs(loss - ref_loss[0]) / fabs(ref_loss[0]);
        print_message("qwen3vl-tiny (%s): loss %.8f, HF %.8f, relative error %.3e\n", variant ? "fused" : "unfused", loss,
                      ref_loss[0], lerr);
        assert_true(lerr <= 1e-5);
        free(ref_loss);
        double worst = 0.0;
        const char *worst_name = "";
        for (int side = 0; side < 2; side++) {
            const lj_param_info *ps = side ? vl.vis.layout.params : tm.m.layout.params;
            const int count = side ? vl.vis.layout.count : tm.m.layout.count;
            const float *g = side ? vl.vis.grads : tm.m.grads;
            for (int i = 0; i < count; i++) {
                char hf[128], gname[160];
                if (side) snprintf(hf, sizeof hf, "%s", ps[i].name);
                else lj_vl_text_hf_name(ps[i].name, hf, sizeof hf);
                snprintf(gname, sizeof gname, "grad.%s", hf);
                float *r = ref_tensor(&ref, gname, ps[i].numel);
                const double err = rel_error(g + ps[i].offset, r, ps[i].numel);
                if (err > worst) worst = err, worst_name = ps[i].name;
                if (!(err <= 1e-4)) fail_msg("qwen3vl-tiny: gradient of %s: relative error %.3e > 1e-4", hf, err);
                free(r);
            }
        }
        print_message("qwen3vl-tiny (%s): worst gradient relative error %.3e (%s)\n", variant ? "fused" : "unfused", worst,
                      worst_name);
        if (variant == 1) adamw_steps(dir, &vl, &tm.m, tw, vw);
        free(tw);
        free(vw);
        lj_vl_free(&vl);
        lj_test_model_destroy(&tm);
    }
    free(ids), free(grid), free(pos3), free(targets), free(pixels);
    lj_safetensors_close(&in);
    lj_safetensors_close(&ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets),     cmocka_unit_test(test_config_load),
        cmocka_unit_test(test_rope_index),  cmocka_unit_test(test_mrope_axes),
        cmocka_unit_test(test_vl_finite_differences), cmocka_unit_test(test_bad_batch),
        cmocka_unit_test(test_vl_fp8),      cmocka_unit_test(test_vision_recompute),
        cmocka_unit_test(test_hf_import_names), cmocka_unit_test(test_hf_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

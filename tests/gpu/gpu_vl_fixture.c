/* gpu_vl_fixture.c: Qwen3-VL (the vision tower, DeepStack and the decoder; model/vl.h) on the
 * CUDA backend (bf16 recipe) against the Hugging Face fixture tests/fixtures/qwen3vl-tiny/ (made
 * by tests/fixtures/make_qwen3vl_fixtures.py): the merger and DeepStack outputs and the logits
 * within 5e-2 relative (L2 norm of the difference over the reference's), the loss within 2e-2
 * relative, and every gradient of both towers with cosine similarity >= 0.99 to the reference.
 * Prints one line per check and a final count; exits 1 on any failure. Usage: gpu_vl_fixture
 * [FIXTURE_DIR] (default tests/fixtures/qwen3vl-tiny). Needs a GPU; never run by CTest. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_vl.h"
#include "io/safetensors.h"
#include "model/vl.h"
#include "parallel/parallel.h"
#include "plan/plan.h"
#include "tests/test_util.h"
#include "train/ops_config.h"

static int g_checks, g_failures;

static void check(int ok, double value, double limit, const char *what) {
    printf("  [%s] %-60s %.3e (limit %.1e)\n", ok ? " ok " : "FAIL", what, value, limit);
    g_checks++;
    g_failures += !ok;
}

static double rel_l2(const float *x, const float *ref, int64_t n) {
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)x[i] - ref[i]) * ((double)x[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    return isfinite(d) ? sqrt(d) / (sqrt(r) + 1e-30) : INFINITY;
}

static double cosine(const float *a, const float *b, int64_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    if (aa == 0 && bb == 0) return 1.0;
    return ab / (sqrt(aa) * sqrt(bb) + 1e-30);
}

static float *tensor(const lj_safetensors *st, const char *name, int64_t numel) {
    const lj_st_entry *e = lj_safetensors_find(st, name);
    if (!e || e->numel != numel) {
        fprintf(stderr, "gpu_vl_fixture: %s: no tensor '%s' of %lld values\n", st->path, name, (long long)numel);
        exit(1);
    }
    float *x = lj_malloc((size_t)numel * sizeof(float));
    if (lj_safetensors_read_f32(st, e, x) != LJ_OK) {
        fprintf(stderr, "gpu_vl_fixture: %s\n", lj_error_message());
        exit(1);
    }
    return x;
}

static int32_t *ints(const lj_safetensors *st, const char *name, int64_t *numel) {
    const lj_st_entry *e = lj_safetensors_find(st, name);
    if (!e || e->dtype != LJ_ST_I32) {
        fprintf(stderr, "gpu_vl_fixture: %s: no I32 tensor '%s'\n", st->path, name);
        exit(1);
    }
    *numel = e->numel;
    int32_t *x = lj_malloc((size_t)e->numel * sizeof(int32_t));
    memcpy(x, e->data, (size_t)e->numel * sizeof(int32_t));
    return x;
}

/* n values of backend memory in `dtype` (bf16 or f32) as host f32. */
static float *fetch(const lj_ops *ops, const void *src, int64_t n, lj_dtype dtype) {
    float *h = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    ops->synchronize();
    if (dtype == LJ_DTYPE_F32) {
        ops->download(h, src, (size_t)n * sizeof(float));
    } else {
        uint16_t *b = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(uint16_t));
        ops->download(b, src, (size_t)n * sizeof(uint16_t));
        for (int64_t i = 0; i < n; i++) h[i] = lj_bf16_to_f32(b[i]);
        free(b);
    }
    return h;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/fixtures/qwen3vl-tiny";
    char path[1200], what[200];
    lj_ops_config ocfg;
    lj_ops_config_from_env(0, &ocfg); /* the device, cuDNN's library: as the CLI opens it */
    const lj_ops *ops = lj_ops_cuda_open(&ocfg);
    if (!ops) {
        fprintf(stderr, "gpu_vl_fixture: no CUDA backend: %s\n", lj_error_message());
        return 1;
    }
    lj_vl_config cfg;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (lj_vl_config_load(path, &cfg) != LJ_OK) {
        fprintf(stderr, "gpu_vl_fixture: %s\n", lj_error_message());
        return 1;
    }
    lj_safetensors in, ref;
    snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
    if (lj_safetensors_open(&in, path) != LJ_OK) return fprintf(stderr, "gpu_vl_fixture: %s\n", lj_error_message()), 1;
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    if (lj_safetensors_open(&ref, path) != LJ_OK) return fprintf(stderr, "gpu_vl_fixture: %s\n", lj_error_message()), 1;
    int64_t T, ng, ntg;
    int32_t *ids = ints(&in, "input_ids", &T), *grid = ints(&in, "image_grid_thw", &ng), *targets = ints(&in, "targets", &ntg);
    const int nimg = (int)(ng / 3), P = lj_vision_patch_dim(&cfg.vision);
    int np = 0;
    for (int i = 0; i < nimg; i++) np += grid[i * 3] * grid[i * 3 + 1] * grid[i * 3 + 2];
    float *pixels = tensor(&in, "pixel_values", (int64_t)np * P);
    for (int i = 0; i < T; i++) targets[i] = targets[i] < 0 ? -1 : targets[i];

    /* the decoder on CUDA, unfused (logits kept), as the CPU test builds it */
    lj_model m;
    lj_plan plan;
    lj_model_options o;
    memset(&o, 0, sizeof o);
    o.micro_batch_size = 1;
    o.seq_length = (int)T;
    o.training = 1;
    lj_model_init(&m, ops, &cfg.text, &o);
    lj_parallelize(&m, NULL, NULL); /* replicated */
    lj_vl vl; /* the tower joins the decoder's plan */
    if (lj_vl_init(&vl, &m, &cfg, np, nimg) != LJ_OK) return fprintf(stderr, "gpu_vl_fixture: %s\n", lj_error_message()), 1;
    lj_plan_build(&plan, &m);
    if (lj_plan_allocate(&plan, &m) != LJ_OK) return fprintf(stderr, "gpu_vl_fixture: %s\n", lj_error_message()), 1;
    float *tw = lj_malloc((size_t)m.layout.total * sizeof(float));
    float *vw = lj_malloc((size_t)vl.vis.layout.total * sizeof(float));
    if (lj_hf_vl_import(dir, &cfg, tw, vw) != LJ_OK) return fprintf(stderr, "gpu_vl_fixture: %s\n", lj_error_message()), 1;
    lj_model_set_weights(&m, tw);
    lj_vision_set_weights(&vl.vis, vw);
    if (lj_vl_set_batch(&vl, ids, targets, pixels, grid, nimg) != LJ_OK)
        return fprintf(stderr, "gpu_vl_fixture: %s\n", lj_error_message()), 1;
    printf("qwen3vl fixture %s on CUDA: %lld tokens, %d images, %d patches\n", dir, (long long)T, nimg, np);

    lj_vl_zero_grads(&vl);
    lj_vl_forward_backward(&vl, 1, 1.0f / (float)m.num_targets);
    const int Nt = vl.vis.num_tokens, O = cfg.vision.out_hidden_size;
    const lj_dtype A = ops->act_dtype, G = ops->grad_dtype;
    float *x = fetch(ops, vl.vis.mergers[0].out, (int64_t)Nt * O, A), *r = tensor(&ref, "vit.merger", (int64_t)Nt * O);
    double e = rel_l2(x, r, (int64_t)Nt * O);
    check(e <= 5e-2, e, 5e-2, "ViT output (merger)");
    free(x), free(r);
    for (int j = 0; j < cfg.vision.num_deepstack; j++) {
        char name[64];
        snprintf(name, sizeof name, "vit.deepstack.%d", j);
        x = fetch(ops, vl.vis.mergers[1 + j].out, (int64_t)Nt * O, A);
        r = tensor(&ref, name, (int64_t)Nt * O);
        e = rel_l2(x, r, (int64_t)Nt * O);
        check(e <= 5e-2, e, 5e-2, name);
        free(x), free(r);
    }
    const int64_t nl = T * (int64_t)cfg.text.vocab_size;
    float *logits = lj_malloc((size_t)nl * sizeof(float));
    lj_model_logits(&m, logits);
    r = tensor(&ref, "logits", nl);
    e = rel_l2(logits, r, nl);
    check(e <= 5e-2, e, 5e-2, "logits");
    free(r), free(logits);
    float *ref_loss = tensor(&ref, "loss", 1);
    const double loss = lj_model_mean_loss(&m), lerr = fabs(loss - ref_loss[0]) / fabs(ref_loss[0]);
    snprintf(what, sizeof what, "loss %.6f (HF %.6f)", loss, ref_loss[0]);
    check(lerr <= 2e-2, lerr, 2e-2, what);
    free(ref_loss);
    for (int side = 0; side < 2; side++) {
        const lj_param_info *ps = side ? vl.vis.layout.params : m.layout.params;
        const int count = side ? vl.vis.layout.count : m.layout.count;
        const int64_t total = side ? vl.vis.layout.total : m.layout.total;
        float *g = fetch(ops, side ? vl.vis.grads : m.grads, total, G);
        for (int i = 0; i < count; i++) {
            char hf[128], gname[160];
            if (side) snprintf(hf, sizeof hf, "%s", ps[i].name);
            else lj_vl_text_hf_name(ps[i].name, hf, sizeof hf);
            snprintf(gname, sizeof gname, "grad.%s", hf);
            r = tensor(&ref, gname, ps[i].numel);
            const double c = cosine(g + ps[i].offset, r, ps[i].numel);
            snprintf(what, sizeof what, "gradient cosine %s", hf);
            check(c >= 0.99, c, 0.99, what);
            free(r);
        }
        free(g);
    }
    printf("gpu_vl_fixture: %d checks, %d failed\n", g_checks, g_failures);
    free(tw), free(vw), free(ids), free(grid), free(targets), free(pixels);
    lj_vl_free(&vl);
    lj_plan_release(&plan, ops);
    lj_plan_free(&plan);
    lj_model_free(&m);
    lj_safetensors_close(&in);
    lj_safetensors_close(&ref);
    return g_failures ? 1 : 0;
}

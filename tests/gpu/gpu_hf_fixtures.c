/* gpu_hf_fixtures.c: the whole model on the CUDA backend (bf16 recipe) against the Hugging
 * Face fp64 fixtures (tests/fixtures/hf/): loss within 1e-2 relative, every gradient's cosine
 * similarity with the reference >= 0.999, fused and unfused, every recompute policy, bf16 and
 * fp32 gradients; and five
 * AdamW steps whose losses stay within 2e-2 relative, taken by lj_dp_train_step both as one
 * CUDA graph per step (captured once, replayed) and eagerly, which agree within 1e-3. Prints one line per check and exits 1 on
 * any failure. Usage: gpu_hf_fixtures [FIXTURE_ROOT [CASE...]] (default tests/fixtures/hf with its
 * cases untied and tied; `gpu_hf_fixtures tests/fixtures/hf-qwen qwen3 qwen2` for the Qwen ones). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/hf.h"
#include "io/safetensors.h"
#include "train/ops_config.h"
#include "parallel/dp.h"
#include "plan/plan.h"
#include "tests/test_util.h"

enum { B = 2, T = 64 };

static int g_failures;

static void check(int ok, double value, double limit, const char *what) {
    printf("  [%s] %-60s %.3e (limit %.1e)\n", ok ? " ok " : "FAIL", what, value, limit);
    if (!ok) g_failures++;
}

static double cosine(const float *a, const float *b, int64_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / (sqrt(aa) * sqrt(bb) + 1e-30);
}

static int read_tensor(const lj_safetensors *st, const char *name, float *dst) {
    const lj_st_entry *e = lj_safetensors_find(st, name);
    if (!e || lj_safetensors_read_f32(st, e, dst) != LJ_OK) {
        printf("  [FAIL] %s: no tensor %s\n", st->path, name);
        g_failures++;
        return 0;
    }
    return 1;
}

/* g[P] f32 (host) = the model's gradients, whatever the grad dtype. */
static void download_grads(const lj_ops *ops, const lj_model *m, float *g, int64_t P) {
    if (ops->grad_dtype == LJ_DTYPE_F32) {
        ops->download(g, m->grads, (size_t)P * sizeof(float));
        return;
    }
    uint16_t *h = lj_malloc((size_t)P * sizeof(uint16_t));
    ops->download(h, m->grads, (size_t)P * sizeof(uint16_t));
    for (int64_t i = 0; i < P; i++) g[i] = lj_bf16_to_f32(h[i]);
    free(h);
}

static void run_case(const lj_ops *ops, const char *root, const char *name) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    lj_model_config cfg;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (lj_config_load(path, &cfg) != LJ_OK) {
        printf("  [FAIL] %s\n", lj_error_message());
        g_failures++;
        return;
    }
    const int64_t P = lj_config_num_params(&cfg);
    float *w = lj_malloc((size_t)P * sizeof(float)), *g = lj_malloc((size_t)P * sizeof(float));
    lj_hf_import(dir, &cfg, w);
    lj_safetensors in, ref;
    snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
    lj_safetensors_open(&in, path);
    int32_t tokens[B * (T + 1)];
    memcpy(tokens, lj_safetensors_find(&in, "input_ids")->data, sizeof tokens);
    lj_safetensors_close(&in);
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    lj_safetensors_open(&ref, path);
    float ref_loss;
    read_tensor(&ref, "loss", &ref_loss);
    float *gref = lj_malloc((size_t)P * sizeof(float));
    for (int fused = 0; fused <= 1; fused++) {
        for (int policy = 0; policy < 3; policy++) {
            lj_model_options o = lj_test_train_options(B, T, fused);
            memset(o.recompute, policy, sizeof o.recompute);
            lj_model m;
            lj_model_init(&m, ops, &cfg, &o);
            lj_plan plan;
            lj_plan_build(&plan, &m);
            if (lj_plan_allocate(&plan, &m) != LJ_OK) {
                printf("  [FAIL] %s\n", lj_error_message());
                g_failures++;
                return;
            }
            lj_model_upload_rope(&m);
            lj_model_set_weights(&m, w);
            lj_model_set_batch(&m, tokens);
            const float dloss = 1.0f / (B * T);
            lj_model_forward(&m, 1, dloss);
            lj_model_backward(&m);
            const double loss = lj_model_mean_loss(&m);
            download_grads(ops, &m, g, P);
            char what[160];
            snprintf(what, sizeof what, "%s %s grads %s recompute=%s: loss relative error", name,
                     fused ? "fused" : "unfused", lj_dtype_name(ops->grad_dtype), lj_recompute_name((lj_recompute)policy));
            const double lerr = fabs(loss - ref_loss) / fabs(ref_loss);
            check(lerr <= 1e-2, lerr, 1e-2, what);
            double worst = 1.0;
            const char *worst_name = "";
            for (int i = 0; i < m.layout.count; i++) {
                const lj_param_info *pi = &m.layout.params[i];
                char gname[160];
                snprintf(gname, sizeof gname, "grad.%s", pi->name);
                if (!read_tensor(&ref, gname, gref + pi->offset)) continue;
                const double c = cosine(g + pi->offset, gref + pi->offset, pi->numel);
                if (c < 0.999 && getenv("LJ_VERBOSE"))
                    printf("         %s %s recompute=%s: %s cosine %.4f\n", name, fused ? "fused" : "unfused",
                           lj_recompute_name((lj_recompute)policy), pi->name, c);
                if (c < worst) {
                    worst = c;
                    worst_name = pi->name;
                }
            }
            snprintf(what, sizeof what, "%s %s grads %s recompute=%s: worst gradient cosine (%s)", name,
                     fused ? "fused" : "unfused", lj_dtype_name(ops->grad_dtype), lj_recompute_name((lj_recompute)policy),
                     worst_name);
            check(worst >= 0.999, worst, 0.999, what);
            lj_plan_release(&plan, ops);
            lj_plan_free(&plan);
            lj_model_free(&m);
        }
    }
    /* five AdamW steps, fused path, through lj_dp_train_step: with graphs (the whole step as one
     * CUDA graph, replayed with each step's lr and bias corrections) and without (eager) */
    snprintf(path, sizeof path, "%s/adamw.json", dir);
    char *text = NULL;
    lj_file_read_all(path, &text, NULL);
    cJSON *aj = cJSON_Parse(text);
    free(text);
    const cJSON *losses = cJSON_GetObjectItemCaseSensitive(aj, "losses");
    double step_loss[2][5];
    for (int graphs = 1; graphs >= 0; graphs--) {
        lj_model_options o = lj_test_train_options(B, T, 1);
        o.graphs = graphs;
        lj_model m;
        lj_model_init(&m, ops, &cfg, &o);
        lj_plan plan;
        lj_plan_build(&plan, &m);
        lj_plan_allocate(&plan, &m);
        lj_model_upload_rope(&m);
        lj_model_set_weights(&m, w);
        lj_model_set_batch(&m, tokens);
        const lj_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, LJ_WD_MATRICES, 0}; /* the fixtures' groups */
        lj_adamw_segment *seg;
        const int nseg = lj_adamw_segments(&m.layout, &ac, &seg);
        double worst = 0.0;
        void *first_graph = NULL;
        int same_graph = 1;
        for (int step = 1; step <= 5; step++) {
            lj_dp single = LJ_DP_SINGLE;
            lj_dp_train_step(&single, &m, seg, nseg, &ac, 1e-3f, step, 1.0f / (B * T));
            if (step == 1) first_graph = m.step_graph.exec;
            same_graph &= m.step_graph.exec == first_graph;
            const double loss = lj_model_mean_loss(&m); /* this step's forward, before its update */
            step_loss[graphs][step - 1] = loss;
            const double want = cJSON_GetArrayItem(losses, step - 1)->valuedouble;
            const double err = fabs(loss - want) / fabs(want);
            if (err > worst) worst = err;
        }
        char what[160];
        if (graphs) {
            snprintf(what, sizeof what, "%s grads %s: one-graph step captured once, replayed 5 times", name,
                     lj_dtype_name(ops->grad_dtype));
            const int ok = first_graph != NULL && same_graph && m.opt.graphs;
            check(ok, ok ? 0.0 : 1.0, 0.0, what);
        }
        snprintf(what, sizeof what, "%s grads %s %s: 5 AdamW steps, worst loss relative error", name,
                 lj_dtype_name(ops->grad_dtype), graphs ? "one-graph" : "eager");
        check(worst <= 2e-2, worst, 2e-2, what);
        free(seg);
        lj_plan_release(&plan, ops);
        lj_plan_free(&plan);
        lj_model_free(&m);
    }
    /* the same steps, replayed or eager: step 1 runs the same kernels on the same inputs; later
     * steps may differ only by the order of atomic additions in the backward */
    double worst_pair = 0.0;
    for (int k = 0; k < 5; k++) {
        const double d = fabs(step_loss[1][k] - step_loss[0][k]) / fabs(step_loss[0][k]);
        if (d > worst_pair) worst_pair = d;
    }
    char what[160];
    snprintf(what, sizeof what, "%s grads %s: one-graph vs eager losses, worst relative difference", name,
             lj_dtype_name(ops->grad_dtype));
    check(worst_pair <= 1e-3, worst_pair, 1e-3, what);
    cJSON_Delete(aj);
    lj_safetensors_close(&ref);
    free(gref);
    free(w);
    free(g);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : "tests/fixtures/hf";
    lj_ops_config start; /* the environment's LJ_CUDNN_LIBRARY, LJ_CUDA_DEBUG, LJ_CUDA_ATTENTION */
    lj_ops_config_from_env(0, &start);
    const lj_ops *ops = lj_ops_cuda_open(&start);
    if (!ops) {
        fprintf(stderr, "gpu_hf_fixtures: %s\n", lj_error_message());
        return 1;
    }
    printf("gpu_hf_fixtures: CUDA backend (bf16 params/activations, bf16 or fp32 grads, fp32 master/moments) vs HF "
           "fp64\n");
    const lj_dtype grad_dtypes[2] = {LJ_DTYPE_BF16, LJ_DTYPE_F32};
    for (int i = 0; i < 2; i++) {
        lj_ops_config cfg = start;
        cfg.grad_dtype = grad_dtypes[i];
        ops = lj_ops_cuda_open(&cfg); /* the table of that gradient dtype */
        if (argc > 2) {
            for (int c = 2; c < argc; c++) run_case(ops, root, argv[c]);
        } else {
            run_case(ops, root, "untied");
            run_case(ops, root, "tied");
        }
    }
    printf("gpu_hf_fixtures: %s (%d failure%s)\n", g_failures ? "FAIL" : "PASS", g_failures, g_failures == 1 ? "" : "s");
    return g_failures ? 1 : 0;
}

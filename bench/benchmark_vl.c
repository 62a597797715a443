/* benchmark_vl.c: timed Qwen3-VL training steps on synthetic samples (see benchmark_vl.h). */
#include "bench/benchmark_vl.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "bench/benchmark.h"
#include "plan/build.h"
#include "plan/plan.h"
#include "plan/planner_vl.h"
#include "plan/planner.h"
#include "train/vl_train.h"

lj_status lj_vl_bench_shape_of(const lj_vl_config *cfg, int img_h, int img_w, int text_tokens, lj_vl_bench_shape *s) {
    memset(s, 0, sizeof *s);
    lj_vision_preproc pre;
    lj_vision_preproc_qwen3vl(&pre);
    pre.patch_size = cfg->vision.patch_size;
    pre.temporal_patch_size = cfg->vision.temporal_patch_size;
    pre.merge_size = cfg->vision.spatial_merge_size;
    char name[64];
    snprintf(name, sizeof name, "--img-h %d --img-w %d", img_h, img_w);
    if (lj_vision_grid(&pre, img_h, img_w, name, &s->grid) != LJ_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", lj_error_message());
        return lj_fail(LJ_ERR_ARG, "%s: expected an image size the processor takes (sides within 200:1)", why);
    }
    s->patches = (int)lj_grid_patches(s->grid);
    s->image_tokens = (int)lj_grid_tokens(s->grid, pre.merge_size);
    const int64_t T = (int64_t)s->image_tokens + 2 + text_tokens;
    if ((int64_t)s->image_tokens + 3 > cfg->text.max_position_embeddings)
        return lj_fail(LJ_ERR_ARG,
                       "--img-h %d --img-w %d: the image alone is %d tokens (with its start and end and one text "
                       "token %lld), above max_position_embeddings %d of %s: give a smaller image size",
                       img_h, img_w, s->image_tokens, (long long)s->image_tokens + 3,
                       cfg->text.max_position_embeddings, cfg->name);
    if (text_tokens < 1 || T > cfg->text.max_position_embeddings)
        return lj_fail(LJ_ERR_ARG,
                       "--text-tokens %d: with the image's %d tokens and its start and end a sample has %lld tokens; "
                       "expected 1 to %lld text tokens (max_position_embeddings %d of %s)",
                       text_tokens, s->image_tokens, (long long)T,
                       (long long)cfg->text.max_position_embeddings - s->image_tokens - 2,
                       cfg->text.max_position_embeddings, cfg->name);
    s->seq_length = (int)T;
    return LJ_OK;
}

void lj_vl_bench_flops(const lj_vl_config *cfg, const lj_vl_bench_shape *s, double *vit, double *llm) {
    *vit = (double)s->grid.t * lj_vision_flops_per_frame(&cfg->vision, (int64_t)s->grid.h * s->grid.w);
    *llm = (double)s->seq_length * lj_config_flops_per_token(&cfg->text, s->seq_length);
}

/* Row b of the batch: <|vision_start|>, the pads, <|vision_end|>, random text; its targets. */
static void make_row(const lj_vl_config *c, const lj_vl_bench_shape *s, lj_rng *rng, int32_t *ids, int32_t *targets) {
    const int T = s->seq_length, nt = s->image_tokens;
    int special = c->vision_start_token_id; /* text ids stay below every special id */
    const int others[] = {c->vision_end_token_id, c->image_token_id, c->video_token_id, c->text.vocab_size};
    for (int i = 0; i < 4; i++)
        if (others[i] > 0 && others[i] < special) special = others[i];
    ids[0] = c->vision_start_token_id;
    for (int t = 1; t <= nt; t++) ids[t] = c->image_token_id;
    ids[nt + 1] = c->vision_end_token_id;
    for (int t = nt + 2; t < T; t++) ids[t] = (int32_t)lj_rng_below(rng, (uint64_t)special);
    for (int t = 0; t < T; t++) targets[t] = t >= nt + 1 && t + 1 < T ? ids[t + 1] : -1;
}

/* The decoder's recompute of cfg->recompute into setup->model.recompute, described in res, and the
 * tower's of cfg->vision_recompute into setup->model.vision_recompute and res. */
static lj_status choose_recompute(const lj_vl_bench_config *cfg, lj_model_setup *setup, int max_patches, int max_images,
                                  lj_vl_bench_result *res) {
    lj_planner_target t;
    char cache[LJ_PATH_MAX], why[2048];
    lj_cache_dir(cache, sizeof cache);
    if (cfg->recompute && !strcmp(cfg->recompute, "auto")) {
        LJ_TRY(lj_planner_target_init(&t, cfg->ops, cache, NULL));
        if (cfg->device_memory_bytes) {
            t.device_memory_bytes = cfg->device_memory_bytes;
            t.margin_bytes = cfg->margin_bytes;
            t.memory_source = "--device-memory";
        }
    }
    setup->model.vision_recompute = cfg->vision_recompute; /* as asked, or LJ_VL_VISION_RECOMPUTE_AUTO */
    LJ_TRY(lj_vl_recompute_of(cfg->recompute, &cfg->model, setup, max_patches, max_images, &t, res->recompute,
                              sizeof res->recompute, why, sizeof why));
    if (why[0]) lj_log_info("benchmark: recompute planner: %s", why);
    res->vision_recompute = setup->model.vision_recompute;
    return LJ_OK;
}

lj_status lj_vl_bench_run(lj_vl_bench_config *cfg, lj_vl_bench_result *res) {
    memset(res, 0, sizeof *res);
    const lj_ops *ops = cfg->ops;
    const int B = cfg->micro_batch_size;
    if (cfg->train_iters <= 0 || cfg->warmup_iters < 0 || B <= 0)
        return lj_fail(LJ_ERR_ARG, "--train-iters and --micro-batch-size must be positive, --warmup-iters >= 0");
    lj_vl_bench_shape *sh = &res->shape;
    LJ_TRY(lj_vl_bench_shape_of(&cfg->model, cfg->img_h, cfg->img_w, cfg->text_tokens, sh));
    const int T = sh->seq_length, P = lj_vision_patch_dim(&cfg->model.vision);
    lj_vl_bench_flops(&cfg->model, sh, &res->vit_flops_per_sample, &res->llm_flops_per_sample);
    res->peak_tflops = lj_bench_peak_tflops(ops, &cfg->cpu_peak_tflops, &res->peak_source);

    /* the decoder as Qwen3-VL training builds it (fused, document masking's doc_start unused
       here: one sample per row), the tower for B images of the stated size */
    lj_model_setup setup = {.ops = ops, .cfg = &cfg->model.text};
    setup.model.micro_batch_size = B;
    setup.model.seq_length = T;
    setup.model.training = 1;
    setup.model.fused = 1;
    setup.model.linear_recipe = cfg->linear_recipe; /* both towers' block linears (lj_vl_init passes it on) */
    setup.model.fp8 = cfg->linear_recipe == LJ_LINEAR_RECIPE_FP8 ? cfg->fp8 : lj_linear_fp8_defaults();
    LJ_TRY(choose_recompute(cfg, &setup, B * sh->patches, B, res));
    lj_model m;
    lj_plan plan;
    lj_vl vl;
    LJ_TRY(lj_vl_build(&vl, &m, &plan, &setup, &cfg->model, B * sh->patches, B, NULL));
    const size_t before = strcmp(ops->name, "cpu") ? lj_bench_device_used_bytes(ops) : 0;
    lj_status s = lj_vl_build_state(&vl, &m, &plan, cfg->seed);
    lj_vl_optimizer opt;
    memset(&opt, 0, sizeof opt);
    const lj_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, LJ_WD_MEGATRON, 0, 0};
    if (s == LJ_OK) s = lj_vl_optimizer_init(&opt, &vl, &ac, 0, 0, 0);
    if (s != LJ_OK) {
        lj_vl_free(&vl);
        lj_plan_release(&plan, ops);
        lj_plan_free(&plan);
        lj_model_free(&m);
        return s;
    }
    res->planned_bytes = plan.total_bytes + before;
    for (int i = 0; i < plan.count; i++) {
        const size_t b = (plan.buffers[i].bytes + LJ_PLAN_ALIGN - 1) / LJ_PLAN_ALIGN * LJ_PLAN_ALIGN;
        const int vis = lj_vl_buffer_is_vision(plan.buffers[i].name);
        if (vis) res->vision_planned_bytes += b;
        if (lj_mem_category_of(&plan.buffers[i]) == LJ_MEM_FP8) {
            res->fp8_planned_bytes += b;
            if (vis) res->vision_fp8_planned_bytes += b;
        }
    }
    res->fp8_linears = m.linear.fp8.active ? m.linear.fp8.num_linears : 0;
    res->vision_fp8_linears = vl.vis.linear.fp8.active ? vl.vis.linear.fp8.num_linears : 0;

    /* the images once (the loader's threads would have made them) for up to 4 micro-batches, used in
       turn, so that micro-batch B x 2 accumulation steps sees the samples of one micro-batch 2B; the
       text every micro-batch */
    const int A = cfg->accumulation > 1 ? cfg->accumulation : 1, img_sets = A < 4 ? A : 4;
    lj_rng rng;
    lj_rng_seed(&rng, cfg->seed);
    const size_t set_pix = (size_t)B * sh->patches * P, npix = set_pix * img_sets;
    float *pixels = lj_malloc(npix * sizeof(float));
    for (size_t i = 0; i < npix; i++) pixels[i] = 2.0f * lj_rng_uniform(&rng) - 1.0f;
    int32_t *grid = lj_malloc((size_t)B * 3 * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        grid[3 * b] = sh->grid.t;
        grid[3 * b + 1] = sh->grid.h;
        grid[3 * b + 2] = sh->grid.w;
    }
    int32_t *ids = lj_malloc((size_t)B * T * sizeof(int32_t)), *targets = lj_malloc((size_t)B * T * sizeof(int32_t));
    const int steps = cfg->warmup_iters + cfg->train_iters;
    lj_bench_steps st;
    lj_bench_steps_init(&st, ops, cfg->warmup_iters, cfg->train_iters, cfg->progress);
    for (int step = 1; step <= steps && s == LJ_OK; step++) {
        const double t0 = lj_time_sec();
        double loss = 0.0;
        lj_vl_zero_grads(&vl);
        for (int k = 0; k < A && s == LJ_OK; k++) { /* gradients summed over the micro-batches (model/vl.h) */
            for (int b = 0; b < B; b++) make_row(&cfg->model, sh, &rng, ids + (size_t)b * T, targets + (size_t)b * T);
            s = lj_vl_set_batch(&vl, ids, targets, pixels + set_pix * (size_t)(k % img_sets), grid, B);
            if (s != LJ_OK) break;
            lj_vl_forward_backward(&vl, 1, 1.0f / ((float)m.num_targets * (float)A));
            loss += lj_model_mean_loss(&m) / A;
        }
        if (s != LJ_OK) break;
        lj_vl_optimizer_step(&opt, &vl, 1e-4f, step);
        ops->synchronize();
        const double dt = lj_time_sec() - t0;
        lj_bench_steps_record(&st, step, dt, loss, (double)B * A / dt, "samples");
    }
    lj_bench_steps_finish(&st, &res->step_ms_median, &res->step_ms_p90);
    res->loss_first = st.loss_first;
    res->loss_last = st.loss_last;
    if (st.used_bytes > res->measured_bytes) res->measured_bytes = st.used_bytes;
    if (s == LJ_OK) {
        res->samples_per_s = (double)B * A * cfg->train_iters / st.timed_sec;
        res->tokens_per_s = res->samples_per_s * T;
        res->tflops = res->samples_per_s * (res->vit_flops_per_sample + res->llm_flops_per_sample) / 1e12;
        res->mfu = res->peak_tflops > 0 ? res->tflops / res->peak_tflops : 0.0;
    }
    free(ids);
    free(targets);
    free(grid);
    free(pixels);
    lj_vl_optimizer_free(&opt);
    lj_vl_free(&vl);
    lj_plan_release(&plan, ops);
    lj_plan_free(&plan);
    lj_model_free(&m);
    return s;
}

void lj_vl_bench_print(const lj_vl_bench_config *cfg, const lj_vl_bench_result *r, FILE *f) {
    char b1[32], b2[32], b3[32];
    const lj_vl_bench_shape *s = &r->shape;
    char gbs[96] = "";
    if (cfg->accumulation > 1)
        snprintf(gbs, sizeof gbs, ", global batch %d (%d accumulation steps)", cfg->micro_batch_size * cfg->accumulation,
                 cfg->accumulation);
    fprintf(f, "ljperf benchmark: %s on %s, micro-batch %d%s; samples of one %dx%d image (%dx%d after smart_resize: %d "
               "patches, %d tokens) + %d text tokens = %d tokens, %d timed step%s after %d warm-up\n",
            cfg->model.name, cfg->ops->name, cfg->micro_batch_size, gbs, cfg->img_h, cfg->img_w,
            s->grid.h * cfg->model.vision.patch_size, s->grid.w * cfg->model.vision.patch_size, s->patches,
            s->image_tokens, cfg->text_tokens, s->seq_length, cfg->train_iters, cfg->train_iters == 1 ? "" : "s",
            cfg->warmup_iters);
    fprintf(f, "%-28s %s\n", "metric", "value");
    fprintf(f, "%-28s %.0f\n", "tokens/s", r->tokens_per_s);
    fprintf(f, "%-28s %.3f\n", "samples/s", r->samples_per_s);
    fprintf(f, "%-28s %.3f\n", "TFLOP/s", r->tflops);
    fprintf(f, "%-28s %.1f%%\n", "MFU", 100.0 * r->mfu);
    fprintf(f, "%-28s %.1f\n", "step time median (ms)", r->step_ms_median);
    fprintf(f, "%-28s %.1f\n", "step time p90 (ms)", r->step_ms_p90);
    fprintf(f, "%-28s %s\n", "peak memory measured", lj_format_bytes(r->measured_bytes, b1, sizeof b1));
    fprintf(f, "%-28s %s (vision tower %s)\n", "peak memory planned", lj_format_bytes(r->planned_bytes, b2, sizeof b2),
            lj_format_bytes(r->vision_planned_bytes, b3, sizeof b3));
    fprintf(f, "%-28s %.4f -> %.4f\n", "loss (first -> last step)", r->loss_first, r->loss_last);
    if (r->fp8_linears || r->vision_fp8_linears) {
        char what[200];
        lj_linear_fp8_describe(&cfg->fp8, what, sizeof what);
        fprintf(f, "%-28s %s: %d FP8 linears in the decoder's blocks, %d in the vision tower's\n", "precision", what,
                r->fp8_linears, r->vision_fp8_linears);
        fprintf(f, "%-28s %s (vision tower %s)\n", "FP8 casts and scales", lj_format_bytes(r->fp8_planned_bytes, b1, sizeof b1),
                lj_format_bytes(r->vision_fp8_planned_bytes, b2, sizeof b2));
    } else {
        fprintf(f, "%-28s %s\n", "precision", lj_dtype_name(cfg->ops->act_dtype));
    }
    fprintf(f, "%-28s %s\n", "decoder recompute", r->recompute);
    fprintf(f, "%-28s %s (%d blocks)\n", "vision recompute", lj_vl_vision_recompute_name(r->vision_recompute),
            cfg->model.vision.depth);
    fprintf(f, "MFU convention: FLOPs/sample = ViT %.4g + decoder %.4g (docs/qwen3-vl.md: the ViT's 6*N*patches + "
               "12*depth*V*patches^2, the decoder's T*(6N + 12*L*d*T)); peak: %s\n",
            r->vit_flops_per_sample, r->llm_flops_per_sample, r->peak_source);
    fprintf(f, "tokens/s counts every decoder token (image pads included); a step includes the batch's upload "
               "(the patches cast to the activation dtype on the host)\n");
    if (strcmp(cfg->ops->name, "cpu") == 0)
        fprintf(f, "memory measured on the CPU is the process's peak resident set (VmHWM)\n");
}

lj_status lj_vl_bench_write_json(const lj_vl_bench_config *cfg, const lj_vl_bench_result *r, const char *path) {
    const lj_vl_bench_shape *s = &r->shape;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "engine", "ljperf");
    cJSON_AddStringToObject(o, "model", cfg->model.name);
    cJSON_AddStringToObject(o, "device", cfg->ops->name);
    cJSON_AddNumberToObject(o, "micro_batch_size", cfg->micro_batch_size);
    const int accumulation = cfg->accumulation > 1 ? cfg->accumulation : 1;
    cJSON_AddNumberToObject(o, "global_batch_size", cfg->micro_batch_size * accumulation);
    cJSON_AddNumberToObject(o, "accumulation_steps", accumulation);
    cJSON_AddNumberToObject(o, "img_h", cfg->img_h);
    cJSON_AddNumberToObject(o, "img_w", cfg->img_w);
    cJSON_AddItemToObject(o, "image_grid_thw", cJSON_CreateIntArray((const int[]){s->grid.t, s->grid.h, s->grid.w}, 3));
    cJSON_AddNumberToObject(o, "image_patches", s->patches);
    cJSON_AddNumberToObject(o, "image_tokens", s->image_tokens);
    cJSON_AddNumberToObject(o, "text_tokens", cfg->text_tokens);
    cJSON_AddNumberToObject(o, "seq_length", s->seq_length);
    cJSON_AddNumberToObject(o, "world_size", 1);
    cJSON_AddNumberToObject(o, "tokens_per_s", r->tokens_per_s);
    cJSON_AddNumberToObject(o, "tokens_per_s_per_gpu", r->tokens_per_s);
    cJSON_AddNumberToObject(o, "samples_per_s", r->samples_per_s);
    cJSON_AddNumberToObject(o, "tflops", r->tflops);
    cJSON_AddNumberToObject(o, "mfu", r->mfu);
    cJSON_AddNumberToObject(o, "peak_tflops", r->peak_tflops);
    cJSON_AddNumberToObject(o, "vit_flops_per_sample", r->vit_flops_per_sample);
    cJSON_AddNumberToObject(o, "llm_flops_per_sample", r->llm_flops_per_sample);
    cJSON_AddNumberToObject(o, "step_ms_median", r->step_ms_median);
    cJSON_AddNumberToObject(o, "step_ms_p90", r->step_ms_p90);
    cJSON_AddNumberToObject(o, "peak_mem_gib", (double)r->measured_bytes / (1024.0 * 1024.0 * 1024.0));
    cJSON_AddNumberToObject(o, "planned_mem_gib", (double)r->planned_bytes / (1024.0 * 1024.0 * 1024.0));
    cJSON_AddNumberToObject(o, "vision_planned_mem_gib", (double)r->vision_planned_bytes / (1024.0 * 1024.0 * 1024.0));
    if (r->fp8_linears || r->vision_fp8_linears) { /* as the text benchmark's JSON says it */
        char what[200];
        lj_linear_fp8_describe(&cfg->fp8, what, sizeof what);
        cJSON_AddStringToObject(o, "precision", what);
    }
    cJSON_AddNumberToObject(o, "fp8_linears", r->fp8_linears);
    cJSON_AddNumberToObject(o, "vision_fp8_linears", r->vision_fp8_linears);
    cJSON_AddNumberToObject(o, "fp8_planned_bytes", (double)r->fp8_planned_bytes);
    cJSON_AddNumberToObject(o, "vision_fp8_planned_bytes", (double)r->vision_fp8_planned_bytes);
    cJSON_AddNumberToObject(o, "loss_first", r->loss_first);
    cJSON_AddNumberToObject(o, "loss_last", r->loss_last);
    cJSON_AddStringToObject(o, "recompute", r->recompute);
    cJSON_AddStringToObject(o, "vision_recompute", lj_vl_vision_recompute_name(r->vision_recompute));
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    lj_status st = LJ_OK;
    if (strcmp(path, "-") == 0) printf("%s\n", text); /* --json -: standard output */
    else st = lj_file_write_atomic(path, text, strlen(text));
    free(text);
    if (st != LJ_OK) lj_error_prefix("--json");
    return st;
}

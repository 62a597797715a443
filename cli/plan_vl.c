/* plan_vl.c: `ljperf plan --model qwen3-vl-*`: the static memory plan of a Qwen3-VL training run,
 * the decoder and the vision tower in one plan (plan/build.h lj_vl_build), broken down by
 * category with the tower's share: its weights, master weights, gradients and AdamW moments
 * (parameters x bytes per parameter) and its activations for the stated image size. Two forms:
 * the benchmark's samples (B rows of one --img-h x --img-w image and --text-tokens text tokens,
 * the tower planned for B images), or with --seq-length a training run's packed rows of T tokens
 * (the tower planned for merge^2 * B * T patches, as `ljperf train` plans it). Runs without a GPU
 * (--device cuda describes the CUDA backend's buffers). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/benchmark_vl.h"
#include "cli/cli.h"
#include "plan/build.h"
#include "plan/planner.h"
#include "plan/planner_vl.h"
#include "train/ops_config.h"

static void usage(FILE *f) {
    fprintf(f, "usage: ljperf plan --model qwen3-vl-2b|qwen3-vl-4b|...|CONFIG [flags]\n"
               "The memory plan of a Qwen3-VL training run: the decoder and the vision tower, by category, with the\n"
               "tower's share. Exit status 1 when it does not fit the device.\n"
               "Flags:\n");
}

/* The target's table: cuda (the GPU's, else its description without a device), cpu, or auto. */
static lj_status open_ops(const char *device, const char *grad_dtype, const lj_ops **ops) {
    lj_ops_config oc;
    lj_ops_config_from_env(0, &oc);
    *ops = NULL;
    if (!strcmp(device, "cpu")) *ops = lj_ops_cpu_open(&oc);
    else if (!strcmp(device, "auto")) {
        if (!(*ops = lj_ops_cuda_open(&oc))) {
            lj_cli_note_no_gpu("planning a CPU run");
            *ops = lj_ops_cpu_open(&oc);
        }
    } else if (!strcmp(device, "cuda")) {
        if (!(*ops = lj_ops_cuda_open(&oc))) *ops = lj_ops_cuda_describe(&oc);
        if (!*ops)
            return lj_fail(LJ_ERR_UNSUPPORTED, "--device cuda: this ljperf was built without CUDA, so it cannot "
                                               "describe the GPU backend's buffers; plan a CPU run with --device cpu");
    } else {
        return lj_fail(LJ_ERR_ARG, "--device: '%s' is not one of cuda, cpu, auto", device);
    }
    return lj_cli_grad_dtype("--grad-dtype", grad_dtype, ops);
}

int lj_cli_plan_vl(int argc, char **argv) {
    const char *model = NULL, *device = "cuda", *grad_dtype = NULL, *json = NULL, *recompute = NULL, *device_memory = NULL,
               *margin = NULL;
    int mb = 1, seq = 0, seq_given = 0, buffers = 0;
    int vision = LJ_VL_VISION_RECOMPUTE_AUTO; /* --recompute-vision not given: none, unless auto needs it */
    lj_cli_vl_sample sample;
    lj_cli_fp8 fp8;
    lj_cli_fp8_init(&fp8);
    const lj_flag own[] = {
        {.name = "--model", .kind = LJ_FLAG_STR, .dest = &model, .help = "NAME|config.json  a Qwen3-VL preset or HF config"},
        {.name = "--device", .kind = LJ_FLAG_STR, .dest = &device, .help = "cuda|cpu|auto  (cuda, planned without a GPU)"},
        {.name = "--grad-dtype", .kind = LJ_FLAG_STR, .dest = &grad_dtype, .help = "bf16|fp32  CUDA gradient dtype (bf16)"},
        {.name = "--micro-batch-size", .kind = LJ_FLAG_INT, .dest = &mb, .min = 1, .max = LJ_VL_MAX_MICRO_BATCH, .help = "B  rows per step (1)"},
        {.name = "--seq-length", .kind = LJ_FLAG_INT, .dest = &seq, .given = &seq_given, .min = 1,
         .help = "T  plan `ljperf train`'s packed rows of T tokens instead of the image + text samples"},
        {.name = "--buffers", .kind = LJ_FLAG_SWITCH, .dest = &buffers, .ival = 1, .help = "also list every buffer"},
        {.name = "--json", .kind = LJ_FLAG_STR, .dest = &json, .help = "FILE  the breakdown as JSON (- : standard output)"},
        LJ_CLI_DEVICE_MEMORY_ROW(&device_memory),
        LJ_CLI_MARGIN_ROW(&margin),
        {.name = "--recompute", .kind = LJ_FLAG_STR, .dest = &recompute,
         .help = "auto|none|selective|full  the decoder's recompute (auto: the planner's choice for the device, "
                 "which also recomputes the vision tower when nothing fits without it)"},
        LJ_CLI_RECOMPUTE_VISION_ROW(&vision),
    };
    /* these, the FP8 rows (cli/fp8.c: both towers' block linears), then the sample's */
    const int parsed = lj_cli_vl_parse("plan", own, (int)(sizeof own / sizeof own[0]), &fp8, &sample, argc, argv, usage);
    if (parsed) return parsed < 0;
    lj_vl_config cfg;
    if (!model) {
        lj_fail(LJ_ERR_ARG, "--model is required (e.g. --model qwen3-vl-2b)");
        return lj_cli_error("plan");
    }
    lj_status s = lj_vl_config_resolve(model, &cfg);
    if (s != LJ_OK) lj_error_prefix("--model");
    const lj_ops *ops = NULL;
    if (s == LJ_OK) s = open_ops(device, grad_dtype, &ops);
    if (s == LJ_OK) s = lj_cli_vl_sample_resolve(&sample);
    if (s == LJ_OK && seq_given && (sample.h_given || sample.w_given || sample.size_given))
        s = lj_fail(LJ_ERR_ARG, "--seq-length %d plans packed training rows, whose images are not known: give it "
                                "without --img-h, --img-w and --image-size", seq);
    if (s == LJ_OK && seq_given && seq > cfg.text.max_position_embeddings)
        s = lj_fail(LJ_ERR_ARG, "--seq-length %d is above the model's max_position_embeddings: expected %d or less",
                    seq, cfg.text.max_position_embeddings);
    lj_vl_bench_shape shape;
    memset(&shape, 0, sizeof shape);
    int T = seq, max_patches = 0, max_images = 0;
    if (s == LJ_OK && !seq_given) {
        s = lj_vl_bench_shape_of(&cfg, sample.img_h, sample.img_w, sample.text_tokens, &shape);
        T = shape.seq_length;
        max_patches = mb * shape.patches;
        max_images = mb;
    } else if (s == LJ_OK) {
        lj_vl_capacity(&cfg, mb, seq, &max_patches, &max_images);
    }
    lj_linear_recipe_kind recipe = LJ_LINEAR_RECIPE_DEFAULT;
    lj_linear_fp8_options fo = lj_linear_fp8_defaults();
    if (s == LJ_OK) s = lj_cli_fp8_resolve_vl(&fp8, ops, &cfg, mb, T, &recipe, &fo);
    lj_planner_target t;
    char cache[LJ_PATH_MAX];
    lj_cache_dir(cache, sizeof cache);
    if (s == LJ_OK) s = lj_planner_target_init(&t, ops, cache, NULL); /* the memory figures and the rates */
    if (s == LJ_OK) s = lj_cli_memory_budget(&t, device_memory, margin);
    if (s != LJ_OK) return lj_cli_error("plan");

    lj_model_setup setup = {.ops = ops, .cfg = &cfg.text};
    setup.model.micro_batch_size = mb;
    setup.model.seq_length = T;
    setup.model.training = 1;
    setup.model.fused = 1;
    setup.model.doc_mask.reset_attention_mask = seq_given; /* train's packed rows keep their samples apart */
    setup.model.linear_recipe = recipe; /* both towers' block linears (lj_vl_init passes it on) */
    setup.model.fp8 = fo;
    char policy[96], why[2048];
    if (!recompute) { /* as the text plan: auto, or none when CHECKPOINT_OPTIMIZATION is off */
        int on = 0;
        if (lj_planner_env_enabled(&on) != LJ_OK) return lj_cli_error("plan");
        recompute = getenv("CHECKPOINT_OPTIMIZATION") && !on ? "none" : "auto";
    }
    setup.model.vision_recompute = vision; /* as asked, or LJ_VL_VISION_RECOMPUTE_AUTO */
    s = lj_vl_recompute_of(recompute, &cfg, &setup, max_patches, max_images, &t, policy, sizeof policy, why, sizeof why);
    if (s != LJ_OK && s != LJ_ERR_OOM) return lj_cli_error("plan");
    if (s == LJ_ERR_OOM) { /* planned with full recompute (and the tower's, unless refused): the table shows what
                              does not fit */
        memset(setup.model.recompute, LJ_RECOMPUTE_FULL, (size_t)cfg.text.num_hidden_layers);
        setup.model.vision_recompute = vision != 0;
        snprintf(policy, sizeof policy, "full (%d layers): nothing fits", cfg.text.num_hidden_layers);
        snprintf(why, sizeof why, "%s", lj_error_message());
    }
    lj_model m;
    lj_plan plan;
    lj_vl vl;
    if (lj_vl_build(&vl, &m, &plan, &setup, &cfg, max_patches, max_images, NULL) != LJ_OK) return lj_cli_error("plan");
    lj_mem_breakdown bd;
    lj_mem_breakdown_of(&plan, m.opt.recompute, cfg.text.num_hidden_layers, t.library_workspace_bytes,
                        t.context_bytes, 0, &bd);
    const size_t usable = lj_planner_usable_bytes(&t);
    const int fits = bd.peak_bytes <= usable;
    const int64_t nv = vl.vis.layout.total, nt = m.layout.total;
    const size_t per_param = lj_dtype_size(ops->param_dtype) + (ops->param_dtype == LJ_DTYPE_F32 ? 0 : 4) +
                             lj_dtype_size(ops->grad_dtype) + 8;
    size_t vision_total = 0;
    for (int k = 0; k < LJ_MEM_COUNT; k++) vision_total += bd.vision_bytes[k];
    char b1[32], b2[32], b3[32];
    if (!json || strcmp(json, "-") != 0) {
        printf("ljperf plan: %s (%.3f B parameters: decoder %.3f B, vision tower %.1f M), device %s (params %s, "
               "activations %s, gradients %s)\n",
               cfg.name, (double)(nt + nv) / 1e9, (double)nt / 1e9, (double)nv / 1e6, ops->name,
               lj_dtype_name(ops->param_dtype), lj_dtype_name(ops->act_dtype), lj_dtype_name(ops->grad_dtype));
        if (seq_given)
            printf("train's packed rows: micro-batch %d x %d tokens; the tower planned for %d patches (every token an "
                   "image token) and %d images\n", mb, T, max_patches, max_images);
        else
            printf("samples: micro-batch %d x (one %dx%d image: grid %dx%d, %d patches, %d tokens; + %d text tokens) "
                   "= %d tokens per row\n", mb, sample.img_h, sample.img_w, shape.grid.h, shape.grid.w,
                   shape.patches, shape.image_tokens, sample.text_tokens, T);
        if (m.linear.fp8.active || vl.vis.linear.fp8.active) {
            char what[200];
            lj_linear_fp8_describe(&fo, what, sizeof what);
            printf("precision: %s; %d FP8 linears in the decoder's blocks, %d in the vision tower's (patch embedding, "
                   "mergers and lm_head in %s)\n", what, m.linear.fp8.active ? m.linear.fp8.num_linears : 0,
                   vl.vis.linear.fp8.active ? vl.vis.linear.fp8.num_linears : 0, lj_dtype_name(ops->act_dtype));
        }
        printf("device memory %s (%s), margin %s -> usable %s\n\n", lj_format_bytes(t.device_memory_bytes, b1, sizeof b1),
               t.memory_source, lj_format_bytes(t.margin_bytes, b2, sizeof b2), lj_format_bytes(usable, b3, sizeof b3));
        printf("  %-28s %12s %16s\n", "category", "bytes", "of it the tower");
        for (int k = 0; k < LJ_MEM_COUNT; k++) {
            if ((k == LJ_MEM_OTHER || k == LJ_MEM_COMM || k == LJ_MEM_FP8 || k == LJ_MEM_RECOMPUTE) && bd.bytes[k] == 0)
                continue;
            printf("  %-28s %12s %16s\n", lj_mem_category_name((lj_mem_category)k),
                   lj_format_bytes(bd.bytes[k], b1, sizeof b1), lj_format_bytes(bd.vision_bytes[k], b2, sizeof b2));
        }
        printf("  %-28s %12s %16s\n", "peak", lj_format_bytes(bd.peak_bytes, b1, sizeof b1),
               lj_format_bytes(vision_total, b2, sizeof b2));
        printf("vision tower: %" PRId64 " parameters x %zu bytes (%s params%s, %s gradients, f32 AdamW moments) = %s; "
               "activations %s for %d patches\n",
               nv, per_param, lj_dtype_name(ops->param_dtype), ops->param_dtype == LJ_DTYPE_F32 ? "" : ", f32 master",
               lj_dtype_name(ops->grad_dtype), lj_format_bytes((size_t)nv * per_param, b1, sizeof b1),
               lj_format_bytes(bd.vision_bytes[LJ_MEM_ACTIVATIONS], b2, sizeof b2), max_patches);
        char b4[32], b5[32];
        printf("%s: peak %s %s usable %s (plan %s + library workspace %s + context %s)\n", fits ? "fits" : "does not fit",
               lj_format_bytes(bd.peak_bytes, b1, sizeof b1), fits ? "<=" : ">", lj_format_bytes(usable, b2, sizeof b2),
               lj_format_bytes(bd.plan_bytes, b3, sizeof b3), lj_format_bytes(t.library_workspace_bytes, b4, sizeof b4),
               lj_format_bytes(t.context_bytes, b5, sizeof b5));
        printf("decoder recompute: %s%s%s\n", policy, why[0] ? "; " : "", why);
        printf("vision recompute: %s (%d blocks%s)\n", lj_vl_vision_recompute_name(setup.model.vision_recompute),
               cfg.vision.depth,
               setup.model.vision_recompute ? ": each keeps only its input, its forward replayed before its backward"
                                            : ": every block's activations kept");
        if (buffers) {
            printf("\nbuffers (%d):\n", plan.count);
            for (int i = 0; i < plan.count; i++)
                printf("  %-32s %-16s %12s\n", plan.buffers[i].name, lj_arena_name(plan.buffers[i].arena),
                       lj_format_bytes(plan.buffers[i].bytes, b1, sizeof b1));
        }
    }
    int rc = 0;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", cfg.name);
        cJSON_AddStringToObject(o, "device", ops->name);
        cJSON_AddNumberToObject(o, "micro_batch_size", mb);
        cJSON_AddNumberToObject(o, "seq_length", T);
        cJSON_AddNumberToObject(o, "max_patches", max_patches);
        cJSON_AddNumberToObject(o, "text_parameters", (double)nt);
        cJSON_AddNumberToObject(o, "vision_parameters", (double)nv);
        cJSON_AddNumberToObject(o, "vision_bytes_per_parameter", (double)per_param);
        cJSON_AddNumberToObject(o, "fp8_linears", m.linear.fp8.active ? m.linear.fp8.num_linears : 0);
        cJSON_AddNumberToObject(o, "vision_fp8_linears", vl.vis.linear.fp8.active ? vl.vis.linear.fp8.num_linears : 0);
        cJSON *br = cJSON_AddArrayToObject(o, "breakdown");
        for (int k = 0; k < LJ_MEM_COUNT; k++) {
            cJSON *row = cJSON_CreateObject();
            cJSON_AddStringToObject(row, "category", lj_mem_category_name((lj_mem_category)k));
            cJSON_AddNumberToObject(row, "bytes", (double)bd.bytes[k]);
            cJSON_AddNumberToObject(row, "vision_bytes", (double)bd.vision_bytes[k]);
            cJSON_AddItemToArray(br, row);
        }
        cJSON_AddNumberToObject(o, "plan_bytes", (double)bd.plan_bytes);
        cJSON_AddNumberToObject(o, "buffers", plan.count);
        cJSON_AddNumberToObject(o, "peak_bytes", (double)bd.peak_bytes);
        cJSON_AddNumberToObject(o, "vision_bytes", (double)vision_total);
        cJSON_AddNumberToObject(o, "usable_bytes", (double)usable);
        cJSON_AddBoolToObject(o, "fits", fits);
        cJSON_AddStringToObject(o, "recompute", policy);
        cJSON_AddStringToObject(o, "vision_recompute", lj_vl_vision_recompute_name(setup.model.vision_recompute));
        char *text = cJSON_Print(o);
        cJSON_Delete(o);
        if (!strcmp(json, "-")) printf("%s\n", text);
        else if (lj_file_write_atomic(json, text, strlen(text)) != LJ_OK) {
            lj_error_prefix("--json");
            rc = lj_cli_error("plan");
        }
        free(text);
    }
    if (!fits && rc == 0) {
        fprintf(stderr, "ljperf plan: %s needs %s, more than the %s usable: %s\n", cfg.name,
                lj_format_bytes(bd.peak_bytes, b1, sizeof b1), lj_format_bytes(usable, b2, sizeof b2),
                strcmp(recompute, "auto") ? "try --recompute auto (the planner), a smaller --micro-batch-size or image"
                : setup.model.vision_recompute ? "use a smaller --micro-batch-size or image"
                                               : "try --recompute-vision full, a smaller --micro-batch-size or image");
        rc = 1;
    }
    lj_plan_free(&plan);
    lj_vl_free(&vl);
    lj_model_free(&m);
    return rc;
}

/* benchmark_vl.c: `ljperf benchmark --model qwen3-vl-*`: Qwen3-VL training steps on synthetic
 * samples of one image and text tokens (bench/benchmark_vl.h): tokens/s, samples/s, MFU with the
 * ViT's FLOPs, step times and peak memory. */
#include <stdio.h>
#include <string.h>

#include "bench/benchmark_vl.h"
#include "cli/cli.h"
#include "plan/planner_vl.h"

static void usage(FILE *f) {
    fprintf(f, "usage: ljperf benchmark --model qwen3-vl-2b|qwen3-vl-4b|...|CONFIG [flags]\n"
               "Times Qwen3-VL training steps (the vision tower and the decoder, AdamW over both) on synthetic\n"
               "samples: one image of --img-h x --img-w pixels and --text-tokens text tokens each.\n"
               "Flags:\n");
}

int lj_cli_benchmark_vl(int argc, char **argv) {
    lj_vl_bench_config cfg;
    memset(&cfg, 0, sizeof cfg);
    const char *model = NULL, *device = "auto", *grad_dtype = NULL, *json = NULL, *device_memory = NULL, *margin = NULL;
    int iters = 0, warmup = 0, iters_given = 0, warmup_given = 0, global_batch = 0;
    cfg.micro_batch_size = 1;
    cfg.seed = 1234;
    cfg.progress = 1;
    cfg.vision_recompute = LJ_VL_VISION_RECOMPUTE_AUTO; /* not given: none, unless --recompute auto needs it */
    lj_cli_vl_sample sample;
    lj_cli_fp8 fp8;
    lj_cli_fp8_init(&fp8);
    const lj_flag own[] = {
        {.name = "--model", .kind = LJ_FLAG_STR, .dest = &model, .help = "NAME|config.json  a Qwen3-VL preset or HF config"},
        {.name = "--device", .kind = LJ_FLAG_STR, .dest = &device, .help = "auto|cpu|cuda  (auto)"},
        {.name = "--grad-dtype", .kind = LJ_FLAG_STR, .dest = &grad_dtype, .help = "bf16|fp32  CUDA gradient dtype (bf16)"},
        {.name = "--micro-batch-size", .kind = LJ_FLAG_INT, .dest = &cfg.micro_batch_size, .min = 1, .max = LJ_VL_MAX_MICRO_BATCH,
         .help = "B  samples per micro-batch (1)"},
        {.name = "--global-batch-size", .kind = LJ_FLAG_INT, .dest = &global_batch, .min = 1,
         .help = "N  samples per optimizer step: N / B micro-batches, gradients accumulated (B)"},
        {.name = "--train-iters", .kind = LJ_FLAG_INT, .dest = &iters, .given = &iters_given, .min = 1,
         .help = "N  timed steps (20 on a GPU, 3 on the CPU)"},
        {.name = "--warmup-iters", .kind = LJ_FLAG_INT, .dest = &warmup, .given = &warmup_given,
         .help = "N  untimed steps first (5 on a GPU, 1 on the CPU)"},
        {.name = "--seed", .kind = LJ_FLAG_U64, .dest = &cfg.seed, .help = "S  weights and data (1234)"},
        {.name = "--json", .kind = LJ_FLAG_STR, .dest = &json, .help = "FILE  the result as JSON (-: standard output)"},
        {.name = "--no-progress", .kind = LJ_FLAG_SWITCH, .dest = &cfg.progress, .help = "no progress line on stderr"},
        LJ_CLI_DEVICE_MEMORY_ROW(&device_memory),
        LJ_CLI_MARGIN_ROW(&margin),
        {.name = "--recompute", .kind = LJ_FLAG_STR, .dest = &cfg.recompute,
         .help = "auto|none|selective|full  the decoder's recompute (none; auto: the planner, for the device's memory, "
                 "which also recomputes the vision tower when nothing fits without it)"},
        LJ_CLI_RECOMPUTE_VISION_ROW(&cfg.vision_recompute),
    };
    /* these, the FP8 rows (cli/fp8.c: both towers' block linears), then the sample's */
    const int parsed = lj_cli_vl_parse("benchmark", own, (int)(sizeof own / sizeof own[0]), &fp8, &sample, argc, argv, usage);
    if (parsed) return parsed < 0;
    if (!model) {
        lj_fail(LJ_ERR_ARG, "--model is required (e.g. --model qwen3-vl-2b)");
        return lj_cli_error("benchmark");
    }
    lj_status s = lj_vl_config_resolve(model, &cfg.model); /* validated as it is read */
    if (s != LJ_OK) lj_error_prefix("--model");
    if (s == LJ_OK) s = lj_cli_output_path("--json", json);
    if (s == LJ_OK) s = lj_cli_device(device, 0, &cfg.ops);
    if (s == LJ_OK) s = lj_cli_grad_dtype("--grad-dtype", grad_dtype, &cfg.ops);
    if (s == LJ_OK) s = lj_cli_vl_sample_resolve(&sample);
    if (s == LJ_OK && (device_memory || margin)) { /* the budget --recompute auto plans for */
        if (!cfg.recompute || strcmp(cfg.recompute, "auto"))
            s = lj_fail(LJ_ERR_ARG, "%s %s: sets the memory budget of --recompute auto: add --recompute auto",
                        device_memory ? "--device-memory" : "--margin", device_memory ? device_memory : margin);
        lj_planner_target t;
        char cache[LJ_PATH_MAX];
        lj_cache_dir(cache, sizeof cache);
        if (s == LJ_OK) s = lj_planner_target_init(&t, cfg.ops, cache, NULL);
        if (s == LJ_OK) s = lj_cli_memory_budget(&t, device_memory, margin);
        cfg.device_memory_bytes = t.device_memory_bytes;
        cfg.margin_bytes = t.margin_bytes;
    }
    lj_vl_bench_shape shape;
    if (s == LJ_OK && lj_cli_fp8_given(&fp8)) s = lj_vl_bench_shape_of(&cfg.model, sample.img_h, sample.img_w,
                                                                         sample.text_tokens, &shape);
    if (s == LJ_OK && lj_cli_fp8_given(&fp8))
        s = lj_cli_fp8_resolve_vl(&fp8, cfg.ops, &cfg.model, cfg.micro_batch_size, shape.seq_length, &cfg.linear_recipe,
                                  &cfg.fp8);
    if (s == LJ_OK && global_batch > 0) { /* Megatron-LM's rule on one rank: global = micro-batch x accumulation */
        if (global_batch % cfg.micro_batch_size != 0)
            s = lj_fail(LJ_ERR_ARG, "--global-batch-size %d is not a multiple of --micro-batch-size %d: give a multiple "
                                    "of %d", global_batch, cfg.micro_batch_size, cfg.micro_batch_size);
        cfg.accumulation = global_batch / cfg.micro_batch_size;
    }
    if (s != LJ_OK) return lj_cli_error("benchmark");
    const int cpu = strcmp(cfg.ops->name, "cpu") == 0;
    cfg.img_h = sample.img_h;
    cfg.img_w = sample.img_w;
    cfg.text_tokens = sample.text_tokens;
    cfg.train_iters = iters_given ? iters : (cpu ? 3 : 20);
    cfg.warmup_iters = warmup_given ? warmup : (cpu ? 1 : 5);
    lj_vl_bench_result r;
    if (lj_vl_bench_run(&cfg, &r) != LJ_OK) return lj_cli_error("benchmark");
    lj_vl_bench_print(&cfg, &r, json && strcmp(json, "-") == 0 ? stderr : stdout); /* --json -: JSON alone on stdout */
    if (json && lj_vl_bench_write_json(&cfg, &r, json) != LJ_OK) return lj_cli_error("benchmark");
    return 0;
}

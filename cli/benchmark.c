/* benchmark.c: `ljperf benchmark`: tokens/s, TFLOP/s, MFU, step times and peak memory for a
 * model, and with --ablation what each optimisation earns. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "bench/benchmark.h"
#include "cli/megatron.h"
#include "cli/cli.h"
#include "parallel/dist.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ljperf benchmark --model NAME [flags]\n"
            "  --model NAME|config.json   preset (%s), deepspeed/<preset>, or an HF config\n"
            "  --device auto|cpu|cuda     (default auto)\n"
            "  --grad-dtype bf16|fp32     CUDA gradient dtype (default bf16)\n"
            "  --seq-length T             (default 4096 on a GPU, 256 on the CPU)\n"
            "  --micro-batch-size B|auto  (default 1)\n"
            "  --global-batch-size N      N / (micro-batch x ranks) micro-batches per step, gradients accumulated\n"
            "                             as train does (default: one micro-batch per rank)\n"
            "  --save DIR --save-interval N [--async-save]   save the training state (train's checkpoint, no HF\n"
            "                             export) every N steps and report how long the steps were held by each\n"
            "  --train-iters N            timed steps (default 20 on a GPU, 5 on the CPU)\n"
            "  --warmup-iters N           untimed steps first (default 5 on a GPU, 1 on the CPU)\n"
            "  --data PREFIX              real tokens (Megatron dataset) instead of synthetic ones (alias --data-path)\n"
            "  --reset-position-ids, --reset-attention-mask, --eod-mask-loss\n"
            "                             document masking as in `ljperf train` (needs --data); prints the\n"
            "                             documents per sequence and the attention work left\n"
            "  --no-progress              no progress line on stderr\n"
            "  --no-fusion                unfused kernel twins\n"
            "  --deterministic-mode       cuDNN's deterministic attention backward (as train's)\n"
            "  --recompute auto|none|selective|full   auto: the planner (also CHECKPOINT_OPTIMIZATION=true;\n"
            "                             on by itself for deepspeed/ names that would not fit)\n"
            "  --recompute-granularity full|selective --recompute-method uniform|block --recompute-num-layers N\n"
            "  --device-memory BYTES      the memory budget the run is planned for (default: the device's),\n"
            "                             e.g. 106.5GiB to stay within another engine's peak\n"
            "  --margin BYTES|P%%          kept free below it (default 1GiB)\n"
            "  --ablation                 one row per optimisation: Base, +Fusion, +CkptOpt, +FP8 (on Hopper\n"
            "                             GPUs: the --fp8-* flags given, else --fp8-format hybrid with\n"
            "                             Megatron-LM's defaults; the rows above it run bf16), +BF16Moments\n"
            "                             (AdamW's moments as bf16, recompute planned again; the rows above keep\n"
            "                             f32), and over several ranks under ZeRO stage 2 or 3 +CommOpt\n"
            "                             (overlap_comm off in the rows above it, on in it)\n"
            "  --offload-optimizer cpu|none   ZeRO stage >= 1: master weights and AdamW moments in host memory,\n"
            "                             AdamW on the host (default none)\n"
            "  --json FILE                the result (or the ablation rows) as JSON (-: standard output)\n"
            "  --seed S                   (default 1234)\n"
            "  --nproc-per-node N         N data-parallel ranks here (also under mpirun/srun/torchrun)\n"
            "  --zero-stage S             ZeRO stage 0-3 over the ranks (deepspeed/ names: 3, which is 0 on one rank)\n"
            "  --use-distributed-optimizer   Megatron-LM's sharded optimizer: ZeRO stage 1 unless --zero-stage is given\n"
            "  --overlap-comm, --no-overlap-comm   ZeRO-2/3 collectives on their own stream overlapped with\n"
            "                             compute (the default), or waited for by the compute stream right after\n"
            "                             each; no effect on stages 0 and 1 (gradients all-reduced after the backward)\n",
            lj_config_preset_names());
    lj_cli_fp8_usage(f);
    lj_cli_moments_usage(f);
}

/* The recompute policies the ablation compares: the manual one (Megatron flags; full
 * recompute when nothing else fits) and the planner's. */
typedef struct {
    uint8_t manual[LJ_MAX_LAYERS];
    uint8_t planned[LJ_MAX_LAYERS];
    uint8_t planned_fp8[LJ_MAX_LAYERS]; /* the planner's again, with the memory FP8 frees */
    lj_linear_fp8_options fp8;          /* the +FP8 row's recipe */
    const char *no_fp8;                 /* why +FP8 is left out, or NULL */
    uint8_t planned_moments[LJ_MAX_LAYERS]; /* the planner's with bf16 moments (and FP8 where it ran) */
    const char *no_moments;             /* why +BF16Moments is left out, or NULL */
    char no_moments_why[512];           /* the refusal of the moment flags it points to */
} ablation_ctx;

/* One row of the ablation: a name, how it changes the configuration of the row above, and
 * (optional) why it does not apply to this run (NULL: it does; the row is then left out and the
 * reason printed). Adding a row is adding an entry here. */
typedef struct {
    const char *name;
    const char *what;
    void (*apply)(lj_bench_config *cfg, const ablation_ctx *ctx);
    const char *(*omit)(const lj_bench_config *cfg, const ablation_ctx *ctx);
} ablation_row;

/* the rows before +CommOpt run with overlap_comm off, so that +CommOpt measures it */
static void apply_base(lj_bench_config *c, const ablation_ctx *x) {
    c->fused = 0;
    memcpy(c->recompute, x->manual, sizeof c->recompute);
    c->dp->overlap_comm = 0;
    c->linear_recipe = LJ_LINEAR_RECIPE_DEFAULT;
    c->exp_avg_dtype = c->exp_avg_sq_dtype = LJ_DTYPE_F32;
}
static void apply_fusion(lj_bench_config *c, const ablation_ctx *x) { c->fused = 1; }
static void apply_ckptopt(lj_bench_config *c, const ablation_ctx *x) {
    memcpy(c->recompute, x->planned, sizeof c->recompute);
}

static void apply_fp8(lj_bench_config *c, const ablation_ctx *x) {
    c->linear_recipe = LJ_LINEAR_RECIPE_FP8;
    c->fp8 = x->fp8;
    memcpy(c->recompute, x->planned_fp8, sizeof c->recompute);
}
static const char *omit_fp8(const lj_bench_config *c, const ablation_ctx *x) {
    (void)c;
    return x->no_fp8;
}

static void apply_moments(lj_bench_config *c, const ablation_ctx *x) {
    c->exp_avg_dtype = c->exp_avg_sq_dtype = LJ_DTYPE_BF16;
    memcpy(c->recompute, x->planned_moments, sizeof c->recompute);
}
static const char *omit_moments(const lj_bench_config *c, const ablation_ctx *x) {
    (void)c;
    return x->no_moments;
}

static void apply_commopt(lj_bench_config *c, const ablation_ctx *x) {
    (void)x;
    c->dp->overlap_comm = 1;
}
static const char *omit_commopt(const lj_bench_config *c, const ablation_ctx *x) {
    (void)x;
    if (c->dp->world == 1) return "one rank: there is no communication to overlap";
    if (c->dp->zero_stage < 2)
        return "ZeRO stages 0 and 1 all-reduce the gradients after the backward: nothing to overlap (--zero-stage 2 or 3)";
    return NULL;
}

static const ablation_row k_ablation[] = {
    {"Base", "unfused twins, no CUDA graph, manual recompute", apply_base, NULL},
    {"+Fusion", "fused kernels (residual+RMSNorm, SwiGLU, lm_head+CE), CUDA graph on GPUs", apply_fusion, NULL},
    {"+CkptOpt", "recompute chosen by the planner (CHECKPOINT_OPTIMIZATION)", apply_ckptopt, NULL},
    {"+FP8", "FP8 linears in the transformer blocks (TransformerEngine's recipes), recompute planned again",
     apply_fp8, omit_fp8},
    {"+BF16Moments", "AdamW's moments stored as bf16 (--exp-avg-dtype/--exp-avg-sq-dtype bf16), recompute planned again",
     apply_moments, omit_moments},
    {"+CommOpt", "ZeRO-2/3 gradient reductions (and ZeRO-3 gathers, prefetched) overlapped with compute on their own "
                 "stream (overlap_comm)",
     apply_commopt, omit_commopt},
};

static int run_ablation(lj_bench_config *cfg, const ablation_ctx *ctx, const char *json_path) {
    const int all = (int)(sizeof k_ablation / sizeof k_ablation[0]);
    double tps[8];
    lj_bench_result res[8];
    int ran[8], rows = 0;
    for (int i = 0; i < all; i++) {
        const char *why = k_ablation[i].omit ? k_ablation[i].omit(cfg, ctx) : NULL;
        if (why) {
            if (cfg->dp->rank == 0) fprintf(stderr, "ablation row %s left out: %s\n", k_ablation[i].name, why);
            continue;
        }
        k_ablation[i].apply(cfg, ctx);
        if (cfg->dp->rank == 0) fprintf(stderr, "ablation row %s (%s)\n", k_ablation[i].name, k_ablation[i].what);
        if (lj_bench_run(cfg, &res[rows]) != LJ_OK) return lj_cli_error("benchmark");
        tps[rows] = res[rows].tokens_per_s;
        ran[rows++] = i;
    }
    if (cfg->dp->rank != 0) return 0;
    const int json_stdout = json_path && strcmp(json_path, "-") == 0; /* --json -: the table to stderr */
    FILE *out = json_stdout ? stderr : stdout;
    char stage[64];
    lj_bench_describe_stage(cfg, stage, sizeof stage);
    char gbs[96] = "";
    if (cfg->accumulation > 1)
        snprintf(gbs, sizeof gbs, ", global batch %d (%d accumulation steps)",
                 cfg->micro_batch_size * cfg->dp->world * cfg->accumulation, cfg->accumulation);
    fprintf(out, "ljperf benchmark --ablation: %s on %d x %s (%s), seq %d, micro-batch %d%s\n", cfg->model.name,
           cfg->dp->world, cfg->ops->name, stage, cfg->seq_length, cfg->micro_batch_size, gbs);
    fprintf(out, "%-13s %11s %10s %10s %8s  %s\n", "row", "tokens/s", "gain", "TFLOP/s", "MFU", "what");
    for (int i = 0; i < rows; i++) {
        char gain[32] = "-";
        if (i > 0) snprintf(gain, sizeof gain, "%+.1f%%", 100.0 * (tps[i] / tps[i - 1] - 1.0));
        fprintf(out, "%-13s %11.0f %10s %10.2f %7.1f%%  %s\n", k_ablation[ran[i]].name, tps[i], gain, res[i].tflops,
               100.0 * res[i].mfu, k_ablation[ran[i]].what);
    }
    if (rows > 0)
        fprintf(out, "(TFLOP/s: the achieved model rate per device; MFU is against %s in every row, FP8 included)\n",
               res[0].peak_source);
    for (int i = 0; i < all; i++) {
        const char *why = k_ablation[i].omit ? k_ablation[i].omit(cfg, ctx) : NULL;
        if (why) fprintf(out, "(%s left out: %s)\n", k_ablation[i].name, why);
    }
    if (json_path) { /* one JSON array of the rows, written whole (or to standard output) */
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; i < rows; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "row", k_ablation[ran[i]].name);
            cJSON_AddNumberToObject(o, "tokens_per_s", tps[i]);
            cJSON_AddNumberToObject(o, "tflops", res[i].tflops);
            cJSON_AddNumberToObject(o, "mfu", res[i].mfu);
            cJSON_AddNumberToObject(o, "step_ms_median", res[i].step_ms_median);
            cJSON_AddItemToArray(arr, o);
        }
        char *text = cJSON_Print(arr);
        cJSON_Delete(arr);
        lj_status st = LJ_OK;
        if (json_stdout) printf("%s\n", text);
        else st = lj_file_write_atomic(json_path, text, strlen(text));
        free(text);
        if (st != LJ_OK) {
            lj_error_prefix("--json");
            return lj_cli_error("benchmark");
        }
    }
    return 0;
}

static int benchmark(int argc, char **argv, lj_dp *dp);

int lj_cli_benchmark(int argc, char **argv) {
    if (lj_cli_model_is_vl(argc, argv)) return lj_cli_benchmark_vl(argc, argv); /* cli/benchmark_vl.c */
    int status;
    if (lj_cli_maybe_launch("benchmark", argc, argv, &status)) return status;
    lj_dp dp;
    memset(&dp, 0, sizeof dp);
    status = benchmark(argc, argv, &dp);
    if (dp.dist) lj_dp_free(&dp);
    return status;
}

static int benchmark(int argc, char **argv, lj_dp *dp) {
    lj_bench_config cfg;
    memset(&cfg, 0, sizeof cfg);
    const char *model = NULL, *device = "auto", *json = NULL, *granularity = NULL, *method = NULL, *recompute = NULL;
    const char *mbs = NULL, *grad_dtype = NULL, *device_memory = NULL, *margin = NULL;
    int seq = 0, iters = -1, warmup = -1, ablation = 0, num_layers = -1, zero_stage = -1, overlap = -1, offload = 0;
    int dist_opt = 0; /* --use-distributed-optimizer: Megatron-LM's sharded optimizer, ZeRO stage 1 */
    int seq_given = 0, iters_given = 0, warmup_given = 0, global_batch = 0, save_interval = 0, async_save = 0;
    const char *save = NULL;
    lj_cli_fp8 fp8;
    lj_cli_fp8_init(&fp8);
    lj_cli_moments moments;
    lj_cli_moments_init(&moments);
    cfg.micro_batch_size = 1;
    cfg.fused = 1;
    cfg.seed = 1234;
    cfg.progress = 1;
    lj_flag_list data = {0, NULL};
    int nproc = 0, deterministic = 0;
    const lj_flag own[] = {
        {.name = "--model", .kind = LJ_FLAG_STR, .dest = &model},
        {.name = "--device", .kind = LJ_FLAG_STR, .dest = &device},
        {.name = "--grad-dtype", .kind = LJ_FLAG_STR, .dest = &grad_dtype},
        {.name = "--seq-length", .kind = LJ_FLAG_INT, .dest = &seq, .given = &seq_given, .min = 1},
        {.name = "--micro-batch-size", .kind = LJ_FLAG_STR, .dest = &mbs},
        {.name = "--global-batch-size", .kind = LJ_FLAG_INT, .dest = &global_batch, .min = 1},
        {.name = "--save", .kind = LJ_FLAG_STR, .dest = &save},
        {.name = "--save-interval", .kind = LJ_FLAG_INT, .dest = &save_interval, .min = 1},
        {.name = "--async-save", .kind = LJ_FLAG_SWITCH, .dest = &async_save, .ival = 1},
        {.name = "--recompute", .kind = LJ_FLAG_STR, .dest = &recompute},
        {.name = "--recompute-granularity", .kind = LJ_FLAG_STR, .dest = &granularity},
        {.name = "--recompute-method", .kind = LJ_FLAG_STR, .dest = &method},
        {.name = "--recompute-num-layers", .kind = LJ_FLAG_INT, .dest = &num_layers},
        {.name = "--train-iters", .kind = LJ_FLAG_INT, .dest = &iters, .given = &iters_given, .min = 1},
        {.name = "--warmup-iters", .kind = LJ_FLAG_INT, .dest = &warmup, .given = &warmup_given},
        {.name = "--json", .kind = LJ_FLAG_STR, .dest = &json},
        LJ_CLI_DEVICE_MEMORY_ROW(&device_memory),
        LJ_CLI_MARGIN_ROW(&margin),
        {.name = "--seed", .kind = LJ_FLAG_U64, .dest = &cfg.seed},
        {.name = "--no-fusion", .kind = LJ_FLAG_SWITCH, .dest = &cfg.fused},
        {.name = "--deterministic-mode", .kind = LJ_FLAG_SWITCH, .dest = &deterministic, .ival = 1},
        {.name = "--ablation", .kind = LJ_FLAG_SWITCH, .dest = &ablation, .ival = 1},
        {.name = "--no-progress", .kind = LJ_FLAG_SWITCH, .dest = &cfg.progress},
        {.name = "--zero-stage", .kind = LJ_FLAG_INT, .dest = &zero_stage, .min = 0, .max = 3},
        {.name = "--use-distributed-optimizer", .kind = LJ_FLAG_SWITCH, .dest = &dist_opt, .ival = 1},
        {.name = "--overlap-comm", .kind = LJ_FLAG_SWITCH, .dest = &overlap, .ival = 1},
        {.name = "--no-overlap-comm", .kind = LJ_FLAG_SWITCH, .dest = &overlap},
        {.name = "--offload-optimizer", .kind = LJ_FLAG_FUNC, .dest = &offload, .fn = lj_cli_offload},
        {.name = "--nproc-per-node", .kind = LJ_FLAG_INT, .dest = &nproc, .min = 1}, /* read by lj_cli_maybe_launch */
        {.name = "--data", .kind = LJ_FLAG_LIST, .dest = &data},
        {.name = "--data-path", .kind = LJ_FLAG_LIST, .dest = &data},
        {.name = "--reset-position-ids", .kind = LJ_FLAG_SWITCH, .dest = &cfg.doc_mask.reset_position_ids, .ival = 1},
        {.name = "--reset-attention-mask", .kind = LJ_FLAG_SWITCH, .dest = &cfg.doc_mask.reset_attention_mask,
         .ival = 1},
        {.name = "--eod-mask-loss", .kind = LJ_FLAG_SWITCH, .dest = &cfg.doc_mask.eod_mask_loss, .ival = 1},
    };
    lj_flag rows[sizeof own / sizeof own[0] + LJ_CLI_FP8_ROWS + LJ_CLI_MOMENTS_ROWS];
    memcpy(rows, own, sizeof own);
    int n = (int)(sizeof own / sizeof own[0]);
    n += lj_cli_fp8_rows(&fp8, rows + n, LJ_CLI_FP8_ROWS);
    n += lj_cli_moments_rows(&moments, rows + n, LJ_CLI_MOMENTS_ROWS);
    lj_flags_result parsed;
    if (lj_flags_parse("benchmark", rows, n, argc, argv, 0, &parsed) != LJ_OK)
        return lj_cli_error("benchmark");
    if (parsed.help) {
        usage(stdout);
        return 0;
    }
    cfg.num_data_args = data.count;
    cfg.data_args = data.values;
    if (!model) {
        lj_fail(LJ_ERR_ARG, "--model is required (e.g. --model llama3.2-1b)");
        return lj_cli_error("benchmark");
    }
    const char *name = strncmp(model, "deepspeed/", 10) == 0 ? model + 10 : model;
    if (lj_cli_model(name, &cfg.model) != LJ_OK || lj_cli_device(device, deterministic, &cfg.ops) != LJ_OK ||
        lj_cli_grad_dtype("--grad-dtype", grad_dtype, &cfg.ops) != LJ_OK)
        return lj_cli_error("benchmark");
    if (lj_cli_fp8_resolve(&fp8, cfg.ops, &cfg.model, &cfg.linear_recipe, &cfg.fp8) != LJ_OK)
        return lj_cli_error("benchmark");
    if (lj_doc_mask_any(&cfg.doc_mask)) {
        const char *flag = cfg.doc_mask.reset_attention_mask ? "--reset-attention-mask"
                           : cfg.doc_mask.reset_position_ids ? "--reset-position-ids"
                                                             : "--eod-mask-loss";
        if (cfg.num_data_args == 0) {
            lj_fail(LJ_ERR_ARG, "%s needs --data PREFIX (documents that end with a separator, as `ljperf "
                                "prepare` writes them): synthetic tokens have no document boundaries", flag);
            return lj_cli_error("benchmark");
        }
        /* where the dataset records no separator (lj_bench_run reads it, as train does) */
        cfg.doc_mask.eod_token = cfg.model.eos_token_id;
    }
    const int cpu = strcmp(cfg.ops->name, "cpu") == 0;
    /* the ranges of --seq-length, --train-iters and --warmup-iters are their rows' */
    if (ablation && (moments.precision_aware || moments.exp_avg || moments.exp_avg_sq)) {
        lj_fail(LJ_ERR_ARG, "--ablation chooses the moments' dtype per row (f32, then bf16 in +BF16Moments): remove "
                            "--use-precision-aware-optimizer, --exp-avg-dtype and --exp-avg-sq-dtype");
        return lj_cli_error("benchmark");
    }
    if (ablation && (recompute || granularity || !cfg.fused || overlap >= 0)) {
        lj_fail(LJ_ERR_ARG, "--ablation chooses fusion, recompute and overlap per row: drop --recompute*, --no-fusion, "
                            "--[no-]overlap-comm");
        return lj_cli_error("benchmark");
    }
    cfg.seq_length = seq_given ? seq : (cpu ? 256 : 4096);
    cfg.train_iters = iters_given ? iters : (cpu ? 5 : 20);
    cfg.warmup_iters = warmup_given ? warmup : (cpu ? 1 : 5);
    if (mbs && !strcmp(mbs, "auto")) cfg.micro_batch_size = 0;
    else if (mbs && (lj_flags_parse_int("--micro-batch-size", mbs, &cfg.micro_batch_size) != LJ_OK ||
                     cfg.micro_batch_size <= 0)) {
        if (cfg.micro_batch_size <= 0)
            lj_fail(LJ_ERR_ARG, "--micro-batch-size %d: must be positive or auto", cfg.micro_batch_size);
        return lj_cli_error("benchmark");
    }
    if (cfg.seq_length > cfg.model.max_position_embeddings) {
        lj_fail(LJ_ERR_ARG, "--seq-length %d is above the model's max_position_embeddings: expected %d or less",
                cfg.seq_length, cfg.model.max_position_embeddings);
        return lj_cli_error("benchmark");
    }
    /* deepspeed/ names: DeepSpeed-style defaults (ZeRO stage 3, which shards nothing on one rank);
     * the planner turns on by itself when the manual policy does not fit */
    const int deepspeed = name != model;
    lj_dist_env env;
    const int world = lj_dist_env_detect(&env) == LJ_OK && env.world_size > 1 ? env.world_size : 1;
    if (lj_cli_output_path("--json", json) != LJ_OK) return lj_cli_error("benchmark");
    if (dist_opt && zero_stage == 0) {
        lj_fail(LJ_ERR_ARG, "--use-distributed-optimizer (ZeRO-1) and --zero-stage 0 contradict each other: remove one");
        return lj_cli_error("benchmark");
    }
    if (zero_stage < 0) zero_stage = dist_opt ? 1 : deepspeed ? 3 : 0;
    const int requested_stage = zero_stage; /* offload is checked against the stage asked for */
    if (zero_stage == 3 && world == 1) zero_stage = 0; /* stage 3 on one rank: nothing to shard */
    cfg.zero_stage_asked = requested_stage;
    char summary[256];
    snprintf(summary, sizeof summary, "benchmark %s on %s, seq %d, micro-batch %s, iters %d", cfg.model.name,
             cfg.ops->name, cfg.seq_length, mbs ? mbs : "1", cfg.train_iters);
    if (lj_dp_init(dp, cfg.ops, zero_stage, summary) != LJ_OK) return lj_cli_error("benchmark");
    if (lj_cli_megatron_fp8_param_gather(fp8.param_gather, cfg.linear_recipe == LJ_LINEAR_RECIPE_FP8 ? &cfg.fp8 : NULL,
                                         &cfg.model, requested_stage, dp->world, offload, cfg.ops->name,
                                         dp->rank == 0) != LJ_OK)
        return lj_cli_error("benchmark");
    const char *offload_flag = offload ? "--offload-optimizer cpu" : NULL; /* what messages name */
    if (lj_cli_moments_resolve(&moments, requested_stage, dp->world, offload_flag, dp->rank == 0, &cfg.exp_avg_dtype,
                               &cfg.exp_avg_sq_dtype) != LJ_OK)
        return lj_cli_error("benchmark");
    if (overlap >= 0) dp->overlap_comm = overlap;
    dp->offload_optimizer = offload;
    if (lj_dp_offload_check(dp, requested_stage, "--offload-optimizer cpu") != LJ_OK) return lj_cli_error("benchmark");
    cfg.dp = dp;
    if (async_save && !save) {
        lj_fail(LJ_ERR_ARG, "--async-save needs --save DIR (where the benchmark writes the training state)");
        return lj_cli_error("benchmark");
    }
    if (save_interval && !save) {
        lj_fail(LJ_ERR_ARG, "--save-interval %d needs --save DIR (where the benchmark writes the training state)",
                save_interval);
        return lj_cli_error("benchmark");
    }
    if (save && !save_interval) {
        lj_fail(LJ_ERR_ARG, "--save %s needs --save-interval N (the steps between two saves)", save);
        return lj_cli_error("benchmark");
    }
    if (save && save_interval > cfg.warmup_iters + cfg.train_iters) {
        const int steps = cfg.warmup_iters + cfg.train_iters;
        lj_fail(LJ_ERR_ARG, "--save-interval %d: the run has %d step%s (--warmup-iters + --train-iters), so no "
                            "checkpoint would be written: give %d or less", save_interval, steps, steps == 1 ? "" : "s",
                steps);
        return lj_cli_error("benchmark");
    }
    if (save && !save[0]) {
        lj_fail(LJ_ERR_ARG, "--save needs a directory name, not an empty one");
        return lj_cli_error("benchmark");
    }
    struct stat save_st;
    if (save && stat(save, &save_st) == 0 && !S_ISDIR(save_st.st_mode)) {
        lj_fail(LJ_ERR_ARG, "--save %s: not a directory: give a directory (created when missing)", save);
        return lj_cli_error("benchmark");
    }
    if (save && ablation) {
        lj_fail(LJ_ERR_ARG, "--save measures one configuration: drop --ablation");
        return lj_cli_error("benchmark");
    }
    cfg.save = save;
    cfg.save_interval = save_interval;
    cfg.async_save = async_save;
    if (global_batch > 0) { /* Megatron-LM's rule: global = micro-batch x data-parallel ranks x accumulation */
        if (cfg.micro_batch_size == 0) {
            lj_fail(LJ_ERR_ARG, "--global-batch-size %d needs an explicit --micro-batch-size (not auto)", global_batch);
            return lj_cli_error("benchmark");
        }
        const int per_step = cfg.micro_batch_size * dp->world;
        if (global_batch % per_step != 0) {
            lj_fail(LJ_ERR_ARG, "--global-batch-size %d is not a multiple of --micro-batch-size %d x %d data-parallel "
                                "rank%s = %d: give a multiple of %d", global_batch, cfg.micro_batch_size, dp->world,
                    dp->world == 1 ? "" : "s", per_step, per_step);
            return lj_cli_error("benchmark");
        }
        cfg.accumulation = global_batch / per_step;
    }
    if (dp->rank != 0) {
        lj_log_set_quiet(1);
        cfg.progress = 0;
        json = NULL;
    }
    /* the recompute decisions below differ only in the policy asked for */
    const lj_cli_recompute_request base = {
        .cmd = "benchmark",
        .cfg = &cfg.model,
        .ops = cfg.ops,
        .seq_length = cfg.seq_length,
        .grad_accum_steps = cfg.accumulation > 1 ? cfg.accumulation : 1,
        .zero_stage = zero_stage,
        .num_layers = -1,
        .device_memory = device_memory,
        .margin = margin,
        .linear_recipe = cfg.linear_recipe,
        .fp8 = &cfg.fp8,
        .offload_optimizer = offload,
        .exp_avg_dtype = cfg.exp_avg_dtype,
        .exp_avg_sq_dtype = cfg.exp_avg_sq_dtype,
    };
    lj_cli_recompute_request planner = base, none = base, manual = base, given = base;
    planner.recompute = "auto";
    none.recompute = "none";
    ablation_ctx ctx;
    if (ablation) { /* f32 moments until +BF16Moments: --ablation refuses the moment flags */
        /* every row runs at one micro-batch size: the one given, or with auto the planner's */
        int mb = cfg.micro_batch_size;
        if (mb == 0 && lj_cli_recompute(&planner, &mb, ctx.planned) != LJ_OK)
            return lj_cli_error("benchmark");
        /* the manual baseline: the flags, or full recompute when they do not fit */
        if (lj_cli_recompute(&none, &mb, ctx.manual) != LJ_OK &&
            !granularity) {
            lj_log_info("benchmark --ablation: no recompute does not fit; the manual baseline is full recompute");
            granularity = "full";
        }
        manual.granularity = granularity;
        manual.method = method;
        manual.num_layers = num_layers;
        if (lj_cli_recompute(&manual, &mb, ctx.manual) != LJ_OK)
            return lj_cli_error("benchmark");
        cfg.micro_batch_size = mb;
        if (lj_cli_recompute(&planner, &mb, ctx.planned) != LJ_OK)
            return lj_cli_error("benchmark");
        /* +FP8: the recipe the flags give, else hybrid with Megatron-LM's defaults, where the
         * backend has FP8 tensor cores */
        ctx.fp8 = cfg.linear_recipe == LJ_LINEAR_RECIPE_FP8 ? cfg.fp8 : lj_linear_fp8_defaults();
        ctx.no_fp8 = NULL;
        if (cpu) ctx.no_fp8 = "the CPU backend emulates FP8 (a check of the recipe, not a speed-up)";
        else if (lj_ops_cuda_fp8_check() != LJ_OK) ctx.no_fp8 = "this GPU or toolkit has no FP8 GEMM (Hopper, sm_90)";
        if (!ctx.no_fp8) {
            lj_cli_recompute_request fp8_planner = planner;
            fp8_planner.linear_recipe = LJ_LINEAR_RECIPE_FP8;
            fp8_planner.fp8 = &ctx.fp8;
            if (lj_cli_recompute(&fp8_planner, &mb, ctx.planned_fp8) != LJ_OK) return lj_cli_error("benchmark");
        }
        /* +BF16Moments: on top of the rows above (FP8 where it ran); left out where this run would
         * refuse the moment flags (offload, no sharded optimizer, ZeRO-3 over ranks), with that
         * refusal as the reason */
        const lj_cli_moments bf16 = {1, "bf16", "bf16"};
        lj_dtype bm, bv;
        ctx.no_moments = NULL;
        if (lj_cli_moments_resolve(&bf16, requested_stage, dp->world, offload_flag, 0, &bm, &bv) != LJ_OK) {
            snprintf(ctx.no_moments_why, sizeof ctx.no_moments_why, "%s", lj_error_message());
            ctx.no_moments = ctx.no_moments_why;
        } else {
            lj_cli_recompute_request mq = planner;
            if (!ctx.no_fp8) {
                mq.linear_recipe = LJ_LINEAR_RECIPE_FP8;
                mq.fp8 = &ctx.fp8;
            }
            mq.exp_avg_dtype = mq.exp_avg_sq_dtype = LJ_DTYPE_BF16;
            if (lj_cli_recompute(&mq, &mb, ctx.planned_moments) != LJ_OK) return lj_cli_error("benchmark");
        }
        return run_ablation(&cfg, &ctx, json);
    }
    given.recompute = recompute;
    given.granularity = granularity;
    given.method = method;
    given.num_layers = num_layers;
    given.auto_if_needed = deepspeed;
    if (lj_cli_recompute(&given, &cfg.micro_batch_size, cfg.recompute) != LJ_OK)
        return lj_cli_error("benchmark");
    if (lj_cli_fp8_check_tokens(cfg.linear_recipe, &cfg.fp8, cfg.ops, &cfg.model, cfg.micro_batch_size,
                                cfg.seq_length) != LJ_OK)
        return lj_cli_error("benchmark");
    lj_bench_result res;
    if (lj_bench_run(&cfg, &res) != LJ_OK) return lj_cli_error("benchmark");
    if (dp->rank == 0) lj_bench_print(&cfg, &res, stdout);
    if (json && lj_bench_write_json(&cfg, &res, json) != LJ_OK) return lj_cli_error("benchmark");
    return 0;
}

/* train.c: `ljperf train`: flags (Megatron-LM names) -> lj_train_config -> lj_train_run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/monitor.h"
#include "data/tokenizer.h"
#include "data/tokenizer_export.h"
#include "checkpoint/state.h"
#include "parallel/dist.h"
#include "train/train.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ljperf train --data-path PREFIX [flags]\n"
            "\n"
            "model and device:\n"
            "  --model NAME|config.json|DIR  preset (%s) or HF config (default: the --load\n"
            "                                checkpoint's model, else llama3-tiny)\n"
            "  --device auto|cpu|cuda        default auto: the GPU if there is one, else the CPU\n"
            "  --grad-dtype bf16|fp32        CUDA gradient dtype (default bf16: 2 bytes per parameter;\n"
            "                                fp32 accumulates micro-batches exactly; CPU: fp32 only)\n"
            "parallelism:\n"
            "  --nproc-per-node N            start N data-parallel ranks here (like torchrun; with\n"
            "                                --device cpu through mpirun); mpirun/srun/torchrun also work\n"
            "  --zero-stage S                DeepSpeed ZeRO stage: 0 replicated, 1 sharded AdamW state,\n"
            "                                2 also sharded gradients (reduced bucket by bucket during the\n"
            "                                backward), 3 also sharded parameters (each layer all-gathered\n"
            "                                as it computes; 3 on one rank = 0)\n"
            "  --overlap-comm, --no-overlap-comm   ZeRO-2/3 collectives overlapped with compute on their own\n"
            "                                stream, or waited for right after each (default: on; with\n"
            "                                --deepspeed, zero_optimization.overlap_comm, whose DeepSpeed\n"
            "                                default is on for stage 3 only); no effect on stages 0 and 1\n"
            "  --reduce-bucket-size N        ZeRO-2 elements per gradient reduction (default: hidden^2,\n"
            "                                DeepSpeed's \"auto\"; or zero_optimization.reduce_bucket_size)\n"
            "  --offload-optimizer cpu|none  ZeRO stage >= 1: f32 master weights and AdamW moments in host\n"
            "                                memory, AdamW on the host (DeepSpeed's zero_optimization.\n"
            "                                offload_optimizer.device; default none; the cpu backend's\n"
            "                                state is host memory already)\n"
            "  --deepspeed ds_config.json    DeepSpeed config: batch sizes, gradient_clipping, optimizer,\n"
            "                                scheduler, zero_optimization (unknown keys are named)\n"
            "data:\n"
            "  --data-path [W1] P1 [W2 P2..] Megatron indexed datasets (PREFIX of .bin/.idx) or llm.c shards,\n"
            "                                optionally blended with weights\n"
            "  --split 969,30,1              train/valid/test split of the documents (default 969,30,1)\n"
            "batch and schedule:\n"
            "  --seq-length T                tokens per sample (default 256)\n"
            "  --micro-batch-size B|auto     samples per forward/backward (default 4)\n"
            "  --global-batch-size G         samples per optimizer step (default B x ranks; G/(B x ranks)\n"
            "                                accumulation steps)\n"
            "  --train-iters N               optimizer steps (default 100)\n"
            "  --lr LR --min-lr LR           peak and final learning rate (default 3e-4, 0)\n"
            "  --lr-warmup-iters N           linear warm-up (default 0)\n"
            "  --lr-decay-iters N            decay length (default --train-iters)\n"
            "  --lr-decay-style S            constant|linear|cosine (default cosine)\n"
            "  --weight-decay WD             AdamW decoupled weight decay on matrices (default 0.1)\n"
            "  --weight-decay-all            also decay norms and embeddings\n"
            "  --adam-beta1 B1 --adam-beta2 B2 --adam-eps EPS   (default 0.9, 0.95, 1e-8)\n"
            "  --clip-grad C                 global gradient-norm clipping (default 1.0; 0 = off)\n"
            "  --seed S                      init and data order seed (default 1234)\n"
            "memory:\n"
            "  --recompute auto|none|selective|full     auto: the planner picks per-layer recompute (and the\n"
            "                                           micro-batch with --micro-batch-size auto); also\n"
            "                                           CHECKPOINT_OPTIMIZATION=true\n"
            "  --recompute-granularity full|selective   Megatron's manual recompute (default: none)\n"
            "  --recompute-method uniform|block         uniform: every layer; block: the first N layers\n"
            "  --recompute-num-layers N                 layers for --recompute-method block\n"
            "  --device-memory BYTES, --margin BYTES|P%% the memory budget the run is planned and checked for\n"
            "                                           (default: the device's memory, 1GiB kept free)\n"
            "  --no-fusion                   unfused kernel twins (for comparison)\n"
            "checkpoints and logs:\n"
            "  --save DIR --save-interval N  training-state checkpoints (+ a Hugging Face export in each)\n"
            "  --load DIR                    resume from a training-state checkpoint, or start from an HF model\n"
            "  --exit-interval N             save and exit after an iteration divisible by N\n"
            "  --keep-last K                 keep the last K checkpoints (default 2; 0 = all)\n"
            "  --hf-dtype bf16|fp32          dtype of the HF export (default: fp32 on the CPU, bf16 on GPUs)\n"
            "  --tokenizer-model PATH        the data's tokenizer.json (or its directory), copied into each HF\n"
            "                                export with tokenizer_config.json, special_tokens_map.json and\n"
            "                                generation_config.json (default: the set-up script's Llama 3\n"
            "                                tokenizer when it fits the vocabulary); also --tokenizer\n"
            "  --tokenizer-type HuggingFaceTokenizer   Megatron-LM's flag (the only type ljperf reads)\n"
            "  --log-interval N              print every N iterations (default 1)\n"
            "  --eval-interval N             validation loss every N iterations (default: at the end)\n"
            "  --eval-iters N                validation micro-batches per evaluation (default 10)\n"
            "  --log-json FILE               the per-step line as JSON lines\n"
            "  --quiet                       no per-iteration lines\n",
            lj_config_preset_names());
    lj_cli_fp8_usage(f);
    lj_cli_monitor_usage(f);
}

/* Values a user can get wrong that no later step would catch. */
static lj_status check_ranges(const lj_train_config *c, int gbs) {
    const struct { int bad; const char *what; } rules[] = {
        {gbs < 0, "--global-batch-size must be positive"},
        {c->train_iters < 0, "--train-iters must be >= 0"},
        {c->log_interval <= 0, "--log-interval must be positive"},
        {c->eval_interval < 0, "--eval-interval must be >= 0"},
        {c->eval_iters < 0, "--eval-iters must be >= 0"},
        {c->save_interval < 0, "--save-interval must be >= 0"},
        {c->exit_interval < 0, "--exit-interval must be >= 0"},
        {c->keep_last < 0, "--keep-last must be >= 0 (0 keeps all)"},
        {c->lr.warmup_iters < 0, "--lr-warmup-iters must be >= 0"},
        {c->lr.decay_iters < 0, "--lr-decay-iters must be >= 0"},
        {!(c->lr.lr >= 0 && isfinite(c->lr.lr)), "--lr must be a finite number >= 0"},
        {!(c->lr.min_lr >= 0 && c->lr.min_lr <= c->lr.lr), "--min-lr must be in [0, --lr]"},
        {!(c->adamw.beta1 >= 0 && c->adamw.beta1 < 1), "--adam-beta1 must be in [0, 1)"},
        {!(c->adamw.beta2 >= 0 && c->adamw.beta2 < 1), "--adam-beta2 must be in [0, 1)"},
        {!(c->adamw.eps > 0), "--adam-eps must be positive"},
        {!(c->adamw.weight_decay >= 0), "--weight-decay must be >= 0"},
        {!(c->adamw.max_grad_norm >= 0), "--clip-grad must be >= 0 (0 = off)"},
        {c->zero_stage < 0 || c->zero_stage > 3, "--zero-stage must be 0, 1, 2 or 3"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (rules[i].bad) return lj_fail(LJ_ERR_ARG, "%s", rules[i].what);
    return LJ_OK;
}

/* --deepspeed ds_config.json: batch sizes (DeepSpeed's rule, with the launcher's world size),
 * clipping, AdamW parameters, scheduler and ZeRO stage. */
static lj_status apply_deepspeed(lj_train_config *c, const char *path, int *gbs, int *micro_batch_size) {
    lj_deepspeed_config *ds = &c->deepspeed;
    LJ_TRY(lj_deepspeed_load(ds, path));
    lj_dist_env env;
    LJ_TRY(lj_dist_env_detect(&env));
    lj_deepspeed_hints h = {env.world_size > 0 ? env.world_size : 1, c->model.hidden_size, *micro_batch_size, *gbs,
                            c->train_iters, c->lr.warmup_iters};
    LJ_TRY(lj_deepspeed_resolve(ds, &h));
    *gbs = (int)ds->train_batch_size;
    *micro_batch_size = (int)ds->train_micro_batch_size_per_gpu;
    if (!isnan(ds->gradient_clipping)) c->adamw.max_grad_norm = (float)ds->gradient_clipping;
    if (ds->optimizer.type != LJ_DS_OPTIMIZER_NONE) {
        if (!isnan(ds->optimizer.lr)) c->lr.lr = ds->optimizer.lr;
        if (!isnan(ds->optimizer.beta1)) c->adamw.beta1 = (float)ds->optimizer.beta1;
        if (!isnan(ds->optimizer.beta2)) c->adamw.beta2 = (float)ds->optimizer.beta2;
        if (!isnan(ds->optimizer.eps)) c->adamw.eps = (float)ds->optimizer.eps;
        if (!isnan(ds->optimizer.weight_decay)) c->adamw.weight_decay = (float)ds->optimizer.weight_decay;
    }
    c->zero_stage = ds->zero.stage;
    c->has_deepspeed = 1;
    return LJ_OK;
}

/* The tokenizer the HF exports carry (--save only): --tokenizer-model (a tokenizer.json or a
 * directory holding one), else the set-up script's default when it exists and fits the model's
 * vocabulary. A given tokenizer that does not load or fit is an error; the default is then
 * left out with a note. `buf` (LJ_PATH_MAX bytes) holds the path c->tokenizer points to. */
static lj_status resolve_tokenizer(lj_train_config *c, const char *given, const char *type, char *buf) {
    if (type && strcmp(type, "HuggingFaceTokenizer") != 0)
        return lj_fail(LJ_ERR_ARG, "--tokenizer-type: '%s' is not HuggingFaceTokenizer (ljperf reads Hugging Face "
                                   "tokenizer.json files)", type);
    if (!c->save) return LJ_OK;
    if (given) {
        struct stat st;
        if (stat(given, &st) == 0 && S_ISDIR(st.st_mode)) LJ_TRY(lj_path_join(buf, given, "tokenizer.json"));
        else if (strlen(given) < LJ_PATH_MAX) strcpy(buf, given);
        else return lj_fail(LJ_ERR_ARG, "--tokenizer-model: the path is longer than %d bytes", LJ_PATH_MAX - 1);
        LJ_TRY(lj_tokenizer_check_export(buf, &c->model, "--tokenizer-model"));
        c->tokenizer = buf;
        return LJ_OK;
    }
    lj_tokenizer_default_path(buf, LJ_PATH_MAX);
    if (access(buf, R_OK) != 0) {
        lj_log_info("no tokenizer in the Hugging Face exports (the default %s is missing; --tokenizer-model PATH "
                    "adds one)", buf);
        return LJ_OK;
    }
    if (lj_tokenizer_check_export(buf, &c->model, "the default tokenizer") != LJ_OK) {
        lj_log_info("no tokenizer in the Hugging Face exports: %s (--tokenizer-model PATH adds one)", lj_error_message());
        return LJ_OK;
    }
    c->tokenizer = buf;
    return LJ_OK;
}

static lj_status parse(int argc, char **argv, lj_train_config *c, lj_cli_monitor *mon, char *tok_buf, int *help) {
    const char *model = NULL, *device = "auto", *granularity = NULL, *method = NULL, *hf_dtype = NULL;
    const char *decay_style = NULL, *recompute = NULL, *mbs = NULL, *ds_path = NULL, *grad_dtype = NULL;
    const char *device_memory = NULL, *margin = NULL, *tokenizer = NULL, *tokenizer_type = NULL;
    int num_layers = -1, decay_iters = -1, decay_given = 0, gbs = 0;
    lj_status s = LJ_OK;
    lj_cli_fp8 fp8;
    lj_cli_fp8_init(&fp8);
    lj_train_config_defaults(c);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *help = 1;
            return LJ_OK;
        } else if (!strcmp(a, "--model")) LJ_TRY(lj_cli_str(argc, argv, &i, &model));
        else if (!strcmp(a, "--device")) LJ_TRY(lj_cli_str(argc, argv, &i, &device));
        else if (!strcmp(a, "--grad-dtype")) LJ_TRY(lj_cli_str(argc, argv, &i, &grad_dtype));
        else if (!strcmp(a, "--data-path") || !strcmp(a, "--data")) {
            int start = i + 1;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) i++;
            if (i + 1 == start) return lj_fail(LJ_ERR_ARG, "%s needs at least one dataset prefix", a);
            c->num_data_args = i + 1 - start;
            c->data_args = argv + start;
        } else if (!strcmp(a, "--split")) LJ_TRY(lj_cli_str(argc, argv, &i, &c->split));
        else if (!strcmp(a, "--seq-length")) LJ_TRY(lj_cli_int(argc, argv, &i, &c->seq_length));
        else if (!strcmp(a, "--micro-batch-size")) LJ_TRY(lj_cli_str(argc, argv, &i, &mbs));
        else if (!strcmp(a, "--recompute")) LJ_TRY(lj_cli_str(argc, argv, &i, &recompute));
        else if (!strcmp(a, "--device-memory")) LJ_TRY(lj_cli_str(argc, argv, &i, &device_memory));
        else if (!strcmp(a, "--margin")) LJ_TRY(lj_cli_str(argc, argv, &i, &margin));
        else if (!strcmp(a, "--global-batch-size")) LJ_TRY(lj_cli_int(argc, argv, &i, &gbs));
        else if (!strcmp(a, "--train-iters")) LJ_TRY(lj_cli_int(argc, argv, &i, &c->train_iters));
        else if (!strcmp(a, "--lr")) LJ_TRY(lj_cli_double(argc, argv, &i, &c->lr.lr));
        else if (!strcmp(a, "--min-lr")) LJ_TRY(lj_cli_double(argc, argv, &i, &c->lr.min_lr));
        else if (!strcmp(a, "--lr-warmup-iters")) LJ_TRY(lj_cli_int(argc, argv, &i, &c->lr.warmup_iters));
        else if (!strcmp(a, "--lr-decay-iters")) {
            LJ_TRY(lj_cli_int(argc, argv, &i, &decay_iters));
            decay_given = 1;
        }
        else if (!strcmp(a, "--lr-decay-style")) LJ_TRY(lj_cli_str(argc, argv, &i, &decay_style));
        else if (!strcmp(a, "--weight-decay")) LJ_TRY(lj_cli_float(argc, argv, &i, &c->adamw.weight_decay));
        else if (!strcmp(a, "--weight-decay-all")) c->adamw.decay_norms_and_embeddings = 1;
        else if (!strcmp(a, "--adam-beta1")) LJ_TRY(lj_cli_float(argc, argv, &i, &c->adamw.beta1));
        else if (!strcmp(a, "--adam-beta2")) LJ_TRY(lj_cli_float(argc, argv, &i, &c->adamw.beta2));
        else if (!strcmp(a, "--adam-eps")) LJ_TRY(lj_cli_float(argc, argv, &i, &c->adamw.eps));
        else if (!strcmp(a, "--clip-grad")) LJ_TRY(lj_cli_float(argc, argv, &i, &c->adamw.max_grad_norm));
        else if (!strcmp(a, "--seed")) LJ_TRY(lj_cli_u64(argc, argv, &i, &c->seed));
        else if (!strcmp(a, "--recompute-granularity")) LJ_TRY(lj_cli_str(argc, argv, &i, &granularity));
        else if (!strcmp(a, "--recompute-method")) LJ_TRY(lj_cli_str(argc, argv, &i, &method));
        else if (!strcmp(a, "--recompute-num-layers")) LJ_TRY(lj_cli_int(argc, argv, &i, &num_layers));
        else if (!strcmp(a, "--no-fusion")) c->fused = 0;
        else if (!strcmp(a, "--save")) LJ_TRY(lj_cli_str(argc, argv, &i, &c->save));
        else if (!strcmp(a, "--load")) LJ_TRY(lj_cli_str(argc, argv, &i, &c->load));
        else if (!strcmp(a, "--save-interval")) LJ_TRY(lj_cli_int(argc, argv, &i, &c->save_interval));
        else if (!strcmp(a, "--exit-interval")) LJ_TRY(lj_cli_int(argc, argv, &i, &c->exit_interval));
        else if (!strcmp(a, "--keep-last")) LJ_TRY(lj_cli_int(argc, argv, &i, &c->keep_last));
        else if (!strcmp(a, "--hf-dtype")) LJ_TRY(lj_cli_str(argc, argv, &i, &hf_dtype));
        else if (!strcmp(a, "--tokenizer-model") || !strcmp(a, "--tokenizer")) LJ_TRY(lj_cli_str(argc, argv, &i, &tokenizer));
        else if (!strcmp(a, "--tokenizer-type")) LJ_TRY(lj_cli_str(argc, argv, &i, &tokenizer_type));
        else if (!strcmp(a, "--log-interval")) LJ_TRY(lj_cli_int(argc, argv, &i, &c->log_interval));
        else if (!strcmp(a, "--eval-interval")) LJ_TRY(lj_cli_int(argc, argv, &i, &c->eval_interval));
        else if (!strcmp(a, "--eval-iters")) LJ_TRY(lj_cli_int(argc, argv, &i, &c->eval_iters));
        else if (!strcmp(a, "--log-json")) LJ_TRY(lj_cli_str(argc, argv, &i, &c->log_json));
        else if (!strcmp(a, "--quiet")) c->quiet = 1;
        else if (!strcmp(a, "--deepspeed") || !strcmp(a, "--deepspeed_config"))
            LJ_TRY(lj_cli_str(argc, argv, &i, &ds_path));
        else if (!strcmp(a, "--zero-stage")) LJ_TRY(lj_cli_int(argc, argv, &i, &c->zero_stage));
        else if (!strcmp(a, "--overlap-comm")) c->overlap_comm = 1;
        else if (!strcmp(a, "--no-overlap-comm")) c->overlap_comm = 0;
        else if (!strcmp(a, "--offload-optimizer")) LJ_TRY(lj_cli_offload(argc, argv, &i, &c->offload_optimizer));
        else if (!strcmp(a, "--reduce-bucket-size")) {
            int n = 0;
            LJ_TRY(lj_cli_int(argc, argv, &i, &n));
            if (n <= 0) return lj_fail(LJ_ERR_ARG, "--reduce-bucket-size must be a positive number of elements");
            c->reduce_bucket_size = n;
        } else if (!strcmp(a, "--nproc-per-node")) i++; /* handled by lj_cli_maybe_launch */
        else if (lj_cli_monitor_flag(mon, argc, argv, &i, &s)) LJ_TRY(s);
        else if (lj_cli_fp8_flag(&fp8, argc, argv, &i, &s)) LJ_TRY(s);
        else return lj_fail(LJ_ERR_ARG, "unknown flag '%s' (see ljperf train --help)", a);
    }
    if (c->num_data_args == 0) return lj_fail(LJ_ERR_ARG, "--data-path is required (make one with `ljperf prepare`)");
    /* the values alone first: nothing is loaded or started for a run that cannot begin */
    if (mbs && strcmp(mbs, "auto") == 0) c->micro_batch_size = 0;
    else if (mbs) {
        LJ_TRY(lj_cli_parse_int("--micro-batch-size", mbs, &c->micro_batch_size));
        if (c->micro_batch_size <= 0) return lj_fail(LJ_ERR_ARG, "--micro-batch-size must be positive or auto");
    }
    if (c->seq_length <= 0) return lj_fail(LJ_ERR_ARG, "--seq-length must be positive");
    if (decay_style) LJ_TRY(lj_lr_parse_style(decay_style, &c->lr.style));
    c->lr.decay_iters = decay_given ? decay_iters : c->train_iters;
    LJ_TRY(check_ranges(c, gbs));
    if (!model && c->load) {
        /* --load alone: the model is the checkpoint's (its config.json) */
        char root[LJ_PATH_MAX], hf[LJ_PATH_MAX];
        int iteration, is_state;
        LJ_TRY(lj_ckpt_resolve_load(c->load, root, &iteration, &is_state, hf));
        LJ_TRY(lj_config_resolve(hf, &c->model));
    } else {
        LJ_TRY(lj_config_resolve(model ? model : "llama3-tiny", &c->model));
    }
    if (ds_path) {
        int mb = c->micro_batch_size > 0 && mbs ? c->micro_batch_size : 0;
        LJ_TRY(apply_deepspeed(c, ds_path, &gbs, &mb));
        LJ_TRY(lj_cli_monitor_deepspeed(mon, ds_path));
        c->micro_batch_size = mb;
        LJ_TRY(check_ranges(c, gbs)); /* the file's values too */
    }
    if (c->seq_length > c->model.max_position_embeddings)
        return lj_fail(LJ_ERR_ARG, "--seq-length %d is above the model's max_position_embeddings (%d)", c->seq_length,
                       c->model.max_position_embeddings);
    LJ_TRY(lj_cli_device(device, &c->ops));
    if (grad_dtype) LJ_TRY(lj_cli_grad_dtype("--grad-dtype", grad_dtype, &c->ops));
    else if (ds_path && c->deepspeed.grad_accum_dtype[0]) {
        char what[300];
        snprintf(what, sizeof what, "%s: data_types.grad_accum_dtype", ds_path);
        LJ_TRY(lj_cli_grad_dtype(what, c->deepspeed.grad_accum_dtype, &c->ops));
    }
    LJ_TRY(lj_cli_fp8_resolve(&fp8, c->ops, &c->model, &c->linear_recipe, &c->fp8));
    const int accumulation = gbs > 0 && c->micro_batch_size > 0 ? gbs / c->micro_batch_size : 1;
    const lj_cli_recompute_request rq = {
        .cmd = "train",
        .cfg = &c->model,
        .ops = c->ops,
        .seq_length = c->seq_length,
        .grad_accum_steps = accumulation,
        .zero_stage = c->zero_stage,
        .recompute = recompute,
        .granularity = granularity,
        .method = method,
        .num_layers = num_layers,
        .device_memory = device_memory,
        .margin = margin,
        .linear_recipe = c->linear_recipe,
        .fp8 = &c->fp8,
    };
    LJ_TRY(lj_cli_recompute(&rq, &c->micro_batch_size, c->recompute));
    /* default: one micro-batch per rank per step (Megatron's default global batch) */
    lj_dist_env env;
    const int world = lj_dist_env_detect(&env) == LJ_OK && env.world_size > 1 ? env.world_size : 1;
    c->global_batch_size = gbs > 0 ? gbs : c->micro_batch_size * world;
    c->hf_dtype = c->ops->param_dtype == LJ_DTYPE_F32 ? LJ_DTYPE_F32 : LJ_DTYPE_BF16;
    if (hf_dtype) {
        if (!strcmp(hf_dtype, "bf16")) c->hf_dtype = LJ_DTYPE_BF16;
        else if (!strcmp(hf_dtype, "fp32")) c->hf_dtype = LJ_DTYPE_F32;
        else return lj_fail(LJ_ERR_ARG, "--hf-dtype: '%s' is not one of bf16, fp32", hf_dtype);
    }
    lj_cli_monitor_apply(mon, c, world == 1 || env.rank == 0);
    LJ_TRY(resolve_tokenizer(c, tokenizer, tokenizer_type, tok_buf));
    return LJ_OK;
}

int lj_cli_train(int argc, char **argv) {
    int status;
    if (lj_cli_maybe_launch("train", argc, argv, &status)) return status;
    lj_train_config cfg;
    lj_cli_monitor mon;
    memset(&mon, 0, sizeof mon);
    char tokenizer[LJ_PATH_MAX];
    int help = 0;
    if (parse(argc, argv, &cfg, &mon, tokenizer, &help) != LJ_OK) return lj_cli_error("train");
    if (help) {
        usage(stdout);
        return 0;
    }
    lj_status s = lj_train_run(&cfg);
    if (s == LJ_ERR_INTERRUPTED) {
        lj_dist_env env;
        const int rank0 = lj_dist_env_detect(&env) != LJ_OK || env.rank == 0; /* one line per job */
        if (rank0) fprintf(stderr, "ljperf train: %s\n", lj_error_message());
        return cfg.save ? 0 : 130;
    }
    return s == LJ_OK ? 0 : lj_cli_error("train");
}

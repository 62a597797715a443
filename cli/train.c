/* train.c: `ljperf train`: flags (Megatron-LM names) -> lj_train_config -> lj_train_run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/megatron.h"
#include "cli/monitor.h"
#include "data/loader.h"
#include "data/mmidx.h"
#include "base/hf_cache.h"
#include "data/tokenizer.h"
#include "data/tokenizer_export.h"
#include "checkpoint/checkpoint.h"
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
            "  --nnodes 1 --node-rank 0 --master-addr A --master-port P   torchrun's flags of one node\n"
            "                                (A and P: the ranks' rendezvous; default 127.0.0.1, a free port)\n"
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
            "                                scheduler, zero_optimization (unknown keys are named); a flag\n"
            "                                also given must agree with the file (\"auto\" takes the flag)\n"
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
            "  --lr-decay-style S            constant|linear|cosine|inverse-square-root|WSD (default cosine)\n"
            "  --weight-decay WD             AdamW decoupled weight decay on matrices (default 0.1)\n"
            "  --weight-decay-all            also decay norms and embeddings\n"
            "  --adam-beta1 B1 --adam-beta2 B2 --adam-eps EPS   (default 0.9, 0.95, 1e-8)\n"
            "  --clip-grad C                 global gradient-norm clipping (default 1.0; 0 = off)\n"
            "  --check-for-nan-in-loss-and-grad, --no-check-for-nan-in-loss-and-grad   a step whose gradient\n"
            "                                norm is inf or NaN is never applied; checked (the default, as\n"
            "                                Megatron-LM's), a non-finite loss or gradient norm stops the run;\n"
            "                                unchecked, the step is skipped and counted\n"
            "  --max-consecutive-skipped-iterations N   unchecked: stop after N skipped steps in a row\n"
            "                                (default 10; 0 = no limit)\n"
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
            "  --deterministic-mode          every step repeats bit for bit, as an exact resume needs it\n"
            "                                (Megatron-LM's flag): cuDNN's deterministic attention backward,\n"
            "                                which keeps a workspace of micro-batch x heads x seq^2 bf16 values\n"
            "                                and costs 0.5-2.5%% of a step; the CPU backend always is (for a\n"
            "                                given thread count)\n"
            "checkpoints and logs:\n"
            "  --save DIR --save-interval N  training-state checkpoints (+ a Hugging Face export in each);\n"
            "                                every rank writes its shard files at once (--ckpt-format\n"
            "                                torch_dist; torch: one state.safetensors on rank 0), and\n"
            "                                --async-save writes them in the background\n"
            "  --load DIR                    resume from a training-state checkpoint, or start from an HF model\n"
            "  --override-tokenizer          train on data prepared with another tokenizer than\n"
            "                                --tokenizer-model (or on a blend of two): a warning instead of\n"
            "                                an error\n"
            "  --override-data               resume onto other data than the checkpoint's (its datasets'\n"
            "                                fingerprints differ): a warning instead of an error\n"
            "  --exit-interval N             save and exit after an iteration divisible by N\n"
            "  --keep-last K                 keep the last K checkpoints (default 2; 0 = all)\n"
            "  --hf-dtype bf16|fp32          dtype of the HF export (default: fp32 on the CPU, bf16 on GPUs)\n"
            "  --no-save-hf                  no HF export in the intermediate saves (the run's last save\n"
            "                                still writes one)\n"
            "  --tokenizer-model NAME|PATH   the data's tokenizer (llama3, qwen3, ORG/NAME of the Hugging\n"
            "                                Face cache, a tokenizer.json or its directory), copied into each\n"
            "                                HF export with tokenizer_config.json, special_tokens_map.json\n"
            "                                and generation_config.json (default: the one the data was\n"
            "                                prepared with, as its .fingerprint.json records it; for data\n"
            "                                that records none, the set-up script's Llama 3 tokenizer when\n"
            "                                it fits the vocabulary); also --tokenizer. One that is not the\n"
            "                                data's is refused (--override-tokenizer)\n"
            "  --tokenizer-type HuggingFaceTokenizer|Llama3Tokenizer   Megatron-LM's flag (Llama3Tokenizer:\n"
            "                                the Llama 3 tokenizer.json; default --tokenizer-model llama3)\n"
            "  --log-interval N              print every N iterations (default 1)\n"
            "  --eval-interval N             validation loss every N iterations (default: at the end)\n"
            "  --eval-iters N                validation micro-batches per evaluation (default 10)\n"
            "  --log-json FILE               the per-step line as JSON lines\n"
            "  --quiet                       no per-iteration lines\n",
            lj_config_preset_names());
    lj_cli_fp8_usage(f);
    lj_cli_moments_usage(f);
    lj_cli_monitor_usage(f);
    lj_cli_megatron_usage(f);
}

/* Values a user can get wrong that no later step would catch: checked after the flags and again
 * after a DeepSpeed config (`source`: its path, NULL for the flags alone) has set some of them. */
static lj_status check_ranges(const lj_train_config *c, int gbs, const char *source) {
    const struct { int bad; const char *flag; double value; const char *expected; } rules[] = {
        {gbs < 0, "--global-batch-size", gbs, "a positive number of samples"},
        {c->max_skipped < 0, "--max-consecutive-skipped-iterations", c->max_skipped, ">= 0 (0: no limit)"},
        {c->train_iters < 0, "--train-iters", c->train_iters, ">= 0"},
        {c->log_interval <= 0, "--log-interval", c->log_interval, "a positive number of iterations"},
        {c->eval_interval < 0, "--eval-interval", c->eval_interval, ">= 0 (0: at the end only)"},
        {c->eval_iters < 0, "--eval-iters", c->eval_iters, ">= 0"},
        {c->save_interval < 0, "--save-interval", c->save_interval, ">= 0 (0: at the end only)"},
        {c->exit_interval < 0, "--exit-interval", c->exit_interval, ">= 0"},
        {c->keep_last < 0, "--keep-last", c->keep_last, ">= 0 (0 keeps all)"},
        {c->zero.zero_stage < 0 || c->zero.zero_stage > 3, "--zero-stage", c->zero.zero_stage, "0, 1, 2 or 3"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (rules[i].bad)
            return lj_fail(LJ_ERR_ARG, "%s %.9g: expected %s%s%s%s", rules[i].flag, rules[i].value, rules[i].expected,
                           source ? " (the value after " : "", source ? source : "", source ? ")" : "");
    LJ_TRY(lj_cli_check_optimizer(&c->lr, &c->adamw, source));
    return LJ_OK;
}

/* --split as the loader will read it (a Megatron split string that fits lj_loader_config's field),
 * checked before anything is loaded. */
static lj_status check_split(const char *split) {
    double fractions[3];
    const size_t room = sizeof ((lj_loader_config *)0)->split;
    if (strlen(split) >= room)
        return lj_fail(LJ_ERR_ARG, "--split '%.40s...': %zu characters, more than %zu: expected up to three "
                                   "non-negative weights like 969,30,1", split, strlen(split), room - 1);
    return lj_loader_parse_split(split, fractions);
}

/* Every flag of `ljperf train`: ljperf's own, the monitoring ones, FP8's, Megatron-LM's. */
typedef struct {
    const char *model, *device, *granularity, *method, *hf_dtype;
    const char *decay_style, *recompute, *mbs, *ds_path, *grad_dtype;
    const char *device_memory, *margin, *tokenizer, *tokenizer_type;
    int num_layers, decay_iters, warmup_iters, train_iters, gbs, nproc, reduce_bucket_size;
    lj_train_given given; /* the flags a DeepSpeed config's values are checked against */
    lj_flag_list data;
    lj_cli_fp8 fp8;
    lj_cli_moments moments;
    lj_cli_megatron mg;
    int deterministic; /* --deterministic-mode */
    int override_tokenizer; /* --override-tokenizer */
    const char *nnodes, *master_addr; /* torchrun's --nnodes, --master-addr */
    int node_rank, master_port;       /* torchrun's --node-rank, --master-port (0: not given) */
} train_args;

/* --deepspeed ds_config.json, read and applied to c in one step (lj_train_apply_deepspeed):
 * batch sizes with the launcher's world size, clipping, AdamW, the scheduler, ZeRO, offload. */
static lj_status apply_deepspeed(lj_train_config *c, const train_args *a, const char *path, int *gbs,
                                 int *micro_batch_size) {
    lj_deepspeed_config ds;
    LJ_TRY(lj_deepspeed_load(&ds, path));
    lj_dist_env env;
    LJ_TRY(lj_dist_env_detect(&env));
    lj_train_given g = a->given;
    g.lr_warmup_iters = a->warmup_iters;
    return lj_train_apply_deepspeed(c, &g, &ds, env.world_size > 0 ? env.world_size : 1, gbs, micro_batch_size);
}

/* The tokenizer the training data was prepared with, as the datasets' sidecars record it
 * (data/mmidx.h): *found 0 when none records one (Megatron's datasets, llm.c shards,
 * --mock-data). Two datasets of the blend that record different tokenizers are refused naming
 * both, unless `override` (then a warning). `from` (LJ_PATH_MAX bytes) gets the dataset's prefix. */
static lj_status data_tokenizer(const lj_train_config *c, int override, int rank0, lj_mmidx_tokenizer *rec, int *found,
                                char *from) {
    *found = 0;
    if (c->mock_data) return LJ_OK;
    lj_loader_config *lc = lj_calloc(1, sizeof *lc);
    lj_status s = LJ_OK;
    for (int part = 0; part < 2 && s == LJ_OK; part++) {
        const int n = part ? c->num_valid_data_args : c->num_data_args;
        if (n == 0) continue;
        s = lj_loader_parse_data_path(lc, n, (const char *const *)(part ? c->valid_data_args : c->data_args));
        for (int i = 0; s == LJ_OK && i < lc->num_datasets; i++) {
            char prefix[LJ_PATH_MAX];
            snprintf(prefix, sizeof prefix, "%s", lc->paths[i]);
            const size_t len = strlen(prefix); /* PREFIX.bin / PREFIX.idx are accepted for PREFIX */
            if (len > 4 && (!strcmp(prefix + len - 4, ".bin") || !strcmp(prefix + len - 4, ".idx"))) {
                char probe[LJ_PATH_MAX];
                snprintf(probe, sizeof probe, "%.*s.idx", (int)(len - 4), prefix);
                if (access(probe, F_OK) == 0) prefix[len - 4] = '\0';
            }
            lj_mmidx_tokenizer t;
            int has = 0;
            s = lj_mmidx_read_tokenizer(prefix, &t, &has);
            if (s != LJ_OK || !has) continue;
            if (*found && t.ids_xxh3_64 != rec->ids_xxh3_64) {
                if (!override)
                    s = lj_fail(LJ_ERR_ARG, "--data-path: %s was prepared with the tokenizer %s (vocabulary %d), %s with %s "
                                            "(vocabulary %d): the same ids would mean other text in each; prepare them "
                                            "with one tokenizer, or give --override-tokenizer to train on both anyway",
                                from, rec->name, rec->vocab_size, prefix, t.name, t.vocab_size);
                else if (rank0)
                    lj_log_warn("--override-tokenizer: %s (%s) and %s (%s) were prepared with different tokenizers", from,
                                rec->name, prefix, t.name);
                continue;
            }
            if (!*found) {
                *rec = t;
                snprintf(from, LJ_PATH_MAX, "%s", prefix);
                *found = 1;
            }
        }
    }
    free(lc);
    return s;
}

/* --tokenizer-model (or --tokenizer) against the data's recorded tokenizer: the same one (bytes or
 * ids), or refused naming both unless `override`. */
static lj_status check_given_tokenizer(const char *given, const lj_mmidx_tokenizer *rec, const char *from, int override,
                                       int rank0) {
    char path[LJ_PATH_MAX];
    LJ_TRY(lj_tokenizer_resolve(given, "--tokenizer-model", path, sizeof path));
    int same = 0;
    if (lj_mmidx_tokenizer_matches(rec, path, &same) != LJ_OK) {
        lj_error_prefix("--tokenizer-model");
        return LJ_ERR_ARG;
    }
    if (same) return LJ_OK;
    if (override) {
        if (rank0)
            lj_log_warn("--override-tokenizer: --tokenizer-model %s is not the tokenizer %s was prepared with (%s)", given,
                        from, rec->name);
        return LJ_OK;
    }
    return lj_fail(LJ_ERR_ARG, "--tokenizer-model %s is not the tokenizer %s was prepared with (%s, vocabulary %d, "
                               "recorded in %s%s): its ids would mean other text; leave the flag out to use the data's, "
                               "give --tokenizer-model %s, or --override-tokenizer to train anyway",
                   given, from, rec->name, rec->vocab_size, from, LJ_MMIDX_FINGERPRINT_SUFFIX, rec->name);
}

/* The tokenizer the HF exports carry (--save only): --tokenizer-model (a tokenizer.json or a
 * directory holding one; the data's recorded one when it was not given), else, for data that
 * records none, the set-up script's default when it exists and fits the model's vocabulary. A
 * given tokenizer that does not load or fit is an error; the default is then left out with a
 * note. `buf` (LJ_PATH_MAX bytes) holds the path c->tokenizer points to. */
static lj_status resolve_tokenizer(lj_train_config *c, const char *given, const char *type, int data_recorded,
                                   char *buf) {
    if (type && (!strcmp(type, "NullTokenizer") || !strcmp(type, "GPT2BPETokenizer"))) {
        if (c->save)
            lj_log_info("--tokenizer-type %s: no tokenizer in the Hugging Face exports (ljperf writes tokenizer.json "
                        "files from --tokenizer-type HuggingFaceTokenizer --tokenizer-model PATH)",
                        type);
        return LJ_OK;
    }
    if (type && strcmp(type, "HuggingFaceTokenizer") != 0)
        return lj_fail(LJ_ERR_ARG, "--tokenizer-type: '%s' is not one of HuggingFaceTokenizer, Llama3Tokenizer, "
                                   "NullTokenizer, GPT2BPETokenizer", type);
    if (!c->save) return LJ_OK;
    if (given) {
        LJ_TRY(lj_tokenizer_resolve(given, "--tokenizer-model", buf, LJ_PATH_MAX));
        LJ_TRY(lj_tokenizer_check_export(buf, &c->model, "--tokenizer-model"));
        c->tokenizer = buf;
        return LJ_OK;
    }
    if (data_recorded) return LJ_OK; /* the data's tokenizer is not here: said already */
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

/* Megatron's resume pattern (--load and --save the same directory) with nothing there yet starts
 * from scratch, as Megatron-LM does; anything else without a checkpoint stays an error. */
static int load_is_empty(const char *load, const char *save, int exit_on_missing) {
    if (exit_on_missing || !save || strcmp(load, save) != 0) return 0;
    static const char *const probes[] = {LJ_CKPT_STATE_FILE, LJ_CKPT_LATEST_FILE, "config.json"};
    char path[LJ_PATH_MAX];
    for (int k = 0; k < 3; k++)
        if (lj_path_join(path, load, probes[k]) != LJ_OK || access(path, F_OK) == 0) return 0;
    DIR *d = opendir(load);
    int empty = 1;
    for (struct dirent *e; d && (e = readdir(d));) /* iter_NNNNNNN: a complete save; iter_NNNNNNN.tmp.PID: a killed one */
        if (!strncmp(e->d_name, "iter_", 5) && e->d_name[5] && strspn(e->d_name + 5, "0123456789") == strlen(e->d_name + 5))
            empty = 0;
    if (d) closedir(d);
    return empty;
}

static int train_rows(train_args *a, lj_train_config *c, lj_cli_monitor *mon, lj_flag *rows, int max) {
    const lj_flag own[] = {
        {.name = "--model", .kind = LJ_FLAG_STR, .dest = &a->model},
        {.name = "--device", .kind = LJ_FLAG_STR, .dest = &a->device},
        {.name = "--grad-dtype", .kind = LJ_FLAG_STR, .dest = &a->grad_dtype},
        {.name = "--data-path", .kind = LJ_FLAG_LIST, .dest = &a->data},
        {.name = "--data", .kind = LJ_FLAG_LIST, .dest = &a->data},
        {.name = "--split", .kind = LJ_FLAG_STR, .dest = &c->split},
        {.name = "--seq-length", .kind = LJ_FLAG_INT, .dest = &c->seq_length, .min = 1},
        {.name = "--micro-batch-size", .kind = LJ_FLAG_STR, .dest = &a->mbs},
        {.name = "--recompute", .kind = LJ_FLAG_STR, .dest = &a->recompute},
        LJ_CLI_DEVICE_MEMORY_ROW(&a->device_memory),
        LJ_CLI_MARGIN_ROW(&a->margin),
        {.name = "--global-batch-size", .kind = LJ_FLAG_INT, .dest = &a->gbs, .min = 1},
        {.name = "--train-iters", .kind = LJ_FLAG_INT, .dest = &a->train_iters},
        {.name = "--lr", .kind = LJ_FLAG_DOUBLE, .dest = &c->lr.lr, .given = &a->given.lr},
        {.name = "--min-lr", .kind = LJ_FLAG_DOUBLE, .dest = &c->lr.min_lr},
        {.name = "--lr-warmup-iters", .kind = LJ_FLAG_INT, .dest = &a->warmup_iters},
        {.name = "--lr-decay-iters", .kind = LJ_FLAG_INT, .dest = &a->decay_iters},
        {.name = "--lr-decay-style", .kind = LJ_FLAG_STR, .dest = &a->decay_style},
        {.name = "--weight-decay", .kind = LJ_FLAG_FLOAT, .dest = &c->adamw.weight_decay,
         .given = &a->given.weight_decay},
        {.name = "--weight-decay-all", .kind = LJ_FLAG_SWITCH, .dest = &c->adamw.wd_rule, .ival = LJ_WD_ALL},
        {.name = "--apply-wd-to-qk-layernorm", .kind = LJ_FLAG_SWITCH, .dest = &c->adamw.wd_qk_norm, .ival = 1},
        {.name = "--adam-beta1", .kind = LJ_FLAG_FLOAT, .dest = &c->adamw.beta1, .given = &a->given.adam_beta1},
        {.name = "--adam-beta2", .kind = LJ_FLAG_FLOAT, .dest = &c->adamw.beta2, .given = &a->given.adam_beta2},
        {.name = "--adam-eps", .kind = LJ_FLAG_FLOAT, .dest = &c->adamw.eps, .given = &a->given.adam_eps},
        {.name = "--clip-grad", .kind = LJ_FLAG_FLOAT, .dest = &c->adamw.max_grad_norm, .given = &a->given.clip_grad},
        {.name = "--seed", .kind = LJ_FLAG_U64, .dest = &c->seed},
        {.name = "--recompute-granularity", .kind = LJ_FLAG_STR, .dest = &a->granularity},
        {.name = "--recompute-method", .kind = LJ_FLAG_STR, .dest = &a->method},
        {.name = "--recompute-num-layers", .kind = LJ_FLAG_INT, .dest = &a->num_layers},
        {.name = "--no-fusion", .kind = LJ_FLAG_SWITCH, .dest = &c->fused},
        {.name = "--deterministic-mode", .kind = LJ_FLAG_SWITCH, .dest = &a->deterministic, .ival = 1},
        {.name = "--save", .kind = LJ_FLAG_STR, .dest = &c->save},
        {.name = "--load", .kind = LJ_FLAG_STR, .dest = &c->load},
        {.name = "--save-interval", .kind = LJ_FLAG_INT, .dest = &c->save_interval},
        {.name = "--exit-interval", .kind = LJ_FLAG_INT, .dest = &c->exit_interval},
        {.name = "--keep-last", .kind = LJ_FLAG_INT, .dest = &c->keep_last},
        {.name = "--hf-dtype", .kind = LJ_FLAG_STR, .dest = &a->hf_dtype},
        {.name = "--no-save-hf", .kind = LJ_FLAG_SWITCH, .dest = &c->no_save_hf, .ival = 1},
        {.name = "--override-data", .kind = LJ_FLAG_SWITCH, .dest = &c->override_data, .ival = 1},
        {.name = "--override-tokenizer", .kind = LJ_FLAG_SWITCH, .dest = &a->override_tokenizer, .ival = 1},
        {.name = "--tokenizer-model", .kind = LJ_FLAG_STR, .dest = &a->tokenizer},
        {.name = "--tokenizer", .kind = LJ_FLAG_STR, .dest = &a->tokenizer},
        {.name = "--tokenizer-type", .kind = LJ_FLAG_STR, .dest = &a->tokenizer_type},
        {.name = "--log-interval", .kind = LJ_FLAG_INT, .dest = &c->log_interval, .min = 1},
        {.name = "--eval-interval", .kind = LJ_FLAG_INT, .dest = &c->eval_interval},
        {.name = "--eval-iters", .kind = LJ_FLAG_INT, .dest = &c->eval_iters},
        {.name = "--log-json", .kind = LJ_FLAG_STR, .dest = &c->log_json},
        {.name = "--quiet", .kind = LJ_FLAG_SWITCH, .dest = &c->quiet, .ival = 1},
        {.name = "--check-for-nan-in-loss-and-grad", .kind = LJ_FLAG_SWITCH, .dest = &c->check_nan, .ival = 1},
        {.name = "--no-check-for-nan-in-loss-and-grad", .kind = LJ_FLAG_SWITCH, .dest = &c->check_nan},
        {.name = "--max-consecutive-skipped-iterations", .kind = LJ_FLAG_INT, .dest = &c->max_skipped},
        {.name = "--deepspeed", .kind = LJ_FLAG_STR, .dest = &a->ds_path},
        {.name = "--deepspeed_config", .kind = LJ_FLAG_STR, .dest = &a->ds_path},
        {.name = "--zero-stage", .kind = LJ_FLAG_INT, .dest = &c->zero.zero_stage, .given = &a->given.zero_stage, .min = 0, .max = 3},
        {.name = "--overlap-comm", .kind = LJ_FLAG_SWITCH, .dest = &c->zero.overlap_comm, .ival = 1,
         .given = &a->given.overlap_comm},
        {.name = "--no-overlap-comm", .kind = LJ_FLAG_SWITCH, .dest = &c->zero.overlap_comm,
         .given = &a->given.overlap_comm},
        {.name = "--offload-optimizer", .kind = LJ_FLAG_FUNC, .dest = &c->offload_optimizer, .fn = lj_cli_offload,
         .given = &a->given.offload_optimizer},
        {.name = "--reduce-bucket-size", .kind = LJ_FLAG_INT, .dest = &a->reduce_bucket_size,
         .given = &a->given.reduce_bucket_size, .min = 1},
        {.name = "--nproc-per-node", .kind = LJ_FLAG_INT, .dest = &a->nproc, .min = 1}, /* read by lj_cli_maybe_launch */
        /* torchrun's other flags of one node, read by lj_cli_maybe_launch too (and checked here) */
        {.name = "--nnodes", .kind = LJ_FLAG_STR, .dest = &a->nnodes},
        {.name = "--node-rank", .kind = LJ_FLAG_INT, .dest = &a->node_rank},
        {.name = "--master-addr", .kind = LJ_FLAG_STR, .dest = &a->master_addr},
        {.name = "--master-port", .kind = LJ_FLAG_INT, .dest = &a->master_port},
    };
    const int n = (int)(sizeof own / sizeof own[0]);
    LJ_ASSERT(n <= max);
    memcpy(rows, own, sizeof own);
    int k = n + lj_cli_monitor_rows(mon, rows + n, max - n);
    k += lj_cli_fp8_rows(&a->fp8, rows + k, max - k);
    k += lj_cli_moments_rows(&a->moments, rows + k, max - k);
    return k + lj_cli_megatron_rows(&a->mg, rows + k, max - k);
}

#define TRAIN_MAX_ROWS 320

/* `tok_buf` and `load_buf` (LJ_PATH_MAX bytes each) hold paths the config points to. */
static lj_status parse(int argc, char **argv, lj_train_config *c, lj_cli_monitor *mon, char *tok_buf, char *load_buf,
                       int *help) {
    train_args a;
    memset(&a, 0, sizeof a);
    a.device = "auto";
    a.num_layers = a.decay_iters = a.warmup_iters = a.train_iters = -1;
    lj_cli_fp8_init(&a.fp8);
    lj_cli_moments_init(&a.moments);
    lj_cli_megatron_init(&a.mg);
    lj_train_config_defaults(c);
    lj_flag rows[TRAIN_MAX_ROWS];
    const int nrows = train_rows(&a, c, mon, rows, TRAIN_MAX_ROWS);
    lj_flags_result res;
    LJ_TRY(lj_flags_parse("train", rows, nrows, argc, argv, 0, &res));
    if (res.help) {
        *help = 1;
        return LJ_OK;
    }
    const lj_cli_megatron *mg = &a.mg;
    const char *model = a.model, *device = a.device, *granularity = a.granularity, *method = a.method;
    const char *hf_dtype = a.hf_dtype, *decay_style = a.decay_style, *recompute = a.recompute, *mbs = a.mbs;
    const char *ds_path = a.ds_path, *grad_dtype = a.grad_dtype, *device_memory = a.device_memory;
    const char *margin = a.margin, *tokenizer = a.tokenizer, *tokenizer_type = a.tokenizer_type;
    const int num_layers = a.num_layers;
    /* Megatron's Llama3Tokenizer reads Meta's tiktoken file: here the same model's tokenizer.json */
    if (tokenizer_type && !strcmp(tokenizer_type, "Llama3Tokenizer")) {
        tokenizer_type = "HuggingFaceTokenizer";
        if (!tokenizer) tokenizer = "llama3";
    }
    int gbs = a.gbs;
    /* 0 means "micro-batch x ranks" below: the row's minimum (1) keeps it from the command line */
    if (a.given.reduce_bucket_size) c->zero.zero_reduce_bucket_numel = a.reduce_bucket_size;
    if (a.given.offload_optimizer && c->offload_optimizer) c->offload_source = "--offload-optimizer cpu";
    LJ_TRY(lj_cli_monitor_check(mon));
    lj_dist_env env;
    const int rank0 = lj_dist_env_detect(&env) != LJ_OK || env.rank == 0;
    if (mg->logging_level >= 30) lj_log_set_quiet(1); /* Megatron's --logging-level (Python's WARNING and up) */
    /* data: --data-path, Megatron's --train-data-path / --valid-data-path, or --mock-data. As in
     * Megatron-LM's dataset provider, --mock-data wins: the paths beside it are not read. */
    if (mg->mock_data && (a.data.count > 0 || mg->train_data.count > 0 || mg->valid_data.count > 0)) {
        if (rank0)
            lj_log_info("--mock-data: training on synthetic documents; --data-path/--train-data-path/--valid-data-path "
                        "are not read (Megatron-LM's precedence)");
        a.data.count = a.mg.train_data.count = a.mg.valid_data.count = 0;
    }
    if (a.data.count > 0 && mg->train_data.count > 0)
        return lj_fail(LJ_ERR_ARG, "--data-path and --train-data-path exclude each other (give one)");
    if (mg->valid_data.count > 0 && mg->train_data.count == 0)
        return lj_fail(LJ_ERR_ARG, "--valid-data-path needs --train-data-path (with --data-path, --split sets aside the "
                                   "validation documents)");
    c->num_data_args = a.data.count;
    c->data_args = a.data.values;
    if (mg->train_data.count > 0) {
        c->num_data_args = mg->train_data.count;
        c->data_args = mg->train_data.values;
        c->split = "1,0,0";
        c->num_valid_data_args = mg->valid_data.count;
        c->valid_data_args = mg->valid_data.values;
    }
    c->mock_data = mg->mock_data;
    c->async_save = mg->async_save;
    c->ckpt_format = mg->ckpt_format && (!strcmp(mg->ckpt_format, "torch") || !strcmp(mg->ckpt_format, "single"));
    /* 1: LJ_CKPT_FORMAT_TORCH, the single file */
    if (mg->test_data.count > 0 && rank0) lj_log_info("--test-data-path: accepted; ljperf runs no test pass");
    if (c->num_data_args == 0 && !c->mock_data)
        return lj_fail(LJ_ERR_ARG, "--data-path is required (make one with `ljperf prepare`, or train on synthetic "
                                   "documents with --mock-data)");
    /* the tokenizer the data was prepared with: checked against --tokenizer-model, else used */
    lj_mmidx_tokenizer rec;
    int recorded = 0;
    char rec_from[LJ_PATH_MAX], rec_path[LJ_PATH_MAX];
    LJ_TRY(data_tokenizer(c, a.override_tokenizer, rank0, &rec, &recorded, rec_from));
    const int hf_type = !tokenizer_type || !strcmp(tokenizer_type, "HuggingFaceTokenizer");
    if (recorded && tokenizer && hf_type) LJ_TRY(check_given_tokenizer(tokenizer, &rec, rec_from, a.override_tokenizer, rank0));
    if (recorded && !tokenizer && hf_type) {
        if (lj_mmidx_tokenizer_locate(&rec, rec_path, sizeof rec_path)) {
            tokenizer = rec_path;
            if (!tokenizer_type && lj_cli_megatron_has_shape(mg)) tokenizer_type = "HuggingFaceTokenizer";
            if (rank0 && c->save)
                lj_log_info("tokenizer: %s, the one %s was prepared with (%s), for the Hugging Face exports", rec_path,
                            rec_from, rec.name);
        } else if (rank0) {
            lj_log_info("no tokenizer in the Hugging Face exports: %s was prepared with %s, which is not at %s any more "
                        "(nor found by its name); --tokenizer-model PATH adds it", rec_from, rec.name, rec.path);
        }
    }
    if (c->load && load_is_empty(c->load, c->save, mg->exit_on_missing_checkpoint)) {
        if (rank0)
            lj_log_warn("--load %s: no complete checkpoint there yet; starting from scratch (as Megatron-LM does; "
                        "--exit-on-missing-checkpoint makes this an error)",
                        c->load);
        c->load = NULL;
    }
    if (mg->finetune && !c->load) return lj_fail(LJ_ERR_ARG, "--finetune needs --load DIR (the weights to start from)");
    struct stat load_st;
    if (c->load && stat(c->load, &load_st) != 0 && !lj_hf_repo_id_like(c->load)) /* ORG/NAME: the HF cache, later */
        return lj_fail(LJ_ERR_IO, "--load %s: %s: expected a training checkpoint directory (what --save writes) or a "
                                  "Hugging Face model folder", c->load, strerror(errno));
    c->no_load_optim = mg->no_load_optim && !mg->finetune; /* --finetune loads no optimizer state anyway */
    /* the values alone first: nothing is loaded or started for a run that cannot begin */
    if (mbs && strcmp(mbs, "auto") == 0) c->micro_batch_size = 0;
    else if (mbs) {
        LJ_TRY(lj_flags_parse_int("--micro-batch-size", mbs, &c->micro_batch_size));
        if (c->micro_batch_size <= 0) return lj_fail(LJ_ERR_ARG, "--micro-batch-size %d: must be positive or auto", c->micro_batch_size);
    }
    if (decay_style) LJ_TRY(lj_lr_parse_style(decay_style, &c->lr.style));
    LJ_TRY(check_split(c->split));
    /* -1 is "not given": the rows' minimum (0) keeps negative values from the command line */
    c->train_iters = a.train_iters >= 0 ? a.train_iters : 100; /* until the schedule says (--train-samples) */
    LJ_TRY(check_ranges(c, gbs, NULL));
    LJ_TRY(lj_cli_torchrun_check(a.nnodes, a.node_rank, a.master_port));
    LJ_TRY(lj_cli_megatron_profile(mg, rank0, c));
    if (c->record_memory_history) lj_ops_memory_history(1); /* before the backend allocates anything */
    const int shape = lj_cli_megatron_has_shape(mg);
    if (shape && model)
        return lj_fail(LJ_ERR_ARG, "--model %s and Megatron's model shape flags (--num-layers, ...) exclude each "
                                   "other: give the model by --model or by its shape", model);
    if (mg->finetune) {
        /* the weights of the checkpoint (its HF export), nothing else of its state */
        char root[LJ_PATH_MAX], hf[LJ_PATH_MAX];
        int iteration, is_state;
        LJ_TRY(lj_ckpt_resolve_load(c->load, root, &iteration, &is_state, hf));
        if (is_state) {
            strcpy(load_buf, hf);
            c->load = load_buf;
        }
        if (rank0) lj_log_info("--finetune: the weights of %s, iteration 0, a new optimizer and data order", c->load);
    }
    if (shape) {
        LJ_TRY(lj_cli_megatron_model(mg, tokenizer_type, tokenizer, c->seq_length, rank0, &c->model));
    } else if (!model && c->load) {
        /* --load alone: the model is the checkpoint's (its config.json) */
        char root[LJ_PATH_MAX], hf[LJ_PATH_MAX];
        int iteration, is_state;
        LJ_TRY(lj_ckpt_resolve_load(c->load, root, &iteration, &is_state, hf));
        LJ_TRY(lj_config_resolve(hf, &c->model));
    } else {
        LJ_TRY(lj_cli_model(model ? model : "llama3-tiny", &c->model));
    }
    if (!shape && mg->vocab_size > 0 && mg->vocab_size != c->model.vocab_size && rank0)
        lj_log_info("--vocab-size %d: the model's vocabulary (%d) comes from %s", mg->vocab_size, c->model.vocab_size,
                    model ? "--model" : c->load ? "the checkpoint" : "the default model");
    if (mg->apply_layernorm_1p && c->adamw.wd_rule == LJ_WD_ALL)
        return lj_fail(LJ_ERR_ARG, "--apply-layernorm-1p with --weight-decay-all: decaying 1 + g towards 0 is not "
                                   "decaying g; ljperf stores the plain weight (drop one of the two)");
    if (!isnan(mg->exit_duration_in_mins)) {
        if (!(mg->exit_duration_in_mins > 0))
            return lj_fail(LJ_ERR_ARG, "--exit-duration-in-mins %g: expected a positive number of minutes",
                           mg->exit_duration_in_mins);
        c->exit_duration_min = mg->exit_duration_in_mins;
    }
    if (ds_path) {
        int mb = c->micro_batch_size > 0 && mbs ? c->micro_batch_size : 0;
        LJ_TRY(apply_deepspeed(c, &a, ds_path, &gbs, &mb));
        LJ_TRY(lj_cli_monitor_deepspeed(mon, ds_path));
        c->micro_batch_size = mb;
        LJ_TRY(check_ranges(c, gbs, ds_path)); /* the file's values too */
    }
    if (c->seq_length > c->model.max_position_embeddings)
        return lj_fail(LJ_ERR_ARG, "--seq-length %d is above the model's max_position_embeddings: expected %d or less",
                       c->seq_length, c->model.max_position_embeddings);
    LJ_TRY(lj_cli_device(device, a.deterministic, &c->ops));
    LJ_TRY(lj_cli_megatron_check(mg, c->ops->name, a.given.zero_stage || ds_path, &c->zero.zero_stage, &grad_dtype,
                                 rank0));
    if (grad_dtype && ds_path && c->deepspeed.grad_accum_dtype[0] && strcmp(grad_dtype, c->deepspeed.grad_accum_dtype))
        return lj_fail(LJ_ERR_ARG,
                       "%s %s disagrees with %s: data_types.grad_accum_dtype \"%s\": make them agree or leave one out",
                       a.grad_dtype ? "--grad-dtype" : mg->accumulate_allreduce_grads_in_fp32
                                                           ? "--accumulate-allreduce-grads-in-fp32: the gradient dtype"
                                                           : "--grad-reduce-in-bf16: the gradient dtype",
                       grad_dtype, ds_path, c->deepspeed.grad_accum_dtype);
    if (grad_dtype) LJ_TRY(lj_cli_grad_dtype("--grad-dtype", grad_dtype, &c->ops));
    else if (ds_path && c->deepspeed.grad_accum_dtype[0]) {
        char what[300];
        snprintf(what, sizeof what, "%s: data_types.grad_accum_dtype", ds_path);
        LJ_TRY(lj_cli_grad_dtype(what, c->deepspeed.grad_accum_dtype, &c->ops));
    }
    LJ_TRY(lj_cli_fp8_resolve(&a.fp8, c->ops, &c->model, &c->linear_recipe, &c->fp8));
    LJ_TRY(lj_cli_megatron_fp8_param_gather(a.fp8.param_gather, c->linear_recipe == LJ_LINEAR_RECIPE_FP8 ? &c->fp8 : NULL,
                                            &c->model, c->zero.zero_stage,
                                            lj_dist_env_detect(&env) == LJ_OK && env.world_size > 1 ? env.world_size : 1,
                                            c->offload_optimizer, c->ops->name, rank0));
    LJ_TRY(lj_cli_moments_resolve(&a.moments, c->zero.zero_stage,
                                  lj_dist_env_detect(&env) == LJ_OK && env.world_size > 1 ? env.world_size : 1,
                                  c->offload_optimizer
                                      ? (c->offload_source ? c->offload_source : "--offload-optimizer cpu")
                                      : NULL,
                                  rank0, &c->exp_avg_dtype, &c->exp_avg_sq_dtype));
    LJ_TRY(lj_cli_megatron_doc_mask(mg, &c->model, c->mock_data, &c->doc_mask, rank0));
    if (c->ops->config.deterministic && rank0 && strcmp(c->ops->name, "cuda") == 0 && c->doc_mask.reset_attention_mask)
        lj_log_warn("--deterministic-mode with --reset-attention-mask: attention within documents runs ljperf's own "
                    "flash kernels, whose backward adds dQ with atomics, so steps at sequences above 128 tokens may "
                    "differ from run to run in the last bits");
    const int accumulation = gbs > 0 && c->micro_batch_size > 0 ? gbs / c->micro_batch_size : 1;
    const lj_cli_recompute_request rq = {
        .cmd = "train",
        .cfg = &c->model,
        .ops = c->ops,
        .seq_length = c->seq_length,
        .grad_accum_steps = accumulation,
        .zero_stage = c->zero.zero_stage,
        .recompute = recompute,
        .granularity = granularity,
        .method = method,
        .num_layers = num_layers,
        .device_memory = device_memory,
        .margin = margin,
        .linear_recipe = c->linear_recipe,
        .fp8 = &c->fp8,
        .offload_optimizer = c->offload_optimizer,
        .exp_avg_dtype = c->exp_avg_dtype,
        .exp_avg_sq_dtype = c->exp_avg_sq_dtype,
        .plan_bytes = &c->planned_plan_bytes,
    };
    LJ_TRY(lj_cli_recompute(&rq, &c->micro_batch_size, c->recompute));
    LJ_TRY(lj_cli_fp8_check_tokens(c->linear_recipe, &c->fp8, c->ops, &c->model, c->micro_batch_size,
                                   c->seq_length));
    /* default: one micro-batch per rank per step (Megatron's default global batch) */
    const int world = lj_dist_env_detect(&env) == LJ_OK && env.world_size > 1 ? env.world_size : 1;
    c->global_batch_size = gbs > 0 ? gbs : c->micro_batch_size * world;
    int train_iters = a.train_iters;
    LJ_TRY(lj_cli_megatron_schedule(mg, c->global_batch_size, a.warmup_iters, a.decay_iters, rank0, &train_iters,
                                    &c->lr, &c->adamw, &c->rampup));
    c->train_iters = train_iters;
    if (c->lr.deepspeed.type != LJ_DS_SCHEDULER_NONE && (c->adamw.decoupled_lr || c->rampup.start > 0))
        return lj_fail(LJ_ERR_ARG, "%s with %s's \"scheduler\": DeepSpeed's schedulers have one learning rate and a "
                                   "constant batch; drop the \"scheduler\" block to use Megatron-LM's schedule (--lr, "
                                   "--lr-decay-style, ...)",
                       c->adamw.decoupled_lr ? "--decoupled-lr" : "--rampup-batch-size", ds_path);
    c->hf_dtype = c->ops->param_dtype == LJ_DTYPE_F32 ? LJ_DTYPE_F32 : LJ_DTYPE_BF16;
    if (hf_dtype) {
        if (!strcmp(hf_dtype, "bf16")) c->hf_dtype = LJ_DTYPE_BF16;
        else if (!strcmp(hf_dtype, "fp32")) c->hf_dtype = LJ_DTYPE_F32;
        else return lj_fail(LJ_ERR_ARG, "--hf-dtype: '%s' is not one of bf16, fp32", hf_dtype);
    }
    lj_cli_monitor_apply(mon, c, world == 1 || env.rank == 0);
    LJ_TRY(resolve_tokenizer(c, tokenizer, tokenizer_type, recorded, tok_buf));
    if (rank0) lj_flags_log_ignored("train", &res);
    return LJ_OK;
}

int lj_cli_train(int argc, char **argv) {
    int status;
    if (lj_cli_maybe_launch("train", argc, argv, &status)) return status;
    if (lj_cli_train_is_vl(argc, argv)) return lj_cli_train_vl(argc, argv); /* cli/train_vl.c */
    lj_train_config cfg;
    lj_cli_monitor mon;
    memset(&mon, 0, sizeof mon);
    char tokenizer[LJ_PATH_MAX], load[LJ_PATH_MAX];
    int help = 0;
    char *command = lj_cli_command_line("train", argc, argv); /* before the parse, which may move argv's pointers */
    if (parse(argc, argv, &cfg, &mon, tokenizer, load, &help) != LJ_OK) {
        free(command);
        return lj_cli_error("train");
    }
    if (help) {
        free(command);
        usage(stdout);
        return 0;
    }
    cfg.command_line = command;
    lj_status s = lj_train_run(&cfg);
    free(command);
    if (s == LJ_ERR_INTERRUPTED) {
        lj_dist_env env;
        const int rank0 = lj_dist_env_detect(&env) != LJ_OK || env.rank == 0; /* one line per job */
        if (rank0) fprintf(stderr, "ljperf train: %s\n", lj_error_message());
        return cfg.save ? 0 : 130;
    }
    return s == LJ_OK ? 0 : lj_cli_error("train");
}

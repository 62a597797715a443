/* train_vl.c: `ljperf train` of a Qwen3-VL model: which runs are vision-language ones, and their
 * flags (Megatron-LM names; the freezing flags are Megatron-Bridge's Qwen3-VL options) ->
 * lj_vl_train_config -> lj_vl_train_run. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/state.h"
#include "bench/benchmark_vl.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "data/tokenizer.h"
#include "train/vl_train.h"

/* 1 when the JSON file at `path` has "model_type": "qwen3_vl" at its top level. */
static int json_is_vl(const char *path) {
    char *text = NULL;
    size_t len = 0;
    if (lj_file_read_all(path, &text, &len) != LJ_OK) return 0;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    const int vl = cJSON_IsString(t) && strcmp(t->valuestring, "qwen3_vl") == 0;
    cJSON_Delete(j);
    return vl;
}

/* A --model or --load value that names a Qwen3-VL model: a preset qwen3-vl-*, a config.json (or
 * a directory holding one) of model_type qwen3_vl, or a checkpoint (root or iteration directory)
 * written by a VL run. A checkpoint is told by its HF export's config.json, else by state.json's
 * "model_type", both read as they are: a truncated or edited state.safetensors or state.json
 * still names a VL checkpoint, so that the VL loop is the one that reports the damage. */
int lj_cli_names_vl(const char *v) {
    if (!v) return 0;
    if (strncmp(v, "qwen3-vl-", 9) == 0) return 1;
    char path[LJ_PATH_MAX + 32];
    struct stat st;
    if (stat(v, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return json_is_vl(v);
    snprintf(path, sizeof path, "%s/config.json", v);
    if (json_is_vl(path)) return 1;
    char root[LJ_PATH_MAX], hf[LJ_PATH_MAX] = "", iter[LJ_PATH_MAX];
    int it = 0, is_state = 0;
    if (lj_ckpt_resolve_load(v, root, &it, &is_state, hf) != LJ_OK || !is_state) return 0;
    snprintf(path, sizeof path, "%s/config.json", hf);
    if (hf[0] && json_is_vl(path)) return 1;
    if (lj_ckpt_iter_dir(root, it, iter) != LJ_OK) return 0;
    snprintf(path, sizeof path, "%s/%s", iter, LJ_CKPT_STATE_FILE);
    return json_is_vl(path);
}

int lj_cli_model_is_vl(int argc, char **argv) { return lj_cli_names_vl(lj_flags_peek(argc, argv, "--model")); }

int lj_cli_train_is_vl(int argc, char **argv) {
    const char *model = NULL, *load = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--model") == 0 && next) model = next;
        else if (strncmp(a, "--model=", 8) == 0) model = a + 8;
        else if (strcmp(a, "--load") == 0 && next) load = next;
        else if (strncmp(a, "--load=", 7) == 0) load = a + 7;
    }
    if (model) return lj_cli_names_vl(model);
    return load && lj_cli_names_vl(load);
}

/* buf = the directory of the tokenizer files for the HF exports: --tokenizer-model (a name of
 * the set-up script's, a tokenizer.json or its directory), else the set-up script's Qwen3
 * tokenizer when it is there, else "" (exports without a tokenizer, said once). */
static lj_status tokenizer_dir(const char *given, char *buf) {
    buf[0] = 0;
    char path[LJ_PATH_MAX];
    const lj_status s = lj_tokenizer_resolve(given ? given : "qwen3", "--tokenizer-model", path, sizeof path);
    struct stat st;
    if (s != LJ_OK || stat(path, &st) != 0) {
        if (given) return s == LJ_OK ? lj_fail(LJ_ERR_IO, "--tokenizer-model %s: %s is missing", given, path) : s;
        lj_log_info("no tokenizer in the Hugging Face exports (the Qwen3 tokenizer of scripts/setup.sh is missing; "
                    "--tokenizer-model PATH adds one)");
        return LJ_OK;
    }
    char *slash = strrchr(path, '/');
    if (slash) *slash = 0;
    else snprintf(path, sizeof path, ".");
    snprintf(buf, LJ_PATH_MAX, "%s", path);
    return LJ_OK;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ljperf train --model qwen3-vl-tiny|CONFIG --data-path PREFIX [flags]\n"
               "Trains a Qwen3-VL model (CPU or CUDA) from a multimodal dataset (ljperf prepare --image-root).\n"
               "Flags (docs/qwen3-vl.md):\n");
}

int lj_cli_train_vl(int argc, char **argv) {
    lj_vl_train_config c;
    lj_vl_train_config_defaults(&c);
    char *command = lj_cli_command_line("train", argc, argv); /* before the parse moves argv's pointers */
    c.command_line = command;
    const char *decay_style = NULL, *device = "auto", *tokenizer = NULL, *hf_dtype = NULL, *grad_dtype = NULL;
    int warmup = 0, decay = -1; /* -1: not given (the rows' minimum, 0, keeps it from the command line) */
    lj_flag_list data = {0, NULL};
    lj_cli_fp8 fp8;
    lj_cli_fp8_init(&fp8);
    const lj_flag own[] = {
        {.kind = LJ_FLAG_SECTION, .help = "model and data"},
        {.name = "--model", .kind = LJ_FLAG_STR, .dest = &c.model, .help = "NAME|config.json  a Qwen3-VL preset or HF config"},
        {.name = "--device", .kind = LJ_FLAG_STR, .dest = &device, .help = "auto|cpu|cuda  (auto: the GPU if usable)"},
        {.name = "--grad-dtype", .kind = LJ_FLAG_STR, .dest = &grad_dtype,
         .help = "bf16|fp32  CUDA gradient dtype of both towers (bf16)"},
        {.name = "--data-path", .kind = LJ_FLAG_LIST, .dest = &data, .help = "PREFIX  a multimodal dataset"},
        {.name = "--seq-length", .kind = LJ_FLAG_INT, .dest = &c.seq_length, .help = "T  tokens per packed row (256)", .min = 1},
        {.name = "--micro-batch-size", .kind = LJ_FLAG_INT, .dest = &c.micro_batch_size,
         .help = "B  rows per micro-batch (1)", .min = 1, .max = LJ_VL_MAX_MICRO_BATCH},
        {.name = "--global-batch-size", .kind = LJ_FLAG_INT, .dest = &c.global_batch_size, .min = 1,
         .help = "G  rows per optimizer step, a multiple of B: G/B accumulated micro-batches (B)"},
        {.name = "--num-workers", .kind = LJ_FLAG_INT, .dest = &c.num_workers, .help = "N  image decoding threads (2)", .min = 1},
        {.name = "--seed", .kind = LJ_FLAG_U64, .dest = &c.seed, .help = "S  initialisation and data order (1234)"},
        {.kind = LJ_FLAG_SECTION, .help = "memory"},
        {.name = "--recompute", .kind = LJ_FLAG_STR, .dest = &c.recompute,
         .help = "none|selective|full|auto  the decoder's (none; auto: the planner picks per layer)"},
        LJ_CLI_RECOMPUTE_VISION_ROW(&c.vision_recompute),
        {.kind = LJ_FLAG_SECTION, .help = "what trains (Megatron-Bridge's Qwen3-VL options)"},
        {.name = "--freeze-language-model", .kind = LJ_FLAG_SWITCH, .dest = &c.freeze_language_model, .ival = 1,
         .help = "the decoder gets no update (freeze_language_model)"},
        {.name = "--freeze-vision-model", .kind = LJ_FLAG_SWITCH, .dest = &c.freeze_vision_model, .ival = 1,
         .help = "the ViT (patch embedding, position grid, blocks) gets none (freeze_vision_model)"},
        {.name = "--freeze-vision-projection", .kind = LJ_FLAG_SWITCH, .dest = &c.freeze_vision_projection, .ival = 1,
         .help = "the merger and the DeepStack mergers get none (freeze_vision_projection)"},
        {.kind = LJ_FLAG_SECTION, .help = "optimizer"},
        {.name = "--train-iters", .kind = LJ_FLAG_INT, .dest = &c.train_iters, .help = "N  optimizer steps (10)"},
        {.name = "--lr", .kind = LJ_FLAG_DOUBLE, .dest = &c.lr.lr, .help = "LR  peak learning rate (1e-3)"},
        {.name = "--min-lr", .kind = LJ_FLAG_DOUBLE, .dest = &c.lr.min_lr, .help = "LR  floor of the decay (0)"},
        {.name = "--lr-warmup-iters", .kind = LJ_FLAG_INT, .dest = &warmup, .help = "N  linear warm-up (0)"},
        {.name = "--lr-decay-iters", .kind = LJ_FLAG_INT, .dest = &decay, .help = "N  decay length (--train-iters)"},
        {.name = "--lr-decay-style", .kind = LJ_FLAG_STR, .dest = &decay_style, .help = "constant|linear|cosine|... (constant)"},
        {.name = "--weight-decay", .kind = LJ_FLAG_FLOAT, .dest = &c.adamw.weight_decay, .help = "WD  (0)"},
        {.name = "--adam-beta1", .kind = LJ_FLAG_FLOAT, .dest = &c.adamw.beta1, .help = "(0.9)"},
        {.name = "--adam-beta2", .kind = LJ_FLAG_FLOAT, .dest = &c.adamw.beta2, .help = "(0.95)"},
        {.name = "--adam-eps", .kind = LJ_FLAG_FLOAT, .dest = &c.adamw.eps, .help = "(1e-8)"},
        {.name = "--clip-grad", .kind = LJ_FLAG_FLOAT, .dest = &c.adamw.max_grad_norm, .help = "N  global norm (1.0; 0 off)"},
        {.kind = LJ_FLAG_SECTION, .help = "checkpoints and logs"},
        {.name = "--load", .kind = LJ_FLAG_STR, .dest = &c.load, .help = "DIR  resume a checkpoint, or an HF Qwen3-VL directory"},
        {.name = "--save", .kind = LJ_FLAG_STR, .dest = &c.save, .help = "DIR  checkpoint root"},
        {.name = "--save-interval", .kind = LJ_FLAG_INT, .dest = &c.save_interval, .help = "N  (0: at the end only)"},
        {.name = "--keep-last", .kind = LJ_FLAG_INT, .dest = &c.keep_last, .help = "N  iterations kept (2; 0 all)"},
        {.name = "--log-interval", .kind = LJ_FLAG_INT, .dest = &c.log_interval, .help = "N  (1)", .min = 1},
        {.name = "--log-json", .kind = LJ_FLAG_STR, .dest = &c.log_json, .help = "FILE  one JSON line per logged step"},
        {.name = "--tokenizer-model", .kind = LJ_FLAG_STR, .dest = &tokenizer,
         .help = "NAME|DIR  the tokenizer the HF exports carry (qwen3: the set-up script's)"},
        {.name = "--hf-dtype", .kind = LJ_FLAG_STR, .dest = &hf_dtype, .help = "bf16|fp32  the HF export's weights (bf16)"},
        {.name = "--quiet", .kind = LJ_FLAG_SWITCH, .dest = &c.quiet, .ival = 1, .help = "no log lines"},
    };
    /* the FP8 rows of train, benchmark and plan (cli/fp8.c): both towers' block linears */
    const int n_own = (int)(sizeof own / sizeof own[0]);
    lj_flag rows[sizeof own / sizeof own[0] + LJ_CLI_FP8_ROWS];
    memcpy(rows, own, sizeof own);
    const int n_rows = n_own + lj_cli_fp8_rows(&fp8, rows + n_own, LJ_CLI_FP8_ROWS);
    lj_flags_result res;
    if (lj_flags_parse("train", rows, n_rows, argc, argv, 0, &res) != LJ_OK) {
        free(command);
        return lj_cli_error("train");
    }
    if (res.help) {
        usage(stdout);
        lj_flags_print_help(stdout, rows, n_rows);
        lj_flags_result_free(&res);
        free(command);
        return 0;
    }
    lj_flags_result_free(&res);
    lj_status s = lj_cli_check_optimizer(&c.lr, &c.adamw, NULL); /* as train of a text model */
    if (s == LJ_OK) s = lj_cli_device(device, 0, &c.ops);
    if (s == LJ_OK) s = lj_cli_grad_dtype("--grad-dtype", grad_dtype, &c.ops);
    if (s == LJ_OK && data.count > 1)
        s = lj_fail(LJ_ERR_ARG, "--data-path: %d prefixes: expected one multimodal dataset (blending is for text "
                                "datasets)", data.count);
    if (data.count == 1) c.data_path = data.values[0];
    if (s == LJ_OK && decay_style) s = lj_lr_parse_style(decay_style, &c.lr.style);
    c.lr.warmup_steps = warmup;
    c.lr.decay_steps = decay >= 0 ? decay : c.train_iters;
    if (s == LJ_OK && hf_dtype && strcmp(hf_dtype, "fp32") != 0 && strcmp(hf_dtype, "bf16") != 0)
        s = lj_fail(LJ_ERR_ARG, "--hf-dtype: '%s' is not one of bf16, fp32", hf_dtype);
    c.hf_fp32 = hf_dtype && strcmp(hf_dtype, "fp32") == 0;
    if (s == LJ_OK && lj_cli_fp8_given(&fp8)) { /* checked against the model before anything is built */
        lj_vl_config vc;
        s = lj_vl_train_model_config(&c, &vc);
        if (s == LJ_OK)
            s = lj_cli_fp8_resolve_vl(&fp8, c.ops, &vc, c.micro_batch_size, c.seq_length, &c.linear_recipe, &c.fp8);
    }
    char tok[LJ_PATH_MAX];
    if (s == LJ_OK) s = tokenizer_dir(tokenizer, tok);
    c.tokenizer_dir = tok[0] ? tok : NULL;
    if (s == LJ_OK) s = lj_vl_train_run(&c);
    free(command);
    return s == LJ_OK ? 0 : lj_cli_error("train");
}

/* fp8.c: the FP8 recipe's flags (Megatron-LM's names) for `train`, `benchmark` and `plan`: rows of
 * the flag table (lj_cli_fp8_rows), checked against the backend (lj_cli_fp8_resolve). */
#include <string.h>

#include "cli/cli.h"

void lj_cli_fp8_init(lj_cli_fp8 *f) {
    memset(f, 0, sizeof *f);
}

int lj_cli_fp8_rows(lj_cli_fp8 *f, lj_flag *rows, int max) {
    const lj_flag own[] = {
        {.kind = LJ_FLAG_SECTION, .help = "FP8 (the transformer blocks' linears; embedding, lm_head, norms and attention stay bf16):"},
        {.name = "--fp8-format", .kind = LJ_FLAG_STR, .dest = &f->format, .help = "hybrid|e4m3  FP8 training: hybrid = E4M3 forward, E5M2 gradients; e4m3 everywhere (Hopper GPUs; the CPU backend emulates it exactly)"},
        {.name = "--fp8-recipe", .kind = LJ_FLAG_STR, .dest = &f->recipe, .help = "delayed|tensorwise|blockwise  per-tensor scales from an amax history (delayed, the default) or from each tensor's own amax (tensorwise); blockwise: one scale per 1x128 tile of inputs and gradients and per 128x128 block of weights, each from its own amax (DeepSeek-V3)"},
        {.name = "--fp8-amax-history-len", .kind = LJ_FLAG_INT, .dest = &f->history_len, .given = &f->history_len_given, .help = "N  delayed: amax history length (default 1)", .min = 1},
        {.name = "--fp8-amax-compute-algo", .kind = LJ_FLAG_STR, .dest = &f->algo, .help = "max|most_recent  delayed: amax from the history (default most_recent)"},
        {.name = "--fp8-margin", .kind = LJ_FLAG_INT, .dest = &f->margin, .given = &f->margin_given, .help = "M  delayed: scales divided by 2^M (default 0)"},
        {.name = "--first-last-layers-bf16", .kind = LJ_FLAG_SWITCH, .dest = &f->first_last_bf16, .ival = 1, .help = "keep the first and last layers' linears in bf16"},
        {.name = "--num-layers-at-start-in-bf16", .kind = LJ_FLAG_INT, .dest = &f->layers_start, .given = &f->layers_start_given, .help = "N  how many first layers (default 1)"},
        {.name = "--num-layers-at-end-in-bf16", .kind = LJ_FLAG_INT, .dest = &f->layers_end, .given = &f->layers_end_given, .help = "N  how many last layers (default 1)"},
        {.name = "--fp8-param-gather", .kind = LJ_FLAG_SWITCH, .dest = &f->param_gather, .ival = 1, .help = "keep the FP8 linears' weights as FP8, cast once per optimizer step, and under ZeRO-3 all-gather them as FP8 (Megatron-LM's FP8 parameters; delayed and tensorwise; needs a sharded optimizer: --use-distributed-optimizer or --zero-stage 1|2|3)"},
    };
    const int n = (int)(sizeof own / sizeof own[0]);
    LJ_ASSERT(n <= max, "%d rows for %d places", n, max);
    memcpy(rows, own, sizeof own);
    return n;
}

void lj_cli_fp8_usage(FILE *out) {
    lj_cli_fp8 f;
    lj_cli_fp8_init(&f);
    lj_flag rows[LJ_CLI_FP8_ROWS];
    lj_flags_print_help(out, rows, lj_cli_fp8_rows(&f, rows, LJ_CLI_FP8_ROWS));
}

lj_status lj_cli_fp8_resolve(const lj_cli_fp8 *f, const lj_ops *ops, const lj_model_config *cfg,
                             lj_linear_recipe_kind *recipe, lj_linear_fp8_options *o) {
    *recipe = LJ_LINEAR_RECIPE_DEFAULT;
    *o = lj_linear_fp8_defaults();
    /* values no setting takes: refused by name, never replaced by the defaults */
    if (f->history_len_given && f->history_len < 1)
        return lj_fail(LJ_ERR_ARG, "--fp8-amax-history-len %d: must be at least 1", f->history_len);
    if (f->margin_given && f->margin < 0) return lj_fail(LJ_ERR_ARG, "--fp8-margin %d: must be >= 0", f->margin);
    if (f->layers_start_given && f->layers_start < 0)
        return lj_fail(LJ_ERR_ARG, "--num-layers-at-start-in-bf16 %d: must be >= 0", f->layers_start);
    if (f->layers_end_given && f->layers_end < 0)
        return lj_fail(LJ_ERR_ARG, "--num-layers-at-end-in-bf16 %d: must be >= 0", f->layers_end);
    const int other = f->recipe || f->history_len_given || f->algo || f->margin_given || f->first_last_bf16 ||
                      f->layers_start_given || f->layers_end_given;
    if (!f->format) {
        if (other)
            return lj_fail(LJ_ERR_ARG, "the --fp8-* and bf16-layer flags need --fp8-format hybrid|e4m3 (FP8 is off "
                                       "without it)");
        return LJ_OK;
    }
    if (!strcmp(f->format, "hybrid")) o->hybrid = 1;
    else if (!strcmp(f->format, "e4m3")) o->hybrid = 0;
    else return lj_fail(LJ_ERR_ARG, "--fp8-format: '%s' is not one of hybrid, e4m3", f->format);
    if (f->recipe) {
        if (!strcmp(f->recipe, "delayed")) o->recipe = LJ_FP8_RECIPE_DELAYED;
        else if (!strcmp(f->recipe, "tensorwise")) o->recipe = LJ_FP8_RECIPE_TENSORWISE;
        else if (!strcmp(f->recipe, "blockwise")) o->recipe = LJ_FP8_RECIPE_BLOCKWISE;
        else return lj_fail(LJ_ERR_ARG, "--fp8-recipe: '%s' is not one of delayed, tensorwise, blockwise", f->recipe);
    }
    if (f->history_len_given) o->amax_history_len = f->history_len;
    if (f->algo) {
        if (!strcmp(f->algo, "max")) o->amax_compute_max = 1;
        else if (!strcmp(f->algo, "most_recent")) o->amax_compute_max = 0;
        else return lj_fail(LJ_ERR_ARG, "--fp8-amax-compute-algo: '%s' is not one of max, most_recent", f->algo);
    }
    if (f->margin_given) o->margin = f->margin;
    o->param_gather = f->param_gather;
    if (o->recipe != LJ_FP8_RECIPE_DELAYED && (f->history_len_given || f->algo || f->margin_given))
        return lj_fail(LJ_ERR_ARG, "--fp8-amax-history-len, --fp8-amax-compute-algo and --fp8-margin belong to "
                                   "--fp8-recipe delayed (tensorwise and blockwise scale each tensor or tile by "
                                   "its own amax)");
    if ((f->layers_start_given || f->layers_end_given) && !f->first_last_bf16)
        return lj_fail(LJ_ERR_ARG, "--num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16 need "
                                   "--first-last-layers-bf16");
    if (f->first_last_bf16) {
        o->bf16_layers_start = f->layers_start_given ? f->layers_start : 1;
        o->bf16_layers_end = f->layers_end_given ? f->layers_end : 1;
        if (o->bf16_layers_start + o->bf16_layers_end >= cfg->num_hidden_layers)
            return lj_fail(LJ_ERR_ARG, "--first-last-layers-bf16: %d + %d bf16 layers leave none of the %d layers in "
                                       "FP8", o->bf16_layers_start, o->bf16_layers_end, cfg->num_hidden_layers);
    }
    /* the backend: a GPU with FP8 tensor cores, or the CPU's emulation */
    if (strcmp(ops->name, "cpu") == 0) {
        lj_log_info("FP8 on the CPU backend: an exact emulation (quantize, saturate, scale, fp32 matmul), for "
                    "checking the recipe; it is not faster than fp32");
    } else if (ops->alloc) {
        LJ_TRY(lj_ops_cuda_fp8_check());
        if (o->recipe == LJ_FP8_RECIPE_BLOCKWISE) LJ_TRY(lj_ops_cuda_fp8_blockwise_check());
    }
    *recipe = LJ_LINEAR_RECIPE_FP8;
    return LJ_OK;
}

lj_status lj_cli_fp8_check_tokens(lj_linear_recipe_kind recipe, const lj_linear_fp8_options *o, const lj_ops *ops,
                                  const lj_model_config *cfg, int micro_batch_size, int seq_length) {
    if (recipe != LJ_LINEAR_RECIPE_FP8 || o->recipe != LJ_FP8_RECIPE_BLOCKWISE || strcmp(ops->name, "cuda") != 0)
        return LJ_OK;
    const long long tokens = (long long)micro_batch_size * seq_length;
    if (tokens % 4 != 0)
        return lj_fail(LJ_ERR_ARG, "--fp8-recipe blockwise on CUDA: --micro-batch-size %d x --seq-length %d = %lld "
                                   "tokens, not a multiple of 4 (cuBLASLt's block-scaled GEMM needs it)",
                       micro_batch_size, seq_length, tokens);
    const int hd = cfg->head_dim > 0 ? cfg->head_dim : cfg->hidden_size / cfg->num_attention_heads;
    if (cfg->hidden_size % 4 || cfg->intermediate_size % 4 || hd % 4)
        return lj_fail(LJ_ERR_ARG, "--fp8-recipe blockwise on CUDA: hidden %d, intermediate %d and head_dim %d must "
                                   "be multiples of 4 (cuBLASLt's block-scaled GEMM)", cfg->hidden_size,
                       cfg->intermediate_size, hd);
    return LJ_OK;
}

int lj_cli_fp8_given(const lj_cli_fp8 *f) {
    return f->format || f->recipe || f->algo || f->history_len_given || f->margin_given || f->first_last_bf16 ||
           f->layers_start_given || f->layers_end_given || f->param_gather;
}

lj_status lj_cli_fp8_resolve_vl(const lj_cli_fp8 *f, const lj_ops *ops, const lj_vl_config *cfg,
                                int micro_batch_size, int seq_length, lj_linear_recipe_kind *recipe,
                                lj_linear_fp8_options *o) {
    *recipe = LJ_LINEAR_RECIPE_DEFAULT;
    *o = lj_linear_fp8_defaults();
    /* kept FP8 weights are cast after each optimizer step of the text loop (lj_linear_cast_weights);
       Qwen3-VL's step over both towers has no such cast, and no sharded optimizer to gather over */
    if (f->param_gather)
        return lj_fail(LJ_ERR_ARG, "--fp8-param-gather: not for Qwen3-VL (%s): its training keeps bf16 weights and has "
                                   "no sharded optimizer to gather FP8 weights over; FP8 training of both towers "
                                   "needs only --fp8-format hybrid|e4m3", cfg->name);
    LJ_TRY(lj_cli_fp8_resolve(f, ops, &cfg->text, recipe, o));
    LJ_TRY(lj_cli_fp8_check_tokens(*recipe, o, ops, &cfg->text, micro_batch_size, seq_length));
    if (*recipe != LJ_LINEAR_RECIPE_FP8 || strcmp(ops->name, "cpu") == 0) return LJ_OK;
    /* the tower's blocks on cuBLASLt: every GEMM writes rows of V or I values (qkv 3V, proj V, fc1
       I; the data gradients V or I), which its FP8 GEMM needs in multiples of 8 (16-byte rows) */
    const int V = cfg->vision.hidden_size, I = cfg->vision.intermediate_size;
    if (V % 8 || I % 8)
        return lj_fail(LJ_ERR_ARG, "--fp8-format on CUDA: the vision tower's hidden_size %d and intermediate_size %d "
                                   "must be multiples of 8 (cuBLASLt's FP8 GEMM writes 16-byte rows)", V, I);
    return LJ_OK;
}

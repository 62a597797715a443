/* fp8.c: the FP8 recipe's flags (Megatron-LM's names) for `train`, `benchmark` and `plan`, parsed
 * in one place (lj_cli_fp8_flag) and checked against the backend (lj_cli_fp8_resolve). */
#include <string.h>

#include "cli/cli.h"

void lj_cli_fp8_init(lj_cli_fp8 *f) {
    memset(f, 0, sizeof *f);
    f->history_len = -1;
    f->margin = -1;
    f->layers_start = -1;
    f->layers_end = -1;
}

int lj_cli_fp8_flag(lj_cli_fp8 *f, int argc, char **argv, int *i, lj_status *s) {
    const char *a = argv[*i];
    *s = LJ_OK;
    if (!strcmp(a, "--fp8-format")) *s = lj_cli_str(argc, argv, i, &f->format);
    else if (!strcmp(a, "--fp8-recipe")) *s = lj_cli_str(argc, argv, i, &f->recipe);
    else if (!strcmp(a, "--fp8-amax-history-len")) *s = lj_cli_int(argc, argv, i, &f->history_len);
    else if (!strcmp(a, "--fp8-amax-compute-algo")) *s = lj_cli_str(argc, argv, i, &f->algo);
    else if (!strcmp(a, "--fp8-margin")) *s = lj_cli_int(argc, argv, i, &f->margin);
    else if (!strcmp(a, "--first-last-layers-bf16")) f->first_last_bf16 = 1;
    else if (!strcmp(a, "--num-layers-at-start-in-bf16")) *s = lj_cli_int(argc, argv, i, &f->layers_start);
    else if (!strcmp(a, "--num-layers-at-end-in-bf16")) *s = lj_cli_int(argc, argv, i, &f->layers_end);
    else return 0;
    return 1;
}

void lj_cli_fp8_usage(FILE *out) {
    fprintf(out,
            "FP8 (the transformer blocks' linears; embedding, lm_head, norms and attention stay bf16):\n"
            "  --fp8-format hybrid|e4m3      FP8 training: hybrid = E4M3 forward, E5M2 gradients; e4m3\n"
            "                                everywhere (Hopper GPUs; the CPU backend emulates it exactly)\n"
            "  --fp8-recipe delayed|tensorwise   per-tensor scales from an amax history (delayed, the\n"
            "                                default) or from each tensor's own amax (tensorwise)\n"
            "  --fp8-amax-history-len N      delayed: amax history length (default 1)\n"
            "  --fp8-amax-compute-algo max|most_recent   delayed: amax from the history (default most_recent)\n"
            "  --fp8-margin M                delayed: scales divided by 2^M (default 0)\n"
            "  --first-last-layers-bf16      keep the first and last layers' linears in bf16:\n"
            "  --num-layers-at-start-in-bf16 N, --num-layers-at-end-in-bf16 N   how many (default 1 each)\n");
}

lj_status lj_cli_fp8_resolve(const lj_cli_fp8 *f, const lj_ops *ops, const lj_model_config *cfg,
                             lj_linear_recipe *recipe, lj_linear_fp8_options *o) {
    *recipe = LJ_LINEAR_RECIPE_DEFAULT;
    *o = lj_linear_fp8_defaults();
    const int other = f->recipe || f->history_len >= 0 || f->algo || f->margin >= 0 || f->first_last_bf16 ||
                      f->layers_start >= 0 || f->layers_end >= 0;
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
        else if (!strcmp(f->recipe, "blockwise"))
            return lj_fail(LJ_ERR_UNSUPPORTED, "--fp8-recipe blockwise (DeepSeek-V3's 1x128 / 128x128 scales) is not "
                                               "built yet: use delayed or tensorwise");
        else
            return lj_fail(LJ_ERR_ARG, "--fp8-recipe: '%s' is not one of delayed, tensorwise (blockwise: not built "
                                       "yet)", f->recipe);
    }
    if (f->history_len >= 0) {
        if (f->history_len < 1) return lj_fail(LJ_ERR_ARG, "--fp8-amax-history-len %d: must be at least 1", f->history_len);
        o->amax_history_len = f->history_len;
    }
    if (f->algo) {
        if (!strcmp(f->algo, "max")) o->amax_compute_max = 1;
        else if (!strcmp(f->algo, "most_recent")) o->amax_compute_max = 0;
        else return lj_fail(LJ_ERR_ARG, "--fp8-amax-compute-algo: '%s' is not one of max, most_recent", f->algo);
    }
    if (f->margin >= 0) o->margin = f->margin;
    else if (f->margin < -1) return lj_fail(LJ_ERR_ARG, "--fp8-margin %d: must be >= 0", f->margin);
    if (o->recipe != LJ_FP8_RECIPE_DELAYED && (f->history_len >= 0 || f->algo || f->margin >= 0))
        return lj_fail(LJ_ERR_ARG, "--fp8-amax-history-len, --fp8-amax-compute-algo and --fp8-margin belong to "
                                   "--fp8-recipe delayed (tensorwise scales each tensor by its own amax)");
    if ((f->layers_start >= 0 || f->layers_end >= 0) && !f->first_last_bf16)
        return lj_fail(LJ_ERR_ARG, "--num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16 need "
                                   "--first-last-layers-bf16");
    if (f->first_last_bf16) {
        o->bf16_layers_start = f->layers_start >= 0 ? f->layers_start : 1;
        o->bf16_layers_end = f->layers_end >= 0 ? f->layers_end : 1;
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
    }
    *recipe = LJ_LINEAR_RECIPE_FP8;
    return LJ_OK;
}

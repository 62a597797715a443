/* moments.c: the stored dtype of AdamW's moments, Megatron-LM's precision-aware optimizer flags
 * (--use-precision-aware-optimizer, --exp-avg-dtype, --exp-avg-sq-dtype) for `train`,
 * `benchmark` and `plan`: rows of the flag table and their check against the run. */
#include <string.h>

#include "cli/cli.h"

void lj_cli_moments_init(lj_cli_moments *f) {
    memset(f, 0, sizeof *f);
}

int lj_cli_moments_rows(lj_cli_moments *f, lj_flag *rows, int max) {
    const lj_flag own[] = {
        {.kind = LJ_FLAG_SECTION, .help = "Optimizer state precision (Megatron-LM's precision-aware optimizer):"},
        {.name = "--use-precision-aware-optimizer", .kind = LJ_FLAG_SWITCH, .dest = &f->precision_aware, .ival = 1, .help = "let --exp-avg-dtype and --exp-avg-sq-dtype store AdamW's moments in another dtype (needs a sharded optimizer: --use-distributed-optimizer or --zero-stage 1|2)"},
        {.name = "--exp-avg-dtype", .kind = LJ_FLAG_STR, .dest = &f->exp_avg, .help = "fp32|bf16  the dtype AdamW's first moment is stored in (default fp32); the update itself is f32, rounded to nearest even on store"},
        {.name = "--exp-avg-sq-dtype", .kind = LJ_FLAG_STR, .dest = &f->exp_avg_sq, .help = "fp32|bf16  the same for the second moment (bf16 for both: 12 instead of 16 bytes of optimizer state per parameter)"},
    };
    const int n = (int)(sizeof own / sizeof own[0]);
    LJ_ASSERT(n <= max, "%d rows for %d places", n, max);
    memcpy(rows, own, sizeof own);
    return n;
}

void lj_cli_moments_usage(FILE *out) {
    lj_cli_moments f;
    lj_cli_moments_init(&f);
    lj_flag rows[LJ_CLI_MOMENTS_ROWS];
    lj_flags_print_help(out, rows, lj_cli_moments_rows(&f, rows, LJ_CLI_MOMENTS_ROWS));
}

static lj_status moment_dtype(const char *flag, const char *value, lj_dtype *out) {
    *out = LJ_DTYPE_F32;
    if (!value || !strcmp(value, "fp32")) return LJ_OK;
    if (!strcmp(value, "bf16")) {
        *out = LJ_DTYPE_BF16;
        return LJ_OK;
    }
    if (!strcmp(value, "fp16") || !strcmp(value, "fp8"))
        return lj_fail(LJ_ERR_ARG, "%s %s: ljperf stores AdamW's moments as fp32 or bf16 (Megatron-LM's fp16 and fp8 "
                                   "moments are not implemented): use bf16",
                       flag, value);
    return lj_fail(LJ_ERR_ARG, "%s: '%s' is not one of fp32, bf16", flag, value);
}

lj_status lj_cli_moments_resolve(const lj_cli_moments *f, int zero_stage, int world, const char *offload, int print,
                                 lj_dtype *exp_avg, lj_dtype *exp_avg_sq) {
    LJ_TRY(moment_dtype("--exp-avg-dtype", f->exp_avg, exp_avg));
    LJ_TRY(moment_dtype("--exp-avg-sq-dtype", f->exp_avg_sq, exp_avg_sq));
    const int low = *exp_avg != LJ_DTYPE_F32 || *exp_avg_sq != LJ_DTYPE_F32;
    /* the flag that asked for bf16, for messages */
    const char *which = *exp_avg != LJ_DTYPE_F32 ? "--exp-avg-dtype bf16" : "--exp-avg-sq-dtype bf16";
    /* megatron/training/arguments.py: the dtypes other than fp32 need the precision-aware
     * optimizer, and it needs the distributed optimizer */
    if (low && !f->precision_aware)
        return lj_fail(LJ_ERR_ARG, "%s needs --use-precision-aware-optimizer (Megatron-LM: the moments are fp32 "
                                   "without it)",
                       which);
    if (!f->precision_aware) return LJ_OK;
    if (zero_stage < 1)
        return lj_fail(LJ_ERR_ARG, "--use-precision-aware-optimizer needs a sharded optimizer: add "
                                   "--use-distributed-optimizer or --zero-stage 1|2 (a DeepSpeed config: "
                                   "zero_optimization.stage 1 or 2; Megatron-LM: only supported with the "
                                   "distributed optimizer)");
    if (low && zero_stage == 3 && world > 1)
        return lj_fail(LJ_ERR_ARG, "%s under ZeRO-3 over %d ranks: ljperf keeps bf16 moments under ZeRO stage 1 and "
                                   "2 only; use --zero-stage 1|2 or fp32 moments",
                       which, world);
    if (low && offload)
        return lj_fail(LJ_ERR_ARG, "%s with %s: the offloaded moments stay f32 in host memory (the host AdamW's); "
                                   "remove one of the two",
                       which, offload);
    if (low && print)
        lj_log_info("--use-precision-aware-optimizer: AdamW's moments are stored as m %s, v %s (%d bytes per "
                    "parameter instead of 8); each step widens them to f32, updates in f32 and rounds them to "
                    "nearest even on store; the sharded checkpoint stores them so (--ckpt-format torch: widened to f32, "
                    "exactly)",
                    *exp_avg == LJ_DTYPE_BF16 ? "bf16" : "f32", *exp_avg_sq == LJ_DTYPE_BF16 ? "bf16" : "f32",
                    (int)(lj_dtype_size(*exp_avg) + lj_dtype_size(*exp_avg_sq)));
    return LJ_OK;
}

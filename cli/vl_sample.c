/* vl_sample.c: the flags of the synthetic Qwen3-VL sample that `benchmark` and `plan` share
 * (cli.h lj_cli_vl_sample). */
#include "cli/cli.h"

#include <stdlib.h>
#include <string.h>

int lj_cli_vl_sample_rows(lj_cli_vl_sample *s, lj_flag *rows) {
    s->img_h = s->img_w = s->image_size = 448;
    s->text_tokens = 512;
    s->h_given = s->w_given = s->size_given = 0;
    const lj_flag r[LJ_CLI_VL_SAMPLE_ROWS] = {
        {.name = "--img-h", .kind = LJ_FLAG_INT, .dest = &s->img_h, .given = &s->h_given, .min = 1, .max = 65536,
         .help = "H  the synthetic image's height in pixels (448; smart_resize makes it a multiple of 32)"},
        {.name = "--img-w", .kind = LJ_FLAG_INT, .dest = &s->img_w, .given = &s->w_given, .min = 1, .max = 65536,
         .help = "W  its width (448)"},
        {.name = "--image-size", .kind = LJ_FLAG_INT, .dest = &s->image_size, .given = &s->size_given, .min = 1,
         .max = 65536, .help = "S  --img-h S --img-w S"},
        {.name = "--text-tokens", .kind = LJ_FLAG_INT, .dest = &s->text_tokens, .min = 1,
         .help = "N  text tokens per sample after the image (512)"},
    };
    for (int i = 0; i < LJ_CLI_VL_SAMPLE_ROWS; i++) rows[i] = r[i];
    return LJ_CLI_VL_SAMPLE_ROWS;
}

lj_status lj_cli_vl_sample_resolve(lj_cli_vl_sample *s) {
    if (s->size_given && (s->h_given || s->w_given))
        return lj_fail(LJ_ERR_ARG, "--image-size %d with --img-h/--img-w: give --image-size S or --img-h H --img-w W, "
                                   "not both", s->image_size);
    if (s->size_given) s->img_h = s->img_w = s->image_size;
    return LJ_OK;
}

int lj_cli_vl_parse(const char *cmd, const lj_flag *own, int n_own, lj_cli_fp8 *fp8, lj_cli_vl_sample *s, int argc,
                    char **argv, void (*usage)(FILE *)) {
    lj_flag *rows = lj_malloc((size_t)(n_own + LJ_CLI_FP8_ROWS + LJ_CLI_VL_SAMPLE_ROWS) * sizeof *rows);
    memcpy(rows, own, (size_t)n_own * sizeof *own);
    int n = n_own + (fp8 ? lj_cli_fp8_rows(fp8, rows + n_own, LJ_CLI_FP8_ROWS) : 0);
    n += lj_cli_vl_sample_rows(s, rows + n);
    lj_flags_result res;
    int rc = 0;
    if (lj_flags_parse(cmd, rows, n, argc, argv, 0, &res) != LJ_OK) {
        lj_cli_error(cmd);
        rc = -1;
    } else {
        rc = res.help;
        lj_flags_result_free(&res);
        if (rc) {
            usage(stdout);
            lj_flags_print_help(stdout, rows, n);
        }
    }
    free(rows);
    return rc;
}

/* prepare_mm.c: the multimodal branch of `ljperf prepare` (--image-root, or WebDataset tar
 * inputs): data/mm_prepare.h does the work; prints the summary. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "data/mm_prepare.h"

int lj_cli_prepare_mm_wanted(const char *image_root, const char *const *inputs, int n) {
    if (image_root) return 1;
    for (int i = 0; i < n; i++)
        if (lj_mm_prepare_is_shard(inputs[i])) return 1;
    return 0;
}

int lj_cli_prepare_mm(const char *const *inputs, int n, const char *prefix, const char *tokenizer,
                      const char *image_root, int64_t min_pixels, int64_t max_pixels, int utf8_replace, int quiet) {
    const int64_t given[2] = {min_pixels, max_pixels};
    static const char *const flag[2] = {"--min-pixels", "--max-pixels"};
    for (int i = 0; i < 2; i++)
        if (given[i] == 0) {
            fprintf(stderr, "ljperf prepare: %s 0: expected a positive number of pixels (smart_resize's %s area; "
                    "default %s, Qwen3-VL's)\n", flag[i], i ? "maximum" : "minimum", i ? "16777216" : "65536");
            return 2;
        }
    lj_mm_prepare_config c;
    lj_mm_prepare_config_init(&c);
    c.inputs = inputs;
    c.num_inputs = n;
    c.output_prefix = prefix;
    c.tokenizer_path = tokenizer;
    c.image_root = image_root;
    if (min_pixels > 0) c.preproc.min_pixels = min_pixels;
    if (max_pixels > 0) c.preproc.max_pixels = max_pixels;
    c.progress = !quiet;
    c.utf8_replace = utf8_replace;
    if (c.preproc.min_pixels > c.preproc.max_pixels) {
        fprintf(stderr, "ljperf prepare: --min-pixels %lld is above --max-pixels %lld: expected --min-pixels <= "
                "--max-pixels%s\n", (long long)c.preproc.min_pixels, (long long)c.preproc.max_pixels,
                min_pixels < 0 ? " (the default minimum, 65536)" : max_pixels < 0 ? " (the default maximum, 16777216)" : "");
        return 2;
    }
    lj_mm_prepare_stats s;
    if (lj_mm_prepare_run(&c, &s) != LJ_OK) return lj_cli_error("prepare");
    printf("prepare: wrote %s.mmidx, .mmtok, .mmmask and .mmimg (multimodal, Qwen3-VL chat template)\n", prefix);
    printf("  samples          %lld\n", (long long)s.samples);
    printf("  images           %lld (%.1f MB encoded; smart_resize min %lld, max %lld pixels)\n", (long long)s.images,
           (double)s.image_bytes / 1e6, (long long)c.preproc.min_pixels, (long long)c.preproc.max_pixels);
    printf("  tokens           %lld (%lld image tokens, %lld training targets)\n", (long long)s.tokens,
           (long long)s.image_tokens, (long long)s.target_tokens);
    if (s.utf8_replaced)
        printf("  UTF-8 repaired   %lld ill-formed sequences became U+FFFD\n", (long long)s.utf8_replaced);
    printf("  seconds          %.3f (%.3f decoding images: %.1f images/s)\n", s.seconds, s.image_seconds,
           s.image_seconds > 0 ? (double)s.images / s.image_seconds : 0.0);
    return 0;
}

/* report.c: `ljperf report`: a run directory (or named files) -> one offline HTML page with the
 * loss, throughput, memory-plan and ablation charts (bench/report.h). */
#include <stdio.h>
#include <string.h>

#include "base/fs.h"
#include "bench/report.h"
#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ljperf report [DIR] [flags]\n"
            "\n"
            "Draws a run as one self-contained HTML page (inline SVG, works offline): the training and\n"
            "validation loss, tokens/s and MFU per iteration, the memory plan as a stacked bar with the\n"
            "predicted and measured peak, and the ablation with each row's gain.\n"
            "\n"
            "  DIR                   a run directory: every *.json / *.jsonl file in it is read and recognised\n"
            "                        by its content (train --log-json, plan --json, benchmark --json,\n"
            "                        benchmark --ablation --json)\n"
            "  --log-json FILE       a training log (ljperf train --log-json)\n"
            "  --plan FILE           a memory plan (ljperf plan --json)\n"
            "  --benchmark FILE      a benchmark result (ljperf benchmark --json): the measured peak\n"
            "  --ablation FILE       ablation rows (ljperf benchmark --ablation --json)\n"
            "  --output FILE         the page (default DIR/report.html, else report.html)\n"
            "  --title TEXT          the page's heading (default: \"ljperf run: DIR\")\n"
            "  --peak-tflops X       the peak MFU is counted against (default: the benchmark's, else 989,\n"
            "                        bf16 dense H100/H200)\n");
}

static lj_status run_report(int argc, char **argv, int *help) {
    const char *dir = NULL, *output = NULL, *title = NULL;
    const char *files[4] = {NULL, NULL, NULL, NULL};
    const char *flags[4] = {"--log-json", "--plan", "--benchmark", "--ablation"};
    const char *kinds[4] = {"training log", "plan", "benchmark", "ablation"};
    const char *writers[4] = {"ljperf train --log-json", "ljperf plan --json", "ljperf benchmark --json",
                              "ljperf benchmark --ablation --json"};
    double peak = 0;
    const lj_flag rows[] = {
        {.name = "--log-json", .kind = LJ_FLAG_STR, .dest = &files[0]},
        {.name = "--plan", .kind = LJ_FLAG_STR, .dest = &files[1]},
        {.name = "--benchmark", .kind = LJ_FLAG_STR, .dest = &files[2]},
        {.name = "--ablation", .kind = LJ_FLAG_STR, .dest = &files[3]},
        {.name = "--output", .kind = LJ_FLAG_STR, .dest = &output},
        {.name = "--title", .kind = LJ_FLAG_STR, .dest = &title},
        {.name = "--peak-tflops", .kind = LJ_FLAG_RATE, .dest = &peak, .help = "TFLOP/s", .max = 1e6},
    };
    lj_flags_result res;
    lj_status ps = lj_flags_parse("report", rows, (int)(sizeof rows / sizeof rows[0]), argc, argv, 2, &res);
    if (ps == LJ_OK && res.num_positional == 2)
        ps = lj_fail(LJ_ERR_ARG, "one run directory only ('%s' and '%s')", res.positional[0], res.positional[1]);
    if (res.num_positional > 0) dir = res.positional[0];
    const int help_asked = res.help;
    lj_flags_result_free(&res);
    LJ_TRY(ps);
    if (help_asked) {
        *help = 1;
        return LJ_OK;
    }
    if (!dir && !files[0] && !files[1] && !files[2] && !files[3])
        return lj_fail(LJ_ERR_ARG, "give a run directory or --log-json / --plan / --benchmark / --ablation files");
    lj_report_data d;
    lj_report_init(&d);
    lj_status s = dir ? lj_report_add_dir(&d, dir) : LJ_OK;
    for (int k = 0; k < 4 && s == LJ_OK; k++) {
        if (!files[k]) continue;
        const char *kind = NULL;
        s = lj_report_add_file(&d, files[k], &kind);
        if (s == LJ_OK && (!kind || strcmp(kind, kinds[k]) != 0))
            s = lj_fail(LJ_ERR_FORMAT, "%s %s: not a %s (%s): expected what %s writes", flags[k], files[k], kinds[k],
                        kind ? kind : "JSON that ljperf does not write", writers[k]);
    }
    if (s == LJ_OK && lj_report_num_charts(&d) == 0)
        s = lj_fail(LJ_ERR_ARG, "%s: nothing to draw: no --log-json training log, plan --json, benchmark --json or "
                                "--ablation --json output found",
                    dir ? dir : "the files given");
    if (s == LJ_OK && peak > 0) d.peak_tflops = peak;
    char out[LJ_PATH_MAX], head[1200];
    if (s == LJ_OK) {
        if (output)
            s = strlen(output) < sizeof out ? (strcpy(out, output), LJ_OK)
                                            : lj_fail(LJ_ERR_ARG, "--output %.40s...: %zu characters: expected fewer than %zu",
                                                      output, strlen(output), sizeof out);
        else s = dir ? lj_path_join(out, dir, "report.html") : (strcpy(out, "report.html"), LJ_OK);
    }
    if (s == LJ_OK) {
        snprintf(head, sizeof head, "ljperf run: %s", dir ? dir : files[0] ? files[0] : files[1] ? files[1] : "report");
        s = lj_report_write_html(&d, title ? title : head, out);
    }
    if (s == LJ_OK)
        printf("report: %s (%d of 4 charts with data)\n", out, lj_report_num_charts(&d));
    lj_report_free(&d);
    return s;
}

int lj_cli_report(int argc, char **argv) {
    int help = 0;
    if (run_report(argc, argv, &help) != LJ_OK) return lj_cli_error("report");
    if (help) usage(stdout);
    return 0;
}

/* report.c: `ljperf report`: run directories or training logs (or named files) -> one offline
 * HTML page with the runs side by side: loss, throughput, learning rate, memory-plan and ablation
 * charts (bench/report.h, docs/report.md). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "bench/report.h"
#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ljperf report [RUN ...] [flags]\n"
            "\n"
            "Draws one or more runs as one self-contained HTML page (inline SVG, works offline): each run's\n"
            "identity (program, model, precision, hardware, date, commit, command), the training and\n"
            "validation loss, tokens/s (and MFU for one run) and the learning rate per iteration, one line per\n"
            "run, the memory plan as a stacked bar with the predicted and measured peak, and the ablation\n"
            "with each row's gain. Every input is recognised by its content.\n"
            "\n"
            "  RUN                   a run directory or a training log; several are drawn side by side (at\n"
            "                        most %d). A directory: its *.json / *.jsonl files (train --log-json,\n"
            "                        plan --json, benchmark --json, benchmark --ablation --json), else its\n"
            "                        TensorBoard event files (in it or one level down), else a Megatron-LM\n"
            "                        console log (*.log, *.txt, *.out). A training log: --log-json lines, a\n"
            "                        TensorBoard event file, or a Megatron-LM console log\n"
            "  --log-json FILE       the first run's training log (any of the three kinds)\n"
            "  --label TEXT          a run's name in the legends, once per run in order (default: made from\n"
            "                        its identity: program, model, precision, devices)\n"
            "  --plan FILE           a memory plan (ljperf plan --json)\n"
            "  --benchmark FILE      a benchmark result (ljperf benchmark --json): the measured peak\n"
            "  --ablation FILE       ablation rows (ljperf benchmark --ablation --json)\n"
            "  --output FILE         the page (default: RUN/report.html for one run directory, else\n"
            "                        report.html)\n"
            "  --title TEXT          the page's heading (default: \"ljperf run: RUN\", \"ljperf runs: A vs B\")\n"
            "  --peak-tflops X       the peak MFU is counted against (default: the benchmark's, else 989,\n"
            "                        bf16 dense H100/H200)\n",
            LJ_REPORT_MAX_RUNS);
}

typedef struct {
    const char *v[LJ_REPORT_MAX_RUNS + 1];
    int n;
} labels;

static lj_status add_label(void *dest, const char *flag, const char *value) {
    labels *l = dest;
    if (l->n == LJ_REPORT_MAX_RUNS)
        return lj_fail(LJ_ERR_ARG, "%s '%s': more than %d labels: give one per run, at most %d", flag, value,
                       LJ_REPORT_MAX_RUNS, LJ_REPORT_MAX_RUNS);
    l->v[l->n++] = value;
    return LJ_OK;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static lj_status run_report(int argc, char **argv, int *help) {
    const char *output = NULL, *title = NULL;
    const char *files[4] = {NULL, NULL, NULL, NULL};
    const char *flags[4] = {"--log-json", "--plan", "--benchmark", "--ablation"};
    const char *writers[4] = {"ljperf train --log-json, TensorBoard or Megatron-LM", "ljperf plan --json",
                              "ljperf benchmark --json", "ljperf benchmark --ablation --json"};
    double peak = 0;
    labels lab = {{0}, 0};
    const lj_flag rows[] = {
        {.name = "--log-json", .kind = LJ_FLAG_STR, .dest = &files[0]},
        {.name = "--label", .kind = LJ_FLAG_FUNC, .dest = &lab, .fn = add_label, .help = "TEXT"},
        {.name = "--plan", .kind = LJ_FLAG_STR, .dest = &files[1]},
        {.name = "--benchmark", .kind = LJ_FLAG_STR, .dest = &files[2]},
        {.name = "--ablation", .kind = LJ_FLAG_STR, .dest = &files[3]},
        {.name = "--output", .kind = LJ_FLAG_STR, .dest = &output},
        {.name = "--title", .kind = LJ_FLAG_STR, .dest = &title},
        {.name = "--peak-tflops", .kind = LJ_FLAG_RATE, .dest = &peak, .help = "TFLOP/s", .max = 1e6},
    };
    lj_flags_result res;
    lj_status ps = lj_flags_parse("report", rows, (int)(sizeof rows / sizeof rows[0]), argc, argv,
                                  LJ_REPORT_MAX_RUNS + 1, &res);
    if (ps == LJ_OK && res.num_positional > LJ_REPORT_MAX_RUNS)
        ps = lj_fail(LJ_ERR_ARG, "%d runs given ('%s' ...): give at most %d", res.num_positional, res.positional[0],
                     LJ_REPORT_MAX_RUNS);
    const int help_asked = res.help;
    if (ps != LJ_OK || help_asked) {
        lj_flags_result_free(&res);
        LJ_TRY(ps);
        *help = 1;
        return LJ_OK;
    }
    const int n_pos = res.num_positional;
    if (n_pos == 0 && !files[0] && !files[1] && !files[2] && !files[3]) {
        lj_flags_result_free(&res);
        return lj_fail(LJ_ERR_ARG, "give a run directory or training log (several to compare), or --log-json / --plan "
                                   "/ --benchmark / --ablation files");
    }
    const int n_runs = n_pos > 0 ? n_pos : files[0] ? 1 : 0;
    lj_status s = LJ_OK;
    if (lab.n > (n_runs > 0 ? n_runs : 1))
        s = lj_fail(LJ_ERR_ARG, "--label '%s': %d labels for %d run%s: give one per run, in order", lab.v[lab.n - 1],
                    lab.n, n_runs, n_runs == 1 ? "" : "s");
    lj_report_data d;
    lj_report_init(&d);
    for (int i = 0; i < n_pos && s == LJ_OK; i++) s = lj_report_add_run(&d, res.positional[i]);
    for (int k = 0; k < 4 && s == LJ_OK; k++) {
        if (!files[k]) continue;
        const char *kind = NULL;
        if (k == 0) lj_report_select_run(&d, 0);
        s = lj_report_add_file(&d, files[k], &kind);
        const int log_kind = kind && (strcmp(kind, "training log") == 0 || strcmp(kind, "TensorBoard events") == 0 ||
                                      strcmp(kind, "Megatron-LM log") == 0);
        const int right = k == 0 ? log_kind : kind && strcmp(kind, flags[k] + 2) == 0;
        if (s == LJ_OK && !right)
            s = lj_fail(LJ_ERR_FORMAT, "%s %s: not a %s (%s): expected what %s writes", flags[k], files[k],
                        k == 0 ? "training log" : flags[k] + 2, kind ? kind : "JSON that ljperf does not write",
                        writers[k]);
    }
    if (s == LJ_OK && lj_report_num_charts(&d) == 0) {
        char what[600];
        if (n_pos == 1) snprintf(what, sizeof what, "%s", res.positional[0]);
        else snprintf(what, sizeof what, "%s", n_pos > 1 ? "the runs given" : "the files given");
        s = lj_fail(LJ_ERR_ARG, "%s: nothing to draw: no training log (--log-json, TensorBoard events, a Megatron-LM "
                                "log), plan --json, benchmark --json or --ablation --json output found", what);
    }
    if (s == LJ_OK && peak > 0) d.peak_tflops = peak;
    for (int i = 0; i < lab.n && i < d.n_runs; i++) snprintf(d.runs[i].label, sizeof d.runs[i].label, "%s", lab.v[i]);
    lj_report_label_runs(&d);
    char out[LJ_PATH_MAX], head[1200];
    if (s == LJ_OK) {
        if (output) s = strlen(output) < sizeof out ? (strcpy(out, output), LJ_OK) : lj_fail(LJ_ERR_ARG, "--output: too long");
        else if (n_pos == 1 && is_dir(res.positional[0])) s = lj_path_join(out, res.positional[0], "report.html");
        else strcpy(out, "report.html");
    }
    if (s == LJ_OK) {
        if (n_pos > 1) {
            size_t n = (size_t)snprintf(head, sizeof head, "ljperf runs: ");
            for (int i = 0; i < d.n_runs && n < sizeof head; i++)
                n += (size_t)snprintf(head + n, sizeof head - n, "%s%s", i ? " vs " : "", d.runs[i].label);
        } else {
            snprintf(head, sizeof head, "ljperf run: %s",
                     n_pos ? res.positional[0] : files[0] ? files[0] : files[1] ? files[1] : "report");
        }
        s = lj_report_write_html(&d, title ? title : head, out);
    }
    if (s == LJ_OK)
        printf("report: %s (%d run%s, %d of 5 charts with data)\n", out, lj_report_num_logs(&d),
               lj_report_num_logs(&d) == 1 ? "" : "s", lj_report_num_charts(&d));
    lj_report_free(&d);
    lj_flags_result_free(&res);
    return s;
}

int lj_cli_report(int argc, char **argv) {
    int help = 0;
    if (run_report(argc, argv, &help) != LJ_OK) return lj_cli_error("report");
    if (help) usage(stdout);
    return 0;
}

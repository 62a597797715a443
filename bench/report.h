/* report.h: `ljperf report`: a run's results as one self-contained HTML page (inline SVG
 * drawn here, inline CSS, no network at view time) with four charts:
 *   - loss: every iteration's training loss (--log-json "loss") and the validation loss;
 *   - speed: tokens/s per iteration and MFU (tflops_per_gpu / the peak: the FLOP count of docs/reference.md, "MFU, stated once"
 *     against 989 TFLOP/s bf16 dense, or the benchmark JSON's peak_tflops);
 *   - memory: the static plan as a stacked bar (parameters, master weights, gradients, optimizer
 *     moments, saved activations by recompute policy, buffers, workspaces, context, NCCL), with
 *     the predicted peak (plan JSON peak_bytes) against the measured one (benchmark JSON
 *     peak_mem_gib);
 *   - ablation: tokens/s per row of `ljperf benchmark --ablation --json`, with each row's gain
 *     over the row above.
 * Inputs are the JSON that ljperf writes: `train --log-json` (JSON lines), `plan --json`,
 * `benchmark --json` and `benchmark --ablation --json`. */
#ifndef LJ_REPORT_H
#define LJ_REPORT_H

#include "base/base.h"

#define LJ_REPORT_MAX_SEGMENTS 24
#define LJ_REPORT_MAX_ROWS 16

typedef struct {
    /* training log */
    char log_path[1024];
    int n_steps, cap_steps;
    double *iteration, *loss, *tokens_per_s, *tflops_per_gpu; /* tflops_per_gpu: NAN when absent */
    int n_val, cap_val;
    double *val_iteration, *val_loss;
    /* memory plan */
    char plan_path[1024];
    char plan_model[128], plan_recompute[128];
    int n_segments;
    char segment_name[LJ_REPORT_MAX_SEGMENTS][64];
    double segment_bytes[LJ_REPORT_MAX_SEGMENTS];
    double plan_peak_bytes;      /* 0: no plan */
    /* benchmark */
    char bench_path[1024];
    char bench_model[128], bench_device[32];
    double measured_peak_bytes;  /* 0: no benchmark */
    double bench_planned_bytes, bench_tokens_per_s, bench_mfu, peak_tflops;
    /* ablation */
    char ablation_path[1024];
    int n_rows;
    char row_name[LJ_REPORT_MAX_ROWS][32];
    double row_tokens_per_s[LJ_REPORT_MAX_ROWS], row_mfu[LJ_REPORT_MAX_ROWS];
} lj_report_data;

/* Empties `d` (peak_tflops = 989, the H100/H200 bf16 dense peak, docs/reference.md). */
void lj_report_init(lj_report_data *d);
void lj_report_free(lj_report_data *d);

/* Reads one input, recognised by its content: JSON lines with "iteration" and "loss" (a
 * training log), an object with "breakdown" (a plan), an object with "engine" and
 * "tokens_per_s" (a benchmark), an array of objects with "row" (an ablation). A second input of
 * a kind replaces the first. Returns LJ_OK with *kind = NULL for JSON of another kind.
 * Errors: LJ_ERR_IO naming the file, LJ_ERR_FORMAT naming the file (and line) that is not
 * JSON, or a known kind with a field of the wrong type. */
lj_status lj_report_add_file(lj_report_data *d, const char *path, const char **kind);

/* Reads every *.json and *.jsonl file directly in `dir` (not below) with lj_report_add_file, in
 * name order; the first training log wins, preferring train.jsonl. Errors: LJ_ERR_IO when `dir`
 * is not a readable directory; those of lj_report_add_file. */
lj_status lj_report_add_dir(lj_report_data *d, const char *dir);

/* Writes the page to `path` atomically. `title` heads it. Errors: LJ_ERR_ARG when `d` holds
 * nothing to draw; LJ_ERR_IO naming the path. */
lj_status lj_report_write_html(const lj_report_data *d, const char *title, const char *path);

/* Charts that have data (0-4): loss, speed, memory, ablation. */
int lj_report_num_charts(const lj_report_data *d);

#endif

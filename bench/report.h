/* report.h: `ljperf report`: one or more runs' results as one self-contained HTML page (inline
 * SVG drawn here, inline CSS, no network at view time; docs/report.md):
 *   - the runs: each run's identity (program, model, precision, hardware, date, commit, command)
 *     and its summary, one column per run;
 *   - loss: every iteration's training loss and the validation loss, one line per run;
 *   - speed: tokens/s per iteration, one line per run; with one run also MFU (tflops_per_gpu /
 *     the peak: the FLOP count of docs/reference.md, "MFU, stated once", against 989 TFLOP/s
 *     bf16 dense, or the benchmark JSON's peak_tflops);
 *   - learning rate per iteration, one line per run;
 *   - memory: the static plan as a stacked bar (parameters, master weights, gradients, optimizer
 *     moments, saved activations by recompute policy, buffers, workspaces, context, NCCL), with
 *     the predicted peak (plan JSON peak_bytes) against the measured one (benchmark JSON
 *     peak_mem_gib);
 *   - ablation: tokens/s per row of `ljperf benchmark --ablation --json`, with each row's gain
 *     over the row above.
 * A run's training log is one of: `train --log-json` (JSON lines, with or without the start
 * record), TensorBoard event files (ljperf's, Megatron-LM's, any writer's scalars by tag), a
 * Megatron-LM console log (training_log's iteration lines; ljperf's console lines have the same
 * form). The plan, benchmark and ablation are ljperf's JSON (`plan --json`, `benchmark --json`,
 * `benchmark --ablation --json`), drawn once for the page. Every input is recognised by its
 * content, not its name. */
#ifndef LJ_REPORT_H
#define LJ_REPORT_H

#include "base/base.h"

#define LJ_REPORT_MAX_SEGMENTS 24
#define LJ_REPORT_MAX_ROWS 16
#define LJ_REPORT_MAX_RUNS 8

/* Points (x, y) in reading order. */
typedef struct {
    double *x, *y;
    int n, cap;
} lj_report_series;

/* What a run says about itself: --log-json's start record, a Megatron-LM log's arguments
 * block, a TensorBoard file's text summaries and times. "" and 0 where it does not say. */
typedef struct {
    char program[64];     /* "ljperf 0.1.0", "Megatron-LM" */
    char commit[48];
    char date[40];        /* as the log has it: ISO 8601 (ljperf), the first line's time (Megatron) */
    char model[128];      /* a name (ljperf), or the shape ("32 layers, hidden 4096": Megatron) */
    char precision[64];   /* "bf16", "fp8 delayed", ... */
    char device[128];     /* "NVIDIA H200", "cpu" */
    int devices;          /* GPUs (or ranks); 0: unknown */
    int seq_length, global_batch_size;
    char command[2048];   /* the command line, "" when not recorded */
} lj_report_identity;

typedef struct {
    char path[1024];      /* the training log: a file or a directory of event files */
    const char *kind;     /* "training log", "TensorBoard events", "Megatron-LM log"; NULL: none yet */
    char label[128];      /* its name in the legends (--label, else made from its identity) */
    lj_report_identity id;
    int starts;           /* start records read: more than 1 after resumes */
    lj_report_series loss, val_loss, lr, tokens_per_s, tflops_per_gpu;
} lj_report_run;

typedef struct {
    int n_runs;
    lj_report_run runs[LJ_REPORT_MAX_RUNS];
    int current;                 /* the run lj_report_add_file reads into (-1: none yet; the first is started) */
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

/* Empties `d`: no run yet (peak_tflops = 989, the H100/H200 bf16 dense peak,
 * docs/reference.md). */
void lj_report_init(lj_report_data *d);
void lj_report_free(lj_report_data *d);

/* Starts run number d->n_runs and makes it the one lj_report_add_file reads into. Errors:
 * LJ_ERR_ARG beyond LJ_REPORT_MAX_RUNS runs. */
lj_status lj_report_begin_run(lj_report_data *d);

/* Makes run `index` (0 <= index < LJ_REPORT_MAX_RUNS) the current one, starting empty runs up
 * to it where there are fewer. */
void lj_report_select_run(lj_report_data *d, int index);

/* Reads one input into the current run, recognised by its content: a TensorBoard event file
 * (lj_tb_is_event_data), JSON lines with "iteration" (a --log-json training log), an object
 * with "breakdown" (a plan), an object with "engine" and "tokens_per_s" (a benchmark), an array
 * of objects with "row" (an ablation), a text with Megatron-LM iteration lines (a console log).
 * A training log replaces the run's; a plan, benchmark or ablation replaces the page's. *kind
 * says what it was; NULL for JSON of another kind (not an error).
 * Errors: LJ_ERR_IO naming the file; LJ_ERR_FORMAT naming the file: empty, none of the kinds
 * above, JSON (lines) with a bad line (naming it), a known kind with a field of the wrong type,
 * a corrupt event file (naming the byte offset). */
lj_status lj_report_add_file(lj_report_data *d, const char *path, const char **kind);

/* Reads a run directory into the current run: every *.json and *.jsonl file directly in `dir`
 * (not below) with lj_report_add_file, in name order, the first training log winning
 * (train.jsonl first); without one, the TensorBoard event files (events.out.tfevents.*) in
 * `dir` and in its direct subdirectories, as one log in name order; without those, the first
 * *.log, *.txt or *.out file that is a Megatron-LM console log. A plan, benchmark or ablation
 * already on the page (an earlier run's) is kept. Errors: LJ_ERR_IO when `dir` is not a
 * readable directory; those of lj_report_add_file. */
lj_status lj_report_add_dir(lj_report_data *d, const char *dir);

/* Reads `path`, a directory or a file, as a new run (lj_report_begin_run, then
 * lj_report_add_dir or lj_report_add_file). A file must be a training log. Errors: as those;
 * LJ_ERR_FORMAT naming a file that is not a training log. */
lj_status lj_report_add_run(lj_report_data *d, const char *path);

/* The parsers behind lj_report_add_file, for the fuzz targets: `text` (NUL-terminated) as a
 * Megatron-LM console log, data[0..size) as one TensorBoard event file, read into `run`
 * (replacing its log and identity). Return 1 when the input was of that kind with at least one
 * point (*s LJ_OK), else 0 (*s LJ_OK: not of that kind; an error: of that kind but corrupt,
 * LJ_ERR_FORMAT naming `path` as lj_report_add_file). */
int lj_report_parse_megatron(lj_report_run *run, const char *path, const char *text, lj_status *s);
int lj_report_parse_tensorboard(lj_report_run *run, const char *path, const void *data, size_t size, lj_status *s);

/* Gives each run without a label one from its identity (program, model, precision, devices;
 * the file or directory name where that is not enough to tell the runs apart). */
void lj_report_label_runs(lj_report_data *d);

/* Writes the page to `path` atomically. `title` heads it. Errors: LJ_ERR_ARG when `d` holds
 * nothing to draw; LJ_ERR_IO naming the path. */
lj_status lj_report_write_html(const lj_report_data *d, const char *title, const char *path);

/* Charts that have data (0-5): loss, speed, learning rate, memory, ablation. */
int lj_report_num_charts(const lj_report_data *d);

/* Runs with a training log. */
int lj_report_num_logs(const lj_report_data *d);

#endif

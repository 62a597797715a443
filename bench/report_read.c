/* report_read.c: `ljperf report`'s inputs (report.h): ljperf's JSON outputs, TensorBoard event
 * files and Megatron-LM console logs, recognised by their content; the runs and their labels. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <dirent.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/fs.h"
#include "bench/report.h"
#include "metrics/tensorboard.h"

#define PEAK_TFLOPS_DEFAULT 989.0 /* docs/reference.md, "MFU, stated once": H100/H200 SXM bf16 dense */

/* ---- series and runs -------------------------------------------------------------- */

static void series_push(lj_report_series *s, double x, double y) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->x = lj_realloc(s->x, (size_t)s->cap * sizeof(double));
        s->y = lj_realloc(s->y, (size_t)s->cap * sizeof(double));
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

/* A resumed run logs iteration `x` again: the points from there on are replaced. */
static void series_cut(lj_report_series *s, double x) {
    while (s->n > 0 && s->x[s->n - 1] >= x) s->n--;
}

/* Appends `y` at `x`, replacing the points at `x` and after it (a log that goes back). */
static void series_add(lj_report_series *s, double x, double y) {
    series_cut(s, x);
    series_push(s, x, y);
}

static void series_free(lj_report_series *s) {
    free(s->x);
    free(s->y);
    memset(s, 0, sizeof *s);
}

static void run_clear_log(lj_report_run *r) {
    series_free(&r->loss);
    series_free(&r->val_loss);
    series_free(&r->lr);
    series_free(&r->tokens_per_s);
    series_free(&r->tflops_per_gpu);
    memset(&r->id, 0, sizeof r->id);
    r->starts = 0;
    r->kind = NULL;
    r->path[0] = '\0';
}

/* Moves the log of `from` into `to` (its label stays), leaving `from` empty. */
static void run_take_log(lj_report_run *to, lj_report_run *from) {
    char label[sizeof to->label];
    memcpy(label, to->label, sizeof label);
    run_clear_log(to);
    *to = *from;
    memcpy(to->label, label, sizeof label);
    memset(from, 0, sizeof *from);
}

static int run_points(const lj_report_run *r) {
    return r->loss.n + r->val_loss.n + r->lr.n + r->tokens_per_s.n + r->tflops_per_gpu.n;
}

void lj_report_init(lj_report_data *d) {
    memset(d, 0, sizeof *d);
    d->current = -1;
    d->peak_tflops = PEAK_TFLOPS_DEFAULT;
}

void lj_report_free(lj_report_data *d) {
    for (int i = 0; i < d->n_runs; i++) run_clear_log(&d->runs[i]);
    memset(d, 0, sizeof *d);
    d->current = -1;
}

lj_status lj_report_begin_run(lj_report_data *d) {
    if (d->n_runs == LJ_REPORT_MAX_RUNS)
        return lj_fail(LJ_ERR_ARG, "more than %d runs: give at most %d run directories or training logs",
                       LJ_REPORT_MAX_RUNS, LJ_REPORT_MAX_RUNS);
    d->current = d->n_runs++;
    memset(&d->runs[d->current], 0, sizeof d->runs[0]);
    return LJ_OK;
}

void lj_report_select_run(lj_report_data *d, int index) {
    while (d->n_runs <= index && d->n_runs < LJ_REPORT_MAX_RUNS) (void)lj_report_begin_run(d);
    d->current = index < d->n_runs ? index : d->n_runs - 1;
}

/* The run lj_report_add_file reads into: the current one, or a first one. */
static lj_report_run *current_run(lj_report_data *d) {
    if (d->current < 0) lj_report_select_run(d, 0);
    return &d->runs[d->current];
}

int lj_report_num_logs(const lj_report_data *d) {
    int n = 0;
    for (int i = 0; i < d->n_runs; i++) n += d->runs[i].kind != NULL && run_points(&d->runs[i]) > 0;
    return n;
}

/* ---- the runs' arguments (Megatron-LM's names) ------------------------------------- */

/* What a Megatron-LM log or event file says of the run in its arguments. */
typedef struct {
    int seq_length, world_size, num_layers, hidden_size, global_batch_size;
    int bf16, fp16;
    char fp8[32], fp8_recipe[32]; /* "" or "None": no FP8 */
    int any;
} run_args;

static int parse_int(const char *v, int *out) {
    char *end;
    const long x = strtol(v, &end, 10);
    if (end == v || x < 0 || x > 1000000000) return 0;
    *out = (int)x;
    return 1;
}

/* Takes argument `name` = `value` (as Megatron prints them: "4096", "True", "None"). */
static void args_set(run_args *a, const char *name, const char *value) {
    int *ints[] = {&a->seq_length, &a->world_size, &a->num_layers, &a->hidden_size, &a->global_batch_size};
    const char *int_names[] = {"seq_length", "world_size", "num_layers", "hidden_size", "global_batch_size"};
    for (int i = 0; i < 5; i++)
        if (strcmp(name, int_names[i]) == 0) a->any |= parse_int(value, ints[i]);
    if (strcmp(name, "bf16") == 0) a->bf16 = strcmp(value, "True") == 0, a->any = 1;
    if (strcmp(name, "fp16") == 0) a->fp16 = strcmp(value, "True") == 0, a->any = 1;
    if (strcmp(name, "fp8") == 0) snprintf(a->fp8, sizeof a->fp8, "%s", value), a->any = 1;
    if (strcmp(name, "fp8_recipe") == 0) snprintf(a->fp8_recipe, sizeof a->fp8_recipe, "%s", value);
}

static void args_to_identity(const run_args *a, lj_report_identity *id) {
    if (!a->any) return;
    if (a->num_layers > 0 && a->hidden_size > 0 && !id->model[0])
        snprintf(id->model, sizeof id->model, "%d layers, hidden %d", a->num_layers, a->hidden_size);
    if (a->fp8[0] && strcmp(a->fp8, "None") != 0)
        snprintf(id->precision, sizeof id->precision, "fp8 %s%s", strcmp(a->fp8, "hybrid") == 0 ? "hybrid " : "",
                 a->fp8_recipe[0] && strcmp(a->fp8_recipe, "None") != 0 ? a->fp8_recipe : "delayed");
    else if (a->bf16) snprintf(id->precision, sizeof id->precision, "bf16");
    else if (a->fp16) snprintf(id->precision, sizeof id->precision, "fp16");
    else snprintf(id->precision, sizeof id->precision, "fp32");
    if (a->world_size > 0) id->devices = a->world_size;
    if (a->seq_length > 0) id->seq_length = a->seq_length;
    if (a->global_batch_size > 0) id->global_batch_size = a->global_batch_size;
}

/* ---- ljperf's JSON ------------------------------------------------------------------ */

static double num(const cJSON *o, const char *key, double fallback) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

/* A size or rate read for a chart: NaN, negative or infinite values as 0 (nothing to draw),
 * values beyond 1e300 as 1e300 (sums of a few stay finite). */
static double amount(double v) { return isfinite(v) && v > 0 ? fmin(v, 1e300) : 0.0; }

static void str(const cJSON *o, const char *key, char *buf, size_t len) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(v)) snprintf(buf, len, "%s", v->valuestring);
}

/* The identity of a start record ({"iteration": I, "start": {...}}, train.h lj_train_start). */
static void read_start(lj_report_identity *id, const cJSON *st) {
    char program[32] = "", version[32] = "";
    str(st, "program", program, sizeof program);
    str(st, "version", version, sizeof version);
    snprintf(id->program, sizeof id->program, "%s%s%s", program, version[0] ? " " : "", version);
    str(st, "commit", id->commit, sizeof id->commit);
    str(st, "date", id->date, sizeof id->date);
    str(st, "model", id->model, sizeof id->model);
    str(st, "precision", id->precision, sizeof id->precision);
    str(st, "device", id->device, sizeof id->device);
    str(st, "command", id->command, sizeof id->command);
    const double dev = num(st, "devices", 0), seq = num(st, "seq_length", 0), gbs = num(st, "global_batch_size", 0);
    id->devices = dev >= 1 && dev <= 1e9 ? (int)dev : 0;
    id->seq_length = seq >= 1 && seq <= 1e9 ? (int)seq : 0;
    id->global_batch_size = gbs >= 1 && gbs <= 1e9 ? (int)gbs : 0;
}

/* JSON lines of `train --log-json`. A resumed run appends to the same file: an iteration seen
 * again replaces the points from there on; its start record counts a start. Returns 1 if it was
 * a training log (iterations, or a start record), into `run`. */
static int read_log(lj_report_run *run, const char *path, char *text, lj_status *s) {
    lj_report_run t;
    memset(&t, 0, sizeof t);
    int line = 0, records = 0;
    *s = LJ_OK;
    for (char *p = text; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        line++;
        const char *q = p + strspn(p, " \t\r");
        if (*q) {
            cJSON *o = cJSON_Parse(q);
            if (!cJSON_IsObject(o) || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "iteration"))) {
                cJSON_Delete(o);
                if (records == 0 && line == 1) break; /* not a training log */
                *s = lj_fail(LJ_ERR_FORMAT, "%s:%d: not a JSON object with \"iteration\" (expected a --log-json line)",
                             path, line);
                break;
            }
            const double it = num(o, "iteration", 0);
            const cJSON *loss = cJSON_GetObjectItemCaseSensitive(o, "loss");
            const cJSON *val = cJSON_GetObjectItemCaseSensitive(o, "validation_loss");
            const cJSON *start = cJSON_GetObjectItemCaseSensitive(o, "start");
            if (cJSON_IsObject(start)) {
                if (t.starts++ == 0) read_start(&t.id, start);
                records++;
            } else if (cJSON_IsNumber(loss)) {
                series_cut(&t.val_loss, it);
                series_add(&t.loss, it, loss->valuedouble);
                series_add(&t.lr, it, num(o, "lr", NAN));
                series_add(&t.tokens_per_s, it, num(o, "tokens_per_s", NAN));
                series_add(&t.tflops_per_gpu, it, num(o, "tflops_per_gpu", NAN));
                records++;
            } else if (cJSON_IsNumber(val)) {
                series_add(&t.val_loss, it, val->valuedouble);
            }
            cJSON_Delete(o);
        }
        p = nl ? nl + 1 : NULL;
    }
    if (*s != LJ_OK || records == 0) {
        run_clear_log(&t);
        return *s != LJ_OK;
    }
    snprintf(t.path, sizeof t.path, "%s", path);
    t.kind = "training log";
    run_take_log(run, &t);
    return 1;
}

static void add_segment(lj_report_data *d, const char *name, double bytes) {
    bytes = amount(bytes);
    if (bytes <= 0 || d->n_segments >= LJ_REPORT_MAX_SEGMENTS) return;
    snprintf(d->segment_name[d->n_segments], sizeof d->segment_name[0], "%s", name);
    d->segment_bytes[d->n_segments++] = bytes;
}

static lj_status read_plan(lj_report_data *d, const char *path, const cJSON *o) {
    const cJSON *br = cJSON_GetObjectItemCaseSensitive(o, "breakdown");
    if (!cJSON_IsArray(br)) return lj_fail(LJ_ERR_FORMAT, "%s: breakdown: expected an array (ljperf plan --json)", path);
    d->n_segments = 0;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(o, "saved_activations");
    const cJSON *row;
    cJSON_ArrayForEach(row, br) {
        const cJSON *cat = cJSON_GetObjectItemCaseSensitive(row, "category");
        if (!cJSON_IsString(cat) || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(row, "bytes")))
            return lj_fail(LJ_ERR_FORMAT, "%s: breakdown: each row needs \"category\" and \"bytes\"", path);
        const double bytes = num(row, "bytes", 0);
        if (strcmp(cat->valuestring, "saved activations") == 0 && cJSON_IsObject(act)) {
            /* by recompute policy, as the plan counts them */
            double rest = bytes;
            const char *pol[3] = {"none", "selective", "full"};
            const char *label[3] = {"activations: no recompute", "activations: selective", "activations: full"};
            for (int p = 0; p < 3; p++) {
                const cJSON *x = cJSON_GetObjectItemCaseSensitive(act, pol[p]);
                const double b = num(x, "bytes", 0);
                char name[64];
                snprintf(name, sizeof name, "%s (%.0f layers)", label[p], amount(num(x, "layers", 0)));
                add_segment(d, name, b);
                rest -= b;
            }
            add_segment(d, "activations: residual, inputs, RoPE", rest);
        } else {
            add_segment(d, cat->valuestring, bytes);
        }
    }
    d->plan_peak_bytes = amount(num(o, "peak_bytes", 0));
    str(o, "model", d->plan_model, sizeof d->plan_model);
    const cJSON *chosen = cJSON_GetObjectItemCaseSensitive(o, "chosen");
    if (!chosen) chosen = cJSON_GetObjectItemCaseSensitive(o, "smallest");
    d->plan_recompute[0] = '\0';
    if (cJSON_IsObject(chosen)) {
        char rc[96] = "";
        str(chosen, "recompute", rc, sizeof rc);
        snprintf(d->plan_recompute, sizeof d->plan_recompute, "micro-batch %.0f, recompute %s",
                 amount(num(chosen, "micro_batch_size", 0)), rc);
    }
    snprintf(d->plan_path, sizeof d->plan_path, "%s", path);
    return LJ_OK;
}

static void read_bench(lj_report_data *d, const char *path, const cJSON *o) {
    d->measured_peak_bytes = amount(num(o, "peak_mem_gib", 0) * 1073741824.0);
    d->bench_planned_bytes = amount(num(o, "planned_mem_gib", 0) * 1073741824.0);
    d->bench_tokens_per_s = num(o, "tokens_per_s", 0);
    d->bench_mfu = num(o, "mfu", 0);
    const double peak = amount(num(o, "peak_tflops", 0));
    if (peak > 0) d->peak_tflops = peak;
    str(o, "model", d->bench_model, sizeof d->bench_model);
    str(o, "device", d->bench_device, sizeof d->bench_device);
    snprintf(d->bench_path, sizeof d->bench_path, "%s", path);
}

static lj_status read_ablation(lj_report_data *d, const char *path, const cJSON *a) {
    d->n_rows = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, a) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(row, "row");
        if (!cJSON_IsString(name) || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(row, "tokens_per_s")))
            return lj_fail(LJ_ERR_FORMAT, "%s: each ablation row needs \"row\" and \"tokens_per_s\"", path);
        if (d->n_rows == LJ_REPORT_MAX_ROWS) break;
        snprintf(d->row_name[d->n_rows], sizeof d->row_name[0], "%s", name->valuestring);
        d->row_tokens_per_s[d->n_rows] = num(row, "tokens_per_s", 0);
        d->row_mfu[d->n_rows++] = num(row, "mfu", 0);
    }
    snprintf(d->ablation_path, sizeof d->ablation_path, "%s", path);
    return LJ_OK;
}

/* ---- Megatron-LM console logs ------------------------------------------------------- */

/* The value of a "key: value" field as a number (Megatron prints 1.052E+01, 3.000000E-04, nan). */
static int field_number(const char *v, double *out) {
    char *end;
    const double x = strtod(v, &end);
    if (end == v) return 0;
    *out = x;
    return 1;
}

/* Parses "iteration <it>/<total> |" in `line`: returns a pointer just after the '|' and *it, or NULL. */
static const char *iteration_prefix(const char *line, double *it) {
    for (const char *p = strstr(line, "iteration"); p; p = strstr(p + 1, "iteration")) {
        const char *q = p + 9;
        if (p > line && !isspace((unsigned char)p[-1]) && p[-1] != ']') continue;
        if (!isspace((unsigned char)*q)) continue;
        q += strspn(q, " \t");
        char *end;
        const long a = strtol(q, &end, 10);
        if (end == q || a < 0) continue;
        q = end + strspn(end, " \t");
        if (*q != '/') continue;
        q++;
        q += strspn(q, " \t");
        (void)strtol(q, &end, 10);
        if (end == q) continue;
        q = end + strspn(end, " \t");
        if (*q != '|') continue;
        *it = (double)a;
        return q + 1;
    }
    return NULL;
}

/* The fields "key: value |" after the iteration prefix, trimmed: the value of `key` or NULL.
 * `buf` holds the value's text. */
static const char *field(const char *fields, const char *key, char *buf, size_t len) {
    const size_t k = strlen(key);
    for (const char *p = fields; p && *p;) {
        p += strspn(p, " \t");
        const char *bar = strchr(p, '|');
        const size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n > k + 1 && strncmp(p, key, k) == 0 && p[k] == ':') {
            const char *v = p + k + 1;
            v += strspn(v, " \t");
            size_t m = (size_t)(p + n - v);
            while (m > 0 && isspace((unsigned char)v[m - 1])) m--;
            snprintf(buf, len, "%.*s", (int)(m < len ? m : len - 1), v);
            return buf;
        }
        p = bar ? bar + 1 : NULL;
    }
    return NULL;
}

int lj_report_parse_megatron(lj_report_run *run, const char *path, const char *text, lj_status *s) {
    *s = LJ_OK;
    lj_report_run t;
    memset(&t, 0, sizeof t);
    run_args args;
    memset(&args, 0, sizeof args);
    lj_report_series ms = {0}, gbs = {0}; /* per iteration line, for tokens/s from the arguments */
    int in_args = 0, lines_read = 0, ljperf_lines = 0;
    char *copy = lj_strdup(text), v[128];
    for (char *p = copy; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        const char *line = p;
        p = nl ? nl + 1 : NULL;
        if (strstr(line, "------------------------ arguments ------------------------")) {
            in_args = 1;
            continue;
        }
        if (in_args) {
            if (strstr(line, "end of arguments")) {
                in_args = 0;
                continue;
            }
            /* "  name ........ value" */
            const char *a = line + strspn(line, " \t");
            const char *sp = a + strcspn(a, " \t");
            const char *dots = sp + strspn(sp, " \t");
            if (sp > a && *dots == '.') {
                const char *val = dots + strspn(dots, ".");
                val += strspn(val, " \t");
                char name[64], value[64];
                snprintf(name, sizeof name, "%.*s", (int)(sp - a < 63 ? sp - a : 63), a);
                snprintf(value, sizeof value, "%.*s", (int)strcspn(val, "\r"), val);
                args_set(&args, name, value);
            }
            continue;
        }
        int ws = 0;
        const char *u = strstr(line, "using world size:");
        if (u && parse_int(u + 17 + strspn(u + 17, " "), &ws) && ws > 0) args.world_size = ws, args.any = 1;
        const char *vl = strstr(line, "validation loss at iteration");
        if (vl && !strstr(line, "on test set")) {
            double it, x;
            const char *after = vl + 28;
            if (field_number(after, &it) && field(strchr(after, '|') ? strchr(after, '|') + 1 : "", "lm loss value", v,
                                                  sizeof v) &&
                field_number(v, &x))
                series_add(&t.val_loss, it, x);
            continue;
        }
        double it;
        const char *fields = iteration_prefix(line, &it);
        if (!fields) continue;
        double loss = NAN, lr = NAN, ms_v = NAN, gbs_v = NAN, tps = NAN, tflops = NAN;
        int known = 0;
        if (field(fields, "lm loss", v, sizeof v)) known += field_number(v, &loss);
        if (field(fields, "learning rate", v, sizeof v)) known += field_number(v, &lr);
        if (field(fields, "elapsed time per iteration (ms)", v, sizeof v)) known += field_number(v, &ms_v);
        if (field(fields, "global batch size", v, sizeof v)) known += field_number(v, &gbs_v);
        if (field(fields, "tokens/s", v, sizeof v)) ljperf_lines += field_number(v, &tps);
        if (field(fields, "throughput per GPU (TFLOP/s/GPU)", v, sizeof v)) known += field_number(v, &tflops);
        if (!known) continue;
        const char *b = strchr(line, '['); /* " [2024-05-01 10:00:00.123456] iteration" */
        if (lines_read++ == 0 && b && b < fields && isdigit((unsigned char)b[1]) && strchr(b, ']'))
            snprintf(t.id.date, sizeof t.id.date, "%.*s", (int)strcspn(b + 1, "]"), b + 1);
        series_cut(&t.val_loss, it);
        series_add(&t.loss, it, loss);
        series_add(&t.lr, it, lr);
        series_add(&t.tokens_per_s, it, tps);
        series_add(&t.tflops_per_gpu, it, tflops);
        series_add(&ms, it, ms_v);
        series_add(&gbs, it, gbs_v);
    }
    free(copy);
    args_to_identity(&args, &t.id);
    /* tokens/s from the arguments where the lines do not print it: global batch x sequence / time */
    const int seq = t.id.seq_length;
    for (int i = 0; i < t.tokens_per_s.n && seq > 0; i++)
        if (!isfinite(t.tokens_per_s.y[i]) && ms.y[i] > 0 && gbs.y[i] > 0)
            t.tokens_per_s.y[i] = gbs.y[i] * seq / (ms.y[i] / 1e3);
    if (t.id.global_batch_size == 0 && gbs.n > 0 && gbs.y[0] >= 1 && gbs.y[0] <= 1e9)
        t.id.global_batch_size = (int)gbs.y[0];
    series_free(&ms);
    series_free(&gbs);
    if (lines_read == 0) {
        run_clear_log(&t);
        return 0;
    }
    snprintf(t.id.program, sizeof t.id.program, "%s",
             ljperf_lines > 0 && !args.any ? "ljperf (console log)" : "Megatron-LM");
    snprintf(t.path, sizeof t.path, "%s", path);
    t.kind = "Megatron-LM log";
    run_take_log(run, &t);
    return 1;
}

/* ---- TensorBoard event files --------------------------------------------------------- */

/* The tags read, by role, best first: Megatron-LM's and ljperf's names, then common others. */
enum { ROLE_LOSS, ROLE_VAL, ROLE_LR, ROLE_TPS, ROLE_TFLOPS, ROLE_ITER_TIME, ROLE_BATCH, NUM_ROLES };
#define MAX_TAGS_PER_ROLE 6
static const char *const k_tags[NUM_ROLES][MAX_TAGS_PER_ROLE] = {
    [ROLE_LOSS] = {"lm loss", "lm-loss", "lm_loss", "train/loss", "loss", "train_loss"},
    [ROLE_VAL] = {"lm loss validation", "lm-loss-validation", "validation/lm loss", "val/loss", "val_loss", NULL},
    [ROLE_LR] = {"learning-rate", "learning_rate", "lr", "train/lr", "train/learning_rate", NULL},
    [ROLE_TPS] = {"tokens-per-sec", "tokens_per_sec", "tokens_per_s", "throughput/tokens_per_sec", "tps", NULL},
    [ROLE_TFLOPS] = {"throughput", "tflops_per_gpu", "throughput/tflops", NULL, NULL, NULL},
    [ROLE_ITER_TIME] = {"iteration-time", NULL, NULL, NULL, NULL, NULL},
    [ROLE_BATCH] = {"batch-size", NULL, NULL, NULL, NULL, NULL},
};

typedef struct {
    lj_report_series s[NUM_ROLES][MAX_TAGS_PER_ROLE];
    run_args args;
    double first_wall_time;
    int64_t records;
} tb_log;

static lj_status tb_value(void *ctx, const lj_tb_value *v) {
    tb_log *t = ctx;
    if (v->is_text) {
        /* SummaryWriter.add_text(name, ...) writes the tag "<name>/text_summary" */
        char name[64];
        const char *slash = strstr(v->tag, "/text_summary");
        const size_t n = slash ? (size_t)(slash - v->tag) : strlen(v->tag);
        if (n < sizeof name) {
            snprintf(name, sizeof name, "%.*s", (int)n, v->tag);
            args_set(&t->args, name, v->text);
        }
        return LJ_OK;
    }
    for (int r = 0; r < NUM_ROLES; r++)
        for (int k = 0; k < MAX_TAGS_PER_ROLE && k_tags[r][k]; k++)
            if (strcmp(v->tag, k_tags[r][k]) == 0) {
                series_add(&t->s[r][k], (double)v->step, v->value);
                return LJ_OK;
            }
    return LJ_OK;
}

static void tb_log_free(tb_log *t) {
    for (int r = 0; r < NUM_ROLES; r++)
        for (int k = 0; k < MAX_TAGS_PER_ROLE; k++) series_free(&t->s[r][k]);
}

/* Reads one event file's bytes into `t`. Returns 1 if it was an event file. */
static int tb_read(tb_log *t, const char *path, const void *data, size_t size, lj_status *s) {
    *s = LJ_OK;
    if (!lj_tb_is_event_data(data, size)) return 0;
    lj_tb_read_info info;
    *s = lj_tb_read(data, size, path, tb_value, t, &info);
    if (*s != LJ_OK) return 1;
    if (isnan(t->first_wall_time)) t->first_wall_time = info.first_wall_time;
    t->records += info.records;
    if (info.truncated_at >= 0)
        lj_log_warn("report: %s: the last record (at byte %lld) is cut short; drawing the %lld whole records before "
                    "it (a file still being written, or one whose last write failed)",
                    path, (long long)info.truncated_at, (long long)info.records);
    return 1;
}

/* The best-named tag of `role` that has points, moved out of `t`. */
static lj_report_series take_role(tb_log *t, int role) {
    lj_report_series out = {0};
    for (int k = 0; k < MAX_TAGS_PER_ROLE; k++)
        if (t->s[role][k].n > 0) {
            out = t->s[role][k];
            memset(&t->s[role][k], 0, sizeof out);
            break;
        }
    return out;
}

/* Turns `t` into run `out`; 0 when it has no point of any role. */
static int tb_finish(tb_log *t, const char *path, lj_report_run *out) {
    lj_report_run r;
    memset(&r, 0, sizeof r);
    r.loss = take_role(t, ROLE_LOSS);
    r.val_loss = take_role(t, ROLE_VAL);
    r.lr = take_role(t, ROLE_LR);
    r.tokens_per_s = take_role(t, ROLE_TPS);
    r.tflops_per_gpu = take_role(t, ROLE_TFLOPS);
    args_to_identity(&t->args, &r.id);
    if (t->args.any) snprintf(r.id.program, sizeof r.id.program, "Megatron-LM");
    /* tokens/s from iteration-time (s) x batch-size x the arguments' sequence length (Megatron) */
    lj_report_series it = take_role(t, ROLE_ITER_TIME), bs = take_role(t, ROLE_BATCH);
    if (r.tokens_per_s.n == 0 && r.id.seq_length > 0)
        for (int i = 0, j = -1; i < it.n; i++) { /* both in increasing steps (series_add): bs.y[j] is the last at or before */
            while (j + 1 < bs.n && bs.x[j + 1] <= it.x[i]) j++;
            const double b = j >= 0 ? bs.y[j] : NAN;
            if (it.y[i] > 0 && b > 0) series_push(&r.tokens_per_s, it.x[i], b * r.id.seq_length / it.y[i]);
        }
    series_free(&it);
    series_free(&bs);
    tb_log_free(t);
    if (isfinite(t->first_wall_time) && t->first_wall_time > 0 && t->first_wall_time < 1e11) {
        const time_t sec = (time_t)t->first_wall_time;
        struct tm tm;
        if (gmtime_r(&sec, &tm)) strftime(r.id.date, sizeof r.id.date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    if (run_points(&r) == 0) {
        run_clear_log(&r);
        return 0;
    }
    snprintf(r.path, sizeof r.path, "%s", path);
    r.kind = "TensorBoard events";
    run_take_log(out, &r);
    return 1;
}

static void tb_init(tb_log *t) {
    memset(t, 0, sizeof *t);
    t->first_wall_time = NAN;
}

int lj_report_parse_tensorboard(lj_report_run *run, const char *path, const void *data, size_t size, lj_status *s) {
    tb_log t;
    tb_init(&t);
    if (!tb_read(&t, path, data, size, s) || *s != LJ_OK) {
        tb_log_free(&t);
        return 0;
    }
    if (!tb_finish(&t, path, run)) {
        *s = lj_fail(LJ_ERR_FORMAT, "%s: a TensorBoard event file of %lld records without a scalar ljperf report draws "
                                    "(expected tags such as 'lm loss', 'learning-rate', 'tokens-per-sec')",
                     path, (long long)t.records);
        return 0;
    }
    return 1;
}

/* ---- one file ------------------------------------------------------------------------ */

static lj_status add_file(lj_report_data *d, const char *path, const char **kind, int in_dir) {
    *kind = NULL;
    lj_report_run *run = current_run(d);
    char *text = NULL;
    size_t size = 0;
    LJ_TRY(lj_file_read_all(path, &text, &size));
    size_t lead = 0;
    while (lead < size && isspace((unsigned char)text[lead])) lead++;
    lj_status s = LJ_OK;
    if (lead == size) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: the file is empty: expected a training log (--log-json lines, a TensorBoard "
                                   "event file, a Megatron-LM console log) or ljperf's plan, benchmark or ablation JSON",
                    path);
    } else if (lj_tb_is_event_data(text, size)) {
        if (lj_report_parse_tensorboard(run, path, text, size, &s)) *kind = "TensorBoard events";
    } else if (text[lead] == '{' || text[lead] == '[') {
        const char *end = NULL;
        cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
        if (root) {
            const int plan = cJSON_IsObject(root) && cJSON_GetObjectItemCaseSensitive(root, "breakdown");
            const int bench = cJSON_IsObject(root) && cJSON_GetObjectItemCaseSensitive(root, "engine") &&
                              cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(root, "tokens_per_s"));
            const int ablation =
                cJSON_IsArray(root) && cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(root, 0), "row");
            const char *have = plan ? d->plan_path : bench ? d->bench_path : ablation ? d->ablation_path : "";
            if (in_dir && have[0]) {
                *kind = plan ? "plan" : bench ? "benchmark" : "ablation";
                lj_log_info("report: %s: left out (the %s is %s)", path, *kind, have);
                *kind = NULL;
            } else if (plan) {
                s = read_plan(d, path, root);
                *kind = "plan";
            } else if (bench) {
                read_bench(d, path, root);
                *kind = "benchmark";
            } else if (ablation) {
                s = read_ablation(d, path, root);
                *kind = "ablation";
            } else if (cJSON_IsObject(root) && cJSON_GetObjectItemCaseSensitive(root, "iteration")) {
                if (read_log(run, path, text, &s)) *kind = "training log"; /* a log of one line */
            }
            cJSON_Delete(root);
        } else if (read_log(run, path, text, &s) && s == LJ_OK) {
            *kind = "training log";
        } else if (s == LJ_OK) {
            size_t line = 1;
            for (const char *p = text; end && p < end; p++) line += *p == '\n';
            s = lj_fail(LJ_ERR_FORMAT, "%s: not JSON or JSON lines (parse error on line %zu): expected what ljperf "
                                       "writes (train --log-json, plan --json, benchmark --json)", path, line);
        }
    } else if (memchr(text, '\0', size) == NULL && lj_report_parse_megatron(run, path, text, &s)) {
        *kind = "Megatron-LM log";
    } else if (s == LJ_OK && strstr(path, "tfevents")) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: not a TensorBoard event file, or one cut short before its first record (%zu "
                                   "bytes; expected TFRecord framing: a 12-byte header whose last 4 bytes are the "
                                   "masked CRC32C of its first 8)", path, size);
    } else if (s == LJ_OK) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: not a file ljperf report reads: expected a training log (--log-json lines, a "
                                   "TensorBoard event file, a Megatron-LM console log with 'iteration N/M |' lines) "
                                   "or ljperf's plan, benchmark or ablation JSON", path);
    }
    free(text);
    return s;
}

lj_status lj_report_add_file(lj_report_data *d, const char *path, const char **kind) {
    return add_file(d, path, kind, 0);
}

/* ---- directories --------------------------------------------------------------------- */

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* By the file name after the last '/' (event files: their start time), then the whole path. */
static int by_base_name(const void *a, const void *b) {
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    const char *bx = strrchr(x, '/'), *by = strrchr(y, '/');
    const int c = strcmp(bx ? bx + 1 : x, by ? by + 1 : y);
    return c ? c : strcmp(x, y);
}

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int is_regular(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

typedef struct {
    char **v;
    int n;
} names;

static void names_add(names *l, const char *s) {
    l->v = lj_realloc(l->v, (size_t)(l->n + 1) * sizeof *l->v);
    l->v[l->n++] = lj_strdup(s);
}

static void names_free(names *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* The event files in `dir` (depth 0) and in its subdirectories (depth 1), as paths. */
static void find_events(const char *dir, int depth, names *out) {
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        char path[LJ_PATH_MAX];
        if (lj_path_join(path, dir, e->d_name) != LJ_OK) continue;
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0 && is_regular(path)) names_add(out, path);
        else if (depth == 0 && is_dir(path)) find_events(path, 1, out);
    }
    closedir(dp);
}

/* The event files of `files` as one log of the current run. */
static lj_status read_event_files(lj_report_data *d, const char *dir, const names *files) {
    tb_log t;
    tb_init(&t);
    lj_status s = LJ_OK;
    for (int i = 0; i < files->n && s == LJ_OK; i++) {
        char *data = NULL;
        size_t size = 0;
        s = lj_file_read_all(files->v[i], &data, &size);
        if (s == LJ_OK && !tb_read(&t, files->v[i], data, size, &s) && s == LJ_OK)
            s = lj_fail(LJ_ERR_FORMAT, "%s: not a TensorBoard event file (its first record's length CRC does not "
                                       "match; expected TFRecord framing)", files->v[i]);
        free(data);
    }
    if (s == LJ_OK && tb_finish(&t, dir, current_run(d))) {
        lj_log_info("report: %s: TensorBoard events (%d file%s)", dir, files->n, files->n == 1 ? "" : "s");
    } else if (s == LJ_OK) {
        lj_log_info("report: %s: %d TensorBoard event file%s without a scalar drawn here: left out", dir, files->n,
                    files->n == 1 ? "" : "s");
    }
    tb_log_free(&t);
    return s;
}

lj_status lj_report_add_dir(lj_report_data *d, const char *dir) {
    DIR *dp = opendir(dir);
    if (!dp)
        return lj_fail(LJ_ERR_IO, "%s: not a readable directory (expected a run directory: the --log-json file, "
                                  "plan --json and benchmark --json outputs, TensorBoard event files or a "
                                  "Megatron-LM log)", dir);
    names json = {0}, logs = {0}, events = {0};
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        if (ends_with(e->d_name, ".json") || ends_with(e->d_name, ".jsonl")) names_add(&json, e->d_name);
        else if (ends_with(e->d_name, ".log") || ends_with(e->d_name, ".txt") || ends_with(e->d_name, ".out"))
            names_add(&logs, e->d_name);
    }
    closedir(dp);
    qsort(json.v, (size_t)json.n, sizeof *json.v, by_name);
    qsort(logs.v, (size_t)logs.n, sizeof *logs.v, by_name);
    /* train.jsonl first, so that it is the log when there are several */
    for (int i = 1; i < json.n; i++)
        if (strcmp(json.v[i], "train.jsonl") == 0) {
            char *t = json.v[i];
            memmove(json.v + 1, json.v, (size_t)i * sizeof *json.v);
            json.v[0] = t;
        }
    lj_report_run *run = current_run(d);
    lj_status s = LJ_OK;
    for (int i = 0; i < json.n && s == LJ_OK; i++) {
        char path[LJ_PATH_MAX];
        s = lj_path_join(path, dir, json.v[i]);
        if (s != LJ_OK || !is_regular(path)) continue;
        if (run->kind && ends_with(json.v[i], ".jsonl")) {
            lj_log_info("report: %s: left out (the training log is %s)", path, run->path);
            continue;
        }
        const char *kind;
        s = add_file(d, path, &kind, 1);
        if (s == LJ_OK && kind) lj_log_info("report: %s: %s", path, kind);
    }
    if (s == LJ_OK && !run->kind) {
        find_events(dir, 0, &events);
        qsort(events.v, (size_t)events.n, sizeof *events.v, by_base_name);
        if (events.n > 0) s = read_event_files(d, dir, &events);
    }
    for (int i = 0; i < logs.n && s == LJ_OK && !run->kind; i++) {
        char path[LJ_PATH_MAX];
        char *text = NULL;
        size_t size = 0;
        if (lj_path_join(path, dir, logs.v[i]) != LJ_OK || !is_regular(path) ||
            lj_file_read_all(path, &text, &size) != LJ_OK)
            continue;
        lj_status ms = LJ_OK;
        if (memchr(text, '\0', size) == NULL && lj_report_parse_megatron(run, path, text, &ms))
            lj_log_info("report: %s: Megatron-LM log", path);
        else
            lj_log_info("report: %s: left out (no Megatron-LM iteration lines)", path);
        free(text);
    }
    names_free(&json);
    names_free(&logs);
    names_free(&events);
    return s;
}

lj_status lj_report_add_run(lj_report_data *d, const char *path) {
    LJ_TRY(lj_report_begin_run(d));
    struct stat st;
    if (stat(path, &st) != 0)
        return lj_fail(LJ_ERR_IO, "%s: no such run directory or training log (%s): expected a run directory or a "
                                  "training log (--log-json lines, a TensorBoard event file, a Megatron-LM log)",
                       path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return lj_report_add_dir(d, path);
    const char *kind = NULL;
    LJ_TRY(lj_report_add_file(d, path, &kind));
    if (kind && strcmp(kind, "training log") != 0 && strcmp(kind, "TensorBoard events") != 0 &&
        strcmp(kind, "Megatron-LM log") != 0)
        return lj_fail(LJ_ERR_FORMAT, "%s: a %s, not a training log: give it with --%s, and a run as a directory or "
                                      "its training log", path, kind, kind);
    if (!kind)
        return lj_fail(LJ_ERR_FORMAT, "%s: JSON that ljperf report does not draw: expected a run directory or a "
                                      "training log (--log-json lines, a TensorBoard event file, a Megatron-LM log)",
                       path);
    lj_log_info("report: %s: %s", path, kind);
    return LJ_OK;
}

/* ---- labels ---------------------------------------------------------------------------- */

/* The last component of `path` (a directory's name without its trailing '/'). */
static void base_name(const char *path, char *buf, size_t len) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    snprintf(buf, len, "%.*s", (int)(n - b), path + b);
}

void lj_report_label_runs(lj_report_data *d) {
    int made[LJ_REPORT_MAX_RUNS] = {0};
    for (int i = 0; i < d->n_runs; i++) {
        lj_report_run *r = &d->runs[i];
        if (r->label[0]) continue;
        made[i] = 1;
        const lj_report_identity *id = &r->id;
        char program[64];
        snprintf(program, sizeof program, "%.*s", (int)strcspn(id->program, " "), id->program);
        char devices[160] = "";
        if (id->devices > 1 && id->device[0]) snprintf(devices, sizeof devices, "%dx %s", id->devices, id->device);
        else if (id->devices > 1) snprintf(devices, sizeof devices, "%d devices", id->devices);
        const char *parts[4] = {program, id->model, id->precision, devices};
        size_t n = 0;
        for (int k = 0; k < 4; k++)
            if (parts[k][0] && n < sizeof r->label)
                n += (size_t)snprintf(r->label + n, sizeof r->label - n, "%s%s", n ? " " : "", parts[k]);
        if (!r->label[0]) base_name(r->path[0] ? r->path : "run", r->label, sizeof r->label);
    }
    /* made labels that two runs share get the file or directory name, then the run's number */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < d->n_runs; i++) {
            int group[LJ_REPORT_MAX_RUNS], g = 0;
            for (int j = 0; j < d->n_runs; j++)
                if (strcmp(d->runs[i].label, d->runs[j].label) == 0) group[g++] = j;
            for (int k = 0; k < g && g > 1; k++) {
                const int j = group[k];
                if (!made[j]) continue;
                char extra[96], label[sizeof d->runs[0].label];
                if (pass == 0) base_name(d->runs[j].path[0] ? d->runs[j].path : "run", extra, sizeof extra);
                else snprintf(extra, sizeof extra, "#%d", j + 1);
                snprintf(label, sizeof label, "%s (%s)", d->runs[j].label, extra);
                memcpy(d->runs[j].label, label, sizeof label);
            }
        }
}

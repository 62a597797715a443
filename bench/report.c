/* report.c: `ljperf report` (report.h): reading ljperf's JSON outputs and drawing them as inline
 * SVG in one HTML page. */
#include "bench/report.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"

#define PEAK_TFLOPS_DEFAULT 989.0 /* docs/reference.md, "MFU, stated once": H100/H200 SXM bf16 dense */

void lj_report_init(lj_report_data *d) {
    memset(d, 0, sizeof *d);
    d->peak_tflops = PEAK_TFLOPS_DEFAULT;
}

void lj_report_free(lj_report_data *d) {
    free(d->iteration);
    free(d->loss);
    free(d->tokens_per_s);
    free(d->tflops_per_gpu);
    free(d->val_iteration);
    free(d->val_loss);
    memset(d, 0, sizeof *d);
}

/* ---- reading ---------------------------------------------------------------------- */

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

static void push_step(lj_report_data *d, double it, double loss, double tps, double tflops) {
    if (d->n_steps == d->cap_steps) {
        d->cap_steps = d->cap_steps ? 2 * d->cap_steps : 256;
        d->iteration = lj_realloc(d->iteration, (size_t)d->cap_steps * sizeof(double));
        d->loss = lj_realloc(d->loss, (size_t)d->cap_steps * sizeof(double));
        d->tokens_per_s = lj_realloc(d->tokens_per_s, (size_t)d->cap_steps * sizeof(double));
        d->tflops_per_gpu = lj_realloc(d->tflops_per_gpu, (size_t)d->cap_steps * sizeof(double));
    }
    d->iteration[d->n_steps] = it;
    d->loss[d->n_steps] = loss;
    d->tokens_per_s[d->n_steps] = tps;
    d->tflops_per_gpu[d->n_steps++] = tflops;
}

static void push_val(lj_report_data *d, double it, double loss) {
    if (d->n_val == d->cap_val) {
        d->cap_val = d->cap_val ? 2 * d->cap_val : 64;
        d->val_iteration = lj_realloc(d->val_iteration, (size_t)d->cap_val * sizeof(double));
        d->val_loss = lj_realloc(d->val_loss, (size_t)d->cap_val * sizeof(double));
    }
    d->val_iteration[d->n_val] = it;
    d->val_loss[d->n_val++] = loss;
}

/* JSON lines of `train --log-json`. A resumed run appends to the same file: an iteration seen
 * again replaces the points from there on. Returns 1 if it was a training log. */
static int read_log(lj_report_data *d, const char *path, char *text, lj_status *s) {
    lj_report_data t;
    lj_report_init(&t);
    int line = 0, steps = 0;
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
                if (steps == 0 && line == 1) break; /* not a training log */
                *s = lj_fail(LJ_ERR_FORMAT, "%s:%d: not a JSON object with \"iteration\" (a --log-json line)", path, line);
                break;
            }
            const double it = num(o, "iteration", 0);
            const cJSON *loss = cJSON_GetObjectItemCaseSensitive(o, "loss");
            const cJSON *val = cJSON_GetObjectItemCaseSensitive(o, "validation_loss");
            if (cJSON_IsNumber(loss)) {
                while (t.n_steps > 0 && t.iteration[t.n_steps - 1] >= it) t.n_steps--;
                while (t.n_val > 0 && t.val_iteration[t.n_val - 1] >= it) t.n_val--;
                push_step(&t, it, loss->valuedouble, num(o, "tokens_per_s", NAN), num(o, "tflops_per_gpu", NAN));
                steps++;
            } else if (cJSON_IsNumber(val)) {
                push_val(&t, it, val->valuedouble);
            }
            cJSON_Delete(o);
        }
        p = nl ? nl + 1 : NULL;
    }
    if (*s != LJ_OK || steps == 0) {
        lj_report_free(&t);
        return *s != LJ_OK;
    }
    /* move the series into d */
    free(d->iteration), free(d->loss), free(d->tokens_per_s), free(d->tflops_per_gpu);
    free(d->val_iteration), free(d->val_loss);
    d->iteration = t.iteration, d->loss = t.loss, d->tokens_per_s = t.tokens_per_s, d->tflops_per_gpu = t.tflops_per_gpu;
    d->n_steps = t.n_steps, d->cap_steps = t.cap_steps;
    d->val_iteration = t.val_iteration, d->val_loss = t.val_loss, d->n_val = t.n_val, d->cap_val = t.cap_val;
    snprintf(d->log_path, sizeof d->log_path, "%s", path);
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

lj_status lj_report_add_file(lj_report_data *d, const char *path, const char **kind) {
    *kind = NULL;
    char *text = NULL;
    size_t size = 0;
    LJ_TRY(lj_file_read_all(path, &text, &size));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    lj_status s = LJ_OK;
    if (root) {
        if (cJSON_IsObject(root) && cJSON_GetObjectItemCaseSensitive(root, "breakdown")) {
            s = read_plan(d, path, root);
            *kind = "plan";
        } else if (cJSON_IsObject(root) && cJSON_GetObjectItemCaseSensitive(root, "engine") &&
                   cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(root, "tokens_per_s"))) {
            read_bench(d, path, root);
            *kind = "benchmark";
        } else if (cJSON_IsArray(root) && cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(root, 0), "row")) {
            s = read_ablation(d, path, root);
            *kind = "ablation";
        } else if (cJSON_IsObject(root) && cJSON_GetObjectItemCaseSensitive(root, "iteration")) {
            if (read_log(d, path, text, &s)) *kind = "training log"; /* a log of one line */
        }
        cJSON_Delete(root);
    } else if (read_log(d, path, text, &s) && s == LJ_OK) {
        *kind = "training log";
    } else if (s == LJ_OK) {
        size_t line = 1;
        for (const char *p = text; end && p < end; p++) line += *p == '\n';
        s = lj_fail(LJ_ERR_FORMAT, "%s: not JSON or JSON lines (parse error on line %zu)", path, line);
    }
    free(text);
    return s;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

lj_status lj_report_add_dir(lj_report_data *d, const char *dir) {
    DIR *dp = opendir(dir);
    if (!dp) return lj_fail(LJ_ERR_IO, "%s: not a readable directory (a run directory holds the --log-json file, "
                                       "plan --json and benchmark --json outputs)", dir);
    char **names = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.' || !(ends_with(e->d_name, ".json") || ends_with(e->d_name, ".jsonl"))) continue;
        names = lj_realloc(names, (size_t)(n + 1) * sizeof *names);
        names[n++] = lj_strdup(e->d_name);
    }
    closedir(dp);
    qsort(names, (size_t)n, sizeof *names, by_name);
    /* train.jsonl first, so that it is the log when there are several */
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], "train.jsonl") == 0 && i > 0) {
            char *t = names[i];
            memmove(names + 1, names, (size_t)i * sizeof *names);
            names[0] = t;
        }
    lj_status s = LJ_OK;
    for (int i = 0; i < n && s == LJ_OK; i++) {
        char path[LJ_PATH_MAX];
        s = lj_path_join(path, dir, names[i]);
        struct stat st;
        if (s != LJ_OK || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (d->n_steps > 0 && ends_with(names[i], ".jsonl")) {
            lj_log_info("report: %s: left out (the training log is %s)", path, d->log_path);
            continue;
        }
        const char *kind;
        s = lj_report_add_file(d, path, &kind);
        if (s == LJ_OK && kind) lj_log_info("report: %s: %s", path, kind);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return s;
}

int lj_report_num_charts(const lj_report_data *d) {
    return (d->n_steps > 0) + (d->n_steps > 0) + (d->n_segments > 0) + (d->n_rows > 0);
}

/* ---- drawing ---------------------------------------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (b->p && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->p = lj_realloc(b->p, b->cap);
    }
}

/* Text with &, <, >, " escaped. */
static void put_text(sbuf *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': put(b, "&amp;"); break;
        case '<': put(b, "&lt;"); break;
        case '>': put(b, "&gt;"); break;
        case '"': put(b, "&quot;"); break;
        default: put(b, "%c", *s);
        }
    }
}

/* A short label: 12.3k, 1.5M, 0.25, 3e-04. */
static void fmt_num(double v, char *buf, size_t len) {
    const double a = fabs(v);
    if (a >= 1e9) snprintf(buf, len, "%.3gG", v / 1e9);
    else if (a >= 1e6) snprintf(buf, len, "%.3gM", v / 1e6);
    else if (a >= 1e4) snprintf(buf, len, "%.3gk", v / 1e3);
    else if (a >= 1e-4 || a == 0) snprintf(buf, len, "%.3g", v);
    else snprintf(buf, len, "%.1e", v);
}

static void fmt_gib(double bytes, char *buf, size_t len) {
    if (bytes >= 1073741824.0) snprintf(buf, len, "%.2f GiB", bytes / 1073741824.0);
    else if (bytes >= 1048576.0) snprintf(buf, len, "%.1f MiB", bytes / 1048576.0);
    else snprintf(buf, len, "%.1f KiB", bytes / 1024.0);
}

/* Round tick step for the range [lo, hi] (finite, hi > lo) with about n ticks: 1, 2 or 5 times a
 * power of 10. */
static double tick_step(double lo, double hi, int n) {
    const double raw = (hi - lo) / n;
    if (!(raw > 0) || !isfinite(raw)) return 1.0;
    const double mag = pow(10.0, floor(log10(raw)));
    const double f = raw / mag;
    return mag * (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10);
}

typedef struct {
    const double *x, *y;
    int n;
    const char *color, *label;
    int right;   /* on the right axis */
    int dots;    /* markers instead of a line only */
    double width;
} series;

/* An axis from lo to hi with ticks lo, lo + step, ..., lo + ticks * step = hi. */
typedef struct {
    double lo, hi, step;
    int ticks;
} axis;

#define AXIS_LIMIT 1e300 /* values beyond it are drawn at it: the axis's arithmetic stays finite */
#define AXIS_MAX_TICKS 12

/* The axis for data in [lo, hi], with 0 in it when `zero` is set. Any input gives a finite axis
 * of 1 to AXIS_MAX_TICKS ticks: lo > hi (no finite data point) or a non-finite bound gives
 * [0, 1]; a constant (or nearly constant) series a band around its value; values beyond
 * +-AXIS_LIMIT are clamped. */
static axis make_axis(double lo, double hi, int zero) {
    axis a;
    if (!isfinite(lo) || !isfinite(hi) || lo > hi) lo = 0.0, hi = 1.0;
    lo = fmax(fmin(lo, AXIS_LIMIT), -AXIS_LIMIT);
    hi = fmax(fmin(hi, AXIS_LIMIT), -AXIS_LIMIT);
    if (zero && lo > 0) lo = 0;
    /* a range that the step's arithmetic cannot resolve: a band of 10% of the value (or 1) */
    if (!(hi - lo > 1e-9 * fmax(fabs(lo), fabs(hi)))) {
        const double pad = lo != 0.0 ? 0.05 * fabs(lo) : 0.5;
        lo -= pad, hi += pad;
        if (zero && lo < 0 && hi - pad >= 0) lo = 0;
    }
    a.step = tick_step(lo, hi, 5);
    a.lo = floor(lo / a.step) * a.step;
    a.hi = ceil(hi / a.step) * a.step;
    const double ticks = (a.hi - a.lo) / a.step;
    if (!(ticks >= 1 && ticks <= AXIS_MAX_TICKS)) { /* rounding at the ends of the double range */
        a.lo = lo, a.hi = hi, a.step = (hi - lo) / 5, a.ticks = 5;
    } else {
        a.ticks = (int)(ticks + 0.5);
    }
    return a;
}

/* The value of tick k of `a` (exactly 0 where the sum's rounding would print 1e-17). */
static double axis_tick(const axis *a, int k) {
    const double v = a->lo + k * a->step;
    return fabs(v) < a->step * 1e-6 ? 0.0 : v;
}

/* A page coordinate: `v` of the axis `a` mapped onto [p0, p0 + len], kept within a few chart
 * sizes of it (a value beyond the axis is drawn at the edge, not at 1e300 pixels). */
static double axis_map(const axis *a, double v, double p0, double len) {
    const double t = (fmax(fmin(v, AXIS_LIMIT), -AXIS_LIMIT) - a->lo) / (a->hi - a->lo);
    return p0 + fmax(fmin(t, 2.0), -1.0) * len;
}

enum { CW = 560, CH = 320, ML = 64, MR = 64, MT = 40, MB = 48 };

static void chart_open(sbuf *b, const char *id, const char *title, int w, int h) {
    put(b, "<figure><svg class=\"chart\" id=\"%s\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\" "
           "aria-label=\"",
        id, w, h, w, h);
    put_text(b, title);
    put(b, "\" xmlns=\"http://www.w3.org/2000/svg\">\n<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n"
           "<text x=\"%d\" y=\"22\" class=\"title\">",
        w, h, ML);
    put_text(b, title);
    put(b, "</text>\n");
}

static void chart_empty(sbuf *b, const char *id, const char *title, const char *why) {
    chart_open(b, id, title, CW, CH);
    put(b, "<text x=\"%d\" y=\"%d\" class=\"note\">", CW / 2, CH / 2);
    put_text(b, why);
    put(b, "</text>\n</svg></figure>\n");
}

/* A point of series `s` that can be drawn: both coordinates finite. */
static int drawable(const series *s, int i) { return isfinite(s->x[i]) && isfinite(s->y[i]); }

/* A line chart of up to 4 series over a shared x axis, with a left and optionally a right axis.
 * Points with a non-finite coordinate are left out; a chart without any finite point says so. */
static void line_chart(sbuf *b, const char *id, const char *title, const char *xlabel, const char *ylabel,
                       const char *y2label, const series *s, int ns) {
    double xlo = INFINITY, xhi = -INFINITY, ylo[2] = {INFINITY, INFINITY}, yhi[2] = {-INFINITY, -INFINITY};
    int points = 0;
    for (int k = 0; k < ns; k++)
        for (int i = 0; i < s[k].n; i++) {
            if (!drawable(&s[k], i)) continue;
            points++;
            xlo = fmin(xlo, s[k].x[i]), xhi = fmax(xhi, s[k].x[i]);
            ylo[s[k].right] = fmin(ylo[s[k].right], s[k].y[i]);
            yhi[s[k].right] = fmax(yhi[s[k].right], s[k].y[i]);
        }
    if (points == 0) {
        char why[160];
        snprintf(why, sizeof why, "the training log has no finite value of %s", s[0].label);
        chart_empty(b, id, title, why);
        return;
    }
    chart_open(b, id, title, CW, CH);
    const int pw = CW - ML - MR, ph = CH - MT - MB;
    const axis ax = make_axis(xlo, xhi, 0);
    const axis ay[2] = {make_axis(ylo[0], yhi[0], y2label != NULL), make_axis(ylo[1], yhi[1], 1)};
#define PX(v) axis_map(&ax, (v), ML, pw)
#define PY(v, a) axis_map(&ay[a], (v), MT + ph, -ph)
    char t[32];
    /* grid and ticks */
    for (int k = 0; k <= ay[0].ticks; k++) {
        const double v = axis_tick(&ay[0], k);
        fmt_num(v, t, sizeof t);
        put(b, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/><text x=\"%d\" y=\"%.1f\" "
               "class=\"tick\" text-anchor=\"end\">%s</text>\n",
            ML, ML + pw, PY(v, 0), PY(v, 0), ML - 6, PY(v, 0) + 4, t);
    }
    if (y2label)
        for (int k = 0; k <= ay[1].ticks; k++) {
            const double v = axis_tick(&ay[1], k);
            fmt_num(v, t, sizeof t);
            put(b, "<text x=\"%d\" y=\"%.1f\" class=\"tick\">%s</text>\n", ML + pw + 6, PY(v, 1) + 4, t);
        }
    for (int k = 0; k <= ax.ticks; k++) {
        const double v = axis_tick(&ax, k);
        fmt_num(v, t, sizeof t);
        put(b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" class=\"axis\"/><text x=\"%.1f\" y=\"%d\" "
               "class=\"tick\" text-anchor=\"middle\">%s</text>\n",
            PX(v), PX(v), MT + ph, MT + ph + 5, PX(v), MT + ph + 18, t);
    }
    put(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"frame\"/>\n", ML, MT, pw, ph);
    put(b, "<text x=\"%d\" y=\"%d\" class=\"label\" text-anchor=\"middle\">%s</text>\n", ML + pw / 2, CH - 10, xlabel);
    put(b, "<text transform=\"translate(16 %d) rotate(-90)\" class=\"label\" text-anchor=\"middle\">%s</text>\n",
        MT + ph / 2, ylabel);
    if (y2label)
        put(b, "<text transform=\"translate(%d %d) rotate(90)\" class=\"label\" text-anchor=\"middle\">%s</text>\n",
            CW - 12, MT + ph / 2, y2label);
    /* series */
    for (int k = 0; k < ns; k++) {
        if (s[k].n == 0) continue;
        const int a = s[k].right;
        put(b, "<path class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" d=\"", s[k].color, s[k].width);
        int first = 1;
        for (int i = 0; i < s[k].n; i++) {
            if (!drawable(&s[k], i)) continue;
            put(b, "%s%.1f %.1f", first ? "M" : " L", PX(s[k].x[i]), PY(s[k].y[i], a));
            first = 0;
        }
        put(b, "\"/>\n");
        /* markers: asked for, or a series of one point (a path of one point draws nothing) */
        int finite = 0;
        for (int i = 0; i < s[k].n; i++) finite += drawable(&s[k], i);
        if (s[k].dots || finite == 1)
            for (int i = 0; i < s[k].n; i++)
                if (drawable(&s[k], i))
                    put(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", PX(s[k].x[i]), PY(s[k].y[i], a),
                        s[k].color);
        /* legend */
        put(b, "<rect x=\"%d\" y=\"16\" width=\"14\" height=\"4\" fill=\"%s\"/><text x=\"%d\" y=\"22\" class=\"legend\">",
            CW - MR - 250 + k * 130, s[k].color, CW - MR - 232 + k * 130);
        put_text(b, s[k].label);
        put(b, "</text>\n");
    }
#undef PX
#undef PY
    put(b, "</svg></figure>\n");
}

static const char *const k_colors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
                                       "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295", "#fabfd2", "#8cd17d"};

/* The memory plan as one stacked horizontal bar, with the predicted and measured peaks. */
static void memory_chart(sbuf *b, const lj_report_data *d) {
    const int w = CW, h = 162 + d->n_segments * 19;
    char title[256];
    snprintf(title, sizeof title, "Memory plan%s%s", d->plan_model[0] ? ": " : "", d->plan_model);
    chart_open(b, "memory", title, w, h);
    double total = 0;
    for (int i = 0; i < d->n_segments; i++) total += d->segment_bytes[i];
    const double peak = d->plan_peak_bytes > 0 ? d->plan_peak_bytes : total;
    const double scale_max = fmax(fmax(total, peak), d->measured_peak_bytes) * 1.04;
    const int x0 = 24, bw = w - 48, y0 = 62, bh = 34;
    double x = x0;
    for (int i = 0; i < d->n_segments; i++) {
        const double sw = d->segment_bytes[i] / scale_max * bw;
        put(b, "<rect class=\"segment\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>", x, y0, sw,
            bh, k_colors[i % 14]);
        char g[32];
        fmt_gib(d->segment_bytes[i], g, sizeof g);
        put_text(b, d->segment_name[i]);
        put(b, ": %s</title></rect>\n", g);
        x += sw;
    }
    char g[32], line[160];
    const double px = x0 + peak / scale_max * bw;
    fmt_gib(peak, g, sizeof g);
    snprintf(line, sizeof line, "predicted peak %s", g);
    put(b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#222\" stroke-width=\"2\" stroke-dasharray=\"5 3\"/>"
           "<text x=\"%.1f\" y=\"%d\" class=\"legend\" text-anchor=\"end\">%s</text>\n",
        px, px, y0 - 14, y0 + bh + 6, px - 3, y0 - 18, line);
    if (d->measured_peak_bytes > 0) {
        const double mx = x0 + d->measured_peak_bytes / scale_max * bw;
        fmt_gib(d->measured_peak_bytes, g, sizeof g);
        snprintf(line, sizeof line, "measured peak %s (%+.2f%%)%s", g,
                 100.0 * (d->measured_peak_bytes / peak - 1.0),
                 strcmp(d->bench_device, "cpu") == 0 ? ", process RSS" : "");
        put(b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#d62728\" stroke-width=\"2\"/>"
               "<text x=\"%.1f\" y=\"%d\" class=\"legend\" fill=\"#d62728\" text-anchor=\"end\">%s</text>\n",
            mx, mx, y0 - 4, y0 + bh + 16, mx - 3, y0 + bh + 28, line);
    }
    for (int i = 0; i < d->n_segments; i++) {
        const int cx = x0, cy = y0 + bh + 50 + i * 19;
        fmt_gib(d->segment_bytes[i], g, sizeof g);
        put(b, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" class=\"legend\">",
            cx, cy - 10, k_colors[i % 14], cx + 18, cy);
        put_text(b, d->segment_name[i]);
        put(b, ": %s (%.1f%%)</text>\n", g, 100.0 * d->segment_bytes[i] / peak);
    }
    if (d->plan_recompute[0]) {
        put(b, "<text x=\"%d\" y=\"%d\" class=\"note-left\">", x0, h - 10);
        put_text(b, d->plan_recompute);
        put(b, "</text>\n");
    }
    put(b, "</svg></figure>\n");
}

/* The ablation as vertical bars of tokens/s, each with its gain over the row above. */
static void ablation_chart(sbuf *b, const lj_report_data *d) {
    chart_open(b, "ablation", "Ablation: what each optimisation earns", CW, CH);
    const int pw = CW - ML - MR, ph = CH - MT - MB - 10;
    double hi = 0;
    for (int i = 0; i < d->n_rows; i++)
        if (isfinite(d->row_tokens_per_s[i])) hi = fmax(hi, d->row_tokens_per_s[i]);
    const axis ay = make_axis(0, fmin(hi, AXIS_LIMIT) * 1.12, 1);
    char t[32];
    for (int k = 0; k <= ay.ticks; k++) {
        const double v = axis_tick(&ay, k);
        const double y = axis_map(&ay, v, MT + ph, -ph);
        fmt_num(v, t, sizeof t);
        put(b, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/><text x=\"%d\" y=\"%.1f\" "
               "class=\"tick\" text-anchor=\"end\">%s</text>\n",
            ML, ML + pw, y, y, ML - 6, y + 4, t);
    }
    put(b, "<text transform=\"translate(16 %d) rotate(-90)\" class=\"label\" text-anchor=\"middle\">tokens/s</text>\n",
        MT + ph / 2);
    const double slot = (double)pw / d->n_rows, barw = fmin(slot * 0.6, 90);
    for (int i = 0; i < d->n_rows; i++) {
        const double v = d->row_tokens_per_s[i];
        const double hgt = isfinite(v) && v > 0 ? axis_map(&ay, v, 0, ph) : 0.0; /* none for a negative or NaN row */
        const double cx = ML + slot * (i + 0.5);
        put(b, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>", cx - barw / 2,
            MT + ph - hgt, barw, hgt, k_colors[i % 14]);
        put_text(b, d->row_name[i]);
        put(b, ": %.0f tokens/s</title></rect>\n", v);
        fmt_num(v, t, sizeof t);
        char gain[48] = "";
        if (i > 0 && d->row_tokens_per_s[i - 1] > 0)
            snprintf(gain, sizeof gain, " (%+.1f%%)", 100.0 * (v / d->row_tokens_per_s[i - 1] - 1.0));
        put(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"legend\" text-anchor=\"middle\">%s%s</text>\n", cx, MT + ph - hgt - 6,
            t, gain);
        put(b, "<text x=\"%.1f\" y=\"%d\" class=\"label\" text-anchor=\"middle\">", cx, MT + ph + 18);
        put_text(b, d->row_name[i]);
        put(b, "</text><text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">MFU %.1f%%</text>\n", cx,
            MT + ph + 34, 100.0 * d->row_mfu[i]);
    }
    put(b, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" class=\"axis\"/>\n", ML, ML + pw, MT + ph, MT + ph);
    put(b, "</svg></figure>\n");
}

static double median(const double *v, int n) {
    double *t = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    int m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) t[m++] = v[i];
    double r = NAN;
    if (m > 0) {
        for (int i = 1; i < m; i++) /* insertion sort: logs are short */
            for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
                const double x = t[j];
                t[j] = t[j - 1];
                t[j - 1] = x;
            }
        r = m % 2 ? t[m / 2] : 0.5 * (t[m / 2 - 1] + t[m / 2]);
    }
    free(t);
    return r;
}

static const char k_style[] =
    "body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:24px;color:#222;background:#f6f6f4}"
    "h1{font-size:20px;margin:0 0 4px}p.sub{margin:0 0 14px;color:#555;font-size:13px}"
    "table.summary{border-collapse:collapse;margin:0 0 16px;font-size:13px;background:#fff}"
    "table.summary td{border:1px solid #ddd;padding:4px 10px}table.summary td:first-child{color:#555}"
    ".grid2{display:grid;grid-template-columns:repeat(2,580px);gap:14px}"
    "figure{margin:0;background:#fff;border:1px solid #ddd;padding:8px}"
    "svg text{font-family:inherit}.title{font-size:15px;font-weight:bold}.tick{font-size:11px;fill:#555}"
    ".label{font-size:12px;fill:#333}.legend{font-size:12px;fill:#333}.note{font-size:13px;fill:#888;text-anchor:middle}"
    ".note-left{font-size:12px;fill:#666}.grid{stroke:#eee}.axis{stroke:#999}.frame{fill:none;stroke:#bbb}"
    "footer{margin-top:14px;font-size:12px;color:#666}code{font-size:12px}";

/* Checks in the browser that every chart drew: <body data-charts-drawn="N/M" data-errors="K"
 * data-chart-rects="x,y,w,h;..."> (page pixels of each chart, for a screenshot test). */
static const char k_check_script[] =
    "<script>\n(function(){var errs=0;window.addEventListener('error',function(){errs++;"
    "document.body.setAttribute('data-errors',String(errs));});\n"
    "var svgs=document.querySelectorAll('svg.chart'),drawn=0;\n"
    "for(var i=0;i<svgs.length;i++){var s=svgs[i],bb=s.getBBox();"
    "var marks=s.querySelectorAll('path.series,rect.segment,rect.bar').length;"
    "if(bb.width>0&&bb.height>0&&marks>0)drawn++;}\n"
    "var rects=[];for(var j=0;j<svgs.length;j++){var r=svgs[j].getBoundingClientRect();"
    "rects.push([r.left+window.scrollX,r.top+window.scrollY,r.width,r.height].map(Math.round).join(','));}\n"
    "document.body.setAttribute('data-charts-drawn',drawn+'/'+svgs.length);"
    "document.body.setAttribute('data-chart-rects',rects.join(';'));"
    "document.body.setAttribute('data-errors',String(errs));})();\n</script>\n";

lj_status lj_report_write_html(const lj_report_data *d, const char *title, const char *path) {
    if (lj_report_num_charts(d) == 0)
        return lj_fail(LJ_ERR_ARG, "nothing to draw: no training log (--log-json), plan, benchmark or ablation JSON");
    sbuf b = {0};
    put(&b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>");
    put_text(&b, title);
    put(&b, "</title>\n<style>%s</style></head>\n<body>\n<h1>", k_style);
    put_text(&b, title);
    put(&b, "</h1>\n<p class=\"sub\">ljperf report: every chart is inline SVG; the page needs no network.</p>\n");

    /* summary */
    char v[64];
    put(&b, "<table class=\"summary\">\n");
    if (d->n_steps > 0) {
        put(&b, "<tr><td>iterations</td><td>%.0f</td></tr>\n", d->iteration[d->n_steps - 1]);
        put(&b, "<tr><td>final training loss</td><td>%.4f</td></tr>\n", d->loss[d->n_steps - 1]);
        if (d->n_val > 0)
            put(&b, "<tr><td>final validation loss</td><td>%.4f (iteration %.0f)</td></tr>\n", d->val_loss[d->n_val - 1],
                d->val_iteration[d->n_val - 1]);
        fmt_num(median(d->tokens_per_s, d->n_steps), v, sizeof v);
        put(&b, "<tr><td>median tokens/s</td><td>%s</td></tr>\n", v);
        const double tf = median(d->tflops_per_gpu, d->n_steps);
        if (isfinite(tf))
            put(&b, "<tr><td>median TFLOP/s per GPU (MFU)</td><td>%.3g (%.2f%% of %.3g)</td></tr>\n", tf,
                100.0 * tf / d->peak_tflops, d->peak_tflops);
    }
    if (d->plan_peak_bytes > 0) {
        fmt_gib(d->plan_peak_bytes, v, sizeof v);
        put(&b, "<tr><td>predicted peak memory</td><td>%s</td></tr>\n", v);
    }
    if (d->measured_peak_bytes > 0) {
        fmt_gib(d->measured_peak_bytes, v, sizeof v);
        put(&b, "<tr><td>measured peak memory</td><td>%s%s</td></tr>\n", v,
            strcmp(d->bench_device, "cpu") == 0 ? " (process peak RSS)" : " (device used)");
    }
    put(&b, "</table>\n<div class=\"grid2\">\n");

    /* 1. loss */
    if (d->n_steps > 0) {
        const series s[2] = {{d->iteration, d->loss, d->n_steps, "#4e79a7", "training loss", 0, 0, 1.6},
                             {d->val_iteration, d->val_loss, d->n_val, "#f28e2b", "validation loss", 0, 1, 2.0}};
        line_chart(&b, "loss", "Loss", "iteration", "lm loss (nats/token)", NULL, s, d->n_val > 0 ? 2 : 1);
    } else {
        chart_empty(&b, "loss", "Loss", "no training log (ljperf train --log-json FILE)");
    }
    /* 2. tokens/s and MFU */
    if (d->n_steps > 0) {
        double *mfu = lj_malloc((size_t)d->n_steps * sizeof(double));
        int have_mfu = 0;
        for (int i = 0; i < d->n_steps; i++) {
            mfu[i] = 100.0 * d->tflops_per_gpu[i] / d->peak_tflops;
            have_mfu |= isfinite(mfu[i]);
        }
        char mfu_label[64];
        snprintf(mfu_label, sizeof mfu_label, "MFU %% (of %.3g TFLOP/s)", d->peak_tflops);
        const series s[2] = {{d->iteration, d->tokens_per_s, d->n_steps, "#59a14f", "tokens/s", 0, 0, 1.6},
                             {d->iteration, mfu, d->n_steps, "#b07aa1", "MFU", 1, 0, 1.2}};
        line_chart(&b, "speed", "Throughput", "iteration", "tokens/s", have_mfu ? mfu_label : NULL, s, have_mfu ? 2 : 1);
        free(mfu);
    } else {
        chart_empty(&b, "speed", "Throughput", "no training log (ljperf train --log-json FILE)");
    }
    /* 3. memory */
    if (d->n_segments > 0) memory_chart(&b, d);
    else chart_empty(&b, "memory", "Memory plan", "no plan JSON (ljperf plan --json DIR/plan.json)");
    /* 4. ablation */
    if (d->n_rows > 0) ablation_chart(&b, d);
    else chart_empty(&b, "ablation", "Ablation", "no ablation JSON (ljperf benchmark --ablation --json FILE)");
    put(&b, "</div>\n<footer>");
    const char *src[4] = {d->log_path, d->plan_path, d->bench_path, d->ablation_path};
    const char *what[4] = {"training log", "plan", "benchmark", "ablation"};
    put(&b, "Sources:");
    for (int i = 0; i < 4; i++)
        if (src[i][0]) {
            put(&b, " %s <code>", what[i]);
            put_text(&b, src[i]);
            put(&b, "</code>;");
        }
    put(&b, " MFU counts 6N + 12&middot;L&middot;d&middot;s FLOPs per token (N: matmul parameters with lm_head) "
            "against %.3g TFLOP/s.</footer>\n",
        d->peak_tflops);
    put(&b, "%s</body></html>\n", k_check_script);
    lj_status s = lj_file_write_atomic(path, b.p, b.len);
    free(b.p);
    if (s != LJ_OK) lj_error_prefix("--output");
    return s;
}

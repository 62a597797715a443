/* report.c: `ljperf report` (report.h): drawing the runs, the plan, the benchmark and the
 * ablation as inline SVG in one HTML page (the inputs are read by report_read.c). */
#include "bench/report.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "base/fs.h"

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

/* A short label: 12.3k, 1.5M, 1200, 0.25, 3e-04. */
static void fmt_num(double v, char *buf, size_t len) {
    const double a = fabs(v);
    if (a >= 1e9) snprintf(buf, len, "%.3gG", v / 1e9);
    else if (a >= 1e6) snprintf(buf, len, "%.3gM", v / 1e6);
    else if (a >= 1e4) snprintf(buf, len, "%.3gk", v / 1e3);
    else if (a >= 1e3) snprintf(buf, len, "%.0f", v);
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
    int dots;    /* markers on the line */
    int dash;    /* a dashed line */
    int legend;  /* an entry of its own in the legend */
    int run;     /* the run it belongs to (data-run), -1 for none */
    const char *name; /* what it is (data-series: loss, validation, tokens_per_s, mfu, lr) */
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

static int finite_points(const series *s) {
    int n = 0;
    for (int i = 0; i < s->n; i++) n += drawable(s, i);
    return n;
}

/* A legend entry's width in pixels at the legend's 12 px font (about 6.8 px a character). */
static double legend_width(const char *label) { return 20 + 6.8 * (double)strlen(label) + 14; }

#define LEGEND_MAX 24

typedef struct {
    const char *label, *color;
    int dash;
    double x;
    int row;
} legend_entry;

/* Lays out the entries left to right from ML, in rows of the chart's width; returns the rows. */
static int legend_layout(legend_entry *e, int n) {
    double x = ML;
    int row = 0;
    for (int i = 0; i < n; i++) {
        const double w = legend_width(e[i].label);
        if (x > ML && x + w > CW - 8) x = ML, row++;
        e[i].x = x, e[i].row = row;
        x += w;
    }
    return n > 0 ? row + 1 : 0;
}

/* A line chart of up to 2 * LJ_REPORT_MAX_RUNS + 1 series over a shared x axis, with a left and
 * optionally a right axis, the legend in rows under the title (the series marked `legend`, then
 * `extra` entries) and `missing` (runs without this chart's values) as a note. Points with a
 * non-finite coordinate are left out; a chart without any finite point says so. Each series is
 * one <path class="series" data-run="K" data-series="NAME" d="M x y L x y ..."> (one vertex per
 * drawn point). */
static void line_chart(sbuf *b, const char *id, const char *title, const char *xlabel, const char *ylabel,
                       const char *y2label, const series *s, int ns, const legend_entry *extra, int nextra,
                       const char *missing) {
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
        snprintf(why, sizeof why, "the training log has no finite value of %s", ylabel);
        chart_empty(b, id, title, why);
        return;
    }
    legend_entry leg[LEGEND_MAX];
    int nleg = 0;
    for (int k = 0; k < ns && nleg < LEGEND_MAX; k++)
        if (s[k].legend) leg[nleg++] = (legend_entry){s[k].label, s[k].color, s[k].dash, 0, 0};
    for (int k = 0; k < nextra && nleg < LEGEND_MAX; k++) leg[nleg++] = extra[k];
    const int rows = legend_layout(leg, nleg) + (missing && *missing ? 1 : 0);
    const int mt = MT + 16 * rows, h = CH + 16 * rows;
    chart_open(b, id, title, CW, h);
    for (int k = 0; k < nleg; k++) {
        const int y = 38 + 16 * leg[k].row;
        put(b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"%s/>"
               "<text x=\"%.1f\" y=\"%d\" class=\"legend\">",
            leg[k].x, leg[k].x + 14, y - 4, y - 4, leg[k].color, leg[k].dash ? " stroke-dasharray=\"4 2\"" : "",
            leg[k].x + 20, y);
        put_text(b, leg[k].label);
        put(b, "</text>\n");
    }
    if (missing && *missing) {
        put(b, "<text x=\"%d\" y=\"%d\" class=\"note-left\">", ML, 38 + 16 * (rows - 1));
        put_text(b, missing);
        put(b, "</text>\n");
    }
    const int pw = CW - ML - MR, ph = h - mt - MB;
    const axis ax = make_axis(xlo, xhi, 0);
    const axis ay[2] = {make_axis(ylo[0], yhi[0], y2label != NULL), make_axis(ylo[1], yhi[1], 1)};
#define PX(v) axis_map(&ax, (v), ML, pw)
#define PY(v, a) axis_map(&ay[a], (v), mt + ph, -ph)
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
            PX(v), PX(v), mt + ph, mt + ph + 5, PX(v), mt + ph + 18, t);
    }
    put(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"frame\"/>\n", ML, mt, pw, ph);
    put(b, "<text x=\"%d\" y=\"%d\" class=\"label\" text-anchor=\"middle\">%s</text>\n", ML + pw / 2, h - 10, xlabel);
    put(b, "<text transform=\"translate(16 %d) rotate(-90)\" class=\"label\" text-anchor=\"middle\">%s</text>\n",
        mt + ph / 2, ylabel);
    if (y2label)
        put(b, "<text transform=\"translate(%d %d) rotate(90)\" class=\"label\" text-anchor=\"middle\">%s</text>\n",
            CW - 12, mt + ph / 2, y2label);
    /* series */
    for (int k = 0; k < ns; k++) {
        const int finite = finite_points(&s[k]);
        if (finite == 0) continue;
        const int a = s[k].right;
        put(b, "<path class=\"series\" data-run=\"%d\" data-series=\"%s\" fill=\"none\" stroke=\"%s\" "
               "stroke-width=\"%.1f\"%s d=\"",
            s[k].run, s[k].name, s[k].color, s[k].width, s[k].dash ? " stroke-dasharray=\"5 3\"" : "");
        int first = 1;
        for (int i = 0; i < s[k].n; i++) {
            if (!drawable(&s[k], i)) continue;
            put(b, "%s%.1f %.1f", first ? "M" : " L", PX(s[k].x[i]), PY(s[k].y[i], a));
            first = 0;
        }
        put(b, "\"/>\n");
        /* markers: asked for, or a series of one point (a path of one point draws nothing) */
        if (s[k].dots || finite == 1)
            for (int i = 0; i < s[k].n; i++)
                if (drawable(&s[k], i))
                    put(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(s[k].x[i]), PY(s[k].y[i], a),
                        s[k].color);
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
    "footer{margin-top:14px;font-size:12px;color:#666}code{font-size:12px}"
    "table.runs td{vertical-align:top;max-width:420px}table.runs td code{word-break:break-all}"
    ".swatch{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:-1px}";

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

/* The colour of run k: the palette's, skipping the MFU line's purple. */
static const char *run_color(int k) {
    static const char *const c[LJ_REPORT_MAX_RUNS] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2b",
                                                      "#76b7b2", "#9c755f", "#edc948", "#ff9da7"};
    return c[k % LJ_REPORT_MAX_RUNS];
}

static int series_finite(const lj_report_series *s) {
    for (int i = 0; i < s->n; i++)
        if (isfinite(s->x[i]) && isfinite(s->y[i])) return 1;
    return 0;
}

int lj_report_num_charts(const lj_report_data *d) {
    int loss = 0, speed = 0, lr = 0;
    for (int i = 0; i < d->n_runs; i++) {
        const lj_report_run *r = &d->runs[i];
        loss |= r->loss.n + r->val_loss.n > 0;
        speed |= r->tokens_per_s.n + r->tflops_per_gpu.n > 0;
        lr |= r->lr.n > 0;
    }
    return loss + speed + lr + (d->n_segments > 0) + (d->n_rows > 0);
}

/* "no tokens/s in: A, B" for the runs with a log and without `what` (`which` picks the series:
 * 0 loss, 1 tokens/s, 2 learning rate); "" when every run has it. */
static void missing_note(const lj_report_data *d, const char *what, int which, char *buf, size_t len) {
    char list[400] = "";
    size_t n = 0;
    for (int i = 0; i < d->n_runs && n + 1 < sizeof list; i++) {
        const lj_report_run *r = &d->runs[i];
        const lj_report_series *s = which == 0 ? &r->loss : which == 1 ? &r->tokens_per_s : &r->lr;
        if (!r->kind || series_finite(s) || (which == 0 && series_finite(&r->val_loss))) continue;
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "", r->label);
    }
    if (list[0]) snprintf(buf, len, "no %.20s in: %s", what, list);
    else buf[0] = '\0';
}

/* One summary cell per run of row `name`; `cell` writes run i's. */
typedef void (*cell_fn)(sbuf *b, const lj_report_run *r, const lj_report_data *d);

static void summary_row(sbuf *b, const lj_report_data *d, const char *name, cell_fn cell) {
    put(b, "<tr><td>%s</td>", name);
    for (int i = 0; i < d->n_runs; i++) {
        put(b, "<td>");
        if (d->runs[i].kind) cell(b, &d->runs[i], d);
        put(b, "</td>");
    }
    put(b, "</tr>\n");
}

static void text_or_dash(sbuf *b, const char *s) {
    if (s && *s) put_text(b, s);
    else put(b, "&ndash;");
}

static void cell_program(sbuf *b, const lj_report_run *r, const lj_report_data *d) { text_or_dash(b, r->id.program); }
static void cell_model(sbuf *b, const lj_report_run *r, const lj_report_data *d) { text_or_dash(b, r->id.model); }
static void cell_precision(sbuf *b, const lj_report_run *r, const lj_report_data *d) { text_or_dash(b, r->id.precision); }
static void cell_date(sbuf *b, const lj_report_run *r, const lj_report_data *d) { text_or_dash(b, r->id.date); }

static void cell_hardware(sbuf *b, const lj_report_run *r, const lj_report_data *d) {
    if (r->id.devices > 0 && r->id.device[0]) {
        put(b, "%d &times; ", r->id.devices);
        put_text(b, r->id.device);
    } else if (r->id.devices > 0) {
        put(b, "%d device%s", r->id.devices, r->id.devices == 1 ? "" : "s");
    } else {
        text_or_dash(b, r->id.device);
    }
}

static void cell_commit(sbuf *b, const lj_report_run *r, const lj_report_data *d) {
    if (r->id.commit[0]) {
        put(b, "<code>");
        put_text(b, r->id.commit);
        put(b, "</code>");
    } else {
        put(b, "&ndash;");
    }
}

static void cell_command(sbuf *b, const lj_report_run *r, const lj_report_data *d) {
    if (r->id.command[0]) {
        put(b, "<code>");
        put_text(b, r->id.command);
        put(b, "</code>");
    } else {
        put(b, "&ndash;");
    }
}

static void cell_log(sbuf *b, const lj_report_run *r, const lj_report_data *d) {
    put_text(b, r->kind);
    put(b, ": <code>");
    put_text(b, r->path);
    put(b, "</code>");
    if (r->starts > 1) put(b, " (%d starts: resumed)", r->starts);
}

static double last_finite_x(const lj_report_series *s, double *y) {
    for (int i = s->n - 1; i >= 0; i--)
        if (isfinite(s->x[i]) && isfinite(s->y[i])) return *y = s->y[i], s->x[i];
    return *y = NAN, NAN;
}

static void cell_iterations(sbuf *b, const lj_report_run *r, const lj_report_data *d) {
    double y;
    const double x = last_finite_x(&r->loss, &y);
    if (isfinite(x)) put(b, "%.0f", x);
    else put(b, "&ndash;");
}

static void cell_loss(sbuf *b, const lj_report_run *r, const lj_report_data *d) {
    double y;
    (void)last_finite_x(&r->loss, &y);
    if (isfinite(y)) put(b, "%.4f", y);
    else put(b, "&ndash;");
}

static void cell_val(sbuf *b, const lj_report_run *r, const lj_report_data *d) {
    double y;
    const double x = last_finite_x(&r->val_loss, &y);
    if (isfinite(y)) put(b, "%.4f (iteration %.0f)", y, x);
    else put(b, "&ndash;");
}

static void cell_tps(sbuf *b, const lj_report_run *r, const lj_report_data *d) {
    const double m = median(r->tokens_per_s.y, r->tokens_per_s.n);
    char v[32];
    fmt_num(m, v, sizeof v);
    if (isfinite(m)) put(b, "%s", v);
    else put(b, "&ndash;");
}

static void cell_tflops(sbuf *b, const lj_report_run *r, const lj_report_data *d) {
    const double tf = median(r->tflops_per_gpu.y, r->tflops_per_gpu.n);
    if (isfinite(tf)) put(b, "%.3g (%.2f%% of %.3g)", tf, 100.0 * tf / d->peak_tflops, d->peak_tflops);
    else put(b, "&ndash;");
}

/* The runs: one column each, their identity and their summary. */
static void runs_table(sbuf *b, const lj_report_data *d) {
    put(b, "<table class=\"summary runs\">\n<tr><td>run</td>");
    for (int i = 0; i < d->n_runs; i++) {
        put(b, "<td><span class=\"swatch\" style=\"background:%s\"></span><b class=\"run-label\">", run_color(i));
        put_text(b, d->runs[i].label);
        put(b, "</b></td>");
    }
    put(b, "</tr>\n");
    summary_row(b, d, "program", cell_program);
    summary_row(b, d, "model", cell_model);
    summary_row(b, d, "precision", cell_precision);
    summary_row(b, d, "hardware", cell_hardware);
    summary_row(b, d, "date", cell_date);
    summary_row(b, d, "ljperf commit", cell_commit);
    summary_row(b, d, "command", cell_command);
    summary_row(b, d, "training log", cell_log);
    summary_row(b, d, "iterations", cell_iterations);
    summary_row(b, d, "final training loss", cell_loss);
    summary_row(b, d, "final validation loss", cell_val);
    summary_row(b, d, "median tokens/s", cell_tps);
    summary_row(b, d, "median TFLOP/s per GPU (MFU)", cell_tflops);
    put(b, "</table>\n");
}

static series run_series(const lj_report_series *src, int run, const char *color, const char *label, const char *name) {
    return (series){.x = src->x, .y = src->y, .n = src->n, .color = color, .label = label, .run = run, .name = name,
                    .legend = 1, .width = 1.6};
}

lj_status lj_report_write_html(const lj_report_data *d, const char *title, const char *path) {
    if (lj_report_num_charts(d) == 0)
        return lj_fail(LJ_ERR_ARG, "nothing to draw: no training log (--log-json, TensorBoard events, a Megatron-LM "
                                   "log), plan, benchmark or ablation JSON");
    sbuf b = {0};
    put(&b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>");
    put_text(&b, title);
    put(&b, "</title>\n<style>%s</style></head>\n<body>\n<h1>", k_style);
    put_text(&b, title);
    put(&b, "</h1>\n<p class=\"sub\">ljperf report: every chart is inline SVG; the page needs no network.</p>\n");

    const int logs = lj_report_num_logs(d);
    if (logs > 0) runs_table(&b, d);
    char v[64];
    if (d->plan_peak_bytes > 0 || d->measured_peak_bytes > 0) {
        put(&b, "<table class=\"summary\">\n");
        if (d->plan_peak_bytes > 0) {
            fmt_gib(d->plan_peak_bytes, v, sizeof v);
            put(&b, "<tr><td>predicted peak memory</td><td>%s</td></tr>\n", v);
        }
        if (d->measured_peak_bytes > 0) {
            fmt_gib(d->measured_peak_bytes, v, sizeof v);
            put(&b, "<tr><td>measured peak memory</td><td>%s%s</td></tr>\n", v,
                strcmp(d->bench_device, "cpu") == 0 ? " (process peak RSS)" : " (device used)");
        }
        put(&b, "</table>\n");
    }
    put(&b, "<div class=\"grid2\">\n");

    const char *no_log = "no training log (ljperf train --log-json FILE, TensorBoard events, a Megatron-LM log)";
    series s[2 * LJ_REPORT_MAX_RUNS + 1];
    char missing[512];
    /* 1. loss: training (solid) and validation (dashed, dots) per run */
    int ns = 0, any_val = 0;
    for (int i = 0; i < d->n_runs; i++) {
        const lj_report_run *r = &d->runs[i];
        if (r->loss.n) s[ns++] = run_series(&r->loss, i, run_color(i), r->label, "loss");
        if (r->val_loss.n) {
            s[ns] = run_series(&r->val_loss, i, run_color(i), "validation loss", "validation");
            s[ns].dash = s[ns].dots = 1, s[ns].legend = r->loss.n == 0, s[ns].width = 2.0;
            if (!s[ns].legend) any_val = 1;
            else s[ns].label = r->label;
            ns++;
        }
    }
    if (ns > 0) {
        const legend_entry val = {"validation (dashed, dots)", "#888", 1, 0, 0};
        missing_note(d, "loss", 0, missing, sizeof missing);
        line_chart(&b, "loss", "Loss", "iteration", "lm loss (nats/token)", NULL, s, ns, &val, any_val, missing);
    } else {
        chart_empty(&b, "loss", "Loss", no_log);
    }
    /* 2. tokens/s per run; with one run also its MFU on the right axis */
    ns = 0;
    double *mfu = NULL;
    int have_mfu = 0;
    for (int i = 0; i < d->n_runs; i++)
        if (d->runs[i].tokens_per_s.n) s[ns++] = run_series(&d->runs[i].tokens_per_s, i, run_color(i),
                                                            d->runs[i].label, "tokens_per_s");
    if (logs == 1) {
        for (int i = 0; i < d->n_runs; i++) {
            const lj_report_series *tf = &d->runs[i].tflops_per_gpu;
            if (!d->runs[i].kind || tf->n == 0) continue;
            mfu = lj_malloc((size_t)tf->n * sizeof(double));
            for (int k = 0; k < tf->n; k++) {
                mfu[k] = 100.0 * tf->y[k] / d->peak_tflops;
                have_mfu |= isfinite(mfu[k]) && isfinite(tf->x[k]);
            }
            if (have_mfu) {
                s[ns] = run_series(tf, i, "#b07aa1", "MFU", "mfu");
                s[ns].y = mfu, s[ns].right = 1, s[ns].width = 1.2;
                ns++;
            }
            break;
        }
    }
    if (ns > 0) {
        char mfu_label[64];
        snprintf(mfu_label, sizeof mfu_label, "MFU %% (of %.3g TFLOP/s)", d->peak_tflops);
        missing_note(d, "tokens/s", 1, missing, sizeof missing);
        line_chart(&b, "speed", "Throughput", "iteration", "tokens/s", have_mfu ? mfu_label : NULL, s, ns, NULL, 0,
                   missing);
    } else {
        chart_empty(&b, "speed", "Throughput", logs ? "no tokens/s in the training logs" : no_log);
    }
    free(mfu);
    /* 3. the learning rate per run */
    ns = 0;
    for (int i = 0; i < d->n_runs; i++)
        if (d->runs[i].lr.n) s[ns++] = run_series(&d->runs[i].lr, i, run_color(i), d->runs[i].label, "lr");
    if (ns > 0) {
        missing_note(d, "learning rate", 2, missing, sizeof missing);
        line_chart(&b, "lr", "Learning rate", "iteration", "learning rate", NULL, s, ns, NULL, 0, missing);
    } else {
        chart_empty(&b, "lr", "Learning rate", logs ? "no learning rate in the training logs" : no_log);
    }
    /* 4. memory */
    if (d->n_segments > 0) memory_chart(&b, d);
    else chart_empty(&b, "memory", "Memory plan", "no plan JSON (ljperf plan --json DIR/plan.json)");
    /* 5. ablation */
    if (d->n_rows > 0) ablation_chart(&b, d);
    else chart_empty(&b, "ablation", "Ablation", "no ablation JSON (ljperf benchmark --ablation --json FILE)");
    put(&b, "</div>\n<footer>Sources:");
    for (int i = 0; i < d->n_runs; i++)
        if (d->runs[i].kind) {
            put(&b, " ");
            put_text(&b, d->runs[i].kind);
            put(&b, " <code>");
            put_text(&b, d->runs[i].path);
            put(&b, "</code>;");
        }
    const char *src[3] = {d->plan_path, d->bench_path, d->ablation_path};
    const char *what[3] = {"plan", "benchmark", "ablation"};
    for (int i = 0; i < 3; i++)
        if (src[i][0]) {
            put(&b, " %s <code>", what[i]);
            put_text(&b, src[i]);
            put(&b, "</code>;");
        }
    put(&b, " MFU counts 6N + 12&middot;L&middot;d&middot;s FLOPs per token (N: matmul parameters with lm_head) "
            "against %.3g TFLOP/s.</footer>\n",
        d->peak_tflops);
    put(&b, "%s</body></html>\n", k_check_script);
    lj_status st = lj_file_write_atomic(path, b.p, b.len);
    free(b.p);
    if (st != LJ_OK) lj_error_prefix("report --output %s", path);
    return st;
}

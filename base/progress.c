/* progress.c: the progress bar and plain progress lines (progress.h). */
#include "base/progress.h"

#include <string.h>
#include <unistd.h>

/* CI=true (and 1/yes) asks for plain lines, as CI systems set it. */
static int want_tty(void) {
    const char *ci = getenv("CI");
    if (ci && (!strcmp(ci, "true") || !strcmp(ci, "1") || !strcmp(ci, "yes"))) return 0;
    return isatty(2);
}

void lj_progress_begin(lj_progress *p, const char *what, uint64_t total_bytes) {
    memset(p, 0, sizeof *p);
    snprintf(p->what, sizeof p->what, "%s", what);
    p->total = total_bytes;
    p->t0 = p->last = lj_time_sec();
    p->tty = want_tty();
    const char *mode = getenv("LJPERF_PROGRESS");
    p->always = mode && !strcmp(mode, "always");
    p->active = !lj_log_is_quiet() && !(mode && !strcmp(mode, "never"));
}

static void show(lj_progress *p, double now) {
    const double dt = now - p->t0, rate = dt > 0 ? (double)p->done / dt : 0.0;
    const double left = rate > 0 && p->total > p->done ? (double)(p->total - p->done) / rate : 0.0;
    const double frac = p->total ? (double)p->done / (double)p->total : 1.0;
    char done[32], total[32];
    lj_format_bytes(p->done, done, sizeof done);
    lj_format_bytes(p->total, total, sizeof total);
    if (p->tty) {
        char bar[31];
        const int fill = (int)(frac * 30.0 + 0.5);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '-';
        bar[30] = '\0';
        fprintf(stderr, "\r%s [%s] %3.0f%% %s / %s, %.0f MB/s, %.0f s left\033[K", p->what, bar, 100.0 * frac, done,
                total, rate / 1e6, left);
    } else {
        fprintf(stderr, "%s: %.0f%% (%s of %s, %.0f MB/s, %.0f s left)\n", p->what, 100.0 * frac, done, total,
                rate / 1e6, left);
    }
    fflush(stderr);
    p->shown++;
    p->last = now;
}

void lj_progress_update(lj_progress *p, uint64_t done_bytes) {
    p->done = done_bytes;
    if (!p->active) return;
    const double now = lj_time_sec();
    if (!p->always && now - p->t0 < 1.0) return;
    if (p->shown == 0 || now - p->last >= (p->tty ? 0.1 : 5.0)) show(p, now);
}

void lj_progress_end(lj_progress *p) {
    if (!p->active || p->shown == 0) return;
    const double dt = lj_time_sec() - p->t0;
    char total[32];
    lj_format_bytes(p->done, total, sizeof total);
    fprintf(stderr, "%s%s: %s in %.1f s (%.0f MB/s)%s\n", p->tty ? "\r" : "", p->what, total, dt,
            dt > 0 ? (double)p->done / dt / 1e6 : 0.0, p->tty ? "\033[K" : "");
    fflush(stderr);
    p->active = 0;
}

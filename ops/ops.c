/* ops.c: allocation accounting shared by the backends, and the host side of AdamW's per-step
 * scalars. */
#include "ops/ops.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static _Atomic int64_t g_allocated;

/* The history of lj_ops_memory_history: appended under the lock while `on`. */
#define LJ_MEMORY_EVENTS_MAX 100000
static struct {
    pthread_mutex_t mu;
    int on, count, cap;
    lj_ops_memory_event *events;
    size_t baseline, peak;
    int64_t dropped;
    double start_sec;
} g_history = {.mu = PTHREAD_MUTEX_INITIALIZER};

void lj_ops_track(const void *ptr, int64_t bytes) {
    const int64_t after = atomic_fetch_add(&g_allocated, bytes) + bytes;
    pthread_mutex_lock(&g_history.mu);
    if (g_history.on) {
        if ((size_t)after > g_history.peak) g_history.peak = (size_t)after;
        if (g_history.count == LJ_MEMORY_EVENTS_MAX) {
            g_history.dropped++;
        } else {
            if (g_history.count == g_history.cap) {
                g_history.cap = g_history.cap ? 2 * g_history.cap : 256;
                g_history.events = lj_realloc(g_history.events, (size_t)g_history.cap * sizeof *g_history.events);
            }
            g_history.events[g_history.count++] = (lj_ops_memory_event){lj_time_sec(), ptr, bytes, (size_t)after};
        }
    }
    pthread_mutex_unlock(&g_history.mu);
}

void lj_ops_memory_history(int on) {
    pthread_mutex_lock(&g_history.mu);
    if (on) {
        g_history.count = 0;
        g_history.dropped = 0;
        g_history.baseline = g_history.peak = lj_ops_allocated_bytes();
        g_history.start_sec = lj_time_sec();
    }
    g_history.on = on;
    pthread_mutex_unlock(&g_history.mu);
}

lj_ops_memory_event *lj_ops_memory_events(int *count, lj_ops_memory_summary *sum) {
    pthread_mutex_lock(&g_history.mu);
    *count = g_history.count;
    if (sum) *sum = (lj_ops_memory_summary){g_history.start_sec, g_history.baseline, g_history.peak, g_history.dropped};
    lj_ops_memory_event *e = NULL;
    if (g_history.count > 0) {
        e = lj_malloc((size_t)g_history.count * sizeof *e);
        memcpy(e, g_history.events, (size_t)g_history.count * sizeof *e);
    }
    pthread_mutex_unlock(&g_history.mu);
    return e;
}

size_t lj_ops_allocated_bytes(void) { return (size_t)atomic_load(&g_allocated); }

void lj_adamw_step_scalars(float *out, const lj_adamw_hparams *hp, float lr, int step) {
    LJ_ASSERT(step >= 1, "AdamW step %d: steps count from 1", step);
    /* torch/optim/adamw.py (_single_tensor_adamw): bias_correction1 = 1 - beta1 ** step,
     * step_size = lr / bias_correction1, bias_correction2_sqrt = sqrt(1 - beta2 ** step), in
     * Python floats (double) */
    const double bc1 = 1.0 - pow((double)hp->beta1, (double)step), bc2 = 1.0 - pow((double)hp->beta2, (double)step);
    out[LJ_ADAMW_LR] = lr;
    out[LJ_ADAMW_STEP_SIZE] = (float)((double)lr / bc1);
    out[LJ_ADAMW_BC2_SQRT] = (float)sqrt(bc2);
}

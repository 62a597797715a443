/* worker.c: the background job thread of worker.h. */
#include "base/worker.h"

#include <string.h>

/* Runs job w->done outside the lock (held on entry and on return) and records its result. */
static void run_next(lj_worker *w) {
    const int64_t job = w->done;
    const int failed = w->error != 0;
    pthread_mutex_unlock(&w->mu);
    const int e = w->fn(w->ctx, job, failed);
    pthread_mutex_lock(&w->mu);
    if (e && !w->error) w->error = e;
    w->done++;
    pthread_cond_broadcast(&w->cv);
}

static void *worker_thread(void *arg) {
    lj_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->done == w->queued && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
        if (w->done == w->queued) break; /* stopped, and nothing left */
        run_next(w);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

void lj_worker_start(lj_worker *w, lj_worker_fn fn, void *ctx) {
    memset(w, 0, sizeof *w);
    w->fn = fn;
    w->ctx = ctx;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->started = 1;
    w->has_thread = pthread_create(&w->thread, NULL, worker_thread, w) == 0;
}

void lj_worker_submit(lj_worker *w) {
    pthread_mutex_lock(&w->mu);
    w->queued++;
    if (w->has_thread) pthread_cond_broadcast(&w->cv);
    else run_next(w); /* no thread: the caller runs it */
    pthread_mutex_unlock(&w->mu);
}

int lj_worker_wait(lj_worker *w, int64_t pending, int64_t *done) {
    pthread_mutex_lock(&w->mu);
    while (w->queued - w->done > pending) pthread_cond_wait(&w->cv, &w->mu);
    if (done) *done = w->done;
    const int e = w->error;
    pthread_mutex_unlock(&w->mu);
    return e;
}

int lj_worker_fail(lj_worker *w, int code) {
    pthread_mutex_lock(&w->mu);
    const int first = w->error == 0;
    if (first) w->error = code;
    pthread_mutex_unlock(&w->mu);
    return first;
}

void lj_worker_stop(lj_worker *w) {
    if (!w->started) return;
    if (w->has_thread) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    w->started = w->has_thread = 0;
}

/* worker.h: one background thread that runs numbered jobs in the order they are submitted: the
 * two-buffer pipelines of the checkpoint I/O, where the caller fills buffer job % 2, submits it
 * and waits until a buffer is free again (lj_worker_wait with pending 1) while the thread hashes,
 * converts or writes the other. A job returns 0 or an error code; the first non-zero code is
 * kept and returned by every later lj_worker_wait, and later jobs are told (`failed`) so that
 * they can skip their output. Without a thread (pthread_create failed) lj_worker_submit runs the
 * job on the caller's thread, with the same results. */
#ifndef LJ_WORKER_H
#define LJ_WORKER_H

#include <pthread.h>
#include <stdint.h>

/* Runs job number `job` (0, 1, 2, ... in submission order) on ctx; `failed`: an earlier job or
 * the caller failed. Returns 0 or an error code (non-zero). */
typedef int (*lj_worker_fn)(void *ctx, int64_t job, int failed);

typedef struct {
    lj_worker_fn fn;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started, has_thread, stop;
    int64_t queued, done; /* jobs [done, queued) are the thread's */
    int error;            /* the first non-zero code of a job or of lj_worker_fail */
} lj_worker;

/* Starts the thread (a failed start leaves the jobs to lj_worker_submit's caller). */
void lj_worker_start(lj_worker *w, lj_worker_fn fn, void *ctx);
/* Submits job number w->queued: the caller has filled what it reads. */
void lj_worker_submit(lj_worker *w);
/* Waits until at most `pending` jobs are the thread's; *done (optional) gets the jobs finished.
 * Returns the first error code (0: none). */
int lj_worker_wait(lj_worker *w, int64_t pending, int64_t *done);
/* Records a failure of the caller's own (code non-zero); returns 1 when it is the first. */
int lj_worker_fail(lj_worker *w, int code);
/* Runs the jobs still queued, joins the thread and frees its state; a no-op when not started
 * or already stopped. */
void lj_worker_stop(lj_worker *w);

#endif

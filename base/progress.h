/* progress.h: progress of long work (checkpoint shards and HF weight files written or read, weight
 * initialisation, the memory plan's allocation): bytes done of the total, MB/s and the time left,
 * on stderr only (never in --log-json or TensorBoard). A terminal gets one bar redrawn in place
 * (at most 10 times a second); a file or pipe, or CI=true, gets a plain line at most every 5 s.
 * Nothing is shown for work that ends within its first second, nor when logging is quiet
 * (lj_log_set_quiet: ranks other than 0). LJPERF_PROGRESS=always shows it from the start, whatever
 * its length (the first update prints a line, as a test needs); LJPERF_PROGRESS=never shows none. */
#ifndef LJ_PROGRESS_H
#define LJ_PROGRESS_H

#include "base/base.h"

typedef struct {
    char what[160];     /* e.g. "writing ckpt/iter_0000100/state.safetensors" */
    uint64_t total, done; /* bytes */
    double t0, last;    /* lj_time_sec of the start and of the last line */
    int shown;          /* lines or bar frames printed */
    int tty;            /* a bar in place, else plain lines */
    int active;
    int always;         /* LJPERF_PROGRESS=always: no first second of silence */
} lj_progress;

/* Starts reporting `what` over `total_bytes`. */
void lj_progress_begin(lj_progress *p, const char *what, uint64_t total_bytes);

/* `done_bytes` of the total are done (monotonic). Cheap when nothing is due. */
void lj_progress_update(lj_progress *p, uint64_t done_bytes);

/* The work ended: when anything was shown, one last line with the bytes, the time and MB/s. */
void lj_progress_end(lj_progress *p);

#endif

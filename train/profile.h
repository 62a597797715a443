/* profile.h: Megatron-LM's profiling flags in the training loop (docs/megatron.md, "Profiling").
 *   --profile: on each profiled rank, the profile window opens before iteration
 *     --profile-step-start + 1 (cudaProfilerStart, then NVTX ranges on: the model's passes, layers
 *     and optimizer step, lj_model_range_push, and the NCCL calls, lj_dist_set_ranges) and closes
 *     after iteration --profile-step-end (cudaProfilerStop), as Megatron-LM's training loop does
 *     around its own iteration counter; `nsys profile --capture-range=cudaProfilerApi` records
 *     just the window. A run resumed past the start opens none (Megatron's rule); a run that
 *     ends inside the window closes it at the end.
 *   --record-memory-history: each profiled rank writes its memory snapshot (plan/snapshot.h) to
 *     --memory-snapshot-path with "_<rank>" before the extension, after set-up and at every
 *     logged iteration (Megatron dumps torch's at each log interval), and at the end.
 *   --profile-ranks: the ranks that do either (none given: every rank, as in Megatron-LM).
 * On the CPU backend (no profiler entries) the window opens and closes all the same, with no
 * ranges. */
#ifndef LJ_TRAIN_PROFILE_H
#define LJ_TRAIN_PROFILE_H

#include "base/fs.h"
#include "parallel/dp.h"
#include "plan/snapshot.h"
#include "train/train.h"

typedef struct {
    const lj_train_config *cfg;
    int profiled;       /* this rank is one of --profile-ranks */
    int window;         /* --profile on this rank, and the window not yet past */
    int open;           /* the window is open */
    int memory;         /* --record-memory-history on this rank */
    char path[LJ_PATH_MAX]; /* this rank's snapshot file */
    lj_memory_timeline timeline;
} lj_train_profiler;

/* Sets the profiler up for `rank` of `world`, before the run builds anything. Errors:
 * LJ_ERR_ARG naming --profile-ranks when a rank is not one of the run's, or
 * --memory-snapshot-path when this rank's file name does not fit. */
lj_status lj_train_profiler_init(lj_train_profiler *p, const lj_train_config *c, int rank, int world);

/* The run is set up and starts after `done` iterations (a resume: more than 0): says on rank 0
 * what will be profiled and writes the first snapshot. */
void lj_train_profiler_start(lj_train_profiler *p, lj_model *m, lj_dp *dp, const lj_plan *plan, int done);

/* Before the iteration after `done` completed ones: opens the window when done is
 * --profile-step-start. */
void lj_train_profiler_before(lj_train_profiler *p, lj_model *m, lj_dp *dp, int done);

/* After iteration `done` (and its log line): closes the window when done is --profile-step-end;
 * with the memory history, samples the timeline and writes the snapshot on a logged iteration
 * (`logged`). A failed write is a warning (training goes on). */
void lj_train_profiler_after(lj_train_profiler *p, lj_model *m, lj_dp *dp, const lj_plan *plan, int done, int logged);

/* The end of the run after `done` iterations: closes an open window, writes the last snapshot,
 * frees what the profiler holds. Safe on a profiler that was never set up (zeroed). */
void lj_train_profiler_finish(lj_train_profiler *p, lj_model *m, lj_dp *dp, const lj_plan *plan, int done);

#endif

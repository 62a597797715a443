/* snapshot.h: the memory snapshot of a run (--record-memory-history, Megatron-LM's flag for
 * torch.cuda.memory._record_memory_history): what the memory plan lays out (every buffer by
 * name, arena, offset and size), what the allocator did and when (the events of
 * lj_ops_memory_history, each arena's allocation named), and how much was allocated over the
 * iterations. One JSON file per rank; the format is docs/reference.md's "Memory snapshots". */
#ifndef LJ_SNAPSHOT_H
#define LJ_SNAPSHOT_H

#include "plan/plan.h"

/* Allocated bytes (and the device's use) over a span of iterations in which they stayed the same. */
typedef struct {
    int from_iteration, to_iteration; /* iterations completed: 0 is after set-up */
    size_t allocated_bytes;           /* lj_ops_allocated_bytes() */
    size_t device_used_bytes;         /* CUDA: total - free of ops->memory_info (all of the process's
                                         device memory: the plan, libraries, the context); 0 elsewhere */
    size_t device_total_bytes;
} lj_memory_sample;

/* The samples of a run: a new one only when a figure changes, so a run whose memory is its plan
 * has one (at most LJ_MEMORY_SAMPLES_MAX; later changes extend the last). */
#define LJ_MEMORY_SAMPLES_MAX 10000
typedef struct {
    lj_memory_sample *samples;
    int count, cap;
} lj_memory_timeline;

/* Takes the figures after `iteration` iterations (on CUDA, ops->memory_info: a device query). */
void lj_memory_timeline_sample(lj_memory_timeline *t, const lj_ops *ops, int iteration);
void lj_memory_timeline_free(lj_memory_timeline *t);

/* The path Megatron-LM writes rank `rank`'s snapshot to: `path` with "_<rank>" before its
 * extension ("mem/snapshot.json" -> "mem/snapshot_0.json"; no extension: at the end), into
 * buf[LJ_PATH_MAX]. Errors: LJ_ERR_ARG when it does not fit. */
lj_status lj_memory_snapshot_path(char *buf, const char *path, int rank);

/* Writes the snapshot of this rank after `iteration` iterations to `path`, whole or not at all
 * (a temporary file renamed over it): `plan` (allocated: its arenas' bases name the allocator's
 * events), the allocator's history since lj_ops_memory_history(1), the timeline `t` (may be
 * NULL). Errors: LJ_ERR_IO naming the file. */
lj_status lj_memory_snapshot_write(const char *path, const lj_plan *plan, const lj_ops *ops, int rank, int world_size,
                                   int iteration, const lj_memory_timeline *t);

#endif

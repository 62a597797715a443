/* plan.h: the static memory plan. One function (lj_plan_build) turns a run configuration
 * (model shape, micro-batch, sequence length, recompute policy per layer, fused or not,
 * training or generation, backend dtypes and workspaces) into a list of named buffers with
 * sizes and offsets in a few arenas. The runtime allocates exactly the arenas, once, and
 * binds every pointer of lj_model to base + offset. The same plan is the memory predictor.
 * The model's own buffers are walked here; the optimizer, optimizer offload and the residency
 * declare theirs through their plan entries (model/buffers.h).
 */
#ifndef LJ_PLAN_H
#define LJ_PLAN_H

#include "model/model.h"
#include "model/buffers.h"

/* The arenas (lj_arena) are model/buffers.h's, where the parts of a run declare their buffers. */
const char *lj_arena_name(lj_arena a);

typedef struct {
    char name[48];
    lj_arena arena;
    size_t offset; /* bytes from the arena base */
    size_t bytes;
} lj_plan_buffer;

typedef struct {
    lj_plan_buffer *buffers;
    int count, cap;
    size_t arena_bytes[LJ_ARENA_COUNT];
    size_t total_bytes;   /* sum of the arenas */
    void *base[LJ_ARENA_COUNT]; /* after lj_plan_allocate */
} lj_plan;

/* Alignment of every buffer, bytes. */
#define LJ_PLAN_ALIGN 256

/* Builds the plan of `m` (lj_model_init done, and lj_parallelize and lj_offload_attach where they
 * apply: its cfg, opt, ops, shards and attached parts decide every size).
 * Pure: allocates no device memory. Free with lj_plan_free. */
void lj_plan_build(lj_plan *plan, const lj_model *m);

/* Allocates each non-empty arena once through m->ops->alloc, zeroes it, and binds every
 * pointer of `m`.
 * Errors: LJ_ERR_OOM naming the arena and the plan's total (nothing stays allocated). */
lj_status lj_plan_allocate(lj_plan *plan, lj_model *m);

/* Frees the arenas. */
void lj_plan_release(lj_plan *plan, const lj_ops *ops);
void lj_plan_free(lj_plan *plan);

/* Under optimizer offload (optim/offload.h), one line with the host bytes of the
 * offloaded optimizer state and staging (lj_offload_bytes); nothing otherwise. */
void lj_plan_print_offload(const lj_model *m, FILE *f);

#endif

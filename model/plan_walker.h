/* plan_walker.h: how a module declares its device buffers to the static memory plan
 * (plan/plan.h) without knowing the plan. The plan walks every buffer of a run twice in the same
 * order: once to size them (take returns NULL), once to bind them (take returns each buffer's
 * address); a module that owns buffers is given the walker and calls take for each of them, in
 * a fixed order, keeping what it returns. The arenas are the plan's (plan/plan.c lj_arena_name). */
#ifndef LJ_PLAN_WALKER_H
#define LJ_PLAN_WALKER_H

#include <stddef.h>

typedef enum {
    LJ_ARENA_PARAMS = 0, /* bf16/f32 parameters */
    LJ_ARENA_MASTER,     /* f32 master weights (GPU recipe) */
    LJ_ARENA_GRADS,      /* weight gradients */
    LJ_ARENA_OPTIMIZER,  /* AdamW moments */
    LJ_ARENA_ACTIVATIONS,/* saved activations, per layer under its recompute policy */
    LJ_ARENA_SCRATCH,    /* shared temporaries: recompute buffers, backward gradients, logits */
    LJ_ARENA_WORKSPACE,  /* op workspaces (attention, norms, cross-entropy) */
    LJ_ARENA_COUNT
} lj_arena;

typedef struct lj_plan_walker lj_plan_walker;
struct lj_plan_walker {
    /* Declares buffer `name` (at most 47 characters) of `bytes` bytes in `arena`: NULL while the
     * plan is sized, the buffer's address (NULL for 0 bytes) while it is bound. */
    void *(*take)(lj_plan_walker *w, lj_arena arena, const char *name, size_t bytes);
};

#endif

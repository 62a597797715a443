/* buffers.h: how a part of a run declares its device buffers to the static memory plan
 * (plan/plan.h). The plan walks the run's parts in a fixed order; each part that owns device
 * memory has a plan entry, `void part_plan(lj_model *m, lj_buffer_walker *w)`, which calls
 * lj_buffer_take once per buffer (name, arena, bytes) and stores what it returns in its own
 * pointers. The walk runs twice with the same calls: sizing (every take returns NULL; the plan
 * records the buffer) and binding (each take returns base + offset of its arena). This is how the
 * plan places what each part declares without knowing the part's internals: the model's
 * activations (plan/plan.c), the optimizer's state (optim/optim.h lj_optim_plan), optimizer
 * offload (optim/offload.h), the residency's slots (model/residency.h `plan`, e.g. ZeRO-2/3's).
 */
#ifndef LJ_BUFFERS_H
#define LJ_BUFFERS_H

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

/* The plan's walker (plan/plan.c implements it). `bind`: 0 while sizing, 1 while binding. */
typedef struct lj_buffer_walker lj_buffer_walker;
struct lj_buffer_walker {
    void *(*take)(lj_buffer_walker *w, lj_arena arena, const char *name, size_t bytes);
    int bind;
};

/* Declares one buffer of `bytes` in `arena` (name: at most 47 characters, shown by `ljperf plan
 * --buffers`); returns its address while binding (NULL for 0 bytes), NULL while sizing. */
static inline void *lj_buffer_take(lj_buffer_walker *w, lj_arena arena, const char *name, size_t bytes) {
    return w->take(w, arena, name, bytes);
}

#endif

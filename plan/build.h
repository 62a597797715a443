/* build.h: the one set-up of a model and its state, shared by train, the benchmark and the
 * planner. A run's model is described once, as an lj_model_setup (the model's own options, its
 * ZeRO sharding, optimizer offload), and built in one order: lj_model_init, lj_parallelize
 * (parallel/parallel.h), lj_offload_attach (optim/offload.h), lj_plan_build; then, for a run
 * that computes, the plan's arenas, the RoPE tables and the initial weights. */
#ifndef LJ_BUILD_H
#define LJ_BUILD_H

#include "model/vl.h"
#include "optim/offload.h"
#include "parallel/dp.h"
#include "parallel/parallel.h"
#include "plan/plan.h"

typedef struct {
    const lj_ops *ops;
    const lj_model_config *cfg;
    lj_model_options model;     /* the model's own business (model/model.h) */
    lj_zero_options zero;       /* how it is sharded over the data-parallel ranks; zero: replicated */
    lj_offload_options offload; /* where the optimizer state lives; zero: the device plan */
} lj_model_setup;

/* The set-up of a training model on this rank of `dp` (train and the benchmark): the model's
 * options of lj_dp_model_options (micro-batch B, sequence T, fused, recompute[LJ_MAX_LAYERS]; the
 * caller adds the precision and document masking), this rank's ZeRO shard (lj_dp_zero_options),
 * optimizer offload (lj_dp_offload_options). */
lj_model_setup lj_model_setup_of(const lj_dp *dp, const lj_ops *ops, const lj_model_config *cfg, int B, int T, int fused,
                                 const uint8_t *recompute);

/* Builds m from `s`: lj_model_init, lj_parallelize over `dist` (NULL: a model built only to be
 * planned), lj_offload_attach, and with `plan` not NULL lj_plan_build into it. Allocates no
 * device memory. Free with lj_plan_free and lj_model_free. */
void lj_model_build(lj_model *m, lj_plan *plan, const lj_model_setup *s, lj_dist *dist);

/* After lj_model_build with a plan: allocates and binds the plan (lj_plan_allocate), uploads
 * the RoPE tables and initialises the weights from `seed` (lj_model_init_weights).
 * Errors: lj_plan_allocate's (nothing stays allocated). */
lj_status lj_model_build_state(lj_model *m, lj_plan *plan, uint64_t seed);

/* Qwen3-VL (model/vl.h): the decoder of cfg->text built from `s` as lj_model_build builds it
 * (s->cfg is ignored: cfg->text is the decoder's config), the vision tower attached to it for
 * max_patches patches and max_images images (lj_vl_init, training as s->model.training), and with
 * `plan` not NULL the plan of both: the tower's buffers join the decoder's arenas through the
 * model's plan hook. `s` must ask for no CUDA graphs and no ZeRO residency; a `dist` of NULL
 * builds a model to be planned only. Allocates no device memory. Errors: lj_vl_init's (then m and
 * vl are freed). Free with lj_plan_free, lj_vl_free, lj_model_free. */
lj_status lj_vl_build(lj_vl *vl, lj_model *m, lj_plan *plan, const lj_model_setup *s, const lj_vl_config *cfg,
                      int max_patches, int max_images, lj_dist *dist);

/* After lj_vl_build with a plan: allocates and binds the plan of both (lj_plan_allocate) and
 * initialises the weights from `seed`: the decoder's (lj_model_init_weights) and the tower's
 * (lj_vision_init_weights). The decoder's own RoPE tables are not uploaded: the joint's
 * per-token MRoPE rows replace them (lj_vl_set_batch). Errors: lj_plan_allocate's. */
lj_status lj_vl_build_state(lj_vl *vl, lj_model *m, lj_plan *plan, uint64_t seed);

#endif

/* offload.h: optimizer offload (DeepSpeed's offload_optimizer.device "cpu"): this rank's f32
 * master weights and AdamW moments in host memory, outside the memory plan, and the AdamW step
 * on the host with the CPU backend's ops. The host buffers hang off the model (lj_model's
 * offload_* fields); the data-parallel step (parallel/dp.h) reduces the gradients and the norm
 * around the two host halves below. */
#ifndef LJ_OFFLOAD_H
#define LJ_OFFLOAD_H

#include "model/model.h"
#include "optim/optim.h"

/* Bytes of host memory for this model's offloaded state: `state` the f32 master weights and
 * AdamW moments (12 B per shard element), `staging` the 2-byte gradient and parameter staging
 * (2 B per shard element: bf16 gradients down, bf16 parameters up; fp32 gradients take 4 B more
 * per element) and the norm workspace. Both 0 without opt.offload_optimizer. */
void lj_offload_bytes(const lj_model *m, size_t *state, size_t *staging);

/* Allocates and zeroes the host buffers above and points master, adam_m and adam_v at them
 * (called by lj_plan_allocate; a no-op without opt.offload_optimizer). Errors: LJ_ERR_OOM
 * naming the bytes. */
lj_status lj_offload_alloc(lj_model *m);

/* The first host half of the step, after the gradients are reduced: downloads this rank's
 * device gradient shard `grad_shard` (grad dtype, n_grad real elements; the rest of the host copy
 * stays zero) into host f32 (waits for the stream) and returns its sum of squares. */
float lj_offload_grad_norm_sq(lj_model *m, const void *grad_shard, int64_t n_grad);

/* The second: AdamW on the host over m->master/adam_m/adam_v with the global squared norm
 * `norm_sq` (for clipping) and the scalars of step `step` at `lr`, then the rounded shard is
 * uploaded into the params. `segments` are relative to the shard, in shard order and disjoint.
 * Under bf16 gradients and params the update reads each gradient from the staging and writes the
 * rounded parameter back in its place in one pass (lj_model_offload_push_staged uploads it);
 * the floats are the CPU backend's AdamW's. */
void lj_offload_update(lj_model *m, const lj_adamw_segment *segments, int num_segments, const lj_adamw_hparams *hp,
                       float lr, int step, float norm_sq);

#endif

/* offload.h: optimizer offload (DeepSpeed's offload_optimizer.device "cpu"): this rank's f32
 * master weights and AdamW moments in host memory, outside the memory plan, and the AdamW step
 * on the host with the CPU backend's ops. lj_offload_attach hangs its state (lj_offload) and its
 * hooks (model.h lj_model_offload) on the model before the plan; its plan entry takes the
 * master weights and moments out of the device plan. The data-parallel step (parallel/dp.h)
 * reduces the gradients and the norm around the two host halves below. */
#ifndef LJ_OFFLOAD_H
#define LJ_OFFLOAD_H

#include "model/model.h"
#include "optim/optim.h"

/* Optimizer offload's options (resolved by the caller from --offload-optimizer or the DeepSpeed
 * config's zero_optimization.offload_optimizer.device). */
typedef struct {
    int enabled;  /* 1: keep this rank's f32 master weights and AdamW moments in host memory (ZeRO stage
                     >= 1, checked by the caller): they leave the memory plan, and the AdamW step runs
                     on the host with the CPU backend's ops (parallel/dp.c). Also valid on the CPU
                     backend, where it only moves the state out of the plan's arenas (tests of the
                     host path). */
} lj_offload_options;

/* The host state of an offloaded model (bound by lj_plan_allocate): one 64-byte aligned
 * allocation holding master, adam_m, adam_v (pointed to by the model) and: */
typedef struct {
    void *host;          /* the allocation */
    void *pinned;        /* grad and stage in pinned memory (ops->host_alloc), so that the copies to
                            and from the device run at the DMA rate; NULL when they are in `host`
                            (no host_alloc, or pinning failed) */
    float *grad;         /* f32 gradients: the whole shard under fp32 gradients (downloaded each step);
                            unused under bf16 gradients (read from the staging) */
    void *stage;         /* [shard_numel] 2-byte staging: bf16 gradients down, bf16 parameters up */
    void *ws;            /* the CPU backend's global_norm_sq workspace for shard_numel elements */
    int64_t n_grad;      /* gradients downloaded this step (the rest of the shard counts as 0) */
    double sec[3];       /* wall seconds summed over the steps: gradients to the host and their norm,
                            the host AdamW (with the bf16 -> f32 conversion), parameters to the device */
} lj_offload;

/* Attaches optimizer offload to m as `o` says (after lj_parallelize, before lj_plan_build): a
 * no-op when o is NULL or off, or m is not a training model. lj_model_free releases it. */
void lj_offload_attach(lj_model *m, const lj_offload_options *o);

/* m's offload state, or NULL without offload. */
lj_offload *lj_offload_of(const lj_model *m);

/* Its plan entry (model/buffers.h), in the optimizer's place of the master weights and moments
 * (lj_optim_plan): no device buffer; while binding, points master, adam_m and adam_v at the host
 * buffers of lj_offload_alloc. */
void lj_offload_plan(lj_model *m, lj_buffer_walker *w);

/* Bytes of host memory for this model's offloaded state: `state` the f32 master weights and
 * AdamW moments (12 B per shard element), `staging` the 2-byte gradient and parameter staging
 * (2 B per shard element: bf16 gradients down, bf16 parameters up; fp32 gradients take 4 B more
 * per element) and the norm workspace. Both 0 without offload. */
void lj_offload_bytes(const lj_model *m, size_t *state, size_t *staging);

/* Allocates and zeroes the host buffers above (called by lj_plan_allocate before it binds; a
 * no-op without offload). Errors: LJ_ERR_OOM naming the bytes. */
lj_status lj_offload_alloc(lj_model *m);

/* The first host half of the step, after the gradients are reduced: downloads this rank's
 * device gradient shard `grad_shard` (grad dtype, n_grad real elements; the rest of the host copy
 * stays zero) into host f32 (waits for the stream) and returns its sum of squares. */
float lj_offload_grad_norm_sq(lj_model *m, const void *grad_shard, int64_t n_grad);

/* The second: AdamW on the host over m->master/adam_m/adam_v with the global squared norm
 * `norm_sq` (for clipping) and the scalars of step `step` at `lr`, then the rounded shard is
 * uploaded into the params. `segments` are relative to the shard, in shard order and disjoint.
 * Under bf16 gradients and params the update reads each gradient from the staging and writes the
 * rounded parameter back in its place in one pass (then uploaded from the staging);
 * the floats are the CPU backend's AdamW's. */
void lj_offload_update(lj_model *m, const lj_adamw_segment *segments, int num_segments, const lj_adamw_hparams *hp,
                       float lr, int step, float norm_sq);

#endif

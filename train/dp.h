/* dp.h: data parallelism over a model: joining the ranks, the ZeRO optimizer step (DeepSpeed
 * semantics, stages 0-2), sums of host scalars across ranks, and gathering sharded state.
 * Used by the training loop and the benchmark. */
#ifndef LJ_DP_H
#define LJ_DP_H

#include "dist/dist.h"
#include "model/model.h"
#include "optim/optim.h"

typedef struct {
    lj_dist *dist;
    int rank, world, zero_stage;
} lj_dp;

/* A world of one without any communicator (tests and tools that drive a model directly):
 * lj_dp_optimizer_step and lj_dp_sum then do the single-rank work only. */
#define LJ_DP_SINGLE ((lj_dp){NULL, 0, 1, 0})

/* Joins the data-parallel world the launcher started (a world of one without a launcher): MPI
 * for CPU ranks, NCCL for GPU ranks. `summary` describes everything the ranks must agree on
 * (its hash is compared). Errors: ZeRO stage outside 0-2, bootstrap and mismatch errors. */
lj_status lj_dp_init(lj_dp *dp, const lj_ops *ops, int zero_stage, const char *summary);
void lj_dp_free(lj_dp *dp);

/* The options of a training model on this rank: micro-batch B, sequence T, fused kernels with
 * CUDA graphs (or the unfused twins without), recompute[LJ_MAX_LAYERS], and this rank's ZeRO
 * shard. */
void lj_dp_model_options(const lj_dp *dp, int B, int T, int fused, const uint8_t *recompute, lj_model_options *o);

/* Sums `n` (<= 2) host floats across ranks (through m->dist_scalars). Collective. */
void lj_dp_sum(lj_dp *dp, lj_model *m, float *values, int n);

/* The optimizer step after the micro-batches:
 *   stage 0: all-reduce the gradients; every rank updates every parameter;
 *   stage 1: all-reduce the gradients; each rank updates its shard (AdamW moments and master
 *            weights), then the parameters are all-gathered;
 *   stage 2: reduce-scatter the gradients (each rank keeps its shard's sum), then as stage 1.
 * `segments` are those of this rank's shard (lj_adamw_segments_slice). The global gradient
 * norm is summed over the shards; returns it (before clipping). Collective. */
double lj_dp_optimizer_step(lj_dp *dp, lj_model *m, const lj_adamw_segment *segments, int num_segments,
                            const lj_adamw_config *cfg, float lr, int step);

/* Full host copies [P] of the master weights and AdamW moments on rank 0 (others pass NULL),
 * all-gathered from the shards through the f32 gradient buffer, which is free between steps.
 * Collective. */
void lj_dp_gather_state(lj_dp *dp, lj_model *m, float *w, float *mm, float *vv);

/* Stops every rank when a collective failed (the others would wait for this one). */
void lj_dp_check(lj_dp *dp, lj_status s);

#endif

/* dp.h: data parallelism over a model: joining the ranks, the ZeRO optimizer step (DeepSpeed
 * semantics, stages 0-3: the gradient reductions and parameter all-gathers around the shard's
 * update of optim/step.h), sums of host scalars across ranks, and gathering sharded state for
 * checkpoints. Used by the training loop and the benchmark. */
#ifndef LJ_DP_H
#define LJ_DP_H

#include "parallel/dist.h"
#include "parallel/parallel.h"
#include "model/model.h"
#include "optim/offload.h"
#include "optim/optim.h"

typedef struct {
    lj_dist *dist;
    int rank, world, zero_stage;
    /* ZeRO-3 knobs (DeepSpeed's zero_optimization names), elements; 0: auto (lj_zero_options) */
    int64_t stage3_prefetch_bucket_size, stage3_max_live_parameters, stage3_param_persistence_threshold;
    /* ZeRO-2: zero_optimization.reduce_bucket_size, elements; 0: auto (hidden^2) */
    int64_t reduce_bucket_size;
    /* zero_optimization.overlap_comm: 1 (the default of lj_dp_init) overlaps the ZeRO-2/3
     * collectives with compute; 0 makes the compute stream wait for each right after it is
     * queued. Stages 0 and 1 all-reduce the gradients after the backward either way. */
    int overlap_comm;
    /* zero_optimization.offload_optimizer.device "cpu" / --offload-optimizer cpu (ZeRO stage >= 1,
     * checked by lj_dp_offload_check): this rank's master weights and AdamW moments in host memory
     * and the AdamW step on the host. On the CPU backend the state is host memory already and
     * nothing changes (lj_dp_offload_options leaves offload off). */
    int offload_optimizer;
    int host_backend; /* the backend's memory is host memory (the CPU backend) */
    int offload_force; /* tests: run the offload host path on the CPU backend too (environment
                          LJPERF_OFFLOAD_HOST_PATH=1, read by lj_dp_offload_check) */
} lj_dp;

/* A world of one without any communicator (tests and tools that drive a model directly):
 * lj_dp_optimizer_step and lj_dp_sum then do the single-rank work only. */
#define LJ_DP_SINGLE ((lj_dp){.dist = NULL, .rank = 0, .world = 1, .zero_stage = 0, .overlap_comm = 1})

/* Joins the data-parallel world the launcher started (a world of one without a launcher): MPI
 * for CPU ranks, NCCL for GPU ranks. `summary` describes everything the ranks must agree on
 * (its hash is compared). Errors: ZeRO stage outside 0-3, bootstrap and mismatch errors.
 * Stage 3 on one rank shards nothing and runs as stage 0. */
lj_status lj_dp_init(lj_dp *dp, const lj_ops *ops, int zero_stage, const char *summary);
void lj_dp_free(lj_dp *dp);

/* The options of a training model on this rank: micro-batch B, sequence T, fused kernels with
 * CUDA graphs (or the unfused twins without; no graphs under ZeRO-2/3 over several ranks),
 * recompute[LJ_MAX_LAYERS]. */
void lj_dp_model_options(const lj_dp *dp, int B, int T, int fused, const uint8_t *recompute, lj_model_options *o);

/* This rank's ZeRO shard for lj_parallelize: stage, rank, world (stages 2 and 3 over several ranks:
 * overlap_comm and the bucket and stage3_* knobs too). */
lj_zero_options lj_dp_zero_options(const lj_dp *dp);

/* Optimizer offload's options for lj_offload_attach: dp->offload_optimizer, off on the CPU
 * backend unless LJPERF_OFFLOAD_HOST_PATH=1 forces the host path (lj_dp_offload_check). */
lj_offload_options lj_dp_offload_options(const lj_dp *dp);

/* Validates and announces optimizer offload for `zero_stage` (what: the flag or key that asked for
 * it, for the message). Errors: LJ_ERR_ARG under ZeRO stage 0 (DeepSpeed requires stage >= 1).
 * Reads LJPERF_OFFLOAD_HOST_PATH (dp->offload_force). Logs (rank 0) where the state lives: host memory on a GPU backend, or that the CPU backend keeps
 * it in host memory already. */
lj_status lj_dp_offload_check(lj_dp *dp, int zero_stage, const char *what);

/* Sums `n` (<= 2) host floats across ranks (through m->dist_scalars). Collective. */
void lj_dp_sum(lj_dp *dp, lj_model *m, float *values, int n);

/* The optimizer step after the micro-batches:
 *   stage 0: all-reduce the gradients; every rank updates every parameter;
 *   stage 1: all-reduce the gradients; each rank updates its shard (AdamW moments and master
 *            weights), then the parameters are all-gathered;
 *   stage 2: the backward already reduced each layer's gradients, bucket by bucket, into the
 *            owners' gradient shards (parallel/zero3.h); then as stage 1;
 *   stage 3: the backward already reduce-scattered each layer's gradients into the shard
 *            (parallel/zero3.h); each rank updates its shard of everything (parameters included)
 *            and nothing is gathered: layers are gathered when they next compute.
 * `segments` are those of this rank's shard (lj_dp_segments); `lr` the step's learning rate of each
 * lr group the segments use (m->opt.lr_groups), `step` the AdamW step (t, from 1). The global
 * gradient norm is summed over the shards; returns it (before clipping). Collective.
 * Under optimizer offload (optim/offload.h) the gradient reduction is the same; then the
 * shard's gradients are downloaded (bf16 -> f32 on the host), and the norm and AdamW run on the host
 * with the CPU backend's ops over the host master and moments; the updated shard is rounded to the
 * param dtype on the host and uploaded before the all-gather of stages 1-2 (optim/offload.h). */
double lj_dp_optimizer_step(lj_dp *dp, lj_model *m, const lj_adamw_segment *segments, int num_segments,
                            const lj_adamw_config *cfg, lj_adamw_lr lr, int step);

/* The AdamW segments (lj_adamw_segments: weight decay and lr group per tensor) of this rank's shard, offsets
 * relative to the shard: a slice of the flat buffers (no ZeRO, stages 1-2), or under ZeRO-3
 * over several ranks the parameter pieces the rank holds in shard order (adjacent equal ones
 * merged). The weights whose place in the params holds --fp8-param-gather's codes
 * (lj_linear_codes_in_params) are master_only segments. Computed once per run, after the plan is
 * bound; returns the count, *out is heap-allocated. */
int lj_dp_segments(const lj_model *m, const lj_adamw_config *cfg, lj_adamw_segment **out);

/* One whole training step of ONE micro-batch per rank (no gradient accumulation), over the
 * batch already uploaded with lj_model_set_batch: zero the gradients, forward + backward with
 * `dloss`, then the optimizer step as lj_dp_optimizer_step (same arguments). Returns the global
 * gradient norm (before clipping); the losses stay readable (lj_model_mean_loss).
 *   - World of one (no ZeRO-3 sharding): the step's AdamW scalars (lr, bias corrections of
 *     `step`) are uploaded to m->adamw_scalars, then lj_model_train_step runs zero-grad +
 *     forward + backward + global norm + AdamW (+ the parameter copy): with opt.graphs on a
 *     backend with graphs, as ONE captured CUDA graph, recaptured when dloss, the AdamW
 *     config (clipping on/off included) or the segments change; eagerly otherwise, with the
 *     same ops in the same order as lj_model_forward_backward + lj_dp_optimizer_step.
 *   - Several ranks, ZeRO-3 or optimizer offload (host work between the backward and the
 *     update, never inside a capture): forward + backward (one graph per micro-batch with
 *     opt.graphs), then lj_dp_optimizer_step eagerly, as before.
 * Collective when the world has several ranks. */
double lj_dp_train_step(lj_dp *dp, lj_model *m, const lj_adamw_segment *segments, int num_segments,
                        const lj_adamw_config *cfg, lj_adamw_lr lr, int step, float dloss);

/* Full host copies [P] of the master weights and AdamW moments on rank 0 (others pass NULL),
 * all-gathered from the shards through the gradient buffer (ZeRO-3: a gradient slot), which is
 * free between steps. Collective. */
void lj_dp_gather_state(lj_dp *dp, lj_model *m, float *w, float *mm, float *vv);

/* The inverse, on every rank: weights from host f32 w [P] (params and this rank's master
 * shard) and this rank's shard of the AdamW moments from mm, vv [P] (a checkpoint saved on any
 * number of ranks under any stage). */
void lj_dp_scatter_state(lj_dp *dp, lj_model *m, const float *w, const float *mm, const float *vv);

/* Stops every rank when a collective failed (the others would wait for this one). */
void lj_dp_check(lj_dp *dp, lj_status s);

#endif

/* parallel.h: applies data parallelism to a model from outside (torchtitan's "parallelize"
 * step): after lj_model_init and before the memory plan, lj_parallelize takes the ZeRO
 * options (stage, rank, world size, buckets) and sets this rank's shard of the flat state, and for ZeRO-2/3
 * over several ranks attaches the ZeRO runtime as the model's residency (parallel/zero3.h). The
 * model itself never mentions it.
 *
 * Shards (DeepSpeed semantics): ZeRO-1 and ZeRO-2 cut the flat buffers into W equal slices padded
 * to a multiple of W * 64 elements (rank r owns [r S, (r + 1) S)); ZeRO-2 keeps only its slice of
 * the gradients; ZeRO-3 keeps only its shard of everything, in the layer partition of
 * parallel/zero.h. */
#ifndef LJ_PARALLEL_H
#define LJ_PARALLEL_H

#include "model/model.h"
#include "parallel/dist.h"

/* How the model is sharded over the data-parallel ranks (DeepSpeed's zero_optimization block
 * and the ranks; plain data, resolved by the caller). All zero: replicated. */
typedef struct {
    int zero_stage;         /* DeepSpeed ZeRO stage: >= 1 shards the AdamW moments and master weights,
                               2 (training, W > 1) the gradients too (reduced to their owners layer by
                               layer during the backward), 3 the parameters too (parallel/zero3.h) */
    int dp_rank, dp_world_size; /* data-parallel rank and ranks (the shards; 0 ranks is taken as 1) */
    int64_t zero3_prefetch_numel;    /* stage3_prefetch_bucket_size, elements (0: auto, 0.9 d^2) */
    int64_t zero3_max_live_numel;    /* stage3_max_live_parameters, elements (0: DeepSpeed's 1e9) */
    int64_t zero3_persistence_numel; /* stage3_param_persistence_threshold, elements (0: auto, 10 d;
                                        < 0: no persistent groups) */
    int64_t zero_reduce_bucket_numel; /* ZeRO-2 reduce_bucket_size, elements (0: auto, d^2): the size of
                                         each reduction of a gradient slot to the shard owners */
    int overlap_comm;       /* ZeRO-2/3 over W > 1 (DeepSpeed's zero_optimization.overlap_comm): 1 overlaps
                               the collectives with compute and prefetches ZeRO-3 gathers; 0 makes the
                               compute stream wait for every collective right after queuing it */
} lj_zero_options;

/* Shards m as `zopt` says (NULL, or a no-op for a replicated model: ZeRO stage 0, one rank, or
 * inference). `dist`: the communicator of the ZeRO-2/3 collectives and of the FP8 amax
 * reduction (NULL: a model built only to be planned). ZeRO-2/3 over several ranks turn CUDA
 * graphs off (their collectives and slot bookkeeping are queued from the host between the
 * layers). Call once, after lj_model_init and before lj_plan_build. */
void lj_parallelize(lj_model *m, lj_dist *dist, const lj_zero_options *zopt);

#endif

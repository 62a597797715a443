/* parallel.h: applies data parallelism to a model from outside (torchtitan's "parallelize"
 * step): after lj_model_init and before the memory plan, lj_parallelize reads the options'
 * ZeRO stage, rank and world size and sets this rank's shard of the flat state, and for ZeRO-2/3
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

/* Shards m as its options say (a no-op for a replicated model: ZeRO stage 0, one rank, or
 * inference). `dist`: the communicator of the ZeRO-2/3 collectives (NULL: a model built only to
 * be planned). ZeRO-2/3 over several ranks turn CUDA graphs off (their collectives and slot
 * bookkeeping are queued from the host between the layers). Call once, before lj_plan_build. */
void lj_parallelize(lj_model *m, lj_dist *dist);

#endif

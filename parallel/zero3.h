/* zero3.h: the ZeRO stage 3 runtime of a model over several data-parallel ranks (DeepSpeed
 * semantics) and its gradient half for ZeRO stage 2 (below): the residency (model/residency.h)
 * the forward and backward loops call, attached by lj_parallelize (parallel/parallel.h); its
 * plan entry (the residency's `plan`) declares its slots to the memory plan, and the data-parallel step (parallel/dp.c) waits
 * for its reductions and gathers its shards for checkpoints. ZeRO-3's gather is fetch_group and
 * gather() in zero3.c; the per-layer gradient reduction is grad_end_group.
 *
 * ZeRO stage 2 (shard_params == 0) is stage 3 without the parameter sharding: the parameters
 * stay replicated and flat (nothing is gathered before compute; fetch and release are
 * no-ops and the parameters are read flat), the master weights and AdamW moments are the flat
 * shard of stage 1 (rank r: [r S, (r + 1) S), S = `flat`.shard_numel), and so is the gradient
 * buffer: m->grads holds S elements, not P. The gradient slots work as under stage 3 (one per
 * layer group, the same three), but grad_end_group reduces a slot to the owners of its
 * elements in the flat partition: the slot is cut into buckets of bucket_numel elements
 * (DeepSpeed's reduce_bucket_size, "auto" = hidden^2), and each bucket is one NCCL group of
 * ncclReduce calls, one per owner of a piece of it (DeepSpeed's average_tensor with
 * reduce_scatter: a reduce-scatter over uneven ownership), on the communication stream while
 * the backward of the next layer computes. The seeding of a slot with the accumulated shard
 * (below) makes accumulation exact as under stage 3.
 *
 * The partition is parallel/zero.h's lj_zero_partition_layers: one gather group per layer, plus
 * the embedding, the final norm and lm_head (absent when tied), each split evenly over the W
 * ranks with padding. Every rank keeps only its shard (shard_numel elements, in the shard
 * order of zero.h) of the parameters (param dtype), the fp32 master weights, the AdamW moments
 * and the gradients: lj_model's params, master, adam_m, adam_v and grads are those shards.
 *
 * Parameters. Before a group computes (forward, recompute, backward), fetch_group
 * all-gathers it into one of num_slots gather slots (planned; the first fits the largest group,
 * usually the embedding or lm_head, the others a layer), and prefetches the next groups of the pass while slots are free (DeepSpeed's
 * rule, lj_zero_prefetch_count with stage3_prefetch_bucket_size and stage3_max_live_parameters).
 * release_group frees the slot after use. Persistent groups (at most
 * stage3_param_persistence_threshold elements, DeepSpeed's ds_persist) have their own planned
 * buffer, gathered at their first use after each optimizer step, and are never released.
 *
 * Gradients. grad_begin_group gives a group a gradient slot (three, planned: one fits the
 * largest group, two a layer, so that a layer's reduce-scatter overlaps the next layer's
 * backward): zeroed, except that this rank's own slice of every unit holds the
 * gradient shard accumulated so far (earlier micro-batches). The backward accumulates into it;
 * grad_end_group reduce-scatters each unit straight into the gradient shard. The sum over the
 * ranks is then "accumulated shard + every rank's new gradients": accumulation across
 * micro-batches without a scratch buffer or an add kernel, although the collective overwrites.
 * Tied embeddings: the embedding's gradient slot is taken at the loss (lm_head's gradient, at
 * the end of the forward) and kept until the embedding backward, the last op of the backward.
 *
 * FP8 parameters (--fp8-param-gather, model/linear.h): the partition is cut at each FP8 linear's
 * weight (lj_zero_partition_layers_cut), so that each is units of its own; after each optimizer
 * step every rank casts its slice of them into its FP8 shard (zero3.fp8_shard, one byte per
 * element; lj_linear_cast_weights, the scale every rank's), and fetch_group all-gathers those
 * units as codes: a layer's gather moves about half the bytes of bf16 (a quarter of f32), and
 * its slot is as much smaller. lj_model_param of such a weight is its codes [out, in] in the
 * slot, which the linear reads as its FP8 weight. The gradients are unchanged.
 *
 * Ordering (NCCL): collectives see everything queued on the compute stream before the call
 * (dist.h); the compute stream waits on the ticket of a gather before reading its slot, on the
 * ticket of a reduce-scatter before reusing its gradient slot or reading the shard it wrote.
 * MPI completes every call before returning.
 */
#ifndef LJ_ZERO3_H
#define LJ_ZERO3_H

#include "parallel/dist.h"
#include "parallel/parallel.h"
#include "parallel/zero.h"
#include "model/model.h"

typedef struct lj_zero3 lj_zero3;

struct lj_zero3 {
    lj_zero_partition part;        /* the layer groups (stage 2: only their bounds are used) */
    int shard_params;              /* 1: ZeRO-3; 0: ZeRO-2 (above) */
    int overlap;                   /* overlap_comm: 0 makes the compute stream wait for each collective at once */
    lj_zero_partition flat;        /* stage 2: the flat partition of the optimizer and gradient shard */
    int64_t bucket_numel;          /* stage 2: elements per reduction bucket */
    lj_zero_piece *pieces;         /* stage 2: [world + 1] scratch for lj_zero_range_pieces */
    lj_dist *dist;                 /* NULL in a model built only to be planned */
    int rank, world;
    int *param_group;              /* [layout.count] the group of each parameter */
    int embed_group, norm_group, head_group; /* head_group: lm_head's group (the embedding's when tied) */
    int tied;
    int64_t prefetch_numel, max_live_numel;

    int num_slots;                 /* gather slots: slot 0 fits any group, the others any layer */
    int64_t *slot_bytes;           /* [num_slots] bytes (a group's gather buffer: group_bytes) */
    void **slot;                   /* [num_slots] bound by the plan */
    int *slot_group;               /* [num_slots] group held, -1 when free */
    lj_dist_ticket *slot_ticket;   /* [num_slots] the gather that filled it */
    int *group_slot;               /* [num_groups] slot holding the group, -1 */
    void **persist;                /* [num_groups] persistent groups' gather buffers (bound by the plan) */
    uint8_t *persist_fresh;        /* [num_groups] gathered since the last optimizer step */

    int num_grad_slots;            /* gradient slots: slot 0 fits any group, the others any layer */
    int64_t *grad_slot_numel;      /* [num_grad_slots] grad-dtype elements */
    void **grad_slot;              /* [num_grad_slots] bound by the plan */
    int *grad_slot_group;          /* [num_grad_slots] group accumulating into it, -1 when free */
    lj_dist_ticket *grad_slot_ticket; /* [num_grad_slots] its last reduce-scatter */
    uint64_t *grad_slot_age;       /* [num_grad_slots] when it was last freed (oldest reused first) */
    int *group_grad_slot;          /* [num_groups] slot of the group's gradients, -1 */
    lj_dist_ticket *group_ticket;  /* [num_groups] the group's last reduce-scatter (wrote its shard) */
    uint8_t *grad_written;         /* [num_groups] the backward writes each of its gradients once (a
                                    * layer, the final norm) and the ops can overwrite (grad_begin_group) */
    uint8_t *shard_zero;           /* [num_groups] its gradient shard counts as zero (grads_zeroed,
                                    * no reduction since): grad_begin_group skips the seeding */
    uint64_t clock;

    /* The units' bytes in a gather buffer: the param dtype's, or under --fp8-param-gather (the
     * linears keep FP8 weights, model/linear.h) one byte per element for the units that are an FP8
     * linear's weight (the partition is cut at each), gathered from this rank's FP8 shard as
     * codes. */
    int fp8;                       /* some units are FP8 codes */
    uint8_t *unit_fp8;             /* [num_units] 1: the unit is one FP8 linear's weight */
    int64_t *unit_bytes;           /* [num_units] where it starts in its group's gather buffer, bytes */
    int64_t *fp8_offset;           /* [num_units] an FP8 unit's slice in fp8_shard, bytes */
    int64_t fp8_shard_bytes;
    void *fp8_shard;               /* [fp8_shard_bytes] the codes of this rank's slices (bound by the plan) */
    int64_t *group_bytes;          /* [num_groups] bytes of its gather buffer */
    int *param_unit;               /* [layout.count] the unit holding each parameter */
};

/* 1 when `zopt` asks for this runtime for m: ZeRO stage 2 or 3 over W > 1 ranks, training (stage
 * 3 on one rank shards nothing and runs as stage 0). */
int lj_zero3_wanted(const lj_model *m, const lj_zero_options *zopt);

/* Creates the runtime for `zopt` (the partition, the slots from the stage3_* and
 * reduce_bucket_size options) and makes it m's residency, whose plan entry declares the gather
 * and gradient slots (model/buffers.h); `dist` is the communicator of its collectives (NULL: a
 * model built only to be planned). Called by lj_parallelize. */
void lj_zero3_attach(lj_model *m, lj_dist *dist, const lj_zero_options *zopt);

/* m's ZeRO-2/3 runtime, or NULL when m has another residency. */
lj_zero3 *lj_zero3_of(const lj_model *m);

/* The optimizer changed the shards: the compute stream waits for every queued reduce-scatter
 * (call before reading the gradient shard), and persistent groups are gathered again at their
 * next use. */
void lj_zero3_step_begin(lj_model *m);

/* The inverse for one round of a gathered shard: `gathered` is [W][c] f32 on the host, each
 * rank's shard positions [k, k + c); the real elements among them go to their flat positions
 * in `full` [P]. */
void lj_zero3_scatter_round(const lj_zero3 *z, const float *gathered, int64_t k, int64_t c, float *full);

#endif

/* zero.h: ZeRO shard arithmetic (DeepSpeed's semantics), pure functions with no communication:
 * the padded partition of the flat parameter buffer over W ranks, what each rank holds, which
 * parameter tensors a shard touches, the gather groups of ZeRO-3 (one per layer), bucketing for
 * reduce_bucket_size / allgather_bucket_size, the prefetch rule, the "auto" sizes, and the
 * per-rank element counts of each ZeRO stage.
 *
 * The partition. The flat parameter buffer (config/config.h layout, P elements) is cut into
 * groups: contiguous ranges gathered together (ZeRO-3: the embedding, each layer, the final
 * norm, lm_head; ZeRO-1/2: usually one group, the whole buffer). A group is cut into units of
 * at most max_unit_numel elements, each a multiple of W * align except the group's last. Every
 * unit is split evenly over the ranks:
 *   shard(u) = ceil(numel(u) / (W * align)) * align            elements per rank
 *   rank r holds the unit's elements [begin(u) + r * shard(u), begin(u) + (r + 1) * shard(u)),
 *   clipped to the unit (so the last ranks may hold fewer real elements, or none)
 * and keeps them at shard_offset(u) in its shard buffer (all its units' slices end to end,
 * shard_numel elements, padding included). An all-gather of unit u (send: the rank's slice,
 * shard(u) elements; receive: W * shard(u)) yields the unit's elements followed by its padding,
 * so the gathered units of a group, laid end to end at gather_offset(u), are exactly the
 * group's parameters in layout order followed by the padding of its last unit: a group's
 * gather buffer holds gather_numel elements (units cut at given points, lj_zero_partition_init_cut,
 * each carry their own padding instead). Reduce-scatter is the same in reverse. This is the
 * padded layout of dist.h; DeepSpeed pads each partitioned tensor the same way (ZeRO-3) and the
 * flat fp32 group to a multiple of the world size (ZeRO-1/2).
 * All counts are elements; align is in elements too (LJ_ZERO_ALIGN: 64, i.e. 128 bytes of bf16).
 */
#ifndef LJ_ZERO_H
#define LJ_ZERO_H

#include "config/config.h"

#define LJ_ZERO_ALIGN 64

/* Group codes for lj_zero_group.layer. */
#define LJ_ZERO_EMBED (-1)      /* model.embed_tokens.weight */
#define LJ_ZERO_CUSTOM (-2)     /* a group given by bounds, not by the model layout */
/* layers are 0..L-1; the final norm is L and lm_head L + 1 (lj_zero_partition_layers) */

typedef struct {
    int64_t begin, end;     /* the unit's elements in the flat buffer */
    int64_t shard;          /* elements of the unit on every rank, padding included */
    int64_t shard_offset;   /* where its slice starts in every rank's shard buffer */
    int64_t gather_offset;  /* where it starts in its group's gather buffer */
    int group;
} lj_zero_unit;

typedef struct {
    int64_t begin, end;     /* the group's elements in the flat buffer */
    int first_unit, num_units;
    int64_t gather_numel;   /* elements of its gather buffer: sum of W * shard over its units */
    int layer;              /* LJ_ZERO_EMBED, a layer, L (final norm), L + 1 (lm_head), LJ_ZERO_CUSTOM */
    int persistent;         /* numel <= stage3_param_persistence_threshold: stays gathered after its
                               first use (DeepSpeed's ds_persist); still sharded for the optimizer */
} lj_zero_group;

typedef struct {
    int world_size;         /* W */
    int64_t align;
    int64_t numel;          /* P */
    int64_t shard_numel;    /* elements of every rank's shard buffer (sum of unit shards) */
    int64_t max_gather_numel; /* the largest group's gather_numel */
    int num_units, num_groups;
    lj_zero_unit *units;
    lj_zero_group *groups;
} lj_zero_partition;

/* Partitions [bounds[0] = 0, bounds[num_groups]) with group g = [bounds[g], bounds[g + 1])
 * (strictly increasing bounds). max_unit_numel > 0 splits groups into units of at most that
 * many elements (rounded down to a multiple of W * align, at least W * align); 0 keeps one unit
 * per group. persistence_threshold > 0 marks groups of at most that many elements persistent.
 * Free with lj_zero_partition_free. */
void lj_zero_partition_init(lj_zero_partition *z, const int64_t *bounds, int num_groups, int world_size,
                            int64_t align, int64_t max_unit_numel, int64_t persistence_threshold);

/* lj_zero_partition_init with units also ending at each of cuts[num_cuts] (flat positions, any
 * order; those on a group's bounds change nothing): a unit then lies on one side of every cut, so
 * that a range of the buffer can be gathered as a unit of its own (--fp8-param-gather: a weight
 * gathered as FP8 codes). The group's gather buffer then holds each unit's padding after its
 * elements: an element's place in it is its unit's gather_offset + (i - begin). */
void lj_zero_partition_init_cut(lj_zero_partition *z, const int64_t *bounds, int num_groups, const int64_t *cuts,
                                int num_cuts, int world_size, int64_t align, int64_t max_unit_numel,
                                int64_t persistence_threshold);

/* One group, the whole buffer of `numel` elements (ZeRO-1/2's flat partition). */
void lj_zero_partition_flat(lj_zero_partition *z, int64_t numel, int world_size, int64_t align);

/* The ZeRO-3 groups of a model: model.embed_tokens.weight, each layer's block, model.norm.weight
 * and lm_head.weight (absent when tied), with the layer codes above. */
void lj_zero_partition_layers(lj_zero_partition *z, const lj_param_layout *layout, int world_size, int64_t align,
                              int64_t max_unit_numel, int64_t persistence_threshold);

/* lj_zero_partition_layers with units cut at cuts[num_cuts] (lj_zero_partition_init_cut). */
void lj_zero_partition_layers_cut(lj_zero_partition *z, const lj_param_layout *layout, const int64_t *cuts,
                                  int num_cuts, int world_size, int64_t align, int64_t max_unit_numel,
                                  int64_t persistence_threshold);

void lj_zero_partition_free(lj_zero_partition *z);

/* The group of a layer code (LJ_ZERO_EMBED, 0..L-1, L, L + 1); -1 if none. */
int lj_zero_group_of_layer(const lj_zero_partition *z, int layer);

/* Real elements [*begin, *end) of the flat buffer that `rank` holds of unit `unit`
 * (*begin == *end when it holds only padding). They sit at units[unit].shard_offset of its
 * shard buffer. */
void lj_zero_unit_slice(const lj_zero_partition *z, int unit, int rank, int64_t *begin, int64_t *end);

/* Real elements `rank` holds in all (sum of its slices): what its optimizer updates. */
int64_t lj_zero_rank_numel(const lj_zero_partition *z, int rank);

/* Which rank holds flat element i (0 <= i < numel), and where in its shard buffer. */
int lj_zero_owner(const lj_zero_partition *z, int64_t i, int64_t *shard_offset);

/* A run of flat elements held by one rank in one unit. */
typedef struct {
    int rank, unit;
    int64_t begin, end;     /* flat range */
    int64_t shard_offset;   /* where `begin` sits in that rank's shard buffer */
} lj_zero_piece;

/* The pieces of the flat range [begin, end), in flat order: who holds which part (for reducing
 * a gradient bucket to its owners, or for resharding a checkpoint). Writes at most `max` pieces
 * to out (out may be NULL with max 0) and returns how many there are. */
int lj_zero_range_pieces(const lj_zero_partition *z, int64_t begin, int64_t end, lj_zero_piece *out, int max);

/* A run of one parameter tensor inside a rank's shard. */
typedef struct {
    int param;              /* index into layout->params */
    int64_t begin, end;     /* elements of that tensor (row-major), [begin, end) */
    int64_t shard_offset;   /* where `begin` sits in the rank's shard buffer */
} lj_zero_param_piece;

/* The parameter tensors (or parts of them) that rank `rank`'s shard holds, in shard order:
 * for weight-decay segments of the sharded AdamW, and for per-rank checkpoints. Writes at most
 * `max` to out (NULL with max 0 to count) and returns the count. */
int lj_zero_shard_params(const lj_zero_partition *z, const lj_param_layout *layout, int rank,
                         lj_zero_param_piece *out, int max);

typedef struct {
    int64_t begin, end;
} lj_zero_range;

/* ZeRO-3 prefetch: how many groups after `group` (direction +1 forward, -1 backward),
 * skipping persistent ones, to all-gather ahead while `group` computes. DeepSpeed's rule
 * (PartitionedParameterCoordinator.fetch_sub_module): keep taking the next group while the
 * elements being prefetched are below min(prefetch_bucket_numel, max_live_numel - live_numel),
 * live_numel being the elements already gathered. 0 when prefetch_bucket_numel <= 0. */
int lj_zero_prefetch_count(const lj_zero_partition *z, int group, int direction, int64_t prefetch_bucket_numel,
                           int64_t max_live_numel, int64_t live_numel);

/* DeepSpeed's "auto" values, as the Hugging Face integration fills them
 * (transformers integrations/deepspeed.py): hidden^2, 0.9 * hidden^2, 10 * hidden. */
int64_t lj_zero_reduce_bucket_auto(int hidden_size);
int64_t lj_zero_prefetch_bucket_auto(int hidden_size);
int64_t lj_zero_persistence_threshold_auto(int hidden_size);

/* Elements one rank allocates for each kind of state under ZeRO `stage` (0..3), padding
 * included, excluding buckets and gather buffers (the memory plan adds those):
 *   stage 0: params P, grads P, master P, moments 2P (m and v)
 *   stage 1: params P, grads P, master S, moments 2S          (S = shard_numel)
 *   stage 2: params P, grads S, master S, moments 2S
 *   stage 3: params S, grads S, master S, moments 2S
 * Source: Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
 * Models" (2020), section 5 (P_os, P_os+g, P_os+g+p). */
typedef struct {
    int64_t params, grads, master, moments;
} lj_zero_counts;
void lj_zero_rank_counts(const lj_zero_partition *z, int stage, lj_zero_counts *counts);

#endif

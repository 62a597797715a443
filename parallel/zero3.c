/* zero3.c: the ZeRO stage 3 runtime (zero3.h): gather slots with prefetch, gradient slots
 * reduce-scattered into the shard, and the mapping between flat and shard positions; and its
 * gradient half for ZeRO stage 2 (gradient slots reduced to the owners of the flat shard). */
#include "parallel/zero3.h"

#include <string.h>

/* A failed collective stops every rank (the others would wait for this one). */
static void check(const lj_zero3 *z, lj_status s) {
    if (s != LJ_OK) lj_dist_abort(z->dist, 1, lj_error_message());
}

static void *stream_of(const lj_model *m) { return m->ops->stream ? m->ops->stream() : NULL; }

int lj_zero3_wanted(const lj_model *m, const lj_zero_options *o) {
    return (o->zero_stage == 2 || o->zero_stage == 3) && o->dp_world_size > 1 && m->opt.training &&
           m->opt.kv_cache_tokens == 0;
}

static lj_zero3 *zero3_create(const lj_model *m, lj_dist *dist, const lj_zero_options *o) {
    lj_zero3 *z = lj_calloc(1, sizeof *z);
    const int d = m->cfg.hidden_size;
    z->shard_params = o->zero_stage == 3;
    z->overlap = o->overlap_comm;
    /* stage 2: no persistent groups (nothing is gathered) */
    const int64_t persist = !z->shard_params ? 0
                            : o->zero3_persistence_numel == 0 ? lj_zero_persistence_threshold_auto(d)
                                                              : (o->zero3_persistence_numel < 0 ? 0 : o->zero3_persistence_numel);
    /* --fp8-param-gather: each FP8 linear's weight is units of its own, gathered as codes */
    const lj_linear_recipe_ctx *lc = &m->linear;
    const int fp8 = z->shard_params && lc->fp8.kept;
    int64_t *cuts = lj_malloc((size_t)(2 * lc->fp8.num_linears + 1) * sizeof *cuts);
    int num_cuts = 0;
    for (int l = 0; fp8 && l < m->cfg.num_hidden_layers; l++) {
        for (int k = 0; k < 4; k++) {
            if (lc->fp8.slot[l][k] < 0) continue;
            const lj_param_info *pi = &m->layout.params[lj_linear_param(&m->layout, (lj_linear_kind)k, l)];
            LJ_ASSERT(lc->in_features[k] % 16 == 0, "--fp8-param-gather under ZeRO-3: %s has %d columns, not a multiple "
                      "of 16 (its gathered codes are the FP8 GEMM's rows)", pi->name, lc->in_features[k]);
            cuts[num_cuts++] = pi->offset;
            cuts[num_cuts++] = pi->offset + (int64_t)lc->out_features[k] * lc->in_features[k];
        }
    }
    lj_zero_partition_layers_cut(&z->part, &m->layout, cuts, num_cuts, o->dp_world_size, LJ_ZERO_ALIGN, 0, persist);
    free(cuts);
    if (!z->shard_params) {
        lj_zero_partition_flat(&z->flat, m->layout.total, o->dp_world_size, LJ_ZERO_ALIGN);
        z->bucket_numel = o->zero_reduce_bucket_numel > 0 ? o->zero_reduce_bucket_numel : lj_zero_reduce_bucket_auto(d);
        z->pieces = lj_calloc((size_t)o->dp_world_size + 1, sizeof *z->pieces);
    }
    z->dist = dist;
    z->rank = o->dp_rank;
    z->world = o->dp_world_size;
    z->prefetch_numel = o->zero3_prefetch_numel > 0 ? o->zero3_prefetch_numel : lj_zero_prefetch_bucket_auto(d);
    z->max_live_numel = o->zero3_max_live_numel > 0 ? o->zero3_max_live_numel : 1000000000; /* DeepSpeed's default */
    const lj_zero_partition *p = &z->part;
    const int L = m->cfg.num_hidden_layers, G = p->num_groups;
    z->tied = m->layout.lm_head == m->layout.embed;
    z->embed_group = lj_zero_group_of_layer(p, LJ_ZERO_EMBED);
    z->norm_group = lj_zero_group_of_layer(p, L);
    z->head_group = z->tied ? z->embed_group : lj_zero_group_of_layer(p, L + 1);
    z->param_group = lj_malloc((size_t)m->layout.count * sizeof(int));
    z->grad_written = lj_calloc((size_t)G, 1);
    int64_t *covered = lj_calloc((size_t)G, sizeof(int64_t));
    for (int i = 0, g = 0; i < m->layout.count; i++) {
        while (m->layout.params[i].offset >= p->groups[g].end) g++;
        z->param_group[i] = g;
        covered[g] += m->layout.params[i].numel;
    }
    /* a layer's (0..L-1) or the final norm's (L) gradients are each written once by the backward
     * (matmul_backward, rmsnorm_backward); the embedding's (a scatter-add, also lm_head's when
     * tied) and lm_head's (summed over the loss chunks) are accumulated */
    for (int g = 0; g < G; g++)
        z->grad_written[g] = covered[g] == p->groups[g].end - p->groups[g].begin && p->groups[g].layer >= 0 &&
                             p->groups[g].layer <= L;
    free(covered);
    /* where each unit starts in its group's gather buffer, in bytes: the param dtype's, or one
     * byte per element for an FP8 linear's weight (its codes; their slices in the FP8 shard) */
    const size_t sp = lj_dtype_size(m->ops->param_dtype);
    z->fp8 = fp8;
    z->param_unit = lj_malloc((size_t)m->layout.count * sizeof(int));
    for (int i = 0, u = 0; i < m->layout.count; i++) {
        while (m->layout.params[i].offset >= p->units[u].end) u++;
        z->param_unit[i] = u;
    }
    z->unit_fp8 = lj_calloc((size_t)p->num_units, 1);
    for (int l = 0; fp8 && l < L; l++) {
        for (int k = 0; k < 4; k++) {
            if (lc->fp8.slot[l][k] >= 0) z->unit_fp8[z->param_unit[lj_linear_param(&m->layout, (lj_linear_kind)k, l)]] = 1;
        }
    }
    z->unit_bytes = lj_malloc((size_t)p->num_units * sizeof(int64_t));
    z->fp8_offset = lj_calloc((size_t)p->num_units, sizeof(int64_t));
    z->group_bytes = lj_calloc((size_t)G, sizeof(int64_t));
    for (int u = 0; u < p->num_units; u++) {
        const int g = p->units[u].group;
        const int64_t gathered = (int64_t)z->world * p->units[u].shard;
        z->unit_bytes[u] = z->group_bytes[g];
        z->group_bytes[g] += z->unit_fp8[u] ? gathered : gathered * (int64_t)sp;
        if (!z->unit_fp8[u]) continue;
        z->fp8_offset[u] = z->fp8_shard_bytes;
        z->fp8_shard_bytes += p->units[u].shard;
    }
    /* Gather slots: the group computing plus as many as DeepSpeed's prefetch rule would fetch
     * ahead of it, at least one (the forward reads the next layer's input norm at the end of a
     * layer, so two groups are live at once), at most 3 ahead. Slot 0 fits the largest
     * non-persistent group; the embedding and lm_head are used only while no layer is (start
     * and end of the forward), so the others need to fit the other groups only. Gradient slots
     * likewise: slot 0 for any group (the tied embedding's is held across the backward), two
     * for the layers (one computing, one whose reduce-scatter may still be in flight). */
    int ahead = 1;
    int64_t big = 0, small = 0, grad_big = 0, grad_small = 0; /* gather slots in bytes, gradient ones in elements */
    for (int g = 0; g < G; g++) {
        for (int dir = -1; dir <= 1; dir += 2) {
            const int k = lj_zero_prefetch_count(p, g, dir, z->prefetch_numel, z->max_live_numel, p->groups[g].gather_numel);
            if (k > ahead) ahead = k;
        }
        const int64_t n = p->groups[g].gather_numel;
        const int end_group = g == z->embed_group || g == z->head_group;
        if (!p->groups[g].persistent) {
            if (z->group_bytes[g] > big) big = z->group_bytes[g];
            if (!end_group && z->group_bytes[g] > small) small = z->group_bytes[g];
        }
        if (n > grad_big) grad_big = n;
        if (!end_group && n > grad_small) grad_small = n;
    }
    /* none when every group is persistent, or under stage 2 (parameters replicated) */
    z->num_slots = big == 0 || !z->shard_params ? 0 : 1 + (ahead < 3 ? ahead : 3);
    z->num_grad_slots = 3;
    z->slot_bytes = lj_calloc((size_t)z->num_slots + 1, sizeof(int64_t));
    for (int s = 0; s < z->num_slots; s++) z->slot_bytes[s] = s == 0 ? big : small;
    z->grad_slot_numel = lj_calloc((size_t)z->num_grad_slots, sizeof(int64_t));
    for (int s = 0; s < z->num_grad_slots; s++) z->grad_slot_numel[s] = s == 0 ? grad_big : grad_small;
    z->slot = lj_calloc((size_t)z->num_slots + 1, sizeof(void *));
    z->slot_group = lj_malloc(((size_t)z->num_slots + 1) * sizeof(int));
    z->slot_ticket = lj_calloc((size_t)z->num_slots + 1, sizeof(lj_dist_ticket));
    for (int s = 0; s < z->num_slots; s++) z->slot_group[s] = -1;
    z->group_slot = lj_malloc((size_t)G * sizeof(int));
    z->group_grad_slot = lj_malloc((size_t)G * sizeof(int));
    for (int g = 0; g < G; g++) z->group_slot[g] = z->group_grad_slot[g] = -1;
    z->persist = lj_calloc((size_t)G, sizeof(void *));
    z->persist_fresh = lj_calloc((size_t)G, 1);
    z->group_ticket = lj_calloc((size_t)G, sizeof(lj_dist_ticket));
    z->shard_zero = lj_malloc((size_t)G);
    memset(z->shard_zero, 1, (size_t)G); /* nothing reduced into the shard yet */
    z->grad_slot = lj_calloc((size_t)z->num_grad_slots, sizeof(void *));
    z->grad_slot_group = lj_malloc((size_t)z->num_grad_slots * sizeof(int));
    z->grad_slot_ticket = lj_calloc((size_t)z->num_grad_slots, sizeof(lj_dist_ticket));
    z->grad_slot_age = lj_calloc((size_t)z->num_grad_slots, sizeof(uint64_t));
    for (int s = 0; s < z->num_grad_slots; s++) z->grad_slot_group[s] = -1;
    return z;
}

static void zero3_destroy(lj_zero3 *z) {
    if (!z) return;
    lj_zero_partition_free(&z->part);
    if (!z->shard_params) lj_zero_partition_free(&z->flat);
    free(z->pieces);
    free(z->param_group);
    free(z->slot);
    free(z->slot_bytes);
    free(z->unit_fp8);
    free(z->unit_bytes);
    free(z->fp8_offset);
    free(z->group_bytes);
    free(z->param_unit);
    free(z->grad_slot_numel);
    free(z->slot_group);
    free(z->slot_ticket);
    free(z->group_slot);
    free(z->persist);
    free(z->persist_fresh);
    free(z->grad_slot);
    free(z->grad_slot_group);
    free(z->grad_slot_ticket);
    free(z->grad_slot_age);
    free(z->group_grad_slot);
    free(z->group_ticket);
    free(z->shard_zero);
    free(z->grad_written);
    free(z);
}

/* Parameter `index` in its group's gather buffer: its unit's place, then its elements (an FP8
 * linear's weight: its codes, one byte each). */
static void *group_param(const lj_model *m, int index) {
    const lj_zero3 *z = lj_zero3_of(m);
    const int g = z->param_group[index], u = z->param_unit[index];
    const lj_zero_group *grp = &z->part.groups[g];
    void *base = grp->persistent ? z->persist[g] : (z->group_slot[g] >= 0 ? z->slot[z->group_slot[g]] : NULL);
    LJ_ASSERT(base && (!grp->persistent || z->persist_fresh[g]), "ZeRO-3: %s used while its group is not gathered",
              m->layout.params[index].name);
    const size_t es = z->unit_fp8[u] ? 1 : lj_dtype_size(m->ops->param_dtype);
    return (char *)base + z->unit_bytes[u] + (size_t)(m->layout.params[index].offset - z->part.units[u].begin) * es;
}

static void *group_grad(const lj_model *m, int index) {
    const lj_zero3 *z = lj_zero3_of(m);
    const int g = z->param_group[index];
    LJ_ASSERT(z->group_grad_slot[g] >= 0, "ZeRO-3: gradient of %s written while its group has no gradient slot",
              m->layout.params[index].name);
    const lj_zero_unit *un = &z->part.units[z->param_unit[index]];
    return (char *)z->grad_slot[z->group_grad_slot[g]] +
           (size_t)(un->gather_offset + m->layout.params[index].offset - un->begin) * lj_dtype_size(m->ops->grad_dtype);
}

/* Queues the all-gather of group g into `buf` (one collective per unit: an FP8 linear's weight
 * as its codes from the FP8 shard, moved as 16-bit words, shards being multiples of 64) and
 * returns its ticket. */
static lj_dist_ticket gather(lj_model *m, int g, void *buf) {
    lj_zero3 *z = lj_zero3_of(m);
    LJ_ASSERT(z->dist, "ZeRO-3: a model built for planning has no communicator");
    const size_t sp = lj_dtype_size(m->ops->param_dtype);
    const lj_zero_group *grp = &z->part.groups[g];
    void *stream = stream_of(m);
    for (int u = grp->first_unit; u < grp->first_unit + grp->num_units; u++) {
        const lj_zero_unit *un = &z->part.units[u];
        char *recv = (char *)buf + z->unit_bytes[u];
        if (z->unit_fp8[u])
            check(z, lj_dist_all_gather(z->dist, (char *)z->fp8_shard + z->fp8_offset[u], recv, un->shard / 2,
                                        LJ_DTYPE_U16, stream));
        else
            check(z, lj_dist_all_gather(z->dist, (char *)m->params + (size_t)un->shard_offset * sp, recv, un->shard,
                                        m->ops->param_dtype, stream));
    }
    lj_dist_ticket t = 0;
    check(z, lj_dist_mark(z->dist, &t));
    return t;
}

/* The smallest free slot of `bytes` or more; -1 if none. */
static int free_slot(const lj_zero3 *z, int64_t bytes) {
    int best = -1;
    for (int s = 0; s < z->num_slots; s++)
        if (z->slot_group[s] < 0 && z->slot_bytes[s] >= bytes && (best < 0 || z->slot_bytes[s] < z->slot_bytes[best]))
            best = s;
    return best;
}

/* Starts gathering non-persistent group g into a free slot; 0 if none is free. */
static int start_gather(lj_model *m, int g) {
    lj_zero3 *z = lj_zero3_of(m);
    if (z->group_slot[g] >= 0) return 1;
    const int s = free_slot(z, z->group_bytes[g]);
    if (s < 0) return 0;
    z->slot_group[s] = g;
    z->group_slot[g] = s;
    z->slot_ticket[s] = gather(m, g, z->slot[s]);
    return 1;
}

static void fetch_group(lj_model *m, int g, int direction) {
    lj_zero3 *z = lj_zero3_of(m);
    if (!z->shard_params) return; /* stage 2: the parameters are replicated */
    const lj_zero_partition *p = &z->part;
    void *stream = stream_of(m);
    if (p->groups[g].persistent) {
        if (!z->persist_fresh[g]) {
            check(z, lj_dist_wait(z->dist, gather(m, g, z->persist[g]), stream));
            z->persist_fresh[g] = 1;
        }
    } else {
        LJ_ASSERT(start_gather(m, g), "ZeRO-3: no free gather slot for group %d (%d slots)", g, z->num_slots);
        check(z, lj_dist_wait(z->dist, z->slot_ticket[z->group_slot[g]], stream));
    }
    /* prefetch (DeepSpeed's rule over the groups ahead, persistent ones skipped) while slots are free */
    int64_t live = 0;
    for (int s = 0; s < z->num_slots; s++)
        if (z->slot_group[s] >= 0) live += p->groups[z->slot_group[s]].gather_numel;
    /* overlap_comm off: no prefetch (each gather is waited for right when it is needed) */
    const int k = z->overlap ? lj_zero_prefetch_count(p, g, direction, z->prefetch_numel, z->max_live_numel, live) : 0;
    for (int h = g + direction, taken = 0; taken < k && h >= 0 && h < p->num_groups; h += direction) {
        if (p->groups[h].persistent) continue;
        if (!start_gather(m, h)) break;
        taken++;
    }
}

static void release_group(lj_model *m, int g) {
    lj_zero3 *z = lj_zero3_of(m);
    if (!z->shard_params) return;
    const int s = z->group_slot[g];
    if (s < 0) return;
    z->slot_group[s] = -1;
    z->group_slot[g] = -1;
}

static void release_all(lj_model *m) {
    for (int g = 0; g < lj_zero3_of(m)->part.num_groups; g++) release_group(m, g);
}

static int grad_begin_group(lj_model *m, int g) {
    lj_zero3 *z = lj_zero3_of(m);
    if (z->group_grad_slot[g] >= 0) return 0;
    const lj_zero_group *grp = &z->part.groups[g];
    int s = -1; /* the free slot that fits and was freed longest ago (its reduce-scatter is likeliest done) */
    for (int i = 0; i < z->num_grad_slots; i++)
        if (z->grad_slot_group[i] < 0 && z->grad_slot_numel[i] >= grp->gather_numel &&
            (s < 0 || z->grad_slot_age[i] < z->grad_slot_age[s]))
            s = i;
    LJ_ASSERT(s >= 0, "ZeRO-3: no free gradient slot for group %d", g);
    void *stream = stream_of(m);
    /* the slot's last reduce-scatter has read it, and this group's last one has written its shard */
    check(z, lj_dist_wait(z->dist, z->grad_slot_ticket[s], stream));
    check(z, lj_dist_wait(z->dist, z->group_ticket[g], stream));
    const size_t sg = lj_dtype_size(m->ops->grad_dtype);
    char *slot = z->grad_slot[s];
    z->grad_slot_group[s] = g;
    z->group_grad_slot[g] = s;
    /* A shard still zero since lj_model_zero_grads (first micro-batch) needs no seeding. If the
     * backward also writes every element of the group itself (overwrite mode), only the padding
     * after the group's elements is zeroed; else the whole slot. */
    const int seed = !z->shard_zero[g];
    if (!seed && z->grad_written[g]) { /* each unit's padding after its elements */
        for (int u = grp->first_unit; u < grp->first_unit + grp->num_units; u++) {
            const lj_zero_unit *un = &z->part.units[u];
            const int64_t real = un->end - un->begin, full = (int64_t)z->world * un->shard;
            if (full > real)
                m->ops->memset_zero(slot + (size_t)(un->gather_offset + real) * sg, (size_t)(full - real) * sg);
        }
        return 1;
    }
    m->ops->memset_zero(slot, (size_t)grp->gather_numel * sg);
    if (seed && !z->shard_params) {
        /* stage 2: the slot is the group's flat range; this rank's pieces of it start from the
         * gradient shard accumulated so far */
        const int n = lj_zero_range_pieces(&z->flat, grp->begin, grp->end, z->pieces, z->world + 1);
        for (int i = 0; i < n; i++) {
            const lj_zero_piece *pc = &z->pieces[i];
            if (pc->rank == z->rank)
                m->ops->copy(slot + (size_t)(pc->begin - grp->begin) * sg, (char *)m->grads + (size_t)pc->shard_offset * sg,
                             (size_t)(pc->end - pc->begin) * sg);
        }
    }
    for (int u = grp->first_unit; seed && z->shard_params && u < grp->first_unit + grp->num_units; u++) {
        const lj_zero_unit *un = &z->part.units[u];
        m->ops->copy(slot + (size_t)(un->gather_offset + (int64_t)z->rank * un->shard) * sg,
                     (char *)m->grads + (size_t)un->shard_offset * sg, (size_t)un->shard * sg);
    }
    return 0;
}

static void grad_end_group(lj_model *m, int g) {
    lj_zero3 *z = lj_zero3_of(m);
    const int s = z->group_grad_slot[g];
    LJ_ASSERT(s >= 0);
    const size_t sg = lj_dtype_size(m->ops->grad_dtype);
    const lj_zero_group *grp = &z->part.groups[g];
    void *stream = stream_of(m);
    for (int u = grp->first_unit; z->shard_params && u < grp->first_unit + grp->num_units; u++) {
        const lj_zero_unit *un = &z->part.units[u];
        check(z, lj_dist_reduce_scatter(z->dist, (char *)z->grad_slot[s] + (size_t)un->gather_offset * sg,
                                        (char *)m->grads + (size_t)un->shard_offset * sg, un->shard,
                                        m->ops->grad_dtype, stream));
    }
    /* stage 2: each bucket of the slot's flat range goes to the owners of its pieces, in one group */
    for (int64_t b0 = grp->begin; !z->shard_params && b0 < grp->end; b0 += z->bucket_numel) {
        const int64_t b1 = grp->end - b0 < z->bucket_numel ? grp->end : b0 + z->bucket_numel;
        const int n = lj_zero_range_pieces(&z->flat, b0, b1, z->pieces, z->world + 1);
        check(z, lj_dist_group_start(z->dist));
        for (int i = 0; i < n; i++) {
            const lj_zero_piece *pc = &z->pieces[i];
            check(z, lj_dist_reduce(z->dist, (char *)z->grad_slot[s] + (size_t)(pc->begin - grp->begin) * sg,
                                    (char *)m->grads + (size_t)pc->shard_offset * sg, pc->end - pc->begin,
                                    m->ops->grad_dtype, pc->rank, stream));
        }
        check(z, lj_dist_group_end(z->dist));
    }
    lj_dist_ticket t = 0;
    check(z, lj_dist_mark(z->dist, &t));
    /* overlap_comm off: the compute stream waits for the reduction before the next layer's backward */
    if (!z->overlap) check(z, lj_dist_wait(z->dist, t, stream));
    z->grad_slot_ticket[s] = z->group_ticket[g] = t;
    z->shard_zero[g] = 0;
    z->grad_slot_group[s] = -1;
    z->group_grad_slot[g] = -1;
    z->grad_slot_age[s] = ++z->clock;
}

static void grads_zeroed(lj_model *m) { memset(lj_zero3_of(m)->shard_zero, 1, (size_t)lj_zero3_of(m)->part.num_groups); }

void lj_zero3_step_begin(lj_model *m) {
    lj_zero3 *z = lj_zero3_of(m);
    check(z, lj_dist_wait(z->dist, LJ_DIST_ALL, stream_of(m)));
    memset(z->persist_fresh, 0, (size_t)z->part.num_groups);
}

static void upload_shard(const lj_model *m, float *dst, const float *src, int64_t offset, int64_t n, void *cast_dst,
                         int dst_host) {
    LJ_ASSERT(!dst_host || !cast_dst, "a host shard is not cast on the device");
    const lj_zero3 *z = lj_zero3_of(m);
    const size_t sp = lj_dtype_size(m->ops->param_dtype);
    for (int u = 0; u < z->part.num_units; u++) {
        int64_t b, e;
        lj_zero_unit_slice(&z->part, u, z->rank, &b, &e);
        const int64_t lo = b > offset ? b : offset, hi = e < offset + n ? e : offset + n;
        if (hi <= lo) continue;
        const int64_t at = z->part.units[u].shard_offset + (lo - b);
        if (dst_host) memcpy(dst + at, src + (lo - offset), (size_t)(hi - lo) * sizeof(float));
        else m->ops->upload(dst + at, src + (lo - offset), (size_t)(hi - lo) * sizeof(float));
        if (cast_dst) m->ops->cast_f32_to_param((char *)cast_dst + (size_t)at * sp, dst + at, hi - lo);
    }
}

void lj_zero3_scatter_round(const lj_zero3 *z, const float *gathered, int64_t k, int64_t c, float *full) {
    for (int r = 0; r < z->world; r++) {
        for (int u = 0; u < z->part.num_units; u++) {
            int64_t b, e;
            lj_zero_unit_slice(&z->part, u, r, &b, &e);
            const int64_t so = z->part.units[u].shard_offset;
            const int64_t lo = so > k ? so : k, hi = so + (e - b) < k + c ? so + (e - b) : k + c;
            if (hi > lo) memcpy(full + b + (lo - so), gathered + (int64_t)r * c + (lo - k), (size_t)(hi - lo) * sizeof(float));
        }
    }
}

/* ---- the residency (model/residency.h) ------------------------------------------- */

/* The group of unit u: LJ_UNIT_EMBED, layers 0..L-1, the final norm L, lm_head L + 1 (the
 * embedding's group when tied). */
static int group_of(const lj_model *m, int u) {
    const lj_zero3 *z = lj_zero3_of(m);
    if (u < 0) return z->embed_group;
    if (u == m->cfg.num_hidden_layers) return z->norm_group;
    if (u > m->cfg.num_hidden_layers) return z->head_group;
    return lj_zero_group_of_layer(&z->part, u);
}

static void res_fetch(lj_model *m, int unit, int direction) { fetch_group(m, group_of(m, unit), direction); }
static void res_release(lj_model *m, int unit) { release_group(m, group_of(m, unit)); }
static lj_grad_mode res_grad_begin(lj_model *m, int unit) {
    return grad_begin_group(m, group_of(m, unit)) ? LJ_GRAD_OVERWRITE : LJ_GRAD_ACCUMULATE;
}
static void res_grad_end(lj_model *m, int unit) { grad_end_group(m, group_of(m, unit)); }

/* Stage 2: the parameters are replicated and flat. */
static void *flat_param(const lj_model *m, int index) {
    return (char *)m->params + (size_t)m->layout.params[index].offset * lj_dtype_size(m->ops->param_dtype);
}

/* The plan entry (model/buffers.h): gather slots and persistent groups' buffers beside the
 * parameter shard, gradient slots beside the gradient shard (ZeRO-2: the gradient slots only). */
static void res_plan(lj_model *m, lj_buffer_walker *w) {
    lj_zero3 *z = lj_zero3_of(m);
    const size_t sp = lj_dtype_size(m->ops->param_dtype), sg = lj_dtype_size(m->ops->grad_dtype);
    char name[48];
    for (int s = 0; s < z->num_slots; s++) {
        snprintf(name, sizeof name, "zero3.gather.%d", s);
        void *p = lj_buffer_take(w, LJ_ARENA_PARAMS, name, (size_t)z->slot_bytes[s]);
        if (w->bind) z->slot[s] = p;
    }
    for (int g = 0; g < z->part.num_groups; g++) {
        if (!z->part.groups[g].persistent) continue;
        snprintf(name, sizeof name, "zero3.persistent.%d", g);
        void *p = lj_buffer_take(w, LJ_ARENA_PARAMS, name, (size_t)z->group_bytes[g]);
        if (w->bind) z->persist[g] = p;
    }
    if (z->fp8) { /* this rank's slices of the FP8 linears' weights as codes, cast from its shard */
        void *p = lj_buffer_take(w, LJ_ARENA_PARAMS, "zero3.fp8_shard", (size_t)z->fp8_shard_bytes);
        if (w->bind) z->fp8_shard = p;
        for (int l = 0; w->bind && l < m->cfg.num_hidden_layers; l++) {
            for (int k = 0; k < 4; k++) {
                if (m->linear.fp8.slot[l][k] < 0) continue;
                const int u = z->param_unit[lj_linear_param(&m->layout, (lj_linear_kind)k, l)];
                const lj_zero_unit *un = &z->part.units[u];
                lj_linear_bind_weight(&m->linear, (lj_linear_kind)k, l, (char *)m->params + (size_t)un->shard_offset * sp,
                                      un->shard, (char *)z->fp8_shard + z->fp8_offset[u]);
            }
        }
    }
    for (int s = 0; s < z->num_grad_slots; s++) {
        snprintf(name, sizeof name, "zero3.grad.%d", s);
        void *p = lj_buffer_take(w, LJ_ARENA_GRADS, name, (size_t)z->grad_slot_numel[s] * sg);
        if (w->bind) z->grad_slot[s] = p;
    }
}

static void res_destroy(lj_model *m) {
    zero3_destroy(lj_zero3_of(m));
    m->residency = NULL;
    m->residency_state = NULL;
}

/* The two modes differ in where the parameters are read and whether they are sharded. */
#define ZERO_RESIDENCY(name_, param_, shards_)                                                 \
    {                                                                                         \
        .name = name_, .fetch = res_fetch, .release = res_release, .grad_begin = res_grad_begin, \
        .grad_end = res_grad_end, .pass_end = release_all, .grads_zeroed = grads_zeroed,        \
        .param = param_, .grad = group_grad, .upload_shard = upload_shard,                     \
        .shards_params = shards_, .plan = res_plan, .destroy = res_destroy,                                      \
    }

static const lj_residency g_zero2 = ZERO_RESIDENCY("zero2", flat_param, 0);
static const lj_residency g_zero3 = ZERO_RESIDENCY("zero3", group_param, 1);

lj_zero3 *lj_zero3_of(const lj_model *m) {
    return m->residency == &g_zero2 || m->residency == &g_zero3 ? m->residency_state : NULL;
}

void lj_zero3_attach(lj_model *m, lj_dist *dist, const lj_zero_options *zopt) {
    lj_zero3 *z = zero3_create(m, dist, zopt);
    if (z->fp8) lj_linear_shard_weights(&m->linear); /* the linears read the gathered codes */
    m->residency_state = z;
    m->residency = z->shard_params ? &g_zero3 : &g_zero2;
}

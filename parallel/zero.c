/* zero.c: ZeRO shard arithmetic (zero.h): the padded partition, slices, owners, parameter
 * pieces, buckets, prefetch counts, "auto" sizes and per-stage element counts. */
#include "parallel/zero.h"

#include <string.h>

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The end of the unit that starts at b in a group ending at `end`: at most unit_max elements
 * (0: no limit), and before the first cut after b. */
static int64_t unit_end(int64_t b, int64_t end, int64_t unit_max, const int64_t *cuts, int num_cuts) {
    int64_t e = unit_max ? min64(b + unit_max, end) : end;
    for (int i = 0; i < num_cuts; i++)
        if (cuts[i] > b && cuts[i] < e) e = cuts[i];
    return e;
}

void lj_zero_partition_init(lj_zero_partition *z, const int64_t *bounds, int num_groups, int world_size,
                            int64_t align, int64_t max_unit_numel, int64_t persistence_threshold) {
    lj_zero_partition_init_cut(z, bounds, num_groups, NULL, 0, world_size, align, max_unit_numel, persistence_threshold);
}

void lj_zero_partition_init_cut(lj_zero_partition *z, const int64_t *bounds, int num_groups, const int64_t *cuts,
                                int num_cuts, int world_size, int64_t align, int64_t max_unit_numel,
                                int64_t persistence_threshold) {
    LJ_ASSERT(num_groups >= 1 && world_size >= 1 && align >= 1 && bounds[0] == 0 && num_cuts >= 0);
    memset(z, 0, sizeof *z);
    z->world_size = world_size;
    z->align = align;
    z->numel = bounds[num_groups];
    const int64_t quantum = (int64_t)world_size * align;
    int64_t unit_max = 0;
    if (max_unit_numel > 0) unit_max = max64(max_unit_numel / quantum * quantum, quantum);
    int nu = 0;
    for (int g = 0; g < num_groups; g++) {
        const int64_t n = bounds[g + 1] - bounds[g];
        LJ_ASSERT(n > 0, "group %d is empty or reversed: [%lld, %lld)", g, (long long)bounds[g], (long long)bounds[g + 1]);
        for (int64_t b = bounds[g]; b < bounds[g + 1]; nu++) b = unit_end(b, bounds[g + 1], unit_max, cuts, num_cuts);
    }
    z->num_groups = num_groups;
    z->num_units = nu;
    z->groups = lj_calloc((size_t)num_groups, sizeof *z->groups);
    z->units = lj_calloc((size_t)nu, sizeof *z->units);
    int u = 0;
    int64_t shard_offset = 0;
    for (int g = 0; g < num_groups; g++) {
        lj_zero_group *grp = &z->groups[g];
        grp->begin = bounds[g];
        grp->end = bounds[g + 1];
        grp->first_unit = u;
        grp->layer = LJ_ZERO_CUSTOM;
        grp->persistent = persistence_threshold > 0 && grp->end - grp->begin <= persistence_threshold;
        int64_t gather = 0;
        for (int64_t b = grp->begin; b < grp->end;) {
            const int64_t e = unit_end(b, grp->end, unit_max, cuts, num_cuts);
            lj_zero_unit *un = &z->units[u++];
            un->begin = b;
            un->end = e;
            un->shard = ceil_div(e - b, quantum) * align;
            un->shard_offset = shard_offset;
            un->gather_offset = gather;
            un->group = g;
            shard_offset += un->shard;
            gather += (int64_t)world_size * un->shard;
            b = e;
        }
        grp->num_units = u - grp->first_unit;
        grp->gather_numel = gather;
        z->max_gather_numel = max64(z->max_gather_numel, gather);
    }
    z->shard_numel = shard_offset;
}

void lj_zero_partition_flat(lj_zero_partition *z, int64_t numel, int world_size, int64_t align) {
    const int64_t bounds[2] = {0, numel};
    lj_zero_partition_init(z, bounds, 1, world_size, align, 0, 0);
}

void lj_zero_partition_layers(lj_zero_partition *z, const lj_param_layout *layout, int world_size, int64_t align,
                              int64_t max_unit_numel, int64_t persistence_threshold) {
    lj_zero_partition_layers_cut(z, layout, NULL, 0, world_size, align, max_unit_numel, persistence_threshold);
}

void lj_zero_partition_layers_cut(lj_zero_partition *z, const lj_param_layout *layout, const int64_t *cuts,
                                  int num_cuts, int world_size, int64_t align, int64_t max_unit_numel,
                                  int64_t persistence_threshold) {
    const int L = layout->layer_numel > 0 ? (int)((layout->params[layout->final_norm].offset - layout->layer_offset0) /
                                                  layout->layer_numel)
                                          : 0;
    const int tied = layout->lm_head == layout->embed;
    const int num_groups = 1 + L + 1 + (tied ? 0 : 1);
    int64_t *bounds = lj_malloc((size_t)(num_groups + 1) * sizeof *bounds);
    int *layers = lj_malloc((size_t)num_groups * sizeof *layers);
    int g = 0;
    bounds[0] = 0;
    layers[g++] = LJ_ZERO_EMBED;
    bounds[g] = layout->layer_offset0;
    for (int l = 0; l < L; l++) {
        layers[g++] = l;
        bounds[g] = layout->layer_offset0 + (int64_t)(l + 1) * layout->layer_numel;
    }
    const lj_param_info *norm = &layout->params[layout->final_norm];
    LJ_ASSERT(bounds[g] == norm->offset);
    layers[g++] = L;
    bounds[g] = norm->offset + norm->numel;
    if (!tied) {
        layers[g++] = L + 1;
        bounds[g] = layout->total;
    }
    LJ_ASSERT(g == num_groups && bounds[g] == layout->total);
    lj_zero_partition_init_cut(z, bounds, num_groups, cuts, num_cuts, world_size, align, max_unit_numel,
                               persistence_threshold);
    for (int i = 0; i < num_groups; i++) z->groups[i].layer = layers[i];
    free(bounds);
    free(layers);
}

void lj_zero_partition_free(lj_zero_partition *z) {
    free(z->units);
    free(z->groups);
    memset(z, 0, sizeof *z);
}

int lj_zero_group_of_layer(const lj_zero_partition *z, int layer) {
    for (int g = 0; g < z->num_groups; g++)
        if (z->groups[g].layer == layer) return g;
    return -1;
}

void lj_zero_unit_slice(const lj_zero_partition *z, int unit, int rank, int64_t *begin, int64_t *end) {
    LJ_ASSERT(unit >= 0 && unit < z->num_units && rank >= 0 && rank < z->world_size);
    const lj_zero_unit *u = &z->units[unit];
    const int64_t b = u->begin + (int64_t)rank * u->shard;
    *begin = min64(b, u->end);
    *end = min64(b + u->shard, u->end);
}

int64_t lj_zero_rank_numel(const lj_zero_partition *z, int rank) {
    int64_t n = 0;
    for (int u = 0; u < z->num_units; u++) {
        int64_t b, e;
        lj_zero_unit_slice(z, u, rank, &b, &e);
        n += e - b;
    }
    return n;
}

/* The unit holding flat element i (binary search over the sorted units). */
static int unit_at(const lj_zero_partition *z, int64_t i) {
    int lo = 0, hi = z->num_units - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (z->units[mid].begin <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int lj_zero_owner(const lj_zero_partition *z, int64_t i, int64_t *shard_offset) {
    LJ_ASSERT(i >= 0 && i < z->numel);
    const lj_zero_unit *u = &z->units[unit_at(z, i)];
    const int64_t rel = i - u->begin;
    const int rank = (int)(rel / u->shard);
    if (shard_offset) *shard_offset = u->shard_offset + rel - (int64_t)rank * u->shard;
    return rank;
}

int lj_zero_range_pieces(const lj_zero_partition *z, int64_t begin, int64_t end, lj_zero_piece *out, int max) {
    LJ_ASSERT(begin >= 0 && begin <= end && end <= z->numel);
    int count = 0;
    if (begin == end) return 0;
    for (int ui = unit_at(z, begin); ui < z->num_units && z->units[ui].begin < end; ui++) {
        const lj_zero_unit *u = &z->units[ui];
        const int64_t b = max64(begin, u->begin), e = min64(end, u->end);
        for (int r = (int)((b - u->begin) / u->shard); r < z->world_size; r++) {
            const int64_t rb = u->begin + (int64_t)r * u->shard, re = min64(rb + u->shard, u->end);
            const int64_t pb = max64(b, rb), pe = min64(e, re);
            if (pb >= e) break;
            if (pb >= pe) continue;
            if (count < max) {
                lj_zero_piece *p = &out[count];
                p->rank = r;
                p->unit = ui;
                p->begin = pb;
                p->end = pe;
                p->shard_offset = u->shard_offset + pb - rb;
            }
            count++;
        }
    }
    return count;
}

int lj_zero_shard_params(const lj_zero_partition *z, const lj_param_layout *layout, int rank,
                         lj_zero_param_piece *out, int max) {
    int count = 0;
    for (int ui = 0; ui < z->num_units; ui++) {
        const lj_zero_unit *u = &z->units[ui];
        int64_t sb, se;
        lj_zero_unit_slice(z, ui, rank, &sb, &se);
        if (sb >= se) continue;
        const int64_t slice0 = u->begin + (int64_t)rank * u->shard; /* flat element at u->shard_offset */
        int lo = 0, hi = layout->count - 1; /* the last parameter starting at or before sb */
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (layout->params[mid].offset <= sb) lo = mid;
            else hi = mid - 1;
        }
        for (int p = lo; p < layout->count && layout->params[p].offset < se; p++) {
            const lj_param_info *pi = &layout->params[p];
            const int64_t b = max64(sb, pi->offset), e = min64(se, pi->offset + pi->numel);
            if (b >= e) continue;
            if (count < max) {
                out[count].param = p;
                out[count].begin = b - pi->offset;
                out[count].end = e - pi->offset;
                out[count].shard_offset = u->shard_offset + (b - slice0);
            }
            count++;
        }
    }
    return count;
}

int lj_zero_prefetch_count(const lj_zero_partition *z, int group, int direction, int64_t prefetch_bucket_numel,
                           int64_t max_live_numel, int64_t live_numel) {
    LJ_ASSERT(group >= 0 && group < z->num_groups && (direction == 1 || direction == -1));
    if (prefetch_bucket_numel <= 0) return 0;
    int64_t limit = prefetch_bucket_numel;
    if (max_live_numel > 0) limit = min64(limit, max_live_numel - live_numel);
    int64_t fetching = 0;
    int ahead = 0;
    for (int h = group + direction; h >= 0 && h < z->num_groups && fetching < limit; h += direction) {
        if (z->groups[h].persistent) continue;
        fetching += z->groups[h].end - z->groups[h].begin;
        ahead = h > group ? h - group : group - h;
    }
    return ahead;
}

int64_t lj_zero_reduce_bucket_auto(int hidden_size) { return (int64_t)hidden_size * hidden_size; }
int64_t lj_zero_prefetch_bucket_auto(int hidden_size) { return (int64_t)(0.9 * (double)hidden_size * hidden_size); }
int64_t lj_zero_persistence_threshold_auto(int hidden_size) { return 10 * (int64_t)hidden_size; }

void lj_zero_rank_counts(const lj_zero_partition *z, int stage, lj_zero_counts *c) {
    LJ_ASSERT(stage >= 0 && stage <= 3, "ZeRO stage %d", stage);
    const int64_t P = z->numel, S = z->shard_numel;
    c->params = stage >= 3 ? S : P;
    c->grads = stage >= 2 ? S : P;
    c->master = stage >= 1 ? S : P;
    c->moments = 2 * c->master;
}

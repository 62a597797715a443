/* parallel.c: lj_parallelize (parallel.h). */
#include "parallel/parallel.h"

#include "parallel/zero3.h"

/* The FP8 recipe's amax reduction (model/linear.h amax_reduce): the max of the amaxes' bits over
 * the ranks, which is the max of the values (non-negative floats; NaN above inf: an overflow on
 * any rank is every rank's). A failed collective stops the job, as the data-parallel step's do. */
static void fp8_amax_reduce(const lj_linear_recipe_ctx *c, float *amax, int count) {
    lj_dist *d = c->amax_reduce_arg;
    void *stream = c->ops->stream ? c->ops->stream() : NULL;
    lj_status s = lj_dist_all_reduce_max_u32(d, amax, amax, count, stream);
    if (s == LJ_OK) s = lj_dist_wait(d, LJ_DIST_ALL, stream);
    if (s != LJ_OK) lj_dist_abort(d, 1, lj_error_message());
}

void lj_parallelize(lj_model *m, lj_dist *dist, const lj_zero_options *zopt) {
    LJ_ASSERT(!m->parallelized, "lj_parallelize: called twice");
    m->parallelized = 1;
    static const lj_zero_options replicated = {0};
    const lj_zero_options *o = zopt ? zopt : &replicated;
    const int64_t P = m->layout.total;
    const int W = o->zero_stage > 0 && o->dp_world_size > 1 ? o->dp_world_size : 1;
    if (dist && lj_dist_world_size(dist) > 1 && m->linear.fp8.active) {
        m->linear.amax_reduce = fp8_amax_reduce;
        m->linear.amax_reduce_arg = dist;
        m->opt.graphs = 0; /* the reduction is a collective between the backward and the step */
    }
    if (lj_zero3_wanted(m, o)) {
        lj_zero3_attach(m, dist, o);
        m->opt.graphs = 0;
        const lj_zero3 *z = lj_zero3_of(m);
        if (!z->shard_params) {
            /* ZeRO-2: flat shards as under stage 1, but only this rank's shard of the gradients */
            m->shard_numel = z->flat.shard_numel;
            m->padded_numel = m->shard_numel * W;
            m->shard_begin = m->shard_numel * o->dp_rank;
        } else {
            /* ZeRO-3: every buffer is this rank's shard of the layer partition */
            m->shard_numel = m->padded_numel = z->part.shard_numel;
            m->shard_begin = 0;
        }
        m->grad_numel = m->shard_numel;
    } else if (W > 1) {
        m->shard_numel = ((P + W - 1) / W + 63) / 64 * 64;
        m->padded_numel = m->shard_numel * W;
        m->shard_begin = m->shard_numel * o->dp_rank;
        m->grad_numel = m->padded_numel;
    }
}

/* dp.c: data parallelism over a model (see dp.h). */
#include "parallel/dp.h"

#include "io/safetensors.h"
#include "optim/offload.h"
#include "optim/step.h"
#include "parallel/zero3.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

lj_status lj_dp_init(lj_dp *dp, const lj_ops *ops, int zero_stage, const char *summary) {
    memset(dp, 0, sizeof *dp);
    if (zero_stage < 0 || zero_stage > 3)
        return lj_fail(LJ_ERR_ARG, "ZeRO stage %d does not exist (--zero-stage / zero_optimization.stage: 0, 1, 2 or 3)",
                       zero_stage);
    lj_dist_options o;
    lj_dist_options_default(&o);
    o.backend = strcmp(ops->name, "cpu") == 0 ? LJ_DIST_MPI : LJ_DIST_NCCL;
    o.config_hash = lj_hash(LJ_HASH_INIT, summary, strlen(summary));
    o.config_summary = summary;
    LJ_TRY(lj_dist_init(&dp->dist, &o));
    dp->rank = lj_dist_rank(dp->dist);
    dp->world = lj_dist_world_size(dp->dist);
    dp->zero_stage = zero_stage;
    dp->overlap_comm = 1;
    dp->host_backend = strcmp(ops->name, "cpu") == 0;
    static const char *what[4] = {"replicated, gradients all-reduced", "AdamW state sharded, gradients all-reduced",
                                  "AdamW state and gradients sharded; gradients reduced bucket by bucket during the backward",
                                  "parameters, gradients and AdamW state sharded; layers all-gathered as they compute"};
    if (dp->world > 1 && dp->rank == 0)
        lj_log_info("data parallel: %d ranks (ZeRO stage %d: %s)", dp->world, zero_stage, what[zero_stage]);
    return LJ_OK;
}

void lj_dp_free(lj_dp *dp) {
    if (dp->dist) lj_dist_free(dp->dist);
    memset(dp, 0, sizeof *dp);
}

void lj_dp_model_options(const lj_dp *dp, int B, int T, int fused, const uint8_t *recompute, lj_model_options *o) {
    memset(o, 0, sizeof *o);
    o->micro_batch_size = B;
    o->seq_length = T;
    o->training = 1;
    o->fused = fused;
    o->graphs = fused; /* graphs go with fusion (the ablation's +Fusion row) */
    /* ZeRO-2/3 queue their collectives from the host between the layers, with slot bookkeeping on
     * the host (parallel/zero3.h): the forward + backward is not captured as a CUDA graph */
    if ((dp->zero_stage == 2 || dp->zero_stage == 3) && dp->world > 1) o->graphs = 0;
    memcpy(o->recompute, recompute, sizeof o->recompute);
}

lj_zero_options lj_dp_zero_options(const lj_dp *dp) {
    lj_zero_options z = {.zero_stage = dp->zero_stage, .dp_rank = dp->rank, .dp_world_size = dp->world};
    if ((dp->zero_stage == 2 || dp->zero_stage == 3) && dp->world > 1) {
        z.zero_reduce_bucket_numel = dp->reduce_bucket_size;
        z.overlap_comm = dp->overlap_comm;
        z.zero3_prefetch_numel = dp->stage3_prefetch_bucket_size;
        z.zero3_max_live_numel = dp->stage3_max_live_parameters;
        z.zero3_persistence_numel = dp->stage3_param_persistence_threshold;
    }
    return z;
}

lj_offload_options lj_dp_offload_options(const lj_dp *dp) {
    /* the CPU backend's memory is host memory already: offload moves nothing there */
    const lj_offload_options o = {.enabled = dp->offload_optimizer && (!dp->host_backend || dp->offload_force)};
    return o;
}

lj_status lj_dp_offload_check(lj_dp *dp, int zero_stage, const char *what) {
    if (!dp->offload_optimizer) return LJ_OK;
    const char *force = getenv("LJPERF_OFFLOAD_HOST_PATH");
    dp->offload_force = force && strcmp(force, "1") == 0;
    if (zero_stage < 1)
        return lj_fail(LJ_ERR_ARG,
                       "%s: optimizer offload needs ZeRO stage 1, 2 or 3 (DeepSpeed's rule); add --zero-stage 1 "
                       "(or zero_optimization.stage >= 1), or use --offload-optimizer none",
                       what);
    if (dp->rank == 0) {
        if (dp->host_backend && dp->offload_force)
            lj_log_info("optimizer offload (%s): LJPERF_OFFLOAD_HOST_PATH=1: the host path runs on the cpu backend "
                        "(tests)", what);
        else if (dp->host_backend)
            lj_log_info("optimizer offload (%s): the cpu backend keeps the AdamW state in host memory already; "
                        "nothing moves", what);
        else
            lj_log_info("optimizer offload (%s): f32 master weights and AdamW moments in host memory, AdamW on the "
                        "host (ZeRO stage %d)", what, zero_stage);
    }
    return LJ_OK;
}

void lj_dp_check(lj_dp *dp, lj_status s) {
    if (s != LJ_OK) lj_dist_abort(dp->dist, 1, lj_error_message());
}

static void *stream_of(const lj_model *m) { return m->ops->stream ? m->ops->stream() : NULL; }

void lj_dp_sum(lj_dp *dp, lj_model *m, float *values, int n) {
    if (dp->world == 1) return;
    void *stream = stream_of(m);
    m->ops->upload(m->dist_scalars, values, (size_t)n * sizeof(float));
    lj_dp_check(dp, lj_dist_all_reduce(dp->dist, m->dist_scalars, m->dist_scalars, n, LJ_DTYPE_F32, stream));
    lj_dp_check(dp, lj_dist_wait(dp->dist, LJ_DIST_ALL, stream));
    m->ops->download(values, m->dist_scalars, (size_t)n * sizeof(float));
}

/* The squared norm in m->grad_norm_sq summed over the ranks. */
static void all_reduce_norm(lj_dp *dp, lj_model *m) {
    void *stream = stream_of(m);
    lj_dp_check(dp, lj_dist_all_reduce(dp->dist, m->grad_norm_sq, m->grad_norm_sq, 1, LJ_DTYPE_F32, stream));
    lj_dp_check(dp, lj_dist_wait(dp->dist, LJ_DIST_ALL, stream));
}

int lj_dp_segments(const lj_model *m, const lj_adamw_config *cfg, lj_adamw_segment **out) {
    const lj_zero3 *z = lj_zero3_of(m);
    if (!z || !z->shard_params) {
        lj_adamw_segment *all;
        int n_all = lj_adamw_segments(&m->layout, cfg, &all);
        /* --fp8-param-gather's codes in the weights' places (one rank, model/linear.h): AdamW
         * updates those weights' master only */
        int64_t *co = lj_malloc(LJ_LINEAR_FP8_MAX * sizeof(int64_t));
        int64_t *cn = lj_malloc(LJ_LINEAR_FP8_MAX * sizeof(int64_t));
        const int nc = lj_linear_codes_in_params(&m->linear, &m->layout, co, cn);
        if (nc > 0) {
            lj_adamw_segment *split;
            n_all = lj_adamw_segments_master_only(all, n_all, co, cn, nc, &split);
            free(all);
            all = split;
        }
        free(co);
        free(cn);
        const int n = lj_adamw_segments_slice(all, n_all, m->shard_begin, m->shard_numel, out);
        free(all);
        return n;
    }
    const int n = lj_zero_shard_params(&z->part, &m->layout, z->rank, NULL, 0);
    lj_zero_param_piece *pieces = lj_calloc((size_t)(n > 0 ? n : 1), sizeof *pieces);
    lj_zero_shard_params(&z->part, &m->layout, z->rank, pieces, n);
    lj_adamw_segment *seg = lj_calloc((size_t)(n > 0 ? n : 1), sizeof *seg);
    int k = 0;
    for (int i = 0; i < n; i++) {
        const lj_param_info *p = &m->layout.params[pieces[i].param];
        const float wd = lj_adamw_param_decay(p, cfg);
        const int group = lj_adamw_param_group(p, cfg);
        const int64_t count = pieces[i].end - pieces[i].begin;
        if (k > 0 && seg[k - 1].weight_decay == wd && seg[k - 1].lr_group == group &&
            seg[k - 1].offset + seg[k - 1].count == pieces[i].shard_offset) {
            seg[k - 1].count += count;
        } else {
            seg[k].offset = pieces[i].shard_offset;
            seg[k].count = count;
            seg[k].weight_decay = wd;
            seg[k].lr_group = group;
            k++;
        }
    }
    free(pieces);
    *out = seg;
    return k;
}

/* Optimizer offload: the host halves (optim/offload.h) around the norm's all-reduce. */
static double offload_step(lj_dp *dp, lj_model *m, const void *grad_shard, int64_t n_grad, const lj_adamw_segment *seg,
                           int nseg, const lj_adamw_hparams *hp, lj_adamw_lr lr, int step, int reduce_norm) {
    float norm_sq = lj_offload_grad_norm_sq(m, grad_shard, n_grad);
    if (reduce_norm) { /* summed over the ranks through the device scalar */
        m->ops->upload(m->grad_norm_sq, &norm_sq, sizeof(float));
        all_reduce_norm(dp, m);
        m->ops->download(&norm_sq, m->grad_norm_sq, sizeof(float));
    }
    if (isfinite(norm_sq)) lj_offload_update(m, seg, nseg, hp, lr, step, norm_sq); /* else a skipped step, as the op's */
    return sqrt((double)norm_sq);
}

/* Stage 3: the gradient shard is complete once the backward's reduce-scatters are done; the
 * whole shard (its padding carries zeros) enters the norm and the update. */
static double zero3_step(lj_dp *dp, lj_model *m, const lj_adamw_segment *seg, int nseg, const lj_adamw_hparams *hp,
                         lj_adamw_lr lr, int step) {
    lj_zero3_step_begin(m);
    double norm = -1.0;
    if (lj_offload_of(m)) {
        norm = offload_step(dp, m, m->grads, m->shard_numel, seg, nseg, hp, lr, step, 1);
    } else {
        lj_optim_norm_sq(m, m->grads, m->shard_numel);
        all_reduce_norm(dp, m);
        lj_optim_update(m, m->params, m->grads, seg, nseg, hp);
    }
    /* --fp8-param-gather: each rank casts its slices of the FP8 linears' weights, gathered as codes */
    lj_linear_cast_weights(&m->linear);
    return norm >= 0.0 ? norm : lj_optim_read_norm(m);
}

static double optimizer_step(lj_dp *dp, lj_model *m, const lj_adamw_segment *segments, int num_segments,
                             const lj_adamw_config *cfg, lj_adamw_lr lr, int step) {
    const lj_ops *ops = m->ops;
    const lj_adamw_hparams hp = lj_adamw_hparams_of(cfg);
    lj_optim_upload_scalars(m, &hp, lr, step);
    lj_zero3 *z = lj_zero3_of(m);
    if (z && z->shard_params) return zero3_step(dp, m, segments, num_segments, &hp, lr, step);
    const int stage = dp->world > 1 ? dp->zero_stage : 0;
    void *stream = stream_of(m);
    const size_t sg = lj_dtype_size(ops->grad_dtype), sp = lj_dtype_size(ops->param_dtype);
    /* ZeRO-2 over several ranks (the ZeRO runtime in its stage-2 form): m->grads is the shard
     * itself, reduced during the backward; the compute stream waits for the last reductions */
    char *grad_shard = z ? (char *)m->grads : (char *)m->grads + (size_t)m->shard_begin * sg;
    if (z) {
        lj_zero3_step_begin(m);
    } else if (dp->world > 1) {
        lj_dp_check(dp, lj_dist_all_reduce(dp->dist, m->grads, m->grads, m->padded_numel, ops->grad_dtype, stream));
        lj_dp_check(dp, lj_dist_wait(dp->dist, LJ_DIST_ALL, stream));
    }
    /* the shard's real elements (the padding after P carries nothing) */
    const int64_t P = m->layout.total;
    const int64_t n = m->shard_begin + m->shard_numel <= P ? m->shard_numel : P - m->shard_begin;
    double norm;
    if (lj_offload_of(m)) {
        norm = offload_step(dp, m, grad_shard, n > 0 ? n : 0, segments, num_segments, &hp, lr, step, stage > 0);
    } else {
        lj_optim_norm_sq(m, grad_shard, n > 0 ? n : 0);
        if (stage > 0) all_reduce_norm(dp, m);
        lj_optim_update(m, (char *)m->params + (size_t)m->shard_begin * sp, grad_shard, segments, num_segments, &hp);
        norm = -1.0; /* read after the all-gather */
    }
    if (stage > 0) {
        lj_dp_check(dp, lj_dist_all_gather(dp->dist, (char *)m->params + (size_t)m->shard_begin * sp, m->params,
                                           m->shard_numel, ops->param_dtype, stream));
        lj_dp_check(dp, lj_dist_wait(dp->dist, LJ_DIST_ALL, stream));
    }
    /* --fp8-param-gather: the kept FP8 weights from the updated (and gathered) parameters */
    lj_linear_cast_weights(&m->linear);
    return norm >= 0.0 ? norm : lj_optim_read_norm(m);
}

double lj_dp_optimizer_step(lj_dp *dp, lj_model *m, const lj_adamw_segment *segments, int num_segments,
                            const lj_adamw_config *cfg, lj_adamw_lr lr, int step) {
    lj_model_range_push(m, "optimizer.step");
    const double norm = optimizer_step(dp, m, segments, num_segments, cfg, lr, step);
    lj_model_range_pop(m);
    return norm;
}

double lj_dp_train_step(lj_dp *dp, lj_model *m, const lj_adamw_segment *segments, int num_segments,
                        const lj_adamw_config *cfg, lj_adamw_lr lr, int step, float dloss) {
    if (dp->world > 1 || m->residency || lj_offload_of(m)) {
        /* collectives, or the offloaded update's host work, between the backward and the update:
         * not captured */
        lj_model_zero_grads(m);
        lj_model_forward_backward(m, dloss);
        return lj_dp_optimizer_step(dp, m, segments, num_segments, cfg, lr, step);
    }
    const lj_optim_local u = {segments, num_segments, lj_adamw_hparams_of(cfg)};
    lj_optim_upload_scalars(m, &u.hp, lr, step); /* in stream order before the step (its graph) reads them */
    lj_model_train_step(m, dloss, lj_optim_local_key(&u), lj_optim_local_step, (void *)&u);
    return lj_optim_read_norm(m);
}

void lj_dp_scatter_state(lj_dp *dp, lj_model *m, const float *w, const float *mm, const float *vv) {
    (void)dp;
    lj_model_set_weights(m, w);
    lj_model_upload_state_shard(m, LJ_STATE_EXP_AVG, mm);
    lj_model_upload_state_shard(m, LJ_STATE_EXP_AVG_SQ, vv);
}

void lj_dp_gather_state(lj_dp *dp, lj_model *m, float *w, float *mm, float *vv) {
    const lj_ops *ops = m->ops;
    const int64_t P = m->layout.total;
    lj_zero3 *z = lj_zero3_of(m);
    if (!z && m->shard_numel == P) {
        if (dp->rank != 0) return;
        lj_model_get_weights(m, w);
        lj_model_state_download(m, LJ_STATE_EXP_AVG, mm, 0, P);
        lj_model_state_download(m, LJ_STATE_EXP_AVG_SQ, vv, 0, P);
        return;
    }
    /* The gradient buffer (padded_numel elements of the grad dtype) is the landing space: each
     * round all-gathers `c` f32 elements of every rank's shard, [world][c] floats. Under ZeRO-2/3
     * the gradients are a shard only, and a gradient slot lands instead. */
    void *stream = stream_of(m);
    const int64_t S = m->shard_numel;
    /* ZeRO-3: a gradient slot (the largest group, free between steps) is the landing space */
    const size_t land_bytes = z ? (size_t)z->grad_slot_numel[0] * lj_dtype_size(ops->grad_dtype)
                                : (size_t)m->padded_numel * lj_dtype_size(ops->grad_dtype);
    const int64_t room = (int64_t)(land_bytes / sizeof(float));
    const int64_t c_max = room / dp->world < S ? room / dp->world : S;
    LJ_ASSERT(c_max > 0, "no landing space to gather the sharded state");
    float *land = z ? (float *)z->grad_slot[0] : (float *)m->grads;
    float *host = dp->rank == 0 ? lj_malloc((size_t)(dp->world * c_max) * sizeof(float)) : NULL;
    if (z) lj_zero3_step_begin(m); /* the backward's reductions have finished with the slots */
    const int zero3 = z && z->shard_params; /* shards in the layer partition's order, else flat */
    /* the params hold the full master (under offload on an f32 backend: an exact copy of it) */
    const int f32_params = !zero3 && ops->param_dtype == LJ_DTYPE_F32;
    void *src[3] = {f32_params ? NULL : m->master, m->adam_m, m->adam_v}; /* LJ_STATE_* order */
    float *dst[3] = {w, mm, vv};
    for (int i = 0; i < 3; i++) {
        if (!src[i]) {
            if (dp->rank == 0) ops->download(w, m->params, (size_t)P * sizeof(float));
            continue;
        }
        for (int64_t k = 0; k < S; k += c_max) {
            const int64_t c = S - k < c_max ? S - k : c_max;
            float *mine = land + (int64_t)dp->rank * c;
            if (lj_offload_of(m)) {
                /* host state: staged into this rank's slot of the landing space, gathered in place */
                ops->upload(mine, (float *)src[i] + k, (size_t)c * sizeof(float));
                lj_dp_check(dp, lj_dist_all_gather(dp->dist, mine, land, c, LJ_DTYPE_F32, stream));
            } else if (lj_model_state_dtype(m, i) == LJ_DTYPE_BF16) {
                /* bf16 moments: widened (exactly) into this rank's slot, gathered in place as f32 */
                ops->cast_to_f32(mine, (uint16_t *)src[i] + k, LJ_DTYPE_BF16, c);
                lj_dp_check(dp, lj_dist_all_gather(dp->dist, mine, land, c, LJ_DTYPE_F32, stream));
            } else {
                lj_dp_check(dp, lj_dist_all_gather(dp->dist, (float *)src[i] + k, land, c, LJ_DTYPE_F32, stream));
            }
            lj_dp_check(dp, lj_dist_wait(dp->dist, LJ_DIST_ALL, stream));
            if (dp->rank != 0) continue;
            ops->download(host, land, (size_t)(dp->world * c) * sizeof(float));
            if (zero3) {
                lj_zero3_scatter_round(z, host, k, c, dst[i]);
                continue;
            }
            for (int r = 0; r < dp->world; r++) {
                const int64_t at = (int64_t)r * S + k, keep = at >= P ? 0 : (P - at < c ? P - at : c);
                if (keep > 0) memcpy(dst[i] + at, host + (int64_t)r * c, (size_t)keep * sizeof(float));
            }
        }
    }
    free(host);
    /* the gradients were overwritten: the caller saves between optimizer steps, where they are
     * zeroed before the next backward anyway */
}

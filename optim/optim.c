/* optim.c: LR schedules and the AdamW step. */
#include "optim/optim.h"

#include <math.h>
#include <string.h>

double lj_lr_at(const lj_lr_schedule *s, int it) {
    if (s->deepspeed.type != LJ_DS_SCHEDULER_NONE) return lj_lr_deepspeed_at(&s->deepspeed, s->lr, it);
    return lj_lr_group_at(s, 0, (double)it * (double)(s->step_size > 0 ? s->step_size : 1));
}

double lj_lr_group_at(const lj_lr_schedule *s, int group, double n) {
    const double max_lr = group ? s->decoupled_lr : s->lr, min_lr = group ? s->decoupled_min_lr : s->min_lr;
    const double w = (double)s->warmup_steps, D = (double)s->decay_steps;
    if (w > 0 && n <= w) return s->init_lr + (max_lr - s->init_lr) * n / w;
    if (s->style == LJ_LR_CONSTANT) return max_lr;
    if (n > D) return min_lr;
    if (s->style == LJ_LR_INVERSE_SQRT) {
        const double lr = max_lr * sqrt(w > 1 ? w : 1) / sqrt(n > 1 ? n : 1);
        return lr > min_lr ? lr : min_lr;
    }
    if (D <= w) return min_lr;
    const double r = (n - w) / (D - w);
    double f;
    if (s->style == LJ_LR_LINEAR) f = 1.0 - r;
    else if (s->style == LJ_LR_COSINE) f = 0.5 * (1.0 + cos(M_PI * r));
    else {
        const double wsd = (double)s->wsd_decay_steps, start = D - wsd;
        if (n <= start || wsd <= 0) f = 1.0;
        else {
            const double q = (n - start) / wsd;
            switch (s->wsd_style) {
            case LJ_LR_WSD_LINEAR: f = 1.0 - q; break;
            case LJ_LR_WSD_COSINE: f = 0.5 * (1.0 + cos(M_PI * q)); break;
            case LJ_LR_WSD_EXPONENTIAL: f = 2.0 * pow(0.5, q) - 1.0; break;
            default: f = 1.0 - sqrt(q); break;
            }
        }
    }
    return min_lr + (max_lr - min_lr) * f;
}

lj_status lj_lr_parse_style(const char *text, lj_lr_decay_style *style) {
    static const struct { const char *name; lj_lr_decay_style style; } k[] = {
        {"constant", LJ_LR_CONSTANT}, {"linear", LJ_LR_LINEAR}, {"cosine", LJ_LR_COSINE},
        {"inverse-square-root", LJ_LR_INVERSE_SQRT}, {"WSD", LJ_LR_WSD},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(text, k[i].name)) {
            *style = k[i].style;
            return LJ_OK;
        }
    return lj_fail(LJ_ERR_ARG, "--lr-decay-style: '%s' is not one of constant, linear, cosine, inverse-square-root, WSD",
                   text);
}

lj_status lj_lr_parse_wsd_style(const char *text, lj_lr_wsd_style *style) {
    static const char *const k[] = {"linear", "cosine", "exponential", "minus_sqrt"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(text, k[i])) {
            *style = (lj_lr_wsd_style)i;
            return LJ_OK;
        }
    return lj_fail(LJ_ERR_ARG, "--lr-wsd-decay-style: '%s' is not one of linear, cosine, exponential, minus_sqrt", text);
}

float lj_adamw_param_decay(const lj_param_info *p, const lj_adamw_config *cfg) {
    int decayed;
    switch (cfg->wd_rule) {
    case LJ_WD_ALL: decayed = 1; break;
    case LJ_WD_MATRICES: decayed = p->kind == LJ_PARAM_MATRIX; break;
    default: {
        const size_t n = strlen(p->name);
        const int bias = n >= 5 && !strcmp(p->name + n - 5, ".bias");
        const int qk_norm = strstr(p->name, ".q_norm.") || strstr(p->name, ".k_norm.");
        decayed = !bias && (p->ndim == 2 || (qk_norm && cfg->wd_qk_norm));
    }
    }
    return decayed ? cfg->weight_decay : 0.0f;
}

int lj_adamw_param_group(const lj_param_info *p, const lj_adamw_config *cfg) {
    return cfg->decoupled_lr && (!strcmp(p->name, "model.embed_tokens.weight") || !strcmp(p->name, "lm_head.weight"));
}

int lj_adamw_lr_groups(const lj_adamw_config *cfg) { return cfg->decoupled_lr ? 2 : 1; }

double lj_lr_deepspeed_at(const lj_lr_deepspeed *s, double lr, int64_t step) {
    const lj_ds_scheduler type = s->type;
    if (type == LJ_DS_SCHEDULER_NONE) return lr;
    const int64_t it = step - 2; /* last_batch_iteration during optimizer step `step` */
    const int64_t warm = s->warmup_num_steps < 2 ? 2 : s->warmup_num_steps;
    const int lin = s->warmup_type == LJ_DS_WARMUP_LINEAR;
    const double warm_gamma = it < 0 ? 0.0 : lin ? (double)it / (double)warm : log((double)it + 1.0) / log((double)warm);
    if (type == LJ_DS_SCHEDULER_WARMUP_COSINE_LR) {
        if (it < 0) return 0.0;
        const double wmin = s->warmup_min_ratio, cmin = s->cos_min_ratio;
        if (it < warm) return lr * (wmin + warm_gamma * (1.0 - wmin));
        const double total = (double)(s->total_num_steps - warm) > 1.0
                                 ? (double)(s->total_num_steps - warm)
                                 : 1.0;
        double progress = (double)(it - warm + 1) / total;
        if (progress > 1.0) progress = 1.0;
        const double ratio = cmin + (1.0 - cmin) * (1.0 + cos(M_PI * progress)) / 2.0;
        return lr * (ratio > 0 ? ratio : 0.0);
    }
    const double min_lr = s->warmup_min_lr;
    const double max_lr = isnan(s->warmup_max_lr) ? lr : s->warmup_max_lr;
    if (it < 0) return min_lr;
    double gamma = 1.0;
    if (it < warm) gamma = warm_gamma;
    else if (type == LJ_DS_SCHEDULER_WARMUP_DECAY_LR) {
        const double span = (double)(s->total_num_steps - warm) > 1.0
                                ? (double)(s->total_num_steps - warm)
                                : 1.0;
        gamma = (double)(s->total_num_steps - it) / span;
        if (gamma < 0) gamma = 0;
    }
    return min_lr + (max_lr - min_lr) * gamma;
}

int lj_adamw_segments(const lj_param_layout *layout, const lj_adamw_config *cfg, lj_adamw_segment **segments) {
    lj_adamw_segment *seg = lj_calloc((size_t)layout->count, sizeof *seg);
    int n = 0;
    for (int i = 0; i < layout->count; i++) {
        const lj_param_info *p = &layout->params[i];
        const float wd = lj_adamw_param_decay(p, cfg);
        const int group = lj_adamw_param_group(p, cfg);
        if (n > 0 && seg[n - 1].weight_decay == wd && seg[n - 1].lr_group == group &&
            seg[n - 1].offset + seg[n - 1].count == p->offset) {
            seg[n - 1].count += p->numel;
        } else {
            seg[n].offset = p->offset;
            seg[n].count = p->numel;
            seg[n].weight_decay = wd;
            seg[n].lr_group = group;
            n++;
        }
    }
    *segments = seg;
    return n;
}

int lj_adamw_segments_slice(const lj_adamw_segment *segments, int num_segments, int64_t begin, int64_t count,
                            lj_adamw_segment **out) {
    lj_adamw_segment *seg = lj_calloc((size_t)num_segments, sizeof *seg);
    int n = 0;
    for (int i = 0; i < num_segments; i++) {
        const int64_t lo = segments[i].offset > begin ? segments[i].offset : begin;
        const int64_t end = segments[i].offset + segments[i].count;
        const int64_t hi = end < begin + count ? end : begin + count;
        if (hi <= lo) continue;
        seg[n].offset = lo - begin;
        seg[n].count = hi - lo;
        seg[n].weight_decay = segments[i].weight_decay;
        seg[n].lr_group = segments[i].lr_group;
        seg[n].master_only = segments[i].master_only;
        n++;
    }
    *out = seg;
    return n;
}

int lj_adamw_segments_master_only(const lj_adamw_segment *segments, int num_segments, const int64_t *offset,
                                  const int64_t *count, int num_ranges, lj_adamw_segment **out) {
    for (int r = 1; r < num_ranges; r++)
        LJ_ASSERT(offset[r] >= offset[r - 1] + count[r - 1], "master-only ranges: not sorted and disjoint at %d", r);
    lj_adamw_segment *seg = lj_calloc((size_t)(num_segments + 2 * num_ranges + 1), sizeof *seg);
    int n = 0;
    for (int i = 0; i < num_segments; i++) {
        const lj_adamw_segment *g = &segments[i];
        const int64_t end = g->offset + g->count;
        int64_t at = g->offset;
        int r = 0;
        while (at < end) {
            while (r < num_ranges && offset[r] + count[r] <= at) r++;
            /* [at, next) is inside range r (master only) or before it (as the segment says) */
            const int inside = r < num_ranges && offset[r] <= at;
            int64_t next = inside ? offset[r] + count[r] : r < num_ranges ? offset[r] : end;
            if (next > end) next = end;
            const int mo = inside || g->master_only;
            if (n > 0 && seg[n - 1].offset + seg[n - 1].count == at && seg[n - 1].weight_decay == g->weight_decay &&
                seg[n - 1].lr_group == g->lr_group && seg[n - 1].master_only == mo) {
                seg[n - 1].count += next - at;
            } else {
                seg[n] = *g;
                seg[n].offset = at;
                seg[n].count = next - at;
                seg[n].master_only = mo;
                n++;
            }
            at = next;
        }
    }
    *out = seg;
    return n;
}

lj_status lj_rampup_check(const lj_batch_rampup *r) {
    const long long s = (long long)r->start, i = (long long)r->increment, n = (long long)r->samples;
    const long long g = (long long)r->global_batch_size;
    if (s <= 0 || i <= 0 || n <= 0)
        return lj_fail(LJ_ERR_ARG, "--rampup-batch-size %lld %lld %lld: the start batch, the increment and the ramp-up "
                                   "samples must be positive", s, i, n);
    if (s >= g)
        return lj_fail(LJ_ERR_ARG, "--rampup-batch-size %lld %lld %lld: the start batch must be below "
                                   "--global-batch-size %lld (the batch it ramps up to; for a constant batch leave "
                                   "--rampup-batch-size out)", s, i, n, g);
    if ((g - s) % i != 0)
        return lj_fail(LJ_ERR_ARG, "--rampup-batch-size %lld %lld %lld: --global-batch-size %lld minus the start batch "
                                   "(%lld) must be a multiple of the increment %lld (Megatron-LM's rule)", s, i, n, g,
                       g - s, i);
    return LJ_OK;
}

int64_t lj_rampup_batch(const lj_batch_rampup *r, int64_t consumed) {
    if (r->start <= 0 || consumed > r->samples) return r->global_batch_size;
    /* Python: rampup_samples_per_increment = ramup_samples / num_increments (a float), then
     * steps = int(consumed_samples / rampup_samples_per_increment) */
    const int64_t increments = (r->global_batch_size - r->start) / r->increment;
    const double per_increment = (double)r->samples / (double)increments;
    const int64_t steps = (int64_t)((double)consumed / per_increment);
    const int64_t batch = r->start + steps * r->increment;
    return batch < r->global_batch_size ? batch : r->global_batch_size;
}

int64_t lj_rampup_consumed(const lj_batch_rampup *r, int64_t iterations) {
    int64_t consumed = 0, it = 0;
    for (; it < iterations && r->start > 0 && consumed <= r->samples; it++) consumed += lj_rampup_batch(r, consumed);
    return consumed + (iterations - it) * r->global_batch_size; /* past the ramp: G each */
}

int64_t lj_rampup_train_iters(const lj_batch_rampup *r, int64_t train_samples) {
    int64_t consumed = 0, iterations = 0;
    while (consumed <= r->samples && consumed <= train_samples) {
        consumed += lj_rampup_batch(r, consumed);
        iterations++;
    }
    if (train_samples > consumed) iterations += (train_samples - consumed) / r->global_batch_size;
    return iterations;
}

/* optim.c: LR schedules and the AdamW step. */
#include "optim/optim.h"

#include <math.h>
#include <string.h>

double lj_lr_at(const lj_lr_schedule *s, int it) {
    if (s->deepspeed.type != LJ_DS_SCHEDULER_NONE) return lj_lr_deepspeed_at(&s->deepspeed, s->lr, it);
    const double n = (double)it * (double)(s->step_size > 0 ? s->step_size : 1);
    const double w = (double)s->warmup_steps, D = (double)s->decay_steps;
    if (w > 0 && n <= w) return s->init_lr + (s->lr - s->init_lr) * n / w;
    if (s->style == LJ_LR_CONSTANT) return s->lr;
    if (n > D) return s->min_lr;
    if (s->style == LJ_LR_INVERSE_SQRT) {
        const double lr = s->lr * sqrt(w > 1 ? w : 1) / sqrt(n > 1 ? n : 1);
        return lr > s->min_lr ? lr : s->min_lr;
    }
    if (D <= w) return s->min_lr;
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
    return s->min_lr + (s->lr - s->min_lr) * f;
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
        if (n > 0 && seg[n - 1].weight_decay == wd && seg[n - 1].offset + seg[n - 1].count == p->offset) {
            seg[n - 1].count += p->numel;
        } else {
            seg[n].offset = p->offset;
            seg[n].count = p->numel;
            seg[n].weight_decay = wd;
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
        n++;
    }
    *out = seg;
    return n;
}

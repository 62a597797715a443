/* optim.c: LR schedules and the AdamW step. */
#include "optim/optim.h"

#include <math.h>
#include <string.h>

double lj_lr_at(const lj_lr_schedule *s, int it) {
    if (s->warmup_iters > 0 && it <= s->warmup_iters) return s->lr * (double)it / (double)s->warmup_iters;
    if (s->style == LJ_LR_CONSTANT) return s->lr;
    if (it > s->decay_iters || s->decay_iters <= s->warmup_iters) return s->min_lr;
    const double r = (double)(it - s->warmup_iters) / (double)(s->decay_iters - s->warmup_iters);
    const double f = s->style == LJ_LR_LINEAR ? 1.0 - r : 0.5 * (1.0 + cos(M_PI * r));
    return s->min_lr + (s->lr - s->min_lr) * f;
}

lj_status lj_lr_parse_style(const char *text, lj_lr_decay_style *style) {
    if (strcmp(text, "constant") == 0) *style = LJ_LR_CONSTANT;
    else if (strcmp(text, "linear") == 0) *style = LJ_LR_LINEAR;
    else if (strcmp(text, "cosine") == 0) *style = LJ_LR_COSINE;
    else return lj_fail(LJ_ERR_ARG, "--lr-decay-style: '%s' is not one of constant, linear, cosine", text);
    return LJ_OK;
}

int lj_adamw_segments(const lj_param_layout *layout, const lj_adamw_config *cfg, lj_adamw_segment **segments) {
    lj_adamw_segment *seg = lj_calloc((size_t)layout->count, sizeof *seg);
    int n = 0;
    for (int i = 0; i < layout->count; i++) {
        const lj_param_info *p = &layout->params[i];
        const float wd = (p->kind == LJ_PARAM_MATRIX || cfg->decay_norms_and_embeddings) ? cfg->weight_decay : 0.0f;
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

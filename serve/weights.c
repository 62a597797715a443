/* weights.c: the residency of a server under --quantization fp8 (serve/weights.h): every
 * parameter but the block linears' at its own compact offset in m->params, the block linears as
 * the linear module's kept FP8 codes, reached through the flat layout's offsets on the way in. */
#include "serve/weights.h"

#include <string.h>

/* A block linear's range of the flat layout (its fused parameters: q|k|v, gate|up). */
typedef struct {
    int64_t begin, end;
    lj_linear_kind kind;
    int layer;
} flat_linear;

typedef struct {
    int64_t *offset;    /* [layout.count]: compact offset in m->params, -1: inside a block linear */
    int *linear_of;     /* [layout.count]: index into lin of the linear a parameter starts, else -1 */
    flat_linear *lin;   /* in layout order */
    int nlin;
    void *stage;        /* [max linear numel] param dtype */
    int64_t stage_numel;
    int64_t compact;    /* elements of m->params */
} serve_fp8;

static const serve_fp8 *state_of(const lj_model *m) { return m->residency_state; }

static void noop_unit(lj_model *m, int unit, int direction) { (void)m, (void)unit, (void)direction; }
static void noop_release(lj_model *m, int unit) { (void)m, (void)unit; }
static lj_grad_mode no_grad_begin(lj_model *m, int unit) {
    (void)m, (void)unit;
    LJ_ASSERT(0, "a served model has no gradients");
    return LJ_GRAD_OVERWRITE;
}
static void noop_grad_end(lj_model *m, int unit) { (void)m, (void)unit; }
static void noop_model(lj_model *m) { (void)m; }

static void *param(const lj_model *m, int index) {
    const serve_fp8 *s = state_of(m);
    if (s->offset[index] >= 0)
        return (char *)m->params + (size_t)s->offset[index] * lj_dtype_size(m->ops->param_dtype);
    const int i = s->linear_of[index];
    LJ_ASSERT(i >= 0, "parameter %s is inside a fused FP8 linear: ask for its first part",
              m->layout.params[index].name);
    return lj_linear_kept_weight(&m->linear, s->lin[i].kind, s->lin[i].layer);
}

static void *grad(const lj_model *m, int index) {
    (void)m, (void)index;
    LJ_ASSERT(0, "a served model has no gradients");
    return NULL;
}

/* Host f32 values [offset, offset + n) of the flat layout: the compact parameters uploaded into
 * place, a block linear's into the stage, cast to FP8 once its last value is there. dst and
 * cast_dst (the flat buffers of the other residencies) are not used: every value goes where this
 * residency keeps it. */
static void upload_shard(const lj_model *m, float *dst, const float *src, int64_t offset, int64_t n, void *cast_dst,
                         int dst_host) {
    (void)dst, (void)cast_dst;
    LJ_ASSERT(!dst_host, "a served model has no host shard");
    const serve_fp8 *s = state_of(m);
    const size_t sp = lj_dtype_size(m->ops->param_dtype);
    const lj_param_layout *lo = &m->layout;
    for (int p = 0; p < lo->count; p++) {
        const lj_param_info *pi = &lo->params[p];
        const int64_t b = pi->offset, e = pi->offset + pi->numel;
        const int64_t a = b > offset ? b : offset, z = e < offset + n ? e : offset + n;
        if (z <= a) continue;
        if (s->offset[p] >= 0) {
            lj_model_upload_as_param(m, (char *)m->params + (size_t)(s->offset[p] + (a - b)) * sp, src + (a - offset),
                                     z - a);
            continue;
        }
        int i = s->nlin - 1; /* the linear holding p: the last that begins at or before it */
        while (i > 0 && s->lin[i].begin > b) i--;
        const flat_linear *l = &s->lin[i];
        lj_model_upload_as_param(m, (char *)s->stage + (size_t)(a - l->begin) * sp, src + (a - offset), z - a);
        if (z == l->end) lj_linear_keep_weight(&m->linear, l->kind, l->layer, s->stage);
    }
}

static void plan(lj_model *m, lj_buffer_walker *w) {
    serve_fp8 *s = m->residency_state;
    s->stage = lj_buffer_take(w, LJ_ARENA_SCRATCH, "serve.fp8_weight_stage",
                              (size_t)s->stage_numel * lj_dtype_size(m->ops->param_dtype));
}

static void destroy(lj_model *m) {
    serve_fp8 *s = m->residency_state;
    if (!s) return;
    free(s->offset);
    free(s->linear_of);
    free(s->lin);
    free(s);
    m->residency_state = NULL;
}

static const lj_residency g_serve_fp8 = {
    .name = "serve-fp8",
    .fetch = noop_unit,
    .release = noop_release,
    .grad_begin = no_grad_begin,
    .grad_end = noop_grad_end,
    .pass_end = noop_model,
    .grads_zeroed = noop_model,
    .param = param,
    .grad = grad,
    .upload_shard = upload_shard,
    .shards_params = 1,
    .plan = plan,
    .destroy = destroy,
};

void lj_serve_fp8_weights_attach(lj_model *m) {
    LJ_ASSERT(!m->residency && !m->opt.training, "FP8 serving weights: a replicated inference model");
    LJ_ASSERT(!strcmp(m->linear.recipe->name, "fp8-w8a8"), "FP8 serving weights need the fp8-w8a8 recipe, not %s",
              m->linear.recipe->name);
    const lj_param_layout *lo = &m->layout;
    serve_fp8 *s = lj_calloc(1, sizeof *s);
    s->offset = lj_malloc((size_t)lo->count * sizeof(int64_t));
    s->linear_of = lj_malloc((size_t)lo->count * sizeof(int));
    s->lin = lj_calloc((size_t)m->spec.L * 4, sizeof(flat_linear));
    for (int p = 0; p < lo->count; p++) s->offset[p] = 0, s->linear_of[p] = -1;
    for (int l = 0; l < m->spec.L; l++) {
        for (int k = 0; k < 4; k++) {
            const lj_linear_kind kind = (lj_linear_kind)k;
            const int first = lj_linear_param(lo, kind, l);
            const int64_t numel = (int64_t)m->linear.in_features[k] * m->linear.out_features[k];
            flat_linear *fl = &s->lin[s->nlin];
            *fl = (flat_linear){lo->params[first].offset, lo->params[first].offset + numel, kind, l};
            s->linear_of[first] = s->nlin++;
            for (int p = first; p < lo->count && lo->params[p].offset < fl->end; p++) s->offset[p] = -1;
            if (numel > s->stage_numel) s->stage_numel = numel;
        }
    }
    /* the ranges were found layer by layer in layout order (q|k|v, o, gate|up, down) */
    for (int p = 0; p < lo->count; p++) {
        if (s->offset[p] < 0) continue;
        s->offset[p] = s->compact;
        s->compact += lo->params[p].numel;
    }
    m->residency = &g_serve_fp8;
    m->residency_state = s;
    m->shard_begin = 0;
    m->shard_numel = m->padded_numel = m->grad_numel = s->compact;
}

size_t lj_serve_weights_bytes(const lj_model *m) {
    const size_t flat = (size_t)m->padded_numel * lj_dtype_size(m->ops->param_dtype);
    return flat + (size_t)lj_linear_kept_bytes(&m->linear);
}

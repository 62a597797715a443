/* vision.c: the Qwen3-VL vision tower's forward and backward over the op table, its buffers, and
 * the host-side tables of the tower and of the text model's MRoPE. Equations: HF transformers
 * modeling_qwen3_vl.py (Qwen3VLVisionModel, Qwen3VLVisionBlock, Qwen3VLVisionPatchMerger,
 * Qwen3VLTextRotaryEmbedding, Qwen3VLModel.get_rope_index); docs/qwen3-vl-model.md. */
#include "model/vision.h"

#include <math.h>
#include <string.h>

lj_vision_spec lj_vision_spec_of(const lj_vision_config *v) {
    lj_vision_spec s;
    memset(&s, 0, sizeof s);
    s.V = v->hidden_size;
    s.I = v->intermediate_size;
    s.heads = v->num_heads;
    s.hd = v->hidden_size / v->num_heads;
    s.P = lj_vision_patch_dim(v);
    s.m = v->spatial_merge_size;
    s.m2 = s.m * s.m;
    s.M = s.m2 * s.V;
    s.O = v->out_hidden_size;
    s.depth = v->depth;
    s.num_deepstack = v->num_deepstack;
    s.gelu_tanh = v->gelu_tanh;
    s.grid = (int)lround(sqrt((double)v->num_position_embeddings));
    s.eps = 1e-6f;
    return s;
}

/* ---- buffers ------------------------------------------------------------------------ */

/* Declares one buffer; while binding, points `field` at it. */
#define TAKE(field, arena, name, bytes)                              \
    do {                                                             \
        void *p_ = lj_buffer_take(w, (arena), (name), (bytes));      \
        if (w->bind) (field) = p_;                                   \
    } while (0)

/* The recipe's buffers under the tower's names: a walker that prefixes "vision." to each name
 * (the recipe names its own "fp8.*") and hands the buffer to the plan's. */
typedef struct {
    lj_buffer_walker base; /* first: the recipe's plan entry gets &base */
    lj_buffer_walker *plan;
} vision_walker;

static void *vision_take(lj_buffer_walker *bw, lj_arena arena, const char *name, size_t bytes) {
    vision_walker *v = (vision_walker *)bw;
    char full[48];
    snprintf(full, sizeof full, "vision.%s", name);
    return lj_buffer_take(v->plan, arena, full, bytes);
}

/* While sizing, the recipe plans on a copy (its pointers stay as they are: this walk may follow a
 * binding one); while binding, on the tower's own context, whose FP8 state then starts fresh
 * (scales 1, histories 0), as the decoder's does at lj_plan_allocate. */
static void plan_linears(lj_vision *vm, lj_buffer_walker *w) {
    vision_walker v = {{vision_take, w->bind}, w};
    lj_linear_recipe_ctx sizing = vm->linear;
    lj_linear_recipe_ctx *c = w->bind ? &vm->linear : &sizing;
    lj_linear_plan(c, vm->max_patches, &v.base);
    if (w->bind) lj_linear_reset(c);
}

/* Block i's saved tensors (Np = max_patches rows, act dtype unless said): ln1, attn, res_mid, ln2
 * [Np, V]; qkv [Np, 3V]; fc1, gelu [Np, I]; the LayerNorms' mean and rstd [Np] f32; the attention's
 * lse [heads, Np] f32. Its own, "vision.blocks.<i>.*" among the activations; or, i = -1, the
 * blocks' one shared set under recompute, "vision.recompute.*" in the scratch arena. */
static void plan_block(lj_vision *vm, lj_buffer_walker *w, lj_vision_block_acts *a, int i) {
    const lj_vision_spec *s = &vm->spec;
    const size_t act = lj_dtype_size(vm->ops->act_dtype), Np = (size_t)vm->max_patches;
    const lj_arena arena = i < 0 ? LJ_ARENA_SCRATCH : LJ_ARENA_ACTIVATIONS;
    char name[48];
#define BLOCK(field, bytes, what)                                                    \
    do {                                                                             \
        if (i < 0) snprintf(name, sizeof name, "vision.recompute.%s", what);         \
        else snprintf(name, sizeof name, "vision.blocks.%d.%s", i, what);            \
        TAKE(a->field, arena, name, (bytes));                                        \
    } while (0)
    BLOCK(ln1, Np * s->V * act, "ln1");
    BLOCK(qkv, Np * 3 * s->V * act, "qkv");
    BLOCK(attn, Np * s->V * act, "attn");
    BLOCK(res_mid, Np * s->V * act, "res_mid");
    BLOCK(ln2, Np * s->V * act, "ln2");
    BLOCK(h1, Np * s->I * act, "fc1");
    BLOCK(act, Np * s->I * act, "gelu");
    BLOCK(ln1_mean, Np * sizeof(float), "ln1_mean");
    BLOCK(ln1_rstd, Np * sizeof(float), "ln1_rstd");
    BLOCK(ln2_mean, Np * sizeof(float), "ln2_mean");
    BLOCK(ln2_rstd, Np * sizeof(float), "ln2_rstd");
    BLOCK(lse, (size_t)s->heads * Np * sizeof(float), "lse");
#undef BLOCK
}

void lj_vision_plan(lj_vision *vm, lj_buffer_walker *w) {
    const lj_vision_spec *s = &vm->spec;
    const lj_ops *ops = vm->ops;
    const size_t act = lj_dtype_size(ops->act_dtype), Np = (size_t)vm->max_patches, Nt = Np / s->m2;
    const size_t P = (size_t)vm->layout.total;
    char name[48];
    /* parameters and, training, what the optimizer steps: master weights (the parameters on an f32
       backend), gradients, moments */
    TAKE(vm->params, LJ_ARENA_PARAMS, "vision.params", P * lj_dtype_size(ops->param_dtype));
    if (vm->training) {
        if (ops->param_dtype == LJ_DTYPE_F32) {
            if (w->bind) vm->master = vm->params;
        } else {
            TAKE(vm->master, LJ_ARENA_MASTER, "vision.master", P * 4);
        }
        TAKE(vm->grads, LJ_ARENA_GRADS, "vision.grads", P * lj_dtype_size(ops->grad_dtype));
        TAKE(vm->adam_m, LJ_ARENA_OPTIMIZER, "vision.adam_m", P * 4);
        TAKE(vm->adam_v, LJ_ARENA_OPTIMIZER, "vision.adam_v", P * 4);
    }
    /* the batch: patches, segments, RoPE rows, position-grid interpolation */
    TAKE(vm->pixels, LJ_ARENA_ACTIVATIONS, "vision.pixels", Np * s->P * act);
    TAKE(vm->cu_seqlens, LJ_ARENA_ACTIVATIONS, "vision.cu_seqlens", (Np + 1) * sizeof(int32_t));
    TAKE(vm->row_ids, LJ_ARENA_ACTIVATIONS, "vision.row_ids", Np * sizeof(int32_t));
    TAKE(vm->rope_cos, LJ_ARENA_ACTIVATIONS, "vision.rope_cos", Np * (s->hd / 2) * sizeof(float));
    TAKE(vm->rope_sin, LJ_ARENA_ACTIVATIONS, "vision.rope_sin", Np * (s->hd / 2) * sizeof(float));
    TAKE(vm->pos_idx, LJ_ARENA_ACTIVATIONS, "vision.pos_idx", Np * 4 * sizeof(int32_t));
    TAKE(vm->pos_w, LJ_ARENA_ACTIVATIONS, "vision.pos_w", Np * 4 * sizeof(float));
    /* activations: the residual stream (the blocks' inputs, kept under either policy), the
       blocks' saved tensors (one set per block, or under recompute one shared set), each
       merger's */
    TAKE(vm->pos_embeds, LJ_ARENA_ACTIVATIONS, "vision.pos_embeds", Np * s->V * act);
    for (int i = 0; i <= s->depth; i++) {
        snprintf(name, sizeof name, "vision.residual.%d", i);
        TAKE(vm->residual[i], LJ_ARENA_ACTIVATIONS, name, Np * s->V * act);
    }
    for (int i = 0; i < s->depth; i++) {
        if (vm->recompute && i > 0) {
            if (w->bind) vm->blocks[i] = vm->blocks[0];
            continue;
        }
        plan_block(vm, w, &vm->blocks[i], vm->recompute ? -1 : i);
    }
#define MERGER(field, bytes, what)                                      \
    do {                                                                \
        snprintf(name, sizeof name, "vision.mergers.%d.%s", j, what);   \
        TAKE(a->field, LJ_ARENA_ACTIVATIONS, name, (bytes));            \
    } while (0)
    for (int j = 0; j <= s->num_deepstack; j++) {
        lj_vision_merger_acts *a = &vm->mergers[j];
        MERGER(ln, Nt * s->M * act, "ln");
        MERGER(h, Nt * s->M * act, "fc1");
        MERGER(act, Nt * s->M * act, "gelu");
        MERGER(out, Nt * s->O * act, "out");
        MERGER(mean, Np * sizeof(float), "mean");
        MERGER(rstd, Np * sizeof(float), "rstd");
    }
#undef MERGER
    /* the backward's scratch and the workspaces */
    if (vm->training) {
        const size_t big = Np * (size_t)(s->I > 3 * s->V ? s->I : 3 * s->V);
        TAKE(vm->d_res, LJ_ARENA_SCRATCH, "vision.d_res", Np * s->V * act);
        TAKE(vm->d_ln, LJ_ARENA_SCRATCH, "vision.d_ln", Np * s->V * act);
        TAKE(vm->d_qkv, LJ_ARENA_SCRATCH, "vision.d_qkv", Np * 3 * s->V * act);
        TAKE(vm->d_attn, LJ_ARENA_SCRATCH, "vision.d_attn", Np * s->V * act);
        TAKE(vm->d_h, LJ_ARENA_SCRATCH, "vision.d_h", big * act);
        TAKE(vm->d_m1, LJ_ARENA_SCRATCH, "vision.d_m1", Nt * s->M * act);
        TAKE(vm->d_m2, LJ_ARENA_SCRATCH, "vision.d_m2", Nt * s->M * act);
        int widest = s->M > s->I ? s->M : s->I;
        if (3 * s->V > widest) widest = 3 * s->V;
        if (s->O > widest) widest = s->O;
        TAKE(vm->ws_bias, LJ_ARENA_WORKSPACE, "vision.bias_backward", ops->bias_backward_workspace_bytes((int)Np, widest));
        TAKE(vm->ws_norm, LJ_ARENA_WORKSPACE, "vision.layernorm_backward",
             ops->layernorm_backward_workspace_bytes((int)Np, s->M));
        TAKE(vm->ws_grad_norm, LJ_ARENA_WORKSPACE, "vision.global_norm",
             ops->global_norm_workspace_bytes((int64_t)P));
    }
    TAKE(vm->ws_attention, LJ_ARENA_WORKSPACE, "vision.attention_varlen",
         ops->attention_varlen_workspace_bytes((int)Np, s->heads, s->heads, s->hd));
    /* the blocks' linear recipe: under FP8 its state, the casts' scratch and the FP8 GEMM's
       workspace for max_patches rows (nothing under "bf16") */
    plan_linears(vm, w);
}
#undef TAKE

lj_status lj_vision_init(lj_vision *vm, const lj_ops *ops, const lj_vision_config *cfg, int max_patches,
                         int max_images, int training, int recompute, lj_linear_recipe_kind recipe,
                         const lj_linear_fp8_options *fp8) {
    memset(vm, 0, sizeof *vm);
    if (max_patches <= 0 || max_images <= 0)
        return lj_fail(LJ_ERR_ARG, "vision tower: max_patches %d and max_images %d must be positive", max_patches,
                       max_images);
    if (recompute != 0 && recompute != 1)
        return lj_fail(LJ_ERR_ARG, "vision tower: recompute %d is not 0 (none) or 1 (full)", recompute);
    /* a table that computes needs the vision ops; a description for planning (no device) has only
       the workspace sizes */
    if (ops->alloc && (!ops->layernorm_forward || !ops->attention_varlen_forward))
        return lj_fail(LJ_ERR_UNSUPPORTED, "vision tower: the %s backend has no vision ops yet", ops->name);
    if (!ops->attention_varlen_workspace_bytes || !ops->layernorm_backward_workspace_bytes ||
        !ops->bias_backward_workspace_bytes || !ops->global_norm_workspace_bytes)
        return lj_fail(LJ_ERR_UNSUPPORTED, "vision tower: the %s backend does not describe the vision ops' workspaces",
                       ops->name);
    vm->ops = ops;
    vm->cfg = *cfg;
    vm->spec = lj_vision_spec_of(cfg);
    vm->max_patches = max_patches;
    vm->max_images = max_images;
    vm->training = training;
    vm->recompute = recompute;
    lj_vision_layout_init(&vm->layout, cfg);
    vm->residual = lj_calloc((size_t)cfg->depth + 1, sizeof(void *));
    vm->blocks = lj_calloc((size_t)cfg->depth, sizeof(lj_vision_block_acts));
    vm->mergers = lj_calloc((size_t)cfg->num_deepstack + 1, sizeof(lj_vision_merger_acts));
    /* the blocks' linears as the kinds of the recipe: qkv QKV, proj O, fc1 GATE_UP, fc2 DOWN (no
       lm_head); every block in the recipe (the decoder's bf16 layers and kept FP8 weights are
       its own settings) */
    const int V = vm->spec.V, I = vm->spec.I;
    const int in[LJ_LINEAR_KINDS] = {V, V, V, I, 0}, out[LJ_LINEAR_KINDS] = {3 * V, V, I, V, 0};
    lj_linear_fp8_options o = fp8 ? *fp8 : lj_linear_fp8_defaults();
    o.bf16_layers_start = o.bf16_layers_end = 0;
    o.param_gather = 0;
    lj_linear_init_features(&vm->linear, ops, cfg->depth, in, out, recipe, &o, training, 1);
    static const char *const kinds[4] = {"attn.qkv", "attn.proj", "mlp.linear_fc1", "mlp.linear_fc2"};
    vm->linear.unit_name = "visual.blocks"; /* HF's names: model.visual.blocks.N.attn.qkv, ... */
    vm->linear.kind_names = kinds;
    return LJ_OK;
}

void lj_vision_free(lj_vision *vm) {
    lj_vision_layout_free(&vm->layout);
    free(vm->residual);
    free(vm->blocks);
    free(vm->mergers);
    memset(vm, 0, sizeof *vm);
}

void lj_vision_set_weights(lj_vision *vm, const float *params) {
    const lj_ops *ops = vm->ops;
    const int64_t n = vm->layout.total;
    LJ_ASSERT(vm->params, "vision weights: the tower's plan is not allocated");
    if (ops->param_dtype == LJ_DTYPE_F32) {
        ops->upload(vm->params, params, (size_t)n * sizeof(float));
        return;
    }
    LJ_ASSERT(ops->param_dtype == LJ_DTYPE_BF16, "vision weights: param dtype %s", lj_dtype_name(ops->param_dtype));
    if (vm->master) ops->upload(vm->master, params, (size_t)n * sizeof(float));
    /* rounded on the host (the device cast's rule), in chunks */
    enum { CHUNK = 1 << 22 };
    uint16_t *stage = lj_malloc((size_t)(n < CHUNK ? (n > 0 ? n : 1) : CHUNK) * sizeof(uint16_t));
    for (int64_t base = 0; base < n; base += CHUNK) {
        const int64_t k = n - base < CHUNK ? n - base : CHUNK;
        for (int64_t i = 0; i < k; i++) stage[i] = lj_f32_to_bf16(params[base + i]);
        ops->upload((uint16_t *)vm->params + base, stage, (size_t)k * sizeof(uint16_t));
    }
    ops->synchronize();
    free(stage);
}

void lj_vision_get_weights(const lj_vision *vm, float *out) {
    const lj_ops *ops = vm->ops;
    const void *src = ops->param_dtype == LJ_DTYPE_F32 ? vm->params : (const void *)vm->master;
    LJ_ASSERT(src, "vision weights: a bf16 tower without master weights (an inference tower)");
    ops->download(out, src, (size_t)vm->layout.total * sizeof(float));
}

void lj_vision_init_weights(lj_vision *vm, uint64_t seed) {
    const lj_vision_layout *lo = &vm->layout;
    float *w = lj_malloc((size_t)lo->total * sizeof(float));
    lj_rng rng;
    lj_rng_seed(&rng, seed ^ 0x5649534f4eull);
    const double sd = vm->cfg.initializer_range;
    for (int i = 0; i < lo->count; i++) {
        const lj_param_info *p = &lo->params[i];
        for (int64_t k = 0; k < p->numel; k++)
            w[p->offset + k] = p->kind == LJ_PARAM_NORM   ? 1.0f
                               : p->kind == LJ_PARAM_BIAS ? 0.0f
                                                          : (float)(sd * lj_rng_normal(&rng));
    }
    lj_vision_set_weights(vm, w);
    free(w);
}

void lj_vision_zero_grads(lj_vision *vm) {
    vm->ops->memset_zero(vm->grads, (size_t)vm->layout.total * lj_dtype_size(vm->ops->grad_dtype));
}

/* ---- host tables ------------------------------------------------------------------ */

/* torch.linspace(0, end, steps)[i] in fp32: the first half from the start, the rest from the end. */
static float linspace_f32(float end, int steps, int i) {
    if (steps == 1) return 0.0f;
    const float step = end / (float)(steps - 1);
    return i < steps / 2 ? step * (float)i : end - step * (float)(steps - 1 - i);
}

/* The patches' coordinates in patch order (t, bh, bw, mh, mw): row r, column c of the frame and the
 * frame's grid h, w (in patches), four host arrays [Np] (free the first). */
static int *patch_coords(const lj_vision_spec *s, const int32_t *grid, int num_images, int **r, int **c, int **gh,
                         int **gw) {
    size_t np = 0;
    for (int i = 0; i < num_images; i++) np += (size_t)grid[i * 3] * grid[i * 3 + 1] * grid[i * 3 + 2];
    int *buf = lj_malloc((np > 0 ? np : 1) * 4 * sizeof(int));
    *r = buf;
    *c = buf + np;
    *gh = buf + 2 * np;
    *gw = buf + 3 * np;
    size_t n = 0;
    for (int i = 0; i < num_images; i++) {
        const int gt = grid[i * 3], h = grid[i * 3 + 1], w = grid[i * 3 + 2];
        for (int t = 0; t < gt; t++)
            for (int bh = 0; bh < h / s->m; bh++)
                for (int bw = 0; bw < w / s->m; bw++)
                    for (int mh = 0; mh < s->m; mh++)
                        for (int mw = 0; mw < s->m; mw++, n++) {
                            (*r)[n] = bh * s->m + mh;
                            (*c)[n] = bw * s->m + mw;
                            (*gh)[n] = h;
                            (*gw)[n] = w;
                        }
    }
    return buf;
}

static size_t num_patches_of(const int32_t *grid, int num_images) {
    size_t np = 0;
    for (int i = 0; i < num_images; i++) np += (size_t)grid[i * 3] * grid[i * 3 + 1] * grid[i * 3 + 2];
    return np;
}

void lj_vision_pos_interp(const lj_vision_spec *s, const int32_t *grid_thw, int num_images, int32_t *idx, float *w) {
    const int G = s->grid;
    const float end = (float)(G - 1);
    int *r, *c, *gh, *gw;
    int *buf = patch_coords(s, grid_thw, num_images, &r, &c, &gh, &gw);
    const size_t np = num_patches_of(grid_thw, num_images);
    for (size_t n = 0; n < np; n++) {
        const float hv = linspace_f32(end, gh[n], r[n]), wv = linspace_f32(end, gw[n], c[n]);
        const int h0 = (int)hv, w0 = (int)wv;
        const int h1 = h0 + 1 < G ? h0 + 1 : G - 1, w1 = w0 + 1 < G ? w0 + 1 : G - 1;
        const float dh = hv - (float)h0, dw = wv - (float)w0;
        int32_t *ix = idx + n * 4;
        float *wx = w + n * 4;
        ix[0] = h0 * G + w0;
        ix[1] = h0 * G + w1;
        ix[2] = h1 * G + w0;
        ix[3] = h1 * G + w1;
        wx[0] = (1.0f - dh) * (1.0f - dw);
        wx[1] = (1.0f - dh) * dw;
        wx[2] = dh * (1.0f - dw);
        wx[3] = dh * dw;
    }
    free(buf);
}

void lj_vision_rope_rows(const lj_vision_spec *s, const int32_t *grid_thw, int num_images, float *cos_out,
                         float *sin_out) {
    const int half = s->hd / 2, q = s->hd / 4;
    float *inv = lj_malloc((size_t)q * sizeof(float));
    for (int j = 0; j < q; j++) inv[j] = 1.0f / powf(10000.0f, (float)(2 * j) / (float)half);
    int *r, *c, *gh, *gw;
    int *buf = patch_coords(s, grid_thw, num_images, &r, &c, &gh, &gw);
    const size_t np = num_patches_of(grid_thw, num_images);
    for (size_t n = 0; n < np; n++) {
        float *co = cos_out + n * half, *si = sin_out + n * half;
        for (int i = 0; i < half; i++) {
            const double a = (double)(i < q ? r[n] : c[n]) * (double)inv[i < q ? i : i - q];
            co[i] = (float)cos(a);
            si[i] = (float)sin(a);
        }
    }
    free(buf);
    free(inv);
}

int lj_vl_rope_index(const lj_vl_config *c, const int32_t *ids, int T, const int32_t *grid_thw, int num_images,
                     int32_t *pos3) {
    const int m = c->vision.spatial_merge_size, pad = c->image_token_id;
    int st = 0, next = 0, k = 0;
    while (st < T) {
        int ed = st;
        while (ed < T && ids[ed] != pad) ed++;
        for (int i = st; i < ed; i++) pos3[i] = pos3[T + i] = pos3[2 * T + i] = next + i - st;
        if (ed == T) break;
        if (k >= num_images) return -1;
        const int gt = grid_thw[k * 3], gh = grid_thw[k * 3 + 1] / m, gw = grid_thw[k * 3 + 2] / m;
        k++;
        const int base = next + ed - st, ntok = gt * gh * gw;
        if (ed + ntok > T) return -1;
        for (int j = 0; j < ntok; j++) {
            if (ids[ed + j] != pad) return -1;
            const int tt = j / (gh * gw), r = j / gw % gh, col = j % gw;
            pos3[ed + j] = base + tt;
            pos3[T + ed + j] = base + r;
            pos3[2 * T + ed + j] = base + col;
        }
        int mx = base + (gt - 1);
        if (base + gh - 1 > mx) mx = base + gh - 1;
        if (base + gw - 1 > mx) mx = base + gw - 1;
        next = mx + 1;
        st = ed + ntok;
    }
    return k;
}

void lj_vl_mrope_rows(const lj_vl_config *c, const int32_t *pos3, int n, float *cos_out, float *sin_out) {
    const int hd = c->text.head_dim, half = hd / 2;
    const float theta = (float)c->text.rope_theta;
    for (int j = 0; j < half; j++) {
        const float f = 1.0f / powf(theta, (float)(2 * j) / (float)hd);
        const int axis = (j % 3 == 1 && j < 3 * c->mrope_section[1]) ? 1
                         : (j % 3 == 2 && j < 3 * c->mrope_section[2]) ? 2
                                                                       : 0;
        for (int t = 0; t < n; t++) {
            const float a = (float)pos3[(size_t)axis * n + t] * f;
            cos_out[(size_t)t * half + j] = (float)cos((double)a);
            sin_out[(size_t)t * half + j] = (float)sin((double)a);
        }
    }
}

lj_status lj_vision_set_images(lj_vision *vm, const float *pixel_values, const int32_t *grid_thw, int num_images) {
    const lj_vision_spec *s = &vm->spec;
    int64_t np = 0, frames = 0;
    for (int i = 0; i < num_images; i++) {
        const int t = grid_thw[i * 3], h = grid_thw[i * 3 + 1], w = grid_thw[i * 3 + 2];
        if (t <= 0 || h <= 0 || w <= 0 || h % s->m || w % s->m)
            return lj_fail(LJ_ERR_ARG,
                           "image %d: image_grid_thw (%d, %d, %d) must be positive with h and w multiples of the "
                           "spatial merge size %d",
                           i, t, h, w, s->m);
        np += (int64_t)t * h * w;
        frames += t;
    }
    if (np > vm->max_patches || frames > vm->max_images)
        return lj_fail(LJ_ERR_ARG, "images: %lld patches in %lld frames; the tower holds %d patches and %d frames",
                       (long long)np, (long long)frames, vm->max_patches, vm->max_images);
    const int Np = (int)np, half = s->hd / 2;
    vm->num_patches = Np;
    vm->num_tokens = Np / s->m2;
    int32_t *cu = lj_malloc(((size_t)frames + 1) * sizeof(int32_t));
    int32_t *ids = lj_malloc((size_t)(Np > 0 ? Np : 1) * sizeof(int32_t));
    float *cs = lj_malloc((size_t)(Np > 0 ? Np : 1) * half * 2 * sizeof(float));
    int32_t *pi = lj_malloc((size_t)(Np > 0 ? Np : 1) * 4 * sizeof(int32_t));
    float *pw = lj_malloc((size_t)(Np > 0 ? Np : 1) * 4 * sizeof(float));
    int seg = 0;
    cu[0] = 0;
    vm->max_seqlen = 0;
    for (int i = 0; i < num_images; i++)
        for (int t = 0; t < grid_thw[i * 3]; t++) {
            const int len = grid_thw[i * 3 + 1] * grid_thw[i * 3 + 2];
            cu[seg + 1] = cu[seg] + len;
            seg++;
            if (len > vm->max_seqlen) vm->max_seqlen = len;
        }
    vm->num_segments = seg;
    for (int n = 0; n < Np; n++) ids[n] = n;
    lj_vision_rope_rows(s, grid_thw, num_images, cs, cs + (size_t)Np * half);
    lj_vision_pos_interp(s, grid_thw, num_images, pi, pw);
    const lj_ops *ops = vm->ops;
    ops->upload(vm->cu_seqlens, cu, ((size_t)seg + 1) * sizeof(int32_t));
    ops->upload(vm->row_ids, ids, (size_t)Np * sizeof(int32_t));
    ops->upload(vm->rope_cos, cs, (size_t)Np * half * sizeof(float));
    ops->upload(vm->rope_sin, cs + (size_t)Np * half, (size_t)Np * half * sizeof(float));
    ops->upload(vm->pos_idx, pi, (size_t)Np * 4 * sizeof(int32_t));
    ops->upload(vm->pos_w, pw, (size_t)Np * 4 * sizeof(float));
    if (ops->act_dtype == LJ_DTYPE_F32) {
        ops->upload(vm->pixels, pixel_values, (size_t)Np * s->P * sizeof(float));
    } else { /* HF casts pixel_values to the model dtype before the patch embedding */
        uint16_t *bf = lj_malloc((size_t)(Np > 0 ? Np : 1) * s->P * sizeof(uint16_t));
        const int64_t nv = (int64_t)Np * s->P;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < nv; i++) bf[i] = lj_f32_to_bf16(pixel_values[i]);
        ops->upload(vm->pixels, bf, (size_t)Np * s->P * sizeof(uint16_t));
        ops->synchronize();
        free(bf);
    }
    ops->synchronize();
    free(cu);
    free(ids);
    free(cs);
    free(pi);
    free(pw);
    return LJ_OK;
}

/* ---- forward ---------------------------------------------------------------------- */

static void *param(const lj_vision *vm, int index) {
    return (unsigned char *)vm->params + (size_t)vm->layout.params[index].offset * lj_dtype_size(vm->ops->param_dtype);
}

static void *grad(const lj_vision *vm, int index) {
    return (unsigned char *)vm->grads + (size_t)vm->layout.params[index].offset * lj_dtype_size(vm->ops->grad_dtype);
}

/* out[N, OC] = x[N, IC] W^T + b (HF nn.Linear with bias). */
static void linear(const lj_vision *vm, void *out, const void *x, int w_index, int N, int IC, int OC) {
    vm->ops->matmul_forward(out, x, param(vm, w_index), N, IC, OC);
    vm->ops->bias_add(out, param(vm, w_index + 1), N, OC);
}

/* Its backward: dx = dout W (dx_mode; skipped when dx is NULL), dW += dout^T x, db += colsum(dout). */
static void linear_backward(const lj_vision *vm, void *dx, const void *dout, const void *x, int w_index, int N, int IC,
                            int OC, lj_grad_mode dx_mode) {
    vm->ops->matmul_backward(dx, grad(vm, w_index), dout, x, param(vm, w_index), N, IC, OC, dx_mode,
                             LJ_GRAD_ACCUMULATE);
    vm->ops->bias_backward(grad(vm, w_index + 1), dout, N, OC, LJ_GRAD_ACCUMULATE, vm->ws_bias);
}

/* Block i's linear of kind k (its weight at w_index, its bias after it) through the tower's
 * recipe: out[N, out_k] = x[N, in_k] W^T (bf16 or FP8), then + b in the act dtype. */
static void block_linear(const lj_vision *vm, lj_linear_kind k, int i, void *out, const void *x, int w_index, int N) {
    const lj_linear l = lj_linear_of(&vm->linear, k, i, param(vm, w_index), NULL);
    lj_linear_forward(&vm->linear, &l, out, x, N);
    vm->ops->bias_add(out, param(vm, w_index + 1), N, l.out_features);
}

/* Its backward: dx = dout W (overwritten), dW += dout^T x through the recipe, db += colsum(dout). */
static void block_linear_backward(const lj_vision *vm, lj_linear_kind k, int i, void *dx, const void *dout,
                                  const void *x, int w_index, int N) {
    const lj_linear l = lj_linear_of(&vm->linear, k, i, param(vm, w_index), grad(vm, w_index));
    lj_linear_backward(&vm->linear, &l, dx, dout, x, N, LJ_GRAD_ACCUMULATE);
    vm->ops->bias_backward(grad(vm, w_index + 1), dout, N, l.out_features, LJ_GRAD_ACCUMULATE, vm->ws_bias);
}

/* Merger j on x [Np, V]: the final one (j = 0) normalizes each patch over V and then reads m*m
 * consecutive patches as one row of M; a DeepStack merger reads the rows of M first and
 * normalizes over M. Then fc1, exact GELU, fc2. */
static void merger_forward(lj_vision *vm, int j, const void *x) {
    const lj_vision_spec *s = &vm->spec;
    const lj_ops *ops = vm->ops;
    lj_vision_merger_acts *a = &vm->mergers[j];
    const int Np = vm->num_patches, Nt = vm->num_tokens;
    const int nw = lj_vision_merger_param(&vm->layout, j, LJ_VM_NORM_W);
    if (j == 0) ops->layernorm_forward(a->ln, a->mean, a->rstd, x, param(vm, nw), param(vm, nw + 1), Np, s->V, s->eps);
    else ops->layernorm_forward(a->ln, a->mean, a->rstd, x, param(vm, nw), param(vm, nw + 1), Nt, s->M, s->eps);
    linear(vm, a->h, a->ln, lj_vision_merger_param(&vm->layout, j, LJ_VM_FC1_W), Nt, s->M, s->M);
    ops->gelu_forward(a->act, a->h, (int64_t)Nt * s->M, 0);
    linear(vm, a->out, a->act, lj_vision_merger_param(&vm->layout, j, LJ_VM_FC2_W), Nt, s->M, s->O);
}

/* Block i's saved tensors from its input x = residual[i]: everything up to the MLP's GELU, the
 * attention's projection written to proj [Np, V] (act dtype) on the way. */
static void block_saved_forward(lj_vision *vm, int i, void *proj) {
    const lj_vision_spec *s = &vm->spec;
    const lj_ops *ops = vm->ops;
    lj_vision_block_acts *a = &vm->blocks[i];
    const int Np = vm->num_patches;
    const int p0 = lj_vision_block_param(&vm->layout, i, 0);
    const void *x = vm->residual[i];
    /* x + proj(attention(rope(qkv(LN1(x))))) */
    ops->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, param(vm, p0 + LJ_VP_LN1_W), param(vm, p0 + LJ_VP_LN1_B),
                           Np, s->V, s->eps);
    block_linear(vm, LJ_LINEAR_QKV, i, a->qkv, a->ln1, p0 + LJ_VP_QKV_W, Np);
    ops->rope_forward_pos(a->qkv, vm->rope_cos, vm->rope_sin, vm->row_ids, 1, Np, s->heads, s->heads, s->hd);
    ops->attention_varlen_forward(a->attn, a->lse, a->qkv, vm->cu_seqlens, vm->num_segments, vm->max_seqlen, Np,
                                  s->heads, s->heads, s->hd, 0, vm->ws_attention);
    block_linear(vm, LJ_LINEAR_O, i, proj, a->attn, p0 + LJ_VP_PROJ_W, Np);
    ops->add(a->res_mid, x, proj, (int64_t)Np * s->V);
    /* LN2 and the MLP's first half */
    ops->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res_mid, param(vm, p0 + LJ_VP_LN2_W),
                           param(vm, p0 + LJ_VP_LN2_B), Np, s->V, s->eps);
    block_linear(vm, LJ_LINEAR_GATE_UP, i, a->h1, a->ln2, p0 + LJ_VP_FC1_W, Np);
    ops->gelu_forward(a->act, a->h1, (int64_t)Np * s->I, s->gelu_tanh);
}

/* residual[i + 1] = res_mid + fc2(gelu_tanh(fc1(LN2(res_mid)))), res_mid = x + proj(...). */
static void block_forward(lj_vision *vm, int i) {
    const lj_vision_spec *s = &vm->spec;
    lj_vision_block_acts *a = &vm->blocks[i];
    const int Np = vm->num_patches;
    void *y = vm->residual[i + 1];
    block_saved_forward(vm, i, y); /* y as the projection's scratch until the MLP writes it */
    block_linear(vm, LJ_LINEAR_DOWN, i, y, a->act, lj_vision_block_param(&vm->layout, i, 0) + LJ_VP_FC2_W, Np);
    vm->ops->add(y, a->res_mid, y, (int64_t)Np * s->V);
}

/* Recompute: block i's saved tensors again, into the shared buffers, right before its backward,
 * from its kept input: the same ops on the same values, so the same bits as its forward. Its
 * output is not written again (residual[i + 1] holds it; the projection goes to d_attn, unused
 * until the block's backward writes it). The FP8 casts take this pass's scales and record no
 * amax, as a forward-only pass does: the forward recorded them (delayed scaling rolls its
 * history only at pass_begin; a current-scaling cast computes its amax and scale again, the
 * same values). */
static void block_replay(lj_vision *vm, int i) {
    lj_linear_fp8_state *f = &vm->linear.fp8;
    const int recording = f->recording;
    f->recording = 0;
    block_saved_forward(vm, i, vm->d_attn);
    f->recording = recording;
}

void lj_vision_forward(lj_vision *vm, int backward) {
    const lj_vision_spec *s = &vm->spec;
    const lj_ops *ops = vm->ops;
    const int Np = vm->num_patches;
    LJ_ASSERT(!backward || vm->training, "vision forward with a backward needs a training tower");
    if (Np == 0) return;
    lj_linear_pass_begin(&vm->linear, backward); /* delayed scaling: this pass's scales, on the device */
    /* the Conv3d with stride = kernel as one GEMM, plus the interpolated position grid */
    linear(vm, vm->residual[0], vm->pixels, vm->layout.patch_w, Np, s->P, s->V);
    ops->embedding_bag_forward(vm->pos_embeds, param(vm, vm->layout.pos), vm->pos_idx, vm->pos_w, Np, 4, s->V);
    ops->add(vm->residual[0], vm->residual[0], vm->pos_embeds, (int64_t)Np * s->V);
    int ds = 0;
    for (int i = 0; i < s->depth; i++) {
        block_forward(vm, i);
        if (ds < s->num_deepstack && vm->cfg.deepstack_visual_indexes[ds] == i) merger_forward(vm, 1 + ds++, vm->residual[i + 1]);
    }
    merger_forward(vm, 0, vm->residual[s->depth]);
}

/* ---- backward --------------------------------------------------------------------- */

/* Merger j's backward from d_out [Nt, O]: its input's gradient is added to vm->d_res. */
static void merger_backward(lj_vision *vm, int j, const void *x, const void *d_out) {
    const lj_vision_spec *s = &vm->spec;
    const lj_ops *ops = vm->ops;
    lj_vision_merger_acts *a = &vm->mergers[j];
    const int Np = vm->num_patches, Nt = vm->num_tokens;
    linear_backward(vm, vm->d_m1, d_out, a->act, lj_vision_merger_param(&vm->layout, j, LJ_VM_FC2_W), Nt, s->M, s->O,
                    LJ_GRAD_OVERWRITE);
    ops->gelu_backward(vm->d_m1, vm->d_m1, a->h, (int64_t)Nt * s->M, 0);
    linear_backward(vm, vm->d_m2, vm->d_m1, a->ln, lj_vision_merger_param(&vm->layout, j, LJ_VM_FC1_W), Nt, s->M, s->M,
                    LJ_GRAD_OVERWRITE);
    const int nw = lj_vision_merger_param(&vm->layout, j, LJ_VM_NORM_W);
    const int rows = j == 0 ? Np : Nt, cols = j == 0 ? s->V : s->M;
    ops->layernorm_backward(vm->d_res, grad(vm, nw), grad(vm, nw + 1), vm->d_m2, x, param(vm, nw), a->mean, a->rstd,
                            rows, cols, LJ_GRAD_ACCUMULATE, LJ_GRAD_ACCUMULATE, vm->ws_norm);
}

static void block_backward(lj_vision *vm, int i) {
    const lj_vision_spec *s = &vm->spec;
    const lj_ops *ops = vm->ops;
    lj_vision_block_acts *a = &vm->blocks[i];
    const int Np = vm->num_patches;
    const int p0 = lj_vision_block_param(&vm->layout, i, 0);
    /* MLP: d_res is the gradient of the block output (and of res_mid through the residual) */
    block_linear_backward(vm, LJ_LINEAR_DOWN, i, vm->d_h, vm->d_res, a->act, p0 + LJ_VP_FC2_W, Np);
    ops->gelu_backward(vm->d_h, vm->d_h, a->h1, (int64_t)Np * s->I, s->gelu_tanh);
    block_linear_backward(vm, LJ_LINEAR_GATE_UP, i, vm->d_ln, vm->d_h, a->ln2, p0 + LJ_VP_FC1_W, Np);
    ops->layernorm_backward(vm->d_res, grad(vm, p0 + LJ_VP_LN2_W), grad(vm, p0 + LJ_VP_LN2_B), vm->d_ln, a->res_mid,
                            param(vm, p0 + LJ_VP_LN2_W), a->ln2_mean, a->ln2_rstd, Np, s->V, LJ_GRAD_ACCUMULATE,
                            LJ_GRAD_ACCUMULATE, vm->ws_norm);
    /* attention */
    block_linear_backward(vm, LJ_LINEAR_O, i, vm->d_attn, vm->d_res, a->attn, p0 + LJ_VP_PROJ_W, Np);
    ops->attention_varlen_backward(vm->d_qkv, vm->d_attn, a->qkv, a->attn, a->lse, vm->cu_seqlens, vm->num_segments,
                                   vm->max_seqlen, Np, s->heads, s->heads, s->hd, 0, vm->ws_attention);
    ops->rope_backward_pos(vm->d_qkv, vm->rope_cos, vm->rope_sin, vm->row_ids, 1, Np, s->heads, s->heads, s->hd);
    block_linear_backward(vm, LJ_LINEAR_QKV, i, vm->d_ln, vm->d_qkv, a->ln1, p0 + LJ_VP_QKV_W, Np);
    ops->layernorm_backward(vm->d_res, grad(vm, p0 + LJ_VP_LN1_W), grad(vm, p0 + LJ_VP_LN1_B), vm->d_ln,
                            vm->residual[i], param(vm, p0 + LJ_VP_LN1_W), a->ln1_mean, a->ln1_rstd, Np, s->V,
                            LJ_GRAD_ACCUMULATE, LJ_GRAD_ACCUMULATE, vm->ws_norm);
}

void lj_vision_backward(lj_vision *vm, const void *d_out, const void *const *d_deepstack) {
    const lj_vision_spec *s = &vm->spec;
    const lj_ops *ops = vm->ops;
    const int Np = vm->num_patches;
    LJ_ASSERT(vm->training, "vision backward needs a training tower");
    if (Np == 0) return;
    ops->memset_zero(vm->d_res, (size_t)Np * s->V * lj_dtype_size(ops->act_dtype));
    if (d_out) merger_backward(vm, 0, vm->residual[s->depth], d_out);
    int ds = s->num_deepstack - 1;
    for (int i = s->depth - 1; i >= 0; i--) {
        if (ds >= 0 && vm->cfg.deepstack_visual_indexes[ds] == i) {
            if (d_deepstack && d_deepstack[ds]) merger_backward(vm, 1 + ds, vm->residual[i + 1], d_deepstack[ds]);
            ds--;
        }
        if (vm->recompute) block_replay(vm, i);
        block_backward(vm, i);
    }
    /* the patch embedding and the position grid */
    ops->matmul_backward(NULL, grad(vm, vm->layout.patch_w), vm->d_res, vm->pixels, param(vm, vm->layout.patch_w), Np,
                         s->P, s->V, LJ_GRAD_OVERWRITE, LJ_GRAD_ACCUMULATE);
    ops->bias_backward(grad(vm, vm->layout.patch_b), vm->d_res, Np, s->V, LJ_GRAD_ACCUMULATE, vm->ws_bias);
    ops->embedding_bag_backward(grad(vm, vm->layout.pos), vm->d_res, vm->pos_idx, vm->pos_w, Np, 4, s->V);
    lj_linear_pass_end(&vm->linear);
}

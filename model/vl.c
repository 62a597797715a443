/* vl.c: the Qwen3-VL model: the vision tower joined to the Qwen3 decoder through its hooks (the
 * image splice, DeepStack), the MRoPE rows per batch, and the forward/backward of both. */
#include "model/vl.h"

#include <string.h>

/* ---- the decoder's hooks ----------------------------------------------------------- */

static void hook_embed_forward(lj_model *m, void *ctx, void *x) {
    lj_vl *vl = ctx;
    if (vl->num_tokens > 0)
        m->ops->rows_scatter(x, vl->vis.mergers[0].out, vl->img_pos, vl->num_tokens, m->spec.C, LJ_GRAD_OVERWRITE);
}

static int hook_layer_forward(lj_model *m, void *ctx, int l, void *x) {
    lj_vl *vl = ctx;
    if (l >= vl->vis.spec.num_deepstack || vl->num_tokens == 0) return 0;
    m->ops->rows_scatter(x, vl->vis.mergers[1 + l].out, vl->img_pos, vl->num_tokens, m->spec.C, LJ_GRAD_ACCUMULATE);
    return 1;
}

static void hook_layer_backward(lj_model *m, void *ctx, int l, const void *dx) {
    lj_vl *vl = ctx;
    if (l >= vl->vis.spec.num_deepstack || vl->num_tokens == 0) return;
    m->ops->rows_gather(vl->d_deepstack[l], dx, vl->img_pos, vl->num_tokens, m->spec.C);
}

static void hook_embed_backward(lj_model *m, void *ctx, void *dx) {
    lj_vl *vl = ctx;
    if (vl->num_tokens == 0) return;
    m->ops->rows_gather(vl->d_embed, dx, vl->img_pos, vl->num_tokens, m->spec.C);
    m->ops->rows_scatter(dx, NULL, vl->img_pos, vl->num_tokens, m->spec.C, LJ_GRAD_OVERWRITE); /* the pads' rows */
}

/* ---- setup ------------------------------------------------------------------------ */

#define TAKE(field, arena, name, bytes)                              \
    do {                                                             \
        void *p_ = lj_buffer_take(w, (arena), (name), (bytes));      \
        if (w->bind) (field) = p_;                                   \
    } while (0)

/* The plan entry of the tower and the joint, walked after the decoder's buffers (plan/plan.c):
 * `m` is the plan's copy of the decoder while sizing, the decoder itself while binding. */
static void hook_plan(lj_model *m, void *ctx, lj_buffer_walker *w) {
    lj_vl *vl = ctx;
    lj_vision_plan(&vl->vis, w);
    const lj_ops *ops = m->ops;
    const size_t N = (size_t)m->opt.micro_batch_size * m->opt.seq_length, half = (size_t)vl->cfg.text.head_dim / 2;
    const size_t nt = (size_t)vl->max_patches / vl->vis.spec.m2, D = (size_t)vl->cfg.text.hidden_size;
    const size_t act = lj_dtype_size(ops->act_dtype);
    TAKE(vl->img_pos, LJ_ARENA_ACTIVATIONS, "vl.image_positions", nt * sizeof(int32_t));
    TAKE(vl->row_ids, LJ_ARENA_ACTIVATIONS, "vl.row_ids", N * sizeof(int32_t));
    TAKE(vl->rope_cos, LJ_ARENA_ACTIVATIONS, "vl.mrope_cos", N * half * sizeof(float));
    TAKE(vl->rope_sin, LJ_ARENA_ACTIVATIONS, "vl.mrope_sin", N * half * sizeof(float));
    if (m->opt.training) {
        TAKE(vl->d_embed, LJ_ARENA_SCRATCH, "vl.d_embed", nt * D * act);
        char name[48];
        for (int j = 0; j < vl->cfg.vision.num_deepstack; j++) {
            snprintf(name, sizeof name, "vl.d_deepstack.%d", j);
            TAKE(vl->d_deepstack[j], LJ_ARENA_SCRATCH, name, nt * D * act);
        }
    }
    if (w->bind) {
        /* per-token RoPE rows: the decoder's rope reads row position_ids[n] = n */
        m->position_ids = vl->row_ids;
        m->rope_cos = vl->rope_cos;
        m->rope_sin = vl->rope_sin;
        vl->row_ids_ready = 0;
    }
}
#undef TAKE

int lj_vl_buffer_is_vision(const char *name) {
    return strncmp(name, "vision.", 7) == 0 || strncmp(name, "vl.", 3) == 0;
}

void lj_vl_capacity(const lj_vl_config *cfg, int micro_batch_size, int seq_length, int *max_patches,
                    int *max_images) {
    const int m = cfg->vision.spatial_merge_size, N = micro_batch_size * seq_length;
    *max_patches = m * m * N;
    *max_images = N / 3 + 1;
}

lj_status lj_vl_init(lj_vl *vl, lj_model *m, const lj_vl_config *cfg, int max_patches, int max_images) {
    memset(vl, 0, sizeof *vl);
    const lj_model_config *t = &cfg->text;
    if (m->cfg.hidden_size != t->hidden_size || m->cfg.num_hidden_layers != t->num_hidden_layers ||
        m->cfg.head_dim != t->head_dim || m->cfg.vocab_size != t->vocab_size || !m->cfg.qk_norm)
        return lj_fail(LJ_ERR_ARG, "Qwen3-VL: the decoder is not a model of the config's text_config");
    if (m->opt.graphs || m->residency)
        return lj_fail(LJ_ERR_UNSUPPORTED, "Qwen3-VL: CUDA graphs and ZeRO residency are not wired to the vision hooks yet");
    if (m->opt.kv_cache_tokens > 0)
        return lj_fail(LJ_ERR_UNSUPPORTED, "Qwen3-VL: the decoder's KV-cache generation mode is not wired to the hooks");
    if (m->linear.fp8.kept) /* its cast after each optimizer step (lj_linear_cast_weights) is not in lj_vl_optimizer_step */
        return lj_fail(LJ_ERR_UNSUPPORTED, "Qwen3-VL: --fp8-param-gather (FP8 weights kept and cast once per step) is "
                                           "not wired to the Qwen3-VL optimizer step; train without it");
    vl->cfg = *cfg;
    vl->m = m;
    vl->max_patches = max_patches;
    vl->max_images = max_images;
    /* the tower's blocks take the decoder's precision recipe (its FP8 settings), with their own
       state, and the options' vision recompute */
    LJ_TRY(lj_vision_init(&vl->vis, m->ops, &cfg->vision, max_patches, max_images, m->opt.training,
                          m->opt.vision_recompute, m->opt.linear_recipe, &m->opt.fp8));
    const size_t N = (size_t)m->opt.micro_batch_size * m->opt.seq_length;
    vl->host_pos3 = lj_malloc(3 * N * sizeof(int32_t));
    vl->hooks = (lj_model_hooks){.embed_forward = hook_embed_forward,
                                 .layer_forward = hook_layer_forward,
                                 .layer_backward = hook_layer_backward,
                                 .embed_backward = hook_embed_backward,
                                 .plan = hook_plan,
                                 .ctx = vl};
    m->hooks = &vl->hooks;
    return LJ_OK;
}

void lj_vl_free(lj_vl *vl) {
    if (vl->m && vl->m->hooks == &vl->hooks) {
        vl->m->hooks = NULL;
        vl->m->position_ids = NULL;
        vl->m->rope_cos = vl->m->rope_sin = NULL;
    }
    lj_vision_free(&vl->vis);
    free(vl->host_pos3);
    memset(vl, 0, sizeof *vl);
}

lj_status lj_vl_set_batch(lj_vl *vl, const int32_t *input_ids, const int32_t *targets, const float *pixel_values,
                          const int32_t *grid_thw, int num_images) {
    lj_model *m = vl->m;
    const lj_ops *ops = m->ops;
    const int B = m->opt.micro_batch_size, T = m->opt.seq_length, N = B * T;
    const int half = vl->cfg.text.head_dim / 2;
    LJ_ASSERT(vl->img_pos && m->position_ids == vl->row_ids,
              "Qwen3-VL: the plan of the decoder and the tower was not allocated after lj_vl_init");
    if (!vl->row_ids_ready) {
        int32_t *ids = lj_malloc((size_t)N * sizeof(int32_t));
        for (int i = 0; i < N; i++) ids[i] = i;
        ops->upload(vl->row_ids, ids, (size_t)N * sizeof(int32_t));
        ops->synchronize();
        free(ids);
        vl->row_ids_ready = 1;
    }
    int32_t *pos = lj_malloc((size_t)N * sizeof(int32_t)), *p3 = lj_malloc(3 * (size_t)T * sizeof(int32_t));
    int npad = 0, img = 0;
    lj_status s = LJ_OK;
    for (int b = 0; b < B && s == LJ_OK; b++) {
        const int32_t *ids = input_ids + (size_t)b * T;
        const int used = lj_vl_rope_index(&vl->cfg, ids, T, grid_thw + (size_t)img * 3, num_images - img, p3);
        if (used < 0) {
            s = lj_fail(LJ_ERR_ARG,
                        "sequence %d: its image-pad tokens (id %d) do not match the images given (a run of pads must "
                        "hold t*h*w/%d tokens of its image, in order)",
                        b, vl->cfg.image_token_id, vl->vis.spec.m2);
            break;
        }
        img += used;
        for (int a = 0; a < 3; a++) memcpy(vl->host_pos3 + (size_t)a * N + (size_t)b * T, p3 + (size_t)a * T, (size_t)T * sizeof(int32_t));
        for (int t = 0; t < T; t++)
            if (ids[t] == vl->cfg.image_token_id) pos[npad++] = b * T + t;
    }
    if (s == LJ_OK && img != num_images)
        s = lj_fail(LJ_ERR_ARG, "batch: %d images given, the image pads of the sequences hold %d", num_images, img);
    if (s == LJ_OK) s = lj_vision_set_images(&vl->vis, pixel_values, grid_thw, num_images);
    if (s == LJ_OK && npad != vl->vis.num_tokens)
        s = lj_fail(LJ_ERR_ARG, "batch: %d image-pad tokens for %d merged image tokens", npad, vl->vis.num_tokens);
    if (s == LJ_OK) {
        float *cs = lj_malloc((size_t)N * half * 2 * sizeof(float));
        lj_vl_mrope_rows(&vl->cfg, vl->host_pos3, N, cs, cs + (size_t)N * half);
        ops->upload(vl->rope_cos, cs, (size_t)N * half * sizeof(float));
        ops->upload(vl->rope_sin, cs + (size_t)N * half, (size_t)N * half * sizeof(float));
        ops->upload(vl->img_pos, pos, (size_t)npad * sizeof(int32_t));
        ops->upload(m->inputs, input_ids, (size_t)N * sizeof(int32_t));
        ops->upload(m->targets, targets, (size_t)N * sizeof(int32_t));
        ops->synchronize();
        free(cs);
        vl->num_tokens = npad;
        m->num_targets = 0;
        for (int i = 0; i < N; i++) m->num_targets += targets[i] >= 0;
    }
    free(pos);
    free(p3);
    return s;
}

void lj_vl_set_positions(lj_vl *vl, const int32_t *pos3) {
    const lj_ops *ops = vl->m->ops;
    const size_t N = (size_t)vl->m->opt.micro_batch_size * vl->m->opt.seq_length;
    const size_t half = (size_t)vl->cfg.text.head_dim / 2;
    memcpy(vl->host_pos3, pos3, 3 * N * sizeof(int32_t));
    float *cs = lj_malloc(N * half * 2 * sizeof(float));
    lj_vl_mrope_rows(&vl->cfg, vl->host_pos3, (int)N, cs, cs + N * half);
    ops->upload(vl->rope_cos, cs, N * half * sizeof(float));
    ops->upload(vl->rope_sin, cs + N * half, N * half * sizeof(float));
    ops->synchronize();
    free(cs);
}

void lj_vl_forward_backward(lj_vl *vl, int backward, float dloss) {
    lj_vision_forward(&vl->vis, backward);
    lj_model_forward(vl->m, backward, dloss);
    if (!backward) return;
    lj_model_backward(vl->m);
    lj_vision_backward(&vl->vis, vl->d_embed, (const void *const *)vl->d_deepstack);
}

void lj_vl_zero_grads(lj_vl *vl) {
    lj_model_zero_grads(vl->m);
    lj_vision_zero_grads(&vl->vis);
}

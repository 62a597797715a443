/* vl.h: the configuration of the Qwen3-VL vision-language models (HF model_type "qwen3_vl",
 * Qwen3VLForConditionalGeneration, dense): the text model (a Qwen3 decoder, config/config.h),
 * the vision tower, the token ids and the interleaved MRoPE sections; the presets; and the
 * vision tower's parameter layout. Architecture: docs/qwen3-vl-model.md.
 *
 * Vision parameter layout: one contiguous buffer, in this order (HF names, prefix model.visual.):
 *   patch_embed.proj.weight   [V, P]  (HF stores the Conv3d weight [V, c, tp, p, p]: the same
 *                                      values, P = c*tp*p*p columns in (c, t, y, x) order)
 *   patch_embed.proj.bias     [V]
 *   pos_embed.weight          [G*G, V]
 *   for each block i: norm1.{weight,bias} [V], attn.qkv.{weight [3V, V], bias [3V]},
 *     attn.proj.{weight [V, V], bias [V]}, norm2.{weight,bias} [V],
 *     mlp.linear_fc1.{weight [I, V], bias [I]}, mlp.linear_fc2.{weight [V, I], bias [V]}
 *   merger.norm.{weight,bias} [V], merger.linear_fc1.{weight [m2V, m2V], bias [m2V]},
 *     merger.linear_fc2.{weight [O, m2V], bias [O]}
 *   for each DeepStack merger j: deepstack_merger_list.j.* as merger, but norm over m2V
 * (m2 = spatial_merge_size^2, O = out_hidden_size = the text hidden size).
 */
#ifndef LJ_CONFIG_VL_H
#define LJ_CONFIG_VL_H

#include "config/config.h"

/* The most DeepStack mergers a config may have. */
#define LJ_VISION_MAX_DEEPSTACK 8

typedef struct {
    int depth;                   /* ViT blocks */
    int hidden_size;             /* V */
    int intermediate_size;       /* I */
    int num_heads;               /* heads (head_dim = V / heads) */
    int in_channels;             /* 3 */
    int patch_size;              /* 16 */
    int temporal_patch_size;     /* 2 */
    int spatial_merge_size;      /* 2: m x m patches become one LLM token */
    int out_hidden_size;         /* O, = the text hidden size */
    int num_position_embeddings; /* G*G rows of the learned position grid */
    int num_deepstack;           /* DeepStack mergers */
    int deepstack_visual_indexes[LJ_VISION_MAX_DEEPSTACK]; /* the blocks whose output each reads */
    int gelu_tanh;               /* hidden_act: 1 "gelu_pytorch_tanh", 0 "gelu" (exact) */
    double initializer_range;
} lj_vision_config;

typedef struct {
    char name[64];
    lj_model_config text;        /* family LJ_FAMILY_QWEN3 (QK-norm); names in HF are model.language_model.* */
    lj_vision_config vision;
    int image_token_id, video_token_id, vision_start_token_id, vision_end_token_id;
    int mrope_section[3];        /* frequencies per axis (T, H, W); sum = head_dim / 2 */
} lj_vl_config;

/* Fills `cfg` with a preset: qwen3-vl-2b, qwen3-vl-4b, qwen3-vl-8b (the published shapes), and
 * qwen3-vl-tiny (a tiny model with the Qwen3 vocabulary and token ids, tied, for CPU runs) and
 * qwen3-vl-fixture (the test shape of tests/fixtures/make_qwen3vl_fixtures.py: vocabulary 256).
 * Errors: LJ_ERR_ARG naming the unknown preset. */
lj_status lj_vl_config_preset(const char *name, lj_vl_config *cfg);
const char *lj_vl_config_preset_names(void);

/* Loads an HF config.json of model_type "qwen3_vl": text_config (parsed as a Qwen3 config by
 * config/config.h's rules, so that any unsupported field is refused by name), vision_config
 * (HF Qwen3VLVisionConfig's defaults for absent fields), the token ids, and
 * rope_parameters / rope_scaling .mrope_section and .mrope_interleaved (must be true: the
 * chunked Qwen2-VL layout is refused). tie_word_embeddings at the top level wins over the
 * text_config's. Errors: LJ_ERR_IO / LJ_ERR_FORMAT / LJ_ERR_UNSUPPORTED naming the file and
 * the field. */
lj_status lj_vl_config_load(const char *path, lj_vl_config *cfg);

/* Resolves a preset name, a config.json path or a directory holding one. */
lj_status lj_vl_config_resolve(const char *model, lj_vl_config *cfg);

/* Checks the shapes: head_dim of the tower a multiple of 4 (2-D RoPE halves), a square position
 * grid, out_hidden_size = text hidden size, DeepStack indexes increasing and below depth and no
 * more than the text layers, mrope_section summing to head_dim / 2 with H and W bounds inside it.
 * Errors: LJ_ERR_FORMAT naming `source` and the field. */
lj_status lj_vl_config_validate(const lj_vl_config *cfg, const char *source);

/* Columns of a patch row of pixel_values: in_channels * temporal_patch_size * patch_size^2. */
static inline int lj_vision_patch_dim(const lj_vision_config *v) {
    return v->in_channels * v->temporal_patch_size * v->patch_size * v->patch_size;
}

/* ---- vision parameter layout ---------------------------------------------------- */

enum { /* a block's parameters, in layout order */
    LJ_VP_LN1_W = 0, LJ_VP_LN1_B, LJ_VP_QKV_W, LJ_VP_QKV_B, LJ_VP_PROJ_W, LJ_VP_PROJ_B,
    LJ_VP_LN2_W, LJ_VP_LN2_B, LJ_VP_FC1_W, LJ_VP_FC1_B, LJ_VP_FC2_W, LJ_VP_FC2_B, LJ_VP_PER_BLOCK
};
enum { /* a merger's parameters, in layout order */
    LJ_VM_NORM_W = 0, LJ_VM_NORM_B, LJ_VM_FC1_W, LJ_VM_FC1_B, LJ_VM_FC2_W, LJ_VM_FC2_B, LJ_VM_PER_MERGER
};

typedef struct {
    lj_param_info *params; /* layout order; names are HF's (model.visual.*) */
    int count;
    int64_t total;         /* elements */
    int patch_w, patch_b, pos; /* indices of the patch embedding and the position grid */
    int block0;            /* index of block 0's first parameter */
    int merger0;           /* index of the final merger's first parameter; DeepStack j is merger j + 1 */
} lj_vision_layout;

void lj_vision_layout_init(lj_vision_layout *lo, const lj_vision_config *v);
void lj_vision_layout_free(lj_vision_layout *lo);
static inline int lj_vision_block_param(const lj_vision_layout *lo, int block, int which) {
    return lo->block0 + block * LJ_VP_PER_BLOCK + which;
}
/* merger 0: the final merger; 1 + j: DeepStack merger j. */
static inline int lj_vision_merger_param(const lj_vision_layout *lo, int merger, int which) {
    return lo->merger0 + merger * LJ_VM_PER_MERGER + which;
}

/* ---- FLOPs (docs/qwen3-vl.md, "The FLOP count"; the convention of docs/reference.md) -------- */

/* Training FLOPs (forward and backward, 3 x the forward's) of the vision tower on one frame of
 * `patches` patches (h*w of its grid), all in one attention segment:
 *   6 * (P*V + depth*(4*V^2 + 2*V*I)) * patches         patch embedding and the blocks' linears
 * + 6 * (1 + num_deepstack) * (M^2 + M*O) * patches/m^2  the final and DeepStack mergers
 * + 12 * depth * V * patches^2                           attention scores and values, no mask
 * (P the patch row, M = m^2 * V, O out_hidden_size; norms, GELU and the position grid are not
 * counted). */
double lj_vision_flops_per_frame(const lj_vision_config *v, int64_t patches);

/* The HF name of a text parameter of config/config.h's layout inside Qwen3VLForConditionalGeneration:
 * "model.X" -> "model.language_model.X", lm_head.weight unchanged. */
void lj_vl_text_hf_name(const char *name, char *buf, size_t len);

#endif

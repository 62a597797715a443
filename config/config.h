/* config.h: the model configuration (Hugging Face config.json fields) of the dense decoder
 * families ljperf builds (Llama, Qwen2/Qwen2.5, Qwen3), the named presets, and the parameter
 * layout shared by every backend, the memory plan and io/.
 *
 * Parameter layout: all parameters live in one contiguous buffer, in this order (HF names):
 *   model.embed_tokens.weight                    [V, d]
 *   for each layer N (layer-major, so that one layer is one contiguous range):
 *     model.layers.N.input_layernorm.weight      [d]
 *     model.layers.N.self_attn.q_proj.weight     [nh*hd, d]   \
 *     model.layers.N.self_attn.k_proj.weight     [nkv*hd, d]   > contiguous: one [Q+2K, d] matmul
 *     model.layers.N.self_attn.v_proj.weight     [nkv*hd, d]  /
 *     model.layers.N.self_attn.q_proj.bias       [nh*hd]      \  qkv_bias only (Qwen2): contiguous,
 *     model.layers.N.self_attn.k_proj.bias       [nkv*hd]      > one [Q+2K] bias added to the QKV
 *     model.layers.N.self_attn.v_proj.bias       [nkv*hd]     /   matmul's output
 *     model.layers.N.self_attn.q_norm.weight     [hd]         \  qk_norm only (Qwen3): contiguous,
 *     model.layers.N.self_attn.k_norm.weight     [hd]         /   the QK-norm op's w [2, hd]
 *     model.layers.N.self_attn.o_proj.weight     [d, nh*hd]
 *     model.layers.N.post_attention_layernorm.weight [d]
 *     model.layers.N.mlp.gate_proj.weight        [I, d]       \ contiguous: one [2I, d] matmul
 *     model.layers.N.mlp.up_proj.weight          [I, d]       /
 *     model.layers.N.mlp.down_proj.weight        [d, I]
 *   model.norm.weight                            [d]
 *   lm_head.weight                               [V, d]   (absent when tie_word_embeddings)
 * Matrices are [out, in] row-major and linear layers compute y = x W^T, as in HF.
 */
#ifndef LJ_CONFIG_H
#define LJ_CONFIG_H

#include "base/base.h"

/* The most decoder layers a model may have (per-layer tables are this long). */
#define LJ_MAX_LAYERS 256

/* The decoder families (HF model_type). Each is the Llama block plus the parts its flags say. */
typedef enum {
    LJ_FAMILY_LLAMA = 0, /* "llama": LlamaForCausalLM */
    LJ_FAMILY_QWEN2,     /* "qwen2": Qwen2ForCausalLM (Qwen2, Qwen2.5): q/k/v biases */
    LJ_FAMILY_QWEN3,     /* "qwen3": Qwen3ForCausalLM (dense): QK-norm */
} lj_model_family;

/* HF model_type ("llama", "qwen2", "qwen3") and architecture ("LlamaForCausalLM", ...). */
const char *lj_model_family_type(lj_model_family f);
const char *lj_model_family_architecture(lj_model_family f);

typedef struct {
    char name[64];              /* preset name or the config.json path's basename */
    lj_model_family family;     /* model_type */
    int qk_norm;                /* 1: RMSNorm over head_dim on q and k before RoPE (Qwen3's q_norm, k_norm) */
    int qkv_bias;               /* 1: biases on q_proj, k_proj, v_proj (Qwen2) */
    int vocab_size;             /* V */
    int hidden_size;            /* d */
    int intermediate_size;      /* I */
    int num_hidden_layers;      /* L */
    int num_attention_heads;    /* nh */
    int num_key_value_heads;    /* nkv (GQA: nh % nkv == 0) */
    int head_dim;               /* hd */
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    int tie_word_embeddings;    /* 1: lm_head shares model.embed_tokens.weight */
    int rope_scaling_llama3;    /* 1: rope_scaling / rope_parameters of type "llama3" */
    double rope_factor;
    double rope_low_freq_factor;
    double rope_high_freq_factor;
    int rope_original_max_position_embeddings;
    int bos_token_id;
    int eos_token_id;
    double initializer_range;   /* std of the normal init of matrices (HF default 0.02) */
} lj_model_config;

/* Fills `cfg` with a named preset: llama3.2-1b, llama3.2-3b, llama3-8b, llama3.1-8b,
 * llama3-70b, qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b, qwen2.5-0.5b,
 * and the small CPU presets llama3-tiny (~40M params, real 128256 vocab), llama3-nano and
 * qwen3-tiny (~43M, real 151936 vocab). Shapes: docs/reference.md (HF config.json values).
 * Errors: LJ_ERR_ARG naming the unknown preset and listing the known ones. */
lj_status lj_config_preset(const char *name, lj_model_config *cfg);

/* Zeroes `cfg` and sets the defaults every config starts from (HF LlamaConfig's where they
 * differ from zero: rms_norm_eps 1e-5, initializer_range 0.02; Llama 3's rope_theta 500000, 8192
 * positions and bos/eos ids 128000/128001). */
void lj_config_defaults(lj_model_config *cfg);

/* Comma-separated list of preset names, for help text and error messages. */
const char *lj_config_preset_names(void);

/* Loads an HF config.json of model_type "llama" (also when absent), "qwen2" or "qwen3".
 * Accepts both `rope_scaling` and the newer `rope_parameters` (with rope_theta inside).
 * Required fields: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
 * vocab_size; the others take the defaults of the family's HF config class (Qwen: rms_norm_eps
 * 1e-6, rope_theta 10000; Qwen3: head_dim 128). Strict: every field that changes the math is
 * implemented or refused by name (LJ_ERR_UNSUPPORTED): another model_type, a sliding window
 * that some layer would use (`sliding_window` for Llama; `use_sliding_window` with
 * `max_window_layers` below the layer count, or `layer_types` other than "full_attention", for
 * Qwen), `attention_bias` true outside Qwen2 (it adds an o_proj bias too), `mlp_bias` true,
 * `hidden_act` other than silu, rope types other than default and llama3, a
 * `partial_rotary_factor` below 1, MoE fields (num_experts, num_local_experts,
 * n_routed_experts, num_experts_per_tok, moe_intermediate_size), a nonzero
 * `attention_dropout`, `use_mrope`. Fields that do not change training (token ids, dtype hints,
 * use_cache, max_window_layers without a window) are accepted.
 * Errors: LJ_ERR_IO / LJ_ERR_FORMAT / LJ_ERR_UNSUPPORTED naming the file and the field. */
lj_status lj_config_load(const char *path, lj_model_config *cfg);

/* lj_config_load's parse of an already-parsed JSON object (a `const cJSON *`), for configs that
 * nest a decoder's (config/vl.h's text_config); `path` names it in the errors. */
lj_status lj_config_parse_json(const void *object, lj_model_config *cfg, const char *path);

/* Reads `path` as a config.json: *root = its top-level object (a cJSON *; free with
 * cJSON_Delete). Errors: LJ_ERR_IO (unreadable), LJ_ERR_FORMAT naming the file (not a JSON
 * object, or a key twice in one object: cJSON would keep the first where transformers keeps the
 * last). Every config loader reads its file through it. */
lj_status lj_config_read_json(const char *path, void **root);

/* Resolves --model: a preset name, a config.json path, a directory holding config.json, or
 * ORG/NAME, a model of the Hugging Face cache (base/hf_cache.h: its snapshot's config.json). */
lj_status lj_config_resolve(const char *model, lj_model_config *cfg);

/* Checks the shape for consistency (positive sizes, nh % nkv == 0, even head_dim).
 * Errors: LJ_ERR_FORMAT naming `source` and the field. */
lj_status lj_config_validate(const lj_model_config *cfg, const char *source);

/* The transformers release whose config.json layout lj_config_save writes (rope_theta and
 * rope_scaling at the top level; dtype, and torch_dtype for releases before 4.56), recorded as
 * the file's "transformers_version" as save_pretrained records its own. transformers reads the
 * field when it loads a tokenizer from a local directory (tokenization_utils_fast.py,
 * _patch_mistral_regex): without it, it takes the directory for a Mistral checkpoint saved
 * before its regex fix and warns of "an incorrect regex pattern" whatever the tokenizer.json
 * holds; a release up to 4.57.2 with a model_type other than Mistral's, or above 4.57.3, is
 * not checked further. */
#define LJ_HF_TRANSFORMERS_VERSION "4.57.1"

/* Writes an HF config.json of the config's family (model_type and architectures of
 * lj_model_family_type / _architecture, dtype and torch_dtype = `dtype_name`,
 * transformers_version = LJ_HF_TRANSFORMERS_VERSION; Llama: pretraining_tp 1) to `path`, with
 * the fields transformers' save_pretrained writes for the family, as transformers reads it back
 * (Qwen: use_sliding_window false). */
lj_status lj_config_save(const lj_model_config *cfg, const char *path, const char *dtype_name);

/* ---- parameter layout ------------------------------------------------------------ */

typedef enum {
    LJ_PARAM_EMBEDDING = 0, /* embed_tokens, lm_head */
    LJ_PARAM_NORM,          /* RMSNorm weights */
    LJ_PARAM_MATRIX,        /* attention and MLP projections */
    LJ_PARAM_BIAS,          /* q/k/v projection biases (initialized to 0, no weight decay) */
} lj_param_kind;

typedef struct {
    char name[96];       /* HF name, e.g. "model.layers.3.self_attn.q_proj.weight" */
    int ndim;            /* 1 or 2 */
    int64_t shape[2];    /* [rows, cols] or [len, 1] */
    int64_t offset;      /* elements from the start of the parameter buffer */
    int64_t numel;
    int layer;           /* -1 for embedding, final norm and lm_head */
    lj_param_kind kind;
} lj_param_info;

/* Which parameter of a layer. A name, not a position: the layout's slot[] gives where each one
 * is in the layer's block (the biases and QK-norm weights exist only when the config has them). */
enum {
    LJ_P_LN1 = 0, LJ_P_Q, LJ_P_K, LJ_P_V, LJ_P_O, LJ_P_LN2, LJ_P_GATE, LJ_P_UP, LJ_P_DOWN,
    LJ_P_Q_BIAS, LJ_P_K_BIAS, LJ_P_V_BIAS, /* qkv_bias */
    LJ_P_Q_NORM, LJ_P_K_NORM,             /* qk_norm */
    LJ_P_PER_LAYER                        /* the most parameters a layer has */
};

typedef struct {
    lj_param_info *params; /* all parameters in layout order */
    int count;
    int64_t total;         /* elements in the whole buffer */
    int64_t layer_numel;   /* elements of one layer's block */
    int64_t layer_offset0; /* offset of layer 0's block (= V*d) */
    int embed;             /* index of model.embed_tokens.weight */
    int final_norm;        /* index of model.norm.weight */
    int lm_head;           /* index of lm_head.weight, or of embed_tokens when tied */
    int per_layer;         /* parameters of one layer (9 for Llama, 12 Qwen2, 11 Qwen3) */
    int slot[LJ_P_PER_LAYER]; /* position of LJ_P_* within a layer's parameters, -1: absent */
} lj_param_layout;

/* Builds the layout above for `cfg`. Free with lj_param_layout_free. */
void lj_param_layout_init(lj_param_layout *layout, const lj_model_config *cfg);
void lj_param_layout_free(lj_param_layout *layout);

/* Index of parameter `which` (LJ_P_*) of layer `layer` in lo->params. Asserts that the
 * config has it (lj_param_has). */
static inline int lj_param_index(const lj_param_layout *lo, int layer, int which) {
    LJ_ASSERT(which >= 0 && which < LJ_P_PER_LAYER && lo->slot[which] >= 0, "layer parameter %d is not in this model",
              which);
    return 1 + layer * lo->per_layer + lo->slot[which];
}

/* 1 when the layers have parameter `which` (LJ_P_*). */
static inline int lj_param_has(const lj_param_layout *lo, int which) { return lo->slot[which] >= 0; }

/* Finds a parameter by HF name; -1 if absent. */
int lj_param_find(const lj_param_layout *layout, const char *name);

/* Total parameter count (the tied lm_head counted once). */
int64_t lj_config_num_params(const lj_model_config *cfg);

/* Parameters that enter matmuls (for MFU): every projection plus the output projection
 * (lm_head, counted even when tied), excluding the input embedding lookup (and the biases and
 * norm weights, which are element-wise). */
int64_t lj_config_num_matmul_params(const lj_model_config *cfg);

/* Training FLOPs per token = 6*N + 12*L*d*s (docs/reference.md, "MFU, stated once"). */
double lj_config_flops_per_token(const lj_model_config *cfg, int seq_length);

#endif

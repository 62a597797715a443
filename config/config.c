/* config.c: Llama and Qwen presets, HF config.json load (strict) and save, the parameter layout
 * and FLOP counts. */
#include "config/config.h"

#include "base/fs.h"
#include "base/hf_cache.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *name;
    lj_model_family family;
    int V, d, I, L, nh, nkv, hd, max_pos, tie;
    double rope_factor; /* 0: no rope scaling */
} preset;

/* Shapes: docs/reference.md. The tiny presets keep the real vocabulary so that they
 * train on real Llama 3 / Qwen tokens. */
static const preset k_presets[] = {
    {"llama3.2-1b", LJ_FAMILY_LLAMA, 128256, 2048, 8192, 16, 32, 8, 64, 131072, 1, 32.0},
    {"llama3.2-3b", LJ_FAMILY_LLAMA, 128256, 3072, 8192, 28, 24, 8, 128, 131072, 1, 32.0},
    {"llama3-8b", LJ_FAMILY_LLAMA, 128256, 4096, 14336, 32, 32, 8, 128, 8192, 0, 0.0},
    {"llama3.1-8b", LJ_FAMILY_LLAMA, 128256, 4096, 14336, 32, 32, 8, 128, 131072, 0, 8.0},
    {"llama3-70b", LJ_FAMILY_LLAMA, 128256, 8192, 28672, 80, 64, 8, 128, 8192, 0, 0.0},
    {"llama3-tiny", LJ_FAMILY_LLAMA, 128256, 256, 768, 4, 4, 2, 64, 8192, 1, 32.0},
    {"llama3-nano", LJ_FAMILY_LLAMA, 128256, 64, 192, 2, 4, 2, 16, 8192, 1, 32.0},
    {"qwen3-0.6b", LJ_FAMILY_QWEN3, 151936, 1024, 3072, 28, 16, 8, 128, 40960, 1, 0.0},
    {"qwen3-1.7b", LJ_FAMILY_QWEN3, 151936, 2048, 6144, 28, 16, 8, 128, 40960, 1, 0.0},
    {"qwen3-4b", LJ_FAMILY_QWEN3, 151936, 2560, 9728, 36, 32, 8, 128, 40960, 1, 0.0},
    {"qwen3-8b", LJ_FAMILY_QWEN3, 151936, 4096, 12288, 36, 32, 8, 128, 40960, 0, 0.0},
    {"qwen3-14b", LJ_FAMILY_QWEN3, 151936, 5120, 17408, 40, 40, 8, 128, 40960, 0, 0.0},
    {"qwen3-32b", LJ_FAMILY_QWEN3, 151936, 5120, 25600, 64, 64, 8, 128, 40960, 0, 0.0},
    {"qwen3-tiny", LJ_FAMILY_QWEN3, 151936, 256, 768, 4, 4, 2, 128, 40960, 1, 0.0},
    {"qwen2.5-0.5b", LJ_FAMILY_QWEN2, 151936, 896, 4864, 24, 14, 2, 64, 32768, 1, 0.0},
};

const char *lj_config_preset_names(void) {
    return "llama3.2-1b, llama3.2-3b, llama3-8b, llama3.1-8b, llama3-70b, llama3-tiny, llama3-nano, qwen3-0.6b, "
           "qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b, qwen3-tiny, qwen2.5-0.5b";
}

const char *lj_model_family_type(lj_model_family f) {
    switch (f) {
    case LJ_FAMILY_LLAMA: return "llama";
    case LJ_FAMILY_QWEN2: return "qwen2";
    case LJ_FAMILY_QWEN3: return "qwen3";
    }
    return "?";
}

const char *lj_model_family_architecture(lj_model_family f) {
    switch (f) {
    case LJ_FAMILY_LLAMA: return "LlamaForCausalLM";
    case LJ_FAMILY_QWEN2: return "Qwen2ForCausalLM";
    case LJ_FAMILY_QWEN3: return "Qwen3ForCausalLM";
    }
    return "?";
}

/* The parts a family adds to the Llama block, and the defaults of its HF config class where they
 * differ from LlamaConfig's (Qwen2Config, Qwen3Config: rms_norm_eps 1e-6, rope_theta 10000, 32768
 * positions; the Qwen tokenizer's <|endoftext|> 151643 and <|im_end|> 151645). */
static void family_defaults(lj_model_config *cfg, lj_model_family f) {
    cfg->family = f;
    cfg->qk_norm = f == LJ_FAMILY_QWEN3;
    cfg->qkv_bias = f == LJ_FAMILY_QWEN2;
    if (f == LJ_FAMILY_LLAMA) return;
    cfg->rms_norm_eps = 1e-6;
    cfg->rope_theta = 10000.0;
    cfg->max_position_embeddings = 32768;
    cfg->bos_token_id = 151643;
    cfg->eos_token_id = 151645;
}

void lj_config_defaults(lj_model_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->rms_norm_eps = 1e-5;
    cfg->rope_theta = 500000.0;
    cfg->max_position_embeddings = 8192;
    cfg->rope_low_freq_factor = 1.0;
    cfg->rope_high_freq_factor = 4.0;
    cfg->rope_original_max_position_embeddings = 8192;
    cfg->bos_token_id = 128000;
    cfg->eos_token_id = 128001;
    cfg->initializer_range = 0.02;
}

lj_status lj_config_preset(const char *name, lj_model_config *cfg) {
    for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++) {
        const preset *p = &k_presets[i];
        if (strcmp(p->name, name) != 0) continue;
        lj_config_defaults(cfg);
        snprintf(cfg->name, sizeof cfg->name, "%s", p->name);
        cfg->vocab_size = p->V;
        cfg->hidden_size = p->d;
        cfg->intermediate_size = p->I;
        cfg->num_hidden_layers = p->L;
        cfg->num_attention_heads = p->nh;
        cfg->num_key_value_heads = p->nkv;
        cfg->head_dim = p->hd;
        cfg->max_position_embeddings = p->max_pos;
        cfg->tie_word_embeddings = p->tie;
        if (p->family != LJ_FAMILY_LLAMA) {
            family_defaults(cfg, p->family);
            cfg->max_position_embeddings = p->max_pos;
            cfg->rope_theta = 1000000.0;
            if (p->family == LJ_FAMILY_QWEN2) cfg->eos_token_id = 151643; /* the base model's */
        }
        if (p->rope_factor > 0) {
            cfg->rope_scaling_llama3 = 1;
            cfg->rope_factor = p->rope_factor;
        }
        return LJ_OK;
    }
    return lj_fail(LJ_ERR_ARG, "unknown model '%s' (presets: %s; or a config.json path)", name,
                   lj_config_preset_names());
}

lj_status lj_config_validate(const lj_model_config *c, const char *src) {
    const struct { const char *field; long long v; } pos[] = {
        {"vocab_size", c->vocab_size}, {"hidden_size", c->hidden_size},
        {"intermediate_size", c->intermediate_size}, {"num_hidden_layers", c->num_hidden_layers},
        {"num_attention_heads", c->num_attention_heads}, {"num_key_value_heads", c->num_key_value_heads},
        {"head_dim", c->head_dim}, {"max_position_embeddings", c->max_position_embeddings},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0) return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' must be positive (got %lld)", src, pos[i].field, pos[i].v);
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return lj_fail(LJ_ERR_FORMAT, "%s: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", src,
                       c->num_attention_heads, c->num_key_value_heads);
    if (c->num_hidden_layers > LJ_MAX_LAYERS)
        return lj_fail(LJ_ERR_FORMAT, "%s: num_hidden_layers (%d) is above the %d layers ljperf builds", src,
                       c->num_hidden_layers, LJ_MAX_LAYERS);
    if (c->head_dim % 2 != 0) return lj_fail(LJ_ERR_FORMAT, "%s: head_dim (%d) must be even for RoPE", src, c->head_dim);
    if (!(c->rms_norm_eps > 0)) return lj_fail(LJ_ERR_FORMAT, "%s: field 'rms_norm_eps' must be positive", src);
    if (!(c->rope_theta > 0)) return lj_fail(LJ_ERR_FORMAT, "%s: field 'rope_theta' must be positive", src);
    if (c->rope_scaling_llama3 && !(c->rope_factor > 0 && c->rope_high_freq_factor > c->rope_low_freq_factor &&
                                    c->rope_original_max_position_embeddings > 0))
        return lj_fail(LJ_ERR_FORMAT, "%s: field 'rope_scaling' has invalid llama3 parameters", src);
    if (c->bos_token_id >= c->vocab_size || c->eos_token_id >= c->vocab_size)
        return lj_fail(LJ_ERR_FORMAT, "%s: bos_token_id/eos_token_id must be below vocab_size (%d)", src, c->vocab_size);
    if (c->bos_token_id < 0 || c->eos_token_id < 0)
        return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' is %d: a token id must be >= 0", src,
                       c->bos_token_id < 0 ? "bos_token_id" : "eos_token_id",
                       c->bos_token_id < 0 ? c->bos_token_id : c->eos_token_id);
    /* limits: every size the layout, the plan and the kernels form from these stays in range
     * (int rows and columns, int64 totals); far above any published model */
    const struct { const char *field; long long v, max; } lim[] = {
        {"vocab_size", c->vocab_size, 1 << 24}, {"hidden_size", c->hidden_size, 1 << 20},
        {"intermediate_size", c->intermediate_size, 1 << 22}, {"num_attention_heads", c->num_attention_heads, 1 << 12},
        {"num_key_value_heads", c->num_key_value_heads, 1 << 12}, {"head_dim", c->head_dim, 1 << 12},
        {"num_attention_heads x head_dim", (long long)c->num_attention_heads * c->head_dim, 1 << 20},
        {"max_position_embeddings", c->max_position_embeddings, 1 << 24},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (lim[i].v > lim[i].max)
            return lj_fail(LJ_ERR_FORMAT, "%s: %s%s%s is %lld, above the %lld ljperf accepts", src,
                           strchr(lim[i].field, ' ') ? "" : "field '", lim[i].field, strchr(lim[i].field, ' ') ? "" : "'",
                           lim[i].v, lim[i].max);
    return LJ_OK;
}

/* Refuses a number that is not finite: JSON has no infinity, but 1e999 overflows to it (Python's
 * json reads it as inf too, so transformers would take it). */
static lj_status json_finite(const cJSON *it, const char *field, const char *path) {
    if (cJSON_IsNumber(it) && !isfinite(it->valuedouble))
        return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' is %g, not a finite number", path, field, it->valuedouble);
    return LJ_OK;
}

/* Refuses an object anywhere in `node` that holds a key twice: cJSON keeps the first value, Python's
 * json (and so transformers) the last, so the two would build different models. `where` is the
 * dotted path of `node` ("" at the top). */
static lj_status json_no_duplicates(const cJSON *node, const char *where, const char *path) {
    for (const cJSON *a = node->child; a; a = a->next) {
        if (cJSON_IsObject(node) && a->string)
            for (const cJSON *b = a->next; b; b = b->next)
                if (b->string && strcmp(a->string, b->string) == 0)
                    return lj_fail(LJ_ERR_FORMAT, "%s: field '%s%s' appears twice (ljperf would read the first value, "
                                                  "transformers the last): keep one", path, where, a->string);
        if (a->child) {
            char sub[256];
            if (cJSON_IsObject(node)) snprintf(sub, sizeof sub, "%s%s.", where, a->string ? a->string : "");
            else snprintf(sub, sizeof sub, "%s", where);
            LJ_TRY(json_no_duplicates(a, sub, path));
        }
    }
    return LJ_OK;
}

/* Reads an integer field; `required` fields that are missing are an error naming the field. An
 * array stands for a scalar only in eos_token_id (a list of end ids, as transformers allows; the
 * first is the one ljperf uses). */
static lj_status json_int(const cJSON *root, const char *field, int required, int *out, const char *path) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, field);
    if (!it || cJSON_IsNull(it)) {
        if (required) return lj_fail(LJ_ERR_FORMAT, "%s: missing field '%s'", path, field);
        return LJ_OK;
    }
    if (cJSON_IsArray(it)) {
        if (strcmp(field, "eos_token_id") != 0 || cJSON_GetArraySize(it) == 0)
            return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' is an array; it must be an integer%s", path, field,
                           strcmp(field, "eos_token_id") == 0 ? " or a non-empty list of integers" : "");
        for (const cJSON *e = it->child; e; e = e->next)
            if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble != (double)(int)e->valuedouble)
                return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' must list integers", path, field);
        it = it->child;
    }
    LJ_TRY(json_finite(it, field, path));
    if (cJSON_IsNumber(it) && (it->valuedouble > INT32_MAX || it->valuedouble < -INT32_MAX))
        return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' is %.0f, beyond the integers ljperf reads (%d at most)", path,
                       field, it->valuedouble, INT32_MAX);
    if (!cJSON_IsNumber(it) || it->valuedouble != (double)(int)it->valuedouble)
        return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' must be an integer", path, field);
    *out = (int)it->valuedouble;
    return LJ_OK;
}

static lj_status json_double(const cJSON *root, const char *field, double *out, const char *path) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, field);
    if (!it || cJSON_IsNull(it)) return LJ_OK;
    if (!cJSON_IsNumber(it)) return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' must be a number", path, field);
    LJ_TRY(json_finite(it, field, path));
    *out = it->valuedouble;
    return LJ_OK;
}

/* The family of a config.json by its model_type (absent: llama). Others differ in their layers
 * and are refused by name rather than loaded wrong (mistral: a sliding window; gemma: another
 * norm; qwen3_moe: experts). */
static lj_status check_family(const cJSON *root, const char *path, lj_model_family *family) {
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (mt && !cJSON_IsString(mt)) return lj_fail(LJ_ERR_FORMAT, "%s: field 'model_type' must be a string", path);
    const char *t = mt ? mt->valuestring : "llama";
    for (int f = LJ_FAMILY_LLAMA; f <= LJ_FAMILY_QWEN3; f++)
        if (strcmp(t, lj_model_family_type((lj_model_family)f)) == 0) {
            *family = (lj_model_family)f;
            return LJ_OK;
        }
    return lj_fail(LJ_ERR_UNSUPPORTED,
                   "%s: field 'model_type' is \"%s\"; this build trains the dense decoders of model_type \"llama\", "
                   "\"qwen2\" and \"qwen3\" only, and another family's layers would load wrong",
                   path, t);
}

static int json_true(const cJSON *root, const char *field) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, field);
    return it && cJSON_IsTrue(it);
}

/* A field that is present with a positive number (a MoE size or count). */
static int json_positive(const cJSON *root, const char *field) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, field);
    return it && cJSON_IsNumber(it) && it->valuedouble > 0;
}

/* The fields that would change the math of the layers and that ljperf does not build: refused by
 * name (config.h, lj_config_load). `L` is num_hidden_layers. */
static lj_status check_unsupported(const cJSON *root, const char *path, lj_model_family family, int L) {
    if (family == LJ_FAMILY_LLAMA) {
        const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
        if (sw && !cJSON_IsNull(sw))
            return lj_fail(LJ_ERR_UNSUPPORTED, "%s: field 'sliding_window': sliding-window attention is not supported",
                           path);
    } else if (json_true(root, "use_sliding_window")) {
        /* Qwen: layers i >= max_window_layers use the window (Qwen2Config, Qwen3Config) */
        const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
        int mwl = family == LJ_FAMILY_QWEN3 ? 28 : L;
        LJ_TRY(json_int(root, "max_window_layers", 0, &mwl, path));
        if (sw && !cJSON_IsNull(sw) && mwl < L)
            return lj_fail(LJ_ERR_UNSUPPORTED,
                           "%s: field 'use_sliding_window' is true with max_window_layers %d below the %d layers: "
                           "sliding-window attention is not supported",
                           path, mwl, L);
    }
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt)) return lj_fail(LJ_ERR_FORMAT, "%s: field 'layer_types' must be an array", path);
        for (const cJSON *it = lt->child; it; it = it->next)
            if (!cJSON_IsString(it) || strcmp(it->valuestring, "full_attention") != 0)
                return lj_fail(LJ_ERR_UNSUPPORTED,
                               "%s: field 'layer_types' has \"%s\": only \"full_attention\" layers are supported", path,
                               cJSON_IsString(it) ? it->valuestring : "(not a string)");
    }
    if (family != LJ_FAMILY_QWEN2 && json_true(root, "attention_bias"))
        return lj_fail(LJ_ERR_UNSUPPORTED,
                       "%s: field 'attention_bias': biases on the attention projections (o_proj included) are not "
                       "supported for model_type \"%s\" (Qwen2's q/k/v biases are)",
                       path, lj_model_family_type(family));
    if (json_true(root, "mlp_bias"))
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: field 'mlp_bias': biases on the MLP projections are not supported", path);
    if (json_true(root, "use_mrope"))
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: field 'use_mrope': multimodal RoPE is not supported", path);
    static const char *const moe[] = {"num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok",
                                      "moe_intermediate_size"};
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
        if (json_positive(root, moe[i]))
            return lj_fail(LJ_ERR_UNSUPPORTED, "%s: field '%s': mixture-of-experts layers are not supported", path, moe[i]);
    double dropout = 0.0;
    LJ_TRY(json_double(root, "attention_dropout", &dropout, path));
    if (dropout != 0.0)
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: field 'attention_dropout' is %g: attention dropout is not supported", path,
                       dropout);
    return LJ_OK;
}

/* partial_rotary_factor (top level or in rope_parameters): RoPE over a part of each head. */
static lj_status check_partial_rotary(const cJSON *obj, const char *path, const char *where) {
    double f = 1.0;
    LJ_TRY(json_double(obj, "partial_rotary_factor", &f, path));
    if (f != 1.0)
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: field '%spartial_rotary_factor' is %g: partial rotary embeddings are not "
                       "supported", path, where, f);
    return LJ_OK;
}

static lj_status config_parse(const cJSON *root, lj_model_config *cfg, const char *path) {
    lj_model_family family = LJ_FAMILY_LLAMA;
    LJ_TRY(check_family(root, path, &family));
    lj_config_defaults(cfg);
    family_defaults(cfg, family);
    const int qwen = family != LJ_FAMILY_LLAMA;
    cfg->max_position_embeddings = 0;
    LJ_TRY(json_int(root, "vocab_size", 1, &cfg->vocab_size, path));
    LJ_TRY(json_int(root, "hidden_size", 1, &cfg->hidden_size, path));
    LJ_TRY(json_int(root, "intermediate_size", 1, &cfg->intermediate_size, path));
    LJ_TRY(json_int(root, "num_hidden_layers", 1, &cfg->num_hidden_layers, path));
    LJ_TRY(json_int(root, "num_attention_heads", 1, &cfg->num_attention_heads, path));
    LJ_TRY(check_unsupported(root, path, family, cfg->num_hidden_layers));
    LJ_TRY(check_partial_rotary(root, path, ""));
    cfg->num_key_value_heads = cfg->num_attention_heads;
    LJ_TRY(json_int(root, "num_key_value_heads", 0, &cfg->num_key_value_heads, path));
    /* Qwen3Config's head_dim defaults to 128; the others' to hidden_size / heads */
    cfg->head_dim = family == LJ_FAMILY_QWEN3
                        ? 128
                        : cfg->hidden_size / (cfg->num_attention_heads > 0 ? cfg->num_attention_heads : 1);
    const int head_dim_given = cJSON_GetObjectItemCaseSensitive(root, "head_dim") &&
                               !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "head_dim"));
    LJ_TRY(json_int(root, "head_dim", 0, &cfg->head_dim, path));
    /* without head_dim, LlamaConfig / Qwen2Config take hidden_size // num_attention_heads, which drops a
     * remainder: most likely a typo, so it must be said (an explicit head_dim is taken as given) */
    if (!head_dim_given && family != LJ_FAMILY_QWEN3 && cfg->num_attention_heads > 0 &&
        cfg->hidden_size % cfg->num_attention_heads != 0)
        return lj_fail(LJ_ERR_FORMAT, "%s: hidden_size (%d) is not a multiple of num_attention_heads (%d), and without "
                                      "head_dim it is hidden_size // num_attention_heads = %d; give head_dim explicitly "
                                      "if the heads are meant to be that narrow", path, cfg->hidden_size,
                       cfg->num_attention_heads, cfg->hidden_size / cfg->num_attention_heads);
    cfg->max_position_embeddings = qwen ? 32768 : 2048;
    LJ_TRY(json_int(root, "max_position_embeddings", 0, &cfg->max_position_embeddings, path));
    LJ_TRY(json_int(root, "bos_token_id", 0, &cfg->bos_token_id, path));
    LJ_TRY(json_int(root, "eos_token_id", 0, &cfg->eos_token_id, path));
    LJ_TRY(json_double(root, "rms_norm_eps", &cfg->rms_norm_eps, path));
    LJ_TRY(json_double(root, "initializer_range", &cfg->initializer_range, path));
    LJ_TRY(json_double(root, "rope_theta", &cfg->rope_theta, path));
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    if (tie && !cJSON_IsBool(tie)) return lj_fail(LJ_ERR_FORMAT, "%s: field 'tie_word_embeddings' must be true or false", path);
    cfg->tie_word_embeddings = tie ? cJSON_IsTrue(tie) : 0;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: field 'hidden_act' must be \"silu\" (SwiGLU)", path);
    /* rope_scaling (transformers < 5) or rope_parameters (newer, rope_theta inside). */
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const char *rs_name = "rope_parameters";
    if (!rs || cJSON_IsNull(rs)) {
        rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
        rs_name = "rope_scaling";
    }
    if (rs && !cJSON_IsNull(rs)) {
        if (!cJSON_IsObject(rs)) return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' must be an object", path, rs_name);
        LJ_TRY(json_double(rs, "rope_theta", &cfg->rope_theta, path));
        LJ_TRY(check_partial_rotary(rs, path, strcmp(rs_name, "rope_parameters") == 0 ? "rope_parameters." : "rope_scaling."));
        const char *type_name = "rope_type";
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!type) type = cJSON_GetObjectItemCaseSensitive(rs, type_name = "type");
        if (type && !cJSON_IsString(type))
            return lj_fail(LJ_ERR_FORMAT, "%s: field '%s.%s' must be a string (\"default\" or \"llama3\")", path,
                           rs_name, type_name);
        const char *t = cJSON_IsString(type) ? type->valuestring : "default";
        if (strcmp(t, "llama3") == 0) {
            cfg->rope_scaling_llama3 = 1;
            LJ_TRY(json_double(rs, "factor", &cfg->rope_factor, path));
            LJ_TRY(json_double(rs, "low_freq_factor", &cfg->rope_low_freq_factor, path));
            LJ_TRY(json_double(rs, "high_freq_factor", &cfg->rope_high_freq_factor, path));
            LJ_TRY(json_int(rs, "original_max_position_embeddings", 0, &cfg->rope_original_max_position_embeddings, path));
        } else if (strcmp(t, "default") != 0) {
            return lj_fail(LJ_ERR_UNSUPPORTED, "%s: field '%s.rope_type' = \"%s\" is not supported (default or llama3)", path,
                           rs_name, t);
        }
    }
    return lj_config_validate(cfg, path);
}

lj_status lj_config_parse_json(const void *object, lj_model_config *cfg, const char *path) {
    return config_parse(object, cfg, path);
}

lj_status lj_config_read_json(const char *path, void **root_out) {
    char *text;
    *root_out = NULL;
    LJ_TRY(lj_file_read_all(path, &text, NULL));
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lj_fail(LJ_ERR_FORMAT, "%s: not a JSON object", path);
    }
    const lj_status s = json_no_duplicates(root, "", path);
    if (s != LJ_OK) {
        cJSON_Delete(root);
        return s;
    }
    *root_out = root;
    return LJ_OK;
}

lj_status lj_config_load(const char *path, lj_model_config *cfg) {
    void *root;
    LJ_TRY(lj_config_read_json(path, &root));
    lj_status s = config_parse(root, cfg, path);
    cJSON_Delete(root);
    if (s == LJ_OK) {
        const char *base = strrchr(path, '/');
        snprintf(cfg->name, sizeof cfg->name, "%s", base ? base + 1 : path);
    }
    return s;
}

lj_status lj_config_resolve(const char *model, lj_model_config *cfg) {
    struct stat st;
    if (stat(model, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            size_t n = strlen(model) + 16;
            char *p = lj_malloc(n);
            snprintf(p, n, "%s/config.json", model);
            lj_status s = lj_config_load(p, cfg);
            free(p);
            if (s == LJ_OK) snprintf(cfg->name, sizeof cfg->name, "%s", model);
            return s;
        }
        return lj_config_load(model, cfg);
    }
    const size_t len = strlen(model);
    if (strncmp(model, "deepspeed/", 10) != 0 && lj_hf_repo_id_like(model)) { /* a model of the HF cache */
        char snap[LJ_PATH_MAX];
        LJ_TRY(lj_hf_cache_snapshot(model, "--model", snap, sizeof snap));
        return lj_config_resolve(snap, cfg);
    }
    if ((strchr(model, '/') && !strchr(model, '.') && strncmp(model, "deepspeed/", 10) != 0) ||
        (len > 5 && strcmp(model + len - 5, ".json") == 0))
        return lj_fail(LJ_ERR_IO, "%s: no such file or directory", model);
    return lj_config_preset(model, cfg);
}

lj_status lj_config_save(const lj_model_config *c, const char *path, const char *dtype_name) {
    cJSON *root = cJSON_CreateObject();
    const int llama = c->family == LJ_FAMILY_LLAMA;
    cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(lj_model_family_architecture(c->family)));
    cJSON_AddStringToObject(root, "model_type", lj_model_family_type(c->family));
    if (c->family != LJ_FAMILY_QWEN2) cJSON_AddFalseToObject(root, "attention_bias"); /* Qwen2's are always on */
    cJSON_AddNumberToObject(root, "attention_dropout", 0.0);
    cJSON_AddNumberToObject(root, "bos_token_id", c->bos_token_id);
    cJSON_AddStringToObject(root, "dtype", dtype_name);
    cJSON_AddNumberToObject(root, "eos_token_id", c->eos_token_id);
    cJSON_AddNumberToObject(root, "head_dim", c->head_dim);
    cJSON_AddStringToObject(root, "hidden_act", "silu");
    cJSON_AddNumberToObject(root, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(root, "initializer_range", c->initializer_range);
    cJSON_AddNumberToObject(root, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(root, "max_position_embeddings", c->max_position_embeddings);
    if (llama) cJSON_AddFalseToObject(root, "mlp_bias");
    if (!llama) cJSON_AddNumberToObject(root, "max_window_layers", c->num_hidden_layers);
    cJSON_AddNumberToObject(root, "num_attention_heads", c->num_attention_heads);
    cJSON_AddNumberToObject(root, "num_hidden_layers", c->num_hidden_layers);
    cJSON_AddNumberToObject(root, "num_key_value_heads", c->num_key_value_heads);
    if (llama) cJSON_AddNumberToObject(root, "pretraining_tp", 1);
    cJSON_AddNumberToObject(root, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(root, "rope_theta", c->rope_theta);
    if (c->rope_scaling_llama3) {
        cJSON *rs = cJSON_AddObjectToObject(root, "rope_scaling");
        cJSON_AddNumberToObject(rs, "factor", c->rope_factor);
        cJSON_AddNumberToObject(rs, "high_freq_factor", c->rope_high_freq_factor);
        cJSON_AddNumberToObject(rs, "low_freq_factor", c->rope_low_freq_factor);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings", c->rope_original_max_position_embeddings);
        cJSON_AddStringToObject(rs, "rope_type", "llama3");
    } else {
        cJSON_AddNullToObject(root, "rope_scaling");
    }
    cJSON_AddBoolToObject(root, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddStringToObject(root, "torch_dtype", dtype_name);
    cJSON_AddStringToObject(root, "transformers_version", LJ_HF_TRANSFORMERS_VERSION);
    cJSON_AddTrueToObject(root, "use_cache");
    if (!llama) {
        cJSON_AddNullToObject(root, "sliding_window");
        cJSON_AddFalseToObject(root, "use_sliding_window");
    }
    cJSON_AddNumberToObject(root, "vocab_size", c->vocab_size);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    lj_status s = lj_file_write_atomic(path, text, strlen(text));
    free(text);
    return s;
}

void lj_param_layout_init(lj_param_layout *lo, const lj_model_config *c) {
    const int64_t d = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
    const int64_t q = (int64_t)c->num_attention_heads * c->head_dim;
    const int64_t kv = (int64_t)c->num_key_value_heads * c->head_dim;
    const int L = c->num_hidden_layers;
    memset(lo, 0, sizeof *lo);
    /* the order of a layer's parameters (config.h) */
    static const int order[] = {LJ_P_LN1,    LJ_P_Q,      LJ_P_K,      LJ_P_V,   LJ_P_Q_BIAS, LJ_P_K_BIAS, LJ_P_V_BIAS,
                                LJ_P_Q_NORM, LJ_P_K_NORM, LJ_P_O,      LJ_P_LN2, LJ_P_GATE,   LJ_P_UP,     LJ_P_DOWN};
    for (int i = 0; i < LJ_P_PER_LAYER; i++) lo->slot[i] = -1;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const int w = order[i];
        if ((w >= LJ_P_Q_BIAS && w <= LJ_P_V_BIAS && !c->qkv_bias) || ((w == LJ_P_Q_NORM || w == LJ_P_K_NORM) && !c->qk_norm))
            continue;
        lo->slot[w] = lo->per_layer++;
    }
    lo->count = 1 + L * lo->per_layer + 1 + (c->tie_word_embeddings ? 0 : 1);
    lo->params = lj_calloc((size_t)lo->count, sizeof(lj_param_info));
    int64_t off = 0;
    int n = 0;
#define ADD(layer_, kind_, rows_, cols_, ...)                                            \
    do {                                                                                 \
        lj_param_info *p = &lo->params[n++];                                             \
        snprintf(p->name, sizeof p->name, __VA_ARGS__);                                  \
        p->layer = (layer_);                                                             \
        p->kind = (kind_);                                                               \
        p->ndim = (cols_) > 0 ? 2 : 1;                                                   \
        p->shape[0] = (rows_);                                                           \
        p->shape[1] = (cols_) > 0 ? (cols_) : 1;                                         \
        p->numel = p->shape[0] * p->shape[1];                                            \
        p->offset = off;                                                                 \
        off += p->numel;                                                                 \
    } while (0)
    ADD(-1, LJ_PARAM_EMBEDDING, V, d, "model.embed_tokens.weight");
    lo->layer_offset0 = off;
    for (int l = 0; l < L; l++) {
        ADD(l, LJ_PARAM_NORM, d, 0, "model.layers.%d.input_layernorm.weight", l);
        ADD(l, LJ_PARAM_MATRIX, q, d, "model.layers.%d.self_attn.q_proj.weight", l);
        ADD(l, LJ_PARAM_MATRIX, kv, d, "model.layers.%d.self_attn.k_proj.weight", l);
        ADD(l, LJ_PARAM_MATRIX, kv, d, "model.layers.%d.self_attn.v_proj.weight", l);
        if (c->qkv_bias) {
            ADD(l, LJ_PARAM_BIAS, q, 0, "model.layers.%d.self_attn.q_proj.bias", l);
            ADD(l, LJ_PARAM_BIAS, kv, 0, "model.layers.%d.self_attn.k_proj.bias", l);
            ADD(l, LJ_PARAM_BIAS, kv, 0, "model.layers.%d.self_attn.v_proj.bias", l);
        }
        if (c->qk_norm) {
            ADD(l, LJ_PARAM_NORM, c->head_dim, 0, "model.layers.%d.self_attn.q_norm.weight", l);
            ADD(l, LJ_PARAM_NORM, c->head_dim, 0, "model.layers.%d.self_attn.k_norm.weight", l);
        }
        ADD(l, LJ_PARAM_MATRIX, d, q, "model.layers.%d.self_attn.o_proj.weight", l);
        ADD(l, LJ_PARAM_NORM, d, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(l, LJ_PARAM_MATRIX, I, d, "model.layers.%d.mlp.gate_proj.weight", l);
        ADD(l, LJ_PARAM_MATRIX, I, d, "model.layers.%d.mlp.up_proj.weight", l);
        ADD(l, LJ_PARAM_MATRIX, d, I, "model.layers.%d.mlp.down_proj.weight", l);
    }
    lo->layer_numel = L > 0 ? (off - lo->layer_offset0) / L : 0;
    lo->final_norm = n;
    ADD(-1, LJ_PARAM_NORM, d, 0, "model.norm.weight");
    lo->embed = 0;
    if (c->tie_word_embeddings) {
        lo->lm_head = 0;
    } else {
        lo->lm_head = n;
        ADD(-1, LJ_PARAM_EMBEDDING, V, d, "lm_head.weight");
    }
#undef ADD
    LJ_ASSERT(n == lo->count);
    lo->total = off;
}

void lj_param_layout_free(lj_param_layout *lo) {
    free(lo->params);
    memset(lo, 0, sizeof *lo);
}

int lj_param_find(const lj_param_layout *lo, const char *name) {
    for (int i = 0; i < lo->count; i++)
        if (strcmp(lo->params[i].name, name) == 0) return i;
    return -1;
}

int64_t lj_config_num_params(const lj_model_config *c) {
    lj_param_layout lo;
    lj_param_layout_init(&lo, c);
    int64_t n = lo.total;
    lj_param_layout_free(&lo);
    return n;
}

int64_t lj_config_num_matmul_params(const lj_model_config *c) {
    const int64_t d = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
    const int64_t q = (int64_t)c->num_attention_heads * c->head_dim;
    const int64_t kv = (int64_t)c->num_key_value_heads * c->head_dim;
    int64_t per_layer = d * (q + 2 * kv) + q * d + 3 * d * I;
    return per_layer * c->num_hidden_layers + V * d;
}

double lj_config_flops_per_token(const lj_model_config *c, int seq_length) {
    return 6.0 * (double)lj_config_num_matmul_params(c) +
           12.0 * c->num_hidden_layers * (double)c->hidden_size * (double)seq_length;
}

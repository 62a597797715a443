/* vl.c: Qwen3-VL presets, the qwen3_vl config.json load (strict) and the vision tower's
 * parameter layout. */
#include "config/vl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *name;
    int V, d, I, L, nh, nkv, hd, tie;          /* text */
    int depth, vh, vi, vheads, out, npos;      /* vision */
    int ds[3];
} vl_preset;

/* Shapes: docs/qwen3-vl-model.md (the published config.json values). */
static const vl_preset k_vl_presets[] = {
    {"qwen3-vl-2b", 151936, 2048, 6144, 28, 16, 8, 128, 1, 24, 1024, 4096, 16, 2048, 2304, {5, 11, 17}},
    {"qwen3-vl-4b", 151936, 2560, 9728, 36, 32, 8, 128, 1, 24, 1024, 4096, 16, 2560, 2304, {5, 11, 17}},
    {"qwen3-vl-8b", 151936, 4096, 12288, 36, 32, 8, 128, 0, 27, 1152, 4304, 16, 4096, 2304, {8, 16, 24}},
    {"qwen3-vl-tiny", 151936, 64, 128, 4, 4, 2, 32, 1, 4, 32, 64, 2, 64, 64, {0, 2, 3}},
    {"qwen3-vl-fixture", 256, 64, 128, 4, 4, 2, 32, 0, 4, 32, 64, 2, 64, 64, {0, 2, 3}},
};

const char *lj_vl_config_preset_names(void) { return "qwen3-vl-2b, qwen3-vl-4b, qwen3-vl-8b, qwen3-vl-tiny, qwen3-vl-fixture"; }

/* HF Qwen3VLVisionConfig's defaults. */
static void vision_defaults(lj_vision_config *v) {
    memset(v, 0, sizeof *v);
    v->depth = 27;
    v->hidden_size = 1152;
    v->intermediate_size = 4304;
    v->num_heads = 16;
    v->in_channels = 3;
    v->patch_size = 16;
    v->temporal_patch_size = 2;
    v->spatial_merge_size = 2;
    v->out_hidden_size = 3584;
    v->num_position_embeddings = 2304;
    v->num_deepstack = 3;
    v->deepstack_visual_indexes[0] = 8;
    v->deepstack_visual_indexes[1] = 16;
    v->deepstack_visual_indexes[2] = 24;
    v->gelu_tanh = 1;
    v->initializer_range = 0.02;
}

/* The published token ids (Qwen2-family tokenizer) and MRoPE sections. */
static void vl_defaults(lj_vl_config *c) {
    c->image_token_id = 151655;
    c->video_token_id = 151656;
    c->vision_start_token_id = 151652;
    c->vision_end_token_id = 151653;
    c->mrope_section[0] = 24;
    c->mrope_section[1] = 20;
    c->mrope_section[2] = 20;
}

lj_status lj_vl_config_preset(const char *name, lj_vl_config *cfg) {
    for (size_t i = 0; i < sizeof k_vl_presets / sizeof k_vl_presets[0]; i++) {
        const vl_preset *p = &k_vl_presets[i];
        if (strcmp(p->name, name) != 0) continue;
        memset(cfg, 0, sizeof *cfg);
        snprintf(cfg->name, sizeof cfg->name, "%s", p->name);
        LJ_TRY(lj_config_preset("qwen3-0.6b", &cfg->text)); /* the Qwen3 family's settings */
        lj_model_config *t = &cfg->text;
        snprintf(t->name, sizeof t->name, "%s", p->name);
        t->vocab_size = p->V;
        t->hidden_size = p->d;
        t->intermediate_size = p->I;
        t->num_hidden_layers = p->L;
        t->num_attention_heads = p->nh;
        t->num_key_value_heads = p->nkv;
        t->head_dim = p->hd;
        t->tie_word_embeddings = p->tie;
        t->rope_theta = 5000000.0;
        t->max_position_embeddings = 262144;
        vision_defaults(&cfg->vision);
        lj_vision_config *v = &cfg->vision;
        v->depth = p->depth;
        v->hidden_size = p->vh;
        v->intermediate_size = p->vi;
        v->num_heads = p->vheads;
        v->out_hidden_size = p->out;
        v->num_position_embeddings = p->npos;
        for (int k = 0; k < 3; k++) v->deepstack_visual_indexes[k] = p->ds[k];
        vl_defaults(cfg);
        if (strcmp(p->name, "qwen3-vl-tiny") == 0 || strcmp(p->name, "qwen3-vl-fixture") == 0) {
            t->max_position_embeddings = 1024;
            cfg->mrope_section[0] = 6; /* head_dim 32 */
            cfg->mrope_section[1] = 5;
            cfg->mrope_section[2] = 5;
        }
        if (strcmp(p->name, "qwen3-vl-fixture") == 0) { /* tests/fixtures/make_qwen3vl_fixtures.py */
            t->bos_token_id = 1;
            t->eos_token_id = 2;
            cfg->image_token_id = 250;
            cfg->video_token_id = 251;
            cfg->vision_start_token_id = 252;
            cfg->vision_end_token_id = 253;
        }
        return lj_vl_config_validate(cfg, p->name);
    }
    return lj_fail(LJ_ERR_ARG, "unknown model '%s' (Qwen3-VL presets: %s; or a config.json path)", name,
                   lj_vl_config_preset_names());
}

lj_status lj_vl_config_validate(const lj_vl_config *c, const char *src) {
    LJ_TRY(lj_config_validate(&c->text, src));
    const lj_vision_config *v = &c->vision;
    const struct { const char *field; int value; } pos[] = {
        {"vision_config.depth", v->depth}, {"vision_config.hidden_size", v->hidden_size},
        {"vision_config.intermediate_size", v->intermediate_size}, {"vision_config.num_heads", v->num_heads},
        {"vision_config.in_channels", v->in_channels}, {"vision_config.patch_size", v->patch_size},
        {"vision_config.temporal_patch_size", v->temporal_patch_size},
        {"vision_config.spatial_merge_size", v->spatial_merge_size},
        {"vision_config.out_hidden_size", v->out_hidden_size},
        {"vision_config.num_position_embeddings", v->num_position_embeddings},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].value <= 0)
            return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' is %d; expected a positive integer", src, pos[i].field,
                           pos[i].value);
    if (v->hidden_size % v->num_heads != 0 || (v->hidden_size / v->num_heads) % 4 != 0)
        return lj_fail(LJ_ERR_FORMAT,
                       "%s: vision_config.hidden_size %d / num_heads %d must give a head_dim that is a multiple of 4 "
                       "(the 2-D RoPE's row and column halves)",
                       src, v->hidden_size, v->num_heads);
    const int g = (int)lround(sqrt((double)v->num_position_embeddings));
    if (g * g != v->num_position_embeddings)
        return lj_fail(LJ_ERR_FORMAT, "%s: field 'vision_config.num_position_embeddings' is %d; expected a square", src,
                       v->num_position_embeddings);
    if (v->out_hidden_size != c->text.hidden_size)
        return lj_fail(LJ_ERR_FORMAT, "%s: vision_config.out_hidden_size %d differs from text_config.hidden_size %d",
                       src, v->out_hidden_size, c->text.hidden_size);
    if (v->num_deepstack < 0 || v->num_deepstack > LJ_VISION_MAX_DEEPSTACK ||
        v->num_deepstack > c->text.num_hidden_layers)
        return lj_fail(LJ_ERR_FORMAT,
                       "%s: field 'vision_config.deepstack_visual_indexes' has %d entries; at most %d and no more than "
                       "the %d text layers",
                       src, v->num_deepstack, LJ_VISION_MAX_DEEPSTACK, c->text.num_hidden_layers);
    for (int k = 0; k < v->num_deepstack; k++) {
        const int d = v->deepstack_visual_indexes[k];
        if (d < 0 || d >= v->depth || (k > 0 && d <= v->deepstack_visual_indexes[k - 1]))
            return lj_fail(LJ_ERR_FORMAT,
                           "%s: field 'vision_config.deepstack_visual_indexes' entry %d is %d; expected increasing "
                           "block indices below depth %d",
                           src, k, d, v->depth);
    }
    const int half = c->text.head_dim / 2, *ms = c->mrope_section;
    if (ms[0] < 0 || ms[1] < 0 || ms[2] < 0 || ms[0] + ms[1] + ms[2] != half || 3 * ms[1] > half ||
        3 * ms[2] > half)
        return lj_fail(LJ_ERR_FORMAT,
                       "%s: field 'mrope_section' is [%d, %d, %d]; expected sections summing to head_dim / 2 = %d with "
                       "3 * section[1] and 3 * section[2] at most %d",
                       src, ms[0], ms[1], ms[2], half, half);
    return LJ_OK;
}

/* ---- config.json ---------------------------------------------------------------- */

static lj_status read_int(const cJSON *obj, const char *field, int *out, const char *path, const char *where) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, field);
    if (!it || cJSON_IsNull(it)) return LJ_OK;
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || fabs(it->valuedouble) > 1e9)
        return lj_fail(LJ_ERR_FORMAT, "%s: field '%s%s' must be an integer", path, where, field);
    *out = (int)it->valuedouble;
    return LJ_OK;
}

/* An int array field of at most `max` entries into out[], its length into *n. */
static lj_status read_int_array(const cJSON *obj, const char *field, int max, int *out, int *n, const char *path,
                                const char *where) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, field);
    if (!it || cJSON_IsNull(it)) return LJ_OK;
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) > max)
        return lj_fail(LJ_ERR_FORMAT, "%s: field '%s%s' must be an array of at most %d integers", path, where, field,
                       max);
    int k = 0;
    for (const cJSON *e = it->child; e; e = e->next, k++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble))
            return lj_fail(LJ_ERR_FORMAT, "%s: field '%s%s' entry %d must be an integer", path, where, field, k);
        out[k] = (int)e->valuedouble;
    }
    *n = k;
    return LJ_OK;
}

static lj_status parse_vision(const cJSON *vj, lj_vision_config *v, const char *path) {
    vision_defaults(v);
    const char *w = "vision_config.";
    const struct { const char *field; int *dst; } ints[] = {
        {"depth", &v->depth}, {"hidden_size", &v->hidden_size}, {"intermediate_size", &v->intermediate_size},
        {"num_heads", &v->num_heads}, {"in_channels", &v->in_channels}, {"patch_size", &v->patch_size},
        {"temporal_patch_size", &v->temporal_patch_size}, {"spatial_merge_size", &v->spatial_merge_size},
        {"out_hidden_size", &v->out_hidden_size}, {"num_position_embeddings", &v->num_position_embeddings},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) LJ_TRY(read_int(vj, ints[i].field, ints[i].dst, path, w));
    LJ_TRY(read_int_array(vj, "deepstack_visual_indexes", LJ_VISION_MAX_DEEPSTACK, v->deepstack_visual_indexes,
                          &v->num_deepstack, path, w));
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(vj, "hidden_act");
    if (act && !cJSON_IsNull(act)) {
        if (cJSON_IsString(act) && strcmp(act->valuestring, "gelu_pytorch_tanh") == 0) v->gelu_tanh = 1;
        else if (cJSON_IsString(act) && strcmp(act->valuestring, "gelu") == 0) v->gelu_tanh = 0;
        else
            return lj_fail(LJ_ERR_UNSUPPORTED,
                           "%s: field 'vision_config.hidden_act' is \"%s\"; expected \"gelu_pytorch_tanh\" or \"gelu\"",
                           path, cJSON_IsString(act) ? act->valuestring : "(not a string)");
    }
    const cJSON *ir = cJSON_GetObjectItemCaseSensitive(vj, "initializer_range");
    if (cJSON_IsNumber(ir)) v->initializer_range = ir->valuedouble;
    return LJ_OK;
}

/* mrope_section and mrope_interleaved, from the text config's rope_parameters or rope_scaling. */
static lj_status parse_mrope(const cJSON *tj, lj_vl_config *c, const char *path) {
    const char *names[] = {"rope_parameters", "rope_scaling"};
    for (int k = 0; k < 2; k++) {
        const cJSON *rp = cJSON_GetObjectItemCaseSensitive(tj, names[k]);
        if (!rp || !cJSON_IsObject(rp)) continue;
        char where[48];
        snprintf(where, sizeof where, "text_config.%s.", names[k]);
        int n = 3;
        LJ_TRY(read_int_array(rp, "mrope_section", 3, c->mrope_section, &n, path, where));
        if (n != 3) return lj_fail(LJ_ERR_FORMAT, "%s: field '%smrope_section' must have 3 entries", path, where);
        const cJSON *il = cJSON_GetObjectItemCaseSensitive(rp, "mrope_interleaved");
        if (il && !cJSON_IsTrue(il))
            return lj_fail(LJ_ERR_UNSUPPORTED,
                           "%s: field '%smrope_interleaved' is not true: the chunked (Qwen2-VL) MRoPE layout is not "
                           "supported",
                           path, where);
        return LJ_OK;
    }
    return LJ_OK;
}

static lj_status vl_parse(const cJSON *root, lj_vl_config *c, const char *path) {
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "qwen3_vl") != 0)
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: field 'model_type' is \"%s\"; expected \"qwen3_vl\"", path,
                       cJSON_IsString(mt) ? mt->valuestring : "(absent)");
    const cJSON *tj = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    const cJSON *vj = cJSON_GetObjectItemCaseSensitive(root, "vision_config");
    if (!cJSON_IsObject(tj)) return lj_fail(LJ_ERR_FORMAT, "%s: missing object field 'text_config'", path);
    if (!cJSON_IsObject(vj)) return lj_fail(LJ_ERR_FORMAT, "%s: missing object field 'vision_config'", path);
    memset(c, 0, sizeof *c);
    vl_defaults(c);
    /* the text model is a Qwen3 decoder: parse a copy under that model_type, so that every field
     * config.c refuses is refused here too */
    cJSON *text = cJSON_Duplicate(tj, 1);
    if (!text) return lj_fail(LJ_ERR_OOM, "%s: out of memory", path);
    cJSON_DeleteItemFromObjectCaseSensitive(text, "model_type");
    cJSON_AddStringToObject(text, "model_type", "qwen3");
    char where[1100];
    snprintf(where, sizeof where, "%s (text_config)", path);
    lj_status s = lj_config_parse_json(text, &c->text, where);
    cJSON_Delete(text);
    LJ_TRY(s);
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    if (tie && !cJSON_IsNull(tie)) {
        if (!cJSON_IsBool(tie))
            return lj_fail(LJ_ERR_FORMAT, "%s: field 'tie_word_embeddings' must be true or false", path);
        c->text.tie_word_embeddings = cJSON_IsTrue(tie);
    }
    LJ_TRY(parse_mrope(tj, c, path));
    LJ_TRY(parse_vision(vj, &c->vision, path));
    const struct { const char *field; int *dst; } ids[] = {
        {"image_token_id", &c->image_token_id}, {"video_token_id", &c->video_token_id},
        {"vision_start_token_id", &c->vision_start_token_id}, {"vision_end_token_id", &c->vision_end_token_id},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) LJ_TRY(read_int(root, ids[i].field, ids[i].dst, path, ""));
    if (c->image_token_id < 0 || c->image_token_id >= c->text.vocab_size)
        return lj_fail(LJ_ERR_FORMAT, "%s: field 'image_token_id' is %d, outside the vocabulary of %d", path,
                       c->image_token_id, c->text.vocab_size);
    return lj_vl_config_validate(c, path);
}

lj_status lj_vl_config_load(const char *path, lj_vl_config *cfg) {
    void *root;
    LJ_TRY(lj_config_read_json(path, &root)); /* an object without duplicate keys */
    lj_status s = vl_parse(root, cfg, path);
    cJSON_Delete(root);
    if (s == LJ_OK) {
        const char *base = strrchr(path, '/');
        snprintf(cfg->name, sizeof cfg->name, "%s", base ? base + 1 : path);
    }
    return s;
}

lj_status lj_vl_config_resolve(const char *model, lj_vl_config *cfg) {
    struct stat st;
    if (stat(model, &st) != 0) return lj_vl_config_preset(model, cfg);
    if (!S_ISDIR(st.st_mode)) return lj_vl_config_load(model, cfg);
    size_t n = strlen(model) + 16;
    char *p = lj_malloc(n);
    snprintf(p, n, "%s/config.json", model);
    lj_status s = lj_vl_config_load(p, cfg);
    free(p);
    return s;
}

/* ---- vision layout -------------------------------------------------------------- */

static void add_param(lj_vision_layout *lo, int cap, const char *name, int64_t rows, int64_t cols, lj_param_kind kind,
                      int layer) {
    LJ_ASSERT(lo->count < cap, "vision layout: too many parameters");
    lj_param_info *p = &lo->params[lo->count++];
    snprintf(p->name, sizeof p->name, "model.visual.%.70s", name);
    p->ndim = cols > 0 ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols > 0 ? cols : 1;
    p->numel = rows * (cols > 0 ? cols : 1);
    p->offset = lo->total;
    p->layer = layer;
    p->kind = kind;
    lo->total += p->numel;
}

void lj_vision_layout_init(lj_vision_layout *lo, const lj_vision_config *v) {
    memset(lo, 0, sizeof *lo);
    const int cap = 3 + v->depth * LJ_VP_PER_BLOCK + (1 + v->num_deepstack) * LJ_VM_PER_MERGER;
    lo->params = lj_calloc((size_t)cap, sizeof(lj_param_info));
    const int64_t V = v->hidden_size, I = v->intermediate_size, O = v->out_hidden_size;
    const int64_t M = V * v->spatial_merge_size * v->spatial_merge_size;
    lo->patch_w = lo->count;
    add_param(lo, cap, "patch_embed.proj.weight", V, lj_vision_patch_dim(v), LJ_PARAM_MATRIX, -1);
    lo->patch_b = lo->count;
    add_param(lo, cap, "patch_embed.proj.bias", V, 0, LJ_PARAM_BIAS, -1);
    lo->pos = lo->count;
    add_param(lo, cap, "pos_embed.weight", v->num_position_embeddings, V, LJ_PARAM_EMBEDDING, -1);
    lo->block0 = lo->count;
    char name[80];
    for (int i = 0; i < v->depth; i++) {
        static const char *const part[LJ_VP_PER_BLOCK] = {
            "norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
            "norm2.weight", "norm2.bias", "mlp.linear_fc1.weight", "mlp.linear_fc1.bias", "mlp.linear_fc2.weight",
            "mlp.linear_fc2.bias"};
        const int64_t rows[LJ_VP_PER_BLOCK] = {V, V, 3 * V, 3 * V, V, V, V, V, I, I, V, V};
        const int64_t cols[LJ_VP_PER_BLOCK] = {0, 0, V, 0, V, 0, 0, 0, V, 0, I, 0};
        for (int k = 0; k < LJ_VP_PER_BLOCK; k++) {
            snprintf(name, sizeof name, "blocks.%d.%s", i, part[k]);
            const lj_param_kind kind = cols[k] ? LJ_PARAM_MATRIX
                                               : (k == LJ_VP_LN1_W || k == LJ_VP_LN2_W ? LJ_PARAM_NORM : LJ_PARAM_BIAS);
            add_param(lo, cap, name, rows[k], cols[k], kind, i);
        }
    }
    lo->merger0 = lo->count;
    for (int j = 0; j <= v->num_deepstack; j++) {
        static const char *const part[LJ_VM_PER_MERGER] = {"norm.weight", "norm.bias", "linear_fc1.weight",
                                                            "linear_fc1.bias", "linear_fc2.weight", "linear_fc2.bias"};
        const int64_t nw = j == 0 ? V : M;
        const int64_t rows[LJ_VM_PER_MERGER] = {nw, nw, M, M, O, O};
        const int64_t cols[LJ_VM_PER_MERGER] = {0, 0, M, 0, M, 0};
        for (int k = 0; k < LJ_VM_PER_MERGER; k++) {
            if (j == 0) snprintf(name, sizeof name, "merger.%s", part[k]);
            else snprintf(name, sizeof name, "deepstack_merger_list.%d.%s", j - 1, part[k]);
            const lj_param_kind kind = cols[k] ? LJ_PARAM_MATRIX : (k == LJ_VM_NORM_W ? LJ_PARAM_NORM : LJ_PARAM_BIAS);
            add_param(lo, cap, name, rows[k], cols[k], kind, -1);
        }
    }
}

void lj_vision_layout_free(lj_vision_layout *lo) {
    free(lo->params);
    memset(lo, 0, sizeof *lo);
}

void lj_vl_text_hf_name(const char *name, char *buf, size_t len) {
    if (strncmp(name, "model.", 6) == 0) snprintf(buf, len, "model.language_model.%s", name + 6);
    else snprintf(buf, len, "%s", name);
}

double lj_vision_flops_per_frame(const lj_vision_config *v, int64_t patches) {
    const double V = v->hidden_size, I = v->intermediate_size, P = lj_vision_patch_dim(v);
    const double m2 = (double)v->spatial_merge_size * v->spatial_merge_size, M = m2 * V, O = v->out_hidden_size;
    const double n = (double)patches;
    return 6.0 * (P * V + v->depth * (4.0 * V * V + 2.0 * V * I)) * n +
           6.0 * (1 + v->num_deepstack) * (M * M + M * O) * (n / m2) + 12.0 * v->depth * V * n * n;
}

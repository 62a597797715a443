/* hf_vl_export.c: the Hugging Face export of a Qwen3-VL model (see hf_vl.h): config.json,
 * model.safetensors, the processor's configs, the chat template and the tokenizer files. */
#include "io/hf_vl.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "base/fs.h"
#include "io/safetensors.h"

/* Qwen3-VL's chat template (the Instruct models' tokenizer_config.json chat_template, without
 * its tool-calling branch): ChatML turns, no default system prompt; an image content item is
 * <|vision_start|><|image_pad|><|vision_end|> (the processor expands the pad to the image's
 * tokens), a video item the same with <|video_pad|>; add_vision_id prefixes "Picture N: ". */
static const char k_chat_template[] =
    "{%- set image_count = namespace(value=0) %}"
    "{%- set video_count = namespace(value=0) %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}"
    "{{- message.content }}"
    "{%- else %}"
    "{%- for content in message.content %}"
    "{%- if content.type == 'image' or 'image' in content or 'image_url' in content %}"
    "{%- set image_count.value = image_count.value + 1 %}"
    "{%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif content.type == 'video' or 'video' in content %}"
    "{%- set video_count.value = video_count.value + 1 %}"
    "{%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{%- elif 'text' in content %}"
    "{{- content.text }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}";

const char *lj_hf_vl_chat_template(void) { return k_chat_template; }

static lj_status write_json(const char *dir, const char *name, cJSON *j) {
    char path[LJ_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    const lj_status s = lj_file_write_atomic(path, text, strlen(text));
    free(text);
    return s;
}

static cJSON *int_array(const int *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static cJSON *config_json(const lj_vl_config *c, const char *torch_dtype) {
    const lj_model_config *t = &c->text;
    const lj_vision_config *v = &c->vision;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "architectures", cJSON_CreateStringArray((const char *[]){"Qwen3VLForConditionalGeneration"}, 1));
    cJSON_AddStringToObject(j, "model_type", "qwen3_vl");
    cJSON_AddStringToObject(j, "dtype", torch_dtype);
    /* the layout of transformers 5 (rope_parameters); config/config.h says why the field matters */
    cJSON_AddStringToObject(j, "transformers_version", "5.0.0");
    cJSON_AddNumberToObject(j, "image_token_id", c->image_token_id);
    cJSON_AddNumberToObject(j, "video_token_id", c->video_token_id);
    cJSON_AddNumberToObject(j, "vision_start_token_id", c->vision_start_token_id);
    cJSON_AddNumberToObject(j, "vision_end_token_id", c->vision_end_token_id);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", t->tie_word_embeddings);
    cJSON *tc = cJSON_AddObjectToObject(j, "text_config");
    cJSON_AddStringToObject(tc, "model_type", "qwen3_vl_text");
    cJSON_AddNumberToObject(tc, "vocab_size", t->vocab_size);
    cJSON_AddNumberToObject(tc, "hidden_size", t->hidden_size);
    cJSON_AddNumberToObject(tc, "intermediate_size", t->intermediate_size);
    cJSON_AddNumberToObject(tc, "num_hidden_layers", t->num_hidden_layers);
    cJSON_AddNumberToObject(tc, "num_attention_heads", t->num_attention_heads);
    cJSON_AddNumberToObject(tc, "num_key_value_heads", t->num_key_value_heads);
    cJSON_AddNumberToObject(tc, "head_dim", t->head_dim);
    cJSON_AddStringToObject(tc, "hidden_act", "silu");
    cJSON_AddNumberToObject(tc, "max_position_embeddings", t->max_position_embeddings);
    cJSON_AddNumberToObject(tc, "rms_norm_eps", t->rms_norm_eps);
    cJSON_AddBoolToObject(tc, "attention_bias", 0);
    cJSON_AddNumberToObject(tc, "attention_dropout", 0.0);
    cJSON_AddNumberToObject(tc, "initializer_range", t->initializer_range);
    cJSON_AddNumberToObject(tc, "bos_token_id", t->bos_token_id);
    cJSON_AddNumberToObject(tc, "eos_token_id", t->eos_token_id);
    cJSON_AddBoolToObject(tc, "tie_word_embeddings", t->tie_word_embeddings);
    cJSON *rp = cJSON_AddObjectToObject(tc, "rope_parameters");
    cJSON_AddStringToObject(rp, "rope_type", "default");
    cJSON_AddNumberToObject(rp, "rope_theta", t->rope_theta);
    cJSON_AddItemToObject(rp, "mrope_section", int_array(c->mrope_section, 3));
    cJSON_AddBoolToObject(rp, "mrope_interleaved", 1);
    cJSON *vc = cJSON_AddObjectToObject(j, "vision_config");
    cJSON_AddStringToObject(vc, "model_type", "qwen3_vl_vision");
    cJSON_AddNumberToObject(vc, "depth", v->depth);
    cJSON_AddNumberToObject(vc, "hidden_size", v->hidden_size);
    cJSON_AddNumberToObject(vc, "intermediate_size", v->intermediate_size);
    cJSON_AddNumberToObject(vc, "num_heads", v->num_heads);
    cJSON_AddNumberToObject(vc, "in_channels", v->in_channels);
    cJSON_AddNumberToObject(vc, "patch_size", v->patch_size);
    cJSON_AddNumberToObject(vc, "temporal_patch_size", v->temporal_patch_size);
    cJSON_AddNumberToObject(vc, "spatial_merge_size", v->spatial_merge_size);
    cJSON_AddNumberToObject(vc, "out_hidden_size", v->out_hidden_size);
    cJSON_AddNumberToObject(vc, "num_position_embeddings", v->num_position_embeddings);
    cJSON_AddItemToObject(vc, "deepstack_visual_indexes", int_array(v->deepstack_visual_indexes, v->num_deepstack));
    cJSON_AddStringToObject(vc, "hidden_act", v->gelu_tanh ? "gelu_pytorch_tanh" : "gelu");
    cJSON_AddNumberToObject(vc, "initializer_range", v->initializer_range);
    return j;
}

/* preprocessor_config.json (the image processor) and video_preprocessor_config.json, as the
 * published Qwen3-VL checkpoints have them (docs/qwen3-vl.md). */
static cJSON *processor_json(const lj_vl_config *c, int video, int64_t min_pixels, int64_t max_pixels) {
    const lj_vision_config *v = &c->vision;
    cJSON *j = cJSON_CreateObject();
    if (video) cJSON_AddStringToObject(j, "video_processor_type", "Qwen3VLVideoProcessor");
    else cJSON_AddStringToObject(j, "image_processor_type", "Qwen2VLImageProcessorFast");
    cJSON_AddStringToObject(j, "processor_class", "Qwen3VLProcessor");
    cJSON_AddBoolToObject(j, "do_convert_rgb", 1);
    cJSON_AddBoolToObject(j, "do_normalize", 1);
    cJSON_AddBoolToObject(j, "do_rescale", 1);
    cJSON_AddBoolToObject(j, "do_resize", 1);
    const double half[3] = {0.5, 0.5, 0.5};
    cJSON_AddItemToObject(j, "image_mean", cJSON_CreateDoubleArray(half, 3));
    cJSON_AddItemToObject(j, "image_std", cJSON_CreateDoubleArray(half, 3));
    cJSON_AddNumberToObject(j, "rescale_factor", 1.0 / 255.0);
    cJSON_AddNumberToObject(j, "resample", 3);
    cJSON_AddNumberToObject(j, "patch_size", v->patch_size);
    cJSON_AddNumberToObject(j, "temporal_patch_size", v->temporal_patch_size);
    cJSON_AddNumberToObject(j, "merge_size", v->spatial_merge_size);
    cJSON *size = cJSON_AddObjectToObject(j, "size");
    cJSON_AddNumberToObject(size, "shortest_edge", video ? 4096 : min_pixels > 0 ? (double)min_pixels : 65536);
    cJSON_AddNumberToObject(size, "longest_edge", video ? 25165824 : max_pixels > 0 ? (double)max_pixels : 16777216);
    return j;
}

/* The tokenizer files of tokenizer_dir (tokenizer.json, tokenizer_config.json) with the chat
 * template put into tokenizer_config.json, and chat_template.jinja. */
static lj_status export_tokenizer(const char *dir, const char *tokenizer_dir) {
    char src[LJ_PATH_MAX + 64], dst[LJ_PATH_MAX + 64];
    char *text = NULL;
    size_t len = 0;
    snprintf(src, sizeof src, "%s/tokenizer.json", tokenizer_dir);
    LJ_TRY(lj_file_read_all(src, &text, &len));
    snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
    lj_status s = lj_file_write_atomic(dst, text, len);
    free(text);
    LJ_TRY(s);
    snprintf(src, sizeof src, "%s/tokenizer_config.json", tokenizer_dir);
    LJ_TRY(lj_file_read_all(src, &text, &len));
    cJSON *tc = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(tc)) {
        cJSON_Delete(tc);
        return lj_fail(LJ_ERR_FORMAT, "%s: not a JSON object", src);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(tc, "chat_template");
    cJSON_AddStringToObject(tc, "chat_template", k_chat_template);
    cJSON_DeleteItemFromObjectCaseSensitive(tc, "processor_class");
    cJSON_AddStringToObject(tc, "processor_class", "Qwen3VLProcessor");
    LJ_TRY(write_json(dir, "tokenizer_config.json", tc));
    snprintf(dst, sizeof dst, "%s/chat_template.jinja", dir);
    return lj_file_write_atomic(dst, k_chat_template, strlen(k_chat_template));
}

lj_status lj_hf_vl_export_into(const char *dir, const lj_vl_config *cfg, const float *text_params,
                               const float *vision_params, lj_dtype dtype, const char *tokenizer_dir,
                               int64_t min_pixels, int64_t max_pixels) {
    if (dtype != LJ_DTYPE_F32 && dtype != LJ_DTYPE_BF16)
        return lj_fail(LJ_ERR_ARG, "Qwen3-VL export: dtype %s (expected bf16 or fp32)", lj_dtype_name(dtype));
    const lj_st_dtype st = dtype == LJ_DTYPE_F32 ? LJ_ST_F32 : LJ_ST_BF16;
    LJ_TRY(write_json(dir, "config.json", config_json(cfg, dtype == LJ_DTYPE_F32 ? "float32" : "bfloat16")));
    LJ_TRY(write_json(dir, "preprocessor_config.json", processor_json(cfg, 0, min_pixels, max_pixels)));
    LJ_TRY(write_json(dir, "video_preprocessor_config.json", processor_json(cfg, 1, 0, 0)));
    lj_param_layout tl;
    lj_param_layout_init(&tl, &cfg->text);
    lj_vision_layout vl;
    lj_vision_layout_init(&vl, &cfg->vision);
    const int n = tl.count + vl.count;
    lj_st_tensor *ts = lj_calloc((size_t)n, sizeof *ts);
    char (*names)[128] = lj_calloc((size_t)tl.count, sizeof *names);
    for (int i = 0; i < tl.count; i++) {
        const lj_param_info *p = &tl.params[i];
        lj_vl_text_hf_name(p->name, names[i], sizeof names[i]);
        ts[i] = (lj_st_tensor){.name = names[i], .dtype = st, .ndim = p->ndim, .from_f32 = text_params + p->offset};
        ts[i].shape[0] = p->shape[0];
        ts[i].shape[1] = p->shape[1];
    }
    const lj_vision_config *v = &cfg->vision;
    for (int i = 0; i < vl.count; i++) {
        const lj_param_info *p = &vl.params[i];
        lj_st_tensor *t = &ts[tl.count + i];
        *t = (lj_st_tensor){.name = p->name, .dtype = st, .ndim = p->ndim, .from_f32 = vision_params + p->offset};
        t->shape[0] = p->shape[0];
        t->shape[1] = p->shape[1];
        if (i == vl.patch_w) { /* HF's Conv3d weight [V, c, tp, p, p] */
            t->ndim = 5;
            t->shape[1] = v->in_channels;
            t->shape[2] = v->temporal_patch_size;
            t->shape[3] = t->shape[4] = v->patch_size;
        }
    }
    const char *keys[] = {"format"}, *values[] = {"pt"};
    char path[LJ_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    lj_status s = lj_safetensors_write(path, ts, n, keys, values, 1);
    free(ts);
    free(names);
    lj_param_layout_free(&tl);
    lj_vision_layout_free(&vl);
    LJ_TRY(s);
    return tokenizer_dir ? export_tokenizer(dir, tokenizer_dir) : LJ_OK;
}

/* hf_vl.h: Hugging Face checkpoints of Qwen3VLForConditionalGeneration (dense): import of the
 * text model's flat parameters (config/config.h's layout) and the vision tower's (config/vl.h's).
 * Names: model.language_model.* for the decoder (model.X of the text layout), lm_head.weight
 * (absent when tied; accepted and ignored when present), model.visual.* for the tower, whose
 * patch_embed.proj.weight HF stores as the Conv3d's [V, c, tp, p, p] (read as [V, P]). */
#ifndef LJ_HF_VL_H
#define LJ_HF_VL_H

#include "config/vl.h"
#include "io/hf.h"

/* Imports `dir` (as lj_hf_import: model.safetensors, a sharded index, or one file) into
 * text_params [lj_config_num_params(&cfg->text)] and vision_params [vision layout total]. Every
 * tensor must be present with its shape; any other tensor is an error naming it. */
lj_status lj_hf_vl_import(const char *dir, const lj_vl_config *cfg, float *text_params, float *vision_params);

/* Exports a Qwen3-VL model into the existing directory `dir`, for transformers'
 * Qwen3VLForConditionalGeneration and AutoProcessor (io/hf_vl_export.c): config.json
 * (model_type qwen3_vl with text_config and vision_config), model.safetensors (the HF names
 * above, `dtype` bf16 or fp32; no lm_head when tied), preprocessor_config.json and
 * video_preprocessor_config.json (Qwen3-VL's processor settings; the image processor's
 * size.shortest_edge / longest_edge are min_pixels / max_pixels, <= 0: the published 256^2 and
 * 4096^2, so that a model trained on a dataset prepared with other limits sees its images so),
 * and, when tokenizer_dir is
 * not NULL, its tokenizer.json and tokenizer_config.json with Qwen3-VL's chat template, which
 * is also written as chat_template.jinja. Errors: LJ_ERR_IO naming the file, LJ_ERR_ARG for
 * another dtype. */
lj_status lj_hf_vl_export_into(const char *dir, const lj_vl_config *cfg, const float *text_params,
                               const float *vision_params, lj_dtype dtype, const char *tokenizer_dir,
                               int64_t min_pixels, int64_t max_pixels);

/* The chat template the export writes (Jinja text). */
const char *lj_hf_vl_chat_template(void);

#endif

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

#endif

/* hf_vl.c: import of Qwen3VLForConditionalGeneration checkpoints (the text model and the vision
 * tower) through lj_hf_import_tensors, every weight checked for NaN and infinity as it is read. */
#include "io/hf_vl.h"

#include <string.h>

lj_status lj_hf_vl_import(const char *dir, const lj_vl_config *cfg, float *text_params, float *vision_params) {
    lj_param_layout tl;
    lj_vision_layout vl;
    lj_param_layout_init(&tl, &cfg->text);
    lj_vision_layout_init(&vl, &cfg->vision);
    const int tied = cfg->text.tie_word_embeddings;
    const int n = tl.count + (tied ? 1 : 0) + vl.count;
    lj_hf_tensor *want = lj_calloc((size_t)n, sizeof(lj_hf_tensor));
    char (*names)[128] = lj_calloc((size_t)n, sizeof *names);
    int k = 0;
    for (int i = 0; i < tl.count; i++, k++) {
        lj_vl_text_hf_name(tl.params[i].name, names[k], sizeof names[k]);
        want[k] = (lj_hf_tensor){names[k], &tl.params[i], text_params + tl.params[i].offset, 0, 0, 1};
    }
    if (tied) { /* an lm_head.weight of a tied checkpoint is accepted, checked and not read */
        snprintf(names[k], sizeof names[k], "lm_head.weight");
        want[k] = (lj_hf_tensor){names[k], &tl.params[tl.embed], NULL, 0, 1, 0};
        k++;
    }
    for (int i = 0; i < vl.count; i++, k++)
        want[k] = (lj_hf_tensor){vl.params[i].name, &vl.params[i], vision_params + vl.params[i].offset,
                                 i == vl.patch_w, 0, 1};
    lj_status s = lj_hf_import_tensors(dir, want, n);
    free(want);
    free(names);
    lj_param_layout_free(&tl);
    lj_vision_layout_free(&vl);
    return s;
}

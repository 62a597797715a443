/* weights.h: how a server keeps its weights. By default (--quantization absent) they are the
 * lj_model's flat parameter buffer in the param dtype, as in training. Under --quantization fp8
 * (vLLM's online dynamic quantization) the four block linears of every layer (QKV, O, gate/up,
 * down) are cast once, as they are loaded, to E4M3 codes with one per-tensor scale each (the
 * linear module's "fp8-w8a8" recipe, model/linear.h, keeps them and runs their FP8 GEMMs); the
 * other parameters (embedding, norms, biases, lm_head) stay in the param dtype. No param-dtype
 * copy of a block linear is kept: the model's flat buffer holds only the others, compacted,
 * through a residency (model/residency.h) that maps every parameter to where it lives, so the
 * weights take about half the memory. */
#ifndef LJ_SERVE_WEIGHTS_H
#define LJ_SERVE_WEIGHTS_H

#include "model/model.h"

/* --quantization: none, or fp8 (alias fp8_per_tensor, vLLM's newer name). */
typedef enum {
    LJ_SERVE_QUANT_NONE = 0,
    LJ_SERVE_QUANT_FP8,
} lj_serve_quantization;

/* Makes m (lj_model_init'd with the "fp8-w8a8" recipe, not yet planned) keep its block linears as
 * FP8: the residency above, with its staging buffer (one linear's weight in the param dtype, on
 * its way to the cast) declared to the plan. lj_model_set_weights, lj_model_set_weights_range and
 * lj_model_init_weights then work as for any model: each linear is cast once its last value has
 * arrived (values arrive in layout order). Freed by lj_model_free. */
void lj_serve_fp8_weights_attach(lj_model *m);

/* Bytes of the weights on the device: the flat buffer (compacted under FP8) and the kept FP8
 * codes with their scales. */
size_t lj_serve_weights_bytes(const lj_model *m);

#endif

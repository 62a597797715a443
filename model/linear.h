/* linear.h: the linear layers of the transformer, y = x W^T with W [out, in] (HF layout): which
 * weight each one uses, and how it is computed and kept. The model says which linear it runs;
 * this module decides how, by the model's precision recipe:
 *
 *   LJ_LINEAR_RECIPE_DEFAULT  the backend's activation dtype (bf16 on CUDA, fp32 on the CPU) in
 *                             and out, fp32 accumulation, through the op table's matmuls; the
 *                             saved input for the backward is the caller's activation itself.
 *
 * A new precision (e.g. FP8 with per-tensor scales and quantized weight caches) is a new recipe
 * here: its scale state and its own saved copies of the inputs live in this module, and the
 * forward and backward loops do not change.
 *
 * Shapes (N rows = micro-batch x sequence, C hidden, Q = nh*hd, QKV = Q + 2*nkv*hd, I
 * intermediate, V vocabulary), act dtype, row-major:
 *   LJ_LINEAR_QKV      x [N, C] -> [N, QKV]  q_proj | k_proj | v_proj (one contiguous weight)
 *   LJ_LINEAR_O        x [N, Q] -> [N, C]    o_proj
 *   LJ_LINEAR_GATE_UP  x [N, C] -> [N, 2I]   gate_proj | up_proj (one contiguous weight)
 *   LJ_LINEAR_DOWN     x [N, I] -> [N, C]    down_proj
 *   LJ_LINEAR_LM_HEAD  x [N, C] -> [N, V]    lm_head (the unfused loss and generation; the fused
 *                                            loss computes it inside cross_entropy_fused)
 */
#ifndef LJ_LINEAR_H
#define LJ_LINEAR_H

#include "ops/ops.h"

typedef struct lj_model lj_model;

typedef enum {
    LJ_LINEAR_QKV = 0,
    LJ_LINEAR_O,
    LJ_LINEAR_GATE_UP,
    LJ_LINEAR_DOWN,
    LJ_LINEAR_LM_HEAD,
} lj_linear_kind;

typedef enum {
    LJ_LINEAR_RECIPE_DEFAULT = 0,
} lj_linear_recipe;

/* Name of a recipe ("default"). */
const char *lj_linear_recipe_name(lj_linear_recipe r);

/* The parameter index (config/config.h layout order) of linear `k` of layer `layer` (ignored for
 * LJ_LINEAR_LM_HEAD), and its input and output features. */
int lj_linear_param(const lj_model *m, lj_linear_kind k, int layer, int *in_features, int *out_features);

/* out[N, out] = x[N, in] W^T for linear `k` of layer `layer`; W read through the residency
 * (its unit must be fetched). */
void lj_linear_forward(lj_model *m, lj_linear_kind k, int layer, void *out, const void *x, int N);

/* The backward of lj_linear_forward: dx[N, in] = dout W (overwritten; skipped when dx is NULL)
 * and the weight gradient dW[out, in] = dout^T x, written as dw_mode says (the residency's
 * grad_begin tells). x is the input the forward saw (the caller's saved activation). */
void lj_linear_backward(lj_model *m, lj_linear_kind k, int layer, void *dx, const void *dout, const void *x, int N,
                        lj_grad_mode dw_mode);

#endif

/* linear.c: the transformer's linear layers (linear.h) over the op table's matmuls. */
#include "model/linear.h"

#include "model/model.h"

const char *lj_linear_recipe_name(lj_linear_recipe r) {
    switch (r) {
    case LJ_LINEAR_RECIPE_DEFAULT: return "default";
    }
    return "?";
}

int lj_linear_param(const lj_model *m, lj_linear_kind k, int layer, int *in_features, int *out_features) {
    const lj_layer_spec *s = &m->spec;
    switch (k) {
    case LJ_LINEAR_QKV: *in_features = s->C, *out_features = s->QKV; return lj_param_index(layer, LJ_P_Q);
    case LJ_LINEAR_O: *in_features = s->Q, *out_features = s->C; return lj_param_index(layer, LJ_P_O);
    case LJ_LINEAR_GATE_UP: *in_features = s->C, *out_features = 2 * s->I; return lj_param_index(layer, LJ_P_GATE);
    case LJ_LINEAR_DOWN: *in_features = s->I, *out_features = s->C; return lj_param_index(layer, LJ_P_DOWN);
    case LJ_LINEAR_LM_HEAD: *in_features = s->C, *out_features = s->V; return m->layout.lm_head;
    }
    LJ_ASSERT(0, "linear kind %d", (int)k);
    return -1;
}

void lj_linear_forward(lj_model *m, lj_linear_kind k, int layer, void *out, const void *x, int N) {
    int in, outf;
    const int p = lj_linear_param(m, k, layer, &in, &outf);
    switch (m->opt.linear_recipe) {
    case LJ_LINEAR_RECIPE_DEFAULT: m->ops->matmul_forward(out, x, lj_model_param(m, p), N, in, outf); return;
    }
    LJ_ASSERT(0, "linear recipe %d", (int)m->opt.linear_recipe);
}

void lj_linear_backward(lj_model *m, lj_linear_kind k, int layer, void *dx, const void *dout, const void *x, int N,
                        lj_grad_mode dw_mode) {
    int in, outf;
    const int p = lj_linear_param(m, k, layer, &in, &outf);
    switch (m->opt.linear_recipe) {
    case LJ_LINEAR_RECIPE_DEFAULT:
        m->ops->matmul_backward(dx, lj_model_grad(m, p), dout, x, lj_model_param(m, p), N, in, outf, LJ_GRAD_OVERWRITE,
                                dw_mode);
        return;
    }
    LJ_ASSERT(0, "linear recipe %d", (int)m->opt.linear_recipe);
}

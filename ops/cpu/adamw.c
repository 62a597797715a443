/* adamw.c: the CPU backend's optimizer ops: the squared global gradient norm (with a
 * deterministic reduction) and AdamW with clipping over the parameter segments. */
#include "ops/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* One double per LJ_CPU_NORM_CHUNK elements: chunk partial sums, added in chunk order. */
size_t lj_cpu_global_norm_workspace_bytes(int64_t n) {
    int64_t chunks = (n + LJ_CPU_NORM_CHUNK - 1) / LJ_CPU_NORM_CHUNK;
    return (size_t)(chunks > 0 ? chunks : 1) * sizeof(double);
}

void lj_cpu_global_norm_sq(float *out, const void *grad, int64_t n, void *workspace) {
    const float *g = grad;
    double *part = workspace;
    int64_t chunks = (n + LJ_CPU_NORM_CHUNK - 1) / LJ_CPU_NORM_CHUNK;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i0 = c * LJ_CPU_NORM_CHUNK, i1 = i0 + LJ_CPU_NORM_CHUNK < n ? i0 + LJ_CPU_NORM_CHUNK : n;
        double s = 0.0;
        for (int64_t i = i0; i < i1; i++) s += (double)g[i] * (double)g[i];
        part[c] = s;
    }
    double total = 0.0;
    for (int64_t c = 0; c < chunks; c++) total += part[c];
    out[0] = (float)total;
}

/* PyTorch's AdamW step order (torch/optim/adamw.py, single-tensor path): p *= 1 - lr*wd;
 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= (lr/bc1) m / (sqrt(v)/sqrt(bc2) + eps),
 * with the bias corrections bc = 1 - beta^t computed in double as Python does (the step
 * scalars of lj_adamw_step_scalars, here in host memory, of each segment's lr group). This is
 * the formula of ops.h:
 * p -= lr (wd p + m_hat / (sqrt(v_hat) + eps)). The moments f32 or bf16 (hp's dtypes). */
void lj_cpu_adamw_update(void *params, float *master, const void *grad, void *m, void *v,
                         const lj_adamw_segment *segments, int num_segments, const lj_adamw_hparams *hp,
                         const float *step_scalars, const float *grad_norm_sq) {
    const float *g = grad;
    if (grad_norm_sq && !isfinite(grad_norm_sq[0])) return; /* a skipped step (ops.h) */
    const float clip = lj_cpu_adamw_clip(hp, grad_norm_sq);
    const float b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps;
    const int bf16_m = hp->exp_avg_dtype == LJ_DTYPE_BF16, bf16_v = hp->exp_avg_sq_dtype == LJ_DTYPE_BF16;
    for (int s = 0; s < num_segments; s++) {
        const lj_adamw_segment *seg = &segments[s];
        const float *sc = step_scalars + (size_t)seg->lr_group * LJ_ADAMW_NUM_SCALARS; /* the segment's group */
        const float lr = sc[LJ_ADAMW_LR], step_size = sc[LJ_ADAMW_STEP_SIZE], bc2_sqrt = sc[LJ_ADAMW_BC2_SQRT];
        const float decay = (float)(1.0 - (double)lr * (double)seg->weight_decay);
        float *p = master + seg->offset;
        const float *gs = g + seg->offset;
        if (!bf16_m && !bf16_v) {
            float *ms = (float *)m + seg->offset, *vs = (float *)v + seg->offset;
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < seg->count; i++)
                lj_cpu_adamw_element(&p[i], &ms[i], &vs[i], gs[i] * clip, b1, b2, eps, decay, step_size, bc2_sqrt);
        } else {
            /* bf16 moments (ops.h): widened, stepped in f32, rounded to nearest even on store */
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < seg->count; i++) {
                const int64_t k = seg->offset + i;
                float mi = bf16_m ? lj_bf16_to_f32(((const uint16_t *)m)[k]) : ((const float *)m)[k];
                float vi = bf16_v ? lj_bf16_to_f32(((const uint16_t *)v)[k]) : ((const float *)v)[k];
                lj_cpu_adamw_element(&p[i], &mi, &vi, gs[i] * clip, b1, b2, eps, decay, step_size, bc2_sqrt);
                if (bf16_m) ((uint16_t *)m)[k] = lj_f32_to_bf16(mi);
                else ((float *)m)[k] = mi;
                if (bf16_v) ((uint16_t *)v)[k] = lj_f32_to_bf16(vi);
                else ((float *)v)[k] = vi;
            }
        }
        if (params && params != (void *)master && !seg->master_only)
            memcpy((float *)params + seg->offset, p, (size_t)seg->count * sizeof(float));
    }
}

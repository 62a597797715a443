/* ops.c: allocation accounting shared by the backends, and the host side of AdamW's per-step
 * scalars. */
#include "ops/ops.h"

#include <math.h>
#include <stdatomic.h>

static _Atomic int64_t g_allocated;

void lj_ops_track(int64_t bytes) { atomic_fetch_add(&g_allocated, bytes); }

size_t lj_ops_allocated_bytes(void) { return (size_t)atomic_load(&g_allocated); }

void lj_adamw_step_scalars(float *out, const lj_adamw_hparams *hp, float lr, int step) {
    LJ_ASSERT(step >= 1, "AdamW step %d: steps count from 1", step);
    /* torch/optim/adamw.py (_single_tensor_adamw): bias_correction1 = 1 - beta1 ** step,
     * step_size = lr / bias_correction1, bias_correction2_sqrt = sqrt(1 - beta2 ** step), in
     * Python floats (double) */
    const double bc1 = 1.0 - pow((double)hp->beta1, (double)step), bc2 = 1.0 - pow((double)hp->beta2, (double)step);
    out[LJ_ADAMW_LR] = lr;
    out[LJ_ADAMW_STEP_SIZE] = (float)((double)lr / bc1);
    out[LJ_ADAMW_BC2_SQRT] = (float)sqrt(bc2);
}

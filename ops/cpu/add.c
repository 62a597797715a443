/* add.c: the CPU backend's element-wise add (the unfused twin of the residual add). fp32, parallel over rows with OpenMP; contracts in ops/ops.h. */
#include "ops/cpu/cpu.h"

void lj_cpu_add(void *out, const void *a, const void *b, int64_t n) {
    float *o = out;
    const float *x = a, *y = b;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) o[i] = x[i] + y[i];
}

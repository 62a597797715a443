/* swiglu.c: the CPU backend's SwiGLU, fused and unfused, forward and backward. fp32, parallel over rows with OpenMP; contracts in ops/ops.h. */
#include "ops/cpu/cpu.h"

/* silu(g) = g * sigmoid(g), written as g / (1 + exp(-g)) as PyTorch's CPU kernel does
 * (lj_cpu_expf, so that the loops vectorize). */
static inline float silu(float g) { return g / (1.0f + lj_cpu_expf(-g)); }

/* d silu / d g = s (1 + g (1 - s)), s = sigmoid(g). */
static inline float silu_grad(float g) {
    float s = 1.0f / (1.0f + lj_cpu_expf(-g));
    return s * (1.0f + g * (1.0f - s));
}

void lj_cpu_swiglu_forward(void *out, const void *gate_up, int N, int I) {
    float *o = out;
    const float *gu = gate_up;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (int64_t)n * 2 * I, *u = g + I;
        float *on = o + (int64_t)n * I;
        for (int i = 0; i < I; i++) on[i] = silu(g[i]) * u[i];
    }
}

void lj_cpu_swiglu_backward(void *dgate_up, const void *dout, const void *gate_up, int N, int I) {
    float *dgu = dgate_up;
    const float *gu = gate_up, *d = dout;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (int64_t)n * 2 * I, *u = g + I, *dn = d + (int64_t)n * I;
        float *dg = dgu + (int64_t)n * 2 * I, *du = dg + I;
        for (int i = 0; i < I; i++) {
            float gi = g[i], ui = u[i], di = dn[i]; /* read first: dgate_up may alias gate_up */
            float a = silu(gi), b = silu_grad(gi) * ui;
            du[i] = di * a;
            dg[i] = di * b;
        }
    }
}

void lj_cpu_swiglu_forward_unfused(void *out, void *tmp, const void *gate_up, int N, int I) {
    float *o = out, *tf = tmp;
    const float *gu = gate_up;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (int64_t)n * 2 * I;
        float *tn = tf + (int64_t)n * I;
        for (int i = 0; i < I; i++) tn[i] = silu(g[i]);
    }
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *u = gu + (int64_t)n * 2 * I + I, *tn = tf + (int64_t)n * I;
        float *on = o + (int64_t)n * I;
        for (int i = 0; i < I; i++) on[i] = tn[i] * u[i];
    }
}

void lj_cpu_swiglu_backward_unfused(void *dgate_up, void *tmp, const void *dout, const void *gate_up, int N, int I) {
    float *dgu = dgate_up, *tf = tmp;
    const float *gu = gate_up, *d = dout;
    /* pass 1: tmp = silu'(gate) * up */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (int64_t)n * 2 * I, *u = g + I;
        float *tn = tf + (int64_t)n * I;
        for (int i = 0; i < I; i++) tn[i] = silu_grad(g[i]) * u[i];
    }
    /* pass 2: dgate = dout * tmp, then tmp = silu(gate) (gate is read before dgate_up, which
     * may alias it, is written) */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (int64_t)n * 2 * I, *dn = d + (int64_t)n * I;
        float *tn = tf + (int64_t)n * I, *dg = dgu + (int64_t)n * 2 * I;
        for (int i = 0; i < I; i++) {
            float s = silu(g[i]);
            dg[i] = dn[i] * tn[i];
            tn[i] = s;
        }
    }
    /* pass 3: dup = dout * tmp */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *dn = d + (int64_t)n * I, *tn = tf + (int64_t)n * I;
        float *du = dgu + (int64_t)n * 2 * I + I;
        for (int i = 0; i < I; i++) du[i] = dn[i] * tn[i];
    }
}

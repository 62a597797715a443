/* swiglu.cu: the CUDA backend's SwiGLU, fused and unfused, forward and backward. bf16 tensors, fp32 arithmetic; a 16-byte vector path wherever rows are multiples of 8
 * elements and pointers are 16-byte aligned. Contracts in ops/ops.h. */
#include "ops/cuda/cuda_common.h"

/* The element functions of SwiGLU and of its unfused passes. silu(g) = g * sigmoid(g),
 * silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g). Inputs a, b, c; outputs y0, y1. */
enum { SWIGLU_FWD, SWIGLU_BWD, SWIGLU_SILU, SWIGLU_MUL, SWIGLU_DGATE };

template <int OP>
static __device__ __forceinline__ void swiglu_op(float a, float b, float c, float *y0, float *y1) {
    float s = 1.0f / (1.0f + expf(-a));
    if (OP == SWIGLU_FWD) { /* a = gate, b = up */
        *y0 = lj_swiglu_value(a, b);
    } else if (OP == SWIGLU_BWD) { /* a = gate, b = up, c = dout; y0 = dgate, y1 = dup */
        *y0 = c * b * s * (1.0f + a * (1.0f - s));
        *y1 = c * a * s;
    } else if (OP == SWIGLU_SILU) {
        *y0 = a * s;
    } else if (OP == SWIGLU_MUL) { /* y0 = b * c (a unused) */
        *y0 = b * c;
    } else { /* SWIGLU_DGATE: a = gate, b = up, c = dout */
        *y0 = c * b * s * (1.0f + a * (1.0f - s));
    }
}

/* Element (n, j < I) of rows with strides (in elements): y0, y1 outputs (y1 may be NULL),
 * a, b, c inputs (unused ones may be NULL). */
template <int OP, bool VEC>
__global__ void swiglu_kernel(lj_bf16 *y0, int64_t sy0, lj_bf16 *y1, int64_t sy1, const lj_bf16 *a, int64_t sa,
                              const lj_bf16 *b, int64_t sb, const lj_bf16 *c, int64_t sc, int N, int I) {
    const int per = VEC ? 8 : 1;
    int64_t cols = I / per, total = (int64_t)N * cols;
    const bool use_a = OP != SWIGLU_MUL, use_b = OP != SWIGLU_SILU, use_c = OP == SWIGLU_BWD || OP == SWIGLU_MUL ||
                                                                            OP == SWIGLU_DGATE;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = idx / cols, j = (idx % cols) * per;
        float va[8] = {0}, vb[8] = {0}, vc[8] = {0}, o0[8], o1[8];
        if (VEC) {
            if (use_a) lj_load8(va, a + n * sa + j);
            if (use_b) lj_load8(vb, b + n * sb + j);
            if (use_c) lj_load8(vc, c + n * sc + j);
        } else {
            if (use_a) va[0] = lj_ld(a + n * sa + j);
            if (use_b) vb[0] = lj_ld(b + n * sb + j);
            if (use_c) vc[0] = lj_ld(c + n * sc + j);
        }
        for (int k = 0; k < per; k++) swiglu_op<OP>(va[k], vb[k], vc[k], &o0[k], &o1[k]);
        if (VEC) {
            lj_store8(y0 + n * sy0 + j, o0);
            if (OP == SWIGLU_BWD) lj_store8(y1 + n * sy1 + j, o1);
        } else {
            lj_st(y0 + n * sy0 + j, o0[0]);
            if (OP == SWIGLU_BWD) lj_st(y1 + n * sy1 + j, o1[0]);
        }
    }
}

template <int OP>
static void swiglu_launch(const char *name, void *y0, int64_t sy0, void *y1, int64_t sy1, const void *a, int64_t sa,
                          const void *b, int64_t sb, const void *c, int64_t sc, int N, int I) {
    if (N <= 0 || I <= 0) return;
    int vec = I % 8 == 0 && lj_cuda_aligned16(y0, y1, a) && lj_cuda_aligned16(b, c, NULL);
    int64_t units = (int64_t)N * (vec ? I / 8 : I);
    if (vec)
        swiglu_kernel<OP, true><<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)y0, sy0, (lj_bf16 *)y1, sy1, (const lj_bf16 *)a, sa, (const lj_bf16 *)b, sb,
            (const lj_bf16 *)c, sc, N, I);
    else
        swiglu_kernel<OP, false><<<lj_cuda_blocks(units, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)y0, sy0, (lj_bf16 *)y1, sy1, (const lj_bf16 *)a, sa, (const lj_bf16 *)b, sb,
            (const lj_bf16 *)c, sc, N, I);
    LJ_CUDA_LAUNCHED(name);
}

void lj_cuda_swiglu_forward(void *out, const void *gate_up, int N, int I) {
    const lj_bf16 *g = (const lj_bf16 *)gate_up;
    swiglu_launch<SWIGLU_FWD>("swiglu_forward_kernel", out, I, NULL, 0, g, 2 * (int64_t)I, g + I, 2 * (int64_t)I,
                              NULL, 0, N, I);
}

void lj_cuda_swiglu_backward(void *dgate_up, const void *dout, const void *gate_up, int N, int I) {
    const lj_bf16 *g = (const lj_bf16 *)gate_up;
    lj_bf16 *dg = (lj_bf16 *)dgate_up;
    swiglu_launch<SWIGLU_BWD>("swiglu_backward_kernel", dg, 2 * (int64_t)I, dg + I, 2 * (int64_t)I, g,
                              2 * (int64_t)I, g + I, 2 * (int64_t)I, dout, I, N, I);
}

/* tmp = silu(gate); out = tmp * up (two passes). */
void lj_cuda_swiglu_forward_unfused(void *out, void *tmp, const void *gate_up, int N, int I) {
    const lj_bf16 *g = (const lj_bf16 *)gate_up;
    swiglu_launch<SWIGLU_SILU>("swiglu_silu_kernel", tmp, I, NULL, 0, g, 2 * (int64_t)I, NULL, 0, NULL, 0, N, I);
    swiglu_launch<SWIGLU_MUL>("swiglu_mul_kernel", out, I, NULL, 0, NULL, 0, tmp, I, g + I, 2 * (int64_t)I, N, I);
}

/* tmp = silu(gate); dup = dout * tmp; dgate = dout * up * silu'(gate) (three passes). */
void lj_cuda_swiglu_backward_unfused(void *dgate_up, void *tmp, const void *dout, const void *gate_up, int N, int I) {
    const lj_bf16 *g = (const lj_bf16 *)gate_up;
    lj_bf16 *dg = (lj_bf16 *)dgate_up;
    swiglu_launch<SWIGLU_SILU>("swiglu_silu_kernel", tmp, I, NULL, 0, g, 2 * (int64_t)I, NULL, 0, NULL, 0, N, I);
    swiglu_launch<SWIGLU_MUL>("swiglu_mul_kernel", dg + I, 2 * (int64_t)I, NULL, 0, NULL, 0, tmp, I, dout, I, N, I);
    swiglu_launch<SWIGLU_DGATE>("swiglu_dgate_kernel", dg, 2 * (int64_t)I, NULL, 0, g, 2 * (int64_t)I, g + I,
                                2 * (int64_t)I, dout, I, N, I);
}

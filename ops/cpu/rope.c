/* rope.c: the CPU backend's RoPE in the QKV layout (half-split pairs), forward and backward,
 * by sequence position or per-token positions. fp32, parallel over rows with OpenMP; contracts in ops/ops.h. */
#include "ops/cpu/cpu.h"

/* Rotates the q and k heads of every row: pairs (i, i + hd/2) by the angle of the row's
 * position (t, or pos[r] when pos is not NULL), x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin
 * (HF rotate_half). dir = -1 rotates by the negative angle, which is the transpose used by the
 * backward. */
static void rope_apply(float *qkv, const float *cos, const float *sin, const int32_t *pos, int B, int T, int nh,
                       int nkv, int hd, float dir) {
    int h2 = hd / 2, heads = nh + nkv, row = (nh + 2 * nkv) * hd;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < (int64_t)B * T; r++) {
        int t = pos ? pos[r] : (int)(r % T);
        const float *c = cos + (int64_t)t * h2, *s = sin + (int64_t)t * h2;
        for (int h = 0; h < heads; h++) {
            float *x = qkv + r * row + (int64_t)h * hd;
            for (int i = 0; i < h2; i++) {
                float x1 = x[i], x2 = x[i + h2], si = dir * s[i];
                x[i] = x1 * c[i] - x2 * si;
                x[i + h2] = x2 * c[i] + x1 * si;
            }
        }
    }
}

void lj_cpu_rope_forward(void *qkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd) {
    rope_apply(qkv, cos, sin, NULL, B, T, nh, nkv, hd, 1.0f);
}

void lj_cpu_rope_backward(void *dqkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd) {
    rope_apply(dqkv, cos, sin, NULL, B, T, nh, nkv, hd, -1.0f);
}

void lj_cpu_rope_forward_pos(void *qkv, const float *cos, const float *sin, const int32_t *pos, int B, int T, int nh,
                             int nkv, int hd) {
    rope_apply(qkv, cos, sin, pos, B, T, nh, nkv, hd, 1.0f);
}

void lj_cpu_rope_backward_pos(void *dqkv, const float *cos, const float *sin, const int32_t *pos, int B, int T,
                              int nh, int nkv, int hd) {
    rope_apply(dqkv, cos, sin, pos, B, T, nh, nkv, hd, -1.0f);
}

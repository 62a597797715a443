/* rope.cu: the CUDA backend's RoPE in the QKV layout (half-split pairs), forward and backward,
 * by sequence position or per-token positions. bf16 tensors, fp32 arithmetic; a 16-byte vector path wherever rows are multiples of 8
 * elements and pointers are 16-byte aligned. Contracts in ops/ops.h. */
#include "ops/cuda/cuda_common.h"

/* One thread per PER consecutive pairs (i .. i + PER - 1 with their partners at + hd/2) of one
 * q or k head of one row, in place. PER = 8 reads and writes 16-byte vectors (hd/2 a multiple
 * of 8 and qkv 16-byte aligned); PER = 1 is the general case. POS: the row's position is pos[row]
 * (--reset-position-ids) instead of t; the kernel without it is unchanged. */
template <bool BACKWARD, int PER, bool POS>
__global__ void rope_kernel(lj_bf16 *qkv, const float *cosv, const float *sinv, const int32_t *pos, int B, int T,
                            int nh, int nkv, int hd) {
    const int half = hd / 2, heads = nh + nkv, groups = half / PER;
    const int64_t row_len = (int64_t)(nh + 2 * nkv) * hd;
    const int64_t total = (int64_t)B * T * heads * groups;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % groups) * PER;
        const int64_t rest = idx / groups;
        const int head = (int)(rest % heads);
        const int64_t row = rest / heads;
        const int t = POS ? pos[row] : (int)(row % T);
        lj_bf16 *p = qkv + row * row_len + (int64_t)head * hd + i;
        const float *cp = cosv + (int64_t)t * half + i, *sp = sinv + (int64_t)t * half + i;
        if (PER == 8) {
            float x1[8], x2[8];
            lj_load8(x1, p);
            lj_load8(x2, p + half);
            const float4 c0 = *(const float4 *)cp, c1 = *(const float4 *)(cp + 4);
            const float4 s0 = *(const float4 *)sp, s1 = *(const float4 *)(sp + 4);
            const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
            const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
            for (int q = 0; q < 8; q++) lj_rope_pair<BACKWARD>(x1[q], x2[q], c[q], s[q]);
            lj_store8(p, x1);
            lj_store8(p + half, x2);
        } else {
            float x1 = lj_ld(p), x2 = lj_ld(p + half);
            lj_rope_pair<BACKWARD>(x1, x2, cp[0], sp[0]);
            lj_st(p, x1);
            lj_st(p + half, x2);
        }
    }
}

template <bool BACKWARD, bool POS>
static void rope_launch(void *qkv, const float *cos, const float *sin, const int32_t *pos, int B, int T, int nh,
                        int nkv, int hd, const char *name) {
    const int half = hd / 2;
    const bool vec = half % 8 == 0 && ((uintptr_t)qkv & 15) == 0 && ((uintptr_t)cos & 15) == 0 &&
                     ((uintptr_t)sin & 15) == 0;
    const int64_t total = (int64_t)B * T * (nh + nkv) * (half / (vec ? 8 : 1));
    if (total <= 0) return;
    if (vec)
        rope_kernel<BACKWARD, 8, POS><<<lj_cuda_blocks(total, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)qkv, cos, sin, pos, B, T, nh, nkv, hd);
    else
        rope_kernel<BACKWARD, 1, POS><<<lj_cuda_blocks(total, 256), 256, 0, lj_cuda_stream()>>>(
            (lj_bf16 *)qkv, cos, sin, pos, B, T, nh, nkv, hd);
    LJ_CUDA_LAUNCHED(name);
}

void lj_cuda_rope_forward(void *qkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd) {
    rope_launch<false, false>(qkv, cos, sin, NULL, B, T, nh, nkv, hd, "rope_forward_kernel");
}

void lj_cuda_rope_backward(void *dqkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd) {
    rope_launch<true, false>(dqkv, cos, sin, NULL, B, T, nh, nkv, hd, "rope_backward_kernel");
}

void lj_cuda_rope_forward_pos(void *qkv, const float *cos, const float *sin, const int32_t *pos, int B, int T, int nh,
                              int nkv, int hd) {
    rope_launch<false, true>(qkv, cos, sin, pos, B, T, nh, nkv, hd, "rope_forward_kernel (positions)");
}

void lj_cuda_rope_backward_pos(void *dqkv, const float *cos, const float *sin, const int32_t *pos, int B, int T,
                               int nh, int nkv, int hd) {
    rope_launch<true, true>(dqkv, cos, sin, pos, B, T, nh, nkv, hd, "rope_backward_kernel (positions)");
}

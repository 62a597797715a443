/* adamw.cu: the optimizer ops on the GPU: the squared global gradient norm (a
 * deterministic two-pass reduction) and multi-tensor AdamW with clipping, fp32 master
 * weights and moments, and the bf16 parameter copy written in the same pass (not for a
 * master_only segment). Gradients are
 * bf16 or fp32 (the table's grad dtype), read as fp32. Both ops are capturable: AdamW's per-step
 * lr and bias corrections are read from device memory, so one captured graph serves every
 * step. */
#include "ops/cuda/cuda_common.h"

#include <math.h>

#define LJ_NORM_THREADS 256
#define LJ_NORM_MAX_BLOCKS 1024

/* Fixed-order block sum of a double per thread (blockDim.x == LJ_NORM_THREADS). */
static __device__ double block_sum_double(double v) {
    __shared__ double red[LJ_NORM_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    double s = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < LJ_NORM_THREADS / 32; w++) s += red[w];
    return s;
}

/* Pass 1: partial[b] = sum of squares over the elements block b strides over (fp64). The
 * elements go in 16-byte vectors (8 bf16 or 4 f32 per thread and turn) when `g` is 16-byte
 * aligned, else one at a time; either way the order is fixed by the grid, so the result is
 * deterministic. A bf16 square is exact in f32. */
template <typename G>
__global__ void __launch_bounds__(LJ_NORM_THREADS) norm_sq_partial_kernel(double *partial, const G *g, int64_t n) {
    double acc = 0.0;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    constexpr int V = 16 / sizeof(G);
    int64_t done = 0;
    if (((uintptr_t)g & 15) == 0) {
        const int64_t nv = n / V;
        const uint4 *gv = (const uint4 *)g;
        for (int64_t i = i0; i < nv; i += stride) {
            uint4 raw = gv[i];
            const G *x = (const G *)&raw;
            if (sizeof(G) == 2) {
                for (int j = 0; j < V; j++) {
                    float f = lj_ld(x + j);
                    acc += (double)(f * f);
                }
            } else {
                for (int j = 0; j < V; j++) {
                    double f = lj_ld(x + j);
                    acc += f * f;
                }
            }
        }
        done = nv * V;
    }
    for (int64_t i = done + i0; i < n; i += stride) {
        double x = lj_ld(g + i);
        acc += x * x;
    }
    double s = block_sum_double(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* Pass 2: out[0] = sum of the partials, in a fixed order. */
__global__ void __launch_bounds__(LJ_NORM_THREADS) norm_sq_final_kernel(float *out, const double *partial, int parts) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < parts; i += blockDim.x) acc += partial[i];
    double s = block_sum_double(acc);
    if (threadIdx.x == 0) out[0] = (float)s;
}

static int norm_blocks(int64_t n) {
    int64_t b = (n + 4095) / 4096;
    if (b > LJ_NORM_MAX_BLOCKS) b = LJ_NORM_MAX_BLOCKS;
    return b < 1 ? 1 : (int)b;
}

size_t lj_cuda_global_norm_workspace_bytes(int64_t n) { return (size_t)norm_blocks(n) * sizeof(double); }

void lj_cuda_global_norm_sq(float *out, const void *grad, int64_t n, void *workspace, lj_dtype grad_dtype) {
    int blocks = norm_blocks(n);
    if (grad_dtype == LJ_DTYPE_F32)
        norm_sq_partial_kernel<float><<<(unsigned)blocks, LJ_NORM_THREADS, 0, lj_cuda_stream()>>>(
            (double *)workspace, (const float *)grad, n);
    else
        norm_sq_partial_kernel<lj_bf16><<<(unsigned)blocks, LJ_NORM_THREADS, 0, lj_cuda_stream()>>>(
            (double *)workspace, (const lj_bf16 *)grad, n);
    LJ_CUDA_LAUNCHED("norm_sq_partial_kernel");
    norm_sq_final_kernel<<<1, LJ_NORM_THREADS, 0, lj_cuda_stream()>>>(out, (const double *)workspace, blocks);
    LJ_CUDA_LAUNCHED("norm_sq_final_kernel");
}

/* ---- AdamW -------------------------------------------------------------------------- */

#define LJ_ADAMW_SEGS 48        /* segments per launch (the table travels as a kernel parameter) */
#define LJ_ADAMW_THREADS 256
#define LJ_ADAMW_VEC 4          /* consecutive elements per thread and turn */
#define LJ_ADAMW_UNIT (LJ_ADAMW_THREADS * 8) /* elements per work unit */

/* One launch's share of the segment table, passed by value (no device copy of the table). */
typedef struct {
    int64_t offset[LJ_ADAMW_SEGS];
    int64_t count[LJ_ADAMW_SEGS];
    int64_t unit_start[LJ_ADAMW_SEGS + 1]; /* prefix sums of work units per segment */
    float weight_decay[LJ_ADAMW_SEGS];
    int lr_group[LJ_ADAMW_SEGS]; /* the segment's set of step scalars (ops.h) */
    int master_only[LJ_ADAMW_SEGS]; /* 1: no param copy written (ops.h lj_adamw_segment) */
    int num;
} lj_adamw_batch;

/* The fixed hyper-parameters (by value; a captured graph bakes them in). The per-step ones
 * (lr, step_size, bc2_sqrt of each lr group) are read from device memory by the kernel. */
typedef struct {
    float beta1, beta2, eps, max_grad_norm;
} lj_adamw_consts;

/* One element of AdamW (formula and evaluation order: ops.h, as the CPU backend's
 * adamw.c). */
struct adamw_elem {
    float beta1, beta2, eps, step_size, bc2_sqrt, decay;
    __device__ __forceinline__ float operator()(float g, float &m, float &v, float &master) const {
        float mi = beta1 * m + (1.0f - beta1) * g;
        float vi = beta2 * v + (1.0f - beta2) * g * g;
        m = mi;
        v = vi;
        master = master * decay - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
        return master;
    }
};

/* Four consecutive elements of an f32 or bf16 buffer, as one 16- or 8-byte access. */
static __device__ __forceinline__ void adamw_load4(float *out, const float *p) {
    const float4 r = *(const float4 *)p;
    out[0] = r.x, out[1] = r.y, out[2] = r.z, out[3] = r.w;
}
static __device__ __forceinline__ void adamw_load4(float *out, const lj_bf16 *p) {
    const uint2 raw = *(const uint2 *)p;
    const lj_bf16 *x = (const lj_bf16 *)&raw;
    for (int q = 0; q < 4; q++) out[q] = __bfloat162float(x[q]);
}
static __device__ __forceinline__ void adamw_store4(float *p, const float *v) {
    *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
}
static __device__ __forceinline__ void adamw_store4(lj_bf16 *p, const float *v) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
    uint2 out;
    out.x = *(const unsigned *)&lo;
    out.y = *(const unsigned *)&hi;
    *(uint2 *)p = out;
}

/* Each block takes work units u = blockIdx.x, +gridDim.x, ...; a unit is LJ_ADAMW_UNIT
 * consecutive elements of one segment, LJ_ADAMW_VEC consecutive ones per thread and turn: as
 * 16-byte vectors of the f32 buffers (8-byte ones of the bf16 buffers: the gradient, the
 * parameters, and the moments when stored as bf16, M and V) where the segment's offset allows
 * it, else one element at a time; the arithmetic is the same either way (in f32: a bf16 moment
 * is widened on load and rounded to nearest even on store). The step scalars of
 * lj_adamw_step_scalars are read from `scalars` [groups][LJ_ADAMW_NUM_SCALARS] f32 device
 * memory, the set of each segment's lr group, so that a replayed CUDA graph uses the values
 * uploaded before each launch. */
template <typename G, typename M, typename V>
__global__ void __launch_bounds__(LJ_ADAMW_THREADS) adamw_kernel(lj_bf16 *params, float *master, const G *grad,
                                                                 M *m, V *v, const lj_adamw_batch batch,
                                                                 const lj_adamw_consts k, const float *scalars,
                                                                 const float *grad_norm_sq) {
    if (grad_norm_sq && !isfinite(*grad_norm_sq)) return; /* a skipped step (ops.h): nothing is written */
    float clip = 1.0f;
    if (k.max_grad_norm > 0.0f && grad_norm_sq) {
        float norm = sqrtf(*grad_norm_sq);
        clip = fminf(1.0f, k.max_grad_norm / (norm + 1e-6f));
    }
    adamw_elem f;
    f.beta1 = k.beta1;
    f.beta2 = k.beta2;
    f.eps = k.eps;
    /* vectors need the f32 buffers 16-byte aligned and the 2-byte ones 8-byte aligned */
    const bool buffers_aligned =
        (((uintptr_t)m * (4 / sizeof(M)) | (uintptr_t)v * (4 / sizeof(V)) | (uintptr_t)master |
          (uintptr_t)grad * (4 / sizeof(G)) | (uintptr_t)params * 2) & 15) == 0;
    int64_t units = batch.unit_start[batch.num];
    for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
        int s = 0;
        while (batch.unit_start[s + 1] <= u) s++;
        int64_t local = (u - batch.unit_start[s]) * LJ_ADAMW_UNIT;
        int64_t base = batch.offset[s], count = batch.count[s];
        const float *sc = scalars + batch.lr_group[s] * LJ_ADAMW_NUM_SCALARS; /* the segment's lr group */
        const float lr = sc[LJ_ADAMW_LR];
        f.step_size = sc[LJ_ADAMW_STEP_SIZE];
        f.bc2_sqrt = sc[LJ_ADAMW_BC2_SQRT];
        /* 1 - lr*wd in double, rounded once (as the CPU backend) */
        f.decay = (float)(1.0 - (double)lr * (double)batch.weight_decay[s]);
        const bool aligned = buffers_aligned && base % LJ_ADAMW_VEC == 0;
        lj_bf16 *const copy = batch.master_only[s] ? NULL : params; /* the segment's param copy, if any */
        for (int j = 0; j < LJ_ADAMW_UNIT / (LJ_ADAMW_THREADS * LJ_ADAMW_VEC); j++) {
            int64_t e = local + ((int64_t)j * LJ_ADAMW_THREADS + threadIdx.x) * LJ_ADAMW_VEC;
            if (e >= count) break;
            int64_t i = base + e;
            if (aligned && e + LJ_ADAMW_VEC <= count) {
                float mv[LJ_ADAMW_VEC], vv[LJ_ADAMW_VEC], pv[LJ_ADAMW_VEC], gv[LJ_ADAMW_VEC];
                adamw_load4(mv, m + i);
                adamw_load4(vv, v + i);
                adamw_load4(pv, master + i);
                adamw_load4(gv, grad + i);
                for (int q = 0; q < LJ_ADAMW_VEC; q++) f(gv[q] * clip, mv[q], vv[q], pv[q]);
                adamw_store4(m + i, mv);
                adamw_store4(v + i, vv);
                adamw_store4(master + i, pv);
                if (copy) adamw_store4(copy + i, pv);
            } else {
                for (int q = 0; q < LJ_ADAMW_VEC && e + q < count; q++) {
                    float mi = lj_ld(m + i + q), vi = lj_ld(v + i + q);
                    float p = f(lj_ld(grad + i + q) * clip, mi, vi, master[i + q]);
                    lj_st(m + i + q, mi);
                    lj_st(v + i + q, vi);
                    if (copy) copy[i + q] = __float2bfloat16_rn(p);
                }
            }
        }
    }
}

/* The launch of one moment-dtype pair (M, V), for either gradient dtype. */
template <typename M, typename V>
static void adamw_launch(unsigned blocks, lj_bf16 *pb, float *master, const void *grad, void *m, void *v,
                         const lj_adamw_batch &batch, const lj_adamw_consts &k, const float *step_scalars,
                         const float *grad_norm_sq, lj_dtype grad_dtype) {
    if (grad_dtype == LJ_DTYPE_F32)
        adamw_kernel<float, M, V><<<blocks, LJ_ADAMW_THREADS, 0, lj_cuda_stream()>>>(
            pb, master, (const float *)grad, (M *)m, (V *)v, batch, k, step_scalars, grad_norm_sq);
    else
        adamw_kernel<lj_bf16, M, V><<<blocks, LJ_ADAMW_THREADS, 0, lj_cuda_stream()>>>(
            pb, master, (const lj_bf16 *)grad, (M *)m, (V *)v, batch, k, step_scalars, grad_norm_sq);
}

typedef void (*adamw_launch_fn)(unsigned, lj_bf16 *, float *, const void *, void *, void *, const lj_adamw_batch &,
                                const lj_adamw_consts &, const float *, const float *, lj_dtype);

void lj_cuda_adamw_update(void *params, float *master, const void *grad, void *m, void *v,
                          const lj_adamw_segment *segments, int num_segments, const lj_adamw_hparams *hp,
                          const float *step_scalars, const float *grad_norm_sq, lj_dtype grad_dtype) {
    lj_adamw_consts k;
    k.beta1 = hp->beta1;
    k.beta2 = hp->beta2;
    k.eps = hp->eps;
    k.max_grad_norm = hp->max_grad_norm;
    lj_bf16 *pb = (void *)params == (void *)master ? NULL : (lj_bf16 *)params;
    /* the instance of the moments' dtypes, [m bf16][v bf16] */
    static const adamw_launch_fn launches[2][2] = {{adamw_launch<float, float>, adamw_launch<float, lj_bf16>},
                                                   {adamw_launch<lj_bf16, float>, adamw_launch<lj_bf16, lj_bf16>}};
    const adamw_launch_fn launch =
        launches[hp->exp_avg_dtype == LJ_DTYPE_BF16][hp->exp_avg_sq_dtype == LJ_DTYPE_BF16];
    for (int s0 = 0; s0 < num_segments; s0 += LJ_ADAMW_SEGS) {
        lj_adamw_batch batch;
        batch.num = 0;
        batch.unit_start[0] = 0;
        for (int s = s0; s < num_segments && batch.num < LJ_ADAMW_SEGS; s++) {
            int j = batch.num++;
            batch.offset[j] = segments[s].offset;
            batch.count[j] = segments[s].count > 0 ? segments[s].count : 0;
            batch.weight_decay[j] = segments[s].weight_decay;
            batch.lr_group[j] = segments[s].lr_group;
            batch.master_only[j] = segments[s].master_only != 0;
            batch.unit_start[j + 1] = batch.unit_start[j] + (batch.count[j] + LJ_ADAMW_UNIT - 1) / LJ_ADAMW_UNIT;
        }
        int64_t units = batch.unit_start[batch.num];
        if (units == 0) continue;
        unsigned blocks = lj_cuda_blocks(units, 1);
        launch(blocks, pb, master, grad, m, v, batch, k, step_scalars, grad_norm_sq, grad_dtype);
        LJ_CUDA_LAUNCHED("adamw_kernel");
    }
}

/* kl_adamw.cu: kernel lab for multi-tensor AdamW (ops/cuda/adamw.cu, adamw_kernel) with
 * bf16 gradients, fp32 master weights and moments and the bf16 parameter copy written in the
 * same pass. Checked against the CPU backend's adamw_update on 4 Mi elements in two segments
 * (the second at an offset that is not a multiple of 4, so version 2's scalar path runs too),
 * then timed over llama3.2-1b's 1,235,814,400 parameters: GB/s of the 28 bytes each must move
 * (grad 2, master/m/v 4 read + 4 written each, params 2 written).
 *
 *   kl_adamw [--version N]
 */
#include <math.h>

#include "bench/kernels/lab.h"

#define ADAMW_SEGS 48
#define ADAMW_THREADS 256
#define ADAMW_UNIT (ADAMW_THREADS * 8) /* elements per work unit */

/* One launch's share of the segment table, by value (as the backend passes it). */
typedef struct {
    int64_t offset[ADAMW_SEGS], count[ADAMW_SEGS], unit_start[ADAMW_SEGS + 1];
    float weight_decay[ADAMW_SEGS];
    int num;
} adamw_batch;

typedef struct {
    float beta1, beta2, eps, max_grad_norm;
} adamw_consts;

typedef void (*adamw_kernel_fn)(lj_bf16 *, float *, const lj_bf16 *, float *, float *, const adamw_batch,
                                const adamw_consts, const float *, const float *);

/* Version 1 (148d6d7, the per-step scalars read from device memory; the arithmetic of
 * 2cefea8): one element per thread and turn, 2- and 4-byte accesses, 8 turns per work unit.
 * Measured (kernel lab, bench/results/2026-11-29-h200-planner-zero3.md): 12.45 ms, 2778 GB/s of 28 B per
 * parameter; Nsight Compute at 37dc8e8 saw 2.5 TB/s inside a llama3-8b step
 * (2026-11-30-h200x2-8b-time.md). */
__global__ void __launch_bounds__(ADAMW_THREADS) adamw_v1(lj_bf16 *params, float *master, const lj_bf16 *grad,
                                                          float *m, float *v, const adamw_batch batch,
                                                          const adamw_consts k, const float *scalars,
                                                          const float *grad_norm_sq) {
    float clip = 1.0f;
    if (k.max_grad_norm > 0.0f && grad_norm_sq) clip = fminf(1.0f, k.max_grad_norm / (sqrtf(*grad_norm_sq) + 1e-6f));
    const float lr = scalars[LJ_ADAMW_LR], step_size = scalars[LJ_ADAMW_STEP_SIZE];
    const float bc2_sqrt = scalars[LJ_ADAMW_BC2_SQRT];
    int64_t units = batch.unit_start[batch.num];
    for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
        int s = 0;
        while (batch.unit_start[s + 1] <= u) s++;
        int64_t local = (u - batch.unit_start[s]) * ADAMW_UNIT;
        int64_t base = batch.offset[s], count = batch.count[s];
        const float decay = (float)(1.0 - (double)lr * (double)batch.weight_decay[s]);
        for (int j = 0; j < 8; j++) {
            int64_t e = local + (int64_t)j * ADAMW_THREADS + threadIdx.x;
            if (e >= count) break;
            int64_t i = base + e;
            float g = lj_ld(grad + i) * clip;
            float mi = k.beta1 * m[i] + (1.0f - k.beta1) * g;
            float vi = k.beta2 * v[i] + (1.0f - k.beta2) * g * g;
            m[i] = mi;
            v[i] = vi;
            float p = master[i] * decay - step_size * (mi / (sqrtf(vi) / bc2_sqrt + k.eps));
            master[i] = p;
            if (params) params[i] = __float2bfloat16_rn(p);
        }
    }
}

/* Version 2 (44438ac): 4 consecutive elements per thread and turn, read and written as 16-byte
 * vectors of the fp32 state and 8-byte ones of the bf16 gradient and parameters where the
 * segment's offset and the buffers allow it, else one at a time; the same arithmetic. It is the
 * backend's kernel today, so the lab runs it through the op table (adamw_update,
 * ops/cuda/adamw.cu) rather than keep a copy that could drift from it. Predicted
 * 2.5 -> ~3.5 TB/s; measured at the time only inside the 8b ZeRO-3 step (10,667-10,839 ->
 * 10,941 tokens/s per GPU, different machines, bench/results/README.md). */

static const adamw_kernel_fn versions[] = {adamw_v1, NULL}; /* NULL: the backend's op */
#define NUM_VERSIONS 2

/* The backend's launch: the segment table in batches of ADAMW_SEGS, one launch each. */
static void adamw_launch(adamw_kernel_fn kernel, lj_bf16 *params, float *master, const lj_bf16 *grad, float *m,
                         float *v, const lj_adamw_segment *segs, int nseg, const lj_adamw_hparams *hp,
                         const float *scalars, const float *gn) {
    adamw_consts k = {hp->beta1, hp->beta2, hp->eps, hp->max_grad_norm};
    for (int s0 = 0; s0 < nseg; s0 += ADAMW_SEGS) {
        adamw_batch b;
        b.num = 0;
        b.unit_start[0] = 0;
        for (int s = s0; s < nseg && b.num < ADAMW_SEGS; s++) {
            int j = b.num++;
            b.offset[j] = segs[s].offset;
            b.count[j] = segs[s].count;
            b.weight_decay[j] = segs[s].weight_decay;
            b.unit_start[j + 1] = b.unit_start[j] + (b.count[j] + ADAMW_UNIT - 1) / ADAMW_UNIT;
        }
        if (b.unit_start[b.num] == 0) continue;
        kernel<<<lj_cuda_blocks(b.unit_start[b.num], 1), ADAMW_THREADS, 0, lj_cuda_stream()>>>(params, master, grad, m,
                                                                                            v, b, k, scalars, gn);
        LJ_CUDA_LAUNCHED("adamw version kernel");
    }
}

typedef struct {
    const lj_ops *ops;
    adamw_kernel_fn kernel;
    int64_t P;
    lj_bf16 *params, *grad;
    float *master, *m, *v, *scalars, *gn;
    lj_adamw_segment seg[2];
    lj_adamw_hparams hp;
} adamw_ctx;

static void run(void *p) {
    adamw_ctx *c = (adamw_ctx *)p;
    if (!c->kernel) {
        c->ops->adamw_update(c->params, c->master, c->grad, c->m, c->v, c->seg, 2, &c->hp, c->scalars, c->gn);
        return;
    }
    adamw_launch(c->kernel, c->params, c->master, c->grad, c->m, c->v, c->seg, 2, &c->hp, c->scalars, c->gn);
}

/* Buffers of P elements: grad bf16, master and m random, v zero, the step scalars of lr
 * 3e-4 at step 10, the squared norm of the gradient. Segment 1 starts at P/2 + 3. */
static void make(adamw_ctx *c, const lj_ops *ops, int64_t P) {
    memset(c, 0, sizeof *c);
    c->ops = ops, c->P = P;
    c->hp = (lj_adamw_hparams){0.9f, 0.95f, 1e-8f, 1.0f};
    c->grad = (lj_bf16 *)lj_harness_drand_bf16(ops, P, 47, 1e-3f);
    c->master = lj_harness_drand_f32(ops, P, 48, 0.02f);
    c->m = lj_harness_drand_f32(ops, P, 49, 1e-4f);
    c->v = (float *)lj_harness_dalloc(ops, (size_t)P * 4);
    ops->memset_zero(c->v, (size_t)P * 4);
    c->params = (lj_bf16 *)lj_harness_dalloc(ops, (size_t)P * 2);
    c->scalars = (float *)lj_harness_dalloc(ops, LJ_ADAMW_NUM_SCALARS * 4);
    c->gn = (float *)lj_harness_dalloc(ops, 4);
    float s[LJ_ADAMW_NUM_SCALARS], gn = 2.5f; /* clipping active: norm 1.58 > 1 */
    lj_adamw_step_scalars(s, &c->hp, 3e-4f, 10);
    ops->upload(c->scalars, s, sizeof s);
    ops->upload(c->gn, &gn, 4);
    c->seg[0] = (lj_adamw_segment){0, P / 2, 0.1f, 0, 0};
    c->seg[1] = (lj_adamw_segment){P / 2 + 3, P - P / 2 - 3, 0.0f, 0, 0};
}

static void release(adamw_ctx *c) {
    const lj_ops *o = c->ops;
    o->free(c->grad), o->free(c->master), o->free(c->m), o->free(c->v), o->free(c->params), o->free(c->scalars);
    o->free(c->gn);
}

/* One step of version `ver` against the CPU backend's adamw_update on the same inputs, v set to
 * |normal| * 1e-6 (a second moment is non-negative). */
static void check(lj_harness *h, const lj_ops *ops, int ver) {
    const int64_t P = (int64_t)4 << 20;
    adamw_ctx c;
    make(&c, ops, P);
    float *hv = lj_harness_randf(h, P, 1e-6f);
    for (int64_t i = 0; i < P; i++) hv[i] = fabsf(hv[i]);
    ops->upload(c.v, hv, (size_t)P * 4);
    float *hg = lj_harness_download_f32(ops, c.grad, P, LJ_DTYPE_BF16);
    float *hmaster = lj_harness_download_f32(ops, c.master, P, LJ_DTYPE_F32);
    float *hm = lj_harness_download_f32(ops, c.m, P, LJ_DTYPE_F32);
    float sc[LJ_ADAMW_NUM_SCALARS], gn = 2.5f;
    lj_adamw_step_scalars(sc, &c.hp, 3e-4f, 10);
    lj_ops_cpu()->adamw_update(hmaster, hmaster, hg, hm, hv, c.seg, 2, &c.hp, sc, &gn);
    c.kernel = versions[ver - 1];
    run(&c);
    char op[48], shape[48];
    snprintf(shape, sizeof shape, "P=%lld, 2 segments", (long long)P);
    float *gmaster = lj_harness_download_f32(ops, c.master, P, LJ_DTYPE_F32);
    float *gm = lj_harness_download_f32(ops, c.m, P, LJ_DTYPE_F32), *gv = lj_harness_download_f32(ops, c.v, P, LJ_DTYPE_F32);
    float *gp = lj_harness_download_f32(ops, c.params, P, LJ_DTYPE_BF16);
    /* the 3 elements between the segments are not updated: compare the segments' bf16 copy only */
    for (int64_t i = P / 2; i < P / 2 + 3; i++) gp[i] = lj_bf16_to_f32(lj_f32_to_bf16(hmaster[i]));
    float *ref_p = (float *)lj_malloc((size_t)P * 4);
    for (int64_t i = 0; i < P; i++) ref_p[i] = lj_bf16_to_f32(lj_f32_to_bf16(hmaster[i]));
    snprintf(op, sizeof op, "adamw v%d master", ver);
    lj_harness_check_f(h, op, shape, gmaster, hmaster, P, lj_harness_tol_gpu(1e-6, 1e-5));
    snprintf(op, sizeof op, "adamw v%d m", ver);
    lj_harness_check_f(h, op, shape, gm, hm, P, lj_harness_tol_gpu(1e-6, 1e-5));
    snprintf(op, sizeof op, "adamw v%d v", ver);
    lj_harness_check_f(h, op, shape, gv, hv, P, lj_harness_tol_gpu(1e-6, 1e-5));
    snprintf(op, sizeof op, "adamw v%d params (bf16)", ver);
    lj_harness_check_f(h, op, shape, gp, ref_p, P, lj_harness_tol_gpu(1e-2, 1e-2));
    free(hv), free(hg), free(hmaster), free(hm), free(gmaster), free(gm), free(gv), free(gp), free(ref_p);
    release(&c);
}

int main(int argc, char **argv) {
    lj_harness h;
    const lj_ops *ops;
    int only = lj_lab_start(&h, "kl_adamw", NUM_VERSIONS, argc, argv, &ops);
    for (int ver = 1; ver <= NUM_VERSIONS; ver++)
        if (!only || ver == only) check(&h, ops, ver);
    adamw_ctx c;
    make(&c, ops, 1235814400);
    printf("adamw over %lld parameters, bf16 gradients\n", (long long)c.P);
    for (int ver = 1; ver <= NUM_VERSIONS; ver++) {
        if (only && ver != only) continue;
        c.kernel = versions[ver - 1];
        char what[32];
        snprintf(what, sizeof what, "version %d", ver);
        double ms = lj_harness_time_ms(ops, run, &c, 3, 20);
        lj_harness_report("adamw", what, ms, 28.0 * c.P / (ms * 1e-3) / 1e9, "GB/s", LJ_HARNESS_HBM_CEILING_GBS);
    }
    release(&c);
    return lj_harness_summary(&h);
}

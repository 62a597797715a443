/* cases_cuda.c: the CUDA backend's AdamW case (the one op whose case is not yet written once, as
 * cases_<op>.c are): adamw_update of lj_ops_cuda_open() against the CPU backend (lj_ops_cpu) on
 * the same random inputs (bf16-representable values, given to the CPU as fp32), with GPU outputs
 * poisoned (0xff bytes: NaN in bf16 and fp32) first, so an element left unwritten fails. Its
 * figures are its own (fp32 state within 1e-6 / 1e-5, the bf16 params within bf16 rounding).
 *
 * The case being run is held in file-scope pointers (set by begin() at the start of each case):
 * G the CUDA table of the case's gradient dtype, H the CPU table, g_h the harness. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/cuda_common.h"
#include "tests/ops/op_cases.h"

static const lj_ops *G, *H;
static lj_harness *g_h;
static const lj_op_case *g_case;
static int g_bf16_grads; /* the case's gradient dtype is bf16 */

/* Opens the CUDA table of the case's gradient dtype (one constant table per configuration). */
static void begin(lj_harness *h, const lj_op_case *c) {
    g_h = h;
    g_case = c;
    LJ_ASSERT(c->dtype == LJ_DTYPE_BF16 || c->dtype == LJ_DTYPE_F32, "CUDA case %s: gradient dtype %d", c->op,
              (int)c->dtype);
    lj_ops_config cfg = LJ_OPS_CONFIG_DEFAULT;
    cfg.grad_dtype = c->dtype;
    G = lj_ops_cuda_open(&cfg);
    LJ_ASSERT(G && G->grad_dtype == c->dtype, "CUDA case %s: no table of gradient dtype %s", c->op,
              lj_dtype_name(c->dtype));
    H = lj_ops_cpu();
    g_bf16_grads = c->dtype == LJ_DTYPE_BF16;
}

static void check(const char *op, const char *shape, const float *got, const float *ref, int64_t n, double tol_l2,
                  double tol_max) {
    lj_harness_check_f(g_h, op, shape, got, ref, n, lj_harness_tol_gpu(tol_l2, tol_max));
}

/* ---- buffers ---------------------------------------------------------------------- */

static float *hrand(int64_t n, float scale) { return lj_harness_randf_bf16(g_h, n, scale); }

static float *hzeros(int64_t n) { return lj_calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

static float *hcopy(const float *x, int64_t n) {
    float *y = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* The harness's device buffers (harness.h) on the backend G. */
static void *galloc(size_t bytes) { return lj_harness_dalloc(G, bytes); }
static void gpoison(void *d, size_t bytes) { lj_harness_dpoison(G, d, bytes); }
static void *gbf16(const float *x, int64_t n) { return lj_harness_upload(G, x, n, LJ_DTYPE_BF16); }
static void *gf32(const float *x, int64_t n) { return lj_harness_upload(G, x, n, LJ_DTYPE_F32); }
static float *dl_bf16(const void *d, int64_t n) { return lj_harness_download_f32(G, d, n, LJ_DTYPE_BF16); }
static float *dl_f32(const void *d, int64_t n) { return lj_harness_download_f32(G, d, n, LJ_DTYPE_F32); }

/* Weight gradients in the backend's grad dtype (host values must be bf16-exact when it is bf16). */
static void *ggrad(const float *x, int64_t n) { return g_bf16_grads ? gbf16(x, n) : gf32(x, n); }

/* ---- ops -------------------------------------------------------------------------- */

static void test_adamw(int64_t total, float max_grad_norm) {
    char shape[80];
    snprintf(shape, sizeof shape, "n=%lld clip=%g", (long long)total, max_grad_norm);
    /* three segments with a gap, different weight decay; plus many small ones to pass one
     * launch's segment table */
    lj_adamw_segment seg[120];
    int ns = 0;
    int64_t off = 0;
    seg[ns++] = (lj_adamw_segment){off, total / 2, 0.1f, 0};
    off += total / 2 + 3;
    seg[ns++] = (lj_adamw_segment){off, total / 4, 0.0f, 1}; /* lr group 1 (--decoupled-lr's) */
    off += total / 4;
    while (ns < 110 && off + 17 < total) {
        seg[ns++] = (lj_adamw_segment){off, 17, ns % 2 ? 0.01f : 0.0f, ns % 3 == 0};
        off += 17;
    }
    if (off < total) seg[ns++] = (lj_adamw_segment){off, total - off, 0.05f, 0};
    lj_adamw_hparams hp = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .max_grad_norm = max_grad_norm};
    float sc[LJ_ADAMW_NUM_SCALARS]; /* lr 1e-3 (group 1: 4e-4) at step 3: host memory for H, device memory for G */
    lj_adamw_step_scalars2(sc, &hp, 1e-3f, 4e-4f, 3);
    float *p = hrand(total, 1.0f), *g = hrand(total, 1.0f), *m = hrand(total, 0.1f), *v = hzeros(total);
    for (int64_t i = 0; i < total; i++) v[i] = fabsf((float)lj_rng_normal(&g_h->rng)) * 0.01f;
    double s = 0;
    for (int64_t i = 0; i < total; i++) s += (double)g[i] * g[i];
    float gn = (float)s;
    float *hp_master = hcopy(p, total), *hm = hcopy(m, total), *hv = hcopy(v, total), *hparams = hcopy(p, total);
    H->adamw_update(hparams, hp_master, g, hm, hv, seg, ns, &hp, sc, &gn);
    void *gp = galloc((size_t)total * 2), *gmaster = gf32(p, total), *gg = ggrad(g, total), *gm = gf32(m, total);
    void *gv = gf32(v, total), *ggn = gf32(&gn, 1), *gsc = gf32(sc, LJ_ADAMW_NUM_SCALARS);
    gpoison(gp, (size_t)total * 2);
    G->adamw_update(gp, gmaster, gg, gm, gv, seg, ns, &hp, gsc, ggn);
    float *op = dl_bf16(gp, total), *om = dl_f32(gmaster, total), *omm = dl_f32(gm, total), *ov = dl_f32(gv, total);
    /* params outside every segment stay poisoned on the GPU: compare the segments only */
    float *ref_bf = hzeros(total), *op_seg = hzeros(total);
    for (int i = 0; i < ns; i++)
        for (int64_t k = 0; k < seg[i].count; k++) {
            int64_t e = seg[i].offset + k;
            ref_bf[e] = lj_bf16_to_f32(lj_f32_to_bf16(hp_master[e]));
            op_seg[e] = op[e];
        }
    check("adamw_update master", shape, om, hp_master, total, 1e-6, 1e-5);
    check("adamw_update m", shape, omm, hm, total, 1e-6, 1e-5);
    check("adamw_update v", shape, ov, hv, total, 1e-6, 1e-5);
    check("adamw_update params (bf16)", shape, op_seg, ref_bf, total, 1e-2, 1e-2);
    G->free(gp), G->free(gmaster), G->free(gg), G->free(gm), G->free(gv), G->free(ggn), G->free(gsc);
    free(p), free(g), free(m), free(v), free(hp_master), free(hm), free(hv), free(hparams), free(op), free(om);
    free(omm), free(ov), free(ref_bf), free(op_seg);
}

/* ---- the table's entry points ---------------------------------------------------------- */

/* d = {n}; param = max_grad_norm */
void lj_case_cuda_adamw(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(h, c);
    test_adamw(c->d[0], (float)c->param);
}

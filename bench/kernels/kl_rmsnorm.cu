/* kl_rmsnorm.cu: kernel lab for RMSNorm (cuda_layers.cu): forward, the fused residual add +
 * RMSNorm against its unfused twin (add, then rmsnorm_forward), and the backward, at the
 * benchmark shapes (N = 16384 rows, C = 2048 and 3072). Checked against the CPU backend;
 * reported in GB/s of the fewest bytes each op must move (every input read once, every output
 * written once) against the HBM copy ceiling. */
#include "bench/kernels/kl_common.h"

typedef struct {
    const lj_ops *ops;
    int N, C;
    void *x, *y, *w, *out, *res, *sum, *dout, *dx, *ws;
    float *rstd;
    void *dw; /* grad dtype */
} rn_ctx;

static void run_fwd(void *p) {
    rn_ctx *c = (rn_ctx *)p;
    c->ops->rmsnorm_forward(c->out, c->rstd, c->x, c->w, c->N, c->C, 1e-5f);
}
static void run_fused(void *p) {
    rn_ctx *c = (rn_ctx *)p;
    c->ops->residual_rmsnorm_forward(c->res, c->out, c->rstd, c->x, c->y, c->w, c->N, c->C, 1e-5f);
}
static void run_unfused(void *p) {
    rn_ctx *c = (rn_ctx *)p;
    c->ops->add(c->sum, c->x, c->y, (int64_t)c->N * c->C);
    c->ops->rmsnorm_forward(c->out, c->rstd, c->sum, c->w, c->N, c->C, 1e-5f);
}
static void run_bwd(void *p) {
    rn_ctx *c = (rn_ctx *)p;
    c->ops->rmsnorm_backward(c->dx, c->dw, c->dout, c->x, c->w, c->rstd, c->N, c->C, LJ_GRAD_ACCUMULATE, c->ws);
}

static float *to_host_f32(const lj_ops *ops, const void *d, int64_t n, int bf16) {
    float *h = (float *)malloc((size_t)n * 4);
    if (bf16) {
        uint16_t *b = (uint16_t *)malloc((size_t)n * 2);
        ops->download(b, d, (size_t)n * 2);
        for (int64_t i = 0; i < n; i++) h[i] = lj_bf16_to_f32(b[i]);
        free(b);
    } else {
        ops->download(h, d, (size_t)n * 4);
    }
    return h;
}

static void host_check(const char *what, const float *got, const float *ref, int64_t n, double tol) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    int fail = !(rel <= tol);
    kl_failures += fail;
    printf("  check %-40s rel_l2 %.3e vs CPU (tol %.0e) %s\n", what, rel, tol, fail ? "FAIL" : "ok");
}

static void bench(const lj_ops *ops, int N, int C) {
    int64_t n = (int64_t)N * C;
    rn_ctx c;
    memset(&c, 0, sizeof c);
    c.ops = ops;
    c.N = N;
    c.C = C;
    c.x = kl_rand_bf16(ops, n, 21, 2.0f);
    c.y = kl_rand_bf16(ops, n, 22, 1.0f);
    c.w = kl_rand_bf16(ops, C, 23, 1.0f);
    c.dout = kl_rand_bf16(ops, n, 24, 1.0f);
    c.out = kl_alloc(ops, (size_t)n * 2);
    c.res = kl_alloc(ops, (size_t)n * 2);
    c.sum = kl_alloc(ops, (size_t)n * 2);
    c.dx = kl_alloc(ops, (size_t)n * 2);
    c.rstd = (float *)kl_alloc(ops, (size_t)N * 4);
    const size_t gs = lj_dtype_size(ops->grad_dtype);
    c.dw = kl_alloc(ops, (size_t)C * gs);
    c.ws = kl_alloc(ops, ops->rmsnorm_backward_workspace_bytes(N, C));
    printf("rmsnorm N=%d C=%d\n", N, C);

    /* correctness: forward and backward against the CPU backend */
    const lj_ops *cpu = lj_ops_cpu();
    if (cpu) {
        ops->memset_zero(c.dx, (size_t)n * 2);
        ops->memset_zero(c.dw, (size_t)C * gs);
        run_fwd(&c);
        run_bwd(&c);
        float *hx = to_host_f32(ops, c.x, n, 1), *hw = to_host_f32(ops, c.w, C, 1);
        float *hd = to_host_f32(ops, c.dout, n, 1);
        float *ho = (float *)calloc((size_t)n, 4), *hr = (float *)calloc((size_t)N, 4);
        float *hdx = (float *)calloc((size_t)n, 4), *hdw = (float *)calloc((size_t)C, 4);
        void *hws = malloc(cpu->rmsnorm_backward_workspace_bytes(N, C) + 1);
        cpu->rmsnorm_forward(ho, hr, hx, hw, N, C, 1e-5f);
        cpu->rmsnorm_backward(hdx, hdw, hd, hx, hw, hr, N, C, LJ_GRAD_ACCUMULATE, hws);
        float *go = to_host_f32(ops, c.out, n, 1), *gdx = to_host_f32(ops, c.dx, n, 1);
        float *gdw = to_host_f32(ops, c.dw, C, gs == 2);
        host_check("forward out", go, ho, n, 1e-2);
        host_check("backward dx", gdx, hdx, n, 1e-2);
        host_check("backward dw", gdw, hdw, C, 1e-2);
        free(hx), free(hw), free(hd), free(ho), free(hr), free(hdx), free(hdw), free(hws), free(go), free(gdx);
        free(gdw);
    } else {
        printf("  (no CPU backend: %s)\n", lj_error_message());
    }
    run_fused(&c);
    void *fused_out = kl_alloc(ops, (size_t)n * 2);
    ops->copy(fused_out, c.out, (size_t)n * 2);
    run_unfused(&c);
    kl_check_bf16(ops, "residual_rmsnorm vs add+rmsnorm out", fused_out, c.out, n, 1e-6);
    kl_check_bf16(ops, "residual_rmsnorm vs add res_out", c.res, c.sum, n, 1e-6);
    ops->free(fused_out);

    struct {
        const char *name;
        void (*fn)(void *);
        double bytes;
    } runs[4] = {{"forward", run_fwd, 4.0 * n}, {"residual+norm fused", run_fused, 8.0 * n},
                 {"add + norm unfused", run_unfused, 10.0 * n}, {"backward", run_bwd, 8.0 * n}};
    for (int i = 0; i < 4; i++) {
        float ms = kl_time_ms(runs[i].fn, &c, 3, 20);
        double gbs = runs[i].bytes / (ms * 1e-3) / 1e9;
        printf("  %-22s %8.3f ms %7.0f GB/s (%.0f%% of %.0f)\n", runs[i].name, ms, gbs, 100.0 * gbs / KL_HBM_CEILING_GBS,
               KL_HBM_CEILING_GBS);
        printf("RESULT rmsnorm C=%d %s %.0f GB/s %.3f ms\n", C, runs[i].name, gbs, ms);
    }
    ops->free(c.x), ops->free(c.y), ops->free(c.w), ops->free(c.dout), ops->free(c.out), ops->free(c.res);
    ops->free(c.sum), ops->free(c.dx), ops->free(c.rstd), ops->free(c.dw), ops->free(c.ws);
}

int main(void) {
    const lj_ops *ops = kl_start("kl_rmsnorm");
    bench(ops, 16384, 2048);
    bench(ops, 8192, 3072);
    return kl_finish("kl_rmsnorm");
}

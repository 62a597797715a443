/* kl_elementwise.cu: kernel lab for the memory-bound ops at llama3.2-1b's shapes (micro-batch 4,
 * sequence 4096): SwiGLU fused against unfused (checked against each other), RoPE, the
 * embedding, the global gradient norm and multi-tensor AdamW over 1.24B parameters. Reported in
 * GB/s of the fewest bytes each op must move, against the HBM copy ceiling. */
#include "bench/kernels/kl_common.h"

typedef struct {
    const lj_ops *ops;
    int N, I, C, V, nh, nkv, hd, T, B;
    int64_t P;
    void *gate_up, *out, *tmp, *dout, *dgu, *qkv, *emb_out, *wte, *params;
    float *cosv, *sinv, *master, *m, *v, *gn, *ws, *scalars; /* scalars: AdamW's per-step, device */
    void *dwte, *grad, *emb_ws; /* grad dtype */
    int32_t *ids;
    lj_adamw_segment seg[2];
} ew_ctx;

static void swiglu_f(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->swiglu_forward(c->out, c->gate_up, c->N, c->I);
}
static void swiglu_fu(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->swiglu_forward_unfused(c->out, c->tmp, c->gate_up, c->N, c->I);
}
static void swiglu_b(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->swiglu_backward(c->dgu, c->dout, c->gate_up, c->N, c->I);
}
static void swiglu_bu(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->swiglu_backward_unfused(c->dgu, c->tmp, c->dout, c->gate_up, c->N, c->I);
}
static void rope_f(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->rope_forward(c->qkv, c->cosv, c->sinv, c->B, c->T, c->nh, c->nkv, c->hd);
}
static void emb_f(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->embedding_forward(c->emb_out, c->ids, c->wte, c->N, c->C);
}
static void emb_b(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->embedding_backward(c->dwte, c->emb_out, c->ids, c->N, c->C, c->emb_ws);
}
static void norm_sq(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    c->ops->global_norm_sq(c->gn, c->grad, c->P, c->ws);
}
static void adamw(void *p) {
    ew_ctx *c = (ew_ctx *)p;
    lj_adamw_hparams hp = {0.9f, 0.95f, 1e-8f, 1.0f};
    c->ops->adamw_update(c->params, c->master, c->grad, c->m, c->v, c->seg, 2, &hp, c->scalars, c->gn);
}

static void report(const char *name, void (*fn)(void *), ew_ctx *c, double bytes) {
    float ms = kl_time_ms(fn, c, 3, 20);
    double gbs = bytes / (ms * 1e-3) / 1e9;
    printf("  %-24s %8.3f ms %7.0f GB/s (%.0f%% of %.0f)\n", name, ms, gbs, 100.0 * gbs / KL_HBM_CEILING_GBS,
           KL_HBM_CEILING_GBS);
    printf("RESULT elementwise %s %.0f GB/s %.3f ms\n", name, gbs, ms);
}

int main(void) {
    const lj_ops *ops = kl_start("kl_elementwise");
    ew_ctx c;
    memset(&c, 0, sizeof c);
    c.ops = ops;
    c.B = 4, c.T = 4096, c.N = c.B * c.T, c.I = 8192, c.C = 2048, c.V = 128256, c.nh = 32, c.nkv = 8, c.hd = 64;
    c.P = 1235814400;
    int64_t nI = (int64_t)c.N * c.I;
    c.gate_up = kl_rand_bf16(ops, 2 * nI, 41, 3.0f);
    c.dout = kl_rand_bf16(ops, nI, 42, 1.0f);
    c.out = kl_alloc(ops, (size_t)nI * 2);
    c.tmp = kl_alloc(ops, (size_t)nI * 2);
    c.dgu = kl_alloc(ops, (size_t)nI * 4);
    printf("swiglu N=%d I=%d\n", c.N, c.I);
    void *o1 = kl_alloc(ops, (size_t)nI * 2), *d1 = kl_alloc(ops, (size_t)nI * 4);
    swiglu_f(&c);
    swiglu_b(&c);
    ops->copy(o1, c.out, (size_t)nI * 2);
    ops->copy(d1, c.dgu, (size_t)nI * 4);
    swiglu_fu(&c);
    swiglu_bu(&c);
    kl_check_bf16(ops, "swiglu fused vs unfused forward", o1, c.out, nI, 1e-2);
    kl_check_bf16(ops, "swiglu fused vs unfused backward", d1, c.dgu, 2 * nI, 1e-2);
    ops->free(o1), ops->free(d1);
    report("swiglu forward fused", swiglu_f, &c, 6.0 * nI);
    report("swiglu forward unfused", swiglu_fu, &c, 6.0 * nI);
    report("swiglu backward fused", swiglu_b, &c, 10.0 * nI);
    report("swiglu backward unfused", swiglu_bu, &c, 10.0 * nI);
    ops->free(c.gate_up), ops->free(c.dout), ops->free(c.out), ops->free(c.tmp), ops->free(c.dgu);

    int64_t row = (int64_t)(c.nh + 2 * c.nkv) * c.hd;
    c.qkv = kl_rand_bf16(ops, (int64_t)c.N * row, 43, 1.0f);
    c.cosv = kl_rand_f32(ops, (int64_t)c.T * c.hd / 2, 44, 1.0f);
    c.sinv = kl_rand_f32(ops, (int64_t)c.T * c.hd / 2, 45, 1.0f);
    printf("rope B=%d T=%d nh=%d nkv=%d hd=%d\n", c.B, c.T, c.nh, c.nkv, c.hd);
    report("rope forward", rope_f, &c, 4.0 * c.N * (c.nh + c.nkv) * c.hd);
    ops->free(c.qkv), ops->free(c.cosv), ops->free(c.sinv);

    c.wte = kl_rand_bf16(ops, (int64_t)c.V * c.C, 46, 1.0f);
    c.emb_out = kl_alloc(ops, (size_t)c.N * c.C * 2);
    const size_t gs = lj_dtype_size(ops->grad_dtype);
    c.dwte = kl_alloc(ops, (size_t)c.V * c.C * gs);
    ops->memset_zero(c.dwte, (size_t)c.V * c.C * gs);
    c.emb_ws = kl_alloc(ops, ops->embedding_backward_workspace_bytes(c.N));
    int32_t *ids = (int32_t *)malloc((size_t)c.N * 4);
    for (int n = 0; n < c.N; n++) ids[n] = (int32_t)(((uint32_t)n * 2654435761u) % (uint32_t)c.V);
    c.ids = (int32_t *)kl_alloc(ops, (size_t)c.N * 4);
    ops->upload(c.ids, ids, (size_t)c.N * 4);
    free(ids);
    printf("embedding N=%d C=%d V=%d\n", c.N, c.C, c.V);
    report("embedding forward", emb_f, &c, 4.0 * c.N * c.C);
    report("embedding backward", emb_b, &c, 2.0 * c.N * c.C + 2.0 * gs * c.N * c.C);
    ops->free(c.wte), ops->free(c.emb_out), ops->free(c.dwte), ops->free(c.ids), ops->free(c.emb_ws);

    c.grad = gs == 2 ? kl_rand_bf16(ops, c.P, 47, 1e-3f) : (void *)kl_rand_f32(ops, c.P, 47, 1e-3f);
    c.master = kl_rand_f32(ops, c.P, 48, 0.02f);
    c.m = kl_rand_f32(ops, c.P, 49, 1e-4f);
    c.v = (float *)kl_alloc(ops, (size_t)c.P * 4);
    ops->memset_zero(c.v, (size_t)c.P * 4);
    c.params = kl_alloc(ops, (size_t)c.P * 2);
    c.gn = (float *)kl_alloc(ops, 4);
    c.ws = (float *)kl_alloc(ops, ops->global_norm_workspace_bytes(c.P));
    c.scalars = (float *)kl_alloc(ops, LJ_ADAMW_NUM_SCALARS * sizeof(float));
    {
        const lj_adamw_hparams hp = {0.9f, 0.95f, 1e-8f, 1.0f};
        float s[LJ_ADAMW_NUM_SCALARS];
        lj_adamw_step_scalars(s, &hp, 3e-4f, 10); /* lr 3e-4 at step 10 */
        ops->upload(c.scalars, s, sizeof s);
    }
    c.seg[0] = (lj_adamw_segment){0, c.P / 2, 0.1f};
    c.seg[1] = (lj_adamw_segment){c.P / 2, c.P - c.P / 2, 0.0f};
    printf("optimizer over %lld parameters, %s gradients\n", (long long)c.P, lj_dtype_name(ops->grad_dtype));
    report("global_norm_sq", norm_sq, &c, (double)gs * c.P);
    report("adamw_update", adamw, &c, (26.0 + gs) * c.P);
    ops->free(c.grad), ops->free(c.master), ops->free(c.m), ops->free(c.v), ops->free(c.params), ops->free(c.gn);
    ops->free(c.ws), ops->free(c.scalars);
    return kl_finish("kl_elementwise");
}

/* cases_fp8_cuda.c: the CUDA backend's FP8 ops against the CPU backend's emulation (check) and
 * the FP8 GEMM's speed against bf16 at the Llama shapes (perf):
 *   - the cast (the hardware's cvt.rn.satfinite) bit for bit: every bf16 bit pattern at several
 *     scales, both formats, with the transpose and the zero padding; amax and current scale;
 *   - delayed scaling's history update bit for bit;
 *   - the cast fused into the SwiGLU against the SwiGLU followed by the cast, bit for bit;
 *   - the FP8 GEMM (cuBLASLt) against the CPU's over the same codes (bf16 output rounding), and
 *     against the unquantized bf16 GEMM within the formats' rounding; overwrite and accumulate,
 *     bf16 and fp32 outputs; K not a multiple of 16, odd M;
 *   - the blockwise recipe: its casts (1x128 tiles rowwise and columnwise, 128x128 blocks with
 *     the transpose) bit for bit, codes, factors and the layouts' padding, at shapes with partial
 *     tiles; its block-scaled GEMM (cuBLASLt's VEC128_32F / BLK128x128_32F) against the CPU's
 *     and the bf16 GEMM; and their speed (perf). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/cuda_common.h"
#include "tests/ops/op_cases.h"

#define SHAPE(...) char shape[96]; snprintf(shape, sizeof shape, __VA_ARGS__)

static const lj_ops *G, *H;

static void begin(const lj_op_case *c) {
    lj_ops_config cfg = LJ_OPS_CONFIG_DEFAULT;
    cfg.grad_dtype = c->dtype;
    G = lj_ops_cuda_open(&cfg);
    LJ_ASSERT(G, "no CUDA backend: %s", lj_error_message());
    H = lj_ops_cpu();
}

/* bytes of device memory, with h[bytes] copied in unless h is NULL; host f32 as device bf16 */
static void *up(const void *h, size_t bytes) {
    void *d = lj_harness_dalloc(G, bytes);
    if (h) G->upload(d, h, bytes);
    return d;
}
static void *up_bf16(const float *x, int64_t n) { return lj_harness_upload(G, x, n, LJ_DTYPE_BF16); }

static void down(void *h, const void *d, size_t bytes) { G->download(h, d, bytes); }

/* d = {} (the 65536 bf16 patterns as a [256, 256] tensor, and a [37, 53] random one). */
void lj_case_cuda_fp8_cast(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(c);
    const int R = 256, C = 256, ld = lj_fp8_ld(C), ldt = lj_fp8_ld(R);
    SHAPE("all bf16 [256, 256]");
    float *x = lj_malloc((size_t)R * C * sizeof(float));
    for (int i = 0; i < R * C; i++) x[i] = lj_bf16_to_f32((uint16_t)i);
    void *dx = up_bf16(x, (int64_t)R * C);
    uint8_t *q = lj_malloc((size_t)R * ld), *qt = lj_malloc((size_t)C * ldt), *gq = lj_malloc((size_t)R * ld),
            *gqt = lj_malloc((size_t)C * ldt);
    void *dq = up(NULL, (size_t)R * ld), *dqt = up(NULL, (size_t)C * ldt);
    float *dstate = up(NULL, 4 * sizeof(float)); /* scale, scale_inv, amax */
    const float scales[4] = {1.0f, 3.0f, 1.0f / 7.0f, 1024.0f};
    for (int f = 0; f < 2; f++) {
        const lj_fp8_format fmt = (lj_fp8_format)f;
        for (int k = 0; k < 4; k++) {
            float st[3] = {scales[k], 1.0f / scales[k], 0.0f}, amax_cpu = 0.0f;
            G->upload(dstate, st, sizeof st);
            lj_fp8_scaling gs = {dstate, dstate + 1, dstate + 2, 0}, hs = {&st[0], &st[1], &amax_cpu, 0};
            G->fp8_quantize(dq, dqt, dx, R, C, fmt, &gs);
            H->fp8_quantize(q, qt, x, R, C, fmt, &hs);
            down(gq, dq, (size_t)R * ld);
            down(gqt, dqt, (size_t)C * ldt);
            float amax_gpu;
            down(&amax_gpu, dstate + 2, 4);
            /* NaN inputs: compared on their own (the canonical NaN code) */
            int diff = 0, first = -1, nan_diff = 0;
            for (int i = 0; i < R * C; i++) {
                const int r = i / C, col = i % C;
                const int same = gq[(size_t)r * ld + col] == q[(size_t)r * ld + col];
                if (isnan(x[i])) nan_diff += !same;
                else if (!same) {
                    diff++;
                    if (first < 0) first = i;
                }
            }
            char op[64];
            snprintf(op, sizeof op, "fp8_quantize %s", lj_fp8_format_name(fmt));
            lj_harness_check_true(h, op, shape, diff == 0,
                                  "scale %g: GPU codes equal the CPU emulation for every non-NaN bf16 (%d differ, "
                                  "first bf16 0x%04x: gpu 0x%02x cpu 0x%02x)",
                                  (double)scales[k], diff, first < 0 ? 0 : first,
                                  first < 0 ? 0 : gq[(size_t)(first / C) * ld + first % C],
                                  first < 0 ? 0 : q[(size_t)(first / C) * ld + first % C]);
            lj_harness_check_true(h, op, shape, nan_diff == 0, "scale %g: NaN inputs give the same code (%d differ)",
                                  (double)scales[k], nan_diff);
            int tdiff = 0;
            for (int col = 0; col < C; col++)
                for (int r = 0; r < R; r++)
                    if (!isnan(x[(size_t)r * C + col]))
                        tdiff += gqt[(size_t)col * ldt + r] != qt[(size_t)col * ldt + r];
            lj_harness_check_true(h, op, shape, tdiff == 0, "scale %g: the transposes equal (%d differ)",
                                  (double)scales[k], tdiff);
            lj_harness_check_true(h, op, shape, isnan(amax_gpu) && isnan(amax_cpu),
                                  "delayed: the recorded amax is NaN on both (the tensor holds NaN)");
        }
    }
    /* current scaling on random tensors of odd shapes: amax, scale and codes, padding zero; the
     * second shape takes the vector kernels (cols a multiple of 8, rows not of the tile) */
    static const int shapes[2][2] = {{37, 53}, {100, 136}};
    for (int sh = 0; sh < 2; sh++) {
        const int R2 = shapes[sh][0], C2 = shapes[sh][1], ld2 = lj_fp8_ld(C2), ldt2 = lj_fp8_ld(R2);
        snprintf(shape, sizeof shape, "rows=%d cols=%d", R2, C2);
        float *y = lj_harness_randf_bf16(h, (int64_t)R2 * C2, 2.0f);
        void *dy = up_bf16(y, (int64_t)R2 * C2);
        for (int f = 0; f < 2; f++) {
            const lj_fp8_format fmt = (lj_fp8_format)f;
            float st[3] = {0, 0, 0}, gst[3];
            lj_fp8_scaling hs = {&st[0], &st[1], &st[2], 1}, gs = {dstate, dstate + 1, dstate + 2, 1};
            H->fp8_amax(&st[2], y, (int64_t)R2 * C2);
            G->fp8_amax(dstate + 2, dy, (int64_t)R2 * C2);
            memset(gq, 0xAA, (size_t)R2 * ld2);
            G->upload(dq, gq, (size_t)R2 * ld2);
            G->upload(dqt, gq, (size_t)R2 * ld2 < (size_t)C2 * ldt2 ? (size_t)R2 * ld2 : (size_t)C2 * ldt2);
            G->fp8_quantize(dq, dqt, dy, R2, C2, fmt, &gs);
            H->fp8_quantize(q, qt, y, R2, C2, fmt, &hs);
            down(gst, dstate, sizeof gst);
            down(gq, dq, (size_t)R2 * ld2);
            down(gqt, dqt, (size_t)C2 * ldt2);
            char op[64];
            snprintf(op, sizeof op, "fp8_amax+current %s", lj_fp8_format_name(fmt));
            lj_harness_check_bits(h, op, shape, gst, st, sizeof st);
            lj_harness_check_bits(h, op, shape, gq, q, (size_t)R2 * ld2);
            lj_harness_check_bits(h, op, shape, gqt, qt, (size_t)C2 * ldt2);
        }
        G->free(dy), free(y);
    }
    G->free(dx), G->free(dq), G->free(dqt), G->free(dstate);
    free(x), free(q), free(qt), free(gq), free(gqt);
}

/* d = {N, I}: the cast fused into the SwiGLU (fp8_swiglu_quantize) against the SwiGLU followed by
 * the cast on the same GPU, bit for bit: h, q, q_t (padding included) and the recorded amax, in
 * both formats; without write_h, the same codes with h left alone where the fused kernel runs
 * (I a multiple of 8; other widths take the unfused fallback, which writes h); and current
 * scaling's form (fp8_swiglu_amax) against the SwiGLU followed by fp8_amax. */
void lj_case_cuda_fp8_swiglu(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(c);
    const int N = c->d[0], I = c->d[1], ld = lj_fp8_ld(I), ldt = lj_fp8_ld(N);
    SHAPE("N=%d I=%d", N, I);
    const size_t nh = (size_t)N * I * 2, nq = (size_t)N * ld, nqt = (size_t)I * ldt;
    float *gu = lj_harness_randf_bf16(h, (int64_t)N * 2 * I, 3.0f);
    void *dgu = up_bf16(gu, (int64_t)N * 2 * I);
    void *dh_ref = up(NULL, nh), *dq_ref = up(NULL, nq), *dqt_ref = up(NULL, nqt);
    void *dh = up(NULL, nh), *dq = up(NULL, nq), *dqt = up(NULL, nqt);
    float *dst = up(NULL, 8 * sizeof(float)); /* scale, scale_inv, amax: reference at 0, fused at 4 */
    const size_t most = nh > nq ? (nh > nqt ? nh : nqt) : (nq > nqt ? nq : nqt);
    uint8_t *a = lj_malloc(most), *b = lj_malloc(most);
    uint8_t *poison = lj_malloc(nh);
    memset(poison, 0x5A, nh);
    for (int f = 0; f < 2; f++) {
        const lj_fp8_format fmt = (lj_fp8_format)f;
        for (int write_h = 1; write_h >= 0; write_h--) {
            const float st[8] = {3.0f, 1.0f / 3.0f, 0.0f, 0.0f, 3.0f, 1.0f / 3.0f, 0.0f, 0.0f};
            G->upload(dst, st, sizeof st);
            G->upload(dh, poison, nh);
            G->upload(dq, poison, nq);
            G->upload(dqt, poison, nqt);
            const lj_fp8_scaling rs = {dst, dst + 1, dst + 2, 0}, fs = {dst + 4, dst + 5, dst + 6, 0};
            G->swiglu_forward(dh_ref, dgu, N, I);
            G->fp8_quantize(dq_ref, dqt_ref, dh_ref, N, I, fmt, &rs);
            G->fp8_swiglu_quantize(dh, write_h, dq, dqt, dgu, N, I, fmt, &fs);
            char op[64];
            snprintf(op, sizeof op, "fp8_swiglu_quantize %s%s", lj_fp8_format_name(fmt), write_h ? "" : " no h");
            down(a, dq, nq), down(b, dq_ref, nq);
            lj_harness_check_bits(h, op, shape, a, b, nq);
            down(a, dqt, nqt), down(b, dqt_ref, nqt);
            lj_harness_check_bits(h, op, shape, a, b, nqt);
            float got[8];
            down(got, dst, sizeof got);
            lj_harness_check_bits(h, op, shape, got + 4, got, 3 * sizeof(float)); /* scale untouched, amax equal */
            down(a, dh, nh);
            if (write_h) {
                down(b, dh_ref, nh);
                lj_harness_check_bits(h, op, shape, a, b, nh);
            } else if (I % 8 == 0) {
                lj_harness_check_bits(h, op, shape, a, poison, nh);
            }
        }
    }
    /* current scaling's form: h and its amax against swiglu_forward then fp8_amax */
    G->upload(dh, poison, nh);
    G->swiglu_forward(dh_ref, dgu, N, I);
    G->fp8_amax(dst, dh_ref, (int64_t)N * I);
    G->fp8_swiglu_amax(dst + 4, dh, dgu, N, I);
    float got[8];
    down(got, dst, sizeof got);
    lj_harness_check_bits(h, "fp8_swiglu_amax", shape, got + 4, got, sizeof(float));
    down(a, dh, nh), down(b, dh_ref, nh);
    lj_harness_check_bits(h, "fp8_swiglu_amax", shape, a, b, nh);
    G->free(dgu), G->free(dh_ref), G->free(dq_ref), G->free(dqt_ref), G->free(dh), G->free(dq), G->free(dqt);
    G->free(dst);
    free(gu), free(a), free(b), free(poison);
}

/* d = {tensors, history}; param = algo_max. */
void lj_case_cuda_fp8_scale_update(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(c);
    const int S = c->d[0], Hn = c->d[1];
    SHAPE("tensors=%d history=%d algo=%s", S, Hn, c->param ? "max" : "most_recent");
    const size_t nh = (size_t)S * Hn;
    float *hist = lj_harness_randf(h, (int64_t)nh, 100.0f), *scale = lj_harness_randf(h, S, 1.0f);
    for (size_t i = 0; i < nh; i++) hist[i] = fabsf(hist[i]);
    hist[0] = 0.0f, hist[1 % S] = INFINITY, hist[2 % S] = NAN;
    const size_t ni = (size_t)S * LJ_FP8_SCALE_INV_STRIDE;
    float *sinv = lj_calloc(ni, sizeof(float));
    float *dh = up(hist, nh * 4), *ds = up(scale, (size_t)S * 4), *di = up(sinv, ni * 4);
    G->fp8_scale_update(dh, ds, di, S, Hn, S / 3, 448.0f / 2, 57344.0f / 2, (int)c->param);
    H->fp8_scale_update(hist, scale, sinv, S, Hn, S / 3, 448.0f / 2, 57344.0f / 2, (int)c->param);
    float *gh = lj_malloc(nh * 4), *gs = lj_malloc((size_t)S * 4), *gi = lj_malloc(ni * 4);
    down(gh, dh, nh * 4), down(gs, ds, (size_t)S * 4), down(gi, di, ni * 4);
    lj_harness_check_bits(h, "fp8_scale_update history", shape, gh, hist, nh * 4);
    lj_harness_check_bits(h, "fp8_scale_update scale", shape, gs, scale, (size_t)S * 4);
    lj_harness_check_bits(h, "fp8_scale_update scale_inv", shape, gi, sinv, ni * 4);
    G->free(dh), G->free(ds), G->free(di);
    free(hist), free(scale), free(sinv), free(gh), free(gs), free(gi);
}

/* The device GEMM of one case, into `out` (dtype, grad mode) from the device codes and scales it
 * holds. */
typedef void (*fp8_gemm_fn)(void *ctx, void *out, lj_dtype dtype, lj_grad_mode mode);

/* The three forms every FP8 GEMM case checks, given the CPU's f32 result `ref` [M, N] of the same
 * codes (overwritten: it is the accumulate form's reference afterwards) and the unquantized inputs
 * a [M, K], b [N, K]: bf16 output against the CPU emulation (tol), against the bf16 GEMM of a and
 * b (tol_grad), and += onto random values in the case's grad dtype against the emulation. */
static void check_gemm_forms(lj_harness *h, const lj_op_case *c, const char *shape, const char *name, fp8_gemm_fn gemm,
                             void *ctx, const float *a, const float *b, float *ref, int M, int N, int K) {
    char what[128];
    void *dout = up(NULL, (size_t)M * N * 2);
    gemm(ctx, dout, LJ_DTYPE_BF16, LJ_GRAD_OVERWRITE);
    uint16_t *ob = lj_malloc((size_t)M * N * 2);
    float *got = lj_malloc((size_t)M * N * 4);
    down(ob, dout, (size_t)M * N * 2);
    for (int i = 0; i < M * N; i++) got[i] = lj_bf16_to_f32(ob[i]);
    snprintf(what, sizeof what, "%s bf16 out vs CPU emulation", name);
    lj_harness_check_f(h, what, shape, got, ref, (int64_t)M * N, c->tol);
    /* against the unquantized bf16 GEMM of the same values (x w^T form: a as x, b as w) */
    void *da = up_bf16(a, (int64_t)M * K), *db = up_bf16(b, (int64_t)N * K), *dmm = up(NULL, (size_t)M * N * 2);
    G->matmul_forward(dmm, da, db, M, K, N);
    float *mm = lj_malloc((size_t)M * N * 4);
    down(ob, dmm, (size_t)M * N * 2);
    for (int i = 0; i < M * N; i++) mm[i] = lj_bf16_to_f32(ob[i]);
    snprintf(what, sizeof what, "%s vs the bf16 GEMM", name);
    lj_harness_check_f(h, what, shape, got, mm, (int64_t)M * N, c->tol_grad);
    /* the weight-gradient form: grad dtype, accumulate onto random values */
    const size_t gsz = lj_dtype_size(c->dtype);
    float *init = lj_harness_randf_bf16(h, (int64_t)M * N, 1.0f);
    void *dacc = c->dtype == LJ_DTYPE_BF16 ? up_bf16(init, (int64_t)M * N) : up(init, (size_t)M * N * 4);
    gemm(ctx, dacc, c->dtype, LJ_GRAD_ACCUMULATE);
    void *hacc = lj_malloc((size_t)M * N * gsz);
    down(hacc, dacc, (size_t)M * N * gsz);
    for (int i = 0; i < M * N; i++) {
        got[i] = c->dtype == LJ_DTYPE_BF16 ? lj_bf16_to_f32(((uint16_t *)hacc)[i]) : ((float *)hacc)[i];
        ref[i] += init[i];
    }
    snprintf(what, sizeof what, "%s += (grad dtype) vs CPU emulation", name);
    lj_harness_check_f(h, what, shape, got, ref, (int64_t)M * N, c->tol);
    G->free(dout), G->free(da), G->free(db), G->free(dmm), G->free(dacc);
    free(ob), free(got), free(mm), free(init), free(hacc);
}

typedef struct {
    const void *qa, *qb;
    const float *sa, *sb;
    lj_fp8_format fa;
    int blocks, M, N, K;
} fp8_gemm_case;

static void run_fp8_matmul(void *p, void *out, lj_dtype dtype, lj_grad_mode mode) {
    const fp8_gemm_case *g = p;
    G->fp8_matmul(out, dtype, g->qa, g->fa, g->sa, g->qb, LJ_FP8_E4M3, g->sb, g->M, g->N, g->K, mode, NULL);
}

static void run_fp8_matmul_blockwise(void *p, void *out, lj_dtype dtype, lj_grad_mode mode) {
    const fp8_gemm_case *g = p;
    G->fp8_matmul_blockwise(out, dtype, g->qa, g->fa, g->sa, 0, g->qb, LJ_FP8_E4M3, g->sb, g->blocks, g->M, g->N, g->K,
                            mode, NULL);
}

/* d = {M, N, K, a in e5m2}; tol: against the CPU's FP8 GEMM (bf16 output rounding); tol_grad:
 * against the unquantized product (the formats' rounding, as the CPU case states). */
void lj_case_cuda_fp8_matmul(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(c);
    const int M = c->d[0], N = c->d[1], K = c->d[2], ld = lj_fp8_ld(K);
    const lj_fp8_format fa = c->d[3] ? LJ_FP8_E5M2 : LJ_FP8_E4M3;
    SHAPE("M=%d N=%d K=%d %s x e4m3 grad %s", M, N, K, lj_fp8_format_name(fa), lj_dtype_name(c->dtype));
    float *a = lj_harness_randf_bf16(h, (int64_t)M * K, 0.02f), *b = lj_harness_randf_bf16(h, (int64_t)N * K, 3.0f);
    uint8_t *qa = lj_malloc((size_t)M * ld), *qb = lj_malloc((size_t)N * ld);
    /* scale, amax of a and b in st[0..3]; their scale_inv at st[4] and st[8] (16-byte aligned) */
    float st[12] = {0};
    H->fp8_amax(&st[1], a, (int64_t)M * K);
    H->fp8_amax(&st[3], b, (int64_t)N * K);
    lj_fp8_scaling A = {&st[0], &st[4], &st[1], 1}, B = {&st[2], &st[8], &st[3], 1};
    H->fp8_quantize(qa, NULL, a, M, K, fa, &A);
    H->fp8_quantize(qb, NULL, b, N, K, LJ_FP8_E4M3, &B);
    void *ws = lj_malloc(H->fp8_matmul_workspace_bytes(M, N, K));
    float *ref = lj_malloc((size_t)M * N * 4);
    H->fp8_matmul(ref, LJ_DTYPE_F32, qa, fa, &st[4], qb, LJ_FP8_E4M3, &st[8], M, N, K, LJ_GRAD_OVERWRITE, ws);
    float *dst = up(st, sizeof st);
    void *dqa = up(qa, (size_t)M * ld), *dqb = up(qb, (size_t)N * ld);
    fp8_gemm_case g = {dqa, dqb, dst + 4, dst + 8, fa, 0, M, N, K};
    check_gemm_forms(h, c, shape, "fp8_matmul", run_fp8_matmul, &g, a, b, ref, M, N, K);
    G->free(dst), G->free(dqa), G->free(dqb);
    free(a), free(b), free(qa), free(qb), free(ws), free(ref);
}

/* ---- perf: d = {N tokens, in, out} ---------------------------------------------------- */

typedef struct {
    void *out, *x, *w, *qx, *qw, *qdy_t, *qx_t, *dw;
    float *st;
    int N, in, outf;
} fp8_perf_ctx;

static void perf_fwd(void *p) {
    fp8_perf_ctx *c = p;
    G->fp8_matmul(c->out, LJ_DTYPE_BF16, c->qx, LJ_FP8_E4M3, c->st + 4, c->qw, LJ_FP8_E4M3, c->st + 8, c->N, c->outf,
                  c->in, LJ_GRAD_OVERWRITE, NULL);
}
static void perf_wgrad(void *p) {
    fp8_perf_ctx *c = p;
    G->fp8_matmul(c->dw, G->grad_dtype, c->qdy_t, LJ_FP8_E5M2, c->st + 4, c->qx_t, LJ_FP8_E4M3, c->st + 8, c->outf, c->in,
                  c->N, LJ_GRAD_ACCUMULATE, NULL);
}
static void perf_bf16(void *p) {
    fp8_perf_ctx *c = p;
    G->matmul_forward(c->out, c->x, c->w, c->N, c->in, c->outf);
}
static void perf_cast(void *p) {
    fp8_perf_ctx *c = p;
    lj_fp8_scaling sc = {c->st, c->st + 4, c->st + 2, 1};
    G->fp8_amax(c->st + 2, c->x, (int64_t)c->N * c->in);
    G->fp8_quantize(c->qx, c->qx_t, c->x, c->N, c->in, LJ_FP8_E4M3, &sc);
}

void lj_case_cuda_perf_fp8_matmul(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)mode, (void)h;
    begin(cs);
    fp8_perf_ctx c;
    memset(&c, 0, sizeof c);
    c.N = cs->d[0], c.in = cs->d[1], c.outf = cs->d[2];
    SHAPE("N=%d IC=%d OC=%d", c.N, c.in, c.outf);
    printf("fp8 matmul %s\n", shape);
    float one[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}; /* scale_inv of x and w at [4] and [8]: 16-byte aligned */
    c.st = up(one, sizeof one);
    const size_t nx = (size_t)c.N * c.in, nw = (size_t)c.outf * c.in;
    c.x = up(NULL, nx * 2), c.w = up(NULL, nw * 2), c.out = up(NULL, (size_t)c.N * c.outf * 2);
    c.qx = up(NULL, (size_t)c.N * lj_fp8_ld(c.in)), c.qw = up(NULL, (size_t)c.outf * lj_fp8_ld(c.in));
    c.qx_t = up(NULL, (size_t)c.in * lj_fp8_ld(c.N)), c.qdy_t = up(NULL, (size_t)c.outf * lj_fp8_ld(c.N));
    c.dw = up(NULL, nw * lj_dtype_size(G->grad_dtype));
    G->memset_zero(c.x, nx * 2), G->memset_zero(c.w, nw * 2);
    G->memset_zero(c.qx, (size_t)c.N * lj_fp8_ld(c.in)), G->memset_zero(c.qw, (size_t)c.outf * lj_fp8_ld(c.in));
    G->memset_zero(c.qx_t, (size_t)c.in * lj_fp8_ld(c.N)), G->memset_zero(c.qdy_t, (size_t)c.outf * lj_fp8_ld(c.N));
    const double flop = 2.0 * c.N * c.in * c.outf;
    char group[160];
    snprintf(group, sizeof group, "fp8 matmul %s", shape);
    double ms = lj_harness_time_ms(G, perf_bf16, &c, 3, 10);
    lj_harness_report(group, "bf16 forward (reference)", ms, flop / ms / 1e9, "TFLOP/s", LJ_HARNESS_GEMM_CEILING_TFLOPS);
    ms = lj_harness_time_ms(G, perf_fwd, &c, 3, 10);
    lj_harness_report(group, "fp8 forward e4m3 x e4m3", ms, flop / ms / 1e9, "TFLOP/s", LJ_HARNESS_FP8_GEMM_CEILING_TFLOPS);
    ms = lj_harness_time_ms(G, perf_wgrad, &c, 3, 10);
    lj_harness_report(group, "fp8 wgrad e5m2 x e4m3 (+=)", ms, flop / ms / 1e9, "TFLOP/s",
                      LJ_HARNESS_FP8_GEMM_CEILING_TFLOPS);
    ms = lj_harness_time_ms(G, perf_cast, &c, 3, 10);
    const double bytes = (double)nx * 2 * 2 + (double)nx * 2; /* x read twice, q and q_t written */
    lj_harness_report(group, "amax + cast with transpose of x (unfused)", ms, bytes / ms / 1e6, "GB/s",
                      LJ_HARNESS_HBM_CEILING_GBS);
    G->free(c.st), G->free(c.x), G->free(c.w), G->free(c.out), G->free(c.qx), G->free(c.qw), G->free(c.qx_t);
    G->free(c.qdy_t), G->free(c.dw);
}

/* ---- the blockwise recipe ------------------------------------------------------------- */

/* d = {rows, cols} (not multiples of 128: partial tiles): random bf16 values with an outlier and
 * an all-zero tile; the GPU's 1x128 tiles (rowwise and columnwise) and 128x128 blocks (with the
 * transpose) against the CPU emulation bit for bit: codes with their zero padding, every factor
 * with the layouts' padding of 1s (the device buffers start as 0xAA bytes, so an unwritten byte
 * shows), and the amax; both formats. */
void lj_case_cuda_fp8_blockwise_cast(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(c);
    const int R = c->d[0], C = c->d[1], ld = lj_fp8_ld(C), ldt = lj_fp8_ld(R);
    SHAPE("rows=%d cols=%d", R, C);
    float *x = lj_harness_randf_bf16(h, (int64_t)R * C, 2.0f);
    x[(R / 2) * C + C / 3] = 1000.0f;
    for (int k = 0; k < C && k < 128; k++) x[(size_t)(R - 1) * C + k] = 0.0f; /* the last row's first tile */
    void *dx = up_bf16(x, (int64_t)R * C);
    const size_t nq = (size_t)R * ld, nqt = (size_t)C * ldt;
    const size_t ns = (size_t)lj_fp8_tile_scales_numel(R, C) * 4, nst = (size_t)lj_fp8_tile_scales_numel(C, R) * 4;
    const size_t ng = (size_t)lj_fp8_block_scales_numel(R, C) * 4, ngt = (size_t)lj_fp8_block_scales_numel(C, R) * 4;
    uint8_t *q = lj_malloc(nq), *qt = lj_malloc(nqt), *gq = lj_malloc(nq), *gqt = lj_malloc(nqt);
    float *s = lj_malloc(ns), *st = lj_malloc(nst), *gs = lj_malloc(ns), *gst = lj_malloc(nst);
    float *g = lj_malloc(ng), *gt = lj_malloc(ngt), *gg = lj_malloc(ng), *ggt = lj_malloc(ngt);
    void *dq = up(NULL, nq), *dqt = up(NULL, nqt), *ds = up(NULL, ns), *dst = up(NULL, nst);
    void *dg = up(NULL, ng), *dgt = up(NULL, ngt);
    float *damax = up(NULL, 16);
    uint8_t *junk = lj_malloc(nq > nqt ? nq : nqt);
    for (int f = 0; f < 2; f++) {
        const lj_fp8_format fmt = (lj_fp8_format)f;
        char op[64];
        /* 1x128 tiles, rowwise and columnwise in one call */
        memset(junk, 0xAA, nq > nqt ? nq : nqt);
        G->upload(dq, junk, nq), G->upload(dqt, junk, nqt), G->upload(ds, junk, ns), G->upload(dst, junk, nst);
        float amax = -1, gamax = -2;
        H->fp8_quantize_tiles(q, s, qt, st, x, R, C, fmt, &amax);
        G->fp8_quantize_tiles(dq, ds, dqt, dst, dx, R, C, fmt, damax);
        down(gq, dq, nq), down(gqt, dqt, nqt), down(gs, ds, ns), down(gst, dst, nst), down(&gamax, damax, 4);
        snprintf(op, sizeof op, "fp8_quantize_tiles %s", lj_fp8_format_name(fmt));
        lj_harness_check_bits(h, op, shape, gq, q, nq);
        lj_harness_check_bits(h, op, shape, gs, s, ns);
        lj_harness_check_bits(h, op, shape, gqt, qt, nqt);
        lj_harness_check_bits(h, op, shape, gst, st, nst);
        lj_harness_check_true(h, op, shape, gamax == amax && amax == 1000.0f, "amax %g (cpu %g, want 1000)",
                              (double)gamax, (double)amax);
        /* the columnwise pair alone (the backward's second cast of x) */
        G->upload(dqt, junk, nqt), G->upload(dst, junk, nst);
        G->fp8_quantize_tiles(NULL, NULL, dqt, dst, dx, R, C, fmt, NULL);
        down(gqt, dqt, nqt), down(gst, dst, nst);
        lj_harness_check_bits(h, op, shape, gqt, qt, nqt);
        lj_harness_check_bits(h, op, shape, gst, st, nst);
        /* 128x128 blocks with the transpose */
        G->upload(dq, junk, nq), G->upload(dqt, junk, nqt), G->upload(dg, junk, ng), G->upload(dgt, junk, ngt);
        H->fp8_quantize_blocks(q, g, qt, gt, x, R, C, fmt, &amax);
        G->fp8_quantize_blocks(dq, dg, dqt, dgt, dx, R, C, fmt, damax);
        down(gq, dq, nq), down(gqt, dqt, nqt), down(gg, dg, ng), down(ggt, dgt, ngt), down(&gamax, damax, 4);
        snprintf(op, sizeof op, "fp8_quantize_blocks %s", lj_fp8_format_name(fmt));
        lj_harness_check_bits(h, op, shape, gq, q, nq);
        lj_harness_check_bits(h, op, shape, gg, g, ng);
        lj_harness_check_bits(h, op, shape, gqt, qt, nqt);
        lj_harness_check_bits(h, op, shape, ggt, gt, ngt);
        lj_harness_check_true(h, op, shape, gamax == amax, "amax %g (cpu %g)", (double)gamax, (double)amax);
    }
    G->free(dx), G->free(dq), G->free(dqt), G->free(ds), G->free(dst), G->free(dg), G->free(dgt), G->free(damax);
    free(x), free(q), free(qt), free(gq), free(gqt), free(s), free(st), free(gs), free(gst), free(g), free(gt);
    free(gg), free(ggt), free(junk);
}

/* d = {M, N, K, a in e5m2, b in 128x128 blocks}; tol: against the CPU's blockwise GEMM over the
 * same codes and factors (bf16 output rounding); tol_grad: against the unquantized bf16 GEMM (the
 * formats' rounding). a gets 1x128 tiles; b 1x128 tiles (the weight-gradient form) or 128x128
 * blocks (forward and data gradient). Overwrite to bf16, accumulate in the grad dtype. */
void lj_case_cuda_fp8_blockwise_matmul(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    (void)mode;
    begin(c);
    const int M = c->d[0], N = c->d[1], K = c->d[2], ld = lj_fp8_ld(K), blocks = c->d[4];
    const lj_fp8_format fa = c->d[3] ? LJ_FP8_E5M2 : LJ_FP8_E4M3;
    SHAPE("M=%d N=%d K=%d %s 1x128 x e4m3 %s grad %s", M, N, K, lj_fp8_format_name(fa), blocks ? "128x128" : "1x128",
          lj_dtype_name(c->dtype));
    float *a = lj_harness_randf_bf16(h, (int64_t)M * K, 0.02f), *b = lj_harness_randf_bf16(h, (int64_t)N * K, 3.0f);
    a[(M / 3) * K + K / 2] = 5.0f; /* an outlier: its tile only */
    uint8_t *qa = lj_malloc((size_t)M * ld), *qb = lj_malloc((size_t)N * ld);
    const size_t nsa = (size_t)lj_fp8_tile_scales_numel(M, K) * 4;
    const size_t nsb = (size_t)(blocks ? lj_fp8_block_scales_numel(N, K) : lj_fp8_tile_scales_numel(N, K)) * 4;
    float *sa = lj_malloc(nsa), *sb = lj_malloc(nsb);
    H->fp8_quantize_tiles(qa, sa, NULL, NULL, a, M, K, fa, NULL);
    if (blocks) H->fp8_quantize_blocks(qb, sb, NULL, NULL, b, N, K, LJ_FP8_E4M3, NULL);
    else H->fp8_quantize_tiles(qb, sb, NULL, NULL, b, N, K, LJ_FP8_E4M3, NULL);
    void *ws = lj_malloc(H->fp8_matmul_workspace_bytes(M, N, K));
    float *ref = lj_malloc((size_t)M * N * 4);
    H->fp8_matmul_blockwise(ref, LJ_DTYPE_F32, qa, fa, sa, 0, qb, LJ_FP8_E4M3, sb, blocks, M, N, K, LJ_GRAD_OVERWRITE,
                            ws);
    void *dqa = up(qa, (size_t)M * ld), *dqb = up(qb, (size_t)N * ld);
    float *dsa = up(sa, nsa), *dsb = up(sb, nsb);
    fp8_gemm_case g = {dqa, dqb, dsa, dsb, fa, blocks, M, N, K};
    check_gemm_forms(h, c, shape, "fp8_matmul_blockwise", run_fp8_matmul_blockwise, &g, a, b, ref, M, N, K);
    G->free(dqa), G->free(dqb), G->free(dsa), G->free(dsb);
    free(a), free(b), free(qa), free(qb), free(sa), free(sb), free(ws), free(ref);
}

/* ---- perf of the blockwise recipe: d = {N tokens, in, out} ---------------------------- */

typedef struct {
    void *x, *w, *out, *dw, *qx, *qx_t, *qw, *qdy_t;
    float *sx, *sx_t, *sw, *sdy_t, *amax;
    int N, in, outf;
} bw_perf_ctx;

static void bw_perf_fwd(void *p) {
    bw_perf_ctx *c = p;
    G->fp8_matmul_blockwise(c->out, LJ_DTYPE_BF16, c->qx, LJ_FP8_E4M3, c->sx, 0, c->qw, LJ_FP8_E4M3, c->sw, 1, c->N,
                            c->outf, c->in, LJ_GRAD_OVERWRITE, NULL);
}
static void bw_perf_wgrad(void *p) {
    bw_perf_ctx *c = p;
    G->fp8_matmul_blockwise(c->dw, G->grad_dtype, c->qdy_t, LJ_FP8_E5M2, c->sdy_t, 0, c->qx_t, LJ_FP8_E4M3, c->sx_t, 0,
                            c->outf, c->in, c->N, LJ_GRAD_ACCUMULATE, NULL);
}
static void bw_perf_cast(void *p) {
    bw_perf_ctx *c = p;
    G->fp8_quantize_tiles(c->qx, c->sx, c->qx_t, c->sx_t, c->x, c->N, c->in, LJ_FP8_E4M3, c->amax);
}
static void bw_perf_cast_w(void *p) {
    bw_perf_ctx *c = p;
    G->fp8_quantize_blocks(c->qw, c->sw, NULL, NULL, c->w, c->outf, c->in, LJ_FP8_E4M3, c->amax);
}

/* The blockwise GEMMs (1x128 x 128x128 forward, 1x128 x 1x128 weight gradient) and its casts
 * (x rowwise and columnwise; W in blocks) at the Llama shapes, beside the per-tensor rows of
 * lj_case_cuda_perf_fp8_matmul. */
void lj_case_cuda_perf_fp8_blockwise(lj_harness *h, const lj_op_case *cs, lj_harness_mode mode) {
    (void)mode, (void)h;
    begin(cs);
    bw_perf_ctx c;
    memset(&c, 0, sizeof c);
    c.N = cs->d[0], c.in = cs->d[1], c.outf = cs->d[2];
    SHAPE("N=%d IC=%d OC=%d", c.N, c.in, c.outf);
    printf("fp8 blockwise %s\n", shape);
    const size_t nx = (size_t)c.N * c.in, nw = (size_t)c.outf * c.in;
    c.x = up(NULL, nx * 2), c.w = up(NULL, nw * 2), c.out = up(NULL, (size_t)c.N * c.outf * 2);
    c.dw = up(NULL, nw * lj_dtype_size(G->grad_dtype));
    c.qx = up(NULL, (size_t)c.N * lj_fp8_ld(c.in)), c.qw = up(NULL, (size_t)c.outf * lj_fp8_ld(c.in));
    c.qx_t = up(NULL, (size_t)c.in * lj_fp8_ld(c.N)), c.qdy_t = up(NULL, (size_t)c.outf * lj_fp8_ld(c.N));
    c.sx = up(NULL, (size_t)lj_fp8_tile_scales_numel(c.N, c.in) * 4);
    c.sx_t = up(NULL, (size_t)lj_fp8_tile_scales_numel(c.in, c.N) * 4);
    c.sdy_t = up(NULL, (size_t)lj_fp8_tile_scales_numel(c.outf, c.N) * 4);
    c.sw = up(NULL, (size_t)lj_fp8_block_scales_numel(c.outf, c.in) * 4);
    c.amax = up(NULL, 16);
    G->memset_zero(c.x, nx * 2), G->memset_zero(c.w, nw * 2);
    /* zero data: every factor 1, every code 0 (the timings do not depend on the values) */
    bw_perf_cast(&c);
    bw_perf_cast_w(&c);
    G->memset_zero(c.out, (size_t)c.N * c.outf * 2); /* as dy [N, out] */
    G->fp8_quantize_tiles(NULL, NULL, c.qdy_t, c.sdy_t, c.out, c.N, c.outf, LJ_FP8_E5M2, NULL);
    const double flop = 2.0 * c.N * c.in * c.outf;
    char group[160];
    snprintf(group, sizeof group, "fp8 blockwise %s", shape);
    double ms = lj_harness_time_ms(G, bw_perf_fwd, &c, 3, 10);
    lj_harness_report(group, "forward e4m3 1x128 x 128x128", ms, flop / ms / 1e9, "TFLOP/s",
                      LJ_HARNESS_FP8_GEMM_CEILING_TFLOPS);
    ms = lj_harness_time_ms(G, bw_perf_wgrad, &c, 3, 10);
    lj_harness_report(group, "wgrad e5m2 x e4m3 1x128 x 1x128 (+=)", ms, flop / ms / 1e9, "TFLOP/s",
                      LJ_HARNESS_FP8_GEMM_CEILING_TFLOPS);
    ms = lj_harness_time_ms(G, bw_perf_cast, &c, 3, 10);
    double bytes = (double)nx * 2 * 2 + (double)nx * 2; /* x read twice, q and q_t written */
    lj_harness_report(group, "x: 1x128 tiles rowwise and columnwise", ms, bytes / ms / 1e6, "GB/s",
                      LJ_HARNESS_HBM_CEILING_GBS);
    ms = lj_harness_time_ms(G, bw_perf_cast_w, &c, 3, 10);
    bytes = (double)nw * 2 * 2 + (double)nw; /* W read twice (amax, cast), q written */
    lj_harness_report(group, "W: 128x128 blocks", ms, bytes / ms / 1e6, "GB/s", LJ_HARNESS_HBM_CEILING_GBS);
    G->free(c.x), G->free(c.w), G->free(c.out), G->free(c.dw), G->free(c.qx), G->free(c.qw), G->free(c.qx_t);
    G->free(c.qdy_t), G->free(c.sx), G->free(c.sx_t), G->free(c.sdy_t), G->free(c.sw), G->free(c.amax);
}

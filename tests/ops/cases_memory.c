/* cases_memory.c: the memory entries and the casts of the op table (ops.h "memory"), written once
 * for every backend (case.h): allocations aligned and counted by lj_ops_allocated_bytes, upload,
 * copy, download and memset_zero moving the bytes they should, the casts between f32 and the
 * param and act dtypes rounding to nearest even (bf16) or copying (f32), memory_info's figures;
 * on CUDA the casts against the CPU's values rounded to the GPU's dtypes. Rows: "memory" and
 * "cast" in op_cases.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/case.h"

/* no shape */
static void memory_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const char *op = "memory";
    const int cpu = strcmp(ops->name, "cpu") == 0;
    lj_case_true(x, op, ops != NULL, "the table is not NULL");
    lj_case_true(x, op, strcmp(ops->name, x->c->backend) == 0, "name \"%s\" == \"%s\"", ops->name, x->c->backend);
    lj_case_true(x, op, ops->act_dtype == (cpu ? LJ_DTYPE_F32 : LJ_DTYPE_BF16),
                 "act_dtype %s (F32 on the CPU, BF16 on CUDA)", lj_dtype_name(ops->act_dtype));
    const size_t before = lj_ops_allocated_bytes();
    void *a = NULL, *b = NULL;
    lj_case_true(x, op, ops->alloc(&a, 1000) == LJ_OK, "alloc 1000 bytes");
    lj_case_true(x, op, ops->alloc(&b, 13) == LJ_OK, "alloc 13 bytes");
    lj_case_true(x, op, ((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0, "allocations 64-byte aligned");
    lj_case_true(x, op, lj_ops_allocated_bytes() == before + 1013, "allocated bytes +1013");
    const float src[4] = {1, 2, 3, 4};
    float dst[4] = {0};
    ops->upload(a, src, sizeof src);
    ops->copy((char *)a + 16, a, 16);
    ops->download(dst, (char *)a + 16, 16);
    lj_case_true(x, "memory upload+copy+download", memcmp(dst, src, 16) == 0, "16 bytes there and back");
    ops->memset_zero(a, 16);
    ops->download(dst, a, 16);
    lj_case_true(x, op, dst[0] == 0 && dst[3] == 0, "memset_zero");
    const uint16_t bf[3] = {lj_f32_to_bf16(1.5f), lj_f32_to_bf16(-2.0f), lj_f32_to_bf16(0.25f)};
    float back[3];
    ops->upload((char *)a + 64, bf, sizeof bf);
    ops->cast_to_f32((float *)((char *)a + 128), (char *)a + 64, LJ_DTYPE_BF16, 3);
    ops->download(back, (char *)a + 128, sizeof back);
    lj_case_true(x, op, back[0] == 1.5f && back[1] == -2.0f && back[2] == 0.25f, "cast_to_f32 from bf16");
    ops->upload(a, src, sizeof src);
    ops->cast_f32_to_param((char *)a + 256, a, 4);
    const float *p = lj_case_download(x, (char *)a + 256, 4, LJ_CASE_PARAM);
    lj_case_true(x, "memory cast_f32_to_param", memcmp(p, src, 16) == 0, "1, 2, 3, 4 in the param dtype");
    ops->free(a);
    lj_case_true(x, op, lj_ops_allocated_bytes() == before + 13, "free gives back 1000 bytes");
    ops->free(b);
    lj_case_true(x, op, lj_ops_allocated_bytes() == before, "free gives back 13 bytes");
    size_t free_b = 0, total_b = 0;
    lj_case_true(x, op, ops->memory_info(&free_b, &total_b) == LJ_OK, "memory_info");
    lj_case_true(x, op, total_b > 0 && free_b <= total_b, "memory_info: free %zu <= total %zu", free_b, total_b);
}

void lj_case_memory(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) { lj_case_each(h, c, mode, memory_body); }

/* d = {n}: n normal fp32 values of deviation 3 (not bf16-exact) cast to the param dtype and back,
 * and through the act dtype: the param (act) dtype's value of each, bit for bit within 1e-6. */
static void cast_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int64_t n = x->c->d[0];
    lj_case_shape(x, "n=%lld", (long long)n);
    float *hx = lj_case_zeros(x, n);
    for (int64_t i = 0; i < n; i++) hx[i] = (float)lj_rng_normal(&x->h->rng) * 3.0f;
    void *dx = lj_case_upload(x, hx, n, LJ_CASE_F32);
    void *dp = lj_case_alloc(x, n, LJ_CASE_PARAM), *dy = lj_case_alloc(x, n, LJ_CASE_F32);
    ops->cast_f32_to_param(dp, dx, n);
    ops->cast_to_f32(dy, dp, ops->param_dtype, n);
    double *want_p = NULL, *want_a = NULL;
    if (lj_case_reference(x)) { /* the CPU's param and act dtypes are f32: copies */
        want_p = lj_case_to_double(x, hx, n), want_a = want_p;
    }
    lj_case_output(x, "cast_f32_to_param", dp, n, LJ_CASE_PARAM, want_p, LJ_CASE_TOL_EXACT);
    /* f32 values that went through a param tensor: on CUDA the CPU's rounded to bf16 */
    lj_case_values(x, "cast_f32_to_param+cast_to_f32", lj_case_download(x, dy, n, LJ_CASE_F32), n, LJ_CASE_PARAM,
                   want_p, LJ_CASE_TOL_EXACT);
    void *da = lj_case_upload(x, hx, n, LJ_CASE_ACT), *dy2 = lj_case_alloc(x, n, LJ_CASE_F32);
    ops->cast_to_f32(dy2, da, ops->act_dtype, n);
    lj_case_values(x, "cast_to_f32 from the act dtype", lj_case_download(x, dy2, n, LJ_CASE_F32), n, LJ_CASE_ACT,
                   want_a, LJ_CASE_TOL_EXACT);
}

void lj_case_cast(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) { lj_case_each(h, c, mode, cast_body); }

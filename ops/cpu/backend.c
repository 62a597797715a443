/* backend.c: the CPU backend's op tables (lj_ops_cpu, lj_ops_cpu_open) and its memory entries:
 * aligned host allocation with accounting, copies, casts and the host memory figures. */
#include "ops/cpu/cpu.h"
#include "ops/cpu/vision.h"

#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

/* Every allocation carries a 64-byte prefix holding its requested size, so that free can
 * report exactly the bytes that alloc counted (lj_ops_track counts requested bytes only, so
 * that "bytes allocated == plan" holds exactly). */
#define LJ_CPU_ALIGN 64

int lj_cpu_num_threads(void) { return lj_num_threads(); }

static lj_status cpu_alloc(void **ptr, size_t bytes) {
    *ptr = NULL;
    size_t body = (bytes + LJ_CPU_ALIGN - 1) / LJ_CPU_ALIGN * LJ_CPU_ALIGN;
    if (body < bytes || body > SIZE_MAX - LJ_CPU_ALIGN)
        return lj_fail(LJ_ERR_OOM, "cpu alloc: %zu bytes is too large", bytes);
    unsigned char *base = aligned_alloc(LJ_CPU_ALIGN, LJ_CPU_ALIGN + body);
    if (!base) {
        char buf[32];
        return lj_fail(LJ_ERR_OOM, "cpu alloc: out of host memory allocating %s (%zu bytes)",
                       lj_format_bytes(bytes, buf, sizeof buf), bytes);
    }
    memcpy(base, &bytes, sizeof bytes);
    if (bytes > 0) lj_ops_track(base + LJ_CPU_ALIGN, (int64_t)bytes);
    *ptr = base + LJ_CPU_ALIGN;
    return LJ_OK;
}

static void cpu_free(void *ptr) {
    if (!ptr) return;
    unsigned char *base = (unsigned char *)ptr - LJ_CPU_ALIGN;
    size_t bytes;
    memcpy(&bytes, base, sizeof bytes);
    if (bytes > 0) lj_ops_track(ptr, -(int64_t)bytes);
    free(base);
}

static void cpu_memset_zero(void *dst, size_t bytes) { memset(dst, 0, bytes); }

static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (dst != src) memmove(dst, src, bytes);
}

static void cpu_synchronize(void) {}

/* Reads MemAvailable and MemTotal (kB) from /proc/meminfo. */
static lj_status cpu_memory_info(size_t *free_bytes, size_t *total_bytes) {
    const char *path = "/proc/meminfo";
    FILE *f = fopen(path, "r");
    if (!f) return lj_fail(LJ_ERR_IO, "%s: cannot open to read the host memory size", path);
    char line[256];
    long long avail_kb = -1, total_kb = -1, free_kb = -1;
    while (fgets(line, sizeof line, f)) {
        long long v;
        if (sscanf(line, "MemAvailable: %lld kB", &v) == 1) avail_kb = v;
        else if (sscanf(line, "MemTotal: %lld kB", &v) == 1) total_kb = v;
        else if (sscanf(line, "MemFree: %lld kB", &v) == 1) free_kb = v;
    }
    fclose(f);
    if (avail_kb < 0) avail_kb = free_kb; /* kernels before 3.14 have no MemAvailable */
    if (total_kb < 0 || avail_kb < 0)
        return lj_fail(LJ_ERR_FORMAT, "%s: no MemTotal / MemAvailable line", path);
    *free_bytes = (size_t)avail_kb * 1024;
    *total_bytes = (size_t)total_kb * 1024;
    return LJ_OK;
}

/* The first "model name" of /proc/cpuinfo (x86-64), else uname's machine (aarch64 kernels list
 * no model name); read once. */
static const char *cpu_device_name(void) {
    static char name[128];
    if (name[0]) return name;
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && !name[0] && fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        const char *v = colon + 1 + strspn(colon + 1, " \t");
        snprintf(name, sizeof name, "%.*s", (int)strcspn(v, "\r\n"), v);
    }
    if (f) fclose(f);
    struct utsname u;
    if (!name[0]) snprintf(name, sizeof name, "%s", uname(&u) == 0 ? u.machine : "cpu");
    return name;
}

static void cpu_cast_f32_to_param(void *dst, const float *src, int64_t n) {
    if (dst != (const void *)src) memmove(dst, src, (size_t)n * sizeof(float));
}

static void cpu_cast_to_f32(float *dst, const void *src, lj_dtype dtype, int64_t n) {
    if (dtype == LJ_DTYPE_F32) {
        if ((const void *)dst != src) memmove(dst, src, (size_t)n * sizeof(float));
        return;
    }
    LJ_ASSERT(dtype == LJ_DTYPE_BF16, "cpu cast_to_f32: unsupported dtype %s", lj_dtype_name(dtype));
    const uint16_t *s = src;
    /* in place (dst == src) works back to front, since each float is wider than a bf16 */
    for (int64_t i = n - 1; i >= 0; i--) dst[i] = lj_bf16_to_f32(s[i]);
}

/* One table, written once for both values of deterministic mode (which the CPU's ops are
 * either way: the table records what the run asked for). */
#define LJ_CPU_TABLE(DET)                                                                                 \
    {                                                                                                 \
    .name = "cpu",                                                                                \
    .act_dtype = LJ_DTYPE_F32,                                                                    \
    .param_dtype = LJ_DTYPE_F32,                                                                  \
    .grad_dtype = LJ_DTYPE_F32,                                                                   \
    .config = {.grad_dtype = LJ_DTYPE_F32, .deterministic = DET},                                 \
                                                                                                  \
    .alloc = cpu_alloc,                                                                           \
    .free = cpu_free,                                                                             \
    .memset_zero = cpu_memset_zero,                                                               \
    .upload = cpu_copy,                                                                           \
    .download = cpu_copy,                                                                         \
    .copy = cpu_copy,                                                                             \
    .synchronize = cpu_synchronize,                                                               \
    .memory_info = cpu_memory_info,                                                               \
    .device_name = cpu_device_name,                                                               \
    .cast_f32_to_param = cpu_cast_f32_to_param,                                                   \
    .cast_to_f32 = cpu_cast_to_f32,                                                               \
                                                                                                  \
    .embedding_forward = lj_cpu_embedding_forward,                                                \
    .embedding_backward = lj_cpu_embedding_backward,                                              \
    .embedding_backward_workspace_bytes = lj_cpu_embedding_backward_workspace_bytes,              \
                                                                                                  \
    .rmsnorm_forward = lj_cpu_rmsnorm_forward,                                                    \
    .rmsnorm_backward = lj_cpu_rmsnorm_backward,                                                  \
    .rmsnorm_backward_workspace_bytes = lj_cpu_rmsnorm_backward_workspace_bytes,                  \
    .residual_rmsnorm_forward = lj_cpu_residual_rmsnorm_forward,                                  \
    .add = lj_cpu_add,                                                                            \
                                                                                                  \
    .matmul_forward = lj_cpu_matmul_forward,                                                      \
    .matmul_backward = lj_cpu_matmul_backward,                                                    \
                                                                                                  \
    .fp8_amax = lj_cpu_fp8_amax,                                                                  \
    .fp8_quantize = lj_cpu_fp8_quantize,                                                          \
    .fp8_amax_f32 = lj_cpu_fp8_amax_f32,                                                          \
    .fp8_quantize_f32 = lj_cpu_fp8_quantize_f32,                                                  \
    .fp8_transpose = lj_cpu_fp8_transpose,                                                        \
    .fp8_swiglu_quantize = lj_cpu_fp8_swiglu_quantize,                                            \
    .fp8_swiglu_amax = lj_cpu_fp8_swiglu_amax,                                                    \
    .fp8_rmsnorm_quantize = lj_cpu_fp8_rmsnorm_quantize,                                          \
    .fp8_scale_update = lj_cpu_fp8_scale_update,                                                  \
    .fp8_matmul = lj_cpu_fp8_matmul,                                                              \
    .fp8_matmul_workspace_bytes = lj_cpu_fp8_matmul_workspace_bytes,                              \
    .fp8_quantize_tiles = lj_cpu_fp8_quantize_tiles,                                              \
    .fp8_quantize_blocks = lj_cpu_fp8_quantize_blocks,                                            \
    .fp8_matmul_blockwise = lj_cpu_fp8_matmul_blockwise,                                          \
                                                                                                  \
    .rope_forward = lj_cpu_rope_forward,                                                          \
    .rope_backward = lj_cpu_rope_backward,                                                        \
    .rope_forward_pos = lj_cpu_rope_forward_pos,                                                  \
    .rope_backward_pos = lj_cpu_rope_backward_pos,                                                \
                                                                                                  \
    .qk_norm_forward = lj_cpu_qk_norm_forward,                                                    \
    .qk_norm_backward = lj_cpu_qk_norm_backward,                                                  \
    .qk_norm_backward_workspace_bytes = lj_cpu_qk_norm_backward_workspace_bytes,                  \
    .qk_norm_rope_forward = lj_cpu_qk_norm_rope_forward,                                          \
    .qk_norm_rope_backward = lj_cpu_qk_norm_rope_backward,                                        \
    .bias_add = lj_cpu_bias_add,                                                                  \
    .bias_backward = lj_cpu_bias_backward,                                                        \
    .bias_backward_workspace_bytes = lj_cpu_bias_backward_workspace_bytes,                        \
                                                                                                  \
    .attention_forward = lj_cpu_attention_forward,                                                \
    .attention_backward = lj_cpu_attention_backward,                                              \
    .attention_forward_docs = lj_cpu_attention_forward_docs,                                      \
    .attention_backward_docs = lj_cpu_attention_backward_docs,                                    \
    .attention_forward_docs_workspace_bytes = lj_cpu_attention_workspace_bytes,                   \
    .attention_workspace_bytes = lj_cpu_attention_workspace_bytes,                                \
    .attention_decode = lj_cpu_attention_decode,                                                  \
    .paged_kv_write = lj_cpu_paged_kv_write,                                                      \
    .paged_attention = lj_cpu_paged_attention,                                                    \
    .paged_kv_write_fp8 = lj_cpu_paged_kv_write_fp8,                                              \
    .paged_kv_round_fp8 = lj_cpu_paged_kv_round_fp8,                                              \
    .paged_attention_fp8 = lj_cpu_paged_attention_fp8,                                            \
    .gather_rows = lj_cpu_gather_rows,                                                            \
    .argmax_rows = lj_cpu_argmax_rows,                                                            \
                                                                                                  \
    .layernorm_forward = lj_cpu_layernorm_forward,                                                \
    .layernorm_backward = lj_cpu_layernorm_backward,                                              \
    .layernorm_backward_workspace_bytes = lj_cpu_layernorm_backward_workspace_bytes,              \
    .gelu_forward = lj_cpu_gelu_forward,                                                          \
    .gelu_backward = lj_cpu_gelu_backward,                                                        \
    .embedding_bag_forward = lj_cpu_embedding_bag_forward,                                        \
    .embedding_bag_backward = lj_cpu_embedding_bag_backward,                                      \
    .attention_varlen_forward = lj_cpu_attention_varlen_forward,                                  \
    .attention_varlen_backward = lj_cpu_attention_varlen_backward,                                \
    .attention_varlen_workspace_bytes = lj_cpu_attention_varlen_workspace_bytes,                  \
    .rows_gather = lj_cpu_rows_gather,                                                            \
    .rows_scatter = lj_cpu_rows_scatter,                                                          \
                                                                                                  \
    .swiglu_forward = lj_cpu_swiglu_forward,                                                      \
    .swiglu_backward = lj_cpu_swiglu_backward,                                                    \
    .swiglu_forward_unfused = lj_cpu_swiglu_forward_unfused,                                      \
    .swiglu_backward_unfused = lj_cpu_swiglu_backward_unfused,                                    \
                                                                                                  \
    .cross_entropy_fused = lj_cpu_cross_entropy_fused,                                            \
    .cross_entropy_fused_workspace_bytes = lj_cpu_cross_entropy_fused_workspace_bytes,            \
    .cross_entropy_forward_backward = lj_cpu_cross_entropy_forward_backward,                      \
                                                                                                  \
    .global_norm_sq = lj_cpu_global_norm_sq,                                                      \
    .global_norm_workspace_bytes = lj_cpu_global_norm_workspace_bytes,                            \
    .adamw_update = lj_cpu_adamw_update,                                                          \
    }

/* [0]: the default; [1]: deterministic mode. */
static const lj_ops g_cpu_tables[2] = {LJ_CPU_TABLE(0), LJ_CPU_TABLE(1)};

const lj_ops *lj_ops_cpu_open(const lj_ops_config *cfg) {
    lj_cpu_blas_init();
    return &g_cpu_tables[cfg && cfg->deterministic ? 1 : 0];
}

const lj_ops *lj_ops_cpu(void) { return lj_ops_cpu_open(NULL); }

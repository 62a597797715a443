/* backend.cu: the CUDA backend's op tables (lj_ops_cuda_open: one constant table per
 * configuration), its start-up (device check, stream, cuBLASLt workspace), device memory
 * (tracked cudaMalloc/cudaFree, async copies) and the error reporting every CUDA file uses. */
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/paged.h"
#include "ops/cuda/vision.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LJ_CUDA_LT_WORKSPACE_BYTES ((size_t)32 << 20)

/* One live allocation, so that free can report the exact bytes to lj_ops_track. */
typedef struct {
    void *ptr;
    size_t bytes;
} lj_cuda_allocation;

/* The backend's state: created once by the first lj_ops_cuda_open, lives until the process
 * ends. What it holds is the device's (stream, allocations), never a mode of an op: those are
 * the table's configuration. */
static struct {
    int ready;
    cudaStream_t stream;
    int num_sms;
    int debug_sync; /* the start-up configuration's debug_sync */
    char device_name[256]; /* cudaDeviceProp.name of the device it started on */
    lj_cuda_allocation *allocs;
    int num_allocs, cap_allocs;
} g_cuda;

void lj_cuda_die(const char *what, const char *detail, const char *file, int line) {
    fflush(stdout);
    fprintf(stderr, "ljperf: CUDA error in %s: %s (%s:%d)\n", what, detail, file, line);
    fflush(stderr);
    exit(1);
}

void lj_cuda_check_launch(const char *kernel, const char *file, int line) {
    char what[160];
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        snprintf(what, sizeof what, "%s launch", kernel);
        lj_cuda_die(what, cudaGetErrorString(e), file, line);
    }
    if (g_cuda.debug_sync) {
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(g_cuda.stream, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone) {
            e = cudaStreamSynchronize(g_cuda.stream);
            if (e != cudaSuccess) {
                snprintf(what, sizeof what, "%s (run, LJ_CUDA_DEBUG)", kernel);
                lj_cuda_die(what, cudaGetErrorString(e), file, line);
            }
        }
    }
}

cudaStream_t lj_cuda_stream(void) { return g_cuda.stream; }
int lj_cuda_num_sms(void) { return g_cuda.num_sms > 0 ? g_cuda.num_sms : 132; }
size_t lj_cuda_fixed_workspace_bytes(void) { return LJ_CUDA_LT_WORKSPACE_BYTES; }

extern "C" int lj_ops_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* ---- memory ---------------------------------------------------------------------- */

/* Pinned host memory (cudaMallocHost): the async checkpoint's host copy. */
static lj_status cuda_host_alloc(void **ptr, size_t bytes) {
    *ptr = NULL;
    cudaError_t e = cudaMallocHost(ptr, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *ptr = NULL;
        char buf[32];
        return lj_fail(LJ_ERR_OOM, "cudaMallocHost of %s (%zu bytes) of pinned host memory failed: %s",
                       lj_format_bytes(bytes, buf, sizeof buf), bytes, cudaGetErrorString(e));
    }
    return LJ_OK;
}

static void cuda_host_free(void *ptr) {
    if (ptr) LJ_CUDA_CHECK(cudaFreeHost(ptr), "cudaFreeHost");
}

lj_status lj_cuda_alloc(void **ptr, size_t bytes) {
    *ptr = NULL;
    if (bytes == 0) bytes = 1;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free error so later calls work */
        char buf[32];
        return lj_fail(LJ_ERR_OOM, "cudaMalloc of %s (%zu bytes) failed: %s",
                       lj_format_bytes(bytes, buf, sizeof buf), bytes, cudaGetErrorString(e));
    }
    if (g_cuda.num_allocs == g_cuda.cap_allocs) {
        g_cuda.cap_allocs = g_cuda.cap_allocs ? 2 * g_cuda.cap_allocs : 64;
        g_cuda.allocs = (lj_cuda_allocation *)lj_realloc(g_cuda.allocs,
                                                         (size_t)g_cuda.cap_allocs * sizeof *g_cuda.allocs);
    }
    g_cuda.allocs[g_cuda.num_allocs].ptr = p;
    g_cuda.allocs[g_cuda.num_allocs].bytes = bytes;
    g_cuda.num_allocs++;
    lj_ops_track(p, (int64_t)bytes);
    *ptr = p;
    return LJ_OK;
}

void lj_cuda_free(void *ptr) {
    if (!ptr) return;
    int i = 0;
    while (i < g_cuda.num_allocs && g_cuda.allocs[i].ptr != ptr) i++;
    LJ_ASSERT(i < g_cuda.num_allocs, "cuda free of a pointer the backend did not allocate");
    lj_ops_track(ptr, -(int64_t)g_cuda.allocs[i].bytes);
    g_cuda.allocs[i] = g_cuda.allocs[--g_cuda.num_allocs];
    LJ_CUDA_CHECK(cudaFree(ptr), "cudaFree");
}

static void cuda_memset_zero(void *dst, size_t bytes) {
    if (bytes == 0) return;
    LJ_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, g_cuda.stream), "cudaMemsetAsync in memset_zero");
}

/* Pageable host memory: cudaMemcpyAsync returns once the source is staged, so the caller may
 * reuse `src_host` at once; the copy itself stays in stream order. */
static void cuda_upload(void *dst, const void *src_host, size_t bytes) {
    if (bytes == 0) return;
    LJ_CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, g_cuda.stream),
                  "cudaMemcpyAsync in upload");
}

/* Small downloads (a loss, a gradient norm, a batch's sampled tokens: up to SMALL_DOWNLOAD_BYTES)
 * are written by a kernel into mapped pinned memory over the bus instead of by a copy engine:
 * copies of one direction queue on an engine in order, so behind --async-save's copy beside the
 * stream (tens of GB) a loss read would wait for all of it. The lock keeps the one staging
 * buffer to one caller at a time. */
#define SMALL_DOWNLOAD_BYTES ((size_t)64 << 10)
static struct {
    unsigned char *host, *dev; /* the same pinned buffer, as the host and the device address it */
    pthread_mutex_t mu;
} g_small = {NULL, NULL, PTHREAD_MUTEX_INITIALIZER};

static __global__ void small_download_kernel(unsigned char *dst, const unsigned char *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

static lj_status small_download_start(void) {
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, SMALL_DOWNLOAD_BYTES, cudaHostAllocMapped);
    void *d = NULL;
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(&d, p, 0);
    if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "the small-download buffer's set-up failed: %s", cudaGetErrorString(e));
    g_small.host = (unsigned char *)p;
    g_small.dev = (unsigned char *)d;
    return LJ_OK;
}

static void cuda_download(void *dst_host, const void *src, size_t bytes) {
    if (bytes == 0) return;
    if (bytes <= SMALL_DOWNLOAD_BYTES && g_small.dev) {
        pthread_mutex_lock(&g_small.mu);
        const unsigned blocks = (unsigned)((bytes + 255) / 256 < 64 ? (bytes + 255) / 256 : 64);
        small_download_kernel<<<blocks, 256, 0, g_cuda.stream>>>(g_small.dev, (const unsigned char *)src, bytes);
        LJ_CUDA_CHECK(cudaGetLastError(), "small_download_kernel launch");
        LJ_CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream), "cudaStreamSynchronize in download");
        memcpy(dst_host, g_small.host, bytes);
        pthread_mutex_unlock(&g_small.mu);
        return;
    }
    LJ_CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, g_cuda.stream),
                  "cudaMemcpyAsync in download");
    LJ_CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream), "cudaStreamSynchronize in download");
}

/* ---- copies beside the stream (--async-save) ------------------------------------ */

/* The copy stream of download_async, created at start-up: `ordered` (recorded on the stream)
 * puts each copy after the work queued before it; `copied` (recorded on the copy stream after
 * each copy, once at start-up so that it starts complete) is what the wait and the fence wait
 * for. A graph captures the fence as an external wait on `copied`, which each launch resolves
 * against its latest record. */
static struct {
    cudaStream_t stream;
    cudaEvent_t ordered, copied;
} g_copy;

static lj_status copy_stream_start(void) {
    cudaError_t e = cudaStreamCreateWithFlags(&g_copy.stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&g_copy.ordered, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&g_copy.copied, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(g_copy.copied, g_copy.stream);
    if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "the copy stream's set-up failed: %s", cudaGetErrorString(e));
    return LJ_OK;
}

static void cuda_download_async(void *dst_host, const void *src, size_t bytes) {
    if (bytes == 0) return;
    LJ_CUDA_CHECK(cudaEventRecord(g_copy.ordered, g_cuda.stream), "cudaEventRecord in download_async");
    LJ_CUDA_CHECK(cudaStreamWaitEvent(g_copy.stream, g_copy.ordered, 0), "cudaStreamWaitEvent in download_async");
    LJ_CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, g_copy.stream),
                  "cudaMemcpyAsync in download_async");
    LJ_CUDA_CHECK(cudaEventRecord(g_copy.copied, g_copy.stream), "cudaEventRecord in download_async");
}

/* cudaEventSynchronize works from any thread, whatever device is current there. */
static void cuda_download_async_wait(void) {
    LJ_CUDA_CHECK(cudaEventSynchronize(g_copy.copied), "cudaEventSynchronize in download_async_wait");
}

static void cuda_download_async_fence(void) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    LJ_CUDA_CHECK(cudaStreamIsCapturing(g_cuda.stream, &cs), "cudaStreamIsCapturing in download_async_fence");
    LJ_CUDA_CHECK(cudaStreamWaitEvent(g_cuda.stream, g_copy.copied,
                                      cs == cudaStreamCaptureStatusNone ? cudaEventWaitDefault : cudaEventWaitExternal),
                  "cudaStreamWaitEvent in download_async_fence");
}

static void cuda_copy(void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || dst == src) return;
    LJ_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_cuda.stream),
                  "cudaMemcpyAsync in copy");
}

static void cuda_synchronize(void) {
    LJ_CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream), "cudaStreamSynchronize");
}

static void *cuda_stream_ptr(void) { return (void *)g_cuda.stream; }

static const char *cuda_device_name(void) { return g_cuda.device_name[0] ? g_cuda.device_name : "CUDA device"; }

static lj_status cuda_memory_info(size_t *free_bytes, size_t *total_bytes) {
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "cudaMemGetInfo failed: %s", cudaGetErrorString(e));
    return LJ_OK;
}

/* ---- start-up -------------------------------------------------------------------- */

static lj_status cuda_start(const lj_ops_config *cfg) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return lj_fail(LJ_ERR_DEVICE, "no CUDA device found: %s", cudaGetErrorString(e));
    }
    if (count == 0) return lj_fail(LJ_ERR_DEVICE, "no CUDA device found: the driver reports 0 devices");
    /* a data-parallel rank uses the GPU of its local rank (the caller read it: torchrun, Open
     * MPI, Slurm) */
    if (cfg->device >= 0) {
        e = cudaSetDevice(cfg->device % count);
        if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "cudaSetDevice(%d) failed: %s", cfg->device % count,
                                             cudaGetErrorString(e));
    }
    int dev = 0;
    e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "cudaGetDevice failed: %s", cudaGetErrorString(e));
    struct cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess)
        return lj_fail(LJ_ERR_DEVICE, "cudaGetDeviceProperties(%d) failed: %s", dev, cudaGetErrorString(e));
    if (prop.major != 9 || prop.minor != 0)
        return lj_fail(LJ_ERR_UNSUPPORTED,
                       "CUDA device %d (%s) has compute capability %d.%d; this ljperf's kernels are built "
                       "for sm_90a (Hopper: H100/H200) only",
                       dev, prop.name, prop.major, prop.minor);
    g_cuda.num_sms = prop.multiProcessorCount;
    snprintf(g_cuda.device_name, sizeof g_cuda.device_name, "%s", prop.name);
    e = cudaStreamCreateWithFlags(&g_cuda.stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "cudaStreamCreateWithFlags failed: %s", cudaGetErrorString(e));
    g_cuda.debug_sync = cfg->debug_sync != 0;
    LJ_TRY(copy_stream_start());
    LJ_TRY(small_download_start());
    LJ_TRY(lj_cuda_matmul_init());
    lj_cuda_attention_init(cfg->cudnn_library);
    lj_cuda_fp8_init();
    return LJ_OK;
}

/* ---- the tables ------------------------------------------------------------------- */

/* The entries that read or write gradients, bound to one gradient dtype. */
#define LJ_CUDA_GRAD_ENTRIES(G, sfx)                                                                              \
    static void embedding_backward_##sfx(void *dwte, const void *dout, const int32_t *ids, int N, int C,         \
                                         void *workspace) {                                                      \
        lj_cuda_embedding_backward(dwte, dout, ids, N, C, workspace, G);                                         \
    }                                                                                                            \
    static void rmsnorm_backward_##sfx(void *dx, void *dw, const void *dout, const void *x, const void *w,       \
                                       const float *rstd, int N, int C, lj_grad_mode dw_mode, void *workspace) { \
        lj_cuda_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C, dw_mode, workspace, G);                         \
    }                                                                                                            \
    static void qk_norm_backward_##sfx(void *dx, void *dw, const void *dout, const void *x, const void *w,       \
                                       const float *rstd, int N, int nh, int nkv, int hd, lj_grad_mode dw_mode,  \
                                       void *workspace) {                                                        \
        lj_cuda_qk_norm_backward(dx, dw, dout, x, w, rstd, N, nh, nkv, hd, dw_mode, workspace, G);              \
    }                                                                                                            \
    static void qk_norm_rope_backward_##sfx(void *dx, void *dw, const void *dout, const void *x, const void *w,  \
                                            const float *rstd, const float *cos, const float *sin, int B, int T, \
                                            int nh, int nkv, int hd, lj_grad_mode dw_mode, void *workspace) {    \
        lj_cuda_qk_norm_rope_backward(dx, dw, dout, x, w, rstd, cos, sin, B, T, nh, nkv, hd, dw_mode, workspace, \
                                      G);                                                                        \
    }                                                                                                            \
    static void bias_backward_##sfx(void *db, const void *dout, int N, int C, lj_grad_mode dw_mode,              \
                                    void *workspace) {                                                           \
        lj_cuda_bias_backward(db, dout, N, C, dw_mode, workspace, G);                                            \
    }                                                                                                            \
    static void matmul_backward_##sfx(void *dx, void *dw, const void *dout, const void *x, const void *w, int N,  \
                                      int IC, int OC, lj_grad_mode dx_mode, lj_grad_mode dw_mode) {              \
        lj_cuda_matmul_backward(dx, dw, dout, x, w, N, IC, OC, dx_mode, dw_mode, G);                             \
    }                                                                                                            \
    static void cross_entropy_fused_##sfx(float *losses, void *dx, void *dw, const void *x, const void *w,       \
                                          const int32_t *targets, int N, int C, int V, float dloss,              \
                                          void *workspace) {                                                     \
        lj_cuda_cross_entropy_fused(losses, dx, dw, x, w, targets, N, C, V, dloss, workspace, G);                \
    }                                                                                                            \
    static void global_norm_sq_##sfx(float *out, const void *grad, int64_t n, void *workspace) {                 \
        lj_cuda_global_norm_sq(out, grad, n, workspace, G);                                                      \
    }                                                                                                            \
    static void adamw_update_##sfx(void *params, float *master, const void *grad, void *m, void *v,           \
                                   const lj_adamw_segment *segments, int num_segments, const lj_adamw_hparams *hp, \
                                   const float *step_scalars, const float *grad_norm_sq) {                       \
        lj_cuda_adamw_update(params, master, grad, m, v, segments, num_segments, hp, step_scalars, grad_norm_sq, G); \
    }                                                                                                            \
    static void layernorm_backward_##sfx(void *dx, void *dw, void *db, const void *dout, const void *x,          \
                                         const void *w, const float *mean, const float *rstd, int N, int C,      \
                                         lj_grad_mode dx_mode, lj_grad_mode dw_mode, void *workspace) {          \
        lj_cuda_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C, dx_mode, dw_mode, workspace, G);    \
    }                                                                                                            \
    static void embedding_bag_backward_##sfx(void *dtable, const void *dout, const int32_t *idx, const float *w, \
                                             int N, int K, int C) {                                              \
        lj_cuda_embedding_bag_backward(dtable, dout, idx, w, N, K, C, G);                                        \
    }

LJ_CUDA_GRAD_ENTRIES(LJ_DTYPE_BF16, bf16)
LJ_CUDA_GRAD_ENTRIES(LJ_DTYPE_F32, f32)

/* attention_forward_docs runs the own flash kernels, which need no workspace (ops.h). */
static size_t attention_forward_docs_workspace_bytes(int, int, int, int, int) { return 0; }

/* The attention entries, bound to one attention configuration (deterministic mode, the
 * kernels, the m-tiles): `mode` is the configuration's attention part. */
#define LJ_CUDA_ATTENTION_ENTRIES(sfx, DET, ATT, MT)                                                              \
    static const lj_ops_config mode_##sfx = {                                                                     \
        .grad_dtype = LJ_DTYPE_BF16, .deterministic = DET, .attention = ATT, .flash_forward_mtiles = MT};         \
    static void attention_forward_##sfx(void *out, float *lse, const void *qkv, int B, int T, int nh, int nkv,    \
                                        int hd, void *workspace) {                                               \
        lj_cuda_attention_forward(out, lse, qkv, B, T, nh, nkv, hd, workspace, &mode_##sfx);                     \
    }                                                                                                            \
    static void attention_backward_##sfx(void *dqkv, const void *dout, const void *qkv, const void *out,         \
                                         const float *lse, int B, int T, int nh, int nkv, int hd,                \
                                         void *workspace) {                                                      \
        lj_cuda_attention_backward(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, workspace, &mode_##sfx);        \
    }                                                                                                            \
    static size_t attention_workspace_bytes_##sfx(int B, int T, int nh, int nkv, int hd) {                       \
        return lj_cuda_attention_workspace_bytes(B, T, nh, nkv, hd, &mode_##sfx);                                \
    }                                                                                                            \
    static size_t attention_workspace_bytes_described_##sfx(int B, int T, int nh, int nkv, int hd) {             \
        return lj_cuda_attention_workspace_bytes_described(B, T, nh, nkv, hd, &mode_##sfx);                      \
    }                                                                                                            \
    static void attention_forward_docs_##sfx(void *out, float *lse, const void *qkv, const int32_t *doc_start,   \
                                             int B, int T, int nh, int nkv, int hd, void *workspace) {           \
        lj_cuda_attention_forward_docs(out, lse, qkv, doc_start, B, T, nh, nkv, hd, workspace, &mode_##sfx);     \
    }                                                                                                            \
    static void attention_backward_docs_##sfx(void *dqkv, const void *dout, const void *qkv, const void *out,    \
                                              const float *lse, const int32_t *doc_start, int B, int T, int nh,  \
                                              int nkv, int hd, void *workspace) {                                \
        lj_cuda_attention_backward_docs(dqkv, dout, qkv, out, lse, doc_start, B, T, nh, nkv, hd, workspace,      \
                                        &mode_##sfx);                                                            \
    }                                                                                                            \
    static void attention_varlen_forward_##sfx(void *out, float *lse, const void *qkv, const int32_t *cu_seqlens, \
                                               int nseg, int max_seqlen, int N, int nh, int nkv, int hd,          \
                                               int causal, void *workspace) {                                     \
        lj_cuda_attention_varlen_forward(out, lse, qkv, cu_seqlens, nseg, max_seqlen, N, nh, nkv, hd, causal,     \
                                         workspace, &mode_##sfx);                                                 \
    }                                                                                                            \
    static void attention_varlen_backward_##sfx(void *dqkv, const void *dout, const void *qkv, const void *out,  \
                                                const float *lse, const int32_t *cu_seqlens, int nseg,            \
                                                int max_seqlen, int N, int nh, int nkv, int hd, int causal,       \
                                                void *workspace) {                                                \
        lj_cuda_attention_varlen_backward(dqkv, dout, qkv, out, lse, cu_seqlens, nseg, max_seqlen, N, nh, nkv,    \
                                          hd, causal, workspace, &mode_##sfx);                                    \
    }                                                                                                            \
    static size_t attention_varlen_workspace_bytes_##sfx(int max_seqlen, int nh, int nkv, int hd) {              \
        return lj_cuda_attention_varlen_workspace_bytes(max_seqlen, nh, nkv, hd, &mode_##sfx);                   \
    }

/* Every attention configuration, in the tables' order (lj_cuda_config_index): deterministic mode
 * 0 and 1, then the kernels AUTO, FLASH, SIMPLE, then the m-tiles 1 and 2. X(G, gsfx, sfx, DET,
 * ATT, MT) for each, with a gradient dtype passed through. */
#define LJ_CUDA_ATTENTION_MODES(X, G, gsfx)                                                                       \
    X(G, gsfx, d0_auto_m1, 0, LJ_ATTENTION_AUTO, 1)                                                              \
    X(G, gsfx, d0_auto_m2, 0, LJ_ATTENTION_AUTO, 2)                                                              \
    X(G, gsfx, d0_flash_m1, 0, LJ_ATTENTION_FLASH, 1)                                                            \
    X(G, gsfx, d0_flash_m2, 0, LJ_ATTENTION_FLASH, 2)                                                            \
    X(G, gsfx, d0_simple_m1, 0, LJ_ATTENTION_SIMPLE, 1)                                                          \
    X(G, gsfx, d0_simple_m2, 0, LJ_ATTENTION_SIMPLE, 2)                                                          \
    X(G, gsfx, d1_auto_m1, 1, LJ_ATTENTION_AUTO, 1)                                                              \
    X(G, gsfx, d1_auto_m2, 1, LJ_ATTENTION_AUTO, 2)                                                              \
    X(G, gsfx, d1_flash_m1, 1, LJ_ATTENTION_FLASH, 1)                                                            \
    X(G, gsfx, d1_flash_m2, 1, LJ_ATTENTION_FLASH, 2)                                                            \
    X(G, gsfx, d1_simple_m1, 1, LJ_ATTENTION_SIMPLE, 1)                                                          \
    X(G, gsfx, d1_simple_m2, 1, LJ_ATTENTION_SIMPLE, 2)
#define LJ_CUDA_NUM_ATTENTION_MODES 12

#define LJ_CUDA_X_ENTRIES(G, gsfx, sfx, DET, ATT, MT) LJ_CUDA_ATTENTION_ENTRIES(sfx, DET, ATT, MT)
LJ_CUDA_ATTENTION_MODES(LJ_CUDA_X_ENTRIES, 0, none)


/* One table, written once for every configuration: gradient dtype G (its entries ##sfx) and
 * attention configuration asfx. */
#define LJ_CUDA_TABLE(G, sfx, asfx, DET, ATT, MT)                                    \
    {                                                                                \
        .name = "cuda",                                                              \
        .act_dtype = LJ_DTYPE_BF16,                                                  \
        .param_dtype = LJ_DTYPE_BF16,                                                \
        .grad_dtype = G,                                                             \
        .config = {.grad_dtype = G, .deterministic = DET, .attention = ATT,          \
                   .flash_forward_mtiles = MT},                                      \
                                                                                     \
        .alloc = lj_cuda_alloc,                                                      \
        .free = lj_cuda_free,                                                        \
        .memset_zero = cuda_memset_zero,                                             \
        .upload = cuda_upload,                                                       \
        .download = cuda_download,                                                   \
        .host_alloc = cuda_host_alloc,                                               \
        .host_free = cuda_host_free,                                                 \
        .download_async = cuda_download_async,                                       \
        .download_async_wait = cuda_download_async_wait,                             \
        .download_async_fence = cuda_download_async_fence,                           \
        .copy = cuda_copy,                                                           \
        .synchronize = cuda_synchronize,                                             \
        .stream = cuda_stream_ptr,                                                   \
        .memory_info = cuda_memory_info,                                             \
        .device_name = cuda_device_name,                                             \
        .cast_f32_to_param = lj_cuda_cast_f32_to_param,                              \
        .cast_to_f32 = lj_cuda_cast_to_f32,                                          \
                                                                                     \
        .embedding_forward = lj_cuda_embedding_forward,                              \
        .embedding_backward = embedding_backward_##sfx,                              \
        .embedding_backward_workspace_bytes = lj_cuda_embedding_backward_workspace_bytes, \
                                                                                     \
        .rmsnorm_forward = lj_cuda_rmsnorm_forward,                                  \
        .rmsnorm_backward = rmsnorm_backward_##sfx,                                  \
        .rmsnorm_backward_workspace_bytes = lj_cuda_rmsnorm_backward_workspace_bytes, \
        .residual_rmsnorm_forward = lj_cuda_residual_rmsnorm_forward,                \
        .add = lj_cuda_add,                                                          \
                                                                                     \
        .matmul_forward = lj_cuda_matmul_forward,                                    \
        .matmul_backward = matmul_backward_##sfx,                                    \
                                                                                     \
        .fp8_amax = lj_cuda_fp8_amax,                                                \
        .fp8_quantize = lj_cuda_fp8_quantize,                                        \
        .fp8_amax_f32 = lj_cuda_fp8_amax_f32,                                        \
        .fp8_quantize_f32 = lj_cuda_fp8_quantize_f32,                                \
        .fp8_transpose = lj_cuda_fp8_transpose,                                      \
        .fp8_swiglu_quantize = lj_cuda_fp8_swiglu_quantize,                          \
        .fp8_swiglu_amax = lj_cuda_fp8_swiglu_amax,                                  \
        .fp8_rmsnorm_quantize = lj_cuda_fp8_rmsnorm_quantize,                        \
        .fp8_scale_update = lj_cuda_fp8_scale_update,                                \
        .fp8_matmul = lj_cuda_fp8_matmul,                                            \
        .fp8_matmul_workspace_bytes = lj_cuda_fp8_matmul_workspace_bytes,            \
        .fp8_quantize_tiles = lj_cuda_fp8_quantize_tiles,                            \
        .fp8_quantize_blocks = lj_cuda_fp8_quantize_blocks,                          \
        .fp8_matmul_blockwise = lj_cuda_fp8_matmul_blockwise,                        \
                                                                                     \
        .rope_forward = lj_cuda_rope_forward,                                        \
        .rope_backward = lj_cuda_rope_backward,                                      \
        .rope_forward_pos = lj_cuda_rope_forward_pos,                                \
        .rope_backward_pos = lj_cuda_rope_backward_pos,                              \
                                                                                     \
        .qk_norm_forward = lj_cuda_qk_norm_forward,                                  \
        .qk_norm_backward = qk_norm_backward_##sfx,                                  \
        .qk_norm_backward_workspace_bytes = lj_cuda_qk_norm_backward_workspace_bytes, \
        .qk_norm_rope_forward = lj_cuda_qk_norm_rope_forward,                        \
        .qk_norm_rope_backward = qk_norm_rope_backward_##sfx,                        \
        .bias_add = lj_cuda_bias_add,                                                \
        .bias_backward = bias_backward_##sfx,                                        \
        .bias_backward_workspace_bytes = lj_cuda_bias_backward_workspace_bytes,      \
                                                                                     \
        .attention_forward = attention_forward_##asfx,                               \
        .attention_backward = attention_backward_##asfx,                             \
        .attention_workspace_bytes = attention_workspace_bytes_##asfx,               \
        .attention_forward_docs = attention_forward_docs_##asfx,                     \
        .attention_backward_docs = attention_backward_docs_##asfx,                   \
        .attention_forward_docs_workspace_bytes = attention_forward_docs_workspace_bytes, \
        .attention_decode = lj_cuda_attention_decode,                                \
        .paged_kv_write = lj_cuda_paged_kv_write,                                    \
        .paged_attention = lj_cuda_paged_attention,                                  \
        .paged_kv_write_fp8 = lj_cuda_paged_kv_write_fp8,                            \
        .paged_kv_round_fp8 = lj_cuda_paged_kv_round_fp8,                            \
        .paged_attention_fp8 = lj_cuda_paged_attention_fp8,                          \
        .gather_rows = lj_cuda_gather_rows,                                          \
        .argmax_rows = lj_cuda_argmax_rows,                                          \
                                                                                     \
        .swiglu_forward = lj_cuda_swiglu_forward,                                    \
        .swiglu_backward = lj_cuda_swiglu_backward,                                  \
        .swiglu_forward_unfused = lj_cuda_swiglu_forward_unfused,                    \
        .swiglu_backward_unfused = lj_cuda_swiglu_backward_unfused,                  \
                                                                                     \
        .cross_entropy_fused = cross_entropy_fused_##sfx,                            \
        .cross_entropy_fused_workspace_bytes = lj_cuda_cross_entropy_fused_workspace_bytes, \
        .cross_entropy_forward_backward = lj_cuda_cross_entropy_forward_backward,    \
                                                                                     \
        .layernorm_forward = lj_cuda_layernorm_forward,                              \
        .layernorm_backward = layernorm_backward_##sfx,                              \
        .layernorm_backward_workspace_bytes = lj_cuda_layernorm_backward_workspace_bytes, \
        .gelu_forward = lj_cuda_gelu_forward,                                        \
        .gelu_backward = lj_cuda_gelu_backward,                                      \
        .embedding_bag_forward = lj_cuda_embedding_bag_forward,                      \
        .embedding_bag_backward = embedding_bag_backward_##sfx,                      \
        .attention_varlen_forward = attention_varlen_forward_##asfx,                 \
        .attention_varlen_backward = attention_varlen_backward_##asfx,               \
        .attention_varlen_workspace_bytes = attention_varlen_workspace_bytes_##asfx, \
        .rows_gather = lj_cuda_rows_gather,                                          \
        .rows_scatter = lj_cuda_rows_scatter,                                        \
                                                                                     \
        .global_norm_sq = global_norm_sq_##sfx,                                      \
        .global_norm_workspace_bytes = lj_cuda_global_norm_workspace_bytes,          \
        .adamw_update = adamw_update_##sfx,                                          \
                                                                                     \
        .graph_capture_begin = lj_cuda_graph_capture_begin,                          \
        .graph_capture_end = lj_cuda_graph_capture_end,                              \
        .graph_launch = lj_cuda_graph_launch,                                        \
        .graph_destroy = lj_cuda_graph_destroy,                                      \
                                                                                     \
        .range_push = lj_cuda_range_push,                                            \
        .range_pop = lj_cuda_range_pop,                                              \
        .profiler_start = lj_cuda_profiler_start,                                    \
        .profiler_stop = lj_cuda_profiler_stop,                                      \
    }

#define LJ_CUDA_X_TABLE(G, gsfx, sfx, DET, ATT, MT) LJ_CUDA_TABLE(G, gsfx, sfx, DET, ATT, MT),
#define LJ_CUDA_X_DESCRIBED(G, gsfx, sfx, DET, ATT, MT) attention_workspace_bytes_described_##sfx,

/* The bf16-gradient tables (the default gradient dtype), then the fp32 ones, each in the order
 * of LJ_CUDA_ATTENTION_MODES. */
static const lj_ops g_cuda_tables[2 * LJ_CUDA_NUM_ATTENTION_MODES] = {
    LJ_CUDA_ATTENTION_MODES(LJ_CUDA_X_TABLE, LJ_DTYPE_BF16, bf16)
    LJ_CUDA_ATTENTION_MODES(LJ_CUDA_X_TABLE, LJ_DTYPE_F32, f32)};

/* The planning form of each attention configuration's workspace size, in the same order. */
static size_t (*const g_cuda_described[LJ_CUDA_NUM_ATTENTION_MODES])(int, int, int, int, int) = {
    LJ_CUDA_ATTENTION_MODES(LJ_CUDA_X_DESCRIBED, 0, none)};

int lj_cuda_config_index(const lj_ops_config *cfg) {
    if (cfg->grad_dtype != LJ_DTYPE_BF16 && cfg->grad_dtype != LJ_DTYPE_F32) {
        lj_fail(LJ_ERR_ARG, "the CUDA backend keeps gradients in bf16 or fp32, not %s", lj_dtype_name(cfg->grad_dtype));
        return -1;
    }
    if (cfg->attention != LJ_ATTENTION_AUTO && cfg->attention != LJ_ATTENTION_FLASH &&
        cfg->attention != LJ_ATTENTION_SIMPLE) {
        lj_fail(LJ_ERR_ARG, "CUDA backend configuration: attention kernels %d are not AUTO, FLASH or SIMPLE",
                (int)cfg->attention);
        return -1;
    }
    if (cfg->flash_forward_mtiles < 0 || cfg->flash_forward_mtiles > 2) {
        lj_fail(LJ_ERR_ARG, "CUDA backend configuration: flash_forward_mtiles %d is not 1 or 2 (0: 2)",
                cfg->flash_forward_mtiles);
        return -1;
    }
    const int mode = ((cfg->deterministic ? 1 : 0) * 3 + (int)cfg->attention) * 2 + (cfg->flash_forward_mtiles == 1 ? 0 : 1);
    return (cfg->grad_dtype == LJ_DTYPE_F32 ? LJ_CUDA_NUM_ATTENTION_MODES : 0) + mode;
}

const lj_ops *lj_cuda_table(int index) { return &g_cuda_tables[index]; }

size_t (*lj_cuda_attention_workspace_described(int index))(int, int, int, int, int) {
    return g_cuda_described[index % LJ_CUDA_NUM_ATTENTION_MODES];
}

const lj_ops *lj_ops_cuda_open(const lj_ops_config *cfg) {
    const lj_ops_config def = LJ_OPS_CONFIG_DEFAULT;
    if (!cfg) cfg = &def;
    const int index = lj_cuda_config_index(cfg);
    if (index < 0) return NULL;
    if (!g_cuda.ready) {
        if (cuda_start(cfg) != LJ_OK) return NULL;
        g_cuda.ready = 1;
    }
    return lj_cuda_table(index);
}

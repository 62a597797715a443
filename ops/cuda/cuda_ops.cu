/* cuda_ops.cu: the CUDA backend's op table (lj_ops_cuda), its start-up (device check,
 * stream, cuBLASLt workspace), device memory (tracked cudaMalloc/cudaFree, async copies) and
 * the error reporting every CUDA file uses. */
#include "ops/cuda/cuda_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LJ_CUDA_LT_WORKSPACE_BYTES ((size_t)32 << 20)

/* One live allocation, so that free can report the exact bytes to lj_ops_track. */
typedef struct {
    void *ptr;
    size_t bytes;
} lj_cuda_allocation;

/* The backend's state: created once by lj_ops_cuda(), lives until the process ends. */
static struct {
    int ready;
    cudaStream_t stream;
    int num_sms;
    int debug_sync;
    int simple_attention;
    int fwd_mtiles; /* 0: the default (2) */
    lj_cuda_allocation *allocs;
    int num_allocs, cap_allocs;
    lj_ops table;
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
void lj_cuda_set_simple_attention(int on) { g_cuda.simple_attention = on; }
int lj_cuda_simple_attention(void) { return g_cuda.simple_attention; }
void lj_cuda_set_flash_forward_mtiles(int m_tiles) {
    if (m_tiles == 1 || m_tiles == 2) g_cuda.fwd_mtiles = m_tiles;
}
int lj_cuda_flash_forward_mtiles(void) { return g_cuda.fwd_mtiles ? g_cuda.fwd_mtiles : 2; }

/* ---- memory ---------------------------------------------------------------------- */

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
    lj_ops_track((int64_t)bytes);
    *ptr = p;
    return LJ_OK;
}

void lj_cuda_free(void *ptr) {
    if (!ptr) return;
    int i = 0;
    while (i < g_cuda.num_allocs && g_cuda.allocs[i].ptr != ptr) i++;
    LJ_ASSERT(i < g_cuda.num_allocs, "cuda free of a pointer the backend did not allocate");
    lj_ops_track(-(int64_t)g_cuda.allocs[i].bytes);
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

static void cuda_download(void *dst_host, const void *src, size_t bytes) {
    if (bytes == 0) return;
    LJ_CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, g_cuda.stream),
                  "cudaMemcpyAsync in download");
    LJ_CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream), "cudaStreamSynchronize in download");
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

static lj_status cuda_memory_info(size_t *free_bytes, size_t *total_bytes) {
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "cudaMemGetInfo failed: %s", cudaGetErrorString(e));
    return LJ_OK;
}

/* ---- start-up -------------------------------------------------------------------- */

static lj_status cuda_start(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return lj_fail(LJ_ERR_DEVICE, "no CUDA device found: %s", cudaGetErrorString(e));
    }
    if (count == 0) return lj_fail(LJ_ERR_DEVICE, "no CUDA device found: the driver reports 0 devices");
    /* a data-parallel rank uses the GPU of its local rank (torchrun, Open MPI, Slurm) */
    const char *local = getenv("LOCAL_RANK");
    if (!local) local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!local) local = getenv("SLURM_LOCALID");
    if (local && atoi(local) >= 0) {
        e = cudaSetDevice(atoi(local) % count);
        if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "cudaSetDevice(%d) failed: %s", atoi(local) % count,
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
    e = cudaStreamCreateWithFlags(&g_cuda.stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "cudaStreamCreateWithFlags failed: %s", cudaGetErrorString(e));
    const char *dbg = getenv("LJ_CUDA_DEBUG");
    g_cuda.debug_sync = dbg && dbg[0] && strcmp(dbg, "0") != 0;
    const char *att = getenv("LJ_CUDA_ATTENTION");
    g_cuda.simple_attention = att && strcmp(att, "simple") == 0;
    LJ_TRY(lj_cuda_matmul_init());
    lj_cuda_attention_init();
    return LJ_OK;
}

void lj_cuda_table_set_grad_dtype(lj_dtype dtype) { g_cuda.table.grad_dtype = dtype; }

const lj_ops *lj_ops_cuda(void) {
    if (g_cuda.ready) return &g_cuda.table;
    if (cuda_start() != LJ_OK) return NULL;
    lj_ops *t = &g_cuda.table;
    *t = *lj_ops_cuda_describe(); /* name, dtypes and workspace sizes */
    /* with a device, cuDNN is asked for its attention workspace, which also builds its plans for
     * the shape before any graph capture (the description can only estimate it) */
    t->attention_workspace_bytes = lj_cuda_attention_workspace_bytes;
    t->alloc = lj_cuda_alloc;
    t->free = lj_cuda_free;
    t->memset_zero = cuda_memset_zero;
    t->upload = cuda_upload;
    t->download = cuda_download;
    t->copy = cuda_copy;
    t->synchronize = cuda_synchronize;
    t->memory_info = cuda_memory_info;
    t->stream = cuda_stream_ptr;
    t->cast_f32_to_param = lj_cuda_cast_f32_to_param;
    t->cast_to_f32 = lj_cuda_cast_to_f32;
    t->embedding_forward = lj_cuda_embedding_forward;
    t->embedding_backward = lj_cuda_embedding_backward;
    t->rmsnorm_forward = lj_cuda_rmsnorm_forward;
    t->rmsnorm_backward = lj_cuda_rmsnorm_backward;
    t->residual_rmsnorm_forward = lj_cuda_residual_rmsnorm_forward;
    t->add = lj_cuda_add;
    t->matmul_forward = lj_cuda_matmul_forward;
    t->matmul_backward = lj_cuda_matmul_backward;
    t->set_weight_grad_overwrite = lj_cuda_set_weight_grad_overwrite;
    t->rope_forward = lj_cuda_rope_forward;
    t->rope_backward = lj_cuda_rope_backward;
    t->attention_forward = lj_cuda_attention_forward;
    t->attention_backward = lj_cuda_attention_backward;
    t->attention_decode = lj_cuda_attention_decode;
    t->swiglu_forward = lj_cuda_swiglu_forward;
    t->swiglu_backward = lj_cuda_swiglu_backward;
    t->swiglu_forward_unfused = lj_cuda_swiglu_forward_unfused;
    t->swiglu_backward_unfused = lj_cuda_swiglu_backward_unfused;
    t->cross_entropy_fused = lj_cuda_cross_entropy_fused;
    t->cross_entropy_forward_backward = lj_cuda_cross_entropy_forward_backward;
    t->global_norm_sq = lj_cuda_global_norm_sq;
    t->adamw_update = lj_cuda_adamw_update;
    t->graph_capture_begin = lj_cuda_graph_capture_begin;
    t->graph_capture_end = lj_cuda_graph_capture_end;
    t->graph_launch = lj_cuda_graph_launch;
    t->graph_destroy = lj_cuda_graph_destroy;
    g_cuda.ready = 1;
    return t;
}

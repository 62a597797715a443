/* dist_nccl.c: the NCCL implementation of the collectives (GPU ranks, device buffers) on the
 * communicator's own high-priority CUDA stream, ordered against the caller's compute stream
 * with events (dist.h, "Collective ordering"), plus the device copy of the single backend.
 * NCCL's environment variables are never set or changed here. Built only with LJ_HAVE_NCCL
 * (and LJ_HAVE_CUDA); otherwise every entry point returns LJ_ERR_UNSUPPORTED. */
#include "parallel/dist_internal.h"

#include <string.h>
#include <time.h>

#ifdef LJ_HAVE_CUDA
#include <cuda_runtime.h>

lj_status lj_dist_cuda_copy(void *dst, const void *src, size_t bytes, void *stream) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
    if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "cudaMemcpyAsync failed: %s", cudaGetErrorString(e));
    return LJ_OK;
}
#else
lj_status lj_dist_cuda_copy(void *dst, const void *src, size_t bytes, void *stream) {
    return lj_fail(LJ_ERR_UNSUPPORTED, "device buffers need the CUDA backend, and this build has no CUDA");
}
#endif

#if defined(LJ_HAVE_NCCL) && defined(LJ_HAVE_CUDA)
#include <nccl.h>

_Static_assert(sizeof(ncclUniqueId) == LJ_NCCL_ID_BYTES, "NCCL unique id size");

#define LJ_NCCL_MARKS 64 /* events in the ticket ring */

struct lj_dist_nccl {
    ncclComm_t comm;
    cudaStream_t stream;                 /* communication stream */
    cudaEvent_t compute_ready;           /* recorded on the caller's stream before each collective */
    cudaEvent_t marks[LJ_NCCL_MARKS];    /* ticket t is recorded in marks[(t - 1) % LJ_NCCL_MARKS] */
    uint64_t num_marks;
    int group_depth;
    int aborted;
    float *barrier_word;                 /* device [1] */
};

static lj_status cuda_fail(const char *call, cudaError_t e) {
    return lj_fail(LJ_ERR_DEVICE, "%s failed: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
}

static lj_status nccl_fail(const lj_dist_nccl *n, const char *call, ncclResult_t r) {
    const char *last = ncclGetLastError(n ? n->comm : NULL);
    if (last && *last) return lj_fail(LJ_ERR_DEVICE, "%s failed: %s (%s)", call, ncclGetErrorString(r), last);
    return lj_fail(LJ_ERR_DEVICE, "%s failed: %s", call, ncclGetErrorString(r));
}

#define CUDA_TRY(call, expr)                                 \
    do {                                                     \
        cudaError_t e_ = (expr);                             \
        if (e_ != cudaSuccess) return cuda_fail(call, e_);   \
    } while (0)

#define NCCL_TRY(n, call, expr)                                  \
    do {                                                         \
        ncclResult_t r_ = (expr);                                \
        if (r_ != ncclSuccess) return nccl_fail((n), call, r_);  \
    } while (0)

static ncclDataType_t nccl_sum_type(lj_dtype dtype) {
    LJ_ASSERT(dtype == LJ_DTYPE_F32 || dtype == LJ_DTYPE_BF16);
    return dtype == LJ_DTYPE_F32 ? ncclFloat32 : ncclBfloat16;
}

lj_status lj_dist_nccl_set_device(lj_dist *d) {
    if (!d->opt.set_device) return LJ_OK;
    int count = 0;
    CUDA_TRY("cudaGetDeviceCount", cudaGetDeviceCount(&count));
    if (count == 0) return lj_fail(LJ_ERR_DEVICE, "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)");
    const int local = d->env.local_rank >= 0 ? d->env.local_rank : d->env.rank;
    CUDA_TRY("cudaSetDevice", cudaSetDevice(local % count));
    return LJ_OK;
}

lj_status lj_dist_nccl_unique_id(unsigned char id[LJ_NCCL_ID_BYTES]) {
    ncclUniqueId u;
    NCCL_TRY(NULL, "ncclGetUniqueId", ncclGetUniqueId(&u));
    memcpy(id, &u, sizeof u);
    return LJ_OK;
}

/* NCCL connects its peers (and allocates the connections' buffers) lazily, at the first
 * collective of each algorithm. A small and a large all-reduce, all-gather, reduce-scatter and
 * broadcast here do that at start-up: a broken link is reported before training starts, and
 * the memory NCCL keeps is in use before the memory plan is allocated (so the benchmark's
 * start-up measurement includes it; plan/planner.h LJ_PLANNER_NCCL_BYTES). */
static lj_status connect_now(lj_dist *d) {
    lj_dist_nccl *n = d->nccl;
    const int world = d->env.world_size;
    const size_t per_rank[2] = {(size_t)4 << 10, (size_t)4 << 20};
    void *buf = NULL;
    CUDA_TRY("cudaMalloc", cudaMalloc(&buf, per_rank[1] * (size_t)world * 2));
    CUDA_TRY("cudaMemsetAsync", cudaMemsetAsync(buf, 0, per_rank[1] * (size_t)world * 2, n->stream));
    char *a = buf, *b = (char *)buf + per_rank[1] * (size_t)world;
    lj_status s = LJ_OK;
    for (int i = 0; i < 2 && s == LJ_OK; i++) {
        const size_t c = per_rank[i] / sizeof(float);
        ncclResult_t r = ncclAllReduce(a, b, c * (size_t)world, ncclFloat32, ncclSum, n->comm, n->stream);
        if (r == ncclSuccess) r = ncclAllGather(a, b, per_rank[i], ncclUint8, n->comm, n->stream);
        if (r == ncclSuccess) r = ncclReduceScatter(a, b, c, ncclFloat32, ncclSum, n->comm, n->stream);
        if (r == ncclSuccess) r = ncclBroadcast(a, a, per_rank[i], ncclUint8, 0, n->comm, n->stream);
        if (r != ncclSuccess) s = nccl_fail(n, "the first collectives (connecting the ranks)", r);
    }
    if (s == LJ_OK) s = lj_dist_nccl_synchronize(d); /* with the rank timeout */
    cudaFree(buf);
    return s;
}

lj_status lj_dist_nccl_init(lj_dist *d, const unsigned char id[LJ_NCCL_ID_BYTES]) {
    lj_dist_nccl *n = lj_calloc(1, sizeof *n);
    d->nccl = n;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t comm = NULL;
    NCCL_TRY(n, "ncclCommInitRank", ncclCommInitRank(&comm, d->env.world_size, u, d->env.rank));
    n->comm = comm;
    int least = 0, greatest = 0;
    CUDA_TRY("cudaDeviceGetStreamPriorityRange", cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_TRY("cudaStreamCreateWithPriority", cudaStreamCreateWithPriority(&n->stream, cudaStreamNonBlocking, greatest));
    CUDA_TRY("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&n->compute_ready, cudaEventDisableTiming));
    for (int i = 0; i < LJ_NCCL_MARKS; i++)
        CUDA_TRY("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&n->marks[i], cudaEventDisableTiming));
    CUDA_TRY("cudaMalloc", cudaMalloc((void **)&n->barrier_word, sizeof(float)));
    CUDA_TRY("cudaMemset", cudaMemset(n->barrier_word, 0, sizeof(float)));
    return connect_now(d);
}

/* Makes the communication stream wait for everything queued on the caller's stream. */
static lj_status order_after(lj_dist_nccl *n, void *stream) {
    if (n->aborted) return lj_fail(LJ_ERR_DEVICE, "the NCCL communicator was aborted after an earlier error");
    cudaStream_t s = (cudaStream_t)stream;
    if (s == n->stream) return LJ_OK;
    CUDA_TRY("cudaEventRecord", cudaEventRecord(n->compute_ready, s));
    CUDA_TRY("cudaStreamWaitEvent", cudaStreamWaitEvent(n->stream, n->compute_ready, 0));
    return LJ_OK;
}

lj_status lj_dist_nccl_all_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype,
                                  void *stream) {
    lj_dist_nccl *n = d->nccl;
    LJ_TRY(order_after(n, stream));
    NCCL_TRY(n, "ncclAllReduce", ncclAllReduce(send, recv, (size_t)count, nccl_sum_type(dtype), ncclSum, n->comm, n->stream));
    return LJ_OK;
}

lj_status lj_dist_nccl_all_reduce_max_u32(lj_dist *d, const void *send, void *recv, int64_t count, void *stream) {
    lj_dist_nccl *n = d->nccl;
    LJ_TRY(order_after(n, stream));
    NCCL_TRY(n, "ncclAllReduce", ncclAllReduce(send, recv, (size_t)count, ncclUint32, ncclMax, n->comm, n->stream));
    return LJ_OK;
}

lj_status lj_dist_nccl_reduce_scatter(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype,
                                      void *stream) {
    lj_dist_nccl *n = d->nccl;
    LJ_TRY(order_after(n, stream));
    NCCL_TRY(n, "ncclReduceScatter",
             ncclReduceScatter(send, recv, (size_t)count, nccl_sum_type(dtype), ncclSum, n->comm, n->stream));
    return LJ_OK;
}

lj_status lj_dist_nccl_all_gather(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype,
                                  void *stream) {
    lj_dist_nccl *n = d->nccl;
    LJ_TRY(order_after(n, stream));
    const size_t bytes = (size_t)count * lj_dtype_size(dtype); /* a copy: the dtype does not matter */
    NCCL_TRY(n, "ncclAllGather", ncclAllGather(send, recv, bytes, ncclUint8, n->comm, n->stream));
    return LJ_OK;
}

lj_status lj_dist_nccl_broadcast(lj_dist *d, void *buf, int64_t count, lj_dtype dtype, int root, void *stream) {
    lj_dist_nccl *n = d->nccl;
    LJ_TRY(order_after(n, stream));
    const size_t bytes = (size_t)count * lj_dtype_size(dtype);
    NCCL_TRY(n, "ncclBroadcast", ncclBroadcast(buf, buf, bytes, ncclUint8, root, n->comm, n->stream));
    return LJ_OK;
}

lj_status lj_dist_nccl_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype, int root,
                              void *stream) {
    lj_dist_nccl *n = d->nccl;
    LJ_TRY(order_after(n, stream));
    NCCL_TRY(n, "ncclReduce",
             ncclReduce(send, recv, (size_t)count, nccl_sum_type(dtype), ncclSum, root, n->comm, n->stream));
    return LJ_OK;
}

lj_status lj_dist_nccl_group(lj_dist *d, int start) {
    lj_dist_nccl *n = d->nccl;
    if (start) {
        NCCL_TRY(n, "ncclGroupStart", ncclGroupStart());
        n->group_depth++;
    } else {
        LJ_ASSERT(n->group_depth > 0, "lj_dist_group_end without lj_dist_group_start");
        n->group_depth--;
        NCCL_TRY(n, "ncclGroupEnd", ncclGroupEnd());
    }
    return LJ_OK;
}

lj_status lj_dist_nccl_mark(lj_dist *d, lj_dist_ticket *ticket) {
    lj_dist_nccl *n = d->nccl;
    LJ_ASSERT(n->group_depth == 0, "lj_dist_mark inside an NCCL group");
    const uint64_t t = n->num_marks + 1;
    CUDA_TRY("cudaEventRecord", cudaEventRecord(n->marks[(t - 1) % LJ_NCCL_MARKS], n->stream));
    n->num_marks = t;
    *ticket = t;
    return LJ_OK;
}

lj_status lj_dist_nccl_wait(lj_dist *d, lj_dist_ticket ticket, void *stream) {
    lj_dist_nccl *n = d->nccl;
    if (ticket == LJ_DIST_ALL) LJ_TRY(lj_dist_nccl_mark(d, &ticket));
    if (ticket == 0) return LJ_OK;
    LJ_ASSERT(ticket <= n->num_marks, "ticket %llu was never handed out", (unsigned long long)ticket);
    if ((cudaStream_t)stream == n->stream) return LJ_OK;
    CUDA_TRY("cudaStreamWaitEvent",
             cudaStreamWaitEvent((cudaStream_t)stream, n->marks[(ticket - 1) % LJ_NCCL_MARKS], 0));
    return LJ_OK;
}

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

lj_status lj_dist_nccl_synchronize(lj_dist *d) {
    lj_dist_nccl *n = d->nccl;
    if (n->aborted) return lj_fail(LJ_ERR_DEVICE, "the NCCL communicator was aborted after an earlier error");
    lj_dist_ticket t = 0;
    LJ_TRY(lj_dist_nccl_mark(d, &t));
    cudaEvent_t ev = n->marks[(t - 1) % LJ_NCCL_MARKS];
    const double start = now_sec();
    for (;;) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return LJ_OK;
        if (e != cudaErrorNotReady) return cuda_fail("cudaEventQuery", e);
        ncclResult_t async = ncclSuccess;
        NCCL_TRY(n, "ncclCommGetAsyncError", ncclCommGetAsyncError(n->comm, &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            lj_status s = nccl_fail(n, "NCCL collective (asynchronous error)", async);
            lj_dist_nccl_abort(d);
            return s;
        }
        const double waited = now_sec() - start;
        if (waited > d->opt.timeout_sec) {
            lj_dist_nccl_abort(d);
            return lj_fail(LJ_ERR_DEVICE,
                           "NCCL collectives did not complete within %.1f s (LJPERF_DIST_TIMEOUT): another rank "
                           "has likely died or hung; the communicator was aborted (ncclCommAbort)",
                           d->opt.timeout_sec);
        }
        struct timespec nap = {0, waited < 0.01 ? 20000 : 1000000}; /* 20 us, then 1 ms */
        nanosleep(&nap, NULL);
    }
}

lj_status lj_dist_nccl_barrier(lj_dist *d) {
    lj_dist_nccl *n = d->nccl;
    LJ_TRY(lj_dist_nccl_synchronize(d));
    NCCL_TRY(n, "ncclAllReduce",
             ncclAllReduce(n->barrier_word, n->barrier_word, 1, ncclFloat32, ncclSum, n->comm, n->stream));
    return lj_dist_nccl_synchronize(d);
}

void lj_dist_nccl_abort(lj_dist *d) {
    lj_dist_nccl *n = d->nccl;
    if (!n || n->aborted || !n->comm) return;
    n->aborted = 1;
    ncclCommAbort(n->comm);
}

void lj_dist_nccl_free(lj_dist *d) {
    lj_dist_nccl *n = d->nccl;
    if (!n) return;
    if (n->comm && !n->aborted) {
        ncclResult_t r = ncclCommFinalize(n->comm);
        if (r == ncclSuccess) r = ncclCommDestroy(n->comm);
        if (r != ncclSuccess) {
            nccl_fail(n, "ncclCommDestroy", r);
            lj_log_warn("rank %d: %s", d->env.rank, lj_error_message());
        }
    }
    if (n->barrier_word) cudaFree(n->barrier_word);
    for (int i = 0; i < LJ_NCCL_MARKS; i++)
        if (n->marks[i]) cudaEventDestroy(n->marks[i]);
    if (n->compute_ready) cudaEventDestroy(n->compute_ready);
    if (n->stream) cudaStreamDestroy(n->stream);
    free(n);
    d->nccl = NULL;
}

#else /* no NCCL in this build */

static lj_status no_nccl(void) {
    return lj_fail(LJ_ERR_UNSUPPORTED, "this build has no NCCL (it needs the CUDA toolkit with libnccl at configure time)");
}

lj_status lj_dist_nccl_set_device(lj_dist *d) { return no_nccl(); }
lj_status lj_dist_nccl_unique_id(unsigned char id[LJ_NCCL_ID_BYTES]) { return no_nccl(); }
lj_status lj_dist_nccl_init(lj_dist *d, const unsigned char id[LJ_NCCL_ID_BYTES]) { return no_nccl(); }
lj_status lj_dist_nccl_all_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype,
                                  void *stream) {
    return no_nccl();
}
lj_status lj_dist_nccl_all_reduce_max_u32(lj_dist *d, const void *send, void *recv, int64_t count, void *stream) {
    return no_nccl();
}
lj_status lj_dist_nccl_reduce_scatter(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype,
                                      void *stream) {
    return no_nccl();
}
lj_status lj_dist_nccl_all_gather(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype,
                                  void *stream) {
    return no_nccl();
}
lj_status lj_dist_nccl_broadcast(lj_dist *d, void *buf, int64_t count, lj_dtype dtype, int root, void *stream) {
    return no_nccl();
}
lj_status lj_dist_nccl_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype, int root,
                              void *stream) {
    return no_nccl();
}
lj_status lj_dist_nccl_group(lj_dist *d, int start) { return no_nccl(); }
lj_status lj_dist_nccl_barrier(lj_dist *d) { return no_nccl(); }
lj_status lj_dist_nccl_mark(lj_dist *d, lj_dist_ticket *ticket) { return no_nccl(); }
lj_status lj_dist_nccl_wait(lj_dist *d, lj_dist_ticket ticket, void *stream) { return no_nccl(); }
lj_status lj_dist_nccl_synchronize(lj_dist *d) { return no_nccl(); }
void lj_dist_nccl_abort(lj_dist *d) {}
void lj_dist_nccl_free(lj_dist *d) {}

#endif

/* dist_mpi.c: the MPI implementation of the collectives (CPU ranks, host buffers) and the MPI
 * side of bootstrap (rank discovery, config-hash check, NCCL unique id broadcast). Every MPI
 * call is checked and runs under the watchdog's deadline (dist.h, "Liveness"). Built only with
 * LJ_HAVE_MPI; otherwise every entry point returns LJ_ERR_UNSUPPORTED. */
#include "parallel/dist_internal.h"

#include <string.h>

#ifdef LJ_HAVE_MPI
#include <limits.h>
#include <mpi.h>

struct lj_dist_mpi {
    MPI_Comm comm;       /* private duplicate of MPI_COMM_WORLD, errors returned */
    MPI_Datatype bf16;   /* 2 bytes, contiguous */
    MPI_Op bf16_sum;     /* elementwise sum in fp32, rounded to bf16 */
    int owns_init;       /* lj_dist_mpi_init called MPI_Init_thread: finalize at free */
};

/* The largest count one MPI call takes here: MPI counts are int. */
#define MPI_CHUNK ((int64_t)1 << 30)

static lj_status mpi_fail(const char *call, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error code %d", rc);
    return lj_fail(LJ_ERR_DEVICE, "%s failed: %s", call, msg);
}

/* Ends the watchdog deadline of `call` and turns its return code into a status. */
static lj_status mpi_done(lj_dist *d, const char *call, int rc) {
    lj_bootstrap_op_end(d->boot);
    return rc == MPI_SUCCESS ? LJ_OK : mpi_fail(call, rc);
}

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = lj_f32_to_bf16(lj_bf16_to_f32(a[i]) + lj_bf16_to_f32(b[i]));
}

static MPI_Datatype mpi_type(const lj_dist_mpi *m, lj_dtype dtype) {
    switch (dtype) {
    case LJ_DTYPE_F32: return MPI_FLOAT;
    case LJ_DTYPE_BF16: return m->bf16;
    case LJ_DTYPE_F16: return MPI_UINT16_T;
    case LJ_DTYPE_I32: return MPI_INT32_T;
    case LJ_DTYPE_U16: return MPI_UINT16_T;
    }
    LJ_ASSERT(0, "dtype %d", (int)dtype);
    return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_sum(const lj_dist_mpi *m, lj_dtype dtype) { return dtype == LJ_DTYPE_BF16 ? m->bf16_sum : MPI_SUM; }

lj_status lj_dist_mpi_init(lj_dist *d) {
    lj_dist_mpi *m = lj_calloc(1, sizeof *m);
    m->comm = MPI_COMM_NULL;
    m->bf16 = MPI_DATATYPE_NULL;
    m->bf16_sum = MPI_OP_NULL;
    d->mpi = m;
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized) return lj_fail(LJ_ERR_UNSUPPORTED, "MPI was already finalized in this process");
    if (!initialized) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return mpi_fail("MPI_Init_thread", rc);
        m->owns_init = 1;
    }
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
    if (rc != MPI_SUCCESS) return mpi_fail("MPI_Comm_dup", rc);
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    int rank = 0, size = 0;
    MPI_Comm_rank(m->comm, &rank);
    MPI_Comm_size(m->comm, &size);
    if (d->env.world_size > 0 && (d->env.world_size != size || d->env.rank != rank))
        return lj_fail(LJ_ERR_DEVICE,
                       "the launcher (%s) says rank %d of %d but MPI_COMM_WORLD says rank %d of %d: this MPI "
                       "library does not recognise the launcher (for srun, Open MPI needs PMI/PMIx support; "
                       "or start with mpirun)",
                       lj_launcher_name(d->env.launcher), d->env.rank, d->env.world_size, rank, size);
    d->env.rank = rank;
    d->env.world_size = size;
    MPI_Comm local;
    rc = MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    if (rc != MPI_SUCCESS) return mpi_fail("MPI_Comm_split_type", rc);
    MPI_Comm_rank(local, &d->env.local_rank);
    MPI_Comm_size(local, &d->env.local_world_size);
    MPI_Comm_free(&local);
    rc = MPI_Type_contiguous(2, MPI_BYTE, &m->bf16);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&m->bf16);
    if (rc != MPI_SUCCESS) return mpi_fail("MPI_Type_commit", rc);
    rc = MPI_Op_create(bf16_sum, 1, &m->bf16_sum);
    if (rc != MPI_SUCCESS) return mpi_fail("MPI_Op_create", rc);
    return LJ_OK;
}

lj_status lj_dist_mpi_check_config(lj_dist *d) {
    typedef struct {
        uint64_t hash;
        char summary[LJ_DIST_SUMMARY_BYTES];
    } entry;
    const int n = d->env.world_size;
    entry mine;
    memset(&mine, 0, sizeof mine);
    mine.hash = d->opt.config_hash;
    if (d->opt.config_summary) snprintf(mine.summary, sizeof mine.summary, "%s", d->opt.config_summary);
    entry *all = lj_calloc((size_t)n, sizeof *all);
    lj_bootstrap_op_begin(d->boot, "MPI_Allgather");
    lj_status s = mpi_done(d, "MPI_Allgather",
                           MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, d->mpi->comm));
    for (int r = 1; r < n && s == LJ_OK; r++)
        if (all[r].hash != all[0].hash)
            s = lj_dist_config_mismatch(r, all[0].hash, all[0].summary, all[r].hash, all[r].summary);
    free(all);
    return s;
}

lj_status lj_dist_mpi_bcast_bytes(lj_dist *d, void *buf, size_t bytes) {
    LJ_ASSERT(bytes <= INT_MAX);
    lj_bootstrap_op_begin(d->boot, "MPI_Bcast");
    return mpi_done(d, "MPI_Bcast", MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, d->mpi->comm));
}

lj_status lj_dist_mpi_all_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype) {
    const size_t es = lj_dtype_size(dtype);
    const int in_place = send == recv;
    for (int64_t off = 0; off < count; off += MPI_CHUNK) {
        const int n = (int)(count - off < MPI_CHUNK ? count - off : MPI_CHUNK);
        char *r = (char *)recv + off * es;
        const void *s = in_place ? MPI_IN_PLACE : (const char *)send + off * es;
        lj_bootstrap_op_begin(d->boot, "MPI_Allreduce");
        LJ_TRY(mpi_done(d, "MPI_Allreduce",
                        MPI_Allreduce(s, r, n, mpi_type(d->mpi, dtype), mpi_sum(d->mpi, dtype), d->mpi->comm)));
    }
    return LJ_OK;
}

lj_status lj_dist_mpi_all_reduce_max_u32(lj_dist *d, const void *send, void *recv, int64_t count) {
    if (count > INT_MAX)
        return lj_fail(LJ_ERR_UNSUPPORTED, "MPI_Allreduce (max): %lld elements exceed MPI's int count", (long long)count);
    lj_bootstrap_op_begin(d->boot, "MPI_Allreduce");
    return mpi_done(d, "MPI_Allreduce", MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count,
                                                       MPI_UINT32_T, MPI_MAX, d->mpi->comm));
}

lj_status lj_dist_mpi_reduce_scatter(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype) {
    if (count > INT_MAX)
        return lj_fail(LJ_ERR_UNSUPPORTED, "MPI_Reduce_scatter_block: a shard of %lld elements exceeds MPI's int count",
                       (long long)count);
    const size_t es = lj_dtype_size(dtype);
    const int in_place = (const char *)recv == (const char *)send + (size_t)d->env.rank * (size_t)count * es;
    lj_bootstrap_op_begin(d->boot, "MPI_Reduce_scatter_block");
    /* MPI's in-place form takes the whole input in recvbuf and leaves the result at its start. */
    LJ_TRY(mpi_done(d, "MPI_Reduce_scatter_block",
                    MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, in_place ? (void *)send : recv, (int)count,
                                             mpi_type(d->mpi, dtype), mpi_sum(d->mpi, dtype), d->mpi->comm)));
    if (in_place && d->env.rank != 0) memmove(recv, send, (size_t)count * es);
    return LJ_OK;
}

lj_status lj_dist_mpi_all_gather(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype) {
    if (count > INT_MAX)
        return lj_fail(LJ_ERR_UNSUPPORTED, "MPI_Allgather: a shard of %lld elements exceeds MPI's int count",
                       (long long)count);
    const size_t es = lj_dtype_size(dtype);
    const int in_place = (const char *)send == (const char *)recv + (size_t)d->env.rank * (size_t)count * es;
    const MPI_Datatype t = mpi_type(d->mpi, dtype);
    lj_bootstrap_op_begin(d->boot, "MPI_Allgather");
    return mpi_done(d, "MPI_Allgather",
                    in_place ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, (int)count, t, d->mpi->comm)
                             : MPI_Allgather(send, (int)count, t, recv, (int)count, t, d->mpi->comm));
}

lj_status lj_dist_mpi_broadcast(lj_dist *d, void *buf, int64_t count, lj_dtype dtype, int root) {
    const size_t es = lj_dtype_size(dtype);
    for (int64_t off = 0; off < count; off += MPI_CHUNK) {
        const int n = (int)(count - off < MPI_CHUNK ? count - off : MPI_CHUNK);
        lj_bootstrap_op_begin(d->boot, "MPI_Bcast");
        LJ_TRY(mpi_done(d, "MPI_Bcast", MPI_Bcast((char *)buf + off * es, n, mpi_type(d->mpi, dtype), root, d->mpi->comm)));
    }
    return LJ_OK;
}

lj_status lj_dist_mpi_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype, int root) {
    const size_t es = lj_dtype_size(dtype);
    const int in_place = send == recv && d->env.rank == root;
    for (int64_t off = 0; off < count; off += MPI_CHUNK) {
        const int n = (int)(count - off < MPI_CHUNK ? count - off : MPI_CHUNK);
        const void *s = in_place ? MPI_IN_PLACE : (const char *)send + off * es;
        void *r = recv ? (char *)recv + off * es : NULL;
        lj_bootstrap_op_begin(d->boot, "MPI_Reduce");
        LJ_TRY(mpi_done(d, "MPI_Reduce",
                        MPI_Reduce(s, r, n, mpi_type(d->mpi, dtype), mpi_sum(d->mpi, dtype), root, d->mpi->comm)));
    }
    return LJ_OK;
}

lj_status lj_dist_mpi_barrier(lj_dist *d) {
    lj_bootstrap_op_begin(d->boot, "MPI_Barrier");
    return mpi_done(d, "MPI_Barrier", MPI_Barrier(d->mpi->comm));
}

void lj_dist_mpi_abort(lj_dist *d, int exit_code) {
    if (d->mpi && d->mpi->comm != MPI_COMM_NULL) MPI_Abort(d->mpi->comm, exit_code);
}

void lj_dist_mpi_free(lj_dist *d) {
    lj_dist_mpi *m = d->mpi;
    if (!m) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        if (m->bf16_sum != MPI_OP_NULL) MPI_Op_free(&m->bf16_sum);
        if (m->bf16 != MPI_DATATYPE_NULL) MPI_Type_free(&m->bf16);
        if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
        if (m->owns_init) MPI_Finalize();
    }
    free(m);
    d->mpi = NULL;
}

#else /* no MPI in this build */

static lj_status no_mpi(void) {
    return lj_fail(LJ_ERR_UNSUPPORTED,
                   "this build has no MPI (CMake did not find an MPI library): install Open MPI "
                   "(libopenmpi-dev) and rebuild, or use torchrun-style variables with the NCCL backend");
}

lj_status lj_dist_mpi_init(lj_dist *d) { return no_mpi(); }
lj_status lj_dist_mpi_check_config(lj_dist *d) { return no_mpi(); }
lj_status lj_dist_mpi_bcast_bytes(lj_dist *d, void *buf, size_t bytes) { return no_mpi(); }
lj_status lj_dist_mpi_all_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype) {
    return no_mpi();
}
lj_status lj_dist_mpi_all_reduce_max_u32(lj_dist *d, const void *send, void *recv, int64_t count) { return no_mpi(); }
lj_status lj_dist_mpi_reduce_scatter(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype) {
    return no_mpi();
}
lj_status lj_dist_mpi_all_gather(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype) {
    return no_mpi();
}
lj_status lj_dist_mpi_broadcast(lj_dist *d, void *buf, int64_t count, lj_dtype dtype, int root) { return no_mpi(); }
lj_status lj_dist_mpi_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype, int root) {
    return no_mpi();
}
lj_status lj_dist_mpi_barrier(lj_dist *d) { return no_mpi(); }
void lj_dist_mpi_abort(lj_dist *d, int exit_code) {}
void lj_dist_mpi_free(lj_dist *d) {}

#endif

/* dist.c: lj_dist_init (choosing the backend and bootstrap), the dispatch of every collective
 * to the NCCL or MPI implementation, and the single-rank implementation (copies and no-ops). */
#include "parallel/dist_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *lj_dist_backend_name(lj_dist_backend backend) {
    switch (backend) {
    case LJ_DIST_SINGLE: return "single";
    case LJ_DIST_MPI: return "mpi";
    case LJ_DIST_NCCL: return "nccl";
    }
    return "?";
}

void lj_dist_options_default(lj_dist_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->backend = LJ_DIST_MPI;
    opt->timeout_sec = LJ_DIST_DEFAULT_TIMEOUT;
    opt->set_device = 1;
    const char *t = getenv("LJPERF_DIST_TIMEOUT");
    if (t && *t) {
        char *end;
        double v = strtod(t, &end);
        if (*end == '\0' && v > 0 && isfinite(v))
            opt->timeout_sec = v;
        else
            lj_log_warn("LJPERF_DIST_TIMEOUT='%s' is not a positive number of seconds; using %.0f s", t,
                        opt->timeout_sec);
    }
}

/* Undoes a (possibly partial) initialization; `clean` says goodbye, otherwise aborts. */
static void dist_release(lj_dist *d, int clean) {
    if (!d) return;
    if (d->nccl) {
        if (!clean) lj_dist_nccl_abort(d);
        lj_dist_nccl_free(d); /* destroys the communicator unless aborted, frees streams and events */
    }
    if (d->mpi) {
        if (d->boot) lj_bootstrap_op_begin(d->boot, "MPI_Finalize");
        lj_dist_mpi_free(d);
        if (d->boot) lj_bootstrap_op_end(d->boot);
    }
    lj_bootstrap_close(d->boot);
    free(d);
}

static lj_status init_nccl(lj_dist *d) {
    const lj_dist_env *env = &d->env;
    unsigned char id[LJ_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
#ifdef LJ_HAVE_MPI
    const int tcp = env->launcher == LJ_LAUNCHER_TORCHRUN;
#else
    const int tcp = env->launcher == LJ_LAUNCHER_TORCHRUN || env->master_addr[0];
#endif
    if (tcp) {
        if (env->local_rank < 0) d->env.local_rank = env->rank;
        LJ_TRY(lj_dist_nccl_set_device(d));
        if (env->rank == 0) LJ_TRY(lj_dist_nccl_unique_id(id));
        LJ_TRY(lj_bootstrap_tcp(&d->boot, env, d->opt.config_hash, d->opt.config_summary, d->opt.timeout_sec, id,
                                sizeof id));
    } else {
        LJ_TRY(lj_dist_mpi_init(d));
        LJ_TRY(lj_bootstrap_local(&d->boot, d->env.rank, d->env.world_size, d->opt.timeout_sec));
        LJ_TRY(lj_dist_mpi_check_config(d));
        LJ_TRY(lj_dist_nccl_set_device(d));
        if (d->env.rank == 0) LJ_TRY(lj_dist_nccl_unique_id(id));
        LJ_TRY(lj_dist_mpi_bcast_bytes(d, id, sizeof id));
    }
    lj_bootstrap_op_begin(d->boot, "ncclCommInitRank");
    lj_status s = lj_dist_nccl_init(d, id);
    lj_bootstrap_op_end(d->boot);
    return s;
}

lj_status lj_dist_init_env(lj_dist **out, const lj_dist_env *env, const lj_dist_options *opt) {
    *out = NULL;
    if (!(opt->timeout_sec > 0))
        return lj_fail(LJ_ERR_ARG, "distributed timeout must be positive, got %g s", opt->timeout_sec);
    lj_dist *d = lj_calloc(1, sizeof *d);
    d->env = *env;
    d->opt = *opt;
    lj_status s = LJ_OK;
    if (env->launcher == LJ_LAUNCHER_NONE || env->world_size == 1) {
        d->backend = LJ_DIST_SINGLE;
        d->env.rank = 0;
        d->env.world_size = 1;
        d->env.local_rank = 0;
        d->env.local_world_size = 1;
        if (opt->backend == LJ_DIST_NCCL) d->opt.device_buffers = 1;
    } else if (opt->backend == LJ_DIST_MPI) {
        d->backend = LJ_DIST_MPI;
        if (env->launcher == LJ_LAUNCHER_TORCHRUN) {
            s = lj_fail(LJ_ERR_UNSUPPORTED,
                        "the MPI (CPU) backend needs ranks started by mpirun or srun, but this process was "
                        "started with torchrun-style variables (RANK=%d, WORLD_SIZE=%d): run "
                        "`mpirun -np %d ljperf ...` instead",
                        env->rank, env->world_size, env->world_size);
        }
        if (s == LJ_OK) s = lj_dist_mpi_init(d);
        if (s == LJ_OK) s = lj_bootstrap_local(&d->boot, d->env.rank, d->env.world_size, d->opt.timeout_sec);
        if (s == LJ_OK) s = lj_dist_mpi_check_config(d);
    } else if (opt->backend == LJ_DIST_NCCL) {
        d->backend = LJ_DIST_NCCL;
        s = init_nccl(d);
    } else {
        s = lj_fail(LJ_ERR_ARG, "backend '%s' needs a world of one, but the launcher (%s) started %d ranks",
                    lj_dist_backend_name(opt->backend), lj_launcher_name(env->launcher), env->world_size);
    }
    if (s != LJ_OK) {
        dist_release(d, 0);
        return s;
    }
    *out = d;
    return LJ_OK;
}

lj_status lj_dist_init(lj_dist **out, const lj_dist_options *opt) {
    *out = NULL;
    lj_dist_env env;
    LJ_TRY(lj_dist_env_detect(&env));
    return lj_dist_init_env(out, &env, opt);
}

void lj_dist_free(lj_dist *d) {
    if (!d) return;
    if (d->nccl) {
        lj_status s = lj_dist_nccl_synchronize(d);
        if (s != LJ_OK) lj_log_warn("rank %d: %s", d->env.rank, lj_error_message());
    }
    dist_release(d, 1);
}

void lj_dist_abort(lj_dist *d, int exit_code, const char *message) {
    fflush(stdout);
    if (message) fprintf(stderr, "ljperf: rank %d: %s\n", d ? d->env.rank : 0, message);
    fflush(stderr);
    if (d && d->nccl) lj_dist_nccl_abort(d);
    if (d && d->mpi) lj_dist_mpi_abort(d, exit_code);
    _exit(exit_code);
}

lj_dist_backend lj_dist_get_backend(const lj_dist *d) { return d->backend; }
int lj_dist_rank(const lj_dist *d) { return d->env.rank; }
int lj_dist_world_size(const lj_dist *d) { return d->env.world_size; }
int lj_dist_local_rank(const lj_dist *d) { return d->env.local_rank; }
int lj_dist_local_world_size(const lj_dist *d) { return d->env.local_world_size; }
/* ---- dispatch ------------------------------------------------------------------- */

static void check_sum_dtype(lj_dtype dtype) {
    LJ_ASSERT(dtype == LJ_DTYPE_F32 || dtype == LJ_DTYPE_BF16, "sums take F32 or BF16, got %s",
              lj_dtype_name(dtype));
}

void lj_dist_set_ranges(lj_dist *d, void (*push)(const char *name), void (*pop)(void)) {
    d->range_push = push && pop ? push : NULL;
    d->range_pop = push && pop ? pop : NULL;
}

/* The NVTX range around an NCCL call (lj_dist_set_ranges): push, then pop with the call's status. */
static void range_push(const lj_dist *d, const char *name) {
    if (d->range_push) d->range_push(name);
}
static lj_status range_pop(const lj_dist *d, lj_status s) {
    if (d->range_pop) d->range_pop();
    return s;
}

/* Single backend: dst = src (count elements), host or device. */
static lj_status single_copy(lj_dist *d, void *dst, const void *src, int64_t count, lj_dtype dtype, void *stream) {
    if (dst == src || count == 0) return LJ_OK;
    const size_t bytes = (size_t)count * lj_dtype_size(dtype);
    if (d->opt.device_buffers) return lj_dist_cuda_copy(dst, src, bytes, stream);
    memmove(dst, src, bytes);
    return LJ_OK;
}

lj_status lj_dist_all_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype,
                             void *stream) {
    LJ_ASSERT(d && count >= 0);
    check_sum_dtype(dtype);
    switch (d->backend) {
    case LJ_DIST_SINGLE: return single_copy(d, recv, send, count, dtype, stream);
    case LJ_DIST_MPI: return lj_dist_mpi_all_reduce(d, send, recv, count, dtype);
    case LJ_DIST_NCCL:
        range_push(d, "nccl:all_reduce");
        return range_pop(d, lj_dist_nccl_all_reduce(d, send, recv, count, dtype, stream));
    }
    return LJ_ERR_ARG;
}

lj_status lj_dist_all_reduce_max_u32(lj_dist *d, const void *send, void *recv, int64_t count, void *stream) {
    LJ_ASSERT(d && count >= 0);
    switch (d->backend) {
    case LJ_DIST_SINGLE: return single_copy(d, recv, send, count, LJ_DTYPE_F32, stream); /* 4-byte elements */
    case LJ_DIST_MPI: return lj_dist_mpi_all_reduce_max_u32(d, send, recv, count);
    case LJ_DIST_NCCL:
        range_push(d, "nccl:all_reduce_max");
        return range_pop(d, lj_dist_nccl_all_reduce_max_u32(d, send, recv, count, stream));
    }
    return LJ_ERR_ARG;
}

lj_status lj_dist_reduce_scatter(lj_dist *d, const void *send, void *recv, int64_t recv_count, lj_dtype dtype,
                                 void *stream) {
    LJ_ASSERT(d && recv_count >= 0);
    check_sum_dtype(dtype);
    switch (d->backend) {
    case LJ_DIST_SINGLE: return single_copy(d, recv, send, recv_count, dtype, stream);
    case LJ_DIST_MPI: return lj_dist_mpi_reduce_scatter(d, send, recv, recv_count, dtype);
    case LJ_DIST_NCCL:
        range_push(d, "nccl:reduce_scatter");
        return range_pop(d, lj_dist_nccl_reduce_scatter(d, send, recv, recv_count, dtype, stream));
    }
    return LJ_ERR_ARG;
}

lj_status lj_dist_all_gather(lj_dist *d, const void *send, void *recv, int64_t send_count, lj_dtype dtype,
                             void *stream) {
    LJ_ASSERT(d && send_count >= 0);
    switch (d->backend) {
    case LJ_DIST_SINGLE: return single_copy(d, recv, send, send_count, dtype, stream);
    case LJ_DIST_MPI: return lj_dist_mpi_all_gather(d, send, recv, send_count, dtype);
    case LJ_DIST_NCCL:
        range_push(d, "nccl:all_gather");
        return range_pop(d, lj_dist_nccl_all_gather(d, send, recv, send_count, dtype, stream));
    }
    return LJ_ERR_ARG;
}

lj_status lj_dist_broadcast(lj_dist *d, void *buf, int64_t count, lj_dtype dtype, int root, void *stream) {
    LJ_ASSERT(d && count >= 0);
    LJ_ASSERT(root >= 0 && root < d->env.world_size, "root %d of %d ranks", root, d->env.world_size);
    switch (d->backend) {
    case LJ_DIST_SINGLE: return LJ_OK;
    case LJ_DIST_MPI: return lj_dist_mpi_broadcast(d, buf, count, dtype, root);
    case LJ_DIST_NCCL:
        range_push(d, "nccl:broadcast");
        return range_pop(d, lj_dist_nccl_broadcast(d, buf, count, dtype, root, stream));
    }
    return LJ_ERR_ARG;
}

lj_status lj_dist_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype, int root,
                         void *stream) {
    LJ_ASSERT(d && count >= 0);
    LJ_ASSERT(root >= 0 && root < d->env.world_size, "root %d of %d ranks", root, d->env.world_size);
    check_sum_dtype(dtype);
    switch (d->backend) {
    case LJ_DIST_SINGLE: return single_copy(d, recv, send, count, dtype, stream);
    case LJ_DIST_MPI: return lj_dist_mpi_reduce(d, send, recv, count, dtype, root);
    case LJ_DIST_NCCL:
        range_push(d, "nccl:reduce");
        return range_pop(d, lj_dist_nccl_reduce(d, send, recv, count, dtype, root, stream));
    }
    return LJ_ERR_ARG;
}

lj_status lj_dist_barrier(lj_dist *d) {
    LJ_ASSERT(d);
    switch (d->backend) {
    case LJ_DIST_SINGLE: return LJ_OK;
    case LJ_DIST_MPI: return lj_dist_mpi_barrier(d);
    case LJ_DIST_NCCL: return lj_dist_nccl_barrier(d);
    }
    return LJ_ERR_ARG;
}

lj_status lj_dist_group_start(lj_dist *d) { return d->backend == LJ_DIST_NCCL ? lj_dist_nccl_group(d, 1) : LJ_OK; }
lj_status lj_dist_group_end(lj_dist *d) { return d->backend == LJ_DIST_NCCL ? lj_dist_nccl_group(d, 0) : LJ_OK; }

lj_status lj_dist_mark(lj_dist *d, lj_dist_ticket *ticket) {
    if (d->backend == LJ_DIST_NCCL) return lj_dist_nccl_mark(d, ticket);
    *ticket = ++d->marks;
    return LJ_OK;
}

lj_status lj_dist_wait(lj_dist *d, lj_dist_ticket ticket, void *stream) {
    if (d->backend == LJ_DIST_NCCL) return lj_dist_nccl_wait(d, ticket, stream);
    return LJ_OK;
}

lj_status lj_dist_synchronize(lj_dist *d) {
    if (d->backend == LJ_DIST_NCCL) return lj_dist_nccl_synchronize(d);
    return LJ_OK;
}

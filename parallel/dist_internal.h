/* dist_internal.h: the lj_dist object shared by dist.c (dispatch and the single backend),
 * dist_mpi.c, dist_nccl.c and bootstrap.c. Not part of the public interface (dist.h). */
#ifndef LJ_DIST_INTERNAL_H
#define LJ_DIST_INTERNAL_H

#include "parallel/dist.h"

typedef struct lj_dist_mpi lj_dist_mpi;   /* dist_mpi.c */
typedef struct lj_dist_nccl lj_dist_nccl; /* dist_nccl.c */

struct lj_dist {
    lj_dist_backend backend;
    lj_dist_env env;           /* as detected; rank/world/local fields are final */
    lj_dist_options opt;
    lj_dist_mpi *mpi;          /* MPI state (MPI backend, or NCCL bootstrapped by MPI) */
    lj_dist_nccl *nccl;        /* NCCL backend */
    lj_bootstrap *boot;        /* watchdog (and TCP connections), NULL for single */
    uint64_t marks;            /* host backends: tickets handed out */
    void (*range_push)(const char *name); /* lj_dist_set_ranges: NVTX ranges around NCCL calls, or NULL */
    void (*range_pop)(void);
};

/* Bytes of the configuration summary exchanged at bootstrap (with its NUL). */
#define LJ_DIST_SUMMARY_BYTES 201

/* The error of ranks that disagree (bootstrap.c): LJ_ERR_FORMAT with
 * "rank R's run configuration differs from rank 0's: rank 0: <s0>; rank R: <sr> (config
 * hashes 0x... and 0x...)". */
lj_status lj_dist_config_mismatch(int rank, uint64_t hash0, const char *summary0, uint64_t hash_r,
                                  const char *summary_r);

/* ---- dist_mpi.c (stubs returning LJ_ERR_UNSUPPORTED without LJ_HAVE_MPI) ---- */

/* MPI_Init_thread when needed, a private duplicate of MPI_COMM_WORLD with errors returned,
 * ranks and local ranks into d->env. */
lj_status lj_dist_mpi_init(lj_dist *d);
/* Every rank compares its config hash with rank 0's (MPI_Allgather). */
lj_status lj_dist_mpi_check_config(lj_dist *d);
/* MPI_Bcast of raw bytes from rank 0 (the NCCL unique id). */
lj_status lj_dist_mpi_bcast_bytes(lj_dist *d, void *buf, size_t bytes);
lj_status lj_dist_mpi_all_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype);
lj_status lj_dist_mpi_all_reduce_max_u32(lj_dist *d, const void *send, void *recv, int64_t count);
lj_status lj_dist_mpi_reduce_scatter(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype);
lj_status lj_dist_mpi_all_gather(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype);
lj_status lj_dist_mpi_broadcast(lj_dist *d, void *buf, int64_t count, lj_dtype dtype, int root);
lj_status lj_dist_mpi_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype, int root);
lj_status lj_dist_mpi_barrier(lj_dist *d);
void lj_dist_mpi_abort(lj_dist *d, int exit_code);
void lj_dist_mpi_free(lj_dist *d);

/* ---- dist_nccl.c (stubs returning LJ_ERR_UNSUPPORTED without LJ_HAVE_NCCL) ---- */

#define LJ_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */

/* cudaSetDevice(local_rank % device count) when opt.set_device. */
lj_status lj_dist_nccl_set_device(lj_dist *d);
/* ncclGetUniqueId (rank 0 only). */
lj_status lj_dist_nccl_unique_id(unsigned char id[LJ_NCCL_ID_BYTES]);
/* Communicator, communication stream and events. */
lj_status lj_dist_nccl_init(lj_dist *d, const unsigned char id[LJ_NCCL_ID_BYTES]);
lj_status lj_dist_nccl_all_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype, void *stream);
lj_status lj_dist_nccl_all_reduce_max_u32(lj_dist *d, const void *send, void *recv, int64_t count, void *stream);
lj_status lj_dist_nccl_reduce_scatter(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype,
                                      void *stream);
lj_status lj_dist_nccl_all_gather(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype,
                                  void *stream);
lj_status lj_dist_nccl_broadcast(lj_dist *d, void *buf, int64_t count, lj_dtype dtype, int root, void *stream);
lj_status lj_dist_nccl_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype, int root,
                              void *stream);
lj_status lj_dist_nccl_group(lj_dist *d, int start);
/* Drains the queue, then a 1-element all-reduce on a private device word, synchronized. */
lj_status lj_dist_nccl_barrier(lj_dist *d);
lj_status lj_dist_nccl_mark(lj_dist *d, lj_dist_ticket *ticket);
lj_status lj_dist_nccl_wait(lj_dist *d, lj_dist_ticket ticket, void *stream);
lj_status lj_dist_nccl_synchronize(lj_dist *d);
void lj_dist_nccl_abort(lj_dist *d);
void lj_dist_nccl_free(lj_dist *d);

/* Single backend on device buffers: cudaMemcpyAsync(dst, src, bytes, D2D, stream).
 * LJ_ERR_UNSUPPORTED without LJ_HAVE_CUDA. */
lj_status lj_dist_cuda_copy(void *dst, const void *src, size_t bytes, void *stream);

#endif

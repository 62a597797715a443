/* dist.h: the collectives interface of data-parallel training (all-reduce, reduce-scatter,
 * all-gather, broadcast, reduce, barrier) with its three implementations, rank discovery and
 * bootstrap, liveness, and the --nproc-per-node launcher.
 *
 * Implementations (lj_dist_backend):
 *   LJ_DIST_NCCL    GPU ranks: device buffers; collectives run on the communicator's own CUDA
 *                   stream, ordered against the caller's compute stream with events (below).
 *                   NCCL's environment variables (NCCL_SOCKET_IFNAME, NCCL_DEBUG, NCCL_IB_*, ...)
 *                   are passed through untouched: ljperf never sets them.
 *   LJ_DIST_MPI     CPU ranks: host buffers, blocking MPI calls on a duplicate of MPI_COMM_WORLD.
 *   LJ_DIST_SINGLE  a world of one: copies (host memcpy, or cudaMemcpyAsync on the stream for
 *                   device buffers) and no-ops, without MPI or NCCL. Asking for NCCL or MPI in
 *                   a world of one gives this.
 *
 * How ranks are found (lj_dist_env_detect), first match wins:
 *   1. torchrun-style: RANK, WORLD_SIZE (+ LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
 *      MASTER_PORT), as set by torchrun, by `ljperf ... --nproc-per-node N` (lj_launch) or by hand.
 *      Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) MASTER_PORT is taken by
 *      torchrun's own TCP store, so the bootstrap listens on the next port (bootstrap_port).
 *   2. mpirun / mpiexec: OMPI_COMM_WORLD_RANK/SIZE (Open MPI), PMI_RANK/PMI_SIZE (MPICH, Intel
 *      MPI), PMIX_RANK (PMIx launchers).
 *   3. srun: SLURM_PROCID with SLURM_STEP_NUM_TASKS (set by srun, not by sbatch), SLURM_LOCALID.
 *   4. none of these: rank 0 of a world of one.
 *
 * Bootstrap (lj_dist_init):
 *   - MPI backend: MPI_Init_thread (unless already initialized), ranks from MPI_COMM_WORLD,
 *     local rank from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). Needs an MPI launcher.
 *   - NCCL backend under mpirun/srun: MPI as above finds the ranks and broadcasts the NCCL
 *     unique id (MPI_Bcast).
 *   - NCCL backend under torchrun-style variables: rank 0 listens on MASTER_PORT (all
 *     interfaces, TCP); every other rank connects to MASTER_ADDR:MASTER_PORT, sends a hello
 *     (rank, world size, config hash and summary) and receives rank 0's NCCL unique id. Rank 0
 *     waits up to the timeout for all ranks; the others retry connecting until the timeout.
 *     Errors name the address, the port and the missing ranks.
 *   - Every backend with more than one rank checks that all ranks carry the same run
 *     configuration hash (lj_dist_options.config_hash): if not, every rank fails with
 *     "rank R's run configuration differs from rank 0's: rank 0: <summary>; rank R: <summary>".
 *
 * Liveness (what happens when a rank dies or hangs), with T = lj_dist_options.timeout_sec
 * (default 600 s, or LJPERF_DIST_TIMEOUT seconds from the environment):
 *   - TCP bootstrap (torchrun-style): the rendezvous connections stay open after bootstrap and
 *     a watchdog thread on every rank exchanges heartbeats over them (every min(T/5, 5 s)).
 *     A rank whose connection closes without a clean shutdown (it exited or was killed), or
 *     that sends no heartbeat for T seconds (hung, stopped, or its host is unreachable), is
 *     reported: rank 0 tells the others, and every surviving rank prints one line
 *     "ljperf: rank K: rank R exited ...; stopping" and exits with LJ_DIST_EXIT_PEER_LOST.
 *     A dead rank is noticed at once; a hung one within T.
 *   - MPI (both backends under mpirun/srun): mpirun and srun stop the whole job when one rank
 *     exits abnormally; and every blocking MPI collective runs under a deadline: if it has not
 *     completed after T seconds, the watchdog prints "<call> has not completed after T s" and
 *     exits with LJ_DIST_EXIT_PEER_LOST (mpirun then stops the others).
 *   - NCCL: lj_dist_synchronize (and lj_dist_barrier, lj_dist_free) polls the communication
 *     stream and ncclCommGetAsyncError; after T seconds it calls ncclCommAbort and returns
 *     LJ_ERR_DEVICE naming the timeout. ncclCommInitRank runs under the watchdog's deadline.
 *     The rank's own bootstrap watchdog (TCP or MPI, above) covers the rest.
 *
 * Collective ordering on devices (NCCL). Every collective call
 *   1. records an event on `stream` (the caller's compute stream, a cudaStream_t passed as
 *      void*, NULL meaning the legacy default stream) and makes the communication stream wait
 *      for it, so the collective sees everything queued on `stream` before the call;
 *   2. queues the collective on the communication stream and returns without waiting.
 * The result may be used on a stream only after lj_dist_wait(d, ticket, stream) with a ticket
 * from lj_dist_mark taken after the collective (or LJ_DIST_ALL); a buffer the collective reads
 * must not be overwritten before that either. Host-buffer backends (MPI, single) complete every
 * call before returning, so wait and mark cost nothing there; code written for NCCL runs on
 * them unchanged. (The single backend on device buffers copies on `stream` itself.)
 *
 * Uneven sizes: reduce-scatter and all-gather use the padded layout of ZeRO implementations
 * (DeepSpeed, FSDP): a flat buffer of W * shard elements, rank r owning [r*shard, (r+1)*shard).
 * The caller pads the flat buffer to a multiple of the world size (parallel/zero.h computes the
 * padding and which real elements each rank holds); padding elements take part in the
 * collective like any other and carry no meaning.
 *
 * Dtypes: sums (all-reduce, reduce-scatter, reduce) take LJ_DTYPE_F32 or LJ_DTYPE_BF16 (each
 * addition of two bf16 values is done in fp32 and rounded to bf16 with round-to-nearest-even);
 * all-gather and broadcast take any dtype. Counts are in elements.
 * Errors name the call: "ncclAllReduce failed: unhandled system error (...)",
 * "MPI_Allreduce failed: MPI_ERR_TRUNCATE: message truncated".
 */
#ifndef LJ_DIST_H
#define LJ_DIST_H

#include "base/base.h"

typedef enum { LJ_DIST_SINGLE = 0, LJ_DIST_MPI, LJ_DIST_NCCL } lj_dist_backend;

/* "single", "mpi", "nccl". */
const char *lj_dist_backend_name(lj_dist_backend backend);

/* Exit status of a rank stopped because another rank died or hung. */
#define LJ_DIST_EXIT_PEER_LOST 3

/* Default liveness / bootstrap / collective timeout, seconds (PyTorch's NCCL default too). */
#define LJ_DIST_DEFAULT_TIMEOUT 600.0

/* ---- rank discovery ------------------------------------------------------------- */

typedef enum {
    LJ_LAUNCHER_NONE = 0, /* a plain process: rank 0 of 1 */
    LJ_LAUNCHER_TORCHRUN, /* RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT */
    LJ_LAUNCHER_MPI,      /* mpirun / mpiexec */
    LJ_LAUNCHER_SLURM,    /* srun */
} lj_launcher;

/* "none", "torchrun", "mpirun", "srun". */
const char *lj_launcher_name(lj_launcher launcher);

typedef struct {
    lj_launcher launcher;
    int rank;             /* this process's rank, 0..world_size-1 */
    int world_size;       /* 0 when the launcher does not say (PMIx): MPI_Init tells */
    int local_rank;       /* rank on this node; -1 if the launcher does not say */
    int local_world_size; /* ranks on this node; -1 if the launcher does not say */
    char master_addr[256];/* MASTER_ADDR ("" if unset) */
    int master_port;      /* MASTER_PORT (0 if unset) */
    int bootstrap_port;   /* the port rank 0 listens on for the TCP bootstrap: MASTER_PORT, or under
                             torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True: torchrun's own
                             store already listens on MASTER_PORT) LJPERF_BOOTSTRAP_PORT if set, else
                             MASTER_PORT + 1 (MASTER_PORT - 1 for 65535); 0 if unset */
    char bootstrap_port_source[96]; /* where bootstrap_port came from, for messages */
} lj_dist_env;

/* Reads the launcher's environment variables (order and names: top of this file).
 * Errors: LJ_ERR_ARG naming the variable ("environment variable RANK='x' is not a
 * non-negative integer", "the launcher (torchrun) gave rank 3, which is not below its world
 * size 2", "WORLD_SIZE=2 is set but MASTER_ADDR is not", "MASTER_PORT=70000 is not a TCP port"). */
lj_status lj_dist_env_detect(lj_dist_env *env);

/* ---- the communicator ----------------------------------------------------------- */

typedef struct {
    lj_dist_backend backend;    /* LJ_DIST_MPI (CPU) or LJ_DIST_NCCL (GPU) */
    uint64_t config_hash;       /* hash of everything that must agree across ranks (model,
                                   plan, batch, seeds, ...); compared at bootstrap */
    const char *config_summary; /* short human-readable form of what the hash covers, shown
                                   when ranks disagree ("llama3-8b seq 4096 mbs 2 zero 3");
                                   at most 200 bytes are exchanged; may be NULL */
    double timeout_sec;         /* bootstrap, liveness and collective timeout, seconds */
    int device_buffers;         /* single backend: buffers are device memory (implied by NCCL) */
    int set_device;             /* NCCL: cudaSetDevice(local_rank % device count) first (default 1);
                                   call lj_dist_init before the CUDA backend allocates anything */
} lj_dist_options;

/* Defaults: backend MPI, hash 0, no summary, timeout LJPERF_DIST_TIMEOUT or 600 s, set_device 1. */
void lj_dist_options_default(lj_dist_options *opt);

typedef struct lj_dist lj_dist;

/* Finds the ranks (lj_dist_env_detect), bootstraps the backend and checks the configuration
 * hash (top of this file). *out is NULL on error.
 * Errors: LJ_ERR_ARG (bad environment), LJ_ERR_UNSUPPORTED (backend not built in, or MPI
 * backend without an MPI launcher), LJ_ERR_DEVICE (a failed MPI / NCCL / CUDA / socket call,
 * named), LJ_ERR_FORMAT (ranks disagree on the configuration or the world size). */
lj_status lj_dist_init(lj_dist **out, const lj_dist_options *opt);

/* The same with an explicit environment (tests, or a caller that found the ranks itself). */
lj_status lj_dist_init_env(lj_dist **out, const lj_dist_env *env, const lj_dist_options *opt);

/* Clean shutdown: waits for queued collectives, closes the communicator, says goodbye to the
 * watchdogs of the other ranks (rank 0 waits up to the timeout for the others to finish too),
 * and finalizes MPI if lj_dist_init initialized it. NULL is a no-op. */
void lj_dist_free(lj_dist *d);

/* Error exit of a multi-rank run: prints `message` (if not NULL) as
 * "ljperf: rank R: <message>", aborts the communicator (MPI_Abort / ncclCommAbort) so that the
 * other ranks stop too, and exits the process with `exit_code`. */
void lj_dist_abort(lj_dist *d, int exit_code, const char *message) __attribute__((noreturn));

lj_dist_backend lj_dist_get_backend(const lj_dist *d);
int lj_dist_rank(const lj_dist *d);
int lj_dist_world_size(const lj_dist *d);
int lj_dist_local_rank(const lj_dist *d);
int lj_dist_local_world_size(const lj_dist *d);
/* ---- collectives (ordering and padding rules: top of this file) ------------------- */

/* recv[i] = sum over ranks of send[i], i < count, on every rank. In place when send == recv.
 * dtype: F32 or BF16. */
lj_status lj_dist_all_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype,
                             void *stream);

/* recv[i] = the largest send[i] over ranks, as unsigned 32-bit integers (count elements, in place
 * when send == recv): for non-negative floats by their bits, whose unsigned order is the order of
 * the values with NaN above +inf (the FP8 recipe's amaxes, base/fp8.h lj_fp8_abs_bits). */
lj_status lj_dist_all_reduce_max_u32(lj_dist *d, const void *send, void *recv, int64_t count, void *stream);

/* send: [W * recv_count], recv: [recv_count]; rank r receives
 * recv[i] = sum over ranks of send[r * recv_count + i]. In place when
 * recv == (char *)send + r * recv_count * elem_size: then only this rank's slice of send is
 * defined afterwards. dtype: F32 or BF16. */
lj_status lj_dist_reduce_scatter(lj_dist *d, const void *send, void *recv, int64_t recv_count,
                                 lj_dtype dtype, void *stream);

/* send: [send_count], recv: [W * send_count]; recv[r * send_count + i] = rank r's send[i].
 * In place when send == (char *)recv + rank * send_count * elem_size. Any dtype. */
lj_status lj_dist_all_gather(lj_dist *d, const void *send, void *recv, int64_t send_count, lj_dtype dtype,
                             void *stream);

/* buf: [count] on every rank; root's values are copied to all. Any dtype. */
lj_status lj_dist_broadcast(lj_dist *d, void *buf, int64_t count, lj_dtype dtype, int root, void *stream);

/* Sum of send over ranks into root's recv ([count]; recv is ignored on other ranks; in place
 * when send == recv). dtype: F32 or BF16. The building block of reduce-to-owner bucketing. */
lj_status lj_dist_reduce(lj_dist *d, const void *send, void *recv, int64_t count, lj_dtype dtype, int root,
                         void *stream);

/* Blocks until every rank has called it (host-side; on NCCL, after draining the queue). */
lj_status lj_dist_barrier(lj_dist *d);

/* NCCL group: the collectives between start and end are launched together (ncclGroupStart /
 * ncclGroupEnd), e.g. one reduce per owner of a bucket. No-ops elsewhere. Do not call
 * lj_dist_mark inside a group. */
lj_status lj_dist_group_start(lj_dist *d);
lj_status lj_dist_group_end(lj_dist *d);

/* Profiling: with push and pop set (the op table's range_push / range_pop, ops/ops.h), every NCCL
 * collective's call is one NVTX range named as PyTorch's profiler names c10d's: "nccl:all_reduce",
 * "nccl:all_reduce_max" (the FP8 amaxes), "nccl:reduce_scatter", "nccl:all_gather",
 * "nccl:broadcast", "nccl:reduce". The range covers the call, which queues the collective on the
 * communication stream (the collective's kernel runs there after it). NULL, NULL: none (the
 * default). Other backends push no ranges. */
void lj_dist_set_ranges(lj_dist *d, void (*push)(const char *name), void (*pop)(void));

/* ---- ordering against the compute stream ------------------------------------------ */

typedef uint64_t lj_dist_ticket;
#define LJ_DIST_ALL UINT64_MAX /* a ticket meaning "everything queued so far" */

/* A ticket for every collective queued so far (NCCL: an event recorded on the communication
 * stream; cheap). Errors: LJ_ERR_DEVICE naming cudaEventRecord. */
lj_status lj_dist_mark(lj_dist *d, lj_dist_ticket *ticket);

/* Makes `stream` wait (on the device, without blocking the host) until the collectives
 * covered by `ticket` are done. A ticket from long ago (more than 64 marks back) waits for a
 * later mark instead: correct, only later than necessary. */
lj_status lj_dist_wait(lj_dist *d, lj_dist_ticket ticket, void *stream);

/* Blocks the host until every queued collective is done, at most timeout_sec (NCCL: then
 * ncclCommAbort and LJ_ERR_DEVICE). Also reports NCCL's asynchronous errors. */
lj_status lj_dist_synchronize(lj_dist *d);

/* ---- bootstrap and liveness building blocks (parallel/bootstrap.c) --------------------- */

typedef struct lj_bootstrap lj_bootstrap;

/* The torchrun-style rendezvous over TCP (top of this file) of env->world_size processes:
 * rank 0 listens on env->bootstrap_port, the others connect to env->master_addr there. All ranks
 * compare `config_hash`; rank 0's `blob` ([blob_size] bytes, e.g. an NCCL unique id) is
 * copied into every other rank's `blob`. On success the connections stay open and a watchdog
 * thread enforces liveness (top of this file) until lj_bootstrap_close.
 * Errors: LJ_ERR_DEVICE (socket calls, timeouts: named, with address and port),
 * LJ_ERR_FORMAT (configuration or world size differs), all ranks failing with the same message
 * where they can be reached. */
lj_status lj_bootstrap_tcp(lj_bootstrap **out, const lj_dist_env *env, uint64_t config_hash,
                           const char *config_summary, double timeout_sec, void *blob, size_t blob_size);

/* A watchdog without sockets (MPI launches): only the collective deadline below. */
lj_status lj_bootstrap_local(lj_bootstrap **out, int rank, int world_size, double timeout_sec);

/* Marks a blocking call in progress: if lj_bootstrap_op_end does not follow within the
 * timeout, the watchdog prints "ljperf: rank R: <what> has not completed after T s: another
 * rank has likely died or hung; stopping" and exits with LJ_DIST_EXIT_PEER_LOST.
 * `what` must outlive the call (a string literal). */
void lj_bootstrap_op_begin(lj_bootstrap *b, const char *what);
void lj_bootstrap_op_end(lj_bootstrap *b);

/* Stops the watchdog and closes the connections with a clean goodbye (so that the others do
 * not report this rank as dead). Rank 0 first waits, at most the timeout, until every other
 * rank has said goodbye or gone. NULL is a no-op. */
void lj_bootstrap_close(lj_bootstrap *b);

/* ---- launcher (parallel/launch.c) --------------------------------------------------------- */

typedef struct {
    int nproc_per_node;     /* workers to start, >= 1 */
    int mpirun;             /* 1: start them as `mpirun -np N <exe> <argv[1..]>` (CPU ranks: the MPI
                               backend needs an MPI launcher); 0: torchrun-style variables */
    double kill_grace_sec;  /* after the first worker fails: time the others get to stop on
                               their own (their watchdogs notice), then SIGTERM, then after the
                               same again SIGKILL. Default 30. */
    const char *exe;        /* program to run; default this one (/proc/self/exe) */
    int quiet;              /* no launcher messages (tests) */
    const char *master_addr; /* torchrun-style workers' MASTER_ADDR (torchrun's --master-addr); NULL: 127.0.0.1 */
    int master_port;        /* their MASTER_PORT (torchrun's --master-port); 0: a free port */
} lj_launch_options;

void lj_launch_options_default(lj_launch_options *opt);

/* `ljperf <command> ... --nproc-per-node N`, like torchrun --standalone: starts N local copies
 * of this program as `ljperf <command> <argv without the --nproc-per-node flag>` and waits.
 *   backend LJ_DIST_NCCL (GPU): each worker gets RANK = LOCAL_RANK = i, WORLD_SIZE =
 *     LOCAL_WORLD_SIZE = N, MASTER_ADDR = 127.0.0.1 and MASTER_PORT = a free port.
 *   backend LJ_DIST_MPI (CPU): the workers are started by `mpirun -np N --bind-to none`
 *     (plus --oversubscribe when N exceeds the cores, --allow-run-as-root as root), which
 *     must be on PATH.
 * OMP_NUM_THREADS, unless set, becomes max(1, cores / N) in the workers (torchrun does the
 * same with 1). SIGINT, SIGTERM and SIGHUP are forwarded to the workers (or to mpirun, which
 * forwards them). argc/argv are the arguments after the command, as lj_cli_train receives
 * them. Returns the exit status for the launcher: the first non-zero status of a worker (128 +
 * signal number for a worker killed by a signal), 0 if all succeeded, 1 if the workers could
 * not be started, 2 for a bad N or a launcher inside a launched rank (the message is printed).
 * A worker failure stops the rest after kill_grace_sec (above). Call it before starting
 * threads (it blocks signals while it waits). */
int lj_launch(int nproc_per_node, lj_dist_backend backend, const char *command, int argc, char **argv);

/* lj_launch with the rendezvous address and port of torchrun's --master-addr and --master-port
 * (NULL and 0: 127.0.0.1 and a free port); they matter to NCCL workers only (mpirun finds its own). */
int lj_launch_at(int nproc_per_node, lj_dist_backend backend, const char *master_addr, int master_port,
                 const char *command, int argc, char **argv);

/* The same with options; child_argv is the full argument vector of each worker (argv[0]
 * included, NULL-terminated), run as options->exe. */
int lj_launch_run(const lj_launch_options *opt, char *const child_argv[]);

/* Removes "--nproc-per-node N", "--nproc-per-node=N" (and torchrun's spelling
 * --nproc_per_node) from argv in place; returns the new argc. */
int lj_launch_strip_flag(int argc, char **argv);

/* A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close).
 * Errors: LJ_ERR_DEVICE naming the socket call. */
lj_status lj_launch_free_port(int *port);

#endif

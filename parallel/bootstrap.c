/* bootstrap.c: rank discovery from the launcher's environment, the torchrun-style TCP
 * rendezvous (rank 0 checks every rank's configuration hash and hands out the NCCL unique id),
 * and the liveness watchdog: heartbeats over the rendezvous connections and deadlines on
 * blocking calls (dist.h, "Liveness").
 *
 * Wire format (all integers little-endian):
 *   hello  (rank k -> rank 0): u32 magic "LJB1", u32 version, u32 rank, u32 world size,
 *          u64 config hash, u32 blob size, char summary[LJ_DIST_SUMMARY_BYTES]
 *   reply  (rank 0 -> rank k): u32 magic, u32 status (an lj_status, 0 = ok),
 *          char message[512], then blob size bytes of blob when the status is 0
 *   frames (both ways, after bootstrap): u8 type ('H' heartbeat, 'B' goodbye, 'L' rank lost),
 *          u8 reason (for 'L'), u16 0, u32 rank (for 'L')
 */
#define _GNU_SOURCE /* accept4, pipe2 */
#include "parallel/dist_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BOOT_MAGIC 0x31424a4cu /* "LJB1" as little-endian bytes */
#define BOOT_VERSION 1u
#define HELLO_BYTES (4 + 4 + 4 + 4 + 8 + 4 + LJ_DIST_SUMMARY_BYTES)
#define REPLY_MSG_BYTES 512
#define REPLY_BYTES (4 + 4 + REPLY_MSG_BYTES)
#define FRAME_BYTES 8

enum { REASON_EXITED = 1, REASON_SILENT = 2 };

const char *lj_launcher_name(lj_launcher launcher) {
    switch (launcher) {
    case LJ_LAUNCHER_NONE: return "none";
    case LJ_LAUNCHER_TORCHRUN: return "torchrun";
    case LJ_LAUNCHER_MPI: return "mpirun";
    case LJ_LAUNCHER_SLURM: return "srun";
    }
    return "?";
}

/* ---- rank discovery --------------------------------------------------------------- */

/* Reads a non-negative integer variable: 0 absent, 1 read, -1 malformed (error set). */
static int getenv_int(const char *name, int *value) {
    const char *t = getenv(name);
    if (!t || !*t) return 0;
    char *end;
    errno = 0;
    long v = strtol(t, &end, 10);
    if (*end || errno || v < 0 || v > INT_MAX) {
        lj_fail(LJ_ERR_ARG, "environment variable %s='%s' is not a non-negative integer", name, t);
        return -1;
    }
    *value = (int)v;
    return 1;
}

static lj_status read_master(lj_dist_env *env) {
    const char *addr = getenv("MASTER_ADDR");
    if (addr && *addr) {
        if (strlen(addr) >= sizeof env->master_addr)
            return lj_fail(LJ_ERR_ARG, "environment variable MASTER_ADDR is longer than %zu bytes",
                           sizeof env->master_addr - 1);
        snprintf(env->master_addr, sizeof env->master_addr, "%s", addr);
    }
    int port = 0, r = getenv_int("MASTER_PORT", &port);
    if (r < 0) return LJ_ERR_ARG;
    if (r && (port < 1 || port > 65535))
        return lj_fail(LJ_ERR_ARG, "environment variable MASTER_PORT=%d is not a TCP port (1..65535)", port);
    env->master_port = port;
    env->bootstrap_port = port;
    snprintf(env->bootstrap_port_source, sizeof env->bootstrap_port_source, "MASTER_PORT");
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (port && agent && (!strcmp(agent, "True") || !strcmp(agent, "true") || !strcmp(agent, "1"))) {
        int own = 0;
        r = getenv_int("LJPERF_BOOTSTRAP_PORT", &own);
        if (r < 0) return LJ_ERR_ARG;
        if (r && (own < 1 || own > 65535))
            return lj_fail(LJ_ERR_ARG, "environment variable LJPERF_BOOTSTRAP_PORT=%d is not a TCP port (1..65535)", own);
        if (r && own == port)
            return lj_fail(LJ_ERR_ARG, "LJPERF_BOOTSTRAP_PORT=%d is MASTER_PORT, which torchrun's agent store holds "
                                       "(TORCHELASTIC_USE_AGENT_STORE=%s): choose another free port", own, agent);
        env->bootstrap_port = r ? own : port < 65535 ? port + 1 : port - 1;
        snprintf(env->bootstrap_port_source, sizeof env->bootstrap_port_source, "%s",
                 r ? "LJPERF_BOOTSTRAP_PORT"
                   : port < 65535 ? "MASTER_PORT + 1: torchrun's agent store holds MASTER_PORT; LJPERF_BOOTSTRAP_PORT "
                                    "sets another"
                                  : "MASTER_PORT - 1: torchrun's agent store holds MASTER_PORT; LJPERF_BOOTSTRAP_PORT "
                                    "sets another");
    }
    return LJ_OK;
}

/* Reads one launcher's rank / size / local variables; 0 when its size variable is absent. */
static int read_launcher(lj_dist_env *env, lj_launcher kind, const char *rank_var, const char *size_var,
                         const char *local_var, const char *local_size_var) {
    int size = 0, rank = 0;
    int rs = getenv_int(size_var, &size);
    if (rs <= 0) return rs;
    int rr = getenv_int(rank_var, &rank);
    if (rr < 0) return -1;
    if (rr == 0) {
        lj_fail(LJ_ERR_ARG, "environment variable %s is set but %s is not", size_var, rank_var);
        return -1;
    }
    env->launcher = kind;
    env->rank = rank;
    env->world_size = size;
    if (local_var && getenv_int(local_var, &env->local_rank) < 0) return -1;
    if (local_size_var && getenv_int(local_size_var, &env->local_world_size) < 0) return -1;
    return 1;
}

/* Slurm's ranks on this node: entry SLURM_NODEID of SLURM_STEP_TASKS_PER_NODE ("2(x3),1": 2 on
 * each of the first three nodes, 1 on the fourth); -1 when the variables are absent or unreadable. */
static int slurm_tasks_on_node(void) {
    const char *list = getenv("SLURM_STEP_TASKS_PER_NODE");
    int node = 0;
    if (!list || !*list || getenv_int("SLURM_NODEID", &node) <= 0) return -1;
    for (const char *p = list; *p;) {
        char *end;
        long n = strtol(p, &end, 10), times = 1;
        if (end == p || n <= 0) return -1;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x') return -1;
            times = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || times <= 0) return -1;
            p = end + 1;
        }
        if (node < times) return (int)n;
        node -= (int)times;
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return -1;
}

/* What the launcher says against itself and against a second launcher's variables. */
static lj_status check_consistent(const lj_dist_env *env) {
    const int torchrun = env->launcher == LJ_LAUNCHER_TORCHRUN;
    const char *name = lj_launcher_name(env->launcher);
    if (env->local_world_size > 0 && env->world_size > 0 && env->local_world_size > env->world_size)
        return torchrun ? lj_fail(LJ_ERR_ARG, "LOCAL_WORLD_SIZE=%d, more than its world size %d (WORLD_SIZE)",
                                  env->local_world_size, env->world_size)
                        : lj_fail(LJ_ERR_ARG, "the launcher (%s) puts %d ranks on this node, more than its world size %d",
                                  name, env->local_world_size, env->world_size);
    if (env->local_world_size > 0 && env->local_rank >= env->local_world_size)
        return torchrun ? lj_fail(LJ_ERR_ARG, "LOCAL_RANK=%d, which is not below LOCAL_WORLD_SIZE=%d", env->local_rank,
                                  env->local_world_size)
                        : lj_fail(LJ_ERR_ARG, "the launcher (%s) gave local rank %d, which is not below its %d ranks on "
                                              "this node",
                                  name, env->local_rank, env->local_world_size);
    int size = 0;
    if (torchrun && getenv_int("OMPI_COMM_WORLD_SIZE", &size) == 1 && size != env->world_size)
        return lj_fail(LJ_ERR_ARG, "WORLD_SIZE=%d (torchrun-style) but mpirun started %d ranks (OMPI_COMM_WORLD_SIZE): "
                                   "start the ranks with one launcher",
                       env->world_size, size);
    return LJ_OK;
}

lj_status lj_dist_env_detect(lj_dist_env *env) {
    memset(env, 0, sizeof *env);
    env->world_size = 1;
    env->local_rank = -1;
    env->local_world_size = -1;
    LJ_TRY(read_master(env));
    int r = read_launcher(env, LJ_LAUNCHER_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
    if (r == 0 && getenv("RANK") && *getenv("RANK"))
        return lj_fail(LJ_ERR_ARG, "environment variable RANK is set but WORLD_SIZE is not (torchrun sets both)");
    if (r == 0) r = read_launcher(env, LJ_LAUNCHER_MPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                  "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
    if (r == 0) r = read_launcher(env, LJ_LAUNCHER_MPI, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
    if (r == 0) {
        r = read_launcher(env, LJ_LAUNCHER_SLURM, "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", NULL);
        if (r == 1) env->local_world_size = slurm_tasks_on_node();
    }
    if (r == 0 && getenv("PMIX_RANK") && *getenv("PMIX_RANK")) {
        if (getenv_int("PMIX_RANK", &env->rank) < 0) return LJ_ERR_ARG;
        env->launcher = LJ_LAUNCHER_MPI;
        env->world_size = 0; /* MPI_Init tells */
        r = 1;
    }
    if (r < 0) return LJ_ERR_ARG;
    if (r == 0) {
        env->launcher = LJ_LAUNCHER_NONE;
        env->local_rank = 0;
        env->local_world_size = 1;
        return LJ_OK;
    }
    if (env->world_size != 0 && env->rank >= env->world_size)
        return lj_fail(LJ_ERR_ARG, "the launcher (%s) gave rank %d, which is not below its world size %d",
                       lj_launcher_name(env->launcher), env->rank, env->world_size);
    if (env->launcher == LJ_LAUNCHER_TORCHRUN) {
        if (env->world_size == 0) return lj_fail(LJ_ERR_ARG, "environment variable WORLD_SIZE=0: need at least 1");
        if (env->world_size > 1 && !env->master_addr[0])
            return lj_fail(LJ_ERR_ARG, "WORLD_SIZE=%d is set but MASTER_ADDR is not (rank 0's host name or address)",
                           env->world_size);
        if (env->world_size > 1 && !env->master_port)
            return lj_fail(LJ_ERR_ARG, "WORLD_SIZE=%d is set but MASTER_PORT is not (a free TCP port on rank 0's host)",
                           env->world_size);
    }
    return check_consistent(env);
}

lj_status lj_dist_config_mismatch(int rank, uint64_t hash0, const char *summary0, uint64_t hash_r,
                                  const char *summary_r) {
    return lj_fail(LJ_ERR_FORMAT,
                   "rank %d's run configuration differs from rank 0's: rank 0: %s; rank %d: %s (config hashes "
                   "%016llx and %016llx): start every rank with the same model, flags and data",
                   rank, summary0 && *summary0 ? summary0 : "(no summary)", rank,
                   summary_r && *summary_r ? summary_r : "(no summary)", (unsigned long long)hash0,
                   (unsigned long long)hash_r);
}

/* ---- byte and socket helpers ------------------------------------------------------ */

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int ms_until(double deadline) {
    double left = deadline - now_sec();
    if (left <= 0) return 0;
    return left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1;
}

/* 1 done, 0 the peer closed, -1 error (errno), -2 deadline passed. */
static int recv_all(int fd, void *buf, size_t n, double deadline) {
    size_t got = 0;
    while (got < n) {
        struct pollfd p = {fd, POLLIN, 0};
        int pr = poll(&p, 1, ms_until(deadline));
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return -1;
        if (pr == 0) return -2;
        ssize_t k = recv(fd, (char *)buf + got, n - got, 0);
        if (k == 0) return 0;
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k < 0) return -1;
        got += (size_t)k;
    }
    return 1;
}

/* 1 done, -1 error (errno), -2 deadline passed. Never raises SIGPIPE. */
static int send_all(int fd, const void *buf, size_t n, double deadline) {
    size_t sent = 0;
    while (sent < n) {
        struct pollfd p = {fd, POLLOUT, 0};
        int pr = poll(&p, 1, ms_until(deadline));
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return -1;
        if (pr == 0) return -2;
        ssize_t k = send(fd, (const char *)buf + sent, n - sent, MSG_NOSIGNAL);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k < 0) return -1;
        sent += (size_t)k;
    }
    return 1;
}

static void set_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Listens on `port` on every interface (IPv6 dual-stack, else IPv4). */
static lj_status listen_any(int port, const char *source, int *out) {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, zero = 0;
    if (fd >= 0) {
        struct sockaddr_in6 a6;
        memset(&a6, 0, sizeof a6);
        a6.sin6_family = AF_INET6;
        a6.sin6_addr = in6addr_any;
        a6.sin6_port = htons((uint16_t)port);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&a6, sizeof a6) != 0) {
            int e = errno;
            close(fd);
            fd = -1;
            if (e == EADDRINUSE || e == EACCES)
                return lj_fail(LJ_ERR_DEVICE, "bootstrap: rank 0 cannot listen on port %d (%s): %s", port, source,
                               strerror(e));
        }
    }
    if (fd < 0) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return lj_fail(LJ_ERR_DEVICE, "bootstrap: socket failed: %s", strerror(errno));
        struct sockaddr_in a4;
        memset(&a4, 0, sizeof a4);
        a4.sin_family = AF_INET;
        a4.sin_addr.s_addr = htonl(INADDR_ANY);
        a4.sin_port = htons((uint16_t)port);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&a4, sizeof a4) != 0) {
            int e = errno;
            close(fd);
            return lj_fail(LJ_ERR_DEVICE, "bootstrap: rank 0 cannot listen on port %d (%s): %s", port, source,
                           strerror(e));
        }
    }
    if (listen(fd, 128) != 0) {
        int e = errno;
        close(fd);
        return lj_fail(LJ_ERR_DEVICE, "bootstrap: listen on port %d failed: %s", port, strerror(e));
    }
    *out = fd;
    return LJ_OK;
}

/* Connects to host:port, retrying refused connections until the deadline. */
static lj_status connect_retry(const char *host, int port, double deadline, int *out) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int g = getaddrinfo(host, service, &hints, &res);
    if (g != 0)
        return lj_fail(LJ_ERR_ARG, "bootstrap: cannot resolve MASTER_ADDR '%s': %s", host, gai_strerror(g));
    int last_err = 0;
    for (;;) {
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
            if (fd < 0) {
                last_err = errno;
                continue;
            }
            int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
            if (rc != 0 && errno == EINPROGRESS) {
                struct pollfd p = {fd, POLLOUT, 0};
                int left = ms_until(deadline);
                rc = poll(&p, 1, left < 1000 ? left : 1000) == 1 ? 0 : -1;
                int soerr = ETIMEDOUT;
                socklen_t len = sizeof soerr;
                if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0) rc = 0;
                else {
                    rc = -1;
                    errno = soerr;
                }
            }
            if (rc == 0) {
                fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
                set_nodelay(fd);
                freeaddrinfo(res);
                *out = fd;
                return LJ_OK;
            }
            last_err = errno;
            close(fd);
        }
        if (now_sec() >= deadline) break;
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    freeaddrinfo(res);
    return lj_fail(LJ_ERR_DEVICE,
                   "bootstrap: could not connect to rank 0 at MASTER_ADDR=%s port %d before the timeout: %s "
                   "(is rank 0 running, and is the port reachable?)",
                   host, port, strerror(last_err ? last_err : ETIMEDOUT));
}

/* ---- the watchdog object ------------------------------------------------------------ */

struct lj_bootstrap {
    int rank, world;
    double timeout, heartbeat;     /* seconds */
    int *fds;                      /* rank 0: fds[r] for every other rank; others: fds[0] = rank 0 */
    double *last_seen;             /* per peer, now_sec() of its last frame */
    unsigned char *bye;            /* per peer: said goodbye */
    unsigned char (*partial)[FRAME_BYTES];
    int *partial_len;
    int wake[2];                   /* self-pipe that wakes the thread */
    pthread_t thread;
    int has_thread;
    atomic_int closing;
    double close_deadline;
    _Atomic(const char *) op_name;
    _Atomic double op_start;       /* 0: no blocking call in progress */
};

static void die(const lj_bootstrap *b, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(const lj_bootstrap *b, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "ljperf: rank %d: %s; stopping this rank (exit status %d)\n", b->rank, msg, LJ_DIST_EXIT_PEER_LOST);
    fflush(stderr);
    _exit(LJ_DIST_EXIT_PEER_LOST);
}

static const char *reason_text(int reason) {
    return reason == REASON_SILENT ? "sent no heartbeat within the timeout, LJPERF_DIST_TIMEOUT (it hung, was "
                                     "stopped, or its host is unreachable)"
                                   : "exited or closed its connection without shutting down";
}

static void send_frame(int fd, char type, int reason, int rank) {
    unsigned char f[FRAME_BYTES] = {(unsigned char)type, (unsigned char)reason, 0, 0};
    put_u32(f + 4, (uint32_t)rank);
    send(fd, f, sizeof f, MSG_NOSIGNAL | MSG_DONTWAIT); /* a full buffer or a dead peer: the reader side tells */
}

/* Peer `r` (an index into fds) is gone without a goodbye. */
static void peer_lost(lj_bootstrap *b, int r, int reason) {
    if (atomic_load(&b->closing) && b->rank == 0) {
        lj_log_warn("rank %d %s after rank 0 had finished", r, reason_text(reason));
        close(b->fds[r]);
        b->fds[r] = -1;
        return;
    }
    if (b->rank == 0) {
        for (int k = 1; k < b->world; k++)
            if (k != r && b->fds[k] >= 0 && !b->bye[k]) send_frame(b->fds[k], 'L', reason, r);
        die(b, "rank %d %s", r, reason_text(reason));
    }
    die(b, "rank 0 %s", reason_text(reason));
}

/* Reads what peer r sent; handles complete frames. */
static void read_peer(lj_bootstrap *b, int r) {
    for (;;) {
        ssize_t k = recv(b->fds[r], b->partial[r] + b->partial_len[r], (size_t)(FRAME_BYTES - b->partial_len[r]),
                         MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (k <= 0) {
            if (b->bye[r]) {
                close(b->fds[r]);
                b->fds[r] = -1;
                return;
            }
            peer_lost(b, r, REASON_EXITED);
            return;
        }
        b->partial_len[r] += (int)k;
        if (b->partial_len[r] < FRAME_BYTES) continue;
        b->partial_len[r] = 0;
        const unsigned char *f = b->partial[r];
        b->last_seen[r] = now_sec();
        if (f[0] == 'B') b->bye[r] = 1;
        if (f[0] == 'L' && b->rank != 0)
            die(b, "rank 0 reports that rank %u %s", get_u32(f + 4), reason_text(f[1]));
    }
}

static int boot_npeer(const lj_bootstrap *b) { return b->fds ? (b->rank == 0 ? b->world : 1) : 0; }

static void *watchdog_main(void *arg) {
    lj_bootstrap *b = arg;
    const int npeer = boot_npeer(b);
    struct pollfd *p = lj_calloc((size_t)npeer + 1, sizeof *p);
    int *who = lj_calloc((size_t)npeer + 1, sizeof *who);
    double next_beat = 0;
    for (;;) {
        const double now = now_sec();
        const int closing = atomic_load(&b->closing);
        if (closing && b->rank != 0) break;
        if (now >= next_beat) {
            for (int r = 0; r < npeer; r++)
                if (b->fds[r] >= 0 && !b->bye[r]) send_frame(b->fds[r], 'H', 0, 0);
            next_beat = now + b->heartbeat;
        }
        const double op = atomic_load(&b->op_start);
        if (op > 0 && now - op > b->timeout)
            die(b, "%s has not completed after %.1f s (LJPERF_DIST_TIMEOUT): another rank has likely died or hung",
                atomic_load(&b->op_name), b->timeout);
        int open = 0;
        for (int r = 0; r < npeer; r++) {
            if (b->fds[r] < 0 || b->bye[r]) continue;
            if (now - b->last_seen[r] > b->timeout) peer_lost(b, r, REASON_SILENT);
            if (b->fds[r] >= 0) open++;
        }
        if (closing && (open == 0 || now > b->close_deadline)) {
            if (open) lj_log_warn("rank 0: %d rank(s) still running after the shutdown timeout", open);
            break;
        }
        int n = 0;
        p[n].fd = b->wake[0];
        p[n].events = POLLIN;
        who[n++] = -1;
        for (int r = 0; r < npeer; r++)
            if (b->fds[r] >= 0) {
                p[n].fd = b->fds[r];
                p[n].events = POLLIN;
                who[n++] = r;
            }
        int wait_ms = (int)(b->heartbeat * 1000.0) + 1;
        if (poll(p, (nfds_t)n, wait_ms) <= 0) continue;
        if (p[0].revents) {
            char buf[64];
            while (read(b->wake[0], buf, sizeof buf) > 0) {}
        }
        for (int i = 1; i < n; i++)
            if (p[i].revents && b->fds[who[i]] >= 0) read_peer(b, who[i]);
    }
    free(p);
    free(who);
    return NULL;
}

static lj_bootstrap *boot_new(int rank, int world, double timeout, int npeer) {
    lj_bootstrap *b = lj_calloc(1, sizeof *b);
    b->rank = rank;
    b->world = world;
    b->timeout = timeout;
    b->heartbeat = timeout / 5 < 5.0 ? timeout / 5 : 5.0;
    if (b->heartbeat < 0.02) b->heartbeat = 0.02;
    b->wake[0] = b->wake[1] = -1;
    if (npeer > 0) {
        b->fds = lj_malloc((size_t)npeer * sizeof *b->fds);
        for (int i = 0; i < npeer; i++) b->fds[i] = -1;
        b->last_seen = lj_calloc((size_t)npeer, sizeof *b->last_seen);
        b->bye = lj_calloc((size_t)npeer, 1);
        b->partial = lj_calloc((size_t)npeer, sizeof *b->partial);
        b->partial_len = lj_calloc((size_t)npeer, sizeof *b->partial_len);
    }
    atomic_init(&b->closing, 0);
    atomic_init(&b->op_start, 0.0);
    atomic_init(&b->op_name, "");
    return b;
}

static void boot_free(lj_bootstrap *b, int npeer) {
    for (int i = 0; i < npeer; i++)
        if (b->fds[i] >= 0) close(b->fds[i]);
    if (b->wake[0] >= 0) close(b->wake[0]);
    if (b->wake[1] >= 0) close(b->wake[1]);
    free(b->fds);
    free(b->last_seen);
    free(b->bye);
    free(b->partial);
    free(b->partial_len);
    free(b);
}

static lj_status start_watchdog(lj_bootstrap *b) {
    if (pipe2(b->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        return lj_fail(LJ_ERR_DEVICE, "bootstrap: pipe2 failed: %s", strerror(errno));
    const double now = now_sec();
    for (int i = 0; i < boot_npeer(b); i++) b->last_seen[i] = now;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* signals go to the application's threads */
    int e = pthread_create(&b->thread, NULL, watchdog_main, b);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) return lj_fail(LJ_ERR_DEVICE, "bootstrap: pthread_create failed: %s", strerror(e));
    b->has_thread = 1;
    return LJ_OK;
}

lj_status lj_bootstrap_local(lj_bootstrap **out, int rank, int world_size, double timeout_sec) {
    lj_bootstrap *b = boot_new(rank, world_size, timeout_sec, 0);
    lj_status s = start_watchdog(b);
    if (s != LJ_OK) {
        boot_free(b, 0);
        b = NULL;
    }
    *out = b;
    return s;
}

void lj_bootstrap_op_begin(lj_bootstrap *b, const char *what) {
    if (!b) return;
    atomic_store(&b->op_name, what);
    atomic_store(&b->op_start, now_sec());
}

void lj_bootstrap_op_end(lj_bootstrap *b) {
    if (b) atomic_store(&b->op_start, 0.0);
}

void lj_bootstrap_close(lj_bootstrap *b) {
    if (!b) return;
    const int npeer = boot_npeer(b);
    if (b->rank != 0 && npeer && b->fds[0] >= 0) {
        /* stop the watchdog first, so that it cannot report rank 0 going away after our goodbye */
        atomic_store(&b->closing, 1);
        if (b->has_thread) {
            ssize_t w = write(b->wake[1], "x", 1);
            (void)w;
            pthread_join(b->thread, NULL);
            b->has_thread = 0;
        }
        unsigned char f[FRAME_BYTES] = {'B', 0, 0, 0, 0, 0, 0, 0};
        send_all(b->fds[0], f, sizeof f, now_sec() + 1.0);
    }
    b->close_deadline = now_sec() + b->timeout;
    atomic_store(&b->closing, 1);
    if (b->has_thread) {
        ssize_t w = write(b->wake[1], "x", 1);
        (void)w;
        pthread_join(b->thread, NULL);
    }
    boot_free(b, npeer);
}

/* ---- the TCP rendezvous ------------------------------------------------------------- */

static void encode_hello(unsigned char *h, const lj_dist_env *env, uint64_t hash, const char *summary,
                         size_t blob_size) {
    memset(h, 0, HELLO_BYTES);
    put_u32(h, BOOT_MAGIC);
    put_u32(h + 4, BOOT_VERSION);
    put_u32(h + 8, (uint32_t)env->rank);
    put_u32(h + 12, (uint32_t)env->world_size);
    put_u64(h + 16, hash);
    put_u32(h + 24, (uint32_t)blob_size);
    if (summary) snprintf((char *)h + 28, LJ_DIST_SUMMARY_BYTES, "%s", summary);
}

/* Sends a reply (status + message, and the blob when ok) to one rank. */
static void send_reply(int fd, lj_status status, const char *message, const void *blob, size_t blob_size,
                       double deadline) {
    unsigned char *r = lj_calloc(1, REPLY_BYTES + blob_size);
    put_u32(r, BOOT_MAGIC);
    put_u32(r + 4, (uint32_t)status);
    snprintf((char *)r + 8, REPLY_MSG_BYTES, "%s", message ? message : "");
    size_t n = REPLY_BYTES;
    if (status == LJ_OK) {
        memcpy(r + REPLY_BYTES, blob, blob_size);
        n += blob_size;
    }
    send_all(fd, r, n, deadline);
    free(r);
}

static lj_status rendezvous_root(lj_bootstrap *b, const lj_dist_env *env, uint64_t hash, const char *summary,
                                 const void *blob, size_t blob_size) {
    int lfd = -1;
    LJ_TRY(listen_any(env->bootstrap_port, env->bootstrap_port_source, &lfd));
    const int world = env->world_size;
    const double start = now_sec(), deadline = start + b->timeout;
    uint64_t *hashes = lj_calloc((size_t)world, sizeof *hashes);
    char(*summaries)[LJ_DIST_SUMMARY_BYTES] = lj_calloc((size_t)world, LJ_DIST_SUMMARY_BYTES);
    hashes[0] = hash;
    snprintf(summaries[0], LJ_DIST_SUMMARY_BYTES, "%s", summary ? summary : "");
    int waiting = world - 1;
    lj_status s = LJ_OK;
    while (waiting > 0 && s == LJ_OK) {
        struct pollfd p = {lfd, POLLIN, 0};
        int pr = poll(&p, 1, ms_until(deadline));
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) break;
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) continue;
        set_nodelay(c);
        unsigned char h[HELLO_BYTES];
        if (recv_all(c, h, sizeof h, deadline) != 1 || get_u32(h) != BOOT_MAGIC) {
            lj_log_warn("bootstrap: ignored a connection to MASTER_PORT=%d that did not introduce itself as an "
                        "ljperf rank",
                        env->master_port);
            close(c);
            continue;
        }
        const int r = (int)get_u32(h + 8), w = (int)get_u32(h + 12);
        h[HELLO_BYTES - 1] = 0;
        if (get_u32(h + 4) != BOOT_VERSION || get_u32(h + 24) != (uint32_t)blob_size)
            s = lj_fail(LJ_ERR_FORMAT, "rank %d runs a different ljperf version (bootstrap protocol %u, rank 0 has %u)",
                        r, get_u32(h + 4), BOOT_VERSION);
        else if (w != world)
            s = lj_fail(LJ_ERR_FORMAT, "rank %d was started with WORLD_SIZE=%d but rank 0 with WORLD_SIZE=%d", r, w,
                        world);
        else if (r < 1 || r >= world)
            s = lj_fail(LJ_ERR_FORMAT, "a process connected to rank 0 claiming RANK=%d, outside 1..%d", r, world - 1);
        else if (b->fds[r] >= 0)
            s = lj_fail(LJ_ERR_FORMAT, "two processes were started with RANK=%d", r);
        if (s != LJ_OK) {
            send_reply(c, s, lj_error_message(), NULL, 0, now_sec() + 1.0);
            close(c);
            break;
        }
        b->fds[r] = c;
        hashes[r] = get_u64(h + 16);
        memcpy(summaries[r], h + 28, LJ_DIST_SUMMARY_BYTES);
        waiting--;
    }
    close(lfd);
    if (s == LJ_OK && waiting > 0) {
        char missing[256] = "";
        size_t len = 0;
        int listed = 0;
        for (int r = 1; r < world && len + 16 < sizeof missing; r++)
            if (b->fds[r] < 0) {
                if (listed++ == 8) {
                    len += (size_t)snprintf(missing + len, sizeof missing - len, ", ...");
                    break;
                }
                len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", listed > 1 ? ", " : "", r);
            }
        s = lj_fail(LJ_ERR_DEVICE,
                    "bootstrap timed out after %.1f s: rank(s) %s of WORLD_SIZE=%d never connected to rank 0 "
                    "(MASTER_ADDR=%s MASTER_PORT=%d): were they started, with the same MASTER_ADDR and MASTER_PORT?",
                    b->timeout, missing, world, env->master_addr, env->master_port);
    }
    for (int r = 1; r < world && s == LJ_OK; r++)
        if (hashes[r] != hashes[0]) s = lj_dist_config_mismatch(r, hashes[0], summaries[0], hashes[r], summaries[r]);
    const double reply_deadline = now_sec() + (b->timeout < 10 ? b->timeout : 10);
    for (int r = 1; r < world; r++)
        if (b->fds[r] >= 0) send_reply(b->fds[r], s, s == LJ_OK ? "" : lj_error_message(), blob, blob_size, reply_deadline);
    free(hashes);
    free(summaries);
    return s;
}

static lj_status rendezvous_peer(lj_bootstrap *b, const lj_dist_env *env, uint64_t hash, const char *summary,
                                 void *blob, size_t blob_size) {
    const double start = now_sec();
    LJ_TRY(connect_retry(env->master_addr, env->bootstrap_port, start + b->timeout, &b->fds[0]));
    unsigned char h[HELLO_BYTES];
    encode_hello(h, env, hash, summary, blob_size);
    if (send_all(b->fds[0], h, sizeof h, start + b->timeout) != 1)
        return lj_fail(LJ_ERR_DEVICE, "bootstrap: sending to rank 0 at %s:%d failed: %s", env->master_addr,
                       env->master_port, strerror(errno));
    /* rank 0 answers when every rank has arrived, or at its own timeout: wait a little longer */
    const double deadline = start + b->timeout * 1.25 + 1.0;
    unsigned char r[REPLY_BYTES];
    int got = recv_all(b->fds[0], r, sizeof r, deadline);
    if (got == -2)
        return lj_fail(LJ_ERR_DEVICE, "bootstrap: rank 0 at %s:%d accepted the connection but sent no answer within %.1f s",
                       env->master_addr, env->master_port, deadline - start);
    if (got != 1 || get_u32(r) != BOOT_MAGIC)
        return lj_fail(LJ_ERR_DEVICE, "bootstrap: rank 0 at %s:%d closed the connection during bootstrap%s%s",
                       env->master_addr, env->master_port, got < 0 ? ": " : " (did it fail?)",
                       got < 0 ? strerror(errno) : "");
    const lj_status status = (lj_status)get_u32(r + 4);
    if (status != LJ_OK) {
        r[REPLY_BYTES - 1] = 0;
        return lj_fail(status, "%s", (const char *)r + 8);
    }
    if (blob_size && recv_all(b->fds[0], blob, blob_size, deadline) != 1)
        return lj_fail(LJ_ERR_DEVICE, "bootstrap: rank 0 at %s:%d closed the connection during bootstrap",
                       env->master_addr, env->master_port);
    return LJ_OK;
}

lj_status lj_bootstrap_tcp(lj_bootstrap **out, const lj_dist_env *env_in, uint64_t config_hash,
                           const char *config_summary, double timeout_sec, void *blob, size_t blob_size) {
    *out = NULL;
    lj_dist_env port_env = *env_in; /* an environment filled by hand may leave bootstrap_port unset */
    if (port_env.bootstrap_port <= 0) {
        port_env.bootstrap_port = port_env.master_port;
        snprintf(port_env.bootstrap_port_source, sizeof port_env.bootstrap_port_source, "MASTER_PORT");
    }
    const lj_dist_env *env = &port_env;
    LJ_ASSERT(env->world_size >= 1 && env->rank >= 0 && env->rank < env->world_size);
    if (!(timeout_sec > 0)) return lj_fail(LJ_ERR_ARG, "bootstrap timeout must be positive, got %g s", timeout_sec);
    if (env->world_size > 1 && (!env->master_addr[0] || env->master_port <= 0))
        return lj_fail(LJ_ERR_ARG, "bootstrap of %d ranks needs MASTER_ADDR and MASTER_PORT", env->world_size);
    const int npeer = env->rank == 0 ? env->world_size : 1;
    lj_bootstrap *b = boot_new(env->rank, env->world_size, timeout_sec, env->world_size > 1 ? npeer : 0);
    lj_status s = LJ_OK;
    if (env->world_size > 1)
        s = env->rank == 0 ? rendezvous_root(b, env, config_hash, config_summary, blob, blob_size)
                           : rendezvous_peer(b, env, config_hash, config_summary, blob, blob_size);
    if (s == LJ_OK) s = start_watchdog(b);
    if (s != LJ_OK) {
        boot_free(b, boot_npeer(b));
        return s;
    }
    *out = b;
    return LJ_OK;
}

/* test_dist.c: the collectives (parallel/dist.h) and their bootstrap and liveness.
 *
 * Run by CTest with no arguments, it checks the single-rank path and the launcher environment
 * parsing in process, the torchrun-style TCP bootstrap with 2-3 forked ranks over loopback (a
 * configuration mismatch, a killed rank, a stopped rank, a missing rank, a blocking call past
 * its deadline), and re-executes itself under `mpirun -np 2` and `-np 3` to compare every MPI
 * collective (uneven sizes, f32 and bf16, in place) with serial sums, plus the MPI
 * configuration check and a hung rank. Other modes:
 *   test_dist --worker check|mismatch|hang|die   one rank (under mpirun, or under the launcher)
 *   test_dist --nccl N                            on a GPU machine: N NCCL ranks started by the
 *                                                 launcher, running `--worker check` on device
 *                                                 buffers (not run by CTest)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef LJ_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "parallel/dist.h"
#include "parallel/zero.h"

/* ---- worker side: one rank of a multi-process check ------------------------------------ */

typedef struct {
    lj_dist *d;
    int device; /* buffers on the GPU (NCCL) */
    int failures;
} worker;

static void *buf_new(worker *w, size_t bytes) {
#ifdef LJ_HAVE_CUDA
    if (w->device) {
        void *p = NULL;
        if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) lj_dist_abort(w->d, 1, "cudaMalloc failed");
        return p;
    }
#endif
    return calloc(1, bytes ? bytes : 1);
}
static void buf_free(worker *w, void *p) {
#ifdef LJ_HAVE_CUDA
    if (w->device) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}
static void put(worker *w, void *dst, const void *src, size_t bytes) {
#ifdef LJ_HAVE_CUDA
    if (w->device) {
        cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
        return;
    }
#endif
    memcpy(dst, src, bytes);
}
/* Waits for the collectives (on the compute stream: the default one) and copies back. */
static void get(worker *w, void *dst, const void *src, size_t bytes) {
    if (lj_dist_wait(w->d, LJ_DIST_ALL, NULL) != LJ_OK) lj_dist_abort(w->d, 1, lj_error_message());
#ifdef LJ_HAVE_CUDA
    if (w->device) {
        cudaDeviceSynchronize();
        cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
        return;
    }
#endif
    memcpy(dst, src, bytes);
}

#define CHECK_OK(w, call)                                                             \
    do {                                                                              \
        if ((call) != LJ_OK) lj_dist_abort((w)->d, 1, lj_error_message());            \
    } while (0)

static void expect(worker *w, int ok, const char *what, int64_t i, double got, double want) {
    if (ok) return;
    if (w->failures++ < 5)
        fprintf(stderr, "rank %d: %s: element %lld is %g, expected %g\n", lj_dist_rank(w->d), what, (long long)i, got, want);
}

/* Integer-valued data, so that every sum is exact in f32 and bf16 whatever the order. */
static float value(int rank, int64_t i) { return (float)((rank + 1) * (int)(i % 7) - (int)(i % 3)); }

static void check_all_reduce(worker *w, int64_t n, lj_dtype dt, int in_place) {
    const int W = lj_dist_world_size(w->d), R = lj_dist_rank(w->d);
    const size_t es = lj_dtype_size(dt);
    char *host = malloc((size_t)n * es + 1), *back = malloc((size_t)n * es + 1);
    for (int64_t i = 0; i < n; i++) {
        if (dt == LJ_DTYPE_F32) ((float *)host)[i] = value(R, i);
        else ((uint16_t *)host)[i] = lj_f32_to_bf16(value(R, i));
    }
    void *send = buf_new(w, (size_t)n * es), *recv = in_place ? send : buf_new(w, (size_t)n * es);
    put(w, send, host, (size_t)n * es);
    CHECK_OK(w, lj_dist_all_reduce(w->d, send, recv, n, dt, NULL));
    get(w, back, recv, (size_t)n * es);
    for (int64_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < W; r++) want += value(r, i);
        const double got = dt == LJ_DTYPE_F32 ? ((float *)back)[i] : lj_bf16_to_f32(((uint16_t *)back)[i]);
        expect(w, got == want, dt == LJ_DTYPE_F32 ? "all_reduce f32" : "all_reduce bf16", i, got, want);
    }
    if (!in_place) buf_free(w, recv);
    buf_free(w, send);
    free(host);
    free(back);
}

/* reduce-scatter then all-gather of a padded flat buffer of P elements (parallel/zero.h layout). */
static void check_shards(worker *w, int64_t P, int in_place) {
    const int W = lj_dist_world_size(w->d), R = lj_dist_rank(w->d);
    lj_zero_partition z;
    lj_zero_partition_flat(&z, P, W, 4);
    const int64_t S = z.shard_numel, N = (int64_t)W * S;
    float *host = malloc(sizeof(float) * (size_t)N), *back = malloc(sizeof(float) * (size_t)N);
    for (int64_t i = 0; i < N; i++) host[i] = i < P ? value(R, i) : 1000.0f;
    float *full = buf_new(w, sizeof(float) * (size_t)N), *shard = in_place ? full + R * S : buf_new(w, sizeof(float) * (size_t)S);
    put(w, full, host, sizeof(float) * (size_t)N);
    CHECK_OK(w, lj_dist_reduce_scatter(w->d, full, shard, S, LJ_DTYPE_F32, NULL));
    get(w, back, shard, sizeof(float) * (size_t)S);
    int64_t b, e;
    lj_zero_unit_slice(&z, 0, R, &b, &e);
    for (int64_t i = b; i < e; i++) {
        double want = 0;
        for (int r = 0; r < W; r++) want += value(r, i);
        expect(w, back[i - b] == want, "reduce_scatter", i, back[i - b], want);
    }
    /* all-gather: every rank contributes rank * 10000 + index of its real slice */
    for (int64_t i = 0; i < S; i++) host[i] = (float)(R * 10000 + i);
    put(w, shard, host, sizeof(float) * (size_t)S);
    CHECK_OK(w, lj_dist_all_gather(w->d, shard, full, S, LJ_DTYPE_F32, NULL));
    get(w, back, full, sizeof(float) * (size_t)N);
    for (int64_t i = 0; i < N; i++) {
        const double want = (double)((i / S) * 10000 + i % S);
        expect(w, back[i] == want, "all_gather", i, back[i], want);
    }
    if (!in_place) buf_free(w, shard);
    buf_free(w, full);
    free(host);
    free(back);
    lj_zero_partition_free(&z);
}

static void check_bf16_reduce_scatter(worker *w, int64_t S) {
    const int W = lj_dist_world_size(w->d), R = lj_dist_rank(w->d);
    const int64_t N = (int64_t)W * S;
    uint16_t *host = malloc(2 * (size_t)N), *back = malloc(2 * (size_t)S);
    for (int64_t i = 0; i < N; i++) host[i] = lj_f32_to_bf16(value(R, i));
    void *full = buf_new(w, 2 * (size_t)N), *shard = buf_new(w, 2 * (size_t)S);
    put(w, full, host, 2 * (size_t)N);
    CHECK_OK(w, lj_dist_reduce_scatter(w->d, full, shard, S, LJ_DTYPE_BF16, NULL));
    get(w, back, shard, 2 * (size_t)S);
    for (int64_t i = 0; i < S; i++) {
        double want = 0;
        for (int r = 0; r < W; r++) want += value(r, R * S + i);
        expect(w, lj_bf16_to_f32(back[i]) == want, "reduce_scatter bf16", i, lj_bf16_to_f32(back[i]), want);
    }
    buf_free(w, full);
    buf_free(w, shard);
    free(host);
    free(back);
}

static void check_broadcast_reduce(worker *w, int64_t n) {
    const int W = lj_dist_world_size(w->d), R = lj_dist_rank(w->d), root = W - 1;
    int32_t *host = malloc(sizeof(int32_t) * (size_t)n + 4), *back = malloc(sizeof(int32_t) * (size_t)n + 4);
    for (int64_t i = 0; i < n; i++) host[i] = R * 100000 + (int32_t)i;
    int32_t *buf = buf_new(w, sizeof(int32_t) * (size_t)n);
    put(w, buf, host, sizeof(int32_t) * (size_t)n);
    CHECK_OK(w, lj_dist_broadcast(w->d, buf, n, LJ_DTYPE_I32, root, NULL));
    get(w, back, buf, sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) expect(w, back[i] == root * 100000 + i, "broadcast", i, back[i], root * 100000 + (double)i);
    buf_free(w, buf);
    float *fh = malloc(sizeof(float) * (size_t)n + 4), *fb = malloc(sizeof(float) * (size_t)n + 4);
    for (int64_t i = 0; i < n; i++) fh[i] = value(R, i);
    float *f = buf_new(w, sizeof(float) * (size_t)n);
    put(w, f, fh, sizeof(float) * (size_t)n);
    const int reduce_root = 1 % W;
    CHECK_OK(w, lj_dist_reduce(w->d, f, f, n, LJ_DTYPE_F32, reduce_root, NULL));
    get(w, fb, f, sizeof(float) * (size_t)n);
    if (R == reduce_root)
        for (int64_t i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < W; r++) want += value(r, i);
            expect(w, fb[i] == want, "reduce", i, fb[i], want);
        }
    buf_free(w, f);
    free(host);
    free(back);
    free(fh);
    free(fb);
}

static int worker_main(const char *mode) {
    lj_dist_options opt;
    lj_dist_options_default(&opt);
    const char *backend = getenv("LJ_TEST_BACKEND");
    const int nccl = backend && strcmp(backend, "nccl") == 0;
    opt.backend = nccl ? LJ_DIST_NCCL : LJ_DIST_MPI;
    lj_dist_env env;
    if (lj_dist_env_detect(&env) != LJ_OK) {
        fprintf(stderr, "worker: %s\n", lj_error_message());
        return 1;
    }
    const int mismatch = strcmp(mode, "mismatch") == 0;
    opt.config_hash = mismatch && env.rank == 1 ? 0xbad : 0x600d;
    opt.config_summary = mismatch && env.rank == 1 ? "llama3-nano seq 64 zero 2" : "llama3-nano seq 64 zero 3";
    lj_dist *d;
    lj_status s = lj_dist_init(&d, &opt);
    if (mismatch) {
        if (s == LJ_OK) return 1;
        fprintf(stderr, "rank %d: init failed as expected: %s\n", env.rank, lj_error_message());
        return strstr(lj_error_message(), "rank 1's run configuration differs from rank 0's") ? 0 : 1;
    }
    if (s != LJ_OK) {
        fprintf(stderr, "rank %d: lj_dist_init: %s\n", env.rank, lj_error_message());
        return 1;
    }
    worker w = {d, nccl, 0};
    const int R = lj_dist_rank(d), W = lj_dist_world_size(d);
    if (strcmp(mode, "hang") == 0 || strcmp(mode, "die") == 0) {
        if (R == 1) {
            if (strcmp(mode, "die") == 0) raise(SIGKILL);
            sleep(60); /* hung: never reaches the barrier */
            return 1;
        }
        lj_dist_barrier(d);
        return 1; /* never reached: the watchdog (hang) or mpirun (die) ends this rank */
    }
    if (W < 2 || lj_dist_local_rank(d) < 0 || lj_dist_local_rank(d) >= lj_dist_local_world_size(d))
        lj_dist_abort(d, 1, "rank / world size / local rank are inconsistent");
    const int64_t sizes[] = {0, 1, 7, 1000, 4099};
    for (int k = 0; k < 5; k++) {
        check_all_reduce(&w, sizes[k], LJ_DTYPE_F32, 0);
        check_all_reduce(&w, sizes[k], LJ_DTYPE_BF16, 1);
        check_shards(&w, sizes[k] + 1 + k, k % 2);
        check_bf16_reduce_scatter(&w, sizes[k] + 3);
        check_broadcast_reduce(&w, sizes[k]);
    }
    check_all_reduce(&w, 3001, LJ_DTYPE_F32, 1);
    CHECK_OK(&w, lj_dist_group_start(d));
    CHECK_OK(&w, lj_dist_group_end(d));
    lj_dist_ticket t;
    CHECK_OK(&w, lj_dist_mark(d, &t));
    CHECK_OK(&w, lj_dist_wait(d, t, NULL));
    CHECK_OK(&w, lj_dist_synchronize(d));
    CHECK_OK(&w, lj_dist_barrier(d));
    if (w.failures) {
        char msg[96];
        snprintf(msg, sizeof msg, "%d collective checks failed", w.failures);
        lj_dist_abort(d, 1, msg);
    }
    if (R == 0) fprintf(stderr, "%d ranks (%s): all collective checks passed\n", W, lj_dist_backend_name(lj_dist_get_backend(d)));
    lj_dist_free(d);
    return 0;
}

/* ---- test side ---------------------------------------------------------------------------- */

static char g_self[4096];
static char g_tmp[1024];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Runs argv with output to `log`, at most `limit` seconds; returns the exit status, 128 + signal,
 * or -1 on timeout (the process group is killed). */
static int run_cmd(char *const argv[], const char *log, double limit, double *elapsed) {
    const double t0 = now();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    for (;;) {
        if (waitpid(pid, &st, WNOHANG) == pid) break;
        if (now() - t0 > limit) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            if (elapsed) *elapsed = now() - t0;
            return -1;
        }
        usleep(20000);
    }
    if (elapsed) *elapsed = now() - t0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *slurp(const char *path) {
    char *text = NULL;
    size_t n;
    if (lj_file_read_all(path, &text, &n) != LJ_OK) return lj_strdup("");
    return text;
}

static void expect_in_file(const char *path, const char *needle) {
    char *t = slurp(path);
    if (!strstr(t, needle)) fail_msg("%s lacks '%s'; it holds:\n%s", path, needle, t);
    free(t);
}

/* Whether the MPI cases can run: this build has the MPI backend and mpirun is installed. */
static int have_mpirun(void) {
#ifndef LJ_HAVE_MPI
    return 0;
#endif
    char log[1200];
    snprintf(log, sizeof log, "%s/mpirun-version.log", g_tmp);
    char *argv[] = {"mpirun", "--version", NULL};
    return run_cmd(argv, log, 30, NULL) == 0;
}

/* mpirun -np N <self> --worker MODE with LJPERF_DIST_TIMEOUT=timeout. */
static int run_mpi(int np, const char *mode, const char *timeout, const char *log, double *elapsed) {
    char n[8];
    snprintf(n, sizeof n, "%d", np);
    char *argv[32];
    int k = 0;
    argv[k++] = "mpirun";
    if (getuid() == 0) argv[k++] = "--allow-run-as-root";
    char *rest[] = {"--oversubscribe", "--bind-to", "none", "--mca", "btl_vader_single_copy_mechanism", "none",
                    "-x", "LJPERF_DIST_TIMEOUT", "-np", n, g_self, "--worker", (char *)mode, NULL};
    for (int i = 0; rest[i]; i++) argv[k++] = rest[i];
    argv[k] = NULL;
    setenv("LJPERF_DIST_TIMEOUT", timeout, 1);
    int rc = run_cmd(argv, log, 120, elapsed);
    unsetenv("LJPERF_DIST_TIMEOUT");
    return rc;
}

static void test_mpi_collectives(void **state) {
    (void)state;
    if (!have_mpirun()) skip();
    for (int np = 2; np <= 3; np++) {
        char log[1200];
        snprintf(log, sizeof log, "%s/mpi-np%d.log", g_tmp, np);
        double t;
        const int rc = run_mpi(np, "check", "60", log, &t);
        if (rc != 0) fail_msg("mpirun -np %d exited with %d; log %s:\n%s", np, rc, log, slurp(log));
        expect_in_file(log, "all collective checks passed");
    }
}

static void test_mpi_config_mismatch(void **state) {
    (void)state;
    if (!have_mpirun()) skip();
    char log[1200];
    snprintf(log, sizeof log, "%s/mpi-mismatch.log", g_tmp);
    const int rc = run_mpi(2, "mismatch", "60", log, NULL);
    if (rc != 0) fail_msg("mismatch run exited with %d:\n%s", rc, slurp(log));
    expect_in_file(log, "rank 0: init failed as expected: rank 1's run configuration differs from rank 0's");
    expect_in_file(log, "rank 0: llama3-nano seq 64 zero 3; rank 1: llama3-nano seq 64 zero 2");
}

static void test_mpi_dead_and_hung_rank(void **state) {
    (void)state;
    if (!have_mpirun()) skip();
    char log[1200];
    double t;
    snprintf(log, sizeof log, "%s/mpi-hang.log", g_tmp);
    /* 5 s: long enough that a healthy rank on a loaded machine is not taken for a hung one */
    int rc = run_mpi(3, "hang", "5", log, &t);
    if (rc == 0 || rc == -1) fail_msg("hung rank: mpirun exited with %d after %.1f s:\n%s", rc, t, slurp(log));
    expect_in_file(log, "MPI_Barrier has not completed after 5.0 s");
    snprintf(log, sizeof log, "%s/mpi-die.log", g_tmp);
    rc = run_mpi(3, "die", "20", log, &t);
    if (rc == 0 || rc == -1) fail_msg("killed rank: mpirun exited with %d after %.1f s:\n%s", rc, t, slurp(log));
}

/* ---- torchrun-style bootstrap over loopback TCP, with forked ranks ---------------------- */

typedef enum { B_OK, B_WAIT, B_EXIT, B_OP } behaviour;

/* Forks rank `rank` of `world`: bootstraps, touches <dir>/ready.<rank>, then behaves. */
static pid_t spawn_rank(const char *dir, int rank, int world, int port, double timeout, uint64_t hash, behaviour b) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    char path[1300];
    snprintf(path, sizeof path, "%s/rank%d.log", dir, rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 2);
    lj_dist_env env;
    memset(&env, 0, sizeof env);
    env.launcher = LJ_LAUNCHER_TORCHRUN;
    env.rank = rank;
    env.world_size = world;
    env.local_rank = rank;
    env.local_world_size = world;
    snprintf(env.master_addr, sizeof env.master_addr, "127.0.0.1");
    env.master_port = port;
    unsigned char blob[128];
    for (int i = 0; i < 128; i++) blob[i] = rank == 0 ? (unsigned char)(i * 7 + 1) : 0;
    char summary[64];
    snprintf(summary, sizeof summary, "model-%llx", (unsigned long long)hash);
    lj_bootstrap *boot;
    lj_status s = lj_bootstrap_tcp(&boot, &env, hash, summary, timeout, blob, sizeof blob);
    if (s != LJ_OK) {
        fprintf(stderr, "bootstrap error: %s\n", lj_error_message());
        _exit(10 + (int)s);
    }
    for (int i = 0; i < 128; i++)
        if (blob[i] != (unsigned char)(i * 7 + 1)) _exit(20);
    snprintf(path, sizeof path, "%s/ready.%d", dir, rank);
    close(open(path, O_WRONLY | O_CREAT, 0644));
    if (b == B_OK) {
        usleep(200000);
        lj_bootstrap_close(boot);
        _exit(0);
    }
    if (b == B_EXIT) _exit(0); /* gone without a goodbye */
    if (b == B_OP) lj_bootstrap_op_begin(boot, "test_collective");
    sleep(60); /* stuck, as in a collective whose peer is gone: the watchdog must end this */
    _exit(30);
}

/* Waits for pid at most `limit` seconds; returns its exit status, 128 + signal, or -1. */
static int wait_for(pid_t pid, double limit) {
    const double t0 = now();
    int st;
    while (waitpid(pid, &st, WNOHANG) != pid) {
        if (now() - t0 > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(10000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void wait_ready(const char *dir, int rank) {
    char path[1300];
    snprintf(path, sizeof path, "%s/ready.%d", dir, rank);
    struct stat sb;
    for (int i = 0; i < 3000 && stat(path, &sb) != 0; i++) usleep(10000);
    if (stat(path, &sb) != 0) fail_msg("rank %d never finished its bootstrap", rank);
}

static void case_dir(char *dir, size_t n, const char *name) {
    snprintf(dir, n, "%s/%s", g_tmp, name);
    assert_int_equal(lj_mkdir_p(dir), LJ_OK);
    for (int r = 0; r < 4; r++) {
        char p[1300];
        snprintf(p, sizeof p, "%s/ready.%d", dir, r);
        unlink(p);
    }
}

static void log_has(const char *dir, int rank, const char *needle) {
    char p[1300];
    snprintf(p, sizeof p, "%s/rank%d.log", dir, rank);
    expect_in_file(p, needle);
}

static void test_tcp_bootstrap(void **state) {
    (void)state;
    char dir[1100];
    int port;
    /* three healthy ranks: the blob travels, everybody says goodbye */
    case_dir(dir, sizeof dir, "tcp-ok");
    assert_int_equal(lj_launch_free_port(&port), LJ_OK);
    pid_t p[3];
    for (int r = 2; r >= 0; r--) p[r] = spawn_rank(dir, r, 3, port, 30, 42, B_OK);
    for (int r = 0; r < 3; r++) assert_int_equal(wait_for(p[r], 60), 0);

    /* rank 2 has another configuration: all three fail naming it */
    case_dir(dir, sizeof dir, "tcp-mismatch");
    assert_int_equal(lj_launch_free_port(&port), LJ_OK);
    for (int r = 0; r < 3; r++) p[r] = spawn_rank(dir, r, 3, port, 30, r == 2 ? 43 : 42, B_OK);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(wait_for(p[r], 60), 10 + LJ_ERR_FORMAT);
        log_has(dir, r, "rank 2's run configuration differs from rank 0's: rank 0: model-2a; rank 2: model-2b");
    }

    /* only two of three ranks start: rank 0 times out naming rank 2, and tells rank 1 */
    case_dir(dir, sizeof dir, "tcp-missing");
    assert_int_equal(lj_launch_free_port(&port), LJ_OK);
    for (int r = 0; r < 2; r++) p[r] = spawn_rank(dir, r, 3, port, 1.5, 42, B_OK);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(wait_for(p[r], 60), 10 + LJ_ERR_DEVICE);
        log_has(dir, r, "rank(s) 2 of WORLD_SIZE=3 never connected to rank 0");
    }
}

/* torchrun with its agent store: the process that launched the ranks already listens on
 * MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), and the ranks find each other anyway. */
static pid_t spawn_torchrun_rank(const char *dir, int rank, int world, int port) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    char path[1300], v[32];
    snprintf(path, sizeof path, "%s/rank%d.log", dir, rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 2);
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    setenv("GROUP_RANK", "0", 1);
    snprintf(v, sizeof v, "%d", world);
    setenv("WORLD_SIZE", v, 1);
    setenv("LOCAL_WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    setenv("TORCHELASTIC_RUN_ID", "none", 1);
    lj_dist_env env;
    if (lj_dist_env_detect(&env) != LJ_OK) {
        fprintf(stderr, "env error: %s\n", lj_error_message());
        _exit(9);
    }
    unsigned char blob[16] = {0};
    if (rank == 0) memset(blob, 7, sizeof blob);
    lj_bootstrap *boot;
    if (lj_bootstrap_tcp(&boot, &env, 42, "torchrun", 30, blob, sizeof blob) != LJ_OK) {
        fprintf(stderr, "bootstrap error: %s\n", lj_error_message());
        _exit(10);
    }
    for (int i = 0; i < 16; i++)
        if (blob[i] != 7) _exit(20);
    usleep(200000);
    lj_bootstrap_close(boot);
    _exit(0);
}

static void test_tcp_torchrun_agent_store(void **state) {
    (void)state;
    char dir[1100];
    case_dir(dir, sizeof dir, "tcp-agent-store");
    /* the agent's store: a socket listening on MASTER_PORT for the whole bootstrap */
    int store = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int tries = 0; tries < 20; tries++) {
        assert_int_equal(lj_launch_free_port(&port), LJ_OK);
        a.sin_port = htons((uint16_t)port);
        if (port < 65535 && bind(store, (struct sockaddr *)&a, sizeof a) == 0) break;
        port = 0;
    }
    assert_true(port > 0);
    assert_int_equal(listen(store, 4), 0);
    pid_t p[2];
    for (int r = 0; r < 2; r++) p[r] = spawn_torchrun_rank(dir, r, 2, port);
    for (int r = 0; r < 2; r++) assert_int_equal(wait_for(p[r], 60), 0);
    close(store);
}

static void test_tcp_dead_rank(void **state) {
    (void)state;
    char dir[1100];
    int port;
    pid_t p[3];
    /* rank 1 is killed after the bootstrap: ranks 0 and 2, stuck, stop with the message */
    case_dir(dir, sizeof dir, "tcp-killed");
    assert_int_equal(lj_launch_free_port(&port), LJ_OK);
    for (int r = 0; r < 3; r++) p[r] = spawn_rank(dir, r, 3, port, 10, 42, B_WAIT);
    for (int r = 0; r < 3; r++) wait_ready(dir, r);
    kill(p[1], SIGKILL);
    assert_int_equal(wait_for(p[1], 10), 128 + SIGKILL);
    assert_int_equal(wait_for(p[0], 30), LJ_DIST_EXIT_PEER_LOST);
    assert_int_equal(wait_for(p[2], 30), LJ_DIST_EXIT_PEER_LOST);
    log_has(dir, 0, "ljperf: rank 0: rank 1 exited or closed its connection without shutting down");
    log_has(dir, 2, "ljperf: rank 2: rank 0 reports that rank 1 exited");

    /* rank 1 is stopped (SIGSTOP): no heartbeats, the others stop after the 5 s timeout (not
     * shorter: the healthy ranks of a loaded machine must not miss each other's heartbeats) */
    case_dir(dir, sizeof dir, "tcp-stopped");
    assert_int_equal(lj_launch_free_port(&port), LJ_OK);
    for (int r = 0; r < 3; r++) p[r] = spawn_rank(dir, r, 3, port, 5, 42, B_WAIT);
    for (int r = 0; r < 3; r++) wait_ready(dir, r);
    kill(p[1], SIGSTOP);
    assert_int_equal(wait_for(p[0], 30), LJ_DIST_EXIT_PEER_LOST);
    assert_int_equal(wait_for(p[2], 30), LJ_DIST_EXIT_PEER_LOST);
    kill(p[1], SIGKILL);
    kill(p[1], SIGCONT);
    wait_for(p[1], 10);
    log_has(dir, 0, "rank 1 sent no heartbeat within the timeout");
    log_has(dir, 2, "rank 0 reports that rank 1 sent no heartbeat");

    /* rank 0 exits without a goodbye right after the bootstrap: rank 1 stops */
    case_dir(dir, sizeof dir, "tcp-root-gone");
    assert_int_equal(lj_launch_free_port(&port), LJ_OK);
    p[0] = spawn_rank(dir, 0, 2, port, 10, 42, B_EXIT);
    p[1] = spawn_rank(dir, 1, 2, port, 10, 42, B_WAIT);
    assert_int_equal(wait_for(p[0], 30), 0);
    assert_int_equal(wait_for(p[1], 30), LJ_DIST_EXIT_PEER_LOST);
    log_has(dir, 1, "ljperf: rank 1: rank 0 exited or closed its connection");

    /* a blocking call past its deadline ends its rank, and then its peer */
    case_dir(dir, sizeof dir, "tcp-op");
    assert_int_equal(lj_launch_free_port(&port), LJ_OK);
    p[0] = spawn_rank(dir, 0, 2, port, 2, 42, B_WAIT);
    p[1] = spawn_rank(dir, 1, 2, port, 2, 42, B_OP);
    assert_int_equal(wait_for(p[1], 30), LJ_DIST_EXIT_PEER_LOST);
    assert_int_equal(wait_for(p[0], 30), LJ_DIST_EXIT_PEER_LOST);
    log_has(dir, 1, "test_collective has not completed after 2.0 s");
}

/* ---- in-process: environment parsing and the single-rank path ------------------------- */

static const char *const ENV_VARS[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                       "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                       "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK",
                                       "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS",
                                       "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE",
                                       "TORCHELASTIC_USE_AGENT_STORE", "LJPERF_BOOTSTRAP_PORT", NULL};

static void clear_env(void) {
    for (int i = 0; ENV_VARS[i]; i++) unsetenv(ENV_VARS[i]);
}

static void test_env_detect(void **state) {
    (void)state;
    lj_dist_env e;
    clear_env();
    assert_int_equal(lj_dist_env_detect(&e), LJ_OK);
    assert_true(e.launcher == LJ_LAUNCHER_NONE && e.rank == 0 && e.world_size == 1);
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_ADDR", "node7", 1);
    setenv("MASTER_PORT", "29500", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_OK);
    assert_true(e.launcher == LJ_LAUNCHER_TORCHRUN && e.rank == 1 && e.world_size == 4 && e.local_rank == 1);
    assert_true(strcmp(e.master_addr, "node7") == 0 && e.master_port == 29500);
    setenv("RANK", "abc", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "RANK='abc'"));
    setenv("RANK", "4", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "rank 4"));
    setenv("RANK", "0", 1);
    unsetenv("MASTER_ADDR");
    assert_int_equal(lj_dist_env_detect(&e), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "MASTER_ADDR"));
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "70000", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "MASTER_PORT"));
    clear_env();
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_OK);
    assert_true(e.launcher == LJ_LAUNCHER_MPI && e.rank == 2 && e.world_size == 3 && e.local_rank == 0);
    clear_env();
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_STEP_NUM_TASKS", "8", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_OK);
    assert_true(e.launcher == LJ_LAUNCHER_SLURM && e.rank == 5 && e.world_size == 8);
    /* srun's ranks per node: "2(x3),1" gives 2 on node 2 and 1 on node 3 */
    setenv("SLURM_STEP_TASKS_PER_NODE", "2(x3),1", 1);
    setenv("SLURM_NODEID", "2", 1);
    setenv("SLURM_LOCALID", "1", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_OK);
    assert_true(e.local_rank == 1 && e.local_world_size == 2);
    setenv("SLURM_NODEID", "3", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "local rank 1, which is not below its 1 ranks on this node"));
    clear_env();

    /* what torchrun says against itself, and against mpirun's variables */
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_RANK", "2", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "LOCAL_RANK=2, which is not below LOCAL_WORLD_SIZE=2"));
    setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "4", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "LOCAL_WORLD_SIZE=4, more than its world size 2"));
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "mpirun started 4 ranks"));
    unsetenv("OMPI_COMM_WORLD_SIZE");
    /* torchrun's agent store holds MASTER_PORT: the bootstrap takes the next port, or the one given */
    assert_int_equal(lj_dist_env_detect(&e), LJ_OK);
    assert_int_equal(e.bootstrap_port, 29500);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_OK);
    assert_int_equal(e.bootstrap_port, 29501);
    setenv("LJPERF_BOOTSTRAP_PORT", "31000", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_OK);
    assert_int_equal(e.bootstrap_port, 31000);
    setenv("LJPERF_BOOTSTRAP_PORT", "29500", 1);
    assert_int_equal(lj_dist_env_detect(&e), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "agent store"));
    clear_env();

    /* the MPI backend refuses torchrun-style ranks, naming mpirun */
    memset(&e, 0, sizeof e);
    e.launcher = LJ_LAUNCHER_TORCHRUN;
    e.world_size = 2;
    snprintf(e.master_addr, sizeof e.master_addr, "127.0.0.1");
    e.master_port = 1;
    lj_dist_options opt;
    lj_dist_options_default(&opt);
    lj_dist *d;
    assert_int_equal(lj_dist_init_env(&d, &e, &opt), LJ_ERR_UNSUPPORTED);
    assert_null(d);
    assert_non_null(strstr(lj_error_message(), "mpirun -np 2"));
}

static void test_single_rank(void **state) {
    (void)state;
    clear_env();
    lj_dist_options opt;
    lj_dist_options_default(&opt);
    lj_dist *d;
    assert_int_equal(lj_dist_init(&d, &opt), LJ_OK);
    assert_int_equal(lj_dist_get_backend(d), LJ_DIST_SINGLE);
    assert_true(lj_dist_rank(d) == 0 && lj_dist_world_size(d) == 1 && lj_dist_local_rank(d) == 0);
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0};
    assert_int_equal(lj_dist_all_reduce(d, a, b, 5, LJ_DTYPE_F32, NULL), LJ_OK);
    assert_memory_equal(a, b, sizeof a);
    memset(b, 0, sizeof b);
    assert_int_equal(lj_dist_reduce_scatter(d, a, b, 5, LJ_DTYPE_F32, NULL), LJ_OK);
    assert_memory_equal(a, b, sizeof a);
    memset(b, 0, sizeof b);
    assert_int_equal(lj_dist_all_gather(d, a, b, 3, LJ_DTYPE_F32, NULL), LJ_OK);
    assert_true(b[2] == 3 && b[3] == 0);
    assert_int_equal(lj_dist_all_reduce(d, a, a, 5, LJ_DTYPE_F32, NULL), LJ_OK); /* in place */
    assert_true(a[4] == 5);
    uint16_t h[2] = {lj_f32_to_bf16(1.5f), lj_f32_to_bf16(-2)}, g[2] = {0, 0};
    assert_int_equal(lj_dist_reduce(d, h, g, 2, LJ_DTYPE_BF16, 0, NULL), LJ_OK);
    assert_memory_equal(h, g, sizeof h);
    assert_int_equal(lj_dist_broadcast(d, a, 5, LJ_DTYPE_F32, 0, NULL), LJ_OK);
    assert_int_equal(lj_dist_barrier(d), LJ_OK);
    lj_dist_ticket t1, t2;
    assert_int_equal(lj_dist_mark(d, &t1), LJ_OK);
    assert_int_equal(lj_dist_mark(d, &t2), LJ_OK);
    assert_true(t2 > t1);
    assert_int_equal(lj_dist_wait(d, t1, NULL), LJ_OK);
    assert_int_equal(lj_dist_synchronize(d), LJ_OK);
    lj_dist_free(d);

    /* torchrun-style variables with WORLD_SIZE=1 need no MASTER_ADDR and no MPI */
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    assert_int_equal(lj_dist_init(&d, &opt), LJ_OK);
    assert_int_equal(lj_dist_get_backend(d), LJ_DIST_SINGLE);
    lj_dist_free(d);
    clear_env();
    /* FNV-1a test vectors (the empty string and "a") */
    assert_true(lj_hash(LJ_HASH_INIT, "", 0) == 0xcbf29ce484222325ULL);
    assert_true(lj_hash(LJ_HASH_INIT, "a", 1) == 0xaf63dc4c8601ec8cULL);
}

/* ---- main ----------------------------------------------------------------------------------- */

static int nccl_main(int n) {
    lj_launch_options o;
    lj_launch_options_default(&o);
    o.nproc_per_node = n;
    o.exe = g_self;
    o.kill_grace_sec = 10;
    setenv("LJ_TEST_BACKEND", "nccl", 1);
    char *argv[] = {g_self, "--worker", "check", NULL};
    return lj_launch_run(&o, argv);
}

int main(int argc, char **argv) {
    ssize_t len = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    g_self[len > 0 ? len : 0] = '\0';
    if (argc >= 3 && strcmp(argv[1], "--worker") == 0) return worker_main(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "--nccl") == 0) return nccl_main(atoi(argv[2]));
    const char *tmp = getenv("LJ_TEST_TMP");
    snprintf(g_tmp, sizeof g_tmp, "%s/dist", tmp && *tmp ? tmp : "/tmp/ljperf-test");
    if (lj_mkdir_p(g_tmp) != LJ_OK) {
        fprintf(stderr, "%s\n", lj_error_message());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_detect),      cmocka_unit_test(test_single_rank),
        cmocka_unit_test(test_tcp_bootstrap),   cmocka_unit_test(test_tcp_dead_rank),
        cmocka_unit_test(test_tcp_torchrun_agent_store),
        cmocka_unit_test(test_mpi_collectives), cmocka_unit_test(test_mpi_config_mismatch),
        cmocka_unit_test(test_mpi_dead_and_hung_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_launch.c: the --nproc-per-node launcher (parallel/launch.c): the flag is removed from the
 * workers' arguments, each worker gets RANK / LOCAL_RANK / WORLD_SIZE / LOCAL_WORLD_SIZE /
 * MASTER_ADDR / MASTER_PORT, SIGTERM and SIGINT reach the workers, the first failure (exit
 * status or signal) is returned and the others are stopped, and a launcher inside a launched
 * rank is refused. Workers are tiny /bin/sh scripts, or this program itself (`test_launch
 * train ...` writes what it was given). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "parallel/dist.h"

static char g_dir[1024];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static char *read_text(const char *name) {
    char path[1200], *text = NULL;
    size_t n;
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    if (lj_file_read_all(path, &text, &n) != LJ_OK) return NULL;
    return text;
}

static int exists(const char *name) {
    char path[1200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    return stat(path, &sb) == 0;
}

static void clean(const char *const *names) {
    for (int i = 0; names[i]; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", g_dir, names[i]);
        unlink(path);
    }
}

/* Runs `script` with /bin/sh in n workers. */
static int launch_sh(int n, const char *script, double grace) {
    lj_launch_options o;
    lj_launch_options_default(&o);
    o.nproc_per_node = n;
    o.exe = "/bin/sh";
    o.kill_grace_sec = grace;
    o.quiet = 1;
    char *argv[] = {"sh", "-c", (char *)script, NULL};
    return lj_launch_run(&o, argv);
}

static void test_strip_flag(void **state) {
    (void)state;
    char *argv[] = {"--model", "x", "--nproc-per-node", "4", "--seq-length", "8", "--nproc-per-node=2",
                    "--nproc_per_node", "3", "--lr", "1", NULL};
    const int n = lj_launch_strip_flag(11, argv);
    const char *want[] = {"--model", "x", "--seq-length", "8", "--lr", "1"};
    assert_int_equal(n, 6);
    for (int i = 0; i < n; i++) assert_string_equal(argv[i], want[i]);
    assert_null(argv[n]);
    int port = 0;
    assert_int_equal(lj_launch_free_port(&port), LJ_OK);
    assert_true(port > 0 && port < 65536);
}

static void test_environment(void **state) {
    (void)state;
    const char *files[] = {"w0", "w1", "w2", NULL};
    clean(files);
    char *omp = getenv("OMP_NUM_THREADS") ? lj_strdup(getenv("OMP_NUM_THREADS")) : NULL;
    unsetenv("OMP_NUM_THREADS");
    assert_int_equal(launch_sh(3, "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT "
                                  "$OMP_NUM_THREADS\" > \"$LJ_LAUNCH_DIR/w$RANK\"",
                               5),
                     0);
    if (omp) setenv("OMP_NUM_THREADS", omp, 1);
    free(omp);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN), threads = cores / 3 > 1 ? cores / 3 : 1;
    int port0 = -1;
    for (int r = 0; r < 3; r++) {
        char name[8];
        snprintf(name, sizeof name, "w%d", r);
        char *t = read_text(name);
        assert_non_null(t);
        int rank, local, world, lworld, port;
        long nthreads;
        char addr[64];
        assert_int_equal(sscanf(t, "%d %d %d %d %63s %d %ld", &rank, &local, &world, &lworld, addr, &port, &nthreads), 7);
        assert_true(rank == r && local == r && world == 3 && lworld == 3 && port > 0 && nthreads == threads);
        assert_string_equal(addr, "127.0.0.1");
        if (port0 < 0) port0 = port;
        assert_int_equal(port, port0);
        free(t);
    }
}

static void test_failures(void **state) {
    (void)state;
    /* rank 1 fails with 7: that is the result, and the sleeping ranks are stopped after the grace */
    double t0 = now();
    assert_int_equal(launch_sh(3, "if [ \"$RANK\" = 1 ]; then exit 7; fi; exec sleep 60", 0.3), 7);
    assert_true(now() - t0 < 30);
    /* a rank killed by a signal reports 128 + signal */
    t0 = now();
    assert_int_equal(launch_sh(2, "if [ \"$RANK\" = 0 ]; then kill -9 $$; fi; exec sleep 60", 0.3), 128 + SIGKILL);
    assert_true(now() - t0 < 30);
    /* a rank that ignores SIGTERM is killed after a second grace period */
    t0 = now();
    assert_int_equal(launch_sh(2, "trap '' TERM; if [ \"$RANK\" = 0 ]; then exit 5; fi; exec sleep 3", 0.3), 5);
    assert_int_equal(launch_sh(2, "exit 0", 0.3), 0);
    /* a program that cannot be run */
    lj_launch_options o;
    lj_launch_options_default(&o);
    o.nproc_per_node = 2;
    o.exe = "/nonexistent/ljperf";
    o.quiet = 1;
    char *argv[] = {"ljperf", NULL};
    assert_int_equal(lj_launch_run(&o, argv), 127);
}

/* SIGTERM / SIGINT sent to the launcher reach every worker. */
static void forward(int sig, const char *trap_name) {
    const char *files[] = {"ready0", "ready1", "got0", "got1", NULL};
    clean(files);
    char script[512];
    snprintf(script, sizeof script,
             "trap 'echo caught > \"$LJ_LAUNCH_DIR/got$RANK\"; exit 0' %s; touch \"$LJ_LAUNCH_DIR/ready$RANK\"; "
             "i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; exit 9",
             trap_name);
    pid_t launcher = fork();
    if (launcher == 0) _exit(launch_sh(2, script, 5));
    for (int i = 0; i < 2000 && !(exists("ready0") && exists("ready1")); i++) usleep(10000);
    assert_true(exists("ready0") && exists("ready1"));
    kill(launcher, sig);
    int st;
    assert_int_equal(waitpid(launcher, &st, 0), launcher);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(exists("got0") && exists("got1"));
}

static void test_signal_forwarding(void **state) {
    (void)state;
    forward(SIGTERM, "TERM");
    forward(SIGINT, "INT");
}

static int have_mpirun(void) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execlp("mpirun", "mpirun", "--version", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* lj_launch re-runs this program as `test_launch train <args without the flag>`, directly
 * (GPU ranks) or through mpirun (CPU ranks). */
static void test_relaunch_self(void **state) {
    (void)state;
    for (int mpi = 0; mpi <= 1; mpi++) {
        if (mpi && !have_mpirun()) break;
        const char *files[] = {"args0", "args1", NULL};
        clean(files);
        char *args[] = {"--model", "llama3-nano", "--nproc-per-node", "2", "--seq-length", "16", NULL};
        assert_int_equal(lj_launch(2, mpi ? LJ_DIST_MPI : LJ_DIST_NCCL, "train", 6, args), 0);
        for (int r = 0; r < 2; r++) {
            char name[8];
            snprintf(name, sizeof name, "args%d", r);
            char *t = read_text(name);
            assert_non_null(t);
            char want[128];
            snprintf(want, sizeof want, "rank %d of 2: train --model llama3-nano --seq-length 16\n", r);
            assert_string_equal(t, want);
            free(t);
        }
    }
    /* refused inside an already launched rank */
    char *args[] = {"--nproc-per-node", "2", NULL};
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "1234", 1);
    assert_int_equal(lj_launch(2, LJ_DIST_NCCL, "train", 2, args), 2);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    assert_int_equal(lj_launch(0, LJ_DIST_NCCL, "train", 2, args), 2);
}

/* A worker started by test_relaunch_self: writes its rank and arguments. */
static int child_main(int argc, char **argv) {
    char path[1200], line[512];
    const char *rank = getenv("RANK"), *world = getenv("WORLD_SIZE"), *dir = getenv("LJ_LAUNCH_DIR");
    if (!rank) rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!world) world = getenv("OMPI_COMM_WORLD_SIZE");
    if (!rank || !world || !dir) return 1;
    int n = snprintf(line, sizeof line, "rank %s of %s:", rank, world);
    for (int i = 1; i < argc; i++) n += snprintf(line + n, sizeof line - (size_t)n, " %s", argv[i]);
    snprintf(line + n, sizeof line - (size_t)n, "\n");
    snprintf(path, sizeof path, "%s/args%s", dir, rank);
    return lj_file_write_atomic(path, line, strlen(line)) == LJ_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "train") == 0) return child_main(argc, argv);
    const char *tmp = getenv("LJ_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/launch", tmp && *tmp ? tmp : "/tmp/ljperf-test");
    if (lj_mkdir_p(g_dir) != LJ_OK) return 1;
    setenv("LJ_LAUNCH_DIR", g_dir, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strip_flag),        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_failures),          cmocka_unit_test(test_signal_forwarding),
        cmocka_unit_test(test_relaunch_self),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

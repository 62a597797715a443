/* launch.c: `ljperf train|benchmark --nproc-per-node N`, like `torchrun --standalone`: starts
 * N local workers of this program with torchrun-style variables (or through mpirun for CPU
 * ranks), forwards SIGINT / SIGTERM / SIGHUP to them, waits, and returns the first failure
 * (stopping the rest after a grace time). */
#define _GNU_SOURCE /* execvpe */
#include "base/fs.h"
#include "parallel/dist.h"

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

void lj_launch_options_default(lj_launch_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->nproc_per_node = 1;
    opt->kill_grace_sec = 30.0;
}

int lj_launch_strip_flag(int argc, char **argv) {
    int out = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--nproc-per-node") == 0 || strcmp(a, "--nproc_per_node") == 0) {
            i++; /* and its value */
            continue;
        }
        if (strncmp(a, "--nproc-per-node=", 17) == 0 || strncmp(a, "--nproc_per_node=", 17) == 0) continue;
        argv[out++] = argv[i];
    }
    if (out < argc) argv[out] = NULL;
    return out;
}

lj_status lj_launch_free_port(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return lj_fail(LJ_ERR_DEVICE, "socket failed: %s", strerror(errno));
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        int e = errno;
        close(fd);
        return lj_fail(LJ_ERR_DEVICE, "finding a free TCP port (bind to port 0) failed: %s", strerror(e));
    }
    close(fd);
    *port = ntohs(a.sin_port);
    return LJ_OK;
}

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The environment of a worker: this process's without any torchrun-style variables; then
 * those of `rank` of `n` when port > 0 (not under mpirun); OMP_NUM_THREADS if unset. */
static char **worker_env(int rank, int n, const char *addr, int port) {
    static const char *const ours[] = {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "LOCAL_WORLD_SIZE=",
                                       "MASTER_ADDR=", "MASTER_PORT=", "GROUP_RANK="};
    const int nours = (int)(sizeof ours / sizeof ours[0]);
    size_t count = 0;
    while (environ[count]) count++;
    char **env = lj_calloc(count + (size_t)nours + 2, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < count; i++) {
        int skip = 0;
        for (int j = 0; j < nours && !skip; j++) skip = strncmp(environ[i], ours[j], strlen(ours[j])) == 0;
        if (!skip) env[k++] = lj_strdup(environ[i]);
    }
    const int values[] = {rank, rank, n, n, -1, port, 0};
    for (int j = 0; j < nours && port > 0; j++) {
        char buf[64];
        if (values[j] < 0) {
            char *a = lj_malloc(strlen(ours[j]) + strlen(addr) + 1);
            strcpy(a, ours[j]);
            strcat(a, addr);
            env[k++] = a;
            continue;
        }
        snprintf(buf, sizeof buf, "%s%d", ours[j], values[j]);
        env[k++] = lj_strdup(buf);
    }
    const char *omp = getenv("OMP_NUM_THREADS");
    if (!omp || !*omp) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        char buf[64];
        snprintf(buf, sizeof buf, "OMP_NUM_THREADS=%ld", cores / n > 1 ? cores / n : 1);
        env[k++] = lj_strdup(buf);
    }
    env[k] = NULL;
    return env;
}

static void free_env(char **env) {
    for (size_t i = 0; env && env[i]; i++) free(env[i]);
    free(env);
}

static void signal_alive(const pid_t *pids, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) kill(pids[i], sig);
}

/* This program's real path (mpirun cannot use /proc/self/exe: it would name orted). */
static const char *self_exe(char *buf, size_t n) {
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    if (len <= 0) return "/proc/self/exe";
    buf[len] = '\0';
    return buf;
}

/* `mpirun ... -np N exe child_argv[1..]`, heap-allocated (the strings are borrowed or static). */
static char **mpirun_argv(int n, const char *exe, char *const child_argv[], char *np, size_t np_len) {
    int count = 0;
    while (child_argv[count]) count++;
    char **a = lj_calloc((size_t)count + 16, sizeof *a);
    int k = 0;
    a[k++] = "mpirun";
    if (getuid() == 0) a[k++] = "--allow-run-as-root";
    if (n > sysconf(_SC_NPROCESSORS_ONLN)) a[k++] = "--oversubscribe";
    a[k++] = "--bind-to";
    a[k++] = "none";
    a[k++] = "-x";
    a[k++] = "OMP_NUM_THREADS";
    a[k++] = "-np";
    snprintf(np, np_len, "%d", n);
    a[k++] = np;
    a[k++] = (char *)exe;
    for (int i = 1; i < count; i++) a[k++] = child_argv[i];
    a[k] = NULL;
    return a;
}

int lj_launch_run(const lj_launch_options *opt, char *const child_argv[]) {
    const int n = opt->nproc_per_node;
    LJ_ASSERT(n >= 1 && child_argv && child_argv[0]);
    char self[LJ_PATH_MAX];
    const char *exe = opt->exe ? opt->exe : self_exe(self, sizeof self);
    const double grace = opt->kill_grace_sec > 0 ? opt->kill_grace_sec : 30.0;
    /* the processes this launcher starts: the N workers, or one mpirun */
    const int nchild = opt->mpirun ? 1 : n;
    int port = opt->mpirun ? 0 : opt->master_port; /* mpirun's workers get no torchrun-style variables */
    const char *addr = opt->master_addr ? opt->master_addr : "127.0.0.1";
    if (!opt->mpirun && port <= 0 && lj_launch_free_port(&port) != LJ_OK) {
        fprintf(stderr, "ljperf launcher: %s\n", lj_error_message());
        return 1;
    }
    char np[16];
    char **mpi_args = opt->mpirun ? mpirun_argv(n, exe, child_argv, np, sizeof np) : NULL;
    char ***envs = lj_calloc((size_t)nchild, sizeof *envs);
    for (int i = 0; i < nchild; i++) envs[i] = worker_env(i, n, addr, port);

    /* Block the signals we handle: they are taken with sigtimedwait, never lost to a race. */
    sigset_t handled, old;
    sigemptyset(&handled);
    sigaddset(&handled, SIGINT);
    sigaddset(&handled, SIGTERM);
    sigaddset(&handled, SIGHUP);
    sigaddset(&handled, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &handled, &old);

    pid_t *pids = lj_calloc((size_t)nchild, sizeof *pids);
    const pid_t parent = getpid();
    int alive = 0, result = 0;
    for (int i = 0; i < nchild; i++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGTERM); /* the launcher dies: so do the workers */
            if (getppid() != parent) _exit(1);
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            if (mpi_args) {
                execvpe("mpirun", mpi_args, envs[i]);
                fprintf(stderr, "ljperf launcher: cannot run mpirun: %s (CPU ranks need Open MPI's mpirun on PATH)\n",
                        strerror(errno));
            } else {
                execve(exe, child_argv, envs[i]);
                fprintf(stderr, "ljperf launcher: cannot run %s: %s\n", exe, strerror(errno));
            }
            _exit(127);
        }
        if (pid < 0) {
            fprintf(stderr, "ljperf launcher: fork failed: %s\n", strerror(errno));
            signal_alive(pids, nchild, SIGTERM);
            result = 1;
            break;
        }
        pids[i] = pid;
        alive++;
    }
    if (!opt->quiet && result == 0) {
        if (mpi_args) fprintf(stderr, "ljperf launcher: started %d workers with mpirun\n", n);
        else fprintf(stderr, "ljperf launcher: started %d workers (MASTER_ADDR=%s MASTER_PORT=%d)\n", n, addr, port);
    }

    double term_at = INFINITY, kill_at = INFINITY;
    int stop_requests = 0;
    while (alive > 0) {
        for (int i = 0; i < nchild; i++) {
            int st;
            if (pids[i] <= 0 || waitpid(pids[i], &st, WNOHANG) != pids[i]) continue;
            pids[i] = 0;
            alive--;
            const int code = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
            if (code != 0 && result == 0) {
                result = code;
                if (alive > 0 && isinf(term_at)) term_at = now_sec() + grace;
                if (!opt->quiet) {
                    char who[32];
                    if (mpi_args) snprintf(who, sizeof who, "mpirun");
                    else snprintf(who, sizeof who, "rank %d", i);
                    if (WIFSIGNALED(st))
                        fprintf(stderr, "ljperf launcher: %s was killed by signal %d (%s)", who, WTERMSIG(st),
                                strsignal(WTERMSIG(st)));
                    else
                        fprintf(stderr, "ljperf launcher: %s exited with status %d", who, code);
                    if (alive > 0) fprintf(stderr, "; the other ranks get %.0f s to stop on their own", grace);
                    fputc('\n', stderr);
                }
            }
        }
        if (alive == 0) break;
        const double now = now_sec();
        if (now >= term_at) {
            if (!opt->quiet) fprintf(stderr, "ljperf launcher: stopping the remaining %d rank(s) (SIGTERM)\n", alive);
            signal_alive(pids, nchild, SIGTERM);
            term_at = INFINITY;
            kill_at = now + grace;
        } else if (now >= kill_at) {
            if (!opt->quiet) fprintf(stderr, "ljperf launcher: killing the remaining %d rank(s) (SIGKILL)\n", alive);
            signal_alive(pids, nchild, SIGKILL);
            kill_at = INFINITY;
        }
        struct timespec tick = {0, 50 * 1000 * 1000};
        siginfo_t info;
        const int sig = sigtimedwait(&handled, &info, &tick);
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
            /* mpirun ends the job on SIGINT/SIGTERM (and exits non-zero) but forwards SIGUSR1 to
             * every rank: the first stop request goes through as SIGUSR1, which train handles like
             * SIGTERM (save, exit 0); a second one is passed on as it is */
            const int fwd = mpi_args && stop_requests++ == 0 ? SIGUSR1 : sig;
            if (!opt->quiet)
                fprintf(stderr, "ljperf launcher: forwarding %s to %d process(es)%s\n", strsignal(sig), alive,
                        fwd != sig ? " (to the ranks as SIGUSR1 through mpirun; again to stop at once)" : "");
            signal_alive(pids, nchild, fwd);
        }
    }
    /* take any signal that arrived at the very end, then restore the caller's mask */
    struct timespec zero = {0, 0};
    while (sigtimedwait(&handled, NULL, &zero) > 0) {}
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    for (int i = 0; i < nchild; i++) free_env(envs[i]);
    free(envs);
    free(pids);
    free(mpi_args);
    return result;
}

int lj_launch(int nproc_per_node, lj_dist_backend backend, const char *command, int argc, char **argv) {
    return lj_launch_at(nproc_per_node, backend, NULL, 0, command, argc, argv);
}

int lj_launch_at(int nproc_per_node, lj_dist_backend backend, const char *master_addr, int master_port,
                 const char *command, int argc, char **argv) {
    if (nproc_per_node < 1) {
        fprintf(stderr, "ljperf %s: --nproc-per-node must be at least 1, got %d\n", command, nproc_per_node);
        return 2;
    }
    lj_dist_env env;
    if (lj_dist_env_detect(&env) != LJ_OK) {
        fprintf(stderr, "ljperf %s: %s\n", command, lj_error_message());
        return 1;
    }
    if (env.launcher != LJ_LAUNCHER_NONE && env.world_size != 1) {
        fprintf(stderr,
                "ljperf %s: --nproc-per-node starts its own ranks, but this process is already one of %d ranks "
                "started by %s: use one launcher, not both\n",
                command, env.world_size, lj_launcher_name(env.launcher));
        return 2;
    }
    char **args = lj_calloc((size_t)argc + 3, sizeof *args);
    args[0] = "ljperf";
    args[1] = (char *)command;
    for (int i = 0; i < argc; i++) args[2 + i] = argv[i];
    const int kept = lj_launch_strip_flag(argc, args + 2);
    args[2 + kept] = NULL;
    lj_launch_options opt;
    lj_launch_options_default(&opt);
    opt.nproc_per_node = nproc_per_node;
    opt.mpirun = backend == LJ_DIST_MPI;
    opt.master_addr = master_addr;
    opt.master_port = master_port;
    const int rc = lj_launch_run(&opt, args);
    free(args);
    return rc;
}

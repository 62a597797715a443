/* base.c: error messages, logging, host allocation, dtypes, RNG, timing and file helpers. */
#include "base/base.h"

#include "base/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Every file format ljperf reads and writes (safetensors, Megatron .bin/.idx, llm.c shards, the
 * training state) stores little-endian integers and floats, and the readers memcpy them into
 * native ones: the host must be little-endian, as x86-64 and aarch64 Linux are. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "ljperf's file readers need a little-endian host");

static _Thread_local char g_error[2048];
static _Thread_local int g_error_printed; /* g_error is out (lj_error_print); a new error clears it */
static char g_command[32] = "?";
static int g_quiet;

lj_status lj_fail(lj_status code, const char *fmt, ...) {
    /* formatted aside first: the arguments may include lj_error_message() itself */
    char buf[sizeof g_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(g_error, buf, sizeof g_error);
    g_error_printed = 0;
    return code;
}

void lj_error_prefix(const char *fmt, ...) {
    char prefix[1024], old[sizeof g_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_error, sizeof old);
    /* the prefix first; what does not fit of the old message is cut (a message, not a path) */
    snprintf(g_error, sizeof g_error, "%.1000s: %.1000s", prefix, old);
}

const char *lj_error_message(void) { return g_error; }


void lj_set_command(const char *cmd) { snprintf(g_command, sizeof g_command, "%s", cmd); }

void lj_error_print(int rank, int world_size) {
    if (g_error_printed) return;
    g_error_printed = 1;
    if (world_size > 1 && rank != 0)
        fprintf(stderr, "ljperf %s (rank %d): %s\n", g_command, rank, g_error);
    else
        fprintf(stderr, "ljperf %s: %s\n", g_command, g_error);
    fflush(stderr);
}

void lj_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    fprintf(stderr, "ljperf: internal error at %s:%d: assertion '%s' failed", file, line, cond);
    if (fmt && fmt[0]) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
    abort();
}

void lj_log_set_quiet(int quiet) { g_quiet = quiet; }
int lj_log_is_quiet(void) { return g_quiet; }

void lj_log_info(const char *fmt, ...) {
    if (g_quiet) return;
    fflush(stdout); /* keep the order of stdout and stderr lines when both go to one pipe */
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void lj_log_warn(const char *fmt, ...) {
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    fputs("warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void *lj_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    LJ_ASSERT(p != NULL, "out of host memory (%zu bytes)", bytes);
    return p;
}

void *lj_calloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    LJ_ASSERT(p != NULL, "out of host memory (%zu x %zu bytes)", count, size);
    return p;
}

void *lj_realloc(void *ptr, size_t bytes) {
    void *p = realloc(ptr, bytes ? bytes : 1);
    LJ_ASSERT(p != NULL, "out of host memory (%zu bytes)", bytes);
    return p;
}

char *lj_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = lj_malloc(n);
    memcpy(d, s, n);
    return d;
}

size_t lj_dtype_size(lj_dtype dtype) {
    switch (dtype) {
    case LJ_DTYPE_F32: return 4;
    case LJ_DTYPE_BF16: return 2;
    case LJ_DTYPE_F16: return 2;
    case LJ_DTYPE_I32: return 4;
    case LJ_DTYPE_U16: return 2;
    }
    LJ_ASSERT(0, "bad dtype %d", (int)dtype);
}

const char *lj_dtype_name(lj_dtype dtype) {
    switch (dtype) {
    case LJ_DTYPE_F32: return "F32";
    case LJ_DTYPE_BF16: return "BF16";
    case LJ_DTYPE_F16: return "F16";
    case LJ_DTYPE_I32: return "I32";
    case LJ_DTYPE_U16: return "U16";
    }
    return "?";
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void lj_rng_seed(lj_rng *rng, uint64_t seed) {
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t lj_rng_u64(lj_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float lj_rng_uniform(lj_rng *rng) { return (float)(lj_rng_u64(rng) >> 40) * (1.0f / 16777216.0f); }

uint64_t lj_rng_below(lj_rng *rng, uint64_t n) {
    LJ_ASSERT(n > 0);
    /* Rejection sampling so that every value is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = lj_rng_u64(rng);
    while (x >= limit);
    return x % n;
}

double lj_rng_normal(lj_rng *rng) {
    double u1 = ((double)(lj_rng_u64(rng) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(lj_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double lj_time_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

lj_status lj_file_read_all(const char *path, char **data, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return lj_fail(LJ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = lj_malloc(cap + 1);
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        cap *= 2;
        buf = lj_realloc(buf, cap + 1);
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return lj_fail(LJ_ERR_IO, "%s: read error", path);
    }
    buf[n] = '\0';
    *data = buf;
    if (size) *size = n;
    return LJ_OK;
}

/* data written straight into fd; 0 or the errno of the failure. */
static int write_all(int fd, const void *data, size_t size) {
    const char *p = data;
    while (size > 0) {
        const ssize_t w = write(fd, p, size);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        p += w;
        size -= (size_t)w;
    }
    return 0;
}

lj_status lj_file_write_atomic(const char *path, const void *data, size_t size) {
    struct stat st, to;
    if (!path || !path[0]) return lj_fail(LJ_ERR_IO, "an empty file name: give a file to write");
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        if (stat(path, &to) != 0)
            return lj_fail(LJ_ERR_IO, "%s: a symbolic link that leads nowhere (%s): remove it or give another file", path,
                           strerror(errno));
        char *target = S_ISREG(to.st_mode) ? realpath(path, NULL) : NULL;
        if (target) { /* a file's link: the file is replaced, the link stays */
            const lj_status s = lj_file_write_atomic(target, data, size);
            free(target);
            return s;
        }
        st = to; /* /dev/stdout and the like: what it leads to */
    } else if (lstat(path, &st) != 0) {
        st.st_mode = S_IFREG; /* a new file */
    }
    if (S_ISDIR(st.st_mode)) return lj_fail(LJ_ERR_IO, "%s: is a directory: give a file name", path);
    if (!S_ISREG(st.st_mode)) { /* a FIFO, a device: written through */
        const int fd = open(path, O_WRONLY);
        const int err = fd < 0 ? errno : write_all(fd, data, size);
        if (fd >= 0 && close(fd) != 0 && !err) return lj_fail(LJ_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        if (err) return lj_fail(LJ_ERR_IO, "%s: write failed: %s", path, strerror(err));
        return LJ_OK;
    }
    size_t len = strlen(path);
    char *tmp = lj_malloc(len + 32);
    snprintf(tmp, len + 32, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        lj_status s = lj_fail(LJ_ERR_IO, "%s: cannot create it (as %s first): %s", path, tmp, strerror(errno));
        free(tmp);
        return s;
    }
    const char *p = data;
    size_t left = size;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            lj_status s = lj_fail(LJ_ERR_IO, "%s: write failed (as %s; nothing replaced): %s", path, tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            free(tmp);
            return s;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        lj_status s = lj_fail(LJ_ERR_IO, "%s: cannot flush (as %s; nothing replaced): %s", path, tmp, strerror(errno));
        unlink(tmp);
        free(tmp);
        return s;
    }
    if (rename(tmp, path) != 0) {
        lj_status s = lj_fail(LJ_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return s;
    }
    free(tmp);
    return LJ_OK;
}

lj_status lj_mkdir_p(const char *path) {
    char *buf = lj_strdup(path);
    size_t len = strlen(buf);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                lj_status s = lj_fail(LJ_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
                free(buf);
                return s;
            }
            buf[i] = c;
        }
    }
    free(buf);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return lj_fail(LJ_ERR_IO, "%s: not a directory", path);
    return LJ_OK;
}

lj_status lj_parse_bytes(const char *text, uint64_t *bytes) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno || !(v >= 0) || !isfinite(v))
        return lj_fail(LJ_ERR_ARG, "'%s' is not a byte count (e.g. 80GiB)", text);
    while (*end == ' ') end++;
    static const struct { const char *unit; double mult; } units[] = {
        {"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}, {"T", 1099511627776.0},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) == 0) {
            if (v * units[i].mult + 0.5 >= 18446744073709551616.0) /* 2^64: no uint64_t holds it */
                return lj_fail(LJ_ERR_ARG, "'%s' is too large a byte count (16 EiB and more)", text);
            *bytes = (uint64_t)(v * units[i].mult + 0.5);
            return LJ_OK;
        }
    }
    return lj_fail(LJ_ERR_ARG, "'%s': unknown unit '%s' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", text, end);
}

const char *lj_format_bytes(uint64_t bytes, char *buf, size_t buflen) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, buflen, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, buflen, "%.2f %s", v, units[u]);
    return buf;
}

const char *lj_cache_dir(char *buf, size_t len) {
    const char *env = getenv("LJPERF_CACHE");
    if (env && *env) {
        snprintf(buf, len, "%s", env);
        return buf;
    }
    char exe[LJ_PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        /* the binary sits in <repo>/build/ or <repo>/build/tests/: walk up until a .cache directory appears */
        for (int up = 0; up < 4; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash) break;
            *slash = '\0';
            snprintf(buf, len, "%s/.cache", exe);
            struct stat st;
            if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode)) return buf;
        }
    }
#ifdef LJ_BUILD_CACHE_DIR
    { /* an installed binary (scripts/install.sh): the cache of the tree it was built from */
        struct stat st;
        if (stat(LJ_BUILD_CACHE_DIR, &st) == 0 && S_ISDIR(st.st_mode)) {
            snprintf(buf, len, "%s", LJ_BUILD_CACHE_DIR);
            return buf;
        }
    }
#endif
    snprintf(buf, len, ".cache");
    return buf;
}

int lj_num_threads(void) {
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && atoi(env) > 0) return atoi(env);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

uint64_t lj_hash(uint64_t hash, const void *data, size_t bytes) {
    const unsigned char *p = data;
    for (size_t i = 0; i < bytes; i++) hash = (hash ^ p[i]) * 0x100000001b3ULL;
    return hash;
}

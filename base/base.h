/* base.h: status codes, error messages, logging, the assertion macro, bf16 conversion,
 * the RNG, timing, and small file helpers shared by every layer of ljperf.
 *
 * Conventions used across the project (stated once here, repeated beside functions):
 *   - Tensors are row-major. "x: [N, C]" means N rows of C contiguous elements.
 *   - N = B * T (micro-batch size times sequence length) unless said otherwise.
 *   - Sizes are in elements unless the name ends in _bytes.
 *   - Functions a user can make fail return lj_status and set a message with lj_fail();
 *     programmer errors use LJ_ASSERT, which prints file and line and aborts.
 */
#ifndef LJ_BASE_H
#define LJ_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum {
    LJ_OK = 0,
    LJ_ERR_IO,          /* a file could not be opened, read or written */
    LJ_ERR_FORMAT,      /* a file's content is not what its format says */
    LJ_ERR_ARG,         /* a flag or config value is invalid */
    LJ_ERR_OOM,         /* an allocation failed or a plan does not fit */
    LJ_ERR_UNSUPPORTED, /* valid input that this build cannot handle */
    LJ_ERR_DEVICE,      /* a CUDA / cuBLAS / cuDNN / NCCL / MPI call failed */
    LJ_ERR_INTERRUPTED, /* SIGINT / SIGTERM arrived */
} lj_status;

/* Records a user-facing error message (printf-style) for the calling thread and returns
 * `code`. The message should name the file and the field or line at fault. */
lj_status lj_fail(lj_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the current error message with more context ("loading ckpt/: ..."). */
void lj_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The calling thread's last error message ("" if none). */
const char *lj_error_message(void);

/* The command this process runs ("train", "serve", ...), for the error line; set by main. */
void lj_set_command(const char *cmd);

/* Prints the calling thread's error message as the command's one error line, "ljperf CMD: MSG",
 * or "ljperf CMD (rank R): MSG" for a rank other than 0 of a world of several. A message is
 * printed once: a second call before the next lj_fail does nothing (a rank of several prints
 * before the MPI teardown, whose barrier keeps the other ranks, and so mpirun, from ending the
 * job before the line is out; the command's own exit path then prints nothing more). */
void lj_error_print(int rank, int world_size);

/* Returns from the calling function with the status of `expr` if it is not LJ_OK. */
#define LJ_TRY(expr)                       \
    do {                                   \
        lj_status lj_try_s_ = (expr);      \
        if (lj_try_s_ != LJ_OK) return lj_try_s_; \
    } while (0)

/* Programmer-error check: prints file, line and message, then aborts. Never for user input. */
#define LJ_ASSERT(cond, ...)                                                  \
    do {                                                                      \
        if (!(cond)) lj_assert_fail(__FILE__, __LINE__, #cond, "" __VA_ARGS__); \
    } while (0)
void lj_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((noreturn));

/* Logging to stderr. lj_log_set_quiet(1) silences info lines (warnings still print). */
void lj_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void lj_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void lj_log_set_quiet(int quiet);
/* 1 while info lines are silenced. */
int lj_log_is_quiet(void);

/* Allocation helpers for host memory that abort on failure (host bookkeeping only: the
 * engine's tensors come from the static plan, see plan/plan.h). */
void *lj_malloc(size_t bytes);
void *lj_calloc(size_t count, size_t size);
void *lj_realloc(void *ptr, size_t bytes);
char *lj_strdup(const char *s);

/* ---- dtypes ---------------------------------------------------------------------- */

typedef enum { LJ_DTYPE_F32 = 0, LJ_DTYPE_BF16, LJ_DTYPE_F16, LJ_DTYPE_I32, LJ_DTYPE_U16 } lj_dtype;

/* Bytes per element of `dtype`. */
size_t lj_dtype_size(lj_dtype dtype);
/* "F32", "BF16", ... (the safetensors spelling). */
const char *lj_dtype_name(lj_dtype dtype);

/* fp32 -> bf16 with round-to-nearest-even (NaN stays NaN). Source: the bfloat16 format is the
 * top 16 bits of an IEEE-754 binary32. */
static inline uint16_t lj_f32_to_bf16(float f) {
    union { float f; uint32_t u; } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
    uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + rounding) >> 16);
}
static inline float lj_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}

/* ---- RNG ------------------------------------------------------------------------- */

/* xoshiro256** (Blackman & Vigna, 2018), seeded through splitmix64. The whole state is
 * four u64 words so that it can be saved in a checkpoint and restored exactly. */
typedef struct { uint64_t s[4]; } lj_rng;

void lj_rng_seed(lj_rng *rng, uint64_t seed);
uint64_t lj_rng_u64(lj_rng *rng);
/* Uniform in [0, 1) with 24 random bits. */
float lj_rng_uniform(lj_rng *rng);
/* Uniform integer in [0, n). */
uint64_t lj_rng_below(lj_rng *rng, uint64_t n);
/* Standard normal (Box-Muller). */
double lj_rng_normal(lj_rng *rng);

/* ---- time, files, numbers -------------------------------------------------------- */

/* FNV-1a (64-bit) of `bytes` bytes, continuing from `hash` (start with LJ_HASH_INIT): for hashing
 * values field by field (never struct padding), e.g. what the ranks of a run must agree on.
 * Source: Fowler, Noll, Vo, the FNV-1a algorithm (64-bit offset basis and prime). */
#define LJ_HASH_INIT 0xcbf29ce484222325ULL
uint64_t lj_hash(uint64_t hash, const void *data, size_t bytes);

/* Monotonic wall-clock seconds. */
double lj_time_sec(void);

/* Reads a whole file into a NUL-terminated heap buffer. Errors: LJ_ERR_IO naming `path`. */
lj_status lj_file_read_all(const char *path, char **data, size_t *size);

/* Writes `size` bytes to `path` atomically: a temporary name in the same directory, fsync,
 * then rename; `path` is replaced whole or not at all. A symbolic link's target is written so
 * (the link stays); a FIFO or a device (/dev/stdout) is written through, not replaced; a
 * directory is refused. Errors: LJ_ERR_IO naming `path` (and the temporary name) and the reason. */
lj_status lj_file_write_atomic(const char *path, const void *data, size_t size);

/* Creates `path` and its parents (mkdir -p). Errors: LJ_ERR_IO. */
lj_status lj_mkdir_p(const char *path);

/* Parses a byte count such as "80GiB", "512MiB", "1.5GB" or "1024". Errors: LJ_ERR_ARG. */
lj_status lj_parse_bytes(const char *text, uint64_t *bytes);

/* Formats bytes as "12.34 GiB" into buf. Returns buf. */
const char *lj_format_bytes(uint64_t bytes, char *buf, size_t buflen);

/* The cache directory of the set-up script (tokenizer, corpora, planner measurements):
 * $LJPERF_CACHE, else the first `.cache` directory found walking up from the binary's
 * directory (<repo>/build/ljperf, <repo>/build/tests/x), else the cache of the source tree the
 * binary was built from (an installed binary; LJ_BUILD_CACHE_DIR, set by CMake), else "./.cache".
 * Written into buf. */
const char *lj_cache_dir(char *buf, size_t len);

/* Number of CPU threads to use (OMP_NUM_THREADS or the online cores). */
int lj_num_threads(void);

/* ---- the build ------------------------------------------------------------------- */

/* ljperf's version ("0.1.0"). */
const char *lj_version(void);

/* The git commit this binary was built from: 12 hex digits, with "-dirty" when the tracked
 * files differed from it; "unknown" for a build outside a git checkout or outside CMake
 * (base/build_commit.h, written by cmake/build_info.cmake at every build). */
const char *lj_build_commit(void);

#endif

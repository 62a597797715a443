/* sharded.h: the sharded training-state format (Megatron-LM's `--ckpt-format torch_dist` in
 * spirit, laid out like PyTorch DCP: one data file per rank plus one metadata file). Every rank
 * writes its own shard file at the same time; rank 0 then writes the metadata that describes
 * the global layout. Format: docs/reference.md "Sharded training state".
 *
 *   ITER/shard_RRRRR_of_WWWWW.bin   rank R's slices: raw little-endian f32 (or bf16), back to back, no header
 *   ITER/metadata.json               {"format": "ljperf-sharded-state", "version": 1,
 *                                     "iteration", "world_size", "zero_stage", "partition",
 *                                     "files": [{"name", "bytes"}], "tensors": {NAME: {"dtype":
 *                                     "F32" | "BF16", "shape": [numel], "slices": [{"file", "offset",
 *                                     "numel", "byte_offset", "xxh3_64", "param"}]}},
 *                                     "state.json": {"xxh3_64"}}
 *
 * A tensor is global and 1-D (elements), F32 or BF16 ("master" and "fp8.state" F32 only; a
 * reader refuses anything else by name): "master", "adam.m", "adam.v" are [P] in the flat
 * parameter layout (config/config.h), "fp8.state" the FP8 recipe's state. A slice is its range
 * [offset, offset + numel) stored in file `file` (an index into "files") at byte `byte_offset`,
 * with the XXH3-64 of its bytes (docs/reference.md "XXH3-64"). Slices are cut at parameter
 * boundaries, so "param" names the one parameter tensor a slice belongs to. The slices of a
 * tensor cover it exactly once, whoever wrote them: a reader on any world size or ZeRO stage
 * reads the byte ranges it needs (pread) and verifies every slice it touches.
 *
 * Host memory: the writer and the reader stream through one staging buffer each
 * (LJ_CKPT_STAGING_BYTES), whatever the size of the state. The buffer is cut into two halves
 * that a second thread overlaps: while the writer thread hashes and write()s one half, the
 * caller's fetch fills the other; while the reader thread pread()s and hashes one half, the
 * caller's sink takes the other. The callbacks always run on the calling thread.
 */
#ifndef LJ_CKPT_SHARDED_H
#define LJ_CKPT_SHARDED_H

#include "base/fs.h"
#include "base/progress.h"

#define LJ_CKPT_METADATA_FILE "metadata.json"
#define LJ_CKPT_SHARD_DATA_FMT "shard_%05d_of_%05d.bin"
/* A rank's list of what it wrote, read by rank 0 into metadata.json, then removed. */
#define LJ_CKPT_SHARD_INDEX_FMT "shard_%05d_of_%05d.json"
#define LJ_CKPT_SHARDED_FORMAT "ljperf-sharded-state"
/* The bound of a save's host staging per rank, in bytes: each tensor streams through it from
 * device (or host) memory to the file. Tests lower it with LJPERF_CKPT_STAGING_BYTES. */
#define LJ_CKPT_STAGING_BYTES (64u << 20)

/* LJ_CKPT_STAGING_BYTES, or the environment's LJPERF_CKPT_STAGING_BYTES (at least 4096). */
size_t lj_ckpt_staging_bytes(void);

typedef struct {
    char *tensor;   /* "master", "adam.m", ... */
    char *param;    /* the parameter tensor it belongs to (HF name), NULL: none */
    int file;       /* index into the files */
    lj_dtype dtype; /* LJ_DTYPE_F32 or LJ_DTYPE_BF16: how its elements are stored */
    int64_t offset, numel; /* elements of the global tensor */
    uint64_t byte_offset;  /* in the file */
    uint64_t xxh3;
} lj_shard_slice;

/* Copies n values of a source at src_offset (elements) to the host buffer dst, in the dtype of
 * the slice being added (lj_shard_writer_add: n * lj_dtype_size(dtype) bytes).
 * Errors: any, with the message set (e.g. a non-finite value named by tensor). */
typedef lj_status (*lj_shard_fetch_fn)(void *ctx, int64_t src_offset, int64_t n, void *dst);

/* Allocates host memory for the staging (e.g. the backend's pinned memory, ops/ops.h
 * host_alloc) and frees it; NULL in lj_shard_writer_open: lj_malloc and free. */
typedef lj_status (*lj_host_alloc_fn)(void **ptr, size_t bytes);
typedef void (*lj_host_free_fn)(void *ptr);

/* One half of the writer's staging, queued for the writer thread. */
typedef struct {
    float *buf;
    int64_t n;      /* values in buf */
    size_t bytes;   /* their bytes (n times the slice's element size) */
    int slice;      /* index into the writer's slices */
    int first, last;/* the slice's first / last chunk */
    uint64_t digest;/* the slice's XXH3-64, set by the writer thread on its last chunk */
} lj_shard_chunk;

typedef struct {
    int fd, rank, world;
    char dir[LJ_PATH_MAX], path[LJ_PATH_MAX];
    uint64_t bytes;          /* added so far (written once lj_shard_writer_close returns) */
    lj_shard_slice *slices;
    int count, cap;
    float *staging;          /* the whole staging: two halves of staging_numel f32 each */
    int64_t staging_numel;
    lj_host_free_fn staging_free;
    /* the pipeline: chunk j is half j % 2, hashed and written by the writer thread (base/worker.h) */
    struct lj_shard_pipe *pipe;
    lj_shard_chunk chunks[2];
    char error[LJ_PATH_MAX + 256];       /* the caller's failure (a fetch) */
    char write_error[LJ_PATH_MAX + 256]; /* the writer thread's (a write) */
    /* optional, the caller's (begun with the bytes it will add): updated with the bytes handed to
     * the writer thread, ended by lj_shard_writer_close after the fsync */
    lj_progress *progress;
    uint64_t staged;
} lj_shard_writer;

/* Creates DIR/shard_RRRRR_of_WWWWW.bin (rank of world) for writing through a staging buffer of
 * staging_bytes in all (two halves), allocated with host_alloc (NULL: lj_malloc; give the
 * backend's pinned allocator when the fetches copy from device memory), and starts the writer
 * thread (without one, when it cannot start, the caller writes), which holds w's address: w
 * stays where it is until lj_shard_writer_free. When host_alloc fails the staging is
 * lj_malloc's. Errors: LJ_ERR_IO naming the file. */
lj_status lj_shard_writer_open(lj_shard_writer *w, const char *dir, int rank, int world, size_t staging_bytes,
                               lj_host_alloc_fn host_alloc, lj_host_free_fn host_free);
/* Appends the slice [offset, offset + numel) of `tensor` (of parameter `param`, may be NULL),
 * stored as `dtype` (LJ_DTYPE_F32 or LJ_DTYPE_BF16; every slice of a tensor has one dtype),
 * whose values fetch(ctx, src_offset + i, n, buf) gives chunk by chunk (n <= half the staging),
 * on the calling thread; the writer thread hashes and writes each chunk while the next is
 * fetched, so the call returns before its last chunk is written and its checksum known (both
 * are by lj_shard_writer_close). Errors: the fetch's, or LJ_ERR_IO naming the file (a failed
 * write of this or an earlier slice); after an error the writer only takes
 * lj_shard_writer_free. */
lj_status lj_shard_writer_add(lj_shard_writer *w, const char *tensor, const char *param, int64_t offset, int64_t numel,
                              lj_dtype dtype, lj_shard_fetch_fn fetch, void *ctx, int64_t src_offset);
/* Waits for the writer thread's last chunks, fsyncs and closes the data file and writes the
 * rank's index (LJ_CKPT_SHARD_INDEX_FMT, atomic). Errors: LJ_ERR_IO naming the file. */
lj_status lj_shard_writer_close(lj_shard_writer *w);
/* Stops the writer thread (after the chunks it holds) and frees the writer, closing the file if
 * still open. Safe on a zeroed writer. */
void lj_shard_writer_free(lj_shard_writer *w);

/* Rank 0, once every rank's writer is closed: merges the `world` indexes of DIR into
 * DIR/metadata.json (with the checksum of state_json, the iteration, world size, ZeRO stage and
 * partition name) and removes them. Checks that the slices of each tensor cover it exactly
 * once, in one dtype. Errors: LJ_ERR_IO / LJ_ERR_FORMAT naming the index file. */
lj_status lj_sharded_write_metadata(const char *dir, int iteration, int world, int zero_stage, const char *partition,
                                    const char *state_json);

typedef struct {
    char *name;
    lj_dtype dtype; /* as stored; reads deliver f32 whatever it is (bf16 widens exactly) */
    int64_t numel;
    lj_shard_slice *slices; /* [count] sorted by offset */
    int count;
} lj_sharded_tensor;

typedef struct {
    char dir[LJ_PATH_MAX], meta_path[LJ_PATH_MAX];
    int iteration, world_size, zero_stage;
    char partition[16];
    int num_files;
    char **files;           /* [num_files] names */
    int *fds;               /* [num_files] open read-only */
    lj_sharded_tensor *tensors;
    int num_tensors;
    char state_json_xxh3[17]; /* "" when not recorded */
} lj_sharded;

/* Whether DIR holds metadata.json (a sharded iteration directory). */
int lj_sharded_present(const char *dir);
/* LJ_OK unless DIR holds shard files (shard_RRRRR_of_WWWWW.bin) but no metadata.json: then
 * LJ_ERR_FORMAT naming the missing DIR/metadata.json (not the state.safetensors a directory without
 * it is otherwise read as). */
lj_status lj_sharded_check_metadata(const char *dir);
/* Reads and validates DIR/metadata.json and opens the shard files it names (their sizes must be
 * those recorded; each file's slices tile it exactly, so a dtype or shape that does not match
 * the bytes is reported by field). Errors: LJ_ERR_IO / LJ_ERR_FORMAT naming the file and field. On error `c`
 * holds nothing to close. */
lj_status lj_sharded_open(lj_sharded *c, const char *dir);
void lj_sharded_close(lj_sharded *c);
/* The tensor named `name`, or NULL. */
const lj_sharded_tensor *lj_sharded_find(const lj_sharded *c, const char *name);

/* Receives n values of a read, for elements [dst_offset, dst_offset + n) of the request (f32,
 * a bf16 tensor's values widened). */
typedef void (*lj_shard_sink_fn)(void *ctx, int64_t dst_offset, const float *src, int64_t n);

/* Reads elements [offset, offset + numel) of `tensor` from the byte ranges of the files that
 * hold them, through `staging` (staging_numel f32: two halves, one the reader thread fills
 * while the sink, on the calling thread, takes the other), handing them to sink in order. verify 1
 * reads every slice it touches whole and checks its XXH3-64 (a slice is delivered before its
 * check ends: on an error the sink's target holds part of it); verify 0 reads only the range.
 * Errors: LJ_ERR_FORMAT "FILE: tensor 'adam.m' slice [a, b) (PARAM) fails its checksum ...",
 * a range the metadata does not cover; LJ_ERR_IO naming the file for a short read. */
lj_status lj_sharded_read(const lj_sharded *c, const char *tensor, int64_t offset, int64_t numel, int verify,
                          float *staging, int64_t staging_numel, lj_shard_sink_fn sink, void *ctx);

/* One range of lj_sharded_read_many: elements [offset, offset + numel) of `tensor`, for
 * sink(ctx, ...). */
typedef struct {
    const char *tensor;
    int64_t offset, numel;
    void *ctx;
} lj_shard_request;

/* lj_sharded_read of each request in turn, through one pipeline: a reader thread pread()s and
 * hashes the next chunk (half the staging) while the calling thread's sink takes the current
 * one, across the requests (staging_numel 1, or no thread: one chunk at a time). Every request
 * is checked against the metadata before anything is read. Errors: as lj_sharded_read; the
 * requests before the failing one are delivered whole. */
lj_status lj_sharded_read_many(const lj_sharded *c, const lj_shard_request *reqs, int nreq, int verify, float *staging,
                               int64_t staging_numel, lj_shard_sink_fn sink);

/* Elements [offset, offset + numel) of `tensor` straight into dst (numel f32), one pread per
 * slice it overlaps, unchecked (verify 0; for a reader that needs no staging, such as the HF
 * export's chunks). Errors: as lj_sharded_read. */
lj_status lj_sharded_read_into(const lj_sharded *c, const char *tensor, int64_t offset, int64_t numel, float *dst);

#endif

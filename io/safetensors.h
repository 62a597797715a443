/* safetensors.h: the safetensors file format: a validating mmap reader and an atomic writer.
 *
 * Format (docs/reference.md "safetensors"; source: huggingface/safetensors README and
 * safetensors/src/tensor.rs): u64 little-endian header length N, then N bytes of UTF-8 JSON
 * (may be padded with trailing spaces), then the data buffer. The JSON maps each tensor name
 * to {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]} with byte offsets
 * relative to the buffer start; the tensors cover the buffer contiguously from 0 with no gaps
 * or overlaps. An optional "__metadata__" entry is a string -> string map. Tensor data is
 * row-major and little-endian.
 */
#ifndef LJ_SAFETENSORS_H
#define LJ_SAFETENSORS_H

#include "base/base.h"

/* The dtypes a safetensors file can name (the spelling is the enum name without LJ_ST_). */
typedef enum {
    LJ_ST_F32 = 0, LJ_ST_BF16, LJ_ST_F16, LJ_ST_F64, LJ_ST_I8, LJ_ST_I16, LJ_ST_I32, LJ_ST_I64,
    LJ_ST_U8, LJ_ST_U16, LJ_ST_U32, LJ_ST_U64, LJ_ST_BOOL, LJ_ST_F8_E5M2, LJ_ST_F8_E4M3,
    LJ_ST_DTYPE_COUNT
} lj_st_dtype;

/* Tensors have at most this many dimensions (safetensors itself sets no limit). */
#define LJ_ST_MAX_DIMS 8
/* Largest header accepted, in bytes (the limit of safetensors/src/tensor.rs). */
#define LJ_ST_MAX_HEADER_BYTES 100000000ull

/* "F32", "BF16", ... */
const char *lj_st_dtype_name(lj_st_dtype dtype);
/* Bytes per element. */
size_t lj_st_dtype_size(lj_st_dtype dtype);
/* Parses a dtype name; returns 0 (and leaves *dtype alone) if the name is unknown. */
int lj_st_dtype_parse(const char *name, lj_st_dtype *dtype);
/* fp32 <-> IEEE binary16 (round to nearest even; NaN stays NaN, overflow gives inf). */
uint16_t lj_f32_to_f16(float f);
float lj_f16_to_f32(uint16_t h);

/* ---- reader ------------------------------------------------------------------------ */

/* One tensor of an open file. `data` points into the mapping and may be unaligned for the
 * dtype (read it with memcpy or lj_safetensors_read_f32). */
typedef struct {
    const char *name;
    lj_st_dtype dtype;
    int ndim;                        /* 0 (a scalar) .. LJ_ST_MAX_DIMS */
    int64_t shape[LJ_ST_MAX_DIMS];
    int64_t numel;                   /* product of shape (1 for a scalar) */
    uint64_t begin, end;             /* data_offsets, bytes from the buffer start */
    const void *data;                /* end - begin bytes */
} lj_st_entry;

typedef struct {
    char *path;
    lj_st_entry *entries;   /* [count], in data-offset order (the order of the bytes) */
    int count;
    char **meta_keys;       /* [meta_count] "__metadata__" keys and values */
    char **meta_values;
    int meta_count;
    uint64_t header_bytes;  /* N */
    uint64_t buffer_bytes;  /* file size - 8 - N */
    const lj_st_entry **by_name; /* [count] the entries sorted by name (for lookup) */
    void *map;
    size_t map_bytes;
    struct lj_st_reading *reading; /* progress of lj_safetensors_read_f32 over the buffer (base/progress.h) */
} lj_safetensors;

/* Opens and mmaps `path` read-only and validates all of it: the header length against the
 * file size (and LJ_ST_MAX_HEADER_BYTES), the JSON, each entry's fields, dtype names,
 * shapes (non-negative integers, at most LJ_ST_MAX_DIMS), shape product * dtype size ==
 * end - begin, offsets inside the buffer, offsets contiguous from 0 to the end of the buffer
 * with no gap or overlap, duplicate names, and the "__metadata__" map (strings only).
 * Errors: LJ_ERR_IO (cannot open/map) or LJ_ERR_FORMAT, the message naming the file and the
 * tensor or field, e.g. "ckpt/model.safetensors: tensor 'model.norm.weight': data_offsets
 * [0, 100] exceed the buffer (64 bytes)". On error `st` holds nothing to close. */
lj_status lj_safetensors_open(lj_safetensors *st, const char *path);

/* Unmaps the file and frees everything; entry pointers become invalid. Safe on a zeroed `st`. */
void lj_safetensors_close(lj_safetensors *st);

/* The entry named `name`, or NULL (binary search, O(log count)). */
const lj_st_entry *lj_safetensors_find(const lj_safetensors *st, const char *name);

/* The "__metadata__" value of `key`, or NULL. */
const char *lj_safetensors_metadata(const lj_safetensors *st, const char *key);

/* Converts entry `e` (F32, BF16 or F16) to `numel` fp32 values at `dst` (exact: all three
 * widen to fp32 without rounding). Errors: LJ_ERR_FORMAT naming the file and tensor for any
 * other dtype. */
lj_status lj_safetensors_read_f32(const lj_safetensors *st, const lj_st_entry *e, float *dst);

/* ---- writer ------------------------------------------------------------------------ */

/* Fills dst with the n fp32 values at element `offset` of a streamed tensor's source (a
 * checkpoint's shard files, say). Errors: any, with its message set (lj_fail). */
typedef lj_status (*lj_st_read_f32_fn)(void *ctx, int64_t offset, int64_t n, float *dst);

/* One tensor to write. Give the bytes in `data` (already in `dtype`, little-endian), or give
 * `from_f32` (numel fp32 values), or `read_f32` (called for chunks of at most
 * LJ_ST_STREAM_CHUNK values at read_offset + i, so that a tensor of any size is written through
 * a bounded buffer), and the writer converts them to `dtype` while writing (F32: copied, BF16:
 * lj_f32_to_bf16, F16: lj_f32_to_f16; round to nearest even). */
typedef struct {
    const char *name;
    lj_st_dtype dtype;
    int ndim;                        /* 0 .. LJ_ST_MAX_DIMS */
    int64_t shape[LJ_ST_MAX_DIMS];
    const void *data;
    const float *from_f32;
    lj_st_read_f32_fn read_f32;
    void *read_ctx;
    int64_t read_offset;
} lj_st_tensor;

/* Elements per read_f32 call of a streamed tensor (4 MiB of fp32). A file's streamed tensors
 * go through two such chunk buffers: read_f32 fills one, on the calling thread, while a writer
 * thread converts the other to the tensor's dtype and writes it (8 MiB of host memory). */
#define LJ_ST_STREAM_CHUNK (1 << 20)

/* Writes `n` tensors, in the given order, with an optional "__metadata__" map of `n_meta`
 * key/value strings (meta_keys/meta_values may be NULL when n_meta is 0). The header is
 * padded with spaces so that the data buffer starts at a multiple of 8 bytes.
 * Atomic: the bytes go to PATH.tmp.PID in the same directory, are fsync'd, and the file is
 * renamed to `path` (then the directory is fsync'd); on any error the temporary file is
 * removed and an existing `path` is left untouched.
 * Errors: LJ_ERR_ARG (empty or duplicate name, the name "__metadata__", bad ndim, negative
 * dimension, missing data, a conversion from fp32 to a dtype other than F32/BF16/F16) naming
 * the tensor; LJ_ERR_IO naming the file. */
lj_status lj_safetensors_write(const char *path, const lj_st_tensor *tensors, int n, const char *const *meta_keys,
                               const char *const *meta_values, int n_meta);

/* Elements of a tensor to write (product of its shape; 1 for ndim 0). */
int64_t lj_st_tensor_numel(const lj_st_tensor *t);

#endif

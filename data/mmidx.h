/* mmidx.h: Megatron-LM indexed datasets (MMIDIDX version 1, `.bin` + `.idx`) and llm.c
 * token shards: constants, the writer used by `ljperf prepare`, and the mmap reader used by
 * the loader. Format: docs/reference.md ("Megatron-LM indexed dataset"; source:
 * megatron/core/datasets/indexed_dataset.py) and ("llm.c token shards"; source: llm.c
 * dev/data/data_common.py).
 */
#ifndef LJ_MMIDX_H
#define LJ_MMIDX_H

#include "base/base.h"

#define LJ_MMIDX_MAGIC "MMIDIDX\x00\x00" /* 9 bytes */
#define LJ_MMIDX_VERSION 1
/* Megatron dtype codes. */
enum { LJ_MMIDX_U8 = 1, LJ_MMIDX_I8 = 2, LJ_MMIDX_I16 = 3, LJ_MMIDX_I32 = 4, LJ_MMIDX_I64 = 5,
       LJ_MMIDX_F64 = 6, LJ_MMIDX_F32 = 7, LJ_MMIDX_U16 = 8 };

/* The token dtype code Megatron uses for a vocabulary: u16 below 65500, else i32. */
static inline int lj_mmidx_dtype_for_vocab(int vocab_size) { return vocab_size < 65500 ? LJ_MMIDX_U16 : LJ_MMIDX_I32; }

/* ---- the pair's fingerprint (ljperf's sidecar, PREFIX.fingerprint.json) ----
 * Megatron's .idx has no room for a checksum (its readers take the exact layout), so `prepare`
 * writes a sidecar beside the pair: {"format": "ljperf-dataset-fingerprint", "version": 1,
 * "bin_bytes", "bin_xxh3_64" (lj_mmidx_bin_fingerprint), "idx_bytes", "idx_xxh3_64" (XXH3-64 of
 * the whole .idx)} with the hashes as 16 hex digits. A pair that was replaced halfway (by hand, or
 * by a tool that renames its files one by one) disagrees with its sidecar. A pair without a sidecar (Megatron's, or older ljperf's)
 * is checked by its sizes alone: the .bin must hold exactly what the .idx describes.
 * The sidecar also records the end-of-document id `prepare` appended to every document
 * ("eod_token_id", absent with --no-append-eos): the id --reset-position-ids,
 * --reset-attention-mask and --eod-mask-loss split documents at (Megatron's tokenizer.eod). */
#define LJ_MMIDX_FINGERPRINT_SUFFIX ".fingerprint.json"
#define LJ_MMIDX_EOD_FIELD "eod_token_id"
/* The sidecar records the tokenizer too, so that `train` and the HF export use it without being
 * told: "tokenizer": {"name" (as prepare was given it: llama3, ORG/NAME, a path), "path" (the
 * tokenizer.json read, absolute), "file_xxh3_64" (of its bytes), "ids_xxh3_64"
 * (lj_tokenizer_ids_hash: what decides the ids), "vocab_size", "bos_token_id", "eos_token_id"
 * (null: none)}. */
#define LJ_MMIDX_TOKENIZER_FIELD "tokenizer"
typedef struct {
    char name[512];
    char path[4096];
    uint64_t file_xxh3_64, ids_xxh3_64;
    int32_t vocab_size, bos_token_id, eos_token_id; /* -1: none */
} lj_mmidx_tokenizer;
/* Reads the tokenizer record of PREFIX's sidecar into *t; *found 0 (and LJ_OK) when there is none
 * (no sidecar: Megatron's dataset, an older prepare's, an llm.c shard). Follows PREFIX.idx's link
 * as the reader does. Errors: LJ_ERR_IO / LJ_ERR_FORMAT naming the sidecar and the field. */
lj_status lj_mmidx_read_tokenizer(const char *prefix, lj_mmidx_tokenizer *t, int *found);
/* *same = 1 if the tokenizer.json at `path` is the recorded one: the same bytes, or else the same
 * ids hash once loaded (lj_tokenizer_ids_hash: e.g. ljperf's HF export of it). Errors: those of
 * reading and loading `path` (lj_tokenizer_load). */
lj_status lj_mmidx_tokenizer_matches(const lj_mmidx_tokenizer *t, const char *path, int *same);
/* Where the recorded tokenizer is now, into buf (buflen bytes): its recorded path when the file
 * there still matches, else its recorded name resolved again (lj_tokenizer_resolve: llama3 in
 * this machine's cache, ORG/NAME in the Hugging Face cache) when that file matches. Returns 1 when
 * found, 0 when not (buf then names the last place looked at, for a message). */
int lj_mmidx_tokenizer_locate(const lj_mmidx_tokenizer *t, char *buf, size_t buflen);

/* Whole-file hashing up to this size; above it, LJ_MMIDX_FP_CHUNKS chunks of LJ_MMIDX_FP_CHUNK
 * bytes at evenly spaced offsets (the first at 0, the last ending at the end): 16 MiB read
 * whatever the size, so a terabyte dataset opens as fast as a small one. */
#define LJ_MMIDX_FP_WHOLE_BYTES ((size_t)16 << 20)
#define LJ_MMIDX_FP_CHUNKS 256
#define LJ_MMIDX_FP_CHUNK ((size_t)64 << 10)
/* XXH3-64 of `size` bytes of a .bin at `data`: the whole of it, or the sampled chunks above
 * (hashed in order as one stream). It detects a .bin of another prepare (different bytes almost
 * everywhere), not a flipped byte between two chunks of a large file. */
uint64_t lj_mmidx_bin_fingerprint(const void *data, size_t size);

/* ---- writer (data/mmidx_write.c) ---- */
typedef struct lj_mmidx_writer lj_mmidx_writer;

/* Opens PREFIX.bin and PREFIX.idx under temporary names (PREFIX.bin.tmp.PID, ...).
 * dtype_code: LJ_MMIDX_U16 or LJ_MMIDX_I32. Errors: LJ_ERR_IO naming the file. */
lj_status lj_mmidx_writer_open(lj_mmidx_writer **w, const char *prefix, int dtype_code);
/* Appends one document (one sequence) of `n` token ids. Errors: LJ_ERR_IO, LJ_ERR_ARG when an id
 * does not fit the dtype. */
lj_status lj_mmidx_writer_add(lj_mmidx_writer *w, const int32_t *tokens, int64_t n);
/* The end-of-document id every document ends with (prepare's EOS), recorded in the sidecar;
 * not called: none is recorded. */
void lj_mmidx_writer_set_eod(lj_mmidx_writer *w, int32_t eod_token);
/* The tokenizer recorded in the sidecar (copied); not called: none is recorded. */
void lj_mmidx_writer_set_tokenizer(lj_mmidx_writer *w, const lj_mmidx_tokenizer *t);
/* Writes the .idx and the fingerprint sidecar, fsyncs them and installs the dataset as a whole:
 *   PREFIX.versions/K/BASE.bin, BASE.idx, BASE.fingerprint.json   the files of version K
 *   PREFIX.current -> BASE.versions/K                             the one pointer
 *   PREFIX.bin -> BASE.current/BASE.bin (and .idx, .fingerprint.json)  fixed links
 * (PREFIX = DIR/BASE; links relative, so the directory can move). The new version is complete
 * before PREFIX.current is switched to it by one rename; the old version is removed after. A
 * kill at any moment leaves the old dataset or the new one, never a mixed pair, and any reader
 * (Megatron's included) opens PREFIX.bin / PREFIX.idx as before. A dataset of regular files
 * (Megatron's preprocess_data.py, an older prepare) is first adopted as a version by hard links,
 * so it stays readable until the switch. The next prepare removes versions a killed one left.
 * Errors: LJ_ERR_IO naming the path (e.g. PREFIX.idx is a directory); the old dataset is then
 * unchanged and the new one discarded. */
lj_status lj_mmidx_writer_finish(lj_mmidx_writer *w);
/* Removes the temporary files and frees the writer (after an error, or instead of finish). */
void lj_mmidx_writer_abort(lj_mmidx_writer *w);

/* ---- reader (data/mmidx_read.c) ---- */
typedef struct {
    char *path;             /* PREFIX (Megatron) or the shard's path (llm.c) */
    int dtype_code;         /* LJ_MMIDX_U16 / LJ_MMIDX_I32 (llm.c uint32 reads as I32 ids) */
    int64_t num_sequences;  /* documents (llm.c shards: 1) */
    const int32_t *seq_lengths;   /* [num_sequences] tokens (a heap copy: the .idx arrays are unaligned) */
    const int64_t *seq_offsets;   /* [num_sequences] byte offsets from `tokens` (llm.c: 0) */
    int64_t num_tokens;     /* total tokens in .bin */
    const void *tokens;     /* mmap'd token array */
    size_t token_size;      /* 2 or 4 bytes */
    void *idx_map, *bin_map;
    size_t idx_size, bin_size;
    int32_t *owned_tokens;  /* a synthetic dataset's tokens (lj_token_dataset_mock), else NULL */
    int32_t eod_token;      /* the end-of-document id its sidecar records, -1 when none (Megatron's, an llm.c
                               shard, --no-append-eos); the mock documents' for lj_token_dataset_mock */
    uint64_t idx_xxh3_64;   /* Megatron: XXH3-64 of the .idx, and lj_mmidx_bin_fingerprint of the .bin (the */
    uint64_t bin_xxh3_64;   /* sidecar's values); llm.c: 0 and the shard's lj_mmidx_bin_fingerprint */
} lj_token_dataset;

/* Opens PREFIX.idx + PREFIX.bin (Megatron), or an llm.c shard when `path` ends in .bin and
 * starts with an llm.c header (magic 20240520 uint16, or 20240801 uint32). Checks magic,
 * version, dtype, counts, that .bin is exactly as long as .idx says, and the pair against its
 * fingerprint sidecar when there is one. Errors: LJ_ERR_IO / LJ_ERR_FORMAT naming the file and
 * the field. */
lj_status lj_token_dataset_open(lj_token_dataset *ds, const char *path);
void lj_token_dataset_close(lj_token_dataset *ds);
/* A synthetic dataset in memory (Megatron-LM's --mock-data): `num_sequences` documents whose
 * lengths are drawn uniformly from [1, 4096) by lj_rng seeded with `seed`; document tokens are
 * 1, 2, 3, ... (wrapping below vocab_size - 1) and each ends with the id vocab_size - 1 as its
 * end-of-document token, as Megatron's MockGPTLowLevelDataset builds sequences of consecutive
 * ids. int32 tokens; path "(mock data)". vocab_size must be at least 3. Close with
 * lj_token_dataset_close. */
void lj_token_dataset_mock(lj_token_dataset *ds, int vocab_size, int64_t num_sequences, uint64_t seed);
/* The end-of-document id of lj_token_dataset_mock's documents: vocab_size - 1. */
static inline int32_t lj_token_dataset_mock_eod(int vocab_size) { return vocab_size - 1; }
/* Token id at global position i of the concatenated token stream. */
static inline int32_t lj_token_dataset_get(const lj_token_dataset *ds, int64_t i) {
    return ds->token_size == 2 ? (int32_t)((const uint16_t *)ds->tokens)[i] : ((const int32_t *)ds->tokens)[i];
}
/* Checks every id is in [0, vocab_size). Errors: LJ_ERR_FORMAT naming the file, the position
 * and the id. */
lj_status lj_token_dataset_check_vocab(const lj_token_dataset *ds, int vocab_size);

#endif

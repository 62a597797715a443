/* mmidx_read.c: the mmap reader of Megatron-LM indexed datasets (PREFIX.idx + PREFIX.bin,
 * MMIDIDX version 1) and of llm.c token shards, with the checks that make a bad file fail
 * with a message naming the file and the field. Formats: docs/reference.md; sources:
 * megatron/core/datasets/indexed_dataset.py (_IndexWriter.write / _IndexReader) and llm.c
 * dev/data/data_common.py (write_datafile).
 *
 * Token dtypes: Megatron uint16 (code 8) and int32 (code 4), llm.c uint16 and uint32 (read as
 * int32 ids). Megatron uint8, int8, int16 and int64 token files are valid Megatron but not
 * supported here (LJ_ERR_UNSUPPORTED); float codes 6 and 7 are not token files (LJ_ERR_FORMAT).
 *
 * The .idx arrays start at byte 34, so they are not aligned for int32/int64 loads; the reader
 * copies sequence lengths and offsets into aligned heap arrays (12 bytes per sequence) and
 * keeps the token array (.bin) mmap'd.
 */
#include "data/mmidx.h"
#include "data/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define LJ_MMIDX_HEADER_BYTES 34 /* magic 9 + version 8 + dtype 1 + sequence count 8 + document count 8 */
#define LJ_LLMC_HEADER_INTS 256
#define LJ_LLMC_MAGIC_U16 20240520
#define LJ_LLMC_VERSION_U16 1
#define LJ_LLMC_MAGIC_U32 20240801
#define LJ_LLMC_VERSION_U32 7

/* Maps `path` read-only. A zero-length file gives map == NULL, size 0. */
static lj_status map_file(const char *path, void **map, size_t *size) {
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return lj_fail(LJ_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return lj_fail(LJ_ERR_IO, "%s: cannot stat (%s)", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return lj_fail(LJ_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return lj_fail(LJ_ERR_IO, "%s: cannot mmap %lld bytes (%s)", path, (long long)st.st_size, strerror(e));
        }
        *map = p;
        *size = (size_t)st.st_size;
    }
    close(fd);
    return LJ_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *concat(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    char *s = lj_malloc(n + m + 1);
    memcpy(s, a, n);
    memcpy(s + n, b, m + 1);
    return s;
}

/* Little-endian loads from unaligned bytes (the formats are little-endian; so is every
 * machine this engine targets, which the memcpy relies on). */
static uint64_t load_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static int32_t load_i32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

static const char *dtype_code_name(int code) {
    switch (code) {
    case LJ_MMIDX_U8: return "uint8";
    case LJ_MMIDX_I8: return "int8";
    case LJ_MMIDX_I16: return "int16";
    case LJ_MMIDX_I32: return "int32";
    case LJ_MMIDX_I64: return "int64";
    case LJ_MMIDX_F64: return "float64";
    case LJ_MMIDX_F32: return "float32";
    case LJ_MMIDX_U16: return "uint16";
    }
    return "unknown";
}

/* Reads the llm.c header of `path` if it has one. Returns 1 and fills magic when the first
 * int32 is an llm.c magic, 0 otherwise (also when the file cannot be read). */
static int peek_llmc_magic(const char *path, int32_t *magic) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    uint8_t b[4];
    ssize_t n = read(fd, b, 4);
    close(fd);
    if (n != 4) return 0;
    *magic = load_i32(b);
    return *magic == LJ_LLMC_MAGIC_U16 || *magic == LJ_LLMC_MAGIC_U32;
}

static lj_status open_llmc(lj_token_dataset *ds, const char *path) {
    ds->path = lj_strdup(path);
    LJ_TRY(map_file(path, &ds->bin_map, &ds->bin_size));
    const size_t header_bytes = LJ_LLMC_HEADER_INTS * 4;
    if (ds->bin_size < header_bytes)
        return lj_fail(LJ_ERR_FORMAT, "%s: %zu bytes, shorter than the %zu-byte llm.c header", path,
                       ds->bin_size, header_bytes);
    const uint8_t *h = ds->bin_map;
    int32_t magic = load_i32(h), version = load_i32(h + 4), count = load_i32(h + 8);
    int32_t want_version = magic == LJ_LLMC_MAGIC_U16 ? LJ_LLMC_VERSION_U16 : LJ_LLMC_VERSION_U32;
    ds->token_size = magic == LJ_LLMC_MAGIC_U16 ? 2 : 4;
    if (version != want_version)
        return lj_fail(LJ_ERR_FORMAT, "%s: bad version %d in the llm.c header (expected %d for magic %d, %s tokens)",
                       path, version, want_version, magic, ds->token_size == 2 ? "uint16" : "uint32");
    if (count < 0) return lj_fail(LJ_ERR_FORMAT, "%s: negative token count %d in the llm.c header", path, count);
    uint64_t want = header_bytes + (uint64_t)count * ds->token_size;
    if (ds->bin_size != want)
        return lj_fail(LJ_ERR_FORMAT, "%s: %zu bytes but its llm.c header says 1024 + %d tokens x %zu bytes = %llu",
                       path, ds->bin_size, count, ds->token_size, (unsigned long long)want);
    ds->dtype_code = ds->token_size == 2 ? LJ_MMIDX_U16 : LJ_MMIDX_I32;
    ds->num_sequences = 1;
    ds->num_tokens = count;
    ds->tokens = h + header_bytes;
    int32_t *len = lj_malloc(sizeof(int32_t));
    int64_t *off = lj_malloc(sizeof(int64_t));
    len[0] = count;
    off[0] = 0; /* relative to ds->tokens (the first byte after the header) */
    ds->seq_lengths = len;
    ds->seq_offsets = off;
    ds->eod_token = -1;
    ds->bin_xxh3_64 = lj_mmidx_bin_fingerprint(ds->bin_map, ds->bin_size);
    return LJ_OK;
}

uint64_t lj_mmidx_bin_fingerprint(const void *data, size_t size) {
    if (size <= LJ_MMIDX_FP_WHOLE_BYTES) return XXH3_64bits(data, size);
    XXH3_state_t *st = XXH3_createState();
    LJ_ASSERT(st, "XXH3_createState");
    XXH3_64bits_reset(st);
    const size_t span = size - LJ_MMIDX_FP_CHUNK;
    for (int i = 0; i < LJ_MMIDX_FP_CHUNKS; i++) {
        const size_t at = (size_t)((unsigned __int128)span * (unsigned)i / (LJ_MMIDX_FP_CHUNKS - 1));
        XXH3_64bits_update(st, (const char *)data + at, LJ_MMIDX_FP_CHUNK);
    }
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

/* Checks the pair against PREFIX.fingerprint.json when it exists (mmidx.h), and fills the
 * dataset's fingerprint (ds->idx_xxh3_64, ds->bin_xxh3_64) and the end-of-document id the
 * sidecar records (ds->eod_token, -1 without one). */
static lj_status check_fingerprint(lj_token_dataset *ds, const char *prefix, const char *idx_path,
                                   const char *bin_path) {
    ds->idx_xxh3_64 = XXH3_64bits(ds->idx_map, ds->idx_size);
    ds->bin_xxh3_64 = lj_mmidx_bin_fingerprint(ds->bin_map, ds->bin_size);
    ds->eod_token = -1;
    char *fp_path = concat(prefix, LJ_MMIDX_FINGERPRINT_SUFFIX);
    struct stat sb;
    if (stat(fp_path, &sb) != 0) {
        free(fp_path);
        return LJ_OK; /* a pair without a sidecar: the sizes were checked */
    }
    char *text = NULL;
    lj_status s = lj_file_read_all(fp_path, &text, NULL);
    cJSON *j = s == LJ_OK ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *bb = cJSON_GetObjectItemCaseSensitive(j, "bin_bytes"), *bh = cJSON_GetObjectItemCaseSensitive(j, "bin_xxh3_64");
    const cJSON *ib = cJSON_GetObjectItemCaseSensitive(j, "idx_bytes"), *ih = cJSON_GetObjectItemCaseSensitive(j, "idx_xxh3_64");
    if (s == LJ_OK && (!cJSON_IsNumber(bb) || !cJSON_IsString(bh) || !cJSON_IsNumber(ib) || !cJSON_IsString(ih)))
        s = lj_fail(LJ_ERR_FORMAT, "%s: not a dataset fingerprint (bin_bytes, bin_xxh3_64, idx_bytes, idx_xxh3_64 are "
                                   "needed); delete it to check %s and %s by their sizes alone", fp_path, bin_path, idx_path);
    char have[17];
    if (s == LJ_OK) {
        snprintf(have, sizeof have, "%016" PRIx64, ds->idx_xxh3_64);
        if (ib->valuedouble != (double)ds->idx_size || strcmp(have, ih->valuestring) != 0)
            s = lj_fail(LJ_ERR_FORMAT, "%s (%zu bytes, XXH3-64 %s) is not the index %s describes (%.0f bytes, %.20s): the "
                                       "pair was replaced halfway (an interrupted or failed prepare?); run prepare again",
                        idx_path, ds->idx_size, have, fp_path, ib->valuedouble, ih->valuestring);
    }
    if (s == LJ_OK) {
        snprintf(have, sizeof have, "%016" PRIx64, ds->bin_xxh3_64);
        if (bb->valuedouble != (double)ds->bin_size || strcmp(have, bh->valuestring) != 0)
            s = lj_fail(LJ_ERR_FORMAT, "%s (%zu bytes, fingerprint %s) is not the one %s was written with (%.0f bytes, "
                                       "%.20s; the index is %s): the pair was replaced halfway (an interrupted or failed "
                                       "prepare?) or the .bin changed; run prepare again",
                        bin_path, ds->bin_size, have, fp_path, bb->valuedouble, bh->valuestring, idx_path);
    }
    const cJSON *eod = cJSON_GetObjectItemCaseSensitive(j, LJ_MMIDX_EOD_FIELD);
    if (s == LJ_OK && eod) {
        if (!cJSON_IsNumber(eod) || !(eod->valuedouble >= 0 && eod->valuedouble <= INT32_MAX) ||
            eod->valuedouble != (double)(int32_t)eod->valuedouble)
            s = lj_fail(LJ_ERR_FORMAT, "%s: field '%s' must be a token id (an integer >= 0)", fp_path,
                        LJ_MMIDX_EOD_FIELD);
        else ds->eod_token = (int32_t)eod->valuedouble;
    }
    cJSON_Delete(j);
    free(fp_path);
    return s;
}

/* The prefix the files of `prefix` are read from: where PREFIX.idx leads when it is a symbolic
 * link (an installed dataset's PREFIX.idx -> PREFIX.current/NAME.idx, mmidx.h), so that the .idx,
 * the .bin and the sidecar are read from one version even while a prepare switches to another;
 * else `prefix` itself. Free the result. */
static char *resolved_prefix(const char *prefix) {
    char *idx_path = concat(prefix, ".idx");
    struct stat sb;
    char *real = lstat(idx_path, &sb) == 0 && S_ISLNK(sb.st_mode) ? realpath(idx_path, NULL) : NULL;
    free(idx_path);
    if (real && ends_with(real, ".idx")) {
        real[strlen(real) - 4] = '\0';
        return real;
    }
    free(real);
    return lj_strdup(prefix);
}

static lj_status open_megatron(lj_token_dataset *ds, const char *user_prefix) {
    ds->path = lj_strdup(user_prefix);
    char *prefix = resolved_prefix(user_prefix);
    char *idx_path = concat(prefix, ".idx"), *bin_path = concat(prefix, ".bin");
    lj_status s = map_file(idx_path, &ds->idx_map, &ds->idx_size);
    if (s != LJ_OK) goto done;

    const uint8_t *p = ds->idx_map;
    const size_t n = ds->idx_size;
    if (n < 9 || memcmp(p, LJ_MMIDX_MAGIC, 9) != 0) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: bad magic (expected MMIDIDX\\0\\0, the Megatron-LM indexed dataset header)",
                    idx_path);
        goto done;
    }
    if (n < LJ_MMIDX_HEADER_BYTES) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: truncated: %zu bytes, shorter than the %d-byte header", idx_path, n,
                    LJ_MMIDX_HEADER_BYTES);
        goto done;
    }
    uint64_t version = load_u64(p + 9);
    if (version != LJ_MMIDX_VERSION) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: bad version %llu (expected %d)", idx_path, (unsigned long long)version,
                    LJ_MMIDX_VERSION);
        goto done;
    }
    int code = p[17];
    if (code == LJ_MMIDX_U16 || code == LJ_MMIDX_I32) {
        ds->dtype_code = code;
        ds->token_size = code == LJ_MMIDX_U16 ? 2 : 4;
    } else if (code == LJ_MMIDX_U8 || code == LJ_MMIDX_I8 || code == LJ_MMIDX_I16 || code == LJ_MMIDX_I64) {
        s = lj_fail(LJ_ERR_UNSUPPORTED, "%s: dtype code %d (%s) is not supported: token files must be uint16 (8) or int32 (4)",
                    idx_path, code, dtype_code_name(code));
        goto done;
    } else {
        s = lj_fail(LJ_ERR_FORMAT, "%s: bad dtype code %d (%s; token files use uint16 = 8 or int32 = 4)", idx_path,
                    code, dtype_code_name(code));
        goto done;
    }
    uint64_t nseq = load_u64(p + 18), ndoc = load_u64(p + 26);
    /* Sizes in u64 without overflow: counts above 2^40 are not a real dataset. */
    if (nseq > (1ull << 40) || ndoc > (1ull << 40)) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: implausible sequence count %llu or document count %llu", idx_path,
                    (unsigned long long)nseq, (unsigned long long)ndoc);
        goto done;
    }
    uint64_t want = LJ_MMIDX_HEADER_BYTES + nseq * 4 + nseq * 8 + ndoc * 8;
    if (n < want) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: truncated: %zu bytes but the header (sequence count %llu, document count %llu) "
                    "needs %llu", idx_path, n, (unsigned long long)nseq, (unsigned long long)ndoc,
                    (unsigned long long)want);
        goto done;
    }
    if (n == want + nseq && nseq > 0) {
        s = lj_fail(LJ_ERR_UNSUPPORTED, "%s: has one sequence mode byte per sequence after the document indices "
                    "(a Megatron multimodal dataset); only text token datasets are supported", idx_path);
        goto done;
    }
    if (n != want) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: %zu bytes but the header (sequence count %llu, document count %llu) says %llu",
                    idx_path, n, (unsigned long long)nseq, (unsigned long long)ndoc, (unsigned long long)want);
        goto done;
    }
    const uint8_t *lens = p + LJ_MMIDX_HEADER_BYTES, *ptrs = lens + nseq * 4, *docs = ptrs + nseq * 8;
    int32_t *len = lj_malloc(nseq * sizeof(int32_t));
    int64_t *off = lj_malloc(nseq * sizeof(int64_t));
    memcpy(len, lens, nseq * sizeof(int32_t));
    memcpy(off, ptrs, nseq * sizeof(int64_t));
    ds->seq_lengths = len;
    ds->seq_offsets = off;
    ds->num_sequences = (int64_t)nseq;

    /* Document indices: document_count entries (documents + 1), from 0, non-decreasing, ending
     * at the sequence count (Megatron _IndexWriter.write writes len(document_indices)). */
    if (ndoc == 0) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: document count 0 (the document_indices array has at least the leading 0)",
                    idx_path);
        goto done;
    }
    int64_t prev = 0;
    for (uint64_t i = 0; i < ndoc; i++) {
        int64_t d = (int64_t)load_u64(docs + i * 8);
        if ((i == 0 && d != 0) || d < prev || d > (int64_t)nseq) {
            s = lj_fail(LJ_ERR_FORMAT, "%s: document_indices[%llu] = %lld is out of order (must start at 0, not decrease, "
                        "and stay <= sequence count %llu)", idx_path, (unsigned long long)i, (long long)d,
                        (unsigned long long)nseq);
            goto done;
        }
        prev = d;
    }
    if (prev != (int64_t)nseq) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: document_indices[%llu] = %lld but the sequence count is %llu", idx_path,
                    (unsigned long long)(ndoc - 1), (long long)prev, (unsigned long long)nseq);
        goto done;
    }

    s = map_file(bin_path, &ds->bin_map, &ds->bin_size);
    if (s != LJ_OK) goto done;
    /* Every sequence must lie inside the .bin, on a token boundary. */
    uint64_t extent = 0;
    int64_t extent_seq = -1;
    for (int64_t i = 0; i < ds->num_sequences; i++) {
        if (len[i] < 0) {
            s = lj_fail(LJ_ERR_FORMAT, "%s: sequence_lengths[%lld] = %d is negative", idx_path, (long long)i, len[i]);
            goto done;
        }
        if (off[i] < 0 || off[i] % (int64_t)ds->token_size != 0 || off[i] > (int64_t)1 << 60) {
            s = lj_fail(LJ_ERR_FORMAT, "%s: sequence_pointers[%lld] = %lld is not a byte offset of a %zu-byte token",
                        idx_path, (long long)i, (long long)off[i], ds->token_size);
            goto done;
        }
        uint64_t end = (uint64_t)off[i] + (uint64_t)len[i] * ds->token_size;
        if (end > extent) extent = end, extent_seq = i;
    }
    if (ds->bin_size < extent) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: %zu bytes but %s says %llu (sequence_pointers[%lld] + sequence_lengths[%lld] x %zu "
                    "bytes): the .bin is truncated or belongs to another .idx", bin_path, ds->bin_size, idx_path,
                    (unsigned long long)extent, (long long)extent_seq, (long long)extent_seq, ds->token_size);
        goto done;
    }
    if (ds->bin_size % ds->token_size != 0) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: %zu bytes is not a whole number of %zu-byte tokens (dtype code %d in %s)",
                    bin_path, ds->bin_size, ds->token_size, code, idx_path);
        goto done;
    }
    if (ds->bin_size > extent) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: %zu bytes, more than the %llu that %s describes: the .bin belongs to another "
                    "index (a prepare interrupted between its renames?); run prepare again", bin_path, ds->bin_size,
                    (unsigned long long)extent, idx_path);
        goto done;
    }
    if ((s = check_fingerprint(ds, prefix, idx_path, bin_path)) != LJ_OK) goto done;
    ds->num_tokens = (int64_t)(ds->bin_size / ds->token_size);
    ds->tokens = ds->bin_map;
done:
    free(idx_path);
    free(bin_path);
    free(prefix);
    return s;
}

static int parse_hex(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsString(v) || strlen(v->valuestring) != 16) return 0;
    char *end;
    *out = strtoull(v->valuestring, &end, 16);
    return *end == '\0';
}

/* An id field of the tokenizer record: an integer >= 0, or null (-1); 0 when it is neither. */
static int parse_id(const cJSON *v, int32_t *out) {
    if (cJSON_IsNull(v)) {
        *out = -1;
        return 1;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= INT32_MAX) ||
        v->valuedouble != (double)(int32_t)v->valuedouble)
        return 0;
    *out = (int32_t)v->valuedouble;
    return 1;
}

lj_status lj_mmidx_read_tokenizer(const char *user_prefix, lj_mmidx_tokenizer *t, int *found) {
    memset(t, 0, sizeof *t);
    *found = 0;
    char *prefix = resolved_prefix(user_prefix);
    char *fp_path = concat(prefix, LJ_MMIDX_FINGERPRINT_SUFFIX);
    free(prefix);
    struct stat sb;
    if (stat(fp_path, &sb) != 0) {
        free(fp_path);
        return LJ_OK;
    }
    char *text = NULL;
    lj_status s = lj_file_read_all(fp_path, &text, NULL);
    cJSON *j = s == LJ_OK ? cJSON_Parse(text) : NULL;
    free(text);
    if (s == LJ_OK && !cJSON_IsObject(j)) s = lj_fail(LJ_ERR_FORMAT, "%s: not a JSON object", fp_path);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, LJ_MMIDX_TOKENIZER_FIELD);
    if (s == LJ_OK && o) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name"), *path = cJSON_GetObjectItemCaseSensitive(o, "path");
        const cJSON *vs = cJSON_GetObjectItemCaseSensitive(o, "vocab_size");
        int32_t vocab = 0;
        if (!cJSON_IsString(name) || !cJSON_IsString(path) || strlen(name->valuestring) >= sizeof t->name ||
            strlen(path->valuestring) >= sizeof t->path ||
            !parse_hex(cJSON_GetObjectItemCaseSensitive(o, "file_xxh3_64"), &t->file_xxh3_64) ||
            !parse_hex(cJSON_GetObjectItemCaseSensitive(o, "ids_xxh3_64"), &t->ids_xxh3_64) ||
            !parse_id(vs, &vocab) || vocab <= 0 ||
            !parse_id(cJSON_GetObjectItemCaseSensitive(o, "bos_token_id"), &t->bos_token_id) ||
            !parse_id(cJSON_GetObjectItemCaseSensitive(o, "eos_token_id"), &t->eos_token_id)) {
            s = lj_fail(LJ_ERR_FORMAT, "%s: field '%s' must hold name, path, file_xxh3_64, ids_xxh3_64 (16 hex digits), "
                                       "vocab_size, bos_token_id and eos_token_id (ids or null); run prepare again",
                        fp_path, LJ_MMIDX_TOKENIZER_FIELD);
        } else {
            snprintf(t->name, sizeof t->name, "%s", name->valuestring);
            snprintf(t->path, sizeof t->path, "%s", path->valuestring);
            t->vocab_size = vocab;
            *found = 1;
        }
    }
    cJSON_Delete(j);
    free(fp_path);
    return s;
}

lj_status lj_mmidx_tokenizer_matches(const lj_mmidx_tokenizer *t, const char *path, int *same) {
    *same = 0;
    char *text = NULL;
    size_t len = 0;
    LJ_TRY(lj_file_read_all(path, &text, &len));
    const uint64_t h = XXH3_64bits(text, len);
    free(text);
    if (h == t->file_xxh3_64) {
        *same = 1;
        return LJ_OK;
    }
    lj_tokenizer *tok = NULL;
    LJ_TRY(lj_tokenizer_load(path, &tok));
    *same = lj_tokenizer_ids_hash(tok) == t->ids_xxh3_64;
    lj_tokenizer_free(tok);
    return LJ_OK;
}

int lj_mmidx_tokenizer_locate(const lj_mmidx_tokenizer *t, char *buf, size_t buflen) {
    int same = 0;
    snprintf(buf, buflen, "%s", t->path);
    if (access(t->path, R_OK) == 0 && lj_mmidx_tokenizer_matches(t, t->path, &same) == LJ_OK && same) return 1;
    char other[4096];
    if (strcmp(t->name, t->path) != 0 && lj_tokenizer_resolve(t->name, "tokenizer", other, sizeof other) == LJ_OK &&
        access(other, R_OK) == 0 && lj_mmidx_tokenizer_matches(t, other, &same) == LJ_OK && same) {
        snprintf(buf, buflen, "%s", other);
        return 1;
    }
    return 0;
}

lj_status lj_token_dataset_open(lj_token_dataset *ds, const char *path) {
    memset(ds, 0, sizeof *ds);
    /* PREFIX, PREFIX.idx or PREFIX.bin name a Megatron dataset when PREFIX.idx exists; a file
     * that starts with an llm.c magic and has no .idx beside it is an llm.c shard. */
    char *prefix = lj_strdup(path);
    if (ends_with(prefix, ".idx") || ends_with(prefix, ".bin")) prefix[strlen(prefix) - 4] = '\0';
    char *idx_path = concat(prefix, ".idx");
    int have_idx = file_exists(idx_path);
    int32_t magic = 0;
    lj_status s;
    if (have_idx) {
        s = open_megatron(ds, prefix);
    } else if (peek_llmc_magic(path, &magic)) {
        s = open_llmc(ds, path);
    } else if (file_exists(path) && !ends_with(path, ".idx")) {
        int32_t first = 0;
        int fd = open(path, O_RDONLY);
        uint8_t b[4] = {0};
        if (fd >= 0) {
            if (read(fd, b, 4) == 4) first = load_i32(b);
            close(fd);
        }
        s = lj_fail(LJ_ERR_FORMAT, "%s: not an llm.c shard (magic %d, expected %d or %d) and %s does not exist", path,
                    first, LJ_LLMC_MAGIC_U16, LJ_LLMC_MAGIC_U32, idx_path);
    } else {
        struct stat sb;
        const int err = stat(idx_path, &sb) == 0 ? (S_ISDIR(sb.st_mode) ? EISDIR : 0) : errno;
        if (err == 0) s = lj_fail(LJ_ERR_IO, "%s: not a regular file", idx_path);
        else s = lj_fail(LJ_ERR_IO, "%s: cannot open (%s)", idx_path, strerror(err));
    }
    free(prefix);
    free(idx_path);
    if (s != LJ_OK) lj_token_dataset_close(ds);
    return s;
}

void lj_token_dataset_close(lj_token_dataset *ds) {
    if (!ds) return;
    if (ds->idx_map) munmap(ds->idx_map, ds->idx_size);
    if (ds->bin_map) munmap(ds->bin_map, ds->bin_size);
    free(ds->path);
    free((void *)ds->seq_lengths);
    free((void *)ds->seq_offsets);
    free(ds->owned_tokens);
    memset(ds, 0, sizeof *ds);
}

void lj_token_dataset_mock(lj_token_dataset *ds, int vocab_size, int64_t num_sequences, uint64_t seed) {
    LJ_ASSERT(vocab_size >= 3 && num_sequences > 0);
    memset(ds, 0, sizeof *ds);
    int32_t *lengths = lj_malloc((size_t)num_sequences * sizeof *lengths);
    int64_t *offsets = lj_malloc((size_t)num_sequences * sizeof *offsets);
    lj_rng rng;
    lj_rng_seed(&rng, seed);
    int64_t total = 0;
    for (int64_t i = 0; i < num_sequences; i++) {
        lengths[i] = 1 + (int32_t)lj_rng_below(&rng, 4095);
        offsets[i] = total * (int64_t)sizeof(int32_t);
        total += lengths[i];
    }
    int32_t *tokens = lj_malloc((size_t)total * sizeof *tokens);
    const int32_t eod = lj_token_dataset_mock_eod(vocab_size);
    for (int64_t i = 0, at = 0; i < num_sequences; i++) {
        for (int32_t k = 0; k + 1 < lengths[i]; k++) tokens[at++] = 1 + k % (vocab_size - 2);
        tokens[at++] = eod;
    }
    ds->path = lj_strdup("(mock data)");
    ds->dtype_code = LJ_MMIDX_I32;
    ds->num_sequences = num_sequences;
    ds->seq_lengths = lengths;
    ds->seq_offsets = offsets;
    ds->num_tokens = total;
    ds->tokens = tokens;
    ds->token_size = sizeof(int32_t);
    ds->owned_tokens = tokens;
    ds->eod_token = eod;
    ds->bin_xxh3_64 = lj_mmidx_bin_fingerprint(tokens, (size_t)total * sizeof *tokens);
}

/* The name of the file that holds the tokens, for messages. */
static void bin_name(const lj_token_dataset *ds, char *buf, size_t n) {
    if (ds->idx_map)
        snprintf(buf, n, "%s.bin", ds->path);
    else
        snprintf(buf, n, "%s", ds->path);
}

lj_status lj_token_dataset_check_vocab(const lj_token_dataset *ds, int vocab_size) {
    LJ_ASSERT(vocab_size > 0);
    /* Blocks of 4096 ids: a vectorisable min/max pass, and an exact scan only for a bad block. */
    const int64_t block = 4096;
    for (int64_t b = 0; b < ds->num_tokens; b += block) {
        int64_t e = b + block < ds->num_tokens ? b + block : ds->num_tokens;
        int bad = 0;
        if (ds->token_size == 2) {
            const uint16_t *t = (const uint16_t *)ds->tokens;
            uint16_t mx = 0;
            for (int64_t i = b; i < e; i++) mx = t[i] > mx ? t[i] : mx;
            bad = (int)mx >= vocab_size;
        } else {
            const int32_t *t = (const int32_t *)ds->tokens;
            int32_t mx = 0, mn = 0;
            for (int64_t i = b; i < e; i++) {
                mx = t[i] > mx ? t[i] : mx;
                mn = t[i] < mn ? t[i] : mn;
            }
            bad = mx >= vocab_size || mn < 0;
        }
        if (!bad) continue;
        for (int64_t i = b; i < e; i++) {
            int64_t id = lj_token_dataset_get(ds, i);
            if (ds->token_size == 4 && !ds->idx_map) id = (uint32_t)id; /* llm.c uint32 */
            if (id < 0 || id >= vocab_size) {
                char name[1100];
                bin_name(ds, name, sizeof name);
                if (id < 0)
                    return lj_fail(LJ_ERR_FORMAT, "%s: token %lld at position %lld is negative", name, (long long)id,
                                   (long long)i);
                return lj_fail(LJ_ERR_FORMAT, "%s: token %lld at position %lld is >= vocab_size %d", name,
                               (long long)id, (long long)i, vocab_size);
            }
        }
    }
    return LJ_OK;
}

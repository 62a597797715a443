/* safetensors.c: the safetensors reader (mmap + full validation) and atomic writer. */
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/progress.h"
#include "base/worker.h"

/* The progress of reading one file's tensors (lj_safetensors_read_f32). */
struct lj_st_reading {
    lj_progress progress;
    uint64_t bytes;
};

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "io/safetensors.c assumes a little-endian host (safetensors data is little-endian)"
#endif

static const struct { const char *name; size_t size; } k_dtypes[LJ_ST_DTYPE_COUNT] = {
    [LJ_ST_F32] = {"F32", 4},   [LJ_ST_BF16] = {"BF16", 2}, [LJ_ST_F16] = {"F16", 2},
    [LJ_ST_F64] = {"F64", 8},   [LJ_ST_I8] = {"I8", 1},     [LJ_ST_I16] = {"I16", 2},
    [LJ_ST_I32] = {"I32", 4},   [LJ_ST_I64] = {"I64", 8},   [LJ_ST_U8] = {"U8", 1},
    [LJ_ST_U16] = {"U16", 2},   [LJ_ST_U32] = {"U32", 4},   [LJ_ST_U64] = {"U64", 8},
    [LJ_ST_BOOL] = {"BOOL", 1}, [LJ_ST_F8_E5M2] = {"F8_E5M2", 1}, [LJ_ST_F8_E4M3] = {"F8_E4M3", 1},
};

const char *lj_st_dtype_name(lj_st_dtype dtype) {
    LJ_ASSERT((unsigned)dtype < LJ_ST_DTYPE_COUNT, "bad safetensors dtype %d", (int)dtype);
    return k_dtypes[dtype].name;
}

size_t lj_st_dtype_size(lj_st_dtype dtype) {
    LJ_ASSERT((unsigned)dtype < LJ_ST_DTYPE_COUNT, "bad safetensors dtype %d", (int)dtype);
    return k_dtypes[dtype].size;
}

int lj_st_dtype_parse(const char *name, lj_st_dtype *dtype) {
    for (int i = 0; i < LJ_ST_DTYPE_COUNT; i++) {
        if (strcmp(k_dtypes[i].name, name) == 0) {
            *dtype = (lj_st_dtype)i;
            return 1;
        }
    }
    return 0;
}

/* IEEE 754 binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
uint16_t lj_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN, quiet */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (a >= 0x38800000u) {                                    /* normal half: rebias 127 -> 15 */
        uint32_t v = a - 0x38000000u;
        v += 0xfffu + ((v >> 13) & 1u);
        return (uint16_t)(sign | (v >> 13));
    }
    /* Subnormal half: round(|f| * 2^24) to nearest even. */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | (e ? 0x800000u : 0);
    uint32_t shift = 126u - (e ? e : 1u);
    if (shift > 24) return sign;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

float lj_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
    if (exp == 0) {
        float v = (float)mant * 5.9604644775390625e-8f; /* mant * 2^-24, exact */
        return sign ? -v : v;
    }
    if (exp == 31) x = sign | 0x7f800000u | (mant << 13);
    else x = sign | ((exp + 112u) << 23) | (mant << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* ---- reader ------------------------------------------------------------------------ */

void lj_safetensors_close(lj_safetensors *st) {
    for (int i = 0; i < st->count; i++) free((char *)st->entries[i].name);
    for (int i = 0; i < st->meta_count; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    free(st->entries);
    free(st->meta_keys);
    free(st->meta_values);
    free(st->by_name);
    free(st->path);
    if (st->map) munmap(st->map, st->map_bytes);
    if (st->reading) lj_progress_end(&st->reading->progress);
    free(st->reading);
    memset(st, 0, sizeof *st);
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static int json_u64(const cJSON *it, uint64_t *out) {
    if (!cJSON_IsNumber(it)) return 0;
    double v = it->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != (double)(uint64_t)v) return 0;
    *out = (uint64_t)v;
    return 1;
}

static void format_shape(const lj_st_entry *e, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < e->ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

/* Parses one tensor entry (everything but the contiguity of the offsets). */
static lj_status parse_entry(const lj_safetensors *st, const cJSON *item, lj_st_entry *e) {
    const char *p = st->path, *nm = item->string;
    if (!cJSON_IsObject(item)) return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", p, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!dt || !sh || !of)
        return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': missing field '%s'", p, nm, !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    if (!cJSON_IsString(dt)) return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': field 'dtype' is not a string", p, nm);
    if (!lj_st_dtype_parse(dt->valuestring, &e->dtype))
        return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': unknown dtype \"%s\"", p, nm, dt->valuestring);
    if (!cJSON_IsArray(sh)) return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': field 'shape' is not an array", p, nm);
    e->ndim = cJSON_GetArraySize(sh);
    if (e->ndim > LJ_ST_MAX_DIMS)
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: tensor '%s': %d dimensions (at most %d supported)", p, nm, e->ndim, LJ_ST_MAX_DIMS);
    uint64_t numel = 1;
    int overflow = 0;
    for (int d = 0; d < e->ndim; d++) {
        uint64_t v;
        if (!json_u64(cJSON_GetArrayItem(sh, d), &v))
            return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", p, nm, d);
        e->shape[d] = (int64_t)v;
        overflow |= __builtin_mul_overflow(numel, v, &numel);
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, (uint64_t)lj_st_dtype_size(e->dtype), &nbytes);
    if (overflow) return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': shape is too large", p, nm);
    e->numel = (int64_t)numel;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !json_u64(cJSON_GetArrayItem(of, 0), &e->begin) ||
        !json_u64(cJSON_GetArrayItem(of, 1), &e->end))
        return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': field 'data_offsets' is not two non-negative integers [begin, end]", p, nm);
    if (e->begin > e->end)
        return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", p, nm,
                       (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > st->buffer_bytes)
        return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] exceed the buffer (%llu bytes); truncated file?",
                       p, nm, (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)st->buffer_bytes);
    if (e->end - e->begin != nbytes) {
        char shape[256];
        format_shape(e, shape, sizeof shape);
        return lj_fail(LJ_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%llu, %llu] span %llu bytes, but shape %s of %s needs %llu bytes", p, nm,
                       (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)(e->end - e->begin), shape,
                       lj_st_dtype_name(e->dtype), (unsigned long long)nbytes);
    }
    return LJ_OK;
}

static lj_status parse_metadata(lj_safetensors *st, const cJSON *meta) {
    if (st->meta_keys) return lj_fail(LJ_ERR_FORMAT, "%s: duplicate \"__metadata__\" entry", st->path);
    if (!cJSON_IsObject(meta)) return lj_fail(LJ_ERR_FORMAT, "%s: \"__metadata__\" is not a JSON object", st->path);
    int n = cJSON_GetArraySize(meta);
    st->meta_keys = lj_calloc((size_t)n, sizeof(char *));
    st->meta_values = lj_calloc((size_t)n, sizeof(char *));
    for (const cJSON *it = meta->child; it; it = it->next) {
        if (!cJSON_IsString(it))
            return lj_fail(LJ_ERR_FORMAT, "%s: \"__metadata__\" field '%s' is not a string", st->path, it->string);
        st->meta_keys[st->meta_count] = lj_strdup(it->string);
        st->meta_values[st->meta_count++] = lj_strdup(it->valuestring);
    }
    return LJ_OK;
}

static int cmp_offsets(const void *a, const void *b) {
    const lj_st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_names(const void *a, const void *b) {
    return strcmp((*(const lj_st_entry *const *)a)->name, (*(const lj_st_entry *const *)b)->name);
}

/* Parses the header JSON into st->entries / metadata and checks every rule of the format. */
static lj_status parse_header(lj_safetensors *st, const char *json, size_t len) {
    const char *p = st->path;
    if (len == 0 || json[0] != '{') return lj_fail(LJ_ERR_FORMAT, "%s: header does not start with '{' (not a safetensors file?)", p);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        size_t at = end && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        return lj_fail(LJ_ERR_FORMAT, "%s: header is not valid JSON (error near byte %zu of %zu)", p, at, len);
    }
    lj_status s = LJ_OK;
    for (const char *c = end; c < json + len; c++) {
        if (*c != ' ' && *c != '\n' && *c != '\t' && *c != '\r' && *c != '\0') {
            s = lj_fail(LJ_ERR_FORMAT, "%s: header has bytes after the JSON object (at byte %zu of %zu)", p, (size_t)(c - json), len);
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: header is not a JSON object", p);
        goto done;
    }
    int n = cJSON_GetArraySize(root);
    st->entries = lj_calloc((size_t)n, sizeof(lj_st_entry));
    for (const cJSON *it = root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if ((s = parse_metadata(st, it)) != LJ_OK) goto done;
            continue;
        }
        lj_st_entry *e = &st->entries[st->count];
        if ((s = parse_entry(st, it, e)) != LJ_OK) goto done;
        e->name = lj_strdup(it->string);
        st->count++;
    }
    /* Names: unique. */
    qsort(st->entries, (size_t)st->count, sizeof(lj_st_entry), cmp_offsets);
    st->by_name = lj_calloc((size_t)st->count, sizeof(lj_st_entry *));
    for (int i = 0; i < st->count; i++) st->by_name[i] = &st->entries[i];
    qsort(st->by_name, (size_t)st->count, sizeof(lj_st_entry *), cmp_names);
    for (int i = 1; i < st->count; i++) {
        if (strcmp(st->by_name[i]->name, st->by_name[i - 1]->name) == 0) {
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", p, st->by_name[i]->name);
            goto done;
        }
    }
    /* Offsets: contiguous from 0 to the end of the buffer (safetensors/src/tensor.rs). */
    uint64_t next = 0;
    for (int i = 0; i < st->count; i++) {
        const lj_st_entry *e = &st->entries[i];
        if (e->begin < next) {
            const lj_st_entry *q = &st->entries[i - 1];
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]", p, e->name,
                        (unsigned long long)e->begin, (unsigned long long)e->end, q->name, (unsigned long long)q->begin,
                        (unsigned long long)q->end);
            goto done;
        }
        if (e->begin > next) {
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] leave a gap: bytes [%llu, %llu) belong to no tensor",
                        p, e->name, (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)next,
                        (unsigned long long)e->begin);
            goto done;
        }
        next = e->end;
    }
    if (next != st->buffer_bytes) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: the tensors cover %llu bytes of data but the file holds %llu (trailing bytes)", p,
                    (unsigned long long)next, (unsigned long long)st->buffer_bytes);
        goto done;
    }
done:
    cJSON_Delete(root);
    return s;
}

lj_status lj_safetensors_open(lj_safetensors *st, const char *path) {
    memset(st, 0, sizeof *st);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return lj_fail(LJ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return lj_fail(LJ_ERR_IO, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return lj_fail(LJ_ERR_FORMAT, "%s: file is %llu bytes, too short for a safetensors header (truncated?)", path,
                       (unsigned long long)size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) return lj_fail(LJ_ERR_IO, "%s: cannot mmap: %s", path, strerror(map_errno));
    st->map = map;
    st->map_bytes = (size_t)size;
    st->path = lj_strdup(path);
    const unsigned char *bytes = map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | bytes[i];
    lj_status s = LJ_OK;
    if (n > LJ_ST_MAX_HEADER_BYTES) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: header length %llu is above the %llu-byte limit (not a safetensors file?)", path,
                    (unsigned long long)n, LJ_ST_MAX_HEADER_BYTES);
    } else if (n > size - 8) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%llu bytes); truncated?", path,
                    (unsigned long long)n, (unsigned long long)size);
    } else {
        st->header_bytes = n;
        st->buffer_bytes = size - 8 - n;
        s = parse_header(st, (const char *)bytes + 8, (size_t)n);
    }
    if (s != LJ_OK) {
        lj_safetensors_close(st);
        return s;
    }
    const unsigned char *buffer = bytes + 8 + n;
    for (int i = 0; i < st->count; i++) st->entries[i].data = buffer + st->entries[i].begin;
    return LJ_OK;
}

static int find_cmp(const void *key, const void *elem) {
    return strcmp((const char *)key, (*(const lj_st_entry *const *)elem)->name);
}

const lj_st_entry *lj_safetensors_find(const lj_safetensors *st, const char *name) {
    if (st->count == 0) return NULL;
    const lj_st_entry *const *hit = bsearch(name, st->by_name, (size_t)st->count, sizeof(lj_st_entry *), find_cmp);
    return hit ? *hit : NULL;
}

const char *lj_safetensors_metadata(const lj_safetensors *st, const char *key) {
    for (int i = 0; i < st->meta_count; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
    return NULL;
}

/* Elements per step of a read, so that a large tensor reports its progress as it goes. */
#define READ_STEP ((int64_t)16 << 20)

lj_status lj_safetensors_read_f32(const lj_safetensors *st, const lj_st_entry *e, float *dst) {
    const unsigned char *src = e->data;
    if (e->dtype != LJ_ST_F32 && e->dtype != LJ_ST_BF16 && e->dtype != LJ_ST_F16)
        return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' has dtype %s; expected F32, BF16 or F16", st->path, e->name,
                       lj_st_dtype_name(e->dtype));
    struct lj_st_reading *r = st->reading;
    if (!r) { /* the first read of this file: progress over all of its tensor bytes */
        r = ((lj_safetensors *)st)->reading = lj_calloc(1, sizeof *r);
        char what[200];
        snprintf(what, sizeof what, "reading %s", st->path);
        lj_progress_begin(&r->progress, what, st->buffer_bytes);
    }
    const size_t es = lj_st_dtype_size(e->dtype);
    for (int64_t i0 = 0; i0 < e->numel; i0 += READ_STEP) {
        const int64_t n = e->numel - i0 < READ_STEP ? e->numel - i0 : READ_STEP;
        const unsigned char *s = src + (size_t)i0 * es;
        float *d = dst + i0;
        if (e->dtype == LJ_ST_F32) memcpy(d, s, (size_t)n * 4);
        else if (e->dtype == LJ_ST_BF16)
            for (int64_t i = 0; i < n; i++) d[i] = lj_bf16_to_f32((uint16_t)(s[2 * i] | (s[2 * i + 1] << 8)));
        else
            for (int64_t i = 0; i < n; i++) d[i] = lj_f16_to_f32((uint16_t)(s[2 * i] | (s[2 * i + 1] << 8)));
        r->bytes += (uint64_t)n * es;
        lj_progress_update(&r->progress, r->bytes);
    }
    if (r->bytes >= st->buffer_bytes) lj_progress_end(&r->progress);
    return LJ_OK;
}

/* ---- writer ------------------------------------------------------------------------ */

int64_t lj_st_tensor_numel(const lj_st_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static lj_status check_tensors(const char *path, const lj_st_tensor *ts, int n, const char *const *keys, int n_meta) {
    for (int i = 0; i < n; i++) {
        const lj_st_tensor *t = &ts[i];
        if (!t->name || !t->name[0]) return lj_fail(LJ_ERR_ARG, "%s: tensor %d has an empty name", path, i);
        if (strcmp(t->name, "__metadata__") == 0) return lj_fail(LJ_ERR_ARG, "%s: \"__metadata__\" cannot name a tensor", path);
        if ((unsigned)t->dtype >= LJ_ST_DTYPE_COUNT) return lj_fail(LJ_ERR_ARG, "%s: tensor '%s': bad dtype", path, t->name);
        if (t->ndim < 0 || t->ndim > LJ_ST_MAX_DIMS)
            return lj_fail(LJ_ERR_ARG, "%s: tensor '%s': ndim %d outside [0, %d]", path, t->name, t->ndim, LJ_ST_MAX_DIMS);
        uint64_t bytes = lj_st_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0) return lj_fail(LJ_ERR_ARG, "%s: tensor '%s': negative dimension", path, t->name);
            if (__builtin_mul_overflow(bytes, (uint64_t)t->shape[d], &bytes))
                return lj_fail(LJ_ERR_ARG, "%s: tensor '%s': shape too large", path, t->name);
        }
        if ((t->from_f32 || t->read_f32) && t->dtype != LJ_ST_F32 && t->dtype != LJ_ST_BF16 && t->dtype != LJ_ST_F16)
            return lj_fail(LJ_ERR_ARG, "%s: tensor '%s': cannot convert fp32 to %s", path, t->name, lj_st_dtype_name(t->dtype));
        if (bytes > 0 && !t->data && !t->from_f32 && !t->read_f32) return lj_fail(LJ_ERR_ARG, "%s: tensor '%s': no data", path, t->name);
        for (int j = 0; j < i; j++)
            if (strcmp(ts[j].name, t->name) == 0) return lj_fail(LJ_ERR_ARG, "%s: tensor '%s' given twice", path, t->name);
    }
    for (int i = 0; i < n_meta; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(keys[j], keys[i]) == 0) return lj_fail(LJ_ERR_ARG, "%s: metadata key '%s' given twice", path, keys[i]);
    return LJ_OK;
}

static cJSON *json_uint(uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return cJSON_CreateRaw(buf);
}

/* The header JSON (without padding): "__metadata__" first, then the tensors in order. */
static char *build_header(const lj_st_tensor *ts, int n, const char *const *keys, const char *const *values, int n_meta) {
    cJSON *root = cJSON_CreateObject();
    if (n_meta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(meta, keys[i], values[i]);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const lj_st_tensor *t = &ts[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(e, "dtype", lj_st_dtype_name(t->dtype));
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, json_uint((uint64_t)t->shape[d]));
        uint64_t bytes = (uint64_t)lj_st_tensor_numel(t) * lj_st_dtype_size(t->dtype);
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, json_uint(off));
        cJSON_AddItemToArray(offs, json_uint(off + bytes));
        off += bytes;
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    LJ_ASSERT(text != NULL, "cJSON_PrintUnformatted failed");
    return text;
}

/* Writes n bytes in steps of at most 64 MiB, reporting each to `pg` (NULL: none). */
static int write_all(int fd, const void *data, size_t n, lj_progress *pg) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n > (64u << 20) ? (64u << 20) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        if (pg) lj_progress_update(pg, pg->done + (uint64_t)w);
    }
    return 0;
}

/* The streamed tensors of one file go through two chunk buffers: the caller's read_f32 fills
 * one while a writer thread (base/worker.h) converts the other to the tensor's dtype (in place)
 * and writes it; job j is buffer j % 2. */
typedef struct {
    int fd;
    lj_progress *pg;
    float *buf[2];
    int64_t n[2]; /* values in buf */
    lj_st_dtype dtype[2];
    lj_worker worker; /* its error: the errno of the first failed write */
} st_pipe;

/* The job: converts chunk `job` in place (the 2-byte values fill the front of the buffer) and
 * writes it; after a failure the rest is dropped. */
static int pipe_write_chunk(void *ctx, int64_t job, int failed) {
    st_pipe *p = ctx;
    if (failed) return 0;
    float *buf = p->buf[job % 2];
    const int64_t m = p->n[job % 2];
    const lj_st_dtype dtype = p->dtype[job % 2];
    if (dtype != LJ_ST_F32) {
        uint16_t *h = (uint16_t *)buf;
        for (int64_t j = 0; j < m; j++) h[j] = dtype == LJ_ST_BF16 ? lj_f32_to_bf16(buf[j]) : lj_f32_to_f16(buf[j]);
    }
    return write_all(p->fd, buf, (size_t)m * lj_st_dtype_size(dtype), p->pg) == 0 ? 0 : (errno ? errno : EIO);
}

/* Waits until at most `pending` chunks are the thread's. -1 with errno set: a write failed. */
static int pipe_wait(st_pipe *p, int64_t pending) {
    const int e = lj_worker_wait(&p->worker, pending, NULL);
    if (e) errno = e;
    return e ? -1 : 0;
}

static void pipe_open(st_pipe *p, int fd, lj_progress *pg) {
    memset(p, 0, sizeof *p);
    p->fd = fd;
    p->pg = pg;
    p->buf[0] = lj_malloc(2 * (size_t)LJ_ST_STREAM_CHUNK * sizeof(float));
    p->buf[1] = p->buf[0] + LJ_ST_STREAM_CHUNK;
    lj_worker_start(&p->worker, pipe_write_chunk, p);
}

/* Lets the thread finish its chunks, then frees the pipe. -1 with errno set: a write failed. */
static int pipe_close(st_pipe *p) {
    if (!p->buf[0]) return 0;
    const int rc = pipe_wait(p, 0);
    const int e = errno;
    lj_worker_stop(&p->worker);
    errno = e;
    free(p->buf[0]);
    p->buf[0] = NULL;
    return rc;
}

/* A streamed tensor (read_f32), through the file's pipe (opened on the first one). -2 when the
 * source failed (its message is set), -1 for a write error (errno). */
static int write_streamed(int fd, const lj_st_tensor *t, lj_progress *pg, st_pipe *p) {
    if (!p->buf[0]) pipe_open(p, fd, pg);
    const int64_t numel = lj_st_tensor_numel(t);
    for (int64_t i = 0; i < numel; i += LJ_ST_STREAM_CHUNK) {
        const int64_t m = numel - i < LJ_ST_STREAM_CHUNK ? numel - i : LJ_ST_STREAM_CHUNK;
        if (pipe_wait(p, 1) != 0) return -1; /* a buffer is free */
        const int k = (int)(p->worker.queued % 2);
        if (t->read_f32(t->read_ctx, t->read_offset + i, m, p->buf[k]) != LJ_OK) return -2;
        p->n[k] = m;
        p->dtype[k] = t->dtype;
        lj_worker_submit(&p->worker);
    }
    return pipe_wait(p, p->worker.has_thread ? 2 : 0); /* without a thread: this chunk's write error */
}

/* Writes one tensor's bytes, converting from fp32 in chunks when asked; a tensor that is not
 * streamed waits for the streamed chunks before it (they are written in order). */
static int write_tensor(int fd, const lj_st_tensor *t, lj_progress *pg, st_pipe *p) {
    int64_t numel = lj_st_tensor_numel(t);
    size_t esize = lj_st_dtype_size(t->dtype);
    if (t->read_f32) return write_streamed(fd, t, pg, p);
    if (p->buf[0] && pipe_wait(p, 0) != 0) return -1;
    if (!t->from_f32 || t->dtype == LJ_ST_F32) {
        const void *src = t->from_f32 ? (const void *)t->from_f32 : t->data;
        return numel ? write_all(fd, src, (size_t)numel * esize, pg) : 0;
    }
    enum { CHUNK = 1 << 16 };
    uint16_t *buf = lj_malloc(CHUNK * sizeof(uint16_t));
    int rc = 0;
    for (int64_t i = 0; i < numel && rc == 0; i += CHUNK) {
        int64_t m = numel - i < CHUNK ? numel - i : CHUNK;
        for (int64_t j = 0; j < m; j++)
            buf[j] = t->dtype == LJ_ST_BF16 ? lj_f32_to_bf16(t->from_f32[i + j]) : lj_f32_to_f16(t->from_f32[i + j]);
        rc = write_all(fd, buf, (size_t)m * sizeof(uint16_t), pg);
    }
    free(buf);
    return rc;
}

/* fsyncs the directory holding `path` so that a rename inside it is durable. */
static void fsync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? lj_strdup(path) : lj_strdup(".");
    if (slash) dir[slash == path ? 1 : slash - path] = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

lj_status lj_safetensors_write(const char *path, const lj_st_tensor *tensors, int n, const char *const *meta_keys,
                               const char *const *meta_values, int n_meta) {
    LJ_ASSERT(n >= 0 && n_meta >= 0 && (n == 0 || tensors) && (n_meta == 0 || (meta_keys && meta_values)));
    LJ_TRY(check_tensors(path, tensors, n, meta_keys, n_meta));
    char *header = build_header(tensors, n, meta_keys, meta_values, n_meta);
    size_t len = strlen(header);
    size_t padded = (len + 7) & ~(size_t)7;
    size_t tmp_len = strlen(path) + 32;
    char *tmp = lj_malloc(tmp_len);
    snprintf(tmp, tmp_len, "%s.tmp.%d", path, (int)getpid());
    lj_status s = LJ_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        s = lj_fail(LJ_ERR_IO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        goto out;
    }
    unsigned char n8[8];
    for (int i = 0; i < 8; i++) n8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    uint64_t total = 8 + padded;
    for (int i = 0; i < n; i++) total += (uint64_t)lj_st_tensor_numel(&tensors[i]) * lj_st_dtype_size(tensors[i].dtype);
    lj_progress pg;
    char what[200];
    snprintf(what, sizeof what, "writing %s", path);
    lj_progress_begin(&pg, what, total);
    int rc = write_all(fd, n8, 8, &pg);
    if (rc == 0) rc = write_all(fd, header, len, &pg);
    if (rc == 0) rc = write_all(fd, "        ", padded - len, &pg);
    st_pipe pipe = {0};
    for (int i = 0; i < n && rc == 0; i++) rc = write_tensor(fd, &tensors[i], &pg, &pipe);
    if (rc == -2) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", lj_error_message());
        (void)pipe_close(&pipe);
        lj_fail(LJ_ERR_IO, "%s", msg); /* set again below, with the path */
    } else {
        const int e = errno;
        if (pipe_close(&pipe) != 0 && rc == 0) rc = -1;
        else if (rc != 0) errno = e;
    }
    if (rc == -2) s = lj_fail(LJ_ERR_IO, "%s: %s", path, lj_error_message());
    else if (rc != 0) s = lj_fail(LJ_ERR_IO, "%s: write to %s failed: %s", path, tmp, strerror(errno));
    else if (fsync(fd) != 0) s = lj_fail(LJ_ERR_IO, "%s: fsync of %s failed: %s", path, tmp, strerror(errno));
    if (close(fd) != 0 && s == LJ_OK) s = lj_fail(LJ_ERR_IO, "%s: close of %s failed: %s", path, tmp, strerror(errno));
    lj_progress_end(&pg); /* after the fsync: the rate is the disk's, not the page cache's */
    if (s == LJ_OK && rename(tmp, path) != 0) s = lj_fail(LJ_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
    if (s != LJ_OK) unlink(tmp);
    else fsync_parent(path);
out:
    free(tmp);
    free(header);
    return s;
}

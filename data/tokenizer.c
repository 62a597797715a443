/* tokenizer.c: byte-level BPE (Llama 3 / GPT-2) from a Hugging Face tokenizer.json: loading with
 * cJSON, pre-tokenizing with PCRE2, BPE merges with a heap, decoding, and UTF-8 checks. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "base/fs.h"
#include "data/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <pcre2.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* The GPT-2 regex, built into HF's ByteLevel pre-tokenizer (tokenizers byte_level.rs). */
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* The Llama 3 Split regex (REFERENCE.md); only this one allows lj_tokenizer_split_point. */
static const char LLAMA3_PATTERN[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

enum { PRE_NONE, PRE_SPLIT_THEN_BYTES, PRE_BYTELEVEL_REGEX };
enum { MAX_ID = 1 << 24 }; /* a sanity bound on token ids */
enum { CACHE_SLOTS = 1 << 16, CACHE_MAX_ENTRIES = 1 << 15, CACHE_MAX_BYTES = 1 << 22 };

typedef struct {
    int32_t id;
    int special;
    uint32_t off, len; /* into tok->bytes */
} added_token;

typedef struct { uint64_t key; int32_t new_id; } heap_item; /* key = rank << 32 | position */
typedef struct { uint32_t off, len; } tok_span;            /* a token's bytes in tok->bytes */
typedef struct { uint32_t tag; int32_t id; } vocab_slot;   /* tag: high half of the hash; id -1: empty */
typedef struct { uint64_t key; uint32_t rank; int32_t new_id; } merge_slot; /* key (a << 32 | b) + 1, 0 empty */

typedef struct cache_entry { uint64_t hash; uint32_t key_off, key_len, ids_off, ids_len; } cache_entry;

/* Per-thread scratch: PCRE2 match data and JIT stack, the word->ids cache, BPE arrays. */
typedef struct tok_state {
    struct tok_state *next_free;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    cache_entry *slots; /* CACHE_SLOTS, key_len == 0 means empty */
    uint32_t n_entries;
    char *cache_bytes;
    uint32_t cache_bytes_len;
    int32_t *cache_ids;
    uint32_t cache_ids_len, cache_ids_cap;
    int32_t *sym_id, *sym_prev, *sym_next;
    heap_item *heap;
    size_t sym_cap;
    char *tmp; /* a piece with a prefix space */
    size_t tmp_cap;
} tok_state;

struct lj_tokenizer {
    char *path;
    int32_t vocab_size;
    char *bytes; /* token bytes arena */
    size_t bytes_len, bytes_cap;
    tok_span *tok;               /* [vocab_size] */
    uint8_t *tok_kind;           /* 0 unused, 1 vocab, 2 special added, 3 plain added */
    vocab_slot *vocab_slots;     /* open addressing: bytes -> vocab id */
    size_t vocab_mask;
    int32_t byte_id[256];
    merge_slot *merges;          /* open addressing: (a, b) -> rank, merged id */
    size_t merge_mask;
    int ignore_merges, pre, add_prefix_space, llama3_split;
    pcre2_code *re;
    int jit;
    added_token *added; /* sorted longest first */
    int n_added, any_plain_added;
    uint8_t first_special[256], first_plain[256];
    int32_t bos, eos;
    pthread_mutex_t lock;
    tok_state *free_states;
};

/* ---- hashing ---------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0x100000001b3ull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, p, n);
    return mix64(h ^ v);
}

/* The vocab id of s[0..n) whose hash_bytes is h, or -1. */
static int32_t vocab_find_h(const lj_tokenizer *t, const char *s, size_t n, uint64_t h) {
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = h & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
        vocab_slot v = t->vocab_slots[i];
        if (v.id < 0) return -1;
        if (v.tag == tag && t->tok[v.id].len == n && memcmp(t->bytes + t->tok[v.id].off, s, n) == 0) return v.id;
    }
}

static int32_t vocab_find(const lj_tokenizer *t, const char *s, size_t n) { return vocab_find_h(t, s, n, hash_bytes(s, n)); }

static void vocab_insert(lj_tokenizer *t, int32_t id) {
    uint64_t h = hash_bytes(t->bytes + t->tok[id].off, t->tok[id].len);
    size_t i = h & t->vocab_mask;
    while (t->vocab_slots[i].id >= 0) i = (i + 1) & t->vocab_mask;
    t->vocab_slots[i] = (vocab_slot){(uint32_t)(h >> 32), id};
}

static inline size_t merge_slot_of(const lj_tokenizer *t, uint64_t key) {
    size_t i = mix64(key) & t->merge_mask;
    while (t->merges[i].key != 0 && t->merges[i].key != key) i = (i + 1) & t->merge_mask;
    return i;
}

/* Rank of merging (a, b), or UINT32_MAX; *new_id gets the merged token. */
static inline uint32_t merge_find(const lj_tokenizer *t, int32_t a, int32_t b, int32_t *new_id) {
    const merge_slot *m = &t->merges[merge_slot_of(t, ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1)];
    if (m->key == 0) return UINT32_MAX;
    *new_id = m->new_id;
    return m->rank;
}

/* ---- UTF-8 ------------------------------------------------------------------------ */

/* Length of the well-formed sequence at s[0..n) (1-4), or 0 when ill-formed; *valid_prefix
 * gets the length of its maximal ill-formed subpart (at least 1). Table 3-7 of Unicode 15. */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *valid_prefix) {
    unsigned c = s[0];
    *valid_prefix = 1;
    if (c < 0x80) return 1;
    size_t need;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) need = 1;
    else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else return 0;
    for (size_t k = 1; k <= need; k++) {
        if (k >= n || s[k] < lo || s[k] > hi) {
            *valid_prefix = k;
            return 0;
        }
        lo = 0x80;
        hi = 0xbf;
    }
    return need + 1;
}

size_t lj_utf8_check(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, vp;
    while (i < len) {
        if (i + 8 <= len) {
            uint64_t v;
            memcpy(&v, s + i, 8);
            if ((v & 0x8080808080808080ull) == 0) {
                i += 8;
                continue;
            }
        }
        size_t k = utf8_seq(s + i, len - i, &vp);
        if (k == 0) return i;
        i += k;
    }
    return len;
}

size_t lj_utf8_repair(const char *str, size_t len, char **out, size_t *out_len) {
    const unsigned char *s = (const unsigned char *)str;
    char *o = lj_malloc(len * 3 + 1); /* each bad byte becomes at most 3 bytes */
    size_t i = 0, j = 0, fixes = 0, vp;
    while (i < len) {
        size_t k = utf8_seq(s + i, len - i, &vp);
        if (k) {
            memcpy(o + j, s + i, k);
            j += k;
            i += k;
        } else {
            memcpy(o + j, "\xef\xbf\xbd", 3);
            j += 3;
            i += vp;
            fixes++;
        }
    }
    o[j] = '\0';
    *out = o;
    *out_len = j;
    return fixes;
}

/* Decodes one code point of valid UTF-8 (the byte-level alphabet is below U+0800). */
static uint32_t utf8_next(const unsigned char **p, const unsigned char *end) {
    const unsigned char *s = *p;
    size_t vp, k = utf8_seq(s, (size_t)(end - s), &vp);
    uint32_t c;
    if (k == 0) k = 1, c = 0xffffffffu;
    else if (k == 1) c = s[0];
    else if (k == 2) c = (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
    else if (k == 3) c = (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
    else c = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 | (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
    *p = s + k;
    return c;
}

/* ---- loading ---------------------------------------------------------------------- */

/* GPT-2's bytes_to_unicode, inverted: code point (< 324) -> byte, or -1. */
static void byte_level_table(int16_t cp_to_byte[324]) {
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        if (printable) cp_to_byte[b] = (int16_t)b;
        else cp_to_byte[256 + n++] = (int16_t)b;
    }
}

static uint32_t arena_add(lj_tokenizer *t, const char *s, size_t n) {
    if (t->bytes_len + n + 1 > t->bytes_cap) {
        t->bytes_cap = (t->bytes_len + n + 1) * 2;
        t->bytes = lj_realloc(t->bytes, t->bytes_cap);
    }
    memcpy(t->bytes + t->bytes_len, s, n);
    uint32_t off = (uint32_t)t->bytes_len;
    t->bytes_len += n;
    return off;
}

/* Byte-level token string -> raw bytes appended to the arena. Returns 0 on a foreign char. */
static int decode_byte_level(lj_tokenizer *t, const int16_t cp_to_byte[324], const char *s, uint32_t *off,
                             uint32_t *len) {
    size_t n = strlen(s);
    char small[512], *buf = n < sizeof small ? small : lj_malloc(n + 1);
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    size_t m = 0;
    int ok = 1;
    while (p < end) {
        uint32_t c = utf8_next(&p, end);
        if (c >= 324 || cp_to_byte[c] < 0) {
            ok = 0;
            break;
        }
        buf[m++] = (char)cp_to_byte[c];
    }
    if (ok) {
        *off = arena_add(t, buf, m);
        *len = (uint32_t)m;
    }
    if (buf != small) free(buf);
    return ok;
}

static lj_status fmt_err(const char *path, const char *field, const char *what) {
    return lj_fail(LJ_ERR_FORMAT, "%s: %s %s", path, field, what);
}

static lj_status unsupported(const char *path, const char *field, const char *what) {
    return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %s: %s", path, field, what);
}

static int json_is_true(const cJSON *o, const char *key) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key)); }

/* Copies the pattern, rewriting \s and \S to the White_Space property (see tokenizer.h). */
static char *rewrite_pattern(const char *pat) {
    size_t n = strlen(pat);
    char *out = lj_malloc(n * 8 + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        if (pat[i] == '\\' && i + 1 < n) {
            if (pat[i + 1] == 's' || pat[i + 1] == 'S') {
                o += sprintf(o, "\\%c{White_Space}", pat[i + 1] == 's' ? 'p' : 'P');
            } else {
                *o++ = pat[i];
                *o++ = pat[i + 1];
            }
            i++;
        } else {
            *o++ = pat[i];
        }
    }
    *o = '\0';
    return out;
}

static lj_status compile_regex(lj_tokenizer *t, const char *pattern, int literal, const char *field) {
    char *pat = literal ? lj_strdup(pattern) : rewrite_pattern(pattern);
    int err;
    PCRE2_SIZE at;
    t->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0), &err, &at, NULL);
    free(pat);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return lj_fail(LJ_ERR_FORMAT, "%s: %s: PCRE2 cannot compile the regex: %s (at offset %zu)", t->path, field,
                       (const char *)msg, (size_t)at);
    }
    t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    t->llama3_split = !literal && strcmp(pattern, LLAMA3_PATTERN) == 0;
    return LJ_OK;
}

static lj_status load_pre_tokenizer(lj_tokenizer *t, const cJSON *pre) {
    const char *path = t->path;
    if (!pre || cJSON_IsNull(pre)) {
        t->pre = PRE_NONE;
        return LJ_OK;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pre, "type");
    if (!cJSON_IsString(type)) return fmt_err(path, "pre_tokenizer.type", "is missing or not a string");
    if (strcmp(type->valuestring, "ByteLevel") == 0) {
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(pre, "use_regex");
        if (ur && !cJSON_IsTrue(ur)) /* ByteLevel alone without its regex: one word per segment */
            t->pre = PRE_NONE;
        else
            t->pre = PRE_BYTELEVEL_REGEX;
        t->add_prefix_space = json_is_true(pre, "add_prefix_space");
        return t->pre == PRE_BYTELEVEL_REGEX ? compile_regex(t, GPT2_PATTERN, 0, "pre_tokenizer") : LJ_OK;
    }
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    const char *want = "supported: Sequence[Split(Regex, Isolated), ByteLevel(use_regex false)] or ByteLevel";
    if (strcmp(type->valuestring, "Sequence") != 0 || !cJSON_IsArray(list) || cJSON_GetArraySize(list) != 2)
        return unsupported(path, "pre_tokenizer", want);
    const cJSON *split = cJSON_GetArrayItem(list, 0), *bl = cJSON_GetArrayItem(list, 1);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(split, "type"), *bt = cJSON_GetObjectItemCaseSensitive(bl, "type");
    if (!cJSON_IsString(st) || strcmp(st->valuestring, "Split") != 0 || !cJSON_IsString(bt) ||
        strcmp(bt->valuestring, "ByteLevel") != 0 || json_is_true(bl, "use_regex"))
        return unsupported(path, "pre_tokenizer.pretokenizers", want);
    const cJSON *beh = cJSON_GetObjectItemCaseSensitive(split, "behavior");
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0 || json_is_true(split, "invert"))
        return unsupported(path, "pre_tokenizer.pretokenizers[0].behavior", "only Isolated (invert false) is supported");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(split, "pattern");
    const cJSON *rx = cJSON_GetObjectItemCaseSensitive(pat, "Regex"), *lit = cJSON_GetObjectItemCaseSensitive(pat, "String");
    if (!cJSON_IsString(rx) && !cJSON_IsString(lit))
        return fmt_err(path, "pre_tokenizer.pretokenizers[0].pattern", "needs a \"Regex\" or \"String\"");
    t->pre = PRE_SPLIT_THEN_BYTES;
    t->add_prefix_space = json_is_true(bl, "add_prefix_space");
    return compile_regex(t, cJSON_IsString(rx) ? rx->valuestring : lit->valuestring, !cJSON_IsString(rx),
                         "pre_tokenizer.pretokenizers[0].pattern");
}

static lj_status load_model(lj_tokenizer *t, const cJSON *root, const int16_t cp_to_byte[324]) {
    const char *path = t->path;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return fmt_err(path, "model", "is missing or not an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0))
        return unsupported(path, "model.type", "only \"BPE\" is supported");
    static const char *must_be_null[] = {"continuing_subword_prefix", "end_of_word_suffix", "dropout"};
    for (int i = 0; i < 3; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(model, must_be_null[i]);
        if (f && !cJSON_IsNull(f) && !(cJSON_IsNumber(f) && f->valuedouble == 0.0))
            return unsupported(path, "model", "continuing_subword_prefix, end_of_word_suffix and dropout must be null");
    }
    if (json_is_true(model, "byte_fallback")) return unsupported(path, "model.byte_fallback", "must be false");
    t->ignore_merges = json_is_true(model, "ignore_merges");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) return fmt_err(path, "model.vocab", "is missing or not an object");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    int32_t max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= MAX_ID || e->valuedouble != (int32_t)e->valuedouble)
            return lj_fail(LJ_ERR_FORMAT, "%s: model.vocab[\"%s\"]: id is not an integer in [0, %d)", path, e->string, MAX_ID);
        if (e->valueint > max_id) max_id = e->valueint;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= MAX_ID || id->valuedouble != (int32_t)id->valuedouble)
            return fmt_err(path, "added_tokens[].id", "is missing or not an integer in [0, 16777216)");
        if (id->valueint > max_id) max_id = id->valueint;
    }
    if (max_id < 0) return fmt_err(path, "model.vocab", "is empty");
    t->vocab_size = max_id + 1;
    t->tok = lj_calloc((size_t)t->vocab_size, sizeof *t->tok);
    t->tok_kind = lj_calloc((size_t)t->vocab_size, 1);
    int n_vocab = 0;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = e->valueint;
        if (t->tok_kind[id]) continue; /* a second string for one id: keep the first */
        if (!decode_byte_level(t, cp_to_byte, e->string, &t->tok[id].off, &t->tok[id].len))
            return lj_fail(LJ_ERR_FORMAT, "%s: model.vocab[\"%s\"]: not in the byte-level alphabet", path, e->string);
        t->tok_kind[id] = 1;
        n_vocab++;
    }
    size_t slots = 16;
    while (slots < (size_t)n_vocab * 2 + 16) slots <<= 1;
    t->vocab_slots = lj_malloc(slots * sizeof *t->vocab_slots);
    for (size_t i = 0; i < slots; i++) t->vocab_slots[i] = (vocab_slot){0, -1};
    t->vocab_mask = slots - 1;
    for (int32_t id = 0; id < t->vocab_size; id++)
        if (t->tok_kind[id] == 1 && vocab_find(t, t->bytes + t->tok[id].off, t->tok[id].len) < 0) vocab_insert(t, id);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = vocab_find(t, &c, 1);
    }

    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges)) return fmt_err(path, "model.merges", "is missing or not an array");
    int n_merges = cJSON_GetArraySize(merges);
    slots = 16;
    while (slots < (size_t)n_merges * 2 + 16) slots <<= 1;
    t->merges = lj_calloc(slots, sizeof *t->merges);
    t->merge_mask = slots - 1;
    uint32_t rank = 0;
    char *both = NULL;
    lj_status st = LJ_OK;
    cJSON_ArrayForEach(e, merges) {
        const char *parts[2] = {NULL, NULL};
        if (cJSON_IsString(e)) {
            both = lj_strdup(e->valuestring);
            char *sp = strchr(both, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                *sp = '\0';
                parts[0] = both;
                parts[1] = sp + 1;
            }
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            parts[0] = cJSON_GetArrayItem(e, 0)->valuestring;
            parts[1] = cJSON_GetArrayItem(e, 1)->valuestring;
        }
        if (!parts[0]) {
            st = lj_fail(LJ_ERR_FORMAT, "%s: model.merges[%u]: not \"a b\" nor [\"a\", \"b\"]", path, rank);
            break;
        }
        int32_t ids[2];
        size_t mark = t->bytes_len;
        uint32_t off[2], len[2];
        for (int k = 0; k < 2; k++) {
            ids[k] = -1;
            if (decode_byte_level(t, cp_to_byte, parts[k], &off[k], &len[k])) ids[k] = vocab_find(t, t->bytes + off[k], len[k]);
            if (ids[k] < 0) {
                st = lj_fail(LJ_ERR_FORMAT, "%s: model.merges[%u]: \"%s\" is not in model.vocab", path, rank, parts[k]);
                break;
            }
        }
        if (st != LJ_OK) break;
        /* off[1] directly follows off[0] in the arena: together they are the merged token */
        int32_t new_id = vocab_find(t, t->bytes + off[0], len[0] + len[1]);
        t->bytes_len = mark;
        if (new_id < 0) {
            st = lj_fail(LJ_ERR_FORMAT, "%s: model.merges[%u]: \"%s%s\" is not in model.vocab", path, rank, parts[0], parts[1]);
            break;
        }
        uint64_t key = ((uint64_t)(uint32_t)ids[0] << 32 | (uint32_t)ids[1]) + 1;
        /* a repeated pair takes its last rank, as HF's HashMap does */
        t->merges[merge_slot_of(t, key)] = (merge_slot){key, rank, new_id};
        rank++;
        free(both);
        both = NULL;
    }
    free(both);
    return st;
}

static int cmp_added(const void *a, const void *b) {
    const added_token *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static lj_status load_added(lj_tokenizer *t, const cJSON *root) {
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), *e;
    if (added && !cJSON_IsArray(added)) return fmt_err(t->path, "added_tokens", "is not an array");
    t->added = lj_calloc((size_t)cJSON_GetArraySize(added) + 1, sizeof *t->added);
    cJSON_ArrayForEach(e, added) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        int32_t id = cJSON_GetObjectItemCaseSensitive(e, "id")->valueint;
        if (!cJSON_IsString(content) || content->valuestring[0] == '\0')
            return lj_fail(LJ_ERR_FORMAT, "%s: added_tokens (id %d): content is missing or empty", t->path, id);
        size_t n = strlen(content->valuestring);
        if (lj_utf8_check(content->valuestring, n) != n)
            return lj_fail(LJ_ERR_FORMAT, "%s: added_tokens (id %d): content is not UTF-8", t->path, id);
        added_token *a = &t->added[t->n_added++];
        a->id = id;
        a->special = json_is_true(e, "special");
        a->off = arena_add(t, content->valuestring, n);
        a->len = (uint32_t)n;
        t->tok[id] = (tok_span){a->off, a->len}; /* decoding an added id gives its content */
        t->tok_kind[id] = a->special ? 2 : 3;
        unsigned char c0 = (unsigned char)content->valuestring[0];
        if (a->special) t->first_special[c0] = 1;
        else t->first_plain[c0] = t->any_plain_added = 1;
        if (memchr(content->valuestring, '\n', n)) t->llama3_split = 0;
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_added);
    return LJ_OK;
}

static int32_t added_id(const lj_tokenizer *t, const char *s) {
    size_t n = strlen(s);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->bytes + t->added[i].off, s, n) == 0) return t->added[i].id;
    return -1;
}

/* bos_token / eos_token from tokenizer_config.json next to the tokenizer, else known names. */
static void load_bos_eos(lj_tokenizer *t) {
    t->bos = added_id(t, "<|begin_of_text|>");
    t->eos = added_id(t, "<|end_of_text|>");
    if (t->bos < 0) t->bos = added_id(t, "<|endoftext|>");
    if (t->eos < 0) t->eos = added_id(t, "<|endoftext|>");
    size_t n = strlen(t->path);
    char *cfg_path = lj_malloc(n + 32);
    memcpy(cfg_path, t->path, n + 1);
    char *slash = strrchr(cfg_path, '/');
    strcpy(slash ? slash + 1 : cfg_path, "tokenizer_config.json");
    char *text;
    size_t len;
    if (access(cfg_path, R_OK) == 0 && lj_file_read_all(cfg_path, &text, &len) == LJ_OK) {
        cJSON *cfg = cJSON_ParseWithLength(text, len);
        if (!cfg) lj_log_warn("%s: not valid JSON; using the default BOS/EOS tokens", cfg_path);
        const char *keys[2] = {"bos_token", "eos_token"};
        int32_t *dst[2] = {&t->bos, &t->eos};
        for (int k = 0; k < 2 && cfg; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, keys[k]);
            if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
            if (!cJSON_IsString(v)) continue;
            int32_t id = added_id(t, v->valuestring);
            if (id < 0) id = lj_tokenizer_token_id(t, v->valuestring, strlen(v->valuestring));
            if (id >= 0) *dst[k] = id;
        }
        cJSON_Delete(cfg);
        free(text);
    }
    free(cfg_path);
}

lj_status lj_tokenizer_load(const char *path, lj_tokenizer **out) {
    *out = NULL;
    char *text;
    size_t len;
    LJ_TRY(lj_file_read_all(path, &text, &len));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0, line = 1;
        for (size_t i = 0; i < at && i < len; i++) line += text[i] == '\n';
        free(text);
        return lj_fail(LJ_ERR_FORMAT, "%s: not valid JSON (parse error at line %zu, byte %zu)", path, line, at);
    }
    free(text);
    lj_tokenizer *t = lj_calloc(1, sizeof *t);
    t->path = lj_strdup(path);
    pthread_mutex_init(&t->lock, NULL);
    int16_t cp_to_byte[324];
    byte_level_table(cp_to_byte);
    lj_status st = LJ_OK;
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (!cJSON_IsObject(root)) st = fmt_err(path, "the top level", "is not a JSON object");
    else if (norm && !cJSON_IsNull(norm)) st = unsupported(path, "normalizer", "must be null");
    if (st == LJ_OK) st = load_model(t, root, cp_to_byte);
    if (st == LJ_OK) st = load_pre_tokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
    if (st == LJ_OK) st = load_added(t, root);
    cJSON_Delete(root);
    if (st != LJ_OK) {
        lj_tokenizer_free(t);
        return st;
    }
    load_bos_eos(t);
    *out = t;
    return LJ_OK;
}

static void state_free(tok_state *s) {
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jit_stack);
    free(s->slots);
    free(s->cache_bytes);
    free(s->cache_ids);
    free(s->sym_id);
    free(s->sym_prev);
    free(s->sym_next);
    free(s->heap);
    free(s->tmp);
    free(s);
}

void lj_tokenizer_free(lj_tokenizer *t) {
    if (!t) return;
    while (t->free_states) {
        tok_state *s = t->free_states;
        t->free_states = s->next_free;
        state_free(s);
    }
    pthread_mutex_destroy(&t->lock);
    pcre2_code_free(t->re);
    free(t->path);
    free(t->bytes);
    free(t->tok);
    free(t->tok_kind);
    free(t->vocab_slots);
    free(t->merges);
    free(t->added);
    free(t);
}

const char *lj_tokenizer_default_path(char *buf, size_t buflen) {
    char cache[LJ_PATH_MAX];
    snprintf(buf, buflen, "%s/tokenizer/llama3/tokenizer.json", lj_cache_dir(cache, sizeof cache));
    return buf;
}

/* ---- encoding --------------------------------------------------------------------- */

static tok_state *state_acquire(lj_tokenizer *t) {
    pthread_mutex_lock(&t->lock);
    tok_state *s = t->free_states;
    if (s) t->free_states = s->next_free;
    pthread_mutex_unlock(&t->lock);
    if (s) return s;
    s = lj_calloc(1, sizeof *s);
    if (t->re) {
        s->md = pcre2_match_data_create_from_pattern(t->re, NULL);
        s->mctx = pcre2_match_context_create(NULL);
        s->jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
        pcre2_jit_stack_assign(s->mctx, NULL, s->jit_stack);
    }
    s->slots = lj_calloc(CACHE_SLOTS, sizeof *s->slots);
    s->cache_bytes = lj_malloc(CACHE_MAX_BYTES);
    return s;
}

static void state_release(lj_tokenizer *t, tok_state *s) {
    pthread_mutex_lock(&t->lock);
    s->next_free = t->free_states;
    t->free_states = s;
    pthread_mutex_unlock(&t->lock);
}

static inline void push_id(int32_t **ids, int64_t *n, int64_t *cap, int32_t id) {
    if (*n == *cap) {
        *cap = *cap < 1024 ? 1024 : *cap * 2;
        *ids = lj_realloc(*ids, (size_t)*cap * sizeof **ids);
    }
    (*ids)[(*n)++] = id;
}

static void heap_push(heap_item *h, size_t *n, heap_item v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].key <= v.key) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static heap_item heap_pop(heap_item *h, size_t *n) {
    heap_item top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].key < h[c].key) c++;
        if (last.key <= h[c].key) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* HF's Word::merge_all: repeatedly merge the lowest-ranked adjacent pair, leftmost first. Leaves
 * the result in s->sym_id along the s->sym_next chain from 0. */
static lj_status bpe(const lj_tokenizer *t, tok_state *s, const unsigned char *w, size_t n) {
    if (n > s->sym_cap) {
        s->sym_cap = n * 2;
        s->sym_id = lj_realloc(s->sym_id, s->sym_cap * sizeof *s->sym_id);
        s->sym_prev = lj_realloc(s->sym_prev, s->sym_cap * sizeof *s->sym_prev);
        s->sym_next = lj_realloc(s->sym_next, s->sym_cap * sizeof *s->sym_next);
        s->heap = lj_realloc(s->heap, s->sym_cap * 3 * sizeof *s->heap); /* n - 1 + 2 per merge */
    }
    int32_t *id = s->sym_id, *prev = s->sym_prev, *next = s->sym_next;
    for (size_t i = 0; i < n; i++) {
        id[i] = t->byte_id[w[i]];
        if (id[i] < 0) return lj_fail(LJ_ERR_UNSUPPORTED, "%s: no byte-level token for byte 0x%02x", t->path, w[i]);
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    int32_t nid;
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t r = merge_find(t, id[i], id[i + 1], &nid);
        if (r != UINT32_MAX) heap_push(s->heap, &hn, (heap_item){(uint64_t)r << 32 | i, nid});
    }
    while (hn > 0) {
        heap_item top = heap_pop(s->heap, &hn);
        int32_t pos = (int32_t)(top.key & 0xffffffffu);
        if (id[pos] < 0 || next[pos] < 0) continue; /* merged away, or now last */
        int32_t right = next[pos];
        if (merge_find(t, id[pos], id[right], &nid) == UINT32_MAX || nid != top.new_id) continue; /* stale */
        id[pos] = nid;
        id[right] = -1;
        next[pos] = next[right];
        if (next[pos] >= 0) prev[next[pos]] = pos;
        if (prev[pos] >= 0) {
            uint32_t r = merge_find(t, id[prev[pos]], id[pos], &nid);
            if (r != UINT32_MAX) heap_push(s->heap, &hn, (heap_item){(uint64_t)r << 32 | (uint32_t)prev[pos], nid});
        }
        if (next[pos] >= 0) {
            uint32_t r = merge_find(t, id[pos], id[next[pos]], &nid);
            if (r != UINT32_MAX) heap_push(s->heap, &hn, (heap_item){(uint64_t)r << 32 | (uint32_t)pos, nid});
        }
    }
    return LJ_OK;
}

static void cache_clear(tok_state *s) {
    memset(s->slots, 0, CACHE_SLOTS * sizeof *s->slots);
    s->n_entries = 0;
    s->cache_bytes_len = 0;
    s->cache_ids_len = 0;
}

/* Encodes one pre-token (raw bytes) and appends its ids. */
static lj_status encode_word(const lj_tokenizer *t, tok_state *s, const char *w, size_t n, int32_t **ids, int64_t *nids,
                             int64_t *cap) {
    if (n == 0) return LJ_OK;
    if (n == 1 && t->byte_id[(unsigned char)w[0]] >= 0) {
        push_id(ids, nids, cap, t->byte_id[(unsigned char)w[0]]);
        return LJ_OK;
    }
    uint64_t h = hash_bytes(w, n);
    if (t->ignore_merges) {
        int32_t id = vocab_find_h(t, w, n, h);
        if (id >= 0) {
            push_id(ids, nids, cap, id);
            return LJ_OK;
        }
    }
    size_t slot = h & (CACHE_SLOTS - 1);
    for (;; slot = (slot + 1) & (CACHE_SLOTS - 1)) {
        cache_entry *e = &s->slots[slot];
        if (e->key_len == 0) break;
        if (e->hash == h && e->key_len == n && memcmp(s->cache_bytes + e->key_off, w, n) == 0) {
            for (uint32_t k = 0; k < e->ids_len; k++) push_id(ids, nids, cap, s->cache_ids[e->ids_off + k]);
            return LJ_OK;
        }
    }
    LJ_TRY(bpe(t, s, (const unsigned char *)w, n));
    int64_t first = *nids;
    for (int32_t i = 0; i >= 0; i = s->sym_next[i]) push_id(ids, nids, cap, s->sym_id[i]);
    uint32_t count = (uint32_t)(*nids - first);
    if (n > 256) return LJ_OK; /* long words are rare; keep the cache for the common ones */
    if (s->n_entries >= CACHE_MAX_ENTRIES || s->cache_bytes_len + n > CACHE_MAX_BYTES) {
        cache_clear(s);
        slot = h & (CACHE_SLOTS - 1);
    }
    if (s->cache_ids_len + count > s->cache_ids_cap) {
        s->cache_ids_cap = (s->cache_ids_len + count) * 2 + 4096;
        s->cache_ids = lj_realloc(s->cache_ids, s->cache_ids_cap * sizeof *s->cache_ids);
    }
    cache_entry *e = &s->slots[slot];
    e->hash = h;
    e->key_off = s->cache_bytes_len;
    e->key_len = (uint32_t)n;
    e->ids_off = s->cache_ids_len;
    e->ids_len = count;
    memcpy(s->cache_bytes + s->cache_bytes_len, w, n);
    s->cache_bytes_len += (uint32_t)n;
    memcpy(s->cache_ids + s->cache_ids_len, *ids + first, count * sizeof **ids);
    s->cache_ids_len += count;
    s->n_entries++;
    return LJ_OK;
}

/* A piece given to the ByteLevel step: prefix a space when add_prefix_space asks for it (the
 * ByteLevel regex case adds it once per segment instead, in encode_segment). */
static lj_status encode_piece(const lj_tokenizer *t, tok_state *s, const char *p, size_t n, int32_t **ids, int64_t *nids,
                              int64_t *cap) {
    if (!t->add_prefix_space || t->pre == PRE_BYTELEVEL_REGEX || n == 0 || p[0] == ' ') return encode_word(t, s, p, n, ids, nids, cap);
    if (n + 1 > s->tmp_cap) {
        s->tmp_cap = (n + 1) * 2;
        s->tmp = lj_realloc(s->tmp, s->tmp_cap);
    }
    s->tmp[0] = ' ';
    memcpy(s->tmp + 1, p, n);
    return encode_word(t, s, s->tmp, n + 1, ids, nids, cap);
}

/* Splits text[0..n) with the regex (behavior Isolated: matches and the gaps between them are
 * pieces) and encodes each piece. */
static lj_status encode_regex(const lj_tokenizer *t, tok_state *s, const char *text, size_t n, int32_t **ids,
                              int64_t *nids, int64_t *cap) {
    size_t pos = 0, gap = 0;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
    while (pos < n) {
        int rc = t->jit ? pcre2_jit_match(t->re, (PCRE2_SPTR)text, n, pos, PCRE2_NO_UTF_CHECK, s->md, s->mctx)
                        : pcre2_match(t->re, (PCRE2_SPTR)text, n, pos, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return lj_fail(LJ_ERR_UNSUPPORTED, "pre-tokenizer regex failed near byte %zu: %s", pos, (const char *)msg);
        }
        size_t a = ov[0], b = ov[1];
        if (a > gap) LJ_TRY(encode_piece(t, s, text + gap, a - gap, ids, nids, cap));
        if (b > a) {
            LJ_TRY(encode_piece(t, s, text + a, b - a, ids, nids, cap));
            pos = gap = b;
        } else { /* empty match: step over one character */
            pos = b + 1;
            while (pos < n && ((unsigned char)text[pos] & 0xc0) == 0x80) pos++;
            gap = a;
        }
    }
    if (gap < n) LJ_TRY(encode_piece(t, s, text + gap, n - gap, ids, nids, cap));
    return LJ_OK;
}

/* Encodes a segment with no added tokens in it. */
static lj_status encode_segment(const lj_tokenizer *t, tok_state *s, const char *text, size_t n, int32_t **ids,
                                int64_t *nids, int64_t *cap) {
    if (n == 0) return LJ_OK;
    if (t->pre == PRE_SPLIT_THEN_BYTES) return encode_regex(t, s, text, n, ids, nids, cap);
    if (t->pre == PRE_NONE) return encode_piece(t, s, text, n, ids, nids, cap);
    /* ByteLevel with its regex: the prefix space goes before the whole segment */
    if (!t->add_prefix_space || text[0] == ' ') return encode_regex(t, s, text, n, ids, nids, cap);
    char *copy = lj_malloc(n + 1);
    copy[0] = ' ';
    memcpy(copy + 1, text, n);
    lj_status st = encode_regex(t, s, copy, n + 1, ids, nids, cap);
    free(copy);
    return st;
}

/* Leftmost-longest added token at or after `from`: its start, or n when none. */
static size_t find_added(const lj_tokenizer *t, const char *text, size_t n, size_t from, int allow_special,
                         const added_token **hit) {
    for (size_t i = from; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (!((allow_special && t->first_special[c]) || t->first_plain[c])) continue;
        for (int k = 0; k < t->n_added; k++) {
            const added_token *a = &t->added[k];
            if ((a->special && !allow_special) || a->len > n - i) continue;
            if (memcmp(text + i, t->bytes + a->off, a->len) == 0) {
                *hit = a;
                return i;
            }
        }
    }
    return n;
}

lj_status lj_tokenizer_encode_append(lj_tokenizer *t, const char *text, size_t len, int allow_special, int32_t **ids,
                                     int64_t *n, int64_t *cap) {
    size_t bad = lj_utf8_check(text, len);
    if (bad != len) return lj_fail(LJ_ERR_FORMAT, "invalid UTF-8 at byte offset %zu (byte 0x%02x)", bad, (unsigned char)text[bad]);
    tok_state *s = state_acquire(t);
    int64_t n0 = *n;
    lj_status st = LJ_OK;
    int scan = t->any_plain_added || (allow_special && t->n_added > 0);
    size_t pos = 0;
    while (pos < len && st == LJ_OK) {
        const added_token *hit = NULL;
        size_t at = scan ? find_added(t, text, len, pos, allow_special, &hit) : len;
        st = encode_segment(t, s, text + pos, at - pos, ids, n, cap);
        if (hit && st == LJ_OK) {
            push_id(ids, n, cap, hit->id);
            at += hit->len;
        }
        pos = at;
    }
    state_release(t, s);
    if (st != LJ_OK) *n = n0;
    return st;
}

lj_status lj_tokenizer_encode(lj_tokenizer *t, const char *text, size_t len, int allow_special, int32_t **ids, int64_t *n) {
    int64_t cap = 0;
    *ids = NULL;
    *n = 0;
    lj_status st = lj_tokenizer_encode_append(t, text, len, allow_special, ids, n, &cap);
    if (st != LJ_OK) {
        free(*ids);
        *ids = NULL;
    }
    return st;
}

size_t lj_tokenizer_split_point(const lj_tokenizer *t, const char *text, size_t len, size_t from) {
    if (!t->llama3_split || t->pre != PRE_SPLIT_THEN_BYTES || t->add_prefix_space) return len;
    for (size_t i = from; i + 1 < len; i++) {
        const char *nl = memchr(text + i, '\n', len - 1 - i);
        if (!nl) return len;
        i = (size_t)(nl - text);
        unsigned char c = (unsigned char)text[i + 1];
        if (i + 1 > from && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) return i + 1;
    }
    return len;
}

/* ---- decoding and lookups --------------------------------------------------------- */

lj_status lj_tokenizer_decode(const lj_tokenizer *t, const int32_t *ids, int64_t n, char **text, size_t *len) {
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size || !t->tok_kind[ids[i]])
            return lj_fail(LJ_ERR_ARG, "token id %d at position %lld is not in the vocabulary of %s", ids[i], (long long)i,
                           t->path);
        total += t->tok[ids[i]].len;
    }
    char *out = lj_malloc(total + 1), *o = out;
    for (int64_t i = 0; i < n; i++) {
        memcpy(o, t->bytes + t->tok[ids[i]].off, t->tok[ids[i]].len);
        o += t->tok[ids[i]].len;
    }
    *o = '\0';
    *text = out;
    if (len) *len = total;
    return LJ_OK;
}

int32_t lj_tokenizer_vocab_size(const lj_tokenizer *t) { return t->vocab_size; }
int32_t lj_tokenizer_bos_id(const lj_tokenizer *t) { return t->bos; }
int32_t lj_tokenizer_eos_id(const lj_tokenizer *t) { return t->eos; }

const char *lj_tokenizer_token(const lj_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->vocab_size || !t->tok_kind[id]) return NULL;
    if (len) *len = t->tok[id].len;
    return t->bytes + t->tok[id].off;
}

int32_t lj_tokenizer_token_id(const lj_tokenizer *t, const char *bytes, size_t len) {
    int32_t id = vocab_find(t, bytes, len);
    if (id >= 0) return id;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == len && memcmp(t->bytes + t->added[i].off, bytes, len) == 0) return t->added[i].id;
    return -1;
}

int lj_tokenizer_is_special(const lj_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->vocab_size && t->tok_kind[id] == 2;
}

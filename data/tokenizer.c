/* tokenizer.c: byte-level BPE (Llama 3, Qwen2/Qwen3, GPT-2) from a Hugging Face tokenizer.json:
 * loading with cJSON (model, normalizer, pre-tokenizer, added tokens, post-processor, decoder),
 * Unicode normalization with utf8proc, pre-tokenizing with PCRE2, BPE merges with a heap,
 * decoding, and UTF-8 checks. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "base/fs.h"
#include "base/hf_cache.h"
#include "data/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <pcre2.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <utf8proc.h>

/* The GPT-2 regex, built into HF's ByteLevel pre-tokenizer (tokenizers byte_level.rs). */
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* The Split regexes of Llama 3 and of Qwen2/Qwen3 (docs/reference.md); they differ in the digits
 * (runs of up to 3, or one at a time). Only these allow lj_tokenizer_split_point. */
static const char LLAMA3_PATTERN[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_PATTERN[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* HF's SplitDelimiterBehavior (tokenizers normalizer.rs, NormalizedString::split). */
enum { SPLIT_ISOLATED, SPLIT_REMOVED, SPLIT_MERGED_PREVIOUS, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
enum { MAX_SPLITS = 8, MAX_NORMS = 8 };
enum { MAX_ID = 1 << 24 }; /* a sanity bound on token ids */
enum { CACHE_SLOTS = 1 << 16, CACHE_MAX_ENTRIES = 1 << 15, CACHE_MAX_BYTES = 1 << 22 };

typedef struct {
    int32_t id;
    int special;
    uint32_t off, len; /* into tok->bytes */
} added_token;

/* One regex split of the pre-tokenizer: a Split step, or ByteLevel's own regex (use_regex). */
typedef struct {
    pcre2_code *re;
    int jit, behavior, invert;
} split_stage;

typedef struct { uint64_t key; int32_t new_id; } heap_item; /* key = rank << 32 | position */
typedef struct { uint32_t off, len; } tok_span;            /* a token's bytes in tok->bytes */
typedef struct { uint32_t tag; int32_t id; } vocab_slot;   /* tag: high half of the hash; id -1: empty */
typedef struct { uint64_t key; uint32_t rank; int32_t new_id; } merge_slot; /* key (a << 32 | b) + 1, 0 empty */

typedef struct cache_entry { uint64_t hash; uint32_t key_off, key_len, ids_off, ids_len; } cache_entry;

/* Per-thread scratch: PCRE2 match data and JIT stack, the word->ids cache, BPE arrays, the
 * normalized text. */
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
    char *norm; /* a normalized segment */
    size_t norm_cap;
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
    int ignore_merges;
    int n_norms, norm_options[MAX_NORMS]; /* utf8proc_map options, applied in order */
    /* The pre-tokenizer: splits[0..n_user_splits) are the Split steps, then the ByteLevel step
     * (a prefix space when add_prefix_space) and, when it uses its regex, splits[n_user_splits]. */
    split_stage splits[MAX_SPLITS + 1];
    int n_user_splits, n_splits, add_prefix_space, known_split, qwen2;
    uint64_t file_hash, ids_hash; /* lj_tokenizer_file_hash, lj_tokenizer_ids_hash */
    added_token *added; /* sorted longest first */
    int n_added, any_plain_added;
    uint8_t first_special[256], first_plain[256];
    int32_t bos, eos, template_bos; /* template_bos: the post-processor's first token, or -1 */
    int has_template, add_bos;
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

/* Compiles a pattern into splits[k]; `field` names it in the message. */
static lj_status compile_regex(lj_tokenizer *t, int k, const char *pattern, int literal, const char *field) {
    char *pat = literal ? lj_strdup(pattern) : rewrite_pattern(pattern);
    int err;
    PCRE2_SIZE at;
    split_stage *sp = &t->splits[k];
    sp->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP,
                           &err, &at, NULL);
    free(pat);
    if (!sp->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return lj_fail(LJ_ERR_FORMAT, "%s: %s: PCRE2 cannot compile the regex: %s (at offset %zu)", t->path, field,
                       (const char *)msg, (size_t)at);
    }
    sp->jit = pcre2_jit_compile(sp->re, PCRE2_JIT_COMPLETE) == 0;
    return LJ_OK;
}

/* The type string of a component object, or NULL (an error naming `field` is set). */
static const char *component_type(const char *path, const cJSON *o, const char *field) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    if (!cJSON_IsObject(o) || !cJSON_IsString(type)) {
        lj_fail(LJ_ERR_FORMAT, "%s: %s.type is missing or not a string", path, field);
        return NULL;
    }
    return type->valuestring;
}

/* The normalizer: null, a Unicode normalization form (NFC, NFD, NFKC, NFKD; utf8proc_map's
 * options), or a Sequence of those, applied in order. Anything else is refused by name. */
static lj_status load_normalizer(lj_tokenizer *t, const cJSON *norm, const char *field) {
    if (!norm || cJSON_IsNull(norm)) return LJ_OK;
    const char *type = component_type(t->path, norm, field);
    if (!type) return LJ_ERR_FORMAT;
    static const struct { const char *name; int options; } forms[] = {
        {"NFC", UTF8PROC_STABLE | UTF8PROC_COMPOSE},
        {"NFD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE},
        {"NFKC", UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
        {"NFKD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT},
    };
    for (int i = 0; i < 4; i++) {
        if (strcmp(type, forms[i].name) != 0) continue;
        if (t->n_norms == MAX_NORMS) return unsupported(t->path, field, "more than 8 normalizers in a Sequence");
        t->norm_options[t->n_norms++] = forms[i].options;
        return LJ_OK;
    }
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(norm, "normalizers"), *e;
        if (!cJSON_IsArray(list)) return fmt_err(t->path, field, "(Sequence) has no \"normalizers\" array");
        int i = 0;
        cJSON_ArrayForEach(e, list) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.normalizers[%d]", field, i++);
            LJ_TRY(load_normalizer(t, e, sub));
        }
        return LJ_OK;
    }
    return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %s.type \"%s\" is not supported (ljperf reads byte-level BPE tokenizers "
                   "with the normalizers NFC, NFD, NFKC, NFKD or a Sequence of them, or none)", t->path, field, type);
}

/* One Split step: its pattern (Regex or String), behavior and invert. */
static lj_status load_split(lj_tokenizer *t, const cJSON *split, const char *field) {
    if (t->n_user_splits == MAX_SPLITS) return unsupported(t->path, field, "more than 8 Split steps");
    char sub[160];
    static const char *behaviors[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    const cJSON *beh = cJSON_GetObjectItemCaseSensitive(split, "behavior");
    int b = -1;
    for (int i = 0; i < 5 && cJSON_IsString(beh); i++)
        if (strcmp(beh->valuestring, behaviors[i]) == 0) b = i;
    if (b < 0) {
        snprintf(sub, sizeof sub, "%s.behavior", field);
        return unsupported(t->path, sub, "must be one of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous");
    }
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(split, "pattern");
    const cJSON *rx = cJSON_GetObjectItemCaseSensitive(pat, "Regex"), *lit = cJSON_GetObjectItemCaseSensitive(pat, "String");
    snprintf(sub, sizeof sub, "%s.pattern", field);
    if (!cJSON_IsString(rx) && !cJSON_IsString(lit)) return fmt_err(t->path, sub, "needs a \"Regex\" or \"String\"");
    const int k = t->n_user_splits++;
    t->splits[k].behavior = b;
    t->splits[k].invert = json_is_true(split, "invert");
    return compile_regex(t, k, cJSON_IsString(rx) ? rx->valuestring : lit->valuestring, !cJSON_IsString(rx), sub);
}

/* The ByteLevel step (the last of the pre-tokenizer): add_prefix_space, and its GPT-2 regex
 * unless use_regex is false (the default is true, as in tokenizers). */
static lj_status load_byte_level(lj_tokenizer *t, const cJSON *bl, const char *field) {
    t->add_prefix_space = json_is_true(bl, "add_prefix_space");
    const cJSON *ur = cJSON_GetObjectItemCaseSensitive(bl, "use_regex");
    t->n_splits = t->n_user_splits;
    if (ur && !cJSON_IsTrue(ur)) return LJ_OK;
    t->splits[t->n_splits].behavior = SPLIT_ISOLATED;
    t->n_splits++;
    return compile_regex(t, t->n_user_splits, GPT2_PATTERN, 0, field);
}

/* The pre-tokenizer: null (each segment one word), ByteLevel, or a Sequence of Split steps that
 * ends with ByteLevel. Other types (Whitespace, Metaspace, Digits, ...) are refused by name. */
static lj_status load_pre_tokenizer(lj_tokenizer *t, const cJSON *pre) {
    const char *path = t->path;
    if (!pre || cJSON_IsNull(pre)) return LJ_OK;
    const char *type = component_type(path, pre, "pre_tokenizer");
    if (!type) return LJ_ERR_FORMAT;
    if (strcmp(type, "ByteLevel") == 0) return load_byte_level(t, pre, "pre_tokenizer");
    const char *want = "ljperf reads byte-level BPE tokenizers: a pre-tokenizer of Split steps then ByteLevel, "
                       "ByteLevel alone, or none";
    if (strcmp(type, "Split") == 0) return unsupported(path, "pre_tokenizer", "a Split without a ByteLevel step after it is "
                                                                              "not byte-level");
    if (strcmp(type, "Sequence") != 0)
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: pre_tokenizer.type \"%s\" is not supported (%s)", path, type, want);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    if (!cJSON_IsArray(list)) return fmt_err(path, "pre_tokenizer", "(Sequence) has no \"pretokenizers\" array");
    const int n = cJSON_GetArraySize(list);
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(list, i);
        char field[64];
        snprintf(field, sizeof field, "pre_tokenizer.pretokenizers[%d]", i);
        const char *et = component_type(path, e, field);
        if (!et) return LJ_ERR_FORMAT;
        if (strcmp(et, "Split") == 0) {
            LJ_TRY(load_split(t, e, field));
        } else if (strcmp(et, "ByteLevel") == 0) {
            if (i != n - 1) return unsupported(path, field, "ByteLevel must be the last step (ljperf splits raw text)");
            LJ_TRY(load_byte_level(t, e, field));
        } else {
            return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %s.type \"%s\" is not supported (%s)", path, field, et, want);
        }
    }
    if (n == 0 || strcmp(component_type(path, cJSON_GetArrayItem(list, n - 1), "pre_tokenizer"), "ByteLevel") != 0)
        return unsupported(path, "pre_tokenizer.pretokenizers", "must end with a ByteLevel step (a byte-level BPE)");
    /* the Llama 3 and Qwen2 regexes alone allow split points (lj_tokenizer_split_point) */
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(list, 0), "pattern");
    const cJSON *rx = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    t->known_split = t->n_user_splits == 1 && t->n_splits == 1 && t->splits[0].behavior == SPLIT_ISOLATED &&
                     cJSON_IsString(rx) && (!strcmp(rx->valuestring, LLAMA3_PATTERN) || !strcmp(rx->valuestring, QWEN2_PATTERN));
    t->qwen2 = t->known_split && !strcmp(rx->valuestring, QWEN2_PATTERN);
    return LJ_OK;
}

/* The post-processor decides whether a sequence starts with BOS: a TemplateProcessing (alone or
 * in a Sequence) whose "single" template starts with a SpecialToken; ByteLevel adds nothing. */
static lj_status load_post_processor(lj_tokenizer *t, const cJSON *pp, const char *field) {
    if (!pp || cJSON_IsNull(pp)) return LJ_OK;
    const char *type = component_type(t->path, pp, field);
    if (!type) return LJ_ERR_FORMAT;
    if (strcmp(type, "ByteLevel") == 0) return LJ_OK;
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors"), *e;
        if (!cJSON_IsArray(list)) return fmt_err(t->path, field, "(Sequence) has no \"processors\" array");
        int i = 0;
        cJSON_ArrayForEach(e, list) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.processors[%d]", field, i++);
            LJ_TRY(load_post_processor(t, e, sub));
        }
        return LJ_OK;
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %s.type \"%s\" is not supported (supported: ByteLevel, TemplateProcessing, "
                       "a Sequence of them, or none)", t->path, field, type);
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
    if (!cJSON_IsArray(single)) return fmt_err(t->path, field, "(TemplateProcessing) has no \"single\" array");
    t->has_template = 1;
    const cJSON *first = cJSON_GetArrayItem(single, 0);
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(first, "SpecialToken");
    if (!sp) return LJ_OK;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
    if (!cJSON_IsString(name)) return fmt_err(t->path, field, "single[0].SpecialToken.id is not a string");
    /* special_tokens[name].ids[0], else the added token of that text */
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pp, "special_tokens"), name->valuestring);
    const cJSON *id0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(map, "ids"), 0);
    int32_t id = cJSON_IsNumber(id0) ? id0->valueint : lj_tokenizer_token_id(t, name->valuestring, strlen(name->valuestring));
    if (id < 0 || id >= t->vocab_size || !t->tok_kind[id])
        return lj_fail(LJ_ERR_FORMAT, "%s: %s: the template's first token \"%s\" is not in the vocabulary", t->path, field,
                       name->valuestring);
    t->template_bos = id;
    return LJ_OK;
}

/* The decoder: byte-level (ByteLevel, alone or in a Sequence) or none. */
static lj_status load_decoder(lj_tokenizer *t, const cJSON *dec, const char *field) {
    if (!dec || cJSON_IsNull(dec)) return LJ_OK;
    const char *type = component_type(t->path, dec, field);
    if (!type) return LJ_ERR_FORMAT;
    if (strcmp(type, "ByteLevel") == 0) return LJ_OK;
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(dec, "decoders"), *e;
        int i = 0;
        cJSON_ArrayForEach(e, list) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.decoders[%d]", field, i++);
            LJ_TRY(load_decoder(t, e, sub));
        }
        return LJ_OK;
    }
    return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %s.type \"%s\" is not supported (only byte-level BPE tokenizers are "
                   "supported: the decoder is ByteLevel)", t->path, field, type);
}

static lj_status load_model(lj_tokenizer *t, const cJSON *root, const int16_t cp_to_byte[324]) {
    const char *path = t->path;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return fmt_err(path, "model", "is missing or not an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0))
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: model.type \"%s\" is not supported (only byte-level BPE tokenizers are "
                       "supported: Llama 3, Qwen2/Qwen3, GPT-2)", path, cJSON_IsString(type) ? type->valuestring : "?");
    /* null or "" (Qwen writes ""): no subword prefix or suffix; a dropout of null or 0 */
    static const char *must_be_empty[] = {"continuing_subword_prefix", "end_of_word_suffix", "dropout"};
    for (int i = 0; i < 3; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(model, must_be_empty[i]);
        if (f && !cJSON_IsNull(f) && !(cJSON_IsNumber(f) && f->valuedouble == 0.0) &&
            !(cJSON_IsString(f) && f->valuestring[0] == '\0'))
            return lj_fail(LJ_ERR_UNSUPPORTED, "%s: model.%s: must be null or empty (ljperf reads byte-level BPE "
                           "without subword affixes or dropout)", path, must_be_empty[i]);
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
        /* matched on the raw text, leftmost-longest: what these options would change is refused */
        static const char *flags[] = {"lstrip", "rstrip", "single_word"};
        for (int k = 0; k < 3; k++)
            if (json_is_true(e, flags[k]))
                return lj_fail(LJ_ERR_UNSUPPORTED, "%s: added_tokens (id %d, \"%s\"): %s true is not supported", t->path,
                               id, content->valuestring, flags[k]);
        const cJSON *normalized = cJSON_GetObjectItemCaseSensitive(e, "normalized");
        if (t->n_norms > 0 && (normalized ? cJSON_IsTrue(normalized) : !json_is_true(e, "special")))
            return lj_fail(LJ_ERR_UNSUPPORTED, "%s: added_tokens (id %d, \"%s\"): normalized true with a normalizer is "
                           "not supported (ljperf matches added tokens on the raw text)", t->path, id, content->valuestring);
        /* an id the vocabulary (or another added token) already gives to other text: transformers
         * encodes the added text to it and decodes it as the added text, so every occurrence of the
         * ordinary token would change meaning (a document end read as "&") */
        if (t->tok_kind[id] && (t->tok[id].len != n || memcmp(t->bytes + t->tok[id].off, content->valuestring, n) != 0))
            return lj_fail(LJ_ERR_FORMAT, "%s: added_tokens (id %d, \"%s\") takes the id of %s \"%.*s\": each id "
                                          "must name one token (give the added token an id of its own)",
                           t->path, id, content->valuestring,
                           t->tok_kind[id] == 1 ? "the ordinary token (model.vocab)" : "the added token",
                           (int)t->tok[id].len, t->bytes + t->tok[id].off);
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
        if (memchr(content->valuestring, '\n', n)) t->known_split = 0;
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

/* The id of a tokenizer_config.json token entry (a string or {"content": ...}): -1 for null,
 * -2 when the key is absent or names no token. */
/* *id = the token that field `key` of tokenizer_config.json names (a string, or an object with a
 * "content" string, as transformers writes AddedToken): -1 for null, -3 when the field is absent.
 * Errors: LJ_ERR_FORMAT naming the file and the field for another type or a token that is not in
 * the vocabulary (it would otherwise fall back to a default silently). */
static lj_status config_token(const lj_tokenizer *t, const cJSON *cfg, const char *cfg_path, const char *key,
                              int32_t *id) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    *id = -3;
    if (!v) return LJ_OK;
    *id = -1;
    if (cJSON_IsNull(v)) return LJ_OK;
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v))
        return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' must be a string (or an object with a \"content\" string) or "
                       "null", cfg_path, key);
    *id = added_id(t, v->valuestring);
    if (*id < 0) *id = lj_tokenizer_token_id(t, v->valuestring, strlen(v->valuestring));
    if (*id < 0)
        return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' is \"%s\", which is not a token of %s", cfg_path, key,
                       v->valuestring, t->path);
    return LJ_OK;
}

/* BOS, EOS (the end of a document) and whether a sequence starts with BOS (tokenizer.h).
 * Errors: LJ_ERR_FORMAT for a tokenizer_config.json beside it that is not valid JSON or names a
 * special token wrongly (config_token). */
static lj_status load_bos_eos(lj_tokenizer *t) {
    t->bos = added_id(t, "<|begin_of_text|>");
    t->eos = added_id(t, "<|end_of_text|>");
    if (t->bos < 0) t->bos = added_id(t, "<|endoftext|>");
    if (t->eos < 0) t->eos = added_id(t, "<|endoftext|>");
    int config_bos = -3, config_add_bos = -1; /* -3: no tokenizer_config.json or no bos_token there */
    size_t n = strlen(t->path);
    char *cfg_path = lj_malloc(n + 32);
    memcpy(cfg_path, t->path, n + 1);
    char *slash = strrchr(cfg_path, '/');
    strcpy(slash ? slash + 1 : cfg_path, "tokenizer_config.json");
    char *text;
    size_t len;
    lj_status s = LJ_OK;
    if (access(cfg_path, R_OK) == 0 && lj_file_read_all(cfg_path, &text, &len) == LJ_OK) {
        cJSON *cfg = cJSON_ParseWithLength(text, len);
        if (!cJSON_IsObject(cfg)) s = lj_fail(LJ_ERR_FORMAT, "%s: not a JSON object", cfg_path);
        int32_t id = -3;
        if (s == LJ_OK) s = config_token(t, cfg, cfg_path, "bos_token", &id);
        if (s == LJ_OK && id != -3) t->bos = config_bos = id;
        if (s == LJ_OK) s = config_token(t, cfg, cfg_path, "eos_token", &id);
        if (s == LJ_OK && t->eos < 0 && id >= 0) t->eos = id;
        const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
        if (cJSON_IsBool(ab)) config_add_bos = cJSON_IsTrue(ab);
        cJSON_Delete(cfg);
        free(text);
    }
    free(cfg_path);
    if (s != LJ_OK) return s;
    if (t->template_bos >= 0) {
        t->bos = t->template_bos;
        t->add_bos = 1;
    } else if (t->has_template) {
        t->add_bos = 0;
    } else if (config_add_bos >= 0) {
        t->add_bos = config_add_bos && t->bos >= 0;
    } else if (config_bos != -3) {
        t->add_bos = t->bos >= 0;
    } else {
        t->add_bos = t->bos >= 0 && t->bos != t->eos;
    }
    return LJ_OK;
}

/* XXH3-64 over the unformatted JSON of the fields that decide the ids (lj_tokenizer_ids_hash). */
static uint64_t ids_hash(const cJSON *root) {
    static const char *const fields[] = {"normalizer", "pre_tokenizer", "model", "added_tokens"};
    XXH3_state_t *h = XXH3_createState();
    LJ_ASSERT(h != NULL, "XXH3_createState");
    XXH3_64bits_reset(h);
    for (int i = 0; i < 4; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, fields[i]);
        char *text = f ? cJSON_PrintUnformatted(f) : NULL;
        XXH3_64bits_update(h, fields[i], strlen(fields[i]) + 1);
        if (text) XXH3_64bits_update(h, text, strlen(text) + 1);
        free(text);
    }
    const uint64_t v = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return v;
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
    lj_tokenizer *t = lj_calloc(1, sizeof *t);
    t->file_hash = XXH3_64bits(text, len);
    free(text);
    t->path = lj_strdup(path);
    t->template_bos = -1;
    pthread_mutex_init(&t->lock, NULL);
    int16_t cp_to_byte[324];
    byte_level_table(cp_to_byte);
    lj_status st = LJ_OK;
    if (!cJSON_IsObject(root)) st = fmt_err(path, "the top level", "is not a JSON object");
    if (st == LJ_OK) st = load_model(t, root, cp_to_byte);
    if (st == LJ_OK) st = load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), "normalizer");
    if (st == LJ_OK) st = load_pre_tokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
    if (st == LJ_OK) st = load_added(t, root);
    if (st == LJ_OK)
        st = load_post_processor(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), "post_processor");
    if (st == LJ_OK) st = load_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), "decoder");
    if (st == LJ_OK) t->ids_hash = ids_hash(root);
    cJSON_Delete(root);
    if (st != LJ_OK) {
        lj_tokenizer_free(t);
        return st;
    }
    st = load_bos_eos(t);
    if (st != LJ_OK) {
        lj_tokenizer_free(t);
        return st;
    }
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
    free(s->norm);
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
    for (int k = 0; k < t->n_splits || k < t->n_user_splits; k++) pcre2_code_free(t->splits[k].re);
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

/* The names of the set-up script's tokenizers (scripts/setup.sh), in the cache's tokenizer/. */
static const char *const TOKENIZER_NAMES[] = {"llama3", "qwen3"};

lj_status lj_tokenizer_resolve(const char *arg, const char *flag, char *buf, size_t buflen) {
    struct stat st;
    if (stat(arg, &st) == 0) {
        int n = S_ISDIR(st.st_mode) ? snprintf(buf, buflen, "%s/tokenizer.json", arg) : snprintf(buf, buflen, "%s", arg);
        if (n < 0 || (size_t)n >= buflen) return lj_fail(LJ_ERR_ARG, "%s %s: the path is too long", flag, arg);
        return LJ_OK;
    }
    /* ORG/NAME: a model of the Hugging Face cache (base/hf_cache.h) */
    if (lj_hf_repo_id_like(arg)) {
        char snap[LJ_PATH_MAX];
        LJ_TRY(lj_hf_cache_snapshot(arg, flag, snap, sizeof snap));
        int n = snprintf(buf, buflen, "%s/tokenizer.json", snap);
        if (n < 0 || (size_t)n >= buflen) return lj_fail(LJ_ERR_ARG, "%s %s: the path is too long", flag, arg);
        if (access(buf, R_OK) != 0)
            return lj_fail(LJ_ERR_IO, "%s %s: the cached snapshot %s has no tokenizer.json (ljperf reads a Hugging Face "
                                      "tokenizer.json)", flag, arg, snap);
        return LJ_OK;
    }
    /* a word without a slash or a .json ending is a name; anything else a path, left for the
     * loader to report */
    const size_t len = strlen(arg);
    int named = strchr(arg, '/') == NULL && len > 0 && arg[0] != '.' && !(len >= 5 && strcmp(arg + len - 5, ".json") == 0);
    if (!named) {
        if (len >= buflen) return lj_fail(LJ_ERR_ARG, "%s %s: the path is too long", flag, arg);
        memcpy(buf, arg, len + 1);
        return LJ_OK;
    }
    {
        char cache[LJ_PATH_MAX];
        int n = snprintf(buf, buflen, "%s/tokenizer/%s/tokenizer.json", lj_cache_dir(cache, sizeof cache), arg);
        if (n < 0 || (size_t)n >= buflen) return lj_fail(LJ_ERR_ARG, "%s %s: the path is too long", flag, arg);
        if (access(buf, R_OK) == 0) return LJ_OK;
        for (size_t i = 0; i < sizeof TOKENIZER_NAMES / sizeof TOKENIZER_NAMES[0]; i++)
            if (strcmp(arg, TOKENIZER_NAMES[i]) == 0)
                return lj_fail(LJ_ERR_IO, "%s %s: %s is missing; run scripts/setup.sh to fetch it", flag, arg, buf);
    }
    return lj_fail(LJ_ERR_IO, "%s %s: no such file or directory, and not a tokenizer name (llama3, qwen3: the set-up "
                   "script's tokenizers)", flag, arg);
}

int lj_tokenizer_adds_bos(const lj_tokenizer *t) { return t->add_bos; }
int lj_tokenizer_is_qwen2(const lj_tokenizer *t) { return t->qwen2; }
uint64_t lj_tokenizer_file_hash(const lj_tokenizer *t) { return t->file_hash; }
uint64_t lj_tokenizer_ids_hash(const lj_tokenizer *t) { return t->ids_hash; }
const char *lj_tokenizer_path(const lj_tokenizer *t) { return t->path; }

/* ---- encoding --------------------------------------------------------------------- */

static tok_state *state_acquire(lj_tokenizer *t) {
    pthread_mutex_lock(&t->lock);
    tok_state *s = t->free_states;
    if (s) t->free_states = s->next_free;
    pthread_mutex_unlock(&t->lock);
    if (s) return s;
    s = lj_calloc(1, sizeof *s);
    if (t->n_splits > 0) {
        uint32_t pairs = 1;
        for (int k = 0; k < t->n_splits; k++) {
            uint32_t c = 0;
            pcre2_pattern_info(t->splits[k].re, PCRE2_INFO_CAPTURECOUNT, &c);
            if (c + 1 > pairs) pairs = c + 1;
        }
        s->md = pcre2_match_data_create(pairs, NULL);
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

static lj_status pre_tokenize(const lj_tokenizer *t, tok_state *s, int k, const char *p, size_t n, int32_t **ids,
                              int64_t *nids, int64_t *cap);

/* A piece of split stage k is done: hand it to the next stage. */
static inline lj_status emit_piece(const lj_tokenizer *t, tok_state *s, int k, const char *p, size_t n, int32_t **ids,
                                   int64_t *nids, int64_t *cap) {
    return n ? pre_tokenize(t, s, k + 1, p, n, ids, nids, cap) : LJ_OK;
}

/* Splits text[0..n) with the regex of stage k into matches and the gaps between them, turns
 * those spans into pieces as the stage's behavior says (HF's NormalizedString::split: Isolated
 * keeps both, Removed drops the matches, MergedWithPrevious / MergedWithNext join a match to the
 * piece before / after it, Contiguous joins runs of the same kind; invert swaps matches and
 * gaps), and passes each piece on. */
static lj_status split_text(const lj_tokenizer *t, tok_state *s, int k, const char *text, size_t n, int32_t **ids,
                            int64_t *nids, int64_t *cap) {
    const split_stage *sp = &t->splits[k];
    const int beh = sp->behavior;
    size_t pos = 0, gap = 0;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
    /* the piece being built (merging behaviors), and whether the last span was a match */
    size_t ps = 0, pe = 0;
    int pending = 0, prev_match = 0;
    for (int done = 0; !done;) {
        size_t a = n, b = n;
        if (pos < n) {
            int rc = sp->jit ? pcre2_jit_match(sp->re, (PCRE2_SPTR)text, n, pos, PCRE2_NO_UTF_CHECK, s->md, s->mctx)
                             : pcre2_match(sp->re, (PCRE2_SPTR)text, n, pos, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
            if (rc >= 0) {
                a = ov[0];
                b = ov[1];
            } else if (rc != PCRE2_ERROR_NOMATCH) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return lj_fail(LJ_ERR_UNSUPPORTED, "pre-tokenizer regex failed near byte %zu: %s", pos, (const char *)msg);
            }
        }
        if (a == n) done = 1;
        /* the spans: the gap [gap, a) when not empty, then the match [a, b) unless done */
        for (int part = 0; part < 2; part++) {
            size_t x = part ? a : gap, y = part ? b : a;
            if (part ? done : x == y) continue;
            int m = part ^ sp->invert;
            if (beh == SPLIT_ISOLATED) {
                LJ_TRY(emit_piece(t, s, k, text + x, y - x, ids, nids, cap));
            } else if (beh == SPLIT_REMOVED) {
                if (!m) LJ_TRY(emit_piece(t, s, k, text + x, y - x, ids, nids, cap));
            } else if (beh == SPLIT_MERGED_NEXT) { /* a match waits for the gap after it */
                if (pending && !m) {
                    LJ_TRY(emit_piece(t, s, k, text + ps, y - ps, ids, nids, cap));
                    pending = 0;
                } else {
                    if (pending) LJ_TRY(emit_piece(t, s, k, text + ps, pe - ps, ids, nids, cap));
                    pending = m;
                    ps = x;
                    pe = y;
                    if (!m) LJ_TRY(emit_piece(t, s, k, text + x, y - x, ids, nids, cap));
                }
            } else { /* MergedWithPrevious, Contiguous: extend the piece or start a new one */
                int join = beh == SPLIT_MERGED_PREVIOUS ? (m && !prev_match) : (m == prev_match);
                if (pending && join) {
                    pe = y;
                } else {
                    if (pending) LJ_TRY(emit_piece(t, s, k, text + ps, pe - ps, ids, nids, cap));
                    ps = x;
                    pe = y;
                    pending = 1;
                }
            }
            prev_match = m;
        }
        if (done) break;
        if (b > a) {
            pos = gap = b;
        } else { /* empty match: step over one character */
            pos = b + 1;
            while (pos < n && ((unsigned char)text[pos] & 0xc0) == 0x80) pos++;
            gap = a;
        }
    }
    if (pending) LJ_TRY(emit_piece(t, s, k, text + ps, pe - ps, ids, nids, cap));
    return LJ_OK;
}

/* Stage k of the pre-tokenizer on one piece: the Split steps (k < n_user_splits), the ByteLevel
 * step's prefix space (at k == n_user_splits, when add_prefix_space and the piece does not start
 * with one) and regex (k < n_splits), then BPE on the word. */
static lj_status pre_tokenize(const lj_tokenizer *t, tok_state *s, int k, const char *p, size_t n, int32_t **ids,
                              int64_t *nids, int64_t *cap) {
    if (k == t->n_user_splits && t->add_prefix_space && n > 0 && p[0] != ' ') {
        if (n + 1 > s->tmp_cap) {
            s->tmp_cap = (n + 1) * 2;
            s->tmp = lj_realloc(s->tmp, s->tmp_cap);
        }
        s->tmp[0] = ' ';
        memcpy(s->tmp + 1, p, n);
        p = s->tmp;
        n++;
    }
    if (k < t->n_splits) return split_text(t, s, k, p, n, ids, nids, cap);
    return encode_word(t, s, p, n, ids, nids, cap);
}

/* Appends the normalization of text[0..n) (the tokenizer's forms in order) to s->norm at *len.
 * ASCII needs no work, and the place before an ASCII character is a normalization boundary
 * under every form (it has no decomposition, is never the second of a composition, and has
 * combining class 0), so only the stretches from the ASCII character before a non-ASCII run to
 * the next ASCII character go through utf8proc. */
static lj_status normalize(const lj_tokenizer *t, tok_state *s, const char *text, size_t n, size_t *len) {
    if (s->norm_cap < n + 1) {
        s->norm_cap = n + n / 2 + 64;
        s->norm = lj_realloc(s->norm, s->norm_cap);
    }
    size_t o = 0, i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && (unsigned char)text[j] < 0x80) j++;
        size_t start = j > i ? j - 1 : j; /* an ASCII letter may take the marks after it */
        if (j == n) start = n;
        memcpy(s->norm + o, text + i, start - i);
        o += start - i;
        if (start == n) break;
        size_t end = j;
        while (end < n && (unsigned char)text[end] >= 0x80) end++;
        utf8proc_uint8_t *cur = (utf8proc_uint8_t *)text + start, *out = NULL;
        utf8proc_ssize_t m = (utf8proc_ssize_t)(end - start);
        for (int f = 0; f < t->n_norms; f++) {
            utf8proc_uint8_t *next = NULL;
            m = utf8proc_map(cur, m, &next, t->norm_options[f]);
            free(out);
            if (m < 0) return lj_fail(LJ_ERR_FORMAT, "%s: normalizer: %s", t->path, utf8proc_errmsg(m));
            out = cur = next;
        }
        if (o + (size_t)m + (n - end) + 1 > s->norm_cap) {
            s->norm_cap = (o + (size_t)m + (n - end)) * 2 + 64;
            s->norm = lj_realloc(s->norm, s->norm_cap);
        }
        memcpy(s->norm + o, cur, (size_t)m);
        o += (size_t)m;
        free(out);
        i = end;
    }
    *len = o;
    return LJ_OK;
}

/* Encodes a segment with no added tokens in it: normalizer, pre-tokenizer, BPE. */
static lj_status encode_segment(const lj_tokenizer *t, tok_state *s, const char *text, size_t n, int32_t **ids,
                                int64_t *nids, int64_t *cap) {
    if (n == 0) return LJ_OK;
    if (t->n_norms > 0) {
        size_t i = 0;
        while (i < n && (unsigned char)text[i] < 0x80) i++;
        if (i < n) {
            size_t m = 0;
            LJ_TRY(normalize(t, s, text, n, &m));
            return pre_tokenize(t, s, 0, s->norm, m, ids, nids, cap);
        }
    }
    return pre_tokenize(t, s, 0, text, n, ids, nids, cap);
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
    if (!t->known_split || t->add_prefix_space) return len;
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

/* prepare.c: `ljperf prepare`: reads documents from .txt / .jsonl / stdin, tokenizes them on a
 * pool of threads, and writes them in input order as a Megatron-LM indexed dataset.
 *
 * Pipeline: the calling thread reads a round of documents (ROUND_BYTES of text, or 4 MiB per
 * worker if more) while the workers tokenize the previous round; a document larger than a piece
 * (1/4 of the document per worker, between 64 KiB and 1 MiB) is cut into pieces at points where
 * the tokenizer allows it (lj_tokenizer_split_point), so one big file still uses every core.
 * Rounds are written in order, so the output does not depend on the worker count. */
#include "base/fs.h"
#include "data/prepare.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/input.h"
#include "data/mmidx.h"
#include "data/tokenizer.h"

enum { ROUND_BYTES = 16 << 20, ROUND_DOCS = 1 << 16, PIECE_MIN = 64 << 10, PIECE_MAX = 1 << 20, READ_CHUNK = 1 << 20 };

typedef struct {
    char *own;         /* the text's own buffer (a whole file), or NULL: it is in the round's arena */
    size_t text_off;   /* where it starts in the round's arena */
    const char *text;  /* set when the round has been read */
    size_t len;
    const char *file;  /* display name */
    int64_t line;      /* first line (1-based) */
    uint64_t offset;   /* file byte offset of text[0] (text documents) */
    int is_json;
    int key;           /* index into cfg->json_keys: the dataset it goes to */
    int first_job, num_jobs;
} doc;

typedef struct {
    int doc;
    size_t start, len;
    int arena;         /* the worker whose token arena holds the ids */
    int64_t off, n;    /* ids [off, off + n) of that arena */
    lj_status status;
    char *err;
} job;

typedef struct { int32_t *ids; int64_t n, cap; } id_arena; /* one per worker, reset each round */

typedef struct {
    doc *docs;
    int ndocs, cap_docs;
    job *jobs;
    int njobs, cap_jobs;
    char *text;        /* arena of document text */
    size_t text_len, text_cap;
    size_t text_bytes;
    uint64_t input_bytes;
    lj_status read_status; /* the error that ended reading, reported after this round's own */
    char *read_err;
    int last;
} round_t;

/* Reads one input: whole (file mode) or line by line. */
typedef struct {
    const char *name;
    FILE *f;
    char err[256];   /* why a read of compressed data failed (data/input.h) */
    int jsonl;
    char *buf;
    size_t start, end, cap;
    int eof;
    int64_t line;    /* number of the next line */
    uint64_t offset; /* file offset of buf[start] */
} reader;

typedef struct {
    const lj_prepare_config *cfg;
    lj_tokenizer *tok;
    int input;       /* index of the current input, -1 before the first */
    reader rd;
    doc pending[LJ_PREPARE_MAX_KEYS]; /* the documents of the last JSON line not yet taken */
    int npending, next_pending;
    uint64_t total_input; /* sum of the regular files' sizes, 0 if unknown */
    int64_t empty_skipped;
    /* the worker pool */
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    round_t *cur;
    uint64_t generation;
    int finished, nworkers, quit;
    atomic_int next_job, failed;
    atomic_llong done_bytes, replaced;
    id_arena *arenas; /* [nworkers] */
} prep;

typedef struct { prep *p; int index; } worker_arg;

/* ---- reading ---------------------------------------------------------------------- */

/* By the name without a .gz / .zst suffix. */
static int is_jsonl_name(const char *path) {
    const size_t n = lj_input_base_len(path);
    const char *ext[3] = {".jsonl", ".ndjson", ".json"};
    for (int i = 0; i < 3; i++) {
        const size_t m = strlen(ext[i]);
        if (n >= m && strncmp(path + n - m, ext[i], m) == 0) return 1;
    }
    return 0;
}

static lj_status reader_open(prep *p, const char *path) {
    reader *r = &p->rd;
    memset(r, 0, sizeof *r);
    r->line = 1;
    int is_stdin = strcmp(path, "-") == 0;
    r->name = is_stdin ? "<stdin>" : path;
    r->f = is_stdin ? stdin : lj_input_open(path, r->err, sizeof r->err);
    if (!r->f) return lj_fail(LJ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    lj_prepare_format fmt = p->cfg->format;
    r->jsonl = fmt == LJ_PREPARE_FORMAT_JSONL || (fmt == LJ_PREPARE_FORMAT_AUTO && !is_stdin && is_jsonl_name(path));
    r->cap = READ_CHUNK;
    r->buf = lj_malloc(r->cap + 1);
    return LJ_OK;
}

static void reader_close(reader *r) {
    if (r->f && r->f != stdin) fclose(r->f);
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* Appends up to READ_CHUNK more bytes to the buffer; sets eof at the end. */
static lj_status reader_fill(reader *r) {
    if (r->start > 0 && r->start == r->end) r->start = r->end = 0;
    if (r->end + READ_CHUNK > r->cap && r->start > 0) { /* slide down */
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    if (r->end + READ_CHUNK > r->cap) {
        r->cap = (r->end + READ_CHUNK) * 2;
        r->buf = lj_realloc(r->buf, r->cap + 1);
    }
    size_t got = fread(r->buf + r->end, 1, READ_CHUNK, r->f);
    r->end += got;
    if (got < READ_CHUNK) {
        if (ferror(r->f))
            return lj_fail(LJ_ERR_IO, "%s: read error: %s", r->name, r->err[0] ? r->err : strerror(errno));
        r->eof = 1;
    }
    return LJ_OK;
}

/* The next line (with its '\n', if any) in *line / *len, valid until the next call; *len == 0 at
 * the end of the input. */
static lj_status reader_line(prep *p, const char **line, size_t *len) {
    reader *r = &p->rd;
    for (;;) {
        char *nl = memchr(r->buf + r->start, '\n', r->end - r->start);
        if (nl || r->eof) {
            size_t n = nl ? (size_t)(nl - (r->buf + r->start)) + 1 : r->end - r->start;
            *line = r->buf + r->start;
            *len = n;
            r->start += n;
            r->offset += n;
            r->line += nl != NULL;
            return LJ_OK;
        }
        LJ_TRY(reader_fill(r));
    }
}

static int blank_line(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

/* Room for n more bytes (and a NUL) in the round's text arena. */
static char *text_reserve(round_t *rd, size_t n) {
    if (rd->text_len + n + 1 > rd->text_cap) {
        rd->text_cap = (rd->text_len + n + 1) * 2;
        rd->text = lj_realloc(rd->text, rd->text_cap);
    }
    return rd->text + rd->text_len;
}

/* Finds `\u0000` escapes, which cJSON cannot return (its strings end at the first NUL). */
static int has_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 5 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && memcmp(s + i + 2, "0000", 4) == 0) return 1;
        i++; /* skip the escaped character */
    }
    return 0;
}

/* Parses one .jsonl line: for each key, its string becomes a document of that key's dataset,
 * its text appended to the round's arena, queued in p->pending (empty strings are skipped and
 * counted). */
static lj_status json_docs(prep *p, round_t *rd, const char *line, size_t n, int64_t lineno) {
    const char *name = p->rd.name, *end = NULL;
    cJSON *obj = cJSON_ParseWithLengthOpts(line, n, &end, 0);
    if (!obj) {
        size_t col = end && end >= line ? (size_t)(end - line) + 1 : 1;
        return lj_fail(LJ_ERR_FORMAT, "%s:%lld: not valid JSON (error at column %zu)", name, (long long)lineno, col);
    }
    lj_status st = LJ_OK;
    if (!blank_line(end, n - (size_t)(end - line)))
        st = lj_fail(LJ_ERR_FORMAT, "%s:%lld: not valid JSON (text after the value at column %zu)", name,
                     (long long)lineno, (size_t)(end - line) + 1);
    else if (!cJSON_IsObject(obj))
        st = lj_fail(LJ_ERR_FORMAT, "%s:%lld: not a JSON object", name, (long long)lineno);
    else if (has_nul_escape(line, n))
        st = lj_fail(LJ_ERR_UNSUPPORTED, "%s:%lld: \\u0000 (NUL) in a JSON string is not supported", name, (long long)lineno);
    p->npending = p->next_pending = 0;
    for (int k = 0; st == LJ_OK && k < p->cfg->num_keys; k++) {
        const char *key = p->cfg->json_keys[k];
        /* a duplicated key takes its last value, as Python's json and jq do */
        const cJSON *v = NULL;
        for (const cJSON *it = obj->child; it; it = it->next)
            if (it->string && strcmp(it->string, key) == 0) v = it;
        if (!v) {
            const int conv = cJSON_GetObjectItem(obj, "conversations") || cJSON_GetObjectItem(obj, "messages");
            st = lj_fail(LJ_ERR_FORMAT, "%s:%lld: no key \"%s\" (--json-keys picks the keys%s)", name, (long long)lineno,
                         key, conv ? "; a LLaVA conversation? give --image-root DIR, the folder of its images" : "");
            break;
        }
        if (!cJSON_IsString(v)) {
            st = lj_fail(LJ_ERR_FORMAT, "%s:%lld: key \"%s\" is not a string", name, (long long)lineno, key);
            break;
        }
        const size_t len = strlen(v->valuestring);
        if (len == 0) { /* "" */
            p->empty_skipped++;
            continue;
        }
        doc *d = &p->pending[p->npending++];
        memset(d, 0, sizeof *d);
        d->file = name;
        d->is_json = 1;
        d->key = k;
        d->line = lineno;
        d->text_off = rd->text_len;
        d->len = len;
        memcpy(text_reserve(rd, len), v->valuestring, len);
        rd->text_len += len;
    }
    if (st != LJ_OK) p->npending = 0;
    cJSON_Delete(obj);
    return st;
}

/* The next document of the current input in *d, its text appended to the round's arena or in its
 * own buffer; d->len == 0 and d->own == NULL with `*got` 0 at the end of the input. */
static lj_status next_doc_in_input(prep *p, round_t *rd, doc *d, int *got) {
    reader *r = &p->rd;
    *got = 0;
    if (p->next_pending < p->npending) { /* the rest of the last JSON line's documents */
        *d = p->pending[p->next_pending++];
        *got = 1;
        return LJ_OK;
    }
    memset(d, 0, sizeof *d);
    d->file = r->name;
    d->is_json = r->jsonl;
    d->text_off = rd->text_len;
    if (!r->jsonl && p->cfg->split_on == LJ_PREPARE_SPLIT_FILE) { /* the whole input */
        if (r->eof) return LJ_OK;
        while (!r->eof) LJ_TRY(reader_fill(r));
        d->line = 1;
        d->len = r->end;
        d->own = r->buf; /* hand the buffer over */
        d->own[d->len] = '\0';
        *got = 1;
        r->offset = r->end;
        r->buf = lj_malloc(1);
        r->cap = 0;
        r->start = r->end = 0;
        return LJ_OK;
    }
    for (;;) {
        const char *line = NULL;
        size_t n = 0;
        int64_t lineno = r->line;
        uint64_t offset = r->offset;
        LJ_TRY(reader_line(p, &line, &n));
        if (n == 0) break;
        if (blank_line(line, n)) {
            if (*got) break; /* a blank line ends a text document */
            continue;
        }
        if (r->jsonl) {
            LJ_TRY(json_docs(p, rd, line, n, lineno));
            if (p->npending == 0) continue; /* every key's string was empty */
            *d = p->pending[p->next_pending++];
            *got = 1;
            return LJ_OK;
        }
        if (!*got) {
            d->line = lineno;
            d->offset = offset;
            *got = 1;
        }
        memcpy(text_reserve(rd, n), line, n);
        rd->text_len += n;
        d->len += n;
    }
    if (*got && !r->jsonl) { /* drop the last line's end */
        char *t = rd->text + d->text_off;
        if (d->len && t[d->len - 1] == '\n') d->len--;
        if (d->len && t[d->len - 1] == '\r') d->len--;
        rd->text_len = d->text_off + d->len;
    }
    return LJ_OK;
}

/* The next document of all inputs; *got 0 when they are exhausted. */
static lj_status next_doc(prep *p, round_t *rd, doc *d, int *got) {
    for (;;) {
        if (p->input >= 0) {
            uint64_t before = p->rd.offset;
            lj_status st = next_doc_in_input(p, rd, d, got);
            rd->input_bytes += p->rd.offset - before;
            if (st != LJ_OK) return st;
            if (*got && d->len == 0) { /* an empty file */
                free(d->own);
                p->empty_skipped++;
                continue;
            }
            if (*got) return LJ_OK;
            reader_close(&p->rd);
        }
        *got = 0;
        if (p->input + 1 >= p->cfg->num_inputs) return LJ_OK;
        p->input++;
        LJ_TRY(reader_open(p, p->cfg->inputs[p->input]));
    }
}

static void round_reset(round_t *r) {
    for (int i = 0; i < r->ndocs; i++) free(r->docs[i].own);
    for (int i = 0; i < r->njobs; i++) {
        free(r->jobs[i].err);
        r->jobs[i].err = NULL;
        r->jobs[i].status = LJ_OK;
        r->jobs[i].n = 0;
    }
    r->text_len = 0;
    free(r->read_err);
    r->read_err = NULL;
    r->read_status = LJ_OK;
    r->ndocs = r->njobs = 0;
    r->text_bytes = 0;
    r->input_bytes = 0;
}

static void round_free(round_t *r) {
    round_reset(r);
    free(r->text);
    free(r->jobs);
    free(r->docs);
}

static void add_job(round_t *r, int d, size_t start, size_t len) {
    if (r->njobs == r->cap_jobs) {
        int old = r->cap_jobs;
        r->cap_jobs = old ? old * 2 : 1024;
        r->jobs = lj_realloc(r->jobs, (size_t)r->cap_jobs * sizeof *r->jobs);
        memset(r->jobs + old, 0, (size_t)(r->cap_jobs - old) * sizeof *r->jobs);
    }
    job *j = &r->jobs[r->njobs++];
    j->doc = d;
    j->start = start;
    j->len = len;
    j->n = 0;
}

/* Reads the next round of documents and cuts them into jobs. */
static void read_round(prep *p, round_t *r) {
    round_reset(r);
    size_t round_bytes = (size_t)p->nworkers * (4 << 20) > ROUND_BYTES ? (size_t)p->nworkers * (4 << 20) : ROUND_BYTES;
    /* a JSON line's documents stay in one round (their text is in its arena) */
    while ((r->text_bytes < round_bytes && r->ndocs < ROUND_DOCS) || p->next_pending < p->npending) {
        doc d;
        int got = 0;
        lj_status st = next_doc(p, r, &d, &got);
        if (st != LJ_OK) {
            r->read_status = st;
            r->read_err = lj_strdup(lj_error_message());
        }
        if (st != LJ_OK || !got) {
            r->last = 1;
            break;
        }
        if (r->ndocs == r->cap_docs) {
            r->cap_docs = r->cap_docs ? r->cap_docs * 2 : 1024;
            r->docs = lj_realloc(r->docs, (size_t)r->cap_docs * sizeof *r->docs);
        }
        d.first_job = r->njobs;
        const char *text = d.own ? d.own : r->text + d.text_off;
        size_t piece = d.len / (4 * (size_t)p->nworkers);
        piece = piece < PIECE_MIN ? PIECE_MIN : piece > PIECE_MAX ? PIECE_MAX : piece;
        for (size_t start = 0; start < d.len;) {
            size_t end = d.len - start > piece ? lj_tokenizer_split_point(p->tok, text, d.len, start + piece) : d.len;
            add_job(r, r->ndocs, start, end - start);
            start = end;
        }
        d.num_jobs = r->njobs - d.first_job;
        r->text_bytes += d.len;
        r->docs[r->ndocs++] = d;
    }
    for (int i = 0; i < r->ndocs; i++) /* the arena has stopped moving */
        r->docs[i].text = r->docs[i].own ? r->docs[i].own : r->text + r->docs[i].text_off;
}

/* ---- tokenizing ------------------------------------------------------------------- */

static void run_job(prep *p, round_t *r, job *j, int worker) {
    const doc *d = &r->docs[j->doc];
    const char *text = d->text + j->start;
    size_t len = j->len, bad = lj_utf8_check(text, len);
    char *fixed = NULL;
    lj_status st = LJ_OK;
    if (bad != len && p->cfg->utf8_replace) {
        atomic_fetch_add(&p->replaced, (long long)lj_utf8_repair(text, len, &fixed, &len));
        text = fixed;
    } else if (bad != len) {
        size_t at = j->start + bad;
        unsigned byte = (unsigned char)d->text[at];
        const char *hint = "; --utf8-errors replace turns ill-formed bytes into U+FFFD";
        if (d->is_json) {
            st = lj_fail(LJ_ERR_FORMAT, "%s:%lld: key \"%s\": invalid UTF-8 at byte %zu of the string (byte 0x%02x)%s",
                         d->file, (long long)d->line, p->cfg->json_keys[d->key], at, byte, hint);
        } else {
            int64_t line = d->line;
            for (size_t i = 0; i < at; i++) line += d->text[i] == '\n';
            st = lj_fail(LJ_ERR_FORMAT, "%s:%lld: invalid UTF-8 at byte offset %llu (byte 0x%02x)%s", d->file,
                         (long long)line, (unsigned long long)(d->offset + at), byte, hint);
        }
    }
    if (st == LJ_OK) {
        id_arena *a = &p->arenas[worker];
        j->arena = worker;
        j->off = a->n;
        st = lj_tokenizer_encode_append(p->tok, text, len, p->cfg->allow_special, &a->ids, &a->n, &a->cap);
        j->n = a->n - j->off;
        if (st != LJ_OK) lj_error_prefix("%s:%lld", d->file, (long long)d->line);
    }
    free(fixed);
    if (st != LJ_OK) {
        j->status = st;
        j->err = lj_strdup(lj_error_message());
        atomic_store(&p->failed, 1);
    }
    atomic_fetch_add(&p->done_bytes, (long long)j->len);
}

static void *worker_main(void *arg) {
    prep *p = ((worker_arg *)arg)->p;
    int index = ((worker_arg *)arg)->index;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->quit) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = p->generation;
        round_t *r = p->cur;
        pthread_mutex_unlock(&p->mu);
        for (;;) {
            int k = atomic_fetch_add(&p->next_job, 1);
            if (k >= r->njobs || atomic_load(&p->failed)) break;
            run_job(p, r, &r->jobs[k], index);
        }
        pthread_mutex_lock(&p->mu);
        if (++p->finished == p->nworkers) pthread_cond_signal(&p->done_cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static void publish(prep *p, round_t *r) {
    pthread_mutex_lock(&p->mu);
    p->cur = r;
    p->finished = 0;
    atomic_store(&p->next_job, 0);
    atomic_store(&p->done_bytes, 0);
    for (int i = 0; i < p->nworkers; i++) p->arenas[i].n = 0;
    p->generation++;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
}

/* ---- progress --------------------------------------------------------------------- */

typedef struct {
    double start, last_draw;
    int tty, enabled, drawn;
} progress;

static void progress_draw(const progress *pg, double frac, double mb, double tokens, double now, int final) {
    double secs = now - pg->start > 1e-9 ? now - pg->start : 1e-9;
    char pct[32] = "";
    if (frac >= 0) snprintf(pct, sizeof pct, "%5.1f%% ", 100.0 * frac);
    if (pg->tty) {
        char bar[31];
        int fill = frac >= 0 ? (int)(frac * 30.0 + 0.5) : 0;
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : (frac >= 0 ? '.' : ' ');
        bar[30] = '\0';
        fprintf(stderr, "\r\033[Kprepare %s[%s] %.1f MB  %.1f MB/s  %.2fM tokens/s%s", pct, bar, mb, mb / secs,
                tokens / secs / 1e6, final ? "\n" : "");
    } else {
        fprintf(stderr, "prepare: %s%.1f MB, %.1f MB/s, %.2fM tokens/s\n", pct, mb, mb / secs, tokens / secs / 1e6);
    }
    fflush(stderr);
}

/* ---- the run ---------------------------------------------------------------------- */

static const char *const default_keys[1] = {"text"};

void lj_prepare_config_init(lj_prepare_config *c) {
    memset(c, 0, sizeof *c);
    c->json_keys = default_keys;
    c->num_keys = 1;
    c->append_eos = 1;
    c->progress = 1;
}

lj_status lj_prepare_output_prefix(const lj_prepare_config *c, int k, char *buf) {
    if (!c->megatron_names) return lj_path_format(buf, "%s", c->output_prefix);
    return lj_path_format(buf, "%s_%s_document", c->output_prefix, c->json_keys[k]); /* preprocess_data.py's */
}

/* Writes a finished round's documents in order, each to its key's dataset w[key]. The first
 * failing job, then the read error. */
static lj_status write_round(prep *p, round_t *r, lj_mmidx_writer **w, int32_t **buf, int64_t *cap, lj_prepare_stats *s) {
    for (int i = 0; i < r->njobs; i++)
        if (r->jobs[i].status != LJ_OK) return lj_fail(r->jobs[i].status, "%s", r->jobs[i].err);
    int32_t bos = lj_tokenizer_bos_id(p->tok), eos = lj_tokenizer_eos_id(p->tok);
    for (int i = 0; i < r->ndocs; i++) {
        const doc *d = &r->docs[i];
        int64_t n = 0;
        for (int k = 0; k < d->num_jobs; k++) n += r->jobs[d->first_job + k].n;
        if (n + 2 > *cap) {
            *cap = (n + 2) * 2;
            *buf = lj_realloc(*buf, (size_t)*cap * sizeof **buf);
        }
        int64_t m = 0;
        if (p->cfg->prepend_bos) (*buf)[m++] = bos;
        for (int k = 0; k < d->num_jobs; k++) {
            const job *j = &r->jobs[d->first_job + k];
            memcpy(*buf + m, p->arenas[j->arena].ids + j->off, (size_t)j->n * sizeof **buf);
            m += j->n;
        }
        if (p->cfg->append_eos) (*buf)[m++] = eos;
        LJ_TRY(lj_mmidx_writer_add(w[d->key], *buf, m));
        s->documents++;
        s->tokens += m;
        s->key_documents[d->key]++;
        s->key_tokens[d->key] += m;
    }
    s->text_bytes += (int64_t)r->text_bytes;
    s->input_bytes += (int64_t)r->input_bytes;
    if (r->read_status != LJ_OK) return lj_fail(r->read_status, "%s", r->read_err);
    return LJ_OK;
}

static lj_status check_config(const lj_prepare_config *c, const char **tok_path, char *defbuf, size_t deflen) {
    if (c->num_inputs <= 0) return lj_fail(LJ_ERR_ARG, "no input: give --input PATH (a .txt or .jsonl file, or - for stdin)");
    if (!c->output_prefix || !c->output_prefix[0]) return lj_fail(LJ_ERR_ARG, "no output: give --output-prefix PREFIX");
    const char *base = strrchr(c->output_prefix, '/');
    base = base ? base + 1 : c->output_prefix;
    if (!base[0] || !strcmp(base, ".") || !strcmp(base, ".."))
        return lj_fail(LJ_ERR_ARG, "--output-prefix %s: names a directory, not a file prefix (the files would be the "
                                   "hidden %s.bin and .idx); give DIR/NAME", c->output_prefix, c->output_prefix);
    if (c->num_keys < 1 || c->num_keys > LJ_PREPARE_MAX_KEYS)
        return lj_fail(LJ_ERR_ARG, "--json-keys: %d keys; expected 1 to %d", c->num_keys, LJ_PREPARE_MAX_KEYS);
    for (int k = 0; k < c->num_keys; k++) {
        if (!c->json_keys[k][0]) return lj_fail(LJ_ERR_ARG, "--json-keys: a key must not be empty");
        if (c->megatron_names && strchr(c->json_keys[k], '/'))
            return lj_fail(LJ_ERR_ARG, "--json-keys %s: a key with '/' cannot name a dataset file (PREFIX_KEY_document)",
                           c->json_keys[k]);
        for (int j = 0; j < k; j++)
            if (!strcmp(c->json_keys[j], c->json_keys[k]))
                return lj_fail(LJ_ERR_ARG, "--json-keys: '%s' is given twice (each key writes its own dataset)",
                               c->json_keys[k]);
    }
    for (int i = 0; c->num_keys > 1 && i < c->num_inputs; i++) {
        const char *in = c->inputs[i];
        const int jsonl = c->format == LJ_PREPARE_FORMAT_JSONL ||
                          (c->format == LJ_PREPARE_FORMAT_AUTO && strcmp(in, "-") != 0 && is_jsonl_name(in));
        if (!jsonl)
            return lj_fail(LJ_ERR_ARG, "--json-keys %s %s ...: %s is not JSON lines; a document of text has no keys "
                                       "(give .jsonl inputs, or --format jsonl)",
                           c->json_keys[0], c->json_keys[1], strcmp(in, "-") ? in : "<stdin>");
    }
    int stdin_count = 0;
    for (int i = 0; i < c->num_inputs; i++) {
        const char *in = c->inputs[i];
        if (strcmp(in, "-") == 0) {
            if (++stdin_count > 1) return lj_fail(LJ_ERR_ARG, "--input -: stdin can be read only once");
            if (isatty(STDIN_FILENO))
                return lj_fail(LJ_ERR_ARG, "--input -: stdin is a terminal; pipe the text in (cat corpus.txt | ljperf prepare --input - ...)");
            continue;
        }
        struct stat st;
        if (stat(in, &st) != 0) return lj_fail(LJ_ERR_IO, "%s: cannot open: %s", in, strerror(errno));
        if (S_ISDIR(st.st_mode)) return lj_fail(LJ_ERR_IO, "%s: is a directory (give the files)", in);
        if (access(in, R_OK) != 0) return lj_fail(LJ_ERR_IO, "%s: cannot open: %s", in, strerror(errno));
    }
    *tok_path = c->tokenizer_path;
    if (!*tok_path) {
        *tok_path = lj_tokenizer_default_path(defbuf, deflen);
        if (access(*tok_path, R_OK) != 0)
            return lj_fail(LJ_ERR_IO, "%s: no tokenizer there (the default); run scripts/setup.sh to fetch the Llama 3 "
                                      "tokenizer, or pass --tokenizer PATH/tokenizer.json", *tok_path);
    }
    return LJ_OK;
}

/* What the sidecar records of the tokenizer (data/mmidx.h). */
static lj_status tokenizer_record(const lj_prepare_config *c, const char *tok_path, const lj_tokenizer *tok,
                                  lj_mmidx_tokenizer *t) {
    memset(t, 0, sizeof *t);
    /* absolute, but through its links as given (a Hugging Face snapshot's files are links into
     * blobs/, and its tokenizer_config.json is found beside the link) */
    char abs[LJ_PATH_MAX], cwd[LJ_PATH_MAX];
    lj_status st = tok_path[0] == '/' ? lj_path_format(abs, "%s", tok_path)
                   : getcwd(cwd, sizeof cwd) ? lj_path_join(abs, cwd, tok_path)
                                             : lj_path_format(abs, "%s", tok_path);
    const char *name = c->tokenizer_name ? c->tokenizer_name : abs;
    if (st != LJ_OK || strlen(name) >= sizeof t->name || strlen(abs) >= sizeof t->path)
        return lj_fail(LJ_ERR_ARG, "%s: the tokenizer's path is too long to record", tok_path);
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->path, sizeof t->path, "%s", abs);
    t->file_xxh3_64 = lj_tokenizer_file_hash(tok);
    t->ids_xxh3_64 = lj_tokenizer_ids_hash(tok);
    t->vocab_size = lj_tokenizer_vocab_size(tok);
    t->bos_token_id = lj_tokenizer_bos_id(tok);
    t->eos_token_id = lj_tokenizer_eos_id(tok);
    return LJ_OK;
}

static lj_status open_output(const char *prefix, int dtype, lj_mmidx_writer **w) {
    char *dir = lj_strdup(prefix);
    char *slash = strrchr(dir, '/');
    lj_status st = LJ_OK;
    if (slash && slash != dir) {
        *slash = '\0';
        st = lj_mkdir_p(dir);
    }
    free(dir);
    return st == LJ_OK ? lj_mmidx_writer_open(w, prefix, dtype) : st;
}

static lj_status run_pipeline(prep *p, lj_mmidx_writer **w, lj_prepare_stats *s) {
    const lj_prepare_config *c = p->cfg;
    round_t rounds[2];
    memset(rounds, 0, sizeof rounds);
    int32_t *buf = NULL;
    int64_t cap = 0;
    progress pg = {.start = lj_time_sec(), .tty = isatty(STDERR_FILENO), .enabled = c->progress};
    pg.last_draw = pg.start;
    lj_status st = LJ_OK;
    int cur = 0;
    read_round(p, &rounds[cur]);
    uint64_t bytes_before = 0;
    for (;;) {
        round_t *r = &rounds[cur], *nx = &rounds[1 - cur];
        publish(p, r);
        if (!r->last) read_round(p, nx); /* overlaps with the workers */
        pthread_mutex_lock(&p->mu);
        while (p->finished < p->nworkers) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&p->done_cv, &p->mu, &ts);
            double now = lj_time_sec();
            if (pg.enabled && now - pg.last_draw >= (pg.tty ? 0.2 : 10.0)) {
                double done = (double)atomic_load(&p->done_bytes);
                double in = (double)bytes_before + (r->text_bytes ? done * (double)r->input_bytes / (double)r->text_bytes : 0);
                double toks = (double)s->tokens + done * (s->text_bytes ? (double)s->tokens / (double)s->text_bytes : 0.25);
                progress_draw(&pg, p->total_input ? in / (double)p->total_input : -1.0, in / 1e6, toks, now, 0);
                pg.last_draw = now;
                pg.drawn = 1;
            }
        }
        pthread_mutex_unlock(&p->mu);
        st = write_round(p, r, w, &buf, &cap, s);
        bytes_before += r->input_bytes;
        if (st != LJ_OK || r->last) break;
        cur = 1 - cur;
    }
    if (pg.enabled && pg.drawn && pg.tty) {
        if (st == LJ_OK) progress_draw(&pg, p->total_input ? 1.0 : -1.0, (double)bytes_before / 1e6, (double)s->tokens,
                                       lj_time_sec(), 1);
        else fprintf(stderr, "\r\033[K");
    }
    round_free(&rounds[0]);
    round_free(&rounds[1]);
    free(buf);
    return st;
}

lj_status lj_prepare_run(const lj_prepare_config *c, lj_prepare_stats *stats) {
    lj_prepare_stats local;
    lj_prepare_stats *s = stats ? stats : &local;
    memset(s, 0, sizeof *s);
    char defbuf[LJ_PATH_MAX];
    const char *tok_path = NULL;
    LJ_TRY(check_config(c, &tok_path, defbuf, sizeof defbuf));

    prep p;
    memset(&p, 0, sizeof p);
    p.cfg = c;
    p.input = -1;
    for (int i = 0; i < c->num_inputs; i++) {
        struct stat st;
        if (strcmp(c->inputs[i], "-") == 0 || stat(c->inputs[i], &st) != 0 || !S_ISREG(st.st_mode) ||
            lj_input_compression_of(c->inputs[i]) != LJ_INPUT_PLAIN) { /* progress in bytes read: no percentage */
            p.total_input = 0;
            break;
        }
        p.total_input += (uint64_t)st.st_size;
    }
    double t0 = lj_time_sec();
    lj_status st = lj_tokenizer_load(tok_path, &p.tok);
    if (st != LJ_OK) return st;
    s->load_seconds = lj_time_sec() - t0;
    s->vocab_size = lj_tokenizer_vocab_size(p.tok);
    s->dtype_code = lj_mmidx_dtype_for_vocab(s->vocab_size);
    int no_eos = c->append_eos && lj_tokenizer_eos_id(p.tok) < 0, no_bos = c->prepend_bos && lj_tokenizer_bos_id(p.tok) < 0;
    lj_tokenizer_free(no_eos || no_bos ? p.tok : NULL);
    if (no_eos)
        return lj_fail(LJ_ERR_ARG, "%s: no EOS token (no eos_token in a tokenizer_config.json beside it, no "
                       "<|end_of_text|> or <|endoftext|> added token); pass --no-append-eos", tok_path);
    if (no_bos)
        return lj_fail(LJ_ERR_ARG, "%s: no BOS token (no bos_token in a tokenizer_config.json beside it, no "
                       "<|begin_of_text|> or <|endoftext|> added token); leave out --prepend-bos", tok_path);
    t0 = lj_time_sec();
    lj_mmidx_writer *w[LJ_PREPARE_MAX_KEYS] = {0};
    lj_mmidx_tokenizer rec;
    st = tokenizer_record(c, tok_path, p.tok, &rec);
    for (int k = 0; k < c->num_keys && st == LJ_OK; k++) {
        char prefix[LJ_PATH_MAX];
        st = lj_prepare_output_prefix(c, k, prefix);
        if (st == LJ_OK) st = open_output(prefix, s->dtype_code, &w[k]);
        if (st != LJ_OK) break;
        if (c->append_eos) lj_mmidx_writer_set_eod(w[k], lj_tokenizer_eos_id(p.tok)); /* the separator */
        lj_mmidx_writer_set_tokenizer(w[k], &rec);
    }
    pthread_t *threads = NULL;
    if (st == LJ_OK) {
        p.nworkers = c->workers > 0 ? c->workers : lj_num_threads();
        s->workers = p.nworkers;
        pthread_mutex_init(&p.mu, NULL);
        pthread_cond_init(&p.work_cv, NULL);
        pthread_cond_init(&p.done_cv, NULL);
        threads = lj_calloc((size_t)p.nworkers, sizeof *threads);
        worker_arg *args = lj_calloc((size_t)p.nworkers, sizeof *args);
        p.arenas = lj_calloc((size_t)p.nworkers, sizeof *p.arenas);
        int started = 0, err = 0;
        for (int i = 0; i < p.nworkers; i++) {
            args[i] = (worker_arg){&p, i};
            if ((err = pthread_create(&threads[i], NULL, worker_main, &args[i])) != 0) break;
            started++;
        }
        p.nworkers = s->workers = started; /* workers wait for the first round: safe to shrink */
        st = started ? run_pipeline(&p, w, s) : lj_fail(LJ_ERR_OOM, "cannot start a worker thread: %s", strerror(err));
        pthread_mutex_lock(&p.mu);
        p.quit = 1;
        pthread_cond_broadcast(&p.work_cv);
        pthread_mutex_unlock(&p.mu);
        for (int i = 0; i < p.nworkers; i++) {
            pthread_join(threads[i], NULL);
            free(p.arenas[i].ids);
        }
        free(threads);
        free(args);
        free(p.arenas);
        pthread_mutex_destroy(&p.mu);
        pthread_cond_destroy(&p.work_cv);
        pthread_cond_destroy(&p.done_cv);
    }
    if (p.input >= 0) reader_close(&p.rd);
    s->empty_skipped = p.empty_skipped;
    s->utf8_replaced = atomic_load(&p.replaced);
    if (st == LJ_OK && s->documents == 0)
        st = lj_fail(LJ_ERR_ARG, "no documents in the input%s (%s%s): %s", c->num_inputs > 1 ? "s" : "",
                     strcmp(c->inputs[0], "-") == 0 ? "<stdin>" : c->inputs[0], c->num_inputs > 1 ? ", ..." : "",
                     p.empty_skipped ? "every document is empty" : "nothing to tokenize");
    for (int k = 0; k < c->num_keys && st == LJ_OK; k++)
        if (s->key_documents[k] == 0)
            st = lj_fail(LJ_ERR_ARG, "--json-keys: no documents for key \"%s\" (its strings are all empty): its "
                                     "dataset would be empty", c->json_keys[k]);
    for (int k = 0; k < c->num_keys; k++) {
        if (st == LJ_OK) st = lj_mmidx_writer_finish(w[k]);
        else if (w[k]) lj_mmidx_writer_abort(w[k]);
    }
    lj_tokenizer_free(p.tok);
    s->seconds = lj_time_sec() - t0;
    return st;
}

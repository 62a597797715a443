/* mm_prepare.c: LLaVA JSON / JSON lines and WebDataset tar shards to the multimodal dataset:
 * the conversation model, Qwen3-VL's chat template with the loss mask, the image pads (see
 * mm_prepare.h for the rules). */
#include <archive.h>
#include <archive_entry.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "data/input.h"
#include "data/mm_dataset.h"
#include "data/mm_prepare.h"
#include "data/tokenizer.h"

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT } role_t;
enum { PENDING = 256 }; /* samples whose images are decoded together */
static const char *const k_role[3] = {"system", "user", "assistant"};

typedef struct {
    role_t role;
    char *text;
} turn;

typedef struct {
    char *name;    /* display name (path, or shard:member) */
    uint8_t *data; /* encoded bytes */
    size_t size;
    /* set by check_images (in parallel): the decoded size and grid, or why it failed */
    int32_t height, width;
    lj_grid_thw grid;
    lj_status status;
    char *err;
} image_src;

typedef struct {
    turn *turns;
    int nturns;
    image_src *images;
    int nimages;
} sample_t;

typedef struct {
    int32_t im_start, im_end, vstart, vend, pad, eot;
} special_ids;

typedef struct {
    const lj_mm_prepare_config *cfg;
    lj_tokenizer *tok;
    special_ids sp;
    lj_mm_writer *w;
    lj_mm_prepare_stats *st;
    /* one sample's output, reused */
    int32_t *ids;
    uint8_t *mask;
    int64_t n, cap;
    lj_mm_image_rec *recs;
    int cap_recs;
    double last_report;
    /* samples read, waiting for their images to be checked (on all cores) and rendered */
    sample_t pend[PENDING];
    char *pend_where[PENDING];
    int npend;
} mm_prep;

void lj_mm_prepare_config_init(lj_mm_prepare_config *c) {
    memset(c, 0, sizeof *c);
    lj_vision_preproc_qwen3vl(&c->preproc);
    c->progress = 1;
}

static int ends_with(const char *s, size_t n, const char *suffix) {
    const size_t m = strlen(suffix);
    return n >= m && strncasecmp(s + n - m, suffix, m) == 0;
}

int lj_mm_prepare_is_shard(const char *path) {
    const size_t n = strlen(path);
    return ends_with(path, n, ".tar") || ends_with(path, n, ".tar.gz") || ends_with(path, n, ".tgz") ||
           ends_with(path, n, ".tar.zst") || ends_with(path, n, ".tar.xz");
}

static void sample_free(sample_t *s) {
    for (int i = 0; i < s->nturns; i++) free(s->turns[i].text);
    for (int i = 0; i < s->nimages; i++) free(s->images[i].name), free(s->images[i].data), free(s->images[i].err);
    free(s->turns), free(s->images);
    memset(s, 0, sizeof *s);
}

/* ---- rendering ------------------------------------------------------------------------------- */

static void emit(mm_prep *p, int32_t id, uint8_t m) {
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 4096;
        p->ids = lj_realloc(p->ids, sizeof *p->ids * (size_t)p->cap);
        p->mask = lj_realloc(p->mask, (size_t)p->cap);
    }
    p->ids[p->n] = id;
    p->mask[p->n++] = m;
}

/* Tokenizes text[0..len) as one piece; the first `masked` bytes (a role header) get mask 0, the
 * rest `m`. The header's tokens are found by tokenizing it alone: every header ends in "\n",
 * which no byte-level BPE pre-tokenizer of the Qwen family merges with a following letter. */
static lj_status emit_text(mm_prep *p, const char *where, const char *text, size_t len, size_t masked, uint8_t m) {
    if (len == 0) return LJ_OK;
    int32_t *ids = NULL;
    int64_t n = 0, cap = 0;
    lj_status st = lj_tokenizer_encode_append(p->tok, text, len, 0, &ids, &n, &cap);
    if (st != LJ_OK) {
        free(ids);
        lj_error_prefix("%s", where);
        return st;
    }
    int64_t head = 0;
    if (masked > 0 && m) {
        int32_t *h = NULL;
        int64_t hn = 0, hcap = 0;
        st = lj_tokenizer_encode_append(p->tok, text, masked, 0, &h, &hn, &hcap);
        if (st == LJ_OK && (hn > n || memcmp(h, ids, sizeof *h * (size_t)hn) != 0)) {
            /* the header merged with the content: tokenize the two apart */
            n = 0;
            st = lj_tokenizer_encode_append(p->tok, text, masked, 0, &ids, &n, &cap);
            hn = n;
            if (st == LJ_OK) st = lj_tokenizer_encode_append(p->tok, text + masked, len - masked, 0, &ids, &n, &cap);
        }
        free(h);
        head = hn;
        if (st != LJ_OK) {
            free(ids);
            lj_error_prefix("%s", where);
            return st;
        }
    }
    for (int64_t i = 0; i < n; i++) emit(p, ids[i], (uint8_t)(i < head ? 0 : m));
    free(ids);
    return LJ_OK;
}

static int count_placeholders(const char *s) {
    int n = 0;
    for (const char *q = s; (q = strstr(q, "<image>")); q += 7) n++;
    return n;
}

/* Appends an image's tokens (its grid from check_images). */
static lj_status emit_image(mm_prep *p, const char *where, const image_src *im, int k) {
    if (im->status != LJ_OK) return lj_fail(im->status, "%s: image %d: %s", where, k, im->err ? im->err : "");
    const lj_grid_thw g = im->grid;
    if (k >= p->cap_recs) {
        p->cap_recs = 2 * k + 8;
        p->recs = lj_realloc(p->recs, sizeof *p->recs * (size_t)p->cap_recs);
    }
    lj_mm_image_rec *r = &p->recs[k];
    memset(r, 0, sizeof *r);
    r->byte_size = (int64_t)im->size;
    r->token_pos = p->n;
    r->height = im->height, r->width = im->width;
    r->grid_t = g.t, r->grid_h = g.h, r->grid_w = g.w;
    const int64_t pads = lj_grid_tokens(g, p->cfg->preproc.merge_size);
    emit(p, p->sp.vstart, 0);
    for (int64_t i = 0; i < pads; i++) emit(p, p->sp.pad, 0);
    emit(p, p->sp.vend, 0);
    p->st->image_tokens += pads + 2;
    return LJ_OK;
}

/* Decodes one image (the check that it is usable, and its size) and computes its grid. */
static void check_image(const lj_mm_prepare_config *c, image_src *im) {
    lj_image img;
    im->status = lj_image_decode(im->data, im->size, im->name, c->max_image_pixels, &img);
    if (im->status == LJ_OK) {
        im->height = img.height, im->width = img.width;
        im->status = lj_vision_grid(&c->preproc, img.height, img.width, im->name, &im->grid);
        lj_image_free(&img);
    }
    if (im->status != LJ_OK) im->err = lj_strdup(lj_error_message());
}

static lj_status render(mm_prep *p, const char *where, sample_t *s) {
    p->n = 0;
    int placeholders = 0, first_user = -1;
    for (int i = 0; i < s->nturns; i++) {
        placeholders += count_placeholders(s->turns[i].text);
        if (first_user < 0 && s->turns[i].role == ROLE_USER) first_user = i;
    }
    if (s->nturns == 0) return lj_fail(LJ_ERR_FORMAT, "%s: no turns", where);
    if (placeholders == 0 && s->nimages > 0) {
        if (first_user < 0) return lj_fail(LJ_ERR_FORMAT, "%s: %d images but no user turn to put them in", where, s->nimages);
        turn *t = &s->turns[first_user];
        const size_t n = strlen(t->text);
        char *nt = lj_malloc(n + 8 * (size_t)s->nimages + 1), *q = nt;
        for (int i = 0; i < s->nimages; i++) q += sprintf(q, "<image>\n");
        memcpy(q, t->text, n + 1);
        free(t->text);
        t->text = nt;
        placeholders = s->nimages;
    }
    if (placeholders != s->nimages)
        return lj_fail(LJ_ERR_FORMAT, "%s: %d <image> placeholders for %d images", where, placeholders, s->nimages);
    int trained_turns = 0, k = 0;
    for (int i = 0; i < s->nturns; i++) {
        const turn *t = &s->turns[i];
        const uint8_t m = t->role == ROLE_ASSISTANT;
        trained_turns += m;
        emit(p, p->sp.im_start, 0);
        /* the piece before the first image carries the role header "ROLE\n" */
        const char *role = k_role[t->role];
        const char *text = t->text, *next;
        size_t hlen = strlen(role) + 1;
        char *piece = lj_malloc(hlen + strlen(text) + 1);
        sprintf(piece, "%s\n", role);
        size_t plen = hlen;
        while (1) {
            next = strstr(text, "<image>");
            const size_t seg = next ? (size_t)(next - text) : strlen(text);
            memcpy(piece + plen, text, seg);
            plen += seg;
            lj_status st = emit_text(p, where, piece, plen, hlen, m);
            if (st == LJ_OK && next) st = emit_image(p, where, &s->images[k], k);
            if (st != LJ_OK) {
                free(piece);
                return st;
            }
            if (!next) break;
            k++;
            text = next + 7;
            plen = hlen = 0;
        }
        free(piece);
        emit(p, p->sp.im_end, m);
        LJ_TRY(emit_text(p, where, "\n", 1, 0, 0));
    }
    if (trained_turns == 0) return lj_fail(LJ_ERR_FORMAT, "%s: no assistant turn (nothing to train on)", where);
    const void **bytes = lj_malloc(sizeof(void *) * (size_t)(s->nimages + 1));
    for (int i = 0; i < s->nimages; i++) bytes[i] = s->images[i].data;
    lj_status st = lj_mm_writer_add(p->w, p->ids, p->mask, p->n, p->recs, bytes, s->nimages);
    free(bytes);
    if (st != LJ_OK) return st;
    p->st->samples++;
    p->st->images += s->nimages;
    p->st->tokens += p->n;
    for (int64_t i = 0; i < p->n; i++) p->st->target_tokens += p->mask[i];
    for (int i = 0; i < s->nimages; i++) p->st->image_bytes += (int64_t)s->images[i].size;
    if (p->cfg->progress && lj_time_sec() - p->last_report > 10) {
        p->last_report = lj_time_sec();
        fprintf(stderr, "prepare: %lld samples, %lld images, %lld tokens\n", (long long)p->st->samples,
                (long long)p->st->images, (long long)p->st->tokens);
    }
    return LJ_OK;
}

/* Checks the images of the pending samples on all cores, then renders the samples in order. */
static lj_status flush_pending(mm_prep *p) {
    image_src **all = NULL;
    int n = 0;
    for (int i = 0; i < p->npend; i++) n += p->pend[i].nimages;
    all = lj_malloc(sizeof *all * (size_t)(n + 1));
    n = 0;
    for (int i = 0; i < p->npend; i++)
        for (int k = 0; k < p->pend[i].nimages; k++) all[n++] = &p->pend[i].images[k];
    const double t0 = lj_time_sec();
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) check_image(p->cfg, all[i]);
    p->st->image_seconds += lj_time_sec() - t0;
    free(all);
    lj_status st = LJ_OK;
    for (int i = 0; i < p->npend; i++) {
        if (st == LJ_OK) st = render(p, p->pend_where[i], &p->pend[i]);
        sample_free(&p->pend[i]);
        free(p->pend_where[i]);
    }
    p->npend = 0;
    return st;
}

/* Takes the sample (its turns and images are moved out of *s) to be rendered in order. */
static lj_status queue(mm_prep *p, const char *where, sample_t *s) {
    p->pend[p->npend] = *s;
    memset(s, 0, sizeof *s);
    p->pend_where[p->npend++] = lj_strdup(where);
    return p->npend == PENDING ? flush_pending(p) : LJ_OK;
}

/* ---- JSON samples -------------------------------------------------------------------------------- */

static lj_status parse_role(const char *where, int i, const char *r, role_t *out) {
    if (!strcmp(r, "human") || !strcmp(r, "user")) *out = ROLE_USER;
    else if (!strcmp(r, "gpt") || !strcmp(r, "assistant") || !strcmp(r, "model")) *out = ROLE_ASSISTANT;
    else if (!strcmp(r, "system")) *out = ROLE_SYSTEM;
    else return lj_fail(LJ_ERR_FORMAT, "%s: turn %d: role '%s' is not one of human, gpt, user, assistant, system", where, i, r);
    return LJ_OK;
}

/* Reads the image file `rel` (relative to root) named by field `field` of the sample. */
static lj_status read_image_file(const char *where, const char *field, const char *root, const char *rel,
                                 image_src *im) {
    char path[LJ_PATH_MAX];
    if (!rel[0])
        return lj_fail(LJ_ERR_FORMAT, "%s: %s: the path is empty; expected an image file (relative to --image-root)",
                       where, field);
    if (rel[0] == '/' || !root) snprintf(path, sizeof path, "%s", rel);
    else if (snprintf(path, sizeof path, "%s/%s", root, rel) >= (int)sizeof path)
        return lj_fail(LJ_ERR_ARG, "%s: %s: the image path %s/%s is too long", where, field, root, rel);
    if (lj_image_is_video_name(path))
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %s: %s is a video (by its extension): video input is not supported, "
                       "only images", where, field, path);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return lj_fail(LJ_ERR_FORMAT, "%s: %s: %s is a directory; expected an image file", where, field, path);
    char *data;
    size_t size;
    lj_status st = lj_file_read_all(path, &data, &size);
    if (st != LJ_OK) {
        lj_error_prefix("%s: %s", where, field);
        return st;
    }
    if (size == 0) {
        free(data);
        return lj_fail(LJ_ERR_FORMAT, "%s: %s: %s is empty (0 bytes); expected an image file", where, field, path);
    }
    im->name = lj_strdup(path);
    im->data = (uint8_t *)data;
    im->size = size;
    return LJ_OK;
}

/* A text field of a sample, copied to *out: its UTF-8 checked (or repaired with --utf8-errors
 * replace), and no video placeholder. */
static lj_status take_text(mm_prep *p, const char *where, const char *field, const char *text, char **out) {
    const size_t len = strlen(text), bad = lj_utf8_check(text, len);
    if (bad != len && !p->cfg->utf8_replace)
        return lj_fail(LJ_ERR_FORMAT, "%s: %s: invalid UTF-8 at byte %zu of the string (byte 0x%02x); "
                       "--utf8-errors replace turns ill-formed bytes into U+FFFD", where, field, bad,
                       (unsigned)(unsigned char)text[bad]);
    if (strstr(text, "<video>"))
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %s: a <video> placeholder: video input is not supported (only images, "
                       "<image>); remove the sample", where, field);
    if (bad == len) {
        *out = lj_strdup(text);
    } else {
        size_t n;
        p->st->utf8_replaced += (int64_t)lj_utf8_repair(text, len, out, &n);
    }
    return LJ_OK;
}

/* A JSON sample (LLaVA or ShareGPT): its turns, and its "image"/"images" files read from root;
 * root NULL: a shard's sample, whose images are the tar's members (added by the caller). */
static lj_status json_sample(mm_prep *p, const char *where, const cJSON *o, const char *root, sample_t *s) {
    memset(s, 0, sizeof *s);
    if (!cJSON_IsObject(o)) return lj_fail(LJ_ERR_FORMAT, "%s: not a JSON object", where);
    static const char *const video_keys[2] = {"video", "videos"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItem(o, video_keys[i]);
        if (v && !cJSON_IsNull(v))
            return lj_fail(LJ_ERR_UNSUPPORTED, "%s: \"%s\": video input is not supported (only images, \"image\" or "
                           "\"images\"); remove the sample", where, video_keys[i]);
    }
    const cJSON *conv = cJSON_GetObjectItem(o, "conversations");
    const char *rk = "from", *vk = "value", *ck = "conversations";
    if (!conv) conv = cJSON_GetObjectItem(o, "messages"), rk = "role", vk = "content", ck = "messages";
    if (!cJSON_IsArray(conv))
        return lj_fail(LJ_ERR_FORMAT, "%s: no \"conversations\" (or \"messages\") array", where);
    s->nturns = cJSON_GetArraySize(conv);
    s->turns = lj_calloc((size_t)s->nturns + 1, sizeof *s->turns);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, conv) {
        const cJSON *r = cJSON_GetObjectItem(t, rk), *v = cJSON_GetObjectItem(t, vk);
        if (!cJSON_IsString(r) || !cJSON_IsString(v))
            return lj_fail(LJ_ERR_FORMAT, "%s: turn %d: needs string \"%s\" and \"%s\"", where, i, rk, vk);
        LJ_TRY(parse_role(where, i, r->valuestring, &s->turns[i].role));
        char field[128];
        snprintf(field, sizeof field, "%s[%d].%s", ck, i, vk);
        LJ_TRY(take_text(p, where, field, v->valuestring, &s->turns[i].text));
        i++;
    }
    if (!root) return LJ_OK; /* a shard's sample: its images come from the tar */
    const char *ik = "image";
    const cJSON *img = cJSON_GetObjectItem(o, ik);
    if (!img) img = cJSON_GetObjectItem(o, ik = "images");
    if (!img || cJSON_IsNull(img)) return LJ_OK;
    const int n = cJSON_IsArray(img) ? cJSON_GetArraySize(img) : 1;
    s->images = lj_calloc((size_t)n + 1, sizeof *s->images);
    for (int k = 0; k < n; k++) {
        const cJSON *e = cJSON_IsArray(img) ? cJSON_GetArrayItem(img, k) : img;
        char field[64];
        if (cJSON_IsArray(img)) snprintf(field, sizeof field, "%s[%d]", ik, k);
        else snprintf(field, sizeof field, "%s", ik);
        if (!cJSON_IsString(e)) return lj_fail(LJ_ERR_FORMAT, "%s: %s is not a string path", where, field);
        LJ_TRY(read_image_file(where, field, root, e->valuestring, &s->images[k]));
        s->nimages++;
    }
    return LJ_OK;
}

static lj_status do_json_sample(mm_prep *p, const char *where, const cJSON *o, const char *root) {
    sample_t s;
    lj_status st = json_sample(p, where, o, root, &s);
    if (st == LJ_OK) st = queue(p, where, &s);
    sample_free(&s);
    return st;
}

static lj_status read_json_input(mm_prep *p, const char *path) {
    char root_buf[LJ_PATH_MAX];
    const char *root = p->cfg->image_root;
    if (!root) {
        snprintf(root_buf, sizeof root_buf, "%s", path);
        char *slash = strrchr(root_buf, '/');
        if (slash) *slash = '\0';
        else strcpy(root_buf, ".");
        root = root_buf;
    }
    char err[256] = "";
    FILE *f = lj_input_open(path, err, sizeof err);
    if (!f) return lj_fail(LJ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = lj_malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n < 2) buf = lj_realloc(buf, cap *= 2);
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return lj_fail(LJ_ERR_IO, "%s: read failed%s%s", path, err[0] ? ": " : "", err);
    }
    buf[n] = '\0';
    size_t i = 0;
    while (i < n && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t')) i++;
    lj_status st = LJ_OK;
    const size_t base = lj_input_base_len(path);
    const int lines = ends_with(path, base, ".jsonl") || ends_with(path, base, ".ndjson");
    cJSON *whole = !lines && i < n && buf[i] == '{' ? cJSON_ParseWithLength(buf, n) : NULL;
    if (whole) { /* a .json holding one sample */
        char where[LJ_PATH_MAX + 16];
        snprintf(where, sizeof where, "%s: sample 0", path);
        st = do_json_sample(p, where, whole, root);
        cJSON_Delete(whole);
    } else if (!lines && i < n && buf[i] == '[') {
        cJSON *root_json = cJSON_ParseWithLength(buf, n);
        if (!root_json) st = lj_fail(LJ_ERR_FORMAT, "%s: not valid JSON (near byte %lld)", path,
                                     (long long)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - buf : 0));
        int k = 0;
        const cJSON *o;
        if (st == LJ_OK)
            cJSON_ArrayForEach(o, root_json) {
                char where[LJ_PATH_MAX + 64];
                const cJSON *id = cJSON_GetObjectItem(o, "id");
                if (cJSON_IsString(id)) snprintf(where, sizeof where, "%s: sample %d (id %.40s)", path, k, id->valuestring);
                else snprintf(where, sizeof where, "%s: sample %d", path, k);
                if ((st = do_json_sample(p, where, o, root)) != LJ_OK) break;
                k++;
            }
        cJSON_Delete(root_json);
    } else { /* JSON lines (a lone object is one line) */
        int64_t line = 1;
        for (char *q = buf; q < buf + n && st == LJ_OK; line++) {
            char *e = memchr(q, '\n', (size_t)(buf + n - q));
            if (!e) e = buf + n;
            *e = '\0';
            char *t = q;
            while (*t == ' ' || *t == '\t' || *t == '\r') t++;
            if (*t) {
                char where[LJ_PATH_MAX + 32];
                snprintf(where, sizeof where, "%s:%lld", path, (long long)line);
                cJSON *o = cJSON_Parse(t);
                if (!o) st = lj_fail(LJ_ERR_FORMAT, "%s: not a JSON object", where);
                else st = do_json_sample(p, where, o, root);
                cJSON_Delete(o);
            }
            q = e + 1;
        }
    }
    free(buf);
    return st;
}

/* ---- WebDataset shards ------------------------------------------------------------------------------ */

static int is_image_ext(const char *ext) {
    return !strcasecmp(ext, "jpg") || !strcasecmp(ext, "jpeg") || !strcasecmp(ext, "png") || !strcasecmp(ext, "webp");
}

typedef struct {
    char key[1024];
    image_src *images;
    int nimages, cap;
    char *json, *txt;
} wds_group;

static void group_reset(wds_group *g) {
    for (int i = 0; i < g->nimages; i++) free(g->images[i].name), free(g->images[i].data), free(g->images[i].err);
    free(g->images), free(g->json), free(g->txt);
    memset(g, 0, sizeof *g);
}

static lj_status flush_group(mm_prep *p, const char *shard, wds_group *g) {
    if (!g->key[0]) return LJ_OK;
    char where[LJ_PATH_MAX + 1100];
    snprintf(where, sizeof where, "%s: sample %s", shard, g->key);
    sample_t s;
    memset(&s, 0, sizeof s);
    lj_status st = LJ_OK;
    const char *caption = g->txt;
    cJSON *o = NULL;
    if (g->json) {
        o = cJSON_Parse(g->json);
        if (!o) st = lj_fail(LJ_ERR_FORMAT, "%s: the .json member is not valid JSON", where);
        else if (cJSON_GetObjectItem(o, "conversations") || cJSON_GetObjectItem(o, "messages"))
            st = json_sample(p, where, o, NULL, &s);
        else {
            const char *keys[3] = {"caption", "txt", "text"};
            for (int i = 0; i < 3 && !caption; i++) {
                const cJSON *c = cJSON_GetObjectItem(o, keys[i]);
                if (cJSON_IsString(c)) caption = c->valuestring;
            }
        }
    }
    if (st == LJ_OK && !s.turns) {
        if (!caption) st = lj_fail(LJ_ERR_FORMAT, "%s: no .json conversation and no .txt caption", where);
        else {
            s.nturns = 2;
            s.turns = lj_calloc(2, sizeof *s.turns);
            s.turns[0] = (turn){ROLE_USER, lj_strdup("")};
            s.turns[1] = (turn){ROLE_ASSISTANT, NULL};
            st = take_text(p, where, g->txt == caption ? "the caption (.txt)" : "the .json caption", caption,
                           &s.turns[1].text);
        }
    }
    if (st == LJ_OK) {
        s.images = g->images, s.nimages = g->nimages;
        g->images = NULL, g->nimages = 0;
        st = queue(p, where, &s);
    }
    cJSON_Delete(o);
    sample_free(&s);
    group_reset(g);
    return st;
}

static lj_status read_shard(mm_prep *p, const char *path) {
    struct archive *a = archive_read_new();
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    if (archive_read_open_filename(a, path, 1 << 20) != ARCHIVE_OK) {
        lj_status st = lj_fail(LJ_ERR_IO, "%s: cannot open as a tar shard: %s", path, archive_error_string(a));
        archive_read_free(a);
        return st;
    }
    wds_group g;
    memset(&g, 0, sizeof g);
    lj_status st = LJ_OK;
    struct archive_entry *e;
    int r;
    while (st == LJ_OK && (r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
        if (archive_entry_filetype(e) != AE_IFREG) continue;
        const char *name = archive_entry_pathname(e);
        const char *base = strrchr(name, '/');
        base = base ? base + 1 : name;
        const char *dot = strchr(base, '.');
        if (base[0] == '.' || !dot) continue; /* no key.ext: not a sample member */
        const size_t keylen = (size_t)(dot - name);
        if (keylen >= sizeof g.key) {
            st = lj_fail(LJ_ERR_FORMAT, "%s: member %s: the key is too long", path, name);
            break;
        }
        if (strncmp(g.key, name, keylen) != 0 || g.key[keylen] != '\0') {
            if ((st = flush_group(p, path, &g)) != LJ_OK) break;
            memcpy(g.key, name, keylen);
            g.key[keylen] = '\0';
        }
        const int64_t size = archive_entry_size(e);
        if (size < 0 || size > ((int64_t)1 << 31)) {
            st = lj_fail(LJ_ERR_FORMAT, "%s: member %s: size %lld is not supported", path, name, (long long)size);
            break;
        }
        uint8_t *data = lj_malloc((size_t)size + 1);
        const la_ssize_t got = size ? archive_read_data(a, data, (size_t)size) : 0;
        if (got != size) {
            free(data);
            st = lj_fail(LJ_ERR_FORMAT, "%s: member %s: truncated (%s)", path, name,
                         got < 0 ? archive_error_string(a) : "short read");
            break;
        }
        data[size] = 0;
        const char *ext = strrchr(base, '.') + 1; /* the last extension: k.0.jpg is an image */
        char shown[LJ_PATH_MAX + 1100];
        snprintf(shown, sizeof shown, "%s:%s", path, name);
        if (is_image_ext(ext)) {
            if (g.nimages == g.cap) g.images = lj_realloc(g.images, sizeof *g.images * (size_t)(g.cap = g.cap * 2 + 4));
            g.images[g.nimages++] = (image_src){.name = lj_strdup(shown), .data = data, .size = (size_t)size};
        } else if (!strcasecmp(ext, "json") && !g.json) {
            g.json = (char *)data;
        } else if ((!strcasecmp(ext, "txt") || !strcasecmp(ext, "caption")) && !g.txt) {
            g.txt = (char *)data;
        } else if (lj_image_is_video_name(base)) {
            free(data);
            st = lj_fail(LJ_ERR_UNSUPPORTED, "%s: a video member; only images are supported", shown);
        } else {
            free(data); /* other members (.cls, metadata) are not used */
        }
    }
    if (st == LJ_OK && r != ARCHIVE_EOF)
        st = lj_fail(LJ_ERR_FORMAT, "%s: a broken tar shard: %s", path, archive_error_string(a));
    if (st == LJ_OK) st = flush_group(p, path, &g);
    group_reset(&g);
    archive_read_free(a);
    return st;
}

/* ---- the run ---------------------------------------------------------------------------------------- */

static lj_status find_ids(lj_tokenizer *tok, const char *path, special_ids *sp) {
    const char *names[6] = {"<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                            "<|endoftext|>"};
    int32_t *dst[6] = {&sp->im_start, &sp->im_end, &sp->vstart, &sp->vend, &sp->pad, &sp->eot};
    for (int i = 0; i < 6; i++) {
        *dst[i] = lj_tokenizer_token_id(tok, names[i], strlen(names[i]));
        if (*dst[i] < 0)
            return lj_fail(LJ_ERR_ARG, "%s: no %s token: a vision-language dataset needs a Qwen2/Qwen3 tokenizer", path,
                           names[i]);
    }
    return LJ_OK;
}

lj_status lj_mm_prepare_run(const lj_mm_prepare_config *c, lj_mm_prepare_stats *stats) {
    lj_mm_prepare_stats local;
    lj_mm_prepare_stats *s = stats ? stats : &local;
    memset(s, 0, sizeof *s);
    if (c->num_inputs <= 0) return lj_fail(LJ_ERR_ARG, "no inputs");
    if (!c->output_prefix) return lj_fail(LJ_ERR_ARG, "no --output-prefix");
    char defbuf[LJ_PATH_MAX];
    const char *tok_path = c->tokenizer_path ? c->tokenizer_path : lj_tokenizer_default_path(defbuf, sizeof defbuf);
    const double t0 = lj_time_sec();
    mm_prep p;
    memset(&p, 0, sizeof p);
    p.cfg = c;
    p.st = s;
    p.last_report = t0;
    LJ_TRY(lj_tokenizer_load(tok_path, &p.tok));
    lj_status st = find_ids(p.tok, tok_path, &p.sp);
    lj_mm_meta meta = {p.sp.pad, p.sp.vstart, p.sp.vend, p.sp.eot, c->preproc.patch_size, c->preproc.merge_size,
                       c->preproc.temporal_patch_size, c->preproc.min_pixels, c->preproc.max_pixels};
    if (st == LJ_OK) st = lj_mm_writer_open(&p.w, c->output_prefix, &meta);
    for (int i = 0; i < c->num_inputs && st == LJ_OK; i++)
        st = lj_mm_prepare_is_shard(c->inputs[i]) ? read_shard(&p, c->inputs[i]) : read_json_input(&p, c->inputs[i]);
    if (st == LJ_OK) st = flush_pending(&p);
    for (int i = 0; i < p.npend; i++) sample_free(&p.pend[i]), free(p.pend_where[i]); /* after an error */
    if (st == LJ_OK && s->samples == 0) st = lj_fail(LJ_ERR_ARG, "%s: no samples in the input", c->inputs[0]);
    if (st == LJ_OK) st = lj_mm_writer_finish(p.w);
    else if (p.w) lj_mm_writer_abort(p.w);
    lj_tokenizer_free(p.tok);
    free(p.ids), free(p.mask), free(p.recs);
    s->seconds = lj_time_sec() - t0;
    return st;
}

/* mm_dataset.c: the multimodal dataset's writer and mmap reader (format: data/mm_dataset.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/mm_dataset.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "mm_dataset.c writes the host's integers as little-endian"
#endif

_Static_assert(sizeof(lj_mm_image_rec) == 48, "the image record is 48 bytes on disk");

/* The data files in rename order; the index is written last. */
static const char *const k_suffix[4] = {".mmtok", ".mmmask", ".mmimg", ".mmidx"};
enum { F_TOK, F_MASK, F_IMG, F_IDX };

struct lj_mm_writer {
    char *path[4], *tmp[4];
    FILE *f[4];
    lj_mm_meta meta;
    int64_t *tok_start, *img_start; /* [samples + 1] */
    int64_t samples, cap;
    lj_mm_image_rec *images;
    int64_t num_images, cap_images;
    int64_t tokens, image_bytes;
};

static char *joined(const char *a, const char *b, const char *c) {
    const size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *p = lj_malloc(n);
    snprintf(p, n, "%s%s%s", a, b, c);
    return p;
}

static void writer_free(lj_mm_writer *w) {
    for (int i = 0; i < 4; i++) {
        if (w->f[i]) fclose(w->f[i]);
        if (w->tmp[i]) unlink(w->tmp[i]);
        free(w->path[i]), free(w->tmp[i]);
    }
    free(w->tok_start), free(w->img_start), free(w->images);
    free(w);
}

void lj_mm_writer_abort(lj_mm_writer *w) {
    if (w) writer_free(w);
}

lj_status lj_mm_writer_open(lj_mm_writer **out, const char *prefix, const lj_mm_meta *meta) {
    lj_mm_writer *w = lj_calloc(1, sizeof *w);
    w->meta = *meta;
    char pid[32];
    snprintf(pid, sizeof pid, ".tmp.%d", (int)getpid());
    char *dir = lj_strdup(prefix), *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        lj_status st = lj_mkdir_p(dir);
        if (st != LJ_OK) {
            free(dir), free(w);
            return st;
        }
    }
    free(dir);
    for (int i = 0; i < 4; i++) {
        w->path[i] = joined(prefix, k_suffix[i], "");
        w->tmp[i] = joined(prefix, k_suffix[i], pid);
        w->f[i] = fopen(w->tmp[i], "wb");
        if (!w->f[i]) {
            lj_status st = lj_fail(LJ_ERR_IO, "%s: cannot create: %s", w->tmp[i], strerror(errno));
            free(w->tmp[i]);
            w->tmp[i] = NULL;
            writer_free(w);
            return st;
        }
    }
    w->cap = 1024;
    w->tok_start = lj_malloc(sizeof(int64_t) * (size_t)w->cap);
    w->img_start = lj_malloc(sizeof(int64_t) * (size_t)w->cap);
    w->tok_start[0] = w->img_start[0] = 0;
    *out = w;
    return LJ_OK;
}

static lj_status put(lj_mm_writer *w, int f, const void *data, size_t n) {
    if (n && fwrite(data, 1, n, w->f[f]) != n)
        return lj_fail(LJ_ERR_IO, "%s: write failed: %s", w->tmp[f], strerror(errno));
    return LJ_OK;
}

lj_status lj_mm_writer_add(lj_mm_writer *w, const int32_t *tokens, const uint8_t *mask, int64_t n,
                           const lj_mm_image_rec *images, const void *const *bytes, int nimg) {
    LJ_TRY(put(w, F_TOK, tokens, sizeof(int32_t) * (size_t)n));
    LJ_TRY(put(w, F_MASK, mask, (size_t)n));
    if (w->num_images + nimg > w->cap_images) {
        w->cap_images = (w->num_images + nimg) * 2 + 64;
        w->images = lj_realloc(w->images, sizeof *w->images * (size_t)w->cap_images);
    }
    for (int i = 0; i < nimg; i++) {
        lj_mm_image_rec r = images[i];
        r.byte_offset = w->image_bytes;
        r.reserved = 0;
        LJ_TRY(put(w, F_IMG, bytes[i], (size_t)r.byte_size));
        w->image_bytes += r.byte_size;
        w->images[w->num_images++] = r;
    }
    if (w->samples + 2 > w->cap) {
        w->cap *= 2;
        w->tok_start = lj_realloc(w->tok_start, sizeof(int64_t) * (size_t)w->cap);
        w->img_start = lj_realloc(w->img_start, sizeof(int64_t) * (size_t)w->cap);
    }
    w->tokens += n;
    w->samples++;
    w->tok_start[w->samples] = w->tokens;
    w->img_start[w->samples] = w->num_images;
    return LJ_OK;
}

static void header_bytes(const lj_mm_writer *w, uint8_t h[LJ_MM_HEADER_BYTES]) {
    memset(h, 0, LJ_MM_HEADER_BYTES);
    memcpy(h, LJ_MM_MAGIC, 8);
    const uint32_t u[2] = {LJ_MM_VERSION, LJ_MM_HEADER_BYTES};
    memcpy(h + 8, u, 8);
    const int64_t c[4] = {w->samples, w->num_images, w->tokens, w->image_bytes};
    memcpy(h + 16, c, 32);
    const int32_t ids[8] = {w->meta.image_pad_id, w->meta.vision_start_id, w->meta.vision_end_id, w->meta.pad_id,
                            w->meta.patch_size,   w->meta.merge_size,      w->meta.temporal_patch_size, 0};
    memcpy(h + 48, ids, 32);
    const int64_t px[2] = {w->meta.min_pixels, w->meta.max_pixels};
    memcpy(h + 80, px, 16);
}

lj_status lj_mm_writer_finish(lj_mm_writer *w) {
    uint8_t h[LJ_MM_HEADER_BYTES];
    header_bytes(w, h);
    lj_status st = put(w, F_IDX, h, sizeof h);
    if (st == LJ_OK) st = put(w, F_IDX, w->tok_start, sizeof(int64_t) * (size_t)(w->samples + 1));
    if (st == LJ_OK) st = put(w, F_IDX, w->img_start, sizeof(int64_t) * (size_t)(w->samples + 1));
    if (st == LJ_OK) st = put(w, F_IDX, w->images, sizeof *w->images * (size_t)w->num_images);
    for (int i = 0; i < 4 && st == LJ_OK; i++) {
        if (fflush(w->f[i]) != 0 || fsync(fileno(w->f[i])) != 0 || fclose(w->f[i]) != 0)
            st = lj_fail(LJ_ERR_IO, "%s: cannot write: %s", w->tmp[i], strerror(errno));
        w->f[i] = NULL;
    }
    for (int i = 0; i < 4 && st == LJ_OK; i++) {
        if (rename(w->tmp[i], w->path[i]) != 0)
            st = lj_fail(LJ_ERR_IO, "renaming %s to %s: %s", w->tmp[i], w->path[i], strerror(errno));
        else free(w->tmp[i]), w->tmp[i] = NULL;
    }
    writer_free(w);
    return st;
}

/* ---- reader ------------------------------------------------------------------------------------ */

void lj_mm_dataset_close(lj_mm_dataset *ds) {
    for (int i = 0; i < 4; i++)
        if (ds->map[i] && ds->map_size[i]) munmap(ds->map[i], ds->map_size[i]);
    free(ds->prefix);
    memset(ds, 0, sizeof *ds);
}

static lj_status map_file(lj_mm_dataset *ds, int i, const char *path) {
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return lj_fail(LJ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return lj_fail(LJ_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    ds->map_size[i] = (size_t)st.st_size;
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            ds->map_size[i] = 0;
            return lj_fail(LJ_ERR_IO, "%s: cannot mmap: %s", path, strerror(errno));
        }
        ds->map[i] = p;
    }
    close(fd);
    return LJ_OK;
}

static lj_status open_checked(lj_mm_dataset *ds, const char *prefix) {
    char path[4][4096];
    for (int i = 0; i < 4; i++) snprintf(path[i], sizeof path[i], "%s%s", prefix, k_suffix[i]);
    LJ_TRY(map_file(ds, F_IDX, path[F_IDX]));
    const uint8_t *h = ds->map[F_IDX];
    const char *ip = path[F_IDX];
    if (ds->map_size[F_IDX] < LJ_MM_HEADER_BYTES || memcmp(h, LJ_MM_MAGIC, 8) != 0)
        return lj_fail(LJ_ERR_FORMAT, "%s: not an ljperf multimodal index (magic %s expected)", ip, LJ_MM_MAGIC);
    uint32_t u[2];
    memcpy(u, h + 8, 8);
    if (u[0] != LJ_MM_VERSION || u[1] != LJ_MM_HEADER_BYTES)
        return lj_fail(LJ_ERR_FORMAT, "%s: version %u with a %u-byte header; this build reads version %d (%d bytes)", ip,
                       u[0], u[1], LJ_MM_VERSION, LJ_MM_HEADER_BYTES);
    int64_t c[4];
    memcpy(c, h + 16, 32);
    ds->num_samples = c[0], ds->num_images = c[1], ds->num_tokens = c[2], ds->image_bytes = c[3];
    int32_t ids[8];
    memcpy(ids, h + 48, 32);
    ds->meta.image_pad_id = ids[0], ds->meta.vision_start_id = ids[1], ds->meta.vision_end_id = ids[2];
    ds->meta.pad_id = ids[3], ds->meta.patch_size = ids[4], ds->meta.merge_size = ids[5];
    ds->meta.temporal_patch_size = ids[6];
    memcpy(&ds->meta.min_pixels, h + 80, 8);
    memcpy(&ds->meta.max_pixels, h + 88, 8);
    if (ds->num_samples < 0 || ds->num_images < 0 || ds->num_tokens < 0 || ds->image_bytes < 0 ||
        ds->num_samples > (int64_t)1 << 40 || ds->num_images > (int64_t)1 << 40)
        return lj_fail(LJ_ERR_FORMAT, "%s: negative or impossible counts in the header", ip);
    const uint64_t want = LJ_MM_HEADER_BYTES + 16 * (uint64_t)(ds->num_samples + 1) + 48 * (uint64_t)ds->num_images;
    if (ds->map_size[F_IDX] != want)
        return lj_fail(LJ_ERR_FORMAT, "%s: %zu bytes, the header's counts need %llu", ip, ds->map_size[F_IDX],
                       (unsigned long long)want);
    ds->sample_token_start = (const int64_t *)(h + LJ_MM_HEADER_BYTES);
    ds->sample_image_start = ds->sample_token_start + ds->num_samples + 1;
    ds->images = (const lj_mm_image_rec *)(ds->sample_image_start + ds->num_samples + 1);
    const uint64_t sizes[3] = {4 * (uint64_t)ds->num_tokens, (uint64_t)ds->num_tokens, (uint64_t)ds->image_bytes};
    for (int i = 0; i < 3; i++) {
        LJ_TRY(map_file(ds, i, path[i]));
        if (ds->map_size[i] != sizes[i])
            return lj_fail(LJ_ERR_FORMAT, "%s: %zu bytes, %s says %llu (an incomplete or mismatched file)", path[i],
                           ds->map_size[i], ip, (unsigned long long)sizes[i]);
    }
    ds->tokens = ds->map[F_TOK];
    ds->mask = ds->map[F_MASK];
    ds->image_data = ds->map[F_IMG];
    const int64_t *ts = ds->sample_token_start, *is = ds->sample_image_start;
    if (ts[0] != 0 || is[0] != 0 || ts[ds->num_samples] != ds->num_tokens || is[ds->num_samples] != ds->num_images)
        return lj_fail(LJ_ERR_FORMAT, "%s: the sample offsets do not span the tokens and images", ip);
    for (int64_t s = 0; s < ds->num_samples; s++) {
        if (ts[s + 1] < ts[s] || is[s + 1] < is[s])
            return lj_fail(LJ_ERR_FORMAT, "%s: sample %lld: offsets decrease", ip, (long long)s);
        for (int64_t k = is[s]; k < is[s + 1]; k++) {
            const lj_mm_image_rec *r = &ds->images[k];
            const int64_t pads = (int64_t)r->grid_t * r->grid_h * r->grid_w /
                                 ((int64_t)ds->meta.merge_size * ds->meta.merge_size);
            if (r->byte_offset < 0 || r->byte_size <= 0 || r->byte_offset + r->byte_size > ds->image_bytes ||
                r->token_pos < 0 || r->token_pos + pads + 2 > ts[s + 1] - ts[s] || r->grid_t <= 0 || r->grid_h <= 0 ||
                r->grid_w <= 0)
                return lj_fail(LJ_ERR_FORMAT, "%s: sample %lld, image %lld: the record lies outside its sample or %s",
                               ip, (long long)s, (long long)(k - is[s]), path[F_IMG]);
        }
    }
    return LJ_OK;
}

lj_status lj_mm_dataset_open(lj_mm_dataset *ds, const char *prefix) {
    memset(ds, 0, sizeof *ds);
    lj_status st = open_checked(ds, prefix);
    if (st != LJ_OK) {
        lj_mm_dataset_close(ds);
        return st;
    }
    ds->prefix = lj_strdup(prefix);
    return LJ_OK;
}

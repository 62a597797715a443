/* mm_loader.c: the vision-language loader (mm_loader.h): a sequential packing plan made under a
 * lock (cheap: the index only), and batches built and their images decoded on worker threads
 * into a ring of `prefetch` + `hold` - 1 slots, handed out in order. */
#include <pthread.h>
#include <string.h>

#include "data/mm_loader.h"

typedef struct {
    int row;
    int64_t sample;
    int64_t len;    /* pairs taken: inputs tokens[0..len), labels tokens[1..len] */
    int64_t images; /* its first `images` images are inside */
} seg;

enum { SLOT_FREE = 0, SLOT_BUILDING, SLOT_READY };

typedef struct {
    int state;
    int64_t number;
    int64_t position; /* the stream position after this batch */
    lj_status status;
    char err[1024];
    seg *segs;
    int nsegs, cap_segs;
    lj_mm_batch b;
    int64_t cap_patches;
    int cap_images, cap_cu;
} slot;

struct lj_mm_loader {
    lj_mm_dataset ds;
    lj_mm_loader_config cfg;
    lj_vision_preproc pre;
    int world;
    /* planning (under mu) */
    int64_t stream;     /* this rank's next sample in its stream */
    int64_t *perm;      /* the order of epoch perm_epoch */
    int64_t perm_epoch;
    int64_t skipped;
    lj_mm_loader_skips skips; /* counted at open */
    /* the ring */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready;
    slot *slots;
    int nslots;
    int64_t next_plan, released, handed; /* batches [released, handed) are the caller's */
    int hold;                            /* the most the caller keeps at once (lj_mm_loader_config) */
    int quit, nthreads;
    pthread_t *threads;
};

const lj_mm_dataset *lj_mm_loader_dataset(const lj_mm_loader *ld) { return &ld->ds; }

int64_t lj_mm_loader_position(const lj_mm_loader *ld) {
    return ld->handed > 0 ? ld->slots[(ld->handed - 1) % ld->nslots].position : ld->cfg.start_position;
}

/* The dataset sample of this rank's stream position k. */
static int64_t stream_sample(lj_mm_loader *ld, int64_t k) {
    const int64_t n = ld->ds.num_samples, g = k * ld->world + ld->cfg.dp_rank;
    const int64_t e = g / n, i = g % n;
    if (ld->cfg.no_shuffle) return i;
    if (e != ld->perm_epoch) {
        for (int64_t j = 0; j < n; j++) ld->perm[j] = j;
        lj_rng rng;
        lj_rng_seed(&rng, ld->cfg.seed + (uint64_t)e);
        for (int64_t j = n - 1; j > 0; j--) {
            const int64_t r = (int64_t)lj_rng_below(&rng, (uint64_t)j + 1), t = ld->perm[j];
            ld->perm[j] = ld->perm[r], ld->perm[r] = t;
        }
        ld->perm_epoch = e;
    }
    return ld->perm[i];
}

static int64_t image_span(const lj_mm_loader *ld, const lj_mm_image_rec *r) {
    return (int64_t)r->grid_t * r->grid_h * r->grid_w / ((int64_t)ld->pre.merge_size * ld->pre.merge_size) + 2;
}

/* How many pairs of sample s fit in `room` without cutting an image, and how many images they
 * hold. */
static int64_t fit(const lj_mm_loader *ld, int64_t s, int64_t room, int64_t *images) {
    const int64_t len = lj_mm_sample_tokens(&ld->ds, s) - 1;
    int64_t cut = len < room ? len : room;
    const int64_t first = ld->ds.sample_image_start[s], last = ld->ds.sample_image_start[s + 1];
    int64_t k = first;
    for (; k < last; k++) {
        const lj_mm_image_rec *r = &ld->ds.images[k];
        if (r->token_pos + image_span(ld, r) <= cut) continue;
        if (r->token_pos < cut) cut = r->token_pos;
        break;
    }
    *images = k - first;
    if (cut < len) { /* cut short: keep the piece only if it trains something */
        const uint8_t *m = ld->ds.mask + ld->ds.sample_token_start[s];
        int64_t trained = 0;
        for (int64_t i = 1; i <= cut && !trained; i++) trained = m[i];
        if (!trained) return 0;
    }
    return cut;
}

/* The samples no row takes (see lj_mm_loader_skips): a row starts with each sample that does not
 * fit the rest of the row before it, so a sample is skipped exactly when fit() in a whole row
 * takes nothing. */
static void count_skips(lj_mm_loader *ld) {
    lj_mm_loader_skips *k = &ld->skips;
    memset(k, 0, sizeof *k);
    k->samples = ld->ds.num_samples;
    k->seq_length = ld->cfg.seq_length;
    for (int64_t s = 0; s < ld->ds.num_samples; s++) {
        const int64_t n = lj_mm_sample_tokens(&ld->ds, s), len = n - 1;
        int64_t images;
        if (len <= ld->cfg.seq_length || fit(ld, s, ld->cfg.seq_length, &images) > 0) continue;
        k->skipped++;
        if (n > k->longest) k->longest = n;
    }
}

void lj_mm_loader_skip_count(const lj_mm_loader *ld, lj_mm_loader_skips *out) { *out = ld->skips; }

int lj_mm_loader_skip_message(const lj_mm_loader *ld, char *buf, size_t n) {
    const lj_mm_loader_skips *k = &ld->skips;
    if (n > 0) buf[0] = '\0';
    if (k->skipped == 0) return 0;
    snprintf(buf, n,
             "%lld of %lld samples are longer than --seq-length %d (the longest: %lld tokens) and are skipped: "
             "nothing they train fits a row without cutting an image",
             (long long)k->skipped, (long long)k->samples, k->seq_length, (long long)k->longest);
    return 1;
}

static void add_seg(slot *sl, int row, int64_t sample, int64_t len, int64_t images) {
    if (sl->nsegs == sl->cap_segs) sl->segs = lj_realloc(sl->segs, sizeof *sl->segs * (size_t)(sl->cap_segs = sl->cap_segs * 2 + 16));
    sl->segs[sl->nsegs++] = (seg){row, sample, len, images};
}

/* Plans batch sl->number (under mu): which samples, how much of each. Errors (LJ_ERR_ARG) when a
 * whole epoch's worth of samples in a row is skipped: none fits the rows. */
static lj_status plan(lj_mm_loader *ld, slot *sl) {
    const int T = ld->cfg.seq_length;
    sl->nsegs = 0;
    for (int row = 0; row < ld->cfg.micro_batch_size; row++) {
        int64_t used = 0, in_vain = 0;
        while (used < T) {
            if (in_vain > ld->ds.num_samples)
                return lj_fail(LJ_ERR_ARG, "%s: no sample fits --seq-length %d without cutting an image (or none "
                               "has a trained token in its first %d)", ld->ds.prefix, T, T);
            const int64_t s = stream_sample(ld, ld->stream);
            const int64_t len = lj_mm_sample_tokens(&ld->ds, s) - 1;
            if (len <= 0) { /* a one-token sample has no pair */
                ld->stream++, in_vain++;
                continue;
            }
            if (used > 0 && len > T - used) break; /* starts the next row */
            int64_t images;
            const int64_t take = fit(ld, s, T - used, &images);
            ld->stream++;
            if (take <= 0) { /* nothing trained fits a row without cutting an image */
                if (ld->skipped++ == 0) {
                    char msg[256];
                    if (lj_mm_loader_skip_message(ld, msg, sizeof msg)) lj_log_info("loader: %s", msg);
                }
                in_vain++;
                continue;
            }
            add_seg(sl, row, s, take, images);
            used += take, in_vain = 0;
        }
    }
    return LJ_OK;
}

/* Appends the MRoPE ids of tokens[0..len) of sample s (get_rope_index over one segment). */
static void rope_ids(const lj_mm_loader *ld, int64_t s, int64_t len, int64_t nimg, int32_t *pt, int32_t *ph,
                     int32_t *pw) {
    const lj_mm_image_rec *img = ld->ds.images + ld->ds.sample_image_start[s];
    const int ms = ld->pre.merge_size;
    int64_t st = 0, st_idx = 0;
    for (int64_t k = 0; k < nimg; k++) {
        const int64_t ed = img[k].token_pos + 1; /* the first <|image_pad|> */
        for (int64_t i = st; i < ed; i++) pt[i] = ph[i] = pw[i] = (int32_t)(st_idx + i - st);
        const int64_t base = st_idx + ed - st, gh = img[k].grid_h / ms, gw = img[k].grid_w / ms;
        for (int64_t r = 0; r < gh; r++)
            for (int64_t c = 0; c < gw; c++) {
                const int64_t i = ed + r * gw + c;
                pt[i] = (int32_t)base, ph[i] = (int32_t)(base + r), pw[i] = (int32_t)(base + c);
            }
        st = ed + gh * gw;
        st_idx = base + (gh > gw ? gh : gw); /* one more than the largest id so far */
    }
    for (int64_t i = st; i < len; i++) pt[i] = ph[i] = pw[i] = (int32_t)(st_idx + i - st);
}

static lj_status build(lj_mm_loader *ld, slot *sl) {
    lj_mm_batch *b = &sl->b;
    const int B = b->B = ld->cfg.micro_batch_size, T = b->T = ld->cfg.seq_length;
    const int64_t BT = (int64_t)B * T, dim = lj_vision_preproc_patch_dim(&ld->pre);
    for (int64_t i = 0; i < BT; i++) {
        b->input_ids[i] = ld->ds.meta.pad_id;
        b->labels[i] = LJ_MM_IGNORE_INDEX;
        b->segment_ids[i] = -1;
        b->position_ids[i] = b->position_ids[BT + i] = b->position_ids[2 * BT + i] = 1;
    }
    b->num_images = 0, b->num_patches = 0, b->num_segments = 0, b->samples = sl->nsegs;
    int row = -1, in_row = 0;
    int64_t pos = 0;
    for (int k = 0; k < sl->nsegs; k++) {
        if (sl->segs[k].row != row) row = sl->segs[k].row, pos = 0, in_row = 0;
        const seg *g = &sl->segs[k];
        const int64_t t0 = ld->ds.sample_token_start[g->sample], o = (int64_t)row * T + pos;
        for (int64_t i = 0; i < g->len; i++) {
            b->input_ids[o + i] = ld->ds.tokens[t0 + i];
            b->labels[o + i] = ld->ds.mask[t0 + i + 1] ? ld->ds.tokens[t0 + i + 1] : LJ_MM_IGNORE_INDEX;
            b->segment_ids[o + i] = in_row;
        }
        rope_ids(ld, g->sample, g->len, g->images, b->position_ids + o, b->position_ids + BT + o,
                 b->position_ids + 2 * BT + o);
        pos += g->len, in_row++;
        /* the images: decode, preprocess, check the grid against the prepared one */
        const lj_mm_image_rec *img = ld->ds.images + ld->ds.sample_image_start[g->sample];
        for (int64_t m = 0; m < g->images; m++) {
            char name[512];
            snprintf(name, sizeof name, "%s.mmimg: sample %lld, image %lld", ld->ds.prefix, (long long)g->sample,
                     (long long)m);
            lj_image im;
            LJ_TRY(lj_image_decode(ld->ds.image_data + img[m].byte_offset, (size_t)img[m].byte_size, name,
                                   ld->cfg.max_image_pixels, &im));
            float *pv = NULL;
            lj_grid_thw grid;
            lj_status st = lj_vision_preprocess(&ld->pre, &im, name, &pv, &grid);
            lj_image_free(&im);
            if (st != LJ_OK) return st;
            if (grid.t != img[m].grid_t || grid.h != img[m].grid_h || grid.w != img[m].grid_w) {
                free(pv);
                return lj_fail(LJ_ERR_FORMAT, "%s: grid (%d, %d, %d), prepared as (%d, %d, %d)", name, grid.t, grid.h,
                               grid.w, img[m].grid_t, img[m].grid_h, img[m].grid_w);
            }
            const int64_t np = lj_grid_patches(grid);
            if (b->num_patches + np > sl->cap_patches) {
                sl->cap_patches = (b->num_patches + np) * 2;
                b->pixel_values = lj_realloc(b->pixel_values, sizeof(float) * (size_t)(sl->cap_patches * dim));
            }
            memcpy(b->pixel_values + b->num_patches * dim, pv, sizeof(float) * (size_t)(np * dim));
            free(pv);
            b->num_patches += np;
            if (b->num_images == sl->cap_images)
                b->image_grid_thw = lj_realloc(b->image_grid_thw, sizeof(lj_grid_thw) * (size_t)(sl->cap_images = sl->cap_images * 2 + 8));
            b->image_grid_thw[b->num_images++] = grid;
        }
    }
    /* cu_seqlens: every run of one segment id within a row (padding included) */
    if (sl->cap_cu < sl->nsegs + B + 1)
        b->cu_seqlens = lj_realloc(b->cu_seqlens, sizeof(int32_t) * (size_t)(sl->cap_cu = sl->nsegs + B + 1));
    b->cu_seqlens[0] = 0;
    for (int64_t i = 1; i < BT; i++)
        if (i % T == 0 || b->segment_ids[i] != b->segment_ids[i - 1]) b->cu_seqlens[++b->num_segments] = (int32_t)i;
    b->cu_seqlens[++b->num_segments] = (int32_t)BT;
    return LJ_OK;
}

static void *worker(void *arg) {
    lj_mm_loader *ld = arg;
    pthread_mutex_lock(&ld->mu);
    while (!ld->quit) {
        if (ld->next_plan < ld->released + ld->nslots) {
            slot *sl = &ld->slots[ld->next_plan % ld->nslots];
            sl->number = ld->next_plan++;
            sl->state = SLOT_BUILDING;
            sl->err[0] = '\0';
            sl->status = plan(ld, sl);
            sl->position = ld->stream;
            if (sl->status != LJ_OK) snprintf(sl->err, sizeof sl->err, "%s", lj_error_message());
            sl->b.skipped = ld->skipped;
            pthread_mutex_unlock(&ld->mu);
            if (sl->status == LJ_OK) sl->status = build(ld, sl);
            if (sl->status != LJ_OK && !sl->err[0]) snprintf(sl->err, sizeof sl->err, "%s", lj_error_message());
            pthread_mutex_lock(&ld->mu);
            sl->state = SLOT_READY;
            pthread_cond_broadcast(&ld->cv_ready);
        } else {
            pthread_cond_wait(&ld->cv_work, &ld->mu);
        }
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

lj_status lj_mm_loader_next(lj_mm_loader *ld, const lj_mm_batch **batch) {
    pthread_mutex_lock(&ld->mu);
    if (ld->handed - ld->released >= ld->hold) { /* the oldest batch the caller has goes back */
        ld->slots[ld->released % ld->nslots].state = SLOT_FREE;
        ld->released++;
        pthread_cond_broadcast(&ld->cv_work);
    }
    slot *sl = &ld->slots[ld->handed % ld->nslots];
    while (!(sl->state == SLOT_READY && sl->number == ld->handed)) pthread_cond_wait(&ld->cv_ready, &ld->mu);
    ld->handed++;
    pthread_mutex_unlock(&ld->mu);
    *batch = &sl->b;
    if (sl->status != LJ_OK) return lj_fail(sl->status, "%s", sl->err);
    return LJ_OK;
}

lj_status lj_mm_loader_open(lj_mm_loader **out, const lj_mm_loader_config *cfg) {
    if (cfg->seq_length < 2 || cfg->micro_batch_size < 1)
        return lj_fail(LJ_ERR_ARG, "the multimodal loader needs seq_length >= 2 and micro_batch_size >= 1 (got %d, %d)",
                       cfg->seq_length, cfg->micro_batch_size);
    const int world = cfg->dp_world_size > 0 ? cfg->dp_world_size : 1;
    if (cfg->dp_rank < 0 || cfg->dp_rank >= world)
        return lj_fail(LJ_ERR_ARG, "dp_rank %d is not in 0..%d", cfg->dp_rank, world - 1);
    lj_mm_loader *ld = lj_calloc(1, sizeof *ld);
    lj_status st = lj_mm_dataset_open(&ld->ds, cfg->prefix);
    if (st == LJ_OK && ld->ds.num_samples == 0) st = lj_fail(LJ_ERR_FORMAT, "%s.mmidx: no samples", cfg->prefix);
    if (st != LJ_OK) {
        free(ld);
        return st;
    }
    ld->cfg = *cfg;
    ld->world = world;
    lj_vision_preproc_qwen3vl(&ld->pre);
    ld->pre.patch_size = ld->ds.meta.patch_size;
    ld->pre.merge_size = ld->ds.meta.merge_size;
    ld->pre.temporal_patch_size = ld->ds.meta.temporal_patch_size;
    ld->pre.min_pixels = ld->ds.meta.min_pixels;
    ld->pre.max_pixels = ld->ds.meta.max_pixels;
    ld->pre.resize = cfg->resize;
    ld->perm = lj_malloc(sizeof(int64_t) * (size_t)ld->ds.num_samples);
    ld->perm_epoch = -1;
    ld->stream = cfg->start_position > 0 ? cfg->start_position : 0;
    count_skips(ld);
    ld->nthreads = cfg->num_workers > 0 ? cfg->num_workers : 2;
    ld->hold = cfg->hold > 0 ? cfg->hold : 1;
    ld->nslots = (cfg->prefetch > 0 ? cfg->prefetch : 2 * ld->nthreads) + ld->hold - 1; /* the held ones too */
    ld->slots = lj_calloc((size_t)ld->nslots, sizeof *ld->slots);
    const size_t BT = (size_t)cfg->micro_batch_size * (size_t)cfg->seq_length;
    for (int i = 0; i < ld->nslots; i++) {
        lj_mm_batch *b = &ld->slots[i].b;
        b->input_ids = lj_malloc(sizeof(int32_t) * BT);
        b->labels = lj_malloc(sizeof(int32_t) * BT);
        b->segment_ids = lj_malloc(sizeof(int32_t) * BT);
        b->position_ids = lj_malloc(sizeof(int32_t) * 3 * BT);
    }
    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->cv_work, NULL);
    pthread_cond_init(&ld->cv_ready, NULL);
    ld->threads = lj_calloc((size_t)ld->nthreads, sizeof *ld->threads);
    int started = 0;
    for (; started < ld->nthreads; started++)
        if (pthread_create(&ld->threads[started], NULL, worker, ld) != 0) break;
    ld->nthreads = started;
    if (started == 0) {
        lj_mm_loader_close(ld);
        return lj_fail(LJ_ERR_OOM, "the multimodal loader cannot start a thread");
    }
    *out = ld;
    return LJ_OK;
}

void lj_mm_loader_close(lj_mm_loader *ld) {
    if (!ld) return;
    pthread_mutex_lock(&ld->mu);
    ld->quit = 1;
    pthread_cond_broadcast(&ld->cv_work);
    pthread_mutex_unlock(&ld->mu);
    for (int i = 0; i < ld->nthreads; i++) pthread_join(ld->threads[i], NULL);
    for (int i = 0; i < ld->nslots; i++) {
        lj_mm_batch *b = &ld->slots[i].b;
        free(b->input_ids), free(b->labels), free(b->segment_ids), free(b->position_ids), free(b->cu_seqlens);
        free(b->image_grid_thw), free(b->pixel_values), free(ld->slots[i].segs);
    }
    pthread_mutex_destroy(&ld->mu);
    pthread_cond_destroy(&ld->cv_work);
    pthread_cond_destroy(&ld->cv_ready);
    free(ld->slots), free(ld->threads), free(ld->perm);
    lj_mm_dataset_close(&ld->ds);
    free(ld);
}

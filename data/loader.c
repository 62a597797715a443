/* loader.c: the training data loader (see loader.h for the sample stream, the split, the
 * blending rule, the epoch order and the rank partition, with their Megatron sources). */
#include "data/loader.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#define LJ_SEED_STRIDE 0x9E3779B97F4A7C15ull /* golden-ratio step between datasets' seeds */

const char *lj_split_name(lj_split which) {
    switch (which) {
    case LJ_SPLIT_TRAIN: return "train";
    case LJ_SPLIT_VALID: return "valid";
    case LJ_SPLIT_TEST: return "test";
    }
    return "?";
}

/* ---- argument parsing ------------------------------------------------------------ */

lj_status lj_loader_parse_split(const char *text, double fractions[3]) {
    static const char *const expected = "expected up to three non-negative weights like 969,30,1 (train, valid, test)";
    double v[3] = {0, 0, 0};
    int n = 0;
    const char *p = text ? text : "";
    /* one pair of quotes around the whole value, as a launch script leaves them when it keeps
     * "--split '99,1,0'" in an array expanded unquoted (Megatron-LM reads the numbers out of any
     * text, re.findall(r"[.0-9]+", split)) */
    const size_t len = strlen(p);
    char unquoted[64];
    if (len >= 2 && len < sizeof unquoted + 2 && (p[0] == '\'' || p[0] == '"') && p[len - 1] == p[0]) {
        snprintf(unquoted, sizeof unquoted, "%.*s", (int)(len - 2), p + 1);
        p = unquoted;
    }
    while (*p) {
        if (*p == ',' || *p == '/' || isspace((unsigned char)*p)) {
            p++;
            continue;
        }
        if (n == 3) return lj_fail(LJ_ERR_ARG, "--split '%s': more than three weights: %s", text, expected);
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno != 0 || !isfinite(x) || x < 0)
            return lj_fail(LJ_ERR_ARG, "--split '%s': '%.20s' is not a non-negative number: %s", text, p, expected);
        v[n++] = x;
        p = end;
    }
    if (n == 0) return lj_fail(LJ_ERR_ARG, "--split '%s': no weights: %s", text ? text : "", expected);
    double sum = v[0] + v[1] + v[2];
    if (!(sum > 0))
        return lj_fail(LJ_ERR_ARG, "--split '%s': the weights sum to 0: expected at least one above 0, like 969,30,1",
                       text);
    for (int i = 0; i < 3; i++) fractions[i] = v[i] / sum;
    return LJ_OK;
}

static int parse_weight(const char *s, double *w) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(x)) return 0;
    *w = x;
    return 1;
}

lj_status lj_loader_parse_data_path(lj_loader_config *cfg, int argc, const char *const *argv) {
    /* Split every element on whitespace into one list of items. */
    int cap = 16, n = 0;
    char **items = lj_malloc((size_t)cap * sizeof(char *));
    lj_status s = LJ_OK;
    for (int a = 0; a < argc; a++) {
        const char *p = argv[a];
        while (*p) {
            while (isspace((unsigned char)*p)) p++;
            if (!*p) break;
            const char *q = p;
            while (*q && !isspace((unsigned char)*q)) q++;
            if (n == cap) items = lj_realloc(items, (size_t)(cap *= 2) * sizeof(char *));
            items[n] = lj_malloc((size_t)(q - p) + 1);
            memcpy(items[n], p, (size_t)(q - p));
            items[n++][q - p] = '\0';
            p = q;
        }
    }
    int pairs = 0;
    if (n == 0) {
        s = lj_fail(LJ_ERR_ARG, "--data-path: no dataset given");
        goto done;
    }
    if (n % 2 == 0) {
        int numeric = 0;
        double w;
        for (int i = 0; i < n; i += 2) numeric += parse_weight(items[i], &w);
        if (numeric == n / 2) {
            pairs = 1;
        } else if (numeric != 0) {
            s = lj_fail(LJ_ERR_ARG, "--data-path: give either \"WEIGHT PATH\" pairs or paths only, not a mix "
                        "(\"%s\" is not a number)", items[0]);
            goto done;
        }
    }
    if (!pairs && n > 1) { /* an odd count with weights: "0.5 A 0.5" */
        double w;
        int numeric = 0, at = -1;
        for (int i = 0; i < n; i++)
            if (parse_weight(items[i], &w)) numeric++, at = at < 0 ? i : at;
        if (numeric > 0) {
            s = lj_fail(LJ_ERR_ARG, "--data-path: %d items with weights among them (\"%s\" is a number): give \"WEIGHT "
                        "PATH\" pairs (an even count) or paths only", n, items[at]);
            goto done;
        }
    }
    int count = pairs ? n / 2 : n;
    if (count > LJ_LOADER_MAX_DATASETS) {
        s = lj_fail(LJ_ERR_ARG, "--data-path: %d datasets, more than the %d supported", count, LJ_LOADER_MAX_DATASETS);
        goto done;
    }
    memset(cfg->paths, 0, sizeof cfg->paths);
    memset(cfg->weights, 0, sizeof cfg->weights);
    for (int i = 0; i < count; i++) {
        const char *path = pairs ? items[2 * i + 1] : items[i];
        if (strlen(path) >= LJ_LOADER_PATH_MAX) {
            s = lj_fail(LJ_ERR_ARG, "--data-path: path \"%.60s...\" is longer than %d bytes", path, LJ_LOADER_PATH_MAX - 1);
            goto done;
        }
        if (pairs) {
            parse_weight(items[2 * i], &cfg->weights[i]);
            if (!(cfg->weights[i] > 0)) {
                s = lj_fail(LJ_ERR_ARG, "--data-path: weight %s of %s must be positive", items[2 * i], path);
                goto done;
            }
        }
        snprintf(cfg->paths[i], LJ_LOADER_PATH_MAX, "%s", path);
    }
    cfg->num_datasets = count;
done:
    for (int i = 0; i < n; i++) free(items[i]);
    free(items);
    return s;
}

/* ---- init / free ------------------------------------------------------------------- */

/* Megatron's _get_split_indices: bounds[0..3] over n sequences. Python's round() is round half
 * to even, as is nearbyint in the default rounding mode. */
static void split_bounds(const double f[3], int64_t n, int64_t bounds[4]) {
    bounds[0] = 0;
    for (int i = 0; i < 3; i++) bounds[i + 1] = bounds[i] + (int64_t)nearbyint(f[i] * (double)n);
    int64_t over = bounds[3] - n;
    for (int i = 1; i < 4; i++) {
        bounds[i] -= over;
        if (bounds[i] < 0) bounds[i] = 0;
        if (bounds[i] > n) bounds[i] = n;
    }
    for (int i = 1; i < 4; i++)
        if (bounds[i] < bounds[i - 1]) bounds[i] = bounds[i - 1];
}

static lj_status open_source(lj_loader_source *src, const char *path, int mock_vocab_size, const double fractions[3],
                             lj_split which, const char *split_text, int T) {
    src->perm_epoch = -1;
    if (mock_vocab_size > 0) lj_token_dataset_mock(&src->ds, mock_vocab_size, LJ_LOADER_MOCK_SEQUENCES, LJ_LOADER_MOCK_SEED);
    else LJ_TRY(lj_token_dataset_open(&src->ds, path));
    const lj_token_dataset *ds = &src->ds;
    int64_t bounds[4];
    split_bounds(fractions, ds->num_sequences, bounds);
    src->first_seq = bounds[which];
    src->last_seq = bounds[which + 1];
    int64_t n = src->last_seq - src->first_seq;
    src->stream_start = lj_malloc((size_t)(n + 1) * sizeof(int64_t));
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        src->stream_start[i] = total;
        total += ds->seq_lengths[src->first_seq + i];
    }
    src->stream_start[n] = total;
    src->num_tokens = total;
    src->num_samples = total > 0 ? (total - 1) / T : 0;
    if (src->num_samples < 1)
        return lj_fail(LJ_ERR_ARG, "%s: the %s split (sequences [%lld, %lld) of %lld, --split \"%s\") has %lld tokens; "
                       "one sample needs seq_length + 1 = %d", path, lj_split_name(which), (long long)src->first_seq,
                       (long long)src->last_seq, (long long)ds->num_sequences, split_text, (long long)total, T + 1);
    return LJ_OK;
}

lj_status lj_loader_init(lj_loader *ld, const lj_loader_config *cfg) {
    memset(ld, 0, sizeof *ld);
    int world = cfg->dp_world_size == 0 ? 1 : cfg->dp_world_size;
    if (cfg->num_datasets < 1 || cfg->num_datasets > LJ_LOADER_MAX_DATASETS)
        return lj_fail(LJ_ERR_ARG, "data loader: %d datasets (need 1 to %d)", cfg->num_datasets, LJ_LOADER_MAX_DATASETS);
    if (cfg->seq_length < 1) return lj_fail(LJ_ERR_ARG, "--seq-length %d must be at least 1", cfg->seq_length);
    if (cfg->micro_batch_size < 1)
        return lj_fail(LJ_ERR_ARG, "--micro-batch-size %d must be at least 1", cfg->micro_batch_size);
    if (world < 1 || cfg->dp_rank < 0 || cfg->dp_rank >= world)
        return lj_fail(LJ_ERR_ARG, "data loader: rank %d is not in [0, world size %d)", cfg->dp_rank, world);
    if (cfg->which != LJ_SPLIT_TRAIN && cfg->which != LJ_SPLIT_VALID && cfg->which != LJ_SPLIT_TEST)
        return lj_fail(LJ_ERR_ARG, "data loader: bad split selector %d", (int)cfg->which);
    int zero = 0;
    for (int j = 0; j < cfg->num_datasets; j++) {
        double w = cfg->weights[j];
        if (!isfinite(w) || w < 0)
            return lj_fail(LJ_ERR_ARG, "--data-path: weight %g of %s must be positive", w, cfg->paths[j]);
        zero += w == 0;
    }
    if (zero != 0 && zero != cfg->num_datasets)
        return lj_fail(LJ_ERR_ARG, "--data-path: every dataset needs a positive weight, or none a weight at all");
    double fractions[3];
    const char *split_text = cfg->split[0] ? cfg->split : "969,30,1";
    LJ_TRY(lj_loader_parse_split(split_text, fractions));

    ld->seq_length = cfg->seq_length;
    ld->micro_batch_size = cfg->micro_batch_size;
    ld->dp_rank = cfg->dp_rank;
    ld->dp_world_size = world;
    ld->shuffle = !cfg->no_shuffle;
    ld->seed = cfg->seed;
    ld->which = cfg->which;
    ld->num_sources = cfg->num_datasets;
    ld->sources = lj_calloc((size_t)cfg->num_datasets, sizeof(lj_loader_source));
    double sum = 0;
    for (int j = 0; j < ld->num_sources; j++) {
        lj_loader_source *src = &ld->sources[j];
        lj_status s = open_source(src, cfg->paths[j], cfg->mock_vocab_size, fractions, cfg->which, split_text, cfg->seq_length);
        if (s != LJ_OK) {
            ld->num_sources = j + 1;
            lj_loader_free(ld);
            return s;
        }
        src->weight = zero ? (double)src->num_samples : cfg->weights[j];
        sum += src->weight;
        if (ld->shuffle) src->perm = lj_malloc((size_t)src->num_samples * sizeof(int64_t));
    }
    for (int j = 0; j < ld->num_sources; j++) ld->sources[j].weight /= sum;
    lj_loader_reset(ld);
    return LJ_OK;
}

void lj_loader_free(lj_loader *ld) {
    if (!ld) return;
    for (int j = 0; ld->sources && j < ld->num_sources; j++) {
        lj_token_dataset_close(&ld->sources[j].ds);
        free(ld->sources[j].stream_start);
        free(ld->sources[j].perm);
    }
    free(ld->sources);
    memset(ld, 0, sizeof *ld);
}

/* ---- the sample stream ------------------------------------------------------------- */

/* Megatron's blending rule (helpers.cpp, build_blending_indices) at global sample k. */
static int blend_pick(const lj_loader *ld) {
    if (ld->num_sources == 1) return 0;
    double k = ld->state.consumed_samples > 1 ? (double)ld->state.consumed_samples : 1.0;
    int best = 0;
    double best_err = 0;
    for (int j = 0; j < ld->num_sources; j++) {
        /* volatile: keep the product rounded on its own (no FMA contraction), so that every
         * build and every rank picks the same dataset. */
        volatile double target = ld->sources[j].weight * k;
        double err = target - (double)ld->state.dataset_samples[j];
        if (j == 0 || err > best_err) best = j, best_err = err;
    }
    return best;
}

static void build_perm(lj_loader_source *src, uint64_t seed, int j, int64_t epoch) {
    lj_rng rng;
    lj_rng_seed(&rng, seed + (uint64_t)epoch + (uint64_t)j * LJ_SEED_STRIDE);
    int64_t n = src->num_samples;
    for (int64_t i = 0; i < n; i++) src->perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates (Knuth, TAOCP vol. 2, Algorithm P) */
        int64_t r = (int64_t)lj_rng_below(&rng, (uint64_t)i + 1);
        int64_t t = src->perm[i];
        src->perm[i] = src->perm[r];
        src->perm[r] = t;
    }
    src->perm_epoch = epoch;
}

/* Copies window `sample` of the source (stream tokens [sample*T, sample*T + T + 1)) to out. */
static void fetch_window(const lj_loader_source *src, int64_t sample, int T, int32_t *out) {
    const int64_t *start = src->stream_start;
    int64_t p = sample * T, need = (int64_t)T + 1;
    /* The last sequence d (of the split) with start[d] <= p; empty sequences are skipped
     * because the largest such d always has start[d + 1] > p. */
    int64_t lo = 0, hi = src->last_seq - src->first_seq - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (start[mid] <= p) lo = mid;
        else hi = mid - 1;
    }
    const lj_token_dataset *ds = &src->ds;
    for (int64_t d = lo; need > 0; d++) {
        int64_t avail = start[d + 1] - p;
        int64_t n = avail < need ? avail : need;
        if (n <= 0) continue;
        int64_t at = ds->seq_offsets[src->first_seq + d] / (int64_t)ds->token_size + (p - start[d]);
        if (ds->token_size == 2) {
            const uint16_t *t = (const uint16_t *)ds->tokens + at;
            for (int64_t i = 0; i < n; i++) out[i] = t[i];
        } else {
            memcpy(out, (const int32_t *)ds->tokens + at, (size_t)n * sizeof(int32_t));
        }
        out += n;
        p += n;
        need -= n;
    }
}

void lj_loader_next(lj_loader *ld, int32_t *tokens) {
    const int T = ld->seq_length;
    for (int b = 0; b < ld->micro_batch_size; b++) {
        for (int r = 0; r < ld->dp_world_size; r++) {
            int j = blend_pick(ld);
            lj_loader_source *src = &ld->sources[j];
            int64_t taken = ld->state.dataset_samples[j]++;
            ld->state.consumed_samples++;
            if (r != ld->dp_rank) continue;
            int64_t epoch = taken / src->num_samples, pos = taken % src->num_samples;
            if (ld->shuffle && src->perm_epoch != epoch) build_perm(src, ld->seed, j, epoch);
            int64_t sample = ld->shuffle ? src->perm[pos] : pos;
            fetch_window(src, sample, T, tokens + (size_t)b * (size_t)(T + 1));
        }
    }
}

/* ---- state ------------------------------------------------------------------------- */

void lj_loader_get_state(const lj_loader *ld, lj_loader_state *state) { *state = ld->state; }

lj_status lj_loader_set_state(lj_loader *ld, const lj_loader_state *state) {
    if (state->num_datasets != ld->num_sources)
        return lj_fail(LJ_ERR_ARG, "loader state: saved with %d datasets but the loader has %d", state->num_datasets,
                       ld->num_sources);
    if (state->seed != ld->seed)
        return lj_fail(LJ_ERR_ARG, "loader state: saved with seed %llu but the loader has seed %llu",
                       (unsigned long long)state->seed, (unsigned long long)ld->seed);
    int64_t sum = 0;
    for (int j = 0; j < state->num_datasets; j++) {
        if (state->dataset_samples[j] < 0)
            return lj_fail(LJ_ERR_ARG, "loader state: dataset_samples[%d] = %lld is negative", j,
                           (long long)state->dataset_samples[j]);
        sum += state->dataset_samples[j];
    }
    if (sum != state->consumed_samples || state->consumed_samples < 0)
        return lj_fail(LJ_ERR_ARG, "loader state: consumed_samples %lld is not the sum of dataset_samples (%lld)",
                       (long long)state->consumed_samples, (long long)sum);
    ld->state = *state;
    return LJ_OK;
}

void lj_loader_reset(lj_loader *ld) {
    memset(&ld->state, 0, sizeof ld->state);
    ld->state.seed = ld->seed;
    ld->state.num_datasets = ld->num_sources;
}

int64_t lj_loader_samples_per_epoch(const lj_loader *ld, int dataset) {
    LJ_ASSERT(dataset >= 0 && dataset < ld->num_sources);
    return ld->sources[dataset].num_samples;
}

int64_t lj_loader_epoch(const lj_loader *ld, int dataset) {
    LJ_ASSERT(dataset >= 0 && dataset < ld->num_sources);
    return ld->state.dataset_samples[dataset] / ld->sources[dataset].num_samples;
}

lj_status lj_loader_check_vocab(const lj_loader *ld, int vocab_size) {
    for (int j = 0; j < ld->num_sources; j++) LJ_TRY(lj_token_dataset_check_vocab(&ld->sources[j].ds, vocab_size));
    return LJ_OK;
}

lj_status lj_loader_eod_token(const lj_loader *ld, int32_t fallback, int vocab_size, int log, int32_t *eod) {
    int recorded = -1; /* the first dataset that records one */
    for (int j = 0; j < ld->num_sources; j++) {
        const lj_token_dataset *ds = &ld->sources[j].ds;
        if (ds->eod_token < 0) continue;
        if (recorded < 0) recorded = j;
        else if (ds->eod_token != ld->sources[recorded].ds.eod_token)
            return lj_fail(LJ_ERR_FORMAT, "%s%s records the end-of-document id %d, %s%s %d: document masking needs "
                                          "one id for the whole blend (prepare them with the same tokenizer)",
                           ds->path, LJ_MMIDX_FINGERPRINT_SUFFIX, (int)ds->eod_token, ld->sources[recorded].ds.path,
                           LJ_MMIDX_FINGERPRINT_SUFFIX, (int)ld->sources[recorded].ds.eod_token);
    }
    *eod = recorded >= 0 ? ld->sources[recorded].ds.eod_token : fallback;
    for (int j = 0; j < ld->num_sources && log; j++) {
        const lj_token_dataset *ds = &ld->sources[j].ds;
        if (ds->eod_token < 0)
            lj_log_info("data: %s records no end-of-document id (no %s%s with %s: Megatron's, an llm.c shard or "
                        "an older prepare); document masking takes the tokenizer's EOS, %d, as Megatron-LM takes "
                        "tokenizer.eod", ds->path, ds->path, LJ_MMIDX_FINGERPRINT_SUFFIX, LJ_MMIDX_EOD_FIELD, (int)*eod);
    }
    if (recorded >= 0 && *eod != fallback && log)
        lj_log_info("data: document masking at end-of-document id %d, the one %s%s records (prepare's separator; the "
                    "model's eos_token_id is %d)", (int)*eod, ld->sources[recorded].ds.path, LJ_MMIDX_FINGERPRINT_SUFFIX,
                    (int)fallback);
    if (*eod < 0 || *eod >= vocab_size)
        return lj_fail(LJ_ERR_ARG, "document masking: the end-of-document id %d is not in the model's vocabulary of %d",
                       (int)*eod, vocab_size);
    return LJ_OK;
}

void lj_loader_log_summary(const lj_loader *ld) {
    for (int j = 0; j < ld->num_sources; j++) {
        const lj_loader_source *src = &ld->sources[j];
        lj_log_info("data: %s (%s, %s tokens): %s split = sequences [%lld, %lld) of %lld, %lld tokens, %lld samples "
                    "of %d+1 tokens per epoch, weight %.4f",
                    src->ds.path, src->ds.idx_map ? "Megatron" : "llm.c", src->ds.token_size == 2 ? "uint16" : "int32",
                    lj_split_name(ld->which), (long long)src->first_seq, (long long)src->last_seq,
                    (long long)src->ds.num_sequences, (long long)src->num_tokens, (long long)src->num_samples,
                    ld->seq_length, src->weight);
    }
}

/* ---- JSON -------------------------------------------------------------------------- */

cJSON *lj_loader_state_to_json(const lj_loader_state *state) {
    cJSON *o = cJSON_CreateObject();
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)state->seed);
    cJSON_AddNumberToObject(o, "consumed_samples", (double)state->consumed_samples);
    cJSON_AddStringToObject(o, "seed", seed);
    cJSON *a = cJSON_AddArrayToObject(o, "dataset_samples");
    for (int j = 0; j < state->num_datasets; j++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)state->dataset_samples[j]));
    return o;
}

cJSON *lj_loader_fingerprint_to_json(const lj_loader *ld) {
    cJSON *a = cJSON_CreateArray();
    for (int j = 0; j < ld->num_sources; j++) {
        const lj_token_dataset *ds = &ld->sources[j].ds;
        cJSON *o = cJSON_CreateObject();
        char h[17];
        cJSON_AddStringToObject(o, "path", ds->path);
        cJSON_AddNumberToObject(o, "bin_bytes", (double)(ds->bin_map ? ds->bin_size : (size_t)ds->num_tokens * ds->token_size));
        snprintf(h, sizeof h, "%016" PRIx64, ds->bin_xxh3_64);
        cJSON_AddStringToObject(o, "bin_xxh3_64", h);
        snprintf(h, sizeof h, "%016" PRIx64, ds->idx_xxh3_64);
        cJSON_AddStringToObject(o, "idx_xxh3_64", h);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* The fingerprint of dataset j as text, for messages. */
static void fingerprint_text(const lj_token_dataset *ds, char *buf, size_t n) {
    snprintf(buf, n, "%zu bytes, .bin %016" PRIx64 ", .idx %016" PRIx64,
             ds->bin_map ? ds->bin_size : (size_t)ds->num_tokens * ds->token_size, ds->bin_xxh3_64, ds->idx_xxh3_64);
}

lj_status lj_loader_check_fingerprint(const lj_loader *ld, const cJSON *saved, const char *where, int override,
                                      int log) {
    if (!saved) return LJ_OK; /* a checkpoint from before fingerprints were recorded */
    const int n = cJSON_IsArray(saved) ? cJSON_GetArraySize(saved) : -1;
    if (n < 0) return lj_fail(LJ_ERR_FORMAT, "%s: loader field \"datasets\" is not an array", where);
    char msg[2048] = "";
    if (n != ld->num_sources)
        snprintf(msg, sizeof msg, "the checkpoint was trained on %d dataset%s, --data-path gives %d", n, n == 1 ? "" : "s",
                 ld->num_sources);
    for (int j = 0; j < n && j < ld->num_sources && !msg[0]; j++) {
        const cJSON *o = cJSON_GetArrayItem(saved, j);
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "path"), *bb = cJSON_GetObjectItemCaseSensitive(o, "bin_bytes");
        const cJSON *bh = cJSON_GetObjectItemCaseSensitive(o, "bin_xxh3_64"), *ih = cJSON_GetObjectItemCaseSensitive(o, "idx_xxh3_64");
        if (!cJSON_IsString(p) || !cJSON_IsNumber(bb) || !cJSON_IsString(bh) || !cJSON_IsString(ih))
            return lj_fail(LJ_ERR_FORMAT, "%s: loader field \"datasets\"[%d] lacks path, bin_bytes, bin_xxh3_64 or "
                                          "idx_xxh3_64", where, j);
        const lj_token_dataset *ds = &ld->sources[j].ds;
        char have[200], bin[17], idx[17];
        fingerprint_text(ds, have, sizeof have);
        snprintf(bin, sizeof bin, "%016" PRIx64, ds->bin_xxh3_64);
        snprintf(idx, sizeof idx, "%016" PRIx64, ds->idx_xxh3_64);
        const double bytes = (double)(ds->bin_map ? ds->bin_size : (size_t)ds->num_tokens * ds->token_size);
        if (bb->valuedouble != bytes || strcmp(bh->valuestring, bin) != 0 || strcmp(ih->valuestring, idx) != 0)
            snprintf(msg, sizeof msg, "dataset %d was %s (%.0f bytes, .bin %.16s, .idx %.16s), --data-path gives %s (%s)",
                     j, p->valuestring, bb->valuedouble, bh->valuestring, ih->valuestring, ds->path, have);
    }
    if (!msg[0]) return LJ_OK;
    if (!override)
        return lj_fail(LJ_ERR_ARG, "%s: the run resumes on other data: %s; resuming would continue the data order "
                                   "of one dataset on another (give the checkpoint's data, or --override-data to "
                                   "resume on this data anyway)", where, msg);
    if (log) lj_log_warn("--override-data: %s: the run resumes on other data: %s", where, msg);
    return LJ_OK;
}

/* A JSON number that is a whole number in [0, 2^53]. */
static int json_count(const cJSON *item, int64_t *v) {
    if (!cJSON_IsNumber(item)) return 0;
    double x = item->valuedouble;
    if (!(x >= 0 && x <= 9007199254740992.0) || x != floor(x)) return 0;
    *v = (int64_t)x;
    return 1;
}

lj_status lj_loader_state_from_json(const cJSON *obj, lj_loader_state *state, const char *where) {
    memset(state, 0, sizeof *state);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(obj, "consumed_samples");
    if (!json_count(c, &state->consumed_samples))
        return lj_fail(LJ_ERR_FORMAT, "%s: loader field \"consumed_samples\" is missing or not a count", where);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(obj, "seed");
    char *end = NULL;
    if (cJSON_IsString(s)) {
        errno = 0;
        state->seed = strtoull(s->valuestring, &end, 10);
    }
    if (!cJSON_IsString(s) || end == s->valuestring || *end != '\0' || errno != 0)
        return lj_fail(LJ_ERR_FORMAT, "%s: loader field \"seed\" is missing or not a decimal string", where);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, "dataset_samples");
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (n < 1 || n > LJ_LOADER_MAX_DATASETS)
        return lj_fail(LJ_ERR_FORMAT, "%s: loader field \"dataset_samples\" is missing or has %d entries (1 to %d)",
                       where, n, LJ_LOADER_MAX_DATASETS);
    state->num_datasets = n;
    for (int j = 0; j < n; j++)
        if (!json_count(cJSON_GetArrayItem(a, j), &state->dataset_samples[j]))
            return lj_fail(LJ_ERR_FORMAT, "%s: loader field \"dataset_samples\"[%d] is not a count", where, j);
    return LJ_OK;
}

/* state.c: a training run's resumable state (state.h). */
#include "checkpoint/state.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint.h"
#include "data/tokenizer_export.h"
#include "io/hf.h"
#include "io/safetensors.h"
#include "parallel/zero3.h"

/* Whether this run keeps per-rank ZeRO shard files in its checkpoints: ZeRO stage >= 1 over
 * more than one rank (the f32 master weights and AdamW moments are sharded). */
static int has_shard_files(const lj_dp *dp) { return dp->world > 1 && dp->zero_stage >= 1; }

lj_status lj_ckpt_resolve_load(const char *path, char *root, int *iteration, int *is_state, char *hf_dir) {
    struct stat st;
    char probe[LJ_PATH_MAX];
    *is_state = 0;
    /* one iteration directory: ROOT/iter_NNNNNNN with state.json */
    LJ_TRY(lj_path_join(probe, path, LJ_CKPT_STATE_FILE));
    if (stat(probe, &st) == 0) {
        LJ_TRY(lj_path_format(root, "%s", path));
        size_t n = strlen(root);
        while (n > 1 && root[n - 1] == '/') root[--n] = '\0';
        char *slash = strrchr(root, '/');
        const char *base = slash ? slash + 1 : root;
        if (sscanf(base, "iter_%d", iteration) != 1)
            return lj_fail(LJ_ERR_FORMAT, "%s: a checkpoint iteration directory must be named iter_NNNNNNN", path);
        if (slash) *slash = '\0';
        else snprintf(root, LJ_PATH_MAX, ".");
        *is_state = 1;
        return lj_path_join(hf_dir, path, "hf");
    }
    /* a root: the latest file, or iter_ directories */
    LJ_TRY(lj_path_join(probe, path, LJ_CKPT_LATEST_FILE));
    int looks_like_root = stat(probe, &st) == 0;
    DIR *d = looks_like_root ? NULL : opendir(path);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, "iter_", 5) == 0) looks_like_root = 1;
    if (d) closedir(d);
    if (looks_like_root) {
        LJ_TRY(lj_ckpt_latest(path, iteration));
        LJ_TRY(lj_path_format(root, "%s", path));
        *is_state = 1;
        LJ_TRY(lj_ckpt_iter_dir(path, *iteration, probe));
        return lj_path_join(hf_dir, probe, "hf");
    }
    return lj_path_format(hf_dir, "%s", path);
}

/* ---- per-rank shard files ----------------------------------------------------------- */

enum { SHARD_META = 9 };

/* The metadata a shard file of this rank carries (values written into `values`, 32 bytes each). */
static void shard_metadata(const lj_dp *dp, const lj_model *m, int iteration, const char **keys,
                           char values[SHARD_META][32]) {
    static const char *names[SHARD_META] = {"format", "iteration", "world_size", "zero_stage", "rank",
                                            "partition", "shard_begin", "shard_numel", "parameters"};
    const int zero3 = lj_model_shards_params(m);
    snprintf(values[0], 32, "ljperf-zero-shard");
    snprintf(values[1], 32, "%d", iteration);
    snprintf(values[2], 32, "%d", dp->world);
    snprintf(values[3], 32, "%d", dp->zero_stage);
    snprintf(values[4], 32, "%d", dp->rank);
    snprintf(values[5], 32, "%s", zero3 ? "zero3" : "flat");
    snprintf(values[6], 32, "%lld", (long long)m->shard_begin);
    snprintf(values[7], 32, "%lld", (long long)m->shard_numel);
    snprintf(values[8], 32, "%lld", (long long)m->layout.total);
    for (int i = 0; i < SHARD_META; i++) keys[i] = names[i];
}

/* Copies n f32 of a shard buffer (device memory, or host memory under offload) to the host. */
static void shard_download(const lj_model *m, float *dst, const float *src, int64_t n) {
    if (m->offload_host) memcpy(dst, src, (size_t)n * sizeof(float));
    else m->ops->download(dst, src, (size_t)n * sizeof(float));
}

static void shard_upload(const lj_model *m, float *dst, const float *src, int64_t n) {
    if (m->offload_host) memcpy(dst, src, (size_t)n * sizeof(float));
    else m->ops->upload(dst, src, (size_t)n * sizeof(float));
}

static const char *const shard_tensor_names[3] = {"master", "adam_m", "adam_v"};

/* Writes this rank's shard of the f32 master weights and AdamW moments, as this rank holds them
 * (device memory, or host memory under optimizer offload), to the safetensors file `path`
 * (atomic). ZeRO-1/2: flat positions [shard_begin, shard_begin + shard_numel) of the layout,
 * padding after P included; ZeRO-3: the shard in the layer partition's order. */
static lj_status save_shard(const lj_dp *dp, const lj_model *m, const char *path, int iteration) {
    const int64_t S = m->shard_numel;
    float *host = lj_malloc((size_t)(3 * S > 0 ? 3 * S : 1) * sizeof(float));
    const float *src[3] = {m->master, m->adam_m, m->adam_v};
    lj_st_tensor t[3];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 3; i++) {
        shard_download(m, host + i * S, src[i], S);
        t[i].name = shard_tensor_names[i];
        t[i].dtype = LJ_ST_F32;
        t[i].ndim = 1;
        t[i].shape[0] = S;
        t[i].data = host + i * S;
    }
    const char *keys[SHARD_META];
    char values[SHARD_META][32];
    shard_metadata(dp, m, iteration, keys, values);
    const char *vals[SHARD_META];
    for (int i = 0; i < SHARD_META; i++) vals[i] = values[i];
    lj_status s = lj_ckpt_write_tensors(path, t, 3, keys, vals, SHARD_META, NULL);
    free(host);
    return s;
}

/* The inverse, for a resume on the same world size and ZeRO stage: checks every metadata field
 * against this rank and the three tensors (F32, shard_numel elements), requires the file's master
 * shard to equal bit for bit the one m holds already (set from the consolidated
 * state.safetensors), then loads the master shard and the moments. Nothing is written unless
 * every check passes. */
static lj_status load_shard(const lj_dp *dp, lj_model *m, const char *path, int iteration) {
    const int64_t S = m->shard_numel;
    lj_safetensors st;
    lj_status s = lj_safetensors_open(&st, path);
    if (s != LJ_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", lj_error_message());
        return lj_fail(s, "%s (this run has the saving world size and ZeRO stage, so it resumes from the per-rank "
                          "shard files; restore the file, or resume on another number of ranks to use the "
                          "consolidated state.safetensors)", why);
    }
    const char *keys[SHARD_META];
    char want[SHARD_META][32];
    shard_metadata(dp, m, iteration, keys, want);
    for (int i = 0; i < SHARD_META && s == LJ_OK; i++) {
        const char *have = lj_safetensors_metadata(&st, keys[i]);
        if (!have) s = lj_fail(LJ_ERR_FORMAT, "%s: metadata '%s' is missing (not a ZeRO shard file?)", path, keys[i]);
        else if (strcmp(have, want[i]) != 0)
            s = lj_fail(LJ_ERR_FORMAT, "%s: metadata '%s' is %.40s, this rank needs %s (a shard file of another rank, "
                                       "world size, ZeRO stage, iteration or model?)", path, keys[i], have, want[i]);
    }
    const lj_st_entry *e[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3 && s == LJ_OK; i++) {
        e[i] = lj_safetensors_find(&st, shard_tensor_names[i]);
        if (!e[i]) s = lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' is missing", path, shard_tensor_names[i]);
        else if (e[i]->dtype != LJ_ST_F32)
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' has dtype %s, expected F32", path, e[i]->name,
                        lj_st_dtype_name(e[i]->dtype));
        else if (e[i]->numel != S)
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' has %lld elements, this rank's shard has %lld", path, e[i]->name,
                        (long long)e[i]->numel, (long long)S);
        else s = lj_ckpt_verify_tensor(&st, e[i], NULL);
    }
    if (s == LJ_OK && S > 0) {
        /* the parameters were derived from state.safetensors' master: the shard must be the same save */
        float *held = lj_malloc((size_t)S * sizeof(float));
        shard_download(m, held, m->master, S);
        if (memcmp(held, e[0]->data, (size_t)S * sizeof(float)) != 0)
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor 'master' differs from this rank's part of %s's master (a shard file "
                                       "of another save, or a corrupted file)", path, "state.safetensors");
        free(held);
    }
    if (s == LJ_OK && S > 0) {
        float *dst[3] = {m->master, m->adam_m, m->adam_v};
        for (int i = 0; i < 3; i++) shard_upload(m, dst[i], (const float *)e[i]->data, S);
    }
    lj_safetensors_close(&st);
    return s;
}

/* ---- the state ------------------------------------------------------------------------ */

static char *state_json(const lj_run_state *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "iteration", r->iteration);
    cJSON_AddNumberToObject(root, "consumed_samples", (double)r->consumed_samples);
    lj_loader_state ls;
    lj_loader_get_state(r->train_data, &ls);
    cJSON_AddItemToObject(root, "data", lj_loader_state_to_json(&ls));
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddNumberToObject(model, "vocab_size", r->model_cfg->vocab_size);
    cJSON_AddNumberToObject(model, "hidden_size", r->model_cfg->hidden_size);
    cJSON_AddNumberToObject(model, "intermediate_size", r->model_cfg->intermediate_size);
    cJSON_AddNumberToObject(model, "num_hidden_layers", r->model_cfg->num_hidden_layers);
    cJSON_AddNumberToObject(model, "num_attention_heads", r->model_cfg->num_attention_heads);
    cJSON_AddNumberToObject(model, "num_key_value_heads", r->model_cfg->num_key_value_heads);
    cJSON_AddNumberToObject(model, "head_dim", r->model_cfg->head_dim);
    cJSON_AddBoolToObject(model, "tie_word_embeddings", r->model_cfg->tie_word_embeddings);
    cJSON *run_cfg = cJSON_AddObjectToObject(root, "run");
    cJSON_AddNumberToObject(run_cfg, "micro_batch_size", r->micro_batch_size);
    cJSON_AddNumberToObject(run_cfg, "seq_length", r->seq_length);
    cJSON_AddNumberToObject(run_cfg, "global_batch_size", r->global_batch_size);
    cJSON_AddNumberToObject(run_cfg, "seed", (double)r->seed);
    /* the saving world: a resume with the same world size and ZeRO stage reads the per-rank shard
     * files of the master weights and AdamW moments (zero_shard_rank_RRRRR.safetensors) */
    cJSON *zero = cJSON_AddObjectToObject(root, "zero");
    cJSON_AddNumberToObject(zero, "world_size", r->dp->world);
    cJSON_AddNumberToObject(zero, "stage", r->dp->zero_stage);
    cJSON_AddBoolToObject(zero, "shard_files", has_shard_files(r->dp));
    /* the FP8 recipe's state (model/linear.h), tensor "fp8.state": amax histories and scales */
    const lj_linear_fp8_state *f8 = &r->model->linear_fp8;
    if (f8->active) {
        cJSON *fp8 = cJSON_AddObjectToObject(root, "fp8");
        char what[200];
        lj_linear_fp8_describe(&r->model->opt.fp8, what, sizeof what);
        int64_t nh, ns;
        cJSON_AddStringToObject(fp8, "recipe", what);
        cJSON_AddNumberToObject(fp8, "num_linears", f8->num_linears);
        cJSON_AddNumberToObject(fp8, "history_len", f8->history_len);
        cJSON_AddNumberToObject(fp8, "state_numel", (double)lj_linear_fp8_state_numel(f8, &nh, &ns));
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

/* Checks that a checkpoint's model and batch shape match this run. */
static lj_status check_state(const lj_run_state *r, const cJSON *root, const char *file) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const struct { const char *field; int want; } f[] = {
        {"vocab_size", r->model_cfg->vocab_size}, {"hidden_size", r->model_cfg->hidden_size},
        {"intermediate_size", r->model_cfg->intermediate_size}, {"num_hidden_layers", r->model_cfg->num_hidden_layers},
        {"num_attention_heads", r->model_cfg->num_attention_heads}, {"num_key_value_heads", r->model_cfg->num_key_value_heads},
        {"head_dim", r->model_cfg->head_dim}, {"tie_word_embeddings", r->model_cfg->tie_word_embeddings},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(model, f[i].field);
        const int have = cJSON_IsBool(it) ? cJSON_IsTrue(it) : (cJSON_IsNumber(it) ? it->valueint : -1);
        if (have != f[i].want)
            return lj_fail(LJ_ERR_FORMAT, "%s: checkpoint from another model shape: model.%s is %d, this run has %d", file,
                           f[i].field, have, f[i].want);
    }
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(root, "run");
    /* the micro-batch size may change (another world size or accumulation): a step's global
     * samples are the same set whatever their split (data/loader.h) */
    const struct { const char *field; int want; } g[] = {
        {"seq_length", r->seq_length}, {"global_batch_size", r->global_batch_size}};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(rc, g[i].field);
        if (!cJSON_IsNumber(it) || it->valueint != g[i].want)
            return lj_fail(LJ_ERR_FORMAT,
                           "%s: run.%s is %d in the checkpoint but %d now (a resume continues the same global batches: "
                           "keep --seq-length and --global-batch-size; the micro-batch size and the number of ranks "
                           "may change)",
                           file, g[i].field, cJSON_IsNumber(it) ? it->valueint : -1, g[i].want);
    }
    return LJ_OK;
}

/* Checks that state.json's iteration is the directory's, and that its consumed samples are
 * iteration x global batch (a run keeps its global batch, check_state) and the data loader's. */
static lj_status check_position(const cJSON *root, const char *file, int iteration) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "iteration");
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(root, "consumed_samples");
    const cJSON *gbs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "run"), "global_batch_size");
    const cJSON *data_cs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "data"), "consumed_samples");
    if (!cJSON_IsNumber(it) || !cJSON_IsNumber(cs))
        return lj_fail(LJ_ERR_FORMAT, "%s: missing field 'iteration' or 'consumed_samples'", file);
    if (it->valuedouble != (double)iteration)
        return lj_fail(LJ_ERR_FORMAT, "%s: 'iteration' is %.0f, but the directory is iter_%07d (a state.json copied "
                                      "from another checkpoint?)", file, it->valuedouble, iteration);
    const double want = (double)iteration * gbs->valuedouble; /* gbs: a number, check_state said */
    if (cs->valuedouble != want)
        return lj_fail(LJ_ERR_FORMAT, "%s: 'consumed_samples' is %.0f, but iteration %d x run.global_batch_size %.0f is "
                                      "%.0f (an edited or mixed-up state.json?)", file, cs->valuedouble, iteration,
                       gbs->valuedouble, want);
    if (cJSON_IsNumber(data_cs) && data_cs->valuedouble != cs->valuedouble)
        return lj_fail(LJ_ERR_FORMAT, "%s: 'data.consumed_samples' is %.0f, but 'consumed_samples' is %.0f", file,
                       data_cs->valuedouble, cs->valuedouble);
    return LJ_OK;
}

typedef struct {
    const lj_run_state *r;
    const float *weights;
} export_ctx;

static lj_status export_hf(const char *dir, void *ctx) {
    const export_ctx *e = ctx;
    char path[LJ_PATH_MAX];
    LJ_TRY(lj_path_join(path, dir, "hf"));
    LJ_TRY(lj_hf_export(path, e->r->model_cfg, e->weights, e->r->hf_dtype, 5ull << 30));
    return e->r->tokenizer ? lj_tokenizer_export_hf(e->r->tokenizer, path, e->r->model_cfg) : LJ_OK;
}

/* LJ_OK when every value of the n f32 at x is finite; else an error naming the tensor. */
static lj_status check_finite(const lj_run_state *r, const char *name, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return lj_fail(LJ_ERR_ARG, "iteration %d: the state is not saved: tensor '%s' holds %f at element %lld "
                                       "(training diverged; the latest checkpoint in %s is left as it was)",
                           r->iteration, name, x[i], (long long)i, r->save);
    return LJ_OK;
}

/* Writes and installs the iteration directory from the gathered state (rank 0), without
 * publishing it in the latest file. A state with a non-finite weight or moment is refused:
 * it never becomes the latest checkpoint, nor prunes a good one. */
static lj_status save_checkpoint(lj_run_state *r, float *w, float *mm, float *vv) {
    const int64_t P = r->model->layout.total;
    LJ_TRY(check_finite(r, "master", w, P));
    LJ_TRY(check_finite(r, "adam.m", mm, P));
    LJ_TRY(check_finite(r, "adam.v", vv, P));
    int64_t nh, ns;
    const int fp8 = r->model->linear_fp8.active;
    const int64_t n8 = fp8 ? lj_linear_fp8_state_numel(&r->model->linear_fp8, &nh, &ns) : 0;
    float *f8 = fp8 ? lj_malloc((size_t)n8 * sizeof(float)) : NULL;
    if (fp8) lj_linear_fp8_state_get(r->model, f8);
    const lj_ckpt_tensor t[4] = {{"master", w, P}, {"adam.m", mm, P}, {"adam.v", vv, P}, {"fp8.state", f8, n8}};
    char *json = state_json(r);
    export_ctx ctx = {r, w};
    lj_status s = lj_ckpt_write_iteration(r->save, r->iteration, t, fp8 ? 4 : 3, json, export_hf, &ctx);
    free(json);
    free(f8);
    return s;
}

/* Whether the checkpoint's state.json has FP8 recipe state this run can take (same linears and
 * history length): *numel its size, 0 when not (a note says why the recipe starts fresh). */
static int64_t fp8_state_to_load(const lj_run_state *r, const cJSON *state, const char *file) {
    const lj_linear_fp8_state *f8 = &r->model->linear_fp8;
    const cJSON *fp8 = cJSON_GetObjectItemCaseSensitive(state, "fp8");
    if (!f8->active) {
        if (fp8) lj_log_info("%s: the checkpoint's FP8 recipe state is not used (this run has no FP8 linears)", file);
        return 0;
    }
    int64_t nh, ns;
    const int64_t want = lj_linear_fp8_state_numel(f8, &nh, &ns);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(fp8, "state_numel");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(fp8, "num_linears");
    const cJSON *hl = cJSON_GetObjectItemCaseSensitive(fp8, "history_len");
    if (!cJSON_IsNumber(n) || !cJSON_IsNumber(f) || !cJSON_IsNumber(hl) || (int64_t)n->valuedouble != want ||
        f->valueint != f8->num_linears || hl->valueint != f8->history_len) {
        lj_log_info("%s: %s: the FP8 amax histories and scales start fresh", file,
                    fp8 ? "its FP8 recipe state has another shape (FP8 layers or amax history length)"
                        : "no FP8 recipe state in it (saved by a run without FP8)");
        return 0;
    }
    return want;
}

/* Sums a failure flag across ranks: LJ_OK only if every rank's `s` is LJ_OK; a rank that was fine
 * itself fails with `what` when another one was not. Collective. */
static lj_status all_ok(lj_run_state *r, lj_status s, const char *what) {
    float failed = s != LJ_OK;
    lj_dp_sum(r->dp, r->model, &failed, 1);
    if (s == LJ_OK && failed > 0.0f) s = lj_fail(LJ_ERR_IO, "%s", what);
    return s;
}

/* The ranks gather the sharded state to rank 0, which writes the iteration directory with the
 * whole state, so a run resumes on any number of ranks (each takes its shard at load). Under
 * ZeRO stage >= 1 over several ranks every rank then adds its own shard file
 * (zero_shard_rank_RRRRR.safetensors, lj_dp_save_shard) to that directory, and only when all of
 * them are written does rank 0 publish the iteration in the latest file: a published checkpoint
 * has all its shards. All ranks learn whether each phase worked, so that none waits for a rank
 * that stopped. */
lj_status lj_run_state_save(lj_run_state *r) {
    const int64_t P = r->model->layout.total;
    float *w = NULL, *mm = NULL, *vv = NULL;
    if (r->dp->rank == 0) {
        w = lj_malloc((size_t)P * sizeof(float));
        mm = lj_malloc((size_t)P * sizeof(float));
        vv = lj_malloc((size_t)P * sizeof(float));
    }
    const double t0 = lj_time_sec();
    lj_dp_gather_state(r->dp, r->model, w, mm, vv);
    lj_status s = r->dp->rank == 0 ? save_checkpoint(r, w, mm, vv) : LJ_OK;
    free(w);
    free(mm);
    free(vv);
    s = all_ok(r, s, "rank 0 could not save the checkpoint");
    const int shards = has_shard_files(r->dp);
    char file[LJ_PATH_MAX];
    if (shards) {
        if (s == LJ_OK) s = lj_ckpt_shard_file(r->save, r->iteration, r->dp->rank, file);
        if (s == LJ_OK) s = save_shard(r->dp, r->model, file, r->iteration);
        s = all_ok(r, s, "another rank could not write its ZeRO shard file (see its message)");
    }
    if (r->dp->rank == 0 && s == LJ_OK) s = lj_ckpt_publish(r->save, r->iteration, r->keep_last);
    s = all_ok(r, s, "rank 0 could not save the checkpoint");
    if (s == LJ_OK) {
        char dir[LJ_PATH_MAX];
        (void)lj_ckpt_iter_dir(r->save, r->iteration, dir); /* fits: the save above used it */
        if (!r->quiet) lj_log_info("saved checkpoint at iteration %d to %s (%.1f s; Hugging Face export in %s/hf%s)", r->iteration, dir,
                    lj_time_sec() - t0, dir, shards ? "; one ZeRO shard file per rank" : "");
    }
    return s;
}

/* Loads --load: a training-state root (latest_checkpointed_iteration.txt or iter_* dirs) for an
 * exact resume, else a Hugging Face checkpoint directory for continued training. */
lj_status lj_run_state_load(lj_run_state *r, const char *load) {
    char root[LJ_PATH_MAX], hf[LJ_PATH_MAX];
    int iteration = 0, is_state = 0;
    LJ_TRY(lj_ckpt_resolve_load(load, root, &iteration, &is_state, hf));
    if (!is_state) {
        const int64_t P = r->model->layout.total;
        float *w = lj_malloc((size_t)P * sizeof(float));
        lj_status s = lj_hf_import(hf, r->model_cfg, w);
        if (s == LJ_OK) lj_model_set_weights(r->model, w);
        free(w);
        if (s != LJ_OK) return s;
        lj_log_info("loaded Hugging Face weights from %s (optimizer state starts fresh)", hf);
        return LJ_OK;
    }
    char dir[LJ_PATH_MAX], file[LJ_PATH_MAX];
    LJ_TRY(lj_ckpt_iter_dir(root, iteration, dir));
    LJ_TRY(lj_path_join(file, dir, LJ_CKPT_STATE_FILE));
    /* state.json first (checked against its checksum), so that a checkpoint of another shape is
     * named as such */
    char *text = NULL;
    LJ_TRY(lj_ckpt_read_state_json(root, iteration, &text));
    cJSON *state = cJSON_Parse(text);
    free(text);
    lj_status s = state ? check_state(r, state, file) : lj_fail(LJ_ERR_FORMAT, "%s: not valid JSON", file);
    if (s == LJ_OK) s = check_position(state, file, iteration);
    /* the per-rank shard files when this run has the saving world size and ZeRO stage */
    const cJSON *zero = state ? cJSON_GetObjectItemCaseSensitive(state, "zero") : NULL;
    const cJSON *zw = cJSON_GetObjectItemCaseSensitive(zero, "world_size"), *zs = cJSON_GetObjectItemCaseSensitive(zero, "stage");
    const int saved_shards = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(zero, "shard_files")) && cJSON_IsNumber(zw) &&
                             cJSON_IsNumber(zs);
    const int use_shards = s == LJ_OK && saved_shards && has_shard_files(r->dp) &&
                           zw->valueint == r->dp->world && zs->valueint == r->dp->zero_stage;
    if (s == LJ_OK && !use_shards && (saved_shards || has_shard_files(r->dp))) {
        if (saved_shards)
            lj_log_info("%s: saved on %d ranks under ZeRO stage %d, this run has %d ranks under stage %d: the per-rank "
                        "ZeRO shard files are not used; resuming from the consolidated %s", dir, zw->valueint,
                        zs->valueint, r->dp->world, r->dp->zero_stage, LJ_CKPT_TENSORS_FILE);
        else
            lj_log_info("%s: no per-rank ZeRO shard files in this checkpoint: resuming from the consolidated %s", dir,
                        LJ_CKPT_TENSORS_FILE);
    }
    const int64_t P = r->model->layout.total;
    float *w = lj_malloc((size_t)P * sizeof(float));
    float *mm = use_shards ? NULL : lj_malloc((size_t)P * sizeof(float));
    float *vv = use_shards ? NULL : lj_malloc((size_t)P * sizeof(float));
    const int64_t n8 = s == LJ_OK ? fp8_state_to_load(r, state, file) : 0;
    float *f8 = n8 ? lj_malloc((size_t)n8 * sizeof(float)) : NULL;
    lj_ckpt_tensor t[4] = {{"master", w, P}, {"adam.m", mm, P}, {"adam.v", vv, P}, {"fp8.state", f8, n8}};
    int nt = use_shards ? 1 : 3;
    if (n8) t[nt++] = t[3];
    char *json = NULL;
    /* from shards, the consolidated file gives the weights only (the parameters are derived
     * from them as on any resume); the moments come from the shard files */
    if (s == LJ_OK) s = lj_ckpt_load_ex(root, iteration, t, nt, &json, !use_shards);
    if (s == LJ_OK && n8) lj_linear_fp8_state_set(r->model, f8);
    free(f8);
    if (s == LJ_OK) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(state, "iteration");
        const cJSON *cs = cJSON_GetObjectItemCaseSensitive(state, "consumed_samples");
        if (!cJSON_IsNumber(it) || !cJSON_IsNumber(cs))
            s = lj_fail(LJ_ERR_FORMAT, "%s: missing field 'iteration' or 'consumed_samples'", file);
        else {
            r->iteration = it->valueint;
            r->consumed_samples = (int64_t)cs->valuedouble;
            lj_loader_state ls;
            s = lj_loader_state_from_json(cJSON_GetObjectItemCaseSensitive(state, "data"), &ls, file);
            if (s == LJ_OK) s = lj_loader_set_state(r->train_data, &ls);
        }
    }
    if (use_shards) {
        /* every rank reaches this point (state.json is the same for all): the params and the master
         * shard from the consolidated weights, then this rank's master and moments from its file */
        char shard[LJ_PATH_MAX];
        if (s == LJ_OK) s = lj_ckpt_shard_file(root, iteration, r->dp->rank, shard);
        if (s == LJ_OK) {
            lj_model_set_weights(r->model, w);
            s = load_shard(r->dp, r->model, shard, iteration);
        }
        s = all_ok(r, s, "another rank could not load its ZeRO shard file (see its message)");
        if (s == LJ_OK)
            lj_log_info("resumed from %s at iteration %d (master weights and AdamW moments from the per-rank ZeRO "
                        "shard files, " LJ_CKPT_SHARD_FILE_FMT " and the others; parameters from %s)",
                        dir, r->iteration, r->dp->rank, LJ_CKPT_TENSORS_FILE);
    } else if (s == LJ_OK) {
        lj_dp_scatter_state(r->dp, r->model, w, mm, vv); /* this rank's shard, whatever the saving world size */
        lj_log_info("resumed from %s at iteration %d", dir, r->iteration);
    }
    cJSON_Delete(state);
    free(json);
    free(w);
    free(mm);
    free(vv);
    return s;
}

/* state.c: a training run's resumable state (state.h). */
#include "checkpoint/state.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hf_cache.h"
#include "base/progress.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded.h"
#include "data/tokenizer_export.h"
#include "io/hf.h"
#include "io/safetensors.h"
#include "parallel/zero.h"
#include "parallel/zero3.h"

/* Whether this run keeps per-rank ZeRO shard files in its checkpoints: ZeRO stage >= 1 over
 * more than one rank (the f32 master weights and AdamW moments are sharded). */
static int has_shard_files(const lj_dp *dp) { return dp->world > 1 && dp->zero_stage >= 1; }

/* hf[LJ_PATH_MAX] = ITER/hf, or ITER itself (its config.json) when it was saved without an HF
 * export (--no-save-hf). */
static lj_status hf_dir_of(const char *iter, char *hf) {
    struct stat st;
    LJ_TRY(lj_path_join(hf, iter, "hf"));
    if (stat(hf, &st) == 0) return LJ_OK;
    char probe[LJ_PATH_MAX];
    LJ_TRY(lj_path_join(probe, iter, "config.json"));
    if (stat(probe, &st) == 0) return lj_path_format(hf, "%s", iter);
    return LJ_OK;
}

lj_status lj_ckpt_resolve_load(const char *path, char *root, int *iteration, int *is_state, char *hf_dir) {
    struct stat st;
    char probe[LJ_PATH_MAX];
    *is_state = 0;
    /* ORG/NAME that is no local path: the model's snapshot in the Hugging Face cache */
    if (stat(path, &st) != 0 && lj_hf_repo_id_like(path)) return lj_hf_cache_snapshot(path, "--load", hf_dir, LJ_PATH_MAX);
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
        return hf_dir_of(path, hf_dir);
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
        return hf_dir_of(probe, hf_dir);
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
static const char *const shard_tensor_names[3] = {"master", "adam_m", "adam_v"};

/* Writes this rank's shard of the f32 master weights and AdamW moments, as this rank holds them
 * (device memory, or host memory under optimizer offload), to the safetensors file `path`
 * (atomic). ZeRO-1/2: flat positions [shard_begin, shard_begin + shard_numel) of the layout,
 * padding after P included; ZeRO-3: the shard in the layer partition's order. */
static lj_status save_shard(const lj_dp *dp, const lj_model *m, const char *path, int iteration) {
    const int64_t S = m->shard_numel;
    float *host = lj_malloc((size_t)(3 * S > 0 ? 3 * S : 1) * sizeof(float));
    lj_st_tensor t[3];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 3; i++) {
        lj_model_state_download(m, i, host + i * S, 0, S);
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
        lj_model_state_download(m, LJ_STATE_MASTER, held, 0, S);
        if (memcmp(held, e[0]->data, (size_t)S * sizeof(float)) != 0)
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor 'master' differs from this rank's part of %s's master (a shard file "
                                       "of another save, or a corrupted file)", path, "state.safetensors");
        free(held);
    }
    if (s == LJ_OK && S > 0) {
        for (int i = 0; i < 3; i++) lj_model_state_upload(m, i, (const float *)e[i]->data, 0, S);
    }
    lj_safetensors_close(&st);
    return s;
}

/* ---- the state ------------------------------------------------------------------------ */

static char *state_json(const lj_run_state *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "iteration", r->iteration);
    cJSON_AddNumberToObject(root, "consumed_samples", (double)r->consumed_samples);
    if (r->schedule_start) cJSON_AddNumberToObject(root, "optimizer_start_iteration", r->schedule_start);
    lj_loader_state ls;
    lj_loader_get_state(r->train_data, &ls);
    cJSON *data = lj_loader_state_to_json(&ls);
    cJSON_AddItemToObject(data, "datasets", lj_loader_fingerprint_to_json(r->train_data));
    cJSON_AddItemToObject(root, "data", data);
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
    if (r->rampup.start > 0) {
        const double ramp[3] = {(double)r->rampup.start, (double)r->rampup.increment, (double)r->rampup.samples};
        cJSON_AddItemToObject(run_cfg, "rampup_batch_size", cJSON_CreateDoubleArray(ramp, 3));
    }
    cJSON_AddNumberToObject(run_cfg, "seed", (double)r->seed);
    /* the saving world: a resume with the same world size and ZeRO stage reads the per-rank shard
     * files of the master weights and AdamW moments (zero_shard_rank_RRRRR.safetensors) */
    cJSON *zero = cJSON_AddObjectToObject(root, "zero");
    cJSON_AddNumberToObject(zero, "world_size", r->dp->world);
    cJSON_AddNumberToObject(zero, "stage", r->dp->zero_stage);
    cJSON_AddBoolToObject(zero, "shard_files", has_shard_files(r->dp) && r->format == LJ_CKPT_FORMAT_TORCH);
    /* the FP8 recipe's state (model/linear.h), tensor "fp8.state": amax histories and scales */
    const lj_linear_fp8_state *f8 = &r->model->linear.fp8;
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
    /* the ramp-up: the same batches at the same iterations (absent: none) */
    const cJSON *ramp = cJSON_GetObjectItemCaseSensitive(rc, "rampup_batch_size");
    const double want[3] = {(double)r->rampup.start, (double)r->rampup.increment, (double)r->rampup.samples};
    double have[3] = {0, 0, 0};
    int same = ramp == NULL || cJSON_GetArraySize(ramp) == 3;
    for (int k = 0; ramp && same && k < 3; k++) {
        const cJSON *v = cJSON_GetArrayItem(ramp, k);
        same = cJSON_IsNumber(v);
        if (same) have[k] = v->valuedouble;
    }
    if (ramp && !same) return lj_fail(LJ_ERR_FORMAT, "%s: run.rampup_batch_size must be 3 numbers", file);
    if (have[0] != want[0] || have[1] != want[1] || have[2] != want[2]) {
        char h[80] = "none", w[80] = "none";
        if (ramp) snprintf(h, sizeof h, "%.0f %.0f %.0f", have[0], have[1], have[2]);
        if (r->rampup.start > 0) snprintf(w, sizeof w, "%.0f %.0f %.0f", want[0], want[1], want[2]);
        return lj_fail(LJ_ERR_FORMAT, "%s: run.rampup_batch_size is %s in the checkpoint but --rampup-batch-size is %s "
                                      "now (a resume continues the same global batches: give the checkpoint's "
                                      "--rampup-batch-size)", file, h, w);
    }
    return LJ_OK;
}

/* Checks that state.json's iteration is the directory's, and that its consumed samples are
 * iteration x global batch, or under a ramp-up the sum of its iterations' batches (a run keeps its
 * global batch and ramp-up, check_state), and the data loader's. */
static lj_status check_position(const lj_run_state *r, const cJSON *root, const char *file, int iteration) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "iteration");
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(root, "consumed_samples");
    const cJSON *gbs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "run"), "global_batch_size");
    const cJSON *data_cs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "data"), "consumed_samples");
    if (!cJSON_IsNumber(it) || !cJSON_IsNumber(cs))
        return lj_fail(LJ_ERR_FORMAT, "%s: missing field 'iteration' or 'consumed_samples'", file);
    if (it->valuedouble != (double)iteration)
        return lj_fail(LJ_ERR_FORMAT, "%s: 'iteration' is %.0f, but the directory is iter_%07d (a state.json copied "
                                      "from another checkpoint?)", file, it->valuedouble, iteration);
    const double want = r->rampup.start > 0 ? (double)lj_rampup_consumed(&r->rampup, iteration)
                                            : (double)iteration * gbs->valuedouble; /* gbs: a number, check_state said */
    if (r->rampup.start > 0 && cs->valuedouble != want)
        return lj_fail(LJ_ERR_FORMAT, "%s: 'consumed_samples' is %.0f, but %d iterations of the ramp-up "
                                      "run.rampup_batch_size consume %.0f (an edited or mixed-up state.json?)", file,
                       cs->valuedouble, iteration, want);
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
    LJ_TRY(lj_path_join(path, dir, "config.json"));
    LJ_TRY(lj_config_save(e->r->model_cfg, path, e->r->hf_dtype == LJ_DTYPE_BF16 ? "bfloat16" : "float32"));
    if (!e->r->save_hf) return LJ_OK;
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
    const int fp8 = r->model->linear.fp8.active;
    const int64_t n8 = fp8 ? lj_linear_fp8_state_numel(&r->model->linear.fp8, &nh, &ns) : 0;
    float *f8 = fp8 ? lj_malloc((size_t)n8 * sizeof(float)) : NULL;
    if (fp8) lj_linear_state_get(&r->model->linear, f8);
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
    const lj_linear_fp8_state *f8 = &r->model->linear.fp8;
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
static lj_status save_consolidated(lj_run_state *r) {
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

/* ---- the sharded format (checkpoint/sharded.h) ------------------------------------------ */

static const char *const state_names[3] = {"master", "adam.m", "adam.v"};

/* A flat range of the state this rank holds, inside one parameter tensor. */
typedef struct {
    int64_t flat, n;       /* elements of the global [P] tensors */
    int64_t shard_offset;  /* where it sits in this rank's shard buffers */
    int64_t packed;        /* where it sits in a packed host copy (--async-save) */
    const char *param;     /* the parameter's HF name */
} state_piece;

static void push_piece(state_piece **v, int *n, int *cap, int64_t flat, int64_t count, int64_t shard_offset,
                       const char *param) {
    if (count <= 0) return;
    if (*n == *cap) *v = lj_realloc(*v, (size_t)(*cap = *cap ? 2 * *cap : 64) * sizeof **v);
    (*v)[(*n)++] = (state_piece){flat, count, shard_offset, 0, param};
}

/* The pieces of this rank's shard in shard order, cut at parameter boundaries: ZeRO-3's layer
 * pieces, ZeRO-1/2's flat range [shard_begin, shard_begin + shard_numel) clipped to P, or the
 * replicated state (no ZeRO, or one rank): all of it to load, and to save (for_save) the rank's
 * 1/W of it so that the ranks write in parallel. Returns the count; *out is heap-allocated. */
static int state_pieces(const lj_run_state *r, int for_save, state_piece **out) {
    const lj_model *m = r->model;
    const lj_param_layout *lo = &m->layout;
    const int64_t P = lo->total;
    state_piece *v = NULL;
    int n = 0, cap = 0;
    const lj_zero3 *z = lj_zero3_of(m);
    if (z && z->shard_params) {
        const int np = lj_zero_shard_params(&z->part, lo, z->rank, NULL, 0);
        lj_zero_param_piece *pp = lj_calloc((size_t)(np > 0 ? np : 1), sizeof *pp);
        lj_zero_shard_params(&z->part, lo, z->rank, pp, np);
        for (int i = 0; i < np; i++)
            push_piece(&v, &n, &cap, lo->params[pp[i].param].offset + pp[i].begin, pp[i].end - pp[i].begin,
                       pp[i].shard_offset, lo->params[pp[i].param].name);
        free(pp);
    } else {
        int64_t b = m->shard_begin, e = m->shard_begin + m->shard_numel;
        const int replicated = m->shard_begin == 0 && m->shard_numel >= P;
        if (replicated && for_save && r->dp->world > 1) {
            b = P * r->dp->rank / r->dp->world;
            e = P * (r->dp->rank + 1) / r->dp->world;
        }
        if (e > P) e = P;
        for (int i = 0; i < lo->count; i++) {
            const lj_param_info *p = &lo->params[i];
            const int64_t pb = p->offset > b ? p->offset : b, pe = p->offset + p->numel < e ? p->offset + p->numel : e;
            push_piece(&v, &n, &cap, pb, pe - pb, pb - m->shard_begin, p->name);
        }
    }
    int64_t packed = 0;
    for (int i = 0; i < n; i++) v[i].packed = packed, packed += v[i].n;
    *out = v;
    return n;
}

/* The source of one state tensor for the writer: this rank's shard buffer (device memory, or
 * host memory under offload), checked for non-finite values on the way. */
typedef struct {
    const lj_run_state *r;
    int src; /* the state tensor (LJ_STATE_*, lj_model_state_download) */
    const char *tensor;
    int64_t flat_delta; /* flat position - source offset of the current piece */
} model_source;

/* The first of n values of dtype (f32 or bf16) at p that is not finite, its value in *v; -1
 * when every one is. */
static int64_t first_nonfinite(const void *p, lj_dtype dtype, int64_t n, float *v) {
    if (dtype == LJ_DTYPE_BF16) {
        const uint16_t *h = p;
        for (int64_t i = 0; i < n; i++)
            if ((h[i] & 0x7f80u) == 0x7f80u) return *v = lj_bf16_to_f32(h[i]), i;
        return -1;
    }
    const float *f = p;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(f[i])) return *v = f[i], i;
    return -1;
}

static lj_status fetch_model(void *ctx, int64_t at, int64_t n, void *dst) {
    const model_source *ms = ctx;
    lj_model_state_copy_out(ms->r->model, ms->src, dst, at, n, 0);
    float v;
    const int64_t i = first_nonfinite(dst, lj_model_state_dtype(ms->r->model, ms->src), n, &v);
    if (i >= 0)
        return lj_fail(LJ_ERR_ARG, "iteration %d: the state is not saved: tensor '%s' holds %f at element %lld "
                                   "(training diverged; the latest checkpoint in %s is left as it was)",
                       ms->r->iteration, ms->tensor, v, (long long)(ms->flat_delta + at + i), ms->r->save);
    return LJ_OK;
}

/* A tensor of the packed host copy (or the FP8 state): its first byte and its element size. */
typedef struct {
    const char *base;
    size_t size;
} host_source;

static lj_status fetch_host(void *ctx, int64_t at, int64_t n, void *dst) {
    const host_source *h = ctx;
    memcpy(dst, h->base + (size_t)at * h->size, (size_t)n * h->size);
    return LJ_OK;
}

/* Peak host memory: /proc/self/status VmHWM and VmRSS, in KiB (0 when not readable). */
static int64_t proc_status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    int64_t v = 0;
    const size_t k = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0 && line[k] == ':') v = strtoll(line + k + 1, NULL, 10);
    fclose(f);
    return v;
}

/* Resets VmHWM to the current RSS (Linux: "5" into /proc/self/clear_refs); 0 when it cannot. */
static int reset_peak_rss(void) {
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    const int ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok;
}

struct lj_ckpt_async {
    int pending;            /* a save waits for lj_run_state_finish */
    int written;            /* set by the writer thread when it is done (atomic) */
    pthread_t thread;
    int iteration, save_hf;
    char tmp[LJ_PATH_MAX];
    char *state_json;
    char *host;             /* the packed copy: master [numel] f32, adam.m and adam.v [numel] as
                               stored (f32 or bf16), fp8 [n8] f32; pinned when the backend has it */
    void (*host_free)(void *ptr); /* the backend's, for pinned memory; NULL: free() */
    size_t host_bytes;      /* allocated */
    size_t at[4];           /* byte offsets of master, adam.m, adam.v, fp8 in host (async_layout) */
    int64_t numel, n8;
    const lj_model *model;  /* whose copies the writer waits for (lj_model_state_copy_wait) */
    state_piece *pieces;
    int npieces;
    lj_shard_writer writer;
    lj_status status;
    char error[2048];
    size_t staging;
    int rank, world;
    double t0, pause, t_written; /* lj_time_sec(): start, the step's pause, the writer's end */
    double t_copied;        /* lj_time_sec() when the writer found the copy done */
    int64_t rss0_kib;
};

lj_ckpt_async *lj_ckpt_async_create(void) {
    lj_ckpt_async *a = lj_calloc(1, sizeof *a);
    a->writer.fd = -1;
    return a;
}

void lj_ckpt_async_free(lj_ckpt_async *a) {
    if (!a) return;
    if (a->pending) pthread_join(a->thread, NULL); /* not sealed: its temporary directory is removed later */
    if (a->host_free) a->host_free(a->host);
    else free(a->host);
    free(a->pieces);
    free(a->state_json);
    lj_shard_writer_free(&a->writer);
    free(a);
}

/* The rank's shard file: each state tensor's pieces in the dtype model m stores it in
 * (lj_model_state_dtype), then (rank 0) the FP8 recipe state; from the shard buffers (sources[i]
 * with fetch_model) or from a packed host copy (host[3] != NULL: each tensor's [packed]
 * elements). `progress`: show it (base/progress.h; not from --async-save's thread, beside the
 * training). */
static lj_status write_shard(lj_shard_writer *w, const lj_model *m, const char *dir, int rank, int world,
                             size_t staging, const state_piece *pieces, int np, model_source *sources,
                             const char *const *host, const float *f8, int64_t n8, int progress) {
    /* the staging is pinned when the chunks come from device memory and the backend pins */
    const int pin = !host && m->ops->host_alloc && !m->offload;
    const lj_ops *ops = m->ops;
    LJ_TRY(lj_shard_writer_open(w, dir, rank, world, staging, pin ? ops->host_alloc : NULL, pin ? ops->host_free : NULL));
    lj_progress pg;
    if (progress) {
        uint64_t total = (uint64_t)n8 * sizeof(float);
        for (int t = 0; t < 3; t++)
            for (int i = 0; i < np; i++) total += (uint64_t)pieces[i].n * lj_dtype_size(lj_model_state_dtype(m, t));
        char what[LJ_PATH_MAX + 16];
        snprintf(what, sizeof what, "writing %s", w->path);
        lj_progress_begin(&pg, what, total);
        w->progress = &pg;
    }
    lj_status s = LJ_OK;
    for (int t = 0; t < 3 && s == LJ_OK; t++) {
        const lj_dtype dtype = lj_model_state_dtype(m, t);
        host_source hs = {host ? host[t] : NULL, lj_dtype_size(dtype)};
        for (int i = 0; i < np && s == LJ_OK; i++) {
            const state_piece *p = &pieces[i];
            if (host) {
                s = lj_shard_writer_add(w, state_names[t], p->param, p->flat, p->n, dtype, fetch_host, &hs, p->packed);
            } else {
                sources[t].flat_delta = p->flat - p->shard_offset;
                s = lj_shard_writer_add(w, state_names[t], p->param, p->flat, p->n, dtype, fetch_model, &sources[t],
                                        p->shard_offset);
            }
        }
    }
    host_source h8 = {(const char *)f8, sizeof(float)};
    if (s == LJ_OK && n8 > 0) s = lj_shard_writer_add(w, "fp8.state", NULL, 0, n8, LJ_DTYPE_F32, fetch_host, &h8, 0);
    if (s == LJ_OK) s = lj_shard_writer_close(w);
    w->progress = NULL;
    return s;
}

/* The packed host copy's first non-finite value, as fetch_model reports it; LJ_OK when none. */
static lj_status host_finite(const lj_ckpt_async *a) {
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < a->npieces; i++) {
            const state_piece *p = &a->pieces[i];
            const lj_dtype dtype = lj_model_state_dtype(a->model, t);
            float v;
            const int64_t j = first_nonfinite(a->host + a->at[t] + (size_t)p->packed * lj_dtype_size(dtype), dtype, p->n, &v);
            if (j >= 0)
                return lj_fail(LJ_ERR_ARG,
                               "iteration %d: the state is not saved: tensor '%s' holds %f at element %lld "
                               "(training diverged; the checkpoints already saved are left as they were)",
                               a->iteration, state_names[t], v, (long long)(p->flat + j));
        }
    return LJ_OK;
}

static void *async_writer(void *arg) {
    lj_ckpt_async *a = arg;
    const float *f8 = a->n8 ? (const float *)(a->host + a->at[3]) : NULL;
    const char *const host[3] = {a->host + a->at[0], a->host + a->at[1], a->host + a->at[2]};
    lj_model_state_copy_wait(a->model); /* the copies queued beside the training's stream */
    a->t_copied = lj_time_sec();
    a->status = host_finite(a); /* here, off the step: the scan of the copy took longer than the copy */
    if (a->status == LJ_OK)
        a->status = write_shard(&a->writer, a->model, a->tmp, a->rank, a->world, a->staging, a->pieces, a->npieces, NULL,
                                host, f8, a->n8, 0);
    if (a->status != LJ_OK) snprintf(a->error, sizeof a->error, "%s", lj_error_message());
    a->t_written = lj_time_sec();
    __atomic_store_n(&a->written, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void sink_host(void *ctx, int64_t at, const float *src, int64_t n) {
    memcpy((float *)ctx + at, src, (size_t)n * sizeof(float));
}

/* The HF export's source: n values of the master straight into dst (the export's chunk buffer:
 * no staging of its own), one pread per shard-file range. */
static lj_status read_master(void *ctx, int64_t offset, int64_t n, float *dst) {
    return lj_sharded_read_into(ctx, "master", offset, n, dst);
}

static const char *partition_name(const lj_run_state *r) {
    const lj_zero3 *z = lj_zero3_of(r->model);
    if (z && z->shard_params) return "zero3";
    return r->model->shard_numel >= r->model->layout.total ? "replicated" : "flat";
}

/* Rank 0: metadata.json, state.json, config.json and the HF export (from the shard files, tensor
 * by tensor, in chunks of LJ_ST_STREAM_CHUNK: io/safetensors.h) in `tmp`, then the directory renamed to ROOT/iter_NNNNNNN. */
static lj_status seal(const lj_run_state *r, const char *tmp, int iteration, const char *json, int save_hf) {
    char path[LJ_PATH_MAX], final[LJ_PATH_MAX];
    LJ_TRY(lj_sharded_write_metadata(tmp, iteration, r->dp->world, r->dp->zero_stage, partition_name(r), json));
    LJ_TRY(lj_path_join(path, tmp, LJ_CKPT_STATE_FILE));
    LJ_TRY(lj_file_write_atomic(path, json, strlen(json)));
    LJ_TRY(lj_path_join(path, tmp, "config.json"));
    LJ_TRY(lj_config_save(r->model_cfg, path, r->hf_dtype == LJ_DTYPE_BF16 ? "bfloat16" : "float32"));
    if (save_hf) {
        LJ_TRY(lj_path_join(path, tmp, "hf"));
        if (mkdir(path, 0755) != 0) return lj_fail(LJ_ERR_IO, "%s: cannot create directory: %s", path, strerror(errno));
        lj_sharded c;
        LJ_TRY(lj_sharded_open(&c, tmp));
        lj_status s = lj_hf_export_stream_into(path, r->model_cfg, read_master, &c, r->hf_dtype, 5ull << 30);
        lj_sharded_close(&c);
        if (s == LJ_OK && r->tokenizer) s = lj_tokenizer_export_hf(r->tokenizer, path, r->model_cfg);
        if (s == LJ_OK) s = lj_dir_fsync(path);
        LJ_TRY(s);
    }
    LJ_TRY(lj_dir_fsync(tmp));
    LJ_TRY(lj_ckpt_iter_dir(r->save, iteration, final));
    return lj_dir_install(tmp, final);
}

/* Every rank: the shard files are written (`s`: this rank's result); rank 0 seals and publishes.
 * Logs the save's line: the time from t0 to now, or for an async save (pause >= 0) to the
 * writer's end t_written on rank 0 plus the sealing, with the copy's end t_copied (seconds after
 * t0: when the writer found it done, so at most that). Rank 0 removes `tmp` when any phase
 * failed. Collective. */
static lj_status finalize(lj_run_state *r, lj_status s, const char *tmp, int iteration, const char *json, int save_hf,
                          size_t staging, uint64_t bytes, double t0, double pause, double t_written, double t_copied,
                          int64_t rss0_kib) {
    const double t_seal = lj_time_sec();
    s = all_ok(r, s, "another rank could not write its shard file (see its message)");
    if (r->dp->rank == 0 && s == LJ_OK) s = seal(r, tmp, iteration, json, save_hf);
    if (r->dp->rank == 0 && s != LJ_OK) lj_dir_remove_quiet(tmp);
    s = all_ok(r, s, "rank 0 could not save the checkpoint");
    if (r->dp->rank == 0 && s == LJ_OK) s = lj_ckpt_publish(r->save, iteration, r->keep_last);
    s = all_ok(r, s, "rank 0 could not publish the checkpoint");
    float total[1] = {(float)((double)bytes / (1 << 20))}; /* MiB, summed over the ranks */
    lj_dp_sum(r->dp, r->model, total, 1);
    if (s == LJ_OK && !r->quiet) {
        const double dt = pause >= 0 ? (t_written - t0) + (lj_time_sec() - t_seal) : lj_time_sec() - t0;
        const int64_t peak = proc_status_kib("VmHWM") - rss0_kib;
        char dir[LJ_PATH_MAX];
        (void)lj_ckpt_iter_dir(r->save, iteration, dir); /* fits: the save used it */
        char paused[192] = "";
        if (pause >= 0)
            snprintf(paused, sizeof paused, "; the step paused %.3f s to queue the copy, done %.2f s after it beside the "
                     "steps (the peak counts the steps since)", pause, t_copied - t0);
        lj_log_info("saved checkpoint at iteration %d to %s: %.1f MiB in %.2f s (%.1f MiB/s), %d shard file%s, peak "
                    "host memory of the save %.1f MiB on rank 0 (staging bound %.1f MiB)%s%s",
                    iteration, dir, total[0], dt, dt > 0 ? total[0] / dt : 0.0, r->dp->world, r->dp->world > 1 ? "s" : "",
                    peak > 0 ? peak / 1024.0 : 0.0, staging / 1048576.0, paused,
                    save_hf ? "; Hugging Face export in hf/" : "; no Hugging Face export");
    }
    return s;
}

/* Rank 0 creates ROOT/iter_NNNNNNN.tmp.PID (PID: rank 0's) and every rank learns its name. */
static lj_status make_tmp(lj_run_state *r, char *tmp) {
    float v[2] = {0.0f, 0.0f};
    lj_status s = LJ_OK;
    if (r->dp->rank == 0) {
        char final[LJ_PATH_MAX];
        s = lj_mkdir_p(r->save);
        if (s == LJ_OK) s = lj_ckpt_iter_dir(r->save, r->iteration, final);
        if (s == LJ_OK) s = lj_path_format(tmp, "%s.tmp.%d", final, (int)getpid());
        int err = s == LJ_OK ? lj_dir_remove_quiet(tmp) : 0;
        if (err) s = lj_fail(LJ_ERR_IO, "%s: cannot remove a stale temporary directory: %s", tmp, strerror(err));
        else if (s == LJ_OK && mkdir(tmp, 0755) != 0)
            s = lj_fail(LJ_ERR_IO, "%s: cannot create directory: %s", tmp, strerror(errno));
        v[0] = s != LJ_OK;
        v[1] = (float)getpid(); /* exact: Linux process ids are below 2^22 */
    }
    lj_dp_sum(r->dp, r->model, v, 2);
    if (s == LJ_OK && v[0] > 0.0f) return lj_fail(LJ_ERR_IO, "rank 0 could not create the checkpoint directory");
    if (s != LJ_OK) return s;
    char final[LJ_PATH_MAX];
    LJ_TRY(lj_ckpt_iter_dir(r->save, r->iteration, final));
    return lj_path_format(tmp, "%s.tmp.%d", final, (int)v[1]);
}

lj_status lj_run_state_finish(lj_run_state *r) {
    lj_ckpt_async *a = r->async;
    if (!a || !a->pending) return LJ_OK;
    pthread_join(a->thread, NULL);
    a->pending = 0;
    lj_status s = a->status == LJ_OK ? LJ_OK : lj_fail(a->status, "%s", a->error);
    s = finalize(r, s, a->tmp, a->iteration, a->state_json, a->save_hf, a->staging, a->writer.bytes, a->t0, a->pause,
                 a->t_written, a->t_copied, a->rss0_kib);
    lj_shard_writer_free(&a->writer);
    free(a->state_json);
    a->state_json = NULL;
    return s;
}

lj_status lj_run_state_poll(lj_run_state *r) {
    lj_ckpt_async *a = r->async;
    if (!a || !a->pending) return LJ_OK; /* the same on every rank: the saves are collective */
    float busy = !__atomic_load_n(&a->written, __ATOMIC_ACQUIRE);
    lj_dp_sum(r->dp, r->model, &busy, 1);
    return busy > 0.0f ? LJ_OK : lj_run_state_finish(r);
}

/* The layout of the async save's packed host copy of numel state elements and n8 FP8 state
 * values: the byte offsets at[4] (NULL: not wanted) of master, adam.m, adam.v (each in its
 * stored dtype) and the FP8 state; returns the bytes in all. */
static size_t async_layout(const lj_model *m, int64_t numel, int64_t n8, size_t *at) {
    size_t b = 0;
    for (int t = 0; t < 3; t++) {
        if (at) at[t] = b;
        b += (size_t)numel * lj_dtype_size(lj_model_state_dtype(m, t));
    }
    if (at) at[3] = b;
    return b + (size_t)n8 * sizeof(float);
}

/* The async save's host copy of `need` bytes (kept between saves, like Megatron-LM's pinned
 * buffers): pinned when the backend has it. Errors: LJ_ERR_OOM when the host has not that much
 * memory available (/proc/meminfo MemAvailable, 90%) or the backend cannot pin it. */
static lj_status async_buffer(lj_run_state *r, size_t need) {
    lj_ckpt_async *a = r->async;
    if (need <= a->host_bytes && a->host) return LJ_OK;
    const lj_ops *ops = r->model->ops;
    if (a->host_free) a->host_free(a->host);
    else free(a->host);
    a->host = NULL;
    a->host_bytes = 0;
    a->host_free = NULL;
    const size_t bytes = need > 0 ? need : 1;
    size_t avail = 0, total = 0; /* the CPU backend's view of the host: MemAvailable */
    if (lj_ops_cpu()->memory_info(&avail, &total) == LJ_OK && (double)bytes > 0.9 * (double)avail)
        return lj_fail(LJ_ERR_OOM, "its host copy needs %.2f GiB, the host has %.2f GiB available", bytes / 1073741824.0,
                       avail / 1073741824.0);
    if (ops->host_alloc && !r->model->offload) {
        void *p = NULL;
        LJ_TRY(ops->host_alloc(&p, bytes));
        a->host = p;
        a->host_free = ops->host_free;
    } else {
        a->host = lj_malloc(bytes);
    }
    a->host_bytes = need;
    return LJ_OK;
}

/* --async-save: the packed host copy of this rank's pieces, queued beside the training's stream
 * (the next optimizer step waits for it: lj_model_state_fence), then the background writer,
 * which waits for the copy and checks it for non-finite values before it writes (a diverged
 * state is reported by the save's lj_run_state_finish and never written). Collective (the
 * copy's verdict is shared). */
static lj_status save_async(lj_run_state *r, const char *tmp, char *json, state_piece *pieces, int np, int64_t numel,
                            int64_t n8, double t0, int64_t rss0) {
    lj_ckpt_async *a = r->async;
    const size_t need = async_layout(r->model, numel, n8, a->at);
    lj_status s = LJ_OK;
    /* the FP8 state first: a download queued after the copies below would wait for all of them */
    if (n8) lj_linear_state_get(&r->model->linear, (float *)(a->host + a->at[3]));
    /* the copy only (the writer checks it for non-finite values), adjacent pieces in one copy
     * (on one rank: one per tensor instead of one per parameter) */
    for (int t = 0; t < 3; t++) {
        const size_t size = lj_dtype_size(lj_model_state_dtype(r->model, t));
        for (int i = 0, j; i < np; i = j) {
            int64_t n = pieces[i].n;
            for (j = i + 1; j < np && pieces[j].shard_offset == pieces[i].shard_offset + n &&
                            pieces[j].packed == pieces[i].packed + n; j++)
                n += pieces[j].n;
            lj_model_state_copy_out(r->model, t, a->host + a->at[t] + (size_t)pieces[i].packed * size,
                                    pieces[i].shard_offset, n, 1);
        }
    }
    s = all_ok(r, s, "another rank could not copy its state (see its message)");
    if (s != LJ_OK) {
        if (r->dp->rank == 0) lj_dir_remove_quiet(tmp);
        free(pieces);
        free(json);
        return s;
    }
    free(a->pieces);
    a->pieces = pieces;
    a->npieces = np;
    a->numel = numel;
    a->n8 = n8;
    a->model = r->model;
    a->iteration = r->iteration;
    a->save_hf = r->save_hf;
    a->state_json = json;
    a->staging = lj_ckpt_staging_bytes();
    a->rank = r->dp->rank;
    a->world = r->dp->world;
    a->t0 = t0;
    a->rss0_kib = rss0;
    a->status = LJ_OK;
    snprintf(a->tmp, sizeof a->tmp, "%s", tmp);
    a->pause = lj_time_sec() - t0;
    a->written = 0;
    if (pthread_create(&a->thread, NULL, async_writer, a) != 0) { /* write it here instead */
        async_writer(a);
        return finalize(r, a->status == LJ_OK ? LJ_OK : lj_fail(a->status, "%s", a->error), a->tmp, a->iteration,
                        a->state_json, a->save_hf, a->staging, a->writer.bytes, t0, -1.0, 0.0, 0.0, rss0);
    }
    a->pending = 1;
    if (!r->quiet)
        lj_log_info("async save of iteration %d started: the step paused %.3f s to queue the copy of %.1f MiB to host "
                    "memory (beside the next steps, before their optimizer step)", r->iteration, a->pause,
                    (double)need / 1048576.0);
    return LJ_OK;
}

lj_status lj_run_state_reserve(lj_run_state *r) {
    if (!r->async || r->format == LJ_CKPT_FORMAT_TORCH) return LJ_OK;
    state_piece *pieces;
    const int np = state_pieces(r, 1, &pieces);
    const int64_t numel = np ? pieces[np - 1].packed + pieces[np - 1].n : 0;
    free(pieces);
    int64_t nh, ns;
    const int64_t n8 = r->dp->rank == 0 && r->model->linear.fp8.active ? lj_linear_fp8_state_numel(&r->model->linear.fp8, &nh, &ns) : 0;
    const double t0 = lj_time_sec();
    const size_t need = async_layout(r->model, numel, n8, NULL);
    const lj_status s = async_buffer(r, need);
    if (s != LJ_OK) {
        lj_log_warn("--async-save: %s: the host copy is made at the first save instead", lj_error_message());
        return LJ_OK;
    }
    if (!r->async->host_free) /* pageable: its pages now (pinned memory has them already) */
        memset(r->async->host, 0, need);
    if (!r->quiet)
        lj_log_info("--async-save: host copy of %.1f MiB allocated%s in %.2f s, before the first step",
                    (double)need / 1048576.0, r->async->host_free ? " and pinned" : "", lj_time_sec() - t0);
    return LJ_OK;
}

lj_status lj_run_state_save(lj_run_state *r) {
    if (r->format == LJ_CKPT_FORMAT_TORCH) return save_consolidated(r);
    LJ_TRY(lj_run_state_finish(r)); /* the previous --async-save first */
    const int64_t rss0 = reset_peak_rss() ? proc_status_kib("VmRSS") : proc_status_kib("VmHWM");
    const double t0 = lj_time_sec();
    char tmp[LJ_PATH_MAX];
    LJ_TRY(make_tmp(r, tmp));
    state_piece *pieces;
    const int np = state_pieces(r, 1, &pieces);
    const int64_t numel = np ? pieces[np - 1].packed + pieces[np - 1].n : 0;
    int64_t nh, ns;
    const int64_t n8 = r->dp->rank == 0 && r->model->linear.fp8.active ? lj_linear_fp8_state_numel(&r->model->linear.fp8, &nh, &ns) : 0;
    char *json = state_json(r);
    if (r->async) { /* every rank needs its host copy, or the save is synchronous */
        const lj_status b = async_buffer(r, async_layout(r->model, numel, n8, NULL));
        float failed = b != LJ_OK;
        if (b != LJ_OK) lj_log_warn("--async-save, iteration %d: %s: this save is synchronous", r->iteration, lj_error_message());
        lj_dp_sum(r->dp, r->model, &failed, 1);
        if (failed == 0.0f) return save_async(r, tmp, json, pieces, np, numel, n8, t0, rss0);
    }
    const size_t staging = lj_ckpt_staging_bytes();
    model_source sources[3] = {{r, LJ_STATE_MASTER, "master", 0}, {r, LJ_STATE_EXP_AVG, "adam.m", 0},
                               {r, LJ_STATE_EXP_AVG_SQ, "adam.v", 0}};
    float *f8 = n8 ? lj_malloc((size_t)n8 * sizeof(float)) : NULL;
    if (n8) lj_linear_state_get(&r->model->linear, f8);
    lj_shard_writer w;
    lj_status s = write_shard(&w, r->model, tmp, r->dp->rank, r->dp->world, staging, pieces, np, sources, NULL, f8, n8, 1);
    const uint64_t bytes = w.bytes;
    lj_shard_writer_free(&w);
    free(f8);
    free(pieces);
    s = finalize(r, s, tmp, r->iteration, json, r->save_hf, staging, bytes, t0, -1.0, 0.0, 0.0, rss0);
    free(json);
    return s;
}

/* The load's sinks. `sync`: the staging is pinned, so an upload from it runs asynchronously
 * (ops/cuda): it must end before the sink returns, as the reader thread refills the buffer. */
/* The progress of a load, over all of its reads (base/progress.h). */
typedef struct {
    lj_progress pg;
    uint64_t done;
} load_progress;

/* n values read of a tensor stored with `size` bytes each */
static void load_progress_add(load_progress *lp, int64_t n, size_t size) {
    lp->done += (uint64_t)n * size;
    lj_progress_update(&lp->pg, lp->done);
}

typedef struct {
    const lj_model *m;
    int t;          /* the state tensor (LJ_STATE_*, lj_model_state_upload) */
    int64_t offset; /* the request's shard position */
    int sync;
    size_t size;    /* bytes per element in the file (progress) */
    load_progress *lp;
} upload_sink_ctx;

static void sink_upload(void *ctx, int64_t at, const float *src, int64_t n) {
    const upload_sink_ctx *u = ctx;
    lj_model_state_upload(u->m, u->t, src, u->offset + at, n);
    if (u->sync) u->m->ops->synchronize();
    load_progress_add(u->lp, n, u->size);
}

typedef struct {
    lj_model *m;
    int64_t base; /* the request's flat offset */
    int sync;
    load_progress *lp;
} weights_sink_ctx;

static void sink_weights(void *ctx, int64_t at, const float *src, int64_t n) {
    const weights_sink_ctx *w = ctx;
    lj_model_set_weights_range(w->m, src, w->base + at, n);
    if (w->sync) w->m->ops->synchronize();
    load_progress_add(w->lp, n, sizeof(float));
}

/* A sharded iteration directory, through one staging buffer: the master (all of it, as the
 * parameters of ZeRO 0-2 are replicated; under ZeRO-3 this rank's pieces), then only the slices
 * of the moments this rank's shard needs, then the FP8 state; every slice read is checked. */
static lj_status load_sharded(lj_run_state *r, const char *dir, int iteration, const cJSON *state, const char *file) {
    lj_sharded c;
    LJ_TRY(lj_sharded_open(&c, dir));
    lj_status s = LJ_OK;
    size_t moment_size[2] = {sizeof(float), sizeof(float)}; /* as stored (the progress's bytes) */
    for (int t = 0; t < 2; t++) {
        const lj_sharded_tensor *st = lj_sharded_find(&c, state_names[t + 1]);
        if (st) moment_size[t] = lj_dtype_size(st->dtype); /* a missing tensor is reported by its read */
    }
    if (c.iteration != iteration)
        s = lj_fail(LJ_ERR_FORMAT, "%s: 'iteration' is %d, but the directory is iter_%07d (a file copied from another "
                                   "checkpoint?)", c.meta_path, c.iteration, iteration);
    const size_t staging_bytes = lj_ckpt_staging_bytes();
    lj_model *m = r->model;
    /* pinned when the sinks upload to device memory and the backend pins (host memory then) */
    const int pin = m->ops->host_alloc && !m->offload;
    void *pinned = NULL;
    if (pin && m->ops->host_alloc(&pinned, staging_bytes) != LJ_OK) pinned = NULL; /* pageable, then */
    float *staging = pinned ? pinned : lj_malloc(staging_bytes);
    const int64_t sn = (int64_t)(staging_bytes / sizeof(float));
    const int64_t P = m->layout.total;
    state_piece *pieces = NULL;
    const int np = state_pieces(r, 0, &pieces);
    lj_shard_request *reqs = lj_calloc((size_t)(np > 0 ? np : 1), sizeof *reqs);
    weights_sink_ctx *ws = lj_calloc((size_t)(np > 0 ? np : 1), sizeof *ws);
    upload_sink_ctx *us = lj_calloc((size_t)(np > 0 ? np : 1), sizeof *us);
    /* the weights, streamed: ZeRO-3 reads the pieces of its shard, the others all of them (their
     * parameters are replicated) */
    const lj_zero3 *z = lj_zero3_of(m);
    const int own_only = z && z->shard_params;
    const int nw = own_only ? np : 1;
    load_progress lp = {.done = 0};
    {
        uint64_t total = own_only ? 0 : (uint64_t)P * sizeof(float);
        for (int i = 0; i < np; i++)
            total += (uint64_t)pieces[i].n * ((own_only ? sizeof(float) : 0) + moment_size[0] + moment_size[1]);
        char what[LJ_PATH_MAX + 16];
        snprintf(what, sizeof what, "reading %s", dir);
        lj_progress_begin(&lp.pg, what, total);
    }
    for (int i = 0; i < nw; i++) {
        ws[i] = (weights_sink_ctx){m, own_only ? pieces[i].flat : 0, pinned != NULL, &lp};
        reqs[i] = (lj_shard_request){"master", ws[i].base, own_only ? pieces[i].n : P, &ws[i]};
    }
    if (s == LJ_OK) s = lj_sharded_read_many(&c, reqs, nw, 1, staging, sn, sink_weights);
    if (s == LJ_OK) lj_model_set_weights_done(m);
    if (s == LJ_OK) lj_model_moments_zero(m);
    for (int t = 0; t < 2 && s == LJ_OK; t++) {
        for (int i = 0; i < np; i++) {
            us[i] = (upload_sink_ctx){m, LJ_STATE_EXP_AVG + t, pieces[i].shard_offset, pinned != NULL, moment_size[t], &lp};
            reqs[i] = (lj_shard_request){state_names[t + 1], pieces[i].flat, pieces[i].n, &us[i]};
        }
        s = lj_sharded_read_many(&c, reqs, np, 1, staging, sn, sink_upload);
    }
    if (s == LJ_OK) lj_progress_end(&lp.pg);
    free(reqs);
    free(ws);
    free(us);
    free(pieces);
    const int64_t n8 = s == LJ_OK ? fp8_state_to_load(r, state, file) : 0;
    if (s == LJ_OK && n8) {
        const lj_sharded_tensor *t = lj_sharded_find(&c, "fp8.state");
        float *f8 = lj_malloc((size_t)n8 * sizeof(float));
        if (!t || t->numel != n8)
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor 'fp8.state' is %s, state.json says %lld elements", c.meta_path,
                        t ? "of another size" : "missing", (long long)n8);
        else s = lj_sharded_read(&c, "fp8.state", 0, n8, 1, staging, sn, sink_host, f8);
        if (s == LJ_OK) lj_linear_state_set(&m->linear, f8);
        free(f8);
    }
    if (pinned) m->ops->host_free(pinned);
    else free(staging);
    if (s == LJ_OK && (c.world_size != r->dp->world || c.zero_stage != r->dp->zero_stage))
        lj_log_info("%s: saved on %d rank%s under ZeRO stage %d (%s), resharded for %d rank%s under stage %d", dir,
                    c.world_size, c.world_size > 1 ? "s" : "", c.zero_stage, c.partition, r->dp->world,
                    r->dp->world > 1 ? "s" : "", r->dp->zero_stage);
    lj_sharded_close(&c);
    return s;
}

/* The position in the run from state.json: iteration, consumed samples, the loader's state, the
 * iteration the optimizer started at. */
static lj_status set_position(lj_run_state *r, const cJSON *state, const char *file) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(state, "iteration");
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(state, "consumed_samples");
    const cJSON *os = cJSON_GetObjectItemCaseSensitive(state, "optimizer_start_iteration");
    if (!cJSON_IsNumber(it) || !cJSON_IsNumber(cs))
        return lj_fail(LJ_ERR_FORMAT, "%s: missing field 'iteration' or 'consumed_samples'", file);
    if (os && (!cJSON_IsNumber(os) || os->valuedouble != (double)os->valueint || os->valueint < 0 ||
               os->valueint > it->valueint))
        return lj_fail(LJ_ERR_FORMAT, "%s: 'optimizer_start_iteration' must be an integer in [0, iteration %d]", file,
                       it->valueint);
    r->iteration = it->valueint;
    r->consumed_samples = (int64_t)cs->valuedouble;
    r->schedule_start = os ? os->valueint : 0;
    lj_loader_state ls;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(state, "data");
    LJ_TRY(lj_loader_check_fingerprint(r->train_data, cJSON_GetObjectItemCaseSensitive(data, "datasets"), file,
                                       r->override_data, r->dp->rank == 0));
    LJ_TRY(lj_loader_state_from_json(data, &ls, file));
    if (r->override_data && ls.num_datasets != r->train_data->num_sources) {
        if (r->dp->rank == 0)
            lj_log_warn("--override-data: the data order starts at the beginning of the new data (the checkpoint's "
                        "position is in %d datasets, the run has %d)", ls.num_datasets, r->train_data->num_sources);
        return LJ_OK;
    }
    return lj_loader_set_state(r->train_data, &ls);
}

/* --no-load-optim, after a load: the AdamW moments back to zero, the optimizer (its step count)
 * and the LR schedule starting at the loaded iteration. */
static void drop_optimizer_state(lj_run_state *r) {
    lj_model_moments_zero(r->model);
    r->schedule_start = r->iteration;
}

static lj_status load_state(lj_run_state *r, const char *load);

/* Loads --load: a training-state root (latest_checkpointed_iteration.txt or iter_* dirs) for an
 * exact resume, else a Hugging Face checkpoint directory for continued training. */
lj_status lj_run_state_load(lj_run_state *r, const char *load) {
    const lj_status s = load_state(r, load);
    if (s == LJ_OK && r->no_load_optim) drop_optimizer_state(r);
    return s;
}

static lj_status load_state(lj_run_state *r, const char *load) {
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
    if (s == LJ_OK) s = check_position(r, state, file, iteration);
    if (lj_sharded_present(dir)) {
        if (s == LJ_OK) s = load_sharded(r, dir, iteration, state, file);
        if (s == LJ_OK) s = set_position(r, state, file);
        s = all_ok(r, s, "another rank could not load its part of the checkpoint (see its message)");
        if (s == LJ_OK) lj_log_info("resumed from %s at iteration %d", dir, r->iteration);
        cJSON_Delete(state);
        return s;
    }
    /* the single-file format: the per-rank shard files when this run has the saving world size
     * and ZeRO stage */
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
    if (s == LJ_OK && n8) lj_linear_state_set(&r->model->linear, f8);
    free(f8);
    if (s == LJ_OK) s = set_position(r, state, file);
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

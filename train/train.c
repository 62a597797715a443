/* train.c: the training loop (see train.h). */
#include "train/train.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>

#include "data/loader.h"
#include "data/tokenizer_export.h"
#include "parallel/dp.h"
#include "checkpoint/checkpoint.h"
#include "io/hf.h"
#include "plan/plan.h"
#include "train/tensorboard.h"

static volatile sig_atomic_t g_stop_signal;

static void on_signal(int sig) { g_stop_signal = sig; }

lj_status lj_train_resolve_load(const char *path, char *root, size_t root_len, int *iteration, int *is_state,
                                char *hf_dir, size_t hf_len) {
    struct stat st;
    char probe[2048];
    *is_state = 0;
    /* one iteration directory: ROOT/iter_NNNNNNN with state.json */
    snprintf(probe, sizeof probe, "%s/%s", path, LJ_CKPT_STATE_FILE);
    if (stat(probe, &st) == 0) {
        snprintf(root, root_len, "%s", path);
        size_t n = strlen(root);
        while (n > 1 && root[n - 1] == '/') root[--n] = '\0';
        char *slash = strrchr(root, '/');
        const char *base = slash ? slash + 1 : root;
        if (sscanf(base, "iter_%d", iteration) != 1)
            return lj_fail(LJ_ERR_FORMAT, "%s: a checkpoint iteration directory must be named iter_NNNNNNN", path);
        if (slash) *slash = '\0';
        else snprintf(root, root_len, ".");
        *is_state = 1;
        snprintf(hf_dir, hf_len, "%s/hf", path);
        return LJ_OK;
    }
    /* a root: the latest file, or iter_ directories */
    snprintf(probe, sizeof probe, "%s/%s", path, LJ_CKPT_LATEST_FILE);
    int looks_like_root = stat(probe, &st) == 0;
    DIR *d = looks_like_root ? NULL : opendir(path);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, "iter_", 5) == 0) looks_like_root = 1;
    if (d) closedir(d);
    if (looks_like_root) {
        LJ_TRY(lj_ckpt_latest(path, iteration));
        snprintf(root, root_len, "%s", path);
        *is_state = 1;
        lj_ckpt_iter_dir(path, *iteration, probe, sizeof probe);
        snprintf(hf_dir, hf_len, "%s/hf", probe);
        return LJ_OK;
    }
    snprintf(hf_dir, hf_len, "%s", path);
    return LJ_OK;
}

void lj_train_config_defaults(lj_train_config *c) {
    memset(c, 0, sizeof *c);
    c->micro_batch_size = 4;
    c->seq_length = 256;
    c->global_batch_size = 0; /* = micro-batch size */
    c->train_iters = 100;
    c->log_interval = 1;
    c->tensorboard_log_interval = 1;
    c->tensorboard_queue_size = 1000;
    c->eval_interval = 0;
    c->eval_iters = 10;
    c->seed = 1234;
    c->fused = 1;
    c->lr = (lj_lr_schedule){3e-4, 0.0, 0, 0, LJ_LR_COSINE}; /* Megatron: --min-lr 0 */
    c->adamw = (lj_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0};
    c->split = "969,30,1";
    c->keep_last = 2;
    c->hf_dtype = LJ_DTYPE_BF16;
    c->overlap_comm = -1;
    c->offload_optimizer = -1;
}

/* ---- the run's state -------------------------------------------------------------- */

typedef struct {
    const lj_train_config *cfg;
    lj_model model;
    lj_plan plan;
    lj_loader train_data, valid_data;
    int have_valid;
    lj_adamw_segment *segments;
    int num_segments;
    int accumulation;          /* micro-batches per iteration */
    int iteration;             /* iterations completed */
    int64_t consumed_samples;
    lj_rng rng;                /* reserved for stochastic features; saved for exact resume */
    int32_t *tokens;           /* host [B, T+1] */
    FILE *log_json;
    lj_train_tb tb;            /* TensorBoard event file (rank 0, --tensorboard-dir) */
    lj_dp dp;                  /* data-parallel ranks (a world of one without a launcher) */
    int stop;                  /* a rank received SIGINT/SIGTERM: all stop after this iteration */
    int rank, world;
} run;


static lj_status open_data(run *r) {
    const lj_train_config *c = r->cfg;
    lj_loader_config lc;
    memset(&lc, 0, sizeof lc);
    LJ_TRY(lj_loader_parse_data_path(&lc, c->num_data_args, (const char *const *)c->data_args));
    lc.seq_length = c->seq_length;
    lc.micro_batch_size = c->micro_batch_size;
    lc.seed = c->seed;
    lc.dp_rank = r->rank;
    lc.dp_world_size = r->world;
    snprintf(lc.split, sizeof lc.split, "%s", c->split);
    lc.which = LJ_SPLIT_TRAIN;
    LJ_TRY(lj_loader_init(&r->train_data, &lc));
    LJ_TRY(lj_loader_check_vocab(&r->train_data, c->model.vocab_size));
    if (!c->quiet) lj_loader_log_summary(&r->train_data);
    lc.which = LJ_SPLIT_VALID; /* rank 0 evaluates the whole valid split alone; under ZeRO-3 every
                                  rank runs the same forward (its layers are gathered collectively) */
    lc.dp_rank = 0;
    lc.dp_world_size = 1;
    if (r->rank == 0 || (c->zero_stage == 3 && r->world > 1)) {
        if (lj_loader_init(&r->valid_data, &lc) == LJ_OK) r->have_valid = 1;
        else lj_log_warn("no validation data: %s", lj_error_message());
    }
    return LJ_OK;
}

/* ---- checkpoints ------------------------------------------------------------------ */

static char *state_json(const run *r) {
    const lj_train_config *c = r->cfg;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "iteration", r->iteration);
    cJSON_AddNumberToObject(root, "consumed_samples", (double)r->consumed_samples);
    cJSON *rng = cJSON_AddArrayToObject(root, "rng");
    for (int i = 0; i < 4; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%" PRIu64, r->rng.s[i]);
        cJSON_AddItemToArray(rng, cJSON_CreateString(buf));
    }
    lj_loader_state ls;
    lj_loader_get_state(&r->train_data, &ls);
    cJSON_AddItemToObject(root, "data", lj_loader_state_to_json(&ls));
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddNumberToObject(model, "vocab_size", c->model.vocab_size);
    cJSON_AddNumberToObject(model, "hidden_size", c->model.hidden_size);
    cJSON_AddNumberToObject(model, "intermediate_size", c->model.intermediate_size);
    cJSON_AddNumberToObject(model, "num_hidden_layers", c->model.num_hidden_layers);
    cJSON_AddNumberToObject(model, "num_attention_heads", c->model.num_attention_heads);
    cJSON_AddNumberToObject(model, "num_key_value_heads", c->model.num_key_value_heads);
    cJSON_AddNumberToObject(model, "head_dim", c->model.head_dim);
    cJSON_AddBoolToObject(model, "tie_word_embeddings", c->model.tie_word_embeddings);
    cJSON *run_cfg = cJSON_AddObjectToObject(root, "run");
    cJSON_AddNumberToObject(run_cfg, "micro_batch_size", c->micro_batch_size);
    cJSON_AddNumberToObject(run_cfg, "seq_length", c->seq_length);
    cJSON_AddNumberToObject(run_cfg, "global_batch_size", c->global_batch_size);
    cJSON_AddNumberToObject(run_cfg, "seed", (double)c->seed);
    /* the saving world: a resume with the same world size and ZeRO stage reads the per-rank shard
     * files of the master weights and AdamW moments (zero_shard_rank_RRRRR.safetensors) */
    cJSON *zero = cJSON_AddObjectToObject(root, "zero");
    cJSON_AddNumberToObject(zero, "world_size", r->world);
    cJSON_AddNumberToObject(zero, "stage", r->dp.zero_stage);
    cJSON_AddBoolToObject(zero, "shard_files", lj_dp_has_shard_files(&r->dp));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

/* Checks that a checkpoint's model and batch shape match this run. */
static lj_status check_state(const run *r, const cJSON *root, const char *file) {
    const lj_train_config *c = r->cfg;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const struct { const char *field; int want; } f[] = {
        {"vocab_size", c->model.vocab_size}, {"hidden_size", c->model.hidden_size},
        {"intermediate_size", c->model.intermediate_size}, {"num_hidden_layers", c->model.num_hidden_layers},
        {"num_attention_heads", c->model.num_attention_heads}, {"num_key_value_heads", c->model.num_key_value_heads},
        {"head_dim", c->model.head_dim}, {"tie_word_embeddings", c->model.tie_word_embeddings},
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
        {"seq_length", c->seq_length}, {"global_batch_size", c->global_batch_size}};
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

typedef struct {
    const run *r;
    const float *weights;
} export_ctx;

static lj_status export_hf(const char *dir, void *ctx) {
    const export_ctx *e = ctx;
    size_t n = strlen(dir) + 8;
    char *path = lj_malloc(n);
    snprintf(path, n, "%s/hf", dir);
    lj_status s = lj_hf_export(path, &e->r->cfg->model, e->weights, e->r->cfg->hf_dtype, 5ull << 30);
    if (s == LJ_OK && e->r->cfg->tokenizer) s = lj_tokenizer_export_hf(e->r->cfg->tokenizer, path, &e->r->cfg->model);
    free(path);
    return s;
}

/* Writes and installs the iteration directory from the gathered state (rank 0), without
 * publishing it in the latest file. */
static lj_status save_checkpoint(run *r, float *w, float *mm, float *vv) {
    const int64_t P = r->model.layout.total;
    const lj_ckpt_tensor t[3] = {{"master", w, P}, {"adam.m", mm, P}, {"adam.v", vv, P}};
    char *json = state_json(r);
    export_ctx ctx = {r, w};
    lj_status s = lj_ckpt_write_iteration(r->cfg->save, r->iteration, t, 3, json, export_hf, &ctx);
    free(json);
    return s;
}

/* Sums a failure flag across ranks: LJ_OK only if every rank's `s` is LJ_OK; a rank that was fine
 * itself fails with `what` when another one was not. Collective. */
static lj_status all_ok(run *r, lj_status s, const char *what) {
    float failed = s != LJ_OK;
    lj_dp_sum(&r->dp, &r->model, &failed, 1);
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
static lj_status checkpoint(run *r) {
    const int64_t P = r->model.layout.total;
    float *w = NULL, *mm = NULL, *vv = NULL;
    if (r->rank == 0) {
        w = lj_malloc((size_t)P * sizeof(float));
        mm = lj_malloc((size_t)P * sizeof(float));
        vv = lj_malloc((size_t)P * sizeof(float));
    }
    const double t0 = lj_time_sec();
    lj_dp_gather_state(&r->dp, &r->model, w, mm, vv);
    lj_status s = r->rank == 0 ? save_checkpoint(r, w, mm, vv) : LJ_OK;
    free(w);
    free(mm);
    free(vv);
    s = all_ok(r, s, "rank 0 could not save the checkpoint");
    const int shards = lj_dp_has_shard_files(&r->dp);
    char file[1200];
    if (shards) {
        lj_ckpt_shard_file(r->cfg->save, r->iteration, r->rank, file, sizeof file);
        if (s == LJ_OK) s = lj_dp_save_shard(&r->dp, &r->model, file, r->iteration);
        s = all_ok(r, s, "another rank could not write its ZeRO shard file (see its message)");
    }
    if (r->rank == 0 && s == LJ_OK) s = lj_ckpt_publish(r->cfg->save, r->iteration, r->cfg->keep_last);
    s = all_ok(r, s, "rank 0 could not save the checkpoint");
    if (s == LJ_OK) {
        char dir[1024];
        lj_ckpt_iter_dir(r->cfg->save, r->iteration, dir, sizeof dir);
        lj_log_info("saved checkpoint at iteration %d to %s (%.1f s; Hugging Face export in %s/hf%s)", r->iteration, dir,
                    lj_time_sec() - t0, dir, shards ? "; one ZeRO shard file per rank" : "");
    }
    return s;
}

/* Loads --load: a training-state root (latest_checkpointed_iteration.txt or iter_* dirs) for an
 * exact resume, else a Hugging Face checkpoint directory for continued training. */
static lj_status load_checkpoint(run *r) {
    char root[1024], hf[1100];
    int iteration = 0, is_state = 0;
    LJ_TRY(lj_train_resolve_load(r->cfg->load, root, sizeof root, &iteration, &is_state, hf, sizeof hf));
    if (!is_state) {
        const int64_t P = r->model.layout.total;
        float *w = lj_malloc((size_t)P * sizeof(float));
        lj_status s = lj_hf_import(hf, &r->cfg->model, w);
        if (s == LJ_OK) lj_model_set_weights(&r->model, w);
        free(w);
        if (s != LJ_OK) return s;
        lj_log_info("loaded Hugging Face weights from %s (optimizer state starts fresh)", hf);
        return LJ_OK;
    }
    char dir[1024];
    lj_ckpt_iter_dir(root, iteration, dir, sizeof dir);
    char file[1100];
    snprintf(file, sizeof file, "%s/%s", dir, LJ_CKPT_STATE_FILE);
    /* state.json first, so that a checkpoint of another shape is named as such */
    char *text = NULL;
    LJ_TRY(lj_file_read_all(file, &text, NULL));
    cJSON *state = cJSON_Parse(text);
    free(text);
    lj_status s = state ? check_state(r, state, file) : lj_fail(LJ_ERR_FORMAT, "%s: not valid JSON", file);
    /* the per-rank shard files when this run has the saving world size and ZeRO stage */
    const cJSON *zero = state ? cJSON_GetObjectItemCaseSensitive(state, "zero") : NULL;
    const cJSON *zw = cJSON_GetObjectItemCaseSensitive(zero, "world_size"), *zs = cJSON_GetObjectItemCaseSensitive(zero, "stage");
    const int saved_shards = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(zero, "shard_files")) && cJSON_IsNumber(zw) &&
                             cJSON_IsNumber(zs);
    const int use_shards = s == LJ_OK && saved_shards && lj_dp_has_shard_files(&r->dp) &&
                           zw->valueint == r->world && zs->valueint == r->dp.zero_stage;
    if (s == LJ_OK && !use_shards && (saved_shards || lj_dp_has_shard_files(&r->dp))) {
        if (saved_shards)
            lj_log_info("%s: saved on %d ranks under ZeRO stage %d, this run has %d ranks under stage %d: the per-rank "
                        "ZeRO shard files are not used; resuming from the consolidated %s", dir, zw->valueint,
                        zs->valueint, r->world, r->dp.zero_stage, LJ_CKPT_TENSORS_FILE);
        else
            lj_log_info("%s: no per-rank ZeRO shard files in this checkpoint: resuming from the consolidated %s", dir,
                        LJ_CKPT_TENSORS_FILE);
    }
    const int64_t P = r->model.layout.total;
    float *w = lj_malloc((size_t)P * sizeof(float));
    float *mm = use_shards ? NULL : lj_malloc((size_t)P * sizeof(float));
    float *vv = use_shards ? NULL : lj_malloc((size_t)P * sizeof(float));
    const lj_ckpt_tensor t[3] = {{"master", w, P}, {"adam.m", mm, P}, {"adam.v", vv, P}};
    char *json = NULL;
    /* from shards, the consolidated file gives the weights only (the parameters are derived
     * from them as on any resume); the moments come from the shard files */
    if (s == LJ_OK) s = lj_ckpt_load_ex(root, iteration, t, use_shards ? 1 : 3, &json, !use_shards);
    if (s == LJ_OK) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(state, "iteration");
        const cJSON *cs = cJSON_GetObjectItemCaseSensitive(state, "consumed_samples");
        const cJSON *rng = cJSON_GetObjectItemCaseSensitive(state, "rng");
        if (!cJSON_IsNumber(it) || !cJSON_IsNumber(cs) || cJSON_GetArraySize(rng) != 4)
            s = lj_fail(LJ_ERR_FORMAT, "%s: missing field 'iteration', 'consumed_samples' or 'rng'", file);
        else {
            r->iteration = it->valueint;
            r->consumed_samples = (int64_t)cs->valuedouble;
            for (int i = 0; i < 4; i++) {
                const cJSON *x = cJSON_GetArrayItem(rng, i);
                r->rng.s[i] = cJSON_IsString(x) ? strtoull(x->valuestring, NULL, 10) : 0;
            }
            lj_loader_state ls;
            s = lj_loader_state_from_json(cJSON_GetObjectItemCaseSensitive(state, "data"), &ls, file);
            if (s == LJ_OK) s = lj_loader_set_state(&r->train_data, &ls);
        }
    }
    if (use_shards) {
        /* every rank reaches this point (state.json is the same for all): the params and the master
         * shard from the consolidated weights, then this rank's master and moments from its file */
        char shard[1200];
        lj_ckpt_shard_file(root, iteration, r->rank, shard, sizeof shard);
        if (s == LJ_OK) {
            lj_model_set_weights(&r->model, w);
            s = lj_dp_load_shard(&r->dp, &r->model, shard, iteration);
        }
        s = all_ok(r, s, "another rank could not load its ZeRO shard file (see its message)");
        if (s == LJ_OK)
            lj_log_info("resumed from %s at iteration %d (master weights and AdamW moments from the per-rank ZeRO "
                        "shard files, " LJ_CKPT_SHARD_FILE_FMT " and the others; parameters from %s)",
                        dir, r->iteration, r->rank, LJ_CKPT_TENSORS_FILE);
    } else if (s == LJ_OK) {
        lj_dp_scatter_state(&r->dp, &r->model, w, mm, vv); /* this rank's shard, whatever the saving world size */
        lj_log_info("resumed from %s at iteration %d", dir, r->iteration);
    }
    cJSON_Delete(state);
    free(json);
    free(w);
    free(mm);
    free(vv);
    return s;
}

/* ---- the loop --------------------------------------------------------------------- */

static double evaluate(run *r) {
    lj_model *m = &r->model;
    lj_loader_reset(&r->valid_data);
    double sum = 0.0;
    for (int i = 0; i < r->cfg->eval_iters; i++) {
        lj_loader_next(&r->valid_data, r->tokens);
        lj_model_set_batch(m, r->tokens);
        lj_model_forward(m, 0, 0.0f);
        sum += lj_model_mean_loss(m);
    }
    return sum / r->cfg->eval_iters;
}

static void log_eval(run *r, double loss) {
    if (r->rank != 0) return;
    if (!r->cfg->quiet)
        printf("validation loss at iteration %d | lm loss value: %.6E | lm loss PPL: %.6E\n", r->iteration, loss,
               exp(loss));
    if (r->log_json) {
        fprintf(r->log_json, "{\"iteration\": %d, \"validation_loss\": %.17g}\n", r->iteration, loss);
        fflush(r->log_json);
    }
    lj_train_tb_validation(&r->tb, r->iteration, r->consumed_samples, loss);
}

static lj_status setup(run *r) {
    const lj_train_config *c = r->cfg;
    if (c->seq_length > c->model.max_position_embeddings)
        return lj_fail(LJ_ERR_ARG, "--seq-length %d is above the model's max_position_embeddings (%d)", c->seq_length,
                       c->model.max_position_embeddings);
    if (c->micro_batch_size <= 0 || c->seq_length <= 0 || c->train_iters < 0)
        return lj_fail(LJ_ERR_ARG, "--micro-batch-size, --seq-length must be positive and --train-iters >= 0");
    if (c->global_batch_size % c->micro_batch_size != 0)
        return lj_fail(LJ_ERR_ARG, "--global-batch-size %d is not a multiple of --micro-batch-size %d",
                       c->global_batch_size, c->micro_batch_size);
    char summary[512];
    snprintf(summary, sizeof summary,
             "model %s (V %d, d %d, L %d), backend %s, micro-batch %d, seq %d, global batch %d, iters %d, seed %llu",
             c->model.name, c->model.vocab_size, c->model.hidden_size, c->model.num_hidden_layers, c->ops->name,
             c->micro_batch_size, c->seq_length, c->global_batch_size, c->train_iters, (unsigned long long)c->seed);
    LJ_TRY(lj_dp_init(&r->dp, c->ops, c->zero_stage, summary));
    if (c->has_deepspeed) {
        r->dp.stage3_prefetch_bucket_size = c->deepspeed.zero.stage3_prefetch_bucket_size;
        r->dp.stage3_max_live_parameters = c->deepspeed.zero.stage3_max_live_parameters;
        r->dp.stage3_param_persistence_threshold =
            c->deepspeed.zero.stage3_param_persistence_threshold > 0 ? c->deepspeed.zero.stage3_param_persistence_threshold : -1;
    }
    r->dp.overlap_comm = c->overlap_comm >= 0 ? c->overlap_comm : c->has_deepspeed ? c->deepspeed.zero.overlap_comm != 0 : 1;
    r->dp.reduce_bucket_size = c->reduce_bucket_size > 0 ? c->reduce_bucket_size
                               : c->has_deepspeed && c->deepspeed.zero.reduce_bucket_size > 0 ? c->deepspeed.zero.reduce_bucket_size
                                                                                                : 0;
    r->dp.offload_optimizer = c->offload_optimizer >= 0 ? c->offload_optimizer
                              : c->has_deepspeed ? c->deepspeed.zero.offload_optimizer_cpu
                                                 : 0;
    LJ_TRY(lj_dp_offload_check(&r->dp, c->zero_stage,
                               c->offload_optimizer >= 0 ? "--offload-optimizer cpu"
                                                         : "zero_optimization.offload_optimizer.device \"cpu\""));
    if (r->dp.world > 1 && r->dp.zero_stage >= 2 && r->dp.rank == 0)
        lj_log_info("ZeRO stage %d: overlap_comm %s", r->dp.zero_stage,
                    r->dp.overlap_comm ? "on (collectives on their own stream, overlapped with compute)"
                                       : "off (the compute stream waits for each collective)");
    r->rank = r->dp.rank;
    r->world = r->dp.world;
    if (c->global_batch_size % (c->micro_batch_size * r->world) != 0)
        return lj_fail(LJ_ERR_ARG, "--global-batch-size %d is not a multiple of --micro-batch-size %d x %d ranks",
                       c->global_batch_size, c->micro_batch_size, r->world);
    r->accumulation = c->global_batch_size / (c->micro_batch_size * r->world);
    lj_rng_seed(&r->rng, c->seed);
    if (r->rank != 0) lj_log_set_quiet(1);

    LJ_TRY(open_data(r));

    lj_model_options opt;
    lj_dp_model_options(&r->dp, c->micro_batch_size, c->seq_length, c->fused, c->recompute, &opt);
    lj_model_init(&r->model, c->ops, &c->model, &opt);
    lj_plan_build(&r->plan, &r->model);
    char buf[32];
    lj_log_info("model %s: %.2fM parameters, backend %s, micro-batch %d x seq %d, global batch %d (%d accumulation steps)",
                c->model.name, (double)r->model.layout.total / 1e6, c->ops->name, c->micro_batch_size, c->seq_length,
                c->global_batch_size, r->accumulation);
    lj_log_info("memory plan: %s in %d buffers", lj_format_bytes(r->plan.total_bytes, buf, sizeof buf), r->plan.count);
    if (r->model.opt.offload_optimizer) {
        size_t state, staging;
        lj_model_offload_bytes(&r->model, &state, &staging);
        char b2[32];
        lj_log_info("optimizer offload: %s of optimizer state in host memory (+%s staging), outside the plan",
                    lj_format_bytes(state, buf, sizeof buf), lj_format_bytes(staging, b2, sizeof b2));
    }
    LJ_TRY(lj_plan_allocate(&r->plan, &r->model));
    lj_model_upload_rope(&r->model);
    lj_model_init_weights(&r->model, c->seed);
    r->num_segments = lj_dp_segments(&r->model, &c->adamw, &r->segments);
    r->tokens = lj_malloc((size_t)c->micro_batch_size * (c->seq_length + 1) * sizeof(int32_t));
    if (c->load) LJ_TRY(load_checkpoint(r));
    if (c->save && r->rank == 0) {
        /* find an unwritable --save now, not after the last iteration */
        LJ_TRY(lj_mkdir_p(c->save));
        char probe[1100];
        snprintf(probe, sizeof probe, "%s/.ljperf-write-test", c->save);
        FILE *f = fopen(probe, "w");
        if (!f) return lj_fail(LJ_ERR_IO, "--save %s: cannot write there", c->save);
        fclose(f);
        remove(probe);
    }
    if (c->log_json && r->rank == 0) {
        r->log_json = fopen(c->log_json, r->iteration > 0 ? "a" : "w");
        if (!r->log_json) return lj_fail(LJ_ERR_IO, "--log-json %s: cannot open for writing", c->log_json);
    }
    if (c->tensorboard_dir && r->rank == 0) LJ_TRY(lj_train_tb_open(&r->tb, c, r->world, r->plan.total_bytes));
    return LJ_OK;
}

static void teardown(run *r) {
    if (r->log_json) fclose(r->log_json);
    lj_train_tb_close(&r->tb);
    free(r->tokens);
    free(r->segments);
    if (r->plan.buffers) {
        lj_plan_release(&r->plan, r->cfg->ops);
        lj_plan_free(&r->plan);
    }
    if (r->model.layers) lj_model_free(&r->model);
    lj_loader_free(&r->train_data);
    if (r->have_valid) lj_loader_free(&r->valid_data);
    if (r->dp.dist) lj_dp_free(&r->dp);
}

/* One iteration: accumulation micro-batches of forward + backward, then the AdamW step. With
 * one micro-batch per rank the whole iteration is one lj_dp_train_step (on a single GPU with
 * graphs: zero-grad + forward + backward + norm + AdamW as one CUDA graph). */
static void train_step(run *r, double *loss, double *grad_norm, float *lr) {
    const lj_train_config *c = r->cfg;
    lj_model *m = &r->model;
    const float dloss = 1.0f / (float)((int64_t)c->micro_batch_size * c->seq_length * r->accumulation * r->world);
    const int step = r->iteration + 1;
    *lr = (float)(c->has_deepspeed && c->deepspeed.scheduler.type != LJ_DS_SCHEDULER_NONE
                      ? lj_deepspeed_lr(&c->deepspeed, c->lr.lr, step)
                      : lj_lr_at(&c->lr, step));
    double sum = 0.0;
    if (r->accumulation == 1) {
        lj_loader_next(&r->train_data, r->tokens);
        lj_model_set_batch(m, r->tokens); /* uploaded in stream order before the step */
        *grad_norm = lj_dp_train_step(&r->dp, m, r->segments, r->num_segments, &c->adamw, *lr, step, dloss);
        sum = lj_model_mean_loss(m); /* the losses of this step's forward (the update leaves them) */
    } else {
        lj_model_zero_grads(m);
        for (int micro = 0; micro < r->accumulation; micro++) {
            lj_loader_next(&r->train_data, r->tokens);
            lj_model_set_batch(m, r->tokens);
            lj_model_forward_backward(m, dloss);
            sum += lj_model_mean_loss(m);
        }
        *grad_norm = lj_dp_optimizer_step(&r->dp, m, r->segments, r->num_segments, &c->adamw, *lr, step);
    }
    float scalars[2] = {(float)(sum / r->accumulation), (float)(g_stop_signal != 0)};
    lj_dp_sum(&r->dp, m, scalars, 2);
    *loss = r->world > 1 ? (double)scalars[0] / r->world : sum / r->accumulation;
    r->stop = scalars[1] > 0.0f; /* every rank stops at the same iteration */
    r->iteration = step;
    r->consumed_samples += c->global_batch_size;
}

lj_status lj_train_run(const lj_train_config *cfg) {
    run r;
    memset(&r, 0, sizeof r);
    r.cfg = cfg;
    lj_status s = setup(&r);
    if (s != LJ_OK) {
        teardown(&r);
        return s;
    }
    g_stop_signal = 0;
    struct sigaction sa, old_int, old_term, old_usr1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGUSR1, &sa, &old_usr1); /* the launcher's stop request through mpirun (and Slurm's --signal) */

    const double flops_per_token = lj_config_flops_per_token(&cfg->model, cfg->seq_length);
    const int64_t tokens_per_iter = (int64_t)cfg->global_batch_size * cfg->seq_length;
    int last_saved = r.iteration;
    if (r.iteration >= cfg->train_iters && r.rank == 0)
        lj_log_info("the checkpoint is at iteration %d, not below --train-iters %d: nothing to train (raise "
                    "--train-iters to continue)",
                    r.iteration, cfg->train_iters);
    /* the printed lm loss is the mean over the iterations since the last printed line (Megatron's
     * convention); --log-json keeps every iteration's own loss */
    double interval_loss = 0.0;
    int interval_iters = 0;
    while (r.iteration < cfg->train_iters && !r.stop) {
        const double t0 = lj_time_sec();
        double loss, grad_norm;
        float lr;
        train_step(&r, &loss, &grad_norm, &lr);
        const double dt = lj_time_sec() - t0;
        const double tps = (double)tokens_per_iter / dt;
        if (!isfinite(loss)) {
            s = lj_fail(LJ_ERR_ARG, "loss is %f at iteration %d: training diverged (lower --lr or set --clip-grad)", loss,
                        r.iteration);
            break;
        }
        interval_loss += loss;
        interval_iters++;
        if (!cfg->quiet && r.rank == 0 && (r.iteration % cfg->log_interval == 0 || r.iteration == 1 || r.iteration == cfg->train_iters)) {
            const double logged = interval_loss / interval_iters;
            interval_loss = 0.0;
            interval_iters = 0;
            printf("iteration %6d/%6d | consumed samples: %9" PRId64 " | elapsed time per iteration (ms): %.1f | "
                   "learning rate: %.6E | global batch size: %d | lm loss: %.6E | grad norm: %.3f | "
                   "tokens/s: %.0f | throughput per GPU (TFLOP/s/GPU): %.3f\n",
                   r.iteration, cfg->train_iters, r.consumed_samples, dt * 1e3, lr, cfg->global_batch_size, logged,
                   grad_norm, tps, tps * flops_per_token / 1e12 / r.world);
            fflush(stdout);
        }
        if (r.log_json) {
            fprintf(r.log_json,
                    "{\"iteration\": %d, \"loss\": %.17g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.1f, "
                    "\"step_ms\": %.3f, \"consumed_samples\": %" PRId64 ", \"tflops_per_gpu\": %.6g}\n",
                    r.iteration, loss, lr, grad_norm, tps, dt * 1e3, r.consumed_samples,
                    tps * flops_per_token / 1e12 / r.world);
            fflush(r.log_json);
        }
        const lj_train_tb_step tb_step = {r.iteration, r.consumed_samples, cfg->global_batch_size, loss, lr, grad_norm, dt};
        lj_train_tb_iteration(&r.tb, &tb_step);
        if (r.have_valid && cfg->eval_interval > 0 && cfg->eval_iters > 0 && r.iteration % cfg->eval_interval == 0)
            log_eval(&r, evaluate(&r));
        if (cfg->save && cfg->save_interval > 0 && r.iteration % cfg->save_interval == 0) {
            s = checkpoint(&r);
            if (s != LJ_OK) break;
            last_saved = r.iteration;
        }
        if (cfg->exit_interval > 0 && r.iteration % cfg->exit_interval == 0 && r.iteration < cfg->train_iters) {
            lj_log_info("--exit-interval %d: exiting after iteration %d", cfg->exit_interval, r.iteration);
            if (cfg->save && last_saved != r.iteration) s = checkpoint(&r);
            sigaction(SIGINT, &old_int, NULL);
            sigaction(SIGTERM, &old_term, NULL);
            sigaction(SIGUSR1, &old_usr1, NULL);
            teardown(&r);
            return s;
        }
    }
    if (s == LJ_OK && r.stop) {
        lj_log_info("received %s at iteration %d: stopping",
                    g_stop_signal == SIGINT    ? "SIGINT"
                    : g_stop_signal == SIGTERM ? "SIGTERM"
                    : g_stop_signal == SIGUSR1 ? "a stop request (SIGUSR1)"
                                               : "a signal (on another rank)",
                    r.iteration);
        if (cfg->save && last_saved != r.iteration) s = checkpoint(&r);
        if (s == LJ_OK) s = lj_fail(LJ_ERR_INTERRUPTED, "interrupted at iteration %d%s", r.iteration,
                                    cfg->save ? " (checkpoint saved)" : " (no --save: nothing saved)");
    } else if (s == LJ_OK) {
        const int evaluated = cfg->eval_interval > 0 && r.iteration % cfg->eval_interval == 0;
        if (r.have_valid && cfg->eval_iters > 0 && !evaluated) log_eval(&r, evaluate(&r));
        if (cfg->save && last_saved != r.iteration) s = checkpoint(&r);
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    teardown(&r);
    return s;
}

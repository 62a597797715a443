/* vl_train.c: the Qwen3-VL training loop (see vl_train.h). */
#include "train/vl_train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "checkpoint/checkpoint.h"
#include "data/mm_loader.h"
#include "io/hf_vl.h"
#include "model/vl.h"
#include "optim/step.h"
#include "plan/build.h"
#include "plan/plan.h"
#include "plan/planner_vl.h"
#include "train/train.h"

void lj_vl_train_config_defaults(lj_vl_train_config *c) {
    memset(c, 0, sizeof *c);
    c->seq_length = 256;
    c->micro_batch_size = 1;
    c->train_iters = 10;
    c->log_interval = 1;
    c->keep_last = 2;
    c->num_workers = 2;
    c->seed = 1234;
    c->lr = (lj_lr_schedule){.lr = 1e-3, .min_lr = 0.0, .style = LJ_LR_CONSTANT, .step_size = 1};
    c->adamw = (lj_adamw_config){0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, LJ_WD_MEGATRON, 0, 0};
    c->linear_recipe = LJ_LINEAR_RECIPE_DEFAULT;
    c->fp8 = lj_linear_fp8_defaults();
    c->vision_recompute = LJ_VL_VISION_RECOMPUTE_AUTO; /* not given: none, unless --recompute auto needs it */
}

typedef struct {
    const lj_vl_train_config *c;
    const lj_ops *ops;
    lj_vl_config cfg;
    lj_model m;
    lj_plan plan;
    lj_vl vl;
    int have_model, have_vl;
    lj_mm_loader *loader;
    lj_vl_optimizer opt;
    float *host[8];            /* a checkpoint's tensors in host memory (NULL until needed): the six of
                                  both towers, then the two FP8 recipe states */
    int32_t *doc_start;        /* [B*T] host */
    int accumulation;          /* A: micro-batches per iteration (global_batch_size / micro_batch_size) */
    const lj_mm_batch **batches; /* [A]: the iteration's, held by the loader (lj_mm_loader_config.hold) */
    int iteration;
    int64_t loader_position;
    FILE *log_json;
    int log_json_created;      /* --log-json did not exist before this run */
    long log_json_before;      /* its bytes before this run's start record */
    int stepped;               /* an iteration completed: the log is this run's */
    double wait_sec;           /* this step's time blocked on the loader, over its A micro-batches (its
                                  threads decode ahead) */
    double wait_total, step_total; /* over the steps after the first (the first waits for the first batch) */
} vl_run;

/* Whether --load names a checkpoint root to resume (*resume 1, root[LJ_PATH_MAX] and its latest
 * *iteration) rather than an HF directory. */
static lj_status find_resume(const lj_vl_train_config *c, int *resume, char *root, int *iteration) {
    *resume = 0;
    *iteration = 0;
    root[0] = 0;
    if (!c->load) return LJ_OK;
    struct stat st;
    char latest[LJ_PATH_MAX + 64];
    snprintf(latest, sizeof latest, "%s/latest_checkpointed_iteration.txt", c->load);
    if (stat(latest, &st) != 0) return LJ_OK;
    *resume = 1;
    snprintf(root, LJ_PATH_MAX, "%s", c->load);
    return lj_ckpt_latest(root, iteration);
}

/* cfg->name from a --model or checkpoint value: a path's last component, or for a config.json (or
 * a directory holding one) the name of its directory (Qwen3-VL-2B-Instruct/config.json gives
 * "Qwen3-VL-2B-Instruct"); a preset's name as it is. */
static void name_model(const char *value, lj_vl_config *cfg) {
    char buf[LJ_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", value);
    for (;;) {
        size_t n = strlen(buf);
        while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
        char *slash = strrchr(buf, '/');
        const char *base = slash ? slash + 1 : buf;
        if (strcmp(base, "config.json") != 0 && strcmp(base, "hf") != 0 && strcmp(base, ".") != 0) {
            snprintf(cfg->name, sizeof cfg->name, "%s", base);
            return;
        }
        if (!slash) return; /* a bare config.json: the name lj_vl_config_load gave */
        *slash = 0;
    }
}

/* The "model" that the iteration's state.json records (read as it is: load_state checks the file),
 * or NULL; free() it. */
static char *recorded_model(const char *root, int iteration) {
    char dir[LJ_PATH_MAX], path[LJ_PATH_MAX + 32], *text = NULL, *name = NULL;
    size_t len = 0;
    if (lj_ckpt_iter_dir(root, iteration, dir) != LJ_OK) return NULL;
    snprintf(path, sizeof path, "%s/%s", dir, LJ_CKPT_STATE_FILE);
    if (lj_file_read_all(path, &text, &len) != LJ_OK) return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (cJSON_IsString(m) && m->valuestring[0]) name = strdup(m->valuestring);
    cJSON_Delete(j);
    return name;
}

static lj_status resolve_model(const lj_vl_train_config *c, int resume, const char *root, int iteration,
                               lj_vl_config *cfg) {
    if (c->model) {
        LJ_TRY(lj_vl_config_resolve(c->model, cfg));
        name_model(c->model, cfg);
        return LJ_OK;
    }
    if (!c->load) return lj_fail(LJ_ERR_ARG, "train: give --model (a Qwen3-VL preset or config.json) or --load");
    if (!resume) {
        LJ_TRY(lj_vl_config_resolve(c->load, cfg));
        name_model(c->load, cfg);
        return LJ_OK;
    }
    /* a resumed run's model is the config.json of the checkpoint's HF export, named as the run that
     * saved it named it */
    char dir[LJ_PATH_MAX], path[LJ_PATH_MAX + 32];
    LJ_TRY(lj_ckpt_iter_dir(root, iteration, dir));
    snprintf(path, sizeof path, "%s/hf/config.json", dir);
    LJ_TRY(lj_vl_config_load(path, cfg));
    char *name = recorded_model(root, iteration);
    name_model(name ? name : root, cfg);
    free(name);
    return LJ_OK;
}

lj_status lj_vl_train_model_config(const lj_vl_train_config *c, lj_vl_config *cfg) {
    int resume, iteration;
    char root[LJ_PATH_MAX];
    LJ_TRY(find_resume(c, &resume, root, &iteration));
    return resolve_model(c, resume, root, iteration, cfg);
}

static void make_range(lj_vl_range *r, const lj_param_info *params, int count, int64_t begin, int64_t end,
                       const lj_adamw_config *a) {
    lj_param_layout tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.params = (lj_param_info *)params;
    tmp.count = count;
    lj_adamw_segment *all;
    const int n = lj_adamw_segments(&tmp, a, &all);
    r->begin = begin;
    r->count = end - begin;
    r->num_seg = lj_adamw_segments_slice(all, n, begin, end - begin, &r->seg);
    free(all);
}

lj_status lj_vl_optimizer_init(lj_vl_optimizer *o, const lj_vl *vl, const lj_adamw_config *adamw, int freeze_language,
                               int freeze_vision, int freeze_projection) {
    memset(o, 0, sizeof *o);
    if (freeze_language && freeze_vision && freeze_projection)
        return lj_fail(LJ_ERR_ARG, "--freeze-language-model, --freeze-vision-model and --freeze-vision-projection "
                                   "together leave nothing to train: drop one of them");
    o->adamw = *adamw;
    const lj_model *m = vl->m;
    const lj_vision_layout *lo = &vl->vis.layout;
    make_range(&o->ranges[0], m->layout.params, m->layout.count, 0, m->layout.total, adamw);
    const int64_t m0 = lo->params[lo->merger0].offset;
    make_range(&o->ranges[1], lo->params, lo->count, 0, m0, adamw);
    make_range(&o->ranges[2], lo->params, lo->count, m0, lo->total, adamw);
    o->trainable[0] = !freeze_language;
    o->trainable[1] = !freeze_vision;
    o->trainable[2] = !freeze_projection;
    return LJ_OK;
}

void lj_vl_optimizer_free(lj_vl_optimizer *o) {
    for (int k = 0; k < 3; k++) free(o->ranges[k].seg);
    memset(o, 0, sizeof *o);
}

double lj_vl_optimizer_step(const lj_vl_optimizer *o, lj_vl *vl, float lr, int step) {
    lj_model *m = vl->m;
    lj_vision *vis = &vl->vis;
    const lj_ops *ops = m->ops;
    const size_t sg = lj_dtype_size(ops->grad_dtype), sp = lj_dtype_size(ops->param_dtype);
    /* the global norm over the trained parts, each part's sum of squares read back */
    const void *grads[3] = {m->grads, vis->grads, vis->grads};
    void *ws[3] = {m->ws_norm, vis->ws_grad_norm, vis->ws_grad_norm};
    double sq = 0.0;
    for (int k = 0; k < 3; k++) {
        if (!o->trainable[k]) continue;
        ops->global_norm_sq(m->grad_norm_sq, (const char *)grads[k] + (size_t)o->ranges[k].begin * sg,
                            o->ranges[k].count, ws[k]);
        float part = 0.0f;
        ops->download(&part, m->grad_norm_sq, sizeof part);
        sq += part;
    }
    const float total = (float)sq;
    ops->upload(m->grad_norm_sq, &total, sizeof total);
    const lj_adamw_hparams hp = lj_adamw_hparams_of(&o->adamw);
    float sc[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(sc, &hp, lr, step);
    ops->upload(m->adamw_scalars, sc, sizeof sc);
    void *params[3] = {m->params, vis->params, vis->params};
    float *master[3] = {m->master, vis->master, vis->master};
    float *mm[3] = {m->adam_m, vis->adam_m, vis->adam_m}, *vv[3] = {m->adam_v, vis->adam_v, vis->adam_v};
    for (int k = 0; k < 3; k++) {
        if (!o->trainable[k]) continue;
        const int64_t b = o->ranges[k].begin;
        ops->adamw_update((char *)params[k] + (size_t)b * sp, master[k] + b, (const char *)grads[k] + (size_t)b * sg,
                          mm[k] + b, vv[k] + b, o->ranges[k].seg, o->ranges[k].num_seg, &hp, m->adamw_scalars,
                          m->grad_norm_sq);
    }
    ops->synchronize();
    return sqrt(sq);
}

/* The decoder's recompute of --recompute into s->model.recompute (lj_vl_recompute_of; auto: the
 * planner for the joint plan of s with the tower planned for max_patches and max_images, on this
 * backend's memory), said in a log line. Errors: those of lj_vl_recompute_of, naming --recompute. */
static lj_status choose_recompute(vl_run *r, lj_model_setup *s, int max_patches, int max_images) {
    const lj_vl_train_config *c = r->c;
    lj_planner_target t;
    memset(&t, 0, sizeof t);
    char cache[LJ_PATH_MAX], desc[96], why[2048];
    if (c->recompute && !strcmp(c->recompute, "auto")) {
        lj_cache_dir(cache, sizeof cache);
        LJ_TRY(lj_planner_target_init(&t, r->ops, cache, NULL));
        t.grad_accum_steps = r->accumulation;
    }
    LJ_TRY(lj_vl_recompute_of(c->recompute, &r->cfg, s, max_patches, max_images, &t, desc, sizeof desc, why,
                              sizeof why));
    if (!c->quiet && why[0]) lj_log_info("train: recompute planner: %s", why);
    if (!c->quiet && (c->recompute || s->model.vision_recompute))
        lj_log_info("decoder recompute (--recompute %s): %s; vision tower recompute: %s",
                    c->recompute ? c->recompute : "none", desc, lj_vl_vision_recompute_name(s->model.vision_recompute));
    return LJ_OK;
}

static lj_status setup(vl_run *r, int resume, const char *root, int iteration) {
    const lj_vl_train_config *c = r->c;
    LJ_TRY(resolve_model(c, resume, root, iteration, &r->cfg));
    lj_model_setup s = {.ops = r->ops, .cfg = &r->cfg.text};
    s.model.micro_batch_size = c->micro_batch_size;
    s.model.seq_length = c->seq_length;
    s.model.training = 1;
    s.model.fused = 1;
    s.model.doc_mask.reset_attention_mask = 1; /* the decoder's doc_start buffer: packed samples stay apart */
    s.model.linear_recipe = c->linear_recipe;  /* both towers' block linears (lj_vl_init passes it on) */
    s.model.fp8 = c->fp8;
    s.model.vision_recompute = c->vision_recompute; /* the tower's blocks' (lj_vl_init passes it on) */
    int max_patches, max_images;
    lj_vl_capacity(&r->cfg, c->micro_batch_size, c->seq_length, &max_patches, &max_images);
    LJ_TRY(choose_recompute(r, &s, max_patches, max_images));
    LJ_TRY(lj_vl_build(&r->vl, &r->m, &r->plan, &s, &r->cfg, max_patches, max_images, NULL));
    r->have_model = r->have_vl = 1;
    if (!c->quiet) {
        size_t tower = 0;
        for (int i = 0; i < r->plan.count; i++)
            if (lj_vl_buffer_is_vision(r->plan.buffers[i].name))
                tower += (r->plan.buffers[i].bytes + LJ_PLAN_ALIGN - 1) / LJ_PLAN_ALIGN * LJ_PLAN_ALIGN;
        char b1[32], b2[32];
        lj_log_info("memory plan: %s (%zu bytes) in %d buffers on %s, of which the vision tower %s (%d patches at "
                    "most)",
                    lj_format_bytes(r->plan.total_bytes, b1, sizeof b1), r->plan.total_bytes, r->plan.count,
                    r->ops->name, lj_format_bytes(tower, b2, sizeof b2), max_patches);
        const lj_linear_fp8_state *ft = &r->m.linear.fp8, *fv = &r->vl.vis.linear.fp8;
        if (ft->active || fv->active) {
            char what[200];
            lj_linear_fp8_describe(&c->fp8, what, sizeof what);
            lj_log_info("precision: %s; %d FP8 linears in the decoder's blocks and %d in the vision tower's (qkv, "
                        "proj, fc1, fc2; patch embedding, mergers, embedding, lm_head, norms and attention in %s)",
                        what, ft->num_linears, fv->num_linears, lj_dtype_name(r->ops->act_dtype));
        }
    }
    LJ_TRY(lj_vl_build_state(&r->vl, &r->m, &r->plan, c->seed));
    LJ_TRY(lj_vl_optimizer_init(&r->opt, &r->vl, &c->adamw, c->freeze_language_model, c->freeze_vision_model,
                                c->freeze_vision_projection));
    r->doc_start = lj_malloc((size_t)c->micro_batch_size * c->seq_length * sizeof(int32_t));
    return LJ_OK;
}

/* ---- checkpoints ------------------------------------------------------------------- */

/* The recipe contexts of the two towers (model/linear.h): 0 the decoder's, 1 the tower's. */
static lj_linear_recipe_ctx *recipe_of(vl_run *r, int k) { return k == 0 ? &r->m.linear : &r->vl.vis.linear; }

/* The f32 values of tower k's FP8 recipe state (amax histories and scales), 0 without FP8. */
static int64_t fp8_numel(vl_run *r, int k) {
    const lj_linear_fp8_state *f = &recipe_of(r, k)->fp8;
    int64_t nh, ns;
    return f->active ? lj_linear_fp8_state_numel(f, &nh, &ns) : 0;
}

static const char *const fp8_tensor[2] = {"text.fp8.state", "vision.fp8.state"};

/* The checkpoint's tensors over host copies of the state (r->host, allocated once): the six of
 * both towers, then the FP8 recipe state of each tower k whose fp8[k] is set (fp8 may be NULL:
 * none). A save downloads the state into them, a resume uploads them back (download_state,
 * upload_state). The same on every backend (on the CPU the copies are memcpy's), so the CPU tests
 * cover the CUDA path's staging. */
static int ckpt_tensors(vl_run *r, lj_ckpt_tensor *t, const int *fp8) {
    const int64_t nt = r->m.layout.total, nv = r->vl.vis.layout.total;
    static const char *names[6] = {"text.params", "text.adam.m", "text.adam.v",
                                   "vision.params", "vision.adam.m", "vision.adam.v"};
    for (int i = 0; i < 6; i++) {
        const int64_t n = i < 3 ? nt : nv;
        if (!r->host[i]) r->host[i] = lj_malloc((size_t)n * sizeof(float));
        t[i] = (lj_ckpt_tensor){names[i], r->host[i], n};
    }
    int n = 6;
    for (int k = 0; k < 2; k++) {
        const int64_t n8 = fp8 && fp8[k] ? fp8_numel(r, k) : 0;
        if (n8 == 0) continue;
        if (!r->host[6 + k]) r->host[6 + k] = lj_malloc((size_t)n8 * sizeof(float));
        t[n++] = (lj_ckpt_tensor){fp8_tensor[k], r->host[6 + k], n8};
    }
    return n;
}

/* The state into the host copies (a save): the f32 master weights (the parameters on an f32
 * backend) and moments of both towers, and the FP8 recipe states. */
static void download_state(vl_run *r, const lj_ckpt_tensor *t, int n) {
    const float *own[6] = {r->m.master, r->m.adam_m, r->m.adam_v, r->vl.vis.master, r->vl.vis.adam_m, r->vl.vis.adam_v};
    for (int i = 0; i < 6; i++) r->ops->download(t[i].data, own[i], (size_t)t[i].numel * sizeof(float));
    for (int i = 6; i < n; i++) lj_linear_state_get(recipe_of(r, strcmp(t[i].name, fp8_tensor[0]) ? 1 : 0), t[i].data);
}

/* The host copies into the state (a resume): the master weights and the parameters rounded from
 * them, the moments as read, the FP8 recipe states given. */
static void upload_state(vl_run *r, const lj_ckpt_tensor *t, int n) {
    lj_model_set_weights(&r->m, t[0].data);
    r->ops->upload(r->m.adam_m, t[1].data, (size_t)t[1].numel * sizeof(float));
    r->ops->upload(r->m.adam_v, t[2].data, (size_t)t[2].numel * sizeof(float));
    lj_vision_set_weights(&r->vl.vis, t[3].data);
    r->ops->upload(r->vl.vis.adam_m, t[4].data, (size_t)t[4].numel * sizeof(float));
    r->ops->upload(r->vl.vis.adam_v, t[5].data, (size_t)t[5].numel * sizeof(float));
    for (int i = 6; i < n; i++) lj_linear_state_set(recipe_of(r, strcmp(t[i].name, fp8_tensor[0]) ? 1 : 0), t[i].data);
    r->ops->synchronize();
}

/* state.json's "fp8": the recipe as described, and per tower (text, vision) the shape of its
 * state (FP8 linears, history rows, values), which a resume checks before it takes the state;
 * "" without FP8. */
static void fp8_state_json(vl_run *r, char *buf, size_t len) {
    buf[0] = 0;
    if (!fp8_numel(r, 0) && !fp8_numel(r, 1)) return;
    char what[200];
    lj_linear_fp8_describe(&r->c->fp8, what, sizeof what);
    int n = snprintf(buf, len, ", \"fp8\": {\"recipe\": \"%s\"", what);
    static const char *const key[2] = {"text", "vision"};
    for (int k = 0; k < 2 && n > 0 && (size_t)n < len; k++) {
        const lj_linear_fp8_state *f = &recipe_of(r, k)->fp8;
        if (!f->active) continue;
        n += snprintf(buf + n, len - (size_t)n,
                      ", \"%s\": {\"num_linears\": %d, \"history_len\": %d, \"state_numel\": %" PRId64 "}", key[k],
                      f->num_linears, f->history_len, fp8_numel(r, k));
    }
    if (n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, "}");
}

/* Whether the checkpoint's state.json (j) holds tower k's FP8 recipe state in the shape this run
 * has: 1 then; else 0, saying why the recipe of that tower starts fresh (or that the checkpoint's
 * state is not used: this run has no FP8). */
static int fp8_state_loadable(vl_run *r, const cJSON *j, int k, const char *root) {
    static const char *const key[2] = {"text", "vision"}, *const tower[2] = {"decoder", "vision tower"};
    const lj_linear_fp8_state *f = &recipe_of(r, k)->fp8;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "fp8"), key[k]);
    if (!f->active) {
        if (o) lj_log_info("%s: the checkpoint's FP8 recipe state of the %s is not used (this run has no FP8 linears)",
                           root, tower[k]);
        return 0;
    }
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "state_numel");
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(o, "num_linears");
    const cJSON *hl = cJSON_GetObjectItemCaseSensitive(o, "history_len");
    if (cJSON_IsNumber(n) && cJSON_IsNumber(nl) && cJSON_IsNumber(hl) && (int64_t)n->valuedouble == fp8_numel(r, k) &&
        nl->valueint == f->num_linears && hl->valueint == f->history_len)
        return 1;
    lj_log_info("%s: %s: the FP8 amax histories and scales of the %s start fresh", root,
                o ? "its FP8 recipe state has another shape (FP8 layers or amax history length)"
                  : "no FP8 recipe state in it (saved by a run without FP8)",
                tower[k]);
    return 0;
}

static lj_status save_hf(const char *dir, void *ctx) {
    vl_run *r = ctx;
    char hf[LJ_PATH_MAX + 8];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    LJ_TRY(lj_mkdir_p(hf));
    return lj_hf_vl_export_into(hf, &r->cfg, r->host[0], r->host[3], r->c->hf_fp32 ? LJ_DTYPE_F32 : LJ_DTYPE_BF16,
                                r->c->tokenizer_dir, lj_mm_loader_dataset(r->loader)->meta.min_pixels,
                                lj_mm_loader_dataset(r->loader)->meta.max_pixels);
}

static lj_status save(vl_run *r) {
    const lj_vl_train_config *c = r->c;
    lj_ckpt_tensor t[8];
    const int all[2] = {1, 1};
    const int n = ckpt_tensors(r, t, all);
    download_state(r, t, n);
    char fp8[600], json[1536];
    fp8_state_json(r, fp8, sizeof fp8);
    snprintf(json, sizeof json,
             "{\"model\": \"%s\", \"model_type\": \"qwen3_vl\", \"iteration\": %d, \"loader_position\": %" PRId64
             ", \"seed\": %" PRIu64 ", \"seq_length\": %d, \"micro_batch_size\": %d, \"global_batch_size\": %d%s}",
             r->cfg.name, r->iteration, r->loader_position, c->seed, c->seq_length,
             c->micro_batch_size, c->micro_batch_size * r->accumulation, fp8);
    LJ_TRY(lj_ckpt_save_ex(c->save, r->iteration, t, n, json, c->keep_last, save_hf, r));
    if (!c->quiet) lj_log_info("saved iteration %d to %s", r->iteration, c->save);
    return LJ_OK;
}

static lj_status state_int(const cJSON *j, const char *key, const char *root, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v)) return lj_fail(LJ_ERR_FORMAT, "%s: state.json has no number '%s'", root, key);
    *out = (int64_t)v->valuedouble;
    return LJ_OK;
}

static lj_status load_state(vl_run *r, const char *root, int iteration) {
    const lj_vl_train_config *c = r->c;
    /* state.json first: which FP8 recipe states this run can take */
    char *text = NULL;
    LJ_TRY(lj_ckpt_read_state_json(root, iteration, &text));
    cJSON *j = cJSON_Parse(text);
    free(text);
    text = NULL;
    int take[2], saved = 0;
    for (int k = 0; k < 2; k++) {
        take[k] = fp8_state_loadable(r, j, k, root);
        static const char *const key[2] = {"text", "vision"};
        saved |= cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "fp8"), key[k]) && !take[k];
    }
    lj_ckpt_tensor t[8];
    const int n = ckpt_tensors(r, t, take);
    /* a saved state left out was named above: no warning about its tensor */
    lj_status ls = lj_ckpt_load_ex(root, iteration, t, n, NULL, !saved);
    if (ls != LJ_OK) {
        cJSON_Delete(j);
        return ls;
    }
    upload_state(r, t, n);
    int64_t it = 0, pos = 0, seed = 0, T = 0, B = 0;
    lj_status s = state_int(j, "iteration", root, &it);
    if (s == LJ_OK) s = state_int(j, "loader_position", root, &pos);
    if (s == LJ_OK) s = state_int(j, "seed", root, &seed);
    if (s == LJ_OK) s = state_int(j, "seq_length", root, &T);
    if (s == LJ_OK) s = state_int(j, "micro_batch_size", root, &B);
    cJSON_Delete(j);
    LJ_TRY(s);
    if ((uint64_t)seed != c->seed || T != c->seq_length || B != c->micro_batch_size)
        lj_log_warn("%s: saved with --seed %" PRId64 " --seq-length %" PRId64 " --micro-batch-size %" PRId64
                    "; this run's differ, so its data order starts afresh",
                    root, seed, T, B);
    else r->loader_position = pos;
    r->iteration = (int)it;
    if (!c->quiet) lj_log_info("resumed %s at iteration %d", root, r->iteration);
    return LJ_OK;
}

static lj_status load_hf(vl_run *r, const char *dir) {
    float *tw = lj_malloc((size_t)r->m.layout.total * sizeof(float));
    float *vw = lj_malloc((size_t)r->vl.vis.layout.total * sizeof(float));
    lj_status s = lj_hf_vl_import(dir, &r->cfg, tw, vw);
    if (s == LJ_OK) {
        lj_model_set_weights(&r->m, tw);
        lj_vision_set_weights(&r->vl.vis, vw);
        if (!r->c->quiet) lj_log_info("loaded the weights of %s", dir);
    }
    free(tw);
    free(vw);
    return s;
}

/* ---- one step ------------------------------------------------------------------------ */

/* doc_start of every row: the first position of each run of equal segment ids. */
static void doc_starts(const lj_mm_batch *b, int32_t *out) {
    for (int row = 0; row < b->B; row++) {
        const int32_t *seg = b->segment_ids + (size_t)row * b->T;
        int32_t *d = out + (size_t)row * b->T;
        for (int t = 0; t < b->T; t++) d[t] = t > 0 && seg[t] == seg[t - 1] ? d[t - 1] : t;
    }
}

/* After iteration `iteration`'s passes: the amaxes of both towers' FP8 linears they recorded; one
 * that is not finite (the tensor held inf or NaN) stops the run naming it, the first of each tower
 * (the tower's forward runs first, the decoder's backward first: either may be where it began),
 * before the loss is checked, as `ljperf train` does for a text model. */
static lj_status check_fp8(vl_run *r, int iteration) {
    static const char *const tower[2] = {"the decoder's", "the vision tower's"};
    char what[2][160], both[400] = "";
    int bad = 0;
    for (int k = 0; k < 2; k++) {
        const lj_linear_recipe_ctx *lc = recipe_of(r, k);
        if (!lc->fp8.active || !lj_linear_fp8_overflow(lc, what[k], sizeof what[k])) continue;
        const size_t n = strlen(both);
        snprintf(both + n, sizeof both - n, "%s%s %s", bad++ ? " and of " : "", tower[k], what[k]);
    }
    if (!bad) return LJ_OK;
    return lj_fail(LJ_ERR_ARG, "FP8 scales overflow at iteration %d: the amax of %s %s not finite (the tensor holds "
                               "inf or NaN; lower --lr or set --clip-grad)", iteration, both, bad > 1 ? "are" : "is");
}

/* The iteration's A micro-batches into r->batches (the loader holds them all), the time blocked on
 * it summed into r->wait_sec, the loader's position after the last. *targets: their trained
 * tokens (labels >= 0, the rows lj_vl_set_batch counts). */
static lj_status next_batches(vl_run *r, int64_t *targets) {
    r->wait_sec = 0.0;
    *targets = 0;
    for (int k = 0; k < r->accumulation; k++) {
        const double t0 = lj_time_sec();
        LJ_TRY(lj_mm_loader_next(r->loader, &r->batches[k]));
        r->wait_sec += lj_time_sec() - t0;
        const lj_mm_batch *b = r->batches[k];
        for (int64_t i = 0; i < (int64_t)b->B * b->T; i++) *targets += b->labels[i] >= 0;
    }
    r->loader_position = lj_mm_loader_position(r->loader);
    return LJ_OK;
}

/* Micro-batch b into both towers: the image pads and the tower's inputs with the loader's labels
 * as targets (lj_vl_set_batch), its MRoPE ids, the decoder's document starts. */
static lj_status set_micro_batch(vl_run *r, const lj_mm_batch *b) {
    int32_t *grid = lj_malloc(((size_t)b->num_images + 1) * 3 * sizeof(int32_t));
    for (int i = 0; i < b->num_images; i++) {
        grid[3 * i] = b->image_grid_thw[i].t;
        grid[3 * i + 1] = b->image_grid_thw[i].h;
        grid[3 * i + 2] = b->image_grid_thw[i].w;
    }
    lj_status s = lj_vl_set_batch(&r->vl, b->input_ids, b->labels, b->pixel_values, grid, b->num_images);
    free(grid);
    LJ_TRY(s);
    lj_vl_set_positions(&r->vl, b->position_ids);
    doc_starts(b, r->doc_start);
    r->m.ops->upload(r->m.doc_start, r->doc_start, (size_t)b->B * b->T * sizeof(int32_t));
    return LJ_OK;
}

/* One iteration: the gradients zeroed, A micro-batches of forward + backward with every trained
 * token's loss scaled by 1 / N (N: the trained tokens of all A), AdamW. *loss: the mean over the N
 * tokens; *tokens = N. */
static lj_status step(vl_run *r, double *loss, double *grad_norm, float *lr_out, int64_t *tokens) {
    const lj_vl_train_config *c = r->c;
    int64_t n = 0;
    LJ_TRY(next_batches(r, &n));
    *tokens = n;
    if (n == 0) return lj_fail(LJ_ERR_ARG, "--data-path %s: a global batch without trained tokens", c->data_path);
    lj_vl_zero_grads(&r->vl);
    *loss = 0.0;
    for (int k = 0; k < r->accumulation; k++) {
        LJ_TRY(set_micro_batch(r, r->batches[k]));
        lj_vl_forward_backward(&r->vl, 1, 1.0f / (float)n);
        *loss += lj_model_mean_loss(&r->m) * ((double)r->m.num_targets / (double)n); /* A = 1: the mean as it is */
    }
    const float lr = (float)lj_lr_at(&c->lr, r->iteration);
    *lr_out = lr;
    *grad_norm = lj_vl_optimizer_step(&r->opt, &r->vl, lr, r->iteration + 1);
    LJ_TRY(check_fp8(r, r->iteration + 1));
    if (!isfinite(*loss)) return lj_fail(LJ_ERR_ARG, "iteration %d: the loss is not finite", r->iteration + 1);
    return LJ_OK;
}

static void log_iteration(vl_run *r, double loss, double gn, float lr, int64_t tokens, double sec) {
    if (!r->c->quiet)
        printf(" iteration %8d/%8d | lm loss: %.6E | grad norm: %.4f | learning rate: %.6E | tokens: %" PRId64 " | "
               "elapsed time per iteration (ms): %.1f\n",
               r->iteration, r->c->train_iters, loss, gn, lr, tokens, sec * 1e3);
    if (r->log_json) {
        fprintf(r->log_json,
                "{\"iteration\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens\": %" PRId64 ", "
                "\"iteration_ms\": %.3f, \"loader_wait_ms\": %.3f}\n",
                r->iteration, loss, (double)lr, gn, tokens, sec * 1e3, r->wait_sec * 1e3);
        fflush(r->log_json);
    }
    fflush(stdout);
}

static lj_status check_dataset(const vl_run *r) {
    const lj_mm_dataset *ds = lj_mm_loader_dataset(r->loader);
    const lj_mm_meta *mt = &ds->meta;
    const lj_vl_config *v = &r->cfg;
    if (mt->image_pad_id != v->image_token_id || mt->vision_start_id != v->vision_start_token_id ||
        mt->vision_end_id != v->vision_end_token_id)
        return lj_fail(LJ_ERR_ARG,
                       "--data-path %s: image tokens %d/%d/%d (pad, start, end), the model %s uses %d/%d/%d "
                       "(a dataset of another tokenizer?)",
                       r->c->data_path, mt->image_pad_id, mt->vision_start_id, mt->vision_end_id, v->name,
                       v->image_token_id, v->vision_start_token_id, v->vision_end_token_id);
    if (mt->patch_size != v->vision.patch_size || mt->merge_size != v->vision.spatial_merge_size ||
        mt->temporal_patch_size != v->vision.temporal_patch_size)
        return lj_fail(LJ_ERR_ARG, "--data-path %s: patch %d, merge %d, temporal patch %d; the model's are %d, %d, %d",
                       r->c->data_path, mt->patch_size, mt->merge_size, mt->temporal_patch_size,
                       v->vision.patch_size, v->vision.spatial_merge_size, v->vision.temporal_patch_size);
    for (int64_t i = 0; i < ds->num_tokens; i++)
        if (ds->tokens[i] < 0 || ds->tokens[i] >= v->text.vocab_size)
            return lj_fail(LJ_ERR_ARG, "--data-path %s: token %d at %" PRId64 " is outside the vocabulary of %s (%d)",
                           r->c->data_path, ds->tokens[i], i, v->name, v->text.vocab_size);
    return LJ_OK;
}

static lj_status run_loop(vl_run *r) {
    const lj_vl_train_config *c = r->c;
    int resume = 0, iteration = 0;
    char root[LJ_PATH_MAX] = "";
    LJ_TRY(find_resume(c, &resume, root, &iteration));
    LJ_TRY(setup(r, resume, root, iteration));
    if (resume) LJ_TRY(load_state(r, root, iteration));
    else if (c->load) LJ_TRY(load_hf(r, c->load));
    if (c->save) LJ_TRY(lj_ckpt_check_save(c->save)); /* an unwritable --save now, not after the last iteration */
    if (!c->data_path) return lj_fail(LJ_ERR_ARG, "--data-path: a multimodal dataset prefix is required");
    lj_mm_loader_config lc;
    memset(&lc, 0, sizeof lc);
    lc.prefix = c->data_path;
    lc.seq_length = c->seq_length;
    lc.micro_batch_size = c->micro_batch_size;
    lc.seed = c->seed;
    lc.no_shuffle = c->no_shuffle;
    lc.dp_world_size = 1;
    lc.num_workers = c->num_workers;
    lc.resize = LJ_RESIZE_TORCH_U8;
    lc.start_position = r->loader_position;
    lc.hold = r->accumulation; /* the iteration's micro-batches, counted before the first backward */
    LJ_TRY(lj_mm_loader_open(&r->loader, &lc));
    LJ_TRY(check_dataset(r));
    if (c->log_json) {
        struct stat st;
        r->log_json_created = stat(c->log_json, &st) != 0;
        r->log_json = fopen(c->log_json, r->iteration > 0 ? "a" : "w");
        if (!r->log_json) return lj_fail(LJ_ERR_IO, "--log-json %s: cannot open for appending", c->log_json);
        fseek(r->log_json, 0, SEEK_END);
        r->log_json_before = ftell(r->log_json) > 0 ? ftell(r->log_json) : 0; /* appending after a resume */
        char precision[64];
        const lj_train_start start = {
            .iteration = r->iteration,
            .model = r->cfg.name,
            .parameters = r->m.layout.total + r->vl.vis.layout.total,
            .precision = lj_train_precision(r->m.ops, r->m.linear.fp8.active || r->vl.vis.linear.fp8.active,
                                            &c->fp8, precision, sizeof precision),
            .ops = r->m.ops,
            .devices = 1,
            .micro_batch_size = c->micro_batch_size,
            .global_batch_size = c->micro_batch_size * r->accumulation,
            .seq_length = c->seq_length,
            .train_iters = c->train_iters,
            .command = c->command_line,
        };
        char *line = lj_train_start_record(&start);
        fputs(line, r->log_json);
        fflush(r->log_json);
        free(line);
    }
    if (!c->quiet)
        lj_log_info("Qwen3-VL %s: %" PRId64 " text + %" PRId64 " vision parameters; trained: language model %s, vision "
                    "model %s, vision projection %s; micro-batch %d, global batch %d (%d accumulation step%s)",
                    r->cfg.name, r->m.layout.total, r->vl.vis.layout.total, r->opt.trainable[0] ? "yes" : "frozen",
                    r->opt.trainable[1] ? "yes" : "frozen", r->opt.trainable[2] ? "yes" : "frozen",
                    c->micro_batch_size, c->micro_batch_size * r->accumulation, r->accumulation,
                    r->accumulation == 1 ? "" : "s");
    const int start = r->iteration;
    while (r->iteration < c->train_iters) {
        const double t0 = lj_time_sec();
        double loss = 0.0, gn = 0.0;
        float lr = 0.0f;
        int64_t tokens = 0;
        const int first = r->iteration == start;
        LJ_TRY(step(r, &loss, &gn, &lr, &tokens));
        r->stepped = 1;
        r->iteration++;
        const double sec = lj_time_sec() - t0;
        if (!first) r->wait_total += r->wait_sec, r->step_total += sec;
        if (r->iteration % c->log_interval == 0 || r->iteration == c->train_iters) log_iteration(r, loss, gn, lr, tokens, sec);
        if (c->save && c->save_interval > 0 && r->iteration % c->save_interval == 0) LJ_TRY(save(r));
    }
    if (!c->quiet && r->step_total > 0)
        lj_log_info("loader: the steps after the first waited %.1f ms in all for their batches (%.2f%% of %.1f s)",
                    r->wait_total * 1e3, 100.0 * r->wait_total / r->step_total, r->step_total);
    if (c->save && (c->save_interval <= 0 || r->iteration % c->save_interval != 0)) LJ_TRY(save(r));
    return LJ_OK;
}

lj_status lj_vl_train_run(const lj_vl_train_config *c) {
    if (c->seq_length <= 0 || c->micro_batch_size <= 0 || c->train_iters < 0 || c->log_interval <= 0)
        return lj_fail(LJ_ERR_ARG, "--seq-length, --micro-batch-size and --log-interval must be positive, "
                                   "--train-iters >= 0");
    const int B = c->micro_batch_size, G = c->global_batch_size ? c->global_batch_size : B;
    if (G <= 0 || G % B != 0)
        return lj_fail(LJ_ERR_ARG, "--global-batch-size %d is not a positive multiple of --micro-batch-size %d: an "
                                   "optimizer step takes whole micro-batches (e.g. --global-batch-size %d)",
                       G, B, G > B ? (G + B - 1) / B * B : B);
    vl_run r;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.ops = c->ops ? c->ops : lj_ops_cpu();
    r.accumulation = G / B;
    r.batches = lj_calloc((size_t)r.accumulation, sizeof *r.batches);
    const lj_status s = run_loop(&r);
    if (r.log_json) {
        fclose(r.log_json);
        /* a run that failed before its first step leaves no log of its own: only the start record
         * would be there */
        if (s != LJ_OK && !r.stepped) {
            if (r.log_json_created) remove(c->log_json);
            else if (truncate(c->log_json, r.log_json_before) != 0)
                lj_log_warn("--log-json %s: cannot cut this run's start record off (%s)", c->log_json, strerror(errno));
        }
    }
    if (r.loader) lj_mm_loader_close(r.loader);
    lj_vl_optimizer_free(&r.opt);
    for (int i = 0; i < 8; i++) free(r.host[i]);
    free(r.doc_start);
    free(r.batches);
    if (r.have_vl) lj_vl_free(&r.vl);
    if (r.have_model) {
        lj_plan_release(&r.plan, r.m.ops);
        lj_plan_free(&r.plan);
        lj_model_free(&r.m);
    }
    return s;
}

/* vl_train.c: the Qwen3-VL training loop (see vl_train.h). */
#include "train/vl_train.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "checkpoint/checkpoint.h"
#include "data/mm_loader.h"
#include "io/hf_vl.h"
#include "model/vl.h"
#include "parallel/parallel.h"
#include "plan/plan.h"
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
    c->adamw = (lj_adamw_config){0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, LJ_WD_MEGATRON, 0};
}

/* One trainable range of a tower's flat buffers with its AdamW segments (offsets relative to
 * begin). */
typedef struct {
    int64_t begin, count;
    lj_adamw_segment *seg;
    int num_seg;
} vl_range;

typedef struct {
    const lj_vl_train_config *c;
    lj_vl_config cfg;
    lj_model m;
    lj_plan plan;
    lj_vl vl;
    int have_model, have_vl;
    lj_mm_loader *loader;
    float *vis_m, *vis_v;      /* the tower's AdamW moments (host f32: the CPU backend's memory) */
    vl_range ranges[3];        /* 0: the decoder, 1: the ViT, 2: the mergers */
    int trainable[3];
    void *norm_ws;
    float *norm_sq;            /* [1] the combined squared gradient norm the AdamW op reads */
    int32_t *doc_start;        /* [B*T] host */
    int iteration;
    int64_t loader_position;
    FILE *log_json;
} vl_run;

static lj_status resolve_model(const lj_vl_train_config *c, int resume, const char *root, int iteration,
                               lj_vl_config *cfg) {
    if (c->model) return lj_vl_config_resolve(c->model, cfg);
    if (!c->load) return lj_fail(LJ_ERR_ARG, "train: give --model (a Qwen3-VL preset or config.json) or --load");
    if (!resume) return lj_vl_config_resolve(c->load, cfg);
    /* a resumed run's model is the config.json of the checkpoint's HF export */
    char dir[LJ_PATH_MAX], path[LJ_PATH_MAX + 32];
    LJ_TRY(lj_ckpt_iter_dir(root, iteration, dir));
    snprintf(path, sizeof path, "%s/hf/config.json", dir);
    return lj_vl_config_load(path, cfg);
}

/* The tower's initial weights: matrices and embeddings N(0, initializer_range), norms 1, biases 0
 * (HF Qwen3VLPreTrainedModel._init_weights for Linear, Embedding and LayerNorm). */
static void init_vision(lj_vl *vl, uint64_t seed) {
    const lj_vision_layout *lo = &vl->vis.layout;
    float *w = lj_malloc((size_t)lo->total * sizeof(float));
    lj_rng rng;
    lj_rng_seed(&rng, seed ^ 0x5649534f4eull);
    const double sd = vl->cfg.vision.initializer_range;
    for (int i = 0; i < lo->count; i++) {
        const lj_param_info *p = &lo->params[i];
        for (int64_t k = 0; k < p->numel; k++)
            w[p->offset + k] = p->kind == LJ_PARAM_NORM   ? 1.0f
                               : p->kind == LJ_PARAM_BIAS ? 0.0f
                                                          : (float)(sd * lj_rng_normal(&rng));
    }
    lj_vision_set_weights(&vl->vis, w);
    free(w);
}

static void make_range(vl_range *r, const lj_param_info *params, int count, int64_t begin, int64_t end,
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

static lj_status setup(vl_run *r, int resume, const char *root, int iteration) {
    const lj_vl_train_config *c = r->c;
    LJ_TRY(resolve_model(c, resume, root, iteration, &r->cfg));
    const lj_ops *ops = lj_ops_cpu();
    lj_model_options o;
    memset(&o, 0, sizeof o);
    o.micro_batch_size = c->micro_batch_size;
    o.seq_length = c->seq_length;
    o.training = 1;
    o.fused = 1;
    o.doc_mask.reset_attention_mask = 1; /* the decoder's doc_start buffer: packed samples stay apart */
    lj_model_init(&r->m, ops, &r->cfg.text, &o);
    r->have_model = 1;
    lj_parallelize(&r->m, NULL, NULL); /* replicated */
    lj_plan_build(&r->plan, &r->m);
    LJ_TRY(lj_plan_allocate(&r->plan, &r->m));
    lj_model_upload_rope(&r->m);
    const int N = c->micro_batch_size * c->seq_length;
    LJ_TRY(lj_vl_init(&r->vl, &r->m, &r->cfg, 4 * N, N / 3 + 1));
    r->have_vl = 1;
    const lj_vision_layout *lo = &r->vl.vis.layout;
    r->vis_m = lj_calloc((size_t)lo->total, sizeof(float));
    r->vis_v = lj_calloc((size_t)lo->total, sizeof(float));
    make_range(&r->ranges[0], r->m.layout.params, r->m.layout.count, 0, r->m.layout.total, &c->adamw);
    const int64_t m0 = lo->params[lo->merger0].offset;
    make_range(&r->ranges[1], lo->params, lo->count, 0, m0, &c->adamw);
    make_range(&r->ranges[2], lo->params, lo->count, m0, lo->total, &c->adamw);
    r->trainable[0] = !c->freeze_language_model;
    r->trainable[1] = !c->freeze_vision_model;
    r->trainable[2] = !c->freeze_vision_projection;
    if (!r->trainable[0] && !r->trainable[1] && !r->trainable[2])
        return lj_fail(LJ_ERR_ARG, "--freeze-language-model, --freeze-vision-model and --freeze-vision-projection "
                                   "together leave nothing to train");
    const int64_t most = r->m.layout.total > lo->total ? r->m.layout.total : lo->total;
    LJ_TRY(ops->alloc(&r->norm_ws, ops->global_norm_workspace_bytes(most) + 64));
    LJ_TRY(ops->alloc((void **)&r->norm_sq, 2 * sizeof(float)));
    r->doc_start = lj_malloc((size_t)N * sizeof(int32_t));
    return LJ_OK;
}

/* ---- checkpoints ------------------------------------------------------------------- */

static int ckpt_tensors(vl_run *r, lj_ckpt_tensor *t) {
    const int64_t nt = r->m.layout.total, nv = r->vl.vis.layout.total;
    t[0] = (lj_ckpt_tensor){"text.params", r->m.master, nt};
    t[1] = (lj_ckpt_tensor){"text.adam.m", r->m.adam_m, nt};
    t[2] = (lj_ckpt_tensor){"text.adam.v", r->m.adam_v, nt};
    t[3] = (lj_ckpt_tensor){"vision.params", (float *)r->vl.vis.params, nv};
    t[4] = (lj_ckpt_tensor){"vision.adam.m", r->vis_m, nv};
    t[5] = (lj_ckpt_tensor){"vision.adam.v", r->vis_v, nv};
    return 6;
}

static lj_status save_hf(const char *dir, void *ctx) {
    vl_run *r = ctx;
    char hf[LJ_PATH_MAX + 8];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    LJ_TRY(lj_mkdir_p(hf));
    return lj_hf_vl_export_into(hf, &r->cfg, r->m.master, (const float *)r->vl.vis.params,
                                r->c->hf_fp32 ? LJ_DTYPE_F32 : LJ_DTYPE_BF16, r->c->tokenizer_dir,
                                lj_mm_loader_dataset(r->loader)->meta.min_pixels,
                                lj_mm_loader_dataset(r->loader)->meta.max_pixels);
}

static lj_status save(vl_run *r) {
    const lj_vl_train_config *c = r->c;
    lj_ckpt_tensor t[6];
    const int n = ckpt_tensors(r, t);
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model\": \"%s\", \"model_type\": \"qwen3_vl\", \"iteration\": %d, \"loader_position\": %" PRId64
             ", \"seed\": %" PRIu64 ", \"seq_length\": %d, \"micro_batch_size\": %d}",
             c->model ? c->model : r->cfg.name, r->iteration, r->loader_position, c->seed, c->seq_length,
             c->micro_batch_size);
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
    lj_ckpt_tensor t[6];
    const int n = ckpt_tensors(r, t);
    char *text = NULL;
    LJ_TRY(lj_ckpt_load(root, iteration, t, n, &text));
    cJSON *j = cJSON_Parse(text);
    free(text);
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
    /* on the CPU backend the decoder's parameters are its master weights, and the tower's are
       its own buffer: both were loaded in place */
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

static lj_status step(vl_run *r, double *loss, double *grad_norm, float *lr_out, int *tokens) {
    const lj_vl_train_config *c = r->c;
    const lj_ops *ops = r->m.ops;
    const lj_mm_batch *b;
    LJ_TRY(lj_mm_loader_next(r->loader, &b));
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
    ops->upload(r->m.doc_start, r->doc_start, (size_t)b->B * b->T * sizeof(int32_t));
    r->loader_position = lj_mm_loader_position(r->loader);
    *tokens = r->m.num_targets;
    if (r->m.num_targets == 0) return lj_fail(LJ_ERR_ARG, "--data-path %s: a batch without trained tokens", c->data_path);
    lj_vl_zero_grads(&r->vl);
    lj_vl_forward_backward(&r->vl, 1, 1.0f / (float)r->m.num_targets);
    *loss = lj_model_mean_loss(&r->m);
    /* the global norm over the trained parts */
    void *grads[3] = {r->m.grads, r->vl.vis.grads, r->vl.vis.grads};
    double sq = 0.0;
    for (int k = 0; k < 3; k++) {
        if (!r->trainable[k]) continue;
        ops->global_norm_sq(r->norm_sq, (const float *)grads[k] + r->ranges[k].begin, r->ranges[k].count, r->norm_ws);
        ops->synchronize();
        sq += r->norm_sq[0];
    }
    r->norm_sq[0] = (float)sq;
    *grad_norm = sqrt(sq);
    const lj_adamw_hparams hp = {c->adamw.beta1, c->adamw.beta2, c->adamw.eps, c->adamw.max_grad_norm};
    const float lr = (float)lj_lr_at(&c->lr, r->iteration);
    *lr_out = lr;
    float sc[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(sc, &hp, lr, r->iteration + 1);
    ops->upload(r->m.adamw_scalars, sc, sizeof sc);
    float *p[3] = {r->m.master, (float *)r->vl.vis.params, (float *)r->vl.vis.params};
    float *mm[3] = {r->m.adam_m, r->vis_m, r->vis_m}, *vv[3] = {r->m.adam_v, r->vis_v, r->vis_v};
    for (int k = 0; k < 3; k++) {
        if (!r->trainable[k]) continue;
        const int64_t o = r->ranges[k].begin;
        ops->adamw_update(p[k] + o, p[k] + o, (const float *)grads[k] + o, mm[k] + o, vv[k] + o, r->ranges[k].seg,
                          r->ranges[k].num_seg, &hp, r->m.adamw_scalars, r->norm_sq);
    }
    ops->synchronize();
    if (!isfinite(*loss)) return lj_fail(LJ_ERR_ARG, "iteration %d: the loss is not finite", r->iteration + 1);
    return LJ_OK;
}

static void log_iteration(vl_run *r, double loss, double gn, float lr, int tokens, double sec) {
    if (!r->c->quiet)
        printf(" iteration %8d/%8d | lm loss: %.6E | grad norm: %.4f | learning rate: %.6E | tokens: %d | "
               "elapsed time per iteration (ms): %.1f\n",
               r->iteration, r->c->train_iters, loss, gn, lr, tokens, sec * 1e3);
    if (r->log_json) {
        fprintf(r->log_json,
                "{\"iteration\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens\": %d, "
                "\"iteration_ms\": %.3f}\n",
                r->iteration, loss, (double)lr, gn, tokens, sec * 1e3);
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
    if (c->load) {
        struct stat st;
        char latest[LJ_PATH_MAX + 64];
        snprintf(latest, sizeof latest, "%s/latest_checkpointed_iteration.txt", c->load);
        if (stat(latest, &st) == 0) {
            resume = 1;
            snprintf(root, sizeof root, "%s", c->load);
            LJ_TRY(lj_ckpt_latest(root, &iteration));
        }
    }
    LJ_TRY(setup(r, resume, root, iteration));
    lj_model_init_weights(&r->m, c->seed);
    init_vision(&r->vl, c->seed);
    if (resume) LJ_TRY(load_state(r, root, iteration));
    else if (c->load) LJ_TRY(load_hf(r, c->load));
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
    LJ_TRY(lj_mm_loader_open(&r->loader, &lc));
    LJ_TRY(check_dataset(r));
    if (c->log_json) {
        r->log_json = fopen(c->log_json, r->iteration > 0 ? "a" : "w");
        if (!r->log_json) return lj_fail(LJ_ERR_IO, "--log-json %s: cannot open for appending", c->log_json);
        char precision[16];
        const lj_train_start start = {
            .iteration = r->iteration,
            .model = r->cfg.name,
            .parameters = r->m.layout.total + r->vl.vis.layout.total,
            .precision = lj_train_precision(r->m.ops, 0, NULL, precision, sizeof precision),
            .ops = r->m.ops,
            .devices = 1,
            .micro_batch_size = c->micro_batch_size,
            .global_batch_size = c->micro_batch_size,
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
                    "model %s, vision projection %s",
                    r->cfg.name, r->m.layout.total, r->vl.vis.layout.total, r->trainable[0] ? "yes" : "frozen",
                    r->trainable[1] ? "yes" : "frozen", r->trainable[2] ? "yes" : "frozen");
    while (r->iteration < c->train_iters) {
        const double t0 = lj_time_sec();
        double loss = 0.0, gn = 0.0;
        float lr = 0.0f;
        int tokens = 0;
        LJ_TRY(step(r, &loss, &gn, &lr, &tokens));
        r->iteration++;
        if (r->iteration % c->log_interval == 0 || r->iteration == c->train_iters)
            log_iteration(r, loss, gn, lr, tokens, lj_time_sec() - t0);
        if (c->save && c->save_interval > 0 && r->iteration % c->save_interval == 0) LJ_TRY(save(r));
    }
    if (c->save && (c->save_interval <= 0 || r->iteration % c->save_interval != 0)) LJ_TRY(save(r));
    return LJ_OK;
}

lj_status lj_vl_train_run(const lj_vl_train_config *c) {
    if (c->seq_length <= 0 || c->micro_batch_size <= 0 || c->train_iters < 0 || c->log_interval <= 0)
        return lj_fail(LJ_ERR_ARG, "--seq-length, --micro-batch-size and --log-interval must be positive, "
                                   "--train-iters >= 0");
    vl_run r;
    memset(&r, 0, sizeof r);
    r.c = c;
    const lj_status s = run_loop(&r);
    if (r.log_json) fclose(r.log_json);
    if (r.loader) lj_mm_loader_close(r.loader);
    for (int k = 0; k < 3; k++) free(r.ranges[k].seg);
    free(r.vis_m);
    free(r.vis_v);
    free(r.doc_start);
    if (r.have_vl) lj_vl_free(&r.vl);
    if (r.norm_ws) lj_ops_cpu()->free(r.norm_ws);
    if (r.norm_sq) lj_ops_cpu()->free(r.norm_sq);
    if (r.have_model) {
        lj_plan_release(&r.plan, r.m.ops);
        lj_plan_free(&r.plan);
        lj_model_free(&r.m);
    }
    return s;
}

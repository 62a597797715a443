/* resolve.c: a DeepSpeed config applied to a training run's settings (train.h
 * lj_train_apply_deepspeed): every setting it shares with the command line is checked and
 * resolved here, once, before the run starts. */
#include "train/train.h"

#include <math.h>
#include <string.h>

/* A flag given on the command line and the same setting in the DeepSpeed config must agree:
 * the file does not silently win (nor the flag). `flag` and `key` name both; the values are
 * numbers, or with `names` the words for 0 and 1 (the flag's, then the file's). */
typedef struct {
    const char *flag;
    int flag_given;
    double flag_value;
    const char *key;
    int key_given; /* the file gives a value (not absent, not "auto") */
    double key_value;
    const char *names[4];
} ds_pair;

static lj_status check_pairs(const char *path, const ds_pair *pairs, int n) {
    for (int i = 0; i < n; i++) {
        const ds_pair *p = &pairs[i];
        if (!p->flag_given || !p->key_given || p->flag_value == p->key_value) continue;
        char fv[32], kv[32];
        if (p->names[0]) {
            snprintf(fv, sizeof fv, "%s", p->names[p->flag_value != 0]);
            snprintf(kv, sizeof kv, "%s", p->names[2 + (p->key_value != 0)]);
        } else {
            snprintf(fv, sizeof fv, "%.7g", p->flag_value);
            snprintf(kv, sizeof kv, "%.7g", p->key_value);
        }
        return lj_fail(LJ_ERR_ARG,
                       "%s%s%s disagrees with %s: %s %s: make them agree, leave one out, or write \"auto\" in the file",
                       p->flag, fv[0] ? " " : "", fv, path, p->key, kv);
    }
    return LJ_OK;
}

lj_status lj_train_apply_deepspeed(lj_train_config *c, const lj_train_given *g, const lj_deepspeed_config *file,
                                   int world_size, int *global_batch_size, int *micro_batch_size) {
    c->deepspeed = *file;
    lj_deepspeed_config *ds = &c->deepspeed;
    const char *path = ds->source;
    const int opt = ds->optimizer.type != LJ_DS_OPTIMIZER_NONE;
    const ds_pair pairs[] = {
        {"--lr", g->lr, c->lr.lr, "optimizer.params.lr", opt && !isnan(ds->optimizer.lr), ds->optimizer.lr, {NULL}},
        {"--clip-grad", g->clip_grad, c->adamw.max_grad_norm, "gradient_clipping", !isnan(ds->gradient_clipping),
         (float)ds->gradient_clipping, {NULL}},
        {"--weight-decay", g->weight_decay, c->adamw.weight_decay, "optimizer.params.weight_decay",
         opt && !isnan(ds->optimizer.weight_decay), (float)ds->optimizer.weight_decay, {NULL}},
        {"--adam-beta1", g->adam_beta1, c->adamw.beta1, "optimizer.params.betas[0]", opt && !isnan(ds->optimizer.beta1),
         (float)ds->optimizer.beta1, {NULL}},
        {"--adam-beta2", g->adam_beta2, c->adamw.beta2, "optimizer.params.betas[1]", opt && !isnan(ds->optimizer.beta2),
         (float)ds->optimizer.beta2, {NULL}},
        {"--adam-eps", g->adam_eps, c->adamw.eps, "optimizer.params.eps", opt && !isnan(ds->optimizer.eps),
         (float)ds->optimizer.eps, {NULL}},
        {"--zero-stage", g->zero_stage, c->zero.zero_stage, "zero_optimization.stage", ds->given.zero_stage,
         ds->zero.stage, {NULL}},
        {c->zero.overlap_comm ? "--overlap-comm" : "--no-overlap-comm", g->overlap_comm, c->zero.overlap_comm != 0,
         "zero_optimization.overlap_comm", ds->zero.overlap_comm >= 0, ds->zero.overlap_comm > 0,
         {"", "", "false", "true"}},
        {"--reduce-bucket-size", g->reduce_bucket_size, (double)c->zero.zero_reduce_bucket_numel,
         "zero_optimization.reduce_bucket_size", ds->given.reduce_bucket_size, (double)ds->zero.reduce_bucket_size,
         {NULL}},
        {"--offload-optimizer", g->offload_optimizer, c->offload_optimizer != 0,
         "zero_optimization.offload_optimizer.device", ds->given.offload_optimizer, ds->zero.offload_optimizer_cpu,
         {"none", "cpu", "\"none\"", "\"cpu\""}},
        {"--lr-warmup-iters", g->lr_warmup_iters >= 0, g->lr_warmup_iters, "scheduler.params.warmup_num_steps",
         ds->scheduler.type != LJ_DS_SCHEDULER_NONE && ds->given.warmup_num_steps,
         (double)ds->scheduler.warmup_num_steps, {NULL}},
    };
    LJ_TRY(check_pairs(path, pairs, (int)(sizeof pairs / sizeof pairs[0])));
    const lj_deepspeed_hints h = {world_size, c->model.hidden_size, *micro_batch_size, *global_batch_size,
                                  c->train_iters, g->lr_warmup_iters >= 0 ? g->lr_warmup_iters : 0};
    LJ_TRY(lj_deepspeed_resolve(ds, &h));
    *global_batch_size = (int)ds->train_batch_size; /* lj_deepspeed_resolve refuses values above INT_MAX */
    *micro_batch_size = (int)ds->train_micro_batch_size_per_gpu;
    if (!isnan(ds->gradient_clipping)) c->adamw.max_grad_norm = (float)ds->gradient_clipping;
    if (opt) {
        if (!isnan(ds->optimizer.lr)) c->lr.lr = ds->optimizer.lr;
        if (!isnan(ds->optimizer.beta1)) c->adamw.beta1 = (float)ds->optimizer.beta1;
        if (!isnan(ds->optimizer.beta2)) c->adamw.beta2 = (float)ds->optimizer.beta2;
        if (!isnan(ds->optimizer.eps)) c->adamw.eps = (float)ds->optimizer.eps;
        if (!isnan(ds->optimizer.weight_decay)) c->adamw.weight_decay = (float)ds->optimizer.weight_decay;
    }
    c->lr.deepspeed = ds->scheduler; /* the LR of each step (optim/optim.h lj_lr_at) */
    /* ZeRO (its "auto" sizes resolved above) and offload: the file's where no flag gave them */
    if (ds->given.zero_stage || !g->zero_stage) c->zero.zero_stage = ds->zero.stage;
    if (!g->overlap_comm) c->zero.overlap_comm = ds->zero.overlap_comm != 0;
    if (!g->reduce_bucket_size && ds->zero.reduce_bucket_size > 0)
        c->zero.zero_reduce_bucket_numel = ds->zero.reduce_bucket_size;
    c->zero.zero3_prefetch_numel = ds->zero.stage3_prefetch_bucket_size;
    c->zero.zero3_max_live_numel = ds->zero.stage3_max_live_parameters;
    /* 0 in the file: no persistent groups (-1 in lj_zero_options, where 0 is "auto") */
    c->zero.zero3_persistence_numel =
        ds->zero.stage3_param_persistence_threshold > 0 ? ds->zero.stage3_param_persistence_threshold : -1;
    if (!g->offload_optimizer && ds->zero.offload_optimizer_cpu) {
        c->offload_optimizer = 1;
        c->offload_source = "zero_optimization.offload_optimizer.device \"cpu\"";
    }
    c->has_deepspeed = 1;
    return LJ_OK;
}

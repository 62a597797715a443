/* deepspeed.c: parsing, defaults, resolution and the LR schedules of DeepSpeed's JSON
 * configuration (deepspeed.h). */
#include "parallel/deepspeed.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "parallel/zero.h"

/* Keys DeepSpeed knows that change nothing here (logging, profiling, or the numerically
 * equivalent choice of how a sum is split): accepted without a warning. */
static const char *const QUIET_TOP[] = {
    "steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
    "memory_breakdown", "dump_state", "prescale_gradients", "gradient_predivide_factor", "flops_profiler",
    "tensorboard", "wandb", "csv_monitor", "comms_logger", NULL};
static const char *const QUIET_ZERO[] = {
    "allgather_partitions", "reduce_scatter", "stage3_max_reuse_distance", "max_reuse_distance",
    "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save", "sub_group_size", "round_robin_gradients", "load_from_fp32_weights",
    "ignore_unused_parameters", "elastic_checkpoint", "memory_efficient_linear", "use_multi_rank_bucket_allreduce",
    NULL};

typedef struct {
    lj_deepspeed_config *cfg;
    const char *src;
} ctx;

static int in_list(const char *key, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (strcmp(key, list[i]) == 0) return 1;
    return 0;
}

/* out[n] = "prefix.key", a JSON key path for messages (cut to fit: config keys are short). */
static void join_path(char *out, size_t n, const char *prefix, const char *key) {
    const int half = (int)(n / 2) - 1;
    if (prefix && *prefix) snprintf(out, n, "%.*s.%.*s", half, prefix, half - 1, key);
    else snprintf(out, n, "%.*s", (int)n - 1, key);
}

static void unknown_key(ctx *c, const char *path) {
    lj_deepspeed_config *cfg = c->cfg;
    lj_log_warn("%s: ignoring key '%s' (not a DeepSpeed setting ljperf knows)", c->src, path);
    size_t len = strlen(cfg->unknown);
    if (len + strlen(path) + 3 < sizeof cfg->unknown)
        snprintf(cfg->unknown + len, sizeof cfg->unknown - len, "%s%s", len ? ", " : "", path);
    cfg->num_unknown++;
}

/* A short description of a JSON value for messages. */
static const char *describe(const cJSON *v, char *buf, size_t n) {
    if (cJSON_IsString(v)) snprintf(buf, n, "\"%.60s\"", v->valuestring);
    else if (cJSON_IsNumber(v)) snprintf(buf, n, "%.17g", v->valuedouble);
    else if (cJSON_IsBool(v)) snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNull(v)) snprintf(buf, n, "null");
    else if (cJSON_IsArray(v)) snprintf(buf, n, "an array");
    else snprintf(buf, n, "an object");
    return buf;
}

static int is_auto(const cJSON *v) { return cJSON_IsString(v) && strcmp(v->valuestring, "auto") == 0; }

static lj_status bad_value(ctx *c, const char *path, const char *expected, const cJSON *v) {
    char buf[96];
    return lj_fail(LJ_ERR_FORMAT, "%s: %s: expected %s, got %s", c->src, path, expected, describe(v, buf, sizeof buf));
}

/* An integer >= min (JSON numbers such as 5e8 count when integral), or "auto" if allowed. */
static lj_status get_int(ctx *c, const cJSON *v, const char *path, int64_t min, int allow_auto, int64_t *out) {
    if (allow_auto && is_auto(v)) {
        *out = LJ_DS_AUTO;
        return LJ_OK;
    }
    const double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(x >= (double)min && x <= 9007199254740992.0 && x == floor(x))) {
        char expected[64];
        snprintf(expected, sizeof expected, "an integer >= %lld%s", (long long)min, allow_auto ? " or \"auto\"" : "");
        return bad_value(c, path, expected, v);
    }
    *out = (int64_t)x;
    return LJ_OK;
}

/* A number >= 0, or "auto" (NAN). */
static lj_status get_double(ctx *c, const cJSON *v, const char *path, double *out) {
    if (is_auto(v)) {
        *out = NAN;
        return LJ_OK;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || !isfinite(v->valuedouble))
        return bad_value(c, path, "a number >= 0 or \"auto\"", v);
    *out = v->valuedouble;
    return LJ_OK;
}

static lj_status get_bool(ctx *c, const cJSON *v, const char *path, int allow_auto, int *out) {
    if (allow_auto && is_auto(v)) {
        *out = LJ_DS_AUTO;
        return LJ_OK;
    }
    if (!cJSON_IsBool(v)) return bad_value(c, path, allow_auto ? "true, false or \"auto\"" : "true or false", v);
    *out = cJSON_IsTrue(v);
    return LJ_OK;
}

static lj_status need_object(ctx *c, const cJSON *v, const char *path) {
    return cJSON_IsObject(v) ? LJ_OK : bad_value(c, path, "an object", v);
}

/* ---- sections ------------------------------------------------------------------------- */

static lj_status parse_precision(ctx *c, const cJSON *obj, const char *name) {
    LJ_TRY(need_object(c, obj, name));
    const int fp16 = strcmp(name, "fp16") == 0;
    for (const cJSON *it = obj->child; it; it = it->next) {
        char path[160];
        join_path(path, sizeof path, name, it->string);
        if (strcmp(it->string, "enabled") == 0) {
            int on = 0;
            LJ_TRY(get_bool(c, it, path, 1, &on));
            if (!fp16) c->cfg->bf16_enabled = on;
            else if (on == 1)
                return lj_fail(LJ_ERR_UNSUPPORTED,
                               "%s: fp16.enabled: fp16 training with loss scaling is not supported; use "
                               "\"bf16\": {\"enabled\": true}",
                               c->src);
        } else if (!fp16) {
            unknown_key(c, path);
        } /* the other fp16 keys (loss_scale, ...) mean nothing while fp16 is off */
    }
    return LJ_OK;
}

/* The {"type": ..., "params": {...}} sections (optimizer, scheduler): every key of params
 * goes to `param` with its dotted path; other keys besides type are reported as unknown. */
static lj_status section_params(ctx *c, const cJSON *obj, const char *section,
                                lj_status (*param)(ctx *c, const cJSON *p, const char *path)) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        char path[160];
        join_path(path, sizeof path, section, it->string);
        if (strcmp(it->string, "type") == 0) continue;
        if (strcmp(it->string, "params") != 0) {
            unknown_key(c, path);
            continue;
        }
        LJ_TRY(need_object(c, it, path));
        for (const cJSON *p = it->child; p; p = p->next) {
            char pp[160];
            join_path(pp, sizeof pp, path, p->string);
            LJ_TRY(param(c, p, pp));
        }
    }
    return LJ_OK;
}

/* One key of optimizer.params. */
static lj_status optimizer_param(ctx *c, const cJSON *p, const char *pp) {
    lj_deepspeed_config *cfg = c->cfg;
    const char *k = p->string;
    int flag = 0;
    if (strcmp(k, "lr") == 0) LJ_TRY(get_double(c, p, pp, &cfg->optimizer.lr));
    else if (strcmp(k, "eps") == 0) LJ_TRY(get_double(c, p, pp, &cfg->optimizer.eps));
    else if (strcmp(k, "weight_decay") == 0) LJ_TRY(get_double(c, p, pp, &cfg->optimizer.weight_decay));
    else if (strcmp(k, "betas") == 0) {
        if (is_auto(p)) return LJ_OK;
        if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 2)
            return bad_value(c, pp, "[beta1, beta2] or \"auto\"", p);
        LJ_TRY(get_double(c, cJSON_GetArrayItem(p, 0), pp, &cfg->optimizer.beta1));
        LJ_TRY(get_double(c, cJSON_GetArrayItem(p, 1), pp, &cfg->optimizer.beta2));
        if (cfg->optimizer.beta1 >= 1 || cfg->optimizer.beta2 >= 1)
            return bad_value(c, pp, "betas below 1", p);
    } else if (strcmp(k, "adam_w_mode") == 0) {
        LJ_TRY(get_bool(c, p, pp, 0, &flag));
        if (!flag)
            return lj_fail(LJ_ERR_UNSUPPORTED,
                           "%s: %s: Adam with L2 regularization (adam_w_mode false) is not supported; ljperf "
                           "runs AdamW (decoupled weight decay)",
                           c->src, pp);
    } else if (strcmp(k, "bias_correction") == 0 || strcmp(k, "amsgrad") == 0) {
        LJ_TRY(get_bool(c, p, pp, 0, &flag));
        if (flag != (strcmp(k, "bias_correction") == 0))
            return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %s: only %s is supported", c->src, pp,
                           strcmp(k, "amsgrad") == 0 ? "false" : "true");
    } else if (strcmp(k, "torch_adam") != 0 && strcmp(k, "fused") != 0 && strcmp(k, "foreach") != 0) {
        unknown_key(c, pp);
    }
    return LJ_OK;
}

/* One key of scheduler.params (which keys exist depends on scheduler.type). */
static lj_status scheduler_param(ctx *c, const cJSON *p, const char *pp) {
    lj_deepspeed_config *cfg = c->cfg;
    const int cosine = cfg->scheduler.type == LJ_DS_SCHEDULER_WARMUP_COSINE_LR;
    const int decays = cfg->scheduler.type != LJ_DS_SCHEDULER_WARMUP_LR;
    const char *k = p->string;
    double v = 0;
    if (strcmp(k, "warmup_num_steps") == 0) {
        LJ_TRY(get_int(c, p, pp, 0, 1, &cfg->scheduler.warmup_num_steps));
        cfg->given.warmup_num_steps = cfg->scheduler.warmup_num_steps != LJ_DS_AUTO;
    } else if (strcmp(k, "warmup_type") == 0) {
        if (!cJSON_IsString(p) || (strcmp(p->valuestring, "log") && strcmp(p->valuestring, "linear")))
            return bad_value(c, pp, "\"log\" or \"linear\"", p);
        cfg->scheduler.warmup_type = strcmp(p->valuestring, "linear") == 0 ? LJ_DS_WARMUP_LINEAR : LJ_DS_WARMUP_LOG;
    } else if (strcmp(k, "last_batch_iteration") == 0) {
        int64_t it0;
        LJ_TRY(get_int(c, p, pp, -1, 0, &it0));
    } else if (decays && strcmp(k, "total_num_steps") == 0) {
        LJ_TRY(get_int(c, p, pp, 1, 1, &cfg->scheduler.total_num_steps));
    } else if (!cosine && strcmp(k, "warmup_min_lr") == 0) {
        LJ_TRY(get_double(c, p, pp, &v));
        cfg->scheduler.warmup_min_lr = isnan(v) ? 0.0 : v; /* the HF integration's auto: 0 */
    } else if (!cosine && strcmp(k, "warmup_max_lr") == 0) {
        LJ_TRY(get_double(c, p, pp, &cfg->scheduler.warmup_max_lr));
    } else if (cosine && strcmp(k, "warmup_min_ratio") == 0) {
        LJ_TRY(get_double(c, p, pp, &cfg->scheduler.warmup_min_ratio));
        if (isnan(cfg->scheduler.warmup_min_ratio)) cfg->scheduler.warmup_min_ratio = 0.0;
    } else if (cosine && strcmp(k, "cos_min_ratio") == 0) {
        LJ_TRY(get_double(c, p, pp, &cfg->scheduler.cos_min_ratio));
        if (isnan(cfg->scheduler.cos_min_ratio)) cfg->scheduler.cos_min_ratio = 0.0001;
    } else {
        unknown_key(c, pp);
    }
    return LJ_OK;
}

static lj_status parse_optimizer(ctx *c, const cJSON *obj) {
    lj_deepspeed_config *cfg = c->cfg;
    LJ_TRY(need_object(c, obj, "optimizer"));
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!cJSON_IsString(type)) return bad_value(c, "optimizer.type", "\"AdamW\" or \"Adam\"", type ? type : obj);
    if (strcasecmp(type->valuestring, "AdamW") == 0) cfg->optimizer.type = LJ_DS_OPTIMIZER_ADAMW;
    else if (strcasecmp(type->valuestring, "Adam") == 0) cfg->optimizer.type = LJ_DS_OPTIMIZER_ADAM;
    else
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: optimizer.type: '%s' is not supported (AdamW or Adam)", c->src,
                       type->valuestring);
    LJ_TRY(section_params(c, obj, "optimizer", optimizer_param));
    return LJ_OK;
}

static lj_status parse_scheduler(ctx *c, const cJSON *obj) {
    lj_deepspeed_config *cfg = c->cfg;
    LJ_TRY(need_object(c, obj, "scheduler"));
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!cJSON_IsString(type))
        return bad_value(c, "scheduler.type", "\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"", type ? type : obj);
    const char *t = type->valuestring;
    if (strcmp(t, "WarmupLR") == 0) cfg->scheduler.type = LJ_DS_SCHEDULER_WARMUP_LR;
    else if (strcmp(t, "WarmupDecayLR") == 0) cfg->scheduler.type = LJ_DS_SCHEDULER_WARMUP_DECAY_LR;
    else if (strcmp(t, "WarmupCosineLR") == 0) cfg->scheduler.type = LJ_DS_SCHEDULER_WARMUP_COSINE_LR;
    else
        return lj_fail(LJ_ERR_UNSUPPORTED,
                       "%s: scheduler.type: '%s' is not supported (WarmupLR, WarmupDecayLR or WarmupCosineLR)", c->src, t);
    if (cfg->scheduler.type != LJ_DS_SCHEDULER_WARMUP_LR) cfg->scheduler.total_num_steps = LJ_DS_UNSET;
    return section_params(c, obj, "scheduler", scheduler_param);
}

static lj_status parse_offload(ctx *c, const cJSON *obj, const char *path, int param) {
    LJ_TRY(need_object(c, obj, path));
    for (const cJSON *it = obj->child; it; it = it->next) {
        char pp[160];
        join_path(pp, sizeof pp, path, it->string);
        if (strcmp(it->string, "device") == 0) {
            if (!cJSON_IsString(it)) return bad_value(c, pp, "\"none\" or \"cpu\"", it);
            const char *dev = it->valuestring;
            if (!param) c->cfg->given.offload_optimizer = 1;
            if (strcmp(dev, "none") == 0) continue;
            if (!param && strcmp(dev, "cpu") == 0) {
                c->cfg->zero.offload_optimizer_cpu = 1;
                continue;
            }
            if (param || strcmp(dev, "nvme") == 0)
                return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %s: offload to '%s' is not supported (%s)", c->src, pp, dev,
                               param ? "parameters stay on the GPU: use \"none\"" : "use \"none\" or \"cpu\"");
            return bad_value(c, pp, "\"none\" or \"cpu\"", it);
        } else if (strcmp(it->string, "pin_memory") && strcmp(it->string, "buffer_count") &&
                   strcmp(it->string, "fast_init") && strcmp(it->string, "buffer_size") &&
                   strcmp(it->string, "max_in_cpu") && strcmp(it->string, "nvme_path")) {
            unknown_key(c, pp);
        }
    }
    return LJ_OK;
}

static lj_status parse_zero(ctx *c, const cJSON *obj) {
    lj_deepspeed_config *cfg = c->cfg;
    if (cJSON_IsBool(obj)) { /* DeepSpeed's deprecated form */
        cfg->zero.stage = cJSON_IsTrue(obj) ? 1 : 0;
        cfg->given.zero_stage = 1;
        lj_log_warn("%s: \"zero_optimization\": %s is deprecated in DeepSpeed; read as stage %d", c->src,
                    cJSON_IsTrue(obj) ? "true" : "false", cfg->zero.stage);
        return LJ_OK;
    }
    LJ_TRY(need_object(c, obj, "zero_optimization"));
    for (const cJSON *it = obj->child; it; it = it->next) {
        char path[160];
        join_path(path, sizeof path, "zero_optimization", it->string);
        const char *k = it->string;
        int64_t v = 0;
        if (strcmp(k, "stage") == 0) {
            if (!cJSON_IsNumber(it) || !(it->valuedouble == 0 || it->valuedouble == 1 || it->valuedouble == 2 ||
                                         it->valuedouble == 3))
                return bad_value(c, path, "0, 1, 2 or 3", it);
            cfg->zero.stage = (int)it->valuedouble;
            cfg->given.zero_stage = 1;
        } else if (strcmp(k, "overlap_comm") == 0) {
            LJ_TRY(get_bool(c, it, path, 0, &cfg->zero.overlap_comm));
        } else if (strcmp(k, "contiguous_gradients") == 0) {
            LJ_TRY(get_bool(c, it, path, 0, &cfg->zero.contiguous_gradients));
        } else if (strcmp(k, "reduce_bucket_size") == 0) {
            LJ_TRY(get_int(c, it, path, 1, 1, &cfg->zero.reduce_bucket_size));
            cfg->given.reduce_bucket_size = cfg->zero.reduce_bucket_size != LJ_DS_AUTO;
        } else if (strcmp(k, "allgather_bucket_size") == 0) {
            LJ_TRY(get_int(c, it, path, 1, 0, &cfg->zero.allgather_bucket_size));
        } else if (strcmp(k, "stage3_prefetch_bucket_size") == 0 || strcmp(k, "prefetch_bucket_size") == 0) {
            LJ_TRY(get_int(c, it, path, 0, 1, &cfg->zero.stage3_prefetch_bucket_size));
        } else if (strcmp(k, "stage3_param_persistence_threshold") == 0 || strcmp(k, "param_persistence_threshold") == 0) {
            LJ_TRY(get_int(c, it, path, 0, 1, &cfg->zero.stage3_param_persistence_threshold));
        } else if (strcmp(k, "stage3_max_live_parameters") == 0 || strcmp(k, "max_live_parameters") == 0) {
            LJ_TRY(get_int(c, it, path, 0, 0, &v));
            cfg->zero.stage3_max_live_parameters = v;
        } else if (strcmp(k, "offload_optimizer") == 0) {
            LJ_TRY(parse_offload(c, it, path, 0));
        } else if (strcmp(k, "offload_param") == 0) {
            LJ_TRY(parse_offload(c, it, path, 1));
        } else if (!in_list(k, QUIET_ZERO)) {
            unknown_key(c, path);
        }
    }
    if (cfg->zero.offload_optimizer_cpu && cfg->zero.stage == 0)
        return lj_fail(LJ_ERR_ARG,
                       "%s: zero_optimization.offload_optimizer.device: optimizer offload needs ZeRO stage 1, 2 or 3 "
                       "(stage is 0)",
                       c->src);
    return LJ_OK;
}

/* "data_types": {"grad_accum_dtype": "fp32" | "bf16"} (DeepSpeed's gradient accumulation
 * dtype; "fp16" is refused, as the recipe is bf16). */
static lj_status parse_data_types(ctx *c, const cJSON *obj) {
    LJ_TRY(need_object(c, obj, "data_types"));
    for (const cJSON *it = obj->child; it; it = it->next) {
        char path[160];
        join_path(path, sizeof path, "data_types", it->string);
        if (strcmp(it->string, "grad_accum_dtype") == 0) {
            if (cJSON_IsNull(it)) continue;
            if (!cJSON_IsString(it) || (strcmp(it->valuestring, "fp32") && strcmp(it->valuestring, "bf16")))
                return bad_value(c, path, "\"fp32\" or \"bf16\"", it);
            snprintf(c->cfg->grad_accum_dtype, sizeof c->cfg->grad_accum_dtype, "%s", it->valuestring);
        } else {
            unknown_key(c, path);
        }
    }
    return LJ_OK;
}

/* ---- entry points ------------------------------------------------------------------- */

void lj_deepspeed_init(lj_deepspeed_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->source, sizeof cfg->source, "<defaults>");
    cfg->train_batch_size = cfg->train_micro_batch_size_per_gpu = cfg->gradient_accumulation_steps = LJ_DS_UNSET;
    cfg->gradient_clipping = NAN;
    cfg->bf16_enabled = LJ_DS_UNSET;
    cfg->optimizer.lr = cfg->optimizer.beta1 = cfg->optimizer.beta2 = NAN;
    cfg->optimizer.eps = cfg->optimizer.weight_decay = NAN;
    cfg->scheduler.warmup_min_lr = 0.0;
    cfg->scheduler.warmup_max_lr = NAN;
    cfg->scheduler.warmup_num_steps = 1000;
    cfg->scheduler.warmup_type = LJ_DS_WARMUP_LOG;
    cfg->scheduler.total_num_steps = LJ_DS_UNSET;
    cfg->scheduler.warmup_min_ratio = 0.0;
    cfg->scheduler.cos_min_ratio = 0.0001;
    cfg->zero.overlap_comm = LJ_DS_UNSET;
    cfg->zero.contiguous_gradients = 1;
    cfg->zero.reduce_bucket_size = 500000000;
    cfg->zero.allgather_bucket_size = 500000000;
    cfg->zero.stage3_prefetch_bucket_size = 50000000;
    cfg->zero.stage3_param_persistence_threshold = 100000;
    cfg->zero.stage3_max_live_parameters = 1000000000;
}

lj_status lj_deepspeed_parse(lj_deepspeed_config *cfg, const char *text, const char *source) {
    lj_deepspeed_init(cfg);
    snprintf(cfg->source, sizeof cfg->source, "%s", source);
    ctx c = {cfg, cfg->source};
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        int line = 1;
        const char *at = end ? end : text;
        for (const char *p = text; p < at && *p; p++) line += *p == '\n';
        return lj_fail(LJ_ERR_FORMAT, "%s: not valid JSON (error at line %d near '%.20s')", c.src, line, at);
    }
    lj_status s = cJSON_IsObject(root) ? LJ_OK : bad_value(&c, "the top level", "an object", root);
    for (const cJSON *it = root->child; it && s == LJ_OK; it = it->next) {
        const char *k = it->string;
        if (strcmp(k, "train_batch_size") == 0) s = get_int(&c, it, k, 1, 1, &cfg->train_batch_size);
        else if (strcmp(k, "train_micro_batch_size_per_gpu") == 0)
            s = get_int(&c, it, k, 1, 1, &cfg->train_micro_batch_size_per_gpu);
        else if (strcmp(k, "gradient_accumulation_steps") == 0)
            s = get_int(&c, it, k, 1, 1, &cfg->gradient_accumulation_steps);
        else if (strcmp(k, "gradient_clipping") == 0) s = get_double(&c, it, k, &cfg->gradient_clipping);
        else if (strcmp(k, "bf16") == 0 || strcmp(k, "bfloat16") == 0 || strcmp(k, "fp16") == 0)
            s = parse_precision(&c, it, k);
        else if (strcmp(k, "optimizer") == 0) s = parse_optimizer(&c, it);
        else if (strcmp(k, "scheduler") == 0) s = parse_scheduler(&c, it);
        else if (strcmp(k, "zero_optimization") == 0) s = parse_zero(&c, it);
        else if (strcmp(k, "data_types") == 0) s = parse_data_types(&c, it);
        else if (!in_list(k, QUIET_TOP)) unknown_key(&c, k);
    }
    cJSON_Delete(root);
    return s;
}

lj_status lj_deepspeed_load(lj_deepspeed_config *cfg, const char *path) {
    char *text = NULL;
    size_t size = 0;
    lj_deepspeed_init(cfg);
    lj_status s = lj_file_read_all(path, &text, &size);
    if (s != LJ_OK) return s;
    s = lj_deepspeed_parse(cfg, text, path);
    free(text);
    return s;
}

void lj_deepspeed_default(lj_deepspeed_config *cfg, int hidden_size) {
    lj_deepspeed_init(cfg);
    snprintf(cfg->source, sizeof cfg->source, "<deepspeed default>");
    cfg->bf16_enabled = 1;
    cfg->optimizer.type = LJ_DS_OPTIMIZER_ADAMW;
    cfg->zero.stage = 3;
    cfg->zero.overlap_comm = 1;
    cfg->zero.contiguous_gradients = 1;
    cfg->zero.reduce_bucket_size = lj_zero_reduce_bucket_auto(hidden_size);
    cfg->zero.stage3_prefetch_bucket_size = lj_zero_prefetch_bucket_auto(hidden_size);
    cfg->zero.stage3_param_persistence_threshold = lj_zero_persistence_threshold_auto(hidden_size);
}

/* A file value and a command-line value for the same thing must agree. */
static lj_status take_hint(const lj_deepspeed_config *cfg, int64_t *field, const char *key, int64_t hint,
                           const char *flag) {
    if (hint <= 0) {
        if (*field == LJ_DS_AUTO) *field = LJ_DS_UNSET;
        return LJ_OK;
    }
    if (*field > 0 && *field != hint)
        return lj_fail(LJ_ERR_ARG, "%s: %s is %lld but %s is %lld: make them agree, or write \"auto\" in the file",
                       cfg->source, key, (long long)*field, flag, (long long)hint);
    *field = hint;
    return LJ_OK;
}

lj_status lj_deepspeed_resolve(lj_deepspeed_config *cfg, const lj_deepspeed_hints *h) {
    LJ_ASSERT(h->world_size >= 1);
    LJ_TRY(take_hint(cfg, &cfg->train_micro_batch_size_per_gpu, "train_micro_batch_size_per_gpu", h->micro_batch_size,
                     "--micro-batch-size"));
    LJ_TRY(take_hint(cfg, &cfg->train_batch_size, "train_batch_size", h->global_batch_size, "--global-batch-size"));
    if (cfg->gradient_accumulation_steps == LJ_DS_AUTO) cfg->gradient_accumulation_steps = LJ_DS_UNSET;
    /* DeepSpeed's _set_batch_related_parameters, then _batch_assertion */
    int64_t tb = cfg->train_batch_size, mb = cfg->train_micro_batch_size_per_gpu, ga = cfg->gradient_accumulation_steps;
    const int64_t w = h->world_size;
    const int T = tb > 0, M = mb > 0, G = ga > 0;
    if (T && M && !G) ga = tb / mb / w;
    else if (T && G && !M) mb = tb / w / ga;
    else if (M && G && !T) tb = mb * ga * w;
    else if (T && !M && !G) {
        ga = 1;
        mb = tb / w;
    } else if (M && !T && !G) {
        tb = mb * w;
        ga = 1;
    } else if (!T && !M)
        return lj_fail(LJ_ERR_ARG,
                       "%s: either train_batch_size or train_micro_batch_size_per_gpu needs to be provided (in the "
                       "file, or as --global-batch-size / --micro-batch-size)",
                       cfg->source);
    if (tb <= 0 || mb <= 0 || ga <= 0 || tb != mb * ga * w)
        return lj_fail(LJ_ERR_ARG,
                       "%s: train_batch_size is not equal to train_micro_batch_size_per_gpu * "
                       "gradient_accumulation_steps * world_size (DeepSpeed's rule): %lld != %lld * %lld * %lld",
                       cfg->source, (long long)tb, (long long)mb, (long long)ga, (long long)w);
    /* the run counts samples in int: a value past it must not wrap (2^40 would read as 0, "not given") */
    const struct { const char *key; int64_t v; } batch[3] = {
        {"train_batch_size", tb}, {"train_micro_batch_size_per_gpu", mb}, {"gradient_accumulation_steps", ga}};
    for (int i = 0; i < 3; i++)
        if (batch[i].v > INT_MAX)
            return lj_fail(LJ_ERR_ARG, "%s: %s is %lld (%s): at most %d", cfg->source, batch[i].key,
                           (long long)batch[i].v,
                           (i == 0 ? cfg->train_batch_size : i == 1 ? cfg->train_micro_batch_size_per_gpu
                                                                    : cfg->gradient_accumulation_steps) == batch[i].v
                               ? "as given"
                               : "derived by DeepSpeed's rule",
                           INT_MAX);
    cfg->train_batch_size = tb;
    cfg->train_micro_batch_size_per_gpu = mb;
    cfg->gradient_accumulation_steps = ga;

    if (cfg->zero.overlap_comm == LJ_DS_UNSET) cfg->zero.overlap_comm = cfg->zero.stage == 3;
    const int64_t auto_sizes[3] = {lj_zero_reduce_bucket_auto(h->hidden_size),
                                   lj_zero_prefetch_bucket_auto(h->hidden_size),
                                   lj_zero_persistence_threshold_auto(h->hidden_size)};
    int64_t *fields[3] = {&cfg->zero.reduce_bucket_size, &cfg->zero.stage3_prefetch_bucket_size,
                          &cfg->zero.stage3_param_persistence_threshold};
    for (int i = 0; i < 3; i++)
        if (*fields[i] == LJ_DS_AUTO) {
            if (h->hidden_size <= 0)
                return lj_fail(LJ_ERR_ARG, "%s: an \"auto\" bucket size needs the model's hidden size", cfg->source);
            *fields[i] = auto_sizes[i];
        }

    if (cfg->scheduler.warmup_num_steps == LJ_DS_AUTO)
        cfg->scheduler.warmup_num_steps = h->warmup_iters >= 0 ? h->warmup_iters : 1000;
    if (cfg->scheduler.type == LJ_DS_SCHEDULER_WARMUP_DECAY_LR || cfg->scheduler.type == LJ_DS_SCHEDULER_WARMUP_COSINE_LR) {
        if (cfg->scheduler.total_num_steps < 0 && h->train_iters > 0) cfg->scheduler.total_num_steps = h->train_iters;
        if (cfg->scheduler.total_num_steps < 0)
            return lj_fail(LJ_ERR_ARG,
                           "%s: scheduler.params.total_num_steps is required for %s (or give --train-iters with "
                           "\"auto\")",
                           cfg->source,
                           cfg->scheduler.type == LJ_DS_SCHEDULER_WARMUP_DECAY_LR ? "WarmupDecayLR" : "WarmupCosineLR");
    }
    return LJ_OK;
}

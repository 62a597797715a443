/* planner.c: the breakdown of a memory plan by category, the device target, the search over
 * per-layer recompute policies and micro-batch sizes, its explanation (or the refusal when
 * nothing fits), CHECKPOINT_OPTIMIZATION and Megatron-LM's recompute flags. */
#include "plan/planner.h"

#include "model/vl.h"

#include "optim/offload.h"
#include "plan/build.h"

#include <ctype.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

#ifdef LJ_HAVE_CUDA
#include "ops/cuda/cuda_common.h"
#endif

/* ---- breakdown ---------------------------------------------------------------------- */

const char *lj_mem_category_name(lj_mem_category c) {
    static const char *names[LJ_MEM_COUNT] = {
        "parameters",        "master weights",   "gradients",        "optimizer moments",
        "saved activations", "recompute buffers", "backward scratch", "logits/loss",
        "FP8 casts and scales", "op workspaces",     "library workspaces", "CUDA context",    "NCCL buffers",
        "other"};
    return (unsigned)c < LJ_MEM_COUNT ? names[c] : "?";
}

static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

lj_mem_category lj_mem_category_of(const lj_plan_buffer *b) {
    if (starts(b->name, "fp8.") || starts(b->name, "vision.fp8.")) return LJ_MEM_FP8; /* the decoder's, the tower's */
    if (starts(b->name, "vision.recompute.")) return LJ_MEM_RECOMPUTE; /* the tower's shared block tensors */
    if (lj_vl_buffer_is_vision(b->name) && (b->arena == LJ_ARENA_ACTIVATIONS || b->arena == LJ_ARENA_SCRATCH))
        return b->arena == LJ_ARENA_ACTIVATIONS ? LJ_MEM_ACTIVATIONS : LJ_MEM_SCRATCH; /* the vision tower's (model/vl.h) */
    switch (b->arena) {
    case LJ_ARENA_PARAMS: return LJ_MEM_PARAMETERS;
    case LJ_ARENA_MASTER: return LJ_MEM_MASTER;
    case LJ_ARENA_GRADS: return LJ_MEM_GRADIENTS;
    case LJ_ARENA_OPTIMIZER: return LJ_MEM_OPTIMIZER;
    case LJ_ARENA_WORKSPACE: return LJ_MEM_OP_WORKSPACE;
    case LJ_ARENA_ACTIVATIONS:
        if (!strcmp(b->name, "losses")) return LJ_MEM_LOGITS_LOSS;
        if (starts(b->name, "residual.") || starts(b->name, "layers.") || !strcmp(b->name, "inputs") ||
            !strcmp(b->name, "targets") || starts(b->name, "rope_") || starts(b->name, "final_"))
            return LJ_MEM_ACTIVATIONS;
        return LJ_MEM_OTHER;
    case LJ_ARENA_SCRATCH:
        if (starts(b->name, "recompute.")) return LJ_MEM_RECOMPUTE;
        if (!strcmp(b->name, "logits")) return LJ_MEM_LOGITS_LOSS;
        if (starts(b->name, "d_") || !strcmp(b->name, "proj") || !strcmp(b->name, "swiglu_tmp"))
            return LJ_MEM_SCRATCH;
        return LJ_MEM_OTHER;
    default: return LJ_MEM_OTHER;
    }
}

static size_t padded(size_t bytes) { return (bytes + LJ_PLAN_ALIGN - 1) / LJ_PLAN_ALIGN * LJ_PLAN_ALIGN; }

void lj_mem_breakdown_of(const lj_plan *plan, const uint8_t *recompute, int num_layers, size_t library_workspace_bytes,
                         size_t context_bytes, size_t comm_bytes, lj_mem_breakdown *out) {
    memset(out, 0, sizeof *out);
    for (int l = 0; l < num_layers; l++) out->layers[recompute[l] <= LJ_RECOMPUTE_FULL ? recompute[l] : 0]++;
    for (int i = 0; i < plan->count; i++) {
        const lj_plan_buffer *b = &plan->buffers[i];
        const size_t bytes = padded(b->bytes);
        const lj_mem_category c = lj_mem_category_of(b);
        out->bytes[c] += bytes;
        if (lj_vl_buffer_is_vision(b->name)) {
            out->vision_bytes[c] += bytes;
            if (c == LJ_MEM_ACTIVATIONS) out->other_activation_bytes += bytes;
            continue;
        }
        if (c != LJ_MEM_ACTIVATIONS) continue;
        int layer = -1;
        if (starts(b->name, "residual.")) out->residual_bytes += bytes;
        else if (sscanf(b->name, "layers.%d.", &layer) == 1 && layer >= 0 && layer < num_layers)
            out->layer_bytes[recompute[layer] <= LJ_RECOMPUTE_FULL ? recompute[layer] : 0] += bytes;
        else out->other_activation_bytes += bytes;
    }
    out->bytes[LJ_MEM_LIB_WORKSPACE] = library_workspace_bytes;
    out->bytes[LJ_MEM_CONTEXT] = context_bytes;
    out->bytes[LJ_MEM_COMM] = comm_bytes;
    out->plan_bytes = plan->total_bytes;
    out->peak_bytes = plan->total_bytes + library_workspace_bytes + context_bytes + comm_bytes;
}

/* ---- target ------------------------------------------------------------------------ */

lj_status lj_planner_target_init(lj_planner_target *t, const lj_ops *ops, const char *cache_dir,
                                 const char *device_name) {
    memset(t, 0, sizeof *t);
    t->ops = ops;
    t->fused = 1;
    t->grad_accum_steps = 1;
    t->zero_stage = 0;
    t->dp_world_size = 1;
    t->margin_bytes = LJ_PLANNER_DEFAULT_MARGIN_BYTES;
    const int cuda = strcmp(ops->name, "cpu") != 0;
    size_t free_b = 0, total_b = 0;
    if (ops->memory_info && ops->memory_info(&free_b, &total_b) == LJ_OK && total_b > 0) {
        t->device_memory_bytes = total_b;
        t->memory_source = cuda ? "detected: the GPU's total memory (cudaMemGetInfo)" : "detected: host RAM (MemTotal)";
    } else if (cuda) {
        t->device_memory_bytes = LJ_PLANNER_H200_MEMORY_BYTES;
        t->memory_source = "assumed: one H200 as cudaMemGetInfo reports it (no GPU detected)";
    } else {
        t->device_memory_bytes = (size_t)16 << 30;
        t->memory_source = "assumed: 16 GiB (host memory size unknown)";
    }
#ifdef LJ_HAVE_CUDA
    if (cuda) t->library_workspace_bytes = lj_cuda_fixed_workspace_bytes();
#endif

    char cpu_name[96];
    const char *device = device_name ? device_name : cuda ? "NVIDIA H200" : lj_perf_cpu_device_name(cpu_name, sizeof cpu_name);
    lj_status s = cache_dir ? lj_perf_rates_load(cache_dir, device, &t->rates) : LJ_ERR_IO;
    if (s == LJ_ERR_FORMAT) return s;
    if (s != LJ_OK) {
        if (cuda) {
            lj_perf_rates_default(&t->rates, "cuda", device);
        } else {
            lj_perf_rates_measure_cpu(&t->rates);
            snprintf(t->rates.device, sizeof t->rates.device, "%s", device);
            if (cache_dir && lj_perf_rates_save(cache_dir, &t->rates) != LJ_OK)
                lj_log_warn("planner: could not cache the CPU measurement: %s", lj_error_message());
        }
    }

    if (cuda) {
        const char *env = getenv("LJ_CUDA_CONTEXT_OVERHEAD");
        uint64_t v = 0;
        if (env && *env) {
            if (lj_parse_bytes(env, &v) != LJ_OK)
                return lj_fail(LJ_ERR_ARG, "LJ_CUDA_CONTEXT_OVERHEAD='%s' is not a byte count (e.g. 600MiB)", env);
            t->context_bytes = (size_t)v;
            t->context_source = "LJ_CUDA_CONTEXT_OVERHEAD";
        } else if (t->rates.context_bytes > 0) {
            t->context_bytes = t->rates.context_bytes;
            t->context_source = "measured (planner cache)";
        } else {
            t->context_bytes = LJ_PLANNER_CUDA_CONTEXT_BYTES;
            t->context_source = "default: 544 MiB as measured on one H200 (nothing cached for this device)";
        }
        env = getenv("LJ_NCCL_OVERHEAD");
        if (env && *env) {
            if (lj_parse_bytes(env, &v) != LJ_OK)
                return lj_fail(LJ_ERR_ARG, "LJ_NCCL_OVERHEAD='%s' is not a byte count (e.g. 500MiB)", env);
            t->comm_bytes = (size_t)v;
            t->comm_source = "LJ_NCCL_OVERHEAD";
        } else {
            t->comm_bytes = LJ_PLANNER_NCCL_BYTES;
            t->comm_source = "default: 994 MiB as measured per rank on 2 H200s";
        }
    } else {
        t->context_source = "none on the CPU";
        t->comm_source = "none on the CPU";
    }
    return LJ_OK;
}

/* NCCL's buffers count only for a world of two or more ranks. */
static size_t comm_bytes_of(const lj_planner_target *t) { return t->dp_world_size > 1 ? t->comm_bytes : 0; }

size_t lj_planner_fixed_bytes(const lj_planner_target *t) {
    return t->library_workspace_bytes + t->context_bytes + comm_bytes_of(t);
}

size_t lj_planner_usable_bytes(const lj_planner_target *t) {
    return t->device_memory_bytes > t->margin_bytes ? t->device_memory_bytes - t->margin_bytes : 0;
}

/* ---- candidates --------------------------------------------------------------------- */

void lj_planner_candidate_policy(const lj_planner_candidate *c, uint8_t recompute[LJ_MAX_LAYERS]) {
    memset(recompute, LJ_RECOMPUTE_NONE, LJ_MAX_LAYERS);
    for (int l = 0; l < c->num_full; l++) recompute[l] = LJ_RECOMPUTE_FULL;
    for (int l = c->num_full; l < c->num_full + c->num_selective; l++) recompute[l] = LJ_RECOMPUTE_SELECTIVE;
}

const char *lj_planner_candidate_describe(const lj_planner_candidate *c, char *buf, size_t len) {
    const int L = c->num_full + c->num_selective + c->num_none;
    if (c->num_full == L) snprintf(buf, len, "full (all %d layers)", L);
    else if (c->num_selective == L) snprintf(buf, len, "selective (all %d layers)", L);
    else if (c->num_none == L) snprintf(buf, len, "none (all %d layers)", L);
    else {
        const int n[3] = {c->num_full, c->num_selective, c->num_none};
        static const char *names[3] = {"full", "selective", "none"};
        size_t w = 0;
        buf[0] = '\0';
        for (int i = 0; i < 3 && w < len; i++)
            if (n[i]) w += (size_t)snprintf(buf + w, len - w, "%s%d %s", w ? " + " : "", n[i], names[i]);
    }
    return buf;
}

typedef struct {
    const lj_model_config *cfg;
    const lj_planner_target *t;
    size_t usable;
    lj_model m;
    int plans_built;
} search_ctx;

size_t lj_planner_host_bytes(const lj_model_config *cfg, int seq_length, const lj_planner_target *t) {
    if (!t->offload_optimizer) return 0;
    const lj_model_setup setup = lj_planner_setup(cfg, t, seq_length);
    lj_model m;
    lj_model_build(&m, NULL, &setup, NULL);
    size_t state = 0, staging = 0;
    lj_offload_bytes(&m, &state, &staging);
    lj_model_free(&m);
    return state + staging;
}

lj_model_setup lj_planner_setup(const lj_model_config *cfg, const lj_planner_target *t, int seq_length) {
    lj_model_setup s;
    memset(&s, 0, sizeof s);
    s.ops = t->ops;
    s.cfg = cfg;
    s.model.micro_batch_size = 1;
    s.model.seq_length = seq_length;
    s.model.training = 1;
    s.model.fused = t->fused;
    s.model.linear_recipe = t->linear_recipe;
    s.model.fp8 = t->fp8;
    s.model.exp_avg_dtype = t->exp_avg_dtype;
    s.model.exp_avg_sq_dtype = t->exp_avg_sq_dtype;
    s.zero.zero_stage = t->zero_stage;
    s.zero.dp_world_size = t->dp_world_size; /* the plan of rank 0: every shard has the same size */
    s.offload.enabled = t->offload_optimizer;
    return s;
}

static void ctx_init(search_ctx *s, const lj_model_config *cfg, int seq_length, const lj_planner_target *t) {
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->t = t;
    s->usable = lj_planner_usable_bytes(t);
    const lj_model_setup setup = lj_planner_setup(cfg, t, seq_length);
    lj_model_build(&s->m, NULL, &setup, NULL);
}

/* Evaluates the candidate (B, first k full, next j selective) with an exact plan. With
 * `policy` not NULL the per-layer policy is taken from it instead. */
static lj_planner_candidate evaluate(search_ctx *s, int B, int k, int j, const uint8_t *policy) {
    lj_planner_candidate c;
    memset(&c, 0, sizeof c);
    const int L = s->cfg->num_hidden_layers;
    c.micro_batch_size = B;
    if (policy) {
        for (int l = 0; l < L; l++) {
            c.num_full += policy[l] == LJ_RECOMPUTE_FULL;
            c.num_selective += policy[l] == LJ_RECOMPUTE_SELECTIVE;
        }
        memcpy(s->m.opt.recompute, policy, sizeof s->m.opt.recompute);
    } else {
        c.num_full = k;
        c.num_selective = j;
        lj_planner_candidate_policy(&c, s->m.opt.recompute);
    }
    c.num_none = L - c.num_full - c.num_selective;
    s->m.opt.micro_batch_size = B;
    lj_plan plan;
    lj_plan_build(&plan, &s->m);
    s->plans_built++;
    c.peak_bytes = plan.total_bytes + lj_planner_fixed_bytes(s->t);
    lj_plan_free(&plan);
    c.fits = c.peak_bytes <= s->usable;
    lj_cost_step(s->cfg, &s->m.opt, s->t->ops, &s->t->rates, s->t->grad_accum_steps, &c.cost);
    return c;
}

static int better(const lj_planner_candidate *a, const lj_planner_candidate *b) {
    if (a->cost.tokens_per_s != b->cost.tokens_per_s) return a->cost.tokens_per_s > b->cost.tokens_per_s;
    return a->peak_bytes < b->peak_bytes;
}

/* The fastest fitting candidate at micro-batch B; returns 0 when none fits. */
static int best_at(search_ctx *s, int B, lj_planner_candidate *best) {
    const int L = s->cfg->num_hidden_layers;
    int found = 0;
    for (int k = 0; k <= L; k++) {
        lj_planner_candidate most = evaluate(s, B, k, L - k, NULL);
        if (!most.fits) continue;
        int lo = 0, hi = L - k; /* the fewest selective layers that fit: peak falls as j grows */
        lj_planner_candidate at_hi = most;
        while (lo < hi) {
            const int mid = lo + (hi - lo) / 2;
            lj_planner_candidate c = evaluate(s, B, k, mid, NULL);
            if (c.fits) {
                hi = mid;
                at_hi = c;
            } else {
                lo = mid + 1;
            }
        }
        if (!found || better(&at_hi, best)) *best = at_hi;
        found = 1;
    }
    return found;
}

static void add_alternative(lj_planner_result *r, lj_planner_candidate c, const char *label) {
    if (r->num_alternatives >= LJ_PLANNER_MAX_ALTERNATIVES) return;
    if (r->found && c.micro_batch_size == r->chosen.micro_batch_size && c.num_full == r->chosen.num_full &&
        c.num_selective == r->chosen.num_selective)
        return; /* that is the choice itself */
    for (int i = 0; i < r->num_alternatives; i++) {
        const lj_planner_candidate *a = &r->alternatives[i];
        if (a->micro_batch_size == c.micro_batch_size && a->num_full == c.num_full &&
            a->num_selective == c.num_selective)
            return; /* listed already */
    }
    c.label = label;
    r->alternatives[r->num_alternatives++] = c;
}

static size_t model_state_bytes(const lj_model_config *cfg, const lj_planner_target *t) {
    const lj_ops *ops = t->ops;
    const size_t P = (size_t)lj_config_num_params(cfg);
    const size_t master = ops->param_dtype == LJ_DTYPE_F32 ? 0 : 4;
    return P * (lj_dtype_size(ops->param_dtype) + master + lj_dtype_size(ops->grad_dtype) +
                lj_dtype_size(t->exp_avg_dtype) + lj_dtype_size(t->exp_avg_sq_dtype));
}

static const char *dtype_lower(lj_dtype d) { return d == LJ_DTYPE_BF16 ? "bf16" : d == LJ_DTYPE_F16 ? "f16" : "f32"; }

/* The all-full plan at micro-batch B under target t fits; its peak and, under optimizer
 * offload, the host bytes it takes (state + staging) when asked. */
static int all_full_fits(const lj_model_config *cfg, int T, int B, const lj_planner_target *t, lj_planner_result *r,
                         size_t *peak, size_t *host) {
    search_ctx s;
    ctx_init(&s, cfg, T, t);
    lj_planner_candidate c = evaluate(&s, B, cfg->num_hidden_layers, 0, NULL);
    r->plans_built += s.plans_built;
    if (host) {
        size_t state = 0, staging = 0;
        lj_offload_bytes(&s.m, &state, &staging);
        *host = state + staging;
    }
    lj_model_free(&s.m);
    if (peak) *peak = c.peak_bytes;
    return c.fits;
}

/* The refusal: the smallest memory needed (per rank), and what would make the run fit, each
 * way out checked with an exact plan. */
static void explain_no_fit(const lj_model_config *cfg, int T, int B, const lj_planner_target *t, lj_planner_result *r) {
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
    const size_t usable = lj_planner_usable_bytes(t);
    const size_t need = r->min_peak_bytes;
    const lj_ops *ops = t->ops;
    const int L = cfg->num_hidden_layers, W = t->dp_world_size > 1 ? t->dp_world_size : 1;
    const size_t P = (size_t)lj_config_num_params(cfg);
    /* this rank's model states (with ZeRO-3's gather and gradient slots) in the plan the need
     * comes from: every layer full at micro-batch B */
    lj_planner_candidate full;
    memset(&full, 0, sizeof full);
    full.micro_batch_size = B;
    full.num_full = L;
    lj_plan plan;
    lj_mem_breakdown bd;
    lj_planner_candidate_plan(cfg, T, &full, t, &plan, &bd);
    lj_plan_free(&plan);
    const size_t states = bd.bytes[LJ_MEM_PARAMETERS] + bd.bytes[LJ_MEM_MASTER] + bd.bytes[LJ_MEM_GRADIENTS] +
                          bd.bytes[LJ_MEM_OPTIMIZER];
    const size_t rest = need > states ? need - states : 0;
    const size_t per_param = model_state_bytes(cfg, t) / (P ? P : 1);
    char share[96] = "";
    if (W > 1 || t->offload_optimizer)
        snprintf(share, sizeof share, "; this rank's share under ZeRO stage %d over %d rank%s%s", t->zero_stage, W,
                 W == 1 ? "" : "s", t->offload_optimizer ? ", optimizer offloaded" : "");
    char *e = r->explanation;
    const size_t n = sizeof r->explanation;
    int w = snprintf(e, n,
                     "%s at seq %d does not fit in %s (%s usable after a %s margin) even with full recompute and "
                     "micro-batch %d: it needs at least %s%s, of which model states take %s (%zu B/param: %s params, "
                     "%s%s gradients, %s AdamW moments%s) and activations, buffers and overheads %s. "
                     "What would make it fit:",
                     cfg->name, T, lj_format_bytes(t->device_memory_bytes, b1, sizeof b1),
                     lj_format_bytes(usable, b2, sizeof b2), lj_format_bytes(t->margin_bytes, b3, sizeof b3), B,
                     lj_format_bytes(need, b4, sizeof b4), W > 1 ? " per rank" : "",
                     lj_format_bytes(states, b5, sizeof b5), per_param, dtype_lower(ops->param_dtype),
                     ops->param_dtype == LJ_DTYPE_F32 ? "" : "f32 master weights, ", dtype_lower(ops->grad_dtype),
                     t->exp_avg_dtype == t->exp_avg_sq_dtype ? dtype_lower(t->exp_avg_dtype) : "mixed-dtype",
                     share,
                     lj_format_bytes(rest, b6, sizeof b6));
    /* ZeRO-3 over more ranks: the fewest that fit (doubling, then bisecting; at most 4096) */
    const char *devs = strcmp(ops->name, "cpu") == 0 ? "ranks" : "GPUs";
    lj_planner_target t3 = *t;
    t3.zero_stage = 3;
    int lo = t->zero_stage == 3 ? W : (W > 2 ? W : 2) - 1, hi = 0; /* lo does not fit */
    size_t peak3 = 0;
    for (int g = lo + 1; g <= 4096; g = g * 2 > g + 1 ? g * 2 : g + 1) {
        t3.dp_world_size = g;
        if (all_full_fits(cfg, T, B, &t3, r, NULL, NULL)) {
            hi = g;
            break;
        }
        lo = g;
    }
    while (hi && hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        t3.dp_world_size = mid;
        if (all_full_fits(cfg, T, B, &t3, r, NULL, NULL)) hi = mid;
        else lo = mid;
    }
    if (w > 0 && (size_t)w < n) {
        if (hi) {
            t3.dp_world_size = hi;
            all_full_fits(cfg, T, B, &t3, r, &peak3, NULL);
            w += snprintf(e + w, n - (size_t)w, " ZeRO-3 over at least %d %s (%s per rank: --zero-stage 3);", hi, devs,
                          lj_format_bytes(peak3, b1, sizeof b1));
        } else {
            w += snprintf(e + w, n - (size_t)w, " ZeRO-3 sharding alone is not enough (up to 4096 %s);", devs);
        }
    }
    /* a shorter sequence: halve until the all-full plan at micro-batch 1 fits */
    int shorter = 0;
    size_t shorter_peak = 0;
    for (int T2 = T / 2; T2 >= 64 && !shorter; T2 /= 2)
        if (all_full_fits(cfg, T2, 1, t, r, &shorter_peak, NULL)) shorter = T2;
    if (w > 0 && (size_t)w < n) {
        if (shorter)
            w += snprintf(e + w, n - (size_t)w, " a shorter sequence (seq %d fits with full recompute: %s);", shorter,
                          lj_format_bytes(shorter_peak, b1, sizeof b1));
        else
            w += snprintf(e + w, n - (size_t)w, " no sequence length of 64 or more fits with these model states;");
    }
    /* optimizer offload: this rank's f32 master weights and moments in host memory (ZeRO stage
     * >= 1, DeepSpeed's rule; stage 1 on one rank is stage 0) */
    if (w > 0 && (size_t)w < n && !t->offload_optimizer && strcmp(ops->name, "cpu") != 0) {
        lj_planner_target to = *t;
        to.offload_optimizer = 1;
        if (to.zero_stage == 0) to.zero_stage = 1;
        size_t left = 0, host = 0;
        const int fits = all_full_fits(cfg, T, B, &to, r, &left, &host);
        w += snprintf(e + w, n - (size_t)w,
                      " optimizer offload (--offload-optimizer cpu%s: master weights and moments on the host) would "
                      "bring it to %s (%s; %s of host memory per rank);",
                      t->zero_stage == 0 ? " --zero-stage 1" : "", lj_format_bytes(left, b1, sizeof b1),
                      fits ? "fits" : "still does not fit", lj_format_bytes(host, b2, sizeof b2));
    }
    /* deterministic mode's attention workspace (--deterministic-mode: dP, [B, heads, T, T] bf16) */
    lj_ops_config fast = ops->config; /* the same table without the mode, opened or described as ops is */
    fast.deterministic = 0;
    const lj_ops *fast_ops = w > 0 && (size_t)w < n && ops->config.deterministic && strcmp(ops->name, "cpu") != 0
                                 ? (ops->alloc ? lj_ops_cuda_open(&fast) : lj_ops_cuda_describe(&fast))
                                 : NULL;
    if (fast_ops) {
        size_t left = 0;
        lj_planner_target tf = *t;
        tf.ops = fast_ops;
        const int fits = all_full_fits(cfg, T, B, &tf, r, &left, NULL);
        w += snprintf(e + w, n - (size_t)w,
                      " without --deterministic-mode (its attention backward keeps a micro-batch x heads x seq^2 bf16 "
                      "workspace) it needs %s (%s);",
                      lj_format_bytes(left, b1, sizeof b1), fits ? "fits" : "still does not fit");
    }
    if (ops->grad_dtype == LJ_DTYPE_F32 && ops->param_dtype != LJ_DTYPE_F32 && w > 0 && (size_t)w < n) {
        const size_t save = bd.bytes[LJ_MEM_GRADIENTS] / 2;
        const size_t left = need > save ? need - save : 0;
        w += snprintf(e + w, n - (size_t)w, " bf16 gradients would save %s (%s: %s).",
                      lj_format_bytes(save, b1, sizeof b1), lj_format_bytes(left, b2, sizeof b2),
                      left <= usable ? "fits" : "still does not fit");
    }
    const size_t len = strlen(e);
    if (len > 0 && e[len - 1] == ';') e[len - 1] = '.'; /* the list of ways out ends the sentence */
}

static void explain_choice(int T, int fixed, const lj_planner_target *t, lj_planner_result *r) {
    char b1[32], b2[32], b3[32], b4[32], d[64];
    const lj_planner_candidate *c = &r->chosen;
    char *e = r->explanation;
    const size_t n = sizeof r->explanation;
    int w = snprintf(e, n,
                     "%s recompute %s at micro-batch %d (seq %d): predicted peak %s of %s usable (%s device - %s "
                     "margin); predicted step %.1f ms = %.0f tokens/s, %.1f ms of it recomputing.",
                     fixed ? "Given" : "Chose", lj_planner_candidate_describe(c, d, sizeof d), c->micro_batch_size, T,
                     lj_format_bytes(c->peak_bytes, b1, sizeof b1),
                     lj_format_bytes(lj_planner_usable_bytes(t), b2, sizeof b2),
                     lj_format_bytes(t->device_memory_bytes, b3, sizeof b3),
                     lj_format_bytes(t->margin_bytes, b4, sizeof b4), c->cost.step_s * 1e3, c->cost.tokens_per_s,
                     c->cost.recompute_s * 1e3);
    for (int i = 0; i < r->num_alternatives && w > 0 && (size_t)w < n; i++) {
        const lj_planner_candidate *a = &r->alternatives[i];
        /* the paragraph names the alternatives at the chosen micro-batch and the next larger one */
        if (a->micro_batch_size != c->micro_batch_size &&
            a->micro_batch_size != lj_planner_next_micro_batch(c->micro_batch_size))
            continue;
        if (n - (size_t)w < 160) break; /* keep the paragraph whole: drop the rest */
        const double rel = 100.0 * (a->cost.tokens_per_s / c->cost.tokens_per_s - 1.0);
        if (a->fits)
            w += snprintf(e + w, n - (size_t)w, " Recompute %s at micro-batch %d fits (%s) %s %.1f%% %s%s.",
                          lj_planner_candidate_describe(a, d, sizeof d), a->micro_batch_size,
                          lj_format_bytes(a->peak_bytes, b1, sizeof b1), rel > 0 ? "and is" : "but is",
                          rel > 0 ? rel : -rel, rel > 0 ? "faster" : "slower",
                          rel > 0 && a->micro_batch_size > c->micro_batch_size
                              ? " (within the 1% the cost model cannot tell apart: the smaller micro-batch, with more "
                                "memory free, is kept)"
                              : "");
        else
            w += snprintf(e + w, n - (size_t)w, " Recompute %s at micro-batch %d would need %s: does not fit.",
                          lj_planner_candidate_describe(a, d, sizeof d), a->micro_batch_size,
                          lj_format_bytes(a->peak_bytes, b1, sizeof b1));
    }
}

int lj_planner_next_micro_batch(int B) {
    if (B < 2) return 2;
    const int pow2 = (B & (B - 1)) == 0;
    return pow2 ? B + B / 2 : B + B / 3; /* 2 -> 3 -> 4 -> 6 -> 8 -> 12 -> 16 ... */
}

lj_status lj_planner_search(const lj_model_config *cfg, int seq_length, int micro_batch_size,
                            const uint8_t *fixed_recompute, const lj_planner_target *t, lj_planner_result *res) {
    memset(res, 0, sizeof *res);
    const int L = cfg->num_hidden_layers;
    if (seq_length <= 0) return lj_fail(LJ_ERR_ARG, "--seq-length %d must be positive", seq_length);
    if (seq_length > cfg->max_position_embeddings)
        return lj_fail(LJ_ERR_ARG, "--seq-length %d is above the model's max_position_embeddings (%d)", seq_length,
                       cfg->max_position_embeddings);
    if (micro_batch_size < 0 || micro_batch_size > LJ_PLANNER_MAX_MICRO_BATCH)
        return lj_fail(LJ_ERR_ARG, "--micro-batch-size %d is out of range (1..%d, or auto)", micro_batch_size,
                       LJ_PLANNER_MAX_MICRO_BATCH);
    if ((int64_t)(micro_batch_size ? micro_batch_size : 1) * seq_length > INT_MAX / 4)
        return lj_fail(LJ_ERR_ARG, "micro-batch %d x seq %d tokens is too many for one micro-batch",
                       micro_batch_size, seq_length);
    const int auto_mb = micro_batch_size == 0;
    search_ctx s;
    ctx_init(&s, cfg, seq_length, t);

    lj_planner_candidate per_b[LJ_PLANNER_MAX_MICRO_BATCH_SIZES];
    int bs[LJ_PLANNER_MAX_MICRO_BATCH_SIZES], nb = 0, stop_b = 0;
    lj_planner_candidate stop_full;
    memset(&stop_full, 0, sizeof stop_full);
    for (int B = auto_mb ? 1 : micro_batch_size; nb < LJ_PLANNER_MAX_MICRO_BATCH_SIZES; B = lj_planner_next_micro_batch(B)) {
        if (auto_mb && (B > LJ_PLANNER_MAX_MICRO_BATCH || (int64_t)B * seq_length > INT_MAX / 4)) break;
        lj_planner_candidate best;
        int ok;
        if (fixed_recompute) {
            best = evaluate(&s, B, 0, 0, fixed_recompute);
            ok = best.fits;
        } else {
            ok = best_at(&s, B, &best);
        }
        if (!ok) {
            stop_b = B;
            stop_full = fixed_recompute ? best : evaluate(&s, B, L, 0, NULL);
            break;
        }
        per_b[nb] = best;
        bs[nb++] = B;
        if (!auto_mb) break;
    }
    /* the fastest micro-batch, or a smaller one within LJ_PLANNER_MICRO_BATCH_TOLERANCE of it */
    double best_tps = 0.0;
    for (int i = 0; i < nb; i++)
        if (per_b[i].cost.tokens_per_s > best_tps) best_tps = per_b[i].cost.tokens_per_s;
    for (int i = 0; i < nb && !res->found; i++)
        if (per_b[i].cost.tokens_per_s >= best_tps * (1.0 - LJ_PLANNER_MICRO_BATCH_TOLERANCE)) {
            res->chosen = per_b[i];
            res->found = 1;
        }

    if (res->found) {
        const int B = res->chosen.micro_batch_size;
        if (!fixed_recompute || !(res->chosen.num_none == L))
            add_alternative(res, evaluate(&s, B, 0, 0, NULL), "no recompute");
        if (!fixed_recompute || !(res->chosen.num_selective == L))
            add_alternative(res, evaluate(&s, B, 0, L, NULL), "every layer selective");
        if (!fixed_recompute || !(res->chosen.num_full == L))
            add_alternative(res, evaluate(&s, B, L, 0, NULL), "every layer full");
        if (fixed_recompute) {
            lj_planner_candidate best;
            if (best_at(&s, B, &best)) add_alternative(res, best, "auto's choice");
        }
        for (int i = 0; i < nb; i++)
            if (bs[i] != B) add_alternative(res, per_b[i], fixed_recompute ? "same policy" : "best at this micro-batch");
        if (stop_b) add_alternative(res, stop_full, fixed_recompute ? "same policy" : "every layer full (larger micro-batch)");
        res->min_peak_bytes = res->chosen.peak_bytes;
        explain_choice(seq_length, fixed_recompute != NULL, t, res);
        res->plans_built = s.plans_built;
        lj_model_free(&s.m);
        return LJ_OK;
    }

    /* nothing fits at the micro-batch asked for */
    res->chosen = stop_full;
    res->min_peak_bytes = stop_full.peak_bytes;
    lj_planner_candidate one_full = evaluate(&s, 1, L, 0, NULL);
    res->plans_built = s.plans_built;
    lj_model_free(&s.m);
    char b1[32], b2[32], b3[32], b4[32], b5[32], d1[64], d2[64];
    if (one_full.fits) {
        /* a smaller micro-batch or more recompute would fit */
        lj_planner_result alt;
        const int want = fixed_recompute ? micro_batch_size : 0;
        if (lj_planner_search(cfg, seq_length, want ? want : 0, NULL, t, &alt) != LJ_OK) alt.found = 0;
        if (!alt.found) lj_planner_search(cfg, seq_length, 0, NULL, t, &alt);
        res->plans_built += alt.plans_built;
        snprintf(res->explanation, sizeof res->explanation,
                 "%s at seq %d, micro-batch %d, recompute %s needs %s: it does not fit in %s usable (%s device - %s "
                 "margin). --recompute auto%s would choose recompute %s at micro-batch %d (%s, %.0f tokens/s).",
                 cfg->name, seq_length, stop_full.micro_batch_size,
                 lj_planner_candidate_describe(&stop_full, d1, sizeof d1),
                 lj_format_bytes(stop_full.peak_bytes, b1, sizeof b1),
                 lj_format_bytes(lj_planner_usable_bytes(t), b2, sizeof b2),
                 lj_format_bytes(t->device_memory_bytes, b3, sizeof b3), lj_format_bytes(t->margin_bytes, b5, sizeof b5),
                 alt.chosen.micro_batch_size != stop_full.micro_batch_size ? " --micro-batch-size auto" : "",
                 lj_planner_candidate_describe(&alt.chosen, d2, sizeof d2), alt.chosen.micro_batch_size,
                 lj_format_bytes(alt.chosen.peak_bytes, b4, sizeof b4), alt.chosen.cost.tokens_per_s);
        return lj_fail(LJ_ERR_OOM, "%s", res->explanation);
    }
    res->chosen = one_full;
    res->min_peak_bytes = one_full.peak_bytes;
    explain_no_fit(cfg, seq_length, 1, t, res);
    return lj_fail(LJ_ERR_OOM, "%s", res->explanation);
}

lj_status lj_planner_choose(const lj_model_config *cfg, int seq_length, int *micro_batch_size,
                            const lj_planner_target *t, uint8_t recompute[LJ_MAX_LAYERS], char *explanation,
                            size_t explanation_len) {
    lj_planner_result *r = lj_malloc(sizeof *r);
    lj_status s = lj_planner_search(cfg, seq_length, *micro_batch_size, NULL, t, r);
    if (explanation && explanation_len) snprintf(explanation, explanation_len, "%s", r->explanation);
    if (s == LJ_OK) {
        lj_planner_candidate_policy(&r->chosen, recompute);
        *micro_batch_size = r->chosen.micro_batch_size;
    }
    free(r);
    return s;
}

void lj_planner_check_plan(const char *cmd, size_t planned, size_t run_plan_bytes) {
    if (planned == 0) return;
    const size_t d = planned > run_plan_bytes ? planned - run_plan_bytes : run_plan_bytes - planned;
    if (d <= ((size_t)64 << 20)) return;
    char b1[32], b2[32];
    lj_log_warn("%s: the recompute planner planned %s of buffers for this run but its plan is %s: the planner's "
                "model options and the run's disagree, so the choice and the predicted peak above are not this "
                "run's (a bug in ljperf: please report it with the command line)",
                cmd, lj_format_bytes(planned, b1, sizeof b1), lj_format_bytes(run_plan_bytes, b2, sizeof b2));
}

void lj_planner_candidate_plan(const lj_model_config *cfg, int seq_length, const lj_planner_candidate *c,
                               const lj_planner_target *t, lj_plan *plan, lj_mem_breakdown *bd) {
    search_ctx s;
    ctx_init(&s, cfg, seq_length, t);
    s.m.opt.micro_batch_size = c->micro_batch_size;
    lj_planner_candidate_policy(c, s.m.opt.recompute);
    lj_plan_build(plan, &s.m);
    lj_mem_breakdown_of(plan, s.m.opt.recompute, cfg->num_hidden_layers, t->library_workspace_bytes,
                        t->context_bytes, comm_bytes_of(t), bd);
    lj_model_free(&s.m);
}

/* ---- switches ------------------------------------------------------------------------ */

lj_status lj_planner_env_enabled(int *on) {
    *on = 0;
    const char *v = getenv("CHECKPOINT_OPTIMIZATION");
    if (!v || !*v) return LJ_OK;
    static const char *yes[] = {"true", "1", "yes", "on"}, *no[] = {"false", "0", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) {
            *on = 1;
            return LJ_OK;
        }
        if (!strcasecmp(v, no[i])) return LJ_OK;
    }
    return lj_fail(LJ_ERR_ARG,
                   "CHECKPOINT_OPTIMIZATION='%s' is not a switch: use true, 1, yes or on (automatic recompute "
                   "planning), or false, 0, no, off or empty (off)",
                   v);
}

lj_status lj_planner_megatron_recompute(const char *granularity, const char *method, int num_layers_flag,
                                        int num_layers, uint8_t recompute[LJ_MAX_LAYERS]) {
    memset(recompute, LJ_RECOMPUTE_NONE, LJ_MAX_LAYERS);
    if (!granularity) {
        if (method) return lj_fail(LJ_ERR_ARG, "--recompute-method needs --recompute-granularity");
        if (num_layers_flag >= 0) return lj_fail(LJ_ERR_ARG, "--recompute-num-layers needs --recompute-granularity");
        return LJ_OK;
    }
    lj_recompute policy;
    if (!strcmp(granularity, "full")) policy = LJ_RECOMPUTE_FULL;
    else if (!strcmp(granularity, "selective")) policy = LJ_RECOMPUTE_SELECTIVE;
    else return lj_fail(LJ_ERR_ARG, "--recompute-granularity: '%s' is not one of full, selective", granularity);
    int layers = num_layers;
    if (method && !strcmp(method, "block")) {
        if (num_layers_flag < 0) return lj_fail(LJ_ERR_ARG, "--recompute-method block needs --recompute-num-layers N");
        if (num_layers_flag > num_layers)
            return lj_fail(LJ_ERR_ARG, "--recompute-num-layers %d: the model has %d layers", num_layers_flag,
                           num_layers);
        layers = num_layers_flag;
    } else if (method && strcmp(method, "uniform") != 0) {
        return lj_fail(LJ_ERR_ARG, "--recompute-method: '%s' is not one of uniform, block", method);
    } else if (num_layers_flag < -1 || num_layers_flag > num_layers) {
        return lj_fail(LJ_ERR_ARG, "--recompute-num-layers %d: the model has %d layers", num_layers_flag, num_layers);
    }
    for (int l = 0; l < layers; l++) recompute[l] = (uint8_t)policy;
    return LJ_OK;
}

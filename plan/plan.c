/* plan.c: the static memory plan: every device buffer of a run, its arena and offset. */
#include "plan/plan.h"

#include "base/progress.h"

#include "optim/offload.h"
#include "optim/step.h"

#include <string.h>

const char *lj_arena_name(lj_arena a) {
    static const char *names[LJ_ARENA_COUNT] = {"parameters", "master weights", "gradients", "optimizer state",
                                                "activations", "scratch", "workspaces"};
    return (unsigned)a < LJ_ARENA_COUNT ? names[a] : "?";
}

/* Walks the buffers of a run in a fixed order. With bind = 0 it records each buffer (size
 * and offset); with bind = 1 it assigns base + offset to the model's pointers, visiting the
 * buffers in the same order. The parts with their own plan entry (model/buffers.h) take their
 * buffers through `base`. */
typedef struct {
    lj_buffer_walker base; /* first: the parts' entries get &w->base */
    lj_plan *plan;
    int next; /* buffer index while binding */
} walker;

static void *walker_take(lj_buffer_walker *bw, lj_arena arena, const char *name, size_t bytes) {
    walker *w = (walker *)bw;
    lj_plan *p = w->plan;
    if (w->base.bind) {
        LJ_ASSERT(w->next < p->count);
        lj_plan_buffer *b = &p->buffers[w->next++];
        LJ_ASSERT(b->arena == arena && b->bytes == bytes, "plan walk diverged at %s", name);
        return bytes ? (char *)p->base[arena] + b->offset : NULL;
    }
    if (p->count == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->buffers = lj_realloc(p->buffers, (size_t)p->cap * sizeof *p->buffers);
    }
    lj_plan_buffer *b = &p->buffers[p->count++];
    snprintf(b->name, sizeof b->name, "%s", name);
    b->arena = arena;
    b->bytes = bytes;
    b->offset = p->arena_bytes[arena];
    p->arena_bytes[arena] += (bytes + LJ_PLAN_ALIGN - 1) / LJ_PLAN_ALIGN * LJ_PLAN_ALIGN;
    return NULL;
}

static void *take(walker *w, lj_arena arena, const char *name, size_t bytes) { return walker_take(&w->base, arena, name, bytes); }

static void walk(walker *w, lj_model *m) {
    const lj_model_config *c = &m->cfg;
    const lj_model_options *o = &m->opt;
    const lj_ops *ops = m->ops;
    const size_t sa = lj_dtype_size(ops->act_dtype), sp = lj_dtype_size(ops->param_dtype);
    const int L = c->num_hidden_layers, C = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
    const int hd = c->head_dim, nh = c->num_attention_heads, nkv = c->num_key_value_heads;
    const size_t Q = (size_t)nh * hd, KV = (size_t)nkv * hd, QKV = Q + 2 * KV;
    const int generation = o->kv_cache_tokens > 0;
    const int B = generation ? 1 : o->micro_batch_size, T = o->seq_length;
    const size_t N = (size_t)B * T;
    const size_t Ppad = (size_t)m->padded_numel;
    const int training = o->training && !generation;
    char name[48];

    /* parameters (this rank's shard of them under ZeRO-3); the optimizer's state and the
     * gradients (optim/step.h lj_optim_plan; under optimizer offload the master weights and
     * moments are host memory, optim/offload.h); the residency's own buffers (e.g. ZeRO-2/3's
     * gather and gradient slots, model/residency.h) */
    m->params = take(w, LJ_ARENA_PARAMS, "params", Ppad * sp);
    lj_optim_plan(m, &w->base);
    if (m->residency) m->residency->plan(m, &w->base);

    /* inputs, RoPE tables, residual stream */
    const int rope_rows = generation ? o->kv_cache_tokens : T;
    m->inputs = take(w, LJ_ARENA_ACTIVATIONS, "inputs", N * 4);
    m->targets = take(w, LJ_ARENA_ACTIVATIONS, "targets", N * 4);
    /* document masking (data/docmask.h): per-token RoPE positions and document starts */
    m->position_ids = m->opt.doc_mask.reset_position_ids ? take(w, LJ_ARENA_ACTIVATIONS, "position_ids", N * 4) : NULL;
    m->doc_start = m->opt.doc_mask.reset_attention_mask ? take(w, LJ_ARENA_ACTIVATIONS, "doc_start", N * 4) : NULL;
    m->rope_cos = take(w, LJ_ARENA_ACTIVATIONS, "rope_cos", (size_t)rope_rows * (hd / 2) * 4);
    m->rope_sin = take(w, LJ_ARENA_ACTIVATIONS, "rope_sin", (size_t)rope_rows * (hd / 2) * 4);
    const int residuals = generation ? 1 : L + 1;
    for (int i = 0; i < residuals; i++) {
        snprintf(name, sizeof name, "residual.%d", i);
        m->residual[i] = take(w, LJ_ARENA_ACTIVATIONS, name, N * C * sa);
    }
    for (int i = residuals; i < L + 1; i++) m->residual[i] = m->residual[0];

    /* Shared activations: used by generation for every layer, and by the layers whose recompute
     * policy does not keep a tensor (they are recomputed into these before the layer's backward). */
    int any_selective = 0, any_full = 0;
    for (int l = 0; l < L && !generation; l++) {
        any_selective |= o->recompute[l] == LJ_RECOMPUTE_SELECTIVE;
        any_full |= o->recompute[l] == LJ_RECOMPUTE_FULL;
    }
    /* Layers that keep everything (recompute none) may keep the inputs of QKV, gate/up and down
     * in their linears' recipe's own form (FP8: the transposes the weight gradients read;
     * model/linear.h), not in the act dtype: those are written into the shared buffers and used
     * at once. */
    int any_recipe_kept = 0;
    for (int l = 0; l < L && !generation; l++)
        any_recipe_kept |= o->recompute[l] == LJ_RECOMPUTE_NONE && lj_linear_keeps_inputs(&m->linear, l);
    lj_layer_acts shared = {0};
    if (generation || any_selective || any_full || any_recipe_kept) {
        shared.ln1 = take(w, LJ_ARENA_SCRATCH, "recompute.ln1", N * C * sa);
        shared.ln2 = take(w, LJ_ARENA_SCRATCH, "recompute.ln2", N * C * sa);
        shared.mlp_act = take(w, LJ_ARENA_SCRATCH, "recompute.mlp_act", N * I * sa);
    }
    /* QK-norm (Qwen3) keeps its input, the QKV linear's output; selective recompute recomputes the
     * norm and RoPE from it, full recompute the linear too */
    const int qk = c->qk_norm;
    if (qk && (generation || any_full)) shared.qkv_pre = take(w, LJ_ARENA_SCRATCH, "recompute.qkv_pre", N * QKV * sa);
    if (qk && (generation || any_full || any_selective)) {
        shared.qkv = take(w, LJ_ARENA_SCRATCH, "recompute.qkv", N * QKV * sa);
        shared.qk_rstd = take(w, LJ_ARENA_SCRATCH, "recompute.qk_rstd", N * (size_t)(nh + nkv) * 4);
    }
    if (generation || any_full) {
        shared.ln1_rstd = take(w, LJ_ARENA_SCRATCH, "recompute.ln1_rstd", N * 4);
        shared.ln2_rstd = take(w, LJ_ARENA_SCRATCH, "recompute.ln2_rstd", N * 4);
        if (!qk) shared.qkv = take(w, LJ_ARENA_SCRATCH, "recompute.qkv", N * QKV * sa);
        shared.attn = take(w, LJ_ARENA_SCRATCH, "recompute.attn", N * Q * sa);
        shared.lse = take(w, LJ_ARENA_SCRATCH, "recompute.lse", (size_t)B * nh * T * 4);
        shared.res_mid = take(w, LJ_ARENA_SCRATCH, "recompute.res_mid", N * C * sa);
        shared.gate_up = take(w, LJ_ARENA_SCRATCH, "recompute.gate_up", N * 2 * I * sa);
    }

    /* per-layer saved activations */
    for (int l = 0; l < L; l++) {
        lj_layer_acts *a = &m->layers[l];
        const int policy = generation ? LJ_RECOMPUTE_FULL : o->recompute[l];
        *a = shared;
        a->kv_cache = NULL;
#define KEEP(field, bytes, what)                                        \
    do {                                                                \
        snprintf(name, sizeof name, "layers.%d.%s", l, what);           \
        a->field = take(w, LJ_ARENA_ACTIVATIONS, name, (bytes));        \
    } while (0)
        if (policy != LJ_RECOMPUTE_FULL) {
            KEEP(ln1_rstd, N * 4, "ln1_rstd");
            if (qk) KEEP(qkv_pre, N * QKV * sa, "qkv_pre");
            else KEEP(qkv, N * QKV * sa, "qkv");
            KEEP(attn, N * Q * sa, "attn");
            KEEP(lse, (size_t)B * nh * T * 4, "lse");
            KEEP(res_mid, N * C * sa, "res_mid");
            KEEP(ln2_rstd, N * 4, "ln2_rstd");
            KEEP(gate_up, N * 2 * I * sa, "gate_up");
        }
        if (policy == LJ_RECOMPUTE_NONE && qk) {
            KEEP(qkv, N * QKV * sa, "qkv");
            KEEP(qk_rstd, N * (size_t)(nh + nkv) * 4, "qk_rstd");
        }
        /* the linears' recipe keeps the inputs itself, or else they are kept here */
        const int recipe_kept = lj_linear_plan_layer(&m->linear, l, policy == LJ_RECOMPUTE_NONE, (int)N, &w->base);
        if (policy == LJ_RECOMPUTE_NONE && !recipe_kept) {
            KEEP(ln1, N * C * sa, "ln1");
            KEEP(ln2, N * C * sa, "ln2");
            KEEP(mlp_act, N * I * sa, "mlp_act");
        }
        if (generation) KEEP(kv_cache, (size_t)o->kv_cache_tokens * 2 * KV * sa, "kv_cache");
#undef KEEP
    }
    m->final_ln = take(w, LJ_ARENA_ACTIVATIONS, "final_ln", N * C * sa);
    m->final_rstd = take(w, LJ_ARENA_ACTIVATIONS, "final_rstd", N * 4);
    m->losses = generation ? NULL : take(w, LJ_ARENA_ACTIVATIONS, "losses", N * 4);

    /* scratch */
    m->proj = take(w, LJ_ARENA_SCRATCH, "proj", N * C * sa);
    if (generation) m->logits = take(w, LJ_ARENA_SCRATCH, "logits", (size_t)V * sa);
    else m->logits = o->fused ? NULL : take(w, LJ_ARENA_SCRATCH, "logits", N * V * sa);
    m->swiglu_tmp = o->fused ? NULL : take(w, LJ_ARENA_SCRATCH, "swiglu_tmp", N * I * sa);
    m->d_res = training ? take(w, LJ_ARENA_SCRATCH, "d_res", N * C * sa) : NULL;
    m->d_ln = training ? take(w, LJ_ARENA_SCRATCH, "d_ln", N * C * sa) : NULL;
    m->d_qkv = training ? take(w, LJ_ARENA_SCRATCH, "d_qkv", N * QKV * sa) : NULL;
    m->d_attn = training ? take(w, LJ_ARENA_SCRATCH, "d_attn", N * Q * sa) : NULL;
    m->d_gate_up = training ? take(w, LJ_ARENA_SCRATCH, "d_gate_up", N * 2 * I * sa) : NULL;
    m->d_mlp = training ? take(w, LJ_ARENA_SCRATCH, "d_mlp", N * I * sa) : NULL;

    /* --fp8-param-gather with replicated parameters (model/linear.h): on one rank whose f32 master
     * weights are all in device memory, with a param dtype narrower than the master's, each FP8
     * linear keeps its codes and their transpose in its weight's own place in `params` (which then
     * holds no param-dtype copy of it; AdamW and the cast use the master), where they fit; else
     * (ZeRO-1/2 over several ranks all-gather the param-dtype weights, optimizer offload pushes
     * them from the host master, the CPU's params are the master) in buffers of their own */
    const int kept = m->linear.fp8.kept && !m->linear.fp8.sharded;
    const int in_place = kept && training && ops->param_dtype != LJ_DTYPE_F32 && !m->residency &&
                         !lj_offload_of(m) && m->shard_begin == 0 && m->shard_numel >= m->layout.total;
    for (int l = 0; kept && l < L; l++) {
        for (int k = 0; k < 4; k++) {
            if (m->linear.fp8.slot[l][k] < 0) continue;
            const lj_param_info *pi = &m->layout.params[lj_linear_param(&m->layout, (lj_linear_kind)k, l)];
            lj_linear_place_weight(&m->linear, (lj_linear_kind)k, l, in_place && pi->offset * sp % 16 == 0);
        }
    }
    /* the linears' recipe (model/linear.h): its state, scratch and workspaces (FP8: the "fp8." buffers) */
    lj_linear_plan(&m->linear, (int)N, &w->base);
    /* each kept FP8 weight is cast from the whole weight: its f32 master where its codes are in its
     * place, else its param-dtype copy (under ZeRO-3 the residency binds this rank's slices instead) */
    for (int l = 0; w->base.bind && kept && l < L; l++) {
        for (int k = 0; k < 4; k++) {
            const int s = m->linear.fp8.slot[l][k];
            if (s < 0) continue;
            const lj_param_info *pi = &m->layout.params[lj_linear_param(&m->layout, (lj_linear_kind)k, l)];
            char *place = (char *)m->params + (size_t)pi->offset * sp;
            const int64_t n = (int64_t)m->linear.out_features[k] * m->linear.in_features[k];
            if (m->linear.fp8.in_params[s])
                lj_linear_bind_weight(&m->linear, (lj_linear_kind)k, l, m->master + pi->offset, n, place);
            else
                lj_linear_bind_weight(&m->linear, (lj_linear_kind)k, l, place, n, NULL);
        }
    }

    /* op workspaces */
    m->ws_attention = generation ? NULL
                                 : take(w, LJ_ARENA_WORKSPACE, "attention",
                                        ops->attention_workspace_bytes(B, T, nh, nkv, hd));
    m->ws_rmsnorm = training ? take(w, LJ_ARENA_WORKSPACE, "rmsnorm_backward",
                                    ops->rmsnorm_backward_workspace_bytes((int)N, C))
                             : NULL;
    m->ws_cross_entropy = (!generation && o->fused)
                              ? take(w, LJ_ARENA_WORKSPACE, "cross_entropy",
                                     ops->cross_entropy_fused_workspace_bytes((int)N, C, V))
                              : NULL;
    m->ws_embedding = training ? take(w, LJ_ARENA_WORKSPACE, "embedding_backward",
                                      ops->embedding_backward_workspace_bytes((int)N))
                               : NULL;
    m->ws_norm = training ? take(w, LJ_ARENA_WORKSPACE, "global_norm", ops->global_norm_workspace_bytes((int64_t)Ppad))
                          : NULL;
    m->ws_qk_norm = training && qk ? take(w, LJ_ARENA_WORKSPACE, "qk_norm_backward",
                                          ops->qk_norm_backward_workspace_bytes((int)N, nh, nkv, hd))
                                   : NULL;
    m->ws_bias = training && c->qkv_bias
                     ? take(w, LJ_ARENA_WORKSPACE, "bias_backward", ops->bias_backward_workspace_bytes((int)N, (int)QKV))
                     : NULL;

    /* a second tower's buffers (model/model.h lj_model_hooks: Qwen3-VL's vision tower, model/vl.h) */
    if (m->hooks && m->hooks->plan) m->hooks->plan(m, m->hooks->ctx, &w->base);
}

void lj_plan_build(lj_plan *plan, const lj_model *model) {
    memset(plan, 0, sizeof *plan);
    /* The walk writes NULL pointers while sizing; do it on a copy whose host arrays are scratch. */
    lj_model m = *model;
    m.residual = lj_calloc((size_t)model->cfg.num_hidden_layers + 1, sizeof(void *));
    m.layers = lj_calloc((size_t)model->cfg.num_hidden_layers, sizeof(lj_layer_acts));
    walker w = {{walker_take, 0}, plan, 0};
    walk(&w, &m);
    free(m.residual);
    free(m.layers);
    plan->total_bytes = 0;
    for (int a = 0; a < LJ_ARENA_COUNT; a++) plan->total_bytes += plan->arena_bytes[a];
}

lj_status lj_plan_allocate(lj_plan *plan, lj_model *m) {
    /* the zeroing touches every page: on the CPU a large plan takes a while */
    enum { STEP = 256 << 20 };
    lj_progress pg;
    char what[96], total[32];
    snprintf(what, sizeof what, "allocating the memory plan (%s)", lj_format_bytes(plan->total_bytes, total, sizeof total));
    lj_progress_begin(&pg, what, plan->total_bytes);
    uint64_t done = 0;
    for (int a = 0; a < LJ_ARENA_COUNT; a++) {
        plan->base[a] = NULL;
        if (plan->arena_bytes[a] == 0) continue;
        if (m->ops->alloc(&plan->base[a], plan->arena_bytes[a]) != LJ_OK) {
            char b1[32], b2[32];
            lj_status s = lj_fail(LJ_ERR_OOM, "cannot allocate the %s arena (%s) of the memory plan (%s in all) on %s",
                                  lj_arena_name((lj_arena)a), lj_format_bytes(plan->arena_bytes[a], b1, sizeof b1),
                                  lj_format_bytes(plan->total_bytes, b2, sizeof b2), m->ops->name);
            lj_plan_release(plan, m->ops);
            return s;
        }
        /* every buffer starts at zero (AdamW moments, gradients): runs are deterministic */
        for (size_t off = 0; off < plan->arena_bytes[a]; off += STEP) {
            const size_t n = plan->arena_bytes[a] - off < STEP ? plan->arena_bytes[a] - off : STEP;
            m->ops->memset_zero((char *)plan->base[a] + off, n);
            done += n;
            lj_progress_update(&pg, done);
        }
    }
    lj_progress_end(&pg);
    lj_status s = lj_offload_alloc(m);
    if (s != LJ_OK) {
        lj_plan_release(plan, m->ops);
        return s;
    }
    walker w = {{walker_take, 1}, plan, 0};
    walk(&w, m);
    LJ_ASSERT(w.next == plan->count);
    lj_linear_reset(&m->linear); /* FP8 scales start at 1 */
    return LJ_OK;
}

void lj_plan_release(lj_plan *plan, const lj_ops *ops) {
    for (int a = 0; a < LJ_ARENA_COUNT; a++) {
        if (plan->base[a]) ops->free(plan->base[a]);
        plan->base[a] = NULL;
    }
}

void lj_plan_free(lj_plan *plan) {
    free(plan->buffers);
    memset(plan, 0, sizeof *plan);
}

void lj_plan_print_offload(const lj_model *m, FILE *f) {
    size_t state, staging;
    lj_offload_bytes(m, &state, &staging);
    if (state == 0) return;
    char b1[32], b2[32];
    fprintf(f, "optimizer offload: %s of optimizer state (f32 master weights and AdamW moments) in host memory, "
               "plus %s of host staging; not in the device plan\n",
            lj_format_bytes(state, b1, sizeof b1), lj_format_bytes(staging, b2, sizeof b2));
}

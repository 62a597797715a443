/* cost.c: the planner's step-time cost model (FLOPs and bytes of each pass over the op
 * table, divided by per-device throughputs) and the throughputs themselves: defaults,
 * CPU measurement, and the per-device JSON cache under <cache>/planner/. */
#include "plan/planner.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "ops/cpu/cpu.h"

/* ---- throughputs ------------------------------------------------------------------ */

double lj_perf_attention_rate(const lj_perf_rates *r, double T) {
    const double t0 = r->attention_seq0;
    if (!(t0 > 0) || !(T > 0)) return r->attention_flops;
    return r->attention_flops * (T / (T + t0)) / (4096.0 / (4096.0 + t0));
}

void lj_perf_rates_default(lj_perf_rates *r, const char *backend, const char *device) {
    memset(r, 0, sizeof *r);
    snprintf(r->device, sizeof r->device, "%s", device ? device : backend);
    if (strcmp(backend, "cpu") == 0) {
        r->matmul_flops = 50e9;
        r->fp8_matmul_flops = 25e9; /* the emulation decodes to fp32 first */
        r->attention_flops = 12.5e9;
        r->memory_bandwidth = 10e9;
        snprintf(r->source, sizeof r->source, "CPU placeholders (50 GFLOP/s sgemm, 10 GB/s), not measured");
    } else {
        /* docs/reference.md, "Ceilings of one H200": cuBLAS bf16 GEMM
         * 650-790 TFLOP/s, cuDNN SDPA causal fwd+bwd 385-460 TFLOP/s; HBM3e 4.8 TB/s peak,
         * ~3.5 TB/s reached by streaming kernels. */
        r->matmul_flops = 700e12;
        r->fp8_matmul_flops = LJ_FP8_GEMM_SPEEDUP * r->matmul_flops;
        r->attention_flops = 400e12;
        r->attention_seq0 = 1544; /* planner.h: 400 TFLOP/s at seq 4096, 526 at 32768 */
        r->memory_bandwidth = 3.5e12;
        snprintf(r->source, sizeof r->source,
                 "H100/H200 defaults (cuBLAS and cuDNN SDPA as measured on an H200): GEMM 700 TFLOP/s, attention 400 TFLOP/s at seq 4096, 3.5 TB/s");
    }
}

lj_status lj_perf_rates_path(const char *cache_dir, const char *device, char *buf) {
    char key[96];
    size_t n = 0;
    for (const char *p = device; *p && n + 1 < sizeof key; p++) {
        const char ch = *p;
        const int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                       ch == '.' || ch == '_' || ch == '-';
        key[n++] = ok ? ch : '_';
    }
    key[n] = '\0';
    return lj_path_format(buf, "%s/planner/%s.json", cache_dir, n ? key : "device");
}

static lj_status positive_field(const cJSON *root, const char *path, const char *field, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, field);
    if (!cJSON_IsNumber(v)) return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' is missing or not a number", path, field);
    if (!(v->valuedouble > 0.0)) return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' must be positive", path, field);
    *out = v->valuedouble;
    return LJ_OK;
}

lj_status lj_perf_rates_load(const char *cache_dir, const char *device, lj_perf_rates *r) {
    char path[LJ_PATH_MAX];
    LJ_TRY(lj_perf_rates_path(cache_dir, device, path));
    char *text = NULL;
    size_t size = 0;
    FILE *probe = fopen(path, "rb");
    if (!probe) return lj_fail(LJ_ERR_IO, "%s: no cached measurement", path);
    fclose(probe);
    LJ_TRY(lj_file_read_all(path, &text, &size));
    cJSON *root = cJSON_ParseWithLength(text, size);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lj_fail(LJ_ERR_FORMAT, "%s: not a JSON object", path);
    }
    lj_perf_rates x;
    memset(&x, 0, sizeof x);
    snprintf(x.device, sizeof x.device, "%s", device);
    double mm = 0, at = 0, bw = 0;
    lj_status s = positive_field(root, path, "matmul_tflops", &mm);
    if (s == LJ_OK) s = positive_field(root, path, "attention_tflops", &at);
    if (s == LJ_OK) s = positive_field(root, path, "memory_bandwidth_gbs", &bw);
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(root, "context_overhead_bytes");
    if (s == LJ_OK && ctx && (!cJSON_IsNumber(ctx) || ctx->valuedouble < 0))
        s = lj_fail(LJ_ERR_FORMAT, "%s: field 'context_overhead_bytes' must be a non-negative number", path);
    double f8 = 0, seq0 = 0;
    if (s == LJ_OK && cJSON_GetObjectItemCaseSensitive(root, "fp8_matmul_tflops"))
        s = positive_field(root, path, "fp8_matmul_tflops", &f8);
    if (s == LJ_OK && cJSON_GetObjectItemCaseSensitive(root, "attention_seq0")) /* optional: 0, a flat rate */
        s = positive_field(root, path, "attention_seq0", &seq0);
    if (s == LJ_OK) {
        x.matmul_flops = mm * 1e12;
        x.fp8_matmul_flops = f8 > 0 ? f8 * 1e12 : LJ_FP8_GEMM_SPEEDUP * x.matmul_flops;
        x.attention_flops = at * 1e12;
        x.attention_seq0 = seq0;
        x.memory_bandwidth = bw * 1e9;
        x.context_bytes = ctx ? (size_t)ctx->valuedouble : 0;
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "source");
        /* a description for the plan's printout: cut to fit */
        snprintf(x.source, sizeof x.source, "%.60s (cached in %.80s)", cJSON_IsString(src) ? src->valuestring : "measured",
                 path);
        *r = x;
    }
    cJSON_Delete(root);
    return s;
}

lj_status lj_perf_rates_save(const char *cache_dir, const lj_perf_rates *r) {
    char dir[LJ_PATH_MAX], path[LJ_PATH_MAX];
    LJ_TRY(lj_path_join(dir, cache_dir, "planner"));
    LJ_TRY(lj_mkdir_p(dir));
    LJ_TRY(lj_perf_rates_path(cache_dir, r->device, path));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "device", r->device);
    cJSON_AddNumberToObject(o, "matmul_tflops", r->matmul_flops / 1e12);
    cJSON_AddNumberToObject(o, "fp8_matmul_tflops", r->fp8_matmul_flops / 1e12);
    cJSON_AddNumberToObject(o, "attention_tflops", r->attention_flops / 1e12);
    if (r->attention_seq0 > 0) cJSON_AddNumberToObject(o, "attention_seq0", r->attention_seq0);
    cJSON_AddNumberToObject(o, "memory_bandwidth_gbs", r->memory_bandwidth / 1e9);
    cJSON_AddNumberToObject(o, "context_overhead_bytes", (double)r->context_bytes);
    cJSON_AddStringToObject(o, "source", r->source);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    lj_status s = lj_file_write_atomic(path, text, strlen(text));
    free(text);
    return s;
}

const char *lj_perf_cpu_device_name(char *buf, size_t len) {
    snprintf(buf, len, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return buf;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t n = strcspn(v, "\r\n");
        snprintf(buf, len, "cpu-%.*s", (int)n, v);
        break;
    }
    fclose(f);
    return buf;
}

void lj_perf_rates_measure_cpu(lj_perf_rates *r) {
    char name[96];
    lj_perf_rates_default(r, "cpu", lj_perf_cpu_device_name(name, sizeof name));
    const double gflops = lj_cpu_sgemm_gflops(1024);
    if (gflops > 0) {
        r->matmul_flops = gflops * 1e9;
        r->fp8_matmul_flops = r->matmul_flops / 2;
        r->attention_flops = r->matmul_flops / 4;
    }
    /* streaming bandwidth: b += a over 64 MiB arrays (read a, read b, write b per pass) */
    const size_t n = (size_t)16 << 20;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    if (a && b) {
        for (size_t i = 0; i < n; i++) {
            a[i] = 1.0f;
            b[i] = 0.0f;
        }
        double best = 0.0;
        for (int rep = 0; rep < 4; rep++) {
            const double t0 = lj_time_sec();
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < n; i++) b[i] += a[i];
            const double dt = lj_time_sec() - t0;
            if (dt > 0 && 3.0 * n * sizeof(float) / dt > best) best = 3.0 * n * sizeof(float) / dt;
        }
        if (best > 0 && b[n / 2] > 0.0f) r->memory_bandwidth = best;
    }
    free(a);
    free(b);
    snprintf(r->source, sizeof r->source,
             "measured on this CPU: sgemm 1024^3 %.1f GFLOP/s, streaming %.1f GB/s, attention assumed sgemm/4",
             r->matmul_flops / 1e9, r->memory_bandwidth / 1e9);
}

/* ---- the step-time model ------------------------------------------------------------
 *
 * Notation: B micro-batch, T sequence length, N = B*T, C hidden, I intermediate, V vocab,
 * nh/nkv heads, hd head_dim, Q = nh*hd, KV = nkv*hd, QKV = Q + 2*KV, L layers, P parameters;
 * sa, sp, sg the bytes per element of act, param and grad dtypes. A layer's ops are those of
 * model/model.c (attention_block_forward, mlp_block_forward, recompute_layer, backward).
 *
 * GEMMs (2*M*N*K FLOPs each, y = x W^T):
 *   per layer forward   F = 2N(C*QKV + Q*C + C*2I + I*C)
 *   lm_head forward     2NCV
 *   backward            2x forward (dx and dW for every matmul, lm_head included)
 *   recompute, full     2N(C*QKV + Q*C + C*2I)   (q/k/v, o_proj, gate/up; not down_proj)
 *   recompute, selective 0
 * Attention (the convention of docs/reference.md's SDPA figures, causal counted as half):
 *   forward 2*B*nh*T^2*hd, backward 2.5x forward; full recompute adds one forward.
 * Element-wise passes, bytes read + written (fused kernels; the unfused twins in brackets):
 *   residual add + RMSNorm     4NC*sa   [add 3NC*sa + RMSNorm 2NC*sa]   2 per layer forward
 *   RoPE (q and k, in place)   2N(Q+KV)*sa                            forward and backward
 *   QK-norm + RoPE (Qwen3)     forward 2N*QKV*sa (x read, out written, v copied), backward
 *                              5N(Q+KV)*sa (dw pass: dout, x; dx pass: dout, x, dx); in place
 *                              of RoPE's figure [unfused: RoPE's added]
 *   q/k/v bias (Qwen2)         forward 2N*QKV*sa, backward N*QKV*sa (column sums)
 *   SwiGLU forward             3NI*sa   [silu to tmp 2NI, product 3NI: 5NI*sa]
 *   SwiGLU backward            5NI*sa   [three passes through tmp: 9NI*sa]
 *   RMSNorm backward           4NC*sa   (dout, x, dx read and written), 2 per layer
 *   recompute, selective       RMSNorm x2 (2NC*sa each) + SwiGLU forward (+ QK-norm and RoPE)
 *   recompute, full            RMSNorm 2NC*sa + bias + RoPE (QK-norm) + residual+RMSNorm + SwiGLU forward
 *   once per micro-batch:      embedding forward NC(sp+sa), first RMSNorm 2NC*sa,
 *                              cross-entropy rows 2NV*sa (logits read, dlogits written),
 *                              final RMSNorm backward 4NC*sa, d_res zeroing NC*sa,
 *                              embedding backward NC(sa + 2sg)
 *   once per optimizer step:   gradient zeroing P*sg, global norm P*sg,
 *                              AdamW P(sg + 12 + 12 + sp) (read grad, master, m, v; write
 *                              master, m, v and the param copy; no copy when params are f32)
 * The FP8 recipe (model/linear.h), in each FP8 layer: its block GEMMs at the FP8 rate, and the
 * casts (sa read, 1 written per element; the transposing casts write 2 for the gradient):
 *   forward    x of the four linears N(2C+Q+I)(sa+1), the weights W(sp+1) with W = C*QKV + Q*C +
 *              2CI + IC; without recompute the kept FP8 inputs add N(2C+I)
 *   backward   dy N(QKV+2C+2I)(sa+2), the weights' transposes W(sp+1), and x again N(2C+Q+I)(sa+1)
 *              (without recompute only o_proj's, NQ(sa+1))
 *   tensorwise the amax passes besides: N(2C+Q+I)sa + W*sp forward, N(QKV+2C+2I)sa backward
 *   full recompute repeats the forward casts of q/k/v, o_proj and gate/up
 *   --fp8-param-gather (kept weights, model/linear.h): none of the weights' casts per micro-batch;
 *              once per optimizer step W(2sp + 2) (its amax, then the cast with its transpose;
 *              on one CUDA rank, where the codes replace the bf16 weights, the cast reads the f32
 *              master, W(2*4 + 2), and AdamW writes no copy of them, W*sp less: 2W bytes more in
 *              all, not modelled);
 *              the ZeRO-3 form's per-micro-batch transposes of the gathered codes are not counted
 * Kernel launches, GEMM efficiency at small shapes and overlap are not modelled: the
 * throughputs are meant to be measured at training shapes on the device (the cache).
 */
void lj_cost_step(const lj_model_config *c, const lj_model_options *o, const lj_ops *ops, const lj_perf_rates *r,
                  int grad_accum_steps, lj_step_cost *out) {
    memset(out, 0, sizeof *out);
    const double sa = (double)lj_dtype_size(ops->act_dtype), sp = (double)lj_dtype_size(ops->param_dtype),
                 sg = (double)lj_dtype_size(ops->grad_dtype);
    const double B = o->micro_batch_size, T = o->seq_length, N = B * T;
    const double C = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, hd = c->head_dim;
    const double nh = c->num_attention_heads, nkv = c->num_key_value_heads;
    const double Q = nh * hd, KV = nkv * hd, QKV = Q + 2 * KV;
    const int L = c->num_hidden_layers;
    const double P = (double)lj_config_num_params(c);
    const int fused = o->fused;

    const double layer_mm_fwd = 2 * N * (C * QKV + Q * C + C * 2 * I + I * C);
    const double full_mm_rec = 2 * N * (C * QKV + Q * C + C * 2 * I);
    const double attn_fwd = 2 * B * nh * T * T * hd;
    const double res_norm = fused ? 4 * N * C * sa : 5 * N * C * sa;
    const double rope = 2 * N * (Q + KV) * sa;
    const double swiglu_fwd = fused ? 3 * N * I * sa : 5 * N * I * sa;
    const double swiglu_bwd = fused ? 5 * N * I * sa : 9 * N * I * sa;
    const double norm_fwd = 2 * N * C * sa, norm_bwd = 4 * N * C * sa;

    const double qkr_fwd = c->qk_norm ? 2 * N * QKV * sa + (fused ? 0 : rope) : rope;
    const double qkr_bwd = c->qk_norm ? 5 * N * (Q + KV) * sa + (fused ? 0 : rope) : rope;
    const double bias_fwd = c->qkv_bias ? 2 * N * QKV * sa : 0, bias_bwd = c->qkv_bias ? N * QKV * sa : 0;

    const double layer_ew_fwd = bias_fwd + qkr_fwd + 2 * res_norm + swiglu_fwd;
    const double layer_ew_bwd = swiglu_bwd + 2 * norm_bwd + qkr_bwd + bias_bwd;

    double mm = 3 * (L * layer_mm_fwd + 2 * N * C * V);
    /* the layers the linears' recipe runs in FP8 (model/linear.h: training plans only, none under
     * "bf16"); current scaling reads each tensor once more: tensorwise for its amax, blockwise
     * because its rowwise and columnwise tile casts (and the weight blocks' amax and cast) are two
     * passes (the recipe's extra_cast_pass) */
    const lj_linear_recipe *recipe =
        lj_linear_recipe_of(o->linear_recipe, o->fp8.recipe, o->training && o->kv_cache_tokens == 0);
    int f8_first, f8_end;
    recipe->fp8_layers(&o->fp8, L, &f8_first, &f8_end);
    const int tensorwise = recipe->extra_cast_pass;
    /* --fp8-param-gather: the per-tensor recipes keep their weights (lj_linear_init's rule) */
    const int kept = o->fp8.param_gather && f8_end > f8_first &&
                     (!strcmp(recipe->name, "delayed") || !strcmp(recipe->name, "tensorwise"));
    const double wcast = kept ? 0 : 1; /* the weights' casts per micro-batch */
    const double Wl = C * QKV + Q * C + 2 * C * I + I * C, Xin = N * (2 * C + Q + I), Dy = N * (QKV + 2 * C + 2 * I);
    double fp8_mm = 0, fp8_bytes = 0, fp8_rec_mm = 0, fp8_rec_bytes = 0, fp8_step_bytes = 0;
    for (int l = f8_first; l < f8_end; l++) {
        const int none = o->recompute[l] == LJ_RECOMPUTE_NONE, full = o->recompute[l] == LJ_RECOMPUTE_FULL;
        fp8_mm += 3 * layer_mm_fwd;
        fp8_bytes += Xin * (sa + 1) + wcast * Wl * (sp + 1) + (none ? N * (2 * C + I) : 0);
        fp8_bytes += Dy * (sa + 2) + wcast * Wl * (sp + 1) + (none ? N * Q * (sa + 1) : Xin * (sa + 1));
        if (tensorwise) fp8_bytes += Xin * sa + wcast * Wl * sp + Dy * sa;
        if (kept) fp8_step_bytes += Wl * (2 * sp + 2);
        if (full) {
            fp8_rec_mm += full_mm_rec;
            fp8_rec_bytes += N * (2 * C + Q) * (sa + 1 + (tensorwise ? sa : 0)) +
                             wcast * (C * QKV + Q * C + 2 * C * I) * (sp + 1 + (tensorwise ? sp : 0));
        }
    }
    mm -= fp8_mm;
    double attn = 3.5 * attn_fwd * L;
    double ew = L * (layer_ew_fwd + layer_ew_bwd);
    ew += N * C * (sp + sa) + norm_fwd + 2 * N * V * sa + norm_bwd + N * C * sa + N * C * (sa + 2 * sg);
    for (int l = 0; l < L; l++) {
        if (o->recompute[l] == LJ_RECOMPUTE_SELECTIVE) {
            out->recompute_bytes += 2 * norm_fwd + swiglu_fwd + (c->qk_norm ? qkr_fwd : 0);
        } else if (o->recompute[l] == LJ_RECOMPUTE_FULL) {
            out->recompute_matmul_flop += full_mm_rec;
            out->recompute_attention_flop += attn_fwd;
            out->recompute_bytes += norm_fwd + bias_fwd + qkr_fwd + res_norm + swiglu_fwd;
        }
    }
    /* AdamW reads the gradient, reads and writes the f32 master and both moments (4 bytes each as
     * f32, 2 as bf16: --exp-avg-dtype, --exp-avg-sq-dtype) and writes the parameter copy */
    const double mv = 2.0 * (lj_dtype_size(o->exp_avg_dtype) + lj_dtype_size(o->exp_avg_sq_dtype));
    const double adamw = ops->param_dtype == LJ_DTYPE_F32 ? P * (sg + 8 + mv) : P * (sg + 8 + mv + sp);
    out->optimizer_bytes = 2 * P * sg + adamw + fp8_step_bytes;
    out->recompute_bytes += fp8_rec_bytes;
    out->fp8_matmul_flop = fp8_mm + fp8_rec_mm;
    out->matmul_flop = mm + fp8_mm + out->recompute_matmul_flop;
    out->attention_flop = attn + out->recompute_attention_flop;
    out->elementwise_bytes = ew + fp8_bytes + out->recompute_bytes;

    const int accum = grad_accum_steps > 0 ? grad_accum_steps : 1;
    const double f8_rate = r->fp8_matmul_flops > 0 ? r->fp8_matmul_flops : r->matmul_flops;
    out->matmul_s = (out->matmul_flop - out->fp8_matmul_flop) / r->matmul_flops + out->fp8_matmul_flop / f8_rate;
    const double attn_rate = lj_perf_attention_rate(r, T);
    out->attention_s = out->attention_flop / attn_rate;
    out->memory_s = (out->elementwise_bytes + out->optimizer_bytes / accum) / r->memory_bandwidth;
    out->recompute_s = (out->recompute_matmul_flop - fp8_rec_mm) / r->matmul_flops + fp8_rec_mm / f8_rate +
                       out->recompute_attention_flop / attn_rate + out->recompute_bytes / r->memory_bandwidth;
    out->step_s = out->matmul_s + out->attention_s + out->memory_s;
    out->tokens_per_s = out->step_s > 0 ? N / out->step_s : 0.0;
}

/* benchmark.c: timed training steps and their metrics (see benchmark.h). */
#include "bench/benchmark.h"
#include "bench/reference.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <string.h>

#include "checkpoint/state.h"
#include "data/loader.h"
#include "ops/cpu/cpu.h"
#include "plan/build.h"
#include "plan/plan.h"
#include "parallel/parallel.h"

/* bf16 dense peak of an H100/H200 SXM (docs/reference.md, "MFU, stated once"). */
#define LJ_PEAK_TFLOPS_H100_BF16 989.0

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Peak resident set size of this process in bytes (VmHWM). */
static size_t peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

size_t lj_bench_device_used_bytes(const lj_ops *ops) {
    if (strcmp(ops->name, "cpu") == 0) return peak_rss_bytes();
    size_t free_b = 0, total_b = 0;
    if (ops->memory_info(&free_b, &total_b) != LJ_OK) return 0;
    return total_b - free_b;
}

void lj_bench_steps_init(lj_bench_steps *s, const lj_ops *ops, int warmup, int timed, int progress) {
    memset(s, 0, sizeof *s);
    s->ops = ops;
    s->warmup = warmup;
    s->timed = timed;
    s->progress = progress;
    s->step_ms = lj_calloc((size_t)timed, sizeof(double));
}

void lj_bench_steps_record(lj_bench_steps *s, int step, double sec, double loss, double rate, const char *unit) {
    const int steps = s->warmup + s->timed;
    if (step == 1) s->loss_first = loss;
    s->loss_last = loss;
    if (step > s->warmup) {
        s->step_ms[step - s->warmup - 1] = sec * 1e3;
        s->timed_sec += sec;
    }
    if (step == s->warmup + 1 || step == steps) {
        const size_t used = lj_bench_device_used_bytes(s->ops);
        if (used > s->used_bytes) s->used_bytes = used;
    }
    if (s->progress) {
        fprintf(stderr, "\r%s step %d/%d | %.1f ms | %.*f %s/s | loss %.4f   ", step <= s->warmup ? "warm-up" : "timed",
                step, steps, sec * 1e3, rate < 100 ? 2 : 0, rate, unit, loss);
        fflush(stderr);
    }
}

void lj_bench_steps_finish(lj_bench_steps *s, double *median_ms, double *p90_ms) {
    if (s->progress) fputc('\n', stderr);
    qsort(s->step_ms, (size_t)s->timed, sizeof(double), cmp_double);
    *median_ms = s->step_ms[(s->timed - 1) / 2];
    *p90_ms = s->step_ms[(int)((s->timed - 1) * 0.9 + 0.5)];
    free(s->step_ms);
    s->step_ms = NULL;
}

double lj_bench_peak_tflops(const lj_ops *ops, double *cpu_peak_tflops, const char **source) {
    if (strcmp(ops->name, "cpu") == 0) {
        if (*cpu_peak_tflops <= 0) *cpu_peak_tflops = lj_cpu_sgemm_gflops(1024) / 1e3; /* once per process */
        *source = "OpenBLAS sgemm 1024^3 measured in this run";
        return *cpu_peak_tflops;
    }
    *source = "989 TFLOP/s bf16 dense (H100/H200 SXM)";
    return LJ_PEAK_TFLOPS_H100_BF16;
}

/* Adds the documents of micro-batch tokens [B, T+1] to res's sums (lj_bench_run divides them by
 * the sequences counted): documents per sequence and the attention work within them,
 * sum l(l+1)/2 over T(T+1)/2. ds: [T] scratch. */
static void doc_stats(const lj_doc_mask *dm, const int32_t *tokens, int B, int T, int32_t *ds, lj_bench_result *res) {
    const lj_doc_mask starts = {0, 1, 0, dm->eod_token};
    for (int b = 0; b < B; b++) {
        lj_doc_mask_sequence(&starts, tokens + (size_t)b * (T + 1), T, NULL, ds, NULL);
        double work = 0.0;
        int docs = 0;
        for (int t = 0; t < T;) {
            int e = t;
            while (e < T && ds[e] == t) e++;
            work += 0.5 * (double)(e - t) * (e - t + 1);
            docs++;
            t = e;
        }
        res->docs_per_sequence += docs;
        res->attention_fraction += work / (0.5 * (double)T * (T + 1));
    }
}

/* SIGINT / SIGTERM during a run with --save: the step under way ends, the last save is finished
 * (so no half-written checkpoint is left), and the run stops with LJ_ERR_INTERRUPTED. */
static volatile sig_atomic_t g_bench_stop;
static void bench_on_signal(int sig) { g_bench_stop = sig; }

lj_status lj_bench_run(lj_bench_config *cfg, lj_bench_result *res) {
    memset(res, 0, sizeof *res);
    const lj_ops *ops = cfg->ops;
    const int B = cfg->micro_batch_size, T = cfg->seq_length;
    if (T > cfg->model.max_position_embeddings)
        return lj_fail(LJ_ERR_ARG, "--seq-length %d is above the model's max_position_embeddings: expected %d or less",
                       T, cfg->model.max_position_embeddings);
    if (cfg->train_iters <= 0 || cfg->warmup_iters < 0 || B <= 0 || T <= 0)
        return lj_fail(LJ_ERR_ARG, "--train-iters, --micro-batch-size and --seq-length must be positive");
    const int is_cpu = strcmp(ops->name, "cpu") == 0;
    res->flops_per_token = lj_config_flops_per_token(&cfg->model, T);
    res->peak_tflops = lj_bench_peak_tflops(ops, &cfg->cpu_peak_tflops, &res->peak_source);

    lj_loader loader;
    int have_data = 0;
    if (cfg->num_data_args > 0 || cfg->save) {
        /* --save needs a loader whose position the checkpoint records: train's --mock-data one
         * when no data is given */
        lj_loader_config lc;
        memset(&lc, 0, sizeof lc);
        if (cfg->num_data_args > 0) {
            LJ_TRY(lj_loader_parse_data_path(&lc, cfg->num_data_args, (const char *const *)cfg->data_args));
        } else {
            lc.num_datasets = 1;
            lc.mock_vocab_size = cfg->model.vocab_size;
        }
        lc.seq_length = T;
        lc.micro_batch_size = B;
        lc.seed = cfg->seed;
        lc.which = LJ_SPLIT_TRAIN;
        lc.dp_rank = cfg->dp->rank;
        lc.dp_world_size = cfg->dp->world;
        LJ_TRY(lj_loader_init(&loader, &lc));
        lj_status s = lj_loader_check_vocab(&loader, cfg->model.vocab_size);
        /* document masking splits at the separator the datasets record (prepare's), as train does;
         * the model's EOS, given in cfg, only where they record none */
        if (s == LJ_OK && lj_doc_mask_any(&cfg->doc_mask))
            s = lj_loader_eod_token(&loader, cfg->doc_mask.eod_token, cfg->model.vocab_size, cfg->dp->rank == 0,
                                    &cfg->doc_mask.eod_token);
        if (s != LJ_OK) {
            lj_loader_free(&loader);
            return s;
        }
        have_data = 1;
    }

    lj_model_setup setup = lj_model_setup_of(cfg->dp, ops, &cfg->model, B, T, cfg->fused, cfg->recompute);
    setup.model.linear_recipe = cfg->linear_recipe;
    setup.model.fp8 = cfg->fp8;
    setup.model.exp_avg_dtype = cfg->exp_avg_dtype;
    setup.model.exp_avg_sq_dtype = cfg->exp_avg_sq_dtype;
    setup.model.doc_mask = cfg->doc_mask;
    lj_model m;
    lj_plan plan;
    lj_model_build(&m, &plan, &setup, cfg->dp->dist);
    /* On a GPU, what the process holds before the plan is allocated (the CUDA context and the
     * backend's start-up workspaces), measured now, is added to the plan. */
    const size_t before = is_cpu ? 0 : lj_bench_device_used_bytes(ops);
    lj_status s = lj_model_build_state(&m, &plan, cfg->seed);
    if (s != LJ_OK) {
        lj_plan_free(&plan);
        lj_model_free(&m);
        if (have_data) lj_loader_free(&loader);
        return s;
    }
    res->planned_bytes = plan.total_bytes + before;

    const lj_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, LJ_WD_MEGATRON, 0, 0};
    lj_adamw_segment *seg;
    const int nseg = lj_dp_segments(&m, &ac, &seg);
    const int world = cfg->dp->world;
    int32_t *tokens = lj_malloc((size_t)B * (T + 1) * sizeof(int32_t));
    int32_t *ds = lj_malloc((size_t)T * sizeof(int32_t)); /* a sequence's document starts, for doc_stats */
    lj_rng rng;
    lj_rng_seed(&rng, cfg->seed + (uint64_t)cfg->dp->rank); /* each rank its own tokens */
    const int steps = cfg->warmup_iters + cfg->train_iters;
    lj_bench_steps st;
    lj_bench_steps_init(&st, ops, cfg->warmup_iters, cfg->train_iters, cfg->progress);
    const int accum = cfg->accumulation > 1 ? cfg->accumulation : 1;
    const float dloss = 1.0f / (float)((int64_t)B * T * world * accum);
    /* --save: ljperf train's checkpoint of the state after the step (checkpoint/state.h) */
    lj_run_state rs;
    memset(&rs, 0, sizeof rs);
    if (cfg->save) {
        rs.model_cfg = &cfg->model;
        rs.micro_batch_size = B;
        rs.seq_length = T;
        rs.global_batch_size = B * world * accum;
        rs.seed = cfg->seed;
        rs.model = &m;
        rs.dp = cfg->dp;
        rs.train_data = &loader;
        rs.save = cfg->save;
        rs.keep_last = 1;
        rs.hf_dtype = ops->param_dtype;
        rs.format = LJ_CKPT_FORMAT_TORCH_DIST;
        rs.async = cfg->async_save ? lj_ckpt_async_create() : NULL;
        rs.quiet = 0; /* its line per save: seconds, bytes, rate */
        lj_run_state_reserve(&rs);
    }
    double stall_sum = 0.0;
    lj_status save_status = LJ_OK;
    struct sigaction on_stop, old_int, old_term;
    memset(&on_stop, 0, sizeof on_stop);
    on_stop.sa_handler = bench_on_signal;
    g_bench_stop = 0;
    if (cfg->save) sigaction(SIGINT, &on_stop, &old_int), sigaction(SIGTERM, &on_stop, &old_term);
    int stopped_at = 0;
    for (int step = 1; step <= steps; step++) {
        if (step == cfg->warmup_iters + 1 && lj_offload_of(&m)) memset(lj_offload_of(&m)->sec, 0, sizeof lj_offload_of(&m)->sec);
        double dt = 0.0, loss = 0.0;
        if (accum > 1) { /* (lj_dp_train_step zeroes them itself) */
            const double t0 = lj_time_sec();
            lj_model_zero_grads(&m);
            dt += lj_time_sec() - t0;
        }
        for (int micro = 0; micro < accum; micro++) {
            /* the tokens are made outside the timed region */
            if (have_data) lj_loader_next(&loader, tokens);
            else
                for (int i = 0; i < B * (T + 1); i++)
                    tokens[i] = (int32_t)lj_rng_below(&rng, (uint64_t)cfg->model.vocab_size);
            if (lj_doc_mask_any(&cfg->doc_mask) && step > cfg->warmup_iters)
                doc_stats(&cfg->doc_mask, tokens, B, T, ds, res);
            const double t0 = lj_time_sec();
            lj_model_set_batch(&m, tokens);
            if (accum == 1) /* zero-grad + forward + backward + AdamW: one CUDA graph on a single GPU with graphs */
                lj_dp_train_step(cfg->dp, &m, seg, nseg, &ac, lj_adamw_lr_of(1e-4f), step, dloss);
            else /* as train's accumulation: forward + backward per micro-batch, then the optimizer step */
                lj_model_forward_backward(&m, dloss);
            if (accum > 1 && micro == accum - 1) lj_dp_optimizer_step(cfg->dp, &m, seg, nseg, &ac, lj_adamw_lr_of(1e-4f), step);
            ops->synchronize();
            dt += lj_time_sec() - t0;
            loss += lj_model_mean_loss(&m);
        }
        if (cfg->save && save_status == LJ_OK) {
            rs.iteration = step;
            rs.consumed_samples = (int64_t)step * B * world * accum;
            const double t0 = lj_time_sec();
            save_status = lj_run_state_poll(&rs); /* an earlier --async-save sealed once written */
            if (save_status == LJ_OK && step % cfg->save_interval == 0) {
                save_status = lj_run_state_save(&rs);
                const double held = lj_time_sec() - t0;
                if (step > cfg->warmup_iters) {
                    res->saves++;
                    stall_sum += held;
                    if (held > res->save_stall_max_s) res->save_stall_max_s = held;
                }
            }
            dt += lj_time_sec() - t0;
        }
        float sums[2] = {(float)(loss / accum), (float)(g_bench_stop != 0)};
        lj_dp_sum(cfg->dp, &m, sums, 2); /* every rank stops after the same step */
        const float loss_sum = sums[0];
        lj_bench_steps_record(&st, step, dt, (double)loss_sum / world, (double)B * T * accum / dt, "tokens");
        if (save_status != LJ_OK) break;
        if (sums[1] > 0.0f) {
            stopped_at = step;
            break;
        }
    }
    lj_bench_steps_finish(&st, &res->step_ms_median, &res->step_ms_p90);
    if (cfg->save) { /* the last --async-save written and sealed, outside the timed steps */
        if (save_status == LJ_OK) save_status = lj_run_state_finish(&rs);
        lj_ckpt_async_free(rs.async);
        res->save_stall_mean_s = res->saves ? stall_sum / res->saves : 0.0;
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        if (save_status == LJ_OK && stopped_at)
            save_status = lj_fail(LJ_ERR_INTERRUPTED,
                                  "stopped by a signal after step %d; the checkpoints in %s are complete "
                                  "(the latest: its last save)", stopped_at, cfg->save);
    }
    res->loss_first = st.loss_first;
    res->loss_last = st.loss_last;
    if (st.used_bytes > res->measured_bytes) res->measured_bytes = st.used_bytes;
    res->tokens_per_s = (double)B * T * world * accum * cfg->train_iters / st.timed_sec;
    res->tokens_per_s_per_device = res->tokens_per_s / world;
    res->tflops = res->tokens_per_s_per_device * res->flops_per_token / 1e12; /* per device */
    res->mfu = res->peak_tflops > 0 ? res->tflops / res->peak_tflops : 0.0;
    res->docs_per_sequence /= (double)cfg->train_iters * B * accum; /* doc_stats ran per micro-batch */
    res->attention_fraction /= (double)cfg->train_iters * B * accum;
    res->offloaded = lj_offload_of(&m) != NULL;
    for (int i = 0; res->offloaded && i < 3; i++) res->offload_ms[i] = lj_offload_of(&m)->sec[i] * 1e3 / cfg->train_iters;

    free(tokens);
    free(ds);
    free(seg);
    lj_plan_release(&plan, ops);
    lj_plan_free(&plan);
    lj_model_free(&m);
    if (have_data) lj_loader_free(&loader);
    return save_status;
}

void lj_bench_describe_stage(const lj_bench_config *cfg, char *buf, size_t len) {
    if (cfg->zero_stage_asked != cfg->dp->zero_stage)
        snprintf(buf, len, "ZeRO stage %d: one rank, nothing to shard", cfg->zero_stage_asked);
    else
        snprintf(buf, len, "ZeRO stage %d", cfg->dp->zero_stage);
}

/* PyTorch's reference row for a GPU run of this model, sequence length and world size, or NULL. */
static const lj_reference *reference_of(const lj_bench_config *cfg) {
    if (strcmp(cfg->ops->name, "cuda") != 0) return NULL;
    return lj_reference_find(cfg->model.name, cfg->seq_length, cfg->dp->world);
}

void lj_bench_print(const lj_bench_config *cfg, const lj_bench_result *r, FILE *f) {
    char b1[32], b2[32], stage[64];
    lj_bench_describe_stage(cfg, stage, sizeof stage);
    char gbs[96] = "";
    if (cfg->accumulation > 1)
        snprintf(gbs, sizeof gbs, ", global batch %d (%d accumulation steps)",
                 cfg->micro_batch_size * cfg->dp->world * cfg->accumulation, cfg->accumulation);
    fprintf(f, "ljperf benchmark: %s on %d x %s (%s), seq %d, micro-batch %d%s, %d timed step%s after %d "
               "warm-up%s\n",
            cfg->model.name, cfg->dp->world, cfg->ops->name, stage, cfg->seq_length,
            cfg->micro_batch_size, gbs, cfg->train_iters, cfg->train_iters == 1 ? "" : "s", cfg->warmup_iters,
            cfg->fused ? "" : " (unfused)");
    fprintf(f, "%-28s %s\n", "metric", "value");
    fprintf(f, "%-28s %.0f\n", "tokens/s", r->tokens_per_s);
    fprintf(f, "%-28s %.0f\n", "tokens/s per device", r->tokens_per_s_per_device);
    fprintf(f, "%-28s %.3f\n", "TFLOP/s per device", r->tflops);
    fprintf(f, "%-28s %.1f%%\n", "MFU", 100.0 * r->mfu);
    fprintf(f, "%-28s %.1f\n", "step time median (ms)", r->step_ms_median);
    fprintf(f, "%-28s %.1f\n", "step time p90 (ms)", r->step_ms_p90);
    fprintf(f, "%-28s %s\n", "peak memory measured", lj_format_bytes(r->measured_bytes, b1, sizeof b1));
    fprintf(f, "%-28s %s\n", "peak memory planned", lj_format_bytes(r->planned_bytes, b2, sizeof b2));
    if (cfg->dp->world > 1) fprintf(f, "(memory figures are rank 0's)\n");
    if (cfg->dp->world > 1 && cfg->dp->zero_stage >= 2)
        fprintf(f, "overlap_comm: %s\n", cfg->dp->overlap_comm ? "on (collectives overlapped with compute)"
                                                               : "off (the compute stream waits for each collective)");
    fprintf(f, "%-28s %.4f -> %.4f\n", "loss (first -> last step)", r->loss_first, r->loss_last);
    if (cfg->save)
        fprintf(f, "checkpoints (--save every %d step%s, %s): %d in the timed steps, each holding the steps %.3f s on "
                   "average, %.3f s at most (inside the step times above)\n",
                cfg->save_interval, cfg->save_interval == 1 ? "" : "s",
                cfg->async_save ? "--async-save: the copy to host memory; the write in the background" : "synchronous",
                r->saves, r->save_stall_mean_s, r->save_stall_max_s);
    if (r->offloaded)
        fprintf(f, "optimizer offload, ms of a step: gradients to the host + norm %.1f, host AdamW %.1f, "
                   "parameters to the device %.1f (not overlapped with the device's work)\n",
                r->offload_ms[0], r->offload_ms[1], r->offload_ms[2]);
    if (cfg->linear_recipe == LJ_LINEAR_RECIPE_FP8) {
        char what[200];
        lj_linear_fp8_describe(&cfg->fp8, what, sizeof what);
        fprintf(f, "precision: %s for the transformer blocks' linears; the MFU above keeps the bf16 dense peak "
                   "(989 TFLOP/s on H100/H200) as its convention; the TFLOP/s line is the achieved model rate\n",
                what);
    }
    if (lj_doc_mask_any(&cfg->doc_mask)) {
        fprintf(f, "document masking (end-of-document id %d):%s%s%s\n", cfg->doc_mask.eod_token,
                cfg->doc_mask.reset_position_ids ? " --reset-position-ids" : "",
                cfg->doc_mask.reset_attention_mask ? " --reset-attention-mask" : "",
                cfg->doc_mask.eod_mask_loss ? " --eod-mask-loss" : "");
        fprintf(f, "%-28s %.2f\n", "documents per sequence", r->docs_per_sequence);
        fprintf(f, "%-28s %.4f\n", "attention work vs causal", r->attention_fraction);
        fprintf(f, "(the FLOP convention below counts full causal attention with or without document masking)\n");
    }
    fprintf(f, "MFU convention: FLOPs/token = 6N + 12*L*d*s = %.3g (N = %.4g matmul parameters incl. lm_head); peak: %s\n",
            r->flops_per_token, (double)lj_config_num_matmul_params(&cfg->model), r->peak_source);
    if (strcmp(cfg->ops->name, "cpu") == 0)
        fprintf(f, "memory measured on the CPU is the process's peak resident set (VmHWM)\n");
    const lj_reference *ref = reference_of(cfg);
    if (ref) lj_reference_print(ref, r->tokens_per_s_per_device, (double)r->measured_bytes, cfg->micro_batch_size, f);
}

lj_status lj_bench_write_json(const lj_bench_config *cfg, const lj_bench_result *r, const char *path) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "engine", "ljperf");
    cJSON_AddStringToObject(o, "model", cfg->model.name);
    cJSON_AddStringToObject(o, "device", cfg->ops->name);
    cJSON_AddNumberToObject(o, "seq_length", cfg->seq_length);
    cJSON_AddNumberToObject(o, "micro_batch_size", cfg->micro_batch_size);
    const int accum = cfg->accumulation > 1 ? cfg->accumulation : 1;
    cJSON_AddNumberToObject(o, "global_batch_size", cfg->micro_batch_size * cfg->dp->world * accum);
    cJSON_AddNumberToObject(o, "accumulation_steps", accum);
    if (cfg->save) {
        cJSON_AddNumberToObject(o, "save_interval", cfg->save_interval);
        cJSON_AddBoolToObject(o, "async_save", cfg->async_save);
        cJSON_AddNumberToObject(o, "saves", r->saves);
        cJSON_AddNumberToObject(o, "save_stall_mean_s", r->save_stall_mean_s);
        cJSON_AddNumberToObject(o, "save_stall_max_s", r->save_stall_max_s);
    }
    cJSON_AddNumberToObject(o, "world_size", cfg->dp->world);
    cJSON_AddNumberToObject(o, "zero_stage", cfg->zero_stage_asked);
    cJSON_AddNumberToObject(o, "zero_stage_run", cfg->dp->zero_stage); /* 0 for stage 3 on one rank */
    cJSON_AddBoolToObject(o, "overlap_comm", cfg->dp->overlap_comm);
    if (cfg->linear_recipe == LJ_LINEAR_RECIPE_FP8) {
        char what[200];
        lj_linear_fp8_describe(&cfg->fp8, what, sizeof what);
        cJSON_AddStringToObject(o, "precision", what);
    }
    cJSON_AddStringToObject(o, "exp_avg_dtype", cfg->exp_avg_dtype == LJ_DTYPE_BF16 ? "bf16" : "fp32");
    cJSON_AddStringToObject(o, "exp_avg_sq_dtype", cfg->exp_avg_sq_dtype == LJ_DTYPE_BF16 ? "bf16" : "fp32");
    cJSON_AddBoolToObject(o, "fused", cfg->fused);
    cJSON_AddBoolToObject(o, "deterministic", cfg->ops->config.deterministic);
    if (lj_doc_mask_any(&cfg->doc_mask)) {
        cJSON *dj = cJSON_AddObjectToObject(o, "doc_mask");
        cJSON_AddBoolToObject(dj, "reset_position_ids", cfg->doc_mask.reset_position_ids);
        cJSON_AddBoolToObject(dj, "reset_attention_mask", cfg->doc_mask.reset_attention_mask);
        cJSON_AddBoolToObject(dj, "eod_mask_loss", cfg->doc_mask.eod_mask_loss);
        cJSON_AddNumberToObject(dj, "eod_token", cfg->doc_mask.eod_token);
        cJSON_AddNumberToObject(dj, "docs_per_sequence", r->docs_per_sequence);
        cJSON_AddNumberToObject(dj, "attention_fraction", r->attention_fraction);
    }
    cJSON_AddNumberToObject(o, "tokens_per_s", r->tokens_per_s);
    cJSON_AddNumberToObject(o, "tokens_per_s_per_gpu", r->tokens_per_s_per_device);
    cJSON_AddNumberToObject(o, "tflops", r->tflops);
    cJSON_AddNumberToObject(o, "mfu", r->mfu);
    cJSON_AddNumberToObject(o, "peak_tflops", r->peak_tflops);
    cJSON_AddNumberToObject(o, "step_ms_median", r->step_ms_median);
    cJSON_AddNumberToObject(o, "step_ms_p90", r->step_ms_p90);
    cJSON_AddNumberToObject(o, "peak_mem_gib", (double)r->measured_bytes / (1024.0 * 1024.0 * 1024.0));
    cJSON_AddNumberToObject(o, "planned_mem_gib", (double)r->planned_bytes / (1024.0 * 1024.0 * 1024.0));
    if (r->offloaded) {
        cJSON_AddNumberToObject(o, "offload_grads_to_host_ms", r->offload_ms[0]);
        cJSON_AddNumberToObject(o, "offload_host_adamw_ms", r->offload_ms[1]);
        cJSON_AddNumberToObject(o, "offload_params_to_device_ms", r->offload_ms[2]);
    }
    cJSON_AddNumberToObject(o, "flops_per_token", r->flops_per_token);
    cJSON_AddNumberToObject(o, "loss_first", r->loss_first);
    cJSON_AddNumberToObject(o, "loss_last", r->loss_last);
    const lj_reference *ref = reference_of(cfg);
    if (ref) {
        cJSON *rj = cJSON_AddObjectToObject(o, "reference");
        cJSON_AddStringToObject(rj, "pytorch_run", ref->pytorch_run);
        cJSON_AddNumberToObject(rj, "micro_batch_size", ref->micro_batch_size);
        cJSON_AddNumberToObject(rj, "tokens_per_s_per_gpu", ref->tokens_per_s);
        cJSON_AddNumberToObject(rj, "peak_mem_gib", ref->peak_gib);
        cJSON_AddNumberToObject(rj, "goal_tokens_per_s_per_gpu", ref->goal_tokens_per_s);
        cJSON_AddBoolToObject(rj, "goal_met", lj_reference_speed_met(ref, r->tokens_per_s_per_device) &&
                                                  lj_reference_memory_met(ref, (double)r->measured_bytes));
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    lj_status s = lj_file_write_atomic(path, text, strlen(text));
    free(text);
    if (s != LJ_OK) lj_error_prefix("--json");
    return s;
}

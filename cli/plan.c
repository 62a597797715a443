/* plan.c: `ljperf plan`: the static memory plan of a training run broken down by category,
 * its peak, the recompute (and micro-batch) recommendation with the rejected alternatives,
 * or the refusal when nothing fits; the same as JSON with --json. Runs without a GPU. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/megatron.h"
#include "plan/planner.h"
#include "parallel/parallel.h"
#include "train/ops_config.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ljperf plan --model NAME [flags]\n"
            "\n"
            "  --model NAME|config.json     preset (%s), deepspeed/<preset>, or an HF config\n"
            "  --seq-length T               tokens per sample (default 4096 on cuda, 256 on the CPU)\n"
            "  --micro-batch-size N|auto    samples per micro-batch (default 1); auto: the fastest that fits\n"
            "  --global-batch-size N        N / (micro-batch x ranks) micro-batches per optimizer step: the\n"
            "                               step time shares the optimizer step among them (default: one)\n"
            "  --device cuda|cpu|auto       the target (default cuda: a GPU run, planned without a GPU;\n"
            "                               auto: the GPU if there is a usable one, else the CPU, as train)\n"
            "  --grad-dtype bf16|fp32       gradient dtype of a CUDA run (default bf16)\n"
            "  --device-memory BYTES        e.g. 80GiB (default: the GPU's total when one is present, else one\n"
            "                               H200 as the CUDA runtime sees it, 139.80 GiB; on the CPU the host RAM)\n"
            "  --margin BYTES|P%%            kept free below the device memory (default 1GiB)\n"
            "  --recompute auto|none|selective|full   per-layer recompute (default auto, or none when\n"
            "                               CHECKPOINT_OPTIMIZATION is set to false/0/no/off)\n"
            "  --recompute-granularity full|selective, --recompute-method uniform|block,\n"
            "  --recompute-num-layers N     Megatron-LM's manual recompute (block: the first N layers)\n"
            "  --no-fusion                  plan the unfused kernel twins\n"
            "  --deterministic-mode         plan train's --deterministic-mode (cuDNN's deterministic attention\n"
            "                               backward and its workspace)\n"
            "  --context-overhead BYTES     CUDA context overhead (default: $LJ_CUDA_CONTEXT_OVERHEAD, the\n"
            "                               measured value cached for the GPU, else 544MiB, measured on an H200)\n"
            "  --gpu-name NAME              device whose cached throughputs to use (default \"NVIDIA H200\")\n"
            "  --matmul-tflops X --attention-tflops X --memory-gbs X   override the cost model's throughputs\n"
            "  --buffers                    also list every buffer of the plan\n"
            "  --json FILE                  the same report as JSON (- : on standard output, instead of the text)\n"
            "  --world-size N --zero-stage S  the plan of one rank of N data-parallel ranks under ZeRO stage\n"
            "                                 S (0-3; default 0, 3 for deepspeed/ names; stage 3 over N = 1\n"
            "                                 shards nothing)\n"
            "  --use-distributed-optimizer  Megatron-LM's sharded optimizer: ZeRO stage 1 unless --zero-stage is given\n"
            "  --offload-optimizer cpu|none   ZeRO stage >= 1: master weights and AdamW moments in host\n"
            "                                 memory, out of the device plan (default none)\n"
            "  --host-memory BYTES          the host memory an offloaded run may use (default: MemAvailable\n"
            "                               of /proc/meminfo), less 10%%\n"
            "\n"
            "CHECKPOINT_OPTIMIZATION=true|1|yes|on turns automatic recompute on; false|0|no|off|\"\" off.\n"
            "The cost model's throughputs come from <cache>/planner/<device>.json when measured, else\n"
            "from defaults (GPU) or a quick measurement (CPU). Exit status 1 when nothing fits.\n",
            lj_config_preset_names());
    lj_cli_fp8_usage(f);
    lj_cli_moments_usage(f);
}

/* --context-overhead: 0 to 1 TiB (the row, and how make_target reads the checked text) */
#define CONTEXT_OVERHEAD_ROW(where) \
    {.name = "--context-overhead", .kind = LJ_FLAG_SIZE, .dest = (where), .ival = LJ_FLAG_ZERO_OK, .max = 1099511627776.0}

typedef struct {
    const char *model, *device, *json, *recompute, *granularity, *method, *gpu_name;
    const char *device_memory, *margin, *context, *grad_dtype, *host_memory;
    int seq, mb, num_layers, world, zero, fused, buffers, offload, deterministic, gbs;
    double mm_tflops, attn_tflops, mem_gbs;
    lj_cli_fp8 fp8;
    lj_cli_moments moments;
} plan_args;

static lj_status parse(int argc, char **argv, plan_args *a, int *help) {
    memset(a, 0, sizeof *a);
    a->device = "cuda";
    a->mb = 1;
    a->num_layers = -1;
    a->world = 1;
    a->fused = 1;
    lj_cli_fp8_init(&a->fp8);
    lj_cli_moments_init(&a->moments);
    int zero_given = 0, seq_given = 0, dist_opt = 0;
    const char *mb = NULL;
    const lj_flag own[] = {
        {.name = "--model", .kind = LJ_FLAG_STR, .dest = &a->model},
        {.name = "--seq-length", .kind = LJ_FLAG_INT, .dest = &a->seq, .given = &seq_given, .min = 1},
        {.name = "--micro-batch-size", .kind = LJ_FLAG_STR, .dest = &mb},
        {.name = "--global-batch-size", .kind = LJ_FLAG_INT, .dest = &a->gbs, .min = 1},
        {.name = "--device", .kind = LJ_FLAG_STR, .dest = &a->device},
        {.name = "--grad-dtype", .kind = LJ_FLAG_STR, .dest = &a->grad_dtype},
        LJ_CLI_DEVICE_MEMORY_ROW(&a->device_memory),
        LJ_CLI_MARGIN_ROW(&a->margin),
        LJ_CLI_HOST_MEMORY_ROW(&a->host_memory),
        {.name = "--recompute", .kind = LJ_FLAG_STR, .dest = &a->recompute},
        {.name = "--recompute-granularity", .kind = LJ_FLAG_STR, .dest = &a->granularity},
        {.name = "--recompute-method", .kind = LJ_FLAG_STR, .dest = &a->method},
        {.name = "--recompute-num-layers", .kind = LJ_FLAG_INT, .dest = &a->num_layers},
        {.name = "--no-fusion", .kind = LJ_FLAG_SWITCH, .dest = &a->fused},
        {.name = "--deterministic-mode", .kind = LJ_FLAG_SWITCH, .dest = &a->deterministic, .ival = 1},
        CONTEXT_OVERHEAD_ROW(&a->context),
        {.name = "--gpu-name", .kind = LJ_FLAG_STR, .dest = &a->gpu_name},
        {.name = "--matmul-tflops", .kind = LJ_FLAG_RATE, .dest = &a->mm_tflops, .help = "TFLOP/s", .max = 1e6},
        {.name = "--attention-tflops", .kind = LJ_FLAG_RATE, .dest = &a->attn_tflops, .help = "TFLOP/s", .max = 1e6},
        {.name = "--memory-gbs", .kind = LJ_FLAG_RATE, .dest = &a->mem_gbs, .help = "GB/s", .max = 1e6},
        {.name = "--buffers", .kind = LJ_FLAG_SWITCH, .dest = &a->buffers, .ival = 1},
        {.name = "--json", .kind = LJ_FLAG_STR, .dest = &a->json},
        {.name = "--world-size", .kind = LJ_FLAG_INT, .dest = &a->world, .min = 1},
        {.name = "--zero-stage", .kind = LJ_FLAG_INT, .dest = &a->zero, .given = &zero_given, .min = 0, .max = 3},
        {.name = "--use-distributed-optimizer", .kind = LJ_FLAG_SWITCH, .dest = &dist_opt, .ival = 1},
        {.name = "--offload-optimizer", .kind = LJ_FLAG_FUNC, .dest = &a->offload, .fn = lj_cli_offload},
    };
    lj_flag rows[sizeof own / sizeof own[0] + LJ_CLI_FP8_ROWS + LJ_CLI_MOMENTS_ROWS];
    memcpy(rows, own, sizeof own);
    int n = (int)(sizeof own / sizeof own[0]);
    n += lj_cli_fp8_rows(&a->fp8, rows + n, LJ_CLI_FP8_ROWS);
    n += lj_cli_moments_rows(&a->moments, rows + n, LJ_CLI_MOMENTS_ROWS);
    lj_flags_result res;
    LJ_TRY(lj_flags_parse("plan", rows, n, argc, argv, 0, &res));
    if (res.help) {
        *help = 1;
        return LJ_OK;
    }
    if (seq_given && a->seq <= 0) return lj_fail(LJ_ERR_ARG, "--seq-length %d: must be positive", a->seq);
    if (mb && !strcmp(mb, "auto")) a->mb = 0;
    else if (mb) {
        LJ_TRY(lj_flags_parse_int("--micro-batch-size", mb, &a->mb));
        if (a->mb <= 0) return lj_fail(LJ_ERR_ARG, "--micro-batch-size %d: must be positive or auto", a->mb);
    }
    if (!a->model) return lj_fail(LJ_ERR_ARG, "--model is required (e.g. --model llama3-8b)");
    if (a->world < 1) return lj_fail(LJ_ERR_ARG, "--world-size %d: must be at least 1", a->world);
    if (a->gbs > 0 && a->mb == 0)
        return lj_fail(LJ_ERR_ARG, "--global-batch-size %d needs an explicit --micro-batch-size (not auto)", a->gbs);
    if (a->gbs > 0 && a->gbs % ((int64_t)a->mb * a->world) != 0)
        return lj_fail(LJ_ERR_ARG, "--global-batch-size %d is not a multiple of --micro-batch-size %d x --world-size %d = "
                                   "%lld: give a multiple of it", a->gbs, a->mb, a->world, (long long)a->mb * a->world);
    /* deepspeed/ names: ZeRO stage 3 by default, as `ljperf benchmark` runs them */
    if (dist_opt && zero_given && a->zero == 0)
        return lj_fail(LJ_ERR_ARG, "--use-distributed-optimizer (ZeRO-1) and --zero-stage 0 contradict each other: "
                                   "remove one");
    if (!zero_given) a->zero = dist_opt ? 1 : a->model && strncmp(a->model, "deepspeed/", 10) == 0 ? 3 : 0;
    if (a->zero < 0 || a->zero > 3) return lj_fail(LJ_ERR_ARG, "--zero-stage %d: must be 0, 1, 2 or 3", a->zero);
    if (a->offload && a->zero == 0)
        return lj_fail(LJ_ERR_ARG, "--offload-optimizer cpu: optimizer offload needs ZeRO stage 1, 2 or 3 (DeepSpeed's "
                                   "rule); add --zero-stage 1");
    return LJ_OK;
}

/* The backend description and the target for --device. */
static lj_status make_target(const plan_args *a, lj_planner_target *t) {
    const lj_ops *ops = NULL;
    lj_ops_config oc;
    lj_ops_config_from_env(a->deterministic, &oc);
    if (!strcmp(a->device, "cpu")) {
        ops = lj_ops_cpu_open(&oc);
    } else if (!strcmp(a->device, "auto") && !(ops = lj_ops_cuda_open(&oc))) {
        /* what `train --device auto` would run on: the GPU if there is a usable one, else the CPU */
        lj_cli_note_no_gpu("planning a CPU run");
        ops = lj_ops_cpu_open(&oc);
    } else if (ops) {
        /* --device auto with a usable GPU */
    } else if (!strcmp(a->device, "cuda")) {
        ops = lj_ops_cuda_open(&oc); /* a real GPU gives its memory size */
        if (!ops) ops = lj_ops_cuda_describe(&oc);
        if (!ops)
            return lj_fail(LJ_ERR_UNSUPPORTED,
                           "--device cuda: this ljperf was built without CUDA, so it cannot describe the GPU "
                           "backend's buffers; plan a CPU run with --device cpu");
    } else {
        return lj_fail(LJ_ERR_ARG, "--device: '%s' is not one of cuda, cpu, auto", a->device);
    }
    LJ_TRY(lj_cli_grad_dtype("--grad-dtype", a->grad_dtype, &ops));
    char cache[LJ_PATH_MAX];
    lj_cache_dir(cache, sizeof cache);
    LJ_TRY(lj_planner_target_init(t, ops, cache, a->gpu_name));
    t->zero_stage = a->zero < 3 || a->world > 1 ? a->zero : 0; /* stage 3 on one GPU shards nothing */
    t->dp_world_size = a->world;
    /* Megatron-LM's rule: global batch = micro-batch x data-parallel ranks x accumulation steps */
    t->grad_accum_steps = a->gbs > 0 ? a->gbs / (a->mb * a->world) : 1;
    t->fused = a->fused;
    t->offload_optimizer = a->offload && strcmp(ops->name, "cpu") != 0; /* the cpu backend: host memory already */
    uint64_t v = 0;
    LJ_TRY(lj_cli_memory_budget(t, a->device_memory, a->margin));
    if (a->context) {
        const lj_flag row = CONTEXT_OVERHEAD_ROW(NULL);
        LJ_TRY(lj_flags_parse_size(&row, a->context, &v, NULL));
        t->context_bytes = strcmp(ops->name, "cpu") ? (size_t)v : 0;
        t->context_source = "--context-overhead";
    }
    if (a->mm_tflops > 0 || a->attn_tflops > 0 || a->mem_gbs > 0) {
        if (a->mm_tflops > 0) t->rates.matmul_flops = a->mm_tflops * 1e12;
        if (a->mm_tflops > 0) t->rates.fp8_matmul_flops = LJ_FP8_GEMM_SPEEDUP * t->rates.matmul_flops;
        if (a->attn_tflops > 0) t->rates.attention_flops = a->attn_tflops * 1e12;
        if (a->attn_tflops > 0) t->rates.attention_seq0 = 0; /* the rate given, at every T */
        if (a->mem_gbs > 0) t->rates.memory_bandwidth = a->mem_gbs * 1e9;
        snprintf(t->rates.source, sizeof t->rates.source,
                 "given on the command line: GEMM %.4g TFLOP/s, attention %.4g TFLOP/s, %.4g GB/s",
                 t->rates.matmul_flops / 1e12, t->rates.attention_flops / 1e12, t->rates.memory_bandwidth / 1e9);
    }
    return LJ_OK;
}

/* The recompute mode: 0 = auto (search), 1 = the fixed per-layer policy in `policy`. */
static lj_status recompute_mode(const plan_args *a, int L, int *fixed, uint8_t policy[LJ_MAX_LAYERS],
                                const char **mode) {
    *fixed = 0;
    *mode = "auto";
    memset(policy, 0, LJ_MAX_LAYERS);
    if (a->granularity || a->method || a->num_layers >= 0) {
        if (a->recompute && strcmp(a->recompute, "auto") == 0)
            return lj_fail(LJ_ERR_ARG, "--recompute auto and Megatron's manual --recompute-granularity, "
                                       "--recompute-method, --recompute-num-layers exclude each other: give one");
        LJ_TRY(lj_planner_megatron_recompute(a->granularity, a->method, a->num_layers, L, policy));
        *fixed = 1;
        *mode = "manual (Megatron-LM flags)";
        return LJ_OK;
    }
    const char *r = a->recompute;
    if (!r) {
        int on = 0;
        LJ_TRY(lj_planner_env_enabled(&on));
        const char *env = getenv("CHECKPOINT_OPTIMIZATION");
        r = (env && !on) ? "none" : "auto";
        if (env && !on) *mode = "none (CHECKPOINT_OPTIMIZATION is off)";
    }
    if (!strcmp(r, "auto")) return LJ_OK;
    *fixed = 1;
    if (!strcmp(r, "none")) memset(policy, LJ_RECOMPUTE_NONE, LJ_MAX_LAYERS);
    else if (!strcmp(r, "selective")) memset(policy, LJ_RECOMPUTE_SELECTIVE, (size_t)L);
    else if (!strcmp(r, "full")) memset(policy, LJ_RECOMPUTE_FULL, (size_t)L);
    else return lj_fail(LJ_ERR_ARG, "--recompute: '%s' is not one of auto, none, selective, full", r);
    if (a->recompute) *mode = a->recompute;
    return LJ_OK;
}

static double pct(size_t part, size_t whole) { return whole ? 100.0 * (double)part / (double)whole : 0.0; }

static void print_row(const char *label, size_t bytes, size_t peak) {
    char b[32];
    printf("  %-34s %12s %6.1f%%\n", label, lj_format_bytes(bytes, b, sizeof b), pct(bytes, peak));
}

static void print_report(const lj_model_config *cfg, const plan_args *a, const lj_planner_target *t,
                         const lj_planner_result *r, const lj_plan *plan, const lj_mem_breakdown *bd, int seq,
                         const char *mode, int fixed, lj_status status) {
    char b1[32], b2[32], b3[32], d[64];
    const lj_ops *ops = t->ops;
    const int64_t P = lj_config_num_params(cfg);
    const lj_planner_candidate *c = &r->chosen;
    printf("ljperf plan: %s (%.3f B parameters, %d layers), seq %d, device %s (params %s, activations %s, "
           "gradients %s, %s)\n",
           cfg->name, (double)P / 1e9, cfg->num_hidden_layers, seq, ops->name, lj_dtype_name(ops->param_dtype),
           lj_dtype_name(ops->act_dtype), lj_dtype_name(ops->grad_dtype),
           t->fused ? (ops->config.deterministic && strcmp(ops->name, "cpu") ? "fused kernels, deterministic attention" : "fused kernels")
                    : (ops->config.deterministic && strcmp(ops->name, "cpu") ? "unfused, deterministic attention" : "unfused"));
    if (t->grad_accum_steps > 1)
        printf("global batch %d: %d micro-batches per optimizer step (gradient accumulation); the step times below "
               "are per micro-batch, each with 1/%d of the optimizer step\n",
               a->gbs, t->grad_accum_steps, t->grad_accum_steps);
    printf("device memory %s (%s), margin %s -> usable %s\n", lj_format_bytes(t->device_memory_bytes, b1, sizeof b1),
           t->memory_source, lj_format_bytes(t->margin_bytes, b2, sizeof b2),
           lj_format_bytes(lj_planner_usable_bytes(t), b3, sizeof b3));
    size_t free_b = 0, total_b = 0;
    if (ops->memory_info && strcmp(ops->name, "cpu") && ops->memory_info(&free_b, &total_b) == LJ_OK)
        printf("GPU memory in use now: %s (this process's context and cuBLASLt workspace, before any kernel "
               "ran, plus other processes)\n",
               lj_format_bytes(total_b - free_b, b1, sizeof b1));
    printf("recompute: %s; micro-batch: %s\n", mode, a->mb ? "as given" : "auto");
    if (a->world > 1)
        printf("per rank of %d data-parallel ranks, ZeRO stage %d%s\n", a->world, a->zero,
               a->zero == 0   ? " (replicated)"
               : a->zero == 1 ? " (AdamW state and master weights sharded)"
               : a->zero == 2 ? " (AdamW state, master weights and gradients sharded: each rank holds its "
                                "gradient shard and gradient slots for the layers in backward, reduced bucket by "
                                "bucket to the shard owners; parameters replicated)"
                              : " (parameters, gradients and AdamW state sharded; gather slots for the layers computing "
                                "and prefetched, gradient slots reduce-scattered after each layer's backward)");
    else if (a->zero > 0) printf("ZeRO stage %d over 1 GPU shards nothing: the plan is that of one GPU\n", a->zero);
    if (t->offload_optimizer) {
        /* the host side of the plan of rank 0 (every shard has the same size) */
        const lj_model_setup setup = lj_planner_setup(cfg, t, seq);
        lj_model m;
        lj_model_build(&m, NULL, &setup, NULL);
        lj_plan_print_offload(&m, stdout);
        lj_model_free(&m);
    } else if (a->offload) {
        printf("optimizer offload: the cpu backend keeps the optimizer state in host memory already; nothing moves\n");
    }
    printf("\nmemory breakdown (recompute %s, micro-batch %d%s):\n", lj_planner_candidate_describe(c, d, sizeof d),
           c->micro_batch_size, status == LJ_OK ? "" : ", does not fit");
    printf("  %-34s %12s %7s\n", "category", "bytes", "%");
    const size_t peak = bd->peak_bytes;
    for (int k = 0; k < LJ_MEM_COUNT; k++) {
        if ((k == LJ_MEM_OTHER || k == LJ_MEM_COMM || k == LJ_MEM_FP8) && bd->bytes[k] == 0) continue;
        print_row(lj_mem_category_name((lj_mem_category)k), bd->bytes[k], peak);
        if (k == LJ_MEM_ACTIVATIONS) {
            char label[64];
            snprintf(label, sizeof label, "  residual stream (%d x [N, C])", cfg->num_hidden_layers + 1);
            print_row(label, bd->residual_bytes, peak);
            static const char *pol[3] = {"none", "selective", "full"};
            for (int p = 0; p < 3; p++) {
                snprintf(label, sizeof label, "  %d layer%s %s", bd->layers[p], bd->layers[p] == 1 ? "" : "s", pol[p]);
                print_row(label, bd->layer_bytes[p], peak);
            }
            print_row("  inputs, RoPE tables, final norm", bd->other_activation_bytes, peak);
        }
    }
    printf("  %-34s %12s %6.1f%%\n", "peak", lj_format_bytes(peak, b1, sizeof b1), 100.0);
    const size_t states = bd->bytes[LJ_MEM_PARAMETERS] + bd->bytes[LJ_MEM_MASTER] + bd->bytes[LJ_MEM_GRADIENTS] +
                          bd->bytes[LJ_MEM_OPTIMIZER];
    printf("model states: %s = %.1f B/param over %.3f B parameters; plan %s + cuBLASLt %s + context %s (%s)\n",
           lj_format_bytes(states, b1, sizeof b1), (double)states / (double)P, (double)P / 1e9,
           lj_format_bytes(bd->plan_bytes, b2, sizeof b2),
           lj_format_bytes(t->library_workspace_bytes, b3, sizeof b3),
           lj_format_bytes(t->context_bytes, d, sizeof d), t->context_source);
    if (bd->bytes[LJ_MEM_COMM])
        printf("NCCL buffers per rank: %s (%s)\n", lj_format_bytes(bd->bytes[LJ_MEM_COMM], b1, sizeof b1),
               t->comm_source);
    if (a->buffers) {
        printf("\nbuffers (%d):\n", plan->count);
        for (int i = 0; i < plan->count; i++)
            printf("  %-28s %-16s %12s\n", plan->buffers[i].name, lj_arena_name(plan->buffers[i].arena),
                   lj_format_bytes(plan->buffers[i].bytes, b1, sizeof b1));
    }
    if (status != LJ_OK) return; /* the refusal and what would make it fit go to stderr (lj_cli_plan) */
    printf("\n%s: %s\n", fixed ? "evaluation" : "recommendation", r->explanation);
    printf("predicted step %.1f ms: GEMM %.1f ms + attention %.1f ms + element-wise/optimizer %.1f ms "
           "(recompute %.1f ms) = %.0f tokens/s\n",
           c->cost.step_s * 1e3, c->cost.matmul_s * 1e3, c->cost.attention_s * 1e3, c->cost.memory_s * 1e3,
           c->cost.recompute_s * 1e3, c->cost.tokens_per_s);
    printf("cost model: %s\n", t->rates.source);
    printf("\nalternatives (%d plans built):\n", r->plans_built);
    printf("  %-11s %-34s %12s %10s %10s  %s\n", "micro-batch", "recompute", "peak", "step ms", "tokens/s", "verdict");
    printf("  %-11d %-34s %12s %10.1f %10.0f  %s\n", c->micro_batch_size, lj_planner_candidate_describe(c, d, sizeof d),
           lj_format_bytes(c->peak_bytes, b1, sizeof b1), c->cost.step_s * 1e3, c->cost.tokens_per_s, fixed ? "given" : "chosen");
    for (int i = 0; i < r->num_alternatives; i++) {
        const lj_planner_candidate *x = &r->alternatives[i];
        char verdict[64];
        const double rel = 100.0 * (x->cost.tokens_per_s / c->cost.tokens_per_s - 1.0);
        if (!x->fits) snprintf(verdict, sizeof verdict, "does not fit");
        else snprintf(verdict, sizeof verdict, "fits, %.1f%% %s", rel > 0 ? rel : -rel, rel > 0 ? "faster" : "slower");
        printf("  %-11d %-34s %12s %10.1f %10.0f  %s\n", x->micro_batch_size,
               lj_planner_candidate_describe(x, d, sizeof d), lj_format_bytes(x->peak_bytes, b1, sizeof b1),
               x->cost.step_s * 1e3, x->cost.tokens_per_s, verdict);
    }
}

static cJSON *candidate_json(const lj_planner_candidate *c, const char *verdict) {
    char d[64];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "micro_batch_size", c->micro_batch_size);
    cJSON_AddStringToObject(o, "recompute", lj_planner_candidate_describe(c, d, sizeof d));
    cJSON_AddNumberToObject(o, "layers_full", c->num_full);
    cJSON_AddNumberToObject(o, "layers_selective", c->num_selective);
    cJSON_AddNumberToObject(o, "layers_none", c->num_none);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)c->peak_bytes);
    cJSON_AddBoolToObject(o, "fits", c->fits);
    cJSON_AddNumberToObject(o, "step_ms", c->cost.step_s * 1e3);
    cJSON_AddNumberToObject(o, "tokens_per_s", c->cost.tokens_per_s);
    cJSON_AddNumberToObject(o, "matmul_ms", c->cost.matmul_s * 1e3);
    cJSON_AddNumberToObject(o, "attention_ms", c->cost.attention_s * 1e3);
    cJSON_AddNumberToObject(o, "memory_ms", c->cost.memory_s * 1e3);
    cJSON_AddNumberToObject(o, "recompute_ms", c->cost.recompute_s * 1e3);
    if (verdict) cJSON_AddStringToObject(o, "verdict", verdict);
    if (c->label) cJSON_AddStringToObject(o, "label", c->label);
    return o;
}

static lj_status write_json(const char *path, const lj_model_config *cfg, const plan_args *a,
                            const lj_planner_target *t, const lj_planner_result *r, const lj_mem_breakdown *bd,
                            int seq, const char *mode, lj_status status) {
    const lj_ops *ops = t->ops;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", cfg->name);
    cJSON_AddNumberToObject(o, "parameters", (double)lj_config_num_params(cfg));
    cJSON_AddNumberToObject(o, "layers", cfg->num_hidden_layers);
    cJSON_AddNumberToObject(o, "seq_length", seq);
    cJSON_AddNumberToObject(o, "accumulation_steps", t->grad_accum_steps);
    cJSON_AddStringToObject(o, "micro_batch_size_mode", a->mb ? "given" : "auto");
    cJSON_AddStringToObject(o, "recompute_mode", mode);
    cJSON_AddStringToObject(o, "device", ops->name);
    cJSON_AddStringToObject(o, "param_dtype", lj_dtype_name(ops->param_dtype));
    cJSON_AddStringToObject(o, "act_dtype", lj_dtype_name(ops->act_dtype));
    cJSON_AddStringToObject(o, "grad_dtype", lj_dtype_name(ops->grad_dtype));
    cJSON_AddBoolToObject(o, "fused", t->fused);
    cJSON_AddBoolToObject(o, "deterministic", ops->config.deterministic);
    cJSON_AddNumberToObject(o, "device_memory_bytes", (double)t->device_memory_bytes);
    cJSON_AddStringToObject(o, "device_memory_source", t->memory_source);
    cJSON_AddNumberToObject(o, "margin_bytes", (double)t->margin_bytes);
    cJSON_AddNumberToObject(o, "usable_bytes", (double)lj_planner_usable_bytes(t));
    cJSON_AddStringToObject(o, "context_source", t->context_source);
    cJSON_AddBoolToObject(o, "fits", status == LJ_OK);
    cJSON *chosen = candidate_json(&r->chosen, status == LJ_OK ? "chosen" : "smallest plan, does not fit");
    cJSON_AddItemToObject(o, status == LJ_OK ? "chosen" : "smallest", chosen);
    cJSON *br = cJSON_AddArrayToObject(o, "breakdown");
    for (int k = 0; k < LJ_MEM_COUNT; k++) {
        if (k == LJ_MEM_FP8 && bd->bytes[k] == 0) continue;
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "category", lj_mem_category_name((lj_mem_category)k));
        cJSON_AddNumberToObject(row, "bytes", (double)bd->bytes[k]);
        cJSON_AddNumberToObject(row, "percent", pct(bd->bytes[k], bd->peak_bytes));
        cJSON_AddItemToArray(br, row);
    }
    cJSON *act = cJSON_AddObjectToObject(o, "saved_activations");
    cJSON_AddNumberToObject(act, "residual_stream_bytes", (double)bd->residual_bytes);
    static const char *pol[3] = {"none", "selective", "full"};
    for (int p = 0; p < 3; p++) {
        cJSON *x = cJSON_AddObjectToObject(act, pol[p]);
        cJSON_AddNumberToObject(x, "layers", bd->layers[p]);
        cJSON_AddNumberToObject(x, "bytes", (double)bd->layer_bytes[p]);
    }
    cJSON_AddNumberToObject(act, "inputs_rope_final_norm_bytes", (double)bd->other_activation_bytes);
    cJSON_AddNumberToObject(o, "plan_bytes", (double)bd->plan_bytes);
    cJSON_AddNumberToObject(o, "library_workspace_bytes", (double)t->library_workspace_bytes);
    cJSON_AddNumberToObject(o, "context_bytes", (double)t->context_bytes);
    cJSON_AddNumberToObject(o, "nccl_bytes", (double)bd->bytes[LJ_MEM_COMM]);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)bd->peak_bytes);
    cJSON *rates = cJSON_AddObjectToObject(o, "cost_model");
    cJSON_AddStringToObject(rates, "device", t->rates.device);
    cJSON_AddNumberToObject(rates, "matmul_tflops", t->rates.matmul_flops / 1e12);
    cJSON_AddNumberToObject(rates, "attention_tflops", t->rates.attention_flops / 1e12);
    cJSON_AddNumberToObject(rates, "memory_bandwidth_gbs", t->rates.memory_bandwidth / 1e9);
    cJSON_AddStringToObject(rates, "source", t->rates.source);
    cJSON *alts = cJSON_AddArrayToObject(o, "alternatives");
    for (int i = 0; i < r->num_alternatives; i++)
        cJSON_AddItemToArray(alts, candidate_json(&r->alternatives[i], r->alternatives[i].fits ? "fits, slower" : "does not fit"));
    cJSON_AddNumberToObject(o, "plans_built", r->plans_built);
    cJSON_AddStringToObject(o, "explanation", r->explanation);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    lj_status s = LJ_OK;
    if (strcmp(path, "-") == 0) printf("%s\n", text); /* --json -: standard output */
    else s = lj_file_write_atomic(path, text, strlen(text));
    free(text);
    if (s != LJ_OK) lj_error_prefix("--json");
    return s;
}

int lj_cli_plan(int argc, char **argv) {
    if (lj_cli_model_is_vl(argc, argv)) return lj_cli_plan_vl(argc, argv); /* cli/plan_vl.c */
    plan_args a;
    int help = 0;
    if (parse(argc, argv, &a, &help) != LJ_OK) return lj_cli_error("plan");
    if (help) {
        usage(stdout);
        return 0;
    }
    lj_model_config cfg;
    const char *name = strncmp(a.model, "deepspeed/", 10) == 0 ? a.model + 10 : a.model;
    if (lj_cli_model(name, &cfg) != LJ_OK) return lj_cli_error("plan");
    lj_planner_target t;
    if (make_target(&a, &t) != LJ_OK) return lj_cli_error("plan");
    if (lj_cli_fp8_resolve(&a.fp8, t.ops, &cfg, &t.linear_recipe, &t.fp8) != LJ_OK) return lj_cli_error("plan");
    if (lj_cli_megatron_fp8_param_gather(a.fp8.param_gather, t.linear_recipe == LJ_LINEAR_RECIPE_FP8 ? &t.fp8 : NULL,
                                         &cfg, a.zero, a.world, t.offload_optimizer, t.ops->name, 1) != LJ_OK)
        return lj_cli_error("plan");
    if (lj_cli_moments_resolve(&a.moments, a.zero, a.world, a.offload ? "--offload-optimizer cpu" : NULL, 1, &t.exp_avg_dtype, &t.exp_avg_sq_dtype) !=
        LJ_OK)
        return lj_cli_error("plan");
    const int seq = a.seq > 0 ? a.seq : (strcmp(t.ops->name, "cpu") ? 4096 : 256);
    if (a.seq < 0) {
        lj_fail(LJ_ERR_ARG, "--seq-length %d must be positive", a.seq);
        return lj_cli_error("plan");
    }
    /* what train and benchmark refuse (the blockwise GEMM's shapes), refused here too */
    if (a.mb > 0 && lj_cli_fp8_check_tokens(t.linear_recipe, &t.fp8, t.ops, &cfg, a.mb, seq) != LJ_OK)
        return lj_cli_error("plan");
    int fixed = 0;
    uint8_t policy[LJ_MAX_LAYERS];
    const char *mode = NULL;
    if (recompute_mode(&a, cfg.num_hidden_layers, &fixed, policy, &mode) != LJ_OK) return lj_cli_error("plan");
    if (lj_cli_host_check(&cfg, seq, &t, a.host_memory) != LJ_OK) return lj_cli_error("plan");

    lj_planner_result *r = lj_malloc(sizeof *r);
    lj_status s = lj_planner_search(&cfg, seq, a.mb, fixed ? policy : NULL, &t, r);
    if (s != LJ_OK && s != LJ_ERR_OOM) {
        free(r);
        return lj_cli_error("plan");
    }
    lj_plan plan;
    lj_mem_breakdown bd;
    lj_planner_candidate_plan(&cfg, seq, &r->chosen, &t, &plan, &bd);
    if (!a.json || strcmp(a.json, "-") != 0) print_report(&cfg, &a, &t, r, &plan, &bd, seq, mode, fixed, s);
    int rc = 0;
    if (a.json && write_json(a.json, &cfg, &a, &t, r, &bd, seq, mode, s) != LJ_OK) rc = lj_cli_error("plan");
    if (s != LJ_OK) {
        fprintf(stderr, "ljperf plan: %s\n", r->explanation);
        rc = 1;
    }
    lj_plan_free(&plan);
    free(r);
    return rc;
}

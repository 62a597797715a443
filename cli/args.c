/* args.c: flag-value parsing, --device resolution and the cache directory for the subcommands. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "parallel/dist.h"
#include "plan/planner.h"
#include "train/ops_config.h"

char *lj_cli_command_line(const char *cmd, int argc, char **argv) {
    size_t cap = strlen(cmd) + 8, len = 0;
    for (int i = 0; i < argc; i++) cap += 4 * strlen(argv[i]) + 3;
    char *out = lj_malloc(cap);
    len = (size_t)snprintf(out, cap, "ljperf %s", cmd);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const int plain = *a && strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
                                    strlen(a);
        out[len++] = ' ';
        if (!plain) out[len++] = '\'';
        for (; *a; a++) {
            if (*a == '\'' && !plain) {
                memcpy(out + len, "'\\''", 4);
                len += 4;
            } else {
                out[len++] = *a;
            }
        }
        if (!plain) out[len++] = '\'';
    }
    out[len] = '\0';
    return out;
}

lj_status lj_cli_offload(void *dest, const char *flag, const char *v) {
    if (strcmp(v, "cpu") == 0) *(int *)dest = 1;
    else if (strcmp(v, "none") == 0) *(int *)dest = 0;
    else return lj_fail(LJ_ERR_ARG, "%s: '%s' is not one of cpu, none (DeepSpeed's nvme offload is not supported)", flag, v);
    return LJ_OK;
}

lj_status lj_cli_vision_recompute(void *dest, const char *flag, const char *v) {
    if (strcmp(v, "none") == 0) *(int *)dest = 0;
    else if (strcmp(v, "full") == 0) *(int *)dest = 1;
    else
        return lj_fail(LJ_ERR_ARG, "%s: '%s' is not one of none, full (the vision tower has no selective recompute)",
                       flag, v);
    return LJ_OK;
}

void lj_cli_note_no_gpu(const char *then) {
    static int said = 0; /* once per process */
    lj_dist_env env;
    const int rank = lj_dist_env_detect(&env) == LJ_OK ? env.rank : 0; /* once per job: rank 0 */
    if (said++ || rank != 0) return;
    lj_log_info("--device auto: no usable GPU (%s); %s", lj_error_message(), then);
}

lj_status lj_cli_model(const char *model, lj_model_config *cfg) {
    const lj_status s = lj_config_resolve(model, cfg);
    if (s != LJ_OK) lj_error_prefix("--model");
    return s;
}

lj_status lj_cli_output_path(const char *flag, const char *path) {
    if (!path || !strcmp(path, "-")) return LJ_OK;
    if (!path[0]) return lj_fail(LJ_ERR_ARG, "%s: an empty file name: give a file to write", flag);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return lj_fail(LJ_ERR_ARG, "%s %s: a directory: give a file name", flag, path);
    char dir[LJ_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        if (slash == dir) slash[1] = '\0';
        else *slash = '\0';
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return lj_fail(LJ_ERR_ARG, "%s %s: cannot create it: the directory %s does not exist (create it first)", flag, path, dir);
    }
    return LJ_OK;
}

lj_status lj_cli_device(const char *device, int deterministic, const lj_ops **ops) {
    lj_ops_config cfg;
    lj_ops_config_from_env(deterministic, &cfg);
    if (strcmp(device, "cpu") == 0) {
        *ops = lj_ops_cpu_open(&cfg);
        return LJ_OK;
    }
    if (strcmp(device, "cuda") == 0 || strcmp(device, "auto") == 0) {
        const lj_ops *cuda = lj_ops_cuda_open(&cfg);
        if (cuda) {
            *ops = cuda;
            return LJ_OK;
        }
        if (strcmp(device, "cuda") == 0)
            return lj_fail(LJ_ERR_DEVICE, "--device cuda: %s", lj_error_message());
        lj_cli_note_no_gpu("using the CPU");
        *ops = lj_ops_cpu_open(&cfg);
        return LJ_OK;
    }
    return lj_fail(LJ_ERR_ARG, "--device: '%s' is not one of auto, cpu, cuda", device);
}

lj_status lj_cli_grad_dtype(const char *flag, const char *value, const lj_ops **ops_inout) {
    const lj_ops *ops = *ops_inout;
    if (!value) return LJ_OK;
    lj_dtype dtype;
    if (!strcmp(value, "bf16")) dtype = LJ_DTYPE_BF16;
    else if (!strcmp(value, "fp32")) dtype = LJ_DTYPE_F32;
    else return lj_fail(LJ_ERR_ARG, "%s: '%s' is not one of bf16, fp32", flag, value);
    if (strcmp(ops->name, "cuda") != 0) {
        if (dtype == LJ_DTYPE_F32) return LJ_OK;
        return lj_fail(LJ_ERR_ARG, "%s bf16: the %s backend keeps fp32 gradients (its whole recipe is fp32)", flag,
                       ops->name);
    }
    /* the table of that gradient dtype (the device's, or the GPU-less description) */
    lj_ops_config cfg = ops->config;
    cfg.grad_dtype = dtype;
    const lj_ops *t = ops->alloc ? lj_ops_cuda_open(&cfg) : lj_ops_cuda_describe(&cfg);
    if (!t) return lj_fail(LJ_ERR_ARG, "%s %s: %s", flag, value, lj_error_message());
    *ops_inout = t;
    return LJ_OK;
}

lj_status lj_cli_host_check(const lj_model_config *cfg, int seq_length, const lj_planner_target *t,
                            const char *host_memory) {
    if (!t->offload_optimizer) return LJ_OK;
    uint64_t have = 0;
    const char *source = "MemAvailable in /proc/meminfo";
    if (host_memory) {
        const lj_flag row = LJ_CLI_HOST_MEMORY_ROW(NULL);
        LJ_TRY(lj_flags_parse_size(&row, host_memory, &have, NULL));
        source = "--host-memory";
    } else {
        size_t avail = 0, total = 0; /* the CPU backend's view of the host: MemAvailable */
        if (lj_ops_cpu()->memory_info(&avail, &total) != LJ_OK || avail == 0) return LJ_OK;
        have = avail;
    }
    const size_t need = lj_planner_host_bytes(cfg, seq_length, t);
    const uint64_t usable = have - have / 10;
    if (need <= usable) return LJ_OK;
    char b1[32], b2[32], b3[32];
    return lj_fail(LJ_ERR_OOM,
                   "optimizer offload: the host part of the plan needs %s per rank (f32 master weights, AdamW moments "
                   "and the gradient and parameter staging of %s) and this host has %s (%s; %s usable after a 10%% "
                   "margin): use more ranks (ZeRO shards the optimizer state), a host with more memory, or no offload",
                   lj_format_bytes(need, b1, sizeof b1), cfg->name, lj_format_bytes(have, b2, sizeof b2), source,
                   lj_format_bytes(usable, b3, sizeof b3));
}

lj_status lj_cli_memory_budget(lj_planner_target *t, const char *device_memory, const char *margin) {
    uint64_t v = 0;
    double pct = -1.0;
    if (device_memory) {
        const lj_flag row = LJ_CLI_DEVICE_MEMORY_ROW(NULL);
        LJ_TRY(lj_flags_parse_size(&row, device_memory, &v, NULL));
        t->device_memory_bytes = (size_t)v;
        t->memory_source = "--device-memory";
    }
    if (margin) {
        const lj_flag row = LJ_CLI_MARGIN_ROW(NULL);
        LJ_TRY(lj_flags_parse_size(&row, margin, &v, &pct));
        t->margin_bytes = pct >= 0 ? (size_t)((double)t->device_memory_bytes * pct / 100.0) : (size_t)v;
    }
    if ((device_memory || margin) && t->margin_bytes >= t->device_memory_bytes) {
        char b1[32], b2[32];
        return lj_fail(LJ_ERR_ARG, "the margin (--margin%s) of %s leaves nothing of the %s of device memory (%s)",
                       margin ? "" : ", default 1GiB", lj_format_bytes(t->margin_bytes, b1, sizeof b1),
                       lj_format_bytes(t->device_memory_bytes, b2, sizeof b2), t->memory_source);
    }
    return LJ_OK;
}

/* The plan total of a decided policy as the planner builds it: the candidate with the policy's
 * layer counts (the order of the layers changes no byte: plan/planner.h). */
static size_t planned_total(const lj_model_config *cfg, int seq_length, int micro_batch_size, const uint8_t *policy,
                            const lj_planner_target *t) {
    lj_planner_candidate c = {.micro_batch_size = micro_batch_size};
    for (int l = 0; l < cfg->num_hidden_layers; l++) {
        if (policy[l] == LJ_RECOMPUTE_FULL) c.num_full++;
        else if (policy[l] == LJ_RECOMPUTE_SELECTIVE) c.num_selective++;
        else c.num_none++;
    }
    lj_plan plan;
    lj_mem_breakdown bd;
    lj_planner_candidate_plan(cfg, seq_length, &c, t, &plan, &bd);
    const size_t total = plan.total_bytes;
    lj_plan_free(&plan);
    return total;
}

lj_status lj_cli_recompute(const lj_cli_recompute_request *q, int *micro_batch_size, uint8_t *policy) {
    const char *cmd = q->cmd, *recompute = q->recompute, *granularity = q->granularity;
    const lj_model_config *cfg = q->cfg;
    const lj_ops *ops = q->ops;
    const int seq_length = q->seq_length;
    int env_on = 0;
    LJ_TRY(lj_planner_env_enabled(&env_on));
    int use_planner = env_on || (recompute && strcmp(recompute, "auto") == 0);
    if (recompute && !use_planner) {
        if (granularity)
            return lj_fail(LJ_ERR_ARG, "--recompute %s and --recompute-granularity %s exclude each other: give one",
                           recompute, granularity);
        if (!strcmp(recompute, "none")) granularity = NULL;
        else if (!strcmp(recompute, "full") || !strcmp(recompute, "selective")) granularity = recompute;
        else return lj_fail(LJ_ERR_ARG, "--recompute: '%s' is not one of auto, none, selective, full", recompute);
    }
    if (*micro_batch_size == 0 && !use_planner)
        return lj_fail(LJ_ERR_ARG, "--micro-batch-size auto needs --recompute auto or CHECKPOINT_OPTIMIZATION=true");
    char cache[LJ_PATH_MAX];
    lj_planner_target target;
    LJ_TRY(lj_planner_target_init(&target, ops, lj_cache_dir(cache, sizeof cache), NULL));
    LJ_TRY(lj_cli_memory_budget(&target, q->device_memory, q->margin));
    target.grad_accum_steps = q->grad_accum_steps > 0 ? q->grad_accum_steps : 1;
    lj_dist_env env;
    if (lj_dist_env_detect(&env) == LJ_OK && env.world_size > 1) target.dp_world_size = env.world_size;
    target.zero_stage = q->zero_stage;
    target.linear_recipe = q->linear_recipe;
    if (q->fp8) target.fp8 = *q->fp8;
    target.exp_avg_dtype = q->exp_avg_dtype;
    target.exp_avg_sq_dtype = q->exp_avg_sq_dtype;
    target.offload_optimizer = q->offload_optimizer && strcmp(ops->name, "cpu") != 0; /* cpu: host memory already */
    LJ_TRY(lj_cli_host_check(cfg, seq_length, &target, q->host_memory));
    if (!use_planner) {
        LJ_TRY(lj_planner_megatron_recompute(granularity, q->method, q->num_layers, cfg->num_hidden_layers, policy));
        lj_planner_result res;
        lj_status s = lj_planner_search(cfg, seq_length, *micro_batch_size, policy, &target, &res);
        if (s == LJ_OK && res.found) {
            if (q->plan_bytes) *q->plan_bytes = planned_total(cfg, seq_length, *micro_batch_size, policy, &target);
            return LJ_OK;
        }
        if (!q->auto_if_needed) {
            /* point at the planner only when some recompute policy would fit */
            lj_planner_result any;
            const int planner_fits = lj_planner_search(cfg, seq_length, *micro_batch_size, NULL, &target, &any) ==
                                         LJ_OK && any.found;
            return lj_fail(LJ_ERR_OOM, "the run does not fit in %s memory: %s%s", ops->name, res.explanation,
                           planner_fits ? " (or let the planner choose: --recompute auto or CHECKPOINT_OPTIMIZATION=true)"
                                        : "");
        }
        lj_log_info("%s: the manual recompute policy does not fit; the planner chooses", cmd);
    }
    char why[1536];
    LJ_TRY(lj_planner_choose(cfg, seq_length, micro_batch_size, &target, policy, why, sizeof why));
    lj_log_info("%s: recompute planner%s: %s", cmd, env_on ? " (CHECKPOINT_OPTIMIZATION)" : "", why);
    if (q->plan_bytes) *q->plan_bytes = planned_total(cfg, seq_length, *micro_batch_size, policy, &target);
    return LJ_OK;
}

/* The value of a torchrun flag in either spelling (--master-port, --master_port). */
static const char *peek2(int argc, char **argv, const char *dashed, const char *underscored) {
    const char *v = lj_flags_peek(argc, argv, dashed);
    return v ? v : lj_flags_peek(argc, argv, underscored);
}

lj_status lj_cli_torchrun_check(const char *nnodes, int node_rank, int master_port) {
    if (nnodes && strcmp(nnodes, "1") != 0 && strcmp(nnodes, "1:1") != 0)
        return lj_fail(LJ_ERR_ARG, "--nnodes %s: ljperf's launcher (--nproc-per-node) starts the ranks of this node "
                                   "only, as torchrun --standalone does (--nnodes 1); for several nodes start ljperf "
                                   "under torchrun --nnodes N --no-python, srun or mpirun",
                       nnodes);
    if (node_rank != 0)
        return lj_fail(LJ_ERR_ARG, "--node-rank %d: with one node (--nnodes 1) the only node rank is 0", node_rank);
    if (master_port != 0 && (master_port < 1 || master_port > 65535))
        return lj_fail(LJ_ERR_ARG, "--master-port %d: not a TCP port (expected 1 to 65535)", master_port);
    return LJ_OK;
}

int lj_cli_maybe_launch(const char *cmd, int argc, char **argv, int *status) {
    int nproc = 0, port = 0, node_rank = 0;
    const char *n = peek2(argc, argv, "--nproc-per-node", "--nproc_per_node"); /* torchrun's spellings */
    const char *device = lj_flags_peek(argc, argv, "--device");
    const char *addr = peek2(argc, argv, "--master-addr", "--master_addr");
    const char *port_text = peek2(argc, argv, "--master-port", "--master_port");
    const char *rank_text = peek2(argc, argv, "--node-rank", "--node_rank");
    if (!device) device = "auto";
    lj_status s = LJ_OK;
    if (n) {
        s = lj_flags_parse_int("--nproc-per-node", n, &nproc);
        if (s == LJ_OK && nproc < 1) s = lj_fail(LJ_ERR_ARG, "--nproc-per-node %d: must be at least 1", nproc);
    }
    if (s == LJ_OK && nproc > 1) {
        if (port_text) s = lj_flags_parse_int("--master-port", port_text, &port);
        if (s == LJ_OK && rank_text) s = lj_flags_parse_int("--node-rank", rank_text, &node_rank);
        if (s == LJ_OK) s = lj_cli_torchrun_check(lj_flags_peek(argc, argv, "--nnodes"), node_rank, port);
    }
    if (s != LJ_OK) {
        *status = lj_cli_error(cmd);
        return 1;
    }
    lj_dist_env env;
    if (nproc <= 1 || (lj_dist_env_detect(&env) == LJ_OK && env.launcher != LJ_LAUNCHER_NONE)) return 0;
    lj_dist_backend backend;
    if (!strcmp(device, "cpu")) backend = LJ_DIST_MPI;
    else if (!strcmp(device, "cuda")) backend = LJ_DIST_NCCL;
    else if (!strcmp(device, "auto")) { /* as each worker's --device auto will choose */
        const int gpus = lj_ops_cuda_device_count();
        backend = gpus > 0 ? LJ_DIST_NCCL : LJ_DIST_MPI;
        if (gpus == 0) lj_log_info("--device auto: no GPU here: %d CPU ranks through mpirun", nproc);
    } else {
        lj_fail(LJ_ERR_ARG, "--device: '%s' is not one of auto, cpu, cuda", device);
        *status = lj_cli_error(cmd);
        return 1;
    }
    *status = lj_launch_at(nproc, backend, addr, port, cmd, argc, argv);
    return 1;
}

lj_status lj_cli_check_optimizer(const lj_lr_schedule *lr, const lj_adamw_config *a, const char *source) {
    const struct { int bad; const char *flag; double value; const char *expected; } rules[] = {
        {!(lr->lr >= 0 && isfinite(lr->lr)), "--lr", lr->lr, "a finite number >= 0 (e.g. --lr 3e-4)"},
        {!(a->beta1 >= 0 && a->beta1 < 1), "--adam-beta1", a->beta1, "a number in [0, 1), e.g. 0.9"},
        {!(a->beta2 >= 0 && a->beta2 < 1), "--adam-beta2", a->beta2, "a number in [0, 1), e.g. 0.95"},
        {!(a->eps > 0), "--adam-eps", a->eps, "a positive number, e.g. 1e-8"},
        {!(a->weight_decay >= 0), "--weight-decay", a->weight_decay, ">= 0"},
        {!(a->max_grad_norm >= 0), "--clip-grad", a->max_grad_norm, ">= 0 (0 = off)"},
    };
    const char *pre = source ? " (the value after " : "", *src = source ? source : "", *post = source ? ")" : "";
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (rules[i].bad)
            return lj_fail(LJ_ERR_ARG, "%s %.9g: expected %s%s%s%s", rules[i].flag, rules[i].value, rules[i].expected,
                           pre, src, post);
    if (!(lr->min_lr >= 0 && lr->min_lr <= lr->lr))
        return lj_fail(LJ_ERR_ARG, "--min-lr %.9g: expected a number in [0, --lr %.9g]%s%s%s", lr->min_lr, lr->lr,
                       source ? " (the values after " : "", src, post);
    return LJ_OK;
}

/* planner.h: exact memory prediction and automatic recompute planning on top of the static
 * memory plan (plan/plan.h): the breakdown of a plan by category, the device target (memory
 * budget, margin, fixed overheads, kernel throughputs), the step-time cost model
 * (plan/cost.c), the search over per-layer recompute policies and micro-batch sizes, and the
 * CHECKPOINT_OPTIMIZATION switch.
 *
 * Every memory figure here comes from lj_plan_build: the runtime allocates exactly the plan
 * (plus the backend's fixed library workspace and the CUDA context), so the predicted peak is
 *   peak = plan.total_bytes + library workspace + context overhead.
 * Units: bytes, seconds, FLOP/s, bytes/s. Shapes as in model/model.h (B micro-batch, T
 * sequence length, N = B*T, C hidden, I intermediate, V vocabulary, L layers, P parameters).
 */
#ifndef LJ_PLANNER_H
#define LJ_PLANNER_H

#include "base/fs.h"
#include "plan/build.h"
#include "plan/plan.h"

/* ---- breakdown of a plan by category ---------------------------------------------- */

typedef enum {
    LJ_MEM_PARAMETERS = 0, /* params arena */
    LJ_MEM_MASTER,         /* f32 master weights */
    LJ_MEM_GRADIENTS,      /* weight gradients */
    LJ_MEM_OPTIMIZER,      /* AdamW moments (+ the 4-byte grad-norm accumulator) */
    LJ_MEM_ACTIVATIONS,    /* saved activations: residual stream, per-layer tensors, inputs, RoPE, final norm */
    LJ_MEM_RECOMPUTE,      /* shared buffers that recomputed layers write before their backward */
    LJ_MEM_SCRATCH,        /* backward scratch: activation gradients, o_proj/down_proj output, unfused temporaries */
    LJ_MEM_LOGITS_LOSS,    /* per-token losses, full logits (unfused path) */
    LJ_MEM_FP8,            /* the FP8 recipe: amax histories and scales, the casts' scratch (weights,
                              inputs, gradients) and the FP8 GEMM's workspace ("fp8." buffers, and
                              Qwen3-VL's vision tower's "vision.fp8.") */
    LJ_MEM_OP_WORKSPACE,   /* op workspaces of the plan: attention, RMSNorm backward, lm_head+CE chunk, grad norm */
    LJ_MEM_LIB_WORKSPACE,  /* library workspaces allocated once by the backend (cuBLASLt) */
    LJ_MEM_CONTEXT,        /* CUDA context overhead (0 on the CPU) */
    LJ_MEM_COMM,           /* NCCL's own buffers (GPU ranks of a world of 2 or more; else 0) */
    LJ_MEM_OTHER,          /* a plan buffer this file does not know (a bug: tests require 0) */
    LJ_MEM_COUNT
} lj_mem_category;

/* "parameters", "master weights", ... (the row labels of the breakdown table). */
const char *lj_mem_category_name(lj_mem_category c);

typedef struct {
    size_t bytes[LJ_MEM_COUNT];
    /* saved activations split further (they add up to bytes[LJ_MEM_ACTIVATIONS]) */
    size_t residual_bytes;        /* residual stream: the L+1 layer inputs/outputs [N, C] */
    size_t layer_bytes[3];        /* per-layer saved tensors, summed over the layers of each policy (lj_recompute) */
    int layers[3];                /* how many layers have each policy */
    size_t other_activation_bytes;/* inputs, targets, RoPE tables, final norm output; the vision tower's activations */
    size_t vision_bytes[LJ_MEM_COUNT]; /* the part of bytes[] that is the vision tower's and its joint's
                                    (model/vl.h lj_vl_buffer_is_vision; 0 for a text model) */
    size_t plan_bytes;            /* lj_plan total_bytes */
    size_t peak_bytes;            /* plan_bytes + library workspace + context + NCCL = the sum of bytes[] */
} lj_mem_breakdown;

/* Category of one plan buffer (from its arena and name). */
lj_mem_category lj_mem_category_of(const lj_plan_buffer *b);

/* Sums the plan's buffers (with their LJ_PLAN_ALIGN padding, as the arenas hold them) by
 * category. `recompute` is the per-layer policy the plan was built with (lj_model_options);
 * `library_workspace_bytes`, `context_bytes` and `comm_bytes` (NCCL) are the fixed overheads
 * outside the plan. */
void lj_mem_breakdown_of(const lj_plan *plan, const uint8_t *recompute, int num_layers,
                         size_t library_workspace_bytes, size_t context_bytes, size_t comm_bytes,
                         lj_mem_breakdown *out);

/* ---- kernel throughputs per device model (plan/cost.c) ----------------------------- */

/* FP8 over bf16 GEMM rate on an H200 at the Llama shapes: 1,385-1,676 against 833-901 TFLOP/s
 * (test_ops_cuda perf --op fp8_matmul, bench/results/2026-12-01-h200-fp8-phase2.md); the FP8 rate
 * where only the bf16 one is known (defaults, a cache without it, --matmul-tflops). */
#define LJ_FP8_GEMM_SPEEDUP 1.8

typedef struct {
    char device[96];          /* key: "NVIDIA H200", "cpu-<model name>", ... */
    double matmul_flops;      /* GEMM FLOP/s at training shapes (bf16 on GPUs, fp32 sgemm on the CPU) */
    double fp8_matmul_flops;  /* the FP8 recipe's GEMMs (model/linear.h): FP8 tensor cores on GPUs, the
                                 emulation on the CPU */
    double attention_flops;   /* causal attention FLOP/s at seq 4096, counted as fwd 2*B*nh*T^2*hd, bwd
                                 2.5x that */
    double attention_seq0;    /* T0 (tokens) of the attention rate's rise with the sequence length: the
                                 rate at T is attention_flops * f(T) / f(4096), f(T) = T / (T + T0); 0:
                                 the same rate at every T (the CPU) */
    double memory_bandwidth;  /* bytes/s of element-wise passes (effective, not the datasheet figure) */
    size_t context_bytes;     /* measured CUDA context overhead; 0 = not measured */
    char source[160];         /* where the figures come from ("defaults: ...", "measured ...", "cached in ...") */
} lj_perf_rates;

/* Defaults without a measurement. backend "cuda": H100/H200 SXM figures from
 * docs/reference.md (cuBLAS bf16 GEMM 650-790 TFLOP/s -> 700e12; cuDNN SDPA causal
 * fwd+bwd 385-460 -> 400e12 at seq 4096, rising with T as T / (T + 1544): the two training
 * steps that fix it, llama3.1-8b at seq 4096 and at seq 32768 with full recompute, put 400 and
 * 526 TFLOP/s on its attention, 551 in the limit; HBM3e effective ~3.5e12 B/s). backend "cpu": 50 GFLOP/s sgemm,
 * attention at a quarter of that, 10 GB/s (placeholders until lj_perf_rates_measure_cpu). */
void lj_perf_rates_default(lj_perf_rates *r, const char *backend, const char *device);

/* buf[LJ_PATH_MAX] = the cache file of `device`: <cache_dir>/planner/<device with every character
 * outside [A-Za-z0-9._-] turned into '_'>.json. Errors: LJ_ERR_ARG for a path over LJ_PATH_MAX. */
lj_status lj_perf_rates_path(const char *cache_dir, const char *device, char *buf);

/* Reads the cached measurement of `device`: a JSON object {"device", "matmul_tflops",
 * "attention_tflops", "memory_bandwidth_gbs", "context_overhead_bytes", "source", optional
 * "fp8_matmul_tflops" and "attention_seq0"}.
 * Errors: LJ_ERR_IO when there is no cache file, LJ_ERR_FORMAT naming the file and field
 * when a field is missing, not a number or not positive. */
lj_status lj_perf_rates_load(const char *cache_dir, const char *device, lj_perf_rates *r);

/* Writes `r` to its cache file atomically (creating <cache_dir>/planner/). Errors: LJ_ERR_IO. */
lj_status lj_perf_rates_save(const char *cache_dir, const lj_perf_rates *r);

/* Measures the CPU: OpenBLAS sgemm at n = 1024 (lj_cpu_sgemm_gflops, ~0.3 s), attention
 * assumed at a quarter of the sgemm rate (the CPU attention runs scalar softmax loops), and
 * a streaming pass (b[i] = a[i] + b[i] over 2 x 64 MiB, counted as 3 x 64 MiB moved per
 * pass) for the bandwidth. Uses host memory outside any plan (a probe). */
void lj_perf_rates_measure_cpu(lj_perf_rates *r);

/* The key of this machine's CPU: "cpu-" + the "model name" of /proc/cpuinfo (or "cpu"). */
const char *lj_perf_cpu_device_name(char *buf, size_t len);

/* ---- step-time cost model (plan/cost.c) -------------------------------------------- */

/* The attention FLOP/s of `r` at sequence length T (tokens): attention_flops scaled by
 * f(T) / f(4096), f(T) = T / (T + attention_seq0); attention_flops itself when attention_seq0
 * is 0. A kernel's fixed work per query tile (loading, the softmax statistics, the backward's
 * dQ pass) weighs less against the T^2 work as T grows. */
double lj_perf_attention_rate(const lj_perf_rates *r, double T);

typedef struct {
    double matmul_flop;          /* forward + backward + recompute GEMM FLOPs of one micro-batch */
    double fp8_matmul_flop;      /* the part of matmul_flop in FP8 linears (at rates.fp8_matmul_flops) */
    double attention_flop;       /* forward + backward + recompute attention FLOPs (convention above) */
    double elementwise_bytes;    /* bytes moved by element-wise passes of one micro-batch (incl. recompute) */
    double optimizer_bytes;      /* bytes moved per optimizer step (grad zeroing, norm, AdamW) */
    double recompute_matmul_flop, recompute_attention_flop, recompute_bytes; /* the recompute share */
    double matmul_s, attention_s, memory_s; /* the three terms, seconds */
    double recompute_s;          /* the part of step_s spent recomputing */
    double step_s;               /* predicted time of one micro-batch + 1/grad_accum_steps optimizer step */
    double tokens_per_s;         /* B*T / step_s */
} lj_step_cost;

/* Predicts one training step (forward, backward, the recompute of opt->recompute, and the
 * optimizer step shared by `grad_accum_steps` micro-batches):
 *   step_s = (matmul_flop - fp8_matmul_flop) / rates.matmul_flops
 *          + fp8_matmul_flop / rates.fp8_matmul_flops + attention_flop / lj_perf_attention_rate(rates, T)
 *          + (elementwise_bytes + optimizer_bytes / grad_accum_steps) / rates.memory_bandwidth
 * The FLOP and byte counts of each op are written out in plan/cost.c. `ops` gives the dtypes
 * (act, param, grad sizes); opt->fused chooses fused or unfused element-wise passes. */
void lj_cost_step(const lj_model_config *cfg, const lj_model_options *opt, const lj_ops *ops,
                  const lj_perf_rates *rates, int grad_accum_steps, lj_step_cost *out);

/* ---- the device target -------------------------------------------------------------- */

/* Default CUDA context overhead when neither a measurement nor an override exists: what
 * cudaMemGetInfo shows in use during training beyond the plan and the cuBLASLt workspace (the
 * runtime context, the cuBLASLt handle, lazily loaded kernel modules, allocation rounding).
 * Measured on one H200 (driver 580.159.04, CUDA 13.0) as `ljperf benchmark`'s measured minus
 * planned peak: 540, 541, 543 and 544 MiB for llama3.2-1b seq 2048 / seq 4096 selective,
 * llama3.2-3b seq 4096 full and llama3-8b seq 4096 full; the largest is taken.
 * Override: --context-overhead, LJ_CUDA_CONTEXT_OVERHEAD, or the planner cache. */
#define LJ_PLANNER_CUDA_CONTEXT_BYTES ((size_t)544 << 20)

/* Default memory NCCL keeps per GPU rank when the world has 2 or more ranks: the
 * communicator's state, its peer connections' buffers (all protocols and channels) and work
 * queues, part allocated by ncclCommInitRank and part at the first collectives (which
 * parallel/dist_nccl.c runs at start-up). Measured on 2 H200s over NVLink (NCCL 2.28, one process
 * per GPU) as the measured peak per rank minus plan, cuBLASLt workspace and CUDA context:
 * 991.8 MiB (llama3.2-1b, ZeRO-1) and 993.5 MiB (llama3-8b, ZeRO-3); the larger, rounded up.
 * Other topologies and world sizes differ (more peers, network buffers).
 * Override: LJ_NCCL_OVERHEAD (a byte count). */
#define LJ_PLANNER_NCCL_BYTES ((size_t)994 << 20)

/* Default device memory of a GPU run when no GPU is detected: one H200 as cudaMemGetInfo
 * reports its total, 150109880320 bytes = 139.80 GiB, read on the H200 above (nvidia-smi
 * shows 143771 MiB; the CUDA runtime sees less, and the runtime is what the plan must fit).
 * At start-up, after lj_ops_cuda_open(), 560.8 MiB of it were in use: the context plus the 32 MiB
 * cuBLASLt workspace; the first training step's lazily loaded kernels add ~15 MiB more. */
#define LJ_PLANNER_H200_MEMORY_BYTES ((size_t)150109880320ULL)

/* Default safety margin kept free below the device memory: 1 GiB. The plan is the
 * allocation, and the measured peak was within 4 MiB of plan + cuBLASLt + context on the H200
 * (see above), so the margin only has to absorb a different driver or CUDA version. */
#define LJ_PLANNER_DEFAULT_MARGIN_BYTES ((size_t)1 << 30)

typedef struct {
    const lj_ops *ops;              /* lj_ops_cpu_open(), lj_ops_cuda_open() or lj_ops_cuda_describe() */
    size_t device_memory_bytes;     /* the whole device (GPU) or host RAM (CPU) */
    size_t margin_bytes;            /* kept free: a candidate fits when peak <= memory - margin */
    size_t library_workspace_bytes; /* backend workspace allocated once (cuBLASLt), outside the plan */
    size_t context_bytes;           /* CUDA context overhead, 0 on the CPU */
    size_t comm_bytes;              /* NCCL's buffers per rank when dp_world_size > 1 (0 on the CPU) */
    const char *memory_source;      /* how device_memory_bytes was found (printed) */
    const char *context_source;     /* how context_bytes was found (printed) */
    const char *comm_source;        /* how comm_bytes was found (printed) */
    lj_perf_rates rates;
    int fused;                      /* fused kernels (the default) or the unfused twins */
    int grad_accum_steps;           /* micro-batches per optimizer step (>= 1) */
    int zero_stage;                 /* ZeRO stage of the run (0: replicated) */
    int dp_world_size;              /* data-parallel ranks (>= 1): plans are per rank */
    int offload_optimizer;          /* 1: master weights and AdamW moments in host memory, outside the
                                       device plan (optim/offload.h lj_offload_options; ZeRO stage >= 1) */
    lj_linear_recipe_kind linear_recipe; /* the linears' precision recipe (lj_model_options) */
    lj_linear_fp8_options fp8;      /* its FP8 settings */
    lj_dtype exp_avg_dtype;         /* AdamW's moments as stored (lj_model_options): LJ_DTYPE_F32 */
    lj_dtype exp_avg_sq_dtype;      /* (the default, 0) or LJ_DTYPE_BF16 */
} lj_planner_target;

/* Fills a target for `ops`: device memory from ops->memory_info when the table has it (a real
 * backend: the GPU's total, or host RAM), else LJ_PLANNER_H200_MEMORY_BYTES for "cuda";
 * margin LJ_PLANNER_DEFAULT_MARGIN_BYTES; library workspace lj_cuda_fixed_workspace_bytes()
 * for "cuda" (0 on the CPU); rates: the cache of `device_name` (NULL: "NVIDIA H200" for cuda,
 * lj_perf_cpu_device_name() for the CPU) under `cache_dir` (NULL: none), else on the CPU a
 * measurement (saved to the cache when cache_dir is given), else the defaults; context:
 * $LJ_CUDA_CONTEXT_OVERHEAD (a byte count such as 600MiB), else the cached measurement, else
 * LJ_PLANNER_CUDA_CONTEXT_BYTES (0 on the CPU); NCCL: $LJ_NCCL_OVERHEAD, else
 * LJ_PLANNER_NCCL_BYTES (0 on the CPU; counted only when dp_world_size > 1); fused 1,
 * grad_accum_steps 1.
 * Errors: LJ_ERR_ARG for a malformed LJ_CUDA_CONTEXT_OVERHEAD, LJ_NCCL_OVERHEAD or cache file
 * content. */
lj_status lj_planner_target_init(lj_planner_target *t, const lj_ops *ops, const char *cache_dir,
                                 const char *device_name);

/* What a rank holds outside its plan: library workspace + context, + NCCL's buffers when
 * dp_world_size > 1. */
size_t lj_planner_fixed_bytes(const lj_planner_target *t);

/* device_memory_bytes - margin_bytes (0 when the margin is larger). */
size_t lj_planner_usable_bytes(const lj_planner_target *t);

/* The set-up the planner plans `t` with (plan/build.h, for lj_model_build): rank 0 of t's world
 * size and ZeRO stage (every shard has the same size), fusion and offload as in t, micro-batch 1,
 * no recompute (the search sets those), sequence length `seq_length`. */
lj_model_setup lj_planner_setup(const lj_model_config *cfg, const lj_planner_target *t, int seq_length);

/* The host memory one rank of an offloaded run takes (t->offload_optimizer; else 0): its f32
 * master weights and AdamW moments plus the host staging of gradients and parameters
 * (optim/offload.h lj_offload_bytes); the same for every recompute policy and micro-batch. */
size_t lj_planner_host_bytes(const lj_model_config *cfg, int seq_length, const lj_planner_target *t);

/* ---- the search ------------------------------------------------------------------- */

/* One candidate: the first num_full layers recompute fully, the next num_selective layers
 * selectively, the rest keep everything. The order of layers changes neither the memory
 * (every layer's saved tensors are allocated at once) nor the time, so this family holds
 * every mix of per-layer policies up to a permutation. */
typedef struct {
    int micro_batch_size;
    int num_full, num_selective, num_none;
    size_t peak_bytes;     /* exact: lj_plan_build total + library workspace + context */
    int fits;              /* peak_bytes <= usable */
    lj_step_cost cost;
    const char *label;     /* for reported alternatives: "no recompute", "all selective", "all full", "best" */
} lj_planner_candidate;

#define LJ_PLANNER_MAX_ALTERNATIVES 64
/* With --micro-batch-size auto, a larger micro-batch must be predicted faster than the
 * smallest one within this fraction of the best tokens/s to be chosen: the cost model is not
 * finer than that, and the smaller micro-batch leaves more memory free. */
#define LJ_PLANNER_MICRO_BATCH_TOLERANCE 0.01
/* Largest micro-batch size the auto search tries, and how many sizes it can try (below). */
#define LJ_PLANNER_MAX_MICRO_BATCH 1024
#define LJ_PLANNER_MAX_MICRO_BATCH_SIZES 32

/* The micro-batch size the auto search tries after B: 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (each
 * power of two and 1.5 times it), so that the search stays short and still finds sizes such as 3
 * that fit where 4 does not. */
int lj_planner_next_micro_batch(int B);

typedef struct {
    int found;                          /* 1: `chosen` fits */
    lj_planner_candidate chosen;        /* the fastest candidate that fits (or the smallest one when none fits) */
    lj_planner_candidate alternatives[LJ_PLANNER_MAX_ALTERNATIVES]; /* rejected candidates reported */
    int num_alternatives;
    int plans_built;                    /* lj_plan_build calls made by the search */
    size_t min_peak_bytes;              /* the smallest peak seen: all layers full at the smallest micro-batch */
    char explanation[1536];             /* one paragraph: the choice and why (or why nothing fits and what would) */
} lj_planner_result;

/* Searches the recompute policies (and the micro-batch size when micro_batch_size is 0:
 * 1, 2, 3, 4, 6, 8, ... (lj_planner_next_micro_batch) up to LJ_PLANNER_MAX_MICRO_BATCH,
 * stopping at the first size where even full
 * recompute does not fit) and picks the candidate with the highest predicted tokens/s whose
 * peak fits in the target's usable memory (ties: the smaller peak; across micro-batch sizes
 * the smallest within LJ_PLANNER_MICRO_BATCH_TOLERANCE of the fastest). With `fixed_recompute`
 * not NULL (lj_recompute per layer) only the micro-batch size is searched and that policy
 * is evaluated as given.
 *
 * Method: for each micro-batch size and each count of full layers k, the peak falls and the
 * step time rises as selective layers are added, so a binary search finds the fewest
 * selective layers j(k) that fit; the fastest of the (k, j(k)) is the best of the whole
 * family. Every peak comes from lj_plan_build.
 *
 * Returns LJ_OK with res->found = 1, or LJ_ERR_OOM with res->found = 0 and a message (also
 * in res->explanation) giving the smallest memory the run needs and what would make it fit
 * (ZeRO over more GPUs, a shorter sequence, optimizer offload). Errors: LJ_ERR_ARG for
 * seq_length or micro_batch_size out of range. */
lj_status lj_planner_search(const lj_model_config *cfg, int seq_length, int micro_batch_size,
                            const uint8_t *fixed_recompute, const lj_planner_target *t, lj_planner_result *res);

/* The wire-in point for train and benchmark: runs lj_planner_search with policy auto and
 * fills recompute[L] (lj_recompute per layer, the rest of the array zeroed) and
 * *micro_batch_size (in: N, or 0 for auto; out: the chosen size), and copies the
 * explanation paragraph into `explanation` (may be NULL). Errors: as lj_planner_search
 * (LJ_ERR_OOM when nothing fits, with the message naming the smallest memory needed). */
lj_status lj_planner_choose(const lj_model_config *cfg, int seq_length, int *micro_batch_size,
                            const lj_planner_target *t, uint8_t recompute[LJ_MAX_LAYERS], char *explanation,
                            size_t explanation_len);

/* The run's plan total against the one the planner built for the policy it decided (`planned`,
 * lj_plan_build's total; 0: nothing to compare): when the two differ by more than 64 MiB, a
 * warning naming both (the planner's model options and the run's disagree, so its choice and its
 * predicted peak are not this run's). `cmd` names the command in the message. */
void lj_planner_check_plan(const char *cmd, size_t planned, size_t run_plan_bytes);

/* Builds the plan of one candidate and its breakdown (for printing). Free with lj_plan_free. */
void lj_planner_candidate_plan(const lj_model_config *cfg, int seq_length, const lj_planner_candidate *c,
                               const lj_planner_target *t, lj_plan *plan, lj_mem_breakdown *bd);

/* Per-layer policy array of a candidate: layers [0, num_full) full, then num_selective selective. */
void lj_planner_candidate_policy(const lj_planner_candidate *c, uint8_t recompute[LJ_MAX_LAYERS]);

/* "8 full + 4 selective + 20 none", "none (32 layers)", ... into buf. */
const char *lj_planner_candidate_describe(const lj_planner_candidate *c, char *buf, size_t len);

/* ---- switches and flags ---------------------------------------------------------------- */

/* Reads CHECKPOINT_OPTIMIZATION: unset, "", false, 0, no, off -> *on = 0; true, 1, yes, on
 * -> *on = 1 (case-insensitive). Errors: LJ_ERR_ARG naming the variable and the value for
 * anything else (a typo such as "ture" is an error, not silently off). */
lj_status lj_planner_env_enabled(int *on);

/* Megatron-LM's --recompute-granularity full|selective, --recompute-method uniform|block
 * (default uniform: every layer) and --recompute-num-layers N (block: the first N layers)
 * -> recompute[num_layers] (the rest zeroed). granularity NULL: no recompute (then method
 * must be NULL too). Errors: LJ_ERR_ARG naming the flag and value. */
lj_status lj_planner_megatron_recompute(const char *granularity, const char *method, int num_layers_flag,
                                        int num_layers, uint8_t recompute[LJ_MAX_LAYERS]);

#endif

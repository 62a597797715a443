/* cli.h: one entry point per subcommand (one file each in cli/). Each takes the arguments
 * after the subcommand name and returns the process exit status (0 ok, 1 error, 2 usage).
 * Errors are printed as "ljperf <cmd>: <message>" with the file and field named. */
#ifndef LJ_CLI_H
#define LJ_CLI_H

int lj_cli_prepare(int argc, char **argv);
int lj_cli_train(int argc, char **argv);
/* `ljperf train` of a Qwen3-VL model (cli/train_vl.c): whether --model or --load names one, and
 * the run. */
int lj_cli_train_is_vl(int argc, char **argv);
int lj_cli_train_vl(int argc, char **argv);
/* 1 when `--model` in argv names a Qwen3-VL model (a qwen3-vl-* preset, a qwen3_vl config.json
 * or a directory holding one): `benchmark` and `plan` then run their Qwen3-VL forms
 * (cli/benchmark_vl.c, cli/plan_vl.c). */
int lj_cli_model_is_vl(int argc, char **argv);
/* 1 when a --model or --load value names a Qwen3-VL model: a qwen3-vl-* preset, a qwen3_vl
 * config.json or a directory holding one, or a checkpoint of a VL run (told without reading its
 * state, so a damaged one still counts). */
int lj_cli_names_vl(const char *value);
int lj_cli_benchmark_vl(int argc, char **argv);
int lj_cli_plan_vl(int argc, char **argv);
/* `ljperf generate --image FILE` of a Qwen3-VL model (cli/generate_vl.c). */
int lj_cli_generate_is_vl(int argc, char **argv);
int lj_cli_generate_vl(int argc, char **argv);
int lj_cli_benchmark(int argc, char **argv);
int lj_cli_plan(int argc, char **argv);
int lj_cli_generate(int argc, char **argv);
int lj_cli_report(int argc, char **argv);
int lj_cli_serve(int argc, char **argv);
int lj_cli_bench(int argc, char **argv);

/* Prints "ljperf <cmd>: <lj_error_message()>" to stderr and returns 1. */
int lj_cli_error(const char *cmd);

#include "base/fs.h"
#include "base/base.h"
#include "cli/flags.h"
#include "config/config.h"
#include "config/vl.h"
#include "ops/ops.h"
#include "plan/planner.h"

/* The synthetic Qwen3-VL sample of `benchmark` and `plan` (cli/vl_sample.c): one image of
 * --img-h x --img-w pixels (Megatron-LM's names for the image size; --image-size S sets both),
 * default 448 x 448, and --text-tokens N text tokens after it, default 512. */
typedef struct {
    int img_h, img_w, image_size, text_tokens;
    int h_given, w_given, size_given;
} lj_cli_vl_sample;
#define LJ_CLI_VL_SAMPLE_ROWS 4
/* Fills rows[0..LJ_CLI_VL_SAMPLE_ROWS) for `s` (defaults set) and returns their count. */
int lj_cli_vl_sample_rows(lj_cli_vl_sample *s, lj_flag *rows);
/* The image size: --image-size, or --img-h and --img-w. Errors: LJ_ERR_ARG when --image-size is
 * given with either of the other two. */
lj_status lj_cli_vl_sample_resolve(lj_cli_vl_sample *s);

/* --offload-optimizer cpu|none (DeepSpeed's offload_optimizer.device), an LJ_FLAG_FUNC row's
 * function: *(int *)dest = 1 for cpu, 0 for none. Errors: LJ_ERR_ARG naming the flag. */
lj_status lj_cli_offload(void *dest, const char *flag, const char *value);

/* --recompute-vision none|full (Qwen3-VL: the vision tower's blocks' recompute, Megatron-LM's
 * recompute_granularity full over every block; model/vision.h), an LJ_FLAG_FUNC row's function:
 * *(int *)dest = 0 for none, 1 for full (lj_model_options.vision_recompute); a dest left as it was
 * is "not given". Errors: LJ_ERR_ARG naming the flag and the value. */
lj_status lj_cli_vision_recompute(void *dest, const char *flag, const char *value);

/* The learning rate's and AdamW's flags a user can get wrong that no later step catches (--lr,
 * --min-lr, --adam-beta1/2, --adam-eps, --weight-decay, --clip-grad), for train of text and of
 * Qwen3-VL models; `source`: the DeepSpeed config whose values they are after, or NULL.
 * Errors: LJ_ERR_ARG "FLAG VALUE: expected ..." for the first bad one. */
lj_status lj_cli_check_optimizer(const lj_lr_schedule *lr, const lj_adamw_config *adamw, const char *source);
/* Its row for train, benchmark and plan; `where`: an int *. */
#define LJ_CLI_RECOMPUTE_VISION_ROW(where)                                                           \
    {.name = "--recompute-vision", .kind = LJ_FLAG_FUNC, .dest = (where), .fn = lj_cli_vision_recompute, \
     .help = "none|full  the vision tower's recompute: full keeps only each block's input (none)"}

/* buf[LJ_PATH_MAX] = the HF directory that `--load load` names (generate, serve): the directory
 * itself, or the Hugging Face export of a training checkpoint (lj_ckpt_resolve_load: a root's
 * latest iteration, or one iter_NNNNNNN directory). Errors: LJ_ERR_IO naming what is missing. */
lj_status lj_cli_model_dir(const char *load, char *buf);

/* Resolves --model (lj_config_resolve: a preset, a config.json or its directory); its errors
 * start with "--model: ". */
lj_status lj_cli_model(const char *model, lj_model_config *cfg);

/* Resolves --device auto|cpu|cuda and opens the backend's table with the run's configuration
 * (train/ops_config.h lj_ops_config_from_env: --deterministic-mode and the environment). auto
 * picks the GPU when there is one, else says out loud that it falls back to the CPU
 * (lj_cli_note_no_gpu). Errors: LJ_ERR_DEVICE (cuda requested but unusable). */
lj_status lj_cli_device(const char *device, int deterministic, const lj_ops **ops);

/* Checks, before a long run, that `path` (the value of `flag`, e.g. --json; NULL: nothing asked)
 * can be written at its end: not empty, not a directory, its directory present. Errors:
 * LJ_ERR_ARG naming the flag and the path. */
lj_status lj_cli_output_path(const char *flag, const char *path);
/* "--device auto: no usable GPU (<the error message>); <then>" on stderr, once per job: the
 * first call of the process, on rank 0 only (every rank of a launched job falls back alike). */
void lj_cli_note_no_gpu(const char *then);

/* --grad-dtype bf16|fp32 (DeepSpeed's data_types.grad_accum_dtype) for the backend *ops:
 * replaces *ops by the CUDA table of *ops's configuration with that gradient dtype (the device's or the GPU-less description, as *ops was); NULL keeps the
 * default (bf16 on CUDA). The CPU backend keeps fp32 gradients: bf16 there is an error. Call it
 * before anything is planned. `flag` names the source in messages. */
lj_status lj_cli_grad_dtype(const char *flag, const char *value, const lj_ops **ops);

/* What decides the recompute policy of a train or benchmark run. */
typedef struct {
    const char *cmd;             /* "train" or "benchmark", for messages */
    const lj_model_config *cfg;
    const lj_ops *ops;
    int seq_length;
    int grad_accum_steps;        /* micro-batches per step (<= 0: 1) */
    int zero_stage;              /* the plan is one rank's: the world size comes from the launcher */
    const char *recompute;       /* --recompute auto|none|selective|full, or NULL */
    const char *granularity;     /* Megatron's --recompute-granularity full|selective, or NULL (none) */
    const char *method;          /* --recompute-method uniform|block, or NULL */
    int num_layers;              /* --recompute-num-layers, -1 when not given */
    int auto_if_needed;          /* 1: the planner chooses when the manual policy would not fit */
    const char *device_memory;   /* --device-memory, or NULL: the device's memory */
    const char *margin;          /* --margin, or NULL: 1 GiB (lj_cli_memory_budget) */
    lj_linear_recipe_kind linear_recipe;  /* the linears' recipe (its FP8 buffers are planned) */
    const lj_linear_fp8_options *fp8;     /* its FP8 settings, or NULL */
    int offload_optimizer;       /* --offload-optimizer cpu: the optimizer state is host memory, not planned
                                    on the device (GPU backends); the host part is checked */
    const char *host_memory;     /* --host-memory, or NULL: MemAvailable (lj_cli_host_check) */
    lj_dtype exp_avg_dtype, exp_avg_sq_dtype; /* AdamW's moments as stored (lj_cli_moments_resolve) */
    size_t *plan_bytes;          /* out, or NULL: the device plan's total (lj_plan_build) of the policy
                                    decided, as the planner built it: the run's own plan must equal it
                                    (lj_planner_check_plan) */
} lj_cli_recompute_request;

/* The recompute policy (and micro-batch size) of a run, decided before anything is allocated:
 *   - the planner (plan/planner.h) when q->recompute is "auto", when CHECKPOINT_OPTIMIZATION is
 *     on, or when q->auto_if_needed and the manual policy would not fit;
 *   - else Megatron's flags, checked against device memory.
 * *micro_batch_size: in, the size or 0 for auto (needs the planner); out, the size to use.
 * policy[LJ_MAX_LAYERS]: the lj_recompute of each layer. Prints what was chosen and why.
 * Errors: LJ_ERR_ARG (bad flags, a CHECKPOINT_OPTIMIZATION typo), LJ_ERR_OOM (nothing fits: the
 * smallest memory needed and what would make it fit). */
lj_status lj_cli_recompute(const lj_cli_recompute_request *q, int *micro_batch_size, uint8_t *policy);

/* The rows of the memory flags that train, benchmark and plan share (LJ_FLAG_SIZE: the text is
 * checked at parse; lj_cli_memory_budget and lj_cli_host_check read it with the same row):
 * --device-memory (1 MiB to 1 EiB), --margin (0, 1 MiB to 1 EiB, or a percentage below 100),
 * --host-memory (1 MiB to 1 EiB). `where`: a const char ** (NULL for a row that only reads). */
#define LJ_CLI_DEVICE_MEMORY_ROW(where) \
    {.name = "--device-memory", .kind = LJ_FLAG_SIZE, .dest = (where), .min = 1048576.0}
#define LJ_CLI_MARGIN_ROW(where) \
    {.name = "--margin", .kind = LJ_FLAG_SIZE, .dest = (where), .ival = LJ_FLAG_ZERO_OK | LJ_FLAG_PERCENT_OK, .min = 1048576.0}
#define LJ_CLI_HOST_MEMORY_ROW(where) \
    {.name = "--host-memory", .kind = LJ_FLAG_SIZE, .dest = (where), .min = 1048576.0}

/* --device-memory BYTES (a byte count with a unit, at least 1 MiB) and --margin BYTES|P% (kept
 * free below it) into a planner target; NULL leaves the target's value. Errors: LJ_ERR_ARG
 * naming the flag and the value. */
lj_status lj_cli_memory_budget(lj_planner_target *t, const char *device_memory, const char *margin);
/* Under optimizer offload (t->offload_optimizer), the host part of the plan against the host's
 * memory: `host_memory` (--host-memory, e.g. 64GiB) or else MemAvailable of /proc/meminfo, less a
 * 10% margin. Errors: LJ_ERR_OOM naming what the host part holds and what the host has;
 * LJ_ERR_ARG for a bad --host-memory. Without offload, or when the host's memory cannot be read
 * and none is given, LJ_OK. */
lj_status lj_cli_host_check(const lj_model_config *cfg, int seq_length, const lj_planner_target *t,
                            const char *host_memory);

/* --nproc-per-node N (N > 1) in argv: starts N ranks of `ljperf <cmd>` (parallel/dist.h lj_launch;
 * MPI ranks for --device cpu, NCCL ranks for --device cuda; --device auto (the default): NCCL
 * when this process sees a GPU, else MPI), waits for them, sets *status to the launcher's exit
 * status and returns 1. torchrun's flags beside it (lj_cli_torchrun_check): --master-addr and
 * --master-port are the NCCL workers' MASTER_ADDR and MASTER_PORT. Returns 0 when there is
 * nothing to launch (no flag, N = 1, or this process is already a rank). */
int lj_cli_maybe_launch(const char *cmd, int argc, char **argv, int *status);

/* torchrun's single-node flags as `ljperf train` takes them: --nnodes 1 (or 1:1), --node-rank 0,
 * --master-port P in 1..65535 (0: not given). Errors: LJ_ERR_ARG naming the flag and what to use
 * instead (several nodes: torchrun, srun or mpirun around ljperf). */
lj_status lj_cli_torchrun_check(const char *nnodes, int node_rank, int master_port);

/* The FP8 flags as given (cli/fp8.c), Megatron-LM's names: --fp8-format, --fp8-recipe,
 * --fp8-amax-history-len, --fp8-amax-compute-algo, --fp8-margin, --first-last-layers-bf16,
 * --num-layers-at-start-in-bf16, --num-layers-at-end-in-bf16, --fp8-param-gather (checked
 * against the run by lj_cli_megatron_fp8_param_gather, cli/megatron.h). */
typedef struct {
    const char *format, *recipe, *algo; /* NULL: not given */
    int history_len, margin, layers_start, layers_end; /* the values, where given */
    int history_len_given, margin_given, layers_start_given, layers_end_given; /* 1: the flag was given */
    int first_last_bf16;
    int param_gather;
} lj_cli_fp8;

void lj_cli_fp8_init(lj_cli_fp8 *f);
/* Writes the FP8 rows of a command's flag table (a section heading and one row per flag, pointing
 * into `f`) to rows[0..max) and returns how many: at most LJ_CLI_FP8_ROWS. */
#define LJ_CLI_FP8_ROWS 10
int lj_cli_fp8_rows(lj_cli_fp8 *f, lj_flag *rows, int max);

/* The dtype AdamW's moments are stored in (cli/moments.c), Megatron-LM's names:
 * --use-precision-aware-optimizer, --exp-avg-dtype fp32|bf16, --exp-avg-sq-dtype fp32|bf16. */
typedef struct {
    int precision_aware;
    const char *exp_avg, *exp_avg_sq; /* NULL: not given (fp32) */
} lj_cli_moments;

void lj_cli_moments_init(lj_cli_moments *f);
/* Writes the rows (a section heading and one row per flag, pointing into `f`) to rows[0..max)
 * and returns how many: at most LJ_CLI_MOMENTS_ROWS. */
#define LJ_CLI_MOMENTS_ROWS 4
int lj_cli_moments_rows(lj_cli_moments *f, lj_flag *rows, int max);
/* The rows' lines of --help. */
void lj_cli_moments_usage(FILE *out);
/* The stored dtypes of the flags for a run of ZeRO stage `zero_stage` (as asked) over `world`
 * ranks (optimizer offload: `offload` names the flag or config key that asked for it, NULL for
 * none): *exp_avg and *exp_avg_sq LJ_DTYPE_F32 (the default) or
 * LJ_DTYPE_BF16. As in Megatron-LM a dtype other than fp32 needs --use-precision-aware-optimizer,
 * which needs a sharded optimizer (stage >= 1); bf16 moments are refused by name under ZeRO-3
 * over several ranks and with offload (the host AdamW keeps f32). `print`: say what the moments
 * are. Errors: LJ_ERR_ARG naming the flag (fp16 and fp8 moments, any other value). */
lj_status lj_cli_moments_resolve(const lj_cli_moments *f, int zero_stage, int world, const char *offload, int print,
                                 lj_dtype *exp_avg, lj_dtype *exp_avg_sq);

/* The Qwen3-VL forms of plan and benchmark: parses argv for `cmd` (the error prefix) against its
 * own rows own[0..n_own), then the FP8 rows into `fp8` (both towers' block linears; NULL: none),
 * then the sample's into `s`; on --help prints usage and the flags to stdout. Returns 0 to go on,
 * 1 when the help was printed (exit 0), -1 on a bad flag (its message printed: exit 1). */
int lj_cli_vl_parse(const char *cmd, const lj_flag *own, int n_own, lj_cli_fp8 *fp8, lj_cli_vl_sample *s, int argc,
                    char **argv, void (*usage)(FILE *));
/* The FP8 lines of --help: the rows' help. */
void lj_cli_fp8_usage(FILE *out);
/* The recipe of the flags for a run of `cfg` on `ops`: the default recipe without --fp8-format,
 * else LJ_LINEAR_RECIPE_FP8 with its options (--fp8-param-gather copied into them; its rules are
 * lj_cli_megatron_fp8_param_gather's). Checked before anything is planned: values,
 * combinations, and the backend (a GPU without FP8 tensor cores or a toolkit without FP8 GEMMs is
 * LJ_ERR_UNSUPPORTED naming what is missing; the CPU runs the emulation and says so; a GPU-less
 * description is planned as is). Errors: LJ_ERR_ARG, LJ_ERR_UNSUPPORTED (blockwise on a GPU
 * without cuBLASLt 12.9's block scales or not Hopper, and until its GPU check has passed). */
lj_status lj_cli_fp8_resolve(const lj_cli_fp8 *f, const lj_ops *ops, const lj_model_config *cfg,
                             lj_linear_recipe_kind *recipe, lj_linear_fp8_options *o);
/* Once the micro-batch is known: cuBLASLt's block-scaled GEMM needs both outer dimensions of each
 * GEMM to be multiples of 4 (cuBLASLt API reference, "128-element 1D and 128x128 2D block
 * scaling", scaling factors layouts), so the blockwise recipe on the CUDA backend needs
 * micro-batch x sequence tokens and the linears' widths multiples of 4. LJ_OK for any other
 * recipe or backend (the CPU emulation takes any shape). Errors: LJ_ERR_ARG naming the flags. */
lj_status lj_cli_fp8_check_tokens(lj_linear_recipe_kind recipe, const lj_linear_fp8_options *o, const lj_ops *ops,
                                  const lj_model_config *cfg, int micro_batch_size, int seq_length);
/* 1 when any FP8 flag was given (--fp8-format or another of the rows). */
int lj_cli_fp8_given(const lj_cli_fp8 *f);
/* The FP8 flags of a Qwen3-VL run (train, benchmark, plan: cli/train_vl.c, cli/benchmark_vl.c,
 * cli/plan_vl.c), whose decoder and vision tower both run the recipe in their blocks
 * (model/vl.h): lj_cli_fp8_resolve against the decoder (cfg->text: --first-last-layers-bf16
 * counts the decoder's layers; the tower's blocks all stay FP8), lj_cli_fp8_check_tokens for
 * micro_batch_size x seq_length tokens, and on CUDA the tower's widths (multiples of 8 for
 * cuBLASLt's FP8 GEMM). --fp8-param-gather is refused by name. Errors: LJ_ERR_ARG naming the
 * flag, LJ_ERR_UNSUPPORTED (the backend), as lj_cli_fp8_resolve. */
lj_status lj_cli_fp8_resolve_vl(const lj_cli_fp8 *f, const lj_ops *ops, const lj_vl_config *cfg,
                                int micro_batch_size, int seq_length, lj_linear_recipe_kind *recipe,
                                lj_linear_fp8_options *o);


/* "ljperf CMD ARG ..." as a POSIX shell reads it back: each argument that holds anything but
 * letters, digits and -_./=:,+@% in single quotes (a quote inside as '\''). Malloc'd; free it.
 * For the start record of --log-json. */
char *lj_cli_command_line(const char *cmd, int argc, char **argv);

/* The multimodal branch of prepare (cli/prepare_mm.c): wanted with --image-root or a tar input.
 * min_pixels / max_pixels: the flags' values, -1 where not given (0 is refused). */
int lj_cli_prepare_mm_wanted(const char *image_root, const char *const *inputs, int n);
int lj_cli_prepare_mm(const char *const *inputs, int n, const char *prefix, const char *tokenizer,
                      const char *image_root, int64_t min_pixels, int64_t max_pixels, int utf8_replace, int quiet);

#endif

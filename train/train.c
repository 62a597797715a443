/* train.c: the training loop (see train.h). */
#include "base/fs.h"
#include "train/train.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "data/loader.h"
#include "parallel/dp.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/state.h"
#include "io/hf.h"
#include "plan/build.h"
#include "plan/plan.h"
#include "plan/planner.h"
#include "train/profile.h"
#include "train/tensorboard.h"
#include "optim/offload.h"
#include "parallel/parallel.h"

static volatile sig_atomic_t g_stop_signal;

static void on_signal(int sig) { g_stop_signal = sig; }

void lj_train_config_defaults(lj_train_config *c) {
    memset(c, 0, sizeof *c);
    c->micro_batch_size = 4;
    c->seq_length = 256;
    c->global_batch_size = 0; /* = micro-batch size */
    c->train_iters = 100;
    c->log_interval = 1;
    c->tensorboard_log_interval = 1;
    c->tensorboard_queue_size = 1000;
    c->eval_interval = 0;
    c->eval_iters = 10;
    c->seed = 1234;
    c->fused = 1;
    c->lr = (lj_lr_schedule){.lr = 3e-4, .min_lr = 0.0, .style = LJ_LR_COSINE, .step_size = 1}; /* Megatron: --min-lr 0 */
    c->adamw = (lj_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, LJ_WD_MEGATRON, 0, 0};
    c->split = "969,30,1";
    c->keep_last = 2;
    c->hf_dtype = LJ_DTYPE_BF16;
    c->zero.overlap_comm = 1;
    c->check_nan = 1;
    c->max_skipped = 10;
    c->profile_step_start = 10; /* Megatron-LM's defaults */
    c->profile_step_end = 12;
    c->memory_snapshot_path = "snapshot.json";
}

/* ---- the run's state -------------------------------------------------------------- */

typedef struct {
    const lj_train_config *cfg;
    lj_model model;
    lj_plan plan;
    lj_loader train_data, valid_data;
    int have_valid;
    lj_adamw_segment *segments;
    int num_segments;
    int accumulation;          /* micro-batches per iteration (of the current global batch under a ramp-up) */
    int64_t batch;             /* the global batch of the current (or last) iteration */
    int iteration;             /* iterations completed */
    int schedule_start;        /* the iteration the optimizer and LR schedule started at (lj_run_state) */
    int64_t schedule_start_samples; /* the consumed samples at schedule_start */
    int64_t consumed_samples;
    int32_t *tokens;           /* host [B, T+1] */
    FILE *log_json;
    long log_json_good;        /* bytes of --log-json up to its last complete line */
    int console_failed;        /* standard output could not be written: no more lines there */
    char sink_failure[1800];   /* the failed log sinks' messages ("" while all wrote) */
    lj_train_tb tb;            /* TensorBoard event file (rank 0, --tensorboard-dir) */
    lj_dp dp;                  /* data-parallel ranks (a world of one without a launcher) */
    int stop;                  /* a rank received SIGINT/SIGTERM: all stop after this iteration */
    int out_of_time;           /* a rank passed --exit-duration-in-mins: all save and exit */
    double start_sec;          /* lj_time_sec() at the start of the loop */
    int rank, world;
    lj_ckpt_lock save_lock;    /* rank 0 holds the lock of --save for the whole run */
    int skipped_total;         /* steps skipped for a non-finite gradient norm, this process */
    int skipped_in_a_row;      /* ... up to the last iteration (0: the last step was applied) */
    int final_save;            /* the run ends after this save: it writes the HF export even under --no-save-hf */
    lj_ckpt_async *async;      /* --async-save: the background writer (checkpoint/state.h) */
    lj_train_profiler prof;    /* --profile's window, --record-memory-history's snapshots */
} run;


static lj_status open_data(run *r) {
    const lj_train_config *c = r->cfg;
    lj_loader_config lc;
    memset(&lc, 0, sizeof lc);
    if (c->mock_data) {
        lc.num_datasets = 1;
        lc.mock_vocab_size = c->model.vocab_size;
    } else {
        LJ_TRY(lj_loader_parse_data_path(&lc, c->num_data_args, (const char *const *)c->data_args));
    }
    lc.seq_length = c->seq_length;
    lc.micro_batch_size = c->micro_batch_size;
    lc.seed = c->seed;
    lc.dp_rank = r->rank;
    lc.dp_world_size = r->world;
    snprintf(lc.split, sizeof lc.split, "%s", c->split);
    lc.which = LJ_SPLIT_TRAIN;
    LJ_TRY(lj_loader_init(&r->train_data, &lc));
    LJ_TRY(lj_loader_check_vocab(&r->train_data, c->model.vocab_size));
    if (!c->quiet) lj_loader_log_summary(&r->train_data);
    lc.which = LJ_SPLIT_VALID; /* rank 0 evaluates the whole valid split alone; under ZeRO-3 every
                                  rank runs the same forward (its layers are gathered collectively) */
    lc.dp_rank = 0;
    lc.dp_world_size = 1;
    if (c->num_valid_data_args > 0) { /* --valid-data-path: the whole of those datasets */
        lc.mock_vocab_size = 0;
        LJ_TRY(lj_loader_parse_data_path(&lc, c->num_valid_data_args, (const char *const *)c->valid_data_args));
        snprintf(lc.split, sizeof lc.split, "0,1,0");
    }
    if (r->rank == 0 || (c->zero.zero_stage == 3 && r->world > 1)) {
        if (lj_loader_init(&r->valid_data, &lc) == LJ_OK) r->have_valid = 1;
        else lj_log_warn("no validation data: %s", lj_error_message());
    }
    return LJ_OK;
}

/* ---- checkpoints (checkpoint/state.h) ----------------------------------------------- */

static lj_run_state state_of(run *r) {
    const lj_train_config *c = r->cfg;
    lj_run_state st = {
        .model_cfg = &c->model,
        .micro_batch_size = c->micro_batch_size,
        .seq_length = c->seq_length,
        .global_batch_size = c->global_batch_size,
        .seed = c->seed,
        .model = &r->model,
        .dp = &r->dp,
        .train_data = &r->train_data,
        .save = c->save,
        .keep_last = c->keep_last,
        .hf_dtype = c->hf_dtype,
        .tokenizer = c->tokenizer,
        .quiet = 0,
        .format = c->ckpt_format ? LJ_CKPT_FORMAT_TORCH : LJ_CKPT_FORMAT_TORCH_DIST,
        .save_hf = !c->no_save_hf || r->final_save || r->iteration >= c->train_iters,
        .async = r->async,
        .rampup = c->rampup,
        .iteration = r->iteration,
        .consumed_samples = r->consumed_samples,
        .schedule_start = r->schedule_start,
        .no_load_optim = c->no_load_optim,
        .override_data = c->override_data,
    };
    return st;
}

static lj_status checkpoint(run *r) {
    lj_run_state st = state_of(r);
    return lj_run_state_save(&st);
}

/* The end of the run: the last --async-save is written, sealed and published (or its failure
 * becomes the run's). Collective. */
static lj_status finish_saves(run *r, lj_status s) {
    if (!r->async) return s;
    lj_run_state st = state_of(r);
    const lj_status f = lj_run_state_finish(&st);
    lj_ckpt_async_free(r->async);
    r->async = NULL;
    return (s == LJ_OK || s == LJ_ERR_INTERRUPTED) && f != LJ_OK ? f : s;
}

/* The global batch of the iteration after `consumed` samples (the ramp-up's, else the constant one). */
static int64_t batch_at(const lj_train_config *c, int64_t consumed) {
    return c->rampup.start > 0 ? lj_rampup_batch(&c->rampup, consumed) : c->global_batch_size;
}

/* The samples the first `iterations` iterations consume. */
static int64_t batch_samples(const lj_train_config *c, int iterations) {
    return c->rampup.start > 0 ? lj_rampup_consumed(&c->rampup, iterations) : (int64_t)iterations * c->global_batch_size;
}

/* --rampup-batch-size on this many ranks: every global batch of the run a multiple of micro-batch x
 * ranks (Megatron-LM's consistency check, made before the first iteration instead of at the one it
 * fails). */
static lj_status check_rampup(const lj_train_config *c, int world) {
    const int64_t unit = (int64_t)c->micro_batch_size * world;
    int64_t consumed = 0;
    for (int it = 0; it < c->train_iters && consumed <= c->rampup.samples; it++) {
        const int64_t b = lj_rampup_batch(&c->rampup, consumed);
        if (b % unit != 0)
            return lj_fail(LJ_ERR_ARG, "--rampup-batch-size %lld %lld %lld: the global batch of iteration %d (%lld, "
                                       "after %lld samples) is not a multiple of --micro-batch-size %d x %d rank%s: "
                                       "the start batch and the increment must be multiples of %lld",
                           (long long)c->rampup.start, (long long)c->rampup.increment, (long long)c->rampup.samples,
                           it + 1, (long long)b, (long long)consumed, c->micro_batch_size, world, world > 1 ? "s" : "",
                           (long long)unit);
        consumed += b;
    }
    return LJ_OK;
}

static lj_status load_checkpoint(run *r) {
    lj_run_state st = state_of(r);
    const lj_status s = lj_run_state_load(&st, r->cfg->load);
    r->iteration = st.iteration;
    r->consumed_samples = st.consumed_samples;
    r->schedule_start = st.schedule_start;
    r->schedule_start_samples = batch_samples(r->cfg, r->schedule_start);
    if (s == LJ_OK && r->cfg->no_load_optim && r->iteration > 0)
        lj_log_info("--no-load-optim: the weights and the position (iteration %d) of %s; the AdamW moments start at "
                    "zero, the AdamW step count and the LR schedule start again (warm-up included)",
                    r->iteration, r->cfg->load);
    return s;
}

/* ---- the loop --------------------------------------------------------------------- */

static double evaluate(run *r) {
    lj_model *m = &r->model;
    lj_loader_reset(&r->valid_data);
    double sum = 0.0;
    for (int i = 0; i < r->cfg->eval_iters; i++) {
        lj_loader_next(&r->valid_data, r->tokens);
        lj_model_set_batch(m, r->tokens);
        lj_model_forward(m, 0, 0.0f);
        sum += lj_model_mean_loss(m);
    }
    return sum / r->cfg->eval_iters;
}

/* buf = the printf of x, or "null" when x is not finite (JSON has no inf or NaN). */
static void json_number(char *buf, size_t len, const char *fmt, double x) {
    if (isfinite(x)) snprintf(buf, len, fmt, x);
    else snprintf(buf, len, "null");
}

/* A validation loss that is not finite: the weights diverged; nothing is saved after it.
 * Collective (the ranks that did not evaluate pass 0), so that every rank stops together. */
static lj_status check_eval(run *r, double loss) {
    float bad = !isfinite(loss);
    lj_dp_sum(&r->dp, &r->model, &bad, 1);
    if (bad == 0.0f) return LJ_OK;
    return lj_fail(LJ_ERR_ARG, "iteration %d: the validation loss is %f: training diverged, the state is not saved%s "
                               "(lower --lr or set --clip-grad)", r->iteration, loss,
                   r->cfg->save ? " and the latest checkpoint is left as it was" : "");
}

/* Saves the checkpoint unless the last step was skipped (its loss or gradient norm not finite):
 * such a state never becomes the latest checkpoint. */
static lj_status checkpoint_if_good(run *r) {
    if (r->skipped_in_a_row == 0) return checkpoint(r);
    if (r->rank == 0)
        lj_log_warn("iteration %d: not saved, the iteration was skipped (a non-finite loss or gradient norm)",
                    r->iteration);
    return LJ_OK;
}

/* ---- the log sinks: JSON lines, the console; TensorBoard in train/tensorboard.c ---- */

/* Notes a failed sink for the run's exit status (finish_sinks): each one, "; "-separated. */
static void note_sink_failure(run *r, const char *what) {
    const size_t n = strlen(r->sink_failure);
    snprintf(r->sink_failure + n, sizeof r->sink_failure - n, "%s%s", n ? "; " : "", what);
}

/* One --log-json line (with its newline), flushed. A failed write (a full disk) warns once, cuts
 * the file back to its last complete line, and stops the sink; training goes on. */
static void log_json_line(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_json_line(run *r, const char *fmt, ...) {
    if (!r->log_json) return;
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    const int n = vfprintf(r->log_json, fmt, ap);
    va_end(ap);
    if (n >= 0 && fflush(r->log_json) == 0 && !ferror(r->log_json)) {
        r->log_json_good += n;
        return;
    }
    const int err = errno ? errno : EIO;
    char what[600];
    snprintf(what, sizeof what, "--log-json %s: write failed at iteration %d (%s); the file keeps its %ld bytes of "
             "complete lines",
             r->cfg->log_json, r->iteration, strerror(err), r->log_json_good);
    lj_log_warn("%s; no more lines are written there", what);
    note_sink_failure(r, what);
    (void)ftruncate(fileno(r->log_json), r->log_json_good); /* a cut line out (fails on a device: harmless) */
    fclose(r->log_json);
    r->log_json = NULL;
}

/* A line on standard output. A failed write warns once (on stderr) and stops the lines. */
static void console_line(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void console_line(run *r, const char *fmt, ...) {
    if (r->console_failed) return;
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    const int n = vprintf(fmt, ap);
    va_end(ap);
    if (n >= 0 && fflush(stdout) == 0 && !ferror(stdout)) return;
    char what[600];
    snprintf(what, sizeof what, "standard output: write failed at iteration %d (%s)", r->iteration,
             strerror(errno ? errno : EIO));
    lj_log_warn("%s; no more iteration lines are printed", what);
    note_sink_failure(r, what);
    r->console_failed = 1;
}

/* Closes the sinks and returns the run's status: a failed log sink makes a run that succeeded
 * fail with LJ_ERR_IO (its log is incomplete; its checkpoints are not affected). */
static lj_status finish_sinks(run *r, lj_status s) {
    lj_train_tb_close(&r->tb);
    if (r->tb.failure[0]) note_sink_failure(r, r->tb.failure);
    if (r->log_json && fclose(r->log_json) != 0) {
        char what[600];
        snprintf(what, sizeof what, "--log-json %s: closing failed (%s)", r->cfg->log_json, strerror(errno));
        lj_log_warn("%s", what);
        note_sink_failure(r, what);
    }
    r->log_json = NULL;
    if (s != LJ_OK || !r->sink_failure[0]) return s;
    return lj_fail(LJ_ERR_IO, "the run finished, but its log is incomplete: %s (training and its checkpoints are not "
                              "affected; give the log room, e.g. free disk space, and rerun)",
                   r->sink_failure);
}

static void log_eval(run *r, double loss) {
    if (r->rank != 0) return;
    if (!r->cfg->quiet)
        console_line(r, "validation loss at iteration %d | lm loss value: %.6E | lm loss PPL: %.6E\n", r->iteration,
                     loss, exp(loss));
    if (r->log_json) {
        char text[40];
        json_number(text, sizeof text, "%.17g", loss);
        log_json_line(r, "{\"iteration\": %d, \"validation_loss\": %s}\n", r->iteration, text);
    }
    lj_train_tb_validation(&r->tb, r->iteration, r->consumed_samples, loss);
}

static lj_status setup(run *r) {
    const lj_train_config *c = r->cfg;
    if (c->seq_length > c->model.max_position_embeddings)
        return lj_fail(LJ_ERR_ARG, "--seq-length %d is above the model's max_position_embeddings: expected %d or less",
                       c->seq_length, c->model.max_position_embeddings);
    if (c->micro_batch_size <= 0 || c->seq_length <= 0 || c->train_iters < 0)
        return lj_fail(LJ_ERR_ARG, "--micro-batch-size, --seq-length must be positive and --train-iters >= 0");
    if (c->global_batch_size % c->micro_batch_size != 0)
        return lj_fail(LJ_ERR_ARG, "--global-batch-size %d is not a multiple of --micro-batch-size %d",
                       c->global_batch_size, c->micro_batch_size);
    char summary[512];
    snprintf(summary, sizeof summary,
             "model %s (V %d, d %d, L %d), backend %s, micro-batch %d, seq %d, global batch %d, iters %d, seed %llu",
             c->model.name, c->model.vocab_size, c->model.hidden_size, c->model.num_hidden_layers, c->ops->name,
             c->micro_batch_size, c->seq_length, c->global_batch_size, c->train_iters, (unsigned long long)c->seed);
    LJ_TRY(lj_dp_init(&r->dp, c->ops, c->zero.zero_stage, summary));
    r->dp.stage3_prefetch_bucket_size = c->zero.zero3_prefetch_numel;
    r->dp.stage3_max_live_parameters = c->zero.zero3_max_live_numel;
    r->dp.stage3_param_persistence_threshold = c->zero.zero3_persistence_numel;
    r->dp.overlap_comm = c->zero.overlap_comm;
    r->dp.reduce_bucket_size = c->zero.zero_reduce_bucket_numel;
    r->dp.offload_optimizer = c->offload_optimizer;
    LJ_TRY(lj_dp_offload_check(&r->dp, c->zero.zero_stage, c->offload_source ? c->offload_source : "offload"));
    if (r->dp.world > 1 && r->dp.zero_stage >= 2 && r->dp.rank == 0)
        lj_log_info("ZeRO stage %d: overlap_comm %s", r->dp.zero_stage,
                    r->dp.overlap_comm ? "on (collectives on their own stream, overlapped with compute)"
                                       : "off (the compute stream waits for each collective)");
    r->rank = r->dp.rank;
    r->world = r->dp.world;
    LJ_TRY(lj_train_profiler_init(&r->prof, c, r->rank, r->world));
    r->save_lock.fd = -1;
    /* one run saves into a --save root at a time: a second one stops here, before it trains */
    if (c->save && r->rank == 0) LJ_TRY(lj_ckpt_lock_acquire(&r->save_lock, c->save));
    if (c->save && c->async_save) r->async = lj_ckpt_async_create();
    if (c->global_batch_size % (c->micro_batch_size * r->world) != 0)
        return lj_fail(LJ_ERR_ARG, "--global-batch-size %d is not a multiple of --micro-batch-size %d x %d ranks",
                       c->global_batch_size, c->micro_batch_size, r->world);
    if (c->rampup.start > 0) LJ_TRY(check_rampup(c, r->world));
    r->batch = batch_at(c, 0);
    r->accumulation = (int)(r->batch / (c->micro_batch_size * r->world));
    if (r->rank != 0) lj_log_set_quiet(1);

    LJ_TRY(open_data(r));

    lj_model_setup setup = lj_model_setup_of(&r->dp, c->ops, &c->model, c->micro_batch_size, c->seq_length, c->fused,
                                             c->recompute);
    setup.model.linear_recipe = c->linear_recipe;
    setup.model.doc_mask = c->doc_mask;
    if (lj_doc_mask_any(&c->doc_mask)) /* the separator the data records (prepare's), else the model's EOS */
        LJ_TRY(lj_loader_eod_token(&r->train_data, c->doc_mask.eod_token, c->model.vocab_size, r->rank == 0,
                                   &setup.model.doc_mask.eod_token));
    setup.model.fp8 = c->fp8;
    setup.model.lr_groups = lj_adamw_lr_groups(&c->adamw);
    setup.model.exp_avg_dtype = c->exp_avg_dtype;
    setup.model.exp_avg_sq_dtype = c->exp_avg_sq_dtype;
    lj_model_build(&r->model, &r->plan, &setup, r->dp.dist);
    char buf[32];
    lj_log_info("model %s: %.2fM parameters, backend %s, micro-batch %d x seq %d, global batch %d (%d accumulation step%s)",
                c->model.name, (double)r->model.layout.total / 1e6, c->ops->name, c->micro_batch_size, c->seq_length,
                c->global_batch_size, c->global_batch_size / (c->micro_batch_size * r->world),
                c->global_batch_size / (c->micro_batch_size * r->world) == 1 ? "" : "s");
    if (c->rampup.start > 0)
        lj_log_info("--rampup-batch-size: the global batch starts at %lld and grows by %lld over %lld samples to %d "
                    "(%d to %d accumulation steps), as Megatron-LM's ramp-up", (long long)c->rampup.start,
                    (long long)c->rampup.increment, (long long)c->rampup.samples, c->global_batch_size,
                    (int)(c->rampup.start / (c->micro_batch_size * r->world)),
                    c->global_batch_size / (c->micro_batch_size * r->world));
    if (c->adamw.decoupled_lr)
        lj_log_info("--decoupled-lr: the embedding and the output layer%s train at %g (floor %g), the rest at --lr %g "
                    "(floor %g), on one schedule", c->model.tie_word_embeddings ? " (one tied weight)" : "",
                    c->lr.decoupled_lr, c->lr.decoupled_min_lr, c->lr.lr, c->lr.min_lr);
    lj_log_info("memory plan: %s in %d buffers", lj_format_bytes(r->plan.total_bytes, buf, sizeof buf), r->plan.count);
    if (r->rank == 0) lj_planner_check_plan("train", c->planned_plan_bytes, r->plan.total_bytes);
    const lj_layer_spec *ls = &r->model.spec;
    if (c->ops->config.deterministic && !c->doc_mask.reset_attention_mask && c->seq_length > 128 &&
        !lj_ops_attention_deterministic(c->ops, c->micro_batch_size, c->seq_length, ls->nh, ls->nkv, ls->hd))
        lj_log_warn("--deterministic-mode: the attention backward at this shape runs ljperf's own flash kernels (cuDNN "
                    "not found, or head_dim %d is not 64 or 128, or cuDNN has no deterministic backward for it), which "
                    "add dQ with atomics: steps may differ from run to run in the last bits", ls->hd);
    if (r->model.linear.fp8.active) {
        char what[200];
        lj_linear_fp8_describe(&c->fp8, what, sizeof what);
        lj_log_info("precision: %s; %d FP8 linears (lm_head, embedding, norms and attention in %s)%s", what,
                    r->model.linear.fp8.num_linears, lj_dtype_name(c->ops->act_dtype),
                    r->world > 1 ? "; amaxes are per rank (not reduced across ranks)" : "");
    }
    if (lj_offload_of(&r->model)) {
        size_t state, staging;
        lj_offload_bytes(&r->model, &state, &staging);
        char b2[32];
        lj_log_info("optimizer offload: %s of optimizer state in host memory (+%s staging), outside the plan",
                    lj_format_bytes(state, buf, sizeof buf), lj_format_bytes(staging, b2, sizeof b2));
    }
    LJ_TRY(lj_model_build_state(&r->model, &r->plan, c->seed));
    r->num_segments = lj_dp_segments(&r->model, &c->adamw, &r->segments);
    r->tokens = lj_malloc((size_t)c->micro_batch_size * (c->seq_length + 1) * sizeof(int32_t));
    if (c->load) LJ_TRY(load_checkpoint(r));
    if (c->save && r->rank == 0) LJ_TRY(lj_ckpt_check_save(c->save)); /* an unwritable --save now, not at the end */
    if (r->async) { /* the host copy of --async-save now, not in the first save's step */
        lj_run_state st = state_of(r);
        LJ_TRY(lj_run_state_reserve(&st));
    }
    lj_train_profiler_start(&r->prof, &r->model, &r->dp, &r->plan, r->iteration);
    if (c->log_json && r->rank == 0) {
        r->log_json = fopen(c->log_json, r->iteration > 0 ? "a" : "w");
        if (!r->log_json) return lj_fail(LJ_ERR_IO, "--log-json %s: cannot open for writing", c->log_json);
        fseek(r->log_json, 0, SEEK_END);
        r->log_json_good = ftell(r->log_json) > 0 ? ftell(r->log_json) : 0; /* appending after a resume */
    }
    if (c->tensorboard_dir && r->rank == 0) LJ_TRY(lj_train_tb_open(&r->tb, c, r->world, r->plan.total_bytes));
    /* the start record, after the event file's first record: on a nearly full disk the record's
     * write fails with a warning and the run goes on, where the event file's would stop it */
    if (r->log_json) {
        char precision[64];
        const lj_train_start start = {
            .iteration = r->iteration,
            .model = c->model.name,
            .parameters = r->model.layout.total,
            .precision = lj_train_precision(c->ops, r->model.linear.fp8.active, &c->fp8, precision, sizeof precision),
            .ops = c->ops,
            .devices = r->world,
            .micro_batch_size = c->micro_batch_size,
            .global_batch_size = c->global_batch_size,
            .seq_length = c->seq_length,
            .train_iters = c->train_iters,
            .command = c->command_line,
        };
        char *line = lj_train_start_record(&start);
        log_json_line(r, "%s", line);
        free(line);
    }
    return LJ_OK;
}

/* `s`: the run's status. A failed rank of several prints its error line first, before the MPI
 * teardown (lj_error_print). */
static void teardown(run *r, lj_status s) {
    if (s != LJ_OK && s != LJ_ERR_INTERRUPTED && r->dp.dist && r->dp.world > 1) lj_error_print(r->dp.rank, r->dp.world);
    if (r->model.layers) lj_train_profiler_finish(&r->prof, &r->model, &r->dp, &r->plan, r->iteration);
    lj_ckpt_async_free(r->async); /* NULL, or a writer finish_saves did not reach (a failed set-up) */
    r->async = NULL;
    lj_ckpt_lock_release(&r->save_lock);
    if (r->log_json) fclose(r->log_json);
    lj_train_tb_close(&r->tb);
    free(r->tokens);
    free(r->segments);
    if (r->plan.buffers) {
        lj_plan_release(&r->plan, r->cfg->ops);
        lj_plan_free(&r->plan);
    }
    if (r->model.layers) lj_model_free(&r->model);
    lj_loader_free(&r->train_data);
    if (r->have_valid) lj_loader_free(&r->valid_data);
    if (r->dp.dist) lj_dp_free(&r->dp);
}

/* One iteration: accumulation micro-batches of forward + backward, then the AdamW step. With
 * one micro-batch per rank the whole iteration is one lj_dp_train_step (on a single GPU with
 * graphs: zero-grad + forward + backward + norm + AdamW as one CUDA graph). Under a ramp-up the
 * global batch (and with it the number of micro-batches) is the one after the samples consumed so
 * far. *lr: the logged learning rate of each lr group. */
static void train_step(run *r, double *loss, double *grad_norm, lj_adamw_lr *lr) {
    const lj_train_config *c = r->cfg;
    lj_model *m = &r->model;
    r->batch = batch_at(c, r->consumed_samples);
    r->accumulation = (int)(r->batch / ((int64_t)c->micro_batch_size * r->world));
    const float dloss = 1.0f / (float)((int64_t)c->micro_batch_size * c->seq_length * r->accumulation * r->world);
    const int iteration = r->iteration + 1;
    const int step = iteration - r->schedule_start; /* the optimizer's step, 1 for the first update */
    /* Megatron-LM steps its OptimizerParamScheduler after optimizer.step(): update k runs at the
     * schedule's value after k - 1 steps (the first at --lr-warmup-init when warming up), and the
     * value logged for iteration k is the one after k steps (what update k + 1 will use); a step is
     * one iteration, or under --train-samples its global batch (under a ramp-up: the samples
     * consumed since the schedule started). A DeepSpeed config's scheduler (lj_lr_at gives it)
     * keeps DeepSpeed's own step rule. */
    lj_adamw_lr update_lr;
    if (c->lr.deepspeed.type != LJ_DS_SCHEDULER_NONE) {
        update_lr = *lr = lj_adamw_lr_of((float)lj_lr_at(&c->lr, step));
    } else {
        double before, after; /* the schedule's position before and after this step */
        if (c->rampup.start > 0) {
            before = (double)(r->consumed_samples - r->schedule_start_samples);
            after = before + (double)r->batch;
        } else {
            const double size = (double)(c->lr.step_size > 0 ? c->lr.step_size : 1);
            before = (double)(step - 1) * size;
            after = (double)step * size;
        }
        for (int g = 0; g < LJ_ADAMW_LR_GROUPS; g++) {
            const int group = g < lj_adamw_lr_groups(&c->adamw) ? g : 0; /* an unused group: group 0's */
            update_lr.lr[g] = (float)lj_lr_group_at(&c->lr, group, before);
            lr->lr[g] = (float)lj_lr_group_at(&c->lr, group, after);
        }
    }
    double sum = 0.0;
    lj_model_range_push(m, "train_step");
    if (r->accumulation == 1) {
        lj_loader_next(&r->train_data, r->tokens);
        lj_model_set_batch(m, r->tokens); /* uploaded in stream order before the step */
        *grad_norm = lj_dp_train_step(&r->dp, m, r->segments, r->num_segments, &c->adamw, update_lr, step, dloss);
        sum = lj_model_mean_loss(m); /* the losses of this step's forward (the update leaves them) */
    } else {
        lj_model_zero_grads(m);
        for (int micro = 0; micro < r->accumulation; micro++) {
            lj_loader_next(&r->train_data, r->tokens);
            lj_model_set_batch(m, r->tokens);
            lj_model_forward_backward(m, dloss);
            sum += lj_model_mean_loss(m);
        }
        *grad_norm = lj_dp_optimizer_step(&r->dp, m, r->segments, r->num_segments, &c->adamw, update_lr, step);
    }
    const int late = c->exit_duration_min > 0 && lj_time_sec() - r->start_sec > c->exit_duration_min * 60.0;
    float scalars[3] = {(float)(sum / r->accumulation), (float)(g_stop_signal != 0), (float)late};
    lj_dp_sum(&r->dp, m, scalars, 3);
    lj_model_range_pop(m);
    *loss = r->world > 1 ? (double)scalars[0] / r->world : sum / r->accumulation;
    r->stop = scalars[1] > 0.0f; /* every rank stops at the same iteration */
    r->out_of_time = scalars[2] > 0.0f;
    r->iteration = iteration;
    r->consumed_samples += r->batch;
}

lj_status lj_train_run(const lj_train_config *cfg) {
    run r;
    memset(&r, 0, sizeof r);
    r.cfg = cfg;
    r.save_lock.fd = -1;
    lj_status s = setup(&r);
    if (s != LJ_OK) {
        teardown(&r, s);
        return s;
    }
    g_stop_signal = 0;
    struct sigaction sa, old_int, old_term, old_usr1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGUSR1, &sa, &old_usr1); /* the launcher's stop request through mpirun (and Slurm's --signal) */

    const double flops_per_token = lj_config_flops_per_token(&cfg->model, cfg->seq_length);
    int last_saved = r.iteration;
    const int decoupled = cfg->adamw.decoupled_lr;
    int64_t prev_batch = batch_at(cfg, r.consumed_samples);
    if (r.iteration >= cfg->train_iters && r.rank == 0 && cfg->load && r.iteration > 0)
        lj_log_info("the checkpoint is at iteration %d, not below --train-iters %d: nothing to train (raise "
                    "--train-iters to continue)",
                    r.iteration, cfg->train_iters);
    else if (r.iteration >= cfg->train_iters && r.rank == 0)
        lj_log_info("--train-iters %d: nothing to train", cfg->train_iters);
    /* The printed line is Megatron's: the lm loss is the mean over the iterations since the last
     * printed line, and so are the ms per iteration, tokens/s and TFLOP/s (the interval's time
     * over its iterations); --log-json and TensorBoard keep every iteration's own values. */
    double interval_loss = 0.0, interval_sec = 0.0, interval_tokens = 0.0;
    int interval_iters = 0, interval_all = 0, interval_skips_logged = 0;
    r.start_sec = lj_time_sec();
    while (r.iteration < cfg->train_iters && !r.stop) {
        /* Megatron-LM saves a checkpoint when the ramp-up changes the number of micro-batches
         * (training.py, before the iteration that runs with the new batch) */
        const int64_t next_batch = batch_at(cfg, r.consumed_samples);
        if (next_batch != prev_batch) {
            if (r.rank == 0) lj_log_info("ramping up batch size from %lld to %lld", (long long)prev_batch, (long long)next_batch);
            if (cfg->save && r.iteration > 0 && last_saved != r.iteration) {
                if ((s = checkpoint_if_good(&r)) != LJ_OK) break;
                last_saved = r.iteration;
            }
            prev_batch = next_batch;
        }
        lj_train_profiler_before(&r.prof, &r.model, &r.dp, r.iteration);
        const double t0 = lj_time_sec();
        double loss, grad_norm;
        lj_adamw_lr lr;
        train_step(&r, &loss, &grad_norm, &lr);
        const double dt = lj_time_sec() - t0;
        const double tokens = (double)r.batch * cfg->seq_length;
        const double tps = tokens / dt;
        interval_sec += dt;
        interval_tokens += tokens;
        interval_all++;
        char overflow[160];
        if (r.model.linear.fp8.active && lj_linear_fp8_overflow(&r.model.linear, overflow, sizeof overflow)) {
            s = lj_fail(LJ_ERR_ARG, "FP8 scales overflow at iteration %d: the amax of %s is not finite (the tensor "
                                    "holds inf or NaN; lower --lr, set --clip-grad, or keep that layer in bf16)",
                        r.iteration, overflow);
            break;
        }
        const int skipped = !isfinite(grad_norm) || !isfinite(loss);
        if (skipped) { /* no update was applied: a non-finite norm makes the AdamW op skip the step */
            r.skipped_total++;
            r.skipped_in_a_row++;
            if (cfg->check_nan) {
                s = lj_fail(LJ_ERR_ARG, "iteration %d: the %s is %f: training diverged; the update was skipped and the "
                                        "run stops (--check-for-nan-in-loss-and-grad, the default; lower --lr or set "
                                        "--clip-grad, or --no-check-for-nan-in-loss-and-grad to skip such steps)%s",
                            r.iteration, isfinite(loss) ? "gradient norm" : "loss", isfinite(loss) ? grad_norm : loss,
                            cfg->save ? "; the latest checkpoint is left as it was" : "");
                break;
            }
            if (r.rank == 0)
                lj_log_warn("iteration %d: the %s is %f: the update is skipped (%d skipped in a row, %d in all)",
                            r.iteration, isfinite(loss) ? "gradient norm" : "loss", isfinite(loss) ? grad_norm : loss,
                            r.skipped_in_a_row, r.skipped_total);
            if (cfg->max_skipped > 0 && r.skipped_in_a_row >= cfg->max_skipped) {
                s = lj_fail(LJ_ERR_ARG, "training diverged: %d iterations in a row (%d to %d) were skipped for a "
                                        "non-finite loss or gradient norm (--max-consecutive-skipped-iterations %d); "
                                        "lower --lr or set --clip-grad%s",
                            r.skipped_in_a_row, r.iteration - r.skipped_in_a_row + 1, r.iteration, cfg->max_skipped,
                            cfg->save ? "; the latest checkpoint is left as it was" : "");
                break;
            }
        } else {
            r.skipped_in_a_row = 0;
            interval_loss += loss; /* Megatron's averaged loss leaves skipped iterations out */
            interval_iters++;
        }
        const int logged = r.iteration % cfg->log_interval == 0 || r.iteration == 1 || r.iteration == cfg->train_iters;
        if (!cfg->quiet && r.rank == 0 && logged) {
            const double logged = interval_iters ? interval_loss / interval_iters : loss;
            const double mean_dt = interval_sec / interval_all, mean_tps = interval_tokens / interval_sec;
            interval_loss = interval_sec = interval_tokens = 0.0;
            interval_iters = interval_all = 0;
            char skips[64] = "";
            if (r.skipped_total > interval_skips_logged)
                snprintf(skips, sizeof skips, " | number of skipped iterations: %d", r.skipped_total - interval_skips_logged);
            interval_skips_logged = r.skipped_total;
            char dlr[64] = ""; /* Megatron-LM's line with --decoupled-lr */
            if (decoupled) snprintf(dlr, sizeof dlr, "decoupled learning rate: %.6E | ", lr.lr[1]);
            console_line(&r,
                         "iteration %6d/%6d | consumed samples: %9" PRId64 " | elapsed time per iteration (ms): %.1f | "
                         "learning rate: %.6E | %sglobal batch size: %" PRId64 " | lm loss: %.6E | grad norm: %.3f | "
                         "tokens/s: %.0f | throughput per GPU (TFLOP/s/GPU): %.3f%s\n",
                         r.iteration, cfg->train_iters, r.consumed_samples, mean_dt * 1e3, lr.lr[0], dlr, r.batch,
                         logged, grad_norm, mean_tps, mean_tps * flops_per_token / 1e12 / r.world, skips);
        }
        if (r.log_json) {
            char loss_text[40], norm_text[40]; /* JSON has no inf or NaN: null */
            json_number(loss_text, sizeof loss_text, "%.17g", loss);
            json_number(norm_text, sizeof norm_text, "%.9g", grad_norm);
            char extra[96] = ""; /* the decoupled group's lr, the batch of a ramp-up */
            if (decoupled) snprintf(extra, sizeof extra, ", \"decoupled_lr\": %.9g", lr.lr[1]);
            if (cfg->rampup.start > 0)
                snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", \"global_batch_size\": %" PRId64, r.batch);
            log_json_line(&r,
                          "{\"iteration\": %d, \"loss\": %s, \"lr\": %.9g%s, \"grad_norm\": %s, \"tokens_per_s\": %.1f, "
                          "\"step_ms\": %.3f, \"consumed_samples\": %" PRId64 ", \"tflops_per_gpu\": %.6g%s}\n",
                          r.iteration, loss_text, lr.lr[0], extra, norm_text, tps, dt * 1e3, r.consumed_samples,
                          tps * flops_per_token / 1e12 / r.world, skipped ? ", \"skipped\": true" : "");
        }
        const lj_train_tb_step tb_step = {r.iteration, r.consumed_samples, (int)r.batch, loss, lr.lr[0], grad_norm, dt,
                                          decoupled, lr.lr[1]};
        lj_train_tb_iteration(&r.tb, &tb_step);
        lj_train_profiler_after(&r.prof, &r.model, &r.dp, &r.plan, r.iteration, logged);
        if (cfg->eval_interval > 0 && cfg->eval_iters > 0 && r.iteration % cfg->eval_interval == 0) {
            const double vl = r.have_valid ? evaluate(&r) : 0.0;
            if (r.have_valid) log_eval(&r, vl);
            if ((s = check_eval(&r, vl)) != LJ_OK) break;
        }
        if (r.async) { /* a finished --async-save becomes the latest checkpoint now */
            lj_run_state st = state_of(&r);
            if ((s = lj_run_state_poll(&st)) != LJ_OK) break;
        }
        if (cfg->save && cfg->save_interval > 0 && r.iteration % cfg->save_interval == 0 && !r.skipped_in_a_row) {
            s = checkpoint(&r);
            if (s != LJ_OK) break;
            last_saved = r.iteration;
        }
        const int exit_now = cfg->exit_interval > 0 && r.iteration % cfg->exit_interval == 0;
        if ((exit_now || r.out_of_time) && r.iteration < cfg->train_iters) {
            if (r.rank == 0 && exit_now)
                lj_log_info("--exit-interval %d: exiting after iteration %d", cfg->exit_interval, r.iteration);
            else if (r.rank == 0)
                lj_log_info("--exit-duration-in-mins %g: exiting after iteration %d", cfg->exit_duration_min,
                            r.iteration);
            r.final_save = 1;
            if (cfg->save && last_saved != r.iteration) s = checkpoint_if_good(&r);
            s = finish_sinks(&r, finish_saves(&r, s));
            sigaction(SIGINT, &old_int, NULL);
            sigaction(SIGTERM, &old_term, NULL);
            sigaction(SIGUSR1, &old_usr1, NULL);
            teardown(&r, s);
            return s;
        }
    }
    if (s == LJ_OK && r.stop) {
        lj_log_info("received %s at iteration %d: stopping",
                    g_stop_signal == SIGINT    ? "SIGINT"
                    : g_stop_signal == SIGTERM ? "SIGTERM"
                    : g_stop_signal == SIGUSR1 ? "a stop request (SIGUSR1)"
                                               : "a signal (on another rank)",
                    r.iteration);
        r.final_save = 1;
        if (cfg->save && last_saved != r.iteration) s = checkpoint_if_good(&r);
        if (s == LJ_OK) s = lj_fail(LJ_ERR_INTERRUPTED, "interrupted at iteration %d%s", r.iteration,
                                    cfg->save ? " (checkpoint saved)" : " (no --save: nothing saved)");
    } else if (s == LJ_OK && r.skipped_in_a_row > 0) {
        /* the run ends on a step that was not applied: not a result to hand on as the latest */
        s = lj_fail(LJ_ERR_ARG, "training diverged: the last %d iteration(s), up to %d, were skipped for a non-finite "
                                "loss or gradient norm; the state is not saved%s (lower --lr or set --clip-grad)",
                    r.skipped_in_a_row, r.iteration, cfg->save ? " and the latest checkpoint is left as it was" : "");
    } else if (s == LJ_OK) {
        const int evaluated = cfg->eval_interval > 0 && r.iteration % cfg->eval_interval == 0;
        if (cfg->eval_iters > 0 && !evaluated) {
            const double vl = r.have_valid ? evaluate(&r) : 0.0;
            if (r.have_valid) log_eval(&r, vl);
            s = check_eval(&r, vl);
        }
        if (s == LJ_OK && cfg->save && last_saved != r.iteration) s = checkpoint(&r);
    }
    s = finish_sinks(&r, finish_saves(&r, s));
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    teardown(&r, s);
    return s;
}

/* tensorboard.c: the training run's TensorBoard scalars (tags and steps in tensorboard.h). */
#include "train/tensorboard.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

lj_status lj_train_tb_open(lj_train_tb *tb, const lj_train_config *c, int world, size_t plan_bytes) {
    memset(tb, 0, sizeof *tb);
    const char *flag = c->tensorboard_source ? c->tensorboard_source : "--tensorboard-dir";
    LJ_TRY(lj_tb_writer_open(&tb->writer, c->tensorboard_dir, c->tensorboard_queue_size, flag));
    tb->tb_interval = c->tensorboard_log_interval > 0 ? c->tensorboard_log_interval : 1;
    tb->log_interval = c->log_interval > 0 ? c->log_interval : 1;
    tb->train_iters = c->train_iters;
    tb->flops_per_token = lj_config_flops_per_token(&c->model, c->seq_length);
    tb->seq_length = c->seq_length;
    tb->world = world > 0 ? world : 1;
    tb->ops = c->ops;
    tb->plan_bytes = plan_bytes;
    lj_log_info("TensorBoard: writing %s (`tensorboard --logdir %s`; W&B imports it with `wandb sync "
                "--sync-tensorboard %s`)",
                lj_tb_writer_path(tb->writer), c->tensorboard_dir, c->tensorboard_dir);
    return LJ_OK;
}

/* A failed write stops the event file with one warning; training goes on. */
static void check(lj_train_tb *tb, lj_status s) {
    if (s == LJ_OK || !tb->writer) return;
    snprintf(tb->failure, sizeof tb->failure, "%s", lj_error_message());
    lj_log_warn("%s; no more TensorBoard events are written", tb->failure);
    lj_tb_writer_close(tb->writer);
    tb->writer = NULL;
}

static void scalar(lj_train_tb *tb, const char *tag, double value, int iteration, int64_t samples) {
    if (!tb->writer) return;
    check(tb, lj_tb_writer_add_scalar(tb->writer, tag, value, iteration));
    if (samples < 0 || !tb->writer) return;
    char vs[128];
    snprintf(vs, sizeof vs, "%s vs samples", tag);
    check(tb, lj_tb_writer_add_scalar(tb->writer, vs, value, samples));
}

/* Bytes in use: the device's (total - free) on a GPU, the process's resident set on the CPU. */
static double memory_used(const lj_ops *ops) {
    if (ops && strcmp(ops->name, "cpu") != 0) {
        size_t free_bytes = 0, total = 0;
        if (ops->memory_info && ops->memory_info(&free_bytes, &total) == LJ_OK) return (double)(total - free_bytes);
        return NAN;
    }
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return NAN;
    long pages = 0, resident = 0;
    const int n = fscanf(f, "%ld %ld", &pages, &resident);
    fclose(f);
    return n == 2 ? (double)resident * (double)sysconf(_SC_PAGESIZE) : NAN;
}

void lj_train_tb_iteration(lj_train_tb *tb, const lj_train_tb_step *s) {
    if (!tb->writer) return;
    tb->interval_seconds += s->step_seconds;
    tb->interval_tokens += (double)s->global_batch_size * tb->seq_length;
    tb->interval_iters++;
    const int it = s->iteration;
    if (it % tb->tb_interval == 0) {
        const int64_t n = s->consumed_samples;
        scalar(tb, "learning-rate", s->lr, it, n);
        if (s->has_decoupled_lr) scalar(tb, "decoupled-learning-rate", s->decoupled_lr, it, -1);
        scalar(tb, "batch-size", s->global_batch_size, it, n);
        scalar(tb, "lm loss", s->loss, it, n);
        scalar(tb, "loss-scale", 1.0, it, n);
        scalar(tb, "grad-norm", s->grad_norm, it, n);
    }
    if (it % tb->log_interval == 0 || it == 1 || it == tb->train_iters) {
        const double per_iter = tb->interval_seconds / tb->interval_iters;
        scalar(tb, "iteration-time", per_iter, it, -1);
        if (per_iter > 0) {
            const double tps = tb->interval_tokens / tb->interval_seconds;
            scalar(tb, "throughput", tps * tb->flops_per_token / 1e12 / tb->world, it, -1);
            scalar(tb, "tokens-per-sec", tps, it, -1);
        }
        scalar(tb, "mem-allocated-bytes", (double)tb->plan_bytes, it, -1);
        const double used = memory_used(tb->ops);
        if (isfinite(used)) scalar(tb, "mem-reserved-bytes", used, it, -1);
        tb->interval_seconds = tb->interval_tokens = 0.0;
        tb->interval_iters = 0;
        if (tb->writer) check(tb, lj_tb_writer_flush(tb->writer));
    }
}

void lj_train_tb_validation(lj_train_tb *tb, int iteration, int64_t consumed_samples, double loss) {
    if (!tb->writer) return;
    scalar(tb, "lm loss validation", loss, iteration, consumed_samples);
    scalar(tb, "lm loss validation ppl", exp(loss < 20.0 ? loss : 20.0), iteration, consumed_samples);
    if (tb->writer) check(tb, lj_tb_writer_flush(tb->writer));
}

void lj_train_tb_close(lj_train_tb *tb) {
    if (!tb->writer) return;
    lj_status s = lj_tb_writer_close(tb->writer);
    tb->writer = NULL;
    if (s != LJ_OK) {
        snprintf(tb->failure, sizeof tb->failure, "%s", lj_error_message());
        lj_log_warn("%s", tb->failure);
    }
}

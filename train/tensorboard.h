/* tensorboard.h: what a training run writes to TensorBoard (--tensorboard-dir, or the
 * DeepSpeed config's "tensorboard" section), on rank 0, with Megatron-LM's tag names:
 *
 *   every --tensorboard-log-interval iterations (step = iteration; each tag also as
 *   "<tag> vs samples" with step = consumed samples):
 *     lm loss          the iteration's mean loss over its global batch (nats per token)
 *     learning-rate    the iteration's learning rate
 *     decoupled-learning-rate  with --decoupled-lr, the embedding and output layer's (step =
 *                      iteration only, as Megatron-LM wrote it)
 *     batch-size       the iteration's global batch size (samples; it grows under --rampup-batch-size)
 *     grad-norm        the global gradient norm before clipping
 *     loss-scale       1 (bf16 and fp32 recipes use no loss scaling)
 *   at every log line (--log-interval, the first and the last iteration), step = iteration:
 *     iteration-time   mean seconds per iteration since the previous log line
 *     throughput       model TFLOP/s per GPU over the same iterations (the FLOP count of docs/reference.md, "MFU, stated once")
 *     tokens-per-sec   tokens per second of the whole job over the same iterations (their tokens
 *                      over their time)
 *     mem-allocated-bytes  the static memory plan of this rank (every device byte ljperf allocates)
 *     mem-reserved-bytes   CUDA: the device's used memory (total - free); CPU: the process's RSS
 *   after each evaluation (also "vs samples"):
 *     lm loss validation, lm loss validation ppl
 *
 * The event file is flushed at every log line and evaluation, so a live TensorBoard follows
 * the run. A write error (a full disk, a removed directory) is reported once as a warning and
 * stops the event file; training goes on. */
#ifndef LJ_TRAIN_TENSORBOARD_H
#define LJ_TRAIN_TENSORBOARD_H

#include "metrics/tensorboard.h"
#include "train/train.h"

typedef struct {
    lj_tb_writer *writer;      /* NULL: nothing is written */
    int tb_interval;           /* --tensorboard-log-interval */
    int log_interval, train_iters;
    double flops_per_token;    /* 6N + 12 L d s, docs/reference.md "MFU, stated once" */
    int seq_length;
    double interval_tokens;    /* the tokens of the iterations since the last log line */
    int world;                 /* data-parallel ranks */
    const lj_ops *ops;
    size_t plan_bytes;
    double interval_seconds;   /* summed since the last log line */
    int interval_iters;
    char failure[600];         /* the failed write's message, "" while every write succeeded */
} lj_train_tb;

/* One iteration's values, as the per-step line prints them. */
typedef struct {
    int iteration;
    int64_t consumed_samples;
    int global_batch_size;
    double loss, lr, grad_norm;
    double step_seconds;
    int has_decoupled_lr;      /* 1: decoupled_lr holds --decoupled-lr's group's */
    double decoupled_lr;
} lj_train_tb_step;

/* Opens the event file in c->tensorboard_dir and fills `tb` for a run of `world` ranks whose
 * memory plan is `plan_bytes`. Errors: as lj_tb_writer_open (LJ_ERR_IO naming the flag and the
 * directory when it cannot be created or written). */
lj_status lj_train_tb_open(lj_train_tb *tb, const lj_train_config *c, int world, size_t plan_bytes);

/* Writes one iteration's scalars (see the top); flushes at a log line. */
void lj_train_tb_iteration(lj_train_tb *tb, const lj_train_tb_step *s);

/* Writes a validation loss after iteration `iteration` and flushes. */
void lj_train_tb_validation(lj_train_tb *tb, int iteration, int64_t consumed_samples, double loss);

/* Flushes and closes the event file (a no-op when none is open). */
void lj_train_tb_close(lj_train_tb *tb);

#endif

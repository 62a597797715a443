/* monitor.h: the run-monitoring flags of `ljperf train`: Megatron-LM's TensorBoard flags
 * (--tensorboard-dir, --tensorboard-log-interval, --tensorboard-queue-size and the
 * --log-*-to-tensorboard switches, whose values ljperf always writes), Megatron's --wandb-*
 * flags, and the DeepSpeed config's "tensorboard", "wandb" and "csv_monitor" sections.
 *
 * ljperf writes TensorBoard event files itself and talks to no service: W&B settings print
 * how W&B imports the event files (`wandb sync --sync-tensorboard DIR`) instead of being
 * ignored. */
#ifndef LJ_CLI_MONITOR_H
#define LJ_CLI_MONITOR_H

#include "base/fs.h"
#include "cli/flags.h"
#include "train/train.h"

typedef struct {
    const char *tensorboard_dir;   /* --tensorboard-dir */
    int tensorboard_log_interval;  /* 0: not given */
    int tensorboard_queue_size;    /* 0: not given */
    int log_interval_given, queue_size_given;
    const char *wandb_flag;        /* the first --wandb-* flag given, for the message */
    const char *wandb_project, *wandb_entity, *wandb_exp_name, *wandb_save_dir;
    /* from the DeepSpeed config */
    char ds_source[LJ_PATH_MAX];
    char ds_tensorboard_dir[LJ_PATH_MAX]; /* tensorboard.output_path joined with job_name; "" if off */
    int ds_wandb;                         /* wandb.enabled */
    char ds_wandb_project[256], ds_wandb_team[256];
    int ds_csv;                           /* csv_monitor.enabled */
} lj_cli_monitor;

/* Writes the rows of these flags (pointing into `m`) to rows[0..max) and returns how many. */
int lj_cli_monitor_rows(lj_cli_monitor *m, lj_flag *rows, int max);

/* Checks the values the rows read. Errors: LJ_ERR_ARG naming the flag. */
lj_status lj_cli_monitor_check(const lj_cli_monitor *m);

/* Reads the "tensorboard" ({"enabled", "output_path", "job_name"}: DeepSpeed writes to
 * output_path/job_name, job_name defaulting to "DeepSpeedJobName"), "wandb" ({"enabled",
 * "project", "team", "group"}) and "csv_monitor" sections of the DeepSpeed config `path`.
 * Source: DeepSpeed deepspeed/monitor/config.py. Errors: LJ_ERR_IO naming the file,
 * LJ_ERR_FORMAT naming the file and the key ("ds.json: tensorboard.enabled: expected true or
 * false"). */
lj_status lj_cli_monitor_deepspeed(lj_cli_monitor *m, const char *path);

/* Sets the train config's TensorBoard fields (the flag wins over the DeepSpeed section) and, on
 * rank 0 (`print`), says what W&B and csv_monitor settings do. `m` must outlive `c`. */
void lj_cli_monitor_apply(lj_cli_monitor *m, lj_train_config *c, int print);

/* The usage lines of these flags. */
void lj_cli_monitor_usage(FILE *f);

#endif

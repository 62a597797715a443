/* monitor.c: TensorBoard and W&B flags and DeepSpeed sections of `ljperf train` (monitor.h). */
#include "cli/monitor.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "cli/cli.h"

void lj_cli_monitor_usage(FILE *f) {
    fprintf(f,
            "monitoring (rank 0):\n"
            "  --tensorboard-dir DIR         TensorBoard event files with Megatron-LM's tags (lm loss,\n"
            "                                learning-rate, grad-norm, batch-size and validation, each also\n"
            "                                \"vs samples\"; throughput, memory), flushed at every log line\n"
            "                                (also the DeepSpeed config's tensorboard section)\n"
            "  --tensorboard-log-interval N  scalars every N iterations (default 1)\n"
            "  --tensorboard-queue-size N    events kept in memory between writes (default 1000)\n"
            "  --log-timers-to-tensorboard, --log-memory-to-tensorboard, --log-validation-ppl-to-tensorboard\n"
            "                                accepted for Megatron-LM scripts: ljperf always writes these\n"
            "  --wandb-project P, --wandb-entity E, --wandb-exp-name N, --wandb-save-dir D\n"
            "                                ljperf talks to no service: it prints how W&B imports the event\n"
            "                                files (wandb sync --sync-tensorboard DIR); also the DeepSpeed\n"
            "                                config's wandb section\n");
}

int lj_cli_monitor_rows(lj_cli_monitor *m, lj_flag *rows, int max) {
    const lj_flag own[] = {
        {.name = "--tensorboard-dir", .kind = LJ_FLAG_STR, .dest = &m->tensorboard_dir},
        {.name = "--tensorboard-log-interval", .kind = LJ_FLAG_INT, .dest = &m->tensorboard_log_interval, .given = &m->log_interval_given, .min = 1},
        {.name = "--tensorboard-queue-size", .kind = LJ_FLAG_INT, .dest = &m->tensorboard_queue_size, .given = &m->queue_size_given, .min = 1},
        {.name = "--log-timers-to-tensorboard", .kind = LJ_FLAG_IGNORED, .help = "always written"},
        {.name = "--log-memory-to-tensorboard", .kind = LJ_FLAG_IGNORED, .help = "always written"},
        {.name = "--log-validation-ppl-to-tensorboard", .kind = LJ_FLAG_IGNORED, .help = "always written"},
        {.name = "--wandb-project", .kind = LJ_FLAG_STR, .dest = &m->wandb_project},
        {.name = "--wandb-entity", .kind = LJ_FLAG_STR, .dest = &m->wandb_entity},
        {.name = "--wandb-exp-name", .kind = LJ_FLAG_STR, .dest = &m->wandb_exp_name},
        {.name = "--wandb-save-dir", .kind = LJ_FLAG_STR, .dest = &m->wandb_save_dir},
    };
    const int n = (int)(sizeof own / sizeof own[0]);
    LJ_ASSERT(n <= max);
    memcpy(rows, own, sizeof own);
    return n;
}

lj_status lj_cli_monitor_check(const lj_cli_monitor *m) {
    if (m->log_interval_given && m->tensorboard_log_interval <= 0)
        return lj_fail(LJ_ERR_ARG, "--tensorboard-log-interval must be positive");
    if (m->queue_size_given && m->tensorboard_queue_size <= 0)
        return lj_fail(LJ_ERR_ARG, "--tensorboard-queue-size must be positive");
    return LJ_OK;
}

/* section.key as a bool (absent: *out unchanged). */
static lj_status get_bool(const cJSON *sec, const char *sname, const char *key, const char *src, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sec, key);
    if (!v) return LJ_OK;
    if (!cJSON_IsBool(v)) return lj_fail(LJ_ERR_FORMAT, "%s: %s.%s: expected true or false", src, sname, key);
    *out = cJSON_IsTrue(v);
    return LJ_OK;
}

/* section.key as a string into buf (absent: buf unchanged). */
static lj_status get_str(const cJSON *sec, const char *sname, const char *key, const char *src, char *buf, size_t len) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sec, key);
    if (!v || cJSON_IsNull(v)) return LJ_OK;
    if (!cJSON_IsString(v)) return lj_fail(LJ_ERR_FORMAT, "%s: %s.%s: expected a string", src, sname, key);
    if (strlen(v->valuestring) >= len)
        return lj_fail(LJ_ERR_FORMAT, "%s: %s.%s: longer than %zu bytes", src, sname, key, len - 1);
    snprintf(buf, len, "%s", v->valuestring);
    return LJ_OK;
}

static lj_status read_sections(lj_cli_monitor *m, const cJSON *root, const char *src) {
    const cJSON *tb = cJSON_GetObjectItemCaseSensitive(root, "tensorboard");
    if (tb) {
        if (!cJSON_IsObject(tb)) return lj_fail(LJ_ERR_FORMAT, "%s: tensorboard: expected an object", src);
        int enabled = 0;
        char out[LJ_PATH_MAX] = "", job[1024] = "DeepSpeedJobName";
        LJ_TRY(get_bool(tb, "tensorboard", "enabled", src, &enabled));
        LJ_TRY(get_str(tb, "tensorboard", "output_path", src, out, sizeof out));
        LJ_TRY(get_str(tb, "tensorboard", "job_name", src, job, sizeof job));
        if (enabled) {
            /* DeepSpeed: os.path.join(output_path, job_name) */
            if (out[0]) {
                if (lj_path_join(m->ds_tensorboard_dir, out, job) != LJ_OK) {
                    lj_error_prefix("%s: tensorboard.output_path", src);
                    return LJ_ERR_FORMAT;
                }
            } else {
                snprintf(m->ds_tensorboard_dir, sizeof m->ds_tensorboard_dir, "%s", job);
            }
        }
    }
    const cJSON *wb = cJSON_GetObjectItemCaseSensitive(root, "wandb");
    if (wb) {
        if (!cJSON_IsObject(wb)) return lj_fail(LJ_ERR_FORMAT, "%s: wandb: expected an object", src);
        LJ_TRY(get_bool(wb, "wandb", "enabled", src, &m->ds_wandb));
        LJ_TRY(get_str(wb, "wandb", "project", src, m->ds_wandb_project, sizeof m->ds_wandb_project));
        LJ_TRY(get_str(wb, "wandb", "team", src, m->ds_wandb_team, sizeof m->ds_wandb_team));
    }
    const cJSON *csv = cJSON_GetObjectItemCaseSensitive(root, "csv_monitor");
    if (csv) {
        if (!cJSON_IsObject(csv)) return lj_fail(LJ_ERR_FORMAT, "%s: csv_monitor: expected an object", src);
        LJ_TRY(get_bool(csv, "csv_monitor", "enabled", src, &m->ds_csv));
    }
    return LJ_OK;
}

lj_status lj_cli_monitor_deepspeed(lj_cli_monitor *m, const char *path) {
    snprintf(m->ds_source, sizeof m->ds_source, "%s", path);
    char *text = NULL;
    size_t size = 0;
    LJ_TRY(lj_file_read_all(path, &text, &size));
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return lj_fail(LJ_ERR_FORMAT, "%s: not valid JSON", path); /* lj_deepspeed_load names the line */
    lj_status s = read_sections(m, root, path);
    cJSON_Delete(root);
    return s;
}

void lj_cli_monitor_apply(lj_cli_monitor *m, lj_train_config *c, int print) {
    if (m->tensorboard_dir) {
        c->tensorboard_dir = m->tensorboard_dir;
        c->tensorboard_source = "--tensorboard-dir";
        if (print && m->ds_tensorboard_dir[0] && strcmp(m->ds_tensorboard_dir, m->tensorboard_dir) != 0)
            lj_log_info("%s: tensorboard section (%s) overridden by --tensorboard-dir %s", m->ds_source,
                        m->ds_tensorboard_dir, m->tensorboard_dir);
    } else if (m->ds_tensorboard_dir[0]) {
        c->tensorboard_dir = m->ds_tensorboard_dir;
        c->tensorboard_source = "tensorboard.output_path/job_name of the DeepSpeed config";
    }
    if (m->tensorboard_log_interval > 0) c->tensorboard_log_interval = m->tensorboard_log_interval;
    if (m->tensorboard_queue_size > 0) c->tensorboard_queue_size = m->tensorboard_queue_size;
    if (!print) return;
    m->wandb_flag = m->wandb_project    ? "--wandb-project"
                    : m->wandb_entity   ? "--wandb-entity"
                    : m->wandb_exp_name ? "--wandb-exp-name"
                    : m->wandb_save_dir ? "--wandb-save-dir"
                                        : NULL;
    const int wandb = m->wandb_flag || m->ds_wandb;
    if (wandb) {
        const char *project = m->wandb_project ? m->wandb_project : m->ds_wandb_project[0] ? m->ds_wandb_project : NULL;
        const char *entity = m->wandb_entity ? m->wandb_entity : m->ds_wandb_team[0] ? m->ds_wandb_team : NULL;
        char cmd[LJ_PATH_MAX + 600];
        snprintf(cmd, sizeof cmd, "wandb sync --sync-tensorboard%s%s%s%s %s", project ? " --project " : "",
                 project ? project : "", entity ? " --entity " : "", entity ? entity : "",
                 c->tensorboard_dir ? c->tensorboard_dir : "DIR");
        const char *from = m->wandb_flag ? m->wandb_flag : "the DeepSpeed config's wandb section";
        if (c->tensorboard_dir)
            lj_log_info("%s: ljperf does not send to W&B; it writes TensorBoard event files to %s, which W&B imports "
                        "with `%s`",
                        from, c->tensorboard_dir, cmd);
        else
            lj_log_info("%s: ljperf does not send to W&B, and no event files are written: add --tensorboard-dir DIR, "
                        "then import them with `%s`",
                        from, cmd);
    }
    if (m->ds_csv)
        lj_log_info("%s: csv_monitor is not written by ljperf; --log-json FILE has every iteration's values as JSON "
                    "lines",
                    m->ds_source);
}

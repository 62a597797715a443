/* start_record.c: the start record of --log-json (train.h lj_train_start). */
#include <cjson/cJSON.h>
#include <string.h>
#include <time.h>

#include "train/train.h"

const char *lj_train_precision(const lj_ops *ops, int fp8_active, const lj_linear_fp8_options *fp8, char *buf,
                               size_t len) {
    if (fp8_active && fp8) {
        snprintf(buf, len, "fp8 %s%s", fp8->hybrid ? "hybrid " : "", lj_fp8_recipe_name(fp8->recipe));
        return buf;
    }
    const lj_dtype d = ops ? ops->act_dtype : LJ_DTYPE_F32;
    snprintf(buf, len, "%s", d == LJ_DTYPE_BF16 ? "bf16" : d == LJ_DTYPE_F16 ? "fp16" : "fp32");
    return buf;
}

char *lj_train_start_record(const lj_train_start *s) {
    char date[32] = "";
    const time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "iteration", s->iteration);
    cJSON *o = cJSON_AddObjectToObject(root, "start");
    cJSON_AddStringToObject(o, "program", "ljperf");
    cJSON_AddStringToObject(o, "version", lj_version());
    cJSON_AddStringToObject(o, "commit", lj_build_commit());
    cJSON_AddStringToObject(o, "date", date);
    cJSON_AddStringToObject(o, "model", s->model ? s->model : "");
    cJSON_AddNumberToObject(o, "parameters", (double)s->parameters);
    cJSON_AddStringToObject(o, "precision", s->precision ? s->precision : "");
    cJSON_AddStringToObject(o, "backend", s->ops ? s->ops->name : "");
    const char *device = s->ops && s->ops->device_name ? s->ops->device_name() : NULL;
    cJSON_AddStringToObject(o, "device", device ? device : (s->ops ? s->ops->name : ""));
    cJSON_AddNumberToObject(o, "devices", s->devices > 0 ? s->devices : 1);
    cJSON_AddNumberToObject(o, "micro_batch_size", s->micro_batch_size);
    cJSON_AddNumberToObject(o, "global_batch_size", s->global_batch_size);
    cJSON_AddNumberToObject(o, "seq_length", s->seq_length);
    cJSON_AddNumberToObject(o, "train_iters", s->train_iters);
    if (s->command) cJSON_AddStringToObject(o, "command", s->command);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    LJ_ASSERT(text, "cJSON could not print the start record");
    const size_t n = strlen(text);
    char *line = lj_malloc(n + 2);
    memcpy(line, text, n);
    line[n] = '\n';
    line[n + 1] = '\0';
    cJSON_free(text);
    return line;
}

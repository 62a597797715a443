/* snapshot.c: the memory snapshot of a run (snapshot.h; the format: docs/reference.md). */
#include "plan/snapshot.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"

void lj_memory_timeline_sample(lj_memory_timeline *t, const lj_ops *ops, int iteration) {
    lj_memory_sample now = {iteration, iteration, lj_ops_allocated_bytes(), 0, 0};
    size_t free_bytes = 0, total = 0;
    if (!strcmp(ops->name, "cuda") && ops->memory_info && ops->memory_info(&free_bytes, &total) == LJ_OK) {
        now.device_used_bytes = total - free_bytes;
        now.device_total_bytes = total;
    }
    lj_memory_sample *last = t->count ? &t->samples[t->count - 1] : NULL;
    if (last && ((last->allocated_bytes == now.allocated_bytes && last->device_used_bytes == now.device_used_bytes &&
                  last->device_total_bytes == now.device_total_bytes) ||
                 t->count == LJ_MEMORY_SAMPLES_MAX)) {
        last->to_iteration = iteration;
        return;
    }
    if (t->count == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->samples = lj_realloc(t->samples, (size_t)t->cap * sizeof *t->samples);
    }
    t->samples[t->count++] = now;
}

void lj_memory_timeline_free(lj_memory_timeline *t) {
    free(t->samples);
    memset(t, 0, sizeof *t);
}

lj_status lj_memory_snapshot_path(char *buf, const char *path, int rank) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base) dot = path + strlen(path); /* os.path.splitext: a leading dot is no extension */
    return lj_path_format(buf, "%.*s_%d%s", (int)(dot - path), path, rank, dot);
}

/* Numbers as JSON numbers (doubles: exact below 2^53 bytes). */
static void add_bytes(cJSON *o, const char *key, size_t v) { cJSON_AddNumberToObject(o, key, (double)v); }

static double ms(double t, double t0) { return (t - t0) * 1e3; }

lj_status lj_memory_snapshot_write(const char *path, const lj_plan *plan, const lj_ops *ops, int rank, int world_size,
                                   int iteration, const lj_memory_timeline *t) {
    int n = 0;
    lj_ops_memory_summary sum;
    lj_ops_memory_event *ev = lj_ops_memory_events(&n, &sum);
    /* Which allocation is each arena's: the last allocation at its base that no later free gave back. */
    int arena_event[LJ_ARENA_COUNT], freed_later[LJ_ARENA_COUNT];
    for (int a = 0; a < LJ_ARENA_COUNT; a++) arena_event[a] = -1, freed_later[a] = 0;
    int *event_arena = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    for (int i = n - 1; i >= 0; i--) {
        event_arena[i] = -1;
        for (int a = 0; a < LJ_ARENA_COUNT; a++) {
            if (!plan->base[a] || ev[i].ptr != plan->base[a]) continue;
            if (ev[i].bytes < 0) freed_later[a] = 1;
            else if (!freed_later[a] && arena_event[a] < 0) arena_event[a] = i, event_arena[i] = a;
        }
    }

    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "ljperf memory snapshot");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddNumberToObject(root, "rank", rank);
    cJSON_AddNumberToObject(root, "world_size", world_size);
    cJSON_AddStringToObject(root, "backend", ops->name);
    cJSON_AddNumberToObject(root, "iteration", iteration);
    cJSON_AddNumberToObject(root, "time_ms", ms(lj_time_sec(), sum.start_sec));

    cJSON *p = cJSON_AddObjectToObject(root, "plan");
    add_bytes(p, "total_bytes", plan->total_bytes);
    cJSON *arenas = cJSON_AddArrayToObject(p, "arenas");
    for (int a = 0; a < LJ_ARENA_COUNT; a++) {
        if (plan->arena_bytes[a] == 0) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", lj_arena_name((lj_arena)a));
        add_bytes(o, "bytes", plan->arena_bytes[a]);
        if (arena_event[a] >= 0) cJSON_AddNumberToObject(o, "allocated_ms", ms(ev[arena_event[a]].time_sec, sum.start_sec));
        else cJSON_AddNullToObject(o, "allocated_ms"); /* before the recording started */
        cJSON *bufs = cJSON_AddArrayToObject(o, "buffers");
        for (int b = 0; b < plan->count; b++) {
            const lj_plan_buffer *pb = &plan->buffers[b];
            if (pb->arena != (lj_arena)a || pb->bytes == 0) continue;
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "name", pb->name);
            add_bytes(x, "offset", pb->offset);
            add_bytes(x, "bytes", pb->bytes);
            cJSON_AddItemToArray(bufs, x);
        }
        cJSON_AddItemToArray(arenas, o);
    }

    cJSON *al = cJSON_AddObjectToObject(root, "allocator");
    add_bytes(al, "baseline_bytes", sum.baseline);
    add_bytes(al, "allocated_bytes", lj_ops_allocated_bytes());
    add_bytes(al, "peak_bytes", sum.peak);
    cJSON_AddNumberToObject(al, "dropped_events", (double)sum.dropped);
    cJSON *events = cJSON_AddArrayToObject(al, "events");
    for (int i = 0; i < n; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "time_ms", ms(ev[i].time_sec, sum.start_sec));
        cJSON_AddStringToObject(x, "action", ev[i].bytes > 0 ? "alloc" : "free");
        add_bytes(x, "bytes", (size_t)(ev[i].bytes > 0 ? ev[i].bytes : -ev[i].bytes));
        add_bytes(x, "allocated_bytes", ev[i].allocated);
        if (event_arena[i] >= 0) cJSON_AddStringToObject(x, "arena", lj_arena_name((lj_arena)event_arena[i]));
        else cJSON_AddNullToObject(x, "arena");
        cJSON_AddItemToArray(events, x);
    }

    cJSON *samples = cJSON_AddArrayToObject(root, "samples");
    for (int i = 0; t && i < t->count; i++) {
        const lj_memory_sample *s = &t->samples[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "from_iteration", s->from_iteration);
        cJSON_AddNumberToObject(x, "to_iteration", s->to_iteration);
        add_bytes(x, "allocated_bytes", s->allocated_bytes);
        if (s->device_total_bytes) {
            add_bytes(x, "device_used_bytes", s->device_used_bytes);
            add_bytes(x, "device_total_bytes", s->device_total_bytes);
        }
        cJSON_AddItemToArray(samples, x);
    }
    free(event_arena);
    free(ev);

    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return lj_fail(LJ_ERR_IO, "--memory-snapshot-path %s: out of memory formatting the snapshot", path);
    const lj_status s = lj_file_write_atomic(path, text, strlen(text));
    free(text);
    if (s != LJ_OK) lj_error_prefix("--memory-snapshot-path");
    return s;
}

/* profile.c: the profile window and the memory snapshots of a training run (profile.h). */
#include "train/profile.h"

#include <string.h>

lj_status lj_train_profiler_init(lj_train_profiler *p, const lj_train_config *c, int rank, int world) {
    memset(p, 0, sizeof *p);
    p->cfg = c;
    for (int i = 0; i < c->num_profile_ranks && (c->profile || c->record_memory_history); i++)
        if (c->profile_ranks[i] >= world)
            return lj_fail(LJ_ERR_ARG, "--profile-ranks %d: this run has %d rank%s (0 to %d): give ranks below %d",
                           c->profile_ranks[i], world, world == 1 ? "" : "s", world - 1, world);
    p->profiled = c->num_profile_ranks == 0;
    for (int i = 0; i < c->num_profile_ranks; i++) p->profiled |= c->profile_ranks[i] == rank;
    p->window = c->profile && p->profiled;
    p->memory = c->record_memory_history && p->profiled;
    if (c->record_memory_history) LJ_TRY(lj_memory_snapshot_path(p->path, c->memory_snapshot_path, rank));
    return LJ_OK;
}

static void write_snapshot(lj_train_profiler *p, lj_model *m, lj_dp *dp, const lj_plan *plan, int done);

void lj_train_profiler_start(lj_train_profiler *p, lj_model *m, lj_dp *dp, const lj_plan *plan, int done) {
    const lj_train_config *c = p->cfg;
    char ranks[256] = "every rank";
    if (c->num_profile_ranks > 0) {
        int n = snprintf(ranks, sizeof ranks, "rank%s", c->num_profile_ranks > 1 ? "s" : "");
        for (int i = 0; i < c->num_profile_ranks && n < (int)sizeof ranks; i++)
            n += snprintf(ranks + n, sizeof ranks - (size_t)n, " %d", c->profile_ranks[i]);
    }
    if (c->profile && done > c->profile_step_start) {
        p->window = 0;
        if (dp->rank == 0)
            lj_log_info("--profile: the run starts after iteration %d, past --profile-step-start %d: no profile "
                        "window (it opens only there, as in Megatron-LM)",
                        done, c->profile_step_start);
    } else if (c->profile && dp->rank == 0) {
        lj_log_info("--profile: iterations %d to %d on %s: cudaProfilerStart before iteration %d, cudaProfilerStop "
                    "after iteration %d (what nsys profile --capture-range=cudaProfilerApi records), NVTX ranges "
                    "between; those iterations run without CUDA graphs",
                    c->profile_step_start + 1, c->profile_step_end, ranks, c->profile_step_start + 1,
                    c->profile_step_end);
    }
    if (c->record_memory_history && dp->rank == 0) {
        char first[LJ_PATH_MAX];
        if (lj_memory_snapshot_path(first, c->memory_snapshot_path, c->num_profile_ranks ? c->profile_ranks[0] : 0) ==
            LJ_OK)
            lj_log_info("--record-memory-history: the memory snapshot of %s (the plan's buffers, the allocator's "
                        "events, the bytes allocated per iteration; JSON, docs/reference.md) goes to %s%s after "
                        "set-up and every logged iteration",
                        ranks, first, c->num_profile_ranks == 1 || dp->world == 1 ? "" : " (one file per rank)");
    }
    if (p->memory) write_snapshot(p, m, dp, plan, done);
}

static void set_ranges(lj_model *m, lj_dp *dp, int on) {
    m->ranges = on;
    if (dp->dist) lj_dist_set_ranges(dp->dist, on ? m->ops->range_push : NULL, on ? m->ops->range_pop : NULL);
}

void lj_train_profiler_before(lj_train_profiler *p, lj_model *m, lj_dp *dp, int done) {
    if (!p->window || p->open || done != p->cfg->profile_step_start) return;
    const lj_ops *ops = m->ops;
    p->open = 1;
    if (ops->profiler_start && ops->profiler_start() != LJ_OK)
        lj_log_warn("--profile: %s (the NVTX ranges are on all the same)", lj_error_message());
    set_ranges(m, dp, 1);
    lj_log_info("--profile: the profile window opens before iteration %d (%s)", done + 1,
                ops->profiler_start ? "cudaProfilerStart; NVTX ranges on"
                                    : "the cpu backend has no CUDA profiler and no NVTX ranges: nothing is recorded");
}

static void close_window(lj_train_profiler *p, lj_model *m, lj_dp *dp, int done) {
    const lj_ops *ops = m->ops;
    set_ranges(m, dp, 0);
    if (ops->synchronize) ops->synchronize(); /* the window's last kernels are done before the capture ends */
    if (ops->profiler_stop && ops->profiler_stop() != LJ_OK) lj_log_warn("--profile: %s", lj_error_message());
    p->open = 0;
    p->window = 0;
    if (done == p->cfg->profile_step_end)
        lj_log_info("--profile: the profile window closes after iteration %d%s", done,
                    ops->profiler_stop ? " (cudaProfilerStop)" : "");
    else
        lj_log_info("--profile: the run ends after iteration %d, before --profile-step-end %d: the profile window "
                    "closes here%s",
                    done, p->cfg->profile_step_end, ops->profiler_stop ? " (cudaProfilerStop)" : "");
}

static void write_snapshot(lj_train_profiler *p, lj_model *m, lj_dp *dp, const lj_plan *plan, int done) {
    lj_memory_timeline_sample(&p->timeline, m->ops, done);
    if (lj_memory_snapshot_write(p->path, plan, m->ops, dp->rank, dp->world, done, &p->timeline) != LJ_OK) {
        lj_log_warn("%s; no more memory snapshots are written", lj_error_message());
        p->memory = 0;
    }
}

void lj_train_profiler_after(lj_train_profiler *p, lj_model *m, lj_dp *dp, const lj_plan *plan, int done, int logged) {
    if (p->open && done == p->cfg->profile_step_end) close_window(p, m, dp, done);
    if (p->memory && logged) write_snapshot(p, m, dp, plan, done);
}

void lj_train_profiler_finish(lj_train_profiler *p, lj_model *m, lj_dp *dp, const lj_plan *plan, int done) {
    if (!p->cfg) return;
    if (p->open) close_window(p, m, dp, done);
    if (p->memory && plan->buffers) write_snapshot(p, m, dp, plan, done);
    lj_memory_timeline_free(&p->timeline);
    p->cfg = NULL;
}

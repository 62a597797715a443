/* cases_adamw.c: the AdamW update (adamw_update with global_norm_sq: ops/cpu/adamw.c,
 * ops/cuda/adamw.cu), written once for every backend (case.h):
 *   - three steps with a fresh gradient each, clipping by the global norm, segments of their own
 *     weight decay and learning-rate group (a gap between two, and many short ones, more than one
 *     CUDA launch's segment table holds): the master weights and both moments against a double
 *     reference on the CPU (PyTorch's AdamW, ops.h), against the CPU's values on CUDA; the params
 *     copy (bf16 on CUDA) likewise; elements outside every segment keep their values;
 *   - with two learning-rate groups, the update captured as a graph with the step scalars
 *     poisoned, then replayed after uploading them, equal to the eager update (a backend with
 *     graphs);
 *   - an inactive clip (max_grad_norm far above the norm) gives the bits of no clip;
 *   - group 1 at group 0's rate gives the bits of no group; at another rate it leaves group 0;
 *   - a master_only segment updates the master and moments alone, its part of the params left;
 *   - bf16 moments (either or both) give the f32 update's master and params and its moments
 *     rounded to nearest even.
 * Rows: "adamw" in op_cases.c. */
#include <math.h>
#include <string.h>

#include "tests/ops/case.h"

static void adamw_ref(double *p, double *m, double *v, double g, double lr, double b1, double b2, double eps,
                      double wd, int t) {
    *m = b1 * *m + (1 - b1) * g;
    *v = b2 * *v + (1 - b2) * g * g;
    const double mh = *m / (1 - pow(b1, t)), vh = *v / (1 - pow(b2, t));
    *p -= lr * (wd * *p + mh / (sqrt(vh) + eps));
}

/* Segments over n elements: half at weight decay 0.1 (group 0), a gap of 3, a quarter at 0 (group
 * groups - 1), then runs of 17 alternating decay and (with two groups) group, up to 110, and the
 * rest at 0.05. Returns their count (at most 120). */
static int segments(int64_t n, int groups, lj_adamw_segment *seg) {
    int ns = 0;
    int64_t off = 0;
    seg[ns++] = (lj_adamw_segment){off, n / 2, 0.1f, 0, 0};
    off += n / 2 + 3;
    seg[ns++] = (lj_adamw_segment){off, n / 4, 0.0f, groups - 1, 0};
    off += n / 4;
    while (ns < 110 && off + 17 < n) {
        seg[ns] = (lj_adamw_segment){off, 17, ns % 2 ? 0.01f : 0.0f, groups == 2 ? ns % 2 : 0, 0};
        ns++;
        off += 17;
    }
    if (off < n) seg[ns++] = (lj_adamw_segment){off, n - off, 0.05f, 0, 0};
    return ns;
}

static const float k_lrs[2] = {1e-3f, 4e-4f};

/* Uploads the step scalars of step t for `groups` groups into sc (backend memory). */
static void set_scalars(lj_case_ctx *x, void *sc, const lj_adamw_hparams *hp, int groups, int t) {
    float s[2 * LJ_ADAMW_NUM_SCALARS];
    for (int k = 0; k < groups; k++) lj_adamw_step_scalars(s + k * LJ_ADAMW_NUM_SCALARS, hp, k_lrs[k], t);
    x->ops->upload(sc, s, (size_t)groups * LJ_ADAMW_NUM_SCALARS * sizeof(float));
}

/* d = {n, lr groups (1 or 2), clipping expected, 0, params aliased to master (a backend whose
 * params are f32: the CPU)}; param = max_grad_norm. */
static void update_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int64_t n = x->c->d[0];
    const int groups = x->c->d[1] == 2 ? 2 : 1, expect_clipped = (int)x->c->d[2];
    const int alias = x->c->d[4] && ops->param_dtype == LJ_DTYPE_F32;
    const float max_norm = (float)x->c->param;
    lj_case_shape(x, "n=%lld clip=%g groups=%d%s", (long long)n, max_norm, groups, alias ? " params=master" : "");
    lj_adamw_segment seg[120];
    const int ns = segments(n, groups, seg);
    const lj_adamw_hparams hp = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .max_grad_norm = max_norm};
    float *p0 = lj_case_rand(x, n, 1.0f), *zero = lj_case_zeros(x, n);
    void *master = lj_case_upload(x, p0, n, LJ_CASE_F32);
    void *params = alias ? master : lj_case_upload(x, p0, n, LJ_CASE_PARAM);
    void *m = lj_case_upload(x, zero, n, LJ_CASE_F32), *v = lj_case_upload(x, zero, n, LJ_CASE_F32);
    void *gn = lj_case_alloc(x, 1, LJ_CASE_F32), *ws = lj_case_scratch(x, ops->global_norm_workspace_bytes(n));
    void *sc = lj_case_alloc(x, 2 * LJ_ADAMW_NUM_SCALARS, LJ_CASE_F32);
    const int ref = lj_case_reference(x);
    double *pr = ref ? lj_case_to_double(x, p0, n) : NULL, *mr = ref ? lj_case_dzeros(x, n) : NULL;
    double *vr = ref ? lj_case_dzeros(x, n) : NULL;
    int clipped = 0;
    void *dg = NULL;
    for (int t = 1; t <= 3; t++) {
        const float *g = lj_case_rand(x, n, 0.05f);
        dg = lj_case_upload(x, g, n, LJ_CASE_GRAD);
        ops->global_norm_sq(gn, dg, n, ws);
        set_scalars(x, sc, &hp, groups, t);
        ops->adamw_update(params, master, dg, m, v, seg, ns, &hp, sc, gn);
        double norm = 0;
        for (int64_t i = 0; i < n; i++) norm += (double)g[i] * g[i];
        norm = sqrt(norm);
        const double clip = max_norm > 0 ? fmin(1.0, max_norm / (norm + 1e-6)) : 1.0;
        clipped |= clip < 1.0;
        if (ref)
            for (int s = 0; s < ns; s++)
                for (int64_t i = seg[s].offset; i < seg[s].offset + seg[s].count; i++)
                    adamw_ref(&pr[i], &mr[i], &vr[i], g[i] * clip, k_lrs[seg[s].lr_group], hp.beta1, hp.beta2, hp.eps,
                              seg[s].weight_decay, t);
    }
    lj_case_true(x, "adamw_update clipping", clipped == expect_clipped, "clipping active %d, expected %d", clipped,
                 expect_clipped);
    /* the CPU against double (v: 1e-5), CUDA against the CPU: fp32 state within 1e-6 / 1e-5 */
    const lj_harness_tol gpu = lj_harness_tol_gpu(1e-6, 1e-5);
    lj_case_output_at(x, "adamw_update master", master, n, LJ_CASE_F32, pr, x->c->tol, gpu);
    lj_case_output_at(x, "adamw_update m", m, n, LJ_CASE_F32, mr, x->c->tol, gpu);
    lj_case_output_at(x, "adamw_update v", v, n, LJ_CASE_F32, vr, x->c->tol_grad, gpu);
    if (!alias) /* the copy: the master's values, rounded to the param dtype */
        lj_case_output_at(x, "adamw_update params", params, n, LJ_CASE_PARAM, pr, x->c->tol,
                          lj_harness_tol_gpu(1e-2, 1e-2));
    if (groups == 2 && ops->graph_capture_begin) {
        /* one more update from the same state, eagerly and as a replayed graph captured with the
         * step scalars poisoned: the same kernel, so equal */
        void *e[3], *r[3];
        const void *src[3] = {master, m, v};
        for (int k = 0; k < 3; k++) {
            e[k] = lj_case_alloc(x, n, LJ_CASE_F32), r[k] = lj_case_alloc(x, n, LJ_CASE_F32);
            ops->copy(e[k], src[k], (size_t)n * sizeof(float));
            ops->copy(r[k], src[k], (size_t)n * sizeof(float));
        }
        void *ep = lj_case_alloc(x, n, LJ_CASE_PARAM), *rp = lj_case_alloc(x, n, LJ_CASE_PARAM);
        set_scalars(x, sc, &hp, groups, 4);
        ops->adamw_update(ep, e[0], dg, e[1], e[2], seg, ns, &hp, sc, gn);
        lj_case_poison(x, sc, 2 * LJ_ADAMW_NUM_SCALARS, LJ_CASE_F32);
        void *graph = NULL;
        lj_status st = ops->graph_capture_begin();
        if (st == LJ_OK) {
            ops->adamw_update(rp, r[0], dg, r[1], r[2], seg, ns, &hp, sc, gn);
            st = ops->graph_capture_end(&graph);
        }
        if (lj_case_true(x, "adamw_update graph capture", st == LJ_OK, "%s", st == LJ_OK ? "captured" : lj_error_message())) {
            set_scalars(x, sc, &hp, groups, 4);
            ops->graph_launch(graph);
            ops->graph_destroy(graph);
            lj_case_twin(x, "adamw_update graph replay master", r[0], e[0], n, LJ_CASE_F32, LJ_CASE_TOL_BITS);
            lj_case_twin(x, "adamw_update graph replay m", r[1], e[1], n, LJ_CASE_F32, LJ_CASE_TOL_BITS);
            lj_case_twin(x, "adamw_update graph replay v", r[2], e[2], n, LJ_CASE_F32, LJ_CASE_TOL_BITS);
        }
    }
}

/* One update of p0 (state zero) into fresh buffers: master, m, v. */
static void one_update(lj_case_ctx *x, const float *p0, const void *dg, const void *gn, const lj_adamw_segment *seg,
                       int ns, const lj_adamw_hparams *hp, const void *sc, void **out) {
    const int64_t n = x->c->d[0];
    float *zero = lj_case_zeros(x, n);
    out[0] = lj_case_upload(x, p0, n, LJ_CASE_F32);
    out[1] = lj_case_upload(x, zero, n, LJ_CASE_F32);
    out[2] = lj_case_upload(x, zero, n, LJ_CASE_F32);
    void *params = lj_case_upload(x, p0, n, LJ_CASE_PARAM);
    x->ops->adamw_update(params, out[0], dg, out[1], out[2], seg, ns, hp, sc, gn);
}

/* d = {n, 0, 0, 1}: an inactive clip gives the bits of no clip. */
static void clip_inactive_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int64_t n = x->c->d[0];
    lj_case_shape(x, "n=%lld", (long long)n);
    const lj_adamw_segment seg = {0, n, 0.1f, 0, 0};
    float *p0 = lj_case_rand(x, n, 1.0f), *g = lj_case_rand(x, n, 0.1f);
    void *dg = lj_case_upload(x, g, n, LJ_CASE_GRAD), *gn = lj_case_alloc(x, 1, LJ_CASE_F32);
    ops->global_norm_sq(gn, dg, n, lj_case_scratch(x, ops->global_norm_workspace_bytes(n)));
    lj_adamw_hparams hp = {0.9f, 0.999f, 1e-8f, 0.0f, LJ_DTYPE_F32, LJ_DTYPE_F32};
    void *sc = lj_case_alloc(x, LJ_ADAMW_NUM_SCALARS, LJ_CASE_F32);
    float s[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(s, &hp, 1e-3f, 1);
    ops->upload(sc, s, sizeof s);
    void *a[3], *b[3];
    one_update(x, p0, dg, gn, &seg, 1, &hp, sc, a);
    hp.max_grad_norm = 1e3f;
    one_update(x, p0, dg, gn, &seg, 1, &hp, sc, b);
    lj_case_twin(x, "adamw_update inactive clip == no clip", b[0], a[0], n, LJ_CASE_F32, LJ_CASE_TOL_BITS);
}

/* d = {n, 2, 0, 2}: group 1 at group 0's rate gives the bits of no group; at another rate it
 * moves group 1 and leaves group 0's bits. */
static void groups_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int64_t n = x->c->d[0], k = n / 3;
    lj_case_shape(x, "n=%lld", (long long)n);
    const lj_adamw_segment one[2] = {{0, k, 0.1f, 0, 0}, {k, n - k, 0.0f, 0, 0}};
    const lj_adamw_segment two[2] = {{0, k, 0.1f, 1, 0}, {k, n - k, 0.0f, 0, 0}};
    float *p0 = lj_case_rand(x, n, 1.0f), *g = lj_case_rand(x, n, 0.1f);
    void *dg = lj_case_upload(x, g, n, LJ_CASE_GRAD), *gn = lj_case_alloc(x, 1, LJ_CASE_F32);
    ops->global_norm_sq(gn, dg, n, lj_case_scratch(x, ops->global_norm_workspace_bytes(n)));
    const lj_adamw_hparams hp = {0.9f, 0.95f, 1e-8f, 1.0f, LJ_DTYPE_F32, LJ_DTYPE_F32};
    float same[2 * LJ_ADAMW_NUM_SCALARS], other[2 * LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(same, &hp, 1e-3f, 2);
    lj_adamw_step_scalars(same + LJ_ADAMW_NUM_SCALARS, &hp, 1e-3f, 2);
    lj_adamw_step_scalars(other, &hp, 1e-3f, 2);
    lj_adamw_step_scalars(other + LJ_ADAMW_NUM_SCALARS, &hp, 4e-3f, 2);
    void *sc_same = lj_case_alloc(x, 2 * LJ_ADAMW_NUM_SCALARS, LJ_CASE_F32);
    void *sc_other = lj_case_alloc(x, 2 * LJ_ADAMW_NUM_SCALARS, LJ_CASE_F32);
    ops->upload(sc_same, same, sizeof same);
    ops->upload(sc_other, other, sizeof other);
    void *a[3], *b[3], *c[3];
    one_update(x, p0, dg, gn, one, 2, &hp, sc_same, a);
    one_update(x, p0, dg, gn, two, 2, &hp, sc_same, b);
    one_update(x, p0, dg, gn, two, 2, &hp, sc_other, c);
    lj_case_twin(x, "adamw_update group 1 at group 0's lr == group 0", b[0], a[0], n, LJ_CASE_F32, LJ_CASE_TOL_BITS);
    lj_case_twin(x, "adamw_update another group-1 lr leaves group 0", (float *)c[0] + k, (float *)a[0] + k, n - k,
                 LJ_CASE_F32, LJ_CASE_TOL_BITS);
    if (lj_case_checks(x)) {
        const float *ca = lj_case_download(x, c[0], k, LJ_CASE_F32), *aa = lj_case_download(x, a[0], k, LJ_CASE_F32);
        int64_t moved = 0;
        for (int64_t i = 0; i < k; i++) moved += ca[i] != aa[i];
        lj_case_true(x, "adamw_update group 1 at its own lr", moved > k / 2, "%lld of %lld group-1 weights differ",
                     (long long)moved, (long long)k);
    }
}

/* d = {n, 1, 0, 3}: a master_only segment (at an odd offset, between two plain ones) updates the
 * master and moments as a plain one does, bit for bit, and leaves its part of the params as it
 * was; the plain segments write their copy as before. */
static void master_only_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int64_t n = x->c->d[0], k1 = n / 3 | 1, k2 = 2 * n / 3 + 3;
    const size_t sp = lj_dtype_size(ops->param_dtype);
    lj_case_shape(x, "n=%lld master only [%lld, %lld)", (long long)n, (long long)k1, (long long)k2);
    const lj_adamw_segment plain[3] = {{0, k1, 0.1f, 0, 0}, {k1, k2 - k1, 0.1f, 0, 0}, {k2, n - k2, 0.0f, 0, 0}};
    lj_adamw_segment mo[3];
    memcpy(mo, plain, sizeof mo);
    mo[1].master_only = 1;
    float *p0 = lj_case_rand(x, n, 1.0f), *g = lj_case_rand(x, n, 0.1f), *junk = lj_case_rand(x, n, 5.0f);
    void *dg = lj_case_upload(x, g, n, LJ_CASE_GRAD), *gn = lj_case_alloc(x, 1, LJ_CASE_F32);
    ops->global_norm_sq(gn, dg, n, lj_case_scratch(x, ops->global_norm_workspace_bytes(n)));
    const lj_adamw_hparams hp = {0.9f, 0.95f, 1e-8f, 1.0f, LJ_DTYPE_F32, LJ_DTYPE_F32};
    void *sc = lj_case_alloc(x, LJ_ADAMW_NUM_SCALARS, LJ_CASE_F32);
    float s[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(s, &hp, 1e-3f, 1);
    ops->upload(sc, s, sizeof s);
    void *a[3], *b[3];
    const float *init[3] = {p0, lj_case_zeros(x, n), lj_case_zeros(x, n)};
    for (int i = 0; i < 3; i++) {
        a[i] = lj_case_upload(x, init[i], n, LJ_CASE_F32);
        b[i] = lj_case_upload(x, init[i], n, LJ_CASE_F32);
    }
    /* the params start as other values (the codes a master_only range holds), so a copy shows */
    void *pa = lj_case_upload(x, junk, n, LJ_CASE_PARAM), *pb = lj_case_upload(x, junk, n, LJ_CASE_PARAM);
    void *held = lj_case_upload(x, junk, n, LJ_CASE_PARAM);
    ops->adamw_update(pa, a[0], dg, a[1], a[2], plain, 3, &hp, sc, gn);
    ops->adamw_update(pb, b[0], dg, b[1], b[2], mo, 3, &hp, sc, gn);
    static const char *what[3] = {"adamw_update master_only: master", "adamw_update master_only: m",
                                  "adamw_update master_only: v"};
    for (int i = 0; i < 3; i++) lj_case_twin(x, what[i], b[i], a[i], n, LJ_CASE_F32, LJ_CASE_TOL_BITS);
    lj_case_twin(x, "adamw_update master_only: its params untouched", (char *)pb + k1 * sp, (char *)held + k1 * sp,
                 k2 - k1, LJ_CASE_PARAM, LJ_CASE_TOL_BITS);
    lj_case_twin(x, "adamw_update master_only: the copy before it", pb, pa, k1, LJ_CASE_PARAM, LJ_CASE_TOL_BITS);
    lj_case_twin(x, "adamw_update master_only: the copy after it", (char *)pb + k2 * sp, (char *)pa + k2 * sp, n - k2,
                 LJ_CASE_PARAM, LJ_CASE_TOL_BITS);
    if (lj_case_checks(x)) {
        const float *ha = lj_case_download(x, pa, n, LJ_CASE_PARAM);
        int64_t copied = 0;
        for (int64_t i = k1; i < k2; i++) copied += ha[i] != junk[i];
        lj_case_true(x, "adamw_update master_only", copied > (k2 - k1) / 2,
                     "the plain segment wrote its copy (%lld of %lld changed)", (long long)copied,
                     (long long)(k2 - k1));
    }
}

/* Moments as bf16 host codes of f32 values (rounded to nearest even) and back. */
static void round_codes(const float *f, uint16_t *h, int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] = lj_f32_to_bf16(f[i]);
}

/* d = {n, 0, 0, 4}: moments stored as bf16 (m, v, or both: --exp-avg-dtype, --exp-avg-sq-dtype)
 * are f32 arithmetic with a rounded store. Three steps from bf16-representable state, each beside
 * the f32-moment update from the same moments: the master and params bit for bit the same, the
 * bf16 moments the f32 ones rounded to nearest even (after which the f32 twin takes them, rounded,
 * for the next step). */
static void bf16_moments_body(lj_case_ctx *x) {
    const lj_ops *ops = x->ops;
    const int64_t n = x->c->d[0];
    lj_case_shape(x, "n=%lld bf16 moments", (long long)n);
    if (!lj_case_checks(x)) return; /* twins and assertions only */
    lj_adamw_segment seg[120];
    const int ns = segments(n, 1, seg);
    const lj_adamw_hparams hp = {0.9f, 0.95f, 1e-8f, 1.0f, LJ_DTYPE_F32, LJ_DTYPE_F32};
    float *p0 = lj_case_rand(x, n, 1.0f), *m0 = lj_case_rand(x, n, 0.01f), *v0 = lj_case_zeros(x, n);
    for (int64_t i = 0; i < n; i++) v0[i] = lj_bf16_to_f32(lj_f32_to_bf16(m0[i] * m0[i] + 1e-6f));
    uint16_t *codes = (uint16_t *)lj_case_zeros(x, n), *got = (uint16_t *)lj_case_zeros(x, n);
    float *host = lj_case_zeros(x, n);
    static const int combos[3][2] = {{1, 1}, {1, 0}, {0, 1}};
    for (int c = 0; c < 3; c++) {
        lj_adamw_hparams hb = hp;
        hb.exp_avg_dtype = combos[c][0] ? LJ_DTYPE_BF16 : LJ_DTYPE_F32;
        hb.exp_avg_sq_dtype = combos[c][1] ? LJ_DTYPE_BF16 : LJ_DTYPE_F32;
        const float *init[2] = {m0, v0};
        void *fa[2], *fb[2]; /* the f32 twin's moments, and the tested ones */
        for (int k = 0; k < 2; k++) {
            fa[k] = lj_case_upload(x, init[k], n, LJ_CASE_F32);
            if (!combos[c][k]) {
                fb[k] = lj_case_upload(x, init[k], n, LJ_CASE_F32);
                continue;
            }
            fb[k] = lj_case_alloc(x, (n + 1) / 2, LJ_CASE_F32); /* n bf16 codes */
            round_codes(init[k], codes, n);
            ops->upload(fb[k], codes, (size_t)n * sizeof(uint16_t));
        }
        void *ma = lj_case_upload(x, p0, n, LJ_CASE_F32), *mb = lj_case_upload(x, p0, n, LJ_CASE_F32);
        void *pa = lj_case_upload(x, p0, n, LJ_CASE_PARAM), *pb = lj_case_upload(x, p0, n, LJ_CASE_PARAM);
        void *gn = lj_case_alloc(x, 1, LJ_CASE_F32), *ws = lj_case_scratch(x, ops->global_norm_workspace_bytes(n));
        void *sc = lj_case_alloc(x, LJ_ADAMW_NUM_SCALARS, LJ_CASE_F32);
        int64_t off = 0;
        for (int t = 1; t <= 3; t++) {
            void *dg = lj_case_upload(x, lj_case_rand(x, n, 0.05f), n, LJ_CASE_GRAD);
            ops->global_norm_sq(gn, dg, n, ws);
            set_scalars(x, sc, &hp, 1, t);
            ops->adamw_update(pa, ma, dg, fa[0], fa[1], seg, ns, &hp, sc, gn);
            ops->adamw_update(pb, mb, dg, fb[0], fb[1], seg, ns, &hb, sc, gn);
            for (int k = 0; k < 2; k++) {
                if (!combos[c][k]) continue;
                ops->download(host, fa[k], (size_t)n * sizeof(float));
                round_codes(host, codes, n);
                ops->download(got, fb[k], (size_t)n * sizeof(uint16_t));
                for (int64_t i = 0; i < n; i++) off += got[i] != codes[i];
                for (int64_t i = 0; i < n; i++) host[i] = lj_bf16_to_f32(codes[i]);
                ops->upload(fa[k], host, (size_t)n * sizeof(float)); /* the twin goes on from the stored values */
                ops->synchronize();
            }
        }
        char what[96];
        snprintf(what, sizeof what, "adamw_update bf16 moments (m %s, v %s)", combos[c][0] ? "bf16" : "f32",
                 combos[c][1] ? "bf16" : "f32");
        lj_case_true(x, what, off == 0, "%lld of %lld stored moments differ from the f32 update's, rounded",
                     (long long)off, (long long)(3 * n * (combos[c][0] + combos[c][1])));
        lj_case_twin(x, "adamw_update bf16 moments: master", mb, ma, n, LJ_CASE_F32, LJ_CASE_TOL_BITS);
        lj_case_twin(x, "adamw_update bf16 moments: params", pb, pa, n, LJ_CASE_PARAM, LJ_CASE_TOL_BITS);
        for (int k = 0; k < 2; k++)
            if (!combos[c][k])
                lj_case_twin(x, k ? "adamw_update bf16 moments: f32 v" : "adamw_update bf16 moments: f32 m", fb[k],
                             fa[k], n, LJ_CASE_F32, LJ_CASE_TOL_BITS);
    }
}

void lj_case_adamw(lj_harness *h, const lj_op_case *c, lj_harness_mode mode) {
    lj_case_each(h, c, mode,
                 c->d[3] == 1   ? clip_inactive_body
                 : c->d[3] == 2 ? groups_body
                 : c->d[3] == 3 ? master_only_body
                 : c->d[3] == 4 ? bf16_moments_body
                                : update_body);
}

/* test_vl_plan.c: the Qwen3-VL vision tower in the static memory plan (plan/build.h lj_vl_build,
 * model/vision.h lj_vision_plan), planned without a device:
 *   - the plan of the decoder with the tower grows, against the decoder's alone, by exactly the
 *     tower's parameter count x its bytes per parameter in the parameter, master-weight, gradient
 *     and optimizer arenas: 4 + 4 + 8 = 16 on the CPU (f32, the master weights are the
 *     parameters), 2 + 4 + 2 + 8 = 16 for a bf16 table (CUDA's dtypes);
 *   - its activation term for a stated image size equals the sum written out here buffer by
 *     buffer (docs/qwen3-vl-model.md, "Memory"), for qwen3-vl-2b at 448 x 448 and 1024 x 1024;
 *   - every buffer of the plan has a category (none is "other");
 *   - train's capacity (lj_vl_capacity), the benchmark's sample shapes (lj_vl_bench_shape_of) and
 *     the ViT's FLOP count (lj_vision_flops_per_frame) against hand-computed values;
 *   - the tower's recompute: one shared set of block tensors (recompute buffers) instead of one
 *     per block, the plan smaller by exactly depth - 1 of them;
 *   - the recompute planner of a Qwen3-VL run (plan/planner_vl.h): no recompute where the joint
 *     plan fits, the decoder's recompute where only that makes it fit (the joint plan then fits),
 *     the tower's recompute too where even full recompute of the decoder does not fit (when the
 *     planner may turn it on), and a refusal naming the smallest peak where nothing fits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "bench/benchmark_vl.h"
#include "plan/build.h"
#include "plan/planner.h"
#include "plan/planner_vl.h"

static size_t al(size_t bytes) { return (bytes + LJ_PLAN_ALIGN - 1) / LJ_PLAN_ALIGN * LJ_PLAN_ALIGN; }

/* The CPU table with CUDA's dtypes (bf16 parameters, activations and gradients): enough to plan
 * (the plan reads dtypes and workspace sizes only; nothing runs). */
static const lj_ops *bf16_table(void) {
    static lj_ops t;
    t = *lj_ops_cpu();
    t.name = "bf16-shaped";
    t.act_dtype = t.param_dtype = t.grad_dtype = LJ_DTYPE_BF16;
    return &t;
}

static lj_model_setup setup_of(const lj_ops *ops, const lj_vl_config *c, int B, int T) {
    lj_model_setup s = {.ops = ops, .cfg = &c->text};
    s.model.micro_batch_size = B;
    s.model.seq_length = T;
    s.model.training = 1;
    s.model.fused = 1;
    return s;
}

/* The decoder's plan and the decoder-with-tower's plan of the same run. */
static void two_plans(const lj_ops *ops, const lj_vl_config *c, int B, int T, int max_patches, lj_plan *text,
                      lj_plan *both, int64_t *nv) {
    const lj_model_setup s = setup_of(ops, c, B, T);
    lj_model m;
    lj_model_build(&m, text, &s, NULL);
    lj_model_free(&m);
    lj_vl vl;
    assert_int_equal(lj_vl_build(&vl, &m, both, &s, c, max_patches, B, NULL), LJ_OK);
    *nv = vl.vis.layout.total;
    lj_vl_free(&vl);
    lj_model_free(&m);
}

static void test_states_per_parameter(void **state) {
    (void)state;
    lj_vl_config c;
    assert_int_equal(lj_vl_config_preset("qwen3-vl-2b", &c), LJ_OK);
    const lj_ops *tables[2] = {lj_ops_cpu(), bf16_table()};
    for (int k = 0; k < 2; k++) {
        const lj_ops *ops = tables[k];
        lj_plan a, b;
        int64_t nv;
        two_plans(ops, &c, 1, 710, 784, &a, &b, &nv);
        assert_int_equal(nv, 406957056); /* docs/qwen3-vl-model.md: 407 M */
        const size_t sp = lj_dtype_size(ops->param_dtype), sg = lj_dtype_size(ops->grad_dtype);
        const size_t master = ops->param_dtype == LJ_DTYPE_F32 ? 0 : 4;
        const size_t n = (size_t)nv;
        assert_int_equal(b.arena_bytes[LJ_ARENA_PARAMS] - a.arena_bytes[LJ_ARENA_PARAMS], al(n * sp));
        assert_int_equal(b.arena_bytes[LJ_ARENA_MASTER] - a.arena_bytes[LJ_ARENA_MASTER], master ? al(n * master) : 0);
        assert_int_equal(b.arena_bytes[LJ_ARENA_GRADS] - a.arena_bytes[LJ_ARENA_GRADS], al(n * sg));
        assert_int_equal(b.arena_bytes[LJ_ARENA_OPTIMIZER] - a.arena_bytes[LJ_ARENA_OPTIMIZER], 2 * al(n * 4));
        /* 16 bytes per parameter either way (n*16 is a multiple of the alignment here) */
        const size_t states = (b.arena_bytes[LJ_ARENA_PARAMS] + b.arena_bytes[LJ_ARENA_MASTER] +
                               b.arena_bytes[LJ_ARENA_GRADS] + b.arena_bytes[LJ_ARENA_OPTIMIZER]) -
                              (a.arena_bytes[LJ_ARENA_PARAMS] + a.arena_bytes[LJ_ARENA_MASTER] +
                               a.arena_bytes[LJ_ARENA_GRADS] + a.arena_bytes[LJ_ARENA_OPTIMIZER]);
        assert_int_equal(sp + master + sg + 8, 16);
        assert_int_equal(states, n * 16);
        /* the breakdown's share of the tower says the same */
        lj_mem_breakdown bd;
        uint8_t rc[LJ_MAX_LAYERS] = {0};
        lj_mem_breakdown_of(&b, rc, c.text.num_hidden_layers, 0, 0, 0, &bd);
        assert_int_equal(bd.vision_bytes[LJ_MEM_PARAMETERS] + bd.vision_bytes[LJ_MEM_MASTER] +
                             bd.vision_bytes[LJ_MEM_GRADIENTS] + bd.vision_bytes[LJ_MEM_OPTIMIZER],
                         n * 16);
        assert_int_equal(bd.bytes[LJ_MEM_OTHER], 0);
        lj_plan_free(&a);
        lj_plan_free(&b);
    }
}

/* One block's saved tensors for Np patches: ln1, qkv, attention out, mid residual, ln2, fc1, gelu;
 * 4 norm statistics; lse. */
static size_t expected_block(const lj_vision_config *v, size_t a, size_t Np) {
    const size_t V = v->hidden_size, I = v->intermediate_size, heads = v->num_heads;
    return 4 * al(Np * V * a) + al(Np * 3 * V * a) + 2 * al(Np * I * a) + 4 * al(Np * 4) + al(heads * Np * 4);
}

/* The tower's and the joint's activations for Np patches of one image, batch rows N = B*T, by
 * the buffers of lj_vision_plan and lj_vl_init's plan entry; under the tower's recompute its
 * blocks keep none of theirs (their one shared set is a recompute buffer). */
static size_t expected_activations(const lj_vl_config *c, size_t a, size_t Np, size_t N, int recompute) {
    const lj_vision_config *v = &c->vision;
    const size_t V = v->hidden_size, heads = v->num_heads, hd = V / heads;
    const size_t P = lj_vision_patch_dim(v), m2 = (size_t)v->spatial_merge_size * v->spatial_merge_size;
    const size_t M = m2 * V, O = v->out_hidden_size, Nt = Np / m2, depth = v->depth;
    const size_t mergers = 1 + (size_t)v->num_deepstack, thd = c->text.head_dim;
    size_t x = 0;
    /* the batch: pixels, cu_seqlens, row ids, 2-D RoPE rows, the position grid's indices and weights */
    x += al(Np * P * a) + al((Np + 1) * 4) + al(Np * 4) + 2 * al(Np * hd / 2 * 4) + 2 * al(Np * 4 * 4);
    /* the position embeddings and the residual stream */
    x += al(Np * V * a) + (depth + 1) * al(Np * V * a);
    /* per block */
    if (!recompute) x += depth * expected_block(v, a, Np);
    /* per merger: norm, fc1, gelu [Nt, M]; out [Nt, O]; mean, rstd */
    x += mergers * (3 * al(Nt * M * a) + al(Nt * O * a) + 2 * al(Np * 4));
    /* the joint: image positions, row ids, MRoPE rows */
    x += al(Nt * 4) + al(N * 4) + 2 * al(N * thd / 2 * 4);
    return x;
}

static void test_activation_term(void **state) {
    (void)state;
    lj_vl_config c;
    assert_int_equal(lj_vl_config_preset("qwen3-vl-2b", &c), LJ_OK);
    const int sizes[2] = {448, 1024};
    const size_t patches[2] = {784, 4096};
    for (int k = 0; k < 2; k++) {
        lj_vl_bench_shape sh;
        assert_int_equal(lj_vl_bench_shape_of(&c, sizes[k], sizes[k], 512, &sh), LJ_OK);
        assert_int_equal(sh.patches, patches[k]);
        assert_int_equal(sh.seq_length, (int)patches[k] / 4 + 2 + 512);
        for (int t = 0; t < 2; t++) {
            const lj_ops *ops = t ? bf16_table() : lj_ops_cpu();
            const lj_model_setup s = setup_of(ops, &c, 1, sh.seq_length);
            lj_model m;
            lj_plan plan;
            lj_vl vl;
            assert_int_equal(lj_vl_build(&vl, &m, &plan, &s, &c, sh.patches, 1, NULL), LJ_OK);
            lj_mem_breakdown bd;
            uint8_t rc[LJ_MAX_LAYERS] = {0};
            lj_mem_breakdown_of(&plan, rc, c.text.num_hidden_layers, 0, 0, 0, &bd);
            const size_t want = expected_activations(&c, lj_dtype_size(ops->act_dtype), sh.patches, sh.seq_length, 0);
            print_message("qwen3-vl-2b %dx%d (%zu patches, %s): tower activations %.1f MiB\n", sizes[k], sizes[k],
                          patches[k], ops->name, (double)want / (1 << 20));
            assert_int_equal(bd.vision_bytes[LJ_MEM_ACTIVATIONS], want);
            assert_int_equal(bd.vision_bytes[LJ_MEM_RECOMPUTE], 0);
            assert_int_equal(bd.bytes[LJ_MEM_OTHER], 0);
            lj_plan_free(&plan);
            lj_vl_free(&vl);
            lj_model_free(&m);
        }
    }
}

/* The tower's recompute (model/vision.h): the blocks' saved tensors become one shared set in the
 * recompute buffers, so the plan shrinks by depth - 1 blocks' tensors and nothing else moves. */
static void test_vision_recompute_term(void **state) {
    (void)state;
    lj_vl_config c;
    assert_int_equal(lj_vl_config_preset("qwen3-vl-2b", &c), LJ_OK);
    lj_vl_bench_shape sh;
    assert_int_equal(lj_vl_bench_shape_of(&c, 1024, 1024, 512, &sh), LJ_OK);
    for (int t = 0; t < 2; t++) {
        const lj_ops *ops = t ? bf16_table() : lj_ops_cpu();
        const size_t a = lj_dtype_size(ops->act_dtype), block = expected_block(&c.vision, a, (size_t)sh.patches);
        size_t total[2], vision[2][LJ_MEM_COUNT];
        for (int r = 0; r < 2; r++) {
            lj_model_setup s = setup_of(ops, &c, 1, sh.seq_length);
            s.model.vision_recompute = r;
            lj_model m;
            lj_plan plan;
            lj_vl vl;
            assert_int_equal(lj_vl_build(&vl, &m, &plan, &s, &c, sh.patches, 1, NULL), LJ_OK);
            assert_int_equal(vl.vis.recompute, r);
            lj_mem_breakdown bd;
            uint8_t rc[LJ_MAX_LAYERS] = {0};
            lj_mem_breakdown_of(&plan, rc, c.text.num_hidden_layers, 0, 0, 0, &bd);
            assert_int_equal(bd.vision_bytes[LJ_MEM_ACTIVATIONS],
                             expected_activations(&c, a, sh.patches, sh.seq_length, r));
            assert_int_equal(bd.vision_bytes[LJ_MEM_RECOMPUTE], r ? block : 0);
            assert_int_equal(bd.bytes[LJ_MEM_OTHER], 0);
            total[r] = plan.total_bytes;
            memcpy(vision[r], bd.vision_bytes, sizeof vision[r]);
            int shared = 0;
            for (int i = 0; i < plan.count; i++) {
                shared += strncmp(plan.buffers[i].name, "vision.recompute.", 17) == 0;
                if (r) assert_null(strstr(plan.buffers[i].name, "vision.blocks."));
            }
            assert_int_equal(shared, r ? 12 : 0);
            lj_plan_free(&plan);
            lj_vl_free(&vl);
            lj_model_free(&m);
        }
        assert_int_equal(total[0] - total[1], (size_t)(c.vision.depth - 1) * block);
        for (int k = 0; k < LJ_MEM_COUNT; k++)
            if (k != LJ_MEM_ACTIVATIONS && k != LJ_MEM_RECOMPUTE) assert_int_equal(vision[0][k], vision[1][k]);
        print_message("qwen3-vl-2b 1024x1024 (%s): the tower's recompute saves %.1f MiB (%d blocks of %.1f MiB)\n",
                      ops->name, (double)(total[0] - total[1]) / (1 << 20), c.vision.depth - 1,
                      (double)block / (1 << 20));
    }
}

static void test_capacity_and_shapes(void **state) {
    (void)state;
    lj_vl_config c;
    assert_int_equal(lj_vl_config_preset("qwen3-vl-tiny", &c), LJ_OK);
    int np, ni;
    lj_vl_capacity(&c, 2, 48, &np, &ni);
    assert_int_equal(np, 4 * 96);
    assert_int_equal(ni, 33);
    lj_vl_bench_shape sh;
    /* smart_resize: 300 x 500 -> 288 x 512 (round to 32); the minimum area 256^2 lifts 100 x 100 */
    assert_int_equal(lj_vl_bench_shape_of(&c, 300, 500, 10, &sh), LJ_OK);
    assert_int_equal(sh.grid.h, 18);
    assert_int_equal(sh.grid.w, 32);
    assert_int_equal(sh.image_tokens, 144);
    assert_int_equal(lj_vl_bench_shape_of(&c, 100, 100, 10, &sh), LJ_OK);
    assert_true(sh.grid.h * sh.grid.w * 256 >= 65536); /* at least min_pixels */
    /* refusals: an aspect ratio above 200; a row above max_position_embeddings */
    assert_int_not_equal(lj_vl_bench_shape_of(&c, 32, 32 * 201, 10, &sh), LJ_OK);
    assert_int_equal(lj_vl_bench_shape_of(&c, 448, 448, c.text.max_position_embeddings, &sh), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "--text-tokens"));
}

static void test_vit_flops(void **state) {
    (void)state;
    lj_vl_config c;
    assert_int_equal(lj_vl_config_preset("qwen3-vl-2b", &c), LJ_OK);
    /* V 1024, I 4096, depth 24, P 1536, 3 DeepStack mergers, M 4096, O 2048; 784 patches */
    const double n = 784, linear = 1536.0 * 1024 + 24 * (4.0 * 1024 * 1024 + 2.0 * 1024 * 4096);
    const double mergers = 4 * (4096.0 * 4096 + 4096.0 * 2048), attention = 12.0 * 24 * 1024 * n * n;
    const double want = 6 * linear * n + 6 * mergers * n / 4 + attention;
    assert_true(fabs(lj_vision_flops_per_frame(&c.vision, 784) - want) <= 1e-9 * want);
    print_message("qwen3-vl-2b ViT at 448x448: %.4g FLOPs per image\n", want);
}

/* The joint plan's peak with the decoder's policy r and the tower's recompute `vision`. */
static size_t joint_peak(const lj_vl_config *c, const lj_model_setup *s, int patches, const uint8_t *r, int vision,
                         const lj_planner_target *t) {
    lj_model_setup u = *s;
    memcpy(u.model.recompute, r, sizeof u.model.recompute);
    u.model.vision_recompute = vision;
    lj_model m;
    lj_plan plan;
    lj_vl vl;
    assert_int_equal(lj_vl_build(&vl, &m, &plan, &u, c, patches, 1, NULL), LJ_OK);
    const size_t peak = plan.total_bytes + lj_planner_fixed_bytes(t);
    lj_vl_free(&vl);
    lj_plan_free(&plan);
    lj_model_free(&m);
    return peak;
}

static void test_vl_planner(void **state) {
    (void)state;
    lj_vl_config c;
    assert_int_equal(lj_vl_config_preset("qwen3-vl-2b", &c), LJ_OK);
    lj_vl_bench_shape sh;
    assert_int_equal(lj_vl_bench_shape_of(&c, 1024, 1024, 512, &sh), LJ_OK);
    const lj_ops *ops = bf16_table();
    const lj_model_setup s = setup_of(ops, &c, 1, sh.seq_length);
    lj_planner_target t;
    assert_int_equal(lj_planner_target_init(&t, ops, NULL, "test"), LJ_OK);
    t.margin_bytes = 0;
    uint8_t none[LJ_MAX_LAYERS] = {0}, full[LJ_MAX_LAYERS] = {0}, r[LJ_MAX_LAYERS];
    memset(full, LJ_RECOMPUTE_FULL, (size_t)c.text.num_hidden_layers);
    const size_t p_none = joint_peak(&c, &s, sh.patches, none, 0, &t),
                 p_full = joint_peak(&c, &s, sh.patches, full, 0, &t),
                 p_both = joint_peak(&c, &s, sh.patches, full, 1, &t);
    assert_true(p_full < p_none && p_both < p_full);
    size_t peak = 0;
    int v = 0;
    /* plenty: no recompute */
    t.device_memory_bytes = p_none + ((size_t)1 << 30);
    assert_int_equal(lj_vl_planner_choose(&c, &s, sh.patches, 1, &t, r, &v, &peak, NULL, 0), LJ_OK);
    assert_memory_equal(r, none, LJ_MAX_LAYERS);
    assert_true(peak == p_none && v == 0);
    v = LJ_VL_VISION_RECOMPUTE_AUTO; /* the tower's recompute left to the planner: not needed */
    assert_int_equal(lj_vl_planner_choose(&c, &s, sh.patches, 1, &t, r, &v, &peak, NULL, 0), LJ_OK);
    assert_true(peak == p_none && v == 0);
    /* between the two: some recompute, and the joint plan of the choice fits */
    t.device_memory_bytes = (p_none + p_full) / 2;
    char why[2048];
    v = LJ_VL_VISION_RECOMPUTE_AUTO;
    assert_int_equal(lj_vl_planner_choose(&c, &s, sh.patches, 1, &t, r, &v, &peak, why, sizeof why), LJ_OK);
    int recomputed = 0;
    for (int l = 0; l < c.text.num_hidden_layers; l++) recomputed += r[l] != LJ_RECOMPUTE_NONE;
    assert_true(recomputed > 0 && v == 0);
    assert_true(peak <= t.device_memory_bytes && peak == joint_peak(&c, &s, sh.patches, r, 0, &t));
    assert_non_null(strstr(why, "the decoder planned for"));
    /* below full recompute with the tower's activations kept: refused with the smallest peak when
       the tower's recompute is fixed at none ... */
    t.device_memory_bytes = p_full - ((size_t)1 << 20);
    v = 0;
    assert_int_equal(lj_vl_planner_choose(&c, &s, sh.patches, 1, &t, r, &v, &peak, NULL, 0), LJ_ERR_OOM);
    assert_non_null(strstr(lj_error_message(), "full recompute of every decoder layer"));
    assert_non_null(strstr(lj_error_message(), "--recompute-vision full"));
    assert_true(peak == p_full);
    /* ... and left to the planner, the tower recomputes its blocks, the decoder is planned beside it
       (less than full recompute of every layer fits now) and the joint plan of the choice fits */
    v = LJ_VL_VISION_RECOMPUTE_AUTO;
    assert_int_equal(lj_vl_planner_choose(&c, &s, sh.patches, 1, &t, r, &v, &peak, why, sizeof why), LJ_OK);
    assert_int_equal(v, 1);
    assert_true(peak <= t.device_memory_bytes && peak == joint_peak(&c, &s, sh.patches, r, 1, &t));
    assert_non_null(strstr(why, "the vision tower recomputes its blocks (full)"));
    print_message("below %.2f GiB: %s\n", (double)p_full / (1 << 30), why);
    /* a run that does not fit even so: refused, naming both recomputes */
    t.device_memory_bytes = p_both - ((size_t)1 << 20);
    v = LJ_VL_VISION_RECOMPUTE_AUTO;
    assert_int_equal(lj_vl_planner_choose(&c, &s, sh.patches, 1, &t, r, &v, &peak, NULL, 0), LJ_ERR_OOM);
    assert_non_null(strstr(lj_error_message(), "the tower recomputes its blocks too"));
    assert_true(peak == p_both);
    /* lj_vl_recompute_of: the tower's recompute as asked, or the planner's */
    lj_model_setup u = s;
    char desc[96];
    t.device_memory_bytes = p_full - ((size_t)1 << 20);
    u.model.vision_recompute = LJ_VL_VISION_RECOMPUTE_AUTO;
    assert_int_equal(lj_vl_recompute_of("auto", &c, &u, sh.patches, 1, &t, desc, sizeof desc, NULL, 0), LJ_OK);
    assert_int_equal(u.model.vision_recompute, 1);
    u.model.vision_recompute = LJ_VL_VISION_RECOMPUTE_AUTO;
    assert_int_equal(lj_vl_recompute_of("none", &c, &u, sh.patches, 1, &t, desc, sizeof desc, NULL, 0), LJ_OK);
    assert_int_equal(u.model.vision_recompute, 0);
    u.model.vision_recompute = 1;
    assert_int_equal(lj_vl_recompute_of("full", &c, &u, sh.patches, 1, &t, desc, sizeof desc, NULL, 0), LJ_OK);
    assert_int_equal(u.model.vision_recompute, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_states_per_parameter),
        cmocka_unit_test(test_activation_term),
        cmocka_unit_test(test_vision_recompute_term),
        cmocka_unit_test(test_capacity_and_shapes),
        cmocka_unit_test(test_vit_flops),
        cmocka_unit_test(test_vl_planner),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_zero.c: ZeRO shard arithmetic (parallel/zero.h): slices cover the flat buffer exactly once
 * for many sizes and world sizes (uneven included), a simulated all-gather / reduce-scatter in
 * the padded layout reproduces each group in layout order, parameter pieces and owner pieces
 * agree with the slices, buckets, the prefetch rule, the "auto" sizes and per-stage counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "parallel/zero.h"

/* Checks every invariant of a partition that zero.h states. */
static void check_partition(const lj_zero_partition *z) {
    const int W = z->world_size;
    int64_t covered = 0, shard_sum = 0;
    for (int u = 0; u < z->num_units; u++) {
        const lj_zero_unit *un = &z->units[u];
        assert_true(un->shard % z->align == 0);
        assert_true((int64_t)W * un->shard >= un->end - un->begin);
        assert_true((int64_t)W * un->shard - (un->end - un->begin) < (int64_t)W * z->align);
        assert_true(un->shard_offset == shard_sum);
        shard_sum += un->shard;
        const lj_zero_group *g = &z->groups[un->group];
        assert_true(un->gather_offset == un->begin - g->begin); /* gathered units are contiguous */
        int64_t next = un->begin;
        for (int r = 0; r < W; r++) {
            int64_t b, e;
            lj_zero_unit_slice(z, u, r, &b, &e);
            assert_true(b <= e);
            if (b < e) {
                assert_true(b == next);
                next = e;
                int64_t off;
                assert_int_equal(lj_zero_owner(z, b, &off), r);
                assert_true(off == un->shard_offset + (b - (un->begin + (int64_t)r * un->shard)));
                assert_int_equal(lj_zero_owner(z, e - 1, NULL), r);
            }
        }
        assert_true(next == un->end);
        covered += un->end - un->begin;
    }
    assert_true(covered == z->numel);
    assert_true(shard_sum == z->shard_numel);
    int64_t real = 0;
    for (int r = 0; r < W; r++) real += lj_zero_rank_numel(z, r);
    assert_true(real == z->numel);
}

static void test_flat_uneven(void **state) {
    (void)state;
    lj_zero_partition z;
    lj_zero_partition_flat(&z, 100, 3, 8); /* quantum 24: ceil(100 / 24) * 8 = 40 per rank */
    assert_true(z.shard_numel == 40);
    int64_t b, e;
    lj_zero_unit_slice(&z, 0, 0, &b, &e);
    assert_true(b == 0 && e == 40);
    lj_zero_unit_slice(&z, 0, 2, &b, &e);
    assert_true(b == 80 && e == 100);
    assert_true(z.groups[0].gather_numel == 120);
    check_partition(&z);
    lj_zero_partition_free(&z);
    lj_zero_partition_flat(&z, 5, 4, 4); /* ranks 2 and 3 hold only padding */
    lj_zero_unit_slice(&z, 0, 2, &b, &e);
    assert_true(b == e);
    assert_true(lj_zero_rank_numel(&z, 1) == 1 && lj_zero_rank_numel(&z, 3) == 0);
    check_partition(&z);
    lj_zero_partition_free(&z);
    for (int W = 1; W <= 7; W++)
        for (int64_t P = 1; P <= 300; P += 7)
            for (int64_t align = 1; align <= 16; align *= 4) {
                lj_zero_partition_flat(&z, P, W, align);
                check_partition(&z);
                lj_zero_partition_free(&z);
            }
}

/* Simulates all-gather and reduce-scatter in the padded layout with integer values. */
static void test_simulated_collectives(void **state) {
    (void)state;
    const int64_t bounds[] = {0, 1000, 1003, 1500, 1501};
    for (int W = 1; W <= 5; W++) {
        lj_zero_partition z;
        lj_zero_partition_init(&z, bounds, 4, W, 2, 100, 3);
        check_partition(&z);
        assert_true(z.groups[1].persistent && z.groups[3].persistent && !z.groups[0].persistent);
        assert_true(z.groups[0].num_units > 1);
        /* shards of the flat buffer x[i] = i, padding -1 */
        double *shards = malloc(sizeof(double) * (size_t)(W * z.shard_numel));
        for (int64_t i = 0; i < W * z.shard_numel; i++) shards[i] = -1;
        for (int r = 0; r < W; r++)
            for (int u = 0; u < z.num_units; u++) {
                int64_t b, e;
                lj_zero_unit_slice(&z, u, r, &b, &e);
                for (int64_t i = b; i < e; i++)
                    shards[r * z.shard_numel + z.units[u].shard_offset + (i - b)] = (double)i;
            }
        double *gathered = malloc(sizeof(double) * (size_t)z.max_gather_numel);
        for (int g = 0; g < z.num_groups; g++) {
            const lj_zero_group *grp = &z.groups[g];
            for (int u = grp->first_unit; u < grp->first_unit + grp->num_units; u++)
                for (int r = 0; r < W; r++) /* all-gather: recv[r * shard + i] = rank r's slice[i] */
                    memcpy(gathered + z.units[u].gather_offset + r * z.units[u].shard,
                           shards + r * z.shard_numel + z.units[u].shard_offset, sizeof(double) * (size_t)z.units[u].shard);
            for (int64_t i = grp->begin; i < grp->end; i++) assert_true(gathered[i - grp->begin] == (double)i);
            for (int64_t i = grp->end - grp->begin; i < grp->gather_numel; i++) assert_true(gathered[i] == -1);
            /* reduce-scatter: rank r's gradient in the gather layout is (r + 1) * (i + 1) at flat
             * element i (padding 1000); rank q receives, for unit u, the sums of the q-th slices */
            double *red = calloc((size_t)(W * z.shard_numel), sizeof(double));
            for (int u = grp->first_unit; u < grp->first_unit + grp->num_units; u++)
                for (int q = 0; q < W; q++)
                    for (int64_t i = 0; i < z.units[u].shard; i++)
                        for (int r = 0; r < W; r++) {
                            const int64_t j = z.units[u].gather_offset + q * z.units[u].shard + i; /* in the group */
                            const double v = grp->begin + j < grp->end ? (r + 1) * (double)(grp->begin + j + 1) : 1000;
                            red[q * z.shard_numel + z.units[u].shard_offset + i] += v;
                        }
            for (int64_t x = grp->begin; x < grp->end; x++) {
                int64_t off;
                const int q = lj_zero_owner(&z, x, &off);
                assert_true(red[q * z.shard_numel + off] == (double)W * (W + 1) / 2 * (double)(x + 1));
            }
            free(red);
        }
        free(gathered);
        free(shards);
        lj_zero_partition_free(&z);
    }
}

static lj_model_config tiny_config(int tied) {
    lj_model_config c;
    assert_int_equal(lj_config_preset("llama3-nano", &c), LJ_OK);
    c.vocab_size = 97;
    c.hidden_size = 32;
    c.intermediate_size = 48;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.tie_word_embeddings = tied;
    return c;
}

static void test_layers_and_params(void **state) {
    (void)state;
    for (int tied = 0; tied <= 1; tied++)
        for (int W = 1; W <= 4; W++) {
            lj_model_config c = tiny_config(tied);
            lj_param_layout lo;
            lj_param_layout_init(&lo, &c);
            lj_zero_partition z;
            lj_zero_partition_layers(&z, &lo, W, 4, 500, lj_zero_persistence_threshold_auto(c.hidden_size));
            check_partition(&z);
            assert_int_equal(z.num_groups, 1 + 3 + 1 + (tied ? 0 : 1));
            assert_int_equal(lj_zero_group_of_layer(&z, LJ_ZERO_EMBED), 0);
            for (int l = 0; l < 3; l++) {
                const lj_zero_group *g = &z.groups[lj_zero_group_of_layer(&z, l)];
                assert_true(g->begin == lo.params[lj_param_index(&lo, l, LJ_P_LN1)].offset);
                assert_true(g->end - g->begin == lo.layer_numel);
                assert_false(g->persistent);
            }
            const lj_zero_group *fn = &z.groups[lj_zero_group_of_layer(&z, 3)];
            assert_true(fn->begin == lo.params[lo.final_norm].offset && fn->persistent);
            assert_int_equal(lj_zero_group_of_layer(&z, 4) >= 0, !tied);
            /* every parameter element is in exactly one rank's pieces, at the right shard offset */
            int *seen = calloc((size_t)lo.total, sizeof *seen);
            for (int r = 0; r < W; r++) {
                const int n = lj_zero_shard_params(&z, &lo, r, NULL, 0);
                lj_zero_param_piece *pc = calloc((size_t)n + 1, sizeof *pc);
                assert_int_equal(lj_zero_shard_params(&z, &lo, r, pc, n), n);
                for (int k = 0; k < n; k++) {
                    assert_true(pc[k].begin < pc[k].end && pc[k].end <= lo.params[pc[k].param].numel);
                    if (k) assert_true(pc[k].shard_offset > pc[k - 1].shard_offset);
                    for (int64_t i = pc[k].begin; i < pc[k].end; i++) {
                        const int64_t flat = lo.params[pc[k].param].offset + i;
                        int64_t off;
                        assert_int_equal(lj_zero_owner(&z, flat, &off), r);
                        assert_true(off == pc[k].shard_offset + (i - pc[k].begin));
                        seen[flat]++;
                    }
                }
                free(pc);
            }
            for (int64_t i = 0; i < lo.total; i++) assert_int_equal(seen[i], 1);
            free(seen);
            lj_zero_partition_free(&z);
            lj_param_layout_free(&lo);
        }
}

static void test_range_pieces(void **state) {
    (void)state;
    const int64_t bounds[] = {0, 37, 200, 211};
    lj_zero_partition z;
    lj_zero_partition_init(&z, bounds, 3, 3, 2, 60, 0);
    lj_rng rng;
    lj_rng_seed(&rng, 7);
    for (int t = 0; t < 300; t++) {
        int64_t b = (int64_t)lj_rng_below(&rng, 212), e = (int64_t)lj_rng_below(&rng, 212);
        if (b > e) {
            int64_t x = b;
            b = e;
            e = x;
        }
        lj_zero_piece pcs[64];
        const int n = lj_zero_range_pieces(&z, b, e, pcs, 64);
        assert_true(n <= 64);
        int64_t next = b;
        for (int k = 0; k < n; k++) {
            assert_true(pcs[k].begin == next && pcs[k].end > pcs[k].begin);
            next = pcs[k].end;
            int64_t off;
            assert_int_equal(lj_zero_owner(&z, pcs[k].begin, &off), pcs[k].rank);
            assert_true(off == pcs[k].shard_offset);
            assert_int_equal(lj_zero_owner(&z, pcs[k].end - 1, &off), pcs[k].rank);
            assert_true(off == pcs[k].shard_offset + pcs[k].end - 1 - pcs[k].begin);
        }
        assert_true(next == e);
    }
    lj_zero_partition_free(&z);
}

/* Cut points (--fp8-param-gather's weights as units of their own): every unit lies on one side of
 * each cut, the cuts on group bounds or outside change nothing, and the units still tile each group
 * in order with their own padding (gather offsets W * shard apart), every element owned once. */
static void test_cuts(void **state) {
    (void)state;
    const int64_t bounds[] = {0, 37, 200, 211};
    const int64_t cuts[] = {150, 40, 37, 100, 211, 45};
    for (int W = 1; W <= 3; W++) {
        lj_zero_partition z;
        lj_zero_partition_init_cut(&z, bounds, 3, cuts, 6, W, 2, 60, 0);
        assert_true(z.numel == 211);
        int64_t shard = 0;
        for (int g = 0; g < z.num_groups; g++) {
            const lj_zero_group *grp = &z.groups[g];
            int64_t at = grp->begin, gather = 0;
            for (int u = grp->first_unit; u < grp->first_unit + grp->num_units; u++) {
                const lj_zero_unit *un = &z.units[u];
                assert_true(un->begin == at && un->end > un->begin && un->end <= grp->end && un->group == g);
                assert_true(un->end - un->begin <= 60 || W * 2 > 60);
                for (int c = 0; c < 6; c++) assert_false(cuts[c] > un->begin && cuts[c] < un->end);
                assert_true(un->shard * W >= un->end - un->begin && un->shard % 2 == 0);
                assert_true(un->gather_offset == gather && un->shard_offset == shard);
                gather += (int64_t)W * un->shard;
                shard += un->shard;
                at = un->end;
            }
            assert_true(at == grp->end && gather == grp->gather_numel);
        }
        assert_true(shard == z.shard_numel);
        /* group 1 [37, 200): cut at 40, 45, 100, 150, and at most 60 elements a unit */
        const lj_zero_group *g1 = &z.groups[1];
        const int64_t want[] = {37, 40, 45, 100, 150, 200};
        int k = 0;
        for (int u = g1->first_unit; u < g1->first_unit + g1->num_units; u++) {
            if (z.units[u].begin == want[k]) k++;
        }
        assert_int_equal(k, 5);
        int64_t total = 0;
        for (int r = 0; r < W; r++) total += lj_zero_rank_numel(&z, r);
        assert_true(total == 211);
        lj_zero_partition_free(&z);
    }
    /* no cuts: lj_zero_partition_init's units */
    lj_zero_partition a, b;
    lj_zero_partition_init(&a, bounds, 3, 3, 2, 60, 0);
    lj_zero_partition_init_cut(&b, bounds, 3, NULL, 0, 3, 2, 60, 0);
    assert_int_equal(a.num_units, b.num_units);
    assert_memory_equal(a.units, b.units, (size_t)a.num_units * sizeof *a.units);
    lj_zero_partition_free(&a);
    lj_zero_partition_free(&b);
}

static void test_prefetch(void **state) {
    (void)state;
    const int64_t bounds[] = {0, 100, 150, 200, 250, 260, 310};
    lj_zero_partition z;
    lj_zero_partition_init(&z, bounds, 6, 2, 1, 0, 10); /* group 4 (10 elements) is persistent */
    assert_true(z.groups[4].persistent);
    assert_int_equal(lj_zero_prefetch_count(&z, 0, 1, 120, 0, 0), 3);     /* 50, 100, 150 */
    assert_int_equal(lj_zero_prefetch_count(&z, 0, 1, 120, 200, 100), 2); /* limit 100 */
    assert_int_equal(lj_zero_prefetch_count(&z, 3, 1, 10, 0, 0), 2);      /* skips the persistent group */
    assert_int_equal(lj_zero_prefetch_count(&z, 5, -1, 10, 0, 0), 2);
    assert_int_equal(lj_zero_prefetch_count(&z, 5, 1, 1000, 0, 0), 0);   /* nothing after the last */
    assert_int_equal(lj_zero_prefetch_count(&z, 0, 1, 0, 0, 0), 0);
    lj_zero_partition_free(&z);
}

static void test_auto_and_counts(void **state) {
    (void)state;
    assert_true(lj_zero_reduce_bucket_auto(4096) == 16777216);
    assert_true(lj_zero_prefetch_bucket_auto(4096) == 15099494); /* int(0.9 * 4096 * 4096) */
    assert_true(lj_zero_persistence_threshold_auto(4096) == 40960);
    lj_zero_partition z;
    lj_zero_partition_flat(&z, 1001, 4, 1); /* S = 251 */
    lj_zero_counts c;
    lj_zero_rank_counts(&z, 0, &c);
    assert_true(c.params == 1001 && c.grads == 1001 && c.master == 1001 && c.moments == 2002);
    lj_zero_rank_counts(&z, 1, &c);
    assert_true(c.params == 1001 && c.grads == 1001 && c.master == 251 && c.moments == 502);
    lj_zero_rank_counts(&z, 2, &c);
    assert_true(c.params == 1001 && c.grads == 251);
    lj_zero_rank_counts(&z, 3, &c);
    assert_true(c.params == 251 && c.grads == 251 && c.master == 251);
    lj_zero_partition_free(&z);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat_uneven),     cmocka_unit_test(test_simulated_collectives),
        cmocka_unit_test(test_layers_and_params), cmocka_unit_test(test_range_pieces),
        cmocka_unit_test(test_cuts),            cmocka_unit_test(test_prefetch),
        cmocka_unit_test(test_auto_and_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

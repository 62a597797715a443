#!/usr/bin/env bash
# test_fp8_dist.sh: the FP8 recipe (CPU emulation) over CPU ranks (MPI). Two ranks under ZeRO
# stage 0 (replicated) and stage 3 (parameters gathered per layer, so the FP8 casts read the
# gathered weights) give the same losses bit for bit with delayed and with tensorwise scaling,
# and a run saved on 2 ranks under stage 3 resumes there, continuing the uninterrupted losses bit
# for bit: under delayed scaling the amaxes are reduced (max) over the ranks after each backward,
# so every rank holds the recipe state the checkpoint keeps (it failed before the reduction:
# rank 1 resumed with rank 0's amax history).
source "$(dirname "$0")/kjv_train_lib.sh" fp8_dist
common=(--model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2
        --global-batch-size 4 --train-iters 4 --lr 3e-3 --lr-warmup-iters 1 --seed 11 --quiet --eval-iters 1
        --nproc-per-node 2 --fp8-format hybrid)
for recipe in delayed tensorwise; do
  for z in 0 3; do
    "$LJPERF" train "${common[@]}" --fp8-recipe $recipe --zero-stage $z --log-json "$tmp/$recipe-z$z.jsonl" \
      2>"$tmp/$recipe-z$z.err" || { cat "$tmp/$recipe-z$z.err"; fail "$recipe, ZeRO stage $z on 2 ranks"; }
  done
  [ "$(losses "$tmp/$recipe-z0.jsonl" | wc -l)" = 4 ] || fail "$recipe: not 4 iterations"
  diff <(losses "$tmp/$recipe-z0.jsonl") <(losses "$tmp/$recipe-z3.jsonl") \
    || fail "$recipe: ZeRO stage 3 differs from stage 0 on 2 ranks"
  echo "ok: $recipe, 2 ranks: ZeRO stage 3 equals stage 0 bit for bit"
done
for recipe in delayed tensorwise; do
  "$LJPERF" train "${common[@]}" --fp8-recipe $recipe --zero-stage 3 --exit-interval 2 --save "$tmp/ck-$recipe" \
    --log-json "$tmp/part-$recipe.jsonl" 2>"$tmp/part.err" || { cat "$tmp/part.err"; fail "$recipe: the first half"; }
  "$LJPERF" train "${common[@]}" --fp8-recipe $recipe --zero-stage 3 --load "$tmp/ck-$recipe" --save "$tmp/ck-$recipe" \
    --log-json "$tmp/rest-$recipe.jsonl" 2>"$tmp/rest.err" || { cat "$tmp/rest.err"; fail "$recipe: the resume"; }
  diff <(losses "$tmp/$recipe-z3.jsonl" | awk '$1 > 2') <(losses "$tmp/rest-$recipe.jsonl") \
    || fail "$recipe: the resumed iterations differ from the uninterrupted run"
  [ "$(losses "$tmp/rest-$recipe.jsonl" | wc -l)" = 2 ] || fail "$recipe: the resume did not run iterations 3 and 4"
  echo "ok: $recipe, ZeRO stage 3 on 2 ranks: the resume continues bit for bit"
done

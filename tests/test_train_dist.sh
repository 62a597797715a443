#!/usr/bin/env bash
# test_train_dist.sh: data-parallel training on CPU ranks (MPI), ZeRO stages 0-3, against one
# process with the same global batch (losses and final weights within fp32 tolerance):
#   - 2 ranks (--nproc-per-node 2) and 3 ranks (mpirun -np 3), on mock data and on a prepared
#     text dataset; ZeRO stage 1 (sharded AdamW state), 2 (and reduce-scattered gradients) and
#     3 (and sharded parameters, gathered per layer) on 2 and 3 ranks, with gradient accumulation
#     (3 and 2 steps);
#   - optimizer offload (--offload-optimizer cpu, with LJPERF_OFFLOAD_HOST_PATH=1 so that the host
#     path runs on the CPU backend) under stages 1, 2, 3: bit-identical losses and final state to
#     the run without it (2 ranks; stage 2 also on 3); an offloaded run saved and resumed;
#   - stage 2's gradient partition (reduced bucket by bucket during the backward) with buckets of
#     1000 elements, overlap_comm on and off; stage 3 with overlap_comm off;
#   - 8 ranks under mpirun, ZeRO-3.
# Resume across world sizes and the checkpoint shards: test_train_dist_resume.sh; the launcher,
# the benchmark and the flags' rules: test_train_dist_launch.sh.
source "$(dirname "$0")/train_dist_lib.sh" train_dist

"$LJPERF" train "${common[@]}" --nproc-per-node 2 --save "$tmp/w2" --log-json "$tmp/w2.jsonl" 2>"$tmp/w2.err" \
  || { cat "$tmp/w2.err"; fail "2 ranks"; }
grep -q "data parallel: 2 ranks" "$tmp/w2.err" || fail "2 ranks did not report data parallelism"
mpi 3 "$LJPERF" train "${common[@]}" --save "$tmp/w3" \
  --log-json "$tmp/w3.jsonl" 2>"$tmp/w3.err" || { cat "$tmp/w3.err"; fail "3 ranks under mpirun"; }
echo "1 rank vs 2 ranks:"; compare "$tmp/w1.jsonl" "$tmp/w2.jsonl" "$tmp/w1" "$tmp/w2" || fail "2 ranks differ from 1"
echo "1 rank vs 3 ranks:"; compare "$tmp/w1.jsonl" "$tmp/w3.jsonl" "$tmp/w1" "$tmp/w3" || fail "3 ranks differ from 1"
# a prepared dataset (the indexed .bin/.idx of real text): 3 ranks under stage 3 against 1
head -c 200000 "$LJ_CACHE/data/kjv.txt" > "$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" >/dev/null 2>&1 || fail "prepare"
text=("${data[@]}" --device cpu --seq-length 32 --micro-batch-size 2 --global-batch-size 12
      --train-iters 2 --lr 3e-3 --lr-warmup-iters 1 --seed 11 --quiet --eval-iters 1 --no-save-hf)
"$LJPERF" train "${text[@]}" --save "$tmp/t1" --log-json "$tmp/t1.jsonl" 2>"$tmp/t1.err" || { cat "$tmp/t1.err"; fail "text, 1 rank"; }
mpi 3 "$LJPERF" train "${text[@]}" --zero-stage 3 --save "$tmp/t3" --log-json "$tmp/t3.jsonl" 2>"$tmp/t3.err" \
  || { cat "$tmp/t3.err"; fail "text, 3 ranks"; }
echo "prepared text, 1 rank vs 3 ranks, ZeRO stage 3:"; compare "$tmp/t1.jsonl" "$tmp/t3.jsonl" "$tmp/t1" "$tmp/t3" \
  || fail "3 ranks differ from 1 on the prepared dataset"
rm -rf "$tmp/t1" "$tmp/t3"
for stage in 1 2 3; do
  for np in 2 3; do
    mpi $np "$LJPERF" train "${common[@]}" --zero-stage $stage \
      --save "$tmp/z$stage$np" --log-json "$tmp/z$stage$np.jsonl" 2>"$tmp/z.err" || { cat "$tmp/z.err"; fail "stage $stage on $np ranks"; }
    grep -q "ZeRO stage $stage" "$tmp/z.err" || fail "stage $stage not reported"
    echo "1 rank vs $np ranks, ZeRO stage $stage:"
    compare "$tmp/w1.jsonl" "$tmp/z$stage$np.jsonl" "$tmp/w1" "$tmp/z$stage$np" || fail "ZeRO stage $stage on $np ranks differs"
  done
done


# optimizer offload through the host path: bit-identical to the same run without it
for run in "1 2" "2 2" "3 2" "2 3"; do
  set -- $run
  LJPERF_OFFLOAD_HOST_PATH=1 mpi $2 -x LJPERF_OFFLOAD_HOST_PATH \
    "$LJPERF" train "${common[@]}" --zero-stage $1 --offload-optimizer cpu --save "$tmp/o$1$2" --log-json "$tmp/o$1$2.jsonl" \
    2>"$tmp/o.err" || { cat "$tmp/o.err"; fail "offload, stage $1 on $2 ranks"; }
  grep -q "the host path runs on the cpu backend" "$tmp/o.err" || { cat "$tmp/o.err"; fail "offload host path not reported"; }
  grep -q "of optimizer state in host memory" "$tmp/o.err" || { cat "$tmp/o.err"; fail "offload host bytes not reported"; }
  echo "ZeRO stage $1 on $2 ranks, optimizer offload vs none: bit-identical"
  same_run "$tmp/z$1$2" "$tmp/o$1$2" || fail "offload under stage $1 on $2 ranks differs from the run without it"
done
# an offloaded run saved after iteration 2 (stage 3, 2 ranks), resumed offloaded
LJPERF_OFFLOAD_HOST_PATH=1 "$LJPERF" train "${common[@]}" --nproc-per-node 2 --zero-stage 3 --offload-optimizer cpu \
  --save "$tmp/or" --exit-interval 2 --log-json "$tmp/or.jsonl" 2>"$tmp/or.err" || { cat "$tmp/or.err"; fail "offload, first half"; }
LJPERF_OFFLOAD_HOST_PATH=1 "$LJPERF" train "${common[@]}" --nproc-per-node 2 --zero-stage 3 --offload-optimizer cpu \
  --save "$tmp/or" --load "$tmp/or" --log-json "$tmp/or.jsonl" 2>"$tmp/or.err" || { cat "$tmp/or.err"; fail "offload, resume"; }
echo "offloaded run saved and resumed (stage 3, 2 ranks):"; compare "$tmp/w1.jsonl" "$tmp/or.jsonl" "$tmp/w1" "$tmp/or" \
  || fail "offloaded resume differs"

# ZeRO-2's gradient partition with small buckets (many reductions per layer), overlap_comm off
# and on, and ZeRO-3 with overlap_comm off (no prefetch; each collective waited for at once)
for np in 2 3; do
  for overlap in --overlap-comm --no-overlap-comm; do
    mpi $np "$LJPERF" train "${common[@]}" --zero-stage 2 \
      --reduce-bucket-size 1000 $overlap --save "$tmp/b$np$overlap" --log-json "$tmp/b$np$overlap.jsonl" 2>"$tmp/z.err" \
      || { cat "$tmp/z.err"; fail "stage 2, buckets of 1000, $overlap on $np ranks"; }
    grep -q "overlap_comm $([ $overlap = --overlap-comm ] && echo on || echo off)" "$tmp/z.err" || { cat "$tmp/z.err"; fail "$overlap not reported"; }
    echo "1 rank vs $np ranks, ZeRO stage 2, buckets of 1000 elements, $overlap:"
    compare "$tmp/w1.jsonl" "$tmp/b$np$overlap.jsonl" "$tmp/w1" "$tmp/b$np$overlap" || fail "stage 2 $overlap on $np ranks differs"
  done
done
mpi 2 "$LJPERF" train "${common[@]}" --zero-stage 3 --no-overlap-comm \
  --save "$tmp/n3" --log-json "$tmp/n3.jsonl" 2>"$tmp/z.err" || { cat "$tmp/z.err"; fail "stage 3 without overlap"; }
echo "1 rank vs 2 ranks, ZeRO stage 3, --no-overlap-comm:"
compare "$tmp/w1.jsonl" "$tmp/n3.jsonl" "$tmp/w1" "$tmp/n3" || fail "stage 3 without overlap differs"


# 8 ranks under mpirun, ZeRO-3 (what an 8-GPU node runs, on CPU ranks): the same as one process
c8=("${data[@]}" --device cpu --seq-length 32 --micro-batch-size 2
    --global-batch-size 16 --train-iters 3 --lr 3e-3 --lr-warmup-iters 1 --seed 11 --quiet --eval-iters 1)
"$LJPERF" train "${c8[@]}" --save "$tmp/e1" --log-json "$tmp/e1.jsonl" 2>"$tmp/e1.err" || { cat "$tmp/e1.err"; fail "1 rank, batch 16"; }
mpi 8 "$LJPERF" train "${c8[@]}" --zero-stage 3 \
  --save "$tmp/e8" --log-json "$tmp/e8.jsonl" 2>"$tmp/e8.err" || { cat "$tmp/e8.err"; fail "8 ranks under mpirun"; }
grep -q "data parallel: 8 ranks" "$tmp/e8.err" || { cat "$tmp/e8.err"; fail "8 ranks did not report data parallelism"; }
echo "8 ranks (mpirun -np 8), ZeRO-3 vs 1:"; compare "$tmp/e1.jsonl" "$tmp/e8.jsonl" "$tmp/e1" "$tmp/e8" || fail "8 ranks differ"


rm -rf "$tmp" # a failing run keeps its files for a look
echo "1 passed, 0 failed"

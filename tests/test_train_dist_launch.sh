#!/usr/bin/env bash
# test_train_dist_launch.sh: the launcher and the rules of data-parallel runs on CPU ranks (MPI):
#   - --device auto without a GPU says so once for the job, not once per rank;
#   - `ljperf benchmark` runs on 2 ranks (stage 2, and deepspeed/ names: stage 3), and its
#     --ablation has a +CommOpt row there (left out, with the reason, on one rank), and under
#     ZeRO-3 plans each rank's share;
#   - a killed rank stops the job with a non-zero exit; SIGTERM to the launcher saves a checkpoint;
#   - a DeepSpeed config with contradictory batch sizes is rejected with DeepSpeed's rule named;
#   - stage 3 on one process runs as stage 0; a ZeRO stage that does not exist is refused by name;
#   - --decoupled-lr with --rampup-batch-size on 3 ranks under ZeRO stages 1 and 3 equals 1 rank
#     (the lr group follows the segments into each shard), and with optimizer offload bit for bit.
source "$(dirname "$0")/train_dist_lib.sh" train_dist_launch
# the jobs started in the background stop with the test, whatever happens
trap 'pkill -9 -f -- "--seed 4242" 2>/dev/null || true; pkill -9 -f -- "--seed 4343" 2>/dev/null || true' EXIT

# --device auto without a GPU: one note for the job, not one per rank
if "$LJPERF" plan --model llama3-nano --device auto --seq-length 32 2>&1 | grep -q "no usable GPU"; then
  mpi 3 "$LJPERF" train "${data[@]}" --device auto \
    --seq-length 32 --micro-batch-size 2 --global-batch-size 6 --train-iters 1 --quiet \
    >/dev/null 2>"$tmp/auto.err" || { cat "$tmp/auto.err"; fail "3 ranks with --device auto"; }
  [ "$(grep -c "no usable GPU" "$tmp/auto.err")" = 1 ] || { cat "$tmp/auto.err"; fail "--device auto: not one note for 3 ranks"; }
  echo "--device auto without a GPU: one note for 3 ranks"
fi

# the benchmark over 2 ranks (ZeRO stage 2), and deepspeed/ names (stage 3 over several ranks)
"$LJPERF" benchmark --model llama3-nano --device cpu --seq-length 32 --micro-batch-size 2 --train-iters 2 \
  --warmup-iters 1 --no-progress --nproc-per-node 2 --zero-stage 2 --json "$tmp/b.json" >"$tmp/b.out" 2>"$tmp/b.err" \
  || { cat "$tmp/b.err"; fail "benchmark on 2 ranks"; }
grep -q "on 2 x cpu (ZeRO stage 2)" "$tmp/b.out" || { cat "$tmp/b.out"; fail "benchmark did not run on 2 ranks"; }
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["world_size"] == 2 and r["tokens_per_s"] > 0' \
  "$tmp/b.json" || fail "benchmark JSON"
"$LJPERF" benchmark --model deepspeed/llama3-nano --device cpu --seq-length 32 --train-iters 1 --warmup-iters 0 \
  --no-progress --nproc-per-node 2 >"$tmp/ds.out" 2>"$tmp/ds.err" || { cat "$tmp/ds.err"; fail "deepspeed/ on 2 ranks"; }
grep -q "on 2 x cpu (ZeRO stage 3)" "$tmp/ds.out" || { cat "$tmp/ds.out" "$tmp/ds.err"; fail "deepspeed/ did not run stage 3"; }

# the ablation over 2 ranks under ZeRO stage 2 has the +CommOpt row (overlap_comm off -> on);
# on one rank it is left out with the reason
"$LJPERF" benchmark --model llama3-nano --device cpu --seq-length 32 --micro-batch-size 2 --train-iters 1 \
  --warmup-iters 0 --no-progress --nproc-per-node 2 --zero-stage 2 --ablation --json "$tmp/ab.json" >"$tmp/ab.out" 2>"$tmp/ab.err" \
  || { cat "$tmp/ab.err"; fail "ablation on 2 ranks"; }
grep -q "^+CommOpt " "$tmp/ab.out" || { cat "$tmp/ab.out"; fail "no +CommOpt row on 2 ranks"; }
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert [x["row"] for x in r] == ["Base", "+Fusion", "+CkptOpt", "+BF16Moments", "+CommOpt"], r' \
  "$tmp/ab.json" || fail "ablation JSON rows"
"$LJPERF" benchmark --model llama3-nano --device cpu --seq-length 32 --micro-batch-size 2 --train-iters 1 \
  --warmup-iters 0 --no-progress --ablation >"$tmp/ab1.out" 2>"$tmp/ab1.err" || { cat "$tmp/ab1.err"; fail "ablation on 1 rank"; }
grep -q "+CommOpt left out: one rank" "$tmp/ab1.out" && ! grep -q "^+CommOpt " "$tmp/ab1.out" \
  || { cat "$tmp/ab1.out"; fail "+CommOpt on one rank not left out with its reason"; }
echo "ablation: +CommOpt on 2 ranks (ZeRO stage 2), left out on 1"

# a killed rank: the others stop (mpirun ends the job), and the launcher exits non-zero in time
"$LJPERF" train "${common[@]}" --train-iters 100000 --seed 4242 --nproc-per-node 2 >/dev/null 2>"$tmp/kill.err" &
launcher=$!
victim=""
for _ in $(seq 1 3000); do
  for p in $(pgrep -f -- "--seed 4242" || true); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
  done
  [ -n "$victim" ] && grep -q "data parallel" "$tmp/kill.err" && break
  sleep 0.1
done
[ -n "$victim" ] || { kill "$launcher" 2>/dev/null; fail "rank 1 of the launched job not found"; }
sleep 1
t0=$SECONDS
kill -9 "$victim"
st=0
for _ in $(seq 1 3000); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$launcher" 2>/dev/null; then kill -9 "$launcher"; fail "the job still runs 300 s after a rank was killed"; fi
wait "$launcher" || st=$?
[ "$st" != 0 ] || fail "the launcher exited 0 after a rank was killed"
echo "killed rank 1: the job stopped after $((SECONDS - t0)) s with status $st"

# SIGTERM to the launcher: the ranks (under mpirun, through SIGUSR1) save a checkpoint and the
# launcher exits 0, as a single process does; the default global batch is micro-batch x ranks
"$LJPERF" train "${data[@]}" --device cpu --seq-length 32 --micro-batch-size 2 \
  --train-iters 100000 --seed 4343 --nproc-per-node 2 --save "$tmp/sig" --log-interval 1 >"$tmp/sig.out" 2>"$tmp/sig.err" &
launcher=$!
for _ in $(seq 1 3000); do grep -q "^iteration" "$tmp/sig.out" && break; sleep 0.1; done
grep -q "global batch size: 4 " "$tmp/sig.out" || { kill -9 "$launcher"; cat "$tmp/sig.out"; fail "default global batch is not micro-batch x ranks"; }
kill -TERM "$launcher"
st=0
for _ in $(seq 1 3000); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$launcher" 2>/dev/null; then kill -9 "$launcher"; fail "the job still runs 300 s after SIGTERM"; fi
wait "$launcher" || st=$?
[ "$st" = 0 ] && [ -f "$tmp/sig/latest_checkpointed_iteration.txt" ] && grep -q "checkpoint saved" "$tmp/sig.err" \
  || { cat "$tmp/sig.err"; fail "SIGTERM to the launcher: status $st, or no checkpoint"; }
echo "SIGTERM to the launcher: checkpoint at iteration $(cat "$tmp/sig/latest_checkpointed_iteration.txt"), status 0"

# DeepSpeed's batch rule, and stages not supported yet
printf '{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8}\n' > "$tmp/ds.json"
st=0; "$LJPERF" train "${data[@]}" --device cpu --seq-length 32 --train-iters 1 \
  --deepspeed "$tmp/ds.json" 2>"$tmp/ds.err" || st=$?
[ "$st" != 0 ] && grep -q "DeepSpeed's rule" "$tmp/ds.err" && grep -q "ds.json" "$tmp/ds.err" \
  || { cat "$tmp/ds.err"; fail "contradictory DeepSpeed batch sizes were not rejected"; }
"$LJPERF" train "${common[@]}" --zero-stage 3 --log-json "$tmp/s3.jsonl" 2>"$tmp/s3.err" \
  || { cat "$tmp/s3.err"; fail "stage 3 on one process"; }
echo "stage 3 on one process vs stage 0:"; compare "$tmp/w1.jsonl" "$tmp/s3.jsonl" || fail "stage 3 on one process differs"
st=0; "$LJPERF" train "${common[@]}" --zero-stage 4 2>"$tmp/z.err" || st=$?
[ "$st" != 0 ] && grep -q -- "--zero-stage" "$tmp/z.err" || { cat "$tmp/z.err"; fail "ZeRO stage 4 was not refused by name"; }
st=0; "$LJPERF" train "${common[@]}" --nproc-per-node 0 2>"$tmp/np.err" || st=$?
[ "$st" != 0 ] && grep -q -- "--nproc-per-node 0: must be at least 1" "$tmp/np.err" \
  || { cat "$tmp/np.err"; fail "--nproc-per-node 0 was not refused"; }
# an error under the launcher: rank 0 says it plainly, the other ranks name themselves
st=0; "$LJPERF" benchmark --model llama3-nano --device cpu --nproc-per-node 2 --seq-length 0 2>"$tmp/bad2.err" || st=$?
[ "$st" != 0 ] && grep -q -- '^ljperf benchmark: --seq-length 0: expected >= 1' "$tmp/bad2.err" \
  && grep -q -- '^ljperf benchmark (rank 1): --seq-length 0: expected >= 1' "$tmp/bad2.err" \
  || { cat "$tmp/bad2.err"; fail "a bad flag on 2 ranks: status $st, or the ranks' lines"; }


# --ablation over 2 ranks under ZeRO-3 plans each rank's share: a budget (--device-memory) that the
# sharded run fits and an unsharded one would not
printf '%s\n' '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 1024,' \
  '"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 8, "num_attention_heads": 4,' \
  '"num_key_value_heads": 2, "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,' \
  '"tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}' > "$tmp/budget.json"
peak() { "$LJPERF" plan --model "$tmp/budget.json" --device cpu --seq-length 64 --micro-batch-size 2 --recompute "$1" \
  --margin 0 --world-size "$2" --zero-stage "$3" --json - | python3 -c "import json,sys;print(json.load(sys.stdin)['peak_bytes'])"; }
p0=$(peak full 1 0) p3=$(peak none 2 3)
[ "$p3" -lt "$p0" ] || fail "ZeRO-3 over 2 ranks does not plan less memory per rank ($p3 vs $p0 bytes)"
budget=$(( (p0 + p3) / 2 ))
"$LJPERF" benchmark --model "$tmp/budget.json" --device cpu --nproc-per-node 2 --zero-stage 3 --seq-length 64 \
  --micro-batch-size 2 --train-iters 1 --warmup-iters 0 --no-progress --ablation --device-memory "$budget" --margin 0 \
  >"$tmp/abl.out" 2>"$tmp/abl.err" || { cat "$tmp/abl.err"; fail "--ablation under ZeRO-3 within $budget bytes"; }
grep -q "^+CommOpt" "$tmp/abl.out" || { cat "$tmp/abl.out"; fail "--ablation under ZeRO-3: no +CommOpt row"; }
echo "ablation under ZeRO-3 on 2 ranks within $budget bytes per rank (unsharded: $p0): $(grep -c '^[B+]' "$tmp/abl.out") rows"
# --decoupled-lr and --rampup-batch-size under ZeRO: each shard's AdamW segments keep their lr group
# (stage 1 cuts the flat segments, stage 3 the layer pieces), and every rank runs the ramp's batch
ramp=("${data[@]}" --device cpu --seq-length 32 --micro-batch-size 2
      --global-batch-size 12 --rampup-batch-size 6 6 12 --train-samples 48 --lr 3e-3 --lr-warmup-samples 6
      --decoupled-lr 1e-2 --decoupled-min-lr 1e-4 --seed 11 --quiet --eval-iters 1)
"$LJPERF" train "${ramp[@]}" --save "$tmp/d1" --log-json "$tmp/d1.jsonl" 2>"$tmp/d1.err" || { cat "$tmp/d1.err"; fail "ramp 1 rank"; }
for stage in 1 3; do
  mpi 3 "$LJPERF" train "${ramp[@]}" --zero-stage $stage \
    --save "$tmp/d$stage-3" --log-json "$tmp/d$stage-3.jsonl" 2>"$tmp/d.err" || { cat "$tmp/d.err"; fail "ramp stage $stage"; }
  echo "--decoupled-lr with --rampup-batch-size 6 6 12, 1 rank vs 3 ranks, ZeRO stage $stage:"
  compare "$tmp/d1.jsonl" "$tmp/d$stage-3.jsonl" "$tmp/d1" "$tmp/d$stage-3" || fail "decoupled lr and ramp-up, stage $stage"
done
# the host AdamW of optimizer offload steps each segment at its group's lr too: bit for bit
LJPERF_OFFLOAD_HOST_PATH=1 mpi 3 -x LJPERF_OFFLOAD_HOST_PATH \
  "$LJPERF" train "${ramp[@]}" --zero-stage 1 --offload-optimizer cpu --log-json "$tmp/do.jsonl" 2>"$tmp/do.err" \
  || { cat "$tmp/do.err"; fail "ramp with offload"; }
cmp -s <(grep -o '"loss": [^,]*' "$tmp/d1-3.jsonl") <(grep -o '"loss": [^,]*' "$tmp/do.jsonl") \
  || fail "--decoupled-lr with --offload-optimizer cpu differs from the run without offload"
echo "--decoupled-lr with --rampup-batch-size and --offload-optimizer cpu (stage 1, 3 ranks): the same losses bit for bit"


rm -rf "$tmp" # a failing run keeps its files for a look
echo "1 passed, 0 failed"

#!/usr/bin/env bash
# test_megatron_scripts.sh: Megatron-LM's two Llama 3 8B FP8 launch scripts, rewritten with
# `ljperf train` as their launch line (tests/megatron/train_llama3_8b_fp8.sh, the examples/llama
# one, and tests/megatron/train_llama3_8b_fsdp_fp8.sh, the Megatron-FSDP one with its torchrun
# flags and its Nsight Systems wrapper), run as written on the CPU at a tiny shape on mock data:
#   - every argument the scripts pass is taken, or listed once at start-up as ignored with its
#     reason (a refused or unknown one stops the run);
#   - the 8B script on one rank, on real data (its --data-path / HuggingFaceTokenizer branch: this
#     repository's documentation, a line a document, tokenized with the small GPT-2 tokenizer of
#     tests/data): its profile window
#     (--profile-step-start/-end) opens and closes where Megatron-LM's does, --decoupled-lr is
#     logged, the checkpoint and TensorBoard events are written;
#   - the FSDP script on two ranks (torchrun's --nproc_per_node through ljperf's launcher; ZeRO-3
#     from --data-parallel-sharding-strategy optim_grads_params) with NSYS_PROFILE=1, under a stub
#     `nsys` on PATH that runs the command after its options, so that the script's own line
#     `nsys profile ... ljperf train ...` is what runs, on mock data: nsys got the capture range ljperf's window
#     drives (cudaProfilerApi), --record-memory-history wrote rank 0's snapshot (only rank 0:
#     --profile-ranks 0) to Megatron's default path, and the snapshot's peak is its plan's total.
set -euo pipefail
: "${LJPERF:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/megatron_scripts"
rm -rf "$tmp" && mkdir -p "$tmp/bin"
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
command -v mpirun >/dev/null 2>&1 || fail "mpirun is missing: run scripts/setup.sh (openmpi-bin)"
"$LJPERF" train --list-flags >"$tmp/flags.txt"
mini="$LJ_SOURCE_DIR/tests/data/gpt2_mini/tokenizer.json"
# a line a document (some thousands: the split's 1% of validation documents is not empty)
grep -hv '^[[:space:]]*$' "$LJ_SOURCE_DIR"/docs/*.md "$LJ_SOURCE_DIR"/*.md | sed G >"$tmp/text.txt"
"$LJPERF" prepare --tokenizer "$mini" --input "$tmp/text.txt" --split-on blank-line --output-prefix "$tmp/text" \
  --quiet >/dev/null 2>"$tmp/prepare.err" || { cat "$tmp/prepare.err"; fail "prepare"; }

# ljperf as the scripts call it, with its arguments kept for the checks below
cat >"$tmp/bin/ljperf" <<EOF
#!/bin/bash
printf '%s\n' "\$@" > "\$LJ_ARGS_LOG"
exec "$LJPERF" "\$@"
EOF
# a stand-in for Nsight Systems: `nsys profile [options] command args...` runs the command
cat >"$tmp/bin/nsys" <<'EOF'
#!/bin/bash
[ "$1" = profile ] || { echo "nsys stub: only 'nsys profile' is known" >&2; exit 2; }
shift
printf '%s\n' "$@" > "$NSYS_ARGS_LOG"
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*) shift ;;
    -o|-f|-x|-t|-s|--output|--force-overwrite|--stop-on-exit|--trace|--sample) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
exec "$@"
EOF
chmod +x "$tmp/bin/ljperf" "$tmp/bin/nsys"
export PATH="$tmp/bin:$PATH" LJPERF="$tmp/bin/ljperf" NSYS_ARGS_LOG="$tmp/nsys.args"

# the shape: 2 layers of 64 (Llama 3's GQA 2:1), 32 tokens, a vocabulary of 512, 6 iterations
export NUM_LAYERS=2 HIDDEN_SIZE=64 FFN_HIDDEN_SIZE=192 NUM_HEADS=4 NUM_QUERY_GROUPS=2 KV_CHANNELS=16
export SEQ_LENGTH=32 MAX_POSITION_EMBEDDINGS=32 VOCAB_SIZE=512 MICRO_BATCH_SIZE=1 GLOBAL_BATCH_SIZE=2
export TRAIN_SAMPLES=12 LR_DECAY_SAMPLES=12 LR_WARMUP_SAMPLES=2 EVAL_ITERS=1 EVAL_INTERVAL=100 SAVE_INTERVAL=100
export PROFILE_STEP_START=2 PROFILE_STEP_END=4 OMP_NUM_THREADS=1

# Every argument the run got is a row of `ljperf train` (torchrun's underscored spellings are its
# dashed ones); each ignored one is listed exactly once.
check_args() { # NAME ARGS_FILE STDERR_FILE
  local name=$1 args=$2 err=$3 n=0 a kind
  while IFS= read -r a; do
    [[ "$a" == --* ]] || continue
    a=${a%%=*}
    case "$a" in --nproc_per_node | --node_rank | --master_addr | --master_port) a=${a//_/-} ;; esac
    kind=$(awk -F'\t' -v f="$a" '$1 == f { print $2 }' "$tmp/flags.txt")
    [ -n "$kind" ] || fail "$name: $a is not a flag of ljperf train"
    [ "$kind" != refused ] || fail "$name: $a is refused"
    if [ "$kind" = ignored ]; then
      [ "$(grep -c -- "^  $a: " "$err")" = 1 ] || fail "$name: $a is not listed exactly once as ignored"
    fi
    n=$((n + 1))
  done <"$args"
  echo "$n"
}

# 1. the Llama 3 8B FP8 script, one rank, real data
mkdir -p "$tmp/a" && cd "$tmp/a"
GPUS_PER_NODE=1 LJ_ARGS_LOG="$tmp/a.args" EXTRA_ARGS="--log-json $tmp/a.jsonl" \
  bash "$LJ_SOURCE_DIR/tests/megatron/train_llama3_8b_fp8.sh" ckpt/llama tb/llama "$mini" "$tmp/text" \
  >"$tmp/a.out" 2>"$tmp/a.err" || { cat "$tmp/a.err"; fail "the 8B FP8 script"; }
n=$(check_args "the 8B FP8 script" "$tmp/a.args" "$tmp/a.err")
[ "$n" -ge 80 ] || fail "the 8B FP8 script passed $n flags; Megatron-LM's passes 80 (with torchrun's 5)"
grep -qx -- "--tokenizer-type" "$tmp/a.args" && grep -qx HuggingFaceTokenizer "$tmp/a.args" || fail "not the real-data branch"
grep -q "^validation loss at iteration 6" "$tmp/a.out" || fail "no validation loss at the end"
grep -q -- "--profile: the profile window opens before iteration 3" "$tmp/a.err" || fail "no window start"
grep -q -- "--profile: the profile window closes after iteration 4" "$tmp/a.err" || fail "no window end"
grep -q -- "--fp8-param-gather: the FP8 linears keep their weights as FP8 (E4M3, delayed scaling)" "$tmp/a.err" \
  || fail "--fp8-param-gather not explained"
[ "$(grep -c '"decoupled_lr"' "$tmp/a.jsonl")" = 6 ] || fail "not 6 iterations with a decoupled learning rate"
[ -s ckpt/llama/latest_checkpointed_iteration.txt ] || fail "no checkpoint in --save"
ls tb/llama/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard events"
ok "the 8B FP8 script on real data: $n flags taken or ignored once, the profile window at iterations 3 to 4"

# 2. the Megatron-FSDP script under nsys, two ranks
mkdir -p "$tmp/b" && cd "$tmp/b"
GPUS_PER_NODE=2 NSYS_PROFILE=1 LJ_ARGS_LOG="$tmp/b.args" \
  bash "$LJ_SOURCE_DIR/tests/megatron/train_llama3_8b_fsdp_fp8.sh" ckpt/fsdp MOCK MOCK nsys/llama tb/fsdp \
  >"$tmp/b.out" 2>"$tmp/b.err" || { cat "$tmp/b.err"; fail "the Megatron-FSDP script"; }
n=$(check_args "the Megatron-FSDP script" "$tmp/b.args" "$tmp/b.err")
[ "$n" -ge 90 ] || fail "the Megatron-FSDP script passed $n flags; Megatron-LM's passes 90 (with torchrun's 5)"
for want in --capture-range=cudaProfilerApi --capture-range-end=stop --trace=cuda,nvtx,cublas,cudnn; do
  grep -qx -- "$want" "$tmp/nsys.args" || fail "nsys was not given $want"
done
grep -q "ljperf train" <(tr '\n' ' ' <"$tmp/nsys.args") || fail "nsys did not run ljperf train"
grep -q "ZeRO stage 3 (parameters, gradients and optimizer state sharded)" "$tmp/b.err" || fail "not ZeRO-3"
grep -q "data parallel: 2 ranks" "$tmp/b.err" || fail "not two ranks"
grep -q -- "ZeRO-3: each rank casts its shard of them and every layer's all-gather moves them as FP8 codes" "$tmp/b.err" \
  || fail "--fp8-param-gather: the FP8 all-gather not announced"
grep -q -- "--profile: iterations 3 to 4 on rank 0" "$tmp/b.err" || fail "no profile window on rank 0"
grep -q -- "--profile: the profile window closes after iteration 4" "$tmp/b.err" || fail "no window end"
[ ! -e snapshot_1.json ] || fail "rank 1 wrote a memory snapshot (--profile-ranks 0)"
python3 - snapshot_0.json <<'PY' || fail "the memory snapshot"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "ljperf memory snapshot" and d["rank"] == 0 and d["world_size"] == 2, d.get("format")
assert d["iteration"] == 6, f"iteration {d['iteration']}, expected 6"
plan, alloc = d["plan"], d["allocator"]
arenas = plan["arenas"]
assert sum(a["bytes"] for a in arenas) == plan["total_bytes"], "the arenas do not add up to the plan's total"
assert alloc["peak_bytes"] - alloc["baseline_bytes"] == plan["total_bytes"], \
    f"peak {alloc['peak_bytes']} - baseline {alloc['baseline_bytes']} is not the plan's {plan['total_bytes']}"
for a in arenas:
    assert a["allocated_ms"] is not None, f"{a['name']}: no allocation event"
    assert a["buffers"], f"{a['name']}: no buffers"
    for b in a["buffers"]:
        assert b["offset"] + b["bytes"] <= a["bytes"], f"{b['name']} is outside its arena {a['name']}"
named = [e["arena"] for e in alloc["events"] if e["arena"]]
assert sorted(named) == sorted(a["name"] for a in arenas), f"events name {named}"
samples = d["samples"]
assert samples[0]["from_iteration"] == 0 and samples[-1]["to_iteration"] == 6, samples
assert all(s["allocated_bytes"] == alloc["allocated_bytes"] for s in samples), samples
print(f"snapshot: {len(arenas)} arenas, {sum(len(a['buffers']) for a in arenas)} buffers, peak {alloc['peak_bytes']} "
      f"bytes = the plan's total")
PY
ok "the Megatron-FSDP script under nsys: $n flags taken or ignored once, ZeRO-3 on 2 ranks, rank 0's snapshot"
echo "test_megatron_scripts: all passed"

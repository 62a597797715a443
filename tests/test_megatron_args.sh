#!/usr/bin/env bash
# test_megatron_args.sh: Megatron-LM's pretrain_gpt.py arguments on `ljperf train` (CPU):
#   - tests/megatron/train_llama_1gpu_bf16.sh, a Megatron-LM launch script whose launch line is
#     `ljperf train`, runs to the end on real KJV tokens and on --mock-data, and its losses equal
#     the same runs given with --model and ljperf's own flags, bit for bit;
#   - the ignored arguments are listed once at start-up; refused ones stop the run naming the
#     argument; argparse syntax (--flag=value, -h) and no prefix abbreviations;
#   - the schedule in samples, WSD and inverse-square-root against their formulas;
#   - the DeepSpeed launcher's --local_rank against LOCAL_RANK.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/megatron_args"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

kjv="$LJ_CACHE/data/kjv.txt"
tok="$LJ_CACHE/tokenizer/llama3/tokenizer.json"
[ -s "$kjv" ] || fail "$kjv is missing: run scripts/setup.sh"
[ -s "$tok" ] || fail "$tok is missing: run scripts/setup.sh"
head -c 200000 "$kjv" > "$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" >/dev/null 2>&1 \
  || fail "prepare failed"
losses() { grep '"loss"' "$1" | sed -E 's/.*"iteration": ([0-9]+), "loss": ([^,]+),.*/\1 \2/'; }

# 1. the Megatron script, shrunk to llama3-nano's shape: 12 iterations of 4 samples
script="$LJ_SOURCE_DIR/tests/megatron/train_llama_1gpu_bf16.sh"
export LJPERF NUM_LAYERS=2 HIDDEN_SIZE=64 FFN_HIDDEN_SIZE=192 NUM_HEADS=4 NUM_QUERY_GROUPS=2 KV_CHANNELS=16
export SEQ_LENGTH=32 MICRO_BATCH_SIZE=2 GLOBAL_BATCH_SIZE=4 TRAIN_SAMPLES=48 WARMUP_SAMPLES=8 DECAY_SAMPLES=48
export EVAL_ITERS=2 EVAL_INTERVAL=6 SEED=7
own=(--device cpu --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --train-iters 12 --lr-warmup-iters 2
     --lr-decay-iters 12 --lr 3e-3 --min-lr 3e-4 --weight-decay 0.1 --clip-grad 1.0 --seed 7 --split 949,50,1
     --zero-stage 1 --eval-iters 2 --eval-interval 6)
EXTRA_ARGS="--log-json $tmp/mg.jsonl" bash "$script" "$tmp/ckpt" "$tmp/tb" "$tok" "$tmp/kjv" \
  >"$tmp/mg.out" 2>"$tmp/mg.err" || { cat "$tmp/mg.err"; fail "the Megatron script (real data)"; }
"$LJPERF" train --model llama3-nano --data-path "$tmp/kjv" "${own[@]}" --log-json "$tmp/own.jsonl" \
  >/dev/null 2>"$tmp/own.err" || { cat "$tmp/own.err"; fail "the same run with ljperf's flags"; }
[ "$(losses "$tmp/mg.jsonl" | wc -l)" = 12 ] || fail "the Megatron script did not run 12 iterations"
diff <(losses "$tmp/own.jsonl") <(losses "$tmp/mg.jsonl") || fail "Megatron-argument losses differ from --model's"
[ -s "$tmp/ckpt/latest_checkpointed_iteration.txt" ] || fail "no checkpoint in --save"
ls "$tmp/tb"/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard events in --tensorboard-dir"
grep -q "starting from scratch" "$tmp/mg.err" || fail "--load = --save with nothing there did not start from scratch"
grep -q "arguments accepted and ignored" "$tmp/mg.err" || fail "no list of ignored arguments"
for a in --use-mcore-models --manual-gc --attention-backend --transformer-impl --sequence-parallel --num-workers; do
  [ "$(grep -c -- "^.*  $a: " "$tmp/mg.err")" = 1 ] || fail "$a is not listed exactly once as ignored"
done
grep -q -- "--bf16: the cpu backend computes in fp32" "$tmp/mg.err" || fail "--bf16 on the CPU not explained"
echo "real data: 12 losses of the Megatron script equal llama3-nano with ljperf's flags"
ok "the Megatron script on real data, $(losses "$tmp/mg.jsonl" | head -1 | cut -d' ' -f2) -> $(losses "$tmp/mg.jsonl" | tail -1 | cut -d' ' -f2)"

# 2. the same script on --mock-data (NullTokenizer: 128256 + 1 ids padded to 128384)
python3 - "$tmp/nano-128384.json" <<'PY'
import json, sys
json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 128384, "hidden_size": 64,
           "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "tie_word_embeddings": True, "initializer_range": 0.02,
           "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192}}, open(sys.argv[1], "w"))
PY
EXTRA_ARGS="--log-json $tmp/mock.jsonl" bash "$script" "$tmp/ckpt-mock" "$tmp/tb-mock" "" MOCK \
  >/dev/null 2>"$tmp/mock.err" || { cat "$tmp/mock.err"; fail "the Megatron script (--mock-data)"; }
"$LJPERF" train --model "$tmp/nano-128384.json" --mock-data "${own[@]/949,50,1/99,1,0}" \
  --log-json "$tmp/own-mock.jsonl" >/dev/null 2>"$tmp/own-mock.err" || { cat "$tmp/own-mock.err"; fail "--mock-data"; }
[ "$(losses "$tmp/mock.jsonl" | wc -l)" = 12 ] || fail "the mock run did not run 12 iterations"
diff <(losses "$tmp/own-mock.jsonl") <(losses "$tmp/mock.jsonl") || fail "mock-data losses differ from --model's"
grep -q "no tokenizer in the Hugging Face exports" "$tmp/mock.err" || fail "NullTokenizer export note missing"
ok "the Megatron script on --mock-data equals --model with ljperf's flags"

# 3. argparse syntax
common=(--model llama3-nano --device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2 --quiet
        --eval-iters 0)
"$LJPERF" train "${common[@]}" --train-iters=2 --lr=3e-3 --log-json="$tmp/eq.jsonl" >/dev/null 2>&1 || fail "--flag=value"
"$LJPERF" train "${common[@]}" --train-iters 2 --lr 3e-3 --log-json "$tmp/sp.jsonl" >/dev/null 2>&1 || fail "--flag value"
diff <(losses "$tmp/eq.jsonl") <(losses "$tmp/sp.jsonl") || fail "--flag=value and --flag value differ"
"$LJPERF" train -h >"$tmp/help.txt" || fail "train -h"
grep -q "Megatron-LM compatibility" "$tmp/help.txt" || fail "train -h has no compatibility table"
grep -q -- "--use-mcore-models  *ignored: " "$tmp/help.txt" || fail "train -h does not list the ignored arguments"
for c in prepare train benchmark plan generate report; do "$LJPERF" $c -h >/dev/null || fail "$c -h"; done
bad() {
  local want="$1"; shift
  if "$LJPERF" train "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"; then fail "accepted: $*"; fi
  grep -q -- "$want" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "message lacks '$want'"; }
}
bad "unknown flag '--train-iter'" "${common[@]}" --train-iter 2
bad "unknown flag '--frobnicate'" "${common[@]}" --frobnicate=1
# every unknown flag in one message, as argparse lists them, with the closest known name
bad "unknown flags '--train-iter' (did you mean --train-iters?), '--frobnicate', '--micro-batch' (did you mean --micro-batch-size?)" \
  "${common[@]}" --train-iter 2 --frobnicate=1 --micro-batch 4
# torchrun's spelling is --nproc-per-node: one more error of the same run shows it was read
bad "unknown flag '--bogus'" "${common[@]}" --nproc_per_node 1 --bogus
# Megatron-FSDP's flags map to the ZeRO stage they mean
bad "--data-parallel-sharding-strategy optim needs --use-megatron-fsdp" "${common[@]}" --data-parallel-sharding-strategy optim
bad "--data-parallel-sharding-strategy sharded: not one of no_shard, optim, optim_grads, optim_grads_params" \
  "${common[@]}" --use-megatron-fsdp --data-parallel-sharding-strategy sharded
bad "is ZeRO stage 3, but --zero-stage (or the DeepSpeed JSON) says 1" "${common[@]}" --use-megatron-fsdp \
  --data-parallel-sharding-strategy optim_grads_params --zero-stage 1
"$LJPERF" train "${common[@]}" --train-iters 1 --mock-data --use-megatron-fsdp --data-parallel-sharding-strategy \
  optim_grads_params --init-model-with-meta-device --logging-level 20 >"$tmp/fsdp.out" 2>&1 || { cat "$tmp/fsdp.out"; fail "Megatron-FSDP flags"; }
for want in "ZeRO stage 3 (parameters, gradients and optimizer state sharded)" \
            "--mock-data: training on synthetic documents; --data-path" "--init-model-with-meta-device: ljperf never"; do
  grep -q -- "$want" "$tmp/fsdp.out" || { cat "$tmp/fsdp.out"; fail "Megatron-FSDP flags: no line '$want'"; }
done
"$LJPERF" train "${common[@]}" --train-iters 1 --mock-data --logging-level 30 >"$tmp/quiet.out" 2>&1 || fail "--logging-level 30"
! grep -q -- "--mock-data: training on synthetic" "$tmp/quiet.out" || fail "--logging-level 30 still prints info lines"
ok "Megatron-FSDP's sharding strategies, --mock-data's precedence, --logging-level"
bad "--lr needs a value" "${common[@]}" --lr --seed 1
bad "--bf16 takes no value" "${common[@]}" --bf16=1
bad "--fp16: ljperf trains in bf16" "${common[@]}" --fp16
bad "--tensor-model-parallel-size 2: ljperf has data parallelism only" "${common[@]}" --tensor-model-parallel-size 2
bad "--pipeline-model-parallel-size 4:" "${common[@]}" --pipeline-model-parallel-size 4
bad "--ckpt-format zarr: ljperf writes its own formats, sharded" "${common[@]}" --ckpt-format zarr
bad "--async-save needs the sharded checkpoint format, not --ckpt-format torch" "${common[@]}" --ckpt-format torch --async-save
bad "--swiglu is missing" --device cpu --data-path "$tmp/kjv" --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
  --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --vocab-size 128256
bad "--normalization LayerNorm (Megatron's default)" --device cpu --data-path "$tmp/kjv" --num-layers 2 \
  --hidden-size 64 --num-attention-heads 4 --swiglu --position-embedding-type rope --vocab-size 128256
bad "--hidden-dropout 0.1: ljperf trains without dropout" --device cpu --data-path "$tmp/kjv" --num-layers 2 \
  --hidden-size 64 --num-attention-heads 4 --swiglu --normalization RMSNorm --position-embedding-type rope \
  --disable-bias-linear --vocab-size 128256 --hidden-dropout 0.1
bad "--train-iters 2 and --train-samples 8 exclude each other: give one" "${common[@]}" --train-iters 2 --train-samples 8
bad "--lr-decay-style WSD needs the anneal length: --lr-wsd-decay-iters" "${common[@]}" --lr-decay-style WSD
bad "--model llama3-nano and Megatron's model shape flags" "${common[@]}" --num-layers 2
LOCAL_RANK=1 bad "--local_rank=0 but the environment says LOCAL_RANK=1" "${common[@]}" --local_rank=0
"$LJPERF" train "${common[@]}" --train-iters 1 --local_rank=0 >/dev/null 2>&1 || fail "--local_rank=0 alone"
LOCAL_RANK=0 "$LJPERF" train "${common[@]}" --train-iters 1 --local_rank=0 >/dev/null 2>&1 \
  || fail "--local_rank=0 with LOCAL_RANK=0"
ok "argparse syntax, refusals and the launcher's --local_rank"

# Under an emulator (LJ_TEST_EMULATOR: a cross build's tests under qemu-user, some 40 times slower)
# the sections below are left out: the learning-rate schedules, --qk-layernorm and the document
# masking flags are argument handling and host arithmetic, the same on every host, and the math
# they reach (QK-norm, document masking) has its own C tests that run there.
if [ -n "${LJ_TEST_EMULATOR:-}" ]; then
  echo "ok: the schedule, --qk-layernorm and document masking sections skipped under $LJ_TEST_EMULATOR"
  exit 0
fi

# 4. schedules: the logged LR against Megatron's get_lr (warm-up counted from iteration 1)
lrs() { grep '"lr"' "$1" | sed -E 's/.*"lr": ([^,]+),.*/\1/'; }
check_lr() { # name, python expression of n (steps) for iterations 1..N, flags...
  local name="$1" expr="$2"; shift 2
  "$LJPERF" train "${common[@]}" --lr 1e-3 --min-lr 1e-4 "$@" --log-json "$tmp/lr.jsonl" >/dev/null 2>"$tmp/lr.err" \
    || { cat "$tmp/lr.err"; fail "$name run"; }
  python3 - "$tmp/lr.jsonl" "$expr" <<'PY' || fail "$name: the LR does not follow its formula"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    if "lr" not in r:  # the start record
        continue
    it = r["iteration"]
    want = eval(sys.argv[2], {"math": math, "it": it})
    if abs(r["lr"] - want) > 1e-9 + 1e-6 * want:
        sys.exit("iteration %d: lr %g, formula %g" % (it, r["lr"], want))
PY
  ok "$name"
}
# samples: global batch 2, 10 iterations = 20 samples, warm-up 4 samples, decay 16 samples
check_lr "cosine in samples" \
  "(1e-3*it*2/4) if it*2<=4 else (1e-4 if it*2>16 else 1e-4+0.9e-3*0.5*(1+math.cos(math.pi*(it*2-4)/12)))" \
  --train-samples 20 --lr-warmup-samples 4 --lr-decay-samples 16
check_lr "WSD, exponential anneal" \
  "(1e-3*it/2) if it<=2 else (1e-3 if it<=6 else 1e-4+0.9e-3*(2*0.5**((it-6)/4)-1))" \
  --train-iters 10 --lr-warmup-iters 2 --lr-decay-style WSD --lr-wsd-decay-iters 4
check_lr "WSD, minus_sqrt anneal" \
  "(1e-3*it/2) if it<=2 else (1e-3 if it<=6 else 1e-4+0.9e-3*(1-math.sqrt((it-6)/4)))" \
  --train-iters 10 --lr-warmup-iters 2 --lr-decay-style WSD --lr-wsd-decay-iters 4 --lr-wsd-decay-style minus_sqrt
check_lr "inverse-square-root" "(1e-3*it/4) if it<=4 else max(1e-4, 1e-3*math.sqrt(4)/math.sqrt(it))" \
  --train-iters 10 --lr-warmup-iters 4 --lr-decay-style inverse-square-root
check_lr "warm-up fraction" "(1e-3*it/2) if it<=2 else 1e-4+0.9e-3*(1-(it-2)/8)" \
  --train-iters 10 --lr-warmup-fraction 0.2 --lr-decay-style linear

# --qk-layernorm: Megatron's shape flags build a Qwen3-style model (QK-norm) whose losses equal the
# same shape given as a qwen3 config.json
cat >"$tmp/qwen3-shape.json" <<'EOF'
{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 128256, "hidden_size": 64,
 "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 16, "max_position_embeddings": 32, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
 "tie_word_embeddings": true, "use_sliding_window": false, "bos_token_id": 128000, "eos_token_id": 128001}
EOF
qk_run=(--device cpu --data-path "$tmp/kjv" --seq-length 32 --micro-batch-size 2 --train-iters 3 --lr 3e-3 --seed 7)
"$LJPERF" train "${qk_run[@]}" --num-layers 2 --hidden-size 64 --ffn-hidden-size 192 --num-attention-heads 4 \
  --group-query-attention --num-query-groups 2 --kv-channels 16 --swiglu --normalization RMSNorm \
  --position-embedding-type rope --disable-bias-linear --vocab-size 128256 --qk-layernorm \
  --log-json "$tmp/qk-mg.jsonl" >/dev/null 2>"$tmp/qk-mg.err" || { cat "$tmp/qk-mg.err"; fail "--qk-layernorm run"; }
"$LJPERF" train "${qk_run[@]}" --model "$tmp/qwen3-shape.json" --log-json "$tmp/qk-own.jsonl" >/dev/null \
  2>"$tmp/qk-own.err" || { cat "$tmp/qk-own.err"; fail "the qwen3 config.json run"; }
[ "$(losses "$tmp/qk-mg.jsonl" | wc -l)" = 3 ] || fail "--qk-layernorm did not run 3 iterations"
diff <(losses "$tmp/qk-own.jsonl") <(losses "$tmp/qk-mg.jsonl") || fail "--qk-layernorm losses differ from the qwen3 config's"
ok "--qk-layernorm equals the same shape as a qwen3 config.json"

# 5. document masking (--reset-position-ids, --reset-attention-mask, --eod-mask-loss): accepted with
# Megatron's names, said at start-up with the end-of-document id (the model's EOS on real data, the
# mock documents' vocab_size - 1 on --mock-data), each changes the losses, and the run without
# them is the default run bit for bit
dm=(--reset-position-ids --reset-attention-mask --eod-mask-loss)
head -c 30000 "$tmp/kjv.txt" | sed G > "$tmp/verses.txt" # one verse a document: about one EOD per window
"$LJPERF" prepare --input "$tmp/verses.txt" --split-on blank-line --output-prefix "$tmp/verses" >/dev/null 2>&1 \
  || fail "prepare verses"
common=("${common[@]/$tmp\/kjv/$tmp/verses}")
"$LJPERF" train "${common[@]}" --train-iters 3 --log-json "$tmp/plain.jsonl" >/dev/null 2>&1 || fail "plain run"
"$LJPERF" train "${common[@]}" --train-iters 3 "${dm[@]}" --log-json "$tmp/dm.jsonl" >/dev/null 2>"$tmp/dm.err" \
  || { cat "$tmp/dm.err"; fail "document masking run"; }
grep -q "document masking at end-of-document id 128001 (the model's eos_token_id, unless the dataset records its own): --reset-position-ids \
--reset-attention-mask --eod-mask-loss" "$tmp/dm.err" || { cat "$tmp/dm.err"; fail "document masking not said"; }
[ "$(losses "$tmp/dm.jsonl" | wc -l)" = 3 ] || fail "the document masking run did not run 3 iterations"
for f in --reset-position-ids --reset-attention-mask --eod-mask-loss; do
  "$LJPERF" train "${common[@]}" --train-iters 3 $f --log-json "$tmp/one.jsonl" >/dev/null 2>&1 || fail "$f alone"
  ! diff -q <(losses "$tmp/plain.jsonl") <(losses "$tmp/one.jsonl") >/dev/null || fail "$f changed nothing"
done
"$LJPERF" train "${common[@]}" --train-iters 3 --log-json "$tmp/plain2.jsonl" >/dev/null 2>&1 || fail "plain run 2"
diff <(losses "$tmp/plain.jsonl") <(losses "$tmp/plain2.jsonl") || fail "the default run is not reproducible"
"$LJPERF" train --model "$tmp/nano-128384.json" --mock-data --device cpu --seq-length 32 --micro-batch-size 2 --quiet \
  --eval-iters 0 --train-iters 1 "${dm[@]}" >/dev/null 2>"$tmp/dm-mock.err" || { cat "$tmp/dm-mock.err"; fail "mock"; }
grep -q "end-of-document id 128383 (the mock documents')" "$tmp/dm-mock.err" || fail "the mock EOD id not used"
# Qwen3: prepare ends documents with <|endoftext|> (151643), the model's eos_token_id is <|im_end|>
# (151645); the masking takes the separator the dataset records, so the flags change the losses
"$LJPERF" prepare --input "$tmp/verses.txt" --split-on blank-line --output-prefix "$tmp/qverses" --tokenizer qwen3 \
  >/dev/null 2>&1 || fail "prepare qwen3 verses"
grep -q '"eod_token_id": 151643' "$tmp/qverses.fingerprint.json" || fail "the qwen3 dataset does not record its EOD"
qcommon=(--model qwen3-tiny --device cpu --data-path "$tmp/qverses" --seq-length 32 --micro-batch-size 2 --eval-iters 0
         --train-iters 2 --tokenizer qwen3)
"$LJPERF" train "${qcommon[@]}" --quiet --log-json "$tmp/qplain.jsonl" >/dev/null 2>&1 || fail "qwen3 plain run"
"$LJPERF" train "${qcommon[@]}" "${dm[@]}" --log-json "$tmp/qdm.jsonl" >/dev/null 2>"$tmp/qdm.err" \
  || { cat "$tmp/qdm.err"; fail "qwen3 document masking run"; }
grep -q "document masking at end-of-document id 151643, the one .*qverses.fingerprint.json records" "$tmp/qdm.err" \
  || { cat "$tmp/qdm.err"; fail "the qwen3 separator not said"; }
! diff -q <(losses "$tmp/qplain.jsonl") <(losses "$tmp/qdm.jsonl") >/dev/null || fail "qwen3: the flags changed nothing"
# benchmark --data masks at the same separator: its first loss is train's first, with the flags and
# without (the same data order, seed and initial weights; before the first update)
for v in plain dm; do
  flags=(); [ $v = dm ] && flags=("${dm[@]}")
  "$LJPERF" benchmark --model qwen3-tiny --device cpu --seq-length 32 --micro-batch-size 2 --train-iters 1 \
    --warmup-iters 0 --no-progress --data "$tmp/qverses" "${flags[@]}" --json "$tmp/qbench-$v.json" >/dev/null \
    2>"$tmp/qbench-$v.err" || { cat "$tmp/qbench-$v.err"; fail "qwen3 benchmark ($v)"; }
done
grep -q "document masking at end-of-document id 151643, the one .*qverses.fingerprint.json records" "$tmp/qbench-dm.err" \
  || { cat "$tmp/qbench-dm.err"; fail "benchmark: the qwen3 separator not said"; }
python3 - "$tmp"/qbench-plain.json "$tmp"/qbench-dm.json "$tmp"/qplain.jsonl "$tmp"/qdm.jsonl <<'EOF' \
  || fail "benchmark --data with the masking flags: not train's loss"
import json, sys
bench = [json.load(open(p))["loss_first"] for p in sys.argv[1:3]]
train = [next(json.loads(l)["loss"] for l in open(p) if '"loss"' in l) for p in sys.argv[3:5]]
assert json.load(open(sys.argv[2]))["doc_mask"]["eod_token"] == 151643, "benchmark's end-of-document id"
assert abs(bench[0] - bench[1]) > 1e-3, f"the flags changed nothing: {bench}"
for b, t in zip(bench, train):  # float32 against a double
    assert abs(b - t) <= 1e-5 * abs(t), f"benchmark {bench} against train {train}"
print(f"benchmark --data qwen3: first loss {bench[0]:.5f} plain, {bench[1]:.5f} masked, as train's")
EOF
# benchmark --global-batch-size: 2 micro-batches of 2 per step, gradients accumulated as train
# does: its first loss is the mean of train's first two micro-batches (the same data order)
"$LJPERF" train "${qcommon[@]}" --global-batch-size 4 --quiet --log-json "$tmp/qgbs.jsonl" >/dev/null 2>&1 \
  || fail "qwen3 run with --global-batch-size 4"
"$LJPERF" benchmark --model qwen3-tiny --device cpu --seq-length 32 --micro-batch-size 2 --global-batch-size 4 \
  --train-iters 2 --warmup-iters 0 --no-progress --data "$tmp/qverses" --json "$tmp/qbench-gbs.json" >"$tmp/qbench-gbs.out" \
  2>&1 || { cat "$tmp/qbench-gbs.out"; fail "benchmark --global-batch-size 4"; }
grep -q "micro-batch 2, global batch 4 (2 accumulation steps)" "$tmp/qbench-gbs.out" \
  || { cat "$tmp/qbench-gbs.out"; fail "benchmark does not say its accumulation"; }
python3 - "$tmp"/qbench-gbs.json "$tmp"/qgbs.jsonl "$tmp"/qbench-plain.json <<'EOF' \
  || fail "benchmark --global-batch-size: not train's accumulation"
import json, sys
b = json.load(open(sys.argv[1]))
t = next(json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l)
one = json.load(open(sys.argv[3]))["loss_first"]
assert b["global_batch_size"] == 4 and b["accumulation_steps"] == 2, b
assert abs(b["loss_first"] - t) <= 1e-5 * abs(t), f"benchmark {b['loss_first']} against train {t}"
assert abs(b["loss_first"] - one) > 1e-6, "the second micro-batch changed nothing"
print(f"benchmark --global-batch-size 4: first loss {b['loss_first']:.5f}, train's {t:.5f}")
EOF
if "$LJPERF" benchmark --model llama3-nano --device cpu --micro-batch-size 2 --global-batch-size 3 >/dev/null \
  2>"$tmp/bench.err"; then fail "benchmark --global-batch-size 3 with micro-batch 2 accepted"; fi
grep -q -- "--global-batch-size 3 is not a multiple of --micro-batch-size 2 x 1 data-parallel rank = 2" "$tmp/bench.err" \
  || { cat "$tmp/bench.err"; fail "benchmark --global-batch-size message"; }
if "$LJPERF" benchmark --model llama3-nano --device cpu --micro-batch-size auto --global-batch-size 4 >/dev/null \
  2>"$tmp/bench.err"; then fail "benchmark --global-batch-size with --micro-batch-size auto accepted"; fi
grep -q -- "--global-batch-size 4 needs an explicit --micro-batch-size" "$tmp/bench.err" \
  || { cat "$tmp/bench.err"; fail "benchmark --global-batch-size auto message"; }
# benchmark --save --save-interval --async-save: train's checkpoint every 2 steps, written in the
# background; the steps' hold for each measured, and train resumes it
"$LJPERF" benchmark --model llama3-nano --device cpu --seq-length 32 --micro-batch-size 2 --train-iters 4 \
  --warmup-iters 1 --no-progress --save "$tmp/bench-ckpt" --save-interval 2 --async-save --json "$tmp/bench-save.json" \
  >"$tmp/bench-save.out" 2>&1 || { cat "$tmp/bench-save.out"; fail "benchmark --async-save"; }
grep -q "checkpoints (--save every 2 steps, --async-save" "$tmp/bench-save.out" \
  || { cat "$tmp/bench-save.out"; fail "benchmark does not report its saves"; }
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["saves"] == 2 and d["async_save"] and d["save_stall_max_s"] >= d["save_stall_mean_s"] > 0, d' \
  "$tmp/bench-save.json" || fail "benchmark --async-save: the JSON"
[ -d "$tmp/bench-ckpt/iter_0000004" ] || fail "benchmark --save: no checkpoint of step 4"
"$LJPERF" train --model llama3-nano --mock-data --device cpu --seq-length 32 --micro-batch-size 2 --global-batch-size 2 \
  --load "$tmp/bench-ckpt" --train-iters 5 --eval-iters 0 >"$tmp/bench-resume.out" 2>&1 \
  || { cat "$tmp/bench-resume.out"; fail "train --load of the benchmark's checkpoint"; }
grep -q "resumed from .*iter_0000004 at iteration 4" "$tmp/bench-resume.out" \
  || { cat "$tmp/bench-resume.out"; fail "train did not resume the benchmark's checkpoint"; }
# SIGTERM during benchmark --save: the step ends, the last save is finished, nothing half-written
"$LJPERF" benchmark --model llama3-nano --device cpu --seq-length 32 --micro-batch-size 2 --train-iters 100000 \
  --warmup-iters 0 --no-progress --save "$tmp/bench-sig" --save-interval 1 --async-save >"$tmp/bench-sig.out" 2>&1 &
sigpid=$!
for _ in $(seq 600); do [ -f "$tmp/bench-sig/latest_checkpointed_iteration.txt" ] && break; sleep 0.1; done
kill -TERM "$sigpid"
st=0
for _ in $(seq 600); do kill -0 "$sigpid" 2>/dev/null || break; sleep 0.1; done
kill -KILL "$sigpid" 2>/dev/null && fail "benchmark --save: still running 60 s after SIGTERM"
wait "$sigpid" || st=$?
[ "$st" != 0 ] || fail "benchmark stopped by SIGTERM exited 0"
grep -q "stopped by a signal after step [0-9]*; the checkpoints in .* are complete" "$tmp/bench-sig.out" \
  || { cat "$tmp/bench-sig.out"; fail "benchmark: the SIGTERM message"; }
! ls -d "$tmp/bench-sig"/*.tmp.* >/dev/null 2>&1 || fail "benchmark: a half-written checkpoint left after SIGTERM"
bad "--eod-mask-loss takes no value" "${common[@]}" --eod-mask-loss=1
if "$LJPERF" benchmark --model llama3-nano --device cpu --reset-attention-mask >/dev/null 2>"$tmp/bench.err"; then
  fail "benchmark --reset-attention-mask without --data accepted"
fi
grep -q -- "--reset-attention-mask needs --data PREFIX" "$tmp/bench.err" || { cat "$tmp/bench.err"; fail "benchmark message"; }
"$LJPERF" benchmark --model llama3-nano --device cpu --seq-length 64 --train-iters 1 --warmup-iters 0 --no-progress \
  --data "$tmp/verses" "${dm[@]}" >"$tmp/bench.out" 2>&1 || { cat "$tmp/bench.out"; fail "benchmark with the flags"; }
grep -q "^documents per sequence" "$tmp/bench.out" || fail "benchmark does not print the documents per sequence"
ok "document masking flags"

echo "test_megatron_args: all passed"

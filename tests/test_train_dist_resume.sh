#!/usr/bin/env bash
# test_train_dist_resume.sh: checkpoints of data-parallel runs on CPU ranks (MPI), against the
# one-process run with the same global batch:
#   - a run saved on 2 ranks (stage 2) resumes on 3 ranks (stage 1), and one saved on 2 ranks
#     under stage 3 resumes on 3 ranks under stage 3, continuing the single-process losses;
#   - the single-file format's per-rank ZeRO shard files (--ckpt-format torch,
#     zero_shard_rank_RRRRR.safetensors): runs saved on 2 ranks under stages 1 and 3 resume on 2
#     ranks from the shards, continuing the single-process losses and bit-identical to the resume
#     from the consolidated state; on 3 ranks they resume from the consolidated state (logged); a
#     missing, truncated or another rank's shard file is an error naming the file;
#   - DeepSpeed configs with offload_optimizer "cpu", "stage": 3 and "stage": 2 under
#     --nproc-per-node; offload under stage 0 refused by name;
#   - ZeRO-3 and ZeRO-2 with an untied lm_head, the unfused kernels and full recompute.
source "$(dirname "$0")/train_dist_lib.sh" train_dist_resume

# a DeepSpeed config with offload_optimizer "cpu" (stage 2); the cpu backend moves nothing
printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2,
 "offload_optimizer": {"device": "cpu", "pin_memory": true}}}\n' > "$tmp/dso.json"
"$LJPERF" train "${common[@]}" --deepspeed "$tmp/dso.json" --nproc-per-node 2 --save "$tmp/dso" \
  --log-json "$tmp/dso.jsonl" 2>"$tmp/dso.err" || { cat "$tmp/dso.err"; fail "DeepSpeed offload config on 2 ranks"; }
grep -q "offload_optimizer.device \"cpu\"): the cpu backend keeps the AdamW state in host memory already" "$tmp/dso.err" \
  || { cat "$tmp/dso.err"; fail "DeepSpeed offload not reported"; }
echo "1 rank vs 2 ranks, DeepSpeed config with offload_optimizer cpu:"
compare "$tmp/w1.jsonl" "$tmp/dso.jsonl" "$tmp/w1" "$tmp/dso" || fail "DeepSpeed offload config differs"
# offload needs ZeRO stage >= 1
if "$LJPERF" train "${common[@]}" --offload-optimizer cpu 2>"$tmp/o0.err"; then fail "offload under stage 0 was accepted"; fi
grep -q -- "--offload-optimizer cpu: optimizer offload needs ZeRO stage 1, 2 or 3" "$tmp/o0.err" \
  || { cat "$tmp/o0.err"; fail "stage-0 offload refusal does not name the flag"; }
printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 0,
 "offload_optimizer": {"device": "cpu"}}}\n' > "$tmp/dso0.json"
if "$LJPERF" train "${common[@]}" --deepspeed "$tmp/dso0.json" 2>"$tmp/o0.err"; then fail "DeepSpeed offload under stage 0 accepted"; fi
grep -q "offload_optimizer" "$tmp/o0.err" || { cat "$tmp/o0.err"; fail "DeepSpeed stage-0 offload refusal does not name the key"; }


# saved on 2 ranks (stage 2) after iteration 2, resumed on 3 ranks (stage 1)
"$LJPERF" train "${common[@]}" --nproc-per-node 2 --zero-stage 2 --save "$tmp/r" --exit-interval 2 \
  --log-json "$tmp/r.jsonl" 2>"$tmp/r1.err" || { cat "$tmp/r1.err"; fail "first half on 2 ranks"; }
mpi 3 "$LJPERF" train "${common[@]}" --zero-stage 1 \
  --save "$tmp/r" --load "$tmp/r" --log-json "$tmp/r.jsonl" 2>"$tmp/r2.err" || { cat "$tmp/r2.err"; fail "resume on 3 ranks"; }
[ "$(grep -c '"loss"' "$tmp/r.jsonl")" = 4 ] || fail "expected 4 logged iterations over the two halves"
echo "saved on 2 ranks, resumed on 3:"; compare "$tmp/w1.jsonl" "$tmp/r.jsonl" || fail "resume on another world size"

# ZeRO-3 with an untied lm_head (its own gather group), the unfused kernels and full recompute
printf '{"architectures": ["LlamaForCausalLM"], "vocab_size": 2048, "hidden_size": 64, "intermediate_size": 192,
 "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
 "tie_word_embeddings": false, "max_position_embeddings": 8192, "bos_token_id": 1, "eos_token_id": 2}\n' > "$tmp/untied.json"
untied=(--model "$tmp/untied.json" --train-iters 3 --no-fusion --recompute-granularity full)
"$LJPERF" train "${common[@]}" "${untied[@]}" --save "$tmp/u1" --log-json "$tmp/u1.jsonl" 2>"$tmp/u1.err" \
  || { cat "$tmp/u1.err"; fail "untied model on 1 rank"; }
mpi 3 "$LJPERF" train "${common[@]}" "${untied[@]}" --zero-stage 3 \
  --save "$tmp/u3" --log-json "$tmp/u3.jsonl" 2>"$tmp/u3.err" || { cat "$tmp/u3.err"; fail "untied model, stage 3 on 3 ranks"; }
echo "untied lm_head, unfused, full recompute: 1 rank vs 3 ranks, ZeRO stage 3:"
compare "$tmp/u1.jsonl" "$tmp/u3.jsonl" "$tmp/u1" "$tmp/u3" || fail "untied model under ZeRO stage 3 differs"
mpi 3 "$LJPERF" train "${common[@]}" "${untied[@]}" --zero-stage 2 \
  --save "$tmp/u32" --log-json "$tmp/u32.jsonl" 2>"$tmp/u3.err" || { cat "$tmp/u3.err"; fail "untied model, stage 2 on 3 ranks"; }
echo "untied lm_head, unfused, full recompute: 1 rank vs 3 ranks, ZeRO stage 2:"
compare "$tmp/u1.jsonl" "$tmp/u32.jsonl" "$tmp/u1" "$tmp/u32" || fail "untied model under ZeRO stage 2 differs"

# a DeepSpeed config with "stage": 3 (DeepSpeed's batch rule gives 3 accumulation steps on 2 ranks)
printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3,
 "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": 0}}\n' > "$tmp/ds3.json"
"$LJPERF" train "${common[@]}" --deepspeed "$tmp/ds3.json" --nproc-per-node 2 --save "$tmp/d3" \
  --log-json "$tmp/d3.jsonl" 2>"$tmp/d3.err" || { cat "$tmp/d3.err"; fail "DeepSpeed stage 3 config on 2 ranks"; }
grep -q "ZeRO stage 3" "$tmp/d3.err" || { cat "$tmp/d3.err"; fail "DeepSpeed stage 3 not reported"; }
echo "1 rank vs 2 ranks, DeepSpeed config with stage 3:"
compare "$tmp/w1.jsonl" "$tmp/d3.jsonl" "$tmp/w1" "$tmp/d3" || fail "DeepSpeed stage 3 differs"

# a DeepSpeed config with "stage": 2, overlap_comm and reduce_bucket_size (3 accumulation steps on 2 ranks)
printf '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2,
 "overlap_comm": true, "reduce_bucket_size": 5000, "contiguous_gradients": true}}\n' > "$tmp/ds2.json"
"$LJPERF" train "${common[@]}" --deepspeed "$tmp/ds2.json" --nproc-per-node 2 --save "$tmp/d2" \
  --log-json "$tmp/d2.jsonl" 2>"$tmp/d2.err" || { cat "$tmp/d2.err"; fail "DeepSpeed stage 2 config on 2 ranks"; }
grep -q "ZeRO stage 2: overlap_comm on" "$tmp/d2.err" || { cat "$tmp/d2.err"; fail "DeepSpeed stage 2 overlap_comm not reported"; }
echo "1 rank vs 2 ranks, DeepSpeed config with stage 2:"
compare "$tmp/w1.jsonl" "$tmp/d2.jsonl" "$tmp/w1" "$tmp/d2" || fail "DeepSpeed stage 2 differs"

# the single-file format (--ckpt-format torch, and every checkpoint from before the sharded one):
# per-rank ZeRO shard files saved on 2 ranks after iteration 2 (stages 1 and 3), resumed on 2 ranks
# from the shards; the same resume from the consolidated state (state.json without its "zero"
# entry, as an older checkpoint) gives bit-identical losses and final state
for stage in 1 3; do
  d="$tmp/sh$stage"
  "$LJPERF" train "${common[@]}" --ckpt-format torch --nproc-per-node 2 --zero-stage $stage --save "$d" --exit-interval 2 \
    --log-json "$d.jsonl" 2>"$d.err" || { cat "$d.err"; fail "shards: first half, stage $stage"; }
  for rank in 0 1; do
    [ -f "$d/iter_0000002/zero_shard_rank_0000$rank.safetensors" ] || fail "no shard file of rank $rank (stage $stage)"
  done
  cp -r "$d" "$d-c"; cp "$d.jsonl" "$d-c.jsonl"; cp -r "$d" "$d-keep"
  python3 -c 'import json, sys; p = sys.argv[1]; s = json.load(open(p)); del s["zero"]; json.dump(s, open(p, "w"))' \
    "$d-c/iter_0000002/state.json"
  # an older checkpoint has no checksum of its state.json either: drop it (the header keeps its length)
  python3 - "$d-c/iter_0000002/state.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); del h['__metadata__']['xxh3_64.state.json']
t = json.dumps(h).encode(); b[8:8 + n] = t + b' ' * (n - len(t)); open(p, 'wb').write(b)
PY
  "$LJPERF" train "${common[@]}" --ckpt-format torch --nproc-per-node 2 --zero-stage $stage --save "$d" --load "$d" --log-json "$d.jsonl" \
    2>"$d.err" || { cat "$d.err"; fail "shards: resume, stage $stage"; }
  grep -q "from the per-rank ZeRO shard files" "$d.err" || { cat "$d.err"; fail "stage $stage resume did not use the shards"; }
  "$LJPERF" train "${common[@]}" --ckpt-format torch --nproc-per-node 2 --zero-stage $stage --save "$d-c" --load "$d-c" --log-json "$d-c.jsonl" \
    2>"$d-c.err" || { cat "$d-c.err"; fail "consolidated resume, stage $stage"; }
  grep -q "no per-rank ZeRO shard files in this checkpoint: resuming from the consolidated" "$d-c.err" \
    || { cat "$d-c.err"; fail "stage $stage consolidated resume not reported"; }
  echo "saved on 2 ranks, resumed on 2 from the shard files, ZeRO stage $stage:"
  compare "$tmp/w1.jsonl" "$d.jsonl" "$tmp/w1" "$d" || fail "stage $stage resume from shards differs"
  same_run "$d" "$d-c" || fail "stage $stage: resume from shards differs from the consolidated resume"
  cmp -s "$d/iter_0000004/zero_shard_rank_00001.safetensors" "$d-c/iter_0000004/zero_shard_rank_00001.safetensors" \
    || fail "stage $stage: final shard files differ between the two resumes"
  echo "  bit-identical to the resume from the consolidated state"
done
# another world size: the consolidated state, with the reason logged
mpi 3 "$LJPERF" train "${common[@]}" --zero-stage 1 \
  --save "$tmp/sh1-keep" --load "$tmp/sh1-keep" --log-json "$tmp/sh13.jsonl" 2>"$tmp/sh13.err" \
  || { cat "$tmp/sh13.err"; fail "shards: resume on 3 ranks"; }
grep -q "saved on 2 ranks under ZeRO stage 1, this run has 3 ranks under stage 1: the per-rank ZeRO shard files are not used" \
  "$tmp/sh13.err" || { cat "$tmp/sh13.err"; fail "3-rank resume did not report the fallback"; }
echo "saved on 2 ranks (shards), resumed on 3 from the consolidated state, ZeRO stage 1:"
compare "$tmp/w1.jsonl" "$tmp/sh13.jsonl" "$tmp/w1" "$tmp/sh1-keep" || fail "fallback resume on 3 ranks differs"
# a missing, truncated or mismatched shard file on a same-world resume is an error naming the file
bad="$tmp/sh3-keep"
shard_error() { # shard_error PATTERN: the stage-3 resume of $bad on 2 ranks fails naming PATTERN
  local st=0
  "$LJPERF" train "${common[@]}" --nproc-per-node 2 --zero-stage 3 --load "$bad" 2>"$tmp/bad.err" || st=$?
  [ "$st" != 0 ] && grep -q -- "$1" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "expected an error naming '$1'"; }
}
f0="$bad/iter_0000002/zero_shard_rank_00000.safetensors" f1="$bad/iter_0000002/zero_shard_rank_00001.safetensors"
cp "$f0" "$tmp/f0"; cp "$f1" "$tmp/f1"
head -c 5000 "$tmp/f1" > "$f1"
shard_error "zero_shard_rank_00001.safetensors"
cp "$tmp/f1" "$f1"; rm "$f0"
shard_error "zero_shard_rank_00000.safetensors"
cp "$tmp/f1" "$f0"
shard_error "zero_shard_rank_00000.safetensors: metadata 'rank' is 1, this rank needs 0"
echo "missing, truncated and mismatched shard files: errors naming the file and field"


# saved on 2 ranks under stage 3 after iteration 2, resumed on 3 ranks under stage 3
"$LJPERF" train "${common[@]}" --nproc-per-node 2 --zero-stage 3 --save "$tmp/r3" --exit-interval 2 \
  --log-json "$tmp/r3.jsonl" 2>"$tmp/r31.err" || { cat "$tmp/r31.err"; fail "first half on 2 ranks, stage 3"; }
mpi 3 "$LJPERF" train "${common[@]}" --zero-stage 3 \
  --save "$tmp/r3" --load "$tmp/r3" --log-json "$tmp/r3.jsonl" 2>"$tmp/r32.err" || { cat "$tmp/r32.err"; fail "stage 3 resume on 3 ranks"; }
[ "$(grep -c '"loss"' "$tmp/r3.jsonl")" = 4 ] || fail "expected 4 logged iterations over the two stage-3 halves"
echo "saved on 2 ranks, resumed on 3, ZeRO stage 3:"
compare "$tmp/w1.jsonl" "$tmp/r3.jsonl" "$tmp/w1" "$tmp/r3" || fail "stage 3 resume on another world size"


rm -rf "$tmp" # a failing run keeps its files for a look
echo "1 passed, 0 failed"

#!/usr/bin/env bash
# test_vl_train.sh: Qwen3-VL end to end on the CPU with real photographs (tests/data/vl_example.jsonl
# over scikit-image's pictures, set up by scripts/setup.sh):
#   - prepare writes the multimodal dataset;
#   - train qwen3-vl-tiny on one repeated sample: finite losses that go down;
#   - a run stopped at iteration 2 and resumed with --load gives the uninterrupted run's losses
#     bit for bit, on the four-sample dataset (the loader's position is part of the state);
#   - the checkpoint's HF export has the files transformers needs, and trains again from --load;
#   - generate --image answers greedily and deterministically; a video file is refused by name;
#   - the freezing flags: a frozen language model keeps its weights in the export;
#   - --recompute none, selective, full and auto: the same losses, gradient norms and weights bit for bit;
#   - --global-batch-size: micro-batch 1 x 2 accumulated gives micro-batch 2's losses, resumes exactly,
#     and a global batch that is not a multiple of the micro-batch is refused by name;
#   - faults: a damaged checkpoint resumed without --model names its damage (not the text loop's
#     model_type), NaN weights in an HF checkpoint are refused naming the file and the tensor, an
#     unwritable --save is refused before the first step, and a run that fails before its first
#     step leaves no --log-json of its own.
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/vl_train"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }

images="$LJ_CACHE/images/skimage"
source "$(dirname "$0")/vl_data_lib.sh"
vl_prepare_datasets "$tmp" # $tmp/four and $tmp/one

common=(--model qwen3-vl-tiny --device cpu --seq-length 48 --micro-batch-size 1 --lr 1e-3 --seed 5 --quiet
        --num-workers 1)
losses() { grep '"loss"' "$1" | sed -E 's/.*"iteration": ([0-9]+), "loss": ([^,]+),.*/\1 \2/'; } # the start records have no loss
steps() { grep '"loss"' "$1" | sed -E 's/, "iteration_ms".*//'; } # iteration, loss, lr, grad_norm, tokens

# 1. a repeated batch: finite, decreasing
"$LJPERF" train "${common[@]}" --data-path "$tmp/one" --train-iters 4 --log-json "$tmp/one.jsonl.log" \
  >/dev/null 2>"$tmp/one.err" || { cat "$tmp/one.err"; fail "training on one sample"; }
losses "$tmp/one.jsonl.log" | awk 'BEGIN{n=0} { if ($2 != $2 + 0 || $2 == "nan" || $2 == "inf") bad = 1; l[n++] = $2 }
  END { if (n != 4 || bad) exit 1; for (i = 1; i < n; i++) if (l[i] >= l[i-1]) exit 1 }' \
  || { losses "$tmp/one.jsonl.log"; fail "the losses on a repeated batch are not finite and decreasing"; }
echo "repeated batch: losses $(losses "$tmp/one.jsonl.log" | awk '{printf "%s ", $2}')"

# 2. exact resume
"$LJPERF" train "${common[@]}" --data-path "$tmp/four" --train-iters 4 --log-json "$tmp/full.log" \
  >/dev/null 2>"$tmp/full.err" || { cat "$tmp/full.err"; fail "uninterrupted run"; }
"$LJPERF" train "${common[@]}" --data-path "$tmp/four" --train-iters 2 --save "$tmp/ckpt" --log-json "$tmp/part.log" \
  >/dev/null 2>"$tmp/part.err" || { cat "$tmp/part.err"; fail "first half"; }
[ "$(cat "$tmp/ckpt/latest_checkpointed_iteration.txt")" = 2 ] || fail "latest_checkpointed_iteration.txt is not 2"
"$LJPERF" train --device cpu --seq-length 48 --lr 1e-3 --seed 5 --num-workers 1 --data-path "$tmp/four" \
  --train-iters 4 --load "$tmp/ckpt" --save "$tmp/ckpt" --log-json "$tmp/part.log" >/dev/null 2>"$tmp/resume.err" \
  || { cat "$tmp/resume.err"; fail "resume (the model from the checkpoint)"; }
grep -q "resumed .* at iteration 2" "$tmp/resume.err" || fail "resume did not say where it resumed"
grep -q "Qwen3-VL qwen3-vl-tiny: " "$tmp/resume.err" \
  || { grep "Qwen3-VL" "$tmp/resume.err"; fail "the resumed run does not name its model as the checkpoint records it"; }
diff <(losses "$tmp/full.log") <(losses "$tmp/part.log") || fail "resumed losses differ from the uninterrupted run"
echo "resume: 4 losses equal bit for bit"

# 3. the HF export
hf="$tmp/ckpt/iter_0000004/hf"
for f in config.json model.safetensors preprocessor_config.json video_preprocessor_config.json tokenizer.json \
         tokenizer_config.json chat_template.jinja; do
  [ -s "$hf/$f" ] || fail "the export lacks $f"
done
grep -q '"model_type":[[:space:]]*"qwen3_vl"' "$hf/config.json" || fail "config.json is not qwen3_vl"
grep -q '"longest_edge":[[:space:]]*16384' "$hf/preprocessor_config.json" || fail "the processor lost the dataset's max pixels"
grep -q 'vision_start' "$hf/tokenizer_config.json" || fail "tokenizer_config.json has no Qwen3-VL chat template"
"$LJPERF" train --device cpu --seq-length 48 --lr 1e-3 --seed 5 --quiet --num-workers 1 --data-path "$tmp/four" \
  --train-iters 1 --load "$hf" --log-json "$tmp/hf.log" >/dev/null 2>"$tmp/hf.err" \
  || { cat "$tmp/hf.err"; fail "training from the HF export"; }
# the export holds iteration 4's (bf16) weights: a finite loss below a fresh model's (ln 151936 = 11.93)
awk -F'"loss": ' '{ split($2, a, ","); if (!(a[1] + 0 < 11.9)) exit 1 }' "$tmp/hf.log" \
  || { cat "$tmp/hf.log"; fail "loss from the HF export"; }

# 4. generate --image: greedy, deterministic
gen=(generate --load "$tmp/ckpt" --image "$images/chelsea.png" --prompt "What animal is in this picture?"
     --max-new-tokens 6)
"$LJPERF" "${gen[@]}" --output-json "$tmp/g1.json" >"$tmp/g1.txt" 2>"$tmp/g1.err" || { cat "$tmp/g1.err"; fail "generate"; }
"$LJPERF" "${gen[@]}" --output-json "$tmp/g2.json" >"$tmp/g2.txt" 2>/dev/null || fail "generate (again)"
cmp -s "$tmp/g1.json" "$tmp/g2.json" || fail "generate --image is not deterministic"
grep -q '"ids":' "$tmp/g1.json" || fail "generate --output-json has no ids"
grep -q '"image_grid_thw":[[:space:]]*\[1, 6, 8\]' "$tmp/g1.json" \
  || { cat "$tmp/g1.json"; fail "generate did not preprocess with the export's limits (chelsea: 6 x 8 patches)"; }
echo "generate: $(tr -d '\n' < "$tmp/g1.txt")"
# the answer's length and time, as the text generate says them (an empty answer reads "[0 tokens in")
grep -qE '^\[[0-9]+ tokens in [0-9.]+ s: .* on cpu' "$tmp/g1.err" \
  || { cat "$tmp/g1.err"; fail "generate --image does not report the tokens generated"; }
"$LJPERF" generate --help | grep -q -- "--image FILE" || fail "generate --help does not list --image"
# a VL model without --image: said so, not the text loader's model_type message
if "$LJPERF" generate --load "$tmp/ckpt" --prompt "hello" >/dev/null 2>"$tmp/noimage.err"; then
  fail "generate of a VL model without --image was accepted"
fi
grep -q "a Qwen3-VL model (model_type qwen3_vl); generate of it needs --image FILE" "$tmp/noimage.err" \
  || { cat "$tmp/noimage.err"; fail "generate without --image does not say that the model needs one"; }
touch "$tmp/clip.mp4"
if "$LJPERF" generate --load "$tmp/ckpt" --image "$tmp/clip.mp4" >/dev/null 2>"$tmp/video.err"; then
  fail "a video file was accepted"
fi
grep -q "clip.mp4: a video file" "$tmp/video.err" || { cat "$tmp/video.err"; fail "the video refusal does not name the file"; }

# 5. --freeze-language-model: the decoder's weights are the initial ones
"$LJPERF" train "${common[@]}" --data-path "$tmp/one" --train-iters 0 --save "$tmp/init" >/dev/null 2>&1 \
  || fail "a run of 0 iterations"
"$LJPERF" train "${common[@]}" --data-path "$tmp/one" --train-iters 2 --freeze-language-model --save "$tmp/frozen" \
  --log-json "$tmp/frozen.log" >/dev/null 2>"$tmp/frozen.err" || { cat "$tmp/frozen.err"; fail "frozen language model"; }
python3 - "$tmp/init/iter_0000000/hf/model.safetensors" "$tmp/frozen/iter_0000002/hf/model.safetensors" <<'EOF' \
  || fail "--freeze-language-model changed the decoder, or the tower did not train"
import json, struct, sys
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    head.pop("__metadata__", None)
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
text = [k for k in a if k.startswith("model.language_model.")]
vis = [k for k in a if k.startswith("model.visual.") and k.endswith(".weight")]
assert text and all(a[k] == b[k] for k in text), "decoder changed"
assert any(a[k] != b[k] for k in vis), "vision tower did not change"
EOF
echo "freeze: the decoder unchanged, the tower trained"

# 6. --recompute replays the decoder's forward: losses, gradient norms and the weights after 2 steps
#    are those without it, bit for bit
loud=(); for a in "${common[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done # its log names the policy
for rc in none selective full auto; do
  "$LJPERF" train "${loud[@]}" --data-path "$tmp/four" --train-iters 2 --recompute "$rc" --save "$tmp/rc_$rc" \
    --log-json "$tmp/rc_$rc.log" >/dev/null 2>"$tmp/rc_$rc.err" || { cat "$tmp/rc_$rc.err"; fail "--recompute $rc"; }
done
grep -q "decoder recompute (--recompute full): 4 full + 0 selective + 0 none" "$tmp/rc_full.err" \
  && grep -q "decoder recompute (--recompute selective): 0 full + 4 selective + 0 none" "$tmp/rc_selective.err" \
  && grep -q "train: recompute planner: no recompute" "$tmp/rc_auto.err" \
  || { cat "$tmp/rc_full.err" "$tmp/rc_selective.err" "$tmp/rc_auto.err"; fail "the runs do not say their recompute"; }
for rc in selective full auto; do
  diff <(steps "$tmp/rc_none.log") <(steps "$tmp/rc_$rc.log") || fail "--recompute $rc changed the losses"
  cmp -s "$tmp/rc_none/iter_0000002/state.safetensors" "$tmp/rc_$rc/iter_0000002/state.safetensors" \
    || fail "--recompute $rc changed the weights or the AdamW moments"
done
rm -rf "$tmp"/rc_none "$tmp"/rc_selective "$tmp"/rc_full "$tmp"/rc_auto
echo "recompute: none, selective, full and auto (none: the tiny run fits) give the same 2 steps bit for bit"

# 7. --global-batch-size: micro-batch 1 x 2 accumulated = micro-batch 2 on the same rows (the loss a
#    mean over the global batch's trained tokens, whose counts differ between rows), to rounding
"$LJPERF" train "${common[@]}" --data-path "$tmp/four" --train-iters 4 --global-batch-size 2 --log-json "$tmp/acc.log" \
  >/dev/null 2>"$tmp/acc.err" || { cat "$tmp/acc.err"; fail "micro-batch 1, global batch 2"; }
"$LJPERF" train "${common[@]}" --data-path "$tmp/four" --train-iters 4 --micro-batch-size 2 --global-batch-size 2 \
  --log-json "$tmp/mb2.log" >/dev/null 2>"$tmp/mb2.err" || { cat "$tmp/mb2.err"; fail "micro-batch 2"; }
batch_of() { grep -o '"micro_batch_size":[[:space:]]*[0-9]*,[[:space:]]*"global_batch_size":[[:space:]]*[0-9]*' "$1" | tr -dc '0-9,'; }
[ "$(batch_of "$tmp/acc.log")" = 1,2 ] || fail "acc.log's start record: not micro-batch 1, global batch 2"
[ "$(batch_of "$tmp/mb2.log")" = 2,2 ] || fail "mb2.log's start record: not micro-batch 2, global batch 2"
paste <(losses "$tmp/acc.log") <(losses "$tmp/mb2.log") | awk '
  { d = $2 - $4; if (d < 0) d = -d; if (d > 1e-6 * $4) bad = 1; printf "  iteration %d: %s %s\n", $1, $2, $4; n++ }
  END { exit !(n == 4 && !bad) }' || fail "micro-batch 1 x 2 and micro-batch 2 give different losses"
tok() { grep '"loss"' "$1" | sed -E 's/.*"tokens": ([0-9]+).*/\1/'; }
diff <(tok "$tmp/acc.log") <(tok "$tmp/mb2.log") || fail "the tokens of a global batch differ"
# an odd count: that iteration's two rows train different numbers of tokens, where a mean of the
# micro-batches' means (not a mean over the global batch) would give another loss
tok "$tmp/acc.log" | awk '$1 % 2 == 1 { odd = 1 } END { exit !odd }' \
  || fail "every global batch's rows train as many tokens: the test does not tell the normalisations apart"
# resume after 2 accumulated iterations: the loader continues after both micro-batches
"$LJPERF" train "${common[@]}" --data-path "$tmp/four" --train-iters 2 --global-batch-size 2 --save "$tmp/acc_ckpt" \
  --log-json "$tmp/acc_part.log" >/dev/null 2>"$tmp/acc_part.err" || { cat "$tmp/acc_part.err"; fail "accumulated, first half"; }
"$LJPERF" train "${common[@]}" --data-path "$tmp/four" --train-iters 4 --global-batch-size 2 --load "$tmp/acc_ckpt" \
  --log-json "$tmp/acc_part.log" >/dev/null 2>"$tmp/acc_resume.err" || { cat "$tmp/acc_resume.err"; fail "accumulated, resume"; }
diff <(steps "$tmp/acc.log") <(steps "$tmp/acc_part.log") || fail "the resumed accumulated run differs"
rm -rf "$tmp/acc_ckpt"
if "$LJPERF" train "${common[@]}" --data-path "$tmp/four" --train-iters 1 --micro-batch-size 2 --global-batch-size 3 \
  >/dev/null 2>"$tmp/gbs.err"; then fail "--global-batch-size 3 with --micro-batch-size 2 was accepted"; fi
grep -q -- "--global-batch-size 3 is not a positive multiple of --micro-batch-size 2" "$tmp/gbs.err" \
  || { cat "$tmp/gbs.err"; fail "the refusal does not name --global-batch-size"; }
echo "global batch: micro-batch 1 x 2 = micro-batch 2 (within 1e-6), exact resume, a non-multiple refused"

# 8. faults
# a damaged checkpoint, resumed the README's way (no --model): the VL loop runs and names the damage
resume_fault() { # NAME EXPECTED: resume $tmp/dmg_NAME, expect EXPECTED on stderr
  if "$LJPERF" train --device cpu --seq-length 48 --num-workers 1 --data-path "$tmp/four" --train-iters 5 --quiet \
    --load "$tmp/dmg_$1" >/dev/null 2>"$tmp/dmg_$1.err"; then fail "a checkpoint with $1 resumed"; fi
  ! grep -q "model_type" "$tmp/dmg_$1.err" || { cat "$tmp/dmg_$1.err"; fail "$1: the text loop's model_type message"; }
  grep -qF -- "$2" "$tmp/dmg_$1.err" || { cat "$tmp/dmg_$1.err"; fail "$1: the message does not say '$2'"; }
}
for d in truncated emptied missing edited; do
  rm -rf "$tmp/dmg_$d" && cp -r "$tmp/ckpt" "$tmp/dmg_$d"
  st="$tmp/dmg_$d/iter_0000004/state.safetensors"
  case $d in
    truncated) truncate -s 1000 "$st" ;;
    emptied) : >"$st" ;;
    missing) rm "$st" ;;
    edited) sed -i 's/"seed": 5/"seed": 6/' "$tmp/dmg_$d/iter_0000004/state.json" ;;
  esac
done
resume_fault truncated "state.safetensors: tensor 'text.params': data_offsets"
resume_fault emptied "state.safetensors: file is 0 bytes"
resume_fault missing "state.safetensors: cannot open"
resume_fault edited "state.json: fails its checksum"
rm -rf "$tmp"/dmg_*
# NaN in an HF checkpoint's weights: refused at load, naming the file and the tensor
rm -rf "$tmp/nan_hf" && cp -r "$hf" "$tmp/nan_hf"
python3 - "$tmp/nan_hf/model.safetensors" <<'EOF'
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    t = json.loads(f.read(n))["model.visual.blocks.0.mlp.linear_fc1.weight"]
    assert t["dtype"] == "BF16", t["dtype"]
    f.seek(8 + n + t["data_offsets"][0] + 2 * 3)
    f.write(struct.pack("<H", 0x7fc0))  # bf16 NaN at element 3
EOF
nan_msg="nan_hf/model.safetensors: tensor 'model.visual.blocks.0.mlp.linear_fc1.weight' holds 1 non-finite value"
if "$LJPERF" generate --load "$tmp/nan_hf" --image "$images/chelsea.png" --max-new-tokens 1 --device cpu \
  >/dev/null 2>"$tmp/nan_gen.err"; then fail "generate took NaN weights"; fi
grep -qF "$nan_msg" "$tmp/nan_gen.err" || { cat "$tmp/nan_gen.err"; fail "generate: NaN weights not named"; }
if "$LJPERF" train --device cpu --seq-length 48 --num-workers 1 --data-path "$tmp/one" --train-iters 1 --quiet \
  --load "$tmp/nan_hf" >/dev/null 2>"$tmp/nan_train.err"; then fail "train took NaN weights"; fi
grep -qF "$nan_msg" "$tmp/nan_train.err" || { cat "$tmp/nan_train.err"; fail "train: NaN weights not named"; }
rm -rf "$tmp/nan_hf"
# --save a regular file: refused at start-up, before any step
touch "$tmp/save_file"
if "$LJPERF" train "${loud[@]}" --data-path "$tmp/one" --train-iters 2 --save "$tmp/save_file" \
  >"$tmp/save.out" 2>"$tmp/save.err"; then fail "--save of a regular file was accepted"; fi
grep -qF -- "--save $tmp/save_file: cannot create the checkpoint directory" "$tmp/save.err" \
  || { cat "$tmp/save.err"; fail "the --save refusal does not name the flag"; }
! grep -q "iteration" "$tmp/save.out" || fail "--save of a regular file was refused only after training"
# a run that fails before its first step (an image that does not decode) leaves no log of its own
for e in mmidx mmtok mmmask mmimg; do cp "$tmp/one.$e" "$tmp/badimg.$e"; done
python3 - "$tmp/badimg.mmimg" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 4:len(b) // 2] = bytes(len(b) // 2 - len(b) // 4)
open(sys.argv[1], "wb").write(bytes(b))
EOF
if "$LJPERF" train "${common[@]}" --data-path "$tmp/badimg" --train-iters 1 --log-json "$tmp/badimg.log" \
  >/dev/null 2>"$tmp/badimg.err"; then fail "a dataset with an undecodable image trained"; fi
grep -q "badimg.mmimg: sample 0, image 0" "$tmp/badimg.err" || { cat "$tmp/badimg.err"; fail "the bad image is not named"; }
[ ! -e "$tmp/badimg.log" ] || { cat "$tmp/badimg.log"; fail "the failed run left a --log-json with its start record"; }
echo '{"earlier": 1}' >"$tmp/kept.log"
if "$LJPERF" train "${common[@]}" --data-path "$tmp/badimg" --train-iters 5 --load "$tmp/ckpt" --log-json "$tmp/kept.log" \
  >/dev/null 2>&1; then fail "a resume on an undecodable image trained"; fi
[ "$(cat "$tmp/kept.log")" = '{"earlier": 1}' ] || { cat "$tmp/kept.log"; fail "the failed resume left its start record"; }
echo "faults: damaged checkpoints named, NaN weights refused, --save checked first, no log of a failed start"

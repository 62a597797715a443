#!/usr/bin/env bash
# gpu-profile.sh: Megatron-LM's profiling flags and launch scripts on a GPU machine (repo root,
# $OUT set; carry .deb and build-gpu/dev). Steps (default: all):
#   window   one GPU, llama3.2-1b on mock data, 6 iterations with --profile --profile-step-start 2
#            --profile-step-end 4 --record-memory-history: under nsys (--capture-range=cudaProfilerApi)
#            when nsys is found, the NVTX summary (nsys stats nvtx_sum) must hold train_step twice
#            (iterations 3 and 4), forward / backward / optimizer.step, every layer's forward,
#            backward, self_attention and mlp; without nsys the run must still open and close the
#            window. The memory snapshot's peak must be the plan's total plus the 32 MiB cuBLASLt
#            workspace. The same run without --profile gives the same losses, bit for bit under
#            --deterministic-mode (the window's steps run eagerly, the others as one graph).
#   fp8      tests/megatron/train_llama3_8b_fp8.sh as written on one GPU at 2 layers, seq 2048 and a
#            vocabulary of 1024 (the 8B layer shape, FP8 hybrid, --decoupled-lr, its profile window
#            at 4 to 6; its checkpoint at the end is some 6 GB).
#   fsdp     tests/megatron/train_llama3_8b_fsdp_fp8.sh with NSYS_PROFILE=1 (its nsys line; nsys
#            must be found) on every GPU (at least 2) at 2 layers, vocabulary 1024: ZeRO-3 over the GPUs, the
#            nccl:all_gather / nccl:reduce_scatter ranges in rank 0's profile, rank 0's snapshot.
# Usage: bash scripts/gpu/gpu-profile.sh [step...]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-out/gpu-profile}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
lj=$PWD/build-gpu/dev/ljperf
steps=${*:-window fp8 fsdp}
gpus=$(nvidia-smi -L | wc -l)
if ! command -v nsys >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /opt/nvidia/nsight-systems/*/bin /usr/local/cuda/nsight-systems*/bin; do
    [ -x "$d/nsys" ] && { export PATH="$d:$PATH"; break; }
  done
fi
have_nsys=0
command -v nsys >/dev/null 2>&1 && have_nsys=1 && nsys --version
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
# snapshot FILE: the peak against the plan (+ the backend's 32 MiB workspace)
snapshot() {
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p, a = d["plan"]["total_bytes"], d["allocator"]
extra = a["peak_bytes"] - a["baseline_bytes"] - p
print("snapshot %s: iteration %d, plan %d, peak %d (baseline %d), beyond the plan %d bytes (%s); %d events; %s"
      % (sys.argv[1], d["iteration"], p, a["peak_bytes"], a["baseline_bytes"], extra,
         "ok: the cuBLASLt workspace" if extra == 32 << 20 else "UNEXPECTED", len(a["events"]),
         d["samples"][-1]))
PY
}
for s in $steps; do
  case $s in
  window)
    run=(train --model llama3.2-1b --mock-data --device cuda --seq-length 1024 --micro-batch-size 2 --train-iters 6
         --eval-iters 0 --seed 3 --deterministic-mode)
    "$lj" "${run[@]}" --log-json "$OUT/plain.jsonl" >"$OUT/plain.log" 2>&1
    say "window: the run without --profile rc=$?"
    prof=(--profile --profile-step-start 2 --profile-step-end 4 --record-memory-history
          --memory-snapshot-path "$OUT/mem.json" --log-json "$OUT/prof.jsonl")
    if [ "$have_nsys" = 1 ]; then
      nsys profile --trace=cuda,nvtx,cublas,cudnn --capture-range=cudaProfilerApi --capture-range-end=stop \
        -f true -o "$OUT/window" "$lj" "${run[@]}" "${prof[@]}" >"$OUT/window.log" 2>&1
      say "window: nsys profile ljperf train --profile rc=$?"
      nsys stats --report nvtx_sum --format csv --output "$OUT/window" "$OUT/window.nsys-rep" >/dev/null 2>&1
      python3 - "$OUT"/window_nvtx_sum.csv <<'PY' | tee -a "$summary"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
key = next(k for k in rows[0] if k.lower() in ("range", "name"))
count = {r[key].lstrip(":"): int(r.get("Instances") or r.get("Num Calls") or 0) for r in rows}
want = {"train_step": 2, "forward": 2, "backward": 2, "optimizer.step": 2, "embedding": 2, "output_layer": 2}
for l in range(16):
    for part in ("forward", "backward", "self_attention", "mlp"):
        want[f"decoder.layers.{l}.{part}"] = 2
bad = {k: (count.get(k, 0), n) for k, n in want.items() if count.get(k, 0) != n}
print("window: %d NVTX ranges; %s" % (len(count), "every expected range, twice" if not bad else "WRONG: %s" % bad))
PY
    else
      "$lj" "${run[@]}" "${prof[@]}" >"$OUT/window.log" 2>&1
      say "window: no nsys here; ljperf train --profile rc=$?"
    fi
    say "window: $(grep -c 'profile window opens before iteration 3' "$OUT/window.log") open, $(grep -c 'profile window closes after iteration 4' "$OUT/window.log") close (want 1 1)"
    if cmp -s <(grep -o '"loss": [^,]*' "$OUT/plain.jsonl") <(grep -o '"loss": [^,]*' "$OUT/prof.jsonl"); then
      say "window: losses with and without --profile equal"
    else
      say "window: LOSSES DIFFER with --profile"
    fi
    say "$(snapshot "$OUT/mem_0.json")"
    ;;
  fp8)
    mkdir -p "$OUT/fp8" && (cd "$OUT/fp8" && GPUS_PER_NODE=1 NUM_LAYERS=2 SEQ_LENGTH=2048 VOCAB_SIZE=1024 GLOBAL_BATCH_SIZE=8 \
      TRAIN_SAMPLES=64 LR_DECAY_SAMPLES=64 LR_WARMUP_SAMPLES=8 EVAL_ITERS=2 SAVE_INTERVAL=1000 LJPERF="$lj" \
      bash "$OLDPWD/tests/megatron/train_llama3_8b_fp8.sh" ckpt tb MOCK MOCK >"$OUT/fp8.log" 2>&1)
    say "fp8: the 8B FP8 script on one GPU rc=$? $(grep '^iteration' "$OUT/fp8.log" | tail -1 | cut -c1-160)"
    say "fp8: $(grep -c 'profile window opens before iteration 5\|profile window closes after iteration 6' "$OUT/fp8.log") window lines (want 2)"
    ;;
  fsdp)
    [ "$gpus" -ge 2 ] || { say "fsdp: one GPU here, skipped"; continue; }
    [ "$have_nsys" = 1 ] || { say "fsdp: no nsys here, skipped"; continue; }
    mkdir -p "$OUT/fsdp" && (cd "$OUT/fsdp" && GPUS_PER_NODE=$gpus NUM_LAYERS=2 SEQ_LENGTH=2048 VOCAB_SIZE=1024 \
      GLOBAL_BATCH_SIZE=$((2 * gpus)) TRAIN_SAMPLES=$((28 * gpus)) LR_DECAY_SAMPLES=$((28 * gpus)) \
      LR_WARMUP_SAMPLES=$((2 * gpus)) EVAL_ITERS=1 SAVE_INTERVAL=1000 NSYS_PROFILE=1 LJPERF="$lj" \
      bash "$OLDPWD/tests/megatron/train_llama3_8b_fsdp_fp8.sh" ckpt MOCK MOCK nsys/fsdp tb >"$OUT/fsdp.log" 2>&1)
    say "fsdp: the Megatron-FSDP script on $gpus GPUs under nsys rc=$? $(grep '^iteration' "$OUT/fsdp.log" | tail -1 | cut -c1-160)"
    rep=$(ls "$OUT"/fsdp/nsys/fsdp*.nsys-rep 2>/dev/null | head -1)
    if [ -n "$rep" ]; then
      nsys stats --report nvtx_sum --format csv --output "$OUT/fsdp" "$rep" >/dev/null 2>&1
      say "fsdp: $(grep -c 'nccl:all_gather\|nccl:reduce_scatter' "$OUT"/fsdp_nvtx_sum.csv) NCCL range names in the profile (want 2)"
    else
      say "fsdp: NO nsys report"
    fi
    say "$(snapshot "$OUT/fsdp/snapshot_0.json")"
    ;;
  esac
done
cat "$summary"

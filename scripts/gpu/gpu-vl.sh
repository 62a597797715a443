#!/usr/bin/env bash
# gpu-vl.sh: Qwen3-VL training on the GPU end to end.
#
#   bash scripts/gpu/gpu-vl.sh --prepare   (here, on the build machine, after gpu-check.sh --prepare)
#       writes the four-sample multimodal dataset of tests/data/vl_example.jsonl (scikit-image's
#       photographs from the set-up script's cache, small images: 16 tokens each) into
#       build-gpu/dev/vl/, with the ljperf of build-gpu/dev/.
#   bash scripts/gpu/gpu-vl.sh [steps...]  (on the GPU machine, repo root, $OUT set; carry .deb and
#                                          build-gpu/dev; default steps: 1 2 3 4)
#   1. gpu_vl_fixture (the model on CUDA against the HF fixture), and qwen3-vl-tiny trained for
#      $STEPS steps from the same init (--seed 5) on the same data on the GPU (bf16 activations and
#      parameters, f32 master weights; bf16 and fp32 gradients) and on the CPU (fp32): every
#      step's loss within $LOSS_TOL relative of the CPU's (default 2e-2: bf16 against fp32, the
#      bound gpu_vl_fixture holds the loss to); a run saved at iteration 2 and
#      resumed to 4 on the GPU against the uninterrupted one (within 2e-3 relative: the
#      decoder's attention backward adds dQ with atomics); generate --image on CUDA from that
#      checkpoint, twice (the same answer), and its tokens against the CPU's (reported);
#   2. compute-sanitizer memcheck on two training steps of qwen3-vl-tiny on CUDA;
#   3. ljperf benchmark of $BENCH_MODELS (qwen3-vl-2b qwen3-vl-4b) at $BENCH_SIZES (448 1024)
#      pixel square images and 512 text tokens, micro-batch $BENCH_MB;
#   4. the PyTorch side-by-side (scripts/gpu/vl_pytorch_ref.py: transformers'
#      Qwen3VLForConditionalGeneration from the same config, random weights, bf16 autocast, the
#      same batches) in $MODES (eager compile) for the same models and sizes; a table of samples/s
#      and peak memory of each against ljperf's;
#   5. FP8 (not in the default steps: `gpu-vl.sh 5 6`): qwen3-vl-tiny trained with --fp8-format
#      hybrid (delayed scaling; both towers' block linears in FP8) for $STEPS steps on CUDA against
#      the same on the CPU (its exact emulation of the recipe, fp32 elsewhere): every step's loss
#      within $LOSS_TOL relative; a CUDA FP8 run saved at 2 and resumed to 4 against the
#      uninterrupted one (within 2e-3: the attention backward's atomics);
#   6. ljperf benchmark of $FP8_BENCH_MODELS (qwen3-vl-2b qwen3-vl-8b) at 448x448 + 512 text
#      tokens, bf16 and --fp8-format hybrid in the same job: samples/s, MFU and memory of each.
# Full logs in $OUT, a short summary last. Steps are skipped once $BUDGET seconds (default 540) passed.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
dev=build-gpu/dev
lj=$dev/ljperf
data=$dev/vl/four

if [ "${1:-}" = "--prepare" ]; then
  set -e
  cache=${LJPERF_CACHE:-$repo/.cache}
  [ -x "$lj" ] || { echo "gpu-vl: no $lj: run scripts/gpu/gpu-check.sh --prepare first" >&2; exit 1; }
  mkdir -p "$dev/vl"
  "$lj" prepare --input tests/data/vl_example.jsonl --image-root "$cache/images/skimage" \
    --tokenizer "$cache/tokenizer/qwen3/tokenizer.json" --min-pixels 4096 --max-pixels 16384 \
    --output-prefix "$data" --quiet
  cp "$cache/images/skimage/chelsea.png" "$dev/vl/"
  echo "prepared: $(ls "$dev/vl" | tr '\n' ' ')($(du -sh "$dev/vl" | cut -f1))"
  exit 0
fi

OUT=${OUT:-$repo/out/gpu-vl}
mkdir -p "$OUT"
source scripts/gpu/gpu-env.sh
steps=${*:-1 2 3 4}
STEPS=${STEPS:-8}
LOSS_TOL=${LOSS_TOL:-2e-2}
BENCH_MODELS=${BENCH_MODELS:-qwen3-vl-2b qwen3-vl-4b}
BENCH_SIZES=${BENCH_SIZES:-448 1024}
BENCH_MB=${BENCH_MB:-1}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-3}
MODES=${MODES:-eager compile}
BUDGET=${BUDGET:-540}
FP8_BENCH_MODELS=${FP8_BENCH_MODELS:-qwen3-vl-2b qwen3-vl-8b}
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
say "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ -s "$data.mmidx" ] || say "no dataset at $data (run bash scripts/gpu/gpu-vl.sh --prepare on the build machine)"

# losses FILE: "iteration loss" lines of a --log-json file
losses() { grep '"loss"' "$1" | sed -E 's/.*"iteration": ([0-9]+), "loss": ([^,]+),.*/\1 \2/'; }
# compare A B TOL [decreasing]: every iteration's loss of A within TOL relative of B's; prints the worst
compare() {
  python3 - "$1" "$2" "$3" "${4:-}" <<'EOF'
import json, sys
def read(p):
    try:
        return {j["iteration"]: j["loss"] for j in map(json.loads, open(p)) if "loss" in j}
    except (OSError, ValueError) as e:
        print(f"no losses in {p}: {e}"); sys.exit(1)
a, b, tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
its = sorted(set(a) & set(b))
if not its or len(its) != len(a) or len(its) != len(b):
    print(f"iterations differ: {sorted(a)} against {sorted(b)}"); sys.exit(1)
worst = max(abs(a[i] - b[i]) / abs(b[i]) for i in its)
ok = worst <= tol
if sys.argv[4] == "decreasing":
    dec = all(a[its[k]] < a[its[k - 1]] for k in range(1, len(its)))
    ok = ok and dec
    print(f"{len(its)} steps, worst relative difference {worst:.3e} (limit {tol:g}), {'decreasing' if dec else 'NOT decreasing'}")
else:
    print(f"{len(its)} steps, worst relative difference {worst:.3e} (limit {tol:g})")
print("  " + "  ".join(f"{i}: {a[i]:.5f}/{b[i]:.5f}" for i in its))
sys.exit(0 if ok else 1)
EOF
}

for s in $steps; do
  if [ "$SECONDS" -gt "$BUDGET" ]; then say "step $s skipped (budget of $BUDGET s spent)"; continue; fi
  case $s in
  1)
    LJ_VERBOSE=1 timeout 120 "$dev/gpu_vl_fixture" tests/fixtures/qwen3vl-tiny >"$OUT/vl_fixture.log" 2>&1
    say "1a. gpu_vl_fixture rc=$? $(tail -1 "$OUT/vl_fixture.log")"
    # the four samples in the loader's order of --seed 5: the same batches on both
    common=(--model qwen3-vl-tiny --data-path "$data" --seq-length 48 --micro-batch-size 2 --lr 1e-3 --seed 5
            --num-workers 2 --train-iters "$STEPS" --quiet)
    timeout 120 "$lj" train "${common[@]}" --device cpu --log-json "$OUT/tiny_cpu.jsonl" >"$OUT/tiny_cpu.log" 2>&1
    say "1b. train qwen3-vl-tiny on the CPU: rc=$? $(losses "$OUT/tiny_cpu.jsonl" | tail -1)"
    for gd in bf16 fp32; do
      timeout 120 "$lj" train "${common[@]}" --device cuda --grad-dtype "$gd" --log-json "$OUT/tiny_cuda_$gd.jsonl" \
        >"$OUT/tiny_cuda_$gd.log" 2>&1
      say "1c. train qwen3-vl-tiny on CUDA, $gd gradients: rc=$? $(losses "$OUT/tiny_cuda_$gd.jsonl" | tail -1)"
      compare "$OUT/tiny_cuda_$gd.jsonl" "$OUT/tiny_cpu.jsonl" "$LOSS_TOL" >"$OUT/tiny_compare_$gd.txt" 2>&1
      say "1d. CUDA ($gd gradients) against the CPU: rc=$? $(head -1 "$OUT/tiny_compare_$gd.txt")"
      sed -n 2p "$OUT/tiny_compare_$gd.txt" | tee -a "$summary"
    done
    # save at 2, resume to 4, against the uninterrupted 4
    r4=(--model qwen3-vl-tiny --data-path "$data" --seq-length 48 --micro-batch-size 2 --lr 1e-3 --seed 5
        --num-workers 2 --device cuda --quiet)
    rm -rf /tmp/vl_ckpt
    timeout 120 "$lj" train "${r4[@]}" --train-iters 4 --log-json "$OUT/resume_full.jsonl" >"$OUT/resume_full.log" 2>&1
    timeout 120 "$lj" train "${r4[@]}" --train-iters 2 --save /tmp/vl_ckpt --log-json "$OUT/resume_part.jsonl" \
      >"$OUT/resume_a.log" 2>&1
    timeout 120 "$lj" train --data-path "$data" --seq-length 48 --micro-batch-size 2 --lr 1e-3 --seed 5 --num-workers 2 \
      --device cuda --train-iters 4 --load /tmp/vl_ckpt --save /tmp/vl_ckpt --log-json "$OUT/resume_part.jsonl" \
      >"$OUT/resume_b.log" 2>&1
    compare "$OUT/resume_part.jsonl" "$OUT/resume_full.jsonl" 2e-3 >"$OUT/resume_compare.txt" 2>&1
    say "1e. CUDA resume at 2 against the uninterrupted run: rc=$? $(head -1 "$OUT/resume_compare.txt")"
    gen=(generate --load /tmp/vl_ckpt --image "$dev/vl/chelsea.png" --prompt "What animal is in this picture?"
         --max-new-tokens 8)
    timeout 60 "$lj" "${gen[@]}" --device cuda --output-json "$OUT/gen_cuda1.json" >"$OUT/gen_cuda1.txt" 2>&1
    rc=$?
    timeout 60 "$lj" "${gen[@]}" --device cuda --output-json "$OUT/gen_cuda2.json" >"$OUT/gen_cuda2.txt" 2>&1
    timeout 60 "$lj" "${gen[@]}" --device cpu --output-json "$OUT/gen_cpu.json" >"$OUT/gen_cpu.txt" 2>&1
    ids() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['ids'])" "$1" 2>/dev/null; }
    same=$([ -n "$(ids "$OUT/gen_cuda1.json")" ] && [ "$(ids "$OUT/gen_cuda1.json")" = "$(ids "$OUT/gen_cuda2.json")" ] \
           && echo deterministic || echo "NOT deterministic")
    cpu=$([ -n "$(ids "$OUT/gen_cuda1.json")" ] && [ "$(ids "$OUT/gen_cuda1.json")" = "$(ids "$OUT/gen_cpu.json")" ] \
          && echo "equal to the CPU's" || echo "against the CPU's $(ids "$OUT/gen_cpu.json")")
    say "1f. generate --image on CUDA: rc=$rc, $same, ids $(ids "$OUT/gen_cuda1.json") $cpu"
    ;;
  2)
    timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$lj" train --model qwen3-vl-tiny --device cuda \
      --data-path "$data" --seq-length 48 --micro-batch-size 2 --train-iters 2 --num-workers 1 --quiet \
      >"$OUT/memcheck.log" 2>&1
    say "2. memcheck on qwen3-vl-tiny training: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | head -1)"
    ;;
  3)
    for m in $BENCH_MODELS; do
      for px in $BENCH_SIZES; do
        tag=${m}_${px}
        timeout 300 "$lj" benchmark --model "$m" --device cuda --image-size "$px" --text-tokens 512 \
          --micro-batch-size "$BENCH_MB" --train-iters "$ITERS" --warmup-iters "$WARMUP" --no-progress \
          --json "$OUT/bench_$tag.json" >"$OUT/bench_$tag.log" 2>&1
        say "3. ljperf benchmark $m ${px}x${px} + 512 text: rc=$? $(python3 -c "import json;r=json.load(open('$OUT/bench_$tag.json'));print('%.3f samples/s, %.0f tokens/s, MFU %.1f%%, %.1f GiB measured, %.1f GiB planned' % (r['samples_per_s'], r['tokens_per_s'], 100*r['mfu'], r['peak_mem_gib'], r['planned_mem_gib']))" 2>/dev/null)"
      done
    done
    ;;
  4)
    for m in $BENCH_MODELS; do
      for px in $BENCH_SIZES; do
        for mode in $MODES; do
          tag=${m}_${px}_$mode
          timeout 400 python3 scripts/gpu/vl_pytorch_ref.py --model "$m" --image-size "$px" --text-tokens 512 \
            --micro-batch-size "$BENCH_MB" --train-iters "$ITERS" --warmup-iters "$WARMUP" --mode "$mode" \
            --json "$OUT/torch_$tag.json" >"$OUT/torch_$tag.log" 2>&1
          say "4. pytorch $mode $m ${px}x${px}: rc=$? $(python3 -c "import json;r=json.load(open('$OUT/torch_$tag.json'));print('%.3f samples/s, MFU %.1f%%, %.1f GiB allocated, %.1f GiB device' % (r['samples_per_s'], 100*r['mfu'], r['peak_mem_gib'], r['device_mem_used_gib']))" 2>/dev/null)"
        done
      done
    done
    python3 - "$OUT" "$BENCH_MODELS" "$BENCH_SIZES" "$MODES" <<'EOF' | tee -a "$summary"
import json, os, sys
out, models, sizes, modes = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
def load(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))
    except (OSError, ValueError):
        return None
print(f"{'model':14s} {'image':>9s} {'run':16s} {'samples/s':>10s} {'MFU':>7s} {'device GiB':>11s} {'vs ljperf':>10s}")
for m in models:
    for px in sizes:
        lj = load(f"bench_{m}_{px}")
        rows = [("ljperf", lj)] + [(f"pytorch {mode}", load(f"torch_{m}_{px}_{mode}")) for mode in modes]
        for name, r in rows:
            if r is None:
                print(f"{m:14s} {px + 'x' + px:>9s} {name:16s} {'failed':>10s}")
                continue
            gib = r.get("device_mem_used_gib", r.get("peak_mem_gib", float("nan")))
            ratio = "" if name == "ljperf" or lj is None else f"{lj['samples_per_s'] / r['samples_per_s']:.2f}x"
            print(f"{m:14s} {px + 'x' + px:>9s} {name:16s} {r['samples_per_s']:10.3f} {100 * r['mfu']:6.1f}% "
                  f"{gib:11.1f} {ratio:>10s}")
print("device GiB: ljperf's measured peak (total - free), PyTorch's total - free at the end; vs ljperf: ljperf's samples/s over the run's")
EOF
    ;;
  5)
    common=(--model qwen3-vl-tiny --data-path "$data" --seq-length 48 --micro-batch-size 2 --lr 1e-3 --seed 5
            --num-workers 2 --train-iters "$STEPS" --quiet --fp8-format hybrid)
    timeout 120 "$lj" train "${common[@]}" --device cpu --log-json "$OUT/fp8_cpu.jsonl" >"$OUT/fp8_cpu.log" 2>&1
    say "5a. train qwen3-vl-tiny --fp8-format hybrid on the CPU: rc=$? $(losses "$OUT/fp8_cpu.jsonl" | tail -1)"
    timeout 120 "$lj" train "${common[@]}" --device cuda --log-json "$OUT/fp8_cuda.jsonl" >"$OUT/fp8_cuda.log" 2>&1
    say "5b. train qwen3-vl-tiny --fp8-format hybrid on CUDA: rc=$? $(losses "$OUT/fp8_cuda.jsonl" | tail -1)"
    compare "$OUT/fp8_cuda.jsonl" "$OUT/fp8_cpu.jsonl" "$LOSS_TOL" >"$OUT/fp8_compare.txt" 2>&1
    say "5c. CUDA FP8 against the CPU's emulation: rc=$? $(head -1 "$OUT/fp8_compare.txt")"
    sed -n 2p "$OUT/fp8_compare.txt" | tee -a "$summary"
    r4=(--model qwen3-vl-tiny --data-path "$data" --seq-length 48 --micro-batch-size 2 --lr 1e-3 --seed 5
        --num-workers 2 --device cuda --quiet --fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max)
    rm -rf /tmp/vl_fp8_ckpt
    timeout 120 "$lj" train "${r4[@]}" --train-iters 4 --log-json "$OUT/fp8_resume_full.jsonl" >"$OUT/fp8_resume_full.log" 2>&1
    timeout 120 "$lj" train "${r4[@]}" --train-iters 2 --save /tmp/vl_fp8_ckpt --log-json "$OUT/fp8_resume_part.jsonl" \
      >"$OUT/fp8_resume_a.log" 2>&1
    timeout 120 "$lj" train "${r4[@]:2}" --train-iters 4 --load /tmp/vl_fp8_ckpt --log-json "$OUT/fp8_resume_part.jsonl" \
      >"$OUT/fp8_resume_b.log" 2>&1
    compare "$OUT/fp8_resume_part.jsonl" "$OUT/fp8_resume_full.jsonl" 2e-3 >"$OUT/fp8_resume_compare.txt" 2>&1
    say "5d. CUDA FP8 resume at 2 against the uninterrupted run: rc=$? $(head -1 "$OUT/fp8_resume_compare.txt")"
    ;;
  6)
    for m in $FP8_BENCH_MODELS; do
      for prec in bf16 fp8; do
        tag=${m}_448_$prec
        extra=()
        [ "$prec" = fp8 ] && extra=(--fp8-format hybrid)
        timeout 300 "$lj" benchmark --model "$m" --device cuda --img-h 448 --img-w 448 --text-tokens 512 \
          --micro-batch-size "$BENCH_MB" --train-iters "$ITERS" --warmup-iters "$WARMUP" --no-progress "${extra[@]}" \
          --json "$OUT/bench_$tag.json" >"$OUT/bench_$tag.log" 2>&1
        say "6. ljperf benchmark $m 448x448 + 512 text, $prec: rc=$? $(python3 -c "import json;r=json.load(open('$OUT/bench_$tag.json'));print('%.3f samples/s, %.0f tokens/s, MFU %.1f%%, %.1f GiB measured, %.1f GiB planned (FP8 buffers %.2f GiB)' % (r['samples_per_s'], r['tokens_per_s'], 100*r['mfu'], r['peak_mem_gib'], r['planned_mem_gib'], r['fp8_planned_bytes']/2**30))" 2>/dev/null)"
      done
    done
    ;;
  esac
done
echo "== summary"
cat "$summary"

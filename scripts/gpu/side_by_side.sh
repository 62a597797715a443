#!/usr/bin/env bash
# side_by_side.sh: runs `ljperf benchmark` and the PyTorch reference (eager and torch.compile) on
# the same GPU in one job, and prints tokens/s, MFU and peak memory of each and the ratios.
#
#   bash scripts/gpu/side_by_side.sh MODEL [SEQ] [MB]        e.g. bash scripts/gpu/side_by_side.sh llama3.2-1b 4096 4
#
# Writes ljperf.json/.log, pytorch_eager.json/.log, pytorch_compile.json/.log and
# summary.json/.txt to $OUT when it is set, else to bench/results/side_by_side-MODEL-SEQ-MB-DATE/.
# Environment: ITERS (counted steps, default 20), WARMUP (PyTorch warm-up steps, default 5),
# LJPERF (binary, default build/ljperf), LJPERF_ARGS (extra ljperf flags), PYTORCH_ARGS (extra
# pytorch_ref.py flags, e.g. "--checkpointing full"), MODES (default "eager compile"),
# PYTHON (default python3). A run that fails is reported as failed; the others still run, and
# the script exits 1 at the end.
# The ratios count only when all runs come from the same job; this script is that job.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
model=${1:?usage: side_by_side.sh MODEL [SEQ] [MB]}
seq=${2:-4096}
mb=${3:-1}
iters=${ITERS:-20}
warmup=${WARMUP:-5}
ljperf=${LJPERF:-$repo/build/ljperf}
python=${PYTHON:-python3}
modes=${MODES:-eager compile}
safe_model=$(printf '%s' "$model" | tr '/ ' '__')
out=${OUT:-$repo/bench/results/side_by_side-$safe_model-$seq-$mb-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out" || { echo "side_by_side: cannot create $out" >&2; exit 1; }
failed=0

say() { printf 'side_by_side: %s\n' "$*"; }
say "model $model, seq $seq, micro-batch $mb, $iters counted steps; results in $out"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/side_by_side: gpu: /'
(cd "$repo" && git rev-parse --short HEAD 2>/dev/null | sed 's/^/side_by_side: commit: /')

# ---- ljperf ----
if [ -x "$ljperf" ]; then
  say "running ljperf"
  # shellcheck disable=SC2086
  "$ljperf" benchmark --model "$model" --seq-length "$seq" --micro-batch-size "$mb" \
      --train-iters "$iters" --json "$out/ljperf.json" ${LJPERF_ARGS:-} 2>&1 | tee "$out/ljperf.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { say "ljperf failed (exit $rc); see $out/ljperf.log"; failed=1; }
else
  say "no ljperf binary at $ljperf (build it with scripts/build.sh); skipping"
  failed=1
fi

# ---- PyTorch ----
for mode in $modes; do
  say "running PyTorch $mode"
  # shellcheck disable=SC2086
  "$python" "$repo/scripts/gpu/pytorch_ref.py" --model "$model" --seq-length "$seq" --micro-batch-size "$mb" \
      --train-iters "$iters" --warmup-iters "$warmup" --mode "$mode" --json "$out/pytorch_$mode.json" \
      ${PYTORCH_ARGS:-} 2>&1 | tee "$out/pytorch_$mode.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { say "PyTorch $mode failed (exit $rc); see $out/pytorch_$mode.log"; failed=1; }
done

# ---- summary ----
"$python" - "$out" "$model" "$seq" "$mb" "$modes" <<'EOF'
import json, os, sys

out, model, seq, mb, modes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5].split()


def load(name):
    path = os.path.join(out, name + ".json")
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError):
        return None
    return None if "error" in j or "tokens_per_s" not in j else j


def mfu_pct(j):
    m = float(j.get("mfu", 0.0))
    return 100.0 * m if m <= 1.5 else m  # accept a fraction or a percentage


runs = [("ljperf", load("ljperf"))] + [("pytorch " + m, load("pytorch_" + m)) for m in modes]
nan = float("nan")


def device_gib(j):
    """Whole-device memory in use: ljperf's peak_mem_gib is measured that way (total - free);
    PyTorch's like-for-like figure is device_mem_used_gib (its peak_mem_gib is
    max_memory_allocated, which leaves out the allocator's cache and the CUDA context)."""
    return float(j.get("device_mem_used_gib", j.get("peak_mem_gib", nan)))


lines = [f"side-by-side: {model}  seq {seq}  micro-batch {mb}  (one job, same GPU)",
         f"  {'run':18s} {'tokens/s':>12s} {'MFU':>8s} {'device GiB':>11s} {'alloc GiB':>10s} {'step ms':>9s}"]
for name, j in runs:
    if j is None:
        lines.append(f"  {name:18s} {'failed or missing':>12s}")
        continue
    alloc = float(j["peak_mem_gib"]) if j.get("engine") == "pytorch" else nan
    lines.append(f"  {name:18s} {j['tokens_per_s']:12,.0f} {mfu_pct(j):7.1f}% {device_gib(j):11.1f} {alloc:10.1f}"
                 f" {float(j.get('step_ms_median', nan)):9.1f}")
lines.append("  device GiB: whole device in use (ljperf: measured peak; PyTorch: total - free at the end);"
             " alloc GiB: torch.cuda.max_memory_allocated")
summary = {"model": model, "seq_length": int(seq), "micro_batch_size": int(mb),
           "runs": {name: j for name, j in runs}, "ratios": {}}
lj = dict(runs)["ljperf"]
for name, j in runs[1:]:
    mode = name.split()[1]
    if lj is None or j is None:
        lines.append(f"  ratio ljperf/{mode:8s} n/a (a run failed)")
        continue
    tps = lj["tokens_per_s"] / j["tokens_per_s"]
    mem = device_gib(lj) / device_gib(j)
    mem_alloc = device_gib(lj) / float(j.get("peak_mem_gib", nan))
    summary["ratios"][mode] = {"tokens_per_s": tps, "device_mem": mem, "mem_vs_pytorch_allocated": mem_alloc}
    lines.append(f"  ratio ljperf/{mode:8s} {tps:.3f}x tokens/s; memory {mem:.3f}x of PyTorch's device use"
                 f" ({mem_alloc:.3f}x of its max allocated)")
text = "\n".join(lines)
print(text)
with open(os.path.join(out, "summary.txt"), "w") as f:
    f.write(text + "\n")
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
    f.write("\n")
EOF
exit $failed

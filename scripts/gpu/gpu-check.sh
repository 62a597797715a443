#!/usr/bin/env bash
# gpu-check.sh: the CUDA backend's correctness and kernel-lab run on a GPU machine.
#
#   bash scripts/gpu/gpu-check.sh --prepare   (here, on the build machine with nvcc and network)
#       builds build-gpu/ (the root CMake, Release, with a portable host ISA for the build
#       machine's architecture: x86-64-v3 on amd64, the Armv8-A base on aarch64 such as GH200's
#       Grace; not -march=native), copies the GPU programs into build-gpu/dev/, and fetches the
#       Debian run-time libraries into .deb/ (scripts/fetch-gpu-deps.sh).
#   bash scripts/gpu/gpu-check.sh             (on the GPU machine, repo root, $OUT set; carry
#                                        .deb and build-gpu/dev)
#       unpacks .deb/*.deb into /tmp/ljdeps (dpkg -x, nothing installed), finds the CUDA
#       libraries, runs nvidia-smi, the op harness on the GPU (tests/ops: `test_ops_cuda check`,
#       every op against the CPU backend with both gradient dtypes; `test_ops_cuda perf`, the
#       hot ops at the benchmark shapes against the card's ceilings), tests/gpu/gpu_hf_fixtures
#       (the whole model against the HF fixtures), tests/gpu/gpu_vision_ops (the vision-tower
#       ops against the CPU backend; gpu_vl_fixture, Qwen3-VL against the qwen3vl-tiny fixture),
#       every kernel-lab program (bench/kernels,
#       every numbered version of each kernel), and compute-sanitizer memcheck and racecheck on
#       `test_ops_cuda check --quick`; full logs go to $OUT, a short table is printed last.
# The GPU machine only runs programs; it builds nothing.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
dev=build-gpu/dev

if [ "${1:-}" = "--prepare" ]; then
  set -e
  export PATH=/usr/local/cuda/bin:$PATH
  mkdir -p build-gpu
  case "$(uname -m)" in
    x86_64) isa="-march=x86-64-v3" ;;
    *) isa="" ;; # aarch64: the CMake default (Armv8-A with Advanced SIMD)
  esac
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DLJ_ARCH_FLAGS="$isa" \
    >build-gpu/prepare.log 2>&1 || { tail -30 build-gpu/prepare.log; exit 1; }
  kl=$(cd bench/kernels && ls kl_*.cu | sed 's/\.cu$//')
  cmake --build build-gpu -j"$(nproc)" --target test_ops_cuda gpu_hf_fixtures gpu_vision_ops gpu_vl_fixture $kl >>build-gpu/prepare.log 2>&1 ||
    { grep -E 'error' -A3 build-gpu/prepare.log | head -40; exit 1; }
  rm -rf "$dev" && mkdir -p "$dev"
  cp build-gpu/tests/ops/test_ops_cuda build-gpu/tests/gpu/gpu_hf_fixtures build-gpu/tests/gpu/gpu_vision_ops build-gpu/tests/gpu/gpu_vl_fixture "$dev"/
  for k in $kl; do cp "build-gpu/bench/kernels/$k" "$dev"/; done
  # the CLI too, when the rest of the tree builds (not needed by the checks below)
  cmake --build build-gpu -j"$(nproc)" --target ljperf >>build-gpu/prepare.log 2>&1 && cp build-gpu/ljperf "$dev"/ || true
  bash scripts/fetch-gpu-deps.sh >/dev/null
  echo "prepared: $(ls "$dev" | tr '\n' ' ')($(du -sh "$dev" | cut -f1)), .deb: $(ls .deb | wc -l) packages"
  exit 0
fi

OUT=${OUT:-$repo/out/gpu-check}
mkdir -p "$OUT"
env_log=$OUT/env.log
: >"$env_log"

# ---- run-time libraries -------------------------------------------------------------
source scripts/gpu/gpu-env.sh
{
  date -u; echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  for b in "$dev"/*; do echo "== ldd $b"; ldd "$b" | grep -E 'not found|cublas|cudart|openblas|cjson|pcre2|utf8proc|gomp'; done
} >>"$env_log" 2>&1
missing=$(for b in "$dev"/*; do ldd "$b" | grep 'not found'; done | sort -u)
[ -n "$missing" ] && { echo "missing libraries:"; echo "$missing"; }

# ---- runs (within GPU_CHECK_BUDGET seconds, default 270: later steps are skipped) -------
budget=${GPU_CHECK_BUDGET:-270}
declare -A status
run() { # name timeout log command...
  local name=$1 t=$2 log=$3; shift 3
  local left=$((budget - SECONDS))
  if [ "$left" -lt 20 ]; then status[$name]="skipped (budget)"; return; fi
  [ "$t" -gt "$left" ] && t=$left
  local t0=$SECONDS
  echo "==== $name: $*" >>"$log"
  timeout "$t" "$@" >>"$log" 2>&1
  local rc=$?
  status[$name]="rc=$rc $((SECONDS - t0))s"
  echo "==== $name: rc=$rc ($((SECONDS - t0)) s)" >>"$log"
}

tlog=$OUT/test_ops_cuda.log
run test_ops_cuda 150 "$tlog" "$dev/test_ops_cuda" check
plog=$OUT/perf.log
run perf 120 "$plog" "$dev/test_ops_cuda" perf
hlog=$OUT/hf_fixtures.log
[ -x "$dev/gpu_hf_fixtures" ] && run gpu_hf_fixtures 120 "$hlog" "$dev/gpu_hf_fixtures" tests/fixtures/hf
vlog=$OUT/vision_ops.log
[ -x "$dev/gpu_vision_ops" ] && run gpu_vision_ops 90 "$vlog" "$dev/gpu_vision_ops"
[ -x "$dev/gpu_vl_fixture" ] && run gpu_vl_fixture 60 "$vlog" "$dev/gpu_vl_fixture" tests/fixtures/qwen3vl-tiny
klog=$OUT/kernels.log
for k in kl_adamw kl_global_norm kl_rope kl_cross_entropy kl_attention; do
  [ -x "$dev/$k" ] && run "$k" 90 "$klog" "$dev/$k"
done
slog=$OUT/sanitizer.log
: >"$slog"
if command -v compute-sanitizer >/dev/null 2>&1; then
  run memcheck 120 "$slog" compute-sanitizer --tool memcheck --error-exitcode 9 "$dev/test_ops_cuda" check --quick
  run racecheck 120 "$slog" compute-sanitizer --tool racecheck --error-exitcode 9 "$dev/test_ops_cuda" check --quick
else
  echo "compute-sanitizer not found" >>"$slog"
fi

# ---- short table (last) -----------------------------------------------------------------
echo
echo "== failing checks (first 30)"
grep -hE '^FAIL|CUDA error|Assertion|ljperf:|^(test_ops_cuda|kl_[a-z_]+): [^PFm0-9]|not found' "$tlog" "$plog" "$klog" 2>/dev/null | head -30
echo "== sanitizer"
grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Race reported|CUDA error' "$slog" | sort | uniq -c | head -20
echo "== perf (test_ops_cuda perf)"
grep -hE '^RESULT|^test_ops_cuda: (PASS|FAIL)' "$plog"
echo "== kernel lab"
grep -E '^RESULT|^kl_[a-z_]+: (PASS|FAIL)' "$klog"
echo "== gpu_hf_fixtures"
grep -cE '^\s*\[ ok \]' "${hlog:-/dev/null}" 2>/dev/null | sed 's/^/ok checks: /'
grep -E 'FAIL|error|gpu_hf_fixtures:' "${hlog:-/dev/null}" 2>/dev/null | head -15
tail -2 "${hlog:-/dev/null}" 2>/dev/null
echo "== gpu_vision_ops"
grep -E 'FAIL|error|gpu_vision_ops:|gpu_vl_fixture:' "${vlog:-/dev/null}" 2>/dev/null | head -15
echo "== test_ops_cuda per op"
sed -n '/^op  *checks/,$p' "$tlog"
echo "== runs"
for k in "${!status[@]}"; do echo "$k: ${status[$k]}"; done | sort
grep -m1 -E 'NVIDIA H' "$env_log" || true

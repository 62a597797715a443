#!/usr/bin/env bash
# test_fp8_param_plan.sh: the memory plan of --fp8-param-gather on the CUDA backend (bf16 params),
# planned without a GPU (model/linear.h, docs/megatron.md "FP8 parameters"), llama3.2-1b at
# micro-batch 4 (seq 4096, recompute none) and llama3.1-8b at micro-batch 1 (recompute full):
#   - one rank (--zero-stage 1 over one GPU): each FP8 linear's codes and transpose lie in its
#     weight's own place of the bf16 params, which keep no bf16 copy of those weights: the plan
#     has no fp8.layers.* buffers and no weight scratch (fp8.w, fp8.w_t), its parameters are those
#     of the run without the flag byte for byte, and its FP8 buffers differ from that run's by the
#     kept weights' scales and amaxes less the weight scratch, so the peak is not above it;
#   - the forms that keep today's buffers beside the bf16 weights (ZeRO-1 over 2 ranks, which
#     all-gathers the bf16 weights; optimizer offload, which pushes them from the host master)
#     still list fp8.layers.L.K.w and .w_t, out x ld(in) and in x ld(out) bytes: against them the
#     one-rank plan is smaller by exactly those bytes, 2 bytes per parameter of the FP8 linears;
#   - the start-up line says which form runs.
set -euo pipefail
: "${LJPERF:?}" "${LJ_TEST_TMP:?}"
tmp="$LJ_TEST_TMP/fp8_param_plan"
rm -rf "$tmp" && mkdir -p "$tmp"
export LJPERF_CACHE="$tmp/cache"
unset CHECKPOINT_OPTIMIZATION LJ_CUDA_CONTEXT_OVERHEAD
fail() { echo "FAIL: $*" >&2; exit 1; }

if "$LJPERF" plan --model llama3.2-1b --seq-length 64 2>&1 | grep -q "built without CUDA"; then
  echo "note: this build has no CUDA: nothing to plan for it"
  exit 0
fi

plan() { # plan NAME MODEL FLAGS...: --buffers into NAME.txt, --json into NAME.json
  local name=$1 model=$2; shift 2
  "$LJPERF" plan --model "$model" --device cuda --fp8-format hybrid --zero-stage 1 "$@" --buffers \
    --json "$tmp/$name.json" >"$tmp/$name.txt" 2>&1 || { cat "$tmp/$name.txt"; fail "plan $name"; }
}
for m in 1b:llama3.2-1b:4:none 8b:llama3.1-8b:1:full; do
  IFS=: read -r tag model mb rec <<<"$m"
  shape=(--micro-batch-size "$mb" --recompute "$rec")
  plan "$tag" "$model" "${shape[@]}"
  plan "$tag-p" "$model" "${shape[@]}" --fp8-param-gather
  plan "$tag-w2" "$model" "${shape[@]}" --world-size 2
  plan "$tag-w2-p" "$model" "${shape[@]}" --world-size 2 --fp8-param-gather
  plan "$tag-off-p" "$model" "${shape[@]}" --offload-optimizer cpu --host-memory 512GiB --fp8-param-gather
done
grep -q "one rank: their FP8 copy and its transpose in the place of their bf16 weights (no bf16 copy kept" \
  "$tmp/1b-p.txt" || { head -3 "$tmp/1b-p.txt"; fail "one rank: the start-up line"; }
grep -q "one rank: their FP8 copy and its transpose beside the bf16 weights, which the cast reads (optimizer offload" \
  "$tmp/1b-off-p.txt" || { head -3 "$tmp/1b-off-p.txt"; fail "offload: the start-up line"; }
grep -q "ZeRO stage 1: the updated bf16 parameters are all-gathered as before" "$tmp/1b-w2-p.txt" \
  || { head -3 "$tmp/1b-w2-p.txt"; fail "2 ranks: the start-up line"; }
echo "ok: the start-up lines name the form (in place on one rank; beside under ZeRO-1 over 2 ranks and offload)"

python3 - "$tmp" <<'PY' || fail "the memory plan"
import json, sys
tmp = sys.argv[1]
GiB = 1 << 30
def names(name):
    out, listing = set(), False
    for line in open(f"{tmp}/{name}.txt"):
        if line.startswith("buffers ("):
            listing = True
        elif listing and line.startswith("  ") and len(line.split()) >= 3:
            out.add(line.split()[0])
    assert out, f"{name}: no buffers listed"
    return out
def report(name):
    d = json.load(open(f"{tmp}/{name}.json"))
    cat = {r["category"]: r["bytes"] for r in d["breakdown"]}
    return cat["parameters"], cat.get("FP8 casts and scales", 0), d["peak_bytes"], d["parameters"]
ld = lambda n: (n + 15) // 16 * 16
pad = lambda n: (n + 255) // 256 * 256
models = {"1b": dict(C=2048, I=8192, nh=32, nkv=8, hd=64, L=16), "8b": dict(C=4096, I=14336, nh=32, nkv=8, hd=128, L=32)}
for tag, g in models.items():
    C, I, Q, L = g["C"], g["I"], g["nh"] * g["hd"], g["L"]
    QKV = Q + 2 * g["nkv"] * g["hd"]
    shapes = {"qkv": (QKV, C), "o": (C, Q), "gate_up": (2 * I, C), "down": (C, I)}
    F = 4 * L
    codes = L * sum(pad(o * ld(i)) + pad(i * ld(o)) for o, i in shapes.values())
    assert codes == 2 * L * sum(o * i for o, i in shapes.values())  # multiples of 16: 2 B per parameter
    scales = pad(3 * F * 16) + pad(F * 4)  # fp8.w_sinv (a 16-byte slot per tensor), fp8.w_amax
    scratch = 2 * pad(max(max(o * ld(i), i * ld(o)) for o, i in shapes.values()))  # fp8.w, fp8.w_t
    (pa, fa, ka, P), (pb, fb, kb, _) = report(tag), report(f"{tag}-p")
    (pc, fc, kc, _), (pd, fd, kd, _) = report(f"{tag}-w2"), report(f"{tag}-w2-p")
    pe, fe, ke, _ = report(f"{tag}-off-p")
    one = names(f"{tag}-p")
    assert not any(n.startswith("fp8.layers.") for n in one), f"{tag}: one rank plans kept codes of their own"
    assert "fp8.w" not in one and "fp8.w_t" not in one, f"{tag}: one rank plans the weight scratch"
    assert "fp8.w" in names(tag) and "fp8.w_t" in names(tag), f"{tag}: the run without the flag has no scratch"
    for other in (f"{tag}-w2-p", f"{tag}-off-p"):
        kept = [n for n in names(other) if n.startswith("fp8.layers.")]
        assert len(kept) == 2 * F, f"{other}: {len(kept)} kept code buffers, expected {2 * F}"
    assert pb == pa == pad(2 * P), f"{tag}: parameters {pb} bytes with the flag, {pa} without"  # params only
    assert fb - fa == scales - scratch, f"{tag}: FP8 bytes moved by {fb - fa}, expected {scales - scratch}"
    assert kb <= ka and ka - kb == fa - fb, f"{tag}: peak {kb} against {ka} without the flag"
    assert pd == pc and fd - fc == codes + scales - scratch, f"{tag}, 2 ranks: FP8 bytes grew by {fd - fc}"
    assert kd - kc == fd - fc, f"{tag}, 2 ranks: the peak grew by {kd - kc}, the FP8 bytes by {fd - fc}"
    assert pe == pa and fe - fa == codes + scales - scratch, f"{tag}, offload: FP8 bytes grew by {fe - fa}"
    assert fe - fb == codes, f"{tag}: the plan shrinks by {fe - fb} bytes against the codes beside, expected {codes}"
    print(f"  {tag}: one rank's plan {(fe - fb) / GiB:.2f} GiB ({codes} bytes, 2 B/param of the FP8 linears) "
          f"below the kept codes beside the params; peak {kb / GiB:.2f} GiB with the flag, {ka / GiB:.2f} without")
PY
echo "ok: one rank keeps the FP8 codes in the bf16 weights' places: the plan shrinks by exactly the kept codes"

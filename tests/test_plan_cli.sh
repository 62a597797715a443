#!/bin/bash
# test_plan_cli.sh: `ljperf plan` end to end: the breakdown rows and a recommendation for a GPU
# run planned without a GPU (the issue's done-when command), --json that parses and agrees with
# the text, the refusal with its numbers when nothing fits, micro-batch auto, manual recompute
# through Megatron-LM's flags, CHECKPOINT_OPTIMIZATION parsing, a CPU plan, and bad flags.
set -uo pipefail

: "${LJPERF:?LJPERF must be set (CTest sets it)}"
: "${LJ_TEST_TMP:?LJ_TEST_TMP must be set (CTest sets it)}"
out="$LJ_TEST_TMP/plan_cli"
rm -rf "$out"
mkdir -p "$out"
export LJPERF_CACHE="$out/cache" # the CPU measurement is cached here, not in the user's cache
unset CHECKPOINT_OPTIMIZATION LJ_CUDA_CONTEXT_OVERHEAD
fail=0
check() { # check NAME CONDITION...: reports and records a failure
    local name="$1"
    shift
    if "$@"; then echo "ok: $name"; else echo "FAILED: $name" >&2; fail=1; fi
}
has() { grep -q -- "$2" "$1"; }

# GPU target without a GPU needs the CUDA backend's description (every CI build has CUDA)
"$LJPERF" plan --model llama3.2-1b --seq-length 64 >"$out/probe.txt" 2>"$out/probe.err"
if grep -q "built without CUDA" "$out/probe.err"; then
    echo "note: this build has no CUDA: the GPU-target cases are skipped"
    gpu=0
else
    gpu=1
fi

if [ "$gpu" = 1 ]; then
    # the done-when command: a breakdown and a recommendation, no GPU needed
    "$LJPERF" plan --model llama3-8b --seq-length 4096 --micro-batch-size auto --json "$out/8b.json" \
        >"$out/8b.txt" 2>"$out/8b.err"
    rc=$?
    check "8b plan exit status is 0 (fits) or 1 (refused): $rc" test "$rc" -le 1
    for row in "parameters" "master weights" "gradients" "optimizer moments" "saved activations" \
        "residual stream" "recompute buffers" "backward scratch" "logits/loss" "op workspaces" \
        "library workspaces" "CUDA context" "peak" "model states" "16.0 B/param" "gradients BF16"; do
        check "8b breakdown row '$row'" has "$out/8b.txt" "$row"
    done
    if [ "$rc" = 0 ]; then
        check "8b recommendation" has "$out/8b.txt" "recommendation: Chose recompute"
        check "8b alternatives table" has "$out/8b.txt" "does not fit"
    else
        check "8b refusal names the memory needed" has "$out/8b.err" "needs at least"
    fi
    check "8b json parses and agrees" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["model"] == "llama3-8b" and d["seq_length"] == 4096, d["model"]
cats = {r["category"]: r["bytes"] for r in d["breakdown"]}
assert sum(cats.values()) == d["peak_bytes"], (sum(cats.values()), d["peak_bytes"])
assert cats["other"] == 0
assert d["peak_bytes"] == d["plan_bytes"] + d["library_workspace_bytes"] + d["context_bytes"]
assert abs(sum(r["percent"] for r in d["breakdown"]) - 100.0) < 1e-6
c = d["chosen"] if d["fits"] else d["smallest"]
assert c["peak_bytes"] == d["peak_bytes"]
assert d["usable_bytes"] == d["device_memory_bytes"] - d["margin_bytes"]
if d["device_memory_source"].startswith("assumed"):  # no GPU here: one H200 as CUDA sees it
    assert 139 * 2**30 < d["device_memory_bytes"] < 141 * 2**30, d["device_memory_bytes"]
assert (c["peak_bytes"] <= d["usable_bytes"]) == d["fits"]
assert all("step_ms" in a and "peak_bytes" in a for a in d["alternatives"])
' "$out/8b.json"

    # plenty of memory: no recompute; a small budget: recompute
    "$LJPERF" plan --model llama3.2-1b --seq-length 2048 --device-memory 1TiB --json "$out/1b_big.json" >"$out/1b_big.txt" 2>&1
    check "1b with 1 TiB: exit 0" test $? = 0
    check "1b with 1 TiB: no recompute" python3 -c '
import json, sys; d = json.load(open(sys.argv[1])); assert d["chosen"]["layers_none"] == 16, d["chosen"]' "$out/1b_big.json"
    "$LJPERF" plan --model llama3.2-1b --seq-length 2048 --device-memory 22GiB --margin 5% --json "$out/1b_small.json" >"$out/1b_small.txt" 2>&1
    check "1b with 22 GiB: exit 0" test $? = 0
    check "1b with 22 GiB: recomputes, fits, margin 5%" python3 -c '
import json, sys; d = json.load(open(sys.argv[1])); c = d["chosen"]
assert c["layers_none"] < 16 and c["fits"], c
assert d["margin_bytes"] == int(22 * 2**30 * 0.05), d["margin_bytes"]' "$out/1b_small.json"

    # --deterministic-mode: cuDNN's deterministic attention backward keeps dP, [mb, heads, T, T] bf16
    # per layer's call (one workspace): 4 x 32 x 4096^2 x 2 bytes = 4 GiB more at the 1b's mb 4
    for d in "" --deterministic-mode; do
        "$LJPERF" plan --model llama3.2-1b --micro-batch-size 4 --recompute none $d --json "$out/det$d.json" \
            >"$out/det$d.txt" 2>&1
    done
    check "--deterministic-mode adds the dP workspace" python3 -c '
import json, sys; a, b = (json.load(open(f)) for f in sys.argv[1:])
assert b["peak_bytes"] - a["peak_bytes"] == 4 * 32 * 4096 * 4096 * 2, (a["peak_bytes"], b["peak_bytes"])
assert a["deterministic"] is False and b["deterministic"] is True' \
        "$out/det.json" "$out/det--deterministic-mode.json"
    LJ_CUDA_DETERMINISTIC=1 "$LJPERF" plan --model llama3.2-1b --micro-batch-size 4 --recompute none \
        --json "$out/det_env.json" >/dev/null 2>&1
    check "LJ_CUDA_DETERMINISTIC=1 plans as --deterministic-mode" cmp -s <(grep -v '"deterministic"' "$out/det_env.json") \
        <(grep -v '"deterministic"' "$out/det--deterministic-mode.json")
    # when the mode is what breaks the fit, the refusal says what the run needs without it
    "$LJPERF" plan --model llama3.1-8b --seq-length 32768 --deterministic-mode >"$out/det32k.txt" 2>"$out/det32k.err"
    check "8b seq 32768 --deterministic-mode: exit 1" test $? = 1
    check "8b seq 32768 --deterministic-mode: the way out names the mode" \
        has "$out/det32k.err" "without --deterministic-mode (.*) it needs .* (fits)"

    # micro-batch auto with a favouring budget picks more than 1
    "$LJPERF" plan --model llama3.2-1b --seq-length 1024 --micro-batch-size auto --json "$out/1b_auto.json" >"$out/1b_auto.txt" 2>&1
    check "1b micro-batch auto: > 1" python3 -c '
import json, sys; d = json.load(open(sys.argv[1])); assert d["chosen"]["micro_batch_size"] > 1, d["chosen"]' "$out/1b_auto.json"

    # nothing fits: refused with the numbers and the ways out; the JSON says so
    "$LJPERF" plan --model llama3-70b --seq-length 4096 --json "$out/70b.json" >"$out/70b.txt" 2>"$out/70b.err"
    check "70b on one GPU: exit 1" test $? = 1
    for what in "does not fit" "needs at least" "ZeRO-3 over at least" "optimizer offload" "shorter sequence\|no sequence length"; do
        check "70b refusal mentions '$what'" has "$out/70b.err" "$what"
    done
    check "70b breakdown printed" has "$out/70b.txt" "optimizer moments"
    # 8 GPUs with ZeRO-3: still refused, per rank, with the ways out checked by plans
    "$LJPERF" plan --model llama3-70b --seq-length 4096 --world-size 8 --zero-stage 3 >"$out/70b8.txt" 2>"$out/70b8.err"
    check "70b on 8 GPUs, ZeRO-3: exit 1" test $? = 1
    for what in "needs at least [0-9.]* GiB per rank" "this rank's share under ZeRO stage 3 over 8 ranks" \
        "ZeRO-3 over at least 9 GPUs" "optimizer offload (--offload-optimizer cpu: .*) would bring it to .* (fits; .* of host memory per rank)"; do
        check "70b on 8 GPUs refusal mentions '$what'" has "$out/70b8.err" "$what"
    done
    check "70b json fits=false" python3 -c '
import json, sys; d = json.load(open(sys.argv[1])); assert d["fits"] is False and d["smallest"]["layers_full"] == 80' "$out/70b.json"

    # manual recompute (Megatron flags) and --recompute
    "$LJPERF" plan --model llama3.2-1b --seq-length 1024 --recompute-granularity full --recompute-method block \
        --recompute-num-layers 5 --json "$out/block.json" >"$out/block.txt" 2>&1
    check "block recompute: 5 full + 11 none" python3 -c '
import json, sys; d = json.load(open(sys.argv[1])); c = d["chosen"]
assert (c["layers_full"], c["layers_selective"], c["layers_none"]) == (5, 0, 11), c' "$out/block.json"
    "$LJPERF" plan --model llama3.2-1b --seq-length 1024 --recompute selective >"$out/sel.txt" 2>&1
    check "--recompute selective" has "$out/sel.txt" "selective (all 16 layers)"
    "$LJPERF" plan --model deepspeed/llama3.2-1b --seq-length 1024 --zero-stage 3 >"$out/ds.txt" 2>&1
    check "deepspeed/ prefix and ZeRO-3 on one GPU accepted" has "$out/ds.txt" "shards nothing"

    # per rank of several data-parallel ranks: ZeRO stage 1 shards the AdamW moments by the world size
    "$LJPERF" plan --model llama3.2-1b --seq-length 1024 --micro-batch-size 1 --recompute none --json "$out/w1.json" \
        >/dev/null 2>&1
    "$LJPERF" plan --model llama3.2-1b --seq-length 1024 --micro-batch-size 1 --recompute none --world-size 4 \
        --zero-stage 1 --json "$out/w4.json" >"$out/w4.txt" 2>&1
    check "--world-size 4 --zero-stage 1: per-rank plan" has "$out/w4.txt" "per rank of 4 data-parallel ranks"
    "$LJPERF" plan --model llama3.2-1b --seq-length 1024 --micro-batch-size 1 --recompute none --world-size 4 \
        --zero-stage 1 --offload-optimizer cpu --host-memory 1TiB >"$out/w4o.txt" 2>&1
    check "--offload-optimizer cpu: host bytes line" has "$out/w4o.txt" "of optimizer state (f32 master weights and AdamW moments) in host memory"
    check "--offload-optimizer cpu: no master weights on the device" grep -Eq "master weights +0 B" "$out/w4o.txt"
    # the host part of an offloaded plan against the host's memory
    "$LJPERF" plan --model llama3.1-8b --seq-length 32768 --zero-stage 1 --offload-optimizer cpu --host-memory 64GiB \
        >"$out/host_small.txt" 2>&1
    check "offload on a 64 GiB host: exit 1" test $? = 1
    check "offload on a 64 GiB host: the need and the host named" has "$out/host_small.txt" \
        "the host part of the plan needs 104.70 GiB per rank"
    "$LJPERF" plan --model llama3.1-8b --seq-length 32768 --zero-stage 1 --offload-optimizer cpu --host-memory 2TiB \
        --json "$out/host_big.json" >"$out/host_big.txt" 2>&1
    check "offload on a 2 TiB host: fits with less recompute than without offload" python3 -c '
import json, sys; c = json.load(open(sys.argv[1]))["chosen"]
assert c["fits"] and c["layers_full"] == 0 and c["layers_none"] > 0, c' "$out/host_big.json"
    "$LJPERF" plan --model llama3-nano --zero-stage 1 --offload-optimizer cpu --host-memory lots >"$out/host_bad.txt" 2>&1
    check "bad --host-memory: exit 1" test $? = 1
    check "bad --host-memory: named" has "$out/host_bad.txt" "--host-memory: 'lots' is not a byte count"
    check "ZeRO-1 over 4 ranks: a quarter of the moments" python3 -c '
import json, sys
def moments(p):
    d = json.load(open(p))
    return [c["bytes"] for c in d["breakdown"] if c["category"].startswith("optimizer")][0]
a, b = moments(sys.argv[1]), moments(sys.argv[2])
assert abs(b * 4 - a) <= 4 * 64 * 4 * 2 + 4096, (a, b)' "$out/w1.json" "$out/w4.json"

    # CHECKPOINT_OPTIMIZATION: off -> no recompute search; a typo is an error naming it
    CHECKPOINT_OPTIMIZATION=0 "$LJPERF" plan --model llama3.2-1b --seq-length 1024 >"$out/env_off.txt" 2>&1
    check "CHECKPOINT_OPTIMIZATION=0: policy none" has "$out/env_off.txt" "CHECKPOINT_OPTIMIZATION is off"
    CHECKPOINT_OPTIMIZATION=yes "$LJPERF" plan --model llama3.2-1b --seq-length 1024 >"$out/env_on.txt" 2>&1
    check "CHECKPOINT_OPTIMIZATION=yes: auto" has "$out/env_on.txt" "recompute: auto"
    CHECKPOINT_OPTIMIZATION=ture "$LJPERF" plan --model llama3.2-1b >"$out/env_bad.txt" 2>&1
    check "CHECKPOINT_OPTIMIZATION=ture: exit 1" test $? = 1
    check "CHECKPOINT_OPTIMIZATION=ture: names variable and value" has "$out/env_bad.txt" "CHECKPOINT_OPTIMIZATION='ture'"
fi

# ZeRO-3 per rank of 2 and 3 ranks on the CPU: the AdamW moments are sharded by the world size,
# and the gather and gradient slots are part of the plan
"$LJPERF" plan --model llama3-nano --device cpu --seq-length 64 --micro-batch-size 1 --recompute none \
    --json "$out/z3_1.json" >/dev/null 2>&1
for w in 2 3; do
    "$LJPERF" plan --model llama3-nano --device cpu --seq-length 64 --micro-batch-size 1 --recompute none \
        --world-size $w --zero-stage 3 --buffers --json "$out/z3_$w.json" >"$out/z3_$w.txt" 2>&1
    check "--world-size $w --zero-stage 3: exit 0" test $? = 0
    check "--world-size $w --zero-stage 3: per-rank plan" has "$out/z3_$w.txt" "per rank of $w data-parallel ranks, ZeRO stage 3"
    check "--world-size $w --zero-stage 3: gather slots listed" has "$out/z3_$w.txt" "zero3.gather.0"
    check "ZeRO-3 over $w ranks: 1/$w of the moments" python3 -c '
import json, sys
def moments(p):
    d = json.load(open(p))
    return [c["bytes"] for c in d["breakdown"] if c["category"].startswith("optimizer")][0]
a, b, w = moments(sys.argv[1]), moments(sys.argv[2]), int(sys.argv[3])
assert abs(b * w - a) <= w * 8 * 64 * 4 * 2 + 4096, (a, b)' "$out/z3_1.json" "$out/z3_$w.json" $w
done

# ZeRO-2 per rank of 2 and 3 ranks: the gradient buffer is this rank's shard plus the gradient
# slots of the layers in backward, not the full buffer that stage 1 holds
for w in 2 3; do
    for z in 1 2; do
        "$LJPERF" plan --model llama3.2-1b --device cpu --seq-length 64 --micro-batch-size 1 --recompute none \
            --world-size $w --zero-stage $z --json "$out/z${z}_$w.json" >"$out/z${z}_$w.txt" 2>&1
        check "--world-size $w --zero-stage $z: exit 0" test $? = 0
    done
    check "--world-size $w --zero-stage 2: per-rank plan" has "$out/z2_$w.txt" "gradients sharded"
    check "ZeRO-2 over $w ranks: gradients are a 1/$w shard plus the slots" python3 -c '
import json, sys
def grads(p):
    d = json.load(open(p))
    return [c["bytes"] for c in d["breakdown"] if c["category"] == "gradients"][0]
g1, g2, w = grads(sys.argv[1]), grads(sys.argv[2]), int(sys.argv[3])
P = 1235814400
slots = (128256 * 2048 + 2 * 60821504) * 4  # the tied embedding and two layers, fp32
assert g2 < g1, (g1, g2)
assert abs(g2 - (g1 / w + slots)) <= 8 * 4096 + w * 64 * 4, (g1, g2, g1 / w + slots)' "$out/z1_$w.json" "$out/z2_$w.json" $w
done

# a CPU plan (fp32 recipe: no master weights, no CUDA context)
"$LJPERF" plan --model llama3-nano --device cpu --seq-length 64 --micro-batch-size 2 --json "$out/cpu.json" >"$out/cpu.txt" 2>&1
check "cpu plan: exit 0" test $? = 0
check "cpu plan: breakdown" has "$out/cpu.txt" "saved activations"
check "cpu plan json" python3 -c '
import json, sys; d = json.load(open(sys.argv[1]))
cats = {r["category"]: r["bytes"] for r in d["breakdown"]}
assert d["device"] == "cpu" and cats["master weights"] == 0 and cats["CUDA context"] == 0, cats
assert d["chosen"]["micro_batch_size"] == 2' "$out/cpu.json"

# bad flags: non-zero exit and a message naming the flag
bad() { # bad NAME PATTERN ARGS...
    local name="$1" pattern="$2"
    shift 2
    "$LJPERF" plan "$@" >"$out/bad.txt" 2>&1
    local rc=$?
    check "bad: $name (exit $rc)" test "$rc" -ne 0
    check "bad: $name message" has "$out/bad.txt" "$pattern"
}
bad "no model" "--model is required" --seq-length 128
bad "unknown flag" "unknown flag '--frobnicate'" --model llama3-nano --device cpu --frobnicate
bad "micro-batch 0" "--micro-batch-size 0" --model llama3-nano --device cpu --micro-batch-size 0
bad "micro-batch text" "--micro-batch-size: 'many'" --model llama3-nano --device cpu --micro-batch-size many
bad "device" "--device: 'tpu'" --model llama3-nano --device tpu
bad "recompute" "--recompute: 'some'" --model llama3-nano --device cpu --recompute some
bad "granularity" "--recompute-granularity: 'half'" --model llama3-nano --device cpu --recompute-granularity half
bad "num layers" "--recompute-num-layers 99" --model llama3-nano --device cpu --recompute-granularity full \
    --recompute-method block --recompute-num-layers 99
bad "device memory" "--device-memory: 'lots'" --model llama3-nano --device cpu --device-memory lots
bad "margin" "--margin: '150%'" --model llama3-nano --device cpu --margin 150%
bad "world size 0" "--world-size 0" --model llama3-nano --device cpu --world-size 0
bad "zero stage" "--zero-stage 5" --model llama3-nano --device cpu --zero-stage 5
bad "offload under stage 0" "--offload-optimizer cpu: optimizer offload needs ZeRO stage 1" --model llama3-nano \
    --device cpu --offload-optimizer cpu
bad "offload device" "--offload-optimizer: 'nvme'" --model llama3-nano --device cpu --zero-stage 1 --offload-optimizer nvme
bad "seq length" "max_position_embeddings" --model llama3-nano --device cpu --seq-length 100000000
bad "unknown model" "llama9" --model llama9 --device cpu
bad "missing value" "--seq-length needs a value" --model llama3-nano --device cpu --seq-length
bad "device memory without a unit" "--device-memory: '80' is 80 B, below the smallest accepted, 1.00 MiB" --model llama3-nano --device cpu \
    --device-memory 80
bad "seq length 0" "--seq-length 0: expected >= 1" --model llama3-nano --device cpu --seq-length 0
"$LJPERF" plan --model llama3-nano --device cpu --seq-length 64 --json - >"$out/stdout.json" 2>/dev/null
check "--json - writes JSON to standard output" python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$out/stdout.json"
check "--json - writes no file named -" test ! -e ./-
bad "grad dtype" "--grad-dtype: 'fp16'" --model llama3-nano --device cpu --grad-dtype fp16
if [ "$gpu" = 1 ]; then # as train refuses it: cuBLASLt's block-scaled GEMM needs token counts in fours
    bad "blockwise FP8 tokens" "4095 tokens, not a multiple of 4" --model llama3.2-1b --fp8-format hybrid \
        --fp8-recipe blockwise --seq-length 4095 --micro-batch-size 1
fi
bad "device" "--device: 'tpu' is not one of cuda, cpu, auto" --model llama3-nano --device tpu
# --device auto plans what `train --device auto` runs on: here, without a GPU, the CPU
"$LJPERF" plan --model llama3-nano --device auto --seq-length 64 >"$out/auto.txt" 2>&1
check "--device auto without a GPU plans a CPU run" has "$out/auto.txt" "device cpu"
bad "grad dtype on the CPU" "--grad-dtype bf16: the cpu backend keeps fp32 gradients" --model llama3-nano \
    --device cpu --grad-dtype bf16
if [ "$gpu" = 1 ]; then
    # fp32 gradients: 2 more bytes per parameter than the bf16 default
    "$LJPERF" plan --model llama3.2-1b --seq-length 1024 --grad-dtype fp32 >"$out/fp32.txt" 2>&1
    check "--grad-dtype fp32: 18.0 B/param" has "$out/fp32.txt" "18.0 B/param"
    check "--grad-dtype fp32: gradients FP32" has "$out/fp32.txt" "gradients F32"
fi
if [ "$gpu" = 1 ]; then
    # --global-batch-size: the optimizer step shared by the accumulated micro-batches (Megatron's rule)
    "$LJPERF" plan --model llama3.2-1b --seq-length 1024 --micro-batch-size 2 >"$out/gbs1.txt" 2>&1
    "$LJPERF" plan --model llama3.2-1b --seq-length 1024 --micro-batch-size 2 --global-batch-size 16 >"$out/gbs8.txt" 2>&1
    step() { sed -n 's/^predicted step \([0-9.]*\) ms.*/\1/p' "$1" | head -1; }
    check "--global-batch-size 16 at micro-batch 2: a shorter step per micro-batch ($(step "$out/gbs8.txt") < $(step "$out/gbs1.txt") ms)" \
        awk -v a="$(step "$out/gbs8.txt")" -v b="$(step "$out/gbs1.txt")" 'BEGIN { exit !(a > 0 && a < b) }'
fi
bad "global batch not a multiple" "--global-batch-size 15 is not a multiple of --micro-batch-size 2" \
    --model llama3-nano --device cpu --micro-batch-size 2 --global-batch-size 15
bad "global batch with micro-batch auto" "--global-batch-size 16 needs an explicit --micro-batch-size" \
    --model llama3-nano --device cpu --micro-batch-size auto --global-batch-size 16

# train's own plan equals the one the recompute planner built for it (else a warning names both):
# the planner's policy, Megatron's manual flags, FP8 linears, and a first save of the state
for flags in "--recompute auto" "--recompute-granularity selective" "--recompute auto --fp8-format hybrid" \
    "--recompute auto --micro-batch-size auto"; do
    # shellcheck disable=SC2086
    "$LJPERF" train --model llama3-nano --device cpu --mock-data --seq-length 64 --micro-batch-size 2 \
        --train-iters 1 --eval-iters 0 --quiet $flags >"$out/agree.txt" 2>&1
    check "train $flags: exit 0" test $? = 0
    check "train $flags: plan equals the planner's" bash -c "! grep -q 'the recompute planner planned' '$out/agree.txt'"
done

exit $fail

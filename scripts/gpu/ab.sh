#!/usr/bin/env bash
# ab.sh: two builds of ljperf on the same benchmarks in one job, interleaved A B B A so that the
# machine's drift (clock, temperature, up to ~3% between machines of a kind) affects both alike.
# Run on a GPU machine from the repo root after `source scripts/gpu/gpu-env.sh`:
#   bash scripts/gpu/ab.sh A_BINARY B_BINARY [OUT_DIR]
# The benchmarks (override with AB_CASES, one case per line: "name|env|flags"):
#   llama3.2-1b, seq 4096, micro-batch 4; llama3.2-3b, micro-batch 2;
#   CHECKPOINT_OPTIMIZATION=true on deepspeed/llama3-8b (the planner's recompute choice).
# Prints one line per run and, per case, the mean tokens/s of each build, B against A, and the
# measured against the planned peak; every run's output and JSON go to OUT_DIR.
set -uo pipefail
A=${1:?usage: ab.sh A_BINARY B_BINARY [OUT_DIR]}
B=${2:?usage: ab.sh A_BINARY B_BINARY [OUT_DIR]}
OUT=${3:-${OUT:-out/ab}}
mkdir -p "$OUT"
ITERS=${AB_ITERS:-20}
cases=${AB_CASES:-"1b||--model llama3.2-1b --micro-batch-size 4
3b||--model llama3.2-3b --micro-batch-size 2
8b|CHECKPOINT_OPTIMIZATION=true|--model deepspeed/llama3-8b"}
summary=$OUT/ab-summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
say "A: $A"
say "B: $B"
while IFS='|' read -r name envs flags; do
  [ -n "$name" ] || continue
  for who in A B B A; do
    bin=$A
    [ "$who" = B ] && bin=$B
    n=$(ls "$OUT" | grep -c "^$name-$who-.*\.json$" || true)
    log=$OUT/$name-$who-$n.log
    json=$OUT/$name-$who-$n.json
    # shellcheck disable=SC2086
    env $envs timeout 300 "$bin" benchmark $flags --device cuda --train-iters "$ITERS" --no-progress \
      --json "$json" >"$log" 2>&1
    rc=$?
    line=$(python3 - "$json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("no result"); sys.exit(0)
if isinstance(r, list): r = r[-1]
def g(*keys):
    for k in keys:
        if k in r: return r[k]
    return None
print("%.0f tokens/s, peak %.3f GiB, planned %.3f GiB, loss %.4f -> %.4f" % (g("tokens_per_s"),
      g("peak_mem_gib"), g("planned_mem_gib"), g("loss_first"), g("loss_last")))
PY
)
    say "$name $who rc=$rc: $line"
  done
  python3 - "$OUT" "$name" <<'PY' | tee -a "$summary"
import glob, json, sys
out, name = sys.argv[1], sys.argv[2]
def tps(who):
    v = []
    for f in sorted(glob.glob(f"{out}/{name}-{who}-*.json")):
        try:
            r = json.load(open(f))
        except Exception:
            continue
        if isinstance(r, list): r = r[-1]
        for k in ("tokens_per_s",):
            if k in r: v.append(float(r[k]))
    return v
a, b = tps("A"), tps("B")
if a and b:
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    print(f"{name}: A {ma:,.0f} tokens/s ({len(a)} runs), B {mb:,.0f} ({len(b)} runs): B/A = {mb / ma:.4f}")
else:
    print(f"{name}: incomplete (A {len(a)} runs, B {len(b)} runs)")
PY
done <<<"$cases"

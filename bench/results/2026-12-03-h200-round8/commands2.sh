#!/bin/bash
# device call 2 (e2a8f9b): bf16 AdamW moments (--use-precision-aware-optimizer --exp-avg-dtype bf16
# --exp-avg-sq-dtype bf16): the op check, then the 8b rows that recomputed because one GPU holds
# the whole optimizer state, now planned with 12 instead of 16 bytes of state per parameter
set -u
R=$OUT; O=/tmp/o2; mkdir -p $O; T0=$SECONDS; END=${END:-560}
trap 'cp $O/summary.txt $R/ 2>/dev/null; tar czf $R/all.tgz -C $O .' EXIT
[ -x build-gpu/dev/ljperf ] || { mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev; }
source scripts/gpu/gpu-env.sh
d=build-gpu/dev
left() { local l=$((END - (SECONDS - T0))); [ $l -lt $1 ] && echo $l || echo $1; }
say() { echo "$*" | tee -a $O/summary.txt; }
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
b() { # name timeout flags...
  local n=$1 t=$(left $2); shift 2
  [ "$t" -lt 20 ] && { say "$n skipped"; return; }
  timeout $t $d/ljperf benchmark "$@" --device cuda --no-progress --json $O/$n.json > $O/$n.log 2>&1
  say "$n rc=$? $((SECONDS-T0))s: $(python3 -c "
import json
r=json.load(open('$O/$n.json')); r=r[-1] if isinstance(r,list) else r
print('%.0f tok/s mfu %.3f step %.1f ms peak %.3f planned %.3f' % (r['tokens_per_s'], r['mfu'], r['step_ms_median'], r['peak_mem_gib'], r['planned_mem_gib']))" 2>/dev/null || tail -1 $O/$n.log)"
  grep -iE "recompute|param-gather" $O/$n.log | grep -v "^initialising" | cut -c1-240 | head -3 | tee -a $O/summary.txt
}
timeout 120 $d/test_ops_cuda check --op adamw --verbose > $O/adamw_check.log 2>&1
say "adamw op check rc=$?: $(tail -1 $O/adamw_check.log)"; grep FAIL $O/adamw_check.log | head -5 | tee -a $O/summary.txt
M="--use-distributed-optimizer --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
G="--model llama3.1-8b --seq-length 8192 --micro-batch-size 1 --global-batch-size 16 --recompute auto --train-iters 2 --warmup-iters 1"
b gbs16_fp8_pg_m 120 $G $M --fp8-format hybrid --fp8-param-gather
b gbs16_bf16_m 120 $G $M
b q8_fp8_pg_m 90 --model qwen3-8b --micro-batch-size auto --recompute auto --fp8-format hybrid --fp8-param-gather $M --train-iters 8 --warmup-iters 2
CHECKPOINT_OPTIMIZATION=true b ds8_fp8_m 90 --model deepspeed/llama3-8b --micro-batch-size auto --fp8-format hybrid --fp8-param-gather $M --train-iters 8 --warmup-iters 2
b s8k_fp8_pg_m 90 --model llama3.1-8b --seq-length 8192 --micro-batch-size auto --recompute auto --fp8-format hybrid --fp8-param-gather $M --train-iters 6 --warmup-iters 2
say "total $((SECONDS-T0)) s"

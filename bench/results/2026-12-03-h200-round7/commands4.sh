#!/bin/bash
# device call 4: --async-save with B (build-gpu/devB, unpacked by call 3) at a save interval longer
# than a save's background write: llama3.2-1b mb 4, 220 steps, without saves and with 2 saves
source scripts/gpu/gpu-env.sh; d=build-gpu/devB; O=$OUT
for n in none async; do
  f=""; [ $n = async ] && f="--save /dev/shm/ck --save-interval 100 --async-save"
  timeout 85 $d/ljperf benchmark --model llama3.2-1b --micro-batch-size 4 --train-iters 220 --warmup-iters 3 $f \
    --device cuda --no-progress --json $O/s_$n.json > $O/s_$n.log 2>&1
  echo "$n rc=$? $(grep -E '^tokens/s|^step time median|paused|checkpoints \(' $O/s_$n.log | cut -c1-260 | tr '\n' '|')"
done
rm -rf /dev/shm/ck

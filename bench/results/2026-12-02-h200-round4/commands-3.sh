#!/bin/bash
# .dev/ holds what the build machine packed for the call: bin.tar.xz (stripped binaries from
# scripts/gpu/gpu-check.sh --prepare), tok.tar.xz (the set-up script's tokenizers), kjv.txt.xz
# device call 3: --fp8-param-gather on the GPU (scripts/gpu/gpu-fp8-param.sh 1 4 2 3)
set -u
mkdir -p /tmp/o
fin() { cp /tmp/o/summary.txt $OUT/ 2>/dev/null; tar czf $OUT/all.tgz -C /tmp/o . ; }
trap fin EXIT
mkdir -p build-gpu && tar xJf .dev/bin.tar.xz -C build-gpu && rm -rf build-gpu/dev && mv build-gpu/bin build-gpu/dev
T0=$SECONDS
OUT=/tmp/o ITERS=20 timeout 540 bash scripts/gpu/gpu-fp8-param.sh 1 4 2 3 > /tmp/o/run.out 2>&1
echo "rc=$? total $((SECONDS-T0)) s" >> /tmp/o/summary.txt

#!/bin/bash
set -u
O=$OUT
mkdir -p build-gpu out && tar xJf .dev/bin.tar.xz -C build-gpu && mv build-gpu/bin build-gpu/dev && cp .dev/hf-tokenizer.tar.xz build-gpu/dev/
rm -rf .cache && tar xJf .dev/tok.tar.xz && mv cache .cache
source scripts/gpu/gpu-env.sh
export LJPERF_CACHE=$PWD/.cache
d=build-gpu/dev
T0=$SECONDS
echo "== test_ops_cuda check"; ( time timeout 240 $d/test_ops_cuda check ) > $O/ops.log 2>&1; echo "rc=$?"; grep -E 'FAIL|^test_ops_cuda' $O/ops.log | head -20; grep real $O/ops.log
for op in adamw cuda_graph memory; do timeout 90 compute-sanitizer --tool memcheck $d/test_ops_cuda check --quick --op $op > $O/mc_$op.log 2>&1; echo "memcheck $op rc=$? $(grep 'ERROR SUMMARY' $O/mc_$op.log | tail -1) $(tail -1 $O/mc_$op.log)"; done
echo "== greedy: graphs vs eager ($((SECONDS-T0)) s)"
m=(--load llama3.2-1b --load-format dummy --device cuda --max-model-len 2048 --max-num-seqs 64 --max-num-batched-tokens 4096)
for mode in graphs eager; do
  extra=(); [ $mode = eager ] && extra=(--enforce-eager)
  $d/ljperf serve "${m[@]}" "${extra[@]}" --host 127.0.0.1 --port 0 > $O/serve_$mode.log 2>&1 &
  pid=$!
  for i in $(seq 900); do grep -q 'serve: ready' $O/serve_$mode.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' $O/serve_$mode.log)
  python3 - "http://127.0.0.1:$port" > $O/greedy_$mode.txt 2>&1 <<'PY'
import json, sys, urllib.request
for p in ["The capital of France is", "def fibonacci(n):", "Once upon a time", "1, 2, 3, 4,"]:
    body = json.dumps({"prompt": p, "max_tokens": 48, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(sys.argv[1] + "/v1/completions", body, {"Content-Type": "application/json"})
    print(json.dumps(json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["text"]))
PY
  kill -TERM $pid; for i in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; kill -KILL $pid 2>/dev/null
  grep -E 'CUDA graphs' $O/serve_$mode.log
done
n=$(grep -c '^"' $O/greedy_graphs.txt); cmp -s $O/greedy_graphs.txt $O/greedy_eager.txt && echo "greedy: graphs = eager ($n texts)" || { echo "greedy: DIFFER ($n texts)"; head -c 600 $O/greedy_graphs.txt; }
echo "== train --profile, memory snapshot, start record ($((SECONDS-T0)) s)"
timeout 120 $d/ljperf train --model llama3-tiny --mock-data --device cuda --train-iters 6 --seq-length 256 --micro-batch-size 4 \
  --profile --profile-step-start 2 --profile-step-end 4 --record-memory-history --memory-snapshot-path $O/snap.json \
  --log-json $O/train.jsonl > $O/train.log 2>&1; echo "rc=$?"; grep -iE 'profil|snapshot|error' $O/train.log | head -6
head -c 700 $O/train.jsonl; echo; python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('snapshot keys', list(s)[:8], 'peak', s.get('peak_bytes', s.get('peak')))" $O/snap.json
echo "== decoupled lr on the GPU ($((SECONDS-T0)) s)"
for f in "" "--decoupled-lr 3e-4"; do timeout 60 $d/ljperf train --model llama3-tiny --mock-data --device cuda --train-iters 4 --seq-length 128 --lr 3e-4 $f --log-json $O/dlr.jsonl > /dev/null 2>&1; echo "[$f] rc=$? $(grep -o '"loss": [0-9.]*' $O/dlr.jsonl | tr '\n' ' ')"; done
echo "== hf tokenizer ($((SECONDS-T0)) s)"
OUT=$O/hft timeout 150 bash scripts/gpu/hf-tokenizer.sh > $O/hft.log 2>&1; echo "rc=$?"; tail -25 $O/hft.log
echo "total $((SECONDS-T0)) s"

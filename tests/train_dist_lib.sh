# train_dist_lib.sh: what the data-parallel tests (test_train_dist*.sh) share, sourced by each:
# the environment, a small Llama (vocabulary 2,048, two layers; its checkpoints are 3 MiB, so that
# the dozens of saves cost little I/O on a loaded machine) on mock data (the indexed dataset's
# loader and sampler with generated tokens), the common flags, and the comparisons.
#   source train_dist_lib.sh NAME     (NAME: the scratch folder under $LJ_TEST_TMP)
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/$1"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v mpirun >/dev/null 2>&1 || fail "mpirun is missing: run scripts/setup.sh (openmpi-bin)"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LJPERF_DIST_TIMEOUT=120

printf '%s\n' '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 2048,' \
  '"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4,' \
  '"num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 512, "rms_norm_eps": 1e-05,' \
  '"rope_theta": 500000.0, "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}' > "$tmp/small.json"
data=(--model "$tmp/small.json" --mock-data)
common=("${data[@]}" --device cpu --seq-length 32 --micro-batch-size 2
        --global-batch-size 12 --train-iters 4 --lr 3e-3 --lr-warmup-iters 1 --seed 11 --quiet --eval-iters 1)
# mpirun as the tests use it: several CPU ranks on few cores
mpi() { local np=$1; shift; mpirun --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS "$@"; }

compare() { # compare A.jsonl B.jsonl CKPT_A CKPT_B
  python3 - "$@" <<'PY'
import json, os, struct, sys, array, math
def losses(p):
    return {r["iteration"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
common = sorted(set(a) & set(b))
assert common, "no common iterations"
worst = max(abs(a[i] - b[i]) / abs(a[i]) for i in common)
print("  %d losses, worst relative difference %.2e" % (len(common), worst))
assert worst <= 1e-5, "loss sequences differ"
if len(sys.argv) > 4:
    sys.path.insert(0, os.environ["LJ_SOURCE_DIR"] + "/tests")
    import ckpt_state  # either checkpoint format
    x, y = ckpt_state.tensor(sys.argv[3], "master"), ckpt_state.tensor(sys.argv[4], "master")
    num = sum((p - q) ** 2 for p, q in zip(x, y))
    den = sum(p * p for p in x)
    rel = math.sqrt(num / den)
    print("  final weights: relative difference %.2e over %d values" % (rel, len(x)))
    assert rel <= 1e-5, "final weights differ"
PY
}

same_run() { # same_run A B: identical losses and final state files
  cmp -s <(python3 -c 'import json,sys; print([r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r])' "$1.jsonl") \
         <(python3 -c 'import json,sys; print([r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r])' "$2.jsonl") \
    || return 1
  python3 "$LJ_SOURCE_DIR/tests/ckpt_state.py" same "$1/iter_0000004" "$2/iter_0000004"
}

# the one-process run every other run is compared with
"$LJPERF" train "${common[@]}" --save "$tmp/w1" --log-json "$tmp/w1.jsonl" 2>"$tmp/w1.err" || { cat "$tmp/w1.err"; fail "1 rank"; }

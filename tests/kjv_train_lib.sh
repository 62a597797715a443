# kjv_train_lib.sh: what the tests that train llama3-nano on KJV tokens over 1-3 CPU ranks share
# (test_fp8_param.sh, test_bf16_moments.sh, test_fp8_dist.sh), sourced by each:
#   source kjv_train_lib.sh NAME   (NAME: the scratch folder $tmp under $LJ_TEST_TMP)
# It prepares the first 200 kB of the KJV Bible as $tmp/kjv. The test then sets `common` (its
# train flags) and calls run NAME RANKS FLAGS... (ljperf train, logging $tmp/NAME.jsonl) and
# losses FILE (its "iteration loss" lines).
set -euo pipefail
: "${LJPERF:?}" "${LJ_CACHE:?}" "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
tmp="$LJ_TEST_TMP/$1"
rm -rf "$tmp" && mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v mpirun >/dev/null 2>&1 || fail "mpirun is missing: run scripts/setup.sh (openmpi-bin)"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LJPERF_DIST_TIMEOUT=120

head -c 200000 "$LJ_CACHE/data/kjv.txt" >"$tmp/kjv.txt"
"$LJPERF" prepare --input "$tmp/kjv.txt" --split-on blank-line --output-prefix "$tmp/kjv" >/dev/null 2>&1 || fail "prepare"

run() { # run NAME RANKS FLAGS...: ljperf train on RANKS ranks (mpirun beyond one), log NAME.jsonl
  local name=$1 np=$2; shift 2
  local launch=()
  [ "$np" = 1 ] || launch=(mpirun --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS -x LJPERF_DIST_TIMEOUT)
  "${launch[@]}" "$LJPERF" train "${common[@]}" "$@" --log-json "$tmp/$name.jsonl" 2>"$tmp/$name.err" \
    || { cat "$tmp/$name.err"; fail "$name"; }
}
losses() { grep '"loss"' "$1" | sed -E 's/.*"iteration": ([0-9]+), "loss": ([^,]+),.*/\1 \2/'; }

#!/usr/bin/env bash
# test_bad_input.sh: the bad-input suite, one table (tests/bad_input/cases.tsv): each row runs
# `ljperf COMMAND ARGS` and expects its exit status and a fragment of its message on stderr.
#   - Every flag of every command (the flag tables of cli/, as `ljperf COMMAND --list-flags`
#     prints them) needs a row, or a row with exit "-" that says why no bad value exists.
#   - Each message follows one rule: it names the flag (or file) and the value, says what was
#     expected and how to fix it. Checked here: the last line of stderr holds the row's flag or
#     the file named in its arguments, the value given to the flag (its last argument), and one
#     of the words that say what is expected or what to do instead.
#   - A row with a note "refused ..." is a flag refused whatever its value (no value to name).
#   - A row with a note "pending: ..." is run and reported, but its failure does not fail the
#     suite (a refusal another branch adds); a pending row that passes is reported too.
# ARGS is read by bash with these variables: TRAIN, BENCH, PLAN, GEN, REPORT, PREP, SERVE,
# BSERVE, VLTRAIN, VLBENCH, VLPLAN (tiny valid base arguments of each command, the VL ones of its
# Qwen3-VL form; every serve row fails before binding a port,
# every bench serve row before a request or against a closed port), TMP (a scratch directory),
# SRC (the source tree).
# Other bad-input tests stay where they are (test_io_bad.sh, test_megatron_args.sh,
# test_plan_cli.sh, test_state_faults.sh, test_dataset_bad.c): this table covers every flag once.
set -euo pipefail
: "${LJPERF:?}" "${LJ_SOURCE_DIR:?}" "${LJ_TEST_TMP:?}"
SRC=$LJ_SOURCE_DIR
TMP="$LJ_TEST_TMP/bad_input"
rm -rf "$TMP" && mkdir -p "$TMP"
table="$SRC/tests/bad_input/cases.tsv"
printf 'In the beginning.\n\nAnd the earth.\n' > "$TMP/in.txt"
TRAIN="--model llama3-nano --device cpu --mock-data --seq-length 16 --micro-batch-size 1 --train-iters 1 --eval-iters 0 --quiet"
BENCH="--model llama3-nano --device cpu --seq-length 16 --micro-batch-size 1 --train-iters 1 --warmup-iters 0 --no-progress"
PLAN="--model llama3-nano --device cpu --seq-length 16"
GEN="--load $SRC/tests/fixtures/hf/tied --prompt x --device cpu --max-new-tokens 1"
REPORT="$SRC/tests/data/report/run --output $TMP/r.html"
SERVE="--load $SRC/tests/fixtures/hf/tied --device cpu --port 1"
BSERVE="--base-url http://127.0.0.1:9 --tokenizer $SRC/tests/data/gpt2_mini/tokenizer.json --num-prompts 1 --random-input-len 4 --random-output-len 2"
PREP="--input $TMP/in.txt --output-prefix $TMP/prep --tokenizer $SRC/tests/data/gpt2_mini/tokenizer.json"
# the Qwen3-VL forms of train, benchmark and plan (a qwen3-vl-* --model; their flags are not in --list-flags)
VLTRAIN="--model qwen3-vl-tiny --device cpu --seq-length 48 --train-iters 1 --quiet"
VLBENCH="--model qwen3-vl-tiny --device cpu --train-iters 1 --warmup-iters 0 --no-progress"
VLPLAN="--model qwen3-vl-tiny --device cpu"
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. every flag has a row
missing=()
for cmd in prepare train benchmark plan generate report serve "bench serve"; do
  while IFS=$'\t' read -r flag _; do
    awk -F'\t' -v c="$cmd" -v f="$flag" '$1 == c && $2 == f { found = 1 } END { exit !found }' "$table" \
      || missing+=("$cmd $flag")
  done < <(read -ra words <<<"$cmd" && "$LJPERF" "${words[@]}" --list-flags)
done
[ ${#missing[@]} = 0 ] || fail "flags without a row in tests/bad_input/cases.tsv: ${missing[*]}"

# 2. every row
cd "$TMP"
failed=0 pending=0 passed=0 explained=0 now_pass=()
rule='expected|must|one of|presets|e\.g\.|see ljperf|use |give|add |needs|instead|only|remove|run |pass |rerun|not found|no such|cannot'
while IFS=$'\t' read -r cmd flag code frag args note; do
  [[ -z "$cmd" || "$cmd" == \#* ]] && continue
  if [ "$code" = - ]; then explained=$((explained + 1)); continue; fi
  eval "argv=($args)"
  read -ra words <<<"$cmd" # a command of two words: bench serve
  st=0
  timeout 120 "$LJPERF" "${words[@]}" "${argv[@]}" </dev/null >"$TMP/out" 2>"$TMP/err" || st=$?
  eval "want=\"$frag\""
  last=$(grep -v '^warning:' "$TMP/err" | tail -1)
  why=""
  [ "$st" = "$code" ] || why="exit $st, expected $code"
  [ -z "$why" ] && ! grep -qF -- "$want" "$TMP/err" && why="no '$want' in the message"
  if [ -z "$why" ]; then
    named=0
    [[ "$last" == *"$flag"* ]] && named=1
    for a in "${argv[@]}"; do [[ "$a" == /* && "$last" == *"$a"* ]] && named=1; done
    [ "$named" = 1 ] || why="the message names neither $flag nor a file"
    # the value: the argument after the flag, or after its '='
    n=${#argv[@]} value=""
    if [[ "${argv[n-1]}" == "$flag="* ]]; then value=${argv[n-1]#"$flag="}
    elif [ "$n" -ge 2 ] && [ "${argv[n-2]}" = "$flag" ]; then value=${argv[n-1]}; fi
    [ -z "$why" ] && [ -n "$value" ] && [[ "$note" != refused* ]] && [[ "$last" != *"$value"* ]] && why="the message does not name the value '$value'"
    [ -z "$why" ] && ! grep -qiE -- "$rule" <<<"$last" && why="the message does not say what was expected or what to do"
  fi
  if [[ "$note" == pending:* ]]; then
    if [ -n "$why" ]; then pending=$((pending + 1)); else now_pass+=("$cmd $flag"); passed=$((passed + 1)); fi
    continue
  fi
  if [ -n "$why" ]; then
    failed=$((failed + 1))
    echo "FAIL: ljperf $cmd $args: $why; stderr: $(tail -2 "$TMP/err")" >&2
  else
    passed=$((passed + 1))
  fi
done < "$table"
echo "bad input: $passed rows passed, $failed failed, $pending pending (another branch), $explained flags without a bad value"
[ ${#now_pass[@]} = 0 ] || echo "pending rows that pass now (drop their note): ${now_pass[*]}"
[ "$failed" = 0 ] || fail "$failed rows failed"
echo "test_bad_input: passed"

#!/usr/bin/env bash
# run.sh: builds the fuzz targets (tests/fuzz/fuzz_*.c) with clang's libFuzzer, AddressSanitizer
# and UndefinedBehaviorSanitizer, and runs each over its seed inputs (the committed files below)
# for a fixed number of inputs from a fixed seed, so that a run is the same every time.
#   run.sh OUTDIR [RUNS]    RUNS inputs per target (default $LJ_FUZZ_RUNS, else 3000)
# A crash, a sanitizer report, an input slower than 10 s or a process above 2 GiB fails the run;
# libFuzzer writes the input that did it to OUTDIR/<name>/ (crash-*, timeout-*, oom-*): replay it
# with OUTDIR/fuzz_<name> FILE. LJ_FUZZ_TARGETS="report config" limits the targets. For a longer
# search: run.sh OUTDIR 1000000 (the corpus grows in OUTDIR only).
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: run.sh OUTDIR [RUNS]}
runs=${2:-${LJ_FUZZ_RUNS:-3000}}
targets=${LJ_FUZZ_TARGETS:-report megatron tensorboard config tokenizer serve_api}
cc=${LJ_FUZZ_CC:-clang}
command -v "$cc" >/dev/null || { echo "run.sh: $cc is not installed: run scripts/setup.sh" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
# the TensorBoard Event proto, compiled as CMake does (the report's reader decodes it)
gen="$out/generated"
mkdir -p "$gen"
command -v protoc-c >/dev/null || { echo "run.sh: protoc-c is not installed: run scripts/setup.sh" >&2; exit 1; }
protoc-c --proto_path="$src" --c_out="$gen" "$src/metrics/tensorboard_event.proto"
flags=(-std=gnu11 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -I"$src" -I"$gen")
base=("$src"/base/*.c)
report_units="$src/bench/report.c $src/bench/report_read.c $src/metrics/tensorboard.c $gen/metrics/tensorboard_event.pb-c.c"
declare -A units=([report]="$report_units" [megatron]="$report_units" [tensorboard]="$report_units"
                  [config]="$src/config/config.c" [tokenizer]="$src/data/tokenizer.c"
                  [serve_api]="$src/serve/api.c $src/serve/chat_template.c $src/serve/sampling.c $src/data/tokenizer.c")
for t in $targets; do
  # shellcheck disable=SC2046,SC2086
  "$cc" "${flags[@]}" -o "$out/fuzz_$t" "$src/tests/fuzz/fuzz_$t.c" ${units[$t]} "${base[@]}" \
    $(pkg-config --cflags --libs libcjson libpcre2-8 libutf8proc libxxhash libprotobuf-c libisal) -lm -lpthread
done
# the seeds: what ljperf writes and reads, the report's odd inputs, a Megatron-LM log, an event file
declare -A seeds=(
  [report]="$src/tests/data/report/run/* $src/tests/data/report/edge/* $src/tests/data/report/compare/*
            $src/tests/data/report/tb/*"
  [megatron]="$src/tests/data/report/compare/megatron.log"
  [tensorboard]="$src/tests/data/report/tb/*"
  [config]="$src/tests/fixtures/hf/tied/config.json $src/tests/fixtures/hf-qwen/qwen3/config.json"
  [tokenizer]="$src/tests/data/gpt2_mini/tokenizer.json"
  [serve_api]="$src/tests/data/serve_fuzz/*"
)
# the server's target: the committed tokenizer, the set-up script's Llama 3 chat template if there
export LJ_SOURCE_DIR=$src
cache=${LJ_CACHE:-${LJPERF_CACHE:-$src/.cache}}
[ -f "$cache/tokenizer/llama3/tokenizer_config.json" ] && export LJ_FUZZ_CHAT_TEMPLATE="$cache/tokenizer/llama3/tokenizer_config.json"
status=0
for t in $targets; do
  rm -rf "$out/$t" && mkdir -p "$out/$t/corpus"
  i=0
  for f in ${seeds[$t]}; do cp "$f" "$out/$t/corpus/seed$((i++))"; done
  # -seed: the same mutations every run
  if ! (cd "$out/$t" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 TMPDIR="$out/$t" \
        "$out/fuzz_$t" -seed=1 -runs="$runs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 corpus \
        >"$out/$t.log" 2>&1); then
    echo "fuzz_$t: FAILED (the input is in $out/$t/, the log $out/$t.log):" >&2
    tail -40 "$out/$t.log" >&2
    status=1
  else
    echo "fuzz_$t: $runs inputs, $(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$out/$t.log" | tail -1), no failure"
  fi
done
exit $status

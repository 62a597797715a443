#!/bin/bash
# test_io_bad.sh: runs the io/ tests (safetensors, HF import/export, training checkpoints; the
# test_bad_* cases feed truncated files, lying headers, wrong shapes and dtypes, missing
# tensors and configs) under valgrind: any invalid memory access, use of uninitialised
# memory or definite leak fails the test.
# The binaries are compiled here, without -march=native (the Release build's AVX-512 code is
# not understood by valgrind 3.19) and from only the files io/ needs: base/, config/config.c,
# io/. LJ_TEST_FILTER (a cmocka pattern such as '*bad*') narrows the cases.
set -euo pipefail

: "${LJ_TEST_TMP:?LJ_TEST_TMP must be set (CTest sets it)}"
src="${LJ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
out="$LJ_TEST_TMP/io_valgrind"
mkdir -p "$out"

for tool in valgrind cc pkg-config; do
    if ! command -v "$tool" >/dev/null; then
        echo "test_io_bad: $tool is not installed (scripts/setup.sh installs it)" >&2
        exit 1
    fi
done

flags=(-std=gnu11 -O1 -g -I"$src" $(pkg-config --cflags libcjson libxxhash cmocka))
libs=($(pkg-config --libs libcjson libxxhash cmocka) -lm)
lib_srcs=("$src"/base/*.c "$src/config/config.c" "$src/io/safetensors.c" "$src/io/hf.c" "$src/checkpoint/checkpoint.c"
          "$src/checkpoint/sharded.c")

status=0
for name in test_safetensors test_hf_io test_checkpoint; do
    exe="$out/$name"
    if ! cc "${flags[@]}" "${lib_srcs[@]}" "$src/tests/$name.c" -o "$exe" "${libs[@]}" 2>"$out/$name.cc.log"; then
        echo "FAILED: cannot compile $name for valgrind:" >&2
        cat "$out/$name.cc.log" >&2
        status=1
        continue
    fi
    log="$out/$name.valgrind.log"
    if valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect \
        --log-file="$log" "$exe" >"$out/$name.out" 2>&1; then
        echo "ok: $name under valgrind ($(grep -c '^\[       OK \]' "$out/$name.out") cases)"
    else
        rc=$?
        echo "FAILED: $name under valgrind (exit $rc)" >&2
        tail -n 40 "$out/$name.out" >&2
        grep -v '^==[0-9]*== *$' "$log" | head -n 60 >&2
        status=1
    fi
done
exit $status

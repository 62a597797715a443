#!/usr/bin/env bash
# test_fuzz.sh: the fuzz targets of tests/fuzz/ (the report's reader and charts, its Megatron-LM
# log and TensorBoard parsers, config.json, tokenizer.json, the server's request bodies through
# serve/api.c and the chat template) built with libFuzzer and the address
# and undefined-behaviour sanitizers, each run over a fixed number of inputs from a fixed seed
# (tests/fuzz/run.sh): no crash, sanitizer report, hang or runaway memory. amd64 only (clang's
# libFuzzer runtime of the CI machine), not under the emulator. LJ_FUZZ_RUNS sets the inputs per
# target.
set -euo pipefail
: "${LJ_TEST_TMP:?}" "${LJ_SOURCE_DIR:?}"
if [ "$(uname -m)" != x86_64 ] || [ -n "${LJ_TEST_EMULATOR:-}" ]; then
  echo "test_fuzz: amd64 hosts only; skipped"
  exit 77
fi
bash "$LJ_SOURCE_DIR/tests/fuzz/run.sh" "$LJ_TEST_TMP/fuzz" "${LJ_FUZZ_RUNS:-3000}"
echo "test_fuzz: passed"

/* test_ops_cuda.c: the op harness on the CUDA backend (GPU only: built whenever CUDA is, run by
 * scripts/gpu/gpu-check.sh, never by CTest): `check` compares every CUDA op with the CPU backend's on
 * the same inputs, with both gradient dtypes; `perf` times the hot ops at the benchmark shapes
 * against the card's ceilings. Cases: op_cases.c. */
#include "tests/ops/op_cases.h"

int main(int argc, char **argv) { return lj_op_cases_main(argc, argv, "test_ops_cuda", "cuda"); }

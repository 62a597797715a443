/* test_ops.c: the op harness on the CPU backend (run by CTest as `test_ops check` and
 * `test_ops grad`): every CPU op against double-precision references, every backward against
 * finite differences, and the CPU backend's building blocks. Cases: op_cases.c. */
#include "tests/ops/op_cases.h"

int main(int argc, char **argv) { return lj_op_cases_main(argc, argv, "test_ops", "cpu"); }

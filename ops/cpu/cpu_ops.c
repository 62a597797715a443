/* cpu_ops.c: placeholder until the CPU backend lands. */
#include "ops/ops.h"

const lj_ops *lj_ops_cpu(void) { return NULL; }

/* ops.c: allocation accounting shared by the backends. */
#include "ops/ops.h"

#include <stdatomic.h>

static _Atomic int64_t g_allocated;

void lj_ops_track(int64_t bytes) { atomic_fetch_add(&g_allocated, bytes); }

size_t lj_ops_allocated_bytes(void) { return (size_t)atomic_load(&g_allocated); }

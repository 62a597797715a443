/* profile.cu: the CUDA backend's profiling entries (ops.h): NVTX ranges on the host thread and the
 * CUDA profiler's capture range, for `nsys profile --trace=nvtx,... --capture-range=cudaProfilerApi`.
 * NVTX 3 is header-only: without a tool attached (no NVTX_INJECTION64_PATH, which nsys sets) a
 * push or pop returns at once. */
#include "ops/cuda/cuda_common.h"

#include <cuda_profiler_api.h>
#include <nvtx3/nvToolsExt.h>

extern "C" void lj_cuda_range_push(const char *name) { nvtxRangePushA(name); }

extern "C" void lj_cuda_range_pop(void) { nvtxRangePop(); }

static lj_status profiler_call(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return LJ_OK;
    (void)cudaGetLastError(); /* not sticky: the run goes on */
    return lj_fail(LJ_ERR_DEVICE, "%s failed: %s", what, cudaGetErrorString(e));
}

extern "C" lj_status lj_cuda_profiler_start(void) { return profiler_call(cudaProfilerStart(), "cudaProfilerStart"); }

extern "C" lj_status lj_cuda_profiler_stop(void) { return profiler_call(cudaProfilerStop(), "cudaProfilerStop"); }

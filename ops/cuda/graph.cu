/* graph.cu: CUDA graph capture and replay of the ops issued on the backend's stream. */
#include "ops/cuda/cuda_common.h"

extern "C" lj_status lj_cuda_graph_capture_begin(void) {
    cudaError_t e = cudaStreamBeginCapture(lj_cuda_stream(), cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "cudaStreamBeginCapture failed: %s", cudaGetErrorString(e));
    return LJ_OK;
}

extern "C" lj_status lj_cuda_graph_capture_end(void **graph) {
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(lj_cuda_stream(), &g);
    if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "cudaStreamEndCapture failed: %s", cudaGetErrorString(e));
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return lj_fail(LJ_ERR_DEVICE, "cudaGraphInstantiate failed: %s", cudaGetErrorString(e));
    *graph = (void *)exec;
    return LJ_OK;
}

extern "C" void lj_cuda_graph_launch(void *graph) {
    LJ_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, lj_cuda_stream()), "cudaGraphLaunch");
}

extern "C" void lj_cuda_graph_destroy(void *graph) {
    if (graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

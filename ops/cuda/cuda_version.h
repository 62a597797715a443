/* cuda_version.h: the CUDA toolkit versions the CUDA backend builds against, and the compile-time
 * switches for what a newer toolkit adds.
 *
 * Supported: CUDA 12.8 and newer (13.0 is the tested toolkit); sm_90a (H100, H200, GH200) on
 * amd64 and aarch64 hosts. Every API newer than 12.8 is used only behind one of the macros
 * below, so a 12.8 toolkit still builds the backend with that feature off; the code that uses
 * the feature says at run time when the build lacks it.
 *
 *   LJ_CUDART_AT_LEAST(major, minor)  the CUDA runtime's headers are at least major.minor
 *                                     (CUDART_VERSION = 1000 * major + 10 * minor)
 *   LJ_CUBLAS_AT_LEAST(major, minor)  cuBLAS / cuBLASLt's headers are at least major.minor
 *                                     (CUBLAS_VERSION = 10000 * major + 100 * minor + patch)
 *
 * Features so switched:
 *   LJ_CUDA_HAVE_FP8_BLOCK_SCALING  cuBLASLt's block-scaled FP8 GEMM on Hopper (1x128 and
 *                                   128x128 scales, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F and
 *                                   _BLK128x128_32F; the per-row/column _OUTER_VEC_32F came to
 *                                   sm_90 in the same release): cuBLAS 12.9. Without it only the
 *                                   per-tensor scales of the delayed and tensor-wise recipes
 *                                   (CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER, older than 12.8)
 *                                   are there.
 *
 * Plain C: host code includes it too. */
#ifndef LJ_CUDA_VERSION_H
#define LJ_CUDA_VERSION_H

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#if !defined(CUDART_VERSION) || CUDART_VERSION < 12080
#error "ljperf's CUDA backend needs the CUDA toolkit 12.8 or newer (CUDART_VERSION below 12080)"
#endif
#if !defined(CUBLAS_VERSION) || CUBLAS_VERSION < 120800
#error "ljperf's CUDA backend needs cuBLAS 12.8 or newer (CUBLAS_VERSION below 120800)"
#endif

#define LJ_CUDART_AT_LEAST(major, minor) (CUDART_VERSION >= (major) * 1000 + (minor) * 10)
#define LJ_CUBLAS_AT_LEAST(major, minor) (CUBLAS_VERSION >= (major) * 10000 + (minor) * 100)

#define LJ_CUDA_HAVE_FP8_BLOCK_SCALING LJ_CUBLAS_AT_LEAST(12, 9)

#endif

/* ops_config.h: the run's backend configuration (ops/ops.h lj_ops_config) from its flags and
 * the environment: the one place that reads the environment variables behind the op table's
 * configuration, for every program that opens a table (the CLI's subcommands, the op harness,
 * the kernel lab, the GPU fixtures). The backends read none. */
#ifndef LJ_TRAIN_OPS_CONFIG_H
#define LJ_TRAIN_OPS_CONFIG_H

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* *cfg = LJ_OPS_CONFIG_DEFAULT with
 *   deterministic  `deterministic` (--deterministic-mode) or LJ_CUDA_DETERMINISTIC=1;
 *   attention      LJ_ATTENTION_FLASH for LJ_CUDA_ATTENTION=own (the own flash kernels, no cuDNN),
 *                  LJ_ATTENTION_SIMPLE for LJ_CUDA_ATTENTION=simple (the fp32 reference kernels);
 *   debug_sync     LJ_CUDA_DEBUG set and not "0" (a synchronisation after every kernel launch);
 *   cudnn_library  LJ_CUDNN_LIBRARY (the path of libcudnn_graph.so.9), when set;
 *   device         the local rank (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID): a
 *                  data-parallel rank uses the GPU of its local rank.
 * The strings point into the environment (valid while it is not changed). */
void lj_ops_config_from_env(int deterministic, lj_ops_config *cfg);

#ifdef __cplusplus
}
#endif

#endif

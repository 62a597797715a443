/* ops_config.c: the run's backend configuration from its flags and the environment. */
#include "train/ops_config.h"

#include <stdlib.h>
#include <string.h>

void lj_ops_config_from_env(int deterministic, lj_ops_config *cfg) {
    *cfg = LJ_OPS_CONFIG_DEFAULT;
    const char *det = getenv("LJ_CUDA_DETERMINISTIC");
    cfg->deterministic = deterministic || (det && strcmp(det, "1") == 0);
    const char *att = getenv("LJ_CUDA_ATTENTION");
    if (att && strcmp(att, "simple") == 0) cfg->attention = LJ_ATTENTION_SIMPLE;
    else if (att && strcmp(att, "own") == 0) cfg->attention = LJ_ATTENTION_FLASH;
    const char *dbg = getenv("LJ_CUDA_DEBUG");
    cfg->debug_sync = dbg && dbg[0] && strcmp(dbg, "0") != 0;
    const char *lib = getenv("LJ_CUDNN_LIBRARY");
    cfg->cudnn_library = lib && lib[0] ? lib : NULL;
    const char *local = getenv("LOCAL_RANK");
    if (!local) local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!local) local = getenv("SLURM_LOCALID");
    if (local && atoi(local) >= 0) cfg->device = atoi(local);
}

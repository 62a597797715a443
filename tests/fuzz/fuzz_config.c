/* fuzz_config.c: libFuzzer target of the model configuration reader: any bytes as an HF
 * config.json, loaded and validated. */
#include "config/config.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *in = lj_fuzz_write("config.json", data, size);
    lj_model_config cfg;
    if (lj_config_load(in, &cfg) == LJ_OK) (void)lj_config_validate(&cfg, in);
    return 0;
}

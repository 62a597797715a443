/* fp8.c: the names of the FP8 formats (fp8.h holds the conversions, shared with CUDA). */
#include "base/fp8.h"

const char *lj_fp8_format_name(lj_fp8_format f) { return f == LJ_FP8_E4M3 ? "e4m3" : "e5m2"; }

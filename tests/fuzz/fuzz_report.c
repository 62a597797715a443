/* fuzz_report.c: libFuzzer target of `ljperf report`'s reading and drawing: any bytes as a
 * file of the run directory (a training log, plan, benchmark or ablation JSON), then the page.
 * A refused input is fine; a crash, a sanitizer report, a hang or unbounded memory is not. */
#include "bench/report.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *in = lj_fuzz_write("input.jsonl", data, size);
    lj_report_data d;
    lj_report_init(&d);
    const char *kind = NULL;
    if (lj_report_add_file(&d, in, &kind) == LJ_OK && lj_report_num_charts(&d) > 0)
        (void)lj_report_write_html(&d, "fuzz", lj_fuzz_path("report.html"));
    lj_report_free(&d);
    return 0;
}

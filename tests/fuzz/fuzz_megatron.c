/* fuzz_megatron.c: libFuzzer target of `ljperf report`'s Megatron-LM console log parser: any
 * bytes as a log (its arguments block, iteration and validation lines), then the page drawn from
 * what it read. A refused input is fine; a crash, a sanitizer report, a hang or unbounded memory
 * is not. */
#include "bench/report.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *out = lj_fuzz_path("report.html");
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    lj_report_data d;
    lj_report_init(&d);
    lj_status s = lj_report_begin_run(&d);
    if (s == LJ_OK && lj_report_parse_megatron(&d.runs[0], "fuzz.log", text, &s) && s == LJ_OK) {
        lj_report_label_runs(&d);
        if (lj_report_num_charts(&d) > 0) (void)lj_report_write_html(&d, "fuzz", out);
    }
    lj_report_free(&d);
    free(text);
    return 0;
}

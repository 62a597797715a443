/* fuzz_tensorboard.c: libFuzzer target of `ljperf report`'s TensorBoard reader (lj_tb_read, the
 * tags and text summaries it draws): any bytes as an event file, read twice: as they are (the
 * framing: lengths, CRCs, a last record cut short), and with every record's two CRCs rewritten
 * to match, so that mutated Event bytes reach the protocol-buffer decoding and the values. A
 * refused input is fine; a crash, a sanitizer report, a hang or unbounded memory is not. */
#include "bench/report.h"
#include "fuzz_common.h"
#include "metrics/tensorboard.h"

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void read_events(const uint8_t *data, size_t size) {
    lj_report_data d;
    lj_report_init(&d);
    lj_status s = lj_report_begin_run(&d);
    if (s == LJ_OK && lj_report_parse_tensorboard(&d.runs[0], "fuzz.tfevents", data, size, &s) && s == LJ_OK) {
        lj_report_label_runs(&d);
        if (lj_report_num_charts(&d) > 0) (void)lj_report_write_html(&d, "fuzz", lj_fuzz_path("report.html"));
    }
    lj_report_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)lj_fuzz_path("report.html"); /* the private directory, and quiet messages */
    read_events(data, size);
    uint8_t *fixed = malloc(size ? size : 1);
    if (!fixed) return 0;
    memcpy(fixed, data, size);
    for (size_t off = 0; size - off >= 16;) {
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)fixed[off + i] << (8 * i);
        if (len > size - off - 16) break;
        put_u32(fixed + off + 8, lj_tb_mask_crc(lj_tb_crc32c(fixed + off, 8)));
        put_u32(fixed + off + 12 + len, lj_tb_mask_crc(lj_tb_crc32c(fixed + off + 12, (size_t)len)));
        off += 16 + (size_t)len;
    }
    read_events(fixed, size);
    free(fixed);
    return 0;
}

/* tensorboard.h: TensorBoard event files (`events.out.tfevents.*`), the format that
 * TensorBoard, Megatron-LM's --tensorboard-dir and `wandb sync --sync-tensorboard` read.
 *
 * A file is a sequence of TFRecord records; each record is
 *     u64 length (little-endian) | u32 masked CRC32C of those 8 bytes | data | u32 masked CRC32C of data
 * where CRC32C is the Castagnoli CRC (reflected polynomial 0x82F63B78; "123456789" gives
 * 0xE3069283) and masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 mod 2^32. The data is an
 * `Event` protocol buffer (metrics/tensorboard_event.proto, TensorBoard's field numbers),
 * encoded with protobuf-c; the first record holds file_version "brain.Event:2", every other one
 * a Summary with one scalar (tag, simple_value) at a step. Sources: TensorFlow's record writer
 * (tensorflow/core/lib/io/record_writer.cc, crc32c.h), TensorBoard's event.proto and
 * summary.proto. CRC32C comes from Intel's ISA-L (crc32_iscsi).
 *
 * The writer buffers encoded records in memory; lj_tb_writer_flush writes them with one write
 * and hands them to the OS, so a TensorBoard watching the directory sees them. Adding a scalar
 * costs an encode into the buffer and no system call.
 */
#ifndef LJ_TENSORBOARD_H
#define LJ_TENSORBOARD_H

#include "base/base.h"

typedef struct lj_tb_writer lj_tb_writer;

/* The TensorBoard file_version of every file ljperf writes. */
#define LJ_TB_FILE_VERSION "brain.Event:2"

/* Opens a new event file in `dir`, creating the directory and its parents:
 * DIR/events.out.tfevents.<10-digit Unix time>.<host>.<pid>.<n> (n: the first number whose
 * file does not exist yet; a file is never overwritten). Writes and flushes the file_version
 * record, so that an unwritable directory fails here. `max_queue`: records kept in memory
 * before they are written without a flush (Megatron-LM's --tensorboard-queue-size; <= 0: 1000).
 * Errors: LJ_ERR_IO naming `flag` (e.g. "--tensorboard-dir"), the directory or file, and why. */
lj_status lj_tb_writer_open(lj_tb_writer **out, const char *dir, int max_queue, const char *flag);

/* Appends the scalar `value` (written as a 32-bit float, TensorBoard's simple_value) under
 * `tag` at `step`, with the current wall-clock time. Buffered; a full queue is written out.
 * Errors: LJ_ERR_IO from that write (the record stays unwritten). */
lj_status lj_tb_writer_add_scalar(lj_tb_writer *w, const char *tag, double value, int64_t step);

/* Writes the buffered records and flushes them to the OS (fflush; no fsync).
 * Errors: LJ_ERR_IO naming the file and the reason (a full disk, a removed directory). */
lj_status lj_tb_writer_flush(lj_tb_writer *w);

/* Flushes, closes and frees the writer (NULL is a no-op). Errors: as lj_tb_writer_flush; the
 * writer is freed either way. */
lj_status lj_tb_writer_close(lj_tb_writer *w);

/* The path of the event file being written. */
const char *lj_tb_writer_path(const lj_tb_writer *w);

/* Records written to the file so far (the file_version record included) and bytes written. */
int64_t lj_tb_writer_records(const lj_tb_writer *w);
int64_t lj_tb_writer_bytes(const lj_tb_writer *w);

/* ---- reading (ljperf report) ---- */

/* One value of an event file, as lj_tb_read hands it over. */
typedef struct {
    const char *tag;
    int64_t step;        /* the Event's step (0 when absent) */
    double wall_time;    /* seconds since the epoch; NAN when absent */
    int is_text;         /* 0: a scalar in `value`; 1: a text summary in `text` */
    double value;        /* simple_value, or the one element of a float or double tensor */
    const char *text;    /* the text summary's first string, NUL-terminated (only during the call) */
} lj_tb_value;

/* Called for each value in file order; a status other than LJ_OK stops the reading with it. */
typedef lj_status (*lj_tb_value_fn)(void *ctx, const lj_tb_value *v);

typedef struct {
    int64_t records;          /* whole records read (the file_version record included) */
    double first_wall_time;   /* the first Event's wall_time; NAN when none has one */
    char file_version[32];    /* the file_version record's text, "" when there is none */
    int64_t truncated_at;     /* -1, or the offset of a last record that the data ends inside */
} lj_tb_read_info;

/* Whether data[0..size) starts as an event file: 12 bytes or more, the last 4 of the first 12
 * the masked CRC32C of the first 8 (a record's length). */
int lj_tb_is_event_data(const void *data, size_t size);

/* Reads the event file data[0..size) (named `name` in messages): checks each record's framing
 * and both CRCs, decodes each Event and calls fn for every scalar (simple_value, or a float or
 * double tensor of one element: TensorFlow 2's form) and every text summary (a string tensor:
 * SummaryWriter.add_text, Megatron-LM's arguments) in order. Values of other kinds (images,
 * histograms) are skipped. A last record that the data ends inside (a file being written, or
 * cut by a failed write) ends the reading without error: info->truncated_at is its offset.
 * Errors: LJ_ERR_FORMAT naming `name` and the record's byte offset: a length or data CRC that
 * does not match, data that is not an Event; fn's status. */
lj_status lj_tb_read(const void *data, size_t size, const char *name, lj_tb_value_fn fn, void *ctx,
                     lj_tb_read_info *info);

/* CRC32C (Castagnoli) of `size` bytes, and the TFRecord mask of a CRC (see the top). */
uint32_t lj_tb_crc32c(const void *data, size_t size);
uint32_t lj_tb_mask_crc(uint32_t crc);

#endif

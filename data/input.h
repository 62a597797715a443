/* input.h: opening `ljperf prepare`'s input files, compressed or not, as a plain stdio stream:
 * NAME.gz is read through zlib (gzip, concatenated members too), NAME.zst through libzstd's
 * streaming decompressor (one or more frames), anything else as it is. The format of the
 * text inside is decided on NAME without the compression suffix (corpus.jsonl.zst is JSON
 * lines). Sources: RFC 1952 (gzip), RFC 8878 (Zstandard). */
#ifndef LJ_INPUT_H
#define LJ_INPUT_H

#include "base/base.h"

typedef enum { LJ_INPUT_PLAIN = 0, LJ_INPUT_GZIP, LJ_INPUT_ZSTD } lj_input_compression;

/* The compression `path` names by its suffix (.gz, .zst). */
lj_input_compression lj_input_compression_of(const char *path);

/* Bytes of `path` without its compression suffix ("a.jsonl.gz" -> 6: "a.jsonl"). */
size_t lj_input_base_len(const char *path);

/* Opens `path` for reading, decompressing as it is read. fclose closes everything. A read that
 * meets corrupt or truncated compressed data fails (ferror) with the reason in `err` (err_len
 * bytes, owned by the caller and kept until fclose; "" until then). Returns NULL with errno set
 * when the file cannot be opened. */
FILE *lj_input_open(const char *path, char *err, size_t err_len);

#endif

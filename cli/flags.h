/* flags.h: the one argument parser of every subcommand: a table with one row per flag, read
 * with the syntax of Python's argparse (so that a Megatron-LM or DeepSpeed launch line reads the
 * same here):
 *   --flag value      the next argument is the value, unless it looks like a flag (starts with
 *                     '-' and is neither "-" nor a negative number);
 *   --flag=value      the value after the first '=' (any text, even one starting with '-');
 *   --flag v1 v2 ...  a list flag (argparse nargs='+') takes values up to the next flag;
 *   -h, --help        sets the result's `help` and stops;
 *   --                every argument after it is positional.
 * A flag given twice keeps the last value (argparse's "store"), except LJ_FLAG_FUNC rows, which
 * see every occurrence (argparse's "append"). Names are matched exactly: no unambiguous-prefix
 * abbreviations, as in Megatron-LM (whose parser sets allow_abbrev=False), so a typo is an
 * error instead of another flag. Unknown flags are one error naming all of them, each with the
 * closest known name where one is near ("did you mean"), as argparse reports them; the values
 * that follow an unknown flag are taken as its own. torchrun's `--nproc_per_node`, `--node_rank`,
 * `--master_addr` and `--master_port` are read as their dashed forms.
 *
 * Adding a flag is adding a row: {"--name", LJ_FLAG_INT, &dest}. Rows of kind LJ_FLAG_IGNORED
 * are accepted and collected with their reason (lj_flags_log_ignored prints them once at
 * start-up); rows of kind LJ_FLAG_REFUSED stop the run with the row's reason. Every flag that takes
 * a byte count is an LJ_FLAG_SIZE row and every flag that takes a throughput an LJ_FLAG_RATE row,
 * with their range: NaN, infinite, negative, zero (where it means nothing) and out-of-range
 * values are refused by name. `ljperf <cmd> --list-flags` prints the table and exits (hidden). */
#ifndef LJ_CLI_FLAGS_H
#define LJ_CLI_FLAGS_H

#include <stdint.h>
#include <stdio.h>

#include "base/base.h"

typedef enum {
    LJ_FLAG_SECTION = 0, /* no flag: `help` is a heading of the generated help */
    LJ_FLAG_SWITCH,      /* no value: *(int *)dest = ival */
    LJ_FLAG_STR,         /* *(const char **)dest */
    LJ_FLAG_INT,         /* *(int *)dest, within the row's [min, max] (min 0 unless the row says otherwise,
                            max 0: INT_MAX): no flag takes a negative value unless its row sets a negative
                            min, so a negative "not given" value in dest cannot come from the command line */
    LJ_FLAG_I64,         /* *(int64_t *)dest, >= 0 */
    LJ_FLAG_U64,         /* *(uint64_t *)dest */
    LJ_FLAG_DOUBLE,      /* *(double *)dest */
    LJ_FLAG_FLOAT,       /* *(float *)dest */
    LJ_FLAG_LIST,        /* one or more values: *(lj_flag_list *)dest */
    LJ_FLAG_FUNC,        /* one value, handed to fn(dest, flag, value) at each occurrence */
    LJ_FLAG_IGNORED,     /* accepted and listed with `help` as the reason; ival values: 0, 1 or -1 (one or more) */
    LJ_FLAG_REFUSED,     /* an error: "<flag>: <help>"; ival values as for LJ_FLAG_IGNORED */
    LJ_FLAG_SIZE,        /* a byte count ("80GiB"; ival LJ_FLAG_PERCENT_OK: also "5%"), checked by
                            lj_flags_parse_size against the row's range: *(const char **)dest = the
                            checked text (read it with lj_flags_parse_size) */
    LJ_FLAG_RATE,        /* a throughput in the unit `help` names ("800"), checked by lj_flags_parse_rate
                            against the row's range: *(double *)dest */
} lj_flag_kind;

/* ival bits of LJ_FLAG_SIZE and LJ_FLAG_RATE rows. Without LJ_FLAG_ZERO_OK a value must be above 0. */
enum { LJ_FLAG_ZERO_OK = 1, LJ_FLAG_PERCENT_OK = 2 };

#define LJ_FLAG_SIZE_MAX 1152921504606846976.0 /* 1 EiB: the default largest LJ_FLAG_SIZE value */
#define LJ_FLAG_RATE_MAX 1e9                   /* the default largest LJ_FLAG_RATE value */

/* The values of a list flag: pointers into argv (for "--flag=v" argv[i] is moved to point at v). */
typedef struct {
    int count;
    char **values;
} lj_flag_list;

typedef struct {
    const char *name;  /* "--seq-length" (or "-q"); NULL for LJ_FLAG_SECTION */
    lj_flag_kind kind;
    void *dest;        /* where the value goes (see the kinds); NULL for IGNORED / REFUSED */
    int ival;          /* SWITCH: the value stored; IGNORED / REFUSED: how many values the flag takes;
                          SIZE / RATE: LJ_FLAG_ZERO_OK, LJ_FLAG_PERCENT_OK */
    const char *help;  /* the value's form and meaning; for IGNORED / REFUSED the reason */
    int *given;        /* optional: set to 1 when the flag is given */
    lj_status (*fn)(void *dest, const char *flag, const char *value); /* LJ_FLAG_FUNC */
    double min, max;   /* INT, SIZE, RATE: the range (the integer, bytes, or the rate's unit); max 0: INT_MAX,
                          LJ_FLAG_SIZE_MAX, LJ_FLAG_RATE_MAX */
} lj_flag;

#define LJ_FLAGS_MAX_IGNORED 128

typedef struct {
    int help;                                /* -h or --help was given */
    int num_positional;
    char **positional;                       /* [num_positional] (malloc'd; lj_flags_result_free) */
    int num_ignored;
    const lj_flag *ignored[LJ_FLAGS_MAX_IGNORED]; /* the ignored rows given, each once, in order */
} lj_flags_result;

/* Parses argv[0..argc) against the rows (`n` of them). `cmd` names the command in messages
 * ("see ljperf train --help"); `max_positional` is how many positional arguments it takes.
 * Errors: LJ_ERR_ARG naming the flag: an unknown flag, a missing value ("--lr needs a value"),
 * a value that does not parse ("--seq-length: 'abc' is not an integer"), an integer out of its row's
 * range ("--train-iters -1: expected >= 0 (leave the flag out for its default)"), a value given to a
 * switch ("--bf16 takes no value"), a refused flag ("--fp16: <reason>"), too many positional
 * arguments. A name appearing in two rows is a programmer error (LJ_ASSERT). */
lj_status lj_flags_parse(const char *cmd, const lj_flag *rows, int n, int argc, char **argv, int max_positional,
                         lj_flags_result *res);
void lj_flags_result_free(lj_flags_result *res);

/* Logs the ignored flags of `res`, one line each with its reason, under one heading line
 * ("<cmd>: N arguments accepted and ignored:"); nothing when there are none. */
void lj_flags_log_ignored(const char *cmd, const lj_flags_result *res);

/* Prints the rows as help: sections as headings, then "  --name VALUE-HELP" lines; IGNORED and
 * REFUSED rows are marked "(ignored: reason)" / "(refused: reason)". */
void lj_flags_print_help(FILE *f, const lj_flag *rows, int n);

/* The value of `name` in argv as lj_flags_parse would read it ("--name v" or "--name=v"; the
 * last wins), or NULL when absent. For the few flags read before the whole parse
 * (--nproc-per-node, --device in the launcher). */
const char *lj_flags_peek(int argc, char **argv, const char *name);

/* Parses `text` as the value of the LJ_FLAG_SIZE row `r`: a finite byte count with a unit
 * (lj_parse_bytes: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB; no unit: bytes) within [r->min, r->max],
 * above 0 unless r->ival has LJ_FLAG_ZERO_OK; with LJ_FLAG_PERCENT_OK also "P%" for 0 <= P < 100.
 * *bytes is the count, *percent -1; or for "P%" *percent is P and *bytes 0 (`percent` may be NULL
 * for a row without LJ_FLAG_PERCENT_OK). Errors: LJ_ERR_ARG naming the flag and the value, what was
 * expected and an example ("--device-memory: 'nanGiB' is not a byte count: expected ..."). */
lj_status lj_flags_parse_size(const lj_flag *r, const char *text, uint64_t *bytes, double *percent);

/* Parses `text` as the value of the LJ_FLAG_RATE row `r`: a finite number within [r->min,
 * r->max], above 0 unless r->ival has LJ_FLAG_ZERO_OK. Errors: LJ_ERR_ARG as lj_flags_parse_size. */
lj_status lj_flags_parse_rate(const lj_flag *r, const char *text, double *value);

/* Prints the rows of a table, one line each: "NAME<TAB>KIND<TAB>VALUES" (KIND: switch, str, int,
 * i64, u64, double, float, list, func, ignored, refused, size, rate; VALUES: how many values it
 * takes, -1 for one or more). For `ljperf <cmd> --list-flags` (hidden: tests enumerate every flag
 * of every command with it). */
void lj_flags_print_list(FILE *f, const lj_flag *rows, int n);

/* Parses `text` as the integer value of `flag`. Errors: LJ_ERR_ARG ("--x: 'abc' is not an integer"). */
lj_status lj_flags_parse_int(const char *flag, const char *text, int *out);

#endif

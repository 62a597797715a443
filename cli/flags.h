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
 * that follow an unknown flag are taken as its own. torchrun's `--nproc_per_node` is read as
 * `--nproc-per-node`.
 *
 * Adding a flag is adding a row: {"--name", LJ_FLAG_INT, &dest}. Rows of kind LJ_FLAG_IGNORED
 * are accepted and collected with their reason (lj_flags_log_ignored prints them once at
 * start-up); rows of kind LJ_FLAG_REFUSED stop the run with the row's reason. */
#ifndef LJ_CLI_FLAGS_H
#define LJ_CLI_FLAGS_H

#include <stdint.h>
#include <stdio.h>

#include "base/base.h"

typedef enum {
    LJ_FLAG_SECTION = 0, /* no flag: `help` is a heading of the generated help */
    LJ_FLAG_SWITCH,      /* no value: *(int *)dest = ival */
    LJ_FLAG_STR,         /* *(const char **)dest */
    LJ_FLAG_INT,         /* *(int *)dest */
    LJ_FLAG_I64,         /* *(int64_t *)dest, >= 0 */
    LJ_FLAG_U64,         /* *(uint64_t *)dest */
    LJ_FLAG_DOUBLE,      /* *(double *)dest */
    LJ_FLAG_FLOAT,       /* *(float *)dest */
    LJ_FLAG_LIST,        /* one or more values: *(lj_flag_list *)dest */
    LJ_FLAG_FUNC,        /* one value, handed to fn(dest, flag, value) at each occurrence */
    LJ_FLAG_IGNORED,     /* accepted and listed with `help` as the reason; ival values: 0, 1 or -1 (one or more) */
    LJ_FLAG_REFUSED,     /* an error: "<flag>: <help>"; ival values as for LJ_FLAG_IGNORED */
} lj_flag_kind;

/* The values of a list flag: pointers into argv (for "--flag=v" argv[i] is moved to point at v). */
typedef struct {
    int count;
    char **values;
} lj_flag_list;

typedef struct {
    const char *name;  /* "--seq-length" (or "-q"); NULL for LJ_FLAG_SECTION */
    lj_flag_kind kind;
    void *dest;        /* where the value goes (see the kinds); NULL for IGNORED / REFUSED */
    int ival;          /* SWITCH: the value stored; IGNORED / REFUSED: how many values the flag takes */
    const char *help;  /* the value's form and meaning; for IGNORED / REFUSED the reason */
    int *given;        /* optional: set to 1 when the flag is given */
    lj_status (*fn)(void *dest, const char *flag, const char *value); /* LJ_FLAG_FUNC */
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
 * a value that does not parse ("--seq-length: 'abc' is not an integer"), a value given to a
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

/* Parses `text` as the integer value of `flag`. Errors: LJ_ERR_ARG ("--x: 'abc' is not an integer"). */
lj_status lj_flags_parse_int(const char *flag, const char *text, int *out);

#endif

/* flags.c: the table-driven argument parser (flags.h). */
#include "cli/flags.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

lj_status lj_flags_parse_int(const char *flag, const char *v, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0')
        return lj_fail(LJ_ERR_ARG, "%s: '%s' is not an integer: expected a whole number (e.g. %s 8)", flag, v, flag);
    if (errno == ERANGE || x < INT_MIN || x > INT_MAX)
        return lj_fail(LJ_ERR_ARG, "%s: %s is out of range: expected a whole number from %d to %d", flag, v, INT_MIN,
                       INT_MAX);
    *out = (int)x;
    return LJ_OK;
}

/* A byte count for messages: "1 MiB", "512 B". */
static const char *bytes_text(double v, char *buf, size_t len) {
    if (v >= 1048576.0 * 1099511627776.0) snprintf(buf, len, "%.4g EiB", v / (1048576.0 * 1099511627776.0));
    else lj_format_bytes((uint64_t)v, buf, len);
    return buf;
}

lj_status lj_flags_parse_size(const lj_flag *r, const char *v, uint64_t *bytes, double *percent) {
    const int zero_ok = r->ival & LJ_FLAG_ZERO_OK, pct_ok = (r->ival & LJ_FLAG_PERCENT_OK) && percent;
    const double max = r->max > 0 ? r->max : LJ_FLAG_SIZE_MAX;
    const char *eg = pct_ok ? "e.g. 2GiB or 5%" : "e.g. 80GiB";
    char lo[32], hi[32], got[32];
    *bytes = 0;
    if (percent) *percent = -1.0;
    const size_t len = strlen(v);
    if (pct_ok && len > 1 && v[len - 1] == '%') {
        char *end;
        errno = 0;
        const double p = strtod(v, &end);
        if (end != v + len - 1 || errno || !isfinite(p) || p < 0 || p >= 100 || (p == 0 && !zero_ok))
            return lj_fail(LJ_ERR_ARG, "%s: '%s' is not a percentage: expected %s0 <= P < 100 as P%%, %s", r->name, v,
                           zero_ok ? "" : "above 0, ", eg);
        *percent = p;
        return LJ_OK;
    }
    uint64_t b = 0;
    if (lj_parse_bytes(v, &b) != LJ_OK)
        return lj_fail(LJ_ERR_ARG,
                       "%s: '%s' is not a byte count: expected a finite number of at most %s with a unit (B, KiB, MiB, "
                       "GiB, TiB, KB, MB, GB, TB; none: bytes)%s, %s",
                       r->name, v, bytes_text(max, hi, sizeof hi), pct_ok ? " or a percentage" : "", eg);
    if (b == 0 && !zero_ok)
        return lj_fail(LJ_ERR_ARG, "%s: '%s' is zero: expected a byte count above 0, %s", r->name, v, eg);
    if ((double)b > max)
        return lj_fail(LJ_ERR_ARG, "%s: '%s' (%s) is above the largest accepted, %s: give a smaller value, %s", r->name,
                       v, bytes_text((double)b, got, sizeof got), bytes_text(max, hi, sizeof hi), eg);
    if ((double)b < r->min && !(b == 0 && zero_ok))
        return lj_fail(LJ_ERR_ARG,
                       "%s: '%s' is %s, below the smallest accepted, %s (a number without a unit counts bytes): give "
                       "a unit, %s%s",
                       r->name, v, bytes_text((double)b, got, sizeof got), bytes_text(r->min, lo, sizeof lo), eg,
                       zero_ok ? ", or 0 for none" : "");
    *bytes = b;
    return LJ_OK;
}

lj_status lj_flags_parse_rate(const lj_flag *r, const char *v, double *value) {
    const int zero_ok = r->ival & LJ_FLAG_ZERO_OK;
    const double max = r->max > 0 ? r->max : LJ_FLAG_RATE_MAX;
    const char *unit = r->help && r->help[0] ? r->help : "per second";
    char *end;
    errno = 0;
    const double x = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || errno || !isfinite(x))
        return lj_fail(LJ_ERR_ARG, "%s: '%s' is not a number: expected a finite rate in %s, e.g. %s %s", r->name, v, unit,
                       r->name, r->min > 1 ? "1000" : "100");
    if (x < 0 || (x == 0 && !zero_ok) || x < r->min || x > max)
        return lj_fail(LJ_ERR_ARG, "%s: '%s' is out of range: expected a rate in %s %s %.6g and at most %.6g; leave the "
                                   "flag out for the default",
                       r->name, v, unit, zero_ok ? "of at least" : "above", fmax(r->min, 0.0), max);
    *value = x;
    return LJ_OK;
}

/* argparse's test: "-1", "-.5", "-1e-3" are values, not flags. */
static int is_negative_number(const char *s) {
    if (s[0] != '-' || !(isdigit((unsigned char)s[1]) || (s[1] == '.' && isdigit((unsigned char)s[2])))) return 0;
    char *end;
    strtod(s, &end);
    return *end == '\0';
}

/* An argument that is a value rather than a flag. */
static int is_value(const char *s) { return s[0] != '-' || s[1] == '\0' || is_negative_number(s); }

static lj_status parse_value(const lj_flag *r, const char *v) {
    char *end;
    errno = 0;
    switch (r->kind) {
    case LJ_FLAG_STR: *(const char **)r->dest = v; return LJ_OK;
    case LJ_FLAG_INT: {
        int x;
        LJ_TRY(lj_flags_parse_int(r->name, v, &x));
        const double lo = r->min, hi = r->max != 0 ? r->max : (double)INT_MAX;
        if (x < lo || x > hi) {
            if (r->max != 0)
                return lj_fail(LJ_ERR_ARG, "%s %d: expected %.0f to %.0f (leave the flag out for its default)", r->name,
                               x, lo, hi);
            return lj_fail(LJ_ERR_ARG, "%s %d: expected >= %.0f (leave the flag out for its default)", r->name, x, lo);
        }
        *(int *)r->dest = x;
        return LJ_OK;
    }
    case LJ_FLAG_I64:
    case LJ_FLAG_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == '\0' || *v == '-' || *end != '\0' || errno || (r->kind == LJ_FLAG_I64 && x > INT64_MAX))
            return lj_fail(LJ_ERR_ARG, "%s: '%s' is not a non-negative integer: expected a whole number of 0 or more "
                                       "(e.g. %s 1)", r->name, v, r->name);
        if (r->kind == LJ_FLAG_I64) *(int64_t *)r->dest = (int64_t)x;
        else *(uint64_t *)r->dest = x;
        return LJ_OK;
    }
    case LJ_FLAG_DOUBLE:
    case LJ_FLAG_FLOAT: {
        double x = strtod(v, &end);
        if (*v == '\0' || *end != '\0' || errno || !isfinite(x))
            return lj_fail(LJ_ERR_ARG, "%s: '%s' is not a number: expected a finite decimal number (e.g. %s 0.5)", r->name,
                           v, r->name);
        if (r->kind == LJ_FLAG_DOUBLE) *(double *)r->dest = x;
        else *(float *)r->dest = (float)x;
        return LJ_OK;
    }
    case LJ_FLAG_FUNC: return r->fn(r->dest, r->name, v);
    case LJ_FLAG_SIZE: {
        uint64_t bytes;
        double pct;
        LJ_TRY(lj_flags_parse_size(r, v, &bytes, &pct));
        *(const char **)r->dest = v;
        return LJ_OK;
    }
    case LJ_FLAG_RATE: return lj_flags_parse_rate(r, v, (double *)r->dest);
    default: return LJ_OK;
    }
}

/* Launchers' own spellings of flags ljperf names with dashes: torchrun's and DeepSpeed's
 * (`--nproc_per_node`, `--master_port`, ...) beside the dashed form. */
static const char *const k_spellings[][2] = {
    {"--nproc_per_node", "--nproc-per-node"},
    {"--node_rank", "--node-rank"},
    {"--master_addr", "--master-addr"},
    {"--master_port", "--master-port"},
};

static const lj_flag *find(const lj_flag *rows, int n, const char *name, size_t len) {
    for (int k = 0; k < n; k++)
        if (rows[k].name && strlen(rows[k].name) == len && !strncmp(rows[k].name, name, len)) return &rows[k];
    for (size_t s = 0; s < sizeof k_spellings / sizeof k_spellings[0]; s++)
        if (strlen(k_spellings[s][0]) == len && !strncmp(k_spellings[s][0], name, len))
            return find(rows, n, k_spellings[s][1], strlen(k_spellings[s][1]));
    return NULL;
}

/* Levenshtein distance between a[0..la) and b[0..lb), capped at 99 (names are short). */
static int edit_distance(const char *a, size_t la, const char *b, size_t lb) {
    if (la > 98 || lb > 98) return 99;
    int d[99 + 1];
    for (size_t j = 0; j <= lb; j++) d[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = d[0];
        d[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            const int up = d[j];
            const int sub = diag + (a[i - 1] != b[j - 1]);
            const int del = up + 1, ins = d[j - 1] + 1;
            d[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            diag = up;
        }
    }
    return d[lb];
}

/* The row whose name is closest to name[0..len) (argparse's difflib suggestion, by edit
 * distance): within 2 edits, or a quarter of the name; else a row the name is the start of;
 * NULL when none is that close. */
static const lj_flag *closest(const lj_flag *rows, int n, const char *name, size_t len) {
    const lj_flag *best = NULL;
    int best_d = (int)(len / 4 > 2 ? len / 4 : 2) + 1;
    for (int k = 0; k < n; k++) {
        if (!rows[k].name || rows[k].kind == LJ_FLAG_SECTION) continue;
        const int d = edit_distance(name, len, rows[k].name, strlen(rows[k].name));
        if (d < best_d) {
            best_d = d;
            best = &rows[k];
        }
    }
    if (best || len < 6) return best;
    for (int k = 0; k < n; k++) /* a name cut short: --micro-batch for --micro-batch-size */
        if (rows[k].name && rows[k].kind != LJ_FLAG_SECTION && !strncmp(rows[k].name, name, len)) return &rows[k];
    return NULL;
}

/* How many values a row takes: 0, 1, or -1 for one or more. */
static int values_of(const lj_flag *r) {
    if (r->kind == LJ_FLAG_SWITCH) return 0;
    if (r->kind == LJ_FLAG_LIST) return -1;
    if (r->kind == LJ_FLAG_IGNORED || r->kind == LJ_FLAG_REFUSED) return r->ival;
    return 1;
}

static void check_table(const lj_flag *rows, int n) {
    for (int a = 0; a < n; a++) {
        if (!rows[a].name) continue;
        for (int b = a + 1; b < n; b++)
            LJ_ASSERT(!rows[b].name || strcmp(rows[a].name, rows[b].name) != 0, "flag %s has two rows", rows[a].name);
    }
}

static void note_ignored(lj_flags_result *res, const lj_flag *r) {
    for (int k = 0; k < res->num_ignored; k++)
        if (res->ignored[k] == r) return;
    if (res->num_ignored < LJ_FLAGS_MAX_IGNORED) res->ignored[res->num_ignored++] = r;
}

lj_status lj_flags_parse(const char *cmd, const lj_flag *rows, int n, int argc, char **argv, int max_positional,
                         lj_flags_result *res) {
    memset(res, 0, sizeof *res);
    check_table(rows, n);
    if (argc == 1 && !strcmp(argv[0], "--list-flags")) { /* hidden: the table, for the bad-input suite */
        lj_flags_print_list(stdout, rows, n);
        exit(0);
    }
    int only_positional = 0;
    /* every unknown flag of the line is reported at once, as argparse does */
    char unknown[1024] = "";
    int num_unknown = 0;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (only_positional || is_value(a)) {
            if (res->num_positional >= max_positional)
                return max_positional == 0
                           ? lj_fail(LJ_ERR_ARG, "unexpected argument '%s' (see ljperf %s --help)", a, cmd)
                           : lj_fail(LJ_ERR_ARG, "too many arguments: '%s' (see ljperf %s --help)", a, cmd);
            res->positional = lj_realloc(res->positional, (size_t)(res->num_positional + 1) * sizeof *res->positional);
            res->positional[res->num_positional++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_positional = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            res->help = 1;
            return LJ_OK;
        }
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        const size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const lj_flag *r = find(rows, n, a, len);
        if (!r) {
            const lj_flag *near = closest(rows, n, a, len);
            const size_t used = strlen(unknown);
            if (used < sizeof unknown - 1)
                snprintf(unknown + used, sizeof unknown - used, "%s'%.*s'%s%s%s", num_unknown ? ", " : "", (int)len, a,
                         near ? " (did you mean " : "", near ? near->name : "", near ? "?)" : "");
            num_unknown++;
            while (!eq && i + 1 < argc && is_value(argv[i + 1]) && !only_positional) i++; /* its values */
            continue;
        }
        if (r->given) *r->given = 1;
        const int nvalues = values_of(r);
        if (nvalues == 0 && eq)
            return lj_fail(LJ_ERR_ARG, "%s takes no value (got '%s'): give %s alone", r->name, eq + 1, r->name);
        /* the values: argv[first .. first + count) */
        int first = i + 1, count = 0;
        if (eq) {
            argv[i] = (char *)eq + 1;
            first = i;
            count = 1;
        } else if (nvalues == 1) {
            if (i + 1 >= argc || !is_value(argv[i + 1]))
                return lj_fail(LJ_ERR_ARG, "%s needs a value (see ljperf %s --help)", r->name, cmd);
            count = 1;
        } else if (nvalues < 0) {
            while (first + count < argc && is_value(argv[first + count])) count++;
            if (count == 0) return lj_fail(LJ_ERR_ARG, "%s needs at least one value (see ljperf %s --help)", r->name, cmd);
        }
        if (!eq) i += count;
        if (r->kind == LJ_FLAG_REFUSED) /* the reason, and what to do where it does not say */
            return lj_fail(LJ_ERR_ARG, "%s: %s%s", r->name, r->help,
                           strstr(r->help, "use ") || strstr(r->help, "instead") ? "" : " (remove the flag)");
        if (r->kind == LJ_FLAG_IGNORED) {
            note_ignored(res, r);
        } else if (r->kind == LJ_FLAG_SWITCH) {
            *(int *)r->dest = r->ival;
        } else if (r->kind == LJ_FLAG_LIST) {
            lj_flag_list *l = r->dest;
            l->count = count;
            l->values = argv + first;
        } else {
            LJ_TRY(parse_value(r, argv[first]));
        }
    }
    if (num_unknown)
        return lj_fail(LJ_ERR_ARG, "unknown flag%s %s (see ljperf %s --help)", num_unknown > 1 ? "s" : "", unknown, cmd);
    return LJ_OK;
}

void lj_flags_result_free(lj_flags_result *res) {
    free(res->positional);
    res->positional = NULL;
    res->num_positional = 0;
}

void lj_flags_log_ignored(const char *cmd, const lj_flags_result *res) {
    if (res->num_ignored == 0) return;
    lj_log_info("%s: %d argument%s accepted and ignored:", cmd, res->num_ignored, res->num_ignored == 1 ? "" : "s");
    for (int k = 0; k < res->num_ignored; k++) lj_log_info("  %s: %s", res->ignored[k]->name, res->ignored[k]->help);
}

/* Prints `text` wrapped at 100 columns from column `col`, continuation lines indented by `indent`. */
static void print_wrapped(FILE *f, const char *text, int col, int indent) {
    int first = 1;
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        const char *sp = strchr(p, ' ');
        const int w = (int)(sp ? sp - p : (long)strlen(p));
        if (!first && col + 1 + w > 100) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (!first) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", w, p);
        col += w;
        p += w;
        first = 0;
    }
    fputc('\n', f);
}

void lj_flags_print_help(FILE *f, const lj_flag *rows, int n) {
    for (int k = 0; k < n; k++) {
        const lj_flag *r = &rows[k];
        if (r->kind == LJ_FLAG_SECTION) {
            fprintf(f, "%s\n", r->help);
            continue;
        }
        char text[1024];
        const char *mark = r->kind == LJ_FLAG_IGNORED ? "ignored: " : r->kind == LJ_FLAG_REFUSED ? "refused: " : "";
        snprintf(text, sizeof text, "%s%s", mark, r->help ? r->help : "");
        int col = fprintf(f, "  %-34s", r->name);
        if (col > 36) {
            fprintf(f, "\n%*s", 36, "");
            col = 36;
        }
        print_wrapped(f, text, col, 36);
    }
}

const char *lj_flags_peek(int argc, char **argv, const char *name) {
    const size_t len = strlen(name);
    const char *v = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (!strncmp(argv[i], name, len) && argv[i][len] == '=') v = argv[i] + len + 1;
        else if (!strcmp(argv[i], name) && i + 1 < argc && is_value(argv[i + 1])) v = argv[++i];
    }
    return v;
}

void lj_flags_print_list(FILE *f, const lj_flag *rows, int n) {
    static const char *const kinds[] = {
        [LJ_FLAG_SWITCH] = "switch", [LJ_FLAG_STR] = "str",         [LJ_FLAG_INT] = "int",         [LJ_FLAG_I64] = "i64",
        [LJ_FLAG_U64] = "u64",       [LJ_FLAG_DOUBLE] = "double",   [LJ_FLAG_FLOAT] = "float",     [LJ_FLAG_LIST] = "list",
        [LJ_FLAG_FUNC] = "func",     [LJ_FLAG_IGNORED] = "ignored", [LJ_FLAG_REFUSED] = "refused", [LJ_FLAG_SIZE] = "size",
        [LJ_FLAG_RATE] = "rate",
    };
    for (int k = 0; k < n; k++) {
        const lj_flag *r = &rows[k];
        if (r->kind == LJ_FLAG_SECTION || !r->name) continue;
        fprintf(f, "%s\t%s\t%d\n", r->name, kinds[r->kind], values_of(r));
    }
}

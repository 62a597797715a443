/* chat_template.c: a Jinja2 subset interpreter for chat templates: a lexer (text and tags, with
 * trim_blocks, lstrip_blocks and '-' whitespace control), a parser into a tree of statements and
 * expressions, and an evaluator over JSON values (cJSON). Contract in serve/chat_template.h. */
#include "serve/chat_template.h"

#include <ctype.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---- tokens ------------------------------------------------------------------------------ */

typedef enum { T_TEXT, T_OUT_BEGIN, T_STMT_BEGIN, T_END, T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_EOF } tok_kind;

typedef struct {
    tok_kind kind;
    const char *s; /* T_NAME, T_OP: the source; T_STR, T_TEXT: own copy */
    size_t len;
    long long i;
    double f;
    int pos;       /* offset in the template */
} tok;

typedef struct {
    const char *src;
    tok *t;
    int n, cap, at;
    char err[256];
    jmp_buf fail;
    /* evaluation */
    void **owned;  /* strings and JSON made while rendering */
    int n_owned, cap_owned;
    char *out;
    size_t out_len, out_cap;
} ctx;

static void die(ctx *c, int pos, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
static void die(ctx *c, int pos, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char m[200];
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(c->err, sizeof c->err, "%s (template offset %d)", m, pos);
    longjmp(c->fail, 1);
}

static void own(ctx *c, void *p) {
    if (c->n_owned == c->cap_owned) {
        c->cap_owned = c->cap_owned ? 2 * c->cap_owned : 64;
        c->owned = lj_realloc(c->owned, (size_t)c->cap_owned * sizeof(void *));
    }
    c->owned[c->n_owned++] = p;
}

static void push_tok(ctx *c, tok t) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 256;
        c->t = lj_realloc(c->t, (size_t)c->cap * sizeof(tok));
    }
    c->t[c->n++] = t;
}

static char *copy_str(ctx *c, const char *s, size_t n) {
    char *p = lj_malloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    own(c, p);
    return p;
}

/* Tokens of one tag's inside [p, end). */
static void lex_tag(ctx *c, const char *p, const char *end) {
    static const char *const ops[] = {"//", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".", ",", ":",
                                      "|", "~", "+", "-", "*", "/", "%", "<", ">", "=", NULL};
    while (p < end) {
        const int pos = (int)(p - c->src);
        if (isspace((unsigned char)*p)) {
            p++;
        } else if (isalpha((unsigned char)*p) || *p == '_') {
            const char *q = p;
            while (q < end && (isalnum((unsigned char)*q) || *q == '_')) q++;
            push_tok(c, (tok){T_NAME, p, (size_t)(q - p), 0, 0, pos});
            p = q;
        } else if (isdigit((unsigned char)*p)) {
            char *q;
            const double f = strtod(p, &q);
            int is_float = 0;
            for (const char *r = p; r < q; r++) is_float |= *r == '.' || *r == 'e' || *r == 'E';
            push_tok(c, (tok){is_float ? T_FLOAT : T_INT, p, (size_t)(q - p), (long long)f, f, pos});
            p = q;
        } else if (*p == '\'' || *p == '"') {
            const char quote = *p++;
            char *buf = lj_malloc((size_t)(end - p) + 1);
            size_t n = 0;
            while (p < end && *p != quote) {
                if (*p == '\\' && p + 1 < end) {
                    p++;
                    switch (*p) {
                    case 'n': buf[n++] = '\n'; break;
                    case 't': buf[n++] = '\t'; break;
                    case 'r': buf[n++] = '\r'; break;
                    default: buf[n++] = *p; break;
                    }
                    p++;
                } else {
                    buf[n++] = *p++;
                }
            }
            if (p >= end) {
                free(buf);
                die(c, pos, "unterminated string");
            }
            p++;
            buf[n] = 0;
            own(c, buf);
            push_tok(c, (tok){T_STR, buf, n, 0, 0, pos});
        } else {
            int k = 0;
            while (ops[k] && strncmp(p, ops[k], strlen(ops[k])) != 0) k++;
            if (!ops[k]) die(c, pos, "unexpected character '%c'", *p);
            push_tok(c, (tok){T_OP, p, strlen(ops[k]), 0, 0, pos});
            p += strlen(ops[k]);
        }
    }
}

/* The template into tokens: T_TEXT runs and tags (T_OUT_BEGIN/T_STMT_BEGIN ... T_END), with
 * Jinja's whitespace rules (trim_blocks, lstrip_blocks as transformers sets them, and '-'). */
static void lex(ctx *c) {
    const char *s = c->src, *p = s;
    int trim_next = 0; /* 1: strip leading whitespace of the next text ('-' before the close); 2: one newline */
    for (;;) {
        const char *open = p;
        while (*open && !(open[0] == '{' && (open[1] == '{' || open[1] == '%' || open[1] == '#'))) open++;
        /* the text before the tag */
        const char *t0 = p, *t1 = open;
        if (trim_next == 1)
            while (t0 < t1 && isspace((unsigned char)*t0)) t0++;
        else if (trim_next == 2 && t0 < t1 && *t0 == '\n') t0++;
        if (*open) {
            const int minus = open[2] == '-', plus = open[2] == '+';
            if (minus) {
                while (t1 > t0 && isspace((unsigned char)t1[-1])) t1--;
            } else if (open[1] != '{' && !plus) { /* lstrip_blocks: spaces and tabs from the line's start */
                const char *q = t1;
                while (q > t0 && (q[-1] == ' ' || q[-1] == '\t')) q--;
                if (q == s || q[-1] == '\n') t1 = q;
            }
        }
        if (t1 > t0) push_tok(c, (tok){T_TEXT, copy_str(c, t0, (size_t)(t1 - t0)), (size_t)(t1 - t0), 0, 0, (int)(t0 - s)});
        if (!*open) break;
        const char kind = open[1];
        const char *close_pat = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
        const char *body = open + 2 + (open[2] == '-' || open[2] == '+');
        const char *close = strstr(body, close_pat);
        if (!close) die(c, (int)(open - s), "unclosed tag");
        const char *body_end = close;
        const int close_minus = close > body && close[-1] == '-', close_plus = close > body && close[-1] == '+';
        if (close_minus || close_plus) body_end--;
        if (kind != '#') {
            push_tok(c, (tok){kind == '{' ? T_OUT_BEGIN : T_STMT_BEGIN, open, 2, 0, 0, (int)(open - s)});
            lex_tag(c, body, body_end);
            push_tok(c, (tok){T_END, close, 2, 0, 0, (int)(close - s)});
        }
        trim_next = close_minus ? 1 : (kind != '{' && !close_plus) ? 2 : 0;
        p = close + 2;
    }
    push_tok(c, (tok){T_EOF, p, 0, 0, 0, (int)(p - s)});
}

/* ---- the tree ------------------------------------------------------------------------------ */

typedef enum {
    E_LIT_STR, E_LIT_INT, E_LIT_FLOAT, E_LIT_BOOL, E_LIT_NONE, E_NAME, E_LIST, E_DICT, E_ATTR, E_INDEX, E_SLICE,
    E_CALL, E_FILTER, E_TEST, E_NOT, E_NEG, E_BIN, E_COND,
} expr_kind;

typedef struct expr expr;
struct expr {
    expr_kind kind;
    int pos;
    const char *s; /* names, strings, operators */
    size_t len;
    long long i;
    double f;
    expr *a, *b, *c;   /* operands; E_SLICE: start, stop, step (NULL: none) */
    expr **args;       /* E_CALL, E_FILTER, E_LIST, E_DICT (key, value pairs) */
    const char **kw;   /* E_CALL: keyword names (NULL for positional) */
    int nargs;
    int negate;        /* E_TEST: "is not" */
};

typedef enum { S_TEXT, S_OUT, S_IF, S_FOR, S_SET } stmt_kind;

typedef struct stmt stmt;
struct stmt {
    stmt_kind kind;
    int pos;
    const char *text;
    size_t len;
    expr *e;            /* S_OUT value, S_IF condition, S_FOR iterable, S_SET value */
    expr *filter;       /* S_FOR ... if cond */
    const char *var[2]; /* S_FOR targets (var[1] for "k, v"), S_SET name (var[1]: attribute) */
    size_t var_len[2];
    stmt **body, **orelse; /* S_IF: then / elif-else chain; S_FOR: body / else */
    int nbody, norelse;
};

static void *node(ctx *c, size_t size) {
    void *p = lj_calloc(1, size);
    own(c, p);
    return p;
}

static tok *peek(ctx *c) { return &c->t[c->at]; }
static int is_op(const tok *t, const char *op) { return t->kind == T_OP && t->len == strlen(op) && !strncmp(t->s, op, t->len); }
static int is_name(const tok *t, const char *n) { return t->kind == T_NAME && t->len == strlen(n) && !strncmp(t->s, n, t->len); }
static void expect_op(ctx *c, const char *op) {
    if (!is_op(peek(c), op)) die(c, peek(c)->pos, "expected '%s'", op);
    c->at++;
}
static tok *expect_name(ctx *c) {
    if (peek(c)->kind != T_NAME) die(c, peek(c)->pos, "expected a name");
    return &c->t[c->at++];
}

static expr *parse_expr(ctx *c);

static expr *mk(ctx *c, expr_kind k, int pos) {
    expr *e = node(c, sizeof *e);
    e->kind = k;
    e->pos = pos;
    return e;
}

/* Arguments of a call: ( [name=]expr, ... ). */
static void parse_args(ctx *c, expr *e) {
    expect_op(c, "(");
    while (!is_op(peek(c), ")")) {
        const char *kw = NULL;
        if (peek(c)->kind == T_NAME && is_op(&c->t[c->at + 1], "=")) {
            tok *n = expect_name(c);
            kw = copy_str(c, n->s, n->len);
            c->at++;
        }
        expr *a = parse_expr(c);
        expr **old_args = e->args;
        const char **old_kw = e->kw;
        expr **args = lj_malloc((size_t)(e->nargs + 1) * sizeof(expr *));
        const char **kws = lj_malloc((size_t)(e->nargs + 1) * sizeof(char *));
        if (e->nargs) memcpy(args, old_args, (size_t)e->nargs * sizeof(expr *)), memcpy(kws, old_kw, (size_t)e->nargs * sizeof(char *));
        args[e->nargs] = a;
        kws[e->nargs] = kw;
        own(c, args);
        own(c, kws);
        e->args = args;
        e->kw = kws;
        e->nargs++;
        if (!is_op(peek(c), ",")) break;
        c->at++;
    }
    expect_op(c, ")");
}

static expr *parse_primary(ctx *c) {
    tok *t = &c->t[c->at++];
    expr *e;
    switch (t->kind) {
    case T_STR: {
        e = mk(c, E_LIT_STR, t->pos);
        e->s = t->s, e->len = t->len;
        while (peek(c)->kind == T_STR) { /* adjacent literals concatenate */
            tok *u = &c->t[c->at++];
            char *j = lj_malloc(e->len + u->len + 1);
            memcpy(j, e->s, e->len);
            memcpy(j + e->len, u->s, u->len + 1);
            own(c, j);
            e->s = j, e->len += u->len;
        }
        return e;
    }
    case T_INT: e = mk(c, E_LIT_INT, t->pos), e->i = t->i; return e;
    case T_FLOAT: e = mk(c, E_LIT_FLOAT, t->pos), e->f = t->f; return e;
    case T_NAME:
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            e = mk(c, E_LIT_BOOL, t->pos);
            e->i = t->s[0] == 't' || t->s[0] == 'T';
            return e;
        }
        if (is_name(t, "none") || is_name(t, "None")) return mk(c, E_LIT_NONE, t->pos);
        e = mk(c, E_NAME, t->pos);
        e->s = t->s, e->len = t->len;
        return e;
    case T_OP:
        if (is_op(t, "(")) {
            e = parse_expr(c);
            expect_op(c, ")");
            return e;
        }
        if (is_op(t, "[")) {
            e = mk(c, E_LIST, t->pos);
            while (!is_op(peek(c), "]")) {
                expr *x = parse_expr(c);
                expr **args = lj_malloc((size_t)(e->nargs + 1) * sizeof(expr *));
                if (e->nargs) memcpy(args, e->args, (size_t)e->nargs * sizeof(expr *));
                args[e->nargs++] = x;
                own(c, args);
                e->args = args;
                if (!is_op(peek(c), ",")) break;
                c->at++;
            }
            expect_op(c, "]");
            return e;
        }
        if (is_op(t, "{")) {
            e = mk(c, E_DICT, t->pos);
            while (!is_op(peek(c), "}")) {
                expr *k = parse_expr(c);
                expect_op(c, ":");
                expr *v = parse_expr(c);
                expr **args = lj_malloc((size_t)(e->nargs + 2) * sizeof(expr *));
                if (e->nargs) memcpy(args, e->args, (size_t)e->nargs * sizeof(expr *));
                args[e->nargs++] = k;
                args[e->nargs++] = v;
                own(c, args);
                e->args = args;
                if (!is_op(peek(c), ",")) break;
                c->at++;
            }
            expect_op(c, "}");
            return e;
        }
        break;
    default: break;
    }
    die(c, t->pos, "unexpected token");
}

static expr *parse_postfix(ctx *c) {
    expr *e = parse_primary(c);
    for (;;) {
        tok *t = peek(c);
        if (is_op(t, ".")) {
            c->at++;
            tok *n = expect_name(c);
            expr *a = mk(c, E_ATTR, n->pos);
            a->a = e, a->s = n->s, a->len = n->len;
            e = a;
        } else if (is_op(t, "[")) {
            c->at++;
            expr *start = NULL, *stop = NULL, *step = NULL;
            int slice = 0;
            if (!is_op(peek(c), ":")) start = parse_expr(c);
            if (is_op(peek(c), ":")) {
                slice = 1;
                c->at++;
                if (!is_op(peek(c), ":") && !is_op(peek(c), "]")) stop = parse_expr(c);
                if (is_op(peek(c), ":")) {
                    c->at++;
                    if (!is_op(peek(c), "]")) step = parse_expr(c);
                }
            }
            expect_op(c, "]");
            expr *x = mk(c, slice ? E_SLICE : E_INDEX, t->pos);
            x->a = e, x->b = start;
            if (slice) {
                expr **args = node(c, 3 * sizeof(expr *));
                args[0] = start, args[1] = stop, args[2] = step;
                x->args = args;
                x->nargs = 3;
            }
            e = x;
        } else if (is_op(t, "(")) {
            expr *call = mk(c, E_CALL, t->pos);
            call->a = e;
            parse_args(c, call);
            e = call;
        } else {
            return e;
        }
    }
}

/* Filters and tests bind tighter than the arithmetic (Jinja's parse_filter_expr). */
static expr *parse_filtered(ctx *c) {
    expr *e = parse_postfix(c);
    for (;;) {
        if (is_op(peek(c), "|")) {
            c->at++;
            tok *n = expect_name(c);
            expr *f = mk(c, E_FILTER, n->pos);
            f->a = e, f->s = n->s, f->len = n->len;
            if (is_op(peek(c), "(")) parse_args(c, f);
            e = f;
        } else if (is_name(peek(c), "is")) {
            c->at++;
            expr *t = mk(c, E_TEST, peek(c)->pos);
            if (is_name(peek(c), "not")) c->at++, t->negate = 1;
            tok *n = &c->t[c->at++];
            if (n->kind != T_NAME) die(c, n->pos, "expected a test name after 'is'");
            t->a = e, t->s = n->s, t->len = n->len;
            if (is_op(peek(c), "(")) parse_args(c, t);
            else if (peek(c)->kind == T_STR || peek(c)->kind == T_INT || (peek(c)->kind == T_NAME && !is_name(peek(c), "and") &&
                                                                          !is_name(peek(c), "or") && !is_name(peek(c), "else") &&
                                                                          !is_name(peek(c), "if"))) {
                expr *arg = parse_postfix(c); /* "is sameas x", "is eq 3" */
                expr **args = node(c, sizeof(expr *));
                args[0] = arg;
                t->args = args;
                t->nargs = 1;
            }
            e = t;
        } else {
            return e;
        }
    }
}

static expr *parse_unary(ctx *c) {
    if (is_op(peek(c), "-")) {
        const int pos = peek(c)->pos;
        c->at++;
        expr *e = mk(c, E_NEG, pos);
        e->a = parse_unary(c);
        return e;
    }
    if (is_op(peek(c), "+")) c->at++;
    return parse_filtered(c);
}

static expr *bin(ctx *c, const tok *op, expr *a, expr *b) {
    expr *e = mk(c, E_BIN, op->pos);
    e->s = op->s, e->len = op->len, e->a = a, e->b = b;
    return e;
}

static expr *parse_mul(ctx *c) {
    expr *e = parse_unary(c);
    while (is_op(peek(c), "*") || is_op(peek(c), "/") || is_op(peek(c), "//") || is_op(peek(c), "%")) {
        tok *op = &c->t[c->at++];
        e = bin(c, op, e, parse_unary(c));
    }
    return e;
}

static expr *parse_add(ctx *c) {
    expr *e = parse_mul(c);
    while (is_op(peek(c), "+") || is_op(peek(c), "-")) {
        tok *op = &c->t[c->at++];
        e = bin(c, op, e, parse_mul(c));
    }
    return e;
}

static expr *parse_concat(ctx *c) {
    expr *e = parse_add(c);
    while (is_op(peek(c), "~")) {
        tok *op = &c->t[c->at++];
        e = bin(c, op, e, parse_add(c));
    }
    return e;
}

static expr *parse_compare(ctx *c) {
    expr *e = parse_concat(c);
    for (;;) {
        tok *t = peek(c);
        if (is_op(t, "==") || is_op(t, "!=") || is_op(t, "<") || is_op(t, "<=") || is_op(t, ">") || is_op(t, ">=") ||
            is_name(t, "in")) {
            c->at++;
            expr *rhs = parse_concat(c);
            e = bin(c, t, e, rhs);
        } else if (is_name(t, "not") && is_name(&c->t[c->at + 1], "in")) {
            const tok *op = &c->t[c->at + 1];
            c->at += 2;
            expr *rhs = parse_concat(c);
            expr *in = bin(c, op, e, rhs);
            e = mk(c, E_NOT, t->pos);
            e->a = in;
        } else {
            return e;
        }
    }
}

static expr *parse_not(ctx *c) {
    if (is_name(peek(c), "not")) {
        const int pos = peek(c)->pos;
        c->at++;
        expr *e = mk(c, E_NOT, pos);
        e->a = parse_not(c);
        return e;
    }
    return parse_compare(c);
}

static expr *parse_and(ctx *c) {
    expr *e = parse_not(c);
    while (is_name(peek(c), "and")) {
        tok *op = &c->t[c->at++];
        e = bin(c, op, e, parse_not(c));
    }
    return e;
}

static expr *parse_or(ctx *c) {
    expr *e = parse_and(c);
    while (is_name(peek(c), "or")) {
        tok *op = &c->t[c->at++];
        e = bin(c, op, e, parse_and(c));
    }
    return e;
}

static expr *parse_expr(ctx *c) {
    expr *e = parse_or(c);
    if (is_name(peek(c), "if")) {
        const int pos = peek(c)->pos;
        c->at++;
        expr *x = mk(c, E_COND, pos);
        x->a = e;
        x->b = parse_or(c);
        if (is_name(peek(c), "else")) {
            c->at++;
            x->c = parse_expr(c);
        }
        return x;
    }
    return e;
}

static void add_stmt(ctx *c, stmt ***list, int *n, stmt *s) {
    stmt **l = lj_malloc((size_t)(*n + 1) * sizeof(stmt *));
    if (*n) memcpy(l, *list, (size_t)*n * sizeof(stmt *));
    l[(*n)++] = s;
    own(c, l);
    *list = l;
}

/* Statements until a {% name %} of `ends` (left at that name) or, with ends NULL, the end. */
static void parse_statements(ctx *c, stmt ***list, int *n, const char *const *ends);

static void end_tag(ctx *c) {
    if (peek(c)->kind != T_END) die(c, peek(c)->pos, "expected '%%}'");
    c->at++;
}

static stmt *parse_if_rest(ctx *c, int pos) {
    static const char *const ends[] = {"endif", "elif", "else", NULL};
    stmt *s = node(c, sizeof *s);
    s->kind = S_IF, s->pos = pos;
    s->e = parse_expr(c);
    end_tag(c);
    parse_statements(c, &s->body, &s->nbody, ends);
    tok *kw = &c->t[c->at++];
    if (is_name(kw, "elif")) {
        add_stmt(c, &s->orelse, &s->norelse, parse_if_rest(c, kw->pos));
        return s; /* the nested if consumed endif */
    }
    if (is_name(kw, "else")) {
        static const char *const only_end[] = {"endif", NULL};
        end_tag(c);
        parse_statements(c, &s->orelse, &s->norelse, only_end);
        c->at++;
    }
    end_tag(c);
    return s;
}

static void parse_statements(ctx *c, stmt ***list, int *n, const char *const *ends) {
    for (;;) {
        tok *t = peek(c);
        if (t->kind == T_EOF) {
            if (ends) die(c, t->pos, "missing {%% %s %%}", ends[0]);
            return;
        }
        if (t->kind == T_TEXT || t->kind == T_OUT_BEGIN) {
            if (t->kind == T_TEXT) {
                stmt *s = node(c, sizeof *s);
                s->kind = S_TEXT, s->text = t->s, s->len = t->len, s->pos = t->pos;
                add_stmt(c, list, n, s);
                c->at++;
            } else {
                c->at++;
                stmt *s = node(c, sizeof *s);
                s->kind = S_OUT, s->pos = t->pos, s->e = parse_expr(c);
                if (peek(c)->kind != T_END) die(c, peek(c)->pos, "expected '}}'");
                c->at++;
                add_stmt(c, list, n, s);
            }
            continue;
        }
        tok *kw = &c->t[c->at + 1];
        if (kw->kind != T_NAME) die(c, kw->pos, "expected a statement name");
        for (int i = 0; ends && ends[i]; i++)
            if (is_name(kw, ends[i])) {
                c->at++; /* left at the name */
                return;
            }
        c->at += 2;
        if (is_name(kw, "if")) {
            add_stmt(c, list, n, parse_if_rest(c, kw->pos));
        } else if (is_name(kw, "for")) {
            static const char *const ends_for[] = {"endfor", "else", NULL};
            stmt *s = node(c, sizeof *s);
            s->kind = S_FOR, s->pos = kw->pos;
            tok *v = expect_name(c);
            s->var[0] = v->s, s->var_len[0] = v->len;
            if (is_op(peek(c), ",")) {
                c->at++;
                v = expect_name(c);
                s->var[1] = v->s, s->var_len[1] = v->len;
            }
            if (!is_name(peek(c), "in")) die(c, peek(c)->pos, "expected 'in'");
            c->at++;
            s->e = parse_or(c);
            if (is_name(peek(c), "if")) {
                c->at++;
                s->filter = parse_or(c);
            }
            if (is_name(peek(c), "recursive")) die(c, peek(c)->pos, "recursive loops are not supported");
            end_tag(c);
            parse_statements(c, &s->body, &s->nbody, ends_for);
            tok *k2 = &c->t[c->at++];
            if (is_name(k2, "else")) {
                static const char *const only_end[] = {"endfor", NULL};
                end_tag(c);
                parse_statements(c, &s->orelse, &s->norelse, only_end);
                c->at++;
            }
            end_tag(c);
            add_stmt(c, list, n, s);
        } else if (is_name(kw, "set")) {
            stmt *s = node(c, sizeof *s);
            s->kind = S_SET, s->pos = kw->pos;
            tok *v = expect_name(c);
            s->var[0] = v->s, s->var_len[0] = v->len;
            if (is_op(peek(c), ".")) {
                c->at++;
                v = expect_name(c);
                s->var[1] = v->s, s->var_len[1] = v->len;
            }
            if (!is_op(peek(c), "=")) die(c, peek(c)->pos, "block assignments ({%% set x %%}...{%% endset %%}) are not supported");
            c->at++;
            s->e = parse_expr(c);
            end_tag(c);
            add_stmt(c, list, n, s);
        } else {
            die(c, kw->pos, "the statement '%.*s' is not supported", (int)kw->len, kw->s);
        }
    }
}

/* ---- values -------------------------------------------------------------------------------- */

typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_LOOP, V_METHOD, V_FUNC } val_kind;

typedef struct {
    val_kind k;
    long long i;
    double f;
    const char *s;  /* V_STR (NUL-terminated), V_METHOD / V_FUNC name */
    size_t len;
    const cJSON *j; /* V_LIST, V_DICT; V_METHOD: its object's JSON when a list or dict */
    int index, length; /* V_LOOP */
    const struct val_box *self; /* V_METHOD */
} val;

struct val_box {
    val v;
};

static val v_undef(void) { return (val){.k = V_UNDEF}; }
static val v_none(void) { return (val){.k = V_NONE}; }
static val v_bool(int b) { return (val){.k = V_BOOL, .i = !!b}; }
static val v_int(long long i) { return (val){.k = V_INT, .i = i}; }
static val v_str(const char *s, size_t n) { return (val){.k = V_STR, .s = s, .len = n}; }

static val v_of_json(const cJSON *j) {
    if (!j) return v_undef();
    if (cJSON_IsString(j)) return v_str(j->valuestring, strlen(j->valuestring));
    if (cJSON_IsBool(j)) return v_bool(cJSON_IsTrue(j));
    if (cJSON_IsNull(j)) return v_none();
    if (cJSON_IsNumber(j)) {
        if (floor(j->valuedouble) == j->valuedouble && fabs(j->valuedouble) < 9e15) return v_int((long long)j->valuedouble);
        return (val){.k = V_FLOAT, .f = j->valuedouble};
    }
    if (cJSON_IsArray(j)) return (val){.k = V_LIST, .j = j};
    if (cJSON_IsObject(j)) return (val){.k = V_DICT, .j = j};
    return v_undef();
}

static cJSON *own_json(ctx *c, cJSON *j) {
    own(c, j);
    c->owned[c->n_owned - 1] = (void *)((uintptr_t)j | 1); /* tagged: cJSON_Delete at the end */
    return j;
}

static cJSON *json_of(ctx *c, val v, int pos) {
    switch (v.k) {
    case V_NONE: case V_UNDEF: return cJSON_CreateNull();
    case V_BOOL: return cJSON_CreateBool((int)v.i);
    case V_INT: return cJSON_CreateNumber((double)v.i);
    case V_FLOAT: return cJSON_CreateNumber(v.f);
    case V_STR: return cJSON_CreateString(v.s);
    case V_LIST: case V_DICT: return cJSON_Duplicate(v.j, 1);
    default: die(c, pos, "this value cannot be stored");
    }
}

static int truthy(val v) {
    switch (v.k) {
    case V_BOOL: case V_INT: return v.i != 0;
    case V_FLOAT: return v.f != 0;
    case V_STR: return v.len > 0;
    case V_LIST: case V_DICT: return v.j->child != NULL;
    case V_LOOP: case V_METHOD: case V_FUNC: return 1;
    default: return 0;
    }
}

/* ---- output -------------------------------------------------------------------------------- */

static void emit(ctx *c, const char *s, size_t n) {
    if (c->out_len + n + 1 > c->out_cap) {
        c->out_cap = (c->out_len + n + 1) * 2;
        c->out = lj_realloc(c->out, c->out_cap);
    }
    memcpy(c->out + c->out_len, s, n);
    c->out_len += n;
    c->out[c->out_len] = 0;
}

/* Python's json.dumps(x, ensure_ascii=False) with its default separators (transformers' tojson). */
static void dump_json(ctx *c, const cJSON *j, char **b, size_t *n, size_t *cap);

static void sb_put(char **b, size_t *n, size_t *cap, const char *s, size_t len) {
    if (*n + len + 1 > *cap) {
        *cap = (*n + len + 1) * 2;
        *b = lj_realloc(*b, *cap);
    }
    memcpy(*b + *n, s, len);
    *n += len;
    (*b)[*n] = 0;
}

static void dump_json(ctx *c, const cJSON *j, char **b, size_t *n, size_t *cap) {
    if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
        const int obj = cJSON_IsObject(j);
        sb_put(b, n, cap, obj ? "{" : "[", 1);
        for (const cJSON *x = j->child; x; x = x->next) {
            if (x != j->child) sb_put(b, n, cap, ", ", 2);
            if (obj) {
                cJSON *k = cJSON_CreateString(x->string);
                char *ks = cJSON_PrintUnformatted(k);
                sb_put(b, n, cap, ks, strlen(ks));
                free(ks);
                cJSON_Delete(k);
                sb_put(b, n, cap, ": ", 2);
            }
            dump_json(c, x, b, n, cap);
        }
        sb_put(b, n, cap, obj ? "}" : "]", 1);
        return;
    }
    char *s = cJSON_PrintUnformatted(j);
    sb_put(b, n, cap, s, strlen(s));
    free(s);
}

/* str(v) as Python prints it; the result lives until the end of the render. */
static val to_str(ctx *c, val v, int pos) {
    char buf[64];
    switch (v.k) {
    case V_STR: return v;
    case V_UNDEF: return v_str("", 0);
    case V_NONE: return v_str("None", 4);
    case V_BOOL: return v.i ? v_str("True", 4) : v_str("False", 5);
    case V_INT: snprintf(buf, sizeof buf, "%lld", v.i); break;
    case V_FLOAT: snprintf(buf, sizeof buf, "%.17g", v.f); {
            /* Python's repr: the shortest that round-trips, with a ".0" for integral values */
            for (int p = 1; p <= 17; p++) {
                snprintf(buf, sizeof buf, "%.*g", p, v.f);
                if (strtod(buf, NULL) == v.f) break;
            }
            if (!strpbrk(buf, ".eninf")) strcat(buf, ".0");
        }
        break;
    case V_LIST: case V_DICT: {
        char *b = NULL;
        size_t n = 0, cap = 0;
        dump_json(c, v.j, &b, &n, &cap);
        own(c, b);
        return v_str(b, n);
    }
    default: die(c, pos, "this value cannot be printed");
    }
    const size_t n = strlen(buf);
    return v_str(copy_str(c, buf, n), n);
}

/* ---- scopes -------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    size_t len;
    val v;
    int depth;
} binding;

typedef struct {
    ctx *c;
    const cJSON *globals;
    binding *b;
    int n, cap, depth;
} env;

static void bind(env *en, const char *name, size_t len, val v) {
    for (int i = en->n - 1; i >= 0 && en->b[i].depth == en->depth; i--)
        if (en->b[i].len == len && !strncmp(en->b[i].name, name, len)) {
            en->b[i].v = v;
            return;
        }
    if (en->n == en->cap) {
        en->cap = en->cap ? 2 * en->cap : 32;
        en->b = lj_realloc(en->b, (size_t)en->cap * sizeof(binding));
    }
    en->b[en->n++] = (binding){name, len, v, en->depth};
}

static val lookup(env *en, const char *name, size_t len) {
    for (int i = en->n - 1; i >= 0; i--)
        if (en->b[i].len == len && !strncmp(en->b[i].name, name, len)) return en->b[i].v;
    char key[128];
    if (len >= sizeof key) return v_undef();
    memcpy(key, name, len);
    key[len] = 0;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(en->globals, key);
    if (g) return v_of_json(g);
    static const char *const funcs[] = {"raise_exception", "namespace", "strftime_now", "range", NULL};
    for (int i = 0; funcs[i]; i++)
        if (!strcmp(key, funcs[i])) return (val){.k = V_FUNC, .s = funcs[i]};
    return v_undef();
}

/* ---- evaluation ---------------------------------------------------------------------------- */

static val eval(env *en, const expr *e);

static int name_is(const expr *e, const char *n) { return e->len == strlen(n) && !strncmp(e->s, n, e->len); }

static val box_method(env *en, val self, const char *name) {
    struct val_box *b = node(en->c, sizeof *b);
    b->v = self;
    return (val){.k = V_METHOD, .s = name, .self = b};
}

static val attr(env *en, val obj, const char *name, size_t len, int pos) {
    char key[128];
    if (len >= sizeof key) die(en->c, pos, "attribute name too long");
    memcpy(key, name, len);
    key[len] = 0;
    if (obj.k == V_LOOP) {
        if (!strcmp(key, "index0")) return v_int(obj.index);
        if (!strcmp(key, "index")) return v_int(obj.index + 1);
        if (!strcmp(key, "first")) return v_bool(obj.index == 0);
        if (!strcmp(key, "last")) return v_bool(obj.index == obj.length - 1);
        if (!strcmp(key, "length")) return v_int(obj.length);
        if (!strcmp(key, "revindex")) return v_int(obj.length - obj.index);
        if (!strcmp(key, "revindex0")) return v_int(obj.length - obj.index - 1);
        die(en->c, pos, "loop.%s is not supported", key);
    }
    if (obj.k == V_DICT) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj.j, key);
        if (x) return v_of_json(x);
        static const char *const methods[] = {"get", "items", "keys", "values", NULL};
        for (int i = 0; methods[i]; i++)
            if (!strcmp(key, methods[i])) return box_method(en, obj, methods[i]);
        return v_undef();
    }
    if (obj.k == V_STR) {
        static const char *const methods[] = {"startswith", "endswith", "split", "strip", "lstrip", "rstrip", "replace",
                                              "upper", "lower", "title", NULL};
        for (int i = 0; methods[i]; i++)
            if (!strcmp(key, methods[i])) return box_method(en, obj, methods[i]);
    }
    if (obj.k == V_UNDEF) die(en->c, pos, "'%s' of an undefined value", key);
    return v_undef();
}

static val index_of(env *en, val obj, val k, int pos) {
    if (obj.k == V_LIST) {
        if (k.k != V_INT) die(en->c, pos, "a list index must be an integer");
        const int n = cJSON_GetArraySize(obj.j);
        long long i = k.i < 0 ? k.i + n : k.i;
        if (i < 0 || i >= n) return v_undef();
        return v_of_json(cJSON_GetArrayItem(obj.j, (int)i));
    }
    if (obj.k == V_DICT) {
        if (k.k != V_STR) return v_undef();
        return v_of_json(cJSON_GetObjectItemCaseSensitive(obj.j, k.s));
    }
    if (obj.k == V_STR && k.k == V_INT) {
        long long i = k.i < 0 ? k.i + (long long)obj.len : k.i;
        if (i < 0 || i >= (long long)obj.len) return v_undef();
        return v_str(copy_str(en->c, obj.s + i, 1), 1);
    }
    if (obj.k == V_LOOP && k.k == V_STR) return attr(en, obj, k.s, k.len, pos);
    if (obj.k == V_UNDEF) die(en->c, pos, "subscript of an undefined value");
    return v_undef();
}

static val slice_of(env *en, val obj, const expr *e) {
    long long a[3] = {0, 0, 1};
    int given[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++)
        if (e->args[i]) {
            val v = eval(en, e->args[i]);
            if (v.k != V_INT) die(en->c, e->pos, "slice bounds must be integers");
            a[i] = v.i, given[i] = 1;
        }
    if (a[2] == 0) die(en->c, e->pos, "slice step 0");
    long long n;
    if (obj.k == V_LIST) n = cJSON_GetArraySize(obj.j);
    else if (obj.k == V_STR) n = (long long)obj.len;
    else die(en->c, e->pos, "slice of a value that is not a list or string");
    /* Python's slice.indices */
    long long start, stop, step = a[2];
    if (step > 0) {
        start = given[0] ? (a[0] < 0 ? (a[0] + n < 0 ? 0 : a[0] + n) : (a[0] > n ? n : a[0])) : 0;
        stop = given[1] ? (a[1] < 0 ? (a[1] + n < 0 ? 0 : a[1] + n) : (a[1] > n ? n : a[1])) : n;
    } else {
        start = given[0] ? (a[0] < 0 ? (a[0] + n < 0 ? -1 : a[0] + n) : (a[0] >= n ? n - 1 : a[0])) : n - 1;
        stop = given[1] ? (a[1] < 0 ? (a[1] + n < 0 ? -1 : a[1] + n) : (a[1] >= n ? n - 1 : a[1])) : -1;
    }
    if (obj.k == V_STR) {
        char *s = lj_malloc((size_t)n + 1);
        size_t k = 0;
        for (long long i = start; step > 0 ? i < stop : i > stop; i += step) s[k++] = obj.s[i];
        s[k] = 0;
        own(en->c, s);
        return v_str(s, k);
    }
    cJSON *out = own_json(en->c, cJSON_CreateArray());
    for (long long i = start; step > 0 ? i < stop : i > stop; i += step)
        cJSON_AddItemToArray(out, cJSON_Duplicate(cJSON_GetArrayItem(obj.j, (int)i), 1));
    return (val){.k = V_LIST, .j = out};
}

static int equal(val a, val b) {
    if ((a.k == V_INT || a.k == V_BOOL) && (b.k == V_INT || b.k == V_BOOL)) return a.i == b.i;
    if ((a.k == V_INT || a.k == V_FLOAT) && (b.k == V_INT || b.k == V_FLOAT))
        return (a.k == V_INT ? (double)a.i : a.f) == (b.k == V_INT ? (double)b.i : b.f);
    if (a.k == V_STR && b.k == V_STR) return a.len == b.len && !memcmp(a.s, b.s, a.len);
    if (a.k == V_NONE && b.k == V_NONE) return 1;
    if (a.k == V_UNDEF && b.k == V_UNDEF) return 1;
    if ((a.k == V_LIST && b.k == V_LIST) || (a.k == V_DICT && b.k == V_DICT)) return cJSON_Compare(a.j, b.j, 1);
    return 0;
}

static double num(env *en, val v, int pos) {
    if (v.k == V_INT || v.k == V_BOOL) return (double)v.i;
    if (v.k == V_FLOAT) return v.f;
    die(en->c, pos, "a number was expected");
}

static val concat(env *en, val a, val b) {
    char *s = lj_malloc(a.len + b.len + 1);
    memcpy(s, a.s, a.len);
    memcpy(s + a.len, b.s, b.len);
    s[a.len + b.len] = 0;
    own(en->c, s);
    return v_str(s, a.len + b.len);
}

/* Python's str.strip family: chars NULL = whitespace. */
static val strip(env *en, val s, const val *chars, int left, int right) {
    const char *set = chars && chars->k == V_STR ? chars->s : " \t\n\r\f\v";
    size_t a = 0, b = s.len;
    if (left)
        while (a < b && strchr(set, s.s[a]) && s.s[a]) a++;
    if (right)
        while (b > a && strchr(set, s.s[b - 1]) && s.s[b - 1]) b--;
    return v_str(copy_str(en->c, s.s + a, b - a), b - a);
}

static val call_method(env *en, val self, const char *m, val *args, int nargs, int pos) {
    if (self.k == V_STR) {
        if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
            if (nargs != 1 || args[0].k != V_STR) die(en->c, pos, "%s takes one string", m);
            if (args[0].len > self.len) return v_bool(0);
            const char *at = m[0] == 's' ? self.s : self.s + self.len - args[0].len;
            return v_bool(!memcmp(at, args[0].s, args[0].len));
        }
        if (!strcmp(m, "strip")) return strip(en, self, nargs ? &args[0] : NULL, 1, 1);
        if (!strcmp(m, "lstrip")) return strip(en, self, nargs ? &args[0] : NULL, 1, 0);
        if (!strcmp(m, "rstrip")) return strip(en, self, nargs ? &args[0] : NULL, 0, 1);
        if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "title")) {
            char *s = copy_str(en->c, self.s, self.len);
            int start = 1;
            for (size_t i = 0; i < self.len; i++) {
                const unsigned char ch = (unsigned char)s[i];
                if (m[0] == 'u') s[i] = (char)toupper(ch);
                else if (m[0] == 'l') s[i] = (char)tolower(ch);
                else s[i] = (char)(start ? toupper(ch) : tolower(ch));
                start = !isalpha(ch);
            }
            return v_str(s, self.len);
        }
        if (!strcmp(m, "split")) {
            cJSON *out = own_json(en->c, cJSON_CreateArray());
            if (nargs == 0 || args[0].k == V_NONE) { /* whitespace runs */
                size_t i = 0;
                while (i < self.len) {
                    while (i < self.len && isspace((unsigned char)self.s[i])) i++;
                    size_t j = i;
                    while (j < self.len && !isspace((unsigned char)self.s[j])) j++;
                    if (j > i) cJSON_AddItemToArray(out, cJSON_CreateString(copy_str(en->c, self.s + i, j - i)));
                    i = j;
                }
            } else {
                if (args[0].k != V_STR || args[0].len == 0) die(en->c, pos, "split takes a non-empty string");
                const char *p = self.s, *end = self.s + self.len;
                for (;;) {
                    const char *q = strstr(p, args[0].s);
                    if (!q || q > end) q = end;
                    cJSON_AddItemToArray(out, cJSON_CreateString(copy_str(en->c, p, (size_t)(q - p))));
                    if (q == end) break;
                    p = q + args[0].len;
                }
            }
            return (val){.k = V_LIST, .j = out};
        }
        if (!strcmp(m, "replace")) {
            if (nargs != 2 || args[0].k != V_STR || args[1].k != V_STR || !args[0].len) die(en->c, pos, "replace takes two strings");
            char *b = NULL;
            size_t n = 0, cap = 0;
            sb_put(&b, &n, &cap, "", 0);
            const char *p = self.s;
            for (const char *q; (q = strstr(p, args[0].s));) {
                sb_put(&b, &n, &cap, p, (size_t)(q - p));
                sb_put(&b, &n, &cap, args[1].s, args[1].len);
                p = q + args[0].len;
            }
            sb_put(&b, &n, &cap, p, strlen(p));
            own(en->c, b);
            return v_str(b, n);
        }
    }
    if (self.k == V_DICT) {
        if (!strcmp(m, "get")) {
            if (nargs < 1 || args[0].k != V_STR) die(en->c, pos, "get takes a key");
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(self.j, args[0].s);
            return x ? v_of_json(x) : nargs > 1 ? args[1] : v_none();
        }
        cJSON *out = own_json(en->c, cJSON_CreateArray());
        for (const cJSON *x = self.j->child; x; x = x->next) {
            if (!strcmp(m, "keys")) cJSON_AddItemToArray(out, cJSON_CreateString(x->string));
            else if (!strcmp(m, "values")) cJSON_AddItemToArray(out, cJSON_Duplicate(x, 1));
            else {
                cJSON *pair = cJSON_CreateArray();
                cJSON_AddItemToArray(pair, cJSON_CreateString(x->string));
                cJSON_AddItemToArray(pair, cJSON_Duplicate(x, 1));
                cJSON_AddItemToArray(out, pair);
            }
        }
        return (val){.k = V_LIST, .j = out};
    }
    die(en->c, pos, "the method '%s' is not supported here", m);
}

static val call(env *en, const expr *e) {
    val f = eval(en, e->a);
    val args[8];
    if (e->nargs > 8) die(en->c, e->pos, "too many arguments");
    for (int i = 0; i < e->nargs; i++) args[i] = eval(en, e->args[i]);
    if (f.k == V_METHOD) return call_method(en, f.self->v, f.s, args, e->nargs, e->pos);
    if (f.k != V_FUNC) die(en->c, e->pos, "call of a value that is not a function");
    if (!strcmp(f.s, "raise_exception")) {
        val m = e->nargs ? to_str(en->c, args[0], e->pos) : v_str("error", 5);
        die(en->c, e->pos, "the template raised: %.150s", m.s);
    }
    if (!strcmp(f.s, "namespace")) {
        cJSON *ns = own_json(en->c, cJSON_CreateObject());
        for (int i = 0; i < e->nargs; i++) {
            if (!e->kw[i]) die(en->c, e->pos, "namespace() takes keyword arguments");
            cJSON_AddItemToObject(ns, e->kw[i], json_of(en->c, args[i], e->pos));
        }
        return (val){.k = V_DICT, .j = ns};
    }
    if (!strcmp(f.s, "strftime_now")) {
        if (e->nargs != 1 || args[0].k != V_STR) die(en->c, e->pos, "strftime_now takes a format");
        char buf[128];
        const time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        const size_t n = strftime(buf, sizeof buf, args[0].s, &tm);
        return v_str(copy_str(en->c, buf, n), n);
    }
    /* range */
    long long a = 0, b = 0, st = 1;
    if (e->nargs == 1) b = (long long)num(en, args[0], e->pos);
    else if (e->nargs >= 2) a = (long long)num(en, args[0], e->pos), b = (long long)num(en, args[1], e->pos);
    if (e->nargs == 3) st = (long long)num(en, args[2], e->pos);
    if (st == 0 || (b - a) / st > 100000) die(en->c, e->pos, "range() out of bounds");
    cJSON *out = own_json(en->c, cJSON_CreateArray());
    for (long long i = a; st > 0 ? i < b : i > b; i += st) cJSON_AddItemToArray(out, cJSON_CreateNumber((double)i));
    return (val){.k = V_LIST, .j = out};
}

static val filter(env *en, const expr *e) {
    val v = eval(en, e->a);
    val args[4];
    if (e->nargs > 4) die(en->c, e->pos, "too many filter arguments");
    for (int i = 0; i < e->nargs; i++) args[i] = eval(en, e->args[i]);
    if (name_is(e, "trim")) {
        if (v.k != V_STR) v = to_str(en->c, v, e->pos);
        return strip(en, v, e->nargs ? &args[0] : NULL, 1, 1);
    }
    if (name_is(e, "length") || name_is(e, "count")) {
        if (v.k == V_STR) return v_int((long long)v.len);
        if (v.k == V_LIST || v.k == V_DICT) return v_int(cJSON_GetArraySize(v.j));
        die(en->c, e->pos, "length of a value without one");
    }
    if (name_is(e, "tojson")) {
        cJSON *j = json_of(en->c, v, e->pos);
        char *b = NULL;
        size_t n = 0, cap = 0;
        sb_put(&b, &n, &cap, "", 0);
        if (e->nargs) { /* indent: Python's layout is not reproduced */
            cJSON_Delete(j);
            free(b);
            die(en->c, e->pos, "tojson(indent=...) is not supported");
        }
        dump_json(en->c, j, &b, &n, &cap);
        cJSON_Delete(j);
        own(en->c, b);
        return v_str(b, n);
    }
    if (name_is(e, "string")) return to_str(en->c, v, e->pos);
    if (name_is(e, "safe")) return v;
    if (name_is(e, "lower") || name_is(e, "upper") || name_is(e, "title"))
        return call_method(en, v.k == V_STR ? v : to_str(en->c, v, e->pos), name_is(e, "lower") ? "lower" : name_is(e, "upper") ? "upper" : "title", NULL, 0, e->pos);
    if (name_is(e, "default") || name_is(e, "d")) {
        const int boolean = e->nargs > 1 && truthy(args[1]);
        if (v.k == V_UNDEF || (boolean && !truthy(v))) return e->nargs ? args[0] : v_str("", 0);
        return v;
    }
    if (name_is(e, "first") || name_is(e, "last")) {
        if (v.k != V_LIST) die(en->c, e->pos, "first/last of a value that is not a list");
        const int n = cJSON_GetArraySize(v.j);
        if (!n) return v_undef();
        return v_of_json(cJSON_GetArrayItem(v.j, name_is(e, "first") ? 0 : n - 1));
    }
    if (name_is(e, "join")) {
        if (v.k != V_LIST) die(en->c, e->pos, "join of a value that is not a list");
        val sep = e->nargs ? args[0] : v_str("", 0);
        val acc = v_str("", 0);
        int first = 1;
        for (const cJSON *x = v.j->child; x; x = x->next) {
            if (!first) acc = concat(en, acc, sep);
            acc = concat(en, acc, to_str(en->c, v_of_json(x), e->pos));
            first = 0;
        }
        return acc;
    }
    if (name_is(e, "items")) return call_method(en, v, "items", NULL, 0, e->pos);
    if (name_is(e, "list")) return v;
    if (name_is(e, "int")) {
        if (v.k == V_STR) return v_int(strtoll(v.s, NULL, 10));
        return v_int((long long)num(en, v, e->pos));
    }
    die(en->c, e->pos, "the filter '%.*s' is not supported", (int)e->len, e->s);
}

static val test(env *en, const expr *e) {
    val v = eval(en, e->a);
    int r;
    if (name_is(e, "defined")) r = v.k != V_UNDEF;
    else if (name_is(e, "undefined")) r = v.k == V_UNDEF;
    else if (name_is(e, "none")) r = v.k == V_NONE;
    else if (name_is(e, "string")) r = v.k == V_STR;
    else if (name_is(e, "number")) r = v.k == V_INT || v.k == V_FLOAT;
    else if (name_is(e, "mapping")) r = v.k == V_DICT;
    else if (name_is(e, "iterable")) r = v.k == V_LIST || v.k == V_DICT || v.k == V_STR;
    else if (name_is(e, "sequence")) r = v.k == V_LIST || v.k == V_STR || v.k == V_DICT;
    else if (name_is(e, "boolean")) r = v.k == V_BOOL;
    else if (name_is(e, "true")) r = v.k == V_BOOL && v.i;
    else if (name_is(e, "false")) r = v.k == V_BOOL && !v.i;
    else if ((name_is(e, "eq") || name_is(e, "equalto") || name_is(e, "sameas")) && e->nargs == 1) r = equal(v, eval(en, e->args[0]));
    else die(en->c, e->pos, "the test '%.*s' is not supported", (int)e->len, e->s);
    return v_bool(e->negate ? !r : r);
}

static val eval(env *en, const expr *e) {
    switch (e->kind) {
    case E_LIT_STR: return v_str(e->s, e->len);
    case E_LIT_INT: return v_int(e->i);
    case E_LIT_FLOAT: return (val){.k = V_FLOAT, .f = e->f};
    case E_LIT_BOOL: return v_bool((int)e->i);
    case E_LIT_NONE: return v_none();
    case E_NAME: return lookup(en, e->s, e->len);
    case E_LIST: {
        cJSON *out = own_json(en->c, cJSON_CreateArray());
        for (int i = 0; i < e->nargs; i++) cJSON_AddItemToArray(out, json_of(en->c, eval(en, e->args[i]), e->pos));
        return (val){.k = V_LIST, .j = out};
    }
    case E_DICT: {
        cJSON *out = own_json(en->c, cJSON_CreateObject());
        for (int i = 0; i + 1 < e->nargs; i += 2) {
            val k = eval(en, e->args[i]);
            if (k.k != V_STR) die(en->c, e->pos, "dict keys must be strings");
            cJSON_AddItemToObject(out, k.s, json_of(en->c, eval(en, e->args[i + 1]), e->pos));
        }
        return (val){.k = V_DICT, .j = out};
    }
    case E_ATTR: return attr(en, eval(en, e->a), e->s, e->len, e->pos);
    case E_INDEX: return index_of(en, eval(en, e->a), eval(en, e->b), e->pos);
    case E_SLICE: return slice_of(en, eval(en, e->a), e);
    case E_CALL: return call(en, e);
    case E_FILTER: return filter(en, e);
    case E_TEST: return test(en, e);
    case E_NOT: return v_bool(!truthy(eval(en, e->a)));
    case E_NEG: {
        val v = eval(en, e->a);
        if (v.k == V_INT) return v_int(-v.i);
        return (val){.k = V_FLOAT, .f = -num(en, v, e->pos)};
    }
    case E_COND:
        if (truthy(eval(en, e->b))) return eval(en, e->a);
        return e->c ? eval(en, e->c) : v_undef();
    case E_BIN: break;
    }
    /* binary operators */
    const char *op = e->s;
    const size_t ol = e->len;
    if (ol == 3 && !strncmp(op, "and", 3)) {
        val a = eval(en, e->a);
        return truthy(a) ? eval(en, e->b) : a;
    }
    if (ol == 2 && !strncmp(op, "or", 2)) {
        val a = eval(en, e->a);
        return truthy(a) ? a : eval(en, e->b);
    }
    val a = eval(en, e->a), b = eval(en, e->b);
    if (ol == 2 && !strncmp(op, "in", 2)) {
        if (b.k == V_STR) {
            if (a.k != V_STR) die(en->c, e->pos, "'in <string>' needs a string on the left");
            return v_bool(strstr(b.s, a.s) != NULL);
        }
        if (b.k == V_LIST) {
            for (const cJSON *x = b.j->child; x; x = x->next)
                if (equal(a, v_of_json(x))) return v_bool(1);
            return v_bool(0);
        }
        if (b.k == V_DICT) return v_bool(a.k == V_STR && cJSON_GetObjectItemCaseSensitive(b.j, a.s) != NULL);
        if (b.k == V_UNDEF || b.k == V_NONE) die(en->c, e->pos, "'in' of an undefined value");
        return v_bool(0);
    }
    if (ol == 2 && !strncmp(op, "==", 2)) return v_bool(equal(a, b));
    if (ol == 2 && !strncmp(op, "!=", 2)) return v_bool(!equal(a, b));
    if (*op == '~') return concat(en, to_str(en->c, a, e->pos), to_str(en->c, b, e->pos));
    if (*op == '<' || *op == '>') {
        int cmp;
        if (a.k == V_STR && b.k == V_STR) {
            cmp = strcmp(a.s, b.s);
        } else {
            const double x = num(en, a, e->pos), y = num(en, b, e->pos);
            cmp = x < y ? -1 : x > y;
        }
        if (ol == 2) return v_bool(*op == '<' ? cmp <= 0 : cmp >= 0);
        return v_bool(*op == '<' ? cmp < 0 : cmp > 0);
    }
    if (*op == '+' && a.k == V_STR && b.k == V_STR) return concat(en, a, b);
    if (*op == '+' && a.k == V_LIST && b.k == V_LIST) {
        cJSON *out = own_json(en->c, cJSON_Duplicate(a.j, 1));
        for (const cJSON *x = b.j->child; x; x = x->next) cJSON_AddItemToArray(out, cJSON_Duplicate(x, 1));
        return (val){.k = V_LIST, .j = out};
    }
    if (*op == '+' && (a.k == V_STR || b.k == V_STR)) die(en->c, e->pos, "'+' of a string and a value that is not one");
    const int ints = (a.k == V_INT || a.k == V_BOOL) && (b.k == V_INT || b.k == V_BOOL);
    const double x = num(en, a, e->pos), y = num(en, b, e->pos);
    switch (*op) {
    case '+': return ints ? v_int(a.i + b.i) : (val){.k = V_FLOAT, .f = x + y};
    case '-': return ints ? v_int(a.i - b.i) : (val){.k = V_FLOAT, .f = x - y};
    case '*':
        if (a.k == V_STR && b.k == V_INT) break;
        return ints ? v_int(a.i * b.i) : (val){.k = V_FLOAT, .f = x * y};
    case '%':
        if (ints && b.i != 0) return v_int(((a.i % b.i) + b.i) % b.i);
        break;
    case '/':
        if (y == 0) die(en->c, e->pos, "division by zero");
        if (ol == 2) return ints ? v_int((long long)floor(x / y)) : (val){.k = V_FLOAT, .f = floor(x / y)};
        return (val){.k = V_FLOAT, .f = x / y};
    }
    die(en->c, e->pos, "the operator '%.*s' is not supported for these values", (int)ol, op);
}

static void exec_body(env *en, stmt **body, int n);

static void exec_stmt(env *en, const stmt *s) {
    switch (s->kind) {
    case S_TEXT: emit(en->c, s->text, s->len); return;
    case S_OUT: {
        val v = to_str(en->c, eval(en, s->e), s->pos);
        emit(en->c, v.s, v.len);
        return;
    }
    case S_IF:
        if (truthy(eval(en, s->e))) exec_body(en, s->body, s->nbody);
        else exec_body(en, s->orelse, s->norelse);
        return;
    case S_SET: {
        val v = eval(en, s->e);
        if (s->var[1]) { /* ns.attr = value */
            val ns = lookup(en, s->var[0], s->var_len[0]);
            if (ns.k != V_DICT) die(en->c, s->pos, "'%.*s' is not a namespace", (int)s->var_len[0], s->var[0]);
            char key[128];
            snprintf(key, sizeof key, "%.*s", (int)s->var_len[1], s->var[1]);
            cJSON *obj = (cJSON *)ns.j;
            cJSON *nv = json_of(en->c, v, s->pos);
            if (cJSON_GetObjectItemCaseSensitive(obj, key)) cJSON_ReplaceItemInObjectCaseSensitive(obj, key, nv);
            else cJSON_AddItemToObject(obj, key, nv);
        } else {
            bind(en, s->var[0], s->var_len[0], v);
        }
        return;
    }
    case S_FOR: {
        val it = eval(en, s->e);
        if (it.k == V_DICT && !s->var[1]) it = call_method(en, it, "keys", NULL, 0, s->pos);
        else if (it.k == V_DICT) it = call_method(en, it, "items", NULL, 0, s->pos);
        if (it.k == V_UNDEF || it.k == V_NONE) die(en->c, s->pos, "for over an undefined value");
        if (it.k != V_LIST) die(en->c, s->pos, "for over a value that is not a list");
        /* the items that pass the filter, so that loop.last and length count them only */
        const cJSON **items = lj_malloc(((size_t)cJSON_GetArraySize(it.j) + 1) * sizeof(cJSON *));
        own(en->c, items);
        int n = 0;
        en->depth++;
        for (const cJSON *x = it.j->child; x; x = x->next) {
            if (s->filter) {
                bind(en, s->var[0], s->var_len[0], v_of_json(x));
                if (!truthy(eval(en, s->filter))) continue;
            }
            items[n++] = x;
        }
        for (int i = 0; i < n; i++) {
            if (s->var[1]) {
                if (!cJSON_IsArray(items[i]) || cJSON_GetArraySize(items[i]) != 2) die(en->c, s->pos, "cannot unpack into two names");
                bind(en, s->var[0], s->var_len[0], v_of_json(cJSON_GetArrayItem(items[i], 0)));
                bind(en, s->var[1], s->var_len[1], v_of_json(cJSON_GetArrayItem(items[i], 1)));
            } else {
                bind(en, s->var[0], s->var_len[0], v_of_json(items[i]));
            }
            bind(en, "loop", 4, (val){.k = V_LOOP, .index = i, .length = n});
            exec_body(en, s->body, s->nbody);
        }
        /* leave the loop's scope */
        while (en->n > 0 && en->b[en->n - 1].depth == en->depth) en->n--;
        en->depth--;
        if (n == 0) exec_body(en, s->orelse, s->norelse);
        return;
    }
    }
}

static void exec_body(env *en, stmt **body, int n) {
    for (int i = 0; i < n; i++) exec_stmt(en, body[i]);
}

static void free_owned(ctx *c) {
    for (int i = 0; i < c->n_owned; i++) {
        const uintptr_t p = (uintptr_t)c->owned[i];
        if (p & 1) cJSON_Delete((cJSON *)(p & ~(uintptr_t)1));
        else free((void *)p);
    }
    free(c->owned);
}

lj_status lj_chat_template_render(const char *tmpl, const cJSON *vars, char **out) {
    ctx *c = lj_calloc(1, sizeof *c);
    c->src = tmpl;
    env en = {c, vars, NULL, 0, 0, 0};
    lj_status st = LJ_OK;
    if (setjmp(c->fail) == 0) {
        lex(c);
        stmt **body = NULL;
        int n = 0;
        parse_statements(c, &body, &n, NULL);
        emit(c, "", 0);
        exec_body(&en, body, n);
        *out = c->out;
        c->out = NULL;
    } else {
        st = lj_fail(LJ_ERR_FORMAT, "chat template: %s", c->err);
        free(c->out);
    }
    free(en.b);
    free(c->t);
    free_owned(c);
    free(c);
    return st;
}

#include "prog_flags.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gptx/gptx.h"

#define FIELD(o, f, type) ((type *)((char *)(o) + (f)->offset))
#define CFIELD(o, f, type) ((const type *)((const char *)(o) + (f)->offset))

int prog_usage_error(const char *prog, const char *flag, const char *value, const char *why) {
    int has_value = value && value[0];
    fprintf(stderr, "%s: %s%s%s: %s (see --help)\n", prog, flag, has_value ? " " : "",
            has_value ? value : "", why);
    return -1;
}

const prog_flag *prog_flags_find(const prog_cli *cli, const char *name) {
    for (size_t i = 0; i < cli->n_flags; i++)
        if (cli->flags[i].kind != PROG_FLAG_SECTION && !strcmp(cli->flags[i].name, name))
            return &cli->flags[i];
    return NULL;
}

/* Edit distance counting a swap of two neighbours as one edit ("--modle"
 * is one from "--model"): optimal string alignment. Names are short. */
static size_t edit_distance(const char *a, const char *b, size_t limit) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64 || (la > lb ? la - lb : lb - la) > limit) return limit + 1;
    size_t d[65][65];
    for (size_t i = 0; i <= la; i++) d[i][0] = i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

const char *prog_flags_suggest(const prog_cli *cli, const char *unknown) {
    size_t n = strlen(unknown);
    size_t limit = n / 3 > 2 ? n / 3 : 2;
    const char *best = NULL, *prefix = NULL;
    size_t best_d = limit + 1;
    int prefixes = 0;
    for (size_t i = 0; i < cli->n_flags; i++) {
        const prog_flag *f = &cli->flags[i];
        if (f->kind == PROG_FLAG_SECTION || (f->bits & PROG_FLAG_HIDDEN)) continue;
        size_t d = edit_distance(unknown, f->name, limit);
        if (d < best_d) {
            best_d = d;
            best = f->name;
        }
        if (n > 3 && !strncmp(f->name, unknown, n)) { /* "--mod" for "--model" */
            prefix = f->name;
            prefixes++;
        }
    }
    if (best) return best;
    return prefixes == 1 ? prefix : NULL;
}

/* Whether v is one of "a|b|c"; *index gets its position. */
static int in_choices(const char *choices, const char *v, int *index) {
    size_t n = strlen(v);
    int i = 0;
    for (const char *c = choices; *c; i++) {
        const char *end = strchr(c, '|');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (len == n && !strncmp(c, v, n)) {
            *index = i;
            return 1;
        }
        c += len + (end != NULL);
    }
    return 0;
}

/* The index-th name of "a|b|c" into buf, or NULL. */
static const char *choice_at(const char *choices, int index, char *buf, size_t cap) {
    const char *c = choices;
    for (int i = 0; c && *c; i++) {
        const char *end = strchr(c, '|');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (i == index) {
            snprintf(buf, cap, "%.*s", (int)len, c);
            return buf;
        }
        c = end ? end + 1 : NULL;
    }
    return NULL;
}

/* "one of a, b or c" */
static void choices_text(const char *choices, char *buf, size_t cap) {
    size_t at = (size_t)snprintf(buf, cap, "expected one of ");
    int count = 1;
    for (const char *c = choices; *c; c++) count += *c == '|';
    int i = 0;
    for (const char *c = choices; *c && at < cap; i++) {
        const char *end = strchr(c, '|');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        const char *sep = i == 0 ? "" : i == count - 1 ? " or " : ", ";
        at += (size_t)snprintf(buf + at, cap - at, "%s%.*s", sep, (int)len, c);
        c += len + (end != NULL);
    }
}

static void range_text(const prog_flag *f, int integer, char *buf, size_t cap) {
    int open = (f->bits & PROG_FLAG_OPEN_LO) != 0;
    if (integer && f->lo == 0 && f->hi == 1) snprintf(buf, cap, "expected 0 or 1");
    else if (integer) snprintf(buf, cap, "expected an integer from %.0f to %.0f", f->lo, f->hi);
    else snprintf(buf, cap, "expected a number in %c%g, %g]", open ? '(' : '[', f->lo, f->hi);
}

int prog_flags_set(const prog_cli *cli, const prog_flag *f, void *opts, const char *v) {
    char *end = NULL, why[256];
    errno = 0;
    switch (f->kind) {
    case PROG_FLAG_SECTION:
        return -1;
    case PROG_FLAG_STR:
        if (!v[0]) return prog_usage_error(cli->name, f->name, v, "needs a non-empty value");
        *FIELD(opts, f, const char *) = v;
        return 0;
    case PROG_FLAG_CHOICE:
    case PROG_FLAG_INDEX: {
        int idx;
        if (!in_choices(f->choices, v, &idx)) {
            choices_text(f->choices, why, sizeof why);
            return prog_usage_error(cli->name, f->name, v, why);
        }
        if (f->kind == PROG_FLAG_INDEX) *FIELD(opts, f, int) = idx;
        else *FIELD(opts, f, const char *) = v;
        return 0;
    }
    case PROG_FLAG_SWITCH:
    case PROG_FLAG_INT:
    case PROG_FLAG_I64: {
        long long x = strtoll(v, &end, 10);
        int open = (f->bits & PROG_FLAG_OPEN_LO) != 0;
        if (end == v || *end || errno || (double)x < f->lo || (open && (double)x == f->lo) ||
            (double)x > f->hi) {
            range_text(f, 1, why, sizeof why);
            return prog_usage_error(cli->name, f->name, v, why);
        }
        if (f->kind == PROG_FLAG_I64) *FIELD(opts, f, long long) = x;
        else *FIELD(opts, f, int) = (int)x;
        return 0;
    }
    case PROG_FLAG_FLOAT:
    case PROG_FLAG_DOUBLE: {
        double x = strtod(v, &end);
        /* the bounds hold for the value as stored: 3e-48 is a float 0 */
        if (f->kind == PROG_FLAG_FLOAT) x = (float)x;
        int open = (f->bits & PROG_FLAG_OPEN_LO) != 0;
        if (end == v || *end || errno || !isfinite(x) || x < f->lo || (open && x == f->lo) ||
            x > f->hi) {
            range_text(f, 0, why, sizeof why);
            return prog_usage_error(cli->name, f->name, v, why);
        }
        if (f->kind == PROG_FLAG_FLOAT) *FIELD(opts, f, float) = (float)x;
        else *FIELD(opts, f, double) = x;
        return 0;
    }
    case PROG_FLAG_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end || errno || v[0] == '-' || v[0] == '+')
            return prog_usage_error(cli->name, f->name, v, "expected an integer >= 0");
        *FIELD(opts, f, unsigned long long) = x;
        return 0;
    }
    }
    return -1;
}

const char *prog_flags_format(const prog_flag *f, const void *opts, char *buf, size_t cap) {
    switch (f->kind) {
    case PROG_FLAG_SECTION:
        return NULL;
    case PROG_FLAG_STR:
    case PROG_FLAG_CHOICE:
        return *CFIELD(opts, f, char *);
    case PROG_FLAG_INDEX:
        return choice_at(f->choices, *CFIELD(opts, f, int), buf, cap);
    case PROG_FLAG_INT:
    case PROG_FLAG_SWITCH:
        snprintf(buf, cap, "%d", *CFIELD(opts, f, int));
        return buf;
    case PROG_FLAG_I64:
        snprintf(buf, cap, "%lld", *CFIELD(opts, f, long long));
        return buf;
    case PROG_FLAG_FLOAT: { /* the shortest text that reads back as the same float */
        float x = *CFIELD(opts, f, float);
        for (int digits = 6; digits <= 9; digits++) {
            snprintf(buf, cap, "%.*g", digits, (double)x);
            if (strtof(buf, NULL) == x) break;
        }
        return buf;
    }
    case PROG_FLAG_DOUBLE: {
        double x = *CFIELD(opts, f, double);
        for (int digits = 6; digits <= 17; digits++) {
            snprintf(buf, cap, "%.*g", digits, x);
            if (strtod(buf, NULL) == x) break;
        }
        return buf;
    }
    case PROG_FLAG_U64:
        snprintf(buf, cap, "%llu", *CFIELD(opts, f, unsigned long long));
        return buf;
    }
    return NULL;
}

static const char *default_arg(const prog_flag *f) {
    if (f->arg) return f->arg;
    switch (f->kind) {
    case PROG_FLAG_INT: case PROG_FLAG_I64: case PROG_FLAG_U64: return "N";
    case PROG_FLAG_FLOAT: case PROG_FLAG_DOUBLE: return "X";
    case PROG_FLAG_CHOICE: case PROG_FLAG_INDEX: return "NAME";
    case PROG_FLAG_STR: return "VALUE";
    default: return "";
    }
}

enum { HELP_COLUMN = 26 };

void prog_flags_help(const prog_cli *cli, const void *defaults, FILE *out) {
    if (cli->synopsis) fputs(cli->synopsis, out);
    for (size_t i = 0; i < cli->n_flags; i++) {
        const prog_flag *f = &cli->flags[i];
        if (f->bits & PROG_FLAG_HIDDEN) continue;
        if (f->kind == PROG_FLAG_SECTION) {
            fprintf(out, "%s\n", f->name);
            continue;
        }
        int width = fprintf(out, "  %s%s%s", f->name, f->kind == PROG_FLAG_SWITCH ? "" : " ",
                            f->kind == PROG_FLAG_SWITCH ? "" : default_arg(f));
        const char *help = f->help ? f->help : "";
        if (width + 1 > HELP_COLUMN) {
            fputc('\n', out);
            width = 0;
        }
        /* each line of the help at the column */
        for (const char *line = help; ;) {
            const char *nl = strchr(line, '\n');
            int len = nl ? (int)(nl - line) : (int)strlen(line);
            fprintf(out, "%*s%.*s", HELP_COLUMN - width, "", len, line);
            width = 0;
            if (!nl) break;
            fputc('\n', out);
            line = nl + 1;
        }
        char buf[64];
        const char *v = NULL;
        if (defaults && !(f->bits & PROG_FLAG_NO_DEFAULT) && f->kind != PROG_FLAG_SWITCH)
            v = prog_flags_format(f, defaults, buf, sizeof buf);
        if (v) fprintf(out, " (default %s)", v);
        fputc('\n', out);
    }
    if (cli->epilogue) fputs(cli->epilogue, out);
}

int prog_flags_parse(const prog_cli *cli, void *opts, unsigned char *given, int argc,
                     char **argv, const void *defaults) {
    unsigned char seen[256] = {0};
    if (cli->n_flags > sizeof seen) {
        fprintf(stderr, "%s: internal error: %zu flags, at most %zu\n", cli->name, cli->n_flags,
                sizeof seen);
        return -1;
    }
    if (given) memset(given, 0, cli->n_flags);
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            prog_flags_help(cli, defaults, stdout);
            return 1;
        }
        if (!strcmp(k, "--version")) {
            printf("%s %s\n", cli->name, gptx_version());
            return 1;
        }
        if (strncmp(k, "--", 2) != 0 || !k[2])
            return prog_usage_error(cli->name, k, NULL, "unexpected argument (flags start with --)");
        const char *eq = strchr(k, '=');
        char name[128];
        const char *value = NULL;
        if (eq) { /* --flag=value */
            snprintf(name, sizeof name, "%.*s", (int)(eq - k), k);
            value = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", k);
        }
        const prog_flag *f = prog_flags_find(cli, name);
        if (!f) {
            const char *near = prog_flags_suggest(cli, name);
            char why[192];
            if (near) snprintf(why, sizeof why, "unknown option; did you mean %s?", near);
            else snprintf(why, sizeof why, "unknown option");
            return prog_usage_error(cli->name, name, NULL, why);
        }
        size_t index = (size_t)(f - cli->flags);
        if (seen[index])
            return prog_usage_error(cli->name, name, NULL, "given twice");
        seen[index] = 1;
        if (f->kind == PROG_FLAG_SWITCH) {
            if (value) return prog_usage_error(cli->name, name, value, "takes no value");
            *FIELD(opts, f, int) = 1;
        } else {
            if (!value) {
                if (i + 1 >= argc) return prog_usage_error(cli->name, name, NULL, "needs a value");
                value = argv[++i];
            }
            if (prog_flags_set(cli, f, opts, value)) return -1;
        }
        if (given) given[index] = 1;
    }
    return 0;
}

/* The programs' one command-line parser: each program describes its flags
 * in a table (name, kind, range, help) and this file parses argv into the
 * program's options struct, refuses what the table does not allow with one
 * wording, suggests the nearest flag for an unknown one, and prints --help
 * from the same table.
 *
 * Exit codes, the same in every program (docs/programs.md):
 *   0  done (also after --help and --version)
 *   1  the work failed: a file that cannot be read or written, a model the
 *      library refuses, out of memory, a non-finite loss
 *   2  the command line is wrong: an unknown flag, a missing or invalid
 *      value, flags that do not go together
 */
#ifndef GPTX_PROG_FLAGS_H
#define GPTX_PROG_FLAGS_H

#include <stddef.h>
#include <stdio.h>

enum { PROG_EXIT_OK = 0, PROG_EXIT_FAILURE = 1, PROG_EXIT_USAGE = 2 };

typedef enum {
    PROG_FLAG_SECTION, /* not a flag: a heading in --help ("data:"); name is its text */
    PROG_FLAG_STR,     /* const char *: the argv string itself */
    PROG_FLAG_CHOICE,  /* const char *: one of choices "a|b|c" */
    PROG_FLAG_INDEX,   /* int: the position of the value in choices "a|b|c" */
    PROG_FLAG_INT,     /* int in [lo, hi] */
    PROG_FLAG_I64,     /* long long in [lo, hi] */
    PROG_FLAG_FLOAT,   /* float in [lo, hi] */
    PROG_FLAG_DOUBLE,  /* double in [lo, hi] */
    PROG_FLAG_U64,     /* unsigned long long, any (seeds) */
    PROG_FLAG_SWITCH   /* int set to 1; takes no value */
} prog_flag_kind;

/* bits */
#define PROG_FLAG_OPEN_LO 1u    /* lo itself is refused: (lo, hi] ("--lr 0") */
#define PROG_FLAG_NO_DEFAULT 2u /* --help prints no "(default ...)" (the help says it) */
#define PROG_FLAG_HIDDEN 4u     /* accepted but left out of --help */

typedef struct prog_flag {
    const char *name;     /* "--lr"; for a section, its heading */
    prog_flag_kind kind;
    size_t offset;        /* of the field in the program's options struct */
    double lo, hi;        /* numeric kinds */
    const char *choices;  /* CHOICE, INDEX: "a|b|c" */
    const char *arg;      /* the value's name in --help: "N", "FILE" (default by kind) */
    const char *help;     /* lines separated by '\n'; --help indents them */
    unsigned bits;
    int tag;              /* the program's own use (gptx-train: what --resume may change) */
} prog_flag;

/* A row of a table: PROG_FLAG_ROW(options_type, field, "--name", PROG_FLAG_INT, lo, hi,
 * choices, "ARG", "help", bits, tag); a heading: PROG_SECTION("data:"). */
#define PROG_FLAG_ROW(type, field, name, kind, lo, hi, choices, arg, help, bits, tag) \
    {name, kind, offsetof(type, field), lo, hi, choices, arg, help, bits, tag}
#define PROG_SECTION(heading) {heading, PROG_FLAG_SECTION, 0, 0, 0, NULL, NULL, NULL, 0, 0}

typedef struct prog_cli {
    const char *name;      /* "gptx-eval": the start of every message */
    const char *synopsis;  /* printed first by --help: "usage: ...\nWhat it does.\n" */
    const prog_flag *flags;
    size_t n_flags;
    const char *epilogue;  /* printed last by --help, or NULL */
} prog_cli;

/* Parses argv[1..argc-1] into opts (which holds the defaults already).
 * given, when not NULL, has n_flags bytes: given[i] = 1 for each flag of the
 * table the command line set. Returns
 *   0  parsed: go on
 *   1  --help (-h) or --version was printed on stdout: exit PROG_EXIT_OK
 *  -1  a message "<prog>: <flag> <value>: <why> (see --help)" was printed on
 *      stderr: exit PROG_EXIT_USAGE
 * A bare argument, an unknown flag (with the nearest known one: "did you
 * mean --model?"), a flag given twice, a missing value, a number out of its
 * range or with trailing characters, and a value not among the choices are
 * refused. defaults (may be NULL) is the struct --help reads defaults from. */
int prog_flags_parse(const prog_cli *cli, void *opts, unsigned char *given, int argc,
                     char **argv, const void *defaults);

/* One flag's value from text, checked as the parser checks it: 0, or -1
 * after the message. (gptx-train reads a saved configuration with it.) */
int prog_flags_set(const prog_cli *cli, const prog_flag *f, void *opts, const char *value);

/* The flag's value in opts as text that prog_flags_set reads back to the
 * same value (floats: the shortest such text); NULL for an unset string or a
 * section. */
const char *prog_flags_format(const prog_flag *f, const void *opts, char *buf, size_t cap);

/* The row named name, or NULL. */
const prog_flag *prog_flags_find(const prog_cli *cli, const char *name);

/* Prints --help: the synopsis, every row ("  --name ARG   help", continuation
 * lines aligned, " (default V)" from defaults where the row allows), the
 * epilogue. */
void prog_flags_help(const prog_cli *cli, const void *defaults, FILE *out);

/* "<prog>: <flag> <value>: <why> (see --help)" on stderr (value may be NULL
 * or empty); returns -1. The programs' own checks after parsing (flags that
 * do not go together) use it so every usage error reads alike. */
int prog_usage_error(const char *prog, const char *flag, const char *value, const char *why);

/* The nearest name in the table to an unknown one (edit distance at most a
 * third of its length, at least 2, or a unique prefix), or NULL. */
const char *prog_flags_suggest(const prog_cli *cli, const char *unknown);

#endif

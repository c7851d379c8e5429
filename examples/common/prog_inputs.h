/* The programs' one syntax for a list of input files (gptx-train --text,
 * --train-shards, --val-shards; gptx-tokenize --input; gptx-eval --tokens):
 *
 *   a comma-separated list whose entries are
 *     - a file (a regular file, or a link to one);
 *     - a glob(3) pattern (an entry with '*', '?' or '['), which must match
 *       at least one path; each match is taken as a file or a folder;
 *     - a folder: its regular files, not recursive (subfolders are
 *       skipped), hidden files (a name starting with '.') skipped.
 *
 * The paths found are sorted (byte order, strcmp: the same in every
 * locale) and a path listed twice is kept once, so the order of the list
 * does not change the data. An entry that is empty, matches nothing, a
 * folder without a regular file, and a path that is neither a regular file
 * nor a folder (a FIFO, a device, a missing file) is an error. */
#ifndef GPTX_PROG_INPUTS_H
#define GPTX_PROG_INPUTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct prog_inputs {
    char **paths;        /* sorted, unique */
    uint64_t *sizes;     /* bytes of each, when expanded */
    size_t n;
    uint64_t total_bytes;
} prog_inputs;

/* Expands list into *out. 0, or after one message on stderr
 * "<prog>: <flag> <entry>: <why>" (out is then empty): -2 when the list
 * itself is malformed (an empty entry: a usage error, exit 2), -1 when a
 * path is missing, matches nothing or is not a file (exit 1). */
int prog_inputs_expand(const char *prog, const char *flag, const char *list, prog_inputs *out);

void prog_inputs_free(prog_inputs *in);

/* Texts (gptx-train --text, gptx-tokenize --input, gptx-eval --text): every
 * file must be text, which is any bytes but the formats the programs write
 * or read otherwise: llm.c token shards, model, state and tokenizer files,
 * safetensors files, gptx-tokenize's manifest and progress records, known
 * by their first bytes (a folder of shards given as --text would otherwise
 * be trained on as bytes: issue 34, item 4). Each file is opened as
 * prog_open_regular does (a FIFO is not waited on). 0, or -1 after
 * "<prog>: <flag> <path> is <what>, not text ...". */
int prog_inputs_check_text(const char *prog, const char *flag, const prog_inputs *in);

/* --doc-separator STR (gptx-train, gptx-tokenize): the bytes STR stands for,
 * with the escapes \n (newline), \t (tab), \r, \\ (one backslash) and
 * \xHH (the byte HH); any other backslash is refused, and so is an empty
 * separator. *out is malloc'ed; 0, or -1 after a message. */
int prog_doc_separator_parse(const char *prog, const char *value, char **out, size_t *len);

#endif

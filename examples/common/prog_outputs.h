/* The rules for a path a program writes to (docs/reliability.md, "Path
 * rules"), for the programs whose outputs are single files the user names:
 * gptx-export's --out and gptx-eval's --json and --details.
 *
 *   - never one of the program's inputs (the same file, however named:
 *     through a link, another path, a Hugging Face folder's files), with
 *     --overwrite too: the input would be lost (issue 34, item 3);
 *   - an existing file (or a link: what it names would be written) is
 *     refused unless --overwrite: it is not the program's to replace;
 *   - a stream is not a file to replace: a FIFO, a device (/dev/null,
 *     /dev/full) or the program's own standard output or error
 *     (--json /dev/stdout > out.json) is written as it is. */
#ifndef GPTX_PROG_OUTPUTS_H
#define GPTX_PROG_OUTPUTS_H

#include <sys/types.h>

/* The files a program reads, by identity. */
typedef struct prog_input_id {
    dev_t dev;
    ino_t ino;
    const char *flag, *path; /* for the message: "--model", "run/model.safetensors" */
} prog_input_id;
typedef struct prog_input_ids {
    prog_input_id ids[16];
    int n;
} prog_input_ids;

/* Adds path (a file; a folder adds its model.safetensors and config.json,
 * what a Hugging Face folder is read from); a path that does not exist adds
 * nothing (reading it will say so). flag and path must outlive ids. */
void prog_input_add(prog_input_ids *ids, const char *flag, const char *path);

/* Checks the output path (of flag) against the rules above: 0 to go on; 1
 * after "<prog>: <flag> <path> exists ...; give --overwrite" (exit 1); 2
 * after "<prog>: <flag> <path> is <input flag> <input path> ..." (exit 2,
 * flags that do not go together). */
int prog_output_check(const char *prog, const char *flag, const char *path, int overwrite,
                      const prog_input_ids *inputs);

#endif

/* The library's last error as the programs show it. */
#ifndef GPTX_PROG_ERROR_H
#define GPTX_PROG_ERROR_H

/* gptx_last_error() without the leading "gptx_public_function: " the library
 * puts there for C callers (the call means nothing to a program's user; the
 * library never leads with an internal name: lib/core/errors.h). */
const char *prog_error_text(void);

/* "\n" when a live progress line may be on the terminal (stdout is one),
 * else "": an error message then starts on a line of its own, and never
 * with a blank line in a log. */
const char *prog_error_lead(void);

#endif

/* prog_error.h */
#define _POSIX_C_SOURCE 200809L
#include "prog_error.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gptx/gptx.h"

const char *prog_error_text(void) {
    const char *m = gptx_last_error();
    if (strncmp(m, "gptx_", 5) != 0) return m; /* only a public function's name leads */
    const char *p = m + 5;
    while (islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_') p++;
    return p[0] == ':' && p[1] == ' ' && p[2] ? p + 2 : m;
}

const char *prog_error_lead(void) { return isatty(fileno(stdout)) ? "\n" : ""; }

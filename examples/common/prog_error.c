/* prog_error.h */
#define _POSIX_C_SOURCE 200809L
#include "prog_error.h"

#include <ctype.h>
#include <stdio.h>
#include <unistd.h>

#include "gptx/gptx.h"

const char *prog_error_text(void) {
    const char *m = gptx_last_error();
    const char *p = m;
    if (!(isalpha((unsigned char)*p) || *p == '_')) return m;
    while (isalnum((unsigned char)*p) || *p == '_') p++;
    return p[0] == ':' && p[1] == ' ' && p[2] ? p + 2 : m;
}

const char *prog_error_lead(void) { return isatty(fileno(stdout)) ? "\n" : ""; }

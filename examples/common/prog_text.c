/* prog_text.h */
#include "prog_text.h"

#include <stdio.h>
#include <string.h>

int prog_special_tokens_parse(const char *prog, const char *value, int *allow) {
    if (!strcmp(value, "text") || !strcmp(value, "allow")) {
        *allow = !strcmp(value, "allow");
        return 0;
    }
    fprintf(stderr, "%s: --special-tokens %s: expected text or allow (see --help)\n", prog,
            value);
    return -1;
}

const char *prog_special_tokens_name(int allow) { return allow ? "allow" : "text"; }

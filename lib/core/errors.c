#include "errors.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

int gptx_fail(int status, const char *func, const char *fmt, ...) {
    int n = snprintf(last_error, sizeof last_error, "%s: ", func);
    if (n < 0 || (size_t)n >= sizeof last_error) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

const char *gptx_last_error(void) { return last_error; }

void gptx_clear_error(void) { last_error[0] = '\0'; }

const char *gptx_status_name(int status) {
    switch (status) {
    case GPTX_OK: return "GPTX_OK";
    case GPTX_ERR_NULL: return "GPTX_ERR_NULL";
    case GPTX_ERR_INVALID: return "GPTX_ERR_INVALID";
    case GPTX_ERR_SHAPE: return "GPTX_ERR_SHAPE";
    case GPTX_ERR_TOKEN_RANGE: return "GPTX_ERR_TOKEN_RANGE";
    case GPTX_ERR_NO_MEMORY: return "GPTX_ERR_NO_MEMORY";
    case GPTX_ERR_NON_FINITE: return "GPTX_ERR_NON_FINITE";
    case GPTX_ERR_MISMATCH: return "GPTX_ERR_MISMATCH";
    case GPTX_ERR_STATE: return "GPTX_ERR_STATE";
    case GPTX_ERR_UNSUPPORTED: return "GPTX_ERR_UNSUPPORTED";
    case GPTX_ERR_NOT_FOUND: return "GPTX_ERR_NOT_FOUND";
    case GPTX_ERR_BACKEND: return "GPTX_ERR_BACKEND";
    case GPTX_ERR_IO: return "GPTX_ERR_IO";
    case GPTX_ERR_FORMAT: return "GPTX_ERR_FORMAT";
    case GPTX_ERR_MISUSE: return "GPTX_ERR_MISUSE";
    case GPTX_ERR_BUSY: return "GPTX_ERR_BUSY";
    default: return "GPTX_UNKNOWN";
    }
}

#include "errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Large enough for any message that names paths in full: three of PATH_MAX
 * (4096), as a failed rename's two and a folder, and the reason. A longer
 * one keeps its start and its end (the reason, as "File name too long",
 * comes last) around an ellipsis. */
#define ERROR_CAP 16384
static const char cut_mark[] = " [...] ";

static _Thread_local char last_error[ERROR_CAP];

#include "gptx_public_names.h" /* generated: GPTX_API functions, sorted */

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int gptx_error_names_public(const char *func) {
    if (!func) return 0;
    /* the name that leads func: "gptx_comm_create (NCCL engine)" is kept too */
    char name[96];
    size_t n = 0;
    while (n < sizeof name - 1 && ((func[n] >= 'a' && func[n] <= 'z') ||
                                   (func[n] >= '0' && func[n] <= '9') || func[n] == '_'))
        n++;
    if (n == 0 || n == sizeof name - 1 || (func[n] != '\0' && func[n] != ' ')) return 0;
    memcpy(name, func, n);
    name[n] = '\0';
    const char *key = name;
    return bsearch(&key, gptx_public_names, sizeof gptx_public_names / sizeof gptx_public_names[0],
                   sizeof gptx_public_names[0], by_name) != NULL;
}

/* "func: " for a public function (the call the user made; what follows a
 * space in func, as "(NCCL engine)", kept), else nothing: an internal
 * function's name means nothing to the user. */
static const char *lead(const char *func) { return gptx_error_names_public(func) ? func : NULL; }

/* A UTF-8 continuation byte: a cut never falls before one. */
static int continuation(char c) { return ((unsigned char)c & 0xC0) == 0x80; }

/* last_error = text (n bytes), its middle replaced by cut_mark when it
 * does not fit. */
static void store_cut(const char *text, size_t n) {
    size_t keep = ERROR_CAP - 1 - (sizeof cut_mark - 1);
    size_t head = keep / 2, tail = n - (keep - head);
    while (head > 0 && continuation(text[head])) head--;
    while (tail < n && continuation(text[tail])) tail++;
    memcpy(last_error, text, head);
    memcpy(last_error + head, cut_mark, sizeof cut_mark - 1);
    memcpy(last_error + head + sizeof cut_mark - 1, text + tail, n - tail + 1);
}

/* The message did not fit: formatted whole on the heap, then cut in the
 * middle. Without memory for that, the cut end is marked. */
static void store_long(const char *func, const char *fmt, va_list ap, size_t n) {
    char *text = malloc(n + 1);
    if (!text) {
        memcpy(last_error + ERROR_CAP - sizeof cut_mark, cut_mark, sizeof cut_mark);
        return;
    }
    int p = lead(func) ? snprintf(text, n + 1, "%s: ", func) : 0;
    vsnprintf(text + p, n + 1 - (size_t)p, fmt, ap);
    store_cut(text, n);
    free(text);
}

int gptx_fail(int status, const char *func, const char *fmt, ...) {
    int p = lead(func) ? snprintf(last_error, sizeof last_error, "%s: ", func) : 0;
    if (p < 0 || (size_t)p >= sizeof last_error) p = 0;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(last_error + p, sizeof last_error - (size_t)p, fmt, ap);
    if (n >= 0 && (size_t)p + (size_t)n >= sizeof last_error)
        store_long(func, fmt, again, (size_t)p + (size_t)n);
    va_end(again);
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

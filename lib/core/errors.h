/* Thread-local error messages: every failing call records what and where. */
#ifndef GPTX_ERRORS_H
#define GPTX_ERRORS_H

#include "gptx/gptx.h"

/* Records "func: message" for the calling thread and returns status; func is
 * kept only when it is a public function (GPTX_API in include/gptx), the call
 * the user made, else the message is the text alone: say what and where in
 * the user's terms (the file, the argument, the value), never an internal
 * name. The whole message is kept up to 16 KiB (paths in full); a longer one
 * loses its middle, never its end. No argument may point into gptx_last_error()'s text. */
int gptx_fail(int status, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* 1 when func is a public function's name (errors.c's generated table). */
int gptx_error_names_public(const char *func);

#define GPTX_FAIL(status, ...) gptx_fail((status), __func__, __VA_ARGS__)

/* Returns GPTX_ERR_NULL naming the argument when p is NULL. */
#define GPTX_CHECK_NULL(p)                                                     \
    do {                                                                       \
        if ((p) == NULL) return GPTX_FAIL(GPTX_ERR_NULL, "argument '%s' is NULL", #p); \
    } while (0)

/* Propagates a failing status unchanged (its message is already set). */
#define GPTX_TRY(expr)                                                         \
    do {                                                                       \
        int gptx_try_rc_ = (expr);                                             \
        if (gptx_try_rc_ != GPTX_OK) return gptx_try_rc_;                      \
    } while (0)

#endif

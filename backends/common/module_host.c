/* Inside a module (lib/core/module.h): the core functions a module's code calls
 * by their usual names (gptx_fail, gptx_clear_error, the communicator's
 * poller, the precision names), forwarded to what the core lent it in
 * gptx_module_entry. The module's version script exports nothing but
 * gptx_module_entry, so these never meet the core's own definitions. */
#include <stdarg.h>
#include <stdio.h>

#include "comm_engine.h"
#include "errors.h"
#include "module.h"
#include "module_host.h"

static const gptx_module_host *core;

int gptx_module_host_set(const gptx_module_host *host) {
    if (!host || host->abi != GPTX_MODULE_ABI || host->version != GPTX_VERSION_NUMBER)
        return 0;
    core = host;
    return 1;
}

int gptx_fail(int status, const char *func, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return core->fail(status, func, text);
}

void gptx_clear_error(void) { core->clear_error(); }

int gptx_comm_poll_until_done(comm_engine *e, int (*test)(void *arg, int *done), void *arg,
                              double timeout_s, const char *where, const char *what) {
    return core->poll_until_done(e, test, arg, timeout_s, where, what);
}

const char *gptx_precision_name(int precision) { return core->precision_name(precision); }

int gptx_precision_from_name(const char *name) { return core->precision_from_name(name); }

/* A module's side of lib/core/module.h (module_host.c). */
#ifndef GPTX_MODULE_HOST_H
#define GPTX_MODULE_HOST_H

#include "module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Keeps what the core lends; 0 when it is another build's core. */
int gptx_module_host_set(const gptx_module_host *host);

/* The one symbol a module exports (its version script keeps the rest). */
__attribute__((visibility("default"))) const gptx_module_exports *
gptx_module_entry(const gptx_module_host *host);

#ifdef __cplusplus
}
#endif

#endif

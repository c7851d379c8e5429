/* Backends and communicator engines built as modules: shared objects the
 * core loads on demand (dlopen), so libgptx itself needs neither CUDA nor
 * MPI (docs/modules.md). A module is libgptx_<name>.so, found in
 * $GPTX_MODULE_PATH (colon-separated folders), next to the object that holds
 * the core (libgptx.so, or the program that linked libgptx.a), or in the
 * library folder gptx was installed to. It exports one function,
 * gptx_module_entry, which receives what the core lends it (errors, the
 * communicator's poller) and returns what it offers. Module and core come
 * from one build: each checks the other's GPTX_MODULE_ABI and version. */
#ifndef GPTX_MODULE_H
#define GPTX_MODULE_H

#include <stdint.h>

#include "backend.h"

/* The communicator's engine types (lib/comm/comm_engine.h), by name only:
 * the core's table of what a module offers needs no more of lib/comm. */
typedef struct comm_engine comm_engine;
typedef struct comm_setup comm_setup;

/* Changes whenever this file, lib/core/backend.h or lib/comm/comm_engine.h changes
 * what crosses between core and module. */
#define GPTX_MODULE_ABI 3u

/* What the core lends a module (its own copies would not reach the caller's
 * error message or the core's state). */
typedef struct gptx_module_host {
    uint32_t abi;
    unsigned version; /* GPTX_VERSION_NUMBER of the core (gptx.h) */
    /* records `where: message` as the calling thread's error; returns status */
    int (*fail)(int status, const char *where, const char *message);
    void (*clear_error)(void);
    int (*poll_until_done)(comm_engine *e, int (*test)(void *arg, int *done), void *arg,
                           double timeout_s, const char *where, const char *what);
    const char *(*precision_name)(int precision);
    int (*precision_from_name)(const char *name);
} gptx_module_host;

/* What a module offers; entries it lacks are NULL. */
typedef struct gptx_module_exports {
    uint32_t abi;
    unsigned version; /* GPTX_VERSION_NUMBER it was built as */
    const char *name;
    /* a backend (cuda) */
    const gptx_backend_ops *backend_ops;
    /* communicator engines (mpi; nccl in the cuda module) */
    int (*mpi_create)(comm_engine **out, const comm_setup *s);
    int (*nccl_check)(const comm_setup *s);
    /* id: COMM_NCCL_ID_BYTES bytes (lib/comm/comm_engine.h) */
    int (*nccl_unique_id)(unsigned char *id);
    int (*nccl_create)(comm_engine **out, const comm_setup *s, const unsigned char *id);
} gptx_module_exports;

typedef const gptx_module_exports *(*gptx_module_entry_fn)(const gptx_module_host *host);
#define GPTX_MODULE_ENTRY "gptx_module_entry"

/* The module `name` ("cuda", "mpi"), loaded on first use and kept for the
 * life of the process. GPTX_ERR_UNSUPPORTED saying where it was looked for
 * and why it did not load (missing, a library it needs missing, another
 * gptx version); `what` says what needed it ("backend 'cuda'"). */
int gptx_module_get(const char *name, const char *what, const gptx_module_exports **out);

/* The module's exports, or NULL when it does not load; the caller's error
 * message is left as it is. */
const gptx_module_exports *gptx_module_lookup(const char *name);

#endif

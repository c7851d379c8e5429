/* See module.h. The search: $GPTX_MODULE_PATH, the folder of the object that
 * holds this code (libgptx.so, or a program linked with libgptx.a), then the
 * folder gptx was installed to (GPTX_INSTALL_LIBDIR, compiled in). Each
 * module is loaded at most once per process; a failed attempt is remembered
 * too, so a missing module costs one search. */
#define _GNU_SOURCE /* dladdr */
#include "module.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comm_internal.h" /* gptx_comm_poll_until_done, lent to modules */
#include "errors.h"

#ifndef GPTX_INSTALL_LIBDIR
#define GPTX_INSTALL_LIBDIR ""
#endif

/* The modules gptx knows; anything else is refused before a file is opened. */
static const char *const known[] = {"cuda", "mpi"};
enum { NKNOWN = sizeof known / sizeof known[0] };

typedef struct slot {
    int tried;
    const gptx_module_exports *exports; /* NULL after a failed attempt */
    int status;
    char why[1024]; /* the failure, reported again to later callers */
} slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static slot slots[NKNOWN];

static int host_fail(int status, const char *where, const char *message) {
    return gptx_fail(status, where, "%s", message);
}

static const gptx_module_host host = {
    .abi = GPTX_MODULE_ABI,
    .version = GPTX_VERSION_NUMBER,
    .fail = host_fail,
    .clear_error = gptx_clear_error,
    .poll_until_done = gptx_comm_poll_until_done,
    .precision_name = gptx_precision_name,
    .precision_from_name = gptx_precision_from_name,
};

/* The folder of the object this function is in ("" when unknown). */
static void own_folder(char *out, size_t cap) {
    Dl_info info;
    out[0] = '\0';
    if (!dladdr((void *)own_folder, &info) || !info.dli_fname) return;
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash) snprintf(out, cap, "%.*s", (int)(slash - info.dli_fname), info.dli_fname);
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Appends folder to the list of places searched, "a, b, c". */
static void note_folder(char *list, size_t cap, const char *folder) {
    size_t n = strlen(list);
    if (n + 3 >= cap) return;
    int w = snprintf(list + n, cap - n, "%s%s", n ? ", " : "", folder);
    if (w < 0 || (size_t)w >= cap - n) list[n] = '\0'; /* no room: the list stops here */
}

/* Opens libgptx_<name>.so in folder; 1 = found (then *handle or *why). */
static int try_folder(const char *folder, size_t len, const char *name, void **handle, char *why,
                      size_t cap, char *searched, size_t scap) {
    char path[4096];
    if (len == 0) return 0;
    snprintf(path, sizeof path, "%.*s/libgptx_%s.so", (int)len, folder, name);
    note_folder(searched, scap, path);
    if (!is_file(path)) return 0;
    *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*handle) {
        const char *e = dlerror();
        if (snprintf(why, cap, "%s could not be loaded: %s", path, e ? e : "unknown reason") >=
            (int)cap)
            why[cap - 1] = '\0'; /* cut: the reason is at the end of dlerror's text */
    }
    return 1;
}

/* Finds and opens the module's file; GPTX_OK with *handle, or a reason. */
static int open_module(const char *name, void **handle, char *why, size_t cap) {
    char searched[2048] = "";
    *handle = NULL;
    const char *env = getenv("GPTX_MODULE_PATH");
    for (const char *p = env; p && *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (try_folder(p, len, name, handle, why, cap, searched, sizeof searched))
            return *handle ? GPTX_OK : GPTX_ERR_UNSUPPORTED;
        p = end ? end + 1 : p + len;
    }
    char own[4096];
    own_folder(own, sizeof own);
    const char *dirs[] = {own, GPTX_INSTALL_LIBDIR};
    for (int i = 0; i < 2; i++)
        if (try_folder(dirs[i], strlen(dirs[i]), name, handle, why, cap, searched, sizeof searched))
            return *handle ? GPTX_OK : GPTX_ERR_UNSUPPORTED;
    if (snprintf(why, cap, "libgptx_%s.so is not installed (looked for %s; set GPTX_MODULE_PATH "
                           "to the folder that holds it)",
                 name, searched[0] ? searched : "nothing") >= (int)cap)
        why[cap - 1] = '\0';
    return GPTX_ERR_UNSUPPORTED;
}

/* Loads and checks one module into s. */
static void load(slot *s, const char *name) {
    void *h = NULL;
    s->tried = 1;
    s->status = open_module(name, &h, s->why, sizeof s->why);
    if (s->status != GPTX_OK) return;
    gptx_module_entry_fn entry = NULL;
    void *sym = dlsym(h, GPTX_MODULE_ENTRY);
    memcpy(&entry, &sym, sizeof entry); /* object to function pointer, as POSIX allows */
    const gptx_module_exports *x = entry ? entry(&host) : NULL;
    if (!x || x->abi != GPTX_MODULE_ABI || x->version != GPTX_VERSION_NUMBER) {
        snprintf(s->why, sizeof s->why,
                 "libgptx_%s.so is not a module of this gptx (%s; module version %u, interface "
                 "%u; this library %u, interface %u): install the module of the same build",
                 name, !entry ? "no " GPTX_MODULE_ENTRY : !x ? "it refused this library" : "mismatch",
                 x ? x->version : 0u, x ? x->abi : 0u, (unsigned)GPTX_VERSION_NUMBER,
                 GPTX_MODULE_ABI);
        s->status = GPTX_ERR_UNSUPPORTED;
        dlclose(h);
        return;
    }
    s->exports = x; /* the handle stays open for the life of the process */
}

static int slot_of(const char *name) {
    for (int i = 0; i < NKNOWN; i++)
        if (strcmp(name, known[i]) == 0) return i;
    return -1;
}

/* The module's exports (loaded on first use), or NULL with *s_out its slot. */
static const gptx_module_exports *lookup(int i, slot *copy) {
    pthread_mutex_lock(&lock);
    if (!slots[i].tried) load(&slots[i], known[i]);
    *copy = slots[i];
    pthread_mutex_unlock(&lock);
    return copy->exports;
}

int gptx_module_get(const char *name, const char *what, const gptx_module_exports **out) {
    *out = NULL;
    int i = slot_of(name);
    if (i < 0) return GPTX_FAIL(GPTX_ERR_INVALID, "no gptx module is called '%s'", name);
    slot s;
    if (!lookup(i, &s)) return gptx_fail(s.status, what, "needs the %s module: %s", name, s.why);
    *out = s.exports;
    return GPTX_OK;
}

const gptx_module_exports *gptx_module_lookup(const char *name) {
    int i = slot_of(name);
    slot s;
    return i >= 0 ? lookup(i, &s) : NULL;
}

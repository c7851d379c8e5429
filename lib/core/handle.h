/* The header every public object starts with, and the check on entry of
 * every call (SQLite's sqlite3SafetyCheckOk, plus busy flags and reference
 * counts). gptx.h ("Threads and lifetimes") states the rules kept here.
 *
 *   magic   the kind's live value from creation to gptx_*_destroy, then the
 *           kind's dead value: a destroyed, foreign or never-created handle
 *           is GPTX_ERR_MISUSE instead of a crash (while its memory has not
 *           been reused: see the quarantine in handle.c);
 *   owner   exclusive kinds (model, optimizer, generator, ...): the thread
 *           inside a call on the object, 0 when none. A second thread is
 *           refused with GPTX_ERR_BUSY rather than computing on state the
 *           first one is changing; the owner may nest calls (depth);
 *   refs    the user's reference plus one per object made from this one
 *           (a model holds its context, an optimizer its model): an object
 *           destroyed while others still use it is freed with the last of
 *           them, so the order of the destroy calls never matters;
 *   ctx_mu  the context's lock (NULL without a context): calls that run on
 *           the backend hold it, so objects of one context used from several
 *           threads take turns on its thread pool, stream and allocator.
 */
#ifndef GPTX_HANDLE_H
#define GPTX_HANDLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

typedef enum gptx_kind {
    GPTX_KIND_CONTEXT,
    GPTX_KIND_MODEL,
    GPTX_KIND_OPTIMIZER,
    GPTX_KIND_GENERATOR,
    GPTX_KIND_SAMPLER,
    GPTX_KIND_TOKENIZER,
    GPTX_KIND_DATALOADER,
    GPTX_KIND_TIMER,
    GPTX_KIND_COMM,
    GPTX_KIND_COUNT
} gptx_kind;

typedef struct gptx_handle gptx_handle;

/* Frees what the object holds (buffers, threads, children's tables), not the
 * object itself: handle.c keeps that memory a while (the quarantine). */
typedef void (*gptx_release_fn)(gptx_handle *h);

struct gptx_handle {
    _Atomic uint32_t magic;
    _Atomic uintptr_t owner; /* exclusive kinds: the thread inside a call, 0 = none */
    int depth;               /* nested calls of the owner; only the owner touches it */
    atomic_int refs;         /* 1 (the user's, until destroy) + one per dependent object */
    int kind;                /* gptx_kind */
    gptx_handle *parent;     /* the object this one was made from (retained), or NULL */
    pthread_mutex_t *ctx_mu; /* the context's lock, or NULL */
    gptx_release_fn release;
};

/* Every object's struct starts with its gptx_handle `h`: the magic of any
 * handle, whatever its kind, is read at the same offset. */
#define GPTX_HANDLE_FIRST(type) \
    _Static_assert(offsetof(type, h) == 0, #type ": the handle must be its first member")

/* Sets up h as a live object of `kind` with one reference (the caller's)
 * and takes a reference on parent (may be NULL). ctx_mu: the lock this
 * object's calls hold; NULL = its parent's (none without a parent). Call it
 * right after allocating the object, before anything can fail: from then on
 * the object is freed through gptx_handle_destroy alone. */
void gptx_handle_init(gptx_handle *h, gptx_kind kind, gptx_handle *parent,
                      pthread_mutex_t *ctx_mu, gptx_release_fn release);

/* An extra reference (an optimizer on the communicator it is sharded over);
 * the release function drops it with gptx_handle_unref. */
void gptx_handle_retain(gptx_handle *h);
void gptx_handle_unref(gptx_handle *h);

/* GPTX_OK when obj is a live handle of `kind`; else GPTX_ERR_NULL or
 * GPTX_ERR_MISUSE naming the argument and what was found there. */
int gptx_handle_check(const void *obj, gptx_kind kind, const char *arg, const char *func);

/* What a call holds on one object; gptx_guard_leave releases it. */
typedef struct gptx_guard {
    gptx_handle *h; /* NULL: nothing held */
    int busy;       /* holds (a nesting level of) h's owner slot */
    int locked;     /* holds h->ctx_mu */
} gptx_guard;

/* gptx_guard_enter's flags */
enum {
    /* obj came from the caller: check its magic. Without it, obj is one the
     * library holds a reference on (a generator's model), which its user may
     * have destroyed and which stays valid for its dependents. */
    GPTX_GUARD_CHECK = 1,
    /* take the owner slot only, not the context's lock: a call that works on
     * objects of two contexts in turn (gptx_compare_models) holds both
     * objects for its whole length, each context only while it runs there */
    GPTX_GUARD_NO_LOCK = 2
};

/* Enters a call on obj: checks the handle (GPTX_GUARD_CHECK), takes the
 * owner slot of an exclusive kind (GPTX_ERR_BUSY when another thread is
 * inside) and the context's lock when the kind's calls hold it. *g is valid
 * for gptx_guard_leave whatever the result. */
int gptx_guard_enter(gptx_guard *g, const void *obj, gptx_kind kind, int flags, const char *arg,
                     const char *func);
void gptx_guard_leave(gptx_guard *g);

/* gptx_*_destroy: the handle becomes dead to its user at once (its magic
 * poisoned) and the object is released when nothing made from it remains.
 * A NULL obj does nothing; a dead or foreign handle, or one another thread
 * is inside, is left as it is and the calling thread's message says so. */
void gptx_handle_destroy(void *obj, gptx_kind kind, const char *arg, const char *func);

/* The guard declared by GPTX_ENTER is released by the compiler when the
 * enclosing block ends (GCC/Clang cleanup attribute), on every return path:
 * no early return can leave an object marked busy or a context locked. */
#define GPTX_GUARD_CAT_(a, b) a##b
#define GPTX_GUARD_VAR_(line) GPTX_GUARD_CAT_(gptx_guard_, line)
#define GPTX_GUARD_(obj, kind, flags)                                                    \
    gptx_guard GPTX_GUARD_VAR_(__LINE__) __attribute__((cleanup(gptx_guard_leave))) = {0}; \
    GPTX_TRY(gptx_guard_enter(&GPTX_GUARD_VAR_(__LINE__), (obj), (kind), (flags), #obj, __func__))

/* A call on the caller's handle obj, held until the end of the block. */
#define GPTX_ENTER(obj, kind) GPTX_GUARD_(obj, kind, GPTX_GUARD_CHECK)
/* The same for an object the library reached through another one (a
 * generator's model): no magic check, as its user may have destroyed it. */
#define GPTX_HOLD(obj, kind) GPTX_GUARD_(obj, kind, 0)
/* Only the magic check: calls that read what never changes after creation
 * (a model's configuration, a tokenizer's tables) run concurrently with any
 * other call. */
#define GPTX_CHECK_HANDLE(obj, kind) GPTX_TRY(gptx_handle_check((obj), (kind), #obj, __func__))

/* The kind's public type name ("gptx_model"). */
const char *gptx_kind_name(gptx_kind kind);

#endif

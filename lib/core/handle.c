/* Handle checks, busy flags, reference counts and the quarantine of freed
 * handles (handle.h). */
#include "handle.h"

#include <stdlib.h>

/* Per kind: the public name, the magic while alive, and the two threading
 * rules of gptx.h ("Threads and lifetimes"): whether one call at a time is
 * allowed (exclusive: its calls change or read state another call may be
 * changing) and whether its calls hold the context's lock (they run on the
 * backend themselves). An optimizer or a generator runs on the backend only
 * through its model, whose guard takes the lock: every object a call uses
 * is claimed before the call waits for its context, so a call on an object
 * in use by another thread is refused at once rather than made to wait. */
typedef struct kind_info {
    const char *name;
    uint32_t live;
    int exclusive;
    int locks_context;
} kind_info;

static const kind_info kinds[GPTX_KIND_COUNT] = {
    [GPTX_KIND_CONTEXT] = {"gptx_context", 0x31585443u /* "CTX1" */, 0, 1},
    [GPTX_KIND_MODEL] = {"gptx_model", 0x314c444du /* "MDL1" */, 1, 1},
    [GPTX_KIND_OPTIMIZER] = {"gptx_optimizer", 0x3154504fu /* "OPT1" */, 1, 0},
    [GPTX_KIND_GENERATOR] = {"gptx_generator", 0x314e4547u /* "GEN1" */, 1, 0},
    [GPTX_KIND_SAMPLER] = {"gptx_sampler", 0x31504d53u /* "SMP1" */, 1, 0},
    /* read-only after loading: any number of threads may encode at once */
    [GPTX_KIND_TOKENIZER] = {"gptx_tokenizer", 0x314b4f54u /* "TOK1" */, 0, 0},
    /* batches are host memory: next() must not wait for a model's step */
    [GPTX_KIND_DATALOADER] = {"gptx_dataloader", 0x31544144u /* "DAT1" */, 1, 0},
    [GPTX_KIND_TIMER] = {"gptx_timer", 0x314d4954u /* "TIM1" */, 1, 1},
    /* collectives on host values need no backend; those on a model's
     * gradients hold the model, and with it the context */
    [GPTX_KIND_COMM] = {"gptx_comm", 0x314d4f43u /* "COM1" */, 1, 0},
};

/* A destroyed handle's magic: every bit of the live value flipped, so the
 * message can still say which kind it was. */
static uint32_t dead_magic(int kind) { return ~kinds[kind].live; }

const char *gptx_kind_name(gptx_kind kind) { return kinds[kind].name; }

/* ---- quarantine ------------------------------------------------------------ */

/* A released object's memory is kept (its magic dead) until QUARANTINE later
 * objects have been released, so a call on a handle destroyed in the recent
 * past reads the dead magic rather than freed or reused memory. Older
 * handles are freed for real: the check is for the common mistake, not a
 * guarantee. The ring is global (objects of every context and thread), hence
 * its own lock; at exit what it holds is still reachable, not a leak. */
#define QUARANTINE 64
static pthread_mutex_t quarantine_mu = PTHREAD_MUTEX_INITIALIZER;
static void *quarantine[QUARANTINE];
static unsigned quarantine_next;

static void quarantine_put(void *obj) {
    pthread_mutex_lock(&quarantine_mu);
    void *oldest = quarantine[quarantine_next];
    quarantine[quarantine_next] = obj;
    quarantine_next = (quarantine_next + 1) % QUARANTINE;
    pthread_mutex_unlock(&quarantine_mu);
    free(oldest);
}

/* ---- the context's lock ------------------------------------------------------ */

/* Context locks this thread holds (with nesting). A thread that holds none
 * waits for a lock; one that holds a lock only tries another (a comparison
 * of models in two contexts): no thread ever waits while holding a lock, so
 * two threads can never wait for each other. */
static _Thread_local int ctx_locks_held;

static int lock_context(pthread_mutex_t *mu, const char *arg, const char *func) {
    if (ctx_locks_held == 0)
        pthread_mutex_lock(mu);
    else if (pthread_mutex_trylock(mu) != 0)
        return gptx_fail(GPTX_ERR_BUSY, func,
                         "the context of '%s' is in use by another thread, and this call already "
                         "holds another context's objects; retry, or make the calls one at a time",
                         arg);
    ctx_locks_held++;
    return GPTX_OK;
}

static void unlock_context(pthread_mutex_t *mu) {
    ctx_locks_held--;
    pthread_mutex_unlock(mu);
}

/* ---- reference counts ---------------------------------------------------------- */

void gptx_handle_init(gptx_handle *h, gptx_kind kind, gptx_handle *parent,
                      pthread_mutex_t *ctx_mu, gptx_release_fn release) {
    atomic_init(&h->magic, kinds[kind].live);
    atomic_init(&h->owner, 0);
    h->depth = 0;
    atomic_init(&h->refs, 1);
    h->kind = kind;
    h->parent = parent;
    h->ctx_mu = ctx_mu ? ctx_mu : parent ? parent->ctx_mu : NULL;
    h->release = release;
    if (parent) gptx_handle_retain(parent);
}

void gptx_handle_retain(gptx_handle *h) {
    atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
}

/* The last reference: release what the object holds (under the context's
 * lock: the backend's allocator is shared with the context's other objects;
 * a context itself has no other user left by then), park its memory in the
 * quarantine, then drop its own reference on its parent. */
void gptx_handle_unref(gptx_handle *h) {
    if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) != 1) return;
    gptx_handle *parent = h->parent;
    /* it waits, even inside a call: a release happens inside a call on an
     * object of the same context only (gptx_generate's own generator), and
     * release functions call no entry point, so no wait can close a cycle */
    int lock = h->ctx_mu && h->kind != GPTX_KIND_CONTEXT;
    if (lock) pthread_mutex_lock(h->ctx_mu);
    if (h->release) h->release(h);
    if (lock) pthread_mutex_unlock(h->ctx_mu);
    quarantine_put(h);
    if (parent) gptx_handle_unref(parent);
}

/* ---- checks ------------------------------------------------------------------------ */

static int kind_of_magic(uint32_t magic, int *dead) {
    for (int k = 0; k < GPTX_KIND_COUNT; k++) {
        if (magic == kinds[k].live) return *dead = 0, k;
        if (magic == dead_magic(k)) return *dead = 1, k;
    }
    return -1;
}

int gptx_handle_check(const void *obj, gptx_kind kind, const char *arg, const char *func) {
    if (!obj) return gptx_fail(GPTX_ERR_NULL, func, "argument '%s' is NULL", arg);
    uint32_t magic = atomic_load_explicit(&((const gptx_handle *)obj)->magic, memory_order_acquire);
    if (magic == kinds[kind].live) return GPTX_OK;
    int dead = 0, found = kind_of_magic(magic, &dead);
    if (found == (int)kind)
        return gptx_fail(GPTX_ERR_MISUSE, func,
                         "argument '%s' is a %s that was destroyed (use after %s_destroy)", arg,
                         kinds[kind].name, kinds[kind].name);
    if (found >= 0)
        return gptx_fail(GPTX_ERR_MISUSE, func, "argument '%s' is a %s%s, not a %s", arg,
                         dead ? "destroyed " : "", kinds[found].name, kinds[kind].name);
    return gptx_fail(GPTX_ERR_MISUSE, func,
                     "argument '%s' is not a %s (no gptx object at %p: never created, destroyed "
                     "long ago, or overwritten)",
                     arg, kinds[kind].name, obj);
}

/* ---- guards ----------------------------------------------------------------------- */

static uintptr_t this_thread(void) {
    static _Thread_local char tag; /* one address per live thread */
    return (uintptr_t)&tag;
}

static int take_owner(gptx_handle *h, const char *arg, const char *func) {
    uintptr_t me = this_thread(), none = 0;
    if (atomic_load_explicit(&h->owner, memory_order_relaxed) == me) {
        h->depth++; /* a call of this thread nested in another on the same object */
        return GPTX_OK;
    }
    /* acquire: what the previous owner wrote into the object is visible */
    if (!atomic_compare_exchange_strong_explicit(&h->owner, &none, me, memory_order_acquire,
                                                 memory_order_relaxed))
        return gptx_fail(GPTX_ERR_BUSY, func,
                         "argument '%s' (%s) is in use by another thread; calls on one object "
                         "must not overlap (gptx.h: Threads and lifetimes)",
                         arg, kinds[h->kind].name);
    h->depth = 1;
    return GPTX_OK;
}

static void drop_owner(gptx_handle *h) {
    if (--h->depth == 0) atomic_store_explicit(&h->owner, 0, memory_order_release);
}

int gptx_guard_enter(gptx_guard *g, const void *obj, gptx_kind kind, int flags, const char *arg,
                     const char *func) {
    *g = (gptx_guard){0};
    int check = flags & GPTX_GUARD_CHECK;
    if (check) GPTX_TRY(gptx_handle_check(obj, kind, arg, func));
    gptx_handle *h = (gptx_handle *)obj;
    g->h = h;
    if (kinds[kind].exclusive) {
        GPTX_TRY(take_owner(h, arg, func));
        g->busy = 1;
    }
    if (h->ctx_mu && kinds[kind].locks_context && !(flags & GPTX_GUARD_NO_LOCK)) {
        GPTX_TRY(lock_context(h->ctx_mu, arg, func));
        g->locked = 1;
    }
    /* destroy poisons the magic while holding what this call just took: seen
     * live before, dead now means it was destroyed in between */
    if (check) return gptx_handle_check(obj, kind, arg, func);
    return GPTX_OK;
}

void gptx_guard_leave(gptx_guard *g) {
    if (g->locked) unlock_context(g->h->ctx_mu);
    if (g->busy) drop_owner(g->h);
    *g = (gptx_guard){0};
}

/* ---- destroy ----------------------------------------------------------------------- */

void gptx_handle_destroy(void *obj, gptx_kind kind, const char *arg, const char *func) {
    if (!obj) return;
    if (atomic_load_explicit(&((gptx_handle *)obj)->magic, memory_order_acquire) ==
        dead_magic(kind)) {
        gptx_fail(GPTX_ERR_MISUSE, func,
                  "argument '%s' is a %s that was already destroyed; nothing was done", arg,
                  kinds[kind].name);
        return;
    }
    gptx_guard g;
    int rc = gptx_guard_enter(&g, obj, kind, GPTX_GUARD_CHECK, arg, func);
    if (rc == GPTX_OK && g.busy && ((gptx_handle *)obj)->depth > 1)
        rc = gptx_fail(GPTX_ERR_BUSY, func, "argument '%s' (%s) is inside a call on this thread",
                       arg, kinds[kind].name);
    if (rc != GPTX_OK) { /* the message says why; the object stays as it was */
        gptx_guard_leave(&g);
        return;
    }
    atomic_store_explicit(&((gptx_handle *)obj)->magic, dead_magic(kind), memory_order_release);
    gptx_guard_leave(&g);
    gptx_handle_unref(obj);
}

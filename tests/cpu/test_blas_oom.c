/* Out of address space at the CPU backend's OpenBLAS buffers is
 * GPTX_ERR_NO_MEMORY, never a hang (backends/cpu/cpu_blas_buffers.c): a
 * context created under a limit, and a model used from a thread that never
 * multiplied before while the limit leaves no room. OpenBLAS retries a
 * failed buffer forever, so without the check this test hangs (the ctest
 * timeout fails it). The limit is lowered for the calls only (RLIMIT_AS's
 * soft limit, raised back after); under ASan, whose shadow memory needs far
 * more address space than any limit, the test is skipped. */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "address_limit.h"
#include "test_util.h"

static struct rlimit saved;

/* Leaves `room` bytes of address space beyond what is mapped now. */
static int limit_room(size_t room) {
    struct rlimit r = saved;
    r.rlim_cur = mapped_bytes() + room;
    return setrlimit(RLIMIT_AS, &r);
}

static void unlimit(void) { setrlimit(RLIMIT_AS, &saved); }

typedef struct {
    gptx_model *model;
    int rc;
    char msg[1024];
} forward_job;

static void *forward_on_new_thread(void *vp) {
    forward_job *j = vp;
    int32_t in[4 * 16], tg[4 * 16];
    fill_tokens(in, 64, 50, 1);
    fill_tokens(tg, 64, 50, 2);
    float loss = 0;
    j->rc = gptx_model_forward(j->model, in, tg, 4, 16, &loss);
    snprintf(j->msg, sizeof j->msg, "%s", gptx_last_error());
    return NULL;
}

int main(void) {
#ifdef UNDER_ASAN
    printf("skipped under AddressSanitizer\n");
    return 77;
#endif
    if (getrlimit(RLIMIT_AS, &saved) != 0) return 1;

    /* a context whose two threads cannot both have OpenBLAS's 128 MiB */
    gptx_context *ctx = NULL;
    CHECK(limit_room((size_t)160 << 20) == 0);
    int rc = make_cpu_context(&ctx, 2);
    unlimit();
    CHECK_STATUS(rc, GPTX_ERR_NO_MEMORY);
    CHECK_MSG("OpenBLAS needs 129 MiB of address space for each thread");
    CHECK_MSG("(2 here)");
    if (ctx) gptx_context_destroy(ctx);

    /* with room, the same context works; then a new thread calls its model */
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    gptx_model_config c = small_config();
    gptx_model *m = NULL;
    REQUIRE_OK(gptx_model_create(&m, ctx, &c));
    REQUIRE_OK(gptx_model_init_random(m, 1));
    forward_job j = {.model = m};
    /* a first forward here allocates the activations of this shape: under
     * the limit, the new thread's only need is then its OpenBLAS buffer (else
     * the activations' allocation may be the one that fails, by chance of
     * what is mapped) */
    forward_on_new_thread(&j);
    REQUIRE_OK(j.rc);
    pthread_t t;
    CHECK(limit_room((size_t)64 << 20) == 0);
    int started = pthread_create(&t, NULL, forward_on_new_thread, &j) == 0;
    if (started) pthread_join(t, NULL);
    unlimit();
    CHECK(started);
    CHECK(j.rc == GPTX_ERR_NO_MEMORY);
    CHECK(strstr(j.msg, "OpenBLAS needs 129 MiB") != NULL);
    if (j.rc != GPTX_ERR_NO_MEMORY || !strstr(j.msg, "OpenBLAS needs 129 MiB"))
        fprintf(stderr, "new thread: %s (%s)\n", gptx_status_name(j.rc), j.msg);

    /* and a new thread with room succeeds */
    if (pthread_create(&t, NULL, forward_on_new_thread, &j) == 0) pthread_join(t, NULL);
    CHECK_STATUS(j.rc, GPTX_OK);

    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return check_exit("test_blas_oom");
}

/* gptx_timer on a CUDA context: start and stop record events on the
 * compute stream (no synchronization) and an interval is the device time
 * between them, resolved when read. On the emulation an event is reached
 * when it is recorded (launches run synchronously), so an interval is the
 * host time between the two records:
 *   - 4 intervals around a training step (forward_backward + AdamW) on a
 *     small model, each followed by a sleep outside the interval: every
 *     interval is > 0 and below the host time from before its start to
 *     after a synchronize that follows its stop, so the sleeps are not in it;
 *   - an interval around a 20 ms sleep alone covers the sleep (emulation
 *     only: a device would show almost nothing, as no work was queued);
 *   - gptx_timer_interval resolves before the report does; the report's
 *     cold/steady figures equal those computed from the intervals;
 *   - a timer destroyed with unread intervals and one running interval. */
#include <time.h>

#include "check.h"
#include "cuda_test_util.h"

#define T 16

static double host_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

int main(void) {
    gptx_context *ctx = NULL;
    int rc = cuda_test_context(&ctx, "bf16");
    if (rc == GPTX_ERR_UNSUPPORTED) return cuda_test_skip("test_cuda_timer");
    REQUIRE_OK(rc);
    CHECK(ctx->ops->event_record != NULL);
    gptx_model_config c;
    gptx_model_config_init(&c);
    c.vocab_size = 67;
    c.padded_vocab_size = 80;
    c.context_length = T;
    c.n_layer = 1;
    c.n_head = 2;
    c.n_embd = 32;
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    REQUIRE_OK(gptx_model_create(&m, ctx, &c));
    REQUIRE_OK(gptx_model_init_random(m, 3));
    REQUIRE_OK(gptx_optimizer_create(&opt, m, NULL));
    int32_t in[T], tg[T];
    for (int i = 0; i < T; i++) {
        in[i] = (i * 7) % 67;
        tg[i] = (i * 3 + 1) % 67;
    }

    gptx_timer *t = NULL;
    REQUIRE_OK(gptx_timer_create(&t, ctx, GPTX_TIMER_TRAINING_STEPS));
    double host[4];
    for (int s = 0; s < 4; s++) {
        double h0 = host_now();
        CHECK_OK(gptx_timer_start(t));
        CHECK_OK(gptx_model_forward_backward(m, in, tg, 1, T, 1.0f, NULL));
        CHECK_OK(gptx_optimizer_step(opt, m, NULL));
        CHECK_OK(gptx_timer_stop(t, T));
        /* the stop event may be reached after stop returns: wait for it */
        CHECK_OK(gptx_context_synchronize(ctx));
        host[s] = host_now() - h0;
        sleep_ms(5); /* outside every interval */
    }
    double sec[4];
    int64_t tok = 0;
    CHECK_OK(gptx_timer_interval(t, 2, &sec[2], &tok)); /* resolves first */
    CHECK(tok == T);
    for (int s = 0; s < 4; s++) {
        CHECK_OK(gptx_timer_interval(t, s, &sec[s], NULL));
        CHECK(sec[s] > 0.0 && sec[s] <= host[s]);
    }
    gptx_timer_report r;
    gptx_timer_report_init(&r);
    CHECK_OK(gptx_timer_get_report(t, &r));
    CHECK(r.intervals == 4 && r.cold_seconds == sec[0] && r.steady_tokens == 3 * T);
    CHECK(r.steady_seconds == sec[1] + sec[2] + sec[3]);
    CHECK(r.steady_min_seconds <= r.steady_median_seconds &&
          r.steady_median_seconds <= r.steady_max_seconds);
    printf("intervals (s): %.4f %.4f %.4f %.4f; host around them %.4f %.4f %.4f %.4f\n", sec[0],
           sec[1], sec[2], sec[3], host[0], host[1], host[2], host[3]);
#ifdef GPTX_TEST_CUDA_EMU
    CHECK_OK(gptx_timer_start(t));
    sleep_ms(20);
    CHECK_OK(gptx_timer_stop(t, 0));
    CHECK_OK(gptx_timer_interval(t, 4, &sec[0], NULL));
    CHECK(sec[0] >= 0.019);
#endif
    /* unread intervals and a running one are released with the timer */
    CHECK_OK(gptx_timer_start(t));
    CHECK_OK(gptx_timer_stop(t, 1));
    CHECK_OK(gptx_timer_start(t));
    gptx_timer_destroy(t);

    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return check_exit("test_cuda_timer");
}

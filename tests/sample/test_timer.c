/* The timer: call-order errors, every interval kept, the cold interval
 * reported apart, and steady statistics that follow from the intervals. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "test_util.h"

static void check_message_mentions(const char *needle) {
    if (!strstr(gptx_last_error(), needle)) {
        fprintf(stderr, "message '%s' does not mention '%s'\n", gptx_last_error(), needle);
        check_failures++;
    }
}

/* Stops the current test function when a set-up call fails. */
#define REQUIRE_OK_VOID(call)                                                             \
    do {                                                                                  \
        int req_rc_ = (call);                                                             \
        if (req_rc_ != GPTX_OK) {                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,          \
                    gptx_last_error());                                                   \
            check_failures++;                                                             \
            return;                                                                       \
        }                                                                                 \
    } while (0)

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_errors(void) {
    gptx_timer *t = (gptx_timer *)1;
    CHECK_STATUS(gptx_timer_create(NULL, NULL, GPTX_TIMER_END_TO_END), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_timer_create(&t, NULL, 7), GPTX_ERR_INVALID);
    CHECK(t == NULL);
    check_message_mentions("scope is 7");
    CHECK_STATUS(gptx_timer_create(&t, NULL, -1), GPTX_ERR_INVALID);
    REQUIRE_OK_VOID(gptx_timer_create(&t, NULL, GPTX_TIMER_TRAINING_STEPS));
    CHECK_STATUS(gptx_timer_start(NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_timer_stop(NULL, 0), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_timer_stop(t, 0), GPTX_ERR_STATE);
    check_message_mentions("without");
    CHECK_OK(gptx_timer_start(t));
    CHECK_STATUS(gptx_timer_start(t), GPTX_ERR_STATE);
    check_message_mentions("already running");
    CHECK_STATUS(gptx_timer_stop(t, -5), GPTX_ERR_INVALID);
    check_message_mentions("tokens is -5");
    CHECK_OK(gptx_timer_stop(t, 5)); /* still running after the bad stop */
    CHECK_STATUS(gptx_timer_stop(t, 5), GPTX_ERR_STATE);

    double sec = -1.0;
    int64_t tok = -1;
    CHECK_OK(gptx_timer_interval(t, 0, &sec, &tok));
    CHECK(sec >= 0.0 && tok == 5);
    CHECK_OK(gptx_timer_interval(t, 0, NULL, NULL));
    CHECK_STATUS(gptx_timer_interval(t, 1, &sec, &tok), GPTX_ERR_INVALID);
    check_message_mentions("index is 1");
    CHECK_STATUS(gptx_timer_interval(t, -1, &sec, &tok), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_timer_interval(NULL, 0, &sec, &tok), GPTX_ERR_NULL);

    gptx_timer_report r;
    gptx_timer_report_init(&r);
    CHECK_STATUS(gptx_timer_get_report(NULL, &r), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_timer_get_report(t, NULL), GPTX_ERR_NULL);
    r.struct_size = 0;
    CHECK_STATUS(gptx_timer_get_report(t, &r), GPTX_ERR_INVALID);
    check_message_mentions("struct_size");
    /* one interval: it is the cold one; nothing is steady yet */
    gptx_timer_report_init(&r);
    CHECK_OK(gptx_timer_get_report(t, &r));
    CHECK(r.intervals == 1 && r.scope == GPTX_TIMER_TRAINING_STEPS);
    CHECK(r.cold_seconds == sec && r.cold_tokens == 5);
    CHECK(r.steady_seconds == 0.0 && r.steady_tokens == 0 && r.steady_tokens_per_second == 0.0);
    /* an older, shorter report struct gets the fields it has */
    gptx_timer_report_init(&r);
    r.struct_size = offsetof(gptx_timer_report, cold_tokens);
    r.cold_tokens = 42;
    CHECK_OK(gptx_timer_get_report(t, &r));
    CHECK(r.intervals == 1 && r.cold_seconds == sec && r.cold_tokens == 42);
    gptx_timer_destroy(t);
    gptx_timer_destroy(NULL);

    /* an empty timer reports zeros */
    REQUIRE_OK_VOID(gptx_timer_create(&t, NULL, GPTX_TIMER_END_TO_END));
    gptx_timer_report_init(&r);
    CHECK_OK(gptx_timer_get_report(t, &r));
    CHECK(r.intervals == 0 && r.cold_seconds == 0.0 && r.scope == GPTX_TIMER_END_TO_END);
    gptx_timer_destroy(t);
}

/* A slow first interval, then five short ones of increasing length. */
static void test_cold_and_steady(gptx_context *ctx) {
    gptx_timer *t = NULL;
    REQUIRE_OK_VOID(gptx_timer_create(&t, ctx, GPTX_TIMER_TRAINING_STEPS));
    const int cold_ms = 60, steady_ms[5] = {2, 4, 6, 8, 10};
    CHECK_OK(gptx_timer_start(t));
    sleep_ms(cold_ms);
    CHECK_OK(gptx_timer_stop(t, 1000));
    for (int i = 0; i < 5; i++) {
        CHECK_OK(gptx_timer_start(t));
        sleep_ms(steady_ms[i]);
        CHECK_OK(gptx_timer_stop(t, 100 * (i + 1)));
    }
    gptx_timer_report r;
    gptx_timer_report_init(&r);
    CHECK_OK(gptx_timer_get_report(t, &r));
    CHECK(r.intervals == 6);
    double sec[6], sorted[5], sum = 0.0;
    int64_t tok[6], tsum = 0;
    for (int i = 0; i < 6; i++) {
        CHECK_OK(gptx_timer_interval(t, i, &sec[i], &tok[i]));
        double at_least = (i == 0 ? cold_ms : steady_ms[i - 1]) * 1e-3;
        if (sec[i] < at_least) {
            fprintf(stderr, "interval %d lasted %.6f s, slept %.6f s\n", i, sec[i], at_least);
            check_failures++;
        }
        if (i > 0) {
            sorted[i - 1] = sec[i];
            sum += sec[i];
            tsum += tok[i];
        }
    }
    qsort(sorted, 5, sizeof *sorted, cmp_double);
    CHECK(r.cold_seconds == sec[0] && r.cold_tokens == 1000);
    CHECK(r.steady_seconds == sum && r.steady_tokens == tsum && tsum == 1500);
    CHECK(r.steady_median_seconds == sorted[2]);
    CHECK(r.steady_min_seconds == sorted[0] && r.steady_max_seconds == sorted[4]);
    CHECK(r.steady_tokens_per_second == (double)tsum / sum);
    /* the cold interval is kept out of the steady figures */
    CHECK(r.steady_median_seconds >= 6e-3 && r.steady_max_seconds >= 10e-3);
    CHECK(r.steady_min_seconds >= 2e-3);
    CHECK(r.cold_seconds >= 60e-3);
    CHECK(r.steady_median_seconds < r.cold_seconds);
    printf("cold %.4f s, steady median %.4f s (min %.4f, max %.4f), %.0f tokens/s\n",
           r.cold_seconds, r.steady_median_seconds, r.steady_min_seconds, r.steady_max_seconds,
           r.steady_tokens_per_second);

    /* an even number of steady intervals: the median is the middle pair's mean */
    CHECK_OK(gptx_timer_start(t));
    sleep_ms(1);
    CHECK_OK(gptx_timer_stop(t, 0));
    CHECK_OK(gptx_timer_get_report(t, &r));
    double six[6];
    for (int i = 1; i <= 6; i++) CHECK_OK(gptx_timer_interval(t, i, &six[i - 1], NULL));
    qsort(six, 6, sizeof *six, cmp_double);
    CHECK(r.intervals == 7);
    CHECK(r.steady_median_seconds == 0.5 * (six[2] + six[3]));
    gptx_timer_destroy(t);
}

/* Many intervals: every one is kept and reported, in order. */
static void test_many_intervals(void) {
    gptx_timer *t = NULL;
    REQUIRE_OK_VOID(gptx_timer_create(&t, NULL, GPTX_TIMER_END_TO_END));
    const int n = 1000;
    for (int i = 0; i < n; i++) {
        CHECK_OK(gptx_timer_start(t));
        CHECK_OK(gptx_timer_stop(t, i));
    }
    gptx_timer_report r;
    gptx_timer_report_init(&r);
    CHECK_OK(gptx_timer_get_report(t, &r));
    CHECK(r.intervals == n);
    CHECK(r.steady_tokens == (int64_t)n * (n - 1) / 2);
    int in_order = 1;
    for (int i = 0; i < n; i++) {
        double s = -1.0;
        int64_t k = -1;
        CHECK_OK(gptx_timer_interval(t, i, &s, &k));
        in_order &= k == i && s >= 0.0;
    }
    CHECK(in_order);
    CHECK_STATUS(gptx_timer_interval(t, n, NULL, NULL), GPTX_ERR_INVALID);
    gptx_timer_destroy(t);
}

int main(void) {
    gptx_context *ctx = NULL;
    if (make_cpu_context(&ctx, 1) != GPTX_OK) {
        fprintf(stderr, "context: %s\n", gptx_last_error());
        return 1;
    }
    test_errors();
    test_cold_and_steady(ctx);
    test_many_intervals();
    gptx_context_destroy(ctx);
    return check_exit("test_timer");
}

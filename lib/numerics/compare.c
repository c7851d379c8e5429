/* Layered comparison of two runs of the same parameters and inputs:
 * logits -> softmax -> sampled tokens (see docs/numerics.md).
 * Everything after the forward passes runs on the host, in double where it
 * sums, so the comparison adds no error of its own to what it measures. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "model.h"
#include "abi_struct.h"
#include "sampling.h"

/* ---- options and report ------------------------------------------------------ */

static const gptx_compare_options compare_defaults = {
    .struct_size = GPTX_COMPARE_OPTIONS_SIZE,
    .draws_per_position = 1, /* tolerances 0: bitwise equality */
};

int gptx_compare_options_init_sized(gptx_compare_options *o, size_t size) {
    return gptx_struct_init(o, size, &compare_defaults, &gptx_desc_compare_options, __func__,
                            "opts");
}

int gptx_compare_report_init_sized(gptx_compare_report *r, size_t size) {
    static const gptx_compare_report zero = {.struct_size = GPTX_COMPARE_REPORT_SIZE};
    return gptx_struct_init(r, size, &zero, &gptx_desc_compare_report, __func__, "report");
}

static int check_tol(const char *name, double v) {
    /* +inf is allowed and means "do not judge this layer" */
    if (!(v >= 0.0)) return GPTX_FAIL(GPTX_ERR_INVALID, "opts.%s is %g; must be >= 0", name, v);
    return GPTX_OK;
}

/* Fills *o from the caller's options (NULL = defaults) and the sampler
 * options they point to, and validates both. */
static int read_compare_options(gptx_compare_options *o, gptx_sampler_options *so,
                                const gptx_compare_options *in, const char *func) {
    *o = compare_defaults;
    if (in) GPTX_TRY(gptx_struct_read(o, in, &gptx_desc_compare_options, func, "opts"));
    GPTX_TRY(check_tol("logits_atol", o->logits_atol));
    GPTX_TRY(check_tol("logits_rtol", o->logits_rtol));
    GPTX_TRY(check_tol("prob_atol", o->prob_atol));
    GPTX_TRY(check_tol("kl_tol", o->kl_tol));
    if (o->max_token_mismatches < 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.max_token_mismatches is %lld; must be >= 0",
                         (long long)o->max_token_mismatches);
    if (o->max_argmax_mismatches < 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.max_argmax_mismatches is %lld; must be >= 0",
                         (long long)o->max_argmax_mismatches);
    if (o->draws_per_position < 1 || o->draws_per_position > (1 << 20))
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.draws_per_position is %d; must be in [1, %d]",
                         o->draws_per_position, 1 << 20);
    if (o->positions < 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.positions is %d; must be >= 0 (0 = all T)",
                         o->positions);
    gptx_sampler_options_init(so);
    if (o->sampler)
        GPTX_TRY(gptx_struct_read(so, o->sampler, &gptx_desc_sampler_options, func,
                                  "opts.sampler"));
    o->sampler = so;
    return GPTX_OK;
}

/* The caller's report must come from gptx_compare_report_init. */
static int check_report_size(const gptx_compare_report *r, const char *func) {
    return gptx_struct_check_size(r->struct_size, &gptx_desc_compare_report, func, "report");
}

static void copy_text(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

/* ---- the three layers ---------------------------------------------------------- */

/* Layer 1: elementwise over rows * n. */
static void compare_logit_values(const float *a, const float *b, size_t rows, size_t n,
                                 gptx_compare_report *r) {
    r->bitwise_equal = 1;
    r->logits_worst_row = r->logits_worst_col = -1;
    size_t total = rows * n;
    for (size_t i = 0; i < total; i++) {
        float x = a[i], y = b[i];
        if (memcmp(&x, &y, sizeof x) != 0) r->bitwise_equal = 0;
        if (isnan(x) || isnan(y)) {
            r->logits_nonfinite++;
            r->logits_outside++;
            continue;
        }
        if (x == y) continue; /* equal infinities (masked padding) included */
        if (!isfinite(x) || !isfinite(y)) {
            r->logits_nonfinite++;
            r->logits_outside++;
            continue;
        }
        double d = fabs((double)x - (double)y);
        double mag = fmax(fabs((double)x), fabs((double)y)); /* > 0 since x != y */
        if (d > r->logits_max_abs) {
            r->logits_max_abs = d;
            r->logits_worst_row = (int64_t)(i / n);
            r->logits_worst_col = (int64_t)(i % n);
        }
        if (d / mag > r->logits_max_rel) r->logits_max_rel = d / mag;
        if (!(d <= r->logits_atol + r->logits_rtol * mag)) r->logits_outside++;
    }
    r->logits_pass = r->logits_outside == 0;
}

/* log-softmax of one row in double; returns 0 when the row has none
 * (a NaN or +inf, or every column -inf). */
static int log_softmax_row(const float *x, size_t n, double *lp) {
    double mx = -INFINITY;
    for (size_t j = 0; j < n; j++) {
        if (isnan(x[j]) || x[j] == INFINITY) return 0;
        if ((double)x[j] > mx) mx = (double)x[j];
    }
    if (mx == -INFINITY) return 0;
    double s = 0.0;
    for (size_t j = 0; j < n; j++) s += exp((double)x[j] - mx); /* exp(-inf) = 0 */
    double lse = mx + log(s);
    for (size_t j = 0; j < n; j++) lp[j] = (double)x[j] - lse;
    return 1;
}

/* Layer 2: per row, max |p_a - p_b| and KL(p_a || p_b). */
static int compare_softmax(const float *a, const float *b, size_t rows, size_t n,
                           gptx_compare_report *r) {
    double *lpa = malloc(2 * n * sizeof *lpa);
    if (!lpa) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu doubles)", 2 * n);
    double *lpb = lpa + n, kl_sum = 0.0;
    size_t valid = 0;
    r->kl_worst_row = -1;
    for (size_t i = 0; i < rows; i++) {
        if (!log_softmax_row(a + i * n, n, lpa) || !log_softmax_row(b + i * n, n, lpb)) {
            r->softmax_invalid_rows++;
            continue;
        }
        double kl = 0.0;
        for (size_t j = 0; j < n; j++) {
            double pa = exp(lpa[j]), pb = exp(lpb[j]);
            if (fabs(pa - pb) > r->prob_max_abs) r->prob_max_abs = fabs(pa - pb);
            if (lpa[j] == -INFINITY) continue; /* 0 * log 0 = 0 */
            kl += lpb[j] == -INFINITY ? INFINITY : pa * (lpa[j] - lpb[j]);
        }
        if (kl < 0.0) kl = 0.0; /* KL >= 0; a negative sum is rounding */
        kl_sum += kl;
        valid++;
        if (kl > r->kl_max) { /* strictly: identical rows name no worst row */
            r->kl_max = kl;
            r->kl_worst_row = (int64_t)i;
        }
    }
    free(lpa);
    r->kl_mean = valid ? kl_sum / (double)valid : 0.0;
    r->softmax_pass = r->softmax_invalid_rows == 0 && r->prob_max_abs <= r->prob_atol &&
                      r->kl_max <= r->kl_tol;
    return GPTX_OK;
}

/* One draw at Philox counter `counter`; -1 if the sampler refused the row. */
static int32_t draw_at(gptx_sampler *s, const gptx_sampler_options *so, uint64_t counter,
                       const float *row, int n, int vocab) {
    gptx_sampler_state st;
    gptx_sampler_state_init(&st);
    st.seed = so->seed;
    st.stream = so->stream;
    st.counter = counter;
    int32_t t = -1;
    if (gptx_sampler_set_state(s, &st) != GPTX_OK ||
        gptx_sampler_sample(s, row, n, vocab, &t) != GPTX_OK)
        return -1;
    return t;
}

/* Layer 3: greedy argmax per row, then draws_per_position draws per row with
 * the same counter on both sides, so both see the same uniform. */
static int compare_tokens(const float *a, const float *b, size_t rows, int n, int vocab,
                          const gptx_compare_options *o, gptx_compare_report *r) {
    const gptx_sampler_options *so = o->sampler;
    r->temperature = so->temperature;
    r->top_k = so->top_k;
    r->top_p = so->top_p;
    r->seed = so->seed;
    r->stream = so->stream;
    for (size_t i = 0; i < rows; i++) {
        int32_t ta = -1, tb = -1;
        int bad = 0;
        int ra = gptx_sample_argmax(a + i * (size_t)n, vocab, &ta, &bad);
        int rb = gptx_sample_argmax(b + i * (size_t)n, vocab, &tb, &bad);
        if (ra != GPTX_SAMPLE_OK || rb != GPTX_SAMPLE_OK || ta != tb) r->argmax_mismatches++;
    }
    gptx_sampler *sa = NULL, *sb = NULL;
    int rc = gptx_sampler_create(&sa, so);
    if (rc == GPTX_OK) rc = gptx_sampler_create(&sb, so);
    if (rc != GPTX_OK) {
        gptx_sampler_destroy(sa);
        return rc;
    }
    int refused = 0;
    uint64_t counter = 0;
    for (size_t i = 0; i < rows; i++) {
        for (int k = 0; k < o->draws_per_position; k++, counter++) {
            int32_t ta = draw_at(sa, so, counter, a + i * (size_t)n, n, vocab);
            int32_t tb = draw_at(sb, so, counter, b + i * (size_t)n, n, vocab);
            if (ta < 0 || tb < 0) refused = 1;
            if (ta < 0 || tb < 0 || ta != tb) r->token_mismatches++;
        }
    }
    gptx_sampler_destroy(sa);
    gptx_sampler_destroy(sb);
    if (refused) gptx_clear_error(); /* counted in the report; the call itself succeeds */
    r->token_draws = (int64_t)counter;
    r->tokens_pass = r->token_mismatches <= r->max_token_mismatches &&
                     r->argmax_mismatches <= r->max_argmax_mismatches;
    return GPTX_OK;
}

/* All three layers on host logits (rows, n); fills everything but the sides. */
static int compare_host(const float *a, const float *b, size_t rows, int n, int vocab,
                        const gptx_compare_options *o, gptx_compare_report *r) {
    r->rows = (int64_t)rows;
    r->n_logits = n;
    r->vocab_size = vocab;
    r->logits_atol = o->logits_atol;
    r->logits_rtol = o->logits_rtol;
    r->prob_atol = o->prob_atol;
    r->kl_tol = o->kl_tol;
    r->max_token_mismatches = o->max_token_mismatches;
    r->max_argmax_mismatches = o->max_argmax_mismatches;
    compare_logit_values(a, b, rows, (size_t)n, r);
    GPTX_TRY(compare_softmax(a, b, rows, (size_t)n, r));
    GPTX_TRY(compare_tokens(a, b, rows, n, vocab, o, r));
    r->pass = r->logits_pass && r->softmax_pass && r->tokens_pass;
    return GPTX_OK;
}

/* ---- sides ------------------------------------------------------------------------ */

static void describe_external(gptx_compare_side *s, const char *label) {
    copy_text(s->backend, sizeof s->backend, "external");
    copy_text(s->dtype, sizeof s->dtype, "unknown");
    copy_text(s->library_version, sizeof s->library_version, "unknown");
    copy_text(s->blas, sizeof s->blas, "unknown");
    copy_text(s->cuda, sizeof s->cuda, "unknown");
    copy_text(s->label, sizeof s->label, label);
    copy_text(s->kernels, sizeof s->kernels, "unknown");
    s->num_threads = 0;
    s->deterministic = -1;
}

/* The side of model m, which the caller holds; its context is read through
 * the library's own reference (its user may have destroyed that handle). */
static int describe_model(gptx_compare_side *s, const gptx_model *m, const char *label) {
    GPTX_HOLD(m, GPTX_KIND_MODEL); /* the context's lock, for the backend's description */
    /* what runs the products under this policy (the backend says) */
    gptx_context_info info;
    gptx_context_describe(m->ctx, &info);
    copy_text(s->backend, sizeof s->backend, info.backend);
    copy_text(s->dtype, sizeof s->dtype, gptx_precision_name(info.precision));
    copy_text(s->library_version, sizeof s->library_version, gptx_version());
    copy_text(s->blas, sizeof s->blas, info.products);
    copy_text(s->cuda, sizeof s->cuda, strcmp(info.backend, "cuda") == 0 ? "unknown" : "none");
    copy_text(s->label, sizeof s->label, label);
    gptx_kernel_variants_forward_text(&m->variants, s->kernels, sizeof s->kernels);
    s->num_threads = info.num_threads;
    s->deterministic = m->ctx->opts.deterministic;
    return GPTX_OK;
}

/* ---- public entry points ------------------------------------------------------------ */

int gptx_compare_logits(const float *a, const float *b, size_t rows, int n_logits,
                        int vocab_size, const gptx_compare_options *opts,
                        gptx_compare_report *report) {
    GPTX_CHECK_NULL(a);
    GPTX_CHECK_NULL(b);
    GPTX_CHECK_NULL(report);
    GPTX_TRY(check_report_size(report, __func__));
    gptx_compare_options o;
    gptx_sampler_options so;
    GPTX_TRY(read_compare_options(&o, &so, opts, __func__));
    if (rows == 0) return GPTX_FAIL(GPTX_ERR_INVALID, "rows is 0; must be > 0");
    if (vocab_size <= 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "vocab_size is %d; must be > 0", vocab_size);
    if (n_logits < vocab_size)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "n_logits is %d; must be >= vocab_size %d", n_logits,
                         vocab_size);
    if (rows > (size_t)INT64_MAX / (size_t)n_logits / (size_t)o.draws_per_position)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "rows is %zu; rows * n_logits overflows", rows);
    gptx_compare_report full;
    gptx_compare_report_init(&full);
    GPTX_TRY(compare_host(a, b, rows, n_logits, vocab_size, &o, &full));
    describe_external(&full.a, o.label_a);
    describe_external(&full.b, o.label_b);
    return gptx_struct_write(report, &full, &gptx_desc_compare_report, __func__, "report");
}

/* Names the first configuration field in which a and b differ. */
static int check_same_config(const gptx_model_config *a, const gptx_model_config *b) {
#define SAME(field)                                                                          \
    if (a->field != b->field)                                                                \
        return GPTX_FAIL(GPTX_ERR_MISMATCH, "config." #field " is %d in a but %d in b",      \
                         (int)a->field, (int)b->field);
    SAME(vocab_size)
    SAME(padded_vocab_size)
    SAME(context_length)
    SAME(n_layer)
    SAME(n_head)
    SAME(n_embd)
    SAME(qkv_bias)
    SAME(tied_head)
    SAME(mask_padded_logits)
#undef SAME
    if (a->layernorm_eps != b->layernorm_eps)
        return GPTX_FAIL(GPTX_ERR_MISMATCH, "config.layernorm_eps is %g in a but %g in b",
                         (double)a->layernorm_eps, (double)b->layernorm_eps);
    return GPTX_OK;
}

/* Forward without targets, then the logits (B, T, Vp) into host memory. */
static int forward_logits(gptx_model *m, const int32_t *inputs, int B, int T, float *dst,
                          size_t count) {
    GPTX_TRY(gptx_model_forward(m, inputs, NULL, B, T, NULL));
    return gptx_model_get_logits(m, dst, count);
}

/* Keeps the last P of every T positions: (B, T, n) -> (B, P, n), in place. */
static void keep_last_positions(float *x, int B, int T, int P, size_t n) {
    for (int b = 0; b < B; b++)
        memmove(x + (size_t)b * P * n, x + ((size_t)b * T + (size_t)(T - P)) * n,
                (size_t)P * n * sizeof *x);
}

int gptx_compare_models(gptx_model *a, gptx_model *b, const int32_t *inputs, int B, int T,
                        const gptx_compare_options *opts, gptx_compare_report *report) {
    /* both models for the whole comparison (each forward pass and the logits
     * it leaves), each context only while its model runs: they may differ */
    GPTX_GUARD_(a, GPTX_KIND_MODEL, GPTX_GUARD_CHECK | GPTX_GUARD_NO_LOCK);
    GPTX_GUARD_(b, GPTX_KIND_MODEL, GPTX_GUARD_CHECK | GPTX_GUARD_NO_LOCK);
    GPTX_CHECK_NULL(inputs);
    GPTX_CHECK_NULL(report);
    GPTX_TRY(check_report_size(report, __func__));
    gptx_compare_options o;
    gptx_sampler_options so;
    GPTX_TRY(read_compare_options(&o, &so, opts, __func__));
    GPTX_TRY(check_same_config(&a->cfg, &b->cfg));
    const gptx_model_config *c = &a->cfg;
    if (B <= 0) return GPTX_FAIL(GPTX_ERR_INVALID, "B is %d; must be > 0", B);
    if (T <= 0) return GPTX_FAIL(GPTX_ERR_INVALID, "T is %d; must be > 0", T);
    if (T > c->context_length)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "T is %d; exceeds the context length %d", T,
                         c->context_length);
    if ((int64_t)B * T > (1 << 24))
        return GPTX_FAIL(GPTX_ERR_SHAPE, "B*T is %lld; at most %d rows per batch",
                         (long long)B * T, 1 << 24);
    if (o.positions > T)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "opts.positions is %d; must be <= T = %d", o.positions, T);
    size_t BT = (size_t)B * T;
    for (size_t i = 0; i < BT; i++)
        if (inputs[i] < 0 || inputs[i] >= c->vocab_size)
            return GPTX_FAIL(GPTX_ERR_TOKEN_RANGE, "inputs[%zu] is %d; must be in [0, %d)", i,
                             (int)inputs[i], c->vocab_size);

    size_t Vp = (size_t)c->padded_vocab_size, count = BT * Vp;
    float *la = malloc(count * sizeof *la), *lb = malloc(count * sizeof *lb);
    int rc = la && lb ? GPTX_OK
                      : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (2 x %zu logits)", count);
    if (rc == GPTX_OK) rc = forward_logits(a, inputs, B, T, la, count);
    if (rc == GPTX_OK) rc = forward_logits(b, inputs, B, T, lb, count);
    int P = o.positions ? o.positions : T;
    gptx_compare_report full;
    gptx_compare_report_init(&full);
    if (rc == GPTX_OK) {
        if (P < T) {
            keep_last_positions(la, B, T, P, Vp);
            keep_last_positions(lb, B, T, P, Vp);
        }
        rc = compare_host(la, lb, (size_t)B * P, (int)Vp, c->vocab_size, &o, &full);
    }
    free(la);
    free(lb);
    if (rc != GPTX_OK) return rc;
    GPTX_TRY(describe_model(&full.a, a, o.label_a));
    GPTX_TRY(describe_model(&full.b, b, o.label_b));
    return gptx_struct_write(report, &full, &gptx_desc_compare_report, __func__, "report");
}

/* ---- text ------------------------------------------------------------------------------ */

/* Bounded appender: keeps counting past the end so the caller learns the
 * size needed. */
typedef struct text_buf {
    char *p;
    size_t cap, len;
} text_buf;

static void put(text_buf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_buf *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = t->len < t->cap ? t->p + t->len : NULL;
    size_t room = t->len < t->cap ? t->cap - t->len : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) t->len += (size_t)n;
}

/* A report field that may lack its NUL (a caller-filled struct). */
#define FIELD(s) (int)strnlen((s), sizeof(s)), (s)

static const char *verdict(int pass) { return pass ? "PASS" : "FAIL"; }

static void put_side(text_buf *t, const char *name, const gptx_compare_side *s) {
    put(t, "  side %s: backend %.*s, dtype %.*s, threads %d, deterministic %s, gptx %.*s\n", name,
        FIELD(s->backend), FIELD(s->dtype), s->num_threads,
        s->deterministic < 0 ? "unknown" : s->deterministic ? "on" : "off",
        FIELD(s->library_version));
    put(t, "          kernels %.*s\n", FIELD(s->kernels));
    put(t, "          products %.*s; CUDA %.*s", FIELD(s->blas), FIELD(s->cuda));
    if (s->label[0]) put(t, "; label %.*s", FIELD(s->label));
    put(t, "\n");
}

int gptx_compare_report_format(const gptx_compare_report *r_in, char *buf, size_t capacity,
                               size_t *len) {
    GPTX_CHECK_NULL(r_in);
    GPTX_CHECK_NULL(buf);
    /* a report from an older header: the fields it lacks print as zero */
    gptx_compare_report full;
    gptx_compare_report_init(&full);
    GPTX_TRY(gptx_struct_read(&full, r_in, &gptx_desc_compare_report, __func__, "report"));
    const gptx_compare_report *r = &full;
    text_buf t = {buf, capacity, 0};
    put(&t, "layered comparison: %s (side a is the reference)\n", verdict(r->pass));
    put_side(&t, "a", &r->a);
    put_side(&t, "b", &r->b);
    put(&t, "  compared: %lld rows x %d logits (vocab %d); logits bitwise equal: %s\n",
        (long long)r->rows, r->n_logits, r->vocab_size, r->bitwise_equal ? "yes" : "no");
    put(&t, "  [%s] 1 logits:  max abs err %.6g", verdict(r->logits_pass), r->logits_max_abs);
    if (r->logits_worst_row >= 0)
        put(&t, " (row %lld, col %lld)", (long long)r->logits_worst_row,
            (long long)r->logits_worst_col);
    /* in double: a caller-filled report may hold any values (exact below 2^53) */
    put(&t, ", max rel err %.6g, outside tol %lld of %.0f, non-finite %lld\n",
        r->logits_max_rel, (long long)r->logits_outside, (double)r->rows * (double)r->n_logits,
        (long long)r->logits_nonfinite);
    put(&t, "                    tol: |a-b| <= %g + %g * max(|a|,|b|)\n", r->logits_atol,
        r->logits_rtol);
    put(&t, "  [%s] 2 softmax: max |p_a-p_b| %.6g, KL(a||b) mean %.6g max %.6g",
        verdict(r->softmax_pass), r->prob_max_abs, r->kl_mean, r->kl_max);
    if (r->kl_worst_row >= 0) put(&t, " (row %lld)", (long long)r->kl_worst_row);
    put(&t, ", invalid rows %lld\n", (long long)r->softmax_invalid_rows);
    put(&t, "                    tol: max |p_a-p_b| <= %g, max KL <= %g\n", r->prob_atol,
        r->kl_tol);
    put(&t,
        "  [%s] 3 tokens:  sampled draws differing %lld of %lld, greedy argmax differing %lld "
        "of %lld rows\n",
        verdict(r->tokens_pass), (long long)r->token_mismatches, (long long)r->token_draws,
        (long long)r->argmax_mismatches, (long long)r->rows);
    put(&t, "                    tol: <= %lld draws, <= %lld rows; sampler temperature %g, "
            "top_k %d, top_p %g, seed %llu, stream %llu\n",
        (long long)r->max_token_mismatches, (long long)r->max_argmax_mismatches,
        (double)r->temperature, r->top_k, (double)r->top_p, (unsigned long long)r->seed,
        (unsigned long long)r->stream);
    if (len) *len = t.len;
    if (t.len >= capacity)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "capacity is %zu; the report needs %zu bytes plus the NUL",
                         capacity, t.len);
    return GPTX_OK;
}

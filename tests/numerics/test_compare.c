/* The layered comparison: exact agreement across thread counts, detection of
 * a perturbed parameter, known values on hand-made rows, and argument errors. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_util.h"

static void check_message_mentions(const char *needle) {
    if (!strstr(gptx_last_error(), needle)) {
        fprintf(stderr, "message '%s' does not mention '%s'\n", gptx_last_error(), needle);
        check_failures++;
    }
}

static int near(double x, double want, double tol) { return fabs(x - want) <= tol; }

/* Copies every parameter of src into dst (any two contexts). */
static int copy_parameters(gptx_model *dst, const gptx_model *src) {
    int n = gptx_model_num_tensors(src);
    for (int i = 0; i < n; i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        int rc = gptx_model_tensor_info(src, i, &info);
        float *buf = rc == GPTX_OK ? malloc(info.numel * sizeof *buf) : NULL;
        if (rc == GPTX_OK && !buf) rc = GPTX_ERR_NO_MEMORY;
        if (rc == GPTX_OK) rc = gptx_model_get_parameter(src, info.name, buf, info.numel);
        if (rc == GPTX_OK) rc = gptx_model_set_parameter(dst, info.name, buf, info.numel);
        free(buf);
        if (rc != GPTX_OK) return rc;
    }
    return GPTX_OK;
}

/* Adds delta to element k of a parameter. */
static int perturb(gptx_model *m, const char *name, size_t k, float delta) {
    int idx = 0;
    gptx_tensor_info info;
    gptx_tensor_info_init(&info);
    int rc = gptx_model_find_tensor(m, name, &idx);
    if (rc == GPTX_OK) rc = gptx_model_tensor_info(m, idx, &info);
    if (rc != GPTX_OK) return rc;
    if (k >= info.numel) return GPTX_ERR_INVALID;
    float *buf = malloc(info.numel * sizeof *buf);
    if (!buf) return GPTX_ERR_NO_MEMORY;
    rc = gptx_model_get_parameter(m, name, buf, info.numel);
    buf[k] += delta;
    if (rc == GPTX_OK) rc = gptx_model_set_parameter(m, name, buf, info.numel);
    free(buf);
    return rc;
}

static void print_report(const gptx_compare_report *r) {
    char text[GPTX_COMPARE_TEXT_MAX];
    size_t len = 0;
    if (gptx_compare_report_format(r, text, sizeof text, &len) == GPTX_OK) fputs(text, stdout);
    else fprintf(stderr, "format failed: %s\n", gptx_last_error());
}

enum { B = 2, T = 8 };

/* CPU model vs itself at 1 and 2 threads, then with one parameter nudged. */
static int test_models(void) {
    gptx_context *c1 = NULL, *c2 = NULL;
    REQUIRE_OK(make_cpu_context(&c1, 1));
    REQUIRE_OK(make_cpu_context(&c2, 2));
    gptx_model_config cfg = small_config();
    gptx_model *a = NULL, *b = NULL;
    REQUIRE_OK(gptx_model_create(&a, c1, &cfg));
    REQUIRE_OK(gptx_model_create(&b, c2, &cfg));
    REQUIRE_OK(gptx_model_init_random(a, 7));
    REQUIRE_OK(copy_parameters(b, a));
    int32_t inputs[B * T];
    fill_tokens(inputs, B * T, cfg.vocab_size, 3);

    gptx_compare_options o;
    gptx_compare_options_init(&o);
    o.label_a = "one thread";
    o.draws_per_position = 4;
    gptx_compare_report r;
    gptx_compare_report_init(&r);
    CHECK_OK(gptx_compare_models(a, b, inputs, B, T, &o, &r));
    print_report(&r);
    CHECK(r.pass && r.logits_pass && r.softmax_pass && r.tokens_pass);
    CHECK(r.bitwise_equal == 1);
    CHECK(r.logits_max_abs == 0.0 && r.logits_max_rel == 0.0 && r.logits_outside == 0);
    CHECK(r.logits_nonfinite == 0 && r.logits_worst_row == -1);
    CHECK(r.prob_max_abs == 0.0 && r.kl_mean == 0.0 && r.kl_max == 0.0);
    CHECK(r.softmax_invalid_rows == 0);
    CHECK(r.token_mismatches == 0 && r.argmax_mismatches == 0);
    CHECK(r.rows == B * T && r.token_draws == 4 * B * T);
    CHECK(r.n_logits == cfg.padded_vocab_size && r.vocab_size == cfg.vocab_size);
    CHECK(strcmp(r.a.backend, "cpu") == 0 && strcmp(r.b.backend, "cpu") == 0);
    CHECK(r.a.num_threads == 1 && r.b.num_threads == 2);
    CHECK(strcmp(r.a.dtype, "fp32") == 0 && strcmp(r.a.cuda, "none") == 0);
    CHECK(strcmp(r.a.library_version, gptx_version()) == 0);
    /* the fp32 products' library: OpenBLAS, or oneDNN where GPTX_CPU_FP32_GEMM
     * (auto on an AVX-512 CPU with a narrower OpenBLAS kernel) puts them there */
    CHECK(strstr(r.a.blas, "OpenBLAS") != NULL || strstr(r.a.blas, "oneDNN") != NULL);
    CHECK(strcmp(r.a.label, "one thread") == 0 && r.b.label[0] == '\0');
    CHECK(strstr(r.a.kernels, "attention=flash") != NULL);
    CHECK(r.a.deterministic == 1);
    CHECK(r.temperature == 1.0f && r.seed == 0);

    /* only the last 3 positions of each row */
    o.positions = 3;
    CHECK_OK(gptx_compare_models(a, b, inputs, B, T, &o, &r));
    CHECK(r.rows == B * 3 && r.pass);
    o.positions = 0;

    /* one weight nudged in b: every layer sees it, the report says where */
    REQUIRE_OK(perturb(b, "h.1.mlp.c_fc.weight", 5, 1e-2f));
    CHECK_OK(gptx_compare_models(a, b, inputs, B, T, &o, &r));
    print_report(&r);
    CHECK(!r.pass && !r.logits_pass && !r.bitwise_equal);
    CHECK(r.logits_max_abs > 0.0 && r.logits_max_abs < 1e-2);
    CHECK(r.logits_max_rel > 0.0);
    CHECK(r.logits_outside > 0 && r.logits_worst_row >= 0 && r.logits_worst_col >= 0);
    CHECK(r.logits_worst_col < cfg.vocab_size); /* padded columns are -inf on both */
    CHECK(r.kl_max > 0.0 && !r.softmax_pass);
    /* loose tolerances accept it */
    o.logits_atol = 1e-2;
    o.prob_atol = 1e-3;
    o.kl_tol = 1e-5;
    o.max_token_mismatches = 2;
    o.max_argmax_mismatches = 1;
    CHECK_OK(gptx_compare_models(a, b, inputs, B, T, &o, &r));
    CHECK(r.logits_pass && r.softmax_pass && r.tokens_pass && r.pass);
    CHECK(r.logits_atol == 1e-2 && r.kl_tol == 1e-5 && r.max_token_mismatches == 2);

    /* the same model on both sides */
    gptx_compare_options_init(&o);
    CHECK_OK(gptx_compare_models(a, a, inputs, B, T, &o, &r));
    CHECK(r.pass && r.bitwise_equal);

    gptx_model_destroy(a);
    gptx_model_destroy(b);
    gptx_context_destroy(c1);
    gptx_context_destroy(c2);
    return 0;
}

/* Hand-made rows with known answers. */
static void test_logits_known(void) {
    const float NEG = -INFINITY;
    /* rows of 3 columns, vocab 2 (column 2 is masked padding):
     *   row 0: a = (0, 0), b = (0, ln 3): p_a = (1/2, 1/2), p_b = (1/4, 3/4)
     *          KL = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3); argmax 0 vs 1
     *   row 1: identical */
    float a[6] = {0.0f, 0.0f, NEG, 1.0f, -2.0f, NEG};
    float b[6] = {0.0f, (float)log(3.0), NEG, 1.0f, -2.0f, NEG};
    gptx_compare_options o;
    gptx_compare_options_init(&o);
    o.draws_per_position = 1000;
    gptx_compare_report r;
    gptx_compare_report_init(&r);
    CHECK_OK(gptx_compare_logits(a, b, 2, 3, 2, &o, &r));
    print_report(&r);
    double ln3f = (double)(float)log(3.0);
    double lp_b = log(1.0 + exp(ln3f)); /* b's row 0 log-sum-exp (ln 3 rounded to float) */
    double pb0 = exp(0.0 - lp_b), pb1 = exp(ln3f - lp_b);
    double kl = 0.5 * log(0.5 / pb0) + 0.5 * log(0.5 / pb1);
    CHECK(near(kl, 0.5 * log(4.0 / 3.0), 1e-7));
    CHECK(near(r.kl_max, 0.5 * log(4.0 / 3.0), 1e-7));
    CHECK(near(r.kl_max, kl, 1e-12));
    CHECK(near(r.kl_mean, kl / 2.0, 1e-12));
    CHECK(r.kl_worst_row == 0);
    CHECK(near(r.prob_max_abs, 0.25, 1e-7));
    CHECK(r.logits_max_abs == (double)(float)log(3.0));
    CHECK(r.logits_max_rel == 1.0);
    CHECK(r.logits_worst_row == 0 && r.logits_worst_col == 1);
    CHECK(r.logits_outside == 1 && r.logits_nonfinite == 0);
    CHECK(r.argmax_mismatches == 1);
    /* one shared uniform u: a picks 0 when u <= 1/2, b when u <= 1/4, so
     * draws from row 0 differ for u in (1/4, 1/2]: about 250 of 1000 */
    CHECK(r.token_draws == 2000);
    CHECK(r.token_mismatches > 200 && r.token_mismatches < 300);
    CHECK(strcmp(r.a.backend, "external") == 0 && r.a.num_threads == 0);
    CHECK(!r.pass && !r.logits_pass && !r.softmax_pass && !r.tokens_pass);

    /* tolerance boundaries: |a-b| = ln 3 passes atol = ln 3 exactly */
    o.logits_atol = (double)(float)log(3.0);
    o.prob_atol = 0.25 + 1e-7; /* ln 3 in float moves p by ~1e-8 */
    o.kl_tol = kl + 1e-9;
    o.max_argmax_mismatches = 1;
    o.max_token_mismatches = 300;
    CHECK_OK(gptx_compare_logits(a, b, 2, 3, 2, &o, &r));
    CHECK(r.pass);
    o.kl_tol = kl - 1e-6;
    CHECK_OK(gptx_compare_logits(a, b, 2, 3, 2, &o, &r));
    CHECK(!r.softmax_pass && r.logits_pass && r.tokens_pass && !r.pass);
    /* relative tolerance: |1 - 1.5| = 0.5 <= 0.34 * 1.5 */
    float c[1] = {1.0f}, d[1] = {1.5f};
    gptx_compare_options_init(&o);
    o.logits_rtol = 0.34;
    o.prob_atol = o.kl_tol = INFINITY;
    CHECK_OK(gptx_compare_logits(c, d, 1, 1, 1, &o, &r));
    CHECK(r.logits_pass && near(r.logits_max_rel, 1.0 / 3.0, 1e-12) && r.pass);
    o.logits_rtol = 0.33;
    CHECK_OK(gptx_compare_logits(c, d, 1, 1, 1, &o, &r));
    CHECK(!r.logits_pass);

    /* a NaN or a one-sided infinity is counted, never crashes, and fails */
    float e[3] = {0.0f, 1.0f, 2.0f}, f[3] = {0.0f, NAN, NEG};
    gptx_compare_options_init(&o);
    CHECK_OK(gptx_compare_logits(e, f, 1, 3, 3, &o, &r));
    CHECK(r.logits_nonfinite == 2 && r.logits_outside == 2 && !r.logits_pass);
    CHECK(r.softmax_invalid_rows == 1 && !r.softmax_pass);
    CHECK(r.argmax_mismatches == 1 && r.token_mismatches == 1 && !r.pass);
    CHECK(strcmp(gptx_last_error(), "") == 0); /* the refused draw left no error behind */

    /* a -inf in b where a is finite: KL is infinite */
    float g[2] = {0.0f, 0.0f}, h[2] = {0.0f, NEG};
    o.logits_atol = INFINITY;
    CHECK_OK(gptx_compare_logits(g, h, 1, 2, 2, &o, &r));
    CHECK(isinf(r.kl_max) && near(r.prob_max_abs, 0.5, 1e-12) && r.logits_nonfinite == 1);

    /* greedy sampling options: the token layer is the argmax */
    gptx_sampler_options so;
    gptx_sampler_options_init(&so);
    so.temperature = 0.0f;
    so.seed = 99;
    gptx_compare_options_init(&o);
    o.sampler = &so;
    CHECK_OK(gptx_compare_logits(a, b, 2, 3, 2, &o, &r));
    CHECK(r.token_mismatches == 1 && r.token_draws == 2 && r.temperature == 0.0f && r.seed == 99);
}

static void test_format(void) {
    float a[2] = {0.5f, 0.25f};
    gptx_compare_report r;
    gptx_compare_report_init(&r);
    CHECK_OK(gptx_compare_logits(a, a, 1, 2, 2, NULL, &r));
    CHECK(r.pass && r.bitwise_equal);
    char text[GPTX_COMPARE_TEXT_MAX];
    size_t len = 0;
    CHECK_OK(gptx_compare_report_format(&r, text, sizeof text, &len));
    CHECK(len == strlen(text) && len > 100);
    CHECK(strstr(text, "layered comparison: PASS") != NULL);
    CHECK(strstr(text, "[PASS] 1 logits") && strstr(text, "[PASS] 2 softmax") &&
          strstr(text, "[PASS] 3 tokens"));
    char small[16];
    size_t need = 0;
    CHECK_STATUS(gptx_compare_report_format(&r, small, sizeof small, &need), GPTX_ERR_SHAPE);
    CHECK(need == len && small[sizeof small - 1] == '\0');
    CHECK_OK(gptx_compare_report_format(&r, text, len + 1, NULL));
    CHECK_STATUS(gptx_compare_report_format(&r, text, len, NULL), GPTX_ERR_SHAPE);
    /* strings without their NUL (a caller-filled report) stay in bounds */
    memset(r.a.label, 'x', sizeof r.a.label);
    CHECK_OK(gptx_compare_report_format(&r, text, sizeof text, &len));
    CHECK(strstr(text, "label xxxx") != NULL);
    /* the longest report: every text field full, every number wide */
    gptx_compare_side *sides[2] = {&r.a, &r.b};
    for (int i = 0; i < 2; i++) {
        gptx_compare_side *s = sides[i];
        memset(s->backend, 'b', sizeof s->backend);
        memset(s->dtype, 'd', sizeof s->dtype);
        memset(s->library_version, 'v', sizeof s->library_version);
        memset(s->blas, 'B', sizeof s->blas);
        memset(s->cuda, 'c', sizeof s->cuda);
        memset(s->label, 'l', sizeof s->label);
        memset(s->kernels, 'k', sizeof s->kernels);
        s->num_threads = s->deterministic = -2147483647 - 1;
    }
    r.rows = r.logits_worst_row = r.logits_worst_col = r.logits_outside = INT64_MIN;
    r.logits_nonfinite = r.kl_worst_row = r.softmax_invalid_rows = INT64_MIN;
    r.token_draws = r.token_mismatches = r.argmax_mismatches = INT64_MIN;
    r.max_token_mismatches = r.max_argmax_mismatches = INT64_MIN;
    r.n_logits = r.vocab_size = -2147483647 - 1;
    r.logits_max_abs = r.logits_max_rel = r.prob_max_abs = r.kl_mean = r.kl_max = -DBL_MAX;
    r.logits_atol = r.logits_rtol = r.prob_atol = r.kl_tol = -1.2345678901234567e-300;
    r.temperature = r.top_p = -FLT_MAX;
    r.top_k = -2147483647 - 1;
    r.seed = r.stream = UINT64_MAX;
    CHECK_OK(gptx_compare_report_format(&r, text, sizeof text, &len));
    CHECK(len < GPTX_COMPARE_TEXT_MAX);
    printf("longest report: %zu bytes\n", len);
    CHECK_STATUS(gptx_compare_report_format(NULL, text, sizeof text, &len), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_compare_report_format(&r, NULL, sizeof text, &len), GPTX_ERR_NULL);
    r.struct_size = 8;
    CHECK_STATUS(gptx_compare_report_format(&r, text, sizeof text, &len), GPTX_ERR_INVALID);
    check_message_mentions("struct_size");
    r.struct_size = GPTX_COMPARE_REPORT_SIZE + 8; /* a newer header's report */
    CHECK_STATUS(gptx_compare_report_format(&r, text, sizeof text, &len), GPTX_ERR_UNSUPPORTED);
    check_message_mentions("newer gptx header");
    /* an older, shorter report formats; the fields it lacks print as zero */
    r.struct_size = offsetof(gptx_compare_report, logits_pass);
    CHECK_OK(gptx_compare_report_format(&r, text, sizeof text, &len));
    CHECK(strstr(text, "layered comparison: PASS") && strstr(text, "[FAIL] 1 logits"));
}

static int test_errors(void) {
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    gptx_model_config cfg = small_config();
    gptx_model *a = NULL, *b = NULL;
    REQUIRE_OK(gptx_model_create(&a, ctx, &cfg));
    cfg.n_layer = 1;
    REQUIRE_OK(gptx_model_create(&b, ctx, &cfg));
    REQUIRE_OK(gptx_model_init_random(a, 1));
    REQUIRE_OK(gptx_model_init_random(b, 1));
    int32_t in[B * T];
    fill_tokens(in, B * T, cfg.vocab_size, 5);
    gptx_compare_report r;
    gptx_compare_report_init(&r);
    gptx_compare_options o;
    gptx_compare_options_init(&o);

    CHECK_STATUS(gptx_compare_models(a, b, in, B, T, &o, &r), GPTX_ERR_MISMATCH);
    check_message_mentions("n_layer");
    check_message_mentions("2 in a but 1 in b");
    CHECK_STATUS(gptx_compare_models(NULL, a, in, B, T, &o, &r), GPTX_ERR_NULL);
    check_message_mentions("'a'");
    CHECK_STATUS(gptx_compare_models(a, NULL, in, B, T, &o, &r), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_compare_models(a, a, NULL, B, T, &o, &r), GPTX_ERR_NULL);
    check_message_mentions("inputs");
    CHECK_STATUS(gptx_compare_models(a, a, in, B, T, &o, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_compare_models(a, a, in, 0, T, &o, &r), GPTX_ERR_INVALID);
    check_message_mentions("B is 0");
    CHECK_STATUS(gptx_compare_models(a, a, in, B, -1, &o, &r), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_compare_models(a, a, in, 1, 17, &o, &r), GPTX_ERR_SHAPE);
    check_message_mentions("context length 16");
    int32_t bad[B * T];
    memcpy(bad, in, sizeof bad);
    bad[9] = 50;
    CHECK_STATUS(gptx_compare_models(a, a, bad, B, T, &o, &r), GPTX_ERR_TOKEN_RANGE);
    check_message_mentions("inputs[9] is 50");
    o.positions = T + 1;
    CHECK_STATUS(gptx_compare_models(a, a, in, B, T, &o, &r), GPTX_ERR_SHAPE);
    check_message_mentions("positions");
    gptx_compare_options_init(&o);

    /* versioned structs */
    o.struct_size = 0;
    CHECK_STATUS(gptx_compare_models(a, a, in, B, T, &o, &r), GPTX_ERR_INVALID);
    check_message_mentions("gptx_compare_options_init");
    gptx_compare_options_init(&o);
    r.struct_size = GPTX_COMPARE_REPORT_SIZE + 8;
    CHECK_STATUS(gptx_compare_models(a, a, in, B, T, &o, &r), GPTX_ERR_UNSUPPORTED);
    check_message_mentions("report.struct_size");
    r.struct_size = 0;
    CHECK_STATUS(gptx_compare_logits((float[]){0}, (float[]){0}, 1, 1, 1, &o, &r),
                 GPTX_ERR_INVALID);
    /* an older, shorter report receives its prefix only */
    gptx_compare_report old;
    memset(&old, 0xAB, sizeof old);
    old.struct_size = offsetof(gptx_compare_report, logits_pass);
    CHECK_OK(gptx_compare_models(a, a, in, B, T, NULL, &old));
    CHECK(old.pass == 1 && old.rows == B * T && strcmp(old.b.backend, "cpu") == 0);
    CHECK(old.logits_pass == (int)0xABABABAB && old.struct_size == offsetof(gptx_compare_report, logits_pass));
    gptx_compare_report_init(&r);

    /* bad option values */
    struct { double *p; const char *name; } tols[] = {
        {&o.logits_atol, "logits_atol"}, {&o.logits_rtol, "logits_rtol"},
        {&o.prob_atol, "prob_atol"}, {&o.kl_tol, "kl_tol"}};
    for (size_t i = 0; i < sizeof tols / sizeof tols[0]; i++) {
        gptx_compare_options_init(&o);
        *tols[i].p = -1.0;
        CHECK_STATUS(gptx_compare_models(a, a, in, B, T, &o, &r), GPTX_ERR_INVALID);
        check_message_mentions(tols[i].name);
        *tols[i].p = NAN;
        CHECK_STATUS(gptx_compare_logits((float[]){0}, (float[]){0}, 1, 1, 1, &o, &r),
                     GPTX_ERR_INVALID);
    }
    gptx_compare_options_init(&o);
    o.max_token_mismatches = -1;
    CHECK_STATUS(gptx_compare_models(a, a, in, B, T, &o, &r), GPTX_ERR_INVALID);
    check_message_mentions("max_token_mismatches");
    gptx_compare_options_init(&o);
    o.max_argmax_mismatches = -2;
    CHECK_STATUS(gptx_compare_models(a, a, in, B, T, &o, &r), GPTX_ERR_INVALID);
    gptx_compare_options_init(&o);
    o.draws_per_position = 0;
    CHECK_STATUS(gptx_compare_models(a, a, in, B, T, &o, &r), GPTX_ERR_INVALID);
    check_message_mentions("draws_per_position is 0");
    gptx_compare_options_init(&o);
    o.positions = -1;
    CHECK_STATUS(gptx_compare_models(a, a, in, B, T, &o, &r), GPTX_ERR_INVALID);
    gptx_sampler_options so;
    gptx_sampler_options_init(&so);
    so.top_p = 2.0f;
    gptx_compare_options_init(&o);
    o.sampler = &so;
    CHECK_STATUS(gptx_compare_models(a, a, in, B, T, &o, &r), GPTX_ERR_INVALID);
    check_message_mentions("top_p");
    so.struct_size = 1;
    CHECK_STATUS(gptx_compare_models(a, a, in, B, T, &o, &r), GPTX_ERR_INVALID);
    check_message_mentions("opts.sampler");

    /* compare_logits shapes */
    gptx_compare_options_init(&o);
    float x[4] = {0};
    CHECK_STATUS(gptx_compare_logits(NULL, x, 1, 4, 4, &o, &r), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_compare_logits(x, NULL, 1, 4, 4, &o, &r), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_compare_logits(x, x, 1, 4, 4, &o, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_compare_logits(x, x, 0, 4, 4, &o, &r), GPTX_ERR_INVALID);
    check_message_mentions("rows is 0");
    CHECK_STATUS(gptx_compare_logits(x, x, 1, 4, 0, &o, &r), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_compare_logits(x, x, 1, 3, 4, &o, &r), GPTX_ERR_SHAPE);
    check_message_mentions("n_logits is 3");
    CHECK_STATUS(gptx_compare_logits(x, x, (size_t)1 << 62, 4, 4, &o, &r), GPTX_ERR_SHAPE);

    /* a failed call leaves the models usable */
    CHECK_OK(gptx_compare_models(a, a, in, B, T, NULL, &r));
    CHECK(r.pass);
    gptx_model_destroy(a);
    gptx_model_destroy(b);
    gptx_context_destroy(ctx);
    return 0;
}

int main(void) {
    if (test_models() != 0) check_failures++;
    test_logits_known();
    test_format();
    if (test_errors() != 0) check_failures++;
    return check_exit("test_compare");
}

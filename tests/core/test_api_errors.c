/* Every entry point rejects bad input with a distinct status and a message
 * naming the argument, and a failed call leaves the objects usable. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "test_util.h"

static void check_message_mentions(const char *needle) {
    if (!strstr(gptx_last_error(), needle)) {
        fprintf(stderr, "message '%s' does not mention '%s'\n", gptx_last_error(), needle);
        check_failures++;
    }
}

static void test_version_and_names(void) {
    CHECK(strcmp(gptx_version(), GPTX_VERSION_STRING) == 0);
    int ma = -1, mi = -1, pa = -1;
    gptx_version_numbers(&ma, &mi, &pa);
    CHECK(ma == GPTX_VERSION_MAJOR && mi == GPTX_VERSION_MINOR && pa == GPTX_VERSION_PATCH);
    gptx_version_numbers(NULL, NULL, NULL);
    CHECK(gptx_features() & GPTX_FEATURE_CPU);
    CHECK(strcmp(gptx_status_name(GPTX_ERR_SHAPE), "GPTX_ERR_SHAPE") == 0);
    CHECK(strcmp(gptx_status_name(12345), "GPTX_UNKNOWN") == 0);
    CHECK(strcmp(gptx_status_name(GPTX_ERR_MISUSE), "GPTX_ERR_MISUSE") == 0);
    CHECK(strcmp(gptx_status_name(GPTX_ERR_BUSY), "GPTX_ERR_BUSY") == 0);
    /* every status has its own name (GPTX_ERR_BUSY is the last one) */
    for (int a = GPTX_ERR_BUSY; a <= GPTX_OK; a++)
        for (int b = a + 1; b <= GPTX_OK; b++)
            CHECK(strcmp(gptx_status_name(a), gptx_status_name(b)) != 0);
}

static void test_context_errors(void) {
    gptx_context *ctx = (gptx_context *)1;
    CHECK_STATUS(gptx_context_create(NULL, NULL), GPTX_ERR_NULL);
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = 99;
    CHECK_STATUS(gptx_context_create(&ctx, &o), GPTX_ERR_INVALID);
    CHECK(ctx == NULL);
    check_message_mentions("backend");
    gptx_context_options_init(&o);
    o.num_threads = -3;
    CHECK_STATUS(gptx_context_create(&ctx, &o), GPTX_ERR_INVALID);
    check_message_mentions("-3");
    /* a thread count far past the cores is refused at once, not spawned: the
     * ceiling is 1024 or 8 per core; one above it (spawnable, so that without
     * the check this would succeed) and a typo-sized one */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int over = cores * 8 >= 1024 ? (int)cores * 8 + 1 : 1025;
    int counts[2] = {over, 1000000000};
    for (int i = 0; i < 2; i++) {
        gptx_context_options_init(&o);
        o.backend = GPTX_BACKEND_CPU;
        o.num_threads = counts[i];
        CHECK_STATUS(gptx_context_create(&ctx, &o), GPTX_ERR_INVALID);
        CHECK(ctx == NULL);
        check_message_mentions("at most");
        if (ctx) gptx_context_destroy(ctx);
        ctx = NULL;
    }
    /* deterministic is a flag: 5 is a mistake, not "more deterministic" */
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.deterministic = 5;
    CHECK_STATUS(gptx_context_create(&ctx, &o), GPTX_ERR_INVALID);
    CHECK(ctx == NULL);
    check_message_mentions("options.deterministic is 5; expected 0 or 1");
    gptx_context_options_init(&o);
    o.struct_size = 0;
    CHECK_STATUS(gptx_context_create(&ctx, &o), GPTX_ERR_INVALID);
    check_message_mentions("struct_size");
    if (!(gptx_features() & GPTX_FEATURE_CUDA)) {
        gptx_context_options_init(&o);
        o.backend = GPTX_BACKEND_CUDA;
        CHECK_STATUS(gptx_context_create(&ctx, &o), GPTX_ERR_UNSUPPORTED);
    }
    /* an options struct from an older header (only the first fields) works */
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.struct_size = offsetof(gptx_context_options, device);
    CHECK_OK(gptx_context_create(&ctx, &o));
    CHECK(ctx && strcmp(gptx_context_backend_name(ctx), "cpu") == 0);
    gptx_memory_stats ms;
    gptx_memory_stats_init(&ms);
    CHECK_STATUS(gptx_context_memory(NULL, &ms), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_context_memory(ctx, NULL), GPTX_ERR_NULL);
    ms.struct_size = 3;
    CHECK_STATUS(gptx_context_memory(ctx, &ms), GPTX_ERR_INVALID);
    gptx_context_destroy(ctx);
    gptx_context_destroy(NULL); /* no-op */
}

static void test_config_errors(gptx_context *ctx) {
    gptx_model *m = NULL;
    gptx_model_config c = small_config();
    CHECK_STATUS(gptx_model_create(NULL, ctx, &c), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_model_create(&m, NULL, &c), GPTX_ERR_NULL);
    check_message_mentions("ctx");
    CHECK_STATUS(gptx_model_create(&m, ctx, NULL), GPTX_ERR_NULL);
    struct { const char *field; int *p; int bad; } ints[] = {
        {"vocab_size", &c.vocab_size, 0},       {"context_length", &c.context_length, -1},
        {"n_layer", &c.n_layer, 0},             {"n_head", &c.n_head, -2},
        {"n_embd", &c.n_embd, 0},               {"padded_vocab_size", &c.padded_vocab_size, 10},
        {"n_head", &c.n_head, 3},               {"qkv_bias", &c.qkv_bias, 2},
        {"tied_head", &c.tied_head, -1},        {"mask_padded_logits", &c.mask_padded_logits, 7},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        c = small_config(); /* same object: the pointers above stay valid */
        *ints[i].p = ints[i].bad;
        CHECK_STATUS(gptx_model_create(&m, ctx, &c), GPTX_ERR_INVALID);
        CHECK(m == NULL);
        check_message_mentions(ints[i].field);
    }
    c = small_config();
    c.layernorm_eps = NAN;
    CHECK_STATUS(gptx_model_create(&m, ctx, &c), GPTX_ERR_INVALID);
    check_message_mentions("layernorm_eps");
    c = small_config();
    c.padded_vocab_size = 0; /* means "same as vocab" */
    CHECK_OK(gptx_model_create(&m, ctx, &c));
    gptx_model_config got;
    gptx_model_config_init(&got);
    CHECK_OK(gptx_model_get_config(m, &got));
    CHECK(got.padded_vocab_size == c.vocab_size);
    gptx_model_destroy(m);
}

static void test_forward_errors(gptx_context *ctx) {
    gptx_model_config c = small_config();
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &c) != GPTX_OK) {
        check_failures++;
        return;
    }
    CHECK_OK(gptx_model_init_random(m, 1));
    int32_t in[32], tg[32];
    fill_tokens(in, 32, c.vocab_size, 1);
    fill_tokens(tg, 32, c.vocab_size, 2);
    float loss = -1.0f;
    CHECK_STATUS(gptx_model_forward(NULL, in, tg, 2, 16, &loss), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_model_forward(m, NULL, tg, 2, 16, &loss), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_model_forward(m, in, tg, 0, 16, &loss), GPTX_ERR_INVALID);
    check_message_mentions("B is 0");
    CHECK_STATUS(gptx_model_forward(m, in, tg, 2, -1, &loss), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_model_forward(m, in, tg, 1, 17, &loss), GPTX_ERR_SHAPE);
    check_message_mentions("context length 16");
    /* backward before any successful forward */
    CHECK_STATUS(gptx_model_backward(m, 1.0f), GPTX_ERR_STATE);
    float logits[2 * 16 * 64];
    CHECK_STATUS(gptx_model_get_logits(m, logits, 2 * 16 * 64), GPTX_ERR_STATE);

    in[5] = c.vocab_size; /* a padded id is not a token */
    CHECK_STATUS(gptx_model_forward(m, in, tg, 2, 16, &loss), GPTX_ERR_TOKEN_RANGE);
    check_message_mentions("inputs[5]");
    in[5] = -1;
    CHECK_STATUS(gptx_model_forward(m, in, tg, 2, 16, &loss), GPTX_ERR_TOKEN_RANGE);
    in[5] = 3;
    tg[7] = 1000;
    CHECK_STATUS(gptx_model_forward(m, in, tg, 2, 16, &loss), GPTX_ERR_TOKEN_RANGE);
    check_message_mentions("targets[7] is 1000");
    tg[7] = -5;
    CHECK_STATUS(gptx_model_forward(m, in, tg, 2, 16, &loss), GPTX_ERR_TOKEN_RANGE);
    tg[7] = GPTX_IGNORE_INDEX; /* allowed */
    CHECK_OK(gptx_model_forward(m, in, tg, 2, 16, &loss));
    int64_t counted = 0;
    CHECK_OK(gptx_model_num_loss_tokens(m, &counted));
    CHECK(counted == 31);
    CHECK(loss > 0.0f && isfinite(loss));

    /* logits: wrong count, then right count */
    CHECK_STATUS(gptx_model_get_logits(m, logits, 10), GPTX_ERR_SHAPE);
    CHECK_OK(gptx_model_get_logits(m, logits, 2 * 16 * 64));
    CHECK(isinf(logits[63]) && logits[63] < 0); /* masked padded column */
    CHECK(isfinite(logits[49]));
    CHECK_STATUS(gptx_model_backward(m, NAN), GPTX_ERR_INVALID);
    CHECK_OK(gptx_model_backward(m, 1.0f));
    CHECK_STATUS(gptx_model_backward(m, 1.0f), GPTX_ERR_STATE);
    CHECK_STATUS(gptx_model_get_logits(m, logits, 2 * 16 * 64), GPTX_ERR_STATE);
    check_message_mentions("backward");

    /* forward without targets: no loss, no backward */
    CHECK_OK(gptx_model_forward(m, in, NULL, 2, 16, NULL));
    CHECK_STATUS(gptx_model_backward(m, 1.0f), GPTX_ERR_STATE);

    /* parameter access */
    float buf[64 * 16];
    CHECK_STATUS(gptx_model_get_parameter(m, "nope.weight", buf, 16), GPTX_ERR_NOT_FOUND);
    check_message_mentions("nope.weight");
    CHECK_STATUS(gptx_model_get_parameter(m, "ln_f.weight", buf, 15), GPTX_ERR_SHAPE);
    check_message_mentions("16 elements");
    CHECK_STATUS(gptx_model_set_parameter(m, "ln_f.weight", buf, 17), GPTX_ERR_SHAPE);
    CHECK_STATUS(gptx_model_get_gradient(m, "h.9.ln_1.weight", buf, 16), GPTX_ERR_NOT_FOUND);
    CHECK_STATUS(gptx_model_get_parameter(m, NULL, buf, 16), GPTX_ERR_NULL);
    CHECK_OK(gptx_model_get_parameter(m, "ln_f.weight", buf, 16));
    float before = buf[3];
    buf[3] = INFINITY;
    CHECK_STATUS(gptx_model_set_parameter(m, "ln_f.weight", buf, 16), GPTX_ERR_NON_FINITE);
    CHECK_OK(gptx_model_get_parameter(m, "ln_f.weight", buf, 16));
    CHECK(buf[3] == before); /* nothing half-written */
    int idx = -1;
    CHECK_STATUS(gptx_model_find_tensor(m, "lm_head.weight", &idx), GPTX_ERR_NOT_FOUND); /* tied */
    gptx_tensor_info info;
    gptx_tensor_info_init(&info);
    CHECK_STATUS(gptx_model_tensor_info(m, -1, &info), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_model_tensor_info(m, gptx_model_num_tensors(m), &info), GPTX_ERR_INVALID);
    info.struct_size = 0;
    CHECK_STATUS(gptx_model_tensor_info(m, 0, &info), GPTX_ERR_INVALID);

    /* optimizer: bad options, foreign model, non-finite gradients */
    gptx_optimizer *opt = NULL;
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.beta1 = 1.0f;
    CHECK_STATUS(gptx_optimizer_create(&opt, m, &ao), GPTX_ERR_INVALID);
    check_message_mentions("beta1");
    gptx_adamw_options_init(&ao);
    ao.lr = -1.0f;
    CHECK_STATUS(gptx_optimizer_create(&opt, m, &ao), GPTX_ERR_INVALID);
    gptx_adamw_options_init(&ao);
    ao.decay_policy = 5;
    CHECK_STATUS(gptx_optimizer_create(&opt, m, &ao), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_optimizer_create(&opt, NULL, NULL), GPTX_ERR_NULL);
    CHECK_OK(gptx_optimizer_create(&opt, m, NULL));
    gptx_model *other = NULL;
    CHECK_OK(gptx_model_create(&other, ctx, &c));
    CHECK_STATUS(gptx_optimizer_step(opt, other, NULL), GPTX_ERR_MISMATCH);
    check_message_mentions("another model");
    CHECK_STATUS(gptx_optimizer_set_lr(opt, NAN), GPTX_ERR_INVALID);
    /* an absurd rate (a typo, a runaway schedule) is refused, the one in effect stays */
    const float bad_lr[] = {1e30f, INFINITY, 10.5f, -1e-9f};
    for (int i = 0; i < 4; i++) {
        CHECK_STATUS(gptx_optimizer_set_lr(opt, bad_lr[i]), GPTX_ERR_INVALID);
        check_message_mentions("must be in [0, 10]");
    }
    float lr_now = 0;
    CHECK_OK(gptx_optimizer_get_lr(opt, &lr_now));
    CHECK(lr_now == 3e-4f);
    CHECK_OK(gptx_optimizer_set_lr(opt, 10.0f)); /* the bound itself is allowed */
    CHECK_OK(gptx_optimizer_set_lr(opt, 3e-4f));
    gptx_optimizer *opt2 = NULL;
    gptx_adamw_options_init(&ao);
    ao.lr = 1e30f;
    CHECK_STATUS(gptx_optimizer_create(&opt2, m, &ao), GPTX_ERR_INVALID);
    check_message_mentions("opts.lr is 1e+30; must be in [0, 10]");
    CHECK(opt2 == NULL);
    int64_t step = -1;
    CHECK_OK(gptx_optimizer_get_step(opt, &step));
    CHECK(step == 0);

    /* huge weights make the loss overflow: forward reports it, backward refuses */
    float *wte = malloc(64 * 16 * sizeof *wte);
    for (int i = 0; i < 64 * 16; i++) wte[i] = i % 3 ? 3e38f : -3e38f;
    CHECK_OK(gptx_model_set_parameter(m, "wte.weight", wte, 64 * 16));
    CHECK_STATUS(gptx_model_forward(m, in, tg, 2, 16, &loss), GPTX_ERR_NON_FINITE);
    check_message_mentions("loss");
    CHECK_STATUS(gptx_model_backward(m, 1.0f), GPTX_ERR_STATE);
    free(wte);

    gptx_optimizer_destroy(opt);
    gptx_optimizer_destroy(NULL);
    gptx_model_destroy(other);
    gptx_model_destroy(m);
    gptx_model_destroy(NULL);
}

/* Non-finite gradients: the optimizer refuses and leaves every parameter as it was. */
static void test_nonfinite_step(gptx_context *ctx) {
    gptx_model_config c = small_config();
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &c) != GPTX_OK) {
        check_failures++;
        return;
    }
    CHECK_OK(gptx_model_init_random(m, 3));
    int32_t in[16], tg[16];
    fill_tokens(in, 16, c.vocab_size, 5);
    fill_tokens(tg, 16, c.vocab_size, 6);
    gptx_optimizer *opt = NULL;
    CHECK_OK(gptx_optimizer_create(&opt, m, NULL));
    CHECK_OK(gptx_model_forward(m, in, tg, 1, 16, NULL));
    CHECK_OK(gptx_model_backward(m, FLT_MAX)); /* gradients overflow to inf */
    float before[16], after[16], norm = 0.0f;
    CHECK_OK(gptx_model_get_parameter(m, "h.0.ln_1.weight", before, 16));
    CHECK_STATUS(gptx_optimizer_step(opt, m, &norm), GPTX_ERR_NON_FINITE);
    CHECK(!isfinite(norm));
    CHECK_OK(gptx_model_get_parameter(m, "h.0.ln_1.weight", after, 16));
    CHECK(memcmp(before, after, sizeof before) == 0);
    int64_t step = -1;
    CHECK_OK(gptx_optimizer_get_step(opt, &step));
    CHECK(step == 0);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
}

int main(void) {
    test_version_and_names();
    test_context_errors();
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 2));
    test_config_errors(ctx);
    test_forward_errors(ctx);
    test_nonfinite_step(ctx);
    gptx_context_destroy(ctx);
    return check_exit("test_api_errors");
}

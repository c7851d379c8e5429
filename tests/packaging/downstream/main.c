/* A minimal program built against an *installed* gptx (pkg-config or the
 * CMake package), as a downstream user would: CPU context, tiny model,
 * random init, one forward pass with targets. Exits non-zero on any failure. */
#include <gptx/gptx.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(DOWNSTREAM_EXPECT_STATIC) && !defined(GPTX_STATIC)
#error "gptx::gptx_static must define GPTX_STATIC for its users"
#endif

#define CHECK(call)                                                                      \
    do {                                                                                 \
        int st_ = (call);                                                                \
        if (st_ != GPTX_OK) {                                                            \
            fprintf(stderr, "downstream: %s failed: %s (%d): %s\n", #call,               \
                    gptx_status_name(st_), st_, gptx_last_error());                      \
            goto done;                                                                   \
        }                                                                                \
    } while (0)

enum { VOCAB = 32, CTX = 8, B = 1, T = 8 };

int main(void) {
    int rc = 1;
    gptx_context *ctx = NULL;
    gptx_model *model = NULL;
    gptx_context_options copts;
    gptx_model_config cfg;
    int32_t inputs[B * T], targets[B * T];
    float loss = -1.0f, diff;
    const float ln_vocab = 3.4657359f; /* ln(32): loss of a near-uniform prediction */
    const char *version = gptx_version();
    int t;

    printf("gptx_version() = %s (header %s)\n", version ? version : "(null)",
           GPTX_VERSION_STRING);
    if (version == NULL || strcmp(version, GPTX_VERSION_STRING) != 0) {
        fprintf(stderr, "downstream: library and header versions differ\n");
        return 1;
    }

    gptx_context_options_init(&copts);
    copts.backend = GPTX_BACKEND_CPU;
    copts.num_threads = 1;
    CHECK(gptx_context_create(&ctx, &copts));

    gptx_model_config_init(&cfg);
    cfg.vocab_size = VOCAB;
    cfg.padded_vocab_size = 0;
    cfg.context_length = CTX;
    cfg.n_layer = 1;
    cfg.n_head = 2;
    cfg.n_embd = 16;
    CHECK(gptx_model_create(&model, ctx, &cfg));
    CHECK(gptx_model_init_random(model, 1234));

    for (t = 0; t < B * T; t++) {
        inputs[t] = (int32_t)((5 * t + 3) % VOCAB);
        targets[t] = (int32_t)((5 * t + 8) % VOCAB);
    }
    CHECK(gptx_model_forward(model, inputs, targets, B, T, &loss));
    printf("loss = %.6f (backend %s)\n", (double)loss, gptx_context_backend_name(ctx));

    /* Freshly initialised weights give nearly uniform predictions. */
    diff = loss - ln_vocab;
    if (diff < 0.0f)
        diff = -diff;
    if (!(diff < 0.5f)) {
        fprintf(stderr, "downstream: loss %f is not close to ln(%d) = %f\n", (double)loss, VOCAB,
                (double)ln_vocab);
        goto done;
    }
    rc = 0;

done:
    if (model != NULL)
        gptx_model_destroy(model);
    if (ctx != NULL)
        gptx_context_destroy(ctx);
    printf("downstream: %s\n", rc == 0 ? "ok" : "FAILED");
    return rc;
}

/* The README's example: create a context, a small model and AdamW, train a
 * few steps on a repeating pattern and print the loss. */
#include <stdio.h>

#include <gptx/gptx.h>

#define CHECK(call)                                                               \
    do {                                                                          \
        int rc = (call);                                                          \
        if (rc != GPTX_OK) {                                                      \
            fprintf(stderr, "%s: %s\n", gptx_status_name(rc), gptx_last_error()); \
            return 1;                                                             \
        }                                                                         \
    } while (0)

int main(void) {
    gptx_context_options copts;
    gptx_context_options_init(&copts);
    copts.backend = GPTX_BACKEND_CPU;
    gptx_context *ctx;
    CHECK(gptx_context_create(&ctx, &copts));

    gptx_model_config cfg;
    gptx_model_config_init(&cfg); /* GPT-2 124M defaults, then shrink it */
    cfg.vocab_size = 64;
    cfg.padded_vocab_size = 64;
    cfg.context_length = 32;
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 32;
    gptx_model *model;
    CHECK(gptx_model_create(&model, ctx, &cfg));
    CHECK(gptx_model_init_random(model, 1234));

    gptx_adamw_options aopts;
    gptx_adamw_options_init(&aopts);
    aopts.lr = 1e-2f;
    gptx_optimizer *opt;
    CHECK(gptx_optimizer_create(&opt, model, &aopts));

    enum { B = 4, T = 32 };
    int32_t inputs[B * T], targets[B * T];
    for (int i = 0; i < B * T; i++) {
        inputs[i] = (i * 5) % 64;        /* a pattern the model can learn */
        targets[i] = (i * 5 + 5) % 64;   /* the next token */
    }
    for (int step = 0; step < 20; step++) {
        float loss;
        CHECK(gptx_model_zero_grad(model));
        CHECK(gptx_model_forward(model, inputs, targets, B, T, &loss));
        CHECK(gptx_model_backward(model, 1.0f));
        CHECK(gptx_optimizer_step(opt, model, NULL));
        printf("step %2d loss %.4f\n", step, loss);
    }

    gptx_optimizer_destroy(opt);
    gptx_model_destroy(model);
    gptx_context_destroy(ctx);
    return 0;
}

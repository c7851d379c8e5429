/* A build with the CUDA backend on a machine without a CUDA device (or
 * driver): the library loads, a `cuda` context fails with
 * GPTX_ERR_UNSUPPORTED and a message naming the cause, GPTX_BACKEND_AUTO falls
 * back to the CPU backend, which works. Skipped (77) where a device exists. */
#include "check.h"
#include "cuda_test_util.h"

int main(void) {
    CHECK(gptx_features() & GPTX_FEATURE_CUDA);
    gptx_backend *be = NULL;
    int rc = cuda_test_backend(&be, NULL);
    if (rc == GPTX_OK) {
        cuda_test_ops()->destroy(be);
        printf("test_cuda_nodevice: SKIPPED, a CUDA device is present\n");
        return SKIP_EXIT;
    }
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CUDA;
    gptx_context *ctx = NULL;
    CHECK_STATUS(gptx_context_create(&ctx, &o), GPTX_ERR_UNSUPPORTED);
    CHECK(ctx == NULL);
    printf("cuda context: %s\n", gptx_last_error());
    CHECK(strstr(gptx_last_error(), "no CUDA device") != NULL);

    /* AUTO: the CPU backend, and it trains */
    o.backend = GPTX_BACKEND_AUTO;
    o.num_threads = 1;
    CHECK_OK(gptx_context_create(&ctx, &o));
    CHECK(ctx && strcmp(gptx_context_backend_name(ctx), "cpu") == 0);
    CHECK(strcmp(gptx_last_error(), "") == 0); /* the failed probe left no message */
    gptx_model_config c;
    gptx_model_config_init(&c);
    c.vocab_size = 32;
    c.padded_vocab_size = 0;
    c.context_length = 8;
    c.n_layer = 1;
    c.n_head = 2;
    c.n_embd = 16;
    gptx_model *m = NULL;
    int32_t in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, tg[8] = {2, 3, 4, 5, 6, 7, 8, 9};
    float loss = 0;
    CHECK_OK(gptx_model_create(&m, ctx, &c));
    CHECK_OK(gptx_model_init_random(m, 1));
    CHECK_OK(gptx_model_forward(m, in, tg, 1, 8, &loss));
    CHECK(loss > 3.0f && loss < 4.0f); /* ~ln 32 */
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);

    /* a bad precision setting is an error even before the device is probed */
    setenv("GPTX_CUDA_PRECISION", "fp8", 1);
    o.backend = GPTX_BACKEND_CUDA;
    CHECK_STATUS(gptx_context_create(&ctx, &o), GPTX_ERR_INVALID);
    CHECK(strstr(gptx_last_error(), "GPTX_CUDA_PRECISION") != NULL);
    o.backend = GPTX_BACKEND_AUTO; /* not silently ignored by the fallback either */
    CHECK_STATUS(gptx_context_create(&ctx, &o), GPTX_ERR_INVALID);
    unsetenv("GPTX_CUDA_PRECISION");
    return check_exit("test_cuda_nodevice");
}

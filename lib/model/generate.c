/* gptx_generate: a prompt and n_new sampled tokens through a gptx_generator
 * with the default options (lib/model/generator.c). */
#include "errors.h"
#include "model.h"

int gptx_generate(gptx_model *model, gptx_sampler *sampler, const int32_t *prompt, int n_prompt,
                  int n_new, int32_t *out) {
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    GPTX_ENTER(sampler, GPTX_KIND_SAMPLER);
    GPTX_CHECK_NULL(prompt);
    if (n_prompt < 1)
        return GPTX_FAIL(GPTX_ERR_INVALID, "n_prompt is %d; must be >= 1", n_prompt);
    if (n_new < 0) return GPTX_FAIL(GPTX_ERR_INVALID, "n_new is %d; must be >= 0", n_new);
    if (n_new > 0) GPTX_CHECK_NULL(out);
    int V = model->cfg.vocab_size;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return GPTX_FAIL(GPTX_ERR_TOKEN_RANGE, "prompt[%d] is %d; must be in [0, %d)", i,
                             (int)prompt[i], V);
    if (n_new == 0) return GPTX_OK;

    gptx_generator_options o;
    gptx_generator_options_init(&o);
    /* a backend without cached attention runs the same windows without it */
    o.use_cache = model->ctx->ops->attention_kv_forward != NULL;
    gptx_generator *g = NULL;
    GPTX_TRY(gptx_generator_create(&g, model, &o));
    /* a prompt longer than the window keeps its last `window` tokens, as
     * gptx 0.1 did: none has been run yet, so keeping them costs nothing
     * (the generator's own rule, applied to the prompt, would keep fewer) */
    int window = model->cfg.context_length;
    if (n_prompt > window) prompt += n_prompt - window, n_prompt = window;
    int rc = gptx_generator_feed(g, prompt, n_prompt);
    for (int i = 0; i < n_new && rc == GPTX_OK; i++) rc = gptx_generator_next(g, sampler, &out[i]);
    gptx_generator_destroy(g);
    return rc;
}

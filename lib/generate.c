/* Autoregressive generation: model -> last position's logits -> sampler,
 * one token at a time, over a window cropped to the context length. */
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "model.h"

int gptx_generate(gptx_model *model, gptx_sampler *sampler, const int32_t *prompt, int n_prompt,
                  int n_new, int32_t *out) {
    GPTX_CHECK_NULL(model);
    GPTX_CHECK_NULL(sampler);
    GPTX_CHECK_NULL(prompt);
    if (n_prompt < 1)
        return GPTX_FAIL(GPTX_ERR_INVALID, "n_prompt is %d; must be >= 1", n_prompt);
    if (n_new < 0) return GPTX_FAIL(GPTX_ERR_INVALID, "n_new is %d; must be >= 0", n_new);
    if (n_new > 0) GPTX_CHECK_NULL(out);
    int V = model->cfg.vocab_size, Vp = model->cfg.padded_vocab_size;
    int L = model->cfg.context_length;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return GPTX_FAIL(GPTX_ERR_TOKEN_RANGE, "prompt[%d] is %d; must be in [0, %d)", i,
                             (int)prompt[i], V);
    if (n_new == 0) return GPTX_OK;

    /* window: the last min(n, L) tokens of prompt + generated so far */
    int32_t *window = malloc((size_t)L * sizeof *window);
    float *logits = malloc((size_t)Vp * sizeof *logits);
    if (!window || !logits) {
        free(window);
        free(logits);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (context %d, vocab %d)", L, Vp);
    }
    int len = n_prompt < L ? n_prompt : L;
    memcpy(window, prompt + (n_prompt - len), (size_t)len * sizeof *window);
    /* longest window any step runs on: the last token is sampled, never fed */
    int64_t longest = (int64_t)n_prompt + n_new - 1;
    int reserve = longest < L ? (int)longest : L;

    int rc = GPTX_OK;
    for (int i = 0; i < n_new; i++) {
        rc = gptx_model_forward_last_logits(model, window, len, reserve, logits);
        if (rc != GPTX_OK) break;
        int32_t tok;
        rc = gptx_sampler_sample(sampler, logits, Vp, V, &tok);
        if (rc != GPTX_OK) break;
        out[i] = tok;
        if (len == L) { /* full: drop the oldest token */
            memmove(window, window + 1, (size_t)(L - 1) * sizeof *window);
            len--;
        }
        window[len++] = tok;
    }
    free(window);
    free(logits);
    return rc;
}

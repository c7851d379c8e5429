/* hf_config.h */
#include "hf_config.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "file_read.h"

/* The value of key, or of its other spelling (transformers' attribute_map:
 * num_attention_heads is n_head, ...); both present must be equal. */
static int lookup(json_t *root, const char *key, const char *alias, const char *label,
                  json_t **out) {
    json_t *a = json_object_get(root, key), *b = alias ? json_object_get(root, alias) : NULL;
    if (a && b && !json_equal(a, b))
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': \"%s\" and \"%s\" disagree", label, key, alias);
    *out = a ? a : b;
    return GPTX_OK;
}

/* A whole number in [lo, hi] (an integral real too: 12.0). */
static int whole(json_t *root, const char *key, const char *alias, const char *label, int64_t lo,
                 int64_t hi, int64_t *out) {
    json_t *v = NULL;
    GPTX_TRY(lookup(root, key, alias, label, &v));
    if (!v) return GPTX_OK;
    double x = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : NAN;
    /* NaN fails both comparisons */
    if (!(x >= (double)lo && x <= (double)hi) || x != floor(x))
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': \"%s\" must be a whole number in [%lld, %lld]",
                         label, key, (long long)lo, (long long)hi);
    *out = (int64_t)x;
    return GPTX_OK;
}

/* true or false when present; anything else ("yes", 1) is refused rather
 * than read as the default. */
static int boolean(json_t *root, const char *key, const char *label, int *out) {
    json_t *v = json_object_get(root, key);
    if (!v) return GPTX_OK;
    if (!json_is_boolean(v))
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': \"%s\" must be true or false", label, key);
    *out = json_is_true(v);
    return GPTX_OK;
}

/* A string key that must be one of the values gptx computes (NULL-ended). */
static int one_of(json_t *root, const char *key, const char *const *ok, const char *label) {
    json_t *v = json_object_get(root, key);
    if (!v) return GPTX_OK;
    const char *s = json_string_value(v);
    for (int i = 0; s && ok[i]; i++)
        if (!strcmp(s, ok[i])) return GPTX_OK;
    return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "'%s': \"%s\" is %s%.40s%s; gptx computes GPT-2 with "
                     "%s", label, key, s ? "\"" : "", s ? s : "not a string", s ? "\"" : "", ok[0]);
}

/* What gptx's GPT-2 computes: anything else imports as another model. */
static int check_function(json_t *root, const char *label) {
    static const char *const types[] = {"gpt2", NULL};
    static const char *const gelu[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
    GPTX_TRY(one_of(root, "model_type", types, label));
    GPTX_TRY(one_of(root, "activation_function", gelu, label));
    int scaled = 1, by_layer = 0;
    GPTX_TRY(boolean(root, "scale_attn_weights", label, &scaled));
    GPTX_TRY(boolean(root, "scale_attn_by_inverse_layer_idx", label, &by_layer));
    if (!scaled || by_layer)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "'%s': \"%s\" is %s; gptx scales attention by "
                         "1/sqrt(head size) only", label,
                         scaled ? "scale_attn_by_inverse_layer_idx" : "scale_attn_weights",
                         scaled ? "true" : "false");
    return GPTX_OK;
}

static int parse_root(gptx_hf_config *hc, json_t *root, const char *label) {
    int64_t heads = 12;
    GPTX_TRY(whole(root, "n_head", "num_attention_heads", label, 1, 4096, &heads));
    hc->n_head = (int)heads;
    json_t *eps = json_object_get(root, "layer_norm_epsilon");
    if (eps) {
        double x = json_is_number(eps) ? json_number_value(eps) : NAN;
        /* as a float too: 1e-56 would become 0 (a fuzz finding) */
        if (!(x > 0 && x < 1) || !((float)x > 0))
            return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': \"layer_norm_epsilon\" must be a number in "
                             "(0, 1) that a float holds (at least %g)", label, (double)FLT_TRUE_MIN);
        hc->layernorm_eps = (float)x;
    }
    GPTX_TRY(boolean(root, "tie_word_embeddings", label, &hc->tied_head));
    GPTX_TRY(whole(root, "vocab_size", NULL, label, 1, INT32_MAX, &hc->vocab_size));
    GPTX_TRY(whole(root, "n_positions", "max_position_embeddings", label, 1, INT32_MAX,
                   &hc->n_positions));
    GPTX_TRY(whole(root, "n_embd", "hidden_size", label, 1, INT32_MAX, &hc->n_embd));
    GPTX_TRY(whole(root, "n_layer", "num_hidden_layers", label, 1, INT32_MAX, &hc->n_layer));
    return check_function(root, label);
}

int gptx_hf_config_parse(gptx_hf_config *hc, const char *json, size_t len, const char *label) {
    *hc = (gptx_hf_config){label, 12, 1e-5f, 1, -1, -1, -1, -1};
    json_error_t err;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' is not a JSON object%s%s", label,
                         root ? "" : ": ", root ? "" : err.text);
    }
    int rc = parse_root(hc, root, label);
    json_decref(root);
    return rc;
}

int gptx_hf_config_read(gptx_hf_config *hc, const char *path) {
    unsigned char *buf = NULL;
    size_t len = 0;
    GPTX_TRY(gptx_file_read_whole(path, "the Hugging Face config.json", GPTX_MAX_HF_CONFIG_BYTES,
                                  &buf, &len));
    int rc = gptx_hf_config_parse(hc, (const char *)buf, len, path);
    free(buf);
    return rc;
}

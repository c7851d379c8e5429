/*
 * Export to an llm.c model file, the mirror of import.c's reader (and of
 * llm.c's gpt2_build_from_checkpoint): a header of 256 little-endian int32
 * [20240326, version, maxT, V, L, NH, C, Vp, 0 ...], version 3 for fp32 or 5
 * for bf16 (rounded to nearest even), then the 16 parameter arrays in llm.c's
 * order, each stacked over the layers: wte (Vp, C, padded rows kept), wpe,
 * ln1w, ln1b, qkvw (L, 3C, C), qkvb, attprojw, attprojb, ln2w, ln2b, fcw,
 * fcb, fcprojw, fcprojb, lnfw, lnfb. Weights are (out, in) in both, so
 * nothing is transposed; a model without qkv bias writes qkvb as zeros.
 *
 * Refused: an untied head (llm.c has none), a layernorm epsilon other than
 * llm.c's fixed 1e-5, padded logits that take part in the softmax. Written
 * atomically; values read as fp32 through the parameter download.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomic_file.h"
#include "errors.h"
#include "export.h"
#include "handle.h"
#include "model.h"
#include "param_storage.h"
#include "foreign_layout.h"
#include "safetensors.h"

/* Every message starts with the public call's name, whichever helper found it. */
#define LLMC_FAIL(status, ...) gptx_fail((status), "gptx_model_export_llmc", __VA_ARGS__)

static void put_u32(unsigned char *b, uint32_t v) {
    b[0] = (unsigned char)v;
    b[1] = (unsigned char)(v >> 8);
    b[2] = (unsigned char)(v >> 16);
    b[3] = (unsigned char)(v >> 24);
}

/* n values of x as little-endian fp32 or bf16 into out. */
static void encode(const float *x, size_t n, int bf16, unsigned char *out) {
    for (size_t i = 0; i < n; i++) {
        if (bf16) {
            uint16_t h = gptx_f32_to_bf16(x[i]);
            out[2 * i] = (unsigned char)h;
            out[2 * i + 1] = (unsigned char)(h >> 8);
        } else {
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            put_u32(out + 4 * i, u);
        }
    }
}

static int export_llmc(const gptx_model *m, const char *path, int bf16) {
    const gptx_model_config *c = &m->cfg;
    const gptx_layout *L = &m->layout;
    if (!c->tied_head)
        return LLMC_FAIL(GPTX_ERR_UNSUPPORTED,
                         "the model has an untied lm_head.weight and llm.c's format has none; "
                         "export it in the Hugging Face format (gptx_model_export_hf, "
                         "gptx-export --format hf)");
    if (c->layernorm_eps != 1e-5f)
        return LLMC_FAIL(GPTX_ERR_UNSUPPORTED,
                         "the model's layernorm_eps is %g; llm.c's format has no epsilon and "
                         "llm.c uses 1e-5 (export it in the Hugging Face format)",
                         (double)c->layernorm_eps);
    GPTX_TRY(gptx_export_check_common(c, "llm.c's format", "gptx_model_export_llmc"));
    if (!path[0]) return LLMC_FAIL(GPTX_ERR_INVALID, "argument 'path' is empty");

    unsigned char header[GPTX_LLMC_HEADER_INTS * 4] = {0};
    int32_t h[8] = {GPTX_LLMC_MAGIC, bf16 ? 5 : 3, c->context_length, c->vocab_size, c->n_layer,
                    c->n_head, c->n_embd, c->padded_vocab_size};
    for (int i = 0; i < 8; i++) put_u32(header + 4 * i, (uint32_t)h[i]);

    size_t maxn = 1;
    for (int i = 0; i < L->ntensors; i++)
        if (L->tensors[i].numel > maxn) maxn = L->tensors[i].numel;
    float *vals = malloc(maxn * sizeof *vals);
    unsigned char *bytes = malloc(maxn * 4);
    if (!vals || !bytes) {
        free(vals);
        free(bytes);
        return LLMC_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu floats)", maxn);
    }
    gptx_afile f;
    int rc = gptx_afile_open(&f, path);
    if (rc == GPTX_OK) rc = gptx_afile_write(&f, header, sizeof header);
    for (int k = 0; k < GPTX_LLMC_NTENSORS && rc == GPTX_OK; k++) {
        int nl = gptx_llmc_per_layer(k) ? c->n_layer : 1;
        for (int l = 0; l < nl && rc == GPTX_OK; l++) {
            int idx = gptx_llmc_index(L, k, l);
            size_t n;
            if (idx < 0) { /* qkvb of a model without qkv bias */
                n = 3 * (size_t)c->n_embd;
                memset(vals, 0, n * sizeof *vals);
            } else {
                const gptx_param_desc *d = &L->tensors[idx];
                n = d->numel;
                rc = gptx_param_download(m->ctx, vals,
                                         gptx_param_at(m->ctx, m->params, d->offset), n);
                if (rc != GPTX_OK) break;
            }
            encode(vals, n, bf16, bytes);
            rc = gptx_afile_write(&f, bytes, n * (bf16 ? 2 : 4)); /* closes f on failure */
        }
    }
    if (rc == GPTX_OK) rc = gptx_afile_commit(&f);
    else gptx_afile_abort(&f);
    free(vals);
    free(bytes);
    return rc;
}

int gptx_model_export_llmc(const gptx_model *model, const char *path, int dtype) {
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(path);
    if (dtype != GPTX_PRECISION_FP32 && dtype != GPTX_PRECISION_BF16)
        return LLMC_FAIL(GPTX_ERR_INVALID, "dtype is %d; llm.c files hold GPTX_PRECISION_FP32 "
                         "(version 3) or GPTX_PRECISION_BF16 (version 5)", dtype);
    return export_llmc(model, path, dtype == GPTX_PRECISION_BF16);
}

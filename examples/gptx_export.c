/* gptx-export: a model in any format gptx reads, written for other tools: a
 * Hugging Face GPT-2 folder (transformers' GPT2LMHeadModel.from_pretrained
 * loads it; with the tokenizer files vocab.json and merges.txt, copies of
 * the GPT-2 encoder.json and vocab.bpe, and tokenizer_config.json) or an
 * llm.c model file (fp32, version 3, or bf16, version 5) with llm.c's
 * gpt2_tokenizer.bin beside it. docs/export.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gptx/gptx.h>

#include "gptx_export_tokenizer.h"
#include "prog_data.h"
#include "prog_error.h"
#include "prog_files.h"
#include "prog_flags.h"
#include "prog_model.h"
#include "prog_outputs.h"

#define PROG "gptx-export"

typedef struct export_opts {
    const char *model, *format, *out, *dtype, *encoder, *vocab;
    int overwrite;
} export_opts;

#define ROW(field, name, kind, choices, arg, help, bits) \
    PROG_FLAG_ROW(export_opts, field, name, kind, 0, 0, choices, arg, help, bits, 0)
static const prog_flag rows[] = {
    ROW(model, "--model", PROG_FLAG_STR, NULL, "FILE",
        "the model: a gptx file (model or training checkpoint), a Hugging Face\n"
        "GPT-2 folder or its model.safetensors, or an llm.c .bin (required)",
        PROG_FLAG_NO_DEFAULT),
    ROW(format, "--format", PROG_FLAG_CHOICE, "hf|llmc", NULL,
        "hf: a Hugging Face GPT-2 folder (model.safetensors, config.json,\n"
        "vocab.json, merges.txt, tokenizer_config.json); llmc: an llm.c model\n"
        "file, and gpt2_tokenizer.bin in its folder (required)",
        PROG_FLAG_NO_DEFAULT),
    ROW(out, "--out", PROG_FLAG_STR, NULL, "PATH",
        "the folder (hf; created if absent) or the file (llmc) to write\n(required)",
        PROG_FLAG_NO_DEFAULT),
    ROW(dtype, "--dtype", PROG_FLAG_CHOICE, "fp32|bf16", NULL,
        "llmc only: fp32 (version 3) or bf16 (version 5, rounded to nearest\neven)", 0),
    ROW(encoder, "--encoder", PROG_FLAG_STR, NULL, "FILE",
        "GPT-2 encoder.json: hf copies it as vocab.json, llmc writes its tokens\n"
        "to gpt2_tokenizer.bin (default: the bundled one)",
        PROG_FLAG_NO_DEFAULT),
    ROW(vocab, "--vocab", PROG_FLAG_STR, NULL, "FILE",
        "GPT-2 vocab.bpe: hf copies it as merges.txt (default: the bundled one)",
        PROG_FLAG_NO_DEFAULT),
    ROW(overwrite, "--overwrite", PROG_FLAG_SWITCH, NULL, NULL,
        "replace an existing --out file (hf: the folder's files below); without\n"
        "it an existing one is refused. Never an input file, with it or not", 0),
};
static const prog_cli cli = {
    PROG,
    "usage: gptx-export --model FILE --format hf|llmc --out PATH [--dtype fp32|bf16]\n"
    "                   [--encoder FILE --vocab FILE] [--overwrite]\n"
    "Writes a model for other tools: a Hugging Face GPT-2 folder that transformers'\n"
    "GPT2LMHeadModel.from_pretrained loads, or an llm.c model file.\n",
    rows, sizeof rows / sizeof rows[0],
    "Exit status: 0 written, 1 the export failed (a file that cannot be read or\n"
    "written, an existing --out without --overwrite, a model the format cannot\n"
    "hold), 2 the command line is wrong (also an --out that is an input).\n"
    "See docs/export.md.\n"};

/* Copies the tokenizer file src to dir/name, after checking that the pair
 * is a GPT-2 tokenizer. 0, or -1 after a message. */
static int copy_file(const char *what, const char *src, const char *dir, const char *name) {
    size_t len = 0;
    char *data = prog_read_file(PROG, what, src, &len);
    if (!data) return -1;
    size_t n = strlen(dir) + strlen(name) + 2;
    char *dst = malloc(n);
    int rc = -1;
    if (dst) {
        snprintf(dst, n, "%s/%s", dir, name);
        if (gptx_file_save(dst, data, len) == GPTX_OK) rc = 0;
        else fprintf(stderr, "%s: cannot write %s: %s\n", PROG, dst, prog_error_text());
    } else {
        fprintf(stderr, "%s: out of memory\n", PROG);
    }
    free(dst);
    free(data);
    return rc;
}

/* llm.c's trainers read T positions (train_gpt2.c: T = 64, fixed): a model
 * with fewer would have them read past its position table. */
#define LLMC_DEFAULT_T 64

/* The llm.c model file and gpt2_tokenizer.bin beside it. 0, or -1 after a
 * message. */
static int export_llmc(const export_opts *o, const gptx_model *m, const gptx_tokenizer *tok,
                       const char *fmt, int T) {
    int bf16 = strcmp(o->dtype, "bf16") == 0;
    if (gptx_model_export_llmc(m, o->out, bf16 ? GPTX_PRECISION_BF16 : GPTX_PRECISION_FP32) !=
        GPTX_OK) {
        fprintf(stderr, "%s: %s\n", PROG, prog_error_text());
        return -1;
    }
    char *tok_path = NULL;
    if (export_llmc_tokenizer(PROG, tok, o->out, &tok_path) != 0) return -1;
    printf("%s: %s model %s -> llm.c model file %s (version %d, %s) and its tokenizer %s\n", PROG,
           fmt, o->model, o->out, bf16 ? 5 : 3, o->dtype, tok_path);
    free(tok_path);
    if (T < LLMC_DEFAULT_T)
        fprintf(stderr, "%s: warning: the model's context is %d positions; llm.c's train_gpt2.c "
                "runs T = %d and would read past them: run llm.c with T <= %d "
                "(train_gpt2.cu -t %d)\n", PROG, T, LLMC_DEFAULT_T, T, T);
    return 0;
}

/* The files the export writes: --out and gpt2_tokenizer.bin in its folder
 * (llmc), or these in the --out folder (hf; the last three are
 * gptx-export's own, not the library's). */
static const char *const hf_files[] = {"model.safetensors", "config.json", "vocab.json",
                                       "merges.txt", "tokenizer_config.json"};

/* Before anything is read or written: no output is an input, and none
 * exists unless --overwrite (prog_outputs.h). 0, or the exit status. */
static int check_outputs(const export_opts *o, int hf) {
    prog_input_ids in = {.n = 0};
    prog_input_add(&in, "--model", o->model);
    prog_input_add(&in, "--encoder", o->encoder); /* both formats read the tokenizer */
    prog_input_add(&in, "--vocab", o->vocab);
    if (!hf) {
        const char *slash = strrchr(o->out, '/');
        char tok[4200];
        if (slash) snprintf(tok, sizeof tok, "%.*s/gpt2_tokenizer.bin", (int)(slash - o->out), o->out);
        else snprintf(tok, sizeof tok, "gpt2_tokenizer.bin");
        int rc = prog_output_check(PROG, "--out", o->out, o->overwrite, &in);
        return rc ? rc : prog_output_check(PROG, "--out", tok, o->overwrite, &in);
    }
    int rc = 0;
    for (size_t i = 0; i < sizeof hf_files / sizeof hf_files[0] && rc == 0; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", o->out, hf_files[i]);
        rc = prog_output_check(PROG, "--out", path, o->overwrite, &in);
    }
    return rc;
}

int main(int argc, char **argv) {
    export_opts defaults = {NULL, NULL, NULL, "fp32", NULL, NULL, 0};
    export_opts o = defaults;
    unsigned char given[sizeof rows / sizeof rows[0]] = {0};
    int prc = prog_flags_parse(&cli, &o, given, argc, argv, &defaults);
    if (prc > 0) return PROG_EXIT_OK;
    if (prc < 0) return PROG_EXIT_USAGE;
    if (!o.model) return prog_usage_error(PROG, "--model", NULL, "is required"), PROG_EXIT_USAGE;
    if (!o.format) return prog_usage_error(PROG, "--format", NULL, "is required"), PROG_EXIT_USAGE;
    if (!o.out) return prog_usage_error(PROG, "--out", NULL, "is required"), PROG_EXIT_USAGE;
    int hf = strcmp(o.format, "hf") == 0;
    if (hf && given[prog_flags_find(&cli, "--dtype") - rows])
        return prog_usage_error(PROG, "--dtype", o.dtype, "is for --format llmc (the Hugging "
                                "Face export is fp32)"), PROG_EXIT_USAGE;
    if (!o.encoder) o.encoder = prog_data_path("gpt2/encoder.json");
    if (!o.vocab) o.vocab = prog_data_path("gpt2/vocab.bpe");
    int orc = check_outputs(&o, hf);
    if (orc) return orc;

    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CPU; /* nothing is computed: fp32 values, any file loads */
    co.num_threads = 1;
    co.precision = GPTX_PRECISION_FP32;
    gptx_context *ctx = NULL;
    if (gptx_context_create(&ctx, &co) != GPTX_OK) {
        fprintf(stderr, "%s: cannot create a CPU context: %s\n", PROG, prog_error_text());
        return PROG_EXIT_FAILURE;
    }
    gptx_model *m = NULL;
    const char *fmt = NULL;
    int rc = PROG_EXIT_FAILURE;
    gptx_tokenizer *tok = NULL;
    if (prog_model_open(PROG, &m, ctx, o.model, &fmt) != GPTX_OK) goto done;
    /* the tokenizer files must be a GPT-2 tokenizer, checked before anything is written */
    if (gptx_tokenizer_load_gpt2(&tok, o.encoder, o.vocab) != GPTX_OK) {
        fprintf(stderr, "%s: %s, %s: not a GPT-2 tokenizer: %s\n", PROG, o.encoder, o.vocab,
                prog_error_text());
        goto done;
    }
    gptx_model_config c;
    gptx_model_config_init(&c);
    if (gptx_model_get_config(m, &c) == GPTX_OK && gptx_tokenizer_vocab_size(tok) != c.vocab_size)
        fprintf(stderr, "%s: note: the tokenizer has %d tokens and the model's vocabulary %d; "
                "ids the model lacks will fail in %s\n", PROG, gptx_tokenizer_vocab_size(tok),
                c.vocab_size, hf ? "transformers" : "llm.c");
    if (hf) {
        if (gptx_model_export_hf(m, o.out) != GPTX_OK) { /* the message names the path */
            fprintf(stderr, "%s: %s\n", PROG, prog_error_text());
            goto done;
        }
        if (copy_file("the encoder", o.encoder, o.out, "vocab.json") != 0 ||
            copy_file("the merges", o.vocab, o.out, "merges.txt") != 0 ||
            export_hf_tokenizer_config(PROG, tok, c.context_length, o.out) != 0)
            goto done;
        printf("%s: %s model %s -> Hugging Face GPT-2 folder %s (model.safetensors, config.json, "
               "vocab.json, merges.txt, tokenizer_config.json)\n", PROG, fmt, o.model, o.out);
    } else if (export_llmc(&o, m, tok, fmt, c.context_length) != 0) {
        goto done;
    }
    rc = PROG_EXIT_OK;
done:
    gptx_tokenizer_destroy(tok);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return rc;
}

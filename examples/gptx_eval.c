/* gptx-eval: the loss and perplexity of a model on a text or a token shard,
 * or its accuracy on multiple-choice completions (--multiple-choice, HellaSwag's
 * JSONL layout: gptx_eval_mc.c).
 *
 * The tokens are cut into windows of --seq T + 1 that overlap by one token,
 * so every token but the first is predicted exactly once, from the tokens
 * before it in its window (at most T); the last, shorter window takes the
 * rest. The loss is the mean cross-entropy over all predicted tokens, in
 * nats; the perplexity is its exponential. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gptx/gptx.h"
#include "gptx_eval_mc.h"
#include "prog_data.h"
#include "prog_error.h"
#include "prog_flags.h"
#include "prog_files.h"
#include "prog_inputs.h"
#include "prog_model.h"
#include "prog_outputs.h"
#include "prog_text.h"
#include "prog_threads.h"

typedef struct eval_args {
    const char *model, *text, *tokens, *mc, *details, *json, *backend, *encoder, *vocab;
    int special_tokens, special, seq, batch, threads, overwrite;
    long long max_tokens;
} eval_args;

#define PROG "gptx-eval"

/* --json and --details: never an input, an existing file only with
 * --overwrite (prog_outputs.h). -1 go on, else the exit status. */
static int check_outputs(const eval_args *a) {
    prog_input_ids in = {.n = 0};
    prog_input_add(&in, "--model", a->model);
    prog_input_add(&in, "--text", a->text);
    prog_input_add(&in, "--multiple-choice", a->mc);
    prog_input_add(&in, "--encoder", a->encoder);
    prog_input_add(&in, "--vocab", a->vocab);
    if (a->tokens && !strpbrk(a->tokens, ",*?[")) prog_input_add(&in, "--tokens", a->tokens);
    int rc = a->json ? prog_output_check(PROG, "--json", a->json, a->overwrite, &in) : 0;
    if (!rc && a->details) rc = prog_output_check(PROG, "--details", a->details, a->overwrite, &in);
    if (!rc && a->json && a->details && !strcmp(a->json, a->details)) {
        prog_usage_error(PROG, "--details", a->details, "is --json's file too");
        rc = 2;
    }
    return rc ? rc : -1;
}

/* The flags (prog_flags.h): -1 go on, else the exit status. */
static int parse(eval_args *a, int argc, char **argv) {
    eval_args defaults = {0};
    defaults.backend = "cpu";
    defaults.encoder = prog_data_path("gpt2/encoder.json");
    defaults.vocab = prog_data_path("gpt2/vocab.bpe");
    defaults.batch = 4;
#define ROW(field, name, kind, lo, hi, choices, arg, help, bits) \
    PROG_FLAG_ROW(eval_args, field, name, kind, lo, hi, choices, arg, help, bits, 0)
    static const prog_flag rows[] = {
        ROW(model, "--model", PROG_FLAG_STR, 0, 0, NULL, "PATH",
            "a gptx model or checkpoint, a Hugging Face GPT-2 folder\n"
            "(model.safetensors + config.json) or an llm.c .bin model", 0),
        PROG_SECTION("what to score (one of):"),
        ROW(text, "--text", PROG_FLAG_STR, 0, 0, NULL, "FILE",
            "text to score, GPT-2 BPE tokens; - = standard input", 0),
        ROW(tokens, "--tokens", PROG_FLAG_STR, 0, 0, NULL, "SHARDS",
            "llm.c token shards (gptx-tokenize's output) instead of --text:\n"
            "files, globs, folders, comma-separated, read in sorted order", 0),
        ROW(mc, "--multiple-choice", PROG_FLAG_STR, 0, 0, NULL, "FILE",
            "accuracy on completions instead: JSONL, one example a line\n"
            "with \"ctx\", \"endings\" and \"label\" (HellaSwag's layout); prints\n"
            "acc (lowest summed loss) and acc_norm (lowest mean)", 0),
        PROG_SECTION("options:"),
        ROW(details, "--details", PROG_FLAG_STR, 0, 0, NULL, "FILE",
            "with --multiple-choice: every ending's losses, JSONL", 0),
        ROW(special_tokens, "--special-tokens", PROG_FLAG_INDEX, 0, 0, PROG_SPECIAL_TOKENS_CHOICES,
            "R", "how \"<|endoftext|>\" in the text is read: text (as its 13\n"
            "characters) or allow (as the end-of-text token 50256)", 0),
        ROW(special, "--special", PROG_FLAG_SWITCH, 0, 0, NULL, NULL,
            "the same as --special-tokens allow (its older spelling)", 0),
        ROW(seq, "--seq", PROG_FLAG_INT, 1, 1 << 20, NULL, "T",
            "positions per window (per row with --multiple-choice),\n"
            "<= the model's context (default: the context)", PROG_FLAG_NO_DEFAULT),
        ROW(batch, "--batch", PROG_FLAG_INT, 1, 4096, NULL, "B",
            "windows per forward pass; with --multiple-choice, rows\n"
            "(endings) per pass, whole examples", 0),
        ROW(max_tokens, "--max-tokens", PROG_FLAG_I64, 2, 1e15, NULL, "N",
            "score only the first N tokens (default: all)", PROG_FLAG_NO_DEFAULT),
        ROW(backend, "--backend", PROG_FLAG_CHOICE, 0, 0, "cpu|cuda|auto", "NAME",
            "cpu, cuda or auto", 0),
        ROW(threads, "--threads", PROG_FLAG_INT, 0, 4096, NULL, "N", "CPU threads, 0 = all cores",
            0),
        ROW(encoder, "--encoder", PROG_FLAG_STR, 0, 0, NULL, "FILE",
            "GPT-2 tokenizer: encoder.json", 0),
        ROW(vocab, "--vocab", PROG_FLAG_STR, 0, 0, NULL, "FILE", "GPT-2 tokenizer: vocab.bpe", 0),
        ROW(json, "--json", PROG_FLAG_STR, 0, 0, NULL, "FILE", "also write the results as JSON",
            0),
        ROW(overwrite, "--overwrite", PROG_FLAG_SWITCH, 0, 0, NULL, NULL,
            "replace an existing --json or --details file (without it one is\n"
            "refused; never an input file; a device or the standard output is\n"
            "written as it is)", 0),
    };
#undef ROW
    static const prog_cli cli = {
        PROG,
        "usage: " PROG " --model PATH (--text FILE | --tokens SHARDS | --multiple-choice FILE) "
        "[options]\n"
        "The loss and perplexity of a model on a text or token shards, or its accuracy on\n"
        "multiple-choice completions.\n",
        rows, sizeof rows / sizeof rows[0], NULL};
    *a = defaults;
    int rc = prog_flags_parse(&cli, a, NULL, argc, argv, &defaults);
    if (rc) return rc == 1 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    if (!a->model) {
        prog_usage_error(PROG, "--model", NULL, "is required");
        return PROG_EXIT_USAGE;
    }
    if (!!a->text + !!a->tokens + !!a->mc != 1) {
        prog_usage_error(PROG, a->mc && (a->text || a->tokens) ? "--multiple-choice"
                               : a->text && a->tokens          ? "--tokens"
                                                               : "--text",
                         NULL, "give one of --text, --tokens or --multiple-choice");
        return PROG_EXIT_USAGE;
    }
    if (a->details && !a->mc) {
        prog_usage_error(PROG, "--details", a->details, "goes with --multiple-choice");
        return PROG_EXIT_USAGE;
    }
    if (a->special) a->special_tokens = 1;
    if (prog_threads_check(PROG, a->threads) != 0) return PROG_EXIT_USAGE;
    return check_outputs(a);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Mean loss of `rows` windows of T + 1 tokens starting T apart at ids. */
static int score(gptx_model *m, const int32_t *ids, int rows, int T, int32_t *in, int32_t *tg,
                 double *sum) {
    for (int r = 0; r < rows; r++) {
        memcpy(in + (size_t)r * T, ids + (size_t)r * T, (size_t)T * sizeof *in);
        memcpy(tg + (size_t)r * T, ids + (size_t)r * T + 1, (size_t)T * sizeof *tg);
    }
    float loss = 0.0f;
    int rc = gptx_model_forward(m, in, tg, rows, T, &loss);
    if (rc == GPTX_OK) *sum += (double)loss * rows * T;
    return rc;
}

/* --multiple-choice: 0 done, 1 failed (a message printed). */
static int multiple_choice(gptx_model *model, const gptx_model_config *c, const char *model_path,
                           const char *format, const char *path, const char *details,
                           const char *json_path, int T, int batch, int special,
                           const char *encoder, const char *vocab) {
    if (T > c->context_length) {
        fprintf(stderr, "gptx-eval: --seq %d is above the model's context length %d\n", T,
                c->context_length);
        return 1;
    }
    gptx_tokenizer *tok = NULL;
    if (gptx_tokenizer_load_gpt2(&tok, encoder, vocab) != GPTX_OK) {
        fprintf(stderr, "gptx-eval: %s\n", prog_error_text());
        return 1;
    }
    eval_mc_options o = {path, details, T, batch, special};
    eval_mc_result r;
    double t0 = now_s();
    int status = eval_mc_run(model, tok, &o, &r);
    double secs = now_s() - t0;
    gptx_tokenizer_destroy(tok);
    if (status) return status;
    double acc = (double)r.correct / (double)r.examples;
    double acc_norm = (double)r.correct_norm / (double)r.examples;
    printf("model    : %s (%s; %d layers, width %d, %d heads, context %d, vocabulary %d)\n",
           model_path, format, c->n_layer, c->n_embd, c->n_head, c->context_length,
           c->vocab_size);
    printf("data     : %s, %zu examples, %zu endings (multiple choice; <|endoftext|>: %s)\n", path,
           r.examples, r.rows, special ? "allow" : "text");
    printf("rows     : %zu forward passes of at most %d rows; %zu rows longer than %d + 1 tokens "
           "kept their last %d + 1 (the context's start dropped)\n",
           r.passes, batch, r.truncated_rows, T, T);
    printf("acc      : %.4f (%zu of %zu; the ending of lowest summed loss)\n", acc, r.correct,
           r.examples);
    printf("acc_norm : %.4f (%zu of %zu; the ending of lowest mean loss per token)\n", acc_norm,
           r.correct_norm, r.examples);
    printf("time     : %.2f s (%.1f examples/s)\n", secs,
           secs > 0 ? (double)r.examples / secs : 0.0);
    if (json_path) {
        prog_out out;
        if (prog_out_open(&out, "gptx-eval", json_path)) return 1;
        fprintf(out.f,
                "{\"model\": \"%s\", \"format\": \"%s\", \"multiple_choice\": \"%s\", "
                "\"examples\": %zu, \"count\": %zu, \"correct\": %zu, \"correct_norm\": %zu, "
                "\"acc\": %.6f, \"acc_norm\": %.6f, \"truncated_rows\": %zu, \"seq\": %d, "
                "\"seconds\": %.3f}\n",
                model_path, format, path, r.examples, r.examples, r.correct, r.correct_norm, acc,
                acc_norm, r.truncated_rows, T, secs);
        if (prog_out_save(&out, "gptx-eval", "--json", json_path)) return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    eval_args a;
    int parsed = parse(&a, argc, argv);
    if (parsed >= 0) return parsed;
    const char *model_path = a.model, *text_path = a.text, *tokens_path = a.tokens;
    const char *json_path = a.json, *mc_path = a.mc, *details_path = a.details;
    const char *backend = a.backend, *encoder = a.encoder, *vocab = a.vocab;
    double seq = a.seq, batch = a.batch, max_tokens = (double)a.max_tokens, threads = a.threads;
    int special = a.special_tokens;

    int status = PROG_EXIT_FAILURE, rc = GPTX_OK;
    gptx_context *ctx = NULL;
    gptx_model *model = NULL;
    gptx_tokenizer *tok = NULL;
    int32_t *ids = NULL, *in = NULL, *tg = NULL;
    char *text = NULL;
    size_t n = 0;
    const char *format = "";

    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = !strcmp(backend, "cuda") ? GPTX_BACKEND_CUDA
                 : !strcmp(backend, "auto") ? GPTX_BACKEND_AUTO : GPTX_BACKEND_CPU;
    co.num_threads = (int)threads;
    if ((rc = gptx_context_create(&ctx, &co))) goto fail;
    if (prog_model_open("gptx-eval", &model, ctx, model_path, &format) != GPTX_OK) goto done;
    gptx_model_config c;
    gptx_model_config_init(&c);
    if ((rc = gptx_model_get_config(model, &c))) goto fail;

    if (mc_path) {
        status = multiple_choice(model, &c, model_path, format, mc_path, details_path, json_path,
                                 seq > 0 ? (int)seq : c.context_length, (int)batch, special,
                                 encoder, vocab);
        goto done;
    }
    if (text_path) {
        size_t len = 0;
        char *one[] = {(char *)text_path};
        const prog_inputs text_in = {one, NULL, 1, 0};
        if (prog_inputs_check_text("gptx-eval", "--text", &text_in)) goto done; /* not a shard */
        if (!(text = prog_read_file("gptx-eval", "--text", text_path, &len))) goto done;
        if ((rc = gptx_tokenizer_load_gpt2(&tok, encoder, vocab))) goto fail;
        ids = malloc((len ? len : 1) * sizeof *ids);
        if (!ids) {
            fprintf(stderr, "gptx-eval: out of memory for %zu token ids\n", len);
            goto done;
        }
        if ((rc = gptx_tokenizer_encode(tok, text, len, special, ids, len ? len : 1, &n))) goto fail;
    } else { /* shards (a list, globs, folders: prog_inputs.h), one after the other */
        prog_inputs shards;
        if (prog_inputs_expand("gptx-eval", "--tokens", tokens_path, &shards)) goto done;
        for (size_t i = 0; i < shards.n && rc == GPTX_OK; i++) {
            int32_t *part = NULL;
            size_t m = 0;
            if ((rc = gptx_shard_read(shards.paths[i], &part, &m))) break;
            int32_t *all = realloc(ids, (n + m + 1) * sizeof *all);
            if (all) {
                ids = all;
                memcpy(ids + n, part, m * sizeof *part);
                n += m;
            }
            gptx_free(part);
            if (!all) {
                fprintf(stderr, "gptx-eval: out of memory for %zu token ids\n", n + m);
                prog_inputs_free(&shards);
                goto done;
            }
        }
        prog_inputs_free(&shards);
        if (rc) goto fail;
    }
    if (max_tokens > 0 && n > (size_t)max_tokens) n = (size_t)max_tokens;
    if (n < 2) {
        fprintf(stderr, "gptx-eval: %s has %zu token%s: at least 2 are needed (one to predict "
                        "from, one to predict)\n",
                text_path ? text_path : tokens_path, n, n == 1 ? "" : "s");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c.vocab_size) {
            fprintf(stderr, "gptx-eval: token %zu is id %d, outside the model's vocabulary of %d "
                            "ids%s\n",
                    i, (int)ids[i], c.vocab_size,
                    text_path ? " (the text was encoded with the GPT-2 tokenizer)" : "");
            goto done;
        }
    int T = seq > 0 ? (int)seq : c.context_length;
    if (T > c.context_length) {
        fprintf(stderr, "gptx-eval: --seq %d is above the model's context length %d\n", T,
                c.context_length);
        goto done;
    }
    int B = (int)batch;
    in = malloc((size_t)B * T * sizeof *in);
    tg = malloc((size_t)B * T * sizeof *tg);
    if (!in || !tg) {
        fprintf(stderr, "gptx-eval: out of memory for a batch of %d x %d\n", B, T);
        goto done;
    }

    size_t predicted = n - 1, full = predicted / (size_t)T, done_w = 0;
    int rest = (int)(predicted % (size_t)T);
    double sum = 0.0, t0 = now_s();
    while (done_w < full) {
        int rows = full - done_w < (size_t)B ? (int)(full - done_w) : B;
        if ((rc = score(model, ids + done_w * (size_t)T, rows, T, in, tg, &sum))) goto fail;
        done_w += (size_t)rows;
    }
    if (rest > 0 && (rc = score(model, ids + full * (size_t)T, 1, rest, in, tg, &sum))) goto fail;
    double secs = now_s() - t0, loss = sum / (double)predicted, ppl = exp(loss);

    printf("model    : %s (%s; %d layers, width %d, %d heads, context %d, vocabulary %d)\n",
           model_path, format, c.n_layer, c.n_embd, c.n_head, c.context_length, c.vocab_size);
    printf("data     : %s, %zu tokens%s%s\n", text_path ? text_path : tokens_path, n,
           text_path ? " (GPT-2 BPE; <|endoftext|>: " : " (llm.c shard)",
           text_path ? (special ? "allow)" : "text)") : "");
    printf("windows  : %zu of %d predicted tokens%s; each token predicted once, from at most %d "
           "before it\n",
           full, T, rest ? " + 1 shorter" : "", T);
    printf("loss     : %.4f nats/token over %zu predicted tokens; perplexity %.2f\n", loss,
           predicted, ppl);
    printf("time     : %.2f s (%.0f tokens/s)\n", secs, secs > 0 ? (double)predicted / secs : 0.0);
    if (json_path) {
        /* a plain fopen, not the atomic writer: --json /dev/stdout works */
        FILE *f = fopen(json_path, "w");
        int err = f ? 0 : errno;
        if (f) {
            fprintf(f, "{\"model\": \"%s\", \"format\": \"%s\", \"tokens\": %zu, "
                       "\"predicted\": %zu, \"seq\": %d, \"loss\": %.6f, "
                       "\"perplexity\": %.6f, \"seconds\": %.3f}\n",
                    model_path, format, n, predicted, T, loss, ppl, secs);
            /* a full disk shows at the flush (ENOSPC): the reason is named */
            if (fflush(f) != 0 || ferror(f)) err = errno ? errno : EIO;
            if (fclose(f) != 0 && !err) err = errno ? errno : EIO;
        }
        if (err) {
            fprintf(stderr, "gptx-eval: cannot write --json %s: %s\n", json_path, strerror(err));
            goto done;
        }
    }
    status = PROG_EXIT_OK;
    goto done;
fail:
    fprintf(stderr, "gptx-eval: %s\n", prog_error_text());
done:
    free(in);
    free(tg);
    free(ids);
    free(text);
    gptx_tokenizer_destroy(tok);
    gptx_model_destroy(model);
    gptx_context_destroy(ctx);
    return status;
}

/*
 * gptx-generate: prompt -> continuation from a saved model
 * (gptx_model_save / gptx-train's checkpoint), with the library's sampler,
 * through a gptx_generator (key/value cache). The continuation is printed as
 * it is generated: whole UTF-8 characters only (a token may end inside one),
 * and nothing that could be the start of the --stop text. The speed goes to
 * stderr at the end, prefill and decode apart.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptx/gptx.h"
#include "prog_error.h"
#include "prog_flags.h"
#include "prog_data.h"
#include "prog_files.h"
#include "prog_model.h"
#include "prog_text.h"
#include "prog_threads.h"


typedef struct gen_opts {
    const char *model, *prompt, *prompt_file, *stop, *backend, *encoder, *vocab;
    int special, max_tokens, ignore_eot, num_samples;
    float temperature, top_p, repetition_penalty, frequency_penalty, presence_penalty, min_p;
    int top_k, penalty_window;
    unsigned long long seed, stream;
    int no_cache, window, keep, threads;
} gen_opts;

#define ROW(field, name, kind, lo, hi, choices, arg, help, bits) \
    PROG_FLAG_ROW(gen_opts, field, name, kind, lo, hi, choices, arg, help, bits, 0)
static const prog_flag rows[] = {
    PROG_SECTION("input:"),
    ROW(model, "--model", PROG_FLAG_STR, 0, 0, NULL, "PATH",
        "a gptx model or training checkpoint, a Hugging Face GPT-2\n"
        "folder (model.safetensors + config.json) or an llm.c .bin\nmodel (required)",
        PROG_FLAG_NO_DEFAULT),
    ROW(prompt, "--prompt", PROG_FLAG_STR, 0, 0, NULL, "TEXT", "text to continue", 0),
    ROW(prompt_file, "--prompt-file", PROG_FLAG_STR, 0, 0, NULL, "FILE",
        "the prompt from a file; - = standard input", PROG_FLAG_NO_DEFAULT),
    ROW(special, "--special-tokens", PROG_FLAG_INDEX, 0, 0, "text|allow", "R",
        "how \"<|endoftext|>\" in the text is read: text (as\n"
        "its 13 characters) or allow (as the end-of-text token)", 0),
    ROW(encoder, "--encoder", PROG_FLAG_STR, 0, 0, NULL, "FILE", "GPT-2 tokenizer: encoder.json",
        0),
    ROW(vocab, "--vocab", PROG_FLAG_STR, 0, 0, NULL, "FILE", "GPT-2 tokenizer: vocab.bpe", 0),
    PROG_SECTION("output:"),
    ROW(max_tokens, "--max-tokens", PROG_FLAG_INT, 0, 1e6, NULL, NULL, "tokens to generate", 0),
    ROW(num_samples, "--num-samples", PROG_FLAG_INT, 1, 10000, NULL, NULL,
        "continuations of the prompt, printed one after another,\n"
        "each after a line \"=== sample I of N (--seed S\n"
        "--stream T) ===\"; sample I draws from Philox stream\n"
        "--stream + I - 1: --seed S --stream T alone prints it again", 0),
    ROW(stop, "--stop", PROG_FLAG_STR, 0, 0, NULL, "TEXT",
        "stop before TEXT appears in the continuation", PROG_FLAG_NO_DEFAULT),
    ROW(ignore_eot, "--ignore-eot", PROG_FLAG_SWITCH, 0, 1, NULL, NULL,
        "go on past the end-of-text token (default: stop there)", 0),
    PROG_SECTION("sampling (in this order: penalties, temperature, top-k, top-p, min-p):"),
    ROW(temperature, "--temperature", PROG_FLAG_FLOAT, 0, 100, NULL, NULL, "0 = greedy", 0),
    ROW(top_k, "--top-k", PROG_FLAG_INT, 0, 1e9, NULL, NULL, "0 = off", 0),
    ROW(top_p, "--top-p", PROG_FLAG_FLOAT, 0, 1, NULL, NULL, "1 = off", PROG_FLAG_OPEN_LO),
    ROW(min_p, "--min-p", PROG_FLAG_FLOAT, 0, 1, NULL, NULL,
        "keep tokens at least X times as likely as the best;\n0 = off", 0),
    ROW(repetition_penalty, "--repetition-penalty", PROG_FLAG_FLOAT, 0, 1e6, NULL, NULL,
        "a token of the last --penalty-window: logit / X if > 0,\nelse * X; 1 = off",
        PROG_FLAG_OPEN_LO),
    ROW(frequency_penalty, "--frequency-penalty", PROG_FLAG_FLOAT, 0, 1e6, NULL, NULL,
        "logit -= X times the token's count in the window;\n0 = off", 0),
    ROW(presence_penalty, "--presence-penalty", PROG_FLAG_FLOAT, 0, 1e6, NULL, NULL,
        "logit -= X for a token in the window; 0 = off", 0),
    ROW(penalty_window, "--penalty-window", PROG_FLAG_INT, 1, 1 << 24, NULL, NULL,
        "the tokens the penalties see: the last N of the model's\nwindow, prompt included", 0),
    ROW(seed, "--seed", PROG_FLAG_U64, 0, 0, NULL, NULL, "sampler seed", 0),
    ROW(stream, "--stream", PROG_FLAG_U64, 0, 0, NULL, NULL,
        "Philox stream of the first sample", 0),
    PROG_SECTION("running:"),
    ROW(no_cache, "--no-cache", PROG_FLAG_SWITCH, 0, 1, NULL, NULL,
        "recompute the whole window for every token (the reference)", 0),
    ROW(window, "--window", PROG_FLAG_INT, 0, 1 << 24, NULL, NULL,
        "positions the cache holds, 0 = context length", 0),
    ROW(keep, "--keep", PROG_FLAG_INT, -1, 1 << 24, NULL, NULL,
        "tokens kept when the window is full, -1 = window / 2", 0),
    ROW(backend, "--backend", PROG_FLAG_CHOICE, 0, 0, "cpu|cuda|auto", NULL, "where it runs", 0),
    ROW(threads, "--threads", PROG_FLAG_INT, 0, 4096, NULL, NULL, "CPU threads, 0 = all cores", 0),
};
#undef ROW
static const prog_cli cli = {
    "gptx-generate",
    "usage: gptx-generate --model PATH [options]\n"
    "Continues a prompt with a model, printing the text as it is sampled; the speed\n"
    "goes to stderr. Exit status: 0 done, 1 the work failed, 2 a wrong command line.\n",
    rows, sizeof rows / sizeof rows[0], NULL};

/* The continuation printed as it grows: text holds every byte generated so
 * far, printed the bytes already written. */
typedef struct {
    char *text;
    size_t len, cap, printed;
    const char *stop;
    size_t stop_len;
    int stopped;
} stream;

/* Bytes at the end of buf[0, n) that start a UTF-8 character not complete yet. */
static size_t incomplete_utf8_tail(const char *buf, size_t n) {
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = (unsigned char)buf[n - back];
        if ((c & 0xC0) == 0x80) continue; /* a continuation byte: keep looking */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

static void emit(stream *s, size_t upto) {
    if (upto > s->printed) {
        fwrite(s->text + s->printed, 1, upto - s->printed, stdout);
        fflush(stdout);
        s->printed = upto;
    }
}

/* Appends a token's bytes; prints what can no longer change. Returns -1 when
 * out of memory. */
static int stream_add(stream *s, const char *bytes, size_t n) {
    if (s->len + n > s->cap) {
        size_t cap = (s->len + n) * 2 + 64;
        char *t = realloc(s->text, cap);
        if (!t) return -1;
        s->text = t;
        s->cap = cap;
    }
    memcpy(s->text + s->len, bytes, n);
    s->len += n;
    if (s->stop_len) { /* a match can only start at or after what is printed */
        for (size_t i = s->printed; i + s->stop_len <= s->len; i++)
            if (memcmp(s->text + i, s->stop, s->stop_len) == 0) {
                emit(s, i);
                s->stopped = 1;
                return 0;
            }
    }
    size_t hold = s->stop_len ? s->stop_len - 1 : 0, tail = incomplete_utf8_tail(s->text, s->len);
    if (tail > hold) hold = tail;
    size_t upto = s->len > hold ? s->len - hold : 0;
    while (upto > s->printed && upto < s->len && ((unsigned char)s->text[upto] & 0xC0) == 0x80)
        upto--; /* never inside a character */
    emit(s, upto);
    return 0;
}

/* "0.213 s", or "2.13 ms" for what is under a tenth of a second: a short
 * time keeps three digits, not one (issue 25, item 11). */
static void seconds_text(char *buf, size_t cap, double s) {
    if (s >= 0.1 || s <= 0) snprintf(buf, cap, "%.3f s", s);
    else snprintf(buf, cap, "%.3g ms", s * 1e3);
}

/* "123.4 tokens/s", or no rate where there was no time to measure. */
static void rate_text(char *buf, size_t cap, double tokens, double s) {
    if (s > 0) snprintf(buf, cap, "%.1f tokens/s", tokens / s);
    else snprintf(buf, cap, "no time measured");
}

/* One continuation of ids[0, n_ids) with the sampler at (seed, stream),
 * printed (prompt first) and followed by the speed line. 0, or -1 after a
 * message. */
static int generate_one(const gen_opts *o, gptx_generator *gen, gptx_sampler *sampler,
                        gptx_tokenizer *tok, const char *prompt, const int32_t *ids,
                        size_t n_ids, uint64_t stream_id, const char *label) {
    int rc;
    stream out = {NULL, 0, 0, 0, o->stop, o->stop ? strlen(o->stop) : 0, 0};
    gptx_sampler_state ss;
    gptx_sampler_state_init(&ss);
    ss.seed = o->seed;
    ss.stream = stream_id;
    ss.counter = 0;
    int32_t eot = gptx_tokenizer_eot_token(tok);
    size_t plen = strlen(prompt), made = 0, n_new = (size_t)o->max_tokens;
    int64_t prefill_run = 0; /* positions the prefill ran: at most a window of the prompt */
    if ((rc = gptx_sampler_set_state(sampler, &ss)) || (rc = gptx_generator_reset(gen)))
        goto fail;
    fwrite(prompt, 1, plen, stdout);
    fflush(stdout);
    if ((rc = gptx_generator_feed(gen, ids, (int)n_ids))) goto fail;
    while (made < n_new && !out.stopped) {
        int32_t t;
        if ((rc = gptx_generator_next(gen, sampler, &t))) goto fail;
        if (made++ == 0) {
            gptx_generator_stats first;
            gptx_generator_stats_init(&first);
            if ((rc = gptx_generator_get_stats(gen, &first))) goto fail;
            prefill_run = first.positions;
        }
        if (t == eot && !o->ignore_eot) break;
        const char *bytes = NULL;
        size_t nb = 0;
        if ((rc = gptx_tokenizer_token_bytes(tok, t, &bytes, &nb))) goto fail;
        if (stream_add(&out, bytes, nb)) {
            fprintf(stderr, "gptx-generate: out of memory\n");
            free(out.text);
            return -1;
        }
    }
    if (!out.stopped) emit(&out, out.len); /* the rest, incomplete characters included */
    putchar('\n');
    fflush(stdout); /* before the speed line on stderr */
    gptx_generator_stats st;
    gptx_generator_stats_init(&st);
    if ((rc = gptx_generator_get_stats(gen, &st))) goto fail;
    char pf_time[32], pf_rate[96], dc_time[32], dc_rate[48];
    seconds_text(pf_time, sizeof pf_time, st.prefill_seconds);
    seconds_text(dc_time, sizeof dc_time, st.decode_seconds);
    rate_text(dc_rate, sizeof dc_rate, (double)st.decode_passes, st.decode_seconds);
    /* a prompt longer than the window: only its last window's positions ran */
    int64_t pf_run = prefill_run > 0 && prefill_run < st.prefill_tokens ? prefill_run
                                                                         : st.prefill_tokens;
    int n = 0;
    if (pf_run < st.prefill_tokens)
        n = snprintf(pf_rate, sizeof pf_rate, "the window's last %lld run, ", (long long)pf_run);
    rate_text(pf_rate + n, sizeof pf_rate - (size_t)n, (double)pf_run, st.prefill_seconds);
    fprintf(stderr,
            "gptx-generate: %s%zu prompt tokens, %zu generated%s; prefill %lld tokens in %s "
            "(%s, %lld passes); decode %lld tokens in %s (%s); window %d, %s, %lld slides\n",
            label, n_ids, made, out.stopped ? " (stopped at --stop)" : "",
            (long long)st.prefill_tokens, pf_time, pf_rate, (long long)st.prefill_passes,
            (long long)st.decode_passes, dc_time, dc_rate, st.window,
            st.use_cache ? "key/value cache" : "no cache", (long long)st.slides);
    free(out.text);
    return 0;
fail:
    free(out.text);
    fprintf(stderr, "gptx-generate: %s (%s)\n", prog_error_text(), gptx_status_name(rc));
    return -1;
}

/* --window and --keep against the model's context, once it is known: a
 * usage error naming the flag (exit 2), not the library's "opts.window"
 * (issue 34, item 9). 0, or -1 after the message. */
static int window_flags(const gen_opts *o, int context, const char *model) {
    char v[32], why[256];
    int window = o->window > 0 ? o->window : context;
    if (o->window > context) {
        snprintf(v, sizeof v, "%d", o->window);
        snprintf(why, sizeof why, "must be in [0, %d]: the context length of %s (0 = all of it)",
                 context, model);
        return prog_usage_error("gptx-generate", "--window", v, why);
    }
    if (o->keep >= window) {
        snprintf(v, sizeof v, "%d", o->keep);
        snprintf(why, sizeof why, "must be -1 (half the window) or in [0, %d]: below the window "
                 "of %d positions%s", window - 1, window,
                 o->window > 0 ? "" : ", the model's context length");
        return prog_usage_error("gptx-generate", "--keep", v, why);
    }
    return 0;
}

int main(int argc, char **argv) {
    gen_opts defaults = {
        .prompt = "Every effort moves you", .backend = "cpu",
        .encoder = prog_data_path("gpt2/encoder.json"), .vocab = prog_data_path("gpt2/vocab.bpe"),
        .max_tokens = 64, .num_samples = 1, .temperature = 0.8f, .top_k = 40, .top_p = 1.0f,
        .repetition_penalty = 1.0f, .penalty_window = GPTX_SAMPLER_PENALTY_WINDOW_DEFAULT,
        .seed = 1337, .keep = -1};
    gen_opts o = defaults;
    unsigned char given[sizeof rows / sizeof rows[0]] = {0};
    int parsed = prog_flags_parse(&cli, &o, given, argc, argv, &defaults);
    if (parsed) return parsed > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    if (!o.model) {
        prog_usage_error(cli.name, "--model", NULL, "is required");
        return PROG_EXIT_USAGE;
    }
    if (o.prompt_file && given[prog_flags_find(&cli, "--prompt") - rows]) {
        /* one would be dropped without a word (issue 34, item 8) */
        prog_usage_error(cli.name, "--prompt-file", o.prompt_file,
                         "not with --prompt: give the prompt one way");
        return PROG_EXIT_USAGE;
    }
    if (prog_threads_check(cli.name, o.threads) != 0) return PROG_EXIT_USAGE;

    const char *prompt = o.prompt;
    char *prompt_buf = NULL;
    if (o.prompt_file) {
        size_t len = 0;
        if (!(prompt_buf = prog_read_file("gptx-generate", "--prompt-file", o.prompt_file, &len)))
            return PROG_EXIT_FAILURE;
        if (strlen(prompt_buf) != len) {
            fprintf(stderr, "gptx-generate: --prompt-file %s holds a NUL byte\n", o.prompt_file);
            free(prompt_buf);
            return PROG_EXIT_FAILURE;
        }
        prompt = prompt_buf;
    }
    int status = PROG_EXIT_FAILURE, rc;
    gptx_context *ctx = NULL;
    gptx_model *model = NULL;
    gptx_tokenizer *tok = NULL;
    gptx_sampler *sampler = NULL;
    gptx_generator *gen = NULL;
    size_t plen = strlen(prompt), n_ids = 0;
    int32_t *ids = malloc((plen + 1) * sizeof *ids);
    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = !strcmp(o.backend, "cuda") ? GPTX_BACKEND_CUDA
                 : !strcmp(o.backend, "auto") ? GPTX_BACKEND_AUTO : GPTX_BACKEND_CPU;
    co.num_threads = o.threads;
    gptx_sampler_options so;
    gptx_sampler_options_init(&so);
    so.temperature = o.temperature;
    so.top_k = o.top_k;
    so.top_p = o.top_p;
    so.min_p = o.min_p;
    so.repetition_penalty = o.repetition_penalty;
    so.frequency_penalty = o.frequency_penalty;
    so.presence_penalty = o.presence_penalty;
    so.penalty_window = o.penalty_window;
    so.seed = o.seed;
    so.stream = o.stream;
    gptx_generator_options go;
    gptx_generator_options_init(&go);
    go.window = o.window;
    go.keep = o.keep;
    go.use_cache = !o.no_cache;
    const char *format = "";
    if (!ids) goto done;
    if ((rc = gptx_context_create(&ctx, &co))) goto fail;
    if (prog_model_open("gptx-generate", &model, ctx, o.model, &format) != GPTX_OK) goto done;
    gptx_model_config mc;
    gptx_model_config_init(&mc);
    if ((rc = gptx_model_get_config(model, &mc))) goto fail;
    if (window_flags(&o, mc.context_length, o.model) != 0) {
        status = PROG_EXIT_USAGE;
        goto done;
    }
    if ((rc = gptx_tokenizer_load_gpt2(&tok, o.encoder, o.vocab)) ||
        (rc = gptx_sampler_create(&sampler, &so)) ||
        (rc = gptx_generator_create(&gen, model, &go)) ||
        (rc = gptx_tokenizer_encode(tok, prompt, plen, o.special, ids, plen + 1, &n_ids)))
        goto fail;
    if (n_ids == 0) ids[n_ids++] = gptx_tokenizer_eot_token(tok);
    /* the format read (stderr: stdout is the text), as gptx-eval prints it */
    fprintf(stderr, "gptx-generate: model %s (%s; %d layers, width %d, %d heads, context %d, "
            "vocabulary %d)\n", o.model, format, mc.n_layer, mc.n_embd, mc.n_head,
            mc.context_length, mc.vocab_size);
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= mc.vocab_size) {
            fprintf(stderr, "gptx-generate: the prompt's token %zu is id %d (GPT-2 tokenizer), "
                            "outside the model's vocabulary of %d ids\n",
                    i, (int)ids[i], mc.vocab_size);
            goto done;
        }
    for (int i = 0; i < o.num_samples; i++) {
        uint64_t stream_id = (uint64_t)o.stream + (uint64_t)i;
        char label[96] = "";
        if (o.num_samples > 1) {
            printf("%s=== sample %d of %d (--seed %llu --stream %llu) ===\n", i ? "\n" : "",
                   i + 1, o.num_samples, o.seed, (unsigned long long)stream_id);
            snprintf(label, sizeof label, "sample %d: ", i + 1);
        }
        if (generate_one(&o, gen, sampler, tok, prompt, ids, n_ids, stream_id, label)) goto done;
    }
    status = PROG_EXIT_OK;
    goto done;
fail:
    fprintf(stderr, "gptx-generate: %s (%s)\n", prog_error_text(), gptx_status_name(rc));
done:
    free(ids);
    free(prompt_buf);
    gptx_generator_destroy(gen);
    gptx_sampler_destroy(sampler);
    gptx_tokenizer_destroy(tok);
    gptx_model_destroy(model);
    gptx_context_destroy(ctx);
    return status;
}

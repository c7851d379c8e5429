/*
 * gptx-generate: prompt -> continuation from a saved model
 * (gptx_model_save / gptx-train's checkpoint), with the library's sampler,
 * through a gptx_generator (key/value cache). The continuation is printed as
 * it is generated: whole UTF-8 characters only (a token may end inside one),
 * and nothing that could be the start of the --stop text. The speed goes to
 * stderr at the end, prefill and decode apart.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptx/gptx.h"
#include "prog_error.h"
#include "prog_data.h"
#include "prog_files.h"
#include "prog_model.h"
#include "prog_text.h"


static void usage(void) {
    printf("usage: gptx-generate --model PATH [options]\n"
           "  --model PATH        a gptx model or training checkpoint, a Hugging Face GPT-2\n"
           "                      folder (model.safetensors + config.json) or an llm.c .bin\n"
           "                      model (required)\n"
           "  --prompt TEXT       text to continue (default \"Every effort moves you\")\n"
           "  --prompt-file FILE  the prompt from a file; - = standard input\n"
           PROG_SPECIAL_TOKENS_HELP
           "  --max-tokens N      tokens to generate (default 64)\n"
           "  --temperature X     0 = greedy (default 0.8)\n"
           "  --top-k N           0 = off (default 40)\n"
           "  --top-p X           1 = off (default 1)\n"
           "  --seed N            sampler seed (default 1337)\n"
           "  --stop TEXT         stop before TEXT appears in the continuation\n"
           "  --ignore-eot        go on past the end-of-text token (default: stop there)\n"
           "  --no-cache          recompute the whole window for every token (the reference)\n"
           "  --window N          positions the cache holds, 0 = context length (default 0)\n"
           "  --keep N            tokens kept when the window is full, -1 = window / 2 (default)\n"
           "  --backend NAME      cpu (default), cuda or auto\n"
           "  --threads N         CPU threads, 0 = all cores (default 0)\n"
           "  --encoder FILE --vocab FILE   GPT-2 tokenizer files (default %s/gpt2/...)\n",
           prog_data_dir());
}

static int number(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (!end || *end || errno || !isfinite(x) || x < lo || x > hi) {
        fprintf(stderr, "gptx-generate: %s %s: expected a number in [%g, %g]\n", flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

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

int main(int argc, char **argv) {
    const char *model_path = NULL, *prompt = "Every effort moves you", *backend = "cpu";
    const char *encoder = prog_data_path("gpt2/encoder.json"), *vocab = prog_data_path("gpt2/vocab.bpe");
    double max_tokens = 64, temperature = 0.8, top_k = 40, top_p = 1.0, seed = 1337, threads = 0;
    double window = 0, keep = -1;
    const char *stop = NULL, *prompt_file = NULL;
    int ignore_eot = 0, no_cache = 0, special = 0;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) { usage(); return 0; }
        if (!strcmp(k, "--version")) { printf("gptx-generate %s\n", gptx_version()); return 0; }
        if (!strcmp(k, "--ignore-eot")) { ignore_eot = 1; continue; }
        if (!strcmp(k, "--no-cache")) { no_cache = 1; continue; }
        if (i + 1 >= argc) { /* the last word: a flag that needs a value, or none at all */
            const char *known[] = {"--model", "--prompt", "--prompt-file", "--backend", "--encoder",
                                   "--vocab", "--max-tokens", "--temperature", "--top-k", "--top-p",
                                   "--seed", "--threads", "--window", "--keep", "--stop",
                                   "--special-tokens"};
            int is_known = 0;
            for (size_t j = 0; j < sizeof known / sizeof known[0]; j++)
                is_known |= !strcmp(k, known[j]);
            fprintf(stderr, is_known ? "gptx-generate: %s needs a value (see --help)\n"
                                     : "gptx-generate: unknown option %s (see --help)\n", k);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(k, "--model")) model_path = v;
        else if (!strcmp(k, "--prompt")) prompt = v;
        else if (!strcmp(k, "--prompt-file")) prompt_file = v;
        else if (!strcmp(k, "--backend")) backend = v;
        else if (!strcmp(k, "--encoder")) encoder = v;
        else if (!strcmp(k, "--vocab")) vocab = v;
        else if (!strcmp(k, "--max-tokens")) rc = number(k, v, 0, 1e6, &max_tokens);
        else if (!strcmp(k, "--temperature")) rc = number(k, v, 0, 100, &temperature);
        else if (!strcmp(k, "--top-k")) rc = number(k, v, 0, 1e9, &top_k);
        else if (!strcmp(k, "--top-p")) rc = number(k, v, 1e-6, 1, &top_p);
        else if (!strcmp(k, "--seed")) rc = number(k, v, 0, 9007199254740992.0, &seed);
        else if (!strcmp(k, "--threads")) rc = number(k, v, 0, 4096, &threads);
        else if (!strcmp(k, "--window")) rc = number(k, v, 0, 1 << 24, &window);
        else if (!strcmp(k, "--keep")) rc = number(k, v, -1, 1 << 24, &keep);
        else if (!strcmp(k, "--stop")) stop = v;
        else if (!strcmp(k, "--special-tokens"))
            rc = prog_special_tokens_parse("gptx-generate", v, &special);
        else {
            fprintf(stderr, "gptx-generate: unknown option %s (see --help)\n", k);
            return 2;
        }
        if (rc) return 2;
    }
    if (!model_path) {
        fprintf(stderr, "gptx-generate: --model FILE is required (see --help)\n");
        return 2;
    }
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda") && strcmp(backend, "auto")) {
        fprintf(stderr, "gptx-generate: --backend %s: expected cpu, cuda or auto\n", backend);
        return 2;
    }

    char *prompt_buf = NULL;
    if (prompt_file) {
        size_t len = 0;
        if (!(prompt_buf = prog_read_file("gptx-generate", "--prompt-file", prompt_file, &len)))
            return 1;
        if (strlen(prompt_buf) != len) {
            fprintf(stderr, "gptx-generate: --prompt-file %s holds a NUL byte\n", prompt_file);
            free(prompt_buf);
            return 1;
        }
        prompt = prompt_buf;
    }
    int status = 1, rc;
    gptx_context *ctx = NULL;
    gptx_model *model = NULL;
    gptx_tokenizer *tok = NULL;
    gptx_sampler *sampler = NULL;
    gptx_generator *gen = NULL;
    size_t plen = strlen(prompt), n_ids = 0, n_new = (size_t)max_tokens;
    int32_t *ids = malloc((plen + 1) * sizeof *ids);
    stream out = {NULL, 0, 0, 0, stop, stop ? strlen(stop) : 0, 0};
    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = !strcmp(backend, "cuda") ? GPTX_BACKEND_CUDA
                 : !strcmp(backend, "auto") ? GPTX_BACKEND_AUTO : GPTX_BACKEND_CPU;
    co.num_threads = (int)threads;
    gptx_sampler_options so;
    gptx_sampler_options_init(&so);
    so.temperature = (float)temperature;
    so.top_k = (int)top_k;
    so.top_p = (float)top_p;
    so.seed = (uint64_t)seed;
    gptx_generator_options go;
    gptx_generator_options_init(&go);
    go.window = (int)window;
    go.keep = (int)keep;
    go.use_cache = !no_cache;
    const char *format = "";
    if (!ids) goto done;
    if ((rc = gptx_context_create(&ctx, &co))) goto fail;
    if (prog_model_open("gptx-generate", &model, ctx, model_path, &format) != GPTX_OK) goto done;
    if ((rc = gptx_tokenizer_load_gpt2(&tok, encoder, vocab)) ||
        (rc = gptx_sampler_create(&sampler, &so)) ||
        (rc = gptx_generator_create(&gen, model, &go)) ||
        (rc = gptx_tokenizer_encode(tok, prompt, plen, special, ids, plen + 1, &n_ids)))
        goto fail;
    int32_t eot = gptx_tokenizer_eot_token(tok);
    if (n_ids == 0) ids[n_ids++] = eot;
    gptx_model_config mc;
    gptx_model_config_init(&mc);
    if ((rc = gptx_model_get_config(model, &mc))) goto fail;
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= mc.vocab_size) {
            fprintf(stderr, "gptx-generate: the prompt's token %zu is id %d (GPT-2 tokenizer), "
                            "outside the model's vocabulary of %d ids\n",
                    i, (int)ids[i], mc.vocab_size);
            goto done;
        }
    fwrite(prompt, 1, plen, stdout);
    fflush(stdout);
    if ((rc = gptx_generator_feed(gen, ids, (int)n_ids))) goto fail;
    size_t made = 0;
    int64_t prefill_run = 0; /* positions the prefill ran: at most a window of the prompt */
    while (made < n_new && !out.stopped) {
        int32_t t;
        if ((rc = gptx_generator_next(gen, sampler, &t))) goto fail;
        if (made++ == 0) {
            gptx_generator_stats first;
            gptx_generator_stats_init(&first);
            if ((rc = gptx_generator_get_stats(gen, &first))) goto fail;
            prefill_run = first.positions;
        }
        if (t == eot && !ignore_eot) break;
        const char *bytes = NULL;
        size_t nb = 0;
        if ((rc = gptx_tokenizer_token_bytes(tok, t, &bytes, &nb))) goto fail;
        if (stream_add(&out, bytes, nb)) goto done;
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
            "gptx-generate: %zu prompt tokens, %zu generated%s; prefill %lld tokens in %s "
            "(%s, %lld passes); decode %lld tokens in %s (%s); window %d, %s, %lld slides\n",
            n_ids, made, out.stopped ? " (stopped at --stop)" : "", (long long)st.prefill_tokens,
            pf_time, pf_rate, (long long)st.prefill_passes, (long long)st.decode_passes, dc_time,
            dc_rate, st.window, st.use_cache ? "key/value cache" : "no cache",
            (long long)st.slides);
    status = 0;
    goto done;
fail:
    fprintf(stderr, "gptx-generate: %s (%s)\n", prog_error_text(), gptx_status_name(rc));
done:
    free(ids);
    free(out.text);
    free(prompt_buf);
    gptx_generator_destroy(gen);
    gptx_sampler_destroy(sampler);
    gptx_tokenizer_destroy(tok);
    gptx_model_destroy(model);
    gptx_context_destroy(ctx);
    return status;
}

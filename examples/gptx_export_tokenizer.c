/* gptx_export_tokenizer.h */
#include "gptx_export_tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_error.h"
#include "prog_files.h"

#define LLMC_TOKENIZER_MAGIC 20240328u
#define LLMC_TOKENIZER_VERSION 2u /* version 2 records the end-of-text id */

/* n bytes as a JSON string (the end-of-text token's "<|endoftext|>"). */
static void put_json_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

int export_hf_tokenizer_config(const char *prog, const gptx_tokenizer *tok, int T,
                               const char *dir) {
    const char *eot = NULL;
    size_t n = 0;
    int id = gptx_tokenizer_eot_token(tok);
    if (gptx_tokenizer_token_bytes(tok, id, &eot, &n) != GPTX_OK) {
        fprintf(stderr, "%s: %s\n", prog, prog_error_text());
        return -1;
    }
    size_t len = strlen(dir) + 32;
    char *path = malloc(len);
    prog_out o;
    if (path) snprintf(path, len, "%s/tokenizer_config.json", dir);
    if (!path || prog_out_open(&o, prog, path) != 0) {
        free(path);
        return -1;
    }
    /* what transformers' GPT-2 tokenizer folders hold, model_max_length the
     * model's context (AutoTokenizer warns and truncates by it) */
    fprintf(o.f, "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %d,\n", T);
    const char *keys[] = {"bos_token", "eos_token", "unk_token"};
    for (int k = 0; k < 3; k++) {
        fprintf(o.f, "  \"%s\": ", keys[k]);
        put_json_string(o.f, eot, n);
        fputs(",\n", o.f);
    }
    fprintf(o.f, "  \"add_prefix_space\": false,\n  \"add_bos_token\": false,\n"
                 "  \"clean_up_tokenization_spaces\": false,\n  \"errors\": \"replace\",\n"
                 "  \"added_tokens_decoder\": {\n    \"%d\": {\"content\": ", id);
    put_json_string(o.f, eot, n);
    fputs(", \"lstrip\": false, \"normalized\": true, \"rstrip\": false, "
          "\"single_word\": false, \"special\": true}\n  }\n}\n", o.f);
    int rc = prog_out_save(&o, prog, "the tokenizer config", path);
    free(path);
    return rc;
}

/* llm.c's header: 256 uint32 (magic, version, vocab size, end-of-text id),
 * then each token as a length byte and its bytes. */
static int llmc_tokenizer_write(const char *prog, const gptx_tokenizer *tok, FILE *f) {
    uint32_t header[256] = {LLMC_TOKENIZER_MAGIC, LLMC_TOKENIZER_VERSION,
                            (uint32_t)gptx_tokenizer_vocab_size(tok),
                            (uint32_t)gptx_tokenizer_eot_token(tok)};
    fwrite(header, sizeof header, 1, f); /* little-endian hosts, as llm.c's reader */
    for (int32_t id = 0; id < gptx_tokenizer_vocab_size(tok); id++) {
        const char *b = NULL;
        size_t n = 0;
        if (gptx_tokenizer_token_bytes(tok, id, &b, &n) != GPTX_OK) {
            fprintf(stderr, "%s: %s\n", prog, prog_error_text());
            return -1;
        }
        if (n < 1 || n > 255) { /* one length byte, and llm.c asserts length > 0 */
            fprintf(stderr, "%s: token %d is %zu bytes; llm.c's tokenizer file holds 1 to 255\n",
                    prog, (int)id, n);
            return -1;
        }
        fputc((int)n, f);
        fwrite(b, 1, n, f);
    }
    return 0;
}

int export_llmc_tokenizer(const char *prog, const gptx_tokenizer *tok, const char *model_path,
                          char **written) {
    const char *slash = strrchr(model_path, '/');
    size_t len = strlen(model_path) + 32;
    char *path = malloc(len);
    *written = NULL;
    if (!path) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return -1;
    }
    if (slash) snprintf(path, len, "%.*s/gpt2_tokenizer.bin", (int)(slash - model_path), model_path);
    else snprintf(path, len, "gpt2_tokenizer.bin");
    prog_out o;
    int rc = prog_out_open(&o, prog, path);
    if (rc == 0 && llmc_tokenizer_write(prog, tok, o.f) != 0) {
        fclose(o.f);
        free(o.buf);
        rc = -1;
    } else if (rc == 0) {
        rc = prog_out_save(&o, prog, "the llm.c tokenizer", path);
    }
    if (rc == 0) *written = path;
    else free(path);
    return rc;
}

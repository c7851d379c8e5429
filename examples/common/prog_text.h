/* The one rule every program follows for "<|endoftext|>" in a text. */
#ifndef GPTX_PROG_TEXT_H
#define GPTX_PROG_TEXT_H

/* --special-tokens text|allow, the same flag in gptx-train (--text,
 * --prompt), gptx-eval (--text), gptx-tokenize (--input) and gptx-generate
 * (--prompt, --prompt-file):
 *   text  (default): "<|endoftext|>" is 13 characters like any others
 *                    (tiktoken's encode_ordinary): a text or a prompt
 *                    cannot smuggle in a control token;
 *   allow:           each occurrence is the end-of-text token (id 50256),
 *                    for texts whose documents are separated that way.
 * So one text gives the same tokens in every program (docs/tokenizer.md). */
#define PROG_SPECIAL_TOKENS_CHOICES "text|allow"
#define PROG_SPECIAL_TOKENS_HELP                                                            \
    "  --special-tokens R  how \"<|endoftext|>\" in the text is read: text (default: as\n" \
    "                      its 13 characters) or allow (as the end-of-text token 50256)\n"

/* *allow = 0 for "text", 1 for "allow"; 0, or -1 after printing
 * "<prog>: --special-tokens <value>: expected text or allow". */
int prog_special_tokens_parse(const char *prog, const char *value, int *allow);

/* "text" or "allow", for what a program prints. */
const char *prog_special_tokens_name(int allow);

#endif

#include "train_options.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptx/gptx.h"
#include "prog_data.h"
#include "prog_presets.h"


static void usage(void) {
    printf(
        "usage: gptx-train [options]\n"
        "Trains a GPT-2-style model. With no options: a tiny model on the bundled\n"
        "the-verdict.txt on the CPU, then a sample continuation of the prompt.\n"
        "\n"
        "data:\n"
        "  --text FILE            text to train on, GPT-2 BPE tokens (default: the preset's, in\n"
        "                         %s)\n"
        "  --val-fraction X       tail of the text held out for validation (default 0.1)\n"
        "  --train-shards A,B     llm.c token shards to train on instead of --text\n"
        "  --val-shards A,B       llm.c token shards for validation (with --train-shards)\n"
        "  --encoder FILE         GPT-2 encoder.json (default %s/gpt2/encoder.json)\n"
        "  --vocab FILE           GPT-2 vocab.bpe (default %s/gpt2/vocab.bpe)\n"
        "  --special-tokens R     how \"<|endoftext|>\" in --text and --prompt is read: text\n"
        "                         (default: as its 13 characters) or allow (as the end-of-text\n"
        "                         token 50256); the same flag in gptx-eval, -tokenize, -generate\n"
        "model:\n"
        "  --preset NAME          a model and its recipe (default tiny; the table below);\n"
        "                         flags given with it override its values\n"
        "  --layers N --heads N --width N   override the preset's shape\n"
        "  --context N            tokens per row T, also the context length (the preset's)\n"
        "  --vocab-size N         real vocabulary (default 50257, the tokenizer's)\n"
        "  --padded-vocab N       rows of wte/lm_head, masked in the softmax (default 50304)\n"
        "optimization:\n"
        "  --batch N              rows per micro-batch B (the preset's)\n"
        "  --grad-accum N         micro-batches per optimizer step (default 1)\n"
        "  --steps N              optimizer steps (the preset's)\n"
        "  --epochs N             instead of --steps: passes over the training windows\n"
        "  --lr X                 peak learning rate (the preset's)\n"
        "  --lr-schedule NAME     cosine (default), linear or constant after warm-up\n"
        "  --warmup N             linear warm-up steps (the preset's)\n"
        "  --min-lr-frac X        final lr as a fraction of the peak (default 0.1)\n"
        "  --weight-decay X       AdamW decay on weight matrices (default 0.1)\n"
        "  --beta1 X --beta2 X    AdamW betas (default 0.9, 0.95)\n"
        "  --grad-clip X          global gradient-norm clip, 0 = off (default 1.0)\n"
        "evaluation and output:\n"
        "  --eval-every N         validation interval in steps, 0 = only after the last (default 50)\n"
        "  --eval-batches N       validation batches per evaluation (default 8; data parallel:\n"
        "                         global batches, each rank evaluating its share)\n"
        "  --sample-every N       sample interval in steps, 0 = only at the end (default 0)\n"
        "  --sample-tokens N      tokens per sample (default 48)\n"
        "  --prompt TEXT          sample prompt (default \"Every effort moves you\")\n"
        "  --temperature X        sampling temperature, 0 = greedy (default 0.8)\n"
        "  --top-k N              sample from the k most likely tokens, 0 = off (default 40)\n"
        "  --top-p X              nucleus sampling mass, 1 = off (default 1)\n"
        "  --log-every N          plain log line interval when stdout is not a terminal (default 10)\n"
        "  --out-dir DIR          metrics.jsonl, loss.svg, checkpoints and, at the end, the\n"
        "                         trained model model.safetensors (default out)\n"
        "  --checkpoint-every N   write DIR/checkpoint.safetensors every N steps, 0 = only at the end\n"
        "                         when N was set; -1 = never (default -1)\n"
        "  --save-best 0|1        1 = write DIR/best.safetensors (the model) at each new best\n"
        "                         validation loss (default 0)\n"
        "  --overwrite            a new run in an --out-dir that holds another run's files\n"
        "                         (metrics.jsonl, checkpoint.safetensors, model.safetensors,\n"
        "                         best.safetensors, loss.svg) removes them first; without it\n"
        "                         the run is refused, naming them. With --resume: when the\n"
        "                         folder's metrics or checkpoint are another run's, they go\n"
        "                         and the records start anew at the resumed step\n"
        "  --resume FILE          continue a run from its checkpoint: the file holds the run's\n"
        "                         flags, so none need repeating; only --steps, --epochs, the\n"
        "                         evaluation/sampling/logging/checkpoint flags, --out-dir,\n"
        "                         --threads, --comm-timeout and the data paths (the data itself\n"
        "                         must be the same: it is checked by its hash) may change\n"
        "  --init-from PATH       fine-tune: start from this model (a gptx model or checkpoint,\n"
        "                         a Hugging Face GPT-2 folder or an llm.c .bin); its shape\n"
        "                         replaces --preset/--layers/--heads/--width, --context may\n"
        "                         only shorten its context; fresh optimizer state\n"
        "machine:\n"
        "  --backend NAME         cpu (default), cuda or auto\n"
        "  --precision NAME       default (the backend's: cpu fp32, cuda bf16), fp32, tf32, bf16\n"
        "                         (bf16 activations, fp32 master weights and moments) or bf16_pure\n"
        "                         (CUDA only but fp32; docs/cuda.md); recorded in checkpoints\n"
        "  --stochastic-rounding B  1 = bf16_pure rounds updates stochastically (default 0)\n"
        "  --threads N            CPU threads, 0 = all cores (default 0; data parallel: the\n"
        "                         node's cores divided among its ranks)\n"
        "  --seed N               initialisation, data order and sampling seed (default 1337)\n"
        "data parallel (started by mpirun -np N, or torchrun-style RANK/WORLD_SIZE/... with\n"
        "CUDA; --batch is per rank, rank 0 prints and writes; see docs/distributed.md):\n"
        "  --comm-timeout S       a collective still waiting after S seconds fails the run\n"
        "                         (a rank died or hangs); 0 = wait forever (default 600)\n"
        "  --zero1 0|1            1 = ZeRO-1: AdamW moments sharded over the ranks (about 1/N\n"
        "                         of the optimizer memory each), reduce-scatter + all-gather\n"
        "                         instead of the gradient average (default 0)\n"
        "  --overlap MIB          > 0: start each bucket of about MIB MiB of final gradients\n"
        "                         reducing while backward still runs; 0 = average after\n"
        "                         backward (default 0; not with --zero1)\n"
        "presets (parameters with the vocabulary padded to 50304):\n",
        prog_data_dir(), prog_data_dir(), prog_data_dir());
    prog_presets_print(stdout, "  ");
}


static int bad(const char *flag, const char *value, const char *why) {
    fprintf(stderr, "gptx-train: %s%s%s: %s (see --help)\n", flag, value[0] ? " " : "", value, why);
    return -1;
}

/* ---- the flag table: parsing, formatting and the resume rules ----------- */

typedef enum { K_STR, K_CHOICE, K_PRECISION, K_INT, K_FLOAT, K_SEED, K_SCHEDULE, K_SWITCH } flag_kind;

/* What a flag may do on --resume. */
typedef enum {
    KEEP,   /* saved; a different value on the command line is refused */
    CHANGE, /* saved; the command line's value wins */
    NOSAVE  /* not part of the saved configuration */
} resume_rule;

typedef struct flag {
    const char *name;
    flag_kind kind;
    size_t offset;
    double lo, hi;
    const char *choices; /* K_CHOICE: "a|b|c" */
    resume_rule resume;
} flag;

#define F(name, kind, field, lo, hi, choices, rule) \
    {name, kind, offsetof(train_options, field), lo, hi, choices, rule}
static const flag flags[] = {
    F("--text", K_STR, text, 0, 0, NULL, CHANGE),
    F("--train-shards", K_STR, train_shards, 0, 0, NULL, CHANGE),
    F("--val-shards", K_STR, val_shards, 0, 0, NULL, CHANGE),
    F("--val-fraction", K_FLOAT, val_fraction, 0.001, 0.9, NULL, KEEP),
    F("--encoder", K_STR, encoder, 0, 0, NULL, CHANGE),
    F("--vocab", K_STR, vocab, 0, 0, NULL, CHANGE),
    F("--special-tokens", K_CHOICE, special_tokens, 0, 0, "text|allow", KEEP),
    F("--preset", K_STR, preset, 0, 0, NULL, NOSAVE),
    F("--init-from", K_STR, init_from, 0, 0, NULL, NOSAVE),
    F("--layers", K_INT, layers, 1, 1e6, NULL, KEEP),
    F("--heads", K_INT, heads, 1, 1e6, NULL, KEEP),
    F("--width", K_INT, width, 1, 1e6, NULL, KEEP),
    F("--context", K_INT, context, 2, 1e9, NULL, KEEP),
    F("--vocab-size", K_INT, vocab_size, 1, 1e9, NULL, KEEP),
    F("--padded-vocab", K_INT, padded_vocab, 1, 1e9, NULL, KEEP),
    F("--batch", K_INT, batch, 1, 1e9, NULL, KEEP),
    F("--grad-accum", K_INT, grad_accum, 1, 1e9, NULL, KEEP),
    F("--steps", K_INT, steps, 1, 1e9, NULL, CHANGE),
    F("--epochs", K_INT, epochs, 0, 1e9, NULL, CHANGE),
    F("--warmup", K_INT, warmup, 0, 1e9, NULL, KEEP),
    F("--lr", K_FLOAT, lr, 0.0, 10.0, NULL, KEEP),
    F("--lr-schedule", K_SCHEDULE, schedule, 0, 0, "cosine|linear|constant", KEEP),
    F("--min-lr-frac", K_FLOAT, min_lr_frac, 0.0, 1.0, NULL, KEEP),
    F("--weight-decay", K_FLOAT, weight_decay, 0.0, 10.0, NULL, KEEP),
    F("--beta1", K_FLOAT, beta1, 0.0, 0.999999, NULL, KEEP),
    F("--beta2", K_FLOAT, beta2, 0.0, 0.999999, NULL, KEEP),
    F("--grad-clip", K_FLOAT, grad_clip, 0.0, 1e9, NULL, KEEP),
    F("--eval-every", K_INT, eval_every, 0, 1e9, NULL, CHANGE),
    F("--eval-batches", K_INT, eval_batches, 1, 1e9, NULL, CHANGE),
    F("--sample-every", K_INT, sample_every, 0, 1e9, NULL, CHANGE),
    F("--sample-tokens", K_INT, sample_tokens, 0, 1e9, NULL, CHANGE),
    F("--prompt", K_STR, prompt, 0, 0, NULL, CHANGE),
    F("--temperature", K_FLOAT, temperature, 0.0, 100.0, NULL, CHANGE),
    F("--top-k", K_INT, top_k, 0, 1e9, NULL, CHANGE),
    F("--top-p", K_FLOAT, top_p, 1e-6, 1.0, NULL, CHANGE),
    F("--log-every", K_INT, log_every, 1, 1e9, NULL, CHANGE),
    F("--out-dir", K_STR, out_dir, 0, 0, NULL, CHANGE),
    F("--checkpoint-every", K_INT, checkpoint_every, -1, 1e9, NULL, CHANGE),
    F("--keep-checkpoints", K_INT, keep_checkpoints, 0, 1e9, NULL, CHANGE),
    F("--save-best", K_INT, save_best, 0, 1, NULL, CHANGE),
    F("--resume", K_STR, resume, 0, 0, NULL, NOSAVE),
    F("--overwrite", K_SWITCH, overwrite, 0, 1, NULL, NOSAVE), /* takes no value */
    F("--backend", K_CHOICE, backend, 0, 0, "cpu|cuda|auto", KEEP),
    F("--precision", K_PRECISION, precision, 0, 0, NULL, KEEP),
    F("--stochastic-rounding", K_INT, stochastic_rounding, 0, 1, NULL, KEEP),
    F("--threads", K_INT, threads, 0, 1e6, NULL, CHANGE),
    F("--comm-timeout", K_FLOAT, comm_timeout, 0.0, 1e9, NULL, CHANGE),
    F("--zero1", K_INT, zero1, 0, 1, NULL, KEEP),
    F("--overlap", K_FLOAT, overlap_mib, 0.0, 4096.0, NULL, KEEP),
    F("--seed", K_SEED, seed, 0, 0, NULL, KEEP),
};
#undef F
enum { N_FLAGS = sizeof flags / sizeof flags[0] };
_Static_assert(N_FLAGS <= sizeof(((train_options *)0)->given), "train_options.given is too small");

static const flag *find_flag(const char *name) {
    for (int i = 0; i < N_FLAGS; i++)
        if (!strcmp(flags[i].name, name)) return &flags[i];
    return NULL;
}

#define FIELD(o, f, type) ((type *)((char *)(o) + (f)->offset))
#define CFIELD(o, f, type) ((const type *)((const char *)(o) + (f)->offset))

/* Whether v is one of "a|b|c"; *index gets its position. */
static int in_choices(const char *choices, const char *v, int *index) {
    size_t n = strlen(v);
    int i = 0;
    for (const char *c = choices; *c; i++) {
        const char *end = strchr(c, '|');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (len == n && !strncmp(c, v, n)) {
            *index = i;
            return 1;
        }
        c += len + (end != NULL);
    }
    return 0;
}

static int set_flag(train_options *o, const flag *f, const char *v) {
    char *end = NULL, why[128];
    errno = 0;
    switch (f->kind) {
    case K_STR:
        *FIELD(o, f, const char *) = v;
        return 0;
    case K_CHOICE:
    case K_SCHEDULE: { /* one of the names; a schedule is stored as its index */
        int idx;
        if (!in_choices(f->choices, v, &idx)) {
            snprintf(why, sizeof why, "expected one of %s", f->choices);
            return bad(f->name, v, why);
        }
        if (f->kind == K_SCHEDULE) *FIELD(o, f, lr_schedule) = (lr_schedule)idx;
        else *FIELD(o, f, const char *) = v;
        return 0;
    }
    case K_PRECISION:
        if (gptx_precision_from_name(v) < 0) {
            gptx_clear_error();
            return bad(f->name, v, "expected default, fp32, tf32, bf16 or bf16_pure");
        }
        *FIELD(o, f, const char *) = v;
        return 0;
    case K_SWITCH: /* a saved "1" or "0" (switches are never saved: for completeness) */
    case K_INT: {
        long x = strtol(v, &end, 10);
        if (!end || end == v || *end || errno || x < f->lo || x > f->hi) {
            if (f->hi <= 1) snprintf(why, sizeof why, "expected %.0f or %.0f", f->lo, f->hi);
            else snprintf(why, sizeof why, "expected an integer from %.0f to %.0f", f->lo, f->hi);
            return bad(f->name, v, why);
        }
        *FIELD(o, f, int) = (int)x;
        return 0;
    }
    case K_FLOAT: {
        double x = strtod(v, &end);
        if (!end || end == v || *end || errno || !isfinite(x) || x < f->lo || x > f->hi) {
            snprintf(why, sizeof why, "expected a number in [%g, %g]", f->lo, f->hi);
            return bad(f->name, v, why);
        }
        *FIELD(o, f, float) = (float)x;
        return 0;
    }
    case K_SEED: {
        unsigned long long x = strtoull(v, &end, 10);
        if (!end || end == v || *end || errno || v[0] == '-')
            return bad(f->name, v, "expected an integer >= 0");
        *FIELD(o, f, uint64_t) = x;
        return 0;
    }
    }
    return -1;
}

/* The flag's value as text (NULL for an unset string). */
static const char *flag_value(const train_options *o, const flag *f, char *buf, size_t cap) {
    switch (f->kind) {
    case K_STR: case K_CHOICE: case K_PRECISION:
        return *CFIELD(o, f, char *);
    case K_SCHEDULE: {
        lr_schedule s = *CFIELD(o, f, lr_schedule);
        return s == SCHEDULE_COSINE ? "cosine" : s == SCHEDULE_LINEAR ? "linear" : "constant";
    }
    case K_INT: case K_SWITCH: snprintf(buf, cap, "%d", *CFIELD(o, f, int)); return buf;
    case K_FLOAT: { /* the shortest text that reads back as the same float */
        float x = *CFIELD(o, f, float);
        for (int digits = 6; digits <= 9; digits++) {
            snprintf(buf, cap, "%.*g", digits, (double)x);
            if (strtof(buf, NULL) == x) break;
        }
        return buf;
    }
    case K_SEED: snprintf(buf, cap, "%llu", (unsigned long long)*CFIELD(o, f, uint64_t)); return buf;
    }
    return NULL;
}

static void defaults(train_options *o) {
    *o = (train_options){
        .val_fraction = 0.1f,
        .encoder = prog_data_path("gpt2/encoder.json"), .vocab = prog_data_path("gpt2/vocab.bpe"),
        .special_tokens = "text",
        .preset = "tiny", .vocab_size = 50257, .padded_vocab = 50304,
        .grad_accum = 1, .min_lr_frac = 0.1f, .weight_decay = 0.1f, .grad_clip = 1.0f,
        .beta1 = 0.9f, .beta2 = 0.95f, .schedule = SCHEDULE_COSINE, .eval_every = 50,
        .eval_batches = 8, .sample_tokens = 48, .top_k = 40, .log_every = 10,
        .temperature = 0.8f, .top_p = 1.0f, .prompt = "Every effort moves you",
        .out_dir = "out", .checkpoint_every = -1, .backend = "cpu", .precision = "default",
        .threads = 0, .seed = 1337, .comm_timeout = 600};
}

int train_options_allow_special(const train_options *o) {
    return !strcmp(o->special_tokens, "allow");
}

int train_options_given(const train_options *o, const char *name) {
    const flag *f = find_flag(name);
    return f && o->given[f - flags];
}

/* Fills what the command line did not give from the preset; with an
 * explicit --preset its values count as given. */
static int apply_preset(train_options *o) {
    const prog_preset *p = prog_preset_find(o->preset);
    if (!p) {
        char why[160];
        snprintf(why, sizeof why, "expected %s", prog_preset_names());
        return bad("--preset", o->preset, why);
    }
    int explicit_preset = train_options_given(o, "--preset");
    struct { const char *name; int value; } ints[] = {
        {"--layers", p->n_layer}, {"--heads", p->n_head}, {"--width", p->n_embd},
        {"--context", p->context}, {"--batch", p->batch}, {"--steps", p->steps},
        {"--warmup", p->warmup}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const flag *f = find_flag(ints[i].name);
        if (o->given[f - flags]) continue;
        *FIELD(o, f, int) = ints[i].value;
        o->given[f - flags] = (unsigned char)explicit_preset;
    }
    const flag *lr = find_flag("--lr"), *text = find_flag("--text");
    if (!o->given[lr - flags]) {
        o->lr = p->lr;
        o->given[lr - flags] = (unsigned char)explicit_preset;
    }
    if (!o->given[text - flags]) {
        o->text = prog_data_path(p->text);
        o->given[text - flags] = (unsigned char)explicit_preset;
    }
    return 0;
}

int train_options_parse(train_options *o, int argc, char **argv) {
    defaults(o);
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            usage();
            return 1;
        }
        if (!strcmp(k, "--version")) {
            printf("gptx-train %s\n", gptx_version());
            return 1;
        }
        if (strncmp(k, "--", 2) != 0) return bad(k, "", "unexpected argument");
        const flag *f = find_flag(k);
        if (!f) return bad(k, "", "unknown option");
        if (f->kind == K_SWITCH) { /* present means on */
            *FIELD(o, f, int) = 1;
            o->given[f - flags] = 1;
            continue;
        }
        if (i + 1 >= argc) return bad(k, "", "needs a value");
        if (set_flag(o, f, argv[++i])) return -1;
        o->given[f - flags] = 1;
    }
    /* before the preset fills --text: only a --text the user gave counts */
    if (o->train_shards && train_options_given(o, "--text"))
        return bad("--text", o->text, "not with --train-shards (one data source: the text is "
                                      "cut into train and validation itself, shards take "
                                      "--val-shards)");
    if (o->epochs && train_options_given(o, "--steps"))
        return bad("--epochs", "", "give --steps or --epochs, not both");
    if (apply_preset(o)) return -1;
    if (o->zero1 && o->overlap_mib > 0)
        return bad("--overlap", "", "not with --zero1 (its step reduces the gradients itself)");
    if (o->val_shards && !o->train_shards)
        return bad("--val-shards", o->val_shards, "needs --train-shards");
    return 0;
}

/* ---- the saved configuration ---------------------------------------------- */

static size_t put_escaped(char *buf, size_t cap, size_t at, const char *s) {
    for (; *s; s++) {
        const char *rep = *s == '\\' ? "\\\\" : *s == '\n' ? "\\n" : NULL;
        for (const char *r = rep ? rep : s; r < (rep ? rep + 2 : s + 1); r++, at++)
            if (at + 1 < cap) buf[at] = *r;
    }
    return at;
}

size_t train_options_format(const train_options *o, char *buf, size_t cap) {
    size_t at = 0;
    char num[64];
    for (int i = 0; i < N_FLAGS; i++) {
        const flag *f = &flags[i];
        const char *v = f->resume == NOSAVE ? NULL : flag_value(o, f, num, sizeof num);
        if (!v) continue;
        at = put_escaped(buf, cap, at, f->name);
        if (at + 1 < cap) buf[at] = ' ';
        at = put_escaped(buf, cap, at + 1, v);
        if (at + 1 < cap) buf[at] = '\n';
        at++;
    }
    if (cap) buf[at < cap ? at : cap - 1] = '\0';
    return at;
}

/* Unescapes s in place up to the end of its line; returns the next line. */
static char *cut_line(char *s) {
    char *w = s, *r = s;
    for (; *r && *r != '\n'; r++) {
        if (*r == '\\' && (r[1] == '\\' || r[1] == 'n')) {
            *w++ = r[1] == 'n' ? '\n' : '\\';
            r++;
        } else {
            *w++ = *r;
        }
    }
    char *next = *r ? r + 1 : r;
    *w = '\0';
    return next;
}

int train_saved_get(const char *saved, const char *key, char *out, size_t cap) {
    size_t n = strlen(key);
    for (const char *line = saved; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > n && !strncmp(line, key, n) && line[n] == ' ' && cap > 0) {
            size_t m = len - n - 1 < cap - 1 ? len - n - 1 : cap - 1;
            char *tmp = strndup(line + n + 1, m);
            if (!tmp) return -1;
            cut_line(tmp);
            snprintf(out, cap, "%s", tmp);
            free(tmp);
            return 0;
        }
        line += len + (end != NULL);
    }
    return -1;
}

int train_options_resume(train_options *run, const train_options *cli, char *saved,
                         const char *file) {
    defaults(run);
    run->preset = "saved";
    /* a record without the flag comes from a gptx-train that read the tag in
     * --text as the end-of-text token: its run goes on reading it so */
    run->special_tokens = "allow";
    for (char *line = saved; *line;) {
        char *next = cut_line(line);
        char *space = strchr(line, ' ');
        if (line[0] == '-' && space) {
            *space = '\0';
            const flag *f = find_flag(line);
            if (!f || f->resume == NOSAVE) {
                fprintf(stderr, "gptx-train: --resume %s: the saved configuration has %s, which "
                                "this gptx-train does not know\n", file, line);
                return -1;
            }
            if (set_flag(run, f, space + 1)) {
                fprintf(stderr, "gptx-train: --resume %s: the saved configuration's %s is not "
                                "valid (above)\n", file, line);
                return -1;
            }
        }
        line = next;
    }
    char a[64], b[64];
    for (int i = 0; i < N_FLAGS; i++) {
        const flag *f = &flags[i];
        if (!cli->given[i] || f->resume == NOSAVE) continue;
        const char *mine = flag_value(cli, f, a, sizeof a), *theirs = flag_value(run, f, b, sizeof b);
        if (f->resume == CHANGE) {
            memcpy((char *)run + f->offset, (const char *)cli + f->offset,
                   f->kind == K_SEED ? sizeof(uint64_t) : f->kind == K_INT ? sizeof(int)
                   : f->kind == K_FLOAT ? sizeof(float) : f->kind == K_SCHEDULE ? sizeof(lr_schedule)
                   : sizeof(const char *));
            if (!strcmp(f->name, "--steps")) run->epochs = 0; /* the new length wins */
            if (!strcmp(f->name, "--epochs") && cli->epochs) run->steps = 0;
            continue;
        }
        if (!mine || !theirs || strcmp(mine, theirs) != 0) {
            fprintf(stderr,
                    "gptx-train: --resume %s: %s %s differs from the run's %s; a resumed run keeps "
                    "the configuration it started with (only --steps, --epochs, the evaluation, "
                    "sampling, logging and checkpoint flags, --out-dir, --threads, --comm-timeout "
                    "and the data paths may change); start a new run with --init-from %s to "
                    "train its model differently\n",
                    file, f->name, mine ? mine : "(none)", theirs ? theirs : "(none)", file);
            return -1;
        }
    }
    if (run->train_shards && train_options_given(cli, "--text")) {
        fprintf(stderr, "gptx-train: --resume %s: --text %s: the run trains on --train-shards "
                        "%s, not on a text\n", file, cli->text, run->train_shards);
        return -1;
    }
    run->resume = cli->resume;
    run->overwrite = cli->overwrite;
    memcpy(run->given, cli->given, sizeof run->given);
    return 0;
}

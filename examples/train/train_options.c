#include "train_options.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptx/gptx.h"
#include "prog_data.h"
#include "prog_flags.h"
#include "prog_presets.h"


/* ---- the flag table: parsing, --help, formatting and the resume rules ------ */

/* What a flag may do on --resume (prog_flag.tag). */
typedef enum {
    KEEP,   /* saved; a different value on the command line is refused */
    CHANGE, /* saved; the command line's value wins */
    NOSAVE  /* not part of the saved configuration */
} resume_rule;

#define STR PROG_FLAG_STR
#define CHOICE PROG_FLAG_CHOICE
#define INDEX PROG_FLAG_INDEX
#define INT PROG_FLAG_INT
#define FLOAT PROG_FLAG_FLOAT
#define U64 PROG_FLAG_U64
#define SWITCH PROG_FLAG_SWITCH
#define ND PROG_FLAG_NO_DEFAULT
#define OPEN PROG_FLAG_OPEN_LO
#define ROW(field, name, kind, lo, hi, choices, arg, help, bits, rule) \
    PROG_FLAG_ROW(train_options, field, name, kind, lo, hi, choices, arg, help, bits, rule)
/* one row per line (merges stay easy); the help's own lines split at \n */
static const prog_flag flags[] = {
    PROG_SECTION("data:"),
    ROW(text, "--text", STR, 0, 0, NULL, "LIST", "text to train on, GPT-2 BPE tokens (default: the preset's bundled text):\nfiles, globs, folders (their regular files, not recursive),\ncomma-separated, sorted by path; each document after <|endoftext|>", ND, CHANGE),
    ROW(doc_separator, "--doc-separator", STR, 0, 0, NULL, "S", "a document also ends at each S in a --text file, S dropped\n(escapes \\n \\t \\r \\\\ \\xHH; default: a document is a file)", ND, KEEP),
    ROW(val_fraction, "--val-fraction", FLOAT, 0.001, 0.9, NULL, NULL, "share held out for validation: whole documents from the end\nwhen there are several, else the text's tail", 0, KEEP),
    ROW(train_shards, "--train-shards", STR, 0, 0, NULL, "LIST", "llm.c token shards to train on instead of --text (files,\nglobs such as 'dir/*_train_*.bin', folders; sorted)", ND, CHANGE),
    ROW(val_shards, "--val-shards", STR, 0, 0, NULL, "LIST", "llm.c token shards for validation (with --train-shards)", ND, CHANGE),
    ROW(encoder, "--encoder", STR, 0, 0, NULL, "FILE", "GPT-2 encoder.json (default: the bundled gpt2/encoder.json)", ND, CHANGE),
    ROW(vocab, "--vocab", STR, 0, 0, NULL, "FILE", "GPT-2 vocab.bpe (default: the bundled gpt2/vocab.bpe)", ND, CHANGE),
    ROW(special_tokens, "--special-tokens", CHOICE, 0, 0, "text|allow", "R", "how \"<|endoftext|>\" in --text and --prompt is read: text (as its 13\ncharacters) or allow (as the end-of-text token 50256); the same flag in\ngptx-eval, -tokenize, -generate", 0, KEEP),
    PROG_SECTION("model:"),
    ROW(preset, "--preset", STR, 0, 0, NULL, "NAME", "a model and its recipe (the table below); flags given with it\noverride its values", 0, NOSAVE),
    ROW(layers, "--layers", INT, 1, 1e6, NULL, NULL, "override the preset's number of layers", ND, KEEP),
    ROW(heads, "--heads", INT, 1, 1e6, NULL, NULL, "override the preset's attention heads", ND, KEEP),
    ROW(width, "--width", INT, 1, 1e6, NULL, NULL, "override the preset's width (embedding size)", ND, KEEP),
    ROW(context, "--context", INT, 2, 1e9, NULL, NULL, "tokens per row T, also the context length (the preset's)", ND, KEEP),
    ROW(vocab_size, "--vocab-size", INT, 1, 1e9, NULL, NULL, "real vocabulary (the tokenizer's)", 0, KEEP),
    ROW(padded_vocab, "--padded-vocab", INT, 1, 1e9, NULL, NULL, "rows of wte/lm_head, masked in the softmax", 0, KEEP),
    ROW(init_from, "--init-from", STR, 0, 0, NULL, "PATH", "fine-tune: start from this model (a gptx model or checkpoint,\na Hugging Face GPT-2 folder or an llm.c .bin); its shape\nreplaces --preset/--layers/--heads/--width, --context may\nonly shorten its context; fresh optimizer state", ND, NOSAVE),
    PROG_SECTION("optimization:"),
    ROW(batch, "--batch", INT, 1, 1e9, NULL, NULL, "rows per micro-batch B (the preset's)", ND, KEEP),
    ROW(grad_accum, "--grad-accum", INT, 1, 1e9, NULL, NULL, "micro-batches per optimizer step", 0, KEEP),
    ROW(steps, "--steps", INT, 1, 1e9, NULL, NULL, "optimizer steps (the preset's)", ND, CHANGE),
    ROW(epochs, "--epochs", INT, 0, 1e9, NULL, NULL, "instead of --steps: passes over the training windows", ND, CHANGE),
    ROW(lr, "--lr", FLOAT, 0.0, 10.0, NULL, NULL, "peak learning rate, in (0, 10] (the preset's)", ND | OPEN, KEEP),
    ROW(schedule, "--lr-schedule", INDEX, 0, 0, "cosine|linear|constant", NULL, "the learning rate after warm-up: cosine, linear or constant", 0, KEEP),
    ROW(warmup, "--warmup", INT, 0, 1e9, NULL, NULL, "linear warm-up steps (the preset's)", ND, KEEP),
    ROW(min_lr_frac, "--min-lr-frac", FLOAT, 0.0, 1.0, NULL, NULL, "final lr as a fraction of the peak", 0, KEEP),
    ROW(weight_decay, "--weight-decay", FLOAT, 0.0, 10.0, NULL, NULL, "AdamW decay on weight matrices", 0, KEEP),
    ROW(beta1, "--beta1", FLOAT, 0.0, 0.999999, NULL, NULL, "AdamW beta1", 0, KEEP),
    ROW(beta2, "--beta2", FLOAT, 0.0, 0.999999, NULL, NULL, "AdamW beta2", 0, KEEP),
    ROW(grad_clip, "--grad-clip", FLOAT, 0.0, 1e9, NULL, NULL, "global gradient-norm clip, 0 = off", 0, KEEP),
    PROG_SECTION("evaluation and output:"),
    ROW(eval_every, "--eval-every", INT, 0, 1e9, NULL, NULL, "validation interval in steps, 0 = only after the last", 0, CHANGE),
    ROW(eval_batches, "--eval-batches", INT, 1, 1e9, NULL, NULL, "validation batches per evaluation (data parallel: global\nbatches, each rank evaluating its share)", 0, CHANGE),
    ROW(sample_every, "--sample-every", INT, 0, 1e9, NULL, NULL, "sample interval in steps, 0 = only at the end", 0, CHANGE),
    ROW(sample_tokens, "--sample-tokens", INT, 0, 1e9, NULL, NULL, "tokens per sample, 0 = no sample", 0, CHANGE),
    ROW(prompt, "--prompt", STR, 0, 0, NULL, "TEXT", "sample prompt", 0, CHANGE),
    ROW(temperature, "--temperature", FLOAT, 0.0, 100.0, NULL, NULL, "sampling temperature, 0 = greedy", 0, CHANGE),
    ROW(top_k, "--top-k", INT, 0, 1e9, NULL, NULL, "sample from the k most likely tokens, 0 = off", 0, CHANGE),
    ROW(top_p, "--top-p", FLOAT, 0.0, 1.0, NULL, NULL, "nucleus sampling mass, in (0, 1]; 1 = off", OPEN, CHANGE),
    ROW(log_every, "--log-every", INT, 1, 1e9, NULL, NULL, "plain log line interval when stdout is not a terminal", 0, CHANGE),
    ROW(out_dir, "--out-dir", STR, 0, 0, NULL, "DIR", "metrics.jsonl, loss.svg, checkpoints and, at the end, the\ntrained model model.safetensors", 0, CHANGE),
    ROW(checkpoint_every, "--checkpoint-every", INT, -1, 1e9, NULL, NULL, "write DIR/checkpoint-<step>.safetensors (8 digits) every N\nsteps and DIR/latest naming it; 0 = only at the end; -1 = never\n(but at an early stop)", 0, CHANGE),
    ROW(keep_checkpoints, "--keep-checkpoints", INT, 0, 1e9, NULL, "K", "keep this run's newest K numbered checkpoints: older ones are\nremoved once a newer one and latest are on disk; 0 = keep all", 0, CHANGE),
    ROW(save_best, "--save-best", INT, 0, 1, NULL, "0|1", "1 = write DIR/best.safetensors (the model) at each new best\nvalidation loss", 0, CHANGE),
    ROW(overwrite, "--overwrite", SWITCH, 0, 1, NULL, NULL, "a new run in an --out-dir that holds another run's files\n(metrics.jsonl, checkpoint-N.safetensors, latest, model.safetensors,\nbest.safetensors, loss.svg, checkpoint.safetensors) removes them\nfirst; without it the run is refused, naming them. With --resume:\nwhen the folder's metrics or checkpoints are another run's, they go\nand the records start anew at the resumed step", 0, NOSAVE),
    ROW(resume, "--resume", STR, 0, 0, NULL, "DIR|FILE", "continue a run: from its --out-dir (the checkpoint `latest` names;\na damaged one falls back to the previous) or from a checkpoint\nfile. It holds the run's flags, so none need repeating; only\n--steps, --epochs, the evaluation/sampling/logging/checkpoint flags,\n--out-dir, --threads, --comm-timeout and the data paths (the data\nitself must be the same: it is checked by its hash) may change", ND, NOSAVE),
    PROG_SECTION("machine:"),
    ROW(backend, "--backend", CHOICE, 0, 0, "cpu|cuda|auto", NULL, "where it runs: cpu, cuda or auto", 0, KEEP),
    ROW(precision, "--precision", CHOICE, 0, 0, "default|fp32|tf32|bf16|bf16_pure", NULL, "default (the backend's: cpu fp32, cuda bf16), fp32, tf32 (CUDA),\nbf16 (bf16 activations, fp32 master weights and moments) or\nbf16_pure (bf16 weights, moments and activations, fp32 gradients;\nCPU with oneDNN or CUDA; docs/precision.md); recorded in checkpoints", ND, KEEP),
    ROW(stochastic_rounding, "--stochastic-rounding", INT, 0, 1, NULL, "0|1", "1 = bf16_pure rounds updates stochastically", 0, KEEP),
    ROW(threads, "--threads", INT, 0, 1e6, NULL, NULL, "CPU threads, 0 = all cores (data parallel: the node's cores\ndivided among its ranks)", 0, CHANGE),
    ROW(seed, "--seed", U64, 0, 0, NULL, NULL, "initialisation, data order and sampling seed", 0, KEEP),
    PROG_SECTION("data parallel (started by mpirun -np N, or torchrun-style RANK/WORLD_SIZE/... with\nCUDA; --batch is per rank, rank 0 prints and writes; see docs/distributed.md):"),
    ROW(comm_timeout, "--comm-timeout", FLOAT, 0.0, 1e9, NULL, "S", "a collective still waiting after S seconds fails the run\n(a rank died or hangs); 0 = wait forever", 0, CHANGE),
    ROW(zero1, "--zero1", INT, 0, 1, NULL, "0|1", "1 = ZeRO-1: AdamW moments sharded over the ranks (about 1/N\nof the optimizer memory each), reduce-scatter + all-gather\ninstead of the gradient average", 0, KEEP),
    ROW(overlap_mib, "--overlap", FLOAT, 0.0, 4096.0, NULL, "MIB", "> 0: start each bucket of about MIB MiB of final gradients\nreducing while backward still runs; 0 = average after\nbackward (not with --zero1)", 0, KEEP),
    ROW(rank_invariant, "--rank-invariant", INT, 0, 1, NULL, "0|1", "1 = the same bits on any number of ranks: a step is --grad-accum\nmicro-batches of the global batch, shared by the ranks, their\ngradients added exactly (CPU; costs a pass per micro-batch and\n24 bytes per parameter); resumable on another rank count", 0, KEEP),
};
#undef ROW
enum { N_FLAGS = sizeof flags / sizeof flags[0] };
_Static_assert(N_FLAGS <= sizeof(((train_options *)0)->given), "train_options.given is too small");
_Static_assert(sizeof(lr_schedule) == sizeof(int), "--lr-schedule is stored as an int index");
_Static_assert(sizeof(uint64_t) == sizeof(unsigned long long), "--seed is stored as a u64");

static const char SYNOPSIS[] =
    "usage: gptx-train [options]\n"
    "Trains a GPT-2-style model. With no options: a tiny model on the bundled\n"
    "the-verdict.txt on the CPU, then a sample continuation of the prompt.\n"
    "Exit status: 0 done, 1 the run failed (also a missing input file), 2 the\n"
    "command line is wrong, 130 after Ctrl-C, 143 after SIGTERM (both stop after\n"
    "the step in progress, writing the checkpoint, the model and the plot).\n"
    "\n";

/* The epilogue: the preset table (built once, from prog_presets). */
static char *epilogue(void) {
    static char *text;
    size_t len = 0;
    if (text) return text;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    fprintf(f, "presets (parameters with the vocabulary padded to 50304):\n");
    prog_presets_print(f, "  ");
    if (fclose(f) != 0) text = NULL;
    return text;
}

static prog_cli the_cli(void) {
    prog_cli cli = {"gptx-train", SYNOPSIS, flags, N_FLAGS, epilogue()};
    return cli;
}

static const prog_flag *find_flag(const char *name) {
    prog_cli cli = the_cli();
    return prog_flags_find(&cli, name);
}

#define FIELD(o, f, type) ((type *)((char *)(o) + (f)->offset))

/* The bytes of a row's field (what a CHANGE copies on --resume). */
static size_t field_size(const prog_flag *f) {
    switch (f->kind) {
    case PROG_FLAG_U64: return sizeof(uint64_t);
    case PROG_FLAG_INT: case PROG_FLAG_INDEX: case PROG_FLAG_SWITCH: return sizeof(int);
    case PROG_FLAG_FLOAT: return sizeof(float);
    default: return sizeof(const char *);
    }
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
    const prog_flag *f = find_flag(name);
    return f && o->given[f - flags];
}

static int bad(const char *flag, const char *value, const char *why) {
    return prog_usage_error("gptx-train", flag, value, why);
}

/* Fills what the command line did not give from the preset; with an
 * explicit --preset its values count as given. */
static int apply_preset(train_options *o) {
    const prog_preset *p = prog_preset_lookup("gptx-train", "--preset", o->preset);
    if (!p) return -1;
    int explicit_preset = train_options_given(o, "--preset");
    struct { const char *name; int value; } ints[] = {
        {"--layers", p->n_layer}, {"--heads", p->n_head}, {"--width", p->n_embd},
        {"--context", p->context}, {"--batch", p->batch}, {"--steps", p->steps},
        {"--warmup", p->warmup}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const prog_flag *f = find_flag(ints[i].name);
        if (o->given[f - flags]) continue;
        *FIELD(o, f, int) = ints[i].value;
        o->given[f - flags] = (unsigned char)explicit_preset;
    }
    const prog_flag *lr = find_flag("--lr"), *text = find_flag("--text");
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
    train_options d;
    defaults(&d);
    *o = d;
    prog_cli cli = the_cli();
    int rc = prog_flags_parse(&cli, o, o->given, argc, argv, &d);
    if (rc) return rc;
    /* before the preset fills --text: only a --text the user gave counts */
    if (o->train_shards && train_options_given(o, "--text"))
        return bad("--text", o->text, "not with --train-shards (one data source: the text is "
                                      "cut into train and validation itself, shards take "
                                      "--val-shards)");
    if (o->epochs && train_options_given(o, "--steps"))
        return bad("--epochs", NULL, "give --steps or --epochs, not both");
    if (apply_preset(o)) return -1;
    if (o->zero1 && o->overlap_mib > 0)
        return bad("--overlap", NULL, "not with --zero1 (its step reduces the gradients itself)");
    if (o->rank_invariant && o->overlap_mib > 0)
        return bad("--overlap", NULL, "not with --rank-invariant (every micro-batch's gradient "
                                      "is added exactly before the ranks' are)");
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

/* A path into the bundled data folder (the GPT-2 tokenizer, a preset's
 * text) is recorded relative to it, so a moved or reinstalled prefix finds
 * it again (train_options_resume resolves it); other paths stay as given. */
#define BUNDLED "bundled:"

static const char *bundled_name(const prog_flag *f, const char *v) {
    const char *dir = prog_data_dir();
    size_t n = strlen(dir);
    if (f->kind != PROG_FLAG_STR || strncmp(v, dir, n) != 0 || v[n] != '/' || !v[n + 1])
        return NULL;
    return v + n + 1;
}

/* --resume: each recorded "bundled:NAME" becomes NAME in this program's
 * data folder (prog_data.h). */
static void resolve_bundled(train_options *o) {
    static char paths[8][4096 + 64];
    int k = 0;
    for (int i = 0; i < N_FLAGS && k < 8; i++) {
        const char **v = flags[i].kind == PROG_FLAG_STR ? FIELD(o, &flags[i], const char *) : NULL;
        if (!v || !*v || strncmp(*v, BUNDLED, strlen(BUNDLED)) != 0) continue;
        snprintf(paths[k], sizeof paths[k], "%s/%s", prog_data_dir(), *v + strlen(BUNDLED));
        *v = paths[k++];
    }
}

size_t train_options_format(const train_options *o, char *buf, size_t cap) {
    size_t at = 0;
    char num[64];
    for (int i = 0; i < N_FLAGS; i++) {
        const prog_flag *f = &flags[i];
        const char *v = f->kind == PROG_FLAG_SECTION || f->tag == NOSAVE
                            ? NULL : prog_flags_format(f, o, num, sizeof num);
        if (!v) continue;
        const char *name = bundled_name(f, v);
        char rel[4096 + 64];
        if (name && (size_t)snprintf(rel, sizeof rel, "%s%s", BUNDLED, name) < sizeof rel) v = rel;
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
    const prog_cli cli_table = the_cli();
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
            const prog_flag *f = find_flag(line);
            if (!f || f->tag == NOSAVE) {
                fprintf(stderr, "gptx-train: --resume %s: the saved configuration has %s, which "
                                "this gptx-train does not know\n", file, line);
                return -1;
            }
            /* an empty text (a --prompt "" of an earlier gptx-train) stays empty */
            if (f->kind == PROG_FLAG_STR && !space[1]) {
                *FIELD(run, f, const char *) = space + 1;
            } else if (prog_flags_set(&cli_table, f, run, space + 1)) {
                fprintf(stderr, "gptx-train: --resume %s: the saved configuration's %s is not "
                                "valid (above)\n", file, line);
                return -1;
            }
        }
        line = next;
    }
    resolve_bundled(run);
    char a[64], b[64];
    for (int i = 0; i < N_FLAGS; i++) {
        const prog_flag *f = &flags[i];
        if (!cli->given[i] || f->kind == PROG_FLAG_SECTION || f->tag == NOSAVE) continue;
        const char *mine = prog_flags_format(f, cli, a, sizeof a);
        const char *theirs = prog_flags_format(f, run, b, sizeof b);
        if (f->tag == CHANGE) {
            memcpy((char *)run + f->offset, (const char *)cli + f->offset, field_size(f));
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

/*
 * gptx-train: the project's main job. With no arguments it trains a tiny GPT
 * on the bundled data/the-verdict.txt (GPT-2 BPE tokens) on the CPU and
 * prints a sample continuation of "Every effort moves you".
 * `gptx-train --help` lists every flag.
 *
 * Data parallel with no change: under `mpirun -np N` (CPU, MPI engine) or
 * torchrun-style variables (CUDA, NCCL engine) every rank trains on its own
 * share of each global batch, gradients are averaged by token count, and
 * rank 0 alone prints, samples and writes checkpoints (docs/distributed.md).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gptx/gptx.h"
#include "prog_error.h"
#include "prog_files.h"
#include "prog_model.h"
#include "train_dp.h"
#include "train_options.h"
#include "train_report.h"

/* Ctrl-C: the run ends after the step in progress, as if it were the last
 * (validation, checkpoint, model, plot), and exits with status 130. */
static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

/* Whether to stop now, after Ctrl-C or when rank 0 could not write its
 * metrics (local_failure): every rank must agree, or their collectives would
 * part ways (mpirun forwards the signal, but not at the same step). */
static int stop_requested(gptx_comm *comm, int W, int local_failure) {
    if (W <= 1) return interrupted || local_failure;
    double flag = interrupted || local_failure;
    if (gptx_comm_allreduce_f64(comm, &flag, 1, GPTX_COMM_MAX) != GPTX_OK) return 1;
    return flag > 0;
}

/* "" with one process, " (rank R of W)" in a data-parallel run */
static char rank_label[48] = "";

#define TRY(call)                                                                            \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != GPTX_OK) {                                                                \
            fprintf(stderr, "%sgptx-train%s: %s (%s)\n", prog_error_lead(), rank_label,      \
                    prog_error_text(), gptx_status_name(rc_));                               \
            goto done;                                                                       \
        }                                                                                    \
    } while (0)

/* Runs `call` on rank 0 only (sampling, checkpoints); the other ranks wait
 * at a barrier that also tells them whether it failed. */
#define ON_RANK0(call, what)                                                                 \
    do {                                                                                     \
        int rc0_ = R == 0 ? (call) : GPTX_OK;                                                \
        if (rc0_ != GPTX_OK)                                                                 \
            fprintf(stderr, "%sgptx-train%s: %s while %s (%s)\n", prog_error_lead(),         \
                    rank_label, prog_error_text(), what, gptx_status_name(rc0_));            \
        if (W > 1 ? dp_agree(comm, rc0_ == GPTX_OK, what) != GPTX_OK : rc0_ != GPTX_OK)      \
            goto done;                                                                       \
    } while (0)

/* A timer report over all ranks: times are the slowest rank's, token counts
 * the sum, so tokens/s is global tokens over the slowest rank's time. */
static int global_timing(gptx_comm *comm, gptx_timer_report *r) {
    double slowest[5] = {r->cold_seconds, r->steady_seconds, r->steady_median_seconds,
                         r->steady_min_seconds, r->steady_max_seconds};
    double sum[2] = {(double)r->cold_tokens, (double)r->steady_tokens};
    int rc = gptx_comm_allreduce_f64(comm, slowest, 5, GPTX_COMM_MAX);
    if (!rc) rc = gptx_comm_allreduce_f64(comm, sum, 2, GPTX_COMM_SUM);
    if (rc) return rc;
    r->cold_seconds = slowest[0];
    r->steady_seconds = slowest[1];
    r->steady_median_seconds = slowest[2];
    r->steady_min_seconds = slowest[3];
    r->steady_max_seconds = slowest[4];
    r->cold_tokens = (int64_t)sum[0];
    r->steady_tokens = (int64_t)sum[1];
    r->steady_tokens_per_second = r->steady_seconds > 0 ? sum[1] / r->steady_seconds : 0;
    return GPTX_OK;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Learning rate for optimizer step `step` (0-based) of `total`. */
static float lr_at(const train_options *o, int64_t step, int64_t total) {
    if (step < o->warmup) return o->lr * (float)(step + 1) / (float)o->warmup;
    if (o->schedule == SCHEDULE_CONSTANT) return o->lr;
    double span = (double)(total - o->warmup);
    double progress = span > 1 ? (double)(step - o->warmup) / (span - 1) : 1.0;
    double min_lr = o->lr * o->min_lr_frac;
    double frac = o->schedule == SCHEDULE_COSINE ? 0.5 * (1.0 + cos(M_PI * progress)) : 1.0 - progress;
    return (float)(min_lr + (o->lr - min_lr) * frac);
}

/* Splits "a,b,c" into an array of strings (one allocation each). */
static int split_paths(const char *list, char ***out) {
    int n = 1;
    for (const char *p = list; *p; p++) n += *p == ',';
    char **paths = calloc((size_t)n, sizeof *paths);
    const char *start = list;
    for (int i = 0; i < n && paths; i++) {
        const char *end = strchr(start, ',');
        size_t len = end ? (size_t)(end - start) : strlen(start);
        paths[i] = strndup(start, len);
        start = end ? end + 1 : start + len;
    }
    *out = paths;
    return n;
}

static void free_paths(char **paths, int n) {
    for (int i = 0; paths && i < n; i++) free(paths[i]);
    free(paths);
}

/* The first line of the run configuration gptx-train stores in its
 * checkpoints (user metadata): its format, in case it ever changes. */
#define SAVED_MAGIC "gptx-train run configuration 1"

/* FNV-1a, 64 bits: tells the data a run trained on from other data. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define HASH_START 0xcbf29ce484222325ull

/* Hash of every byte of the files, in order: 0, or -1 after a message. */
static int hash_files(char **paths, int n, uint64_t *out) {
    uint64_t h = HASH_START;
    static unsigned char buf[1 << 16];
    for (int i = 0; i < n; i++) {
        FILE *f = fopen(paths[i], "rb");
        if (!f) {
            fprintf(stderr, "gptx-train: cannot open %s: %s\n", paths[i], strerror(errno));
            return -1;
        }
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, f)) > 0) h = hash_bytes(h, buf, got);
        int err = ferror(f);
        fclose(f);
        if (err) {
            fprintf(stderr, "gptx-train: cannot read %s\n", paths[i]);
            return -1;
        }
        h = hash_bytes(h, "\0", 1); /* file boundaries count */
    }
    *out = h;
    return 0;
}

/* Cross-entropy on the validation tokens of predicting each with its
 * frequency among the training tokens (add-one smoothed over the real
 * vocabulary): the loss a model that ignores the context gets; a trained
 * model should be well below it. */
static double unigram_baseline(const int32_t *train, size_t n_train, const int32_t *val,
                               size_t n_val, int vocab) {
    double *count = calloc((size_t)vocab, sizeof *count);
    if (!count || n_val < 2) {
        free(count);
        return NAN;
    }
    for (size_t i = 0; i < n_train; i++)
        if (train[i] >= 0 && train[i] < vocab) count[train[i]] += 1;
    double total = (double)n_train + vocab, nll = 0;
    for (size_t i = 1; i < n_val; i++) /* targets: every token after the first */
        nll -= log((val[i] >= 0 && val[i] < vocab ? count[val[i]] + 1 : 1) / total);
    free(count);
    return nll / (double)(n_val - 1);
}

/* The run configuration for the checkpoint: the flags, then what identifies
 * the run's data and its progress. NULL when out of memory. */
static char *run_record(const train_options *o, uint64_t data_hash, int W, double best_val) {
    size_t n = train_options_format(o, NULL, 0);
    size_t cap = n + strlen(SAVED_MAGIC) + 160;
    char *s = malloc(cap);
    if (!s) return NULL;
    int k = snprintf(s, cap, "%s\n", SAVED_MAGIC);
    train_options_format(o, s + k, cap - (size_t)k);
    size_t at = strlen(s);
    snprintf(s + at, cap - at, "data_hash %016llx\nworld_size %d\nbest_val_loss %.9g\n",
             (unsigned long long)data_hash, W, best_val);
    return s;
}

/* --resume: o becomes the configuration saved in the checkpoint, with the
 * flags of the command line a resumed run may change. *saved gets the whole
 * record (for data_hash, world_size, best_val_loss), *flags the copy o's
 * strings point into; both stay allocated until the end. 0, or -1 after a
 * message. */
static int resume_config(train_options *o, char **saved, char **flags) {
    const train_options cli = *o;
    if (o->init_from) {
        fprintf(stderr, "gptx-train: --resume and --init-from exclude each other (--resume "
                        "continues a run, --init-from starts a new one from a model)\n");
        return -1;
    }
    size_t n = 0;
    int rc = gptx_checkpoint_user_metadata(o->resume, NULL, 0, &n);
    if (rc == GPTX_ERR_SHAPE) {
        *saved = malloc(n + 1);
        *flags = malloc(n + 1);
        rc = *saved && *flags ? gptx_checkpoint_user_metadata(o->resume, *saved, n + 1, &n)
                              : GPTX_ERR_NO_MEMORY;
    }
    if (rc == GPTX_ERR_NOT_FOUND) {
        fprintf(stderr, "gptx-train: --resume %s: %s; --resume takes the checkpoint.safetensors "
                        "of a gptx-train 0.3 (or later) run, which holds its configuration "
                        "(--init-from starts a new run from any model's weights)\n", o->resume,
                prog_error_text());
        return -1;
    }
    if (rc != GPTX_OK) {
        fprintf(stderr, "gptx-train: --resume %s: %s (%s)\n", o->resume,
                rc == GPTX_ERR_NO_MEMORY ? "out of memory" : prog_error_text(),
                gptx_status_name(rc));
        return -1;
    }
    if (strncmp(*saved, SAVED_MAGIC "\n", strlen(SAVED_MAGIC) + 1) != 0) {
        fprintf(stderr, "gptx-train: --resume %s: its metadata is not a gptx-train run "
                        "configuration (no \"" SAVED_MAGIC "\" line)\n", o->resume);
        return -1;
    }
    memcpy(*flags, *saved, n + 1);
    return train_options_resume(o, &cli, *flags, cli.resume);
}

static int sample(gptx_model *model, gptx_sampler *sampler, gptx_tokenizer *tok,
                  const train_options *o, train_report *rep, int64_t step) {
    size_t plen = strlen(o->prompt), n_ids = 0;
    int32_t *ids = malloc((plen + 1) * sizeof *ids);
    int32_t *out = malloc(((size_t)o->sample_tokens + 1) * sizeof *out);
    char *text = NULL;
    int rc = !ids || !out ? GPTX_ERR_NO_MEMORY : GPTX_OK;
    if (!rc) rc = gptx_tokenizer_encode(tok, o->prompt, plen, 0, ids, plen + 1, &n_ids);
    if (!rc && n_ids == 0) {
        ids[0] = gptx_tokenizer_eot_token(tok); /* an empty prompt starts from <|endoftext|> */
        n_ids = 1;
    }
    if (!rc) rc = gptx_generate(model, sampler, ids, (int)n_ids, o->sample_tokens, out);
    size_t need = 0;
    if (!rc) {
        rc = gptx_tokenizer_decode(tok, out, (size_t)o->sample_tokens, NULL, 0, &need);
        if (rc == GPTX_ERR_SHAPE) rc = GPTX_OK; /* asked for the size */
    }
    if (!rc && !(text = malloc(need + 1))) rc = GPTX_ERR_NO_MEMORY;
    if (!rc) rc = gptx_tokenizer_decode(tok, out, (size_t)o->sample_tokens, text, need, &need);
    if (!rc) {
        text[need] = '\0';
        train_report_line(rep, "step %lld | sample: %s%s\n", (long long)step, o->prompt, text);
    }
    free(ids);
    free(out);
    free(text);
    return rc;
}

int main(int argc, char **argv) {
    train_options o;
    int prc = train_options_parse(&o, argc, argv);
    if (prc) return prc > 0 ? 0 : 2;

    /* --resume: the run's own configuration, from its checkpoint */
    char *saved = NULL, *saved_flags = NULL;
    if (o.resume && resume_config(&o, &saved, &saved_flags) != 0) {
        free(saved);
        free(saved_flags);
        return 2;
    }
    int L = o.layers, H = o.heads, C = o.width, T = o.context;

    /* the launcher (if any) decides rank, device and the default thread count */
    gptx_comm_launch_info launch;
    gptx_comm_launch_info_init(&launch);
    if (gptx_comm_detect_launch(&launch) != GPTX_OK) {
        fprintf(stderr, "gptx-train: %s\n", gptx_last_error());
        return 2;
    }

    int status = 1;
    gptx_comm *comm = NULL;
    int R = 0, W = 1;
    gptx_context *ctx = NULL;
    gptx_tokenizer *tok = NULL;
    gptx_dataloader *train = NULL, *val = NULL;
    gptx_model *model = NULL;
    gptx_optimizer *opt = NULL;
    gptx_sampler *sampler = NULL;
    gptx_timer *step_timer = NULL, *e2e_timer = NULL;
    train_report rep = {.lock_fd = -1}; /* closable before it is opened */
    char *text = NULL;
    char *record = NULL; /* the run configuration in the last checkpoint written */
    int32_t *tokens = NULL;
    char **train_paths = NULL, **val_paths = NULL;
    int n_train_paths = 0, n_val_paths = 0;
    double t_start = now_seconds();

    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = !strcmp(o.backend, "cuda") ? GPTX_BACKEND_CUDA
                 : !strcmp(o.backend, "auto") ? GPTX_BACKEND_AUTO : GPTX_BACKEND_CPU;
    co.num_threads = o.threads;
    co.deterministic = 1;
    co.precision = gptx_precision_from_name(o.precision); /* validated by the option parser */
    co.stochastic_rounding = o.stochastic_rounding;
    if (launch.world_size > 1) {
        co.device = launch.local_rank; /* one GPU per process */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (o.threads == 0 && launch.local_world_size > 1 && cores > 0) /* share the cores */
            co.num_threads = cores / launch.local_world_size > 0
                                 ? (int)(cores / launch.local_world_size) : 1;
    }
    TRY(gptx_context_create(&ctx, &co));
    gptx_comm_options cmo;
    gptx_comm_options_init(&cmo);
    cmo.timeout_seconds = o.comm_timeout;
    TRY(gptx_comm_create(&comm, ctx, &cmo));
    R = gptx_comm_rank(comm);
    W = gptx_comm_world_size(comm);
    if (W > 1) snprintf(rank_label, sizeof rank_label, " (rank %d of %d)", R, W);
    TRY(gptx_tokenizer_load_gpt2(&tok, o.encoder, o.vocab));
    if (o.init_from) { /* fine-tuning: the model, and so its shape, come from the file */
        const char *format = "";
        if (prog_model_open("gptx-train", &model, ctx, o.init_from, &format) != GPTX_OK) goto done;
        gptx_model_config ic;
        gptx_model_config_init(&ic);
        TRY(gptx_model_get_config(model, &ic));
        if (ic.vocab_size != o.vocab_size) {
            fprintf(stderr, "gptx-train: --init-from %s has a vocabulary of %d; the data is GPT-2 "
                            "BPE (%d ids)\n", o.init_from, ic.vocab_size, o.vocab_size);
            goto done;
        }
        if (train_options_given(&o, "--context") && o.context > ic.context_length) {
            fprintf(stderr, "gptx-train: --context %d is above the context length %d of "
                            "--init-from %s\n", o.context, ic.context_length, o.init_from);
            goto done;
        }
        T = train_options_given(&o, "--context") ? o.context : ic.context_length;
        o.context = T; /* what the run uses, for its saved configuration */
        L = o.layers = ic.n_layer, H = o.heads = ic.n_head, C = o.width = ic.n_embd;
        if (R == 0)
            printf("fine-tuning %s (%s): %d layers, width %d, %d heads, context %d\n", o.init_from,
                   format, L, C, H, ic.context_length);
    }

    gptx_dataloader_options lo;
    gptx_dataloader_options_init(&lo);
    lo.batch_size = o.batch;
    lo.seq_len = T;
    lo.seed = o.seed;
    lo.vocab_size = o.vocab_size;
    /* validation: every rank reads all of it and evaluates its own batches */
    gptx_dataloader_options vo = lo;
    lo.rank = R; /* training: each rank its own disjoint share of every epoch */
    lo.world_size = W;
    lo.shuffle = 1;
    lo.drop_last = 1;
    lo.prefetch = 1;
    vo.shuffle = 0;
    vo.drop_last = 0;
    vo.prefetch = 0;
    const char *data_name;
    uint64_t data_hash = HASH_START;
    double unigram = NAN;
    if (o.train_shards) {
        data_name = o.train_shards;
        n_train_paths = split_paths(o.train_shards, &train_paths);
        if (hash_files(train_paths, n_train_paths, &data_hash)) goto done;
        TRY(gptx_dataloader_create_from_files(&train, ctx, (const char *const *)train_paths,
                                              n_train_paths, &lo));
        if (o.val_shards) {
            n_val_paths = split_paths(o.val_shards, &val_paths);
            uint64_t vh = 0;
            if (hash_files(val_paths, n_val_paths, &vh)) goto done;
            data_hash = hash_bytes(data_hash, &vh, sizeof vh);
            TRY(gptx_dataloader_create_from_files(&val, ctx, (const char *const *)val_paths,
                                                  n_val_paths, &vo));
        }
    } else {
        data_name = o.text;
        size_t len = 0, n = 0;
        /* a regular file, read to the end without error (not a folder or a device) */
        if (!(text = prog_read_file("gptx-train", "--text", o.text, &len))) goto done;
        if (!(tokens = malloc((len + 1) * sizeof *tokens))) goto done;
        TRY(gptx_tokenizer_encode(tok, text, len, 1, tokens, len + 1, &n));
        size_t split = (size_t)((double)n * (1.0 - o.val_fraction));
        if (split < (size_t)T + 1 || n - split < (size_t)T + 1) {
            fprintf(stderr, "gptx-train: --text %s has %zu tokens; with --context %d and "
                            "--val-fraction %g both splits need at least %d\n",
                    o.text, n, T, (double)o.val_fraction, T + 1);
            goto done;
        }
        /* the tokens (so the tokenizer files count too) and where validation starts */
        data_hash = hash_bytes(hash_bytes(data_hash, tokens, n * sizeof *tokens), &split,
                               sizeof split);
        unigram = unigram_baseline(tokens, split, tokens + split, n - split, o.vocab_size);
        TRY(gptx_dataloader_create_from_tokens(&train, ctx, tokens, split, &lo));
        TRY(gptx_dataloader_create_from_tokens(&val, ctx, tokens + split, n - split, &vo));
    }
    gptx_dataloader_info ti;
    gptx_dataloader_info_init(&ti);
    TRY(gptx_dataloader_info_get(train, &ti));
    int64_t total_steps = o.steps;
    if (o.epochs) total_steps = (o.epochs * ti.batches_per_epoch + o.grad_accum - 1) / o.grad_accum;

    gptx_model_config mc;
    gptx_model_config_init(&mc);
    mc.vocab_size = o.vocab_size;
    mc.padded_vocab_size = o.padded_vocab;
    mc.context_length = T;
    mc.n_layer = L;
    mc.n_head = H;
    mc.n_embd = C;
    if (!model) {
        TRY(gptx_model_create(&model, ctx, &mc));
        TRY(gptx_model_init_random(model, o.seed));
    }
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = o.lr;
    ao.beta1 = o.beta1;
    ao.beta2 = o.beta2;
    ao.weight_decay = o.weight_decay;
    ao.grad_clip = o.grad_clip;
    if (o.zero1) /* moments for this rank's shard only; world size 1: all of them */
        TRY(gptx_optimizer_create_sharded(&opt, model, &ao, comm));
    else
        TRY(gptx_optimizer_create(&opt, model, &ao));
    gptx_sampler_options so;
    gptx_sampler_options_init(&so);
    so.temperature = o.temperature;
    so.top_k = o.top_k;
    so.top_p = o.top_p;
    so.seed = o.seed;
    TRY(gptx_sampler_create(&sampler, &so));

    gptx_train_state ts;
    gptx_train_state_init(&ts);
    ts.optimizer = opt;
    ts.sampler = sampler;
    ts.train_loader = train;
    ts.val_loader = NULL; /* validation always restarts from its first window */
    int64_t step = 0, tokens_seen = 0;
    double best_val = INFINITY;
    if (saved) { /* the same data and the same number of ranks, or not the same run */
        char want[64] = "", got[32];
        snprintf(got, sizeof got, "%016llx", (unsigned long long)data_hash);
        if (train_saved_get(saved, "data_hash", want, sizeof want) == 0 && strcmp(want, got)) {
            fprintf(stderr, "gptx-train: --resume %s: the data (%s) is not what the run trained "
                            "on (hash %s, the run's %s): the files or the tokenizer changed, or "
                            "they are other files; resume with the run's data, or start a new "
                            "run from this model with --init-from %s\n",
                    o.resume, data_name, got, want, o.resume);
            goto done;
        }
        char ws[32] = "";
        if (train_saved_get(saved, "world_size", ws, sizeof ws) == 0 && atoi(ws) != W) {
            fprintf(stderr, "gptx-train: --resume %s: the run had %s process(es), this one %d: "
                            "the global batch and each rank's share of the data would change; "
                            "resume with %s\n", o.resume, ws, W, ws);
            goto done;
        }
        char bv[64] = "";
        if (train_saved_get(saved, "best_val_loss", bv, sizeof bv) == 0) best_val = strtod(bv, NULL);
    }
    if (o.resume) {
        TRY(gptx_checkpoint_load(model, &ts, o.resume));
        step = ts.lr_schedule_step;
        tokens_seen = ts.tokens_seen;
        if (step >= total_steps) {
            fprintf(stderr, "gptx-train: --resume %s is at step %lld; --steps %lld is already "
                            "reached\n", o.resume, (long long)step, (long long)total_steps);
            goto done;
        }
    }

    {
        int opened = train_report_open(&rep, o.out_dir, o.log_every, R, W, o.resume ? step : -1) == 0;
        if (W > 1 ? dp_agree(comm, opened, "opening --out-dir") != GPTX_OK : !opened) goto done;
    }
    TRY(gptx_timer_create(&step_timer, ctx, GPTX_TIMER_TRAINING_STEPS));
    TRY(gptx_timer_create(&e2e_timer, ctx, GPTX_TIMER_END_TO_END));
    {
        const char *sched = o.schedule == SCHEDULE_COSINE   ? "cosine"
                            : o.schedule == SCHEDULE_LINEAR ? "linear"
                                                            : "constant";
        train_config_record cr = {
            .version = gptx_version(), .backend = gptx_context_backend_name(ctx),
            .precision = gptx_precision_name(gptx_context_precision(ctx)), .data = data_name,
            .init_from = o.init_from, .resume = o.resume, .schedule = sched,
            .threads = gptx_context_num_threads(ctx), .n_layer = L, .n_head = H, .n_embd = C,
            .context = T, .vocab = o.vocab_size, .padded_vocab = o.padded_vocab, .batch = o.batch,
            .grad_accum = o.grad_accum, .world_size = W, .warmup = o.warmup,
            .parameters = gptx_model_num_parameters(model),
            .train_tokens = (long long)ti.total_tokens,
            .tokens_per_step = (long long)W * o.batch * T * o.grad_accum,
            .steps = (long long)total_steps, .lr = o.lr, .min_lr_frac = o.min_lr_frac,
            .weight_decay = o.weight_decay, .grad_clip = o.grad_clip, .beta1 = o.beta1,
            .beta2 = o.beta2, .seed = (unsigned long long)o.seed, .unigram_val_loss = unigram,
            .data_hash = (unsigned long long)data_hash};
        size_t fl = train_options_format(&o, NULL, 0);
        char *flags_text = malloc(fl + 1);
        if (flags_text) train_options_format(&o, flags_text, fl + 1);
        cr.flags = flags_text;
        train_report_config(&rep, &cr);
        free(flags_text);
        int ok = train_report_ok(&rep) == 0; /* rank 0 writes; the others agree */
        if (W > 1 ? dp_agree(comm, ok, "writing metrics.jsonl") != GPTX_OK : !ok) goto done;
    }
    if (R == 0) {
        printf("gptx-train %s | backend %s, %d threads, precision %s\n", gptx_version(),
               gptx_context_backend_name(ctx), gptx_context_num_threads(ctx),
               gptx_precision_name(gptx_context_precision(ctx)));
        printf("data %s: %lld training tokens, %lld windows of %d+1, %lld batches/epoch%s\n", data_name,
               (long long)ti.total_tokens, (long long)ti.total_windows, T,
               (long long)ti.batches_per_epoch, val ? "" : " (no validation data)");
        if (isfinite(unigram))
            printf("unigram baseline on the validation text: loss %.4f (training-token "
                   "frequencies, no context)\n", unigram);
        printf("model: %d layers, %d heads, width %d, context %d, vocab %d padded to %d, %zu parameters\n",
               L, H, C, T, o.vocab_size, o.padded_vocab, gptx_model_num_parameters(model));
        printf("optimizer: AdamW lr %g (%s after %d warm-up steps, to %g x), wd %g, clip %g | "
               "%d x %d tokens x %d accumulation = %lld tokens/step%s, %lld steps%s\n",
               (double)o.lr, o.schedule == SCHEDULE_COSINE ? "cosine" : o.schedule == SCHEDULE_LINEAR ? "linear" : "constant",
               o.warmup, (double)o.min_lr_frac, (double)o.weight_decay, (double)o.grad_clip, o.batch, T,
               o.grad_accum, (long long)o.batch * T * o.grad_accum, W > 1 ? " per rank" : "",
               (long long)total_steps, o.resume ? " (resumed)" : "");
        if (o.resume) printf("resumed from %s at step %lld\n", o.resume, (long long)step);
        if (W > 1)
            printf("data parallel: %d ranks (%s engine, %d on this node), each with its own "
                   "share of the windows: global batch %lld rows = %lld tokens/step; batch, "
                   "batches/epoch and threads above are per rank, loss, grad norm, tokens and "
                   "tokens/s are global%s%s\n",
                   W, gptx_comm_engine_name(comm), gptx_comm_local_world_size(comm),
                   (long long)W * o.batch * o.grad_accum, (long long)W * o.batch * T * o.grad_accum,
                   o.zero1 ? "; ZeRO-1: optimizer state sharded" : "",
                   o.overlap_mib > 0 ? "; gradient buckets overlapped with backward" : "");
        fflush(stdout);
    }

    double val_loss = NAN;
    int64_t val_tokens = 0;
    float loss = NAN;
    {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint;
        sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C kills at once */
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
    }
    const int64_t start_step = step; /* a resumed run's checkpoint is already on disk */
    for (;; step++) {
        int stop = step < total_steps && stop_requested(comm, W, train_report_ok(&rep) != 0);
        int last = step == total_steps || stop;
        if (stop) {
            train_report_line(&rep, "step %lld | %s: validating, writing the checkpoint, "
                              "the model and the plot\n", (long long)step,
                              interrupted ? "interrupted" : "stopping");
            total_steps = step;
        }
        TRY(gptx_timer_start(e2e_timer));
        if (val && ((o.eval_every > 0 && step % o.eval_every == 0) || last)) {
            /* --eval-batches counts global batches: W per-rank batches of --batch rows
             * each, the windows one process with the global batch evaluates */
            TRY(dp_evaluate(comm, model, val, o.eval_batches * W, T, &val_loss, &val_tokens));
            train_report_val(&rep, step, tokens_seen, val_loss, val_tokens);
            if (val_loss < best_val) {
                best_val = val_loss; /* the same on every rank: dp_evaluate is global */
                if (o.save_best && step > 0) {
                    char best[4096];
                    snprintf(best, sizeof best, "%s/best.safetensors", o.out_dir);
                    ON_RANK0(gptx_model_save(model, best), "writing the best model");
                    train_report_line(&rep, "step %lld | best validation loss so far: model %s\n",
                                      (long long)step, best);
                }
            }
        }
        if (o.sample_every > 0 && step > 0 && step % o.sample_every == 0 && !last)
            ON_RANK0(sample(model, sampler, tok, &o, &rep, step), "sampling");
        if ((o.checkpoint_every >= 0 || stop) && step > start_step &&
            ((o.checkpoint_every > 0 && step % o.checkpoint_every == 0) || last)) {
            char path[4096];
            snprintf(path, sizeof path, "%s/checkpoint.safetensors", o.out_dir);
            ts.lr_schedule_step = step;
            ts.tokens_seen = tokens_seen;
            free(record);
            if (!(record = run_record(&o, data_hash, W, best_val))) TRY(GPTX_ERR_NO_MEMORY);
            ts.user_metadata = record;
            if (o.zero1) { /* collective: the moments are gathered, rank 0 writes */
                int rcs = gptx_checkpoint_save(model, &ts, path);
                if (rcs != GPTX_OK)
                    fprintf(stderr, "%sgptx-train%s: %s while writing the checkpoint (%s)\n",
                            prog_error_lead(), rank_label, prog_error_text(),
                            gptx_status_name(rcs));
                if (W > 1 ? dp_agree(comm, rcs == GPTX_OK, "writing the checkpoint") != GPTX_OK
                          : rcs != GPTX_OK)
                    goto done;
            } else {
                ON_RANK0(gptx_checkpoint_save(model, &ts, path), "writing the checkpoint");
            }
            train_report_line(&rep, "step %lld | checkpoint %s (gptx-train --resume %s continues "
                              "the run)\n", (long long)step, path, path);
        }
        if (last) {
            TRY(gptx_timer_stop(e2e_timer, 0));
            break;
        }
        /* one optimizer step: grad_accum micro-batches, then AdamW */
        size_t overlap = 0; /* bucket bytes; 0 = average after backward */
        if (W > 1 && o.overlap_mib > 0) {
            overlap = (size_t)((double)o.overlap_mib * 1048576.0);
            if (overlap == 0) overlap = 1;
        }
        float lr = lr_at(&o, step, total_steps), norm = 0;
        int K = o.grad_accum;
        int64_t step_tokens = 0;
        double loss_sum = 0;
        TRY(gptx_optimizer_set_lr(opt, lr));
        TRY(gptx_model_zero_grad(model));
        double t0 = now_seconds();
        for (int k = 0; k < K; k++) {
            float l;
            const int32_t *in, *tg;
            int rows;
            TRY(gptx_dataloader_next(train, &in, &tg, &rows, NULL));
            if (k == 0) TRY(gptx_timer_start(step_timer)); /* data for the first micro-batch is ready */
            step_tokens += (int64_t)rows * T;
            if (overlap && k == K - 1) { /* reduces buckets while backward runs */
                TRY(gptx_model_forward(model, in, tg, rows, T, &l));
                TRY(gptx_comm_backward(comm, model, 1.0f / (float)K, step_tokens, overlap));
            } else { /* cross-entropy and its gradient in one pass */
                TRY(gptx_model_forward_backward(model, in, tg, rows, T, 1.0f / (float)K, &l));
            }
            loss_sum += l;
        }
        if (o.zero1) {
            /* reduce-scatter, AdamW on this rank's shard, all-gather */
            TRY(gptx_optimizer_step_sharded(opt, model, step_tokens, &norm));
        } else {
            /* every rank: the global token-weighted mean gradient (no-op for one rank) */
            if (!overlap) TRY(gptx_comm_average_gradients(comm, model, step_tokens));
            TRY(gptx_optimizer_step(opt, model, &norm));
        }
        TRY(gptx_timer_stop(step_timer, step_tokens));
        double dt = now_seconds() - t0;
        loss = (float)(loss_sum / K);
        gptx_timer_report tr;
        gptx_timer_report_init(&tr);
        TRY(gptx_timer_get_report(step_timer, &tr));
        const int64_t local_tokens = step_tokens;
        if (W > 1) {
            /* global: token-weighted loss, all ranks' tokens, the slowest rank's time */
            double sums[2] = {(double)loss * (double)step_tokens, (double)step_tokens};
            TRY(gptx_comm_allreduce_f64(comm, sums, 2, GPTX_COMM_SUM));
            TRY(gptx_comm_allreduce_f64(comm, &dt, 1, GPTX_COMM_MAX));
            TRY(global_timing(comm, &tr));
            loss = (float)(sums[0] / sums[1]);
            step_tokens = (int64_t)sums[1];
        }
        tokens_seen += step_tokens;
        double tps = tr.steady_seconds > 0 ? tr.steady_tokens_per_second : step_tokens / dt;
        double step_s = tr.steady_seconds > 0 ? tr.steady_median_seconds : dt;
        gptx_memory_stats ms;
        gptx_memory_stats_init(&ms);
        TRY(gptx_context_memory(ctx, &ms));
        train_report_step(&rep, step + 1, total_steps, loss, lr, norm, tokens_seen, dt, tps,
                          step_s * (double)(total_steps - step - 1), ms.peak);
        TRY(gptx_timer_stop(e2e_timer, local_tokens));
    }
    if (o.sample_tokens > 0 && !interrupted)
        ON_RANK0(sample(model, sampler, tok, &o, &rep, step), "sampling");

    /* the trained model, weights only (gptx-generate reads it), always */
    char model_path[4096];
    snprintf(model_path, sizeof model_path, "%s/model.safetensors", o.out_dir);
    ON_RANK0(gptx_model_save(model, model_path), "writing the model");
    train_report_line(&rep, "model: %s (gptx-generate --model %s)\n", model_path, model_path);

    char svg[4096];
    snprintf(svg, sizeof svg, "%s/loss.svg", o.out_dir);
    int svg_failed = train_report_write_svg(&rep, svg) != 0;
    if (!svg_failed)
        train_report_line(&rep, "loss curve: %s, metrics: %s/metrics.jsonl\n", svg, o.out_dir);

    gptx_timer_report tr, er;
    gptx_timer_report_init(&tr);
    gptx_timer_report_init(&er);
    TRY(gptx_timer_get_report(step_timer, &tr));
    TRY(gptx_timer_get_report(e2e_timer, &er));
    if (W > 1) {
        TRY(global_timing(comm, &tr));
        TRY(global_timing(comm, &er));
    }
    const char *glabel = W > 1 ? ", global: all ranks' tokens over the slowest rank's time" : "";
    gptx_memory_stats ms;
    gptx_memory_stats_init(&ms);
    TRY(gptx_context_memory(ctx, &ms));
    train_report_line(&rep,
        "timing, training steps only (forward+backward+%sAdamW, data ready%s): cold first step "
        "%.3f s; steady %lld steps, median step %.3f s, %.0f tokens/s on average\n",
        W > 1 ? "gradient average+" : "", glabel, tr.cold_seconds,
        (long long)(tr.intervals > 0 ? tr.intervals - 1 : 0), tr.steady_median_seconds,
        tr.steady_tokens_per_second);
    train_report_line(&rep,
        "timing, end to end (steps, data, eval, sampling, checkpoints%s): cold %.3f s; steady "
        "%.1f s over %lld intervals, %.0f tokens/s; whole run incl. set-up %.1f s%s\n",
        glabel, er.cold_seconds, er.steady_seconds,
        (long long)(er.intervals > 0 ? er.intervals - 1 : 0),
        er.steady_seconds > 0 ? (double)er.steady_tokens / er.steady_seconds : 0.0,
        now_seconds() - t_start, W > 1 ? " (rank 0)" : "");
    train_report_line(&rep,
        "memory (library buffers%s): allocated %.1f MiB, reserved %.1f MiB, peak %.1f MiB\n",
        W > 1 ? ", local: rank 0's" : "", ms.allocated / 1048576.0, ms.reserved / 1048576.0,
        ms.peak / 1048576.0);
    char base[64] = "";
    if (isfinite(unigram)) snprintf(base, sizeof base, " (unigram baseline %.4f)", unigram);
    train_report_line(&rep, "final: train loss%s %.4f, val loss%s %.4f%s\n",
                      W > 1 ? " (global)" : "", (double)loss, W > 1 ? " (global)" : "", val_loss,
                      base);
    status = svg_failed ? 1 : interrupted ? 130 : 0;
done:
    if (train_report_close(&rep) != 0 && (status == 0 || status == 130)) status = 1;
    gptx_timer_destroy(step_timer);
    gptx_timer_destroy(e2e_timer);
    gptx_sampler_destroy(sampler);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(model);
    gptx_dataloader_destroy(train);
    gptx_dataloader_destroy(val);
    gptx_tokenizer_destroy(tok);
    gptx_comm_destroy(comm);
    gptx_context_destroy(ctx);
    free_paths(train_paths, n_train_paths);
    free_paths(val_paths, n_val_paths);
    free(tokens);
    free(text);
    free(saved);
    free(saved_flags);
    free(record);
    return status;
}

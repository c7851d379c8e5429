/* gptx-train's set-up stages, after the flags: the machine, the tokenizer,
 * the model with its optimizer and sampler (and --resume's checkpoint), and
 * the output (out-dir, the config record, the header lines). The data has
 * its own file (train_data.c). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gptx/gptx_experimental.h"
#include "prog_model.h"
#include "train_run.h"

/* The backend and its threads; data parallel: one GPU per process, and the
 * node's cores shared among its ranks unless --threads says otherwise. */
static void context_options(const train_run *run, gptx_context_options *co) {
    const train_options *o = &run->o;
    gptx_context_options_init(co);
    co->backend = !strcmp(o->backend, "cuda") ? GPTX_BACKEND_CUDA
                  : !strcmp(o->backend, "auto") ? GPTX_BACKEND_AUTO : GPTX_BACKEND_CPU;
    co->num_threads = o->threads;
    co->deterministic = 1;
    co->precision = gptx_precision_from_name(o->precision); /* validated by the option parser */
    co->stochastic_rounding = o->stochastic_rounding;
    co->rank_invariant = o->rank_invariant;
    if (run->launch.world_size > 1) {
        co->device = run->launch.local_rank;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int local = run->launch.local_world_size;
        if (o->threads == 0 && local > 1 && cores > 0)
            co->num_threads = cores / local > 0 ? (int)(cores / local) : 1;
        if (co->num_threads > gptx_cpu_max_threads()) /* as 0 = one per core is bounded */
            co->num_threads = gptx_cpu_max_threads();
    }
}

/* The context and the communicator (one process: the "single" engine). */
int run_open_machine(train_run *run) {
    run->t_start = now_seconds();
    gptx_context_options co;
    context_options(run, &co);
    TRY(run, gptx_context_create(&run->ctx, &co));
    gptx_comm_options cmo;
    gptx_comm_options_init(&cmo);
    cmo.timeout_seconds = run->o.comm_timeout;
    TRY(run, gptx_comm_create(&run->comm, run->ctx, &cmo));
    run->rank = gptx_comm_rank(run->comm);
    run->world = gptx_comm_world_size(run->comm);
    if (run->world > 1)
        snprintf(run->rank_label, sizeof run->rank_label, " (rank %d of %d)", run->rank,
                 run->world);
    return 0;
}

int run_open_tokenizer(train_run *run) {
    if (run_note_input(run, "--encoder", run->o.encoder) ||
        run_note_input(run, "--vocab", run->o.vocab))
        return -1;
    TRY(run, gptx_tokenizer_load_gpt2(&run->tok, run->o.encoder, run->o.vocab));
    return 0;
}

/* Fine-tuning: the model, and so its shape, come from the file. This comes
 * before the data, which is cut into windows of the model's context. */
int run_open_init_from(train_run *run) {
    train_options *o = &run->o;
    if (!o->init_from) return 0;
    const char *format = "";
    char hf[2][4200]; /* a Hugging Face folder's files */
    snprintf(hf[0], sizeof hf[0], "%s/model.safetensors", o->init_from);
    snprintf(hf[1], sizeof hf[1], "%s/config.json", o->init_from);
    if (run_note_input(run, "--init-from", o->init_from) ||
        run_note_input(run, "--init-from", hf[0]) || run_note_input(run, "--init-from", hf[1]))
        return -1;
    if (prog_model_open("gptx-train", &run->model, run->ctx, o->init_from, &format) != GPTX_OK)
        return -1;
    gptx_model_config ic;
    gptx_model_config_init(&ic);
    TRY(run, gptx_model_get_config(run->model, &ic));
    if (ic.vocab_size != o->vocab_size) {
        fprintf(stderr, "gptx-train: --init-from %s has a vocabulary of %d; the data is GPT-2 "
                        "BPE (%d ids)\n", o->init_from, ic.vocab_size, o->vocab_size);
        return -1;
    }
    int given = train_options_given(o, "--context");
    if (given && o->context > ic.context_length) {
        fprintf(stderr, "gptx-train: --context %d is above the context length %d of "
                        "--init-from %s\n", o->context, ic.context_length, o->init_from);
        return -1;
    }
    /* what the run uses, for its saved configuration */
    if (!given) o->context = ic.context_length;
    o->layers = ic.n_layer;
    o->heads = ic.n_head;
    o->width = ic.n_embd;
    if (run->rank == 0)
        printf("fine-tuning %s (%s): %d layers, width %d, %d heads, context %d\n", o->init_from,
               format, o->layers, o->width, o->heads, ic.context_length);
    return 0;
}

/* A new model of the flags' shape, initialised from --seed (no --init-from). */
static int open_new_model(train_run *run) {
    const train_options *o = &run->o;
    gptx_model_config mc;
    gptx_model_config_init(&mc);
    mc.vocab_size = o->vocab_size;
    mc.padded_vocab_size = o->padded_vocab;
    mc.context_length = o->context;
    mc.n_layer = o->layers;
    mc.n_head = o->heads;
    mc.n_embd = o->width;
    TRY(run, gptx_model_create(&run->model, run->ctx, &mc));
    TRY(run, gptx_model_init_random(run->model, o->seed));
    return 0;
}

static int open_optimizer_and_sampler(train_run *run) {
    const train_options *o = &run->o;
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = o->lr;
    ao.beta1 = o->beta1;
    ao.beta2 = o->beta2;
    ao.weight_decay = o->weight_decay;
    ao.grad_clip = o->grad_clip;
    if (o->zero1) /* moments for this rank's shard only; world size 1: all of them */
        TRY(run, gptx_optimizer_create_sharded(&run->opt, run->model, &ao, run->comm));
    else
        TRY(run, gptx_optimizer_create(&run->opt, run->model, &ao));
    gptx_sampler_options so;
    gptx_sampler_options_init(&so);
    so.temperature = o->temperature;
    so.top_k = o->top_k;
    so.top_p = o->top_p;
    so.seed = o->seed;
    TRY(run, gptx_sampler_create(&run->sampler, &so));
    return 0;
}

/* --resume: weights, moments, sampler, data position and progress from the
 * checkpoint, once the record says it is the same run. */
static int load_resume(train_run *run) {
    if (run->saved && run_check_saved(run) != 0) return -1;
    if (!run->o.resume) return 0;
    int rc;
    while ((rc = gptx_checkpoint_load(run->model, &run->ts, run->o.resume)) != GPTX_OK) {
        /* --resume DIR: a damaged checkpoint gives way to the previous one
         * (nothing was restored: a load checks everything before it applies) */
        if (run_resume_fallback(run, rc) != 0) return run_fail(run, rc);
        if (run_resume_reread(run) != 0 || run_check_saved(run) != 0) return -1;
    }
    run->step = run->ts.lr_schedule_step;
    run->tokens_seen = run->ts.tokens_seen;
    if (run->step >= run->total_steps) {
        fprintf(stderr, "gptx-train: --resume %s is at step %lld; --steps %lld is already "
                        "reached\n", run->o.resume, (long long)run->step,
                (long long)run->total_steps);
        return -1;
    }
    return 0;
}

/* The model (unless --init-from opened it), AdamW, the sampler, the train
 * state a checkpoint holds, and with --resume the checkpoint's contents. */
int run_open_model(train_run *run) {
    if (!run->model && open_new_model(run) != 0) return -1;
    if (open_optimizer_and_sampler(run) != 0) return -1;
    gptx_train_state_init(&run->ts);
    run->ts.optimizer = run->opt;
    run->ts.sampler = run->sampler;
    run->ts.train_loader = run->train;
    run->ts.val_loader = NULL; /* validation always restarts from its first window */
    run->step = 0;
    run->tokens_seen = 0;
    run->best_val = INFINITY;
    return load_resume(run);
}

/* The first record of metrics.jsonl: what the run is. Rank 0 writes it; the
 * others learn whether it could. */
static int write_config(train_run *run) {
    const train_options *o = &run->o;
    const int W = run->world, T = o->context;
    train_config_record cr = {
        .version = gptx_version(), .backend = gptx_context_backend_name(run->ctx),
        .precision = gptx_precision_name(gptx_context_precision(run->ctx)),
        .data = run->data_name, .init_from = o->init_from, .resume = o->resume,
        .schedule = schedule_name(o->schedule), .threads = gptx_context_num_threads(run->ctx),
        .n_layer = o->layers, .n_head = o->heads, .n_embd = o->width, .context = T,
        .vocab = o->vocab_size, .padded_vocab = o->padded_vocab, .batch = o->batch,
        .grad_accum = o->grad_accum, .world_size = W, .warmup = o->warmup,
        .parameters = gptx_model_num_parameters(run->model),
        .train_tokens = (long long)run->ti.total_tokens,
        .tokens_per_step = (long long)(o->rank_invariant ? 1 : W) * o->batch * T * o->grad_accum,
        .steps = (long long)run->total_steps, .lr = o->lr, .min_lr_frac = o->min_lr_frac,
        .weight_decay = o->weight_decay, .grad_clip = o->grad_clip, .beta1 = o->beta1,
        .beta2 = o->beta2, .seed = (unsigned long long)o->seed,
        .unigram_val_loss = run->unigram, .data_hash = (unsigned long long)run->data_hash,
        .run_id = run->run_id};
    size_t fl = train_options_format(o, NULL, 0);
    char *flags_text = malloc(fl + 1);
    if (flags_text) train_options_format(o, flags_text, fl + 1);
    cr.flags = flags_text;
    train_report_config(&run->rep, &cr);
    free(flags_text);
    return run_agree(run, train_report_ok(&run->rep) == 0, "writing metrics.jsonl");
}

/* What runs on what (rank 0 prints it): machine, data, model, optimizer. */
static void print_header(const train_run *run) {
    const train_options *o = &run->o;
    const int W = run->world, T = o->context;
    const gptx_dataloader_info *ti = &run->ti;
    printf("gptx-train %s | backend %s, %d threads, precision %s\n", gptx_version(),
           gptx_context_backend_name(run->ctx), gptx_context_num_threads(run->ctx),
           gptx_precision_name(gptx_context_precision(run->ctx)));
    if (run->text_tokens) /* the whole text's count: what gptx-eval and -tokenize print */
        printf("text %s: %lld tokens (GPT-2 BPE; <|endoftext|>: %s)%s\n", run->data_name,
               (long long)run->text_tokens, o->special_tokens,
               run->text_docs ? "" : "; as one text, no <|endoftext|> added (a run saved "
                                     "before gptx 0.6)");
    if (run->text_tokens && run->text_docs) {
        printf("documents: %lld, each after <|endoftext|>; validation: ", (long long)run->n_docs);
        if (run->val_docs)
            printf("the last %lld (by path%s)\n", (long long)run->val_docs,
                   o->doc_separator ? ", then place in the file" : "");
        else
            printf("the tail of the tokens\n");
    }
    printf("data %s: %lld training tokens, %lld windows of %d+1, %lld batches/epoch%s\n",
           run->data_name, (long long)ti->total_tokens, (long long)ti->total_windows, T,
           (long long)ti->batches_per_epoch,
           run->val ? "" : " (no validation data: --val-shards gives a validation loss)");
    if (isfinite(run->unigram))
        printf("unigram baseline on the validation %s: loss %.4f (training-token "
               "frequencies, no context)\n", o->train_shards ? "shards" : "text", run->unigram);
    printf("model: %d layers, %d heads, width %d, context %d, vocab %d padded to %d, %zu parameters\n",
           o->layers, o->heads, o->width, T, o->vocab_size, o->padded_vocab,
           gptx_model_num_parameters(run->model));
    printf("optimizer: AdamW lr %g (%s after %d warm-up steps, to %g x), wd %g, clip %g | "
           "%d x %d tokens x %d accumulation = %lld tokens/step%s, %lld steps%s\n",
           (double)o->lr, schedule_name(o->schedule), o->warmup, (double)o->min_lr_frac,
           (double)o->weight_decay, (double)o->grad_clip, o->batch, T, o->grad_accum,
           (long long)o->batch * T * o->grad_accum, W > 1 && !o->rank_invariant ? " per rank" : "",
           (long long)run->total_steps, o->resume ? " (resumed)" : "");
    if (o->resume) printf("resumed from %s at step %lld\n", o->resume, (long long)run->step);
    if (o->rank_invariant)
        printf("rank-invariant: each step's %d micro-batches of the one global order are shared "
               "by the %d rank(s) and their gradients added exactly; loss, norm, validation and "
               "the model are the same bits for any number of ranks\n", o->grad_accum, W);
    else if (W > 1)
        printf("data parallel: %d ranks (%s engine, %d on this node), each with its own "
               "share of the windows: global batch %lld rows = %lld tokens/step; batch, "
               "batches/epoch and threads above are per rank, loss, grad norm, tokens and "
               "tokens/s are global%s%s\n",
               W, gptx_comm_engine_name(run->comm), gptx_comm_local_world_size(run->comm),
               (long long)W * o->batch * o->grad_accum, (long long)W * o->batch * T * o->grad_accum,
               o->zero1 ? "; ZeRO-1: optimizer state sharded" : "",
               o->overlap_mib > 0 ? "; gradient buckets overlapped with backward" : "");
    fflush(stdout);
}

/* Every file the run writes in --out-dir must have a path the system
 * takes: checked before the first step, not found at the first save. */
static int out_dir_fits(const train_run *run, const char *out_dir) {
    const char *longest = "/checkpoint-00000000.safetensors"; /* of the run's files */
    size_t n = strlen(out_dir) + strlen(longest);
    if (n < PATH_MAX) return 0;
    if (run->rank == 0)
        fprintf(stderr, "gptx-train: --out-dir %s is %zu bytes long: its %s would be %zu bytes, "
                        "over the system's limit of %d (File name too long)\n",
                out_dir, strlen(out_dir), longest + 1, n, PATH_MAX - 1);
    return -1;
}

/* --out-dir (locked, metrics.jsonl opened: every rank learns whether rank 0
 * could), the timers, the config record and the header lines. */
int run_open_output(train_run *run) {
    const train_options *o = &run->o;
    train_report_claim claim = {run->run_id_unknown ? "" : run->run_id, o->resume, o->overwrite,
                                &run->inputs};
    if (out_dir_fits(run, o->out_dir) != 0) return -1; /* the same on every rank */
    int opened = train_report_open(&run->rep, o->out_dir, o->log_every, run->rank, run->world,
                                   o->resume ? run->step : -1, &claim) == 0;
    if (run_agree(run, opened, "opening --out-dir") != 0) return -1;
    TRY(run, gptx_timer_create(&run->step_timer, run->ctx, GPTX_TIMER_TRAINING_STEPS));
    TRY(run, gptx_timer_create(&run->e2e_timer, run->ctx, GPTX_TIMER_END_TO_END));
    if (write_config(run) != 0) return -1;
    if (run->rank == 0) print_header(run);
    return 0;
}

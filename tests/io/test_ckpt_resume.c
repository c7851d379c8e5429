/* Exact resume (issue 4): on the deterministic CPU backend, 20 training steps
 * in one run and 10 steps + checkpoint + load into FRESH objects + 10 steps
 * give bitwise identical losses, sampled tokens and parameters. Every piece of
 * state goes through the file: weights, AdamW moments, step and
 * hyperparameters, schedule position, tokens seen, both data loaders (the
 * train loader shuffles and crosses an epoch), the sampler.
 * Also: a failing load changes nothing; asking for state the file lacks is an
 * error; a loader refusing its state rolls the other one back. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt_util.h"
#include "safetensors.h"
#include "test_util.h"

enum { B = 2, T = 8, STEPS = 20, HALF = 10, N_TRAIN = 200, N_VAL = 120 };

typedef struct run {
    gptx_model *model;
    gptx_optimizer *opt;
    gptx_dataloader *train, *val;
    gptx_sampler *sampler;
    gptx_train_state st;
} run;

typedef struct trace {
    float loss[STEPS];
    float val_loss[STEPS];
    int32_t sampled[STEPS];
} trace;

static int32_t train_tokens[N_TRAIN], val_tokens[N_VAL];

static float schedule(int64_t step) { /* warmup 3 steps, then cosine to 10% */
    float base = 3e-3f;
    if (step < 3) return base * (float)(step + 1) / 3.0f;
    double p = (double)(step - 3) / (double)(STEPS - 3);
    return base * (float)(0.1 + 0.9 * 0.5 * (1.0 + cos(3.14159265358979 * p)));
}

/* Objects as a fresh process would create them; `other` makes every piece of
 * state differ from run A's, so only the checkpoint can make them agree. */
static int make_run(gptx_context *ctx, run *r, int other, size_t n_val_tokens) {
    memset(r, 0, sizeof *r);
    gptx_model_config c = small_config();
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    if (other) {
        ao.lr = 0.5f;
        ao.beta2 = 0.99f;
        ao.weight_decay = 0.0f;
        ao.decay_policy = GPTX_DECAY_ALL;
        ao.grad_clip = 0.0f;
    }
    gptx_dataloader_options dopt;
    gptx_dataloader_options_init(&dopt);
    dopt.batch_size = B;
    dopt.seq_len = T;
    dopt.shuffle = 1;
    dopt.seed = other ? 999 : 5;
    dopt.prefetch = 1;
    dopt.vocab_size = c.vocab_size;
    gptx_dataloader_options vopt = dopt;
    vopt.shuffle = 0;
    vopt.prefetch = 0;
    gptx_sampler_options so;
    gptx_sampler_options_init(&so);
    so.seed = other ? 1 : 77;
    so.stream = other ? 0 : 3;
    REQUIRE_OK(gptx_model_create(&r->model, ctx, &c));
    REQUIRE_OK(gptx_model_init_random(r->model, other ? 1234 : 11));
    REQUIRE_OK(gptx_optimizer_create(&r->opt, r->model, &ao));
    REQUIRE_OK(gptx_dataloader_create_from_tokens(&r->train, ctx, train_tokens, N_TRAIN, &dopt));
    REQUIRE_OK(gptx_dataloader_create_from_tokens(&r->val, ctx, val_tokens, n_val_tokens, &vopt));
    REQUIRE_OK(gptx_sampler_create(&r->sampler, &so));
    gptx_train_state_init(&r->st);
    r->st.optimizer = r->opt;
    r->st.sampler = r->sampler;
    r->st.train_loader = r->train;
    r->st.val_loader = r->val;
    if (other) {
        r->st.lr_schedule_step = 555;
        r->st.tokens_seen = 7;
    }
    return 0;
}

static void free_run(run *r) {
    gptx_sampler_destroy(r->sampler);
    gptx_dataloader_destroy(r->train);
    gptx_dataloader_destroy(r->val);
    gptx_optimizer_destroy(r->opt);
    gptx_model_destroy(r->model);
    memset(r, 0, sizeof *r);
}

/* One training step as a trainer would do it; every 5th step also evaluates
 * one validation batch and samples a token from its logits. */
static int train_step(run *r, trace *tr, int i) {
    const int32_t *x, *y;
    int rows;
    int64_t step = r->st.lr_schedule_step;
    REQUIRE_OK(gptx_optimizer_set_lr(r->opt, schedule(step)));
    REQUIRE_OK(gptx_dataloader_next(r->train, &x, &y, &rows, NULL));
    REQUIRE_OK(gptx_model_zero_grad(r->model));
    REQUIRE_OK(gptx_model_forward(r->model, x, y, rows, T, &tr->loss[i]));
    REQUIRE_OK(gptx_model_backward(r->model, 1.0f));
    REQUIRE_OK(gptx_optimizer_step(r->opt, r->model, NULL));
    r->st.lr_schedule_step++;
    r->st.tokens_seen += (int64_t)rows * T;
    tr->val_loss[i] = -1.0f;
    tr->sampled[i] = -1;
    if (i % 5 == 4) {
        REQUIRE_OK(gptx_dataloader_next(r->val, &x, &y, &rows, NULL));
        REQUIRE_OK(gptx_model_forward(r->model, x, y, rows, T, &tr->val_loss[i]));
        gptx_model_config c = small_config();
        size_t n = (size_t)rows * T * (size_t)c.padded_vocab_size;
        float *logits = malloc(n * sizeof *logits);
        REQUIRE_OK(gptx_model_get_logits(r->model, logits, n));
        int rc = gptx_sampler_sample(r->sampler, logits, c.padded_vocab_size, c.vocab_size,
                                     &tr->sampled[i]);
        free(logits);
        REQUIRE_OK(rc);
    }
    return 0;
}

static void test_exact_resume(gptx_context *ctx, const scratch_dir *dir) {
    const char *path = scratch_file(dir, "resume.safetensors");
    trace ta, tb;
    memset(&ta, 0, sizeof ta);
    memset(&tb, 0, sizeof tb);
    run a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    /* A: 20 steps straight */
    if (make_run(ctx, &a, 0, N_VAL)) goto fail;
    for (int i = 0; i < STEPS; i++)
        if (train_step(&a, &ta, i)) goto fail;
    /* B: 10 steps, checkpoint, everything destroyed */
    if (make_run(ctx, &b, 0, N_VAL)) goto fail;
    for (int i = 0; i < HALF; i++)
        if (train_step(&b, &tb, i)) goto fail;
    CHECK_OK(gptx_checkpoint_save(b.model, &b.st, path));
    free_run(&b);
    /* ... fresh objects with other weights, options, seeds and positions */
    if (make_run(ctx, &b, 1, N_VAL)) goto fail;
    CHECK_OK(gptx_checkpoint_load(b.model, &b.st, path));
    CHECK(b.st.lr_schedule_step == HALF);
    CHECK(b.st.tokens_seen == (int64_t)HALF * B * T);
    int64_t step = -1;
    CHECK_OK(gptx_optimizer_get_step(b.opt, &step));
    CHECK(step == HALF);
    for (int i = HALF; i < STEPS; i++)
        if (train_step(&b, &tb, i)) goto fail;

    CHECK(memcmp(ta.loss + HALF, tb.loss + HALF, (STEPS - HALF) * sizeof(float)) == 0);
    CHECK(memcmp(ta.val_loss + HALF, tb.val_loss + HALF, (STEPS - HALF) * sizeof(float)) == 0);
    CHECK(memcmp(ta.sampled + HALF, tb.sampled + HALF, (STEPS - HALF) * sizeof(int32_t)) == 0);
    CHECK(same_params(a.model, b.model));
    CHECK_OK(gptx_optimizer_get_step(b.opt, &step));
    CHECK(step == STEPS);
    CHECK(a.st.tokens_seen == b.st.tokens_seen && a.st.lr_schedule_step == b.st.lr_schedule_step);
    gptx_dataloader_state sa, sb;
    gptx_dataloader_state_init(&sa);
    gptx_dataloader_state_init(&sb);
    CHECK_OK(gptx_dataloader_get_state(a.train, &sa));
    CHECK_OK(gptx_dataloader_get_state(b.train, &sb));
    CHECK(sa.epoch == sb.epoch && sa.batch == sb.batch && sa.seed == sb.seed);
    CHECK(sa.epoch >= 1); /* the run crossed an epoch (reshuffle) */
    for (int i = HALF; i < STEPS; i++)
        if (ta.loss[i] != tb.loss[i])
            fprintf(stderr, "step %d: loss %.9g (one run) vs %.9g (resumed)\n", i, (double)ta.loss[i],
                    (double)tb.loss[i]);
    printf("resume: step %d loss %.7f in both runs; final parameters bitwise equal: %s\n", STEPS - 1,
           (double)tb.loss[STEPS - 1], same_params(a.model, b.model) ? "yes" : "NO");
    free_run(&a);
    free_run(&b);
    return;
fail:
    check_failures++;
    free_run(&a);
    free_run(&b);
}

/* Snapshot of everything a load may change. */
typedef struct snapshot {
    float *params;
    size_t n;
    int64_t step, sched, tokens;
    float lr;
    gptx_dataloader_state train, val;
    gptx_sampler_state sampler;
} snapshot;

static void take(run *r, snapshot *s) {
    s->params = all_params(r->model, &s->n);
    gptx_optimizer_get_step(r->opt, &s->step);
    gptx_optimizer_get_lr(r->opt, &s->lr);
    s->sched = r->st.lr_schedule_step;
    s->tokens = r->st.tokens_seen;
    gptx_dataloader_state_init(&s->train);
    gptx_dataloader_state_init(&s->val);
    gptx_sampler_state_init(&s->sampler);
    gptx_dataloader_get_state(r->train, &s->train);
    gptx_dataloader_get_state(r->val, &s->val);
    gptx_sampler_get_state(r->sampler, &s->sampler);
}

static int unchanged(run *r, const snapshot *before) {
    snapshot now;
    take(r, &now);
    int same = now.n == before->n && memcmp(now.params, before->params, now.n * sizeof(float)) == 0 &&
               now.step == before->step && now.lr == before->lr && now.sched == before->sched &&
               now.tokens == before->tokens && now.train.epoch == before->train.epoch &&
               now.train.batch == before->train.batch && now.train.seed == before->train.seed &&
               now.val.batch == before->val.batch && now.sampler.counter == before->sampler.counter &&
               now.sampler.seed == before->sampler.seed;
    free(now.params);
    return same;
}

/* Offset of a tensor's data in the file. */
static long data_offset(const char *path, const char *name) {
    gptx_st_file f;
    if (gptx_st_open(&f, path) != GPTX_OK) return -1;
    const gptx_st_tensor *t = gptx_st_find(&f, name);
    long off = t ? (long)(f.data_start + t->begin) : -1;
    gptx_st_close(&f);
    return off;
}

static void test_failed_load_changes_nothing(gptx_context *ctx, const scratch_dir *dir) {
    const char *good = scratch_file(dir, "good.safetensors");
    const char *bad = scratch_file(dir, "nan_moment.safetensors");
    run a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    trace tr;
    if (make_run(ctx, &a, 0, N_VAL)) goto fail;
    for (int i = 0; i < 5; i++)
        if (train_step(&a, &tr, i)) goto fail;
    CHECK_OK(gptx_checkpoint_save(a.model, &a.st, good));
    /* one NaN in the last tensor of the file */
    size_t n = 0;
    unsigned char *bytes = read_all(good, &n);
    long off = data_offset(good, "optimizer.v.ln_f.bias");
    CHECK(bytes && off > 0);
    if (!bytes || off <= 0) goto fail;
    memset(bytes + off + 4, 0xff, 4);
    CHECK(write_all(bad, bytes, n) == 0);
    free(bytes);

    if (make_run(ctx, &b, 1, N_VAL)) goto fail;
    snapshot before;
    take(&b, &before);
    /* the non-finite check behind the checksum (which catches this edit first:
     * test_ckpt_integrity) */
    setenv("GPTX_SKIP_CHECKSUMS", "1", 1);
    CHECK_STATUS(gptx_checkpoint_load(b.model, &b.st, bad), GPTX_ERR_NON_FINITE);
    unsetenv("GPTX_SKIP_CHECKSUMS");
    CHECK_MSG("optimizer.v.ln_f.bias");
    CHECK(unchanged(&b, &before));

    /* the val loader refuses the saved position (it has fewer batches): the
     * train loader, already set, is put back; nothing else changes */
    run c;
    if (make_run(ctx, &c, 1, 20)) goto fail_c;
    snapshot before_c;
    take(&c, &before_c);
    CHECK_STATUS(gptx_checkpoint_load(c.model, &c.st, good), GPTX_ERR_INVALID);
    CHECK_MSG("batch");
    CHECK(unchanged(&c, &before_c));
    free(before_c.params);
fail_c:
    free_run(&c);

    /* state that is asked for must be in the file */
    const char *model_only = scratch_file(dir, "model_only.safetensors");
    CHECK_OK(gptx_model_save(a.model, model_only));
    CHECK_STATUS(gptx_checkpoint_load(b.model, &b.st, model_only), GPTX_ERR_NOT_FOUND);
    CHECK_MSG("optimizer state");
    CHECK(unchanged(&b, &before));
    const char *no_sampler = scratch_file(dir, "no_sampler.safetensors");
    gptx_train_state st = a.st;
    st.sampler = NULL;
    st.val_loader = NULL;
    CHECK_OK(gptx_checkpoint_save(a.model, &st, no_sampler));
    CHECK_STATUS(gptx_checkpoint_load(b.model, &b.st, no_sampler), GPTX_ERR_NOT_FOUND);
    CHECK_MSG("sampler");
    CHECK(unchanged(&b, &before));
    /* ... and what the file has but the caller does not ask for is skipped */
    st = b.st;
    st.sampler = NULL;
    st.val_loader = NULL;
    CHECK_OK(gptx_checkpoint_load(b.model, &st, no_sampler));
    CHECK(same_params(a.model, b.model));
    /* a model file loads with only the model */
    CHECK_OK(gptx_checkpoint_load(b.model, NULL, model_only));
    /* weights only from a training checkpoint */
    gptx_model *m = NULL;
    CHECK_OK(gptx_model_load(&m, ctx, good));
    CHECK(m && same_params(a.model, m));
    gptx_model_destroy(m);
    /* an optimizer that belongs to another model */
    st = b.st;
    st.optimizer = a.opt;
    CHECK_STATUS(gptx_checkpoint_load(b.model, &st, good), GPTX_ERR_MISMATCH);
    /* an older, shorter train state struct: the fields it has are restored */
    gptx_train_state old;
    gptx_train_state_init(&old);
    old.struct_size = offsetof(gptx_train_state, tokens_seen);
    old.lr_schedule_step = -1;
    old.tokens_seen = -1;
    CHECK_OK(gptx_checkpoint_load(b.model, &old, good));
    CHECK(old.lr_schedule_step == 5 && old.tokens_seen == -1);
    free(before.params);
    free_run(&a);
    free_run(&b);
    return;
fail:
    check_failures++;
    free_run(&a);
    free_run(&b);
}

int main(void) {
    gptx_model_config c = small_config();
    fill_tokens(train_tokens, N_TRAIN, c.vocab_size, 1);
    fill_tokens(val_tokens, N_VAL, c.vocab_size, 2);
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 2));
    scratch_dir dir;
    if (scratch_make(&dir, "resume") != 0) return 1;
    test_exact_resume(ctx, &dir);
    test_failed_load_changes_nothing(ctx, &dir);
    scratch_remove(&dir);
    gptx_context_destroy(ctx);
    return check_exit("test_ckpt_resume");
}

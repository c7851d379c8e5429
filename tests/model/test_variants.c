/* Every kernel variant of the ablation ladder computes the same function as
 * the default fast path: same logits, loss, gradients and parameters after
 * a few AdamW steps, within a stated tolerance (float32 rounding in a
 * different order), and bitwise where the arithmetic is identical. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gptx/gptx_experimental.h>

#include "check.h"
#include "context.h"
#include "test_util.h"

#define STEPS 3

/* Each variant is the backend's own op in the instance's table, not the
 * production one: the same function computed another way (the checks above
 * cannot tell a variant that silently ran the default). */
static void check_instance_tables(const gptx_context_options *o) {
    gptx_context *ctx = NULL;
    CHECK_OK(gptx_context_create(&ctx, o));
    const gptx_backend_ops *b = ctx->ops;
    gptx_backend_ops inst;
    gptx_kernel_variants v;
    CHECK_OK(gptx_context_instance_ops(ctx, &inst, &v));
    CHECK(memcmp(&inst, b, sizeof inst) == 0); /* no variant: the context's table */
    CHECK_OK(gptx_context_set_variant(ctx, GPTX_VARIANT_ATTENTION, GPTX_ATTENTION_NAIVE));
    CHECK_OK(gptx_context_set_variant(ctx, GPTX_VARIANT_FUSED_QKV, 0));
    CHECK_OK(gptx_context_set_variant(ctx, GPTX_VARIANT_FUSED_NORM_GELU, 0));
    CHECK_OK(gptx_context_set_variant(ctx, GPTX_VARIANT_FUSED_ADAMW, 0));
    CHECK_OK(gptx_context_instance_ops(ctx, &inst, &v));
    CHECK(inst.attention_forward != b->attention_forward);
    CHECK(inst.attention_backward != b->attention_backward);
    CHECK(inst.qkv_forward != b->qkv_forward && inst.qkv_backward != b->qkv_backward);
    CHECK(inst.layernorm_forward != b->layernorm_forward);
    CHECK(inst.residual_layernorm_forward != b->residual_layernorm_forward);
    CHECK(inst.matmul_gelu_forward != b->matmul_gelu_forward);
    CHECK(inst.matmul_backward_dgelu != b->matmul_backward_dgelu);
    CHECK(inst.adamw != b->adamw);
    CHECK(inst.matmul_forward == b->matmul_forward); /* what no variant touches stays */
    gptx_context_destroy(ctx);
}

typedef struct {
    int attention, fused_qkv, fused_norm_gelu, fused_adamw;
} variants;

static const variants defaults = {GPTX_ATTENTION_FLASH, 1, 1, 1};

typedef struct {
    float logits_first[2 * 16 * 64];
    float losses[STEPS];
    float *grads;  /* after the first backward */
    float *params; /* after STEPS steps */
    size_t n;
} run_result;

static void read_all(gptx_model *m, float *dst, int grads) {
    size_t off = 0;
    for (int i = 0; i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(m, i, &info);
        if (grads) gptx_model_get_gradient(m, info.name, dst + off, info.numel);
        else gptx_model_get_parameter(m, info.name, dst + off, info.numel);
        off += info.numel;
    }
}

static int run(const gptx_context_options *co, const variants *v, run_result *r) {
    gptx_context *ctx = NULL;
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    int rc = gptx_context_create(&ctx, co);
    if (!rc) rc = gptx_context_set_variant(ctx, GPTX_VARIANT_ATTENTION, v->attention);
    if (!rc) rc = gptx_context_set_variant(ctx, GPTX_VARIANT_FUSED_QKV, v->fused_qkv);
    if (!rc) rc = gptx_context_set_variant(ctx, GPTX_VARIANT_FUSED_NORM_GELU, v->fused_norm_gelu);
    if (!rc) rc = gptx_context_set_variant(ctx, GPTX_VARIANT_FUSED_ADAMW, v->fused_adamw);
    gptx_model_config c = small_config(); /* vocab 50 padded to 64, T 16, C 16, 2 heads */
    c.n_embd = 24;
    c.n_head = 3;
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = 1e-2f;
    if (!rc) rc = gptx_model_create(&m, ctx, &c);
    if (!rc) rc = gptx_model_init_random(m, 77);
    if (!rc) rc = gptx_optimizer_create(&opt, m, &ao);
    if (rc) {
        fprintf(stderr, "set-up failed: %s\n", gptx_last_error());
        return rc;
    }
    r->n = gptx_model_num_parameters(m);
    r->grads = malloc(r->n * sizeof(float));
    r->params = malloc(r->n * sizeof(float));
    int32_t in[32], tg[32];
    fill_tokens(in, 32, c.vocab_size, 3);
    fill_tokens(tg, 32, c.vocab_size, 4);
    tg[5] = GPTX_IGNORE_INDEX;
    for (int s = 0; s < STEPS && !rc; s++) {
        rc = gptx_model_zero_grad(m);
        if (!rc) rc = gptx_model_forward(m, in, tg, 2, 16, &r->losses[s]);
        if (!rc && s == 0) rc = gptx_model_get_logits(m, r->logits_first, 2 * 16 * 64);
        if (!rc) rc = gptx_model_backward(m, 1.0f);
        if (!rc && s == 0) read_all(m, r->grads, 1);
        if (!rc) rc = gptx_optimizer_step(opt, m, NULL);
    }
    if (!rc) read_all(m, r->params, 0);
    /* a second, smaller batch with a longer T reuses the buffers correctly */
    if (!rc) rc = gptx_model_forward(m, in, tg, 1, 16, NULL);
    if (!rc) rc = gptx_model_forward(m, in, tg, 4, 8, NULL);
    if (rc) fprintf(stderr, "run failed: %s\n", gptx_last_error());
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return rc;
}

static double max_rel(const float *a, const float *b, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(a[i]) || isinf(b[i])) {
            if (a[i] != b[i]) return INFINITY;
            continue;
        }
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return worst / fmax(scale, 1e-12);
}

int main(void) {
    gptx_context_options base;
    gptx_context_options_init(&base);
    base.backend = GPTX_BACKEND_CPU;
    base.num_threads = 2;
    run_result ref;
    if (run(&base, &defaults, &ref)) return 1;

    struct { const char *name; variants v; double tol; } v[] = {
        {"naive attention", {GPTX_ATTENTION_NAIVE, 1, 1, 1}, 1e-5},
        {"separate Q, K, V", {GPTX_ATTENTION_FLASH, 0, 1, 1}, 1e-5},
        {"step-by-step LayerNorm/GELU", {GPTX_ATTENTION_FLASH, 1, 0, 1}, 1e-5},
        {"unfused AdamW", {GPTX_ATTENTION_FLASH, 1, 1, 0}, 0.0}, /* identical arithmetic */
        {"all unfused", {GPTX_ATTENTION_NAIVE, 0, 0, 0}, 1e-5},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        run_result r;
        if (run(&base, &v[i].v, &r)) { check_failures++; continue; }
        double e_logits = max_rel(r.logits_first, ref.logits_first, 2 * 16 * 64);
        double e_loss = max_rel(r.losses, ref.losses, STEPS);
        double e_grads = max_rel(r.grads, ref.grads, ref.n);
        double e_params = max_rel(r.params, ref.params, ref.n);
        printf("%-30s logits %.1e  losses %.1e  grads %.1e  params after %d steps %.1e  (tol %.0e)\n",
               v[i].name, e_logits, e_loss, e_grads, STEPS, e_params, v[i].tol);
        CHECK(e_logits <= v[i].tol && e_loss <= v[i].tol && e_grads <= v[i].tol &&
              e_params <= v[i].tol * 10);
        free(r.grads);
        free(r.params);
    }
    /* invalid keys and values are rejected and change nothing; a variant set
     * after a model exists applies to the next model only */
    gptx_context *ctx = NULL;
    CHECK_OK(gptx_context_create(&ctx, &base));
    int value = -1;
    CHECK_STATUS(gptx_context_set_variant(ctx, GPTX_VARIANT_ATTENTION, 5), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_context_set_variant(ctx, GPTX_VARIANT_FUSED_QKV, 2), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_context_set_variant(ctx, 99, 0), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_context_get_variant(ctx, 0, &value), GPTX_ERR_INVALID);
    CHECK_OK(gptx_context_get_variant(ctx, GPTX_VARIANT_ATTENTION, &value));
    CHECK(value == GPTX_ATTENTION_FLASH);
    CHECK_OK(gptx_context_get_variant(ctx, GPTX_VARIANT_FUSED_QKV, &value));
    CHECK(value == 1);
    gptx_model_config c = small_config();
    gptx_model *flash = NULL, *naive = NULL;
    /* attention tile configurations: 0..64 accepted by the context, refused by
     * the cpu backend at model creation (they belong to the cuda backend) */
    CHECK_STATUS(gptx_context_set_variant(ctx, GPTX_VARIANT_ATTENTION_TILES, 65), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_context_set_variant(ctx, GPTX_VARIANT_ATTENTION_TILES, -1), GPTX_ERR_INVALID);
    CHECK_OK(gptx_context_set_variant(ctx, GPTX_VARIANT_ATTENTION_TILES, 2));
    CHECK_OK(gptx_context_get_variant(ctx, GPTX_VARIANT_ATTENTION_TILES, &value));
    CHECK(value == 2);
    CHECK_STATUS(gptx_model_create(&flash, ctx, &c), GPTX_ERR_UNSUPPORTED);
    CHECK(strstr(gptx_last_error(), "tile configuration 2") != NULL);
    CHECK_OK(gptx_context_set_variant(ctx, GPTX_VARIANT_ATTENTION_TILES, 0));
    CHECK_OK(gptx_model_create(&flash, ctx, &c));
    CHECK_OK(gptx_context_set_variant(ctx, GPTX_VARIANT_ATTENTION, GPTX_ATTENTION_NAIVE));
    CHECK_OK(gptx_model_create(&naive, ctx, &c));
    gptx_memory_stats m0, m1, m2;
    gptx_memory_stats_init(&m0);
    gptx_memory_stats_init(&m1);
    gptx_memory_stats_init(&m2);
    int32_t in[16] = {0};
    /* the naive model keeps (B, NH, T, T) probabilities: its activations
     * take more memory than the flash model's */
    CHECK_OK(gptx_context_memory(ctx, &m0));
    CHECK_OK(gptx_model_forward(flash, in, NULL, 1, 16, NULL));
    CHECK_OK(gptx_context_memory(ctx, &m1));
    CHECK_OK(gptx_model_forward(naive, in, NULL, 1, 16, NULL));
    CHECK_OK(gptx_context_memory(ctx, &m2));
    CHECK(m2.allocated - m1.allocated > m1.allocated - m0.allocated);
    gptx_model_destroy(flash);
    gptx_model_destroy(naive);
    gptx_context_destroy(ctx);
    check_instance_tables(&base);
    free(ref.grads);
    free(ref.params);
    return check_exit("test_variants");
}

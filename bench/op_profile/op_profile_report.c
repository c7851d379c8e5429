#include "op_profile_report.h"

#include <stdio.h>
#include <string.h>

/* Which weight a product multiplies, from its shape (the op's C and OC). */
static const char *product_role(const op_report *r, int c, int oc) {
    int C = r->C;
    if (oc == r->Vp) return "lm_head";
    if (c == C && oc == 3 * C) return "attn.c_attn";
    if (c == C && oc == C) return "attn.c_proj";
    if (c == C && oc == 4 * C) return "mlp.c_fc";
    if (c == 4 * C && oc == C) return "mlp.c_proj";
    return "?";
}

static double ms_per_step(const op_report *r, double seconds) { return 1e3 * seconds / r->steps; }

static double pct_of_step(const op_report *r, double seconds) {
    return 100.0 * seconds / r->steps / r->step_seconds;
}

/* "%10.1f" GFLOP/s, or blanks where no flops are counted. */
static void print_rate(double flops, double seconds) {
    if (flops > 0 && seconds > 0) printf(" %9.1f", flops / seconds * 1e-9);
    else printf(" %9s", "");
}

void op_report_by_op(const op_report *r) {
    printf("%-48s %9s %7s %10s %9s\n", "op (product: weight, C x OC)", "ms/step", "% step",
           "calls/step", "GFLOP/s");
    for (int i = 0; i < r->nlines; i++) {
        const gptx_op_stat *s = &r->lines[i];
        char name[96];
        if (s->c || s->oc)
            snprintf(name, sizeof name, "%s %s %dx%d", s->op, product_role(r, s->c, s->oc), s->c,
                     s->oc);
        else
            snprintf(name, sizeof name, "%s", s->op);
        printf("%-48s %9.2f %6.1f%% %10.1f", name, ms_per_step(r, s->seconds),
               pct_of_step(r, s->seconds), (double)s->calls / r->steps);
        print_rate(s->flops, s->seconds);
        printf("\n");
    }
}

/* The ops of each group (table entries of lib/core/backend.h). */
typedef struct op_group {
    const char *name;
    const char *ops[11];
} op_group;

static const op_group groups[] = {
    {"products (bias, and GELU where fused, included)",
     {"matmul_forward", "matmul_backward", "qkv_forward", "qkv_backward", "matmul_gelu_forward",
      "matmul_backward_dgelu"}},
    {"attention forward", {"attention_forward", "attention_kv_forward"}},
    {"attention backward", {"attention_backward"}},
    {"LayerNorm (with the residual add it fuses)",
     {"layernorm_forward", "layernorm_backward", "residual_layernorm_forward",
      "layernorm_backward_act"}},
    {"cross-entropy and loss sum",
     {"crossentropy_forward", "crossentropy_backward", "crossentropy_fused", "sum_to_host"}},
    {"gradient norm and AdamW (with the weight copy where fused)",
     {"sum_squares_to_host", "grad_sumsq", "adamw", "adamw_copy"}},
    {"embedding", {"embedding_forward", "embedding_backward"}},
    {"elementwise (GELU, residual, residual to act)",
     {"gelu_forward", "gelu_backward", "residual_forward", "act_from_res"}},
    {"copies and fills (ids, zero_grad, weight copy)",
     {"upload_f32", "download_f32", "upload_i32", "fill_f32", "download_act", "fill_act",
      "convert_weights", "upload_param", "download_param", "fill_param", "grad_overwrite"}},
};
enum { NGROUPS = sizeof groups / sizeof groups[0] };

/* The group of op, NGROUPS for one no group names (a newer table entry). */
static int group_of(const char *op) {
    for (int g = 0; g < NGROUPS; g++)
        for (int k = 0; k < 11 && groups[g].ops[k]; k++)
            if (!strcmp(groups[g].ops[k], op)) return g;
    return NGROUPS;
}

static void print_group(const op_report *r, const char *name, double seconds, double flops) {
    printf("%-48s %9.2f %6.1f%%", name, ms_per_step(r, seconds), pct_of_step(r, seconds));
    print_rate(flops, seconds);
    printf("\n");
}

void op_report_by_group(const op_report *r) {
    double sec[NGROUPS + 1] = {0}, flops[NGROUPS + 1] = {0}, total = 0.0;
    for (int i = 0; i < r->nlines; i++) {
        int g = group_of(r->lines[i].op);
        sec[g] += r->lines[i].seconds;
        flops[g] += r->lines[i].flops;
        total += r->lines[i].seconds;
    }
    printf("%-48s %9s %7s %9s\n", "group", "ms/step", "% step", "GFLOP/s");
    for (int g = 0; g < NGROUPS; g++) print_group(r, groups[g].name, sec[g], flops[g]);
    if (sec[NGROUPS] > 0) print_group(r, "other ops", sec[NGROUPS], flops[NGROUPS]);
    print_group(r, "sum of the ops", total, 0.0);
    print_group(r, "outside the ops (step - sum)", r->steps * r->step_seconds - total, 0.0);
}

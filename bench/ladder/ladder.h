/* Types shared by the parts of gptx-bench (the ablation ladder): the model
 * shape, one kernel variant, one row of the table and what running it gave. */
#ifndef GPTX_BENCH_LADDER_H
#define GPTX_BENCH_LADDER_H

#include <stddef.h>
#include <stdint.h>

/* Model shape of a --config preset. */
typedef struct {
    const char *name;
    int vocab, padded_vocab; /* padded_vocab is used only by rows with the padded-vocab change */
    int seq, layers, heads, width, batch;
} ladder_shape;

/* Which implementation each part of a training step uses. */
typedef struct {
    int attention;       /* GPTX_ATTENTION_NAIVE or GPTX_ATTENTION_FLASH */
    int fused_qkv;       /* 0/1, as GPTX_VARIANT_FUSED_QKV (gptx_experimental.h) */
    int fused_norm_gelu; /* 0/1 */
    int fused_adamw;     /* 0/1 */
    int fused_ce;        /* 0/1: gptx_model_forward_backward instead of forward, then backward */
    int padded_vocab;    /* 1 = vocab rows padded to shape.padded_vocab, padded logits masked */
    int batch_mult;      /* rows per step = batch_mult * shape.batch */
    int precision;       /* gptx_precision of the context: FP32, BF16 or BF16_PURE */
} ladder_variant;

/* One row of the table: a variant, or a row that cannot run here (n/a). */
typedef struct {
    const char *key;   /* stable id shared with bench/torch_ladder.py: "fused_qkv", ... */
    char label[48];    /* "+ flash attention", "flash attention alone", ... */
    char change[96];   /* what differs from the row it is measured against */
    ladder_variant v;
    int available;     /* 0 = n/a; na_reason says why */
    const char *na_reason;
    int is_baseline;
    /* Numerics tolerance against the baseline: the sum of the tolerances
     * of the changes the row contains (errors of independent reorderings add). */
    double logits_tol; /* max |logit - baseline logit| */
    double loss_tol;   /* |eval loss after N steps - baseline's|; < 0 = not comparable */
} ladder_row;

/* What running one row measured. */
typedef struct {
    int ran;     /* the row ran to the end (no set-up or step error) */
    int finite;  /* every training loss and the eval loss were finite */
    int pass;    /* ran, finite and numerics within tolerance */
    int B;       /* rows per step */
    int threads; /* the context's thread count */
    int64_t tokens_per_step;
    double create_s;      /* context + model + init + optimizer + timer */
    double first_step_s;  /* the timer's cold interval */
    double cold_start_s;  /* create_s + first step, on one clock */
    double tps_median, tps_min, tps_max; /* over the repeats (tokens / second) */
    double repeat_median_s;              /* seconds per repeat of the timed steps */
    int64_t repeats;
    uint64_t peak_bytes;  /* gptx_context_memory peak */
    double eval_loss;     /* on the held-out batch after all training steps */
    double loss_diff;     /* |eval_loss - baseline eval_loss| */
    double logits_max_abs, logits_max_rel; /* fresh model, held-out batch, first vocab columns */
    char error[256];      /* why the row failed, "" if it did not */
} ladder_result;

/* Run parameters shared by every row. */
typedef struct {
    ladder_shape shape;
    const char *mode; /* "cumulative" or "isolated" */
    int threads;      /* context num_threads (0 = all online cores) */
    int warmup;       /* untimed steps after the cold first step */
    int steps;        /* timed steps per repeat */
    int repeats;      /* repeats of the timed steps */
    uint64_t seed;    /* gptx_model_init_random seed, the same for every row */
    double tolerance_scale; /* multiplies every tolerance (1; 0 = exact, to test the FAIL path) */
} ladder_params;

/* Training steps per row: the cold one, the warm-up ones, the timed ones. */
static inline int64_t ladder_total_steps(const ladder_params *p) {
    return 1 + (int64_t)p->warmup + (int64_t)p->repeats * p->steps;
}

#endif

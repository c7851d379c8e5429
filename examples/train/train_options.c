#include "train_options.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptx/gptx.h"
#include "prog_data.h"


static void usage(void) {
    printf(
        "usage: gptx-train [options]\n"
        "Trains a GPT-2-style model. With no options: a tiny model on the bundled\n"
        "the-verdict.txt on the CPU, then a sample continuation of the prompt.\n"
        "\n"
        "data:\n"
        "  --text FILE            text to train on, GPT-2 BPE tokens (default %s/the-verdict.txt)\n"
        "  --val-fraction X       tail of the text held out for validation (default 0.1)\n"
        "  --train-shards A,B     llm.c token shards to train on instead of --text\n"
        "  --val-shards A,B       llm.c token shards for validation (with --train-shards)\n"
        "  --encoder FILE         GPT-2 encoder.json (default %s/gpt2/encoder.json)\n"
        "  --vocab FILE           GPT-2 vocab.bpe (default %s/gpt2/vocab.bpe)\n"
        "model:\n"
        "  --preset NAME          tiny (4 layers, 4 heads, width 128; default), small\n"
        "                         (6, 6, 384), gpt2-124M (12, 12, 768)\n"
        "  --layers N --heads N --width N   override the preset\n"
        "  --context N            tokens per row T, also the context length (default 64;\n"
        "                         gpt2-124M: 1024)\n"
        "  --vocab-size N         real vocabulary (default 50257, the tokenizer's)\n"
        "  --padded-vocab N       rows of wte/lm_head, masked in the softmax (default 50304)\n"
        "optimization:\n"
        "  --batch N              rows per micro-batch B (default 8)\n"
        "  --grad-accum N         micro-batches per optimizer step (default 1)\n"
        "  --steps N              optimizer steps (default 300)\n"
        "  --epochs N             instead of --steps: passes over the training windows\n"
        "  --lr X                 peak learning rate (default 1e-3)\n"
        "  --lr-schedule NAME     cosine (default), linear or constant after warm-up\n"
        "  --warmup N             linear warm-up steps (default 20)\n"
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
        "  --resume FILE          continue from a training checkpoint\n"
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
        "                         backward (default 0; not with --zero1)\n",
        prog_data_dir(), prog_data_dir(), prog_data_dir());
}

static int bad(const char *flag, const char *value, const char *why) {
    fprintf(stderr, "gptx-train: %s %s: %s (see --help)\n", flag, value, why);
    return -1;
}

static int parse_int(const char *flag, const char *v, int lo, int *out) {
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!end || *end || errno || x < lo || x > 1000000000L) {
        char why[64];
        snprintf(why, sizeof why, "expected an integer >= %d", lo);
        return bad(flag, v, why);
    }
    *out = (int)x;
    return 0;
}

static int parse_float(const char *flag, const char *v, double lo, double hi, float *out) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (!end || *end || errno || !isfinite(x) || x < lo || x > hi) {
        char why[96];
        snprintf(why, sizeof why, "expected a number in [%g, %g]", lo, hi);
        return bad(flag, v, why);
    }
    *out = (float)x;
    return 0;
}

int train_options_parse(train_options *o, int argc, char **argv) {
    *o = (train_options){
        .text = prog_data_path("the-verdict.txt"), .val_fraction = 0.1f,
        .encoder = prog_data_path("gpt2/encoder.json"), .vocab = prog_data_path("gpt2/vocab.bpe"),
        .preset = "tiny", .vocab_size = 50257, .padded_vocab = 50304,
        .batch = 8, .grad_accum = 1, .steps = 300, .warmup = 20, .lr = 1e-3f,
        .min_lr_frac = 0.1f, .weight_decay = 0.1f, .grad_clip = 1.0f, .beta1 = 0.9f,
        .beta2 = 0.95f, .schedule = SCHEDULE_COSINE, .eval_every = 50, .eval_batches = 8,
        .sample_tokens = 48, .top_k = 40, .log_every = 10, .temperature = 0.8f, .top_p = 1.0f,
        .prompt = "Every effort moves you", .out_dir = "out", .checkpoint_every = -1,
        .backend = "cpu", .precision = "default", .threads = 0, .seed = 1337, .comm_timeout = 600};
    int steps_set = 0;
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
        if (i + 1 >= argc) return bad(k, "", "needs a value");
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(k, "--text")) o->text = v;
        else if (!strcmp(k, "--train-shards")) o->train_shards = v;
        else if (!strcmp(k, "--val-shards")) o->val_shards = v;
        else if (!strcmp(k, "--val-fraction")) rc = parse_float(k, v, 0.001, 0.9, &o->val_fraction);
        else if (!strcmp(k, "--encoder")) o->encoder = v;
        else if (!strcmp(k, "--vocab")) o->vocab = v;
        else if (!strcmp(k, "--preset")) o->preset = v;
        else if (!strcmp(k, "--layers")) rc = parse_int(k, v, 1, &o->layers);
        else if (!strcmp(k, "--heads")) rc = parse_int(k, v, 1, &o->heads);
        else if (!strcmp(k, "--width")) rc = parse_int(k, v, 1, &o->width);
        else if (!strcmp(k, "--context")) rc = parse_int(k, v, 2, &o->context);
        else if (!strcmp(k, "--vocab-size")) rc = parse_int(k, v, 1, &o->vocab_size);
        else if (!strcmp(k, "--padded-vocab")) rc = parse_int(k, v, 1, &o->padded_vocab);
        else if (!strcmp(k, "--batch")) rc = parse_int(k, v, 1, &o->batch);
        else if (!strcmp(k, "--grad-accum")) rc = parse_int(k, v, 1, &o->grad_accum);
        else if (!strcmp(k, "--steps")) { rc = parse_int(k, v, 1, &o->steps); steps_set = 1; }
        else if (!strcmp(k, "--epochs")) rc = parse_int(k, v, 1, &o->epochs);
        else if (!strcmp(k, "--warmup")) rc = parse_int(k, v, 0, &o->warmup);
        else if (!strcmp(k, "--lr")) rc = parse_float(k, v, 0.0, 10.0, &o->lr);
        else if (!strcmp(k, "--min-lr-frac")) rc = parse_float(k, v, 0.0, 1.0, &o->min_lr_frac);
        else if (!strcmp(k, "--weight-decay")) rc = parse_float(k, v, 0.0, 10.0, &o->weight_decay);
        else if (!strcmp(k, "--beta1")) rc = parse_float(k, v, 0.0, 0.999999, &o->beta1);
        else if (!strcmp(k, "--beta2")) rc = parse_float(k, v, 0.0, 0.999999, &o->beta2);
        else if (!strcmp(k, "--grad-clip")) rc = parse_float(k, v, 0.0, 1e9, &o->grad_clip);
        else if (!strcmp(k, "--lr-schedule")) {
            if (!strcmp(v, "cosine")) o->schedule = SCHEDULE_COSINE;
            else if (!strcmp(v, "linear")) o->schedule = SCHEDULE_LINEAR;
            else if (!strcmp(v, "constant")) o->schedule = SCHEDULE_CONSTANT;
            else rc = bad(k, v, "expected cosine, linear or constant");
        }
        else if (!strcmp(k, "--eval-every")) rc = parse_int(k, v, 0, &o->eval_every);
        else if (!strcmp(k, "--eval-batches")) rc = parse_int(k, v, 1, &o->eval_batches);
        else if (!strcmp(k, "--sample-every")) rc = parse_int(k, v, 0, &o->sample_every);
        else if (!strcmp(k, "--sample-tokens")) rc = parse_int(k, v, 0, &o->sample_tokens);
        else if (!strcmp(k, "--prompt")) o->prompt = v;
        else if (!strcmp(k, "--temperature")) rc = parse_float(k, v, 0.0, 100.0, &o->temperature);
        else if (!strcmp(k, "--top-k")) rc = parse_int(k, v, 0, &o->top_k);
        else if (!strcmp(k, "--top-p")) rc = parse_float(k, v, 1e-6, 1.0, &o->top_p);
        else if (!strcmp(k, "--log-every")) rc = parse_int(k, v, 1, &o->log_every);
        else if (!strcmp(k, "--out-dir")) o->out_dir = v;
        else if (!strcmp(k, "--checkpoint-every")) rc = parse_int(k, v, -1, &o->checkpoint_every);
        else if (!strcmp(k, "--resume")) o->resume = v;
        else if (!strcmp(k, "--init-from")) o->init_from = v;
        else if (!strcmp(k, "--backend")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto"))
                rc = bad(k, v, "expected cpu, cuda or auto");
            o->backend = v;
        }
        else if (!strcmp(k, "--precision")) {
            if (gptx_precision_from_name(v) < 0)
                rc = bad(k, v, "expected default, fp32, tf32, bf16 or bf16_pure");
            o->precision = v;
        }
        else if (!strcmp(k, "--stochastic-rounding")) {
            rc = parse_int(k, v, 0, &o->stochastic_rounding);
            if (!rc && o->stochastic_rounding > 1) rc = bad(k, v, "expected 0 or 1");
        }
        else if (!strcmp(k, "--threads")) rc = parse_int(k, v, 0, &o->threads);
        else if (!strcmp(k, "--comm-timeout")) rc = parse_float(k, v, 0.0, 1e9, &o->comm_timeout);
        else if (!strcmp(k, "--zero1")) {
            if (strcmp(v, "0") && strcmp(v, "1")) rc = bad(k, v, "expected 0 or 1");
            o->zero1 = !strcmp(v, "1");
        }
        else if (!strcmp(k, "--overlap")) rc = parse_float(k, v, 0.0, 4096.0, &o->overlap_mib);
        else if (!strcmp(k, "--seed")) {
            char *end = NULL;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (!end || *end || errno || v[0] == '-') rc = bad(k, v, "expected an integer >= 0");
            o->seed = s;
        }
        else return bad(k, v, "unknown option");
        if (rc) return rc;
    }
    if (o->epochs && steps_set) return bad("--epochs", "", "give --steps or --epochs, not both");
    if (o->zero1 && o->overlap_mib > 0)
        return bad("--overlap", "", "not with --zero1 (its step reduces the gradients itself)");
    if (o->val_shards && !o->train_shards)
        return bad("--val-shards", o->val_shards, "needs --train-shards");
    return 0;
}

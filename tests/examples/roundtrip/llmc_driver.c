/* A driver around llm.c's own CPU trainer, for gen_roundtrip.py only (never
 * built by CMake, never in CI): llm.c's train_gpt2.c is compiled in as it
 * is, its main renamed, so every number below is llm.c's code computing:
 *   cc -O2 -DLLMC_SOURCE='"<llm.c>/train_gpt2.c"' -I<llm.c> llmc_driver.c -lm
 *
 *   llmc_driver eval MODEL.bin PROBE.bin PROMPT N OUT [POS...]
 *       the probe's logits at POS (OUT.logits, float32, the real
 *       vocabulary), its mean loss, and N greedy tokens after its first
 *       PROMPT ids, as llm.c's sampling loop runs the model (a window of
 *       T filled with the end-of-text id) (OUT.txt)
 *   llmc_driver train MODEL.bin DATA.bin STEPS LR OUT.bin
 *       STEPS AdamW steps (gpt2_update, weight decay 0) on consecutive
 *       windows of DATA.bin (int32 ids), B = 1, T = 64, then the
 *       parameters written back as a version-3 model file
 *   llmc_driver decode TOKENIZER.bin IDS.bin
 *       FNV-1a 64 of the bytes llm.c's tokenizer_decode gives for the ids */
#define main llmc_upstream_main
#include LLMC_SOURCE
#undef main

enum { DRV_T = 64 };

static int *read_ids(const char *path, size_t *n) {
    FILE *f = fopenCheck(path, "rb");
    fseekCheck(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseekCheck(f, 0, SEEK_SET);
    *n = (size_t)bytes / sizeof(int);
    int *ids = mallocCheck((size_t)bytes);
    freadCheck(ids, sizeof(int), *n, f);
    fcloseCheck(f);
    return ids;
}

static int argmax_v(const float *row, int V) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
    return best;
}

static int eval(int argc, char **argv) {
    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[2]);
    size_t n = 0;
    int *probe = read_ids(argv[3], &n), prompt = atoi(argv[4]), count = atoi(argv[5]);
    int V = model.config.vocab_size, Vp = model.config.padded_vocab_size, T = (int)n - 1;
    if (T != DRV_T) { fprintf(stderr, "the probe must hold %d + 1 ids\n", DRV_T); return 1; }
    gpt2_forward(&model, probe, probe + 1, 1, T);
    char path[4096];
    snprintf(path, sizeof path, "%s.logits", argv[6]);
    FILE *lf = fopenCheck(path, "wb");
    snprintf(path, sizeof path, "%s.txt", argv[6]);
    FILE *tf = fopenCheck(path, "w");
    fprintf(tf, "probe");
    for (size_t i = 0; i < n; i++) fprintf(tf, " %d", probe[i]);
    fprintf(tf, "\npositions");
    for (int i = 7; i < argc; i++) {
        int p = atoi(argv[i]);
        fprintf(tf, " %d", p);
        fwrite(model.acts.logits + (size_t)p * Vp, sizeof(float), (size_t)V, lf);
    }
    fprintf(tf, "\nloss %.9g\nprompt %d\ngreedy", (double)model.mean_loss, prompt);
    int gen[DRV_T];
    for (int t = 0; t < DRV_T; t++) gen[t] = t < prompt ? probe[t] : V - 1; /* llm.c: EOT */
    for (int t = prompt; t < prompt + count; t++) {
        gpt2_forward(&model, gen, NULL, 1, DRV_T);
        gen[t] = argmax_v(model.acts.logits + (size_t)(t - 1) * Vp, V);
        fprintf(tf, " %d", gen[t]);
    }
    fprintf(tf, "\n");
    fcloseCheck(lf);
    fcloseCheck(tf);
    gpt2_free(&model);
    free(probe);
    return 0;
}

static int train(char **argv) {
    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[2]);
    size_t n = 0;
    int *data = read_ids(argv[3], &n), steps = atoi(argv[4]);
    float lr = (float)atof(argv[5]);
    for (int s = 0; s < steps; s++) {
        int *x = data + ((size_t)s * DRV_T) % (n - DRV_T - 1);
        gpt2_forward(&model, x, x + 1, 1, DRV_T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, lr, 0.9f, 0.999f, 1e-8f, 0.0f, s + 1);
        printf("llm.c step %d: loss %f\n", s + 1, (double)model.mean_loss);
    }
    int header[256] = {20240326, 3, model.config.max_seq_len, model.config.vocab_size,
                       model.config.num_layers, model.config.num_heads, model.config.channels,
                       model.config.padded_vocab_size};
    FILE *f = fopenCheck(argv[6], "wb");
    fwrite(header, sizeof(int), 256, f);
    fwrite(model.params_memory, sizeof(float), model.num_parameters, f);
    fcloseCheck(f);
    gpt2_free(&model);
    free(data);
    return 0;
}

static int decode(char **argv) {
    Tokenizer tok;
    tokenizer_init(&tok, argv[2]);
    if (!tok.init_ok) return 1;
    size_t n = 0;
    int *ids = read_ids(argv[3], &n);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        for (const unsigned char *b = (const unsigned char *)tokenizer_decode(&tok, ids[i]); *b; b++)
            h = (h ^ *b) * 0x100000001b3ull;
    printf("%016llx\n", (unsigned long long)h);
    tokenizer_free(&tok);
    free(ids);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 8 && !strcmp(argv[1], "eval")) return eval(argc, argv);
    if (argc == 7 && !strcmp(argv[1], "train")) return train(argv);
    if (argc == 4 && !strcmp(argv[1], "decode")) return decode(argv);
    fprintf(stderr, "usage: see llmc_driver.c\n");
    return 2;
}

/* The preset table every program shares (examples/common/prog_presets.c):
 * each name once and listed in the names messages offer; its parameter
 * count is what the library builds for that shape; its recipe's text is
 * bundled (the data folder); its --help time was filled in. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "prog_data.h"
#include "prog_presets.h"
#include "test_util.h"

static const char *const names[] = {"micro", "tiny", "shakespeare", "small", "gpt2-124M-short",
                                    "gpt2-124M"};

int main(void) {
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    const char *listed = prog_preset_names();
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const prog_preset *p = prog_preset_find(names[i]);
        CHECK(p != NULL);
        if (!p) continue;
        /* the name appears in the list as a whole word */
        size_t n = strlen(names[i]);
        const char *at = listed;
        while ((at = strstr(at, names[i])) && at[n] != ',' && at[n] != ' ' && at[n] != '\0') at++;
        CHECK(at != NULL);
        CHECK(p->n_embd % p->n_head == 0 && p->batch > 0 && p->steps > 0 && p->lr > 0);
        CHECK(p->time && !strchr(p->time, '@') && strstr(p->time, "s"));
        const char *text = prog_data_path(p->text);
        if (access(text, R_OK) != 0) {
            fprintf(stderr, "preset %s: its text %s is not in the data folder\n", p->name, text);
            check_failures++;
        }
        gptx_model_config c;
        gptx_model_config_init(&c);
        c.n_layer = p->n_layer;
        c.n_head = p->n_head;
        c.n_embd = p->n_embd;
        c.context_length = p->context;
        gptx_model *m = NULL;
        CHECK_OK(gptx_model_create(&m, ctx, &c));
        if (m) {
            size_t want = gptx_model_num_parameters(m), got = prog_preset_parameters(p, c.padded_vocab_size);
            if (want != got) {
                fprintf(stderr, "preset %s: %zu parameters in --help, the model has %zu\n", p->name,
                        got, want);
                check_failures++;
            }
        }
        gptx_model_destroy(m);
    }
    CHECK(prog_preset_find("nope") == NULL && prog_preset_find(NULL) == NULL);
    /* nothing in the table that the list above (and so this test) misses */
    int commas = 0;
    for (const char *s = listed; *s; s++) commas += *s == ',';
    CHECK(commas + 2 == (int)(sizeof names / sizeof names[0])); /* "a, b, ... or z" */
    gptx_context_destroy(ctx);
    return check_exit("test_presets");
}

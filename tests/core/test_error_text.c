/* The thread's error message holds paths in full (lib/core/errors.c): a
 * message naming two paths of PATH_MAX is kept whole, a longer one keeps its
 * start and its end around " [...] " and is never cut inside a UTF-8
 * character; a real failure on a 4,000-character path keeps the path and
 * the system's reason after it (once cut at 512 characters, mid-path). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "errors.h"
#include "test_util.h"

static char *repeat(const char *unit, size_t times) {
    size_t u = strlen(unit);
    char *s = malloc(u * times + 1);
    for (size_t i = 0; i < times; i++) memcpy(s + i * u, unit, u);
    s[u * times] = '\0';
    return s;
}

/* true when s is well-formed UTF-8 (no sequence cut) */
static int valid_utf8(const unsigned char *s) {
    while (*s) {
        int extra = *s < 0x80 ? 0 : (*s & 0xE0) == 0xC0 ? 1 : (*s & 0xF0) == 0xE0 ? 2 : 3;
        if (*s >= 0x80 && (*s & 0xC0) == 0x80) return 0;
        s++;
        for (int i = 0; i < extra; i++, s++)
            if ((*s & 0xC0) != 0x80) return 0;
    }
    return 1;
}

static void test_two_long_paths_whole(void) {
    char *a = repeat("a", 4095), *b = repeat("b", 4095);
    GPTX_FAIL(GPTX_ERR_IO, "cannot rename '%s' to '%s': %s", a, b, "File name too long");
    const char *m = gptx_last_error();
    const char *rest = "cannot rename '' to '': File name too long"; /* no internal name */
    CHECK(strlen(m) == strlen(rest) + 8190);
    CHECK(strstr(m, a) && strstr(m, b));
    CHECK(strstr(m, "' to '") && !strstr(m, "[...]"));
    free(a);
    free(b);
}

static void test_longer_cut_in_the_middle(void) {
    char *x = repeat("x", 40000);
    GPTX_FAIL(GPTX_ERR_IO, "start %s the end: File name too long", x);
    const char *m = gptx_last_error();
    size_t n = strlen(m);
    CHECK(n <= 16383 && n > 16000);
    const char *start = "start xxx";
    CHECK(strncmp(m, start, strlen(start)) == 0);
    CHECK(strstr(m, "x [...] x") != NULL);
    const char *end = "xxx the end: File name too long";
    CHECK(n > strlen(end) && strcmp(m + n - strlen(end), end) == 0);
    free(x);
}

static void test_cut_keeps_utf8_whole(void) {
    for (int shift = 0; shift < 3; shift++) { /* the cut at each byte of a character */
        char *x = repeat("\xe2\x82\xac", 10000); /* the euro sign, 3 bytes */
        GPTX_FAIL(GPTX_ERR_IO, "%.*s%s", shift, "ab", x);
        CHECK(strstr(gptx_last_error(), " [...] ") != NULL);
        CHECK(valid_utf8((const unsigned char *)gptx_last_error()));
        free(x);
    }
}

static void test_real_long_path(void) {
    gptx_context *ctx = NULL;
    gptx_model *m = NULL;
    gptx_model_config c = small_config();
    if (make_cpu_context(&ctx, 1) != GPTX_OK || gptx_model_create(&m, ctx, &c) != GPTX_OK) {
        check_failures++;
        return;
    }
    /* past PATH_MAX (4096): 17 components of 250 characters */
    char *part = repeat("d", 250), path[8192] = "/nonexistent-gptx-test";
    for (int i = 0; i < 17; i++)
        snprintf(path + strlen(path), sizeof path - strlen(path), "/%s", part);
    strcat(path, "/model.safetensors");
    CHECK_STATUS(gptx_model_save(m, path), GPTX_ERR_IO);
    const char *msg = gptx_last_error();
    CHECK(strstr(msg, path) != NULL); /* the whole path */
    CHECK(strstr(msg, "File name too long") != NULL);
    if (!strstr(msg, path)) fprintf(stderr, "message (%zu chars): %s\n", strlen(msg), msg);
    free(part);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
}

/* A message starts with the function's name only when it is a public one
 * (the call the user made): an internal name is no part of it (issue 26). */
static void test_names_only_public(void) {
    gptx_fail(GPTX_ERR_IO, "gptx_model_load", "cannot open '%s'", "x.safetensors");
    CHECK(strcmp(gptx_last_error(), "gptx_model_load: cannot open 'x.safetensors'") == 0);
    gptx_fail(GPTX_ERR_FORMAT, "gptx_safetensors_parse", "'%s': header cut short", "y");
    CHECK(strcmp(gptx_last_error(), "'y': header cut short") == 0);
    GPTX_FAIL(GPTX_ERR_INVALID, "B is %d; must be > 0", 0); /* __func__ is this test's */
    CHECK(strcmp(gptx_last_error(), "B is 0; must be > 0") == 0);
    CHECK(gptx_error_names_public("gptx_model_forward"));
    CHECK(gptx_error_names_public("gptx_version"));
    CHECK(gptx_error_names_public("gptx_context_options_init_sized"));
    CHECK(gptx_error_names_public("gptx_comm_create (NCCL engine)"));
    CHECK(!gptx_error_names_public("gptx_fail"));
    CHECK(!gptx_error_names_public("gptx_fail (gptx_model_load)"));
    CHECK(!gptx_error_names_public("gptx_model_load2"));
    CHECK(!gptx_error_names_public("gptx_model_forwar"));
    CHECK(!gptx_error_names_public(NULL));
    /* through the library: a public call's own check keeps its name */
    CHECK_STATUS(gptx_model_forward(NULL, NULL, NULL, 1, 1, NULL), GPTX_ERR_NULL);
    CHECK(strncmp(gptx_last_error(), "gptx_model_forward: ", 20) == 0);
    printf("  %s\n", gptx_last_error());
}

int main(void) {
    test_names_only_public();
    test_two_long_paths_whole();
    test_longer_cut_in_the_middle();
    test_cut_keeps_utf8_whole();
    test_real_long_path();
    return check_exit("test_error_text");
}

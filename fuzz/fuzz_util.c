/* See fuzz_util.h. */
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t gptx_fuzz_split(const uint8_t *data, size_t size, const void *sep, size_t sep_len,
                       gptx_fuzz_part *parts, size_t max) {
    size_t n = 0, at = 0;
    while (n + 1 < max) {
        const uint8_t *hit = NULL;
        for (size_t i = at; i + sep_len <= size && !hit; i++)
            if (memcmp(data + i, sep, sep_len) == 0) hit = data + i;
        if (!hit) break;
        parts[n++] = (gptx_fuzz_part){data + at, (size_t)(hit - (data + at))};
        at = (size_t)(hit - data) + sep_len;
    }
    parts[n++] = (gptx_fuzz_part){data + at, size - at};
    return n;
}

int gptx_fuzz_write_seed(const char *dir, const char *name, const gptx_fuzz_part *parts,
                         size_t n, const void *sep, size_t sep_len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (i && sep_len) fwrite(sep, 1, sep_len, f);
        fwrite(parts[i].data, 1, parts[i].size, f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

char *gptx_fuzz_strndup(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

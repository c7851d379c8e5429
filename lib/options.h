/* Versioned options structs: the first field is the caller's sizeof. */
#ifndef GPTX_OPTIONS_H
#define GPTX_OPTIONS_H

#include <stddef.h>

/* Copies src_size bytes of a caller's options struct over dst, which the
 * caller has already filled with defaults. A struct from an older header
 * (smaller, but at least one field) keeps defaults for the fields it lacks. */
int gptx_read_options(void *dst, size_t dst_size, const void *src, size_t src_size,
                      const char *what, const char *init_name);

#endif

/* The struct contract (docs/abi.md): every struct that crosses the ABI starts
 * with `size_t struct_size`, the bytes the caller's header declares (the end
 * of its last field, GPTX_<TYPE>_SIZE). The library reads and writes only
 * those bytes; input fields beyond them take their defaults, outputs are
 * filled up to min(struct_size, the library's size). */
#ifndef GPTX_ABI_STRUCT_H
#define GPTX_ABI_STRUCT_H

#include <stddef.h>

#include "gptx/gptx.h"

typedef struct gptx_struct_desc {
    const char *type;   /* "gptx_context_options" */
    size_t min_size;    /* end of the first field after struct_size */
    size_t size;        /* GPTX_<TYPE>_SIZE of the header this library was built with */
} gptx_struct_desc;

/* Every struct that crosses the ABI, with its size limits (abi_struct.c). */
extern const gptx_struct_desc gptx_desc_context_options, gptx_desc_memory_stats,
    gptx_desc_model_config, gptx_desc_tensor_info, gptx_desc_adamw_options,
    gptx_desc_dataloader_options, gptx_desc_dataloader_info, gptx_desc_dataloader_state,
    gptx_desc_sampler_options, gptx_desc_sampler_state, gptx_desc_timer_report,
    gptx_desc_train_state, gptx_desc_compare_options, gptx_desc_compare_report,
    gptx_desc_comm_launch_info, gptx_desc_comm_options, gptx_desc_context_info,
    gptx_desc_generator_options, gptx_desc_generator_stats;

/* Checks that caller_size is a size a gptx header of this ABI can declare. */
int gptx_struct_check_size(size_t caller_size, const gptx_struct_desc *d, const char *func,
                           const char *arg);

/* *_init: copies the first min(caller_size, d->size) bytes of `defaults`
 * into s, sets s->struct_size = caller_size, and (for a struct from a newer
 * header) zeroes the bytes this library does not know. Never writes past
 * caller_size. */
int gptx_struct_init(void *s, size_t caller_size, const void *defaults,
                     const gptx_struct_desc *d, const char *func, const char *arg);

/* Reads a caller's input struct: dst (d->size bytes) already holds the
 * defaults; the first src->struct_size bytes of src replace them. */
int gptx_struct_read(void *dst, const void *src, const gptx_struct_desc *d, const char *func,
                     const char *arg);

/* Writes a complete output struct (d->size bytes at src) into the caller's
 * dst, up to dst->struct_size, which it keeps. */
int gptx_struct_write(void *dst, const void *src, const gptx_struct_desc *d, const char *func,
                      const char *arg);

#endif

#include "options.h"

#include <string.h>

#include "errors.h"

int gptx_read_options(void *dst, size_t dst_size, const void *src, size_t src_size,
                      const char *what, const char *init_name) {
    if (src_size <= sizeof(size_t) || src_size > dst_size)
        return gptx_fail(GPTX_ERR_INVALID, "gptx_read_options",
                         "%s: struct_size is %zu (this library knows %zu); call %s first", what,
                         src_size, dst_size, init_name);
    memcpy((char *)dst + sizeof(size_t), (const char *)src + sizeof(size_t),
           src_size - sizeof(size_t));
    return GPTX_OK;
}

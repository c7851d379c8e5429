#include "abi_struct.h"

#include <string.h>

#include "errors.h"

/* The inventory of the contract: one line per struct of the public header,
 * with the end of its first field (the smallest size any header of this ABI
 * can declare) and the library's own size. The assertions keep each
 * GPTX_<TYPE>_SIZE at the end of its struct's last field: a field appended
 * without moving the macro would leave sizeof a whole alignment unit past it. */
#define DESC(T, first, SIZE)                                                               \
    const gptx_struct_desc gptx_desc_##T = {"gptx_" #T, GPTX_STRUCT_END(gptx_##T, first),   \
                                            (SIZE)};                                       \
    _Static_assert(sizeof(gptx_##T) - (SIZE) < _Alignof(gptx_##T),                         \
                   #SIZE " must end at the last field of gptx_" #T)

DESC(context_options, backend, GPTX_CONTEXT_OPTIONS_SIZE);
DESC(memory_stats, allocated, GPTX_MEMORY_STATS_SIZE);
DESC(model_config, vocab_size, GPTX_MODEL_CONFIG_SIZE);
DESC(tensor_info, name, GPTX_TENSOR_INFO_SIZE);
DESC(adamw_options, lr, GPTX_ADAMW_OPTIONS_SIZE);
DESC(dataloader_options, batch_size, GPTX_DATALOADER_OPTIONS_SIZE);
DESC(dataloader_info, total_tokens, GPTX_DATALOADER_INFO_SIZE);
DESC(dataloader_state, epoch, GPTX_DATALOADER_STATE_SIZE);
DESC(sampler_options, temperature, GPTX_SAMPLER_OPTIONS_SIZE);
DESC(sampler_state, seed, GPTX_SAMPLER_STATE_SIZE);
DESC(timer_report, scope, GPTX_TIMER_REPORT_SIZE);
DESC(train_state, optimizer, GPTX_TRAIN_STATE_SIZE);
DESC(compare_options, logits_atol, GPTX_COMPARE_OPTIONS_SIZE);
DESC(compare_report, a, GPTX_COMPARE_REPORT_SIZE);
DESC(comm_launch_info, launcher, GPTX_COMM_LAUNCH_INFO_SIZE);
DESC(comm_options, engine, GPTX_COMM_OPTIONS_SIZE);
DESC(context_info, backend, GPTX_CONTEXT_INFO_SIZE);
DESC(generator_options, window, GPTX_GENERATOR_OPTIONS_SIZE);
DESC(generator_stats, tokens, GPTX_GENERATOR_STATS_SIZE);

int gptx_struct_check_size(size_t caller_size, const gptx_struct_desc *d, const char *func,
                           const char *arg) {
    if (caller_size > d->size)
        return gptx_fail(GPTX_ERR_UNSUPPORTED, func,
                         "%s.struct_size is %zu, but this library (gptx %s) knows %s only up to "
                         "%zu bytes: the program was built against a newer gptx header; run it "
                         "with that version of the library or a later one",
                         arg, caller_size, GPTX_VERSION_STRING, d->type, d->size);
    if (caller_size < d->min_size)
        return gptx_fail(GPTX_ERR_INVALID, func,
                         "%s.struct_size is %zu (%s takes %zu to %zu bytes); fill it with "
                         "%s_init first",
                         arg, caller_size, d->type, d->min_size, d->size, d->type);
    return GPTX_OK;
}

int gptx_struct_init(void *s, size_t caller_size, const void *defaults,
                     const gptx_struct_desc *d, const char *func, const char *arg) {
    if (!s) return gptx_fail(GPTX_ERR_NULL, func, "argument '%s' is NULL", arg);
    if (caller_size < d->min_size) return gptx_struct_check_size(caller_size, d, func, arg);
    size_t known = caller_size < d->size ? caller_size : d->size;
    memcpy(s, defaults, known);
    if (caller_size > known) memset((char *)s + known, 0, caller_size - known);
    *(size_t *)s = caller_size;
    return gptx_struct_check_size(caller_size, d, func, arg);
}

/* Copies the fields after struct_size up to n bytes, once n is known to be legal. */
static int copy_fields(void *dst, const void *src, size_t n, const gptx_struct_desc *d,
                       const char *func, const char *arg) {
    int rc = gptx_struct_check_size(n, d, func, arg);
    if (rc != GPTX_OK) return rc;
    memcpy((char *)dst + sizeof(size_t), (const char *)src + sizeof(size_t), n - sizeof(size_t));
    return GPTX_OK;
}

int gptx_struct_read(void *dst, const void *src, const gptx_struct_desc *d, const char *func,
                     const char *arg) {
    return copy_fields(dst, src, *(const size_t *)src, d, func, arg);
}

int gptx_struct_write(void *dst, const void *src, const gptx_struct_desc *d, const char *func,
                      const char *arg) {
    return copy_fields(dst, src, *(const size_t *)dst, d, func, arg);
}

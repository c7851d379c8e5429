/* gptx_file_save: the atomic writer of the library's own files
 * (atomic_file.h), offered to programs for the files they write beside
 * them (gptx-train's metrics record and loss plot), so that those follow
 * the same rules: old or new file whole, links kept, nothing but a regular
 * file replaced. */
#include "gptx/gptx.h"

#include "atomic_file.h"
#include "errors.h"

int gptx_file_save(const char *path, const void *data, size_t size) {
    GPTX_CHECK_NULL(path);
    if (!data && size > 0) return GPTX_FAIL(GPTX_ERR_NULL, "argument 'data' is NULL");
    gptx_afile f;
    GPTX_TRY(gptx_afile_open(&f, path));
    if (size > 0) GPTX_TRY(gptx_afile_write(&f, data, size)); /* closes f on failure */
    return gptx_afile_commit(&f);
}

/*
 * Text files written through a temporary name and a rename (io.h), for writers outside the I/O
 * module (the command's tables): the same protocol as the library's own writers
 * (io_internal.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "io/io_internal.h"

sw_status sw_text_file_open(sw_context *ctx, const char *path, FILE **f, char **tmp)
{
    if (!path || !f || !tmp)
        return sw_fail(ctx, SW_EINVAL, "sw_text_file_open: NULL argument");
    return sw_io_tmp_open(ctx, path, tmp, f);
}

sw_status sw_text_file_commit(sw_context *ctx, const char *path, char *tmp, FILE *f)
{
    if (!path || !tmp || !f) {
        sw_io_tmp_abort(tmp, f);
        return sw_fail(ctx, SW_EINVAL, "sw_text_file_commit: NULL argument");
    }
    return sw_io_tmp_commit(ctx, path, tmp, f);
}

void sw_text_file_abort(char *tmp, FILE *f)
{
    sw_io_tmp_abort(tmp, f);
}

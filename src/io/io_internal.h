/*
 * Internals shared by the I/O module (the .c files in src/io): argument checks and the "write to a
 * temporary name, then rename" protocol of every writer.
 *
 * Every .c file that includes this header defines _POSIX_C_SOURCE 200809L before any include
 * (open, fdopen, getpid, unlink, getline).
 */
#ifndef SW_IO_INTERNAL_H
#define SW_IO_INTERNAL_H

#include "core/core_internal.h"
#include "spotwave/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Checks an image given to a writer: present, valid, on the host. */
static inline sw_status sw_io_check_write_image(sw_context *ctx, const char *path,
                                                const sw_image *img)
{
    if (!img)
        return sw_fail(ctx, SW_EINVAL, "%s: no image given (NULL)", path);
    sw_status st = sw_image_check(ctx, img);
    if (st != SW_OK)
        return st;
    if (img->memory == SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL,
                       "%s: the image is in GPU device memory; copy it to the host first "
                       "(sw_image_copy) before writing it",
                       path);
    return SW_OK;
}

/*
 * Creates "<path>.tmp.XXXXXX" exclusively (mode 0666 & ~umask, like fopen) and returns its name
 * (malloc'ed, *tmp_out) and its descriptor (*fd_out). SW_EIO with the reason when the directory
 * is missing, not writable, or not a directory.
 */
static inline sw_status sw_io_tmp_create(sw_context *ctx, const char *path, char **tmp_out,
                                         int *fd_out)
{
    static atomic_uint counter;
    *tmp_out = NULL;
    *fd_out = -1;
    size_t n = strlen(path);
    if (n == 0)
        return sw_fail(ctx, SW_EINVAL, "empty output file name");
    char *tmp = malloc(n + 24);
    if (!tmp)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    uint64_t seed =
        (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&n;
    for (int attempt = 0; attempt < 100; attempt++) {
        uint64_t x = seed + (uint64_t)atomic_fetch_add(&counter, 1u) * 0xD1B54A32D192ED03ull;
        x ^= x >> 29;
        x *= 0xBF58476D1CE4E5B9ull;
        x ^= x >> 32;
        snprintf(tmp, n + 24, "%s.tmp.%06x", path, (unsigned)(x & 0xFFFFFFu));
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd >= 0) {
            *tmp_out = tmp;
            *fd_out = fd;
            return SW_OK;
        }
        if (errno != EEXIST) {
            int e = errno;
            free(tmp);
            return sw_fail(ctx, SW_EIO, "%s: cannot create the file (%s)", path, strerror(e));
        }
    }
    free(tmp);
    return sw_fail(ctx, SW_EIO, "%s: cannot create a unique temporary file beside it", path);
}

/* Opens the temporary file as a stdio stream (for the PGM, PNG and CSV writers). */
static inline sw_status sw_io_tmp_open(sw_context *ctx, const char *path, char **tmp_out,
                                       FILE **f_out)
{
    int fd;
    *f_out = NULL;
    sw_status st = sw_io_tmp_create(ctx, path, tmp_out, &fd);
    if (st != SW_OK)
        return st;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(*tmp_out);
        free(*tmp_out);
        *tmp_out = NULL;
        return sw_fail(ctx, SW_EIO, "%s: cannot open the file for writing (%s)", path, strerror(e));
    }
    *f_out = f;
    return SW_OK;
}

/* Gives up a temporary file: closes it (when f is not NULL), removes it, frees the name. */
static inline void sw_io_tmp_abort(char *tmp, FILE *f)
{
    if (f)
        fclose(f);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
}

/* Moves the finished temporary file to its final name (replacing any file there), after its
 * data are on disk (fsync): a crash then leaves the old file or the whole new one, never a new
 * name over missing data. */
static inline sw_status sw_io_tmp_rename(sw_context *ctx, const char *path, char *tmp)
{
    int fd = open(tmp, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        unlink(tmp);
        free(tmp);
        return sw_fail(ctx, SW_EIO, "%s: cannot write the file to disk (%s)", path, strerror(e));
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        return sw_fail(ctx, SW_EIO, "%s: cannot move the written file into place (%s)", path,
                       strerror(e));
    }
    free(tmp);
    return SW_OK;
}

/* Flushes and closes f (checking for write errors such as a full disk), then renames. On any
 * failure the temporary file is removed and SW_EIO returned. */
static inline sw_status sw_io_tmp_commit(sw_context *ctx, const char *path, char *tmp, FILE *f)
{
    int bad = ferror(f);
    int e = errno;
    if (fflush(f) != 0) {
        bad = 1;
        e = errno;
    }
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlink(tmp);
        free(tmp);
        return sw_fail(ctx, SW_EIO, "%s: write failed (%s)", path, e ? strerror(e) : "I/O error");
    }
    return sw_io_tmp_rename(ctx, path, tmp);
}

#endif /* SW_IO_INTERNAL_H */

/*
 * Helpers shared by the libFuzzer targets that need their input as files (readers that take a
 * path): a private temporary directory made once per process and removed at exit, files
 * written into it, and the split of one input into several files.
 */
#ifndef SW_FUZZ_COMMON_H
#define SW_FUZZ_COMMON_H

#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_dir_[512];

static void fuzz_cleanup_(void)
{
    DIR *d = opendir(fuzz_dir_);
    if (d) {
        struct dirent *e;
        char p[1024];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(p, sizeof p, "%s/%s", fuzz_dir_, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(fuzz_dir_);
}

/* The directory (made on first use). */
static const char *fuzz_dir(void)
{
    if (!fuzz_dir_[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(fuzz_dir_, sizeof fuzz_dir_, "%s/swfuzz-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(fuzz_dir_))
            abort();
        atexit(fuzz_cleanup_);
    }
    return fuzz_dir_;
}

/* "<dir>/<name>" into buf. */
static const char *fuzz_path(const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", fuzz_dir(), name);
    return buf;
}

/* Writes bytes to <dir>/<name>; the path into buf. */
static const char *fuzz_file(const char *name, const void *data, size_t size, char *buf,
                             size_t bsize)
{
    fuzz_path(name, buf, bsize);
    FILE *f = fopen(buf, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
    return buf;
}

/*
 * Splits an input into n parts: parts 0 .. n-2 each start with their length as a 4-byte
 * little-endian number (clamped to what is left), the last part takes the rest. The seeds are
 * written the same way (tests/fuzz/README.md).
 */
static void fuzz_split(const uint8_t *data, size_t size, int n, const uint8_t **part, size_t *len)
{
    for (int i = 0; i < n; i++) {
        if (i == n - 1) {
            part[i] = data;
            len[i] = size;
            break;
        }
        uint32_t k = 0;
        for (int b = 0; b < 4 && (size_t)b < size; b++)
            k |= (uint32_t)data[b] << (8 * b);
        size_t skip = size < 4 ? size : 4;
        data += skip;
        size -= skip;
        part[i] = data;
        len[i] = k < size ? k : size;
        data += len[i];
        size -= len[i];
    }
}

#endif

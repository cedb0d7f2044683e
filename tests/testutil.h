/*
 * Helpers shared by spotwave's cmocka tests.
 */
#ifndef SW_TESTUTIL_H
#define SW_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "spotwave/spotwave.h"

#include <math.h>
#include <stdio.h>

/* |a - b| <= tol in double precision (cmocka 1.1.5, Debian 12's, has no double assertion). */
#define assert_near(a, b, tol)                                                                     \
    do {                                                                                           \
        double sw_a_ = (double)(a), sw_b_ = (double)(b), sw_t_ = (double)(tol);                    \
        if (!(fabs(sw_a_ - sw_b_) <= sw_t_))                                                       \
            fail_msg("%s = %.17g is not within %g of %s = %.17g", #a, sw_a_, sw_t_, #b, sw_b_);    \
    } while (0)

/* A fresh private directory under $TMPDIR (or /tmp), created once per process and removed with
 * its contents at exit. */
const char *sw_test_tmpdir(void);
/* "<tmpdir>/<name>" in a static rotating buffer (valid for the next 7 calls). */
const char *sw_test_path(const char *name);

/* Fills a host image with reproducible random values from the spotwave RNG (seed): integers
 * cover the type's full range; f32 values are uniform in [-1e4, 1e4). */
void sw_test_fill_random(sw_image *img, uint64_t seed);

/* Creates a context on the CPU backend with `threads` threads (0: all cores); exits with a
 * message if that fails. */
sw_context *sw_test_cpu_context(int threads);

/* Creates a CUDA context or exits the process with 77 (ctest: skipped) and a clear line when no
 * GPU is usable here. */
sw_context *sw_test_cuda_context_or_skip(void);

/* Allocates a w x h host image of type t (asserts on failure) and fills it with
 * sw_test_fill_random(seed). Free it with sw_image_free. */
sw_image sw_test_random_image(int32_t w, int32_t h, sw_pixel_type t, uint64_t seed);

/* Writes bytes to a file (asserts on failure). */
void sw_test_write_file(const char *path, const void *data, size_t size);

/* Reads a whole file (asserts on failure): a malloc'ed buffer of *size bytes plus a terminating
 * '\0' (not counted in *size), for the caller to free. */
void *sw_test_read_all(const char *path, size_t *size);

/* Non-zero when something exists at path (stat succeeds). */
int sw_test_file_exists(const char *path);

/* Creates the directory "<tmpdir>/<name>" without write permission (mode 0555) and returns its
 * path (as sw_test_path does), or NULL when the process runs as root, for whom permissions mean
 * nothing (the caller then skips the check). The clean-up at exit makes it writable again. */
const char *sw_test_readonly_dir(const char *name);

/* Number of entries in sw_test_tmpdir() whose name contains ".tmp." (temporary files a writer
 * left behind). */
int sw_test_count_temp_files(void);

#endif

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

/* Creates a CUDA context or exits the process with 77 (ctest: skipped) and a clear line when no
 * GPU is usable here. */
sw_context *sw_test_cuda_context_or_skip(void);

/* Writes bytes to a file (asserts on failure). */
void sw_test_write_file(const char *path, const void *data, size_t size);

#endif

/*
 * The memory budget (core.h): the size syntax, the default and SPOTWAVE_MAX_MEMORY, the
 * per-context limit, the check and its message, and the readers and allocators that consult it
 * before allocating what a file or an argument asks for: images, star lists, CSV tables, and a
 * FITS header claiming a huge cube (a sparse file, so that the data are "present").
 */
#define _GNU_SOURCE /* setenv, ftruncate */

#include "testutil.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)

static void test_parse_sizes(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t want;
    } good[] = {
        {"1", 1},
        {"1048576", 1048576},
        {"512M", 512 * MiB},
        {"512m", 512 * MiB},
        {"8G", 8192 * MiB},
        {"8GiB", 8192 * MiB},
        {"8gb", 8192 * MiB},
        {"1.5G", 1536 * MiB},
        {"2T", 2097152 * MiB},
        {"1k", 1024},
        {"100B", 100},
        {"unlimited", UINT64_MAX},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 0;
        assert_int_equal(sw_memory_size_parse(good[i].text, &v), SW_OK);
        if (v != good[i].want)
            fail_msg("'%s' -> %llu, want %llu", good[i].text, (unsigned long long)v,
                     (unsigned long long)good[i].want);
    }
    static const char *const bad[] = {"",          "0",    "0M",  "-1",  "+5",
                                      "1X",        "0x10", "1e9", "inf", "nan",
                                      "1.2.3",     "M",    " 5",  "5 ",  "99999999999999999999",
                                      "16777216T", "1GG"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 77;
        if (sw_memory_size_parse(bad[i], &v) != SW_EINVAL)
            fail_msg("'%s' was accepted as %llu", bad[i], (unsigned long long)v);
        assert_int_equal(v, 77);
        assert_non_null(strstr(sw_context_error(NULL), "not a memory size"));
    }
    char buf[32];
    assert_string_equal(sw_memory_size_string(100, buf, sizeof buf), "100 bytes");
    assert_string_equal(sw_memory_size_string(1536 * MiB, buf, sizeof buf), "1.5 GiB");
    assert_string_equal(sw_memory_size_string(UINT64_MAX, buf, sizeof buf), "unlimited");
}

static void test_default_and_environment(void **state)
{
    (void)state;
    unsetenv("SPOTWAVE_MAX_MEMORY");
    const uint64_t sys = sw_memory_limit_default();
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    assert_true(sys >= 1);
    if (pages > 0 && page > 0) /* at most half of the physical memory */
        assert_true(sys <= (uint64_t)pages * (uint64_t)page / 2);
    assert_int_equal(sw_context_memory_limit(NULL), sys);

    setenv("SPOTWAVE_MAX_MEMORY", "64M", 1);
    assert_int_equal(sw_memory_limit_default(), 64 * MiB);
    sw_context *ctx = sw_test_cpu_context(1);
    assert_int_equal(sw_context_memory_limit(ctx), 64 * MiB);
    assert_int_equal(sw_context_set_memory_limit(ctx, 1000), SW_OK);
    assert_int_equal(sw_context_memory_limit(ctx), 1000);
    assert_int_equal(sw_context_set_memory_limit(ctx, 0), SW_OK); /* back to the default */
    assert_int_equal(sw_context_memory_limit(ctx), 64 * MiB);
    sw_context_destroy(ctx);

    setenv("SPOTWAVE_MAX_MEMORY", "lots", 1); /* ignored: the system's default */
    assert_int_equal(sw_memory_limit_default(), sys);
    unsetenv("SPOTWAVE_MAX_MEMORY");
    assert_int_equal(sw_context_set_memory_limit(NULL, 5), SW_EINVAL);
}

static void test_check_message(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_context_set_memory_limit(ctx, 1000);
    assert_int_equal(sw_memory_check(ctx, 10, 100, "ten things"), SW_OK);
    assert_int_equal(sw_memory_check(ctx, 0, UINT64_MAX, "nothing"), SW_OK);
    assert_int_equal(sw_memory_check(ctx, 7, 143, "the %d widgets of %s", 7, "x.fits"), SW_ENOMEM);
    const char *m = sw_context_error(ctx);
    assert_non_null(strstr(m, "the 7 widgets of x.fits: needs 1001 bytes (1001 bytes)"));
    assert_non_null(strstr(m, "memory limit of 1000 bytes"));
    assert_non_null(strstr(m, "--max-memory"));
    assert_non_null(strstr(m, "SPOTWAVE_MAX_MEMORY"));
    assert_non_null(strstr(m, "sw_context_set_memory_limit"));
    /* a product beyond 2^64 */
    assert_int_equal(sw_memory_check(ctx, UINT64_MAX / 2, 3, "absurd"), SW_ENOMEM);
    assert_non_null(strstr(sw_context_error(ctx), "more than 2^64"));
    sw_context_set_memory_limit(ctx, UINT64_MAX);
    assert_int_equal(sw_memory_check(ctx, UINT64_MAX / 2, 2, "just fits"), SW_OK);
    sw_context_destroy(ctx);
}

static void test_allocators(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_context_set_memory_limit(ctx, 1 * MiB);
    sw_image img;
    assert_int_equal(sw_image_alloc(ctx, 1024, 1024, SW_PIX_F32, &img), SW_ENOMEM);
    assert_null(img.data);
    assert_non_null(strstr(sw_context_error(ctx), "a 1024x1024 f32 image: needs 4 MiB"));
    assert_int_equal(sw_image_alloc(ctx, 1024, 1024, SW_PIX_U8, &img), SW_OK); /* 1 MiB fits */
    sw_image_free(&img);

    sw_stars stars;
    assert_int_equal(sw_stars_alloc(ctx, 2000000000, &stars), SW_ENOMEM);
    assert_null(stars.x);
    assert_non_null(strstr(sw_context_error(ctx), "a list of 2000000000 stars"));
    assert_int_equal(sw_stars_alloc(ctx, 1000, &stars), SW_OK);
    sw_stars_free(&stars);
    sw_context_destroy(ctx);
}

/* A CSV of n rows x 4 columns. */
static const char *write_csv(const char *name, int n)
{
    const char *path = sw_test_path(name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("a,b,c,d\n", f);
    for (int i = 0; i < n; i++)
        fprintf(f, "%d,1,2,3\n", i);
    fclose(f);
    return path;
}

static void test_csv_rows(void **state)
{
    (void)state;
    const char *path = write_csv("rows.csv", 5000);
    sw_context *ctx = sw_test_cpu_context(1);
    sw_context_set_memory_limit(ctx, 64 * 1024); /* 2048 rows x 4 columns x 8 bytes */
    sw_table t;
    assert_int_equal(sw_csv_read(ctx, path, &t), SW_ENOMEM);
    assert_non_null(strstr(sw_context_error(ctx), "rows x 4 columns"));
    sw_context_set_memory_limit(ctx, 1 * MiB); /* raised: the same file reads */
    assert_int_equal(sw_csv_read(ctx, path, &t), SW_OK);
    assert_int_equal(t.nrows, 5000);
    sw_table_free(&t);
    sw_context_destroy(ctx);
}

/* A FITS header card. */
static void card(char *hdr, int *n, const char *text)
{
    char c[81];
    snprintf(c, sizeof c, "%-80s", text);
    memcpy(hdr + 80 * (*n)++, c, 80);
}

/* A f32 cube of w x h x d whose data are a hole in a sparse file (nothing written). */
static const char *sparse_cube(const char *name, long w, long h, long d)
{
    char hdr[2880];
    memset(hdr, ' ', sizeof hdr);
    int n = 0;
    char line[81];
    card(hdr, &n, "SIMPLE  =                    T");
    card(hdr, &n, "BITPIX  =                  -32");
    card(hdr, &n, "NAXIS   =                    3");
    snprintf(line, sizeof line, "NAXIS1  = %20ld", w);
    card(hdr, &n, line);
    snprintf(line, sizeof line, "NAXIS2  = %20ld", h);
    card(hdr, &n, line);
    snprintf(line, sizeof line, "NAXIS3  = %20ld", d);
    card(hdr, &n, line);
    card(hdr, &n, "END");
    const char *path = sw_test_path(name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, hdr, sizeof hdr), (ssize_t)sizeof hdr);
    unsigned long long data = (unsigned long long)w * h * d * 4;
    data = (data + 2879) / 2880 * 2880;
    assert_int_equal(ftruncate(fd, (off_t)(2880 + data)), 0);
    close(fd);
    return path;
}

static void test_fits_huge_cube(void **state)
{
    (void)state;
    /* 4096 x 4096 x 1000 floats: 62.5 GiB claimed by a file that holds 2880 bytes */
    const char *huge = sparse_cube("huge.fits", 4096, 4096, 1000);
    sw_context *ctx = sw_test_cpu_context(1);
    sw_context_set_memory_limit(ctx, 256 * MiB);
    sw_frames fr;
    assert_int_equal(sw_fits_read(ctx, huge, &fr), SW_ENOMEM);
    assert_int_equal(fr.count, 0);
    assert_null(fr.frames);
    const char *m = sw_context_error(ctx);
    assert_non_null(strstr(m, "1000 frames of 4096 x 4096 pixels: needs 62.5 GiB"));
    assert_non_null(strstr(m, "memory limit of 256 MiB"));
    /* one frame of it (64 MiB) is within the limit */
    sw_image one;
    assert_int_equal(sw_fits_read_frame(ctx, huge, 999, &one), SW_OK);
    assert_int_equal(one.width, 4096);
    sw_image_free(&one);

    /* a moderate cube: refused under a small limit, read once the limit is raised */
    const char *small = sparse_cube("small.fits", 64, 64, 50); /* 800 KiB */
    sw_context_set_memory_limit(ctx, 512 * 1024);
    assert_int_equal(sw_fits_read(ctx, small, &fr), SW_ENOMEM);
    sw_context_set_memory_limit(ctx, 2 * MiB);
    assert_int_equal(sw_fits_read(ctx, small, &fr), SW_OK);
    assert_int_equal(fr.count, 50);
    sw_frames_free(&fr);
    sw_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_sizes),   cmocka_unit_test(test_default_and_environment),
        cmocka_unit_test(test_check_message), cmocka_unit_test(test_allocators),
        cmocka_unit_test(test_csv_rows),      cmocka_unit_test(test_fits_huge_cube),
    };
    return cmocka_run_group_tests_name("core_memory", tests, NULL, NULL);
}

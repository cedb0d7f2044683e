/*
 * PGM (P5) reading and writing: round trips at 8 and 16 bits, header syntax (comments,
 * whitespace), byte order, and bad input (truncated, wrong magic, absurd sizes, bad maxval).
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses from memory and from a file; both must agree. Returns the file reader's status. */
static sw_status read_both(const void *data, size_t n, sw_image *out)
{
    sw_image m;
    memset(&m, 0x5A, sizeof m);
    sw_status sm = sw_pgm_read_memory(NULL, data, n, &m);
    const char *path = sw_test_path("case.pgm");
    sw_test_write_file(path, data, n);
    memset(out, 0x5A, sizeof *out);
    sw_status sf = sw_pgm_read(NULL, path, out);
    assert_int_equal(sm, sf);
    if (sf == SW_OK) {
        assert_true(sw_image_equal(&m, out));
        sw_image_free(&m);
    } else {
        assert_null(m.data);
        assert_null(out->data);
        assert_int_equal(out->width, 0);
    }
    return sf;
}

static void expect_error(const char *data, size_t n, sw_status want, const char *words)
{
    sw_image img;
    sw_status st = read_both(data, n, &img);
    if (st != want || (words && !strstr(sw_context_error(NULL), words))) {
        print_error("status %d, message \"%s\", wanted %d and \"%s\"\n", st, sw_context_error(NULL),
                    want, words ? words : "");
        fail();
    }
}

#define EXPECT(lit, st, words) expect_error(lit, sizeof lit - 1, st, words)

static void roundtrip(void **state)
{
    (void)state;
    const sw_pixel_type types[2] = {SW_PIX_U8, SW_PIX_U16};
    for (int i = 0; i < 2; i++) {
        sw_image img = sw_test_random_image(33, 17, types[i], 10 + (uint64_t)i);
        const char *path = sw_test_path("rt.pgm");
        assert_int_equal(sw_pgm_write(NULL, path, &img), SW_OK);
        sw_image back;
        assert_int_equal(sw_pgm_read(NULL, path, &back), SW_OK);
        assert_int_equal(back.type, types[i]);
        assert_true(sw_image_equal(&img, &back));
        sw_image_free(&back);

        size_t n;
        void *buf = sw_test_read_all(path, &n);
        assert_int_equal(n, strlen(i ? "P5\n33 17\n65535\n" : "P5\n33 17\n255\n") +
                                (size_t)33 * 17 * (i ? 2 : 1));
        assert_int_equal(sw_pgm_read_memory(NULL, buf, n, &back), SW_OK);
        assert_true(sw_image_equal(&img, &back));
        sw_image_free(&back);
        free(buf);

        /* a strided view */
        sw_image view;
        assert_int_equal(sw_image_roi(NULL, &img, 5, 3, 20, 9, &view), SW_OK);
        assert_int_equal(sw_pgm_write(NULL, path, &view), SW_OK);
        assert_int_equal(sw_pgm_read(NULL, path, &back), SW_OK);
        assert_true(sw_image_equal(&view, &back));
        sw_image_free(&back);
        sw_image_free(&img);
    }
}

/* 16-bit samples are big-endian; comments and any whitespace between header fields. */
static void header_syntax_and_byte_order(void **state)
{
    (void)state;
    const char data[] = "P5 # a comment right after the magic\n"
                        "# a full comment line\r\n"
                        "  3\t# width\n2\n"
                        "1000#maxval comment ends the field\n"
                        "\x01\x02\x03\xE8\x00\x00\x00\x01\x02\x00\x00\xFF";
    sw_image img;
    assert_int_equal(read_both(data, sizeof data - 1, &img), SW_OK);
    assert_int_equal(img.type, SW_PIX_U16);
    assert_int_equal(img.width, 3);
    assert_int_equal(img.height, 2);
    const uint16_t *r0 = sw_image_row(&img, 0), *r1 = sw_image_row(&img, 1);
    assert_int_equal(r0[0], 0x0102);
    assert_int_equal(r0[1], 1000);
    assert_int_equal(r0[2], 0);
    assert_int_equal(r1[0], 1);
    assert_int_equal(r1[1], 512);
    assert_int_equal(r1[2], 255);
    sw_image_free(&img);

    /* maxval 255 -> u8; the single whitespace after maxval may be a byte that looks like
     * whitespace in the pixels: the first pixel here is '\n' (10) */
    const char d8[] = "P5\n2 1\n255\n\n\x07";
    assert_int_equal(read_both(d8, sizeof d8 - 1, &img), SW_OK);
    assert_int_equal(img.type, SW_PIX_U8);
    assert_int_equal(((uint8_t *)img.data)[0], 10);
    assert_int_equal(((uint8_t *)img.data)[1], 7);
    sw_image_free(&img);

    /* trailing bytes after the image (a multi-image stream) are ignored */
    const char d2[] = "P5 1 1 255 \x2AP5 1 1 255 \x2B";
    assert_int_equal(read_both(d2, sizeof d2 - 1, &img), SW_OK);
    assert_int_equal(((uint8_t *)img.data)[0], 0x2A);
    sw_image_free(&img);
}

static void bad_input(void **state)
{
    (void)state;
    EXPECT("", SW_EFORMAT, "empty");
    EXPECT("P6\n1 1\n255\n\x01\x02\x03", SW_EFORMAT, "P5");
    EXPECT("P2\n1 1\n255\n1\n", SW_EFORMAT, "P2");
    EXPECT("GIF89a", SW_EFORMAT, "not a binary PGM");
    EXPECT("P5\n2 2\n255\n\x01\x02\x03", SW_EFORMAT, "truncated");
    EXPECT("P5\n2 2\n65535\n\x01\x02\x03\x04\x05\x06\x07", SW_EFORMAT, "truncated");
    EXPECT("P5\n2 2", SW_EFORMAT, "truncated");
    EXPECT("P5\n2", SW_EFORMAT, "truncated");
    EXPECT("P5\n2 2\n0\n\x01\x02\x03\x04", SW_EFORMAT, "maxval 0");
    EXPECT("P5\n2 2\n65536\n\x01\x02\x03\x04\x05\x06\x07\x08", SW_EFORMAT, "maxval 65536");
    EXPECT("P5\n0 2\n255\n", SW_EFORMAT, "zero size");
    EXPECT("P5\n2147483648 2147483648\n255\n\x01", SW_EFORMAT, "exceed");
    EXPECT("P5\n99999999999999999999999999 1\n255\n\x01", SW_EFORMAT, "exceed");
    EXPECT("P5\n65536 65536\n255\n\x01", SW_EFORMAT, "exceeds the maximum");
    EXPECT("P5\n-2 2\n255\n\x01\x02\x03\x04", SW_EFORMAT, "width");
    EXPECT("P5\n2x 2\n255\n\x01\x02\x03\x04", SW_EFORMAT, "'x'");
    EXPECT("P5\n1 1\n200\n\xC9", SW_EFORMAT, "above the maxval");
    EXPECT("P52 2 255\n\x01\x02\x03\x04", SW_EFORMAT, "whitespace");
    /* a pixel-count limit check must come before any allocation: a huge image in a tiny
     * buffer is refused as truncated without trying to allocate 4 GiB */
    EXPECT("P5\n65535 32767\n65535\n\x01\x02", SW_EFORMAT, "truncated");

    sw_image img;
    memset(&img, 0x5A, sizeof img);
    assert_int_equal(sw_pgm_read(NULL, sw_test_path("missing.pgm"), &img), SW_EIO);
    assert_null(img.data);
    assert_non_null(strstr(sw_context_error(NULL), "missing.pgm"));
    assert_int_equal(sw_pgm_read(NULL, sw_test_tmpdir(), &img), SW_EIO);
    assert_int_equal(sw_pgm_read(NULL, NULL, &img), SW_EINVAL);
    assert_int_equal(sw_pgm_read(NULL, "x", NULL), SW_EINVAL);
    assert_int_equal(sw_pgm_read_memory(NULL, NULL, 4, &img), SW_EINVAL);
}

static void bad_writes(void **state)
{
    (void)state;
    sw_image f = sw_test_random_image(4, 4, SW_PIX_F32, 30);
    const char *path = sw_test_path("w.pgm");
    assert_int_equal(sw_pgm_write(NULL, path, &f), SW_EINVAL);
    sw_image_free(&f);
    f = sw_test_random_image(4, 4, SW_PIX_U32, 31);
    assert_int_equal(sw_pgm_write(NULL, path, &f), SW_EINVAL);
    sw_image_free(&f);
    assert_false(sw_test_file_exists(path));

    sw_image img = sw_test_random_image(4, 4, SW_PIX_U8, 32);
    assert_int_equal(sw_pgm_write(NULL, NULL, &img), SW_EINVAL);
    assert_int_equal(sw_pgm_write(NULL, path, NULL), SW_EINVAL);
    sw_image dev;
    assert_int_equal(sw_image_wrap(img.data, 4, 4, img.stride, SW_PIX_U8, SW_MEM_DEVICE, &dev),
                     SW_OK);
    assert_int_equal(sw_pgm_write(NULL, path, &dev), SW_EINVAL);
    assert_false(sw_test_file_exists(path));

    const char *missing = sw_test_path("nodir/x.pgm");
    assert_int_equal(sw_pgm_write(NULL, missing, &img), SW_EIO);
    assert_non_null(strstr(sw_context_error(NULL), "x.pgm"));
    assert_false(sw_test_file_exists(missing));
    sw_test_write_file(sw_test_path("afile"), "x", 1);
    assert_int_equal(sw_pgm_write(NULL, sw_test_path("afile/x.pgm"), &img), SW_EIO);
    if (sw_test_readonly_dir("ro")) {
        assert_int_equal(sw_pgm_write(NULL, sw_test_path("ro/x.pgm"), &img), SW_EIO);
        assert_false(sw_test_file_exists(sw_test_path("ro/x.pgm")));
    }
    /* a failed write leaves an existing file untouched */
    sw_image other = sw_test_random_image(4, 4, SW_PIX_U8, 33);
    assert_int_equal(sw_pgm_write(NULL, path, &other), SW_OK);
    assert_int_equal(sw_pgm_write(NULL, path, &dev), SW_EINVAL);
    sw_image back;
    assert_int_equal(sw_pgm_read(NULL, path, &back), SW_OK);
    assert_true(sw_image_equal(&back, &other));
    sw_image_free(&back);
    sw_image_free(&other);
    sw_image_free(&img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(roundtrip),
        cmocka_unit_test(header_syntax_and_byte_order),
        cmocka_unit_test(bad_input),
        cmocka_unit_test(bad_writes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

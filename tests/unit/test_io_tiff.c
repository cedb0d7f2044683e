/*
 * TIFF: round trips (8/16/32-bit unsigned, 32-bit float; strips and tiles; several pages as
 * frames), files written by libtiff directly (big-endian, LZW, one strip per image), what is
 * refused (signed, RGB, pages that disagree) and corrupt or truncated files (SW_EFORMAT), and the
 * fuzzer's finds kept in tests/fuzz/corpus/tiff as regress_* (a 722-byte file that declared a
 * 4.3 GB frame).
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>

static void roundtrip(void **state)
{
    (void)state;
    const sw_pixel_type types[4] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_U32, SW_PIX_F32};
    for (int k = 0; k < 4; k++)
        for (int tiled = 0; tiled < 2; tiled++) {
            sw_image pages[3];
            for (int p = 0; p < 3; p++)
                pages[p] = sw_test_random_image(70, 45, types[k], 100 + (uint64_t)(10 * k + p));
            const char *path = sw_test_path("rt.tif");
            assert_int_equal(sw_tiff_write(NULL, path, pages, 3, tiled), SW_OK);
            sw_frames fr;
            assert_int_equal(sw_tiff_read(NULL, path, &fr), SW_OK);
            assert_int_equal(fr.count, 3);
            for (int p = 0; p < 3; p++) {
                assert_int_equal(fr.frames[p].type, types[k]);
                assert_true(sw_image_equal(&pages[p], &fr.frames[p]));
                sw_image_free(&pages[p]);
            }
            sw_frames_free(&fr);
        }
}

/* A page written by libtiff itself: mode "wb" (big-endian), the given compression and samples. */
static void write_page(TIFF *t, uint32_t w, uint32_t h, uint16_t bps, uint16_t fmt, uint16_t spp,
                       uint16_t comp, const void *data)
{
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, bps);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, spp);
    TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, fmt);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, spp == 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(t, TIFFTAG_COMPRESSION, comp);
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, h);
    /* libtiff swaps the bytes of what it writes in place for a big-endian file: a copy */
    size_t n = (size_t)w * h * spp * (bps / 8);
    void *copy = malloc(n);
    memcpy(copy, data, n);
    assert_true(TIFFWriteEncodedStrip(t, 0, copy, (tmsize_t)n) >= 0);
    free(copy);
    assert_true(TIFFWriteDirectory(t));
}

static void libtiff_files(void **state)
{
    (void)state;
    const uint32_t w = 33, h = 21;
    sw_image a = sw_test_random_image((int32_t)w, (int32_t)h, SW_PIX_U16, 9);
    const char *path = sw_test_path("be.tif");
    TIFF *t = TIFFOpen(path, "wb");
    assert_non_null(t);
    uint16_t *packed = malloc((size_t)w * h * 2); /* the image's rows may be padded */
    for (uint32_t y = 0; y < h; y++)
        memcpy(packed + (size_t)y * w, sw_image_row(&a, (int32_t)y), (size_t)w * 2);
    write_page(t, w, h, 16, SAMPLEFORMAT_UINT, 1, COMPRESSION_LZW, packed);
    TIFFClose(t);
    sw_frames fr;
    assert_int_equal(sw_tiff_read(NULL, path, &fr), SW_OK);
    assert_int_equal(fr.count, 1);
    assert_true(sw_image_equal(&a, &fr.frames[0]));
    sw_frames_free(&fr);

    /* the same bytes from memory */
    FILE *f = fopen(path, "rb");
    unsigned char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(sw_tiff_read_memory(NULL, buf, n, &fr), SW_OK);
    assert_true(sw_image_equal(&a, &fr.frames[0]));
    sw_frames_free(&fr);
    /* truncated anywhere: refused with a message, never a crash */
    for (size_t cut = 0; cut < n; cut += n / 23 + 1) {
        sw_status st = sw_tiff_read_memory(NULL, buf, cut, &fr);
        assert_int_equal(st, SW_EFORMAT);
        assert_null(fr.frames);
        assert_int_equal(fr.count, 0);
    }

    /* signed 16-bit, RGB: refused as unsupported, saying what the file holds */
    t = TIFFOpen(path, "w");
    write_page(t, w, h, 16, SAMPLEFORMAT_INT, 1, COMPRESSION_NONE, packed);
    TIFFClose(t);
    assert_int_equal(sw_tiff_read(NULL, path, &fr), SW_EUNSUPPORTED);
    assert_non_null(strstr(sw_context_error(NULL), "signed integer"));
    uint8_t *rgb = calloc((size_t)w * h * 3, 1);
    t = TIFFOpen(path, "w");
    write_page(t, w, h, 8, SAMPLEFORMAT_UINT, 3, COMPRESSION_NONE, rgb);
    TIFFClose(t);
    assert_int_equal(sw_tiff_read(NULL, path, &fr), SW_EUNSUPPORTED);
    assert_non_null(strstr(sw_context_error(NULL), "samples per pixel"));
    free(rgb);

    /* pages that disagree in size */
    t = TIFFOpen(path, "w");
    write_page(t, w, h, 16, SAMPLEFORMAT_UINT, 1, COMPRESSION_NONE, packed);
    write_page(t, w - 1, h, 16, SAMPLEFORMAT_UINT, 1, COMPRESSION_NONE, packed);
    TIFFClose(t);
    assert_int_equal(sw_tiff_read(NULL, path, &fr), SW_EFORMAT);
    assert_non_null(strstr(sw_context_error(NULL), "must agree"));
    assert_null(fr.frames);
    sw_image_free(&a);
    free(packed);

    /* not TIFF, missing */
    assert_int_equal(sw_tiff_read_memory(NULL, "II*\0garbage!", 12, &fr), SW_EFORMAT);
    assert_int_equal(sw_tiff_read_memory(NULL, "P5 1 1 255\n", 11, &fr), SW_EFORMAT);
    assert_int_equal(sw_tiff_read(NULL, sw_test_path("missing.tif"), &fr), SW_EIO);
}

static void corrupt_bytes(void **state)
{
    (void)state;
    sw_image a = sw_test_random_image(64, 40, SW_PIX_U16, 3);
    const char *path = sw_test_path("c.tif");
    assert_int_equal(sw_tiff_write(NULL, path, &a, 1, 0), SW_OK);
    FILE *f = fopen(path, "rb");
    unsigned char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    /* flipping bytes: either a clean read of the right shape or a documented error */
    uint64_t s = 12345;
    for (int i = 0; i < 300; i++) {
        unsigned char m[65536];
        memcpy(m, buf, n);
        for (int j = 0; j < 3; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            m[(s >> 33) % n] ^= (unsigned char)(1u << ((s >> 20) & 7));
        }
        sw_frames fr;
        sw_status st = sw_tiff_read_memory(NULL, m, n, &fr);
        if (st == SW_OK) {
            assert_true(fr.count >= 1);
            sw_frames_free(&fr);
        } else {
            assert_true(st == SW_EFORMAT || st == SW_EUNSUPPORTED || st == SW_ENOMEM);
            assert_null(fr.frames);
        }
    }
    sw_image_free(&a);
}

/* SW_TEST_DATA is tests/data (which need not exist): the corpus is tests/fuzz/corpus/tiff */
static void regression_inputs(void **state)
{
    (void)state;
    const char *data = getenv("SW_TEST_DATA");
    if (!data) {
        print_message("SKIP: SW_TEST_DATA is not set (run through ctest)\n");
        return;
    }
    size_t dl = strlen(data);
    while (dl > 0 && data[dl - 1] == '/')
        dl--;
    while (dl > 0 && data[dl - 1] != '/')
        dl--;
    char path[4096];
    snprintf(path, sizeof path, "%.*sfuzz/corpus/tiff/regress_oom_4gb_declared.tif", (int)dl, data);
    sw_frames fr;
    assert_int_equal(sw_tiff_read(NULL, path, &fr), SW_EFORMAT);
    assert_non_null(strstr(sw_context_error(NULL), "stores 722 bytes"));
    assert_null(fr.frames);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(roundtrip),
        cmocka_unit_test(libtiff_files),
        cmocka_unit_test(corrupt_bytes),
        cmocka_unit_test(regression_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

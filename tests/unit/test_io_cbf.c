/*
 * CBF / imgCIF: round trips through spotwave's writer; a file written by CBFlib itself (the
 * reference writer) with a Pilatus mini-header giving exact geometry values and an unsigned 16-bit
 * array; negative (bad, gap) pixels as a mask; the mini-header's units; corrupt and truncated
 * files refused with SW_EFORMAT (including the input that makes CBFlib overflow its array, which
 * must end in the isolated reader and not here).
 */
#define _GNU_SOURCE /* memmem */

#include "testutil.h"

#include <cbflib/cbf.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A Pilatus 6M's header as its camserver writes it (values of a real-looking run). */
static const char pilatus_header[] =
    "\r\n# Detector: PILATUS 6M, S/N 60-0100\r\n# 2011-06-01T10:00:00.000\r\n"
    "# Pixel_size 172e-6 m x 172e-6 m\r\n# Silicon sensor, thickness 0.000320 m\r\n"
    "# Exposure_time 0.0990000 s\r\n# Exposure_period 0.1000000 s\r\n# Tau = 383.8e-09 s\r\n"
    "# Count_cutoff 1048576 counts\r\n# Threshold_setting: 6342 eV\r\n"
    "# N_excluded_pixels = 1685\r\n# Wavelength 0.97625 A\r\n"
    "# Detector_distance 0.19000 m\r\n# Beam_xy (1231.50, 1263.50) pixels\r\n"
    "# Flux 0.000000\r\n# Start_angle 0.0000 deg.\r\n# Angle_increment 0.1000 deg.\r\n";

/* Writes a CBF with CBFlib directly: elsize-byte integers (signed or not), byte-offset. */
static void write_reference(const char *path, const void *values, size_t elsize, int elsigned,
                            size_t w, size_t h, const char *header)
{
    cbf_handle cbf;
    assert_int_equal(cbf_make_handle(&cbf), 0);
    assert_int_equal(cbf_new_datablock(cbf, "image_1"), 0);
    assert_int_equal(cbf_new_category(cbf, "array_data"), 0);
    assert_int_equal(cbf_new_column(cbf, "header_convention"), 0);
    assert_int_equal(cbf_set_value(cbf, "PILATUS_1.2"), 0);
    assert_int_equal(cbf_new_column(cbf, "header_contents"), 0);
    assert_int_equal(cbf_set_value(cbf, header), 0);
    assert_int_equal(cbf_new_column(cbf, "data"), 0);
    assert_int_equal(cbf_set_integerarray_wdims_fs(cbf, CBF_BYTE_OFFSET, 1, (void *)values, elsize,
                                                   elsigned, w * h, "little_endian", w, h, 0, 0),
                     0);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(cbf_write_file(cbf, f, 0, CBF, MSG_DIGEST | MIME_HEADERS,
                                    ENC_NONE | ENC_CRTERM | ENC_LFTERM),
                     0);
    fclose(f);
    cbf_free_handle(cbf);
}

static void reference_writer_geometry(void **state)
{
    (void)state;
    const size_t w = 37, h = 23;
    int32_t *v = malloc(w * h * sizeof *v);
    for (size_t i = 0; i < w * h; i++)
        v[i] = (int32_t)((i * 7919u) % 40000u) + (i % 97 == 0 ? 900000 : 0);
    v[5] = -1;     /* a bad pixel */
    v[w + 3] = -2; /* a gap */
    const char *path = sw_test_path("ref.cbf");
    write_reference(path, v, 4, 1, w, h, pilatus_header);
    sw_image img;
    uint8_t *valid = NULL;
    sw_diffraction_geometry g;
    assert_int_equal(sw_cbf_read(NULL, path, &img, &valid, &g), SW_OK);
    assert_int_equal(img.width, (int)w);
    assert_int_equal(img.height, (int)h);
    assert_int_equal(img.type, SW_PIX_U32);
    assert_non_null(valid);
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++) {
            uint32_t got = ((const uint32_t *)sw_image_row(&img, (int32_t)y))[x];
            int32_t want = v[y * w + x];
            assert_int_equal(valid[y * w + x], want >= 0);
            assert_int_equal(got, want >= 0 ? (uint32_t)want : 0u);
        }
    /* the header, exactly, in spotwave's units and pixel convention */
    assert_int_equal(g.have, SW_DG_WAVELENGTH | SW_DG_DISTANCE | SW_DG_BEAM | SW_DG_PIXEL |
                                 SW_DG_OVERLOAD | SW_DG_EXPOSURE);
    assert_true(g.wavelength_a == 0.97625);
    assert_true(fabs(g.distance_mm - 190.0) < 1e-12);
    assert_true(g.beam_x_px == 1231.0 && g.beam_y_px == 1263.0);
    assert_true(fabs(g.pixel_x_mm - 0.172) < 1e-15 && fabs(g.pixel_y_mm - 0.172) < 1e-15);
    assert_true(g.overload == 1048576.0);
    assert_true(g.exposure_s == 0.099);
    assert_int_equal(g.orientation, 0);
    assert_int_equal(sw_diffraction_geometry_check(NULL, &g), SW_OK);
    free(valid);
    sw_image_free(&img);

    /* unsigned 16-bit data read as u16, no mask when nothing is negative */
    uint16_t *u = malloc(w * h * sizeof *u);
    for (size_t i = 0; i < w * h; i++)
        u[i] = (uint16_t)((i * 40503u) & 0xFFFF);
    write_reference(path, u, 2, 0, w, h, "\n# Wavelength 1.5418 A\n");
    assert_int_equal(sw_cbf_read(NULL, path, &img, &valid, &g), SW_OK);
    assert_int_equal(img.type, SW_PIX_U16);
    assert_null(valid);
    assert_int_equal(g.have, SW_DG_WAVELENGTH);
    for (size_t y = 0; y < h; y++)
        assert_memory_equal(sw_image_row(&img, (int32_t)y), u + y * w, w * 2);
    sw_image_free(&img);
    free(u);
    free(v);
}

static void roundtrip(void **state)
{
    (void)state;
    const sw_pixel_type types[3] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_U32};
    for (int k = 0; k < 3; k++) {
        sw_image img = sw_test_random_image(41, 19, types[k], 77 + (uint64_t)k);
        if (types[k] == SW_PIX_U32)
            for (int32_t y = 0; y < img.height; y++)
                for (int32_t x = 0; x < img.width; x++)
                    ((uint32_t *)sw_image_row(&img, y))[x] &= 0x7FFFFFFFu;
        uint8_t *mask = malloc((size_t)img.width * img.height);
        for (int32_t i = 0; i < img.width * img.height; i++)
            mask[i] = (i % 13) != 0;
        sw_diffraction_geometry g, back_g;
        sw_diffraction_geometry_init(&g);
        g.wavelength_a = 0.7293;
        g.distance_mm = 123.456;
        g.beam_x_px = 20.25;
        g.beam_y_px = 9.75;
        g.pixel_x_mm = 0.075;
        g.pixel_y_mm = 0.075;
        g.overload = 65535;
        g.exposure_s = 0.002;
        g.have = SW_DG_WAVELENGTH | SW_DG_DISTANCE | SW_DG_BEAM | SW_DG_PIXEL | SW_DG_OVERLOAD |
                 SW_DG_EXPOSURE;
        const char *path = sw_test_path("rt.cbf");
        assert_int_equal(sw_cbf_write(NULL, path, &img, mask, &g), SW_OK);
        sw_image back;
        uint8_t *valid = NULL;
        assert_int_equal(sw_cbf_read(NULL, path, &back, &valid, &back_g), SW_OK);
        assert_int_equal(back.type, SW_PIX_U32); /* Pilatus-like: signed 32-bit on disk */
        assert_non_null(valid);
        for (int32_t y = 0; y < img.height; y++)
            for (int32_t x = 0; x < img.width; x++) {
                size_t i = (size_t)y * img.width + x;
                double want = sw_image_get(&img, x, y);
                assert_int_equal(valid[i], mask[i]);
                assert_true(sw_image_get(&back, x, y) == (mask[i] ? want : 0.0));
            }
        assert_int_equal(back_g.have, g.have);
        assert_true(back_g.wavelength_a == g.wavelength_a);
        assert_true(fabs(back_g.distance_mm - g.distance_mm) < 1e-12);
        assert_true(back_g.beam_x_px == g.beam_x_px && back_g.beam_y_px == g.beam_y_px);
        assert_true(fabs(back_g.pixel_x_mm - g.pixel_x_mm) < 1e-15);
        assert_true(back_g.overload == g.overload && back_g.exposure_s == g.exposure_s);
        free(valid);
        free(mask);
        sw_image_free(&back);
        sw_image_free(&img);
    }
    /* f32 cannot be written; u32 beyond int32 is a range error */
    sw_image f = sw_test_random_image(4, 4, SW_PIX_F32, 1);
    assert_int_equal(sw_cbf_write(NULL, sw_test_path("f.cbf"), &f, NULL, NULL), SW_EINVAL);
    sw_image_free(&f);
    sw_image big = sw_test_random_image(4, 4, SW_PIX_U32, 1);
    ((uint32_t *)big.data)[0] = 0xFFFFFFFFu;
    assert_int_equal(sw_cbf_write(NULL, sw_test_path("big.cbf"), &big, NULL, NULL), SW_ERANGE);
    sw_image_free(&big);
}

/* One array (elsize-byte integers, signed, byte offset) as the data column of the current row:
 * w x h x slow (slow 0: a 2-D array). */
static void set_array(cbf_handle cbf, const void *values, size_t elsize, size_t w, size_t h,
                      size_t slow)
{
    assert_int_equal(cbf_set_integerarray_wdims_fs(cbf, CBF_BYTE_OFFSET, 1, (void *)values, elsize,
                                                   1, w * h * (slow ? slow : 1), "little_endian", w,
                                                   h, slow, 0),
                     0);
}

static void write_cbf(cbf_handle cbf, const char *path)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(cbf_write_file(cbf, f, 0, CBF, MSG_DIGEST | MIME_HEADERS,
                                    ENC_NONE | ENC_CRTERM | ENC_LFTERM),
                     0);
    fclose(f);
    cbf_free_handle(cbf);
}

/* A data block "image_<k>" with _array_data (header_contents, data) of one 2-D array. */
static void add_block(cbf_handle cbf, int k, const char *header, const int32_t *v, size_t w,
                      size_t h)
{
    char name[32];
    snprintf(name, sizeof name, "image_%d", k);
    assert_int_equal(cbf_new_datablock(cbf, name), 0);
    assert_int_equal(cbf_new_category(cbf, "array_data"), 0);
    assert_int_equal(cbf_new_column(cbf, "header_contents"), 0);
    assert_int_equal(cbf_set_value(cbf, header), 0);
    assert_int_equal(cbf_new_column(cbf, "data"), 0);
    set_array(cbf, v, 4, w, h, 0);
}

/* Files of several frames written by CBFlib: three data blocks of one array each (every frame
 * read in order, the first block's mini-header the geometry, a pixel negative in any frame
 * masked); one block of two rows of _array_data.data; a 3-D array of 3 planes; blocks that
 * differ in size refused; sw_cbf_read refuses several; every cut of a two-frame file refused. */
static void several_frames(void **state)
{
    (void)state;
    const size_t w = 23, h = 17, np = w * h;
    int32_t *v = malloc(3 * np * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < 3 * np; i++)
        v[i] = (int32_t)((i * 2654435761u) % 50000u);
    v[7] = -1;          /* bad in frame 0 only */
    v[np + 30] = -2;    /* a gap in frame 1 only */
    v[2 * np + 7] = 70; /* frame 2 good where frame 0 was bad */
    const char *path = sw_test_path("multi.cbf");
    cbf_handle cbf;
    assert_int_equal(cbf_make_handle(&cbf), 0);
    add_block(cbf, 1, pilatus_header, v, w, h);
    add_block(cbf, 2, "\n# Wavelength 2.0 A\n", v + np, w, h);
    add_block(cbf, 3, "\n# Wavelength 3.0 A\n", v + 2 * np, w, h);
    write_cbf(cbf, path);

    sw_frames fr;
    uint8_t *valid = NULL;
    sw_diffraction_geometry g;
    assert_int_equal(sw_cbf_read_frames(NULL, path, &fr, &valid, &g), SW_OK);
    assert_int_equal(fr.count, 3);
    assert_non_null(valid);
    assert_true(g.wavelength_a == 0.97625 && (g.have & SW_DG_BEAM)); /* the first block's */
    for (int k = 0; k < 3; k++) {
        assert_int_equal(fr.frames[k].type, SW_PIX_U32);
        for (size_t i = 0; i < np; i++) {
            const int32_t want = v[(size_t)k * np + i];
            const uint32_t got =
                ((const uint32_t *)sw_image_row(&fr.frames[k], (int32_t)(i / w)))[i % w];
            assert_int_equal(got, want < 0 ? 0u : (uint32_t)want);
        }
    }
    for (size_t i = 0; i < np; i++)
        assert_int_equal(valid[i], i != 7 && i != 30);
    free(valid);
    sw_frames_free(&fr);
    sw_image one;
    assert_int_equal(sw_cbf_read(NULL, path, &one, &valid, &g), SW_EUNSUPPORTED);
    assert_non_null(strstr(sw_context_error(NULL), "3 frames"));
    assert_null(one.data);
    assert_null(valid);

    /* every cut of the file inside the frames: refused, nothing returned */
    size_t n;
    unsigned char *b = NULL;
    {
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        n = (size_t)ftell(f);
        rewind(f);
        b = malloc(n);
        assert_int_equal(fread(b, 1, n, f), n);
        fclose(f);
    }
    for (size_t cut = n / 3; cut < n - 60; cut += n / 9) {
        sw_status st = sw_cbf_read_frames_memory(NULL, b, cut, &fr, &valid, &g);
        assert_true(st == SW_EFORMAT);
        assert_int_equal(fr.count, 0);
        assert_null(fr.frames);
        assert_null(valid);
    }
    /* the whole buffer reads as the file does */
    assert_int_equal(sw_cbf_read_frames_memory(NULL, b, n, &fr, NULL, NULL), SW_OK);
    assert_int_equal(fr.count, 3);
    sw_frames_free(&fr);
    free(b);

    /* one block, two rows of _array_data.data */
    assert_int_equal(cbf_make_handle(&cbf), 0);
    assert_int_equal(cbf_new_datablock(cbf, "image_1"), 0);
    assert_int_equal(cbf_new_category(cbf, "array_data"), 0);
    assert_int_equal(cbf_new_column(cbf, "data"), 0);
    set_array(cbf, v + np, 4, w, h, 0);
    assert_int_equal(cbf_new_row(cbf), 0);
    set_array(cbf, v + 2 * np, 4, w, h, 0);
    write_cbf(cbf, path);
    assert_int_equal(sw_cbf_read_frames(NULL, path, &fr, NULL, NULL), SW_OK);
    assert_int_equal(fr.count, 2);
    assert_int_equal(((const uint32_t *)fr.frames[1].data)[7], 70u);
    assert_int_equal(((const uint32_t *)fr.frames[0].data)[0], (uint32_t)v[np]);
    sw_frames_free(&fr);

    /* a 3-D array: a frame per plane */
    assert_int_equal(cbf_make_handle(&cbf), 0);
    assert_int_equal(cbf_new_datablock(cbf, "image_1"), 0);
    assert_int_equal(cbf_new_category(cbf, "array_data"), 0);
    assert_int_equal(cbf_new_column(cbf, "data"), 0);
    set_array(cbf, v, 4, w, h, 3);
    write_cbf(cbf, path);
    assert_int_equal(sw_cbf_read_frames(NULL, path, &fr, &valid, NULL), SW_OK);
    assert_int_equal(fr.count, 3);
    assert_int_equal(((const uint32_t *)fr.frames[2].data)[7], 70u);
    assert_int_equal(((const uint32_t *)fr.frames[1].data)[0], (uint32_t)v[np]);
    free(valid);
    sw_frames_free(&fr);

    /* blocks of different sizes: refused, naming the one that differs */
    assert_int_equal(cbf_make_handle(&cbf), 0);
    add_block(cbf, 1, "\n# Detector: a\n", v, w, h);
    add_block(cbf, 2, "\n# Detector: b\n", v, w - 1, h);
    write_cbf(cbf, path);
    assert_int_equal(sw_cbf_read_frames(NULL, path, &fr, &valid, NULL), SW_EUNSUPPORTED);
    assert_non_null(strstr(sw_context_error(NULL), "data block 2"));
    assert_int_equal(fr.count, 0);
    assert_null(valid);
    free(v);
}

static void header_units(void **state)
{
    (void)state;
    sw_diffraction_geometry g;
    const char *t = "# Detector_distance 250 mm\n# Wavelength 1.0 nm\n"
                    "# Pixel_size 0.172 mm x 0.172 mm\n# Beam_xy (10, 20) mm\n"
                    "# Exposure_time -1 s\n# Count_cutoff 100\n";
    assert_int_equal(sw_cbf_parse_header(t, strlen(t), &g), 3);
    assert_true(g.distance_mm == 250.0);
    assert_true(g.pixel_x_mm == 0.172 && g.pixel_y_mm == 0.172);
    assert_true(g.overload == 100.0);
    /* a wavelength in nm, a beam centre in mm, a negative exposure: not taken */
    assert_int_equal(g.have, SW_DG_DISTANCE | SW_DG_PIXEL | SW_DG_OVERLOAD);
    assert_int_equal(sw_cbf_parse_header("", 0, &g), 0);
    assert_int_equal(g.have, 0u);
    /* a NUL inside ends the text; nothing read past size */
    const char nul[] = "# Wavelength 1 A\0# Detector_distance 1 m\n";
    assert_int_equal(sw_cbf_parse_header(nul, sizeof nul - 1, &g), 1);
    assert_int_equal(sw_cbf_parse_header(nul, 5, &g), 0);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)len);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void corrupt(void **state)
{
    (void)state;
    sw_image img;
    uint8_t *valid;
    sw_diffraction_geometry g;
    assert_int_equal(sw_cbf_read(NULL, sw_test_path("missing.cbf"), &img, &valid, &g), SW_EIO);
    assert_int_equal(sw_cbf_read_memory(NULL, "hello", 5, &img, &valid, &g), SW_EFORMAT);
    assert_non_null(strstr(sw_context_error(NULL), "not a CBF"));
    assert_int_equal(sw_cbf_read_memory(NULL, "###CBF: VERSION 1.5\n", 20, &img, &valid, &g),
                     SW_EFORMAT);
    assert_null(img.data);

    sw_image src = sw_test_random_image(30, 20, SW_PIX_U16, 5);
    const char *path = sw_test_path("c.cbf");
    assert_int_equal(sw_cbf_write(NULL, path, &src, NULL, NULL), SW_OK);
    size_t n;
    unsigned char *b = slurp(path, &n);
    /* cut anywhere in the binary section: refused */
    const char *bin = memmem(b, n, "\x0c\x1a\x04\xd5", 4);
    assert_non_null(bin);
    size_t start = (size_t)((const unsigned char *)bin - b);
    for (size_t cut = start; cut < n - 40; cut += (n - start) / 7 + 1) {
        assert_int_equal(sw_cbf_read_memory(NULL, b, cut, &img, &valid, &g), SW_EFORMAT);
        assert_null(img.data);
        assert_null(valid);
    }
    /* one flipped byte in the data: the MD5 digest no longer matches */
    b[start + 40] ^= 0x40;
    assert_int_equal(sw_cbf_read_memory(NULL, b, n, &img, &valid, &g), SW_EFORMAT);
    free(b);
    sw_image_free(&src);

    /* the mutated file that makes CBFlib write past its array: SW_EFORMAT, this process alive */
    /* SW_TEST_DATA is tests/data (which need not exist): the corpus is tests/fuzz/corpus */
    const char *data = getenv("SW_TEST_DATA") ? getenv("SW_TEST_DATA") : "tests/data";
    size_t dl = strlen(data);
    while (dl > 0 && data[dl - 1] == '/')
        dl--;
    while (dl > 0 && data[dl - 1] != '/')
        dl--;
    char rpath[4096];
    snprintf(rpath, sizeof rpath, "%.*sfuzz/corpus/cbf/regress_cbflib_heap_overflow.cbf", (int)dl,
             data);
    FILE *f = fopen(rpath, "rb");
    if (f) {
        fclose(f);
        sw_status st = sw_cbf_read(NULL, rpath, &img, &valid, &g);
        assert_int_equal(st, SW_EFORMAT);
        assert_null(img.data);
    } else {
        fail_msg("regression input %s missing", rpath);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reference_writer_geometry),
        cmocka_unit_test(roundtrip),
        cmocka_unit_test(several_frames),
        cmocka_unit_test(header_units),
        cmocka_unit_test(corrupt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

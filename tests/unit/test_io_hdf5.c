/*
 * HDF5 (Eiger / NeXus) frames: round trips through sw_h5_write / sw_h5_write_linked for every
 * integer type, block split and compression; files laid out by hand with the HDF5 C API as an
 * Eiger writes them (master + external links, bitshuffle/LZ4, pixel mask, overload); and every
 * kind of bad input, each with its status, a message that says what is wrong, and nothing on
 * stderr.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const sw_pixel_type int_types[3] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_U32};

/* The last failure's message must contain words. */
static void assert_msg(const char *msg, const char *words)
{
    if (!strstr(msg, words)) {
        print_error("message \"%s\" lacks \"%s\"\n", msg, words);
        fail();
    }
}

/* Opening must fail with want, *out NULL and words in the message. */
static void assert_open_fails(const char *path, const char *dataset, sw_status want,
                              const char *words)
{
    sw_h5_reader *r = (sw_h5_reader *)&r; /* not NULL: open must reset it */
    sw_status st = sw_h5_open(NULL, path, dataset, &r);
    if (st != want)
        print_error("%s: status %d (%s), wanted %d; message: %s\n", path, (int)st,
                    sw_status_string(st), (int)want, sw_context_error(NULL));
    assert_int_equal(st, want);
    assert_null(r);
    assert_msg(sw_context_error(NULL), words);
}

static sw_h5_reader *open_ok(const char *path, const char *dataset)
{
    sw_h5_reader *r = NULL;
    sw_status st = sw_h5_open(NULL, path, dataset, &r);
    if (st != SW_OK)
        print_error("%s: %s\n", path, sw_context_error(NULL));
    assert_int_equal(st, SW_OK);
    assert_non_null(r);
    return r;
}

/* n random frames (seeds seed, seed + 1, ...). */
static sw_image *make_frames(int32_t n, int32_t w, int32_t h, sw_pixel_type t, uint64_t seed)
{
    sw_image *f = calloc((size_t)n, sizeof *f);
    assert_non_null(f);
    for (int32_t i = 0; i < n; i++)
        f[i] = sw_test_random_image(w, h, t, seed + (uint64_t)i);
    return f;
}

static void free_frames(sw_image *f, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        sw_image_free(&f[i]);
    free(f);
}

/* Every frame of the file must equal frames[first + i], read into padded images. */
static void assert_frames_read_back(sw_h5_reader *r, const sw_image *frames, int32_t n,
                                    int32_t first)
{
    sw_h5_info in;
    assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
    assert_int_equal(in.frames, n);
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, in.width, in.height, in.type, &img), SW_OK);
    for (int32_t i = 0; i < n; i++) {
        sw_status st = sw_h5_read_frame(r, i, &img);
        if (st != SW_OK)
            print_error("frame %d: %s\n", (int)i, sw_h5_reader_error(r));
        assert_int_equal(st, SW_OK);
        if (!sw_image_equal(&img, &frames[first + i]))
            fail_msg("frame %d differs from what was written", (int)i);
    }
    sw_image_free(&img);
}

/* ------------------------------------------------------------------ raw HDF5 helpers */

static hid_t h5_create(const char *path)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(f >= 0);
    return f;
}

static hid_t h5_open_ro(const char *path)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    return f;
}

/* A dataset at path (intermediate groups made), optionally chunked one frame per chunk with
 * bitshuffle/LZ4 as Eiger does; data (of memory type mtype) may be NULL. */
static void h5_put(hid_t f, const char *path, hid_t ftype, hid_t mtype, int rank,
                   const hsize_t *dims, const void *data, int bslz4)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    assert_true(H5Pset_create_intermediate_group(lcpl, 1) >= 0);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (bslz4) {
        hsize_t chunk[3] = {1, dims[1], dims[2]};
        /* block size 0 (automatic), 2 = LZ4; the filter puts its version and the element size
         * in front, so the file holds {major, minor, element size, 0, 2} as Eiger files do */
        const unsigned cd[2] = {0, 2};
        assert_true(H5Pset_chunk(dcpl, 3, chunk) >= 0);
        assert_true(H5Pset_filter(dcpl, 32008, H5Z_FLAG_MANDATORY, 2, cd) >= 0);
    }
    hid_t s = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims, NULL);
    assert_true(s >= 0);
    hid_t d = H5Dcreate2(f, path, ftype, s, lcpl, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    if (data)
        assert_true(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(d);
    H5Sclose(s);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
}

static void h5_group(hid_t f, const char *path)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    assert_true(H5Pset_create_intermediate_group(lcpl, 1) >= 0);
    hid_t g = H5Gcreate2(f, path, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(g >= 0);
    H5Gclose(g);
    H5Pclose(lcpl);
}

static void h5_close(hid_t f)
{
    assert_true(H5Fclose(f) >= 0);
}

/* A file whose /entry/data/data is a dataset of the given type and shape (zero-filled). */
static const char *file_with_dataset(const char *name, hid_t ftype, int rank, const hsize_t *dims)
{
    const char *path = sw_test_path(name);
    hid_t f = h5_create(path);
    h5_put(f, "/entry/data/data", ftype, ftype, rank, dims, NULL, 0);
    h5_close(f);
    return path;
}

/* Reads a string attribute (fixed or variable length) into buf. */
static void h5_string_attr(hid_t loc, const char *obj, const char *name, char *buf, size_t size)
{
    hid_t a = H5Aopen_by_name(loc, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0);
    hid_t t = H5Aget_type(a);
    assert_int_equal(H5Tget_class(t), H5T_STRING);
    assert_false(H5Tis_variable_str(t));
    size_t n = H5Tget_size(t);
    assert_true(n < size);
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, n);
    memset(buf, 0, size);
    assert_true(H5Aread(a, mt, buf) >= 0);
    H5Tclose(mt);
    H5Tclose(t);
    H5Aclose(a);
}

static double h5_scalar(hid_t f, const char *path)
{
    double v = NAN;
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) >= 0);
    H5Dclose(d);
    return v;
}

/* ------------------------------------------------------------------ round trips */

/* The written file as Eiger lays it out, checked with the HDF5 API rather than our reader. */
static void check_layout(const char *path, int32_t count, int32_t w, int32_t h, int32_t per,
                         sw_h5_compression comp)
{
    hid_t f = h5_open_ro(path);
    char s[64];
    h5_string_attr(f, "/entry", "NX_class", s, sizeof s);
    assert_string_equal(s, "NXentry");
    h5_string_attr(f, "/entry/data", "NX_class", s, sizeof s);
    assert_string_equal(s, "NXdata");
    h5_string_attr(f, "/entry/instrument/detector", "NX_class", s, sizeof s);
    assert_string_equal(s, "NXdetector");
    int32_t blocks = (count + per - 1) / per;
    for (int32_t b = 0; b < blocks; b++) {
        char name[64];
        snprintf(name, sizeof name, "/entry/data/data_%06d", (int)b + 1);
        hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
        assert_true(d >= 0);
        hid_t sp = H5Dget_space(d);
        hsize_t dims[3];
        assert_int_equal(H5Sget_simple_extent_ndims(sp), 3);
        H5Sget_simple_extent_dims(sp, dims, NULL);
        int32_t want = b < blocks - 1 ? per : count - per * (blocks - 1);
        assert_int_equal(dims[0], want);
        assert_int_equal(dims[1], h);
        assert_int_equal(dims[2], w);
        hid_t dcpl = H5Dget_create_plist(d);
        hsize_t chunk[3];
        assert_int_equal(H5Pget_layout(dcpl), H5D_CHUNKED);
        assert_int_equal(H5Pget_chunk(dcpl, 3, chunk), 3);
        assert_int_equal(chunk[0], 1);
        assert_int_equal(chunk[1], h);
        assert_int_equal(chunk[2], w);
        int nf = H5Pget_nfilters(dcpl);
        if (comp == SW_H5_NONE) {
            assert_int_equal(nf, 0);
        } else if (comp == SW_H5_DEFLATE) {
            assert_int_equal(nf, 2);
            unsigned flags, cd[8];
            size_t ncd = 8;
            assert_int_equal(H5Pget_filter2(dcpl, 0, &flags, &ncd, cd, 0, NULL, NULL),
                             H5Z_FILTER_SHUFFLE);
            ncd = 8;
            assert_int_equal(H5Pget_filter2(dcpl, 1, &flags, &ncd, cd, 0, NULL, NULL),
                             H5Z_FILTER_DEFLATE);
        } else {
            assert_int_equal(nf, 1);
            unsigned flags, cd[8];
            size_t ncd = 8;
            assert_int_equal(H5Pget_filter2(dcpl, 0, &flags, &ncd, cd, 0, NULL, NULL), 32008);
            assert_true(ncd >= 5);
            assert_int_equal(cd[3], 0); /* block size: automatic */
            assert_int_equal(cd[4], 2); /* LZ4 */
        }
        /* Eiger's 1-based frame numbers of the block */
        int64_t lo = 0, hi = 0;
        hid_t a = H5Aopen(d, "image_nr_low", H5P_DEFAULT);
        assert_true(a >= 0 && H5Aread(a, H5T_NATIVE_INT64, &lo) >= 0);
        H5Aclose(a);
        a = H5Aopen(d, "image_nr_high", H5P_DEFAULT);
        assert_true(a >= 0 && H5Aread(a, H5T_NATIVE_INT64, &hi) >= 0);
        H5Aclose(a);
        assert_int_equal(lo, (int64_t)b * per + 1);
        assert_int_equal(hi, (int64_t)b * per + want);
        H5Pclose(dcpl);
        H5Sclose(sp);
        H5Dclose(d);
    }
    char name[64];
    snprintf(name, sizeof name, "/entry/data/data_%06d", (int)blocks + 1);
    assert_true(H5Lexists(f, name, H5P_DEFAULT) == 0);
    h5_close(f);
}

static void roundtrip_types_and_compression(void **state)
{
    (void)state;
    const int32_t w = 37, h = 23, count = 7, per = 3; /* 3 blocks: 3 + 3 + 1 */
    int have_bslz4 = sw_h5_bitshuffle_available();
    if (!have_bslz4)
        print_message("SKIP (bitshuffle/LZ4 cases only): HDF5 cannot load filter 32008 here; "
                      "install bitshuffle and hdf5-filter-plugin or set HDF5_PLUGIN_PATH\n");
    const sw_h5_compression comps[3] = {SW_H5_NONE, SW_H5_DEFLATE, SW_H5_BSLZ4};
    for (int ti = 0; ti < 3; ti++) {
        for (int ci = 0; ci < 3; ci++) {
            if (comps[ci] == SW_H5_BSLZ4 && !have_bslz4)
                continue;
            sw_image *fr = make_frames(count, w, h, int_types[ti], 100 + 10 * (uint64_t)ti);
            char path[768];
            snprintf(path, sizeof path, "%s", sw_test_path("rt.h5"));
            sw_status st = sw_h5_write(NULL, path, fr, count, per, comps[ci], NULL, 0.0);
            if (st != SW_OK)
                print_error("%s\n", sw_context_error(NULL));
            assert_int_equal(st, SW_OK);
            check_layout(path, count, w, h, per, comps[ci]);
            sw_h5_reader *r = open_ok(path, NULL);
            sw_h5_info in;
            assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
            assert_int_equal(in.width, w);
            assert_int_equal(in.height, h);
            assert_int_equal(in.type, int_types[ti]);
            assert_int_equal(in.blocks, 3);
            assert_int_equal(in.compressed, comps[ci] != SW_H5_NONE);
            assert_int_equal(in.has_pixel_mask, 0);
            assert_true(in.overload == 0.0);
            assert_frames_read_back(r, fr, count, 0);
            /* out of order, across blocks */
            sw_image img;
            assert_int_equal(sw_image_alloc(NULL, w, h, int_types[ti], &img), SW_OK);
            const int64_t order[5] = {6, 0, 3, 5, 2};
            for (int k = 0; k < 5; k++) {
                assert_int_equal(sw_h5_read_frame(r, order[k], &img), SW_OK);
                assert_true(sw_image_equal(&img, &fr[order[k]]));
            }
            sw_image_free(&img);
            sw_h5_close(r);
            free_frames(fr, count);
        }
    }
    assert_int_equal(sw_test_count_temp_files(), 0);
}

/* Compression really compresses: frames of a flat background with a few spots take a fraction
 * of their raw size with DEFLATE and BSLZ4 (which would not hold if LZ4 were off: bitshuffle
 * alone keeps the size), and exactly the raw size without a filter. */
static void compression_shrinks_data(void **state)
{
    (void)state;
    const int32_t w = 64, h = 48, count = 4;
    sw_image fr[4];
    for (int i = 0; i < count; i++) {
        assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U32, &fr[i]), SW_OK);
        for (int32_t y = 0; y < h; y++)
            for (int32_t x = 0; x < w; x++)
                ((uint32_t *)sw_image_row(&fr[i], y))[x] =
                    3u + (uint32_t)((x * 7 + y * 3 + i) % 4 == 0) +
                    (uint32_t)(abs(x - 20 - i) < 2 && abs(y - 30) < 2) * 5000u;
    }
    const sw_h5_compression comps[3] = {SW_H5_NONE, SW_H5_DEFLATE, SW_H5_BSLZ4};
    const hsize_t raw = (hsize_t)count * (hsize_t)(w * h) * 4;
    for (int c = 0; c < 3; c++) {
        if (comps[c] == SW_H5_BSLZ4 && !sw_h5_bitshuffle_available()) {
            print_message("SKIP (bitshuffle/LZ4 case): HDF5 cannot load filter 32008 here\n");
            continue;
        }
        char path[768];
        snprintf(path, sizeof path, "%s", sw_test_path("shrink.h5"));
        assert_int_equal(sw_h5_write(NULL, path, fr, count, 0, comps[c], NULL, 0.0), SW_OK);
        hid_t f = h5_open_ro(path);
        hid_t d = H5Dopen2(f, "/entry/data/data_000001", H5P_DEFAULT);
        assert_true(d >= 0);
        hsize_t stored = H5Dget_storage_size(d);
        H5Dclose(d);
        h5_close(f);
        if (comps[c] == SW_H5_NONE)
            assert_int_equal(stored, raw);
        else if (stored * 4 > raw)
            fail_msg("compression %d stored %llu bytes of %llu raw", (int)comps[c],
                     (unsigned long long)stored, (unsigned long long)raw);
        sw_h5_reader *r = open_ok(path, NULL);
        assert_frames_read_back(r, fr, count, 0);
        sw_h5_close(r);
    }
    for (int i = 0; i < count; i++)
        sw_image_free(&fr[i]);
}

/* One block (0, count and more than count frames per block), strided input views, and a
 * destination with a wider stride whose padding must stay untouched. */
static void roundtrip_blocks_and_strides(void **state)
{
    (void)state;
    const int32_t w = 19, h = 11, count = 4;
    sw_image big[4];
    sw_image views[4];
    for (int i = 0; i < count; i++) {
        big[i] = sw_test_random_image(w + 9, h + 5, SW_PIX_U16, 500 + (uint64_t)i);
        assert_int_equal(sw_image_roi(NULL, &big[i], 3, 2, w, h, &views[i]), SW_OK);
    }
    const int32_t pers[3] = {0, count, count + 10};
    for (int p = 0; p < 3; p++) {
        char path[768];
        snprintf(path, sizeof path, "%s", sw_test_path("blocks.h5"));
        assert_int_equal(sw_h5_write(NULL, path, views, count, pers[p], SW_H5_DEFLATE, NULL, 0.0),
                         SW_OK);
        sw_h5_reader *r = open_ok(path, NULL);
        sw_h5_info in;
        assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
        assert_int_equal(in.blocks, 1);
        assert_int_equal(in.frames, count);
        assert_frames_read_back(r, views, count, 0);

        /* a destination whose rows are 7 pixels wider, padding filled with 0xAB */
        size_t stride = (size_t)(w + 7) * 2;
        uint8_t *buf = malloc(stride * (size_t)h);
        assert_non_null(buf);
        memset(buf, 0xAB, stride * (size_t)h);
        sw_image dst;
        assert_int_equal(sw_image_wrap(buf, w, h, stride, SW_PIX_U16, SW_MEM_HOST, &dst), SW_OK);
        assert_int_equal(sw_h5_read_frame(r, 2, &dst), SW_OK);
        assert_true(sw_image_equal(&dst, &views[2]));
        for (int32_t y = 0; y < h; y++)
            for (size_t b = (size_t)w * 2; b < stride; b++)
                assert_int_equal(buf[(size_t)y * stride + b], 0xAB);
        free(buf);
        sw_h5_close(r);
    }
    for (int i = 0; i < count; i++)
        sw_image_free(&big[i]);
}

static void roundtrip_mask_and_overload(void **state)
{
    (void)state;
    const int32_t w = 16, h = 9, count = 3;
    sw_image *fr = make_frames(count, w, h, SW_PIX_U32, 900);
    uint8_t valid[16 * 9], back[16 * 9];
    for (int i = 0; i < w * h; i++)
        valid[i] = (uint8_t)((i * 7 + i / 5) % 3 != 0); /* a mix of good and bad pixels */
    valid[5] = 200;                                     /* any non-zero value is good */
    char path[768];
    snprintf(path, sizeof path, "%s", sw_test_path("mask.h5"));
    assert_int_equal(sw_h5_write(NULL, path, fr, count, 2, SW_H5_NONE, valid, 12345.0), SW_OK);

    /* as stored: uint32 pixel_mask 0 good / 1 bad, the overload at both places */
    hid_t f = h5_open_ro(path);
    uint32_t m[16 * 9];
    hid_t d = H5Dopen2(f, "/entry/instrument/detector/detectorSpecific/pixel_mask", H5P_DEFAULT);
    assert_true(d >= 0);
    hid_t t = H5Dget_type(d);
    assert_int_equal(H5Tget_class(t), H5T_INTEGER);
    assert_int_equal(H5Tget_size(t), 4);
    assert_int_equal(H5Tget_sign(t), H5T_SGN_NONE);
    H5Tclose(t);
    assert_true(H5Dread(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, m) >= 0);
    H5Dclose(d);
    for (int i = 0; i < w * h; i++)
        assert_int_equal(m[i], valid[i] ? 0u : 1u);
    assert_true(
        h5_scalar(
            f, "/entry/instrument/detector/detectorSpecific/countrate_correction_count_cutoff") ==
        12345.0);
    assert_true(h5_scalar(f, "/entry/instrument/detector/saturation_value") == 12345.0);
    assert_true(h5_scalar(f, "/entry/instrument/detector/detectorSpecific/x_pixels_in_detector") ==
                w);
    assert_true(h5_scalar(f, "/entry/instrument/detector/detectorSpecific/y_pixels_in_detector") ==
                h);
    h5_close(f);

    sw_h5_reader *r = open_ok(path, NULL);
    sw_h5_info in;
    assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
    assert_int_equal(in.has_pixel_mask, 1);
    assert_true(in.overload == 12345.0);
    memset(back, 7, sizeof back);
    assert_int_equal(sw_h5_read_pixel_mask(r, back), SW_OK);
    for (int i = 0; i < w * h; i++)
        assert_int_equal(back[i], valid[i] ? 1 : 0);
    assert_frames_read_back(r, fr, count, 0);
    sw_h5_close(r);

    /* an overload that is not a whole uint32 is kept exactly (float64); no mask: none read */
    assert_int_equal(sw_h5_write(NULL, path, fr, count, 0, SW_H5_DEFLATE, NULL, 6.5e9 + 0.25),
                     SW_OK);
    r = open_ok(path, NULL);
    assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
    assert_true(in.overload == 6.5e9 + 0.25);
    assert_int_equal(in.has_pixel_mask, 0);
    assert_int_equal(sw_h5_read_pixel_mask(r, back), SW_EFORMAT);
    assert_msg(sw_h5_reader_error(r), "no pixel mask");
    sw_h5_close(r);
    free_frames(fr, count);
}

/* Eiger's layout of files written by spotwave: master + data files linked by name. */
static void roundtrip_linked_files(void **state)
{
    (void)state;
    const int32_t w = 12, h = 10, count = 5;
    sw_image *fr = make_frames(count, w, h, SW_PIX_U16, 1300);
    char master[768], d1[768], d2[768], d3[768], d4[768];
    snprintf(master, sizeof master, "%s", sw_test_path("run_master.h5"));
    snprintf(d1, sizeof d1, "%s", sw_test_path("run_data_000001.h5"));
    snprintf(d2, sizeof d2, "%s", sw_test_path("run_data_000002.h5"));
    snprintf(d3, sizeof d3, "%s", sw_test_path("run_data_000003.h5"));
    snprintf(d4, sizeof d4, "%s", sw_test_path("run_data_000004.h5"));
    sw_h5_compression comp = sw_h5_bitshuffle_available() ? SW_H5_BSLZ4 : SW_H5_DEFLATE;
    uint8_t valid[12 * 10];
    for (int i = 0; i < w * h; i++)
        valid[i] = i != 17;
    assert_int_equal(sw_h5_write_linked(NULL, master, fr, count, 2, comp, valid, 4000.0), SW_OK);
    assert_true(sw_test_file_exists(d1) && sw_test_file_exists(d2) && sw_test_file_exists(d3));
    assert_false(sw_test_file_exists(d4));
    assert_int_equal(sw_test_count_temp_files(), 0);

    /* the master's blocks are external links by bare file name to /entry/data/data */
    hid_t f = h5_open_ro(master);
    H5L_info_t li;
    assert_true(H5Lget_info(f, "/entry/data/data_000002", &li, H5P_DEFAULT) >= 0);
    assert_int_equal(li.type, H5L_TYPE_EXTERNAL);
    char val[256];
    const char *file = NULL, *obj = NULL;
    assert_true(li.u.val_size <= sizeof val);
    assert_true(H5Lget_val(f, "/entry/data/data_000002", val, sizeof val, H5P_DEFAULT) >= 0);
    assert_true(H5Lunpack_elink_val(val, li.u.val_size, NULL, &file, &obj) >= 0);
    assert_string_equal(file, "run_data_000002.h5");
    assert_string_equal(obj, "/entry/data/data");
    h5_close(f);

    /* read through the master (the working directory is not the files' directory) */
    sw_h5_reader *r = open_ok(master, NULL);
    sw_h5_info in;
    assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
    assert_int_equal(in.blocks, 3);
    assert_int_equal(in.has_pixel_mask, 1);
    assert_true(in.overload == 4000.0);
    assert_int_equal(in.compressed, 1);
    assert_frames_read_back(r, fr, count, 0);
    sw_h5_close(r);

    /* a data file on its own: /entry/data/data, frames 3 and 4 of the series */
    r = open_ok(d2, NULL);
    assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
    assert_int_equal(in.blocks, 1);
    assert_int_equal(in.has_pixel_mask, 0);
    assert_frames_read_back(r, fr, 2, 2);
    sw_h5_close(r);

    /* a missing data file: SW_EIO naming it */
    assert_int_equal(unlink(d2), 0);
    assert_open_fails(master, NULL, SW_EIO, "run_data_000002.h5");
    assert_msg(sw_context_error(NULL), "missing");

    /* "x.h5" (no _master) gives x_data_000001.h5 */
    char plain[768], pd1[768];
    snprintf(plain, sizeof plain, "%s", sw_test_path("x.h5"));
    snprintf(pd1, sizeof pd1, "%s", sw_test_path("x_data_000001.h5"));
    assert_int_equal(sw_h5_write_linked(NULL, plain, fr, count, 0, SW_H5_NONE, NULL, 0.0), SW_OK);
    assert_true(sw_test_file_exists(pd1));
    r = open_ok(plain, NULL);
    assert_frames_read_back(r, fr, count, 0);
    sw_h5_close(r);
    free_frames(fr, count);
}

/* ------------------------------------------------------------------ files written by hand */

/* An Eiger collection as the detector writes it: data files with /entry/data/data (u32,
 * chunked per frame, bitshuffle/LZ4 when available), a master with external links, a pixel
 * mask with Eiger's bit values, the count cut-off and the saturation value. */
static void eiger_layout_by_hand(void **state)
{
    (void)state;
    const int w = 20, h = 8;
    const int n1 = 3, n2 = 2;
    int bslz4 = sw_h5_bitshuffle_available();
    if (!bslz4)
        print_message("SKIP (compression only): no bitshuffle plugin; data files uncompressed\n");
    uint32_t *px = malloc(sizeof *px * (size_t)(n1 + n2) * (size_t)(w * h));
    assert_non_null(px);
    for (int i = 0; i < (n1 + n2) * w * h; i++)
        px[i] = (uint32_t)(i * 2654435761u) >> (i % 7); /* varied, some large */
    px[5] = 0xFFFFFFFFu;                                /* Eiger's marker of a bad pixel */
    char dfile[2][768], master[768];
    snprintf(dfile[0], sizeof dfile[0], "%s", sw_test_path("eiger_data_000001.h5"));
    snprintf(dfile[1], sizeof dfile[1], "%s", sw_test_path("eiger_data_000002.h5"));
    snprintf(master, sizeof master, "%s", sw_test_path("eiger_master.h5"));
    for (int k = 0; k < 2; k++) {
        hid_t f = h5_create(dfile[k]);
        hsize_t dims[3] = {(hsize_t)(k == 0 ? n1 : n2), (hsize_t)h, (hsize_t)w};
        h5_put(f, "/entry/data/data", H5T_STD_U32LE, H5T_NATIVE_UINT32, 3, dims,
               px + (size_t)(k == 0 ? 0 : n1) * (size_t)(w * h), bslz4);
        h5_close(f);
    }
    uint32_t mask[8 * 20] = {0};
    mask[0] = 1;          /* gap */
    mask[w + 3] = 2;      /* dead */
    mask[2 * w + 7] = 4;  /* cold */
    mask[7 * w + 19] = 8; /* hot */
    mask[4 * w + 4] = 0x80000000u;
    hid_t f = h5_create(master);
    h5_group(f, "/entry/data");
    assert_true(H5Lcreate_external("eiger_data_000001.h5", "/entry/data/data", f,
                                   "/entry/data/data_000001", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    assert_true(H5Lcreate_external("eiger_data_000002.h5", "/entry/data/data", f,
                                   "/entry/data/data_000002", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    hsize_t mdims[2] = {(hsize_t)h, (hsize_t)w};
    h5_put(f, "/entry/instrument/detector/detectorSpecific/pixel_mask", H5T_STD_U32LE,
           H5T_NATIVE_UINT32, 2, mdims, mask, 0);
    uint32_t cutoff = 20000, sat = 99999;
    h5_put(f, "/entry/instrument/detector/detectorSpecific/countrate_correction_count_cutoff",
           H5T_STD_U32LE, H5T_NATIVE_UINT32, 0, NULL, &cutoff, 0);
    h5_put(f, "/entry/instrument/detector/saturation_value", H5T_STD_U32LE, H5T_NATIVE_UINT32, 0,
           NULL, &sat, 0);
    h5_close(f);

    sw_h5_reader *r = open_ok(master, NULL);
    sw_h5_info in;
    assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
    assert_int_equal(in.frames, n1 + n2);
    assert_int_equal(in.blocks, 2);
    assert_int_equal(in.width, w);
    assert_int_equal(in.height, h);
    assert_int_equal(in.type, SW_PIX_U32);
    assert_int_equal(in.compressed, bslz4);
    assert_int_equal(in.has_pixel_mask, 1);
    assert_true(in.overload == 20000.0); /* Eiger's own cut-off first */
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U32, &img), SW_OK);
    for (int k = 0; k < n1 + n2; k++) {
        assert_int_equal(sw_h5_read_frame(r, k, &img), SW_OK);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                assert_int_equal(((uint32_t *)sw_image_row(&img, y))[x],
                                 px[(size_t)k * (size_t)(w * h) + (size_t)(y * w + x)]);
    }
    uint8_t valid[8 * 20];
    assert_int_equal(sw_h5_read_pixel_mask(r, valid), SW_OK);
    for (int i = 0; i < w * h; i++)
        assert_int_equal(valid[i], mask[i] == 0);
    sw_h5_close(r);

    /* only the NeXus saturation value (a signed 32-bit integer here): that is the overload */
    char path[768];
    snprintf(path, sizeof path, "%s", sw_test_path("saturation_only.h5"));
    f = h5_create(path);
    hsize_t dims[3] = {1, (hsize_t)h, (hsize_t)w};
    h5_put(f, "/entry/data/data", H5T_STD_U32LE, H5T_NATIVE_UINT32, 3, dims, px, 0);
    int32_t sat2 = 65000;
    h5_put(f, "/entry/instrument/detector/saturation_value", H5T_STD_I32LE, H5T_NATIVE_INT32, 0,
           NULL, &sat2, 0);
    h5_close(f);
    r = open_ok(path, NULL);
    assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
    assert_true(in.overload == 65000.0);
    assert_int_equal(in.has_pixel_mask, 0);
    sw_h5_close(r);
    sw_image_free(&img);
    free(px);
}

/* Big-endian u16 frames, a rank-2 dataset read as one frame, and an explicit dataset path. */
static void byte_order_rank2_explicit(void **state)
{
    (void)state;
    const int w = 9, h = 5;
    uint16_t px[3 * 5 * 9];
    for (int i = 0; i < 3 * w * h; i++)
        px[i] = (uint16_t)(i * 977 + 3);
    char path[768];
    snprintf(path, sizeof path, "%s", sw_test_path("be.h5"));
    hid_t f = h5_create(path);
    hsize_t d3[3] = {3, (hsize_t)h, (hsize_t)w}, d2[2] = {(hsize_t)h, (hsize_t)w};
    h5_put(f, "/entry/data/data", H5T_STD_U16BE, H5T_NATIVE_UINT16, 3, d3, px, 0);
    h5_put(f, "/elsewhere/one_frame", H5T_STD_U8LE, H5T_NATIVE_UINT16, 2, d2, px + w * h, 0);
    h5_close(f);

    sw_image img;
    sw_h5_reader *r = open_ok(path, NULL);
    assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U16, &img), SW_OK);
    assert_int_equal(sw_h5_read_frame(r, 2, &img), SW_OK);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            assert_int_equal(((uint16_t *)sw_image_row(&img, y))[x], px[2 * w * h + y * w + x]);
    sw_h5_close(r);
    sw_image_free(&img);

    r = open_ok(path, "/elsewhere/one_frame");
    sw_h5_info in;
    assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
    assert_int_equal(in.frames, 1);
    assert_int_equal(in.type, SW_PIX_U8);
    assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U8, &img), SW_OK);
    assert_int_equal(sw_h5_read_frame(r, 0, &img), SW_OK);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) /* HDF5 converted u16 -> u8 when writing, saturating */
            assert_int_equal(((uint8_t *)sw_image_row(&img, y))[x],
                             px[w * h + y * w + x] > 255 ? 255 : px[w * h + y * w + x]);
    assert_int_equal(sw_h5_read_frame(r, 1, &img), SW_EINVAL);
    sw_h5_close(r);
    sw_image_free(&img);
}

/* ------------------------------------------------------------------ bad input */

static void bad_files(void **state)
{
    (void)state;
    assert_open_fails(sw_test_path("no_such_file.h5"), NULL, SW_EIO, "no_such_file.h5");
    assert_open_fails(sw_test_tmpdir(), NULL, SW_EIO, "directory");

    const char *text = sw_test_path("text.h5");
    sw_test_write_file(text, "this is not HDF5 at all\n", 24);
    assert_open_fails(text, NULL, SW_EFORMAT, "not an HDF5 file");
    const char *empty = sw_test_path("empty.h5");
    sw_test_write_file(empty, "", 0);
    assert_open_fails(empty, NULL, SW_EFORMAT, "not an HDF5 file");

    /* a valid file cut in half */
    const int32_t w = 64, h = 64, count = 8;
    sw_image *fr = make_frames(count, w, h, SW_PIX_U32, 77);
    char good[768];
    snprintf(good, sizeof good, "%s", sw_test_path("good.h5"));
    assert_int_equal(sw_h5_write(NULL, good, fr, count, 0, SW_H5_DEFLATE, NULL, 0.0), SW_OK);
    size_t size;
    unsigned char *bytes = sw_test_read_all(good, &size);
    const char *half = sw_test_path("half.h5");
    sw_test_write_file(half, bytes, size / 2);
    assert_open_fails(half, NULL, SW_EFORMAT, "truncated");

    /* bytes overwritten in the middle of the file, which lies inside frame 3's compressed
     * chunk (found with H5Dget_chunk_info, so the test knows what it corrupts) */
    hid_t f = h5_open_ro(good);
    hid_t d = H5Dopen2(f, "/entry/data/data_000001", H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    hsize_t nchunks = 0;
    assert_true(H5Dget_num_chunks(d, sp, &nchunks) >= 0);
    assert_int_equal(nchunks, count);
    int victim = -1;
    haddr_t addr = 0;
    hsize_t csize = 0;
    for (hsize_t i = 0; i < nchunks; i++) {
        hsize_t off[3];
        unsigned fm;
        haddr_t a;
        hsize_t s;
        assert_true(H5Dget_chunk_info(d, sp, i, off, &fm, &a, &s) >= 0);
        if (a <= size / 2 && size / 2 < a + s) {
            victim = (int)off[0];
            addr = a;
            csize = s;
        }
    }
    H5Sclose(sp);
    H5Dclose(d);
    h5_close(f);
    assert_true(victim >= 0);
    assert_true(csize > 200);
    unsigned char *bad = malloc(size);
    assert_non_null(bad);
    memcpy(bad, bytes, size);
    for (hsize_t i = csize / 2; i < csize / 2 + 64; i++)
        bad[addr + i] ^= 0x5A;
    const char *corrupt = sw_test_path("corrupt.h5");
    sw_test_write_file(corrupt, bad, size);
    sw_h5_reader *r = open_ok(corrupt, NULL);
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U32, &img), SW_OK);
    for (int k = 0; k < count; k++) {
        sw_status st = sw_h5_read_frame(r, k, &img);
        if (k == victim) {
            assert_int_equal(st, SW_EFORMAT);
            assert_msg(sw_context_error(NULL), "corrupt");
            assert_msg(sw_h5_reader_error(r), "cannot read frame");
        } else {
            assert_int_equal(st, SW_OK); /* the other chunks are intact */
            assert_true(sw_image_equal(&img, &fr[k]));
        }
    }
    sw_h5_close(r);
    sw_image_free(&img);
    free(bad);
    free(bytes);
    free_frames(fr, count);
}

static void bad_datasets(void **state)
{
    (void)state;
    hsize_t r1[1] = {64}, r4[4] = {2, 3, 8, 8}, r3[3] = {2, 8, 8};
    assert_open_fails(file_with_dataset("rank1.h5", H5T_STD_U16LE, 1, r1), NULL, SW_EFORMAT,
                      "rank 1");
    assert_open_fails(file_with_dataset("rank4.h5", H5T_STD_U16LE, 4, r4), NULL, SW_EFORMAT,
                      "rank 4");
    assert_open_fails(file_with_dataset("rank0.h5", H5T_STD_U16LE, 0, r3), NULL, SW_EFORMAT,
                      "rank 0");
    assert_open_fails(file_with_dataset("float.h5", H5T_IEEE_F32LE, 3, r3), NULL, SW_EFORMAT,
                      "32-bit floats");
    assert_open_fails(file_with_dataset("int16.h5", H5T_STD_I16LE, 3, r3), NULL, SW_EFORMAT,
                      "signed 16-bit");
    assert_open_fails(file_with_dataset("u64.h5", H5T_STD_U64LE, 3, r3), NULL, SW_EFORMAT,
                      "unsigned 64-bit");
    hsize_t z[3] = {2, 0, 8};
    assert_open_fails(file_with_dataset("zero.h5", H5T_STD_U16LE, 3, z), NULL, SW_EFORMAT, "empty");
    hsize_t noframes[3] = {0, 8, 8};
    assert_open_fails(file_with_dataset("noframes.h5", H5T_STD_U16LE, 3, noframes), NULL,
                      SW_EFORMAT, "no frames");

    /* no /entry/data at all; /entry/data without frames */
    const char *path = sw_test_path("nodata.h5");
    hid_t f = h5_create(path);
    h5_put(f, "/somewhere/else", H5T_STD_U16LE, H5T_STD_U16LE, 3, r3, NULL, 0);
    h5_close(f);
    assert_open_fails(path, NULL, SW_EFORMAT, "/entry/data/data_000001");
    assert_msg(sw_context_error(NULL), "no /entry/data group");
    path = sw_test_path("emptygroup.h5");
    f = h5_create(path);
    h5_group(f, "/entry/data");
    h5_close(f);
    assert_open_fails(path, NULL, SW_EFORMAT, "no frames found");

    /* an explicit dataset that is missing, or a group */
    assert_open_fails(path, "/entry/data/nothing", SW_EFORMAT, "no dataset /entry/data/nothing");
    assert_open_fails(path, "/entry/data", SW_EFORMAT, "a group");

    /* blocks of mismatched size, then of mismatched type */
    path = sw_test_path("mismatch.h5");
    f = h5_create(path);
    hsize_t a[3] = {2, 8, 8}, b[3] = {2, 8, 9};
    h5_put(f, "/entry/data/data_000001", H5T_STD_U16LE, H5T_STD_U16LE, 3, a, NULL, 0);
    h5_put(f, "/entry/data/data_000002", H5T_STD_U16LE, H5T_STD_U16LE, 3, b, NULL, 0);
    h5_close(f);
    assert_open_fails(path, NULL, SW_EFORMAT, "mismatched blocks");
    assert_msg(sw_context_error(NULL), "data_000002");
    path = sw_test_path("mismatch_type.h5");
    f = h5_create(path);
    h5_put(f, "/entry/data/data_000001", H5T_STD_U16LE, H5T_STD_U16LE, 3, a, NULL, 0);
    h5_put(f, "/entry/data/data_000002", H5T_STD_U32LE, H5T_STD_U32LE, 3, a, NULL, 0);
    h5_close(f);
    assert_open_fails(path, NULL, SW_EFORMAT, "mismatched blocks");

    /* numbering stops at the first gap: data_000001 and data_000003 give one block */
    path = sw_test_path("gap.h5");
    f = h5_create(path);
    h5_put(f, "/entry/data/data_000001", H5T_STD_U16LE, H5T_STD_U16LE, 3, a, NULL, 0);
    h5_put(f, "/entry/data/data_000003", H5T_STD_U16LE, H5T_STD_U16LE, 3, b, NULL, 0);
    h5_close(f);
    sw_h5_reader *r = open_ok(path, NULL);
    sw_h5_info in;
    assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
    assert_int_equal(in.blocks, 1);
    assert_int_equal(in.frames, 2);
    sw_h5_close(r);
}

/* A pass-through filter registered under an id nobody uses, to write a dataset whose filter
 * will then be missing. */
#define TEST_FILTER_ID 32099
static size_t passthrough(unsigned flags, size_t n, const unsigned cd[], size_t nbytes,
                          size_t *buf_size, void **buf)
{
    (void)flags;
    (void)n;
    (void)cd;
    (void)buf_size;
    (void)buf;
    return nbytes;
}

static void missing_filters(void **state)
{
    (void)state;
    const H5Z_class2_t cls = {H5Z_CLASS_T_VERS,       TEST_FILTER_ID, 1,    1,
                              "spotwave test filter", NULL,           NULL, passthrough};
    assert_true(H5Zregister(&cls) >= 0);
    const char *path = sw_test_path("custom_filter.h5");
    hid_t f = h5_create(path);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t dims[3] = {2, 4, 4}, chunk[3] = {1, 4, 4};
    assert_true(H5Pset_chunk(dcpl, 3, chunk) >= 0);
    assert_true(H5Pset_filter(dcpl, TEST_FILTER_ID, H5Z_FLAG_MANDATORY, 0, NULL) >= 0);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t s = H5Screate_simple(3, dims, NULL);
    uint16_t px[32] = {1, 2, 3};
    hid_t d = H5Dcreate2(f, "/entry/data/data", H5T_STD_U16LE, s, lcpl, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dwrite(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, px) >= 0);
    H5Dclose(d);
    H5Sclose(s);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    h5_close(f);
    assert_true(H5Zunregister(TEST_FILTER_ID) >= 0);
    assert_open_fails(path, NULL, SW_EUNSUPPORTED, "filter 32099");
    assert_msg(sw_context_error(NULL), "spotwave test filter");
    assert_msg(sw_context_error(NULL), "HDF5_PLUGIN_PATH");

    if (!sw_h5_bitshuffle_available()) {
        print_message("SKIP (bitshuffle part): HDF5 cannot load filter 32008 here\n");
        return;
    }
    /* bitshuffle/LZ4 that this process can no longer load (plugins off, the filter dropped):
     * spotwave decodes it itself, so the file still reads; only writing needs the plugin */
    sw_image *fr = make_frames(2, 8, 8, SW_PIX_U16, 4242);
    char bs[768], out[768];
    snprintf(bs, sizeof bs, "%s", sw_test_path("bs.h5"));
    snprintf(out, sizeof out, "%s", sw_test_path("bs_unwritten.h5"));
    assert_int_equal(sw_h5_write(NULL, bs, fr, 2, 0, SW_H5_BSLZ4, NULL, 0.0), SW_OK);
    unsigned saved = 0;
    assert_true(H5PLget_loading_state(&saved) >= 0);
    assert_true(H5PLset_loading_state(0) >= 0);
    assert_true(H5Zunregister(32008) >= 0);
    assert_int_equal(sw_h5_bitshuffle_available(), 0);
    sw_h5_reader *r = open_ok(bs, NULL);
    assert_frames_read_back(r, fr, 2, 0);
    sw_h5_close(r);
    assert_int_equal(sw_h5_write(NULL, out, fr, 2, 0, SW_H5_BSLZ4, NULL, 0.0), SW_EUNSUPPORTED);
    assert_msg(sw_context_error(NULL), "32008");
    assert_msg(sw_context_error(NULL), "bitshuffle");
    assert_false(sw_test_file_exists(out));
    assert_int_equal(sw_test_count_temp_files(), 0);
    /* plugins back on: the filter loads again */
    assert_true(H5PLset_loading_state(saved) >= 0);
    assert_int_equal(sw_h5_bitshuffle_available(), 1);
    r = open_ok(bs, NULL);
    assert_frames_read_back(r, fr, 2, 0);
    sw_h5_close(r);
    free_frames(fr, 2);
}

static void bad_reads(void **state)
{
    (void)state;
    const int32_t w = 10, h = 6, count = 3;
    sw_image *fr = make_frames(count, w, h, SW_PIX_U16, 31);
    char path[768];
    snprintf(path, sizeof path, "%s", sw_test_path("reads.h5"));
    assert_int_equal(sw_h5_write(NULL, path, fr, count, 2, SW_H5_NONE, NULL, 0.0), SW_OK);
    sw_h5_reader *r = open_ok(path, NULL);

    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U16, &img), SW_OK);
    sw_test_fill_random(&img, 5);
    sw_image keep;
    assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U16, &keep), SW_OK);
    assert_int_equal(sw_image_copy(NULL, &img, &keep), SW_OK);

    assert_int_equal(sw_h5_read_frame(r, count, &img), SW_EINVAL);
    assert_msg(sw_context_error(NULL), "out of range");
    assert_msg(sw_h5_reader_error(r), "out of range");
    assert_int_equal(sw_h5_read_frame(r, -1, &img), SW_EINVAL);
    assert_int_equal(sw_h5_read_frame(r, 0, NULL), SW_EINVAL);
    assert_int_equal(sw_h5_read_frame(NULL, 0, &img), SW_EINVAL);
    assert_true(sw_image_equal(&img, &keep)); /* untouched */

    sw_image wrong;
    assert_int_equal(sw_image_alloc(NULL, w + 1, h, SW_PIX_U16, &wrong), SW_OK);
    assert_int_equal(sw_h5_read_frame(r, 0, &wrong), SW_EINVAL);
    assert_msg(sw_context_error(NULL), "11x6 u16");
    sw_image_free(&wrong);
    assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U32, &wrong), SW_OK);
    assert_int_equal(sw_h5_read_frame(r, 0, &wrong), SW_EINVAL);
    assert_msg(sw_context_error(NULL), "u32");
    sw_image_free(&wrong);
    sw_image dev = img;
    dev.memory = SW_MEM_DEVICE; /* only the descriptor says so: it must be refused unread */
    assert_int_equal(sw_h5_read_frame(r, 0, &dev), SW_EINVAL);
    assert_msg(sw_context_error(NULL), "device memory");
    sw_image nodata = img;
    nodata.data = NULL;
    assert_int_equal(sw_h5_read_frame(r, 0, &nodata), SW_EINVAL);
    assert_true(sw_image_equal(&img, &keep));

    uint8_t valid[60];
    assert_int_equal(sw_h5_read_pixel_mask(r, NULL), SW_EINVAL);
    assert_int_equal(sw_h5_read_pixel_mask(r, valid), SW_EFORMAT);
    sw_h5_info in;
    assert_int_equal(sw_h5_get_info(NULL, &in), SW_EINVAL);
    assert_int_equal(sw_h5_get_info(r, NULL), SW_EINVAL);
    assert_int_equal(sw_h5_open(NULL, path, NULL, NULL), SW_EINVAL);
    sw_h5_reader *r2 = NULL;
    assert_int_equal(sw_h5_open(NULL, NULL, NULL, &r2), SW_EINVAL);
    assert_int_equal(sw_h5_open(NULL, "", NULL, &r2), SW_EINVAL);
    assert_int_equal(sw_h5_open(NULL, path, "", &r2), SW_EINVAL);
    assert_null(r2);
    sw_h5_close(r);
    sw_h5_close(NULL);

    /* pixel masks of the wrong shape and type */
    const char *const names[3] = {"mask_shape.h5", "mask_rank.h5", "mask_float.h5"};
    const char *const words[3] = {"wrong pixel mask shape", "rank 3", "32-bit floats"};
    for (int k = 0; k < 3; k++) {
        const char *p = sw_test_path(names[k]);
        hid_t f = h5_create(p);
        hsize_t dims[3] = {1, (hsize_t)h, (hsize_t)w};
        h5_put(f, "/entry/data/data", H5T_STD_U16LE, H5T_STD_U16LE, 3, dims, NULL, 0);
        hsize_t m2[2] = {(hsize_t)h + 1, (hsize_t)w}, m3[3] = {1, (hsize_t)h, (hsize_t)w};
        const char *mp = "/entry/instrument/detector/detectorSpecific/pixel_mask";
        if (k == 0)
            h5_put(f, mp, H5T_STD_U32LE, H5T_STD_U32LE, 2, m2, NULL, 0);
        else if (k == 1)
            h5_put(f, mp, H5T_STD_U32LE, H5T_STD_U32LE, 3, m3, NULL, 0);
        else
            h5_put(f, mp, H5T_IEEE_F32LE, H5T_IEEE_F32LE, 2, m3 + 1, NULL, 0);
        h5_close(f);
        r = open_ok(p, NULL);
        assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
        assert_int_equal(in.has_pixel_mask, 1);
        assert_int_equal(sw_h5_read_pixel_mask(r, valid), SW_EFORMAT);
        assert_msg(sw_h5_reader_error(r), words[k]);
        sw_h5_close(r);
    }
    sw_image_free(&img);
    sw_image_free(&keep);
    free_frames(fr, count);
}

static void bad_writes(void **state)
{
    (void)state;
    const int32_t w = 8, h = 4;
    sw_image *fr = make_frames(2, w, h, SW_PIX_U16, 8);
    char path[768];
    snprintf(path, sizeof path, "%s", sw_test_path("w.h5"));
    assert_int_equal(sw_h5_write(NULL, NULL, fr, 2, 0, SW_H5_NONE, NULL, 0), SW_EINVAL);
    assert_int_equal(sw_h5_write(NULL, "", fr, 2, 0, SW_H5_NONE, NULL, 0), SW_EINVAL);
    assert_int_equal(sw_h5_write(NULL, path, NULL, 2, 0, SW_H5_NONE, NULL, 0), SW_EINVAL);
    assert_int_equal(sw_h5_write(NULL, path, fr, 0, 0, SW_H5_NONE, NULL, 0), SW_EINVAL);
    assert_int_equal(sw_h5_write(NULL, path, fr, 2, -1, SW_H5_NONE, NULL, 0), SW_EINVAL);
    assert_int_equal(sw_h5_write(NULL, path, fr, 2, 0, (sw_h5_compression)9, NULL, 0), SW_EINVAL);
    assert_int_equal(sw_h5_write(NULL, path, fr, 2, 0, SW_H5_NONE, NULL, -1.0), SW_EINVAL);
    assert_int_equal(sw_h5_write(NULL, path, fr, 2, 0, SW_H5_NONE, NULL, NAN), SW_EINVAL);
    assert_int_equal(sw_h5_write(NULL, path, fr, 2, 0, SW_H5_NONE, NULL, INFINITY), SW_EINVAL);
    sw_image mixed[2] = {fr[0], sw_test_random_image(w + 1, h, SW_PIX_U16, 1)};
    assert_int_equal(sw_h5_write(NULL, path, mixed, 2, 0, SW_H5_NONE, NULL, 0), SW_EINVAL);
    assert_msg(sw_context_error(NULL), "frame 1");
    sw_image_free(&mixed[1]);
    sw_image f32 = sw_test_random_image(w, h, SW_PIX_F32, 2);
    assert_int_equal(sw_h5_write(NULL, path, &f32, 1, 0, SW_H5_NONE, NULL, 0), SW_EINVAL);
    assert_msg(sw_context_error(NULL), "f32");
    sw_image_free(&f32);
    sw_image dev = fr[0];
    dev.memory = SW_MEM_DEVICE;
    assert_int_equal(sw_h5_write(NULL, path, &dev, 1, 0, SW_H5_NONE, NULL, 0), SW_EINVAL);
    assert_false(sw_test_file_exists(path));

    /* a missing directory: SW_EIO and nothing left behind */
    const char *nodir = sw_test_path("no/such/dir/x.h5");
    assert_int_equal(sw_h5_write(NULL, nodir, fr, 2, 0, SW_H5_NONE, NULL, 0), SW_EIO);
    assert_int_equal(sw_h5_write_linked(NULL, nodir, fr, 2, 1, SW_H5_NONE, NULL, 0), SW_EIO);
    assert_msg(sw_context_error(NULL), "no/such/dir/x_data_000001.h5");
    if (sw_test_readonly_dir("ro")) {
        const char *ro = sw_test_path("ro/x.h5");
        assert_int_equal(sw_h5_write(NULL, ro, fr, 2, 0, SW_H5_NONE, NULL, 0), SW_EIO);
        assert_false(sw_test_file_exists(ro));
    }
    assert_int_equal(sw_test_count_temp_files(), 0);

    /* overwriting replaces the content */
    assert_int_equal(sw_h5_write(NULL, path, fr, 2, 0, SW_H5_NONE, NULL, 0), SW_OK);
    assert_int_equal(sw_h5_write(NULL, path, fr + 1, 1, 0, SW_H5_NONE, NULL, 0), SW_OK);
    sw_h5_reader *r = open_ok(path, NULL);
    assert_frames_read_back(r, fr, 1, 1);
    sw_h5_close(r);
    free_frames(fr, 2);
}

/* HDF5 must print nothing: failures of every kind with stderr sent to a file, which must stay
 * empty; and the caller's HDF5 error handler must be back in place afterwards. */
static void nothing_printed(void **state)
{
    (void)state;
    H5E_auto2_t func0 = NULL, func1 = NULL;
    void *data0 = NULL, *data1 = NULL;
    H5Eget_auto2(H5E_DEFAULT, &func0, &data0);
    assert_non_null(func0); /* HDF5's default printer is on in this program */

    char text[768], half[768], rank1[768], master[768];
    snprintf(text, sizeof text, "%s", sw_test_path("quiet_text.h5"));
    sw_test_write_file(text, "plain text", 10);
    sw_image *fr = make_frames(3, 16, 16, SW_PIX_U16, 3);
    assert_int_equal(
        sw_h5_write(NULL, sw_test_path("quiet_full.h5"), fr, 3, 0, SW_H5_NONE, NULL, 0.0), SW_OK);
    size_t size;
    void *bytes = sw_test_read_all(sw_test_path("quiet_full.h5"), &size);
    snprintf(half, sizeof half, "%s", sw_test_path("quiet_half.h5"));
    sw_test_write_file(half, bytes, size / 2);
    free(bytes);
    hsize_t r1[1] = {8};
    snprintf(rank1, sizeof rank1, "%s", file_with_dataset("quiet_rank1.h5", H5T_STD_U16LE, 1, r1));
    snprintf(master, sizeof master, "%s", sw_test_path("quiet_master.h5"));
    assert_int_equal(sw_h5_write_linked(NULL, master, fr, 3, 1, SW_H5_NONE, NULL, 0.0), SW_OK);
    assert_int_equal(unlink(sw_test_path("quiet_data_000002.h5")), 0);

    const char *log = sw_test_path("stderr.txt");
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    dup2(fd, 2);
    close(fd);
    sw_status st[9];
    sw_h5_reader *r = NULL;
    st[0] = sw_h5_open(NULL, sw_test_path("quiet_missing.h5"), NULL, &r);
    st[1] = sw_h5_open(NULL, text, NULL, &r);
    st[2] = sw_h5_open(NULL, half, NULL, &r);
    st[3] = sw_h5_open(NULL, rank1, NULL, &r);
    st[4] = sw_h5_open(NULL, master, NULL, &r);
    st[5] = sw_h5_open(NULL, rank1, "/entry/none", &r);
    st[6] = sw_h5_write(NULL, sw_test_path("no/dir/q.h5"), fr, 3, 0, SW_H5_NONE, NULL, 0.0);
    st[7] = sw_h5_open(NULL, sw_test_path("quiet_full.h5"), NULL, &r);
    uint8_t valid[256];
    st[8] = st[7] == SW_OK ? sw_h5_read_pixel_mask(r, valid) : SW_OK;
    sw_h5_close(r);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);

    const sw_status want[9] = {SW_EIO,     SW_EFORMAT, SW_EFORMAT, SW_EFORMAT, SW_EIO,
                               SW_EFORMAT, SW_EIO,     SW_OK,      SW_EFORMAT};
    for (int i = 0; i < 9; i++)
        assert_int_equal(st[i], want[i]);
    size_t n = 0;
    char *printed = sw_test_read_all(log, &n);
    if (n != 0)
        fail_msg("HDF5 printed on stderr: %s", printed);
    free(printed);
    H5Eget_auto2(H5E_DEFAULT, &func1, &data1);
    assert_true(func1 == func0 && data1 == data0);
    free_frames(fr, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(roundtrip_types_and_compression),
        cmocka_unit_test(compression_shrinks_data),
        cmocka_unit_test(roundtrip_blocks_and_strides),
        cmocka_unit_test(roundtrip_mask_and_overload),
        cmocka_unit_test(roundtrip_linked_files),
        cmocka_unit_test(eiger_layout_by_hand),
        cmocka_unit_test(byte_order_rank2_explicit),
        cmocka_unit_test(bad_files),
        cmocka_unit_test(bad_datasets),
        cmocka_unit_test(bad_reads),
        cmocka_unit_test(bad_writes),
        cmocka_unit_test(missing_filters),
        cmocka_unit_test(nothing_printed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

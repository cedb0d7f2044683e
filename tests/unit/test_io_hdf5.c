/*
 * HDF5 (Eiger / NeXus) frames: round trips through sw_h5_write / sw_h5_write_linked for every
 * integer type, block split and compression; files laid out by hand with the HDF5 C API as an
 * Eiger writes them (master + external links, bitshuffle/LZ4, pixel mask, overload); and every
 * kind of bad input, each with its status, a message that says what is wrong, and nothing on
 * stderr.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "io/bitshuffle.h"

#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

/* ------------------------------------------------------------------ untrusted input */

/* A reproducible byte stream (SplitMix64). */
static uint64_t mix_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_bytes(uint8_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(mix_next(&seed) >> 56);
}

/* Bitshuffle's transform written out from its definition (bitshuffle.h): bit k of byte j of
 * element i goes to bit i % 8 of byte (8 j + k) * n / 8 + i / 8. */
static void bshuf_by_definition(const uint8_t *in, uint8_t *out, size_t n, size_t es)
{
    memset(out, 0, n * es);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < es; j++)
            for (size_t k = 0; k < 8; k++)
                out[(8 * j + k) * (n / 8) + i / 8] |=
                    (uint8_t)(((in[i * es + j] >> k) & 1u) << (i % 8));
}

static void bitshuffle_transform(void **state)
{
    (void)state;
    const size_t ns[3] = {8, 64, 1032}, ess[4] = {1, 2, 4, 8};
    uint8_t *in = malloc(1032 * 8), *a = malloc(1032 * 8), *b = malloc(1032 * 8);
    assert_true(in && a && b);
    for (int ni = 0; ni < 3; ni++)
        for (int ei = 0; ei < 4; ei++) {
            size_t n = ns[ni], es = ess[ei];
            fill_bytes(in, n * es, 7 * n + es);
            bshuf_by_definition(in, a, n, es);
            sw_bshuf_trans_block(in, b, n, es);
            assert_memory_equal(a, b, n * es);
            sw_bshuf_untrans_block(b, a, n, es);
            assert_memory_equal(a, in, n * es);
        }
    /* the filter's default block sizes (elements): 8192 bytes, a multiple of 8, at least 128 */
    assert_int_equal(sw_bshuf_default_block(1), 8192);
    assert_int_equal(sw_bshuf_default_block(2), 4096);
    assert_int_equal(sw_bshuf_default_block(4), 2048);
    assert_int_equal(sw_bshuf_default_block(8), 1024);
    assert_int_equal(sw_bshuf_default_block(128), 128);
    free(in);
    free(a);
    free(b);
}

/* Encoded with spotwave's encoder, every size of chunk decodes back: whole blocks, a shorter
 * block and a stored tail (5003 elements), blocks of 64; and the plain variant. */
static void bitshuffle_round_trip(void **state)
{
    (void)state;
    const size_t counts[4] = {1, 7, 64, 5003}, ess[3] = {1, 2, 4}, blocks[2] = {0, 64};
    char why[256];
    for (int ci = 0; ci < 4; ci++)
        for (int ei = 0; ei < 3; ei++)
            for (int bi = 0; bi < 2; bi++) {
                size_t es = ess[ei], size = counts[ci] * es;
                uint8_t *in = malloc(size), *out = malloc(size);
                size_t cap = sw_bshuf_lz4_bound(size, es, blocks[bi]);
                uint8_t *enc = malloc(cap);
                assert_true(in && out && enc);
                for (size_t i = 0; i < size; i++)
                    in[i] = (uint8_t)(i % 13 == 0 ? i * 7 : i % 3); /* compressible */
                size_t n = sw_bshuf_encode_lz4(in, size, enc, cap, es, blocks[bi]);
                assert_true(n >= SW_BSHUF_HEADER && n <= cap);
                assert_int_equal(sw_bshuf_decode_lz4(enc, n, out, size, es, why, sizeof why), 0);
                assert_memory_equal(in, out, size);
                /* plain: the blocks transposed, the tail as it is */
                uint8_t *sh = malloc(size);
                assert_non_null(sh);
                size_t bl = blocks[bi] ? blocks[bi] : sw_bshuf_default_block(es);
                size_t el = size / es, done = 0;
                for (; done + bl <= el; done += bl)
                    sw_bshuf_trans_block(in + done * es, sh + done * es, bl, es);
                size_t last = (el - done) - (el - done) % 8;
                sw_bshuf_trans_block(in + done * es, sh + done * es, last, es);
                done += last;
                memcpy(sh + done * es, in + done * es, (el - done) * es);
                assert_int_equal(
                    sw_bshuf_decode_plain(sh, size, out, size, es, blocks[bi], why, sizeof why), 0);
                assert_memory_equal(in, out, size);
                assert_int_equal(
                    sw_bshuf_decode_plain(sh, size - 1, out, size, es, blocks[bi], why, sizeof why),
                    -1);
                free(sh);
                free(in);
                free(out);
                free(enc);
            }
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* The decoder on corrupt chunks directly: every lie in a header or a block count, every
 * truncation, stray bytes, and many random one-byte changes; each is -1 with a reason or (a
 * change the data cannot reveal) 0, and none reads or writes outside its buffers (ASan). */
static void bitshuffle_corrupt(void **state)
{
    (void)state;
    const size_t es = 2, size = 600 * es; /* one block of 600 elements (default 4096) */
    uint8_t in[1200], out[1200];
    for (size_t i = 0; i < size; i++)
        in[i] = (uint8_t)(i % 11 == 0 ? 200 : i % 2);
    size_t cap = sw_bshuf_lz4_bound(size, es, 0);
    uint8_t *enc = malloc(cap + 64), *bad = malloc(cap + 64);
    assert_true(enc && bad);
    size_t n = sw_bshuf_encode_lz4(in, size, enc, cap, es, 0);
    assert_true(n > 16);
    char why[256];
    struct {
        const char *what, *words;
        int at; /* byte changed: 0 total, 8 block size, 12 first count, -1 none */
        uint64_t value;
        long resize; /* bytes added (+) or the new length (<= 0: -length) */
    } cases[] = {
        {"total + 1", "header says", 0, 1201, 0},
        {"total - 2", "header says", 0, 1198, 0},
        {"total 2^40", "header says", 0, (uint64_t)1 << 40, 0},
        {"block 12 bytes (6 elements)", "block size", 8, 12, 0},
        {"block 3 bytes", "block size", 8, 3, 0},
        {"count + 100", "claims", 12, 100000, 0},
        {"count 2^32 - 1", "claims", 12, 0xFFFFFFFFu, 0},
        {"count 0", "LZ4", 12, 0, 0},
        {"cut to 12 bytes", "truncated", -1, 0, -12},
        {"cut to 5 bytes", "12-byte header", -1, 0, -5},
        {"cut to 0 bytes", "12-byte header", -1, 0, -1000000},
        {"64 stray bytes", "stray bytes", -1, 0, 64},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(bad, enc, n);
        size_t m = n;
        if (cases[c].at == 0)
            put_be64(bad, cases[c].value);
        else if (cases[c].at == 8)
            put_be32(bad + 8, (uint32_t)cases[c].value);
        else if (cases[c].at == 12)
            put_be32(bad + 12, cases[c].value == 100000 ? (uint32_t)(n - 16 + 100)
                                                        : (uint32_t)cases[c].value);
        if (cases[c].resize > 0) {
            memset(bad + n, 0xA5, (size_t)cases[c].resize);
            m = n + (size_t)cases[c].resize;
        } else if (cases[c].resize < 0) {
            m = (size_t)-cases[c].resize > n ? 0 : (size_t)-cases[c].resize;
        }
        int rc = sw_bshuf_decode_lz4(bad, m, out, size, es, why, sizeof why);
        if (rc != -1 || !strstr(why, cases[c].words))
            fail_msg("%s: rc %d, reason \"%s\" (wanted \"%s\")", cases[c].what, rc, why,
                     cases[c].words);
    }
    /* a block size of 0 is what the filter reads as its default: the chunk decodes */
    memcpy(bad, enc, n);
    put_be32(bad + 8, 0);
    assert_int_equal(sw_bshuf_decode_lz4(bad, n, out, size, es, why, sizeof why), 0);
    assert_memory_equal(out, in, size);
    /* every truncation fails */
    for (size_t m = 0; m < n; m++)
        assert_int_equal(sw_bshuf_decode_lz4(enc, m, out, size, es, why, sizeof why), -1);
    /* random one-byte changes: -1, or 0 only when the change kept a valid stream */
    uint64_t seed = 99;
    int failed = 0;
    for (int t = 0; t < 3000; t++) {
        memcpy(bad, enc, n);
        size_t at = (size_t)(mix_next(&seed) % n);
        bad[at] ^= (uint8_t)(1 + mix_next(&seed) % 255);
        int rc = sw_bshuf_decode_lz4(bad, n, out, size, es, why, sizeof why);
        assert_true(rc == 0 || rc == -1);
        failed += rc != 0;
    }
    assert_true(failed > 1000);
    free(enc);
    free(bad);
}

/* Several threads decode a chunk's LZ4 blocks (sw_bshuf_decode_lz4_mt): on chunks of many
 * blocks, intact and damaged (bytes flipped, counts broken, cut short), every thread count gives
 * the one-thread result: the status, the reason word for word and, on success, the same bytes. A
 * frame of a bitshuffle/LZ4 file reads the same with 1 and 3 decoding threads. */
static void bitshuffle_threads(void **state)
{
    (void)state;
    uint64_t seed = 2028;
    int damaged = 0;
    for (int t = 0; t < 400; t++) {
        const size_t es = (size_t)1 << (mix_next(&seed) % 4);
        const size_t n = 1 + (size_t)(mix_next(&seed) % 40000);
        const size_t size = n * es,
                     block = mix_next(&seed) % 2 ? 0 : 8 * (1 + mix_next(&seed) % 40);
        uint8_t *in = malloc(size), *a = malloc(size + 1), *b = malloc(size + 1);
        assert_true(in && a && b);
        for (size_t i = 0; i < size; i++) /* compressible, with some noise */
            in[i] = mix_next(&seed) % 5 == 0 ? (uint8_t)mix_next(&seed) : (uint8_t)(i % 3);
        const size_t cap = sw_bshuf_lz4_bound(size, es, block);
        uint8_t *enc = malloc(cap);
        assert_non_null(enc);
        size_t m = sw_bshuf_encode_lz4(in, size, enc, cap, es, block);
        assert_true(m > SW_BSHUF_HEADER);
        switch (t % 4) {
        case 1: /* bytes flipped anywhere after the header */
            for (int k = 0; k < 3; k++)
                enc[SW_BSHUF_HEADER + mix_next(&seed) % (m - SW_BSHUF_HEADER)] ^=
                    (uint8_t)(1 + mix_next(&seed) % 255);
            break;
        case 2: m = (size_t)(mix_next(&seed) % m); break; /* cut short */
        case 3: /* a block's byte count broken: the first block's, or one further on */
            put_be32(enc + SW_BSHUF_HEADER, (uint32_t)(mix_next(&seed) % 3 ? 7 : 0xFFFFFFF0u));
            break;
        default: break;
        }
        char wa[256], wb[256];
        const int ra = sw_bshuf_decode_lz4(enc, m, a, size, es, wa, sizeof wa);
        damaged += ra != 0;
        if (t % 4 == 0) {
            assert_int_equal(ra, 0);
            assert_memory_equal(a, in, size);
        }
        for (int th = 2; th <= 5; th += 3) {
            const int rb = sw_bshuf_decode_lz4_mt(enc, m, b, size, es, th, wb, sizeof wb);
            assert_int_equal(rb, ra);
            if (ra == 0)
                assert_memory_equal(b, a, size);
            else
                assert_string_equal(wb, wa);
        }
        free(in);
        free(a);
        free(b);
        free(enc);
    }
    if (damaged <
        220) /* cut or with a broken count: 200; flips in literals can keep a valid stream */
        fail_msg("only %d of 300 damaged chunks failed", damaged);

    if (!sw_h5_bitshuffle_available())
        return; /* the file part needs the plugin to write */
    sw_image fr[2];
    for (int k = 0; k < 2; k++)
        fr[k] = sw_test_random_image(515, 203, SW_PIX_U16, 40 + (uint64_t)k);
    const char *path = sw_test_path("bslz4_threads.h5");
    assert_int_equal(sw_h5_write(NULL, path, fr, 2, 0, SW_H5_BSLZ4, NULL, 0.0), SW_OK);
    sw_image got[2];
    for (int th = 1; th <= 3; th += 2) {
        sw_h5_options o;
        sw_h5_options_default(&o);
        o.threads = th;
        sw_h5_reader *r = NULL;
        assert_int_equal(sw_h5_open_ex(NULL, path, &o, &r), SW_OK);
        sw_image *img = &got[th / 2];
        assert_int_equal(sw_image_alloc(NULL, 515, 203, SW_PIX_U16, img), SW_OK);
        assert_int_equal(sw_h5_read_frame(r, 1, img), SW_OK);
        sw_h5_close(r);
    }
    for (int32_t y = 0; y < 203; y++) {
        assert_memory_equal(sw_image_row(&got[0], y), sw_image_row(&fr[1], y), 515 * 2);
        assert_memory_equal(sw_image_row(&got[1], y), sw_image_row(&fr[1], y), 515 * 2);
    }
    sw_h5_options o;
    sw_h5_options_default(&o);
    o.threads = -1;
    sw_h5_reader *r = NULL;
    assert_int_equal(sw_h5_open_ex(NULL, path, &o, &r), SW_EINVAL);
    assert_null(r);
    for (int k = 0; k < 2; k++) {
        sw_image_free(&fr[k]);
        sw_image_free(&got[k]);
    }
}

/* The stored chunk k of dataset dset in path, and its filter mask. */
static uint8_t *h5_chunk_bytes(const char *path, const char *dset, const hsize_t *off, size_t *n,
                               uint32_t *fmask)
{
    hid_t f = h5_open_ro(path);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    assert_true(d >= 0);
    hsize_t sz = 0;
    assert_true(H5Dget_chunk_storage_size(d, off, &sz) >= 0);
    uint8_t *buf = malloc(sz + 1);
    assert_non_null(buf);
    assert_true(H5Dread_chunk(d, H5P_DEFAULT, off, fmask, buf) >= 0);
    H5Dclose(d);
    h5_close(f);
    *n = (size_t)sz;
    return buf;
}

static void h5_put_chunk(const char *path, const char *dset, const hsize_t *off, uint32_t fmask,
                         const void *buf, size_t n)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dwrite_chunk(d, H5P_DEFAULT, fmask, off, n, buf) >= 0);
    H5Dclose(d);
    h5_close(f);
}

/* What HDF5 itself reads for a dataset (through its filters and plugins), as native values. */
static void *h5_read_all(const char *path, const char *dset, hid_t mtype, size_t bytes)
{
    void *buf = malloc(bytes);
    assert_non_null(buf);
    hid_t f = h5_open_ro(path);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    H5Dclose(d);
    h5_close(f);
    return buf;
}

/* Every frame spotwave reads equals what HDF5 reads (n frames of w x h u16 or u32). */
static void assert_reads_like_hdf5(const char *path, const char *dset, int n, int w, int h,
                                   sw_pixel_type t, int compressed)
{
    size_t ps = sw_pixel_size(t), plane = (size_t)w * (size_t)h * ps;
    uint8_t *want = h5_read_all(path, dset, t == SW_PIX_U16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32,
                                plane * (size_t)n);
    sw_h5_reader *r = open_ok(path, dset);
    sw_h5_info in;
    assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
    assert_int_equal(in.frames, n);
    assert_int_equal(in.compressed, compressed);
    sw_image img;
    /* a padded image: rows wider than the frame */
    assert_int_equal(sw_image_alloc(NULL, w + 3, h, t, &img), SW_OK);
    img.width = w;
    for (int k = n - 1; k >= 0; k--) {
        sw_status st = sw_h5_read_frame(r, k, &img);
        if (st != SW_OK)
            fail_msg("%s: frame %d: %s", path, k, sw_h5_reader_error(r));
        for (int y = 0; y < h; y++)
            if (memcmp(sw_image_row(&img, y), want + (size_t)k * plane + (size_t)y * w * ps,
                       (size_t)w * ps) != 0)
                fail_msg("%s: frame %d row %d differs from what HDF5 reads", path, k, y);
    }
    img.width = w + 3;
    sw_image_free(&img);
    sw_h5_close(r);
    free(want);
}

/* Storage layouts spotwave decodes itself (contiguous, chunks of any shape, deflate, shuffle,
 * bitshuffle with and without LZ4, chunks never written, fill values, big-endian) and those left
 * to HDF5 (Fletcher-32, compact), each read exactly as HDF5 reads it. */
static void layouts_read_like_hdf5(void **state)
{
    (void)state;
    enum { N = 5, H = 12, W = 15 };
    uint32_t px[N * H * W];
    uint64_t seed = 5;
    for (int i = 0; i < N * H * W; i++)
        px[i] = (uint32_t)(mix_next(&seed) >> 40) % (i % 7 == 0 ? 60000u : 9u);
    const int bs = sw_h5_bitshuffle_available();
    struct {
        const char *name;
        hsize_t chunk[3]; /* {0}: contiguous */
        int filters;      /* bits: 1 deflate, 2 shuffle, 4 bitshuffle, 8 bitshuffle+LZ4 (block
                             64), 16 Fletcher-32, 32 compact */
        int written;      /* frames written (the rest never are) */
        int fill;         /* fill value */
        hid_t ftype;
    } cases[] = {
        {"contiguous", {0, 0, 0}, 0, N, 0, H5T_STD_U16LE},
        {"chunks 2x5x7", {2, 5, 7}, 0, N, 0, H5T_STD_U16LE},
        {"deflate", {2, 5, 7}, 1, N, 0, H5T_STD_U16LE},
        {"shuffle+deflate", {2, 5, 7}, 3, N, 0, H5T_STD_U32LE},
        {"shuffle", {1, H, W}, 2, N, 0, H5T_STD_U32LE},
        {"bitshuffle", {3, 4, W}, 4, N, 0, H5T_STD_U16LE},
        {"bitshuffle/LZ4 block 64", {1, H, W}, 8, N, 0, H5T_STD_U32LE},
        {"bitshuffle/LZ4 partial chunks", {2, 7, 4}, 8, N, 0, H5T_STD_U16LE},
        {"fletcher32 (HDF5)", {2, 5, 7}, 16, N, 0, H5T_STD_U16LE},
        {"compact (HDF5)", {0, 0, 0}, 32, N, 0, H5T_STD_U16LE},
        {"unwritten chunks, fill 7", {2, 5, 7}, 1, 2, 7, H5T_STD_U16LE},
        {"unwritten contiguous, fill 9", {0, 0, 0}, 0, 0, 9, H5T_STD_U16LE},
        {"big-endian deflate", {1, 6, W}, 1, N, 0, H5T_STD_U32BE},
        {"big-endian bitshuffle/LZ4", {1, H, W}, 8, N, 0, H5T_STD_U16BE},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if ((cases[c].filters & 12) && !bs) {
            print_message("SKIP (%s): HDF5 cannot load filter 32008 here\n", cases[c].name);
            continue;
        }
        const char *path = sw_test_path("layout.h5");
        hid_t f = h5_create(path);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        const int fl = cases[c].filters;
        if (cases[c].chunk[0]) {
            assert_true(H5Pset_chunk(dcpl, 3, cases[c].chunk) >= 0);
            if (fl & 2)
                assert_true(H5Pset_shuffle(dcpl) >= 0);
            if (fl & 1)
                assert_true(H5Pset_deflate(dcpl, 5) >= 0);
            if (fl & 4) {
                const unsigned cd[2] = {0, 0};
                assert_true(H5Pset_filter(dcpl, 32008, H5Z_FLAG_MANDATORY, 2, cd) >= 0);
            }
            if (fl & 8) {
                const unsigned cd[2] = {64, 2};
                assert_true(H5Pset_filter(dcpl, 32008, H5Z_FLAG_MANDATORY, 2, cd) >= 0);
            }
            if (fl & 16)
                assert_true(H5Pset_fletcher32(dcpl) >= 0);
        } else if (fl & 32) {
            assert_true(H5Pset_layout(dcpl, H5D_COMPACT) >= 0);
        }
        const sw_pixel_type t = H5Tget_size(cases[c].ftype) == 2 ? SW_PIX_U16 : SW_PIX_U32;
        hid_t mt = t == SW_PIX_U16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
        if (cases[c].fill) {
            uint32_t fv = (uint32_t)cases[c].fill;
            assert_true(H5Pset_fill_value(dcpl, H5T_NATIVE_UINT32, &fv) >= 0);
        }
        hsize_t dims[3] = {N, H, W};
        hid_t s = H5Screate_simple(3, dims, NULL);
        hid_t d = H5Dcreate2(f, "/d", cases[c].ftype, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        assert_true(d >= 0);
        if (cases[c].written > 0) {
            uint16_t p16[N * H * W];
            for (int i = 0; i < N * H * W; i++)
                p16[i] = (uint16_t)px[i];
            hsize_t start[3] = {0, 0, 0}, count[3] = {(hsize_t)cases[c].written, H, W};
            hid_t ms = H5Screate_simple(3, count, NULL);
            assert_true(H5Sselect_hyperslab(s, H5S_SELECT_SET, start, NULL, count, NULL) >= 0);
            assert_true(H5Dwrite(d, mt, ms, s, H5P_DEFAULT,
                                 t == SW_PIX_U16 ? (void *)p16 : (void *)px) >= 0);
            H5Sclose(ms);
        }
        H5Dclose(d);
        H5Sclose(s);
        H5Pclose(dcpl);
        h5_close(f);
        print_message("layout: %s\n", cases[c].name);
        assert_reads_like_hdf5(path, "/d", N, W, H, t, fl != 0 && fl != 32);
    }
}

/* A dataset of more chunks than the walk lists (H5_LIST_MAX): its chunks are looked up when read
 * (H5Dread_chunk), with the same results as HDF5's own read, fill values for chunks never
 * written, and a corrupt chunk refused. */
static void many_chunks_looked_up(void **state)
{
    (void)state;
    enum { N = 3, H = 60, W = 60 };
    const char *path = sw_test_path("many_chunks.h5");
    hid_t f = h5_create(path);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t dims[3] = {N, H, W}, chunk[3] = {1, 1, 2};
    assert_true(H5Pset_chunk(dcpl, 3, chunk) >= 0);
    assert_true(H5Pset_shuffle(dcpl) >= 0);
    assert_true(H5Pset_deflate(dcpl, 1) >= 0);
    uint16_t fv = 5;
    assert_true(H5Pset_fill_value(dcpl, H5T_NATIVE_UINT16, &fv) >= 0);
    hid_t s = H5Screate_simple(3, dims, NULL);
    hid_t d = H5Dcreate2(f, "/d", H5T_STD_U16LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    uint16_t px[2 * H * W];
    for (int i = 0; i < 2 * H * W; i++)
        px[i] = (uint16_t)(i * 37 % 1009);
    hsize_t start[3] = {0, 0, 0}, count[3] = {2, H, W};
    hid_t ms = H5Screate_simple(3, count, NULL);
    assert_true(H5Sselect_hyperslab(s, H5S_SELECT_SET, start, NULL, count, NULL) >= 0);
    assert_true(H5Dwrite(d, H5T_NATIVE_UINT16, ms, s, H5P_DEFAULT, px) >= 0);
    H5Sclose(ms);
    H5Dclose(d);
    H5Sclose(s);
    H5Pclose(dcpl);
    h5_close(f);
    assert_true(N * H * (W / 2) > 4096); /* more than the walk lists */
    assert_reads_like_hdf5(path, "/d", N, W, H, SW_PIX_U16, 1);
    /* one chunk of frame 1 replaced by garbage */
    uint8_t junk[64];
    fill_bytes(junk, sizeof junk, 4);
    hsize_t off[3] = {1, 17, 6};
    h5_put_chunk(path, "/d", off, 0, junk, sizeof junk);
    sw_h5_reader *r = open_ok(path, "/d");
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, W, H, SW_PIX_U16, &img), SW_OK);
    assert_int_equal(sw_h5_read_frame(r, 0, &img), SW_OK);
    assert_int_equal(sw_h5_read_frame(r, 1, &img), SW_EFORMAT);
    assert_msg(sw_h5_reader_error(r), "deflate");
    assert_int_equal(sw_h5_read_frame(r, 2, &img), SW_OK);
    assert_int_equal(((uint16_t *)sw_image_row(&img, 7))[9], 5);
    sw_image_free(&img);
    sw_h5_close(r);
}

/* Chunks written by spotwave's encoder read through HDF5's bitshuffle plugin (the reference
 * decoder) and through spotwave: the format is the plugin's; odd sizes (tails, short blocks). */
static void encoder_matches_plugin(void **state)
{
    (void)state;
    if (!sw_h5_bitshuffle_available()) {
        print_message("SKIP: HDF5 cannot load filter 32008 here\n");
        return;
    }
    const struct {
        int w, h;
        sw_pixel_type t;
    } shapes[4] = {
        {37, 29, SW_PIX_U16}, {100, 100, SW_PIX_U32}, {5, 3, SW_PIX_U8}, {300, 41, SW_PIX_U8}};
    for (int si = 0; si < 4; si++) {
        const int w = shapes[si].w, h = shapes[si].h, n = 2;
        const size_t es = sw_pixel_size(shapes[si].t), plane = (size_t)w * (size_t)h * es;
        uint8_t *px = malloc(plane * n);
        assert_non_null(px);
        uint64_t seed = (uint64_t)si;
        for (size_t i = 0; i < plane * n; i++)
            px[i] = (uint8_t)(mix_next(&seed) >> 61); /* small counts, compressible */
        const char *path = sw_test_path("encoded.h5");
        hid_t f = h5_create(path);
        hid_t ftype = es == 1 ? H5T_STD_U8LE : es == 2 ? H5T_STD_U16LE : H5T_STD_U32LE;
        hsize_t dims[3] = {(hsize_t)n, (hsize_t)h, (hsize_t)w}, chunk[3] = {1, dims[1], dims[2]};
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        const unsigned cd[2] = {0, 2};
        assert_true(H5Pset_chunk(dcpl, 3, chunk) >= 0);
        assert_true(H5Pset_filter(dcpl, 32008, H5Z_FLAG_MANDATORY, 2, cd) >= 0);
        hid_t s = H5Screate_simple(3, dims, NULL);
        hid_t d = H5Dcreate2(f, "/d", ftype, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        assert_true(d >= 0);
        size_t cap = sw_bshuf_lz4_bound(plane, es, 0);
        uint8_t *enc = malloc(cap);
        assert_non_null(enc);
        for (int k = 0; k < n; k++) {
            size_t m = sw_bshuf_encode_lz4(px + (size_t)k * plane, plane, enc, cap, es, 0);
            assert_true(m > 0);
            hsize_t off[3] = {(hsize_t)k, 0, 0};
            assert_true(H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, m, enc) >= 0);
        }
        H5Dclose(d);
        H5Sclose(s);
        H5Pclose(dcpl);
        h5_close(f);
        hid_t mt = es == 1 ? H5T_NATIVE_UINT8 : es == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
        uint8_t *back = h5_read_all(path, "/d", mt, plane * n);
        assert_memory_equal(back, px, plane * n);
        free(back);
        sw_h5_reader *r = open_ok(path, "/d");
        sw_image img;
        assert_int_equal(sw_image_alloc(NULL, w, h, shapes[si].t, &img), SW_OK);
        for (int k = 0; k < n; k++) {
            assert_int_equal(sw_h5_read_frame(r, k, &img), SW_OK);
            for (int y = 0; y < h; y++)
                assert_memory_equal(sw_image_row(&img, y),
                                    px + (size_t)k * plane + (size_t)y * w * es, (size_t)w * es);
        }
        sw_image_free(&img);
        sw_h5_close(r);
        free(enc);
        free(px);
    }
}

/* Corrupt bitshuffle/LZ4 and deflate chunks in a file (rewritten with H5Dwrite_chunk): each read
 * is SW_EFORMAT naming the frame and the reason, never pixels from beyond the chunk. */
static void corrupt_chunks_in_files(void **state)
{
    (void)state;
    if (!sw_h5_bitshuffle_available()) {
        print_message("SKIP: HDF5 cannot load filter 32008 here (needed to write the file)\n");
        return;
    }
    const int w = 64, h = 48;
    sw_image fr[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U16, &fr[i]), SW_OK);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                ((uint16_t *)sw_image_row(&fr[i], y))[x] = (uint16_t)((x * 7 + y * 3 + i) % 50);
    }
    char good[768], path[768];
    snprintf(good, sizeof good, "%s", sw_test_path("chunks_good.h5"));
    snprintf(path, sizeof path, "%s", sw_test_path("chunks_bad.h5"));
    const char *dset = "/entry/data/data_000001";
    const hsize_t off[3] = {0, 0, 0};
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U16, &img), SW_OK);
    for (int comp = 0; comp < 2; comp++) {
        assert_int_equal(
            sw_h5_write(NULL, good, fr, 2, 0, comp ? SW_H5_DEFLATE : SW_H5_BSLZ4, NULL, 0.0),
            SW_OK);
        size_t n;
        uint32_t fmask = 0;
        uint8_t *chunk = h5_chunk_bytes(good, dset, off, &n, &fmask);
        size_t file_size;
        uint8_t *file = sw_test_read_all(good, &file_size);
        uint8_t *bad = malloc(n + (size_t)w * h * 2 + 4096);
        assert_non_null(bad);
        const struct {
            const char *what, *words;
            int kind;
        } cases[] = {
            {"header total + 1000", "header says", 0},
            {"header total - 1000", "header says", 1},
            {"header total huge", "header says", 2},
            {"block size 12 bytes", "block size", 3},
            {"first block count + 100", "claims", 4},
            {"first block count huge", "claims", 5},
            {"truncated to half", "", 6},
            {"truncated to 12 bytes", "truncated", 7},
            {"garbage after the header", "", 8},
            {"all garbage", "", 9},
            {"64 trailing bytes", "stray bytes", 10},
            {"stored raw, wrong size", "no filter applied", 11},
            {"deflate truncated", "deflate", 12},
            {"deflate garbage", "deflate", 13},
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const int k = cases[c].kind;
            if ((k >= 12) != (comp == 1) && k != 11)
                continue;
            memcpy(bad, chunk, n);
            size_t m = n;
            uint32_t mask = 0;
            switch (k) {
            case 0: put_be64(bad, (uint64_t)w * h * 2 + 1000); break;
            case 1: put_be64(bad, (uint64_t)w * h * 2 - 1000); break;
            case 2: put_be64(bad, (uint64_t)1 << 40); break;
            case 3: put_be32(bad + 8, 12); break;
            case 4: put_be32(bad + 12, (uint32_t)(n - 16 + 100)); break;
            case 5: put_be32(bad + 12, 0x7FFFFFFFu); break;
            case 6: m = n / 2; break;
            case 7: m = 12; break;
            case 8: fill_bytes(bad + 16, n - 16, 8); break;
            case 9: fill_bytes(bad, n, 9); break;
            case 10:
                fill_bytes(bad + n, 64, 10);
                m = n + 64;
                break;
            case 11:
                mask = comp ? 3u : 1u; /* every filter skipped: raw values, but too few */
                m = (size_t)w * h * 2 - 2;
                break;
            case 12: m = n / 2; break;
            case 13: fill_bytes(bad + 2, n - 2, 13); break;
            }
            sw_test_write_file(path, file, file_size);
            h5_put_chunk(path, dset, off, mask, bad, m);
            sw_h5_reader *r = open_ok(path, NULL);
            sw_status st = sw_h5_read_frame(r, 0, &img);
            if (st != SW_EFORMAT || !strstr(sw_h5_reader_error(r), cases[c].words) ||
                !strstr(sw_h5_reader_error(r), "cannot read frame 0"))
                fail_msg("%s: status %d, message \"%s\"", cases[c].what, (int)st,
                         sw_h5_reader_error(r));
            /* the other frame is intact */
            assert_int_equal(sw_h5_read_frame(r, 1, &img), SW_OK);
            assert_true(sw_image_equal(&img, &fr[1]));
            sw_h5_close(r);
        }
        /* stored raw with every filter masked off, at the right size: read as it is */
        memcpy(bad, fr[0].data, (size_t)w * h * 2);
        sw_test_write_file(path, file, file_size);
        h5_put_chunk(path, dset, off, comp ? 3u : 1u, bad, (size_t)w * h * 2);
        sw_h5_reader *r = open_ok(path, NULL);
        assert_int_equal(sw_h5_read_frame(r, 0, &img), SW_OK);
        assert_true(sw_image_equal(&img, &fr[0]));
        sw_h5_close(r);
        free(bad);
        free(file);
        free(chunk);
    }
    sw_image_free(&img);
    sw_image_free(&fr[0]);
    sw_image_free(&fr[1]);
}

/* Opens (time limit limit_s) and reads everything; the frames must be the originals or the read
 * SW_EFORMAT. Returns the open's status; *crashed when the message says HDF5 crashed. */
static sw_status open_and_read_all(const char *path, const sw_image *ref, int nref, double limit_s,
                                   int *crashed, int *garbage)
{
    sw_h5_options o;
    sw_h5_options_default(&o);
    o.timeout_s = limit_s;
    sw_h5_reader *r = NULL;
    sw_status st = sw_h5_open_ex(NULL, path, &o, &r);
    if (st != SW_OK) {
        assert_null(r);
        if (st != SW_EFORMAT && st != SW_EIO && st != SW_EUNSUPPORTED)
            fail_msg("%s: status %d: %s", path, (int)st, sw_context_error(NULL));
        *crashed += strstr(sw_context_error(NULL), "crashed") != NULL ||
                    strstr(sw_context_error(NULL), "took more than") != NULL;
        return st;
    }
    sw_h5_info in;
    assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, in.width, in.height, in.type, &img), SW_OK);
    for (int64_t k = 0; k < in.frames && k < 64; k++) {
        sw_status rs = sw_h5_read_frame(r, k, &img);
        if (rs != SW_OK && rs != SW_EFORMAT)
            fail_msg("%s: frame %lld: status %d", path, (long long)k, (int)rs);
        if (rs == SW_OK && (k >= nref || !sw_image_equal(&img, &ref[k])))
            (*garbage)++;
    }
    uint8_t *valid = malloc((size_t)in.width * (size_t)in.height);
    assert_non_null(valid);
    sw_status ms = sw_h5_read_pixel_mask(r, valid);
    assert_true(ms == SW_OK || ms == SW_EFORMAT);
    free(valid);
    sw_image_free(&img);
    sw_h5_close(r);
    return st;
}

/* One flipped byte at a time across an Eiger master (and across a data file): every case opens
 * and reads to SW_EFORMAT / SW_EIO, or reads the right frames (the data file's pixels have no
 * checksum: a changed LZ4 literal is a changed pixel); none takes the process down. On
 * Debian 12's libhdf5 some of these crash or hang inside HDF5 (the H5Lexists fault):
 * those come back as SW_EFORMAT from the walk's child. */
static void flipped_bytes(void **state)
{
    (void)state;
    const int w = 64, h = 48, n = 4;
    sw_image fr[4];
    for (int i = 0; i < n; i++) {
        assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U16, &fr[i]), SW_OK);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                ((uint16_t *)sw_image_row(&fr[i], y))[x] =
                    (uint16_t)((x * 7 + y * 3 + i * 11) % 50 + (x == y ? 1000 : 0));
    }
    uint8_t valid[64 * 48];
    for (int i = 0; i < w * h; i++)
        valid[i] = i % 97 != 0;
    char master[768], data[768];
    snprintf(master, sizeof master, "%s", sw_test_path("flip_master.h5"));
    snprintf(data, sizeof data, "%s", sw_test_path("flip_data_000001.h5"));
    sw_h5_compression comp = sw_h5_bitshuffle_available() ? SW_H5_BSLZ4 : SW_H5_DEFLATE;
    assert_int_equal(sw_h5_write_linked(NULL, master, fr, n, 2, comp, valid, 4000.0), SW_OK);
    const char *victims[2] = {master, data};
    for (int v = 0; v < 2; v++) {
        size_t size;
        uint8_t *orig = sw_test_read_all(victims[v], &size);
        /* a sample across the file, and the bytes whose flip crashed HDF5 1.10.8 in the issue's
         * reproducer (a v2 B-tree header of the master; object headers of the data file) */
        size_t offsets[700];
        int no = 0;
        const size_t step = v == 0 ? 53 : 89;
        for (size_t o = 0; o < size && no < 680; o += step)
            offsets[no++] = o;
        const size_t known[2][8] = {{3010, 3011, 3012, 3013, 0, 0, 0, 0},
                                    {3059, 3060, 3284, 6931, 8603, 8604, 8605, 0}};
        for (int i = 0; i < 8 && known[v][i]; i++)
            if (known[v][i] < size)
                offsets[no++] = known[v][i];
        int count[4] = {0, 0, 0, 0}, crashed = 0, garbage = 0;
        for (int i = 0; i < no; i++) {
            orig[offsets[i]] ^= 0xFF;
            sw_test_write_file(victims[v], orig, size);
            orig[offsets[i]] ^= 0xFF;
            int g0 = garbage;
            sw_status st = open_and_read_all(master, fr, n, 2.0, &crashed, &garbage);
            count[st == SW_OK ? 0 : st == SW_EFORMAT ? 1 : st == SW_EIO ? 2 : 3]++;
            /* the master holds no pixels: a flip there never changes them silently */
            if (v == 0 && garbage != g0)
                fail_msg("master byte %zu flipped: frames read without error but wrong",
                         offsets[i]);
        }
        sw_test_write_file(victims[v], orig, size);
        print_message("%s, %d flips: %d read, %d SW_EFORMAT (%d of them HDF5 crashes or hangs "
                      "caught), %d SW_EIO, %d SW_EUNSUPPORTED; %d frames wrong without error\n",
                      v == 0 ? "master" : "data file", no, count[0], count[1], crashed, count[2],
                      count[3], garbage);
        assert_true(count[1] > 0);
        free(orig);
    }
    for (int i = 0; i < n; i++)
        sw_image_free(&fr[i]);
}

/* Where data files are looked for: beside the master and in link_dirs only; absolute and ".."
 * targets, external links elsewhere and virtual datasets need links_anywhere; non-regular
 * files are refused before anything blocks. */
static void link_policy(void **state)
{
    (void)state;
    const int w = 8, h = 6;
    sw_image *fr = make_frames(2, w, h, SW_PIX_U16, 515);
    char sub[768], data[768], master[768], abs_master[768], dd_master[768];
    snprintf(sub, sizeof sub, "%s", sw_test_path("elsewhere"));
    assert_int_equal(mkdir(sub, 0755), 0);
    /* a data file in a subdirectory, a master beside it naming only its file name */
    snprintf(data, sizeof data, "%s", sw_test_path("elsewhere/lp_data_000001.h5"));
    hid_t f = h5_create(data);
    hsize_t dims[3] = {2, (hsize_t)h, (hsize_t)w};
    uint16_t px[2 * 6 * 8];
    for (int k = 0; k < 2; k++)
        for (int y = 0; y < h; y++)
            memcpy(px + (k * h + y) * w, sw_image_row(&fr[k], y), (size_t)w * 2);
    h5_put(f, "/entry/data/data", H5T_STD_U16LE, H5T_NATIVE_UINT16, 3, dims, px, 0);
    h5_close(f);
    snprintf(master, sizeof master, "%s", sw_test_path("lp_master.h5"));
    f = h5_create(master);
    h5_group(f, "/entry/data");
    assert_true(H5Lcreate_external("lp_data_000001.h5", "/entry/data/data", f,
                                   "/entry/data/data_000001", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    h5_close(f);
    assert_open_fails(master, NULL, SW_EIO, "lp_data_000001.h5");
    assert_msg(sw_context_error(NULL), "missing");
    sw_h5_options o;
    sw_h5_options_default(&o);
    o.link_dirs = "/nonexistent:";
    sw_h5_reader *r = NULL;
    assert_int_equal(sw_h5_open_ex(NULL, master, &o, &r), SW_EIO);
    o.link_dirs = sub;
    assert_int_equal(sw_h5_open_ex(NULL, master, &o, &r), SW_OK);
    assert_frames_read_back(r, fr, 2, 0);
    sw_h5_close(r);

    /* the same data file named by its absolute path, and through ".." */
    snprintf(abs_master, sizeof abs_master, "%s", sw_test_path("lp_abs_master.h5"));
    f = h5_create(abs_master);
    h5_group(f, "/entry/data");
    assert_true(H5Lcreate_external(data, "/entry/data/data", f, "/entry/data/data_000001",
                                   H5P_DEFAULT, H5P_DEFAULT) >= 0);
    h5_close(f);
    assert_open_fails(abs_master, NULL, SW_EFORMAT, "absolute path");
    assert_msg(sw_context_error(NULL), "links_anywhere");
    snprintf(dd_master, sizeof dd_master, "%s", sw_test_path("elsewhere/dd_master.h5"));
    f = h5_create(dd_master);
    h5_group(f, "/entry/data");
    assert_true(H5Lcreate_external("../elsewhere/lp_data_000001.h5", "/entry/data/data", f,
                                   "/entry/data/data_000001", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    h5_close(f);
    assert_open_fails(dd_master, NULL, SW_EFORMAT, "\"..\"");
    sw_h5_options_default(&o);
    o.links_anywhere = 1;
    for (int i = 0; i < 2; i++) {
        r = NULL;
        assert_int_equal(sw_h5_open_ex(NULL, i ? dd_master : abs_master, &o, &r), SW_OK);
        assert_frames_read_back(r, fr, 2, 0);
        sw_h5_close(r);
    }

    /* an external link in the middle of the path (the /entry/data group itself) */
    char mid[768];
    snprintf(mid, sizeof mid, "%s", sw_test_path("elsewhere/lp_mid.h5"));
    f = h5_create(mid);
    h5_group(f, "/entry");
    assert_true(H5Lcreate_external("lp_data_000001.h5", "/entry/data", f, "/entry/data",
                                   H5P_DEFAULT, H5P_DEFAULT) >= 0);
    h5_close(f);
    assert_open_fails(mid, NULL, SW_EFORMAT, "/entry/data");

    /* a virtual dataset mapping the data file's frames */
    char vds[768];
    snprintf(vds, sizeof vds, "%s", sw_test_path("elsewhere/lp_vds.h5"));
    f = h5_create(vds);
    hid_t vs = H5Screate_simple(3, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    assert_true(H5Pset_virtual(dcpl, vs, "lp_data_000001.h5", "/entry/data/data", vs) >= 0);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t d = H5Dcreate2(f, "/entry/data/data", H5T_STD_U16LE, vs, lcpl, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    H5Dclose(d);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(vs);
    h5_close(f);
    assert_open_fails(vds, NULL, SW_EFORMAT, "virtual dataset");
    r = NULL;
    assert_int_equal(sw_h5_open_ex(NULL, vds, &o, &r), SW_OK);
    assert_frames_read_back(r, fr, 2, 0);
    sw_h5_close(r);

    /* a FIFO is refused before anything opens it (open would block) */
    char fifo[768];
    snprintf(fifo, sizeof fifo, "%s", sw_test_path("lp_fifo.h5"));
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_open_fails(fifo, NULL, SW_EIO, "not a regular file");
    free_frames(fr, 2);
}

/* The walk in this process gives the same answers as in the child; options are checked. */
static void walk_options(void **state)
{
    (void)state;
    sw_image *fr = make_frames(3, 10, 7, SW_PIX_U32, 77);
    char path[768];
    snprintf(path, sizeof path, "%s", sw_test_path("opts_master.h5"));
    assert_int_equal(sw_h5_write_linked(NULL, path, fr, 3, 2, SW_H5_DEFLATE, NULL, 12.0), SW_OK);
    sw_h5_options o;
    sw_h5_options_default(&o);
    assert_true(o.timeout_s == SW_H5_WALK_TIMEOUT && !o.in_process && !o.links_anywhere);
    o.in_process = 1;
    sw_h5_reader *r = NULL;
    assert_int_equal(sw_h5_open_ex(NULL, path, &o, &r), SW_OK);
    sw_h5_info in;
    assert_int_equal(sw_h5_get_info(r, &in), SW_OK);
    assert_int_equal(in.blocks, 2);
    assert_true(in.overload == 12.0);
    assert_frames_read_back(r, fr, 3, 0);
    sw_h5_close(r);
    assert_int_equal(sw_h5_open_ex(NULL, path, NULL, &r), SW_OK);
    sw_h5_close(r);
    o.in_process = 0;
    o.timeout_s = -1.0;
    assert_int_equal(sw_h5_open_ex(NULL, path, &o, &r), SW_EINVAL);
    o.timeout_s = NAN;
    assert_int_equal(sw_h5_open_ex(NULL, path, &o, &r), SW_EINVAL);
    assert_null(r);
    /* a relative dataset path is from the root */
    sw_h5_options_default(&o);
    o.dataset = "entry/data/data_000002";
    assert_int_equal(sw_h5_open_ex(NULL, path, &o, &r), SW_OK);
    assert_frames_read_back(r, fr + 2, 1, 0);
    sw_h5_close(r);
    free_frames(fr, 3);
}

/* The inputs kept in tests/fuzz/corpus/h5 and h5_linked as regress_* (files whose structure made
 * libhdf5 crash or hang when walked in-process, and anything the fuzzers found): each must open
 * and read, or fail with a file status, within the walk's time limit, without taking the
 * process down (what each gives can depend on libhdf5's version and on the memory it may take). */
static void regression_inputs(void **state)
{
    (void)state;
    const char *data = getenv("SW_TEST_DATA");
    if (!data) {
        print_message("SKIP: SW_TEST_DATA is not set (run through ctest)\n");
        return;
    }
    static const char *const names[4] = {"f_master.h5", "f_data_000001.h5", "f_data_000002.h5",
                                         "f_data_000003.h5"};
    int seen = 0;
    for (int linked = 0; linked < 2; linked++) {
        /* SW_TEST_DATA is tests/data (which need not exist): the corpus is tests/fuzz/corpus */
        char dir[1024];
        size_t dl = strlen(data);
        while (dl > 0 && data[dl - 1] == '/')
            dl--;
        while (dl > 0 && data[dl - 1] != '/')
            dl--;
        snprintf(dir, sizeof dir, "%.*sfuzz/corpus/%s", (int)dl, data, linked ? "h5_linked" : "h5");
        DIR *d = opendir(dir);
        assert_non_null(d);
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, "regress_", 8) != 0)
                continue;
            char file[1400], target[768];
            snprintf(file, sizeof file, "%s/%s", dir, e->d_name);
            size_t size;
            uint8_t *in = sw_test_read_all(file, &size);
            if (!linked) {
                snprintf(target, sizeof target, "%s", sw_test_path("regress.h5"));
                sw_test_write_file(target, in, size);
            } else {
                /* the parts as fuzz_common.h's fuzz_split cuts them */
                const uint8_t *p = in;
                size_t left = size;
                for (int i = 0; i < 4; i++) {
                    size_t n = left;
                    if (i < 3) {
                        uint32_t k = 0;
                        for (int b = 0; b < 4 && (size_t)b < left; b++)
                            k |= (uint32_t)p[b] << (8 * b);
                        size_t skip = left < 4 ? left : 4;
                        p += skip;
                        left -= skip;
                        n = k < left ? k : left;
                    }
                    snprintf(target, sizeof target, "%s", sw_test_path(names[i]));
                    sw_test_write_file(target, p, n);
                    p += n;
                    left -= n;
                }
                snprintf(target, sizeof target, "%s", sw_test_path(names[0]));
            }
            int crashed = 0, garbage = 0;
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            sw_status st = open_and_read_all(target, NULL, 0, 1.0, &crashed, &garbage);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double took =
                (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            print_message("%s: %s (%.2f s)\n", e->d_name,
                          st == SW_OK ? "read" : sw_context_error(NULL), took);
            /* within the walk's time limit (1 s) and what reading takes */
            if (took > 5.0)
                fail_msg("%s took %.1f s", e->d_name, took);
            seen++;
            free(in);
        }
        closedir(d);
    }
    print_message("%d regression inputs\n", seen);
    assert_true(seen > 0);
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
        cmocka_unit_test(bitshuffle_transform),
        cmocka_unit_test(bitshuffle_round_trip),
        cmocka_unit_test(bitshuffle_corrupt),
        cmocka_unit_test(bitshuffle_threads),
        cmocka_unit_test(layouts_read_like_hdf5),
        cmocka_unit_test(many_chunks_looked_up),
        cmocka_unit_test(encoder_matches_plugin),
        cmocka_unit_test(corrupt_chunks_in_files),
        cmocka_unit_test(flipped_bytes),
        cmocka_unit_test(link_policy),
        cmocka_unit_test(walk_options),
        cmocka_unit_test(regression_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

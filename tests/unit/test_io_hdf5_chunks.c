/*
 * A frame's stored chunks read raw (sw_h5_read_frame_chunks, sw_h5_frame_chunks_limits), the
 * input of the GPU decoder: on files written chunk by chunk (H5Dwrite_chunk, so that no filter
 * plugin is needed) the chunks decode with the CPU decoder to sw_h5_read_frame's frame and to the
 * data, tile the frame's rows in order, and read alike from several threads at once; datasets
 * through other filters, or chunked otherwise, say "not as chunks" (0); a chunk larger than
 * bitshuffle/LZ4 can make, a file truncated after opening and too small a buffer are refused.
 */
#include "testutil.h"
#include "io/bitshuffle.h"

#include <hdf5.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int truncate(const char *path, off_t length);

enum { W = 64, H = 48, N = 4 };

static uint16_t px[N][H][W];

/* /d: N frames of W x H u16, chunks of `rows` full rows (or cols < W columns), through
 * bitshuffle/LZ4 (cd[4] = 2) or deflate; each chunk written encoded. junk_chunk >= 0: that chunk
 * (of frame 1) is replaced by more bytes than bitshuffle/LZ4 can make of it. */
static const char *write_file(const char *name, int rows, int cols, int deflate, int junk_chunk)
{
    uint64_t s = 99;
    for (int k = 0; k < N; k++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                px[k][y][x] =
                    (uint16_t)((s >> 60) +
                               ((x - 20) * (x - 20) + (y - 30) * (y - 30) < 9 ? 900 * (k + 1) : 0));
            }
    const char *path = sw_test_path(name);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(f >= 0);
    hsize_t dims[3] = {N, H, W}, chunk[3] = {1, (hsize_t)rows, (hsize_t)cols};
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    assert_true(H5Pset_chunk(dcpl, 3, chunk) >= 0);
    /* with the plugin, its own parameters (block size 0, LZ4), which it expands; without it,
     * the expanded form as the plugin stores it (version, element size 2, block 0, LZ4) */
    const unsigned user[2] = {0, 2}, stored[5] = {0, 3, 2, 0, 2};
    const int plugin = sw_h5_bitshuffle_available();
    if (deflate)
        assert_true(H5Pset_deflate(dcpl, 4) >= 0);
    else
        assert_true(H5Pset_filter(dcpl, 32008, H5Z_FLAG_OPTIONAL, plugin ? 2 : 5,
                                  plugin ? user : stored) >= 0);
    hid_t sp = H5Screate_simple(3, dims, NULL);
    hid_t d = H5Dcreate2(f, "/d", H5T_STD_U16LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    if (deflate) {
        assert_true(H5Dwrite(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, px) >= 0);
    } else {
        const size_t bytes = (size_t)rows * (size_t)cols * 2;
        const size_t cap = sw_bshuf_lz4_bound(bytes, 2, 0) + 64;
        uint8_t *tile = malloc(bytes), *enc = malloc(cap);
        assert_non_null(tile);
        assert_non_null(enc);
        for (int k = 0; k < N; k++)
            for (int y0 = 0, c = 0; y0 < H; y0 += rows)
                for (int x0 = 0; x0 < W; x0 += cols, c++) {
                    for (int y = 0; y < rows; y++)
                        memcpy(tile + (size_t)y * cols * 2, &px[k][y0 + y][x0], (size_t)cols * 2);
                    size_t m = sw_bshuf_encode_lz4(tile, bytes, enc, cap, 2, 0);
                    assert_true(m > 0);
                    if (k == 1 && c == junk_chunk) {
                        m = cap; /* more than the bound */
                        memset(enc, 0x5A, m);
                    }
                    hsize_t off[3] = {(hsize_t)k, (hsize_t)y0, (hsize_t)x0};
                    assert_true(H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, m, enc) >= 0);
                }
        free(tile);
        free(enc);
    }
    H5Dclose(d);
    H5Sclose(sp);
    H5Pclose(dcpl);
    assert_true(H5Fclose(f) >= 0);
    return path;
}

/* st, printing the message when it is not SW_OK. */
static sw_status said(sw_status st)
{
    if (st != SW_OK)
        print_message("(%s)\n", sw_context_error(NULL));
    return st;
}

static sw_h5_reader *open_ok(const char *path)
{
    sw_h5_reader *r = NULL;
    sw_status st = sw_h5_open(NULL, path, "/d", &r);
    if (st != SW_OK)
        print_error("%s: %s\n", path, sw_context_error(NULL));
    assert_int_equal(st, SW_OK);
    return r;
}

/* Reads frame k as chunks, checks their layout and decodes them: the frame in out. */
static void read_decode(sw_h5_reader *r, int64_t k, size_t cap, int64_t max_chunks, int rows,
                        uint8_t *out)
{
    uint8_t *buf = malloc(cap);
    sw_find_chunk *c = calloc((size_t)max_chunks, sizeof *c);
    assert_non_null(buf);
    assert_non_null(c);
    int64_t n = -1;
    assert_int_equal(sw_h5_read_frame_chunks(r, k, buf, cap, c, max_chunks, &n), SW_OK);
    assert_int_equal(n, H / rows);
    uint64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_int_equal(c[i].offset, at);
        assert_int_equal(c[i].out_offset, (uint64_t)i * rows * W * 2);
        assert_int_equal(c[i].out_size, (uint64_t)rows * W * 2);
        char why[256];
        assert_int_equal(sw_bshuf_decode_lz4(buf + c[i].offset, c[i].size, out + c[i].out_offset,
                                             c[i].out_size, 2, why, sizeof why),
                         0);
        at += c[i].size;
    }
    assert_true(at <= cap);
    free(buf);
    free(c);
}

static void chunks_decode_to_the_frame(void **state)
{
    (void)state;
    const int rows_of[] = {H, 16, 8};
    for (int ri = 0; ri < 3; ri++) {
        const int rows = rows_of[ri];
        const char *path = write_file("chunks.h5", rows, W, 0, -1);
        sw_h5_reader *r = open_ok(path);
        size_t cap = 0;
        int64_t maxc = 0;
        assert_int_equal(sw_h5_frame_chunks_limits(r, &cap, &maxc), SW_OK);
        assert_int_equal(maxc, H / rows);
        assert_true(cap > 0 && cap < (size_t)W * H * 2); /* these frames compress */
        sw_image img;
        assert_int_equal(sw_image_alloc(NULL, W, H, SW_PIX_U16, &img), SW_OK);
        uint8_t out[H * W * 2];
        for (int64_t k = 0; k < N; k++) {
            read_decode(r, k, cap, maxc, rows, out);
            assert_memory_equal(out, px[k], sizeof out);
            assert_int_equal(said(sw_h5_read_frame(r, k, &img)), SW_OK);
            assert_memory_equal(out, img.data, sizeof out);
        }
        /* too small a buffer, or too few chunk entries: SW_EINVAL */
        uint8_t small[16];
        sw_find_chunk c[8];
        int64_t n = 5;
        assert_int_equal(sw_h5_read_frame_chunks(r, 0, small, sizeof small, c, 8, &n), SW_EINVAL);
        assert_int_equal(n, 0);
        if (maxc > 1) {
            uint8_t *buf = malloc(cap);
            assert_non_null(buf);
            assert_int_equal(sw_h5_read_frame_chunks(r, 0, buf, cap, c, maxc - 1, &n), SW_EINVAL);
            free(buf);
        }
        assert_int_equal(sw_h5_read_frame_chunks(r, N, small, sizeof small, c, 8, &n), SW_EINVAL);
        sw_image_free(&img);
        sw_h5_close(r);
    }
}

typedef struct thread_job {
    sw_h5_reader *r;
    size_t cap;
    int64_t maxc;
    int t, bad;
} thread_job;

static void *reader_thread(void *arg)
{
    thread_job *j = arg;
    uint8_t *buf = malloc(j->cap);
    sw_find_chunk c[16];
    char why[256];
    uint8_t out[H * W * 2];
    for (int rep = 0; rep < 200 && buf; rep++) {
        const int64_t k = (rep + j->t) % N;
        int64_t n = 0;
        if (sw_h5_read_frame_chunks(j->r, k, buf, j->cap, c, j->maxc, &n) != SW_OK || n < 1) {
            j->bad++;
            continue;
        }
        for (int64_t i = 0; i < n; i++)
            if (sw_bshuf_decode_lz4(buf + c[i].offset, c[i].size, out + c[i].out_offset,
                                    c[i].out_size, 2, why, sizeof why) != 0)
                j->bad++;
        if (memcmp(out, px[k], sizeof out) != 0)
            j->bad++;
    }
    free(buf);
    return NULL;
}

/* Four threads at once on one reader read what one thread reads. */
static void several_threads(void **state)
{
    (void)state;
    const char *path = write_file("threads.h5", 16, W, 0, -1);
    sw_h5_reader *r = open_ok(path);
    size_t cap;
    int64_t maxc;
    assert_int_equal(sw_h5_frame_chunks_limits(r, &cap, &maxc), SW_OK);
    pthread_t th[4];
    thread_job jobs[4];
    for (int t = 0; t < 4; t++) {
        jobs[t] = (thread_job){r, cap, maxc, t, 0};
        assert_int_equal(pthread_create(&th[t], NULL, reader_thread, &jobs[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(jobs[t].bad, 0);
    }
    sw_h5_close(r);
}

/* Deflate, and chunks that are not whole rows: not read as chunks (0), read decoded as before. */
static void other_layouts_not_raw(void **state)
{
    (void)state;
    const struct {
        int rows, cols, deflate;
    } cases[] = {{H, W, 1}, {16, 32, 0}, {H, 16, 0}};
    for (int i = 0; i < 3; i++) {
        const char *path =
            write_file("other.h5", cases[i].rows, cases[i].cols, cases[i].deflate, -1);
        sw_h5_reader *r = open_ok(path);
        size_t cap = 1;
        int64_t maxc = 1;
        assert_int_equal(sw_h5_frame_chunks_limits(r, &cap, &maxc), SW_OK);
        assert_int_equal(maxc, 0);
        uint8_t buf[64];
        sw_find_chunk c[8];
        int64_t n = 3;
        assert_int_equal(sw_h5_read_frame_chunks(r, 1, buf, sizeof buf, c, 8, &n), SW_OK);
        assert_int_equal(n, 0);
        sw_image img;
        assert_int_equal(sw_image_alloc(NULL, W, H, SW_PIX_U16, &img), SW_OK);
        assert_int_equal(said(sw_h5_read_frame(r, 1, &img)), SW_OK);
        assert_memory_equal(img.data, px[1], sizeof px[1]);
        sw_image_free(&img);
        sw_h5_close(r);
    }
}

/* A chunk larger than bitshuffle/LZ4 can make of its size, and a file truncated after it was
 * opened: SW_EFORMAT with a message, nothing read past the buffer. */
static void refused(void **state)
{
    (void)state;
    const char *path = write_file("junk.h5", 16, W, 0, 1);
    sw_h5_reader *r = open_ok(path);
    size_t cap = 0;
    int64_t maxc = 0;
    assert_int_equal(sw_h5_frame_chunks_limits(r, &cap, &maxc), SW_OK);
    assert_int_equal(maxc, 3);
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    sw_find_chunk c[3];
    int64_t n = 0;
    assert_int_equal(sw_h5_read_frame_chunks(r, 0, buf, cap, c, 3, &n), SW_OK);
    assert_int_equal(n, 3);
    assert_int_equal(sw_h5_read_frame_chunks(r, 1, buf, cap, c, 3, &n), SW_EFORMAT);
    assert_non_null(strstr(sw_context_error(NULL), "more than bitshuffle/LZ4"));
    sw_h5_close(r);

    path = write_file("cut.h5", 16, W, 0, -1);
    r = open_ok(path);
    assert_int_equal(sw_h5_frame_chunks_limits(r, &cap, &maxc), SW_OK);
    free(buf);
    buf = malloc(cap);
    assert_non_null(buf);
    assert_int_equal(truncate(path, 4096), 0);
    assert_int_equal(sw_h5_read_frame_chunks(r, N - 1, buf, cap, c, 3, &n), SW_EFORMAT);
    assert_int_equal(n, 0);
    assert_non_null(strstr(sw_context_error(NULL), "changed since it was opened"));
    free(buf);
    sw_h5_close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunks_decode_to_the_frame),
        cmocka_unit_test(several_threads),
        cmocka_unit_test(other_layouts_not_raw),
        cmocka_unit_test(refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Streams in ImageStreamIO's layout: round trips of every data type and of the circular buffer,
 * a second process reading what this one writes (and the reverse) woken by the semaphores, spin
 * waits, timeouts, the stop flag, keywords, semaphore claims, re-creation, and headers that do
 * not check out. Every stream lives in the test's own temporary directory.
 */
#define _GNU_SOURCE
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char *dir(void)
{
    return sw_test_tmpdir();
}

static sw_stream *make(sw_context *ctx, const char *name, int naxis, uint32_t w, uint32_t h,
                       uint32_t d, sw_stream_type t, int circular, int nkw)
{
    sw_stream_params p;
    sw_stream_params_default(&p);
    p.name = name;
    p.naxis = naxis;
    p.size[0] = w;
    p.size[1] = h;
    p.size[2] = d;
    p.type = t;
    p.circular = circular;
    p.keywords = nkw;
    sw_stream *s = NULL;
    sw_status st = sw_stream_create(ctx, dir(), &p, &s);
    if (st != SW_OK)
        fail_msg("create %s: %s", name, sw_context_error(ctx));
    return s;
}

/* ------------------------------------------------------------------ types */

static void test_types(void **state)
{
    (void)state;
    static const size_t sizes[14] = {0, 1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16, 2};
    for (int t = 1; t <= 13; t++) {
        assert_int_equal(sw_stream_type_size((sw_stream_type)t), sizes[t]);
        sw_stream_type back;
        assert_int_equal(sw_stream_type_parse(sw_stream_type_string((sw_stream_type)t), &back),
                         SW_OK);
        assert_int_equal(back, t);
    }
    assert_int_equal(sw_stream_type_size((sw_stream_type)0), 0);
    assert_int_equal(sw_stream_type_size((sw_stream_type)20), 0);
    assert_string_equal(sw_stream_type_string((sw_stream_type)14), "?");
    sw_stream_type t;
    assert_int_equal(sw_stream_type_parse("FLT32", &t), SW_OK);
    assert_int_equal(t, SW_STREAM_F32);
    assert_int_equal(sw_stream_type_parse("complex128", &t), SW_OK);
    assert_int_equal(t, SW_STREAM_CF64);
    assert_int_equal(sw_stream_type_parse("int16", &t), SW_OK);
    assert_int_equal(t, SW_STREAM_I16);
    assert_int_equal(sw_stream_type_parse("f128", &t), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(NULL), "f128"));
    sw_pixel_type pt;
    assert_int_equal(sw_stream_type_to_pixel(SW_STREAM_U16, &pt), SW_OK);
    assert_int_equal(pt, SW_PIX_U16);
    assert_int_equal(sw_stream_type_to_pixel(SW_STREAM_I16, &pt), SW_EUNSUPPORTED);
    assert_int_equal(sw_stream_type_from_pixel(SW_PIX_F32), SW_STREAM_F32);
    assert_int_equal(sw_stream_type_from_pixel(SW_PIX_U8), SW_STREAM_U8);
    assert_string_equal(sw_status_string(SW_ETIMEDOUT), "timed out");
    assert_string_equal(sw_status_string(SW_ECANCELED), "stopped");
}

/* ------------------------------------------------------------------ round trips */

static void fill_bytes(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 131u + seed * 17u + (i >> 8)) & 0xFF);
}

static void test_round_trip_every_type(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    for (int t = 1; t <= 13; t++) {
        char name[32];
        snprintf(name, sizeof name, "rt_%s", sw_stream_type_string((sw_stream_type)t));
        sw_stream *s = make(ctx, name, 2, 7, 5, 1, (sw_stream_type)t, 0, 0);
        const size_t n = 35 * sw_stream_type_size((sw_stream_type)t);
        sw_stream_info in;
        assert_int_equal(sw_stream_get_info(s, &in), SW_OK);
        assert_int_equal(in.frame_bytes, n);
        assert_string_equal(in.name, name);
        assert_int_equal(in.cnt0, 0);
        assert_int_equal(in.semaphores, 10);
        uint8_t *a = malloc(n), *b = malloc(n);
        for (unsigned f = 1; f <= 3; f++) {
            fill_bytes(a, n, f * 100u + (unsigned)t);
            assert_int_equal(sw_stream_write(s, a, n), SW_OK);
        }
        /* another handle, as another process would open it */
        sw_stream *r = NULL;
        assert_int_equal(sw_stream_open(ctx, dir(), name, &r), SW_OK);
        uint64_t c = 0;
        assert_int_equal(sw_stream_read(r, b, n, &c), SW_OK);
        assert_int_equal(c, 3);
        assert_memory_equal(a, b, n);
        assert_memory_equal(sw_stream_data(r), a, n);
        assert_int_equal(sw_stream_get_info(r, &in), SW_OK);
        assert_int_equal(in.type, t);
        assert_int_equal(in.naxis, 2);
        assert_int_equal(in.size[0], 7);
        assert_int_equal(in.size[1], 5);
        assert_int_equal(in.write_flag, 0);
        assert_true(in.write_time >= in.creation_time);
        assert_near(in.write_time, sw_stream_clock_now(), 5.0);
        /* wrong sizes refused */
        assert_int_equal(sw_stream_write(s, a, n - 1), SW_EINVAL);
        assert_int_equal(sw_stream_read(r, b, n + 1, NULL), SW_EINVAL);
        sw_image img;
        sw_pixel_type pt;
        if (sw_stream_type_to_pixel((sw_stream_type)t, &pt) == SW_OK) {
            assert_int_equal(sw_stream_wrap_image(r, 0, &img), SW_OK);
            assert_int_equal(img.width, 7);
            assert_int_equal(img.height, 5);
            assert_int_equal(img.type, pt);
            assert_ptr_equal(img.data, sw_stream_data(r));
        } else {
            assert_int_equal(sw_stream_wrap_image(r, 0, &img), SW_EUNSUPPORTED);
        }
        free(a);
        free(b);
        sw_stream_close(r);
        sw_stream_close(s);
        assert_int_equal(sw_stream_remove(ctx, dir(), name), SW_OK);
        assert_int_equal(sw_stream_open(ctx, dir(), name, &r), SW_EIO);
    }
    /* 1 and 3 axes (not circular: one frame is the whole cube) */
    sw_stream *s = make(ctx, "rt_1d", 1, 11, 0, 0, SW_STREAM_F64, 0, 0);
    double v[11];
    for (int i = 0; i < 11; i++)
        v[i] = i * 0.5 - 2;
    assert_int_equal(sw_stream_write(s, v, sizeof v), SW_OK);
    double w[11];
    assert_int_equal(sw_stream_read(s, w, sizeof w, NULL), SW_OK);
    assert_memory_equal(v, w, sizeof v);
    sw_stream_close(s);
    s = make(ctx, "rt_cube", 3, 4, 3, 2, SW_STREAM_I32, 0, 0);
    sw_stream_info in;
    sw_stream_get_info(s, &in);
    assert_int_equal(in.frame_bytes, 4 * 3 * 2 * 4);
    assert_int_equal(in.circular, 0);
    sw_stream_close(s);
    sw_context_destroy(ctx);
}

static void test_circular(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_stream *s = make(ctx, "circ", 3, 4, 2, 3, SW_STREAM_U16, 1, 0);
    sw_stream_info in;
    sw_stream_get_info(s, &in);
    assert_int_equal(in.circular, 1);
    assert_int_equal(in.frame_bytes, 4 * 2 * 2);
    assert_int_equal(in.image_type, 0x20001);
    uint16_t fr[8], got[8];
    for (int f = 1; f <= 5; f++) {
        for (int i = 0; i < 8; i++)
            fr[i] = (uint16_t)(f * 100 + i);
        assert_int_equal(sw_stream_write(s, fr, sizeof fr), SW_OK);
        /* slices 1, 2, 0, 1, 2 */
        assert_int_equal(sw_stream_cnt1(s), (uint64_t)(f % 3));
        assert_int_equal(sw_stream_cnt0(s), (uint64_t)f);
        uint64_t c;
        assert_int_equal(sw_stream_read(s, got, sizeof got, &c), SW_OK);
        assert_int_equal(c, (uint64_t)f);
        assert_memory_equal(got, fr, sizeof fr);
    }
    /* the older slices keep frames 3 (slice 0) and 4 (slice 1) */
    assert_int_equal(((uint16_t *)sw_stream_slice(s, 0))[0], 300);
    assert_int_equal(((uint16_t *)sw_stream_slice(s, 1))[7], 407);
    assert_null(sw_stream_slice(s, 3));
    sw_image img;
    assert_int_equal(sw_stream_wrap_image(s, 2, &img), SW_OK);
    assert_int_equal(((uint16_t *)img.data)[0], 500);
    /* zero copy writer */
    void *slot;
    assert_int_equal(sw_stream_write_begin(s, &slot), SW_OK);
    assert_ptr_equal(slot, sw_stream_slice(s, 0));
    sw_stream_get_info(s, &in);
    assert_int_equal(in.write_flag, 1);
    assert_int_equal(sw_stream_write_begin(s, &slot), SW_EINVAL);
    assert_int_equal(sw_stream_write(s, fr, sizeof fr), SW_EINVAL);
    memset(slot, 0xab, 16);
    assert_int_equal(sw_stream_write_end(s), SW_OK);
    assert_int_equal(sw_stream_write_end(s), SW_EINVAL);
    assert_int_equal(sw_stream_cnt1(s), 0);
    assert_int_equal(sw_stream_read(s, got, sizeof got, NULL), SW_OK);
    assert_int_equal(got[3], 0xabab);
    sw_stream_close(s);

    /* a circular buffer needs 3 axes */
    sw_stream_params p;
    sw_stream_params_default(&p);
    p.name = "circ2";
    p.circular = 1;
    assert_int_equal(sw_stream_create(ctx, dir(), &p, &s), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "3 axes"));
    sw_context_destroy(ctx);
}

/* ------------------------------------------------------------------ two processes */

/* The child opens "xproc", claims a semaphore, tells the parent it is ready and waits for frame
 * 1 (SEM or SPIN); it reports the monotonic time at which it woke and whether the frame it read
 * is the one expected. */
static void child_reader(int fd, sw_stream_wait_mode mode)
{
    sw_context *ctx = NULL;
    if (sw_context_create(NULL, &ctx) != SW_OK)
        _exit(10);
    sw_stream *s;
    if (sw_stream_open(ctx, dir(), "xproc", &s) != SW_OK)
        _exit(11);
    int32_t k = 0;
    if (mode == SW_STREAM_WAIT_SEM) {
        if (sw_stream_claim_semaphore(s, &k) != SW_OK)
            _exit(12);
        sw_stream_flush_semaphore(s, k);
    }
    char r = 'r';
    if (write(fd, &r, 1) != 1)
        _exit(13);
    uint64_t c = 0;
    if (sw_stream_wait(s, mode, k, 0, 4.0, NULL, &c) != SW_OK)
        _exit(14);
    double woke = mono();
    float fr[256];
    if (sw_stream_read(s, fr, sizeof fr, &c) != SW_OK || c != 1)
        _exit(15);
    int ok = 1;
    for (int i = 0; i < 256; i++)
        ok &= fr[i] == (float)i * 0.25f;
    if (write(fd, &woke, sizeof woke) != (ssize_t)sizeof woke)
        _exit(16);
    sw_stream_release_semaphore(s, k);
    sw_stream_close(s);
    sw_context_destroy(ctx);
    _exit(ok ? 0 : 17);
}

static void run_writer_to_child(sw_stream_wait_mode mode)
{
    sw_context *ctx = sw_test_cpu_context(1);
    sw_stream *s = make(ctx, "xproc", 2, 16, 16, 1, SW_STREAM_F32, 0, 0);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        child_reader(pfd[1], mode);
    }
    close(pfd[1]);
    char r;
    assert_int_equal(read(pfd[0], &r, 1), 1);
    usleep(100000); /* the child is asleep in its wait by now */
    float fr[256];
    for (int i = 0; i < 256; i++)
        fr[i] = (float)i * 0.25f;
    const double t0 = mono();
    assert_int_equal(sw_stream_write(s, fr, sizeof fr), SW_OK);
    double woke = 0;
    assert_int_equal(read(pfd[0], &woke, sizeof woke), (ssize_t)sizeof woke);
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFEXITED(wst));
    assert_int_equal(WEXITSTATUS(wst), 0);
    const double lat = woke - t0;
    printf("# %s wake latency (write call -> reader awake, another process): %.1f us\n",
           mode == SW_STREAM_WAIT_SEM ? "semaphore" : "spin", lat * 1e6);
    assert_true(lat > 0);
    assert_true(lat < 0.5); /* woken by the post, not by the 4 s timeout */
    close(pfd[0]);
    sw_stream_close(s);
    sw_context_destroy(ctx);
}

static void test_child_reads_semaphore(void **state)
{
    (void)state;
    run_writer_to_child(SW_STREAM_WAIT_SEM);
}

static void test_child_reads_spin(void **state)
{
    (void)state;
    run_writer_to_child(SW_STREAM_WAIT_SPIN);
}

/* The reverse: the child writes 20 frames, the parent waits for each on its semaphore. */
static void test_parent_reads_child(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_stream *s = make(ctx, "xrev", 1, 1000, 0, 0, SW_STREAM_I64, 0, 0);
    int32_t k = -1;
    assert_int_equal(sw_stream_claim_semaphore(s, &k), SW_OK);
    assert_int_equal(k, 0);
    sw_stream_flush_semaphore(s, k);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sw_stream *w;
        if (sw_stream_open(NULL, dir(), "xrev", &w) != SW_OK)
            _exit(11);
        int64_t fr[1000];
        for (int f = 1; f <= 20; f++) {
            usleep(5000);
            for (int i = 0; i < 1000; i++)
                fr[i] = (int64_t)f * 1000000 + i;
            if (sw_stream_write(w, fr, sizeof fr) != SW_OK)
                _exit(12);
        }
        sw_stream_close(w);
        _exit(0);
    }
    int64_t got[1000];
    uint64_t seen = 0;
    int frames = 0;
    while (seen < 20) {
        uint64_t c = 0;
        assert_int_equal(sw_stream_wait(s, SW_STREAM_WAIT_SEM, k, seen, 3.0, NULL, &c), SW_OK);
        assert_true(c > seen);
        assert_int_equal(sw_stream_read(s, got, sizeof got, &c), SW_OK);
        /* a consistent frame: every element from the same write */
        const int64_t f = got[0] / 1000000;
        assert_true(f >= 1 && f <= 20);
        for (int i = 0; i < 1000; i++)
            assert_int_equal(got[i], f * 1000000 + i);
        assert_int_equal((uint64_t)f, c);
        seen = c;
        frames++;
    }
    assert_true(frames >= 10); /* 5 ms apart: the reader keeps up with most */
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    sw_stream_close(s);
    sw_context_destroy(ctx);
}

/* A writer hammering frames while a reader copies: every copy is one frame, never a mixture. */
static void test_consistent_under_load(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_stream *s = make(ctx, "xload", 2, 256, 64, 1, SW_STREAM_U32, 0, 0);
    pid_t pid = fork();
    if (pid == 0) {
        sw_stream *w;
        if (sw_stream_open(NULL, dir(), "xload", &w) != SW_OK)
            _exit(11);
        static uint32_t fr[256 * 64];
        const double end = mono() + 0.4;
        for (uint32_t f = 1; mono() < end; f++) {
            for (int i = 0; i < 256 * 64; i++)
                fr[i] = f;
            sw_stream_write(w, fr, sizeof fr);
        }
        _exit(0);
    }
    static uint32_t got[256 * 64];
    int reads = 0;
    const double end = mono() + 0.3;
    while (mono() < end) {
        uint64_t c;
        assert_int_equal(sw_stream_read(s, got, sizeof got, &c), SW_OK);
        for (int i = 1; i < 256 * 64; i++)
            if (got[i] != got[0])
                fail_msg("torn frame: element %d is %u, element 0 is %u", i, got[i], got[0]);
        if (c > 0)
            assert_int_equal(got[0], (uint32_t)c);
        reads++;
    }
    int wst;
    waitpid(pid, &wst, 0);
    assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    assert_true(reads > 10);
    sw_stream_close(s);
    sw_context_destroy(ctx);
}

/* ------------------------------------------------------------------ timeouts, stop */

static volatile int g_stop;

static void *set_stop(void *arg)
{
    (void)arg;
    usleep(100000);
    g_stop = 1;
    return NULL;
}

static void test_timeout_and_stop(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_stream *s = make(ctx, "tmo", 2, 2, 2, 1, SW_STREAM_U8, 0, 0);
    int32_t k;
    assert_int_equal(sw_stream_claim_semaphore(s, &k), SW_OK);
    uint64_t c = 99;
    double t0 = mono();
    assert_int_equal(sw_stream_wait(s, SW_STREAM_WAIT_SEM, k, 0, 0.0, NULL, &c), SW_ETIMEDOUT);
    assert_true(mono() - t0 < 0.05);
    assert_int_equal(c, 0);
    t0 = mono();
    assert_int_equal(sw_stream_wait(s, SW_STREAM_WAIT_SEM, k, 0, 0.15, NULL, &c), SW_ETIMEDOUT);
    double dt = mono() - t0;
    assert_true(dt >= 0.149 && dt < 1.0);
    assert_non_null(strstr(sw_context_error(ctx), "within"));
    t0 = mono();
    assert_int_equal(sw_stream_wait(s, SW_STREAM_WAIT_SPIN, 0, 0, 0.1, NULL, &c), SW_ETIMEDOUT);
    dt = mono() - t0;
    assert_true(dt >= 0.099 && dt < 1.0);
    /* a stale post (an old frame) does not end the wait: cnt0 is checked again */
    uint8_t fr[4] = {1, 2, 3, 4};
    assert_int_equal(sw_stream_write(s, fr, 4), SW_OK);
    assert_int_equal(sw_stream_wait(s, SW_STREAM_WAIT_SEM, k, 0, 1.0, NULL, &c), SW_OK);
    assert_int_equal(c, 1);
    t0 = mono();
    assert_int_equal(sw_stream_wait(s, SW_STREAM_WAIT_SEM, k, 1, 0.1, NULL, &c), SW_ETIMEDOUT);
    assert_true(mono() - t0 >= 0.099);
    /* the stop flag ends a wait without limit, promptly */
    for (int mode = 0; mode <= 1; mode++) {
        g_stop = 0;
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, set_stop, NULL), 0);
        t0 = mono();
        assert_int_equal(sw_stream_wait(s, (sw_stream_wait_mode)mode, k, 1, -1.0, &g_stop, &c),
                         SW_ECANCELED);
        dt = mono() - t0;
        pthread_join(th, NULL);
        assert_true(dt >= 0.09 && dt < 0.5);
    }
    /* bad index */
    assert_int_equal(sw_stream_wait(s, SW_STREAM_WAIT_SEM, 10, 0, 0.0, NULL, &c), SW_EINVAL);
    assert_int_equal(sw_stream_wait(s, SW_STREAM_WAIT_SEM, -1, 0, 0.0, NULL, &c), SW_EINVAL);
    sw_stream_close(s);
    sw_context_destroy(ctx);
}

/* ------------------------------------------------------------------ semaphores, re-creation */

static void test_semaphore_claims(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_stream_params p;
    sw_stream_params_default(&p);
    p.name = "claims";
    p.semaphores = 3;
    p.type = SW_STREAM_U8;
    sw_stream *s;
    assert_int_equal(sw_stream_create(ctx, dir(), &p, &s), SW_OK);
    int32_t a, b, c, d;
    assert_int_equal(sw_stream_claim_semaphore(s, &a), SW_OK);
    assert_int_equal(sw_stream_claim_semaphore(s, &b), SW_OK);
    assert_int_equal(sw_stream_claim_semaphore(s, &c), SW_OK);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_int_equal(c, 2);
    assert_int_equal(sw_stream_claim_semaphore(s, &d), SW_ERANGE);
    assert_int_equal(d, -1);
    assert_non_null(strstr(sw_context_error(ctx), "3 semaphores"));
    sw_stream_release_semaphore(s, b);
    assert_int_equal(sw_stream_claim_semaphore(s, &d), SW_OK);
    assert_int_equal(d, 1);
    /* a semaphore held by a process that has exited is free again */
    sw_stream_release_semaphore(s, c);
    pid_t pid = fork();
    if (pid == 0) {
        sw_stream *w;
        int32_t k;
        if (sw_stream_open(NULL, dir(), "claims", &w) != SW_OK ||
            sw_stream_claim_semaphore(w, &k) != SW_OK || k != 2)
            _exit(1);
        _exit(0); /* exits holding it */
    }
    int wst;
    waitpid(pid, &wst, 0);
    assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    assert_int_equal(sw_stream_claim_semaphore(s, &c), SW_OK);
    assert_int_equal(c, 2);
    /* posts are capped at 10 (ImageStreamIO's SEMAPHORE_MAXVAL); a flush drains them */
    uint8_t fr[1] = {0};
    sw_stream_flush_semaphore(s, a);
    assert_int_equal(sw_stream_semaphore_value(s, a), 0);
    assert_int_equal(sw_stream_write(s, fr, 1), SW_OK);
    assert_int_equal(sw_stream_semaphore_value(s, a), 1);
    assert_int_equal(sw_stream_semaphore_value(s, c), 1);
    for (int i = 0; i < 15; i++)
        assert_int_equal(sw_stream_write(s, fr, 1), SW_OK);
    assert_int_equal(sw_stream_semaphore_value(s, a), 10);
    sw_stream_flush_semaphore(s, a);
    assert_int_equal(sw_stream_semaphore_value(s, a), 0);
    assert_int_equal(sw_stream_semaphore_value(s, b), 10);
    assert_int_equal(sw_stream_semaphore_value(s, 3), -1);
    sw_stream_close(s);
    sw_context_destroy(ctx);
}

static void test_recreate_stale(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_stream *s = make(ctx, "again", 2, 3, 3, 1, SW_STREAM_F32, 0, 0);
    sw_stream *r;
    assert_int_equal(sw_stream_open(ctx, dir(), "again", &r), SW_OK);
    assert_int_equal(sw_stream_stale(r), 0);
    float fr[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    assert_int_equal(sw_stream_write(s, fr, sizeof fr), SW_OK);
    sw_stream *s2 = make(ctx, "again", 2, 4, 4, 1, SW_STREAM_U8, 0, 0);
    assert_int_equal(sw_stream_stale(r), 1);
    assert_int_equal(sw_stream_stale(s2), 0);
    /* the old mapping still reads the old frame */
    float got[9];
    assert_int_equal(sw_stream_read(r, got, sizeof got, NULL), SW_OK);
    assert_memory_equal(got, fr, sizeof fr);
    sw_stream *r2;
    assert_int_equal(sw_stream_open(ctx, dir(), "again", &r2), SW_OK);
    sw_stream_info in;
    sw_stream_get_info(r2, &in);
    assert_int_equal(in.type, SW_STREAM_U8);
    assert_int_equal(in.cnt0, 0);
    assert_string_equal(sw_stream_path(r2), sw_test_path("again.im.shm"));
    sw_stream_close(r2);
    sw_stream_close(r);
    sw_stream_close(s2);
    sw_stream_close(s);
    assert_int_equal(sw_stream_remove(ctx, dir(), "again"), SW_OK);
    assert_int_equal(sw_stream_remove(ctx, dir(), "again"), SW_EIO);
    sw_context_destroy(ctx);
}

static void test_default_dir(void **state)
{
    (void)state;
    char buf[4096];
    setenv("MILK_SHM_DIR", dir(), 1);
    assert_int_equal(sw_stream_dir(NULL, NULL, buf, sizeof buf), SW_OK);
    assert_string_equal(buf, dir());
    sw_stream_params p;
    sw_stream_params_default(&p);
    p.name = "envdir";
    sw_stream *s;
    assert_int_equal(sw_stream_create(NULL, NULL, &p, &s), SW_OK);
    assert_string_equal(sw_stream_path(s), sw_test_path("envdir.im.shm"));
    sw_stream_close(s);
    /* a MILK_SHM_DIR that does not exist: ImageStreamIO's fallbacks (/milk/shm, else /tmp) */
    setenv("MILK_SHM_DIR", "/nonexistent/spotwave-test", 1);
    assert_int_equal(sw_stream_dir(NULL, NULL, buf, sizeof buf), SW_OK);
    assert_true(!strcmp(buf, "/milk/shm") || !strcmp(buf, "/tmp"));
    unsetenv("MILK_SHM_DIR");
    assert_int_equal(sw_stream_dir(NULL, "/some/dir//", buf, sizeof buf), SW_OK);
    assert_string_equal(buf, "/some/dir");
    assert_int_equal(sw_stream_dir(NULL, "/some/dir", buf, 5), SW_EINVAL);
}

/* ------------------------------------------------------------------ keywords */

static void test_keywords(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_stream *s = make(ctx, "kw", 2, 2, 2, 1, SW_STREAM_F32, 0, 3);
    assert_int_equal(sw_stream_keyword_count(s), 0);
    assert_int_equal(sw_stream_keyword_set_int(s, "FRAMES", -42, "a count"), SW_OK);
    assert_int_equal(sw_stream_keyword_set_double(s, "GAIN", 1.5e-3, NULL), SW_OK);
    assert_int_equal(sw_stream_keyword_set_string(s, "CAM", "ocam2k", "camera"), SW_OK);
    assert_int_equal(sw_stream_keyword_count(s), 3);
    assert_int_equal(sw_stream_keyword_set_int(s, "MORE", 1, NULL), SW_ERANGE);
    assert_non_null(strstr(sw_context_error(ctx), "keyword slots"));
    /* overwrite, with a new type */
    assert_int_equal(sw_stream_keyword_set_double(s, "FRAMES", 2.25, "now a double"), SW_OK);
    assert_int_equal(sw_stream_keyword_count(s), 3);
    sw_stream *r;
    assert_int_equal(sw_stream_open(ctx, dir(), "kw", &r), SW_OK);
    char name[17], sv[17], comment[81], type;
    int64_t iv;
    double dv;
    assert_int_equal(sw_stream_keyword_get(r, 0, name, &type, &iv, &dv, sv, comment), SW_OK);
    assert_string_equal(name, "FRAMES");
    assert_int_equal(type, 'D');
    assert_true(dv == 2.25);
    assert_int_equal(iv, 0);
    assert_string_equal(comment, "now a double");
    assert_int_equal(sw_stream_keyword_get(r, 1, name, &type, &iv, &dv, sv, comment), SW_OK);
    assert_true(dv == 1.5e-3);
    assert_string_equal(comment, "");
    assert_int_equal(sw_stream_keyword_get(r, 2, name, &type, &iv, &dv, sv, comment), SW_OK);
    assert_int_equal(type, 'S');
    assert_string_equal(sv, "ocam2k");
    assert_int_equal(sw_stream_keyword_get(r, 3, name, &type, &iv, &dv, sv, comment), SW_ERANGE);
    assert_int_equal(sw_stream_keyword_find(r, "CAM"), 2);
    assert_int_equal(sw_stream_keyword_find(r, "NOPE"), -1);
    assert_int_equal(sw_stream_keyword_set_int(s, "FRAMES", INT64_MIN, NULL), SW_OK);
    assert_int_equal(sw_stream_keyword_get(r, 0, NULL, &type, &iv, NULL, NULL, NULL), SW_OK);
    assert_int_equal(type, 'L');
    assert_true(iv == INT64_MIN);
    /* limits */
    assert_int_equal(sw_stream_keyword_set_int(s, "SIXTEEN_CHARS_XX", 1, NULL), SW_EINVAL);
    assert_int_equal(sw_stream_keyword_set_int(s, "", 1, NULL), SW_EINVAL);
    assert_int_equal(sw_stream_keyword_set_string(s, "CAM", "a string too long", NULL), SW_EINVAL);
    char longc[100];
    memset(longc, 'c', 99);
    longc[99] = '\0';
    assert_int_equal(sw_stream_keyword_set_int(s, "CAM", 1, longc), SW_EINVAL);
    sw_stream_close(r);
    sw_stream_close(s);
    sw_context_destroy(ctx);
}

/* ------------------------------------------------------------------ refusals */

static void test_bad_names_and_params(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_stream_params p;
    sw_stream *s = NULL;
    const char *bad_names[] = {"", "a/b", "../x", ".hidden", "-opt", "sp ace", "ü"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        sw_stream_params_default(&p);
        p.name = bad_names[i];
        assert_int_equal(sw_stream_create(ctx, dir(), &p, &s), SW_EINVAL);
        assert_null(s);
        assert_int_equal(sw_stream_open(ctx, dir(), bad_names[i], &s), SW_EINVAL);
    }
    char longname[100];
    memset(longname, 'n', 80);
    longname[80] = '\0';
    p.name = longname;
    assert_int_equal(sw_stream_create(ctx, dir(), &p, &s), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "at most 79"));
    longname[79] = '\0';
    assert_int_equal(sw_stream_create(ctx, dir(), &p, &s), SW_OK);
    sw_stream_close(s);
    p.name = NULL;
    assert_int_equal(sw_stream_create(ctx, dir(), &p, &s), SW_EINVAL);

    struct {
        int naxis;
        uint32_t w, h, d;
        int type, sem, kw, circ;
        const char *msg;
    } bad[] = {
        {0, 1, 1, 1, 9, 0, 0, 0, "naxis 0"},       {4, 1, 1, 1, 9, 0, 0, 0, "naxis 4"},
        {2, 0, 1, 1, 9, 0, 0, 0, "size[0]"},       {2, 1, 0, 1, 9, 0, 0, 0, "size[1]"},
        {3, 1, 1, 0, 9, 0, 0, 0, "size[2]"},       {2, 1, 1, 1, 0, 0, 0, 0, "data type"},
        {2, 1, 1, 1, 20, 0, 0, 0, "data type"},    {2, 1, 1, 1, 9, -1, 0, 0, "semaphores"},
        {2, 1, 1, 1, 9, 1001, 0, 0, "semaphores"}, {2, 1, 1, 1, 9, 0, -1, 0, "keyword"},
        {2, 1, 1, 1, 9, 0, 70000, 0, "keyword"},   {2, 1, 1, 1, 9, 0, 0, 2, "circular"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sw_stream_params_default(&p);
        p.name = "badp";
        p.naxis = bad[i].naxis;
        p.size[0] = bad[i].w;
        p.size[1] = bad[i].h;
        p.size[2] = bad[i].d;
        p.type = (sw_stream_type)bad[i].type;
        p.semaphores = bad[i].sem;
        p.keywords = bad[i].kw;
        p.circular = bad[i].circ;
        assert_int_equal(sw_stream_create(ctx, dir(), &p, &s), SW_EINVAL);
        if (!strstr(sw_context_error(ctx), bad[i].msg))
            fail_msg("case %zu: '%s' does not name %s", i, sw_context_error(ctx), bad[i].msg);
    }
    /* a directory that does not exist */
    sw_stream_params_default(&p);
    p.name = "nodir";
    assert_int_equal(sw_stream_create(ctx, "/nonexistent/spotwave", &p, &s), SW_EIO);
    assert_non_null(strstr(sw_context_error(ctx), "/nonexistent/spotwave/nodir.im.shm"));
    assert_int_equal(sw_stream_open(ctx, dir(), "missing", &s), SW_EIO);
    sw_context_destroy(ctx);
}

/* Patches bytes of a stream file. */
static void patch(const char *name, long off, const void *bytes, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.im.shm", dir(), name);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
    close(fd);
}

static void expect_refused(sw_context *ctx, const char *name, sw_status want, const char *words)
{
    sw_stream *s = (sw_stream *)1;
    assert_int_equal(sw_stream_open(ctx, dir(), name, &s), want);
    assert_null(s);
    if (!strstr(sw_context_error(ctx), words))
        fail_msg("%s: '%s' does not say '%s'", name, sw_context_error(ctx), words);
}

static void test_corrupted_headers(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    /* offsets of ImageStreamIO's IMAGE_METADATA (ImageStruct.h, 64-bit Linux) */
    const long OFF_NAXIS = 112, OFF_SIZE = 116, OFF_NELEMENT = 128, OFF_DATATYPE = 136,
               OFF_LOCATION = 240, OFF_SEM = 258, OFF_NBKW = 290;
    struct {
        long off;
        uint8_t bytes[8];
        size_t n;
        sw_status st;
        const char *words;
    } cases[] = {
        {0, {'1', '.', '0', '0'}, 4, SW_EFORMAT, "version '1.00'"},
        {0, {0}, 1, SW_EFORMAT, "version ''"},
        {OFF_NAXIS, {0}, 1, SW_EFORMAT, "naxis is 0"},
        {OFF_NAXIS, {4}, 1, SW_EFORMAT, "naxis is 4"},
        {OFF_SIZE, {9, 0, 0, 0}, 4, SW_EFORMAT, "nelement"},
        {OFF_NELEMENT, {99}, 1, SW_EFORMAT, "nelement 99"},
        {OFF_DATATYPE, {20}, 1, SW_EFORMAT, "datatype 20"},
        {OFF_DATATYPE, {0}, 1, SW_EFORMAT, "datatype 0"},
        {OFF_DATATYPE, {10}, 1, SW_EFORMAT, "imdatamemsize"},
        {OFF_LOCATION, {0}, 1, SW_EUNSUPPORTED, "GPU"},
        {OFF_SEM, {11, 0}, 2, SW_EFORMAT, "but the file has"},
        {OFF_NBKW, {5, 0}, 2, SW_EFORMAT, "5 keywords"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sw_stream *s = make(ctx, "bad", 2, 8, 6, 1, SW_STREAM_F32, 0, 2);
        sw_stream_close(s);
        patch("bad", cases[i].off, cases[i].bytes, cases[i].n);
        expect_refused(ctx, "bad", cases[i].st, cases[i].words);
    }
    /* size[1] changed with nelement and imdatamemsize to match: the file is then too short */
    sw_stream *s = make(ctx, "bad", 2, 8, 6, 1, SW_STREAM_F32, 0, 2);
    sw_stream_close(s);
    uint32_t h = 7;
    uint64_t ne = 56, mem = 224;
    patch("bad", OFF_SIZE + 4, &h, 4);
    patch("bad", OFF_NELEMENT, &ne, 8);
    patch("bad", 312, &mem, 8);
    expect_refused(ctx, "bad", SW_EFORMAT, "8 x 7 x 1 f32");
    /* sizes whose product overflows 64 bits (3-D, 2^31 x 2^31 x 4, nelement and imdatamemsize
     * set to the wrapped product 0): refused, not mapped with a wrapped slice size */
    s = make(ctx, "bad", 3, 8, 6, 2, SW_STREAM_U8, 0, 2);
    sw_stream_close(s);
    const uint32_t big[3] = {1u << 31, 1u << 31, 4};
    const uint64_t zero = 0;
    patch("bad", OFF_SIZE, big, sizeof big);
    patch("bad", OFF_NELEMENT, &zero, 8);
    patch("bad", 312, &zero, 8);
    expect_refused(ctx, "bad", SW_EFORMAT, "overflows");
    /* truncated files */
    char path[4096];
    snprintf(path, sizeof path, "%s/bad.im.shm", dir());
    s = make(ctx, "bad", 2, 8, 6, 1, SW_STREAM_F32, 0, 2);
    sw_stream_close(s);
    struct stat fs;
    stat(path, &fs);
    assert_int_equal(truncate(path, fs.st_size - 8), 0);
    expect_refused(ctx, "bad", SW_EFORMAT, "but the file has");
    assert_int_equal(truncate(path, 100), 0);
    expect_refused(ctx, "bad", SW_EFORMAT, "less than a header");
    assert_int_equal(truncate(path, 0), 0);
    expect_refused(ctx, "bad", SW_EFORMAT, "less than a header");
    /* a directory of that name */
    snprintf(path, sizeof path, "%s/dirstream.im.shm", dir());
    assert_int_equal(mkdir(path, 0700), 0);
    sw_stream *d = NULL;
    assert_int_not_equal(sw_stream_open(ctx, dir(), "dirstream", &d), SW_OK);
    assert_null(d);
    sw_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_round_trip_every_type),
        cmocka_unit_test(test_circular),
        cmocka_unit_test(test_child_reads_semaphore),
        cmocka_unit_test(test_child_reads_spin),
        cmocka_unit_test(test_parent_reads_child),
        cmocka_unit_test(test_consistent_under_load),
        cmocka_unit_test(test_timeout_and_stop),
        cmocka_unit_test(test_semaphore_claims),
        cmocka_unit_test(test_recreate_stale),
        cmocka_unit_test(test_default_dir),
        cmocka_unit_test(test_keywords),
        cmocka_unit_test(test_bad_names_and_params),
        cmocka_unit_test(test_corrupted_headers),
    };
    return cmocka_run_group_tests_name("stream", tests, NULL, NULL);
}

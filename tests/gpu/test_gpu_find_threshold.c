/*
 * The dispersion thresholds on the GPU (find_threshold_cuda.cu) against the CPU's
 * (find_threshold.c, itself checked against a direct reference in tests/unit/
 * test_find_threshold.c): every pixel decided the same and the device counts equal to the CPU's
 * valid and strong counts, for both algorithms through both window implementations (BRUTE,
 * TILED), on Poisson frames with planted spots, masks, overloaded pixels and values of 2^24 and
 * more, over kernels 1x1, 3x3, 2x5, 5x5 (and the largest, 15x15, 15x1, 1x15), gains 1, 1.7 and a
 * gain map, global thresholds 0 and 5, min_local 2 and 0, all four pixel types (f32 with
 * fractions, halves, negatives, NaN and Inf), device frames with pitched rows and with rows
 * only a few pixels longer than the width, an odd 1037 x 771 frame and a 4148-wide strip.
 * Skips (77) when no GPU is usable.
 */
#include "find_testutil.h"
#include "testutil.h"

#ifndef SW_HAVE_CUDA
int main(void)
{
    return 77; /* built without CUDA: nothing to compare */
}
#else

#include "find/find_internal.h"
#include "spotwave/rng.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_context *gpu;
static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    gpu = sw_test_cuda_context_or_skip();
    cpu = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(gpu);
    sw_context_destroy(cpu);
    return 0;
}

/* ------------------------------------------------------------------ random frames */

/* A host frame of type t (tight rows) with vals (f32: plus a fraction), and special pixels:
 * overloads, values of 2^24 and more, halves, negatives, NaN, Inf. Free with sw_image_free. */
static sw_image make_frame(sw_pixel_type t, int w, int h, const double *vals, trng *r)
{
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, w, h, t, &img), SW_OK);
    for (int y = 0; y < h; y++) {
        void *row = sw_image_row(&img, y);
        for (int x = 0; x < w; x++) {
            double v = vals[(size_t)y * w + x];
            switch (t) {
            case SW_PIX_U8: ((uint8_t *)row)[x] = (uint8_t)(v > 255.0 ? 255.0 : v); break;
            case SW_PIX_U16: ((uint16_t *)row)[x] = (uint16_t)(v > 65535.0 ? 65535.0 : v); break;
            case SW_PIX_U32: ((uint32_t *)row)[x] = (uint32_t)v; break;
            default: ((float *)row)[x] = (float)(v + 1.4 * (trng_u01(r) - 0.5)); break;
            }
        }
    }
    const int nspecial = 8, count = 4 * nspecial + w * h / 200;
    for (int k = 0; k < count; k++) {
        int x = trng_int(r, w), y = trng_int(r, h);
        void *row = sw_image_row(&img, y);
        int kind = k % nspecial;
        switch (t) {
        case SW_PIX_U8: ((uint8_t *)row)[x] = kind < 4 ? 255 : 254; break;
        case SW_PIX_U16: {
            static const uint16_t s16[8] = {65535, 65534, 65533, 60000, 65535, 40000, 1000, 65534};
            ((uint16_t *)row)[x] = s16[kind];
            break;
        }
        case SW_PIX_U32: {
            static const uint32_t s32[8] = {4294967295u, 4294967294u, 4294967293u, 16777216u,
                                            16777215u,   30000000u,   16777217u,   100000u};
            ((uint32_t *)row)[x] = s32[kind];
            break;
        }
        default: {
            const float f32[8] = {NAN, INFINITY, -INFINITY, -3.25f, 2.5f, 0.5f, 2e7f, 16777215.0f};
            ((float *)row)[x] = f32[kind];
            break;
        }
        }
    }
    return img;
}

/* The host frame on the device: pitched (sw_image_alloc_device) when pad < 0, otherwise in one
 * cudaMalloc with rows `pad` pixels longer than the width. Free with free_device_frame. */
static sw_image device_frame(const sw_image *host, int pad)
{
    sw_image d;
    if (pad < 0) {
        assert_int_equal(sw_image_alloc_device(gpu, host->width, host->height, host->type, &d),
                         SW_OK);
    } else {
        size_t ps = sw_pixel_size(host->type), stride = (size_t)(host->width + pad) * ps;
        void *p = NULL;
        assert_int_equal(cudaMalloc(&p, stride * (size_t)host->height), cudaSuccess);
        assert_int_equal(cudaMemset(p, 0xA5, stride * (size_t)host->height), cudaSuccess);
        /* The memset is on the legacy default stream, which the context's non-blocking stream
         * (the copy below) does not wait for: without this the padding bytes could land on the
         * copied pixels (seen once under a parallel ctest: one pixel decided differently). */
        assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
        assert_int_equal(
            sw_image_wrap(p, host->width, host->height, stride, host->type, SW_MEM_DEVICE, &d),
            SW_OK);
    }
    assert_int_equal(sw_image_copy(gpu, host, &d), SW_OK);
    assert_int_equal(sw_context_synchronize(gpu), SW_OK);
    return d;
}

static void free_device_frame(sw_image *d)
{
    if (d->owned)
        sw_image_free(d);
    else
        cudaFree(d->data);
}

/* ------------------------------------------------------------------ comparison */

typedef struct cfg {
    sw_find_algorithm algorithm;
    int kx, ky, min_local;
    double thr, gain, overload;
    const float *gain_map;
    const uint8_t *mask;
} cfg;

static sw_find_plan *make_plan(sw_context *ctx, const sw_image *f, const cfg *c)
{
    sw_find_params p;
    sw_find_params_default(&p, f->width, f->height, f->type);
    p.algorithm = c->algorithm;
    p.kernel_x = c->kx;
    p.kernel_y = c->ky;
    p.min_local = c->min_local;
    p.global_threshold = c->thr;
    p.gain = c->gain;
    p.gain_map = c->gain_map;
    p.mask = c->mask;
    p.overload = c->overload;
    sw_find_plan *plan = NULL;
    if (sw_find_create(ctx, &p, &plan) != SW_OK)
        fail_msg("sw_find_create: %s", sw_context_error(ctx));
    return plan;
}

/* CPU on the host frame, GPU (BRUTE and TILED) on the device frame: every pixel and both
 * counts. Returns the number of strong pixels. */
static int64_t compare(const sw_image *host, const sw_image *dev, const cfg *c, const char *what)
{
    const int w = host->width, h = host->height;
    const size_t n = (size_t)w * h;
    uint8_t *want = malloc(n), *got = malloc(n);
    assert_true(want && got);

    sw_find_plan *cp = make_plan(cpu, host, c);
    int64_t want_valid = -1;
    if (sw_find_threshold_cpu(cp, host, want, &want_valid) != SW_OK)
        fail_msg("sw_find_threshold_cpu: %s", sw_context_error(cpu));
    sw_find_destroy(cp);
    int64_t want_strong = 0;
    for (size_t i = 0; i < n; i++)
        want_strong += want[i];

    sw_find_plan *gp = make_plan(gpu, host, c);
    uint8_t *d_strong = NULL;
    unsigned long long *d_counts = NULL;
    assert_int_equal(cudaMalloc((void **)&d_strong, n), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&d_counts, 2 * sizeof(unsigned long long)), cudaSuccess);
    const sw_find_window wins[2] = {SW_FIND_WINDOW_BRUTE, SW_FIND_WINDOW_TILED};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(cudaMemset(d_strong, 0x77, n), cudaSuccess);
        assert_int_equal(cudaMemset(d_counts, 0, 2 * sizeof(unsigned long long)), cudaSuccess);
        /* The memsets ran on the legacy default stream, which the context's non-blocking stream
         * does not wait for: finish them first. */
        assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
        if (sw_find_threshold_gpu(gp, dev, d_strong, wins[k], d_counts, sw_context_stream(gpu)) !=
            SW_OK)
            fail_msg("sw_find_threshold_gpu: %s", sw_context_error(gpu));
        assert_int_equal(sw_context_synchronize(gpu), SW_OK);
        unsigned long long counts[2];
        assert_int_equal(cudaMemcpy(got, d_strong, n, cudaMemcpyDeviceToHost), cudaSuccess);
        assert_int_equal(cudaMemcpy(counts, d_counts, sizeof(counts), cudaMemcpyDeviceToHost),
                         cudaSuccess);
        for (size_t i = 0; i < n; i++)
            if (got[i] != want[i]) {
                /* The pixel and its neighbours as read on the host, for the diagnosis. */
                int px = (int)(i % (size_t)w), py = (int)(i / (size_t)w);
                for (int yy = py - 1; yy <= py + 1; yy++) {
                    if (yy < 0 || yy >= h)
                        continue;
                    printf("  row %d:", yy);
                    for (int xx = px - 2; xx <= px + 2; xx++)
                        if (xx >= 0 && xx < w)
                            printf(" %.9g", sw_image_get(host, xx, yy));
                    printf("\n");
                }
                uint8_t *again = malloc(n);
                if (again && cudaMemcpy(again, d_strong, n, cudaMemcpyDeviceToHost) == cudaSuccess)
                    printf("  GPU value read again: %d\n", again[i]);
                free(again);
                fail_msg("%s (%s, %d x %d): %s %s, kernel %d x %d, gain %g%s, threshold %g, "
                         "min_local %d, overload %g%s: pixel (%d, %d) is %d on the GPU, %d on "
                         "the CPU",
                         what, wins[k] == SW_FIND_WINDOW_BRUTE ? "brute" : "tiled", w, h,
                         sw_find_algorithm_string(c->algorithm), sw_pixel_type_string(host->type),
                         c->kx, c->ky, c->gain, c->gain_map ? " (map)" : "", c->thr, c->min_local,
                         c->overload, c->mask ? ", masked" : "", (int)(i % (size_t)w),
                         (int)(i / (size_t)w), got[i], want[i]);
            }
        assert_int_equal((int64_t)counts[0], want_valid);
        assert_int_equal((int64_t)counts[1], want_strong);
    }
    cudaFree(d_strong);
    cudaFree(d_counts);
    sw_find_destroy(gp);
    free(want);
    free(got);
    return want_strong;
}

static uint8_t *random_mask(int w, int h, trng *r)
{
    uint8_t *m = malloc((size_t)w * h);
    assert_non_null(m);
    for (size_t i = 0; i < (size_t)w * h; i++)
        m[i] = trng_u01(r) > 0.03;
    for (int y = h / 3; y < h / 3 + 4 && y < h; y++)
        for (int x = 0; x < 5 && x < w; x++)
            m[(size_t)y * w + x] = 0;
    return m;
}

static float *random_gain_map(int w, int h, trng *r)
{
    float *g = malloc((size_t)w * h * sizeof(float));
    assert_non_null(g);
    for (size_t i = 0; i < (size_t)w * h; i++)
        g[i] = (float)(0.8 + 1.4 * trng_u01(r));
    return g;
}

/* ------------------------------------------------------------------ tests */

/* The parameter grid on small frames of every type. */
static void test_grid(void **state)
{
    (void)state;
    const int w = 83, h = 57;
    const int kernels[4][2] = {{1, 1}, {3, 3}, {2, 5}, {5, 5}};
    const sw_pixel_type types[4] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_U32, SW_PIX_F32};
    trng r = trng_make(4321);
    double *vals = malloc((size_t)w * h * sizeof(double));
    assert_non_null(vals);
    uint8_t *mask = random_mask(w, h, &r);
    float *gmap = random_gain_map(w, h, &r);
    int64_t strong_total[2] = {0, 0};
    for (int t = 0; t < 4; t++) {
        scene(w, h, t == 0 ? 1.5 : 4.0, 12, &r, vals);
        sw_image f = make_frame(types[t], w, h, vals, &r);
        sw_image d = device_frame(&f, t % 2 ? -1 : 1 + t);
        for (int alg = 0; alg < 2; alg++)
            for (int k = 0; k < 4; k++)
                for (int gi = 0; gi < 3; gi++)
                    for (int ti = 0; ti < 2; ti++)
                        for (int mi = 0; mi < 2; mi++) {
                            cfg c = {alg ? SW_FIND_DISPERSION_EXTENDED : SW_FIND_DISPERSION,
                                     kernels[k][0],
                                     kernels[k][1],
                                     mi ? 0 : 2,
                                     ti ? 5.0 : 0.0,
                                     gi == 1 ? 1.7 : 1.0,
                                     0.0,
                                     NULL,
                                     NULL};
                            if (gi == 2)
                                c.gain_map = gmap;
                            if ((k + gi + ti) % 2)
                                c.mask = mask;
                            if ((k + mi) % 3 == 2 && types[t] != SW_PIX_U8)
                                c.overload = 400.0;
                            strong_total[alg] += compare(&f, &d, &c, "grid");
                        }
        free_device_frame(&d);
        sw_image_free(&f);
    }
    assert_true(strong_total[0] > 1000);
    assert_true(strong_total[1] > 1000);
    free(vals);
    free(mask);
    free(gmap);
}

/* The largest kernels (the tiled kernel's biggest shared-memory blocks) and very flat ones. */
static void test_large_kernels(void **state)
{
    (void)state;
    const int w = 203, h = 149;
    const int kernels[3][2] = {{15, 15}, {15, 1}, {1, 15}};
    trng r = trng_make(77);
    double *vals = malloc((size_t)w * h * sizeof(double));
    assert_non_null(vals);
    uint8_t *mask = random_mask(w, h, &r);
    scene(w, h, 6.0, 30, &r, vals);
    sw_image f = make_frame(SW_PIX_U16, w, h, vals, &r);
    sw_image d = device_frame(&f, 3);
    for (int alg = 0; alg < 2; alg++)
        for (int k = 0; k < 3; k++)
            for (int mi = 0; mi < 2; mi++) {
                cfg c = {alg ? SW_FIND_DISPERSION_EXTENDED : SW_FIND_DISPERSION,
                         kernels[k][0],
                         kernels[k][1],
                         mi ? 0 : 2,
                         0.0,
                         1.0,
                         0.0,
                         NULL,
                         mi ? NULL : mask};
                compare(&f, &d, &c, "large kernels");
            }
    free_device_frame(&d);
    sw_image_free(&f);
    free(vals);
    free(mask);
}

/* An odd-sized frame (tiles cut at both edges) and a full-width strip of a 4148-wide detector. */
static void test_big_frames(void **state)
{
    (void)state;
    const int sizes[2][2] = {{1037, 771}, {4148, 96}};
    const sw_pixel_type types[2] = {SW_PIX_U16, SW_PIX_F32};
    trng r = trng_make(2024);
    for (int s = 0; s < 2; s++) {
        const int w = sizes[s][0], h = sizes[s][1];
        double *vals = malloc((size_t)w * h * sizeof(double));
        assert_non_null(vals);
        uint8_t *mask = random_mask(w, h, &r);
        float *gmap = random_gain_map(w, h, &r);
        scene(w, h, 3.0, w * h / 2000, &r, vals);
        for (int t = 0; t < 2; t++) {
            sw_image f = make_frame(types[t], w, h, vals, &r);
            sw_image d = device_frame(&f, t ? 5 : -1);
            int64_t total = 0;
            for (int alg = 0; alg < 2; alg++)
                for (int k = 0; k < 2; k++) {
                    cfg c = {alg ? SW_FIND_DISPERSION_EXTENDED : SW_FIND_DISPERSION,
                             k ? 5 : 3,
                             k ? 2 : 3,
                             2,
                             0.0,
                             1.0,
                             0.0,
                             k ? gmap : NULL,
                             k ? mask : NULL};
                    total += compare(&f, &d, &c, "big frame");
                }
            assert_true(total > 100);
            free_device_frame(&d);
            sw_image_free(&f);
        }
        free(vals);
        free(mask);
        free(gmap);
    }
}

/* Frames the GPU threshold refuses: host memory, another size. */
static void test_bad_frames(void **state)
{
    (void)state;
    const int w = 40, h = 30;
    trng r = trng_make(3);
    double *vals = calloc((size_t)w * h, sizeof(double));
    assert_non_null(vals);
    sw_image f = make_frame(SW_PIX_U16, w, h, vals, &r);
    cfg c = {SW_FIND_DISPERSION_EXTENDED, 3, 3, 2, 0.0, 1.0, 0.0, NULL, NULL};
    sw_find_plan *gp = make_plan(gpu, &f, &c);
    uint8_t *d_strong = NULL;
    assert_int_equal(cudaMalloc((void **)&d_strong, (size_t)w * h), cudaSuccess);
    assert_int_equal(
        sw_find_threshold_gpu(gp, &f, d_strong, SW_FIND_WINDOW_TILED, NULL, sw_context_stream(gpu)),
        SW_EINVAL);
    sw_image d = device_frame(&f, 0);
    sw_image small = d;
    small.width = w - 1;
    assert_int_equal(sw_find_threshold_gpu(gp, &small, d_strong, SW_FIND_WINDOW_BRUTE, NULL,
                                           sw_context_stream(gpu)),
                     SW_EINVAL);
    /* and a good one without counts */
    assert_int_equal(
        sw_find_threshold_gpu(gp, &d, d_strong, SW_FIND_WINDOW_AUTO, NULL, sw_context_stream(gpu)),
        SW_OK);
    assert_int_equal(sw_context_synchronize(gpu), SW_OK);
    free_device_frame(&d);
    cudaFree(d_strong);
    sw_find_destroy(gp);
    sw_image_free(&f);
    free(vals);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_large_kernels),
        cmocka_unit_test(test_big_frames),
        cmocka_unit_test(test_bad_frames),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#endif /* SW_HAVE_CUDA */

/*
 * CPU-vs-GPU equivalence of the core's kernel-backed operations on random data:
 * type conversion (every pair of types, with clipping, strided views), statistics (every type,
 * with NaN/Inf), the RNG fill, and host <-> device copies. Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#include <math.h>
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

static const sw_pixel_type types[] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_U32, SW_PIX_F32};

static void test_device_info(void **state)
{
    (void)state;
    sw_device_info info;
    assert_int_equal(sw_context_device_info(gpu, &info), SW_OK);
    assert_true(strlen(info.name) > 0);
    assert_true(info.total_memory > ((size_t)1 << 30));
    assert_true(info.free_memory <= info.total_memory);
    assert_true(info.cc_major >= 5);
    assert_true(info.multiprocessors > 0);
    assert_int_equal(sw_context_backend(gpu), SW_BACKEND_CUDA);
    assert_non_null(sw_context_stream(gpu));
    print_message("device: %s, cc %d.%d, %d SMs, %.1f GiB\n", info.name, info.cc_major,
                  info.cc_minor, info.multiprocessors, info.total_memory / 1073741824.0);
}

/* Host -> device -> host through strided views returns the same pixels. */
static void test_copy_roundtrip(void **state)
{
    (void)state;
    for (int t = 0; t < 4; t++) {
        sw_image big, view, d, back;
        assert_int_equal(sw_image_alloc(gpu, 1000, 300, types[t], &big), SW_OK);
        assert_int_equal(big.memory, SW_MEM_PINNED);
        assert_int_equal(sw_image_roi(gpu, &big, 13, 7, 777, 211, &view), SW_OK);
        sw_test_fill_random(&view, 100 + t);
        assert_int_equal(sw_image_alloc_device(gpu, 777, 211, types[t], &d), SW_OK);
        assert_int_equal(d.memory, SW_MEM_DEVICE);
        assert_int_equal(sw_image_copy(gpu, &view, &d), SW_OK);
        assert_int_equal(sw_image_alloc(cpu, 777, 211, types[t], &back), SW_OK);
        assert_int_equal(sw_image_copy(gpu, &d, &back), SW_OK);
        assert_true(sw_image_equal(&view, &back));
        /* A device image cannot be used by a CPU context. */
        assert_int_equal(sw_image_copy(cpu, &d, &back), SW_ENODEV);
        sw_image_free(&big);
        sw_image_free(&d);
        sw_image_free(&back);
    }
}

/* Every (source, destination) type pair, scale/offset chosen so that some pixels clip: the GPU
 * result is bit-identical to the CPU's and the clipped counts agree. */
static void test_convert_matches_cpu(void **state)
{
    (void)state;
    const int32_t w = 1531, h = 419; /* odd sizes: partial blocks and rows */
    for (int s = 0; s < 4; s++) {
        for (int t = 0; t < 4; t++) {
            sw_image src, dref, dgpu, dsrc, ddst;
            assert_int_equal(sw_image_alloc(cpu, w, h, types[s], &src), SW_OK);
            sw_test_fill_random(&src, 1000 + 4 * s + t);
            assert_int_equal(sw_image_alloc(cpu, w, h, types[t], &dref), SW_OK);
            assert_int_equal(sw_image_alloc(cpu, w, h, types[t], &dgpu), SW_OK);
            double scale = types[t] == SW_PIX_F32 ? 0.37 : 1.3, offset = -20.25;
            size_t clip_cpu = 0, clip_gpu = 0;
            assert_int_equal(sw_image_convert(cpu, &src, &dref, scale, offset, &clip_cpu), SW_OK);
            /* device -> device */
            assert_int_equal(sw_image_alloc_device(gpu, w, h, types[s], &dsrc), SW_OK);
            assert_int_equal(sw_image_alloc_device(gpu, w, h, types[t], &ddst), SW_OK);
            assert_int_equal(sw_image_copy(gpu, &src, &dsrc), SW_OK);
            assert_int_equal(sw_image_convert(gpu, &dsrc, &ddst, scale, offset, &clip_gpu), SW_OK);
            assert_int_equal(sw_image_copy(gpu, &ddst, &dgpu), SW_OK);
            if (!sw_image_equal(&dref, &dgpu))
                fail_msg("convert %s -> %s differs between CPU and GPU",
                         sw_pixel_type_string(types[s]), sw_pixel_type_string(types[t]));
            assert_int_equal(clip_cpu, clip_gpu);
            if (types[t] != SW_PIX_F32)
                assert_true(clip_cpu > 0); /* the test exercises clipping */
            /* host -> host staged through the GPU */
            memset(dgpu.data, 0xA5, dgpu.stride * (size_t)h);
            assert_int_equal(sw_image_convert(gpu, &src, &dgpu, scale, offset, NULL), SW_OK);
            assert_true(sw_image_equal(&dref, &dgpu));
            sw_image_free(&src);
            sw_image_free(&dref);
            sw_image_free(&dgpu);
            sw_image_free(&dsrc);
            sw_image_free(&ddst);
        }
    }
}

static void test_convert_nan_refused_on_gpu(void **state)
{
    (void)state;
    sw_image h, d, out;
    assert_int_equal(sw_image_alloc(cpu, 300, 200, SW_PIX_F32, &h), SW_OK);
    sw_test_fill_random(&h, 3);
    ((float *)sw_image_row(&h, 150))[299] = NAN;
    assert_int_equal(sw_image_alloc_device(gpu, 300, 200, SW_PIX_F32, &d), SW_OK);
    assert_int_equal(sw_image_alloc_device(gpu, 300, 200, SW_PIX_U16, &out), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &h, &d), SW_OK);
    assert_int_equal(sw_image_convert(gpu, &d, &out, 1.0, 0.0, NULL), SW_ERANGE);
    assert_non_null(strstr(sw_context_error(gpu), "1 pixels are NaN"));
    /* dst untouched: still the zeros it was allocated with */
    sw_image_stats st;
    assert_int_equal(sw_image_stats_compute(gpu, &out, &st), SW_OK);
    assert_true(st.max == 0.0 && st.min == 0.0);
    /* mixing host and device images is refused */
    assert_int_equal(sw_image_convert(gpu, &h, &out, 1.0, 0.0, NULL), SW_EINVAL);
    sw_image_free(&h);
    sw_image_free(&d);
    sw_image_free(&out);
}

static void assert_stats_close(const sw_image_stats *a, const sw_image_stats *b)
{
    assert_int_equal(a->n_finite, b->n_finite);
    assert_int_equal(a->n_nan, b->n_nan);
    assert_int_equal(a->n_inf, b->n_inf);
    assert_true(a->min == b->min);
    assert_true(a->max == b->max);
    double tol_mean = 1e-12 * (fabs(a->mean) + a->stddev) + 1e-300;
    if (fabs(a->mean - b->mean) > tol_mean || fabs(a->stddev - b->stddev) > 1e-10 * a->stddev)
        fail_msg("stats differ: mean %.17g vs %.17g, stddev %.17g vs %.17g", a->mean, b->mean,
                 a->stddev, b->stddev);
}

static void test_stats_match_cpu(void **state)
{
    (void)state;
    const int32_t sizes[][2] = {{1, 1}, {7, 3}, {4096, 1}, {1, 3000}, {2049, 1537}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        for (int t = 0; t < 4; t++) {
            sw_image h;
            assert_int_equal(sw_image_alloc(cpu, sizes[k][0], sizes[k][1], types[t], &h), SW_OK);
            sw_test_fill_random(&h, 77 + k);
            if (types[t] == SW_PIX_F32 && h.width * h.height > 10) {
                ((float *)sw_image_row(&h, 0))[1] = NAN;
                ((float *)sw_image_row(&h, h.height - 1))[h.width - 1] = -INFINITY;
            }
            sw_image_stats sc, sg, sd;
            assert_int_equal(sw_image_stats_compute(cpu, &h, &sc), SW_OK);
            assert_int_equal(sw_image_stats_compute(gpu, &h, &sg), SW_OK); /* staged */
            assert_stats_close(&sc, &sg);
            sw_image d;
            assert_int_equal(sw_image_alloc_device(gpu, h.width, h.height, types[t], &d), SW_OK);
            assert_int_equal(sw_image_copy(gpu, &h, &d), SW_OK);
            assert_int_equal(sw_image_stats_compute(gpu, &d, &sd), SW_OK);
            assert_stats_close(&sc, &sd);
            sw_image_free(&h);
            sw_image_free(&d);
        }
    }
}

/* The same seed gives the same image on the CPU and the GPU. */
static void test_fill_random_matches_cpu(void **state)
{
    (void)state;
    const int32_t w = 1023, h = 511;
    for (int dist = 0; dist < 2; dist++) {
        sw_image c, g, d;
        assert_int_equal(sw_image_alloc(cpu, w, h, SW_PIX_F32, &c), SW_OK);
        assert_int_equal(sw_image_alloc(cpu, w, h, SW_PIX_F32, &g), SW_OK);
        assert_int_equal(sw_image_alloc_device(gpu, w, h, SW_PIX_F32, &d), SW_OK);
        double a = dist ? 50.0 : -3.0, b = dist ? 4.0 : 9.0;
        assert_int_equal(sw_image_fill_random(cpu, &c, 2026, 5, (sw_random_dist)dist, a, b), SW_OK);
        assert_int_equal(sw_image_fill_random(gpu, &d, 2026, 5, (sw_random_dist)dist, a, b), SW_OK);
        assert_int_equal(sw_image_copy(gpu, &d, &g), SW_OK);
        if (dist == SW_RANDOM_UNIFORM) {
            assert_true(sw_image_equal(&c, &g));
        } else {
            /* log/cos may differ in the last bit of the double; after rounding to float the
             * values agree to a float ulp or so. */
            double worst = 0;
            for (int32_t y = 0; y < h; y++)
                for (int32_t x = 0; x < w; x++) {
                    double e = fabs(sw_image_get(&c, x, y) - sw_image_get(&g, x, y));
                    if (e > worst)
                        worst = e;
                }
            print_message("normal fill: largest CPU-GPU difference %.3g\n", worst);
            assert_true(worst <= 1e-5 * 100.0);
        }
        sw_image_free(&c);
        sw_image_free(&g);
        sw_image_free(&d);
    }
}

/* In place on the device (equal pixel sizes, same memory) gives the CPU's result; a copy between
 * overlapping device views is refused; uniform draws stay below b on the GPU too. */
static void test_in_place_and_overlap(void **state)
{
    (void)state;
    const int32_t w = 777, h = 333;
    sw_image hsrc, ref, back, d;
    assert_int_equal(sw_image_alloc(cpu, w, h, SW_PIX_U32, &hsrc), SW_OK);
    sw_test_fill_random(&hsrc, 4242);
    assert_int_equal(sw_image_alloc(cpu, w, h, SW_PIX_F32, &ref), SW_OK);
    assert_int_equal(sw_image_convert(cpu, &hsrc, &ref, 1e-3, 5.0, NULL), SW_OK);
    assert_int_equal(sw_image_alloc_device(gpu, w, h, SW_PIX_U32, &d), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &hsrc, &d), SW_OK);
    sw_image dview = d;
    dview.owned = 0;
    dview.type = SW_PIX_F32;
    assert_int_equal(sw_image_convert(gpu, &d, &dview, 1e-3, 5.0, NULL), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, w, h, SW_PIX_F32, &back), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &dview, &back), SW_OK);
    assert_true(sw_image_equal(&ref, &back));

    sw_image a, b;
    assert_int_equal(sw_image_roi(gpu, &dview, 0, 0, 100, 100, &a), SW_OK);
    assert_int_equal(sw_image_roi(gpu, &dview, 1, 1, 100, 100, &b), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &a, &b), SW_EINVAL);

    sw_image u;
    assert_int_equal(sw_image_alloc_device(gpu, 4096, 1, SW_PIX_F32, &u), SW_OK);
    assert_int_equal(sw_image_fill_random(gpu, &u, 4359, 0, SW_RANDOM_UNIFORM, 0.0, 1.0), SW_OK);
    sw_image_stats st;
    assert_int_equal(sw_image_stats_compute(gpu, &u, &st), SW_OK);
    assert_true(st.max < 1.0 && st.max > 0.99999 && st.min >= 0.0);
    sw_image_free(&u);
    sw_image_free(&hsrc);
    sw_image_free(&ref);
    sw_image_free(&back);
    sw_image_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_info),
        cmocka_unit_test(test_copy_roundtrip),
        cmocka_unit_test(test_convert_matches_cpu),
        cmocka_unit_test(test_convert_nan_refused_on_gpu),
        cmocka_unit_test(test_stats_match_cpu),
        cmocka_unit_test(test_fill_random_matches_cpu),
        cmocka_unit_test(test_in_place_and_overlap),
    };
    return cmocka_run_group_tests_name("gpu_image", tests, setup, teardown);
}

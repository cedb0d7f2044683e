/*
 * The band-wise real-time chain's checks that need no GPU (src/loop/rtc_band.c): the defaults,
 * every parameter's range (SW_EINVAL), the plans it does not run (SW_EUNSUPPORTED: PI, a
 * fraction threshold, another centroid method, a CPU plan), a NULL chain everywhere. The runs
 * themselves are tests/gpu/test_gpu_loop_rtc_band.c's.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NL    4
#define PITCH 8

static sw_context *cpu;
static float cm[(NL + 1) * (NL + 1) * 2 * NL * NL];

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(1);
    for (size_t i = 0; i < sizeof cm / sizeof cm[0]; i++)
        cm[i] = (float)((i % 7) - 3) * 0.01f;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(cpu);
    return 0;
}

static sw_rtc *make_rtc(sw_controller_kind kind, sw_threshold_kind tk, sw_centroid_method m)
{
    sw_rtc_params p;
    sw_rtc_params_default(&p);
    sw_centroid_params_default(&p.centroid);
    sw_sh_geometry_default(&p.centroid.geometry);
    p.centroid.geometry.nx = p.centroid.geometry.ny = NL;
    p.centroid.geometry.pitch_px = PITCH;
    p.centroid.geometry.x0 = p.centroid.geometry.y0 = 0.0;
    p.centroid.width = p.centroid.height = NL * PITCH;
    p.centroid.type = SW_PIX_U16;
    p.centroid.threshold_mode = SW_THRESHOLD_SUBTRACT;
    p.centroid.threshold_kind = tk;
    p.centroid.threshold = tk == SW_THRESHOLD_FRACTION ? 0.2 : 5.0;
    p.centroid.method = m;
    p.centroid.fwhm_px = 3.0; /* (WCOG's weight) */
    p.recon = SW_RTC_MVM;
    p.nact = (NL + 1) * (NL + 1);
    p.cm = cm;
    sw_controller_params_default(&p.controller);
    p.controller.kind = kind;
    p.controller.nact = p.nact;
    sw_rtc *r = NULL;
    if (sw_rtc_create(cpu, &p, &r) != SW_OK)
        fail_msg("sw_rtc_create: %s", sw_context_error(cpu));
    return r;
}

static void test_defaults(void **state)
{
    (void)state;
    sw_rtc_band_params p;
    memset(&p, 0xff, sizeof p);
    sw_rtc_band_params_default(&p);
    assert_int_equal(p.bands, 4);
    assert_int_equal(p.depth, 4);
    assert_true(p.band_timeout_us == 2000.0);
    assert_true(p.idle_timeout_us == 1e7);
    assert_int_equal(p.slopes, 0);
    assert_int_equal(p.trace, 0);
    sw_rtc_band_params_default(NULL); /* ignored */
    /* the accessors on no chain */
    assert_true(sw_rtc_band_done(NULL) == -1);
    sw_rtc_band_trace t;
    assert_int_equal(sw_rtc_band_trace_get(NULL, 1, &t), SW_EINVAL);
    int64_t off = 0, rtt = 0;
    assert_int_equal(sw_rtc_band_clock(NULL, &off, &rtt), SW_EINVAL);
}

static void expect(sw_rtc *r, const sw_rtc_band_params *p, sw_status want)
{
    sw_rtc_band *b = (sw_rtc_band *)(uintptr_t)1;
    assert_int_equal(sw_rtc_band_create(r, p, &b), want);
    assert_null(b);
}

/* SW_EUNSUPPORTED, and for the reason named by `why` (the message holds it). */
static void expect_why(sw_rtc *r, const sw_rtc_band_params *p, const char *why)
{
    expect(r, p, SW_EUNSUPPORTED);
    const char *msg = sw_context_error(cpu);
    if (!strstr(msg, why))
        fail_msg("expected \"%s\" in \"%s\"", why, msg);
}

static void test_ranges(void **state)
{
    (void)state;
    sw_rtc *r = make_rtc(SW_CTRL_INTEGRATOR, SW_THRESHOLD_ABSOLUTE, SW_CENTROID_METHOD_COG);
    sw_rtc_band_params p;
#define BAD(field, value)                                                                          \
    do {                                                                                           \
        sw_rtc_band_params_default(&p);                                                            \
        p.field = value;                                                                           \
        expect(r, &p, SW_EINVAL);                                                                  \
    } while (0)
    BAD(bands, 0);
    BAD(bands, NL + 1); /* more bands than lenslet rows */
    BAD(bands, -3);
    BAD(depth, 1);
    BAD(depth, 65);
    BAD(band_timeout_us, 0.5);
    BAD(band_timeout_us, NAN);
    BAD(band_timeout_us, 2e7);
    BAD(idle_timeout_us, 1000.0); /* below the band's 2000 */
    BAD(idle_timeout_us, INFINITY);
    BAD(idle_timeout_us, NAN);
    BAD(slopes, 2);
    BAD(trace, -1);
    BAD(trace, (1 << 20) + 1);
#undef BAD
    /* valid parameters on a CPU plan: the backend is what is refused */
    sw_rtc_band_params_default(&p);
    p.bands = NL;
    p.depth = 2;
    expect_why(r, &p, "CUDA");
    p.bands = 1;
    p.depth = 64;
    p.slopes = 1;
    p.band_timeout_us = 1.0;
    p.idle_timeout_us = 1e9;
    p.trace = 1 << 20;
    expect_why(r, &p, "CUDA");
    /* NULL arguments */
    sw_rtc_band *b = NULL;
    assert_int_equal(sw_rtc_band_create(NULL, &p, &b), SW_EINVAL);
    assert_int_equal(sw_rtc_band_create(r, NULL, &b), SW_EINVAL);
    assert_int_equal(sw_rtc_band_create(r, &p, NULL), SW_EINVAL);
    /* the plan still runs whole frames (nothing was attached) */
    sw_image img = sw_test_random_image(NL * PITCH, NL * PITCH, SW_PIX_U16, 5);
    float u[(NL + 1) * (NL + 1)];
    assert_int_equal(sw_rtc_run(r, &img, u, NULL), SW_OK);
    sw_image_free(&img);
    sw_rtc_destroy(r);
}

static void test_unsupported_plans(void **state)
{
    (void)state;
    sw_rtc_band_params p;
    sw_rtc_band_params_default(&p);
    sw_rtc *r = make_rtc(SW_CTRL_PI, SW_THRESHOLD_ABSOLUTE, SW_CENTROID_METHOD_COG);
    expect_why(r, &p, "integrator");
    sw_rtc_destroy(r);
    r = make_rtc(SW_CTRL_LEAKY, SW_THRESHOLD_FRACTION, SW_CENTROID_METHOD_COG);
    expect_why(r, &p, "centre of gravity");
    sw_rtc_destroy(r);
    r = make_rtc(SW_CTRL_INTEGRATOR, SW_THRESHOLD_ABSOLUTE, SW_CENTROID_METHOD_WCOG);
    expect_why(r, &p, "centre of gravity");
    sw_rtc_destroy(r);
    /* and the parameters are checked before the plan's kind */
    r = make_rtc(SW_CTRL_PI, SW_THRESHOLD_ABSOLUTE, SW_CENTROID_METHOD_COG);
    p.depth = 0;
    expect(r, &p, SW_EINVAL);
    sw_rtc_destroy(r);
}

static void test_null_chain(void **state)
{
    (void)state;
    void *d = NULL;
    size_t stride = 0;
    int32_t row0 = 0, rows = 0;
    float u[4];
    assert_int_equal(sw_rtc_band_rows(NULL, 0, &row0, &rows), SW_EINVAL);
    assert_int_equal(sw_rtc_band_buffer(NULL, 1, 0, &d, &stride), SW_EINVAL);
    assert_int_equal(sw_rtc_band_publish(NULL, 1, 0), SW_EINVAL);
    assert_int_equal(sw_rtc_band_wait(NULL, 1, 10.0, u, NULL), SW_EINVAL);
    sw_rtc_band_stats s;
    memset(&s, 0x55, sizeof s);
    sw_rtc_band_get_stats(NULL, &s);
    assert_true(s.done == 0 && s.out_of_order == 0 && s.overruns == 0 && s.timeouts == 0);
    assert_true(s.missed_frame == 0);
    assert_int_equal(s.missed_band, -1);
    assert_int_equal(s.blocks, 0);
    sw_rtc_band_get_stats(NULL, NULL);
    sw_rtc_band_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_unsupported_plans),
        cmocka_unit_test(test_null_chain),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

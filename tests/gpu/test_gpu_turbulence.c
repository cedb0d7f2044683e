/*
 * FFT phase screens on the GPU (turbulence_cuda.cu, cuFFT) against the CPU's (FFTW): the same
 * coefficients from the counter-based RNG, so the same screen to within 1e-9 relative RMS in
 * double precision, for several sizes, subharmonic levels and outer scales; deterministic run
 * after run; bad input refused alike; the infinite screen (CPU work on any context) identical on
 * a GPU context. Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#include "spotwave/turbulence.h"

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

static sw_wavefront screen(sw_context *ctx, const sw_turbulence *t, int32_t n, double dx,
                           uint64_t seed, uint64_t index)
{
    sw_wavefront w;
    if (sw_phase_screen(ctx, t, n, dx, seed, index, &w) != SW_OK)
        fail_msg("sw_phase_screen (%s): %s", sw_backend_string(sw_context_backend(ctx)),
                 sw_context_error(ctx));
    return w;
}

static void gpu_equals_cpu(void **state)
{
    (void)state;
    static const struct {
        int32_t n;
        int32_t sub;
        double L0;
        double dx;
        uint64_t seed, index;
    } cases[] = {
        {8, 0, INFINITY, 0.01, 1, 0},   {64, 3, 25.0, 0.01, 2, 7},
        {128, 8, INFINITY, 0.02, 3, 1}, {256, 3, 2.0, 0.005, 4, 4000000000u},
        {1024, 3, 25.0, 0.01, 5, 2},    {2048, 5, 100.0, 0.002, 6, 3},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sw_turbulence t;
        sw_turbulence_default(&t);
        t.L0_m = cases[c].L0;
        t.subharmonics = cases[c].sub;
        const int32_t n = cases[c].n;
        sw_wavefront g = screen(gpu, &t, n, cases[c].dx, cases[c].seed, cases[c].index);
        sw_wavefront h = screen(cpu, &t, n, cases[c].dx, cases[c].seed, cases[c].index);
        assert_int_equal(g.nu, n);
        assert_int_equal(g.nv, n);
        assert_true(g.spacing_um == h.spacing_um && g.u0_um == h.u0_um && g.v0_um == h.v0_um);
        double d2 = 0, s2 = 0, mean = 0;
        for (size_t i = 0; i < (size_t)n * n; i++) {
            d2 += (g.opd_um[i] - h.opd_um[i]) * (g.opd_um[i] - h.opd_um[i]);
            s2 += h.opd_um[i] * h.opd_um[i];
            mean += g.opd_um[i];
        }
        const double rel = sqrt(d2 / s2), rms = sqrt(s2 / ((double)n * n));
        printf("n = %d, %d subharmonic levels, L0 = %g m: GPU vs CPU relative RMS %.2e (RMS %.3g "
               "um)\n",
               (int)n, (int)cases[c].sub, cases[c].L0, rel, rms);
        assert_true(rms > 1e-3);
        assert_true(rel < 1e-9);
        assert_near(mean / ((double)n * n), 0.0, 1e-11 * rms); /* piston removed on the GPU too */
        sw_wavefront_free(&g);
        sw_wavefront_free(&h);
    }
}

static void gpu_deterministic_and_seeded(void **state)
{
    (void)state;
    sw_turbulence t;
    sw_turbulence_default(&t);
    sw_wavefront a = screen(gpu, &t, 256, 0.01, 9, 1);
    sw_wavefront b = screen(gpu, &t, 256, 0.01, 9, 1);
    sw_wavefront c = screen(gpu, &t, 256, 0.01, 9, 2);
    assert_memory_equal(a.opd_um, b.opd_um, 256 * 256 * sizeof(double));
    assert_memory_not_equal(a.opd_um, c.opd_um, 256 * 256 * sizeof(double));
    sw_wavefront_free(&a);
    sw_wavefront_free(&b);
    sw_wavefront_free(&c);
}

static void gpu_bad_input_and_infinite(void **state)
{
    (void)state;
    sw_turbulence t;
    sw_turbulence_default(&t);
    sw_wavefront w;
    memset(&w, 0x5A, sizeof w);
    assert_int_equal(sw_phase_screen(gpu, &t, 127, 0.01, 1, 0, &w), SW_EINVAL);
    assert_null(w.opd_um);
    t.r0_m = -1;
    assert_int_equal(sw_phase_screen(gpu, &t, 128, 0.01, 1, 0, &w), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(gpu), "r0"));
    sw_turbulence_default(&t);
    /* the infinite screen computes on the CPU whatever the context: identical windows */
    sw_infinite_screen *a = NULL, *b = NULL;
    assert_int_equal(sw_infinite_screen_create(gpu, &t, 64, 0.02, 3, &a), SW_OK);
    assert_int_equal(sw_infinite_screen_create(cpu, &t, 64, 0.02, 3, &b), SW_OK);
    assert_int_equal(sw_infinite_screen_advance(a, 1.5), SW_OK);
    assert_int_equal(sw_infinite_screen_advance(b, 1.5), SW_OK);
    sw_wavefront wa = {0, 0, 0, 0, 0, NULL}, wb = {0, 0, 0, 0, 0, NULL};
    assert_int_equal(sw_infinite_screen_window(a, &wa), SW_OK);
    assert_int_equal(sw_infinite_screen_window(b, &wb), SW_OK);
    assert_memory_equal(wa.opd_um, wb.opd_um, 64 * 64 * sizeof(double));
    sw_wavefront_free(&wa);
    sw_wavefront_free(&wb);
    sw_infinite_screen_destroy(a);
    sw_infinite_screen_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpu_equals_cpu),
        cmocka_unit_test(gpu_deterministic_and_seeded),
        cmocka_unit_test(gpu_bad_input_and_infinite),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

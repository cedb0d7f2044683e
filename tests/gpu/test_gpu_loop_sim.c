/*
 * The closed-loop simulator on the GPU (loopsim.c, loopsim_cuda.cu) against the CPU's: with the
 * same parameters both run the same atmosphere (the screen is made on the host either way) and
 * must give the same frames: turbulence RMS to 1e-12 (the same host screen), residual RMS to
 * TOL relative, short- and long-exposure Strehl and Marechal to TOL absolute, the applied
 * commands and the residual maps to TOL of their RMS, TOL = 3e-3.
 *
 * Tolerance. The GPU renders the SH frame in float (cuFFT C2C per lenslet, against FFTW double
 * on the CPU), sums centroids in float, reconstructs with cuBLAS (another order of float
 * additions) and forms the science PSF with a float FFT: each stage agrees with the CPU's to
 * ~1e-5 relative or better (their own GPU tests), i.e. centroids to a few 1e-6 px. The MVM path
 * also measures its interaction matrix through the float renderer: entries of ~1 px/um from
 * differences over 2 x 0.05 um get ~2e-5 relative errors, which the control matrix (condition
 * <= 30) can amplify to ~6e-4 in the worst direction; the commands, and through them the
 * residual, inherit that (a few 1e-4 expected). The loop is stable (gain 0.5), so differences do
 * not grow. 3e-3 leaves a margin of ~5-10 over that and is far below what a wrong index, sign or
 * normalisation gives (the residual or Strehl changes by 10 % or more). Noisy runs are compared
 * for closure only: the Poisson draws use the same random numbers, but a mean that differs in the
 * 7th digit can move a count by one.
 *
 * Also prints (no assertion: not a timed test) the frame rate of the seed 002 setting (32 x 32,
 * DIFFRACTION), and the host wall time of the step's phases (sw_loop_phase_us), for the
 * benchmark notes.
 */
#include "testutil.h"

#ifndef SW_HAVE_CUDA
int main(void)
{
    return 77; /* built without CUDA: nothing to compare */
}
#else

#include "loop/loop_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOL 3e-3 /* see above */

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

static sw_loop *make(sw_context *ctx, const sw_loop_params *p)
{
    sw_loop *l = NULL;
    if (sw_loop_create(ctx, p, &l) != SW_OK)
        fail_msg("sw_loop_create (%s): %s", sw_backend_string(sw_context_backend(ctx)),
                 sw_context_error(ctx));
    return l;
}

static void step(sw_context *ctx, sw_loop *l, sw_loop_frame *f)
{
    if (sw_loop_step(l, f) != SW_OK)
        fail_msg("sw_loop_step (%s): %s", sw_backend_string(sw_context_backend(ctx)),
                 sw_context_error(ctx));
}

static void compare(const sw_loop_params *p, int frames)
{
    sw_loop *lc = make(cpu, p), *lg = make(gpu, p);
    assert_int_equal(sw_loop_modes(lc), sw_loop_modes(lg));
    int32_t nact = 0;
    sw_loop_applied(lc, &nact);
    for (int k = 0; k < frames; k++) {
        sw_loop_frame fc, fg;
        step(cpu, lc, &fc);
        step(gpu, lg, &fg);
        assert_int_equal(fc.frame, fg.frame);
        assert_near(fg.turbulence_nm, fc.turbulence_nm, 1e-12 * fc.turbulence_nm);
        if (fabs(fg.residual_nm - fc.residual_nm) > TOL * fc.residual_nm ||
            fabs(fg.strehl - fc.strehl) > TOL)
            fail_msg("%s frame %d: residual %.6f / %.6f nm, Strehl %.6f / %.6f (GPU / CPU)",
                     sw_loop_recon_string(p->recon), k + 1, fg.residual_nm, fc.residual_nm,
                     fg.strehl, fc.strehl);
        assert_near(fg.marechal, fc.marechal, TOL);
        const float *uc = sw_loop_applied(lc, NULL), *ug = sw_loop_applied(lg, NULL);
        double d2 = 0.0, c2 = 0.0;
        for (int32_t a = 0; a < nact; a++) {
            d2 += ((double)ug[a] - uc[a]) * ((double)ug[a] - uc[a]);
            c2 += (double)uc[a] * uc[a];
        }
        if (!(sqrt(d2) <= TOL * sqrt(c2) + 1e-9))
            fail_msg("%s frame %d: commands differ by %g of their RMS",
                     sw_loop_recon_string(p->recon), k + 1, sqrt(d2 / c2));
    }
    const double sc = sw_loop_long_strehl(lc), sg = sw_loop_long_strehl(lg);
    if (frames > p->warmup) {
        assert_false(isnan(sc));
        assert_near(sg, sc, TOL);
    } else {
        assert_true(isnan(sc) && isnan(sg));
    }
    int32_t side = 0;
    assert_int_equal(sw_loop_maps(lg, &side, NULL, NULL, NULL), SW_OK);
    const size_t n = (size_t)side * side;
    float *mc = malloc(n * sizeof(float)), *mg = malloc(n * sizeof(float));
    assert_non_null(mc);
    assert_non_null(mg);
    assert_int_equal(sw_loop_maps(lc, NULL, NULL, NULL, mc), SW_OK);
    assert_int_equal(sw_loop_maps(lg, NULL, NULL, NULL, mg), SW_OK);
    double d2 = 0.0, r2 = 0.0;
    for (size_t s = 0; s < n; s++) {
        assert_int_equal(isfinite(mc[s]) != 0, isfinite(mg[s]) != 0);
        if (isfinite(mc[s])) {
            d2 += ((double)mg[s] - mc[s]) * ((double)mg[s] - mc[s]);
            r2 += (double)mc[s] * mc[s];
        }
    }
    assert_true(sqrt(d2) <= TOL * sqrt(r2));
    double fc = 0.0, fgv = 0.0;
    assert_int_equal(sw_loop_fitting_error(lc, &fc), SW_OK);
    assert_int_equal(sw_loop_fitting_error(lg, &fgv), SW_OK);
    assert_near(fgv, fc, 1e-9 * fc); /* host arithmetic on the same screen */
    free(mc);
    free(mg);
    sw_loop_destroy(lc);
    sw_loop_destroy(lg);
}

static void small(sw_loop_params *p)
{
    sw_loop_params_default(p);
    p->nx = 8;
    p->diameter_m = 3.0;
    p->partitions = 2;
    p->warmup = 4;
    p->wind_m_s = 10.0;
}

static void test_small_systems(void **state)
{
    (void)state;
    const sw_loop_recon recons[] = {SW_LOOP_MVM, SW_LOOP_DSABRE_LOCAL, SW_LOOP_DSABRE_GLOBAL,
                                    SW_LOOP_SABRE_GLOBAL};
    for (int i = 0; i < 4; i++) {
        sw_loop_params p;
        small(&p);
        p.recon = recons[i];
        compare(&p, 12);
    }
    /* an annulus, the GEOMETRIC sensor, delay 1 */
    sw_loop_params p;
    small(&p);
    p.square_pupil = 0;
    p.obscuration = 0.3;
    p.model = SW_SH_GEOMETRIC;
    p.recon = SW_LOOP_MVM;
    p.delay = 1;
    compare(&p, 10);
    /* the distributed projection on the pupil only: a matrix per partition (the strided-batched
     * product on the GPU), on the annulus where the partitions' matrices differ */
    p.recon = SW_LOOP_DSABRE_LOCAL_PUPIL;
    p.delay = 0;
    compare(&p, 10);
    /* partitions of 2 x 2 lenslets on the annulus (the DIFFRACTION sensor): both distributed
     * projections have modes of negative gain, filtered on both backends (the GPU chain's filter
     * then has more than the 2 unseen modes); each backend finds them through its own sensor */
    p.model = SW_SH_DIFFRACTION;
    p.partitions = 4;
    p.dm.coupling = 0.4;
    const sw_loop_recon local[2] = {SW_LOOP_DSABRE_LOCAL, SW_LOOP_DSABRE_LOCAL_PUPIL};
    for (int i = 0; i < 2; i++) {
        p.recon = local[i];
        sw_loop *lc = make(cpu, &p), *lg = make(gpu, &p);
        double mc = NAN, mg = NAN;
        const int32_t nc = sw_loop_negative_modes(lc, &mc), ng = sw_loop_negative_modes(lg, &mg);
        sw_loop_destroy(lc);
        sw_loop_destroy(lg);
        if (nc < 1 || ng != nc || !(fabs(mg - mc) < 1e-3))
            fail_msg("%s: negative modes %d / %d, smallest gain %g / %g (GPU / CPU)",
                     sw_loop_recon_string(p.recon), (int)ng, (int)nc, mg, mc);
        compare(&p, 10);
    }
}

/* The seed 002 setting itself (32 x 32, DIFFRACTION, D-SABRE 4 x 4, distributed projection). */
static void test_seed_setting(void **state)
{
    (void)state;
    sw_loop_params p;
    sw_loop_params_default(&p);
    p.warmup = 2;
    compare(&p, 5);
}

/* Noisy: the GPU loop closes (magnitude 8, shot and read noise on the device). */
static void test_noisy_closes(void **state)
{
    (void)state;
    sw_loop_params p;
    small(&p);
    p.magnitude = 8.0;
    p.recon = SW_LOOP_DSABRE_LOCAL;
    sw_loop *l = make(gpu, &p);
    double turb = 0.0, res = 0.0;
    for (int k = 0; k < 25; k++) {
        sw_loop_frame f;
        step(gpu, l, &f);
        if (k >= 15) {
            turb += f.turbulence_nm;
            res += f.residual_nm;
        }
    }
    assert_true(res < 0.5 * turb);
    assert_true(sw_loop_long_strehl(l) > 0.3);
    sw_loop_destroy(l);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Information only: frames per second of the seed setting on this GPU. */
static void test_report_rate(void **state)
{
    (void)state;
    const sw_loop_recon recons[] = {SW_LOOP_DSABRE_LOCAL, SW_LOOP_MVM};
    for (int i = 0; i < 2; i++) {
        sw_loop_params p;
        sw_loop_params_default(&p);
        p.recon = recons[i];
        double t0 = now_s();
        sw_loop *l = make(gpu, &p);
        const double create = now_s() - t0;
        sw_loop_frame f;
        for (int k = 0; k < 20; k++)
            step(gpu, l, &f);
        sw_loop_phase_us(l, 1, NULL);
        const int n = 1000;
        t0 = now_s();
        for (int k = 0; k < n; k++)
            step(gpu, l, &f);
        const double dt = now_s() - t0;
        printf("loop 32x32 diffraction %s: %.0f frames/s (%.1f us/frame; create %.2f s; residual "
               "%.1f nm, Strehl %.3f)\n",
               sw_loop_recon_string(p.recon), n / dt, 1e6 * dt / n, create, f.residual_nm,
               f.strehl);
        double us[SW_LOOP_PHASES];
        sw_loop_phase_us(l, 1, us);
        for (int ph = 0; ph < SW_LOOP_PHASES; ph++)
            printf("    %7.1f us  %s\n", us[ph], sw_loop_phase_name(ph));
        sw_loop_destroy(l);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_systems),
        cmocka_unit_test(test_seed_setting),
        cmocka_unit_test(test_noisy_closes),
        cmocka_unit_test(test_report_rate),
    };
    /* SW_TEST_FILTER=test_small_systems runs one test (under compute-sanitizer, where the seed
     * setting's 32 x 32 loops take longer than a device call) */
    const char *filter = getenv("SW_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, setup, teardown);
}
#endif

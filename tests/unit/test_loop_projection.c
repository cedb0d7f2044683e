/*
 * The two DM projections of seed 002 section 4.A meet where they must: the distributed projection
 * (Eq. 14-16, inside the D-SABRE run, sw_sabre_set_projection with the window projector of
 * loop.h) with one 1 x 1 partition is the global projection (Eq. 13, sw_projector of the same
 * lattice and the same Fried actuators) of the same spline. (With more partitions they differ,
 * most at the array's edge and in the mirror's waffle mode, which Gaussian influence functions of
 * low coupling barely show at the fitting points: seed 002 compares them in closed loop, Fig. 11,
 * and so does bench_loop --fig11.)
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_context *ctx;

static int setup(void **state)
{
    (void)state;
    ctx = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(ctx);
    return 0;
}

/* Slopes (x then y, lattice units per pitch 1) of a smooth wavefront: the exact lenslet-mean
 * gradient is not needed, the point-gradient at the lenslet centre serves as data. */
static void smooth_slopes(int32_t n, float *s)
{
    for (int32_t iy = 0; iy < n; iy++)
        for (int32_t ix = 0; ix < n; ix++) {
            const double x = (ix - 0.5 * (n - 1)) / n, y = (iy - 0.5 * (n - 1)) / n;
            /* W = 3 x^2 - 2 x y + sin(2 x + y) (lattice units: d/dix = (1/n) d/dx) */
            s[iy * n + ix] = (float)((6.0 * x - 2.0 * y + 2.0 * cos(2.0 * x + y)) / n);
            s[n * n + iy * n + ix] = (float)((-2.0 * x + cos(2.0 * x + y)) / n);
        }
}

/* D-SABRE with k partitions and the distributed projection -> commands (nx+1)^2; the same plan's
 * assembled values -> the global projection -> commands. */
static void run_both(int32_t n, int32_t k, double coupling, float *dist, float *glob)
{
    sw_dm_params dm;
    sw_dm_params_default(&dm);
    dm.nx = dm.ny = n;
    dm.coupling = coupling;

    sw_sabre_params sp;
    sw_sabre_params_default(&sp);
    sp.nx = sp.ny = n;
    sp.partitions = k;
    sp.extend_eq17 = 1;
    sw_sabre *plan = NULL;
    assert_int_equal(sw_sabre_create(ctx, &sp, &plan), SW_OK);
    sw_sabre_info info;
    sw_sabre_get_info(plan, &info);
    /* Eq. 17: k m > n, so every lenslet corner is a square centre of the extended lattice */
    assert_true(info.k * info.m > n);

    sw_projector_params wp;
    sw_projector_params_window(&wp, &dm, info.window);
    sw_projector *local = NULL;
    assert_int_equal(sw_projector_create(ctx, &wp, &local), SW_OK);
    int32_t rows = 0, cols = 0;
    const float *P = sw_projector_matrix(local, &rows, &cols);
    assert_int_equal(rows, info.window * info.window);
    assert_int_equal(cols, info.local_values);
    assert_int_equal(sw_sabre_set_projection(plan, P, rows, cols), SW_OK);

    float *slopes = malloc((size_t)2 * n * n * sizeof *slopes);
    const int64_t nv = sw_sabre_lattice_values(&info.lattice);
    float *values = malloc((size_t)nv * sizeof *values);
    smooth_slopes(n, slopes);
    assert_int_equal(sw_sabre_run(plan, slopes, SW_MEM_HOST, values, dist), SW_OK);

    sw_projector_params gp;
    sw_projector_params_global(&gp, &dm, &info.lattice);
    gp.samples = wp.samples;
    gp.regularisation = wp.regularisation;
    sw_projector *global = NULL;
    assert_int_equal(sw_projector_create(ctx, &gp, &global), SW_OK);
    assert_int_equal(sw_projector_run(global, values, SW_MEM_HOST, glob), SW_OK);

    sw_projector_destroy(global);
    sw_projector_destroy(local);
    sw_sabre_destroy(plan);
    free(values);
    free(slopes);
}

static double rms_diff(const float *a, const float *b, int32_t n, double *rms_b)
{
    double d = 0.0, s = 0.0;
    for (int32_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    *rms_b = sqrt(s / n);
    return sqrt(d / n);
}

/* One partition: the window is the whole extended lattice, its w x w actuators are exactly the
 * (n+1)^2 Fried corners (Eq. 17 with k = 1 gives S = n + 1), the fitting points are the same, so
 * Eq. 14-15 is Eq. 13: the commands agree to float rounding. */
static void test_one_partition_is_global(void **state)
{
    (void)state;
    const int32_t n = 8, na = (n + 1) * (n + 1);
    const double couplings[] = {0.2, 0.5};
    for (int c = 0; c < 2; c++) {
        float dist[81], glob[81];
        run_both(n, 1, couplings[c], dist, glob);
        double rms = 0.0;
        const double d = rms_diff(dist, glob, na, &rms);
        assert_true(rms > 1e-3); /* a real wavefront, not zeros */
        if (!(d <= 1e-5 * rms))
            fail_msg("coupling %.1f: distributed (1x1) differs from global by %.3g (rms %.3g)",
                     couplings[c], d, rms);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_partition_is_global),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

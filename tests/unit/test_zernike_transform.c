/*
 * Zernike pupil transforms and refraction (zernike_fit.h): rescaling, the left/right mirror
 * image and the Thibos et al. 2004 power-vector refraction.
 */
#include "testutil.h"

#include <math.h>
#include <string.h>

static const double SQ3 = 1.7320508075688772, SQ6 = 2.4494897427831781;

/* W(x, y) of OSA coefficients. */
static double wave(const double *c, int32_t count, double x, double y)
{
    double w = 0.0;
    for (int32_t j = 0; j < count; j++) {
        int n, m;
        assert_int_equal(sw_zernike_osa_nm(j, &n, &m), SW_OK);
        w += c[j] * sw_zernike_eval(n, m, x, y);
    }
    return w;
}

static void test_defocus(void **state)
{
    (void)state;
    double c[6] = {0, 0, 0, 0, 1.0, 0}; /* c(2,0) = 1 um over a 6 mm pupil */
    sw_refraction rx;
    assert_int_equal(sw_zernike_refraction(NULL, c, 6, 6.0, 0, 0.0, &rx), SW_OK);
    assert_near(rx.M, -4.0 * SQ3 / 9.0, 1e-12);
    assert_near(rx.M, -0.770, 5e-4); /* the figure */
    assert_near(rx.J0, 0.0, 1e-15);
    assert_near(rx.J45, 0.0, 1e-15);
    assert_near(rx.sphere_d, rx.M, 1e-12);
    assert_near(rx.cyl_d, 0.0, 1e-15);
    /* the same wavefront over a 4 mm pupil is 2.25 times the power */
    assert_int_equal(sw_zernike_refraction(NULL, c, 6, 4.0, 0, 0.0, &rx), SW_OK);
    assert_near(rx.M, -4.0 * SQ3 / 4.0, 1e-12);
}

static void test_astigmatism_signs(void **state)
{
    (void)state;
    const double r2 = 9.0; /* 6 mm */
    struct {
        int j;
        double c, axis;
    } cases[] = {
        {5, 1.0, 90.0},  /* c(2,2) > 0: J0 < 0, minus cylinder at 90 */
        {5, -1.0, 0.0},  /* c(2,2) < 0: J0 > 0, axis 0 */
        {3, 1.0, 135.0}, /* c(2,-2) > 0: J45 < 0, axis 135 */
        {3, -1.0, 45.0}, /* c(2,-2) < 0: J45 > 0, axis 45 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double c[6] = {0};
        c[cases[i].j] = cases[i].c;
        sw_refraction rx;
        assert_int_equal(sw_zernike_refraction(NULL, c, 6, 6.0, 0, 0.0, &rx), SW_OK);
        const double J = 2.0 * SQ6 / r2; /* |J0| or |J45| */
        assert_near(rx.cyl_d, -2.0 * J, 1e-12);
        assert_near(rx.sphere_d, J, 1e-12); /* M = 0: sphere = -cyl / 2 */
        assert_near(rx.axis_deg, cases[i].axis, 1e-9);
        assert_near(rx.M, 0.0, 1e-15);
    }
}

/* sw_eye_rx_to_zernike (sim_eye.h) and sw_zernike_refraction are inverses (minus cylinder). */
static void test_round_trip_rx(void **state)
{
    (void)state;
    const double sph[] = {-6.25, -1.0, 0.0, 0.5, 3.0};
    const double cyl[] = {0.0, -0.5, -2.25};
    const double axes[] = {0.0, 12.0, 45.0, 90.0, 133.0, 179.0};
    for (size_t a = 0; a < 5; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t k = 0; k < 6; k++) {
                sw_eye_rx in = {sph[a], cyl[b], axes[k]};
                double z[6] = {0};
                sw_eye_rx_to_zernike(&in, 5.0, z + 3);
                sw_refraction rx;
                assert_int_equal(sw_zernike_refraction(NULL, z, 6, 5.0, 0, 0.0, &rx), SW_OK);
                assert_near(rx.sphere_d, in.sphere_d, 1e-10);
                assert_near(rx.cyl_d, in.cyl_d, 1e-10);
                if (in.cyl_d != 0.0)
                    assert_near(rx.axis_deg, in.axis_deg, 1e-8);
            }
    /* plus cylinder in, the same lens in minus-cylinder form out */
    sw_eye_rx plus = {-2.0, 1.5, 30.0};
    double z[6] = {0};
    sw_eye_rx_to_zernike(&plus, 6.0, z + 3);
    sw_refraction rx;
    assert_int_equal(sw_zernike_refraction(NULL, z, 6, 6.0, 0, 0.0, &rx), SW_OK);
    assert_near(rx.sphere_d, -0.5, 1e-10);
    assert_near(rx.cyl_d, -1.5, 1e-10);
    assert_near(rx.axis_deg, 120.0, 1e-8);
}

static void test_vertex_and_higher_orders(void **state)
{
    (void)state;
    /* -5 D sphere at the cornea is -5 / (1 - 0.012 * 5)... at 12 mm: P / (1 + v P). */
    sw_eye_rx in = {-5.0, -2.0, 10.0};
    double z[15] = {0};
    sw_eye_rx_to_zernike(&in, 6.0, z + 3);
    sw_refraction rx;
    assert_int_equal(sw_zernike_refraction(NULL, z, 15, 6.0, 0, 12.0, &rx), SW_OK);
    const double p1 = -5.0 / (1.0 - 0.06), p2 = -7.0 / (1.0 - 0.084);
    assert_near(rx.sphere_d, p1, 1e-10);
    assert_near(rx.cyl_d, p2 - p1, 1e-10);
    assert_near(rx.axis_deg, 10.0, 1e-8);
    /* the power vector stays at the cornea */
    assert_near(rx.M, -6.0, 1e-10);
    /* spherical aberration c(4,0) counts only with higher_orders: 12 sqrt5 c40 / r^2 */
    double c[15] = {0};
    c[12] = 0.1;
    assert_int_equal(sw_zernike_refraction(NULL, c, 15, 6.0, 0, 0.0, &rx), SW_OK);
    assert_near(rx.M, 0.0, 1e-15);
    assert_int_equal(sw_zernike_refraction(NULL, c, 15, 6.0, 1, 0.0, &rx), SW_OK);
    assert_near(rx.M, 12.0 * sqrt(5.0) * 0.1 / 9.0, 1e-12);
    /* c(4,2) into J0 */
    memset(c, 0, sizeof c);
    c[13] = 0.05;
    assert_int_equal(sw_zernike_refraction(NULL, c, 15, 6.0, 1, 0.0, &rx), SW_OK);
    assert_near(rx.J0, 6.0 * sqrt(10.0) * 0.05 / 9.0, 1e-12);
}

static void test_mirror(void **state)
{
    (void)state;
    const int32_t count = sw_zernike_count(8);
    double c[45], m[45], back[45];
    for (int32_t j = 0; j < count; j++)
        c[j] = sin(1.3 * j + 0.2);
    sw_zernike_mirror_x(c, count, m);
    for (int i = 0; i < 20; i++) {
        const double r = sqrt((i + 0.5) / 20.0), t = 2.1 * i;
        const double x = r * cos(t), y = r * sin(t);
        assert_near(wave(m, count, x, y), wave(c, count, -x, y), 1e-12);
    }
    sw_zernike_mirror_x(m, count, back);
    for (int32_t j = 0; j < count; j++)
        assert_near(back[j], c[j], 0.0);
    memcpy(back, c, sizeof c);
    sw_zernike_mirror_x(back, count, back); /* in place */
    for (int32_t j = 0; j < count; j++)
        assert_near(back[j], m[j], 0.0);
}

/* Rescaling to a smaller pupil equals the original wavefront on the smaller disc, and refitting
 * that restricted wavefront gives the same coefficients. */
static void test_rescale(void **state)
{
    (void)state;
    const int32_t count = sw_zernike_count(6);
    double c[28], r[28];
    for (int32_t j = 0; j < count; j++)
        c[j] = cos(0.7 * j) * (j > 0);
    const double from = 6.0, to = 4.5, s = to / from;
    assert_int_equal(sw_zernike_rescale(NULL, c, count, from, to, r), SW_OK);
    for (int i = 0; i < 40; i++) {
        const double rho = sqrt((i + 0.5) / 40.0), t = 1.7 * i;
        const double x = rho * cos(t), y = rho * sin(t);
        assert_near(wave(r, count, x, y), wave(c, count, s * x, s * y), 1e-11);
    }
    /* the mean of W over the small disc is its piston */
    double mean = 0.0;
    const int nr = 200, na = 64;
    for (int i = 0; i < nr; i++)
        for (int k = 0; k < na; k++) {
            const double rho = sqrt((i + 0.5) / nr), t = 2.0 * 3.14159265358979 * (k + 0.5) / na;
            mean += wave(c, count, s * rho * cos(t), s * rho * sin(t));
        }
    mean /= (double)(nr * na);
    assert_near(r[0], mean, 1e-4);
    /* errors */
    assert_int_equal(sw_zernike_rescale(NULL, c, count, 4.0, 5.0, r), SW_EINVAL);
    assert_int_equal(sw_zernike_rescale(NULL, c, count, 4.0, 0.0, r), SW_EINVAL);
    assert_int_equal(sw_zernike_rescale(NULL, c, 0, 4.0, 3.0, r), SW_EINVAL);
}

static void test_bad_input(void **state)
{
    (void)state;
    double c[6] = {0, 0, 0, 0, 1.0, 0};
    sw_refraction rx;
    memset(&rx, 0x5a, sizeof rx);
    sw_refraction before = rx;
    assert_int_equal(sw_zernike_refraction(NULL, c, 5, 6.0, 0, 0.0, &rx), SW_EINVAL);
    assert_true(strlen(sw_context_error(NULL)) > 0);
    assert_int_equal(sw_zernike_refraction(NULL, c, 6, 0.0, 0, 0.0, &rx), SW_EINVAL);
    assert_int_equal(sw_zernike_refraction(NULL, c, 6, NAN, 0, 0.0, &rx), SW_EINVAL);
    assert_int_equal(sw_zernike_refraction(NULL, c, 6, 6.0, 0, -1.0, &rx), SW_EINVAL);
    c[4] = NAN;
    assert_int_equal(sw_zernike_refraction(NULL, c, 6, 6.0, 0, 0.0, &rx), SW_EINVAL);
    assert_int_equal(sw_zernike_refraction(NULL, NULL, 6, 6.0, 0, 0.0, &rx), SW_EINVAL);
    assert_memory_equal(&rx, &before, sizeof rx);
}

/* The Chromatic Eye (Thibos et al. 1992): Rx = p - 0.63346 / (lambda - 0.21410). */
static void test_lca(void **state)
{
    (void)state;
    const double q = 0.63346, c = 0.21410;
    const double d = sw_eye_lca_d(0.78, 0.555);
    assert_near(d, q / (0.78 - c) - q / (0.555 - c), 1e-15);
    /* an infrared measurement reads about 0.74 D more hyperopic than the eye is in green light */
    assert_near(d, -0.7388, 5e-4);
    assert_true(d < -0.6 && d > -0.8);
    assert_near(sw_eye_lca_d(0.555, 0.78), -d, 1e-15);
    assert_near(sw_eye_lca_d(0.6, 0.6), 0.0, 0.0);
    /* chains: 0.78 -> 0.65 -> 0.555 */
    assert_near(sw_eye_lca_d(0.78, 0.65) + sw_eye_lca_d(0.65, 0.555), d, 1e-15);
    /* about 2 D across the visible spectrum, blue more myopic */
    const double vis = sw_eye_lca_d(0.7, 0.4);
    assert_true(vis < -1.8 && vis > -2.6);
    assert_true(isnan(sw_eye_lca_d(0.2, 0.555)) && isnan(sw_eye_lca_d(0.78, NAN)));
    /* the shift goes into M and the sphere, not into the astigmatism */
    double z[6] = {0, 0, 0, 0.2, 0.8, -0.3};
    sw_refraction a, b;
    assert_int_equal(sw_zernike_refraction(NULL, z, 6, 5.0, 0, 0.0, &a), SW_OK);
    assert_int_equal(sw_zernike_refraction_shifted(NULL, z, 6, 5.0, 0, 0.0, d, &b), SW_OK);
    assert_near(b.M, a.M + d, 1e-12);
    assert_near(b.J0, a.J0, 0);
    assert_near(b.J45, a.J45, 0);
    assert_near(b.cyl_d, a.cyl_d, 1e-12);
    assert_near(b.sphere_d, a.sphere_d + d, 1e-12);
    assert_near(b.axis_deg, a.axis_deg, 0);
    assert_int_equal(sw_zernike_refraction_shifted(NULL, z, 6, 5.0, 0, 0.0, NAN, &b), SW_EINVAL);
}

/* Mirrored instruments: the sign changes of the terms odd in x, odd in y. */
static void test_flip(void **state)
{
    (void)state;
    double c[28], fx[28], fy[28], fxy[28], m[28], back[28];
    for (int j = 0; j < 28; j++)
        c[j] = 0.1 * (j + 1) * (j % 3 == 0 ? -1.0 : 1.0);
    sw_zernike_flip(c, 28, 1, 0, fx);
    sw_zernike_flip(c, 28, 0, 1, fy);
    sw_zernike_flip(c, 28, 1, 1, fxy);
    sw_zernike_mirror_x(c, 28, m);
    for (int j = 0; j < 28; j++)
        assert_near(fx[j], m[j], 0); /* flip_x is the mirror image of the left eye */
    /* the wavefront itself: W'(x, y) = W(-x, y), W(x, -y), W(-x, -y) */
    const double pts[][2] = {{0.3, 0.2}, {-0.5, 0.4}, {0.7, -0.6}, {0.0, 0.9}};
    for (size_t i = 0; i < 4; i++) {
        const double x = pts[i][0], y = pts[i][1];
        assert_near(wave(fx, 28, x, y), wave(c, 28, -x, y), 1e-12);
        assert_near(wave(fy, 28, x, y), wave(c, 28, x, -y), 1e-12);
        assert_near(wave(fxy, 28, x, y), wave(c, 28, -x, -y), 1e-12);
    }
    /* which terms: c(2,-2) (j 3) flips both ways; c(2,2) (j 5) neither; c(3,1) (j 8) with x;
     * c(3,-1) (j 7) with y; defocus and spherical never */
    assert_near(fx[3], -c[3], 0);
    assert_near(fy[3], -c[3], 0);
    assert_near(fx[5], c[5], 0);
    assert_near(fy[5], c[5], 0);
    assert_near(fx[8], -c[8], 0);
    assert_near(fy[8], c[8], 0);
    assert_near(fx[7], c[7], 0);
    assert_near(fy[7], -c[7], 0);
    assert_near(fxy[4], c[4], 0);
    assert_near(fxy[12], c[12], 0);
    /* round trips */
    sw_zernike_flip(fxy, 28, 1, 1, back);
    for (int j = 0; j < 28; j++)
        assert_near(back[j], c[j], 0);
    /* a flipped image mirrors the astigmatic axis: a -> 180 - a */
    double z[6] = {0, 0, 0, 0.2, 0.5, -0.3}, zf[6];
    sw_zernike_flip(z, 6, 0, 1, zf);
    sw_refraction a, b;
    assert_int_equal(sw_zernike_refraction(NULL, z, 6, 6.0, 0, 0.0, &a), SW_OK);
    assert_int_equal(sw_zernike_refraction(NULL, zf, 6, 6.0, 0, 0.0, &b), SW_OK);
    assert_near(fmod(a.axis_deg + b.axis_deg, 180.0), 0.0, 1e-9);
    assert_near(a.sphere_d, b.sphere_d, 1e-12);
}

/* Minus- and plus-cylinder forms, clinical axes. */
static void test_transpose(void **state)
{
    (void)state;
    const double sph[] = {-4.25, 0.0, 1.5};
    const double cyl[] = {-2.0, -0.25, 0.75};
    const double axes[] = {0.0, 1.0, 45.0, 90.0, 179.5, 180.0};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t k = 0; k < 6; k++) {
                double s1, c1, a1, s2, c2, a2;
                sw_refraction_transpose(sph[a], cyl[b], axes[k], &s1, &c1, &a1);
                assert_near(s1, sph[a] + cyl[b], 1e-15);
                assert_near(c1, -cyl[b], 0);
                assert_true(a1 > 0.0 && a1 <= 180.0);
                sw_refraction_transpose(s1, c1, a1, &s2, &c2, &a2);
                assert_near(s2, sph[a], 1e-15);
                assert_near(c2, cyl[b], 0);
                assert_near(a2, sw_refraction_axis_clinical(axes[k]), 1e-12);
                /* the same lens: the powers along the two principal meridians agree */
                const double p_axis = sph[a], p_perp = sph[a] + cyl[b];
                assert_near(s1 + c1, p_axis, 1e-12); /* plus form: sphere' + cyl' at axis' + 90 */
                assert_near(s1, p_perp, 1e-12);
            }
    assert_near(sw_refraction_axis_clinical(0.0), 180.0, 0);
    assert_near(sw_refraction_axis_clinical(180.0), 180.0, 0);
    assert_near(sw_refraction_axis_clinical(-30.0), 150.0, 1e-12);
    assert_near(sw_refraction_axis_clinical(270.0), 90.0, 1e-12);
    assert_near(sw_refraction_axis_clinical(1.0), 1.0, 0);
    /* -2.00 -1.00 x 30 is -3.00 +1.00 x 120 */
    double s, c, ax;
    sw_refraction_transpose(-2.0, -1.0, 30.0, &s, &c, &ax);
    assert_near(s, -3.0, 1e-15);
    assert_near(c, 1.0, 0);
    assert_near(ax, 120.0, 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defocus),       cmocka_unit_test(test_astigmatism_signs),
        cmocka_unit_test(test_round_trip_rx), cmocka_unit_test(test_vertex_and_higher_orders),
        cmocka_unit_test(test_mirror),        cmocka_unit_test(test_rescale),
        cmocka_unit_test(test_bad_input),     cmocka_unit_test(test_lca),
        cmocka_unit_test(test_flip),          cmocka_unit_test(test_transpose),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

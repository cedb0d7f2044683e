/*
 * Control as an AO engineer flies it (loop.h, src/loop/controller.c and modal.c):
 *   - the unseen modes of the Fried geometry (sw_unseen_modes): orthonormal, zero on actuators no
 *     valid lenslet touches, and invisible to the sensor (every lenslet's corner differences are
 *     0); the controller's filter leaves no trace of them in the commands;
 *   - PI against its transfer function: a sinusoid through C(z) = kp + ki / (1 - z^-1) comes out
 *     with C's gain and phase (kp != 0: not the integrator);
 *   - the closed loop on a known plant (a d-frame delay): the measured residual of a sinusoidal
 *     disturbance follows the rejection function E(z) = 1 / (1 + C(z) z^-d);
 *   - anti-windup: after a long saturation, PI with the clip leaves the stroke limit as soon as the
 *     error changes sign (a wound-up integral, as a hand model without back-calculation shows,
 *     would hold it there for ~ the saturation's length);
 *   - modal gains (Gendron & Lena 1994): on scalar loops with a known disturbance (AR(1)) and known
 *     white noise, the gains chosen from closed-loop telemetry give a true residual within 5 % of
 *     the best gain found by brute force, the noise estimate is within 15 % (where the
 *     disturbance's own high frequencies are small), and a second round
 *     from the new gains stays put (converged); bad input refused.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI_ 3.14159265358979323846

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

/* ------------------------------------------------------------------ random numbers */

static double unit_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
}

static double gauss(uint64_t *s)
{
    const double u = unit_rand(s), v = unit_rand(s);
    return sqrt(-2.0 * log(u)) * cos(2.0 * PI_ * v);
}

/* ------------------------------------------------------------------ unseen modes */

/* The Fried geometry's slopes of corner values c ((nx + 1)(ny + 1)) at lenslet (ix, iy). */
static void fried_slopes(const float *c, int32_t nx, int32_t ix, int32_t iy, double *sx, double *sy)
{
    const int32_t cx = nx + 1;
    const double a = c[iy * cx + ix], b = c[iy * cx + ix + 1], d = c[(iy + 1) * cx + ix],
                 e = c[(iy + 1) * cx + ix + 1];
    *sx = 0.5 * ((b - a) + (e - d));
    *sy = 0.5 * ((d - a) + (e - b));
}

static void test_unseen_modes(void **state)
{
    (void)state;
    const int32_t nx = 9, ny = 9, nact = (nx + 1) * (ny + 1);
    uint8_t valid[81];
    for (int32_t iy = 0; iy < ny; iy++) /* a circle of lenslets */
        for (int32_t ix = 0; ix < nx; ix++)
            valid[iy * nx + ix] = (uint8_t)(hypot(ix - 4.0, iy - 4.0) <= 4.2);
    float z[2 * 100];
    int32_t nm = -1;
    assert_int_equal(sw_unseen_modes(nx, ny, valid, SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE, z, &nm),
                     SW_OK);
    assert_int_equal(nm, 2);
    for (int32_t i = 0; i < 2; i++)
        for (int32_t j = 0; j < 2; j++) {
            double dot = 0.0;
            for (int32_t a = 0; a < nact; a++)
                dot += (double)z[i * nact + a] * z[j * nact + a];
            assert_true(fabs(dot - (i == j)) < 1e-5);
        }
    /* zero where no valid lenslet has a corner; invisible at every valid lenslet */
    for (int32_t a = 0; a < nact; a++) {
        const int32_t cx = a % (nx + 1), cy = a / (nx + 1);
        int touched = 0;
        for (int dy = -1; dy <= 0; dy++)
            for (int dx = -1; dx <= 0; dx++) {
                const int32_t lx = cx + dx, ly = cy + dy;
                touched |= lx >= 0 && ly >= 0 && lx < nx && ly < ny && valid[ly * nx + lx];
            }
        if (!touched) {
            assert_true(z[a] == 0.0f);
            assert_true(z[nact + a] == 0.0f);
        }
    }
    for (int32_t m = 0; m < 2; m++)
        for (int32_t iy = 0; iy < ny; iy++)
            for (int32_t ix = 0; ix < nx; ix++) {
                if (!valid[iy * nx + ix])
                    continue;
                double sx, sy;
                fried_slopes(z + m * nact, nx, ix, iy, &sx, &sy);
                assert_true(fabs(sx) < 1e-6 && fabs(sy) < 1e-6);
            }
    /* a tilt is seen (so the check above can fail) */
    float tilt[100];
    for (int32_t a = 0; a < nact; a++)
        tilt[a] = (float)(a % (nx + 1));
    double sx, sy;
    fried_slopes(tilt, nx, 3, 3, &sx, &sy);
    assert_true(fabs(sx - 1.0) < 1e-9);

    /* names; piston alone; bad input */
    int w = -1;
    assert_int_equal(sw_unseen_parse("piston-waffle", &w), SW_OK);
    assert_int_equal(w, SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE);
    assert_string_equal(sw_unseen_string(w), "piston-waffle");
    assert_int_equal(sw_unseen_parse("none", &w), SW_OK);
    assert_int_equal(w, 0);
    assert_int_equal(sw_unseen_parse("tip", &w), SW_EINVAL);
    assert_int_equal(sw_unseen_modes(nx, ny, NULL, SW_UNSEEN_PISTON, z, &nm), SW_OK);
    assert_int_equal(nm, 1);
    for (int32_t a = 0; a < nact; a++)
        assert_true(fabs(z[a] - 0.1f) < 1e-6); /* 1 / sqrt(100) */
    assert_int_equal(sw_unseen_modes(0, ny, NULL, SW_UNSEEN_PISTON, z, &nm), SW_EINVAL);
    assert_int_equal(sw_unseen_modes(nx, ny, NULL, 4, z, &nm), SW_EINVAL);
}

/* The controller's filter: whatever r, the commands have no piston and no waffle. */
static void test_filter_step(void **state)
{
    (void)state;
    const int32_t nx = 6, nact = 49;
    float z[2 * 49];
    int32_t nm = 0;
    assert_int_equal(sw_unseen_modes(nx, nx, NULL, SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE, z, &nm),
                     SW_OK);
    sw_controller_kind kinds[3] = {SW_CTRL_INTEGRATOR, SW_CTRL_LEAKY, SW_CTRL_PI};
    uint64_t rs = 5;
    for (int k = 0; k < 3; k++) {
        sw_controller_params p;
        sw_controller_params_default(&p);
        p.kind = kinds[k];
        p.nact = nact;
        p.nfilter = nm;
        p.filter = z;
        sw_controller *c = NULL;
        assert_int_equal(sw_controller_create(ctx, &p, &c), SW_OK);
        float r[49], u[49];
        double worst = 0.0, total = 0.0;
        for (int f = 0; f < 50; f++) {
            for (int32_t a = 0; a < nact; a++) /* half piston + waffle, half anything */
                r[a] = (float)(3.0 + ((a % 7 + a / 7) % 2 ? 2.0 : -2.0) + gauss(&rs));
            assert_int_equal(sw_controller_step(c, r, u), SW_OK);
            for (int32_t j = 0; j < nm; j++) {
                double t = 0.0;
                for (int32_t a = 0; a < nact; a++)
                    t += (double)z[j * nact + a] * u[a];
                worst = fmax(worst, fabs(t));
            }
            for (int32_t a = 0; a < nact; a++)
                total = fmax(total, fabs(u[a]));
        }
        assert_true(total > 1.0);          /* the rest integrates */
        assert_true(worst < 1e-5 * total); /* the unseen modes do not */
        sw_controller_destroy(c);
    }
    /* a filter without its array, or with more modes than commands */
    sw_controller_params p;
    sw_controller_params_default(&p);
    p.nact = nact;
    p.nfilter = 2;
    sw_controller *c = NULL;
    assert_int_equal(sw_controller_create(ctx, &p, &c), SW_EINVAL);
    p.filter = z;
    p.nfilter = nact + 1;
    assert_int_equal(sw_controller_create(ctx, &p, &c), SW_EINVAL);
}

/* ------------------------------------------------------------------ transfer functions */

/* Complex amplitude of x_k at frequency w over n samples (a whole number of periods). */
static void amplitude(const double *x, int n, double w, double *re, double *im)
{
    double a = 0.0, b = 0.0;
    for (int k = 0; k < n; k++) {
        a += x[k] * cos(w * k);
        b -= x[k] * sin(w * k);
    }
    *re = 2.0 * a / n;
    *im = 2.0 * b / n;
}

static sw_controller *one_pi(double kp, double ki, double clip)
{
    sw_controller_params p;
    sw_controller_params_default(&p);
    p.kind = SW_CTRL_PI;
    p.nact = 1;
    p.nmodes = 1;
    const float fkp = (float)kp, fki = (float)ki;
    p.kp = &fkp;
    p.ki = &fki;
    p.clip = clip;
    sw_controller *c = NULL;
    assert_int_equal(sw_controller_create(ctx, &p, &c), SW_OK);
    return c;
}

/* Open loop: e_k = cos(w k) in, v_k out; v's amplitude at w is C(e^{iw}) = kp + ki / (1 -
 * e^{-iw}) (the integral's constant offset from the start is not at w). */
static void test_pi_frequency_response(void **state)
{
    (void)state;
    const double kp = 0.3, ki = 0.2;
    const int periods = 40;
    const int per[3] = {8, 20, 50}; /* frames per period */
    for (int t = 0; t < 3; t++) {
        const double w = 2.0 * PI_ / per[t];
        const int n = periods * per[t];
        sw_controller *c = one_pi(kp, ki, 0.0);
        double *v = malloc((size_t)n * sizeof(double));
        for (int k = 0; k < n; k++) {
            const float e = (float)cos(w * k);
            float u;
            assert_int_equal(sw_controller_step(c, &e, &u), SW_OK);
            v[k] = u;
        }
        double re, im;
        amplitude(v, n, w, &re, &im);
        /* C(e^{iw}) = kp + ki / (1 - e^{-iw}) */
        const double dr = 1.0 - cos(w), di = sin(w), den = dr * dr + di * di;
        const double cr = kp + ki * dr / den, ci = -ki * di / den;
        print_message("period %d: C measured %.5f%+.5fi, transfer function %.5f%+.5fi\n", per[t],
                      re, im, cr, ci);
        assert_true(fabs(re - cr) < 2e-3 * hypot(cr, ci));
        assert_true(fabs(im - ci) < 2e-3 * hypot(cr, ci));
        /* not the integrator: the integrator of gain ki alone has Re C = ki / 2 at every w */
        assert_true(fabs(re - 0.5 * ki) > 0.2);
        free(v);
        sw_controller_destroy(c);
    }
}

/* Closed loop on a plant with a d-frame delay: y_k = w_k - u_{k-d}; the residual y of a
 * sinusoidal disturbance has |E(e^{iw})| = |1 / (1 + C z^-d)| of its amplitude. */
static void test_closed_loop_rejection(void **state)
{
    (void)state;
    const int d = 2, per[3] = {10, 25, 100}, periods = 30;
    const double kp = 0.1, ki = 0.3;
    for (int t = 0; t < 3; t++) {
        const double w = 2.0 * PI_ / per[t];
        const int warm = 400, n = periods * per[t];
        sw_controller *c = one_pi(kp, ki, 0.0);
        double *y = malloc((size_t)n * sizeof(double));
        float hist[8] = {0};
        for (int k = 0; k < warm + n; k++) {
            const double yk = cos(w * k) - hist[d - 1];
            const float e = (float)yk;
            float u;
            assert_int_equal(sw_controller_step(c, &e, &u), SW_OK);
            memmove(hist + 1, hist, 7 * sizeof(float));
            hist[0] = u;
            if (k >= warm)
                y[k - warm] = yk;
        }
        double re, im;
        amplitude(y, n, w, &re, &im);
        /* E = 1 / (1 + C e^{-iwd}), C = kp + ki / (1 - e^{-iw}) */
        const double dr = 1.0 - cos(w), di = sin(w), den = dr * dr + di * di;
        const double cr = kp + ki * dr / den, ci = -ki * di / den;
        const double zr = cos(w * d), zi = -sin(w * d);
        const double lr = 1.0 + cr * zr - ci * zi, li = cr * zi + ci * zr;
        const double mag = 1.0 / hypot(lr, li);
        const double got = hypot(re, im);
        if (!(fabs(got - mag) < 5e-3 * fmax(mag, 0.05)))
            fail_msg("period %d: |E| measured %.5f, transfer function %.5f", per[t], got, mag);
        free(y);
        sw_controller_destroy(c);
    }
}

/* ------------------------------------------------------------------ anti-windup */

static void test_antiwindup(void **state)
{
    (void)state;
    const double kp = 0.2, ki = 0.5, clip = 1.0;
    sw_controller *c = one_pi(kp, ki, clip);
    const int sat = 200;
    float e = 1.0f, u = 0.0f;
    for (int k = 0; k < sat; k++)
        assert_int_equal(sw_controller_step(c, &e, &u), SW_OK);
    assert_true(u == (float)clip);
    /* the error reverses: with the back-calculation the command leaves the limit at once */
    e = -0.2f;
    int left = -1;
    for (int k = 0; k < 50 && left < 0; k++) {
        assert_int_equal(sw_controller_step(c, &e, &u), SW_OK);
        if (u < (float)clip)
            left = k;
    }
    assert_true(left >= 0 && left <= 1);
    /* a hand model without it: the integral wound to ~ sat, v = kp e + ki I stays above the
     * clip for ~ (ki sat - clip) / (ki 0.2) frames */
    double integ = 0.0, v = 0.0;
    for (int k = 0; k < sat; k++)
        integ += 1.0;
    int held = 0;
    for (int k = 0; k < 5000; k++) {
        integ += -0.2;
        v = kp * -0.2 + ki * integ;
        if (v < clip)
            break;
        held++;
    }
    assert_true(held > 100);
    sw_controller_destroy(c);
}

/* sw_controller_set_gains between steps: with e = 0 next, the command is the integral part
 * ki I alone, which must not jump: rescaled for ki 0.5 -> 0.2, and 0 for a mode whose ki was 0
 * (its I summed e unchecked while ki was 0). */
static void test_set_gains_bumpless(void **state)
{
    (void)state;
    const float zero = 0.0f, one = 1.0f;
    float u = 0.0f, before = 0.0f;
    sw_controller *c = one_pi(0.0, 0.5, 0.0);
    for (int k = 0; k < 10; k++)
        assert_int_equal(sw_controller_step(c, &one, &before), SW_OK);
    const float ki2 = 0.2f;
    assert_int_equal(sw_controller_set_gains(c, NULL, &ki2), SW_OK);
    assert_int_equal(sw_controller_step(c, &zero, &u), SW_OK);
    assert_true(fabs(u - before) < 1e-5 * fabs(before));
    sw_controller_destroy(c);

    c = one_pi(0.3, 0.0, 0.0); /* P alone: u = 0.3 e */
    for (int k = 0; k < 10; k++)
        assert_int_equal(sw_controller_step(c, &one, &u), SW_OK);
    assert_true(fabs(u - 0.3f) < 1e-6);
    assert_int_equal(sw_controller_set_gains(c, NULL, &ki2), SW_OK);
    assert_int_equal(sw_controller_step(c, &zero, &u), SW_OK);
    assert_true(u == 0.0f); /* the integral part was 0 and stays 0 (not 0.2 x 10) */
    assert_int_equal(sw_controller_step(c, &one, &u), SW_OK);
    assert_true(fabs(u - (0.3f + 0.2f)) < 1e-6); /* then the PI as usual: kp e + ki I, I = 1 */
    sw_controller_destroy(c);
}

/* ------------------------------------------------------------------ modal gains */

typedef struct plant {
    double rho, sigma_w; /* phi_k = rho phi_{k-1} + sigma_w w_k            */
    double sigma_n;      /* measurement noise                             */
} plant;

/* A scalar loop of gain g, delay d: y_k = phi_k - u_{k-d} + n_k, u_k = u_{k-1} + g y_k, on the
 * sequences of seed; y (n frames after `warm`) recorded into y[k * stride]; returns the true
 * residual variance of phi - u_{k-d}. */
static double scalar_loop_ex(const plant *pl, double g, int d, uint64_t seed, int warm, int n,
                             float *y, int stride, int pol);

static double scalar_loop(const plant *pl, double g, int d, uint64_t seed, int warm, int n,
                          float *y, int stride)
{
    return scalar_loop_ex(pl, g, d, seed, warm, n, y, stride, 0);
}

/* The same, pol 1: y records the pseudo-open-loop measurement y_k + u_{k-d} (= phi_k + n_k). */
static double scalar_loop_ex(const plant *pl, double g, int d, uint64_t seed, int warm, int n,
                             float *y, int stride, int pol)
{
    uint64_t s = seed;
    double phi = 0.0, hist[16] = {0}, s1 = 0.0, s2 = 0.0;
    for (int k = 0; k < warm + n; k++) {
        phi = pl->rho * phi + pl->sigma_w * gauss(&s);
        const double noise = pl->sigma_n * gauss(&s);
        const double res = phi - hist[d - 1];
        const double yk = res + noise;
        const double u = hist[0] + g * yk;
        memmove(hist + 1, hist, 15 * sizeof(double));
        hist[0] = u;
        if (k >= warm) {
            if (y)
                y[(size_t)(k - warm) * stride] = (float)(pol ? yk + hist[d] : yk);
            s1 += res;
            s2 += res * res;
        }
    }
    return s2 / n - (s1 / n) * (s1 / n);
}

static void test_modal_gains(void **state)
{
    (void)state;
    enum { NM = 4, N = 8192, WARM = 500, D = 2 };
    const plant pl[NM] = {
        {0.995, 0.05, 0.05}, /* slow, low noise: a high gain       */
        {0.995, 0.05, 0.5},  /* slow, noisy: a lower gain          */
        {0.98, 0.2, 0.1},    /* faster disturbance                 */
        {0.0, 0.0, 0.3},     /* noise only: the gain goes to ~0    */
    };
    float *y = malloc((size_t)N * NM * sizeof(float));
    float g0[NM], g1[NM], g2[NM], g1p[NM];
    double noise[NM], pred[NM];
    for (int i = 0; i < NM; i++) {
        g0[i] = 0.3f;
        scalar_loop(&pl[i], g0[i], D, 100 + (uint64_t)i, WARM, N, y + i, NM);
    }
    sw_modal_gains_params mp;
    sw_modal_gains_params_default(&mp);
    mp.delay_frames = D;
    assert_int_equal(sw_modal_gains(ctx, &mp, y, N, NM, g0, g1, noise, pred), SW_OK);
    /* the same loops' pseudo-open-loop measurements (y + u_{k-d}) through sw_modal_gains_pol */
    double noise_p[NM];
    for (int i = 0; i < NM; i++)
        scalar_loop_ex(&pl[i], g0[i], D, 100 + (uint64_t)i, WARM, N, y + i, NM, 1);
    assert_int_equal(sw_modal_gains_pol(ctx, &mp, y, N, NM, g0, g1p, noise_p, NULL), SW_OK);
    const double gmax = sw_controller_max_gain(D, 0.0);
    for (int i = 0; i < NM; i++) {
        /* brute force on fresh sequences (same statistics) */
        double best = INFINITY, bestg = 0.0;
        for (int c = 1; c <= 90; c++) {
            const double g = gmax * 0.9 * c / 90.0;
            const double v = scalar_loop(&pl[i], g, D, 900 + (uint64_t)i, WARM, N, NULL, 1);
            if (v < best) {
                best = v;
                bestg = g;
            }
        }
        const double got = scalar_loop(&pl[i], g1[i], D, 900 + (uint64_t)i, WARM, N, NULL, 1);
        print_message("mode %d: gain %.3f (brute force %.3f), residual %.5g vs %.5g, noise %.4g "
                      "(true %.4g)\n",
                      i, (double)g1[i], bestg, got, best, noise[i], pl[i].sigma_n * pl[i].sigma_n);
        assert_true(got <= 1.05 * best);
        const double got_p = scalar_loop(&pl[i], g1p[i], D, 900 + (uint64_t)i, WARM, N, NULL, 1);
        print_message("        pseudo-open loop: gain %.3f, residual %.5g, noise %.4g\n",
                      (double)g1p[i], got_p, noise_p[i]);
        assert_true(got_p <= 1.05 * best);
        /* the plateau holds the noise plus the disturbance's own high frequencies, whose PSD at
         * Nyquist is sigma_w^2 / (1 + rho)^2: within 15 % where that is small, above it anyway */
        const double n2 = pl[i].sigma_n * pl[i].sigma_n;
        const double hf = pl[i].sigma_w * pl[i].sigma_w / ((1.0 + pl[i].rho) * (1.0 + pl[i].rho));
        if (hf < 0.05 * n2)
            assert_true(fabs(noise[i] - n2) < 0.15 * n2);
        else
            assert_true(noise[i] > 0.85 * n2 && noise[i] < 1.3 * (n2 + hf));
    }
    assert_true(g1[1] < g1[0]); /* more noise, less gain */
    assert_true(g1[3] < 0.05f);
    /* a second round from the new gains: converged */
    for (int i = 0; i < NM; i++)
        scalar_loop(&pl[i], g1[i], D, 300 + (uint64_t)i, WARM, N, y + i, NM);
    assert_int_equal(sw_modal_gains(ctx, &mp, y, N, NM, g1, g2, NULL, NULL), SW_OK);
    for (int i = 0; i < 3; i++)
        assert_true(fabs(g2[i] - g1[i]) <= 0.1 * g1[i]);

    /* all-zero telemetry keeps the gain; bad input */
    memset(y, 0, (size_t)N * NM * sizeof(float));
    assert_int_equal(sw_modal_gains(ctx, &mp, y, N, NM, g0, g2, NULL, NULL), SW_OK);
    assert_true(g2[0] == g0[0]);
    y[5] = NAN;
    assert_int_equal(sw_modal_gains(ctx, &mp, y, N, NM, g0, g2, NULL, NULL), SW_EINVAL);
    y[5] = 0.0f;
    assert_int_equal(sw_modal_gains(ctx, &mp, y, 100, NM, g0, g2, NULL, NULL), SW_EINVAL);
    mp.segment = 100;
    assert_int_equal(sw_modal_gains(ctx, &mp, y, N, NM, g0, g2, NULL, NULL), SW_EINVAL);
    sw_modal_gains_params_default(&mp);
    g0[2] = 0.0f;
    assert_int_equal(sw_modal_gains(ctx, &mp, y, N, NM, g0, g2, NULL, NULL), SW_EINVAL);
    free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unseen_modes),
        cmocka_unit_test(test_filter_step),
        cmocka_unit_test(test_pi_frequency_response),
        cmocka_unit_test(test_closed_loop_rejection),
        cmocka_unit_test(test_antiwindup),
        cmocka_unit_test(test_set_gains_bumpless),
        cmocka_unit_test(test_modal_gains),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

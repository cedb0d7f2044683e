/*
 * The Levenberg-Marquardt core of position refinement (refine_model.h, sw_rm_lm_next), which the
 * CPU and the GPU share, on a problem whose maximum is known to the last digit: a Poisson
 * log-linear model of 40 "pixels", M_k = exp(c_k . p), data D_k. Its negative log-likelihood,
 * sum M_k - D_k ln M_k, has the gradient sum c_k (D_k - M_k) = J^T W r and the Fisher matrix
 * sum M_k c_k c_k^T = J^T W J (J_k = M_k c_k, W_k = 1 / M_k), the sums sw_rm_fit_pixel gives the
 * fit; with the canonical link the Fisher matrix is the Hessian, so Newton's method run here in
 * double to a step of 1e-15 finds the maximum p*. The fit, started a few error bars away, must:
 *   - converge (no failure, no max_iter) in a few passes;
 *   - stop within 3e-3 of the error bars of p* (sqrt(e^T A e), e = best - p*): the rule is a
 *     Gauss-Newton step below 3 % of the error bars, then taken without a pass;
 *   - have taken that last step: the answer is nearer p* than the last point evaluated (a step
 *     applied with the wrong sign, or not at all, leaves it as far or farther);
 *   - end at the same point from several starting points.
 * And the fit's starting position (sw_rm_start_position): the centroid above the background of
 * the window around the stamp's centre, taken when within 1 px of the seed, else the seed.
 */
#include "testutil.h"

#include "find/refine_model.h"

#include <math.h>
#include <string.h>

#define K 40

typedef struct problem {
    double c[K][SW_RM_NPAR];
    double d[K];
} problem;

/* A fixed problem: c_k[2] = 1 (the level, p[2] ~ ln 400), the other entries in [-0.5, 0.5]; the
 * data the model at p_true plus sqrt(M) z, rounded (z from a fixed sequence). */
static void make_problem(problem *pr, const double *p_true)
{
    uint64_t r = 987654321u;
    for (int k = 0; k < K; ++k) {
        for (int i = 0; i < SW_RM_NPAR; ++i) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            pr->c[k][i] = i == 2 ? 1.0 : (double)(r >> 11) / 9007199254740992.0 - 0.5;
        }
        double e = 0.0;
        for (int i = 0; i < SW_RM_NPAR; ++i)
            e += pr->c[k][i] * p_true[i];
        const double m = exp(e);
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const double z = 2.0 * ((double)(r >> 11) / 9007199254740992.0) - 1.0; /* [-1, 1) */
        pr->d[k] = floor(m + 1.5 * sqrt(m) * z + 0.5);
    }
}

/* The sums at p, as a fit pass gives them to sw_rm_lm_next. */
static void sums(const problem *pr, const double *p, sw_rm_acc *acc)
{
    memset(acc, 0, sizeof(*acc));
    for (int k = 0; k < K; ++k) {
        double e = 0.0;
        for (int i = 0; i < SW_RM_NPAR; ++i)
            e += pr->c[k][i] * p[i];
        const double m = exp(e), res = pr->d[k] - m;
        for (int i = 0, q = 0; i < SW_RM_NPAR; ++i) {
            acc->g[i] += pr->c[k][i] * res;
            for (int j = i; j < SW_RM_NPAR; ++j, ++q)
                acc->a[q] += m * pr->c[k][i] * pr->c[k][j];
        }
        acc->chi2 += res * res / m;
        acc->merit += m - pr->d[k] * log(m);
    }
    acc->n = K;
}

/* sqrt(e^T A e): the distance from p to q in error bars of the fit at q. */
static double distance(const problem *pr, const double *p, const double *q)
{
    sw_rm_acc acc;
    sums(pr, q, &acc);
    double e[SW_RM_NPAR];
    for (int i = 0; i < SW_RM_NPAR; ++i)
        e[i] = p[i] - q[i];
    return sqrt(sw_rm_quad(acc.a, e));
}

/* The maximum by Newton's method in double (sw_rm_solve: the full step, no damping). */
static void maximum(const problem *pr, const double *p0, double *p)
{
    for (int i = 0; i < SW_RM_NPAR; ++i)
        p[i] = p0[i];
    for (int it = 0; it < 100; ++it) {
        sw_rm_acc acc;
        sums(pr, p, &acc);
        double step[SW_RM_NPAR] = {0}, inv[SW_RM_NPAR * SW_RM_NPAR] = {0};
        assert_true(sw_rm_solve(acc.a, 0.0, acc.g, step, inv));
        double s = 0.0;
        for (int i = 0; i < SW_RM_NPAR; ++i) {
            p[i] += step[i];
            s = fmax(s, fabs(step[i]));
        }
        if (s < 1e-15)
            return;
    }
    fail_msg("the reference Newton iteration did not converge");
}

static void test_lm_stops_at_the_maximum(void **state)
{
    (void)state;
    const double p_true[SW_RM_NPAR] = {0.3, -0.2, log(400.0), 1.5, 0.7};
    problem pr;
    make_problem(&pr, p_true);
    double ps[SW_RM_NPAR];
    maximum(&pr, p_true, ps);

    /* starting points: p* moved by 1-20 error bars (in each parameter, the same sign or not) */
    const double sign[4][SW_RM_NPAR] = {
        {1, 1, 1, 1, 1}, {1, -1, 1, -1, 1}, {-1, 1, -1, 1, -1}, {-1, -1, 1, 1, -1}};
    const double size[3] = {1.0, 5.0, 20.0};
    sw_rm_acc a0;
    sums(&pr, ps, &a0);
    double step0[SW_RM_NPAR] = {0}, inv[SW_RM_NPAR * SW_RM_NPAR] = {0};
    assert_true(sw_rm_solve(a0.a, 0.0, a0.g, step0, inv));
    for (int s = 0; s < 4; ++s)
        for (int z = 0; z < 3; ++z) {
            double p0[SW_RM_NPAR];
            for (int i = 0; i < SW_RM_NPAR; ++i)
                p0[i] = ps[i] + sign[s][i] * size[z] * sqrt(inv[i * SW_RM_NPAR + i]);
            sw_rm_lm lm;
            sw_rm_lm_init(&lm, p0);
            double last[SW_RM_NPAR]; /* the last point evaluated */
            int done = 0, passes = 0;
            while (!done) {
                sw_rm_acc acc;
                sums(&pr, lm.trial, &acc);
                memcpy(last, lm.trial, sizeof last);
                done = sw_rm_lm_next(&lm, &acc, 50);
                passes++;
            }
            const double err = distance(&pr, lm.best, ps), err_last = distance(&pr, last, ps);
            print_message("# start %g error bars (signs %d): %d passes, %.2e error bars from the "
                          "maximum (the last point evaluated: %.2e)\n",
                          size[z], s, passes, err, err_last);
            assert_false(lm.failed);
            assert_true(lm.converged);
            assert_true(passes <= 12);
            assert_true(err < 3e-3);
            if (err_last > 1e-9)
                assert_true(err < 0.5 * err_last);
        }
}

/* Window sums (sw_rm_start_position's w) of a Gaussian spot of width 1.5 px and flux f at
 * (sx, sy) from the stamp's centre, on a background b, over |dx|, |dy| <= SW_RM_START_WIN. */
static void window_sums(double sx, double sy, double f, double b, double *w)
{
    memset(w, 0, 6 * sizeof(double));
    for (int dy = -SW_RM_START_WIN; dy <= SW_RM_START_WIN; ++dy)
        for (int dx = -SW_RM_START_WIN; dx <= SW_RM_START_WIN; ++dx) {
            const double r2 = (dx - sx) * (dx - sx) + (dy - sy) * (dy - sy);
            const double d =
                b + f * exp(-r2 / (2.0 * 1.5 * 1.5)) / (2.0 * 3.141592653589793 * 1.5 * 1.5);
            w[0] += d * dx;
            w[1] += d * dy;
            w[2] += dx;
            w[3] += dy;
            w[4] += d;
            w[5] += 1.0;
        }
}

static void test_start_position(void **state)
{
    (void)state;
    double w[6];
    /* a spot 0.4, -0.3 px from the stamp's centre (100, 200), the seed 0.3 px beyond it: the
     * start moves to the window's centroid, within 0.15 px of the spot (the window's edge pulls
     * it in) and nearer than the seed */
    window_sums(0.4, -0.3, 1e4, 50.0, w);
    double x = 100.7, y = 199.4;
    sw_rm_start_position(w, 50.0, 100, 200, &x, &y);
    assert_true(fabs(x - 100.4) < 0.15 && fabs(y - 199.7) < 0.15);
    assert_true(hypot(x - 100.4, y - 199.7) < hypot(100.7 - 100.4, 199.4 - 199.7));
    /* the background is removed: the same spot on a sky 100 times brighter, the same start */
    double x2 = 100.7, y2 = 199.4, w2[6];
    window_sums(0.4, -0.3, 1e4, 5000.0, w2);
    sw_rm_start_position(w2, 5000.0, 100, 200, &x2, &y2);
    assert_true(fabs(x2 - x) < 1e-9 && fabs(y2 - y) < 1e-9);
    /* a centroid more than 1 px from the seed (a neighbour, noise): the seed stays */
    window_sums(2.5, 0.0, 1e4, 50.0, w);
    x = 100.2;
    y = 200.0;
    sw_rm_start_position(w, 50.0, 100, 200, &x, &y);
    assert_true(x == 100.2 && y == 200.0);
    /* nothing above the background: the seed stays */
    window_sums(0.0, 0.0, 0.0, 50.0, w);
    x = 100.3;
    sw_rm_start_position(w, 60.0, 100, 200, &x, &y);
    assert_true(x == 100.3 && y == 200.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lm_stops_at_the_maximum),
        cmocka_unit_test(test_start_position),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

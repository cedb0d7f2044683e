/*
 * The Levenberg-Marquardt core of position refinement (refine_model.h, sw_rm_lm_next), which the
 * CPU and the GPU share, on a problem whose maximum is known to the last digit: a Poisson
 * log-linear model of 40 "pixels", M_k = exp(c_k . p), data D_k. Its negative log-likelihood,
 * sum M_k - D_k ln M_k, has the gradient sum c_k (D_k - M_k) = J^T W r and the Fisher matrix
 * sum M_k c_k c_k^T = J^T W J (J_k = M_k c_k, W_k = 1 / M_k), the sums sw_rm_fit_pixel gives the
 * fit; with the canonical link the Fisher matrix is the Hessian, so Newton's method run here in
 * double to a step of 1e-15 finds the maximum p*. The fit, started 1-20 error bars away, must
 * converge (no failure, no max_iter) in a few passes and stop within 3.3e-4 of the error bars of
 * p* (sqrt(e^T A e), e = best - p*): it stops when the next Gauss-Newton step is below 3e-4 of
 * the error bars (x^T A x < 1e-7), and the best point is the answer. The same with the identity
 * link, M_k = c_k . p, at ~4 counts a pixel: the Fisher matrix sum c c^T / M is then not the
 * Hessian sum D c c^T / M^2 (which the reference Newton iteration uses), and Fisher scoring
 * contracts only linearly, as for a faint or sky-dominated star, so that the distance left is
 * the step over (1 - the contraction): within 5e-4 of the error bars. (A stopping rule that took
 * the step of 3 % of the error bars unevaluated, without a contraction test, stopped up to
 * 3.5e-3 of them short here.)
 */
#include "testutil.h"

#include "find/refine_model.h"

#include <math.h>
#include <string.h>

#define K 40

typedef struct problem {
    double c[K][SW_RM_NPAR];
    double d[K];
    int identity; /* M_k = c_k . p (Fisher scoring converges linearly) instead of exp(c_k . p) */
} problem;

static double model(const problem *pr, int k, const double *p)
{
    double e = 0.0;
    for (int i = 0; i < SW_RM_NPAR; ++i)
        e += pr->c[k][i] * p[i];
    return pr->identity ? e : exp(e);
}

/* A fixed problem: c_k[2] = 1 (the level, p[2] ~ ln 400), the other entries in [-0.5, 0.5]; the
 * data the model at p_true plus sqrt(M) z, rounded (z from a fixed sequence). */
static void make_problem(problem *pr, const double *p_true, int identity)
{
    uint64_t r = 987654321u;
    pr->identity = identity;
    for (int k = 0; k < K; ++k) {
        for (int i = 0; i < SW_RM_NPAR; ++i) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            pr->c[k][i] = i == 2 ? 1.0 : (double)(r >> 11) / 9007199254740992.0 - 0.5;
        }
        const double m = model(pr, k, p_true);
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
        const double m = model(pr, k, p), res = pr->d[k] - m;
        /* J_k = dM/dp: m c_k (log link) or c_k (identity), W_k = 1 / m */
        const double jw = pr->identity ? 1.0 / m : 1.0;
        for (int i = 0, q = 0; i < SW_RM_NPAR; ++i) {
            acc->g[i] += pr->c[k][i] * jw * res;
            for (int j = i; j < SW_RM_NPAR; ++j, ++q)
                acc->a[q] += (pr->identity ? 1.0 / m : m) * pr->c[k][i] * pr->c[k][j];
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

/* The maximum by Newton's method in double (sw_rm_solve: the full step, no damping), with the
 * Hessian: the Fisher matrix for the log link, sum D_k c_k c_k^T / M_k^2 for the identity. */
static void maximum(const problem *pr, const double *p0, double *p)
{
    for (int i = 0; i < SW_RM_NPAR; ++i)
        p[i] = p0[i];
    for (int it = 0; it < 100; ++it) {
        sw_rm_acc acc;
        sums(pr, p, &acc);
        if (pr->identity) {
            memset(acc.a, 0, sizeof acc.a);
            for (int k = 0; k < K; ++k) {
                const double m = model(pr, k, p);
                for (int i = 0, q = 0; i < SW_RM_NPAR; ++i)
                    for (int j = i; j < SW_RM_NPAR; ++j, ++q)
                        acc.a[q] += pr->d[k] / (m * m) * pr->c[k][i] * pr->c[k][j];
            }
        }
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

/* Fits of pr from starts n_size x 4 sign patterns of error bars away from its maximum ps: each
 * converges, within max_err of the error bars of ps. */
static void fits_from_starts(const problem *pr, const double *ps, const double *size, int n_size,
                             double max_err)
{
    const double sign[4][SW_RM_NPAR] = {
        {1, 1, 1, 1, 1}, {1, -1, 1, -1, 1}, {-1, 1, -1, 1, -1}, {-1, -1, 1, 1, -1}};
    sw_rm_acc a0;
    sums(pr, ps, &a0);
    double step0[SW_RM_NPAR] = {0}, inv[SW_RM_NPAR * SW_RM_NPAR] = {0};
    assert_true(sw_rm_solve(a0.a, 0.0, a0.g, step0, inv));
    for (int s = 0; s < 4; ++s)
        for (int z = 0; z < n_size; ++z) {
            double p0[SW_RM_NPAR];
            for (int i = 0; i < SW_RM_NPAR; ++i)
                p0[i] = ps[i] + sign[s][i] * size[z] * sqrt(inv[i * SW_RM_NPAR + i]);
            sw_rm_lm lm;
            sw_rm_lm_init(&lm, p0);
            int done = 0, passes = 0;
            while (!done) {
                sw_rm_acc acc;
                sums(pr, lm.trial, &acc);
                done = sw_rm_lm_next(&lm, &acc, 50);
                passes++;
            }
            const double err = distance(pr, lm.best, ps);
            print_message("# %s link, start %g error bars (signs %d): %d passes, %.2e error bars "
                          "from the maximum\n",
                          pr->identity ? "identity" : "log", size[z], s, passes, err);
            assert_false(lm.failed);
            assert_true(lm.converged);
            assert_true(passes <= 30);
            assert_true(err < max_err);
        }
}

/* The log link: Fisher scoring is Newton's method, the fit contracts fast. */
static void test_lm_stops_at_the_maximum(void **state)
{
    (void)state;
    const double p_true[SW_RM_NPAR] = {0.3, -0.2, log(400.0), 1.5, 0.7};
    problem pr;
    make_problem(&pr, p_true, 0);
    double ps[SW_RM_NPAR];
    maximum(&pr, p_true, ps);
    const double size[3] = {1.0, 5.0, 20.0};
    fits_from_starts(&pr, ps, size, 3, 3.3e-4);
}

/* The identity link at ~4 counts a pixel: Fisher scoring contracts linearly (the distance
 * shrinks ~5-fold a pass here). */
static void test_lm_slow_contraction(void **state)
{
    (void)state;
    const double p_true[SW_RM_NPAR] = {0.3, -0.2, 4.0, 1.5, 0.7};
    problem pr;
    make_problem(&pr, p_true, 1);
    double ps[SW_RM_NPAR];
    maximum(&pr, p_true, ps);
    const double size[2] = {1.0, 2.0};
    fits_from_starts(&pr, ps, size, 2, 5e-4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lm_stops_at_the_maximum),
        cmocka_unit_test(test_lm_slow_contraction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

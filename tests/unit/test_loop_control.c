/*
 * Calibration and control of the loop stage (loop.h, src/loop/calib.c and controller.c):
 *   - the interaction matrix of a synthetic system (slopes = D u, and D u plus an even term that
 *     push-pull cancels) equals D to float accuracy; a failing measurement stops it;
 *   - the control matrix: C D = I with every mode kept, C D = V_k V_k^T (a projector onto the
 *     kept modes, which come back orthonormal) otherwise; the kept count obeys max_condition and
 *     max_modes; the singular values are D's (checked against a matrix built with known ones and
 *     against the eigenvalues of D^T D); C's singular values are the reciprocals of the kept ones;
 *   - the controllers (seed 000 section 6): an integrator on a static aberration converges as
 *     (1 - g)^k and diverges for g > 2; the leaky integrator's fixed point g x* / (leak + g); PI
 *     with kp = 0 is the integrator; PI on a modal subspace leaves its orthogonal complement
 *     alone; the clip; a NaN input is refused with the state unchanged; bad parameters.
 */
#include "testutil.h"

#include <lapacke.h>
#undef I
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

static double unit_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static double sym_rand(uint64_t *s)
{
    return 2.0 * unit_rand(s) - 1.0;
}

/* n x k column-major with orthonormal columns (QR of a random matrix). */
static void orthonormal(int n, int k, uint64_t seed, double *Q)
{
    double tau[64];
    assert_true(k <= 64);
    for (int e = 0; e < n * k; e++)
        Q[e] = sym_rand(&seed);
    assert_int_equal(LAPACKE_dgeqrf(LAPACK_COL_MAJOR, n, k, Q, n, tau), 0);
    assert_int_equal(LAPACKE_dorgqr(LAPACK_COL_MAJOR, n, k, k, Q, n, tau), 0);
}

/* ------------------------------------------------------------------ interaction matrix */

typedef struct sys {
    int32_t nslopes, nact;
    const double *D; /* nslopes x nact column-major */
    const double *E; /* optional even term: slopes += E (u .^ 2) */
    int calls, fail_at;
} sys;

static sw_status measure(void *user, const float *u, float *s)
{
    sys *y = (sys *)user;
    if (++y->calls == y->fail_at)
        return sw_error_set(NULL, SW_EIO, "synthetic failure");
    for (int k = 0; k < y->nslopes; k++) {
        double v = 0.0;
        for (int a = 0; a < y->nact; a++) {
            v += y->D[(int64_t)a * y->nslopes + k] * u[a];
            if (y->E)
                v += y->E[(int64_t)a * y->nslopes + k] * (double)u[a] * u[a];
        }
        s[k] = (float)v;
    }
    return SW_OK;
}

static void test_interaction(void **state)
{
    (void)state;
    enum { NS = 30, NA = 12 };
    double D[NS * NA], E[NS * NA];
    uint64_t seed = 3;
    for (int e = 0; e < NS * NA; e++) {
        D[e] = sym_rand(&seed);
        E[e] = 5.0 * sym_rand(&seed);
    }
    float im[NS * NA];
    for (int even = 0; even < 2; even++) {
        sys y = {NS, NA, D, even ? E : NULL, 0, 0};
        assert_int_equal(sw_interaction_matrix(ctx, NA, NS, 0.05, measure, &y, im), SW_OK);
        assert_int_equal(y.calls, 2 * NA);
        /* float slopes of magnitude ~ amp |D| differenced and divided by 2 amp: ~1e-7 of |D|
         * each; a one-sided difference would be off by amp E = 0.25 with the even term */
        for (int e = 0; e < NS * NA; e++)
            assert_near(im[e], D[e], 2e-6);
    }
    /* a failing measurement stops the calibration with its status */
    sys y = {NS, NA, D, NULL, 0, 7};
    assert_int_equal(sw_interaction_matrix(ctx, NA, NS, 0.05, measure, &y, im), SW_EIO);
    assert_int_equal(y.calls, 7);
    /* bad input */
    y.fail_at = 0;
    assert_int_equal(sw_interaction_matrix(ctx, 0, NS, 0.05, measure, &y, im), SW_EINVAL);
    assert_int_equal(sw_interaction_matrix(ctx, NA, 0, 0.05, measure, &y, im), SW_EINVAL);
    assert_int_equal(sw_interaction_matrix(ctx, NA, NS, 0.0, measure, &y, im), SW_EINVAL);
    assert_int_equal(sw_interaction_matrix(ctx, NA, NS, NAN, measure, &y, im), SW_EINVAL);
    assert_int_equal(sw_interaction_matrix(ctx, NA, NS, INFINITY, measure, &y, im), SW_EINVAL);
    assert_int_equal(sw_interaction_matrix(ctx, NA, NS, 0.05, NULL, &y, im), SW_EINVAL);
    assert_int_equal(sw_interaction_matrix(ctx, NA, NS, 0.05, measure, &y, NULL), SW_EINVAL);
}

/* ------------------------------------------------------------------ control matrix */

/* P = C D (nact x nact, double) from cm (row-major nact x ns) and D (column-major ns x nact). */
static void cm_times_d(const float *cm, const double *D, int ns, int na, double *P)
{
    for (int a = 0; a < na; a++)
        for (int b = 0; b < na; b++) {
            double s = 0.0;
            for (int k = 0; k < ns; k++)
                s += (double)cm[a * ns + k] * D[b * ns + k];
            P[a * na + b] = s;
        }
}

/* Singular values of cm (nact x ns row-major), descending. */
static void cm_singular(const float *cm, int ns, int na, double *sv)
{
    double *A = malloc(sizeof(double) * ns * na);
    for (int e = 0; e < ns * na; e++)
        A[e] = cm[e]; /* row-major nact x ns = column-major ns x nact: same singular values */
    double *U = malloc(sizeof(double) * ns * ns), *VT = malloc(sizeof(double) * na * na);
    assert_int_equal(LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'N', ns, na, A, ns, sv, U, ns, VT, na), 0);
    free(A);
    free(U);
    free(VT);
}

/* Full rank, every mode kept: C D = I, C's singular values 1 / sigma, sigma^2 = the eigenvalues
 * of D^T D. */
static void test_control_full(void **state)
{
    (void)state;
    enum { NS = 30, NA = 12 };
    double D[NS * NA], P[NA * NA];
    float im[NS * NA], cm[NA * NS], modes[NA * NA];
    uint64_t seed = 17;
    for (int e = 0; e < NS * NA; e++) {
        im[e] = (float)sym_rand(&seed);
        D[e] = im[e];
    }
    double sing[NA];
    sw_cm_result res = {-1, sing, modes};
    assert_int_equal(sw_control_matrix(ctx, im, NS, NA, 0.0, 0, cm, &res), SW_OK);
    assert_int_equal(res.kept, NA);
    cm_times_d(cm, D, NS, NA, P);
    for (int a = 0; a < NA; a++)
        for (int b = 0; b < NA; b++)
            assert_near(P[a * NA + b], a == b ? 1.0 : 0.0, 1e-5);

    /* singular values: descending, their squares the eigenvalues of D^T D */
    double G[NA * NA], ev[NA];
    for (int a = 0; a < NA; a++)
        for (int b = 0; b < NA; b++) {
            double s = 0.0;
            for (int k = 0; k < NS; k++)
                s += D[a * NS + k] * D[b * NS + k];
            G[a * NA + b] = s;
        }
    assert_int_equal(LAPACKE_dsyev(LAPACK_COL_MAJOR, 'N', 'L', NA, G, NA, ev), 0); /* ascending */
    for (int i = 0; i < NA; i++) {
        if (i > 0)
            assert_true(sing[i] <= sing[i - 1]);
        assert_near(sing[i] * sing[i], ev[NA - 1 - i], 1e-10 * ev[NA - 1]);
    }
    double csv[NA];
    cm_singular(cm, NS, NA, csv);
    for (int i = 0; i < NA; i++) /* C's largest is 1 / D's smallest */
        assert_near(csv[i], 1.0 / sing[NA - 1 - i], 1e-5 * csv[i]);
    /* the modes: orthonormal */
    for (int i = 0; i < NA; i++)
        for (int j = 0; j < NA; j++) {
            double s = 0.0;
            for (int a = 0; a < NA; a++)
                s += (double)modes[i * NA + a] * modes[j * NA + a];
            assert_near(s, i == j ? 1.0 : 0.0, 1e-6);
        }
    /* NULL result is fine */
    assert_int_equal(sw_control_matrix(ctx, im, NS, NA, 0.0, 0, cm, NULL), SW_OK);
}

/* D = U diag(s) V^T with known s: max_condition and max_modes pick the kept count; C D =
 * V_k V_k^T = modes modes^T; C's nonzero singular values are 1 / s_i of the kept ones. */
static void test_control_truncation(void **state)
{
    (void)state;
    enum { NS = 24, NA = 8 };
    const double s[NA] = {100, 50, 20, 10, 5, 2, 1, 0.4};
    double U[NS * NA], V[NA * NA], D[NS * NA], P[NA * NA];
    orthonormal(NS, NA, 5, U);
    orthonormal(NA, NA, 6, V);
    float im[NS * NA], cm[NA * NS], modes[NA * NA];
    for (int a = 0; a < NA; a++)
        for (int k = 0; k < NS; k++) {
            double v = 0.0;
            for (int i = 0; i < NA; i++)
                v += U[i * NS + k] * s[i] * V[i * NA + a];
            im[a * NS + k] = (float)v;
            D[a * NS + k] = im[a * NS + k];
        }
    /* (condition, modes) -> kept: 100 / 30 = 3.33 keeps 100..5; 100 / 200 = 0.5 keeps all but
     * 0.4; 1000 keeps all; max_modes 3 and the condition's 5 -> 3 */
    const struct {
        double cond;
        int32_t modes, kept;
    } cases[] = {{30, 0, 5}, {200, 0, 7}, {1000, 0, 8}, {30, 3, 3}, {0, 6, 6}, {1, 0, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double sing[NA];
        sw_cm_result res = {-1, sing, modes};
        assert_int_equal(
            sw_control_matrix(ctx, im, NS, NA, cases[c].cond, cases[c].modes, cm, &res), SW_OK);
        const int kept = res.kept;
        assert_int_equal(kept, cases[c].kept);
        for (int i = 0; i < NA; i++)
            assert_near(sing[i], s[i], 2e-6 * s[0]);
        /* C D = modes modes^T, a projector of rank kept */
        cm_times_d(cm, D, NS, NA, P);
        double tr = 0.0;
        for (int a = 0; a < NA; a++) {
            tr += P[a * NA + a];
            for (int b = 0; b < NA; b++) {
                double m = 0.0;
                for (int i = 0; i < kept; i++)
                    m += (double)modes[i * NA + a] * modes[i * NA + b];
                assert_near(P[a * NA + b], m, 1e-5);
                /* and the kept modes span V's first columns: m = sum_i V_i V_i^T */
                double v = 0.0;
                for (int i = 0; i < kept; i++)
                    v += V[i * NA + a] * V[i * NA + b];
                assert_near(m, v, 1e-5);
            }
        }
        assert_near(tr, kept, 1e-5);
        double csv[NA];
        cm_singular(cm, NS, NA, csv);
        for (int i = 0; i < NA; i++)
            assert_near(csv[i], i < kept ? 1.0 / s[kept - 1 - i] : 0.0, 1e-5 / s[kept - 1]);
    }
}

/* A rank-deficient system (rank 5 of 12, in float): the truncation keeps 5 modes and C D is the
 * projector onto D's row space (D C D = D). */
static void test_control_rank_deficient(void **state)
{
    (void)state;
    enum { NS = 30, NA = 12, R = 5 };
    double A[NS * R], B[R * NA], D[NS * NA], P[NA * NA];
    float im[NS * NA], cm[NA * NS];
    uint64_t seed = 23;
    for (int e = 0; e < NS * R; e++)
        A[e] = sym_rand(&seed);
    for (int e = 0; e < R * NA; e++)
        B[e] = sym_rand(&seed);
    for (int a = 0; a < NA; a++)
        for (int k = 0; k < NS; k++) {
            double v = 0.0;
            for (int r = 0; r < R; r++)
                v += A[r * NS + k] * B[a * R + r];
            im[a * NS + k] = (float)v;
            D[a * NS + k] = im[a * NS + k];
        }
    double sing[NA];
    sw_cm_result res = {-1, sing, NULL};
    assert_int_equal(sw_control_matrix(ctx, im, NS, NA, 1e4, 0, cm, &res), SW_OK);
    assert_int_equal(res.kept, R);
    assert_true(sing[R] < 1e-5 * sing[0]); /* float rounding only */
    cm_times_d(cm, D, NS, NA, P);
    double tr = 0.0;
    for (int a = 0; a < NA; a++) {
        tr += P[a * NA + a];
        for (int b = 0; b < NA; b++) {
            assert_near(P[a * NA + b], P[b * NA + a], 1e-5); /* symmetric */
            double p2 = 0.0;
            for (int c = 0; c < NA; c++)
                p2 += P[a * NA + c] * P[c * NA + b];
            assert_near(p2, P[a * NA + b], 1e-5); /* idempotent */
        }
    }
    assert_near(tr, R, 1e-5);
    for (int k = 0; k < NS; k++) /* D (C D) = D */
        for (int b = 0; b < NA; b++) {
            double v = 0.0;
            for (int a = 0; a < NA; a++)
                v += D[a * NS + k] * P[a * NA + b];
            assert_near(v, D[b * NS + k], 1e-4);
        }
}

static void test_control_bad(void **state)
{
    (void)state;
    float im[6] = {1, 2, 3, 4, 5, 7}, cm[6];
    assert_int_equal(sw_control_matrix(ctx, im, 3, 2, 0.0, 0, cm, NULL), SW_OK);
    assert_int_equal(sw_control_matrix(ctx, im, 3, 2, 0.5, 0, cm, NULL), SW_EINVAL);
    assert_int_equal(sw_control_matrix(ctx, im, 3, 2, -1.0, 0, cm, NULL), SW_EINVAL);
    assert_int_equal(sw_control_matrix(ctx, im, 3, 2, NAN, 0, cm, NULL), SW_EINVAL);
    assert_int_equal(sw_control_matrix(ctx, im, 3, 2, 10.0, -1, cm, NULL), SW_EINVAL);
    assert_int_equal(sw_control_matrix(ctx, im, 0, 2, 10.0, 0, cm, NULL), SW_EINVAL);
    assert_int_equal(sw_control_matrix(ctx, im, 3, 0, 10.0, 0, cm, NULL), SW_EINVAL);
    assert_int_equal(sw_control_matrix(ctx, NULL, 3, 2, 10.0, 0, cm, NULL), SW_EINVAL);
    assert_int_equal(sw_control_matrix(ctx, im, 3, 2, 10.0, 0, NULL, NULL), SW_EINVAL);
    im[4] = NAN;
    assert_int_equal(sw_control_matrix(ctx, im, 3, 2, 10.0, 0, cm, NULL), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "slope 1, actuator 1"));
    /* all zero: nothing kept, C = 0 */
    memset(im, 0, sizeof im);
    sw_cm_result res = {-1, NULL, NULL};
    assert_int_equal(sw_control_matrix(ctx, im, 3, 2, 10.0, 0, cm, &res), SW_OK);
    assert_int_equal(res.kept, 0);
    for (int i = 0; i < 6; i++)
        assert_true(cm[i] == 0.0f);
}

/* ------------------------------------------------------------------ controllers */

static sw_controller *make(const sw_controller_params *p)
{
    sw_controller *c = NULL;
    assert_int_equal(sw_controller_create(ctx, p, &c), SW_OK);
    assert_non_null(c);
    return c;
}

/* Static aberration x*, perfect measurement r_k = x* - u_{k-1}: the error x* - u_k is (1 - g)^k
 * x* (an exact recursion; float rounding ~1e-7 per step). */
static void test_integrator_rate(void **state)
{
    (void)state;
    enum { N = 5 };
    const float xs[N] = {0.3f, -1.2f, 0.05f, 2.0f, -0.7f};
    const double gains[] = {0.1, 0.5, 1.0, 1.5, 1.9};
    for (int gi = 0; gi < 5; gi++) {
        sw_controller_params p;
        sw_controller_params_default(&p);
        p.nact = N;
        p.gain = gains[gi];
        sw_controller *c = make(&p);
        float u[N] = {0}, r[N];
        for (int k = 1; k <= 30; k++) {
            for (int a = 0; a < N; a++)
                r[a] = xs[a] - u[a];
            assert_int_equal(sw_controller_step(c, r, u), SW_OK);
            const double f = pow(1.0 - gains[gi], k);
            if (k == 1 || k == 5 || k == 12 || k == 30)
                for (int a = 0; a < N; a++)
                    assert_near(xs[a] - u[a], f * xs[a], 2e-6 * k);
        }
        sw_controller_destroy(c);
    }
    /* g = 2.5: |1 - g| = 1.5 per step, diverges */
    sw_controller_params p;
    sw_controller_params_default(&p);
    p.nact = N;
    p.gain = 2.5;
    sw_controller *c = make(&p);
    float u[N] = {0}, r[N];
    for (int k = 1; k <= 20; k++) {
        for (int a = 0; a < N; a++)
            r[a] = xs[a] - u[a];
        assert_int_equal(sw_controller_step(c, r, u), SW_OK);
    }
    for (int a = 0; a < N; a++)
        assert_true(fabs(xs[a] - u[a]) > 1000.0 * fabs(xs[a])); /* 1.5^20 = 3325 */
    sw_controller_destroy(c);
}

/* |r| after n frames of the real controller (one command) closing a loop with a d-frame delay
 * on a unit step disturbance: r_k = 1 - u_{k-d}. */
static double delayed_loop(double gain, double leak, int d, int n)
{
    sw_controller_params p;
    sw_controller_params_default(&p);
    p.nact = 1;
    p.kind = leak > 0.0 ? SW_CTRL_LEAKY : SW_CTRL_INTEGRATOR;
    p.gain = gain;
    p.leak = leak;
    sw_controller *c = make(&p);
    float ring[16] = {0}; /* u_{k-1} .. u_{k-d} */
    float r = 0.0f;
    for (int k = 1; k <= n; k++) {
        r = 1.0f - ring[(k - d + 16) % 16]; /* u_{k-d}, 0 before the first */
        float u;
        assert_int_equal(sw_controller_step(c, &r, &u), SW_OK);
        ring[k % 16] = u;
        if (!(fabsf(r) < 1e6f))
            break;
    }
    sw_controller_destroy(c);
    return fabs((double)r);
}

/* The stable range of the integrator with a delay (sw_controller_max_gain): the closed form
 * 2 sin(pi / (2 (2d - 1))) and the leaky bisection, checked on the loop itself: 5 % below the
 * limit the step response settles (|r| < 1), 5 % above it grows past 1e3 within 3000 frames (the
 * slowest root then grows by 1.006 a frame, d = 6). */
static void test_max_gain(void **state)
{
    (void)state;
    assert_near(sw_controller_max_gain(1, 0.0), 2.0, 1e-12);
    assert_near(sw_controller_max_gain(2, 0.0), 1.0, 1e-12);
    assert_near(sw_controller_max_gain(3, 0.0), (sqrt(5.0) - 1.0) / 2.0, 1e-12); /* 0.618... */
    assert_near(sw_controller_max_gain(1, 0.2), 1.8, 1e-9);                      /* z = 0.8 - g */
    assert_near(sw_controller_max_gain(2, 0.2), 1.0, 1e-9);                      /* |z|^2 = g */
    assert_true(isnan(sw_controller_max_gain(0, 0.0)));
    assert_true(isnan(sw_controller_max_gain(2, 1.0)));
    assert_true(isnan(sw_controller_max_gain(2, -0.1)));
    for (int d = 1; d <= 6; d++) {
        const double leaks[] = {0.0, 0.01, 0.2};
        for (int li = 0; li < 3; li++) {
            const double g = sw_controller_max_gain(d, leaks[li]);
            assert_true(g > 0.0 && g <= 2.0);
            if (d == 1) /* z = (1 - leak) - g */
                assert_near(g, 2.0 - leaks[li], 1e-9);
            else if (d >= 3 && leaks[li] > 0.0) /* a leak widens the range a little */
                assert_true(g > sw_controller_max_gain(d, 0.0));
            const double below = delayed_loop(0.95 * g, leaks[li], d, 3000);
            const double above = delayed_loop(1.05 * g, leaks[li], d, 3000);
            if (!(below < 1.0) || !(above > 1e3))
                fail_msg("d = %d, leak %g, g_max %.6f: |r| %.3g at 0.95 g_max, %.3g at 1.05", d,
                         leaks[li], g, below, above);
        }
    }
}

/* Leaky: u = (1 - leak) u + g (x* - u) converges to g x* / (leak + g). */
static void test_leaky_fixed_point(void **state)
{
    (void)state;
    const double cases[][2] = {{0.5, 0.05}, {0.3, 0.2}, {1.2, 0.01}};
    for (int t = 0; t < 3; t++) {
        sw_controller_params p;
        sw_controller_params_default(&p);
        p.kind = SW_CTRL_LEAKY;
        p.nact = 3;
        p.gain = cases[t][0];
        p.leak = cases[t][1];
        sw_controller *c = make(&p);
        const float xs[3] = {1.0f, -0.4f, 2.5f};
        float u[3] = {0}, r[3];
        for (int k = 0; k < 2000; k++) {
            for (int a = 0; a < 3; a++)
                r[a] = xs[a] - u[a];
            assert_int_equal(sw_controller_step(c, r, u), SW_OK);
        }
        for (int a = 0; a < 3; a++)
            assert_near(u[a], p.gain * xs[a] / (p.leak + p.gain), 1e-5);
        sw_controller_destroy(c);
    }
}

/* PI with kp = 0 and ki = g (identity basis, and an orthonormal basis of the whole space) gives
 * the integrator's commands for any input sequence; with kp != 0 the commands are
 * B (kp e + ki sum e), checked in double. */
static void test_pi_integrator(void **state)
{
    (void)state;
    enum { N = 6 };
    double Bd[N * N];
    orthonormal(N, N, 41, Bd);
    float B[N * N];
    for (int e = 0; e < N * N; e++)
        B[e] = (float)Bd[e];
    sw_controller_params pi;
    sw_controller_params_default(&pi);
    pi.kind = SW_CTRL_PI;
    pi.nact = N;
    pi.gain = 0.4;
    sw_controller_params in = pi;
    in.kind = SW_CTRL_INTEGRATOR;
    for (int basis = 0; basis < 2; basis++) {
        pi.modes = basis ? B : NULL;
        pi.nmodes = basis ? N : 0;
        sw_controller *a = make(&pi), *b = make(&in);
        uint64_t seed = 99;
        float r[N], ua[N], ub[N];
        for (int k = 0; k < 50; k++) {
            for (int i = 0; i < N; i++)
                r[i] = (float)sym_rand(&seed);
            assert_int_equal(sw_controller_step(a, r, ua), SW_OK);
            assert_int_equal(sw_controller_step(b, r, ub), SW_OK);
            for (int i = 0; i < N; i++)
                assert_near(ua[i], ub[i], 1e-5);
        }
        sw_controller_destroy(a);
        sw_controller_destroy(b);
    }
    /* kp, ki per mode, in the basis B: u = B (kp e + ki I) */
    const float kp[N] = {0.1f, 0.2f, 0.0f, 0.5f, 0.3f, 0.05f};
    const float ki[N] = {0.3f, 0.1f, 0.6f, 0.2f, 0.0f, 0.4f};
    pi.modes = B;
    pi.nmodes = N;
    pi.kp = kp;
    pi.ki = ki;
    sw_controller *a = make(&pi);
    double integ[N] = {0};
    uint64_t seed = 7;
    float r[N], u[N];
    for (int k = 0; k < 20; k++) {
        for (int i = 0; i < N; i++)
            r[i] = (float)sym_rand(&seed);
        assert_int_equal(sw_controller_step(a, r, u), SW_OK);
        double v[N];
        for (int m = 0; m < N; m++) {
            double e = 0.0;
            for (int i = 0; i < N; i++)
                e += B[m * N + i] * (double)r[i];
            integ[m] += e;
            v[m] = kp[m] * e + ki[m] * integ[m];
        }
        for (int i = 0; i < N; i++) {
            double x = 0.0;
            for (int m = 0; m < N; m++)
                x += B[m * N + i] * v[m];
            assert_near(u[i], x, 1e-5);
        }
    }
    sw_controller_destroy(a);
}

/* PI on a 2-mode subspace of 6 commands: the commands stay in the subspace whatever the input,
 * and the input's component in the orthogonal complement changes nothing (a twin fed only the
 * input's projection onto the subspace gives the same commands). */
static void test_pi_subspace(void **state)
{
    (void)state;
    enum { N = 6, M = 2 };
    double Q[N * N];
    orthonormal(N, N, 8, Q); /* first M columns: the modes; the rest: the complement */
    float B[N * M];
    for (int e = 0; e < N * M; e++)
        B[e] = (float)Q[e];
    sw_controller_params p;
    sw_controller_params_default(&p);
    p.kind = SW_CTRL_PI;
    p.nact = N;
    p.gain = 0.5;
    p.nmodes = M;
    p.modes = B;
    const float kp[M] = {0.2f, 0.1f};
    p.kp = kp;
    sw_controller *c = make(&p), *twin = make(&p);
    uint64_t seed = 5;
    float r[N], rp[N], u[N], v[N];
    for (int k = 0; k < 20; k++) {
        for (int i = 0; i < N; i++)
            r[i] = (float)sym_rand(&seed);
        if (k % 3 == 2) /* now and then an input wholly in the complement */
            for (int i = 0; i < N; i++)
                r[i] = (float)(0.7 * Q[3 * N + i] - 1.1 * Q[5 * N + i]);
        for (int i = 0; i < N; i++) { /* rp = Q_M Q_M^T r */
            double x = 0.0;
            for (int m = 0; m < M; m++) {
                double e = 0.0;
                for (int j = 0; j < N; j++)
                    e += Q[m * N + j] * r[j];
                x += Q[m * N + i] * e;
            }
            rp[i] = (float)x;
        }
        assert_int_equal(sw_controller_step(c, r, u), SW_OK);
        assert_int_equal(sw_controller_step(twin, rp, v), SW_OK);
        for (int i = 0; i < N; i++)
            assert_near(u[i], v[i], 1e-5);
        for (int j = M; j < N; j++) { /* no component along the complement */
            double d = 0.0;
            for (int i = 0; i < N; i++)
                d += Q[j * N + i] * u[i];
            assert_near(d, 0.0, 1e-5);
        }
    }
    sw_controller_destroy(c);
    sw_controller_destroy(twin);
}

static void test_clip_nan_reset(void **state)
{
    (void)state;
    for (int kind = 0; kind < 3; kind++) {
        sw_controller_params p;
        sw_controller_params_default(&p);
        p.kind = (sw_controller_kind)kind;
        p.nact = 4;
        p.gain = 0.5;
        p.clip = 0.3;
        sw_controller *c = make(&p), *twin = make(&p);
        const float big[4] = {2.0f, -3.0f, 0.1f, 0.0f};
        float u[4], v[4];
        for (int k = 0; k < 5; k++) {
            assert_int_equal(sw_controller_step(c, big, u), SW_OK);
            assert_int_equal(sw_controller_step(twin, big, v), SW_OK);
            for (int i = 0; i < 4; i++)
                assert_true(fabsf(u[i]) <= 0.3f);
        }
        assert_true(u[0] == 0.3f); /* saturated */
        assert_true(u[1] == -0.3f);
        assert_true(fabsf(u[2]) < 0.3f); /* not (yet) saturated: 5 x 0.05 */
        /* NaN and infinity refused, state unchanged: c and its twin continue alike */
        float bad[4] = {0.1f, NAN, 0.0f, 0.0f};
        assert_int_equal(sw_controller_step(c, bad, u), SW_ERANGE);
        bad[1] = INFINITY;
        assert_int_equal(sw_controller_step(c, bad, u), SW_ERANGE);
        const float r[4] = {-0.2f, 0.4f, 0.05f, 0.01f};
        assert_int_equal(sw_controller_step(c, r, u), SW_OK);
        assert_int_equal(sw_controller_step(twin, r, v), SW_OK);
        for (int i = 0; i < 4; i++)
            assert_true(u[i] == v[i]);
        /* reset: as new */
        sw_controller_reset(c);
        sw_controller *fresh = make(&p);
        assert_int_equal(sw_controller_step(c, r, u), SW_OK);
        assert_int_equal(sw_controller_step(fresh, r, v), SW_OK);
        for (int i = 0; i < 4; i++)
            assert_true(u[i] == v[i]);
        sw_controller_destroy(c);
        sw_controller_destroy(twin);
        sw_controller_destroy(fresh);
    }
}

static void test_controller_bad(void **state)
{
    (void)state;
    sw_controller_kind k;
    assert_string_equal(sw_controller_kind_string(SW_CTRL_INTEGRATOR), "integrator");
    assert_string_equal(sw_controller_kind_string(SW_CTRL_LEAKY), "leaky");
    assert_string_equal(sw_controller_kind_string(SW_CTRL_PI), "pi");
    assert_int_equal(sw_controller_kind_parse("PI", &k), SW_OK);
    assert_int_equal(k, SW_CTRL_PI);
    assert_int_equal(sw_controller_kind_parse("leaky", &k), SW_OK);
    assert_int_equal(k, SW_CTRL_LEAKY);
    assert_int_equal(sw_controller_kind_parse("pid", &k), SW_EINVAL);

    sw_controller_params d;
    sw_controller_params_default(&d);
    assert_int_equal(d.kind, SW_CTRL_INTEGRATOR);
    assert_int_equal(d.nact, 0);
    assert_near(d.gain, 0.5, 0.0);
    assert_near(d.leak, 0.01, 0.0);
    assert_near(d.clip, 0.0, 0.0);
    assert_null(d.modes);

    sw_controller *c = (sw_controller *)&d;
    assert_int_equal(sw_controller_create(ctx, &d, &c), SW_EINVAL); /* nact 0 */
    assert_null(c);
    d.nact = 4;
    sw_controller_params p = d;
    p.gain = NAN;
    assert_int_equal(sw_controller_create(ctx, &p, &c), SW_EINVAL);
    p = d;
    p.kind = SW_CTRL_LEAKY;
    p.leak = 1.0;
    assert_int_equal(sw_controller_create(ctx, &p, &c), SW_EINVAL);
    p.leak = -0.1;
    assert_int_equal(sw_controller_create(ctx, &p, &c), SW_EINVAL);
    p = d;
    p.clip = -1.0;
    assert_int_equal(sw_controller_create(ctx, &p, &c), SW_EINVAL);
    p = d;
    p.kind = (sw_controller_kind)9;
    assert_int_equal(sw_controller_create(ctx, &p, &c), SW_EINVAL);
    float B[4 * 5] = {0};
    p = d;
    p.kind = SW_CTRL_PI;
    p.modes = B;
    p.nmodes = 5; /* more modes than commands */
    assert_int_equal(sw_controller_create(ctx, &p, &c), SW_EINVAL);
    p.nmodes = 0;
    assert_int_equal(sw_controller_create(ctx, &p, &c), SW_EINVAL);
    p.nmodes = 2;
    B[3] = NAN;
    assert_int_equal(sw_controller_create(ctx, &p, &c), SW_EINVAL);
    B[3] = 0.0f;
    const float kp[2] = {0.1f, NAN};
    p.kp = kp;
    assert_int_equal(sw_controller_create(ctx, &p, &c), SW_EINVAL);
    assert_int_equal(sw_controller_create(ctx, NULL, &c), SW_EINVAL);
    assert_int_equal(sw_controller_create(ctx, &d, NULL), SW_EINVAL);
    c = make(&d);
    float r[4] = {0}, u[4];
    assert_int_equal(sw_controller_step(c, NULL, u), SW_EINVAL);
    assert_int_equal(sw_controller_step(c, r, NULL), SW_EINVAL);
    assert_int_equal(sw_controller_step(NULL, r, u), SW_EINVAL);
    sw_controller_destroy(c);
    sw_controller_destroy(NULL);
    sw_controller_reset(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interaction),        cmocka_unit_test(test_control_full),
        cmocka_unit_test(test_control_truncation), cmocka_unit_test(test_control_rank_deficient),
        cmocka_unit_test(test_control_bad),        cmocka_unit_test(test_integrator_rate),
        cmocka_unit_test(test_leaky_fixed_point),  cmocka_unit_test(test_pi_integrator),
        cmocka_unit_test(test_pi_subspace),        cmocka_unit_test(test_clip_nan_reset),
        cmocka_unit_test(test_controller_bad),     cmocka_unit_test(test_max_gain),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * The Zernike basis (zernike_basis.c) and coefficient files (zernike_io.c): orthonormality over
 * the unit disc (exact Gauss-Legendre x uniform-angle quadrature, and a plain Cartesian grid),
 * OSA/Noll index conversions against Noll's (1976) table, gradients against finite differences
 * (the origin included), closed forms of low-order terms, the RMS identity, and CSV round trips
 * and malformed files.
 */
#include "testutil.h"

#include "spotwave/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI        3.14159265358979323846
#define MAX_COUNT 231 /* OSA indices up to order 20 */

static double uniform(uint64_t i)
{
    sw_rng4 r = sw_rng_draw(20240607, SW_RNG_STREAM_TEST, i);
    return sw_rng_u01(r.v[0], r.v[1]);
}

static double normal(uint64_t i)
{
    double z0, z1;
    sw_rng_normal2(sw_rng_draw(777, SW_RNG_STREAM_TEST, i), &z0, &z1);
    return z0;
}

/* A random point in the disc of radius rmax (uniform in area). */
static void random_point(uint64_t i, double rmax, double *x, double *y)
{
    double r = rmax * sqrt(uniform(2 * i)), t = 2 * PI * uniform(2 * i + 1);
    *x = r * cos(t);
    *y = r * sin(t);
}

/* Gauss-Legendre nodes and weights on [-1, 1] (Newton on the Legendre recurrence). */
static void gauss_legendre(int n, double *x, double *w)
{
    for (int i = 0; i < n; i++) {
        double z = cos(PI * (i + 0.75) / (n + 0.5)), dp = 0;
        for (int it = 0; it < 100; it++) {
            double p0 = 1, p1 = z;
            for (int k = 2; k <= n; k++) {
                double p2 = ((2 * k - 1) * z * p1 - (k - 1) * p0) / k;
                p0 = p1;
                p1 = p2;
            }
            if (n == 1)
                p0 = 1, p1 = z;
            dp = n * (z * p1 - p0) / (z * z - 1);
            double dz = p1 / dp;
            z -= dz;
            if (fabs(dz) < 1e-15)
                break;
        }
        x[i] = z;
        w[i] = 2 / ((1 - z * z) * dp * dp);
    }
}

/*
 * A quadrature of the disc mean: points (x, y) and weights summing to 1, exact for polynomials
 * in (x, y) of degree <= 2 nr - 2 whose angular frequencies are below nt.
 */
typedef struct quad {
    int n;
    double *x, *y, *w;
} quad;

static quad disc_quadrature(int nr, int nt)
{
    quad q;
    q.n = nr * nt;
    q.x = malloc(sizeof(double) * q.n);
    q.y = malloc(sizeof(double) * q.n);
    q.w = malloc(sizeof(double) * q.n);
    double *gx = malloc(sizeof(double) * nr), *gw = malloc(sizeof(double) * nr);
    assert_non_null(q.x);
    assert_non_null(q.y);
    assert_non_null(q.w);
    assert_non_null(gx);
    assert_non_null(gw);
    gauss_legendre(nr, gx, gw);
    for (int i = 0; i < nr; i++) {
        double rho = 0.5 * (gx[i] + 1), wr = 0.5 * gw[i];
        for (int t = 0; t < nt; t++) {
            double th = 2 * PI * (t + 0.5) / nt;
            int k = i * nt + t;
            q.x[k] = rho * cos(th);
            q.y[k] = rho * sin(th);
            q.w[k] = wr * rho * 2.0 / nt; /* (1 / pi) * rho drho dtheta */
        }
    }
    free(gx);
    free(gw);
    return q;
}

static void quad_free(quad *q)
{
    free(q->x);
    free(q->y);
    free(q->w);
}

/* max |G - I| of the Gram matrix of OSA terms 0 .. count-1 under the point weights. */
static double gram_error(int count, int npts, const double *x, const double *y, const double *w)
{
    double *G = calloc((size_t)count * count, sizeof *G);
    double *z = malloc(sizeof(double) * count);
    assert_non_null(G);
    assert_non_null(z);
    for (int p = 0; p < npts; p++) {
        for (int j = 0; j < count; j++) {
            int n, m;
            assert_int_equal(sw_zernike_osa_nm(j, &n, &m), SW_OK);
            z[j] = sw_zernike_eval(n, m, x[p], y[p]);
        }
        for (int a = 0; a < count; a++) {
            double wa = w[p] * z[a];
            for (int b = a; b < count; b++)
                G[a * count + b] += wa * z[b];
        }
    }
    double err = 0;
    for (int a = 0; a < count; a++)
        for (int b = a; b < count; b++)
            err = fmax(err, fabs(G[a * count + b] - (a == b ? 1.0 : 0.0)));
    free(G);
    free(z);
    return err;
}

static void test_gram_exact_quadrature(void **state)
{
    (void)state;
    /* Order 8 (45 terms): degree 17 in rho with the Jacobian, frequencies up to 16. */
    quad q = disc_quadrature(12, 40);
    double e8 = gram_error(sw_zernike_count(8), q.n, q.x, q.y, q.w);
    assert_int_equal(sw_zernike_count(8), 45);
    quad_free(&q);
    assert_true(e8 < 1e-9);
    /* All 231 terms up to order 20: exercises the radial coefficients at their largest. */
    q = disc_quadrature(24, 48);
    double e20 = gram_error(sw_zernike_count(20), q.n, q.x, q.y, q.w);
    quad_free(&q);
    assert_true(e20 < 1e-9);
}

static void test_gram_cartesian_grid(void **state)
{
    (void)state;
    /* Cell centres of a 2000 x 2000 grid over [-1, 1]^2 that fall in the disc, equal weights. */
    const int N = 2000;
    int cap = N * N, np = 0;
    double *x = malloc(sizeof(double) * cap), *y = malloc(sizeof(double) * cap);
    assert_non_null(x);
    assert_non_null(y);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < N; c++) {
            double u = -1 + (c + 0.5) * 2.0 / N, v = -1 + (r + 0.5) * 2.0 / N;
            if (u * u + v * v <= 1) {
                x[np] = u;
                y[np] = v;
                np++;
            }
        }
    double *w = malloc(sizeof(double) * np);
    assert_non_null(w);
    for (int i = 0; i < np; i++)
        w[i] = 1.0 / np;
    double e = gram_error(45, np, x, y, w);
    free(x);
    free(y);
    free(w);
    assert_true(e < 1e-3);
}

static void test_noll_table(void **state)
{
    (void)state;
    /* Noll (1976), Table I. */
    static const int noll[][3] = {
        {1, 0, 0},   {2, 1, 1},   {3, 1, -1},    {4, 2, 0},     {5, 2, -2},  {6, 2, 2},
        {7, 3, -1},  {8, 3, 1},   {9, 3, -3},    {10, 3, 3},    {11, 4, 0},  {12, 4, 2},
        {13, 4, -2}, {14, 4, 4},  {15, 4, -4},   {16, 5, 1},    {17, 5, -1}, {18, 5, 3},
        {19, 5, -3}, {20, 5, 5},  {21, 5, -5},   {22, 6, 0},    {23, 6, -2}, {24, 6, 2},
        {25, 6, -4}, {26, 6, 4},  {27, 6, -6},   {28, 6, 6},    {29, 7, -1}, {30, 7, 1},
        {37, 8, 0},  {56, 10, 0}, {230, 20, 20}, {231, 20, -20}};
    for (size_t i = 0; i < sizeof noll / sizeof noll[0]; i++) {
        int n = -9, m = -9;
        assert_int_equal(sw_zernike_noll_nm(noll[i][0], &n, &m), SW_OK);
        assert_int_equal(n, noll[i][1]);
        assert_int_equal(m, noll[i][2]);
        assert_int_equal(sw_zernike_noll(noll[i][1], noll[i][2]), noll[i][0]);
    }
    /* OSA/ANSI: j = (n (n + 2) + m) / 2, ordered by n, then m from -n to n. */
    static const int osa[][3] = {{0, 0, 0},  {1, 1, -1}, {2, 1, 1},     {3, 2, -2},    {4, 2, 0},
                                 {5, 2, 2},  {6, 3, -3}, {7, 3, -1},    {8, 3, 1},     {9, 3, 3},
                                 {12, 4, 0}, {24, 6, 0}, {230, 20, 20}, {210, 20, -20}};
    for (size_t i = 0; i < sizeof osa / sizeof osa[0]; i++) {
        int n = -9, m = -9;
        assert_int_equal(sw_zernike_osa_nm(osa[i][0], &n, &m), SW_OK);
        assert_int_equal(n, osa[i][1]);
        assert_int_equal(m, osa[i][2]);
        assert_int_equal(sw_zernike_osa(osa[i][1], osa[i][2]), osa[i][0]);
    }
    assert_int_equal(sw_zernike_count(0), 1);
    assert_int_equal(sw_zernike_count(2), 6);
    assert_int_equal(sw_zernike_count(20), MAX_COUNT);
    assert_int_equal(sw_zernike_count(-1), 0);
}

static void test_index_round_trips(void **state)
{
    (void)state;
    int seen_osa[MAX_COUNT] = {0}, seen_noll[MAX_COUNT + 1] = {0};
    int count = 0;
    for (int n = 0; n <= 20; n++)
        for (int m = -n; m <= n; m += 2) {
            assert_true(sw_zernike_valid(n, m));
            int j = sw_zernike_osa(n, m);
            assert_int_equal(j, (n * (n + 2) + m) / 2);
            assert_in_range(j, 0, MAX_COUNT - 1);
            seen_osa[j]++;
            int nn, mm;
            assert_int_equal(sw_zernike_osa_nm(j, &nn, &mm), SW_OK);
            assert_int_equal(nn, n);
            assert_int_equal(mm, m);
            int k = sw_zernike_noll(n, m);
            assert_in_range(k, n * (n + 1) / 2 + 1, (n + 1) * (n + 2) / 2);
            seen_noll[k]++;
            assert_int_equal(sw_zernike_noll_nm(k, &nn, &mm), SW_OK);
            assert_int_equal(nn, n);
            assert_int_equal(mm, m);
            /* Noll's parity rule. */
            if (m > 0)
                assert_int_equal(k % 2, 0);
            if (m < 0)
                assert_int_equal(k % 2, 1);
            /* Within an order, Noll's index does not decrease with |m|. */
            if (abs(m) >= 2) {
                int lower = sw_zernike_noll(n, abs(m) - 2);
                assert_true(k > lower);
            }
            count++;
        }
    assert_int_equal(count, MAX_COUNT);
    for (int j = 0; j < MAX_COUNT; j++)
        assert_int_equal(seen_osa[j], 1);
    for (int j = 1; j <= MAX_COUNT; j++)
        assert_int_equal(seen_noll[j], 1);
    /* Every j of both orderings converts and comes back. */
    for (int j = 0; j < MAX_COUNT; j++) {
        int n, m;
        assert_int_equal(sw_zernike_osa_nm(j, &n, &m), SW_OK);
        assert_int_equal(sw_zernike_osa(n, m), j);
        assert_int_equal(sw_zernike_noll_nm(j + 1, &n, &m), SW_OK);
        assert_int_equal(sw_zernike_noll(n, m), j + 1);
    }

    /* Invalid pairs and indices. */
    static const int bad[][2] = {{2, 1},  {3, 0},  {1, 2}, {2, -4}, {-1, 1}, {-2, 0},
                                 {21, 1}, {22, 0}, {0, 1}, {5, 7},  {4, -3}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int n = bad[i][0], m = bad[i][1];
        assert_false(sw_zernike_valid(n, m));
        assert_int_equal(sw_zernike_osa(n, m), -1);
        assert_int_equal(sw_zernike_noll(n, m), -1);
        assert_true(isnan(sw_zernike_eval(n, m, 0.3, 0.2)));
        double v = 0, gx = 0, gy = 0;
        sw_zernike_eval_grad(n, m, 0.3, 0.2, &v, &gx, &gy);
        assert_true(isnan(v) && isnan(gx) && isnan(gy));
    }
    int n, m;
    assert_int_equal(sw_zernike_osa_nm(-1, &n, &m), SW_EINVAL);
    assert_int_equal(sw_zernike_osa_nm(MAX_COUNT, &n, &m), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(NULL), "231"));
    assert_int_equal(sw_zernike_noll_nm(0, &n, &m), SW_EINVAL);
    assert_int_equal(sw_zernike_noll_nm(MAX_COUNT + 1, &n, &m), SW_EINVAL);
    assert_int_equal(sw_zernike_noll_nm(-5, &n, &m), SW_EINVAL);
    assert_int_equal(sw_zernike_osa_nm(3, NULL, &m), SW_EINVAL);
    assert_int_equal(sw_zernike_noll_nm(3, &n, NULL), SW_EINVAL);
}

/*
 * Central finite differences of order 2P: f'(0) ~ sum_{k=1}^{P} w_k (f(k h) - f(-k h)) / h with
 * w_k = (-1)^(k+1) (P!)^2 / (k (P-k)! (P+k)!). With P = 10 the rule is exact for polynomials of
 * degree <= 20 along the line, so h can be large and the result is limited only by the rounding
 * of the values (a plain 3-point difference at n = 20 loses ~1e-5 to rounding or truncation).
 */
#define FD_P 10
static void fd_grad(int n, int m, double x, double y, double *gx, double *gy)
{
    const double h = 0.02;
    double sx = 0, sy = 0;
    for (int k = 1; k <= FD_P; k++) {
        double w = (k % 2 ? 1.0 : -1.0) / k;
        for (int i = 1; i <= k; i++) /* (P!)^2 / ((P-k)! (P+k)!) = prod_{i=1}^{k} (P-k+i)/(P+i) */
            w *= (double)(FD_P - k + i) / (double)(FD_P + i);
        sx += w * (sw_zernike_eval(n, m, x + k * h, y) - sw_zernike_eval(n, m, x - k * h, y));
        sy += w * (sw_zernike_eval(n, m, x, y + k * h) - sw_zernike_eval(n, m, x, y - k * h));
    }
    *gx = sx / h;
    *gy = sy / h;
}

static void test_gradient_finite_differences(void **state)
{
    (void)state;
    double worst = 0;
    for (int p = 0; p < 26; p++) {
        double x, y;
        if (p == 0)
            x = y = 0; /* the origin */
        else if (p == 1)
            x = 1, y = 0;
        else if (p == 2)
            x = -0.6, y = 0.8; /* on the rim */
        else if (p == 3)
            x = 1.1, y = -0.5; /* outside: the polynomial goes on */
        else
            random_point((uint64_t)p, 1.0, &x, &y);
        for (int j = 0; j < MAX_COUNT; j++) {
            int n, m;
            assert_int_equal(sw_zernike_osa_nm(j, &n, &m), SW_OK);
            double v, gx, gy, fx, fy;
            sw_zernike_eval_grad(n, m, x, y, &v, &gx, &gy);
            assert_true(isfinite(v) && isfinite(gx) && isfinite(gy));
            assert_near(v, sw_zernike_eval(n, m, x, y), 0.0); /* same path, same bits */
            fd_grad(n, m, x, y, &fx, &fy);
            double scale = fmax(1.0, hypot(gx, gy));
            double err = fmax(fabs(fx - gx), fabs(fy - gy)) / scale;
            if (err > 1e-6)
                fail_msg("Z(%d,%d) at (%.17g,%.17g): gradient (%.12g, %.12g), differences (%.12g, "
                         "%.12g)",
                         n, m, x, y, gx, gy, fx, fy);
            worst = fmax(worst, err);
        }
    }
    assert_true(worst < 1e-6);

    /* Exact gradients: Z(1,1) = 2x and Z(1,-1) = 2y everywhere, the origin included;
     * Z(3,1) = sqrt(8) (3 rho^2 - 2) x has gradient (-2 sqrt(8), 0) at the origin;
     * Z(2,0) = sqrt(3) (2 rho^2 - 1) has zero gradient there. */
    for (int p = 0; p < 20; p++) {
        double x = 0, y = 0, v, gx, gy;
        if (p > 0)
            random_point(100 + (uint64_t)p, 1.5, &x, &y);
        sw_zernike_eval_grad(1, 1, x, y, &v, &gx, &gy);
        assert_near(v, 2 * x, 1e-15);
        assert_near(gx, 2.0, 1e-15);
        assert_near(gy, 0.0, 0.0);
        sw_zernike_eval_grad(1, -1, x, y, &v, &gx, &gy);
        assert_near(v, 2 * y, 1e-15);
        assert_near(gx, 0.0, 0.0);
        assert_near(gy, 2.0, 1e-15);
    }
    double v, gx, gy;
    sw_zernike_eval_grad(3, 1, 0, 0, &v, &gx, &gy);
    assert_near(v, 0, 0);
    assert_near(gx, -2 * sqrt(8.0), 1e-14);
    assert_near(gy, 0, 0);
    sw_zernike_eval_grad(3, -1, 0, 0, &v, &gx, &gy);
    assert_near(gx, 0, 0);
    assert_near(gy, -2 * sqrt(8.0), 1e-14);
    sw_zernike_eval_grad(2, 0, 0, 0, &v, &gx, &gy);
    assert_near(v, -sqrt(3.0), 1e-15);
    assert_near(gx, 0, 0);
    assert_near(gy, 0, 0);
    /* NULL outputs are allowed. */
    sw_zernike_eval_grad(2, 2, 0.3, 0.4, NULL, &gx, NULL);
    assert_near(gx, sqrt(6.0) * 2 * 0.3, 1e-14);
}

static void test_closed_forms(void **state)
{
    (void)state;
    for (int p = 0; p < 200; p++) {
        double x, y;
        random_point(1000 + (uint64_t)p, 1.2, &x, &y);
        double r = hypot(x, y), t = atan2(y, x), r2 = r * r;
        assert_near(sw_zernike_eval(0, 0, x, y), 1.0, 0.0);
        assert_near(sw_zernike_eval(2, 0, x, y), sqrt(3.0) * (2 * r2 - 1), 1e-13);
        assert_near(sw_zernike_eval(2, 2, x, y), sqrt(6.0) * r2 * cos(2 * t), 1e-13);
        assert_near(sw_zernike_eval(2, -2, x, y), sqrt(6.0) * r2 * sin(2 * t), 1e-13);
        assert_near(sw_zernike_eval(3, -1, x, y), sqrt(8.0) * (3 * r2 * r - 2 * r) * sin(t), 1e-13);
        assert_near(sw_zernike_eval(3, 3, x, y), sqrt(8.0) * r2 * r * cos(3 * t), 1e-13);
        assert_near(sw_zernike_eval(4, 0, x, y), sqrt(5.0) * (6 * r2 * r2 - 6 * r2 + 1), 1e-13);
        assert_near(sw_zernike_eval(4, -2, x, y), sqrt(10.0) * (4 * r2 * r2 - 3 * r2) * sin(2 * t),
                    1e-13);
        /* R_6^0 = 20 rho^6 - 30 rho^4 + 12 rho^2 - 1 */
        assert_near(sw_zernike_eval(6, 0, x, y),
                    sqrt(7.0) * (20 * r2 * r2 * r2 - 30 * r2 * r2 + 12 * r2 - 1), 1e-12);
    }
    /* R_n^k(1) = 1 for every term, so on the rim at theta = 0 the value is the normalisation. */
    for (int n = 0; n <= 20; n++)
        for (int m = -n; m <= n; m += 2) {
            double norm = m == 0 ? sqrt(n + 1.0) : sqrt(2.0 * (n + 1));
            if (m >= 0)
                assert_near(sw_zernike_eval(n, m, 1.0, 0.0), norm, 1e-12 * norm);
            else /* sin(|m| pi / (2 |m|)) = 1 at theta = pi / (2 |m|) */
                assert_near(sw_zernike_eval(n, m, cos(PI / (2 * abs(m))), sin(PI / (2 * abs(m)))),
                            norm, 1e-9 * norm); /* x, y not exact: the sum cancels */
        }
}

static void test_sum_and_rms(void **state)
{
    (void)state;
    const int count = 28; /* up to order 6 */
    double c[MAX_COUNT + 1];
    for (int j = 0; j < count; j++)
        c[j] = normal((uint64_t)j);

    /* The sum equals the sum of the terms, values and gradients. */
    for (int p = 0; p < 30; p++) {
        double x, y;
        if (p == 0)
            x = y = 0;
        else
            random_point(2000 + (uint64_t)p, 1.0, &x, &y);
        double v, gx, gy, sv = 0, sx = 0, sy = 0;
        sw_zernike_sum_grad(c, count, x, y, &v, &gx, &gy);
        for (int j = 0; j < count; j++) {
            int n, m;
            double zv, zx, zy;
            sw_zernike_osa_nm(j, &n, &m);
            sw_zernike_eval_grad(n, m, x, y, &zv, &zx, &zy);
            sv += c[j] * zv;
            sx += c[j] * zx;
            sy += c[j] * zy;
        }
        assert_near(v, sv, 1e-12 * (1 + fabs(sv)));
        assert_near(gx, sx, 1e-12 * (1 + fabs(sx)));
        assert_near(gy, sy, 1e-12 * (1 + fabs(sy)));
    }

    /* RMS over the disc from sampled wavefronts (exact quadrature for degree <= 12). */
    quad q = disc_quadrature(10, 32);
    double mean = 0, ms = 0;
    for (int k = 0; k < q.n; k++) {
        double v;
        sw_zernike_sum_grad(c, count, q.x[k], q.y[k], &v, NULL, NULL);
        mean += q.w[k] * v;
        ms += q.w[k] * v * v;
    }
    assert_near(mean, c[0], 1e-12);
    double rms_all = sw_zernike_rms(c, count, 0), rms_np = sw_zernike_rms(c, count, 1);
    assert_near(rms_all, sqrt(ms), 1e-10 * rms_all);
    assert_near(rms_np, sqrt(ms - mean * mean), 1e-10 * rms_np);
    /* Without piston and tilts: the RMS of the wavefront made of the other terms. */
    double c3[MAX_COUNT];
    memcpy(c3, c, sizeof(double) * count);
    c3[0] = c3[1] = c3[2] = 0;
    double ms3 = 0;
    for (int k = 0; k < q.n; k++) {
        double v;
        sw_zernike_sum_grad(c3, count, q.x[k], q.y[k], &v, NULL, NULL);
        ms3 += q.w[k] * v * v;
    }
    assert_near(sw_zernike_rms(c, count, 3), sqrt(ms3), 1e-10 * sqrt(ms3));
    assert_true(sw_zernike_rms(c, count, 3) < rms_np);
    quad_free(&q);
    assert_near(sw_zernike_rms(c, 0, 0), 0, 0);
    assert_near(sw_zernike_rms(c, count, count), 0, 0);
    assert_near(sw_zernike_rms(c, count, -3), rms_all, 0);

    /* Edge cases: no terms is zero; too many or a NULL array is NaN. */
    double v = 1, gx = 1, gy = 1;
    sw_zernike_sum_grad(c, 0, 0.1, 0.2, &v, &gx, &gy);
    assert_true(v == 0 && gx == 0 && gy == 0);
    sw_zernike_sum_grad(c, MAX_COUNT + 1, 0.1, 0.2, &v, &gx, &gy);
    assert_true(isnan(v) && isnan(gx) && isnan(gy));
    sw_zernike_sum_grad(NULL, 3, 0.1, 0.2, &v, &gx, &gy);
    assert_true(isnan(v) && isnan(gx) && isnan(gy));
    assert_true(isnan(sw_zernike_rms(NULL, 3, 0)));
    /* The full 231 terms evaluate. */
    double big[MAX_COUNT];
    for (int j = 0; j < MAX_COUNT; j++)
        big[j] = j == MAX_COUNT - 1 ? 1.0 : 0.0;
    sw_zernike_sum_grad(big, MAX_COUNT, 0.5, 0.25, &v, &gx, &gy);
    double ev, ex, ey;
    sw_zernike_eval_grad(20, 20, 0.5, 0.25, &ev, &ex, &ey);
    assert_near(v, ev, 0);
    assert_near(gx, ex, 0);
    assert_near(gy, ey, 0);
}

static void test_coefs_alloc(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_zernike_coefs z;
    assert_int_equal(sw_zernike_coefs_alloc(ctx, 15, &z), SW_OK);
    assert_int_equal(z.count, 15);
    assert_non_null(z.coef_um);
    for (int j = 0; j < 15; j++)
        assert_near(z.coef_um[j], 0, 0);
    sw_zernike_coefs_free(&z);
    assert_int_equal(z.count, 0);
    assert_null(z.coef_um);
    sw_zernike_coefs_free(NULL);
    assert_int_equal(sw_zernike_coefs_alloc(ctx, 0, &z), SW_EINVAL);
    assert_null(z.coef_um);
    assert_int_equal(sw_zernike_coefs_alloc(ctx, MAX_COUNT + 1, &z), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "232"));
    assert_int_equal(sw_zernike_coefs_alloc(ctx, 5, NULL), SW_EINVAL);
    assert_int_equal(sw_zernike_coefs_alloc(ctx, MAX_COUNT, &z), SW_OK);
    sw_zernike_coefs_free(&z);
    sw_context_destroy(ctx);
}

static void test_csv_round_trip(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    const int counts[] = {1, 28, MAX_COUNT};
    for (int t = 0; t < 3; t++) {
        sw_zernike_coefs z, back;
        assert_int_equal(sw_zernike_coefs_alloc(ctx, counts[t], &z), SW_OK);
        for (int j = 0; j < z.count; j++)
            z.coef_um[j] = (j % 5 == 3) ? 0.0 : normal(500 + (uint64_t)j) * pow(10, j % 7 - 3);
        z.coef_um[0] = -1.0 / 3.0;
        const char *path = sw_test_path("round.csv");
        assert_int_equal(sw_zernike_write_csv(ctx, path, &z), SW_OK);
        assert_int_equal(sw_zernike_read_csv(ctx, path, &back), SW_OK);
        assert_int_equal(back.count, z.count);
        assert_memory_equal(back.coef_um, z.coef_um, sizeof(double) * z.count);
        /* The file names every term in all three ways. */
        size_t size;
        char *text = sw_test_read_all(path, &size);
        assert_true(strncmp(text, "j,n,m,noll,coef_um\n", 19) == 0);
        if (z.count >= 7)
            assert_non_null(strstr(text, "\n6,3,-3,9,")); /* OSA 6 = (3,-3) = Noll 9 */
        free(text);
        sw_zernike_coefs_free(&z);
        sw_zernike_coefs_free(&back);
    }
    sw_context_destroy(ctx);
}

static sw_zernike_coefs read_text(sw_context *ctx, const char *name, const char *text)
{
    const char *path = sw_test_path(name);
    sw_test_write_file(path, text, strlen(text));
    sw_zernike_coefs z;
    sw_status st = sw_zernike_read_csv(ctx, path, &z);
    if (st != SW_OK)
        fail_msg("%s: %s", name, sw_context_error(ctx));
    return z;
}

static void test_csv_index_columns(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    /* n,m in any order: count = highest OSA index + 1, missing terms zero. */
    sw_zernike_coefs z =
        read_text(ctx, "nm.csv", "n,m,coef_um\n2,0,0.5\n# defocus above\n1,-1,-0.25\n4,0,0.125\n");
    assert_int_equal(z.count, 13);
    for (int j = 0; j < 13; j++) {
        double want = j == 4 ? 0.5 : j == 1 ? -0.25 : j == 12 ? 0.125 : 0.0;
        assert_near(z.coef_um[j], want, 0);
    }
    sw_zernike_coefs_free(&z);

    z = read_text(ctx, "j.csv", "coef_um,j\n0.75,5\n-2,3\n");
    assert_int_equal(z.count, 6);
    assert_near(z.coef_um[5], 0.75, 0);
    assert_near(z.coef_um[3], -2, 0);
    assert_near(z.coef_um[4], 0, 0);
    sw_zernike_coefs_free(&z);

    /* Noll 2 = (1,1) = OSA 2, Noll 3 = (1,-1) = OSA 1, Noll 4 = (2,0) = OSA 4,
     * Noll 11 = (4,0) = OSA 12. */
    z = read_text(ctx, "noll.csv", "noll,coef_um\n4,0.5\n2,0.3\n3,0.2\n11,-0.1\n");
    assert_int_equal(z.count, 13);
    assert_near(z.coef_um[4], 0.5, 0);
    assert_near(z.coef_um[2], 0.3, 0);
    assert_near(z.coef_um[1], 0.2, 0);
    assert_near(z.coef_um[12], -0.1, 0);
    assert_near(z.coef_um[3], 0, 0);
    sw_zernike_coefs_free(&z);

    /* All of them, agreeing, with an extra column that is ignored. */
    z = read_text(ctx, "all.csv",
                  "eye,j,n,m,noll,coef_um\n0,4,2,0,4,1.5\n0,7,3,-1,7,2\n1,9,3,3,10,-0.5\n");
    assert_int_equal(z.count, 10);
    assert_near(z.coef_um[4], 1.5, 0);
    assert_near(z.coef_um[7], 2, 0);
    assert_near(z.coef_um[9], -0.5, 0);
    sw_zernike_coefs_free(&z);
    sw_context_destroy(ctx);
}

/* Reads text as a file and expects SW_EFORMAT with the path and `want` in the message. */
static void expect_bad(sw_context *ctx, const char *text, const char *want)
{
    const char *path = sw_test_path("bad.csv");
    sw_test_write_file(path, text, strlen(text));
    sw_zernike_coefs z = {7, (double *)&z};
    sw_status st = sw_zernike_read_csv(ctx, path, &z);
    const char *msg = sw_context_error(ctx);
    if (st != SW_EFORMAT)
        fail_msg("file \"%s\": status %d (%s), expected SW_EFORMAT", text, (int)st, msg);
    if (!strstr(msg, path))
        fail_msg("file \"%s\": the message \"%s\" does not name the file", text, msg);
    if (want && !strstr(msg, want))
        fail_msg("file \"%s\": the message \"%s\" does not say \"%s\"", text, msg, want);
    assert_int_equal(z.count, 0);
    assert_null(z.coef_um);
}

static void test_csv_malformed(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    expect_bad(ctx, "", NULL);                                           /* empty file */
    expect_bad(ctx, "# only a comment\n\n", NULL);                       /* no header */
    expect_bad(ctx, "n,m,coef_um\n", "no terms");                        /* header only */
    expect_bad(ctx, "n,m,value\n0,0,1\n", "coef_um");                    /* missing coef_um */
    expect_bad(ctx, "coef_um\n1\n", "index");                            /* missing index */
    expect_bad(ctx, "eye,coef_um\n0,1\n", "index");                      /* missing index */
    expect_bad(ctx, "n,coef_um\n2,1\n", "m");                            /* n without m */
    expect_bad(ctx, "m,coef_um,j\n0,1,0\n", "n");                        /* m without n */
    expect_bad(ctx, "n,m,coef_um\n0,0,1\n2,1,1\n", "data row 2");        /* n - m odd */
    expect_bad(ctx, "n,m,coef_um\n2,4,1\n", "data row 1");               /* |m| > n */
    expect_bad(ctx, "n,m,coef_um\n2,-4,1\n", "data row 1");              /* |m| > n */
    expect_bad(ctx, "n,m,coef_um\n-2,0,1\n", "negative");                /* n < 0 */
    expect_bad(ctx, "n,m,coef_um\n22,0,1\n", "22");                      /* order too high */
    expect_bad(ctx, "j,coef_um\n231,1\n", "231");                        /* OSA too high */
    expect_bad(ctx, "j,coef_um\n-1,1\n", "data row 1");                  /* OSA negative */
    expect_bad(ctx, "noll,coef_um\n0,1\n", "data row 1");                /* Noll from 1 */
    expect_bad(ctx, "noll,coef_um\n232,1\n", "232");                     /* Noll too high */
    expect_bad(ctx, "n,m,coef_um\n2,0,1\n1,1,1\n2,0,3\n", "data row 3"); /* duplicate */
    expect_bad(ctx, "j,coef_um\n4,1\n4,2\n", "twice");                   /* duplicate */
    expect_bad(ctx, "noll,coef_um\n4,1\n11,1\n4,2\n", "data row 3");     /* duplicate */
    expect_bad(ctx, "j,coef_um\n0,1\n1,nan\n", "data row 2");            /* NaN coefficient */
    expect_bad(ctx, "j,coef_um\n0,inf\n", "infinite");                   /* Inf coefficient */
    expect_bad(ctx, "j,coef_um\n0,1\n1.5,1\n", "data row 2");            /* non-integer j */
    expect_bad(ctx, "n,m,coef_um\n2.5,0,1\n", "integer");                /* non-integer n */
    expect_bad(ctx, "n,m,coef_um\n2,0.5,1\n", "integer");                /* non-integer m */
    expect_bad(ctx, "n,m,coef_um\nnan,0,1\n", "integer");                /* NaN index */
    expect_bad(ctx, "noll,coef_um\n2.0001,1\n", "integer");              /* non-integer Noll */
    expect_bad(ctx, "j,n,m,coef_um\n4,2,0,1\n5,2,-2,1\n", "data row 2"); /* j vs n,m */
    expect_bad(ctx, "n,m,noll,coef_um\n2,2,5,1\n", "disagree");          /* Noll 5 is (2,-2) */
    expect_bad(ctx, "j,noll,coef_um\n1,2,1\n", "disagree");              /* OSA 1 is Noll 3 */
    expect_bad(ctx, "n,m,coef_um\n2,0\n", NULL);                         /* short row */
    expect_bad(ctx, "n,m,coef_um\n2,0,abc\n", NULL);                     /* text cell */

    /* A file that is not there is an I/O error, not a format error. */
    sw_zernike_coefs z;
    assert_int_equal(sw_zernike_read_csv(ctx, sw_test_path("absent.csv"), &z), SW_EIO);
    assert_int_equal(sw_zernike_read_csv(ctx, NULL, &z), SW_EINVAL);
    assert_int_equal(sw_zernike_read_csv(ctx, sw_test_path("absent.csv"), NULL), SW_EINVAL);

    /* Writing refuses what could not be read back. */
    assert_int_equal(sw_zernike_coefs_alloc(ctx, 3, &z), SW_OK);
    z.coef_um[2] = NAN;
    const char *path = sw_test_path("nan.csv");
    assert_int_equal(sw_zernike_write_csv(ctx, path, &z), SW_ERANGE);
    assert_non_null(strstr(sw_context_error(ctx), "j = 2"));
    assert_false(sw_test_file_exists(path));
    z.coef_um[2] = 0;
    assert_int_equal(sw_zernike_write_csv(ctx, NULL, &z), SW_EINVAL);
    assert_int_equal(sw_zernike_write_csv(ctx, path, NULL), SW_EINVAL);
    sw_zernike_coefs empty = {0, NULL};
    assert_int_equal(sw_zernike_write_csv(ctx, path, &empty), SW_EINVAL);
    sw_zernike_coefs_free(&z);
    sw_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gram_exact_quadrature),
        cmocka_unit_test(test_gram_cartesian_grid),
        cmocka_unit_test(test_noll_table),
        cmocka_unit_test(test_index_round_trips),
        cmocka_unit_test(test_gradient_finite_differences),
        cmocka_unit_test(test_closed_forms),
        cmocka_unit_test(test_sum_and_rms),
        cmocka_unit_test(test_coefs_alloc),
        cmocka_unit_test(test_csv_round_trip),
        cmocka_unit_test(test_csv_index_columns),
        cmocka_unit_test(test_csv_malformed),
    };
    return cmocka_run_group_tests_name("zernike", tests, NULL, NULL);
}

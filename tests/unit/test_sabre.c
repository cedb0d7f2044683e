/*
 * D-SABRE on the CPU (sabre.h's D-SABRE section, src/sabre/sabre.c; seed 002 sections 2, 3 and
 * 5.A): the partition geometry and tables, exact reconstruction of tilts, equality with global
 * SABRE for one partition, H-PME / D-PME / no PME on smooth wavefronts (square and annular
 * pupils), the batched product against per-partition solves written here with plain loops, and
 * bad input. Eq. 17's extended array (extend_eq17: m, centring, every lenslet corner a square
 * centre, tilts still exact) and the distributed projection (step 6' of sabre_internal.h) with
 * hand-made matrices P: a centre-vertex picker against the plan's assembled values, a dense P
 * with one partition against P times the assembled values in double, and bad projections.
 *
 * Slopes of smooth wavefronts are made here: the exact mean gradient of a polynomial over each
 * lenslet square (the difference of W across the square integrated along the other side by a
 * 5-point Gauss-Legendre rule, exact for the degrees used).
 */
#include "testutil.h"

#include "sabre/sabre_internal.h"

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

static sw_sabre_params make_params(int32_t nx, int32_t ny, int32_t k, int32_t ol, sw_sabre_pme pme)
{
    sw_sabre_params p;
    sw_sabre_params_default(&p);
    p.nx = nx;
    p.ny = ny;
    p.partitions = k;
    p.overlap = ol;
    p.pme = pme;
    return p;
}

static sw_sabre *create_ok(const sw_sabre_params *p)
{
    sw_sabre *s = NULL;
    sw_status st = sw_sabre_create(ctx, p, &s);
    if (st != SW_OK)
        fail_msg("sw_sabre_create: %s", sw_context_error(ctx));
    return s;
}

/* Lattice position of value v of a lattice (sabre.h). */
static void vertex_pos(const sw_sabre_lattice *l, int64_t v, double *x, double *y)
{
    int64_t nc = (int64_t)(l->sx + 1) * (l->sy + 1);
    if (v < nc) {
        *x = (double)(v % (l->sx + 1)) - l->offx;
        *y = (double)(v / (l->sx + 1)) - l->offy;
    } else {
        *x = (double)((v - nc) % l->sx) + 0.5 - l->offx;
        *y = (double)((v - nc) / l->sx) + 0.5 - l->offy;
    }
}

/* ------------------------------------------------------------------ a smooth wavefront */

/* W(x, y) in output units (slope x pitch): kind 0 a polynomial of degree 4, kind 1 a smooth
 * non-polynomial (sines and cosines of a few cycles over the array), of the normalised position
 * (x - c) / R, (y - c) / R. */
typedef struct poly {
    double c, R;
    int kind;
} poly;

static double poly_w(const poly *P, double x, double y)
{
    double X = (x - P->c) / P->R, Y = (y - P->c) / P->R;
    if (P->kind == 1)
        return sin(2.1 * X + 0.3) * cos(1.7 * Y - 0.2) + 0.3 * sin(4.3 * X * Y) +
               0.2 * cos(5.1 * X - 2.0 * Y);
    return 0.8 * X * X - 0.5 * X * Y + 0.3 * Y * Y + 0.6 * X * X * X - 0.4 * X * Y * Y +
           0.35 * Y * Y * Y + 0.5 * X * X * X * X - 0.3 * X * X * Y * Y + 0.25 * Y * Y * Y * Y;
}

/* Lenslet-mean slopes of W (divided by the pitch; exact for the polynomial, to ~1e-9 for
 * the sines) for every lenslet of an nx x ny array. */
static void poly_slopes(const poly *P, int32_t nx, int32_t ny, double pitch, float *slopes)
{
    static const double gx[5] = {-0.9061798459386640, -0.5384693101056831, 0.0, 0.5384693101056831,
                                 0.9061798459386640};
    static const double gw[5] = {0.2369268850561891, 0.4786286704993665, 0.5688888888888889,
                                 0.4786286704993665, 0.2369268850561891};
    const int32_t n = nx * ny;
    for (int32_t iy = 0; iy < ny; iy++) {
        for (int32_t ix = 0; ix < nx; ix++) {
            double sx = 0.0, sy = 0.0;
            for (int q = 0; q < 5; q++) {
                double t = 0.5 * gx[q], wq = 0.5 * gw[q];
                sx += wq * (poly_w(P, ix + 0.5, iy + t) - poly_w(P, ix - 0.5, iy + t));
                sy += wq * (poly_w(P, ix + t, iy + 0.5) - poly_w(P, ix + t, iy - 0.5));
            }
            slopes[iy * nx + ix] = (float)(sx / pitch);
            slopes[n + iy * nx + ix] = (float)(sy / pitch);
        }
    }
}

/* RMS of (a - b) over the n entries with use[v] (all when NULL), after removing the mean of
 * the difference (piston), relative to the RMS of b about its mean. */
static double rel_rms(const float *a, const double *b, int64_t n, const uint8_t *use)
{
    double md = 0.0, mb = 0.0;
    int64_t cnt = 0;
    for (int64_t v = 0; v < n; v++) {
        if (use && !use[v])
            continue;
        md += a[v] - b[v];
        mb += b[v];
        cnt++;
    }
    md /= cnt;
    mb /= cnt;
    double e = 0.0, r = 0.0;
    for (int64_t v = 0; v < n; v++) {
        if (use && !use[v])
            continue;
        double d = a[v] - b[v] - md;
        e += d * d;
        r += (b[v] - mb) * (b[v] - mb);
    }
    return sqrt(e / r);
}

/* ------------------------------------------------------------------ geometry and tables */

static int32_t expect_m(int32_t nx, int32_t ny, int32_t k)
{
    int32_t maxd = nx > ny ? nx : ny, m = 1;
    while (k * m + 1 < maxd)
        m++;
    return m;
}

static void check_geometry(int32_t nx, int32_t ny, int32_t k, int32_t ol, int32_t want_m)
{
    sw_sabre_params p = make_params(nx, ny, k, ol, SW_SABRE_PME_DISTRIBUTED);
    sw_sabre *s = create_ok(&p);
    sw_sabre_info in;
    sw_sabre_get_info(s, &in);
    int32_t m = expect_m(nx, ny, k), S = k * m;
    if (want_m > 0)
        assert_int_equal(m, want_m); /* the test's own rule against the stated value */
    int32_t w = m + 2 * ol < S ? m + 2 * ol : S, L = w + 1;
    assert_int_equal(in.k, k);
    assert_int_equal(in.m, m);
    assert_int_equal(in.window, w);
    assert_int_equal(in.extended, S + 1);
    assert_int_equal(in.local_values, L * L + w * w);
    assert_int_equal(in.local_slopes, 2 * L * L);
    assert_int_equal(in.lattice.sx, S);
    assert_int_equal(in.lattice.sy, S);
    assert_int_equal(in.lattice.offx, (S + 1 - nx) / 2);
    assert_int_equal(in.lattice.offy, (S + 1 - ny) / 2);
    assert_int_equal(sw_sabre_lattice_values(&in.lattice), (int64_t)(S + 1) * (S + 1) + S * S);
    for (int32_t a = 0; a < k; a++) {
        int32_t ws = a * m - ol;
        ws = ws < 0 ? 0 : (ws > S - w ? S - w : ws);
        assert_int_equal(s->ws[a], ws);
        /* the core lies inside the window */
        assert_true(s->ws[a] <= a * m && s->ws[a] + w >= (a + 1) * m);
    }
    /* the gather table: local corner (x, y) of partition (a, b) is lenslet
     * (ws[a] + x - offx, ws[b] + y - offy) when that is real */
    for (int32_t i = 0; i < k * k; i += (k * k > 7 ? 7 : 1)) {
        int32_t a = i % k, b = i / k;
        for (int32_t y = 0; y < L; y++) {
            for (int32_t x = 0; x < L; x++) {
                int32_t ix = s->ws[a] + x - in.lattice.offx, iy = s->ws[b] + y - in.lattice.offy;
                int32_t want = (ix >= 0 && iy >= 0 && ix < nx && iy < ny) ? iy * nx + ix : -1;
                assert_int_equal(s->gidx[(size_t)i * L * L + y * L + x], want);
            }
        }
    }
    /* pairs: 2 k (k - 1), counting the m + 1 border corners on real lenslets (no mask), or all
     * of them when none is; lo and hi name the same extended
     * vertex, on the line between the two cores */
    assert_int_equal(s->npairs, 2 * k * (k - 1));
    for (int32_t pi = 0; pi < s->npairs; pi++) {
        int32_t lo = s->pair_lo[pi], hi = s->pair_hi[pi];
        int horiz = pi < k * (k - 1);
        int32_t real = 0; /* border corners on real lenslets (not padding) */
        for (int32_t j = 0; j <= m; j++) {
            int32_t X = horiz ? (lo % k + 1) * m : (lo % k) * m + j;
            int32_t Y = horiz ? (lo / k) * m + j : (lo / k + 1) * m;
            int32_t ix = X - in.lattice.offx, iy = Y - in.lattice.offy;
            real += ix >= 0 && iy >= 0 && ix < nx && iy < ny;
        }
        assert_int_equal(s->pair_n[pi], real > 0 ? real : m + 1);
        assert_int_equal(hi - lo, horiz ? 1 : k);
        for (int32_t j = 0; j <= m; j++) {
            int32_t vl = s->pair_vlo[pi * (m + 1) + j], vh = s->pair_vhi[pi * (m + 1) + j];
            int32_t Xl = s->ws[lo % k] + vl % L, Yl = s->ws[lo / k] + vl / L;
            int32_t Xh = s->ws[hi % k] + vh % L, Yh = s->ws[hi / k] + vh / L;
            assert_true(vl < L * L && vh < L * L);
            assert_int_equal(Xl, Xh);
            assert_int_equal(Yl, Yh);
            if (horiz) {
                assert_int_equal(Xl, (lo % k + 1) * m);
                assert_int_equal(Yl, (lo / k) * m + j);
            } else {
                assert_int_equal(Yl, (lo / k + 1) * m);
                assert_int_equal(Xl, (lo % k) * m + j);
            }
        }
    }
    /* D-PME: master (k/2, k/2), L_D the largest Manhattan distance to it */
    int32_t ld = 2 * (k / 2 > k - 1 - k / 2 ? k / 2 : k - 1 - k / 2);
    assert_int_equal(in.dpme_iterations, ld);
    /* the LAPACK null-space check: exact (0) for windows up to 16 squares, else not run */
    if (w <= 16)
        assert_true(in.null_check == 0.0);
    else
        assert_true(in.null_check == -1.0);
    assert_true(sw_sabre_kernel_us(s) < 0);
    sw_sabre_destroy(s);
}

static void test_geometry(void **state)
{
    (void)state;
    check_geometry(64, 64, 2, 1, 32);
    check_geometry(64, 64, 8, 1, 8);
    check_geometry(64, 64, 32, 1, 2);
    check_geometry(20, 20, 1, 1, 19);
    check_geometry(100, 100, 16, 1, 7);
    check_geometry(200, 200, 32, 1, 7);
    check_geometry(40, 25, 4, 2, 10);
    check_geometry(33, 33, 4, 0, 8);
    check_geometry(30, 30, 3, 3, 10); /* windows shifted inwards at both edges */
    check_geometry(9, 9, 8, 64, 1);   /* the window is the whole array */
}

/* With a mask, a border's count is that of its corners on valid lenslets (all m + 1 when none
 * is), and the H-PME masters follow the pupil. */
static void test_pairs_mask(void **state)
{
    (void)state;
    const int32_t nx = 33, ny = 33, k = 4;
    uint8_t *valid = malloc((size_t)nx * ny);
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = 0; ix < nx; ix++)
            valid[iy * nx + ix] = (ix >= 13 && iy >= 11) || (ix == 3 && iy == 8);
    sw_sabre_params p = make_params(nx, ny, k, 1, SW_SABRE_PME_HIERARCHICAL);
    p.valid = valid;
    sw_sabre *s = create_ok(&p);
    memset(valid, 0, (size_t)nx * ny); /* the plan keeps its own copy */
    const int32_t m = s->m;
    for (int32_t pi = 0; pi < s->npairs; pi++) {
        int32_t lo = s->pair_lo[pi], cnt = 0;
        int horiz = pi < k * (k - 1);
        for (int32_t j = 0; j <= m; j++) {
            int32_t X = horiz ? (lo % k + 1) * m : (lo % k) * m + j;
            int32_t Y = horiz ? (lo / k) * m + j : (lo / k + 1) * m;
            int32_t ix = X - s->offx, iy = Y - s->offy;
            cnt += ix >= 0 && iy >= 0 && ix < nx && iy < ny &&
                   ((ix >= 13 && iy >= 11) || (ix == 3 && iy == 8));
        }
        assert_int_equal(s->pair_n[pi], cnt > 0 ? cnt : m + 1);
    }
    /* level 2 (the whole array): the top-right tile holds the pupil */
    assert_int_equal(s->p, 2);
    assert_int_equal(s->hpme[2 * s->level_base[1]] & 3, 3);
    sw_sabre_destroy(s);

    /* a square pupil: the seed's order, master tile 0 and the diagonal through tile 1 */
    p = make_params(nx, ny, 8, 1, SW_SABRE_PME_HIERARCHICAL);
    s = create_ok(&p);
    assert_int_equal(s->p, 3);
    for (int32_t g = 0; g < 16 + 4 + 1; g++) {
        assert_int_equal(s->hpme[2 * g] & 3, 0);
        assert_int_equal(s->hpme[2 * g] >> 2, 7); /* all three borders inside the pupil */
        assert_int_equal(s->hpme[2 * g + 1], 1);
    }
    sw_sabre_destroy(s);
    free(valid);
}

/* ------------------------------------------------------------------ exact reconstruction */

/* A tilt is reconstructed exactly (up to piston) for every k and both PMEs, values and
 * actuators, when the extended array has no padding (or only valid tilts' zero padding is
 * avoided: nx = k m + 1). */
static void check_tilt(int32_t nx, int32_t k, int32_t ol, sw_sabre_pme pme)
{
    const double pitch = 2.5, ax = 0.3, ay = -0.7;
    sw_sabre_params p = make_params(nx, nx, k, ol, pme);
    p.pitch = pitch;
    sw_sabre *s = create_ok(&p);
    sw_sabre_info in;
    sw_sabre_get_info(s, &in);
    assert_int_equal(in.extended, nx); /* no padding */
    const int32_t n = nx * nx;
    float *slopes = malloc(2 * (size_t)n * sizeof *slopes);
    for (int32_t l = 0; l < n; l++)
        slopes[l] = (float)ax, slopes[n + l] = (float)ay;
    int64_t nv = sw_sabre_lattice_values(&in.lattice);
    float *vals = malloc((size_t)nv * sizeof *vals);
    float *act = malloc((size_t)(nx + 1) * (nx + 1) * sizeof *act);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals, act), SW_OK);
    double *plane = calloc((size_t)nv, sizeof *plane);
    double span = 0.0;
    for (int64_t v = 0; v < nv; v++) {
        double x, y;
        vertex_pos(&in.lattice, v, &x, &y);
        plane[v] = pitch * (ax * x + ay * y);
        span = fmax(span, fabs(plane[v]));
    }
    double piston = vals[0] - plane[0], err = 0.0;
    for (int64_t v = 0; v < nv; v++)
        err = fmax(err, fabs(vals[v] - plane[v] - piston));
    if (!(err <= 1e-5 * span))
        fail_msg("tilt, %d x %d, k %d, OL %d, %s: max error %g of %g", nx, nx, k, ol,
                 sw_sabre_pme_string(pme), err, span);
    for (int32_t cy = 0; cy <= nx; cy++)
        for (int32_t cx = 0; cx <= nx; cx++) {
            double want = pitch * (ax * (cx - 0.5) + ay * (cy - 0.5)) + piston;
            assert_near(act[cy * (nx + 1) + cx], want, 1e-5 * span);
        }
    free(slopes);
    free(vals);
    free(act);
    free(plane);
    sw_sabre_destroy(s);
}

static void test_tilt_exact(void **state)
{
    (void)state;
    for (int32_t k = 1; k <= 32; k *= 2) {
        check_tilt(33, k, 1, SW_SABRE_PME_HIERARCHICAL);
        check_tilt(33, k, 1, SW_SABRE_PME_DISTRIBUTED);
    }
    check_tilt(33, 4, 0, SW_SABRE_PME_HIERARCHICAL);
    check_tilt(33, 8, 3, SW_SABRE_PME_HIERARCHICAL);
    check_tilt(37, 3, 1, SW_SABRE_PME_DISTRIBUTED);
    check_tilt(31, 5, 2, SW_SABRE_PME_DISTRIBUTED);
}

/* Padding: on an array that needs padding (30 x 30 in a 33 x 33 extended array) with an annular
 * mask, a tilt is exact with NEAREST (every padded corner reads the same constant slope, so every
 * triangle's equations agree) and not with ZERO (the flat padding pulls on the pupil's edge). */
static double padded_tilt_error_fill(sw_sabre_padding pad, int32_t fill);
static double padded_tilt_error(sw_sabre_padding pad)
{
    return padded_tilt_error_fill(pad, 0);
}

static double padded_tilt_error_fill(sw_sabre_padding pad, int32_t fill)
{
    const int32_t nx = 30, n = nx * nx;
    uint8_t *mask = malloc((size_t)n);
    for (int32_t l = 0; l < n; l++) {
        double x = l % nx - 14.5, y = l / nx - 14.5, r = sqrt(x * x + y * y);
        mask[l] = (uint8_t)(r <= 15.0 && r >= 4.5);
    }
    sw_sabre_params p = make_params(nx, nx, 4, 1, SW_SABRE_PME_HIERARCHICAL);
    p.valid = mask;
    p.padding = pad;
    p.fill_iterations = fill;
    sw_sabre *s = create_ok(&p);
    sw_sabre_info in;
    sw_sabre_get_info(s, &in);
    assert_int_equal(in.extended, 33);
    float *slopes = malloc(2 * (size_t)n * sizeof *slopes);
    for (int32_t l = 0; l < n; l++)
        slopes[l] = mask[l] ? 0.4f : NAN, slopes[n + l] = mask[l] ? -0.25f : NAN;
    int64_t nv = sw_sabre_lattice_values(&in.lattice);
    float *vals = malloc((size_t)nv * sizeof *vals);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals, NULL), SW_OK);
    /* error over the valid lenslets' corner vertices, after the piston */
    double piston = 0.0, err = 0.0, span = 0.0;
    int first = 1;
    for (int32_t iy = 0; iy < nx; iy++)
        for (int32_t ix = 0; ix < nx; ix++) {
            if (!mask[iy * nx + ix])
                continue;
            int64_t v =
                (int64_t)(iy + in.lattice.offy) * (in.lattice.sx + 1) + ix + in.lattice.offx;
            double plane = 0.4 * ix - 0.25 * iy;
            if (first)
                piston = vals[v] - plane, first = 0;
            err = fmax(err, fabs(vals[v] - plane - piston));
            span = fmax(span, fabs(plane));
        }
    free(mask);
    free(slopes);
    free(vals);
    sw_sabre_destroy(s);
    return err / span;
}

static void test_padding(void **state)
{
    (void)state;
    double near = padded_tilt_error(SW_SABRE_PAD_NEAREST);
    double zero = padded_tilt_error(SW_SABRE_PAD_ZERO);
    if (!(near < 1e-5))
        fail_msg("nearest padding: tilt error %g of the span", near);
    if (!(zero > 1e-3))
        fail_msg("zero padding: tilt error only %g of the span (the padding should show)", zero);
    sw_sabre_padding pd;
    assert_int_equal(sw_sabre_padding_parse("nearest", &pd), SW_OK);
    assert_int_equal(pd, SW_SABRE_PAD_NEAREST);
    assert_int_equal(sw_sabre_padding_parse("ZERO", &pd), SW_OK);
    assert_int_equal(pd, SW_SABRE_PAD_ZERO);
    assert_int_equal(sw_sabre_padding_parse("mirror", &pd), SW_EINVAL);
    assert_string_equal(sw_sabre_padding_string(SW_SABRE_PAD_NEAREST), "nearest");
}

/* Fill iterations: with zero padding, each pass replaces the padded slopes by the solution's own,
 * so the tilt's error falls pass after pass (the padding's pull fades); bad counts refused. */
static void test_fill(void **state)
{
    (void)state;
    double e0 = padded_tilt_error_fill(SW_SABRE_PAD_ZERO, 0);
    double e1 = padded_tilt_error_fill(SW_SABRE_PAD_ZERO, 1);
    double e4 = padded_tilt_error_fill(SW_SABRE_PAD_ZERO, 4);
    double e16 = padded_tilt_error_fill(SW_SABRE_PAD_ZERO, 16);
    print_message("fill: tilt error %.3g, %.3g, %.3g, %.3g after 0, 1, 4, 16 passes\n", e0, e1, e4,
                  e16);
    if (!(e1 < 0.8 * e0 && e4 < 0.5 * e1 && e16 < 0.5 * e4))
        fail_msg("fill iterations do not converge: %g %g %g %g", e0, e1, e4, e16);
    /* nearest padding is already exact for a tilt; fill passes keep it so */
    double n4 = padded_tilt_error_fill(SW_SABRE_PAD_NEAREST, 4);
    if (!(n4 < 1e-5))
        fail_msg("nearest padding + fill: tilt error %g", n4);
    sw_sabre_params p = make_params(33, 33, 4, 1, SW_SABRE_PME_HIERARCHICAL);
    sw_sabre *s = NULL;
    p.fill_iterations = 17;
    assert_int_equal(sw_sabre_create(ctx, &p, &s), SW_EINVAL);
    p.fill_iterations = -1;
    assert_int_equal(sw_sabre_create(ctx, &p, &s), SW_EINVAL);
    assert_null(s);
}

/* One partition is global SABRE (the same problem on the same lattice), random slopes. */
static void test_k1_equals_global(void **state)
{
    (void)state;
    const int32_t nx = 16, ny = 16, n = nx * ny;
    const double pitch = 1.3;
    float *slopes = malloc(2 * (size_t)n * sizeof *slopes);
    uint64_t seed = 12345;
    for (int32_t l = 0; l < 2 * n; l++)
        slopes[l] = (float)(2.0 * unit_rand(&seed) - 1.0);
    sw_sabre_params p = make_params(nx, ny, 1, 1, SW_SABRE_PME_HIERARCHICAL);
    p.pitch = pitch;
    sw_sabre *s = create_ok(&p);
    sw_sabre_info in;
    sw_sabre_get_info(s, &in);
    sw_sabre_global *g = NULL;
    assert_int_equal(sw_sabre_global_create(ctx, nx, ny, pitch, NULL, &g), SW_OK);
    sw_sabre_lattice gl;
    sw_sabre_global_lattice(g, &gl);
    assert_memory_equal(&gl, &in.lattice, sizeof gl);
    int64_t nv = sw_sabre_lattice_values(&gl);
    double *gv = malloc((size_t)nv * sizeof *gv);
    float *dv = malloc((size_t)nv * sizeof *dv);
    assert_int_equal(sw_sabre_global_run(g, slopes, gv), SW_OK);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, dv, NULL), SW_OK);
    double e = rel_rms(dv, gv, nv, NULL);
    print_message("k = 1 vs global SABRE, random slopes: relative RMS difference %.2e\n", e);
    assert_true(e < 1e-5);
    free(gv);
    free(dv);
    free(slopes);
    sw_sabre_global_destroy(g);
    sw_sabre_destroy(s);
}

/* ------------------------------------------------------------------ piston equalisation */

/* Relative RMS difference to global SABRE of D-SABRE on a smooth wavefront (33 x 33, no
 * padding), over all vertices. */
static double smooth_vs_global(int32_t k, sw_sabre_pme pme, int32_t iters, double noise,
                               uint64_t seed)
{
    const int32_t nx = 33, n = nx * nx;
    const poly P = {16.0, 16.5, 1};
    float *slopes = malloc(2 * (size_t)n * sizeof *slopes);
    poly_slopes(&P, nx, nx, 1.0, slopes);
    for (int32_t l = 0; l < 2 * n; l++)
        slopes[l] += (float)(noise * (2.0 * unit_rand(&seed) - 1.0));
    sw_sabre_params p = make_params(nx, nx, k, 1, pme);
    p.dpme_iterations = iters;
    sw_sabre *s = create_ok(&p);
    sw_sabre_info in;
    sw_sabre_get_info(s, &in);
    sw_sabre_global *g = NULL;
    assert_int_equal(sw_sabre_global_create(ctx, nx, nx, 1.0, NULL, &g), SW_OK);
    int64_t nv = sw_sabre_lattice_values(&in.lattice);
    double *gv = malloc((size_t)nv * sizeof *gv);
    float *dv = malloc((size_t)nv * sizeof *dv);
    assert_int_equal(sw_sabre_global_run(g, slopes, gv), SW_OK);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, dv, NULL), SW_OK);
    double e = rel_rms(dv, gv, nv, NULL);
    free(gv);
    free(dv);
    free(slopes);
    sw_sabre_global_destroy(g);
    sw_sabre_destroy(s);
    return e;
}

static void test_pme_smooth(void **state)
{
    (void)state;
    /* tolerances: twice the largest measured (H-PME 1.0e-3, D-PME 1.7e-3 at k = 16); no PME
     * leaves errors of 0.65 to 1.05 */
    for (int32_t k = 2; k <= 16; k *= 2) {
        double eh = smooth_vs_global(k, SW_SABRE_PME_HIERARCHICAL, 0, 0.0, 1);
        double ed = smooth_vs_global(k, SW_SABRE_PME_DISTRIBUTED, 0, 0.0, 1);
        double en = smooth_vs_global(k, SW_SABRE_PME_NONE, 0, 0.0, 1);
        print_message("smooth 33 x 33, k %2d: relative RMS to global: H-PME %.2e, D-PME %.2e, "
                      "none %.2e\n",
                      k, eh, ed, en);
        assert_true(eh < 2e-3);
        assert_true(ed < 4e-3);
        assert_true(en > 0.3);
    }
    /* with noise, D-PME's chains propagate errors that H-PME averages (seed 002 Fig. 6):
     * uniform noise of +-0.1 (slopes of about 0.1), mean over 4 draws; measured over single
     * draws, D-PME / H-PME = 1.7 .. 2.9 */
    double eh = 0.0, ed = 0.0;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        eh += smooth_vs_global(16, SW_SABRE_PME_HIERARCHICAL, 0, 0.1, seed) / 4;
        ed += smooth_vs_global(16, SW_SABRE_PME_DISTRIBUTED, 0, 0.1, seed) / 4;
    }
    print_message("noisy, k 16: H-PME %.2e, D-PME %.2e\n", eh, ed);
    assert_true(ed > 1.5 * eh);
}

/* D-PME has converged after info.dpme_iterations (L_D) iterations; one fewer leaves the
 * farthest partitions unlevelled. */
static void test_dpme_converged(void **state)
{
    (void)state;
    const int32_t nx = 33, n = nx * nx, k = 4;
    float *slopes = malloc(2 * (size_t)n * sizeof *slopes);
    const poly P = {16.0, 16.5, 0};
    poly_slopes(&P, nx, nx, 1.0, slopes);
    uint64_t seed = 777;
    for (int32_t l = 0; l < 2 * n; l++)
        slopes[l] += (float)(0.05 * (2.0 * unit_rand(&seed) - 1.0));
    float *res[3];
    int32_t iters[3] = {0, 0, 0};
    int64_t nv = 0;
    for (int r = 0; r < 3; r++) {
        sw_sabre_params p = make_params(nx, nx, k, 1, SW_SABRE_PME_DISTRIBUTED);
        p.dpme_iterations = r == 0 ? 0 : (r == 1 ? 4 + 3 : 4 - 1);
        sw_sabre *s = create_ok(&p);
        sw_sabre_info in;
        sw_sabre_get_info(s, &in);
        iters[r] = in.dpme_iterations;
        nv = sw_sabre_lattice_values(&in.lattice);
        res[r] = malloc((size_t)nv * sizeof *res[r]);
        assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, res[r], NULL), SW_OK);
        sw_sabre_destroy(s);
    }
    assert_int_equal(iters[0], 4); /* master (2, 2): partition (0, 0) is 4 steps away */
    assert_int_equal(iters[1], 7);
    assert_int_equal(iters[2], 3);
    double span = 0.0, d_more = 0.0, d_less = 0.0;
    for (int64_t v = 0; v < nv; v++) {
        span = fmax(span, fabs(res[0][v] - res[0][0]));
        d_more = fmax(d_more, fabs(res[1][v] - res[0][v]));
        d_less = fmax(d_less, fabs(res[2][v] - res[0][v]));
    }
    print_message("D-PME: max change with 3 more iterations %.2e, with one fewer %.2e (span "
                  "%.2e)\n",
                  d_more, d_less, span);
    assert_true(d_more <= 1e-6 * span);
    assert_true(d_less > 1e-3 * span);
    for (int r = 0; r < 3; r++)
        free(res[r]);
    free(slopes);
}

/* ------------------------------------------------------------------ batched product */

/* Y = Q X for all partitions equals one partition's solve written with plain loops (the test's
 * own gather, double sums), compared on the values that partition owns (PME none: no
 * offsets). With padding (30 x 27 lenslets in a 33 x 33 extended array) and a mask. */
static void test_gemm_vs_loops(void **state)
{
    (void)state;
    const int32_t nx = 30, ny = 27, n = nx * ny, k = 4, ol = 1;
    uint8_t *valid = malloc((size_t)n);
    float *slopes = malloc(2 * (size_t)n * sizeof *slopes);
    uint64_t seed = 99;
    for (int32_t l = 0; l < n; l++)
        valid[l] = unit_rand(&seed) > 0.1;
    for (int32_t l = 0; l < 2 * n; l++)
        slopes[l] = (float)(2.0 * unit_rand(&seed) - 1.0);
    for (int32_t l = 0; l < n; l++)
        if (!valid[l])
            slopes[l] = slopes[n + l] = NAN; /* not read */
    sw_sabre_params p = make_params(nx, ny, k, ol, SW_SABRE_PME_NONE);
    p.valid = valid;
    p.pitch = 0.7;
    sw_sabre *s = create_ok(&p);
    sw_sabre_info in;
    sw_sabre_get_info(s, &in);
    const int32_t m = in.m, S = k * m, w = in.window, L = w + 1, nl = in.local_values,
                  ns = in.local_slopes;
    const float *Q = sw_sabre_local_matrix(s);
    int64_t nv = sw_sabre_lattice_values(&in.lattice);
    float *vals = malloc((size_t)nv * sizeof *vals);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals, NULL), SW_OK);
    double *x = malloc((size_t)ns * sizeof *x), *y = malloc((size_t)nl * sizeof *y);
    int32_t parts[3][2] = {{1, 2}, {0, 0}, {3, 3}};
    for (int t = 0; t < 3; t++) {
        int32_t a = parts[t][0], b = parts[t][1];
        int32_t wsa = a * m - ol, wsb = b * m - ol;
        wsa = wsa < 0 ? 0 : (wsa > S - w ? S - w : wsa);
        wsb = wsb < 0 ? 0 : (wsb > S - w ? S - w : wsb);
        for (int32_t yy = 0; yy < L; yy++)
            for (int32_t xx = 0; xx < L; xx++) {
                int32_t ix = wsa + xx - in.lattice.offx, iy = wsb + yy - in.lattice.offy;
                int ok = ix >= 0 && iy >= 0 && ix < nx && iy < ny && valid[iy * nx + ix];
                x[yy * L + xx] = ok ? slopes[iy * nx + ix] : 0.0;
                x[L * L + yy * L + xx] = ok ? slopes[n + iy * nx + ix] : 0.0;
            }
        double ymax = 0.0;
        for (int32_t r = 0; r < nl; r++) {
            double acc = 0.0;
            for (int32_t c = 0; c < ns; c++)
                acc += (double)Q[(size_t)c * nl + r] * x[c];
            y[r] = acc;
            ymax = fmax(ymax, fabs(acc));
        }
        assert_true(y[0] == 0.0); /* the anchor */
        /* the values partition (a, b) owns: the corners of its core (the last partition also
         * the array's last row/column of corners) and the centres of its core squares */
        int32_t x1 = a == k - 1 ? S : (a + 1) * m - 1, y1 = b == k - 1 ? S : (b + 1) * m - 1;
        int32_t checked = 0;
        for (int32_t Y = b * m; Y <= y1; Y++)
            for (int32_t X = a * m; X <= x1; X++, checked++)
                assert_near(vals[(int64_t)Y * (S + 1) + X], y[(Y - wsb) * L + (X - wsa)],
                            2e-5 * ymax);
        for (int32_t Y = b * m; Y < (b + 1) * m; Y++)
            for (int32_t X = a * m; X < (a + 1) * m; X++, checked++)
                assert_near(vals[(int64_t)(S + 1) * (S + 1) + (int64_t)Y * S + X],
                            y[L * L + (Y - wsb) * w + (X - wsa)], 2e-5 * ymax);
        assert_true(checked >= 2 * m * m);
    }
    free(x);
    free(y);
    free(vals);
    free(slopes);
    free(valid);
    sw_sabre_destroy(s);
}

/* ------------------------------------------------------------------ annular pupil */

/* The seed's setting (section 3.B.2): 64 x 64 lenslets, an annular pupil of obscuration 0.3
 * (diameter ratio), lenslets valid when their centre is inside; the polynomial wavefront,
 * compared with the truth at the valid lenslets' reference centres (piston removed). */
static void test_annular(void **state)
{
    (void)state;
    const int32_t nx = 64, n = nx * nx;
    const double c = 31.5, R = 32.0, obsc = 0.3;
    const poly P = {c, R, 0};
    uint8_t *valid = malloc((size_t)n);
    for (int32_t iy = 0; iy < nx; iy++)
        for (int32_t ix = 0; ix < nx; ix++) {
            double r = hypot(ix - c, iy - c);
            valid[iy * nx + ix] = r <= R && r >= obsc * R;
        }
    float *slopes = malloc(2 * (size_t)n * sizeof *slopes);
    poly_slopes(&P, nx, nx, 1.0, slopes);
    for (int32_t k = 4; k <= 32; k *= 2) {
        double err[3];
        for (int pm = 0; pm < 3; pm++) {
            sw_sabre_params p = make_params(nx, nx, k, 1, (sw_sabre_pme)pm);
            p.valid = valid;
            sw_sabre *s = create_ok(&p);
            sw_sabre_info in;
            sw_sabre_get_info(s, &in);
            int64_t nv = sw_sabre_lattice_values(&in.lattice);
            float *vals = malloc((size_t)nv * sizeof *vals);
            double *truth = malloc((size_t)nv * sizeof *truth);
            uint8_t *use = calloc((size_t)nv, 1);
            assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals, NULL), SW_OK);
            /* compare at the reference centres of valid lenslets */
            for (int32_t iy = 0; iy < nx; iy++)
                for (int32_t ix = 0; ix < nx; ix++) {
                    int64_t v = (int64_t)(iy + in.lattice.offy) * (in.lattice.sx + 1) + ix +
                                in.lattice.offx;
                    use[v] = valid[iy * nx + ix];
                    truth[v] = poly_w(&P, ix, iy);
                }
            err[pm] = rel_rms(vals, truth, nv, use);
            free(vals);
            free(truth);
            free(use);
            sw_sabre_destroy(s);
        }
        print_message("annular 64 x 64 (obscuration 0.3), k %d: relative RMS error in the pupil: "
                      "H-PME %.2e, D-PME %.2e, none %.2e\n",
                      k, err[0], err[1], err[2]);
        /* The error is the zero padding's (seed 002 section 3.B.2: the windows at the pupil's
         * edges fit zero slopes too). Asked: 1.5 times what was measured (see the message). A
         * tile border that has in-pupil vertices ignores its pairs wholly in the padding (the
         * fallback to all vertices is per border): without that, k 8 measured 0.047 and k 16
         * 0.070, which the k 16 bound refuses. */
        const double bound[4] = {0.13, 0.07, 0.065, 0.065};
        int ki = k == 4 ? 0 : k == 8 ? 1 : k == 16 ? 2 : 3;
        if (!(err[0] < bound[ki]))
            fail_msg("annular, k %d: H-PME error %g >= %g", k, err[0], bound[ki]);
        assert_true(err[2] > 5 * err[0]);
    }
    free(slopes);
    free(valid);
}

/* ------------------------------------------------------------------ robust passes */

/* Relative RMS error at the real lenslets' corner vertices of D-SABRE (k > 0) or global SABRE
 * (k = 0) on slopes of the smooth wavefront P over a 33 x 33 array: robust passes (sabre.h), and
 * the options of the piston equalisation (bit 0 robust_pme, bit 1 pme_band). */
static double robust_error(const float *slopes, const poly *P, int32_t k, int32_t passes,
                           int pme_opts)
{
    const int32_t nx = 33;
    sw_sabre_lattice lat;
    int64_t nv;
    float *vals;
    if (k == 0) {
        sw_sabre_global_params gp;
        sw_sabre_global_params_default(&gp);
        gp.nx = gp.ny = nx;
        gp.robust_passes = passes;
        sw_sabre_global *g = NULL;
        assert_int_equal(sw_sabre_global_create_params(ctx, &gp, &g), SW_OK);
        sw_sabre_global_lattice(g, &lat);
        nv = sw_sabre_lattice_values(&lat);
        double *dv = malloc((size_t)nv * sizeof *dv);
        vals = malloc((size_t)nv * sizeof *vals);
        assert_int_equal(sw_sabre_global_run(g, slopes, dv), SW_OK);
        for (int64_t v = 0; v < nv; v++)
            vals[v] = (float)dv[v];
        free(dv);
        sw_sabre_global_destroy(g);
    } else {
        sw_sabre_params p = make_params(nx, nx, k, 1, SW_SABRE_PME_HIERARCHICAL);
        p.robust_passes = passes;
        p.robust_pme = pme_opts & 1;
        p.pme_band = (pme_opts >> 1) & 1;
        sw_sabre *s = create_ok(&p);
        sw_sabre_info in;
        sw_sabre_get_info(s, &in);
        lat = in.lattice;
        nv = sw_sabre_lattice_values(&lat);
        vals = malloc((size_t)nv * sizeof *vals);
        assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals, NULL), SW_OK);
        sw_sabre_destroy(s);
    }
    double *truth = calloc((size_t)nv, sizeof *truth);
    uint8_t *use = calloc((size_t)nv, 1);
    for (int32_t iy = 0; iy < nx; iy++)
        for (int32_t ix = 0; ix < nx; ix++) {
            int64_t v = (int64_t)(iy + lat.offy) * (lat.sx + 1) + ix + lat.offx;
            use[v] = 1;
            truth[v] = poly_w(P, ix, iy);
        }
    double e = rel_rms(vals, truth, nv, use);
    free(vals);
    free(truth);
    free(use);
    return e;
}

/* Slopes of the smooth wavefront with uniform noise of +-0.01 (slopes of about 0.1) and, when
 * outliers, 3 % of the lenslets (chosen at random) off by +-0.5 in both components. */
static float *robust_slopes(const poly *P, int outliers, uint64_t seed)
{
    const int32_t nx = 33, n = nx * nx;
    float *s = malloc(2 * (size_t)n * sizeof *s);
    poly_slopes(P, nx, nx, 1.0, s);
    for (int32_t l = 0; l < 2 * n; l++)
        s[l] += (float)(0.02 * (unit_rand(&seed) - 0.5));
    if (outliers)
        for (int32_t l = 0; l < n; l++)
            if (unit_rand(&seed) < 0.03) {
                s[l] += unit_rand(&seed) < 0.5 ? 0.5f : -0.5f;
                s[n + l] += unit_rand(&seed) < 0.5 ? 0.5f : -0.5f;
            }
    return s;
}

/* Robust passes cut the error that injected outliers cause, for global SABRE and D-SABRE's local
 * solves, and leave clean slopes almost as they were; robust PME and the border band keep H-PME
 * at global SABRE's accuracy on clean slopes. */
static void test_robust(void **state)
{
    (void)state;
    const poly P = {16.0, 16.5, 1};
    float *clean = robust_slopes(&P, 0, 4242), *dirty = robust_slopes(&P, 1, 4242);
    const double g0 = robust_error(dirty, &P, 0, 0, 0), g3 = robust_error(dirty, &P, 0, 3, 0);
    const double d0 = robust_error(dirty, &P, 4, 0, 0), d3 = robust_error(dirty, &P, 4, 3, 0);
    const double d3m = robust_error(dirty, &P, 4, 3, 1), d3b = robust_error(dirty, &P, 4, 3, 3);
    const double gc0 = robust_error(clean, &P, 0, 0, 0), gc3 = robust_error(clean, &P, 0, 3, 0);
    const double dc0 = robust_error(clean, &P, 4, 0, 0), dc3 = robust_error(clean, &P, 4, 3, 3);
    print_message("outliers (3 %% of lenslets): global %.4f -> %.4f with 3 robust passes; "
                  "D-SABRE k 4 %.4f -> %.4f, + robust PME %.4f, + band %.4f\n",
                  g0, g3, d0, d3, d3m, d3b);
    print_message("clean: global %.4f -> %.4f; D-SABRE k 4 %.4f -> %.4f (all options)\n", gc0, gc3,
                  dc0, dc3);
    assert_true(g3 < 0.5 * g0);
    assert_true(d3 < 0.5 * d0);
    assert_true(d3m < 0.5 * d0 && d3b < 0.5 * d0);
    assert_true(gc3 < 1.1 * gc0);
    assert_true(dc3 < 1.1 * dc0);
    /* bad parameters */
    sw_sabre_params p = make_params(33, 33, 4, 1, SW_SABRE_PME_HIERARCHICAL);
    sw_sabre *s = NULL;
    p.robust_passes = SW_SABRE_ROBUST_MAX_PASSES + 1;
    assert_int_equal(sw_sabre_create(ctx, &p, &s), SW_EINVAL);
    p.robust_passes = 1;
    p.robust_threshold = 0.5;
    assert_int_equal(sw_sabre_create(ctx, &p, &s), SW_EINVAL);
    p.robust_threshold = 3.0;
    p.robust_pme = 2;
    assert_int_equal(sw_sabre_create(ctx, &p, &s), SW_EINVAL);
    p.robust_pme = 0;
    p.pme_band = -1;
    assert_int_equal(sw_sabre_create(ctx, &p, &s), SW_EINVAL);
    p.pme_band = 0;
    p.triangle_weight = 0.0;
    assert_int_equal(sw_sabre_create(ctx, &p, &s), SW_EINVAL);
    p.triangle_weight = 1.5;
    assert_int_equal(sw_sabre_create(ctx, &p, &s), SW_EINVAL);
    assert_null(s);
    free(clean);
    free(dirty);
}

/* The border band's tables (pme_band): every pair's entries name the same vertex of the extended
 * lattice in both windows, within OL squares of the line between the cores, and a full array has
 * all (2 OL + 1)(m + 1) corners and 2 OL m centres of every band; without the band, the m + 1
 * corners of the line. */
static void test_pme_band(void **state)
{
    (void)state;
    for (int32_t ol = 0; ol <= 2; ol++) {
        sw_sabre_params p = make_params(33, 33, 4, ol, SW_SABRE_PME_HIERARCHICAL);
        p.pme_band = 1;
        sw_sabre *s = create_ok(&p);
        const int32_t k = s->k, m = s->m, L = s->L, w = s->w;
        const int32_t want = (2 * ol + 1) * (m + 1) + 2 * ol * m;
        assert_int_equal(s->pstride, want);
        for (int32_t pi = 0; pi < s->npairs; pi++) {
            const int32_t lo = s->pair_lo[pi], hi = s->pair_hi[pi];
            const int horiz = pi < k * (k - 1);
            const int32_t line = horiz ? (lo % k + 1) * m : (lo / k + 1) * m;
            int32_t used = 0;
            for (int32_t j = 0; j < s->pstride; j++) {
                const size_t e = (size_t)pi * s->pstride + j;
                if (!s->pair_use[e])
                    continue;
                used++;
                double pos[2][2];
                const int32_t vv[2] = {s->pair_vlo[e], s->pair_vhi[e]}, part[2] = {lo, hi};
                for (int h = 0; h < 2; h++) {
                    const int32_t a = part[h] % k, b = part[h] / k, v = vv[h];
                    assert_true(v >= 0 && v < s->nl);
                    if (v < L * L) {
                        pos[h][0] = s->ws[a] + v % L;
                        pos[h][1] = s->ws[b] + v / L;
                    } else {
                        pos[h][0] = s->ws[a] + (v - L * L) % w + 0.5;
                        pos[h][1] = s->ws[b] + (v - L * L) / w + 0.5;
                    }
                }
                assert_true(pos[0][0] == pos[1][0] && pos[0][1] == pos[1][1]);
                const double across = horiz ? pos[0][0] : pos[0][1];
                assert_true(fabs(across - line) <= ol);
            }
            assert_int_equal(used, want);
            assert_int_equal(s->pair_n[pi], want);
        }
        sw_sabre_destroy(s);
        p.pme_band = 0;
        s = create_ok(&p);
        assert_int_equal(s->pstride, s->m + 1);
        sw_sabre_destroy(s);
    }
}

/* ------------------------------------------------------------------ Eq. 17 and the projection */

/* extend_eq17: m is Eq. 17's (the smallest with k m > max(nx, ny), the test's own loop), the
 * array stays centred, and every lenslet corner (cx, cy) is the centre of extended square
 * (cx - 1 + offx, cy - 1 + offy) inside the lattice; the default keeps the smallest array. */
static void check_eq17(int32_t nx, int32_t ny, int32_t k, int32_t want_m)
{
    sw_sabre_params p = make_params(nx, ny, k, 1, SW_SABRE_PME_DISTRIBUTED);
    p.extend_eq17 = 1;
    sw_sabre *s = create_ok(&p);
    sw_sabre_info in;
    sw_sabre_get_info(s, &in);
    int32_t maxd = nx > ny ? nx : ny, m = 1;
    while (k * m <= maxd)
        m++;
    if (want_m > 0)
        assert_int_equal(m, want_m); /* the test's rule against the seed's value */
    const int32_t S = k * m;
    assert_int_equal(in.m, m);
    assert_int_equal(in.extended, S + 1);
    assert_int_equal(in.lattice.sx, S);
    assert_int_equal(in.lattice.sy, S);
    assert_int_equal(in.lattice.offx, (S + 1 - nx) / 2);
    assert_int_equal(in.lattice.offy, (S + 1 - ny) / 2);
    for (int32_t cx = 0; cx <= nx; cx++) {
        int32_t I = cx - 1 + in.lattice.offx;
        assert_true(I >= 0 && I <= S - 1);
        /* the corner's lattice position is that square's centre */
        assert_true((double)cx - 0.5 + in.lattice.offx == I + 0.5);
    }
    for (int32_t cy = 0; cy <= ny; cy++) {
        int32_t J = cy - 1 + in.lattice.offy;
        assert_true(J >= 0 && J <= S - 1);
    }
    sw_sabre_destroy(s);
    /* without it: the smallest array that holds the data */
    p.extend_eq17 = 0;
    s = create_ok(&p);
    sw_sabre_get_info(s, &in);
    assert_int_equal(in.m, expect_m(nx, ny, k));
    sw_sabre_destroy(s);
}

static void test_eq17_geometry(void **state)
{
    (void)state;
    check_eq17(32, 32, 4, 9);  /* seed 002 section 5.A */
    check_eq17(32, 32, 16, 3); /* seed 002 section 5.A */
    check_eq17(32, 32, 8, 5);
    check_eq17(33, 33, 4, 9);
    check_eq17(40, 25, 4, 11);
    check_eq17(20, 20, 1, 21);
    check_eq17(9, 9, 8, 2);
    sw_sabre_params p = make_params(32, 32, 4, 1, SW_SABRE_PME_HIERARCHICAL);
    p.extend_eq17 = 2;
    sw_sabre *s = NULL;
    assert_int_equal(sw_sabre_create(ctx, &p, &s), SW_EINVAL);
    assert_null(s);
    assert_non_null(strstr(sw_context_error(ctx), "extend_eq17"));
}

/* With Eq. 17's array the lattice has a ring of padding around the real array; with nearest
 * padding (every padded corner reads the same constant tilt) a tilt is still exact, values and
 * actuators, for both PMEs. */
static void check_eq17_tilt(int32_t nx, int32_t k, sw_sabre_pme pme)
{
    const double pitch = 1.7, ax = -0.45, ay = 0.6;
    sw_sabre_params p = make_params(nx, nx, k, 1, pme);
    p.pitch = pitch;
    p.extend_eq17 = 1;
    p.padding = SW_SABRE_PAD_NEAREST;
    sw_sabre *s = create_ok(&p);
    sw_sabre_info in;
    sw_sabre_get_info(s, &in);
    assert_true(in.extended > nx + 1); /* padding on both sides */
    const int32_t n = nx * nx;
    float *slopes = malloc(2 * (size_t)n * sizeof *slopes);
    for (int32_t l = 0; l < n; l++) {
        slopes[l] = (float)ax;
        slopes[n + l] = (float)ay;
    }
    int64_t nv = sw_sabre_lattice_values(&in.lattice);
    float *vals = malloc((size_t)nv * sizeof *vals);
    float *act = malloc((size_t)(nx + 1) * (nx + 1) * sizeof *act);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals, act), SW_OK);
    double piston = 0.0, err = 0.0, span = 0.0;
    for (int64_t v = 0; v < nv; v++) {
        double x, y;
        vertex_pos(&in.lattice, v, &x, &y);
        double plane = pitch * (ax * x + ay * y);
        if (v == 0)
            piston = vals[0] - plane;
        err = fmax(err, fabs(vals[v] - plane - piston));
        span = fmax(span, fabs(plane));
    }
    if (!(err <= 1e-5 * span))
        fail_msg("Eq. 17 tilt, %d x %d, k %d, %s: max error %g of %g", nx, nx, k,
                 sw_sabre_pme_string(pme), err, span);
    for (int32_t cy = 0; cy <= nx; cy++)
        for (int32_t cx = 0; cx <= nx; cx++)
            assert_near(act[cy * (nx + 1) + cx],
                        pitch * (ax * (cx - 0.5) + ay * (cy - 0.5)) + piston, 1e-5 * span);
    free(slopes);
    free(vals);
    free(act);
    sw_sabre_destroy(s);
}

static void test_eq17_tilt(void **state)
{
    (void)state;
    check_eq17_tilt(32, 4, SW_SABRE_PME_HIERARCHICAL);
    check_eq17_tilt(32, 16, SW_SABRE_PME_HIERARCHICAL);
    check_eq17_tilt(32, 4, SW_SABRE_PME_DISTRIBUTED);
    check_eq17_tilt(25, 3, SW_SABRE_PME_DISTRIBUTED);
}

/* Random slopes of a plan's array (all lenslets). */
static float *random_slopes(int32_t n, uint64_t seed)
{
    float *s = malloc(2 * (size_t)n * sizeof *s);
    assert_non_null(s);
    for (int32_t l = 0; l < 2 * n; l++)
        s[l] = (float)(2.0 * unit_rand(&seed) - 1.0);
    return s;
}

/* P that picks, for each local square, `scale` times its centre vertex (w^2 x nl, row-major). */
static float *centre_picker(int32_t w, int32_t nl, float scale)
{
    const int32_t L = w + 1, w2 = w * w;
    float *P = calloc((size_t)w2 * nl, sizeof *P);
    assert_non_null(P);
    for (int32_t ls = 0; ls < w2; ls++)
        P[(size_t)ls * nl + L * L + ls] = scale;
    return P;
}

/* The projection's plumbing (step 6'): with P = scale x (the centre vertex of each square), the
 * command at corner (cx, cy) is scale x the assembled value of the centre of extended square
 * (cx - 1 + offx, cy - 1 + offy) (the owner's Y there plus its offset K, times q1 = scale: so a
 * wrong owner, square, offset or q1 shows), exactly (one nonzero term per row). */
static void check_picker(int32_t nx, int32_t ny, int32_t k, sw_sabre_pme pme, const uint8_t *mask)
{
    sw_sabre_params p = make_params(nx, ny, k, 1, pme);
    p.extend_eq17 = 1;
    p.valid = mask;
    sw_sabre *s = create_ok(&p);
    sw_sabre_info in;
    sw_sabre_get_info(s, &in);
    const int32_t w = in.window, nl = in.local_values, S = in.lattice.sx;
    const int64_t nv = sw_sabre_lattice_values(&in.lattice), na = (int64_t)(nx + 1) * (ny + 1);
    float *slopes = random_slopes(nx * ny, 99 + (uint64_t)k);
    float *vals = malloc((size_t)nv * sizeof *vals), *act = malloc((size_t)na * sizeof *act);
    float *spline = malloc((size_t)na * sizeof *spline), *vals2 = malloc((size_t)nv * sizeof *vals);
    assert_true(vals && act && spline && vals2);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, NULL, spline), SW_OK);
    for (int pass = 0; pass < 2; pass++) {
        const float scale = pass == 0 ? 1.0f : 2.0f;
        float *P = centre_picker(w, nl, scale);
        assert_int_equal(sw_sabre_set_projection(s, P, w * w, nl), SW_OK);
        free(P); /* copied */
        assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals, act), SW_OK);
        int nonzero = 0;
        for (int32_t cy = 0; cy <= ny; cy++)
            for (int32_t cx = 0; cx <= nx; cx++) {
                int32_t I = cx - 1 + in.lattice.offx, J = cy - 1 + in.lattice.offy;
                float c = vals[(int64_t)(S + 1) * (S + 1) + (int64_t)J * S + I];
                float got = act[cy * (nx + 1) + cx];
                if (got != scale * c)
                    fail_msg("%dx%d k=%d %s scale %g: corner (%d, %d) is %.9g, the centre of "
                             "square (%d, %d) x scale is %.9g",
                             nx, ny, k, sw_sabre_pme_string(pme), scale, cx, cy, got, I, J,
                             scale * c);
                nonzero |= got != 0.0f;
            }
        assert_true(nonzero);
        /* the values output is the assembly as before */
        assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals2, NULL), SW_OK);
        assert_memory_equal(vals, vals2, (size_t)nv * sizeof *vals);
    }
    /* removed: the spline at the corners again */
    assert_int_equal(sw_sabre_set_projection(s, NULL, 0, 0), SW_OK);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, NULL, act), SW_OK);
    assert_memory_equal(act, spline, (size_t)na * sizeof *act);
    assert_int_equal(sw_sabre_set_projection(s, NULL, 0, 0), SW_OK); /* twice: nothing to do */
    free(slopes);
    free(vals);
    free(vals2);
    free(act);
    free(spline);
    sw_sabre_destroy(s);
}

static void test_projection_picker(void **state)
{
    (void)state;
    check_picker(32, 32, 4, SW_SABRE_PME_HIERARCHICAL, NULL);
    check_picker(32, 32, 16, SW_SABRE_PME_HIERARCHICAL, NULL);
    check_picker(30, 22, 3, SW_SABRE_PME_DISTRIBUTED, NULL);
    const int32_t nx = 33, n = nx * nx;
    uint8_t *mask = malloc((size_t)n);
    for (int32_t l = 0; l < n; l++) {
        double x = l % nx - 16.0, y = l / nx - 16.0, r = sqrt(x * x + y * y);
        mask[l] = (uint8_t)(r <= 16.5 && r >= 5.0);
    }
    check_picker(nx, nx, 8, SW_SABRE_PME_HIERARCHICAL, mask);
    free(mask);
}

/* One partition: the window is the whole extended lattice in its own order and K = 0, so the
 * commands are P (any dense matrix here) applied to the assembled values, computed in double. */
static void test_projection_k1(void **state)
{
    (void)state;
    const int32_t nx = 9, ny = 7;
    sw_sabre_params p = make_params(nx, ny, 1, 1, SW_SABRE_PME_HIERARCHICAL);
    p.extend_eq17 = 1;
    sw_sabre *s = create_ok(&p);
    sw_sabre_info in;
    sw_sabre_get_info(s, &in);
    const int32_t w = in.window, nl = in.local_values, S = in.lattice.sx, w2 = w * w;
    assert_int_equal(w, S);
    const int64_t nv = sw_sabre_lattice_values(&in.lattice), na = (int64_t)(nx + 1) * (ny + 1);
    assert_int_equal(nl, nv);
    uint64_t seed = 4242;
    float *P = malloc((size_t)w2 * nl * sizeof *P);
    for (int64_t e = 0; e < (int64_t)w2 * nl; e++)
        P[e] = (float)(2.0 * unit_rand(&seed) - 1.0);
    assert_int_equal(sw_sabre_set_projection(s, P, w2, nl), SW_OK);
    float *slopes = random_slopes(nx * ny, 7);
    float *vals = malloc((size_t)nv * sizeof *vals), *act = malloc((size_t)na * sizeof *act);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals, act), SW_OK);
    for (int32_t cy = 0; cy <= ny; cy++)
        for (int32_t cx = 0; cx <= nx; cx++) {
            int32_t ls = (cy - 1 + in.lattice.offy) * S + (cx - 1 + in.lattice.offx);
            double want = 0.0, mag = 0.0;
            for (int32_t c = 0; c < nl; c++) {
                want += (double)P[(size_t)ls * nl + c] * vals[c];
                mag += fabs((double)P[(size_t)ls * nl + c] * vals[c]);
            }
            assert_near(act[cy * (nx + 1) + cx], want, 1e-5 * mag);
        }
    free(P);
    free(slopes);
    free(vals);
    free(act);
    sw_sabre_destroy(s);
}

/* Bad projections: SW_EINVAL, and the projection set before stays. */
static void test_projection_bad(void **state)
{
    (void)state;
    sw_sabre_params p = make_params(32, 32, 4, 1, SW_SABRE_PME_HIERARCHICAL);
    sw_sabre *plain = create_ok(&p);
    p.extend_eq17 = 1;
    sw_sabre *s = create_ok(&p);
    sw_sabre_info in;
    sw_sabre_get_info(s, &in);
    const int32_t w = in.window, nl = in.local_values, w2 = w * w, S = in.lattice.sx;
    float *P = centre_picker(w, nl, 1.0f);
    assert_int_equal(sw_sabre_set_projection(plain, P, w2, nl), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "extend_eq17"));
    assert_int_equal(sw_sabre_set_projection(s, P, w2 + 1, nl), SW_EINVAL);
    assert_int_equal(sw_sabre_set_projection(s, P, w2 - 1, nl), SW_EINVAL);
    assert_int_equal(sw_sabre_set_projection(s, P, w2, nl - 1), SW_EINVAL);
    assert_int_equal(sw_sabre_set_projection(s, P, nl, w2), SW_EINVAL);
    assert_int_equal(sw_sabre_set_projection(NULL, P, w2, nl), SW_EINVAL);
    assert_int_equal(sw_sabre_set_projection(s, P, w2, nl), SW_OK);
    float *Q = centre_picker(w, nl, 3.0f);
    Q[(size_t)5 * nl + 17] = NAN;
    assert_int_equal(sw_sabre_set_projection(s, Q, w2, nl), SW_EINVAL);
    Q[(size_t)5 * nl + 17] = INFINITY;
    assert_int_equal(sw_sabre_set_projection(s, Q, w2, nl), SW_EINVAL);
    /* still the first projection: commands = the centre values */
    const int64_t nv = sw_sabre_lattice_values(&in.lattice);
    float *slopes = random_slopes(32 * 32, 5);
    float *vals = malloc((size_t)nv * sizeof *vals), *act = malloc(33 * 33 * sizeof *act);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals, act), SW_OK);
    for (int32_t c = 0; c < 33 * 33; c++) {
        int32_t I = c % 33 - 1 + in.lattice.offx, J = c / 33 - 1 + in.lattice.offy;
        assert_true(act[c] == vals[(int64_t)(S + 1) * (S + 1) + (int64_t)J * S + I]);
    }
    free(P);
    free(Q);
    free(slopes);
    free(vals);
    free(act);
    sw_sabre_destroy(s);
    sw_sabre_destroy(plain);
}

/* ------------------------------------------------------------------ bad input */

static void expect_create(const sw_sabre_params *p, sw_status want, const char *word)
{
    sw_sabre *s = (sw_sabre *)0x1;
    sw_status st = sw_sabre_create(ctx, p, &s);
    if (st != want)
        fail_msg("create gave %s (%s), expected %s", sw_status_string(st), sw_context_error(ctx),
                 sw_status_string(want));
    assert_null(s);
    if (word && !strstr(sw_context_error(ctx), word))
        fail_msg("message '%s' does not mention '%s'", sw_context_error(ctx), word);
}

static void test_bad_input(void **state)
{
    (void)state;
    sw_sabre_params p = make_params(32, 32, 4, 1, SW_SABRE_PME_HIERARCHICAL);
    sw_sabre_params q;

    q = p, q.partitions = 3;
    expect_create(&q, SW_EINVAL, "power of two");
    q.pme = SW_SABRE_PME_DISTRIBUTED; /* D-PME takes any k */
    sw_sabre *s = create_ok(&q);
    sw_sabre_destroy(s);
    q = p, q.partitions = 32; /* max(nx, ny) - 1 = 31 */
    expect_create(&q, SW_EINVAL, "partitions");
    q = p, q.partitions = 0;
    expect_create(&q, SW_EINVAL, "partitions");
    q = p, q.nx = 1, q.partitions = 1;
    expect_create(&q, SW_EINVAL, "1 x 32");
    q = p, q.ny = 5000;
    expect_create(&q, SW_EINVAL, "lenslet array");
    q = p, q.pitch = 0.0;
    expect_create(&q, SW_EINVAL, "pitch");
    q = p, q.pitch = NAN;
    expect_create(&q, SW_EINVAL, "pitch");
    q = p, q.pitch = INFINITY;
    expect_create(&q, SW_EINVAL, "pitch");
    q = p, q.overlap = -1;
    expect_create(&q, SW_EINVAL, "overlap");
    q = p, q.overlap = 65;
    expect_create(&q, SW_EINVAL, "overlap");
    q = p, q.dpme_iterations = -2;
    expect_create(&q, SW_EINVAL, "iterations");
    q = p, q.pme = (sw_sabre_pme)7;
    expect_create(&q, SW_EINVAL, "piston");
    q = make_params(400, 400, 2, 1, SW_SABRE_PME_HIERARCHICAL); /* window of 201 squares */
    expect_create(&q, SW_EINVAL, "values");
    uint8_t zeros[32 * 32];
    memset(zeros, 0, sizeof zeros);
    q = p, q.valid = zeros;
    expect_create(&q, SW_EINVAL, "valid");
    assert_int_equal(sw_sabre_create(ctx, NULL, &s), SW_EINVAL);
    assert_int_equal(sw_sabre_create(ctx, &p, NULL), SW_EINVAL);

    /* run */
    uint8_t valid[32 * 32];
    memset(valid, 1, sizeof valid);
    valid[5 * 32 + 7] = 0;
    q = p, q.valid = valid;
    s = create_ok(&q);
    sw_sabre_info in;
    sw_sabre_get_info(s, &in);
    int64_t nv = sw_sabre_lattice_values(&in.lattice);
    float *vals = malloc((size_t)nv * sizeof *vals), *act = malloc(33 * 33 * sizeof *act);
    float *slopes = calloc(2 * 32 * 32, sizeof *slopes);
    slopes[5 * 32 + 7] = NAN; /* invalid lenslet: not read */
    slopes[32 * 32 + 5 * 32 + 7] = INFINITY;
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals, act), SW_OK);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_PINNED, NULL, act), SW_OK);
    for (int32_t i = 0; i < 33 * 33; i++)
        assert_true(isfinite(act[i]));
    slopes[32 * 32 + 9 * 32 + 2] = NAN; /* valid lenslet (2, 9), y slope */
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals, act), SW_ERANGE);
    assert_non_null(strstr(sw_context_error(ctx), "(2, 9)"));
    slopes[32 * 32 + 9 * 32 + 2] = 0.0f;
    slopes[3] = -INFINITY;
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, vals, act), SW_ERANGE);
    assert_non_null(strstr(sw_context_error(ctx), "(3, 0)"));
    slopes[3] = 0.0f;
    assert_int_equal(sw_sabre_run(s, NULL, SW_MEM_HOST, vals, act), SW_EINVAL);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_HOST, NULL, NULL), SW_EINVAL);
    assert_int_equal(sw_sabre_run(s, slopes, SW_MEM_DEVICE, vals, act), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "device"));
    assert_int_equal(sw_sabre_run(s, slopes, (sw_memory)9, vals, act), SW_EINVAL);
    assert_int_equal(sw_sabre_run(NULL, slopes, SW_MEM_HOST, vals, act), SW_EINVAL);
    free(vals);
    free(act);
    free(slopes);
    sw_sabre_destroy(s);
    sw_sabre_destroy(NULL);
    assert_null(sw_sabre_local_matrix(NULL));
}

static void test_strings_defaults(void **state)
{
    (void)state;
    sw_sabre_params p;
    memset(&p, 0x5a, sizeof p);
    sw_sabre_params_default(&p);
    assert_int_equal(p.nx, 0);
    assert_int_equal(p.ny, 0);
    assert_true(p.pitch == 1.0);
    assert_null(p.valid);
    assert_int_equal(p.partitions, 8);
    assert_int_equal(p.overlap, 1);
    assert_int_equal(p.pme, SW_SABRE_PME_HIERARCHICAL);
    assert_int_equal(p.dpme_iterations, 0);
    assert_int_equal(p.extend_eq17, 0);
    sw_sabre_pme e;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sw_sabre_pme_parse(sw_sabre_pme_string((sw_sabre_pme)i), &e), SW_OK);
        assert_int_equal(e, i);
    }
    assert_string_equal(sw_sabre_pme_string(SW_SABRE_PME_DISTRIBUTED), "distributed");
    assert_int_equal(sw_sabre_pme_parse("Hierarchical", &e), SW_OK);
    assert_int_equal(e, SW_SABRE_PME_HIERARCHICAL);
    assert_int_equal(sw_sabre_pme_parse("hier", &e), SW_EINVAL);
    assert_int_equal(sw_sabre_pme_parse(NULL, &e), SW_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geometry),          cmocka_unit_test(test_pairs_mask),
        cmocka_unit_test(test_tilt_exact),        cmocka_unit_test(test_k1_equals_global),
        cmocka_unit_test(test_pme_smooth),        cmocka_unit_test(test_dpme_converged),
        cmocka_unit_test(test_gemm_vs_loops),     cmocka_unit_test(test_annular),
        cmocka_unit_test(test_bad_input),         cmocka_unit_test(test_strings_defaults),
        cmocka_unit_test(test_padding),           cmocka_unit_test(test_fill),
        cmocka_unit_test(test_eq17_geometry),     cmocka_unit_test(test_eq17_tilt),
        cmocka_unit_test(test_projection_picker), cmocka_unit_test(test_projection_k1),
        cmocka_unit_test(test_projection_bad),    cmocka_unit_test(test_robust),
        cmocka_unit_test(test_pme_band),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

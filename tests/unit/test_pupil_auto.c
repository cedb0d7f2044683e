/*
 * The pupil tracker's automatic edge level (pupil.h step 3d, pupil_model.h "Step 3d") piece by
 * piece, each against a reference written here from the definitions (never by calling the code
 * under test for the expected value), and the GPU's course of it emulated on the CPU:
 *   - sw_pm_hist_quantile against the inverse of the histogram's piecewise-linear distribution
 *     (bisection, long double) on random histograms;
 *   - sw_pm_ring_band against the bands' definition (rho, d = (rho - 1) R, the margin from the
 *     smoothing) on random ellipses; sw_pm_ring_box holds every band pixel of the region (so
 *     a backend that scans the box and one that scans the region count the same pixels);
 *   - sw_pm_ring_threshold on histograms of known levels (falling and rising glow, too little
 *     contrast, too few pixels);
 *   - the course (sw_pm_auto_*): off, not found, no change, a change, a failed refit, the most
 *     refits;
 *   - the GPU's passes (pupil_cuda.cu: every pupil's measure, the masks of both regions made
 *     again, the refits of the pupils whose threshold changed, each pass after the other, the
 *     masks once more) run on the CPU's steps (sw_pupil_cpu_close, _border, _fit) and the model's
 *     functions from the first fit of a 0.4-level plan: the same thresholds, pupils, closed image
 *     and border lists as the CPU's own loop (sw_pupil_run, SW_PUPIL_EDGE_AUTO) on eyes whose
 *     glow falls off by 0, 0.5 and 0.9 towards the edge, one and two per frame, and on eyes with
 *     the artefacts of living eyes;
 *   - the bands drawn about the found pupil moved by 1e-9 px and turned by an ulp or two of its
 *     cos and sin (more than the CPU's and the GPU's ellipses differ by: their refinement sums are
 *     added in other orders; CUDA's cos / sin are within 2 ulps) count the same pixels.
 */
#include "testutil.h"

#include "pupil/pupil_internal.h"
#include "spotwave/sim.h"
#include "spotwave/sim_eye.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846

static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(2);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(cpu);
    return 0;
}

/* splitmix64 */
static uint64_t rnd_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rnd_range(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(rnd_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* ------------------------------------------------------------------ the quantile */

/* The histogram's distribution: bin v's c pixels spread evenly over [v - 1/2, v + 1/2). */
static long double cdf(const unsigned int *h, long double x)
{
    long double f = 0.0L;
    for (int v = 0; v < 256; v++) {
        const long double lo = v - 0.5L, hi = v + 0.5L;
        if (x >= hi)
            f += h[v];
        else if (x > lo)
            f += h[v] * (x - lo);
    }
    return f;
}

/* The smallest x with cdf(x) > q n (the q-quantile), by bisection. */
static double quantile_ref(const unsigned int *h, int64_t n, double q)
{
    const long double target = (long double)q * (long double)n;
    long double lo = -0.5L, hi = 255.5L;
    if (!(cdf(h, hi) > target))
        return 255.0;
    for (int it = 0; it < 200; it++) {
        const long double mid = 0.5L * (lo + hi);
        if (cdf(h, mid) > target)
            hi = mid;
        else
            lo = mid;
    }
    return (double)hi;
}

static void test_hist_quantile(void **state)
{
    (void)state;
    uint64_t s = 7;
    for (int trial = 0; trial < 300; trial++) {
        unsigned int h[256];
        memset(h, 0, sizeof h);
        /* dense, sparse (a few values), and one value */
        const int kind = trial % 3;
        const int nv = kind == 0 ? 256 : kind == 1 ? 1 + (int)(rnd_u64(&s) % 6) : 1;
        int64_t n = 0;
        for (int k = 0; k < nv; k++) {
            const int v = kind == 0 ? k : (int)(rnd_u64(&s) % 256);
            const unsigned int c = 1u + (unsigned int)(rnd_u64(&s) % (kind == 0 ? 50 : 5000));
            h[v] += c;
            n += c;
        }
        const double qs[5] = {0.0, 0.25, 0.5, 0.9, rnd_range(&s, 0.0, 1.0)};
        for (int k = 0; k < 5; k++) {
            const double got = sw_pm_hist_quantile(h, n, qs[k]);
            const double want = quantile_ref(h, n, qs[k]);
            if (!(fabs(got - want) <= 1e-9))
                fail_msg("trial %d: quantile %g of %lld pixels: %.12f, the definition %.12f", trial,
                         qs[k], (long long)n, got, want);
        }
    }
    /* one value v: the median is v (the middle of its bin) */
    unsigned int h[256] = {0};
    h[37] = 1000;
    assert_near(sw_pm_hist_quantile(h, 1000, 0.5), 37.0, 0.0);
}

/* ------------------------------------------------------------------ the bands */

/* The band of (x, y) about the ellipse (cx, cy, a >= b, angle) by pupil_model.h's definition
 * written out: -1 none, 0 far inside, 1 near inside, 2 outside; *margin the distance of rho^2
 * to the nearest limit (to skip pixels the rounding may put either way). */
static int band_ref(double cx, double cy, double a, double b, double angle_deg, int32_t radius,
                    double sigma, int32_t x, int32_t y, double *margin)
{
    const double s = radius <= 0 ? 0.0 : fmin(sigma, (double)radius);
    const double m = 3.0 * s + 3.0, W = 8.0, R = 0.5 * (a + b);
    const double t = angle_deg * PI / 180.0;
    const double dx = x - cx, dy = y - cy;
    const double e1 = (dx * cos(t) + dy * sin(t)) / a, e2 = (-dx * sin(t) + dy * cos(t)) / b;
    const double rho = sqrt(e1 * e1 + e2 * e2), d = (rho - 1.0) * R;
    /* the limits in rho */
    const double near_lo = 1.0 - (m + W) / R, near_hi = 1.0 - m / R;
    const double out_lo = 1.0 + m / R, out_hi = 1.0 + (m + W) / R;
    const double far_lo = 0.6, far_hi = fmin(0.75, near_lo);
    const double lim[6] = {far_lo, far_hi, near_lo, near_hi, out_lo, out_hi};
    *margin = INFINITY;
    for (int k = 0; k < 6; k++)
        *margin = fmin(*margin, fabs(rho * rho - lim[k] * lim[k]));
    (void)d;
    if (rho >= far_lo && rho < far_hi)
        return 0;
    if (rho >= near_lo && rho < near_hi)
        return 1;
    if (rho >= out_lo && rho < out_hi)
        return 2;
    return -1;
}

static void test_ring_bands_and_box(void **state)
{
    (void)state;
    uint64_t s = 11;
    const int32_t w = 300, h = 260;
    int checked = 0;
    for (int trial = 0; trial < 40; trial++) {
        const double a = rnd_range(&s, 50.0, 160.0), b = a * rnd_range(&s, 0.7, 1.0);
        const double cx = rnd_range(&s, 0.0, w), cy = rnd_range(&s, 0.0, h);
        const double ang = rnd_range(&s, 0.0, 180.0);
        const int32_t radius = (int32_t)(rnd_u64(&s) % 9);
        const double sigma = rnd_range(&s, 0.5, 6.0);
        sw_pupil_ellipse o;
        memset(&o, 0, sizeof o);
        o.cx_px = cx;
        o.cy_px = cy;
        o.a_px = a;
        o.b_px = b;
        o.angle_deg = ang;
        const sw_pm_ring g = sw_pm_ring_of(&o, radius, sigma);
        /* usable: R >= 2 (m + W), and a far band of more than 0.05 in rho^2 */
        const double sm = radius <= 0 ? 0.0 : fmin(sigma, (double)radius);
        const double m = 3.0 * sm + 3.0, R = 0.5 * (a + b);
        const double far_hi = fmin(0.75, 1.0 - (m + 8.0) / R);
        const int usable = R >= 2.0 * (m + 8.0) && far_hi * far_hi - 0.36 > 0.05;
        assert_int_equal(g.usable, usable);
        /* the extrapolation from the two inside bands' mean rho^2 to rho = 1 */
        const double c1 = 0.5 * (0.36 + far_hi * far_hi);
        const double nl = 1.0 - (m + 8.0) / R, nh = 1.0 - m / R;
        const double c2 = 0.5 * (nl * nl + nh * nh);
        assert_near(g.extrap, (1.0 - c2) / (c2 - c1), 1e-9);
        /* a region of the frame (columns [x0, x1)) */
        const int32_t x0 = trial % 3 == 1 ? w / 2 : 0, x1 = trial % 3 == 2 ? w / 2 : w;
        int32_t xa, xb, ya, yb;
        sw_pm_ring_box(&o, &g, x0, x1, h, &xa, &xb, &ya, &yb);
        for (int32_t y = 0; y < h; y++)
            for (int32_t x = x0; x < x1; x++) {
                double margin;
                const int want = band_ref(cx, cy, a, b, ang, radius, sigma, x, y, &margin);
                const int got = sw_pm_ring_band(&g, x, y);
                if (margin > 1e-9 && got != want)
                    fail_msg("trial %d: pixel (%d, %d): band %d, the definition %d", trial, x, y,
                             got, want);
                if (got >= 0 && !(x >= xa && x <= xb && y >= ya && y <= yb))
                    fail_msg("trial %d: band pixel (%d, %d) outside the box [%d, %d] x [%d, %d]",
                             trial, x, y, xa, xb, ya, yb);
                checked += got >= 0;
            }
        /* the box stays in the region and the frame */
        assert_true(xa >= x0 && xb <= x1 - 1 && ya >= 0 && yb <= h - 1);
    }
    assert_true(checked > 100000);
}

/* ------------------------------------------------------------------ the threshold */

/* Histograms with all of band k's n[k] pixels at level L[k]. */
static void bands_at(unsigned int *h, const int *L, const unsigned int *n)
{
    memset(h, 0, 768 * sizeof *h);
    for (int k = 0; k < 3; k++)
        h[k * 256 + L[k]] = n[k];
}

/* The threshold from levels L (the bands' medians) by step 3d's definition. */
static int32_t threshold_ref(const int *L, double extrap)
{
    double le = L[1] + (L[1] - L[0]) * extrap;
    if (le > L[1])
        le = L[1];
    if (!(le >= L[2] + 2.0))
        return -1;
    return (int32_t)floor(0.5 * (le + L[2]));
}

static void test_ring_threshold(void **state)
{
    (void)state;
    unsigned int h[768];
    const unsigned int many[3] = {500, 400, 300};
    const struct {
        int L[3];
        double extrap;
    } cases[] = {
        {{100, 100, 10}, 1.7}, /* flat glow: half of 100 + 10 */
        {{100, 80, 10}, 1.7},  /* falling: 80 - 1.7 x 20 = 46 at the edge */
        {{100, 60, 10}, 3.0},  /* falling fast: the edge below the outside + 2: none */
        {{60, 100, 10}, 1.7},  /* rising: taken as flat (100) */
        {{50, 13, 12}, 0.5},   /* 1 level of contrast: none */
        {{50, 14, 12}, 0.0},   /* 2 levels: floor(13) */
        {{255, 255, 0}, 0.3},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        bands_at(h, cases[c].L, many);
        const int32_t want = threshold_ref(cases[c].L, cases[c].extrap);
        assert_int_equal(sw_pm_ring_threshold(h, cases[c].extrap), want);
    }
    assert_int_equal(threshold_ref(cases[1].L, 1.7), 28);
    /* a band with fewer than 64 pixels: no measure */
    for (int k = 0; k < 3; k++) {
        unsigned int n[3] = {500, 400, 300};
        n[k] = 63;
        bands_at(h, cases[0].L, n);
        assert_int_equal(sw_pm_ring_threshold(h, 1.7), -1);
        n[k] = 64;
        bands_at(h, cases[0].L, n);
        assert_int_equal(sw_pm_ring_threshold(h, 1.7), 55);
    }
}

/* ------------------------------------------------------------------ the course */

static void test_auto_course(void **state)
{
    (void)state;
    unsigned int h[768];
    const unsigned int n[3] = {500, 400, 300};
    const int L[3] = {100, 80, 10}; /* -> 28 with extrap 1.7 */
    bands_at(h, L, n);

    /* off, or no pupil: no measure */
    sw_pm_auto s = sw_pm_auto_start(0, 1, 40, NULL);
    assert_false(sw_pm_auto_more(&s));
    s = sw_pm_auto_start(1, 0, 40, NULL);
    assert_false(sw_pm_auto_more(&s));

    /* a change: the new threshold, the old one kept for a failed refit */
    s = sw_pm_auto_start(1, 1, 40, NULL);
    assert_true(sw_pm_auto_more(&s));
    assert_int_equal(sw_pm_auto_measure(&s, 1, h, 1.7), 1);
    assert_int_equal(s.thr, 28);
    assert_int_equal(s.prev_thr, 40);
    assert_int_equal(s.refits, 1);
    assert_int_equal(sw_pm_auto_refit(&s, 1), 0); /* found: goes on */
    assert_true(sw_pm_auto_more(&s));
    /* the same threshold again: it stays, no more refits */
    assert_int_equal(sw_pm_auto_measure(&s, 1, h, 1.7), 0);
    assert_int_equal(s.thr, 28);
    assert_false(sw_pm_auto_more(&s));

    /* a failed refit: the threshold goes back, the masks are to be made again */
    s = sw_pm_auto_start(1, 1, 40, NULL);
    assert_int_equal(sw_pm_auto_measure(&s, 1, h, 1.7), 1);
    assert_int_equal(sw_pm_auto_refit(&s, 0), 1);
    assert_int_equal(s.thr, 40);
    assert_false(sw_pm_auto_more(&s));

    /* bands not usable, or nothing to measure: it stays */
    s = sw_pm_auto_start(1, 1, 40, NULL);
    assert_int_equal(sw_pm_auto_measure(&s, 0, h, 1.7), 0);
    assert_int_equal(s.thr, 40);
    assert_false(sw_pm_auto_more(&s));
    const unsigned int few[3] = {10, 400, 300};
    unsigned int hf[768];
    bands_at(hf, L, few);
    s = sw_pm_auto_start(1, 1, 40, NULL);
    assert_int_equal(sw_pm_auto_measure(&s, 1, hf, 1.7), 0);
    assert_int_equal(s.thr, 40);

    /* a threshold that keeps moving: SW_PM_RING_PASSES refits at most */
    s = sw_pm_auto_start(1, 1, 200, NULL);
    int refits = 0;
    while (sw_pm_auto_more(&s)) {
        const int Lk[3] = {100, 80 - 10 * refits, 10 - refits};
        bands_at(h, Lk, n);
        if (!sw_pm_auto_measure(&s, 1, h, 0.0))
            break;
        refits++;
        assert_int_equal(sw_pm_auto_refit(&s, 1), 0);
    }
    assert_int_equal(refits, SW_PM_RING_PASSES);
    assert_int_equal(s.refits, SW_PM_RING_PASSES);
}

/* The retries of a first fit that failed (sw_pm_auto_start, _retried, _retry_found). */
static void test_auto_retries(void **state)
{
    (void)state;
    unsigned int h[768];
    const unsigned int n[3] = {500, 400, 300};
    const int L[3] = {100, 80, 10}; /* -> 28 with extrap 1.7 */
    bands_at(h, L, n);
    const int32_t r3[SW_PM_AUTO_RETRIES] = {30, 20, 12};

    /* the levels: each half the one before, from half the first fit's */
    assert_near(sw_pm_auto_retry_level(0), 0.5 * SW_PM_EDGE_AUTO_INIT, 1e-15);
    for (int k = 1; k < SW_PM_AUTO_RETRIES; k++)
        assert_near(sw_pm_auto_retry_level(k), 0.5 * sw_pm_auto_retry_level(k - 1), 1e-15);

    /* found at once, step 3d off, or no threshold: no retry */
    sw_pm_auto s = sw_pm_auto_start(1, 1, 40, r3);
    assert_false(s.retrying);
    assert_true(sw_pm_auto_more(&s));
    s = sw_pm_auto_start(0, 0, 40, r3);
    assert_false(s.retrying);
    assert_false(sw_pm_auto_more(&s));
    s = sw_pm_auto_start(1, 0, -1, r3);
    assert_false(s.retrying);
    s = sw_pm_auto_start(1, 0, 40, NULL); /* no retry thresholds */
    assert_false(s.retrying);
    assert_int_equal(s.thr, 40);

    /* not found: the retries in order; the second finds it, its threshold stands and the
     * refits follow from it */
    s = sw_pm_auto_start(1, 0, 40, r3);
    assert_true(s.retrying);
    assert_false(sw_pm_auto_more(&s)); /* no measure while retrying */
    assert_int_equal(s.thr, 30);
    assert_int_equal(sw_pm_auto_retried(&s, 0), 0);
    assert_true(s.retrying);
    assert_int_equal(s.thr, 20);
    assert_int_equal(sw_pm_auto_retried(&s, 1), 0);
    assert_false(s.retrying);
    assert_int_equal(s.thr, 20);
    assert_true(sw_pm_auto_more(&s));
    assert_int_equal(sw_pm_auto_measure(&s, 1, h, 1.7), 1);
    assert_int_equal(s.thr, 28);
    assert_int_equal(sw_pm_auto_refit(&s, 0), 1); /* a failed refit: back to the retry's */
    assert_int_equal(s.thr, 20);

    /* none finds it: the first fit's threshold back, nothing follows */
    s = sw_pm_auto_start(1, 0, 40, r3);
    int tries = 0;
    int restore = 0;
    while (s.retrying) {
        tries++;
        restore = sw_pm_auto_retried(&s, 0);
    }
    assert_int_equal(tries, SW_PM_AUTO_RETRIES);
    assert_int_equal(restore, 1);
    assert_int_equal(s.thr, 40);
    assert_false(sw_pm_auto_more(&s));

    /* thresholds not below the last one tried (the same masks again), or none, are skipped */
    const int32_t dup[SW_PM_AUTO_RETRIES] = {40, 25, 25};
    s = sw_pm_auto_start(1, 0, 40, dup);
    assert_int_equal(s.thr, 25);
    assert_int_equal(sw_pm_auto_retried(&s, 0), 1);
    assert_int_equal(s.thr, 40);
    const int32_t none[SW_PM_AUTO_RETRIES] = {40, 40, -1};
    s = sw_pm_auto_start(1, 0, 40, none);
    assert_false(s.retrying);
    assert_int_equal(s.thr, 40);

    /* a retry's pupil stands with near <= max_near_ratio / 2 x inliers, and only when valid */
    sw_pupil_ellipse o;
    memset(&o, 0, sizeof o);
    o.valid = 1;
    o.inliers = 1000;
    o.near = 375;
    assert_true(sw_pm_auto_retry_found(&o, 0.75));
    o.near = 376;
    assert_false(sw_pm_auto_retry_found(&o, 0.75));
    assert_true(sw_pm_auto_retry_found(&o, INFINITY));
    o.valid = 0;
    o.near = 0;
    assert_false(sw_pm_auto_retry_found(&o, 0.75));
}

/* ------------------------------------------------------------------ the GPU's passes */

/* An f32 w x h frame of n_eyes eyes (centres c, diameters d) with the glow glow_e falling off
 * by falloff towards the edge, lenslets of `pitch` px; artefacts: the default artefacts of
 * living eyes too (seed). */
static sw_image eye_frame_lit(int32_t w, int32_t h, int n_eyes, const double (*c)[2],
                              const double *d, double falloff, int artefacts, uint64_t seed,
                              sw_eyesim_truth *truth, double glow_e, int32_t pitch)
{
    sw_eyesim_params sp;
    sw_eyesim_params_default(&sp);
    sp.sh.width = w;
    sp.sh.height = h;
    sp.sh.geom.pitch_px = pitch;
    sp.sh.geom.nx = w / pitch;
    sp.sh.geom.ny = h / pitch;
    sp.n_eyes = n_eyes;
    for (int e = 0; e < n_eyes; e++) {
        sp.eyes[e] = sp.eyes[0];
        sp.eyes[e].cx_px = c[e][0];
        sp.eyes[e].cy_px = c[e][1];
        sp.eyes[e].diameter_px = d[e];
    }
    if (artefacts)
        sw_eye_artefacts_default(&sp.art);
    else
        sw_eye_artefacts_none(&sp.art);
    sp.art.white_noise_e = 3.0;
    sp.art.glow_e = glow_e;
    sp.art.glow_falloff = falloff;
    sp.seed = seed;
    sw_image img;
    if (sw_image_alloc(cpu, w, h, SW_PIX_F32, &img) != SW_OK)
        fail_msg("sw_image_alloc: %s", sw_context_error(cpu));
    if (sw_eyesim_render(cpu, &sp, &img, truth) != SW_OK)
        fail_msg("sw_eyesim_render: %s", sw_context_error(cpu));
    return img;
}

/* eye_frame_lit with the default glow (20 e-) and pitch (32 px). */
static sw_image eye_frame(int32_t w, int32_t h, int n_eyes, const double (*c)[2], const double *d,
                          double falloff, int artefacts, uint64_t seed, sw_eyesim_truth *truth)
{
    return eye_frame_lit(w, h, n_eyes, c, d, falloff, artefacts, seed, truth, 20.0, 32);
}

static sw_pupil_plan *plan_for(const sw_image *f, int32_t n_pupils, double edge_level)
{
    sw_pupil_params p;
    sw_pupil_params_default(&p, f->width, f->height, f->type);
    p.n_pupils = n_pupils;
    p.edge_level = edge_level;
    sw_pupil_plan *plan = NULL;
    if (sw_pupil_create(cpu, &p, &plan) != SW_OK)
        fail_msg("sw_pupil_create: %s", sw_context_error(cpu));
    return plan;
}

/* The device state pupil_cuda.cu keeps between the kernels of step 3d, on the host. */
typedef struct emul {
    const sw_pupil_plan *plan; /* a plan of the frame (its parameters; the fit's randoms) */
    const uint8_t *smooth;
    int32_t w, h, np, split;
    sw_pm_auto au[2];
    int32_t thr[2], refit[2], redo;
    sw_pupil_ellipse pupils[2]; /* the device copy of the pupils */
    uint8_t *closed, *tmp;
    int32_t *xy[2];
    int64_t n[2];
    int restores, passes_run, retries_run, ragged;
} emul;

static void emul_region(const emul *e, int r, int32_t *x0, int32_t *x1)
{
    *x0 = r == 0 ? 0 : e->split;
    *x1 = r == 0 ? e->split : e->w;
}

/* pp_dilate/erode/border_kernel: both regions' masks and lists at their thresholds. */
static void emul_masks(emul *e)
{
    for (int r = 0; r < e->np; r++) {
        int32_t x0, x1;
        emul_region(e, r, &x0, &x1);
        if (e->thr[r] < 0) {
            for (int32_t y = 0; y < e->h; y++)
                memset(e->closed + (size_t)y * e->w + x0, 0, (size_t)(x1 - x0));
            e->n[r] = 0;
            continue;
        }
        sw_pupil_cpu_close(e->smooth, e->tmp, e->closed, e->w, e->h, x0, x1, e->thr[r],
                           e->plan->p.close_radius);
        e->n[r] = sw_pupil_cpu_border(e->closed, e->w, e->h, x0, x1, e->xy[r]);
    }
}

/* pp_ring_kernel: the blocks' histograms over the boxes (in the grid's pixel order), then the
 * last block's decisions, pupil by pupil. */
static void emul_ring(emul *e)
{
    const sw_pupil_params *p = &e->plan->p;
    int any = 0;
    for (int q = 0; q < e->np; q++)
        any |= sw_pm_auto_more(&e->au[q]);
    if (!any)
        return;
    static unsigned int ring[2][768];
    memset(ring, 0, sizeof ring);
    for (int r = 0; r < e->np; r++) {
        if (!sw_pm_auto_more(&e->au[r]))
            continue;
        const sw_pm_ring g = sw_pm_ring_of(&e->pupils[r], p->gauss_radius, p->gauss_sigma);
        if (!g.usable)
            continue;
        int32_t x0, x1, xa, xb, ya, yb;
        emul_region(e, r, &x0, &x1);
        sw_pm_ring_box(&e->pupils[r], &g, x0, x1, e->h, &xa, &xb, &ya, &yb);
        const int64_t bw = (int64_t)xb - xa + 1, bh = (int64_t)yb - ya + 1;
        const int64_t nbox = bw > 0 && bh > 0 ? bw * bh : 0;
        for (int64_t i = 0; i < nbox; i++) {
            const int32_t y = ya + (int32_t)(i / bw), x = xa + (int32_t)(i % bw);
            const int k = sw_pm_ring_band(&g, x, y);
            if (k >= 0)
                ring[r][k * 256 + e->smooth[(size_t)y * e->w + x]]++;
        }
    }
    for (int q = 0; q < e->np; q++) {
        if (!sw_pm_auto_more(&e->au[q]))
            continue;
        const sw_pm_ring g = sw_pm_ring_of(&e->pupils[q], p->gauss_radius, p->gauss_sigma);
        if (sw_pm_auto_measure(&e->au[q], g.usable, ring[q], g.extrap)) {
            e->thr[q] = e->au[q].thr;
            e->refit[q] = 1;
            e->redo = 1;
        }
    }
}

/* pp_fit_kernel of the first fit, its step 3d part: each pupil's course starts (from the
 * retries' thresholds of step 3, rt), and a pupil not found is marked for its first retry. */
static void emul_first(emul *e, const int32_t (*rt)[SW_PM_AUTO_RETRIES])
{
    for (int r = 0; r < e->np; r++) {
        e->au[r] = sw_pm_auto_start(1, e->pupils[r].valid, e->pupils[r].threshold,
                                    sw_pm_auto_retries_for(&e->pupils[r], rt[r]));
        if (e->au[r].retrying) {
            e->thr[r] = e->au[r].thr;
            e->refit[r] = 1;
            e->redo = 1;
        }
    }
}

/* pp_candidates/vote/fit_kernel of a retry or refit pass. */
static void emul_fit(emul *e)
{
    e->redo = 0; /* pp_candidates_kernel: this pass's masks are made */
    for (int r = 0; r < e->np; r++) {
        if (!e->refit[r])
            continue;
        int32_t x0, x1;
        emul_region(e, r, &x0, &x1);
        const sw_pm_region reg = sw_pm_region_make(x0, x1, e->h, e->plan->p.inlier_px);
        sw_pupil_ellipse o;
        memset(&o, 0, sizeof o);
        o.border = (int32_t)e->n[r];
        o.threshold = e->thr[r];
        o.x0 = x0;
        o.x1 = x1;
        sw_pupil_cpu_fit(e->plan, &reg, e->xy[r], e->n[r], &o);
        e->refit[r] = 0;
        if (e->au[r].retrying) {
            const int found = sw_pm_auto_found(&e->au[r], &o, e->plan->p.max_near_ratio);
            e->ragged += o.valid && !found;
            sw_pm_auto_retried(&e->au[r], found);
            if (found) {
                e->pupils[r] = o;
            } else {
                e->thr[r] = e->au[r].thr;
                e->redo = 1;
                e->refit[r] = e->au[r].retrying;
            }
            continue;
        }
        if (sw_pm_auto_refit(&e->au[r],
                             sw_pm_auto_found(&e->au[r], &o, e->plan->p.max_near_ratio))) {
            e->thr[r] = e->au[r].thr;
            e->redo = 1;
            e->restores++;
        } else {
            e->pupils[r] = o;
        }
    }
}

/* The frame's passes after the first fit (pupil_cuda.cu pp_enqueue_frame): the retries, the
 * measures and refits, the masks once more. */
static void emul_passes(emul *e)
{
    for (int k = 1; k <= SW_PM_AUTO_RETRIES; k++) {
        if (e->redo)
            emul_masks(e);
        for (int r = 0; r < e->np; r++)
            e->retries_run += e->refit[r];
        emul_fit(e);
    }
    for (int pass = 1; pass <= SW_PM_RING_PASSES; pass++) {
        emul_ring(e);
        if (e->redo)
            emul_masks(e);
        for (int r = 0; r < e->np; r++)
            e->passes_run += e->refit[r];
        emul_fit(e);
    }
    if (e->redo)
        emul_masks(e);
}

static void same_pupil(const char *what, int i, const sw_pupil_ellipse *c,
                       const sw_pupil_ellipse *g)
{
    if (c->valid != g->valid || c->failure != g->failure || c->threshold != g->threshold ||
        c->border != g->border || c->candidate != g->candidate || c->votes != g->votes ||
        c->inliers != g->inliers || c->near != g->near)
        fail_msg("%s: pupil %d: valid %d/%d failure %d/%d threshold %d/%d border %d/%d candidate "
                 "%d/%d votes %d/%d inliers %d/%d near %d/%d (CPU loop / GPU passes)",
                 what, i, c->valid, g->valid, (int)c->failure, (int)g->failure, c->threshold,
                 g->threshold, c->border, g->border, c->candidate, g->candidate, c->votes, g->votes,
                 c->inliers, g->inliers, c->near, g->near);
    if (c->valid && (c->cx_px != g->cx_px || c->cy_px != g->cy_px || c->a_px != g->a_px ||
                     c->b_px != g->b_px || c->angle_deg != g->angle_deg))
        fail_msg("%s: pupil %d: (%.12f, %.12f) a %.12f b %.12f vs (%.12f, %.12f) a %.12f b %.12f",
                 what, i, c->cx_px, c->cy_px, c->a_px, c->b_px, g->cx_px, g->cy_px, g->a_px,
                 g->b_px);
}

/* The last check_passes' retries, retries that passed the verdict with a ragged edge (dropped),
 * and its fixed-level (0.4) result. */
static int last_retries, last_ragged;
static sw_pupil_result last_r4;

/* The CPU's step 3d (sw_pupil_run, automatic level) and the GPU's passes emulated from the first
 * fit of a 0.4 plan: everything equal. Returns the CPU's result; *restores, *refits the
 * emulation's counts. */
static sw_pupil_result check_passes(const char *what, const sw_image *f, int32_t n_pupils,
                                    int *restores, int *refits)
{
    const int32_t w = f->width, h = f->height;
    sw_pupil_plan *pa = plan_for(f, n_pupils, SW_PUPIL_EDGE_AUTO);
    sw_pupil_plan *p4 = plan_for(f, n_pupils, SW_PM_EDGE_AUTO_INIT);
    sw_pupil_result ra, r4;
    assert_int_equal(sw_pupil_run(pa, f, &ra, NULL), SW_OK);
    assert_int_equal(sw_pupil_run(p4, f, &r4, NULL), SW_OK);
    assert_int_equal(ra.split_x, r4.split_x);

    sw_image sm, cl;
    assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U8, &sm), SW_OK);
    assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_U8, &cl), SW_OK);
    assert_int_equal(sw_pupil_last_images(p4, NULL, &sm, &cl), SW_OK);
    emul e;
    memset(&e, 0, sizeof e);
    e.plan = p4;
    e.w = w;
    e.h = h;
    e.np = n_pupils;
    e.split = r4.split_x;
    uint8_t *smooth = malloc((size_t)w * h);
    e.closed = malloc((size_t)w * h);
    e.tmp = malloc((size_t)w * h);
    assert_true(smooth && e.closed && e.tmp);
    for (int32_t y = 0; y < h; y++) {
        memcpy(smooth + (size_t)y * w, sw_image_row(&sm, y), (size_t)w);
        memcpy(e.closed + (size_t)y * w, sw_image_row(&cl, y), (size_t)w);
    }
    e.smooth = smooth;
    /* step 3's thresholds of the retries (pp_threshold_block / pp_otsu3_kernel): the levels of
     * the same split of the region's histogram */
    int32_t rt[2][SW_PM_AUTO_RETRIES];
    for (int r = 0; r < n_pupils; r++) {
        int32_t x0, x1;
        emul_region(&e, r, &x0, &x1);
        int64_t hist[256];
        memset(hist, 0, sizeof hist);
        for (int32_t y = 0; y < h; y++)
            for (int32_t x = x0; x < x1; x++)
                hist[smooth[(size_t)y * w + x]]++;
        const int32_t t_o = sw_pm_split(hist, p4->p.otsu_classes);
        assert_int_equal(sw_pm_edge_threshold(hist, t_o, SW_PM_EDGE_AUTO_INIT),
                         r4.pupil[r].threshold);
        sw_pm_auto_retry_thresholds(hist, t_o, rt[r]);
    }
    for (int r = 0; r < n_pupils; r++) {
        e.pupils[r] = r4.pupil[r];
        e.thr[r] = r4.pupil[r].threshold;
        e.xy[r] = malloc((size_t)w * h * 2 * sizeof(int32_t));
        assert_non_null(e.xy[r]);
        assert_int_equal(sw_pupil_last_border(p4, r, e.xy[r], (int64_t)w * h, &e.n[r]), SW_OK);
    }
    emul_first(&e, (const int32_t(*)[SW_PM_AUTO_RETRIES])rt);
    emul_passes(&e);

    for (int r = 0; r < n_pupils; r++) {
        same_pupil(what, r, &ra.pupil[r], &e.pupils[r]);
        int64_t n = -1;
        int32_t *xy = malloc((size_t)w * h * 2 * sizeof(int32_t));
        assert_non_null(xy);
        assert_int_equal(sw_pupil_last_border(pa, r, xy, (int64_t)w * h, &n), SW_OK);
        if (n != e.n[r] || memcmp(xy, e.xy[r], (size_t)n * 2 * sizeof(int32_t)) != 0)
            fail_msg("%s: pupil %d: the border lists differ (%lld / %lld points)", what, r,
                     (long long)n, (long long)e.n[r]);
        free(xy);
        free(e.xy[r]);
    }
    assert_int_equal(sw_pupil_last_images(pa, NULL, NULL, &cl), SW_OK);
    for (int32_t y = 0; y < h; y++)
        if (memcmp(sw_image_row(&cl, y), e.closed + (size_t)y * w, (size_t)w) != 0)
            fail_msg("%s: the closed images differ in row %d", what, y);
    printf("    %-44s thresholds %d -> %d", what, r4.pupil[0].threshold, ra.pupil[0].threshold);
    if (n_pupils == 2)
        printf(", %d -> %d", r4.pupil[1].threshold, ra.pupil[1].threshold);
    printf(" (%d retries, %d refits, %d failed)\n", e.retries_run, e.passes_run, e.restores);
    *restores = e.restores;
    *refits = e.passes_run;
    last_retries = e.retries_run;
    last_ragged = e.ragged;
    last_r4 = r4;
    free(smooth);
    free(e.closed);
    free(e.tmp);
    sw_image_free(&sm);
    sw_image_free(&cl);
    sw_pupil_destroy(pa);
    sw_pupil_destroy(p4);
    return ra;
}

static void test_gpu_passes_falloff(void **state)
{
    (void)state;
    const double falloffs[3] = {0.0, 0.5, 0.9};
    int refits_total = 0;
    for (int k = 0; k < 3; k++) {
        /* one eye */
        const double c1[1][2] = {{200.0, 185.0}}, d1[1] = {300.0};
        sw_eyesim_truth t;
        sw_image f = eye_frame(384, 384, 1, c1, d1, falloffs[k], 0, 3 + (uint64_t)k, &t);
        char what[96];
        snprintf(what, sizeof what, "one eye, fall-off %g", falloffs[k]);
        int restores, refits;
        const sw_pupil_result r = check_passes(what, &f, 1, &restores, &refits);
        refits_total += refits;
        assert_true(r.pupil[0].valid);
        sw_eyesim_truth_free(&t);
        sw_image_free(&f);
        /* two eyes */
        const double c2[2][2] = {{165.0, 160.0}, {480.0, 165.0}}, d2[2] = {260.0, 240.0};
        f = eye_frame(640, 320, 2, c2, d2, falloffs[k], 0, 13 + (uint64_t)k, &t);
        snprintf(what, sizeof what, "two eyes, fall-off %g", falloffs[k]);
        const sw_pupil_result r2 = check_passes(what, &f, 2, &restores, &refits);
        refits_total += refits;
        assert_true(r2.pupil[0].valid && r2.pupil[1].valid);
        sw_eyesim_truth_free(&t);
        sw_image_free(&f);
    }
    assert_true(refits_total >= 4); /* the passes were exercised */
}

static void test_gpu_passes_artefacts(void **state)
{
    (void)state;
    int refits_total = 0;
    for (int k = 0; k < 6; k++) {
        const double c[2][2] = {{150.0 + 7.0 * k, 160.0 - 3.0 * k}, {470.0 - 5.0 * k, 150.0}};
        const double d[2] = {200.0 + 10.0 * k, 230.0 - 8.0 * k};
        const int np = k % 2 ? 2 : 1;
        sw_image f = eye_frame(640, 320, np, c, d, 0.15 * k, 1, 41 + (uint64_t)k, NULL);
        char what[96];
        snprintf(what, sizeof what, "%d eye%s with artefacts, fall-off %g", np, np > 1 ? "s" : "",
                 0.15 * k);
        int restores, refits;
        check_passes(what, &f, np, &restores, &refits);
        refits_total += refits;
        sw_image_free(&f);
    }
    assert_true(refits_total >= 3);
}

/* Frames (found by a scan of random eyes) where a refit finds nothing: the last pupil, its
 * threshold, mask and border list come back, on one eye of two as on one of one. */
static void test_gpu_passes_failed_refit(void **state)
{
    (void)state;
    const struct {
        double c[2][2], d[2], falloff;
        int np, artefacts;
        uint64_t seed;
    } cases[] = {
        {{{209.0, 149.3}, {518.3, 118.2}}, {209.3, 247.1}, 0.92, 2, 0, 92},
        {{{74.0, 132.7}, {0.0, 0.0}}, {160.7, 0.0}, 0.75, 1, 1, 129},
        {{{171.0, 179.3}, {431.7, 175.5}}, {239.3, 280.0}, 0.89, 2, 0, 158},
        /* one pupil's refit fails while the other's next measure changes nothing: the masks
         * owed to the first are made in the next pass all the same */
        {{{245.8, 118.6}, {482.0, 193.9}}, {213.4, 220.0}, 0.96, 2, 0, 372},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sw_image f = eye_frame(640, 320, cases[k].np, cases[k].c, cases[k].d, cases[k].falloff,
                               cases[k].artefacts, cases[k].seed, NULL);
        char what[96];
        snprintf(what, sizeof what, "failed refit %zu (%d eye%s, fall-off %g)", k, cases[k].np,
                 cases[k].np > 1 ? "s" : "", cases[k].falloff);
        int restores, refits;
        check_passes(what, &f, cases[k].np, &restores, &refits);
        if (restores < 1)
            fail_msg("%s: no refit failed: the case tests less than it says", what);
        sw_image_free(&f);
    }
}

/* ------------------------------------------------------------------ the retries on eyes */

/* The mean semi-axis' error against radius R, in %. */
static double radius_err_pct(const sw_pupil_ellipse *o, double R)
{
    return 100.0 * (0.5 * (o->a_px + o->b_px) / R - 1.0);
}

/* Eyes as `sim eye` makes them (640 x 640, pitch 32, reflections and the other artefacts on)
 * whose glow falls off by 0.8 and 0.9: the fixed level 0.4 finds no pupil (its blob is cut out
 * of the dim glow inside the edge: too many border pixels off the ellipse), the automatic level
 * retries lower, finds it and refines it to within 1 % of the true radius (measured: -0.1 to
 * +0.5 %); the GPU's passes emulated agree. Fall-off 0.9 s 3 takes all three retries (0.2 fails,
 * 0.1 passes the verdict with a ragged edge, 0.05 is clean) and a refit that is dropped for
 * its ragged edge. (Of the seeds scanned, 0.8 s 4 and 0.9 s 0 are not here: the fixed level
 * passes the verdict there, so no retry runs; 0.9 s 0 then stays 10 % short, as before.) */
static void test_retry_falloff(void **state)
{
    (void)state;
    const double falloffs[2] = {0.8, 0.9};
    const int seeds[2][2] = {{0, 1}, {1, 3}};
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 2; j++) {
            const int s = seeds[k][j];
            const double c[1][2] = {{319.5 + 3.0 * s, 319.5 - 2.0 * s}}, d[1] = {576.0 - 6.0 * s};
            const double R = 0.5 * d[0];
            sw_image f =
                eye_frame(640, 640, 1, c, d, falloffs[k], 1, 71 + 10 * (uint64_t)k + s, NULL);
            char what[96];
            snprintf(what, sizeof what, "fall-off %g, seed %d, artefacts", falloffs[k], s);
            int restores, refits;
            const sw_pupil_result ra = check_passes(what, &f, 1, &restores, &refits);
            const sw_pupil_ellipse *o = &ra.pupil[0];
            if (last_retries < 1)
                fail_msg("%s: no retry: the case tests less than it says", what);
            if (!o->valid || !(fabs(radius_err_pct(o, R)) < 1.0))
                fail_msg("%s: automatic level: valid %d, radius error %.2f %%", what, o->valid,
                         o->valid ? radius_err_pct(o, R) : NAN);
            /* the fixed level: not found */
            const sw_pupil_result r4 = last_r4;
            if (r4.pupil[0].valid)
                fail_msg("%s: the fixed level 0.4 found the pupil (%.2f %%): the case tests less "
                         "than it says",
                         what, radius_err_pct(&r4.pupil[0], R));
            printf("    %s: automatic %.2f %% (threshold %d), 0.4: %s\n", what,
                   radius_err_pct(o, R), o->threshold,
                   sw_pupil_failure_string(r4.pupil[0].failure));
            sw_image_free(&f);
        }
}

/* Frames that worked before the retries give what they gave: a first fit that finds the pupil
 * runs no retry (fall-offs 0 to 0.6, artefacts on), and where no retry finds it (no glow: the
 * spots alone; a dim glow lit by blurred spots at a small pitch, where a retry passes the
 * verdict with a ragged edge but not sw_pm_auto_retry_found) the result, the closed mask and
 * the border list are the first fit's, the fixed level 0.4's, bit for bit. */
static void test_retry_keeps_before(void **state)
{
    (void)state;
    for (int k = 0; k < 3; k++) {
        const double c[1][2] = {{192.0, 188.0}}, d[1] = {290.0};
        sw_image f = eye_frame(384, 384, 1, c, d, 0.3 * k, 1, 90 + (uint64_t)k, NULL);
        char what[96];
        snprintf(what, sizeof what, "fall-off %g, artefacts: no retry", 0.3 * k);
        int restores, refits;
        const sw_pupil_result ra = check_passes(what, &f, 1, &restores, &refits);
        assert_true(ra.pupil[0].valid);
        assert_int_equal(last_retries, 0);
        sw_image_free(&f);
    }
    const struct {
        double glow;
        int32_t pitch;
        uint64_t seed;
    } cases[] = {{0.0, 32, 5}, {2.0, 16, 6}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const double c[1][2] = {{192.0, 188.0}}, d[1] = {300.0};
        sw_image f = eye_frame_lit(384, 384, 1, c, d, 0.3, 1, cases[k].seed, NULL, cases[k].glow,
                                   cases[k].pitch);
        char what[96];
        snprintf(what, sizeof what, "glow %g, pitch %d: retries fail", cases[k].glow,
                 (int)cases[k].pitch);
        int restores, refits;
        const sw_pupil_result ra = check_passes(what, &f, 1, &restores, &refits);
        if (ra.pupil[0].valid || last_retries < 1 || (k == 1 && last_ragged < 1))
            fail_msg("%s: valid %d after %d retries, %d ragged: the case tests less than it says",
                     what, ra.pupil[0].valid, last_retries, last_ragged);
        sw_pupil_plan *pa = plan_for(&f, 1, SW_PUPIL_EDGE_AUTO);
        sw_pupil_plan *p4 = plan_for(&f, 1, 0.4);
        sw_pupil_result r1, r4;
        assert_int_equal(sw_pupil_run(pa, &f, &r1, NULL), SW_OK);
        assert_int_equal(sw_pupil_run(p4, &f, &r4, NULL), SW_OK);
        same_pupil(what, 0, &r4.pupil[0], &r1.pupil[0]);
        assert_int_equal(r1.pupil[0].method, r4.pupil[0].method);
        sw_image ca, c4;
        assert_int_equal(sw_image_alloc(NULL, 384, 384, SW_PIX_U8, &ca), SW_OK);
        assert_int_equal(sw_image_alloc(NULL, 384, 384, SW_PIX_U8, &c4), SW_OK);
        assert_int_equal(sw_pupil_last_images(pa, NULL, NULL, &ca), SW_OK);
        assert_int_equal(sw_pupil_last_images(p4, NULL, NULL, &c4), SW_OK);
        for (int32_t y = 0; y < 384; y++)
            if (memcmp(sw_image_row(&ca, y), sw_image_row(&c4, y), 384) != 0)
                fail_msg("%s: the closed masks differ in row %d", what, y);
        int32_t *xa = malloc(384 * 384 * 2 * sizeof(int32_t));
        int32_t *x4 = malloc(384 * 384 * 2 * sizeof(int32_t));
        assert_true(xa && x4);
        int64_t na = -1, n4 = -2;
        assert_int_equal(sw_pupil_last_border(pa, 0, xa, 384 * 384, &na), SW_OK);
        assert_int_equal(sw_pupil_last_border(p4, 0, x4, 384 * 384, &n4), SW_OK);
        assert_int_equal(na, n4);
        assert_memory_equal(xa, x4, (size_t)na * 2 * sizeof(int32_t));
        free(xa);
        free(x4);
        sw_image_free(&ca);
        sw_image_free(&c4);
        sw_pupil_destroy(pa);
        sw_pupil_destroy(p4);
        sw_image_free(&f);
    }
}

/* ------------------------------------------------------------------ the CPU-GPU gap */

static void test_bands_insensitive(void **state)
{
    (void)state;
    const double falloffs[3] = {0.0, 0.5, 0.9};
    for (int k = 0; k < 3; k++) {
        const double c1[1][2] = {{200.0, 185.0}}, d1[1] = {300.0};
        sw_image f = eye_frame(384, 384, 1, c1, d1, falloffs[k], 0, 3 + (uint64_t)k, NULL);
        sw_pupil_plan *pa = plan_for(&f, 1, SW_PUPIL_EDGE_AUTO);
        sw_pupil_result ra;
        assert_int_equal(sw_pupil_run(pa, &f, &ra, NULL), SW_OK);
        sw_image sm;
        assert_int_equal(sw_image_alloc(NULL, 384, 384, SW_PIX_U8, &sm), SW_OK);
        assert_int_equal(sw_pupil_last_images(pa, NULL, &sm, NULL), SW_OK);
        const sw_pupil_ellipse o = ra.pupil[0];
        assert_true(o.valid);
        const sw_pupil_params *p = &pa->p;
        const double t = o.angle_deg * (PI / 180.0);
        int32_t thr[9];
        static unsigned int h0[768];
        for (int v = 0; v < 9; v++) {
            /* v 0: the pupil as found; then moved by 1e-9 px, or turned by an ulp of cos / sin */
            sw_pupil_ellipse q = o;
            const double eps = 1e-9;
            double ct = cos(t), st = sin(t);
            switch (v) {
            case 1: q.cx_px += eps; break;
            case 2: q.cy_px -= eps; break;
            case 3: q.a_px += eps; break;
            case 4: q.b_px -= eps; break;
            case 5: ct = nextafter(nextafter(ct, 2.0), 2.0); break;
            case 6: st = nextafter(nextafter(st, -2.0), -2.0); break;
            case 7:
                q.cx_px -= eps;
                q.a_px -= eps;
                st = nextafter(st, 2.0);
                break;
            case 8:
                q.cy_px += eps;
                q.b_px += eps;
                ct = nextafter(ct, -2.0);
                break;
            default: break;
            }
            const sw_pm_ring g = sw_pm_ring_make(q.cx_px, q.cy_px, q.a_px, q.b_px, ct, st,
                                                 p->gauss_radius, p->gauss_sigma);
            assert_true(g.usable);
            unsigned int hh[768];
            memset(hh, 0, sizeof hh);
            int32_t xa, xb, ya, yb;
            sw_pm_ring_box(&q, &g, 0, 384, 384, &xa, &xb, &ya, &yb);
            for (int32_t y = ya; y <= yb; y++)
                for (int32_t x = xa; x <= xb; x++) {
                    const int b = sw_pm_ring_band(&g, x, y);
                    if (b >= 0)
                        hh[b * 256 + ((const uint8_t *)sw_image_row(&sm, y))[x]]++;
                }
            thr[v] = sw_pm_ring_threshold(hh, g.extrap);
            if (v == 0)
                memcpy(h0, hh, sizeof hh);
            else if (memcmp(h0, hh, sizeof hh) != 0)
                fail_msg("fall-off %g: the bands moved by 1e-9 px / turned by 2 ulps (case %d) "
                         "count other pixels",
                         falloffs[k], v);
            if (thr[v] != thr[0])
                fail_msg(
                    "fall-off %g: the bands moved by 1e-9 px / turned by 2 ulps (case %d) give "
                    "threshold %d, %d as found",
                    falloffs[k], v, thr[v], thr[0]);
        }
        /* the found pupil's measure is the threshold it was fitted with (step 3d stopped) or
         * the refits ran out */
        printf("    fall-off %g: threshold %d, the measure about its pupil %d\n", falloffs[k],
               o.threshold, thr[0]);
        sw_image_free(&sm);
        sw_pupil_destroy(pa);
        sw_image_free(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist_quantile),        cmocka_unit_test(test_ring_bands_and_box),
        cmocka_unit_test(test_ring_threshold),       cmocka_unit_test(test_auto_course),
        cmocka_unit_test(test_auto_retries),         cmocka_unit_test(test_retry_falloff),
        cmocka_unit_test(test_retry_keeps_before),   cmocka_unit_test(test_gpu_passes_falloff),
        cmocka_unit_test(test_gpu_passes_artefacts), cmocka_unit_test(test_gpu_passes_failed_refit),
        cmocka_unit_test(test_bands_insensitive),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * The pupil tracker's steps (pupil.h steps 0-9, seed 001 Sec. 3.1) one at a time, each against a
 * reference written here from pupil.h / pupil_internal.h / pupil_model.h's definitions alone
 * (never by calling the code under test to make the expected value):
 *   step 0  the automatic scale's sums: a row's sum of the finite pixels above a level in the
 *           model's lane order (bit for bit) and against a long double sum, the exact count, the
 *           1024-slot total, the mean and 128 / m2.
 *   step 3  Otsu (sw_pm_otsu): the minimiser of the within-class variance computed directly from
 *           the bins (two passes, long double) on dense, sparse, one- and two-valued histograms
 *           and histograms of up to 2^31 pixels; smallest t on ties; inside = v > t. The
 *           three-class Otsu (sw_pm_otsu3) against the exhaustive minimiser over all t1 < t2,
 *           the smallest pair on exact ties; the clip (sw_pm_clip_hist) and the edge level
 *           (sw_pm_edge_threshold) against their definitions; the whole step on the histogram
 *           of an idealised iris, pupil and reflection.
 *   step 1  Gaussian weights (sw_pupil_gauss_weights) and the separable filter
 *           (sw_pupil_cpu_gauss) against a direct 2-D convolution with the outer-product weights.
 *   step 4  close (sw_pupil_cpu_close) against a direct 2-D max-then-min on the thresholded
 *           region, windows clipped to the region, junk outside the region.
 *   step 5  border pixels (sw_pupil_cpu_border) against a direct scan.
 *   step 2  binocular split (sw_pupil_cpu_split) against pupil.h's definition and on two discs.
 *   step 6-9 the conic through 5 points, its ellipse, the vote, step 9's inlier and near bands,
 *           the refinement, the verdict and the vote packing (pupil_model.h) on known ellipses;
 *           the whole fit (sw_pupil_cpu_fit) on digitised ellipses with outliers and points in
 *           the near band.
 */
#include "testutil.h"

#include "pupil/pupil_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846

/* ------------------------------------------------------------------ a small generator */

/* splitmix64: the test's own reproducible random numbers. */
static uint64_t rnd_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static double rnd_u01(uint64_t *s)
{
    return (double)(rnd_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* uniform integer in [0, n) */
static int64_t rnd_int(uint64_t *s, int64_t n)
{
    return (int64_t)(rnd_u01(s) * (double)n);
}

/* uniform in [lo, hi) */
static double rnd_range(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * rnd_u01(s);
}

static int32_t clampi(int32_t v, int32_t lo, int32_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/* ================================================================== step 0: the scale's sums */

/* A pixel of a row as a double (the test's own reading of the types). */
static double px_value(const void *row, int32_t x, sw_pixel_type t)
{
    switch (t) {
    case SW_PIX_U8: return ((const uint8_t *)row)[x];
    case SW_PIX_U16: return ((const uint16_t *)row)[x];
    case SW_PIX_U32: return ((const uint32_t *)row)[x];
    default: return ((const float *)row)[x];
    }
}

/* pupil_model.h's order written out from its comment: 32 lanes, lane j adds x = j, j + 32, ...
 * (finite pixels above thr; the others add 0.0), then butterflies with o = 16, 8, 4, 2, 1. */
static double lanes_sum(const void *row, int32_t width, sw_pixel_type t, double thr)
{
    double lane[32];
    for (int j = 0; j < 32; j++) {
        double a = 0.0;
        for (int32_t x = j; x < width; x += 32) {
            const double v = px_value(row, x, t);
            a += (isfinite(v) && v > thr) ? v : 0.0;
        }
        lane[j] = a;
    }
    for (int o = 16; o >= 1; o /= 2) {
        double nx[32];
        for (int j = 0; j < 32; j++)
            nx[j] = lane[j] + lane[j ^ o];
        memcpy(lane, nx, sizeof(lane));
    }
    return lane[0];
}

/* Step 0's sums: a row's sum of the finite pixels above a level, in pupil_model.h's order (bit
 * for bit) and to 1e-12 of a long double sum, with the exact count; the total over rows in the
 * 1024-slot order; the mean and the scale 128 / m2 (128 / m1 when nothing is above m1, 0 for an
 * empty frame). */
static void test_scale_sums(void **state)
{
    (void)state;
    uint64_t s = 111;
    static const sw_pixel_type types[4] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_U32, SW_PIX_F32};
    void *row = malloc(4 * 3000);
    assert_non_null(row);
    for (int trial = 0; trial < 400; trial++) {
        const sw_pixel_type t = types[trial % 4];
        const int32_t width = 1 + (int32_t)rnd_int(&s, trial < 200 ? 70 : 3000);
        for (int32_t x = 0; x < width; x++) {
            const double u = rnd_u01(&s);
            switch (t) {
            case SW_PIX_U8: ((uint8_t *)row)[x] = (uint8_t)rnd_int(&s, 256); break;
            case SW_PIX_U16: ((uint16_t *)row)[x] = (uint16_t)rnd_int(&s, 65536); break;
            case SW_PIX_U32: ((uint32_t *)row)[x] = (uint32_t)rnd_int(&s, 4294967296LL); break;
            default:
                ((float *)row)[x] = u < 0.03   ? NAN
                                    : u < 0.05 ? INFINITY
                                    : u < 0.07 ? -INFINITY
                                    : u < 0.09 ? -0.0f
                                               : (float)rnd_range(&s, -50, 1000);
            }
        }
        /* the level: none, a random one, or a pixel's own value (which does not count) */
        double thr = trial % 3 == 0 ? -INFINITY : rnd_range(&s, -20, 3e9);
        if (trial % 3 == 2) {
            thr = px_value(row, (int32_t)rnd_int(&s, width), t);
            if (!isfinite(thr))
                thr = 0.0;
        }
        int64_t count = -1;
        const double got = sw_pm_row_sum_host(row, width, t, thr, &count);
        long double ref = 0;
        int64_t nref = 0;
        for (int32_t x = 0; x < width; x++) {
            const double v = px_value(row, x, t);
            if (isfinite(v) && v > thr) {
                ref += v;
                nref++;
            }
        }
        assert_int_equal(count, nref);
        const double want = lanes_sum(row, width, t, thr);
        if (memcmp(&got, &want, sizeof(got)) != 0)
            fail_msg("row sum #%d (%d px, %s, level %g): %.17g, the documented order gives %.17g",
                     trial, width, sw_pixel_type_string(t), thr, got, want);
        assert_true(fabsl((long double)got - ref) <= 1e-12L * (fabsl(ref) + 1));
    }
    free(row);

    /* the total: slot i adds rows i, i + 1024, ... then a tree o = 512 .. 1 */
    double *rows = malloc(3000 * sizeof(double)), slot[1024];
    assert_non_null(rows);
    for (int trial = 0; trial < 20; trial++) {
        const int32_t h = 1 + (int32_t)rnd_int(&s, 3000);
        long double ref = 0;
        for (int32_t y = 0; y < h; y++) {
            rows[y] = rnd_range(&s, 0, 1e7) * (trial % 2 ? 1e-9 : 1.0);
            ref += rows[y];
        }
        for (int i = 0; i < 1024; i++) {
            slot[i] = 0.0;
            for (int32_t y = i; y < h; y += 1024)
                slot[i] += rows[y];
        }
        for (int o = 512; o >= 1; o /= 2)
            for (int i = 0; i < o; i++)
                slot[i] += slot[i + o];
        const double got = sw_pm_total_host(rows, h);
        assert_true(memcmp(&got, &slot[0], sizeof(got)) == 0);
        assert_true(fabsl((long double)got - ref) <= 1e-12L * ref);
    }
    free(rows);

    /* the mean: 0 (an empty frame) unless positive and finite */
    assert_true(sw_pm_frame_mean(1000.0, 10) == 100.0);
    assert_true(sw_pm_frame_mean(0.0, 10) == 0.0);
    assert_true(sw_pm_frame_mean(-5.0, 10) == 0.0);
    assert_true(sw_pm_frame_mean(NAN, 10) == 0.0);
    assert_true(sw_pm_frame_mean(INFINITY, 10) == 0.0);
    /* the scale: 128 / (sum / count) of the pixels above the mean; 128 / m1 when none */
    assert_true(sw_pm_scale_above(10.0, 6400.0, 100) == 2.0);
    assert_true(sw_pm_scale_above(32.0, 0.0, 0) == 4.0);
    assert_true(sw_pm_scale_above(3.0, 700.0, 7) == 128.0 / (700.0 / 7.0));
}

/* ================================================================== step 3: Otsu */

/* sigma_W^2(t) = w0 var0 + w1 var1 of the split {v <= t}, {v > t}, from the bins directly (two
 * passes: the class means, then the squared deviations), in long double; -1 when a class is
 * empty. */
static long double within_var(const int64_t *h, int t)
{
    long double n0 = 0, n1 = 0, s0 = 0, s1 = 0;
    for (int i = 0; i < 256; i++) {
        if (i <= t) {
            n0 += (long double)h[i];
            s0 += (long double)i * (long double)h[i];
        } else {
            n1 += (long double)h[i];
            s1 += (long double)i * (long double)h[i];
        }
    }
    if (n0 == 0 || n1 == 0)
        return -1;
    long double mu0 = s0 / n0, mu1 = s1 / n1, q0 = 0, q1 = 0;
    for (int i = 0; i < 256; i++) {
        if (i <= t)
            q0 += (long double)h[i] * ((long double)i - mu0) * ((long double)i - mu0);
        else
            q1 += (long double)h[i] * ((long double)i - mu1) * ((long double)i - mu1);
    }
    long double N = n0 + n1;
    return (n0 / N) * (q0 / n0) + (n1 / N) * (q1 / n1);
}

/* sw_pm_otsu(h) against the exhaustive minimiser of within_var over t = 0..254 (pupil.h step 3
 * maximises the between-class variance sigma_B^2; sigma_W^2 + sigma_B^2 is the histogram's
 * variance whatever t, so the two criteria pick the same t). */
static void check_otsu(const int64_t *h, const char *kind, int trial)
{
    int32_t t = sw_pm_otsu(h);
    long double best = -1;
    int t_ref = -1;
    for (int u = 0; u < 255; u++) {
        long double w = within_var(h, u);
        if (w >= 0 && (best < 0 || w < best)) {
            best = w;
            t_ref = u;
        }
    }
    if (best < 0) {
        if (t != -1)
            fail_msg("otsu %s #%d: no two-class split exists, got t = %d (want -1)", kind, trial,
                     t);
        return;
    }
    if (t < 0 || t > 254)
        fail_msg("otsu %s #%d: t = %d, want one in 0..254 (reference %d)", kind, trial, t, t_ref);
    long double w = within_var(h, t);
    if (!(w >= 0) || !(w - best <= 1e-12L * best))
        fail_msg("otsu %s #%d: sigma_W^2(t = %d) = %.17Lg, the minimum is %.17Lg at t = %d", kind,
                 trial, t, w, best, t_ref);
    /* Smallest t on ties: t - 1 with hist[t] = 0 would give the very same split (bit for bit the
     * same criterion), so the chosen t always has pixels. */
    if (h[t] <= 0)
        fail_msg("otsu %s #%d: t = %d has an empty bin: t - 1 gives the same split", kind, trial,
                 t);
}

static void test_otsu_random(void **state)
{
    (void)state;
    uint64_t s = 101;
    int64_t h[256];
    for (int trial = 0; trial < 1500; trial++) {
        memset(h, 0, sizeof(h));
        int kind = trial % 6;
        const char *name = "";
        if (kind == 0) { /* dense, uniform counts of a random size */
            name = "dense";
            static const int64_t top[4] = {2, 10, 1000, 1000000};
            int64_t m = top[rnd_int(&s, 4)];
            for (int i = 0; i < 256; i++)
                h[i] = rnd_int(&s, m + 1);
        } else if (kind == 1) { /* two bumps of random centres, widths and weights */
            name = "bimodal";
            int64_t total = (int64_t)1 << (10 + rnd_int(&s, 22)); /* up to 2^31 pixels */
            double c0 = rnd_range(&s, 0, 255), c1 = rnd_range(&s, 0, 255);
            double w0 = rnd_range(&s, 0.5, 30), w1 = rnd_range(&s, 0.5, 30);
            double f = rnd_range(&s, 0.05, 0.95);
            double g[256], sum = 0;
            for (int i = 0; i < 256; i++) {
                g[i] = f * exp(-0.5 * (i - c0) * (i - c0) / (w0 * w0)) +
                       (1 - f) * exp(-0.5 * (i - c1) * (i - c1) / (w1 * w1));
                sum += g[i];
            }
            for (int i = 0; i < 256; i++)
                h[i] = (int64_t)floor((double)total * g[i] / sum);
        } else if (kind == 2) { /* sparse: a few bins, counts up to 2^31 in all */
            name = "sparse";
            int k = 1 + (int)rnd_int(&s, 6);
            for (int j = 0; j < k; j++)
                h[rnd_int(&s, 256)] += 1 + rnd_int(&s, ((int64_t)1 << 31) / k);
        } else if (kind == 3) { /* sparse, small counts */
            name = "sparse-small";
            int k = 2 + (int)rnd_int(&s, 10);
            for (int j = 0; j < k; j++)
                h[rnd_int(&s, 256)] += 1 + rnd_int(&s, 5);
        } else if (kind == 4) { /* exactly 2^31 pixels in a random number of bins */
            name = "huge";
            int64_t left = (int64_t)1 << 31;
            int k = 2 + (int)rnd_int(&s, 40);
            for (int j = 0; j < k - 1; j++) {
                int64_t c = rnd_int(&s, left / 2 + 1);
                h[rnd_int(&s, 256)] += c;
                left -= c;
            }
            h[rnd_int(&s, 256)] += left;
        } else { /* a dense background of up to 2^31 pixels, a narrow bright peak */
            name = "peak";
            int64_t m = (int64_t)1 << (rnd_int(&s, 23));
            for (int i = 0; i < 256; i++)
                h[i] = rnd_int(&s, m + 1);
            int c = (int)rnd_int(&s, 256);
            h[c] += rnd_int(&s, (int64_t)1 << 30);
        }
        check_otsu(h, name, trial);
    }
}

static void test_otsu_few_values(void **state)
{
    (void)state;
    uint64_t s = 202;
    int64_t h[256];
    /* empty and one-valued histograms have no threshold */
    memset(h, 0, sizeof(h));
    assert_int_equal(sw_pm_otsu(h), -1);
    for (int v = 0; v < 256; v++) {
        memset(h, 0, sizeof(h));
        h[v] = 1 + rnd_int(&s, (int64_t)1 << 31);
        assert_int_equal(sw_pm_otsu(h), -1);
        check_otsu(h, "one-valued", v);
    }
    /* two values a < b: inside = v > t puts exactly the b pixels inside: a <= t < b, and the
     * smallest t on ties is a itself */
    static const int64_t counts[6] = {1, 2, 1000, 2147483647, 2147483648, 12345678};
    for (int trial = 0; trial < 600; trial++) {
        memset(h, 0, sizeof(h));
        int a = (int)rnd_int(&s, 255), b = a + 1 + (int)rnd_int(&s, 255 - a);
        if (trial < 4) { /* the extremes */
            a = trial & 1 ? 254 : 0;
            b = trial & 2 ? 255 : a + 1;
            if (b <= a)
                b = 255;
        }
        h[a] = counts[rnd_int(&s, 6)];
        h[b] = counts[rnd_int(&s, 6)];
        int32_t t = sw_pm_otsu(h);
        if (!(a <= t && t < b) || t != a)
            fail_msg("two values %d (x%lld) and %d (x%lld): t = %d, want %d", a, (long long)h[a], b,
                     (long long)h[b], t, a);
        check_otsu(h, "two-valued", trial);
    }
    /* three equally spaced values with equal counts: the splits {a} | {b, c} and {a, b} | {c}
     * are exact ties; the smaller t (= a) wins */
    for (int trial = 0; trial < 200; trial++) {
        memset(h, 0, sizeof(h));
        int d = 1 + (int)rnd_int(&s, 127), a = (int)rnd_int(&s, 256 - 2 * d);
        /* counts up to 2^20 first (N S0 and n0 ST below 2^53: exact), then up to 2^29 (N up to
         * 1.6e9 pixels) */
        int64_t c = 1 + rnd_int(&s, (int64_t)1 << (trial < 100 ? 20 : 29));
        h[a] = h[a + d] = h[a + 2 * d] = c;
        int32_t t = sw_pm_otsu(h);
        if (t != a)
            fail_msg("three values %d, %d, %d (x%lld each): t = %d, want %d (tie: smallest)", a,
                     a + d, a + 2 * d, (long long)c, t, a);
    }
}

/* Within-class variance of the three-class split {v <= t1}, {t1 < v <= t2}, {v > t2}, from the
 * bins directly (two passes, long double); -1 when a class is empty. */
static long double within_var3(const int64_t *h, int t1, int t2)
{
    long double n[3] = {0, 0, 0}, s[3] = {0, 0, 0}, q[3] = {0, 0, 0};
    for (int i = 0; i < 256; i++) {
        const int k = i <= t1 ? 0 : (i <= t2 ? 1 : 2);
        n[k] += (long double)h[i];
        s[k] += (long double)i * (long double)h[i];
    }
    if (n[0] == 0 || n[1] == 0 || n[2] == 0)
        return -1;
    const long double mu[3] = {s[0] / n[0], s[1] / n[1], s[2] / n[2]};
    for (int i = 0; i < 256; i++) {
        const int k = i <= t1 ? 0 : (i <= t2 ? 1 : 2);
        q[k] += (long double)h[i] * ((long double)i - mu[k]) * ((long double)i - mu[k]);
    }
    return (q[0] + q[1] + q[2]) / (n[0] + n[1] + n[2]);
}

/* The histogram's variance (the scale of the Otsu criteria's rounding). */
static long double hist_var(const int64_t *h)
{
    long double n = 0, s = 0, q = 0;
    for (int i = 0; i < 256; i++) {
        n += (long double)h[i];
        s += (long double)i * (long double)h[i];
    }
    if (n == 0)
        return 0;
    for (int i = 0; i < 256; i++)
        q += (long double)h[i] * ((long double)i - s / n) * ((long double)i - s / n);
    return q / n;
}

/* sw_pm_otsu3(h) against the exhaustive minimiser of the within-class variance over
 * 0 <= t1 < t2 <= 254 (maximising the three-class between-class variance is minimising the
 * within-class one): the search by long double prefix sums (sum of squares minus S_k^2 / n_k per
 * class), the chosen and the best pair then compared by the two-pass within_var3. */
static void check_otsu3(const int64_t *h, const char *kind, int trial)
{
    int32_t t2 = -5;
    const int32_t t1 = sw_pm_otsu3(h, &t2);
    long double cn[256], cs[256], n = 0, sm = 0, sq = 0;
    for (int i = 0; i < 256; i++) {
        n += (long double)h[i];
        sm += (long double)i * (long double)h[i];
        sq += (long double)i * (long double)i * (long double)h[i];
        cn[i] = n;
        cs[i] = sm;
    }
    long double best = -1;
    int r1 = -1, r2 = -1;
    for (int u1 = 0; u1 < 254; u1++)
        for (int u2 = u1 + 1; u2 < 255; u2++) {
            const long double n0 = cn[u1], n1 = cn[u2] - cn[u1], n2 = n - cn[u2];
            if (n0 == 0 || n1 == 0 || n2 == 0)
                continue;
            const long double s0 = cs[u1], s1 = cs[u2] - cs[u1], s2 = sm - cs[u2];
            const long double w = sq - s0 * s0 / n0 - s1 * s1 / n1 - s2 * s2 / n2;
            if (r1 < 0 || w < best) {
                best = w;
                r1 = u1;
                r2 = u2;
            }
        }
    if (r1 < 0) {
        if (t1 != -1 || t2 != -1)
            fail_msg("otsu3 %s #%d: no three-class split exists, got (%d, %d)", kind, trial, t1,
                     t2);
        return;
    }
    if (!(t1 >= 0 && t1 < t2 && t2 <= 254))
        fail_msg("otsu3 %s #%d: (%d, %d), want 0 <= t1 < t2 <= 254 (reference (%d, %d))", kind,
                 trial, t1, t2, r1, r2);
    const long double w = within_var3(h, t1, t2), wb = within_var3(h, r1, r2);
    if (!(w >= 0) || !(w - wb <= 1e-12L * hist_var(h)))
        fail_msg("otsu3 %s #%d: sigma_W^2(%d, %d) = %.17Lg, the minimum is %.17Lg at (%d, %d)",
                 kind, trial, t1, t2, w, wb, r1, r2);
    /* smallest (t1, t2) on ties: an empty bin at t1 or t2 gives the same classes as a smaller
     * pair (the very same criterion), so the chosen bins have pixels */
    if (h[t1] <= 0 || h[t2] <= 0)
        fail_msg("otsu3 %s #%d: (%d, %d) has an empty bin: a smaller pair gives the same split",
                 kind, trial, t1, t2);
}

static void random_hist(int64_t *h, uint64_t *s, int kind)
{
    memset(h, 0, 256 * sizeof(int64_t));
    if (kind == 0) { /* dense */
        static const int64_t top[3] = {3, 100, 100000};
        const int64_t m = top[rnd_int(s, 3)];
        for (int i = 0; i < 256; i++)
            h[i] = rnd_int(s, m + 1);
    } else if (kind == 1) { /* three bumps: iris, pupil, reflection; up to 2^31 pixels */
        const int64_t total = (int64_t)1 << (10 + rnd_int(s, 22));
        double c[3], w[3], f[3], g[256], sum = 0;
        for (int k = 0; k < 3; k++) {
            c[k] = rnd_range(s, 0, 255);
            w[k] = rnd_range(s, 0.5, 25);
            f[k] = rnd_range(s, 0.02, 1);
        }
        for (int i = 0; i < 256; i++) {
            g[i] = 0;
            for (int k = 0; k < 3; k++)
                g[i] += f[k] * exp(-0.5 * (i - c[k]) * (i - c[k]) / (w[k] * w[k]));
            sum += g[i];
        }
        for (int i = 0; i < 256; i++)
            h[i] = (int64_t)floor((double)total * g[i] / sum);
    } else if (kind == 2) { /* sparse: a few bins, counts up to 2^31 in all */
        const int k = 1 + (int)rnd_int(s, 7);
        for (int j = 0; j < k; j++)
            h[rnd_int(s, 256)] += 1 + rnd_int(s, ((int64_t)1 << 31) / k);
    } else { /* sparse, small counts */
        const int k = 2 + (int)rnd_int(s, 10);
        for (int j = 0; j < k; j++)
            h[rnd_int(s, 256)] += 1 + rnd_int(s, 5);
    }
}

static void test_otsu3_random(void **state)
{
    (void)state;
    uint64_t s = 303;
    int64_t h[256];
    static const char *names[4] = {"dense", "trimodal", "sparse", "sparse-small"};
    for (int trial = 0; trial < 240; trial++) {
        random_hist(h, &s, trial % 4);
        check_otsu3(h, names[trial % 4], trial);
    }
}

static void test_otsu3_few_values(void **state)
{
    (void)state;
    uint64_t s = 404;
    int64_t h[256];
    int32_t t2;
    /* no pixels, one value, two values: no three-class split */
    memset(h, 0, sizeof(h));
    assert_int_equal(sw_pm_otsu3(h, &t2), -1);
    assert_int_equal(t2, -1);
    for (int trial = 0; trial < 200; trial++) {
        memset(h, 0, sizeof(h));
        const int a = (int)rnd_int(&s, 255), b = a + 1 + (int)rnd_int(&s, 255 - a);
        h[a] = 1 + rnd_int(&s, (int64_t)1 << 31);
        if (trial % 2)
            h[b] = 1 + rnd_int(&s, (int64_t)1 << 31);
        assert_int_equal(sw_pm_otsu3(h, &t2), -1);
        assert_int_equal(t2, -1);
        /* step 3 then falls back to the two-class split (edge level 0: the split itself) */
        int64_t c[256];
        memcpy(c, h, sizeof(h));
        assert_int_equal(sw_pm_threshold(c, 3, 0.0), trial % 2 ? a : -1);
    }
    /* three values a < b < c: the classes are the values, (t1, t2) = (a, b) */
    for (int trial = 0; trial < 200; trial++) {
        memset(h, 0, sizeof(h));
        const int a = (int)rnd_int(&s, 254), b = a + 1 + (int)rnd_int(&s, 254 - a),
                  c = b + 1 + (int)rnd_int(&s, 255 - b);
        h[a] = 1 + rnd_int(&s, (int64_t)1 << 30);
        h[b] = 1 + rnd_int(&s, (int64_t)1 << 30);
        h[c] = 1 + rnd_int(&s, (int64_t)1 << 30);
        const int32_t t1 = sw_pm_otsu3(h, &t2);
        if (t1 != a || t2 != b)
            fail_msg("otsu3 of %d, %d, %d: (%d, %d), want (%d, %d)", a, b, c, t1, t2, a, b);
    }
    /* four equally spaced values with equal counts: {a}{b}{c, d}, {a}{b, c}{d} and
     * {a, b}{c}{d} are exact ties (counts up to 2^8: every term exact in double); the
     * lexicographically smallest pair (a, a + d) wins */
    for (int trial = 0; trial < 200; trial++) {
        memset(h, 0, sizeof(h));
        const int d = 1 + (int)rnd_int(&s, 63), a = (int)rnd_int(&s, 256 - 3 * d);
        const int64_t c = 1 + rnd_int(&s, 256);
        for (int k = 0; k < 4; k++)
            h[a + k * d] = c;
        const int32_t t1 = sw_pm_otsu3(h, &t2);
        if (t1 != a || t2 != a + d)
            fail_msg("otsu3 of 4 x %lld at %d + k %d: (%d, %d), want (%d, %d) (tie: smallest)",
                     (long long)c, a, d, t1, t2, a, a + d);
    }
}

/* Step 3a against its definition: P the lower median of the pixels above the mean, c = floor(3 P
 * / 2), the pixels above c counted as c. */
static void test_clip_hist(void **state)
{
    (void)state;
    uint64_t s = 505;
    int64_t h[256], c[256];
    int clipped = 0, kept = 0;
    for (int trial = 0; trial < 400; trial++) {
        random_hist(h, &s, trial % 4);
        if (trial % 5 == 4) /* a bright tail over a dim pupil: what the clip is for */
            for (int i = 150; i < 256; i++)
                h[i] += rnd_int(&s, 50);
        memcpy(c, h, sizeof(h));
        const int32_t got = sw_pm_clip_hist(c);
        long double n = 0, sum = 0;
        for (int i = 0; i < 256; i++) {
            n += (long double)h[i];
            sum += (long double)i * (long double)h[i];
        }
        const long double mean = n > 0 ? sum / n : 0;
        int64_t above = 0;
        for (int i = 0; i < 256; i++)
            if ((long double)i > mean)
                above += h[i];
        int want = 255;
        if (above > 0) {
            int64_t acc = 0;
            int P = -1;
            for (int i = 0; i < 256 && P < 0; i++)
                if ((long double)i > mean) {
                    acc += h[i];
                    if (2 * acc >= above)
                        P = i;
                }
            want = 3 * P / 2 < 255 ? 3 * P / 2 : 255;
        }
        if (got != want)
            fail_msg("clip #%d: c = %d, want %d", trial, got, want);
        int64_t tail = 0;
        for (int i = want; i < 256; i++)
            tail += h[i];
        for (int i = 0; i < 256; i++) {
            const int64_t e = i < want ? h[i] : (i == want ? tail : 0);
            if (c[i] != e)
                fail_msg("clip #%d (c = %d): bin %d holds %lld, want %lld", trial, want, i,
                         (long long)c[i], (long long)e);
        }
        clipped += want < 255;
        kept += want == 255;
    }
    assert_true(clipped > 50 && kept > 50); /* both branches seen */
}

/* Step 3c against its definition: b the mean of v <= t_o, p the lower median of v > t_o,
 * t = floor(b + k (p - b)) (long double here; values within 1e-9 of an integer are left out,
 * where the two roundings may differ); k = 0 gives t_o itself. */
static void test_edge_threshold(void **state)
{
    (void)state;
    uint64_t s = 606;
    int64_t h[256];
    int checked = 0;
    for (int trial = 0; trial < 2000; trial++) {
        random_hist(h, &s, trial % 4);
        int lo = 0, hi = 255;
        while (lo < 256 && h[lo] == 0)
            lo++;
        while (hi >= 0 && h[hi] == 0)
            hi--;
        if (lo >= hi)
            continue;
        const int32_t to = lo + (int32_t)rnd_int(&s, hi - lo); /* both sides have pixels */
        const double k = trial % 7 == 0 ? 0.0 : rnd_range(&s, 0.05, 0.95);
        const int32_t got = sw_pm_edge_threshold(h, to, k);
        if (k == 0.0) {
            assert_int_equal(got, to);
            continue;
        }
        long double n0 = 0, s0 = 0;
        int64_t n1 = 0;
        for (int i = 0; i < 256; i++) {
            if (i <= to) {
                n0 += (long double)h[i];
                s0 += (long double)i * (long double)h[i];
            } else {
                n1 += h[i];
            }
        }
        int p = -1;
        int64_t acc = 0;
        for (int i = to + 1; i < 256 && p < 0; i++) {
            acc += h[i];
            if (2 * acc >= n1)
                p = i;
        }
        const long double b = s0 / n0, v = b + (long double)k * ((long double)p - b);
        if (fabsl(v - rintl(v)) < 1e-9L)
            continue;
        const int32_t want = (int32_t)floorl(v);
        if (got != want)
            fail_msg("edge level #%d: t_o %d, b %.6Lf, p %d, k %.4f: t = %d, want %d", trial, to, b,
                     p, k, got, want);
        assert_true(got >= (int32_t)floorl(b) && got <= p - 1);
        checked++;
    }
    assert_true(checked > 1000);
    assert_int_equal(sw_pm_edge_threshold(h, -1, 0.4), -1);
}

/*
 * Step 3 as a whole on the histogram of an idealised frame: an iris (a narrow bump of pixels
 * near b0), a pupil (a plateau of values lo..hi, the glow falling off towards the edge), the
 * ramp of the blurred edge between them, and a reflection's tail up to 255 (saturated pixels
 * included), the pupil covering 5 % to 70 % of the region. Whatever the area and the tail, the
 * threshold is the edge level between the iris and the pupil:
 * floor(mean(iris) + 0.4 (median(pupil) - mean(iris))), computed here from the parts as built,
 * to within one level (the ramp's few pixels may move the iris' mean and the pupil's median).
 */
static void test_threshold_plateau(void **state)
{
    (void)state;
    uint64_t s = 707;
    int64_t h[256], iris[256], pupil[256];
    for (int trial = 0; trial < 300; trial++) {
        memset(iris, 0, sizeof(iris));
        memset(pupil, 0, sizeof(pupil));
        const int64_t N = (int64_t)1 << (14 + rnd_int(&s, 10));
        const double f = rnd_range(&s, 0.05, 0.7);
        const int b0 = (int)rnd_int(&s, 20), hi = 120 + (int)rnd_int(&s, 40);
        const int lo = (int)(0.7 * hi);
        const int64_t np = (int64_t)(f * (double)N), ni = N - np;
        for (int k = -2; k <= 2; k++) /* the iris: b0 +- 2 */
            iris[b0 + 2 + k] += ni / 5;
        for (int v = lo; v <= hi; v++) /* the pupil: a flat plateau */
            pupil[v] += np / (hi - lo + 1);
        for (int i = 0; i < 256; i++)
            h[i] = iris[i] + pupil[i];
        /* the ramp (0.5 % of the pupil, spread between iris and pupil) and the tail */
        for (int v = b0 + 5; v < lo; v++)
            h[v] += np / 200 / (lo - b0 - 5);
        const int64_t tail = (int64_t)(rnd_range(&s, 0.0, 0.08) * (double)np);
        for (int v = hi + 1; v < 255; v++)
            h[v] += tail / 2 / (254 - hi);
        h[255] += tail / 2;
        long double n0 = 0, s0 = 0;
        int64_t n1 = 0;
        for (int i = 0; i < 256; i++) {
            n0 += (long double)iris[i];
            s0 += (long double)i * (long double)iris[i];
            n1 += pupil[i];
        }
        int p = -1;
        int64_t acc = 0;
        for (int i = 0; i < 256 && p < 0; i++) {
            acc += pupil[i];
            if (2 * acc >= n1)
                p = i;
        }
        const long double bm = s0 / n0;
        const int want = (int)floorl(bm + 0.4L * ((long double)p - bm));
        int64_t c[256];
        memcpy(c, h, sizeof(h));
        const int32_t got = sw_pm_threshold(c, 3, 0.4);
        if (abs(got - want) > 1)
            fail_msg("threshold #%d: iris %d, pupil %d..%d (%.0f %%), tail %lld: t = %d, want %d",
                     trial, b0, lo, hi, 100 * f, (long long)tail, got, want);
    }
}

/* ================================================================== step 1: Gaussian */

static void test_gauss_weights(void **state)
{
    (void)state;
    static const double sigmas[7] = {0.3, 0.7, 1.0, 2.5, 4.0, 7.0, 30.0};
    for (int r = 0; r <= SW_PUPIL_MAX_RADIUS; r++) {
        for (int si = 0; si < 7; si++) {
            double sigma = sigmas[si];
            uint32_t w[SW_PUPIL_MAX_TAPS + 4];
            for (int k = 0; k < SW_PUPIL_MAX_TAPS + 4; k++)
                w[k] = 0xdeadbeefu;
            sw_pupil_gauss_weights(r, sigma, w);
            for (int k = 2 * r + 1; k < SW_PUPIL_MAX_TAPS + 4; k++)
                assert_int_equal(w[k], 0xdeadbeefu); /* 2 r + 1 weights, no more */
            if (r == 0) {
                assert_int_equal(w[0], 65536);
                continue;
            }
            uint64_t sum = 0;
            for (int k = 0; k <= 2 * r; k++)
                sum += w[k];
            if (sum != 65536)
                fail_msg("r %d sigma %g: weights sum to %llu", r, sigma, (unsigned long long)sum);
            /* reference: round(65536 g_k / sum g), g_k = exp(-k^2 / (2 sigma^2)) */
            long double g[SW_PUPIL_MAX_TAPS], gs = 0;
            for (int k = -r; k <= r; k++) {
                g[k + r] = expl(-(long double)(k * k) / (2.0L * sigma * sigma));
                gs += g[k + r];
            }
            for (int k = 1; k <= r; k++) {
                if (w[r + k] != w[r - k])
                    fail_msg("r %d sigma %g: w[%d] = %u, w[%d] = %u (not symmetric)", r, sigma, k,
                             w[r + k], -k, w[r - k]);
                long double ref = roundl(65536.0L * g[r + k] / gs);
                if (fabsl((long double)w[r + k] - ref) > 1)
                    fail_msg("r %d sigma %g: w[%d] = %u, want %.0Lf", r, sigma, k, w[r + k], ref);
                /* non-increasing away from the centre */
                if (k >= 2 && w[r + k] > w[r + k - 1])
                    fail_msg("r %d sigma %g: w[%d] = %u > w[%d] = %u", r, sigma, k, w[r + k], k - 1,
                             w[r + k - 1]);
            }
            /* the centre takes what the rounding of the others left: each of the 2 r others is
             * within 1/2 of its exact value (symmetric pairs alike), so the centre is within r of
             * its exact value and, being an integer, within r of the rounded reference */
            long double ref0 = roundl(65536.0L * g[r] / gs);
            if (fabsl((long double)w[r] - ref0) > r)
                fail_msg("r %d sigma %g: centre %u, want %.0Lf within %d", r, sigma, w[r], ref0, r);
        }
    }
}

/* The direct 2-D convolution with the outer-product weights w_j w_k (sum 2^32), edge pixels
 * repeated, rounded once: (sum + 2^31) >> 32. */
static void gauss_direct(const uint8_t *in, uint8_t *out, int32_t W, int32_t H, int32_t r,
                         const uint32_t *w)
{
    for (int32_t y = 0; y < H; y++)
        for (int32_t x = 0; x < W; x++) {
            uint64_t acc = 0;
            for (int32_t j = -r; j <= r; j++)
                for (int32_t k = -r; k <= r; k++) {
                    int32_t yy = clampi(y + j, 0, H - 1), xx = clampi(x + k, 0, W - 1);
                    acc += (uint64_t)w[j + r] * w[k + r] * in[(size_t)yy * W + xx];
                }
            out[(size_t)y * W + x] = (uint8_t)((acc + ((uint64_t)1 << 31)) >> 32);
        }
}

/*
 * The separable filter rounds once between its passes (the row pass's 8-bit result), the direct
 * one only at the end. With row results off by at most 1/2, the column pass before its rounding
 * is off by at most 1/2 from the exact value, so the two rounded results differ by at most 1.
 */
static void test_gauss_filter(void **state)
{
    (void)state;
    uint64_t s = 303;
    /* odd and small sizes (windows wider than the image), and one of many rows */
    static const int32_t sizes[][2] = {{17, 23}, {31, 19}, {45, 37}, {9, 7},    {3, 5},
                                       {21, 1},  {1, 13},  {16, 16}, {257, 131}};
    const int nsizes = (int)(sizeof(sizes) / sizeof(sizes[0]));
    int n_diff = 0;
    for (int si = 0; si < nsizes; si++) {
        int32_t W = sizes[si][0], H = sizes[si][1];
        size_t np = (size_t)W * H;
        uint8_t *in = malloc(np), *tmp = malloc(np), *out = malloc(np), *ref = malloc(np);
        assert_non_null(in);
        assert_non_null(tmp);
        assert_non_null(out);
        assert_non_null(ref);
        for (int32_t r = 0; r <= 6; r++) {
            for (int kind = 0; kind < 4; kind++) {
                uint32_t w[SW_PUPIL_MAX_TAPS];
                if (kind < 3) {
                    sw_pupil_gauss_weights(r, rnd_range(&s, 0.5, 6.0), w);
                } else { /* asymmetric weights summing to 2^16: w[k + r] multiplies in[x + k] */
                    uint32_t left = 65536;
                    for (int k = 0; k < 2 * r; k++) {
                        w[k] = (uint32_t)rnd_int(&s, left / 2 + 1);
                        left -= w[k];
                    }
                    w[2 * r] = left;
                }
                /* images: uniform noise, sparse bright pixels, a ramp with noise */
                for (size_t i = 0; i < np; i++) {
                    if (kind == 0 || kind == 3)
                        in[i] = (uint8_t)rnd_int(&s, 256);
                    else if (kind == 1)
                        in[i] = rnd_u01(&s) < 0.1 ? 255 : (uint8_t)rnd_int(&s, 3);
                    else
                        in[i] = (uint8_t)clampi((int32_t)(i % W) * 7 + (int32_t)rnd_int(&s, 20), 0,
                                                255);
                }
                memset(out, 0xA5, np);
                sw_pupil_cpu_gauss(in, tmp, out, W, H, r, w);
                gauss_direct(in, ref, W, H, r, w);
                for (size_t i = 0; i < np; i++) {
                    int d = (int)out[i] - (int)ref[i];
                    if (d < -1 || d > 1 || (r == 0 && d != 0) || (r == 0 && out[i] != in[i]))
                        fail_msg("gauss %dx%d r %d kind %d pixel (%d, %d): separable %d, "
                                 "direct %d, input %d",
                                 W, H, r, kind, (int)(i % W), (int)(i / W), out[i], ref[i], in[i]);
                    n_diff += d != 0;
                }
            }
            /* constant images stay exactly constant */
            uint32_t w[SW_PUPIL_MAX_TAPS];
            sw_pupil_gauss_weights(r, 4.0, w);
            static const uint8_t consts[4] = {0, 1, 128, 255};
            for (int ci = 0; ci < 4; ci++) {
                memset(in, consts[ci], np);
                memset(out, 0xA5, np);
                sw_pupil_cpu_gauss(in, tmp, out, W, H, r, w);
                for (size_t i = 0; i < np; i++)
                    if (out[i] != consts[ci])
                        fail_msg("gauss %dx%d r %d: constant %d became %d at (%d, %d)", W, H, r,
                                 consts[ci], out[i], (int)(i % W), (int)(i / W));
            }
        }
        free(in);
        free(tmp);
        free(out);
        free(ref);
    }
    /* the comparison is not vacuous: the single rounding does differ somewhere */
    assert_true(n_diff > 0);
}

/* ================================================================== step 4: close */

/* inside = smooth > t in the region, then the (2 r + 1)^2 maximum, then the minimum, each over
 * the window clipped to the region [x0, x1) x [0, H), directly in 2-D. */
static void close_direct(const uint8_t *sm, uint8_t *out, int32_t W, int32_t H, int32_t x0,
                         int32_t x1, int32_t t, int32_t r)
{
    size_t np = (size_t)W * H;
    uint8_t *dil = calloc(np, 1);
    assert_non_null(dil);
    for (int32_t y = 0; y < H; y++)
        for (int32_t x = x0; x < x1; x++) {
            int m = 0;
            for (int32_t yy = y - r; yy <= y + r; yy++)
                for (int32_t xx = x - r; xx <= x + r; xx++)
                    if (yy >= 0 && yy < H && xx >= x0 && xx < x1 && sm[(size_t)yy * W + xx] > t)
                        m = 1;
            dil[(size_t)y * W + x] = (uint8_t)m;
        }
    for (int32_t y = 0; y < H; y++)
        for (int32_t x = x0; x < x1; x++) {
            int m = 1;
            for (int32_t yy = y - r; yy <= y + r; yy++)
                for (int32_t xx = x - r; xx <= x + r; xx++)
                    if (yy >= 0 && yy < H && xx >= x0 && xx < x1 && !dil[(size_t)yy * W + xx])
                        m = 0;
            out[(size_t)y * W + x] = (uint8_t)m;
        }
    free(dil);
}

/* A random "smoothed" image: a few discs of random brightness over noise. */
static void blob_image(uint8_t *img, int32_t W, int32_t H, uint64_t *s)
{
    int32_t base = (int32_t)rnd_int(s, 100), noise = 1 + (int32_t)rnd_int(s, 60);
    for (int32_t i = 0; i < W * H; i++)
        img[i] = (uint8_t)(base + rnd_int(s, noise));
    int nb = 1 + (int)rnd_int(s, 6);
    for (int b = 0; b < nb; b++) {
        double cx = rnd_range(s, -5, W + 5), cy = rnd_range(s, -5, H + 5);
        double rad = rnd_range(s, 1, 15);
        int32_t v = 100 + (int32_t)rnd_int(s, 156);
        for (int32_t y = 0; y < H; y++)
            for (int32_t x = 0; x < W; x++)
                if ((x - cx) * (x - cx) + (y - cy) * (y - cy) <= rad * rad)
                    img[(size_t)y * W + x] = (uint8_t)clampi(v - (int32_t)rnd_int(s, 40), 0, 255);
    }
}

static void test_close(void **state)
{
    (void)state;
    uint64_t s = 404;
    for (int trial = 0; trial < 128; trial++) {
        int32_t W = 16 + (int32_t)rnd_int(&s, 60), H = 16 + (int32_t)rnd_int(&s, 45);
        if (trial >= 120) { /* a few frames of many rows (the rows are shared among threads) */
            W = 200 + (int32_t)rnd_int(&s, 200);
            H = 150 + (int32_t)rnd_int(&s, 100);
        }
        int32_t r = trial % 6;
        int32_t x0, x1;
        switch (trial % 4) {
        case 0: x0 = 0, x1 = W; break;                               /* the whole frame */
        case 1: x0 = 0, x1 = 1 + (int32_t)rnd_int(&s, W - 1); break; /* a left region */
        case 2: x0 = 1 + (int32_t)rnd_int(&s, W - 1), x1 = W; break; /* a right region */
        default:                                                     /* anywhere, 1 .. W wide */
            x0 = (int32_t)rnd_int(&s, W);
            x1 = x0 + 1 + (int32_t)rnd_int(&s, W - x0);
            break;
        }
        size_t np = (size_t)W * H;
        uint8_t *sm = malloc(np), *tmp = malloc(np), *out = malloc(np), *ref = malloc(np);
        assert_non_null(sm);
        assert_non_null(tmp);
        assert_non_null(out);
        assert_non_null(ref);
        int32_t t;
        if (trial % 3 == 0) { /* noise of a random density */
            for (size_t i = 0; i < np; i++)
                sm[i] = (uint8_t)rnd_int(&s, 256);
            t = 150 + (int32_t)rnd_int(&s, 105);
        } else {
            blob_image(sm, W, H, &s);
            t = 60 + (int32_t)rnd_int(&s, 150);
        }
        close_direct(sm, ref, W, H, x0, x1, t, r);
        /* the same region with three kinds of junk outside it: the region's result must not
         * change, and nothing outside the region is written */
        for (int junk = 0; junk < 3; junk++) {
            for (int32_t y = 0; y < H; y++)
                for (int32_t x = 0; x < W; x++)
                    if (x < x0 || x >= x1)
                        sm[(size_t)y * W + x] =
                            junk == 0 ? 255 : (junk == 1 ? 0 : (uint8_t)rnd_int(&s, 256));
            memset(out, 0xA5, np);
            memset(tmp, 0x5A, np);
            sw_pupil_cpu_close(sm, tmp, out, W, H, x0, x1, t, r);
            for (int32_t y = 0; y < H; y++)
                for (int32_t x = 0; x < W; x++) {
                    size_t i = (size_t)y * W + x;
                    int in_region = x >= x0 && x < x1;
                    if (in_region && out[i] != ref[i])
                        fail_msg("close %dx%d region [%d, %d) t %d r %d junk %d: (%d, %d) is %d, "
                                 "want %d",
                                 W, H, x0, x1, t, r, junk, x, y, out[i], ref[i]);
                    if (!in_region && out[i] != 0xA5)
                        fail_msg("close %dx%d region [%d, %d): (%d, %d) outside the region was "
                                 "written (%d)",
                                 W, H, x0, x1, x, y, out[i]);
                }
        }
        /* radius 0: the thresholded region itself */
        if (r == 0)
            for (int32_t y = 0; y < H; y++)
                for (int32_t x = x0; x < x1; x++)
                    assert_int_equal(ref[(size_t)y * W + x], sm[(size_t)y * W + x] > t);
        free(sm);
        free(tmp);
        free(out);
        free(ref);
    }
}

/* A pupil cut by the frame's edge is not eroded from outside: a region filled to its edges stays
 * filled (windows clipped to the region). */
static void test_close_edges(void **state)
{
    (void)state;
    const int32_t W = 40, H = 30;
    uint8_t sm[40 * 30], tmp[40 * 30], out[40 * 30];
    for (int32_t y = 0; y < H; y++)
        for (int32_t x = 0; x < W; x++)
            sm[y * W + x] = (x >= 10 && x < 30) ? 200 : 0; /* bright columns 10..29 */
    for (int32_t r = 0; r <= 5; r++) {
        memset(out, 0xA5, sizeof(out));
        sw_pupil_cpu_close(sm, tmp, out, W, H, 10, 30, 100, r); /* the bright part as region */
        for (int32_t y = 0; y < H; y++)
            for (int32_t x = 0; x < W; x++)
                assert_int_equal(out[y * W + x], (x >= 10 && x < 30) ? 1 : 0xA5);
    }
}

/* ================================================================== step 5: border */

/* Inside pixels with an outside 8-neighbour in the region (neighbours beyond the region or the
 * image do not count), raster order. */
static int64_t border_direct(const uint8_t *c, int32_t W, int32_t H, int32_t x0, int32_t x1,
                             int32_t *xy)
{
    int64_t n = 0;
    for (int32_t y = 0; y < H; y++)
        for (int32_t x = x0; x < x1; x++) {
            if (c[(size_t)y * W + x] != 1)
                continue;
            int b = 0;
            for (int dy = -1; dy <= 1; dy++)
                for (int dx = -1; dx <= 1; dx++) {
                    int32_t xx = x + dx, yy = y + dy;
                    if ((dx || dy) && yy >= 0 && yy < H && xx >= x0 && xx < x1 &&
                        c[(size_t)yy * W + xx] == 0)
                        b = 1;
                }
            if (b) {
                xy[2 * n] = x;
                xy[2 * n + 1] = y;
                n++;
            }
        }
    return n;
}

static void check_border(const uint8_t *c, int32_t W, int32_t H, int32_t x0, int32_t x1,
                         const char *what)
{
    size_t cap = (size_t)(x1 - x0) * H;
    int32_t *xy = malloc(cap * 2 * sizeof(int32_t)), *ref = malloc(cap * 2 * sizeof(int32_t));
    assert_non_null(xy);
    assert_non_null(ref);
    int64_t nr = border_direct(c, W, H, x0, x1, ref);
    int64_t n = sw_pupil_cpu_border(c, W, H, x0, x1, xy);
    if (n != nr)
        fail_msg("border %s %dx%d region [%d, %d): %lld pixels, want %lld", what, W, H, x0, x1,
                 (long long)n, (long long)nr);
    for (int64_t k = 0; k < n; k++)
        if (xy[2 * k] != ref[2 * k] || xy[2 * k + 1] != ref[2 * k + 1])
            fail_msg("border %s %dx%d region [%d, %d): pixel %lld is (%d, %d), want (%d, %d)", what,
                     W, H, x0, x1, (long long)k, xy[2 * k], xy[2 * k + 1], ref[2 * k],
                     ref[2 * k + 1]);
    free(xy);
    free(ref);
}

static void test_border(void **state)
{
    (void)state;
    uint64_t s = 505;
    for (int trial = 0; trial < 310; trial++) {
        int32_t W = 3 + (int32_t)rnd_int(&s, 70), H = 1 + (int32_t)rnd_int(&s, 50);
        if (trial >= 300) { /* a few large frames */
            W = 200 + (int32_t)rnd_int(&s, 300);
            H = 150 + (int32_t)rnd_int(&s, 150);
        }
        int32_t x0 = trial % 3 == 0 ? 0 : (int32_t)rnd_int(&s, W);
        int32_t x1 = trial % 5 == 0 ? W : x0 + 1 + (int32_t)rnd_int(&s, W - x0);
        size_t np = (size_t)W * H;
        uint8_t *c = malloc(np), *sm = malloc(np);
        assert_non_null(c);
        assert_non_null(sm);
        /* a closed mask of blobs (through the close step's reference) or plain noise */
        if (trial % 2) {
            blob_image(sm, W, H, &s);
            close_direct(sm, c, W, H, x0, x1, 120, (int32_t)rnd_int(&s, 3));
        } else {
            double p = rnd_u01(&s);
            for (size_t i = 0; i < np; i++)
                c[i] = rnd_u01(&s) < p;
        }
        /* junk outside the region: 0 (outside) would make false borders if it were read */
        uint8_t junk = (uint8_t)(trial % 3 == 1 ? 0xA5 : 0);
        for (int32_t y = 0; y < H; y++)
            for (int32_t x = 0; x < W; x++)
                if (x < x0 || x >= x1)
                    c[(size_t)y * W + x] = junk;
        check_border(c, W, H, x0, x1, "random");
        free(c);
        free(sm);
    }
}

static void test_border_filled(void **state)
{
    (void)state;
    const int32_t W = 30, H = 20;
    uint8_t c[30 * 20];
    int32_t xy[2 * 30 * 20];
    /* a region filled with 1 (the rest of the frame 0): no border at all, neither along the
     * region's own boundary nor along the image's edges */
    static const int32_t regions[][2] = {{0, 30}, {0, 12}, {12, 30}, {5, 20}, {7, 8}};
    for (int k = 0; k < 5; k++) {
        int32_t x0 = regions[k][0], x1 = regions[k][1];
        for (int32_t i = 0; i < W * H; i++)
            c[i] = (i % W >= x0 && i % W < x1) ? 1 : 0;
        assert_int_equal(sw_pupil_cpu_border(c, W, H, x0, x1, xy), 0);
        check_border(c, W, H, x0, x1, "filled");
    }
    /* the left part of the region [5, 25) filled (columns 5..14), touching the region's top,
     * bottom and left side and the image's top and bottom: the border is column 14 only (its
     * open side) */
    for (int32_t i = 0; i < W * H; i++)
        c[i] = (i % W < 15) ? 1 : 0;
    int64_t n = sw_pupil_cpu_border(c, W, H, 5, 25, xy);
    assert_int_equal(n, H);
    for (int32_t k = 0; k < H; k++) {
        assert_int_equal(xy[2 * k], 14);
        assert_int_equal(xy[2 * k + 1], k);
    }
    /* a disc cut by the image's top-left corner, the whole frame as region: its border is the
     * arc, none along the image's edges */
    for (int32_t y = 0; y < H; y++)
        for (int32_t x = 0; x < W; x++)
            c[y * W + x] = (x * x + y * y <= 12 * 12);
    n = sw_pupil_cpu_border(c, W, H, 0, W, xy);
    assert_true(n > 0);
    for (int64_t k = 0; k < n; k++) {
        int32_t x = xy[2 * k], y = xy[2 * k + 1];
        assert_true(x * x + y * y <= 144);
        /* an arc pixel: some 8-neighbour lies outside the disc */
        assert_true((x + 1) * (x + 1) + (y + 1) * (y + 1) > 144);
    }
    check_border(c, W, H, 0, W, "corner disc");
}

/* ================================================================== step 2: split */

/* pupil.h "Binocular split": P(x) = column sums over x - h .. x + h (clipped), h =
 * max(4, W / 64); the x in [W / 4, 3 W / 4) with the smallest P; on ties the one nearest W / 2
 * (|2 x - W| smallest: W / 2 taken as a real number), then the smaller x. */
static int32_t split_direct(const uint8_t *sm, int32_t W, int32_t H)
{
    int32_t h = W / 64 > 4 ? W / 64 : 4;
    int32_t best_x = -1;
    int64_t best = 0;
    for (int32_t x = W / 4; x < 3 * W / 4; x++) {
        int64_t p = 0;
        for (int32_t xx = x - h; xx <= x + h; xx++)
            if (xx >= 0 && xx < W)
                for (int32_t y = 0; y < H; y++)
                    p += sm[(size_t)y * W + xx];
        int better = best_x < 0 || p < best;
        if (!better && p == best) {
            int32_t d = abs(2 * x - W), db = abs(2 * best_x - W);
            better = d < db; /* x > best_x here: on equal distances the smaller stays */
        }
        if (better) {
            best = p;
            best_x = x;
        }
    }
    return best_x;
}

static void test_split_reference(void **state)
{
    (void)state;
    uint64_t s = 606;
    for (int trial = 0; trial < 300; trial++) {
        int32_t W = 16 + (int32_t)rnd_int(&s, 400), H = 16 + (int32_t)rnd_int(&s, 48);
        size_t np = (size_t)W * H;
        uint8_t *sm = malloc(np);
        assert_non_null(sm);
        int kind = trial % 4;
        for (size_t i = 0; i < np; i++) {
            if (kind == 0)
                sm[i] = (uint8_t)rnd_int(&s, 256);
            else if (kind == 1) /* few values: many ties */
                sm[i] = (uint8_t)rnd_int(&s, 2);
            else if (kind == 2) /* a broad valley plus noise */
                sm[i] = (uint8_t)clampi(abs((int32_t)(i % W) - W / 3) + (int32_t)rnd_int(&s, 30), 0,
                                        255);
            else
                sm[i] = 77; /* constant: all tie, the middle wins */
        }
        int32_t got = sw_pupil_cpu_split(sm, W, H), want = split_direct(sm, W, H);
        if (got != want)
            fail_msg("split %dx%d kind %d: %d, want %d", W, H, kind, got, want);
        if (kind == 3)
            assert_int_equal(got, W / 2);
        free(sm);
    }
}

/* Ties worked out by hand: two one-column valleys of the same depth at W/2 - d and W/2 + d (+ e);
 * every x within h of a valley has the same P, so the plateau ends nearest the middle tie. */
static void test_split_ties(void **state)
{
    (void)state;
    static const int32_t widths[3] = {128, 256, 640};
    for (int wi = 0; wi < 3; wi++)
        for (int e = 0; e <= 1; e++) {
            int32_t W = widths[wi], H = 20, h = W / 64 > 4 ? W / 64 : 4, d = 2 * h + 3;
            uint8_t *sm = malloc((size_t)W * H);
            assert_non_null(sm);
            for (int32_t y = 0; y < H; y++)
                for (int32_t x = 0; x < W; x++)
                    sm[(size_t)y * W + x] = (x == W / 2 - d || x == W / 2 + d + e) ? 0 : 100;
            /* plateaus [W/2 - d - h, W/2 - d + h] and [W/2 + d + e - h, ...]: their nearest ends
             * are W/2 - d + h (distance d - h) and W/2 + d + e - h (distance d + e - h) */
            int32_t got = sw_pupil_cpu_split(sm, W, H);
            assert_int_equal(got, W / 2 - d + h);
            assert_int_equal(split_direct(sm, W, H), W / 2 - d + h);
            free(sm);
        }
}

/* Two bright discs (cut by the frame's top and bottom at times) on a dark, slightly noisy frame,
 * each covering its side of the searched columns: the split lies between them. */
static void test_split_discs(void **state)
{
    (void)state;
    uint64_t s = 707;
    for (int trial = 0; trial < 60; trial++) {
        int32_t W = 128 + (int32_t)rnd_int(&s, 600), H = 64 + (int32_t)rnd_int(&s, 200);
        int32_t h = W / 64 > 4 ? W / 64 : 4;
        /* the left disc's right edge and the right disc's left edge: a gap of at least 2 h + 3
         * columns centred in [0.3 W, 0.7 W], so that some windows inside [W/4, 3W/4) see no
         * disc */
        double mid = rnd_range(&s, 0.3 * W, 0.7 * W), gap = 2 * h + 3 + rnd_range(&s, 0, 0.2 * W);
        double gap_l = mid - 0.5 * gap, gap_r = mid + 0.5 * gap;
        /* each disc reaches beyond the search range (W/4 - h on the left, 3W/4 + h on the
         * right): as in a binocular frame, the dark margins outside the eyes are not searched */
        double rl = 0.5 * (gap_l - (W / 4 - h - 3)) + rnd_range(&s, 0, 30);
        double rr = 0.5 * ((3 * W / 4 + h + 3) - gap_r) + rnd_range(&s, 0, 30);
        double cxl = gap_l - rl, cxr = gap_r + rr;
        double cyl = rnd_range(&s, 0, H), cyr = rnd_range(&s, 0, H);
        size_t np = (size_t)W * H;
        uint8_t *sm = malloc(np);
        assert_non_null(sm);
        for (int32_t y = 0; y < H; y++)
            for (int32_t x = 0; x < W; x++) {
                int in = (x - cxl) * (x - cxl) + (y - cyl) * (y - cyl) <= rl * rl ||
                         (x - cxr) * (x - cxr) + (y - cyr) * (y - cyr) <= rr * rr;
                sm[(size_t)y * W + x] =
                    (uint8_t)(in ? 150 + rnd_int(&s, 100) : rnd_int(&s, trial % 2 ? 9 : 1));
            }
        int32_t got = sw_pupil_cpu_split(sm, W, H);
        if (!(got > gap_l && got < gap_r))
            fail_msg("split of discs %dx%d: %d, the gap is (%g, %g)", W, H, got, gap_l, gap_r);
        assert_int_equal(got, split_direct(sm, W, H));
        free(sm);
    }
}

/* ================================================================== steps 6-9: the model */

typedef struct ellipse {
    double cx, cy, a, b, th; /* pixels; th the major axis' angle, radians, from +x towards +y */
} ellipse;

static void ellipse_point(const ellipse *e, double t, double *x, double *y)
{
    double c = cos(e->th), s = sin(e->th), p = e->a * cos(t), q = e->b * sin(t);
    *x = e->cx + p * c - q * s;
    *y = e->cy + p * s + q * c;
}

/* The unit outward normal at parameter t (the gradient of the ellipse's quadratic form). */
static void ellipse_normal(const ellipse *e, double t, double *nx, double *ny)
{
    double c = cos(e->th), s = sin(e->th);
    double gp = cos(t) / e->a, gq = sin(t) / e->b; /* in the ellipse's own axes */
    double gx = gp * c - gq * s, gy = gp * s + gq * c, g = hypot(gx, gy);
    *nx = gx / g;
    *ny = gy / g;
}

/* The ellipse's conic in the region's normalised coordinates, written out from its centre, axes
 * and angle (not through the code under test), unit length, A + C > 0. */
static void ellipse_conic(const ellipse *e, const sw_pm_region *r, double *c)
{
    double inv_s = 2.0 / (double)((r->x1 - r->x0) > r->height ? (r->x1 - r->x0) : r->height);
    double ox = 0.5 * (r->x0 + r->x1 - 1), oy = 0.5 * (r->height - 1);
    double uc = (e->cx - ox) * inv_s, vc = (e->cy - oy) * inv_s;
    double a = e->a * inv_s, b = e->b * inv_s, co = cos(e->th), si = sin(e->th);
    double A = co * co / (a * a) + si * si / (b * b);
    double B = 2.0 * co * si * (1.0 / (a * a) - 1.0 / (b * b));
    double C = si * si / (a * a) + co * co / (b * b);
    double D = -2.0 * A * uc - B * vc, E = -B * uc - 2.0 * C * vc;
    double F = A * uc * uc + B * uc * vc + C * vc * vc - 1.0;
    double k[6] = {A, B, C, D, E, F}, n = 0;
    for (int i = 0; i < 6; i++)
        n += k[i] * k[i];
    for (int i = 0; i < 6; i++)
        c[i] = k[i] / sqrt(n);
}

static double angle_diff_deg(double a, double b)
{
    double d = fmod(fabs(a - b), 180.0);
    return d > 90.0 ? 180.0 - d : d;
}

static ellipse random_ellipse(uint64_t *s, double amin, double amax, double x_lo, double x_hi,
                              double y_lo, double y_hi)
{
    ellipse e;
    e.a = rnd_range(s, amin, amax);
    e.b = e.a * rnd_range(s, 0.35, 1.0 / 1.2); /* a / b >= 1.2: the angle is well defined */
    e.th = rnd_range(s, 0, PI);
    e.cx = rnd_range(s, x_lo, x_hi);
    e.cy = rnd_range(s, y_lo, y_hi);
    return e;
}

static void test_region(void **state)
{
    (void)state;
    sw_pm_region r = sw_pm_region_make(100, 300, 480, 2.0);
    assert_int_equal(r.x0, 100);
    assert_int_equal(r.x1, 300);
    assert_int_equal(r.height, 480);
    assert_near(r.ox, 199.5, 0);
    assert_near(r.oy, 239.5, 0);
    assert_near(r.inv_s, 2.0 / 480.0, 0);
    assert_near(r.tol2d, (4.0 / 480.0) * (4.0 / 480.0), 1e-18);
    assert_near(r.tol2, (float)((4.0 / 480.0) * (4.0 / 480.0)), 0);
    assert_near(sw_pm_u(&r, 100), -99.5 / 240.0, 1e-16);
    assert_near(sw_pm_v(&r, 0), -239.5 / 240.0, 1e-16);
}

/* The conic through 5 points of a known ellipse gives it back (centre, semi-axes + the 0.5 px
 * edge offset, angle), in full-frame and half-frame regions. */
static void test_conic5(void **state)
{
    (void)state;
    uint64_t s = 808;
    for (int trial = 0; trial < 400; trial++) {
        sw_pm_region r =
            trial % 2 ? sw_pm_region_make(0, 640, 480, 2.0) : sw_pm_region_make(320, 640, 480, 2.0);
        double xlo = r.x0 + 50, xhi = r.x1 - 50;
        ellipse e = random_ellipse(&s, 10, 300, xlo, xhi, 50, 430);
        double u[5], v[5], c[6], ce[6];
        double t0 = rnd_range(&s, 0, 2 * PI);
        for (int i = 0; i < 5; i++) {
            double x, y;
            ellipse_point(&e, t0 + 2 * PI * (i + 0.7 * rnd_u01(&s)) / 5, &x, &y);
            u[i] = (x - r.ox) * r.inv_s;
            v[i] = (y - r.oy) * r.inv_s;
        }
        assert_int_equal(sw_pm_conic5(u, v, c), 1);
        ellipse_conic(&e, &r, ce);
        double n = 0;
        for (int k = 0; k < 6; k++) {
            n += c[k] * c[k];
            if (!(fabs(c[k] - ce[k]) <= 1e-8))
                fail_msg("conic5 #%d: c[%d] = %.17g, want %.17g", trial, k, c[k], ce[k]);
        }
        assert_near(n, 1.0, 1e-12);
        sw_pupil_ellipse o = {0};
        memset(&o, 0, sizeof(o));
        assert_int_equal(sw_pm_ellipse_out(&r, c, &o), 1);
        assert_near(o.cx_px, e.cx, 1e-6);
        assert_near(o.cy_px, e.cy, 1e-6);
        assert_near(o.a_px, e.a + SW_PUPIL_EDGE_OFFSET_PX, 1e-6);
        assert_near(o.b_px, e.b + SW_PUPIL_EDGE_OFFSET_PX, 1e-6);
        assert_true(o.angle_deg >= 0.0 && o.angle_deg < 180.0);
        assert_near(angle_diff_deg(o.angle_deg, e.th * 180.0 / PI), 0, 1e-6);
        /* the same conic with the other sign describes the same ellipse */
        for (int k = 0; k < 6; k++)
            c[k] = -c[k];
        sw_pupil_ellipse o2 = {0};
        assert_int_equal(sw_pm_ellipse_out(&r, c, &o2), 1);
        assert_near(o2.cx_px, e.cx, 1e-6);
        assert_near(o2.a_px, e.a + SW_PUPIL_EDGE_OFFSET_PX, 1e-6);
        assert_near(o2.b_px, e.b + SW_PUPIL_EDGE_OFFSET_PX, 1e-6);
        assert_near(angle_diff_deg(o2.angle_deg, e.th * 180.0 / PI), 0, 1e-6);
    }
    /* a circle: both semi-axes equal its radius + 0.5 */
    sw_pm_region r = sw_pm_region_make(0, 200, 100, 2.0);
    ellipse circ = {120.0, 40.0, 30.0, 30.0, 0.0};
    double u[5], v[5], c[6];
    for (int i = 0; i < 5; i++) {
        double x, y;
        ellipse_point(&circ, 1.1 * i, &x, &y);
        u[i] = (x - r.ox) * r.inv_s;
        v[i] = (y - r.oy) * r.inv_s;
    }
    assert_int_equal(sw_pm_conic5(u, v, c), 1);
    sw_pupil_ellipse o = {0};
    assert_int_equal(sw_pm_ellipse_out(&r, c, &o), 1);
    assert_near(o.cx_px, 120.0, 1e-6);
    assert_near(o.cy_px, 40.0, 1e-6);
    assert_near(o.a_px, 30.5, 1e-6);
    assert_near(o.b_px, 30.5, 1e-6);
}

/* Non-ellipses: a hyperbola and a line pair are not accepted by sw_pm_ellipse_out. */
static void test_not_ellipse(void **state)
{
    (void)state;
    sw_pm_region r = sw_pm_region_make(0, 100, 100, 2.0);
    const double hyp[6] = {1, 0, -1, 0, 0, -0.1}; /* u^2 - v^2 = 0.1      */
    const double lines[6] = {0, 1, 0, 0, 0, 0};   /* u v = 0               */
    const double empty[6] = {1, 0, 1, 0, 0, 0.5}; /* u^2 + v^2 = -0.5: no points */
    sw_pupil_ellipse o = {0};
    assert_int_equal(sw_pm_ellipse_out(&r, hyp, &o), 0);
    assert_int_equal(sw_pm_ellipse_out(&r, lines, &o), 0);
    assert_int_equal(sw_pm_ellipse_out(&r, empty, &o), 0);
}

/* Degenerate picks: repeated points, collinear points; and the size range of a candidate. */
static void test_degenerate(void **state)
{
    (void)state;
    /* repeated points: no single conic */
    sw_pm_region r = sw_pm_region_make(0, 640, 480, 2.0);
    ellipse e = {300.5, 200.25, 120.0, 80.0, 0.4};
    double u[5], v[5], c[6];
    for (int i = 0; i < 5; i++) {
        double x, y;
        ellipse_point(&e, 1.3 * (i == 4 ? 2 : i), &x, &y); /* the 5th repeats the 3rd */
        u[i] = (x - r.ox) * r.inv_s;
        v[i] = (y - r.oy) * r.inv_s;
    }
    assert_int_equal(sw_pm_conic5(u, v, c), 0);
    /* 5 points on a line (v = 0, exact): a family of conics, not one */
    for (int i = 0; i < 5; i++) {
        u[i] = -0.5 + 0.25 * i;
        v[i] = 0.0;
    }
    assert_int_equal(sw_pm_conic5(u, v, c), 0);

    /* candidates picked from a border list: xy holds rounded points of the ellipse, then 5
     * collinear pixels (a diagonal line), then the ellipse's first point again */
    enum { NE = 40, NL = 5, N = NE + NL + 1 };
    int32_t xy[2 * N];
    for (int i = 0; i < NE; i++) {
        double x, y;
        ellipse_point(&e, 2 * PI * i / NE, &x, &y);
        xy[2 * i] = (int32_t)lround(x);
        xy[2 * i + 1] = (int32_t)lround(y);
    }
    for (int i = 0; i < NL; i++) {
        xy[2 * (NE + i)] = 100 + 7 * i;
        xy[2 * (NE + i) + 1] = 50 + 3 * i;
    }
    xy[2 * (N - 1)] = xy[0];
    xy[2 * (N - 1) + 1] = xy[1];
    float cf[6];
    /* rand5 picks index floor(u N): u = (i + 0.5) / N picks i */
#define PICK(i) ((float)(((double)(i) + 0.5) / N))
    const float good[5] = {PICK(0), PICK(8), PICK(16), PICK(24), PICK(32)};
    const float rep[5] = {PICK(0), PICK(8), PICK(16), PICK(24), PICK(N - 1)}; /* 0 twice */
    const float rep2[5] = {PICK(3), PICK(8), PICK(8), PICK(24), PICK(32)};
    const float col[5] = {PICK(NE), PICK(NE + 1), PICK(NE + 2), PICK(NE + 3), PICK(NE + 4)};
#undef PICK
    assert_int_equal(sw_pm_candidate(&r, xy, N, good, 4.0, 640.0, c, cf), 1);
    sw_pupil_ellipse o = {0};
    assert_int_equal(sw_pm_ellipse_out(&r, c, &o), 1);
    assert_near(o.cx_px, e.cx, 3.0); /* through rounded points: near the ellipse */
    assert_near(o.a_px, e.a + 0.5, 5.0);
    for (int k = 0; k < 6; k++)
        assert_true(cf[k] == (float)c[k]);
    assert_int_equal(sw_pm_candidate(&r, xy, N, rep, 4.0, 640.0, c, cf), 0);
    assert_int_equal(sw_pm_candidate(&r, xy, N, rep2, 4.0, 640.0, c, cf), 0);
    assert_int_equal(sw_pm_candidate(&r, xy, N, col, 4.0, 640.0, c, cf), 0);
    /* the size range: semi-axes (before the edge offset) about 120 and 80 */
    assert_int_equal(sw_pm_candidate(&r, xy, N, good, 4.0, 100.0, c, cf), 0);
    assert_int_equal(sw_pm_candidate(&r, xy, N, good, 90.0, 640.0, c, cf), 0);
    assert_int_equal(sw_pm_candidate(&r, xy, N, good, 70.0, 130.0, c, cf), 1);
}

/* The vote: points on a 100-300 px ellipse and 1.5 px off it (either side) vote, points 3 px off
 * do not, with the default 2 px tolerance. */
static void test_vote(void **state)
{
    (void)state;
    uint64_t s = 909;
    for (int trial = 0; trial < 200; trial++) {
        sw_pm_region r = trial % 2 ? sw_pm_region_make(0, 1280, 960, 2.0)
                                   : sw_pm_region_make(640, 1280, 960, 2.0);
        ellipse e;
        e.a = rnd_range(&s, 100, 300);
        e.b = rnd_range(&s, 100, e.a);
        e.th = rnd_range(&s, 0, PI);
        e.cx = rnd_range(&s, r.x0 + 300, r.x1 - 300);
        e.cy = rnd_range(&s, 300, 660);
        double c[6];
        float cf[6];
        ellipse_conic(&e, &r, c);
        for (int k = 0; k < 6; k++)
            cf[k] = (float)c[k];
        /* the tolerance written out: (inlier_px 2 / (half the region's larger side))^2 */
        double half = 0.5 * ((r.x1 - r.x0) > r.height ? (r.x1 - r.x0) : r.height);
        float tol2 = (float)((2.0 / half) * (2.0 / half));
        assert_true(tol2 == r.tol2);
        for (int i = 0; i < 64; i++) {
            double t = 2 * PI * i / 64 + 0.01 * trial, x, y, nx, ny;
            ellipse_point(&e, t, &x, &y);
            ellipse_normal(&e, t, &nx, &ny);
            static const double off[5] = {0.0, 1.5, -1.5, 3.0, -3.0};
            static const int want[5] = {1, 1, 1, 0, 0};
            for (int k = 0; k < 5; k++) {
                double px = x + off[k] * nx, py = y + off[k] * ny;
                float uf = (float)((px - r.ox) * r.inv_s), vf = (float)((py - r.oy) * r.inv_s);
                int got = sw_pm_vote(cf, uf, vf, r.tol2);
                if (got != want[k])
                    fail_msg("vote: ellipse (%g, %g) %g x %g at %g deg, point %g px off at "
                             "(%g, %g): %d, want %d",
                             e.cx, e.cy, e.a, e.b, e.th * 180 / PI, off[k], px, py, got, want[k]);
            }
        }
    }
    /* sw_pm_uf / sw_pm_vf are the float coordinates of a pixel */
    sw_pm_region r = sw_pm_region_make(0, 640, 480, 2.0);
    assert_true(sw_pm_uf(&r, 17) == (float)((17 - 319.5) / 320.0));
    assert_true(sw_pm_vf(&r, 401) == (float)((401 - 239.5) / 320.0));
}

/* Step 9's bands: points on a 100-300 px ellipse and 1.5 px off it are inliers (1), points 5 and
 * 7 px off are in the near band (2: more than 2, at most 4 inlier_px of 2 px), points 3 and 10 px
 * off in neither (0); the Sampson distance is within a few % of the true one at these sizes. */
static void test_band(void **state)
{
    (void)state;
    uint64_t s = 919;
    for (int trial = 0; trial < 200; trial++) {
        sw_pm_region r = trial % 2 ? sw_pm_region_make(0, 1280, 960, 2.0)
                                   : sw_pm_region_make(640, 1280, 960, 2.0);
        ellipse e;
        e.a = rnd_range(&s, 100, 300);
        e.b = rnd_range(&s, 100, e.a);
        e.th = rnd_range(&s, 0, PI);
        e.cx = rnd_range(&s, r.x0 + 300, r.x1 - 300);
        e.cy = rnd_range(&s, 300, 660);
        double c[6];
        ellipse_conic(&e, &r, c);
        for (int i = 0; i < 64; i++) {
            double t = 2 * PI * i / 64 + 0.01 * trial, x, y, nx, ny;
            ellipse_point(&e, t, &x, &y);
            ellipse_normal(&e, t, &nx, &ny);
            static const double off[11] = {0.0,  1.5, -1.5, 3.0,  -3.0, 5.0,
                                           -5.0, 7.0, -7.0, 10.0, -10.0};
            static const int want[11] = {1, 1, 1, 0, 0, 2, 2, 2, 2, 0, 0};
            for (int k = 0; k < 11; k++) {
                const double px = x + off[k] * nx, py = y + off[k] * ny;
                const int got =
                    sw_pm_band(c, (px - r.ox) * r.inv_s, (py - r.oy) * r.inv_s, r.tol2d);
                if (got != want[k])
                    fail_msg("band: ellipse (%g, %g) %g x %g at %g deg, point %g px off: %d, "
                             "want %d",
                             e.cx, e.cy, e.a, e.b, e.th * 180 / PI, off[k], got, want[k]);
                /* band 1 is sw_pm_inlier's test */
                double g2;
                assert_int_equal(got == 1, sw_pm_inlier(c, (px - r.ox) * r.inv_s,
                                                        (py - r.oy) * r.inv_s, r.tol2d, &g2));
            }
        }
    }
    /* the centre of the conic (gradient 0): in no band */
    sw_pm_region r = sw_pm_region_make(0, 640, 480, 2.0);
    ellipse e = {319.5, 239.5, 100, 80, 0.3};
    double c[6];
    ellipse_conic(&e, &r, c);
    assert_int_equal(sw_pm_band(c, 0.0, 0.0, r.tol2d), 0);
}

/* The refinement: exact points of an ellipse, starting from a nearby one, give it back in one
 * round; points farther than inlier_px are left out. */
static void test_refine(void **state)
{
    (void)state;
    uint64_t s = 1010;
    for (int trial = 0; trial < 200; trial++) {
        sw_pm_region r = sw_pm_region_make(0, 640, 480, 2.0);
        ellipse e = random_ellipse(&s, 20, 220, 230, 410, 230, 250);
        ellipse start = e; /* within 1 px of e everywhere */
        start.cx += rnd_range(&s, -0.4, 0.4);
        start.cy += rnd_range(&s, -0.4, 0.4);
        start.a += rnd_range(&s, -0.3, 0.3);
        start.th += rnd_range(&s, -0.002, 0.002);
        double c0[6], c[6] = {0, 0, 0, 0, 0, 0};
        ellipse_conic(&start, &r, c0);
        double acc[SW_PM_NACC] = {0};
        int np = 20 + (int)rnd_int(&s, 200), arc = trial % 3 == 0; /* a 60 % arc at times */
        for (int i = 0; i < np; i++) {
            double x, y;
            ellipse_point(&e, (arc ? 0.6 : 1.0) * 2 * PI * i / np, &x, &y);
            sw_pm_refine_add(c0, (x - r.ox) * r.inv_s, (y - r.oy) * r.inv_s, r.tol2d, acc);
        }
        if (acc[20] != np)
            fail_msg("refine #%d: %g inliers of %d points on the ellipse", trial, acc[20], np);
        /* a far point (8 px out) is not added */
        double x, y, nx, ny;
        ellipse_point(&e, 0.3, &x, &y);
        ellipse_normal(&e, 0.3, &nx, &ny);
        double before[SW_PM_NACC];
        memcpy(before, acc, sizeof(acc));
        sw_pm_refine_add(c0, (x + 8 * nx - r.ox) * r.inv_s, (y + 8 * ny - r.oy) * r.inv_s, r.tol2d,
                         acc);
        assert_memory_equal(before, acc, sizeof(acc));
        assert_int_equal(sw_pm_refine_solve(acc, c), 1);
        double n = 0;
        for (int k = 0; k < 6; k++)
            n += c[k] * c[k];
        assert_near(n, 1.0, 1e-12);
        sw_pupil_ellipse o = {0};
        assert_int_equal(sw_pm_ellipse_out(&r, c, &o), 1);
        if (!(fabs(o.cx_px - e.cx) <= 1e-6 && fabs(o.cy_px - e.cy) <= 1e-6 &&
              fabs(o.a_px - e.a - 0.5) <= 1e-6 && fabs(o.b_px - e.b - 0.5) <= 1e-6 &&
              angle_diff_deg(o.angle_deg, e.th * 180 / PI) <= 1e-6))
            fail_msg("refine #%d: (%.9g, %.9g) %.9g x %.9g at %.9g deg, want (%.9g, %.9g) %.9g x "
                     "%.9g at %.9g deg (+0.5 px on the axes)",
                     trial, o.cx_px, o.cy_px, o.a_px, o.b_px, o.angle_deg, e.cx, e.cy, e.a, e.b,
                     e.th * 180 / PI);
    }
    /* fewer than 5 inliers: no solution */
    double acc[SW_PM_NACC] = {0}, c[6];
    acc[0] = acc[5] = acc[9] = acc[12] = acc[14] = 1.0;
    acc[20] = 4.0;
    assert_int_equal(sw_pm_refine_solve(acc, c), 0);
}

/* Step 9's verdict, with the perimeter of a circle (2 pi R, where Ramanujan's formula is exact):
 * coverage, range, finiteness and the near band, in that order. */
static void test_verdict(void **state)
{
    (void)state;
    sw_pupil_ellipse o = {0};
    const double R = 10.0, need = 0.25 * 2 * PI * R; /* 15.7...: 16 inliers suffice */
#define RESET(a, b, n)                                                                             \
    do {                                                                                           \
        memset(&o, 0, sizeof(o));                                                                  \
        o.cx_px = 50;                                                                              \
        o.cy_px = 60;                                                                              \
        o.a_px = (a);                                                                              \
        o.b_px = (b);                                                                              \
        o.angle_deg = 30;                                                                          \
        o.inliers = (n);                                                                           \
        o.failure = SW_PUPIL_NO_CONTRAST;                                                          \
        o.valid = 7;                                                                               \
    } while (0)
    assert_true(need > 15 && need < 16);
    RESET(R, R, 16);
    sw_pm_verdict(&o, 1, 4.0, 100.0, 0.25, 0.75);
    assert_int_equal(o.valid, 1);
    assert_int_equal(o.failure, SW_PUPIL_OK);
    assert_near(o.cx_px, 50, 0);
    assert_near(o.cy_px, 60, 0);
    assert_near(o.a_px, R, 0);
    assert_near(o.b_px, R, 0);
    assert_near(o.angle_deg, 30, 0);
    assert_int_equal(o.inliers, 16);

    RESET(R, R, 15); /* too few inliers */
    sw_pm_verdict(&o, 1, 4.0, 100.0, 0.25, 0.75);
    assert_int_equal(o.valid, 0);
    assert_int_equal(o.failure, SW_PUPIL_LOW_SUPPORT);
    assert_true(isnan(o.cx_px) && isnan(o.cy_px) && isnan(o.a_px) && isnan(o.b_px) &&
                isnan(o.angle_deg));
    assert_int_equal(o.inliers, 15);

    RESET(R, R, 1000); /* not an ellipse */
    sw_pm_verdict(&o, 0, 4.0, 100.0, 0.25, 0.75);
    assert_int_equal(o.valid, 0);
    assert_int_equal(o.failure, SW_PUPIL_BAD_FIT);
    assert_true(isnan(o.cx_px) && isnan(o.a_px) && isnan(o.angle_deg));

    RESET(R, 3.9, 1000); /* semi-minor axis below the range */
    sw_pm_verdict(&o, 1, 4.0, 100.0, 0.25, 0.75);
    assert_int_equal(o.failure, SW_PUPIL_BAD_FIT);
    assert_int_equal(o.valid, 0);

    RESET(100.1, R, 1000); /* semi-major axis above the range */
    sw_pm_verdict(&o, 1, 4.0, 100.0, 0.25, 0.75);
    assert_int_equal(o.failure, SW_PUPIL_BAD_FIT);
    assert_true(isnan(o.b_px));

    RESET(NAN, R, 1000); /* not finite */
    sw_pm_verdict(&o, 1, 4.0, 100.0, 0.25, 0.75);
    assert_int_equal(o.failure, SW_PUPIL_BAD_FIT);

    RESET(100.0, 4.0, 0); /* the range's ends are in range; coverage 0 needs no inliers */
    sw_pm_verdict(&o, 1, 4.0, 100.0, 0.0, 0.75);
    assert_int_equal(o.valid, 1);
    assert_int_equal(o.failure, SW_PUPIL_OK);

    /* the near band: at most max_near_ratio x the inliers */
    RESET(R, R, 16);
    o.near = 12; /* 0.75 x 16 */
    sw_pm_verdict(&o, 1, 4.0, 100.0, 0.25, 0.75);
    assert_int_equal(o.valid, 1);
    assert_int_equal(o.near, 12);
    RESET(R, R, 16);
    o.near = 13;
    sw_pm_verdict(&o, 1, 4.0, 100.0, 0.25, 0.75);
    assert_int_equal(o.valid, 0);
    assert_int_equal(o.failure, SW_PUPIL_CLUTTER);
    assert_true(isnan(o.cx_px) && isnan(o.cy_px) && isnan(o.a_px) && isnan(o.b_px) &&
                isnan(o.angle_deg));
    assert_int_equal(o.near, 13);
    assert_int_equal(o.inliers, 16);
    RESET(R, R, 15); /* too few inliers comes first */
    o.near = 1000;
    sw_pm_verdict(&o, 1, 4.0, 100.0, 0.25, 0.75);
    assert_int_equal(o.failure, SW_PUPIL_LOW_SUPPORT);
    RESET(R, 3.9, 1000); /* so does the range */
    o.near = 5000;
    sw_pm_verdict(&o, 1, 4.0, 100.0, 0.25, 0.75);
    assert_int_equal(o.failure, SW_PUPIL_BAD_FIT);
    RESET(R, R, 0); /* +Inf: no near-band test, even with no inliers (Inf x 0) */
    o.near = 1000;
    sw_pm_verdict(&o, 1, 4.0, 100.0, 0.0, INFINITY);
    assert_int_equal(o.valid, 1);
    RESET(R, R, 100); /* ratio 0: not one near-band point */
    o.near = 1;
    sw_pm_verdict(&o, 1, 4.0, 100.0, 0.25, 0.0);
    assert_int_equal(o.failure, SW_PUPIL_CLUTTER);
#undef RESET
    /* Ramanujan's perimeter: exact for a circle, 4a for a segment (b = 0) within 0.5 %
     * (pi (3 - sqrt 3) = 3.983) */
    assert_near(sw_pm_perimeter(7.0, 7.0), 2 * PI * 7.0, 1e-12);
    assert_near(sw_pm_perimeter(10.0, 0.0) / 40.0, 1.0, 5e-3);
}

static void test_pack_vote(void **state)
{
    (void)state;
    uint64_t s = 1111;
    for (int i = 0; i < 20000; i++) {
        int32_t v1 = (int32_t)rnd_int(&s, i % 2 ? 50 : 1 << 30);
        int32_t v2 = i % 3 ? v1 : (int32_t)rnd_int(&s, i % 2 ? 50 : 1 << 30);
        int32_t k1 = (int32_t)rnd_int(&s, SW_PUPIL_MAX_CANDIDATES);
        int32_t k2 = i % 5 ? (int32_t)rnd_int(&s, SW_PUPIL_MAX_CANDIDATES) : k1;
        unsigned long long p1 = sw_pm_pack_vote(v1, k1), p2 = sw_pm_pack_vote(v2, k2);
        assert_true(p1 > 0 && p2 > 0); /* unusable candidates (0) never win */
        assert_int_equal(sw_pm_packed_votes(p1), v1);
        assert_int_equal(sw_pm_packed_index(p1), k1);
        int first_wins = v1 > v2 || (v1 == v2 && k1 < k2);
        int second_wins = v2 > v1 || (v1 == v2 && k2 < k1);
        assert_int_equal(p1 > p2, first_wins);
        assert_int_equal(p2 > p1, second_wins);
    }
    /* zero votes still beats an unusable candidate; the extremes */
    assert_true(sw_pm_pack_vote(0, SW_PUPIL_MAX_CANDIDATES - 1) > 0ull);
    assert_true(sw_pm_pack_vote(1, SW_PUPIL_MAX_CANDIDATES - 1) > sw_pm_pack_vote(0, 0));
    assert_true(sw_pm_pack_vote(5, 0) > sw_pm_pack_vote(5, 1));
}

/* ================================================================== steps 6-9: the fit */

static sw_context *cpu;

static sw_pupil_plan *make_plan(int32_t W, int32_t H, uint64_t seed)
{
    sw_pupil_params p;
    sw_pupil_params_default(&p, W, H, SW_PIX_U8);
    p.seed = seed;
    p.min_radius_px = 4.0; /* the fits below have semi-axes from 18 px up */
    sw_pupil_plan *plan = NULL;
    assert_int_equal(sw_pupil_create(cpu, &p, &plan), SW_OK);
    assert_non_null(plan);
    return plan;
}

/* Fields the fit must not touch (the caller's), and the fit's own marked as unset. */
static void prefill(sw_pupil_ellipse *o)
{
    memset(o, 0, sizeof(*o));
    o->valid = 7;
    o->failure = (sw_pupil_failure)99;
    o->cx_px = o->cy_px = o->a_px = o->b_px = o->angle_deg = 12345.0;
    o->inliers = o->near = o->candidate = o->votes = -77;
    o->border = 4242;
    o->threshold = 42;
    o->x0 = 4343;
    o->x1 = 4444;
}

static void check_caller_fields(const sw_pupil_ellipse *o)
{
    assert_int_equal(o->border, 4242);
    assert_int_equal(o->threshold, 42);
    assert_int_equal(o->x0, 4343);
    assert_int_equal(o->x1, 4444);
}

/* A failed fit reports no ellipse (pupil.h step 9: nothing is fabricated). */
static void check_not_found(const sw_pupil_ellipse *o)
{
    assert_int_equal(o->valid, 0);
    assert_true(o->failure != SW_PUPIL_OK);
    assert_true(isnan(o->cx_px) && isnan(o->cy_px) && isnan(o->a_px) && isnan(o->b_px) &&
                isnan(o->angle_deg));
}

/*
 * A digitised ellipse (rounded coordinates of points on it) plus 30 % (of the list) outliers
 * anywhere in the region, in raster order as the border step lists them. The fit adds the
 * 0.5 px edge offset (step 8) to its semi-axes, so the points are drawn on the ellipse shrunk by
 * 0.5 px and the fit must give back e itself.
 */
static void test_fit(void **state)
{
    (void)state;
    const int32_t W = 640, H = 480;
    sw_pupil_plan *plan = make_plan(W, H, 1);
    /* the plan's random numbers (step 6) lie in [0, 1) */
    const float *rnd = sw_pupil_randoms(plan);
    assert_non_null(rnd);
    for (int64_t k = 0; k < (int64_t)plan->p.candidates * 5; k++)
        assert_true(rnd[k] >= 0.0f && rnd[k] < 1.0f);
    uint64_t s = 1212;
    uint8_t *mask = malloc((size_t)W * H);
    int32_t *xy = malloc((size_t)W * H * 2 * sizeof(int32_t));
    assert_non_null(mask);
    assert_non_null(xy);
    for (int trial = 0; trial < 24; trial++) {
        /* a region: the whole frame, or a binocular half */
        int32_t x0 = 0, x1 = W;
        if (trial % 3 == 1)
            x1 = W / 2;
        else if (trial % 3 == 2)
            x0 = W / 2;
        sw_pm_region r = sw_pm_region_make(x0, x1, H, plan->p.inlier_px);
        double rw = x1 - x0;
        ellipse e;
        e.a = rnd_range(&s, 30, fmin(rw, H) * 0.42);
        e.b = e.a * rnd_range(&s, 0.6, 1.0);
        e.th = rnd_range(&s, 0, PI);
        e.cx = rnd_range(&s, x0 + e.a + 2, x1 - e.a - 2);
        e.cy = rnd_range(&s, e.a + 2, H - e.a - 2);
        if (trial % 4 == 3) /* cut by the region's left side: about a third missing */
            e.cx = x0 + 0.5 * e.b;
        memset(mask, 0, (size_t)W * H);
        ellipse shrunk = e;
        shrunk.a -= SW_PUPIL_EDGE_OFFSET_PX;
        shrunk.b -= SW_PUPIL_EDGE_OFFSET_PX;
        int n_steps = (int)(8 * e.a);
        int64_t n_in = 0;
        for (int i = 0; i < n_steps; i++) {
            double x, y;
            ellipse_point(&shrunk, 2 * PI * i / n_steps, &x, &y);
            int32_t xi = (int32_t)lround(x), yi = (int32_t)lround(y);
            if (xi >= x0 && xi < x1 && yi >= 0 && yi < H && !mask[(size_t)yi * W + xi]) {
                mask[(size_t)yi * W + xi] = 1;
                n_in++;
            }
        }
        /* on every other trial, points 6 px outside the ellipse (step 9's near band: more than
         * 2 and at most 4 inlier_px): 1 in 8 of the points on it, at most 3 px apart */
        int64_t n_near = 0;
        if (trial % 2 == 0)
            for (int i = 0; i < n_steps; i += 8) {
                double x, y, nx, ny;
                ellipse_point(&shrunk, 2 * PI * i / n_steps, &x, &y);
                ellipse_normal(&shrunk, 2 * PI * i / n_steps, &nx, &ny);
                int32_t xi = (int32_t)lround(x + 6 * nx), yi = (int32_t)lround(y + 6 * ny);
                if (xi >= x0 && xi < x1 && yi >= 0 && yi < H && !mask[(size_t)yi * W + xi]) {
                    mask[(size_t)yi * W + xi] = 3;
                    n_near++;
                }
            }
        int64_t n_out = (n_in * 3 + 6) / 7; /* 30 % of n_in + n_out */
        for (int64_t k = 0; k < n_out;) {
            int32_t xi = x0 + (int32_t)rnd_int(&s, x1 - x0), yi = (int32_t)rnd_int(&s, H);
            if (!mask[(size_t)yi * W + xi]) {
                mask[(size_t)yi * W + xi] = 2;
                k++;
            }
        }
        int64_t n = 0;
        for (int32_t y = 0; y < H; y++)
            for (int32_t x = x0; x < x1; x++)
                if (mask[(size_t)y * W + x]) {
                    xy[2 * n] = x;
                    xy[2 * n + 1] = y;
                    n++;
                }
        assert_int_equal(n, n_in + n_near + n_out);
        sw_pupil_ellipse o = {0};
        prefill(&o);
        sw_pupil_cpu_fit(plan, &r, xy, n, &o);
        check_caller_fields(&o);
        if (!(o.valid == 1 && o.failure == SW_PUPIL_OK && fabs(o.cx_px - e.cx) <= 0.3 &&
              fabs(o.cy_px - e.cy) <= 0.3 && fabs(o.a_px - e.a) <= 0.005 * e.a &&
              fabs(o.b_px - e.b) <= 0.005 * e.b))
            fail_msg("fit #%d (region [%d, %d), %lld + %lld points): valid %d failure %d, "
                     "(%.4f, %.4f) %.4f x %.4f at %.3f deg; want (%.4f, %.4f) %.4f x %.4f at "
                     "%.3f deg",
                     trial, x0, x1, (long long)n_in, (long long)n_out, o.valid, (int)o.failure,
                     o.cx_px, o.cy_px, o.a_px, o.b_px, o.angle_deg, e.cx, e.cy, e.a, e.b,
                     e.th * 180 / PI);
        assert_true(o.angle_deg >= 0 && o.angle_deg < 180);
        if (e.b < 0.9 * e.a) /* the angle of a near-circle means little */
            assert_true(angle_diff_deg(o.angle_deg, e.th * 180 / PI) <= 1.0);
        /* every ellipse point is within 0.71 px of the shrunk ellipse: all are inliers; the
         * points 6 +- 0.71 px off are all in the near band (the outliers may add a few) */
        assert_true(o.inliers >= n_in && o.inliers <= n);
        if (!(o.near >= n_near && o.near <= n - o.inliers))
            fail_msg("fit #%d: near %d, want >= %lld (placed) and <= %lld", trial, o.near,
                     (long long)n_near, (long long)(n - o.inliers));
        assert_true(o.candidate >= 0 && o.candidate < plan->p.candidates);
        assert_true(o.votes >= 5 && o.votes <= n);
    }
    free(mask);
    free(xy);
    sw_pupil_destroy(plan);
}

static void test_fit_fails(void **state)
{
    (void)state;
    const int32_t W = 640, H = 480;
    sw_pupil_plan *plan = make_plan(W, H, 3);
    sw_pm_region r = sw_pm_region_make(0, W, H, plan->p.inlier_px);
    uint64_t s = 1313;
    int32_t xy[2 * 1000];
    /* fewer than 5 points */
    for (int n = 0; n < 5; n++) {
        for (int k = 0; k < n; k++) {
            xy[2 * k] = 100 + 20 * k;
            xy[2 * k + 1] = 200 + (k * k) * 5;
        }
        sw_pupil_ellipse o = {0};
        prefill(&o);
        sw_pupil_cpu_fit(plan, &r, xy, n, &o);
        check_caller_fields(&o);
        check_not_found(&o);
        assert_int_equal(o.failure, SW_PUPIL_FEW_BORDER);
        assert_int_equal(o.candidate, -1);
        assert_int_equal(o.votes, 0);
        assert_int_equal(o.inliers, 0);
        assert_int_equal(o.near, 0);
    }
    /* only random points: no pupil */
    for (int trial = 0; trial < 6; trial++) {
        int n = 100 + 150 * trial;
        for (int k = 0; k < n; k++) {
            xy[2 * k] = (int32_t)rnd_int(&s, W);
            xy[2 * k + 1] = (int32_t)rnd_int(&s, H);
        }
        sw_pupil_ellipse o = {0};
        prefill(&o);
        sw_pupil_cpu_fit(plan, &r, xy, n, &o);
        check_caller_fields(&o);
        check_not_found(&o);
        assert_true(o.failure == SW_PUPIL_NO_ELLIPSE || o.failure == SW_PUPIL_LOW_SUPPORT ||
                    o.failure == SW_PUPIL_BAD_FIT || o.failure == SW_PUPIL_CLUTTER);
    }
    /* 5 points on a line: no candidate is an ellipse */
    for (int k = 0; k < 5; k++) {
        xy[2 * k] = 100 + 10 * k;
        xy[2 * k + 1] = 100 + 4 * k;
    }
    sw_pupil_ellipse o = {0};
    prefill(&o);
    sw_pupil_cpu_fit(plan, &r, xy, 5, &o);
    check_not_found(&o);
    assert_int_equal(o.failure, SW_PUPIL_NO_ELLIPSE);
    assert_int_equal(o.candidate, -1);
    sw_pupil_destroy(plan);
}

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scale_sums),
        cmocka_unit_test(test_otsu_random),
        cmocka_unit_test(test_otsu_few_values),
        cmocka_unit_test(test_otsu3_random),
        cmocka_unit_test(test_otsu3_few_values),
        cmocka_unit_test(test_clip_hist),
        cmocka_unit_test(test_edge_threshold),
        cmocka_unit_test(test_threshold_plateau),
        cmocka_unit_test(test_gauss_weights),
        cmocka_unit_test(test_gauss_filter),
        cmocka_unit_test(test_close),
        cmocka_unit_test(test_close_edges),
        cmocka_unit_test(test_border),
        cmocka_unit_test(test_border_filled),
        cmocka_unit_test(test_split_reference),
        cmocka_unit_test(test_split_ties),
        cmocka_unit_test(test_split_discs),
        cmocka_unit_test(test_region),
        cmocka_unit_test(test_conic5),
        cmocka_unit_test(test_not_ellipse),
        cmocka_unit_test(test_degenerate),
        cmocka_unit_test(test_vote),
        cmocka_unit_test(test_band),
        cmocka_unit_test(test_refine),
        cmocka_unit_test(test_verdict),
        cmocka_unit_test(test_pack_vote),
        cmocka_unit_test(test_fit),
        cmocka_unit_test(test_fit_fails),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

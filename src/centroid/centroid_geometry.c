/*
 * sw_centroid_find_geometry (centroid.h): the lenslet grid of a reference image, the calibration
 * step of seed 000 Sec. 2 ("the mapping from the lenslet array into the pixel array is calibrated
 * by identifying the pixel position (x0, y0) ... of the bottom-left lenslet", Eq. 3-4).
 *
 * A flat wavefront puts one spot on the optical axis of every lit lenslet, so the spots of a
 * reference image lie on a square lattice: along x at s_k = x0 - 0.5 + d (k + 0.5) (geometry.h).
 * Each axis is solved on its own, from the profile of the image along it (the column sums P(x)
 * for x, the row sums for y):
 *
 *   1. Period. |F(f)| = |sum_x (P(x) - mean P) exp(-2 pi i f x)| over 1/d_max <= f <= 1/3
 *      (d_max = min(128, n / 3)), on an FFT grid padded four times, then refined by golden-section
 *      search on the direct sum. The spot comb has peaks at f = m / d for m = 1, 2, ...; the
 *      fundamental is the lowest-frequency peak comparable (>= half) to the strongest, found
 *      among the strongest peak's subharmonics. The peak must stand above the noise: six times
 *      the Rayleigh scale sigma_P sqrt(n / 2) of a noise profile's spectrum, with the pixel noise
 *      from the median absolute difference of neighbouring pixels (robust to the spots).
 *   2. Phase. The spots sit at c + k d with c = -arg F(1/d) d / (2 pi) (mod d).
 *   3. Spots. Each lattice window of the profile gets its own centre of gravity, iterated to the
 *      fixed point p = CoG over [p - W/2, p + W/2] (W = floor(d) whole pixels, pixel edges
 *      weighted by their overlap, so a constant background pulls no centroid; the window's
 *      minimum is subtracted to speed convergence). A window holds a lit lenslet when its
 *      central half has clearly more light than its outer half (above a fifth of the median of
 *      the bright windows).
 *   4. Fit. s_k = a + d k by least squares over the lit windows between the first and the last
 *      (unlit ones inside, e.g. under a central obscuration, are counted in the grid but not
 *      fitted); steps 3-4 repeat with the fitted lattice. The spots must lie on it: RMS
 *      deviation below a tenth of the pitch, at least three lit lenslets, and at least half of
 *      the range lit (every other window dark means a harmonic, not a lattice).
 *
 * The grid takes one pitch, the mean of the two axes' (which must agree within 2 %), the
 * intercepts refitted with it, and is trimmed so every pixel region lies inside the image.
 */
#include "centroid/centroid_internal.h"
#include "spotwave/centroid.h"

#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846

#define MIN_PITCH         3.0   /* smallest pitch searched (centroid.h)                        */
#define MAX_PITCH         128.0 /* largest pitch searched (SW_CENTROID_MAX_PITCH)              */
#define NOISE_SIGMAS      6.0   /* a period must stand this many Rayleigh scales above noise   */
#define HARMONIC_FRACTION 0.5   /* a subharmonic peak this strong is the fundamental           */
#define LIT_FRACTION      0.2   /* lit: contrast above this fraction of the bright median      */
#define MAX_RMS_FRACTION  0.1   /* spots may deviate from the lattice by this fraction of d   */
#define MAX_PITCH_SPREAD  0.02  /* the two axes' pitches may differ by this fraction           */

/* ------------------------------------------------------------------ small helpers */

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Overlap of pixel x (spanning [x - 0.5, x + 0.5]) with [lo, hi]. */
static double coverage(int32_t x, double lo, double hi)
{
    const double a = fmax((double)x - 0.5, lo), b = fmin((double)x + 0.5, hi);
    return b > a ? b - a : 0.0;
}

/* Sums of w v and w v (x - p) over the pixels of [lo, hi] (clipped to the profile), with w the
 * coverage of each pixel and v = P - base. */
static void window_sums(const double *P, int32_t n, double lo, double hi, double base, double p,
                        double *s0, double *s1)
{
    int32_t xa = (int32_t)floor(lo + 0.5), xb = (int32_t)floor(hi + 0.5);
    if (xa < 0)
        xa = 0;
    if (xb > n - 1)
        xb = n - 1;
    double a = 0.0, b = 0.0;
    for (int32_t x = xa; x <= xb; x++) {
        const double w = coverage(x, lo, hi) * (P[x] - base);
        a += w;
        b += w * ((double)x - p);
    }
    *s0 = a;
    *s1 = b;
}

/* |F(f)| and arg F(f) of the profile v (mean removed) by the direct sum. */
static double dft_at(const double *v, int32_t n, double f, double *phase)
{
    double re = 0.0, im = 0.0;
    for (int32_t x = 0; x < n; x++) {
        const double t = -2.0 * PI * f * (double)x;
        re += v[x] * cos(t);
        im += v[x] * sin(t);
    }
    if (phase)
        *phase = atan2(im, re);
    return hypot(re, im);
}

/* ------------------------------------------------------------------ one axis */

typedef struct axis_result {
    double pitch;       /* fitted d                                        */
    int32_t klo, khi;   /* lattice indices of the first and last lit spot  */
    int32_t nlit;       /* lit windows in [klo, khi]                       */
    double *pos;        /* pos[k - kmin]: measured spot centre (NaN: unlit) */
    int32_t kmin, kmax; /* the windows measured                            */
} axis_result;

/*
 * Step 1: the fundamental frequency of the comb in v (mean removed), searched over
 * [1/d_max, 1/MIN_PITCH]. noise_A: the Rayleigh scale of a pure-noise spectrum.
 * Returns the frequency, or 0 with *st set and the reason in the context's message.
 */
static double find_frequency(sw_context *ctx, const double *v, int32_t n, double d_max,
                             double noise_A, const char *axis, sw_status *st)
{
    /* Zero-padded FFT: bins k / M with M >= 4 n. */
    int32_t M = 1;
    while (M < 4 * n)
        M *= 2;
    double *in = fftw_malloc(sizeof(double) * (size_t)M);
    fftw_complex *out = fftw_malloc(sizeof(fftw_complex) * (size_t)(M / 2 + 1));
    double *amp = malloc(sizeof(double) * (size_t)(M / 2 + 1));
    if (!in || !out || !amp) {
        fftw_free(in);
        fftw_free(out);
        free(amp);
        *st = sw_fail(ctx, SW_ENOMEM, "find geometry: out of memory for a %d-point FFT", (int)M);
        return 0.0;
    }
    sw_fftw_planner_lock();
    fftw_plan plan = fftw_plan_dft_r2c_1d(M, in, out, FFTW_ESTIMATE);
    sw_fftw_planner_unlock();
    if (!plan) {
        fftw_free(in);
        fftw_free(out);
        free(amp);
        *st =
            sw_fail(ctx, SW_EINTERNAL, "find geometry: FFTW could not plan a %d-point FFT", (int)M);
        return 0.0;
    }
    memset(in, 0, sizeof(double) * (size_t)M);
    memcpy(in, v, sizeof(double) * (size_t)n);
    fftw_execute(plan);
    for (int32_t k = 0; k <= M / 2; k++)
        amp[k] = hypot(out[k][0], out[k][1]);
    sw_fftw_planner_lock();
    fftw_destroy_plan(plan);
    sw_fftw_planner_unlock();
    fftw_free(in);
    fftw_free(out);

    const int32_t k_lo = (int32_t)ceil((double)M / d_max), k_hi = (int32_t)floor(M / MIN_PITCH);
    int32_t kbest = -1;
    for (int32_t k = k_lo; k <= k_hi; k++)
        if (kbest < 0 || amp[k] > amp[kbest])
            kbest = k;
    if (kbest < 0 || !(amp[kbest] > NOISE_SIGMAS * noise_A) || !(amp[kbest] > 0.0)) {
        const double best = kbest < 0 ? 0.0 : amp[kbest];
        free(amp);
        *st = sw_fail(ctx, SW_EINVAL,
                      "find geometry: no periodic spot pattern along %s (the strongest period, "
                      "%.2f px, is %.1f times the noise level; need %g): is this a reference "
                      "image of one spot per lenslet?",
                      axis, kbest < 0 ? 0.0 : (double)M / kbest, noise_A > 0 ? best / noise_A : 0.0,
                      NOISE_SIGMAS);
        return 0.0;
    }
    /* The fundamental: the largest m whose subharmonic kbest / m holds a peak at least
     * HARMONIC_FRACTION of the strongest (harmonics of narrow spots are nearly as strong as the
     * fundamental; subharmonics of a true comb are empty). */
    int32_t kfund = kbest;
    for (int32_t m = 2; (double)kbest / m >= (double)k_lo - 0.5; m++) {
        const double centre = (double)kbest / m, tol = fmax(2.0, 0.02 * centre);
        int32_t a = (int32_t)floor(centre - tol), b = (int32_t)ceil(centre + tol), kp = -1;
        if (a < k_lo)
            a = k_lo;
        for (int32_t k = a; k <= b && k <= k_hi; k++)
            if (kp < 0 || amp[k] > amp[kp])
                kp = k;
        /* A peak, not the shoulder of something at the edge of the tolerance. */
        if (kp > k_lo && kp < k_hi && amp[kp] >= amp[kp - 1] && amp[kp] >= amp[kp + 1] &&
            amp[kp] >= HARMONIC_FRACTION * amp[kbest])
            kfund = kp;
    }
    free(amp);

    /* Golden-section refinement of |F| on [k - 1, k + 1] / M. */
    const double g = 0.5 * (sqrt(5.0) - 1.0);
    double a = (kfund - 1.0) / M, b = (kfund + 1.0) / M;
    double c = b - g * (b - a), d = a + g * (b - a);
    double fc = dft_at(v, n, c, NULL), fd = dft_at(v, n, d, NULL);
    for (int it = 0; it < 60 && b - a > 1e-12 * b; it++) {
        if (fc > fd) {
            b = d;
            d = c;
            fd = fc;
            c = b - g * (b - a);
            fc = dft_at(v, n, c, NULL);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + g * (b - a);
            fd = dft_at(v, n, d, NULL);
        }
    }
    *st = SW_OK;
    return 0.5 * (a + b);
}

/*
 * Step 3 for one window: the fixed point p = CoG over [p - W/2, p + W/2], starting at p0 and
 * kept within a quarter pitch of it. Returns 1 and *p when it converged, 0 otherwise. *contrast:
 * light in the central half minus light in the outer half, at the final position.
 */
static int spot_centre(const double *P, int32_t n, double p0, double d, double *p, double *contrast)
{
    const double W = floor(d), h = 0.5 * W;
    double q = p0;
    int ok = 0;
    for (int it = 0; it < 100; it++) {
        /* The window's minimum as a local baseline (any constant leaves the fixed point where
         * it is, because W is whole pixels; it only speeds the iteration). */
        int32_t xa = (int32_t)floor(q - h + 0.5), xb = (int32_t)floor(q + h + 0.5);
        xa = xa < 0 ? 0 : xa;
        xb = xb > n - 1 ? n - 1 : xb;
        double base = INFINITY;
        for (int32_t x = xa; x <= xb; x++)
            base = fmin(base, P[x]);
        double s0, s1;
        window_sums(P, n, q - h, q + h, base, q, &s0, &s1);
        if (!(s0 > 0.0))
            break;
        const double step = s1 / s0;
        q += step;
        if (!(fabs(q - p0) <= 0.25 * d))
            break;
        if (fabs(step) < 1e-7) {
            ok = 1;
            break;
        }
    }
    double inner, total, unused;
    window_sums(P, n, q - 0.25 * W, q + 0.25 * W, 0.0, q, &inner, &unused);
    window_sums(P, n, q - h, q + h, 0.0, q, &total, &unused);
    *contrast = 2.0 * inner - total;
    *p = q;
    return ok;
}

/*
 * Steps 3-4 on the lattice (a, d): measures every window that lies inside the profile, decides
 * which are lit, fits s_k = a + d k. Returns 0 with *rms, or -1 when fewer than 3 spots are lit.
 */
static int measure_and_fit(const double *P, int32_t n, double *a, double *d, axis_result *r,
                           double *contrast, double *tmp, double *rms)
{
    /* Windows [s_k - W/2, s_k + W/2] inside [-0.5, n - 0.5], half a pixel of slack each side. */
    const double h = 0.5 * floor(*d);
    r->kmin = (int32_t)ceil((-1.0 + h - *a) / *d);
    r->kmax = (int32_t)floor(((double)n + 0.0 - h - *a) / *d);
    const int32_t nk = r->kmax - r->kmin + 1;
    if (nk < 3)
        return -1;
    double cmax = 0.0;
    for (int32_t i = 0; i < nk; i++) {
        const double s = *a + *d * (double)(r->kmin + i);
        double p;
        if (!spot_centre(P, n, s, *d, &p, &contrast[i]))
            contrast[i] = -INFINITY; /* did not settle: not a spot */
        r->pos[i] = p;
        cmax = fmax(cmax, contrast[i]);
    }
    if (!(cmax > 0.0))
        return -1;
    size_t nb = 0;
    for (int32_t i = 0; i < nk; i++)
        if (contrast[i] > LIT_FRACTION * cmax)
            tmp[nb++] = contrast[i];
    qsort(tmp, nb, sizeof *tmp, cmp_double);
    const double med = tmp[nb / 2];
    r->klo = INT32_MAX;
    r->khi = INT32_MIN;
    r->nlit = 0;
    for (int32_t i = 0; i < nk; i++) {
        if (contrast[i] > LIT_FRACTION * med) {
            const int32_t k = r->kmin + i;
            r->klo = k < r->klo ? k : r->klo;
            r->khi = k > r->khi ? k : r->khi;
            r->nlit++;
        } else {
            r->pos[i] = NAN;
        }
    }
    if (r->nlit < 3)
        return -1;
    /* Least squares s_k = a + d k over the lit spots (k measured from klo for conditioning). */
    double sk = 0, ss = 0, skk = 0, sks = 0;
    for (int32_t i = 0; i < nk; i++) {
        if (isnan(r->pos[i]))
            continue;
        const double k = (double)(r->kmin + i - r->klo);
        sk += k;
        ss += r->pos[i];
        skk += k * k;
        sks += k * r->pos[i];
    }
    const double m = (double)r->nlit, den = m * skk - sk * sk;
    const double slope = (m * sks - sk * ss) / den, icpt = (ss - slope * sk) / m;
    double e2 = 0.0;
    for (int32_t i = 0; i < nk; i++) {
        if (isnan(r->pos[i]))
            continue;
        const double e = r->pos[i] - (icpt + slope * (double)(r->kmin + i - r->klo));
        e2 += e * e;
    }
    *rms = sqrt(e2 / m);
    *d = slope;
    *a = icpt - slope * (double)r->klo;
    r->pitch = slope;
    return 0;
}

/* Finds the lattice along one axis of the profile P (n values). sigma_P: noise of one profile
 * value. On success r holds the pitch, the lit range and the measured spot centres. */
static sw_status find_axis(sw_context *ctx, const double *P, int32_t n, double sigma_P,
                           const char *axis, axis_result *r)
{
    sw_status st;
    double *v = malloc(sizeof(double) * (size_t)n * 3);
    r->pos = malloc(sizeof(double) * (size_t)n);
    if (!v || !r->pos) {
        free(v);
        return sw_fail(ctx, SW_ENOMEM, "find geometry: out of memory");
    }
    double *contrast = v + n, *tmp = v + 2 * (size_t)n;

    double mean = 0.0, lo = INFINITY, hi = -INFINITY;
    for (int32_t x = 0; x < n; x++) {
        mean += P[x];
        lo = fmin(lo, P[x]);
        hi = fmax(hi, P[x]);
    }
    mean /= n;
    if (!(hi > lo)) {
        free(v);
        return sw_fail(ctx, SW_EINVAL,
                       "find geometry: the reference image is flat along %s (no spots)", axis);
    }
    for (int32_t x = 0; x < n; x++)
        v[x] = P[x] - mean;

    const double d_max = fmin(MAX_PITCH, (double)n / 3.0);
    const double f = find_frequency(ctx, v, n, d_max, sigma_P * sqrt(0.5 * n), axis, &st);
    if (st != SW_OK) {
        free(v);
        return st;
    }
    double d = 1.0 / f, phase;
    dft_at(v, n, f, &phase);
    double a = fmod(-phase / (2.0 * PI) * d, d);
    if (a < 0)
        a += d;

    double rms = INFINITY;
    for (int it = 0; it < 4; it++) {
        double a1 = a, d1 = d;
        if (measure_and_fit(P, n, &a1, &d1, r, contrast, tmp, &rms) != 0 || !(d1 >= MIN_PITCH) ||
            !(d1 <= MAX_PITCH)) {
            free(v);
            return sw_fail(ctx, SW_EINVAL,
                           "find geometry: no periodic spot pattern along %s: fewer than 3 "
                           "lenslets lit on a %.2f px lattice (an image must span at least 3 "
                           "pitches, and a reference image hold one spot per lenslet)",
                           axis, d);
        }
        const double change = fabs(d1 - d) * (r->khi - r->klo + 1) + fabs(a1 - a);
        a = a1;
        d = d1;
        if (change < 1e-6)
            break;
    }
    free(v);
    if (!(rms < MAX_RMS_FRACTION * d))
        return sw_fail(ctx, SW_EINVAL,
                       "find geometry: the spots along %s do not lie on a regular lattice "
                       "(RMS deviation %.2f px for a %.2f px pitch): no periodic spot pattern",
                       axis, rms, d);
    if (2 * r->nlit < r->khi - r->klo + 1)
        return sw_fail(ctx, SW_EINVAL,
                       "find geometry: only %d of %d lenslets along %s are lit on a %.2f px "
                       "lattice: no regular spot pattern (a harmonic of the true pitch?)",
                       (int)r->nlit, (int)(r->khi - r->klo + 1), axis, d);
    r->pitch = d;
    return SW_OK;
}

/* Intercept of the lattice s_k = a + d k through the measured centres, for a given d. */
static double intercept(const axis_result *r, double d)
{
    double s = 0.0;
    int32_t m = 0;
    for (int32_t k = r->kmin; k <= r->kmax; k++) {
        const double p = r->pos[k - r->kmin];
        if (isnan(p))
            continue;
        s += p - d * (double)k;
        m++;
    }
    return s / m;
}

/* The origin and count along one axis for pitch d: x0 = s_klo - d/2 + 0.5 (geometry.h), then
 * trimmed so the regions [floor(x0 + d i), floor(x0 + d (i + 1))) lie inside [0, size). A spot
 * whose region would start before pixel 0 by a rounding hair (< 0.1 px) pins x0 to 0. */
static void place_axis(const axis_result *r, double d, int32_t size, double *x0, int32_t *count)
{
    double o = intercept(r, d) + d * (double)r->klo - 0.5 * d + 0.5;
    int32_t c = r->khi - r->klo + 1;
    while (c > 0 && o < -0.1) {
        o += d;
        c--;
    }
    if (o < 0.0)
        o = 0.0;
    while (c > 0 && floor(o + d * (double)c) > (double)size)
        c--;
    *x0 = o;
    *count = c;
}

/* ------------------------------------------------------------------ the API */

/* Robust noise of one pixel: 1.4826 median |I(x+1, y) - I(x, y)| / sqrt(2) over a sample of at
 * most 2^20 neighbour pairs (the spots cover a minority of the pairs of a spot image). */
static sw_status pixel_noise(sw_context *ctx, const sw_image *img, double *sigma)
{
    const int64_t pairs = (int64_t)(img->width - 1) * img->height;
    const int64_t step = pairs > (1 << 20) ? pairs / (1 << 20) + 1 : 1;
    const size_t cap = (size_t)(pairs / step + 1);
    double *d = malloc(sizeof(double) * cap), *row = malloc(sizeof(double) * (size_t)img->width);
    if (!d || !row) {
        free(d);
        free(row);
        return sw_fail(ctx, SW_ENOMEM, "find geometry: out of memory");
    }
    size_t m = 0;
    int64_t next = 0;
    for (int32_t y = 0; y < img->height; y++) {
        const int64_t first = (int64_t)y * (img->width - 1);
        if (next >= first + img->width - 1)
            continue;
        sw_load_row(sw_image_row(img, y), img->type, img->width, row);
        for (; next < first + img->width - 1 && m < cap; next += step) {
            const int32_t x = (int32_t)(next - first);
            const double diff = row[x + 1] - row[x];
            if (isfinite(diff))
                d[m++] = fabs(diff);
        }
    }
    free(row);
    double s = 0.0;
    if (m > 0) {
        const size_t half = m / 2;
        qsort(d, m, sizeof *d, cmp_double);
        s = 1.4826 * d[half] / sqrt(2.0);
    }
    free(d);
    /* Integer pixels carry at least the quantisation noise of their last bit. */
    if (img->type != SW_PIX_F32)
        s = fmax(s, 1.0 / sqrt(12.0));
    *sigma = s;
    return SW_OK;
}

sw_status sw_centroid_find_geometry(sw_context *ctx, const sw_image *reference, sw_sh_geometry *g)
{
    if (!reference || !g)
        return sw_fail(ctx, SW_EINVAL, "find geometry: %s is NULL",
                       !reference ? "the reference image" : "the geometry");
    sw_status st = sw_image_check(ctx, reference);
    if (st != SW_OK)
        return st;
    if (reference->memory == SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL,
                       "find geometry: the reference image is in device memory; copy it to the "
                       "host first");
    const int32_t W = reference->width, H = reference->height;
    const int32_t min_side = (int32_t)(3.0 * MIN_PITCH);
    if (W < min_side || H < min_side)
        return sw_fail(ctx, SW_EINVAL,
                       "find geometry: the %dx%d reference image is smaller than 3 pitches of "
                       "the smallest pitch searched (%g px): need at least %dx%d pixels",
                       (int)W, (int)H, MIN_PITCH, (int)min_side, (int)min_side);

    /* The profiles: column sums (x) and row sums (y); NaN / Inf pixels count as 0. */
    double *col = calloc((size_t)W + (size_t)H + (size_t)W, sizeof(double));
    if (!col)
        return sw_fail(ctx, SW_ENOMEM, "find geometry: out of memory");
    double *rowsum = col + W, *buf = rowsum + H;
    for (int32_t y = 0; y < H; y++) {
        sw_load_row(sw_image_row(reference, y), reference->type, W, buf);
        double s = 0.0;
        for (int32_t x = 0; x < W; x++) {
            const double v = isfinite(buf[x]) ? buf[x] : 0.0;
            col[x] += v;
            s += v;
        }
        rowsum[y] = s;
    }
    double sigma = 0.0;
    if ((st = pixel_noise(ctx, reference, &sigma)) != SW_OK) {
        free(col);
        return st;
    }

    axis_result rx, ry;
    memset(&rx, 0, sizeof rx);
    memset(&ry, 0, sizeof ry);
    st = find_axis(ctx, col, W, sigma * sqrt((double)H), "x", &rx);
    if (st == SW_OK)
        st = find_axis(ctx, rowsum, H, sigma * sqrt((double)W), "y", &ry);
    free(col);
    if (st != SW_OK) {
        free(rx.pos);
        free(ry.pos);
        return st;
    }

    const double d = 0.5 * (rx.pitch + ry.pitch);
    if (fabs(rx.pitch - ry.pitch) > MAX_PITCH_SPREAD * d) {
        free(rx.pos);
        free(ry.pos);
        return sw_fail(ctx, SW_EINVAL,
                       "find geometry: the pitch along x (%.3f px) and along y (%.3f px) differ "
                       "by more than %g %%; spotwave grids have one pitch",
                       rx.pitch, ry.pitch, 100.0 * MAX_PITCH_SPREAD);
    }
    sw_sh_geometry out = *g;
    out.pitch_px = d;
    place_axis(&rx, d, W, &out.x0, &out.nx);
    place_axis(&ry, d, H, &out.y0, &out.ny);
    free(rx.pos);
    free(ry.pos);
    if (out.nx < 1 || out.ny < 1)
        return sw_fail(ctx, SW_EINVAL,
                       "find geometry: no lenslet of the %.2f px grid fits inside the %dx%d image",
                       d, (int)W, (int)H);
    /* The caller's pixel size and focal length may be anything yet: check the grid alone
     * against the image, with placeholder optics. */
    sw_sh_geometry chk = out;
    chk.pixel_um = 1.0;
    chk.focal_mm = 1.0;
    chk.valid = NULL;
    if ((st = sw_sh_geometry_check(ctx, &chk, W, H)) != SW_OK)
        return st;
    sw_log(ctx, SW_LOG_DEBUG,
           "find geometry: pitch %.4f px (x %.4f, y %.4f), origin (%.3f, %.3f), grid %dx%d", d,
           rx.pitch, ry.pitch, out.x0, out.y0, (int)out.nx, (int)out.ny);
    g->x0 = out.x0;
    g->y0 = out.y0;
    g->pitch_px = out.pitch_px;
    g->nx = out.nx;
    g->ny = out.ny;
    return SW_OK;
}

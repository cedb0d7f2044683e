/*
 * Pupils without retinal glow, and given pupils (pupil.h "Given pupils" and "Pupils made of spots
 * alone", steps S1-S6), on the host for both backends: the CPU pipeline calls it for a region
 * whose glow path failed, the GPU plan after its device tracker (from the host frame, or a copy
 * of a device frame), so both give the same result.
 *
 * Not from seed 001 (Mompean et al. track the back-lit pupil only, Sec. 3.1): written for issue
 * 22, where a clean Hartmann-Shack image with no glow gave "pupil not found". The envelope of
 * the spots is read from each lenslet's light at its own spot, whose fraction of a fully lit
 * lenslet's is the lenslet's share of the pupil.
 */
#include "pupil/pupil_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SPOTS_MIN_LIT        8   /* S6: cells with c > 1/2                               */
#define SPOTS_MIN_POINTS     6   /* S6: outline points                                    */
#define SPOTS_MIN_SNR        5.0 /* S6: F0 / a cell's noise                               */
#define SPOTS_CAP            1.5 /* S3: a window this bright holds a reflection            */
#define SPOTS_FIT_BAND       0.5 /* S5: refit points within this many pitches             */
#define SPOTS_SPACING        0.5 /* S3: a spot this far (pitches) from a neighbour's plus a pitch */
#define SPOTS_SMOOTHED_PITCH 4.0 /* lenslets of at most this many smoothing sigmas: every pupil */

const char *sw_pupil_method_string(sw_pupil_method m)
{
    switch (m) {
    case SW_PUPIL_METHOD_GLOW: return "glow";
    case SW_PUPIL_METHOD_SPOTS: return "spots";
    case SW_PUPIL_METHOD_GIVEN: return "given";
    }
    return "unknown";
}

/* ---------------------------------------------------------------- small things */

static void swap_d(double *a, double *b)
{
    const double t = *a;
    *a = *b;
    *b = t;
}

/* The k-th smallest of v[0 .. n) (0-based; v is reordered): Hoare's selection. */
static double select_k(double *v, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const double pivot = v[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                swap_d(&v[i], &v[j]);
                i++;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return v[k];
    }
    return v[k];
}

/* The median of v[0 .. n), n >= 1 (the lower one for even n; v is reordered). */
static double median_of(double *v, int64_t n)
{
    return select_k(v, n, (n - 1) / 2);
}

/* The same median into *med when every v is a whole number in 0 .. 255 (8-bit pixels, and their
 * distances from such a median): counted, v left as it is; 0 when one is not. The same value as
 * median_of's (the k-th smallest does not depend on the order), and whatever sums v after it adds
 * the same whole numbers, exactly, in any order: the results are bit for bit those of median_of. */
static int median_u8(const double *v, int64_t n, double *med)
{
    uint32_t count[256] = {0};
    for (int64_t q = 0; q < n; q++) {
        const double x = v[q];
        if (!(x >= 0.0 && x <= 255.0 && x == (double)(int)x))
            return 0; /* not a byte after all: the caller selects */
        count[(int)x]++;
    }
    const int64_t k = (n - 1) / 2;
    int64_t c = 0;
    for (int b = 0; b < 256; b++)
        if ((c += count[b]) > k) {
            *med = (double)b;
            return 1;
        }
    return 0;
}

/* median_of, or median_u8 on 8-bit pixels (u8). */
static double median_px(double *v, int64_t n, int u8)
{
    double m;
    return u8 && median_u8(v, n, &m) ? m : median_of(v, n);
}

/* The bias of a window's light (S2): a background's skew, light per pixel between its mean and
 * its median where the noise is clipped (8-bit frames with a dark background: the noise below 0
 * reads 0), measured in the unlit cells; and beta, the light of an unlit cell once the
 * background is subtracted, per d^2 pixels. */
typedef struct light_bias {
    double skew; /* per pixel                                 */
    double beta; /* per d^2 pixels (a cell's)                 */
} light_bias;

/* A window's background, v[0 .. n) (n >= 1; tmp holds n doubles; u8: 8-bit pixels, counted by
 * median_px), med its median (mad, when not NULL, receives the median absolute deviation
 * |v - med|, unscaled): the
 * mean of its pixels up to med + 3 sigma (sigma = 1.4826 x the median absolute deviation, at
 * least 1.4826 on integer pixels: their quantum), which leaves out a spot's core, but at most
 * med + skew. A mean, not the median, because where the noise is clipped its mean is above its
 * median: light measured above the median counted that skew as light in the dark cells and not
 * on a retinal glow, whose noise is not clipped (a glowing eye's F0 came out half a spot's light
 * and its spots pupil 2-4 % large). At most med + skew, because a window crowded with the spots
 * that converging rays push together at a pupil's edge (6 um eyes) has their wings below the
 * clip, which raise its mean and not its median (a lit lenslet read as unlit there, its pupil
 * 3 % small). */
static double background_of(double *v, int64_t n, double med, double skew, int integer, double *tmp,
                            double *mad, int u8)
{
    for (int64_t q = 0; q < n; q++)
        tmp[q] = fabs(v[q] - med);
    const double m = median_px(tmp, n, u8);
    if (mad)
        *mad = m;
    double s = 1.4826 * m;
    if (integer && s < 1.4826)
        s = 1.4826;
    const double top = med + 3.0 * s;
    double sum = 0.0;
    int64_t k = 0;
    for (int64_t q = 0; q < n; q++)
        if (v[q] <= top) {
            sum += v[q];
            k++;
        }
    const double mean = k > 0 ? sum / (double)k : med;
    return fmin(mean, med + skew);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---------------------------------------------------------------- the lenslet mask */

void sw_pupil_mask_host(sw_pupil_plan *plan, const sw_pupil_result *result)
{
    if (!plan->has_geom)
        return;
    const sw_sh_geometry *g = &plan->geom;
    for (int32_t iy = 0; iy < g->ny; iy++)
        for (int32_t ix = 0; ix < g->nx; ix++)
            plan->lenslet_mask[(size_t)iy * (size_t)g->nx + (size_t)ix] = sw_pm_lenslet_value(
                g, ix, iy, result->pupil, result->n_pupils, plan->p.lenslet_rule);
}

/* ---------------------------------------------------------------- given pupils */

void sw_pupil_given_result(const sw_pupil_plan *plan, sw_pupil_result *result)
{
    const sw_pupil_params *p = &plan->p;
    memset(result, 0, sizeof *result);
    result->n_pupils = p->n_pupils;
    result->scale = 0.0;
    result->split_x = p->n_pupils == 2 && p->split_x >= 0 ? p->split_x : p->width;
    if (p->n_pupils == 2 && p->split_x < 0) {
        /* the column halfway between the two given centres */
        const double m = 0.5 * (p->given_pupil[0].cx_px + p->given_pupil[1].cx_px);
        int32_t s = (int32_t)floor(m + 0.5);
        result->split_x = s < 1 ? 1 : (s > p->width - 1 ? p->width - 1 : s);
    }
    for (int32_t i = 0; i < p->n_pupils; i++) {
        sw_pupil_ellipse *o = &result->pupil[i];
        const sw_pupil_shape *q = &p->given_pupil[i];
        o->valid = 1;
        o->failure = SW_PUPIL_OK;
        o->method = SW_PUPIL_METHOD_GIVEN;
        o->cx_px = q->cx_px;
        o->cy_px = q->cy_px;
        o->a_px = q->a_px >= q->b_px ? q->a_px : q->b_px;
        o->b_px = q->a_px >= q->b_px ? q->b_px : q->a_px;
        double ang = q->a_px >= q->b_px ? q->angle_deg : q->angle_deg + 90.0;
        ang = fmod(ang, 180.0);
        if (ang < 0.0)
            ang += 180.0;
        o->angle_deg = ang;
        o->threshold = -1;
        o->candidate = -1;
        o->x0 = i == 0 ? 0 : result->split_x;
        o->x1 = p->n_pupils == 2 && i == 0 ? result->split_x : p->width;
    }
}

/* ---------------------------------------------------------------- the spots path */

/* The pixel columns [*a, *b) of cell index i along an axis with origin o and pitch d, clipped to
 * [0, n): the pixels whose centres lie in [o - 0.5 + d i, o - 0.5 + d (i + 1)). */
static void cell_span(double o, double d, int32_t i, int32_t n, int32_t *a, int32_t *b)
{
    double lo = ceil(o - 0.5 + d * (double)i), hi = ceil(o - 0.5 + d * (double)(i + 1));
    if (lo < 0.0)
        lo = 0.0;
    if (hi > (double)n)
        hi = (double)n;
    *a = (int32_t)lo;
    *b = hi > lo ? (int32_t)hi : (int32_t)lo;
}

/* The conic fits of S5 in the region's normalised coordinates (pupil_model.h): weighted sums of
 * the A + C = 1 least squares of the points with weight w (1, or 1 / |grad Q|^2 of conic c). */
static void fit_add(double *acc, double u, double v, double w)
{
    const double phi[5] = {u * u - v * v, u * v, u, v, 1.0};
    const double r0 = v * v;
    int k = 0;
    for (int i = 0; i < 5; i++)
        for (int j = i; j < 5; j++)
            acc[k++] += w * phi[i] * phi[j];
    for (int i = 0; i < 5; i++)
        acc[15 + i] += w * phi[i] * r0;
    acc[20] += 1.0;
}

/* Sampson distance (normalised units) of (u, v) from conic c; +Inf where the gradient is 0. */
static double sampson(const double *c, double u, double v, double *g2_out)
{
    const double q = c[0] * u * u + c[1] * u * v + c[2] * v * v + c[3] * u + c[4] * v + c[5];
    const double gx = 2.0 * c[0] * u + c[1] * v + c[3];
    const double gy = c[1] * u + 2.0 * c[2] * v + c[4];
    const double g2 = gx * gx + gy * gy;
    if (g2_out)
        *g2_out = g2;
    return g2 > 0.0 ? fabs(q) / sqrt(g2) : INFINITY;
}

/* The light of a spot at (px, py): the window of side d centred there, clipped to the columns
 * [x0, x1) and the frame, gives the background (background_of); the inner window of side w <= d
 * gives the light, the sum of (v - background) less lb->beta per d^2 pixels, and the centroid
 * of the part above the background (an inner window keeps out the spots of neighbours that the
 * wavefront pushed close, as converging rays do at a pupil's edge). NaN when less than a quarter
 * of the window is on the frame. */
static double window_light(const sw_image *frame, sw_pixel_type type, int32_t x0, int32_t x1,
                           double d, double w, const light_bias *lb, double px, double py,
                           double *buf, double *cx, double *cy)
{
    double xa = fmax(ceil(px - 0.5 * d), (double)x0), xb = fmin(ceil(px + 0.5 * d), (double)x1);
    double ya = fmax(ceil(py - 0.5 * d), 0.0), yb = fmin(ceil(py + 0.5 * d), (double)frame->height);
    if (!(xb > xa && yb > ya))
        return NAN;
    const int32_t ia = (int32_t)xa, ib = (int32_t)xb, ja = (int32_t)ya, jb = (int32_t)yb;
    const int64_t n = (int64_t)(ib - ia) * (jb - ja);
    if ((double)n < 0.25 * d * d)
        return NAN;
    int64_t k = 0;
    for (int32_t y = ja; y < jb; y++) {
        const void *row = sw_image_row(frame, y);
        for (int32_t x = ia; x < ib; x++) {
            double v = sw_pm_pixel(row, x, type);
            buf[k++] = isfinite(v) ? v : 0.0;
        }
    }
    const double med = background_of(buf, n, median_px(buf, n, type == SW_PIX_U8), lb->skew,
                                     type != SW_PIX_F32, buf + n, NULL, type == SW_PIX_U8);
    const int32_t wa = (int32_t)fmax(ceil(px - 0.5 * w), xa),
                  wb = (int32_t)fmin(ceil(px + 0.5 * w), xb);
    const int32_t va = (int32_t)fmax(ceil(py - 0.5 * w), ya),
                  vb = (int32_t)fmin(ceil(py + 0.5 * w), yb);
    double sum = 0.0, sw = 0.0, sx = 0.0, sy = 0.0;
    int64_t m = 0;
    for (int32_t y = va; y < vb; y++) {
        const void *row = sw_image_row(frame, y);
        for (int32_t x = wa; x < wb; x++) {
            double v = sw_pm_pixel(row, x, type);
            v = isfinite(v) ? v - med : -med;
            sum += v;
            m++;
            const double q = v > 0.0 ? v : 0.0;
            sw += q;
            sx += q * (double)x;
            sy += q * (double)y;
        }
    }
    *cx = sw > 0.0 ? sx / sw : px;
    *cy = sw > 0.0 ? sy / sw : py;
    return sum - lb->beta * (double)m / (d * d);
}

/*
 * S3: each lenslet's light at its own spot, wherever the wavefront moved it: a walk over the
 * lenslet grid from the lit cell nearest the lit cells' centre, ring by ring (breadth first);
 * a lenslet's spot is looked for in a window of side d centred on the prediction from its
 * measured neighbours (from a neighbour n1 at grid offset o, and the next one n2 at 2 o: the
 * linear extrapolation 2 s1 - s2, else s1 + d o; averaged), re-centred once on the window's
 * centroid; its coverage is the window's light / F0. A lenslet with coverage above 1/2 passes
 * the walk on to its neighbours; lenslets never reached have coverage 0. C holds the cells'
 * coverage on entry (for the start) and the lenslets' on return.
 */
static void walk_from(const sw_pupil_plan *plan, const sw_image *frame, int32_t x0, int32_t x1,
                      int32_t ixa, int32_t ixb, double w, const light_bias *lb, double F0,
                      int32_t start, double *C, double *sx, double *sy, uint8_t *state,
                      int32_t *queue, double *buf);

static void walk_lenslets(const sw_pupil_plan *plan, const sw_image *frame, int32_t x0, int32_t x1,
                          int32_t ixa, int32_t ixb, const light_bias *lb, double F0,
                          const double *Ccell, double *C, double *sx, double *sy, uint8_t *state,
                          int32_t *queue, double *buf)
{
    const sw_sh_geometry *g = &plan->geom;
    const int32_t nx = g->nx, ny = g->ny;
    /* the starts: the cells with a plain spot's light (coverage 0.75 .. 1.25, not a corneal
     * reflection), nearest the lit cells' light-weighted centre first; a start that an earlier
     * walk reached is skipped (obstacles inside the pupil are walked around, or started past) */
    double m0 = 0.0, mx = 0.0, my = 0.0;
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = ixa; ix <= ixb; ix++) {
            const double c = Ccell[iy * nx + ix];
            if (c > 0.5) {
                const double w = fmin(c, SPOTS_CAP);
                m0 += w;
                mx += w * (double)ix;
                my += w * (double)iy;
            }
        }
    mx = m0 > 0.0 ? mx / m0 : 0.5 * (ixa + ixb);
    my = m0 > 0.0 ? my / m0 : 0.5 * (ny - 1);
    for (int32_t l = 0; l < nx * ny; l++) {
        state[l] = 0; /* 0 not reached, 1 queued, 2 lit, 3 dark */
        C[l] = 0.0;
    }
    /* the inner window (window_light): half a pitch, at least 6 px; a fully lit lenslet's light
     * in it, F0 x (inner / whole) at the first start */
    const double d = g->pitch_px, w = fmin(d, fmax(6.0, 0.5 * d));
    double F0w = -1.0;
    for (;;) {
        int32_t start = -1;
        double best = INFINITY;
        for (int32_t iy = 0; iy < ny; iy++)
            for (int32_t ix = ixa; ix <= ixb; ix++) {
                const int32_t l = iy * nx + ix;
                const double r2 =
                    ((double)ix - mx) * ((double)ix - mx) + ((double)iy - my) * ((double)iy - my);
                if (state[l] == 0 && Ccell[l] > 0.75 && Ccell[l] < 1.25 && r2 < best) {
                    best = r2;
                    start = l;
                }
            }
        if (start < 0)
            return;
        if (F0w < 0.0) {
            double rx, ry, cx, cy;
            sw_sh_reference(g, start % nx, start / nx, &rx, &ry);
            const double lw =
                window_light(frame, plan->p.type, x0, x1, d, w, lb, rx, ry, buf, &cx, &cy);
            const double ld =
                window_light(frame, plan->p.type, x0, x1, d, d, lb, rx, ry, buf, &cx, &cy);
            const double q = lw / ld;
            F0w = F0 * (q >= 0.3 && q <= 1.2 ? q : 1.0);
        }
        walk_from(plan, frame, x0, x1, ixa, ixb, w, lb, F0w, start, C, sx, sy, state, queue, buf);
    }
}

/* One walk of S3 from lenslet start (see walk_lenslets). state: 0 not reached, 1 queued,
 * 2 lit (its spot predicts its neighbours'), 3 dark, 4 too bright (a corneal reflection's light
 * in the window: it passes the walk on, but its position predicts nothing). */
static void walk_from(const sw_pupil_plan *plan, const sw_image *frame, int32_t x0, int32_t x1,
                      int32_t ixa, int32_t ixb, double w, const light_bias *lb, double F0,
                      int32_t start, double *C, double *sx, double *sy, uint8_t *state,
                      int32_t *queue, double *buf)
{
    static const int32_t ox[4] = {1, -1, 0, 0}, oy[4] = {0, 0, 1, -1};
    const sw_sh_geometry *g = &plan->geom;
    const int32_t nx = g->nx, ny = g->ny;
    const double d = g->pitch_px;
    int32_t head = 0, tail = 0;
    queue[tail++] = start;
    state[start] = 1;
    while (head < tail) {
        const int32_t l = queue[head++];
        const int32_t ix = l % nx, iy = l / nx;
        double px = 0.0, py = 0.0;
        int np = 0;
        for (int k = 0; k < 4; k++) {
            const int32_t jx = ix + ox[k], jy = iy + oy[k];
            if (jx < ixa || jx > ixb || jy < 0 || jy >= ny || state[jy * nx + jx] != 2)
                continue;
            const int32_t j = jy * nx + jx;
            const int32_t kx = jx + ox[k], ky = jy + oy[k];
            if (kx >= ixa && kx <= ixb && ky >= 0 && ky < ny && state[ky * nx + kx] == 2) {
                px += 2.0 * sx[j] - sx[ky * nx + kx];
                py += 2.0 * sy[j] - sy[ky * nx + kx];
            } else {
                px += sx[j] - d * (double)ox[k];
                py += sy[j] - d * (double)oy[k];
            }
            np++;
        }
        if (np > 0) {
            px /= np;
            py /= np;
        } else { /* a start, or only bright neighbours: the lenslet's reference position */
            sw_sh_reference(g, ix, iy, &px, &py);
        }
        double cx, cy;
        double light = window_light(frame, plan->p.type, x0, x1, d, w, lb, px, py, buf, &cx, &cy);
        double c = isfinite(light) ? light / F0 : 0.0;
        if (c > 0.25 && c < SPOTS_CAP && hypot(cx - px, cy - py) > 0.05 * d) {
            /* re-centred once on the window's centroid, at most a quarter pitch (a dim window's
             * centroid leans towards a neighbour's spot, a bright one's to a reflection: not
             * re-centred) */
            const double dd = hypot(cx - px, cy - py), f = dd > 0.25 * d ? 0.25 * d / dd : 1.0;
            px += f * (cx - px);
            py += f * (cy - py);
            light = window_light(frame, plan->p.type, x0, x1, d, w, lb, px, py, buf, &cx, &cy);
            c = isfinite(light) ? light / F0 : 0.0;
        }
        /* a spot sits about a pitch from each lit neighbour's, in the grid's direction (within
         * SPOTS_SPACING pitch, as the spacing criterion of Mompean et al.'s discarding), and not
         * within half a pitch of it: else the window lies on another lenslet's spot, or between
         * two, and holds no spot of its own */
        for (int k = 0; k < 4; k++) {
            const int32_t jx = ix + ox[k], jy = iy + oy[k];
            if (jx < ixa || jx > ixb || jy < 0 || jy >= ny || state[jy * nx + jx] != 2)
                continue;
            const double ex = sx[jy * nx + jx] - d * (double)ox[k] - px;
            const double ey = sy[jy * nx + jx] - d * (double)oy[k] - py;
            const double nd = hypot(sx[jy * nx + jx] - px, sy[jy * nx + jx] - py);
            if (hypot(ex, ey) > SPOTS_SPACING * d || nd < 0.5 * d)
                c = 0.0;
        }
        C[l] = c;
        sx[l] = px;
        sy[l] = py;
        state[l] = c > 0.5 ? (c < SPOTS_CAP ? 2 : 4) : 3;
        if (c <= 0.5)
            continue;
        for (int k = 0; k < 4; k++) {
            const int32_t jx = ix + ox[k], jy = iy + oy[k];
            if (jx < ixa || jx > ixb || jy < 0 || jy >= ny || state[jy * nx + jx] != 0)
                continue;
            state[jy * nx + jx] = 1;
            queue[tail++] = jy * nx + jx;
        }
    }
}

/*
 * S3's coverage against the light of the fully lit lenslets nearby rather than the frame's F0:
 * the light through a living eye's pupil is not uniform (a brightness map of +-30 % moves the
 * 1/2 crossing of a partly lit lenslet by a tenth of a pitch), so each measured lenslet's
 * coverage is divided by the median coverage of the interior lenslets (lit, with four lit
 * neighbours, coverage below 1.5) within two lenslets of it, when there are at least 3.
 * out and tmp: nx * ny doubles of scratch.
 */
static void local_coverage(int32_t nx, int32_t ny, int32_t ixa, int32_t ixb, const uint8_t *state,
                           double *C, double *out, double *tmp)
{
    const int32_t R = 2;
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = ixa; ix <= ixb; ix++) {
            const int32_t l = iy * nx + ix;
            out[l] = C[l];
            if (state[l] != 2 && state[l] != 3)
                continue;
            int32_t k = 0;
            for (int32_t jy = iy - R; jy <= iy + R; jy++)
                for (int32_t jx = ix - R; jx <= ix + R; jx++) {
                    if (jx <= ixa || jx >= ixb || jy <= 0 || jy >= ny - 1)
                        continue;
                    const int32_t j = jy * nx + jx;
                    if (state[j] == 2 && state[j - 1] == 2 && state[j + 1] == 2 &&
                        state[j - nx] == 2 && state[j + nx] == 2)
                        tmp[k++] = C[j];
                }
            if (k >= 3) {
                const double m = median_of(tmp, k);
                if (m > 0.0)
                    out[l] = C[l] / m;
            }
        }
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = ixa; ix <= ixb; ix++)
            C[iy * nx + ix] = out[iy * nx + ix];
}

/* S2's classes of the cells' light tmp[0 .. m) (m >= 1; sorted here): Otsu's split of the light,
 * *lo the median of the lower class (0 when it has fewer than 4 cells: a lower class of a few
 * cells is the pupil's edge, not the outside), *hi that of the upper one. */
static void split_light(double *tmp, int32_t m, double *lo, double *hi)
{
    qsort(tmp, (size_t)m, sizeof(double), cmp_double);
    /* a corneal reflection's few very bright cells must not take a class: the split sees the
     * light clipped at 1.5 x the 75th percentile (the classes' medians do not) */
    const double cap = tmp[(3 * (m - 1)) / 4] > 0.0 ? 1.5 * tmp[(3 * (m - 1)) / 4] : INFINITY;
    /* and at the 5th percentile from below (a saturated reflection's cell has a high median
     * and a very negative light) */
    const double floor5 = tmp[(m - 1) / 20];
    double total = 0.0;
    for (int32_t k = 0; k < m; k++)
        total += fmin(fmax(tmp[k], floor5), cap) - floor5;
    double best = -1.0, s0 = 0.0;
    int32_t split = 0; /* the lower class: tmp[0 .. split) */
    for (int32_t k = 1; k < m; k++) {
        s0 += fmin(fmax(tmp[k - 1], floor5), cap) - floor5;
        const double n0 = (double)k, n1 = (double)(m - k);
        const double e = n1 * s0 - n0 * (total - s0); /* (m0 - m1) n0 n1 */
        const double crit = e * e / (n0 * n1);
        if (tmp[k] > tmp[k - 1] && crit > best) {
            best = crit;
            split = k;
        }
    }
    const int32_t lo_n = split, hi_n = m - split;
    *hi = hi_n > 0 ? tmp[split + (hi_n - 1) / 2] : 0.0;
    *lo = lo_n >= 4 ? tmp[(lo_n - 1) / 2] : 0.0;
}

/* S1-S6 for the region [x0, x1) of a host frame; o is the glow path's result (its region fields
 * set). On success o becomes the spots pupil; otherwise only spots_failure and the counts are
 * set. */
static sw_status spots_region(const sw_pupil_plan *plan, const sw_image *frame, sw_pupil_ellipse *o)
{
    const sw_pupil_params *p = &plan->p;
    const sw_sh_geometry *g = &plan->geom;
    const int32_t nx = g->nx, ny = g->ny, width = p->width, height = p->height;
    const int32_t x0 = o->x0, x1 = o->x1;
    const double d = g->pitch_px;
    const size_t nl = (size_t)nx * (size_t)ny;
    o->spots_lit = 0;
    o->spots_points = 0;

    /* the cells of the region: centre x in [x0, x1), at least half of the cell on the frame */
    int32_t ixa = nx, ixb = -1;
    for (int32_t ix = 0; ix < nx; ix++) {
        double cx, cy;
        sw_sh_reference(g, ix, 0, &cx, &cy);
        if (cx >= (double)x0 && cx < (double)x1) {
            ixa = ix < ixa ? ix : ixa;
            ixb = ix > ixb ? ix : ixb;
        }
    }
    if (ixb < ixa) {
        o->spots_failure = SW_PUPIL_FEW_SPOTS;
        return SW_OK;
    }
    const int32_t mx = (int32_t)ceil(d) + 1;
    const int nth = sw_context_threads(plan->ctx);
    const int threads = nth < 1 ? 1 : (nth < ny ? nth : ny); /* S1's rows of cells */
    const size_t per = 2 * (size_t)mx * (size_t)mx; /* a window's pixels and select scratch */
    double *F = malloc(nl * 7 * sizeof(double) + (size_t)threads * per * sizeof(double));
    int32_t *lab = malloc(nl * 2 * sizeof(int32_t));
    double *pts = malloc(nl * 4 * sizeof(double));
    double *wsx = malloc(nl * 2 * sizeof(double));
    int32_t *wqueue = malloc(nl * sizeof(int32_t));
    uint8_t *wstate = malloc(nl);
    if (!F || !lab || !pts || !wsx || !wqueue || !wstate) {
        free(F);
        free(lab);
        free(pts);
        free(wsx);
        free(wqueue);
        free(wstate);
        return sw_fail(plan->ctx, SW_ENOMEM, "pupil: out of memory for the spots path");
    }
    double *C = F + nl, *mad = F + 2 * nl, *tmp = F + 3 * nl;
    double *cmed = F + 4 * nl, *cmean = F + 5 * nl, *cnpx = F + 6 * nl, *buf = F + 7 * nl;
    int32_t *stack = lab + nl;
    double *wsy = wsx + nl;
    uint8_t *in = (uint8_t *)(void *)tmp; /* reused after S2 */

    /* S1: each cell's sum, median, clipped mean (background_of, uncapped) and median absolute
     * deviation; the cells are independent: rows of cells over the context's threads, each
     * with its own scratch (buf is thread 0's, and the walk's after) */
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int32_t iy = 0; iy < ny; iy++) {
        double *const tb = buf + (size_t)sw_omp_thread() * per;
        for (int32_t ix = 0; ix < nx; ix++) {
            const size_t l = (size_t)iy * (size_t)nx + (size_t)ix;
            F[l] = NAN;
            mad[l] = NAN;
            if (ix < ixa || ix > ixb)
                continue;
            int32_t xa, xb, ya, yb;
            cell_span(g->x0, d, ix, width, &xa, &xb);
            cell_span(g->y0, d, iy, height, &ya, &yb);
            const int64_t n = (int64_t)(xb - xa) * (yb - ya);
            if (n < 1 || (double)n < 0.25 * d * d)
                continue;
            double sum = 0.0;
            int64_t k = 0, bad = 0;
            for (int32_t y = ya; y < yb; y++) {
                const void *row = sw_image_row(frame, y);
                for (int32_t x = xa; x < xb; x++) {
                    double v = sw_pm_pixel(row, x, p->type);
                    if (!isfinite(v)) {
                        bad++;
                        v = 0.0;
                    }
                    tb[k++] = v;
                    sum += v;
                }
            }
            if (bad * 4 > n)
                continue;
            const double med = median_px(tb, n, p->type == SW_PIX_U8);
            F[l] = sum;
            cnpx[l] = (double)n;
            cmed[l] = med;
            double m = 0.0; /* the median absolute deviation, from background_of's selection */
            cmean[l] = background_of(tb, n, med, INFINITY, p->type != SW_PIX_F32, tb + n, &m,
                                     p->type == SW_PIX_U8);
            /* a cell's noise: 1.4826 MAD per pixel, over sqrt(n) pixels */
            mad[l] = 1.4826 * m * sqrt((double)n);
        }
    }

    /* S2: the background's skew (light_bias), the median of the lower class of the cells' light
     * above their medians (the unlit cells), per pixel; then each cell's light above its
     * background, and the light of an unlit cell (beta) and of a fully lit one (beta + F0), the
     * medians of the two classes of that light; the coverage c = (F - beta) / F0 */
    light_bias lb = {0.0, 0.0};
    double F0 = 0.0, noise = 0.0;
    int32_t m = 0;
    for (size_t l = 0; l < nl; l++)
        if (isfinite(F[l]))
            tmp[m++] = F[l] - cnpx[l] * cmed[l];
    if (m >= SPOTS_MIN_LIT) {
        double top;
        split_light(tmp, m, &lb.skew, &top);
        lb.skew = fmax(lb.skew, 0.0) / (d * d);
    }
    m = 0;
    for (size_t l = 0; l < nl; l++)
        if (isfinite(F[l])) {
            F[l] -= cnpx[l] * fmin(cmean[l], cmed[l] + lb.skew);
            tmp[m++] = F[l];
        }
    if (m >= SPOTS_MIN_LIT) {
        double top;
        split_light(tmp, m, &lb.beta, &top);
        F0 = top - lb.beta;
        int32_t k = 0;
        for (size_t l = 0; l < nl; l++)
            if (isfinite(mad[l]))
                tmp[k++] = mad[l];
        noise = median_of(tmp, k);
        /* integer pixels: quantisation noise at least (1 / sqrt 12 per pixel) */
        if (p->type != SW_PIX_F32)
            noise = fmax(noise, d * 0.2887);
    }
    const double beta = lb.beta;
    for (size_t l = 0; l < nl; l++)
        C[l] = isfinite(F[l]) && F0 > 0.0 ? (F[l] - beta) / F0 : NAN;
    /* F0 again from the interior alone (lit cells whose four neighbours are lit): the upper
     * class holds the edge's partly lit cells too, whose light would lower the median */
    if (F0 > 0.0) {
        int32_t k = 0;
        for (int32_t iy = 1; iy < ny - 1; iy++)
            for (int32_t ix = ixa + 1; ix < ixb; ix++) {
                const int32_t l = iy * nx + ix;
                if (C[l] > 0.5 && C[l - 1] > 0.5 && C[l + 1] > 0.5 && C[l - nx] > 0.5 &&
                    C[l + nx] > 0.5)
                    tmp[k++] = F[l] - beta;
            }
        if (k >= SPOTS_MIN_LIT) {
            F0 = median_of(tmp, k);
            for (size_t l = 0; l < nl; l++)
                C[l] = isfinite(F[l]) && F0 > 0.0 ? (F[l] - beta) / F0 : NAN;
        }
    }
    int32_t lit = 0;
    for (size_t l = 0; l < nl; l++)
        lit += C[l] > 0.5;
    o->spots_lit = lit;
    if (!(F0 > 0.0) || !(F0 > SPOTS_MIN_SNR * noise) || lit < SPOTS_MIN_LIT) {
        o->spots_failure = SW_PUPIL_FEW_SPOTS;
        goto done;
    }

    /* S3: the lenslets' light at their spots */
    double *Ccell = mad; /* the cells' coverage (mad is free again) */
    memcpy(Ccell, C, nl * sizeof(double));
    walk_lenslets(plan, frame, x0, x1, ixa, ixb, &lb, F0, Ccell, C, wsx, wsy, wstate, wqueue, buf);
    local_coverage(nx, ny, ixa, ixb, wstate, C, Ccell, tmp);

    /* the lit lenslets' largest 8-connected component (by light) is the pupil; the unlit ones
     * that the region's border cannot reach through unlit cells (4-connected) are holes in it */
    for (size_t l = 0; l < nl; l++)
        lab[l] = C[l] > 0.5 ? -1 : 0; /* -1: lit, unlabelled; 0: unlit or off the region */
    int32_t best_lab = 0, nlab = 0;
    double best_light = -1.0;
    for (size_t l0 = 0; l0 < nl; l0++) {
        if (lab[l0] != -1)
            continue;
        const int32_t id = ++nlab;
        double light = 0.0;
        int64_t sp = 0;
        stack[sp++] = (int32_t)l0;
        lab[l0] = id;
        while (sp > 0) {
            const int32_t l = stack[--sp];
            light += fmin(C[l], SPOTS_CAP);
            const int32_t ix = l % nx, iy = l / nx;
            for (int32_t dy = -1; dy <= 1; dy++)
                for (int32_t dx = -1; dx <= 1; dx++) {
                    const int32_t jx = ix + dx, jy = iy + dy;
                    if (jx < ixa || jx > ixb || jy < 0 || jy >= ny)
                        continue;
                    const int32_t j = jy * nx + jx;
                    if (lab[j] == -1) {
                        lab[j] = id;
                        stack[sp++] = j;
                    }
                }
        }
        if (light > best_light) {
            best_light = light;
            best_lab = id;
        }
    }
    /* in[l]: 1 inside (the pupil's component or a hole in it), 0 outside; 2 marks reached */
    for (size_t l = 0; l < nl; l++)
        in[l] = lab[l] == best_lab ? 1 : 0;
    {
        int64_t sp = 0;
        for (int32_t iy = 0; iy < ny; iy++)
            for (int32_t ix = ixa; ix <= ixb; ix++) {
                const int32_t l = iy * nx + ix;
                const int edge = ix == ixa || ix == ixb || iy == 0 || iy == ny - 1;
                if (edge && in[l] == 0) {
                    in[l] = 2;
                    stack[sp++] = l;
                }
            }
        while (sp > 0) {
            const int32_t l = stack[--sp];
            const int32_t ix = l % nx, iy = l / nx;
            static const int32_t ox[4] = {1, -1, 0, 0}, oy[4] = {0, 0, 1, -1};
            for (int k = 0; k < 4; k++) {
                const int32_t jx = ix + ox[k], jy = iy + oy[k];
                if (jx < ixa || jx > ixb || jy < 0 || jy >= ny)
                    continue;
                const int32_t j = jy * nx + jx;
                if (in[j] == 0) {
                    in[j] = 2;
                    stack[sp++] = j;
                }
            }
        }
    }
    /* the coverage the outline reads: the component's lenslets as measured, holes as 1, lit
     * lenslets outside it as 0, the rest as measured */
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = ixa; ix <= ixb; ix++) {
            const int32_t l = iy * nx + ix;
            double c = C[l];
            if (!isfinite(c))
                c = 0.0;
            if (in[l] == 0)
                c = 1.0; /* a hole: unlit (or lit apart) and enclosed by the pupil */
            else if (in[l] == 2 && c > 0.5)
                c = 0.0; /* another lit component, outside the pupil */
            C[l] = c;
        }

    /* S4: the outline, where the coverage crosses 1/2 between row and column neighbours */
    int32_t np = 0;
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = ixa; ix <= ixb; ix++) {
            const int32_t l = iy * nx + ix;
            double cx, cy;
            sw_sh_reference(g, ix, iy, &cx, &cy);
            for (int k = 0; k < 2; k++) {
                const int32_t jx = ix + (k == 0), jy = iy + (k == 1);
                if (jx > ixb || jy >= ny)
                    continue;
                const double c1 = C[l], c2 = C[jy * nx + jx];
                if (!((c1 - 0.5) * (c2 - 0.5) < 0.0))
                    continue;
                const double t = (0.5 - c1) / (c2 - c1);
                pts[2 * np] = cx + (k == 0 ? t * d : 0.0);
                pts[2 * np + 1] = cy + (k == 1 ? t * d : 0.0);
                np++;
            }
        }
    if (np < SPOTS_MIN_POINTS) {
        o->spots_failure = SW_PUPIL_FEW_SPOTS;
        goto done;
    }

    /* S5: the ellipse: algebraic fit, then Sampson refits of the points near it */
    const sw_pm_region r = sw_pm_region_make(x0, x1, height, p->inlier_px);
    double c[6];
    int have = 0, used = np;
    for (int32_t it = 0; it <= p->spots_iterations; it++) {
        double acc[SW_PM_NACC] = {0};
        int32_t n = 0;
        for (int32_t k = 0; k < np; k++) {
            const double u = (pts[2 * k] - r.ox) * r.inv_s, v = (pts[2 * k + 1] - r.oy) * r.inv_s;
            double w = 1.0;
            if (have) {
                double g2;
                const double ds = sampson(c, u, v, &g2) / r.inv_s; /* pixels */
                if (!(ds <= SPOTS_FIT_BAND * d))
                    continue;
                w = 1.0 / g2;
            }
            fit_add(acc, u, v, w);
            n++;
        }
        double cn[6], uc, vc, ra, rb;
        if (n < SPOTS_MIN_POINTS || !sw_pm_refine_solve(acc, cn) ||
            !sw_pm_conic_axes(cn, &uc, &vc, &ra, &rb))
            break;
        memcpy(c, cn, sizeof c);
        have = 1;
        used = n;
    }
    sw_pupil_ellipse e = *o;
    if (!have || !sw_pm_ellipse_out(&r, c, &e)) {
        o->spots_failure = SW_PUPIL_SPOTS_FIT;
        goto done;
    }
    /* sw_pm_ellipse_out adds the border pixels' half pixel (step 8): not here */
    e.a_px -= SW_PUPIL_EDGE_OFFSET_PX;
    e.b_px -= SW_PUPIL_EDGE_OFFSET_PX;
    o->spots_points = used;
    if (!(isfinite(e.cx_px) && isfinite(e.cy_px) && e.b_px >= p->min_radius_px &&
          e.a_px <= p->max_radius_px)) {
        o->spots_failure = SW_PUPIL_SPOTS_FIT;
        goto done;
    }
    /* S6: found */
    o->glow_failure = o->failure;
    o->spots_failure = SW_PUPIL_OK;
    o->method = SW_PUPIL_METHOD_SPOTS;
    o->valid = 1;
    o->failure = SW_PUPIL_OK;
    o->cx_px = e.cx_px;
    o->cy_px = e.cy_px;
    o->a_px = e.a_px;
    o->b_px = e.b_px;
    o->angle_deg = e.angle_deg;
done:
    free(F);
    free(lab);
    free(pts);
    free(wsx);
    free(wqueue);
    free(wstate);
    return SW_OK;
}

int sw_pupil_spots_small_pitch(const sw_pupil_plan *plan)
{
    const sw_pupil_params *p = &plan->p;
    const double s = fmin(p->gauss_sigma, (double)p->gauss_radius);
    return plan->has_geom && !p->given && p->spots_fallback == 1 &&
           plan->geom.pitch_px <= SPOTS_SMOOTHED_PITCH * s;
}

sw_status sw_pupil_spots_fallback(sw_pupil_plan *plan, const sw_image *frame,
                                  sw_pupil_result *result)
{
    const sw_pupil_params *p = &plan->p;
    /* every pupil: spots_fallback 2, or lenslets small enough for the glow path to take the
     * smoothed spots for a glow */
    const int every = p->spots_fallback == 2 || sw_pupil_spots_small_pitch(plan);
    int changed = 0;
    for (int32_t i = 0; i < result->n_pupils; i++) {
        sw_pupil_ellipse *o = &result->pupil[i];
        /* a glow pupil whose edge level did not settle (sw_pm_auto_recheck): measured again */
        const sw_pupil_failure retried =
            o->valid && o->method == SW_PUPIL_METHOD_GLOW && p->spots_fallback == 1
                ? plan->recheck[i]
                : SW_PUPIL_OK;
        if (o->valid && !every && retried == SW_PUPIL_OK)
            continue;
        if (!o->valid)
            o->glow_failure = o->failure;
        if (!p->spots_fallback)
            continue;
        if (!plan->has_geom) {
            if (!o->valid) {
                o->method = SW_PUPIL_METHOD_SPOTS;
                o->spots_failure = SW_PUPIL_NO_GRID;
            }
            continue;
        }
        /* every pupil, or a retried glow pupil: the spots path's pupil replaces the glow path's
         * when it finds one */
        sw_pupil_ellipse t = *o;
        t.valid = 0;
        if (!o->valid)
            t.failure = o->failure;
        sw_status st = spots_region(plan, frame, &t);
        if (st != SW_OK)
            return st;
        if (t.valid || !o->valid) {
            if (t.valid && o->valid)
                t.glow_failure = retried; /* the first fit's failure, or OK: replaced */
            if (!t.valid)
                t.method = SW_PUPIL_METHOD_SPOTS;
            *o = t;
            changed = 1;
        } else {
            o->spots_failure = t.spots_failure;
        }
    }
    if (changed)
        sw_pupil_mask_host(plan, result);
    return SW_OK;
}

/*
 * The generic per-lenslet measurement of the centroid stage (centroid.h "Methods", "Error bars",
 * "Status"), written once for the CPU (centroid.c) and the GPU (centroid_cuda.cu).
 *
 * A lenslet is measured by a group of R->tn threads (sw_cmb_region): the CPU one thread, the GPU
 * 1 to 32 lanes of one warp, as many as suit the region's size. The including file defines,
 * before including this header:
 *   SW_CMB_FN           the qualifiers of these functions (static / __device__ static inline)
 *   SW_CMB_SUM(R, s, k) replaces s[0 .. k) (doubles, k <= SW_CMB_MAXK) by their sums over R's
 *                       group, in every thread (the CPU: nothing)
 *   SW_CMB_MAX(R, s, k) likewise with the maximum
 *   SW_CMB_USUM(R, x)   the sum of the uint32_t x over the group (an expression; the CPU: x)
 *   SW_CMB_UMAX(R, x)   likewise the maximum
 *   SW_CMB_UMAX64(R, x) the maximum of the uint64_t x over the group (the CPU: x)
 *   SW_CMB_TOP16(R, t)  replaces the descending list t[0 .. 16) (uint32_t) by the 16 largest of
 *                       the group's lists, in every thread (the CPU: nothing)
 *   SW_CMB_UNROLL       a pragma that unrolls the loop it precedes a few times (or nothing)
 *   SW_CMB_SYNC(R)      a barrier between the group's threads that orders their writes to
 *                       memory (the CPU: nothing)
 *   SW_CMB_WREAL        the type of WCOG's Gaussian weights and of its re-centring passes'
 *                       per-thread sums (the GPU: float, converted to double once a pass for
 *                       the group's sums; the CPU: double)
 *   SW_CMB_WEXP(x)      exp in that type (expf, exp)
 * Every pixel loop (SW_CMB_EACH) runs q = t0, t0 + tn, ... over the region and is followed by a
 * SUM or MAX, so every thread of the group ends with the same totals and takes the same
 * decisions; the CPU runs the same code as a group of one. The sums are in double (but
 * CORRELATION's surface: each shift's sums in float, by one thread, in the same order on both
 * sides; the GPU may fuse a multiply-add; and WCOG's weights and re-centring passes in
 * SW_CMB_WREAL, float on the GPU: its centres before the last pass move by ~1e-6 px); the GPU
 * adds the rest in another order, so results agree within rounding (1e-9 relative; the
 * correlation's shift 1e-5 px; WCOG's centroid 1e-5 px), and the decisions
 * taken on sums (a pixel exactly at a threshold made of sums) may, very rarely, differ. The
 * counts and maxima of the selection (BRIGHTEST) are integers: exact on both sides.
 */
#ifndef SW_CENTROID_METHOD_H
#define SW_CENTROID_METHOD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "centroid/centroid_model.h"

/* Unrolls the loop it precedes completely on the GPU (register arrays indexed by its counter). */
#ifdef __CUDA_ARCH__
#define SW_CMB_UNROLL_ALL _Pragma("unroll")
#else
#define SW_CMB_UNROLL_ALL
#endif

/* An order-preserving 32-bit key of a float (larger float, larger key) and back. */
SW_CM_FN uint32_t sw_cmb_key(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

SW_CM_FN float sw_cmb_unkey(uint32_t k)
{
    uint32_t u = (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The region's layout (sw_cmb_region): element of pixel q in v and r. */
SW_CM_FN int32_t sw_cmb_ix(const sw_cmb_region *R, int32_t q)
{
    return (q >> R->lg) * R->ws + (q & ((1 << R->lg) - 1));
}

/* Sets R's pixel count and this thread's start and step (after w, h, t0, tn). */
SW_CM_FN void sw_cmb_layout(sw_cmb_region *R)
{
    R->n = R->w * R->h;
    R->i0 = R->t0 % R->w;
    R->j0 = R->t0 / R->w;
    R->di = R->tn % R->w;
    R->dj = R->tn / R->w;
}

/* The pixel loop of one thread: q = t0, t0 + tn, ... < n, with (i, j) = (q % w, q / w) kept
 * up to date without a division. */
#define SW_CMB_EACH(R, q, i, j)                                                                    \
    for (int32_t q = (R)->t0, i = (R)->i0, j = (R)->j0; q < (R)->n;                                \
         q += (R)->tn, i += (R)->di, j += (R)->dj + (i >= (R)->w), i -= i >= (R)->w ? (R)->w : 0)

/* SW_CMB_EACH with e, the element of pixel q in v (sw_cmb_ix): q = t0 + k tn with tn = 2^lg and
 * t0 < tn, so e = k ws + t0, a step of ws a pixel (no shift and mask a pixel). */
#define SW_CMB_EACH_E(R, q, e, i, j)                                                               \
    for (int32_t q = (R)->t0, e = (R)->t0, i = (R)->i0, j = (R)->j0; q < (R)->n; q += (R)->tn,     \
                 e += (R)->ws, i += (R)->di, j += (R)->dj + (i >= (R)->w),                         \
                 i -= i >= (R)->w ? (R)->w : 0)

/* The conditioned value (centroid.h steps 4-5, threshold t) of v and its derivative dc/dv. */
SW_CM_FN float sw_cmb_cond(const sw_cmb_params *P, float v, float t, double *deriv)
{
    float c = sw_cm_condition(v, 0.0f, 1.0f, P->mode, t, P->gamma);
    double d = 1.0;
    if (P->mode != 0 || P->gamma != 1.0f) {
        if (!(c > 0.0f)) {
            d = 0.0;
        } else if (P->gamma != 1.0f) {
            /* c = u^gamma, u the thresholded value: dc/dv = gamma c / u */
            float u = P->mode == 1 ? v - t : v;
            d = u > 0.0f ? (double)P->gamma * (double)c / (double)u : 0.0;
        }
    }
    *deriv = d;
    return c;
}

SW_CM_FN int sw_cmb_on_ring(int32_t i, int32_t j, int32_t w, int32_t h)
{
    return i == 0 || j == 0 || i == w - 1 || j == h - 1;
}

/* The per-pixel variance (centroid.h "Error bars"): the detector model, or the ring's. */
SW_CM_FN double sw_cmb_var(const sw_cmb_params *P, float v, double ring_var)
{
    if (!P->have_det)
        return ring_var;
    /* the pixel's own value as the estimate of its mean (unbiased: a clipped max(v, 0) would
     * overstate the variance of the sky-free pixels by about 0.4 read noise / gain) */
    const double var = (double)v * P->inv_gain + P->rn2;
    return var > 0.0 ? var : 0.0;
}

/* The conditioned value at region pixel q. */
SW_CM_FN double sw_cmb_c(const sw_cmb_params *P, const sw_cmb_region *R, float t, int32_t q)
{
    double d;
    return (double)sw_cmb_cond(P, R->v[sw_cmb_ix(R, q)], t, &d);
}

/* One pixel's share of the CoG-like sums (sw_cmb_cog_sums below): value v at region pixel (i, j),
 * Gaussian weight wt (1 unless WCOG). */
SW_CM_FN void sw_cmb_cog_px(const sw_cmb_params *P, float v, int32_t i, int32_t j, int32_t w,
                            int32_t h, float t, double bg, double sd, double ring_var, double wt,
                            int full, int mom2, double *s)
{
    double d;
    const double c = (double)sw_cmb_cond(P, v, t, &d);
    double sig = c;
    if (P->method == SW_CMB_LOCAL || P->method == SW_CMB_BRIGHT) {
        sig = c > bg + (P->method == SW_CMB_LOCAL ? P->local_k * sd : 0.0) ? c - bg : 0.0;
        /* a pixel at or below the cut (sig = 0, d = 0) adds exact zeros to every sum: skipped,
         * the same sums (BRIGHTEST keeps at most N pixels, so most of a lane's pixels take no
         * double arithmetic) */
        if (sig == 0.0)
            return;
        d = sig > 0.0 ? d : 0.0;
    }
    const double x = (double)i, y = (double)j;
    const double ws = wt * sig;
    s[0] += ws;
    s[1] += ws * x;
    s[2] += ws * y;
    if (!full)
        return;
    const double V = wt * wt * d * d * sw_cmb_var(P, v, ring_var);
    s[3] += V;
    s[4] += V * x;
    s[5] += V * x * x;
    s[6] += V * y;
    s[7] += V * y * y;
    if (sw_cmb_on_ring(i, j, w, h))
        s[8] += ws;
    if (mom2) {
        s[9] += ws * x * x;
        s[10] += ws * y * y;
    }
}

/*
 * The CoG-like sums of one weight centre (cx, cy in region coordinates; ignored unless WCOG):
 * s[0] = sum w s, s[1] = sum w s x, s[2] = sum w s y, s[3] = sum V, s[4] = sum V x,
 * s[5] = sum V x^2, s[6] = sum V y, s[7] = sum V y^2, s[8] = sum over the ring of w s, with
 * V = w^2 c'^2 var (region coordinates x = i, y = j); and for the re-centred WCOG only (its error
 * bars) s[9] = sum w s x^2, s[10] = sum w s y^2. With full 0 (a WCOG pass before the last) only
 * s[0 .. 2], the new centre.
 * The signal s of a pixel: c (COG, WCOG), c - bg above bg + k sd (LOCAL), max(c - b, 0)
 * (BRIGHTEST: b in bg). The Gaussian weight is separable: exp(-(x - cx)^2 / (2 s^2)) times
 * exp(-(y - cy)^2 / (2 s^2)), w + h exponentials per pass (in R->scratch, SW_CMB_WEXP) instead
 * of w h. WCOG's passes before the last: sw_cmb_wcog_centre.
 */
SW_CMB_FN void sw_cmb_cog_sums(const sw_cmb_params *P, const sw_cmb_region *R, float t, double bg,
                               double sd, double ring_var, double cx, double cy, int full,
                               double *s)
{
    const int32_t w = R->w, h = R->h;
    for (int k = 0; k < 11; k++)
        s[k] = 0.0;
    const int wcog = P->method == SW_CMB_WCOG, mom2 = wcog && P->iters > 0;
    const double *wx = R->scratch, *wy = R->scratch + w;
    if (wcog) {
        const double inv2s2 = 0.5 / (P->sigma_w * P->sigma_w);
        SW_CMB_SYNC(R); /* the last pass has read the weights */
        for (int32_t k = R->t0; k < w + h; k += R->tn) {
            const double e = k < w ? (double)k - cx : (double)(k - w) - cy;
            R->scratch[k] = (double)SW_CMB_WEXP((SW_CMB_WREAL)(-e * e * inv2s2));
        }
        SW_CMB_SYNC(R);
    }
    SW_CMB_EACH_E(R, q, e, i, j)
    {
        sw_cmb_cog_px(P, R->v[e], i, j, w, h, t, bg, sd, ring_var, wcog ? wx[i] * wy[j] : 1.0, full,
                      mom2, s);
    }
    SW_CMB_SUM(R, s, !full ? 3 : mom2 ? 11 : 9);
}

/*
 * A WCOG re-centring pass (one before the last): s[0] = sum w c, s[1] = sum w c x, s[2] = sum w c
 * y about the weight centre (cx, cy), as sw_cmb_cog_sums with full 0, but the weights and each
 * thread's sums in SW_CMB_WREAL (float on the GPU: no double conversion or arithmetic per pixel),
 * its totals converted to double for the group's sums. The weights' tables in R->scratch (2 (w +
 * h) SW_CMB_WREAL): gx[i], gx[i] i, gy[j], gy[j] j, so a pixel costs 2 products and 3
 * multiply-adds.
 */
SW_CMB_FN void sw_cmb_wcog_centre(const sw_cmb_params *P, const sw_cmb_region *R, float t,
                                  double cx, double cy, double *s)
{
    typedef SW_CMB_WREAL wreal;
    const int32_t w = R->w, h = R->h;
    wreal *gx = (wreal *)(void *)R->scratch, *gxi = gx + w, *gy = gxi + w, *gyj = gy + h;
    const wreal inv2s2 = (wreal)(0.5 / (P->sigma_w * P->sigma_w));
    const wreal fcx = (wreal)cx, fcy = (wreal)cy;
    SW_CMB_SYNC(R); /* the last pass has read the weights */
    for (int32_t k = R->t0; k < w + h; k += R->tn) {
        const int xk = k < w;
        const int32_t c = xk ? k : k - w;
        const wreal e = (wreal)c - (xk ? fcx : fcy);
        const wreal g = SW_CMB_WEXP(-e * e * inv2s2);
        wreal *tab = xk ? gx : gy, *tabc = xk ? gxi : gyj;
        tab[c] = g;
        tabc[c] = g * (wreal)c;
    }
    SW_CMB_SYNC(R);
    wreal a0 = 0, a1 = 0, a2 = 0;
    SW_CMB_EACH_E(R, q, e, i, j)
    {
        double d;
        const wreal c = (wreal)sw_cmb_cond(P, R->v[e], t, &d);
        const wreal cyw = c * gy[j], cxw = c * gx[i];
        a0 += cyw * gx[i];
        a1 += cyw * gxi[i];
        a2 += cxw * gyj[j];
    }
    s[0] = (double)a0;
    s[1] = (double)a1;
    s[2] = (double)a2;
    SW_CMB_SUM(R, s, 3);
}

/* One pixel's share of QUADCELL's sums: s[0] = sum c, s[1] = sum c ex, s[2] = sum c ey, s[3] =
 * sum V, s[4] = sum V ex, s[5] = sum V ey, s[6] = sum V ex^2, s[7] = sum V ey^2, with ex (ey) +1
 * right of (below) the centre, -1 left (above), 0 on an odd middle line, V = c'^2 var. */
SW_CM_FN void sw_cmb_quad_px(const sw_cmb_params *P, float v, int32_t i, int32_t j, int32_t w,
                             int32_t h, float t, double ring_var, double *s)
{
    double d;
    const double c = (double)sw_cmb_cond(P, v, t, &d);
    const double ex = 2 * i > w - 1 ? 1.0 : 2 * i < w - 1 ? -1.0 : 0.0;
    const double ey = 2 * j > h - 1 ? 1.0 : 2 * j < h - 1 ? -1.0 : 0.0;
    const double V = d * d * sw_cmb_var(P, v, ring_var);
    s[0] += c;
    s[1] += c * ex;
    s[2] += c * ey;
    s[3] += V;
    s[4] += V * ex;
    s[5] += V * ey;
    s[6] += V * ex * ex;
    s[7] += V * ey * ey;
}

/* Sorts t[0 .. 16) in descending order (a bitonic sorting network: 80 compare-exchanges). */
SW_CM_FN void sw_cmb_sort16(uint32_t *t)
{
    SW_CMB_UNROLL_ALL
    for (int kk = 2; kk <= 16; kk <<= 1) {
        SW_CMB_UNROLL_ALL
        for (int jj = kk >> 1; jj > 0; jj >>= 1) {
            SW_CMB_UNROLL_ALL
            for (int i = 0; i < 16; i++) {
                const int l = i ^ jj;
                if (l > i) {
                    const uint32_t a = t[i], b = t[l];
                    const uint32_t hi = a > b ? a : b, lo = a > b ? b : a;
                    const int desc = (i & kk) == 0;
                    t[i] = desc ? hi : lo;
                    t[l] = desc ? lo : hi;
                }
            }
        }
    }
}

/* Replaces the descending list t[0 .. 16) by the 16 largest of t and the descending list b: the
 * larger of t[k] and b[15 - k] (a bitonic sequence that holds them), sorted by a bitonic merge. */
SW_CM_FN void sw_cmb_merge16(uint32_t *t, const uint32_t *b)
{
    SW_CMB_UNROLL_ALL
    for (int k = 0; k < 16; k++)
        t[k] = t[k] > b[15 - k] ? t[k] : b[15 - k];
    SW_CMB_UNROLL_ALL
    for (int st = 8; st > 0; st >>= 1) {
        SW_CMB_UNROLL_ALL
        for (int k = 0; k < 16; k++) {
            if ((k & st) == 0) {
                const uint32_t x = t[k], y = t[k + st];
                t[k] = x > y ? x : y;
                t[k + st] = x > y ? y : x;
            }
        }
    }
}

/*
 * The m-th largest conditioned value of the region (1 <= m <= n), exact, on the order-preserving
 * keys of the values. m <= 16: one pass in which each thread keeps the 16 largest keys of its
 * pixels (a descending list, copies kept; 0 is below every key), then SW_CMB_TOP16 merges the
 * group's lists; the m-th entry is the answer. The thread's list is built 16 pixels at a time:
 * their keys sorted by a network (sw_cmb_sort16, 80 compare-exchanges), merged into the list
 * (sw_cmb_merge16, 16 maxima and 32 compare-exchanges): about 8 compare-exchanges a pixel
 * instead of 16 for inserting each, and none past a thread's 16th pixel on the GPU's groups as
 * cm_shape sizes them below 32 lanes. A larger m bisects on the key's 32 bits (32 passes of one
 * count).
 */
SW_CMB_FN float sw_cmb_select(const sw_cmb_params *P, const sw_cmb_region *R, float t, int32_t m)
{
    const uint32_t um = (uint32_t)m;
    if (m <= 16) {
        /* the thread's pixels in chunks of 16 (its k-th pixel: q = t0 + k tn, element t0 + k ws),
         * each chunk's keys sorted, then merged into the list */
        uint32_t top[16] = {0u};
        for (int32_t k0 = 0; R->t0 + k0 * R->tn < R->n || k0 == 0; k0 += 16) {
            uint32_t b[16];
            SW_CMB_UNROLL_ALL
            for (int k = 0; k < 16; k++) {
                const int32_t q = R->t0 + (k0 + k) * R->tn, e = R->t0 + (k0 + k) * R->ws;
                double d;
                b[k] = q < R->n ? sw_cmb_key(sw_cmb_cond(P, R->v[e], t, &d)) : 0u;
            }
            sw_cmb_sort16(b);
            if (k0 == 0) {
                SW_CMB_UNROLL_ALL
                for (int k = 0; k < 16; k++)
                    top[k] = b[k];
            } else {
                sw_cmb_merge16(top, b);
            }
        }
        SW_CMB_TOP16(R, top);
        return sw_cmb_unkey(top[m - 1]);
    }
    uint32_t key = 0;
    for (int bit = 31; bit >= 0; bit--) {
        const uint32_t cand = key | (1u << bit);
        uint32_t cnt = 0;
        SW_CMB_EACH(R, q, i, j)
        {
            double d;
            cnt += sw_cmb_key(sw_cmb_cond(P, R->v[sw_cmb_ix(R, q)], t, &d)) >= cand;
        }
        if (SW_CMB_USUM(R, cnt) >= um)
            key = cand;
    }
    return sw_cmb_unkey(key);
}

/* Vertex offset of the parabola through (-1, a), (0, b), (1, c), in [-0.5, 0.5]; 0 when b is not
 * a strict maximum of the three. */
SW_CM_FN double sw_cmb_parabola(double a, double b, double c)
{
    const double den = a - 2.0 * b + c;
    if (!(den < 0.0))
        return 0.0;
    double d = 0.5 * (a - c) / den;
    return d < -0.5 ? -0.5 : d > 0.5 ? 0.5 : d;
}

#define SW_CMB_CU 8 /* CORRELATION: most shifts along x a thread sums at once (a unit) */

/*
 * CORRELATION's surface (sw_cmb_correlate): this thread's units of cu <= SW_CMB_CU shifts (a
 * constant where it is called), each shift's value into R->scratch, and the thread's best shift
 * (its value, its index; the first in row order among equals) into *best, *kbest.
 */
SW_CMB_FN void sw_cmb_corr_units(const sw_cmb_region *R, int32_t S, float rbf, int cu, double *best,
                                 int32_t *kbest)
{
    const int32_t ns = 2 * S + 1, w = R->w, iw = R->w - 2 * S, ih = R->h - 2 * S, nin = iw * ih;
    const int32_t nub = (ns + cu - 1) / cu, cmax = w - 1;
    for (int32_t unit = R->t0; unit < ns * nub; unit += R->tn) {
        /* shifts (u0 + k - S, vv - S), k < cu; a column past the region (k beyond the last
         * shift) reads the row's last pixel and is dropped */
        const int32_t vv = unit / nub, u0 = unit % nub * cu;
        float acc[SW_CMB_CU], f1[SW_CMB_CU], f2[SW_CMB_CU];
        SW_CMB_UNROLL_ALL
        for (int k = 0; k < SW_CMB_CU; k++)
            acc[k] = f1[k] = f2[k] = 0.0f;
        for (int32_t jj = 0; jj < ih; jj++) {
            const float *rr = R->r + (jj + S) * w + S, *fr = R->cw + (jj + vv) * w;
            float fw[SW_CMB_CU] = {0.0f};
            SW_CMB_UNROLL_ALL
            for (int k = 0; k + 1 < SW_CMB_CU; k++)
                if (k + 1 < cu)
                    fw[k] = fr[u0 + k < cmax ? u0 + k : cmax];
            float a1 = 0.0f, a2 = 0.0f; /* shift u0's row sums of f and f^2 */
            SW_CMB_UNROLL
            for (int32_t i = 0; i < iw; i++) {
                const int32_t c = i + u0 + cu - 1;
                fw[cu - 1] = fr[c < cmax ? c : cmax];
                const float rd = rr[i] - rbf;
                SW_CMB_UNROLL_ALL
                for (int k = 0; k < SW_CMB_CU; k++)
                    if (k < cu)
                        acc[k] += fw[k] * rd;
                a1 += fw[0];
                a2 += fw[0] * fw[0];
                SW_CMB_UNROLL_ALL
                for (int k = 0; k + 1 < SW_CMB_CU; k++)
                    if (k + 1 < cu)
                        fw[k] = fw[k + 1];
            }
            f1[0] += a1;
            f2[0] += a2;
            /* shift k's sums: shift k - 1's less column u0 + k - 1, plus column u0 + k - 1 + iw,
             * which the window holds (fw[k - 1]) */
            SW_CMB_UNROLL_ALL
            for (int k = 1; k < SW_CMB_CU; k++) {
                if (k < cu) {
                    const int32_t ca = u0 + k - 1;
                    const float fa = fr[ca < cmax ? ca : cmax], fb = fw[k - 1];
                    a1 = a1 - fa + fb;
                    a2 = a2 - fa * fa + fb * fb;
                    f1[k] += a1;
                    f2[k] += a2;
                }
            }
        }
        SW_CMB_UNROLL_ALL
        for (int k = 0; k < SW_CMB_CU; k++) {
            if (k >= cu || u0 + k >= ns)
                break;
            /* normalised by the frame's spread over the shifted area (the template's is common
             * to every shift): insensitive to the frame's local mean and contrast */
            const double ef = (double)f2[k] - (double)f1[k] * (double)f1[k] / (double)nin;
            const double cv = ef > 0.0 ? (double)acc[k] / sqrt(ef) : 0.0;
            const int32_t ks = vv * ns + u0 + k;
            R->scratch[ks] = cv;
            if (cv > *best) {
                *best = cv;
                *kbest = ks;
            }
        }
    }
}

/*
 * CORRELATION (centroid.h): writes the shift (sx, sy), its variances, the SNR and C(peak); the
 * return value is 1 when the maximum lies on the edge of the search range. m: the region's mean
 * conditioned value.
 * The surface C(u, v), (2 S + 1)^2 shifts of an inner area of up to ~10^3 pixels, is the bulk of
 * the work. It is summed in float from a work copy of the conditioned region less m (R->cw;
 * centred, so that the frame's spread sum f^2 - (sum f)^2 / n keeps its digits) against the
 * template less its inner mean. Taking m out changes no sum but the rounding: sum (f - m)(r -
 * rbar) = sum f (r - rbar), since the template's deviations sum to 0. A thread takes a unit of
 * cu shifts u0 .. u0 + cu - 1 of one v at a time (cu = SW_CMB_CU, 4 for a search of +-1): along
 * each template row it holds the CU frame pixels the unit's shifts pair with the template pixel in
 * registers (one new load and one template load a pixel for cu products), so each shift's product
 * sum runs over the same pixels in the same order as one shift alone; the frame's sums over each
 * shift's area (for the normalisation) come from the first shift's row sums, moved along the row by
 * the pixel that leaves and the one that enters. R->r and R->cw are row-major (element q) here, one
 * per group. The peak: each thread's best shift (the first in row order among equals), the group's
 * best by a maximum and a minimum index, as a serial scan would find it.
 */
SW_CMB_FN int sw_cmb_correlate(const sw_cmb_params *P, const sw_cmb_region *R, float t,
                               double ring_var, double m, double *sx, double *sy, double *vx,
                               double *vy, double *snr, double *c0)
{
    const int32_t S = P->search, ns = 2 * S + 1, w = R->w;
    const int32_t iw = R->w - 2 * S, ih = R->h - 2 * S, nin = iw * ih;
    /* the template's mean over the inner area */
    double mr[1] = {0.0};
    for (int32_t q = R->t0; q < nin; q += R->tn)
        mr[0] += (double)R->r[(q / iw + S) * w + q % iw + S];
    SW_CMB_SUM(R, mr, 1);
    const double rbar = mr[0] / (double)nin;
    const float rbf = (float)rbar, mf = (float)m;
    SW_CMB_SYNC(R); /* the last lenslet's surface has been read */
    SW_CMB_EACH(R, q, i, j)
    {
        R->cw[q] = (float)sw_cmb_c(P, R, t, q) - mf;
    }
    SW_CMB_SYNC(R);
    double best = -INFINITY;
    int32_t kbest = 0;
    /* 4 shifts a unit for a search of +-1 (fewer wasted than with 8), else 8 */
    if (ns <= 4)
        sw_cmb_corr_units(R, S, rbf, 4, &best, &kbest);
    else
        sw_cmb_corr_units(R, S, rbf, SW_CMB_CU, &best, &kbest);
    double bm[1] = {best};
    SW_CMB_MAX(R, bm, 1);
    const int32_t kb =
        (int32_t)(0xFFFFFFFFu - SW_CMB_UMAX(R, best == bm[0] ? 0xFFFFFFFFu - (uint32_t)kbest : 0u));
    SW_CMB_SYNC(R); /* the surface is in R->scratch */
    const int32_t u0 = kb % ns - S, v0 = kb / ns - S;
    const double nb = R->scratch[kb];
    int edge = u0 == -S || u0 == S || v0 == -S || v0 == S;
    double dx = 0.0, dy = 0.0;
    if (!edge) {
        dx = sw_cmb_parabola(R->scratch[kb - 1], nb, R->scratch[kb + 1]);
        dy = sw_cmb_parabola(R->scratch[kb - ns], nb, R->scratch[kb + ns]);
    }
    SW_CMB_SYNC(R); /* the scratch may be written again by the next lenslet */
    /* error bars: the template's gradient, the frame's variances at the matched pixels */
    double s[7] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (int32_t q = R->t0; q < nin; q += R->tn) {
        const int32_t i = q % iw + S, j = q / iw + S, p = j * w + i;
        const double gx = 0.5 * ((double)R->r[p + 1] - (double)R->r[p - 1]);
        const double gy = 0.5 * ((double)R->r[p + w] - (double)R->r[p - w]);
        const double dr = (double)R->r[p] - rbar;
        const int32_t pf = p + v0 * w + u0;
        const double var = sw_cmb_var(P, R->v[sw_cmb_ix(R, pf)], ring_var);
        s[0] += gx * gx;
        s[1] += gy * gy;
        s[2] += gx * gx * var;
        s[3] += gy * gy * var;
        s[4] += dr * dr;
        s[5] += dr * dr * var;
        s[6] += sw_cmb_c(P, R, t, pf) * dr; /* C(peak) before the normalisation */
    }
    SW_CMB_SUM(R, s, 7);
    const double cb = s[6];
    const double a = s[4] > 0.0 ? cb / s[4] : NAN;
    *sx = (double)u0 + dx;
    *sy = (double)v0 + dy;
    *vx = s[2] / (a * s[0] * a * s[0]);
    *vy = s[3] / (a * s[1] * a * s[1]);
    *snr = cb / sqrt(s[5]);
    *c0 = cb;
    return edge;
}

/* The p-th pixel (0 <= p < sw_cmb_ring_n) of the region's outer ring. */
SW_CM_FN int32_t sw_cmb_ring_n(int32_t w, int32_t h)
{
    return w <= 2 || h <= 2 ? w * h : 2 * w + 2 * (h - 2);
}

SW_CM_FN int32_t sw_cmb_ring_q(int32_t p, int32_t w, int32_t h)
{
    if (w <= 2 || h <= 2)
        return p; /* every pixel is on the ring */
    if (p < w)
        return p;
    if (p < 2 * w)
        return (h - 1) * w + p - w;
    p -= 2 * w;
    return (1 + p / 2) * w + ((p & 1) ? w - 1 : 0);
}

/* The ring's statistics (the ring's sums of the first pass, its 3-sigma clipped pass) feed LOCAL's
 * background and threshold and, without a detector model, the per-pixel variance; nothing else
 * reads them, so they are skipped otherwise. */
SW_CM_FN int sw_cmb_need_ring(const sw_cmb_params *P)
{
    return P->method == SW_CMB_LOCAL || !P->have_det;
}

/* COG and QUADCELL with a known threshold (not FRACTION) and no ring statistics measure in one
 * pass over the pixels: the method's sums ride on the first pass (its total is their s[0]). The
 * GPU then reads the pixels straight from the frame (no region in shared memory). */
SW_CM_FN int sw_cmb_one_pass(const sw_cmb_params *P)
{
    return !P->fraction && !sw_cmb_need_ring(P) &&
           (P->method == SW_CMB_COG || P->method == SW_CMB_QUAD);
}

/* The first pass's state: what it gathers and the sums it has so far (per thread). */
typedef struct sw_cmb_scan {
    int fused;     /* the threshold is known: the total (and the ring's sums) in this pass      */
    int ring;      /* the ring's sums (sw_cmb_need_ring)                                       */
    int peak;      /* the maximum and its place: FRACTION, or the peak-on-the-border check     */
    int one;       /* sw_cmb_one_pass: the method's sums too, in s                             */
    uint64_t code; /* the largest key(v) * 2^14 + (2^14 - 1 - q) of a finite pixel, 0: none */
    uint32_t bad;  /* 1: a non-finite pixel                                                */
    double r1[4];  /* total, ring pixels, ring sum, ring sum of squares                    */
    double s[11];  /* the method's sums (sw_cmb_cog_sums, sw_cmb_quad_px)                  */
} sw_cmb_scan;

SW_CM_FN void sw_cmb_scan_init(const sw_cmb_params *P, sw_cmb_scan *A)
{
    A->fused = !P->fraction;
    A->ring = sw_cmb_need_ring(P);
    A->peak = P->fraction || (P->peak_border && P->method != SW_CMB_CORR);
    A->one = sw_cmb_one_pass(P);
    A->code = 0;
    A->bad = 0;
    for (int k = 0; k < 4; k++)
        A->r1[k] = 0.0;
    for (int k = 0; k < 11; k++)
        A->s[k] = 0.0;
}

/* The first pass on one pixel: value v (after steps 1-3) at q = (i, j) of a w x h region. */
SW_CM_FN void sw_cmb_scan_px(const sw_cmb_params *P, sw_cmb_scan *A, float v, int32_t q, int32_t i,
                             int32_t j, int32_t w, int32_t h)
{
    if (!isfinite(v)) {
        A->bad = 1u;
        return;
    }
    if (A->peak) {
        /* exact, the first maximum (row order) wins */
        const uint64_t code = (uint64_t)sw_cmb_key(v) << 14 | (uint64_t)(16383 - q);
        A->code = code > A->code ? code : A->code;
    }
    if (!A->fused)
        return;
    if (A->one) {
        if (P->method == SW_CMB_QUAD)
            sw_cmb_quad_px(P, v, i, j, w, h, P->thr, NAN, A->s);
        else
            sw_cmb_cog_px(P, v, i, j, w, h, P->thr, 0.0, 0.0, NAN, 1.0, 1, 0, A->s);
        return;
    }
    double d;
    const double c = (double)sw_cmb_cond(P, v, P->thr, &d);
    A->r1[0] += c;
    if (A->ring && sw_cmb_on_ring(i, j, w, h)) {
        A->r1[1] += 1.0;
        A->r1[2] += c;
        A->r1[3] += c * c;
    }
}

/*
 * One lenslet after its first pass (A: this thread's share, sw_cmb_scan_px on its pixels): the
 * method, its error bars, its status (centroid.h). Positions in frame pixels. Reads R->v only
 * when the method needs more passes (never when A->one).
 */
SW_CMB_FN void sw_cmb_conclude(const sw_cmb_params *P, const sw_cmb_region *R, sw_cmb_scan *A,
                               sw_cmb_out *o)
{
    const int32_t w = R->w, h = R->h, n = R->n;
    o->x = o->y = o->vx = o->vy = o->snr = NAN;
    o->inten = 0.0;

    A->code = SW_CMB_UMAX64(R, A->code);
    const int bad = SW_CMB_UMAX(R, A->bad) != 0u;
    const int32_t qpk = 16383 - (int32_t)(A->code & 16383u);
    const int peak_ring = A->peak && A->code != 0 && sw_cmb_on_ring(qpk % w, qpk / w, w, h);
    float t = P->thr;
    double *r1 = A->r1;
    if (!A->fused) {
        /* pass 1 (the total and the ring's statistics) once the maximum sets the threshold */
        const float mx = A->code != 0 ? sw_cmb_unkey((uint32_t)(A->code >> 14)) : -INFINITY;
        t = sw_cm_fraction_threshold(P->frac, mx);
        SW_CMB_EACH(R, q, i, j)
        {
            const double c = sw_cmb_c(P, R, t, q);
            r1[0] += c;
            if (A->ring && sw_cmb_on_ring(i, j, w, h)) {
                r1[1] += 1.0;
                r1[2] += c;
                r1[3] += c * c;
            }
        }
    }
    if (A->one) {
        SW_CMB_SUM(R, A->s, P->method == SW_CMB_QUAD ? 8 : 9);
        r1[0] = A->s[0]; /* the same values in the same order */
    } else if (A->ring) {
        SW_CMB_SUM(R, r1, 4);
    } else {
        SW_CMB_SUM(R, r1, 1);
    }
    o->inten = bad ? NAN : r1[0];
    o->valid = 0;
    if (!R->in_mask || bad) {
        o->status = !R->in_mask ? SW_CMB_MASKED : SW_CMB_NONFINITE;
        return;
    }
    /* pass 2: the ring clipped at 3 sigma (its pixels only) */
    double bg = 0.0, sd = 0.0, ring_var = NAN;
    if (A->ring) {
        bg = r1[2] / r1[1];
        sd = r1[1] > 1.0 ? sqrt(fmax(r1[3] / r1[1] - bg * bg, 0.0) * r1[1] / (r1[1] - 1.0)) : 0.0;
        if (sd > 0.0) {
            double r2[3] = {0.0, 0.0, 0.0};
            const int32_t nr = sw_cmb_ring_n(w, h);
            for (int32_t p = R->t0; p < nr; p += R->tn) {
                const double c = sw_cmb_c(P, R, t, sw_cmb_ring_q(p, w, h));
                if (fabs(c - bg) <= 3.0 * sd) {
                    r2[0] += 1.0;
                    r2[1] += c;
                    r2[2] += c * c;
                }
            }
            SW_CMB_SUM(R, r2, 3);
            if (r2[0] > 1.0) {
                bg = r2[1] / r2[0];
                sd = sqrt(fmax(r2[2] / r2[0] - bg * bg, 0.0) * r2[0] / (r2[0] - 1.0));
            }
        }
        ring_var = r1[1] > 1.0 ? sd * sd : NAN;
    }

    double x = NAN, y = NAN, vx = NAN, vy = NAN, snr = NAN, sig = 0.0, ring_sig = 0.0;
    int left = 0;
    double *s = A->s;
    if (P->method == SW_CMB_CORR) {
        double sx, sy;
        left =
            sw_cmb_correlate(P, R, t, ring_var, r1[0] / (double)n, &sx, &sy, &vx, &vy, &snr, &sig);
        x = R->rx + sx;
        y = R->ry + sy;
    } else if (P->method == SW_CMB_QUAD) {
        if (!A->one) {
            SW_CMB_EACH(R, q, i, j)
            {
                sw_cmb_quad_px(P, R->v[sw_cmb_ix(R, q)], i, j, w, h, t, ring_var, s);
            }
            SW_CMB_SUM(R, s, 8);
        }
        sig = s[0];
        if (sig > 0.0) {
            const double qx = s[1] / sig, qy = s[2] / sig;
            x = (double)R->xs + 0.5 * (double)(w - 1) + P->qgain * qx;
            y = (double)R->ys + 0.5 * (double)(h - 1) + P->qgain * qy;
            vx = P->qgain * P->qgain * (s[6] - 2.0 * qx * s[4] + qx * qx * s[3]) / (sig * sig);
            vy = P->qgain * P->qgain * (s[7] - 2.0 * qy * s[5] + qy * qy * s[3]) / (sig * sig);
            snr = sig / sqrt(s[3]);
        }
        ring_sig = 0.0; /* every pixel of a 2 x 2 region is on the ring */
    } else {
        double b = bg;
        if (P->method == SW_CMB_BRIGHT) {
            const int32_t m = P->nbright + 1 < n ? P->nbright + 1 : n;
            b = (double)sw_cmb_select(P, R, t, m);
        }
        double cx = R->rx - (double)R->xs, cy = R->ry - (double)R->ys; /* region coordinates */
        const int passes = P->method == SW_CMB_WCOG ? P->iters + 1 : 1;
        for (int it = 0; it < passes; it++) {
            if (!A->one && it + 1 < passes)
                sw_cmb_wcog_centre(P, R, t, cx, cy, s);
            else if (!A->one)
                sw_cmb_cog_sums(P, R, t, b, sd, ring_var, cx, cy, 1, s);
            if (!(s[0] > 0.0) || !isfinite(s[0]))
                break;
            x = s[1] / s[0];
            y = s[2] / s[0];
            if (it + 1 < passes) {
                cx = x;
                cy = y;
            }
        }
        sig = s[0];
        if (sig > 0.0 && isfinite(sig)) {
            double dnx = sig, dny = sig;
            if (P->method == SW_CMB_WCOG && P->iters > 0) {
                /* the fixed point's derivative (centroid.h "Error bars") */
                const double is2 = 1.0 / (P->sigma_w * P->sigma_w);
                dnx = sig - (s[9] - 2.0 * x * s[1] + x * x * sig) * is2;
                dny = sig - (s[10] - 2.0 * y * s[2] + y * y * sig) * is2;
            }
            vx = (s[5] - 2.0 * x * s[4] + x * x * s[3]) / (dnx * dnx);
            vy = (s[7] - 2.0 * y * s[6] + y * y * s[3]) / (dny * dny);
            snr = sig / sqrt(s[3]);
            x += (double)R->xs;
            y += (double)R->ys;
            ring_sig = s[8];
        } else {
            x = y = NAN;
        }
    }

    /* status, the first that applies (centroid.h) */
    int st = SW_CMB_OK;
    if (!(sig > 0.0) || !isfinite(x) || !isfinite(y)) {
        st = SW_CMB_EMPTY;
    } else {
        const double ex = x - R->rx, ey = y - R->ry;
        const double x0 = (double)R->xs - 0.5, x1 = (double)(R->xs + w) - 0.5;
        const double y0 = (double)R->ys - 0.5, y1 = (double)(R->ys + h) - 0.5;
        const double dedge = fmin(fmin(x - x0, x1 - x), fmin(y - y0, y1 - y));
        if (P->min_snr > 0.0 && snr < P->min_snr)
            st = SW_CMB_FAINT; /* first: the geometry of a noise-dominated spot means little */
        else if (left || (P->max_shift > 0.0 && sqrt(ex * ex + ey * ey) > P->max_shift) ||
                 (P->peak_border && P->method != SW_CMB_CORR && peak_ring))
            st = SW_CMB_LEFT;
        else if ((P->edge_px > 0.0 && dedge < P->edge_px) ||
                 (P->edge_frac > 0.0 && P->method != SW_CMB_CORR && ring_sig > P->edge_frac * sig))
            st = SW_CMB_CUT;
        else if (R->sat)
            st = SW_CMB_SATURATED;
    }
    o->status = st;
    o->valid = st == SW_CMB_OK || (st == SW_CMB_SATURATED && !P->drop);
    if (o->valid) {
        o->x = x;
        o->y = y;
        o->vx = vx;
        o->vy = vy;
        o->snr = snr;
    }
}

/*
 * One lenslet: the first pass over the region (R->v), then sw_cmb_conclude.
 */
SW_CMB_FN void sw_cmb_measure(const sw_cmb_params *P, const sw_cmb_region *R, sw_cmb_out *o)
{
    sw_cmb_scan A;
    sw_cmb_scan_init(P, &A);
    SW_CMB_EACH(R, q, i, j)
    {
        sw_cmb_scan_px(P, &A, R->v[sw_cmb_ix(R, q)], q, i, j, R->w, R->h);
    }
    sw_cmb_conclude(P, R, &A, o);
}

#endif

/*
 * The refinement of one spot (refine.h), written once for both backends. The including file
 * says how the pixels of a stamp are shared out and summed:
 *   SW_RS_FN            function qualifiers
 *   SW_RS_LANE, SW_RS_LANES   this worker's number and the workers on one spot
 *                       (CPU: 0 and 1; GPU: the warp's lane and 32)
 *   SW_RS_SUM(p, n)     replaces the n doubles (or floats) at p by their sum over the workers, in
 *                       every worker
 *   SW_RS_MAX(p)        likewise (the maximum) for one double
 *   SW_RS_UMIN(p), SW_RS_UMAX(p), SW_RS_USUM(p)  likewise for one uint32_t (min, max, sum)
 *   SW_RS_USCAN(p)      replaces the uint32_t at p by the sum of those of the workers before
 *                       this one (an exclusive prefix sum; 0 in the first)
 *   SW_RS_UINC(p)       adds 1 to the shared uint32_t *p (atomically where workers share it)
 *   SW_RS_SLOT(ok, n)   a compaction step that every worker reaches together: the workers whose
 *                       ok is non-zero get the slots *n, *n + 1, ... (in worker order; the
 *                       return value), and *n grows by their number in every worker
 *   SW_RS_ADD(p, v)     adds v to the shared double *p (atomically where workers share it)
 *   SW_RS_SYNC()        makes shared scratch written by one worker visible to the others
 * Every worker runs the whole routine; the decisions (refine_model.h) are taken on summed values
 * that every worker holds, so all of them take the same path.
 */
#ifndef SW_REFINE_SPOT_H
#define SW_REFINE_SPOT_H

#include "find/refine_model.h"

/* Annulus values kept in the scratch; a larger annulus is read from the frame on every pass.
 * The including file may set a smaller number (less shared memory per spot on the GPU). */
#ifndef SW_RS_ANNULUS_KEEP
#define SW_RS_ANNULUS_KEEP 1024
#endif

/* Stamp pixels the fit keeps in the scratch (13 x 13: the automatic radius of a spot whose
 * bounding box is at most 7 px wide); with the annulus' keys in a union, so no larger. */
#ifndef SW_RS_STAMP_KEEP
#define SW_RS_STAMP_KEEP 169
#endif

/* The median is selected by digits of 8 bits: a histogram of 256 counts per digit. */
#define SW_RS_DIGIT_BITS 8
#define SW_RS_DIGITS     256

/* Scratch for one spot: the annulus' keys and a digit's histogram (first), then the fit's
 * per-column and per-row factors or the radial bins. */
typedef struct sw_rs_scratch {
    union {
        struct {
            uint32_t keys[SW_RS_ANNULUS_KEEP];
            uint32_t hist[SW_RS_DIGITS]; /* the median's selection: one digit's counts */
        } a;
        struct {
            float ex[SW_RM_SIDE], dex[SW_RM_SIDE], dsx[SW_RM_SIDE];
            float ey[SW_RM_SIDE], dey[SW_RM_SIDE], dsy[SW_RM_SIDE];
            /* the fit's edge values (sw_rm_edge_f): erfc and phi at the columns' and rows' edges */
            float erfx[SW_RM_SIDE + 1], phix[SW_RM_SIDE + 1];
            float erfy[SW_RM_SIDE + 1], phiy[SW_RM_SIDE + 1];
            float wx[SW_RM_SIDE], wy[SW_RM_SIDE]; /* the window's column and row factors */
            /* the fit's stamp, read from the frame once (stamps of at most SW_RS_STAMP_KEEP
             * pixels; larger ones are read on every pass) */
            sw_rm_fpix pix[SW_RS_STAMP_KEEP];
            double bins[SW_RM_BINS];
            /* the fit's state: kept and stepped by worker 0 (so that the lanes of a warp do not
             * each hold it in registers), read by all after a sync */
            sw_rm_lm lm;
            int32_t done;
        } s;
    } u;
} sw_rs_scratch;

/* What the plan tells every spot. */
typedef struct sw_rs_config {
    int32_t method, background;
    int32_t annulus_in, annulus_out; /* 0: from the stamp radius */
    int32_t max_iter;
    double clip_sigma;
    double beta; /* MOFFAT's exponent */
} sw_rs_config;

/* The key of annulus value j: from the scratch when kept, else pixel j of the box. */
SW_RS_FN int sw_rs_annulus_at(const sw_rm_frame *f, const sw_rm_stamp *box, const uint32_t *kept,
                              int32_t j, int32_t cx, int32_t cy, int32_t rin, int32_t rout,
                              uint32_t *key)
{
    if (kept) {
        *key = kept[j];
        return 1;
    }
    return sw_rm_annulus_key(f, box, j, cx, cy, rin, rout, key);
}

/* The keys of a frame type's finite values: [*lo, *hi] (f32: -inf .. +inf). */
SW_RS_FN void sw_rs_key_range(sw_pixel_type t, uint32_t *lo, uint32_t *hi)
{
    *lo = t == SW_PIX_F32 ? 0x007fffffu : 0u;
    *hi = t == SW_PIX_U8    ? 0xffu
          : t == SW_PIX_U16 ? 0xffffu
          : t == SW_PIX_U32 ? 0xffffffffu
                            : 0xff800000u;
}

/* The smallest key whose value v - bias is at least `bound` (upper: the largest key whose value
 * is at most `bound`): for f32 by bisection over the type's finite keys, on which v is monotonic.
 * The range [smallest, largest] is empty when the first exceeds the second. */
SW_RS_FN int sw_rs_key_in(const sw_rm_frame *f, uint32_t key, double bound, int upper)
{
    const double v = sw_rm_key_value(f->type, key) - f->bias;
    return upper ? v <= bound : v >= bound;
}

SW_RS_FN uint32_t sw_rs_key_bound(const sw_rm_frame *f, double bound, int upper)
{
    uint32_t a, b; /* the answer lies in [a, b] */
    sw_rs_key_range(f->type, &a, &b);
    if (f->type != SW_PIX_F32) {
        /* whole numbers: the key is the value, v = key - bias; from the nearest whole number,
         * a step or two settles the rounding of key - bias */
        const double t = bound + f->bias;
        uint32_t k = !(t > (double)a) ? a
                     : t >= (double)b ? b
                                      : (uint32_t)(upper ? floor(t) : ceil(t));
        if (upper) {
            while (k < b && sw_rs_key_in(f, k + 1u, bound, 1))
                ++k;
            while (k > a && !sw_rs_key_in(f, k, bound, 1))
                --k;
        } else {
            while (k > a && sw_rs_key_in(f, k - 1u, bound, 0))
                --k;
            while (k < b && !sw_rs_key_in(f, k, bound, 0))
                ++k;
        }
        return k;
    }
    while (a < b) {
        if (upper) {
            const uint32_t m = a + (b - a) / 2u + 1u; /* > a */
            if (sw_rm_key_value(f->type, m) - f->bias <= bound)
                a = m;
            else
                b = m - 1u;
        } else {
            const uint32_t m = a + (b - a) / 2u; /* < b */
            if (sw_rm_key_value(f->type, m) - f->bias >= bound)
                b = m;
            else
                a = m + 1u;
        }
    }
    return a;
}

/*
 * The sigma-clipped median of the annulus r_in <= r < r_out about pixel (cx, cy)
 * (refine_model.h, "annulus background"). 0 when fewer than 8 valid pixels remain.
 *
 * The values in [lo, hi] are the keys in [klo, khi] (sw_rs_key_bound), which share their bits
 * above the highest bit in which klo and khi differ; the median's key is selected 8 bits at a
 * time from there, and the clip pass's first histogram is counted in the same pass over the keys
 * as the count, mean and standard deviation (a pass with [lo, hi] = median -+ 3 sd of sky noise
 * spans a few hundred keys: one pass over the keys for the whole clip pass). For 8- and 16-bit
 * frames the sums are of the keys, whole numbers added exactly (a worker's in 64 bits, the
 * workers' in double, below 2^53); for the others of v = value - bias in double.
 */
SW_RS_FN int sw_rs_annulus(const sw_rm_frame *f, int32_t cx, int32_t cy, int32_t rin, int32_t rout,
                           double clip, sw_rs_scratch *sc, double *level)
{
    sw_rm_stamp box;
    sw_rm_stamp_make(f, (double)cx, (double)cy, rout, &box);
    const int32_t count = sw_rm_stamp_count(&box);
    /* gather the valid annulus pixels' keys (in raster order) */
    int32_t kept_n = 0;
    uint32_t kmin = 0xffffffffu, kmax = 0u;                          /* the valid keys' range */
    const int whole = f->type == SW_PIX_U8 || f->type == SW_PIX_U16; /* exact integer sums */
    /* 8- and 16-bit values read as whole numbers: v >= overload is v >= ceil(overload) */
    const uint32_t over = f->overload > 65535.0 ? 65536u : (uint32_t)ceil(f->overload);
    sw_rm_walk at;
    sw_rm_walk_start(&box, SW_RS_LANE, SW_RS_LANES, &at);
    for (int32_t k0 = 0; k0 < count; k0 += SW_RS_LANES, sw_rm_walk_next(&box, &at)) {
        const int32_t k = k0 + SW_RS_LANE;
        uint32_t key = 0;
        int ok = 0;
        if (k < count && whole) {
            if (sw_rm_in_annulus(at.x, at.y, cx, cy, rin, rout)) {
                const void *row = sw_rm_row(f, at.y);
                key = f->type == SW_PIX_U8 ? ((const uint8_t *)row)[at.x]
                                           : ((const uint16_t *)row)[at.x];
                ok = key < over && (!f->mask || f->mask[(size_t)at.y * f->width + at.x]);
            }
        } else if (k < count) {
            ok = sw_rm_annulus_key_at(f, at.x, at.y, cx, cy, rin, rout, &key);
        }
        const int32_t slot = SW_RS_SLOT(ok, &kept_n);
        if (ok && slot < SW_RS_ANNULUS_KEEP)
            sc->u.a.keys[slot] = key;
        if (ok) {
            kmin = key < kmin ? key : kmin;
            kmax = key > kmax ? key : kmax;
        }
    }
    SW_RS_UMIN(&kmin);
    SW_RS_UMAX(&kmax);
    SW_RS_SYNC();
    if (kept_n < 8)
        return 0; /* the first clip pass would find fewer than 8 */
    const uint32_t *kept = kept_n <= SW_RS_ANNULUS_KEEP ? sc->u.a.keys : NULL;
    const int32_t n = kept ? kept_n : count;
    /* the keys of the values in [lo, hi]: at first every valid key, [kmin, kmax] (not the type's
     * whole range: its top digit would put a sky's keys in one histogram bin, every lane's count
     * on one shared counter) */
    uint32_t klo = kmin, khi = kmax;
    double med = 0.0;
    for (int pass = 0; pass < SW_RM_CLIP_PASSES; ++pass) {
        /* the keys in [klo, khi] share the bits above `top` */
        const int top = klo == khi ? -1 : sw_rm_top_bit(klo ^ khi);
        uint32_t above = top < 0     ? ~0u
                         : top >= 31 ? 0u
                                     : ~((2u << top) - 1u); /* the prefix's bits */
        uint32_t prefix = klo & above, need = 0;
        double s[3] = {0.0, 0.0, 0.0};
        /* digit by digit from the top: bits [shift, hb] of the keys under the prefix; the first
         * round also counts and sums the keys in [klo, khi] */
        for (int hb = top, first = 1; first || hb >= 0; hb -= SW_RS_DIGIT_BITS, first = 0) {
            const int shift = hb + 1 > SW_RS_DIGIT_BITS ? hb + 1 - SW_RS_DIGIT_BITS : 0;
            const uint32_t dmask = hb >= 0 ? (2u << (hb - shift)) - 1u : 0u;
            uint32_t *hist = sc->u.a.hist;
            if (hb >= 0) {
                for (int32_t q = SW_RS_LANE; q < SW_RS_DIGITS; q += SW_RS_LANES)
                    hist[q] = 0;
                SW_RS_SYNC();
            }
            uint64_t i0 = 0, i1 = 0, i2 = 0; /* whole-number sums: count, sum, sum of squares */
            for (int32_t j = SW_RS_LANE; j < n; j += SW_RS_LANES) {
                uint32_t key;
                if (!sw_rs_annulus_at(f, &box, kept, j, cx, cy, rin, rout, &key))
                    continue;
                if (key < klo || key > khi || (key & above) != prefix)
                    continue;
                if (first) {
                    if (whole) {
                        i0++;
                        i1 += key;
                        i2 += (uint64_t)key * key;
                    } else {
                        const double v = sw_rm_key_value(f->type, key) - f->bias;
                        s[0] += 1.0;
                        s[1] += v;
                        s[2] += v * v;
                    }
                }
                if (hb >= 0)
                    SW_RS_UINC(&hist[(key >> shift) & dmask]);
            }
            if (first) {
                if (whole) {
                    s[0] = (double)i0;
                    s[1] = (double)i1;
                    s[2] = (double)i2;
                }
                SW_RS_SUM(s, 3);
                if (s[0] < 8.0) {
                    SW_RS_SYNC(); /* the scratch's keys are read no more */
                    return 0;
                }
                need = (uint32_t)ceil(0.5 * s[0]);
            }
            if (hb < 0)
                break; /* one key left: klo */
            SW_RS_SYNC();
            /* each worker sums its run of digits; the one whose run holds the need-th key finds
             * the digit in it, and the sums give every worker that digit */
            const int32_t run = SW_RS_DIGITS / SW_RS_LANES, firstq = SW_RS_LANE * run;
            uint32_t part = 0;
            for (int32_t q = 0; q < run; ++q)
                part += hist[firstq + q];
            uint32_t before = part, digit = 0, left = 0;
            SW_RS_USCAN(&before);
            if (before < need && need <= before + part) {
                uint32_t c = before;
                for (int32_t q = 0; q < run; ++q) {
                    if (c + hist[firstq + q] >= need) {
                        digit = (uint32_t)(firstq + q);
                        left = need - c;
                        break;
                    }
                    c += hist[firstq + q];
                }
            }
            SW_RS_USUM(&digit);
            SW_RS_USUM(&left);
            need = left;
            prefix |= digit << shift;
            above |= dmask << shift;
            SW_RS_SYNC(); /* the counts are read no more */
        }
        /* the variance of v = key - bias is that of the keys */
        const double mean = s[1] / s[0], var = s[2] / s[0] - mean * mean;
        med = sw_rm_key_value(f->type, prefix) - f->bias;
        const double sd = var > 0.0 ? sqrt(var) : 0.0;
        klo = sw_rs_key_bound(f, med - clip * sd, 0);
        khi = sw_rs_key_bound(f, med + clip * sd, 1);
        if (klo > khi) {
            SW_RS_SYNC();
            return 0; /* cannot happen: the median itself lies in [lo, hi] */
        }
    }
    SW_RS_SYNC();
    *level = med;
    return 1;
}

/* Marks a result as failed: the input position and variance stay. */
SW_RS_FN void sw_rs_fail(sw_refine_result *out)
{
    out->flags |= SW_REFINE_FAILED;
}

/* SExtractor's windowed centroid (refine.h, XWIN). */
SW_RS_FN void sw_rs_xwin(const sw_rm_frame *f, const sw_refine_seed *seed, double level,
                         const sw_rm_stamp *st, sw_rs_scratch *sc, sw_refine_result *out)
{
    const int32_t nb = 2 * st->radius < SW_RM_BINS ? 2 * st->radius : SW_RM_BINS;
    for (int32_t k = SW_RS_LANE; k < SW_RM_BINS; k += SW_RS_LANES)
        sc->u.s.bins[k] = 0.0;
    SW_RS_SYNC();
    const int32_t count = sw_rm_stamp_count(st);
    sw_rm_walk at;
    sw_rm_walk_start(st, SW_RS_LANE, SW_RS_LANES, &at);
    for (int32_t k = SW_RS_LANE; k < count; k += SW_RS_LANES, sw_rm_walk_next(st, &at)) {
        const int32_t x = at.x, y = at.y;
        double d, b;
        if (!sw_rm_sample(f, x, y, level, &d, &b))
            continue;
        int bin = sw_rm_radial_bin(x, y, seed->x, seed->y, 0.5);
        if (bin >= 0 && bin < nb)
            SW_RS_ADD(&sc->u.s.bins[bin], d);
    }
    SW_RS_SYNC();
    double s = sw_rm_window_sigma(sc->u.s.bins, nb, 0.5);
    SW_RS_SYNC();
    if (!(s > 0.0)) {
        sw_rs_fail(out);
        return;
    }
    const double smax = 0.25 * SW_REFINE_MAX_RADIUS;
    s = s < 0.3 ? 0.3 : (s > smax ? smax : s);
    int32_t rw = (int32_t)ceil(4.0 * s);
    rw = rw > SW_REFINE_MAX_RADIUS ? SW_REFINE_MAX_RADIUS : rw;
    double xw = seed->x, yw = seed->y;
    sw_rm_win a;
    double tot[5] = {0.0, 0.0, 0.0, 0.0, 0.0}; /* the pass's sw, swx, swy, svx, svy */
    int32_t it = 0, edge = 0;
    for (int pass = 0; pass <= SW_RM_XWIN_IT; ++pass) {
        sw_rm_stamp ws;
        sw_rm_stamp_make(f, xw, yw, rw, &ws);
        edge |= ws.edge;
        memset(&a, 0, sizeof(a));
        const int32_t n = sw_rm_stamp_count(&ws), ww = ws.x1 - ws.x0, wh = ws.y1 - ws.y0;
        /* the window's column and row factors in one round of the workers, in float and
         * stamp-relative (column i's offset is (i - cx) - (xw - cx)) */
        const float rx = (float)(xw - (double)ws.cx), ry = (float)(yw - (double)ws.cy);
        const float fs = (float)s, fl = (float)level;
        for (int32_t k = SW_RS_LANE; k < ww + wh; k += SW_RS_LANES) {
            if (k < ww)
                sc->u.s.wx[k] = sw_rm_win_axis((float)(ws.x0 + k - ws.cx) - rx, fs);
            else
                sc->u.s.wy[k - ww] = sw_rm_win_axis((float)(ws.y0 + k - ww - ws.cy) - ry, fs);
        }
        SW_RS_SYNC();
        sw_rm_walk px;
        sw_rm_walk_start(&ws, SW_RS_LANE, SW_RS_LANES, &px);
        for (int32_t k = SW_RS_LANE; k < n; k += SW_RS_LANES, sw_rm_walk_next(&ws, &px)) {
            const int32_t x = px.x, y = px.y;
            sw_rm_win_pixel(f, x, y, fl, (float)(x - ws.cx) - rx, (float)(y - ws.cy) - ry, fs,
                            sc->u.s.wx[x - ws.x0], sc->u.s.wy[y - ws.y0], &a);
        }
        SW_RS_SYNC(); /* the factors are read no more in this pass */
        /* the sums in float (a worker's and the workers' totals), then double */
        float v[7] = {a.sw, a.swx, a.swy, a.svx, a.svy, (float)a.n, (float)a.masked};
        SW_RS_SUM(v, 7);
        tot[0] = v[0];
        tot[1] = v[1];
        tot[2] = v[2];
        tot[3] = v[3];
        tot[4] = v[4];
        a.n = (int32_t)v[5];
        a.masked = (int32_t)v[6];
        if (!(tot[0] > 0.0) || a.n < 3) {
            sw_rs_fail(out);
            return;
        }
        if (pass == SW_RM_XWIN_IT)
            break; /* the sums at the final position: the error bars */
        const double dx = 2.0 * tot[1] / tot[0], dy = 2.0 * tot[2] / tot[0];
        xw += dx;
        yw += dy;
        it++;
        if (fabs(xw - seed->x) > st->radius || fabs(yw - seed->y) > st->radius) {
            sw_rs_fail(out);
            return;
        }
        if (dx * dx + dy * dy < 2e-4 * 2e-4)
            pass = SW_RM_XWIN_IT - 1; /* converged: one more pass for the error bars */
    }
    out->x = xw;
    out->y = yw;
    out->x_var = 4.0 * tot[3] / (tot[0] * tot[0]);
    out->y_var = 4.0 * tot[4] / (tot[0] * tot[0]);
    out->flux = tot[0];
    out->sigma = s;
    out->npix = a.n;
    out->iterations = it;
    if (edge)
        out->flags |= SW_REFINE_EDGE;
    if (a.masked)
        out->flags |= SW_REFINE_MASKED;
}

/* The PSF fit (refine.h, GAUSS and MOFFAT). */
SW_RS_FN void sw_rs_fit(const sw_rm_frame *f, const sw_rs_config *c, const sw_refine_seed *seed,
                        double level, const sw_rm_stamp *st, sw_rs_scratch *sc,
                        sw_refine_result *out)
{
    const int moffat = c->method == SW_REFINE_MOFFAT;
    const int32_t count = sw_rm_stamp_count(st);
    /* the starting point: sums over the stamp and its border; the stamp kept when it fits */
    sw_rm_fpix *kept = count <= SW_RS_STAMP_KEEP ? sc->u.s.pix : NULL;
    const float fl = (float)level;
    double s[5] = {0.0, 0.0, 0.0, 0.0, 0.0}; /* sum d, border sum, border n, n, masked */
    double peak = -INFINITY;
    sw_rm_walk walk0; /* this worker's first pixel and step, for every pass */
    sw_rm_walk_start(st, SW_RS_LANE, SW_RS_LANES, &walk0);
    sw_rm_walk it = walk0;
    for (int32_t k = SW_RS_LANE; k < count; k += SW_RS_LANES, sw_rm_walk_next(st, &it)) {
        const int32_t x = it.x, y = it.y;
        sw_rm_fpix px;
        sw_rm_fpix_make(f, x, y, fl, &px);
        if (kept)
            kept[k] = px;
        if (px.d != px.d) {
            s[4] += 1.0;
            continue;
        }
        const double d = (double)px.d;
        s[0] += d;
        s[3] += 1.0;
        peak = fmax(peak, d);
        if (x == st->cx - st->radius || x == st->cx + st->radius || y == st->cy - st->radius ||
            y == st->cy + st->radius) {
            s[1] += d;
            s[2] += 1.0;
        }
    }
    SW_RS_SUM(s, 5);
    SW_RS_MAX(&peak);
    double p0[SW_RM_NPAR];
    if (!sw_rm_fit_start(seed->x, seed->y, s[0], peak, s[1], (int32_t)s[2], (int32_t)s[3],
                         st->radius, c->method, c->beta, p0)) {
        sw_rs_fail(out);
        return;
    }
    sw_rm_lm *lm = &sc->u.s.lm;
    if (SW_RS_LANE == 0)
        sw_rm_lm_init(lm, p0);
    SW_RS_SYNC();
    const int32_t w = st->x1 - st->x0, h = st->y1 - st->y0;
    for (;;) {
        double p[SW_RM_NPAR];
        for (int i = 0; i < SW_RM_NPAR; ++i)
            p[i] = lm->trial[i];
        /* GAUSS: the columns' and the rows' factors in float, from their edges' erfc and phi
         * (stamp-relative: the left edge of column i less the star's x is (i - cx) - 1/2 -
         * (x - cx)); a round of the workers for the edges, one for the factors */
        const float rx = (float)(p[0] - (double)st->cx), ry = (float)(p[1] - (double)st->cy);
        sw_rm_width wd;
        sw_rm_width_make((float)p[3], &wd);
        if (!moffat) {
            float *erfx = sc->u.s.erfx, *phix = sc->u.s.phix, *erfy = sc->u.s.erfy,
                  *phiy = sc->u.s.phiy;
            for (int32_t k = SW_RS_LANE; k < w + h + 2; k += SW_RS_LANES) {
                if (k <= w)
                    sw_rm_edge_f((float)(st->x0 + k - st->cx) - 0.5f - rx, &wd, &erfx[k], &phix[k]);
                else
                    sw_rm_edge_f((float)(st->y0 + k - w - 1 - st->cy) - 0.5f - ry, &wd,
                                 &erfy[k - w - 1], &phiy[k - w - 1]);
            }
            SW_RS_SYNC();
            for (int32_t k = SW_RS_LANE; k < w + h; k += SW_RS_LANES) {
                if (k < w)
                    sw_rm_axis_f((float)(st->x0 + k - st->cx) - 0.5f - rx, erfx[k], phix[k],
                                 erfx[k + 1], phix[k + 1], &wd, &sc->u.s.ex[k], &sc->u.s.dex[k],
                                 &sc->u.s.dsx[k]);
                else
                    sw_rm_axis_f((float)(st->y0 + k - w - st->cy) - 0.5f - ry, erfy[k - w],
                                 phiy[k - w], erfy[k - w + 1], phiy[k - w + 1], &wd,
                                 &sc->u.s.ey[k - w], &sc->u.s.dey[k - w], &sc->u.s.dsy[k - w]);
            }
        }
        SW_RS_SYNC();
        /* the pixels' sums in float (sw_rm_fit_pixel; a worker's and the workers' totals), the
         * Levenberg-Marquardt step on them in double */
        sw_rm_facc fa;
        memset(&fa, 0, sizeof(fa));
        const float F = (float)p[2], B = (float)p[4];
        sw_rm_walk px = walk0;
        for (int32_t k = SW_RS_LANE; k < count; k += SW_RS_LANES, sw_rm_walk_next(st, &px)) {
            const int32_t x = px.x, y = px.y;
            sw_rm_fpix q;
            if (kept)
                q = kept[k];
            else
                sw_rm_fpix_make(f, x, y, fl, &q);
            if (q.d != q.d)
                continue;
            float P, dPx, dPy, dPs;
            if (moffat) {
                /* the quadrature in double (its nodes' sums), the pixel's sums in float */
                double mP, mx, my, ma;
                sw_rm_moffat_pixel((double)x - p[0], (double)y - p[1], p[3], c->beta, &mP, &mx, &my,
                                   &ma);
                P = (float)mP;
                dPx = (float)mx;
                dPy = (float)my;
                dPs = (float)ma;
            } else {
                const int32_t i = x - st->x0, j = y - st->y0;
                const float ex = sc->u.s.ex[i], ey = sc->u.s.ey[j];
                P = ex * ey;
                dPx = sc->u.s.dex[i] * ey;
                dPy = ex * sc->u.s.dey[j];
                dPs = sc->u.s.dsx[i] * ey + ex * sc->u.s.dsy[j];
            }
            sw_rm_fit_pixel(f, F, B, &q, P, dPx, dPy, dPs, &fa);
        }
        SW_RS_SYNC();
        float v[SW_RM_NA + SW_RM_NPAR + 2];
        for (int i = 0; i < SW_RM_NA; ++i)
            v[i] = fa.a[i];
        for (int i = 0; i < SW_RM_NPAR; ++i)
            v[SW_RM_NA + i] = fa.g[i];
        v[SW_RM_NA + SW_RM_NPAR] = fa.chi2;
        v[SW_RM_NA + SW_RM_NPAR + 1] = (float)fa.n;
        SW_RS_SUM(v, SW_RM_NA + SW_RM_NPAR + 2);
        double merit = (double)fa.merit - (double)fa.merit_c; /* the workers' in double */
        SW_RS_SUM(&merit, 1);
        sw_rm_acc acc;
        for (int i = 0; i < SW_RM_NA; ++i)
            acc.a[i] = v[i];
        for (int i = 0; i < SW_RM_NPAR; ++i)
            acc.g[i] = v[SW_RM_NA + i];
        acc.chi2 = v[SW_RM_NA + SW_RM_NPAR];
        acc.n = (int32_t)v[SW_RM_NA + SW_RM_NPAR + 1];
        acc.merit = merit;
        acc.masked = 0;
        if (SW_RS_LANE == 0)
            sc->u.s.done = sw_rm_lm_next(lm, &acc, c->max_iter);
        SW_RS_SYNC();
        if (sc->u.s.done)
            break;
        SW_RS_SYNC(); /* all have read done before worker 0 writes it again */
    }
    double step[SW_RM_NPAR] = {0}, inv[SW_RM_NPAR * SW_RM_NPAR];
    if (lm->failed || !lm->have || !sw_rm_solve(lm->acc.a, 0.0, lm->acc.g, step, inv)) {
        sw_rs_fail(out);
        return;
    }
    const double *b = lm->best;
    if (!(b[2] > 0.0) || !(b[3] > 0.0) ||
        b[3] * sw_rm_width_scale(c->method, c->beta) > st->radius ||
        fabs(b[0] - (double)st->cx) > st->radius || fabs(b[1] - (double)st->cy) > st->radius ||
        !(inv[0] > 0.0) || !(inv[6] > 0.0)) {
        sw_rs_fail(out);
        return;
    }
    out->x = b[0];
    out->y = b[1];
    out->x_var = inv[0];
    out->y_var = inv[SW_RM_NPAR + 1];
    out->flux = b[2];
    out->flux_var = inv[2 * SW_RM_NPAR + 2];
    out->sigma = b[3];
    out->background += b[4];
    out->chi2 = lm->acc.chi2;
    out->npix = lm->acc.n;
    out->iterations = lm->iterations;
    if (!lm->converged)
        out->flags |= SW_REFINE_MAXITER;
    if (st->edge)
        out->flags |= SW_REFINE_EDGE;
    if (s[4] > 0.0)
        out->flags |= SW_REFINE_MASKED;
}

/* One spot: the stamp, the background, the method. out is filled completely. */
SW_RS_FN void sw_rs_refine(const sw_rm_frame *f, const sw_rs_config *c, const sw_refine_seed *seed,
                           sw_rs_scratch *sc, sw_refine_result *out)
{
    memset(out, 0, sizeof(*out));
    out->x = seed->x;
    out->y = seed->y;
    if (!isfinite(seed->x) || !isfinite(seed->y) || seed->x < -0.5 ||
        seed->x >= (double)f->width - 0.5 || seed->y < -0.5 || seed->y >= (double)f->height - 0.5) {
        sw_rs_fail(out);
        return;
    }
    sw_rm_stamp st;
    sw_rm_stamp_make(f, seed->x, seed->y, seed->radius, &st);
    double level = 0.0;
    if (c->background == SW_BACKGROUND_ANNULUS) {
        int32_t rin = c->annulus_in > 0 ? c->annulus_in : seed->radius + 2;
        int32_t rout = c->annulus_out > 0 ? c->annulus_out : seed->radius + 8;
        if (!sw_rs_annulus(f, st.cx, st.cy, rin, rout, c->clip_sigma, sc, &level)) {
            sw_rs_fail(out);
            return;
        }
        out->background = level;
    } else if (f->mesh) {
        out->background = sw_rm_mesh_at(f, st.cx, st.cy);
    }
    if (c->method == SW_REFINE_XWIN)
        sw_rs_xwin(f, seed, level, &st, sc, out);
    else
        sw_rs_fit(f, c, seed, level, &st, sc, out);
    if (out->flags & SW_REFINE_FAILED) {
        out->x = seed->x;
        out->y = seed->y;
    }
}

#endif

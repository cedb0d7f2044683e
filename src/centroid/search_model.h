/*
 * The arithmetic of the centroid search (search.h; seed 001 Sec. 3.2.1, Algorithms 1-2), written
 * once for the CPU (search.c, search_reich.c) and the GPU (search_cuda.cu, search_reich_cuda.cu).
 * The C files are compiled with -ffp-contract=off and the .cu files with -fmad=false, and every
 * double expression below is written once and used on both sides, so that the CPU and the GPU
 * give the same centroids to the last bit.
 *
 * One centre-of-mass step of side s at (cx, cy) (search.h, Algorithm 2 lines 9-19):
 *
 * 1. The window (sw_sm_window_make). a = cx - s/2, b = cx + s/2 clipped to [-0.5, width - 0.5],
 *    c, d likewise in y. Empty when !(a < b) or !(c < d). Its pixel columns are
 *    i0 = floor(a + 0.5) .. i1 = ceil(b + 0.5) - 1 (the first and last with a positive overlap),
 *    rows j0 .. j1 likewise. Edge weights wx0 = min(i0 + 0.5, b) - a, wx1 = b - max(i1 - 0.5, a)
 *    (i0 == i1: one column of weight b - a), interior columns 1; the middles of the parts inside,
 *    relative to i0: mx0 = (a + min(i0 + 0.5, b)) / 2 - i0, mx1 = (max(i1 - 0.5, a) + b) / 2 - i0,
 *    interior column i: i - i0. Rows likewise (wy0, wy1, my0, my1, relative to j0).
 *
 * 2. The lanes (sw_sm_lane_sums). The window's column offsets c = i - i0 are split over 32 lanes:
 *    lane t owns c = 4t + q + 128r (q = 0..3, r = 0, 1, ...), the seed's 4 columns per thread.
 *    For its 4 columns at one r the lane walks all rows j0..j1 and keeps per column the exact
 *    sums over the interior rows j0 < j < j1 of v and of (j - j0) v (u8 and u16: 32 and 64
 *    bits, sw_sm_lane_int; f32: doubles added row by row in increasing j), the two edge-row values
 * and the minimum of all the lane's pixels. Then per column, in this order (sw_sm_col_finish): col0
 * = A + wy0 v(j0) + wy1 v(j1)                  (j0 == j1: A + wy0 v(j0)) coly = B + wy0 v(j0) my0 +
 * wy1 v(j1) my1          (j0 == j1: B + wy0 v(j0) my0) and the lane adds, over its columns in
 * increasing c (sw_sm_lane_add): S0 += wx(c) col0,   Sx += wx(c) mx(c) col0,   Sy += wx(c) coly.
 *
 * 3. The reduction: the lanes' (S0, Sx, Sy, m) are combined by the butterfly
 *        for o = 16, 8, 4, 2, 1:  v[t] = v[t] + v[t ^ o]   (m[t] = min(m[t], m[t ^ o]))
 *    the GPU with __shfl_xor_sync, the CPU on a 32-entry array (sw_sm_butterfly); every lane
 *    ends with the same totals and lane 0's are the result.
 *
 * 4. The window minimum, subtracted analytically (sw_sm_finish; the integrals of the constant m
 *    over the window):  W = (b - a)(d - c),  Mx = (d - c)((b - i0)^2 - (a - i0)^2) / 2,
 *    My = (b - a)((d - j0)^2 - (c - j0)^2) / 2;  S0' = S0 - m W,  Sx' = Sx - m Mx,
 *    Sy' = Sy - m My. A NaN / Inf pixel makes the sums non-finite (SW_SM_STEP_NONFINITE);
 *    flat (SW_SM_STEP_FLAT) when !(S0' > 1e-9 (|S0| + |m| W)); else the new centre is
 *    (i0 + Sx' / S0', j0 + Sy' / S0') and the intensity S0'.
 *
 * A spot (sw_sm_spot_*): PAPYCS takes the steps of sides smax, smax - 1, ..., min_window_px
 * (CoM: window_px only) from the start position, smax = window_px or, with the neighbour window,
 * sw_sm_first_side; a flat or non-finite step keeps the centre and the search goes on. The spot
 * is OUTSIDE for a non-finite start or an empty window (the search stops there), FLAT when the
 * last step was flat or any step met a NaN / Inf pixel (search.h: "a NaN / Inf pixel in a
 * window"), OK otherwise, with the last centre and S0'.
 *
 * sw_sm_com_step computes one step serially, walking the 32 lanes and the butterfly exactly as a
 * warp does; on the GPU one thread may call it (Reichenbach's peaks, one thread per peak).
 */
#ifndef SW_SEARCH_MODEL_H
#define SW_SEARCH_MODEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "spotwave/core.h"
#include "spotwave/search.h"

#if defined(__CUDACC__)
#define SW_SM_FN __host__ __device__ static inline
#else
#define SW_SM_FN static inline
#endif

/* Loop unrolling on the GPU (several loads in flight per lane); nothing on the host. */
#if defined(__CUDA_ARCH__)
#define SW_SM_UNROLL      _Pragma("unroll")
#define SW_SM_UNROLL_ROWS _Pragma("unroll 4")
#else
#define SW_SM_UNROLL
#define SW_SM_UNROLL_ROWS
#endif

#define SW_SM_LANES 32                          /* lanes of a warp                      */
#define SW_SM_QUADS 4                           /* columns per lane and pass            */
#define SW_SM_PASS  (SW_SM_LANES * SW_SM_QUADS) /* columns per pass */

/* The outcome of one step. */
enum {
    SW_SM_STEP_FLAT = 0,      /* no signal above the window minimum: the centre stays    */
    SW_SM_STEP_OK = 1,        /* a new centre                                            */
    SW_SM_STEP_NONFINITE = 2, /* a NaN / Inf pixel in the window: the centre stays       */
    SW_SM_STEP_EMPTY = 3      /* the window lies outside the frame (or a NaN centre)     */
};

/* A window clipped to the frame (step 1 above). */
typedef struct sw_sm_window {
    double a, b, c, d;         /* clipped edges: x in [a, b], y in [c, d]            */
    int32_t i0, i1, j0, j1;    /* pixel columns i0..i1, rows j0..j1 (inclusive)      */
    double wx0, wx1, wy0, wy1; /* weights of the edge columns / rows                 */
    double mx0, mx1, my0, my1; /* middles of their parts inside, relative to i0 / j0 */
} sw_sm_window;

/* The four quantities of one lane (or, after the butterfly, of the window). */
typedef struct sw_sm_sums {
    double s0, sx, sy; /* sum w v, sum w v mx, sum w v my (mx, my relative to i0, j0)     */
    double m;          /* minimum of the pixels (+Inf for a lane without columns)           */
} sw_sm_sums;

SW_SM_FN double sw_sm_min(double a, double b)
{
    return a < b ? a : b;
}

SW_SM_FN double sw_sm_max(double a, double b)
{
    return a > b ? a : b;
}

/* Step 1: the window of side s centred at (cx, cy) clipped to the frame. Returns 0 when it is
 * empty (or a coordinate is NaN), 1 otherwise. */
SW_SM_FN int sw_sm_window_make(double cx, double cy, double s, int32_t width, int32_t height,
                               sw_sm_window *w)
{
    double h = s * 0.5;
    double a = sw_sm_max(cx - h, -0.5), b = sw_sm_min(cx + h, (double)width - 0.5);
    double c = sw_sm_max(cy - h, -0.5), d = sw_sm_min(cy + h, (double)height - 0.5);
    if (!(a < b) || !(c < d))
        return 0;
    /* The first and last pixels with a positive overlap; kept inside the frame and in order
     * against rounding of a + 0.5 next to a half-integer. */
    int32_t i0 = (int32_t)floor(a + 0.5), i1 = (int32_t)ceil(b + 0.5) - 1;
    int32_t j0 = (int32_t)floor(c + 0.5), j1 = (int32_t)ceil(d + 0.5) - 1;
    i0 = i0 < 0 ? 0 : (i0 > width - 1 ? width - 1 : i0);
    j0 = j0 < 0 ? 0 : (j0 > height - 1 ? height - 1 : j0);
    i1 = i1 < i0 ? i0 : (i1 > width - 1 ? width - 1 : i1);
    j1 = j1 < j0 ? j0 : (j1 > height - 1 ? height - 1 : j1);
    w->a = a;
    w->b = b;
    w->c = c;
    w->d = d;
    w->i0 = i0;
    w->i1 = i1;
    w->j0 = j0;
    w->j1 = j1;
    double xe0 = sw_sm_min((double)i0 + 0.5, b), xe1 = sw_sm_max((double)i1 - 0.5, a);
    double ye0 = sw_sm_min((double)j0 + 0.5, d), ye1 = sw_sm_max((double)j1 - 0.5, c);
    w->wx0 = xe0 - a;
    w->wx1 = b - xe1;
    w->wy0 = ye0 - c;
    w->wy1 = d - ye1;
    w->mx0 = (a + xe0) * 0.5 - (double)i0;
    w->mx1 = (xe1 + b) * 0.5 - (double)i0;
    w->my0 = (c + ye0) * 0.5 - (double)j0;
    w->my1 = (ye1 + d) * 0.5 - (double)j0;
    return 1;
}

/* The weight and the middle (relative to i0) of window column c = i - i0. */
SW_SM_FN void sw_sm_col_weight(const sw_sm_window *w, int32_t c, double *wx, double *mx)
{
    if (c == 0) {
        *wx = w->wx0;
        *mx = w->mx0;
    } else if (c == w->i1 - w->i0) {
        *wx = w->wx1;
        *mx = w->mx1;
    } else {
        *wx = 1.0;
        *mx = (double)c;
    }
}

/* Step 2: one column's weighted sums from its interior sums A (of v) and B (of (j - j0) v) and
 * its edge-row values v0 = v(j0), v1 = v(j1). */
SW_SM_FN void sw_sm_col_finish(const sw_sm_window *w, double A, double B, double v0, double v1,
                               double *col0, double *coly)
{
    if (w->j1 > w->j0) {
        *col0 = A + w->wy0 * v0 + w->wy1 * v1;
        *coly = B + w->wy0 * v0 * w->my0 + w->wy1 * v1 * w->my1;
    } else {
        *col0 = A + w->wy0 * v0;
        *coly = B + w->wy0 * v0 * w->my0;
    }
}

/* Step 2: a lane adds column c (weight wx, middle mx) to its sums. */
SW_SM_FN void sw_sm_lane_add(sw_sm_sums *s, double wx, double mx, double col0, double coly)
{
    s->s0 = s->s0 + wx * col0;
    s->sx = s->sx + wx * mx * col0;
    s->sy = s->sy + wx * coly;
}

/* Step 2, sw_sm_lane_add in two parts, for a backend that forms a column's products in one
 * thread and adds them in another (search_cuda.cu): the three products of column c ... */
SW_SM_FN void sw_sm_col_terms(double wx, double mx, double col0, double coly, double t[3])
{
    t[0] = wx * col0;
    t[1] = wx * mx * col0;
    t[2] = wx * coly;
}

/* ... and their sums: sw_sm_lane_add_terms(s, t) after sw_sm_col_terms(wx, mx, col0, coly, t)
 * rounds exactly as sw_sm_lane_add(s, wx, mx, col0, coly) (the same products, then the same
 * sums, no contraction). */
SW_SM_FN void sw_sm_lane_add_terms(sw_sm_sums *s, const double t[3])
{
    s->s0 = s->s0 + t[0];
    s->sx = s->sx + t[1];
    s->sy = s->sy + t[2];
}

/* Step 3: what lane t holds after one butterfly stage, from its own sums `own` and those of
 * lane t ^ o, `other` (the same on both backends; min: the other when smaller). */
SW_SM_FN sw_sm_sums sw_sm_combine(sw_sm_sums own, sw_sm_sums other)
{
    sw_sm_sums r;
    r.s0 = own.s0 + other.s0;
    r.sx = own.sx + other.sx;
    r.sy = own.sy + other.sy;
    r.m = other.m < own.m ? other.m : own.m;
    return r;
}

/* Step 3 on the CPU: the butterfly on 32 lanes' sums, in place; lane 0 holds the result. */
SW_SM_FN void sw_sm_butterfly(sw_sm_sums *lanes)
{
    for (int o = SW_SM_LANES / 2; o >= 1; o /= 2) {
        for (int t = 0; t < SW_SM_LANES; ++t) {
            if (t & o)
                continue;
            sw_sm_sums x = lanes[t], y = lanes[t ^ o];
            lanes[t] = sw_sm_combine(x, y);
            lanes[t ^ o] = sw_sm_combine(y, x);
        }
    }
}

/* Step 4: the minimum subtraction and the new centre. Returns SW_SM_STEP_OK (new centre and
 * intensity written), SW_SM_STEP_FLAT or SW_SM_STEP_NONFINITE (outputs untouched). */
SW_SM_FN int sw_sm_finish(const sw_sm_window *w, const sw_sm_sums *t, double *ncx, double *ncy,
                          double *s0)
{
    if (!isfinite(t->s0) || !isfinite(t->sx) || !isfinite(t->sy) || !isfinite(t->m))
        return SW_SM_STEP_NONFINITE;
    double ar = w->a - (double)w->i0, br = w->b - (double)w->i0;
    double cr = w->c - (double)w->j0, dr = w->d - (double)w->j0;
    double W = (w->b - w->a) * (w->d - w->c);
    double Mx = (w->d - w->c) * (br * br - ar * ar) * 0.5;
    double My = (w->b - w->a) * (dr * dr - cr * cr) * 0.5;
    double S0 = t->s0 - t->m * W;
    double Sx = t->sx - t->m * Mx;
    double Sy = t->sy - t->m * My;
    if (!(S0 > 1e-9 * (fabs(t->s0) + fabs(t->m) * W)) || !isfinite(S0) || !isfinite(Sx) ||
        !isfinite(Sy))
        return SW_SM_STEP_FLAT;
    *ncx = (double)w->i0 + Sx / S0;
    *ncy = (double)w->j0 + Sy / S0;
    *s0 = S0;
    return SW_SM_STEP_OK;
}

/* ---------------------------------------------------------------- step 2 per pixel type */

/* The 4 columns of a lane at p (nq of them inside the window; the others read as 0): on the GPU
 * one 32-bit load when all 4 are inside and p is 4-byte aligned (the seed's vectorised loads). */
SW_SM_FN void sw_sm_load_u8(const uint8_t *p, int32_t nq, uint32_t v[SW_SM_QUADS])
{
#if defined(__CUDA_ARCH__)
    if (nq == SW_SM_QUADS && ((uintptr_t)p & 3u) == 0) {
        uint32_t word = __ldg((const unsigned int *)p);
        v[0] = word & 0xffu;
        v[1] = (word >> 8) & 0xffu;
        v[2] = (word >> 16) & 0xffu;
        v[3] = word >> 24;
        return;
    }
#endif
    SW_SM_UNROLL
    for (int q = 0; q < SW_SM_QUADS; ++q)
        v[q] = q < nq ? (uint32_t)p[q] : 0u;
}

SW_SM_FN void sw_sm_load_u16(const uint16_t *p, int32_t nq, uint32_t v[SW_SM_QUADS])
{
    SW_SM_UNROLL
    for (int q = 0; q < SW_SM_QUADS; ++q)
        v[q] = q < nq ? (uint32_t)p[q] : 0u;
}

/* The 4 pixels of a lane's columns in one row of an integer frame of `bytes` (1: u8, 2: u16)
 * per pixel. */
SW_SM_FN void sw_sm_load_int(const char *p, int bytes, int32_t nq, uint32_t v[SW_SM_QUADS])
{
    if (bytes == 1)
        sw_sm_load_u8((const uint8_t *)p, nq, v);
    else
        sw_sm_load_u16((const uint16_t *)(const void *)p, nq, v);
}

/* Step 2 for one lane of an integer frame (u8: bytes 1, u16: bytes 2): the column sums are exact
 * integers (B in 64 bits: (j - j0) v up to 256 x 256 x 65535 for u16), then the double part. */
SW_SM_FN void sw_sm_lane_int(const void *frame, size_t stride, int bytes, const sw_sm_window *w,
                             int lane, sw_sm_sums *out)
{
    int32_t ncols = w->i1 - w->i0 + 1, nr = w->j1 - w->j0;
    sw_sm_sums s = {0.0, 0.0, 0.0, INFINITY};
    uint32_t mn = 0xffffffffu;
    for (int32_t c0 = SW_SM_QUADS * lane; c0 < ncols; c0 += SW_SM_PASS) {
        int32_t nq = ncols - c0 < SW_SM_QUADS ? ncols - c0 : SW_SM_QUADS;
        const char *p =
            (const char *)frame + (size_t)w->j0 * stride + (size_t)(w->i0 + c0) * (size_t)bytes;
        uint32_t e0[SW_SM_QUADS], e1[SW_SM_QUADS] = {0u, 0u, 0u, 0u};
        uint32_t A[SW_SM_QUADS] = {0u, 0u, 0u, 0u};
        uint64_t B[SW_SM_QUADS] = {0u, 0u, 0u, 0u};
        sw_sm_load_int(p, bytes, nq, e0);
        SW_SM_UNROLL
        for (int q = 0; q < SW_SM_QUADS; ++q)
            if (q < nq && e0[q] < mn)
                mn = e0[q];
        SW_SM_UNROLL_ROWS
        for (int32_t r = 1; r < nr; ++r) {
            uint32_t v[SW_SM_QUADS];
            sw_sm_load_int(p + (size_t)r * stride, bytes, nq, v);
            SW_SM_UNROLL
            for (int q = 0; q < SW_SM_QUADS; ++q) {
                A[q] += v[q];
                B[q] += (uint64_t)r * v[q];
                if (q < nq && v[q] < mn)
                    mn = v[q];
            }
        }
        if (nr > 0) {
            sw_sm_load_int(p + (size_t)nr * stride, bytes, nq, e1);
            SW_SM_UNROLL
            for (int q = 0; q < SW_SM_QUADS; ++q)
                if (q < nq && e1[q] < mn)
                    mn = e1[q];
        }
        SW_SM_UNROLL
        for (int q = 0; q < SW_SM_QUADS; ++q) {
            if (q < nq) {
                double wx, mx, col0, coly;
                sw_sm_col_weight(w, c0 + q, &wx, &mx);
                sw_sm_col_finish(w, (double)A[q], (double)B[q], (double)e0[q], (double)e1[q], &col0,
                                 &coly);
                sw_sm_lane_add(&s, wx, mx, col0, coly);
            }
        }
    }
    if (mn != 0xffffffffu)
        s.m = (double)mn;
    *out = s;
}

SW_SM_FN void sw_sm_lane_u8(const void *frame, size_t stride, const sw_sm_window *w, int lane,
                            sw_sm_sums *out)
{
    sw_sm_lane_int(frame, stride, 1, w, lane, out);
}

SW_SM_FN void sw_sm_lane_u16(const void *frame, size_t stride, const sw_sm_window *w, int lane,
                             sw_sm_sums *out)
{
    sw_sm_lane_int(frame, stride, 2, w, lane, out);
}

SW_SM_FN void sw_sm_load_f32(const float *p, int32_t nq, float v[SW_SM_QUADS])
{
    SW_SM_UNROLL
    for (int q = 0; q < SW_SM_QUADS; ++q)
        v[q] = q < nq ? p[q] : 0.0f;
}

SW_SM_FN void sw_sm_lane_f32(const void *frame, size_t stride, const sw_sm_window *w, int lane,
                             sw_sm_sums *out)
{
    int32_t ncols = w->i1 - w->i0 + 1, nr = w->j1 - w->j0;
    sw_sm_sums s = {0.0, 0.0, 0.0, INFINITY};
    float mn = INFINITY;
    for (int32_t c0 = SW_SM_QUADS * lane; c0 < ncols; c0 += SW_SM_PASS) {
        int32_t nq = ncols - c0 < SW_SM_QUADS ? ncols - c0 : SW_SM_QUADS;
        const char *p = (const char *)frame + (size_t)w->j0 * stride + (size_t)(w->i0 + c0) * 4u;
        float e0[SW_SM_QUADS], e1[SW_SM_QUADS] = {0.0f, 0.0f, 0.0f, 0.0f};
        double A[SW_SM_QUADS] = {0.0, 0.0, 0.0, 0.0}, B[SW_SM_QUADS] = {0.0, 0.0, 0.0, 0.0};
        sw_sm_load_f32((const float *)(const void *)p, nq, e0);
        SW_SM_UNROLL
        for (int q = 0; q < SW_SM_QUADS; ++q)
            if (q < nq && e0[q] < mn)
                mn = e0[q];
        SW_SM_UNROLL_ROWS
        for (int32_t r = 1; r < nr; ++r) {
            float v[SW_SM_QUADS];
            sw_sm_load_f32((const float *)(const void *)(p + (size_t)r * stride), nq, v);
            SW_SM_UNROLL
            for (int q = 0; q < SW_SM_QUADS; ++q) {
                A[q] = A[q] + (double)v[q];
                B[q] = B[q] + (double)r * (double)v[q];
                if (q < nq && v[q] < mn)
                    mn = v[q];
            }
        }
        if (nr > 0) {
            sw_sm_load_f32((const float *)(const void *)(p + (size_t)nr * stride), nq, e1);
            SW_SM_UNROLL
            for (int q = 0; q < SW_SM_QUADS; ++q)
                if (q < nq && e1[q] < mn)
                    mn = e1[q];
        }
        SW_SM_UNROLL
        for (int q = 0; q < SW_SM_QUADS; ++q) {
            if (q < nq) {
                double wx, mx, col0, coly;
                sw_sm_col_weight(w, c0 + q, &wx, &mx);
                sw_sm_col_finish(w, A[q], B[q], (double)e0[q], (double)e1[q], &col0, &coly);
                sw_sm_lane_add(&s, wx, mx, col0, coly);
            }
        }
    }
    s.m = (double)mn;
    *out = s;
}

/* Step 2 for lane `lane` (0..31) of the window w of a frame (pixel type u8, u16 or f32). */
SW_SM_FN void sw_sm_lane_sums(const void *frame, size_t stride, sw_pixel_type type,
                              const sw_sm_window *w, int lane, sw_sm_sums *out)
{
    if (type == SW_PIX_U8)
        sw_sm_lane_u8(frame, stride, w, lane, out);
    else if (type == SW_PIX_U16)
        sw_sm_lane_u16(frame, stride, w, lane, out);
    else
        sw_sm_lane_f32(frame, stride, w, lane, out);
}

/* One step, serially in the warp's order (steps 1-4). Returns SW_SM_STEP_OK with the new centre
 * and S0' in *ncx, *ncy, *s0; otherwise (FLAT, NONFINITE, EMPTY) the centre stays: *ncx = cx,
 * *ncy = cy, *s0 = 0. */
SW_SM_FN int sw_sm_com_step_ex(const void *frame, size_t stride, sw_pixel_type type, int32_t width,
                               int32_t height, double cx, double cy, double s, double *ncx,
                               double *ncy, double *s0)
{
    *ncx = cx;
    *ncy = cy;
    *s0 = 0.0;
    sw_sm_window w;
    if (!sw_sm_window_make(cx, cy, s, width, height, &w))
        return SW_SM_STEP_EMPTY;
    sw_sm_sums lanes[SW_SM_LANES];
    int32_t used = (w.i1 - w.i0) / SW_SM_QUADS + 1; /* lanes with columns: the others are 0 */
    for (int t = 0; t < SW_SM_LANES; ++t) {
        if (t < used) {
            sw_sm_lane_sums(frame, stride, type, &w, t, &lanes[t]);
        } else {
            lanes[t].s0 = 0.0;
            lanes[t].sx = 0.0;
            lanes[t].sy = 0.0;
            lanes[t].m = INFINITY;
        }
    }
    sw_sm_butterfly(lanes);
    return sw_sm_finish(&w, &lanes[0], ncx, ncy, s0);
}

/* One centre-of-mass step of side s at (cx, cy): returns 1 with the new centre and S0' (the
 * intensity), 0 for a flat window, a NaN / Inf pixel or an empty window (the centre stays). */
SW_SM_FN int sw_sm_com_step(const void *frame, size_t stride, sw_pixel_type type, int32_t width,
                            int32_t height, double cx, double cy, double s, double *ncx,
                            double *ncy, double *s0)
{
    return sw_sm_com_step_ex(frame, stride, type, width, height, cx, cy, s, ncx, ncy, s0) ==
           SW_SM_STEP_OK;
}

/* ---------------------------------------------------------------- PAPYCS / CoM per spot */

/* The state of one spot's search across steps (search.h: PAPYCS, CoM). */
typedef struct sw_sm_spot {
    double cx, cy, s0;
    int last;      /* outcome of the last step                       */
    int nonfinite; /* a step met a NaN / Inf pixel                   */
} sw_sm_spot;

/* Starts a spot's search at (sx, sy). Returns 0 (the spot is OUTSIDE) for a non-finite start. */
SW_SM_FN int sw_sm_spot_start(sw_sm_spot *sp, double sx, double sy)
{
    sp->cx = sx;
    sp->cy = sy;
    sp->s0 = 0.0;
    sp->last = SW_SM_STEP_FLAT;
    sp->nonfinite = 0;
    if (!isfinite(sx) || !isfinite(sy)) {
        sp->last = SW_SM_STEP_EMPTY;
        return 0;
    }
    return 1;
}

/* After a step with outcome r and results (ncx, ncy, s0): updates the spot. Returns 0 when the
 * search stops (an empty window: OUTSIDE). */
SW_SM_FN int sw_sm_spot_update(sw_sm_spot *sp, int r, double ncx, double ncy, double s0)
{
    sp->last = r;
    if (r == SW_SM_STEP_EMPTY)
        return 0;
    if (r == SW_SM_STEP_NONFINITE)
        sp->nonfinite = 1;
    if (r == SW_SM_STEP_OK) {
        sp->cx = ncx;
        sp->cy = ncy;
        sp->s0 = s0;
    }
    return 1;
}

/* The spot's status (sw_spot_status values) after its last step. */
SW_SM_FN uint8_t sw_sm_spot_status(const sw_sm_spot *sp)
{
    if (sp->last == SW_SM_STEP_EMPTY)
        return SW_SPOT_OUTSIDE;
    if (sp->nonfinite || sp->last != SW_SM_STEP_OK)
        return SW_SPOT_FLAT;
    return SW_SPOT_OK;
}

/* The first window side of spot k of an nx x ny grid (k = iy nx + ix) for PAPYCS with the
 * neighbour window (search.h, f = neighbour_window): floor(f d + 1e-6) when that is below smax,
 * not below smin; d = min over the 8 grid neighbours m whose starts are finite of
 * max(|sx[m] - sx[k]|, |sy[m] - sy[k]|). smax when f <= 0, without a grid (nx < 1), for a
 * non-finite start of spot k, or when no neighbour has a finite start. */
SW_SM_FN int32_t sw_sm_first_side(const double *sx, const double *sy, int32_t k, int32_t nx,
                                  int32_t ny, double f, int32_t smax, int32_t smin)
{
    if (!(f > 0.0) || nx < 1)
        return smax;
    const double x = sx[k], y = sy[k];
    if (!isfinite(x) || !isfinite(y)) /* the spot is OUTSIDE anyway */
        return smax;
    const int32_t ix = k % nx, iy = k / nx;
    double d = INFINITY;
    for (int32_t dy = -1; dy <= 1; ++dy) {
        for (int32_t dx = -1; dx <= 1; ++dx) {
            const int32_t jx = ix + dx, jy = iy + dy;
            if ((dx == 0 && dy == 0) || jx < 0 || jx >= nx || jy < 0 || jy >= ny)
                continue;
            const double mx = sx[jy * nx + jx], my = sy[jy * nx + jx];
            if (!isfinite(mx) || !isfinite(my))
                continue;
            const double u = fabs(mx - x), v = fabs(my - y);
            const double e = u > v ? u : v;
            if (e < d)
                d = e;
        }
    }
    /* + 1e-6: starts a whole number of pixels apart but for rounding (a flat wavefront's
     * predictions on a grid of whole-pixel pitch) give one side on every backend, whatever
     * their solvers' last bits */
    const double c = floor(f * d + 1e-6);
    if (!(c < (double)smax)) /* also d = +Inf: no finite neighbour */
        return smax;
    return c < (double)smin ? smin : (int32_t)c;
}

/* ---------------------------------------------------------------- discarding (search.h) */

/* Pixel (i, j) of a frame (u8, u16 or f32; inside the frame) as a double. */
SW_SM_FN double sw_sm_pixel(const void *frame, size_t stride, sw_pixel_type type, int32_t i,
                            int32_t j)
{
    const char *row = (const char *)frame + (size_t)j * stride;
    if (type == SW_PIX_U8)
        return (double)((const uint8_t *)row)[i];
    if (type == SW_PIX_U16)
        return (double)((const uint16_t *)row)[i];
    return (double)((const float *)(const void *)row)[i];
}

/* Criterion 1 for a spot found at (x, y) (Mompean et al. 2019 Sec. 3.2.1, with the ring distance
 * d of search.h): with (i, j) the pixel holding the centroid, kept (1) when v(i, j) - (the mean
 * of the 8 pixels (i + a d, j + b d), a, b in {-1, 0, 1} not both 0) > contrast; 0 when not or
 * when the (2d + 1)^2 block leaves the frame. The 8 are added row by row (j - d, j, j + d), left
 * to right. d = 1: the 8 neighbours. */
SW_SM_FN int sw_sm_contrast_ok(const void *frame, size_t stride, sw_pixel_type type, int32_t width,
                               int32_t height, double x, double y, double contrast, int32_t d)
{
    double fi = floor(x + 0.5), fj = floor(y + 0.5);
    if (!(fi >= (double)d && fi <= (double)width - 1.0 - d && fj >= (double)d &&
          fj <= (double)height - 1.0 - d))
        return 0;
    int32_t i = (int32_t)fi, j = (int32_t)fj;
    double sum = 0.0;
    for (int32_t dj = -1; dj <= 1; ++dj)
        for (int32_t di = -1; di <= 1; ++di)
            if (di != 0 || dj != 0)
                sum = sum + sw_sm_pixel(frame, stride, type, i + d * di, j + d * dj);
    return sw_sm_pixel(frame, stride, type, i, j) - sum / 8.0 > contrast;
}

/* The grid 4-neighbour of spot k (grid nx x ny, k = iy nx + ix) in direction dir (0: -x, 1: +x,
 * 2: -y, 3: +y), or -1 beyond the grid. */
SW_SM_FN int32_t sw_sm_neighbour(int32_t k, int32_t nx, int32_t ny, int dir)
{
    int32_t ix = k % nx, iy = k / nx;
    if (dir == 0)
        return ix > 0 ? k - 1 : -1;
    if (dir == 1)
        return ix < nx - 1 ? k + 1 : -1;
    if (dir == 2)
        return iy > 0 ? k - nx : -1;
    return iy < ny - 1 ? k + nx : -1;
}

/* Criterion 2 for spot k, from the statuses after criterion 1 (flag1): SW_SPOT_SPACING when a
 * 4-neighbour also kept by criterion 1 lies nearer than lo or farther than hi pixels (both are
 * discarded: the test is symmetric), else flag1[k]. */
SW_SM_FN uint8_t sw_sm_discard_spacing(const uint8_t *flag1, const double *x, const double *y,
                                       int32_t k, int32_t nx, int32_t ny, double lo, double hi)
{
    if (flag1[k] != SW_SPOT_OK)
        return flag1[k];
    for (int dir = 0; dir < 4; ++dir) {
        int32_t n = sw_sm_neighbour(k, nx, ny, dir);
        if (n < 0 || flag1[n] != SW_SPOT_OK)
            continue;
        double dx = x[k] - x[n], dy = y[k] - y[n];
        double dist = sqrt(dx * dx + dy * dy);
        if (dist < lo || dist > hi)
            return SW_SPOT_SPACING;
    }
    return SW_SPOT_OK;
}

/* Criterion 3 for spot k, from the statuses after criterion 2 (flag2): SW_SPOT_ISOLATED when
 * none of its 4-neighbours is kept, else flag2[k]. */
SW_SM_FN uint8_t sw_sm_discard_isolated(const uint8_t *flag2, int32_t k, int32_t nx, int32_t ny)
{
    if (flag2[k] != SW_SPOT_OK)
        return flag2[k];
    for (int dir = 0; dir < 4; ++dir) {
        int32_t n = sw_sm_neighbour(k, nx, ny, dir);
        if (n >= 0 && flag2[n] == SW_SPOT_OK)
            return SW_SPOT_OK;
    }
    return SW_SPOT_ISOLATED;
}

#if defined(__CUDACC__)
/* sw_sm_lane_sums with the pixel type of the launch as a template argument (no branch left). */
template <int TYPE>
__device__ __forceinline__ void sw_sm_lane_sums_t(const void *frame, size_t stride,
                                                  const sw_sm_window *w, int lane, sw_sm_sums *out)
{
    if (TYPE == SW_PIX_U8)
        sw_sm_lane_u8(frame, stride, w, lane, out);
    else if (TYPE == SW_PIX_U16)
        sw_sm_lane_u16(frame, stride, w, lane, out);
    else
        sw_sm_lane_f32(frame, stride, w, lane, out);
}

/* sw_sm_butterfly across a warp whose 32 lanes all take part: each lane's sums in t, the four
 * shuffles of a level interleaved (seed optimisation 1); every lane returns the totals. */
__device__ __forceinline__ sw_sm_sums sw_sm_warp_butterfly(sw_sm_sums t)
{
#pragma unroll
    for (int o = SW_SM_LANES / 2; o >= 1; o >>= 1) {
        sw_sm_sums other;
        other.s0 = __shfl_xor_sync(0xffffffffu, t.s0, o);
        other.sx = __shfl_xor_sync(0xffffffffu, t.sx, o);
        other.sy = __shfl_xor_sync(0xffffffffu, t.sy, o);
        other.m = __shfl_xor_sync(0xffffffffu, t.m, o);
        t = sw_sm_combine(t, other);
    }
    return t;
}
#endif

#endif

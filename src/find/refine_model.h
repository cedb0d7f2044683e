/*
 * The per-spot arithmetic of position refinement (refine.h), written once for the CPU (refine.c)
 * and the GPU (refine_cuda.cu). A backend supplies only the loop over a stamp's pixels (one
 * thread walks them on the CPU; the 32 lanes of a warp stride over them on the GPU and add their
 * partial sums) and the reduction; what each pixel contributes, and every decision taken on the
 * summed values (window iteration, Levenberg-Marquardt step, covariance), is here.
 *
 * Pixels: 0-based centres (core.h). A pixel's sample is d = v - bias - b(x, y), with v the raw
 * value (ADU), b the local background (ADU above bias: 0, the annulus' level or the mesh map);
 * its variance in ADU^2 under the detector model (gain g e-/ADU, read noise r e-) is
 *     var = max(m + b, 0) / g + r^2 / g^2,   floored at 1 / g^2 (one electron),
 * with m the expected signal above the background (the model for the fit, the sample itself for
 * the window's error bars).
 */
#ifndef SW_REFINE_MODEL_H
#define SW_REFINE_MODEL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "spotwave/core.h"
#include "spotwave/refine.h"

#if defined(__CUDACC__)
#define SW_RM_FN __host__ __device__ static inline
#else
#define SW_RM_FN static inline
#endif
/* 1 / x in float, correctly rounded (as the CPU's division) without a division on the GPU. */
#if defined(__CUDA_ARCH__)
#define SW_RM_RCP(x) __frcp_rn(x)
#else
#define SW_RM_RCP(x) (1.0f / (x))
#endif
/* A loop over small arrays kept rolled on the GPU, so that its arrays stay in memory instead of
 * taking registers from the whole kernel (the Levenberg-Marquardt solve, run by one lane). */
#if defined(__CUDA_ARCH__)
#define SW_RM_ROLLED _Pragma("unroll 1")
#else
#define SW_RM_ROLLED
#endif

#define SW_RM_SIDE    (2 * SW_REFINE_MAX_RADIUS + 1)
#define SW_RM_NPAR    5  /* x, y, flux, sigma, background */
#define SW_RM_NA      15 /* the upper triangle of the 5 x 5 normal matrix */
#define SW_RM_BINS    64 /* radial bins of the half-light radius */
#define SW_RM_XWIN_IT 16 /* SExtractor's WINPOS_NITERMAX */

/* ---------------------------------------------------------------- the frame a spot is read from */

typedef struct sw_rm_frame {
    const void *data;
    size_t stride;
    sw_pixel_type type;
    int32_t width, height;
    const uint8_t *mask; /* width * height, non-zero = valid, or NULL */
    const float *mesh;   /* background mesh (nx * ny, ADU above bias), or NULL */
    int32_t mesh_nx, mesh_ny, mesh_box;
    double overload; /* values >= overload are invalid */
    double bias;
    double gain, read_noise; /* e-/ADU, e- */
    /* derived by sw_rm_frame_detector, so that no pixel divides: 1 / gain, read_noise^2 /
     * gain^2 and the variance's floor 1 / gain^2 */
    double inv_gain, noise_var, floor_var;
    /* the same in float, for the one-star fit's and the window's per-pixel arithmetic */
    float f_bias, f_gain, f_inv_gain, f_noise_var, f_floor_var, f_rn2;
} sw_rm_frame;

/* Sets the detector model of f (gain > 0). */
SW_RM_FN void sw_rm_frame_detector(sw_rm_frame *f, double bias, double gain, double read_noise)
{
    f->bias = bias;
    f->gain = gain;
    f->read_noise = read_noise;
    f->inv_gain = 1.0 / gain;
    f->floor_var = 1.0 / (gain * gain);
    f->noise_var = read_noise * read_noise * f->floor_var;
    f->f_bias = (float)bias;
    f->f_gain = (float)gain;
    f->f_inv_gain = (float)f->inv_gain;
    f->f_noise_var = (float)f->noise_var;
    f->f_floor_var = (float)f->floor_var;
    f->f_rn2 = (float)(read_noise * read_noise);
}

/* The raw value of pixel (x, y) (inside the frame), and whether it is valid: finite, below the
 * overload and not masked. */
SW_RM_FN const void *sw_rm_row(const sw_rm_frame *f, int32_t y)
{
    return (const unsigned char *)f->data + (size_t)y * f->stride;
}

SW_RM_FN int sw_rm_raw(const sw_rm_frame *f, int32_t x, int32_t y, double *v)
{
    const void *row = sw_rm_row(f, y);
    double r;
    switch (f->type) {
    case SW_PIX_U8: r = ((const uint8_t *)row)[x]; break;
    case SW_PIX_U16: r = ((const uint16_t *)row)[x]; break;
    case SW_PIX_U32: r = ((const uint32_t *)row)[x]; break;
    default: r = ((const float *)row)[x]; break;
    }
    *v = r;
    if (!isfinite(r) || r >= f->overload)
        return 0;
    return !f->mask || f->mask[(size_t)y * f->width + x];
}

/*
 * The mesh background at pixel (x, y): bilinear between the mesh cells' centres (cell (i, j)
 * covers pixels [i box, (i + 1) box) x [j box, (j + 1) box), its centre at i box + (box - 1) / 2),
 * continued linearly beyond the outer centres (a mesh of one cell along an axis: constant).
 */
SW_RM_FN double sw_rm_mesh_at(const sw_rm_frame *f, int32_t x, int32_t y)
{
    const double box = (double)f->mesh_box;
    const double gx = ((double)x - 0.5 * (box - 1.0)) / box;
    const double gy = ((double)y - 0.5 * (box - 1.0)) / box;
    int32_t i0 = (int32_t)floor(gx), j0 = (int32_t)floor(gy);
    i0 = i0 > f->mesh_nx - 2 ? f->mesh_nx - 2 : i0;
    j0 = j0 > f->mesh_ny - 2 ? f->mesh_ny - 2 : j0;
    i0 = i0 < 0 ? 0 : i0;
    j0 = j0 < 0 ? 0 : j0;
    int32_t i1 = i0 + 1 < f->mesh_nx ? i0 + 1 : i0, j1 = j0 + 1 < f->mesh_ny ? j0 + 1 : j0;
    const double tx = i1 > i0 ? gx - (double)i0 : 0.0, ty = j1 > j0 ? gy - (double)j0 : 0.0;
    const float *m = f->mesh;
    const int32_t n = f->mesh_nx;
    const double a = (1.0 - tx) * m[j0 * n + i0] + tx * m[j0 * n + i1];
    const double b = (1.0 - tx) * m[j1 * n + i0] + tx * m[j1 * n + i1];
    return (1.0 - ty) * a + ty * b;
}

/* Pixel (x, y) as a sample: d (ADU above bias and background) and b (the background level, ADU
 * above bias; constant `level` unless a mesh is given). 0 when the pixel is not valid. */
SW_RM_FN int sw_rm_sample(const sw_rm_frame *f, int32_t x, int32_t y, double level, double *d,
                          double *b)
{
    double v;
    if (!sw_rm_raw(f, x, y, &v))
        return 0;
    double bg = f->mesh ? sw_rm_mesh_at(f, x, y) : level;
    *b = bg;
    *d = v - f->bias - bg;
    return 1;
}

/* sw_rm_sample in float (the fit's and the window's pixel loops): the same validity; d and b
 * rounded to float (exact for 8- and 16-bit raw values, a whole-number bias and no mesh). */
SW_RM_FN int sw_rm_fsample(const sw_rm_frame *f, int32_t x, int32_t y, float level, float *d,
                           float *b)
{
    const void *row = sw_rm_row(f, y);
    float v;
    if (f->type == SW_PIX_U8 || f->type == SW_PIX_U16) {
        v = f->type == SW_PIX_U8 ? (float)((const uint8_t *)row)[x]
                                 : (float)((const uint16_t *)row)[x];
        if ((double)v >= f->overload || (f->mask && !f->mask[(size_t)y * f->width + x]))
            return 0;
    } else {
        double r;
        if (!sw_rm_raw(f, x, y, &r))
            return 0;
        v = (float)(r - f->bias); /* u32 values above 2^24 keep their difference to the bias */
        const float bg = f->mesh ? (float)sw_rm_mesh_at(f, x, y) : level;
        *b = bg;
        *d = v - bg;
        return 1;
    }
    const float bg = f->mesh ? (float)sw_rm_mesh_at(f, x, y) : level;
    *b = bg;
    *d = v - f->f_bias - bg;
    return 1;
}

/* The variance of a pixel whose expected signal above the background is m (header comment). */
SW_RM_FN double sw_rm_variance(const sw_rm_frame *f, double m, double b)
{
    const double e = m + b;
    const double var = (e > 0.0 ? e : 0.0) * f->inv_gain + f->noise_var;
    return var > f->floor_var ? var : f->floor_var;
}

/* sw_rm_variance in float. */
SW_RM_FN float sw_rm_fvariance(const sw_rm_frame *f, float m, float b)
{
    const float e = m + b;
    const float var = (e > 0.0f ? e : 0.0f) * f->f_inv_gain + f->f_noise_var;
    return var > f->f_floor_var ? var : f->f_floor_var;
}

/* ---------------------------------------------------------------- stamps */

typedef struct sw_rm_stamp {
    int32_t x0, x1, y0, y1; /* [x0, x1) x [y0, y1), clipped to the frame */
    int32_t cx, cy;         /* the centre pixel */
    int32_t radius;
    int32_t edge; /* 1 when the clipping cut the square */
} sw_rm_stamp;

SW_RM_FN void sw_rm_stamp_make(const sw_rm_frame *f, double x, double y, int32_t radius,
                               sw_rm_stamp *s)
{
    s->cx = (int32_t)floor(x + 0.5);
    s->cy = (int32_t)floor(y + 0.5);
    s->radius = radius;
    int32_t x0 = s->cx - radius, x1 = s->cx + radius + 1;
    int32_t y0 = s->cy - radius, y1 = s->cy + radius + 1;
    s->edge = x0 < 0 || y0 < 0 || x1 > f->width || y1 > f->height;
    s->x0 = x0 < 0 ? 0 : x0;
    s->y0 = y0 < 0 ? 0 : y0;
    s->x1 = x1 > f->width ? f->width : x1;
    s->y1 = y1 > f->height ? f->height : y1;
    if (s->x1 < s->x0)
        s->x1 = s->x0;
    if (s->y1 < s->y0)
        s->y1 = s->y0;
}

SW_RM_FN int32_t sw_rm_stamp_count(const sw_rm_stamp *s)
{
    return (s->x1 - s->x0) * (s->y1 - s->y0);
}

/* The stamp's k-th pixel in raster order. */
SW_RM_FN void sw_rm_stamp_pixel(const sw_rm_stamp *s, int32_t k, int32_t *x, int32_t *y)
{
    int32_t w = s->x1 - s->x0;
    *x = s->x0 + k % w;
    *y = s->y0 + k / w;
}

/* A walk over a stamp's pixels first, first + step, ... in raster order, without a division per
 * pixel: (x, y) is the current pixel. */
typedef struct sw_rm_walk {
    int32_t x, y;   /* the current pixel */
    int32_t sx, sy; /* one step: sx columns (< the width) and sy rows */
} sw_rm_walk;

SW_RM_FN void sw_rm_walk_start(const sw_rm_stamp *s, int32_t first, int32_t step, sw_rm_walk *w)
{
    const int32_t width = s->x1 - s->x0;
    if (width <= 0) {
        w->x = s->x0;
        w->y = s->y0;
        w->sx = w->sy = 0;
        return;
    }
    w->x = s->x0 + first % width;
    w->y = s->y0 + first / width;
    w->sx = step % width;
    w->sy = step / width;
}

SW_RM_FN void sw_rm_walk_next(const sw_rm_stamp *s, sw_rm_walk *w)
{
    w->x += w->sx;
    w->y += w->sy;
    if (w->x >= s->x1) {
        w->x -= s->x1 - s->x0;
        w->y++;
    }
}

/* The automatic stamp radius (refine.h): half the bounding box's larger side + 3, in 4 .. max. */
SW_RM_FN int32_t sw_rm_auto_radius(int32_t bbox_w, int32_t bbox_h)
{
    int32_t r = (bbox_w > bbox_h ? bbox_w : bbox_h) / 2 + 3;
    return r < 4 ? 4 : (r > SW_REFINE_MAX_RADIUS ? SW_REFINE_MAX_RADIUS : r);
}

/* ---------------------------------------------------------------- annulus background */

/* Whether pixel (x, y) lies in the annulus r_in <= r < r_out about centre pixel (cx, cy). */
SW_RM_FN int sw_rm_in_annulus(int32_t x, int32_t y, int32_t cx, int32_t cy, int32_t r_in,
                              int32_t r_out)
{
    int64_t dx = x - cx, dy = y - cy, r2 = dx * dx + dy * dy;
    return r2 >= (int64_t)r_in * r_in && r2 < (int64_t)r_out * r_out;
}

/*
 * The sigma-clipped median of the annulus: its valid pixels' raw values are gathered once (as
 * order keys, below); clip pass c (SW_RM_CLIP_PASSES of them): the values v - bias in [lo, hi]
 * (all at first) are the keys in [klo, khi]; they give n, their mean and standard deviation,
 * and their median, the ceil(n / 2)-th smallest value, selected exactly by its key, 8 bits at a
 * time from the highest bit in which klo and khi differ (a histogram of the next 8 bits of the
 * keys under the prefix found so far, the first counted in the same pass as n and the moments);
 * then lo, hi = median -+ k sd (refine_spot.h sw_rs_annulus).
 */
#define SW_RM_CLIP_PASSES 3

/*
 * An order key of a raw value: an unsigned 32-bit number that sorts as the values do. u8, u16,
 * u32: the value itself; f32: the bits with the sign bit flipped for positive numbers and all
 * bits flipped for negative ones. sw_rm_key_value gives the value back exactly.
 */
SW_RM_FN uint32_t sw_rm_value_key(sw_pixel_type t, double v)
{
    if (t != SW_PIX_F32)
        return (uint32_t)v;
    const float fv = (float)v;
    uint32_t bits;
    memcpy(&bits, &fv, sizeof(bits));
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

SW_RM_FN double sw_rm_key_value(sw_pixel_type t, uint32_t key)
{
    if (t != SW_PIX_F32)
        return (double)key;
    const uint32_t bits = (key & 0x80000000u) ? key & 0x7fffffffu : ~key;
    float fv;
    memcpy(&fv, &bits, sizeof(fv));
    return (double)fv;
}

/* Whether pixel (x, y) lies in the annulus about (cx, cy) and is valid, and its key. */
SW_RM_FN int sw_rm_annulus_key_at(const sw_rm_frame *f, int32_t x, int32_t y, int32_t cx,
                                  int32_t cy, int32_t rin, int32_t rout, uint32_t *key)
{
    double v;
    if (!sw_rm_in_annulus(x, y, cx, cy, rin, rout) || !sw_rm_raw(f, x, y, &v))
        return 0;
    *key = sw_rm_value_key(f->type, v);
    return 1;
}

/* The same for pixel k of `box` in raster order. */
SW_RM_FN int sw_rm_annulus_key(const sw_rm_frame *f, const sw_rm_stamp *box, int32_t k, int32_t cx,
                               int32_t cy, int32_t rin, int32_t rout, uint32_t *key)
{
    int32_t x, y;
    sw_rm_stamp_pixel(box, k, &x, &y);
    return sw_rm_annulus_key_at(f, x, y, cx, cy, rin, rout, key);
}

/* The highest set bit of a non-zero u (0 .. 31). */
SW_RM_FN int sw_rm_top_bit(uint32_t u)
{
    int b = 0;
    while (u >>= 1)
        ++b;
    return b;
}

/* ---------------------------------------------------------------- half-light radius (xwin) */

/* The radial bin (width bin_w px) of pixel (x, y) about (xc, yc), or -1 beyond the last. */
SW_RM_FN int sw_rm_radial_bin(int32_t x, int32_t y, double xc, double yc, double bin_w)
{
    double dx = (double)x - xc, dy = (double)y - yc;
    int k = (int)(sqrt(dx * dx + dy * dy) / bin_w);
    return k < SW_RM_BINS ? k : -1;
}

/*
 * SExtractor's window: s_win = d50 / sqrt(8 ln 2) (Bertin, SExtractor manual, "Windowed
 * positional parameters"), d50 the diameter of the disc holding half the flux. From the radial
 * bins' fluxes (bin k: radii [k w, (k + 1) w)) up to the disc of radius r_tot: the radius where
 * the cumulative flux reaches half of the total, linear within the bin. 0 when the total flux is
 * not positive.
 */
SW_RM_FN double sw_rm_window_sigma(const double *bins, int nbins, double bin_w)
{
    double total = 0.0;
    for (int k = 0; k < nbins; ++k)
        total += bins[k];
    if (!(total > 0.0))
        return 0.0;
    double half = 0.5 * total, cum = 0.0, r50 = nbins * bin_w;
    for (int k = 0; k < nbins; ++k) {
        if (cum + bins[k] >= half && bins[k] > 0.0) {
            r50 = ((double)k + (half - cum) / bins[k]) * bin_w;
            break;
        }
        cum += bins[k];
    }
    return 2.0 * r50 / sqrt(8.0 * log(2.0));
}

/* ---------------------------------------------------------------- windowed centroid (xwin) */

/* The sums of one window pass at (xw, yw), each worker's in float (the workers' totals too, then
 * taken to double: sw_rs_xwin). */
typedef struct sw_rm_win {
    float sw, swx, swy; /* sum w d, sum w d dx, sum w d dy      */
    float svx, svy;     /* sum w^2 var dx^2, sum w^2 var dy^2   */
    int32_t n, masked;  /* pixels used, pixels skipped as bad   */
} sw_rm_win;

/*
 * The window w = exp(-r^2 / (2 s^2)) separates, exp(-dx^2 / (2 s^2)) exp(-dy^2 / (2 s^2)): one
 * factor per column of the window's stamp and one per row, so that a pass takes an exponential
 * per column and per row, not per pixel. u: the column's (row's) offset from the window's centre,
 * dx = i - xw, formed in stamp-relative coordinates (sw_rs_xwin) so that float keeps it to 1e-7
 * px anywhere in a large frame.
 */
SW_RM_FN float sw_rm_win_axis(float u, float s)
{
    return expf(-0.5f * u * u / (s * s));
}

/*
 * One pixel's contribution to the window with sigma s (SExtractor manual Eq. 27), the pixel
 * (dx, dy) from the window's centre: pixels with r < 4 s (WINPOS_NSIG) count with
 * w = exp(-r^2 / (2 s^2)) (the product wx wy of sw_rm_win_axis); the variance sums give
 * ERRX2WIN = 4 sum w^2 var dx^2 / (sum w d)^2 with var from the sample (header). In float: the
 * centre moves by sum w d dx / sum w d, whose rounding (~1e-7 of the window's size) is far
 * below the 2e-4 px the iteration stops at.
 */
SW_RM_FN void sw_rm_win_pixel(const sw_rm_frame *f, int32_t x, int32_t y, float level, float dx,
                              float dy, float s, float wx, float wy, sw_rm_win *a)
{
    const float r2 = dx * dx + dy * dy;
    if (r2 >= 16.0f * s * s)
        return;
    float d, b;
    if (!sw_rm_fsample(f, x, y, level, &d, &b)) {
        a->masked++;
        return;
    }
    const float w = wx * wy;
    const float wd = w * d, wwv = w * w * sw_rm_fvariance(f, d, b);
    a->sw += wd;
    a->swx += wd * dx;
    a->swy += wd * dy;
    a->svx += wwv * dx * dx;
    a->svy += wwv * dy * dy;
    a->n++;
}

/* ---------------------------------------------------------------- Gaussian fit */

/*
 * The model of a spot on pixel (i, j): the circular Gaussian of flux F, width s centred at
 * (x, y), integrated over the pixel, plus a constant B:
 *     m_ij = F E_x(i) E_y(j) + B,
 *     E_x(i) = (erf((i + 1/2 - x) / (sqrt 2 s)) - erf((i - 1/2 - x) / (sqrt 2 s))) / 2.
 * It separates: the per-column factors (E, dE/dx, dE/ds) are computed once per column and the
 * per-row ones once per row. With phi(u) = exp(-u^2 / 2 s^2) / (sqrt(2 pi) s), u+- = i +- 1/2 - x:
 *     dE/dx = phi(u-) - phi(u+),   dE/ds = (u- phi(u-) - u+ phi(u+)) / s.
 */
SW_RM_FN void sw_rm_axis(int32_t i, double c, double s, double *e, double *de_dc, double *de_ds)
{
    const double k = 1.0 / (sqrt(2.0) * s), n = 1.0 / (sqrt(2.0 * 3.141592653589793) * s);
    double up = (double)i + 0.5 - c, um = (double)i - 0.5 - c;
    double pp = n * exp(-0.5 * up * up / (s * s)), pm = n * exp(-0.5 * um * um / (s * s));
    *e = 0.5 * (erf(up * k) - erf(um * k));
    *de_dc = pm - pp;
    *de_ds = (um * pm - up * pp) / s;
}

/*
 * sw_rm_axis in float for the one-star fit (sw_rs_fit), in two steps, since neighbouring columns
 * share an edge (column i's right edge is column i + 1's left one): sw_rm_edge_f evaluates, once
 * per edge, c(u) = erfc(|u| / (sqrt 2 s)) and phi(u), u the edge less the star's position
 * (stamp-relative, so float keeps it to 1e-7 px anywhere in a large frame); sw_rm_axis_f forms a
 * column's factors from its two edges, u- (left) and u+ = u- + 1 (right). With erf(u) =
 * sign(u) (1 - c(u)), E = (erf(u+) - erf(u-)) / 2 is (c(u-) - c(u+)) / 2 for a column right of
 * the star, (c(u+) - c(u-)) / 2 left of it and 1 - (c(u-) + c(u+)) / 2 across it: a far
 * column's E keeps float's relative precision (a difference of erf values near 1 would keep only
 * its absolute 6e-8, and the merit's rounding would then exceed the Levenberg-Marquardt
 * acceptance test's allowance for bright stars).
 */
/* The width's constants of a pass (no division per edge or column). */
typedef struct sw_rm_width {
    float k;     /* 1 / (sqrt 2 s)          */
    float n;     /* 1 / (sqrt(2 pi) s)      */
    float is2;   /* 1 / (2 s^2)             */
    float inv_s; /* 1 / s                   */
} sw_rm_width;

SW_RM_FN void sw_rm_width_make(float s, sw_rm_width *w)
{
    w->inv_s = SW_RM_RCP(s);
    w->k = 0.70710678f * w->inv_s;
    w->n = 0.39894228f * w->inv_s;
    w->is2 = 0.5f * w->inv_s * w->inv_s;
}

SW_RM_FN void sw_rm_edge_f(float u, const sw_rm_width *w, float *c_u, float *phi_u)
{
    *c_u = erfcf(fabsf(u) * w->k);
    *phi_u = w->n * expf(-u * u * w->is2);
}

SW_RM_FN void sw_rm_axis_f(float um, float c_m, float phi_m, float c_p, float phi_p,
                           const sw_rm_width *w, float *e, float *de_dc, float *de_ds)
{
    const float up = um + 1.0f;
    *e = um >= 0.0f   ? 0.5f * (c_m - c_p)
         : up <= 0.0f ? 0.5f * (c_p - c_m)
                      : 1.0f - 0.5f * (c_m + c_p);
    *de_dc = phi_m - phi_p;
    *de_ds = (um * phi_m - up * phi_p) * w->inv_s;
}

/*
 * The Moffat profile (Moffat A. F. J. 1969, A&A 3, 455) of unit flux, width alpha and exponent
 * beta > 1 (fixed):
 *     M(r) = (beta - 1) / (pi alpha^2) (1 + r^2 / alpha^2)^-beta,
 * integrated over a pixel by the 3 x 3 Gauss-Legendre product rule (nodes 0 and +-sqrt(3/5) / 2
 * from the pixel's centre, weights 8/18 and 5/18 per axis): unlike the Gaussian it does not
 * separate into column and row factors with a closed-form integral. Against a 24 x 24-node rule
 * the pixel values differ by at most 1.5e-4 of the peak pixel at FWHM 1.5 px and 4e-6 at FWHM
 * 3.5 px (beta 2.5 and 4.765). (dx, dy) is the pixel's centre less the star's position; P the
 * pixel's value, dPx and dPy its derivatives by the star's x and y, dPa by alpha. With
 * u = 1 + r^2 / alpha^2, c = (beta - 1) / pi and t = u^-(beta + 1), at a node (X, Y) from the star:
 *     M = c t u / alpha^2,   dM/dx0 = 2 beta c X t / alpha^4,
 *     dM/dalpha = 2 c t (beta (u - 1) - u) / alpha^3.
 */
SW_RM_FN void sw_rm_moffat_pixel(double dx, double dy, double alpha, double beta, double *P,
                                 double *dPx, double *dPy, double *dPa)
{
    const double h = 0.3872983346207417; /* sqrt(3/5) / 2 */
    const double ia2 = 1.0 / (alpha * alpha), c = (beta - 1.0) / 3.141592653589793;
    double v = 0.0, vx = 0.0, vy = 0.0, va = 0.0;
    for (int j = -1; j <= 1; ++j) {
        const double y = dy + h * j, y2 = y * y * ia2, wy = j ? 5.0 / 18.0 : 8.0 / 18.0;
        double rv = 0.0, rx = 0.0, ry = 0.0, ra = 0.0;
        for (int i = -1; i <= 1; ++i) {
            const double x = dx + h * i;
            const double u = 1.0 + x * x * ia2 + y2;
            const double t = (i ? 5.0 / 18.0 : 8.0 / 18.0) * exp(-(beta + 1.0) * log(u));
            rv += t * u;
            rx += t * x;
            ry += t;
            ra += t * (beta * (u - 1.0) - u);
        }
        v += wy * rv;
        vx += wy * rx;
        vy += wy * ry * y;
        va += wy * ra;
    }
    *P = c * ia2 * v;
    *dPx = 2.0 * beta * c * ia2 * ia2 * vx;
    *dPy = 2.0 * beta * c * ia2 * ia2 * vy;
    *dPa = 2.0 * c * ia2 / alpha * va;
}

/* A profile's Gaussian-equivalent width, FWHM / sqrt(8 ln 2), per unit of its width parameter
 * (GAUSS: 1; MOFFAT: FWHM = 2 alpha sqrt(2^(1/beta) - 1)); and its peak times the width
 * parameter squared per unit flux (GAUSS: 1 / (2 pi); MOFFAT: (beta - 1) / pi). */
SW_RM_FN double sw_rm_width_scale(int32_t method, double beta)
{
    if (method != SW_REFINE_MOFFAT)
        return 1.0;
    return sqrt((exp2(1.0 / beta) - 1.0) / (2.0 * log(2.0)));
}

SW_RM_FN double sw_rm_peak_scale(int32_t method, double beta)
{
    return method == SW_REFINE_MOFFAT ? (beta - 1.0) / 3.141592653589793
                                      : 1.0 / (2.0 * 3.141592653589793);
}

/* The sums of one fit pass: the normal matrix J^T W J (upper triangle, row by row), J^T W r,
 * chi^2 = sum w r^2, the merit (the negative log-likelihood below) and the pixels used. */
typedef struct sw_rm_acc {
    double a[SW_RM_NA];
    double g[SW_RM_NPAR];
    double chi2, merit;
    int32_t n, masked;
} sw_rm_acc;

/*
 * The likelihood of one pixel with sample d (above the background b) and model m: in electrons a
 * pixel holds D = g (d + b) + r^2 and is taken as Poisson with mean M = g max(m + b, 0) + r^2 (at
 * least 1), the read noise folded in as a Poisson offset of r^2; then var = M / g^2 is the
 * detector model's variance, w = 1 / var, J^T W r is the log-likelihood's gradient and J^T W J
 * its Fisher information. The merit is the negative log-likelihood less a constant,
 * sum M - D - D ln(M / max(D, 1)) (about chi^2 / 2 near the solution), so that
 * Levenberg-Marquardt's acceptance test and its steps belong to one function and it converges
 * to the maximum-likelihood point (a chi^2 whose weights move with the model has its minimum
 * elsewhere, and the steps would zig-zag between the two). Gives w, r = d - m and the pixel's
 * merit term.
 */
SW_RM_FN double sw_rm_pixel_merit(const sw_rm_frame *f, double m, double d, double b, double *w,
                                  double *r)
{
    const double var = sw_rm_variance(f, m, b);
    *w = 1.0 / var;
    *r = d - m;
    const double g2 = f->gain * f->gain, rn2 = f->read_noise * f->read_noise;
    const double M = var * g2, D = f->gain * (d + b) + rn2;
    return M - D - D * log(M / (D > 1.0 ? D : 1.0));
}

/*
 * x - ln(1 + x) (x > -1) to float's relative precision: for |x| < 1/4 by its series
 * x^2 (1/2 - x/3 + x^2/4 - ... + x^10/12), whose remainder is below 2 0.25^11 / 13 = 3.7e-8 of
 * the sum (the direct form would lose it to cancellation: x = 1e-3 keeps 3 of float's 7
 * digits); otherwise directly (x - ln(1 + x) >= 0.026 there).
 */
SW_RM_FN float sw_rm_xlog1p(float x)
{
    if (fabsf(x) < 0.25f) {
        float q = 1.0f / 12.0f;
        q = 1.0f / 11.0f - x * q;
        q = 0.1f - x * q;
        q = 1.0f / 9.0f - x * q;
        q = 0.125f - x * q;
        q = 1.0f / 7.0f - x * q;
        q = 1.0f / 6.0f - x * q;
        q = 0.2f - x * q;
        q = 0.25f - x * q;
        q = 1.0f / 3.0f - x * q;
        q = 0.5f - x * q;
        return x * x * q;
    }
    return x - logf(1.0f + x);
}

/* A stamp pixel as the fit reads it: the sample d and background b (sw_rm_fsample), the data
 * in electrons D = g (d + b) + r^2 and 1 / D (0 below 1 electron); d is NaN for a pixel not
 * valid. Made once per spot (sw_rs_fit keeps a stamp's in its scratch). */
typedef struct sw_rm_fpix {
    float d, b, D, inv_D;
} sw_rm_fpix;

SW_RM_FN void sw_rm_fpix_make(const sw_rm_frame *f, int32_t x, int32_t y, float level,
                              sw_rm_fpix *px)
{
    float d, b;
    if (!sw_rm_fsample(f, x, y, level, &d, &b)) {
        px->d = NAN;
        px->b = px->D = px->inv_D = 0.0f;
        return;
    }
    px->d = d;
    px->b = b;
    px->D = f->f_gain * (d + b) + f->f_rn2;
    px->inv_D = px->D >= 1.0f ? SW_RM_RCP(px->D) : 0.0f;
}

/* One worker's sums of a fit pass in float (sw_rs_fit reduces them over the workers and takes
 * them to double into a sw_rm_acc): the fields of sw_rm_acc; the merit with its Kahan
 * compensation (merit - merit_c is the sum), carried to double before the workers' reduction. */
typedef struct sw_rm_facc {
    float a[SW_RM_NA];
    float g[SW_RM_NPAR];
    float chi2, merit, merit_c;
    int32_t n;
} sw_rm_facc;

/*
 * One pixel's contribution to the one-star fit, in float: the stamp pixel px (sw_rm_fpix: sample
 * d above the background b, D, 1 / D) and the profile's value P on the pixel (unit flux) with its
 * derivatives by the star's x, y and the width (GAUSS: products of sw_rm_axis_f factors; MOFFAT:
 * sw_rm_moffat_pixel); the model is m = F P + B. The weight, residual and merit are
 * sw_rm_pixel_merit's; the merit term M - D - D ln(M / D) is evaluated as D (x - ln(1 + x)), x = (M
 * - D) / D (sw_rm_xlog1p), which keeps it to ~1e-6 of its own size where M and D are large and
 * close.
 *
 * Why float is enough: a position's rounding error is that of the gradient's sums over the
 * Fisher information's square root, ~1e-7 of the position's error bar for a faint star and up to
 * ~1e-3 for a star of 1e7 e- (sw_rm_lm_next stops at that floor); the merit (the
 * Levenberg-Marquardt acceptance test) is summed with Kahan's compensation, so that a fit whose
 * chi^2 is large (a model that does not fit a bright star) still resolves its steps. Why float at
 * all: on the GPUs the fit is per-pixel work, where a double operation costs two float ones and a
 * double log, exp or division several times more.
 */
SW_RM_FN void sw_rm_fit_pixel(const sw_rm_frame *f, float F, float B, const sw_rm_fpix *px, float P,
                              float dPx, float dPy, float dPs, sw_rm_facc *acc)
{
    const float J[SW_RM_NPAR] = {F * dPx, F * dPy, P, F * dPs, 1.0f};
    const float m = F * P + B;
    const float var = sw_rm_fvariance(f, m, px->b);
    const float w = SW_RM_RCP(var), r = px->d - m;
    /* in electrons: M = var g^2 (at least 1), D = g (d + b) + r^2 (sw_rm_fpix_make) */
    const float M = var * f->f_gain * f->f_gain, D = px->D;
    const float t = D >= 1.0f ? D * sw_rm_xlog1p((M - D) * px->inv_D) : M - D - D * logf(M);
    const float ty = t - acc->merit_c, tm = acc->merit + ty; /* Kahan summation */
    acc->merit_c = (tm - acc->merit) - ty;
    acc->merit = tm;
    int k = 0;
    for (int i = 0; i < SW_RM_NPAR; ++i) {
        const float wj = w * J[i];
        acc->g[i] += wj * r;
        for (int j = i; j < SW_RM_NPAR; ++j)
            acc->a[k++] += wj * J[j];
    }
    acc->chi2 += w * r * r;
    acc->n++;
}

/* Cholesky solve of the 5 x 5 system (A + lambda diag A) x = g (A from the upper triangle), in
 * double; inv, when not NULL, receives the inverse of A + lambda diag A (row-major 5 x 5): the
 * fit's covariance at its end. 0 when the matrix is not positive definite. */
SW_RM_FN int sw_rm_solve(const double *a, double lambda, const double *g, double *x, double *inv)
{
    /* L (lower, L L^T = the matrix) overwrites the matrix in place: 15 values, not 2 x 25 */
    double L[SW_RM_NA] = {0};    /* zeroed: cppcheck cannot follow the triangular fill */
    double il[SW_RM_NPAR] = {0}; /* 1 / L(i, i): one division per row */
#define SW_RM_L(i, j) L[(i) * ((i) + 1) / 2 + (j)] /* row i, column j <= i */
    SW_RM_ROLLED
    for (int i = 0; i < SW_RM_NPAR; ++i)
        for (int j = 0; j <= i; ++j) {
            /* a holds the upper triangle row by row: element (j, i), j <= i */
            const int k = j * SW_RM_NPAR - j * (j - 1) / 2 + (i - j);
            double s = i == j ? a[k] * (1.0 + lambda) : a[k];
            for (int q = 0; q < j; ++q)
                s -= SW_RM_L(i, q) * SW_RM_L(j, q);
            if (i == j) {
                if (!(s > 0.0) || !isfinite(s))
                    return 0;
                SW_RM_L(i, i) = sqrt(s);
                il[i] = 1.0 / SW_RM_L(i, i);
            } else {
                SW_RM_L(i, j) = s * il[j];
            }
        }
    /* L y = g, L^T x = y */
    double y[SW_RM_NPAR] = {0};
    SW_RM_ROLLED
    for (int i = 0; i < SW_RM_NPAR; ++i) {
        double s = g[i];
        for (int q = 0; q < i; ++q)
            s -= SW_RM_L(i, q) * y[q];
        y[i] = s * il[i];
    }
    SW_RM_ROLLED
    for (int i = SW_RM_NPAR - 1; i >= 0; --i) {
        double s = y[i];
        for (int q = i + 1; q < SW_RM_NPAR; ++q)
            s -= SW_RM_L(q, i) * x[q];
        x[i] = s * il[i];
    }
    if (inv) {
        SW_RM_ROLLED
        for (int c = 0; c < SW_RM_NPAR; ++c) {
            double col[SW_RM_NPAR] = {0};
            for (int i = 0; i < SW_RM_NPAR; ++i) {
                double s = i == c ? 1.0 : 0.0;
                for (int q = 0; q < i; ++q)
                    s -= SW_RM_L(i, q) * y[q];
                y[i] = s * il[i];
            }
            for (int i = SW_RM_NPAR - 1; i >= 0; --i) {
                double s = y[i];
                for (int q = i + 1; q < SW_RM_NPAR; ++q)
                    s -= SW_RM_L(q, i) * col[q];
                col[i] = s * il[i];
            }
            for (int i = 0; i < SW_RM_NPAR; ++i)
                inv[i * SW_RM_NPAR + c] = col[i];
        }
    }
#undef SW_RM_L
    return 1;
}

/*
 * The Levenberg-Marquardt step of the one-star fit: (A + lambda diag A) x = g solved in float
 * after scaling A to a unit diagonal (D A D with D = diag A^-1/2: the scaled matrix's entries are
 * correlations, at most 1 in size, so float's relative rounding is the solve's), by Cholesky.
 * A step needs no more: its rounding (~1e-6 of the step) only changes how the fit approaches the
 * point where g = 0, which the sums decide; the covariance at the end is sw_rm_solve's, in
 * double. 0 when the matrix is not positive definite.
 */
SW_RM_FN int sw_rm_step(const double *a, double lambda, const double *g, double *x)
{
    float d[SW_RM_NPAR], L[SW_RM_NA], y[SW_RM_NPAR], il[SW_RM_NPAR]; /* il: 1 / L(i, i) */
    for (int i = 0; i < SW_RM_NPAR; ++i) {
        const double aii = a[i * SW_RM_NPAR - i * (i - 1) / 2];
        if (!(aii > 0.0) || !isfinite(aii))
            return 0;
        d[i] = SW_RM_RCP(sqrtf((float)aii));
    }
#define SW_RM_L(i, j) L[(i) * ((i) + 1) / 2 + (j)] /* row i, column j <= i */
    for (int i = 0; i < SW_RM_NPAR; ++i)
        for (int j = 0; j <= i; ++j) {
            /* a holds the upper triangle row by row: element (j, i), j <= i */
            const int k = j * SW_RM_NPAR - j * (j - 1) / 2 + (i - j);
            float s = i == j ? 1.0f + (float)lambda : (float)a[k] * d[i] * d[j];
            for (int q = 0; q < j; ++q)
                /* cppcheck-suppress uninitvar ; L's rows q < j are filled (triangular order) */
                s -= SW_RM_L(i, q) * SW_RM_L(j, q);
            if (i == j) {
                if (!(s > 0.0f) || !isfinite(s))
                    return 0;
                SW_RM_L(i, i) = sqrtf(s);
                il[i] = SW_RM_RCP(SW_RM_L(i, i));
            } else {
                SW_RM_L(i, j) = s * il[j];
            }
        }
    for (int i = 0; i < SW_RM_NPAR; ++i) {
        float s = (float)g[i] * d[i];
        for (int q = 0; q < i; ++q)
            /* cppcheck-suppress uninitvar ; y[q < i] are set (forward order) */
            s -= SW_RM_L(i, q) * y[q];
        /* cppcheck-suppress uninitvar ; il[i] was set with L(i, i) */
        y[i] = s * il[i];
    }
    for (int i = SW_RM_NPAR - 1; i >= 0; --i) {
        float s = y[i];
        for (int q = i + 1; q < SW_RM_NPAR; ++q)
            s -= SW_RM_L(q, i) * y[q];
        y[i] = s * il[i]; /* y[q > i] now hold the solution (scaled) */
    }
#undef SW_RM_L
    for (int i = 0; i < SW_RM_NPAR; ++i)
        x[i] = (double)(y[i] * d[i]);
    return 1;
}

/*
 * Levenberg-Marquardt over passes (Press et al., Numerical Recipes, 15.5) on the merit of
 * sw_rm_fit_pixel (the negative Poisson log-likelihood): the backend evaluates the sums at
 * `trial`, then sw_rm_lm_next decides. A pass whose merit is below the lowest one accepted so
 * far, or above it by no more than the merit's rounding, is accepted (lambda / 10), otherwise
 * refused (lambda x 10) and the step retaken from the best point. The rounding allowed is 4e-6
 * of chi^2, or for a bright star that of the merit's terms, 32 eps sqrt(sum w m^2) (eps = 2^-24,
 * m the model; sum w m^2, sw_rm_wm2, is about the star's electrons and the sky's: 1.9e-3 at 1e6
 * e-, where the merit was measured to scatter by ~5e-4 between points 1e-8 px apart); it is
 * measured from the lowest merit, not the last accepted one, so accepted passes cannot ratchet
 * the merit up. The weights are those of the model being evaluated (Poisson + read noise), so
 * A = J^T W J at the solution is the Fisher information and its inverse the covariance.
 * Converged: when the Gauss-Newton step from the best point is shorter than 3e-4 of the error
 * bars (x^T A x < 1e-7), or than the float sums' rounding of it where that is larger,
 * x^T A x < 64 eps^2 sum w m^2 (above ~5e4 e-; 2.3e-7, 5e-4 of the error bars, at 1e6 e-, where
 * it was measured at 1.3e-7; 1.5e-3 of the error bars at 1e7 e-); when the step just evaluated,
 * accepted or not, moved x and y by less than 1e-5 px and flux, width and constant by less than
 * 1e-5 of themselves (a damped step of a model that does not fit, MOFFAT on a bright Gaussian
 * star, whose merit changes by less than its rounding: it would otherwise creep to max_iter); or
 * lambda above 1e10 (no step lowers the merit). The best point is the answer; the step is not
 * taken.
 */
typedef struct sw_rm_lm {
    double best[SW_RM_NPAR], trial[SW_RM_NPAR];
    sw_rm_acc acc; /* the sums at best */
    double lambda;
    double low; /* the lowest merit accepted */
    int32_t have, iterations, converged, failed;
} sw_rm_lm;

SW_RM_FN void sw_rm_lm_init(sw_rm_lm *s, const double *p0)
{
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < SW_RM_NPAR; ++i)
        s->trial[i] = p0[i];
    s->lambda = 1e-3;
}

/* Takes the sums at s->trial; 1 when the fit is over (converged or failed), else sets the next
 * trial. max_iter: passes allowed. */
/* The float sums' rounding scale of a fit at p with sums a: sum w m^2 = F^2 sum w P^2
 * + 2 F B sum w P + B^2 sum w (a[9], a[11], a[14]: the normal matrix's (F, F), (F, B), (B, B)),
 * about the star's electrons and the stamp's sky. */
SW_RM_FN double sw_rm_wm2(const double *p, const double *a)
{
    const double F = p[2], B = p[4];
    const double v = F * F * a[9] + 2.0 * F * B * a[11] + B * B * a[14];
    return v > 0.0 ? v : 0.0;
}

/* x^T A x for A's upper triangle a. */
SW_RM_FN double sw_rm_quad(const double *a, const double *x)
{
    double q = 0.0;
    for (int i = 0, k = 0; i < SW_RM_NPAR; ++i)
        for (int j = i; j < SW_RM_NPAR; ++j, ++k)
            q += (i == j ? 1.0 : 2.0) * x[i] * a[k] * x[j];
    return q;
}

SW_RM_FN int sw_rm_lm_next(sw_rm_lm *s, const sw_rm_acc *acc, int32_t max_iter)
{
    const double eps = 5.9604644775390625e-8; /* 2^-24, float's rounding */
    s->iterations++;
    int accepted = 0;
    if (!s->have) {
        if (acc->n < SW_RM_NPAR + 1 || !isfinite(acc->chi2) || !isfinite(acc->merit)) {
            s->failed = 1;
            return 1;
        }
        accepted = 1;
    } else if (isfinite(acc->chi2) && isfinite(acc->merit)) {
        /* the merit's rounding: 4e-6 of chi^2 (measured ~2e-6 where the model does not fit), or
         * for a bright star its terms' (a model value's rounding, eps m, in each: 32 eps
         * sqrt(sum w m^2) in all; measured ~8 eps sqrt(...)) */
        const double tol =
            fmax(4e-6 * s->acc.chi2, 32.0 * eps * sqrt(sw_rm_wm2(s->best, s->acc.a)));
        accepted = acc->merit < s->low + tol;
    }
    /* the step just evaluated was below what the fit resolves: x and y by < 1e-5 px, flux,
     * width and constant by < 1e-5 of themselves (a damped step, or a model that does not fit,
     * whose merit changes less than its rounding) */
    const int tiny = s->have && fabs(s->trial[0] - s->best[0]) < 1e-5 &&
                     fabs(s->trial[1] - s->best[1]) < 1e-5 &&
                     fabs(s->trial[2] - s->best[2]) < 1e-5 * fabs(s->best[2]) &&
                     fabs(s->trial[3] - s->best[3]) < 1e-5 * s->best[3] &&
                     fabs(s->trial[4] - s->best[4]) < 1e-5 * (fabs(s->best[4]) + 1.0);
    if (accepted) {
        for (int i = 0; i < SW_RM_NPAR; ++i)
            s->best[i] = s->trial[i];
        s->acc = *acc;
        s->low = s->have && s->low < acc->merit ? s->low : acc->merit;
        s->have = 1;
        s->lambda = fmax(s->lambda * 0.1, 1e-9);
    } else {
        s->lambda *= 10.0;
        if (s->lambda > 1e10) {
            s->converged = 1;
            return 1;
        }
    }
    if (tiny) {
        s->converged = 1;
        return 1;
    }
    if (s->iterations >= max_iter)
        return 1;
    double step[SW_RM_NPAR] = {0}, gn[SW_RM_NPAR] = {0};
    while (!sw_rm_step(s->acc.a, s->lambda, s->acc.g, step)) {
        s->lambda = s->lambda < 1e-6 ? 1e-3 : s->lambda * 10.0;
        if (s->lambda > 1e10) {
            s->failed = 1;
            return 1;
        }
    }
    /* converged: the Gauss-Newton step from the best point (the step itself when lambda <= 1e-3,
     * within 0.1 % of it) is below 3e-4 of the error bars or the rounding of the sums */
    const double *newton = s->lambda <= 1e-3 ? step : gn;
    if (s->lambda <= 1e-3 || sw_rm_step(s->acc.a, 0.0, s->acc.g, gn)) {
        const double q = sw_rm_quad(s->acc.a, newton);
        if (q < 1e-7 || q < 64.0 * eps * eps * sw_rm_wm2(s->best, s->acc.a)) {
            s->converged = 1;
            return 1;
        }
    }
    for (int i = 0; i < SW_RM_NPAR; ++i)
        s->trial[i] = s->best[i] + step[i];
    /* the width stays positive: at most halved in one step */
    if (s->trial[3] < 0.5 * s->best[3])
        s->trial[3] = 0.5 * s->best[3];
    return 0;
}

/*
 * The starting point of the fit from the stamp: B0 the mean of the stamp's border pixels, F0 the
 * stamp's sum above B0, the width from the largest sample P above B0 by the profile's peak
 * (sw_rm_peak_scale: GAUSS F / (2 pi sigma^2), MOFFAT F (beta - 1) / (pi alpha^2)), clamped so
 * that the Gaussian-equivalent width (sw_rm_width_scale) is 0.5 .. radius / 2. Returns 0 when F0
 * or P is not positive.
 */
SW_RM_FN int sw_rm_fit_start(double x, double y, double sum, double peak, double border_sum,
                             int32_t border_n, int32_t n, int32_t radius, int32_t method,
                             double beta, double *p0)
{
    double b0 = border_n > 0 ? border_sum / border_n : 0.0;
    double f0 = sum - b0 * n, pk = peak - b0;
    if (!(f0 > 0.0) || !(pk > 0.0))
        return 0;
    const double k = sw_rm_width_scale(method, beta);
    double s0 = sqrt(f0 * sw_rm_peak_scale(method, beta) / pk);
    const double smin = 0.5 / k, smax = 0.5 * radius / k;
    s0 = s0 < smin ? smin : (s0 > smax ? smax : s0);
    p0[0] = x;
    p0[1] = y;
    p0[2] = f0;
    p0[3] = s0;
    p0[4] = b0;
    return 1;
}

#endif

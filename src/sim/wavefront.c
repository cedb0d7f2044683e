/*
 * Sampled wavefronts (sim_sh.h): an optical path difference map on a regular grid of the pupil
 * plane, its bilinear interpolation, and FITS input/output.
 *
 * Sample (i, k) lies at u = u0 + i s, v = v0 + k s. At a point (u, v) with fractional grid
 * coordinates a = (u - u0) / s, b = (v - v0) / s, i = floor(a), k = floor(b), ta = a - i,
 * tb = b - k, the bilinear interpolant is
 *     W = (1 - ta)(1 - tb) W[i, k] + ta (1 - tb) W[i+1, k] + (1 - ta) tb W[i, k+1] + ta tb W[i+1,
 * k+1], which reproduces any plane W = c0 + c1 u + c2 v exactly (up to rounding). Neighbours of
 * zero weight are not read, so a point on a grid line next to NaN samples ("no light there") still
 * gets the finite value.
 */
#include "core/core_internal.h"
#include "spotwave/io.h"
#include "spotwave/sim_sh.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

sw_status sw_wavefront_alloc(sw_context *ctx, int32_t nu, int32_t nv, double spacing_um,
                             sw_wavefront *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_wavefront_alloc: out is NULL");
    memset(out, 0, sizeof *out);
    if (nu < 1 || nv < 1 || nu > SW_IMAGE_MAX_DIM || nv > SW_IMAGE_MAX_DIM ||
        (int64_t)nu * (int64_t)nv > SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_EINVAL,
                       "wavefront: %dx%d samples is not a valid size (1 to %d per side, at most "
                       "%lld samples)",
                       (int)nu, (int)nv, SW_IMAGE_MAX_DIM, SW_IMAGE_MAX_PIXELS);
    if (!(spacing_um > 0.0) || !isfinite(spacing_um))
        return sw_fail(ctx, SW_EINVAL,
                       "wavefront: sample spacing %g um must be positive and finite", spacing_um);
    size_t count = (size_t)nu * (size_t)nv;
    double *p = calloc(count, sizeof *p);
    if (!p)
        return sw_fail(ctx, SW_ENOMEM, "wavefront: cannot allocate %dx%d samples (%zu bytes)",
                       (int)nu, (int)nv, count * sizeof *p);
    out->nu = nu;
    out->nv = nv;
    out->spacing_um = spacing_um;
    out->u0_um = -0.5 * (double)(nu - 1) * spacing_um;
    out->v0_um = -0.5 * (double)(nv - 1) * spacing_um;
    out->opd_um = p;
    return SW_OK;
}

void sw_wavefront_free(sw_wavefront *w)
{
    if (!w)
        return;
    free(w->opd_um);
    memset(w, 0, sizeof *w);
}

/* a + t (b - a) written so that a zero weight never reads its sample (NaN there stays out). */
static double lerp(double a, double b, double t)
{
    if (t == 0.0)
        return a;
    if (t == 1.0)
        return b;
    return (1.0 - t) * a + t * b;
}

/* Splits a fractional grid coordinate f in [0, n - 1] into a cell index and the weight of its
 * upper neighbour. */
static void cell(double f, int32_t n, int32_t *i, double *t)
{
    int32_t k = (int32_t)floor(f);
    if (k > n - 2)
        k = n - 2;
    if (k < 0)
        k = 0;
    *i = k;
    *t = f - (double)k;
}

double sw_wavefront_sample(const sw_wavefront *w, double u, double v)
{
    if (!w || !w->opd_um || w->nu < 1 || w->nv < 1 || !(w->spacing_um > 0.0))
        return NAN;
    double a = (u - w->u0_um) / w->spacing_um;
    double b = (v - w->v0_um) / w->spacing_um;
    /* Written so that NaN coordinates fail the tests too. */
    if (!(a >= 0.0 && a <= (double)(w->nu - 1) && b >= 0.0 && b <= (double)(w->nv - 1)))
        return NAN;
    int32_t i, k;
    double ta, tb;
    cell(a, w->nu, &i, &ta);
    cell(b, w->nv, &k, &tb);
    const int32_t i1 = i + 1 < w->nu ? i + 1 : i;
    const int32_t k1 = k + 1 < w->nv ? k + 1 : k;
    const double *r0 = w->opd_um + (size_t)k * (size_t)w->nu;
    const double *r1 = w->opd_um + (size_t)k1 * (size_t)w->nu;
    if (tb == 0.0)
        return lerp(r0[i], r0[i1], ta);
    if (tb == 1.0)
        return lerp(r1[i], r1[i1], ta);
    return lerp(lerp(r0[i], r0[i1], ta), lerp(r1[i], r1[i1], ta), tb);
}

sw_status sw_wavefront_read_fits(sw_context *ctx, const char *path, double spacing_um,
                                 double scale_um, sw_wavefront *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_wavefront_read_fits: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path || !*path)
        return sw_fail(ctx, SW_EINVAL, "sw_wavefront_read_fits: no file name given");
    if (!(spacing_um > 0.0) || !isfinite(spacing_um))
        return sw_fail(ctx, SW_EINVAL,
                       "%s: phase screen sample spacing %g um must be positive and finite", path,
                       spacing_um);
    if (!(scale_um > 0.0) || !isfinite(scale_um))
        return sw_fail(ctx, SW_EINVAL,
                       "%s: phase screen scale %g um per file unit must be positive and finite",
                       path, scale_um);
    sw_frames fr = {0, NULL};
    sw_status st = sw_fits_read(ctx, path, &fr);
    if (st != SW_OK)
        return st;
    if (fr.count != 1) {
        int32_t n = fr.count;
        sw_frames_free(&fr);
        return sw_fail(ctx, SW_EFORMAT, "%s: a cube of %d frames; a phase screen is one 2-D image",
                       path, (int)n);
    }
    const sw_image *img = &fr.frames[0];
    sw_wavefront w;
    st = sw_wavefront_alloc(ctx, img->width, img->height, spacing_um, &w);
    if (st != SW_OK) {
        sw_frames_free(&fr);
        return st;
    }
    for (int32_t k = 0; k < img->height; k++) {
        double *row = w.opd_um + (size_t)k * (size_t)w.nu;
        sw_load_row(sw_image_row(img, k), img->type, img->width, row);
        for (int32_t i = 0; i < img->width; i++) {
            double value = row[i];
            if (!isfinite(value)) {
                sw_frames_free(&fr);
                sw_wavefront_free(&w);
                return sw_fail(ctx, SW_EFORMAT,
                               "%s: pixel (%d, %d) of the phase screen is %s; a phase screen "
                               "must be finite everywhere",
                               path, (int)i, (int)k, isnan(value) ? "NaN" : "infinite");
            }
            row[i] = value * scale_um;
            if (!isfinite(row[i])) {
                sw_frames_free(&fr);
                sw_wavefront_free(&w);
                return sw_fail(ctx, SW_ERANGE,
                               "%s: pixel (%d, %d) = %g times the scale %g um overflows", path,
                               (int)i, (int)k, value, scale_um);
            }
        }
    }
    sw_frames_free(&fr);
    *out = w;
    return SW_OK;
}

sw_status sw_wavefront_write_fits(sw_context *ctx, const char *path, const sw_wavefront *w)
{
    if (!path || !*path)
        return sw_fail(ctx, SW_EINVAL, "sw_wavefront_write_fits: no file name given");
    if (!w || !w->opd_um)
        return sw_fail(ctx, SW_EINVAL, "%s: no wavefront given (NULL)", path);
    if (w->nu < 1 || w->nv < 1 || w->nu > SW_IMAGE_MAX_DIM || w->nv > SW_IMAGE_MAX_DIM ||
        (int64_t)w->nu * (int64_t)w->nv > SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_EINVAL, "%s: wavefront size %dx%d is not valid", path, (int)w->nu,
                       (int)w->nv);
    sw_image img;
    sw_status st = sw_image_alloc(ctx, w->nu, w->nv, SW_PIX_F32, &img);
    if (st != SW_OK)
        return st;
    for (int32_t k = 0; k < w->nv; k++) {
        float *row = (float *)sw_image_row(&img, k);
        const double *src = w->opd_um + (size_t)k * (size_t)w->nu;
        for (int32_t i = 0; i < w->nu; i++) {
            if (isfinite(src[i]) && fabs(src[i]) > (double)FLT_MAX) {
                sw_image_free(&img);
                return sw_fail(ctx, SW_ERANGE,
                               "%s: sample (%d, %d) = %g um does not fit a FITS float image", path,
                               (int)i, (int)k, src[i]);
            }
            row[i] = (float)src[i];
        }
    }
    st = sw_fits_write(ctx, path, &img, 1);
    sw_image_free(&img);
    return st;
}

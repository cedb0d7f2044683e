/*
 * Star lists for the star simulator (seed 004 Sec. III.A, "Star generation" and "Star brightness
 * computation"): allocation, magnitudes (seed Eq. 1), catalogue CSVs, random fields, the sky
 * mode's pinhole projection and the truth table.
 */
#include "sim/sim_internal.h"
#include "spotwave/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SW_DEG (3.14159265358979323846 / 180.0)

/* ------------------------------------------------------------------ lists */

sw_status sw_stars_alloc(sw_context *ctx, int64_t count, sw_stars *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_stars_alloc: out is NULL");
    memset(out, 0, sizeof *out);
    if (count < 0)
        return sw_fail(ctx, SW_EINVAL, "sw_stars_alloc: count %lld is negative", (long long)count);
    if (count == 0)
        return SW_OK;
    size_t bytes;
    if ((uint64_t)count > (uint64_t)SIZE_MAX || !sw_mul_ok((size_t)count, sizeof(double), &bytes))
        return sw_fail(ctx, SW_ENOMEM, "sw_stars_alloc: %lld stars do not fit in memory",
                       (long long)count);
    SW_TRY(sw_memory_check(ctx, (uint64_t)count, 4 * sizeof(double), "a list of %lld stars",
                           (long long)count));
    out->x = calloc((size_t)count, sizeof(double));
    out->y = calloc((size_t)count, sizeof(double));
    out->flux = calloc((size_t)count, sizeof(double));
    out->mag = malloc(bytes);
    if (!out->x || !out->y || !out->flux || !out->mag) {
        sw_stars_free(out);
        return sw_fail(ctx, SW_ENOMEM, "out of memory allocating %lld stars", (long long)count);
    }
    for (int64_t i = 0; i < count; i++)
        out->mag[i] = NAN;
    out->count = count;
    return SW_OK;
}

void sw_stars_free(sw_stars *s)
{
    if (!s)
        return;
    free(s->x);
    free(s->y);
    free(s->flux);
    free(s->mag);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------------ magnitudes (seed Eq. 1) */

double sw_mag_to_flux(double mag, double zero_point, double ratio)
{
    /* g(m) = A * r^(-m). Pogson's r = 10^0.4 is taken as 10^(-0.4 m): exact powers of ten for
     * whole multiples of 5 magnitudes. */
    if (!(ratio > 0.0))
        return zero_point * pow(10.0, -0.4 * mag);
    return zero_point * pow(ratio, -mag);
}

double sw_flux_to_mag(double flux, double zero_point, double ratio)
{
    if (!(zero_point > 0.0) || !(flux >= 0.0))
        return NAN;
    if (flux == 0.0)
        return INFINITY;
    if (!(ratio > 0.0))
        return -2.5 * log10(flux / zero_point);
    return -log(flux / zero_point) / log(ratio);
}

/* ------------------------------------------------------------------ catalogues */

/* Flux of every row of a catalogue table: from flux_e when present, else from mag. Sets
 * *mag_out to the mag column or NULL. Checks finiteness and sign. */
static sw_status table_fluxes(sw_context *ctx, const char *path, const sw_table *t,
                              double zero_point, double ratio, double *flux, const double **mag_out)
{
    int32_t cf = sw_table_column(t, "flux_e"), cm = sw_table_column(t, "mag");
    if (cf < 0 && cm < 0)
        return sw_fail(ctx, SW_EFORMAT,
                       "%s: the catalogue needs a column \"flux_e\" (e-) or \"mag\" (magnitude)",
                       path);
    *mag_out = cm >= 0 ? t->cols[cm] : NULL;
    for (int64_t r = 0; r < t->nrows; r++) {
        if (cm >= 0 && !isfinite(t->cols[cm][r]))
            return sw_fail(ctx, SW_EFORMAT, "%s: data row %lld: mag %g is not finite", path,
                           (long long)(r + 1), t->cols[cm][r]);
        double f;
        if (cf >= 0) {
            f = t->cols[cf][r];
            if (!isfinite(f) || f < 0.0)
                return sw_fail(ctx, SW_EFORMAT,
                               "%s: data row %lld: flux_e %g must be finite and non-negative", path,
                               (long long)(r + 1), f);
        } else {
            f = sw_mag_to_flux(t->cols[cm][r], zero_point, ratio);
            if (!isfinite(f))
                return sw_fail(ctx, SW_EFORMAT,
                               "%s: data row %lld: mag %g gives a flux that is not finite "
                               "(zero point %g)",
                               path, (long long)(r + 1), t->cols[cm][r], zero_point);
        }
        flux[r] = f;
    }
    return SW_OK;
}

static sw_status check_zero_point(sw_context *ctx, double zero_point, double ratio)
{
    if (!isfinite(zero_point) || !(zero_point > 0.0))
        return sw_fail(ctx, SW_EINVAL,
                       "zero point %g (e- of a magnitude-0 star) must be positive "
                       "and finite",
                       zero_point);
    if (!isfinite(ratio) || ratio == 1.0)
        return sw_fail(ctx, SW_EINVAL,
                       "magnitude ratio %g must be finite and not 1 (0 or less: Pogson's 10^0.4)",
                       ratio);
    return SW_OK;
}

sw_status sw_stars_read_csv(sw_context *ctx, const char *path, double zero_point, double ratio,
                            sw_stars *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_stars_read_csv: out is NULL");
    memset(out, 0, sizeof *out);
    sw_status st = check_zero_point(ctx, zero_point, ratio);
    if (st != SW_OK)
        return st;
    sw_table t;
    if ((st = sw_csv_read(ctx, path, &t)) != SW_OK)
        return st;
    int32_t cx = sw_table_column(&t, "x_px"), cy = sw_table_column(&t, "y_px");
    if (cx < 0 || cy < 0) {
        st = sw_fail(
            ctx, SW_EFORMAT, "%s: the catalogue needs columns \"x_px\" and \"y_px\"%s", path,
            (sw_table_column(&t, "ra_deg") >= 0) ? " (ra_deg/dec_deg: use the sky mode)" : "");
        sw_table_free(&t);
        return st;
    }
    sw_stars s;
    if ((st = sw_stars_alloc(ctx, t.nrows, &s)) != SW_OK) {
        sw_table_free(&t);
        return st;
    }
    const double *mag = NULL;
    st = table_fluxes(ctx, path, &t, zero_point, ratio, s.flux, &mag);
    for (int64_t r = 0; st == SW_OK && r < t.nrows; r++) {
        double x = t.cols[cx][r], y = t.cols[cy][r];
        if (!isfinite(x) || !isfinite(y)) {
            st = sw_fail(ctx, SW_EFORMAT, "%s: data row %lld: position (%g, %g) is not finite",
                         path, (long long)(r + 1), x, y);
            break;
        }
        s.x[r] = x;
        s.y[r] = y;
        if (mag)
            s.mag[r] = mag[r];
    }
    sw_table_free(&t);
    if (st != SW_OK) {
        sw_stars_free(&s);
        return st;
    }
    *out = s;
    return SW_OK;
}

sw_status sw_stars_random(sw_context *ctx, int64_t count, int32_t width, int32_t height,
                          double mag_min, double mag_max, double zero_point, double ratio,
                          uint64_t seed, sw_stars *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_stars_random: out is NULL");
    memset(out, 0, sizeof *out);
    if (width <= 0 || height <= 0 || width > SW_IMAGE_MAX_DIM || height > SW_IMAGE_MAX_DIM)
        return sw_fail(ctx, SW_EINVAL, "random stars: image size %dx%d is not valid (1 to %d)",
                       width, height, SW_IMAGE_MAX_DIM);
    if (!isfinite(mag_min) || !isfinite(mag_max) || mag_min > mag_max)
        return sw_fail(ctx, SW_EINVAL,
                       "random stars: magnitude range %g,%g must be finite with min <= max",
                       mag_min, mag_max);
    sw_status st = check_zero_point(ctx, zero_point, ratio);
    if (st != SW_OK)
        return st;
    if ((st = sw_stars_alloc(ctx, count, out)) != SW_OK)
        return st;
    for (int64_t i = 0; i < count; i++) {
        sw_rng4 p = sw_rng_draw(seed, SW_RNG_STREAM_POSITIONS, (uint64_t)i);
        sw_rng4 m = sw_rng_draw(seed, SW_RNG_STREAM_MAGNITUDES, (uint64_t)i);
        out->x[i] = -0.5 + (double)width * sw_rng_u01(p.v[0], p.v[1]);
        out->y[i] = -0.5 + (double)height * sw_rng_u01(p.v[2], p.v[3]);
        out->mag[i] = mag_min + (mag_max - mag_min) * sw_rng_u01(m.v[0], m.v[1]);
        out->flux[i] = sw_mag_to_flux(out->mag[i], zero_point, ratio);
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ sky mode */

sw_status sw_camera_check(sw_context *ctx, const sw_camera *cam)
{
    if (!cam)
        return sw_fail(ctx, SW_EINVAL, "camera is NULL");
    if (!isfinite(cam->ra_deg) || !isfinite(cam->dec_deg) || !isfinite(cam->roll_deg) ||
        fabs(cam->dec_deg) > 90.0)
        return sw_fail(ctx, SW_EINVAL,
                       "camera attitude RA %g, Dec %g, roll %g: angles must be finite and "
                       "|Dec| <= 90 degrees",
                       cam->ra_deg, cam->dec_deg, cam->roll_deg);
    if (!(cam->focal_mm > 0.0) || !isfinite(cam->focal_mm))
        return sw_fail(ctx, SW_EINVAL, "camera focal length %g mm must be positive and finite",
                       cam->focal_mm);
    if (!(cam->pixel_um > 0.0) || !isfinite(cam->pixel_um))
        return sw_fail(ctx, SW_EINVAL, "camera pixel size %g um must be positive and finite",
                       cam->pixel_um);
    if (cam->width <= 0 || cam->height <= 0 || cam->width > SW_IMAGE_MAX_DIM ||
        cam->height > SW_IMAGE_MAX_DIM)
        return sw_fail(ctx, SW_EINVAL, "camera image size %dx%d is not valid (1 to %d per side)",
                       cam->width, cam->height, SW_IMAGE_MAX_DIM);
    return SW_OK;
}

/* The camera frame: rows ex, ey, ez (boresight) in equatorial Cartesian coordinates, and the
 * scale f / p in pixels. */
typedef struct cam_frame {
    double ex[3], ey[3], ez[3];
    double scale, cx, cy;
} cam_frame;

static void cam_frame_make(const sw_camera *cam, cam_frame *f)
{
    const double a = cam->ra_deg * SW_DEG, d = cam->dec_deg * SW_DEG, r = cam->roll_deg * SW_DEG;
    const double ca = cos(a), sa = sin(a), cd = cos(d), sd = sin(d), cr = cos(r), sr = sin(r);
    const double b[3] = {cd * ca, cd * sa, sd};      /* boresight */
    const double west[3] = {sa, -ca, 0.0};           /* -east: +x at roll 0 */
    const double south[3] = {sd * ca, sd * sa, -cd}; /* -north: +y at roll 0 */
    for (int k = 0; k < 3; k++) {
        /* x = cos(roll) x0 - sin(roll) y0, y = sin(roll) x0 + cos(roll) y0 */
        f->ex[k] = cr * west[k] - sr * south[k];
        f->ey[k] = sr * west[k] + cr * south[k];
        f->ez[k] = b[k];
    }
    f->scale = cam->focal_mm * 1000.0 / cam->pixel_um;
    f->cx = 0.5 * (double)(cam->width - 1);
    f->cy = 0.5 * (double)(cam->height - 1);
}

static int cam_frame_project(const cam_frame *f, double ra_deg, double dec_deg, double *x,
                             double *y)
{
    const double a = ra_deg * SW_DEG, d = dec_deg * SW_DEG;
    const double s[3] = {cos(d) * cos(a), cos(d) * sin(a), sin(d)};
    const double X = s[0] * f->ex[0] + s[1] * f->ex[1] + s[2] * f->ex[2];
    const double Y = s[0] * f->ey[0] + s[1] * f->ey[1] + s[2] * f->ey[2];
    const double Z = s[0] * f->ez[0] + s[1] * f->ez[1] + s[2] * f->ez[2];
    if (!(Z > 0.0)) {
        *x = *y = NAN;
        return 0;
    }
    *x = f->cx + f->scale * X / Z;
    *y = f->cy + f->scale * Y / Z;
    return 1;
}

int sw_camera_project(const sw_camera *cam, double ra_deg, double dec_deg, double *x, double *y)
{
    cam_frame f;
    cam_frame_make(cam, &f);
    return cam_frame_project(&f, ra_deg, dec_deg, x, y);
}

sw_status sw_stars_from_sky(sw_context *ctx, const sw_camera *cam, int64_t n, const double *ra_deg,
                            const double *dec_deg, const double *flux, const double *mag,
                            double margin_px, sw_stars *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_stars_from_sky: out is NULL");
    memset(out, 0, sizeof *out);
    sw_status st = sw_camera_check(ctx, cam);
    if (st != SW_OK)
        return st;
    if (n < 0 || (n > 0 && (!ra_deg || !dec_deg || !flux)))
        return sw_fail(ctx, SW_EINVAL, "sw_stars_from_sky: %lld stars with NULL arrays",
                       (long long)n);
    if (!isfinite(margin_px) || margin_px < 0.0)
        return sw_fail(ctx, SW_EINVAL, "sky mode: margin %g px must be finite and non-negative",
                       margin_px);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(ra_deg[i]) || !isfinite(dec_deg[i]) || fabs(dec_deg[i]) > 90.0 ||
            !isfinite(flux[i]) || flux[i] < 0.0)
            return sw_fail(ctx, SW_EINVAL,
                           "sky star %lld: RA %g, Dec %g, flux %g: angles must be finite with "
                           "|Dec| <= 90 and the flux finite and non-negative",
                           (long long)i, ra_deg[i], dec_deg[i], flux[i]);
    cam_frame f;
    cam_frame_make(cam, &f);
    const double x_lo = -0.5 - margin_px, x_hi = (double)cam->width - 0.5 + margin_px;
    const double y_lo = -0.5 - margin_px, y_hi = (double)cam->height - 0.5 + margin_px;
    int64_t kept = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t i = 0; i < n; i++) {
            double x, y;
            if (!cam_frame_project(&f, ra_deg[i], dec_deg[i], &x, &y))
                continue;
            if (!(x >= x_lo && x < x_hi && y >= y_lo && y < y_hi))
                continue;
            if (pass == 1) {
                out->x[kept] = x;
                out->y[kept] = y;
                out->flux[kept] = flux[i];
                out->mag[kept] = mag ? mag[i] : NAN;
            }
            kept++;
        }
        if (pass == 0) {
            if ((st = sw_stars_alloc(ctx, kept, out)) != SW_OK)
                return st;
            kept = 0;
        }
    }
    sw_log(ctx, SW_LOG_DEBUG, "sky mode: %lld of %lld stars in the field of view", (long long)kept,
           (long long)n);
    return SW_OK;
}

sw_status sw_stars_read_sky_csv(sw_context *ctx, const char *path, const sw_camera *cam,
                                double zero_point, double ratio, double margin_px, sw_stars *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_stars_read_sky_csv: out is NULL");
    memset(out, 0, sizeof *out);
    sw_status st = check_zero_point(ctx, zero_point, ratio);
    if (st == SW_OK)
        st = sw_camera_check(ctx, cam);
    if (st != SW_OK)
        return st;
    sw_table t;
    if ((st = sw_csv_read(ctx, path, &t)) != SW_OK)
        return st;
    int32_t ca = sw_table_column(&t, "ra_deg"), cd = sw_table_column(&t, "dec_deg");
    double *flux = NULL;
    const double *mag = NULL;
    if (ca < 0 || cd < 0) {
        st = sw_fail(ctx, SW_EFORMAT,
                     "%s: a sky catalogue needs columns \"ra_deg\" and \"dec_deg\"", path);
    } else if (!(flux = malloc((size_t)(t.nrows > 0 ? t.nrows : 1) * sizeof *flux))) {
        st = sw_fail(ctx, SW_ENOMEM, "%s: out of memory", path);
    } else {
        st = table_fluxes(ctx, path, &t, zero_point, ratio, flux, &mag);
    }
    for (int64_t r = 0; st == SW_OK && r < t.nrows; r++)
        if (!isfinite(t.cols[ca][r]) || !isfinite(t.cols[cd][r]) || fabs(t.cols[cd][r]) > 90.0)
            st = sw_fail(ctx, SW_EFORMAT,
                         "%s: data row %lld: RA %g, Dec %g: angles must be finite, |Dec| <= 90",
                         path, (long long)(r + 1), t.cols[ca][r], t.cols[cd][r]);
    if (st == SW_OK)
        st =
            sw_stars_from_sky(ctx, cam, t.nrows, t.cols[ca], t.cols[cd], flux, mag, margin_px, out);
    free(flux);
    sw_table_free(&t);
    return st;
}

/* ------------------------------------------------------------------ truth table */

sw_status sw_stars_write_truth(sw_context *ctx, const char *path, const sw_stars *stars,
                               int32_t width, int32_t height, int64_t *written)
{
    if (written)
        *written = 0;
    if (!stars || stars->count < 0 ||
        (stars->count > 0 && (!stars->x || !stars->y || !stars->flux || !stars->mag)))
        return sw_fail(ctx, SW_EINVAL, "sw_stars_write_truth: the star list is not valid");
    if (width <= 0 || height <= 0)
        return sw_fail(ctx, SW_EINVAL, "sw_stars_write_truth: image size %dx%d", width, height);
    static const char *const names[4] = {"x_px", "y_px", "flux_e", "mag"};
    sw_table t;
    sw_status st = sw_table_create(ctx, 4, names, &t);
    if (st != SW_OK)
        return st;
    int64_t n = 0;
    for (int64_t i = 0; i < stars->count && st == SW_OK; i++) {
        double x = stars->x[i], y = stars->y[i];
        if (!(x >= -0.5 && x < (double)width - 0.5 && y >= -0.5 && y < (double)height - 0.5))
            continue;
        const double row[4] = {x, y, stars->flux[i], stars->mag[i]};
        st = sw_table_append(ctx, &t, row);
        n++;
    }
    if (st == SW_OK)
        st = sw_csv_write(ctx, path, &t);
    sw_table_free(&t);
    if (st == SW_OK && written)
        *written = n;
    return st;
}

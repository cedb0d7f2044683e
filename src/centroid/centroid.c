/*
 * centroid: Shack-Hartmann centre-of-gravity extraction (seed 000) — the API, the validation and
 * the CPU implementation. The GPU twin is centroid_cuda.cu; the arithmetic both share is in
 * centroid_model.h.
 *
 * CPU algorithm (seed 000 Alg. 1 reorganised for the cache and the vector unit): one task per
 * (frame, row of lenslets). The task walks the rows of its lenslet row once, adding every pixel
 * into two per-column sums over the whole width of the grid,
 *     S0[x] = sum_y I'(x, y),   S1[x] = sum_y (y - ys) I'(x, y),
 * an inner loop over contiguous pixels that the compiler vectorises. Each lenslet then takes its
 * moments from its columns (seed Eq. 6): m00 = sum S0, m10 = sum (x - xs) S0, m01 = sum S1, and
 * its centroid from Eq. (7). Tasks run in parallel with OpenMP.
 */
#include "centroid/centroid_internal.h"
#include "centroid/centroid_model.h"

/* The generic per-lenslet measurement (centroid_method.h), a group of one thread per lenslet. */
#define SW_CMB_FN           static
#define SW_CMB_SUM(R, s, k) ((void)(R), (void)(s), (void)(k))
#define SW_CMB_MAX(R, s, k) ((void)(R), (void)(s), (void)(k))
#define SW_CMB_USUM(R, x)   ((void)(R), (x))
#define SW_CMB_UMAX(R, x)   ((void)(R), (x))
#define SW_CMB_UMAX64(R, x) ((void)(R), (x))
#define SW_CMB_TOP16(R, t)  ((void)(R), (void)(t))
#define SW_CMB_SYNC(R)      ((void)(R))
#define SW_CMB_UNROLL
#define SW_CMB_WREAL   double
#define SW_CMB_WEXP(x) exp(x)
#include "centroid/centroid_method.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef SW_HAVE_CUDA
#define SW_CENTROID_HAVE_GPU 1
#else
#define SW_CENTROID_HAVE_GPU 0
#endif

void sw_centroid_params_default(sw_centroid_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    sw_sh_geometry_default(&p->geometry);
    p->width = 160;
    p->height = 160;
    p->type = SW_PIX_U8;
    p->max_frames = 1;
    p->path = SW_CENTROID_AUTO;
    p->threshold_mode = SW_THRESHOLD_NONE;
    p->threshold_kind = SW_THRESHOLD_ABSOLUTE;
    p->threshold = 0.0;
    p->gamma = 1.0;
    p->window = 0;
    p->slope_layout = SW_SLOPES_BLOCKS;
    p->method = SW_CENTROID_METHOD_COG;
    p->local_k = 3.0;
}

static const char *const method_names[] = {"cog",       "wcog",        "local",
                                           "brightest", "correlation", "quadcell"};

const char *sw_centroid_method_string(sw_centroid_method m)
{
    if ((int)m < 0 || (int)m > 5)
        return "?";
    return method_names[m];
}

sw_status sw_centroid_method_parse(const char *text, sw_centroid_method *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "centroid method: NULL argument");
    for (int i = 0; i < 6; i++)
        if (strcmp(text, method_names[i]) == 0) {
            *out = (sw_centroid_method)i;
            return SW_OK;
        }
    return sw_fail(NULL, SW_EINVAL,
                   "unknown centroid method '%s' (cog, wcog, local, brightest, correlation or "
                   "quadcell)",
                   text);
}

const char *sw_centroid_status_string(int status)
{
    static const char *const names[] = {"ok",   "masked", "nonfinite", "empty",
                                        "left", "cut",    "faint",     "saturated"};
    if (status < 0 || status > 7)
        return "?";
    return names[status];
}

static const char *const path_names[] = {"auto", "host", "device", "copy", "mapped"};

const char *sw_centroid_path_string(sw_centroid_path path)
{
    if ((int)path < 0 || (int)path > 4)
        return "?";
    return path_names[path];
}

sw_status sw_centroid_path_parse(const char *text, sw_centroid_path *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "centroid path: NULL argument");
    for (int i = 0; i < 5; i++)
        if (strcmp(text, path_names[i]) == 0) {
            *out = (sw_centroid_path)i;
            return SW_OK;
        }
    return sw_fail(NULL, SW_EINVAL,
                   "unknown centroid memory path '%s' (auto, host, device, copy or mapped)", text);
}

/* ------------------------------------------------------------------ create / destroy */

static sw_status check_finite_array(sw_context *ctx, const float *a, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(a[i]))
            return sw_fail(ctx, SW_ERANGE, "%s entry %zu is not finite (%g)", what, i,
                           (double)a[i]);
    return SW_OK;
}

static float *copy_floats(const float *src, size_t n)
{
    float *d = malloc(n * sizeof *d);
    if (d)
        memcpy(d, src, n * sizeof *d);
    return d;
}

/* A parameter that must be finite and >= 0 (NaN refused). */
static sw_status check_nonneg(sw_context *ctx, double v, const char *what)
{
    if (!isfinite(v) || v < 0.0)
        return sw_fail(ctx, SW_EINVAL, "centroid: %s %g must be finite and >= 0", what, v);
    return SW_OK;
}

/* The method's parameters, the detector and the checks (centroid.h). */
static sw_status check_method(sw_context *ctx, const sw_centroid_params *p)
{
    if ((int)p->method < 0 || (int)p->method > 5)
        return sw_fail(ctx, SW_EINVAL, "centroid: unknown method %d", (int)p->method);
    sw_status st;
    if ((st = check_nonneg(ctx, p->fwhm_px, "fwhm_px")) != SW_OK ||
        (st = check_nonneg(ctx, p->local_k, "local_k")) != SW_OK ||
        (st = check_nonneg(ctx, p->quad_gain_px, "quad_gain_px")) != SW_OK ||
        (st = check_nonneg(ctx, p->gain_e_per_adu, "gain_e_per_adu")) != SW_OK ||
        (st = check_nonneg(ctx, p->read_noise_e, "read_noise_e")) != SW_OK ||
        (st = check_nonneg(ctx, p->min_snr, "min_snr")) != SW_OK ||
        (st = check_nonneg(ctx, p->max_shift_px, "max_shift_px")) != SW_OK ||
        (st = check_nonneg(ctx, p->edge_px, "edge_px")) != SW_OK ||
        (st = check_nonneg(ctx, p->edge_fraction, "edge_fraction")) != SW_OK)
        return st;
    if (p->edge_fraction > 1.0)
        return sw_fail(ctx, SW_EINVAL, "centroid: edge_fraction %g is above 1", p->edge_fraction);
    if (p->read_noise_e > 0.0 && p->gain_e_per_adu <= 0.0)
        return sw_fail(ctx, SW_EINVAL,
                       "centroid: a read noise (%g e-) needs the gain (e-/ADU) to be given",
                       p->read_noise_e);
    switch (p->method) {
    case SW_CENTROID_METHOD_WCOG:
        if (!(p->fwhm_px > 0.0))
            return sw_fail(ctx, SW_EINVAL,
                           "centroid: the wcog method needs the weight's FWHM (fwhm_px > 0), not "
                           "%g",
                           p->fwhm_px);
        if (p->wcog_iterations < 0 || p->wcog_iterations > 100)
            return sw_fail(ctx, SW_EINVAL, "centroid: wcog_iterations %d is out of range (0..100)",
                           p->wcog_iterations);
        break;
    case SW_CENTROID_METHOD_BRIGHTEST:
        if (p->brightest_n < 1)
            return sw_fail(ctx, SW_EINVAL,
                           "centroid: the brightest method needs brightest_n >= 1, not %d",
                           p->brightest_n);
        break;
    case SW_CENTROID_METHOD_CORRELATION:
        if (!p->corr_reference)
            return sw_fail(ctx, SW_EINVAL,
                           "centroid: the correlation method needs a reference image "
                           "(corr_reference, width x height)");
        if (p->corr_search_px < 0 || p->corr_search_px > SW_CENTROID_MAX_PITCH_PX)
            return sw_fail(ctx, SW_EINVAL, "centroid: corr_search_px %d is out of range (0..%g)",
                           p->corr_search_px, SW_CENTROID_MAX_PITCH_PX);
        break;
    case SW_CENTROID_METHOD_QUADCELL:
        if (!(p->quad_gain_px > 0.0) && !(p->fwhm_px > 0.0))
            return sw_fail(ctx, SW_EINVAL,
                           "centroid: the quadcell method needs its gain (quad_gain_px > 0) or "
                           "the spot's FWHM (fwhm_px > 0)");
        break;
    default: break;
    }
    return SW_OK;
}

static sw_status check_params(sw_context *ctx, const sw_centroid_params *p)
{
    const sw_sh_geometry *g = &p->geometry;
    if (p->type != SW_PIX_U8 && p->type != SW_PIX_U16 && p->type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL, "centroid: pixel type %s is not supported (u8, u16 or f32)",
                       sw_pixel_type_string(p->type));
    if (p->width < 1 || p->height < 1 || p->width > SW_IMAGE_MAX_DIM ||
        p->height > SW_IMAGE_MAX_DIM)
        return sw_fail(ctx, SW_EINVAL, "centroid: frame size %dx%d is out of range (1..%d)",
                       p->width, p->height, SW_IMAGE_MAX_DIM);
    if (!isfinite(g->pitch_px) || g->pitch_px < 1.0)
        return sw_fail(ctx, SW_EINVAL, "centroid: pitch %g px is below 1 pixel", g->pitch_px);
    if (g->pitch_px > SW_CENTROID_MAX_PITCH)
        return sw_fail(ctx, SW_EINVAL, "centroid: pitch %g px is above the largest supported (%g)",
                       g->pitch_px, SW_CENTROID_MAX_PITCH);
    sw_status st = sw_sh_geometry_check(ctx, g, p->width, p->height);
    if (st != SW_OK)
        return st;
    if (p->max_frames < 1 || (int64_t)p->max_frames * p->height > SW_IMAGE_MAX_DIM)
        return sw_fail(ctx, SW_EINVAL,
                       "centroid: max_frames %d is out of range (1..%d for %d-row frames: a batch "
                       "is one image of at most %d rows)",
                       p->max_frames, SW_IMAGE_MAX_DIM / p->height, p->height, SW_IMAGE_MAX_DIM);
    if ((int)p->threshold_mode < 0 || (int)p->threshold_mode > 2)
        return sw_fail(ctx, SW_EINVAL, "centroid: unknown threshold mode %d",
                       (int)p->threshold_mode);
    if ((int)p->threshold_kind < 0 || (int)p->threshold_kind > 1)
        return sw_fail(ctx, SW_EINVAL, "centroid: unknown threshold kind %d",
                       (int)p->threshold_kind);
    if (p->threshold_mode != SW_THRESHOLD_NONE) {
        if (!isfinite(p->threshold))
            return sw_fail(ctx, SW_EINVAL, "centroid: threshold %g is not finite", p->threshold);
        if (p->threshold_kind == SW_THRESHOLD_FRACTION && (p->threshold < 0 || p->threshold > 1))
            return sw_fail(ctx, SW_EINVAL,
                           "centroid: threshold fraction %g is outside [0, 1] (a fraction of the "
                           "lenslet maximum)",
                           p->threshold);
    }
    if (!isfinite(p->gamma) || p->gamma <= 0)
        return sw_fail(ctx, SW_EINVAL, "centroid: gamma %g must be positive and finite", p->gamma);
    if (p->window < 0 || p->window > SW_IMAGE_MAX_DIM)
        return sw_fail(ctx, SW_EINVAL, "centroid: window %d is out of range (0..%d)", p->window,
                       SW_IMAGE_MAX_DIM);
    if (p->lut && p->type == SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL,
                       "centroid: a look-up table needs integer pixels (u8 or u16), not f32");
    if ((int)p->slope_layout < 0 || (int)p->slope_layout > 1)
        return sw_fail(ctx, SW_EINVAL, "centroid: unknown slope layout %d", (int)p->slope_layout);
    if ((int)p->path < 0 || (int)p->path > 4)
        return sw_fail(ctx, SW_EINVAL, "centroid: unknown memory path %d", (int)p->path);
    if (!isfinite(p->saturation))
        return sw_fail(ctx, SW_EINVAL,
                       "centroid: saturation level %g is not finite (0: the pixel type's full "
                       "scale; a negative value: no saturation check)",
                       p->saturation);
    return check_method(ctx, p);
}

/* The saturation level in force (centroid.h): the type's full scale by default, -1 for none. */
static double saturation_level(const sw_centroid_params *p)
{
    if (p->saturation < 0.0)
        return -1.0;
    if (p->saturation > 0.0)
        return p->saturation;
    return p->type == SW_PIX_U8 ? 255.0 : p->type == SW_PIX_U16 ? 65535.0 : -1.0;
}

/* The comparisons of the level (centroid_internal.h): integer and float forms that give the
 * same answer as raw >= level in exact arithmetic. */
static void set_saturation(sw_centroid_plan *plan)
{
    const double level = saturation_level(&plan->p);
    plan->sat_level = level;
    plan->sat_on = level > 0.0;
    plan->sat_u = UINT32_MAX;
    plan->sat_f = NAN;
    if (!plan->sat_on)
        return;
    const double c = ceil(level);
    plan->sat_u = c >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)c;
    float f = (float)level;
    if ((double)f < level)
        f = nextafterf(f, INFINITY);
    plan->sat_f = f;
}

/* The windowed column/row bounds of every lenslet; fails when a window empties a region. */
static sw_status make_regions(sw_context *ctx, sw_centroid_plan *plan)
{
    const sw_sh_geometry *g = &plan->p.geometry;
    int32_t w = plan->p.window;
    for (int32_t ix = 0; ix < plan->nx; ix++) {
        int32_t xb, xe, yb, ye;
        sw_sh_region(g, ix, 0, &xb, &xe, &yb, &ye);
        plan->xs[ix] = xb + w;
        plan->xe[ix] = xe - w;
        if (plan->xs[ix] >= plan->xe[ix])
            return sw_fail(ctx, SW_EINVAL,
                           "centroid: window %d leaves no pixel in lenslet column %d (%d px wide)",
                           w, ix, xe - xb);
    }
    for (int32_t iy = 0; iy < plan->ny; iy++) {
        int32_t xb, xe, yb, ye;
        sw_sh_region(g, 0, iy, &xb, &xe, &yb, &ye);
        plan->ys[iy] = yb + w;
        plan->ye[iy] = ye - w;
        if (plan->ys[iy] >= plan->ye[iy])
            return sw_fail(ctx, SW_EINVAL,
                           "centroid: window %d leaves no pixel in lenslet row %d (%d px high)", w,
                           iy, ye - yb);
    }
    plan->col0 = plan->xs[0];
    plan->col1 = plan->xe[plan->nx - 1];
    int32_t nc = plan->col1 - plan->col0;
    plan->col_ix = malloc((size_t)nc * sizeof *plan->col_ix);
    if (!plan->col_ix)
        return sw_fail(ctx, SW_ENOMEM, "centroid: out of memory");
    for (int32_t c = 0; c < nc; c++)
        plan->col_ix[c] = -1;
    for (int32_t ix = 0; ix < plan->nx; ix++)
        for (int32_t x = plan->xs[ix]; x < plan->xe[ix]; x++)
            plan->col_ix[x - plan->col0] = ix;
    return SW_OK;
}

/*
 * The generic path's parameters (centroid_method.h) from the plan's: which path runs, the largest
 * region, the correlation's search range (every region must keep an inner area), the template.
 */
static sw_status setup_method(sw_context *ctx, sw_centroid_plan *plan)
{
    const sw_centroid_params *p = &plan->p;
    sw_cmb_params *m = &plan->mp;
    plan->fast = p->method == SW_CENTROID_METHOD_COG && p->gain_e_per_adu == 0.0 &&
                 p->read_noise_e == 0.0 && p->min_snr == 0.0 && p->max_shift_px == 0.0 &&
                 !p->peak_border && p->edge_px == 0.0 && p->edge_fraction == 0.0;
    int32_t wmin = INT32_MAX, hmin = INT32_MAX;
    plan->wmax = plan->hmax = 1;
    for (int32_t ix = 0; ix < plan->nx; ix++) {
        int32_t w = plan->xe[ix] - plan->xs[ix];
        plan->wmax = w > plan->wmax ? w : plan->wmax;
        wmin = w < wmin ? w : wmin;
    }
    for (int32_t iy = 0; iy < plan->ny; iy++) {
        int32_t h = plan->ye[iy] - plan->ys[iy];
        plan->hmax = h > plan->hmax ? h : plan->hmax;
        hmin = h < hmin ? h : hmin;
    }
    memset(m, 0, sizeof *m);
    m->method = (int)p->method;
    m->mode = (int)p->threshold_mode;
    m->fraction = plan->fraction;
    m->thr = (float)p->threshold;
    m->gamma = (float)p->gamma;
    m->frac = p->threshold;
    m->sigma_w = p->fwhm_px / 2.354820045030949; /* FWHM = 2 sqrt(2 ln 2) sigma */
    m->iters = p->wcog_iterations;
    m->local_k = p->local_k;
    m->nbright = p->brightest_n;
    m->qgain = p->quad_gain_px > 0.0 ? p->quad_gain_px
                                     : 1.2533141373155003 * m->sigma_w /* sqrt(pi / 2) */;
    m->have_det = p->gain_e_per_adu > 0.0;
    m->inv_gain = m->have_det ? 1.0 / p->gain_e_per_adu : 0.0;
    m->rn2 = m->have_det
                 ? (p->read_noise_e / p->gain_e_per_adu) * (p->read_noise_e / p->gain_e_per_adu)
                 : 0.0;
    m->min_snr = p->min_snr;
    m->max_shift = p->max_shift_px;
    m->edge_px = p->edge_px;
    m->edge_frac = p->edge_fraction;
    m->peak_border = p->peak_border != 0;
    m->drop = p->drop_saturated != 0;
    size_t nscratch = 0;
    if (p->method == SW_CENTROID_METHOD_CORRELATION) {
        int32_t smin = wmin < hmin ? wmin : hmin;
        m->search = p->corr_search_px > 0 ? p->corr_search_px : (smin / 4 > 1 ? smin / 4 : 1);
        if (smin - 2 * m->search < 1)
            return sw_fail(ctx, SW_EINVAL,
                           "centroid: a correlation search of +-%d px leaves no inner area in a "
                           "%d px region (the smallest; at least 2 S + 1 px needed)",
                           m->search, smin);
        size_t npix = (size_t)p->width * (size_t)p->height;
        sw_status st = check_finite_array(ctx, p->corr_reference, npix, "correlation reference");
        if (st != SW_OK)
            return st;
        if (!(plan->corr_ref = copy_floats(p->corr_reference, npix)))
            return sw_fail(ctx, SW_ENOMEM, "centroid: out of memory");
        plan->p.corr_reference = plan->corr_ref;
        nscratch = (size_t)(2 * m->search + 1) * (size_t)(2 * m->search + 1);
    } else {
        plan->p.corr_reference = NULL;
        if (p->method == SW_CENTROID_METHOD_WCOG)
            nscratch = (size_t)plan->wmax + (size_t)plan->hmax; /* the separable weight */
    }
    plan->nscratch = nscratch;
    /* the region, the template's region and the work copy (CORRELATION), the scratch */
    plan->cpu_gen_bytes =
        (size_t)plan->wmax * (size_t)plan->hmax * sizeof(float) * (plan->corr_ref ? 3 : 1);
    /* WCOG's re-centring passes' tables are 2 (w + h) SW_CMB_WREAL, doubles here (the GPU's
     * are floats: nscratch doubles) */
    plan->cpu_gen_bytes =
        (plan->cpu_gen_bytes + 7) / 8 * 8 +
        nscratch * sizeof(double) * (p->method == SW_CENTROID_METHOD_WCOG ? 2 : 1);
    return SW_OK;
}

static void default_reference(sw_centroid_plan *plan)
{
    for (int32_t iy = 0; iy < plan->ny; iy++)
        for (int32_t ix = 0; ix < plan->nx; ix++) {
            int64_t l = (int64_t)iy * plan->nx + ix;
            sw_sh_reference(&plan->p.geometry, ix, iy, &plan->ref_x[l], &plan->ref_y[l]);
        }
}

sw_status sw_centroid_create(sw_context *ctx, const sw_centroid_params *p, sw_centroid_plan **out)
{
    if (!ctx || !p || !out)
        return sw_fail(ctx, SW_EINVAL, "sw_centroid_create: NULL argument");
    *out = NULL;
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;

    int cuda = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    sw_centroid_path path = p->path;
    if (path == SW_CENTROID_AUTO)
        path = cuda ? SW_CENTROID_COPY : SW_CENTROID_HOST;
    if (path != SW_CENTROID_HOST && !cuda)
        return sw_fail(ctx, SW_ENODEV,
                       "centroid: the %s memory path needs a CUDA context; this one runs on the "
                       "CPU (use the host path)",
                       sw_centroid_path_string(path));
    if (path != SW_CENTROID_HOST && !SW_CENTROID_HAVE_GPU)
        return sw_fail(ctx, SW_EUNSUPPORTED, "centroid: built without CUDA");

    size_t npix = (size_t)p->width * (size_t)p->height;
    if (p->dark && (st = check_finite_array(ctx, p->dark, npix, "dark frame")) != SW_OK)
        return st;
    if (p->flat && (st = check_finite_array(ctx, p->flat, npix, "flat field")) != SW_OK)
        return st;
    size_t nlut = p->type == SW_PIX_U8 ? 256 : 65536;
    if (p->lut && (st = check_finite_array(ctx, p->lut, nlut, "look-up table")) != SW_OK)
        return st;

    sw_centroid_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return sw_fail(ctx, SW_ENOMEM, "centroid: out of memory");
    plan->ctx = ctx;
    plan->p = *p;
    plan->path = path;
    plan->nx = p->geometry.nx;
    plan->ny = p->geometry.ny;
    plan->nl = plan->nx * plan->ny;
    plan->threads = sw_context_threads(ctx);
    plan->kernel_us = -1.0;
    size_t nl = (size_t)plan->nl;

    plan->xs = malloc((size_t)plan->nx * sizeof(int32_t));
    plan->xe = malloc((size_t)plan->nx * sizeof(int32_t));
    plan->ys = malloc((size_t)plan->ny * sizeof(int32_t));
    plan->ye = malloc((size_t)plan->ny * sizeof(int32_t));
    plan->ref_x = malloc(nl * sizeof(double));
    plan->ref_y = malloc(nl * sizeof(double));
    plan->slope_k = malloc(nl * sizeof(int32_t));
    plan->slope_l = malloc(nl * sizeof(int32_t));
    if (p->geometry.valid)
        plan->valid = malloc(nl);
    if (p->dark)
        plan->dark = copy_floats(p->dark, npix);
    if (p->flat)
        plan->flat = copy_floats(p->flat, npix);
    if (p->lut)
        plan->lut = copy_floats(p->lut, nlut);
    if (!plan->xs || !plan->xe || !plan->ys || !plan->ye || !plan->ref_x || !plan->ref_y ||
        !plan->slope_k || !plan->slope_l || (p->geometry.valid && !plan->valid) ||
        (p->dark && !plan->dark) || (p->flat && !plan->flat) || (p->lut && !plan->lut)) {
        sw_centroid_destroy(plan);
        return sw_fail(ctx, SW_ENOMEM, "centroid: out of memory");
    }
    if (plan->valid)
        memcpy(plan->valid, p->geometry.valid, nl);
    plan->p.geometry.valid = plan->valid;
    plan->p.dark = plan->dark;
    plan->p.flat = plan->flat;
    plan->p.lut = plan->lut;

    if ((st = make_regions(ctx, plan)) != SW_OK) {
        sw_centroid_destroy(plan);
        return st;
    }
    plan->nslopes = 0;
    for (size_t l = 0; l < nl; l++) {
        if (sw_sh_is_valid(&plan->p.geometry, (int64_t)l)) {
            plan->slope_k[l] = plan->nslopes;
            plan->slope_l[plan->nslopes++] = (int32_t)l;
        } else {
            plan->slope_k[l] = -1;
        }
    }
    default_reference(plan);

    int conditioned =
        p->lut || p->dark || p->flat || p->threshold_mode != SW_THRESHOLD_NONE || p->gamma != 1.0;
    plan->exact = p->type != SW_PIX_F32 && !conditioned;
    plan->fraction =
        p->threshold_mode != SW_THRESHOLD_NONE && p->threshold_kind == SW_THRESHOLD_FRACTION;
    plan->p.drop_saturated = p->drop_saturated != 0;
    set_saturation(plan);
    if ((st = setup_method(ctx, plan)) != SW_OK) {
        sw_centroid_destroy(plan);
        return st;
    }

    if (path == SW_CENTROID_HOST && !plan->fast) {
        int nt = plan->threads > 0 ? plan->threads : 1;
        plan->cpu_gen = malloc((size_t)nt * plan->cpu_gen_bytes);
        if (!plan->cpu_gen) {
            sw_centroid_destroy(plan);
            return sw_fail(ctx, SW_ENOMEM, "centroid: out of memory for the CPU scratch");
        }
    }
    if (path == SW_CENTROID_HOST) {
        size_t nc = (size_t)(plan->col1 - plan->col0);
        int nt = plan->threads > 0 ? plan->threads : 1;
        plan->cpu_acc = malloc((size_t)nt * 5 * nc * sizeof(double));
        if (!plan->cpu_acc) {
            sw_centroid_destroy(plan);
            return sw_fail(ctx, SW_ENOMEM, "centroid: out of memory for the CPU scratch");
        }
    }
#ifdef SW_HAVE_CUDA
    else if ((st = sw_centroid_gpu_create(plan)) != SW_OK) {
        sw_centroid_destroy(plan);
        return st;
    }
#endif
    sw_log(ctx, SW_LOG_DEBUG,
           "centroid plan: %dx%d lenslets, pitch %g px, %s path, %s sums, saturation level %g%s",
           plan->nx, plan->ny, p->geometry.pitch_px, sw_centroid_path_string(path),
           plan->exact ? "exact integer" : "floating-point", plan->sat_level,
           plan->p.drop_saturated ? " (saturated lenslets dropped)" : "");
    *out = plan;
    return SW_OK;
}

void sw_centroid_destroy(sw_centroid_plan *plan)
{
    if (!plan)
        return;
#ifdef SW_HAVE_CUDA
    if (plan->gpu)
        sw_centroid_gpu_destroy(plan);
#endif
    free(plan->xs);
    free(plan->xe);
    free(plan->ys);
    free(plan->ye);
    free(plan->col_ix);
    free(plan->valid);
    free(plan->dark);
    free(plan->flat);
    free(plan->lut);
    free(plan->slope_l);
    free(plan->slope_k);
    free(plan->ref_x);
    free(plan->ref_y);
    free(plan->cpu_acc);
    free(plan->cpu_gen);
    free(plan->corr_ref);
    free(plan);
}

int sw_centroid_plan_fast(const sw_centroid_plan *plan)
{
    return plan ? plan->fast : 0;
}

sw_centroid_path sw_centroid_plan_path(const sw_centroid_plan *plan)
{
    return plan ? plan->path : SW_CENTROID_AUTO;
}

double sw_centroid_plan_saturation(const sw_centroid_plan *plan)
{
    return plan ? plan->sat_level : -1.0;
}

int32_t sw_centroid_plan_lenslets(const sw_centroid_plan *plan)
{
    return plan ? plan->nl : 0;
}

int32_t sw_centroid_plan_slopes(const sw_centroid_plan *plan)
{
    return plan ? plan->nslopes : 0;
}

int32_t sw_centroid_plan_slope_lenslet(const sw_centroid_plan *plan, int32_t k)
{
    if (!plan || k < 0 || k >= plan->nslopes)
        return -1;
    return plan->slope_l[k];
}

void sw_centroid_enable_timing(sw_centroid_plan *plan, int on)
{
    if (plan)
        plan->timing = on != 0;
}

double sw_centroid_kernel_us(const sw_centroid_plan *plan)
{
    return plan ? plan->kernel_us : -1.0;
}

sw_status sw_centroid_set_bands(sw_centroid_plan *plan, int32_t bands)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_centroid_set_bands: NULL plan");
    if (bands < 0 || bands > SW_CENTROID_MAX_BANDS)
        return sw_fail(plan->ctx, SW_EINVAL, "centroid: %d bands: expected 0 to %d", bands,
                       SW_CENTROID_MAX_BANDS);
    plan->bands = bands;
    return SW_OK;
}

int32_t sw_centroid_plan_bands(const sw_centroid_plan *plan)
{
    if (!plan || plan->path != SW_CENTROID_COPY || !plan->fast || !plan->copy_overlap)
        return 1;
    /* 0 (default): the whole frame. Measured on an H200 (bench_centroid --e2e, issue 25): bands
     * cost more than they overlap at every Mocci et al. Table 1 size (w_P = 1000, d = 20: 43 us
     * whole, 53 / 75 / 109 us in 2 / 4 / 8 bands): each band adds a copy and a flag copy to
     * queue, a few microseconds of host time each, more than a band's transfer saves */
    const int32_t n = plan->bands == 0 ? 1 : plan->bands;
    return n < plan->ny ? n : plan->ny;
}

/* ------------------------------------------------------------------ results and reference */

static void *result_array(sw_context *ctx, size_t bytes, sw_memory memory)
{
    if (memory == SW_MEM_HOST)
        return calloc(1, bytes);
#ifdef SW_HAVE_CUDA
    return sw_centroid_gpu_alloc(ctx, bytes, memory);
#else
    (void)ctx;
    (void)bytes;
    return NULL;
#endif
}

static void result_array_free(void *p, sw_memory memory)
{
    if (!p)
        return;
    if (memory == SW_MEM_HOST) {
        free(p);
        return;
    }
#ifdef SW_HAVE_CUDA
    sw_centroid_gpu_free(p, memory);
#endif
}

sw_status sw_centroid_result_alloc(sw_centroid_plan *plan, int32_t frames, sw_memory memory,
                                   sw_centroid_result *out)
{
    if (!plan || !out)
        return sw_fail(plan ? plan->ctx : NULL, SW_EINVAL, "sw_centroid_result_alloc: NULL");
    sw_context *ctx = plan->ctx;
    if (frames < 1)
        return sw_fail(ctx, SW_EINVAL, "centroid result: %d frames (at least 1)", frames);
    if (memory != SW_MEM_HOST && memory != SW_MEM_PINNED && memory != SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL, "centroid result: unknown memory kind %d", (int)memory);
    if (memory != SW_MEM_HOST && sw_context_backend(ctx) != SW_BACKEND_CUDA)
        return sw_fail(ctx, SW_ENODEV, "centroid result: %s memory needs a CUDA context",
                       memory == SW_MEM_PINNED ? "pinned" : "device");
    memset(out, 0, sizeof *out);
    const size_t n = (size_t)frames * (size_t)plan->nl;
    const size_t ns = (size_t)frames * 2 * (size_t)plan->nslopes;
    out->frames = frames;
    out->lenslets = plan->nl;
    out->nslopes = plan->nslopes;
    out->memory = memory;
    /* one block (sw_cr_layout): the GPU copies the arrays asked for back in one transfer */
    const sw_cr_layout l = sw_cr_layout_of(n, ns);
    char *b = result_array(ctx, l.bytes, memory);
    if (!b)
        return sw_fail(ctx, SW_ENOMEM, "centroid result: out of memory for %d frames", frames);
    out->owned = 2;
    out->x = (float *)(void *)(b + l.x);
    out->y = (float *)(void *)(b + l.y);
    out->intensity = (float *)(void *)(b + l.intensity);
    out->slopes = (float *)(void *)(b + l.slopes);
    out->valid = (uint8_t *)(b + l.valid);
    out->saturated = (uint8_t *)(b + l.saturated);
    out->status = (uint8_t *)(b + l.status);
    out->x_var = (float *)(void *)(b + l.x_var);
    out->y_var = (float *)(void *)(b + l.y_var);
    out->snr = (float *)(void *)(b + l.snr);
    return SW_OK;
}

void *sw_centroid_result_block(const sw_centroid_result *r)
{
    if (!r || r->owned != 2)
        return NULL;
    const size_t n = (size_t)r->frames * (size_t)r->lenslets;
    const sw_cr_layout l = sw_cr_layout_of(n, (size_t)r->frames * 2 * (size_t)r->nslopes);
    /* the block from any array the caller left (each sits at its offset in it) */
    const void *a[10] = {r->x,         r->y,      r->intensity, r->slopes, r->valid,
                         r->saturated, r->status, r->x_var,     r->y_var,  r->snr};
    const size_t off[10] = {l.x,         l.y,      l.intensity, l.slopes, l.valid,
                            l.saturated, l.status, l.x_var,     l.y_var,  l.snr};
    for (int k = 0; k < 10; k++)
        if (a[k])
            return (char *)(uintptr_t)a[k] - off[k];
    return NULL;
}

void sw_centroid_result_free(sw_centroid_result *r)
{
    if (!r || !r->owned)
        return;
    if (r->owned == 2) {
        result_array_free(sw_centroid_result_block(r), r->memory);
        memset(r, 0, sizeof *r);
        return;
    }
    result_array_free(r->x, r->memory);
    result_array_free(r->y, r->memory);
    result_array_free(r->intensity, r->memory);
    result_array_free(r->valid, r->memory);
    result_array_free(r->slopes, r->memory);
    result_array_free(r->saturated, r->memory);
    result_array_free(r->x_var, r->memory);
    result_array_free(r->y_var, r->memory);
    result_array_free(r->snr, r->memory);
    result_array_free(r->status, r->memory);
    memset(r, 0, sizeof *r);
}

sw_status sw_centroid_set_reference(sw_centroid_plan *plan, const double *ref_x,
                                    const double *ref_y)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_centroid_set_reference: NULL plan");
    sw_context *ctx = plan->ctx;
    if ((ref_x == NULL) != (ref_y == NULL))
        return sw_fail(ctx, SW_EINVAL, "centroid reference: give both x and y, or neither");
    if (!ref_x) {
        default_reference(plan);
    } else {
        for (int32_t k = 0; k < plan->nslopes; k++) {
            int32_t l = plan->slope_l[k];
            if (!isfinite(ref_x[l]) || !isfinite(ref_y[l]))
                return sw_fail(ctx, SW_ERANGE,
                               "centroid reference: lenslet (%d, %d) has no finite reference "
                               "(%g, %g) but is used",
                               l % plan->nx, l / plan->nx, ref_x[l], ref_y[l]);
        }
        memcpy(plan->ref_x, ref_x, (size_t)plan->nl * sizeof(double));
        memcpy(plan->ref_y, ref_y, (size_t)plan->nl * sizeof(double));
    }
#ifdef SW_HAVE_CUDA
    if (plan->gpu)
        return sw_centroid_gpu_set_reference(plan);
#endif
    return SW_OK;
}

/* ------------------------------------------------------------------ CPU implementation */

/* A loop the compiler vectorises without a cost model's veto (-O2): its iterations are
 * independent (distinct columns of distinct arrays) and its integer sums exact in any order. */
#ifdef SW_HAVE_OPENMP
#define SW_OMP_SIMD _Pragma("omp simd")
#else
#define SW_OMP_SIMD
#endif

/* Exact integer column sums of one lenslet row (u8 or u16, no conditioning); with SAT, the
 * column maxima of the raw pixels too (mx, in the pixel type: the cheapest check the vector
 * unit can fold into the same pass), compared with the level once per column afterwards. */
#define SW_EXACT_ROWS(T, SAT)                                                                      \
    do {                                                                                           \
        T *mx = (T *)max_room;                                                                     \
        if (SAT)                                                                                   \
            memset(mx, 0, (size_t)nc * sizeof(T));                                                 \
        for (int32_t y = y0; y < y1; y++) {                                                        \
            const T *row = (const T *)(base + (size_t)y * stride) + c0;                            \
            uint32_t wy = (uint32_t)(y - y0);                                                      \
            SW_OMP_SIMD for (int32_t c = 0; c < nc; c++)                                           \
            {                                                                                      \
                uint32_t pix = row[c];                                                             \
                s0[c] += pix;                                                                      \
                s1[c] += wy * pix;                                                                 \
                if (SAT)                                                                           \
                    mx[c] = row[c] > mx[c] ? row[c] : mx[c];                                       \
            }                                                                                      \
        }                                                                                          \
        if (SAT)                                                                                   \
            SW_OMP_SIMD for (int32_t c = 0; c < nc; c++) sc[c] =                                   \
                (uint8_t)((uint32_t)mx[c] >= lev);                                                 \
    } while (0)

/* Marks in sc the columns [col0, col1) of one raw row (before any conditioning) that hold a
 * saturated pixel (centroid_internal.h: the integer or the float form of the level). */
static void saturated_row(const sw_centroid_plan *plan, const char *row, uint8_t *sc)
{
    const int32_t c0 = plan->col0, nc = plan->col1 - plan->col0;
    if (plan->p.type == SW_PIX_U8) {
        const uint8_t *r = (const uint8_t *)row + c0;
        const uint32_t lev = plan->sat_u;
        SW_OMP_SIMD for (int32_t c = 0; c < nc; c++) sc[c] |= (uint8_t)(r[c] >= lev);
    } else if (plan->p.type == SW_PIX_U16) {
        const uint16_t *r = (const uint16_t *)row + c0;
        const uint32_t lev = plan->sat_u;
        SW_OMP_SIMD for (int32_t c = 0; c < nc; c++) sc[c] |= (uint8_t)(r[c] >= lev);
    } else {
        const char *r = row + (size_t)c0 * sizeof(float);
        const float lev = plan->sat_f;
        SW_OMP_SIMD for (int32_t c = 0; c < nc; c++)
        {
            float v;
            memcpy(&v, r + (size_t)c * sizeof(float), sizeof v);
            sc[c] |= (uint8_t)(v >= lev);
        }
    }
}

/* Pixels [c0, c0 + nc) of a row after the LUT (step 1) as floats; one loop per type so that the
 * compiler vectorises each. */
static void load_row(const char *row, sw_pixel_type t, int32_t c0, int32_t nc, const float *lut,
                     float *out)
{
    if (t == SW_PIX_U8) {
        const uint8_t *r = (const uint8_t *)row + c0;
        if (lut)
            for (int32_t c = 0; c < nc; c++)
                out[c] = lut[r[c]];
        else
            for (int32_t c = 0; c < nc; c++)
                out[c] = (float)r[c];
    } else if (t == SW_PIX_U16) {
        const uint16_t *r = (const uint16_t *)row + c0;
        if (lut)
            for (int32_t c = 0; c < nc; c++)
                out[c] = lut[r[c]];
        else
            for (int32_t c = 0; c < nc; c++)
                out[c] = (float)r[c];
    } else {
        memcpy(out, row + (size_t)c0 * sizeof(float), (size_t)nc * sizeof(float));
    }
}

/* Steps 1-3 of one row into v: the LUT, then (v - dark) * flat as sw_cm_condition computes it
 * (a missing dark or flat changes no bit: v - 0 = v, v * 1 = v). */
static void prepare_row(const sw_centroid_plan *plan, const char *frame, size_t stride, int32_t y,
                        float *v)
{
    int32_t c0 = plan->col0, nc = plan->col1 - plan->col0;
    load_row(frame + (size_t)y * stride, plan->p.type, c0, nc, plan->lut, v);
    size_t k0 = (size_t)y * (size_t)plan->p.width + (size_t)c0;
    if (plan->dark) {
        const float *d = plan->dark + k0;
        for (int32_t c = 0; c < nc; c++)
            v[c] = v[c] - d[c];
    }
    if (plan->flat) {
        const float *g = plan->flat + k0;
        for (int32_t c = 0; c < nc; c++)
            v[c] = v[c] * g[c];
    }
}

/* One (frame, lenslet row) task; acc is the thread's 5 * nc doubles of scratch. */
static void cpu_lenslet_row(const sw_centroid_plan *plan, const char *frame, size_t stride,
                            int32_t f, int32_t iy, void *acc, sw_centroid_result *out)
{
    const sw_centroid_params *p = &plan->p;
    int32_t c0 = plan->col0, nc = plan->col1 - plan->col0;
    int32_t y0 = plan->ys[iy], y1 = plan->ye[iy];
    const char *base = frame;

    /* exact: S0, S1 as uint32 in the first 2 * nc doubles' room; else S0, S1, T as doubles and
     * the row being conditioned as floats in the fourth block. The fifth: the saturated columns
     * (nc bytes), then (exact) the column maxima (nc pixels, from byte 2 nc). */
    uint32_t *s0 = acc, *s1 = s0 + nc;
    double *d0 = acc, *d1 = d0 + nc, *tcol = d0 + 2 * (size_t)nc;
    void *row_room = d0 + 3 * (size_t)nc, *sat_room = d0 + 4 * (size_t)nc;
    float *v = row_room;
    uint8_t *sc = sat_room; /* saturated columns (plan->sat_on) */
    void *max_room = sc + 2 * (size_t)nc;
    const uint32_t lev = plan->sat_u;
    memset(sc, 0, (size_t)nc);
    if (plan->exact) {
        memset(acc, 0, 2 * (size_t)nc * sizeof(uint32_t));
        if (p->type == SW_PIX_U8) {
            if (plan->sat_on) {
                SW_EXACT_ROWS(uint8_t, 1);
            } else {
                SW_EXACT_ROWS(uint8_t, 0);
            }
        } else {
            if (plan->sat_on) {
                SW_EXACT_ROWS(uint16_t, 1);
            } else {
                SW_EXACT_ROWS(uint16_t, 0);
            }
        }
    } else {
        int mode = (int)p->threshold_mode;
        float thr = (float)p->threshold;
        float gam = (float)p->gamma;
        if (plan->fraction) {
            /* The lenslet maximum of steps 1-3 over its windowed region (FRACTION threshold). */
            for (int32_t c = 0; c < nc; c++)
                tcol[c] = -INFINITY;
            for (int32_t y = y0; y < y1; y++) {
                prepare_row(plan, base, stride, y, v);
                for (int32_t c = 0; c < nc; c++)
                    tcol[c] = v[c] > tcol[c] ? v[c] : tcol[c];
            }
            for (int32_t ix = 0; ix < plan->nx; ix++) {
                float m = -INFINITY;
                for (int32_t x = plan->xs[ix]; x < plan->xe[ix]; x++)
                    if (tcol[x - c0] > m)
                        m = (float)tcol[x - c0];
                float t = sw_cm_fraction_threshold(p->threshold, m);
                for (int32_t x = plan->xs[ix]; x < plan->xe[ix]; x++)
                    tcol[x - c0] = t;
            }
        }
        for (int32_t c = 0; c < nc; c++)
            d0[c] = d1[c] = 0.0;
        for (int32_t y = y0; y < y1; y++) {
            if (plan->sat_on)
                saturated_row(plan, base + (size_t)y * stride, sc);
            prepare_row(plan, base, stride, y, v);
            double wy = (double)(y - y0);
            if (mode != 0 || gam != 1.0f) {
                if (plan->fraction)
                    for (int32_t c = 0; c < nc; c++)
                        v[c] = sw_cm_condition(v[c], 0.0f, 1.0f, mode, (float)tcol[c], gam);
                else
                    for (int32_t c = 0; c < nc; c++)
                        v[c] = sw_cm_condition(v[c], 0.0f, 1.0f, mode, thr, gam);
            }
            for (int32_t c = 0; c < nc; c++) {
                d0[c] += v[c];
                d1[c] += wy * v[c];
            }
        }
    }

    /* Per lenslet: moments from its columns (seed Eq. 6), centroid (Eq. 7). */
    size_t ns = (size_t)plan->nslopes;
    for (int32_t ix = 0; ix < plan->nx; ix++) {
        int32_t l = iy * plan->nx + ix;
        double m00, m10, m01;
        int32_t xs = plan->xs[ix], xe = plan->xe[ix];
        unsigned sat = 0; /* sc is all 0 without a level */
        if (plan->exact) {
            uint64_t a = 0, b = 0, d = 0;
            for (int32_t x = xs; x < xe; x++) {
                a += s0[x - c0];
                b += (uint64_t)(x - xs) * s0[x - c0];
                d += s1[x - c0];
                sat |= sc[x - c0];
            }
            m00 = (double)a;
            m10 = (double)b;
            m01 = (double)d;
        } else {
            m00 = m10 = m01 = 0.0;
            for (int32_t x = xs; x < xe; x++) {
                m00 += d0[x - c0];
                m10 += (double)(x - xs) * d0[x - c0];
                m01 += d1[x - c0];
                sat |= sc[x - c0];
            }
        }
        size_t i = (size_t)f * (size_t)plan->nl + (size_t)l;
        int32_t k = plan->slope_k[l];
        float *sx = NULL, *sy = NULL;
        if (out->slopes && k >= 0) {
            float *s = out->slopes + (size_t)f * 2 * ns;
            if (p->slope_layout == SW_SLOPES_BLOCKS) {
                sx = s + k;
                sy = s + ns + k;
            } else {
                sx = s + 2 * (size_t)k;
                sy = sx + 1;
            }
        }
        sw_cm_finish(m00, m10, m01, xs, plan->ys[iy], k >= 0, (int)sat, p->drop_saturated,
                     plan->ref_x[l], plan->ref_y[l], out->x ? out->x + i : NULL,
                     out->y ? out->y + i : NULL, out->intensity ? out->intensity + i : NULL,
                     out->valid ? out->valid + i : NULL, out->saturated ? out->saturated + i : NULL,
                     sx, sy, out->status ? out->status + i : NULL,
                     out->x_var ? out->x_var + i : NULL, out->y_var ? out->y_var + i : NULL,
                     out->snr ? out->snr + i : NULL);
    }
}

/* The saturation check of one raw pixel (centroid_internal.h). */
static int raw_saturated(const sw_centroid_plan *plan, const char *row, int32_t x)
{
    if (!plan->sat_on)
        return 0;
    if (plan->p.type == SW_PIX_U8)
        return ((const uint8_t *)row)[x] >= plan->sat_u;
    if (plan->p.type == SW_PIX_U16)
        return ((const uint16_t *)row)[x] >= plan->sat_u;
    float v;
    memcpy(&v, row + (size_t)x * sizeof(float), sizeof v);
    return v >= plan->sat_f;
}

/* Writes one lenslet's generic result (centroid_method.h) into the result arrays and the slope;
 * the float rounding as sw_cm_finish's. Shared in spirit with the GPU's twin (centroid_cuda.cu). */
static void store_generic(const sw_centroid_plan *plan, const sw_cmb_out *o, int sat, int32_t f,
                          int32_t l, sw_centroid_result *out)
{
    size_t i = (size_t)f * (size_t)plan->nl + (size_t)l;
    if (out->x)
        out->x[i] = (float)o->x;
    if (out->y)
        out->y[i] = (float)o->y;
    if (out->intensity)
        out->intensity[i] = (float)o->inten;
    if (out->valid)
        out->valid[i] = (uint8_t)o->valid;
    if (out->saturated)
        out->saturated[i] = (uint8_t)(sat != 0);
    if (out->status)
        out->status[i] = (uint8_t)o->status;
    if (out->x_var)
        out->x_var[i] = (float)o->vx;
    if (out->y_var)
        out->y_var[i] = (float)o->vy;
    if (out->snr)
        out->snr[i] = (float)o->snr;
    int32_t k = plan->slope_k[l];
    if (out->slopes && k >= 0) {
        size_t ns = (size_t)plan->nslopes;
        float *s = out->slopes + (size_t)f * 2 * ns;
        float *sx = plan->p.slope_layout == SW_SLOPES_BLOCKS ? s + k : s + 2 * (size_t)k;
        float *sy = plan->p.slope_layout == SW_SLOPES_BLOCKS ? s + ns + k : sx + 1;
        *sx = o->valid ? (float)((double)(float)o->x - plan->ref_x[l]) : 0.0f;
        *sy = o->valid ? (float)((double)(float)o->y - plan->ref_y[l]) : 0.0f;
    }
}

/* One (frame, lenslet) of the generic path: the region's steps 1-3 into the thread's scratch,
 * the saturation from the raw pixels, then sw_cmb_measure. */
static void cpu_generic_lenslet(const sw_centroid_plan *plan, const char *frame, size_t stride,
                                int32_t f, int32_t l, char *scratch, sw_centroid_result *out)
{
    const int32_t ix = l % plan->nx, iy = l / plan->nx;
    const int32_t xs = plan->xs[ix], ys = plan->ys[iy];
    const int32_t w = plan->xe[ix] - xs, h = plan->ye[iy] - ys;
    float *v = (float *)(void *)scratch;
    int sat = 0;
    for (int32_t j = 0; j < h; j++) {
        const char *row = frame + (size_t)(ys + j) * stride;
        float *vr = v + (size_t)j * w;
        load_row(row, plan->p.type, xs, w, plan->lut, vr);
        size_t k0 = (size_t)(ys + j) * (size_t)plan->p.width + (size_t)xs;
        if (plan->dark)
            for (int32_t i = 0; i < w; i++)
                vr[i] = vr[i] - plan->dark[k0 + i];
        if (plan->flat)
            for (int32_t i = 0; i < w; i++)
                vr[i] = vr[i] * plan->flat[k0 + i];
        for (int32_t i = 0; i < w && !sat; i++)
            sat = raw_saturated(plan, row, xs + i);
    }
    sw_cmb_region R;
    memset(&R, 0, sizeof R);
    R.v = v;
    R.w = w;
    R.h = h;
    R.xs = xs;
    R.ys = ys;
    R.rx = plan->ref_x[l];
    R.ry = plan->ref_y[l];
    R.in_mask = plan->slope_k[l] >= 0;
    R.sat = sat;
    R.t0 = 0;
    R.tn = 1;
    R.lg = 0;
    R.ws = 1;
    sw_cmb_layout(&R);
    const size_t npix = (size_t)plan->wmax * (size_t)plan->hmax;
    if (plan->corr_ref) {
        /* the template's region, row-major as the region's */
        float *r = v + npix;
        for (int32_t j = 0; j < h; j++)
            memcpy(r + (size_t)j * w,
                   plan->corr_ref + (size_t)(ys + j) * (size_t)plan->p.width + (size_t)xs,
                   (size_t)w * sizeof(float));
        R.r = r;
        R.cw = r + npix; /* the conditioned region's work copy */
    }
    if (plan->nscratch) {
        size_t off = (npix * sizeof(float) * (plan->corr_ref ? 3 : 1) + 7) / 8 * 8;
        R.scratch = (double *)(void *)(scratch + off);
    }
    sw_cmb_out o;
    sw_cmb_measure(&plan->mp, &R, &o);
    store_generic(plan, &o, sat, f, l, out);
}

static void cpu_generic_run(sw_centroid_plan *plan, const sw_image *frames, int32_t nframes,
                            sw_centroid_result *out)
{
    int64_t ntask = (int64_t)nframes * plan->nl;
    size_t fbytes = (size_t)plan->p.height * frames->stride;
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 16) num_threads(plan->threads > 0 ? plan->threads : 1)
#endif
    for (int64_t t = 0; t < ntask; t++) {
        int32_t f = (int32_t)(t / plan->nl), l = (int32_t)(t % plan->nl);
        char *scratch = plan->cpu_gen + (size_t)sw_omp_thread() * plan->cpu_gen_bytes;
        cpu_generic_lenslet(plan, (const char *)frames->data + (size_t)f * fbytes, frames->stride,
                            f, l, scratch, out);
    }
}

static void cpu_run(sw_centroid_plan *plan, const sw_image *frames, int32_t nframes,
                    sw_centroid_result *out)
{
    if (!plan->fast) {
        cpu_generic_run(plan, frames, nframes, out);
        return;
    }
    int64_t ntask = (int64_t)nframes * plan->ny;
    size_t nc = (size_t)(plan->col1 - plan->col0);
    size_t fbytes = (size_t)plan->p.height * frames->stride;
    (void)nc;
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(plan->threads > 0 ? plan->threads : 1)
#endif
    for (int64_t t = 0; t < ntask; t++) {
        int32_t f = (int32_t)(t / plan->ny), iy = (int32_t)(t % plan->ny);
        void *acc = plan->cpu_acc + (size_t)sw_omp_thread() * 5 * nc;
        cpu_lenslet_row(plan, (const char *)frames->data + (size_t)f * fbytes, frames->stride, f,
                        iy, acc, out);
    }
}

/* ------------------------------------------------------------------ run */

sw_status sw_centroid_run(sw_centroid_plan *plan, const sw_image *frames, sw_centroid_result *out)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_centroid_run: NULL plan");
    sw_context *ctx = plan->ctx;
    if (!frames || !out)
        return sw_fail(ctx, SW_EINVAL, "sw_centroid_run: NULL frames or result");
    sw_status st = sw_image_check(ctx, frames);
    if (st != SW_OK)
        return st;
    const sw_centroid_params *p = &plan->p;
    if (frames->width != p->width || frames->type != p->type)
        return sw_fail(ctx, SW_EINVAL,
                       "centroid: frames are %d px wide of %s pixels; the plan takes %d px wide "
                       "%s frames",
                       frames->width, sw_pixel_type_string(frames->type), p->width,
                       sw_pixel_type_string(p->type));
    if (frames->height % p->height != 0)
        return sw_fail(ctx, SW_EINVAL,
                       "centroid: image height %d is not a whole number of %d-row frames",
                       frames->height, p->height);
    int32_t nframes = frames->height / p->height;
    if (nframes > p->max_frames)
        return sw_fail(ctx, SW_EINVAL, "centroid: %d frames in one run; the plan takes at most %d",
                       nframes, p->max_frames);
    int host_frames = frames->memory == SW_MEM_HOST || frames->memory == SW_MEM_PINNED;
    switch (plan->path) {
    case SW_CENTROID_HOST:
    case SW_CENTROID_COPY:
        if (!host_frames)
            return sw_fail(ctx, SW_EINVAL, "centroid: the %s path takes frames in host memory",
                           sw_centroid_path_string(plan->path));
        break;
    case SW_CENTROID_DEVICE:
        if (frames->memory != SW_MEM_DEVICE)
            return sw_fail(ctx, SW_EINVAL,
                           "centroid: the device path takes frames in device "
                           "memory (sw_image_alloc_device)");
        break;
    case SW_CENTROID_MAPPED:
        if (frames->memory != SW_MEM_PINNED)
            return sw_fail(ctx, SW_EINVAL,
                           "centroid: the mapped path takes frames in pinned host "
                           "memory (sw_image_alloc on a CUDA context)");
        break;
    default: return sw_fail(ctx, SW_EINTERNAL, "centroid: unresolved path");
    }
    if (out->lenslets != plan->nl || out->nslopes != plan->nslopes || out->frames < nframes)
        return sw_fail(ctx, SW_EINVAL,
                       "centroid: the result holds %d frames of %d lenslets and %d slopes; this "
                       "run needs %d frames of %d lenslets and %d slopes",
                       out->frames, out->lenslets, out->nslopes, nframes, plan->nl, plan->nslopes);
    if (out->memory != SW_MEM_HOST && out->memory != SW_MEM_PINNED && out->memory != SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL, "centroid: unknown result memory kind %d", (int)out->memory);
    if (plan->path == SW_CENTROID_HOST && out->memory == SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL, "centroid: the host path writes host results, not device");

    if (plan->path == SW_CENTROID_HOST) {
        if ((uintptr_t)frames->data % sw_pixel_size(p->type) != 0)
            return sw_fail(ctx, SW_EINVAL,
                           "centroid: the host path reads %s pixels at addresses aligned to their "
                           "size; this image starts at an odd address (copy it first)",
                           sw_pixel_type_string(p->type));
        plan->kernel_us = -1.0;
        cpu_run(plan, frames, nframes, out);
        return SW_OK;
    }
#ifdef SW_HAVE_CUDA
    return sw_centroid_gpu_run(plan, frames, nframes, out);
#else
    return sw_fail(ctx, SW_EUNSUPPORTED, "centroid: built without CUDA");
#endif
}

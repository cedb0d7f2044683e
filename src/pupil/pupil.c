/*
 * The pupil tracker's API (pupil.h; seed 001 Sec. 3.1): parameters and their validation, the
 * plan (the RANSAC random numbers of the seed's optimisation 2, drawn once here), dispatch of a
 * frame to the CPU pipeline (pupil_cpu.c) or its GPU twin (pupil_cuda.cu), and the inspection
 * calls (the last frame's images, border lists and random numbers).
 */
#include "pupil/pupil_internal.h"

#include "spotwave/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The RANSAC random numbers: float j of the plan (candidate j / 5, point j % 5) is word j % 4
 * of draw j / 4 of stream SW_RNG_STREAM_PUPIL (rng.h) under p.seed, made a uniform number in
 * (0, 1) by sw_rng_u01f. */
void sw_pupil_params_default(sw_pupil_params *p, int32_t width, int32_t height, sw_pixel_type t)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->width = width;
    p->height = height;
    p->type = t;
    p->n_pupils = 1;
    p->split_x = -1;
    p->input_scale = 0.0;
    p->gauss_radius = 4;
    p->gauss_sigma = 4.0;
    p->close_radius = 4;
    p->candidates = 1024;
    p->inlier_px = 2.0;
    p->refine_iterations = 3;
    p->min_radius_px = (double)(width < height ? width : height) / 10.0;
    p->max_radius_px = 0.0;
    p->min_coverage = 0.25;
    p->otsu_classes = 3;
    p->edge_level = SW_PUPIL_EDGE_AUTO;
    p->max_near_ratio = 0.75;
    p->seed = 1;
    p->geometry = NULL;
    p->lenslet_rule = SW_PUPIL_LENSLET_FULL;
    p->given = 0;
    p->spots_fallback = 1;
    p->spots_iterations = 3;
}

const char *sw_pupil_failure_string(sw_pupil_failure f)
{
    switch (f) {
    case SW_PUPIL_OK: return "found";
    case SW_PUPIL_EMPTY_FRAME: return "empty frame (its mean is not positive)";
    case SW_PUPIL_NO_CONTRAST: return "no contrast in the region";
    case SW_PUPIL_FEW_BORDER: return "fewer than 5 border pixels";
    case SW_PUPIL_NO_ELLIPSE: return "no candidate ellipse in the size range";
    case SW_PUPIL_LOW_SUPPORT: return "too few border pixels on the ellipse";
    case SW_PUPIL_BAD_FIT: return "the refined ellipse is not valid or out of range";
    case SW_PUPIL_CLUTTER: return "too many border pixels just off the ellipse (noise)";
    case SW_PUPIL_NO_GRID: return "no lenslet grid for the spots path";
    case SW_PUPIL_FEW_SPOTS: return "too few lit lenslets, or too faint, for the spots path";
    case SW_PUPIL_SPOTS_FIT: return "the spots' outline is not an ellipse in the size range";
    }
    return "unknown failure";
}

/* Step 1's Q16 weights (pupil_internal.h). */
void sw_pupil_gauss_weights(int32_t r, double sigma, uint32_t *w)
{
    if (r <= 0) {
        w[0] = 65536u;
        return;
    }
    double g[SW_PUPIL_MAX_TAPS] = {0.0}, sum = 0.0;
    for (int32_t k = -r; k <= r; k++) {
        g[k + r] = exp(-(double)(k * k) / (2.0 * sigma * sigma));
        sum += g[k + r];
    }
    int64_t total = 0;
    for (int32_t i = 0; i <= 2 * r; i++) {
        w[i] = (uint32_t)floor(65536.0 * g[i] / sum + 0.5);
        total += w[i];
    }
    w[r] = (uint32_t)((int64_t)w[r] + (65536 - total));
}

/* ---------------------------------------------------------------- validation */

static sw_status check_params(sw_context *ctx, const sw_pupil_params *p)
{
    if (p->width < SW_PUPIL_MIN_SIZE || p->height < SW_PUPIL_MIN_SIZE ||
        p->width > SW_IMAGE_MAX_DIM || p->height > SW_IMAGE_MAX_DIM)
        return sw_fail(ctx, SW_EINVAL,
                       "pupil: frame size %d x %d is not valid (width and height must be %d .. "
                       "%d)",
                       p->width, p->height, SW_PUPIL_MIN_SIZE, SW_IMAGE_MAX_DIM);
    if ((int64_t)p->width * p->height > SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_EINVAL, "pupil: frame size %d x %d has more than %lld pixels",
                       p->width, p->height, (long long)SW_IMAGE_MAX_PIXELS);
    if (p->type != SW_PIX_U8 && p->type != SW_PIX_U16 && p->type != SW_PIX_U32 &&
        p->type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL, "pupil: pixel type %d is not supported (u8, u16, u32, f32)",
                       (int)p->type);
    if (p->n_pupils != 1 && p->n_pupils != 2)
        return sw_fail(ctx, SW_EINVAL, "pupil: n_pupils %d must be 1 or 2", p->n_pupils);
    if (p->n_pupils == 2 && p->split_x >= 0 && (p->split_x < 1 || p->split_x > p->width - 1))
        return sw_fail(ctx, SW_EINVAL,
                       "pupil: split_x %d must be 1 .. %d (width - 1), or < 0 to find it in each "
                       "frame",
                       p->split_x, p->width - 1);
    if (!(isfinite(p->input_scale) && p->input_scale >= 0.0))
        return sw_fail(ctx, SW_EINVAL,
                       "pupil: input_scale %g must be finite and >= 0 (0: automatic)",
                       p->input_scale);
    if (p->gauss_radius < 0 || p->gauss_radius > SW_PUPIL_MAX_RADIUS)
        return sw_fail(ctx, SW_EINVAL, "pupil: gauss_radius %d must be 0 .. %d", p->gauss_radius,
                       SW_PUPIL_MAX_RADIUS);
    /* 1e-3: far below one pixel the weights are 65536, 0, 0, ... anyway, and 2 sigma^2 must not
     * underflow to 0 in the weights' exponent */
    if (!(isfinite(p->gauss_sigma) && p->gauss_sigma >= 1e-3))
        return sw_fail(ctx, SW_EINVAL, "pupil: gauss_sigma %g must be finite and >= 0.001",
                       p->gauss_sigma);
    if (p->close_radius < 0 || p->close_radius > SW_PUPIL_MAX_RADIUS)
        return sw_fail(ctx, SW_EINVAL, "pupil: close_radius %d must be 0 .. %d", p->close_radius,
                       SW_PUPIL_MAX_RADIUS);
    if (p->candidates < 32 || p->candidates > SW_PUPIL_MAX_CANDIDATES || p->candidates % 32 != 0)
        return sw_fail(ctx, SW_EINVAL, "pupil: candidates %d must be a multiple of 32 in 32 .. %d",
                       p->candidates, SW_PUPIL_MAX_CANDIDATES);
    if (!(isfinite(p->inlier_px) && p->inlier_px > 0.0))
        return sw_fail(ctx, SW_EINVAL, "pupil: inlier_px %g must be finite and > 0", p->inlier_px);
    if (p->refine_iterations < 0 || p->refine_iterations > 20)
        return sw_fail(ctx, SW_EINVAL, "pupil: refine_iterations %d must be 0 .. 20",
                       p->refine_iterations);
    if (!(isfinite(p->min_radius_px) && p->min_radius_px >= 0.0))
        return sw_fail(ctx, SW_EINVAL, "pupil: min_radius_px %g must be finite and >= 0",
                       p->min_radius_px);
    if (!(isfinite(p->max_radius_px) && p->max_radius_px >= 0.0))
        return sw_fail(ctx, SW_EINVAL,
                       "pupil: max_radius_px %g must be finite and >= 0 (0: the frame's larger "
                       "side)",
                       p->max_radius_px);
    const double max_r = p->max_radius_px > 0.0
                             ? p->max_radius_px
                             : (double)(p->width > p->height ? p->width : p->height);
    if (max_r < p->min_radius_px)
        return sw_fail(ctx, SW_EINVAL, "pupil: max_radius_px %g is below min_radius_px %g", max_r,
                       p->min_radius_px);
    if (!(p->min_coverage >= 0.0 && p->min_coverage <= 1.0))
        return sw_fail(ctx, SW_EINVAL, "pupil: min_coverage %g must be 0 .. 1", p->min_coverage);
    if (p->otsu_classes != 2 && p->otsu_classes != 3)
        return sw_fail(ctx, SW_EINVAL, "pupil: otsu_classes %d must be 2 or 3", p->otsu_classes);
    if (!(isfinite(p->edge_level) && p->edge_level < 1.0))
        return sw_fail(ctx, SW_EINVAL,
                       "pupil: edge_level %g must be finite and below 1 (0: Otsu's split itself, "
                       "< 0: automatic)",
                       p->edge_level);
    if (!(p->max_near_ratio >= 0.0))
        return sw_fail(ctx, SW_EINVAL,
                       "pupil: max_near_ratio %g must be >= 0 (+Inf: no near-band test)",
                       p->max_near_ratio);
    if (p->lenslet_rule != SW_PUPIL_LENSLET_FULL && p->lenslet_rule != SW_PUPIL_LENSLET_CENTRE)
        return sw_fail(ctx, SW_EINVAL, "pupil: unknown lenslet_rule %d", (int)p->lenslet_rule);
    if (p->spots_fallback < 0 || p->spots_fallback > 2)
        return sw_fail(ctx, SW_EINVAL, "pupil: spots_fallback %d must be 0, 1 or 2",
                       p->spots_fallback);
    if (p->spots_iterations < 0 || p->spots_iterations > 20)
        return sw_fail(ctx, SW_EINVAL, "pupil: spots_iterations %d must be 0 .. 20",
                       p->spots_iterations);
    if (p->given) {
        const double big = (double)(p->width > p->height ? p->width : p->height);
        for (int32_t i = 0; i < p->n_pupils; i++) {
            const sw_pupil_shape *q = &p->given_pupil[i];
            if (!(isfinite(q->cx_px) && isfinite(q->cy_px) && isfinite(q->angle_deg) &&
                  q->a_px >= 1.0 && q->b_px >= 1.0 && q->a_px <= big && q->b_px <= big))
                return sw_fail(ctx, SW_EINVAL,
                               "pupil: given pupil %d (centre %g, %g, semi-axes %g, %g, angle %g) "
                               "is not valid: finite, semi-axes 1 .. %g px (the frame's larger "
                               "side)",
                               i, q->cx_px, q->cy_px, q->a_px, q->b_px, q->angle_deg, big);
        }
    }
    if (p->geometry) {
        sw_status st = sw_sh_geometry_check(ctx, p->geometry, p->width, p->height);
        if (st != SW_OK)
            return st; /* the message names the field or lenslet */
    }
    return SW_OK;
}

/* ---------------------------------------------------------------- the plan */

void sw_pupil_destroy(sw_pupil_plan *plan)
{
    if (!plan)
        return;
#ifdef SW_HAVE_CUDA
    if (plan->gpu)
        sw_pupil_gpu_free(plan);
#endif
    sw_pupil_cpu_free(plan);
    free(plan->randoms);
    free(plan->lenslet_mask);
    free(plan->host_frame);
    free(plan);
}

sw_status sw_pupil_create(sw_context *ctx, const sw_pupil_params *p, sw_pupil_plan **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "pupil: out is NULL");
    *out = NULL;
    if (!ctx || !p)
        return sw_fail(ctx, SW_EINVAL, "pupil: context or parameters are NULL");
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;

    /* the per-pixel buffers (8-bit copies, border lists), host or device: < 32 bytes a pixel */
    SW_TRY(sw_memory_check(ctx, (uint64_t)p->width * (uint64_t)p->height, 32,
                           "pupil: the working buffers of a %dx%d frame", (int)p->width,
                           (int)p->height));
    sw_pupil_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return sw_fail(ctx, SW_ENOMEM, "pupil: out of memory");
    plan->ctx = ctx;
    plan->p = *p;
    if (plan->p.max_radius_px <= 0.0)
        plan->p.max_radius_px = (double)(p->width > p->height ? p->width : p->height);
    plan->npix = (int64_t)p->width * p->height;
    if (p->geometry) {
        /* a copy; the caller's validity mask is not kept (pupil.h) */
        plan->geom = *p->geometry;
        plan->geom.valid = NULL;
        plan->has_geom = 1;
        plan->p.geometry = &plan->geom;
    } else {
        plan->p.geometry = NULL;
    }
    plan->n_taps = 2 * p->gauss_radius + 1;
    sw_pupil_gauss_weights(p->gauss_radius, p->gauss_sigma, plan->gauss_w);

    /* Step 6: the random numbers, drawn once (seed's optimisation 2). */
    const int64_t nr = (int64_t)p->candidates * 5;
    plan->randoms = malloc((size_t)nr * sizeof(float));
    if (!plan->randoms)
        goto nomem;
    for (int64_t j = 0; j < nr; j += 4) {
        const sw_rng4 d = sw_rng_draw(p->seed, SW_RNG_STREAM_PUPIL, (uint64_t)(j / 4));
        for (int64_t m = 0; m < 4 && j + m < nr; m++)
            plan->randoms[j + m] = sw_rng_u01f(d.v[m]);
    }
    if (plan->has_geom) {
        plan->lenslet_mask = calloc((size_t)plan->geom.nx * (size_t)plan->geom.ny, 1);
        if (!plan->lenslet_mask)
            goto nomem;
    }

    /* The host buffers always: the CPU pipeline's work, and the inspection calls' staging. */
    if ((st = sw_pupil_cpu_init(plan)) != SW_OK) {
        sw_pupil_destroy(plan);
        return st;
    }
    if (sw_context_backend(ctx) == SW_BACKEND_CUDA) {
#ifdef SW_HAVE_CUDA
        if ((st = sw_pupil_gpu_init(plan)) != SW_OK) {
            sw_pupil_destroy(plan);
            return st;
        }
#else
        sw_pupil_destroy(plan);
        return sw_fail(ctx, SW_EINTERNAL, "pupil: CUDA context in a build without CUDA");
#endif
    }
    *out = plan;
    return SW_OK;

nomem:
    sw_pupil_destroy(plan);
    return sw_fail(ctx, SW_ENOMEM, "pupil: out of memory for a %d x %d frame", p->width, p->height);
}

/* ---------------------------------------------------------------- one frame */

static int is_gpu(const sw_pupil_plan *plan)
{
    return sw_context_backend(plan->ctx) == SW_BACKEND_CUDA;
}

sw_status sw_pupil_run(sw_pupil_plan *plan, const sw_image *frame, sw_pupil_result *result,
                       uint8_t *lenslet_mask)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "pupil: plan is NULL");
    if (!frame || !result)
        return sw_fail(plan->ctx, SW_EINVAL, "pupil: frame or result is NULL");
    sw_status st = sw_image_check(plan->ctx, frame);
    if (st != SW_OK)
        return st;
    if (frame->width != plan->p.width || frame->height != plan->p.height ||
        frame->type != plan->p.type)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "pupil: frame is %d x %d %s, the plan was made for %d x %d %s", frame->width,
                       frame->height, sw_pixel_type_string(frame->type), plan->p.width,
                       plan->p.height, sw_pixel_type_string(plan->p.type));
    if (lenslet_mask && !plan->has_geom)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "pupil: a lenslet mask was asked for, but the plan has no geometry");
    if (frame->memory == SW_MEM_DEVICE && !is_gpu(plan))
        return sw_fail(plan->ctx, SW_EINVAL, "pupil: a device frame on a CPU context");

    /* a run that fails part-way leaves no frame to inspect (its buffers may be half written) */
    plan->have_frame = 0;
    if (plan->p.given) {
        /* nothing to track: the given pupils and their mask (pupil.h "Given pupils"); the
         * inspection images stay those of the last tracked frame, if any */
        sw_pupil_given_result(plan, result);
        sw_pupil_mask_host(plan, result);
        plan->last = *result;
        st = SW_OK;
    } else if (!is_gpu(plan)) {
        st = sw_pupil_cpu_run(plan, frame, result);
    } else {
#ifdef SW_HAVE_CUDA
        st = sw_pupil_gpu_run(plan, frame, result);
#else
        st = sw_fail(plan->ctx, SW_EINTERNAL, "pupil: CUDA context in a build without CUDA");
#endif
    }
    if (st != SW_OK)
        return st;
    if (lenslet_mask)
        memcpy(lenslet_mask, plan->lenslet_mask, (size_t)plan->geom.nx * (size_t)plan->geom.ny);
    return SW_OK;
}

const uint8_t *sw_pupil_lenslet_mask_device(const sw_pupil_plan *plan)
{
    if (!plan || !plan->has_geom || !is_gpu(plan))
        return NULL;
#ifdef SW_HAVE_CUDA
    return sw_pupil_gpu_lenslet_mask(plan);
#else
    return NULL;
#endif
}

/* ---------------------------------------------------------------- inspection */

static sw_status check_u8_image(const sw_pupil_plan *plan, const sw_image *img, const char *what)
{
    if (!img)
        return SW_OK;
    sw_status st = sw_image_check(plan->ctx, img);
    if (st != SW_OK)
        return st;
    if (img->width != plan->p.width || img->height != plan->p.height || img->type != SW_PIX_U8 ||
        img->memory == SW_MEM_DEVICE)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "pupil: the %s image must be a host u8 image of %d x %d (it is %d x %d %s "
                       "in %s memory)",
                       what, plan->p.width, plan->p.height, img->width, img->height,
                       sw_pixel_type_string(img->type),
                       img->memory == SW_MEM_DEVICE ? "device" : "host");
    return SW_OK;
}

static void copy_rows(const uint8_t *src, int32_t width, int32_t height, sw_image *dst)
{
    if (!dst)
        return;
    for (int32_t y = 0; y < height; y++)
        memcpy(sw_image_row(dst, y), src + (size_t)y * (size_t)width, (size_t)width);
}

sw_status sw_pupil_last_images(sw_pupil_plan *plan, sw_image *input8, sw_image *smoothed,
                               sw_image *closed)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "pupil: plan is NULL");
    if (!plan->have_frame)
        return sw_fail(plan->ctx, SW_EINVAL, "pupil: no frame has been run on this plan yet");
    sw_status st;
    if ((st = check_u8_image(plan, input8, "input (8-bit)")) != SW_OK ||
        (st = check_u8_image(plan, smoothed, "smoothed")) != SW_OK ||
        (st = check_u8_image(plan, closed, "closed")) != SW_OK)
        return st;
    if (is_gpu(plan)) {
#ifdef SW_HAVE_CUDA
        /* staged through the plan's host buffers (unused by the GPU pipeline) */
        st = sw_pupil_gpu_images(plan, input8 ? plan->img8 : NULL, smoothed ? plan->smooth8 : NULL,
                                 closed ? plan->closed8 : NULL);
        if (st != SW_OK)
            return st;
#else
        return sw_fail(plan->ctx, SW_EINTERNAL, "pupil: CUDA context in a build without CUDA");
#endif
    }
    copy_rows(plan->img8, plan->p.width, plan->p.height, input8);
    copy_rows(plan->smooth8, plan->p.width, plan->p.height, smoothed);
    copy_rows(plan->closed8, plan->p.width, plan->p.height, closed);
    return SW_OK;
}

sw_status sw_pupil_last_border(sw_pupil_plan *plan, int32_t i, int32_t *xy, int64_t capacity,
                               int64_t *count)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "pupil: plan is NULL");
    if (!count)
        return sw_fail(plan->ctx, SW_EINVAL, "pupil: count is NULL");
    if (i < 0 || i >= plan->p.n_pupils)
        return sw_fail(plan->ctx, SW_EINVAL, "pupil: pupil %d does not exist (the plan has %d)", i,
                       plan->p.n_pupils);
    if (capacity < 0 || (capacity > 0 && !xy))
        return sw_fail(plan->ctx, SW_EINVAL,
                       "pupil: border capacity %lld with %s buffer is not valid",
                       (long long)capacity, xy ? "a" : "a NULL");
    if (!plan->have_frame)
        return sw_fail(plan->ctx, SW_EINVAL, "pupil: no frame has been run on this plan yet");
    if (is_gpu(plan)) {
#ifdef SW_HAVE_CUDA
        return sw_pupil_gpu_border(plan, i, xy, capacity, count);
#else
        return sw_fail(plan->ctx, SW_EINTERNAL, "pupil: CUDA context in a build without CUDA");
#endif
    }
    const int64_t n = plan->border_n[i];
    const int64_t m = n < capacity ? n : capacity;
    if (m > 0)
        memcpy(xy, plan->border_xy[i], (size_t)m * 2 * sizeof(int32_t));
    *count = n;
    return SW_OK;
}

const float *sw_pupil_randoms(const sw_pupil_plan *plan)
{
    return plan ? plan->randoms : NULL;
}

/*
 * The detector model (issue 3, item 5): turns an image of expected electrons (sw_starsim_run)
 * into what a camera reads out. For pixel (x, y), index i = y * width + x (the pixel's index in
 * the image, so the CPU and the GPU draw the same numbers, noise.h):
 *
 *   e   = electrons(x, y) + sky_e + dark_e                   expected e- in the pixel
 *   e   = Poisson(e)            (when shot_noise; noise.h, draws of pixel i)
 *   e   = min(e, full_well_e)   (when full_well_e > 0)
 *   e  += read_noise_e * N(0,1) (noise.h, draw i of the read-noise stream)
 *   adu = e / gain_e_per_adu + bias_adu
 *   out = adu                   (f32)
 *   out = clamp(rint(adu), 0, type max)   (u8, u16, u32: round to nearest even, then clamp)
 *
 * CPU: OpenMP over rows. CUDA context with device images: detector_cuda.cu, same formula and
 * draws. CUDA context with host images: the CPU code runs (no staging through the GPU).
 */
#include "sim/sim_internal.h"
#ifdef SW_HAVE_CUDA
#include "core/core_cuda.h"
#endif
#include "sim/noise.h"

#include <math.h>
#include <string.h>

void sw_detector_default(sw_detector *d)
{
    if (!d)
        return;
    memset(d, 0, sizeof *d);
    d->sky_e = 0.0;
    d->dark_e = 0.0;
    d->shot_noise = 1;
    d->read_noise_e = 0.0;
    d->gain_e_per_adu = 1.0;
    d->bias_adu = 0.0;
    d->full_well_e = 0.0;
    d->out_type = SW_PIX_F32;
    d->seed = 1;
}

static sw_status check_detector(sw_context *ctx, const sw_detector *d)
{
    if (!d)
        return sw_fail(ctx, SW_EINVAL, "detector model is NULL");
    const struct {
        const char *name;
        double v;
    } nonneg[] = {{"sky_e", d->sky_e},
                  {"dark_e", d->dark_e},
                  {"read_noise_e", d->read_noise_e},
                  {"full_well_e", d->full_well_e}};
    for (size_t k = 0; k < sizeof nonneg / sizeof nonneg[0]; k++)
        if (!isfinite(nonneg[k].v) || nonneg[k].v < 0.0)
            return sw_fail(ctx, SW_EINVAL, "detector: %s = %g must be finite and non-negative",
                           nonneg[k].name, nonneg[k].v);
    if (!isfinite(d->gain_e_per_adu) || !(d->gain_e_per_adu > 0.0))
        return sw_fail(ctx, SW_EINVAL, "detector: gain %g e-/ADU must be positive and finite",
                       d->gain_e_per_adu);
    if (!isfinite(d->bias_adu))
        return sw_fail(ctx, SW_EINVAL, "detector: bias %g ADU must be finite", d->bias_adu);
    if (d->out_type != SW_PIX_U8 && d->out_type != SW_PIX_U16 && d->out_type != SW_PIX_U32 &&
        d->out_type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL, "detector: unknown output pixel type %d", (int)d->out_type);
    return SW_OK;
}

static int is_host(const sw_image *img)
{
    return img->memory == SW_MEM_HOST || img->memory == SW_MEM_PINNED;
}

/* Host byte ranges of two images intersect. */
static int overlap(const sw_image *a, const sw_image *b)
{
    const char *a0 = a->data, *b0 = b->data;
    const char *a1 =
        a0 + (size_t)(a->height - 1) * a->stride + (size_t)a->width * sw_pixel_size(a->type);
    const char *b1 =
        b0 + (size_t)(b->height - 1) * b->stride + (size_t)b->width * sw_pixel_size(b->type);
    return a0 < b1 && b0 < a1;
}

/* The model for one pixel (see the top of the file). */
static inline double pixel_adu(const sw_detector *d, double electrons, uint64_t i)
{
    double e = electrons + d->sky_e + d->dark_e;
    if (d->shot_noise)
        e = sw_noise_poisson(e, d->seed, i);
    if (d->full_well_e > 0.0 && e > d->full_well_e)
        e = d->full_well_e;
    if (d->read_noise_e > 0.0)
        e += d->read_noise_e * sw_noise_normal(d->seed, i);
    return e / d->gain_e_per_adu + d->bias_adu;
}

static inline double adc(double adu, double maxval)
{
    double v = rint(adu);
    return v < 0.0 ? 0.0 : (v > maxval ? maxval : v);
}

static void apply_cpu(sw_context *ctx, const sw_detector *d, const sw_image *in, sw_image *out)
{
    const int32_t W = in->width, H = in->height;
    const sw_pixel_type t = d->out_type;
    const double maxval = t == SW_PIX_U8 ? 255.0 : t == SW_PIX_U16 ? 65535.0 : 4294967295.0;
#pragma omp parallel for schedule(static) num_threads(sw_context_threads(ctx))
    for (int32_t y = 0; y < H; y++) {
        const float *src = sw_image_row(in, y);
        void *dst = sw_image_row(out, y);
        const uint64_t base = (uint64_t)y * (uint64_t)W;
        for (int32_t x = 0; x < W; x++) {
            const double adu = pixel_adu(d, (double)src[x], base + (uint64_t)x);
            switch (t) {
            case SW_PIX_U8: ((uint8_t *)dst)[x] = (uint8_t)adc(adu, maxval); break;
            case SW_PIX_U16: ((uint16_t *)dst)[x] = (uint16_t)adc(adu, maxval); break;
            case SW_PIX_U32: ((uint32_t *)dst)[x] = (uint32_t)adc(adu, maxval); break;
            default: ((float *)dst)[x] = (float)adu; break;
            }
        }
    }
}

sw_status sw_detector_apply(sw_context *ctx, const sw_detector *d, const sw_image *electrons,
                            sw_image *out)
{
    sw_status st = check_detector(ctx, d);
    if (st != SW_OK)
        return st;
    if ((st = sw_image_check(ctx, electrons)) != SW_OK || (st = sw_image_check(ctx, out)) != SW_OK)
        return st;
    if (electrons->type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL, "detector: the electron image is %s; it must be f32",
                       sw_pixel_type_string(electrons->type));
    if (out->type != d->out_type)
        return sw_fail(ctx, SW_EINVAL,
                       "detector: the output image is %s but the detector's output type is %s",
                       sw_pixel_type_string(out->type), sw_pixel_type_string(d->out_type));
    if (out->width != electrons->width || out->height != electrons->height)
        return sw_fail(ctx, SW_EINVAL,
                       "detector: the output image is %dx%d but the electron image is %dx%d",
                       out->width, out->height, electrons->width, electrons->height);
    if (is_host(electrons) != is_host(out))
        return sw_fail(ctx, SW_EINVAL,
                       "detector: the electron and output images must both be host or both be "
                       "device memory");
    const int cuda = ctx && ctx->backend == SW_BACKEND_CUDA;
    if (!is_host(out)) {
        if (!cuda)
            return sw_fail(ctx, SW_ENODEV, "detector: device images need a CUDA context");
#ifdef SW_HAVE_CUDA
        /* as on the host: non-finite electrons are refused before any pixel is written */
        int64_t bad = 0;
        sw_status cst = sw_cuda_count_nonfinite(ctx, electrons, &bad);
        if (cst != SW_OK)
            return cst;
        if (bad)
            return sw_fail(ctx, SW_ERANGE, "detector: %lld electron pixels are NaN or infinite",
                           (long long)bad);
        if (overlap(electrons, out) &&
            !(out->data == electrons->data && out->stride == electrons->stride &&
              out->type == SW_PIX_F32))
            return sw_fail(ctx, SW_EINVAL,
                           "detector: the electron and output images overlap (in place is "
                           "allowed only for an f32 output over the same pixels)");
        return sw_detector_apply_cuda(ctx, d, electrons, out);
#else
        return sw_fail(ctx, SW_EINTERNAL, "detector: CUDA context in a build without CUDA");
#endif
    }
    /* In place is fine over the same f32 pixels (each pixel is read before it is written);
     * any other overlap is not. */
    if (overlap(electrons, out) && !(out->data == electrons->data &&
                                     out->stride == electrons->stride && out->type == SW_PIX_F32))
        return sw_fail(ctx, SW_EINVAL,
                       "detector: the electron and output images overlap (in place is allowed "
                       "only for an f32 output over the same pixels)");
    /* Non-finite electrons would give undefined integer conversions: refuse them first. */
    int64_t bad = 0;
    for (int32_t y = 0; y < electrons->height; y++) {
        const float *row = sw_image_row(electrons, y);
        for (int32_t x = 0; x < electrons->width; x++)
            bad += !isfinite(row[x]);
    }
    if (bad)
        return sw_fail(ctx, SW_ERANGE, "detector: %lld electron pixels are NaN or infinite",
                       (long long)bad);
    apply_cpu(ctx, d, electrons, out);
    return SW_OK;
}

/*
 * Random test frames for the find stage's tests (unit and gpu): a counter-based generator over
 * the spotwave RNG (the same numbers everywhere), Poisson deviates and Poisson scenes with
 * Gaussian spots. Header-only (static inline), included by the tests that need it.
 */
#ifndef SW_FIND_TESTUTIL_H
#define SW_FIND_TESTUTIL_H

#include "testutil.h"

#include "spotwave/rng.h"
#include "spotwave/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ random numbers */

typedef struct trng {
    uint64_t seed, index;
    uint32_t w[4];
    int k;
} trng;

static inline trng trng_make(uint64_t seed)
{
    trng r = {seed, 0, {0, 0, 0, 0}, 4};
    return r;
}

static inline uint32_t trng_u32(trng *r)
{
    if (r->k == 4) {
        sw_rng4 d = sw_rng_draw(r->seed, SW_RNG_STREAM_TEST, r->index++);
        memcpy(r->w, d.v, sizeof(r->w));
        r->k = 0;
    }
    return r->w[r->k++];
}

static inline double trng_u01(trng *r)
{
    return ((double)trng_u32(r) + 0.5) / 4294967296.0;
}

static inline int trng_int(trng *r, int n)
{
    return (int)(trng_u01(r) * n);
}

/* Poisson deviate: Knuth's product of uniforms below 30, a rounded normal above. */
static inline double poisson(trng *r, double mean)
{
    if (mean <= 0.0)
        return 0.0;
    if (mean < 30.0) {
        double l = exp(-mean), p = 1.0;
        int k = 0;
        do {
            k++;
            p *= trng_u01(r);
        } while (p > l);
        return k - 1;
    }
    double u1 = trng_u01(r), u2 = trng_u01(r);
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    double v = floor(mean + sqrt(mean) * z + 0.5);
    return v < 0.0 ? 0.0 : v;
}

/* ------------------------------------------------------------------ scenes */

/* Poisson background (mean bg, sloping across the frame) with `nspots` Gaussian spots (peaks
 * 20 .. 620 counts, sigma 0.8 .. 2), some within 2 px of the edges. */
static inline void scene(int w, int h, double bg, int nspots, trng *r, double *out)
{
    double *lam = malloc((size_t)w * h * sizeof(double));
    assert_non_null(lam);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            lam[(size_t)y * w + x] = bg * (0.6 + 0.8 * (double)x / w);
    for (int k = 0; k < nspots; k++) {
        double cx = trng_u01(r) * (w - 1), cy = trng_u01(r) * (h - 1);
        if (k % 3 == 1) /* near an edge */
            cx = trng_int(r, 2) ? trng_u01(r) * 2.0 : (w - 1) - trng_u01(r) * 2.0;
        double peak = 20.0 + 600.0 * trng_u01(r), sig = 0.8 + 1.2 * trng_u01(r);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                double d2 = (x - cx) * (x - cx) + (y - cy) * (y - cy);
                if (d2 < 36.0 * sig * sig)
                    lam[(size_t)y * w + x] += peak * exp(-0.5 * d2 / (sig * sig));
            }
    }
    for (size_t i = 0; i < (size_t)w * h; i++)
        out[i] = poisson(r, lam[i]);
    free(lam);
}

/* Pixel (x, y) of a host image set to v (converted to the image's type). */
static inline void set_px(sw_image *img, int32_t x, int32_t y, double v)
{
    void *row = sw_image_row(img, y);
    switch (img->type) {
    case SW_PIX_U8: ((uint8_t *)row)[x] = (uint8_t)v; break;
    case SW_PIX_U16: ((uint16_t *)row)[x] = (uint16_t)v; break;
    case SW_PIX_U32: ((uint32_t *)row)[x] = (uint32_t)v; break;
    default: ((float *)row)[x] = (float)v; break;
    }
}

/* A host image from sw_image_alloc on ctx; fails the test otherwise. */
static inline sw_image frame_alloc(sw_context *ctx, int32_t w, int32_t h, sw_pixel_type t)
{
    sw_image img;
    if (sw_image_alloc(ctx, w, h, t, &img) != SW_OK)
        fail_msg("sw_image_alloc: %s", sw_context_error(ctx));
    return img;
}

static inline sw_image star_frame_on(sw_context *cpu, int32_t w, int32_t h, const sw_stars *stars,
                                     double sigma, double sky, uint64_t seed, sw_pixel_type t)
{
    sw_image e = frame_alloc(cpu, w, h, SW_PIX_F32);
    if (stars && stars->count > 0) {
        sw_starsim_params p;
        sw_starsim_params_default(&p);
        p.width = w;
        p.height = h;
        p.sigma = sigma;
        p.roi_side = 2 * (int32_t)ceil(5.0 * sigma) + 1;
        p.psf = SW_PSF_INTEGRATED;
        p.method = SW_STARSIM_OPENMP;
        p.max_stars = stars->count;
        sw_starsim *sim = NULL;
        if (sw_starsim_create(cpu, &p, &sim) != SW_OK || sw_starsim_run(sim, stars, &e) != SW_OK)
            fail_msg("star simulator: %s", sw_context_error(cpu));
        sw_starsim_destroy(sim);
    }
    sw_detector d;
    sw_detector_default(&d);
    d.sky_e = sky;
    d.shot_noise = 1;
    d.gain_e_per_adu = 1.0;
    d.out_type = t;
    d.seed = seed;
    sw_image out = frame_alloc(cpu, w, h, t);
    if (sw_detector_apply(cpu, &d, &e, &out) != SW_OK)
        fail_msg("sw_detector_apply: %s", sw_context_error(cpu));
    sw_image_free(&e);
    return out;
}

#endif

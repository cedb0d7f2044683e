/*
 * Between the C side of the Shack-Hartmann simulator (shsim.c: API, validation, pupil sampling,
 * truth, the CPU renderers) and its CUDA twin (shsim_cuda.cu). Not public. The formulas both
 * sides evaluate are in sh_model.h.
 */
#ifndef SW_SIM_SH_INTERNAL_H
#define SW_SIM_SH_INTERNAL_H

#include "core/core_internal.h"
#include "sim/sh_model.h"
#include "spotwave/sim_sh.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Origin of a spot or patch that is off any image (its centre beyond +-SW_SH_FAR px). */
#define SW_SH_OFF (INT32_MIN / 4)
#define SW_SH_FAR 1e7

/* A GEOMETRIC spot as the renderers take it: the roi_px x roi_px block starting at pixel
 * (x0, y0) (psf.h's sw_roi_origin of the spot centre), the centre relative to it, the flux. */
typedef struct sw_sh_gspot {
    int32_t x0, y0;
    double dx, dy;
    double flux;
} sw_sh_gspot;

/* A DIFFRACTION lenslet as the renderers take it (sh_model.h). Its tile of tile x tile samples
 * starts at sample (gx0, gy0) of the plan's pupil grid; focal index k = 0 lies on sub-sample
 * (mx, my) (sub-sample m of pixel floor(m / os)); the patch of detector pixels its DFT window
 * covers starts at (px0, py0); (ax, ay) is the tilt in radians of phase per pupil sample; scale
 * turns |DFT|^2 into electrons. */
typedef struct sw_sh_dlens {
    int32_t gx0, gy0;
    int32_t mx, my;
    int32_t px0, py0;
    double ax, ay;
    double scale;
} sw_sh_dlens;

/* The constants of the per-lenslet formulas (sw_sh_lens_finish below; shsim.c's prepare on
 * the host, the lens kernel of shsim_cuda.cu on the device). */
typedef struct sw_sh_kconst {
    int32_t roi;      /* GEOMETRIC: roi_px                                   */
    int32_t os, N;    /* DIFFRACTION: oversample, FFT side                   */
    double F;         /* px per radian                                       */
    double kw;        /* 2 pi / lambda, rad per um                           */
    double h;         /* pupil sample spacing, um                            */
    double m_samples; /* DIFFRACTION: lenslet side in samples (p / delta)     */
} sw_sh_kconst;

struct sw_shsim {
    sw_context *ctx;
    sw_shsim_params p; /* after the automatic choices; p.geom.valid points to `valid` */
    uint8_t *valid;    /* copy of the caller's mask (NULL: all valid) */
    int32_t nl;        /* nx * ny */
    double p_um;       /* lenslet pitch in the pupil, um */
    double F;          /* px per radian */
    double z_px;       /* lambda f / (p pixel) */
    int threads;       /* CPU threads (the context's at create) */
    sw_sh_kconst kc;   /* the per-lenslet formulas' constants (filled at create) */

    /* The pupil grid: gw x gh samples, sample (i, k) at u = gu0 + i h, v = gv0 + k h (um).
     * GEOMETRIC: h = p / samples with a one-sample border; DIFFRACTION: h = delta. */
    int32_t gw, gh;
    double h, gu0, gv0;
    double *opd;     /* gw * gh OPD samples (um) */
    double *scratch; /* gw * gh, for the setters (all or nothing) */
    uint8_t *need;   /* 0: unused, 1: neighbour of a lit sample, 2: lit */
    float *cover;    /* GEOMETRIC: pupil coverage of each sample, gw * gh */

    /* Lenslets */
    double *illum; /* nl */
    int32_t *lit;  /* flat indices of the drawn lenslets (valid and illum > min_illum) */
    int32_t nlit;
    double *truth_x, *truth_y, *slope_x, *slope_y; /* nl each (NaN for lenslets not drawn) */
    int dirty;     /* the OPD changed since the truth was computed */
    int gpu_stale; /* the device copies are older than the host's */
    int dev_opd;   /* the OPD was set on the device (sw_shsim_set_opd_device): the host's OPD,
                      truth and renderer inputs are stale until sw_shsim_clear_opd */
    int32_t lit_i0, lit_i1, lit_k0, lit_k1; /* bounding box of the lit samples (need == 2) */

    /* DIFFRACTION */
    int32_t N, os, tile, pw; /* FFT side, oversample, tile side, patch side (pixels) */
    double m_samples;        /* p / delta: lenslet side in pupil samples */
    float *amp;              /* nlit * tile * tile sample amplitudes A */
    int32_t *tile_g;         /* 2 * nlit tile origins (gx0, gy0) */
    sw_sh_dlens *dlens;      /* nlit */
    sw_sh_gspot *gspots;     /* GEOMETRIC: nlit */
    float *opd_f;            /* CUDA DIFFRACTION: float copy of opd for upload */

    /* CPU renderers */
    double *cpu_w;    /* GEOMETRIC: threads x 2 x roi weights */
    void *fft_rows;   /* DIFFRACTION: fftw_plan over the tile's rows */
    void *fft_cols;   /* fftw_plan over all columns */
    void *fft_buf;    /* threads x N x N fftw_complex */
    int32_t *fft_map; /* threads x 2 x N: pixel of each array index */
    double *patches;  /* chunk x pw x pw */
    int32_t chunk;    /* lenslets per CPU chunk */

    /* CUDA */
    void *gpu;          /* state owned by shsim_cuda.cu */
    sw_image gpu_image; /* f32 device image for runs into host images */
    int last_gpu;       /* the last run rendered on the GPU */
};

/* The renderers' description of a GEOMETRIC spot at (x, y) (sw_sh_gspot). */
SW_SHM_FN sw_sh_gspot sw_sh_make_gspot(const sw_sh_kconst *c, double x, double y, double flux)
{
    sw_sh_gspot s;
    if (!(fabs(x) < SW_SH_FAR && fabs(y) < SW_SH_FAR)) {
        s.x0 = s.y0 = SW_SH_OFF;
        s.dx = s.dy = s.flux = 0.0;
        return s;
    }
    s.x0 = sw_roi_origin(x, c->roi);
    s.y0 = sw_roi_origin(y, c->roi);
    s.dx = x - s.x0;
    s.dy = y - s.y0;
    s.flux = flux;
    return s;
}

/* The renderers' description of a DIFFRACTION lenslet (tile origin (gx0, gy0)) whose spot is at
 * (x, y), with mean gradient (sx, sy) and weight sum wsum = sum A (0: nothing lit). */
SW_SHM_FN sw_sh_dlens sw_sh_make_dlens(const sw_sh_kconst *c, int32_t gx0, int32_t gy0, double x,
                                       double y, double sx, double sy, double wsum, double flux)
{
    sw_sh_dlens d;
    d.gx0 = gx0;
    d.gy0 = gy0;
    d.mx = d.my = 0;
    d.ax = d.ay = d.scale = 0.0;
    if (!(fabs(x) < SW_SH_FAR && fabs(y) < SW_SH_FAR) || !(wsum > 0.0)) {
        d.px0 = d.py0 = SW_SH_OFF;
        return d;
    }
    const int os = c->os, N = c->N;
    /* Sub-sample m is centred at (m + 1/2) / os - 1/2. Focal index k = 0 goes on sub-sample m_c;
     * the window k = -floor(N/2) .. ceil(N/2) - 1 is centred half a sample below k = 0 for even
     * N. The tails that the DFT wraps round the window pull the pattern's centroid towards the
     * window's centre (by ~2% of the offset for a sinc^2 pattern), so m_c is chosen to put the
     * window's centre, not k = 0, nearest the spot: the offset is then at most half a focal
     * sample and averages zero. */
    const double half = N % 2 == 0 ? 0.5 / os : 0.0;
    const double mx = floor((x + half + 0.5) * os), my = floor((y + half + 0.5) * os);
    const double tx = x - ((mx + 0.5) / os - 0.5), ty = y - ((my + 0.5) / os - 0.5);
    d.mx = (int32_t)mx;
    d.my = (int32_t)my;
    const int kmin = -(N / 2);
    d.px0 = (int32_t)sw_shm_floor_div((int64_t)d.mx + kmin, os);
    d.py0 = (int32_t)sw_shm_floor_div((int64_t)d.my + kmin, os);
    /* tilt: remove the mean gradient, add the residual offset t (F px per radian) */
    d.ax = c->kw * (tx / c->F - sx) * c->h;
    d.ay = c->kw * (ty / c->F - sy) * c->h;
    /* |E|^2 sums to N^2 sum A^2 and peaks at (sum A)^2 = (lit area in samples)^2, as the
     * continuous pattern of the lit area; flux_e / (N^2 M^2) makes that peak the continuous
     * pattern's for flux_e per full lenslet (see the top of shsim.c) */
    d.scale = flux / ((double)N * (double)N * c->m_samples * c->m_samples);
    return d;
}

/* One lenslet from its weighted gradient sums (sum w, sum w dW/du, sum w dW/dv; weights: the
 * model's, see sim_sh.h) and reference position (rx, ry): the mean gradient (*gx, *gy, radians),
 * the spot (*x, *y) = reference + F <grad W>, and the renderer's input (*gs for GEOMETRIC, *dl
 * for DIFFRACTION; the other is left alone). */
SW_SHM_FN void sw_sh_lens_finish(const sw_sh_kconst *c, int geometric, double sw, double sx,
                                 double sy, double rx, double ry, int32_t gx0, int32_t gy0,
                                 double flux, double *gx, double *gy, double *x, double *y,
                                 sw_sh_gspot *gs, sw_sh_dlens *dl)
{
    *gx = sw > 0.0 ? sx / sw : 0.0;
    *gy = sw > 0.0 ? sy / sw : 0.0;
    *x = SW_SHM_MAD(c->F, *gx, rx);
    *y = SW_SHM_MAD(c->F, *gy, ry);
    if (geometric)
        *gs = sw_sh_make_gspot(c, *x, *y, flux);
    else
        *dl = sw_sh_make_dlens(c, gx0, gy0, *x, *y, *gx, *gy, sw, flux);
}

#ifdef SW_HAVE_CUDA
/* Allocates the device buffers and cuFFT plans (DIFFRACTION) and uploads the amplitudes. */
sw_status sw_shsim_gpu_create(sw_shsim *plan);
/* Renders the prepared lenslets into out, an f32 device image of the plan's size (cleared
 * first unless accumulate); uploads the spots / OPD when plan->gpu_stale. Queued on the
 * context's stream. */
sw_status sw_shsim_gpu_run(sw_shsim *plan, sw_image *out, int accumulate);
void sw_shsim_gpu_destroy(sw_shsim *plan);
/* sw_shsim_set_opd_device's work (arguments checked): resamples the device map onto the pupil
 * grid, then the per-lenslet kernel writes the renderers' inputs on the device. Queued. */
sw_status sw_shsim_gpu_set_opd(sw_shsim *plan, const float *opd, int32_t nu, int32_t nv,
                               double spacing_um, double u0_um, double v0_um);
/* Device time of the last run's rendering kernels, microseconds; -1 if none. */
double sw_shsim_gpu_render_us(sw_shsim *plan);
#endif

#ifdef __cplusplus
}
#endif

#endif

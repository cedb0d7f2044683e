/*
 * Between the C side of the Shack-Hartmann simulator (shsim.c: API, validation, pupil sampling,
 * truth, the CPU renderers) and its CUDA twin (shsim_cuda.cu). Not public. The formulas both
 * sides evaluate are in sh_model.h.
 */
#ifndef SW_SIM_SH_INTERNAL_H
#define SW_SIM_SH_INTERNAL_H

#include "core/core_internal.h"
#include "spotwave/sim_sh.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Origin of a spot or patch that is off any image (its centre beyond +-1e7 px). */
#define SW_SH_OFF (INT32_MIN / 4)

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

struct sw_shsim {
    sw_context *ctx;
    sw_shsim_params p; /* after the automatic choices; p.geom.valid points to `valid` */
    uint8_t *valid;    /* copy of the caller's mask (NULL: all valid) */
    int32_t nl;        /* nx * ny */
    double p_um;       /* lenslet pitch in the pupil, um */
    double F;          /* px per radian */
    double z_px;       /* lambda f / (p pixel) */
    int threads;       /* CPU threads (the context's at create) */

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

#ifdef SW_HAVE_CUDA
/* Allocates the device buffers and cuFFT plans (DIFFRACTION) and uploads the amplitudes. */
sw_status sw_shsim_gpu_create(sw_shsim *plan);
/* Renders the prepared lenslets into out, an f32 device image of the plan's size (cleared
 * first unless accumulate); uploads the spots / OPD when plan->gpu_stale. Queued on the
 * context's stream. */
sw_status sw_shsim_gpu_run(sw_shsim *plan, sw_image *out, int accumulate);
void sw_shsim_gpu_destroy(sw_shsim *plan);
/* Device time of the last run's rendering kernels, microseconds; -1 if none. */
double sw_shsim_gpu_render_us(sw_shsim *plan);
#endif

#ifdef __cplusplus
}
#endif

#endif

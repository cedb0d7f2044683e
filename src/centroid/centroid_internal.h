/*
 * Between the C side of the centroid stage (centroid.c: API, validation, the CPU implementation)
 * and its CUDA twin (centroid_cuda.cu). Not public. The per-pixel conditioning and the per-lenslet
 * finish are written once, in centroid_model.h, for both.
 */
#ifndef SW_CENTROID_INTERNAL_H
#define SW_CENTROID_INTERNAL_H

#include "centroid/centroid_model.h"
#include "core/core_internal.h"
#include "spotwave/centroid.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The one-block layout of a result's ten arrays (sw_centroid_result_alloc: owned = 2, the arrays
 * at these byte offsets from one allocation; the plan's device buffers on the GPU likewise), for
 * n = frames x lenslets and ns = frames x 2 x slopes: the arrays an AO loop or a host-to-host run
 * asks for first and together (x, y, intensity, slopes, valid, saturated), then status and the
 * error bars, so that the GPU copies the ones asked for back in one transfer per run of them
 * (centroid_cuda.cu cg_sizes).
 */
typedef struct sw_cr_layout {
    size_t x, y, intensity, slopes, valid, saturated, status, x_var, y_var, snr, bytes;
} sw_cr_layout;

static inline sw_cr_layout sw_cr_layout_of(size_t n, size_t ns)
{
    sw_cr_layout l;
    l.x = 0;
    l.y = l.x + n * sizeof(float);
    l.intensity = l.y + n * sizeof(float);
    l.slopes = l.intensity + n * sizeof(float);
    l.valid = l.slopes + (ns ? ns : 1) * sizeof(float);
    l.saturated = l.valid + n;
    l.status = l.saturated + n;
    l.x_var = (l.status + n + 15) / 16 * 16;
    l.y_var = l.x_var + n * sizeof(float);
    l.snr = l.y_var + n * sizeof(float);
    l.bytes = l.snr + n * sizeof(float);
    return l;
}

/* Regions of at most 128 x 128 pixels keep the exact integer sums inside 32 bits per column
 * (128 * 127 / 2 * 65535 < 2^32) and 64 bits per lenslet. */
#define SW_CENTROID_MAX_PITCH SW_CENTROID_MAX_PITCH_PX

struct sw_centroid_plan {
    sw_context *ctx;
    sw_centroid_params p;  /* as given; p.dark / p.flat / p.lut / p.geometry.valid point to the
                              plan's own copies below */
    sw_centroid_path path; /* resolved */
    int32_t nx, ny, nl;    /* grid, nl = nx * ny */

    /* Windowed pixel regions: lenslet (ix, iy) sums columns [xs[ix], xe[ix]) and rows
     * [ys[iy], ye[iy]) (sw_sh_region shrunk by the window on every side). The moments are taken
     * about (xs, ys). */
    int32_t *xs, *xe;   /* nx each */
    int32_t *ys, *ye;   /* ny each */
    int32_t col0, col1; /* union of the columns: [col0, col1) = [xs[0], xe[nx-1]) */
    /* col_ix[x - col0] = ix of the lenslet that sums column x, or -1 (a window gap). */
    int32_t *col_ix; /* col1 - col0 */

    /* Conditioning (host copies; NULL when off) */
    uint8_t *valid;     /* nl mask copy, or NULL */
    float *dark, *flat; /* width * height */
    float *lut;         /* 256 or 65536 */
    int exact;          /* 1: integer frame, no conditioning: exact integer sums */
    int fraction;       /* 1: threshold_kind FRACTION with a threshold mode (needs the max pass) */

    /* Saturation (centroid.h): a raw pixel is saturated when (integer frames) raw >= sat_u, or
     * (f32 frames) raw >= sat_f. sat_u = ceil(level), UINT32_MAX when none; sat_f = the
     * smallest float >= level, NaN when none (no comparison with NaN is true). */
    int sat_on; /* 1: a level is set (the checks run) */
    uint32_t sat_u;
    float sat_f;
    double sat_level; /* the level in force, or -1 (none) */

    /* Slopes */
    int32_t nslopes;       /* lenslets valid in the mask */
    int32_t *slope_l;      /* nslopes flat lenslet indices, increasing */
    int32_t *slope_k;      /* nl: the slope index of lenslet l, or -1 (not in the mask) */
    double *ref_x, *ref_y; /* nl reference positions */

    /* The generic path (centroid.h "Methods"; centroid_method.h): fast = 1 runs the CoG code
     * above instead. wmax, hmax: the largest windowed region. */
    int fast;
    sw_cmb_params mp;
    float *corr_ref; /* CORRELATION: width * height template image (copy) */
    int32_t wmax, hmax;
    size_t cpu_gen_bytes; /* per thread: the region (wmax * hmax floats), the template's region
                             (CORRELATION), nscratch doubles                               */
    size_t nscratch;      /* sw_cmb_region.scratch doubles per lenslet (CORRELATION, WCOG) */
    char *cpu_gen;        /* threads x cpu_gen_bytes */

    /* CPU */
    int threads;
    double *cpu_acc; /* threads x 5 x (col1 - col0): column sums S0, S1, threshold/max, row,
                        saturated columns (bytes) */

    /* CUDA (owned by centroid_cuda.cu) */
    void *gpu;
    int timing;
    double kernel_us;
    int32_t bands;    /* sw_centroid_set_bands: 0 auto, else the count asked for */
    int copy_overlap; /* 1: the device copies while it computes (COPY in bands; centroid_cuda.cu) */
};

/* The one block of a result that sw_centroid_result_alloc made (owned = 2; sw_cr_layout), from
 * any of its arrays the caller left; NULL for any other result. */
void *sw_centroid_result_block(const sw_centroid_result *r);

#ifdef SW_HAVE_CUDA
/* Allocates the device copies of the tables, the frame buffer for COPY and the result buffers
 * for host results; chooses the launch shape. */
sw_status sw_centroid_gpu_create(sw_centroid_plan *plan);
/* Runs nframes frames of `frames` (already checked against the plan: width, type, memory for the
 * plan's path, height = nframes * p.height) into out (checked: room, memory). Host results are
 * complete on return; device results are queued on the context's stream. */
sw_status sw_centroid_gpu_run(sw_centroid_plan *plan, const sw_image *frames, int32_t nframes,
                              sw_centroid_result *out);
/* Uploads plan->ref_x / ref_y after sw_centroid_set_reference (queued; before the next run). */
sw_status sw_centroid_gpu_set_reference(sw_centroid_plan *plan);
void sw_centroid_gpu_destroy(sw_centroid_plan *plan);
/* The fast kernel's row groups R and lanes per lenslet gs (choose_shape): the band-wise real-time
 * chain (src/loop/rtc_band_cuda.cu) sums a lenslet's pixels in the same order with them. */
void sw_centroid_gpu_shape(const sw_centroid_plan *plan, int *r, int *gs);
/* Device / pinned allocation for sw_centroid_result_alloc. */
void *sw_centroid_gpu_alloc(sw_context *ctx, size_t bytes, sw_memory memory);
void sw_centroid_gpu_free(void *p, sw_memory memory);
#endif

#ifdef __cplusplus
}
#endif

#endif

/*
 * The centroid search (search.h; seed 001 Sec. 3.2): the API, the validation, the dispatch to the
 * backends, and the CPU implementations of PAPYCS (Sec. 3.2.1, Algorithms 1-2), CoM (Sec. 3.2.3)
 * and the discarding stage (Sec. 3.2.1), OpenMP over spots. Reichenbach's algorithm (Sec. 3.2.2)
 * is search_reich.c; the GPU twins are search_cuda.cu and search_reich_cuda.cu. The arithmetic is
 * search_model.h, shared with the GPU, so both backends give the same bits.
 */
#include "centroid/search_internal.h"
#include "centroid/search_model.h"

#ifdef SW_HAVE_CUDA
#include "core/core_cuda.h"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- names */

const char *sw_search_algorithm_string(sw_search_algorithm a)
{
    switch (a) {
    case SW_SEARCH_PAPYCS: return "papycs";
    case SW_SEARCH_COM: return "com";
    case SW_SEARCH_REICHENBACH: return "reichenbach";
    }
    return "?";
}

sw_status sw_search_algorithm_parse(const char *text, sw_search_algorithm *out)
{
    static const sw_search_algorithm all[] = {SW_SEARCH_PAPYCS, SW_SEARCH_COM,
                                              SW_SEARCH_REICHENBACH};
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "search algorithm: NULL argument");
    for (size_t k = 0; k < sizeof all / sizeof all[0]; ++k) {
        if (strcasecmp(text, sw_search_algorithm_string(all[k])) == 0) {
            *out = all[k];
            return SW_OK;
        }
    }
    return sw_fail(NULL, SW_EINVAL,
                   "unknown search algorithm '%s' (expected papycs, com or reichenbach)", text);
}

const char *sw_spot_status_string(sw_spot_status s)
{
    switch (s) {
    case SW_SPOT_OK: return "ok";
    case SW_SPOT_INACTIVE: return "inactive";
    case SW_SPOT_OUTSIDE: return "window outside the frame";
    case SW_SPOT_FLAT: return "flat window";
    case SW_SPOT_NOT_FOUND: return "not found";
    case SW_SPOT_EMPTY: return "discarded: empty or saturated cell";
    case SW_SPOT_SPACING: return "discarded: spacing";
    case SW_SPOT_ISOLATED: return "discarded: isolated";
    case SW_SPOT_OUTLIER: return "rejected by the fit: outlier";
    }
    return "unknown status";
}

/* ---------------------------------------------------------------- parameters */

void sw_search_params_default(sw_search_params *p, int32_t width, int32_t height, int32_t nspots)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->width = width;
    p->height = height;
    p->type = SW_PIX_U8;
    p->algorithm = SW_SEARCH_PAPYCS;
    p->nspots = nspots;
    p->nx = 0;
    p->ny = 0;
    p->pitch_px = 0.0;
    p->window_px = 16;
    p->min_window_px = 3;
    p->neighbour_window = 0.0;
    p->peak_box = 13;
    p->peak_threshold = 0.0;
    p->seed_size = 5;
    p->capture_px = 0.0;
    p->discard = 1; /* runs only with a grid */
    p->discard_contrast = 15.0;
    p->discard_ring_px = 1;
    p->min_spacing = 0.5;
    p->max_spacing = 1.5;
}

int32_t sw_search_discard_ring(double pitch_px)
{
    double d = floor(pitch_px / 32.0 + 0.5);
    if (!(d >= 1.0) || !isfinite(pitch_px)) /* search.h: 1 for a pitch not finite and positive */
        return 1;
    return d > SW_SEARCH_MAX_WINDOW / 2 ? SW_SEARCH_MAX_WINDOW / 2 : (int32_t)d;
}

static sw_status check_params(sw_context *ctx, const sw_search_params *p)
{
    if (p->width < 3 || p->height < 3 || p->width > SW_IMAGE_MAX_DIM ||
        p->height > SW_IMAGE_MAX_DIM ||
        (int64_t)p->width * (int64_t)p->height > SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_EINVAL, "search: frame size %dx%d (width, height must be 3..%d)",
                       p->width, p->height, SW_IMAGE_MAX_DIM);
    if (p->type != SW_PIX_U8 && p->type != SW_PIX_U16 && p->type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL, "search: pixel type %d (%s) is not u8, u16 or f32",
                       (int)p->type, sw_pixel_type_string(p->type));
    if (p->algorithm != SW_SEARCH_PAPYCS && p->algorithm != SW_SEARCH_COM &&
        p->algorithm != SW_SEARCH_REICHENBACH)
        return sw_fail(ctx, SW_EINVAL, "search: algorithm %d is not papycs, com or reichenbach",
                       (int)p->algorithm);
    if (p->nspots < 1 || p->nspots > (1 << 24))
        return sw_fail(ctx, SW_EINVAL, "search: nspots %d is not in 1..%d", p->nspots, 1 << 24);
    int grid = p->nx != 0 || p->ny != 0;
    if (grid) {
        if (p->nx < 1 || p->ny < 1 || (int64_t)p->nx * p->ny != p->nspots)
            return sw_fail(ctx, SW_EINVAL,
                           "search: grid nx x ny = %d x %d does not hold nspots = %d spots (or "
                           "0, 0 for no grid)",
                           p->nx, p->ny, p->nspots);
        if (!(p->pitch_px > 0.0) || !isfinite(p->pitch_px))
            return sw_fail(ctx, SW_EINVAL, "search: pitch_px %g is not a positive number",
                           p->pitch_px);
    }
    /* A 1-pixel window on a converged spot holds one pixel, which is its own minimum: S0' = 0. */
    if (p->min_window_px < 2)
        return sw_fail(ctx, SW_EINVAL, "search: min_window_px %d is not >= 2", p->min_window_px);
    if (p->window_px < p->min_window_px || p->window_px > SW_SEARCH_MAX_WINDOW)
        return sw_fail(ctx, SW_EINVAL, "search: window_px %d is not in min_window_px (%d) .. %d",
                       p->window_px, p->min_window_px, SW_SEARCH_MAX_WINDOW);
    if (!(p->neighbour_window >= 0.0) || !isfinite(p->neighbour_window))
        return sw_fail(ctx, SW_EINVAL, "search: neighbour_window %g is not a finite number >= 0",
                       p->neighbour_window);
    if (p->algorithm == SW_SEARCH_REICHENBACH) {
        if (!grid)
            return sw_fail(ctx, SW_EINVAL,
                           "search: Reichenbach's algorithm needs a grid (nx, ny, pitch_px)");
        if (p->peak_box < 3 || p->peak_box > SW_SEARCH_MAX_BOX || p->peak_box % 2 == 0)
            return sw_fail(ctx, SW_EINVAL, "search: peak_box %d is not odd in 3..%d", p->peak_box,
                           SW_SEARCH_MAX_BOX);
        if (!(p->peak_threshold >= 0.0) || !isfinite(p->peak_threshold))
            return sw_fail(ctx, SW_EINVAL, "search: peak_threshold %g is not >= 0",
                           p->peak_threshold);
        if (p->seed_size < 1 || p->seed_size > 15 || p->seed_size % 2 == 0)
            return sw_fail(ctx, SW_EINVAL, "search: seed_size %d is not odd in 1..15",
                           p->seed_size);
        if (!(p->capture_px >= 0.0) || !isfinite(p->capture_px))
            return sw_fail(ctx, SW_EINVAL, "search: capture_px %g is not >= 0 (0: pitch_px / 2)",
                           p->capture_px);
    }
    if (p->discard != 0 && p->discard != 1)
        return sw_fail(ctx, SW_EINVAL, "search: discard %d is not 0 or 1", p->discard);
    if (p->discard && grid) {
        if (!isfinite(p->discard_contrast))
            return sw_fail(ctx, SW_EINVAL, "search: discard_contrast %g is not finite",
                           p->discard_contrast);
        if (p->discard_ring_px < 1 || p->discard_ring_px > SW_SEARCH_MAX_WINDOW / 2)
            return sw_fail(ctx, SW_EINVAL, "search: discard_ring_px %d is not 1 .. %d",
                           p->discard_ring_px, SW_SEARCH_MAX_WINDOW / 2);
        if (!(p->min_spacing >= 0.0) || !isfinite(p->max_spacing) ||
            !(p->max_spacing >= p->min_spacing))
            return sw_fail(ctx, SW_EINVAL,
                           "search: spacing limits %g .. %g (x pitch) are not 0 <= min <= max",
                           p->min_spacing, p->max_spacing);
    }
    return SW_OK;
}

/* ---------------------------------------------------------------- plan */

void sw_search_destroy(sw_search_plan *plan)
{
    if (!plan)
        return;
    sw_reich_destroy(plan->reich);
#ifdef SW_HAVE_CUDA
    if (plan->cuda)
        sw_search_gpu_destroy(plan);
#endif
    free(plan->h_ones);
    free(plan->h_int);
    free(plan->h_flag1);
    free(plan->h_flag2);
    free(plan);
}

sw_status sw_search_create(sw_context *ctx, const sw_search_params *p, sw_search_plan **out)
{
    if (!ctx || !p || !out)
        return sw_fail(ctx, SW_EINVAL, "sw_search_create: NULL argument");
    *out = NULL;
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;
    sw_search_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return sw_fail(ctx, SW_ENOMEM, "search: out of host memory for the plan");
    plan->ctx = ctx;
    plan->p = *p;
    if (plan->p.nx != 0 && plan->p.capture_px == 0.0)
        plan->p.capture_px = plan->p.pitch_px / 2.0;
    plan->cuda = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    plan->discard = p->discard && p->nx != 0;
    size_t n = (size_t)p->nspots;
    plan->h_ones = malloc(n);
    plan->h_int = malloc(n * sizeof(double));
    plan->h_flag1 = malloc(n);
    plan->h_flag2 = malloc(n);
    if (!plan->h_ones || !plan->h_int || !plan->h_flag1 || !plan->h_flag2) {
        sw_search_destroy(plan);
        return sw_fail(ctx, SW_ENOMEM, "search: out of host memory for %zu spots", n);
    }
    memset(plan->h_ones, 1, n);
#ifdef SW_HAVE_CUDA
    if (plan->cuda) {
        st = sw_search_gpu_create(plan);
        if (st != SW_OK) {
            sw_search_destroy(plan);
            return st;
        }
    }
#endif
    if (p->algorithm == SW_SEARCH_REICHENBACH) {
        st = sw_reich_create(ctx, &plan->p, &plan->reich);
        if (st != SW_OK) {
            sw_search_destroy(plan);
            return st;
        }
    }
    *out = plan;
    return SW_OK;
}

int64_t sw_search_last_peaks(const sw_search_plan *plan)
{
    if (!plan || !plan->reich)
        return -1;
    return sw_reich_last_peaks(plan->reich);
}

/* ---------------------------------------------------------------- CPU: PAPYCS and CoM */

/* One spot, Algorithm 2 of the seed on one core: the steps of sides smax, smax - 1, ..., smin
 * (CoM: smin = smax), each computed as the warp computes it (search_model.h); smax is the spot's
 * own with the neighbour window (sw_sm_first_side). */
static void search_spot_cpu(const sw_image *f, double sx, double sy, int32_t smax, int32_t smin,
                            double *x, double *y, double *intensity, uint8_t *status)
{
    sw_sm_spot sp;
    if (sw_sm_spot_start(&sp, sx, sy)) {
        for (int32_t s = smax; s >= smin; --s) {
            double ncx, ncy, s0;
            int r = sw_sm_com_step_ex(f->data, f->stride, f->type, f->width, f->height, sp.cx,
                                      sp.cy, (double)s, &ncx, &ncy, &s0);
            if (!sw_sm_spot_update(&sp, r, ncx, ncy, s0))
                break;
        }
    }
    uint8_t st = sw_sm_spot_status(&sp);
    *status = st;
    *x = st == SW_SPOT_OK ? sp.cx : NAN;
    *y = st == SW_SPOT_OK ? sp.cy : NAN;
    *intensity = st == SW_SPOT_OK ? sp.s0 : NAN;
}

static void search_cpu(sw_search_plan *plan, const sw_image *frame, const double *sx,
                       const double *sy, const uint8_t *active, double *x, double *y,
                       double *intensity, uint8_t *status)
{
    int32_t n = plan->p.nspots, nx = plan->p.nx, ny = plan->p.ny;
    int32_t smax = plan->p.window_px;
    int32_t smin = plan->p.algorithm == SW_SEARCH_COM ? smax : plan->p.min_window_px;
    double f = plan->p.algorithm == SW_SEARCH_PAPYCS ? plan->p.neighbour_window : 0.0;
    int threads = sw_context_threads(plan->ctx);
    (void)threads;
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads) if (n > 8)
#endif
    for (int32_t k = 0; k < n; ++k) {
        if (!active[k]) {
            status[k] = SW_SPOT_INACTIVE;
            x[k] = NAN;
            y[k] = NAN;
            intensity[k] = NAN;
            continue;
        }
        int32_t s1 = sw_sm_first_side(sx, sy, k, nx, ny, f, smax, smin);
        search_spot_cpu(frame, sx[k], sy[k], s1, smin, &x[k], &y[k], &intensity[k], &status[k]);
    }
}

/* ---------------------------------------------------------------- CPU: discarding stage */

sw_status sw_search_discard_cpu(sw_search_plan *plan, const sw_image *frame, double *x, double *y,
                                double *intensity, uint8_t *status)
{
    const sw_search_params *p = &plan->p;
    int32_t n = p->nspots;
    int threads = sw_context_threads(plan->ctx);
    (void)threads;
    if (plan->discard) {
        uint8_t *f1 = plan->h_flag1, *f2 = plan->h_flag2;
        double lo = p->min_spacing * p->pitch_px, hi = p->max_spacing * p->pitch_px;
        /* Criterion 1: empty or saturated cell. */
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (n > 4096)
#endif
        for (int32_t k = 0; k < n; ++k) {
            uint8_t s = status[k];
            if (s == SW_SPOT_OK && !sw_sm_contrast_ok(frame->data, frame->stride, frame->type,
                                                      frame->width, frame->height, x[k], y[k],
                                                      p->discard_contrast, p->discard_ring_px))
                s = SW_SPOT_EMPTY;
            f1[k] = s;
        }
        /* Criterion 2: spacing to the 4-neighbours kept by 1. */
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (n > 4096)
#endif
        for (int32_t k = 0; k < n; ++k)
            f2[k] = sw_sm_discard_spacing(f1, x, y, k, p->nx, p->ny, lo, hi);
            /* Criterion 3: isolated. */
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (n > 4096)
#endif
        for (int32_t k = 0; k < n; ++k)
            status[k] = sw_sm_discard_isolated(f2, k, p->nx, p->ny);
    }
    /* The finish: no position for a spot that is not OK. */
    for (int32_t k = 0; k < n; ++k) {
        if (status[k] != SW_SPOT_OK) {
            x[k] = NAN;
            y[k] = NAN;
            intensity[k] = NAN;
        }
    }
    return SW_OK;
}

/* ---------------------------------------------------------------- run */

static int is_host_memory(sw_memory m)
{
    return m == SW_MEM_HOST || m == SW_MEM_PINNED;
}

#ifdef SW_HAVE_CUDA
/* A caller pointer must live where `memory` says (device pointers given as host memory would
 * crash a host copy, and the other way round). */
static sw_status check_where(sw_context *ctx, const void *ptr, int device, const char *name)
{
    if (!ptr)
        return SW_OK;
    int is_dev = sw_search_gpu_is_device(ptr);
    if (is_dev == 2)
        return SW_OK; /* managed memory: both */
    if (device && !is_dev)
        return sw_fail(ctx, SW_EINVAL,
                       "search: %s is not device memory (memory SW_MEM_DEVICE was given)", name);
    if (!device && is_dev)
        return sw_fail(ctx, SW_EINVAL,
                       "search: %s is device memory (memory SW_MEM_HOST/PINNED was given)", name);
    return SW_OK;
}

static sw_status run_cuda(sw_search_plan *plan, const sw_image *frame, const double *sx,
                          const double *sy, const uint8_t *active, int dev, double *x, double *y,
                          double *intensity, uint8_t *status)
{
    sw_context *ctx = plan->ctx;
    size_t n = (size_t)plan->p.nspots;
    sw_status st;
    const sw_image *df = frame;
    if (frame->memory != SW_MEM_DEVICE) {
        /* A host frame goes through the plan's device frame (the copy has finished on return). */
        st = sw_cuda_image_copy(ctx, frame, &plan->d_frame);
        if (st != SW_OK)
            return st;
        df = &plan->d_frame;
    }
    const double *dsx = sx, *dsy = sy;
    const uint8_t *dact = active ? active : plan->d_ones;
    double *dx = x, *dy = y, *dint = intensity ? intensity : plan->d_int;
    uint8_t *dstat = status;
    if (!dev) {
        dsx = plan->d_sx;
        dsy = plan->d_sy;
        dx = plan->d_x;
        dy = plan->d_y;
        dint = plan->d_int;
        dstat = plan->d_status;
        dact = plan->d_ones;
        if ((st = sw_search_gpu_copy(plan, plan->d_sx, sx, n * sizeof(double), 1)) != SW_OK ||
            (st = sw_search_gpu_copy(plan, plan->d_sy, sy, n * sizeof(double), 1)) != SW_OK)
            return st;
        if (active) {
            if ((st = sw_search_gpu_copy(plan, plan->d_active, active, n, 1)) != SW_OK)
                return st;
            dact = plan->d_active;
        }
    }
    if (plan->p.algorithm == SW_SEARCH_REICHENBACH) {
        st = sw_reich_run_gpu(plan->reich, df, dsx, dsy, dact, dx, dy, dint, dstat);
        if (st == SW_OK)
            st = sw_search_discard_gpu(plan, df, dx, dy, dint, dstat);
    } else {
        st = sw_search_gpu_search(plan, df, dsx, dsy, dact, dx, dy, dint, dstat);
        if (st == SW_OK && plan->discard)
            st = sw_search_discard_gpu(plan, df, dx, dy, dint, dstat);
    }
    if (st != SW_OK)
        return st;
    if (!dev) {
        if ((st = sw_search_gpu_copy(plan, x, plan->d_x, n * sizeof(double), 0)) != SW_OK ||
            (st = sw_search_gpu_copy(plan, y, plan->d_y, n * sizeof(double), 0)) != SW_OK ||
            (st = sw_search_gpu_copy(plan, status, plan->d_status, n, 0)) != SW_OK)
            return st;
        if (intensity &&
            (st = sw_search_gpu_copy(plan, intensity, plan->d_int, n * sizeof(double), 0)) != SW_OK)
            return st;
    }
    /* Queued only with device arrays and a device frame; otherwise finished on return. */
    if (!dev || frame->memory != SW_MEM_DEVICE)
        return sw_cuda_synchronize(ctx);
    return SW_OK;
}
#endif

sw_status sw_search_run(sw_search_plan *plan, const sw_image *frame, const double *start_x,
                        const double *start_y, const uint8_t *active, sw_memory memory, double *x,
                        double *y, double *intensity, uint8_t *status)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_search_run: plan is NULL");
    sw_context *ctx = plan->ctx;
    const sw_search_params *p = &plan->p;
    if (!frame || !start_x || !start_y || !x || !y || !status)
        return sw_fail(ctx, SW_EINVAL,
                       "sw_search_run: NULL frame, start_x, start_y, x, y or status");
    sw_status st = sw_image_check(ctx, frame);
    if (st != SW_OK)
        return st;
    if (frame->width != p->width || frame->height != p->height || frame->type != p->type)
        return sw_fail(ctx, SW_EINVAL, "search: frame %dx%d %s does not match the plan's %dx%d %s",
                       frame->width, frame->height, sw_pixel_type_string(frame->type), p->width,
                       p->height, sw_pixel_type_string(p->type));
    if (!is_host_memory(memory) && memory != SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL, "search: unknown memory kind %d", (int)memory);
    int dev = memory == SW_MEM_DEVICE;
    if (!plan->cuda) {
        if (dev)
            return sw_fail(ctx, SW_EINVAL,
                           "search: device arrays (SW_MEM_DEVICE) on a CPU context");
        if (frame->memory == SW_MEM_DEVICE)
            return sw_fail(ctx, SW_EINVAL, "search: a device frame on a CPU context");
    }
#ifdef SW_HAVE_CUDA
    if (plan->cuda) {
        int fdev = frame->memory == SW_MEM_DEVICE;
        if ((st = check_where(ctx, frame->data, fdev, "the frame")) != SW_OK ||
            (st = check_where(ctx, start_x, dev, "start_x")) != SW_OK ||
            (st = check_where(ctx, start_y, dev, "start_y")) != SW_OK ||
            (st = check_where(ctx, active, dev, "active")) != SW_OK ||
            (st = check_where(ctx, x, dev, "x")) != SW_OK ||
            (st = check_where(ctx, y, dev, "y")) != SW_OK ||
            (st = check_where(ctx, intensity, dev, "intensity")) != SW_OK ||
            (st = check_where(ctx, status, dev, "status")) != SW_OK)
            return st;
        return run_cuda(plan, frame, start_x, start_y, active, dev, x, y, intensity, status);
    }
#endif
    const uint8_t *act = active ? active : plan->h_ones;
    double *inten = intensity ? intensity : plan->h_int;
    if (p->algorithm == SW_SEARCH_REICHENBACH) {
        st = sw_reich_run_cpu(plan->reich, frame, start_x, start_y, act, x, y, inten, status);
        if (st != SW_OK)
            return st;
    } else {
        search_cpu(plan, frame, start_x, start_y, act, x, y, inten, status);
        if (!plan->discard)
            return SW_OK;
    }
    return sw_search_discard_cpu(plan, frame, x, y, inten, status);
}

/*
 * The real-time chain (loop.h, sw_rtc_*): frame -> centroids -> slopes -> reconstruction ->
 * controller -> commands, with telemetry. This file validates the parameters, builds what both
 * backends share (the centroid plan, the copied matrices, the controller, the D-SABRE plan, the
 * telemetry ring) and runs the chain on the CPU, stage by stage:
 *   1. centroids and slopes (the centroid stage, HOST path; seed 000 Eq. 6-7);
 *   2. reconstruction r:
 *        MVM:   r = C s (cblas_sgemv; C the truncated-SVD control matrix);
 *        SABRE: the slopes (pixels, over the mask) scattered into the 2 nx ny array D-SABRE takes,
 *               times slope_scale, then the D-SABRE run (seed 002 Eq. 6-11, 16), and
 *               CORNERS: r = the spline at the Fried corners,
 *               LOCAL:   r = the distributed projection inside the run (seed 002 Eq. 14-16),
 *               LOCAL_PUPIL: the same with a matrix per partition (pupil only, section 4.A),
 *               GLOBAL:  r = P c, P the global projection of the extended lattice (Eq. 13);
 *   3. the controller (controller.c: integrator / leaky / per-mode PI, seed 000 section 6);
 *   4. the commands to the caller and the telemetry slot.
 * On a CUDA context rtc_cuda.cu runs 1-3 as one CUDA graph instead; 4 stays here.
 *
 * Telemetry: a ring of slots in host memory, each a header {seq, frame} followed by the 2 ns
 * slopes and the nact commands. The owner writes slot (frame - 1) % slots at the end of each run
 * under a sequence lock: seq is made odd, the slot written, seq made even again (release), then
 * `newest` names the slot. A reader takes `newest`, reads seq (acquire; odd: retry), copies the
 * slot, and re-reads seq after an acquire fence: a change means the owner overwrote the slot
 * meanwhile, and it retries. The floats are copied with memcpy (the seqlock's usual data race on
 * the payload, made harmless by the sequence check and the fences).
 */
#define _POSIX_C_SOURCE 200809L

#include "loop/loop_internal.h"

#include "core/core_internal.h"

#include <cblas.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RTC_MAX_TELEMETRY 65536
#define RTC_MAX_ELEMENTS  ((int64_t)1 << 31) /* entries of one matrix (indices fit 32 bits ...) */

/* ------------------------------------------------------------------ telemetry ring */

typedef struct rtc_slot {
    _Atomic uint64_t seq; /* odd while the owner writes the slot */
    _Atomic int64_t frame;
} rtc_slot;

typedef struct rtc_ring {
    int32_t slots;
    size_t slot_bytes; /* header + (2 ns + nact) floats, rounded up to 64 bytes */
    size_t header;     /* offset of the floats in a slot */
    char *mem;
    _Atomic int32_t newest; /* the newest complete slot, -1: none */
} rtc_ring;

static rtc_slot *ring_slot(const rtc_ring *t, int32_t i)
{
    void *p = t->mem + (size_t)i * t->slot_bytes;
    return (rtc_slot *)p;
}

static float *ring_floats(const rtc_ring *t, int32_t i)
{
    void *p = t->mem + (size_t)i * t->slot_bytes + t->header;
    return (float *)p;
}

static sw_status ring_create(sw_rtc *r)
{
    rtc_ring *t = calloc(1, sizeof *t);
    if (!t)
        return sw_fail(r->ctx, SW_ENOMEM, "rtc: out of memory (telemetry)");
    r->tele = t;
    t->slots = r->tslots;
    t->header = (sizeof(rtc_slot) + 63) / 64 * 64;
    const size_t floats = (size_t)2 * r->ns + (size_t)r->nact;
    t->slot_bytes = (t->header + floats * sizeof(float) + 63) / 64 * 64;
    size_t bytes;
    if (!sw_mul_ok(t->slot_bytes, (size_t)t->slots, &bytes))
        return sw_fail(r->ctx, SW_EINVAL, "rtc: the telemetry ring's size overflows");
    t->mem = aligned_alloc(64, bytes);
    if (!t->mem)
        return sw_fail(r->ctx, SW_ENOMEM,
                       "rtc: out of memory allocating %d telemetry slots (%zu B)", t->slots, bytes);
    for (int32_t i = 0; i < t->slots; i++) {
        atomic_init(&ring_slot(t, i)->seq, 0);
        atomic_init(&ring_slot(t, i)->frame, 0);
    }
    atomic_init(&t->newest, -1);
    return SW_OK;
}

static void ring_destroy(sw_rtc *r)
{
    rtc_ring *t = (rtc_ring *)r->tele;
    if (!t)
        return;
    free(t->mem);
    free(t);
    r->tele = NULL;
}

/* The owner's write of frame r->frames (slopes and commands from the host arrays given). */
static void ring_write(sw_rtc *r, const float *slopes, const float *commands)
{
    rtc_ring *t = (rtc_ring *)r->tele;
    const int32_t i = (int32_t)((r->frames - 1) % t->slots);
    rtc_slot *s = ring_slot(t, i);
    const uint64_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, q + 1, memory_order_relaxed); /* odd: being written */
    atomic_thread_fence(memory_order_release); /* the odd seq before any of the writes below */
    atomic_store_explicit(&s->frame, r->frames, memory_order_relaxed);
    float *f = ring_floats(t, i);
    memcpy(f, slopes, (size_t)2 * r->ns * sizeof(float));
    memcpy(f + 2 * (size_t)r->ns, commands, (size_t)r->nact * sizeof(float));
    atomic_store_explicit(&s->seq, q + 2, memory_order_release); /* complete */
    atomic_store_explicit(&t->newest, i, memory_order_release);
}

/* ------------------------------------------------------------------ parameters */

void sw_rtc_params_default(sw_rtc_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    sw_centroid_params_default(&p->centroid);
    p->recon = SW_RTC_MVM;
    p->nact = 0;
    p->cm = NULL;
    p->fp16 = 0;
    sw_sabre_params_default(&p->sabre);
    p->slope_scale = 1.0;
    p->projection = SW_RTC_PROJ_CORNERS;
    p->projection_matrix = NULL;
    sw_controller_params_default(&p->controller);
    p->telemetry = 0;
}

/* 1 when all n floats are finite. */
static int all_finite(const float *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(a[i]))
            return 0;
    return 1;
}

/* A host copy of n floats (NULL on failure). */
static float *copy_floats(const float *src, int64_t n)
{
    float *d = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (d && n > 0)
        memcpy(d, src, (size_t)n * sizeof(float));
    return d;
}

/* The checks that need no allocation. */
static sw_status check_params(sw_context *ctx, const sw_rtc_params *p)
{
    if (p->recon != SW_RTC_MVM && p->recon != SW_RTC_SABRE)
        return sw_fail(ctx, SW_EINVAL, "rtc: unknown reconstructor %d (MVM or SABRE)",
                       (int)p->recon);
    if (p->nact < 1 || p->nact > (1 << 24))
        return sw_fail(ctx, SW_EINVAL, "rtc: nact = %d commands; 1..%d allowed", p->nact, 1 << 24);
    if (p->controller.nfilter < 0 || p->controller.nfilter > p->nact ||
        (p->controller.nfilter > 0 && !p->controller.filter))
        return sw_fail(ctx, SW_EINVAL,
                       "rtc: the controller filters %d modes (0..%d, with a filter)",
                       (int)p->controller.nfilter, (int)p->nact);
    if (p->controller.nact != p->nact)
        return sw_fail(ctx, SW_EINVAL,
                       "rtc: the controller has nact = %d commands but the chain has nact = %d "
                       "(set controller.nact = nact)",
                       p->controller.nact, p->nact);
    if (p->telemetry < 0 || p->telemetry > RTC_MAX_TELEMETRY)
        return sw_fail(ctx, SW_EINVAL, "rtc: telemetry = %d slots; 0..%d allowed", p->telemetry,
                       RTC_MAX_TELEMETRY);
    if (p->centroid.slope_layout != SW_SLOPES_BLOCKS)
        return sw_fail(ctx, SW_EINVAL,
                       "rtc: the chain takes the slopes as x block then y block "
                       "(slope_layout SW_SLOPES_BLOCKS)");
    if (p->recon == SW_RTC_MVM) {
        if (!p->cm)
            return sw_fail(ctx, SW_EINVAL, "rtc: MVM needs the control matrix cm (NULL given)");
        if (p->fp16 != 0 && p->fp16 != 1)
            return sw_fail(ctx, SW_EINVAL, "rtc: fp16 = %d; 0 or 1", p->fp16);
        return SW_OK;
    }
    if (!(isfinite(p->slope_scale) && p->slope_scale > 0.0))
        return sw_fail(ctx, SW_EINVAL,
                       "rtc: slope_scale = %g; a finite positive factor (pixels to the slopes "
                       "sabre takes) is needed",
                       p->slope_scale);
    if (p->projection != SW_RTC_PROJ_CORNERS && p->projection != SW_RTC_PROJ_GLOBAL &&
        p->projection != SW_RTC_PROJ_LOCAL && p->projection != SW_RTC_PROJ_LOCAL_PUPIL)
        return sw_fail(ctx, SW_EINVAL,
                       "rtc: unknown projection %d (CORNERS, GLOBAL, LOCAL or LOCAL_PUPIL)",
                       (int)p->projection);
    const char *pname = p->projection == SW_RTC_PROJ_GLOBAL  ? "global"
                        : p->projection == SW_RTC_PROJ_LOCAL ? "local"
                                                             : "local (pupil)";
    if (p->projection != SW_RTC_PROJ_CORNERS && !p->projection_matrix)
        return sw_fail(ctx, SW_EINVAL,
                       "rtc: the %s projection needs projection_matrix (NULL given)", pname);
    if ((p->projection == SW_RTC_PROJ_LOCAL || p->projection == SW_RTC_PROJ_LOCAL_PUPIL) &&
        p->sabre.extend_eq17 != 1)
        return sw_fail(ctx, SW_EINVAL,
                       "rtc: the %s projection needs a D-SABRE plan with sabre.extend_eq17 = 1",
                       pname);
    const sw_sh_geometry *g = &p->centroid.geometry;
    if ((p->sabre.nx != 0 && p->sabre.nx != g->nx) || (p->sabre.ny != 0 && p->sabre.ny != g->ny))
        return sw_fail(ctx, SW_EINVAL,
                       "rtc: sabre.nx, ny = %d, %d differ from the geometry's %d x %d lenslets "
                       "(leave them 0 or equal)",
                       p->sabre.nx, p->sabre.ny, g->nx, g->ny);
    return SW_OK;
}

/* W <- W - Z (Z^T W): W nact x cols row-major (float), Z nact x nf column-major; in double. The
 * filter's entries are checked by the controller's own check, which runs first on the caller's
 * parameters (sw_controller_create below sees a copy without it). */
static sw_status fold_filter(sw_context *ctx, const float *z, int32_t nf, int32_t nact,
                             int32_t cols, float *w)
{
    if (nf > nact || !all_finite(z, (int64_t)nact * nf))
        return sw_fail(ctx, SW_EINVAL,
                       "rtc: the controller's filter (%d modes) is not finite or "
                       "has more modes than commands",
                       (int)nf);
    if (sw_loop_fold_filter(z, nf, nact, cols, w) != 0)
        return sw_fail(ctx, SW_ENOMEM, "rtc: out of memory (filter)");
    return SW_OK;
}

/* The D-SABRE plan of a SABRE chain and its projection. */
static sw_status make_sabre(sw_rtc *r, const uint8_t *valid)
{
    const sw_rtc_params *p = &r->p;
    sw_sabre_params sp = p->sabre;
    sp.nx = r->nx;
    sp.ny = r->ny;
    sp.valid = valid;
    sw_status st = sw_sabre_create(r->ctx, &sp, &r->sabre);
    if (st != SW_OK)
        return st;
    sw_sabre_info info;
    sw_sabre_get_info(r->sabre, &info);
    r->nvalues = sw_sabre_lattice_values(&info.lattice);
    const int64_t corners = (int64_t)(r->nx + 1) * (r->ny + 1);
    if (p->projection == SW_RTC_PROJ_GLOBAL) {
        if ((int64_t)r->nact * r->nvalues > RTC_MAX_ELEMENTS)
            return sw_fail(r->ctx, SW_EINVAL,
                           "rtc: the global projection matrix (%d x %lld) is too large", r->nact,
                           (long long)r->nvalues);
        if (p->projection_rows != r->nact || (int64_t)p->projection_cols != r->nvalues)
            return sw_fail(r->ctx, SW_EINVAL,
                           "rtc: the global projection matrix is %d x %d; the plan needs nact x "
                           "nvalues = %d x %lld (the values of its extended lattice)",
                           p->projection_rows, p->projection_cols, r->nact, (long long)r->nvalues);
        if (!all_finite(p->projection_matrix, (int64_t)r->nact * r->nvalues))
            return sw_fail(r->ctx, SW_EINVAL,
                           "rtc: the global projection matrix (nact x nvalues = %d x %lld, the "
                           "values of the plan's extended lattice) has a non-finite entry",
                           r->nact, (long long)r->nvalues);
        r->proj = copy_floats(p->projection_matrix, (int64_t)r->nact * r->nvalues);
        r->sab_values = malloc((size_t)r->nvalues * sizeof(float));
        if (!r->proj || !r->sab_values)
            return sw_fail(r->ctx, SW_ENOMEM, "rtc: out of memory (projection)");
        r->p.projection_matrix = r->proj;
    } else {
        if (r->nact != corners)
            return sw_fail(r->ctx, SW_EINVAL,
                           "rtc: the %s projection gives the %lld Fried corners of the %d x %d "
                           "array, but nact = %d",
                           p->projection == SW_RTC_PROJ_CORNERS ? "corners" : "local",
                           (long long)corners, r->nx, r->ny, r->nact);
        if (p->projection == SW_RTC_PROJ_LOCAL) {
            /* the caller's size, which sw_sabre_set_projection checks against the window */
            st = sw_sabre_set_projection(r->sabre, p->projection_matrix, p->projection_rows,
                                         p->projection_cols);
            if (st != SW_OK)
                return st;
            r->p.projection_matrix = NULL; /* copied by the sabre plan */
        } else if (p->projection == SW_RTC_PROJ_LOCAL_PUPIL) {
            /* k^2 stacked w^2 x nl matrices */
            const int32_t w2 = info.window * info.window, G = info.k * info.k;
            if ((int64_t)p->projection_rows != (int64_t)G * w2)
                return sw_fail(r->ctx, SW_EINVAL,
                               "rtc: the local (pupil) projection has %d rows; the plan's %d "
                               "partitions of %d x %d actuators need %lld (k^2 w^2, stacked)",
                               p->projection_rows, G, info.window, info.window, (long long)G * w2);
            st = sw_sabre_set_projection_partitions(r->sabre, p->projection_matrix, G, w2,
                                                    p->projection_cols);
            if (st != SW_OK)
                return st;
            r->p.projection_matrix = NULL; /* copied by the sabre plan */
        }
    }
    r->sab_slopes = calloc((size_t)2 * r->nx * r->ny, sizeof(float));
    if (!r->sab_slopes)
        return sw_fail(r->ctx, SW_ENOMEM, "rtc: out of memory (sabre slopes)");
    return SW_OK;
}

static sw_status build(sw_rtc *r)
{
    sw_rtc_params *p = &r->p;
    sw_context *ctx = r->ctx;
    sw_status st;

    /* 1. the centroid plan: one frame, host path on the CPU, device path on CUDA (the frame
     *    buffer and the device result are rtc_cuda.cu's) */
    sw_centroid_params cp = p->centroid;
    cp.max_frames = 1;
    cp.path = r->gpu ? SW_CENTROID_DEVICE : SW_CENTROID_HOST;
    st = sw_centroid_create(ctx, &cp, &r->cent);
    if (st != SW_OK)
        return st;
    r->nx = cp.geometry.nx;
    r->ny = cp.geometry.ny;
    r->ns = sw_centroid_plan_slopes(r->cent);
    if (r->ns < 1)
        return sw_fail(ctx, SW_EINVAL, "rtc: the geometry's mask has no valid lenslet");
    r->slope_l = malloc((size_t)r->ns * sizeof(int32_t));
    if (!r->slope_l)
        return sw_fail(ctx, SW_ENOMEM, "rtc: out of memory");
    for (int32_t k = 0; k < r->ns; k++)
        r->slope_l[k] = sw_centroid_plan_slope_lenslet(r->cent, k);

    /* 2. the reconstructor */
    if (p->recon == SW_RTC_MVM) {
        const int64_t n = (int64_t)r->nact * 2 * r->ns;
        if (n > RTC_MAX_ELEMENTS)
            return sw_fail(ctx, SW_EINVAL, "rtc: the control matrix (%d x %d) is too large",
                           r->nact, 2 * r->ns);
        if (!all_finite(p->cm, n))
            return sw_fail(ctx, SW_EINVAL,
                           "rtc: the control matrix (nact x 2 ns = %d x %d) has a non-finite entry",
                           r->nact, 2 * r->ns);
        r->cm = copy_floats(p->cm, n);
        if (!r->cm)
            return sw_fail(ctx, SW_ENOMEM, "rtc: out of memory (control matrix)");
        p->cm = r->cm;
        if (p->controller.nfilter > 0 && p->controller.filter) {
            /* the unseen-mode filter folded into C (see 3. below), before FP16's range check */
            st = fold_filter(ctx, p->controller.filter, p->controller.nfilter, r->nact, 2 * r->ns,
                             r->cm);
            if (st != SW_OK)
                return st;
        }
        if (p->fp16 && r->gpu) {
            /* FP16 holds magnitudes up to 65504: C itself, and for PI M = B^T C, whose entries
             * are bounded by the norms of C's columns (B has orthonormal columns) */
            const int pi = p->controller.kind == SW_CTRL_PI;
            const int32_t ncol = 2 * r->ns;
            double worst = 0.0;
            for (int32_t j = 0; j < ncol; j++) {
                double col2 = 0.0;
                for (int32_t a = 0; a < r->nact; a++) {
                    const double v = fabs((double)r->cm[(int64_t)a * ncol + j]);
                    col2 += v * v;
                    if (!pi && v > worst)
                        worst = v;
                }
                if (pi && sqrt(col2) > worst)
                    worst = sqrt(col2);
            }
            if (worst > 65504.0)
                return sw_fail(ctx, SW_EINVAL,
                               "rtc: the control matrix has entries up to %g%s, beyond FP16's "
                               "65504: scale it (and the gain) or use fp16 = 0",
                               worst, pi ? " (column norms, which bound B^T C for PI)" : "");
        }
    } else {
        p->cm = NULL;
        st = make_sabre(r, p->centroid.geometry.valid); /* D-SABRE's mask: the geometry's */
        if (st != SW_OK)
            return st;
    }
    /* the caller's arrays were copied (by the plans above or here): forget their addresses */
    p->centroid.geometry.valid = NULL;
    p->centroid.dark = NULL;
    p->centroid.flat = NULL;
    p->centroid.lut = NULL;
    p->sabre.valid = NULL;

    /* 3. the controller. Its unseen-mode filter is folded into a matrix reconstructor (C, or the
     *    global projection P) here, W <- W - Z (Z^T W), so that r = W x comes out filtered and
     *    neither backend filters per frame; the corners and local projections filter r itself
     *    (controller.c on the CPU, rt_filter on the GPU). */
    sw_controller_params cpar = p->controller;
    if (cpar.nfilter > 0 && cpar.filter && p->recon == SW_RTC_SABRE &&
        p->projection == SW_RTC_PROJ_GLOBAL) {
        st = fold_filter(ctx, cpar.filter, cpar.nfilter, r->nact, (int32_t)r->nvalues, r->proj);
        if (st != SW_OK)
            return st;
    }
    if (p->recon == SW_RTC_MVM || p->projection == SW_RTC_PROJ_GLOBAL) {
        cpar.nfilter = 0; /* folded */
        cpar.filter = NULL;
    }
    st = sw_controller_create(ctx, &cpar, &r->ctrl);
    if (st != SW_OK)
        return st;
    p->controller.filter = NULL; /* copied (or folded) */
    p->controller.modes = NULL;
    p->controller.kp = NULL;
    p->controller.ki = NULL;

    /* host buffers: the slopes (the telemetry's staging on CUDA) and the commands pinned on
     * CUDA, so that the graph's copies write them directly */
    r->pinned = r->gpu;
    r->slopes = sw_host_alloc(ctx, (size_t)2 * r->ns * sizeof(float), r->pinned);
    r->commands = sw_host_alloc(ctx, (size_t)r->nact * sizeof(float), r->pinned);
    r->rvec = calloc((size_t)r->nact, sizeof(float));
    if (!r->slopes || !r->commands || !r->rvec)
        return sw_fail(ctx, SW_ENOMEM, "rtc: out of memory (buffers)");

    /* 4. telemetry */
    if (r->tslots > 0) {
        st = ring_create(r);
        if (st != SW_OK)
            return st;
    }
    return SW_OK;
}

int sw_loop_corner_seen(const uint8_t *valid, int32_t nx, int32_t ny, int32_t cx, int32_t cy)
{
    if (cx < 0 || cy < 0 || cx > nx || cy > ny)
        return 0;
    if (!valid)
        return 1;
    for (int32_t iy = cy - 1; iy <= cy; iy++)
        for (int32_t ix = cx - 1; ix <= cx; ix++)
            if (ix >= 0 && iy >= 0 && ix < nx && iy < ny && valid[(int64_t)iy * nx + ix])
                return 1;
    return 0;
}

/* LOCAL_PUPIL's matrices (sw_rtc_params_sabre): k^2 window projections, stacked, into P. */
static sw_status local_pupil_matrices(sw_context *ctx, const sw_sabre_params *sabre,
                                      const sw_dm_params *dm, const sw_sabre_info *info,
                                      const uint8_t *square_mask, float *P)
{
    const int32_t k = info->k, m = info->m, w = info->window, S = info->lattice.sx;
    const int32_t offx = info->lattice.offx, offy = info->lattice.offy;
    const int32_t nx = sabre->nx, ny = sabre->ny, w2 = w * w;
    const int32_t nl = info->local_values;
    sw_projector_params pp;
    sw_projector_params_window(&pp, dm, w);
    uint8_t *smask = malloc((size_t)w2), *active = malloc((size_t)w2);
    if (!smask || !active) {
        free(smask);
        free(active);
        return sw_fail(ctx, SW_ENOMEM, "rtc: out of memory (the local projection's masks)");
    }
    pp.square_mask = smask;
    sw_status st = SW_OK;
    for (int32_t b = 0; b < k && st == SW_OK; b++)
        for (int32_t a = 0; a < k && st == SW_OK; a++) {
            /* the window's first square along each axis (sabre.h): clamp(a m - OL, 0, S - w) */
            int32_t x0 = a * m - sabre->overlap, y0 = b * m - sabre->overlap;
            x0 = x0 < 0 ? 0 : (x0 > S - w ? S - w : x0);
            y0 = y0 < 0 ? 0 : (y0 > S - w ? S - w : y0);
            for (int32_t j = 0; j < w; j++)
                for (int32_t i = 0; i < w; i++) {
                    /* window square (i, j) = extended square (x0 + i, y0 + j), centred on
                     * lenslet corner (x0 + i + 1 - offx, y0 + j + 1 - offy) */
                    const int32_t sq = j * w + i;
                    active[sq] = (uint8_t)sw_loop_corner_seen(sabre->valid, nx, ny,
                                                              x0 + i + 1 - offx, y0 + j + 1 - offy);
                    smask[sq] =
                        square_mask ? square_mask[(int64_t)(y0 + j) * S + x0 + i] != 0 : active[sq];
                }
            st = sw_projector_solve_masked(ctx, &pp, active, 1,
                                           P + ((size_t)b * k + a) * (size_t)w2 * nl);
        }
    free(smask);
    free(active);
    return st;
}

sw_status sw_rtc_params_sabre(sw_context *ctx, const sw_sabre_params *sabre, const sw_dm_params *dm,
                              sw_rtc_projection projection, const uint8_t *square_mask,
                              double slope_scale, sw_rtc_params *rp, float **matrix)
{
    if (!sabre || !dm || !rp || !matrix)
        return sw_fail(ctx, SW_EINVAL, "sw_rtc_params_sabre: NULL argument");
    *matrix = NULL;
    if (!(slope_scale > 0.0) || !isfinite(slope_scale))
        return sw_fail(ctx, SW_EINVAL, "rtc: slope_scale %g is not a positive number", slope_scale);
    rp->recon = SW_RTC_SABRE;
    rp->sabre = *sabre;
    rp->slope_scale = slope_scale;
    rp->projection = projection;
    rp->projection_matrix = NULL;
    rp->projection_rows = rp->projection_cols = 0;
    if (projection == SW_RTC_PROJ_CORNERS)
        return SW_OK;
    if (projection != SW_RTC_PROJ_GLOBAL && projection != SW_RTC_PROJ_LOCAL &&
        projection != SW_RTC_PROJ_LOCAL_PUPIL)
        return sw_fail(ctx, SW_EINVAL, "rtc: unknown projection %d", (int)projection);
    if (projection == SW_RTC_PROJ_LOCAL_PUPIL && sabre->extend_eq17 != 1)
        return sw_fail(ctx, SW_EINVAL,
                       "rtc: the local (pupil) projection needs a D-SABRE plan with extend_eq17 = "
                       "1 (every lenslet corner a square centre)");
    /* a throwaway plan tells the lattice (global) and the window (local) */
    sw_sabre *tmp = NULL;
    SW_TRY(sw_sabre_create(ctx, sabre, &tmp));
    sw_sabre_info info;
    sw_sabre_get_info(tmp, &info);
    sw_sabre_destroy(tmp);
    sw_projector_params pp;
    int32_t rows, cols;
    if (projection == SW_RTC_PROJ_GLOBAL) {
        sw_projector_params_global(&pp, dm, &info.lattice);
        pp.square_mask = square_mask;
        const int64_t nv = sw_sabre_lattice_values(&info.lattice);
        if (nv > INT32_MAX)
            return sw_fail(ctx, SW_EINVAL, "rtc: the extended lattice has too many values");
        rows = pp.nax * pp.nay;
        cols = (int32_t)nv;
    } else {
        sw_projector_params_window(&pp, dm, info.window);
        rows = info.window * info.window *
               (projection == SW_RTC_PROJ_LOCAL_PUPIL ? info.k * info.k : 1);
        cols = info.local_values;
    }
    if ((int64_t)rows * cols > RTC_MAX_ELEMENTS) /* the chain refuses it anyway (make_sabre) */
        return sw_fail(ctx, SW_EINVAL, "rtc: the %d x %d projection matrix is too large", (int)rows,
                       (int)cols);
    float *P = malloc((size_t)rows * cols * sizeof(float) + 1);
    uint8_t *active = projection == SW_RTC_PROJ_GLOBAL ? malloc((size_t)pp.nax * pp.nay) : NULL;
    if (!P || (projection == SW_RTC_PROJ_GLOBAL && !active)) {
        free(P);
        free(active);
        return sw_fail(ctx, SW_ENOMEM, "rtc: out of memory for the %d x %d projection matrix",
                       (int)rows, (int)cols);
    }
    sw_status st;
    if (projection == SW_RTC_PROJ_GLOBAL) {
        /* the Fried actuators the sensor sees; the others left out of the fit */
        for (int32_t cy = 0; cy < pp.nay; cy++)
            for (int32_t cx = 0; cx < pp.nax; cx++)
                active[(int64_t)cy * pp.nax + cx] =
                    (uint8_t)sw_loop_corner_seen(sabre->valid, sabre->nx, sabre->ny, cx, cy);
        st = sw_projector_solve_masked(ctx, &pp, active, 0, P);
    } else if (projection == SW_RTC_PROJ_LOCAL) {
        st = sw_projector_solve_masked(ctx, &pp, NULL, 0, P);
    } else {
        st = local_pupil_matrices(ctx, sabre, dm, &info, square_mask, P);
    }
    free(active);
    if (st != SW_OK) {
        free(P);
        return st;
    }
    rp->projection_matrix = P;
    rp->projection_rows = rows;
    rp->projection_cols = cols;
    *matrix = P;
    return SW_OK;
}

sw_status sw_rtc_create(sw_context *ctx, const sw_rtc_params *p, sw_rtc **out)
{
    if (out)
        *out = NULL;
    if (!ctx || !p || !out)
        return sw_fail(ctx, SW_EINVAL, "sw_rtc_create: NULL context, parameters or output");
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;
    const int gpu = sw_context_backend(ctx) == SW_BACKEND_CUDA;
#ifndef SW_HAVE_CUDA
    if (gpu)
        return sw_fail(ctx, SW_EUNSUPPORTED, "rtc: built without CUDA");
#endif
    sw_rtc *r = calloc(1, sizeof *r);
    if (!r)
        return sw_fail(ctx, SW_ENOMEM, "rtc: out of memory");
    r->ctx = ctx;
    r->p = *p;
    r->gpu = gpu;
    r->nact = p->nact;
    r->tslots = p->telemetry;
    r->last_us = -1.0;
    st = build(r);
#ifdef SW_HAVE_CUDA
    if (st == SW_OK && gpu)
        st = sw_rtc_gpu_create(r);
#endif
    if (st != SW_OK) {
        sw_rtc_destroy(r);
        return st;
    }
    *out = r;
    return SW_OK;
}

void sw_rtc_destroy(sw_rtc *r)
{
    if (!r)
        return;
    if (r->band)
        r->band->r = NULL; /* the band chain copied what it needs; it lives on until destroyed */
#ifdef SW_HAVE_CUDA
    if (r->gpu_state)
        sw_rtc_gpu_destroy(r);
#endif
    sw_centroid_destroy(r->cent);
    sw_sabre_destroy(r->sabre);
    sw_controller_destroy(r->ctrl);
    free(r->slope_l);
    free(r->cm);
    free(r->proj);
    free(r->sab_slopes);
    free(r->sab_values);
    free(r->rvec);
    if (r->slopes)
        sw_host_free(r->slopes, r->pinned);
    if (r->commands)
        sw_host_free(r->commands, r->pinned);
    ring_destroy(r);
    free(r);
}

sw_status sw_rtc_reset(sw_rtc *r)
{
    if (!r)
        return sw_fail(NULL, SW_EINVAL, "sw_rtc_reset: NULL plan");
    sw_controller_reset(r->ctrl);
    memset(r->commands, 0, (size_t)r->nact * sizeof(float));
#ifdef SW_HAVE_CUDA
    if (r->gpu)
        return sw_rtc_gpu_reset(r);
#endif
    return SW_OK;
}

sw_status sw_rtc_set_gains(sw_rtc *r, const float *kp, const float *ki)
{
    if (!r)
        return sw_fail(NULL, SW_EINVAL, "sw_rtc_set_gains: NULL plan");
#ifdef SW_HAVE_CUDA
    if (r->gpu) {
        /* the integrals live on the device: rescaled there by ki_old / ki_new (bumpless) */
        const int32_t nm = sw_controller_modes(r->ctrl);
        float *scale = nm > 0 ? malloc((size_t)nm * sizeof(float)) : NULL;
        if (nm > 0 && !scale)
            return sw_fail(r->ctx, SW_ENOMEM, "rtc: out of memory");
        for (int32_t i = 0; i < nm; i++) /* as sw_controller_set_gains: 0 -> ki restarts I */
            scale[i] = !ki || ki[i] == 0.0f     ? 1.0f
                       : r->ctrl->ki[i] != 0.0f ? (float)((double)r->ctrl->ki[i] / ki[i])
                                                : 0.0f;
        sw_status st = sw_controller_set_gains(r->ctrl, kp, ki);
        if (st == SW_OK)
            st = sw_rtc_gpu_set_gains(r, scale);
        free(scale);
        return st;
    }
#endif
    return sw_controller_set_gains(r->ctrl, kp, ki);
}

int32_t sw_rtc_slopes(const sw_rtc *r)
{
    return r ? r->ns : 0;
}

const float *sw_rtc_commands(const sw_rtc *r)
{
    return r ? r->commands : NULL;
}

double sw_rtc_last_us(const sw_rtc *r)
{
    return r ? r->last_us : -1.0;
}

/* ------------------------------------------------------------------ the CPU run */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

static sw_status cpu_reconstruct(sw_rtc *r);

/* Stages 1-3 on the CPU: frame -> r->slopes -> r->rvec -> r->commands. */
static sw_status cpu_run(sw_rtc *r, const sw_image *frame)
{
    sw_centroid_result res;
    memset(&res, 0, sizeof res);
    res.frames = 1;
    res.lenslets = r->nx * r->ny;
    res.nslopes = r->ns;
    res.memory = SW_MEM_HOST;
    res.slopes = r->slopes;
    sw_status st = sw_centroid_run(r->cent, frame, &res);
    if (st == SW_OK)
        st = cpu_reconstruct(r);
    if (st != SW_OK)
        return st;
    return sw_controller_step(r->ctrl, r->rvec, r->commands);
}

sw_status sw_rtc_reconstruct(sw_rtc *r, const float *slopes, float *rvec)
{
    if (r->gpu)
        return sw_fail(r->ctx, SW_EUNSUPPORTED, "rtc: sw_rtc_reconstruct runs CPU chains only");
    memcpy(r->slopes, slopes, (size_t)2 * r->ns * sizeof(float));
    const sw_status st = cpu_reconstruct(r);
    if (st == SW_OK)
        memcpy(rvec, r->rvec, (size_t)r->nact * sizeof(float));
    return st;
}

/* Step 2 on the host: r->rvec from r->slopes. */
static sw_status cpu_reconstruct(sw_rtc *r)
{
    sw_status st = SW_OK;
    const int32_t n2 = 2 * r->ns;
    if (r->p.recon == SW_RTC_MVM) {
        /* r = C s, C nact x 2 ns row-major */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, r->nact, n2, 1.0f, r->cm, n2, r->slopes, 1, 0.0f,
                    r->rvec, 1);
    } else {
        /* the slopes over the mask into D-SABRE's x block / y block of all nx ny lenslets (the
         * lenslets outside the mask stay 0 and are not read), in sabre's units */
        const int32_t n = r->nx * r->ny;
        const float scale = (float)r->p.slope_scale;
        for (int32_t k = 0; k < r->ns; k++) {
            const int32_t l = r->slope_l[k];
            r->sab_slopes[l] = r->slopes[k] * scale;
            r->sab_slopes[n + l] = r->slopes[r->ns + k] * scale;
        }
        if (r->p.projection == SW_RTC_PROJ_GLOBAL) {
            st = sw_sabre_run(r->sabre, r->sab_slopes, SW_MEM_HOST, r->sab_values, NULL);
            if (st != SW_OK)
                return st;
            /* r = P c (seed 002 Eq. 13's solution, P nact x nvalues row-major) */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, r->nact, (int)r->nvalues, 1.0f, r->proj,
                        (int)r->nvalues, r->sab_values, 1, 0.0f, r->rvec, 1);
        } else {
            st = sw_sabre_run(r->sabre, r->sab_slopes, SW_MEM_HOST, NULL, r->rvec);
            if (st != SW_OK)
                return st;
        }
    }
    return SW_OK;
}

sw_status sw_rtc_run(sw_rtc *r, const sw_image *frame, float *commands, float *slopes)
{
    if (!r)
        return sw_fail(NULL, SW_EINVAL, "sw_rtc_run: NULL plan");
    sw_context *ctx = r->ctx;
    if (!frame)
        return sw_fail(ctx, SW_EINVAL, "sw_rtc_run: NULL frame");
    if (r->band)
        return sw_fail(ctx, SW_EINVAL,
                       "sw_rtc_run: a band chain runs on this plan (sw_rtc_band_destroy first)");
    sw_status st = sw_image_check(ctx, frame);
    if (st != SW_OK)
        return st;
    const sw_centroid_params *cp = &r->p.centroid;
    if (frame->width != cp->width || frame->height != cp->height || frame->type != cp->type)
        return sw_fail(ctx, SW_EINVAL,
                       "rtc: the frame is %d x %d %s; the plan takes one %d x %d %s frame",
                       frame->width, frame->height, sw_pixel_type_string(frame->type), cp->width,
                       cp->height, sw_pixel_type_string(cp->type));
    if (frame->memory == SW_MEM_DEVICE && !r->gpu)
        return sw_fail(ctx, SW_EINVAL, "rtc: a CPU plan takes frames in host memory, not device");
    if (frame->memory != SW_MEM_HOST && frame->memory != SW_MEM_PINNED &&
        frame->memory != SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL, "rtc: unknown frame memory kind %d", (int)frame->memory);

    const double t0 = now_us();
    if (r->gpu) {
#ifdef SW_HAVE_CUDA
        st = sw_rtc_gpu_run(r, frame);
#else
        st = sw_fail(ctx, SW_EUNSUPPORTED, "rtc: built without CUDA");
#endif
    } else {
        st = cpu_run(r, frame);
    }
    if (st != SW_OK)
        return st;
    r->frames++;
    if (commands)
        memcpy(commands, r->commands, (size_t)r->nact * sizeof(float));
#ifdef SW_HAVE_CUDA
    if (r->gpu && r->tslots > 0) {
        st = sw_rtc_gpu_finish(r); /* the slopes' copy into r->slopes, queued after the commands */
        if (st != SW_OK)
            return st;
    }
#endif
    if (r->tslots > 0)
        ring_write(r, r->slopes, r->commands);
    if (slopes) {
        if (!r->gpu || r->tslots > 0) {
            memcpy(slopes, r->slopes, (size_t)2 * r->ns * sizeof(float));
        } else {
#ifdef SW_HAVE_CUDA
            st = sw_rtc_gpu_slopes(r, slopes);
            if (st != SW_OK)
                return st;
#endif
        }
    }
    r->last_us = now_us() - t0;
    return SW_OK;
}

/* ------------------------------------------------------------------ telemetry reader */

sw_status sw_rtc_telemetry_read(sw_rtc *r, int64_t *frame, float *slopes, float *commands)
{
    /* (a reader thread: failures are recorded per thread, not on the owner's context) */
    if (!r || !frame)
        return sw_fail(NULL, SW_EINVAL, "sw_rtc_telemetry_read: NULL plan or frame");
    rtc_ring *t = (rtc_ring *)r->tele;
    if (!t) {
        *frame = 0;
        return SW_OK; /* no ring: never anything to read (the message would race the owner) */
    }
    for (unsigned tries = 0;; tries++) {
        const int32_t i = atomic_load_explicit(&t->newest, memory_order_acquire);
        if (i < 0) {
            *frame = 0;
            return SW_OK;
        }
        rtc_slot *s = ring_slot(t, i);
        const uint64_t q0 = atomic_load_explicit(&s->seq, memory_order_acquire);
        if ((q0 & 1u) == 0) {
            const int64_t f = atomic_load_explicit(&s->frame, memory_order_relaxed);
            const float *src = ring_floats(t, i);
            if (slopes)
                memcpy(slopes, src, (size_t)2 * r->ns * sizeof(float));
            if (commands)
                memcpy(commands, src + 2 * (size_t)r->ns, (size_t)r->nact * sizeof(float));
            atomic_thread_fence(memory_order_acquire); /* the copies before the re-read */
            if (atomic_load_explicit(&s->seq, memory_order_relaxed) == q0) {
                *frame = f;
                return SW_OK;
            }
        }
        if (tries % 64 == 63)
            sched_yield(); /* the owner is rewriting this very slot (a ring of one) */
    }
}
